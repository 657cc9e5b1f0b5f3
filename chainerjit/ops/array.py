"""Lowerings of chainer.functions.array.

Most array ops only move data around; what depends on the recorded
shapes alone (output shapes, axis permutations, index tuples) is computed
once, at lowering time.
"""

import chainer
from chainer.functions.array import broadcast
from chainer.functions.array import cast
from chainer.functions.array import concat
from chainer.functions.array import copy
from chainer.functions.array import depth2space
from chainer.functions.array import dstack
from chainer.functions.array import expand_dims
from chainer.functions.array import flip
from chainer.functions.array import fliplr
from chainer.functions.array import flipud
from chainer.functions.array import get_item
from chainer.functions.array import hstack
from chainer.functions.array import moveaxis
from chainer.functions.array import pad
from chainer.functions.array import repeat
from chainer.functions.array import reshape
from chainer.functions.array import rollaxis
from chainer.functions.array import select_item
from chainer.functions.array import separate
from chainer.functions.array import space2depth
from chainer.functions.array import split_axis
from chainer.functions.array import squeeze
from chainer.functions.array import stack
from chainer.functions.array import swapaxes
from chainer.functions.array import tile
from chainer.functions.array import transpose
from chainer.functions.array import vstack
from chainer.functions.array import where
from chainer import utils
import numpy

from chainerjit.ops import Kernel
from chainerjit.ops import lowering


def _normalize_axis(axis, ndim):
    return axis + ndim if axis < 0 else axis


def _axis_index(axis, ndim, index):
    """An index tuple applying ``index`` along ``axis`` only."""
    return (slice(None),) * _normalize_axis(axis, ndim) + (index,)


# --- views whose output shape is known ---------------------------------------

@lowering(reshape.Reshape, expand_dims.ExpandDims, squeeze.Squeeze)
def lower_reshape(node, ctx):
    # ``expand_dims`` and ``squeeze`` are reshapes to the output shape.
    shape = ctx.out_shapes[0]
    return Kernel(lambda x: x.reshape(shape), {'shape': shape})


@lowering(broadcast.BroadcastTo)
def lower_broadcast_to(node, ctx):
    broadcast_to = ctx.xp.broadcast_to
    shape = ctx.out_shapes[0]
    return Kernel(lambda x: broadcast_to(x, shape), {'shape': shape})


@lowering(broadcast.Broadcast)
def lower_broadcast(node, ctx):
    broadcast_arrays = ctx.xp.broadcast_arrays
    return Kernel(lambda *xs: tuple(broadcast_arrays(*xs)),
                  {'shape': ctx.out_shapes[0]}, multi=True)


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


def _permutation(node, ndim):
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
    axes = _permutation(node, len(ctx.in_shapes[0]))
    return Kernel(lambda x: x.transpose(axes), {'axes': axes})


# --- reversals ---------------------------------------------------------------

@lowering(flip.Flip, fliplr.FlipLR, flipud.FlipUD)
def lower_flip(node, ctx):
    if isinstance(node, flip.Flip):
        axis = node.axis
    else:
        axis = 1 if isinstance(node, fliplr.FlipLR) else 0
    index = _axis_index(axis, len(ctx.in_shapes[0]), slice(None, None, -1))
    return Kernel(lambda x: x[index], {'axis': axis})


# --- indexing ----------------------------------------------------------------

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


@lowering(get_item.GetItem)
def lower_get_item(node, ctx):
    if any(isinstance(s, chainer.Variable) for s in node.slices):
        return None
    slices = tuple(_on_device(s, ctx.xp) for s in node.slices)
    return Kernel(lambda x: utils.force_array(x[slices]),
                  {'slices': '[%s]' % ', '.join(
                      _format_index(s) for s in node.slices)})


@lowering(select_item.SelectItem)
def lower_select_item(node, ctx):
    rows = ctx.xp.arange(ctx.in_shapes[1][0])
    return Kernel(lambda x, t: x[rows, t])


@lowering(where.Where)
def lower_where(node, ctx):
    xp_where = ctx.xp.where
    condition = node.condition
    return Kernel(lambda x, y: xp_where(condition, x, y))


# --- joining and splitting ---------------------------------------------------

@lowering(concat.Concat)
def lower_concat(node, ctx):
    concatenate = ctx.xp.concatenate
    axis = node.axis
    return Kernel(lambda *xs: concatenate(xs, axis), {'axis': axis})


@lowering(stack.Stack)
def lower_stack(node, ctx):
    xp_stack = ctx.xp.stack
    axis = node.axis
    return Kernel(lambda *xs: xp_stack(xs, axis=axis), {'axis': axis})


@lowering(hstack.Hstack, vstack.Vstack, dstack.Dstack)
def lower_hvdstack(node, ctx):
    fn = getattr(ctx.xp, type(node).__name__.lower())
    return Kernel(lambda *xs: fn(xs))


def _split_points(node, size):
    """The boundaries ``numpy.split`` cuts an axis of ``size`` at."""
    if node.indices is not None:
        return [0] + list(node.indices) + [size]
    step = size // node.sections
    return [i * step for i in range(node.sections + 1)]


@lowering(split_axis.SplitAxis)
def lower_split_axis(node, ctx):
    shape = ctx.in_shapes[0]
    axis = _normalize_axis(node.axis, len(shape))
    points = _split_points(node, shape[axis])
    indexes = [_axis_index(axis, len(shape), slice(start, stop))
               for start, stop in zip(points, points[1:])]
    return Kernel(lambda x: tuple(x[index] for index in indexes),
                  {'axis': node.axis}, multi=True)


@lowering(separate.Separate)
def lower_separate(node, ctx):
    shape = ctx.in_shapes[0]
    axis = _normalize_axis(node.axis, len(shape))
    indexes = [_axis_index(axis, len(shape), i) for i in range(shape[axis])]
    return Kernel(lambda x: tuple(x[index] for index in indexes),
                  {'axis': node.axis}, multi=True)


# --- repetition and padding --------------------------------------------------

@lowering(tile.Tile)
def lower_tile(node, ctx):
    xp_tile = ctx.xp.tile
    reps = node.reps
    return Kernel(lambda x: xp_tile(x, reps), {'reps': reps})


@lowering(repeat.Repeat)
def lower_repeat(node, ctx):
    xp_repeat = ctx.xp.repeat
    repeats = node.repeats
    if len(repeats) == 1:
        repeats = repeats[0]
    axis = node.axis
    return Kernel(lambda x: xp_repeat(x, repeats, axis),
                  {'repeats': node.repeats, 'axis': axis})


@lowering(pad.Pad)
def lower_pad(node, ctx):
    value = node.keywords.get('constant_values', 0)
    if (node.mode != 'constant' or set(node.keywords) - {'constant_values'}
            or not numpy.isscalar(value)):
        return None
    xp = ctx.xp
    shape, dtype = ctx.out_shapes[0], ctx.out_dtypes[0]
    widths = numpy.broadcast_to(node.pad_width, (len(shape), 2))
    inner = tuple(slice(int(before), int(before) + n)
                  for (before, _), n in zip(widths, ctx.in_shapes[0]))

    def fn(x):
        y = xp.full(shape, value, dtype)
        y[inner] = x
        return y
    return Kernel(fn, {'mode': 'constant', 'value': value})


# --- element types and devices -----------------------------------------------

@lowering(cast.Cast)
def lower_cast(node, ctx):
    dtype = numpy.dtype(node.type)
    return Kernel(lambda x: x.astype(dtype, copy=False), {'dtype': dtype})


@lowering(copy.Copy)
def lower_copy(node, ctx):
    if node._in_device != node.out_device:
        return None
    return Kernel(node.out_device.send)


# --- pixel shuffles ----------------------------------------------------------

@lowering(space2depth.Space2Depth)
def lower_space2depth(node, ctx):
    r = node.r
    n, c, a, b = ctx.in_shapes[0]
    split = (n, c, a // r, r, b // r, r)
    shape = ctx.out_shapes[0]
    return Kernel(
        lambda x: x.reshape(split).transpose(0, 3, 5, 1, 2, 4).reshape(shape),
        {'r': r})


@lowering(depth2space.Depth2Space)
def lower_depth2space(node, ctx):
    r = node.r
    n, c, a, b = ctx.in_shapes[0]
    c //= r ** 2
    split = (n, r, r, c, a, b)
    shape = ctx.out_shapes[0]
    return Kernel(
        lambda x: x.reshape(split).transpose(0, 3, 4, 1, 5, 2).reshape(shape),
        {'r': r})
