"""Python lists of arrays as one array with a length axis.

Plain tracing unrolls ``for x in xs`` over a list: every item is an input
of its own, so each list length is a program of its own. For a list
argument whose items are alike (NumPy arrays, or Variables, of one shape
and dtype), the jitted function instead *packs* the list: the program
takes one array ``xs: f32[T,...]`` stacked from the items (by
:class:`PackRows` for Variables that need gradients, so that Chainer
hands each item its part),
and the recorded forward gets a list of that array's rows, each taken
with ``xs[k]`` by a recorded node. :func:`move_items_into_loops` then
places each row's indexing next to the one node that reads it; inside a
loop the iterations read ``xs[0]``, ``xs[1]``, ... exactly as a loop over
an array argument does, so the loop rolls and its trip count becomes
symbolic by the same rules (``regions.symbolize``).

Packing is kept only where it pays and cannot be seen (``api``): the
entry must be symbolic, every row read by an op that passes gradients and
none returned, and no loop may stop early, so that each item gets a
gradient exactly where eager mode gives it one. Items must be distinct
objects and no other argument (rows are new objects). Otherwise the
function records those lists item by item from then on.
"""

import chainer
import chainer.functions as F
import numpy

from chainerjit import ir


def list_paths(args, kwargs):
    """The top-level arguments that are lists (or tuples) of
    :data:`MIN_ITEMS` or more alike NumPy arrays or Variables, as
    ``(where, key, type name)``: ``(('args', 0, 'list'), ('kwargs', 'xs',
    'tuple'))``."""
    paths = _paths(args, kwargs, _alike_items)
    if paths and not _distinct(args, kwargs, paths):
        return ()
    return tuple(paths)


def sequence_paths(args, kwargs):
    """The paths, as :func:`list_paths` names them, of every top-level
    list (or tuple) argument."""
    return _paths(args, kwargs, lambda arg: type(arg) in (list, tuple))


def _paths(args, kwargs, taken):
    return [('args', i, type(arg).__name__)
            for i, arg in enumerate(args) if taken(arg)] + [
        ('kwargs', name, type(arg).__name__)
        for name, arg in kwargs.items() if taken(arg)]


def holder(args, kwargs, path):
    """``args`` or ``kwargs``, whichever holds the argument at ``path``
    (its item ``path[1]`` is the argument)."""
    return args if path[0] == 'args' else kwargs


def argument_at(args, kwargs, path):
    """The argument at ``path`` of a call, or ``None`` where the call has
    none there."""
    arguments, key = holder(args, kwargs, path), path[1]
    if key >= len(arguments) if type(key) is int else key not in arguments:
        return None
    return arguments[key]


def _distinct(args, kwargs, paths):
    """Each item is in one list once and is no other argument: rows are
    new objects, so ``xs[0] is xs[-1]`` or ``xs[0] is x0`` would change.
    The same list passed twice is left alone too."""
    lists = [holder(args, kwargs, path)[path[1]] for path in paths]
    items = [id(item) for lst in lists for item in lst]
    others = [id(a) for a in list(args) + list(kwargs.values())]
    return len(set(map(id, lists))) == len(lists) and \
        len(set(items)) == len(items) and not set(items) & set(others)


# Shorter lists are recorded item by item: a loop over one or two items
# cannot show that its iterations are alike (the first is often peeled),
# and a failed packing would stop the function from packing longer ones.
MIN_ITEMS = 3


def _alike_items(value):
    kind = type(value)
    if (kind is not list and kind is not tuple) or len(value) < MIN_ITEMS:
        return False
    first = value[0]
    if type(first) is numpy.ndarray:
        return all(type(a) is numpy.ndarray and a.shape == first.shape and
                   a.dtype == first.dtype for a in value)
    if type(first) is not chainer.Variable or \
            type(first.array) is not numpy.ndarray:
        return False
    return all(type(v) is chainer.Variable and
               type(v.array) is numpy.ndarray and
               v.shape == first.shape and v.dtype == first.dtype and
               v.requires_grad == first.requires_grad for v in value)


def pack(args, kwargs, paths):
    """``(args, kwargs)`` with the list at each path replaced by its
    items stacked on a new first axis."""
    args, kwargs = list(args), dict(kwargs)
    for path in paths:
        arguments = holder(args, kwargs, path)
        arguments[path[1]] = _stacked(arguments[path[1]])
    return tuple(args), kwargs


def _stacked(items):
    if type(items[0]) is numpy.ndarray:
        return numpy.stack(items)
    if items[0].requires_grad and chainer.config.enable_backprop:
        packed, = PackRows().apply(items)
        return packed
    return chainer.Variable(numpy.stack([v.array for v in items]),
                            requires_grad=items[0].requires_grad)


class PackRows(chainer.FunctionNode):
    """``F.stack(items)`` whose backward gives no gradient (``None``, as
    eager mode leaves ``.grad``) to the rows in ``unread``: rows the
    recorded forward never passed to an op."""

    unread = frozenset()

    def forward(self, inputs):
        return numpy.stack(inputs),

    def backward(self, indexes, grad_outputs):
        gy, = grad_outputs
        return tuple(None if k in self.unread else F.get_item(gy, k)
                     for k in indexes)


def mark_key(key, paths):
    """The key of a packed call: the structure says which arguments were
    lists (and of which type), so a call passing the stacked array
    itself does not share the entry."""
    train, backprop, structure, specs, alias = key
    return (train, backprop, ('packed', tuple(paths), structure), specs,
            alias)


def unpacked_arguments(args, kwargs, paths):
    """What the recorded forward gets: each packed argument (a traced
    array or Variable) as a list (or tuple) of its rows, taken by
    recorded indexing. Returns ``(args, kwargs, rows)``, ``rows`` a list
    of ``(path, [row, ...])``."""
    args, kwargs = list(args), dict(kwargs)
    rows = []
    for path in paths:
        arguments = holder(args, kwargs, path)
        packed = arguments[path[1]]
        items = [_row(packed, k) for k in range(len(packed))]
        rows.append((path, items))
        arguments[path[1]] = items if path[2] == 'list' else tuple(items)
    return tuple(args), kwargs, rows


def _row(packed, k):
    """Row ``k`` by a recorded indexing: ``packed[k]`` of an array; of a
    Variable, ``F.get_item``, or, where no graph is built, a Variable
    around the row that requires grad as the caller's items do."""
    if isinstance(packed, numpy.ndarray):
        return packed[k]
    if chainer.config.enable_backprop:
        return F.get_item(packed, k)
    return chainer.Variable(packed.array[k],
                            requires_grad=packed.requires_grad)


def move_items_into_loops(graph, runs, item_nodes, copied=()):
    """Moves each row-indexing node (recorded before the forward ran) to
    just before the first node reading it, and shifts the loop runs'
    iteration boundaries to match, so that a loop's iterations each index
    their own row (read once or more: ``x`` in the three products of a
    GRU's step). Those of ``copied`` (``F.separate``'s items: no object
    of the caller's stands for them) that several nodes read are copied
    for each, so that two loops over the items each index their own."""
    users = graph.users()
    position = dict((node, k) for k, node in enumerate(graph.nodes))
    before = {}
    copied = set(copied)
    for node in item_nodes:
        readers = sorted(set(users.get(node.outputs[0], [])),
                         key=lambda n: position.get(n, -1))
        if None in readers or not readers:
            continue
        before.setdefault(readers[0], []).append(node)
        for reader in readers[1:] if node in copied else ():
            before.setdefault(reader, []).append(
                _index_copy(graph, node, reader))
    moved = set(n for group in before.values() for n in group)
    if not moved:
        return
    old = graph.nodes
    new, start_of = [], {}

    def place(node):  # after the nodes moved before it, and theirs
        for earlier in before.get(node, ()):
            place(earlier)
        new.append(node)
    for position, node in enumerate(old):
        if node in moved:
            continue
        start_of[position] = len(new)
        place(node)
    start_of[len(old)] = len(new)
    for position in range(len(old) - 1, -1, -1):
        start_of.setdefault(position, start_of[position + 1])
    for run in runs:
        run.boundaries = [start_of[b] for b in run.boundaries]
        run.end = start_of[run.end]
    graph.nodes = new


def drop_unread(graph, runs, nodes):
    """Takes out of ``graph`` those of ``nodes`` whose outputs no node
    reads nor the graph returns (the rows ``F.separate`` cut of an array
    an op took whole instead: ``F.crf1d``'s labels), shifting the loop
    runs' iteration boundaries to match."""
    gone = unread_nodes(graph.users(), nodes)
    if gone:
        drop_nodes(graph, runs, gone)


def unread_nodes(users, nodes):
    """Those of ``nodes`` whose outputs nothing reads (``users``, as
    ``graph.users()`` gives them) but others of them that go: a chain of
    them, the last unread, goes whole."""
    gone, more = set(), True
    while more:  # (latest first: a chain goes in one pass)
        more = False
        for node in reversed(nodes):
            if node not in gone and all(
                    reader in gone for v in node.outputs
                    for reader in users.get(v, ())):
                gone.add(node)
                more = True
    return gone


def drop_nodes(graph, runs, gone):
    """Takes the nodes ``gone`` out of ``graph``, shifting the loop runs'
    iteration boundaries to match."""
    kept, start_of = [], []
    for node in graph.nodes:
        start_of.append(len(kept))
        if node not in gone:
            kept.append(node)
    start_of.append(len(kept))
    for run in runs:
        run.boundaries = [start_of[b] for b in run.boundaries]
        run.end = start_of[run.end]
    graph.nodes = kept


def _index_copy(graph, node, reader):
    """A copy of the indexing ``node`` whose output ``reader`` reads
    instead of ``node``'s."""
    value = node.outputs[0]
    output = ir.Value(value.kind, value.shape, value.dtype, value.name)
    copy = ir.Node(node.op, node.kernel, node.inputs, [output], node.attrs,
                   node.generic, node.pure, node.loc)
    graph.templates[copy] = graph.templates.get(node)
    reader.inputs = [output if x is value else x for x in reader.inputs]
    return copy
