"""A fast path for ``loss.backward()`` through jitted nodes, identical in
what it computes.

Once a model's forward and backward run compiled, Chainer's backprop
traversal around them is a large share of a training step: for every
node it enters device, hook and configuration contexts, builds ordered
dictionaries and checks each gradient against its input's shape and
dtype (at batch 64 of an MLP, more time than the compiled backward's
kernels after the matrix products).

Installed, it makes ``Variable.backward`` take ``_native.
lean_backward`` where the graph behind the loss holds a chainerjit node
(a jitted forward's ``CompiledFunction``): Chainer 7's ``Variable.
backward`` and ``_backprop_to_all`` in Cython, calling the same nodes'
``backward`` in the same order, summing the gradients in the same order
(with Chainer's own ``_reduce``) and setting the same leaves' ``grad``,
minus the steps that do nothing there: the CPU device context, the hooks
loop, and the check of the gradients of a chainerjit node and of the
loss fast path (``losses``), which are right by construction.
Chainer's own ``backward`` runs for anything else: a retained gradient
(``retain_grad=True``), double backprop, function hooks (global or on a
node), debug mode, a node with its own ``backward_accumulate``,
ChainerX or non-standard layouts, or a graph with no chainerjit node.

It is installed with the other fast paths
(``chainerjit.fastpaths``); set the environment variable
``CHAINERJIT_FAST_BACKWARD=0`` to keep Chainer's own ``backward``.
"""

import functools

import chainer

from chainerjit.fastpaths import _native

_chainer_backward = chainer.Variable.backward


# Chainer's docstring, for help(Variable.backward).
@functools.wraps(_chainer_backward)
def backward(self, retain_grad=False, enable_double_backprop=False,
             loss_scale=None):
    if retain_grad or enable_double_backprop or \
            not _native.lean_backward(self, loss_scale):
        _chainer_backward(self, retain_grad, enable_double_backprop,
                          loss_scale)
