"""Optimisation passes over the IR, run in the order of ``PIPELINE``.

Each pass is a function ``graph -> (graph, changed)``. ``run`` applies
them, verifies the graph after each one when ``CHAINERJIT_CHECKS=1`` (the
test suite sets it), and prints the IR after the passes named in
``CHAINERJIT_PRINT_AFTER`` (comma-separated, or ``all``).
"""

import os
import sys

from chainerjit.passes import cse
from chainerjit.passes import dce
from chainerjit.passes import fold
from chainerjit.passes import fuse
from chainerjit.passes import hoist
from chainerjit.passes import keep
from chainerjit.passes import simplify


PIPELINE = (fold.fold_constants, cse.cse, simplify.simplify, dce.dce,
            hoist.hoist_projections, fuse.fuse_conv_batchnorm,
            fuse.fuse_lstm_step, fuse.fuse_linear_activation,
            fuse.fuse_relu_max_pooling, keep.keep_softmax)


def run(graph, pipeline=PIPELINE):
    """Runs the passes on ``graph`` and returns the result."""
    checks = os.environ.get('CHAINERJIT_CHECKS') == '1'
    print_after = set(filter(None, os.environ.get(
        'CHAINERJIT_PRINT_AFTER', '').split(',')))
    if checks:
        graph.verify()
    for p in pipeline:
        graph, changed = p(graph)
        if checks:
            graph.verify()
        if print_after & {'all', p.__name__}:
            sys.stderr.write('--- IR of %s after %s (%s) ---\n%s\n' % (
                graph.name, p.__name__,
                'changed' if changed else 'unchanged', graph))
    return graph
