"""Lowerings of chainer.functions.activation."""

from chainer.functions.activation import relu

from chainerjit.ops import Kernel
from chainerjit.ops import lowering


@lowering(relu.ReLU)
def lower_relu(node, ctx):
    xp = ctx.xp
    return Kernel(lambda x: xp.maximum(x, x.dtype.type(0)))
