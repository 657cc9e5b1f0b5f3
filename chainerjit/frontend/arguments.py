"""The call's arguments around a recording: the proxies the forward gets
in their place (traced views, and lists of rows for packed lists), what
the loop watcher ties trip counts to, and the caller's objects given back
in the result and made to hold what the forward changed in place, as in
eager mode."""

import inspect

import chainer
import numpy

from chainerjit import errors
from chainerjit.frontend import joining
from chainerjit.frontend import packing
from chainerjit.frontend import signature
from chainerjit.frontend import traced
from chainerjit.ops import structural


def traced_leaf(leaf, restore):
    """What the forward gets for an argument while recording: the same
    Variable with its array viewed as traced (undone by
    ``model_state.restore_arrays(restore)``), or a traced view of an
    array."""
    array = signature.leaf_array(leaf)
    view = array.view(traced.TracedArray) if type(array) is numpy.ndarray \
        else array
    if not isinstance(leaf, chainer.Variable):
        if chainer.backends.cuda.available and \
                type(array) is chainer.backends.cuda.ndarray:
            return array.view(traced.gpu_argument_type())
        return view
    if view is not array:
        leaf._data[0] = view
        restore.append((leaf, None, array, view))
    return leaf


def proxies_of(leaves, restore):
    """The :func:`traced_leaf` of each leaf, one per object: ``x is y``
    must hold as in eager mode."""
    made = {}
    for leaf in leaves:
        if id(leaf) not in made:
            made[id(leaf)] = traced_leaf(leaf, restore)
    return [made[id(leaf)] for leaf in leaves]


def loop_arguments(fn, instance, args, kwargs, proxies):
    """What the loop watcher needs to tie a trip count to the call's
    arguments: the proxies by identity and the int arguments by name,
    with their path in the key's structure."""
    found = {id(proxy): ('leaf', i) for i, proxy in enumerate(proxies)}
    try:
        bound = inspect.signature(fn).bind(
            *((instance,) if instance is not None else ()) + tuple(args),
            **kwargs)
    except (TypeError, ValueError):
        return found
    positional = list(inspect.signature(fn).parameters)
    skip = 1 if instance is not None else 0
    for name, value in bound.arguments.items():
        if type(value) is not int:
            continue
        if name in kwargs:
            found[('static', name)] = (('kwargs', name), value)
        else:
            index = positional.index(name) - skip
            if 0 <= index < len(args):
                found[('static', name)] = (('args', index), value)
    return found


class Rows(object):
    """The lists of rows a packed call's forward gets instead of its list
    arguments (see ``chainerjit.frontend.packing``).

    Attributes:
        nodes: the recorded nodes that index the rows.
        objects, originals: each row, and the caller's item it stands for.
        arguments: ``{id(list): ('leaf', index of the packed leaf)}``, for
            the loop watcher's trip counts.
    """

    def __init__(self):
        self.nodes = []
        self.objects = []
        self.originals = []
        self.arguments = {}
        self._lists = []  # (path, list given, its rows, packed proxy)

    def unpack(self, graph, call_args, call_kwargs, packed, proxies):
        """The forward's arguments with each packed proxy as a list of
        its rows, indexed by recorded nodes."""
        paths, caller_args, caller_kwargs = packed
        first = len(graph.nodes)
        joins = joining.is_joins(paths)
        if joins:
            args, kwargs, rows = joining.items_of(
                call_args, call_kwargs, paths, caller_args, caller_kwargs)
            paths = [j.path for j in paths]
        else:
            args, kwargs, rows = packing.unpacked_arguments(
                call_args, call_kwargs, paths)
        self.nodes = graph.nodes[first:]
        for path, items in rows:
            proxy = packing.holder(call_args, call_kwargs, path)[path[1]]
            given = packing.holder(args, kwargs, path)[path[1]]
            caller = packing.holder(caller_args, caller_kwargs,
                                    path)[path[1]]
            for row, item in zip(items, caller):
                if isinstance(row, chainer.Variable):
                    row.name = item.name
            self.objects.extend(items)
            self.originals.extend(caller)
            self._lists.append((path, given, tuple(items), proxy))
            if not joins:  # (a loop over a joined list's items unjoins it)
                leaf = next(i for i, p in enumerate(proxies) if p is proxy)
                self.arguments[id(given)] = ('leaf', leaf)
        return args, kwargs

    def note_unread(self, graph, sources, computed):
        """Tells each packing node which rows no gradient reaches (see
        :func:`_values_gradients_reach`; ``sources`` are the values of
        the Variables handed out connected to the graph, ``computed``
        those Chainer's nodes computed), so that, as in eager mode, they
        get no gradient from this call. Returns whether a gradient
        reaches every row through an op and none is returned."""
        users = graph.users()
        reaching = _values_gradients_reach(graph, sources, computed)

        def used(node):  # by an op
            return any(r is not None and not structural.stops_gradient(r)
                       for r in users.get(node.outputs[0], []))

        def reached(node):  # and so on a path passing gradients
            return used(node) and node.outputs[0] in reaching
        start, fine = 0, True
        for _, _, items, proxy in self._lists:
            nodes = self.nodes[start:start + len(items)]
            start += len(items)
            read = used
            if isinstance(proxy, chainer.Variable) and \
                    isinstance(proxy.creator, packing.PackRows):
                read = reached
                proxy.creator.unread = frozenset(
                    k for k, node in enumerate(nodes) if not read(node))
            fine = fine and all(read(n) and None not in users.get(
                n.outputs[0], []) for n in nodes)
        return fine

    def copy_back_changed_rows(self, recorder):
        """Rows are views of the stacked array: a forward that changed
        one in place changed the stack, not the caller's item. Copies
        such changes into the items (as eager mode would have made them)
        and notes the escape."""
        rows = [traced.untag(signature.leaf_array(r)) for r in self.objects]
        for row, item in zip(rows, self.originals):
            array = signature.leaf_array(item)
            if not numpy.array_equal(row, array, equal_nan=True):
                array[...] = row
                recorder.note_escape('changing an argument in place',
                                     recorder.forward_loc)

    def repacked(self, call_args, call_kwargs):
        """The forward's arguments with each list of rows it left as it
        was back as its packed proxy (to compare with the call's)."""
        args, kwargs = list(call_args), dict(call_kwargs)
        for path, given, items, proxy in self._lists:
            arguments = packing.holder(args, kwargs, path)
            if arguments[path[1]] is given and len(given) == len(items) \
                    and all(a is b for a, b in zip(given, items)):
                arguments[path[1]] = proxy
        return tuple(args), kwargs


def _values_gradients_reach(graph, sources, computed):
    """The values of a recorded (flat) graph that backprop from the
    ``sources`` reaches in eager mode: back through the ops Chainer's
    nodes computed (``computed`` holds their outputs), not through NumPy
    on arrays, nor past a stopped gradient."""
    reaching = set(sources)
    for node in reversed(graph.nodes):
        if not structural.stops_gradient(node) and any(
                v in reaching and v in computed for v in node.outputs):
            reaching.update(node.inputs)
    return reaching


def note_changed_arguments(passed, compared, originals, copies, proxies,
                           leaves, recorder):
    """An escape when the forward changed a list or dict argument in
    place (it ran on copies of the caller's containers, with the leaves
    traced): ``compared``, the arguments as the forward left them, differ
    from the call's structure ``passed``. The change is copied into the
    caller's containers, so that this call has eager's effect."""
    now = []
    try:
        changed = signature.flatten(compared, now) != passed or any(
            a is not b for a, b in zip(now, proxies))
    except errors.UnsupportedArgument:
        changed = True
    if not changed:
        return
    recorder.note_escape('changing a list or dict argument in place',
                         recorder.forward_loc)
    _copy_back(originals, copies, proxies, leaves)


def _copy_back(original, copy, proxies, leaves):
    """Makes the caller's containers in ``original`` hold what their
    copies in ``copy`` hold now."""
    if isinstance(original, tuple) and isinstance(copy, tuple):
        for o, c in zip(original, copy):
            _copy_back(o, c, proxies, leaves)
    elif isinstance(original, list) and isinstance(copy, list):
        original[:] = [_copied_item(original, i, c, proxies, leaves)
                       for i, c in enumerate(copy)]
    elif isinstance(original, dict) and isinstance(copy, dict):
        items = [(k, _copied_item(original, k, c, proxies, leaves))
                 for k, c in copy.items()]
        original.clear()
        original.update(items)


def _copied_item(original, key, copy, proxies, leaves):
    """The caller's own container at ``key`` updated in place, or the
    copy's item with proxies turned back into the caller's objects."""
    try:
        mine = original[key]
    except (IndexError, KeyError):
        mine = None
    if type(mine) is type(copy) and isinstance(copy, (list, dict, tuple)):
        _copy_back(mine, copy, proxies, leaves)
        return mine
    return untag_result(copy, proxies, leaves)


def untag_result(result, proxies, leaves):
    """The eager result with traced views turned back into plain arrays
    and argument proxies back into the caller's objects."""
    out_leaves = []
    try:
        structure = signature.flatten(result, out_leaves)
    except errors.UnsupportedArgument:
        return result
    return signature.unflatten(structure, [
        _untag_leaf(leaf, proxies, leaves) for leaf in out_leaves])


def _untag_leaf(leaf, proxies, leaves):
    for proxy, original in zip(proxies, leaves):
        if leaf is proxy:
            return original
    if isinstance(leaf, chainer.Variable):
        leaf._data[0] = traced.untag(leaf._data[0])
        return leaf
    return traced.as_eager(leaf)
