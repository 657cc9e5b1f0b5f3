"""Kernels over the rows of joined items: each item's rows in order, one
item after another, and the items' lengths (``frontend.joining``).

What the forward does to each item of a joined list on its own, these do
to the rows of all at once: ``x[::-1]`` (:func:`reversed_rows`),
``F.concat([bos, y, eos], axis=0)`` of fixed rows around each item
(:func:`framed_rows`) and ``x[1:]``, ``x[:-1]`` (:func:`sliced_rows`);
the rows of all in time-major order (:func:`time_major_order`).
Each has a ``Kernel.lengths`` rule for any number of items and any
lengths, and an ONNX form. They run on NumPy arrays of
the call's items, which no gradient reaches. ``F.pad_sequence`` of the
rows of joined items (:func:`padded_rows`), an N-step link's outputs,
is ``ops.array.PadSegments``'s, with a gradient.
"""

import chainer
import numpy

from chainerjit.ops import Follow
from chainerjit.ops import Rows


def reversed_rows(rows, lengths):
    """The rows of each item (``lengths`` of them, one item after another)
    in reverse order."""
    stops = numpy.cumsum(lengths)
    last_and_first = numpy.repeat(stops - 1 + stops - lengths, lengths)
    return rows[last_and_first - numpy.arange(len(rows))]


def framed_rows(rows, lengths, before, after):
    """The rows ``before``, then the rows of each item (``lengths`` of
    them, one item after another), then the rows ``after``, for every
    item: ``F.concat([before, x, after], axis=0)`` of each item ``x``,
    joined."""
    n_before, n_extra = len(before), len(before) + len(after)
    item = numpy.repeat(numpy.arange(len(lengths)), lengths)
    out = numpy.empty((len(rows) + n_extra * len(lengths),) + rows.shape[1:],
                      rows.dtype)
    out[numpy.arange(len(rows)) + item * n_extra + n_before] = rows
    starts = numpy.cumsum(lengths + n_extra) - lengths - n_extra
    for k, row in enumerate(before):
        out[starts + k] = row
    for k, row in enumerate(after):
        out[starts + n_before + lengths + k] = row
    return out


def sliced_rows(rows, lengths, start, end):
    """The rows of each item (``lengths`` of them, one item after another)
    but its first ``start`` and its last ``end``: ``x[start:len(x) - end]``
    of each item ``x``, joined (none of an item shorter than both)."""
    stops = numpy.cumsum(lengths)
    at = numpy.arange(len(rows)) - numpy.repeat(stops - lengths, lengths)
    return rows[(at >= start) & (at < numpy.repeat(lengths, lengths) - end)]


def items_of(rows, lengths):
    """The items ``rows`` holds one after another, ``lengths`` rows
    each."""
    return numpy.split(rows, numpy.cumsum(lengths)[:-1])


def time_major_order(lengths):
    """Where each row of ``F.concat(F.transpose_sequence(items), axis=0)``
    is among the rows of the ``items`` (``lengths`` rows each, one item
    after another), sorted by decreasing length as
    ``F.transpose_sequence`` wants them: every item's first row, then
    every second row, and so on."""
    lengths = numpy.asarray(lengths)
    if numpy.any(lengths[1:] > lengths[:-1]):
        raise ValueError('F.transpose_sequence takes sequences sorted by '
                         'decreasing length: %r' % lengths.tolist())
    item, place = _item_and_place(lengths, int(lengths.sum()))
    return numpy.lexsort((item, place))


def _item_and_place(lengths, n_rows):
    """For each of ``n_rows`` rows of items ``lengths`` long, one item
    after another: its item, and its place in that item."""
    lengths = numpy.asarray(lengths)
    item = numpy.repeat(numpy.arange(len(lengths)), lengths)
    starts = numpy.cumsum(lengths) - lengths
    return item, numpy.arange(n_rows) - starts[item]


def padded_rows(rows, lengths, length, padding):
    """``F.pad_sequence`` of the items whose rows ``rows`` holds
    (``lengths`` of them, one item after another): ``(items, length or
    the longest, ...)``, each item's rows first, then ``padding``."""
    xp = chainer.backend.get_array_module(rows)
    lengths = chainer.backend.CpuDevice().send(lengths)
    width = int(numpy.max(lengths, initial=0)) if length is None \
        else length
    out = xp.full((len(lengths), width) + rows.shape[1:], padding,
                  rows.dtype)
    item, place = _item_and_place(lengths, len(rows))
    out[item, place] = rows
    return out


def rows_of_padded(padded, lengths):
    """The rows of the items ``padded`` holds (:func:`padded_rows`), one
    item after another: the gradient of their padding."""
    lengths = chainer.backend.CpuDevice().send(lengths)
    item, place = _item_and_place(lengths, int(numpy.sum(lengths)))
    return padded[item, place]


#: What :func:`reduced_rows` computes of each item's rows: a reduction,
#: as Chainer's ``Sum``, ``Mean``, ``Max`` and ``Min`` compute them; or
#: one row of it (a *pick*: ``'first'``, ``'last'``, ``'row 2'``, ``'row
#: -2'``, for ``y[0]``, ``y[-1]``, ``y[2]``, ``y[-2]``).
REDUCTIONS = {'sum': lambda x: x.sum(axis=0), 'mean': lambda x: x.mean(axis=0),
              'max': lambda x: x.max(axis=0), 'min': lambda x: x.min(axis=0)}


def picked_row(kind):
    """The row of each item a pick ``kind`` takes (``0`` for ``'first'``,
    ``-1`` for ``'last'``, ``k`` for ``'row k'``), or ``None`` for a
    reduction."""
    if kind in ('first', 'last'):
        return 0 if kind == 'first' else -1
    return int(kind[4:]) if kind.startswith('row ') else None


def pick_kind(k):
    """The pick kind taking row ``k`` of each item (:func:`picked_row`)."""
    return {0: 'first', -1: 'last'}.get(k, 'row %d' % k)


def _reduction(kind):
    k = picked_row(kind)
    return REDUCTIONS[kind] if k is None else lambda x: x[k]


def reduced_rows(rows, lengths, kind):
    """The reduction ``kind`` (:data:`REDUCTIONS`) of each item's rows
    (``lengths`` of them, one item after another), one item at a time as
    ``F.max(x, axis=0)`` of the item gives it (the same sums): ``(items,
    ...)``."""
    xp = chainer.backend.get_array_module(rows)
    lengths = chainer.backend.CpuDevice().send(lengths)
    fn = _reduction(kind)  # (a pick beyond an item raises IndexError)
    found = [fn(rows[stop - n:stop]) for stop, n in
             zip(numpy.cumsum(lengths).tolist(), lengths.tolist())]
    return xp.stack(found) if found else xp.zeros(
        (0,) + rows.shape[1:], rows.dtype)


#: The reductions whose gradient reads the rows and the reduction: the
#: rows that hold it get the gradient.
EXTREMES = frozenset(['max', 'min'])


def reduced_rows_grad(rows, lengths, kind, y, gy):
    """The gradient of :func:`reduced_rows` for its rows, as Chainer's
    reductions give it to each item: the item's ``gy`` at every row
    (times ``1 / len`` in ``gy``'s dtype for a mean; where the row holds
    the maximum, or minimum, for those of :data:`EXTREMES`, which alone
    read ``rows`` and ``y``)."""
    lengths = chainer.backend.CpuDevice().send(lengths)
    if picked_row(kind) is not None:
        return _picked_grad(lengths, kind, gy)
    item, _ = _item_and_place(lengths, int(numpy.sum(lengths)))
    if kind == 'mean':
        gy = gy * numpy.asarray(
            [gy.dtype.type(1.0 / n) for n in lengths.tolist()],
            gy.dtype).reshape((-1,) + (1,) * (gy.ndim - 1))
    g = gy[item]
    if kind in EXTREMES:
        g = g * (rows == y[item])
    return g


def _picked_grad(lengths, kind, gy):
    """The gradient of the rows each item's picked row was taken from:
    ``gy``'s row of the item there, zeros elsewhere."""
    xp = chainer.backend.get_array_module(gy)
    g = xp.zeros((int(numpy.sum(lengths)),) + gy.shape[1:], gy.dtype)
    g[picked_rows(lengths, kind)] = gy
    return g


def picked_rows(lengths, kind):
    """Where the row each item's pick ``kind`` takes is among the rows of
    all (:func:`picked_row`)."""
    stops, k = numpy.cumsum(lengths), picked_row(kind)
    return stops - lengths + k if k >= 0 else stops + k


def same_rows_rule(rows):
    """The ``Kernel.lengths`` rule of :func:`reversed_rows` (and of the
    rows in time-major order): its rows are its input's, at any lengths
    and number of items."""
    if any(r is not None and r.axis for r in rows):
        return None
    return Follow((rows[0],))


def rows_per_item_rule(recorded_rows, recorded_items, change):
    """The ``Kernel.lengths`` rule of a kernel making each item (recorded
    with ``recorded_rows`` rows of ``recorded_items`` items) ``change``
    rows longer (:func:`framed_rows`; shorter where negative,
    :func:`sliced_rows` of items of no fewer rows than it cuts): its rows
    are its input's and ``change`` for each item, at any lengths and
    number of items."""
    def lengths(rows):
        if any(r is not None for r in rows[2:]) or \
                any(r is not None and r.axis for r in rows[:2]):
            return None
        items_rows, counts = rows[:2]
        if counts is None:
            changed = change * recorded_items
        else:
            changed = Rows(counts.parts * abs(change))
            changed = changed if change > 0 else changed.negated()
        return Follow(((recorded_rows if items_rows is None
                        else items_rows) + changed,))
    return lengths


def _rows_and_items(b, stops, n_rows):
    """ONNX: ``(row, item)``, the index of each of ``n_rows`` rows (an
    int64 name of shape ``[1]``) and of the item it is in, the items
    ending at ``stops``."""
    row = b.single('Range', b.int64s(0), b.single('Squeeze', n_rows),
                   b.int64s(1))
    ended = b.single('GreaterOrEqual',
                     b.single('Unsqueeze', row, b.int64s([1])),
                     b.single('Unsqueeze', stops, b.int64s([0])))
    return row, b.single('ReduceSum', b.cast(ended, numpy.bool_, numpy.int64),
                         b.int64s([1]), keepdims=0)


def _cumsum(b, x):
    return b.single('CumSum', x, b.constant(numpy.asarray(0, numpy.int64)))


def _clipped(b, x, low, high):
    return b.single('Clip', x, b.int64s(low), high)


def reversed_to_onnx(lengths_dtype):
    """The ONNX form of :func:`reversed_rows` (lengths of
    ``lengths_dtype``)."""
    def convert(b, ins, outs):
        lengths = b.cast(ins[1], lengths_dtype, numpy.int64)
        stops = _cumsum(b, lengths)
        row, item = _rows_and_items(
            b, stops, b.single('Shape', ins[0], start=0, end=1))
        last_and_first = b.single('Sub', b.single('Add', stops, stops),
                                  b.single('Add', lengths, b.int64s(1)))
        index = b.single('Sub', b.single('Gather', last_and_first, item,
                                         axis=0), row)
        b.op('Gather', [ins[0], index], outs, axis=0)
    return convert


def sliced_to_onnx(lengths_dtype, start, end):
    """The ONNX form of :func:`sliced_rows` (lengths of ``lengths_dtype``,
    ``start`` and ``end`` rows cut from each item)."""
    def convert(b, ins, outs):
        lengths = b.cast(ins[1], lengths_dtype, numpy.int64)
        stops = _cumsum(b, lengths)
        row, item = _rows_and_items(
            b, stops, b.single('Shape', ins[0], start=0, end=1))
        at = b.single('Sub', row, b.single(
            'Gather', b.single('Sub', stops, lengths), item, axis=0))
        length = b.single('Gather', lengths, item, axis=0)
        kept = b.single('And', b.single(
            'GreaterOrEqual', at, b.int64s(start)), b.single(
            'Less', at, b.single('Sub', length, b.int64s(end))))
        b.op('Compress', [ins[0], kept], outs, axis=0)
    return convert


def framed_to_onnx(lengths_dtype, n_before, n_after):
    """The ONNX form of :func:`framed_rows` (lengths of
    ``lengths_dtype``, ``n_before`` and ``n_after`` fixed rows)."""
    n_extra = n_before + n_after

    def convert(b, ins, outs):
        rows, before, after = ins[0], ins[2], ins[3]
        lengths = b.cast(ins[1], lengths_dtype, numpy.int64)
        framed = b.single('Add', lengths, b.int64s(n_extra))
        stops = _cumsum(b, framed)
        row, item = _rows_and_items(
            b, stops, b.single('ReduceSum', framed, keepdims=1))
        at = b.single('Sub', row, b.single(
            'Gather', b.single('Sub', stops, framed), item, axis=0))
        length = b.single('Gather', lengths, item, axis=0)
        source = b.single('Sub', row, b.single('Add', b.single(
            'Mul', item, b.int64s(n_extra)), b.int64s(n_before)))
        last = b.single('Sub', b.single('Squeeze', b.single(
            'Shape', rows, start=0, end=1)), b.int64s(1))
        taken = b.single('Gather', rows, _clipped(b, source, 0, last),
                         axis=0)
        taken = _fixed_rows_where(b, taken, before, at, n_before)
        after_item = b.single('Sub', at, b.single(
            'Add', length, b.int64s(n_before)))
        taken = _fixed_rows_where(b, taken, after, after_item, n_after)
        b.op('Identity', [taken], outs)
    return convert


def padded_to_onnx(lengths_dtype, length, padding):
    """The ONNX form of :func:`padded_rows` (lengths of
    ``lengths_dtype``, ``padding(b)`` the name of the padding value)."""
    def convert(b, ins, outs):
        b.op('Identity', [onnx_padded(b, ins[0], ins[1], lengths_dtype,
                                      length, padding(b))], outs)
    return convert


def onnx_padded(b, rows, item_lengths, lengths_dtype, length, padding):
    """ONNX: the name of the rows of each item (``item_lengths`` of them)
    padded with ``padding`` (a name) to ``length`` or to the longest:
    each item's rows gathered at its start plus each place, where the
    place is inside the item."""
    lengths = b.cast(item_lengths, lengths_dtype, numpy.int64)
    starts = b.single('Sub', _cumsum(b, lengths), lengths)
    width = b.int64s(length) if length is not None else b.single(
        'ReduceMax', b.single('Concat', lengths, b.int64s([0]), axis=0),
        keepdims=0)
    place = b.single('Unsqueeze', b.single(
        'Range', b.int64s(0), width, b.int64s(1)), b.int64s([0]))
    inside = b.single('Less', place, b.single(
        'Unsqueeze', lengths, b.int64s([1])))  # (items, width)
    last = b.single('Sub', b.single('Squeeze', b.single(
        'Shape', rows, start=0, end=1)), b.int64s(1))
    at = b.single('Add', b.single('Unsqueeze', starts, b.int64s([1])),
                  place)
    taken = b.single('Gather', rows, _clipped(
        b, at, 0, b.single('Max', last, b.int64s(0))), axis=0)
    return b.single('Where', _expanded(b, inside, rows), taken, padding)


def reduced_to_onnx(lengths_dtype, kind, dtype, rank):
    """The ONNX form of :func:`reduced_rows` (lengths of
    ``lengths_dtype``, rows of ``dtype`` and ``rank``): the items padded
    with what the reduction ignores, reduced over their rows (a mean
    divided by each item's length); or the rows picked. ``None`` for a
    pick of another row than the first or the last: an item too short for
    it would be an IndexError eagerly, and ONNX has no way to raise one
    (its ``Gather`` would take another item's row)."""
    if picked_row(kind) not in (None, 0, -1):
        return None
    fill = {'max': -numpy.inf, 'min': numpy.inf}.get(kind, 0)

    def convert(b, ins, outs):
        if picked_row(kind) is not None:
            item_lengths = b.cast(ins[1], lengths_dtype, numpy.int64)
            stops = _cumsum(b, item_lengths)
            at = b.single('Sub', stops, item_lengths if kind == 'first'
                          else b.int64s([1]))
            b.op('Gather', [ins[0], at], outs, axis=0)
            return
        padded = onnx_padded(b, ins[0], ins[1], lengths_dtype, None,
                             b.constant(numpy.asarray(fill, dtype)))
        if kind in ('max', 'min'):
            b.op('ReduceMax' if kind == 'max' else 'ReduceMin', [padded],
                 outs, axes=[1], keepdims=0)
            return
        if kind == 'sum':
            b.op('ReduceSum', [padded, b.int64s([1])], outs, keepdims=0)
            return
        total = b.single('ReduceSum', padded, b.int64s([1]), keepdims=0)
        counts = b.single('Unsqueeze', b.cast(ins[1], lengths_dtype, dtype),
                          b.int64s(list(range(1, rank))))
        b.op('Div', [total, counts], outs)
    return convert


def _fixed_rows_where(b, taken, fixed, at, n):
    """``taken`` with the row ``fixed[at]`` where ``0 <= at < n``."""
    if not n:
        return taken
    inside = b.single('And', b.single('GreaterOrEqual', at, b.int64s(0)),
                      b.single('Less', at, b.int64s(n)))
    row = b.single('Gather', fixed, _clipped(b, at, 0, b.int64s(n - 1)),
                   axis=0)
    return b.single('Where', _expanded(b, inside, fixed), row, taken)


def _expanded(b, mask, like):
    """``mask`` (one bool per row) with an axis of size 1 for each axis
    after the first of the rows ``like``."""
    rank = b.single('Shape', b.single('Shape', like))
    ones = b.single('ConstantOfShape', b.single('Sub', rank, b.int64s([1])),
                    value=_one_int64())
    return b.single('Reshape', mask, b.single(
        'Concat', b.single('Shape', mask), ones, axis=0))


def _one_int64():
    import onnx.numpy_helper
    return onnx.numpy_helper.from_array(numpy.ones(1, numpy.int64))
