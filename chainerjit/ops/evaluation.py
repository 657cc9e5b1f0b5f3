"""Lowerings of chainer.functions.evaluation."""

import chainer
from chainer.functions.evaluation import accuracy
from chainer.functions.evaluation import binary_accuracy
from chainer.functions.evaluation import classification_summary
from chainer.functions.evaluation import r2_score
import numpy

from chainerjit.ops import Follow
from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import lowering
from chainerjit.ops import rows_reduced
from chainerjit.ops import takes_widest
from chainerjit.ops.loss import labels_alike
from chainerjit.ops.math import onnx_dtype


def _no_gradient(xs, ys, gys, wanted):
    """``FunctionNode.backward``'s default, which Accuracy keeps: no
    gradient for any input."""
    return None, None


_no_gradient.passes_none = True  # (autodiff makes no node of it)


@lowering(accuracy.Accuracy)
def lower_accuracy(node, ctx):
    """The share of rows whose arg max is the label, as
    ``Accuracy._forward`` computes it (its ``ignore_label`` branch
    included)."""
    xp = ctx.xp
    ignore_label = node.ignore_label
    dtype = ctx.in_dtypes[0]
    if ignore_label is None:
        def fn(y, t):
            pred = y.argmax(axis=1).reshape(t.shape)
            return xp.asarray((pred == t).mean(dtype=dtype))
        to_onnx = _accuracy_to_onnx(dtype)
    elif xp is numpy:
        def fn(y, t):
            mask = t == ignore_label
            ignore_cnt = mask.sum()
            pred = numpy.where(mask, ignore_label,
                               y.argmax(axis=1).reshape(t.shape))
            count = (pred == t).sum() - ignore_cnt
            total = t.size - ignore_cnt
            if total == 0:
                return numpy.asarray(0.0, dtype=dtype)
            return numpy.asarray(float(count) / total, dtype=dtype)
        to_onnx = None
    else:
        return None  # the generic path runs Accuracy's GPU formula
    return Kernel(fn, {'ignore_label': ignore_label},
                  grad=GradRule(_no_gradient), onnx=to_onnx, fresh=True,
                  lengths=_labels_counted)


@takes_widest  # (a padded block merged, or its words)
def _labels_counted(rows):
    """The ``Kernel.lengths`` rule of an accuracy, whose kernel counts
    the labels of whatever shape (``t.size``): any rows of the scores
    their labels pair (``loss.labels_alike``)."""
    return Follow((None,)) if labels_alike(rows) else None


def _accuracy_to_onnx(dtype):
    def to_onnx(b, ins, outs):
        y, t = ins
        pred = b.op('ArgMax', [y], axis=1, keepdims=0)
        pred = b.op('Reshape', pred + b.op('Shape', [t]))
        hits = b.op('Equal', pred + b.op('Cast', [t], to=onnx_dtype(
            numpy.int64)))
        b.op('ReduceMean', b.op('Cast', hits, to=onnx_dtype(dtype)), outs,
             keepdims=0)
    return to_onnx


@lowering(binary_accuracy.BinaryAccuracy)
def lower_binary_accuracy(node, ctx):
    """The share of entries whose sign (``x >= 0``) is the label, over the
    labels not ignored (``-1``), as ``BinaryAccuracy.forward`` computes
    it."""
    xp = ctx.xp
    ignore_label = node.ignore_label

    def fn(y, t):
        y = y.ravel()
        t = t.ravel()
        c = (y >= 0)
        count = xp.maximum(1, (t != ignore_label).sum())
        return xp.asarray((c == t).sum() / count, dtype=y.dtype)
    return Kernel(fn, grad=GradRule(_no_gradient),
                  onnx=_binary_accuracy_to_onnx(ignore_label),
                  lengths=rows_reduced)


def _binary_accuracy_to_onnx(ignore_label):
    """The hits over ``max(1, count of labels not ignored)``, divided in
    float64 as NumPy divides two integers."""
    def to_onnx(b, ins, outs):
        y, t = ins
        t = b.cast(t, b.in_dtypes[1], numpy.int64)
        c = b.cast(b.single('GreaterOrEqual', y, _zero(b, b.in_dtypes[0])),
                   numpy.bool_, numpy.int64)
        hits = _count(b, b.single('Equal', c, t))
        kept = _count(b, b.single('Not', b.single(
            'Equal', t, b.int64s(ignore_label))))
        count = b.single('Max', kept, b.int64s(1))
        ratio = b.single('Div', b.cast(hits, numpy.int64, numpy.float64),
                         b.cast(count, numpy.int64, numpy.float64))
        b.op('Cast', [ratio], outs, to=onnx_dtype(b.out_dtypes[0]))
    return to_onnx


def _zero(b, dtype):
    return b.constant(numpy.zeros((), dtype))


def _count(b, mask):
    """The number of true entries of ``mask``, an int64 scalar."""
    return b.single('ReduceSum', b.cast(mask, numpy.bool_, numpy.int64),
                    keepdims=0)


@lowering(r2_score.R2_score)
def lower_r2_score(node, ctx):
    """The coefficient of determination per column (0 where the truth is
    constant), or its mean, as ``R2_score.forward`` computes it."""
    xp = ctx.xp
    average = node.multioutput == 'uniform_average'

    def fn(pred, true):
        SS_res = xp.asarray(
            xp.sum((pred - true) ** 2, axis=0))
        SS_tot = xp.asarray(
            xp.sum((true - xp.mean(true, axis=0)) ** 2, axis=0))
        SS_tot_iszero = SS_tot == 0
        SS_tot[SS_tot_iszero] = 1
        ret = xp.where(
            SS_tot_iszero, 0.0, 1 - SS_res / SS_tot
        ).astype(pred.dtype, copy=False)
        return xp.asarray(ret.mean()) if average else ret
    return Kernel(fn, {'multioutput': node.multioutput},
                  grad=GradRule(_no_gradient),
                  onnx=_r2_score_to_onnx(average), lengths=rows_reduced)


def _r2_score_to_onnx(average):
    """``1 - SS_res / SS_tot`` per column, ``0`` where ``SS_tot`` is 0,
    then for ``'uniform_average'`` the mean."""
    def to_onnx(b, ins, outs):
        pred, true = ins
        dtype = b.in_dtypes[0]
        residual = b.single('Sub', pred, true)
        ss_res = b.single('ReduceSumSquare', residual, axes=[0], keepdims=0)
        centered = b.single('Sub', true, b.single(
            'ReduceMean', true, axes=[0], keepdims=0))
        ss_tot = b.single('ReduceSumSquare', centered, axes=[0], keepdims=0)
        zero = _zero(b, dtype)
        constant = b.single('Equal', ss_tot, zero)
        ss_tot = b.single('Where', constant, b.constant(
            numpy.ones((), dtype)), ss_tot)
        r2 = b.single('Where', constant, zero, b.single(
            'Sub', b.constant(numpy.ones((), dtype)),
            b.single('Div', ss_res, ss_tot)))
        b.op('ReduceMean' if average else 'Identity', [r2], outs,
             **({'keepdims': 0} if average else {}))
    return to_onnx


@lowering(classification_summary.ClassificationSummary)
def lower_classification_summary(node, ctx):
    """Precision, recall, F-beta score and support per label, as
    ``ClassificationSummary.forward`` computes them (four outputs; with
    ``label_num=None`` their length is the largest label plus one, read
    from the labels on every call)."""
    xp = ctx.xp
    label_num, beta = node.label_num, node.beta
    ignore_label = node.ignore_label

    def fn(y, t):
        t = t.astype(xp.int32, copy=False)
        if label_num is None:
            n = xp.amax(t) + 1
        else:
            n = label_num
            if chainer.is_debug():
                assert (t < n).all()
        mask = (t == ignore_label).ravel()
        pred = xp.where(mask, n, y.argmax(axis=1).ravel())
        true = xp.where(mask, n, t.ravel())
        support = xp.bincount(true, minlength=n + 1)[:n]
        relevant = xp.bincount(pred, minlength=n + 1)[:n]
        tp_mask = xp.where(pred == true, true, n)
        tp = xp.bincount(tp_mask, minlength=n + 1)[:n]
        precision = tp / relevant
        recall = tp / support
        fbeta = classification_summary._fbeta_score(precision, recall, beta)
        return precision, recall, fbeta, support
    return Kernel(fn, {'label_num': label_num, 'beta': beta,
                       'ignore_label': ignore_label}, multi=True,
                  grad=GradRule(_no_gradient),
                  onnx=None if label_num is None else
                  _classification_summary_to_onnx(label_num, beta,
                                                  ignore_label),
                  lengths=rows_reduced)


def _classification_summary_to_onnx(label_num, beta, ignore_label):
    """The counts per label as sums of one-hot rows (a label out of
    ``[0, label_num)``, ignored ones included, counts for none), then the
    ratios in float64 as NumPy divides integers."""
    beta_square = beta * beta

    def to_onnx(b, ins, outs):
        y, t = ins
        t = b.single('Reshape', b.cast(t, b.in_dtypes[1], numpy.int64),
                     b.int64s([-1]))
        ignored = b.single('Equal', t, b.int64s(ignore_label))
        outside = b.int64s(label_num)
        pred = b.single('Reshape', b.single('ArgMax', y, axis=1, keepdims=0),
                        b.int64s([-1]))
        pred = b.single('Where', ignored, outside, pred)
        true = b.single('Where', ignored, outside, t)
        hit = b.single('Where', b.single('Equal', pred, true), true, outside)
        support, relevant, tp = (_label_counts(b, labels, label_num)
                                 for labels in (true, pred, hit))
        b.op('Identity', [support], outs[3:])
        tp, relevant, support = (b.cast(c, numpy.int64, numpy.float64)
                                 for c in (tp, relevant, support))
        precision = b.op('Div', [tp, relevant], outs[:1])[0]
        recall = b.op('Div', [tp, support], outs[1:2])[0]
        scaled = b.single('Mul', b.single('Mul', b.constant(
            numpy.float64(1 + beta_square)), precision), recall)
        b.op('Div', [scaled, b.single('Add', b.single(
            'Mul', b.constant(numpy.float64(beta_square)), precision),
            recall)], outs[2:3])
    return to_onnx


def _label_counts(b, labels, label_num):
    """``bincount(labels)[:label_num]``: how often each label in
    ``[0, label_num)`` occurs among ``labels`` (1-D int64)."""
    one_hot = b.single('OneHot', labels, b.int64s([label_num]),
                       b.int64s([0, 1]), axis=-1)
    return b.single('ReduceSum', one_hot, b.int64s([0]), keepdims=0)
