"""Lowerings of chainer.functions.activation.

Each kernel mirrors the formula of the node's CPU ``forward`` (Chainer
uses cuDNN or fused CUDA kernels on GPU; the same formula runs there
through CuPy), except where that formula updates a boolean-masked
selection: on GPU those use the formula of ``forward_gpu``, which CuPy
runs without synchronizing.
"""

from chainer.functions.activation import clipped_relu
from chainer.functions.activation import crelu
from chainer.functions.activation import elu
from chainer.functions.activation import hard_sigmoid
from chainer.functions.activation import leaky_relu
from chainer.functions.activation import log_softmax
from chainer.functions.activation import prelu
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
from chainerjit.ops import _loops_elementwise
from chainerjit.ops import _loops_softmax
from chainerjit.ops import lowering
from chainerjit.ops import rows_elementwise
from chainerjit.ops import rows_follow
from chainerjit.ops import rows_in_place
from chainerjit.ops import onnx_op
from chainerjit.ops.math import grad_rule
from chainerjit.ops.math import onnx_dtype
from chainerjit.ops.math import onnx_scalar


def _on_cpu(ctx, into):
    """Arena buffers are NumPy arrays."""
    return into if ctx.xp is numpy else None


@lowering(relu.ReLU)
def lower_relu(node, ctx):
    xp = ctx.xp

    def grad(xs, ys, gys, wanted):
        y, = ys
        gy, = gys
        if type(gy) is not numpy.ndarray:  # ReLUGrad2's CUDA kernel
            return relu._relu_grad2_kernel(y, gy),  # (y > 0 ? gy : 0)
        out = numpy.empty_like(gy)  # in gy's order of axes
        if _loops_elementwise.relu_grad(gy, y, out):
            return out,
        # A C-ordered gy makes NumPy's product C-ordered too; y in another
        # layout (a convolution's transposed output) is read faster as a
        # C-ordered copy (LeNet's first layer: 58 us instead of 530).
        if gy.flags.c_contiguous and _loops_elementwise.relu_grad(
                gy, numpy.ascontiguousarray(y), out):
            return out,
        return utils.force_array(gy * (y > 0)),  # as ReLUGrad2
    maximum, zero = xp.maximum, ctx.in_dtypes[0].type(0)
    return Kernel(lambda x: maximum(x, zero),
                  grad=GradRule(grad, outputs=(0,),
                                onnx=_relu_grad_to_onnx(ctx.in_dtypes[0])),
                  onnx=onnx_op('Relu'),
                  fresh=True, inplace={0: lambda x: maximum(x, zero, out=x)},
                  into=_on_cpu(ctx, lambda out, x: maximum(x, zero, out=out)),
                  lengths=rows_in_place)


def _relu_grad_to_onnx(dtype):
    """``gy * (y > 0)``, as ReLUGrad2."""
    def convert(b, xs, ys, gys, wanted):
        positive = b.op('Greater', [ys[0], b.constant(numpy.zeros(
            (), dtype))])[0]
        return b.op('Mul', [gys[0], b.cast(positive, numpy.bool_,
                                           dtype)])[0],
    return convert


@lowering(leaky_relu.LeakyReLU)
def lower_leaky_relu(node, ctx):
    slope = node.slope
    where = ctx.xp.where
    slope_t = ctx.in_dtypes[0].type(slope)
    # _LeakyReLUGrad: ``gx = cond <= 0 ? slope * gy : gy``, where ``cond``
    # is the output, or the input for a negative slope.
    on_input = slope < 0

    def grad(xs, ys, gys, wanted):
        cond = xs[0] if on_input else ys[0]
        gy, = gys
        return where(cond <= 0, slope_t * gy, gy),

    def grad_to_onnx(b, xs, ys, gys, wanted):
        cond = xs[0] if on_input else ys[0]
        gy, = gys
        below = b.op('LessOrEqual', [cond, b.constant(numpy.zeros(
            (), ctx.in_dtypes[0]))])[0]
        sloped = b.op('Mul', [b.constant(numpy.asarray(slope_t)), gy])[0]
        return b.op('Where', [below, sloped, gy])[0],
    grad = GradRule(grad, inputs=(0,) if on_input else (),
                    outputs=() if on_input else (0,), onnx=grad_to_onnx)
    onnx = onnx_op('LeakyRelu', alpha=slope)
    if ctx.xp is not numpy:
        # forward_gpu: ``y = x <= 0 ? (T)(slope * x) : x``, no mask.
        return Kernel(lambda x: where(x <= 0, slope_t * x, x),
                      {'slope': slope}, grad=grad, onnx=onnx,
                      lengths=rows_in_place)

    def fn(x):
        y = x.copy()
        y[x <= 0] *= slope
        return y
    return Kernel(fn, {'slope': slope}, grad=grad, onnx=onnx,
                  lengths=rows_in_place)


@lowering(sigmoid.Sigmoid)
def lower_sigmoid(node, ctx):
    tanh_ = ctx.xp.tanh
    half = ctx.in_dtypes[0].type(0.5)
    one = ctx.in_dtypes[0].type(1)

    def grad(xs, ys, gys, wanted):
        y, = ys
        return utils.force_array(gys[0] * y * (one - y)),  # as SigmoidGrad

    def sigmoid_into(out, x):
        ctx.xp.multiply(x, half, out=out)
        tanh_(out, out=out)
        out *= half
        out += half
        return out

    def grad_to_onnx(b, xs, ys, gys, wanted):
        y = ys[0]
        rest = b.op('Sub', [b.constant(numpy.ones((), ctx.in_dtypes[0])),
                            y])[0]
        return b.op('Mul', [b.op('Mul', [gys[0], y])[0], rest])[0],
    return Kernel(lambda x: utils.force_array(tanh_(x * half) * half + half),
                  grad=GradRule(grad, outputs=(0,), onnx=grad_to_onnx),
                  onnx=onnx_op('Sigmoid'),
                  fresh=True, inplace={0: lambda x: sigmoid_into(x, x)},
                  into=_on_cpu(ctx, sigmoid_into), lengths=rows_in_place)


@lowering(tanh.Tanh)
def lower_tanh(node, ctx):
    tanh_ = ctx.xp.tanh
    one = ctx.in_dtypes[0].type(1)

    def grad(xs, ys, gys, wanted):
        y, = ys
        return utils.force_array(gys[0] * (one - y * y)),  # as TanhGrad

    def grad_to_onnx(b, xs, ys, gys, wanted):
        y = ys[0]
        rest = b.op('Sub', [b.constant(numpy.ones((), ctx.in_dtypes[0])),
                            b.op('Mul', [y, y])[0]])[0]
        return b.op('Mul', [gys[0], rest])[0],
    return Kernel(lambda x: utils.force_array(tanh_(x)),
                  grad=GradRule(grad, outputs=(0,), onnx=grad_to_onnx),
                  onnx=onnx_op('Tanh'),
                  fresh=True, inplace={0: lambda x: tanh_(x, out=x)},
                  into=_on_cpu(ctx, lambda out, x: tanh_(x, out=out)),
                  lengths=rows_in_place)


@lowering(softmax.Softmax)
@rows_follow
def lower_softmax(node, ctx):
    exp = ctx.xp.exp
    axis = node.axis
    last = axis in (-1, len(ctx.in_shapes[0]) - 1) and ctx.xp is numpy

    def maxima(x):
        """``x.max(axis, keepdims=True)``; along the last axis, for
        contiguous float32/float64, one C loop (``_loops_softmax.row_max``:
        NumPy's values, 2.5x faster on attention's rows of 32)."""
        if last and type(x) is numpy.ndarray and x.ndim:
            m = numpy.empty(x.shape[:-1] + (1,), x.dtype)
            if _loops_softmax.row_max(x, m):
                return m
        return x.max(axis=axis, keepdims=True)

    def fn(x, out=None):
        if last:  # in C where it takes x (Chainer's values, bit for bit)
            y = _loops_softmax.softmax_rows(x, out)
            if y is not None:
                return y
        y = ctx.xp.subtract(x, maxima(x), out=out)
        exp(y, out=y)
        y /= y.sum(axis=axis, keepdims=True)
        return y

    def into(out, x):
        return fn(x, out)

    def grad(xs, ys, gys, wanted):
        # As _SoftmaxGrad.forward without cuDNN.
        y, = ys
        gx = y * gys[0]
        gx -= y * gx.sum(axis=axis, keepdims=True)
        return gx,

    def grad_to_onnx(b, xs, ys, gys, wanted):
        y, = ys
        gx = b.op('Mul', [y, gys[0]])[0]
        total = b.op('ReduceSum', [gx, b.int64s([axis])], keepdims=1)[0]
        return b.op('Sub', [gx, b.op('Mul', [y, total])[0]])[0],
    # opset 13+: Softmax normalizes along ``axis`` only.
    return Kernel(fn, {'axis': axis}, grad=GradRule(grad, outputs=(0,),
                                                    onnx=grad_to_onnx),
                  onnx=onnx_op('Softmax', axis=axis), fresh=True,
                  into=_on_cpu(ctx, into))


def log_softmax_rows(x):
    """Chainer's ``log_softmax._log_softmax(x)`` (along axis 1): in C,
    bit for bit, where ``_loops_softmax.log_softmax`` takes ``x`` (3x
    faster for 64 rows of 10), else Chainer's own."""
    y = _loops_softmax.log_softmax(x)
    return log_softmax._log_softmax(x) if y is None else y


@lowering(log_softmax.LogSoftmax)
@rows_follow
def lower_log_softmax(node, ctx):
    logsumexp = log_softmax.logsumexp
    axis = node.axis
    exp = ctx.xp.exp
    rows = ctx.xp is numpy and len(ctx.in_shapes[0]) == 2 and axis in (1, -1)

    def grad(xs, ys, gys, wanted):
        # As LogSoftmaxGrad.forward without cuDNN.
        gy, = gys
        return gy - exp(ys[0]) * gy.sum(axis=axis, keepdims=True),

    def grad_to_onnx(b, xs, ys, gys, wanted):
        gy, = gys
        total = b.op('ReduceSum', [gy, b.int64s([axis])], keepdims=1)[0]
        return b.op('Sub', [gy, b.op('Mul', [
            b.op('Exp', ys)[0], total])[0]])[0],
    return Kernel(log_softmax_rows if rows else
                  lambda x: x - logsumexp(x, axis), {'axis': axis},
                  grad=GradRule(grad, outputs=(0,), onnx=grad_to_onnx),
                  onnx=onnx_op('LogSoftmax', axis=axis))


@lowering(elu.ELU)
@rows_elementwise
def lower_elu(node, ctx):
    xp = ctx.xp
    alpha = node.alpha
    alpha_t = ctx.in_dtypes[0].type(alpha)
    one = ctx.in_dtypes[0].type(1)
    # ELUGrad(y) * gy: ``cond > 0 ? 1 : y + alpha``, where ``cond`` is the
    # output, or the input for a negative alpha.
    on_input = alpha < 0

    def grad(xs, ys, gys, wanted):
        y, = ys
        cond = xs[0] if on_input else y
        return xp.where(cond > 0, one, y + alpha_t) * gys[0],
    grad = grad_rule(ctx, grad, inputs=(0,) if on_input else (),
                     outputs=(0,))
    onnx = onnx_op('Elu', alpha=alpha)
    if xp is not numpy:
        # forward_gpu: ``y = x > 0 ? x : (T)(alpha * expm1(x))``.
        return Kernel(lambda x: xp.where(x > 0, x, alpha_t * xp.expm1(x)),
                      {'alpha': alpha}, grad=grad, onnx=onnx)

    def fn(x):
        y = x.copy()
        negzero = y <= 0
        y[negzero] = alpha * numpy.expm1(y[negzero])
        return y
    return Kernel(fn, {'alpha': alpha}, grad=grad, onnx=onnx)


@lowering(softplus.Softplus)
@rows_elementwise
def lower_softplus(node, ctx):
    xp = ctx.xp
    beta, beta_inv = node.beta, node.beta_inv
    dtype = ctx.out_dtypes[0]

    def fn(x):
        bx = beta * x
        y = (xp.fmax(bx, 0) + xp.log1p(xp.exp(-xp.fabs(bx)))) * beta_inv
        return utils.force_array(y, dtype)

    def grad(xs, ys, gys, wanted):
        # As SoftplusGrad.forward_cpu.
        x, = xs
        gx = (1 - 1 / (1 + xp.exp(beta * x))) * gys[0]
        return utils.force_array(gx, dtype),

    def to_onnx(b, ins, outs):
        if beta == 1:
            b.op('Softplus', ins, outs)
            return
        bx = b.op('Mul', ins + [onnx_scalar(b, beta, dtype)])
        b.op('Mul', b.op('Softplus', bx) + [onnx_scalar(b, beta_inv, dtype)],
             outs)
    return Kernel(fn, {'beta': beta}, grad=GradRule(grad, inputs=(0,)),
                  onnx=to_onnx)


@lowering(hard_sigmoid.HardSigmoid)
@rows_elementwise
def lower_hard_sigmoid(node, ctx):
    clip = ctx.xp.clip
    dtype = ctx.out_dtypes[0]

    def grad(xs, ys, gys, wanted):
        # As HardSigmoidGrad.forward_cpu.
        x, = xs
        gx = ((-2.5 < x) & (x < 2.5)) * gys[0] * 0.2
        return utils.force_array(gx, dtype),
    return Kernel(
        lambda x: utils.force_array(clip(x * 0.2 + 0.5, 0.0, 1.0), dtype),
        grad=GradRule(grad, inputs=(0,)),
        onnx=onnx_op('HardSigmoid', alpha=0.2, beta=0.5))


@lowering(clipped_relu.ClippedReLU)
@rows_elementwise
def lower_clipped_relu(node, ctx):
    xp = ctx.xp
    cap = node.cap
    dtype = ctx.out_dtypes[0]

    def grad(xs, ys, gys, wanted):
        # As ClippedReLUGrad2.forward_cpu.
        x, = xs
        return utils.force_array(gys[0] * (0 < x) * (x < cap), dtype),
    return Kernel(
        lambda x: utils.force_array(xp.minimum(xp.maximum(0, x), cap), dtype),
        {'z': cap}, grad=GradRule(grad, inputs=(0,)),
        onnx=lambda b, ins, outs: b.op('Clip', ins + [
            onnx_scalar(b, 0, dtype), onnx_scalar(b, cap, dtype)], outs))


@lowering(swish.Swish)
def lower_swish(node, ctx):
    tanh_ = ctx.xp.tanh
    x_shape, beta_shape = ctx.in_shapes
    shape = (1,) + beta_shape + (1,) * (len(x_shape) - len(beta_shape) - 1)
    half = ctx.in_dtypes[0].type(0.5)
    one = ctx.in_dtypes[0].type(1)
    reduction_axes = (0,) + tuple(range(1 + len(beta_shape), len(x_shape)))

    def fn(x, beta):
        bx = beta.reshape(shape) * x
        return x * (tanh_(bx * half) * half + half)

    def grad(xs, ys, gys, wanted):
        # As SwishGrad.forward_cpu.
        x, beta = xs
        gy, = gys
        beta = beta.reshape(shape)
        sig = tanh_(beta * x * half) * half + half
        y = x * sig
        gx = gb = None
        if wanted[0]:
            by = beta * y
            gx = gy * (by + sig * (one - by))
        if wanted[1]:
            gb = utils.force_array(
                (gy * y * (x - y)).sum(axis=reduction_axes))
        return gx, gb

    def to_onnx(b, ins, outs):
        x, beta = ins
        bx = b.op('Mul', b.op('Reshape', [beta, b.int64s(shape)]) + [x])
        b.op('Mul', [x] + b.op('Sigmoid', bx), outs)
    return Kernel(fn, grad=GradRule(grad, inputs=(0, 1)), onnx=to_onnx)


@lowering(prelu.PReLUFunction)
def lower_prelu(node, ctx):
    """``x`` where ``x >= 0``, else ``x`` times its slope in ``W`` (over
    the axes after the first); the gradient as ``PReLUFunctionGrad``'s
    CPU forward."""
    if ctx.xp is not numpy:
        return None
    x_shape, w_shape = ctx.in_shapes
    ndim = len(x_shape)
    shape = (1,) + w_shape + (1,) * (ndim - len(w_shape) - 1)
    axes = (0,) + tuple(range(1 + len(w_shape), ndim))

    def fn(x, W):
        return numpy.where(x >= 0, x, x * W.reshape(shape))

    def grad(xs, ys, gys, wanted):
        x, W = xs
        gy, = gys
        kept = x >= 0
        gW = numpy.where(kept, 0, x * gy).sum(axis=axes)
        gx = numpy.where(kept, gy, gy * W.reshape(shape))
        return gx, utils.force_array(gW)

    def to_onnx(b, ins, outs):
        x, W = ins
        b.op('PRelu', [x, b.single('Reshape', W, b.int64s(shape))], outs)

    def grad_to_onnx(b, xs, ys, gys, wanted):
        x, W = xs
        gy, = gys
        kept = b.single('GreaterOrEqual', x, onnx_scalar(
            b, 0, b.in_dtypes[0]))
        zero = onnx_scalar(b, 0, b.in_dtypes[0])
        gW = b.single('ReduceSum', b.single('Where', kept, zero, b.single(
            'Mul', x, gy)), b.int64s(axes), keepdims=0)
        gx = b.single('Where', kept, gy, b.single('Mul', gy, b.single(
            'Reshape', W, b.int64s(shape))))
        return gx, gW
    return Kernel(fn, grad=GradRule(grad, inputs=(0, 1), onnx=grad_to_onnx),
                  onnx=to_onnx)


@lowering(crelu.CReLU)
def lower_crelu(node, ctx):
    """``relu(x)`` and ``relu(-x)`` concatenated along ``axis``; the
    gradient as ``CReLU.backward``'s (the masks cast to the gradient's
    dtype, as Chainer casts an array it multiplies a Variable by)."""
    xp, axis = ctx.xp, node.axis

    def fn(x):
        zero = x.dtype.type(0)
        return xp.concatenate([xp.maximum(zero, x), xp.maximum(zero, -x)],
                              axis=axis)

    def grad(xs, ys, gys, wanted):
        x, = xs
        former, latter = xp.split(gys[0], 2, axis=axis)
        return utils.force_array(
            former * (x > 0).astype(x.dtype) -
            latter * (x < 0).astype(x.dtype)),

    def to_onnx(b, ins, outs):
        x, = ins
        b.op('Concat', b.op('Relu', [x]) + b.op('Relu', b.op('Neg', [x])),
             outs, axis=axis)

    def grad_to_onnx(b, xs, ys, gys, wanted):
        x, = xs
        dtype = b.in_dtypes[0]
        zero = onnx_scalar(b, 0, dtype)
        former, latter = b.op('Split', [gys[0]], [
            b.fresh('half'), b.fresh('half')], axis=axis)  # even halves
        up = b.single('Cast', b.single('Greater', x, zero),
                      to=onnx_dtype(dtype))
        down = b.single('Cast', b.single('Less', x, zero),
                        to=onnx_dtype(dtype))
        return b.single('Sub', b.single('Mul', former, up),
                        b.single('Mul', latter, down)),
    return Kernel(fn, attrs={'axis': axis}, grad=grad_rule(
        ctx, grad, inputs=(0,), onnx=grad_to_onnx), onnx=to_onnx)
