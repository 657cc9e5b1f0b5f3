"""Lists the forward sorts by the lengths of their items.

Chainer's functional N-step RNNs (``F.n_step_lstm`` and its kin) and
``F.transpose_sequence`` take sequences sorted by decreasing length, so a
forward given a list in any order sorts it itself: ``sorted(xs, key=len,
reverse=True)``, or ``sorted(zip(xs, ts), key=lambda p: len(p[0]),
reverse=True)`` with the labels. Run as Python runs it, the order is read
from the lengths, and each combination of them would be an entry.

While recording, ``sorted`` of the items of list arguments by the lengths
of one list's items (a key giving ``len(x)``, ``x.shape[0]`` or their
negation, as a :class:`lengths.Length`) is noted (:class:`Sort`) instead
of comparing the lengths. ``joining.found_joins`` takes such a list in its
sorted order: its :class:`joining.Join` has an ``order``, and each call
joins its items sorted so, by a stable sort as Python's (the lists sorted
with it, by the same permutation). The recorded forward then gets each item
where the caller put it, taken from its sorted position
(``joining.items_of``), and its ``sorted`` gives the items back in the
order of those positions, reading no length: the program runs on sorted
items whatever order a call's list comes in. A recording item by item keeps
the lengths sorted in its key; a joined one whose forward orders such items
otherwise is not taken (``recorder.orders_read``: ``joining.take_joins``).
"""

import builtins
import collections

import numpy

from chainerjit.frontend import _keys
from chainerjit.frontend import lengths

_state = _keys.recording  # this thread's

#: What a recording item by item did with the lengths it sorted by.
SORTED = 'compared by sorted()'

#: The builtins, as they are when no forward is recorded.
_len, _sorted = builtins.len, builtins.sorted


class Sort(collections.namedtuple('Sort', 'columns key descending loc')):
    """A ``sorted`` of the items of list arguments by the lengths of one
    list's, recorded item by item: ``columns``, for each position in the
    elements sorted (an item, or a tuple of items of several lists), the
    IR values of the items there (the arguments', or the rows of a list
    packed), in the sorted order; ``key``, the column whose lengths
    decide; ``descending``, the direction; ``loc``, the line."""

    __slots__ = ()


def recording_sorted(builtin_sorted, recorder):
    """``sorted()`` while recording, called by the forward's code: of the
    items of list arguments by their lengths, :func:`_by_lengths`; else
    ``sorted()``'s, comparing as the forward's code."""
    @lengths.for_the_forward
    def sorted_(iterable, /, *, key=None, reverse=False):
        loc = None if _state.recorder is not recorder or \
            recorder.depth or key is None else lengths.forward_line(1)
        if loc is None:
            return builtin_sorted(iterable, key=key, reverse=reverse)
        elements = list(iterable)
        before = _Reads(recorder)
        keys = list(map(key, elements))  # (len() in key: the forward's)
        after = _Reads(recorder)
        found = None if after.uses_since(before) else _by_lengths(
            recorder, elements, keys, reverse, loc)
        if found is not None:
            after.take_back_since(before)
            return found
        if any(_sorted_position(recorder, m) is not None
               for e in elements for m in _members(e) or ()):
            recorder.orders_read.append(loc)
        # (each key once, as Python's sorted computes it)
        return [elements[i] for i in builtin_sorted(
            range(_len(elements)), key=keys.__getitem__, reverse=reverse)]
    return sorted_


def _by_lengths(recorder, elements, keys, reverse, loc):
    """``elements`` sorted, where their ``keys`` are the lengths (or their
    negation) of the items of one list at one position of each (an item,
    or a tuple of items of several lists): of a recording item by item,
    noted as a :class:`Sort`; of a joined one, the elements in the order
    of their items' sorted positions, where the call sorted their lists so
    (:func:`_in_joined_order`). Else ``None``."""
    if _len(elements) < 2:  # (of one: itself, whatever its key)
        return list(elements)
    members = [_members(e) for e in elements]
    if None in members or _len(set(_len(m) for m in members)) != 1:
        return None
    if not all(type(k) is lengths.Length and _len(k.origins) == 1 and
               k.affine in ((1, 0), (-1, 0)) for k in keys):
        return None
    column = _key_column(members, keys)
    if column is None:
        return None
    descending = reverse != (keys[0].affine[0] == -1)
    order = _sorted(range(_len(elements)), key=lambda i: int.__int__(
        keys[i]), reverse=reverse)
    positions = [_sorted_position(recorder, m) for m in members[0]]
    if any(p is not None for p in positions):
        return _in_joined_order(recorder, elements, members, column,
                                descending, order, loc)
    values = [[recorder.values.get(id(m)) for m in ms] for ms in members]
    if any(None in row for row in values):
        return None
    recorder.sorts.append(Sort(
        tuple(tuple(values[i][c] for i in order)
              for c in range(_len(members[0]))),
        column, descending, loc))
    recorder.length_uses.append(lengths.Use(
        tuple(_sorted(set(next(iter(k.origins)) for k in keys))), SORTED,
        loc, terms=lengths.ITEMS))
    return [elements[i] for i in order]


def _in_joined_order(recorder, elements, members, column, descending,
                     order, loc):
    """``elements`` of a joined recording in the order of their items'
    positions in the lists the call sorted, where every item is of such a
    list, each element's at one position, those of ``column`` of the list
    the others were sorted by, in the direction ``descending``, and that is
    the ``order`` of their lengths; else ``None``. The iterations of those
    lists on the line (``zip(xs, ts)``) are no count of their items."""
    found = [[_sorted_position(recorder, m) for m in ms] for ms in members]
    if any(None in row for row in found):
        return None
    by = found[0][column].join.path
    if any(row[column].join.path != by or p.k != row[0].k or
           p.join.order != (by, descending) or p.n != _len(elements)
           for row in found for p in row):
        return None
    ks = [row[0].k for row in found]
    if _sorted(range(_len(ks)), key=ks.__getitem__) != order or \
            _sorted(ks) != list(range(_len(ks))):
        return None
    counts = set(p.count for row in found for p in row)
    recorder.length_uses[:] = [
        use for use in recorder.length_uses
        if use.what != lengths.ITERATED or use.loc != loc or
        not set(use.origins) <= counts]
    return [elements[i] for i in order]


class Position(collections.namedtuple('Position', 'join k n count')):
    """Where an item of a list a call sorted is: its ``joining.Join``, its
    position ``k`` among the ``n`` sorted items, and the origin of their
    number (the joined array's first axis)."""

    __slots__ = ()


def note_positions(items, join, count):
    """Notes ``items``, the items of a joined list the call sorted, in
    their sorted order (:class:`Position`)."""
    recorder = _state.recorder
    for k, item in enumerate(items):
        recorder.sorted_items[id(lengths.array_of(item))] = Position(
            join, k, _len(items), count)


def _sorted_position(recorder, member):
    return recorder.sorted_items.get(id(lengths.array_of(member)))


def _members(element):
    """The arrays ``element`` of a list sorted holds (itself, or a tuple of
    them), or ``None``."""
    found = element if type(element) is tuple else (element,)
    return found if found and all(
        isinstance(m, numpy.ndarray) for m in found) else None


def _key_column(members, keys):
    """The position in every element whose item's length each key is,
    the same for all; else ``None``."""
    columns = set()
    for ms, k in zip(members, keys):
        origin = next(iter(k.origins))
        at = [c for c, m in enumerate(ms)
              if lengths.origin_of(m, 0) == origin]
        if _len(at) != 1:
            return None
        columns.add(at[0])
    return columns.pop() if _len(columns) == 1 else None


class _Reads(object):
    """What the recording has noted of the sizes the forward read, at one
    time: the reads a key computing lengths makes, which a sort by them
    takes back."""

    _LISTS = ('length_uses', 'item_length_reads', 'width_uses')
    _SETS = ('length_reads', 'size_read_lines', 'shapes_read')

    def __init__(self, recorder):
        self.recorder = recorder
        self.sizes = dict((name, _len(getattr(recorder, name)))
                          for name in self._LISTS)
        self.sets = dict((name, set(getattr(recorder, name)))
                         for name in self._SETS)

    def uses_since(self, before):
        """Did the forward use a size otherwise than by reading it since
        ``before``?"""
        return any(self.sizes[name] > before.sizes[name]
                   for name in ('length_uses', 'width_uses'))

    def take_back_since(self, before):
        """Takes back what was noted between ``before`` and this time
        (what was noted since stays)."""
        for name in self._LISTS:
            del getattr(self.recorder, name)[before.sizes[name]:
                                             self.sizes[name]]
        for name in self._SETS:
            getattr(self.recorder, name).difference_update(
                self.sets[name] - before.sets[name])


def sorted_lists(lists, sorts):
    """``lists`` (``(path, item values, the caller's items, the items'
    leaves)`` of the list arguments recorded item by item) with those
    ``sorts`` sorted in their sorted order, and ``{path: (the path of the
    list sorted by, descending)}`` of them; ``None`` where a sort is of
    other items than all of list arguments', or sorts one twice."""
    at = dict((frozenset(map(id, values)), k) for k, (_, values, _, _)
              in enumerate(lists))
    lists, orders = list(lists), {}
    for sort in sorts:
        ks = [at.get(frozenset(map(id, column))) for column in sort.columns]
        if None in ks or any(lists[k][0] in orders for k in ks):
            return None
        for k, column in zip(ks, sort.columns):
            path, values, items, leaves = lists[k]
            moved = [[id(v) for v in values].index(id(v)) for v in column]
            lists[k] = (path, [values[i] for i in moved],
                        type(items)(items[i] for i in moved),
                        [leaves[i] for i in moved]
                        if _len(leaves) == _len(values) else leaves)
            orders[path] = (lists[ks[sort.key]][0], sort.descending)
    return lists, orders
