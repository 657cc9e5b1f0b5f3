"""Lowerings of chainer.functions.connection."""

from chainer.functions.connection import linear

from chainerjit.ops import Kernel
from chainerjit.ops import lowering


@lowering(linear.LinearFunction)
def lower_linear(node, ctx):
    if len(ctx.in_shapes) == 3:
        def linear_bias(x, W, b):
            y = x.dot(W.T).astype(x.dtype, copy=False)
            y += b
            return y
        return Kernel(linear_bias)
    return Kernel(lambda x, W: x.dot(W.T).astype(x.dtype, copy=False))
