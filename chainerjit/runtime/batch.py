"""Automatic dynamic batch: one program for every batch size.

A call that misses only because its batch size changed (axis 0 of every
array argument, one size for all of them) finds the entry compiled for
another batch size (:func:`sibling`). Where that entry's program is one
onnxruntime session, its graph is converted again with the batch dynamic
(:func:`dynamic_program`: ``onnx_graph.Builder`` with ``dynamic_batch``,
whose converters read the batch size from the input where the recording
had it), without recording again. The new session runs the call, and so
does eager Chainer; if they agree, the entry serves every batch size
(:class:`Batched`): its key and signature show axis 0 as ``B``
(``x: f32[B,784]``), and the first call at each further size is checked
against eager in the same way. Where they differ, or the session cannot
be built, the entry keeps its batch size and says why.

With ``backend='auto'``, an entry whose program the VM runs (it measured
faster at the recorded size) serves every batch size the same way where
onnxruntime can run it: the VM at the recorded size, the dynamic session at
the others (:func:`per_size`).

Where no session serves the sizes (training programs, ``backend='numpy'``,
an op without a converter), the call that missed is recorded again and the
VM's program compiled for any batch size, where every node reading the
batch's rows takes their number from its arrays (:func:`rows_batched`, as
``runtime.ragged`` serves sentences of any lengths); that entry
(:class:`RowsBatched`) replaces the one of the other size. A call that
changes several axes at once (the batch and the steps, a second length)
is compiled for any sizes of all, each group of axes that changed alike
one symbol (:func:`axes_sibling`, :class:`TwoAxes`). The axes a miss
opens are those the function's calls were seen at several sizes, in
either mode, whichever entries the cache holds (:class:`SizesSeen`). With
``jit(dynamic=True)`` the first call is compiled so, every axis the
program takes at any size open (:func:`every_axis_of`). Loops are followed
into their bodies; an entry whose trip counts are symbolic too reads its
key through :class:`TripsAndBatch`.
"""

import collections
import itertools

import chainer
import numpy

from chainerjit import errors
from chainerjit import ir
from chainerjit import ops
from chainerjit.backend import ort
from chainerjit.frontend import guards
from chainerjit.frontend import lengths
from chainerjit.frontend import scalars
from chainerjit.frontend import signature
from chainerjit.frontend import symbolic
from chainerjit.runtime import backends
from chainerjit.runtime import ragged

#: The symbol of the batch axis in keys and signatures.
BATCH = 'B'

#: The symbol of a second axis whose size changes (the words of a padded
#: batch) where the batch's does too (:class:`TwoAxes`).
WIDTH = 'W'

#: A program is recorded for any batch size (or size of another axis)
#: only at this size or more: a single row recorded broadcasts where
#: several would not, so which values have the rows is not seen. It then
#: serves a batch of one too, once the first such call agrees with eager.
MIN_SIZE = 2


class BatchAxis(object):
    """Reading a call's key where an axis of the arrays ``self.leaves`` is
    the batch (every array argument): the first, or ``self.axes`` each."""

    __slots__ = ()

    def generalize(self, key):
        """``(the key with the batch axes as 'B', [])``, or ``None`` where
        the call's batched arguments differ in batch size, or its batch is
        too small (:attr:`min_size`)."""
        size = self.size_of(key)
        if type(size) is not int or size < self.min_size:
            return None
        specs = list(key[3])
        for leaf, axis in self.batch_axes():
            spec = specs[leaf]
            shape = spec[0][:axis] + (self.symbol,) + spec[0][axis + 1:]
            specs[leaf] = (shape,) + tuple(spec[1:])
        return key[:3] + (tuple(specs),) + key[4:], []

    def size_of(self, key):
        """The call's batch size, or ``None``."""
        specs = key[3]
        sizes = set()
        for leaf, axis in self.batch_axes():
            if leaf >= len(specs) or not specs[leaf] or \
                    not signature.is_array_spec(specs[leaf]) or \
                    len(specs[leaf][0]) <= axis:
                return None
            sizes.add(specs[leaf][0][axis])
        return sizes.pop() if len(sizes) == 1 else None

    def signature_of(self, sig):
        """``sig`` with the batch axes shown as ``B``."""
        return sig.with_symbols([(leaf, (axis,)) for leaf, axis in
                                 self.batch_axes()], symbol=self.symbol)

    def batch_axes(self):
        """``[(leaf, axis), ...]``: where the batch is."""
        return list(zip(self.leaves, self.axes or (0,) * len(self.leaves)))


class Batched(BatchAxis, collections.namedtuple(
        'Batched', 'leaves axes kept guessed seen',
        defaults=(None, None, False, False))):
    """How an entry that one onnxruntime session runs at every batch size
    reads a call's key: ``leaves`` are the indexes of the arguments whose
    axis 0 is the batch (every array argument). ``kept``: the
    :class:`RowsBatched` of another axis whose size an entry compiled
    before already took at any value (:func:`width_sibling`), to keep.
    ``guessed``: ``kept`` are the axes ``jit(dynamic=True)`` asks to open
    from the first call (:func:`every_axis_of`), or the words of sentences
    of one word each (as many as the sentences), those the program cannot
    take at any size staying in the key without a word. ``seen``: the
    axes are those calls were seen at several sizes (:class:`SizesSeen`),
    any of them the batch: those symbolic trip counts take are left out
    (:meth:`without_axes`), and where the first cannot be open, the next
    is tried (:meth:`each_first`)."""

    __slots__ = ()
    min_size = 0
    symbol = BATCH

    def groups(self):
        """``[[(leaf, axis), ...], ...]``: the batch, then each axis
        kept."""
        return [self.batch_axes()] + [k.batch_axes()
                                      for k in kept_axes(self)]

    def without_axes(self, axes):
        """This ``Batched`` without ``axes``; ``None`` where none is
        left."""
        left = [[a for a in g if a not in axes] for g in self.groups()]
        left = [g for g in left if g]
        return _of_groups(left, self) if left else None

    def but_single_rows(self, key):
        """This ``Batched`` without its axes of one row at ``key`` (one
        row broadcasts: they stay in the key), where others are left;
        else itself."""
        specs = key[3]
        single = [(leaf, axis) for group in self.groups()
                  for leaf, axis in group if specs[leaf][0][axis] == 1]
        left = self.without_axes(single) if single else None
        return left or self

    def each_first(self):
        """This ``Batched``, then the same axes with each kept group as
        the batch in turn."""
        groups = self.groups()
        return [_of_groups(groups[k:k + 1] + groups[:k] + groups[k + 1:],
                           self) for k in range(len(groups))]


def _of_groups(groups, like):
    """A ``Batched`` as ``like`` of ``groups`` of ``(leaf, axis)``, the
    first the batch, the others kept (``W``, ``W2``, ...)."""
    (leaves, at), rest = zip(*groups[0]), [zip(*g) for g in groups[1:]]
    kept = tuple(RowsBatched(kept_leaves, None, kept_at, width_symbol(k))
                 for k, (kept_leaves, kept_at) in enumerate(rest, 1))
    return like._replace(leaves=leaves, axes=at if any(at) else None,
                         kept=kept or None)


class RowsBatched(BatchAxis, collections.namedtuple(
        'RowsBatched', 'leaves recorded axes symbol ones conditions',
        defaults=(None, BATCH, True, ()))):
    """How an entry whose VM program takes any batch size reads a call's
    key (:func:`why_fixed`): ``leaves`` as :class:`Batched`'s,
    ``recorded`` the batch size it was recorded at, ``symbol`` its name
    in keys and signatures. ``ones``: does it serve a single row too
    (until a call of one row gives another result than eager:
    :func:`without_one_row`)? ``conditions``: the comparisons of the size
    the forward's Python made (``lengths.Use.condition``: ``if T > 10:``),
    which a size it serves gives as recorded."""

    __slots__ = ()

    @property
    def min_size(self):
        return 1 if self.ones else MIN_SIZE

    def generalize(self, key):
        size = self.size_of(key)
        if type(size) is int and not all(
                lengths.holds(c, size) for c in self.conditions):
            return None
        return BatchAxis.generalize(self, key)

    def conditions_described(self):
        return [lengths.describe_condition(c, self.symbol)
                for c in self.conditions]

    def to_check(self, key, checked, symbols=()):
        """The call's ``('B', batch size)``, if it is to be checked against
        eager (``lengths.to_check_size``); else ``None``."""
        size = self.checked_at(key)
        seen = [c[1] for c in checked if c[:1] == (self.symbol,)]
        return size if lengths.to_check_size(size[1], seen) else None

    def checked_at(self, key):
        """How a call's batch size is noted when checked against eager:
        ``('B', size)`` of ``key`` (the recorded one for ``None``)."""
        return (self.symbol, self.recorded if key is None else
                self.size_of(key))


def _described(axes):
    """The conditions of ``axes`` (a :class:`RowsBatched`, or another
    kind, of none) as printed: ``'W > 10'``."""
    return axes.conditions_described() if type(axes) is RowsBatched else []


class TwoAxes(collections.namedtuple('TwoAxes', 'batch width')):
    """How an entry whose VM program takes any sizes of two axes reads a
    call's key: the batch (:class:`RowsBatched`, ``B``) and another axis
    of some of the arrays (``width``, ``W``: the words of padded ids), or
    several (a tuple: the words of lists joined apart, ``W``, ``W2``,
    ...). The first calls at each of ``lengths.CHECKED_SIZES`` new sizes of
    any axis are checked against eager: a batch size that changes seldom
    (an epoch's last batch) next to widths that change on every call is
    checked too."""

    __slots__ = ()

    @property
    def widths(self):
        """The :class:`RowsBatched` of each axis besides the batch."""
        return self.width if type(self.width) is tuple else (self.width,)

    def with_width(self, other):
        """These axes and the :class:`RowsBatched` ``other``."""
        return self._replace(width=self.widths + (other,))

    @property
    def conditions(self):
        """The comparisons of the sizes of every axis (``if T > 10:``)."""
        return sum((axes.conditions for axes in (self.batch,) + self.widths
                    if type(axes) is RowsBatched), ())

    def conditions_described(self):
        return sum((_described(axes) for axes in (self.batch,) +
                    self.widths), [])

    def generalize(self, key):
        """``(the key with every axis open, [])``, or ``None``."""
        general = self.batch.generalize(key)
        for width in self.widths:
            if general is None:
                return None
            general = width.generalize(general[0])
        return general

    def signature_of(self, sig):
        for axes in (self.batch,) + self.widths:
            sig = axes.signature_of(sig)
        return sig

    def to_check(self, key, checked, symbols=()):
        """The call's sizes, if they are to be checked against eager; else
        ``None``."""
        sizes = self.checked_at(key)
        if sizes in checked:
            return None
        # (Beside a symbolic loop, ``checked`` holds trip counts too.)
        mine = [c for c in checked if len(c) == len(sizes) and all(
            type(p) is tuple and p[:1] == n[:1] for p, n in zip(c, sizes))]
        for axis, size in enumerate(sizes):
            if lengths.to_check_size(size[1],
                                     set(c[axis][1] for c in mine)):
                return sizes
        return None

    def checked_at(self, key):
        """A call's sizes as noted when checked: ``(('B', n), ('W', m))``
        (the recorded ones for ``None``)."""
        return tuple(axes.checked_at(key)
                     for axes in (self.batch,) + self.widths)


def records_open(sizes, key):
    """May a program recorded at ``key``'s sizes leave the axes of
    ``sizes`` (a :class:`RowsBatched` or :class:`TwoAxes`) open: each at
    :data:`MIN_SIZE` or more?"""
    axes = (sizes.batch,) + sizes.widths if isinstance(sizes, TwoAxes) \
        else (sizes,)
    return sizes.generalize(key) is not None and \
        all(axis.size_of(key) >= MIN_SIZE for axis in axes)


def without_one_row(symbolic, checked):
    """``symbolic`` whose axes (:class:`RowsBatched`) that ``checked``, the
    sizes of a call checked against eager, has at one row no longer serve
    a single row; ``None`` where it has none at one row. A program that
    gave another result than eager for one row (``F.squeeze`` of the
    batch) then still serves the other sizes."""
    ones = set(symbol for symbol, size in _sizes_noted(checked)
               if size == 1)

    def served(axes):
        if type(axes) is RowsBatched:
            return axes._replace(ones=False) if axes.ones and \
                axes.symbol in ones else axes
        if type(axes) is TwoAxes:
            widths = tuple(served(w) for w in axes.widths)
            return axes._replace(batch=served(axes.batch), width=widths if
                                 type(axes.width) is tuple else widths[0])
        if type(axes) is TripsAndBatch:
            return axes._replace(batch=served(axes.batch))
        return axes
    narrowed = served(symbolic)
    return None if narrowed == symbolic else narrowed


def _sizes_noted(checked):
    """The ``(symbol, size)`` pairs of axes in ``checked`` (as
    ``to_check`` gives it: one pair, or tuples holding them beside trip
    counts)."""
    if type(checked) is not tuple:
        return
    if len(checked) == 2 and isinstance(checked[0], str) and \
            type(checked[1]) is int:
        yield checked
        return
    for part in checked:
        yield from _sizes_noted(part)


class TripsAndBatch(collections.namedtuple('TripsAndBatch',
                                           'trips batch')):
    """How an entry with symbolic trip counts (``frontend.symbolic``) whose
    VM program also takes any batch size (:class:`RowsBatched`) reads a
    call's key."""

    __slots__ = ()

    @property
    def conditions(self):
        return getattr(self.trips, 'conditions', ()) + getattr(
            self.batch, 'conditions', ())

    def conditions_described(self):
        return [lengths.describe_condition(c) for c in getattr(
            self.trips, 'conditions', ())] + _described(self.batch)

    def untied(self, key, names):
        """The trip counts' ``untied`` (``frontend.symbolic``)."""
        return self.trips.untied(key, names)

    def generalize(self, key):
        """``(the key with both kinds of sizes open, the trip counts)``,
        or ``None``."""
        general = self.trips.generalize(key)
        if general is None:
            return None
        batched = self.batch.generalize(general[0])
        return None if batched is None else (batched[0], general[1])

    def to_check(self, key, checked, symbols):
        """``(trip counts, ('B', batch size))`` (the trip counts of each
        length, where there are several) where any is to be checked
        against eager (new trip counts, as a symbolic loop checks them, or
        a batch size as :class:`RowsBatched` does); else ``None``. A check
        that passes notes each as verified."""
        trips = self.trips.checks(symbols)
        if not getattr(self.trips, 'more', ()):
            trips = (trips,)  # the trip counts of one length
        size = self.batch.to_check(key, checked)
        if all(t in checked for t in trips) and size is None and \
                not self.trips.both_to_check(trips, checked):
            return None
        return trips + self.trips.both(trips) + (self.batch.checked_at(key),)


def open_axes(symbolic):
    """The ``(leaf, axis)`` whose sizes an entry's symbolic sizes leave
    open (those of :class:`BatchAxis` and :class:`TwoAxes`, also beside
    number arguments), or that a
    :class:`Batched` asks to leave open, with the axis it keeps."""
    if isinstance(symbolic, TwoAxes):
        return set().union(*(open_axes(axes) for axes in
                             (symbolic.batch,) + symbolic.widths))
    if isinstance(symbolic, TripsAndBatch):
        return open_axes(symbolic.batch)
    if isinstance(symbolic, scalars.SizesAndNumbers):  # (and numbers)
        return open_axes(symbolic.sizes)
    if isinstance(symbolic, Batched):
        return set(symbolic.batch_axes()).union(*(
            open_axes(kept) for kept in kept_axes(symbolic)))
    if isinstance(symbolic, BatchAxis):
        return set(symbolic.batch_axes())
    return set()


def too_short_to_open(key, axes):
    """Are the sizes of ``key`` at every ``(leaf, axis)`` of ``axes`` too
    short to tell whether they could be open: one row broadcasts, a loop
    of two steps cannot roll? An entry recorded there keeps them, and a
    later call at larger sizes may still open them."""
    specs = key[3]
    return all(specs[leaf][0][axis] <= TOO_SHORT for leaf, axis in axes)


#: The largest size :func:`too_short_to_open` finds too short.
TOO_SHORT = 2


def compared_symbols(symbolic_sizes):
    """The names of an entry's symbolic sizes (``T``, ``B``, ``W``) that
    the forward's Python compared (``if T > 10:``, a ``while`` test): the
    entry serves the sizes on one side only, as its guards check, which
    a graph without them (ONNX's) cannot."""
    if isinstance(symbolic_sizes, scalars.SizesAndNumbers):
        symbolic_sizes = symbolic_sizes.sizes
    if isinstance(symbolic_sizes, TripsAndBatch):
        return compared_symbols(symbolic_sizes.trips) | compared_symbols(
            symbolic_sizes.batch)
    if isinstance(symbolic_sizes, TwoAxes):
        return set().union(*(compared_symbols(axes) for axes in
                             (symbolic_sizes.batch,) + symbolic_sizes.widths))
    if isinstance(symbolic_sizes, symbolic.Symbolic):
        return set(part.symbol for part in symbolic_sizes.parts()
                   if part.conditions)
    if isinstance(symbolic_sizes, RowsBatched) and \
            symbolic_sizes.conditions:
        return {symbolic_sizes.symbol}
    return set()


def kept_axes(batched):
    """The :class:`RowsBatched` a :class:`Batched` keeps (``kept``: one,
    or a tuple of them), as a tuple."""
    kept = batched.kept
    return kept if type(kept) is tuple else () if kept is None else (kept,)


def of_joined(key, joined, count):
    """The ``Batched`` of a call with joined lists (``{leaf: Join}``,
    ``frontend.joining``) of ``count`` items: axis 0 of every array of
    that size (but joined segments), and the words of a padded list or of
    segments (:data:`WIDTH`, kept; ``W2``, ... for lists of items of
    other lengths); the widths alone for fewer than :data:`MIN_SIZE`
    items (a sentence pair: its source's and its target's), or ``None``
    where no list is padded or cut then."""
    specs = key[3]
    widths = collections.OrderedDict()  # by symbol: (leaves, axes)
    for leaf, j in sorted(joined.items(), key=lambda item: item[1].width):
        if j.kind in ('pad', 'segments'):
            symbol = width_symbol(j.width + 1)
            leaves, axes = widths.get(symbol, ((), ()))
            widths[symbol] = (leaves + (leaf,),
                              axes + (int(j.kind == 'pad'),))
    if count < MIN_SIZE:  # the widths alone, the batch fixed
        if not widths:
            return None
        (leaves, axes), others = list(widths.values())[0], tuple(
            RowsBatched(width_leaves, None, width_axes, symbol)
            for symbol, (width_leaves, width_axes) in
            list(widths.items())[1:])
        return Batched(leaves, axes, others + (_FIXED_BATCH,) if others
                       else _FIXED_BATCH)
    leaves = tuple(leaf for leaf, spec in enumerate(specs)
                   if signature.is_array_spec(spec) and spec[0] and
                   spec[0][0] == count and (
                       leaf not in joined or joined[leaf].kind != 'segments'))
    kept = tuple(RowsBatched(width_leaves, None, axes, symbol)
                 for symbol, (width_leaves, axes) in widths.items())
    return Batched(leaves, None, kept[0] if len(kept) == 1 else kept or None)


#: The ``Batched.kept`` of a call whose batch is fixed: the axis that
#: changes is another (the width, ``W``).
_FIXED_BATCH = RowsBatched((), None, (), BATCH)


def with_states_passed(batched, graph):
    """``batched``, a joined call's (:func:`of_joined`), with the states
    its N-step links take as arguments (``hx``, ``(layers, B, H)``): the
    second axis of each is the number of items, the batch (their first,
    the layers, is not, though as many at a call)."""
    if batched is None or not batched.leaves:
        return batched
    states = set(graph.inputs.index(v) for node in graph.nodes
                 if node.op in _PACKED_LINKS
                 for v in ops.nstep.given_states(node) if v.kind == 'input')
    if not states:
        return batched
    axes = batched.axes or (0,) * len(batched.leaves)
    found = [(leaf, axis) for leaf, axis in zip(batched.leaves, axes)
             if leaf not in states] + [(leaf, 1) for leaf in sorted(states)]
    leaves, axes = zip(*found)
    return batched._replace(leaves=leaves, axes=axes)


#: The N-step links of a joined call's sequences (``ops.nstep``).
_PACKED_LINKS = frozenset(['PackedNStepRNN', 'PackedNStepRNNDropout'])


def batch_part(symbolic):
    """The :class:`RowsBatched` of an entry's symbolic sizes, or ``None``."""
    if isinstance(symbolic, TripsAndBatch):
        return symbolic.batch
    return symbolic if isinstance(symbolic, RowsBatched) else None


def sibling(cache, key, backend):
    """``(entry, Batched)``: a cached entry whose program may serve other
    batch sizes (:func:`_widens`) and whose key differs from ``key`` only
    in the batch size of every array argument; else ``None``."""
    for entry, general in _alike_entries(
            cache, key, lambda entry: _widens(entry, backend)):
        leaves = _batched_leaves(entry.key[3], general[3])
        if leaves:
            return entry, Batched(leaves)
    return None


def _alike_entries(cache, key, takes):
    """``(entry, key as the entry reads it)`` for each cached entry that
    ``takes(entry)`` accepts whose key, its symbolic sizes left open, is
    ``key`` but for the arrays' specs (the same mode, the same Python
    arguments)."""
    for entry in cache.entries():
        if not takes(entry):
            continue
        general = entry.symbolic.generalize(key) if entry.symbolic \
            else (key, [])
        if general is not None and entry.key[:3] == general[0][:3] and \
                entry.key[4:] == general[0][4:]:
            yield entry, general[0]


def widened_sibling(cache, key):
    """``(entry, Batched)`` of the entry a call that missed for the sizes
    of some axes of its arrays widens (:func:`width_sibling`,
    :func:`rows_sibling`, :func:`axes_sibling`, :func:`trips_sibling`),
    one whose loops rolled with symbolic trip counts first: opening its
    batch keeps both (an entry of a length too short to roll, of the
    batch open, would take the length for the batch). Else ``(None,
    None)``."""
    found = [f for f in (finder(cache, key) for finder in (
        width_sibling, rows_sibling, axes_sibling, trips_sibling))
        if f is not None]
    return next((f for f in found
                 if isinstance(f[0].symbolic, symbolic.Symbolic)),
                found[0] if found else (None, None))


def rows_sibling(cache, key):
    """``(entry, Batched)``: a compiled entry of the same mode whose key
    differs from ``key`` only in the batch size of some array arguments
    (the others, of fixed shapes, keep them), whose program the VM may
    come to run at any batch size
    (:func:`rows_batched`); else ``None``."""
    for entry, general in _alike_entries(cache, key, lambda entry: (
            entry.program is not None and entry.batch_note is None and
            (entry.symbolic is None or _trips_only(entry)))):
        found = _batched_axes(entry.key[3], general[3], [
            name for name, _ in entry.signature.items])
        if found:
            leaves, axes = zip(*found)
            return entry, Batched(leaves, None if not any(axes) else axes)
    return None


def axes_sibling(cache, key):
    """``(entry, Batched)``: a compiled entry of the same mode, its program
    the VM's, of no symbolic sizes or of sizes it takes at any value
    (:class:`RowsBatched`, :class:`TwoAxes`), whose key differs from
    ``key`` in the sizes of several axes of array arguments at once (the
    batch and the length of sequences a program without a loop takes,
    ``x: f32[B,W,8]``; a decoder's target and source lengths, ``y:
    f32[B,W,8]``, ``enc: f32[B,W2,8]``), each group of axes that changed
    from one size to another one symbol: the batch (axis 0) asked as the
    batch where it changed, the others kept as widths
    (:func:`width_sibling`'s), with those the entry takes already, so
    that the VM's program may come to take any sizes of all
    (:class:`TwoAxes`); else ``None``, and where the axes are the items'
    of a list of several (``runtime.ragged`` follows those)."""
    for entry, general in _alike_entries(cache, key, lambda entry: (
            entry.program is not None and entry.batch_note is None and
            type(entry.symbolic) in (type(None), RowsBatched, TwoAxes))):
        groups = _changed_groups(entry.key[3], general[3])
        lists = _lists_of_several(entry.signature)
        if not groups or entry.symbolic is None and len(groups) < 2 or \
                any(ragged.list_of(entry.signature.items[leaf][0]) in lists
                    for axes in groups for leaf, _ in axes):
            continue  # (a list's items: runtime.ragged)
        taken = [r.batch_axes() for r in _open_groups(entry.symbolic)]
        groups = taken + groups
        # The batch: the axes 0 that changed or are open, else the first
        # axes that changed.
        first = next((k for k, axes in enumerate(groups)
                      if any(axis == 0 for _, axis in axes)), len(taken))
        leaves, at = zip(*groups.pop(first))
        kept = []
        for axes in groups:
            kept_leaves, kept_at = zip(*axes)
            kept.append(RowsBatched(kept_leaves, None, kept_at, _free_symbol(
                [r.symbol for r in kept])))
        return entry, Batched(leaves, None if not any(at) else at,
                              tuple(kept))
    return None


def _lists_of_several(sig):
    """The names of the list arguments of more than one item in ``sig``
    (a batch of one sentence's item is as an array argument)."""
    counts = collections.Counter(ragged.list_of(name)
                                 for name, _ in sig.items)
    return set(name for name, n in counts.items()
               if name is not None and n > 1)


def _changed_groups(old, new):
    """The ``(leaf, axis)`` where two keys differ in nothing but the sizes
    of axes of array leaves, grouped by the sizes they changed from and
    to, each leaf once in a group: the group of first axes first, if
    any. ``None`` where they differ otherwise, or a leaf changed two axes
    alike (a square)."""
    groups = collections.OrderedDict()
    for leaf, axes in _differing(old, new) or ():
        for axis in axes:
            groups.setdefault((old[leaf][0][axis], new[leaf][0][axis]),
                              []).append((leaf, axis))
    if any(len(set(leaf for leaf, _ in axes)) < len(axes)
           for axes in groups.values()):
        return None
    return sorted(groups.values(),
                  key=lambda axes: not any(axis == 0 for _, axis in axes))


def _open_groups(symbolic):
    """The :class:`RowsBatched` of the axes an entry takes at any size (but
    trip counts')."""
    if isinstance(symbolic, TwoAxes):
        return [symbolic.batch] + list(symbolic.widths)
    if isinstance(symbolic, TripsAndBatch):
        return _open_groups(symbolic.batch)
    return [symbolic] if isinstance(symbolic, RowsBatched) else []


def width_symbol(k):
    """The symbol of the ``k``-th axis besides the batch: ``W``, ``W2``,
    ..."""
    return WIDTH if k == 1 else '%s%d' % (WIDTH, k)


def _free_symbol(symbols):
    """The first of ``W``, ``W2``, ``W3``, ... not among ``symbols``."""
    k = 1
    while width_symbol(k) in symbols:
        k += 1
    return width_symbol(k)


def free_symbol(kept):
    """The symbol of the axis an entry asks for besides those it keeps
    (``kept``, :class:`RowsBatched`): ``B`` unless one of them has it."""
    symbols = [r.symbol for r in kept]
    return BATCH if BATCH not in symbols else _free_symbol(symbols)


def served_by(cache, entry):
    """The other entries of ``cache`` whose calls ``entry``, compiled for
    any sizes of one or two axes (its key's ``B`` and ``W``), serves: of
    the same mode and guards, their keys alike but for the sizes at those
    axes (fixed ones, of one row or more, or open)."""
    return [other for other in cache.entries() if other is not entry and
            other.program is not None and type(other.symbolic) in (
                type(None), RowsBatched, Batched, TwoAxes) and
            same_guards(other, entry) and _covers(entry.key, other.key) and
            _conditions_hold(entry, other)]


def _conditions_hold(entry, other):
    """Do the comparisons of sizes that ``entry`` is guarded by (``if T >
    10:``) go as recorded at the sizes of ``other``'s key (of fixed
    sizes), or guard ``other`` too (of symbolic ones)?"""
    conditions = getattr(entry.symbolic, 'conditions', ())
    if not conditions:
        return True
    if other.symbolic is None:
        return entry.symbolic.generalize(other.key) is not None
    theirs = set(getattr(other.symbolic, 'conditions', ()))
    if set(conditions) <= theirs:
        return True
    parts = _open_groups(entry.symbolic)
    return set(conditions) <= set(c for part in parts
                                  for c in part.conditions) and all(
        set(part.conditions) <= theirs if type(size) is not int else
        all(lengths.holds(c, size) for c in part.conditions)
        for part in parts for size in [part.size_of(other.key)])


def generalized_by(cache, entry):
    """The other entries of ``cache`` of fixed sizes (or of symbolic trip
    counts only) whose keys ``entry``'s symbolic sizes map to its own (the
    first call's entry, of a length and batch size, once a later one
    serves every length and batch size)."""
    return [other for other in cache.entries() if other is not entry and
            other.program is not None and same_guards(other, entry) and (
                other.symbolic is None and _maps_to(entry, other.key) or
                _with_trips(other) and _with_trips(entry) and
                _covers(entry.key, other.key) and
                _conditions_hold(entry, other))]


def short_ones_served_by(cache, entry):
    """The entries of ``cache`` of a batch open (:class:`RowsBatched`) at
    a length too short for their loops to roll, or of the steps open as
    rows too (:class:`TwoAxes`: a loop of two steps, unrolled), that
    ``entry``, of symbolic trip counts and a batch open
    (:class:`TripsAndBatch`), serves: of the same mode and guards, their
    keys alike but for the sizes ``entry`` leaves open, their lengths not
    below its least."""
    trips = getattr(entry.symbolic, 'trips', None)
    if not isinstance(trips, symbolic.Symbolic):
        return []
    return [other for other in served_by(cache, entry)
            if type(other.symbolic) in (RowsBatched, TwoAxes) and
            _long_enough(entry.key, other.key, trips)]


def _long_enough(general, key, trips):
    """Are the sizes of ``key`` at the axes ``general`` gives the trip
    counts' symbol at least ``trips.minimum``?"""
    return not any(
        size == trips.symbol and type(other) is int and
        other < trips.minimum
        for open_spec, spec in zip(general[3], key[3])
        if signature.is_array_spec(open_spec) and
        signature.is_array_spec(spec)
        for size, other in zip(open_spec[0], spec[0]))


def same_guards(a, b):
    """Do entries ``a`` and ``b`` guard the same Python values alike (an
    entry serves the calls its guards hold for only): the model's state
    alike where both guard it (one may leave out a number the other's
    recording read), the same configuration read and values the forward
    names?"""
    return guards.without_ignored(a.link_state, b.ignored_state) == \
        guards.without_ignored(b.link_state, a.ignored_state) and \
        a.config_reads == b.config_reads and _guarded(a) == _guarded(b)


def _guarded(entry):
    return sorted(((g.label, g.kind, repr(g.expected) if g.kind == 'value'
                    else id(g.expected), repr(getattr(g, 'shot', None)))
                   for g in entry.py_guards), key=repr)


def _with_trips(entry):
    """An entry whose symbolic sizes are trip counts (and maybe a
    batch)."""
    trips = getattr(entry.symbolic, 'trips', entry.symbolic)
    return trips is not None and not isinstance(
        trips, (BatchAxis, TwoAxes, ragged.Ragged))


def _maps_to(entry, key):
    general = entry.symbolic.generalize(key)
    return general is not None and general[0] == entry.key


def _covers(general, key):
    """Is ``key`` ``general`` but for the sizes ``general`` leaves open?"""
    if general[:3] != key[:3] or general[4:] != key[4:] or \
            len(general[3]) != len(key[3]):
        return False
    for open_spec, spec in zip(general[3], key[3]):
        if open_spec == spec:
            continue
        if not (signature.is_array_spec(open_spec) and
                signature.is_array_spec(spec)) or \
                open_spec[1:] != spec[1:] or \
                len(open_spec[0]) != len(spec[0]):
            return False
        for size, other in zip(open_spec[0], spec[0]):
            if size == other:
                continue
            if type(size) is not str or (type(other) is int and other < 1):
                return False
    return True


def width_sibling(cache, key):
    """``(entry, Batched)``: a compiled entry of the same mode whose
    program takes any size of one axis (:class:`RowsBatched`: the words
    of padded ids; or a batch, in an onnxruntime session:
    :class:`Batched`) and whose key, that axis left open, differs from
    ``key`` only in the batch size of every array argument, on other
    axes; the ``Batched`` keeps that entry's axis. Else ``None``."""
    for entry, general in _alike_entries(cache, key, lambda entry: (
            entry.program is not None and entry.batch_note is None and
            type(entry.symbolic) in (RowsBatched, Batched))):
        found = _batched_axes(entry.key[3], general[3], [
            name for name, _ in entry.signature.items])
        kept = entry.symbolic
        if found and not set(found) & set(kept.batch_axes()):
            leaves, axes = zip(*found)
            axes = None if not any(axes) else axes
            batch_kept = not any(kept.axes or ())
            if batch_kept and axes is not None:
                # The batch open already stays the batch, the new axis
                # its width: rows follow through a reshape that merges
                # both (``(T, B, I)`` to ``(T * B, I)`` and back) from
                # the outer axis first.
                return entry, Batched(kept.leaves, kept.axes, RowsBatched(
                    leaves, None, axes, WIDTH))
            return entry, Batched(leaves, axes, RowsBatched(
                kept.leaves, None, kept.axes,
                BATCH if batch_kept else WIDTH))
    return None


def _batched_axes(old, new, names=None):
    """``[(leaf, axis), ...]``: the one axis of each array leaf whose size
    differs between two keys, the same two sizes for all, if they differ in
    nothing else; else ``[]``. Where that axis is not the first, leaves of
    the same shape in both are left out (labels of a fixed batch next to
    padded ids of another width); a batch on axis 0 is every array's, but
    for a program the VM runs (``names``, the leaves', given), where a
    leaf of a fixed shape may sit next to a batch (a table) unless the
    leaves that changed are a list's items (whose lengths stay in the key
    once they failed: ``runtime.ragged``)."""
    found, unchanged = [], False
    for leaf, axes in _differing(old, new) or ():
        if not old[leaf][0]:  # 0-d: no batch
            continue
        if not axes:
            unchanged = True
            continue
        if len(axes) != 1:
            return []
        found.append((leaf, axes[0]))
    if unchanged and any(axis == 0 for _, axis in found) and (
            names is None or any(ragged.list_of(names[leaf]) is not None
                                 for leaf, _ in found)):
        return []
    sizes = set((old[leaf][0][axis], new[leaf][0][axis])
                for leaf, axis in found)
    return found if len(sizes) == 1 else []


def _trips_only(entry):
    """An entry whose only symbolic sizes are trip counts."""
    return not isinstance(entry.symbolic, (BatchAxis, TripsAndBatch,
                                           TwoAxes, ragged.Ragged))


def trips_sibling(cache, key):
    """``(entry, Batched)``: a compiled entry of the same mode whose only
    symbolic sizes are trip counts, and whose key differs from ``key`` in
    one axis of every array argument that changed, from one size to
    another alike (the batch), and in other axes of some (a length the
    entry's recording kept: a decoder too short to roll then); the call
    is compiled with that batch open. Else ``None``, and where two groups
    of axes could be the batch."""
    for entry, general in _alike_entries(cache, key, lambda entry: (
            entry.program is not None and entry.batch_note is None and
            entry.symbolic is not None and _trips_only(entry))):
        groups = _changed_groups(entry.key[3], general[3]) or []
        changed = set(leaf for axes in groups for leaf, _ in axes)
        batches = [axes for axes in groups if len(axes) == len(changed)]
        if len(batches) == 1 and len(groups) > 1:
            leaves, at = zip(*batches[0])
            return entry, Batched(leaves, None if not any(at) else at)
    return None


def _differing(old, new):
    """``[(leaf, [axes whose sizes differ]), ...]`` for every array leaf of
    two keys' specs, or ``None`` where they differ otherwise."""
    if len(old) != len(new):
        return None
    found = []
    for leaf, (a, b) in enumerate(zip(old, new)):
        if not (signature.is_array_spec(a) and signature.is_array_spec(b)):
            if a != b:
                return None
            continue
        if a[1:] != b[1:] or len(a[0]) != len(b[0]):
            return None
        found.append((leaf, [axis for axis, (m, n) in
                             enumerate(zip(a[0], b[0])) if m != n]))
    return found


def batch_of(key):
    """``Batched`` of a call's key whose array arguments all have one size
    of axis 0, at least :data:`MIN_SIZE` (``jit(dynamic=True)`` makes it
    symbolic from the first call), but for 0-d ones (a loss); else
    ``None``."""
    leaves = tuple(leaf for leaf, spec in enumerate(key[3])
                   if signature.is_array_spec(spec) and spec[0])
    if not leaves:
        return None
    batched = Batched(leaves)
    size = batched.size_of(key)
    return batched if type(size) is int and size >= MIN_SIZE else None


def every_axis_of(key):
    """The ``Batched`` of a call's first call under ``jit(dynamic=True)``:
    :func:`batch_of`'s, each other axis of its arrays kept open too
    (:attr:`Batched.guessed`), those of one size as one (``W``, ``W2``,
    ...: the steps of the inputs and of their mask), but where that size
    is under :data:`MIN_SIZE` or an array has it on two axes; else
    ``None``."""
    batched = batch_of(key)
    if batched is None:
        return None
    groups = collections.OrderedDict()  # by size: [(leaf, axis)]
    for leaf in batched.leaves:
        for axis, n in enumerate(key[3][leaf][0][1:], 1):
            if type(n) is int and n >= MIN_SIZE:
                groups.setdefault(n, []).append((leaf, axis))
    kept = []
    for axes in groups.values():
        leaves, at = zip(*axes)
        if len(set(leaves)) == len(leaves):
            kept.append(RowsBatched(leaves, None, at,
                                    width_symbol(len(kept) + 1)))
    return batched._replace(kept=tuple(kept) or None, guessed=True)


class SizesSeen(object):
    """The sizes of the array arguments' axes at each call that missed, by
    the form of the call (its key but for those sizes, in either mode).
    An axis seen at two sizes is asked open at every later recording where
    its size is :data:`MIN_SIZE` or more (:meth:`batched`), whichever
    entries the cache holds then, as ``torch.compile``'s automatic dynamic
    remembers the sizes it saw: an entry of another size left in the cache
    when a batch of one came (:meth:`stale`) is compiled again so."""

    def __init__(self):
        self._seen = {}  # form: {shapes: None}, in the order seen

    def note(self, key):
        """Notes the sizes of a call that missed."""
        self._seen.setdefault(_form(key), {})[_shapes(key)] = None

    def varying(self, key):
        """``{(leaf, axis): sizes seen}`` of the axes of a call's form seen
        at two sizes or more."""
        seen = list(self._seen.get(_form(key), ()))
        return dict(((leaf, axis), sizes)
                    for leaf, shape in enumerate(_shapes(key)) if shape
                    for axis in range(len(shape))
                    for sizes in [tuple(s[leaf][axis] for s in seen)]
                    if len(set(sizes)) > 1)

    def batched(self, key):
        """The ``Batched`` of the axes of a call seen at several sizes,
        of :data:`MIN_SIZE` or more in this call, but for a list's items
        (``runtime.ragged`` follows their lengths): the axes whose sizes
        went alike at every call are one symbol (a batch of inputs and
        labels), one axis of each array (a time-major batch's steps and
        rows, both first seen at one size, are two); else ``None``."""
        groups = collections.OrderedDict()  # (sizes, size now): [(leaf, axis)]
        shapes, items = _shapes(key), _list_items(key[2])
        for (leaf, axis), sizes in sorted(self.varying(key).items()):
            n = shapes[leaf][axis]
            if type(n) is int and n >= MIN_SIZE and leaf not in items:
                groups.setdefault((sizes, n), []).append((leaf, axis))
        groups = [axes for group in groups.values()
                  for axes in _one_axis_each(group)]
        return _of_groups(groups, Batched((), seen=True)) if groups \
            else None

    def joined_batch(self, key, batched):
        """``batched``, a joined call's (:func:`of_joined`), its batch
        taken where the calls that missed saw it: without the arrays
        whose first axis stayed while the number of items changed (as
        many as the items at this call: a state's layers), and
        with an axis of another array seen at the same sizes as it at
        every call (the states of an N-step link passed in, ``(layers,
        B, H)``)."""
        seen = self.varying(key)
        axes = [] if batched is None else \
            [a for a in batched.batch_axes() if a in seen]
        if not axes:
            return batched
        sizes = seen[axes[0]]
        taken = set(leaf for leaf, _ in axes).union(
            leaf for kept in kept_axes(batched) for leaf in kept.leaves)
        axes += [(leaf, axis) for (leaf, axis), alike in sorted(seen.items())
                 if alike == sizes and leaf not in taken and axis]
        axes = _one_axis_each(axes)[0]
        leaves, at = zip(*axes)
        return batched._replace(leaves=leaves, axes=at if any(at) else None)

    def stale(self, cache, entry):
        """The entries of ``cache`` that would serve the call of one row
        that compiled ``entry`` (at an axis seen at several sizes) but for
        that axis, which they hold at another size, fixed, and may take
        at any (no ``batch_note``): compiled again at their next call,
        that axis open, an entry serves both."""
        ones = set((leaf, axis) for leaf, axis in self.varying(entry.key)
                   if _shapes(entry.key)[leaf][axis] == 1)
        if not ones or entry.batch_note is not None:
            return []
        return [other for other in alike_in_form(cache, entry)
                if other.program is not None and other.batch_note is None
                and _but_for_ones(other, entry, ones)]


def alike_in_form(cache, entry):
    """The other entries of ``cache`` of ``entry``'s mode and form (its key
    but for the sizes of the arrays' axes)."""
    form = _form(entry.key)
    return [other for other in cache.entries() if other is not entry and
            other.key[:2] == entry.key[:2] and _form(other.key) == form]


def _but_for_ones(other, entry, ones):
    """Is ``other``'s key ``entry``'s but for axes among ``ones`` (one row
    there), one at least, where ``other`` has a fixed size that may be
    open, and for sizes open already?"""
    sizes = [(other.key[3][leaf][0][axis], leaf, axis) for leaf, axes in
             _differing(other.key[3], entry.key[3]) or () for axis in axes]
    fixed = [(m, leaf, axis) for m, leaf, axis in sizes if type(m) is int]
    return bool(fixed) and all((leaf, axis) in ones and m >= MIN_SIZE
                               for m, leaf, axis in fixed)


def _list_items(structure):
    """The leaves of a call's structure (a key's) that are items of a list
    or tuple argument of several arrays."""
    found, leaves = set(), itertools.count()

    def walk(node, in_list):
        if node == 'A' or node == 'V':
            leaf = next(leaves)
            if in_list:
                found.add(leaf)
        elif node[0] in ('list', 'tuple', 'dict'):
            items = node[-1]
            several = node[0] != 'dict' and sum(
                item == 'A' or item == 'V' for item in items) > 1
            for item in items:
                walk(item, in_list or several)

    while structure[0] in ('packed', 'joined'):  # (a marked key's)
        structure = structure[2]
    for part in signature.argument_parts(structure):
        for argument in () if part is None else part[-1]:
            walk(argument, False)
    return found


def _one_axis_each(axes):
    """``axes`` (``(leaf, axis)``) as one group, or, where a leaf has two
    of them, one group for each axis."""
    leaves = [leaf for leaf, _ in axes]
    if len(set(leaves)) == len(leaves):
        return [axes]
    by_axis = collections.OrderedDict()
    for leaf, axis in axes:
        by_axis.setdefault(axis, []).append((leaf, axis))
    return list(by_axis.values())


def trip_axes(symbolic_sizes):
    """The ``(leaf, axis)`` that an entry's symbolic trip counts leave
    open (``symbolic.Symbolic``'s wildcards)."""
    trips = getattr(symbolic_sizes, 'trips', symbolic_sizes)
    if not isinstance(trips, symbolic.Symbolic):
        return set()
    return set((leaf, axis) for part in trips.parts()
               for leaf, axes in part.wildcards for axis in axes)


def _form(key):
    """A key but for the sizes of its arrays' axes (and its mode)."""
    return (key[2], tuple(
        (len(spec[0]),) + tuple(spec[1:]) if signature.is_array_spec(spec)
        else spec for spec in key[3])) + tuple(key[4:])


def _shapes(key):
    """The shape of each array leaf of a key, ``None`` for the others."""
    return tuple(spec[0] if signature.is_array_spec(spec) else None
                 for spec in key[3])


def rows_batched(graph, batched, size, uses, names, symbol=BATCH):
    """``(RowsBatched, None)`` where the VM may run the program of
    ``graph`` (recorded at batch ``size``) at any batch size, else
    ``(None, why not)``: every node reading a value whose rows follow the
    batch has a kernel that reads their number from its arrays, in its
    forward and its gradient (``Kernel.lengths``, as for the items of a
    list, ``runtime.ragged``: there all batched arguments share one
    ``Rows``), and the forward's Python did not use the batch size."""
    first = batched.leaves[0]
    conditions, uses = _guards_on(batched, uses)
    lows = ((first, _least_size(conditions, size)),)
    seeds = dict((leaf, ops.Rows.of_item(first, size)._replace(
        axis=axis, lows=lows)) for leaf, axis in batched.batch_axes())
    why = ragged.why_fixed(graph, seeds, uses, names,
                           label=lambda rows: rows_label(rows, symbol),
                           size='size of %s' % axes_named(
                               batched.batch_axes(), names))
    if why is not None:
        return None, why
    return RowsBatched(batched.leaves, size, batched.axes, symbol,
                       conditions=conditions), None


def _least_size(conditions, size):
    """The fewest rows a program guarded by ``conditions`` (recorded at
    ``size``, where they hold) takes: ``11`` for ``T > 10``."""
    return next(n for n in range(1, size + 1)
                if all(lengths.holds(c, n) for c in conditions))


def _guards_on(batched, uses):
    """``(conditions, the other uses)``: the comparisons among ``uses`` of
    the size of one of the axes of ``batched`` (``if T > 10:``, not ``T ==
    5`` that holds at one size only), which become the entry's guards
    (:attr:`RowsBatched.conditions`), as a symbolic loop's length's do."""
    axes = set(batched.batch_axes())
    conditions, others = [], []
    for use in uses:
        if use.condition is not None and not lengths.pins(use.condition) \
                and len(use.origins) == 1 and use.origins[0] in axes:
            if use.condition not in conditions:
                conditions.append(use.condition)
        else:
            others.append(use)
    return tuple(conditions), others


def axes_named(axes, names, joiner=', '):
    """``'x.shape[1]'``: the ``(leaf, axis)`` pairs ``axes`` as the
    forward reads them, ``names`` being the leaves'."""
    return joiner.join('%s.shape[%d]' % (names[leaf], axis)
                       for leaf, axis in axes)


def remake_rows(graph, made_rows, batched):
    """Makes again at run time, from the argument whose batch it has, each
    array the forward made with NumPy with an argument's batch as its
    first axis (``lengths.MadeRows``: ``numpy.zeros((len(x), H))``, an
    RNN's first state; or Chainer's code did, as many rows as the batch:
    ``L.LSTM``'s), which the recording holds as a constant: a node
    reading that argument replaces the constant, at any batch size, and
    the uses of the size its making noted are returned, for
    :func:`rows_batched` to leave out."""
    consts = dict((id(v.data), v) for v in graph.consts
                  if v.data is not None)
    in_loops = _read_in_loops(graph.nodes)
    made_again = set()
    axes = dict(batched.batch_axes())
    for made in made_rows:
        made = _of_the_batch(made, batched, graph)
        value = consts.get(id(made.array))
        if value is None or made.leaf is None or \
                axes.get(made.leaf) != made.axis or \
                value in in_loops or not (made.array == made.fill).all():
            continue  # (changed in place since it was made)
        node = _made_again(made, graph.inputs[made.leaf], value)
        _replace(graph, value, node.outputs[0])
        graph.nodes.insert(0, node)
        made_again.update(made.uses)
    return made_again


def _of_the_batch(made, batched, graph):
    """``made``, where Chainer's code made it (``leaf`` ``None``) with as
    many rows as the batch, as made from the first batched argument: the
    first call at another batch size checks that against eager."""
    if made.leaf is not None:
        return made
    leaf, axis = batched.batch_axes()[0]
    if made.array.shape[0] != graph.inputs[leaf].shape[axis]:
        return made
    return made._replace(leaf=leaf, axis=axis)


def _made_again(made, argument, value):
    """The node making ``made`` (``lengths.MadeRows``, the constant
    ``value``) from ``argument`` at run time."""
    settings = (made.axis, made.rest, made.fill, made.array.dtype)
    kernel = ops.Kernel(_full_rows(*settings, xp=chainer.backend.
                                   get_array_module(made.array)), fresh=True,
                        lengths=_rows_made,
                        onnx=_full_rows_to_onnx(*settings))
    return ir.Node('numpy.full', kernel, [argument],
                   [ir.Value('temp', value.shape, value.dtype)],
                   (('fill', made.fill),),
                   loc=made.uses[0].loc if made.uses else None)


def _full_rows(axis, rest, fill, dtype, xp):
    def full(x):
        return xp.full((x.shape[axis],) + rest, fill, dtype)
    return full


def _full_rows_to_onnx(axis, rest, fill, dtype):
    """``ConstantOfShape`` of the argument's batch, then ``rest``."""
    def convert(b, ins, outs):
        import onnx.helper

        batch = b.op('Slice', [b.op('Shape', ins)[0], b.int64s([axis]),
                               b.int64s([axis + 1])])[0]
        shape = b.op('Concat', [batch, b.int64s(list(rest))], axis=0)
        b.op('ConstantOfShape', shape, outs,
             value=onnx.helper.make_tensor(
                 'fill', onnx.helper.np_dtype_to_tensor_dtype(
                     numpy.dtype(dtype)), [1], [fill]))
    return convert


@ops.takes_axes
def _rows_made(rows):
    """An array made with an argument's batch has that batch as its first
    axis."""
    return ops.Follow((rows[0]._replace(axis=0),))


def _read_in_loops(nodes):
    """The values that nodes of loop bodies read."""
    found = set()
    for node in nodes:
        if node.region is not None:
            found.update(v for inner in node.region.body.nodes
                         for v in inner.inputs)
            found |= _read_in_loops(node.region.body.nodes)
    return found


def _replace(graph, old, new):
    """``new`` read where the graph read the constant ``old``."""
    graph.consts.remove(old)
    graph.read_instead({old: new})


def rows_label(rows, symbol=BATCH):
    """``'B'``, ``'2*B'`` or ``'B+1'``: the rows of a value that follow the
    batch (all the batched arguments share one ``Rows``), as the printed IR
    shows them."""
    items, fixed = rows.count()
    times = sum(n for _, n in items)
    return ops.times_label(times, symbol) + ('%+d' % fixed if fixed else '')


def _widens(entry, backend):
    """An entry whose program may serve other batch sizes: inference (no
    backprop), no symbolic lengths, run by onnxruntime (sessions split
    around ops it lacks cannot be one session of any batch size, which
    the attempt finds and, with ``backend='onnxruntime'``, warns of), or
    by the VM where ``backend`` is ``'auto'``."""
    if entry.program is None or entry.symbolic is not None or \
            entry.key[1] or entry.batch_note is not None or \
            entry.session_note is not None:
        return False
    return entry.backend == 'onnxruntime' or backend == 'auto'


def _batched_leaves(old, new):
    """The array leaves, if every one has one batch size in ``old`` and
    another in ``new`` on its first axis and is otherwise the same; else
    ``()``."""
    found = _batched_axes(old, new)
    return () if any(axis for _, axis in found) else \
        tuple(leaf for leaf, _ in found)


def decision_on_batch(entry, batched, uses=None):
    """How the entry's forward used the batch size in Python, if it did
    otherwise than in an op's arguments (``'x.shape[0] compared at
    model.py:12'``, ``'... reported'``): a program for other sizes could go
    the other way, or replay the recorded number. ``uses``: those of
    ``entry.size_uses`` to look at (all)."""
    names = [name for name, _ in entry.signature.items]
    for use in entry.size_uses if uses is None else uses:
        if not use.what.startswith('passed to') and any(
                axis == 0 and leaf in batched.leaves
                for leaf, axis in use.origins):
            return use.describe(names)
    return None


def dynamic_program(entry, batched, providers, inputs):
    """The entry's graph as one onnxruntime session with the batch
    dynamic, for a call's ``inputs`` (arguments, then parameters): the
    parameters as the entry's session has them (the frozen ones are the
    new session's constants). For an entry the VM runs, a program running
    it at the recorded batch size and the session at the others.

    Raises:
        chainerjit.errors.ExportError: onnxruntime cannot run the graph.
    """
    graph = entry.graph
    params = inputs[len(graph.inputs):]
    frozen = [a if any(a is f for f in entry.frozen) else None
              for a in params] if entry.frozen else None
    if entry.backend != 'onnxruntime':
        reason = backends.why_not(graph, inputs)
        if reason is not None:
            raise errors.ExportError(reason)
    first = graph.inputs[batched.leaves[0]]
    size = first.shape[0]
    session = ort.session_program(graph, providers, frozen,
                                  batch=(first, size))
    if entry.backend == 'onnxruntime':
        return session
    return per_size(graph, entry.program, session, batched.leaves[0], size)


def per_size(graph, recorded, dynamic, leaf, size):
    """A program running ``recorded`` where argument ``leaf`` has batch
    ``size`` (the VM's program, built for it), else ``dynamic``."""
    def run(*arrays):
        program = recorded if arrays[leaf].shape[0] == size else dynamic
        return program.run(list(arrays))
    return ort.one_kernel_program(graph, ops.Kernel(run, multi=True))


def widen(cache, entry, batched, program, sizes):
    """Makes ``entry`` serve every batch size with ``program``; ``sizes``
    are the batch sizes already checked against eager. (Another thread
    may have widened it first: then it serves them already.)"""
    general = batched.generalize(entry.key)
    if general is None or entry.symbolic is not None:
        return
    cache.remove(entry)
    entry.key = general[0]
    entry.symbolic = batched
    entry.program = program
    entry.signature = entry.signature.with_symbols(
        [(leaf, (0,)) for leaf in batched.leaves], symbol=BATCH)
    entry.verified_lengths.update((size,) for size in sizes)
    entry.deferred = None  # sessions of other sizes chosen: no more
    entry.backend_note = 'any batch size B' if entry.backend == \
        'onnxruntime' else 'onnxruntime at batch sizes other than %d' % \
        sizes[0]
    cache.insert(entry)
