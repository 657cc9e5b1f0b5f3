"""Lowerings of chainer.functions.array.

Most array ops only move data around; what depends on the recorded
shapes alone (output shapes, axis permutations, index tuples) is computed
once, at lowering time, for the forward and for the gradient alike.
"""

import collections
import copy as copy_module
import functools
import math

import chainer
from chainer.backends import cuda
from chainer.functions.array import broadcast
from chainer.functions.array import cast
from chainer.functions.array import concat
from chainer.functions.array import copy
from chainer.functions.array import depth2space
from chainer.functions.array import diagonal
from chainer.functions.array import dstack
from chainer.functions.array import expand_dims
from chainer.functions.array import flip
from chainer.functions.array import fliplr
from chainer.functions.array import flipud
from chainer.functions.array import get_item
from chainer.functions.array import hstack
from chainer.functions.array import im2col
from chainer.functions.array import moveaxis
from chainer.functions.array import pad
from chainer.functions.array import pad_sequence
from chainer.functions.array import permutate
from chainer.functions.array import repeat
from chainer.functions.array import reshape
from chainer.functions.array import rollaxis
from chainer.functions.array import select_item
from chainer.functions.array import separate
from chainer.functions.array import space2depth
from chainer.functions.array import spatial_transformer_grid
from chainer.functions.array import split_axis
from chainer.functions.array import squeeze
from chainer.functions.array import stack
from chainer.functions.array import swapaxes
from chainer.functions.array import tile
from chainer.functions.array import transpose
from chainer.functions.array import transpose_sequence
from chainer.functions.array import vstack
from chainer.functions.array import where
from chainer import utils
import numpy

from chainerjit import errors
from chainerjit.ops import Follow
from chainerjit.ops import rows_in_place
from chainerjit.ops import rows_repeated
from chainerjit.ops import Rows
from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import lowering
from chainerjit.ops import own_forward
from chainerjit.ops import rows_follow_first
from chainerjit.ops import onnx_op
from chainerjit.ops import rows_joined
from chainerjit.ops import rows_of_index
from chainerjit.ops import rows_padded
from chainerjit.ops import same_rows
from chainerjit.ops import state_lowering
from chainerjit.ops import spelled_out
from chainerjit.ops import takes_axes
from chainerjit.ops import takes_square
from chainerjit.ops import takes_widest
from chainerjit.ops import TAKEN
from chainerjit.ops.math import grad_rule
from chainerjit.ops.math import onnx_dtype
from chainerjit.ops.math import onnx_scatter_add
from chainerjit.ops.math import onnx_scalar
from chainerjit.ops.math import onnx_sum_to
from chainerjit.ops.math import onnx_zeros
from chainerjit.ops.math import rows_of_each_row
from chainerjit.ops import segments as segments_ops


# ONNX Slice bounds meaning "to the end" for a positive and a negative step.
_INT64_MAX = 2 ** 63 - 1
_INT64_MIN = -2 ** 63


def _normalize_axis(axis, ndim):
    return axis + ndim if axis < 0 else axis


def _axis_index(axis, ndim, index):
    """An index tuple applying ``index`` along ``axis`` only."""
    return (slice(None),) * _normalize_axis(axis, ndim) + (index,)


def _grad_of_each(fn, onnx=None):
    """A GradRule applying ``fn`` to the only output's gradient (``onnx``:
    its ONNX form, the name of ``fn(gy)`` from the name ``gy``)."""
    return GradRule(lambda xs, ys, gys, wanted: (
        fn(gys[0]) if wanted[0] else None,), onnx=onnx and (
            lambda b, xs, ys, gys, wanted: (onnx(b, gys[0]),)))


def _sum_to_inputs(ctx):
    """A GradRule summing each output's gradient to its input's shape
    (``chainer.functions.sum_to``); ``None`` where no gradient flows, as
    ``Broadcast.backward`` gives."""
    sum_to = utils.sum_to
    shapes = ctx.in_shapes

    def grad(xs, ys, gys, wanted):
        return tuple(None if not w or gy is None else sum_to(gy, shape)
                     for gy, shape, w in zip(gys, shapes, wanted))

    def to_onnx(b, xs, ys, gys, wanted):
        return tuple(onnx_sum_to(b, gy, out, shape) if w else None
                     for gy, out, shape, w in zip(gys, ctx.out_shapes,
                                                  shapes, wanted))
    return GradRule(grad, onnx=to_onnx)


def _sum_to_kept(in_shape, kept):
    """A GradRule summing the gradient of a broadcast at any sizes to its
    input's shape, whose axes ``kept`` whole have the gradient's sizes."""
    def grad(xs, ys, gys, wanted):
        gy, = gys
        if not wanted[0] or gy is None:
            return None,
        return utils.sum_to(gy, tuple(g if k else n for g, n, k in zip(
            gy.shape, in_shape, kept))),
    return GradRule(grad)


# --- views whose output shape is known ---------------------------------------

def onnx_reshape(b, x, shape, out=None):
    """``x`` reshaped to ``shape`` (ONNX ``Reshape``). With a dynamic
    batch, axis 0 of the output is not baked in: where the reshape keeps
    axis 0 of ``x``, it is copied (0 in the target shape), elsewhere it is
    inferred (-1), so that a batch folded into it (``(B, 5, 16)`` to
    ``(B * 5, 16)``) or unfolded from it scales too."""
    in_shape = b.in_shapes[0]
    shape = list(shape)
    if b.dynamic_batch and shape and 0 not in shape[1:]:
        keeps_batch = (in_shape and shape[0] == in_shape[0] and numpy.prod(
            shape[1:]) == numpy.prod(in_shape[1:]))
        shape[0] = 0 if keeps_batch else -1
        return b.op('Reshape', [x, b.int64s(shape)], out)
    # Elsewhere 0 is a length, not a copy.
    return b.op('Reshape', [x, b.int64s(shape)], out, allowzero=1)


def _onnx_view(node, ctx):
    """A converter for ``expand_dims`` (``Unsqueeze``) and ``squeeze``
    (``Squeeze`` of the recorded unit axes), and for a reshape: of one
    that only adds and removes axes of size one, both, at any sizes of
    the others."""
    in_shape, shape = ctx.in_shapes[0], ctx.out_shapes[0]
    units = unit_axes_of_reshape(in_shape, shape) \
        if isinstance(node, reshape.Reshape) else None
    if units is not None:
        return _onnx_unit_axes(*units)
    if isinstance(node, expand_dims.ExpandDims):
        axis = _normalize_axis(node.axis, len(shape))
        return lambda b, ins, outs: b.op(
            'Unsqueeze', ins + [b.int64s([axis])], outs)
    if isinstance(node, squeeze.Squeeze):
        axes = ([i for i, n in enumerate(in_shape) if n == 1]
                if node.axis is None else
                [_normalize_axis(a, len(in_shape)) for a in node.axis])
        return lambda b, ins, outs: b.op(
            'Squeeze', ins + [b.int64s(axes)], outs)
    return lambda b, ins, outs: onnx_reshape(b, ins[0], shape, outs)


@lowering(reshape.Reshape, expand_dims.ExpandDims, squeeze.Squeeze)
def lower_reshape(node, ctx):
    # ``expand_dims`` and ``squeeze`` are reshapes to the output shape.
    shape = ctx.out_shapes[0]
    in_shape = ctx.in_shapes[0]
    kernel = Kernel(lambda x: x.reshape(shape), {'shape': shape},
                    grad=_grad_of_each(
                        lambda gy: gy.reshape(in_shape),
                        lambda b, gy: b.op('Reshape', [
                            gy, b.int64s(list(in_shape))], allowzero=1)[0]),
                    onnx=_onnx_view(node, ctx))
    if not shape or not in_shape or not shape[0] or not in_shape[0]:
        return kernel
    unit_axes = _unit_axes(node, shape, in_shape)
    if unit_axes is not None:
        return kernel._replace(lengths=_rows_past_unit_axes(
            kernel, *unit_axes))
    return kernel._replace(lengths=reshape_lengths(kernel, in_shape, shape))


def reshape_lengths(kernel, in_shape, shape):
    """The ``Kernel.lengths`` rule of ``kernel``, a reshape of
    ``in_shape`` to ``shape`` (``F.reshape``, NumPy's ``x.reshape``), or
    ``None``."""
    if not shape or not in_shape or not shape[0] or not in_shape[0]:
        return None
    if shape[0] != in_shape[0]:
        return _rows_rescaled(kernel, in_shape, shape)
    return _rows_reshaped(kernel, in_shape, shape)


def _unit_axes(node, shape, in_shape):
    """``(axes added, axes removed)`` of an ``expand_dims`` or a
    ``squeeze`` of given axes (numbered as the output's and as the
    input's), or of a reshape that only adds and removes axes of size
    one (``(B, T, 1)`` to ``(B, T)``: :func:`unit_axes_of_reshape`), or
    ``None``."""
    if isinstance(node, expand_dims.ExpandDims):
        axis = node.axis if node.axis >= 0 else node.axis + len(shape)
        return (axis,), ()
    if isinstance(node, squeeze.Squeeze) and node.axis is not None:
        return (), tuple(sorted(a % len(in_shape) for a in node.axis))
    if isinstance(node, reshape.Reshape):
        return unit_axes_of_reshape(in_shape, shape)
    return None


def unit_axes_of_reshape(in_shape, shape):
    """``(axes of size one added, those removed)`` where reshaping
    ``in_shape`` to ``shape`` keeps the other axes, in order; else
    ``None``."""
    if [n for n in in_shape if n != 1] != [n for n in shape if n != 1] \
            or 1 not in tuple(in_shape) + tuple(shape):
        return None
    return (tuple(k for k, n in enumerate(shape) if n == 1),
            tuple(k for k, n in enumerate(in_shape) if n == 1))


def _onnx_unit_axes(added, removed):
    """The ONNX form of adding the unit axes ``added`` to an array and
    removing its ``removed`` (``Squeeze``, then ``Unsqueeze``)."""
    def convert(b, ins, outs):
        x = ins[0]
        if removed:
            x = b.op('Squeeze', [x, b.int64s(list(removed))],
                     None if added else outs)[0]
        if added:
            b.op('Unsqueeze', [x, b.int64s(list(added))], outs)
    return convert


def _rows_past_unit_axes(kernel, added, removed):
    """The ``Kernel.lengths`` rule of a reshape that adds the unit axes
    ``added`` or removes those ``removed``: rows on any other axis move
    with it (a padded batch's words, on its second axis), and the kernel
    takes any sizes."""
    def moved(axis):
        if axis in removed:
            return None
        axis -= sum(1 for a in removed if a < axis)
        for a in added:
            axis += a <= axis
        return axis

    def reshaped(x, added, removed):
        sizes = [n for k, n in enumerate(x.shape) if k not in removed]
        for a in added:
            sizes.insert(a, 1)
        return x.reshape(sizes)

    @takes_square
    @takes_widest
    def lengths(rows):
        found = rows[0]
        axes = [] if found is None else [moved(axis) for axis in found.axes]
        return None if not axes or None in axes else \
            Follow((found.on_axes(axes),), any_sizes)
    any_sizes = kernel._replace(
        fn=lambda x: reshaped(x, added, removed),
        grad=_grad_of_each(lambda gy: reshaped(gy, removed, added)),
        lengths=lengths)
    return lengths


def merged_runs(in_shape, shape):
    """Where reshaping ``in_shape`` to ``shape`` only merges runs of
    adjacent axes (``(B, T, H)`` to ``(B, T * H)``), no axis of size
    one: the run of input axes of each output axis; else ``None``."""
    if 1 in tuple(in_shape) + tuple(shape) or len(shape) > len(in_shape):
        return None
    runs, axis = [], 0
    for n in shape:
        run, size = [], 1
        while axis < len(in_shape) and size < n:
            size *= in_shape[axis]
            run.append(axis)
            axis += 1
        if size != n:
            return None
        runs.append(tuple(run))
    return tuple(runs) if axis == len(in_shape) else None


def regrouped(in_shape, shape):
    """How reshaping ``in_shape`` to ``shape`` regroups runs of adjacent
    axes, no axis of size one: ``('merge', runs)`` where each output axis
    merges a run of input axes (``(B, T, H)`` to ``(B, T * H)``),
    ``('split', runs)`` where each input axis splits into a run of output
    axes (back); ``runs`` as :func:`merged_runs` gives them. Else
    ``None``."""
    runs = merged_runs(in_shape, shape)
    if runs is not None:
        return 'merge', runs
    runs = merged_runs(shape, in_shape)
    return None if runs is None else ('split', runs)


def _regrouped(how, runs, shape):
    """A kernel's ``fn``, gradient and ONNX form regrouping the input's
    axes as :func:`regrouped` found, at its sizes when run: a merged
    axis their product; a split axis's first part its size over the
    other parts', as ``shape`` (the recorded output) has them."""
    # A split axis's other parts, and their product (as recorded).
    rests = [[shape[a] for a in run[1:]] for run in runs] \
        if how == 'split' else []
    parted = [math.prod(rest) for rest in rests]

    def sizes(dims):
        if how == 'merge':
            return [math.prod(dims[a] for a in run) for run in runs]
        found = []
        for j, rest in enumerate(rests):
            found += [dims[j] // parted[j]] + rest
        return found

    def fn(x, *read):  # (an item a kernel it replaces read)
        return x.reshape(sizes(x.shape))

    def grad(xs, ys, gys, wanted):
        return (gys[0].reshape(xs[0].shape) if wanted[0] else None,) + \
            (None,) * (len(xs) - 1)

    def onnx(b, ins, outs):
        dims = b.op('Shape', [ins[0]])[0]
        parts = []
        for j, run in enumerate(runs):
            if how == 'merge':
                parts.append(b.op('ReduceProd', [b.op('Gather', [
                    dims, b.int64s(list(run))], axis=0)[0]], keepdims=1)[0])
                continue
            first = b.op('Gather', [dims, b.int64s([j])], axis=0)[0]
            if rests[j]:
                first = b.op('Div', [first, b.int64s([parted[j]])])[0]
            parts += [first] + ([b.int64s(rests[j])] if rests[j] else [])
        b.op('Reshape', [ins[0], b.op('Concat', parts, axis=0)[0]], outs)
    return fn, GradRule(grad, inputs=(0,)), onnx


def _regrouped_rows(kernel, in_shape, shape, regrouping, rule=None):
    """``follow(rows)``: the :class:`Follow` of rows through a reshape
    that only regroups runs of axes (:func:`regrouped`), or ``None``: a
    merge takes them into the axis of their run, a split into the first
    axis of theirs, as many as the rest of the run leaves; the kernel
    then regroups the axes at their sizes when run, its
    ``Kernel.lengths`` ``rule`` (by default, this one's)."""
    how, runs = regrouping

    def moved(axis):  # where a run of one axis takes it, else None
        if how == 'merge':
            k = next(k for k, run in enumerate(runs) if axis in run)
            return k if len(runs[k]) == 1 else None
        return runs[axis][0] if len(runs[axis]) == 1 else None

    def follow(found):
        if found.also:  # a square: each of its axes a run of its own
            axes = [moved(axis) for axis in found.axes]
            return None if None in axes else \
                Follow((found.on_axes(axes),), any_regrouped)
        if how == 'merge':  # into the axis of its run
            k = next(k for k, run in enumerate(runs) if found.axis in run)
            out = found if len(runs[k]) == 1 else found.scaled(
                int(numpy.prod([in_shape[a] for a in runs[k]])),
                in_shape[found.axis])
        else:  # into the first axis of its run
            k = runs[found.axis][0]
            out = found if len(runs[found.axis]) == 1 else found.scaled(
                shape[k], in_shape[found.axis])
        return None if out is None else \
            Follow((out._replace(axis=k),), any_regrouped)

    @takes_square
    def own(rows):
        return None if rows[0] is None else follow(rows[0])
    fn, grad, onnx = _regrouped(how, runs, shape)
    any_regrouped = kernel._replace(fn=fn, grad=grad, onnx=onnx,
                                    lengths=rule or own)
    return follow


def _rows_reshaped(kernel, in_shape, shape):
    """The ``Kernel.lengths`` rule of a reshape that keeps the first axis
    (``(N, C, H, W)`` to ``(N, C * H * W)``): the rows stay, and at any
    lengths the kernel reshapes each row. Where it only merges runs of
    axes (:func:`merged_runs`), rows on any axis follow into the axis
    its run merges into (the steps of ``F.stack(hs, axis=1)``, ``(B, T,
    H)`` to ``(B, T * H)``), and the kernel merges the axes at their
    sizes when run."""
    rest, in_rest = shape[1:], in_shape[1:]
    regrouping = regrouped(in_shape, shape)

    @takes_square
    @takes_widest
    def lengths(rows):
        found = rows[0]
        if regrouping is not None and found is not None:
            return regrouped_rows(found)
        if found is not None and (found.axis or found.widest or found.also):
            return None
        return Follow(rows, any_lengths)
    if regrouping is not None:
        regrouped_rows = _regrouped_rows(kernel, in_shape, shape, regrouping,
                                         lengths)
    any_lengths = kernel._replace(
        fn=lambda x: x.reshape((len(x),) + rest),
        grad=_grad_of_each(lambda gy: gy.reshape((len(gy),) + in_rest)),
        lengths=lengths, onnx=kernel.onnx if 0 in rest else
        lambda b, ins, outs: b.op(  # 0: the input's first axis
            'Reshape', [ins[0], b.int64s([0] + list(rest))], outs))
    return lengths


def _rows_rescaled(kernel, in_shape, shape):
    """The ``Kernel.lengths`` rule of a reshape that merges the leading
    axes (``(T, B, I)`` to ``(T * B, I)``) or splits the first (back).

    Merged: the output has the input's rows times the sizes of the axes
    before them (a time-major batch: ``T`` times ``B`` rows), and the
    kernel infers its first axis. Split: rows on the first axis stay
    there where they divide by the other sizes; one row per item (the
    steps of a symbolic length ``T``) then reads ``T`` from that item at
    run time, so that a batch merged with the steps splits back to the
    second axis at any size; other rows (a batch merged with a fixed
    number of steps) go to the second axis. Otherwise, where it only
    regroups runs of axes, rows elsewhere follow as :func:`_regrouped_rows`
    takes them (the steps of attention's heads merged with the batch,
    ``(B, H, T, D)`` to ``(B * H, T, D)``)."""
    rest, in_rest = shape[1:], in_shape[1:]
    regrouping = regrouped(in_shape, shape)
    regrouped_rows = None if regrouping is None else \
        _regrouped_rows(kernel, in_shape, shape, regrouping)
    split_rest = shape[2:]
    splits_in_two = splits_first_in_two(in_shape, shape)

    @takes_square
    @takes_widest
    def lengths(rows):
        found = rows[0]
        if found is None:
            return None
        following = None if found.also else _rescaled_rows(found)
        if following is None and regrouped_rows is not None:
            return regrouped_rows(found)  # (heads merged with the batch)
        return following

    def _rescaled_rows(found):
        if found.axis:
            return _merged_rows(found)
        out = found.scaled(shape[0], in_shape[0])
        if out is None:
            return _split_to_second(found, fixed_first)
        if found.inner:  # (B * T, H) to (B, T, H): the rows are T's
            return _split_to_second(found, fixed_first)
        if found.widest:  # (no item is as long as the longest)
            return Follow((out,), any_first)
        return _split_to_first(found) or Follow((out,), any_first)

    def _merged_rows(found):
        before = _size(in_shape[:found.axis])
        if before * in_shape[found.axis] != shape[0] or \
                _size(in_shape[found.axis + 1:]) != _size(rest):
            return None
        out = found.scaled(before, 1)
        return None if out is None else \
            Follow((out._replace(axis=0, inner=True),), of_input_shape)

    @takes_square
    @takes_widest
    def split_lengths(rows):  # the steps' count read: the rest follow
        found = rows[0]
        if found is None:  # rows of the item read, not of its length
            return None if any(r is not None and 0 in r.axes
                               for r in rows[1:]) else Follow((None,))
        if found.widest and (found.axis or not found.inner):
            return None
        if found.axis or found.also:
            return None if regrouped_rows is None else regrouped_rows(found)
        if found.inner:  # (merged in after the first axis: the second's)
            return _split_to_second(found, None)
        # (a batch-first batch merged before the steps: the first axis's)
        return _split_to_first(found) or _split_to_second(found, None)

    def _split_to_first(found):
        # (B * T, H) to (B, T, H) where T is the steps' count and B's rows
        # come: the first axis read from the batch's argument
        out = found.scaled(shape[0], in_shape[0]) if splits_in_two else None
        return None if out is None or not _one_row_per_item(out) else \
            Follow((out,), first_from_item, reads=(out.first_leaf,))

    def _split_to_second(found, variant):
        out = found.scaled(1, shape[0]) if splits_in_two else None
        return None if out is None else \
            Follow((out._replace(axis=1),), variant)

    any_first = kernel._replace(
        fn=lambda x: x.reshape((-1,) + rest),
        grad=_grad_of_each(lambda gy: gy.reshape((-1,) + in_rest)),
        onnx=lambda b, ins, outs: b.op(
            'Reshape', [ins[0], b.int64s((-1,) + rest)], outs),
        lengths=lengths)

    @takes_widest
    def input_shaped(rows):  # rows on two axes: the batch, then these
        following = lengths(rows)
        return following if following is None or \
            following.kernel is not any_first else \
            following._replace(kernel=of_input_shape)
    # Rows merged from a later axis: a gradient of the input's shape.
    of_input_shape = any_first._replace(
        grad=GradRule(lambda xs, ys, gys, wanted: (
            gys[0].reshape(xs[0].shape) if wanted[0] else None,),
            inputs=(0,)), lengths=input_shaped)
    fixed_first = kernel._replace(
        fn=lambda x: x.reshape((shape[0], -1) + split_rest),
        grad=_grad_of_each(lambda gy: gy.reshape((-1,) + in_rest)),
        onnx=lambda b, ins, outs: b.op('Reshape', [
            ins[0], b.int64s((shape[0], -1) + split_rest)], outs),
        lengths=split_lengths)
    first_from_item = kernel._replace(
        fn=lambda x, item: x.reshape((len(item), -1) + split_rest),
        grad=GradRule(lambda xs, ys, gys, wanted: (
            gys[0].reshape((-1,) + in_rest) if wanted[0] else None, None)),
        onnx=_onnx_split_first(split_rest), lengths=split_lengths)
    return lengths


def splits_first_in_two(in_shape, shape):
    """Whether reshaping ``in_shape`` to ``shape`` splits the first axis
    in two (``(B * T, 1)`` to ``(B, T, 1)``), whatever the axes after
    become (they may split too: into heads)."""
    return len(shape) >= 2 and shape[0] <= in_shape[0] and \
        shape[0] * shape[1] == in_shape[0] and \
        _size(shape[2:]) == _size(in_shape[1:])


def _size(shape):
    """The number of elements of an array of ``shape``."""
    return int(numpy.prod(shape, dtype=int))


def _one_row_per_item(rows):
    """Rows that are those of one list item (or argument) once: ``T``."""
    items, fixed = rows.count()
    return not fixed and len(items) == 1 and items[0][1] == 1


def _onnx_split_first(rest):
    """``x.reshape((len(item), -1) + rest)``: the first axis read from
    the second input's shape."""
    def convert(b, ins, outs):
        first = b.op('Slice', [b.op('Shape', [ins[1]])[0], b.int64s([0]),
                               b.int64s([1])])[0]
        shape = b.op('Concat', [first, b.int64s([-1] + list(rest))],
                     axis=0)[0]
        b.op('Reshape', [ins[0], shape], outs)
    return convert


def _onnx_expand(b, x, in_shape, shape, out=None):
    """``x`` broadcast to ``shape`` (ONNX ``Expand``); with a dynamic
    batch, an axis 0 kept from ``x`` is expanded by 1 (kept as is)."""
    shape = list(shape)
    if (b.dynamic_batch and len(in_shape) == len(shape) and shape
            and in_shape[0] == shape[0]):
        shape[0] = 1
    return b.op('Expand', [x, b.shape(shape)], out)


class BroadcastLike(chainer.FunctionNode):
    """``F.broadcast_to(x, a.shape)`` of a shape the forward read from
    ``a``, recorded with ``a`` itself (``frontend.recording_patches``):
    at any sizes, ``x`` broadcast to ``a``'s shape. Its values and
    gradient are ``F.broadcast_to``'s; ``a`` gets none."""

    def forward(self, inputs):
        x, a = inputs
        self._x_shape = x.shape
        xp = chainer.backend.get_array_module(x)
        return xp.broadcast_to(x, a.shape),

    def backward(self, indexes, grad_outputs):
        return chainer.functions.sum_to(grad_outputs[0], self._x_shape), \
            None


@lowering(BroadcastLike)
def lower_broadcast_like(node, ctx):
    broadcast_to = ctx.xp.broadcast_to
    return Kernel(lambda x, a: broadcast_to(x, a.shape),
                  grad=_broadcast_grad(ctx), onnx=broadcast_like_to_onnx,
                  lengths=rows_broadcast_like(ctx.in_shapes[0],
                                              len(ctx.in_shapes[1])))


def _broadcast_grad(ctx):
    """The gradient rule of ``x`` broadcast to sizes its other inputs give
    (:class:`BroadcastLike`, :class:`BroadcastSized`): ``gy`` summed to
    ``x``'s shape; none for the others. Its ONNX form sums to the
    recorded sizes."""
    sum_to = utils.sum_to

    def grad(xs, ys, gys, wanted):
        x, gy = xs[0], gys[0]
        return (sum_to(gy, x.shape) if wanted[0] and gy is not None
                else None,) + (None,) * (len(xs) - 1)

    def grad_to_onnx(b, xs, ys, gys, wanted):
        return (onnx_sum_to(b, gys[0], ctx.out_shapes[0], ctx.in_shapes[0])
                if wanted[0] else None,) + (None,) * (len(xs) - 1)
    return GradRule(grad, inputs=(0,), onnx=grad_to_onnx)


class BroadcastSized(chainer.FunctionNode):
    """``F.broadcast_to(x, shape)`` of a shape made of arguments' sizes the
    forward read (``(len(xs),) + h.shape``), recorded with those
    arguments (``frontend.recording_patches``): ``sizes`` has, per axis,
    a number, ``(k, axis)``, the size of that axis of the ``k``-th array
    after ``x``, ``(k, axis, b)``, that size plus ``b`` (``T - 1``), or
    ``None``, ``x``'s own size (a tile's axes it does not repeat). Its
    values and gradient are ``F.broadcast_to``'s; the arrays get
    none."""

    def __init__(self, sizes):
        self.sizes = sizes

    def forward(self, inputs):
        x = inputs[0]
        self._x_shape = x.shape
        xp = chainer.backend.get_array_module(x)
        return xp.broadcast_to(x, sized_shape(self.sizes, inputs[1:],
                                              x.shape)),

    def backward(self, indexes, grad_outputs):
        return (chainer.functions.sum_to(grad_outputs[0], self._x_shape),) \
            + (None,) * (len(self.inputs) - 1)


def sized_shape(sizes, arrays, x_shape=()):
    """The shape ``sizes`` (:class:`BroadcastSized`'s) gives for
    ``arrays`` and ``x``, of shape ``x_shape``."""
    x_shape = (1,) * (len(sizes) - len(x_shape)) + tuple(x_shape)
    return tuple(x_shape[axis] if n is None else n if isinstance(n, int)
                 else arrays[n[0]].shape[n[1]] + sum(n[2:])
                 for axis, n in enumerate(sizes))


def rows_broadcast_sized(sizes, offset):
    """The ``Kernel.lengths`` rule of ``x`` (``offset`` axes fewer than
    the result) broadcast to a shape of arguments' sizes (``sizes`` as
    :class:`BroadcastSized`'s): :func:`_rows_sized`."""
    @takes_square
    def lengths(rows):
        return _rows_sized(sizes, rows[1:], rows[0], offset)
    return lengths


@lowering(BroadcastSized)
def lower_broadcast_sized(node, ctx):
    broadcast_to = ctx.xp.broadcast_to
    sizes = node.sizes
    offset = len(ctx.out_shapes[0]) - len(ctx.in_shapes[0])
    lengths = rows_broadcast_sized(sizes, offset)

    def to_onnx(b, ins, outs):
        b.op('Expand', [ins[0], _onnx_sized_shape(b, sizes, ins[1:], ins[0],
                                                  offset)], outs)

    def broadcast(x, *arrays):  # (of the arrays, their shapes only)
        return broadcast_to(x, sized_shape(sizes, arrays, x.shape))
    return Kernel(broadcast, {'sizes': sizes}, grad=_broadcast_grad(ctx),
                  onnx=to_onnx, lengths=lengths)


class SizedBound(collections.namedtuple('SizedBound', 'k axis b')):
    """A bound of a slice that is the size of ``axis`` of the ``k``-th
    array a kernel reads besides ``x``, plus ``b`` (:func:`cut_to_sizes`).
    """

    __slots__ = ()

    def of(self, arrays):
        return arrays[self.k].shape[self.axis] + self.b


def cut_to_sizes(index, xp=None):
    """The kernel of ``x[index]`` where some slices' bounds are arguments'
    sizes the forward read (:class:`SizedBound`: ``pe[:T]`` of a
    positional encoding as long as the steps), taken from the arrays the
    kernel reads after ``x`` on every call. A slice ``[:T]`` has the rows
    of the axis ``T`` is read from (``x`` itself fixed). Given the array
    module ``xp``, it has a gradient (``F.get_item``'s of a parameter:
    ``self.pos.W[:T]``): the output's, in zeros of ``x``'s shape."""
    entries = index if type(index) is tuple else (index,)

    def grad(xs, ys, gys, wanted):
        g = None
        if wanted[0]:
            g = xp.zeros_like(xs[0])
            g[at_sizes(xs[1:])] = gys[0]
        return (g,) + (None,) * (len(xs) - 1)

    def bound(value, arrays):
        return value.of(arrays) if isinstance(value, SizedBound) else value

    def at_sizes(arrays):
        found = tuple(slice(bound(e.start, arrays), bound(e.stop, arrays),
                            e.step) if isinstance(e, slice) else e
                      for e in entries)
        return found if type(index) is tuple else found[0]

    def cut(x, *arrays):
        return x[at_sizes(arrays)]

    @takes_square
    def lengths(rows):
        if rows[0] is not None:
            return _rows_cut_at_a_size(entries, rows[0], rows[1:]) or \
                _rows_past_a_fixed_cut(entries, rows[0], rows[1:])
        found = collections.defaultdict(set)  # rows (on no axis): axes
        axis = 0  # of the result
        for e in entries:
            if isinstance(e, slice):
                taken = _rows_of_cut(e, rows[1:])
                if taken is False:
                    return None
                if taken is not None:
                    found[taken.on_axes([0])].add(axis)
            if e is None or isinstance(e, slice):
                axis += 1
        return _one_rows(found)

    def to_onnx(b, ins, outs):
        # Slice the input's axes (an int as a slice of one, then
        # squeezed), then add the new ones.
        parts = [[], [], [], []]  # starts, ends, axes, steps
        dropped, added, axis = [], [], 0
        for position, e in enumerate(entries):
            if e is None:
                added.append(position - len(dropped))
                continue
            if not isinstance(e, slice):
                e, dropped = slice(e, e + 1 if e != -1 else None), \
                    dropped + [axis]
            if e != slice(None):
                for part, value, default in ((parts[0], e.start, 0),
                                             (parts[1], e.stop,
                                              _INT64_MAX)):
                    part.append(_onnx_bound(b, value, default, ins[1:]))
                parts[2].append(b.int64s([axis]))
                parts[3].append(b.int64s([e.step or 1]))
            axis += 1
        x = ins[0]
        if parts[0]:
            x = b.op('Slice', [x] + [b.op('Concat', part, axis=0)[0]
                                     for part in parts])[0]
        if dropped:
            x = b.op('Squeeze', [x, b.int64s(dropped)])[0]
        if added:
            b.op('Unsqueeze', [x, b.int64s(added)], outs)
        else:
            b.op('Identity', [x], outs)
    return Kernel(cut, {'index': _printed_index(entries)}, onnx=to_onnx,
                  lengths=lengths, grad=None if xp is None else GradRule(
                      grad, inputs=range(1 + len(_sized_arrays(entries)))))


def _sized_arrays(entries):
    """The arrays whose sizes the bounds of ``entries`` read (their
    ``SizedBound.k``)."""
    return set(v.k for e in entries if isinstance(e, slice)
               for v in (e.start, e.stop) if isinstance(v, SizedBound))


#: The end of a slice to the end of an axis, in ONNX.
_INT64_MAX = 2 ** 63 - 1


def _onnx_bound(b, value, default, arrays):
    """A slice's bound as a 1-d int64 ONNX value."""
    if not isinstance(value, SizedBound):
        return b.int64s([default if value is None else value])
    size = b.op('Slice', [b.op('Shape', [arrays[value.k]])[0],
                          b.int64s([value.axis]),
                          b.int64s([value.axis + 1])])[0]
    return b.op('Add', [size, b.int64s([value.b])])[0] if value.b else size


def _rows_of_cut(e, rows):
    """The rows of a slice ``e`` of :func:`cut_to_sizes` whose arrays
    have ``rows``: those of the axis its stop is read from, for ``[:T]``,
    and as many more or fewer as the stop adds and a fixed start takes
    (``[1:T + 1]``: as many; ``[:T + 1]``: one more); ``None`` where its
    length is fixed; ``False`` where it follows rows otherwise (``[T:]``,
    a step)."""
    following = [(v, rows[v.k]) for v in (e.start, e.stop)
                 if isinstance(v, SizedBound) and rows[v.k] is not None and
                 v.axis in rows[v.k].axes]
    if not following:
        return None
    stop, r = following[0]
    start = e.start or 0
    if len(following) > 1 or stop is not e.stop or \
            type(start) is not int or start < 0 or \
            e.step not in (None, 1) or r.also or r.widest:
        return False
    return r + (stop.b - start) if stop.b != start else r


def _rows_cut_at_a_size(entries, rows, sized):
    """The :class:`Follow` of ``x[:S]`` or ``x[S:]``, where ``x`` has
    ``rows`` on the axis cut and ``S`` is the size of an array whose rows
    (of ``sized``, the arrays the bounds read) are the first of ``x``'s:
    a batch of real and generated examples joined, ``y[:len(x)]`` and
    ``y[len(x):]`` of the discriminator's output. ``None`` otherwise."""
    if rows.also or rows.widest or len(entries) <= rows.axis or any(
            e != slice(None) for k, e in enumerate(entries)
            if k != rows.axis):
        return None
    e = entries[rows.axis]
    if not isinstance(e, slice) or e.step is not None or \
            None not in (e.start, e.stop):
        return None
    bound = e.stop if e.start is None else e.start
    if not isinstance(bound, SizedBound) or bound.b:
        return None
    first = sized[bound.k]
    if first is None or first.also or first.widest or \
            bound.axis not in first.axes:
        return None
    count = len(first.parts)
    if rows.parts[:count] != first.parts or len(rows.parts) == count:
        return None
    parts = rows.parts[:count] if e.start is None else rows.parts[count:]
    return Follow((rows._replace(parts=parts),))


def _rows_past_a_fixed_cut(entries, rows, sized):
    """The :class:`Follow` of ``x[:, :, :S]``, a cut of slices alone where
    ``x`` has ``rows`` on axes the index takes whole and each bound is
    the size of an axis without rows (of ``sized``, the arrays the bounds
    read): a causal convolution's output cut to its input's length, its
    batch any size. ``None`` otherwise."""
    if not all(isinstance(e, slice) for e in entries) or any(
            k < len(entries) and entries[k] != slice(None)
            for k in rows.axes):
        return None
    bounds = [v for e in entries for v in (e.start, e.stop, e.step)
              if isinstance(v, SizedBound)]
    if any(sized[v.k] is not None and v.axis in sized[v.k].axes
           for v in bounds):
        return None
    return Follow((rows,))


def _printed_index(entries):
    """``'[:x.shape[1]]'``-like text of an index with sized bounds."""
    def text(v):
        if isinstance(v, SizedBound):
            return 'size%d[%d]%s' % (v.k, v.axis,
                                     '%+d' % v.b if v.b else '')
        return '' if v is None else str(v)
    return '[%s]' % ', '.join(
        '%s:%s%s' % (text(e.start), text(e.stop),
                     '' if e.step is None else ':%s' % e.step)
        if isinstance(e, slice) else 'None' if e is None else str(e)
        for e in entries)


def arange_sized(sizes, dtype):
    """The kernel of ``numpy.arange(T)`` of an argument's size ``T`` the
    forward read (positions of the steps), or a view of it with axes of
    one added: ``sizes`` as :func:`full_sized`'s. Its rows follow the
    axis ``T`` is read from."""
    dtype = numpy.dtype(dtype)

    def arange(*arrays):
        shape = sized_shape(sizes, arrays)
        return numpy.arange(_size(shape), dtype=dtype).reshape(shape)

    def to_onnx(b, ins, outs):
        shape = _onnx_sized_shape(b, sizes, ins)
        n = b.op('ReduceProd', [shape], keepdims=1)[0]
        positions = b.op('Range', [b.constant(numpy.array(0, dtype)),
                                   b.cast(b.op('Squeeze', [n])[0],
                                          numpy.int64, dtype),
                                   b.constant(numpy.array(1, dtype))])[0]
        b.op('Reshape', [positions, shape], outs)
    return Kernel(arange, {'sizes': sizes}, fresh=True, onnx=to_onnx,
                  lengths=_sized_rows_rule(sizes))


def full_sized(sizes, fill, dtype, xp):
    """The kernel of ``xp.full`` of a shape made of arguments' sizes the
    forward read (``numpy.ones((len(xs), B, H))``): ``sizes`` as
    :class:`BroadcastSized` has them, of the arrays it reads (their
    shapes only). Its rows follow those of the axes sizes are read
    from."""
    dtype = numpy.dtype(dtype)

    def full(*arrays):
        return xp.full(sized_shape(sizes, arrays), fill, dtype)

    def to_onnx(b, ins, outs):
        import onnx.helper
        b.op('ConstantOfShape', [_onnx_sized_shape(b, sizes, ins)], outs,
             value=onnx.helper.make_tensor(
                 'fill', onnx.helper.np_dtype_to_tensor_dtype(dtype), [1],
                 [fill]))
    return Kernel(full, {'sizes': sizes, 'fill': fill}, fresh=True,
                  onnx=to_onnx, lengths=_sized_rows_rule(sizes))


def _sized_rows_rule(sizes):
    """The ``Kernel.lengths`` rule of an array made of a shape ``sizes``
    (:class:`BroadcastSized`'s) read at run time (:func:`_rows_sized`):
    its axes are as long as the axes they are read from, those as long as
    the longest item included (a padded block's width:
    ``xp.arange(enc.shape[1])``, ``xp.full(s.shape, -1e9)`` of
    attention's scores over it)."""
    return takes_square(takes_widest(lambda rows: _rows_sized(sizes, rows)))


def _rows_sized(sizes, rows, x=None, offset=0):
    """The output's rows of a shape ``sizes`` (:class:`BroadcastSized`'s)
    of arrays whose rows are ``rows``: those of an axis a size is read
    from, on the axes sized so (on two, a square: ``(B, T, T)``), or
    ``x``'s on an axis ``sizes`` keeps as its (``x`` having ``offset``
    fewer axes); ``x``'s, where it has them elsewhere, the same."""
    found = collections.defaultdict(set)  # rows (on no axis): axes
    for axis, n in enumerate(sizes):
        r = None if not isinstance(n, tuple) else rows[n[0]]
        if r is not None and n[1] in r.axes:
            r = r.on_axes([0])
            if n[2:] and r.widest:
                return None
            found[r + n[2] if n[2:] else r].add(axis)
    if x is not None:
        for axis in x.axes:
            axis += offset
            if sizes[axis] is None:
                found[x.on_axes([0])].add(axis)
            elif axis not in found[x.on_axes([0])]:
                return None
    return _one_rows(dict((r, axes) for r, axes in found.items() if axes))


def _one_rows(found):
    """The :class:`Follow` of one output with rows ``found`` (``{rows
    on axis 0: the output's axes that have them}``): fixed where none,
    ``None`` where rows of several kinds meet."""
    if len(found) > 1:
        return None
    return Follow(tuple(r.on_axes(axes) for r, axes in found.items()) or
                  (None,))


def _onnx_sized_shape(b, sizes, arrays, x=None, offset=0):
    """The ONNX shape that ``sizes`` (:class:`BroadcastSized`'s) give for
    ``arrays`` and ``x``: their sizes read with ``Shape``."""
    def size(n, axis):
        array, axis = (x, axis - offset) if n is None else \
            (arrays[n[0]], n[1])
        found = b.single('Slice', b.single('Shape', array),
                         b.int64s([axis]), b.int64s([axis + 1]))
        return b.single('Add', found, b.int64s([sum(n[2:])])) \
            if n is not None and sum(n[2:]) else found
    return b.single('Concat', *[
        b.int64s([n]) if isinstance(n, int) else size(n, axis)
        for axis, n in enumerate(sizes)], axis=0)


def broadcast_like_to_onnx(b, ins, outs):
    """``x`` broadcast to the shape of ``a``: ``Expand(x, Shape(a))``."""
    b.op('Expand', [ins[0], b.single('Shape', ins[1])], outs)


def rows_broadcast_like(x_shape, ndim):
    """The ``Kernel.lengths`` rule of ``x`` (of ``x_shape``) broadcast to
    the shape of ``a`` (of ``ndim`` axes): ``a``'s rows, where ``x``'s
    (if it has them) are the same, on some of ``a``'s axes, and ``x``
    has one row (or none) on the others (a mask ``(B, 1, T)`` to scores
    ``(B, T, T)``); also the rows of the longest of a list's items, as
    it neither joins nor splits them."""
    offset = ndim - len(x_shape)

    @takes_square
    @takes_widest
    def lengths(rows):
        x, a = rows
        if a is None:
            return None
        own = set() if x is None else set(axis + offset for axis in x.axes)
        if x is not None and (x.on_axes([0]) != a.on_axes([0]) or
                              not own <= set(a.axes)):
            return None
        if any(axis >= offset and x_shape[axis - offset] != 1
               for axis in set(a.axes) - own):
            return None  # (x's recorded rows there: a constant, a mask)
        return Follow((a,))
    return lengths


@lowering(broadcast.BroadcastTo)
def lower_broadcast_to(node, ctx):
    broadcast_to = ctx.xp.broadcast_to
    shape = ctx.out_shapes[0]
    kernel = Kernel(lambda x: broadcast_to(x, shape), {'shape': shape},
                    grad=_sum_to_inputs(ctx),
                    onnx=lambda b, ins, outs: _onnx_expand(
                        b, ins[0], b.in_shapes[0], shape, outs))
    in_shape = ctx.in_shapes[0]
    if len(in_shape) != len(shape) or not shape:
        return kernel
    # Rows on an axis x has whole, broadcast along the others: at any
    # lengths, to x's sizes on the axes it has whole.
    kept = tuple(a == b for a, b in zip(in_shape, shape))

    def any_shape(sizes):
        return tuple(n if k else s for n, s, k in zip(sizes, shape, kept))

    @takes_axes
    def lengths(rows):
        found = rows[0]
        return None if found is None or not kept[found.axis] else \
            Follow(rows, any_lengths)
    any_lengths = kernel._replace(
        fn=lambda x: broadcast_to(x, any_shape(x.shape)),
        grad=_sum_to_kept(in_shape, kept),
        onnx=lambda b, ins, outs: b.op('Expand', [ins[0], b.shape(
            [1 if k else n for n, k in zip(shape, kept)])], outs),
        lengths=lengths)
    return kernel._replace(lengths=lengths)


@lowering(broadcast.Broadcast)
def lower_broadcast(node, ctx):
    broadcast_arrays = ctx.xp.broadcast_arrays

    def to_onnx(b, ins, outs):
        for x, y, in_shape, shape in zip(ins, outs, b.in_shapes,
                                         b.out_shapes):
            _onnx_expand(b, x, in_shape, shape, [y])
    return Kernel(lambda *xs: tuple(broadcast_arrays(*xs)),
                  {'shape': ctx.out_shapes[0]}, multi=True,
                  grad=_sum_to_inputs(ctx), onnx=to_onnx)


# --- axis permutations -------------------------------------------------------

def _rollaxis_order(ndim, axis, start):
    """The permutation ``numpy.rollaxis(x, axis, start)`` applies."""
    axis = _normalize_axis(axis, ndim)
    start = _normalize_axis(start, ndim)
    if axis < start:
        start -= 1
    order = list(range(ndim))
    order.remove(axis)
    order.insert(start, axis)
    return tuple(order)


def _moveaxis_order(ndim, source, destination):
    """The permutation ``numpy.moveaxis(x, source, destination)``
    applies."""
    source = [_normalize_axis(a, ndim) for a in source]
    destination = [_normalize_axis(a, ndim) for a in destination]
    order = [n for n in range(ndim) if n not in source]
    for dest, src in sorted(zip(destination, source)):
        order.insert(dest, src)
    return tuple(order)


def permutation(node, ndim):
    """The axes order of a transpose, ``swapaxes``, ``rollaxis`` or
    ``moveaxis`` node of an ``ndim``-dimensional input."""
    if isinstance(node, transpose.Transpose):
        if node.axes is None:
            return tuple(range(ndim))[::-1]
        return tuple(_normalize_axis(a, ndim) for a in node.axes)
    if isinstance(node, swapaxes.Swapaxes):
        order = list(range(ndim))
        a1 = _normalize_axis(node.axis1, ndim)
        a2 = _normalize_axis(node.axis2, ndim)
        order[a1], order[a2] = order[a2], order[a1]
        return tuple(order)
    if isinstance(node, rollaxis.Rollaxis):
        return _rollaxis_order(ndim, node.axis, node.start)
    return _moveaxis_order(ndim, node.source, node.destination)


@lowering(transpose.Transpose, swapaxes.Swapaxes, rollaxis.Rollaxis,
          moveaxis.Moveaxis)
def lower_transpose(node, ctx):
    axes = permutation(node, len(ctx.in_shapes[0]))
    inverse = tuple(int(a) for a in numpy.argsort(axes))
    return Kernel(lambda x: x.transpose(axes), {'axes': axes},
                  grad=_grad_of_each(
                      lambda gy: gy.transpose(inverse),
                      lambda b, gy: b.op('Transpose', [gy],
                                         perm=list(inverse))[0]),
                  onnx=onnx_op('Transpose', perm=list(axes)),
                  lengths=rows_permuted(axes))


def rows_permuted(axes):
    """The :attr:`Kernel.lengths` rule of a transpose to the axes order
    ``axes``: the rows move with their axis."""
    @takes_widest
    def lengths(rows):
        return Follow((rows[0]._replace(axis=axes.index(rows[0].axis)),))
    return lengths


# --- reversals ---------------------------------------------------------------

@lowering(flip.Flip, fliplr.FlipLR, flipud.FlipUD)
def lower_flip(node, ctx):
    if isinstance(node, flip.Flip):
        axis = node.axis
    else:
        axis = 1 if isinstance(node, fliplr.FlipLR) else 0
    index = _axis_index(axis, len(ctx.in_shapes[0]), slice(None, None, -1))

    def to_onnx(b, ins, outs):
        b.op('Slice', ins + [b.int64s(v) for v in (
            [-1], [_INT64_MIN], [axis], [-1])], outs)
    return Kernel(lambda x: x[index], {'axis': axis},
                  grad=_grad_of_each(lambda gy: gy[index]), onnx=to_onnx,
                  lengths=rows_in_place)


# --- indexing ----------------------------------------------------------------

def index_label(slices):
    """How a recorded ``GetItem`` prints its index: ``'[-1:]'``."""
    return '[%s]' % ', '.join(_format_index(s) for s in slices)


def _format_index(s):
    if isinstance(s, slice):
        text = ':'.join('' if v is None else str(v)
                        for v in (s.start, s.stop, s.step))
        return text[:-1] if s.step is None else text
    if s is Ellipsis:
        return '...'
    if isinstance(s, chainer.get_array_types()):
        return 'array(%s%s)' % (s.dtype.name, list(s.shape))
    return repr(s)


def _on_device(s, xp):
    """An index array on the device of the indexed arrays."""
    if isinstance(s, numpy.ndarray) and xp is not numpy:
        return xp.asarray(s)
    return s


def _export_error(message):
    return errors.ExportError(message)


def onnx_get_item(slices, ndim):
    """A converter for basic indexing (ints, slices, ``None``, an
    Ellipsis) as ``Slice``, ``Squeeze`` and ``Unsqueeze``, or for a single
    integer-array index among slices (its axes then replace the indexed
    one, as in NumPy), as ``Slice`` and ``Gather``."""
    if not _exportable_index(slices):
        return _unexportable_index(slices)
    return _index_converter(*_index_steps(slices, ndim))


def _exportable_index(slices):
    """Whether ``onnx_get_item`` converts the index ``slices``: no array
    among them, or one integer array among slices and Ellipses."""
    arrays = _index_arrays(slices)
    return not arrays or not (
        len(arrays) > 1 or getattr(arrays[0], 'dtype', numpy.asarray(
            arrays[0]).dtype).kind == 'b'
        or any(s is None or numpy.isscalar(s) for s in slices))


def _index_arrays(slices):
    """The arrays, lists and booleans among the index ``slices`` (all
    else is ints, slices, ``None`` and Ellipses)."""
    return [s for s in slices if isinstance(
        s, (list, bool, numpy.bool_) + chainer.get_array_types())]


def _unexportable_index(slices):
    """A converter that fails, saying how to write the index ``slices``
    so that it exports."""
    def fail(b, ins, outs):
        raise _export_error(
            'GetItem with the index %s has no ONNX converter: only '
            'ints, slices, None, Ellipsis, or one integer array among '
            'slices are exported (write boolean masks as F.where, '
            'several index arrays as one F.get_item per array, or '
            'integers next to an array as a slice and F.squeeze).'
            % ', '.join(_format_index(s) for s in slices))
    return fail


def _index_steps(slices, ndim):
    """``(bounds, squeezed, unsqueezed, gather)`` of an exportable index:
    the ``(start, stop, axis, step)`` of each axis sliced, the axes an
    integer removes, the output axes ``None`` inserts, and ``(axis,
    indices)`` of the integer array, or ``None``."""
    n_ellipsis = ndim - sum(1 for s in slices
                            if s is not None and s is not Ellipsis)
    bounds, squeezed, unsqueezed, gather = [], [], [], None
    axis = out_axis = 0
    for s in slices:
        if s is Ellipsis:
            axis += n_ellipsis
            out_axis += n_ellipsis
        elif s is None:
            unsqueezed.append(out_axis)
            out_axis += 1
        elif isinstance(s, slice):
            step = 1 if s.step is None else int(s.step)
            if s.start is not None or s.stop is not None or step != 1:
                start, stop = ((0, _INT64_MAX) if step > 0
                               else (_INT64_MAX, _INT64_MIN))
                bounds.append((start if s.start is None else int(s.start),
                               stop if s.stop is None else int(s.stop),
                               axis, step))
            axis += 1
            out_axis += 1
        elif numpy.isscalar(s):
            i = int(s)
            bounds.append((i, _INT64_MAX if i == -1 else i + 1, axis, 1))
            squeezed.append(axis)
            axis += 1
        else:
            gather = axis, chainer.backend.CpuDevice().send(
                numpy.asarray(s) if isinstance(s, list) else s)
            axis += 1
    return bounds, squeezed, unsqueezed, gather


def _index_converter(bounds, squeezed, unsqueezed, gather):
    """A converter doing the steps of ``_index_steps`` in turn (an
    ``Identity`` if there are none)."""
    def convert(b, ins, outs):
        steps = [(bounds, 'Slice'), (squeezed, 'Squeeze'),
                 (unsqueezed, 'Unsqueeze'), (gather, 'Gather')]
        steps = [(v, op) for v, op in steps if v]
        x = ins
        if not steps:
            b.op('Identity', x, outs)
        for i, (v, op) in enumerate(steps):
            out = outs if i == len(steps) - 1 else None
            if op == 'Slice':
                x = b.op(op, x + [b.int64s(column) for column in zip(*v)],
                         out)
            elif op == 'Gather':
                x = b.op(op, x + [b.constant(v[1].astype(numpy.int64))],
                         out, axis=v[0])
            else:
                x = b.op(op, x + [b.int64s(v)], out)
    return convert


def _get_item_grad_to_onnx(slices, shape):
    """The ONNX form of GetItem's gradient: ``gy`` put into zeros of
    ``shape`` where ``x[slices]`` took its elements, added where it took
    one twice (as ``numpy.add.at``)."""
    if _index_arrays(slices):
        return _scatter_at_positions(slices, shape)
    bounds, squeezed, unsqueezed, _ = _index_steps(slices, len(shape))

    def convert(b, xs, ys, gys, wanted):
        gy = gys[0]
        if unsqueezed:
            gy = b.single('Squeeze', gy, b.int64s(unsqueezed))
        if squeezed:
            gy = b.single('Unsqueeze', gy, b.int64s(squeezed))
        picked = [range(shape[axis])[start:stop:step]
                  for start, stop, axis, step in bounds]
        sizes = list(shape)
        for (_, _, axis, _), taken in zip(bounds, picked):
            sizes[axis] = len(taken)
        for (_, _, axis, _), taken in zip(bounds, picked):
            gy = _onnx_unslice(b, gy, sizes, axis, shape[axis], taken,
                               b.out_dtypes[0])
            sizes[axis] = shape[axis]
        return gy,
    return convert


def _onnx_unslice(b, gy, sizes, axis, n, picked, dtype):
    """``gy``, of ``sizes``, spread along ``axis`` to ``n`` entries: those
    ``picked`` get ``gy``'s in turn, the others zeros (a ``Gather`` from
    ``gy`` with a slab of zeros after it)."""
    if list(picked) == list(range(n)):
        return gy
    where = numpy.full(n, len(picked), numpy.int64)
    where[list(picked)] = numpy.arange(len(picked))
    slab = onnx_zeros(b, sizes[:axis] + [1] + sizes[axis + 1:], dtype)
    return b.single('Gather', b.single('Concat', gy, slab, axis=axis),
                    b.constant(where), axis=axis)


def _scatter_at_positions(slices, shape):
    """GetItem's gradient for any index in ONNX: ``gy`` added into zeros
    at the flat positions ``x[slices]`` reads, computed now
    (``ScatterND``)."""
    cpu = chainer.backend.CpuDevice()
    index = tuple(cpu.send(s) if isinstance(s, chainer.get_array_types())
                  else s for s in slices)
    size = int(numpy.prod(shape, dtype=int))

    def convert(b, xs, ys, gys, wanted):
        positions = numpy.arange(size).reshape(shape)[index]
        gy = b.single('Reshape', gys[0], b.int64s([positions.size]),
                      allowzero=1)
        flat = onnx_scatter_add(
            b, (size,), b.constant(positions.reshape(-1, 1).astype(
                numpy.int64)), gy, b.out_dtypes[0])
        return b.single('Reshape', flat, b.int64s(list(shape)),
                        allowzero=1),
    return convert


def _basic_index(index):
    """Is ``index`` (a tuple) NumPy's basic indexing: ints, slices,
    ``None`` and ``Ellipsis``, no arrays or bools?"""
    return all(type(s) in (int, slice, type(None), type(Ellipsis)) or
               (isinstance(s, numpy.integer) and type(s) is not numpy.bool_)
               for s in index)


def _add_to_view(gx, index, gy):
    """``numpy.add.at(gx, index, gy)`` for a basic ``index`` (the sum of
    one element, an index of ints only, is a scalar: set back)."""
    gx[index] += gy


@lowering(get_item.GetItem)
def lower_get_item(node, ctx):
    if any(isinstance(s, chainer.Variable) for s in node.slices):
        return None
    xp = ctx.xp
    slices = tuple(_on_device(s, xp) for s in node.slices)
    shape = ctx.in_shapes[0]
    # GetItemGrad: repeated indexes accumulate. A basic index (ints,
    # slices, None, ...) repeats none: each position is 0 + gy, the same
    # sum added in place on the view, 30x faster than NumPy's add.at.
    add_at = cuda.cupyx.scatter_add if xp is not numpy else \
        _add_to_view if _basic_index(slices) else numpy.add.at

    def grad(xs, ys, gys, wanted):
        gy, = gys
        gx = xp.zeros(shape, gy.dtype)
        add_at(gx, slices, gy)
        return gx,
    kernel = Kernel(lambda x: utils.force_array(x[slices]),
                    {'slices': index_label(node.slices)},
                    grad=GradRule(grad, onnx=_get_item_grad_to_onnx(
                        node.slices, shape)),
                    onnx=onnx_get_item(node.slices, len(shape)))

    def any_lengths_grad(xs, ys, gys, wanted):
        gy, = gys
        gx = xp.zeros(xs[0].shape, gy.dtype)
        add_at(gx, slices, gy)
        return gx,

    @takes_square
    @takes_widest
    def lengths(rows):
        found = rows_of_index(spelled_out(slices, len(shape)), rows[0],
                              constant=True)
        if found is TAKEN:  # (enc[:, 0] of a padded block, y[-1]: no rows)
            return Follow((None,), any_lengths)
        return None if found is None else Follow((found,), any_lengths)
    any_lengths = kernel._replace(grad=GradRule(any_lengths_grad,
                                                inputs=(0,)),
                                  lengths=lengths)
    return kernel._replace(lengths=lengths)


@state_lowering(get_item.GetItem, computed=True)
def lower_get_item_at_arrays(node, ctx, state):
    """``x[i, j]`` of integer arrays the forward computed, first (``enc[
    xp.arange(len(xs)), lengths - 1]``: each sentence's last output of a
    padded block): the arrays are the node's further inputs, read at run
    time; the gradient adds the output's at the positions taken (repeated
    ones too, as ``GetItemGrad``). At any number of rows of the indexes
    (the batch), and of the axes they take (the width)."""
    slices = node.slices if type(node.slices) is tuple else (node.slices,)
    at = [index for name, index in state]
    taken = len(at)
    if any(name != 'slices' for name, _ in state) or \
            at != list(range(taken)) or ctx.xp is not numpy or any(
                s != slice(None) for s in slices[taken:]) or any(
                s.dtype.kind not in 'iu' or s.ndim != 1
                for s in slices[:taken]):
        return None

    def get(x, *indexes):
        return utils.force_array(x[indexes])

    def grad(xs, ys, gys, wanted):
        gx = numpy.zeros(xs[0].shape, gys[0].dtype)
        numpy.add.at(gx, tuple(xs[1:]), gys[0])
        return (gx,) + (None,) * taken

    @takes_widest
    def lengths(rows):
        x, indexes = rows[0], rows[1:]
        if all(r is None for r in indexes):  # (the axes taken vary alone)
            return None if x is not None and (
                x.also or x.axis >= taken) else Follow((None,))
        first = indexes[0]
        if any(r != first for r in indexes) or first.axis or first.also or \
                first.widest or x is not None and (
                    x.axis or x.also or x.count() != first.count()):
            return None
        return Follow((first,))
    return Kernel(get, {'slices': index_label(node.slices)},
                  grad=GradRule(grad, inputs=range(1 + taken)),  # (x's shape)
                  lengths=lengths)


@lowering(select_item.SelectItem)
def lower_select_item(node, ctx):
    """``x[arange(len(t)), t]``, at any number of rows."""
    xp = ctx.xp
    classes, dtype = ctx.in_shapes[0][1:], ctx.in_dtypes[0]

    def select(x, t):
        return x[xp.arange(len(t)), t]

    def grad(xs, ys, gys, wanted):
        if not wanted[0]:
            return None, None
        t = xs[1]
        gx = xp.zeros((len(t),) + classes, dtype)  # as Assign
        gx[xp.arange(len(t)), t] = gys[0]
        return gx, None

    def to_onnx(b, ins, outs):
        x, t = ins
        axis = b.int64s([1])
        picked = b.op('GatherElements', [x] + b.op('Unsqueeze', [t, axis]),
                      axis=1)
        b.op('Squeeze', picked + [axis], outs)

    def grad_to_onnx(b, xs, ys, gys, wanted):
        if not wanted[0]:
            return None, None
        axis = b.int64s([1])
        return b.single('ScatterElements',
                        onnx_zeros(b, ctx.in_shapes[0], dtype),
                        b.single('Unsqueeze', xs[1], axis),
                        b.single('Unsqueeze', gys[0], axis), axis=1), None
    return Kernel(select,
                  grad=GradRule(grad, inputs=(1,), onnx=grad_to_onnx),
                  onnx=to_onnx, lengths=rows_of_each_row)


@lowering(where.Where)
def lower_where(node, ctx):
    xp_where = ctx.xp.where
    condition = node.condition
    sum_to = utils.sum_to
    x_shape, y_shape = ctx.in_shapes

    def grad(xs, ys, gys, wanted):
        g, = gys
        zero = g.dtype.type(0)
        return (sum_to(xp_where(condition, g, zero), x_shape)
                if wanted[0] else None,
                sum_to(xp_where(condition, zero, g), y_shape)
                if wanted[1] else None)

    def to_onnx(b, ins, outs):
        cond = b.constant(chainer.backend.CpuDevice().send(condition))
        b.op('Where', [cond] + ins, outs)
    return Kernel(lambda x, y: xp_where(condition, x, y),
                  grad=GradRule(grad), onnx=to_onnx)


@state_lowering(where.Where, computed=True)
def lower_where_of_an_input(node, ctx, state):
    """``F.where`` whose condition the forward computed (``m.array >
    0``): the condition is the node's third input, read at run time, so a
    loop's steps roll and the program serves other values and sizes."""
    if state != (('condition', None),):
        return None
    xp_where = ctx.xp.where
    sum_to = utils.sum_to
    x_shape, y_shape = ctx.in_shapes
    alike = x_shape == y_shape == tuple(node.condition.shape)

    def grad(xs, ys, gys, wanted):
        g, condition = gys[0], xs[2]
        zero = g.dtype.type(0)
        return (sum_to(xp_where(condition, g, zero), x_shape)
                if wanted[0] else None,
                sum_to(xp_where(condition, zero, g), y_shape)
                if wanted[1] else None, None)

    @takes_square
    @takes_widest
    def lengths(rows):  # elementwise, where no input broadcasts
        found = same_rows(rows)
        return None if found is None or not alike else Follow(
            (found,), kernel._replace(grad=GradRule(any_sizes, inputs=(2,))))

    def any_sizes(xs, ys, gys, wanted):  # shapes from the gradient
        g, condition = gys[0], xs[2]
        zero = g.dtype.type(0)
        return (xp_where(condition, g, zero) if wanted[0] else None,
                xp_where(condition, zero, g) if wanted[1] else None, None)

    kernel = Kernel(lambda x, y, condition: xp_where(condition, x, y),
                    grad=GradRule(grad, inputs=(2,)),
                    onnx=lambda b, ins, outs: b.op(
                        'Where', [ins[2], ins[0], ins[1]], outs),
                    lengths=lengths)
    return kernel


@lowering(permutate.Permutate)
def lower_permutate(node, ctx):
    """``x`` taken along ``axis`` in the order of the node's indices (a
    permutation), or of their inverse where ``inv``; the gradient takes
    it in the other order, as ``Permutate.backward``. Chainer indexes
    with ``(slice(None),) * axis``: a negative axis takes axis 0."""
    indices = node.indices
    if not isinstance(indices, chainer.get_array_types()) or \
            not _is_permutation(cuda.to_cpu(indices)):
        return None
    axis = max(node.axis, 0)
    inverse = permutate._inverse_indices(indices)
    order, back = (inverse, indices) if node.inv else (indices, inverse)

    def taken(order):
        """``x`` taken in ``order`` along the axis, and the ONNX form."""
        index = (slice(None),) * axis + (order,)
        at = numpy.asarray(cuda.to_cpu(order), numpy.int64)
        return (lambda x: x[index],
                lambda b, x, out=None: b.op('Gather', [x, b.constant(at)],
                                            out, axis=axis)[0])
    forward, to_onnx = taken(order)
    return Kernel(forward, {'axis': axis, 'inv': node.inv},
                  grad=_grad_of_each(*taken(back)),
                  onnx=lambda b, ins, outs: to_onnx(b, ins[0], outs),
                  lengths=rows_follow_first if axis else None)


def _is_permutation(indices):
    return indices.ndim == 1 and indices.dtype.kind in 'iu' and \
        numpy.array_equal(numpy.sort(indices), numpy.arange(len(indices)))


# --- joining and splitting ---------------------------------------------------

def _split_grad(ctx, axis, sizes, any_rows=False):
    """The gradient of a join along ``axis`` of pieces of ``sizes``: the
    output's gradient cut into pieces (``split_axis`` in Chainer's
    backward), each reshaped to its input's shape (with ``any_rows``, a
    join of inputs with as many dimensions as its output, whose other
    axes may have any sizes: the pieces as they are, views of the
    gradient)."""
    ndim = len(ctx.out_shapes[0])
    points = numpy.cumsum([0] + list(sizes))
    pieces = [(_axis_index(axis, ndim, slice(int(start), int(stop))), shape)
              for start, stop, shape in zip(points, points[1:],
                                            ctx.in_shapes)]

    def grad(xs, ys, gys, wanted):
        gy, = gys
        if any_rows:
            return tuple(gy[index] if w else None
                         for (index, _), w in zip(pieces, wanted))
        return tuple(gy[index].reshape(shape) if w else None
                     for (index, shape), w in zip(pieces, wanted))
    return GradRule(grad)


@lowering(concat.Concat)
def lower_concat(node, ctx):
    concatenate = ctx.xp.concatenate
    axis = node.axis
    sizes = [s[axis] for s in ctx.in_shapes]
    kernel = Kernel(lambda *xs: concatenate(xs, axis), {'axis': axis},
                    grad=_split_grad(ctx, axis, sizes),
                    onnx=onnx_op('Concat', axis=axis))
    at = _normalize_axis(axis, len(ctx.out_shapes[0]))
    if at != 0:
        return kernel._replace(lengths=rows_concatenated(
            at, sizes,
            kernel._replace(grad=_split_grad(ctx, axis, sizes, True))))
    return kernel._replace(lengths=_rows_joined(kernel, sizes))


def rows_concatenated(axis, sizes, kernel=None):
    """The ``Kernel.lengths`` rule of a join along ``axis`` (not the
    first) of arrays of ``sizes`` there, whose kernel reads their sizes
    when run: the rows they all have on another axis (a batch's features
    side by side), or, on that one, all of theirs in order
    (:func:`_rows_along`: a learned first step before the steps,
    ``F.concat([cls, h], axis=1)``, its mask by ``numpy.concatenate``).
    With ``kernel`` (a Chainer function's), that kernel runs at any rows,
    its gradient cutting at the inputs' sizes where they join rows."""
    @takes_axes
    def lengths(rows):
        found = same_rows(rows)
        if found is not None and found.axis != axis:
            return Follow((found,), side_by_side)
        joined = _rows_along(rows, sizes, axis)
        return None if joined is None else Follow((joined,), along)
    side_by_side = along = None
    if kernel is not None:
        side_by_side = kernel._replace(lengths=lengths)
        along = kernel._replace(lengths=lengths, grad=GradRule(
            functools.partial(_split_at_input_sizes, axis=axis),
            inputs=tuple(range(len(sizes)))))
    return lengths


def _rows_along(rows, sizes, axis):
    """The rows of a join along ``axis`` of inputs whose rows (where they
    have any) are alike and on that axis, one item's or a batch's, the
    others of fixed ``sizes`` there: all of them in order; else
    ``None``."""
    found = [r for r in rows if r is not None]
    if not found or any(r != found[0] for r in found) or \
            found[0].axis != axis or found[0].widest or found[0].also:
        return None
    total = sum((size if r is None else r._replace(axis=0)
                 for r, size in zip(rows, sizes)), 0)
    return total._replace(axis=axis)


def _rows_joined(kernel, sizes):
    """The ``Kernel.lengths`` rule of a join along the first axis: the
    output has the rows of all its inputs, and at any lengths the kernel's
    gradient cuts at the sizes of the inputs it keeps."""
    any_lengths = kernel._replace(grad=GradRule(
        _split_at_input_sizes, inputs=tuple(range(len(sizes)))))

    def lengths(rows):
        total = sum((size if r is None else r
                     for r, size in zip(rows, sizes)), 0)
        return Follow((total,), any_lengths)
    return lengths


def _split_at_input_sizes(xs, ys, gys, wanted, axis=0):
    """The gradient of a join along ``axis``, cut at the sizes of its
    inputs there (views of ``gy``, as Chainer's ``split_axis``)."""
    gy, = gys
    sizes = [x.shape[axis] for x in xs]
    stops = numpy.cumsum(sizes)
    return tuple(gy[(slice(None),) * axis + (slice(stop - n, stop),)]
                 if w else None for n, stop, w in zip(sizes, stops, wanted))


@lowering(stack.Stack)
def lower_stack(node, ctx):
    xp_stack = ctx.xp.stack
    axis = node.axis
    ndim = len(ctx.out_shapes[0])
    # Chainer separates the gradient along ``axis``.
    indexes = [_axis_index(axis, ndim, i) for i in range(len(ctx.in_shapes))]

    def grad(xs, ys, gys, wanted):
        gy, = gys
        return tuple(gy[index] if w else None
                     for index, w in zip(indexes, wanted))
    return Kernel(lambda *xs: xp_stack(xs, axis=axis), {'axis': axis},
                  grad=grad_rule(ctx, grad),
                  onnx=_onnx_unsqueeze_concat(
                      [[_normalize_axis(axis, ndim)]] * len(ctx.in_shapes),
                      axis),
                  lengths=rows_joined('Stack', _normalize_axis(axis, ndim)))


def _onnx_unsqueeze_concat(unsqueezed, axis):
    """A converter: each input ``i`` unsqueezed at ``unsqueezed[i]``
    (none if empty), then all concatenated along ``axis``."""
    def convert(b, ins, outs):
        xs = [b.op('Unsqueeze', [x, b.int64s(axes)])[0] if axes else x
              for x, axes in zip(ins, unsqueezed)]
        b.op('Concat', xs, outs, axis=axis)
    return convert


# The axis hstack, vstack and dstack join along, and the least number of
# dimensions an input has its own extent along it (fewer: length 1).
_STACK_AXES = {hstack.Hstack: (1, 2), vstack.Vstack: (0, 2),
               dstack.Dstack: (2, 3)}


@lowering(hstack.Hstack, vstack.Vstack, dstack.Dstack)
def lower_hvdstack(node, ctx):
    fn = getattr(ctx.xp, type(node).__name__.lower())
    axis, least = _STACK_AXES[type(node)]
    if isinstance(node, hstack.Hstack) and len(ctx.in_shapes[0]) <= 1:
        axis, least = 0, 1
    sizes = [s[axis] if len(s) >= least else 1 for s in ctx.in_shapes]
    # ``atleast_1d``, ``_2d`` or ``_3d``, by the number of dimensions.
    promote = _STACK_PROMOTIONS[least]
    kernel = Kernel(lambda *xs: fn(xs),
                    grad=_split_grad(ctx, axis, sizes),
                    onnx=_onnx_unsqueeze_concat(
                        [promote[len(s)] if len(s) < least else []
                         for s in ctx.in_shapes], axis))
    if axis == 0 or any(len(s) != len(ctx.out_shapes[0])
                        for s in ctx.in_shapes):
        return kernel
    # (F.hstack of a batch's features: a join beside the rows)
    return kernel._replace(lengths=rows_concatenated(
        axis, sizes, kernel._replace(grad=_split_grad(ctx, axis, sizes,
                                                      True))))


# The axes ``numpy.atleast_{1,2,3}d`` insert in an array of 0, 1 or 2
# dimensions.
_STACK_PROMOTIONS = {1: [[0]], 2: [[0, 1], [0]], 3: [[0, 1, 2], [0, 2], [2]]}


def _split_points(node, size):
    """The boundaries ``numpy.split`` cuts an axis of ``size`` at."""
    if node.indices is not None:
        return [0] + list(node.indices) + [size]
    step = size // node.sections
    return [i * step for i in range(node.sections + 1)]


def _join_grad(ctx, axis, stacked=False):
    """The gradient of a split: the outputs' gradients joined along
    ``axis`` (concatenated, or ``stacked`` there), zeros for those without
    one."""
    xp = ctx.xp
    shapes, dtype = ctx.out_shapes, ctx.in_dtypes[0]

    def grad(xs, ys, gys, wanted):
        join = xp.stack if stacked else xp.concatenate
        return join([xp.zeros(shape, dtype) if gy is None else gy
                     for gy, shape in zip(gys, shapes)], axis),

    def to_onnx(b, xs, ys, gys, wanted):
        parts = [onnx_zeros(b, shape, dtype) if gy is None else gy
                 for gy, shape in zip(gys, shapes)]
        if stacked:  # (no such ONNX op)
            parts = [b.single('Unsqueeze', part, b.int64s([axis]))
                     for part in parts]
        return b.single('Concat', *parts, axis=axis),
    return GradRule(grad, onnx=to_onnx)


@lowering(split_axis.SplitAxis)
def lower_split_axis(node, ctx):
    shape = ctx.in_shapes[0]
    axis = _normalize_axis(node.axis, len(shape))
    points = _split_points(node, shape[axis])
    indexes = [_axis_index(axis, len(shape), slice(start, stop))
               for start, stop in zip(points, points[1:])]
    sizes = [s[axis] for s in ctx.out_shapes]
    grad = None  # pieces that overlap: Chainer's backward fails
    if sum(sizes) == shape[axis]:
        grad = _join_grad(ctx, axis)

    def to_onnx(b, ins, outs):
        if sum(sizes) == shape[axis] and len(sizes) > 1 and all(sizes):
            b.op('Split', ins + [b.int64s(sizes)], outs, axis=axis)
            return
        # Empty or overlapping pieces: one slice each.
        for start, stop, y in zip(points, points[1:], outs):
            b.op('Slice', ins + [b.int64s([v]) for v in (start, stop, axis)],
                 [y])
    kernel = Kernel(lambda x: tuple(x[index] for index in indexes),
                    {'axis': node.axis}, multi=True, grad=grad, onnx=to_onnx)
    if grad is None:
        return kernel
    if axis != 0:
        return kernel._replace(lengths=_rows_beside_split(
            kernel, ctx, axis, [s[axis] for s in ctx.out_shapes]))
    if ctx.xp is not numpy:
        return kernel
    cut = _rows_cut(kernel, points, shape[1:], ctx.in_dtypes[0])
    return kernel._replace(lengths=cut if node.indices is not None else
                           _in_equal_sections(cut))


def _rows_beside_split(kernel, ctx, axis, sizes):
    """The ``Kernel.lengths`` rule of a cut along ``axis``, fixed, of an
    array whose rows are on another axis (the queries, keys and values of
    a batch's projection, ``F.split_axis(qkv, 3, axis=1)``): every piece
    has its rows; at any rows its gradient makes the zeros of a piece
    without one in the shape of the input's rows."""
    xp, dtype = ctx.xp, ctx.in_dtypes[0]

    def grad(xs, ys, gys, wanted):
        rows = [gy.shape for gy in gys if gy is not None][0]
        return xp.concatenate([
            xp.zeros(rows[:axis] + (size,) + rows[axis + 1:], dtype)
            if gy is None else gy for gy, size in zip(gys, sizes)], axis),

    @takes_axes
    def lengths(rows):
        if rows[0] is None or rows[0].axis == axis:
            return None
        return Follow((rows[0],) * len(sizes), any_rows)
    any_rows = kernel._replace(grad=kernel.grad._replace(fn=grad, onnx=None),
                               lengths=lengths)
    return lengths


def _in_equal_sections(cut):
    """The ``Kernel.lengths`` rule of a cut into equal sections along the
    first axis: :func:`_rows_cut`'s, where the rows are copies of one
    item's (a join of batches, ``F.split_axis(h, 2, 0)`` after
    ``F.concat([real, fake], 0)``): equal sections then fall where they
    meet at any length."""
    def lengths(rows):
        leaves = set(leaf for leaf, _ in rows[0].parts)
        return cut(rows) if len(leaves) == 1 and None not in leaves \
            else None
    return lengths


def _rows_cut(kernel, points, trailing, dtype):
    """The ``Kernel.lengths`` rule of a cut along the first axis: where the
    rows are a join of list items (and fixed rows) and the recorded cut
    points are where some of the join's parts meet
    (``F.split_axis(ex, numpy.cumsum(lengths[:-1]), 0)``), each piece has
    the rows of its parts, and at any lengths the kernel cuts at the
    lengths of the items it also takes."""
    def lengths(rows):
        pieces = _pieces(rows[0].parts, points)
        if pieces is None:
            return None
        items = tuple(leaf for piece in pieces for leaf, _ in piece
                      if leaf is not None)
        follow = tuple(Rows(piece) if _has_items(piece) else None
                       for piece in pieces)
        return Follow(follow, _cut_at_items(kernel, pieces, trailing, dtype),
                      items)
    return lengths


def _has_items(parts):
    return any(leaf is not None for leaf, _ in parts)


def _pieces(parts, points):
    """The parts of each piece of a cut at ``points`` (recorded rows, from
    0 to the end), or ``None`` where a point falls inside a part."""
    if any(n < 0 for _, n in parts):
        return None
    pieces, piece, end, cuts = [], [], 0, iter(points[1:])
    cut = next(cuts)
    for part in parts:
        piece.append(part)
        end += part[1]
        while end == cut:  # (empty pieces too)
            pieces.append(tuple(piece))
            piece, cut = [], next(cuts, None)
        if cut is not None and end > cut:
            return None
    return pieces if cut is None and not piece else None


def _cut_at_items(kernel, pieces, trailing, dtype):
    """A cut along the first axis into ``pieces``, each of the rows of its
    parts: fixed numbers, and for each item (in order) the length of the
    next array the kernel takes after ``x``. Its gradient joins the
    pieces' gradients (zeros for those without one)."""
    def sizes_of(items):
        found = iter(items)
        return [sum(n if leaf is None else len(next(found))
                    for leaf, n in piece) for piece in pieces]

    def cut(x, *items):
        sizes = sizes_of(items)
        return tuple(x[stop - size:stop]
                     for stop, size in zip(numpy.cumsum(sizes), sizes))

    def grad(xs, ys, gys, wanted):
        parts = [numpy.zeros((size,) + trailing, dtype) if gy is None
                 else gy for gy, size in zip(gys, sizes_of(xs[1:]))]
        return (numpy.concatenate(parts, 0),) + (None,) * (len(xs) - 1)

    def to_onnx(b, ins, outs):
        found = iter(ins[1:])
        stop = b.int64s([0])
        for piece, y in zip(pieces, outs):
            start = stop
            for leaf, n in piece:
                size = b.int64s([n]) if leaf is None else b.op('Slice', [
                    b.op('Shape', [next(found)])[0], b.int64s([0]),
                    b.int64s([1])])[0]
                stop = b.op('Add', [stop, size])[0]
            b.op('Slice', [ins[0], start, stop, b.int64s([0])], [y])
    n_items = sum(leaf is not None for piece in pieces for leaf, _ in piece)
    return kernel._replace(fn=cut, grad=GradRule(
        grad, inputs=tuple(range(1, 1 + n_items))), onnx=to_onnx,
        lengths=None)


@lowering(separate.Separate)
def lower_separate(node, ctx):
    shape = ctx.in_shapes[0]
    axis = _normalize_axis(node.axis, len(shape))
    indexes = [_axis_index(axis, len(shape), i) for i in range(shape[axis])]

    def to_onnx(b, ins, outs):
        for i, y in enumerate(outs):
            b.op('Gather', ins + [b.int64s(i)], [y], axis=axis)
    kernel = Kernel(lambda x: tuple(x[index] for index in indexes),
                    {'axis': node.axis}, multi=True,
                    grad=_join_grad(ctx, axis, stacked=True), onnx=to_onnx)
    return kernel._replace(lengths=_rows_beside_separated(
        kernel, axis, len(indexes), ctx.xp, ctx.in_dtypes[0]))


def _rows_beside_separated(kernel, axis, n_items, xp, dtype):
    """The ``Kernel.lengths`` rule of ``F.separate`` along ``axis``, fixed,
    of an array whose rows are on other axes (queries, keys and values
    apart, ``F.separate(qkv, axis=0)`` of ``(3, B, H, T, d)``): each item
    has them, an axis lower past ``axis``; at any rows, the gradient makes
    the zeros of an item without one in the shape of the others'."""
    def grad(xs, ys, gys, wanted):
        shape = next(gy.shape for gy in gys if gy is not None)
        return xp.stack([xp.zeros(shape, dtype) if gy is None else gy
                         for gy in gys], axis),

    @takes_square
    @takes_widest
    @takes_axes
    def lengths(rows):
        found = rows[0]
        if found is None or axis in found.axes:
            return None
        moved = found.on_axes([a - (a > axis) for a in found.axes])
        return Follow((moved,) * n_items, any_rows)
    any_rows = kernel._replace(lengths=lengths, grad=GradRule(grad))
    return lengths


# --- repetition and padding --------------------------------------------------

@lowering(tile.Tile)
def lower_tile(node, ctx):
    xp_tile = ctx.xp.tile
    reps = node.reps
    # Tile.backward: sums over the repetitions of each axis.
    in_shape = ctx.in_shapes[0]
    ndim = max(len(in_shape), len(reps))
    padded_reps = (1,) * (ndim - len(reps)) + reps
    padded_shape = (1,) * (ndim - len(in_shape)) + in_shape
    split = sum(zip(padded_reps, padded_shape), ())
    reps_axes = tuple(range(0, 2 * ndim, 2))

    def grad(xs, ys, gys, wanted):
        gx = gys[0].reshape(split).sum(axis=reps_axes)
        return gx.reshape(in_shape),

    def to_onnx(b, ins, outs):
        # ONNX Tile takes one repetition per axis of ``x``.
        x = ins
        if ndim > len(in_shape):
            x = b.op('Unsqueeze', x + [b.int64s(
                range(ndim - len(in_shape)))])
        b.op('Tile', x + [b.int64s(padded_reps)], outs)
    return Kernel(lambda x: xp_tile(x, reps), {'reps': reps},
                  grad=grad_rule(ctx, grad), onnx=to_onnx)


@lowering(repeat.Repeat)
def lower_repeat(node, ctx):
    xp_repeat = ctx.xp.repeat
    repeats = node.repeats
    if len(repeats) == 1:
        repeats = repeats[0]
    axis = node.axis
    shape = ctx.in_shapes[0]
    # The indexes of ``x`` (flattened if ``axis`` is None) taken in turn.
    taken = numpy.repeat(numpy.arange(
        utils.size_of_shape(shape) if axis is None else shape[axis]),
        repeats).astype(numpy.int64)

    def to_onnx(b, ins, outs):
        x = ins if axis is not None else b.op(
            'Reshape', ins + [b.int64s([-1])])
        b.op('Gather', x + [b.constant(taken)], outs, axis=axis or 0)
    kernel = Kernel(lambda x: xp_repeat(x, repeats, axis),
                    {'repeats': node.repeats, 'axis': axis},
                    grad=grad_rule(ctx, _repeat_grad(node, ctx)),
                    onnx=to_onnx)
    if len(node.repeats) != 1 or axis is None or not shape:
        return kernel
    return kernel._replace(lengths=_rows_repeated(
        kernel, int(node.repeats[0]), _normalize_axis(axis, len(shape))))


def _rows_repeated(kernel, r, axis):
    """The ``Kernel.lengths`` rule of ``F.repeat(x, r, axis)``
    (``ops.rows_repeated``), its kernel's gradient summing each ``r``
    rows at any sizes; its ONNX form, which gathers the recorded rows,
    left out where the rows are on that axis."""
    rule = rows_repeated(r, axis)

    def grad(xs, ys, gys, wanted):
        gy, = gys
        return gy.reshape(gy.shape[:axis] + (gy.shape[axis] // r, r) +
                          gy.shape[axis + 1:]).sum(axis=axis + 1),

    @takes_axes
    def lengths(rows):
        following = rule(rows)
        if following is None:
            return None
        return following._replace(kernel=any_sizes._replace(
            onnx=None) if rows[0].axis == axis else any_sizes)
    any_sizes = kernel._replace(grad=GradRule(grad), lengths=lengths)
    return lengths


def _repeat_grad(node, ctx):
    """As RepeatGrad.forward."""
    xp = ctx.xp
    repeats = node.repeats
    shape, dtype = ctx.in_shapes[0], ctx.in_dtypes[0]
    axis = node.axis
    if axis is not None:
        axis = _normalize_axis(axis, len(shape))
    if ctx.out_shapes[0][:1] == (0,):  # ``len(gy) == 0``
        return lambda xs, ys, gys, wanted: (xp.zeros(shape, dtype),)
    if len(repeats) == 1:
        r = int(repeats[0])
        if axis is None:
            return lambda xs, ys, gys, wanted: (
                gys[0].reshape(-1, r).sum(axis=1).reshape(shape),)
        split = shape[:axis] + (-1, r) + shape[axis + 1:]
        return lambda xs, ys, gys, wanted: (
            gys[0].reshape(split).sum(axis=axis + 1),)
    points = numpy.cumsum((0,) + tuple(repeats))
    spans = list(zip(range(len(repeats)), points, points[1:]))

    def grad(xs, ys, gys, wanted):
        gy, = gys
        if axis is None:
            gx = xp.zeros(utils.size_of_shape(shape), dtype)
            for i, start, stop in spans:
                gx[i] = xp.sum(gy[start:stop])
            return gx.reshape(shape),
        gx = xp.zeros(shape, dtype)
        for i, start, stop in spans:
            gx[_axis_index(axis, len(shape), slice(i, i + 1))] = gy[
                _axis_index(axis, len(shape), slice(start, stop))].sum(
                    axis=axis, keepdims=True)
        return gx,
    return grad


@lowering(pad.Pad)
def lower_pad(node, ctx):
    value = node.keywords.get('constant_values', 0)
    if (node.mode != 'constant' or set(node.keywords) - {'constant_values'}
            or not numpy.isscalar(value)):
        return None
    shape, dtype = ctx.out_shapes[0], ctx.out_dtypes[0]
    widths = [(int(before), int(after)) for before, after in
              numpy.broadcast_to(node.pad_width, (len(shape), 2))]
    padded, inner = _padding(widths, value, dtype, ctx.xp)
    kept = inner(ctx.in_shapes[0])

    def to_onnx(b, ins, outs):
        pads = [before for before, _ in widths] + \
            [after for _, after in widths]
        b.op('Pad', ins + [b.int64s(pads), onnx_scalar(b, value, dtype)],
             outs, mode='constant')
    kernel = Kernel(padded, {'mode': 'constant', 'value': value},
                    grad=_grad_of_each(lambda gy: gy[kept]), onnx=to_onnx)
    return kernel._replace(lengths=_rows_padded_by(kernel, widths, inner))


def _padding(widths, value, dtype, xp):
    """``(padded, inner)``: ``F.pad``'s array of an array by ``widths``
    (``(before, after)`` an axis) with ``value``, at the shape it is
    given, and ``inner(shape)``, the slices of a padded array that hold
    one of ``shape``."""
    def inner(shape):
        return tuple(slice(before, before + n)
                     for n, (before, _) in zip(shape, widths))

    def padded(x):
        y = xp.full(tuple(n + before + after for n, (before, after) in zip(
            x.shape, widths)), value, dtype)
        y[inner(x.shape)] = x
        return y
    return padded, inner


def _rows_padded_by(kernel, widths, inner):
    """The ``Kernel.lengths`` rule of ``F.pad`` by ``widths`` (a row before
    the steps: a decoder's inputs shifted right, ``F.pad(h[:, :-1], ((0,
    0), (1, 0), (0, 0)))``): the rows, and those added on their axis; at
    any rows, the kernel pads the shape it is given, and its gradient
    takes the ``inner(shape)`` of its input's."""
    def grad(xs, ys, gys, wanted):
        return gys[0][inner(xs[0].shape)],

    @takes_axes
    def lengths(rows):
        found = rows[0]
        if found is None or found.widest or any(
                widths[axis] != (0, 0) for axis in found.also):
            return None
        before, after = widths[found.axis]
        out = (before + found._replace(axis=0) + after).cancelled()
        return Follow((out._replace(axis=found.axis),), any_rows)
    any_rows = kernel._replace(lengths=lengths, grad=GradRule(
        grad, inputs=(0,)))
    return lengths


# --- element types and devices -----------------------------------------------

@lowering(cast.Cast)
def lower_cast(node, ctx):
    dtype = numpy.dtype(node.type)
    in_dtype = ctx.in_dtypes[0]
    if in_dtype.kind == 'f':
        grad = _grad_of_each(lambda gy: gy.astype(in_dtype, copy=False))
    else:  # Cast.backward: no gradient to a non-float input
        grad = GradRule(lambda xs, ys, gys, wanted: (None,))
    return Kernel(lambda x: x.astype(dtype, copy=False), {'dtype': dtype},
                  grad=grad, onnx=lambda b, ins, outs: b.op(
                      'Cast', ins, outs, to=onnx_dtype(dtype)))


@lowering(copy.Copy)
def lower_copy(node, ctx):
    if node._in_device != node.out_device:
        return None
    return Kernel(node.out_device.send,
                  grad=_grad_of_each(node._in_device.send),
                  onnx=onnx_op('Identity'))


# --- pixel shuffles ----------------------------------------------------------

def _unshuffle(ctx, split, axes):
    """The gradient of ``x.reshape(split).transpose(axes).reshape(...)``:
    that permutation undone (Chainer's backward is the opposite shuffle,
    the same element permutation)."""
    moved = tuple(split[a] for a in axes)
    inverse = tuple(int(a) for a in numpy.argsort(axes))
    in_shape = ctx.in_shapes[0]
    return _grad_of_each(
        lambda gy: gy.reshape(moved).transpose(inverse).reshape(in_shape))


@lowering(space2depth.Space2Depth)
def lower_space2depth(node, ctx):
    r = node.r
    n, c, a, b = ctx.in_shapes[0]
    split = (n, c, a // r, r, b // r, r)
    shape = ctx.out_shapes[0]
    return Kernel(
        lambda x: x.reshape(split).transpose(0, 3, 5, 1, 2, 4).reshape(shape),
        {'r': r}, grad=_unshuffle(ctx, split, (0, 3, 5, 1, 2, 4)),
        onnx=onnx_op('SpaceToDepth', blocksize=r))


@lowering(depth2space.Depth2Space)
def lower_depth2space(node, ctx):
    r = node.r
    n, c, a, b = ctx.in_shapes[0]
    c //= r ** 2
    split = (n, r, r, c, a, b)
    shape = ctx.out_shapes[0]
    return Kernel(
        lambda x: x.reshape(split).transpose(0, 3, 4, 1, 5, 2).reshape(shape),
        {'r': r}, grad=_unshuffle(ctx, split, (0, 3, 4, 1, 5, 2)),
        onnx=onnx_op('DepthToSpace', blocksize=r, mode='DCR'))


def _own_with_grad_node(node, ctx, grad_node, attrs, fn=None):
    """A kernel running ``fn`` (``node``'s own forward by default), whose
    gradient is the forward of ``grad_node``, the node Chainer's
    ``backward`` applies; on the CPU only."""
    if ctx.xp is not numpy:
        return None

    def grad(xs, ys, gys, wanted):
        return copy_module.copy(grad_node).forward(gys)
    return Kernel(fn or own_forward(node), attrs=attrs, grad=GradRule(grad))


@lowering(diagonal.Diagonal)
def lower_diagonal(node, ctx):
    """The diagonal, copied out (Chainer returns a read-only view); its
    gradient, ``DiagonalGrad``'s forward, puts it back in zeros."""
    where = dict(offset=node.offset, axis1=node.axis1, axis2=node.axis2)
    return _own_with_grad_node(
        node, ctx, diagonal.DiagonalGrad(ctx.in_shapes[0], **where), where,
        lambda x: x.diagonal(**where).copy())


@lowering(im2col.Im2Col)
def lower_im2col(node, ctx):
    settings = dict(ksize=(node.kh, node.kw), stride=(node.sy, node.sx),
                    pad=(node.ph, node.pw), cover_all=node.cover_all,
                    dilate=(node.dy, node.dx))
    return _own_with_grad_node(node, ctx, im2col.Im2ColGrad(
        in_shape=ctx.in_shapes[0], **settings), settings)


@lowering(spatial_transformer_grid.SpatialTransformerGrid)
def lower_spatial_transformer_grid(node, ctx):
    """The sampling grid: ``theta`` times the output's coordinates (``x``
    and ``y`` in ``[-1, 1]``, and ones), computed once as Chainer's
    forward computes them; the gradient is Chainer's CPU backward, the
    grid's gradient times the transposed coordinates."""
    if ctx.xp is not numpy:
        return None
    h, w = node.output_shape
    coords = _grid_coordinates(h, w, ctx.in_dtypes[0])
    coords_t = coords.transpose(1, 0)

    def grid(theta):
        return theta.dot(coords).reshape(len(theta), 2, h, w)

    def grad(xs, ys, gys, wanted):
        gy = gys[0]
        return gy.reshape(len(gy), 2, h * w).dot(coords_t).reshape(
            len(gy), 2, 3),

    def to_onnx(b, ins, outs):
        product = b.single('MatMul', ins[0], b.constant(coords))
        b.op('Reshape', [product, b.int64s([0, 2, h, w])], outs)

    def grad_to_onnx(b, xs, ys, gys, wanted):
        gy = b.single('Reshape', gys[0], b.int64s([0, 2, h * w]))
        return b.single('MatMul', gy, b.constant(coords_t)),
    return Kernel(grid, {'output_shape': (h, w)},
                  grad=GradRule(grad, onnx=grad_to_onnx), onnx=to_onnx,
                  lengths=rows_follow_first)


def _grid_coordinates(h, w, dtype):
    """``SpatialTransformerGrid``'s coordinates, ``(3, h * w)``."""
    ys, xs = numpy.meshgrid(numpy.linspace(-1, 1, h, dtype=dtype),
                            numpy.linspace(-1, 1, w, dtype=dtype),
                            indexing='ij', copy=False)
    return numpy.concatenate([xs[None], ys[None], numpy.ones(
        (1, h, w), dtype=dtype)], axis=0).reshape(3, h * w)


@lowering(pad_sequence.PadSequence)
def lower_pad_sequence(node, ctx):
    """``F.pad_sequence``: the items side by side, each padded to
    ``length`` or, where it is not given, to the longest item (whose
    rows it then has on its second axis: any lengths)."""
    length, padding = node.length, node.padding

    def run(*xs):
        return items_padded(xs, length, padding)

    def grad(xs, ys, gys, wanted):
        return tuple(gys[0][i, :len(x)].copy() if w else None
                     for i, (x, w) in enumerate(zip(xs, wanted)))

    def to_onnx(b, ins, outs):
        onnx_items_padded(b, ins, len(ctx.in_shapes[0]), 0, length,
                          padding, ctx.in_dtypes[0], outs)
    return Kernel(run, {'length': length, 'padding': padding},
                  grad=GradRule(grad, inputs=range(len(ctx.in_shapes))),
                  onnx=to_onnx, fresh=True,
                  lengths=rows_padded if length is None else None)


class PadSegments(chainer.FunctionNode):
    """``F.pad_sequence(ys, length, padding)`` of the parts of joined
    items (``frontend.joining.Segments``: an N-step link's outputs over
    sentences joined): the inputs are the rows of all the items, one
    item after another, and their lengths; the output and its gradient
    ``F.pad_sequence``'s, at any number and lengths of the items."""

    def __init__(self, length, padding):
        self.length, self.padding = length, padding

    def forward(self, inputs):
        self.retain_inputs((1,))
        rows, lengths = inputs
        return segments_ops.padded_rows(rows, lengths, self.length,
                                        self.padding),

    def backward(self, indexes, grad_outputs):
        lengths = self.get_retained_inputs()[0].array
        return chainer.Variable(segments_ops.rows_of_padded(
            grad_outputs[0].array, lengths)), None


@lowering(PadSegments)
def lower_pad_segments(node, ctx):
    """Pads the items' rows at their lengths when run. The items are the
    output's first axis; their rows, padded to the longest, its second
    (``Rows.widest``), unless padded to a ``length`` given."""
    length, padding = node.length, node.padding

    def run(rows, item_lengths):
        return segments_ops.padded_rows(rows, item_lengths, length, padding)

    def grad(xs, ys, gys, wanted):
        return (segments_ops.rows_of_padded(gys[0], xs[1])
                if wanted[0] else None, None)

    def lengths(rows):
        words, items = rows
        if rows == (None, None) or not all(
                _on_the_first_axis(r) for r in rows if r is not None):
            return None
        if items is not None:  # the items' number (and the words' rows
            return Follow((items,))  # framing each: concatenate([bos, y]))
        return Follow((None if length is not None else
                       words._replace(axis=1, widest=True),))
    return Kernel(run, {'length': length, 'padding': padding},
                  grad=GradRule(grad, inputs=(1,)), fresh=True,
                  lengths=lengths, onnx=segments_ops.padded_to_onnx(
                      ctx.in_dtypes[1], length, lambda b: onnx_scalar(
                          b, padding, ctx.in_dtypes[0])))


class TimeMajorSegments(chainer.FunctionNode):
    """``F.concat(F.transpose_sequence(ys), axis=0)`` of the parts of
    joined items sorted by decreasing length (an N-step function's output
    steps, a tagger's labels, read time-major): the inputs are the rows of
    all the items and their lengths; the output their rows in time-major
    order (``segments_ops.time_major_order``), and its gradient theirs
    put back, at any number and lengths of the items."""

    def forward(self, inputs):
        rows, lengths = inputs
        self._order = segments_ops.time_major_order(lengths)
        return rows[self._order],

    def backward(self, indexes, grad_outputs):
        return _rows_in_place(self._order, grad_outputs[0]), None


class _RowsInPlace(chainer.FunctionNode):
    """The gradient of :class:`TimeMajorSegments`: each row back at its
    place (``order``); its own gradient the rows taken again."""

    def __init__(self, order):
        self.order = order

    def forward(self, inputs):
        return _put_back(self.order, inputs[0]),

    def backward(self, indexes, grad_outputs):
        return chainer.functions.get_item(grad_outputs[0], self.order),


def _put_back(order, gy):
    g = numpy.empty_like(gy)
    g[order] = gy
    return g


def _rows_in_place(order, gy):
    return _RowsInPlace(order).apply((gy,))[0]


@lowering(TimeMajorSegments)
def lower_time_major_segments(node, ctx):
    """Orders the items' rows time-major when run, at the lengths of each
    call; its rows are its input's."""
    def run(rows, item_lengths):
        return rows[segments_ops.time_major_order(item_lengths)]

    def grad(xs, ys, gys, wanted):
        return (_put_back(segments_ops.time_major_order(xs[1]), gys[0])
                if wanted[0] else None, None)

    return Kernel(run, {}, grad=GradRule(grad, inputs=(1,)), fresh=True,
                  lengths=segments_ops.same_rows_rule)


class StepsOfSequences(transpose_sequence.TransposeSequence):
    """``F.transpose_sequence`` of sequences into steps, whose backward
    takes a step no gradient reached as zeros: an N-step function's output
    steps, made of the sequences its node computes, where the forward
    reads some of them alone (``ys[-1]``) as Chainer's own steps."""

    def forward(self, xs):
        steps = super().forward(xs)
        self._like = [(step.shape, step.dtype) for step in steps]
        return steps

    def backward(self, indexes, grad_outputs):
        xp = chainer.backend.get_array_module(*[
            g for g in grad_outputs if g is not None])
        return super().backward(indexes, tuple(
            chainer.Variable(xp.zeros(shape, dtype)) if g is None else g
            for g, (shape, dtype) in zip(grad_outputs, self._like)))


class TimeMajorItems(chainer.FunctionNode):
    """:class:`TimeMajorSegments` of items each an input of its own (a
    recording item by item): their rows joined, in time-major order, and
    each's gradient its rows of the output's, at the lengths recorded."""

    def forward(self, inputs):
        self._sizes = [len(x) for x in inputs]
        self._order = segments_ops.time_major_order(self._sizes)
        return numpy.concatenate(inputs)[self._order],

    def backward(self, indexes, grad_outputs):
        g = _rows_in_place(self._order, grad_outputs[0])
        parts = chainer.functions.split_axis(
            g, numpy.cumsum(self._sizes)[:-1].tolist(), 0, force_tuple=True)
        return tuple(parts[i] for i in indexes)


@lowering(TimeMajorItems)
def lower_time_major_items(node, ctx):
    """Orders the items' rows time-major when run (no lengths rule: the
    items' lengths stay in the key)."""
    def run(*items):
        return numpy.concatenate(items)[
            segments_ops.time_major_order([len(x) for x in items])]

    def grad(xs, ys, gys, wanted):
        sizes = [len(x) for x in xs]
        g = _put_back(segments_ops.time_major_order(sizes), gys[0])
        return tuple(part if w else None for part, w in zip(
            segments_ops.items_of(g, sizes), wanted))

    return Kernel(run, {}, grad=GradRule(grad, inputs=tuple(
        range(len(ctx.in_shapes)))), fresh=True)


class ReduceSegments(chainer.FunctionNode):
    """``F.stack([F.max(y, axis=0) for y in ys])`` (or ``F.sum``,
    ``F.mean``, ``F.average``, ``F.min``) of the parts of joined items
    (``frontend.joining.Segments``: an N-step link's outputs over
    sentences joined): the inputs are the rows of all the items and their
    lengths; each item's reduction over its rows, as the reduction of
    that item gives it, values and gradient, at any number and lengths
    of the items (max or mean pooling over the words)."""

    def __init__(self, kind):
        self.kind = kind

    def forward(self, inputs):
        extreme = self.kind in segments_ops.EXTREMES
        self.retain_inputs((0, 1) if extreme else (1,))
        if extreme:
            self.retain_outputs((0,))
        rows, lengths = inputs
        return segments_ops.reduced_rows(rows, lengths, self.kind),

    def backward(self, indexes, grad_outputs):
        kept = [v.array for v in self.get_retained_inputs()]
        rows, y = None, None
        if self.kind in segments_ops.EXTREMES:
            rows, y = kept[0], self.get_retained_outputs()[0].array
        return chainer.Variable(segments_ops.reduced_rows_grad(
            rows, kept[-1], self.kind, y, grad_outputs[0].array)), None


@lowering(ReduceSegments)
def lower_reduce_segments(node, ctx):
    """Reduces each item's rows at their lengths when run: the output has
    a row per item."""
    kind = node.kind

    def run(rows, item_lengths):
        return segments_ops.reduced_rows(rows, item_lengths, kind)

    def grad(xs, ys, gys, wanted):
        return (segments_ops.reduced_rows_grad(xs[0], xs[1], kind, ys[0],
                                               gys[0])
                if wanted[0] else None, None)

    def lengths(rows):
        # (a row per item, however many rows the items have)
        return Follow((rows[1],)) if all(
            r is None or _on_the_first_axis(r) for r in rows) else None
    extreme = kind in segments_ops.EXTREMES
    return Kernel(run, {'kind': kind}, grad=GradRule(
        grad, inputs=(0, 1) if extreme else (1,),
        outputs=(0,) if extreme else ()),
        fresh=True, lengths=lengths, onnx=segments_ops.reduced_to_onnx(
            ctx.in_dtypes[1], kind, ctx.in_dtypes[0],
            len(ctx.in_shapes[0])))


def _on_the_first_axis(rows):
    """Are ``rows`` on the first axis alone, each item's own (not the
    longest's)?"""
    return not (rows.axis or rows.widest or rows.also)


def items_padded(xs, length, padding):
    """``F.pad_sequence``'s array: the arrays ``xs``, alike but for their
    first axis, side by side, each padded with ``padding`` to ``length``
    or, where it is ``None``, to the longest."""
    width = max(len(x) for x in xs) if length is None else length
    y = cuda.get_array_module(xs[0]).full(
        (len(xs), width) + xs[0].shape[1:], padding, xs[0].dtype)
    for i, x in enumerate(xs):
        y[i, :len(x)] = x
    return y


def onnx_items_padded(b, xs, ndim, axis, length=None, padding=None,
                      dtype=None, out=None):
    """``(padded, lengths)``: the ONNX items ``xs`` (of ``ndim`` axes)
    padded on their first axis to ``length``, or to the longest, with
    ``padding`` (zeros for ``None``), and stacked on a new ``axis``; the
    items' lengths (1-d int64 names, read from their shapes)."""
    lengths = [b.op('Slice', [b.op('Shape', [x])[0], b.int64s([0]),
                              b.int64s([1])])[0] for x in xs]
    longest = b.int64s([length]) if length is not None else b.op(
        'ReduceMax', [b.op('Concat', lengths, axis=0)[0]], keepdims=1)[0]
    value = [] if padding is None else [onnx_scalar(b, padding, dtype)]
    columns = [b.op('Unsqueeze', [b.op('Pad', [x, b.op('Concat', [
        b.int64s([0] * ndim), b.op('Sub', [longest, n])[0],
        b.int64s([0] * (ndim - 1))], axis=0)[0]] + value)[0],
        b.int64s([axis])])[0] for x, n in zip(xs, lengths)]
    return b.op('Concat', columns, out, axis=axis)[0], lengths
