"""Lowerings of chainer.functions.activation.

Each kernel mirrors the formula of the node's CPU ``forward`` (Chainer
uses cuDNN or fused CUDA kernels on GPU; the same formula runs there
through CuPy), except where that formula updates a boolean-masked
selection: on GPU those use the formula of ``forward_gpu``, which CuPy
runs without synchronizing.
"""

from chainer.functions.activation import clipped_relu
from chainer.functions.activation import elu
from chainer.functions.activation import hard_sigmoid
from chainer.functions.activation import leaky_relu
from chainer.functions.activation import log_softmax
from chainer.functions.activation import relu
from chainer.functions.activation import sigmoid
from chainer.functions.activation import softmax
from chainer.functions.activation import softplus
from chainer.functions.activation import swish
from chainer.functions.activation import tanh
from chainer import utils
import numpy

from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import lowering


@lowering(relu.ReLU)
def lower_relu(node, ctx):
    xp = ctx.xp

    def grad(xs, ys, gys, wanted):
        y, = ys
        gy, = gys
        return utils.force_array(gy * (y > 0)),  # as ReLUGrad2
    return Kernel(lambda x: xp.maximum(x, x.dtype.type(0)),
                  grad=GradRule(grad, outputs=(0,)))


@lowering(leaky_relu.LeakyReLU)
def lower_leaky_relu(node, ctx):
    slope = node.slope
    if ctx.xp is not numpy:
        # forward_gpu: ``y = x <= 0 ? (T)(slope * x) : x``, no mask.
        where = ctx.xp.where
        slope_t = ctx.in_dtypes[0].type(slope)
        return Kernel(lambda x: where(x <= 0, slope_t * x, x),
                      {'slope': slope})

    def fn(x):
        y = x.copy()
        y[x <= 0] *= slope
        return y
    return Kernel(fn, {'slope': slope})


@lowering(sigmoid.Sigmoid)
def lower_sigmoid(node, ctx):
    tanh_ = ctx.xp.tanh
    half = ctx.in_dtypes[0].type(0.5)
    return Kernel(lambda x: utils.force_array(tanh_(x * half) * half + half))


@lowering(tanh.Tanh)
def lower_tanh(node, ctx):
    tanh_ = ctx.xp.tanh
    return Kernel(lambda x: utils.force_array(tanh_(x)))


@lowering(softmax.Softmax)
def lower_softmax(node, ctx):
    exp = ctx.xp.exp
    axis = node.axis

    def fn(x):
        y = x - x.max(axis=axis, keepdims=True)
        exp(y, out=y)
        y /= y.sum(axis=axis, keepdims=True)
        return y
    return Kernel(fn, {'axis': axis})


@lowering(log_softmax.LogSoftmax)
def lower_log_softmax(node, ctx):
    logsumexp = log_softmax.logsumexp
    axis = node.axis
    return Kernel(lambda x: x - logsumexp(x, axis), {'axis': axis})


@lowering(elu.ELU)
def lower_elu(node, ctx):
    xp = ctx.xp
    alpha = node.alpha
    if xp is not numpy:
        # forward_gpu: ``y = x > 0 ? x : (T)(alpha * expm1(x))``.
        alpha_t = ctx.in_dtypes[0].type(alpha)
        return Kernel(lambda x: xp.where(x > 0, x, alpha_t * xp.expm1(x)),
                      {'alpha': alpha})

    def fn(x):
        y = x.copy()
        negzero = y <= 0
        y[negzero] = alpha * numpy.expm1(y[negzero])
        return y
    return Kernel(fn, {'alpha': alpha})


@lowering(softplus.Softplus)
def lower_softplus(node, ctx):
    xp = ctx.xp
    beta, beta_inv = node.beta, node.beta_inv
    dtype = ctx.out_dtypes[0]

    def fn(x):
        bx = beta * x
        y = (xp.fmax(bx, 0) + xp.log1p(xp.exp(-xp.fabs(bx)))) * beta_inv
        return utils.force_array(y, dtype)
    return Kernel(fn, {'beta': beta})


@lowering(hard_sigmoid.HardSigmoid)
def lower_hard_sigmoid(node, ctx):
    clip = ctx.xp.clip
    dtype = ctx.out_dtypes[0]
    return Kernel(
        lambda x: utils.force_array(clip(x * 0.2 + 0.5, 0.0, 1.0), dtype))


@lowering(clipped_relu.ClippedReLU)
def lower_clipped_relu(node, ctx):
    xp = ctx.xp
    cap = node.cap
    dtype = ctx.out_dtypes[0]
    return Kernel(
        lambda x: utils.force_array(xp.minimum(xp.maximum(0, x), cap), dtype),
        {'z': cap})


@lowering(swish.Swish)
def lower_swish(node, ctx):
    tanh_ = ctx.xp.tanh
    x_shape, beta_shape = ctx.in_shapes
    shape = (1,) + beta_shape + (1,) * (len(x_shape) - len(beta_shape) - 1)
    half = ctx.in_dtypes[0].type(0.5)

    def fn(x, beta):
        bx = beta.reshape(shape) * x
        return x * (tanh_(bx * half) * half + half)
    return Kernel(fn)
