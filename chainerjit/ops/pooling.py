"""Lowerings of chainer.functions.pooling.

They mirror Chainer's im2col CPU implementations; on the GPU Chainer uses
cuDNN or its own kernels, so those nodes stay on the generic path there.
"""

import functools
import operator

import numpy

from chainer.functions.pooling import average_pooling_2d
from chainer.functions.pooling import average_pooling_nd
from chainer.functions.pooling import max_pooling_nd
from chainer.utils import conv
from chainer.utils import conv_nd

from chainerjit.ops import Kernel
from chainerjit.ops import lowering


def _nd_attrs(node):
    return {'ksize': node.ksize, 'stride': node.stride, 'pad': node.pad,
            'cover_all': node.cover_all}


@lowering(max_pooling_nd.MaxPoolingND)
def lower_max_pooling_nd(node, ctx):
    """Maximum over each window of the ``-inf``-padded input."""
    if ctx.xp is not numpy:
        return None
    ksize, stride, pad = node.ksize, node.stride, node.pad
    cover_all = node.cover_all
    out_dims = ctx.out_shapes[0][2:]
    col_shape = (ctx.in_shapes[0][:2]
                 + (functools.reduce(operator.mul, ksize),) + out_dims)

    def max_pool(x):
        col = conv_nd.im2col_nd_cpu(x, ksize, stride, pad,
                                    pval=-float('inf'), cover_all=cover_all)
        return col.reshape(col_shape).max(axis=2)
    return Kernel(max_pool, attrs=_nd_attrs(node))


@lowering(average_pooling_2d.AveragePooling2D)
def lower_average_pooling_2d(node, ctx):
    """Mean over each window of the zero-padded input."""
    if ctx.xp is not numpy:
        return None
    args = (node.kh, node.kw, node.sy, node.sx, node.ph, node.pw)

    def average_pool(x):
        return conv.im2col_cpu(x, *args).mean(axis=(2, 3))
    return Kernel(average_pool, attrs={
        'ksize': (node.kh, node.kw), 'stride': (node.sy, node.sx),
        'pad': (node.ph, node.pw)})


@lowering(average_pooling_nd.AveragePoolingND)
def lower_average_pooling_nd(node, ctx):
    """Mean over each window, counting the padding (``pad_value=0``) or
    not (``pad_value=None``)."""
    if ctx.xp is not numpy:
        return None
    ksize, stride, pad = node.ksize, node.stride, node.pad
    cover_all = node.cover_all
    axes = tuple(range(2, 2 + len(ksize)))
    attrs = _nd_attrs(node)
    attrs['pad_value'] = node.pad_value

    def im2col(x):
        return conv_nd.im2col_nd_cpu(x, ksize, stride, pad,
                                     cover_all=cover_all)
    if node.pad_value == 0:
        return Kernel(lambda x: im2col(x).mean(axis=axes), attrs=attrs)
    width = node._get_pooling_width(numpy, ctx.in_shapes[0][2:],
                                    ctx.in_dtypes[0])
    return Kernel(lambda x: im2col(x).sum(axis=axes) / width, attrs=attrs)
