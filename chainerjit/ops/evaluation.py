"""Lowerings of chainer.functions.evaluation."""

from chainer.functions.evaluation import accuracy
import numpy

from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import lowering
from chainerjit.ops import rows_reduced
from chainerjit.ops.math import onnx_dtype


def _no_gradient(xs, ys, gys, wanted):
    """``FunctionNode.backward``'s default, which Accuracy keeps: no
    gradient for any input."""
    return None, None


_no_gradient.passes_none = True  # (autodiff makes no node of it)


@lowering(accuracy.Accuracy)
def lower_accuracy(node, ctx):
    """The share of rows whose arg max is the label, as
    ``Accuracy._forward`` computes it (its ``ignore_label`` branch
    included)."""
    xp = ctx.xp
    ignore_label = node.ignore_label
    dtype = ctx.in_dtypes[0]
    if ignore_label is None:
        def fn(y, t):
            pred = y.argmax(axis=1).reshape(t.shape)
            return xp.asarray((pred == t).mean(dtype=dtype))
        to_onnx = _accuracy_to_onnx(dtype)
    elif xp is numpy:
        def fn(y, t):
            mask = t == ignore_label
            ignore_cnt = mask.sum()
            pred = numpy.where(mask, ignore_label,
                               y.argmax(axis=1).reshape(t.shape))
            count = (pred == t).sum() - ignore_cnt
            total = t.size - ignore_cnt
            if total == 0:
                return numpy.asarray(0.0, dtype=dtype)
            return numpy.asarray(float(count) / total, dtype=dtype)
        to_onnx = None
    else:
        return None  # the generic path runs Accuracy's GPU formula
    return Kernel(fn, {'ignore_label': ignore_label},
                  grad=GradRule(_no_gradient), onnx=to_onnx, fresh=True,
                  lengths=rows_reduced)


def _accuracy_to_onnx(dtype):
    def to_onnx(b, ins, outs):
        y, t = ins
        pred = b.op('ArgMax', [y], axis=1, keepdims=0)
        pred = b.op('Reshape', pred + b.op('Shape', [t]))
        hits = b.op('Equal', pred + b.op('Cast', [t], to=onnx_dtype(
            numpy.int64)))
        b.op('ReduceMean', b.op('Cast', hits, to=onnx_dtype(dtype)), outs,
             keepdims=0)
    return to_onnx
