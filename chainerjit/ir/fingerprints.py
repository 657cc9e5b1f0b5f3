"""Structural fingerprints of recorded nodes: what makes two of them run
the same computation. Loop rolling (``frontend.rolling``) compares the
iterations of a loop by them; common subexpression elimination
(``passes.cse``) merges nodes whose exact fingerprints are equal.
"""

import chainer
import numpy

from chainerjit.ir.graph import Value


def node_label(node):
    """The name printed for a node: Chainer's class name."""
    if isinstance(node, chainer.function.FunctionAdapter):
        return node._impl_name
    return type(node).__name__


def state_holder(node):
    """The object whose attributes hold a node's settings: the node, or
    the ``chainer.Function`` a ``FunctionAdapter`` wraps."""
    if isinstance(node, chainer.function.FunctionAdapter):
        return node._function
    return node


_GRAPH_FIELDS = frozenset([
    'inputs', 'outputs', 'rank', 'stack', '_input_indexes_to_retain',
    '_output_indexes_to_retain', '_retained_output_data', 'lazy_grad_sum',
    '_node', '_owned_node', 'outputs_rank'])


def exact_fingerprints(templates):
    """A function giving each recorded node a key that is equal for two
    nodes exactly when they compute the same function of their inputs
    (``None`` for nodes not recorded, which equal nothing)."""
    fingerprints = Fingerprints(templates)

    def key(node):
        if node not in templates and node.index is None:
            return None
        return fingerprints._compute(node, exact=True)
    return key


class Fingerprints(object):
    """What makes two recorded nodes run the same computation: op,
    attributes, every setting the FunctionNode holds, and the types of
    inputs and outputs. Integers in ``F.get_item``'s index are left out
    (``xs[t]``), and the int and float constants of the FunctionNode
    classes ``counted`` (``h * (t + 1)``, ``h * 0.9 ** t``) and the ints
    of NumPy's ufuncs (``lengths > t``); the loop rolling checks them."""

    def __init__(self, templates, counted=()):
        self.templates = templates
        self.counted = frozenset(counted)
        self.cache = {}

    def note_region(self, loop):
        # Exact: an index that differs between the bodies of two recorded
        # inner loops must make them differ.
        loop.region.fingerprint = (
            tuple(self._compute(n, exact=True)
                  for n in loop.region.body.nodes),
            _flow_signature(loop.region.body))

    def __call__(self, node):
        found = self.cache.get(node)
        if found is None:
            found = self.cache[node] = self._compute(node)
        return found

    def _compute(self, node, exact=False):
        types = (tuple(v.type_str for v in node.inputs),
                 tuple(v.type_str for v in node.outputs))
        if node.region is not None:
            return ('Loop', node.attrs, types, node.region.fingerprint)
        template = self.templates.get(node)
        if template is None and node.index is not None:  # IndexAt
            state = ('index', node.attrs)
        elif template is None:
            state = ('unknown', id(node))
        elif type(template) is tuple and template[0] == 'guard':
            return ('Guard', template[1], template[2] if exact else None)
        elif type(template) is tuple:  # NumPy called outside Chainer
            index = index_of(template)
            state = (template[1], _value_key(
                template[2], not exact and is_ufunc_call(template))
                if index is None else _value_key(index, not exact))
        else:
            holder = state_holder(template)
            inputs = set(name for name, _ in node.input_attrs)
            counted = type(holder) in self.counted
            state = (type(holder), tuple(
                (k, _value_key(v, not exact and (
                    k == 'slices' or counted and k == 'value'),
                    not exact and counted and k == 'value'))
                for k, v in sorted(vars(holder).items())
                if k not in _GRAPH_FIELDS and k not in inputs))
        attrs = () if not exact and (
            node.op in _INDEXES or type(template) in self.counted) \
            else node.attrs
        return (node.op, attrs, node.generic, types, state)


# Indexings, whose printed index (``attrs``) the loose fingerprint leaves
# out as it does the ints in it.
_INDEXES = frozenset(['GetItem', 'ndarray.__getitem__'])


def _value_key(value, mask_ints=False, mask_floats=False):
    """A comparable key of a setting: scalars by value, containers by
    contents, small arrays by contents, other objects by identity. With
    ``mask_floats``, a plain float is any float (``h * 0.9 ** t``)."""
    kind = type(value)
    if mask_ints and isinstance(value, int) and kind is not bool:
        return '#'  # (also an argument's size: ``xs[t]`` of ``t = T - 1``)
    if mask_floats and kind is float:
        return '#.'
    if value is None or kind in (bool, int, float, str, complex):
        return (kind, repr(value))
    if isinstance(value, (int, float)) and \
            isinstance(getattr(value, 'value', None), Value):
        # A number computed at run time (frontend.scalars): the node
        # reads it as an input, whose source the data flow compares.
        return (kind, 'varying')
    if isinstance(value, int) and not isinstance(value, bool):
        # an argument's size read while recording (frontend.lengths)
        return (int, int.__repr__(value))
    if kind in (tuple, list):
        return (kind, tuple(_value_key(v, mask_ints) for v in value))
    if kind is dict:
        return (kind, tuple((k, _value_key(v)) for k, v in
                            sorted(value.items(), key=repr)))
    if kind is slice:
        if mask_ints and one_step_slice(value):
            return (kind, '#:#+1')  # (xs[t:t+1])
        return (kind, repr(value))
    if isinstance(value, (numpy.dtype, type)):
        return ('type', repr(value))
    if isinstance(value, numpy.generic):
        return (kind, repr(value))
    if isinstance(value, numpy.ndarray) and value.size <= 4096:
        return ('array', value.shape, value.dtype.str, value.tobytes())
    return ('object', id(value))


def _flow_signature(graph):
    """The data flow of a graph as positions, for comparing bodies."""
    where = {}
    for i, value in enumerate(graph.inputs):
        where[value] = ('in', i)
    flow = []
    for p, node in enumerate(graph.nodes):
        flow.append(tuple(where.get(v, ('?',)) for v in node.inputs))
        for q, value in enumerate(node.outputs):
            where[value] = (p, q)
    return tuple(flow), tuple(where.get(v, ('?',)) for v in graph.outputs)


def is_ufunc_call(template):
    """Is ``template`` that of a NumPy ufunc called outside Chainer
    (``lengths > t``), whose int arguments the loop rolling checks?"""
    if type(template) is not tuple or template[0] != 'numpy':
        return False
    fn = template[1]
    return isinstance(getattr(fn, '__self__', None), numpy.ufunc) and \
        fn.__name__ == '__call__'


def ufunc_ints(template):
    """``[(position, int)]``: the Python ints among the arguments of a
    NumPy ufunc's call (:func:`is_ufunc_call`)."""
    return [(k, a) for k, a in enumerate(template[2][0]) if type(a) is int]


def index_of(template):
    """The index of ``F.get_item`` or of NumPy's ``x[...]`` as a tuple,
    or ``None`` for another node."""
    if type(template) is tuple:
        if getattr(template[1], '__name__', None) != '__getitem__':
            return None
        index = template[2][0][1]
        return index if type(index) is tuple else (index,)
    if node_label(template) == 'GetItem':
        return tuple(template.slices)
    return None


def one_step_slice(entry):
    """Is the index entry ``entry`` a slice of one item at an int
    (``xs[t:t+1]``), which a loop counter may follow as it does an int
    (``ops.structural.counted_slice``)?"""
    if type(entry) is not slice or entry.step not in (None, 1):
        return False
    start, stop = entry.start, entry.stop
    if stop is None:  # (xs[-1:], the last)
        return _plain_int(start) and int.__int__(start) == -1
    return _plain_int(start) and _plain_int(stop) and \
        int.__int__(stop) - int.__int__(start) == 1 and \
        int.__int__(stop) != 0


def _plain_int(value):
    return isinstance(value, int) and type(value) is not bool


def index_at_rank(template, ndim):
    """:func:`index_of`, its ``...`` written out (:func:`written_out`), so
    that each entry's position is fixed whatever the sizes."""
    index = index_of(template)
    return None if index is None else written_out(index, ndim)


def written_out(index, ndim):
    """The tuple ``index`` of a basic indexing of an array of ``ndim``
    axes, its ``...`` written out as the ``:`` it stands for (``xs[t,
    ...]``: ``xs[t, :, :]``); ``index`` itself where it has no ``...``
    or is not basic."""
    ellipses = [k for k, i in enumerate(index) if i is Ellipsis]
    if len(ellipses) != 1 or not all(
            i is None or i is Ellipsis or isinstance(i, (int, slice))
            for i in index):
        return index
    named = sum(1 for i in index if i is not None and i is not Ellipsis)
    at = ellipses[0]
    return index[:at] + (slice(None),) * (ndim - named) + index[at + 1:]
