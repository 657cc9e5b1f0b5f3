"""Symbolic trip counts: an entry compiled once for every length of the
sequence its loops iterate over.

:func:`symbolize` finds where the length ``T`` is read (an argument's
dimension, or a Python int argument), checks that nothing but the loops'
trip counts depends on it, and returns a :class:`Symbolic`, which turns
a call's key into the entry's symbolic key and the trip counts.
"""

import collections

import numpy

from chainerjit.frontend import rolling
from chainerjit.frontend import trip_counts
from chainerjit.ir.fingerprints import index_of
from chainerjit.ops import structural


class Symbolic(collections.namedtuple(
        'Symbolic', 'kind where deltas wildcards minimum')):
    """How an entry's trip counts follow from a call's key.

    ``kind`` and ``where`` say where the length ``T`` is read (see
    ``trip_counts.TripSource``); each loop's trip count is ``T - delta`` for
    one of ``deltas``; ``wildcards`` is ``((leaf index, axes), ...)``, the
    array dimensions that equal ``T`` or are only indexed by the counter
    and so are left out of the key; ``minimum`` is the smallest ``T`` the
    program is valid for.
    """

    def generalize(self, key, packed=False):
        """``(symbolic key, trip counts)`` of a concrete key, or ``None``
        if this program does not apply to it."""
        train, backprop, structure, specs, alias = key
        if structure[0] == 'packed':  # see chainerjit.frontend.packing
            general = self.generalize(
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
            structure = _replace_static(structure, self.where[0])
        if length < self.minimum:
            return None
        specs = list(specs)
        for leaf, axes in self.wildcards:
            if leaf >= len(specs) or max(axes) >= len(specs[leaf][0]):
                return None
            shape = list(specs[leaf][0])
            if packed and any(shape[axis] != length for axis in axes):
                return None  # a list item no iteration reads: see packing
            for axis in axes:
                shape[axis] = 'T'
            specs[leaf] = (tuple(shape),) + tuple(specs[leaf][1:])
        return ((train, backprop, structure, tuple(specs), alias),
                [length - d for d in self.deltas])


def _argument_structure(structure, path):
    """The structure of the positional arguments or of the keywords."""
    has_kwargs = structure[0] != 'tuple'
    if path[0] == 'args':
        return structure[0] if has_kwargs else structure
    return structure[1] if has_kwargs else None


def _static_at(structure, path):
    part = _argument_structure(structure, path)
    if part is None:
        return None
    if path[0] == 'args':
        item = part[1][path[1]] if path[1] < len(part[1]) else None
    else:
        keys = part[1]
        item = part[2][keys.index(path[1])] if path[1] in keys else None
    if type(item) is tuple and len(item) == 3 and item[0] == 'S':
        return item[2]
    return None


def _replace_static(structure, path):
    marker = ('S', int, 'T')
    has_kwargs = structure[0] != 'tuple'
    args, kwargs = (structure if has_kwargs else (structure, None))
    if path[0] == 'args':
        items = list(args[1])
        items[path[1]] = marker
        args = (args[0], tuple(items))
    else:
        items = list(kwargs[2])
        items[kwargs[1].index(path[1])] = marker
        kwargs = (kwargs[0], kwargs[1], tuple(items))
    return (args, kwargs) if has_kwargs else args


def symbolize(graph, rolled, input_names, length_names, recording):
    """Makes the trip count of the jitted function's own loops symbolic
    where that is sound, changing ``graph`` in place.

    Sound means: the loop ran its whole iterable; the length comes from an
    argument that the source uses only as a length and an index
    (``trip_counts.length_only_names``); and in the graph that argument is
    read only by the loops' counter indexing (``IndexAt``) and by a few
    constant indexes. The program then does the same for every length.

    Returns:
        Symbolic or None: how to read the trip counts from a key.
    """
    loops = _same_length_loops(graph, rolled, input_names, length_names,
                               recording)
    if loops is None:
        return None
    source = rolled[loops[0]].trip
    length, wildcards = _length_and_wildcards(graph, loops, rolled, source)
    deltas = []
    minimum = 1
    for loop in loops:
        if _iterations(loop, rolled) != length - source.offset:
            return None
        delta = length - dict(loop.attrs)['trip']
        deltas.append(delta)
        minimum = max(minimum, delta + (0 if _may_run_empty(loop) else 1))
    found = _counter_reads(graph, loops, input_names, length_names,
                           wildcards, recording.templates)
    if found is None:
        return None
    outer_reads, wildcards = found
    minimum = max([minimum] + [need for _, need in outer_reads])
    if any(graph.inputs[leaf] in graph.outputs for leaf in wildcards):
        return None
    # Sound: rewrite the graph.
    for node, _ in outer_reads:
        _make_shape_free(node, recording.templates)
    symbols = _symbolic_trips(graph, loops, deltas)
    for leaf, axes in wildcards.items():
        graph.inputs[leaf].symbols = dict((a, 'T') for a in axes)
    # The trip counts in the order of the program's symbol inputs.
    return Symbolic(source.kind, source.where, tuple(symbols),
                    tuple((leaf, tuple(sorted(axes)))
                          for leaf, axes in sorted(wildcards.items())),
                    minimum)


def _same_length_loops(graph, rolled, input_names, length_names,
                       recording):
    """The rolled loops over the first symbolic loop's length, or
    ``None`` where none is, or where their trip counts cannot vary: a
    loop over that length stayed unrolled, the loops' Python sees the
    count, or values of a fixed count of iterations are read after."""
    loops = [n for n in graph.nodes if n in rolled and _symbolic_run(
        rolled[n], input_names, length_names)]
    if not loops:
        return None
    source = rolled[loops[0]].trip
    loops = [n for n in loops if rolled[n].trip[:2] == source[:2]]
    runs = set(rolled[n] for n in loops)
    if any(run.trip is not None and run.trip[:2] == source[:2] and
           run not in runs for run in recording.loops):
        return None  # another loop over the same length stayed unrolled
    if not all(rolled[loop].python_safe for loop in loops):
        return None
    lists = set(v for loop in loops for v in loop.outputs
                if v.dtype == object)
    used = rolling.uses_outside(graph, ())
    unpacks = [n for n in graph.nodes
               if structural.kind(n) == structural.UNPACK]
    if any(n.inputs[0] in lists and any(v in used for v in n.outputs)
           for n in unpacks):
        return None
    return loops


def _length_and_wildcards(graph, loops, rolled, source):
    """The recorded length, and ``{leaf: {axis}}`` of the argument
    dimension it is read from."""
    if source.kind == 'dim':
        leaf, axis = source.where
        return graph.inputs[leaf].shape[axis], {leaf: set([axis])}
    return _iterations(loops[0], rolled) + source.offset, {}


def _may_run_empty(loop):
    """No iteration is fine when the outputs are then the initial values,
    made by the program (an argument would come back as a new Variable,
    not as itself)."""
    region = loop.region
    n_read = sum(region.carried_read)
    return all(region.carried_read) and not region.n_scans and all(
        v.kind == 'temp' for v in loop.inputs[1:1 + n_read])


def _symbolic_trips(graph, loops, deltas):
    """Gives each loop its trip count as a symbol input of the program,
    ``T - delta``; returns ``{delta: symbol}`` in order."""
    symbols = {}
    for loop, delta in zip(loops, deltas):
        if delta not in symbols:
            symbols[delta] = graph.add_value(
                'sym', (), numpy.int64, 'T' if delta == 0 else 'T-%d' % delta)
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


def _symbolic_run(run, input_names, length_names):
    trip = run.trip
    if not run.in_top_frame or trip is None or run.exit != 'done':
        return False
    if trip.kind == 'dim':
        return input_names[trip.where[0]] in length_names
    return trip.where[1] in length_names


def _counter_reads(graph, loops, input_names, length_names, wildcards,
                   templates):
    """Checks how the graph reads the arguments with symbolic axes, adding
    to ``wildcards`` the axes that only the counter indexes. Returns
    ``(outer reads, wildcards)``: the constant-index reads outside the
    loops with the smallest length each needs; or ``None``."""
    wildcards = dict((k, set(v)) for k, v in wildcards.items())
    position = dict((v, i) for i, v in enumerate(graph.inputs))
    # Axes read by the counter, for arguments used only as sequences.
    for loop in loops:
        outer = _body_sources(loop)
        for node in loop.region.body.nodes:
            if node.index is None or node.inputs[1:] != \
                    loop.region.body.inputs[:1]:
                continue
            leaf = position.get(outer.get(node.inputs[0]))
            axes = _counter_axes(node)
            if leaf is not None and axes and \
                    input_names[leaf] in length_names:
                wildcards.setdefault(leaf, set()).update(axes)
    outer_reads = []
    for leaf in wildcards:
        if wildcards[leaf] & length_names[input_names[leaf]]:
            return None  # the source reads the size of a symbolic axis
        value = graph.inputs[leaf]
        for node in graph.nodes:
            if value not in node.inputs:
                continue
            if node in loops:
                if not _read_by_counter_only(node, value, wildcards[leaf]):
                    return None
            else:
                need = _constant_read(node, wildcards[leaf], templates)
                if need is None:
                    return None
                outer_reads.append((node, need))
    return outer_reads, wildcards


def _body_sources(loop):
    """Body input -> the Loop node input it stands for."""
    region = loop.region
    n_read = sum(region.carried_read)
    outer = loop.inputs[1 + n_read:]
    inner = region.body.inputs[1 + n_read:]
    return dict(zip(inner, outer))


def _counter_axes(node):
    """The axes an ``IndexAt`` takes from the counter, or ``None`` when
    its index has ``None`` or ``...`` (axes are not positions then)."""
    index, positions = node.index
    if any(i is None or i is Ellipsis for i in index):
        return None
    return set(positions)


def _read_by_counter_only(loop, value, axes):
    """In the loop body, ``value`` is only indexed by the counter, at
    least at ``axes``."""
    region = loop.region
    if value in loop.inputs[1:1 + sum(region.carried_read)]:
        return False
    bodies = [b for b, o in _body_sources(loop).items() if o is value]
    for body_value in bodies:
        if body_value in region.body.outputs:
            return False
        for node in region.body.nodes:
            if body_value not in node.inputs:
                continue
            if node.index is None or node.inputs[0] is not body_value or \
                    body_value in node.inputs[1:]:
                return False
            counted = _counter_axes(node)
            if counted is None or not axes <= counted:
                return False
    return True


def _constant_read(node, axes, templates):
    """The smallest length for which ``node``, an indexing with constant
    integers at the symbolic ``axes``, reads the same element; ``None``
    for any other node."""
    index = index_of(templates.get(node))
    if index is None or any(i is None or i is Ellipsis for i in index):
        return None
    need = 1
    for axis in axes:
        if axis >= len(index) or type(index[axis]) is not int or \
                index[axis] not in trip_counts.CONSTANT_INDEXES:
            return None
        k = index[axis]
        need = max(need, k + 1 if k >= 0 else -k)
    return need


def _make_shape_free(node, templates):
    """Gives a constant-index read a kernel and gradient that do not
    depend on the input's recorded shape."""
    free = rolling.index_at(node, node.inputs[0], None, [],
                            index_of(templates[node]))
    node.kernel = free.kernel
