"""Command line: ``python -m chainerjit export ...``.

Exports a model built by a factory function in the user's module::

    python -m chainerjit export mymodels:make_model --input 1,784 \\
        --output model.onnx --dynamic-batch

``--input`` gives an example input shape (repeat it for several inputs;
``--dtype`` sets their dtype); the model's ``forward`` is called in test
mode on zeros of those shapes and the recorded program is written.
"""

import argparse
import importlib
import os
import sys

import numpy


def _factory(spec):
    module_name, _, attr = spec.partition(':')
    if not attr:
        raise SystemExit('chainerjit export: give the factory as '
                         'module:function, e.g. mymodels:make_mlp')
    sys.path.insert(0, os.getcwd())
    return getattr(importlib.import_module(module_name), attr)


def _shape(text):
    return tuple(int(d) for d in text.split(',') if d)


def export_command(argv):
    parser = argparse.ArgumentParser(
        prog='python -m chainerjit export',
        description='Export a model built by a factory function to ONNX.')
    parser.add_argument('factory', help='module:function returning a Link')
    parser.add_argument('--input', type=_shape, action='append',
                        required=True, metavar='SHAPE',
                        help='example input shape, e.g. 1,784 (repeat for '
                        'several inputs)')
    parser.add_argument('--dtype', default='float32')
    parser.add_argument('--output', required=True)
    parser.add_argument('--dynamic-batch', action='store_true',
                        help='make axis 0 of every input symbolic')
    args = parser.parse_args(argv)

    from chainerjit import api
    from chainerjit import onnx_export

    model = _factory(args.factory)()
    inputs = tuple(numpy.zeros(s, dtype=args.dtype) for s in args.input)
    onnx_model = onnx_export.export_onnx(
        api.jit(model), inputs, args.output,
        dynamic_batch=args.dynamic_batch)
    print('wrote %s: inputs %s, outputs %s, %d nodes' % (
        args.output, [i.name for i in onnx_model.graph.input],
        [o.name for o in onnx_model.graph.output],
        len(onnx_model.graph.node)))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != 'export':
        raise SystemExit('usage: python -m chainerjit export '
                         'module:function --input SHAPE --output FILE '
                         '[--dynamic-batch] [--dtype float32]')
    export_command(argv[1:])


if __name__ == '__main__':
    main()
