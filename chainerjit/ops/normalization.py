"""Lowerings of chainer.functions.normalization."""

import numpy

from chainer.functions.normalization import batch_normalization
from chainer.functions.normalization import l2_normalization
from chainer.functions.normalization import layer_normalization
from chainer.functions.normalization import local_response_normalization
from chainer import utils

from chainerjit.ops import Kernel
from chainerjit.ops import lowering


@lowering(batch_normalization.FixedBatchNormalization)
def lower_fixed_batch_normalization(node, ctx):
    """Batch normalization with given statistics (Chainer's generic CPU
    formula; cuDNN on the GPU, so generic there)."""
    if ctx.xp is not numpy:
        return None
    eps = node.eps
    expander = node.expander

    def fixed_bn(x, gamma, beta, mean, var):
        inv_var = numpy.reciprocal(var + eps)
        inv_std = numpy.sqrt(inv_var, dtype=inv_var.dtype)
        x_hat = x - mean[expander]
        x_hat *= inv_std[expander]
        y = x_hat * gamma[expander]
        y += beta[expander]
        return y.astype(x.dtype)
    return Kernel(fixed_bn, attrs={'eps': eps, 'axis': node.axis})


@lowering(layer_normalization.LayerNormalization)
def lower_layer_normalization(node, ctx):
    """Normalizes each row, then scales and shifts it."""
    xp = ctx.xp
    eps = node.eps

    def layer_norm(x, gamma, beta):
        mu = xp.mean(x, axis=1, keepdims=True)
        x_mu = x - mu
        var = xp.mean(xp.square(x_mu), axis=1, keepdims=True)
        inv_std = 1. / xp.sqrt(var + eps)
        return x_mu * inv_std * gamma[None, ] + beta[None, ]
    return Kernel(layer_norm, attrs={'eps': eps})


@lowering(l2_normalization.NormalizeL2)
def lower_normalize_l2(node, ctx):
    """Divides by the L2 norm (plus ``eps``) along ``axis``."""
    xp = ctx.xp
    eps = ctx.in_dtypes[0].type(node.eps)
    axis = node.axis

    def normalize(x):
        norm = xp.sqrt(xp.sum(xp.square(x), axis=axis, keepdims=True),
                       dtype=x.dtype) + eps
        return utils.force_array(x / norm)
    return Kernel(normalize, attrs={'eps': node.eps, 'axis': axis})


@lowering(local_response_normalization.LocalResponseNormalization)
def lower_local_response_normalization(node, ctx):
    """Cross-channel normalization (Chainer's CPU formula)."""
    if ctx.xp is not numpy or node._use_ideep:
        return None
    n, k, alpha, beta = node.n, node.k, node.alpha, node.beta
    half_n = n // 2

    def lrn(x):
        x2 = numpy.square(x)
        sum_part = x2.copy()
        for i in range(1, half_n + 1):
            sum_part[:, i:] += x2[:, :-i]
            sum_part[:, :-i] += x2[:, i:]
        return x * (k + alpha * sum_part) ** -beta
    return Kernel(lrn, attrs={'n': n, 'k': k, 'alpha': alpha, 'beta': beta})
