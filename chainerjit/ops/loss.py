"""Lowerings of chainer.functions.loss."""

import numpy

from chainer.functions.activation import log_softmax
from chainer.functions.loss import mean_absolute_error
from chainer.functions.loss import mean_squared_error
from chainer.functions.loss import sigmoid_cross_entropy
from chainer.functions.loss import softmax_cross_entropy
from chainer import utils

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
    return Kernel(mse)


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
    return Kernel(mae)


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
    return Kernel(sigmoid_ce, attrs={'normalize': normalize,
                                     'reduce': reduce})


@lowering(softmax_cross_entropy.SoftmaxCrossEntropy)
def lower_softmax_cross_entropy(node, ctx):
    """Softmax cross entropy with integer labels or soft targets (Chainer's
    CPU formula; the GPU has its own kernels, so generic there)."""
    if ctx.xp is not numpy or node.class_weight is not None:
        return None
    attrs = {'reduce': node.reduce}
    if ctx.in_dtypes[1].kind == 'f':
        attrs['soft_target_loss'] = node.soft_target_loss
        return Kernel(_soft_target_ce(node, ctx), attrs=attrs)
    attrs.update(normalize=node.normalize, ignore_label=node.ignore_label)
    return Kernel(_label_ce(node, ctx), attrs=attrs)


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
