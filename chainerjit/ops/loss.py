"""Lowerings of chainer.functions.loss."""

import functools

import chainer
import numpy

from chainer.functions.loss import contrastive
from chainer.functions.loss import cross_covariance
from chainer.functions.loss import decov
from chainer.functions.loss import hinge
from chainer.functions.loss import huber_loss
from chainer.functions.loss import mean_absolute_error
from chainer.functions.loss import mean_squared_error
from chainer.functions.loss import sigmoid_cross_entropy
from chainer.functions.loss import softmax_cross_entropy
from chainer.functions.loss import triplet
from chainer import utils

from chainerjit import errors
from chainerjit.ops import Follow
from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import _loops_softmax
from chainerjit.ops import crf
from chainerjit.ops import segments as segments_ops
from chainerjit.ops import lowering
from chainerjit.ops import rows_averaged
from chainerjit.ops import rows_reduced
from chainerjit.ops import same_rows
from chainerjit.ops import takes_axes
from chainerjit.ops import takes_widest
from chainerjit.ops.activation import log_softmax_rows


class CRF1dStacked(chainer.FunctionNode):
    """``F.crf1d(cost, xs, ys, reduce)`` of steps stacked: ``xs`` as one
    array ``(T, B, K)`` and ``ys`` as ``(T, B)``, recorded so where a loop
    gave them (``frontend.recording_patches``). Its values and gradients
    are ``F.crf1d``'s (to rounding: ``ops.crf``) at any length and batch
    size."""

    def __init__(self, reduce):
        self.reduce = reduce

    def forward(self, inputs):
        self.retain_inputs((0, 1, 2))
        return crf.reduced(_stacked_run(*inputs)[0].loss, self.reduce),

    def backward(self, indexes, grad_outputs):
        inputs = [v.array for v in self.get_retained_inputs()]
        return _variables(_stacked_grads(
            self.reduce, inputs, grad_outputs[0].array)) + (None,)


def _stacked_run(cost, xs, ys):
    """``(crf.Run, the steps' scores, their labels)`` of
    :class:`CRF1dStacked`'s inputs."""
    xs, ys = list(xs), list(ys)
    return crf.forward(cost, xs, ys), xs, ys


def _stacked_grads(reduce, inputs, gy, found=None):
    """The gradients of the cost and the scores of :class:`CRF1dStacked`
    (of the forward's ``found``, if kept)."""
    run, xs, ys = found or _stacked_run(*inputs)
    g_cost, g_xs = crf.backward(inputs[0], xs, ys, run, crf.weights(
        gy, reduce, len(ys[0]), inputs[0].dtype))
    return g_cost, chainer.backend.get_array_module(g_xs[0]).stack(g_xs)


class CRF1dOfSequences(chainer.FunctionNode):
    """``L.CRF1d``'s ``forward(xs, ys, reduce, transpose=True)`` of ``n``
    sequences of any lengths, in any order: the inputs are the link's
    ``cost``, the scores ``xs`` (``(L_i, K)`` each) and the labels ``ys``
    (``(L_i,)`` each). As the link does, the sequences are sorted by
    length and transposed to steps of a shrinking batch (the losses of
    ``reduce='no'`` in that order); the values and gradients are
    ``F.crf1d``'s (to rounding: ``ops.crf``) at any lengths (Chainer's
    POS tagging example)."""

    def __init__(self, reduce, n):
        self.reduce, self.n = reduce, n

    def forward(self, inputs):
        self.retain_inputs(tuple(range(len(inputs))))
        return crf.reduced(_sequences_run(self.n, *inputs)[0].loss,
                           self.reduce),

    def backward(self, indexes, grad_outputs):
        inputs = [v.array for v in self.get_retained_inputs()]
        grads = _sequences_grads(self.reduce, self.n, inputs,
                                 grad_outputs[0].array)
        return _variables(grads) + (None,) * self.n


def _variables(arrays):
    """Arrays as Variables, ``None`` as it is."""
    return tuple(None if a is None else chainer.Variable(a) for a in arrays)


def _sequences_run(n, cost, *items):
    """``(crf.Run, the steps' scores, their labels, crf.Transposed)`` of
    :class:`CRF1dOfSequences`'s inputs."""
    transposed = crf.Transposed.of(items[:n])
    xs, ys = transposed.steps(items[:n]), transposed.steps(items[n:])
    return crf.forward(cost, xs, ys), xs, ys, transposed


def _sequences_grads(reduce, n, inputs, gy, found=None):
    """The gradients of the cost and the scores of
    :class:`CRF1dOfSequences` (of the forward's ``found``, if kept)."""
    run, xs, ys, transposed = found or _sequences_run(n, *inputs)
    g_cost, g_xs = crf.backward(inputs[0], xs, ys, run, crf.weights(
        gy, reduce, len(ys[0]), inputs[0].dtype))
    return (g_cost,) + tuple(transposed.items(g_xs, inputs[1:1 + n]))


def _crf_kernel(reduce, run, grads, n_labels, lengths, n_inputs=None):
    """The kernel of a CRF's loss: ``run(*inputs)`` gives its forward's
    results (a ``crf.Run`` first), which a training program's forward
    keeps for its backward; ``grads(reduce, inputs, gy, kept results or
    None)`` the gradients of the cost and the scores, then none for the
    ``n_labels`` labels' inputs (``n_inputs`` in all: the cost's, the
    scores' and the labels' by default)."""
    training, held = chainer.config.enable_backprop, []

    def forward(*inputs):
        found = run(*inputs)
        loss = crf.reduced(found[0].loss, reduce)
        held[:] = [(loss, found)] if training else []
        return loss

    def grad(xs, ys, gys, wanted):
        found = held.pop()[1] if held and held[0][0] is ys[0] else None
        return tuple(grads(reduce, xs, gys[0], found)) + (None,) * n_labels
    return Kernel(forward, {'reduce': reduce},
                  grad=GradRule(grad, inputs=range(n_inputs or
                                                   1 + 2 * n_labels),
                                outputs=(0,)),
                  lengths=lengths)


def _rows_of_each_sequence(rows):
    """Do ``rows`` (of a CRF's inputs of :class:`CRF1dOfSequences`) give
    each sequence's array rows of its own, on its first axis, and none to
    the cost?"""
    return rows[0] is None and not any(
        r is None or r.axis or r.widest or r.also for r in rows[1:])


@lowering(CRF1dOfSequences)
def lower_crf1d_of_sequences(node, ctx):
    n = node.n

    def lengths(rows):
        # Each sequence's steps, scores and labels, summed over; the
        # number of sequences is fixed.
        return Follow((None,)) if _rows_of_each_sequence(rows) else None
    return _crf_kernel(
        node.reduce, functools.partial(_sequences_run, n),
        lambda reduce, inputs, gy, found: _sequences_grads(
            reduce, n, inputs, gy, found), n, lengths)


class ArgmaxCRF1dOfSequences(chainer.FunctionNode):
    """``L.CRF1d``'s ``argmax(xs, transpose=True)`` of ``n`` sequences of
    scores ``xs`` of any lengths, in any order, by Chainer's own code: the
    outputs are the best paths' scores (in the order of the sequences
    sorted by length, as Chainer gives them) and each sequence's path.
    The scores' gradient is Chainer's graph's (``crf.best_scores_grad``);
    the paths have none."""

    def __init__(self, n):
        self.n = n

    def forward(self, inputs):
        self.retain_inputs(tuple(range(len(inputs))))
        return argmax_of_sequences(*inputs)

    def backward(self, indexes, grad_outputs):
        if grad_outputs[0] is None:
            return (None,) * len(indexes)
        inputs = [v.array for v in self.get_retained_inputs()]
        grads = best_scores_grads(inputs, grad_outputs[0].array)
        return _variables([grads[i] for i in indexes])


def argmax_of_sequences(cost, *xs):
    """``L.CRF1d.argmax(xs, transpose=True)`` of the link's ``cost`` and
    the arrays ``xs``: a tuple of arrays, the scores then the paths."""
    transposed = crf.Transposed.of(xs)
    score, path = crf.best_paths(cost, transposed.steps(xs))
    return (score,) + tuple(transposed.items(path, xs))


def best_scores_grads(inputs, gscores):
    """The gradients of the cost and of each sequence's scores (the inputs
    of :class:`ArgmaxCRF1dOfSequences`) from those of its best paths'
    scores, ``gscores``."""
    cost, items = inputs[0], inputs[1:]
    transposed = crf.Transposed.of(items)
    g_cost, g_steps = crf.best_scores_grad(cost, transposed.steps(items),
                                           gscores)
    return (g_cost,) + tuple(transposed.items(g_steps, items))


@lowering(ArgmaxCRF1dOfSequences)
def lower_argmax_crf1d_of_sequences(node, ctx):
    def lengths(rows):
        # Each path has its sequence's steps; the scores, one a sequence.
        return Follow((None,) + tuple(rows[1:])) \
            if _rows_of_each_sequence(rows) else None

    def grad(xs, ys, gys, wanted):
        if gys[0] is None:  # (of the paths alone)
            return (None,) * len(xs)
        grads = best_scores_grads(xs, gys[0])
        return tuple(g if w else None for g, w in zip(grads, wanted))
    return Kernel(argmax_of_sequences, multi=True, lengths=lengths,
                  grad=GradRule(grad, inputs=range(1 + node.n),
                                outputs=()))


class CRF1dOfSegments(chainer.FunctionNode):
    """:class:`CRF1dOfSequences` of the items of joined lists
    (``frontend.joining``): the inputs are the cost, the scores' rows of
    all the sequences one after another, their lengths, and the labels'
    rows likewise; any number and lengths of the sequences."""

    def __init__(self, reduce):
        self.reduce = reduce

    def forward(self, inputs):
        self.retain_inputs((0, 1, 2, 3))
        return crf.reduced(_segments_run(*inputs)[0].loss, self.reduce),

    def backward(self, indexes, grad_outputs):
        inputs = [v.array for v in self.get_retained_inputs()]
        return _variables(_segments_grads(
            self.reduce, inputs, grad_outputs[0].array)) + (None, None)


def _sequences_of(cost, rows, lengths, labels):
    """:class:`CRF1dOfSegments`'s inputs as :class:`CRF1dOfSequences`
    takes them: the cost, the scores of each sequence, their labels."""
    return [cost] + segments_ops.items_of(rows, lengths) + \
        segments_ops.items_of(labels, lengths)


def _segments_run(cost, rows, lengths, labels):
    """:func:`_sequences_run` of :class:`CRF1dOfSegments`'s inputs."""
    return _sequences_run(len(lengths),
                          *_sequences_of(cost, rows, lengths, labels))


def _segments_grads(reduce, inputs, gy, found=None):
    """The gradients of the cost and the scores' rows of
    :class:`CRF1dOfSegments` (of the forward's ``found``, if kept)."""
    grads = _sequences_grads(reduce, len(inputs[2]), _sequences_of(*inputs),
                             gy, found)
    return grads[0], numpy.concatenate(grads[1:])


def _segments_rows(rows):
    """``(the rows of all the items, their number)`` of a CRF of segments
    (the cost fixed, the scores and the labels as many rows), or
    ``None``."""
    cost, words, counts = rows[:3]
    if cost is not None or any(r is not None and (r.axis or r.widest or
                                                  r.also)
                               for r in rows[1:]) or \
            any(r != words for r in rows[3:]):
        return None
    return words, counts


@lowering(CRF1dOfSegments)
def lower_crf1d_of_segments(node, ctx):
    reduce = node.reduce

    def lengths(rows):
        # The words summed over; the losses of reduce='no', a sequence's
        # each.
        found = _segments_rows(rows)
        if found is None:
            return None
        return Follow((found[1] if reduce == 'no' else None,))
    return _crf_kernel(
        reduce, _segments_run, _segments_grads, 2, lengths, n_inputs=4)


class ArgmaxCRF1dOfSegments(chainer.FunctionNode):
    """:class:`ArgmaxCRF1dOfSequences` of the items of a joined list: the
    inputs are the cost, the scores' rows of all the sequences one after
    another and their lengths; the outputs the best paths' scores (in the
    order of the sequences sorted by length) and the paths' rows, one
    sequence after another."""

    def forward(self, inputs):
        self.retain_inputs((0, 1, 2))
        return argmax_of_segments(*inputs)

    def backward(self, indexes, grad_outputs):
        if grad_outputs[0] is None:
            return (None,) * len(indexes)
        inputs = [v.array for v in self.get_retained_inputs()]
        grads = segments_scores_grads(inputs, grad_outputs[0].array)
        return _variables([grads[i] for i in indexes])


def argmax_of_segments(cost, rows, lengths):
    """:func:`argmax_of_sequences` of the items ``rows`` holds (``(the
    scores, the paths' rows)``)."""
    found = argmax_of_sequences(cost, *segments_ops.items_of(rows, lengths))
    return found[0], numpy.concatenate(found[1:])


def segments_scores_grads(inputs, gscores):
    """:func:`best_scores_grads` of :class:`ArgmaxCRF1dOfSegments`'s
    inputs: the cost's and the rows' gradients, none for the lengths."""
    cost, rows, lengths = inputs
    grads = best_scores_grads(
        [cost] + segments_ops.items_of(rows, lengths), gscores)
    return grads[0], numpy.concatenate(grads[1:]), None


@lowering(ArgmaxCRF1dOfSegments)
def lower_argmax_crf1d_of_segments(node, ctx):
    def lengths(rows):
        # A score a sequence; the paths, a label a word.
        found = _segments_rows(rows)
        return None if found is None else Follow((found[1], found[0]))

    def grad(xs, ys, gys, wanted):
        if gys[0] is None:  # (of the paths alone)
            return (None,) * len(xs)
        grads = segments_scores_grads(xs, gys[0])
        return tuple(g if w else None for g, w in zip(grads, wanted))
    return Kernel(argmax_of_segments, multi=True, lengths=lengths,
                  grad=GradRule(grad, inputs=range(3), outputs=()))


@lowering(CRF1dStacked)
def lower_crf1d_stacked(node, ctx):
    reduce = node.reduce

    @takes_axes
    def lengths(rows):
        # The steps (axis 0) are summed over; the batch (axis 1) is the
        # output's axis 0, or averaged over.
        steps = rows[1]
        if steps is None or rows[0] is not None or rows[2] != steps:
            return None
        if steps.axis == 0 or reduce == 'mean':
            return Follow((None,))
        return Follow((steps._replace(axis=0),)) if steps.axis == 1 \
            else None
    return _crf_kernel(reduce, _stacked_run, _stacked_grads, 1, lengths)


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

    def grad_to_onnx(b, xs, ys, gys, wanted):
        diff = b.op('Sub', xs)[0]
        size = int(numpy.prod(ctx.in_shapes[0]))
        gx0 = b.op('Mul', [b.op('Mul', [gys[0], diff])[0], b.constant(
            numpy.asarray(2. / size, ctx.in_dtypes[0]))])[0]
        return (gx0 if wanted[0] else None,
                b.op('Neg', [gx0])[0] if wanted[1] else None)
    return Kernel(mse, grad=GradRule(grad, inputs=(0, 1),
                                     onnx=grad_to_onnx),
                  onnx=_mse_to_onnx, fresh=True, lengths=rows_averaged)


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
    return Kernel(mae, grad=GradRule(grad, inputs=(0, 1)),
                  onnx=_mae_to_onnx(dtype), lengths=rows_averaged)


@lowering(huber_loss.HuberLoss)
def lower_huber_loss(node, ctx):
    """``HuberLoss``'s forward and backward, step by step as Chainer's
    (summed along the second axis, or per element with ``reduce='no'``)."""
    xp, reduce = ctx.xp, node.reduce == 'sum_along_second_axis'
    delta_value = node.delta

    def forward(x0, x1):
        dtype = x0.dtype
        linear_part = utils.force_array(x0 - x1, dtype)
        delta = dtype.type(delta_value)
        xp.abs(linear_part, out=linear_part)
        square_part = utils.force_array(xp.square(linear_part), dtype)
        linear_part *= 2 * delta
        linear_part -= delta * delta
        xp.maximum(linear_part, delta * delta, out=linear_part)
        xp.minimum(square_part, linear_part, out=square_part)
        square_part *= 0.5
        return square_part.sum(axis=1) if reduce else square_part

    def grad(xs, ys, gys, wanted):
        diff = utils.force_array(xs[0] - xs[1])
        gx = utils.force_array(
            xp.clip(diff, -delta_value, delta_value), diff.dtype)
        gy = gys[0][:, None] if reduce else gys[0]
        gx = utils.force_array(xp.broadcast_to(gy, gx.shape) * gx)
        return gx if wanted[0] else None, \
            utils.force_array(-gx) if wanted[1] else None

    def to_onnx(b, ins, outs):
        dtype = b.in_dtypes[0]
        delta = numpy.asarray(delta_value, dtype)
        d = b.single('Abs', b.single('Sub', *ins))
        linear = b.single('Max', b.single(
            'Sub', b.single('Mul', d, _scalar(b, 2 * delta, dtype)),
            _scalar(b, delta * delta, dtype)), _scalar(b, delta * delta,
                                                       dtype))
        y = b.single('Mul', b.single('Min', b.single('Mul', d, d), linear),
                     _scalar(b, 0.5, dtype))
        if reduce:
            b.op('ReduceSum', [y, b.int64s([1])], outs, keepdims=0)
        else:
            b.op('Identity', [y], outs)

    def grad_to_onnx(b, xs, ys, gys, wanted):
        dtype = b.in_dtypes[0]
        clipped = b.single('Clip', b.single('Sub', *xs), _scalar(
            b, -delta_value, dtype), _scalar(b, delta_value, dtype))
        gy = b.single('Unsqueeze', gys[0], b.int64s([1])) if reduce \
            else gys[0]
        gx = b.single('Mul', gy, clipped)
        return gx, b.single('Neg', gx)
    return Kernel(forward, attrs={'delta': delta_value,
                                  'reduce': node.reduce},
                  grad=GradRule(grad, inputs=(0, 1), onnx=grad_to_onnx),
                  onnx=to_onnx, lengths=_huber_rows(reduce))


def _huber_rows(summed):
    """The ``Kernel.lengths`` rule of a Huber loss, whose kernels take
    any shape: the rows its two inputs share, which its output keeps (on
    the first axis, where it is ``summed`` along the second)."""
    def lengths(rows):
        found = same_rows(rows)
        if found is None or summed and found.axis:
            return None
        return Follow((found,))
    return lengths


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
                  grad=GradRule(grad, inputs=(0, 1)),
                  onnx=_sigmoid_ce_to_onnx(ignore_label, normalize, reduce),
                  lengths=rows_reduced if reduce == 'mean' else
                  _rows_kept_elementwise)


def _rows_kept_elementwise(rows):
    """The ``Kernel.lengths`` rule of a loss per element (``reduce='no'``)
    of inputs with the same rows: the output has them."""
    return rows_reduced(rows) and Follow(rows[:1])


@lowering(softmax_cross_entropy.SoftmaxCrossEntropy)
def lower_softmax_cross_entropy(node, ctx):
    """Softmax cross entropy with integer labels or soft targets (Chainer's
    CPU formula; the GPU has its own kernels, so generic there)."""
    if ctx.xp is not numpy or node.class_weight is not None:
        return None
    attrs = {'reduce': node.reduce}
    grad = GradRule(_softmax_ce_grad(node, ctx), inputs=(0, 1),
                    onnx=_softmax_ce_grad_to_onnx(node, ctx))
    if ctx.in_dtypes[1].kind == 'f':
        attrs['soft_target_loss'] = node.soft_target_loss
        return Kernel(_soft_target_ce(node), attrs=attrs, grad=grad,
                      onnx=_soft_target_ce_to_onnx(node),
                      lengths=_soft_target_lengths(node))
    attrs.update(normalize=node.normalize, ignore_label=node.ignore_label)
    label_ce = _label_ce(node, ctx)
    # For passes/keep.py: the same loss and the softmax, which eager's
    # forward also computes and keeps (cache_score) for its gradient.
    label_ce.with_softmax = (label_ce.and_softmax, GradRule(
        grad.fn, inputs=(1,), outputs=(1,), onnx=grad.onnx))
    return Kernel(label_ce, attrs=attrs, grad=grad,
                  onnx=_label_ce_to_onnx(node),
                  lengths=_label_ce_lengths(node, ctx))


def _soft_target_lengths(node):
    """The ``Kernel.lengths`` rule of the loss of ``x`` and soft targets
    of its shape: any number of rows both have (the mean's coefficient
    is counted from them when run)."""
    def lengths(rows):
        found = same_rows(rows)
        if found is None:
            return None
        return Follow((found if node.reduce == 'no' else None,))
    return lengths


def _label_ce_lengths(node, ctx):
    """The ``Kernel.lengths`` rule of the loss of ``x`` and its labels: any
    number of rows where ``x`` and ``t`` have the same, as the kernel and
    its gradient count the labels (``normalize``) or the batch and index
    the rows of the arrays they get: on the first
    axis, or of ``x`` of more than two axes, on an axis after the
    classes' (``(B, C, T)``, ``t`` of ``(B, T)``)."""
    @takes_widest  # (a padded block merged, or its words)
    def lengths(rows):
        if not labels_alike(rows):
            return None
        return Follow((rows[1] if node.reduce == 'no' else None,))
    return lengths


def labels_alike(rows):
    """Do the rows of the classes' scores and of their labels (``rows``)
    pair, as a kernel counting the labels takes them: as many, on the
    first axis of both, or, of scores of more than two axes, on an axis
    after the classes' (``(B, C, T)``, labels ``(B, T)``)?"""
    return None not in rows and rows[0].count() == rows[1].count() and \
        rows[0].widest == rows[1].widest and \
        _labels_axis(rows[0].axis) == rows[1].axis


def _labels_axis(axis):
    """The axis of the labels of the classes' scores' ``axis`` (their
    axis 1 is the classes')."""
    return 0 if axis == 0 else -1 if axis == 1 else axis - 1


def _softmax_ce_grad(node, ctx):
    """The gradient rule of SoftmaxCrossEntropy: the CPU forward of
    ``_SoftmaxCrossEntropyGrad_NoDoubleBackprop`` (no class weights), on
    the softmax the forward kept (its second output, ``passes/keep.py``)
    or recomputed as the forward computes it, and the coefficient
    computed as the forward does."""
    x_shape = ctx.in_shapes[0]
    soft_target = ctx.in_dtypes[1].kind == 'f'
    return _softmax_ce_grad_fn(
        ctx, soft_target, node.ignore_label, node.reduce == 'mean',
        _softmax_ce_coefficient(node, x_shape, soft_target))


def _softmax_ce_grad_to_onnx(node, ctx):
    """The ONNX gradient of the mean loss of a 2-D ``x`` and its integer
    labels: ``(softmax - one_hot(t))`` on the rows whose label is not
    ignored, times the loss's gradient over the labels counted."""
    x_shape, x_dtype = ctx.in_shapes[0], ctx.in_dtypes[0]
    mean = node.reduce == 'mean'

    def convert(b, xs, ys, gys, wanted):
        if not wanted[0]:
            return None, None
        if len(x_shape) != 2 or ctx.in_dtypes[1].kind == 'f' or not mean:
            raise errors.ExportError('this gradient of SoftmaxCrossEntropy '
                                     'cannot be exported')
        x, t = xs
        y = ys[1] if len(ys) > 1 and ys[1] is not None else \
            b.op('Softmax', [x], axis=1)[0]
        ignored = b.op('Equal', [t, b.constant(numpy.asarray(
            node.ignore_label, ctx.in_dtypes[1]))])[0]
        valid = b.cast(b.op('Not', [ignored])[0], numpy.bool_, x_dtype)
        label = b.cast(b.op('Where', [ignored, b.constant(numpy.zeros(
            (), ctx.in_dtypes[1])), t])[0], ctx.in_dtypes[1], numpy.int64)
        one_hot = b.op('OneHot', [label, b.int64s([x_shape[1]]),
                                  b.constant(numpy.asarray([0, 1], x_dtype))],
                       axis=-1)[0]
        rows = b.op('Unsqueeze', [valid, b.int64s([1])])[0]
        gx = b.op('Mul', [b.op('Sub', [y, one_hot])[0], rows])[0]
        if node.normalize:
            count = b.op('Max', [b.op('ReduceSum', [valid], keepdims=0)[0],
                                 b.constant(numpy.ones((), x_dtype))])[0]
        else:
            count = _batch_count(b, t, x_dtype)
        scale = b.op('Div', [b.cast(gys[0], ctx.in_dtypes[0], x_dtype),
                             count])[0]
        return b.op('Mul', [gx, scale])[0], None
    return convert


def _softmax_ce_coefficient(node, x_shape, soft_target):
    """The mean loss's coefficient as the forward computes it, or
    ``None`` where the forward counts it from the labels, or
    :data:`PER_ROW` where from the rows of ``x``."""
    if soft_target:
        return PER_POSITION
    if not node.normalize:
        return PER_ROW
    return None  # counted from t


#: The coefficient of a mean over the rows of ``x`` (``normalize=False``),
#: ``1.0 / max(len(x), 1)``, however many there are (as many as the
#: labels ``t`` have).
PER_ROW = 'per row'


#: The coefficient of a mean over the positions of soft targets ``t``
#: (of ``x``'s shape), ``1.0 / (t.size / t.shape[1])``, as Chainer's.
PER_POSITION = 'per position'


def _coefficient_of(coeff, t, ignore_label=None):
    """The mean loss's coefficient (:func:`_softmax_ce_coefficient`) for
    the labels ``t``."""
    if coeff is None:
        return _coefficient(t, ignore_label)
    if coeff is PER_POSITION:
        return 1.0 / (t.size / t.shape[1])
    return 1.0 / max(len(t), 1) if coeff is PER_ROW else coeff


@functools.lru_cache(maxsize=16)
def _label_positions(x_shape, t_shape):
    """``(fst_index, trd_index)``: where the labels pick their classes'
    entries of the softmax, for an ``x`` of more than two axes; ``None``
    for a 2-D ``x``, whose rows are counted from the labels. (Read
    only.)"""
    t_size = int(numpy.prod(t_shape))
    if len(x_shape) == 2 or not t_size:
        return None, None
    n_unit = t_size // x_shape[0]
    return numpy.arange(t_size) // n_unit, numpy.arange(t_size) % n_unit


def _softmax_ce_grad_fn(ctx, soft_target, ignore_label, mean, coeff):
    """``grad(xs, ys, gys, wanted)`` of :func:`_softmax_ce_grad`, at any
    shape of ``x`` (but for ``coeff``)."""
    x_shape = ctx.in_shapes[0]

    def grad(xs, ys, gys, wanted):
        if not wanted[0]:
            return None, None
        x, t = xs
        gloss = gys[0]
        kept = len(ys) == 2  # the softmax kept (x not given)
        shape = (ys[1] if kept else x).shape
        if 0 in shape:
            return numpy.zeros(shape, dtype=ctx.in_dtypes[0]), None
        if kept:
            y = ys[1].copy()
        else:
            y = log_softmax_rows(x)
            numpy.exp(y, out=y)
        if not soft_target and mean and len(x_shape) == 2 and \
                _loops_softmax.softmax_ce_grad(y, t, ignore_label, float(
                    gloss * _coefficient_of(coeff, t, ignore_label))):
            return y, None  # the passes below in one C loop
        coefficient = _coefficient_of(coeff, t, ignore_label) if mean \
            else None
        t_valid = t != ignore_label
        t = t * t_valid
        if soft_target:
            gx = y - t
        elif len(x_shape) == 2:
            gx = y
            gx[numpy.arange(len(t)), t] -= 1
            gx *= t_valid.reshape((len(t), 1))
        else:
            fst_index, trd_index = _label_positions(shape, t.shape)
            gx = y.reshape(y.shape[0], y.shape[1], -1)
            gx[fst_index, t.ravel(), trd_index] -= 1
            gx *= t_valid.reshape((len(t), 1, -1))
            gx = gx.reshape(y.shape)
        if not mean:
            gx *= gloss[:, None]
        else:
            gx *= gloss * coefficient
        return gx, None
    return grad


def _coefficient(t, ignore_label=None):
    """Chainer's ``1.0 / max(count, 1)`` for the labels counted (``t !=
    ignore_label``, or ``t`` itself a mask), a NumPy float64."""
    valid = t if ignore_label is None else t != ignore_label
    return 1.0 / max(valid.sum(), 1)


def _label_ce(node, ctx):
    """Softmax cross entropy of integer labels ``t``."""
    x_shape = ctx.in_shapes[0]
    ignore_label, reduce = node.ignore_label, node.reduce
    n_classes = x_shape[1]
    reduc_dtype = softmax_cross_entropy._reduction_dtype(ctx.in_dtypes[0])

    def label_ce(x, t):
        return loss(log_softmax_rows(x), t)

    def and_softmax(x, t):
        log_y = log_softmax_rows(x)
        return loss(log_y, t), numpy.exp(log_y)

    def loss(log_y, t):
        if reduce == 'mean':
            found = mean_label_loss(log_y, t, ignore_label, node.normalize)
            if found is not None:
                return found[0]
        log_yd = numpy.rollaxis(log_y, 1).reshape(n_classes, -1)
        t_valid = t != ignore_label
        t = t * t_valid
        log_p = log_yd[t.ravel(), numpy.arange(t.size)]
        log_p *= t_valid.ravel()
        if reduce != 'mean':
            return -log_p.reshape(t.shape)
        count = t_valid.sum() if node.normalize else len(log_y)
        return _mean_of(log_p.sum(keepdims=True, dtype=reduc_dtype),
                        1.0 / max(count, 1), log_y.dtype)
    label_ce.and_softmax = and_softmax
    return label_ce


def mean_label_loss(log_y, t, ignore_label, normalize):
    """``(loss, coefficient)`` of SoftmaxCrossEntropy's mean loss of labels
    ``t`` from the log-softmax ``log_y`` (N, C), as its CPU forward
    computes them (the coefficient is its ``_coeff``): the picks and
    their sum in C (``_loops_softmax.picked_log_prob_sum``), bit for bit;
    None for arrays that loop does not take."""
    found = _loops_softmax.picked_log_prob_sum(log_y, t, ignore_label)
    if found is None:
        return None
    summed, valid = found
    coefficient = 1.0 / max(valid if normalize else len(log_y), 1)
    return _mean_of(summed, coefficient, log_y.dtype), coefficient


def _mean_of(summed, coefficient, dtype):
    """Chainer's mean label loss from the picked log-probabilities' sum
    (a 1-element array) and the coefficient, ``1 / count``."""
    y = summed * (-coefficient)
    return y.astype(dtype, copy=False).reshape(())


def _soft_target_ce(node):
    """Softmax cross entropy (or KL divergence) of soft targets ``t``."""
    kl, eps = node.soft_target_loss == 'kl-divergence', node.eps
    reduce = node.reduce

    def soft_target_ce(x, t):
        log_y = log_softmax_rows(x)
        if kl:
            ret = numpy.sum(t * (numpy.log(t + eps) - log_y), axis=1)
        else:
            ret = -numpy.sum(t * log_y, axis=1)
        if reduce != 'mean':
            return ret
        return (ret.sum(keepdims=True) *
                _coefficient_of(PER_POSITION, x)).reshape(())
    return soft_target_ce


# ONNX converters. The losses Chainer averages are 0-d outputs; counts
# that depend on the batch size are read from the input's shape when the
# batch is dynamic.

def _cast(b, name, to_dtype, outs=None):
    import onnx.helper

    to = onnx.helper.np_dtype_to_tensor_dtype(numpy.dtype(to_dtype))
    return b.op('Cast', [name], outs, to=to)[0]


def _scalar(b, value, dtype):
    return b.constant(numpy.asarray(value, dtype=dtype))


def _element_count(b, x, static_count, dtype):
    """The number of elements of ``x`` (``static_count`` when the batch
    is static), as a 0-d ``dtype`` tensor."""
    if not b.dynamic_batch:
        return _scalar(b, static_count, dtype)
    return _cast(b, b.op('Size', [x])[0], dtype)


def _batch_count(b, x, dtype):
    """``max(1, len(x))`` as a 0-d ``dtype`` tensor."""
    if not b.dynamic_batch:
        return _scalar(b, max(1, b.in_shapes[0][0]), dtype)
    n, = b.op('Shape', [x], start=0, end=1)
    n, = b.op('Squeeze', [n, b.int64s([0])])
    return b.op('Max', [_cast(b, n, dtype), _scalar(b, 1, dtype)])[0]


def _valid_count(b, t, ignore_label, dtype):
    """``max(1, (t != ignore_label).sum())`` as a 0-d ``dtype`` tensor,
    and the mask ``t != ignore_label`` in ``dtype``."""
    ignored, = b.op('Equal', [t, _scalar(b, ignore_label, b.in_dtypes[1])])
    mask = _cast(b, b.op('Not', [ignored])[0], dtype)
    count, = b.op('ReduceSum', [mask], keepdims=0)
    return b.op('Max', [count, _scalar(b, 1, dtype)])[0], mask


def _mse_to_onnx(b, ins, outs):
    """``sum((x0 - x1) ** 2) / size``."""
    diff, = b.op('Sub', ins)
    total, = b.op('ReduceSumSquare', [diff], keepdims=0)
    size = int(numpy.prod(b.in_shapes[0]))
    b.op('Div', [total, _element_count(b, diff, size, b.out_dtypes[0])],
         outs)


def _mae_to_onnx(dtype):
    """``sum(|x0 - x1|) / size``, accumulated in ``dtype`` (float32 for
    float16 inputs), as Chainer does."""
    def convert(b, ins, outs):
        diff, = b.op('Sub', ins)
        if b.in_dtypes[0] != dtype:
            diff = _cast(b, diff, dtype)
        total, = b.op('ReduceL1', [diff], keepdims=0)
        size = _element_count(b, diff, int(numpy.prod(b.in_shapes[0])),
                              dtype)
        if b.out_dtypes[0] == dtype:
            b.op('Div', [total, size], outs)
        else:
            _cast(b, b.op('Div', [total, size])[0], b.out_dtypes[0], outs)
    return convert


def _sigmoid_ce_to_onnx(ignore_label, normalize, reduce):
    """Chainer's formula: ``-(mask * (x * (t - (x >= 0))
    - log(1 + exp(-|x|))))``, then the mean over the valid labels
    (``normalize``) or over the batch."""
    def convert(b, ins, outs):
        x, t = ins
        dtype = b.in_dtypes[0]
        count, mask = _valid_count(b, t, ignore_label, dtype)
        positive = _cast(b, b.op('GreaterOrEqual', [
            x, _scalar(b, 0, dtype)])[0], dtype)
        shift, = b.op('Sub', [_cast(b, t, dtype), positive])
        linear, = b.op('Mul', [x, shift])
        # (onnxruntime's Softplus takes float32 only.)
        soft, = b.op('Exp', b.op('Neg', b.op('Abs', [x])))
        soft, = b.op('Log', b.op('Add', [soft, _scalar(b, 1, dtype)]))
        loss, = b.op('Mul', [mask] + b.op('Sub', [linear, soft]))
        if reduce != 'mean':
            b.op('Neg', [loss], outs)
            return
        if not normalize:
            count = _batch_count(b, x, dtype)
        total, = b.op('Neg', b.op('ReduceSum', [loss], keepdims=0))
        b.op('Div', [total, count], outs)
    return convert


def _label_ce_to_onnx(node):
    """SoftmaxCrossEntropyLoss (``reduction='none'``: ignored labels give
    0; a recorded batch of no rows gives zeros), then for
    ``reduce='mean'`` the sum divided by the number of valid labels
    (``normalize``; at least 1, where ONNX's ``'mean'`` would divide by
    0) or by the batch size."""
    ignore_label, normalize = node.ignore_label, node.normalize
    reduce = node.reduce

    def convert(b, ins, outs):
        x, t = ins
        dtype = b.in_dtypes[0]
        if not b.dynamic_batch and 0 in b.in_shapes[0]:
            # onnxruntime's SoftmaxCrossEntropyLoss fails on no rows.
            b.op('Identity', [b.constant(numpy.zeros(
                b.out_shapes[0], dtype=b.out_dtypes[0]))], outs)
            return
        attrs = dict(reduction='none', ignore_index=int(ignore_label))
        if reduce != 'mean':
            b.op('SoftmaxCrossEntropyLoss', ins, outs, **attrs)
            return
        loss, = b.op('SoftmaxCrossEntropyLoss', ins, **attrs)
        if normalize:
            count, _ = _valid_count(b, t, ignore_label, dtype)
        else:
            count = _batch_count(b, x, dtype)
        total, = b.op('ReduceSum', [loss], keepdims=0)
        b.op('Div', [total, count], outs)
    return convert


def _soft_target_ce_to_onnx(node):
    """Cross entropy ``-sum(t * log_softmax(x), axis=1)`` or KL divergence
    ``sum(t * (log(t + eps) - log_softmax(x)), axis=1)``, then for
    ``reduce='mean'`` the mean over the other axes."""
    kl, eps = node.soft_target_loss == 'kl-divergence', node.eps
    reduce = node.reduce

    def convert(b, ins, outs):
        x, t = ins
        dtype = b.in_dtypes[0]
        log_y, = b.op('LogSoftmax', [x], axis=1)
        if kl:
            log_t, = b.op('Log', b.op('Add', [t, _scalar(b, eps, dtype)]))
            terms, = b.op('Mul', [t] + b.op('Sub', [log_t, log_y]))
        else:
            terms, = b.op('Neg', b.op('Mul', [t, log_y]))
        axes = b.int64s([1])
        if reduce != 'mean':
            b.op('ReduceSum', [terms, axes], outs, keepdims=0)
            return
        ret, = b.op('ReduceSum', [terms, axes], keepdims=0)
        shape = b.in_shapes[0]
        count = _element_count(
            b, ret, int(numpy.prod(shape)) // shape[1], dtype)
        b.op('Div', b.op('ReduceSum', [ret], keepdims=0) + [count], outs)
    return convert


@lowering(hinge.Hinge)
def lower_hinge(node, ctx):
    """``Hinge``'s CPU forward and backward: ``max(0, 1 + x)`` with the
    label's entry of each row negated (``norm='L2'``: squared), its mean
    over the rows or per element (``reduce='no'``)."""
    if ctx.xp is not numpy:
        return None  # the generic path runs Hinge's GPU kernels
    squared, mean = node.norm == 'L2', node.reduce == 'mean'

    def forward(x, t):
        num = len(x)
        loss = _hinge_margins(x, t)
        if squared:
            loss = loss ** 2
        if mean:
            loss = loss.sum() / num
        return numpy.array(loss, dtype=x.dtype)

    def grad(xs, ys, gys, wanted):
        if not wanted[0]:
            return None, None
        x, t = xs
        gloss = gys[0].copy()
        if mean:
            gloss /= len(t)
        bottom_diff = _hinge_margins(x, t)
        bottom_diff[numpy.arange(len(t)), t] *= -1
        if squared:
            return 2 * gloss * bottom_diff, None
        return gloss * numpy.sign(bottom_diff), None
    return Kernel(forward, attrs={'norm': node.norm, 'reduce': node.reduce},
                  grad=GradRule(grad, inputs=(0, 1),
                                onnx=_hinge_grad_to_onnx(squared, mean)),
                  onnx=_hinge_to_onnx(squared, mean),
                  lengths=_rows_of_loss(mean))


def _hinge_margins(x, t):
    """``max(0, 1 + x)`` with ``x[n, t[n]]`` negated first, as Hinge
    computes its ``bottom_diff``."""
    bottom_diff = numpy.copy(x)
    bottom_diff[numpy.arange(len(x)), t] *= -1
    return numpy.maximum(0, 1 + bottom_diff)


def _rows_of_loss(mean):
    """The ``Kernel.lengths`` rule of a loss of inputs with the same rows,
    averaged over them or kept per row (``reduce='no'``)."""
    return rows_reduced if mean else _rows_kept_elementwise


@lowering(contrastive.Contrastive)
def lower_contrastive(node, ctx):
    """``Contrastive``'s forward (in the dtype NumPy promotes the labels
    and distances to) and its backward's formulas, on arrays."""
    xp, margin, mean = ctx.xp, node.margin, node.reduce == 'mean'

    def forward(x0, x1, y):
        diff = x0 - x1
        dist_sq = xp.sum(diff ** 2, axis=1)
        dist = xp.sqrt(dist_sq)
        mdist = margin - dist
        dist = xp.maximum(mdist, 0)
        loss = (y * dist_sq + (1 - y) * dist * dist) * .5
        if mean:
            loss = xp.sum(loss) / x0.shape[0]
        return xp.array(loss, dtype=x0.dtype)

    def grad(xs, ys, gys, wanted):
        if not (wanted[0] or wanted[1]):
            return None, None, None
        gx0 = _contrastive_grad(xp, margin, mean, *(xs + tuple(gys)))
        return (gx0 if wanted[0] else None,
                utils.force_array(-gx0) if wanted[1] else None, None)
    return Kernel(forward, attrs={'margin': margin, 'reduce': node.reduce},
                  grad=GradRule(grad, inputs=(0, 1, 2),
                                onnx=_contrastive_grad_to_onnx(margin, mean)),
                  onnx=_contrastive_to_onnx(margin, mean),
                  lengths=_rows_of_loss(mean))


def _contrastive_grad(xp, margin, mean, x0, x1, y, gy):
    """The gradient of ``x0``, as ``Contrastive.backward`` computes it
    (each step one of the Chainer functions it applies)."""
    dtype = x0.dtype
    x_dim = x0.shape[1]
    diff = utils.force_array(x0 - x1)
    dist = xp.sqrt(utils.force_array(diff ** dtype.type(2), dtype).sum(
        axis=1))
    mdist = utils.force_array(dtype.type(margin) - dist)
    y = xp.repeat(y[:, None], x_dim, axis=1)
    alpha = utils.force_array(dtype.type(1. / y.shape[0]) * gy) if mean \
        else gy[:, None]
    alpha = xp.broadcast_to(alpha, y.shape)
    eps = 5e-3 if dtype == numpy.float16 else 1e-7
    dist = xp.maximum(xp.repeat(dist[:, None], x_dim, axis=1),
                      xp.full(y.shape, eps, dtype=dtype))
    similar = utils.force_array(alpha * y.astype(dtype)) * diff
    mdist = xp.maximum(xp.repeat(mdist[:, None], x_dim, axis=1),
                       xp.zeros(y.shape, dtype=dtype))
    dissimilar = utils.force_array(alpha * (1 - y).astype(dtype)) * mdist
    dissimilar = dissimilar * -utils.force_array(diff / dist)
    return utils.force_array(similar + dissimilar)


@lowering(triplet.Triplet)
def lower_triplet(node, ctx):
    """``Triplet``'s forward and its backward's formulas, on arrays, for
    2-D inputs (the backward's masks are 2-D)."""
    if len(ctx.in_shapes[0]) != 2:
        return None
    xp, margin, mean = ctx.xp, node.margin, node.reduce == 'mean'

    def forward(anchor, positive, negative):
        dist_hinge = _triplet_hinge(xp, margin, anchor, positive, negative)
        loss = xp.sum(dist_hinge) / anchor.shape[0] if mean else dist_hinge
        return xp.array(loss, dtype=anchor.dtype)

    def grad(xs, ys, gys, wanted):
        anchor, positive, negative = xs
        dtype = anchor.dtype
        mask = xp.array(xp.repeat(_triplet_hinge(
            xp, margin, *xs)[:, None], anchor.shape[1], axis=1) > 0,
            dtype=dtype)
        gy, = gys
        g = utils.force_array(dtype.type(1. / anchor.shape[0]) * gy) \
            if mean else gy[:, None]
        tmp = utils.force_array(
            dtype.type(2) * xp.broadcast_to(g, mask.shape)) * mask
        return tuple(
            utils.force_array(tmp * (a - b)) if w else None
            for w, (a, b) in zip(wanted, ((negative, positive),
                                          (positive, anchor),
                                          (anchor, negative))))
    return Kernel(forward, attrs={'margin': margin, 'reduce': node.reduce},
                  grad=GradRule(grad, inputs=(0, 1, 2),
                                onnx=_triplet_grad_to_onnx(margin, mean)),
                  onnx=_triplet_to_onnx(margin, mean),
                  lengths=_rows_of_loss(mean))


def _triplet_hinge(xp, margin, anchor, positive, negative):
    """``max(0, |a - p|^2 - |a - n|^2 + margin)`` per row, as Triplet's
    forward computes its ``dist_hinge``."""
    dist = xp.sum(
        (anchor - positive) ** 2 - (anchor - negative) ** 2,
        axis=1) + margin
    return xp.maximum(dist, 0)


def _row_count(b, x, dtype):
    """``len(x)`` as a 0-d ``dtype`` tensor."""
    if not b.dynamic_batch:
        return _scalar(b, b.in_shapes[0][0], dtype)
    n, = b.op('Shape', [x], start=0, end=1)
    return _cast(b, b.op('Squeeze', [n, b.int64s([0])])[0], dtype)


def _mean_of_rows(b, loss, x, loss_dtype, outs):
    """``sum(loss) / len(x)``, divided in float64 as NumPy divides a sum
    by an int, written to ``outs`` in the output's dtype."""
    total = b.cast(b.single('ReduceSum', loss, keepdims=0), loss_dtype,
                   numpy.float64)
    mean = b.single('Div', total, _row_count(b, x, numpy.float64))
    _cast(b, mean, b.out_dtypes[0], outs)


def _hinge_signs(b, t, n_classes, dtype):
    """``-1`` at each row's label, ``1`` elsewhere: (N, K) in ``dtype``."""
    label = b.cast(t, b.in_dtypes[1], numpy.int64)
    # (onnxruntime's OneHot gives no float64 values.)
    return b.cast(b.single('OneHot', label, b.int64s([n_classes]),
                           b.int64s([1, -1]), axis=-1), numpy.int64, dtype)


def _hinge_margins_onnx(b, x, t):
    """``max(0, 1 + x * signs)`` and the signs (:func:`_hinge_signs`)."""
    dtype = b.in_dtypes[0]
    signs = _hinge_signs(b, t, b.in_shapes[0][1], dtype)
    margins = b.single('Max', b.single('Add', b.single('Mul', x, signs),
                                       _scalar(b, 1, dtype)),
                       _scalar(b, 0, dtype))
    return margins, signs


def _hinge_to_onnx(squared, mean):
    def convert(b, ins, outs):
        x, t = ins
        loss, _ = _hinge_margins_onnx(b, x, t)
        if squared:
            loss = b.single('Mul', loss, loss)
        if mean:
            _mean_of_rows(b, loss, x, b.in_dtypes[0], outs)
        else:
            b.op('Identity', [loss], outs)
    return convert


def _hinge_grad_to_onnx(squared, mean):
    """``sign(d) * gy`` (``'L1'``) or ``2 * gy * d`` (``'L2'``) of the
    margins ``d`` with the label's entries negated back, ``gy`` divided by
    the rows for the mean."""
    def convert(b, xs, ys, gys, wanted):
        if not wanted[0]:
            return None, None
        x, t = xs
        dtype = b.in_dtypes[0]
        margins, signs = _hinge_margins_onnx(b, x, t)
        bottom_diff = b.single('Mul', margins, signs)
        gloss = gys[0]
        if mean:
            gloss = b.single('Div', gloss, _row_count(b, x, dtype))
        if squared:
            return b.single('Mul', b.single(
                'Mul', _scalar(b, 2, dtype), gloss), bottom_diff), None
        return b.single('Mul', gloss, b.single('Sign', bottom_diff)), None
    return convert


def _contrastive_to_onnx(margin, mean):
    """``(y * d^2 + (1 - y) * max(margin - d, 0)^2) * .5`` of the rows'
    distances ``d``, in the dtype NumPy promotes labels and distances
    to."""
    def convert(b, ins, outs):
        x0, x1, y = ins
        dtype = b.in_dtypes[0]
        loss_dtype = numpy.promote_types(b.in_dtypes[2], dtype)
        dist_sq = b.single('ReduceSumSquare', b.single('Sub', x0, x1),
                           axes=[1], keepdims=0)
        mdist = b.single('Max', b.single(
            'Sub', _scalar(b, margin, dtype), b.single('Sqrt', dist_sq)),
            _scalar(b, 0, dtype))
        dist_sq = b.cast(dist_sq, dtype, loss_dtype)
        mdist = b.cast(mdist, dtype, loss_dtype)
        labels = b.cast(y, b.in_dtypes[2], loss_dtype)
        others = b.single('Sub', _scalar(b, 1, loss_dtype), labels)
        loss = b.single('Mul', b.single('Add', b.single(
            'Mul', labels, dist_sq), b.single('Mul', b.single(
                'Mul', others, mdist), mdist)), _scalar(b, .5, loss_dtype))
        if mean:
            _mean_of_rows(b, loss, x0, loss_dtype, outs)
        else:
            _cast(b, loss, b.out_dtypes[0], outs)
    return convert


def _contrastive_grad_to_onnx(margin, mean):
    """``alpha * (y * diff - (1 - y) * max(margin - d, 0) * diff /
    max(d, eps))``, ``alpha`` the loss's gradient per row."""
    def convert(b, xs, ys, gys, wanted):
        if not (wanted[0] or wanted[1]):
            return None, None, None
        x0, x1, y = xs
        dtype = b.in_dtypes[0]
        diff = b.single('Sub', x0, x1)
        dist = b.single('Sqrt', b.single('ReduceSumSquare', diff,
                                         axes=[1], keepdims=1))
        mdist = b.single('Max', b.single(
            'Sub', _scalar(b, margin, dtype), dist), _scalar(b, 0, dtype))
        eps = 5e-3 if dtype == numpy.float16 else 1e-7
        dist = b.single('Max', dist, _scalar(b, eps, dtype))
        axes = b.int64s([1])
        labels = b.single('Unsqueeze', b.cast(y, b.in_dtypes[2], dtype),
                          axes)
        alpha = b.single('Div', gys[0], _row_count(b, x0, dtype)) if mean \
            else b.single('Unsqueeze', gys[0], axes)
        similar = b.single('Mul', b.single('Mul', alpha, labels), diff)
        others = b.single('Sub', _scalar(b, 1, dtype), labels)
        dissimilar = b.single('Mul', b.single('Mul', b.single(
            'Mul', alpha, others), mdist), b.single(
                'Neg', b.single('Div', diff, dist)))
        gx0 = b.single('Add', similar, dissimilar)
        return (gx0 if wanted[0] else None,
                b.single('Neg', gx0) if wanted[1] else None, None)
    return convert


def _triplet_hinge_onnx(b, anchor, positive, negative, margin, keepdims):
    dtype = b.in_dtypes[0]
    axes = b.int64s([1])
    near = b.single('Sub', anchor, positive)
    far = b.single('Sub', anchor, negative)
    dist = b.single('ReduceSum', b.single(
        'Sub', b.single('Mul', near, near), b.single('Mul', far, far)),
        axes, keepdims=keepdims)
    return b.single('Max', b.single('Add', dist, _scalar(b, margin, dtype)),
                    _scalar(b, 0, dtype))


def _triplet_to_onnx(margin, mean):
    """``max(0, |a - p|^2 - |a - n|^2 + margin)`` per row, or its mean."""
    def convert(b, ins, outs):
        hinge_ = _triplet_hinge_onnx(b, *ins, margin=margin, keepdims=0)
        if mean:
            _mean_of_rows(b, hinge_, ins[0], b.in_dtypes[0], outs)
        else:
            b.op('Identity', [hinge_], outs)
    return convert


def _triplet_grad_to_onnx(margin, mean):
    """``2 * gy * [hinge > 0]`` times ``n - p``, ``p - a`` and ``a - n``."""
    def convert(b, xs, ys, gys, wanted):
        anchor, positive, negative = xs
        dtype = b.in_dtypes[0]
        hinge_ = _triplet_hinge_onnx(b, *xs, margin=margin, keepdims=1)
        mask = b.cast(b.single('Greater', hinge_, _scalar(b, 0, dtype)),
                      numpy.bool_, dtype)
        g = b.single('Div', gys[0], _row_count(b, anchor, dtype)) if mean \
            else b.single('Unsqueeze', gys[0], b.int64s([1]))
        tmp = b.single('Mul', b.single('Mul', _scalar(b, 2, dtype), g), mask)
        return tuple(
            b.single('Mul', tmp, b.single('Sub', x, y)) if w else None
            for w, (x, y) in zip(wanted, ((negative, positive),
                                          (positive, anchor),
                                          (anchor, negative))))
    return convert


@lowering(decov.DeCov)
def lower_decov(node, ctx):
    """``DeCov``'s forward and backward: the covariance of ``h``'s columns
    off the diagonal, and half its squared sum (or itself, with
    ``reduce='no'``)."""
    xp, half = ctx.xp, node.reduce == 'half_squared_sum'

    def forward(h):
        covariance = _decov_covariance(xp, h)[1]
        return _half_squared_sum(xp, covariance) if half else covariance

    def grad(xs, ys, gys, wanted):
        h, = xs
        gcost, = gys
        h_centered, covariance = _decov_covariance(xp, h)
        gcost_div_n = gcost / gcost.dtype.type(len(h))
        if half:
            gh = 2.0 * h_centered.dot(covariance)
            gh *= gcost_div_n
        else:
            xp.fill_diagonal(gcost_div_n, 0.0)
            gh = h_centered.dot(gcost_div_n + gcost_div_n.T)
        return gh,
    return Kernel(forward, attrs={'reduce': node.reduce},
                  grad=GradRule(grad, inputs=(0,),
                                onnx=_decov_grad_to_onnx(half)),
                  onnx=_decov_to_onnx(half), lengths=rows_reduced)


def _decov_covariance(xp, h):
    """``(h_centered, covariance)`` as DeCov's forward computes them."""
    h_centered = h - h.mean(axis=0, keepdims=True)
    covariance = h_centered.T.dot(h_centered)
    xp.fill_diagonal(covariance, 0.0)
    covariance /= len(h)
    return h_centered, covariance


def _half_squared_sum(xp, covariance):
    cost = xp.vdot(covariance, covariance)
    cost *= covariance.dtype.type(0.5)
    return utils.force_array(cost)


@lowering(cross_covariance.CrossCovariance)
def lower_cross_covariance(node, ctx):
    """``CrossCovariance``'s forward and its backward's formulas, on
    arrays: the covariance of ``y``'s and ``z``'s columns, and half its
    squared sum (or itself, with ``reduce='no'``)."""
    xp, half = ctx.xp, node.reduce == 'half_squared_sum'

    def forward(y, z):
        y_centered = y - y.mean(axis=0, keepdims=True)
        z_centered = z - z.mean(axis=0, keepdims=True)
        covariance = y_centered.T.dot(z_centered)
        covariance /= len(y)
        return _half_squared_sum(xp, covariance) if half else covariance

    def grad(xs, ys, gys, wanted):
        y, z = xs
        dtype = y.dtype
        y_centered, z_centered = (_centered(xp, x) for x in xs)
        gcost_div_n = _times(1. / dtype.type(len(y)), gys[0])
        if half:
            covariance = _times(1. / len(y), xp.matmul(y_centered.T,
                                                       z_centered))
            factors = ((z_centered, covariance.T), (y_centered, covariance))
        else:
            factors = ((z_centered, gcost_div_n.T), (y_centered, gcost_div_n))
        gxs = []
        for w, (a, b) in zip(wanted, factors):
            g = xp.matmul(a, b) if w else None
            if g is not None and half:
                g = utils.force_array(
                    g * xp.broadcast_to(gcost_div_n, g.shape))
            gxs.append(g)
        return tuple(gxs)
    return Kernel(forward, attrs={'reduce': node.reduce},
                  grad=GradRule(grad, inputs=(0, 1),
                                onnx=_cross_covariance_grad_to_onnx(half)),
                  onnx=_cross_covariance_to_onnx(half), lengths=rows_reduced)


def _centered(xp, x):
    """``x`` less its columns' means, as ``x - F.broadcast_to(F.mean(x,
    axis=0, keepdims=True), x.shape)`` computes it."""
    mean = utils.force_array(x.mean(axis=0, keepdims=True))
    return utils.force_array(x - xp.broadcast_to(mean, x.shape))


def _times(value, x):
    """``value * x`` as ``F.basic_math.MulConstant`` computes it (the
    scalar in ``x``'s dtype)."""
    return utils.force_array(x.dtype.type(value) * x)


def _centered_onnx(b, x):
    return b.single('Sub', x, b.single('ReduceMean', x, axes=[0],
                                       keepdims=1))


def _covariance_onnx(b, a, c, rows, off_diagonal=False):
    """``a^T c / rows``, with its diagonal zeroed first where asked."""
    covariance = b.single('MatMul', b.single('Transpose', a), c)
    if off_diagonal:
        covariance = _zero_diagonal(b, covariance)
    return b.single('Div', covariance, rows)


def _zero_diagonal(b, square):
    """``square`` with its diagonal set to 0 (as ``fill_diagonal``)."""
    dtype, size = b.in_dtypes[0], b.in_shapes[0][1]
    return b.single('Where', b.constant(numpy.eye(size, dtype=bool)),
                    _scalar(b, 0, dtype), square)


def _half_squared_sum_onnx(b, covariance, outs):
    b.op('Mul', [b.single('ReduceSumSquare', covariance, keepdims=0),
                 _scalar(b, 0.5, b.in_dtypes[0])], outs)


def _decov_to_onnx(half):
    def convert(b, ins, outs):
        h, = ins
        centered = _centered_onnx(b, h)
        rows = _row_count(b, h, b.in_dtypes[0])
        if half:
            _half_squared_sum_onnx(b, _covariance_onnx(
                b, centered, centered, rows, True), outs)
        else:
            b.op('Div', [_zero_diagonal(b, b.single('MatMul', b.single(
                'Transpose', centered), centered)), rows], outs)
    return convert


def _decov_grad_to_onnx(half):
    """``2 * h_centered @ covariance * gcost / N``, or ``h_centered @ (G
    + G^T)`` of ``G = gcost / N`` with its diagonal zeroed."""
    def convert(b, xs, ys, gys, wanted):
        h, = xs
        dtype = b.in_dtypes[0]
        centered = _centered_onnx(b, h)
        rows = _row_count(b, h, dtype)
        gcost_div_n = b.single('Div', gys[0], rows)
        if half:
            covariance = _covariance_onnx(b, centered, centered, rows, True)
            return b.single('Mul', b.single('Mul', _scalar(b, 2, dtype),
                                            b.single('MatMul', centered,
                                                     covariance)),
                            gcost_div_n),
        gcost_div_n = _zero_diagonal(b, gcost_div_n)
        return b.single('MatMul', centered, b.single(
            'Add', gcost_div_n, b.single('Transpose', gcost_div_n))),
    return convert


def _cross_covariance_to_onnx(half):
    def convert(b, ins, outs):
        y, z = ins
        rows = _row_count(b, y, b.in_dtypes[0])
        centered = [_centered_onnx(b, x) for x in ins]
        if half:
            _half_squared_sum_onnx(
                b, _covariance_onnx(b, *centered, rows=rows), outs)
        else:
            b.op('Div', [b.single('MatMul', b.single(
                'Transpose', centered[0]), centered[1]), rows], outs)
    return convert


def _cross_covariance_grad_to_onnx(half):
    """``z_centered @ C^T`` and ``y_centered @ C`` times ``gcost / N``
    (``C`` the covariance), or ``z_centered @ G^T`` and ``y_centered @
    G`` of ``G = gcost / N`` (``reduce='no'``)."""
    def convert(b, xs, ys, gys, wanted):
        y, z = xs
        rows = _row_count(b, y, b.in_dtypes[0])
        y_centered, z_centered = (_centered_onnx(b, x) for x in xs)
        gcost_div_n = b.single('Div', gys[0], rows)
        right = _covariance_onnx(b, y_centered, z_centered, rows) if half \
            else gcost_div_n
        factors = ((z_centered, b.single('Transpose', right)),
                   (y_centered, right))
        gxs = []
        for w, (a, c) in zip(wanted, factors):
            g = b.single('MatMul', a, c) if w else None
            gxs.append(b.single('Mul', g, gcost_div_n) if g and half else g)
        return tuple(gxs)
    return convert
