"""Lists consumed whole: one array at the call boundary.

A list argument of token arrays is, as Chainer's examples write it, often
read by one op that takes all its items at once: ``concat_examples(xs,
padding=-1)`` (``F.pad_sequence``) pads them into a block, ``F.concat(ys,
axis=0)`` joins labels of one row each, ``F.stack(xs)`` stacks them.
Recorded item by item, such a list makes the number of its items part of
the key: each new batch size compiles again.

Where a recording shows that every item of a list argument is read by
that one op and by nothing else (not its length in the forward's code,
but into an array of all of them, nor the block's shape), the jitted
function *joins* the list from then on: each call makes the op's array
itself (:meth:`Join.joined`, as the op would) before the key is made, and
the program takes that array as an argument (``xs: i32[B,W]``), whose
batch and width the VM's program takes at any size (``runtime.batch``).
The forward still gets a list: its items are taken back from the joined
array by recorded indexing, which the recording then finds read by the
op alone (:func:`take_joins`); the op's value is the joined argument, and
the indexing goes. ``len(xs)`` of that list is the joined array's first
axis, a ``lengths.Length``; an array of its items' lengths
(``xp.array([len(x) for x in xs])``) is the array of them the call passes
with a padded list (``Join.lengths``).

Items of any lengths joined by ``F.concat(xs, axis=0)`` are passed as
their rows and lengths (``xs[0]: i32[W], xs[1]: i64[B]``): their offsets
(``numpy.cumsum(x_len[:-1])``) are made from the lengths
(``lengths.offsets_array``), and ``F.split_axis`` at them gives
:class:`Segments`, which an N-step link takes whole (the recording
patches apply ``ops.nstep.PackedNStepRNN``), as Chainer's examples'
``sequence_embed`` feeds ``L.NStepLSTM``. Lists whose items have the same
lengths share a width (a tag per word). Items embedded each on their own
(``[self.embed(x) for x in xs]``) into such a link are joined so too: each
:data:`ROW_WISE` function applied to every item is applied once to the
rows of all (:func:`applied_to_items`), and the link takes those rows;
a list joined by ``F.concat(ts, axis=0)`` whose items are as long as
theirs, item by item (a tagger's labels), is joined as segments of their
width.

Only NumPy arrays are joined (no gradient reaches the items), lists whose
joined arrays all have one first axis (the number of items), a width for
each lengths of the items of lists padded, and another for those of lists
cut at their offsets (``W``, ``W2``: a source and a target sentence). A
single item keeps its batch of
one in the key, as a batch of one does (``runtime.batch``), at any
width.
"""

import collections
import functools
import re

import chainer
from chainer.functions.array import get_item
from chainer.functions.array import split_axis as split_axis_module
from chainer.functions.math import average
from chainer.functions.math import minmax
from chainer.functions.math import sum as sum_module
import numpy

from chainerjit import errors
from chainerjit import ops
from chainerjit.frontend import _keys
from chainerjit.frontend import lengths
from chainerjit.frontend import loop_analysis
from chainerjit.frontend import packing
from chainerjit.frontend import sorting
from chainerjit.frontend import traced
from chainerjit.ops import array as array_ops
from chainerjit.ops import segments as segments_ops

#: Lists with fewer items are not looked at for joining.
MIN_ITEMS = 2

#: Why a joined recording does not take its joins: a random function
#: drew for each item, which the recording that found them did not show
#: (it was in test mode). The next call of that mode finds them again.
DRAWS_UNSEEN = 'a random function draws for each item of a joined list, ' \
    'which the recording that joined it did not show'

#: Why a joined recording does not take its joins: the call's items came
#: in the order the forward sorts them by ``numpy.argsort``, in which a
#: list it did not reorder is read alike. The next call of that mode
#: finds them again.
ORDER_UNSEEN = 'the items of a list the forward orders by numpy.argsort ' \
    'came sorted already'

#: The reasons after which the next call of the mode finds joins again.
UNSEEN = (DRAWS_UNSEEN, ORDER_UNSEEN)


class Join(collections.namedtuple(
        'Join', 'path kind padding lengths width draws order',
        defaults=(False, 0, False, None))):
    """How a list argument is joined: ``path`` as ``packing.list_paths``
    gives it; ``kind`` ``'pad'`` (``F.pad_sequence`` to the longest item,
    with ``padding``), ``'concat'`` (``F.concat`` on axis 0 of items of
    one row each), ``'segments'`` (``F.concat`` on axis 0 of items of any
    lengths, which the forward may cut again at their offsets:
    :class:`Segments`) or ``'stack'`` (``F.stack`` on axis 0).
    ``lengths``: a padded list whose items' lengths the forward also made
    an array of (``xp.array([len(x) for x in xs])``, a ``python.sizes``
    node), and segments: the call passes ``(joined array, lengths)``.
    ``width``: of segments, which of the call's widths their rows are
    (lists of items of the same lengths share one). ``draws``: a random
    function (dropout) applied to each item on its own may draw for the
    rows of all at once (:func:`_draws_as_one`; ``None``: not seen).
    ``order``: ``(path, descending, how)`` of a list the forward sorts by
    the lengths of the items of the list at ``path`` (itself, or one
    sorted with it), by ``sorted`` (``how`` ``None``) or by the indexes
    ``numpy.argsort`` gives (``sorting.Argsort``): a call joins its items
    in that order (:func:`sorted_order`, ``frontend.sorting``)."""

    __slots__ = ()

    def takes(self, items):
        """Can a call's list ``items`` be joined so?"""
        if type(items) is not (list if self.path[2] == 'list' else tuple) \
                or not items or \
                any(type(a) is not numpy.ndarray for a in items):
            return False
        first = items[0]
        if first.ndim == 0 or any(a.dtype != first.dtype for a in items):
            return False
        if self.kind == 'stack':
            return all(a.shape == first.shape for a in items)
        return all(a.ndim == first.ndim and a.shape[1:] == first.shape[1:]
                   and (self.kind != 'concat' or a.shape[0] == 1) and
                   (self.kind != 'segments' or a.shape[0] >= 1)
                   for a in items)

    def joined(self, items):
        """The array the op makes of ``items`` (with ``lengths``, and the
        items' lengths)."""
        if self.kind == 'pad':
            block = ops.array.items_padded(items, None, self.padding)
            return (block, numpy.array([len(a) for a in items])) \
                if self.lengths else block
        if self.kind == 'segments':
            return (numpy.concatenate(items),
                    numpy.array([len(a) for a in items]))
        if self.kind == 'concat':
            return numpy.concatenate(items)
        return numpy.stack(items)

    def items(self, joined, originals):
        """The items of the list, taken from ``joined`` (a traced array, or
        a pair of them) by recorded indexing; ``originals`` are the
        caller's."""
        if self.kind == 'pad':
            return [_block(joined)[k, :len(a)]
                    for k, a in enumerate(originals)]
        if self.kind == 'segments':
            stops = numpy.cumsum([len(a) for a in originals]).tolist()
            return [joined[0][stop - len(a):stop]
                    for stop, a in zip(stops, originals)]
        if self.kind == 'concat':
            return [joined[k:k + 1] for k in range(len(originals))]
        return [joined[k] for k in range(len(originals))]

    def matches(self, node):
        """Is ``node`` the op this list is joined for?"""
        found = _join_of(self.path, node)
        return found is not None and found == self._replace(
            kind='concat' if self.kind == 'segments' else self.kind,
            lengths=False, width=0, draws=False, order=None)


def sorted_order(j, args, kwargs):
    """The positions of the items of the list ``j`` joins in the order a
    call joins them: of a sorted list (``j.order``), sorted by the lengths
    of the items of the list it is sorted by, in its direction, stably as
    Python's ``sorted``, or as ``numpy.argsort`` orders them
    (``sorting.Argsort``) (none, ``()``, where that list is not there);
    else ``None``."""
    if j.order is None:
        return None
    path, descending, how = j.order
    by = packing.argument_at(args, kwargs, path)
    if type(by) not in (list, tuple) or not all(
            isinstance(a, numpy.ndarray) and a.ndim for a in by):
        return ()
    if how is not None:
        return how.order([len(a) for a in by])
    return sorted(range(len(by)), key=lambda i: len(by[i]),
                  reverse=descending)


def _unsorted(items, order):
    """``items`` in the order they were in before ``order`` sorted
    them."""
    placed = [None] * len(items)
    for item, i in zip(items, order):
        placed[i] = item
    return placed


def _block(joined):
    """The joined array of what a call passes for a joined list."""
    return joined[0] if type(joined) is tuple else joined


def _counted(joined, j):
    """The array of what a call passes for the joined list ``j`` whose
    first axis is the number of items: the lengths of packed segments,
    else the joined array."""
    return joined[1] if j.kind == 'segments' else _block(joined)


def _join_of(path, node):
    """The :class:`Join` of the list at ``path`` that ``node``, reading its
    items, would be; else ``None``."""
    attrs = dict(node.attrs)
    if node.op == 'PadSequence' and attrs.get('length') is None:
        return Join(path, 'pad', attrs.get('padding'))
    op = traced.JOINS.get(node.op, node.op)  # (or NumPy's)
    if op in ('Concat', 'Stack') and attrs.get('axis') == 0:
        return Join(path, op.lower(), None)
    return None


class _Iterated(traced.ItemsOfJoined):
    """The items of a joined list argument, taken from the joined array
    ``joined`` (a traced array), whose first axis ``len()`` reads while
    recording. The forward's code iterating over them is a use of that
    size (``lengths.Use``): a loop counting the items would bake their
    number in."""

    joined = None
    iterated = None  # (the last use noted)

    def __iter__(self):
        self.iterated = _note_iterated(self.joined)
        return super().__iter__()

    def __getitem__(self, index):
        if type(index) is slice and index not in (slice(None), REVERSED):
            _note_iterated(self.joined, lengths.SLICED)  # (ys[:3])
        return super().__getitem__(index)

    def dispatched(self):
        _forget_iterated(self.iterated)


class JoinedList(_Iterated, list):
    """The list the forward gets for a joined list argument
    (:class:`_Iterated`)."""


class JoinedTuple(_Iterated, tuple):
    """:class:`JoinedList` for a tuple argument."""


class Segments(JoinedTuple):
    """The parts ``F.split_axis`` cut ``packed`` (a Variable) into, at the
    offsets of a joined list's items (``lengths.offsets_array``), whose
    lengths ``joined`` holds: the recurrent links take them whole as one
    node (``ops.nstep.PackedNStepRNN``), and ``F.concat(parts, axis=0)``
    is ``packed``. The parts are recorded too; a recording that reads one
    on its own is not joined (:func:`take_joins`: they would be cut at
    their recorded offsets)."""

    packed = None


class SegmentList(JoinedList):
    """:class:`Segments` in a list: the output sequences of a link."""

    packed = None


def is_segments(value):
    """Parts of joined items cut at their offsets (:class:`Segments`)?"""
    return type(value) in (Segments, SegmentList)


def cut(rows, lengths, kind=Segments):
    """``rows`` (a Variable of the joined items' rows, or of a function of
    them) cut at the items' ``lengths`` by a recorded ``F.split_axis``, as
    :func:`segments` (of ``kind``)."""
    stops = numpy.cumsum(traced.untag(lengths)).tolist()
    return segments(split_axis_module.split_axis(rows, stops[:-1], 0), rows,
                    lengths, kind)


def segments(parts, packed, lengths, kind=Segments, note=True):
    """``parts`` of ``packed`` as :class:`Segments` (or ``kind``) of the
    joined items' ``lengths``, their values noted for :func:`take_joins`
    (but where ``note`` is false: noted already)."""
    made = kind(parts)
    made.packed, made.joined = packed, lengths
    recorder = _keys.recording.recorder
    if note:
        recorder.segment_parts.extend(
            recorder.values[id(part.array)] for part in parts)
    for k, part in enumerate(parts):
        value = recorder.values.get(id(
            part.array if isinstance(part, chainer.Variable) else part))
        if value is not None:
            recorder.part_of[id(value)] = (value, made, k)
    return made


def cut_at_items(parts, packed, items_lengths):
    """:func:`segments` of ``parts`` of ``packed`` cut at the lengths of a
    joined list's items, noted as its items are (:func:`note_items`), so
    that a function applied to each part is applied to ``packed`` once
    (``[F.tanh(e) for e in exs]`` of ``sequence_embed``'s parts)."""
    made = segments(parts, packed, items_lengths)
    found = _lengths_of_items(items_lengths)
    if found is not None:
        leaf, shift = found
        note_items(parts, packed, leaf, shift)
    return made


def reduced_segments(xs, recorder, joined_by='stack'):
    """``(the Segments, the reduction, the nodes reducing each part,
    reversed)`` where ``xs`` are one reduction (``F.max``, ``F.min``,
    ``F.sum``, ``F.mean``, ``F.average``) over the first axis of each part
    of one :class:`Segments`, or its first or last row, in order (``[F.max(
    y, axis=0) for y in ys]``, ``[y[-1] for y in ys]`` of an N-step link's
    outputs) or in reverse order (``ys[::-1]``), to be stacked; or,
    ``joined_by`` ``'concat'``, each keeping that axis (``y[-1:]``) to be
    concatenated on it; else ``None``."""
    if not recorder.part_of:  # (no Segments: nothing to look for)
        return None
    values = [recorder.values.get(id(getattr(x, 'array', None)))
              for x in xs]
    made_by = _nodes_making(recorder.graph, values)
    found, kinds, parts = None, set(), []
    for value in values:
        node = made_by.get(id(value))
        kind = _reduction_of(recorder.templates.get(node),
                             joined_by == 'concat')
        if kind is None:
            return None
        noted = recorder.part_of.get(id(node.inputs[0]))
        if noted is None or noted[0] is not node.inputs[0] or \
                found is not None and noted[1] is not found:
            return None
        found = noted[1]
        kinds.add(kind)
        parts.append(noted[2])
    if found is None or len(found) != len(xs) or len(kinds) != 1:
        return None
    order = list(range(len(xs)))
    if parts not in (order, order[::-1]):
        return None
    return (found, kinds.pop(), [made_by[id(v)] for v in values],
            parts != order)


def _reduction_of(template, keeps_axis):
    """The kind of ``segments_ops.REDUCTIONS`` the Chainer function
    ``template`` computes of an item, removing its first axis (or, where
    ``keeps_axis``, keeping it as one row), or ``None``."""
    if isinstance(template, get_item.GetItem):
        index = _hashable(template.slices)
        if not all(isinstance(s, (int, tuple)) for s in index):
            return None
        if len(index) == 1 and type(index[0]) is int and not keeps_axis:
            return segments_ops.pick_kind(index[0])  # y[k]
        return _PICKED.get((index, keeps_axis))
    kind = _REDUCTIONS.get(type(template))
    if kind is None or tuple(template.axis or ()) != (0,) or \
            bool(template.keepdims) != keeps_axis:
        return None
    return kind


def _nodes_making(graph, values):
    """``{id(value): the node of graph making it}`` for ``values``, found
    from the latest node back."""
    wanted = set(id(v) for v in values if v is not None)
    found = {}
    for node in reversed(graph.nodes):
        for v in node.outputs:
            if id(v) in wanted:
                found[id(v)] = node
        if len(found) == len(wanted):
            break
    return found


def _node_making(graph, value):
    """The node of ``graph`` making ``value`` (:func:`_nodes_making`), or
    ``None``."""
    return _nodes_making(graph, [value]).get(id(value))


# The Chainer functions that map each row of their first input to a row of
# their output: applied to each item of a joined list (or of a value made
# so), by name, they are applied once to the rows of all
# (:func:`applied_to_items`). Dropout draws its mask with one
# ``numpy.random.rand`` of its input's shape, row after row: the draws of
# the items one after another are the draw of all their rows, where nothing
# else draws in between.
ROW_WISE = frozenset(['EmbedIDFunction', 'LinearFunction', 'ReLU', 'Tanh',
                      'Sigmoid', 'LeakyReLU', 'Dropout', 'ELU', 'Softplus',
                      'ClippedReLU', 'HardSigmoid', 'Exp', 'Log', 'Sqrt',
                      'Square', 'Absolute', 'Neg', 'AddConstant',
                      'MulConstant', 'SubFromConstant', 'DivFromConstant',
                      'PowVarConst'])

#: The functions that compute each row on its own where their ``axis``
#: is not the rows' (:func:`_along_rows`): a tagger's scores of each word
#: normalized, or its best tag.
ALONG_ROWS = frozenset(['Softmax', 'LogSoftmax', 'ArgMax', 'ArgMin'])


def _along_rows(node, x):
    """Does ``node`` (of :data:`ALONG_ROWS`) compute along an axis of
    ``x`` other than its first, the rows'?"""
    axis = getattr(node, 'axis', None)
    return type(axis) is int and x.ndim > 1 and axis % x.ndim != 0


#: The reductions over an item's rows that :func:`reduced_segments`
#: finds, by the FunctionNode that computes them.
_REDUCTIONS = {minmax.Max: 'max', minmax.Min: 'min', sum_module.Sum: 'sum',
               average.Mean: 'mean'}

#: The indexes taking an item's first or last row (keeping its first axis
#: where they are slices), and which.
_PICKS = (((0,), 'first'), ((-1,), 'last'), ((slice(None, 1),), 'first'),
          ((slice(0, 1),), 'first'), ((slice(-1, None),), 'last'))


def _hashable(index):
    """``index`` with its slices as ``(start, stop)`` (unhashable
    before Python 3.12)."""
    return tuple((s.start, s.stop) if isinstance(s, slice) and
                 s.step is None else s for s in index)


def _keeps_axis(index):
    return any(isinstance(s, slice) for s in index)


#: :data:`_PICKS` by ``(hashable index, whether it keeps the axis)``.
_PICKED = dict(((_hashable(index), _keeps_axis(index)), kind)
               for index, kind in _PICKS)

#: The slice that reverses an item (``x[::-1]``: :func:`indexed_item`).
REVERSED = slice(None, None, -1)


class Item(collections.namedtuple('Item', 'packed k lengths leaf shift')):
    """An item of a joined list, or of a value made of all its items: part
    ``k`` of ``packed`` (the rows of all) cut at ``lengths`` (a traced
    array). ``leaf``: the argument holding the lengths of the list's
    items, which these are each ``shift`` rows longer than."""

    __slots__ = ()


def note_items(items, packed, leaf, shift=0):
    """Notes ``items`` (traced arrays or Variables) as the rows of
    ``packed`` cut at the lengths of the joined list's items (the argument
    ``leaf``) plus ``shift``, in order, for :func:`applied_to_items`,
    :func:`items_whole`, and their lengths as read (``len(x)``)."""
    recorder = _keys.recording.recorder
    lengths.note_item_lengths(items, recorder.item_lengths[leaf], shift)
    items_lengths = lengths.shifted_lengths(leaf, shift)
    for k, item in enumerate(items):
        recorder.segment_items[id(lengths.array_of(item))] = Item(
            packed, k, items_lengths, leaf, shift)
        if isinstance(item, chainer.Variable):
            recorder.item_variables[id(item.array)] = (item,
                                                       item.creator_node)


def note_outputs(parts, packed, like):
    """Notes ``parts`` of ``packed`` (a link's output sequences, cut at the
    lengths of ``like``, the :class:`Segments` it took) as items of the
    joined list ``like``'s parts are items of, where they are
    (:func:`note_items`): a function applied to each of them is applied
    to ``packed`` (``[self.out(h) for h in hs]``)."""
    found = _lengths_of_items(like.joined)
    if found is not None:
        leaf, shift = found
        note_items(parts, packed, leaf, shift)
        lengths.note_joined_rows(lengths.array_of(packed),
                                 _keys.recording.recorder.words_of[leaf],
                                 leaf, shift)


def _lengths_of_items(array):
    """``(leaf, shift)`` where ``array`` is the lengths of a joined list's
    items, the argument ``leaf``, each plus ``shift``
    (``lengths.shifted_lengths``); else ``None``."""
    recorder = _keys.recording.recorder
    for leaf, found in recorder.item_lengths.items():
        if found is array:
            return leaf, 0
    for (leaf, shift), found in recorder.shifted_lengths.items():
        if found is array:
            return leaf, shift
    return None


def item_of(x, recorder=None):
    """The :class:`Item` ``x`` (a traced array or a Variable) is, or
    ``None`` (of ``recorder``'s, or of this thread's recording)."""
    recorder = recorder or _keys.recording.recorder
    return recorder.segment_items.get(id(lengths.array_of(x)))


def is_cut_off(x, recorder=None):
    """Is ``x`` an item noted as a Variable (:func:`note_items`), but no
    longer on its graph: its array (``y.array``), another Variable of it
    (``Variable(y.array)``), or the Variable unchained? Its gradient is not
    the rows of all the items' (made without it)."""
    recorder = recorder or _keys.recording.recorder
    noted = recorder.item_variables.get(id(lengths.array_of(x)))
    return noted is not None and (x is not noted[0] or
                                  x.creator_node is not noted[1])


def _cut_off_among(items):
    return any(is_cut_off(x) for x in items)


def paired(noted):
    """Are the :class:`Item` ``noted`` (``None`` for an input of no item)
    all item ``k`` of values as long, item by item: of one joined list,
    or of lists that share a width (whose items a joined call checks are
    as long, ``join``), as many rows more each?"""
    found = [n for n in noted if n is not None]
    widths = _keys.recording.recorder.item_widths
    first = found[0]
    return all(n.k == first.k and n.shift == first.shift and (
        n.leaf == first.leaf or
        widths.get(n.leaf, -1) == widths.get(first.leaf, -2))
        for n in found[1:])


def applied_to_items(node, inputs):
    """Where the forward applies the Chainer function ``node`` to an item
    of a joined list (or of a value made so), and the same function with
    the same other inputs is applied to the rows of all the items at once
    (once, the first time): the item's rows of that; else ``None``. Those
    functions are the :data:`ROW_WISE` ones on the item, ``x[::-1]``,
    ``x[1:]`` and the like (:func:`indexed_item`) and ``F.concat([bos, x,
    eos], axis=0)`` of fixed rows around it. A loop over the list that
    only does so rolls into those ops (:func:`take_joins`)."""
    recorder = _keys.recording.recorder
    noted = [item_of(x) for x in inputs]
    if any(noted) and _cut_off_among(inputs):
        return None  # (the rows of all would carry its gradient)
    name = type(node).__name__
    if (name in ROW_WISE or name in ALONG_ROWS and _along_rows(
            node, lengths.array_of(inputs[0]))) and \
            noted[0] is not None and not any(noted[1:]):
        if noted[0].leaf in recorder.drawing_lists or \
                not ops.is_impure(name):
            return (_row_wise(node, inputs, noted),)
        if noted[0].leaf in recorder.unseen_draws:
            recorder.draws_unseen = True  # (its draws item by item)
    if name in PAIRED_ROW_WISE and None not in noted and paired(noted) and \
            PAIRED_ROW_WISE[name](node, [lengths.array_of(x)
                                         for x in inputs]):
        return (_row_wise(node, inputs, noted),)
    if any(isinstance(x, chainer.Variable) and x.requires_grad
           for x in inputs):
        return None  # (the ops below have no gradient)
    if name == 'GetItem' and noted[0] is not None and \
            len(node.slices) == 1:
        found = indexed_item(inputs[0], node.slices[0], chainer.Variable)
        return None if found is None else (found,)
    if name == 'Concat' and node.axis == 0 and len(inputs) > 1 and \
            sum(n is not None for n in noted) == 1:
        return _framed(inputs, noted)
    return None


#: The kinds of a node's attributes that are its settings (a constant's
#: value, a slope): nodes alike in them compute alike.
_SETTINGS = (int, float, str, type(None), numpy.generic)


def settings_of(node):
    """The settings of the FunctionNode ``node`` (:data:`_SETTINGS`), in a
    hashable tuple: nodes alike in them compute alike."""
    return tuple(sorted((name, value) for name, value in vars(node).items()
                        if isinstance(value, _SETTINGS)))


def _row_wise(node, inputs, noted):
    """The item's rows of the :data:`ROW_WISE` (or
    :data:`PAIRED_ROW_WISE`) function ``node`` applied to the rows of all
    the items: its inputs that are items (``noted``, their
    :class:`Item`), those rows, the others as they are."""
    config = settings_of(node)
    whole_inputs = tuple(x if n is None else n.packed
                         for x, n in zip(inputs, noted))
    key = (type(node), config) + tuple(id(x) for x in whole_inputs)
    found = noted[0]

    def whole():
        rows, = ops.pristine_copy(node).apply(whole_inputs)
        return rows, cut(rows, found.lengths)
    return _applied(key, found, whole, ops.is_impure(type(node).__name__))


#: NumPy's element-wise functions that :func:`numpy_applied_to_items`
#: applies to the rows of all the items at once.
ROW_WISE_UFUNCS = frozenset([
    'equal', 'not_equal', 'less', 'less_equal', 'greater', 'greater_equal',
    'logical_and', 'logical_or', 'logical_xor', 'logical_not'])


def _on_rows(array, args, kwargs):
    """Do ``args`` and ``kwargs`` of ``argmax`` pick along each row of a
    2-d ``array`` (``axis=1``)?"""
    if args:
        axis = None if kwargs else args[0]
    else:
        axis = kwargs.get('axis') if set(kwargs) == {'axis'} else None
    return array.ndim == 2 and axis in (1, -1)


#: NumPy's methods of an item's array that map its rows to rows (given
#: their settings, by name: ``y.array.argmax(axis=1)``).
ROW_WISE_METHODS = {'argmax': _on_rows, 'argmin': _on_rows,
                    'astype': lambda array, args, kwargs: True}


def numpy_applied_to_items(ufunc, inputs):
    """Where the forward applies NumPy's element-wise ``ufunc`` to items
    as long, item by item (:func:`paired`; ``y.array.argmax(axis=1) ==
    t``), and numbers: the item's rows of it applied to the rows of all
    once (:data:`ROW_WISE_UFUNCS`); else ``None``."""
    if ufunc.__name__ not in ROW_WISE_UFUNCS:
        return None
    noted = [item_of(x) if isinstance(x, numpy.ndarray) else None
             for x in inputs]
    items = [x for x, n in zip(inputs, noted) if n is not None]
    if not items or not paired(noted) or any(
            n is None and not isinstance(x, (int, float, numpy.generic))
            for x, n in zip(inputs, noted)) or any(
                a.shape != items[0].shape for a in items):
        return None
    found = next(n for n in noted if n is not None)
    whole_inputs = [x if n is None else lengths.array_of(n.packed)
                    for x, n in zip(inputs, noted)]
    key = ('numpy', ufunc.__name__) + tuple(
        repr(x) if n is None else id(n.packed)
        for x, n in zip(inputs, noted))
    return _applied(key, found, lambda: _cut_as(
        ufunc(*whole_inputs), found.lengths, None))


def numpy_method_on_item(name, method, array, args, kwargs):
    """``array.name(*args, **kwargs)`` of an item's array that maps its
    rows to rows (:data:`ROW_WISE_METHODS`), as the item's rows of it
    applied to the rows of all once; else ``None``."""
    found = item_of(array)
    if found is None or not ROW_WISE_METHODS[name](array, args, kwargs):
        return None
    key = ('numpy', name, repr(args), repr(sorted(kwargs.items())),
           id(found.packed))
    return _applied(key, found, lambda: _cut_as(method(
        lengths.array_of(found.packed), *args, **kwargs), found.lengths,
        None))


def _alike(node, arrays):
    return all(a.shape == arrays[0].shape for a in arrays[1:])


def _rows_scored(node, arrays):
    scores, tags = arrays
    return node.reduce == 'no' and node.class_weight is None and \
        tags.dtype.kind == 'i' and scores.ndim == 2


#: The Chainer functions of several items of joined lists, as long, item
#: by item (``paired``), that map their rows to rows (by name, whether
#: they do so given the node and its inputs' arrays): the rows of all the
#: items of each, applied once (a loss of each word, ``reduce='no'``;
#: an element-wise sum of two sequences of outputs).
PAIRED_ROW_WISE = {'Add': _alike, 'Sub': _alike, 'Mul': _alike,
                   'Maximum': _alike, 'Minimum': _alike,
                   'SoftmaxCrossEntropy': _rows_scored}


def _applied(key, found, whole, drawn=False):
    """Item ``found.k`` of the items made by ``whole()`` (``(rows, items)``)
    of all of the items of ``found.packed``, made the first time asked
    for ``key`` (and, where it draws random numbers, ``drawn``, each time
    asked for the first item: a loop over the items draws anew); the line
    that asked is a loop over the items."""
    recorder = _keys.recording.recorder
    key += (chainer.config.enable_backprop,)
    items = recorder.applied_rows.get(key)
    if items is None or drawn and found.k == 0:
        rows, items = whole()
        recorder.applied_rows[key] = items
        note_items(items, rows, found.leaf, found.shift)
        lengths.note_joined_rows(lengths.array_of(rows),
                                 recorder.words_of[found.leaf], found.leaf,
                                 found.shift)
    recorder.iterated_lines.add(traced.user_location())
    return items[found.k]


def item_slice(index):
    """``(start, end)`` where ``x[index]`` of an item keeps its rows but
    its first ``start`` and its last ``end`` (``x[1:]``, ``x[:-1]``,
    ``x[1:-1]``), any of them; else ``None``."""
    if type(index) is not slice or index.step not in (None, 1):
        return None
    start, stop = index.start or 0, index.stop
    if type(start) is not int or start < 0 or stop is not None and (
            type(stop) is not int or stop >= 0):
        return None
    end = -stop if stop is not None else 0
    return (start, end) if start or end else None


def is_item_index(index):
    """Does ``x[index]`` of an item of a joined list have a whole form
    (:func:`indexed_item`)?"""
    return type(index) is slice and (
        index == REVERSED or item_slice(index) is not None)


def indexed_item(x, index, kind=None):
    """``x[index]`` of ``x``, an item of a joined list (or of a value made
    so), as the item's part of the rows of every item so indexed, made
    once: ``x[::-1]`` (``ops.segments.reversed_rows``), or ``x[1:]``,
    ``x[:-1]`` and the like (``ops.segments.sliced_rows``) where every
    item has as many rows as they cut. A traced array, or a Variable of
    one for ``kind`` ``chainer.Variable``; ``None`` where ``x`` is not
    such an item or the index has no such form."""
    found = item_of(x)
    if found is None or not is_item_index(index):
        return None
    dtype = found.lengths.dtype
    if index == REVERSED:
        key, shift = ('reversed',), found.shift
        op = ('joined.reversed', segments_ops.reversed_rows, {},
              segments_ops.reversed_to_onnx(dtype),
              segments_ops.same_rows_rule)
    else:
        start, end = item_slice(index)
        if start + end > found.shift + 1:  # (the items have a row or more)
            return None
        key, shift = ('sliced', start, end), found.shift - start - end
        op = ('joined.sliced', functools.partial(
            segments_ops.sliced_rows, start=start, end=end),
            {'start': start, 'end': end},
            segments_ops.sliced_to_onnx(dtype, start, end),
            segments_ops.rows_per_item_rule(
                len(lengths.array_of(found.packed)), len(found.lengths),
                -start - end))

    def whole():
        name, fn, attrs, onnx, rule = op
        rows = _whole_op(name, fn, [found.packed, found.lengths], attrs,
                         onnx, rule)
        return _cut_as(rows, lengths.shifted_lengths(found.leaf, shift),
                       kind)
    return _applied(key + (id(found.packed), kind),
                    found._replace(shift=shift), whole)


def parts_like(rows, items, kind=None):
    """The parts of ``rows`` (a traced array of a row for each row of the
    ``items``, all those of a value made of a joined list's items, in
    order) as long as the items, traced arrays (or Variables, for
    ``kind`` ``chainer.Variable``) noted as its items are (a CRF's best
    paths, a label for each word)."""
    found = whole_items(items)
    items_lengths = lengths.shifted_lengths(found.leaf, found.shift)
    rows, parts = _cut_as(rows, items_lengths, kind)
    note_items(parts, rows, found.leaf, found.shift)
    return parts


def _cut_as(rows, items_lengths, kind):
    """``(rows, the items' parts of them)``: the parts Variables cut by
    :func:`cut` for ``kind`` ``chainer.Variable``, else traced arrays
    taken by recorded indexing."""
    if kind is not None:
        rows = chainer.Variable(rows, requires_grad=False)
        return rows, cut(rows, items_lengths)
    recorder = _keys.recording.recorder
    sizes = traced.untag(items_lengths).tolist()
    stops = numpy.cumsum(sizes).tolist()
    parts = [rows[stop - n:stop] for stop, n in zip(stops, sizes)]
    recorder.segment_parts.extend(recorder.values[id(part)]
                                  for part in parts)
    return rows, parts


def framed_item(arrays):
    """``numpy.concatenate(arrays)`` (axis 0) where one of ``arrays`` is an
    item of a joined list and the others constant arrays of rows alike
    (``xp.concatenate([eos, y])``): as ``F.concat`` of them
    (:func:`_framed`), a traced array; where ``arrays`` are all the items
    of one, in order, the rows of all; else ``None``."""
    recorder = _keys.recording.recorder
    if recorder is None or not recorder.segment_items or \
            type(arrays) not in (list, tuple) or not arrays[1:]:
        return None
    whole = whole_items(list(arrays))
    if whole is not None and isinstance(whole.packed, numpy.ndarray):
        return whole.packed  # (all the items, in order: their rows)
    noted = [item_of(a) if isinstance(a, numpy.ndarray) else None
             for a in arrays]
    if sum(n is not None for n in noted) != 1:
        return None
    found = _framed(arrays, noted, None)
    return None if found is None else found[0]


def _framed(inputs, noted, kind=chainer.Variable):
    """``F.concat(inputs, axis=0)`` where one of ``inputs`` is an item of a
    joined list (or of a value made so; ``noted`` holds its
    :class:`Item`) and the others are constant arrays of rows alike: the
    item's part of the rows of every item so framed, made once
    (``ops.segments.framed_rows``), as ``FunctionNode.apply`` gives it
    (a Variable; for ``kind`` ``None``, a traced array); else ``None``."""
    recorder = _keys.recording.recorder
    at = next(k for k, n in enumerate(noted) if n is not None)
    found, arrays = noted[at], [lengths.array_of(x) for x in inputs]
    item = arrays[at]
    if any(not _is_constant(a, recorder) or a.dtype != item.dtype or
           a.ndim != item.ndim or a.shape[1:] != item.shape[1:]
           for k, a in enumerate(arrays) if k != at):
        return None
    before = _rows_of(arrays[:at], item)
    after = _rows_of(arrays[at + 1:], item)
    n_extra = len(before) + len(after)

    def whole():
        rows = _whole_op(
            'joined.framed', segments_ops.framed_rows,
            [found.packed, found.lengths, before, after],
            {'before': len(before), 'after': len(after)},
            segments_ops.framed_to_onnx(found.lengths.dtype, len(before),
                                        len(after)),
            segments_ops.rows_per_item_rule(
                len(lengths.array_of(found.packed)), len(found.lengths),
                n_extra))
        return _cut_as(rows, lengths.shifted_lengths(
            found.leaf, found.shift + n_extra), kind)
    key = ('framed', id(found.packed), at, kind) + tuple(
        id(a) for k, a in enumerate(arrays) if k != at)
    framed = _applied(key, found._replace(shift=found.shift + n_extra), whole)
    return (framed,)


def _is_constant(array, recorder):
    """Is ``array`` a NumPy array the recording holds as a constant (or
    will, not being computed from the inputs)?"""
    value = recorder.values.get(id(array))
    if value is not None:
        return value.kind == 'const'
    return isinstance(array, numpy.ndarray) and \
        not isinstance(array, traced.TracedArray)


def _rows_of(arrays, like):
    """The rows of the constant ``arrays`` joined (none: an array of no rows
    alike ``like``'s)."""
    if not arrays:
        return numpy.empty((0,) + like.shape[1:], like.dtype)
    return numpy.concatenate([traced.untag(a) for a in arrays])


def _whole_op(op, fn, arrays, attrs, onnx, rule):
    """The traced array ``fn`` makes of ``arrays`` (traced or constant),
    recorded as a node ``op`` making it on every call."""
    recorder = _keys.recording.recorder
    plain = [traced.untag(lengths.array_of(a)) for a in arrays]
    return lengths.made_by_node(
        op, fn, attrs, onnx, [recorder.value_of(a) for a in arrays],
        fn(*plain), traced.user_location(), rule)


def whole_items(items, recorder=None):
    """The :class:`Item` of the first of ``items`` where they are all the
    items of one value of a joined list's items (:func:`note_items`), in
    order; else ``None`` (``recorder``: as :func:`item_of`)."""
    if not isinstance(items, (list, tuple)) or not items:
        return None
    found = [item_of(x, recorder) for x in items]
    if None in found:
        return None
    first = found[0]
    # (no len(): the forward's, while recording, asks this of lists)
    if any(f.packed is not first.packed or f.k != k
           for k, f in enumerate(found)) or \
            found[-1].k + 1 != traced.untag(first.lengths).shape[0]:
        return None
    return first


def items_whole(items):
    """``Segments`` of ``items`` (a list a link takes) where they are all
    the items of a joined list, or of one value made of them
    (:func:`applied_to_items`), in order; else ``None``."""
    found = whole_items(items)
    if found is None or _cut_off_among(items):
        return None
    return segments(items, found.packed, found.lengths, note=False)


def concatenated(items):
    """``F.concat(items, axis=0)`` where ``items`` are all the items of a
    joined list cut at their offsets, or of one value made of them, in
    order: that value (the joined rows the call passed, whose length is
    the words' symbol), a Variable; else ``None``."""
    found = whole_items(items)
    if found is None or _cut_off_among(items):
        return None
    if isinstance(found.packed, chainer.Variable):
        return found.packed
    return chainer.Variable(found.packed, requires_grad=False)


def count_of(items):
    """The array of the lengths of a joined list's items (an argument,
    whose first axis is their number) where ``items``, a list the forward
    made, holds all the items of a value made of them, in order (``exs =
    [self.embed(x) for x in xs]``: ``len(exs)`` is the batch size); else
    ``None``."""
    found = whole_items(items) if type(items) in (list, tuple) else None
    return None if found is None else \
        _keys.recording.recorder.item_lengths[found.leaf]


def _note_iterated(joined, what=lengths.ITERATED):
    """Notes the forward's code iterating over the items of ``joined`` (or
    ``what`` else it did with them), and returns the ``lengths.Use`` (or
    ``None``)."""
    recorder = _keys.recording.recorder
    loc = lengths.forward_line(2)
    origin = lengths.origin_of(joined, 0)
    if recorder is None or loc is None or origin is None:
        return None
    use = lengths.Use(frozenset([origin]), what, loc)
    recorder.length_uses.append(use)
    return use


def _forget_iterated(use):
    """Takes back ``use``, the iteration of a joined list last noted, if
    it is the last use the recording noted: NumPy's dispatch iterated it
    (``xp.concatenate(ts)``), not the forward's code."""
    recorder = _keys.recording.recorder
    if use is not None and recorder is not None and \
            recorder.length_uses and recorder.length_uses[-1] is use:
        recorder.length_uses.pop()


def is_joined(value):
    """A list (or tuple) the forward got for a joined argument?"""
    return isinstance(value, (JoinedList, JoinedTuple))


def joined_list(items, joined, kind_name):
    """``items`` as a :class:`JoinedList` (or tuple) of ``joined``."""
    made = JoinedList(items) if kind_name == 'list' else JoinedTuple(items)
    made.joined = joined
    return made


# --- at the call boundary ---------------------------------------------------

class Joined(collections.namedtuple('Joined', 'joins args kwargs')):
    """A call whose lists are joined: the ``Join`` of each, and the
    arguments with the joined arrays in their place (read as a packed
    call's, ``(paths, args, kwargs)``, by the compile pipeline)."""

    __slots__ = ()


def join(args, kwargs, joins):
    """The call's :class:`Joined`, or ``None`` where a list is not there to
    join (``Join.takes``), the joined arrays differ in their first axis,
    or lists padded or cut at their offsets of one width differ in their
    items' lengths, or several are, of one item each."""
    given = (args, kwargs)
    args, kwargs = list(args), dict(kwargs)
    counts, cut = set(), {}  # cut: {width: the items' lengths}
    for j in joins:
        items = _joined_order(j, *given)
        if items is None:
            return None
        counts.add(len(items))
        packing.holder(args, kwargs, j.path)[j.path[1]] = j.joined(items)
        if j.kind in ('segments', 'pad'):
            cut.setdefault(j.width, set()).add(tuple(len(a) for a in items))
    if len(counts) != 1 or any(len(n) > 1 for n in cut.values()):
        return None
    return Joined(joins, tuple(args), kwargs)


def _joined_order(j, args, kwargs):
    """The items of the call's list that ``j`` joins, in the order it joins
    them (:func:`sorted_order`); ``None`` where it is not there to join so
    (``Join.takes``)."""
    items = packing.argument_at(args, kwargs, j.path)
    if items is None or not j.takes(items):
        return None
    order = sorted_order(j, args, kwargs)
    if order is not None:
        if len(order) != len(items):
            return None
        items = [items[i] for i in order]
    return items


def widths_apart(args, kwargs, joins):
    """``joins`` with lists that share a width, but whose items this call
    gives other lengths (a source and a target as long, sentence by
    sentence, at the call that joined them), each on a width of its own
    (those as long still sharing one); ``None`` where no list does, or
    the call's lists are not there to join, or differ in their number of
    items."""
    keys, counts = [], set()
    for j in joins:
        items = _joined_order(j, args, kwargs)
        if items is None:
            return None
        counts.add(len(items))
        found = _width_key(j, items)
        keys.append(None if found is None else
                    (j.width, tuple(found[1])))
    shared = collections.defaultdict(set)
    for key in keys:
        if key is not None:
            shared[key[0]].add(key[1])
    if len(counts) != 1 or all(len(found) == 1
                               for found in shared.values()):
        return None
    return tuple(_with_widths(joins, keys))


def rows_by_chance(args, kwargs, joins):
    """Does one of ``joins`` join a list of items of one row each
    (``'concat'``: a tag for each sentence of one word, at the call that
    joined them) whose items this call gives other lengths?"""
    for j in joins:
        items = packing.argument_at(args, kwargs, j.path)
        if j.kind == 'concat' and items is not None and \
                not j.takes(items) and j._replace(kind='segments').takes(
                    items):
            return True
    return False


def is_joins(paths):
    """Are ``paths`` (a packed call's, or a joined one's) joins?"""
    return bool(paths) and isinstance(paths[0], Join)


def mark_key(key, joins):
    """The key of a joined call: its structure says which arguments were
    joined lists, so that a call passing such an array does not share the
    entry."""
    train, backprop, structure, specs, alias = key
    return (train, backprop, ('joined', joins, structure), specs, alias)


def counts(joined):
    """The numbers of items of a joined call's lists."""
    return set(len(_counted(packing.holder(joined.args, joined.kwargs,
                                           j.path)[j.path[1]], j))
               for j in joined.joins)


def joined_leaves(joined, leaves):
    """``{leaf index: Join}`` of the joined arrays among a joined call's
    leaves."""
    found = {}
    for j in joined.joins:
        array = _block(packing.holder(joined.args, joined.kwargs,
                                      j.path)[j.path[1]])
        found[next(i for i, leaf in enumerate(leaves) if leaf is array)] = j
    return found


# --- while recording --------------------------------------------------------

def items_of(call_args, call_kwargs, joins, caller_args, caller_kwargs):
    """What the recorded forward gets for a joined call: each joined
    argument (a traced array) as a :class:`JoinedList` of its items, taken
    by recorded indexing. Returns ``(args, kwargs, rows)`` as
    ``packing.unpacked_arguments`` does."""
    args, kwargs = list(call_args), dict(call_kwargs)
    rows = []
    for j in joins:
        arguments = packing.holder(args, kwargs, j.path)
        joined = arguments[j.path[1]]
        originals = packing.holder(caller_args, caller_kwargs,
                                   j.path)[j.path[1]]
        order = sorted_order(j, caller_args, caller_kwargs)
        if order is not None:
            originals = [originals[i] for i in order]
        items = j.items(joined, originals)
        if j.lengths:
            lengths.note_item_lengths(items, joined[1])
        if order is not None:
            sorting.note_positions(items, j, lengths.origin_of(
                _counted(joined, j), 0))
        if j.kind == 'segments':
            recorder = _keys.recording.recorder
            leaf = lengths.leaf_of(joined[1])
            recorder.words_of[leaf] = lengths.leaf_of(joined[0])
            recorder.item_widths[leaf] = j.width
            if j.draws:
                recorder.drawing_lists.add(leaf)
            elif j.draws is None:
                recorder.unseen_draws.add(leaf)
            note_items(items, joined[0], leaf)
        if order is not None:  # each where the caller put it
            items = _unsorted(items, order)
        rows.append((j.path, items))
        arguments[j.path[1]] = joined_list(items, _counted(joined, j),
                                           j.path[2])
    return tuple(args), kwargs, rows


def take_joins(recording, joins, names):
    """Makes each joined argument of a joined call's ``recording``
    (``trace.Recording``) the value of the op it was joined for: that op
    and the indexing of the items (its ``row_nodes``, in the order of
    ``joins`` and their items) go. None of these may be read otherwise:
    the values whose shape the forward's Python read (``shapes_read``);
    an item's length in its ``length_uses`` (``names`` are the leaves'),
    or read but into an array of them all or their offsets
    (``item_length_reads``, each with its line); the parts of
    :class:`Segments` (``segment_parts``). The uses of the count by loops
    over the items at its ``iterated_lines``, whose every function was
    applied to the items whole (:func:`applied_to_items`), go from its
    ``length_uses``. Returns why the recording does not read each list
    whole, or ``None``."""
    graph, item_nodes = recording.graph, recording.row_nodes
    uses, item_length_reads = recording.length_uses, \
        recording.item_length_reads
    if recording.draws_unseen:
        return DRAWS_UNSEEN
    if recording.orders_unseen:
        return ORDER_UNSEEN
    if recording.orders_read:
        return "the forward's Python orders the items of a list the call " \
            "sorted by something else than their lengths%s" % _at(
                recording.orders_read[0])
    if item_length_reads:
        return "the forward's Python reads the length of an item " \
            "(len(x), x.shape) other than into an array of them all, or " \
            "the offsets of them all%s" % _at(item_length_reads[0][1])
    if recording.width_uses:
        what, loc = recording.width_uses[0]
        return "the width of the sequences F.pad_sequence padded " \
            "(.shape[1] of its block) is %s " \
            "by the forward's Python%s" % (what, _at(loc))
    for use in uses:
        if any(lengths.is_item_length(origin) for origin in use.origins):
            return use.describe(names)
    users = graph.users()
    gone = packing.unread_nodes(users, recording.droppable)
    read = _read_left(recording.segment_parts, users, gone)
    if read is not None:
        return 'an item of the sentences joined (cut by F.split_axis at ' \
            'their offsets, or of a function applied to all) is read on ' \
            'its own%s, not whole by an N-step link' % _by(read[1])
    read = _read_left(recording.item_sum_values, users, gone)
    if read is not None:
        value, reader = read
        return "a value of one item of the sentences joined (an item's " \
            "loss), or a sum of some of them, is %s: only a sum over all " \
            "the items is computed for all at once" % (
                'read' + _by(reader) if reader is not None else
                'returned' + _by(_node_making(graph, value)))
    n, found = len(item_nodes) // len(joins), []
    users = _without(users, gone)
    returned = set(graph.outputs)
    for k, j in enumerate(joins):
        nodes = item_nodes[k * n:(k + 1) * n]
        joined = nodes[0].inputs[0]
        if len(nodes) * len(joins) != len(item_nodes) or any(
                node.inputs[0] is not joined for node in nodes):
            return 'its items are not taken one by one from %s' % (
                _name(j.path))
        values = [node.outputs[0] for node in nodes]
        if returned.intersection(values):
            return 'an item of %s is returned as it is' % _name(j.path)
        if j.kind == 'segments' and not any(users.get(v) for v in values):
            continue  # applied to whole (applied_to_items)
        nodes, why = _reader_of(values, users, j, recording.shapes_read)
        if why is not None:
            return why
        found += [(node, joined) for node in nodes]
    gone = set(item_nodes) | set(node for node, _ in found)
    graph.read_instead(dict((node.outputs[0], joined)
                            for node, joined in found))
    packing.drop_nodes(graph, recording.loops, gone)
    uses[:] = [use for use in uses  # loops over items applied to whole
               if use.what != lengths.ITERATED or
               not _applied_whole(use.loc, recording.iterated_lines)]
    return None


def _read_left(values, users, gone):
    """``(value, a node reading it that does not go)`` of the first of
    ``values`` so read (the node ``None``: the graph returns it), or
    ``None``."""
    for value in values:
        reader = next(iter(n for n in users.get(value) or ()
                           if n not in gone), False)
        if reader is not False:
            return value, reader
    return None


def _by(node):
    """Where a read by ``node`` (or the value ``node`` made) is, for a
    message (``None``: the graph returns it)."""
    if node is None:
        return ''
    return ' by %s%s' % (node.op, _at(node.loc))


def _applied_whole(loc, iterated_lines):
    """Did the forward's loop over the items of a joined list at ``loc``
    only apply functions to them that ran on the rows of all at once
    (``iterated_lines``, :func:`applied_to_items`)? A comprehension there
    (on one line or several), or a ``for`` statement whose every statement
    appends such a value to a list."""
    if loc in iterated_lines or any(
            line in iterated_lines
            for line in loop_analysis.comprehension_lines(loc)):
        return True
    statements = loop_analysis.appending_lines(loc)
    return statements is not None and all(
        any(line in iterated_lines for line in lines)
        for lines in statements)


def list_arguments(args, kwargs):
    """``[(path, items), ...]``: the top-level list (and tuple) arguments
    of :data:`MIN_ITEMS` or more NumPy arrays."""
    found = []
    named = [(('args', i), arg) for i, arg in enumerate(args)] + \
        [(('kwargs', name), arg) for name, arg in kwargs.items()]
    for (where, key), arg in named:
        if type(arg) in (list, tuple) and len(arg) >= MIN_ITEMS and all(
                type(a) is numpy.ndarray for a in arg):
            found.append(((where, key, type(arg).__name__), arg))
    return found


def lists_of_arrays(args, kwargs):
    """The top-level arguments that are lists (or tuples) holding arrays
    or Variables."""
    return [arg for arg in list(args) + list(kwargs.values())
            if type(arg) in (list, tuple) and
            any(isinstance(a, _ARRAY_TYPES) for a in arg)]


_ARRAY_TYPES = (numpy.ndarray, chainer.Variable) + tuple(
    chainer.get_array_types())


def found_joins(graph, lists, length_reads, shapes_read, uses,
                item_splits=0, totals=(), droppable=(), templates=None,
                orders=None):
    """The :class:`Join` of each list argument of an unjoined recording
    that the forward reads whole, or ``()``: ``lists`` are ``(path, item
    values, the caller's items, the items' leaves)``; ``length_reads``
    the ``(leaf, axis)`` sizes the forward's code read, ``uses`` its
    ``lengths.Use`` of them; ``item_splits``, how many times it cut an
    array at the offsets of the items of a list (``numpy.cumsum`` of
    their lengths), which makes such a list's items, joined, segments;
    ``totals``, the sums of items' lengths the forward made
    (``lengths._totaled``): the reads of a list's lengths for a sum of
    all of them are the words' number joined; ``droppable``, nodes that
    go where nothing reads them (``F.transpose_sequence``'s steps read
    transposed back), which read nothing then; ``templates``, the
    recorded functions of its nodes; ``orders``, the ``Join.order`` of the
    lists the forward sorted, whose items come in that order."""
    templates, orders = templates or {}, orders or {}
    users = graph.users()
    users = _without(users, packing.unread_nodes(users, droppable))
    joins, cut = [], []
    for path, values, items, leaves in lists:
        order = orders.get(path)
        sized = _sizes_of(values, users)
        reads = length_reads if frozenset(
            (leaf, 0) for leaf in leaves) not in totals else ()
        lengths_read = any(leaf == origin[0] for origin in (
            [o for use in uses for o in use.origins] if sized
            else reads) for leaf in leaves) and not (
                _means_of_items(graph, values, users, sized))
        j = _join_of_readers(path, _item_readers(users, values[0], sized))
        if j is not None:
            j = j._replace(order=order)
        if _read_time_major(values, users):
            j = Join(path, 'segments', None, True, order=order)
            if j.takes(items):
                joins.append(j)
                cut.append(_width_key(j, items))
            continue
        each = _without(users, _concats_besides(values, users) |
                        _crfs_of_all(values, users))
        if (not lengths_read or item_splits) and (_applied_each(
                graph, values, each, item_splits, sized) or _linked_whole(
                    values, each) or _scored_each(values, each, sized) or
                not any(each.get(v) for v in values)):  # (unread)
            j = Join(path, 'segments', None, True,
                     draws=_draws_as_one(graph, values, templates),
                     order=order)
            if j.takes(items):
                joins.append(j)
                cut.append(_width_key(j, items))
            continue
        if j is not None and j.kind == 'concat' and not j.takes(items):
            # Segments whose lengths a split may read: the joined
            # recording tells (take_joins); or as long as another list's
            # segments, item by item (a tagger's labels beside its
            # sentences, F.concat(ts, axis=0)).
            segments = j._replace(kind='segments', lengths=True,
                                  draws=_parts_draw_as_one(graph, values,
                                                           templates))
            j = segments if item_splits or \
                _width_key(segments, items) in cut else None
        elif j is not None and j.kind == 'pad' and not lengths_read and \
                _width_key(j._replace(kind='segments'), items) in cut:
            # padded item by item as another list's segments (a tagger's
            # labels beside its sentences, F.pad_sequence(ts)): their rows
            # joined too, padded at the same lengths
            if j.takes(items) and _reader_of(values, users, j, shapes_read,
                                             sized)[1] is None:
                j = j._replace(kind='segments', lengths=True, padding=None)
                joins.append(j)
                cut.append(_width_key(j, items))
            continue
        elif lengths_read:
            continue
        elif j is not None and sized is not None:
            j = j._replace(lengths=True) if j.kind == 'pad' else None
        if j is not None and j.takes(items) and _reader_of(
                values, users, j, shapes_read, sized,
                rows_read=j.kind == 'segments')[1] is None:
            joins.append(j)
            cut.append(_width_key(j, items))
    counts = set(len(items) for path, _, items, _ in lists
                 if any(j.path == path for j in joins))
    if len(counts) > 1:
        return ()
    return tuple(_with_widths(joins, cut))


def _concats_besides(values, users):
    """The nodes joining all of ``values`` (a list's items) in order on the
    first axis (``F.concat(ys, axis=0)``, ``xp.concatenate(ys)``) where
    others read them too (targets embedded word by word, and scored
    whole): a joined call's rows, which leave the others to tell."""
    readers = _readers(values, users)
    joined = set(n for n in readers if n is not None and
                 traced.JOINS.get(n.op, n.op) == 'Concat' and
                 dict(n.attrs).get('axis') == 0 and n.inputs == list(values))
    return joined if joined and readers - joined else set()


#: Chainer's CRF over sequences, each one node on them, which a joined
#: call makes of their rows (``ops.loss.CRF1dOfSegments``).
_CRFS = frozenset(['CRF1dOfSequences', 'ArgmaxCRF1dOfSequences'])


def _crfs_of_all(values, users):
    """The CRF nodes (:data:`_CRFS`) taking all of ``values`` (a list's
    items, or values made of each alone), in order, as their sequences'
    scores or labels. (Best paths returned are cut at each call's
    lengths, ``parts_like``.)"""
    found, n = set(), len(values)
    for node in _readers(values, users):
        if node is not None and node.op in _CRFS and \
                len(node.inputs) - 1 in (n, 2 * n) and \
                list(values) in (node.inputs[1:n + 1], node.inputs[n + 1:]):
            found.add(node)
    return found


def _read_time_major(values, users):
    """Are ``values`` (a list's items) read, all in order and but by that,
    by one ``ops.array.TimeMajorItems`` (``F.concat`` of their steps
    ``F.transpose_sequence`` made), whose node on the joined rows
    (``TimeMajorSegments``) a joined call records instead?"""
    node = _one_reader(values, users)
    return node is not None and node.op == 'TimeMajorItems' and \
        node.inputs == list(values)


def _readers(values, users):
    """The nodes reading any of ``values`` (``None``: the graph returns
    one)."""
    return set(node for value in values for node in users.get(value, []))


def _one_reader(values, users):
    """The one node reading ``values`` (all of them, nothing else reading
    them), or ``None``."""
    readers = _readers(values, users)
    return next(iter(readers)) if len(readers) == 1 else None


def _without(users, gone):
    """``users`` (as ``graph.users()`` gives them) but the nodes ``gone``
    (``packing.unread_nodes``)."""
    if not gone:
        return users
    return dict((value, [n for n in readers if n not in gone])
                for value, readers in users.items())


def _width_key(j, items):
    """What the list ``items``, joined as ``j``, shares a width by with
    other lists (:func:`_with_widths`): for a padded list or segments,
    whether padded (the longest item's words, not all the items'), its
    items' lengths, and the order a call joins them in; else ``None``."""
    if j.kind not in ('segments', 'pad'):
        return None
    return j.kind == 'pad', [len(a) for a in items], j.order


def _with_widths(joins, cut):
    """``joins``, those of lists padded or cut at their offsets with the
    width their :func:`_width_key` (``cut``) shares with other such lists:
    one width for each, in order (a source's and a target's, ``W`` and
    ``W2``)."""
    widths = []
    for j, sizes in zip(joins, cut):
        if sizes is not None and sizes not in widths:
            widths.append(sizes)
        yield j if sizes is None else j._replace(width=widths.index(sizes))


def _applied_each(graph, values, users, item_splits, sized=None):
    """Is each of ``values`` (a list's items) read only by functions a
    joined call applies to the rows of all the items at once
    (:func:`applied_to_items`: ``[self.embed(x) for x in xs]``,
    ``x[::-1]``, ``F.concat([eos, y], axis=0)``), the same for every item,
    in a recording that cuts an array at the items' offsets
    (``item_splits``), where an N-step link takes as many sequences, or
    where each is then reduced over its rows
    and stacked (:func:`_pooled_and_stacked`)? ``sized``: the node
    reading their lengths into an array, another reader they may have."""
    made = None
    for value in values:
        readers = _item_readers(users, value, sized)
        if not readers or None in readers or not all(
                _applied_to_item(graph, node, value, values)
                for node in readers):
            return False
        ops_read = sorted(node.op for node in readers)
        if made not in (None, ops_read):
            return False
        made = ops_read
    return bool(item_splits) or any(
        _is_n_step_link(node) and
        dict(node.attrs).get('items') == len(values)
        for node in graph.nodes) or \
        _crfs_of_all(_last_of_each(graph, values, users), users) or \
        _pooled_and_stacked(graph, values, users, sized) or \
        _padded_whole(graph, values, users, sized) or \
        _concatenated_whole(graph, values, users, sized) or \
        _returned_each(graph, values, users) or \
        _reduced_each(graph, values, users, sized)


def _concatenated_whole(graph, values, users, sized=None):
    """Does each of ``values`` (a list's items) go through functions
    :func:`applied_to_items` applies to all the items alone into one
    ``F.concat`` on the first axis of all of them, in order
    (``F.concat([self.out(self.embed(x)) for x in xs], axis=0)``: a score
    for each word)?"""
    ends = [_chain_end(graph, value, values, users, _concat_of_rows, sized)
            for value in values]
    return None not in ends and len(set(id(node) for node, _ in ends)) == 1 \
        and ends[0][0].inputs == [value for _, value in ends]


def _returned_each(graph, values, users):
    """Does each of ``values`` (a list's items) go through functions
    :func:`applied_to_items` applies to all the items alone into a value
    the forward returns and nothing else reads, in order (``[F.softmax(
    self.out(self.embed(x))) for x in xs]``)?"""
    ends = _last_of_each(graph, values, users)
    if any(users.get(end) != [None] for end in ends) or \
            set(ends) & set(values):
        return False
    at = [graph.outputs.index(end) for end in ends]
    return at == list(range(at[0], at[0] + len(at)))


def _concat_of_rows(node):
    return node.op == 'Concat' and dict(node.attrs).get('axis') == 0


def _scored_each(values, users, sized=None):
    """Is each of ``values`` (a list's items) read, but for its length, by
    ``F.softmax_cross_entropy`` and ``F.accuracy`` alone (:data:`_SCORES`),
    as their labels, each alike for all (the tags of each sentence scoring
    its outputs)? Joined, the scores of all the items are computed at once
    where theirs are the items of a value made of another joined list's
    items, as long (``item_sums``), or the joined recording tells
    otherwise (:func:`take_joins`)."""
    made = set()
    for value in values:
        readers = _item_readers(users, value, sized)
        if not readers or None in readers or any(
                node.op not in _SCORES or node.inputs[1:] != [value] and (
                    node.op not in _COMPARED or value not in node.inputs)
                for node in readers):
            return False
        made.update((node.op, repr(node.attrs)) for node in readers)
    return len(made) == len(set(op for op, _ in made))


#: NumPy's comparisons that score an item by its tags (an accuracy
#: counted, ``y.array.argmax(axis=1) == t``), on either side.
_COMPARED = frozenset(['numpy.equal', 'numpy.not_equal'])

#: The functions scoring an item by its tags (``item_sums``).
_SCORES = frozenset(['SoftmaxCrossEntropy', 'Accuracy']) | _COMPARED


#: The reductions over an item's rows a joined call makes one op of
#: (``ops.array.ReduceSegments``), by their recorded names.
_POOLS = frozenset(kind.__name__ for kind in _REDUCTIONS)


def _pooled_and_stacked(graph, values, users, sized=None):
    """Does each of ``values`` (a list's items) go through functions
    :func:`applied_to_items` applies to all the items alone into a
    reduction over its rows (``F.max(x, axis=0)``), and all of those, in
    order, into one ``F.stack`` (``F.stack([F.max(self.embed(x), axis=0)
    for x in xs])``: max pooling over each sentence's embeddings)?"""
    pooled = []
    for value in values:
        found = _pool_of(graph, value, values, users, sized)
        if found is None:
            return False
        pooled.append(found[1])
    stacks = set(id(users[v][0]) for v in pooled)
    stack = users[pooled[0]][0]
    return len(stacks) == 1 and stack.inputs == pooled


def _reduced_each(graph, values, users, sized=None):
    """Does each of ``values`` (a list's items) go through functions
    :func:`applied_to_items` applies to all the items alone into a
    reduction to one value that a joined call computes for all the items
    at once (``F.sum`` of all its elements, ``F.softmax_cross_entropy``
    of its scores: ``item_sums``)? Whether the forward then adds up all of
    them, the joined recording tells (:func:`take_joins`)."""
    return all(_chain_end(graph, value, values, users, _reduces_item,
                          sized) is not None for value in values)


def _reduces_item(node):
    attrs = dict(node.attrs)
    return node.op in ('Sum', 'Mean') and attrs.get('axis') is None or \
        node.op == 'SoftmaxCrossEntropy' and attrs.get('reduce') == 'mean'


def _padded_whole(graph, values, users, sized=None):
    """Does each of ``values`` (a list's items) go through functions
    :func:`applied_to_items` applies to all the items alone into one
    ``F.pad_sequence`` of all of them, in order (``F.pad_sequence([
    self.embed(x) for x in xs])``), or, read several times, into one
    each time (a target framed two ways, each padded: the decoder's
    inputs after a first word, its targets before a last)?"""
    pads = collections.defaultdict(list)  # pad node: the items' ends
    for value in values:
        readers = _item_readers(users, value, sized)
        if not readers or None in readers:
            return False
        for node in readers:
            end = node, value
            if node.op != 'PadSequence':
                if not _applied_to_item(graph, node, value, values):
                    return False
                end = _chain_end(graph, node.outputs[0], values, users,
                                 lambda n: n.op == 'PadSequence', sized)
            if end is None:
                return False
            pads[end[0]].append(end[1])
    return all(pad.inputs == ends for pad, ends in pads.items())


def _pool_of(graph, value, values, users, sized=None):
    """``(the reduction over the rows of the item ``value`` that the chain
    of functions of it alone ends in, its value stacked)``: its own, or
    that of a sum of the rows divided by the item's length
    (:func:`_divided_by_length`), read by an ``F.stack`` alone (or, the
    axis kept, an ``F.concat`` on the first axis); else ``None``."""
    end = _chain_end(graph, value, values, users,
                     lambda node: node.op in _POOLS, sized)
    if end is None:
        return None
    node = end[0]
    pooled = node.outputs[0]
    out = users.get(pooled, [])
    if node.op == 'Sum' and len(out) == 1 and out[0] is not None:
        divided = _divided_by_length(graph, out[0], pooled, value)
        if divided is not None:
            pooled = divided.outputs[0]
            out = users.get(pooled, [])
    stacked = len(out) == 1 and out[0] is not None and \
        out[0].op == _joined_by(node) and \
        dict(out[0].attrs).get('axis') == 0
    return (node, pooled) if stacked else None


def _divided_by_length(graph, node, total, item):
    """``node`` where it divides ``total`` by the length of ``item``, an
    argument (``F.sum(self.embed(x), axis=0) / len(x)``: the node of
    ``total`` times one over the ``python.size`` of the item's first
    axis); else ``None``. Joined, it is the mean over the item's rows
    (:func:`mean_of_item`)."""
    if node.op != 'MulConstant' or len(node.inputs) != 2 or \
            node.inputs[0] is not total:
        return None
    inverse = _node_making(graph, node.inputs[1])
    size = _node_making(graph, inverse.inputs[0]) \
        if inverse is not None and inverse.op == 'python.rtruediv' and \
        dict(inverse.attrs).get('operand0') == 1.0 else None
    if size is None or size.op != 'python.size' or \
            size.inputs != [item] or dict(size.attrs) != dict(
                a=1, axis=0, b=0):
        return None
    return node


def mean_of_item(total, length):
    """``total / length`` where ``total`` is the sum over its rows of an
    item of a joined list, or of a value made of the items row by row
    (``F.sum(self.embed(x), axis=0)``), and ``length`` that item's length
    (``len(x)``): their mean, ``F.mean`` of the item, which a stack of all
    of them joins (:func:`reduced_segments`); the sum goes where nothing
    else reads it, and the length is read for it. Else ``None``."""
    recorder = _keys.recording.recorder
    if not recorder.segment_items or type(length) is not lengths.Length \
            or not isinstance(total, chainer.Variable):
        return None
    made_by = _node_making(recorder.graph,
                           recorder.values.get(id(total.array)))
    summed = recorder.templates.get(made_by)
    if type(summed) is not sum_module.Sum or \
            tuple(summed.axis or ()) != (0,):
        return None
    rows = _summed_rows(recorder, made_by, total)
    found = None if rows is None else item_of(rows)
    if found is None or length.affine != (1, found.shift) or \
            length.origins != frozenset([(found.leaf, -1 - found.k)]):
        return None
    recorder.droppable.append(made_by)
    lengths.spend_reads(recorder, length.origins)
    return chainer.functions.mean(rows, axis=0, keepdims=summed.keepdims)


def _summed_rows(recorder, node, total):
    """The Variable ``node``, a sum making ``total``, summed: its creator's
    input, or, where backprop was off, one of the array the recording
    holds for the node's input; ``None`` if it holds none."""
    if total.creator is not None:
        return total.creator.inputs[0].get_variable()
    wanted = node.inputs[0]
    array = next((a for a in reversed(recorder.alive)
                  if recorder.values.get(id(a)) is wanted), None)
    return None if array is None else \
        chainer.Variable(array, requires_grad=False)


def _means_of_items(graph, values, users, sized):
    """Are ``values`` (a list's items) each pooled by a sum over its rows
    divided by its length (:func:`_divided_by_length`) and stacked? Their
    lengths are then read for that alone, as the mean joined reads
    them, or the joined recording tells otherwise (:func:`take_joins`)."""
    for value in values:
        found = _pool_of(graph, value, values, users, sized)
        if found is None or found[1] is found[0].outputs[0]:
            return False
    return True


def _chain_end(graph, value, values, users, ends, sized=None):
    """``(node, its input)``: the one reader that ``ends(node)`` accepts
    that the chain of functions of the item ``value`` alone
    (:func:`_applied_to_item`, each its one reader, but for ``sized``,
    reading the items' lengths) ends in; else ``None``."""
    while True:
        readers = _item_readers(users, value, sized)
        if len(readers) != 1 or readers[0] is None:
            return None
        node = readers[0]
        if ends(node):
            return node, value
        if not _applied_to_item(graph, node, value, values):
            return None
        value = node.outputs[0]


def _last_of_each(graph, values, users):
    """The value the chain of functions of each of ``values`` (a list's
    items) alone ends in (:func:`_applied_to_item`, each its one reader),
    in order."""
    found = []
    for value in values:
        while True:
            readers = users.get(value, [])
            if len(readers) != 1 or readers[0] is None or \
                    not _applied_to_item(graph, readers[0], value, values):
                break
            value = readers[0].outputs[0]
        found.append(value)
    return found


def _item_readers(users, value, sized):
    """The nodes reading ``value`` but ``sized`` (reading the lengths of a
    list's items into an array) and those reading its length alone
    (``python.size``: ``len(x)``, which the joined recording reads as the
    item's, or refuses)."""
    return [n for n in users.get(value, []) if n is not sized and not (
        n is not None and n.op == 'python.size')]


def _linked_whole(values, users):
    """Do ``values`` (a list's items) go, all of them in order and nothing
    else, into one call of an N-step link (sequences of features:
    ``self.lstm(None, None, xs)``, or ``self.lstm(hx, cx, xs)``)?"""
    node = _one_reader(values, users)
    if node is None or not _is_n_step_link(node):
        return False
    n_states = _n_states(node)
    if node.inputs[n_states:n_states + len(values)] != list(values):
        return False
    return _read_whole(node.outputs[n_states:], users)


#: The nodes reading an N-step link's output sequences whole, each
#: such node of a joined call's segments.
_WHOLE_READERS = ('Concat', 'PadSequence', 'TimeMajorItems')


def _read_whole(outs, users):
    """Are an N-step link's output sequences ``outs`` unread, or read only
    by nodes a joined call makes of their rows: together by one node
    (``F.concat(ys, axis=0)``, ``F.pad_sequence(ys)``), or each by one
    node reducing it over its rows or taking its first or last row, all
    then stacked, or concatenated, in order or reversed (``[y[-1] for y in
    ys]``: ``reduced_segments``); or both ways (the rows padded for
    attention and each last row)?"""
    readers = _readers(outs, users)
    if not readers:
        return True
    if None in readers:
        return False
    if len(readers) == 1:
        return next(iter(readers)).op in _WHOLE_READERS
    together = set(reader for reader in readers
                   if reader.op in _WHOLE_READERS and
                   reader.inputs == list(outs))
    each = [[r for r in users.get(out, []) if r not in together]
            for out in outs]
    if len(together) > 1 or any(len(r) != 1 for r in each):
        return False
    joined_by = set(_joined_by(r[0]) for r in each)
    reduced = [r[0].outputs[0] for r in each]
    joins = [users.get(v, []) for v in reduced]
    if len(joined_by) != 1 or None in joined_by or \
            any(len(j) != 1 or j[0] is not joins[0][0] for j in joins):
        return False
    join = joins[0][0]
    return join is not None and join.op == joined_by.pop() and \
        dict(join.attrs).get('axis') == 0 and \
        join.inputs in (reduced, reduced[::-1])


#: The index of a recorded GetItem taking one row of an item, as printed
#: (``y[-2]``: ``'[-2]'``).
_ONE_ROW = re.compile(r'\[-?\d+\]$')

#: The index of a recorded GetItem that takes an item's first or last
#: row (:data:`_PICKS`, as printed), and the node joining the rows of all.
_PICKED_READ = dict((array_ops.index_label(index),
                     'Concat' if _keeps_axis(index) else 'Stack')
                    for index, _ in _PICKS)


def _joined_by(node):
    """``'Stack'`` or ``'Concat'``, the node that joins what ``node``
    makes of one item where it reduces the item over its rows or takes
    its first or last row (the axis kept: ``'Concat'``); else ``None``."""
    attrs = dict(node.attrs)
    if node.op == 'GetItem':
        label = attrs.get('slices')
        return 'Stack' if _ONE_ROW.match(label or '') else \
            _PICKED_READ.get(label)
    if node.op not in _POOLS or attrs.get('axis') != (0,):
        return None
    return 'Concat' if attrs.get('keepdims') else 'Stack'


def as_plain(value):
    """``value`` (what the forward returns) with each joined list in it
    (:class:`JoinedList`, :class:`Segments`, ...; in tuples, lists and
    dicts) a plain list or tuple again."""
    if is_joined(value):
        return (list if isinstance(value, list) else tuple)(
            as_plain(v) for v in value)
    if type(value) in (list, tuple):
        return type(value)(as_plain(v) for v in value)
    if type(value) is dict:
        return dict((k, as_plain(v)) for k, v in value.items())
    return value


def _draws_as_one(graph, values, templates):
    """Do the random functions (dropout) that a recording made item by item
    applies to each of ``values`` (a list's items, or values made of each
    alone) draw for one item after the other, nothing drawing in between
    (``[F.dropout(self.embed(x)) for x in xs]``), the same functions with
    the same settings for every item? Then, joined, each may draw for the
    rows of all at once: the same numbers, in the same order. Two such
    functions alternate (``F.dropout(F.tanh(F.dropout(...)))`` of each
    item), which draws for all the rows would not, and so do the items
    visited in another order, or dropped out at ratios of their own (the
    settings of the recorded functions, ``templates``). ``None`` where
    nothing drew for an item (a recording in test mode: how they draw is
    not seen)."""
    item_of = dict((v, k) for k, v in enumerate(values))
    drawn = []  # the item (None: another value) of each random node
    made = collections.defaultdict(list)  # item: its random functions
    for node in graph.nodes:
        found = set(item_of[v] for v in node.inputs if v in item_of)
        k = found.pop() if len(found) == 1 else None
        if k is not None:
            item_of.update((out, k) for out in node.outputs)
        _note_sequences_out(node, item_of)
        if ops.is_impure(node.op):
            drawn.append(k)
            if k is not None:
                made[k].append((node.op, repr(node.attrs), _settings(
                    templates.get(node))))
    if not made:
        return None
    if len(made) != len(values) or \
            len(set(tuple(functions) for functions in made.values())) != 1:
        return False
    expected = None  # the item the run of draws has reached
    for k in drawn:
        if expected is not None and k != expected:
            return False
        if k is not None and k != (expected or 0):
            return False
        expected = None if k is None or k + 1 == len(values) else k + 1
    return expected is None


def _note_sequences_out(node, item_of):
    """Where ``node`` is an N-step link's call, notes each of its output
    sequences as made of its input sequence's item (``item_of``)."""
    if node.op not in ('NStepRNN', 'NStepRNNDropout'):
        return
    n_states = _n_states(node)
    for out, seq in zip(node.outputs[n_states:], node.inputs[n_states:]):
        if seq in item_of:
            item_of[out] = item_of[seq]


def _settings(template):
    """The settings of a recorded Chainer function (:func:`settings_of`),
    else ``None``."""
    return settings_of(template) \
        if isinstance(template, chainer.FunctionNode) else None


def _parts_draw_as_one(graph, values, templates):
    """Do the random functions a recording made item by item applies to
    the parts ``F.split_axis`` cut of as many rows as ``values`` (a list's
    items, joined by ``F.concat``) draw for one part after the other
    (:func:`_draws_as_one`: ``[F.dropout(e) for e in exs]`` of
    ``sequence_embed``'s parts), and the items' own as well? ``None``
    where nothing drew for them (:func:`_draws_as_one`)."""
    found = [_draws_as_one(graph, values, templates)] + [
        _draws_as_one(graph, node.outputs, templates) for node in graph.nodes
        if node.op == 'SplitAxis' and len(node.outputs) == len(values)]
    if False in found:
        return False
    return None if all(f is None for f in found) else True


def _applied_to_item(graph, node, value, values):
    """Is ``node`` a function of the item ``value`` alone (of ``values``,
    a list's items) that :func:`applied_to_items` applies to the rows of
    all: a :data:`ROW_WISE` function of it, one of :data:`ALONG_ROWS`
    along another axis than its rows', ``x[::-1]`` of it, or
    ``F.concat`` on the first axis of it and constants (``numpy.hstack``
    of a 1-d item)?"""
    others = [v for v in node.inputs if v is not value]
    if node.op in ROW_WISE:
        return node.inputs[0] is value and not set(others) & set(values)
    if node.op in ALONG_ROWS:
        axis, ndim = dict(node.attrs).get('axis'), len(value.shape)
        return node.inputs == [value] and type(axis) is int and \
            ndim > 1 and axis % ndim != 0
    if node.op == 'ndarray.__getitem__':
        index = _index_of(graph.templates.get(node))
        return is_item_index(index)
    if node.op == 'numpy.concatenate' and \
            not _on_the_first_axis(graph.templates.get(node)) or \
            node.op == 'numpy.hstack' and len(value.shape) != 1:
        return False
    return node.op in ('Concat', 'numpy.concatenate', 'numpy.hstack') and \
        dict(node.attrs).get('axis', 0) == 0 and \
        len(others) == len(node.inputs) - 1 and \
        all(v.kind == 'const' for v in others)


def _on_the_first_axis(template):
    """Is ``template`` (``traced.record_call``'s) that of
    ``numpy.concatenate(arrays)`` on the first axis?"""
    return template is not None and template[0] == 'numpy' and \
        len(template[2][0]) == 1 and template[2][1] in ({}, {'axis': 0})


def _index_of(template):
    """The index of ``x[index]`` recorded with ``template`` (``('numpy',
    fn, ((x, index), kwargs))``, ``traced.record_call``), or ``None``."""
    if template is None or template[0] != 'numpy' or \
            len(template[2][0]) != 2:
        return None
    return template[2][0][1]


def _is_n_step_link(node):
    """Is ``node`` an N-step link's call? Its states may be zeros, computed
    or arguments (whose second axis a joined call opens with the items'
    number: ``runtime.batch.with_states_passed``)."""
    return node.op in ('NStepRNN', 'NStepRNNDropout')


def _n_states(node):
    """How many states (``hx``, and ``cx`` for an LSTM) an N-step link's
    node takes first."""
    return 2 if dict(node.attrs).get('cell') == 'lstm' else 1


def _sizes_of(values, users):
    """The ``python.sizes`` node reading the first axis of each of
    ``values``, in order, if one does; else ``None``."""
    for node in users.get(values[0], []) if values else ():
        if node is not None and node.op == 'python.sizes' and \
                node.inputs == values and \
                dict(node.attrs)['axes'] == (0,) * len(values):
            return node
    return None


def _join_of_readers(path, readers):
    """The :class:`Join` of the list at ``path`` that each of ``readers``
    (of its first item), reading it whole, would be, the same for all
    (``xp.concatenate(ts)`` and ``F.concat(ts, axis=0)`` of one list);
    else ``None``."""
    found = set(None if node is None else _join_of(path, node)
                for node in readers)
    return found.pop() if len(found) == 1 else None


def _reader_of(values, users, j, shapes_read, sized=None, rows_read=False):
    """``(nodes, None)``: the nodes reading ``values`` (but for ``sized``,
    their lengths), each every one once and in order, the op ``j`` joins
    for (the same op, once or more), whose shape the forward's Python did
    not read (but, ``rows_read``, of segments joined: a joined recording
    gets the rows the call passed for them, whose length is a symbol,
    ``len(xp.concatenate(ts))``); else ``(None, why)``."""
    readers = None
    for value in values:
        found = _item_readers(users, value, sized)
        if not found or None in found or value in shapes_read or \
                readers not in (None, set(found)):
            return None, 'an item of %s is read otherwise than by one op ' \
                'taking the whole list' % _name(j.path)
        readers = set(found)
    if any(node.inputs != values or not j.matches(node) or
           node.outputs[0] in shapes_read and j.kind != 'pad' and
           not rows_read for node in readers):
        return None, '%s is not read whole by one %s' % (
            _name(j.path), {'pad': 'F.pad_sequence', 'concat': 'F.concat',
                            'segments': 'F.concat',
                            'stack': 'F.stack'}[j.kind])
    return sorted(readers, key=id), None


def _at(loc):
    return '' if loc is None else ' at ' + errors.short_location(loc)


def _name(path):
    return str(path[1]) if path[0] == 'kwargs' else 'argument %d' % path[1]
