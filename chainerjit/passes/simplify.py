"""Algebraic simplification of reshape and transpose chains."""

from chainer.functions.array import reshape
from chainer.functions.array import transpose

from chainerjit import ops

RESHAPES = frozenset(['Reshape', 'ExpandDims', 'Squeeze'])
TRANSPOSES = frozenset(['Transpose', 'Swapaxes', 'Rollaxis', 'Moveaxis'])


def simplify(graph):
    """Folds chains of views into one view and drops views that change
    nothing.

    * ``reshape(reshape(x, s1), s2)`` becomes ``reshape(x, s2)`` (also for
      ``expand_dims`` and ``squeeze``, which are reshapes);
    * ``transpose(transpose(x, a), b)`` becomes one transpose with the
      composed axes;
    * a reshape to ``x``'s own shape and a transpose with the identity
      order are dropped (unless the graph returns them).

    Before::

        %0: f32[6,4] = Reshape[shape=(6, 4)](x)
        %1: f32[2,12] = Reshape[shape=(2, 12)](%0)
        %2: f32[12,2] = Transpose[axes=(1, 0)](%1)
        %3: f32[2,12] = Transpose[axes=(1, 0)](%2)
        %4: f32[2,12] = Tanh(%3)

    After (DCE drops ``%0`` and ``%2``)::

        %1: f32[2,12] = Reshape[shape=(2, 12)](x)
        %4: f32[2,12] = Tanh(%1)

    Loop bodies are simplified too; generic nodes are left alone.
    """
    return graph, _simplify(graph)


def _simplify(graph):
    producer = {}
    renamed = {}
    kept = []
    changed = False
    for node in graph.nodes:
        node.inputs = [renamed.get(v, v) for v in node.inputs]
        if node.region is not None:
            changed |= _simplify(node.region.body)
        kind = _kind(node)
        if kind is not None:
            source = producer.get(node.inputs[0])
            if source is not None and _kind(source) == kind:
                _fold(graph, node, source, kind)
                changed = True
            if _is_identity(node, kind) and \
                    node.outputs[0] not in graph.outputs:
                renamed[node.outputs[0]] = node.inputs[0]
                changed = True
                continue
        for value in node.outputs:
            producer[value] = node
        kept.append(node)
    graph.nodes = kept
    return changed


def _kind(node):
    if node.generic or not node.pure or len(node.inputs) != 1:
        return None
    if node.op in RESHAPES and 'shape' in dict(node.attrs):
        return 'reshape'
    if node.op in TRANSPOSES and 'axes' in dict(node.attrs):
        return 'transpose'
    return None


def _fold(graph, node, source, kind):
    """Makes ``node`` read ``source``'s input, doing both views at once."""
    x = source.inputs[0]
    out = node.outputs[0]
    if kind == 'reshape':
        template = reshape.Reshape(out.shape)
    else:
        first, second = (dict(n.attrs)['axes'] for n in (source, node))
        template = transpose.Transpose(tuple(first[a] for a in second))
    ctx = ops.LowerContext(None, (x.shape,), (x.dtype,), (out.shape,),
                           (out.dtype,))
    kernel = ops.lower(template, ctx)
    node.op = ops.node_label(template)
    node.kernel = kernel
    node.attrs = kernel.attrs
    node.inputs = [x]
    graph.templates[node] = template


def _is_identity(node, kind):
    if kind == 'reshape':
        return node.inputs[0].shape == node.outputs[0].shape
    axes = dict(node.attrs)['axes']
    return tuple(axes) == tuple(range(len(axes)))
