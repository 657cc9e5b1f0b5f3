"""Loop regions: the uniform iterations of a recorded loop become one
``Loop`` node whose body is a single iteration.

The recording is define-by-run, so a loop of ``T`` iterations first
appears as ``T`` copies of its body. The loop watcher (``control.py``)
marks where each iteration began; :func:`roll_loops` checks that the
iterations recorded the same ops on values of the same types (equal
*fingerprints*) with the same data flow, and replaces them by one node::

    %5: f32[16,128], %6: f32[16,128] = Loop[trip=19](c2, %3, %4, xs, ...)
      body (i; h, c; xs, W) -> (h', c'):
        ...

Each input of an op in the body is classified, over all iterations:

* *local*: computed earlier in the same iteration;
* *carried*: computed by the previous iteration, and before the loop
  for the first one (``h = lstm(x, h)``);
* *invariant*: the same value defined before the loop (a parameter);
* *indexed by the counter*: ``xs[t]`` becomes ``IndexAt(xs, i)``.

Values computed inside the loop and used after it are its outputs: the
last iteration's value of a carried name, or, for a value every
iteration made (``ys.append(h)``), the list of them. A loop whose
iterations differ (``if t == 0:`` in the body, shapes that change) is
left unrolled; the first iteration alone may differ (state that starts as
``None``), and is then recorded before the loop ("peeled").
"""

import collections

import numpy

from chainerjit import ir
from chainerjit.frontend import loop_analysis
from chainerjit.frontend import packing
from chainerjit.frontend import scalars
from chainerjit.frontend import traced
from chainerjit.ir import regions
from chainerjit.ir.fingerprints import Fingerprints
from chainerjit.ir.fingerprints import index_at_rank, index_of, one_step_slice
from chainerjit.ir.fingerprints import is_ufunc_call
from chainerjit.ir.fingerprints import ufunc_ints
from chainerjit import ops
from chainerjit.ops import math as ops_math
from chainerjit.ops import structural


class Unrolled(collections.namedtuple('Unrolled',
                                      'loc reason varies iterations')):
    """A loop left unrolled, why, whether its trip count may vary from
    call to call (it iterates over more than ``self``'s lists), and how
    many times it ran."""


def roll_loops(graph, recording):
    """Rolls the recorded loops of ``graph`` (in place) into Loop nodes,
    innermost first.

    Returns:
        tuple: ``(rolled, unrolled)``: ``{Loop node: LoopRun}`` and a list
        of :class:`Unrolled` for loops of two or more iterations left as
        they were.
    """
    packing.drop_unread(graph, recording.loops,
                        recording.separated_nodes + recording.droppable)
    item_nodes = recording.row_nodes + recording.separated_nodes
    if item_nodes:
        packing.move_items_into_loops(graph, recording.loops, item_nodes,
                                      recording.separated_nodes)
    rows = set(n.outputs[0] for n in item_nodes)
    nodes = list(graph.nodes)
    runs = [(run, _chunks(nodes, run)) for run in recording.loops]
    rolled, unrolled = {}, []
    items_read = {}  # Unpack node -> the items of its list, as read after
    fingerprints = Fingerprints(recording.templates,
                                ops_math.COUNTED_CONSTANTS)
    made_by_loops = set()  # the values the loops before computed
    for index, (run, chunks) in enumerate(runs):
        if run.n_iterations < 2 or _around_loops_of_any_length(
                run, chunks, rolled):
            continue
        run.defined = set(v for chunk in chunks for n in chunk
                          for v in n.outputs)
        note_python_problem(run, recording.values, rows,
                            made_by_loops=made_by_loops)
        made_by_loops |= run.defined
        plan = None
        unpacked = _unpacked_items(graph.nodes, items_read)
        plan = _plan(chunks, 0, run, fingerprints, unpacked)
        if plan is None or _first_item_read_after(plan, run, graph, chunks):
            plan = _plan(chunks, 1, run, fingerprints, unpacked) or plan
        if plan is not None and not run.python_safe:
            # State that starts as None changes in the peeled iteration; a
            # while loop without exits counts as a for loop does.
            note_python_problem(run, recording.values, rows, plan.peel,
                                counting=not plan.exits,
                                made_by_loops=made_by_loops - run.defined)
        if plan is None:
            if run.n_iterations >= 3:  # else too few to tell
                unrolled.append(Unrolled(run.loc,
                                         _why_not(chunks, fingerprints),
                                         run.varies,
                                         run.n_iterations))
            continue
        span = [n for chunk in chunks for n in chunk]
        try:
            loop = _build(plan, run, graph, recording)
        except _Unrollable as e:
            unrolled.append(Unrolled(run.loc, str(e),
                                     run.varies,
                                     run.n_iterations))
            continue
        replacement = plan.before + plan.stacks + [loop] + plan.unpacks + \
            plan.after
        items_read.update(plan.items_read)
        loop.region.peeled_ints = _peeled_ints(plan, fingerprints)
        fingerprints.note_region(loop)
        rolled[loop] = run
        graph.nodes = _substitute(graph.nodes, span, replacement)
        for later, later_chunks in runs[index + 1:]:
            later_chunks[:] = [_substitute(c, span, replacement)
                               for c in later_chunks]
    return rolled, unrolled


def _first_item_read_after(plan, run, graph, chunks):
    """Is a value of the first rolled iteration read after the loop as
    the first item of a list it appends to (``hs[0]``)? Peeled off, the
    loop then runs one step fewer, and that item is a value of its own
    at any trip count."""
    first = set(v for node in plan.iterations[0] for v in node.outputs)
    span = set(node for chunk in chunks for node in chunk)
    read = any(v in first for v in graph.outputs) or any(
        v in first for node in graph.nodes if node not in span
        for v in node.inputs)
    return read and run.code is not None and loop_analysis.first_item_read(
        run.code, run.site.header)


#: The most passes of a loop of a fixed count left unrolled around loops
#: over an argument's axis (:func:`_around_loops_of_any_length`).
_PASSES_AROUND = 8


def _around_loops_of_any_length(run, chunks, rolled):
    """Is ``run`` a loop of a fixed count (``for it in range(3)``, a few
    refinement passes) around loops rolled over an argument's axis? It is
    left unrolled: its passes' loops, each of the argument's length, may
    then take any length (``frontend.symbolic``), which loops nested in a
    rolled loop do not."""
    return run.trip is None and run.n_iterations <= _PASSES_AROUND and any(
        node in rolled and rolled[node].trip is not None and
        rolled[node].trip.kind == 'dim'
        for chunk in chunks for node in chunk)


def _chunks(nodes, run):
    """The nodes of each pass between headers, then what came after the
    last pass (a partial iteration left by ``break``, or nothing)."""
    bounds = run.boundaries + [run.end]
    return [nodes[a:b] for a, b in zip(bounds, bounds[1:])]


def _substitute(nodes, span, replacement):
    """``nodes`` with the run of nodes that belong to ``span`` replaced
    by ``replacement``."""
    members = set(span)
    positions = [i for i, n in enumerate(nodes) if n in members]
    if not positions:
        return nodes
    return nodes[:positions[0]] + replacement + nodes[positions[-1] + 1:]


def _why_not(chunks, fingerprints):
    middle = [c for c in chunks[1:-1] if c] or chunks
    if len(set(len(c) for c in middle)) > 1:
        return 'its iterations record different numbers of operations'
    if all(_alike(middle[0], c, fingerprints) for c in middle[1:]):
        stride = _strided_index(middle, fingerprints)
        if stride is not None:
            return ('its iterations index steps %d apart (a range with a '
                    'step of %d): only loops over every step, forwards or '
                    'backwards, roll' % (abs(stride), stride))
        uncounted = _uncounted_constant(middle, fingerprints)
        if uncounted is not None:
            return ('its iterations give %s a constant that changes '
                    'otherwise than by a fixed int step or ratio (as '
                    'h * t ** 2 or h / (t + 1) do; h * (t + 1) and '
                    'h * 0.9 ** t roll)' % uncounted.op)
        return ('its iterations are alike, but each reads a different '
                'value made before the loop (the items of a Python list) '
                'or one from two iterations back; to get one program for '
                'every length, pass a sequence as one array or Variable '
                'with a time axis')
    return 'its iterations record different operations or shapes'


# --- planning ----------------------------------------------------------------

class _Plan(object):
    def __init__(self):
        self.before = []  # peeled nodes, run before the loop
        self.after = []  # nodes recorded after the rolled iterations
        self.iterations = []  # rolled chunks
        self.sources = {}  # (p, q) input slot -> classification
        self.counters = {}  # p -> [(index position, start, step)]
        self.numbers = {}  # p -> (start, step) of a counted constant
        # p -> [(argument position, start, step)] of a NumPy ufunc's ints
        self.ints = {}
        self.unpacks = []
        self.stacks = []  # the earlier loops' lists it reads, stacked
        self.items_read = {}  # its Unpack node -> its items, as read after
        self.partial = []  # the iteration an exit cut short
        self.exits = {}  # p -> the raw guard value that leaves


def _plan(chunks, peel, run, fingerprints, unpacked):
    """Checks that chunks ``peel:`` are alike and classifies every input
    (``unpacked``: the items of the lists of loops rolled before,
    :func:`_unpacked_items`); ``None`` if they are not. The last chunk may
    differ: it is recorded after the loop, or, cut short by an exit (see
    :func:`_exits`), it is the partial iteration that left the loop."""
    iterations = chunks[peel:]
    if len(iterations) >= 2 and not iterations[-1]:
        iterations = iterations[:-1]  # the pass that found no more items
    if len(iterations) < 2 or not iterations[0]:
        return None
    first = iterations[0]
    exits = _exits(first, run, fingerprints.templates)
    after, partial = [], []
    last = iterations[-1]
    if len(last) < len(first) and len(last) - 1 in exits and \
            _alike(first[:len(last)], last, fingerprints):
        partial, iterations = last, iterations[:-1]
    elif len(last) != len(first) or not _alike(first, last, fingerprints):
        after, iterations = last, iterations[:-1]
    if len(iterations) < 2:
        return None
    for chunk in iterations[1:]:
        if len(chunk) != len(first) or not _alike(first, chunk,
                                                  fingerprints):
            return None
    if not _guards_agree(iterations, partial, exits, fingerprints.templates):
        return None
    plan = _Plan()
    plan.peel = peel
    plan.before = [n for chunk in chunks[:peel] for n in chunk]
    plan.after = after
    plan.partial = partial
    plan.iterations = iterations
    plan.exits = exits
    defined = {}
    for k, chunk in enumerate(iterations):
        for p, node in enumerate(chunk):
            for q, value in enumerate(node.outputs):
                defined[value] = (k, p, q)
    for p, node in enumerate(first):
        for q in range(len(node.inputs)):
            source = _classify([chunk[p].inputs[q] for chunk in iterations],
                               defined, unpacked, peel > 0)
            if source is None:
                return None
            plan.sources[p, q] = source
        if index_of(fingerprints.templates.get(node)) is not None:
            counters = _counter_indexes(
                [fingerprints.templates[chunk[p]] for chunk in iterations],
                _rank(node))
            if counters is None:
                return None
            if counters:
                plan.counters[p] = counters
        if type(fingerprints.templates.get(node)) in fingerprints.counted:
            number = _counted_constant(
                [fingerprints.templates[chunk[p]]
                 for chunk in iterations + [partial] if p < len(chunk)])
            if number is False:
                return None
            if number is not None:
                plan.numbers[p] = number
        if is_ufunc_call(fingerprints.templates.get(node)):
            ints = _counted_ints(
                [fingerprints.templates[chunk[p]]
                 for chunk in iterations + [partial] if p < len(chunk)])
            if ints is None:
                return None
            if ints:
                plan.ints[p] = ints
    if (plan.numbers or plan.ints) and any(
            _holds_a_count(fingerprints, node) for node in after):
        return None  # (recorded after the loop, it would keep its value)
    return plan


def _holds_a_count(fingerprints, node):
    """May ``node``, recorded after a loop whose steps count, hold a
    number of that count: an op with a counted constant, or a NumPy
    ufunc given an int?"""
    template = fingerprints.templates.get(node)
    return type(template) in fingerprints.counted or \
        is_ufunc_call(template) and bool(ufunc_ints(template))


def _counted_ints(templates):
    """For a NumPy ufunc's call, one per iteration: ``[(argument position,
    start, step)]`` of its int arguments that follow the counter
    (``lengths > t``); ``None`` where one changes otherwise."""
    found = []
    for column in zip(*[ufunc_ints(t) for t in templates]):
        step = _int_step([n for _, n in column])
        if step is None:
            return None
        if step:
            found.append((column[0][0], column[0][1], step))
    return found


def _uncounted_constant(iterations, fingerprints):
    """The first node of alike ``iterations`` whose constant changes
    otherwise than a counted one (:func:`_counted_constant`), or
    ``None``."""
    for p, node in enumerate(iterations[0]):
        templates = [fingerprints.templates.get(chunk[p])
                     for chunk in iterations]
        if type(templates[0]) in fingerprints.counted and \
                _counted_constant(templates) is False or \
                is_ufunc_call(templates[0]) and \
                _counted_ints(templates) is None:
            return node
    return None


def _counted_constant(templates):
    """For an op with a constant, one per iteration: ``(start, step)``
    where its int constant is ``start + step * i`` (``h * (t + 1)``), or
    a :class:`structural.CountedPower` where it is a number to the power
    of the count, as Python computes it (``h * 0.9 ** t``, ``0.9 ** (t +
    1)``), not the same in all; ``None`` where it is; ``False``
    otherwise."""
    values = [t.value for t in templates]
    if all(scalars.is_varying(v) for v in values):
        return None  # (numbers computed at run time: inputs of the nodes)
    if all(v == values[0] and type(v) is type(values[0]) for v in values):
        return None
    power = _counted_power(values)
    if power is not None:
        return power
    if any(type(v) is not int for v in values):
        return False
    step = _int_step(values)
    return False if step is None else (values[0], step)


#: The exponents a power of the counter may start at: of ``t`` or ``t +
#: 1``, where the loop's first step may be recorded before it. (A size of
#: the call in it, ``0.9 ** (t + T)``, starts further.)
_POWER_STARTS = (0, 1, 2)


def _counted_power(values):
    """``structural.CountedPower(base, start)`` where every one of
    ``values`` (plain Python numbers, one per iteration) is ``base **
    (start + i)``, bit for bit, ``start`` one of :data:`_POWER_STARTS`;
    else ``None``."""
    kinds = set(type(v) for v in values)
    if len(values) < 2 or not kinds <= {int, float} or len(kinds) > 1 or \
            not values[0]:
        return None
    ratio = values[1] / values[0]
    bases = [values[1], values[0], ratio, float('%.12g' % ratio)]
    if kinds == {int}:
        bases = [b for b in bases if b == int(b)]
        bases = [int(b) for b in bases]
    for base in bases:
        for start in _POWER_STARTS:
            if all(_same(base ** (start + i), v)
                   for i, v in enumerate(values)):
                return structural.CountedPower(base, start)
    return None


def _same(a, b):
    """The same Python number, bit for bit (and type)? (A float's repr
    round-trips: ``-0.0`` and ``0.0`` differ.)"""
    return type(a) is type(b) and repr(a) == repr(b)


def _exits(chunk, run, templates):
    """``{position: raw value that leaves}`` for the guards of ``chunk``
    that can leave this loop: its own ``while`` test, or an ``if ...:
    break`` directly in its body."""
    found = {}
    for p, node in enumerate(chunk):
        template = templates.get(node)
        if type(template) is not tuple or template[0] != 'guard':
            continue
        test = template[1]
        if test.loop != run.site.header or run.bound is None or \
                not run.python_safe:
            continue
        if test.kind == 'while':
            found[p] = test.negated  # leaves when the test is false
        elif test.breaks:
            found[p] = not test.negated
    return found


def _guards_agree(iterations, partial, exits, templates):
    """Guards go the same way in every iteration, except an exit, which
    may leave only in the last one (or in the partial one)."""
    first = iterations[0]
    for p, node in enumerate(first):
        template = templates.get(node)
        if type(template) is not tuple or template[0] != 'guard':
            continue
        raw = [dict(chunk[p].attrs)['expect'] for chunk in iterations]
        if p in exits:
            stays = [r != exits[p] for r in raw]
            if not all(stays[:-1]):
                return False
            if not stays[-1] and partial:
                return False
        elif len(set(raw)) != 1:
            return False
    if partial:
        guard = partial[-1]
        return dict(guard.attrs)['expect'] == exits[len(partial) - 1]
    return True


def _alike(a, b, fingerprints):
    return all(fingerprints(x) == fingerprints(y) for x, y in zip(a, b))


def _classify(values, defined, unpacked, peeled):
    """Where input slot ``values`` (one per iteration) comes from: an
    item of a list an earlier loop made, in order or reversed, at each
    (``('items', ...)``: :func:`_items_in_order`; ``peeled``: the loop's
    first iteration is recorded before it)."""
    kinds = []
    for k, value in enumerate(values):
        d = defined.get(value)
        if d is None:
            kinds.append(('outer', value))
        elif d[0] == k:
            kinds.append(('local', d[1], d[2]))
        elif d[0] == k - 1:
            kinds.append(('prev', d[1], d[2]))
        else:
            return None
    rest = set(kinds[1:])
    if len(rest) != 1:
        if not all(kind[0] == 'outer' for kind in kinds):
            return None
        if _same_constants([kind[1] for kind in kinds]):
            return ('invariant', values[0])
        return _items_in_order(values, unpacked, peeled)
    later, = rest
    if later[0] == 'prev' and kinds[0][0] == 'outer':
        return ('carried', kinds[0][1], later[1], later[2])
    if later == kinds[0]:
        if later[0] == 'outer':
            return ('invariant', later[1])
        if later[0] == 'local':
            return later
    return None


def _unpacked_items(nodes, items_read):
    """``{value: (Unpack node, its position)}`` of the items of the lists
    of the loops rolled so far, as the nodes after each loop read them
    (``items_read``: its last one the loop's carried value, where it is
    one)."""
    return dict((value, (node, k)) for node in nodes if node.op == 'Unpack'
                for k, value in enumerate(items_read.get(node,
                                                         node.outputs)))


#: The most values before a loop's list's items that a later loop may read
#: with them (a first step peeled off the loop, ``hs = [h0]``).
MAX_PREFIX = 2


def _items_in_order(values, unpacked, peeled):
    """``('items', Unpack node, start, step, prefix)`` where ``values``,
    one per iteration, are the items of one loop's list, from its first
    in order (``step`` 1, ``start`` 0) or from its last reversed
    (``step`` -1, ``start`` -1), after (or, reversed, then) a few values
    made before it (``prefix``, in the list's order: a first step peeled
    off that loop), or, where the loop has no ``peeled`` first iteration,
    from its item ``start`` to its last (``hs[1:]``), all alike in shape
    and dtype: a loop over the steps of an earlier loop (``zip(hf,
    reversed(hb))``); else ``None``."""
    found = [unpacked.get(v) for v in values]
    known = [k for k, f in enumerate(found) if f is not None]
    if len(known) < 2 or any(found[k][0] is not found[known[0]][0]
                             for k in known):
        return None
    unpack = found[known[0]][0]
    n, lo, hi = len(unpack.outputs), known[0], known[-1]
    positions = [found[k][1] if found[k] else None
                 for k in range(lo, hi + 1)]
    step = positions[1] - positions[0] if None not in positions[:2] else 0
    if step not in (1, -1) or any(
            b != a + step for a, b in zip(positions, positions[1:])):
        return None
    start = 0 if step == 1 else -1
    if step == 1 and positions[0] == 0 and hi == len(values) - 1:
        prefix = values[:lo]
    elif step == -1 and positions[0] == n - 1 and lo == 0:
        prefix = values[hi + 1:][::-1]
    elif step == 1 and not peeled and lo == 0 and \
            hi == len(values) - 1 and positions[-1] == n - 1:
        # all but the first few items (``hs[1:]``); a loop whose first
        # iteration is peeled reads its first item there
        start, prefix = positions[0], ()
    elif step == -1 and peeled and lo == 0 and positions[0] == n - 2:
        # reversed, after a first step peeled off that read the last item
        # (the loop's carried value at any length)
        start, prefix = -2, values[hi + 1:][::-1]
    else:
        return None
    first = values[0]
    if len(prefix) > MAX_PREFIX or any(
            v.shape != first.shape or v.dtype != first.dtype
            for v in list(unpack.outputs) + list(prefix)):
        return None
    return ('items', unpack, start, step, tuple(prefix))


def _same_constants(values):
    """Constants made afresh by each iteration with equal contents."""
    first = values[0]
    return isinstance(first.data, (numpy.ndarray, numpy.generic)) and all(
        v.kind == 'const' and v.data is not None and v.dtype == first.dtype
        and v.shape == first.shape and numpy.array_equal(v.data, first.data)
        for v in values)


def _rank(node):
    """The number of axes of the array ``node`` indexes."""
    return len(node.inputs[0].shape)


def recorded_index(node, templates):
    """The index ``node`` (an indexing) was recorded with, ``...`` written
    out (``fingerprints.index_at_rank``); ``None`` for another node."""
    return index_at_rank(templates.get(node), _rank(node))


def _index_ints(template, ndim):
    """``[(position, int)]`` of the index's ints, and of the starts of
    its slices of one (``xs[t:t+1]``)."""
    found = []
    for j, s in enumerate(index_at_rank(template, ndim)):
        if one_step_slice(s):
            s = s.start
        if isinstance(s, int) and type(s) is not bool:
            found.append((j, int.__int__(s)))
    return found


def _index_steps(templates, ndim):
    """For ``F.get_item`` nodes, one per iteration, of an array of
    ``ndim`` axes: ``(position, values, step)`` of each integer entry of
    the index, ``step`` as :func:`_int_step` reads its values."""
    per_iteration = [_index_ints(t, ndim) for t in templates]
    for column in zip(*per_iteration):
        values = [v for _, v in column]
        yield column[0][0], values, _int_step(values)


def _counter_indexes(templates, ndim):
    """For ``F.get_item`` nodes, one per iteration, of an array of
    ``ndim`` axes: the integer indexes that follow the counter (``start +
    step * i``, step 1 or -1), or ``None`` if an index changes
    otherwise."""
    found = []
    for position, values, step in _index_steps(templates, ndim):
        if step == 0:
            continue
        if step not in (1, -1) or any(v < 0 for v in values) and any(
                v >= 0 for v in values):  # (or wraps around the end)
            return None
        found.append((position, values[0], step))
    return found


def _strided_index(chunks, fingerprints):
    """The step of an index that follows the counter by more than one
    (``xs[t]`` of ``range(0, T, 2)``) in iterations that are otherwise
    alike; else ``None``."""
    for p, node in enumerate(chunks[0]):
        if index_of(fingerprints.templates.get(node)) is None:
            continue
        for _, _, step in _index_steps(
                [fingerprints.templates.get(c[p]) for c in chunks],
                _rank(node)):
            if step is not None and abs(step) > 1:
                return step
    return None


def _peeled_ints(plan, fingerprints):
    """The ints of the NumPy ufunc calls of the first step peeled off the
    loop that the steps' alike calls (the same ufunc, the same values from
    before the loop) had one step before the first rolled one, counted
    (``plan.ints``): ``((node, ((position, int, step), ...)), ...)``.
    ``None`` where an int of such a call is neither that nor one the alike
    calls take at every step, or the steps count an op's constant
    (``plan.numbers``) that the first step may have taken too."""
    if not plan.before:
        return ()
    templates = fingerprints.templates
    if plan.numbers and any(type(templates.get(node)) in fingerprints.counted
                            for node in plan.before):
        return None
    alike = collections.defaultdict(set)  # (ufunc, position) -> takes
    for p, node in enumerate(plan.iterations[0]):
        template = templates.get(node)
        if not is_ufunc_call(template):
            continue
        outer = tuple((q, source[1]) for (at, q), source in
                      plan.sources.items()
                      if at == p and source[0] == 'invariant')
        counted = dict((k, (start, step)) for k, start, step in
                       plan.ints.get(p, ()))
        for k, value in ufunc_ints(template):
            start, step = counted.get(k, (value, 0))
            alike[template[1], k].add((start - step, step, outer))
    found = []
    for node in plan.before:
        template = templates.get(node)
        if not is_ufunc_call(template):
            continue
        ints = []
        for k, value in ufunc_ints(template):
            steps = set(step for before, step, outer in
                        alike.get((template[1], k), ())
                        if before == value and all(
                            q < len(node.inputs) and node.inputs[q] is v
                            for q, v in outer))
            if len(steps) != 1:
                return None
            step, = steps
            if step:
                ints.append((k, value, step))
        if ints:
            found.append((node, tuple(ints)))
    return tuple(found)


def _int_step(values):
    """``step`` where the ints ``values`` are ``values[0] + step * k`` in
    turn (0 where they are all the same), else ``None``."""
    step = values[1] - values[0] if len(values) > 1 else 0
    return step if all(v == values[0] + step * k
                       for k, v in enumerate(values)) else None


# --- building ----------------------------------------------------------------

def _build(plan, run, graph, recording):
    """The Loop node of a plan, with its body."""
    carried, invariants = _carried_and_invariants(plan)
    rolled = set(node for chunk in plan.iterations + [plan.partial]
                 for node in chunk)
    scans = _used_after(plan, graph, rolled, carried)
    _check_breaks(plan, carried, scans)
    body = _body(plan, carried, invariants, recording)
    body.outputs = [plan.iterations[0][p].outputs[q] for p, q in carried] + [
        plan.iterations[0][p].outputs[q] for p, q, _ in scans]
    loop = _loop_node(plan, run, graph, body, carried, invariants, scans)
    loop.region.peeled = tuple(plan.before)
    _skip_when_the_first_leaves(plan, run, loop, recording.templates)
    lists = loop.outputs[len(loop.outputs) - len(scans):]
    # A loop with exits makes lists of as many values as it runs: only
    # one returned as it is may be joined for any number.
    shapes_read = None if plan.exits else recording.shapes_read
    unpacks = [_list_after_loop(graph, lst, scan, carried, rolled,
                                shapes_read)
               for lst, scan in zip(lists, scans)]
    plan.unpacks = [unpack for unpack, _ in unpacks]
    plan.items_read = dict(unpacks)
    _note_replays(plan, recording)
    return loop


def _carried_and_invariants(plan):
    """``(carried, invariants)``: ``{(p, q): [init or None, body input]}``
    for the values an iteration passes to the next, and ``{outer value:
    body input}`` for those defined before the loop."""
    first = plan.iterations[0]
    carried = collections.OrderedDict()
    invariants = collections.OrderedDict()
    for (p, q), source in sorted(plan.sources.items()):
        if source[0] == 'carried':
            _, init, dp, dq = source
            entry = carried.setdefault((dp, dq), [init, None])
            if entry[0] is not init:
                raise _Unrollable('a carried value with two initial values')
            if entry[1] is None:
                v = first[dp].outputs[dq]
                entry[1] = ir.Value('input', v.shape, v.dtype)
        elif source[0] == 'invariant':
            v = source[1]
            if v not in invariants:
                invariants[v] = ir.Value('input', v.shape, v.dtype, v.name)
        elif source[0] == 'items':
            v = _stacked_list(plan, source)
            if v not in invariants:
                invariants[v] = ir.Value('input', v.shape, v.dtype)
    return carried, invariants


def _stacked_list(plan, source):
    """The values a later loop's steps read one each (``source``:
    ``('items', Unpack node, start, step, prefix)``): the ``prefix``
    values, then the items of the list the Unpack node takes apart,
    stacked on a new first axis by a node run before the loop
    (``plan.stacks``), for the steps to read as they read an array's."""
    _, unpack, _, _, prefix = source
    inputs = list(prefix) + [unpack.inputs[0]]
    for node in plan.stacks:
        if node.inputs == inputs:
            return node.outputs[0]
    item, n = unpack.outputs[0], len(prefix) + len(unpack.outputs)
    stacked = ir.Value('temp', (n,) + item.shape, item.dtype)
    plan.stacks.append(ir.Node(
        'Stack', structural.join('Stack', 0, len(prefix), n), inputs,
        [stacked], (('axis', 0),), loc=unpack.loc))
    return stacked


def _used_after(plan, graph, rolled, carried):
    """What is used after the loop: the per-iteration lists (``(p, q,
    values)`` of the scans, returned), and the last values (added to
    ``carried`` without a body input)."""
    used_after = uses_outside(graph, rolled)
    if any(v in used_after for node in plan.partial for v in node.outputs):
        raise _Unrollable('a value of the iteration that left is used')
    scans = []
    for p, node in enumerate(plan.iterations[0]):
        for q in range(len(node.outputs)):
            values = [chunk[p].outputs[q] for chunk in plan.iterations]
            if any(v in used_after for v in values[:-1]):
                scans.append((p, q, values))
            elif values[-1] in used_after and (p, q) not in carried:
                carried[p, q] = [None, None]
    return scans


def _check_breaks(plan, carried, scans):
    mid_exits = [p for p in plan.exits if p < len(plan.iterations[0]) - 1]
    if mid_exits and any(p <= max(mid_exits) for p, _ in carried) or any(
            p <= max(mid_exits) for p, _, _ in scans if mid_exits):
        raise _Unrollable('a value made before a break in the middle of '
                          'the body is used after the loop')


def _body(plan, carried, invariants, recording):
    """The body: the first rolled iteration, its inputs remapped."""
    first = plan.iterations[0]
    body = ir.Graph('loop')
    counter = ir.Value('input', (), numpy.int64, 'i')
    items = {}  # ('items', ...) source -> the step's item, read once
    for p, node in enumerate(first):
        inputs = [_body_input(plan.sources[p, q], carried, invariants, first)
                  if plan.sources[p, q][0] != 'items' else
                  _item_read(body, plan, plan.sources[p, q], invariants,
                             counter, items)
                  for q in range(len(node.inputs))]
        if p in plan.counters:
            node = index_at(node, inputs[0], counter, plan.counters[p],
                            recorded_index(node, recording.templates))
        elif p in plan.numbers:
            body.add_node(_counted(node, inputs, counter, plan.numbers[p],
                                   recording.templates[node]))
        elif p in plan.ints:
            for extra in counted_ufunc(node, inputs, counter, plan.ints[p],
                                       recording.templates[node]):
                body.add_node(extra)
        elif p in plan.exits:
            node = _exit(node, inputs[0], plan.exits[p], p == len(first) - 1)
        else:
            node.inputs = inputs
        body.add_node(node)
    body.inputs = [counter] + [e[1] for e in carried.values()
                               if e[1] is not None] + list(invariants.values())
    return body


def _item_read(body, plan, source, invariants, counter, items):
    """The item of an earlier loop's list that a step reads (``source``:
    :func:`_items_in_order`), indexed by the counter in the list stacked
    (:func:`_stacked_list`), as ``xs[t]`` of an array."""
    if source not in items:
        _, unpack, start, step, _ = source
        item = unpack.outputs[0]
        read = index_at(unpack, invariants[_stacked_list(plan, source)],
                        counter, [(0, start, step)], (start,),
                        [ir.Value('temp', item.shape, item.dtype)])
        body.add_node(read)
        items[source] = read.outputs[0]
    return items[source]


def _counted(node, inputs, counter, number, template):
    """Makes ``node``, an op with a constant that the iterations gave as
    ``start + step * i``, take it as an input computed from the counter
    (``ops.math.lower_varying_constant``); returns the node computing
    it."""
    value = ir.Value('temp', (), numpy.float64)
    x, y = node.inputs[0], node.outputs[0]
    node.kernel = ops_math.lower_varying_constant(template, ops.LowerContext(
        numpy, (x.shape,), (x.dtype,), (y.shape,), (y.dtype,)))
    node.inputs = inputs + [value]
    if isinstance(number, structural.CountedPower):
        node.attrs = (('value', number.label()),)
        kernel = number.kernel()
        return ir.Node('CountedPower', kernel, [counter], [value],
                       kernel.attrs, loc=node.loc)
    start, step = number
    node.attrs = (('value', '%d%+d*i' % number),)
    kernel = structural.counted_number(start, step)
    return ir.Node('CountedNumber', kernel, [counter], [value],
                   kernel.attrs, loc=node.loc)


def counted_ufunc(node, inputs, counter, ints, template, recorded_trip=None):
    """Makes ``node``, a NumPy ufunc's call given ints that the iterations
    gave as ``start + step * i`` (``ints``: ``(argument position, start,
    step)`` each), take them as inputs computed from the counter; returns
    the nodes computing them. With ``recorded_trip`` they follow the
    loop's trip count too, ``counter`` then ``(i, n)``
    (``structural.counted_number``)."""
    counters = [counter] if recorded_trip is None else list(counter)
    label = '%d%+d*i' if recorded_trip is None else \
        '%%d%%+d*(i+%d-n)' % recorded_trip
    made = []
    for position, start, step in ints:
        value = ir.Value('temp', (), numpy.int64)
        kernel = structural.counted_number(start, step, numpy.int64,
                                           recorded_trip)
        made.append(ir.Node('CountedInt', kernel, counters, [value],
                            kernel.attrs, loc=node.loc))
    fn, onnx, node.inputs = traced.ufunc_taking_ints(
        template, node.op, inputs, [(k, n.outputs[0]) for (k, _, _), n in
                                    zip(ints, made)])
    node.kernel = node.kernel._replace(fn=fn, onnx=onnx)
    node.attrs = node.attrs + tuple(
        ('arg%d' % k, label % (start, step)) for k, start, step in ints)
    return made


def _body_input(source, carried, invariants, first):
    if source[0] == 'carried':
        return carried[source[2], source[3]][1]
    if source[0] == 'invariant':
        return invariants[source[1]]
    return first[source[1]].outputs[source[2]]


def _loop_node(plan, run, graph, body, carried, invariants, scans):
    region = regions.Region(body, [e[1] is not None for e in carried.values()],
                            len(scans), run.site.kind, run.loc)
    region.counts = bool(plan.exits)
    # With exits, it may run until the iterable ends.
    n = run.bound - plan.peel if plan.exits else len(plan.iterations)
    trip = graph.add_value('const', (), numpy.int64, data=numpy.int64(n))
    lists = [ir.Value('temp', (), numpy.dtype(object)) for _ in scans]
    inits = [e[0] for e in carried.values() if e[1] is not None]
    count = [ir.Value('temp', (), numpy.int64)] if plan.exits else []
    last = plan.iterations[-1]
    loop = ir.Node(
        'Loop', structural.loop(), [trip] + inits + list(invariants),
        [last[p].outputs[q] for p, q in carried] + count + lists,
        attrs=(('trip', n),), loc=run.loc,
        pure=all(node.pure for node in body.nodes))
    loop.region = region
    return loop


def _list_after_loop(graph, lst, scan, carried, rolled, shapes_read):
    """The ``Unpack`` of a per-iteration list for the reads after the
    loop."""
    p, q, values = scan
    # The body now defines the first iteration's value, and the loop the
    # last one of a carried value: the list gives fresh ones.
    fresh = [_like(values[0])] + values[1:-1] + [
        _like(values[-1]) if (p, q) in carried else values[-1]]
    _rename_uses(graph, values[0], fresh[0], rolled)
    unpack = _unpack(lst, fresh)
    # Read after the loop as: its last one, the carried value's.
    _collect(graph, lst, fresh[:-1] + values[-1:], rolled, shapes_read)
    return unpack, fresh[:-1] + values[-1:]


def _skip_when_the_first_leaves(plan, run, loop, templates):
    """A peeled first iteration that ends with the loop's own exit (``if
    ...: break``) skips the loop when the exit is taken: its guard
    becomes the trip count, 0 or the loop's."""
    if not plan.before or not plan.exits or not all(
            loop.region.carried_read):
        return
    guard = plan.before[-1]
    exits = _exits([guard], run, templates)
    if 0 not in exits:
        return
    leaves_on = exits[0]
    trip = loop.inputs[0]
    effective = ir.Value('temp', (), numpy.int64)
    skip = ir.Node('SkipIf', structural.skip_if(leaves_on),
                   [guard.inputs[0], trip], [effective],
                   (('when', leaves_on),), loc=guard.loc)
    plan.before[-1] = skip
    loop.inputs[0] = effective
    loop.region.skip = skip


def _like(value):
    return ir.Value('temp', value.shape, value.dtype)


def _rename_uses(graph, old, new, inside):
    """Nodes outside ``inside`` (and the graph's outputs) read ``new``
    where they read ``old``."""
    for node in graph.nodes:
        if node not in inside:
            node.inputs = [new if v is old else v for v in node.inputs]
    graph.outputs = [new if v is old else v for v in graph.outputs]


def _collect(graph, lst, values, inside, shapes_read):
    """``F.stack(ys)`` or ``F.concat(ys)`` of every value a loop appended
    (after values from before the loop), or of all of them reversed
    (``F.stack(ys[::-1])``; then those from before the loop:
    ``ys.insert(0, h)`` after a peeled first step), reads the loop's
    list itself, so that it works for any number of iterations: where
    the forward's Python did not read its shape (``shapes_read``;
    ``None``: all, for a loop that may stop early, which no op could
    follow), the ops that read it then taking its length as the loop's
    trip count (``symbolic``) or keeping that in the key; or where the
    forward returns it as it is."""
    n = len(values)
    used = set(v for node in graph.nodes for v in node.inputs)
    for node in graph.nodes:
        if node in inside or node.op not in ('Stack', 'Concat'):
            continue
        # Reversed: ``ys[::-1]``, or ``ys.insert(0, h)`` after a peeled
        # first step, whose value then comes last.
        reverse = n > 1 and node.inputs[:n] == values[::-1]
        if node.inputs[-n:] != values and not reverse:
            continue
        prefix = 0 if reverse else len(node.inputs) - n
        after = len(node.inputs) - n - prefix
        ndim = len(values[0].shape) + (node.op == 'Stack')
        axis = dict(node.attrs)['axis'] % ndim
        out = node.outputs[0]
        read = shapes_read is None or out in shapes_read
        if not (not read or
                out not in used and out in graph.outputs and
                loop_analysis.returned_directly(node.loc)):
            continue
        node.inputs = node.inputs[:prefix] + [lst] + \
            node.inputs[prefix + n:]
        node.kernel = structural.join(node.op, axis, prefix,
                                      len(node.inputs) + n - 1, reverse,
                                      after)
    _collect_python_sum(graph, lst, values, inside)


def _collect_python_sum(graph, lst, values, inside):
    """Python's ``sum()`` of every value a loop appended, ``((0 + v0) + v1)
    + ...`` (an AddConstant of 0, then Adds, each read by the next alone),
    or of values from before the loop and then those (``(t + v0) + v1
    ...``), reads the loop's list (``structural.python_sum``), at any
    number of iterations."""
    first = next((node for node in graph.nodes if node not in inside and (
        node.op == 'AddConstant' and node.inputs == values[:1] and
        dict(node.attrs).get('value') == 0 or
        node.op == 'Add' and node.inputs[1:] == values[:1])), None)
    if first is None:
        return
    users = graph.users()
    chain = [first]
    for value in values[1:]:
        readers = users.get(chain[-1].outputs[0], [])
        if len(readers) != 1 or readers[0] is None or \
                readers[0].op != 'Add' or \
                readers[0].inputs != [chain[-1].outputs[0], value]:
            return
        chain.append(readers[0])
    last = chain[-1]
    start = first.inputs[:1] if first.op == 'Add' else []
    summed = ir.Node('PythonSum', structural.python_sum(bool(start)),
                     start + [lst], last.outputs, loc=last.loc)
    graph.nodes = [summed if node is last else node for node in graph.nodes
                   if node not in chain[:-1]]


class _Unrollable(Exception):
    """The iterations are alike but their values cannot flow through one
    region (the message says why)."""


def _exit(guard, condition, leaves_on, at_end):
    """The guard of a loop's own test or ``break`` as an exit: the loop
    ends when ``condition`` is ``leaves_on``; ``at_end``: after finishing
    this iteration (a ``break`` that ends the body), else at once."""
    return ir.Node('Exit', structural.exit_(), [condition], [],
                   (('when', leaves_on), ('where', 'end' if at_end
                                          else 'here')), loc=guard.loc)


def uses_outside(graph, inside):
    used = set(graph.outputs)
    for node in graph.nodes:
        if node not in inside:
            used.update(node.inputs)
    return used


def _unpack(lst, values):
    """``Unpack(list) -> v0, v1, ...``: the per-iteration values used
    after the loop, as the values they were recorded as."""
    return ir.Node('Unpack', structural.unpack(len(values)), [lst], values)


def index_at(node, x, counter, counters, slices, outputs=None):
    """``x[..., i, ...]``: an ``F.get_item`` (or NumPy indexing) whose
    index follows the loop counter, as a node reading the counter; with
    no ``counters``, a constant index whose kernel and gradient do not
    depend on ``x``'s recorded shape. It gives ``node``'s outputs, or
    ``outputs``."""
    pattern = structural.index_pattern(slices, counters)
    # NumPy indexing stops gradients, as in eager mode: keep its label.
    op = node.op if node.op.startswith('ndarray.') else 'IndexAt'
    inputs = [x, counter] if counters else [x]
    indexed = ir.Node(op, structural.index(slices, counters), inputs,
                      outputs or node.outputs, (('index', pattern),),
                      loc=node.loc)
    starts = set(c[0] for c in counters)
    indexed.index = (tuple(slices), tuple(sorted(starts)))
    indexed.counters = tuple(counters)
    return indexed


def _note_replays(plan, recording):
    """The self-check replays what generic nodes returned while recording:
    for a node of the body, one result per iteration, in order."""
    outputs = recording.generic_outputs
    for p in range(len(plan.iterations[0])):
        columns = zip(*[list(_leaf_nodes(chunk[p]))
                        for chunk in plan.iterations])
        for column in columns:
            if column[0] not in outputs:
                continue
            found = regions.PerIteration()
            for node in column:
                result = outputs.get(node)
                if isinstance(result, regions.PerIteration):
                    found.extend(result)
                else:
                    found.append(result)
            outputs[column[0]] = found


def _leaf_nodes(node):
    if node.region is None:
        yield node
        return
    for inner in node.region.body.nodes:
        for leaf in _leaf_nodes(inner):
            yield leaf


def note_python_problem(run, values, rows=frozenset(), peel=0,
                        counting=False, made_by_loops=frozenset()):
    """Sets ``run.python_problem`` to how the loop's Python could tell how
    many iterations ran, or ``None``, and ``run.python_safe`` to whether
    it cannot: the source rules of ``loop_analysis.symbolic_loop_problem``,
    the counter indexing only arrays, and Python state unchanged between
    iterations (from the end of the first ``peel`` iterations, which the
    program runs before the loop; ``counting``: but for a ``while`` loop's
    counters). Only such a loop may run another number of iterations than
    recorded (a symbolic trip count, an exit)."""
    run.python_problem = _python_problem(run, values, rows, peel, counting,
                                         made_by_loops)
    run.python_safe = run.python_problem is None


def _python_problem(run, values, rows, peel, counting, made_by_loops):
    snapshots = run.snapshots[peel:]
    kinds = {}
    if snapshots:
        kinds.update((name, summary[0])
                     for name, summary in snapshots[0].items())
    # (The enclosing function's helpers are in both: functions there.)
    kinds.update(run.global_kinds)
    if run.code is None:
        return 'its source cannot be read'
    comprehension = run.site.kind == 'comp'
    # A list of links written out (``cells = [self.c0, self.c1]``) is
    # called as the model's links are; a list each pass makes anew is the
    # body's own.
    kinds.update((name, 'link') for name in run.links)
    fresh = frozenset() if comprehension else \
        loop_analysis.fresh_lists(run.code, run.site.header)
    kinds.update((name, 'list') for name in fresh)
    found = loop_analysis.comprehension_problem(
        run.code, run.site.header, kinds, run.caller, run.caller_top) \
        if comprehension else \
        loop_analysis.symbolic_loop_problem(run.code, run.site.header, kinds,
                                            run.caller, run.consumed,
                                            run.caller_top, run.counted)
    if found is not None:
        return found
    indexed = set() if comprehension else \
        loop_analysis.counter_indexed_names(run.code, run.site.header)
    if indexed is None or not all(
            _indexable(snapshots[0].get(name, ('missing',)), values,
                       rows, made_by_loops) for name in indexed):
        return 'its counter indexes a value other than an array'
    counters = _while_counters(run, snapshots) if counting else \
        loop_analysis.derived_counters(run.code, run.site.header) | \
        run.counted
    changed = _python_state_changed(run, snapshots, values, counters,
                                    fresh)
    return None if changed is None else \
        '%r changes between iterations' % changed


def _indexable(summary, values, rows, made_by_loops):
    """May the counter index this local (its summary at the loop's
    start)? An array the recording follows, a packed list's rows
    (``rows``: their values; see ``chainerjit.frontend.packing``), or a
    list of values earlier loops computed (``made_by_loops``: its steps,
    which the rolling reads in order, as a loop over that list does)."""
    if summary[0] == 'array':
        return values.get(summary[1]) is not None
    return summary[0] == 'list' and bool(summary[2]) and (all(
        item[0] == 'array' and values.get(item[1]) in rows
        for item in summary[2]) or all(
        item[0] == 'array' and values.get(item[1]) in made_by_loops
        for item in summary[2]))


def _python_state_changed(run, snapshots, values, counters=(),
                          fresh=frozenset()):
    """The name of the frame's Python state that changes between passes
    through the header, else ``None``: it must stay the same but for
    values the loop computes: scalars keep their value, other objects
    their identity and attributes, and arrays (also in lists the loop
    appends to, or attributes it assigns) are the loop's own results.
    Otherwise the recording saw Python state that a run of another length
    would change. ``fresh``: the lists each pass makes anew
    (``loop_analysis.fresh_lists``), bound again before any use."""
    first = snapshots[0]
    growing = loop_analysis.appended_lists(run.code, run.site.header)
    rebound = loop_analysis.inner_link_loop_targets(
        run.code, run.site.header, run.links) | fresh
    for snapshot in snapshots[1:]:
        for name, now in snapshot.items():
            if name not in run.targets and name not in counters and \
                    name not in rebound and \
                    not _unchanged(
                    first.get(name), now, values, run.defined,
                    name in growing):
                return name
    return None


def _while_counters(run, snapshots):
    """The names a ``while`` loop counts with (``t += 1`` or ``t -= 1``
    each pass): ints one more, or one less, at each pass through its
    header, as a ``for`` loop's target."""
    if run.site.kind != 'while' or len(snapshots) < 2:
        return frozenset()
    found = set()
    for name, summary in snapshots[0].items():
        passes = [s.get(name) for s in snapshots]
        if not all(p is not None and p[0] == 'scalar' and
                   issubclass(p[1], int) and p[1] is not bool
                   for p in passes):
            continue
        counts = [int(p[2]) for p in passes]
        if _int_step(counts) in (1, -1):
            found.add(name)
    return found


def _unchanged(before, now, values, defined, may_grow=False):
    """``may_grow``: a list the loop's own code appends to."""
    if now == before:
        return True
    if now[0] == 'array':
        return values.get(now[1]) in defined
    if before is None or before[0] != now[0]:
        return False
    if now[0] == 'list' and may_grow and len(now[2]) == len(before[2]):
        # (filled in place: ys[t] = h)
        return all(a == b or a[0] == 'array' and values.get(a[1]) in defined
                   for a, b in zip(now[2], before[2]))
    if now[0] == 'list' and may_grow:
        grown = now[2][:len(before[2])] == before[2]
        return grown and all(item[0] == 'array' and values.get(item[1])
                             in defined for item in now[2][len(before[2]):])
    if now[0] == 'list' and len(now[2]) == len(before[2]):
        # (the links of a ChainList, their states the loop's own)
        return all(_unchanged(a, b, values, defined)
                   for a, b in zip(before[2], now[2]))
    if now[0] in ('dict', 'object', 'link') and len(now) == 3 and \
            len(before) == 3 and now[1] == before[1]:
        old, new = dict(before[2]), dict(now[2])
        return set(old) == set(new) and all(
            _unchanged(old[k], new[k], values, defined) for k in new)
    return False
