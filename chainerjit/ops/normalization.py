"""Lowerings of chainer.functions.normalization."""

import chainer
import numpy

from chainer.functions.normalization import batch_normalization
from chainer.functions.normalization import group_normalization
from chainer.functions.normalization import l2_normalization
from chainer.functions.normalization import layer_normalization
from chainer.functions.normalization import local_response_normalization
from chainer import utils

from chainerjit import errors
from chainerjit.ops import ForwardMemo
from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import LOOP_DTYPES
from chainerjit.ops import _loops_normalization
from chainerjit.ops import lowering
from chainerjit.ops import rows_follow_first
from chainerjit.ops import rows_in_place
from chainerjit.ops import rows_row_wise
from chainerjit.ops import state_lowering


@state_lowering(batch_normalization.BatchNormalization)
def lower_batch_normalization(node, ctx, state):
    """Batch normalization with the batch's statistics (training): Chainer's
    own CPU implementation called directly, updating the running averages
    (``state``: ``running_mean`` and ``running_var``, the link's arrays,
    read on every call) in place as the node does; the gradient its
    backward computes, from the statistics computed again from ``x`` (the
    same reductions, so the same values). 3x to 4x faster than running
    the node and its backward through Chainer's graph. A convolution's
    output gets its statistics and gradient sums from C loops
    (:class:`_ChannelsLastStats`)."""
    general = batch_normalization.GeneralBatchNormalizationImpl
    impl = getattr(node, '_impl', None)
    multi_node = _is_multi_node(impl)
    if ctx.xp is not numpy or (type(impl) is not general and
                               not multi_node) or \
            node.input_layouts[0] is not None or state not in (
                (), (('running_mean', None), ('running_var', None))):
        return None
    axis, expander, eps, decay = node.axis, node.expander, node.eps, node.decay
    # ChainerMN's statistics and parameter-gradient sums, averaged over
    # the processes, come from its own implementation, as eagerly.
    impl = impl if multi_node else _ChannelsLastStats()
    # Running averages that are no model arrays (given by the caller, or
    # none): the node's own, updated in place as its copies would.
    own = (node.running_mean, node.running_var)

    # The last forward's mean and inv_std, for the gradient of its x.
    statistics = ForwardMemo()

    def forward(x, gamma, beta, *state_arrays):
        running_mean, running_var = state_arrays or own
        out = impl.forward(
            axis=axis, gamma=gamma, x=x, x_layout=None, xp=numpy,
            expander=expander, beta=beta, eps=eps, decay=decay,
            running_mean=running_mean, running_var=running_var)
        statistics.keep(x, (out[4], out[6]))
        return out[0]

    def grad(xs, ys, gys, wanted):
        x, gamma = xs[0], xs[1]
        mean, inv_std = statistics.take(x) or (None, None)
        if mean is None:
            interm = numpy.promote_types(x.dtype, gamma.dtype)
            mean, var = impl.get_mean_and_var(axis, gamma, x, numpy, interm)
            inv_std = numpy.reciprocal(numpy.sqrt(var + eps, dtype=interm))
        gx, _, ggamma, gbeta = impl.backward(
            axis, gamma, gys[0], x, None, numpy, expander, mean, inv_std,
            eps, None, None)
        return (gx, ggamma, gbeta) + (None,) * len(state)
    # The running averages it updates besides its inputs, which a run
    # that only checks or times the program puts back (``runtime.undo``).
    forward.own_state = () if state else tuple(
        a for a in own if a is not None)
    # Statistics and gradient read the batch's size from x; the running
    # averages of a check at another batch size are put back too.
    return Kernel(forward, attrs={'axis': axis, 'eps': eps, 'decay': decay},
                  grad=GradRule(grad, inputs=(0, 1)),
                  lengths=None if multi_node else rows_follow_first)


def _is_multi_node(impl):
    """True for the implementation ChainerMN's MultiNodeBatchNormalization
    gives its nodes on the CPU (statistics averaged over the processes
    with MPI): Chainer's general one with other reductions."""
    kind = type(impl)
    return kind.__name__ == '_MpiImpl' and \
        kind.__module__ == 'chainermn.functions.batch_normalization'


class _ChannelsLastStats(batch_normalization.GeneralBatchNormalizationImpl):
    """Chainer's CPU batch normalization for an input laid out
    channels-last in memory (a convolution's output, as Chainer returns
    it), float32 or float64 as its parameters: NumPy works on such an
    array a position (6 or 16 channels) at a time. The per-channel sums
    are C loops adding in NumPy's order
    (``_loops_normalization.channel_mean_var`` and ``channel_sums``, 7x
    faster), and the normalization and the input gradient C loops with
    Chainer's order of operations (``channel_affine`` and
    ``channel_input_grad``). Anything else takes Chainer's own code,
    whose steps :meth:`forward` and :meth:`backward` follow."""

    def forward(self, axis, gamma, x, x_layout, xp, expander, beta, eps,
                decay, running_mean, running_var):
        if not _over_positions(axis, x) or x.dtype != gamma.dtype or \
                running_mean is None:
            return super(_ChannelsLastStats, self).forward(
                axis, gamma, x, x_layout, xp, expander, beta, eps, decay,
                running_mean, running_var)
        mean, var = self.get_mean_and_var(axis, gamma, x, xp, x.dtype)
        inv_std = numpy.reciprocal(numpy.sqrt(var + eps, dtype=x.dtype))
        y = numpy.empty_like(x)
        if not _loops_normalization.channel_affine(x, mean, inv_std, gamma,
                                                   beta, y):
            return super(_ChannelsLastStats, self).forward(
                axis, gamma, x, x_layout, xp, expander, beta, eps, decay,
                running_mean, running_var)
        m = x.size // gamma.size
        adjust = m / max(m - 1., 1.)  # unbiased estimation
        running_mean *= decay
        running_mean += (1 - decay) * mean
        running_var *= decay
        running_var += (1 - decay) * adjust * var
        return y, x_layout, running_mean, running_var, mean, var, inv_std, \
            None

    def backward(self, axis, gamma, gy, x, x_layout, xp, expander, mean,
                 inv_std, eps, var, forward_data):
        if _over_positions(axis, x) and \
                _loops_normalization.channels_last(gy) and \
                x.dtype == gamma.dtype == gy.dtype:
            x_hat = numpy.empty_like(x)
            if _loops_normalization.channel_affine(x, mean, inv_std, None,
                                                   None, x_hat):
                gbeta, ggamma = self.get_ggamma_and_gbeta(axis, gamma, gy,
                                                          x_hat, xp)
                inv_m = gamma.dtype.type(1. / (x.size // gamma.size))
                gx = numpy.empty_like(x)
                if _loops_normalization.channel_input_grad(
                        gy, x_hat, ggamma, gbeta, inv_m, gamma * inv_std, gx):
                    return gx, None, ggamma, gbeta
        if _over_positions(axis, x) and type(gy) is numpy.ndarray and \
                gy.flags.c_contiguous and gy.shape == x.shape:
            # A C-ordered gy (a ReLU's gradient after pooling) makes every
            # product with x_hat C-ordered, whatever x's layout: one C
            # loop over the planes of that layout (LeNet's first
            # normalization: 90 us instead of 900), or Chainer's steps
            # on a C-ordered copy of x (the same values; NumPy's loops
            # then read one layout: 250 us).
            if x.dtype == gamma.dtype == gy.dtype:
                x_hat, gx = numpy.empty_like(gy), numpy.empty_like(gy)
                ggamma, gbeta = numpy.empty_like(gamma), \
                    numpy.empty_like(gamma)
                inv_m = gamma.dtype.type(1. / (x.size // gamma.size))
                if _loops_normalization.plane_grads(gy, x, mean, inv_std,
                                                    gamma * inv_std, inv_m,
                                                    x_hat, gx, ggamma, gbeta):
                    return gx, None, ggamma, gbeta
            x = numpy.ascontiguousarray(x)
        return super(_ChannelsLastStats, self).backward(
            axis, gamma, gy, x, x_layout, xp, expander, mean, inv_std, eps,
            var, forward_data)

    def get_mean_and_var(self, axis, gamma, x, xp, interm_dtype):
        if _over_positions(axis, x) and x.dtype == interm_dtype:
            mean = numpy.empty(x.shape[1], x.dtype)
            var = numpy.empty_like(mean)
            if _loops_normalization.channel_mean_var(x, mean, var):
                return mean, var
        return super(_ChannelsLastStats, self).get_mean_and_var(
            axis, gamma, x, xp, interm_dtype)

    def get_ggamma_and_gbeta(self, axis, gamma, gy, x_hat, xp):
        if _over_positions(axis, gy) and \
                gy.dtype == x_hat.dtype == gamma.dtype:
            gbeta = numpy.empty(gy.shape[1], gy.dtype)
            ggamma = numpy.empty_like(gbeta)
            if _loops_normalization.channel_sums(gy, None, gbeta) and \
                    _loops_normalization.channel_sums(gy, x_hat, ggamma):
                return gbeta, ggamma
        return super(_ChannelsLastStats, self).get_ggamma_and_gbeta(
            axis, gamma, gy, x_hat, xp)


def _over_positions(axis, x):
    """Is ``axis`` every axis of ``x`` but the channels (1)?"""
    return type(x) is numpy.ndarray and \
        tuple(axis) == (0,) + tuple(range(2, x.ndim))


@lowering(batch_normalization.FixedBatchNormalization)
def lower_fixed_batch_normalization(node, ctx):
    """Batch normalization with given statistics (Chainer's generic CPU
    formula; cuDNN on the GPU, so generic there)."""
    if ctx.xp is not numpy:
        return None
    eps = node.eps
    expander = node.expander
    axis = node.axis
    # As for convolutions: Chainer's formula, bit for bit, when recorded
    # for training (or in float16, where folding rounds visibly); the
    # folded one for inference.
    folds = not chainer.config.enable_backprop and all(
        d.itemsize >= 4 for d in ctx.in_dtypes)
    forward = _folded_bn(eps, expander) if folds else \
        _fixed_bn(eps, expander, axis)
    return Kernel(forward, attrs={'eps': eps, 'axis': axis},
                  grad=GradRule(_fixed_bn_grad(eps, expander, axis),
                                inputs=(0, 1, 3, 4)),
                  onnx=_fixed_bn_to_onnx(eps, axis, expander), fresh=folds,
                  lengths=rows_follow_first)


def _fixed_bn(eps, expander, axis):
    """``(x, gamma, beta, mean, var) -> y`` by Chainer's formula, bit for
    bit."""
    def fixed_bn(x, gamma, beta, mean, var):
        inv_var = numpy.reciprocal(var + eps)
        inv_std = numpy.sqrt(inv_var, dtype=inv_var.dtype)
        if _over_positions(axis, x) and \
                x.dtype == inv_std.dtype == gamma.dtype == beta.dtype:
            # A convolution's channels-last output, recorded with backprop
            # on (test mode outside no_backprop_mode): the same four steps
            # in one C loop (LeNet's first layer: 400 -> 60 us).
            y = numpy.empty_like(x)
            if _loops_normalization.channel_affine(x, mean, inv_std, gamma,
                                                   beta, y):
                return y
        x_hat = x - mean[expander]
        x_hat *= inv_std[expander]
        y = x_hat * gamma[expander]
        y += beta[expander]
        return y.astype(x.dtype, copy=False)
    return fixed_bn


def _folded_bn(eps, expander):
    """``(x, gamma, beta, mean, var) -> y`` for inference: one scale and
    one shift per channel, two passes over x instead of four (equal to
    Chainer's formula within rounding)."""
    def scale_shift(gamma, beta, mean, var):
        scale = gamma * numpy.sqrt(numpy.reciprocal(var + eps))
        return scale, beta - mean * scale

    def folded_bn(x, gamma, beta, mean, var):
        scale, shift = scale_shift(gamma, beta, mean, var)
        y = x * scale[expander]
        y += shift[expander]
        return y.astype(x.dtype, copy=False)
    folded_bn.scale_shift = scale_shift  # passes/fuse.py folds it into
    # the convolution before it
    return folded_bn


def _fixed_bn_grad(eps, expander, axis):
    """The gradient rule of FixedBatchNormalization:
    FixedBatchNormalizationGrad's forward, gradients of all five
    inputs."""
    def grad(xs, ys, gys, wanted):
        x, gamma, _, mean, var = xs
        gy, = gys
        inv_var = numpy.reciprocal(var + eps)
        inv_std = numpy.sqrt(inv_var, dtype=inv_var.dtype)
        gamma_over_std = gamma * inv_std
        gx = ggamma = gbeta = gmean = gvar = None
        if wanted[0]:
            gx = (gamma_over_std[expander] * gy).astype(dtype=x.dtype)
        if wanted[2] or wanted[3]:
            gbeta = gy.sum(axis=axis, dtype=gamma.dtype)
            if wanted[3]:
                gmean = -gamma_over_std * gbeta
        if wanted[1] or wanted[4]:
            x_hat = x - mean[expander]
            x_hat *= inv_std[expander]
            ggamma = (x_hat * gy).sum(axis=axis)
            if wanted[4]:
                gvar = -0.5 * inv_var * (gamma * ggamma).astype(
                    var.dtype, copy=False)
        return (gx, ggamma if wanted[1] else None,
                gbeta if wanted[2] else None, gmean, gvar)
    return grad


@lowering(layer_normalization.LayerNormalization)
def lower_layer_normalization(node, ctx):
    """Normalizes each row, then scales and shifts it."""
    xp = ctx.xp
    eps = node.eps
    # In one loop (``_loops_normalization``) for contiguous float32 or float64.
    one_pass = xp is numpy and len(set(ctx.in_dtypes)) == 1 and \
        ctx.in_dtypes[0] in LOOP_DTYPES
    layer_norm = _layer_norm(xp, eps, one_pass)

    def into(out, x, gamma, beta):
        return layer_norm(x, gamma, beta, out)
    alike = xp is numpy and len(set(ctx.in_dtypes)) == 1
    return Kernel(layer_norm, attrs={'eps': eps},
                  grad=GradRule(_layer_norm_grad(xp, eps), inputs=(0, 1),
                                onnx=_layer_norm_grad_to_onnx(eps, ctx)),
                  onnx=_layer_norm_to_onnx(eps), fresh=True,
                  into=into if alike else None, lengths=rows_row_wise)


def _layer_norm(xp, eps, one_pass):
    """``(x, gamma, beta, out=None) -> y``, normalizing each row of ``x``
    (into ``out``, if given); ``one_pass``: in C loops where the arrays
    allow."""
    def layer_norm(x, gamma, beta, out=None):
        if one_pass:  # Chainer's values, bit for bit, in two C passes
            y = _loops_normalization.layer_norm_rows(x, gamma, beta, eps, out)
            if y is not None:
                return y
        mu = xp.mean(x, axis=1, keepdims=True)
        x_mu = xp.subtract(x, mu, out=out)
        var = xp.mean(xp.square(x_mu), axis=1, keepdims=True)
        inv_std = 1. / xp.sqrt(var + eps)
        if not x_mu.dtype == inv_std.dtype == gamma.dtype == beta.dtype:
            return x_mu * inv_std * gamma[None, ] + beta[None, ]
        # The same products and sum, in place on x_mu's buffer.
        if one_pass:
            _loops_normalization.scale_shift_rows(
                x_mu, inv_std, numpy.ascontiguousarray(gamma),
                numpy.ascontiguousarray(beta))
            return x_mu
        x_mu *= inv_std
        x_mu *= gamma[None, ]
        x_mu += beta[None, ]
        return x_mu
    return layer_norm


def _layer_norm_grad(xp, eps):
    """The gradient rule of LayerNormalization: its backward's formulas,
    on arrays."""
    def grad(xs, ys, gys, wanted):
        x, gamma = xs[0], xs[1]
        gy, = gys
        g_beta = gy.sum(axis=0) if wanted[2] else None
        if not (wanted[0] or wanted[1]):
            return None, None, g_beta
        mu = xp.mean(x, axis=1, keepdims=True)
        x_mu = x - mu
        var = xp.mean(xp.square(x_mu), axis=1, keepdims=True)
        inv_std = 1. / xp.sqrt(var + eps)
        g_gamma = None
        if wanted[1]:
            g_gamma = (gy * (x_mu * inv_std)).sum(axis=0)
        if not wanted[0]:
            return None, g_gamma, g_beta
        g_x_hat = gy * gamma
        g_inv_std = (g_x_hat * x_mu).sum(axis=1, keepdims=True)
        g_x_mu_1 = g_x_hat * inv_std
        g_std = g_inv_std * (-1. / (var + eps))
        g_var = g_std * 0.5 * inv_std
        n_units = x.shape[1]
        g_squ_x_mu = g_var * (1. / n_units)
        g_x_mu_2 = g_squ_x_mu * 2 * x_mu
        g_x_1 = g_x_mu_1 + g_x_mu_2
        g_mu = g_x_1.sum(axis=1, keepdims=True) * (-1.)
        g_x_2 = g_mu * (1. / n_units)
        return g_x_1 + g_x_2, g_gamma, g_beta
    return grad


def _layer_norm_grad_to_onnx(eps, ctx):
    """:func:`_layer_norm_grad`'s formulas in ONNX, for a 2-D ``x`` and one
    dtype."""
    dtype = ctx.in_dtypes[0]
    n_units = ctx.in_shapes[0][-1]

    def convert(b, xs, ys, gys, wanted):
        if len(ctx.in_shapes[0]) != 2 or len(set(ctx.in_dtypes)) != 1:
            raise errors.ExportError('this gradient of LayerNormalization '
                                     'cannot be exported')

        def c(value):
            return b.constant(numpy.asarray(value, dtype))

        op = b.single

        def rows_sum(v):
            return op('ReduceSum', v, b.int64s([1]), keepdims=1)
        x, gamma = xs[0], xs[1]
        gy, = gys
        columns = b.int64s([0])
        g_beta = op('ReduceSum', gy, columns, keepdims=0) \
            if wanted[2] else None
        mu = op('ReduceMean', x, axes=[1], keepdims=1)
        x_mu = op('Sub', x, mu)
        var = op('ReduceMean', op('Mul', x_mu, x_mu), axes=[1], keepdims=1)
        var_eps = op('Add', var, c(eps))
        inv_std = op('Div', c(1), op('Sqrt', var_eps))
        g_gamma = op('ReduceSum', op('Mul', gy, op('Mul', x_mu, inv_std)),
                     columns, keepdims=0) if wanted[1] else None
        if not wanted[0]:
            return None, g_gamma, g_beta
        g_x_hat = op('Mul', gy, gamma)
        g_inv_std = rows_sum(op('Mul', g_x_hat, x_mu))
        g_x_mu_1 = op('Mul', g_x_hat, inv_std)
        g_std = op('Mul', g_inv_std, op('Div', c(-1), var_eps))
        g_var = op('Mul', op('Mul', g_std, c(0.5)), inv_std)
        g_squ_x_mu = op('Mul', g_var, c(1. / n_units))
        g_x_mu_2 = op('Mul', op('Mul', g_squ_x_mu, c(2)), x_mu)
        g_x_1 = op('Add', g_x_mu_1, g_x_mu_2)
        g_mu = op('Mul', rows_sum(g_x_1), c(-1))
        g_x_2 = op('Mul', g_mu, c(1. / n_units))
        return op('Add', g_x_1, g_x_2), g_gamma, g_beta
    return convert


@lowering(group_normalization.GroupNormalization)
def lower_group_normalization(node, ctx):
    """Normalizes each group of channels of each sample, then scales and
    shifts each channel: GroupNormalization's CPU forward and backward,
    for inputs of one dtype."""
    if ctx.xp is not numpy or len(set(ctx.in_dtypes)) != 1:
        return None
    groups, eps = node.groups, node.eps
    return Kernel(lambda x, gamma, beta: _group_norm(
        x, gamma, beta, groups, eps), attrs={'groups': groups, 'eps': eps},
        grad=GradRule(_group_norm_grad(groups, eps), inputs=(0, 1),
                      onnx=_group_norm_grad_to_onnx(groups, eps, ctx)),
        onnx=_group_norm_to_onnx(groups, eps, ctx), fresh=True)


def _group_statistics(x, groups, eps):
    """``(x as (B * groups, -1), mean, inv_std)``, as Chainer computes
    them."""
    x = x.reshape((x.shape[0] * groups, -1))
    mean = x.mean(axis=1, dtype=x.dtype)
    x_hat = x - mean[:, None]
    inv_std = (x_hat * x_hat).mean(axis=1)
    inv_std += eps
    numpy.sqrt(inv_std, out=inv_std)
    numpy.reciprocal(inv_std, out=inv_std)
    return x, mean, inv_std


def _group_norm(x, gamma, beta, groups, eps):
    if x.shape[1] % groups != 0:
        raise ValueError('The number of channels {} is not divisible by '
                         "'groups' argument {}.".format(x.shape[1], groups))
    rows, mean, inv_std = _group_statistics(x, groups, eps)
    x_hat = rows - mean[:, None]
    x_hat *= inv_std[:, None]
    y = x_hat.reshape(x.shape[:2] + (-1,))
    y *= gamma[:, None]
    y += beta[:, None]
    return y.reshape(x.shape)


def _group_norm_grad(groups, eps):
    """The gradients GroupNormalization's backward computes through its
    ``_XHat``, ``_ScaleShiftGrad`` and ``_XHatGrad`` nodes."""
    def grad(xs, ys, gys, wanted):
        x, gamma = xs[0], xs[1]
        rows, mean, inv_std = _group_statistics(x, groups, eps)
        x_hat = rows - mean[:, None]
        x_hat *= inv_std[:, None]
        gy = gys[0].reshape(x.shape[:2] + (-1,))
        per_channel = x_hat.reshape(gy.shape)
        g_beta = gy.sum(axis=(0, 2)) if wanted[2] else None
        g_gamma = (gy * per_channel).sum(axis=(0, 2)) if wanted[1] else None
        if not wanted[0]:
            return None, g_gamma, g_beta
        gx_hat = (gy * gamma[:, None]).reshape(x_hat.shape)
        gx_hat_avg = gx_hat.mean(axis=1, keepdims=True)
        gx_hat_x_hat_avg = (gx_hat * x_hat).mean(axis=1, keepdims=True)
        gx_std = gx_hat - gx_hat_avg - x_hat * gx_hat_x_hat_avg
        return (inv_std[:, None] * gx_std).reshape(x.shape), g_gamma, g_beta
    return grad


def _onnx_group_rows(b, x, groups, eps, ctx):
    """ONNX ``(x - its group's mean, 1 / its group's std)``, as ``(B *
    groups, -1)`` (see :func:`_group_statistics`), for any batch size."""
    op = b.single
    shape = ctx.in_shapes[0]
    rows = op('Reshape', x, b.int64s([-1, _size(shape[1:]) // groups]))
    mean = op('ReduceMean', rows, axes=[1], keepdims=1)
    centred = op('Sub', rows, mean)
    var = op('ReduceMean', op('Mul', centred, centred), axes=[1], keepdims=1)
    eps = b.constant(numpy.asarray(eps, ctx.in_dtypes[0]))
    return centred, op('Reciprocal', op('Sqrt', op('Add', var, eps)))


def _size(shape):
    return int(numpy.prod(shape, dtype=numpy.int64))


def _by_channel(b, ctx):
    """The ONNX shape ``(B, C, -1)`` of Chainer's ``x``, any batch size."""
    shape = ctx.in_shapes[0]
    return b.int64s([-1, shape[1], _size(shape[2:])])


def _per_channel(b, v):
    """A per-channel vector ``(C,)`` as ``(C, 1)``."""
    return b.single('Unsqueeze', v, b.int64s([1]))


def _group_norm_to_onnx(groups, eps, ctx):
    def convert(b, ins, outs):
        x, gamma, beta = ins
        op = b.single
        centred, inv_std = _onnx_group_rows(b, x, groups, eps, ctx)
        y = op('Add', op('Mul', op('Reshape', op('Mul', centred, inv_std),
                                   _by_channel(b, ctx)),
                         _per_channel(b, gamma)), _per_channel(b, beta))
        b.op('Reshape', [y, op('Shape', x)], outs)
    return convert


def _group_norm_grad_to_onnx(groups, eps, ctx):
    """:func:`_group_norm_grad`'s formulas in ONNX."""
    def convert(b, xs, ys, gys, wanted):
        op = b.single
        x, gamma = xs[0], xs[1]
        centred, inv_std = _onnx_group_rows(b, x, groups, eps, ctx)
        x_hat = op('Mul', centred, inv_std)
        gy = op('Reshape', gys[0], _by_channel(b, ctx))
        axes = b.int64s([0, 2])
        g_beta = op('ReduceSum', gy, axes, keepdims=0) if wanted[2] else None
        g_gamma = op('ReduceSum', op('Mul', gy, op(
            'Reshape', x_hat, _by_channel(b, ctx))), axes, keepdims=0) \
            if wanted[1] else None
        if not wanted[0]:
            return None, g_gamma, g_beta
        gx_hat = op('Reshape', op('Mul', gy, _per_channel(b, gamma)),
                    op('Shape', x_hat))
        avg = op('ReduceMean', gx_hat, axes=[1], keepdims=1)
        x_hat_avg = op('ReduceMean', op('Mul', gx_hat, x_hat), axes=[1],
                       keepdims=1)
        gx_std = op('Sub', op('Sub', gx_hat, avg),
                    op('Mul', x_hat, x_hat_avg))
        gx = op('Reshape', op('Mul', inv_std, gx_std), op('Shape', x))
        return gx, g_gamma, g_beta
    return convert


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

    node_eps = node.eps

    def grad(xs, ys, gys, wanted):
        # NormalizeL2.backward's formulas, on arrays.
        if not wanted[0]:
            return None,
        x, = xs
        gy, = gys
        norm_noeps = xp.sqrt(xp.sum(xp.square(x), axis=axis, keepdims=True),
                             dtype=x.dtype)
        norm = norm_noeps + node_eps
        x_gy_reduced = xp.sum(x * gy, axis=axis, keepdims=True)
        nonzero = norm_noeps != 0
        x_gy_reduced = xp.where(
            nonzero, x_gy_reduced / xp.where(nonzero, norm_noeps, 1),
            x_gy_reduced.dtype.type(0))
        gx = gy * norm - x_gy_reduced * x
        return utils.force_array(gx / norm ** 2),
    return Kernel(normalize, attrs={'eps': node.eps, 'axis': axis},
                  grad=GradRule(grad, inputs=(0,)),
                  onnx=_normalize_l2_to_onnx(node.eps, axis),
                  lengths=rows_in_place)


@lowering(local_response_normalization.LocalResponseNormalization)
def lower_local_response_normalization(node, ctx):
    """Cross-channel normalization (Chainer's CPU formula)."""
    if ctx.xp is not numpy or node._use_ideep:
        return None
    n, k, alpha, beta = node.n, node.k, node.alpha, node.beta
    half_n = n // 2

    def window_sum(a):
        total = a.copy()
        for i in range(1, half_n + 1):
            total[:, i:] += a[:, :-i]
            total[:, :-i] += a[:, i:]
        return total

    def lrn(x):
        x2 = numpy.square(x)
        sum_part = x2.copy()
        for i in range(1, half_n + 1):
            sum_part[:, i:] += x2[:, :-i]
            sum_part[:, :-i] += x2[:, i:]
        return x * (k + alpha * sum_part) ** -beta

    def grad(xs, ys, gys, wanted):
        # LocalResponseNormalizationGrad's CPU forward, with the scales
        # the forward keeps recomputed from x as it computes them.
        if not wanted[0]:
            return None,
        x, = xs
        y, = ys
        gy, = gys
        unit_scale = k + alpha * window_sum(numpy.square(x))
        scale = unit_scale ** -beta
        sum_part = window_sum(y * gy / unit_scale)
        return gy * scale - 2 * alpha * beta * x * sum_part,
    return Kernel(lrn, attrs={'n': n, 'k': k, 'alpha': alpha, 'beta': beta},
                  grad=GradRule(grad, inputs=(0,), outputs=(0,)),
                  onnx=_lrn_to_onnx(n, k, alpha, beta),
                  lengths=rows_follow_first)


def _fixed_bn_to_onnx(eps, axis, expander):
    """BatchNormalization (inference form) for the usual layout (one
    statistic per channel, axis 1); any other ``axis`` or mixed dtypes:
    Chainer's formula, with the statistics reshaped as ``expander``
    does."""
    def convert(b, ins, outs):
        ndim = len(b.in_shapes[0])
        if (len(set(b.in_dtypes)) == 1 and len(b.in_shapes[1]) == 1
                and ndim >= 2
                and tuple(axis) == (0,) + tuple(range(2, ndim))):
            b.op('BatchNormalization', ins, outs, epsilon=eps)
            return
        dtype = numpy.result_type(*b.in_dtypes)
        x, gamma, beta, mean, var = [
            _cast(b, name, d, dtype) for name, d in zip(ins, b.in_dtypes)]
        dims = iter(b.in_shapes[1])
        shape = b.int64s([1 if e is None else next(dims)
                          for e in expander])

        def expand(name):
            return b.op('Reshape', [name, shape])[0]
        eps_plus, = b.op('Add', [var, b.constant(dtype.type(eps))])
        inv_std, = b.op('Sqrt', b.op('Reciprocal', [eps_plus]))
        x_hat, = b.op('Sub', [x, expand(mean)])
        x_hat, = b.op('Mul', [x_hat, expand(inv_std)])
        y, = b.op('Mul', [x_hat, expand(gamma)])
        if dtype == b.out_dtypes[0]:
            b.op('Add', [y, expand(beta)], outs)
        else:
            y, = b.op('Add', [y, expand(beta)])
            _cast(b, y, dtype, b.out_dtypes[0], outs)
    return convert


def _cast(b, name, from_dtype, to_dtype, outs=None):
    """``name`` cast to ``to_dtype`` (``name`` itself if it has it)."""
    import onnx.helper

    if from_dtype == to_dtype and outs is None:
        return name
    return b.op('Cast', [name], outs,
                to=onnx.helper.np_dtype_to_tensor_dtype(
                    numpy.dtype(to_dtype)))[0]


def _layer_norm_to_onnx(eps):
    """LayerNormalization over axis 1 of Chainer's 2-D input."""
    def convert(b, ins, outs):
        b.op('LayerNormalization', ins, outs, axis=-1, epsilon=eps)
    return convert


def _normalize_l2_to_onnx(eps, axis):
    """``x / (ReduceL2(x) + eps)`` along ``axis``."""
    axes = [axis] if isinstance(axis, int) else list(axis)

    def convert(b, ins, outs):
        norm, = b.op('ReduceL2', ins, axes=axes, keepdims=1)
        norm, = b.op('Add', [norm, b.constant(b.in_dtypes[0].type(eps))])
        b.op('Div', [ins[0], norm], outs)
    return convert


def _lrn_to_onnx(n, k, alpha, beta):
    """LRN. Chainer sums ``n // 2`` channels on each side (``n + 1`` in
    all for an even ``n``) and scales the sum by ``alpha``; ONNX's
    ``size`` is the whole window and it scales by ``alpha / size``.
    onnxruntime's LRN wants a 4-D input: others are reshaped to one."""
    size = 2 * (n // 2) + 1

    def convert(b, ins, outs):
        shape = b.in_shapes[0]
        attrs = dict(size=size, alpha=float(alpha * size),
                     beta=float(beta), bias=float(k))
        if len(shape) == 4:
            b.op('LRN', ins, outs, **attrs)
            return
        if len(shape) < 4:
            axes = b.int64s(range(len(shape), 4))
            x, = b.op('Unsqueeze', [ins[0], axes])
            y, = b.op('LRN', [x], **attrs)
            b.op('Squeeze', [y, axes], outs)
            return
        # (An explicit length: -1 with a batch of 0 fails.)
        target = [0 if b.dynamic_batch else shape[0], shape[1],
                  int(numpy.prod(shape[2:])), 1]
        x, = b.op('Reshape', [ins[0], b.int64s(target)])
        y, = b.op('LRN', [x], **attrs)
        b.op('Reshape', [y] + b.op('Shape', ins), outs)
    return convert
