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
ARGSORTED = 'sorted by numpy.argsort'
SORTS = frozenset([SORTED, ARGSORTED])

#: The builtins, as they are when no forward is recorded.
_len, _sorted = builtins.len, builtins.sorted


class Sort(collections.namedtuple('Sort', 'columns key descending loc how',
                                  defaults=(None,))):
    """A ``sorted`` of the items of list arguments by the lengths of one
    list's, recorded item by item: ``columns``, for each position in the
    elements sorted (an item, or a tuple of items of several lists), the
    IR values of the items there (the arguments', or the rows of a list
    packed), in the sorted order; ``key``, the column whose lengths
    decide; ``descending``, the direction; ``loc``, the line; ``how``,
    ``None`` (Python's stable sort) or the :class:`Argsort` that sorted
    them."""

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
    _note_sorted(recorder, keys, SORTED, loc)
    return [elements[i] for i in order]


def _note_sorted(recorder, keys, what, loc):
    """Notes the lengths ``keys`` a recording item by item sorted by
    (``what``: :data:`SORTED`, :data:`ARGSORTED`), which its key holds."""
    recorder.length_uses.append(lengths.Use(
        tuple(_sorted(set(next(iter(k.origins)) for k in keys))), what,
        loc, terms=lengths.ITEMS))


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
           p.join.order != (by, descending, None) or
           p.n != _len(elements)
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
        if type(sort) is IndexSort:
            sort = sort.sort(lists)
            if sort is None:
                return None
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
            orders[path] = (lists[ks[sort.key]][0], sort.descending,
                            sort.how)
    return lists, orders


# --- orders as indexes: numpy.argsort of the lengths ------------------------

class Argsort(collections.namedtuple('Argsort', 'negated kind flipped')):
    """How ``numpy.argsort`` of the lengths of a list's items orders them
    (``inds = numpy.argsort([-len(x) for x in xs])``, then ``[xs[i] for i
    in inds]``): of the lengths negated or not, by the sort ``kind``, the
    order it gives reversed or not (``[::-1]``). NumPy's default sort is
    not stable: a call orders items as long as each other as the forward's
    own ``argsort`` does (:meth:`order`), by NumPy on the same array."""

    __slots__ = ()

    @property
    def descending(self):
        return self.negated != self.flipped

    def order(self, sizes):
        """The positions of items of ``sizes`` in this order."""
        found = numpy.argsort(numpy.array(
            [-n if self.negated else n for n in sizes]), kind=self.kind)
        return [int(i) for i in (found[::-1] if self.flipped else found)]


class IndexSort(object):
    """An ``argsort`` of the lengths of the items of a list argument,
    recorded item by item: ``keys``, the IR values of the items in the
    list's order; ``how``, its :class:`Argsort` (its flips as the
    forward read them, ``flips``: one, where it indexed lists by it);
    ``loc``, the line. :func:`sorted_lists` sorts by it every list
    argument of as many items."""

    def __init__(self, keys, how, loc):
        self.keys, self.how, self.loc = keys, how, loc
        self.flips = set()

    def sort(self, lists):
        """The :class:`Sort` of ``lists`` (as :func:`sorted_lists` takes
        them) this makes, or ``None``."""
        if _len(self.flips) != 1:
            return None
        how = self.how._replace(flipped=next(iter(self.flips)))
        ids = [id(v) for v in self.keys]
        key = next((k for k, (_, values, _, _) in enumerate(lists)
                    if [id(v) for v in values] == ids), None)
        if key is None:
            return None
        order = how.order([_len(a) for a in lists[key][2]])
        sorted_ = [k for k, (_, values, _, _) in enumerate(lists)
                   if _len(values) == _len(ids)]
        return Sort(tuple(tuple(lists[k][1][i] for i in order)
                          for k in sorted_),
                    sorted_.index(key), how.descending, self.loc, how)


class _Ordered(object):
    """What a :class:`SortOrder` reads: the :class:`IndexSort` it flips
    (recorded item by item), or, of a joined call, the sorted position of
    each item in the list's order (``positions``) and the origin of its
    length (``origins``), the order of the call's sort (``how``)."""

    def __init__(self, recorder, loc, note=None, positions=None,
                 origins=None, how=None):
        self.recorder, self.loc, self.note = recorder, loc, note
        self.positions, self.origins, self.how = positions, origins, how

    def read(self):
        """Notes the order read otherwise than to index lists by it: a
        joined call may not take its items in the order it sorted them."""
        if self.positions is not None and _state.recorder is self.recorder:
            self.recorder.orders_read.append(self.loc)

    def indexes(self, order, flipped):
        """The indexes ``order`` (flipped or not) gives the forward, as
        it indexes a list by them: of a joined call, each the
        ``lengths.Length`` of its item's length (its use any but an
        index's is the item's length used), where they take the items in
        the order the call sorted them."""
        if self.note is not None:
            self.note.flips.add(flipped)
            return [int(i) for i in order]
        if self.how is None or flipped != self.how.flipped or any(
                self.positions[i] != k for k, i in enumerate(order)):
            self.read()
            return [int(i) for i in order]
        return [lengths.Length(int(i), frozenset([self.origins[i]]),
                               self.recorder.length_uses) for i in order]


class SortOrder(numpy.ndarray):
    """The order ``numpy.argsort`` of the lengths of a list's items gives
    while recording (:func:`recording_argsort`): iterated, indexed by an
    int, listed, as another int type or reversed, it gives the indexes of
    the items (:meth:`_Ordered.indexes`); read otherwise, the order is
    read (:meth:`_Ordered.read`)."""

    ordered = None
    flipped = False

    def __array_finalize__(self, obj):
        self.ordered = getattr(obj, 'ordered', None)
        self.flipped = getattr(obj, 'flipped', False)

    def _indexes(self):
        return self.ordered.indexes(self.view(numpy.ndarray), self.flipped)

    def __iter__(self):
        return iter(self._indexes())

    def tolist(self):
        return self._indexes()

    def __getitem__(self, index):
        if type(index) is slice and index == slice(None, None, -1):
            found = self.view(numpy.ndarray)[::-1].view(SortOrder)
            found.ordered, found.flipped = self.ordered, not self.flipped
            return found
        if type(index) is int or isinstance(index, numpy.integer):
            return self._indexes()[index]
        self.ordered.read()
        return self.view(numpy.ndarray)[index]

    def __len__(self):
        self.ordered.read()
        return numpy.ndarray.__len__(self)

    def astype(self, dtype, *args, **kwargs):
        found = self.view(numpy.ndarray).astype(dtype, *args, **kwargs)
        if found.dtype.kind not in 'iu':
            self.ordered.read()
            return found
        found = found.view(SortOrder)
        found.ordered, found.flipped = self.ordered, self.flipped
        return found

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        self.ordered.read()
        return getattr(ufunc, method)(*_plain(inputs), **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        self.ordered.read()
        return func(*_plain(args), **kwargs)


def _plain(values):
    """``values`` with each :class:`SortOrder` among them (or in a list
    or tuple of them) a plain array."""
    return tuple(v.view(numpy.ndarray) if isinstance(v, SortOrder) else
                 _plain(v) if type(v) in (list, tuple) else v
                 for v in values)


def note_orders_read(obj):
    """Notes each :class:`SortOrder` in ``obj`` (an op's arguments: a
    recorded node holds it as a constant) as read."""
    for value in obj if type(obj) in (list, tuple) else (obj,):
        if isinstance(value, SortOrder):
            value.ordered.read()
        elif type(value) in (list, tuple, dict):
            note_orders_read(list(value.values()) if type(value) is dict
                             else value)


def recording_argsort(argsort, recorder):
    """``numpy.argsort`` while recording, called by the forward's code on
    the lengths of the items of a list argument (``len(x)`` or
    ``x.shape[0]``, or all negated): their order, as a
    :class:`SortOrder`; recorded item by item, noted as an
    :class:`IndexSort`, the lengths sorted so in the key; of a joined call
    that sorted its lists so, the indexes of its items as it sorted them,
    the lengths not read. Else NumPy's."""
    @lengths.for_the_forward
    def argsort_(a, axis=-1, kind=None, order=None):
        loc = None if _state.recorder is not recorder or \
            recorder.depth or axis not in (-1, 0) or order is not None \
            else lengths.forward_line(1)
        how = None if loc is None else _argsort_of(a, kind)
        if how is None:
            return argsort(a, axis, kind, order)
        found = argsort([int.__int__(n) for n in a], kind=kind)
        made = found.view(SortOrder)
        made.ordered = _ordered(recorder, a, how, loc)
        return made
    argsort_.__wrapped__ = argsort
    return argsort_


def _argsort_of(keys, kind):
    """The :class:`Argsort` (not flipped) of ``numpy.argsort(keys,
    kind=kind)``, where ``keys`` is a list of the lengths of items, all
    negated or none; else ``None``."""
    if type(keys) not in (list, tuple) or not keys or not all(
            type(k) is lengths.Length and _len(k.origins) == 1 and
            k.affine in ((1, 0), (-1, 0)) for k in keys):
        return None
    if _len(set(k.affine for k in keys)) != 1:
        return None
    return Argsort(keys[0].affine[0] == -1, kind, False)


def _ordered(recorder, keys, how, loc):
    """The :class:`_Ordered` of an argsort of ``keys`` (lengths) by
    ``how``: of a joined call's sorted items, their positions, their
    lengths spent; else an :class:`IndexSort`, noted, their lengths a
    use in the key, read to sort alone."""
    origins = [next(iter(k.origins)) for k in keys]
    if all(lengths.is_item_length(o) for o in origins):
        at = _positions_by_origin(recorder)
        found = [at.get(o) for o in origins]
        ordered = _Ordered(recorder, loc, positions=[
            -1 if p is None else p.k for p in found], origins=origins)
        join = found[0].join if found[0] is not None else None
        if None in found or any(p.join is not join for p in found) or \
                found[0].n != _len(keys) or join.order[2] is None or \
                join.order[2]._replace(flipped=False) != how:
            ordered.read()
            return ordered
        ordered.how = join.order[2]
        lengths.spend_reads(recorder, set(origins))
        if _len(keys) > 1 and ordered.positions == list(range(_len(keys))):
            recorder.orders_unseen = True  # (any list reads in this order)
        return ordered
    values = [recorder.graph.inputs[leaf] if axis == 0 else None
              for leaf, axis in origins]
    if None in values:
        recorder.length_uses += lengths.uses_in(
            keys, 'passed to numpy.argsort', loc)
        return _Ordered(recorder, loc)
    note = IndexSort(values, how, loc)
    recorder.sorts.append(note)
    recorder.length_reads.difference_update(origins)  # (read to sort)
    _note_sorted(recorder, keys, ARGSORTED, loc)
    return _Ordered(recorder, loc, note=note)


def _positions_by_origin(recorder):
    """The :class:`Position` of each item of a list the joined call
    sorted, by the origin of its length."""
    found = {}
    for array_id, position in recorder.sorted_items.items():
        origins = recorder.length_leaves.get(array_id)
        if origins:
            found[origins[0]] = position
    return found
