"""Lowerings of chainer.functions.loss."""

import numpy

from chainer.functions.activation import log_softmax
from chainer.functions.loss import mean_absolute_error
from chainer.functions.loss import mean_squared_error
from chainer.functions.loss import sigmoid_cross_entropy
from chainer.functions.loss import softmax_cross_entropy
from chainer import utils

from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import lowering


@lowering(mean_squared_error.MeanSquaredError)
def lower_mean_squared_error(node, ctx):
    """Mean of the squared differences (CPU and GPU formulas differ)."""
    if ctx.xp is numpy:
        def mse(x0, x1):
            diff = (x0 - x1).ravel()
            return numpy.array(diff.dot(diff) / diff.size, dtype=diff.dtype)
    else:
        def mse(x0, x1):
            diff = (x0 - x1).ravel()
            return diff.dot(diff) / diff.dtype.type(diff.size)
    xp = ctx.xp

    def grad(xs, ys, gys, wanted):
        # MeanSquaredError.backward's formulas, on arrays.
        if not (wanted[0] or wanted[1]):
            return None, None
        diff = utils.force_array(xs[0] - xs[1])
        gy0 = xp.broadcast_to(gys[0], diff.shape)
        gx0 = utils.force_array(
            utils.force_array(gy0 * diff)
            * diff.dtype.type(2. / diff.size))
        return (gx0 if wanted[0] else None,
                utils.force_array(-gx0) if wanted[1] else None)
    return Kernel(mse, grad=GradRule(grad, inputs=(0, 1)))


@lowering(mean_absolute_error.MeanAbsoluteError)
def lower_mean_absolute_error(node, ctx):
    """Mean of the absolute differences, accumulated in float32 at
    least."""
    dtype = mean_absolute_error._get_intermediate_dtype(ctx.in_dtypes[0])
    out_dtype = ctx.out_dtypes[0]
    if ctx.xp is numpy:
        def mae(x0, x1):
            diff = (x0 - x1).ravel().astype(dtype, copy=False)
            return numpy.array(abs(diff).sum() / diff.size,
                               dtype=out_dtype)
    else:
        def mae(x0, x1):
            diff = (x0 - x1).ravel().astype(dtype, copy=False)
            return (abs(diff).sum() / diff.dtype.type(diff.size)).astype(
                out_dtype, copy=False)
    xp = ctx.xp

    def grad(xs, ys, gys, wanted):
        # MeanAbsoluteError.backward's formulas, on arrays.
        if not (wanted[0] or wanted[1]):
            return None, None
        diff = utils.force_array(xs[0] - xs[1])
        gy, = gys
        coeff = utils.force_array(gy * gy.dtype.type(1. / diff.size))
        coeff = xp.broadcast_to(coeff, diff.shape)
        gx0 = utils.force_array(coeff * xp.sign(diff))
        return (gx0 if wanted[0] else None,
                utils.force_array(-gx0) if wanted[1] else None)
    return Kernel(mae, grad=GradRule(grad, inputs=(0, 1)))


@lowering(sigmoid_cross_entropy.SigmoidCrossEntropy)
def lower_sigmoid_cross_entropy(node, ctx):
    """Sigmoid cross entropy, ignoring labels ``-1``."""
    xp = ctx.xp
    ignore_label = node.ignore_label
    normalize, reduce = node.normalize, node.reduce

    def sigmoid_ce(x, t):
        ignore_mask = t != ignore_label
        loss = -(ignore_mask * (x * (t - (x >= 0))
                                - xp.log1p(xp.exp(-xp.abs(x)))))
        if reduce != 'mean':
            return utils.force_array(loss.astype(x.dtype))
        if normalize:
            count = xp.maximum(1, ignore_mask.sum())
        else:
            count = max(1, len(x))
        return utils.force_array(xp.divide(xp.sum(loss), count),
                                 dtype=x.dtype)

    def grad(xs, ys, gys, wanted):
        # SigmoidCrossEntropyGrad's forward (CPU sigmoid formula).
        if not wanted[0]:
            return None, None
        x, t = xs
        gy, = gys
        ignore_mask = t != ignore_label
        half = x.dtype.type(0.5)
        y = utils.force_array(xp.tanh(x * half) * half + half)
        gx = gy * ignore_mask * (y - t)
        if reduce == 'mean':
            if normalize:
                count = xp.maximum(1, ignore_mask.sum())
            else:
                count = max(1, len(x))
            gx = xp.divide(gx, count)
        return utils.force_array(gx.astype(y.dtype)), None
    return Kernel(sigmoid_ce, attrs={'normalize': normalize,
                                     'reduce': reduce},
                  grad=GradRule(grad, inputs=(0, 1)))


@lowering(softmax_cross_entropy.SoftmaxCrossEntropy)
def lower_softmax_cross_entropy(node, ctx):
    """Softmax cross entropy with integer labels or soft targets (Chainer's
    CPU formula; the GPU has its own kernels, so generic there)."""
    if ctx.xp is not numpy or node.class_weight is not None:
        return None
    attrs = {'reduce': node.reduce}
    grad = GradRule(_softmax_ce_grad(node, ctx), inputs=(0, 1))
    if ctx.in_dtypes[1].kind == 'f':
        attrs['soft_target_loss'] = node.soft_target_loss
        return Kernel(_soft_target_ce(node, ctx), attrs=attrs, grad=grad)
    attrs.update(normalize=node.normalize, ignore_label=node.ignore_label)
    return Kernel(_label_ce(node, ctx), attrs=attrs, grad=grad)


def _softmax_ce_grad(node, ctx):
    """The gradient rule of SoftmaxCrossEntropy: the CPU forward of
    ``_SoftmaxCrossEntropyGrad_NoDoubleBackprop`` (no class weights), with
    the softmax and the coefficient the forward keeps recomputed as it
    computes them."""
    x_shape, t_shape = ctx.in_shapes
    soft_target = ctx.in_dtypes[1].kind == 'f'
    ignore_label = node.ignore_label
    mean = node.reduce == 'mean'
    x_size = int(numpy.prod(x_shape))
    if soft_target:
        coeff = 1.0 / (x_size / x_shape[1])
    elif not node.normalize:
        coeff = 1.0 / max(x_shape[0], 1)
    else:
        coeff = None  # counted from t
    t_size = int(numpy.prod(t_shape))
    if len(x_shape) == 2:
        rows = numpy.arange(x_shape[0])
    elif t_size:
        n_unit = t_size // x_shape[0]
        fst_index = numpy.arange(t_size) // n_unit
        trd_index = numpy.arange(t_size) % n_unit

    def grad(xs, ys, gys, wanted):
        if not wanted[0]:
            return None, None
        x, t = xs
        gloss, = gys
        if x_size == 0:
            return numpy.zeros(x_shape, dtype=x.dtype), None
        y = log_softmax._log_softmax(x)
        numpy.exp(y, out=y)
        t_valid = t != ignore_label
        t = t * t_valid
        if soft_target:
            gx = y - t
        elif len(x_shape) == 2:
            gx = y
            gx[rows, t] -= 1
            gx *= t_valid.reshape((len(t), 1))
        else:
            gx = y.reshape(y.shape[0], y.shape[1], -1)
            gx[fst_index, t.ravel(), trd_index] -= 1
            gx *= t_valid.reshape((len(t), 1, -1))
            gx = gx.reshape(y.shape)
        if not mean:
            gx *= gloss[:, None]
        elif coeff is None:
            gx *= gloss * (1.0 / max(t_valid.sum(), 1))
        else:
            gx *= gloss * coeff
        return gx, None
    return grad


def _label_ce(node, ctx):
    """Softmax cross entropy of integer labels ``t``."""
    x_shape, t_shape = ctx.in_shapes
    ignore_label, reduce = node.ignore_label, node.reduce
    n_classes = x_shape[1]
    t_size = int(numpy.prod(t_shape))
    positions = numpy.arange(t_size)
    batch_count = None if node.normalize else x_shape[0]
    reduc_dtype = softmax_cross_entropy._reduction_dtype(ctx.in_dtypes[0])

    def label_ce(x, t):
        log_y = log_softmax._log_softmax(x)
        log_yd = numpy.rollaxis(log_y, 1).reshape(n_classes, -1)
        t_valid = t != ignore_label
        t = t * t_valid
        log_p = log_yd[t.ravel(), positions]
        log_p *= t_valid.ravel()
        if reduce != 'mean':
            return -log_p.reshape(t.shape)
        count = t_valid.sum() if batch_count is None else batch_count
        y = log_p.sum(keepdims=True, dtype=reduc_dtype)
        y = y * (-(1.0 / max(count, 1)))
        return y.astype(x.dtype, copy=False).reshape(())
    return label_ce


def _soft_target_ce(node, ctx):
    """Softmax cross entropy (or KL divergence) of soft targets ``t``."""
    x_shape = ctx.in_shapes[0]
    kl, eps = node.soft_target_loss == 'kl-divergence', node.eps
    coeff = 1.0 / (int(numpy.prod(x_shape)) / x_shape[1])
    reduce = node.reduce

    def soft_target_ce(x, t):
        log_y = log_softmax._log_softmax(x)
        if kl:
            ret = numpy.sum(t * (numpy.log(t + eps) - log_y), axis=1)
        else:
            ret = -numpy.sum(t * log_y, axis=1)
        if reduce != 'mean':
            return ret
        return (ret.sum(keepdims=True) * coeff).reshape(())
    return soft_target_ce
