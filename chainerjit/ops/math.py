"""Lowerings of chainer.functions.math.

Element-wise ops are described by tables mapping a FunctionNode class to
the operator or the name of the array-module function its ``forward``
applies; reductions, clipping and matrix products have their own
lowerings.
"""

import operator

from chainer.backends import cuda
from chainer.functions.loss import squared_error
from chainer.functions.math import arctanh
from chainer.functions.math import average
from chainer.functions.math import basic_math
from chainer.functions.math import clip
from chainer.functions.math import exponential
from chainer.functions.math import exponential_m1
from chainer.functions.math import fmod
from chainer.functions.math import hyperbolic
from chainer.functions.math import identity
from chainer.functions.math import linear_interpolate
from chainer.functions.math import logarithm_1p
from chainer.functions.math import logsumexp
from chainer.functions.math import matmul
from chainer.functions.math import maximum
from chainer.functions.math import minimum
from chainer.functions.math import minmax
from chainer.functions.math import sqrt
from chainer.functions.math import square
from chainer.functions.math import sum as sum_
from chainer.functions.math import trigonometric
from chainer import utils
import numpy

from chainerjit.ops import Kernel
from chainerjit.ops import lowering


# f(x): an operator, or the name of an array-module function.
_UNARY = {
    basic_math.Neg: operator.neg,
    basic_math.Absolute: abs,
    exponential.Exp: 'exp',
    exponential.Log: 'log',
    exponential.Log2: 'log2',
    exponential.Log10: 'log10',
    exponential_m1.Expm1: 'expm1',
    logarithm_1p.Log1p: 'log1p',
    sqrt.Sqrt: 'sqrt',
    square.Square: 'square',
    trigonometric.Sin: 'sin',
    trigonometric.Cos: 'cos',
    trigonometric.Tan: 'tan',
    trigonometric.Arcsin: 'arcsin',
    trigonometric.Arccos: 'arccos',
    trigonometric.Arctan: 'arctan',
    hyperbolic.Sinh: 'sinh',
    hyperbolic.Cosh: 'cosh',
    arctanh.Arctanh: 'arctanh',
}

# f(x0, x1), broadcasting.
_BINARY = {
    basic_math.Add: operator.add,
    basic_math.Sub: operator.sub,
    basic_math.Mul: operator.mul,
    basic_math.Div: operator.truediv,
    basic_math.PowVarVar: operator.pow,
    maximum.Maximum: 'maximum',
    minimum.Minimum: 'minimum',
    trigonometric.Arctan2: 'arctan2',
    fmod.Fmod: 'fmod',
}

# f(x, value), ``value`` cast to the dtype of ``x`` as Chainer does.
_WITH_CONSTANT = {
    basic_math.AddConstant: lambda x, value: x + value,
    basic_math.SubFromConstant: lambda x, value: value - x,
    basic_math.MulConstant: lambda x, value: value * x,
    basic_math.DivFromConstant: lambda x, value: value / x,
    basic_math.PowVarConst: lambda x, value: x ** value,
    basic_math.PowConstVar: lambda x, value: value ** x,
}


def _resolve(fn, xp):
    return getattr(xp, fn) if isinstance(fn, str) else fn


def _attr_value(value):
    """A constant as shown in printed IR."""
    return value.item() if isinstance(value, numpy.generic) else value


@lowering(*_UNARY)
def lower_unary(node, ctx):
    fn = _resolve(_UNARY[type(node)], ctx.xp)
    dtype = ctx.out_dtypes[0]
    return Kernel(lambda x: utils.force_array(fn(x), dtype))


@lowering(sqrt.RsqrtGPU)
def lower_rsqrt_gpu(node, ctx):
    # Recorded on GPU only (``F.rsqrt`` is ``1 / sqrt(x)`` on CPU).
    rsqrt = cuda.cupyx.rsqrt
    dtype = ctx.in_dtypes[0]
    return Kernel(lambda x: utils.force_array(rsqrt(x, dtype=dtype)))


@lowering(*_BINARY)
def lower_binary(node, ctx):
    fn = _resolve(_BINARY[type(node)], ctx.xp)
    dtype = ctx.out_dtypes[0]
    return Kernel(lambda x0, x1: utils.force_array(fn(x0, x1), dtype))


@lowering(*_WITH_CONSTANT)
def lower_with_constant(node, ctx):
    if not numpy.isscalar(node.value):
        return None
    fn = _WITH_CONSTANT[type(node)]
    value = ctx.in_dtypes[0].type(node.value)
    dtype = ctx.out_dtypes[0]
    return Kernel(lambda x: utils.force_array(fn(x, value), dtype),
                  {'value': _attr_value(node.value)})


@lowering(basic_math.MultiAdd)
def lower_multi_add(node, ctx):
    if len(ctx.in_shapes) == 1:
        return Kernel(lambda x: x)
    # MultiAdd.forward adds a later input in place when it has the shape
    # of the running sum: the shapes tell which ones.
    shape = numpy.broadcast_shapes(*ctx.in_shapes[:2])
    in_place = []
    for s in ctx.in_shapes[2:]:
        in_place.append(s == shape)
        shape = numpy.broadcast_shapes(s, shape)

    def fn(x0, x1, *xs):
        y = x0 + x1
        for x, add_in_place in zip(xs, in_place):
            if add_in_place:
                y += x
            else:
                y = x + y
        return utils.force_array(y)
    return Kernel(fn, {'n': len(ctx.in_shapes)})


@lowering(squared_error.SquaredError)
def lower_squared_error(node, ctx):
    dtype = ctx.out_dtypes[0]

    def fn(x0, x1):
        diff = x0 - x1
        return utils.force_array(diff * diff, dtype)
    return Kernel(fn)


@lowering(linear_interpolate.LinearInterpolate)
def lower_linear_interpolate(node, ctx):
    one = ctx.in_dtypes[0].type(1)
    return Kernel(lambda p, x, y: utils.force_array(p * x + (one - p) * y))


@lowering(identity.Identity)
def lower_identity(node, ctx):
    return Kernel(lambda *xs: xs, multi=True)


@lowering(clip.Clip)
def lower_clip(node, ctx):
    xp_clip = ctx.xp.clip
    x_min, x_max = node.x_min, node.x_max
    dtype = ctx.out_dtypes[0]
    return Kernel(
        lambda x: utils.force_array(xp_clip(x, x_min, x_max), dtype),
        {'x_min': _attr_value(x_min), 'x_max': _attr_value(x_max)})


@lowering(sum_.Sum)
def lower_sum(node, ctx):
    axis, keepdims = node.axis, node.keepdims
    return Kernel(lambda x: x.sum(axis=axis, keepdims=keepdims),
                  {'axis': axis, 'keepdims': keepdims})


@lowering(average.Mean)
def lower_mean(node, ctx):
    axis, keepdims = node.axis, node.keepdims
    return Kernel(lambda x: x.mean(axis=axis, keepdims=keepdims),
                  {'axis': axis, 'keepdims': keepdims})


@lowering(minmax.Max, minmax.Min)
def lower_max_min(node, ctx):
    fn = ctx.xp.amax if isinstance(node, minmax.Max) else ctx.xp.amin
    axis, keepdims = node.axis, node.keepdims
    return Kernel(lambda x: fn(x, axis=axis, keepdims=keepdims),
                  {'axis': axis, 'keepdims': keepdims})


@lowering(minmax.ArgMax, minmax.ArgMin)
def lower_arg_max_min(node, ctx):
    xp = ctx.xp
    fn = xp.argmax if isinstance(node, minmax.ArgMax) else xp.argmin
    axis = node.axis
    return Kernel(lambda x: xp.asarray(fn(x, axis=axis).astype(numpy.int32)),
                  {'axis': axis})


@lowering(logsumexp.LogSumExp)
def lower_logsumexp(node, ctx):
    xp = ctx.xp
    axis = node.axis
    m_shape = ctx.out_shapes[0]

    def fn(x):
        m = x.max(axis=axis, keepdims=True)
        y = utils.force_array(x - m)
        xp.exp(y, out=y)
        y_sum = y.sum(axis=axis)
        return xp.asarray(xp.log(y_sum) + m.reshape(m_shape))
    return Kernel(fn, {'axis': axis})


def _swap_last(trans, ndim):
    """Whether ``_matmul`` transposes an operand's last two axes."""
    return trans and ndim != 1


@lowering(matmul.MatMul)
def lower_matmul(node, ctx):
    xp_matmul = ctx.xp.matmul
    a_ndim, b_ndim = (len(s) for s in ctx.in_shapes)
    transa, transb = node.transa, node.transb
    if node.transc:
        transa, transb = not transb, not transa
        a_ndim, b_ndim = b_ndim, a_ndim
    swap_a = _swap_last(transa, a_ndim)
    swap_b = _swap_last(transb, b_ndim)
    swap_inputs = bool(node.transc)
    dtype = ctx.out_dtypes[0]

    def fn(a, b):
        if swap_inputs:
            a, b = b, a
        if swap_a:
            a = a.swapaxes(-1, -2)
        if swap_b:
            b = b.swapaxes(-1, -2)
        return utils.force_array(xp_matmul(a, b), dtype)
    return Kernel(fn, {'transa': node.transa, 'transb': node.transb,
                       'transc': node.transc})


@lowering(matmul.BatchMatMul)
def lower_batch_matmul(node, ctx):
    xp_matmul = ctx.xp.matmul
    a_shape, b_shape = (s[:2] + (-1,) for s in ctx.in_shapes)
    swap_a, swap_b = node.transa, node.transb

    def fn(a, b):
        a = a.reshape(a_shape)
        b = b.reshape(b_shape)
        if swap_a:
            a = a.swapaxes(-1, -2)
        if swap_b:
            b = b.swapaxes(-1, -2)
        return xp_matmul(a, b)
    return Kernel(fn, {'transa': swap_a, 'transb': swap_b})
