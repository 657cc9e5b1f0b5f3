"""Symbolic trip counts: an entry compiled once for every length of the
sequence its loops iterate over.

:func:`symbolize` finds where the length ``T`` is read (an argument's
dimension, or a Python int argument), checks that nothing but the loops'
trip counts depends on it, and returns a :class:`Symbolic`, which turns
a call's key into the entry's symbolic key and the trip counts.
"""

import collections

import numpy

from chainerjit import ir
from chainerjit.frontend import lengths
from chainerjit.frontend import loop_analysis
from chainerjit.frontend import packing
from chainerjit.frontend import rolling
from chainerjit.frontend import signature
from chainerjit.frontend import traced
from chainerjit.frontend import trip_counts
from chainerjit import ops
from chainerjit.ir import regions
from chainerjit.ops import array as array_ops
from chainerjit.ops import structural


#: The symbols of the lengths of one program, in order (a sequence to
#: sequence model's two).
SYMBOLS = signature.TRIP_SYMBOLS


class Symbolic(collections.namedtuple(
        'Symbolic', 'kind where deltas wildcards minimum conditions symbol '
        'more tied', defaults=((), 'T', (), ()))):
    """How an entry's trip counts follow from a call's key.

    ``kind`` and ``where`` say where the length ``T`` is read (see
    ``trip_counts.TripSource``); each loop's trip count is ``T - delta`` for
    one of ``deltas``; ``wildcards`` is ``((leaf index, axes), ...)``, the
    array dimensions that equal ``T`` or are only indexed by the counter
    and so are left out of the key; ``minimum`` is the smallest ``T`` the
    program is valid for; ``conditions`` are the comparisons of ``T`` the
    forward's Python made (``if T > 10:``, ``lengths.Use.condition``),
    which must go the same way: guards of the key. ``symbol`` is the
    length's name (``T``); ``more`` holds the other lengths of the
    program, each a Symbolic of its own symbol (``U``: the target length
    of a sequence to sequence model), whose trip counts follow. ``tied``:
    ``(leaf, axis)`` of the wildcards that must be ``T`` (an argument of
    as many steps that ops read along with the steps': the targets).
    """

    def generalize(self, key, packed=False):
        """``(symbolic key, trip counts)`` of a concrete key, or ``None``
        if this program does not apply to it."""
        general = self._generalize(key, packed)
        for part in self.more:
            further = None if general is None else \
                part._generalize(general[0], packed)
            general = None if further is None else \
                (further[0], general[1] + further[1])
        return general

    def untied(self, key, names):
        """Lines saying where an argument of ``key`` (its leaves named
        ``names``) tied to a length has another size than that length."""
        specs, lines = key[3], []
        for part in self.parts():
            if part.kind != 'dim' or not part.tied:
                continue
            leaf, axis = part.where
            length = specs[leaf][0][axis]
            lines += ['%s: axis %d is %s, the length of %s (axis %d): %d '
                      'against %d' % (names[other], at, part.symbol,
                                      names[leaf], axis,
                                      specs[other][0][at], length)
                      for other, at in part.tied
                      if specs[other][0][at] != length]
        return lines

    def parts(self):
        """One Symbolic for each length, in the order of the trip
        counts."""
        return (self._replace(more=()),) + self.more

    def checks(self, symbols):
        """What a call at the trip counts ``symbols`` checks against
        eager: each length's trip counts, ``(its index, counts)``, checked
        once whatever the others are; or, for one length, the counts."""
        if not self.more:
            return tuple(symbols)
        found, at = [], 0
        for i, part in enumerate(self.parts()):
            found.append((i, tuple(symbols[at:at + len(part.deltas)])))
            at += len(part.deltas)
        return tuple(found)

    def to_check(self, key, checked, symbols):
        """:meth:`checks` of a call, unless each is in ``checked``; of
        several lengths, also where their sum or their difference is one
        to check (``lengths.to_check_size``): a number of both the
        forward's Python computed after their loops (``t + u`` of two
        ``while`` loops' counters, ``t > u``) is in no key."""
        items = self.checks(symbols)
        if not self.more:
            return None if items in checked else items
        if all(i in checked for i in items) and \
                not self.both_to_check(items, checked):
            return None
        return items + self.both(items)

    def both(self, items):
        """``(('sum', n), ('difference', d))`` of the first two lengths'
        trip counts among :meth:`checks` ``items``; ``()`` of one
        length."""
        if not self.more:
            return ()
        first, second = (counts[0] if counts else 0
                         for _, counts in items[:2])
        return (('sum', first + second), ('difference', first - second))

    def both_to_check(self, items, checked):
        """Is :meth:`both` of ``items`` one to check against eager, the
        sizes ``checked`` checked already?"""
        return any(lengths.to_check_size(n, set(
            c[1] for c in checked if c[:1] == (name,)))
            for name, n in self.both(items))

    def _generalize(self, key, packed):
        train, backprop, structure, specs, alias = key
        if structure[0] == 'packed':  # see chainerjit.frontend.packing
            general = self._generalize(
                (train, backprop, structure[2], specs, alias), True)
            if general is None:
                return None
            key = general[0]
            return (key[:2] + (structure[:2] + (key[2],),) + key[3:],
                    general[1])
        if self.kind == 'dim':
            leaf, axis = self.where
            if leaf >= len(specs) or axis >= len(specs[leaf][0]):
                return None
            length = specs[leaf][0][axis]
        else:
            length = _static_at(structure, self.where[0])
            if type(length) is not int:
                return None
            structure = _replace_static(structure, self.where[0],
                                        self.symbol)
        if length < self.minimum or not all(
                lengths.holds(c, length) for c in self.conditions):
            return None
        if any(leaf >= len(specs) or axis >= len(specs[leaf][0]) or
               specs[leaf][0][axis] != length for leaf, axis in self.tied):
            return None
        specs = list(specs)
        for leaf, axes in self.wildcards:
            if leaf >= len(specs) or max(axes) >= len(specs[leaf][0]):
                return None
            shape = list(specs[leaf][0])
            if packed and any(shape[axis] != length for axis in axes):
                return None  # a list item no iteration reads: see packing
            for axis in axes:
                shape[axis] = self.symbol
            specs[leaf] = (tuple(shape),) + tuple(specs[leaf][1:])
        return ((train, backprop, structure, tuple(specs), alias),
                [length - d for d in self.deltas])


def _static_at(structure, path):
    """The int given at ``path`` (a 3-item static: not a float's)."""
    item = signature.static_item(structure, path)
    return item[2] if item is not None and len(item) == 3 else None


def _replace_static(structure, path, symbol):
    return signature.with_static_item(structure, path, ('S', int, symbol))


class Concrete(collections.namedtuple('Concrete', 'reason loc origins',
                                      defaults=(None,))):
    """Why a loop whose trip count follows the call's sizes keeps it in the
    key (each length compiles again), and the line to name; ``origins``:
    the ``(leaf, axis)`` whose size it keeps, where known (none, for a
    trip count tied to no argument's size)."""

    __slots__ = ()


class _KeepsLength(Exception):
    def __init__(self, reason, loc, origins=None):
        super(_KeepsLength, self).__init__(reason)
        self.concrete = Concrete(reason, loc, origins)


def symbolize(graph, rolled, input_names, length_names, recording):
    """Makes the trip count of the loops of the jitted function, and of
    the functions and methods it calls, symbolic where that is sound,
    changing ``graph`` in place.

    Sound means: the loop ran its whole iterable, an argument's axis (or
    an int argument); the forward's Python did nothing with that length
    but count (``lengths``: no comparison, conversion or op attribute made
    from it), or its source uses it only as a length and an index
    (``trip_counts.length_only_names``); and in the graph that argument is
    read only by the loops' counter indexing (``IndexAt``) and by a few
    constant indexes. The program then does the same for every length,
    and the first call at each new length checks it against eager.

    Loops over different lengths (a source and a target sequence) get a
    symbol each (:data:`SYMBOLS`); a length that cannot be symbolic stays
    in the key while the others are.

    Returns:
        ``(found, kept)``: ``found`` is a Symbolic, how to read the trip
        counts from a key; or a Concrete, why a loop over such a length
        keeps it in the key; or None: no loop's trip count follows the
        call. ``kept``: the Concrete of each other length that stays in
        the key.
    """
    sources = _trip_sources(graph, rolled, recording.length_reads,
                            recording.value_origins)
    uses = _besides_own_tests(length_uses(recording, graph), rolled,
                              sources)
    if not sources:
        try:
            free = _FreeAxes(uses, input_names, length_names)
            free.settle((), None)
            _explain_untied(graph, rolled, free)
        except _KeepsLength as e:
            return e.concrete, []
        return None, []
    parts, kept = [], []
    for chosen in _distinct_lengths(sources):
        if len(parts) == len(SYMBOLS):
            kept.append(Concrete(
                'the program has %d lengths already, all it names'
                % len(SYMBOLS), next(loop.loc for loop in sources
                                     if sources[loop][:2] == chosen[:2])))
            continue
        try:
            parts.append(_symbolize(
                graph, rolled, sources, chosen, SYMBOLS[len(parts)],
                _FreeAxes(uses, input_names, length_names), recording))
        except _KeepsLength as e:
            kept.append(_with_origin(e.concrete, chosen))
    if not parts:
        return kept[0], kept[1:]
    return parts[0]._replace(more=tuple(parts[1:])), kept


def _with_origin(concrete, source):
    """``concrete``, its origins the trip source's axis where it names
    none."""
    if concrete.origins is not None or source.kind != 'dim':
        return concrete
    return concrete._replace(origins=frozenset([source.where]))


def _distinct_lengths(sources):
    """One trip source for each length the loops of ``sources`` run
    over, in the order of the loops."""
    found = {}
    for source in sources.values():
        found.setdefault(source[:2], source)
    return list(found.values())


def _symbolize(graph, rolled, sources, chosen, symbol, free, recording):
    """Makes the loops over the length of the trip source ``chosen``
    symbolic, named ``symbol``; raises ``_KeepsLength`` (leaving the
    graph as it was) where they cannot be."""
    loops = _same_length_loops(graph, rolled, sources, chosen, free,
                               recording)
    source = sources[loops[0]]
    length, wildcards = _length_and_wildcards(graph, loops, rolled, source)
    deltas = []
    minimum = 1
    for loop in loops:
        if _iterations(loop, rolled) != length - sources[loop].offset:
            raise _KeepsLength('its trip count is not the length of what '
                               'it iterates over', loop.loc)
        delta = length - dict(loop.attrs)['trip']
        deltas.append(delta)
        minimum = max(minimum, delta + (0 if _may_run_empty(loop, graph)
                                        else 1))
    outer_reads, wildcards, steps = _counter_reads(
        graph, loops, free, wildcards,
        length if source.kind == 'dim' else None, recording.templates,
        _stacked_rows(graph, loops, source, length, deltas),
        source.where if source.kind == 'dim' else None)
    free.settle(steps.followed, source.where)
    for leaf in wildcards:
        free.check(leaf, wildcards[leaf], loops[0].loc)
    minimum = max([minimum] + [need for _, need, _ in outer_reads])
    for leaf in wildcards:
        if graph.inputs[leaf] in graph.outputs:
            raise _KeepsLength('the forward returns %s itself' %
                               graph.inputs[leaf].name, loops[0].loc)
    counted = _counted_from_end(loops, graph, wildcards, steps)
    numbers = _numbers_counting_down(loops, rolled)
    # Sound: rewrite the graph.
    for node, counters in counted:
        _count_from_end(node, counters)
    for node, _, index in outer_reads:
        _make_shape_free(node, recording.templates, index)
    steps.apply(symbol)
    symbols = _symbolic_trips(graph, loops, deltas, symbol)
    for loop, (recorded, nodes, peeled) in numbers.items():
        _numbers_from_the_trip(graph, loop, recorded, nodes, peeled,
                               recording.templates)
    for leaf, axes in wildcards.items():
        graph.inputs[leaf].symbols = dict(graph.inputs[leaf].symbols or {})
        graph.inputs[leaf].symbols.update((a, symbol) for a in axes)
    # The trip counts in the order of the program's symbol inputs.
    return Symbolic(source.kind, source.where, tuple(symbols),
                    tuple((leaf, tuple(sorted(axes)))
                          for leaf, axes in sorted(wildcards.items())),
                    minimum, free.conditions_of(free.guarded), symbol,
                    tied=tuple(steps.tied))


# --- where a trip count comes from -------------------------------------------

def _trip_sources(graph, rolled, reads, value_origins):
    """``{loop: TripSource}`` of the rolled loops that ran over all of an
    iterable the call gave: as their source reads it (``run.trip``), else
    the argument axis their body indexes with the counter, of the
    argument or of a value computed from it (``value_origins``:
    :func:`_indexed_sources`), if the forward read that axis's size, and
    no other's so indexed (``reads``: not ``range(5)`` over five items;
    ``while t < xs.shape[0]`` reading ``xs[t]`` and ``mask[t]``)."""
    found = {}
    for loop in graph.nodes:
        run = rolled.get(loop)
        if run is None or run.code is None or run.exit != 'done':
            continue
        source = run.trip
        if source is None:
            read = [found for found in _indexed_sources(
                graph, loop, run, value_origins) if found.where in reads]
            source = read[0] if len(read) == 1 else None
        if source is not None:
            found[loop] = source
    return found


def _besides_own_tests(uses, rolled, sources):
    """``uses`` but a ``while`` loop's own test of its length (``while t <
    xs.shape[0]:``, or ``t >= 0`` of a counter from ``len(xs) - 1``): with
    its counter (``rolling._while_counters``), that test is the trip
    count; and the indexing with the length in the bodies of the loops
    over it (``xs[t]`` of ``t`` made of the length, ``xs[T - 1 - t]``),
    which the rolling reads from the loop's counter. (A read at an index
    made of the length alone, ``xs[T - 1]`` in the body, is caught by the
    check of every new length against eager.)"""
    runs = [run for loop, run in rolled.items()
            if loop in sources and run.code is not None]
    tests = set((run.code.co_filename, run.site.header) for run in runs
                if run.site.kind == 'while')
    bodies = set((run.code.co_filename, line) for run in runs
                 for line in range(run.site.header + 1, run.site.last + 1))
    return [u for u in uses if not (
        u.what == 'compared' and u.loc in tests or
        u.what in _INDEXING and u.loc in bodies)]


#: How a size used as an index is noted (``lengths.Use.what``).
_INDEXING = frozenset(['passed to ndarray.__getitem__', 'passed to GetItem'])


#: How many iterations fewer than its iterable's items a loop whose
#: source is not read may run (``range(1, T)``, a peeled first step).
_MAX_OFFSET = 2


def _counter_reads_of(loop, values):
    """``(node, value)`` for each node of the loop's body that indexes
    one of the outer ``values`` with the loop counter."""
    outer = _body_sources(loop)
    counter = loop.region.body.inputs[:1]
    for node in loop.region.body.nodes:
        if node.index is not None and node.inputs[1:] == counter and \
                outer.get(node.inputs[0]) in values:
            yield node, outer[node.inputs[0]]


def _argument_counter_reads(graph, loop):
    """``(node, leaf)`` for each node of the loop's body that indexes
    argument ``leaf`` with the loop counter (``xs[t]``)."""
    position = dict((v, i) for i, v in enumerate(graph.inputs))
    for node, value in _counter_reads_of(loop, position):
        yield node, position[value]


def _indexed_sources(graph, loop, run, value_origins=None):
    """For a loop whose body reads an argument with the counter
    (``xs[t]``, ``xs[:, t]``, ``xs[T - 1 - t]``), or a value computed
    with an argument's axis (``value_origins``: ``{value: (origins,
    shift)}``; ``exs[t]`` of ``exs = F.tanh(xs)``: its own size bounds
    the counter), one iteration per
    index but at most :data:`_MAX_OFFSET`: the set of ``TripSource('dim',
    (leaf, axis), offset)`` of the axes so read (``xs`` and its mask),
    whatever the source counts with (``T, B = xs.shape``,
    ``reversed(range(T))``, ``while t < len(exs)``)."""
    if loop.region.counts:
        return set()
    n = run.n_iterations
    trip = dict(loop.attrs)['trip']
    origins = dict(value_origins or {})
    origins.update((value, (tuple((leaf, a) for a in range(
        len(value.shape))), 0)) for leaf, value in enumerate(graph.inputs))
    found = set()
    for node, value in _counter_reads_of(loop, origins):
        axes = origins[value][0]
        for position, start, step in node.counters:
            axis = _axis_at(node, position)
            origin = axes[axis] if axis < len(axes) else None
            if origin is None or origin[1] < 0:
                continue  # (not an argument's axis; a list item's)
            size = graph.inputs[origin[0]].shape[origin[1]]
            offset = size - n
            if 0 <= offset <= _MAX_OFFSET and _counter_fits(
                    start, step, value.shape[axis],
                    value.shape[axis] - trip):
                found.add(trip_counts.TripSource('dim', origin, offset))
    return found


def _counter_fits(start, step, size, delta):
    """Whether ``start + step * i`` stays in range for ``i`` below the
    trip count, ``size - delta``, at every size: counting up from the
    start, or down from the end."""
    if step == 1:
        return 0 <= start <= delta
    if step == -1:
        from_end = start - size if start >= 0 else start
        return -delta - 1 <= from_end <= -1
    return False


def _counted_from_end(loops, graph, wildcards, steps):
    """``[(node, counters)]``: the counter reads of the symbolic axes
    (of the arguments, and of the values :class:`_Steps` the loops read)
    that count down (``xs[T - 1 - t]``), with their starts from the end
    (``xs[-1 - t]``), which hold at every length; raises where a counter
    read would leave the axis at another length."""
    found = []
    for loop in loops:
        trip = dict(loop.attrs)['trip']
        varying = dict((graph.inputs[leaf], axes)
                       for leaf, axes in wildcards.items())
        varying.update(steps.read_by_loops.get(loop, {}))
        for node, value in _counter_reads_of(loop, varying):
            shape = value.shape
            counters = []
            for position, start, step in node.counters:
                axis = _axis_at(node, position)
                if axis in varying[value]:
                    if not _counter_fits(start, step, shape[axis],
                                         shape[axis] - trip):
                        raise _KeepsLength(
                            'the loop counter indexes %s beyond its '
                            'length at other lengths' %
                            (value.name or 'a value'), node.loc)
                    if step == -1 and start >= 0:
                        start -= shape[axis]
                counters.append((position, start, step))
            if tuple(counters) != node.counters:
                found.append((node, tuple(counters)))
    return found


#: The ops computing a number from a loop's counter (``rolling``).
_COUNTER_NUMBERS = ('CountedNumber', 'CountedInt', 'CountedPower')


def _numbers_counting_down(loops, rolled):
    """``{loop: (its recorded trip count, [nodes], peeled ints)}``: the
    numbers its body computes from the counter (``lengths > t``, ``h * (t
    + 1)``) of each loop whose counter counts down to a fixed end (``t``
    of ``reversed(range(T))``), and those its first step peeled off gave
    NumPy calls (``Region.peeled_ints``), which follow the trip count.
    Raises where they cannot: that first step computed such a number
    otherwise (in a block of its own, as an op's constant), the loop
    counts steps of its own too (``n += 1``), or its step is not a
    constant."""
    found = {}
    for loop in loops:
        run = rolled[loop]
        nodes = [node for node in loop.region.body.nodes
                 if node.op in _COUNTER_NUMBERS]
        down = run.code is None or loop_analysis.counts_down(
            run.code, run.site.header)
        uses = 'branch' if run.code is None else \
            loop_analysis.counter_as_number(run.code, run.site.header)
        peeled = loop.region.peeled_ints if uses and loop.region.peeled \
            else ()
        if down is False or not (nodes or peeled or uses and
                                 loop.region.peeled):
            continue
        if down is None or run.code is None or peeled is None or any(
                node.op == 'CountedPower' for node in nodes) or \
                uses == 'branch' and loop.region.peeled or \
                loop_analysis.step_counters(run.code, run.site.header):
            raise _KeepsLength(
                'the loop counter, counting down from the length, is used '
                'as a number', loop.loc)
        found[loop] = (dict(loop.attrs)['trip'], nodes, peeled)
    return found


def _numbers_from_the_trip(graph, loop, recorded, nodes, peeled, templates):
    """Gives ``nodes``, numbers of the counter of ``loop`` (counting
    down), the loop's trip count (an input of its body) to follow; and
    the ints of the first step peeled off (``peeled``) too."""
    trip = _recorded_trip(loop)  # (the symbol's now)
    if peeled:
        _peeled_ints_from_the_trip(graph, trip, recorded, peeled, templates)
    if not nodes:
        return
    inside = ir.Value('input', (), numpy.int64, 'n')
    loop.inputs.append(trip)
    loop.region.body.inputs.append(inside)
    for node in nodes:
        attrs = dict(node.kernel.attrs)
        start, step = attrs['start'], attrs['step']
        node.kernel = structural.counted_number(
            start, step, node.outputs[0].dtype, recorded)
        node.inputs = node.inputs + [inside]
        node.attrs = node.kernel.attrs  # (as rolling gives them)
        _relabel_users(loop.region.body, node.outputs[0],
                       '%d%+d*i' % (start, step),
                       '%d%+d*(i+%d-n)' % (start, step, recorded))


def _relabel_users(body, value, old, new):
    """The printed attributes of the nodes of ``body`` reading ``value``
    that show it as ``old`` (``MulConstant[value=3-1*i]``) show ``new``."""
    for user in body.nodes:
        if value in user.inputs:
            user.attrs = tuple((k, new if v == old else v)
                               for k, v in user.attrs)


def _peeled_ints_from_the_trip(graph, trip, recorded, peeled, templates):
    """Gives the NumPy calls of a loop's first step peeled off their ints
    of the counter (``peeled``: ``((node, ((position, int, step), ...)),
    ...)``) as ``CountedInt`` nodes of the loop's trip count ``trip``, at
    the counter's value 0 (the peeled step's ints are their starts)."""
    zero = graph.add_value('const', (), numpy.int64, data=numpy.int64(0))
    for node, ints in peeled:
        made = rolling.counted_ufunc(node, node.inputs, (zero, trip), ints,
                                     templates[node], recorded)
        at = graph.nodes.index(node)
        graph.nodes[at:at] = made


def _count_from_end(node, counters):
    slices = node.index[0]
    node.kernel = structural.index(slices, counters)
    node.attrs = (('index', structural.index_pattern(slices, counters)),)
    node.counters = counters


# --- what the forward did with the length ------------------------------------

def length_uses(recording, graph):
    """The ``lengths.Use`` of the arguments' sizes while recording: those
    the Length ints noted (also in what the forward returned or assigned:
    ``lengths.plain``; and those its source puts into float arithmetic,
    :func:`size_uses_in_c`, which the pipeline adds), and the Lengths
    found in the recorded ops' attributes."""
    uses = list(recording.length_uses)
    for node in _all_nodes(graph.nodes):
        template = recording.templates.get(node)
        attributes = getattr(template, '__dict__', template)
        if attributes is None or node.loc is None:
            continue
        what = 'passed to %s' % node.op
        if isinstance(attributes, dict):
            attributes = _without_kept_sizes(node, attributes)
        shape = attributes.get('shape') if isinstance(attributes, dict) \
            else None
        inferred = lengths.inferred_sizes(
            node.inputs[0].shape if node.op == 'Reshape' else None, shape)
        for n in inferred:
            # An output axis the kernel infers from its input's rows.
            uses.append(n.use(what, node.loc)._replace(rows_of=node))
        if inferred:
            attributes = dict(attributes, shape=tuple(
                n for n in shape if not any(n is m for m in inferred)))
        uses += lengths.uses_in(attributes, what, node.loc)
    return uses


def _without_kept_sizes(node, attributes):
    """``attributes`` of ``node`` but the sizes its output keeps from its
    input, whatever they are (which the kernels' ``Kernel.lengths`` rules
    check), so that they are not used: a broadcast's target's axes the
    input has already (``F.broadcast_to(m, h.shape)``), a reshape's that
    only adds or removes axes of size one (``(B, T, 1)`` to ``(B, T)``)."""
    in_shape = node.inputs[0].shape if node.inputs else ()
    if node.op == 'BroadcastTo':
        return dict(attributes, _shape=_broadcast_kept(
            in_shape, attributes['_shape']))
    if node.op == 'Reshape' and array_ops.unit_axes_of_reshape(
            in_shape, tuple(int.__int__(n) for n in attributes['shape'])):
        return dict(attributes, shape=())
    return attributes


def _broadcast_kept(in_shape, shape):
    """``shape``, a broadcast's target (``F.broadcast_to(m, h.shape)``),
    with the sizes its input has there already as plain ints: the output
    keeps the input's size there, whatever it is (which the kernels'
    ``Kernel.lengths`` rules check), so they are not used."""
    offset = len(shape) - len(in_shape)
    return tuple(
        int.__int__(n) if k >= offset and in_shape[k - offset] == n != 1
        else n for k, n in enumerate(shape))


def _all_nodes(nodes):
    for node in nodes:
        yield node
        if node.region is not None:
            for inner in _all_nodes(node.region.body.nodes):
                yield inner


class _FreeAxes(object):
    """Which argument axes may have a symbolic length: those whose sizes
    the forward used only to count (no ``lengths.Use``), or that its
    source reads only as lengths (``trip_counts.length_only_names``)."""

    def __init__(self, uses, input_names, length_names):
        self.first_use = {}
        self.conditions = collections.defaultdict(list)
        self.pending = []  # uses by a node's rows: see settle
        for use in uses:
            if use.rows_of is not None:
                self.pending.append(use)
                continue
            for origin in use.origins:
                if use.condition is not None and \
                        not lengths.pins(use.condition):
                    self.conditions[origin].append(use)
                else:
                    self.first_use.setdefault(origin, use)
        self.input_names = input_names
        self.length_names = length_names
        # the (leaf, axis) of the length, whose comparisons become guards
        self.guarded = None

    def by_source(self, leaf, axes):
        """Whether the source uses argument ``leaf`` only as a sequence, or
        reads only other axes' sizes."""
        name = self.input_names[leaf]
        return name in self.length_names and \
            not axes & self.length_names[name]

    def is_free(self, leaf, axes):
        try:
            self.check(leaf, axes, None)
        except _KeepsLength:
            return False
        return True

    def check(self, leaf, axes, loc):
        """Raises ``_KeepsLength`` unless ``axes`` of ``leaf`` are free."""
        if self.by_source(leaf, axes):
            return
        for axis in sorted(axes):
            use = self.first_use.get((leaf, axis))
            if use is None and (leaf, axis) != self.guarded:
                use = next(iter(self.conditions.get((leaf, axis), [])),
                           None)
            if use is not None:
                raise _KeepsLength(use.describe(self.input_names),
                                   use.loc or loc, frozenset(use.origins))

    def settle(self, followed, origin):
        """Counts the uses of sizes as the rows of a node's output
        (``Use.rows_of``), but that of ``origin``, the length, by a node
        that ``followed`` has: its kernel infers them at any length."""
        for use in self.pending:
            for found in use.origins:
                if found != origin or use.rows_of not in followed:
                    self.first_use.setdefault(found, use)
        self.pending = []

    def conditions_of(self, origin):
        """The guards on the length at ``origin``: ``Use.condition``."""
        return tuple(use.condition for use in self.conditions.get(origin,
                                                                  ()))

    def static(self, name):
        """An int argument: only by its source's uses."""
        return name in self.length_names


def size_uses_in_c(code, input_names, graph, read_at_run_time=(),
                   read_lines=None, ran_lines=None, lines_run=None):
    """``trip_counts.float_size_uses``, ``format_size_uses`` and
    ``index_size_uses`` of the forward's own source, as ``lengths.Use`` of
    the axes of ``graph``'s inputs (an axis of ``None``, ``xs.size``,
    stands for all of the argument's), but for the operations
    ``read_at_run_time`` (``(filename, line, column)``: a Variable's with
    a size, whose node reads it from the argument's shape,
    ``lengths.as_scalar``; an array's indexing) and those that did not run
    (a branch not taken), as far as the recording tells: an operation
    reading its sizes itself on a line where none was read (``read_lines``:
    ``(filename, line)``), an index of one of the model's arrays or of an
    array argument on a line where no size was read and no node recorded
    either (``ran_lines``), a line of the function that did not run
    (``lines_run``: the lines that did, where they were watched)."""
    leaves = dict((name, leaf) for leaf, name in enumerate(input_names))
    found = []
    lines_seen = {'read': read_lines, 'ran': ran_lines, None: None}
    for what, uses in (
            ('used in float arithmetic', trip_counts.float_size_uses(code)),
            ("formatted by str's %", trip_counts.format_size_uses(code)),
            ('used as an index of a list or tuple',
             trip_counts.index_size_uses(code))):
        for name, axis, lines, column, kind in uses:
            if type(kind) is tuple:  # (an argument's: an array's, traced)
                kind = kind[0] if kind[1] in leaves else None
            seen = lines_seen[kind]
            leaf = leaves.get(name)
            if leaf is None or lines_run and not any(
                    line in lines_run
                    for line in range(lines[0], lines[1] + 1)) or \
                    (code.co_filename, lines[0], column) in \
                    read_at_run_time or seen is not None and not any(
                        (code.co_filename, line) in seen
                        for line in range(lines[0], lines[1] + 1)):
                continue
            axes = range(len(graph.inputs[leaf].shape or ())) \
                if axis is None else [axis]
            found.append(lengths.Use(tuple((leaf, a) for a in axes), what,
                                     (code.co_filename, lines[0])))
    return found


def _untied_loops(graph, rolled, sources):
    """The rolled loops of the forward whose trip count may vary by call
    but is tied to no argument: with a count fixed in the program, which
    only the key keeps right."""
    return [loop for loop in graph.nodes if loop in rolled and
            loop not in sources and rolled[loop].code is not None and
            rolled[loop].varies]


def _explain_untied(graph, rolled, free):
    """Raises, naming why, for a loop whose trip count varies by call but
    is tied to no argument: the use of an argument's size of that count,
    if the forward made one (``F.reshape(xs, (T * B, I))``)."""
    for loop in _untied_loops(graph, rolled, {}):
        n = rolled[loop].n_iterations
        near = set()
        for leaf, value in enumerate(graph.inputs):
            for axis, size in enumerate(value.shape or ()):
                if 0 <= size - n <= _MAX_OFFSET:
                    free.check(leaf, set([axis]), loop.loc)
                    near.add((leaf, axis))
        raise _KeepsLength('its trip count is not the length of an '
                           'argument the loop indexes with its counter, '
                           'nor an int argument', loop.loc, frozenset(near))


def _same_length_loops(graph, rolled, sources, source, free, recording):
    """The rolled loops over the length of the trip source ``source``;
    raises where their trip counts cannot vary: the length was used
    otherwise, a loop over that length stayed unrolled, the loops' Python
    sees the count, or values of a fixed count of iterations are read
    after."""
    first = next(n for n in sources if sources[n][:2] == source[:2])
    if source.kind == 'dim':
        free.guarded = source.where
        free.check(source.where[0], set([source.where[1]]), first.loc)
    elif not free.static(source.where[1]):
        raise _KeepsLength('the int argument %s is used otherwise than as '
                           'a length' % source.where[1], first.loc)
    loops = [n for n in sources if sources[n][:2] == source[:2]]
    untied = _untied_loops(graph, rolled, sources)
    if untied:
        raise _KeepsLength('another loop of the forward has a trip count '
                           'that chainerjit cannot tie to an argument',
                           untied[0].loc)
    runs = set(rolled[n] for n in loops)
    for run in recording.loops:
        if run.trip is not None and run.trip[:2] == source[:2] and \
                run not in runs:
            raise _KeepsLength('another loop over the same length is '
                               'unrolled', run.loc)
    for loop in loops:
        if not rolled[loop].python_safe:
            raise _KeepsLength(
                'the loop\'s Python could tell how many iterations ran: '
                '%s' % rolled[loop].python_problem, loop.loc)
    lists = set(v for loop in loops for v in loop.outputs
                if v.dtype == object)
    used = rolling.uses_outside(graph, ())
    unpacks = [n for n in graph.nodes
               if structural.kind(n) == structural.UNPACK]
    if any(n.inputs[0] in lists and any(v in used for v in n.outputs)
           for n in unpacks):
        raise _KeepsLength('a value of one of its iterations is read '
                           'after the loop', loops[0].loc)
    return loops


def _length_and_wildcards(graph, loops, rolled, source):
    """The recorded length, and ``{leaf: {axis}}`` of the argument
    dimension it is read from."""
    if source.kind == 'dim':
        leaf, axis = source.where
        return graph.inputs[leaf].shape[axis], {leaf: set([axis])}
    return _iterations(loops[0], rolled) + source.offset, {}


def _may_run_empty(loop, graph):
    """No iteration is fine when the outputs are then the initial values,
    made by the program (an argument would come back as a new Variable,
    not as itself; a first step peeled off and returned, ``return hs[0],
    hs[-1]``, would come back twice), and the lists of the steps empty (a
    first step peeled off is joined before them: ``F.stack(hs)`` of a
    sequence of one; not a list joined alone, for a later loop to read
    its steps)."""
    region = loop.region
    n_read = sum(region.carried_read)
    initial = loop.inputs[1:1 + n_read]
    lists = [v for v in loop.outputs if v.dtype == object]
    return all(region.carried_read) and all(
        v.kind == 'temp' for v in initial) and not any(
        structural.kind(node) == structural.JOIN and node.inputs == [v]
        for node in graph.nodes for v in lists) and \
        not set(initial) & set(graph.outputs) and \
        _peeled_only_starts(loop, graph.users())


def _peeled_only_starts(loop, users):
    """Does the first step peeled off ``loop`` (if any) compute only what
    the loop starts from, or what is joined before the lists of its steps
    (``ys.append(self.out(h))`` at every step, ``F.stack(ys)``), so that
    with no iteration the values read after the loop are its own? Not where
    it computes something else, read after the loop or by no one (``h = h
    * 2`` at ``i == 0``, appended: ``hs[-1]`` of one step is that, not the
    state the loop starts from)."""
    peeled = set(loop.region.peeled)
    starts = set(loop.inputs)
    made = set(v for node in peeled for v in node.outputs)
    for node in peeled:
        readers = [users.get(v, []) for v in node.outputs]
        if not any(readers) and made & set(node.inputs):
            return False  # (a value of the first step alone)
        if any(v not in starts and any(
                r not in peeled and not _joined_before_steps(v, r, loop, users)
                for r in read) for v, read in zip(node.outputs, readers)):
            return False
    return True


def _joined_before_steps(value, node, loop, users):
    """Does ``node`` join ``value`` right before lists of ``loop``'s steps
    that nothing else reads (not ``hs[-1]``, the first step's at one), of
    a loop whose other outputs read after it are states it does not
    append (``h`` of ``hs.append(h * m)``)? A state appended too may be
    read as the last item (``hs[-1]`` of ``hs.append(h)``), which the
    first step made otherwise (``h * 2`` at ``i == 0``)."""
    if node is None or structural.kind(node) != structural.JOIN or \
            value not in node.inputs or _reads_appended_state(loop, users):
        return False
    after = node.inputs[node.inputs.index(value) + 1:]
    lists = set(v for v in loop.outputs if v.dtype == object)
    return bool(after) and all(v in lists or v is value for v in after) \
        and all(r is not None and (structural.kind(r) == structural.JOIN and
                                   value in r.inputs or
                                   packing.unread_nodes(users, [r]))
                for v in lists & set(after) for r in users.get(v, []))


def _reads_appended_state(loop, users):
    """Is a value ``loop`` carries, whose value at each step the body also
    appends to a list of its steps, read after it?"""
    body, region = loop.region.body, loop.region
    appended = body.outputs[region.n_carried:]
    return any(users.get(loop.outputs[k]) and
               any(body.outputs[k] is v for v in appended)
               for k in range(region.n_carried))


def _symbolic_trips(graph, loops, deltas, symbol):
    """Gives each loop its trip count as a symbol input of the program,
    ``T - delta`` (the length named ``symbol``); returns ``{delta:
    symbol input}`` in order."""
    symbols = {}
    for loop, delta in zip(loops, deltas):
        if delta not in symbols:
            symbols[delta] = graph.add_value(
                'sym', (), numpy.int64,
                symbol if delta == 0 else '%s-%d' % (symbol, delta))
        holder = loop.region.skip or loop
        holder.inputs[holder.inputs.index(_recorded_trip(loop))] = \
            symbols[delta]
        loop.attrs = (('trip', symbols[delta].name),)
    return symbols


def _recorded_trip(loop):
    skip = loop.region.skip
    return skip.inputs[1] if skip is not None else loop.inputs[0]


def _iterations(loop, rolled):
    """How many iterations the loop's iterable had."""
    run = rolled[loop]
    return run.bound if loop.region.counts else run.n_iterations


def _counter_reads(graph, loops, free, wildcards, length, templates,
                   stacked, dim=None):
    """Checks how the graph reads the arguments with symbolic axes, adding
    to ``wildcards`` the axes that only the counter indexes, of arguments
    the source uses only as sequences or, with the ``length`` of an
    argument's axis (``None`` for an int argument's), of that size.
    Returns ``(outer reads, wildcards, steps)``: the constant-index reads
    outside the loops with the smallest length each needs, and the
    :class:`_Steps` of the arguments other ops read, whose first axis is
    the length, and of the loops' ``stacked`` values (``{value:
    ops.Rows}``; ``dim``: the ``(leaf, axis)`` the length is, where it
    is an argument's); raises where another op reads such an argument."""
    wildcards = dict((k, set(v)) for k, v in wildcards.items())
    for loop in loops:
        for node, leaf in _argument_counter_reads(graph, loop):
            axes = _counter_axes(node)
            if axes and _same_length(graph, leaf, axes, length, free):
                wildcards.setdefault(leaf, set()).update(axes)
    outer_reads = []
    seeds = dict(stacked)
    peeled = set(n for loop in loops for n in loop.region.peeled)
    for leaf in wildcards:
        free.check(leaf, wildcards[leaf], loops[0].loc)
        value = graph.inputs[leaf]
        for node in graph.nodes:
            if value not in node.inputs:
                continue
            if node in loops:
                if not _read_by_counter_only(node, value, wildcards[leaf],
                                             templates, outer_reads):
                    raise _KeepsLength(
                        'the loop reads %s otherwise than indexed by its '
                        'counter' % value.name, node.loc)
                continue
            need, index = _constant_read(node, wildcards[leaf],
                                         templates), None
            if need is None and node in peeled and length is not None:
                need, index = _read_from_end(node, wildcards[leaf],
                                             templates, length)
            if need is not None:
                outer_reads.append((node, need, index))
            elif len(wildcards[leaf]) == 1:  # one axis: follow its steps
                axis, = wildcards[leaf]
                seeds[value] = _steps_of(leaf, axis, value, length, dim)
            else:
                raise _KeepsLength(
                    '%s is read by %s, not only indexed by the loop '
                    'counter' % (value.name, node.op), node.loc)
    # An argument no op reads (targets passed in inference) is of any
    # length: its axis of the length's size is the length too.
    read = set(v for node in graph.nodes for v in node.inputs)
    for leaf, axis in _tied_arguments(graph, wildcards, length, free, dim):
        if graph.inputs[leaf] not in read and \
                graph.inputs[leaf] not in graph.outputs:
            wildcards.setdefault(leaf, set()).add(axis)
    reads = set(r[0] for r in outer_reads)
    tied = _tied_arguments(graph, wildcards, length, free, dim)
    steps = why = None
    if tied:
        # Another argument of as many steps (the targets of each step, a
        # mask summed over the steps) read by the ops over them: its axis
        # is the length too, where those ops take it at any size.
        tied_seeds = dict(seeds)
        tied_seeds.update((graph.inputs[leaf], ops.Rows.of_item(
            dim[0], length)._replace(axis=axis)) for leaf, axis in tied)
        try:
            steps = _Steps(graph, loops, tied_seeds, reads, templates, dim,
                           tied)
        except _KeepsLength as e:
            why = e
        else:
            for leaf, axis in tied:
                wildcards.setdefault(leaf, set()).add(axis)
    if steps is None:
        try:
            steps = _Steps(graph, loops, seeds, reads, templates, dim)
        except _KeepsLength:
            if why is not None:
                raise why
            raise
    return outer_reads + steps.constant_reads, wildcards, steps


def _steps_of(leaf, axis, value, length, dim):
    """The rows of the steps of ``value``, the argument ``leaf`` whose
    ``axis`` the loops index with their counter: where that axis is as
    long as the length's own argument axis ``dim``, that argument's rows
    (a mask of as many steps as ``xs``, read whole beside ``xs``'s steps:
    the same rows), else its own."""
    if dim is not None and value.shape[axis] == length:
        return ops.Rows.of_item(dim[0], length)._replace(axis=axis)
    return ops.Rows.of_item(leaf, value.shape[axis])._replace(axis=axis)


def _tied_arguments(graph, wildcards, length, free, dim):
    """``(leaf, axis)`` of the arguments but those with symbolic axes
    (``wildcards``) that have one axis of the ``length`` of the argument
    axis ``dim``, which the forward's Python did not use."""
    if dim is None:
        return []
    tied = []
    for leaf, value in enumerate(graph.inputs):
        axes = [a for a, n in enumerate(value.shape) if n == length]
        if leaf not in wildcards and leaf != dim[0] and len(axes) == 1 \
                and free.is_free(leaf, set(axes)):
            tied.append((leaf, axes[0]))
    return tied


def _stacked_rows(graph, loops, source, length, deltas):
    """``{value: ops.Rows}`` of ``F.stack`` and ``F.concat`` of the loops'
    lists (``rolling``) that other ops read: one row per step (or the
    rows of each step's value) on the axis they were joined on, beside
    the rows of the values from before the loop, where the length is the
    first axis of an argument and each of those loops runs its whole
    length. Raises where such a value is read but its rows cannot follow
    the length."""
    lists = dict((v, delta) for loop, delta in zip(loops, deltas)
                 for v in loop.outputs if v.dtype == object)
    used = set(v for node in graph.nodes for v in node.inputs)
    found = {}
    for node in graph.nodes:
        read = [v for v in node.inputs if v in lists]
        if not read or structural.kind(node) != structural.JOIN or \
                node.outputs[0] not in used:
            continue
        axis = dict(node.attrs)['axis']
        others = [v for v in node.inputs if v is not read[0]]
        fixed = len(others) if node.op == 'Stack' else sum(
            v.shape[axis] for v in others)
        rows = None
        if source.kind == 'dim':
            rows = _joined_rows(node, axis, fixed, source.where[0], length,
                                lists[read[0]])
        if rows is None:
            raise _KeepsLength(
                'the values the loop stacks are read by another op, and '
                'their number is not an argument\'s size', node.loc)
        found[node.outputs[0]] = rows
    return found


def _joined_rows(node, axis, fixed, leaf, length, delta):
    """The rows of a join (``node``) of ``fixed`` rows from before the
    loop, then the loop's list of ``length - delta`` steps (a loop after
    a peeled first step runs ``T - 1`` times, one over ``xs[1:]`` too),
    each giving the same rows; ``None`` where that is not the join's
    size."""
    steps = length - delta
    joined = node.outputs[0].shape[axis] - fixed
    if steps <= 0 or joined % steps:
        return None
    per_step = joined // steps
    rows = ops.Rows.of_item(leaf, length)
    if per_step != 1:
        rows = rows.scaled(per_step * length, length)
    return (fixed - per_step * delta + rows)._replace(axis=axis)


class _Steps(object):
    """The values whose first axis is the length, one row or more per
    step (``ops.Rows`` of the argument ``xs``): the arguments the loops
    index and other ops read, and what those ops compute from them
    (``F.reshape(xs, (T * B, I))``, a linear layer over all steps), where
    each op's kernel takes any number of rows (``Kernel.lengths``) and
    the loops read them only indexed by their counter.

    ``rows``: ``{value: ops.Rows}``; ``followed``: the nodes that read
    them; ``variants``: ``{node: ops.Follow}`` of the kernels to run
    instead (:meth:`apply`); ``constant_reads``: ``(node, the length it
    needs, None)`` of the reads of one step at a constant index
    (``ys[0]``).
    Raises ``_KeepsLength`` where an op cannot take another length."""

    def __init__(self, graph, loops, seeds, argument_reads, templates,
                 dim=None, tied=()):
        self.names = [v.name for v in graph.inputs]
        self.inputs = graph.inputs
        self.rows = dict(seeds)
        # leaf -> the axis of its length, as seeded or as the length is
        self.seed_axes = dict((graph.inputs.index(value), rows.axis)
                              for value, rows in seeds.items()
                              if value in graph.inputs)
        if dim is not None:
            self.seed_axes.setdefault(*dim)
        self.followed = set()
        self.variants = {}
        self.read_by_loops = {}  # loop -> {value: set([0])}
        self.constant_reads = []
        self.tied = tied  # (leaf, axis) of arguments seeded as the length
        for node in graph.nodes:
            found = [self.rows.get(v) for v in node.inputs]
            if node in argument_reads or all(r is None for r in found):
                continue
            need = None if found[0] is None else _constant_read(
                node, set([found[0].axis]), templates)
            if node in loops:
                self._read_by(node, found)
            elif need is not None and self._one_per_step(found[0]):
                # (of a value of a few rows fewer, xs[1:]: a longer length)
                self.constant_reads.append(
                    (node, need - found[0].count()[1], None))
            else:
                self._follow(node, found)

    @staticmethod
    def _one_per_step(rows):
        """One row a step, the length's, give or take a few fixed rows
        (``exs[1:]``: the length less one)."""
        return rows is not None and not rows.widest and \
            rows.count()[0] == ((rows.first_leaf, 1),)

    def _read_by(self, loop, found):
        """Notes the values with rows ``found`` that ``loop`` (one of the
        length's) reads one step at a time, indexed by its counter; those
        it reads otherwise must be read whole, by ops that take any rows
        (the states of all steps, attended to at each step):
        :meth:`_follow_loop`."""
        whole = [None] * len(found)
        for k, (value, rows) in enumerate(zip(loop.inputs, found)):
            if rows is None or value.kind == 'input':
                continue  # (the arguments' reads are checked as such)
            axes = set([rows.axis])
            if self._one_per_step(rows) and \
                    _read_by_counter_only(loop, value, axes):
                self.read_by_loops.setdefault(loop, {})[value] = axes
            else:
                whole[k] = rows
        if any(rows is not None for rows in whole):
            try:
                self._follow_loop(loop, whole)
            except _KeepsLength:
                rows = next(r for r in whole if r is not None)
                raise _KeepsLength(
                    'the loop reads a value computed from %s otherwise '
                    'than one step indexed by its counter'
                    % self.names[rows.first_leaf], loop.loc)

    def _follow(self, node, found, in_loop=False):
        if node.region is not None:
            self._follow_loop(node, found)
            return
        following = ops.follow(node, found)
        if following is not None and in_loop and following.reads:
            following = None  # (a kernel reads the length of an argument)
        if following is None:
            raise _KeepsLength(
                'a value computed from %s is read by %s, which is '
                'compiled for its recorded length' % (self.names[next(
                    r for r in found if r is not None).first_leaf],
                    node.label), node.loc)
        self.followed.add(node)
        for value, rows in zip(node.outputs, following.outputs):
            if rows is not None:
                self.rows[value] = rows
        if following.kernel is not None:
            self.variants[node] = following

    def _follow_loop(self, loop, found):
        """Follows the rows into the body of a loop over something else (a
        decoder's steps reading the encoder's stacked states whole, each
        step): the values it carries keep their rows, and its lists of
        steps have their steps' rows."""
        region = loop.region
        why = region.follow_rows(loop, found, self.rows, self._follow_body)
        if why == regions.CARRIED_OTHERWISE:
            raise _KeepsLength(
                'a value the loop carries from step to step gets rows '
                'that follow the length at its first step, or loses '
                'them', region.loc)
        if why == regions.ROWS_OF_ITS_OWN:
            raise _KeepsLength(
                'a list of the loop\'s steps has rows of its own and of '
                'the length, in its steps', region.loc)
        self.followed.add(loop)

    def _follow_body(self, nodes):
        """:meth:`_follow` of the nodes of a loop's body that read rows
        (raising where one cannot follow them)."""
        for node in nodes:
            inner = [self.rows.get(v) for v in node.inputs]
            if any(r is not None for r in inner):
                self._follow(node, inner, in_loop=True)

    def apply(self, symbol):
        """Gives the nodes their kernels for any length (with the
        arguments they read the length from), and the values their symbol
        (``T``, ``4*T``: the length's ``symbol``)."""
        for node, following in self.variants.items():
            ops.take_following(node, following, self.inputs, self.seed_axes)
        for value, rows in self.rows.items():
            # (A list of a loop's steps has its items' rows, not axes.)
            if value.kind != 'input' and rows.axis < len(value.shape):
                ((_, times),), fixed = rows.count()
                value.symbols = dict(value.symbols or {})
                value.symbols[rows.axis] = ops.times_label(times, symbol) + (
                    '%+d' % fixed if fixed else '')


def _same_length(graph, leaf, axes, length, free):
    """Whether the counter-indexed ``axes`` of an argument may be left
    open in the key with the length: its source uses it only as a
    sequence, or its sizes there are the length and Python did not use
    them."""
    if free.by_source(leaf, axes):
        return True
    return length is not None and all(
        graph.inputs[leaf].shape[a] == length for a in axes) and \
        free.is_free(leaf, axes)


def _body_sources(loop):
    """Body input -> the Loop node input it stands for."""
    region = loop.region
    n_read = sum(region.carried_read)
    outer = loop.inputs[1 + n_read:]
    inner = region.body.inputs[1 + n_read:]
    return dict(zip(inner, outer))


def _counter_axes(node):
    """The axes an ``IndexAt`` takes from the counter, or ``None`` when
    its index has ``...``."""
    index, positions = node.index
    if any(i is Ellipsis for i in index):
        return None
    return set(_axis_at(node, p) for p in positions)


def _axis_at(node, position):
    """The input's axis that the entry at ``position`` of an ``IndexAt``'s
    index takes: the position less the new axes (``None``) before it."""
    index = node.index[0]
    return position - sum(i is None for i in index[:position])


def _read_by_counter_only(loop, value, axes, templates=None,
                          constant_reads=None):
    """In the loop body, ``value`` is only indexed by the counter, at
    least at ``axes``; with ``templates``, or at a constant index there
    (``xs[0]`` at each step of a loop over something else), each such
    read appended to ``constant_reads`` as ``(node, the length it needs,
    None)``."""
    region = loop.region
    if value in loop.inputs[1:1 + sum(region.carried_read)]:
        return False
    bodies = [b for b, o in _body_sources(loop).items() if o is value]
    for body_value in bodies:
        if body_value in region.body.outputs:
            return False
        for node in region.body.nodes:
            if body_value not in node.inputs or \
                    _reads_shape_only(node, body_value, region.body):
                continue
            need = None if templates is None or node.inputs != [
                body_value] else _constant_read(node, axes, templates)
            if need is not None:
                constant_reads.append((node, need, None))
                continue
            if node.index is None or node.inputs[0] is not body_value or \
                    body_value in node.inputs[1:]:
                return False
            counted = _counter_axes(node)
            if counted is None or not axes <= counted:
                return False
    return True


# Nodes computing numbers from their inputs' sizes alone, at run time
# (``frontend.lengths``).
_SIZE_READERS = frozenset(['python.size', 'python.sizes'])
# Broadcasts of their first input to the sizes of the others.
_BROADCASTS_BY_SIZE = frozenset([
    'BroadcastSized', 'BroadcastLike', traced.BROADCAST_SIZED,
    traced.BROADCAST_LIKE])


def _reads_shape_only(node, value, body):
    """Does ``node`` of ``body`` read only the shape of ``value``: a
    broadcast to sizes read of arguments (``ops.array.BroadcastSized``, of
    its inputs after the first), a size computed at run time (``loss +=
    F.sum(h) / B`` in the body: ``python.size``), or a ``StopGradient``
    that only such nodes read?"""
    if node.op in _SIZE_READERS:
        return True
    if node.op == 'StopGradient':
        out = node.outputs[0]
        return out not in body.outputs and all(
            _reads_shape_only(reader, out, body)
            for reader in body.nodes if out in reader.inputs)
    return node.op in _BROADCASTS_BY_SIZE and node.inputs[0] is not value


def _constant_read(node, axes, templates):
    """The smallest length for which ``node``, an indexing with constant
    integers at the symbolic ``axes``, reads the same element; ``None``
    for any other node."""
    return _index_need(rolling.recorded_index(node, templates), axes)


def _index_need(index, axes):
    """The smallest length for which ``index`` reads the same element at
    ``axes``; ``None`` for an index other than constant integers there
    (:data:`trip_counts.CONSTANT_INDEXES`)."""
    if index is None or any(i is Ellipsis for i in index):
        return None
    need = 1
    for axis in axes:
        at = _position_of_axis(index, axis)
        found = None if at is None else _entry_need(index[at])
        if found is None:
            return None
        need = max(need, found)
    return need


def _entry_need(entry):
    """The smallest length at which the index entry ``entry`` reads the
    same rows: a few first or last (``xs[0]``, ``xs[-1]``, ``xs[:1]``,
    ``xs[-2:]``, ``ops.rows_needed``); else ``None``."""
    if type(entry) is not int and type(entry) is not slice:
        return None
    need = ops.rows_needed(entry)
    return need if need in _CONSTANT_NEEDS else None


#: The lengths the constant indexes of steps need (``xs[-2]``: 2).
_CONSTANT_NEEDS = frozenset(ops.rows_needed(k)
                            for k in trip_counts.CONSTANT_INDEXES)


def _position_of_axis(index, axis):
    """The position in ``index`` (with no ``...``) of the entry that
    indexes the input's ``axis``, past the new axes (``None``); ``None``
    where it has no such entry."""
    positions = [p for p, i in enumerate(index) if i is not None]
    return positions[axis] if axis < len(positions) else None


def _read_from_end(node, axes, templates, length):
    """For a read in a loop's peeled first step (``rolling``) at the
    index a loop counting down starts from (``xs[t]`` with ``t = T - 1``
    in ``reversed(range(T))``): ``(the smallest length it needs, its
    index counted from the end)`` (``xs[-1]``); else ``(None, None)``."""
    index = rolling.recorded_index(node, templates)
    if index is None:
        return None, None
    index = list(index)
    for axis in axes:
        at = None if any(i is Ellipsis for i in index) else \
            _position_of_axis(index, axis)
        if at is not None and type(index[at]) is int and \
                0 <= index[at] and 1 <= length - index[at] <= 2:
            index[at] -= length
    need = _index_need(tuple(index), axes)
    return (None, None) if need is None else (need, tuple(index))


def _make_shape_free(node, templates, index=None):
    """Gives a constant-index read (at ``index``, else as recorded) a
    kernel and gradient that do not depend on the input's recorded
    shape."""
    free = rolling.index_at(node, node.inputs[0], None, [],
                            index or rolling.recorded_index(node, templates))
    node.kernel, node.attrs = free.kernel, free.attrs
