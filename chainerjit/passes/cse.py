"""Common-subexpression elimination."""

from chainerjit.ir import fingerprints


def cse(graph):
    """Computes each pure node once: a node that applies the same
    function (op, attributes and every setting of the recorded
    FunctionNode) to the same inputs as an earlier one is dropped, and its
    outputs are read from the earlier node's.

    Before::

        %0: f32[2,3] = Tanh(x)
        %1: f32[2,3] = Tanh(x)
        %2: f32[2,3] = Add(%0, %1)
        return (%2)

    After::

        %0: f32[2,3] = Tanh(x)
        %1: f32[2,3] = Add(%0, %0)
        return (%1)

    Loop bodies are simplified too. Impure nodes (random draws, state
    updates, guards) and nodes made by other passes are kept. So are, in
    a graph recorded for training (``graph.for_training``), the nodes
    that read a float value other than a constant: eager Chainer runs the
    backward of each of them, and their gradients summed before one
    backward would round otherwise.
    """
    return graph, _cse(graph, fingerprints.exact_fingerprints(
        graph.templates), getattr(graph, 'for_training', False))


def _cse(graph, key_of, training):
    seen = {}
    renamed = {}
    kept = []
    changed = False
    for node in graph.nodes:
        node.inputs = [renamed.get(v, v) for v in node.inputs]
        if node.region is not None:
            changed |= _cse(node.region.body, key_of, training)
        key = None if training and _may_pass_gradients(node) else \
            _key(node, key_of)
        earlier = seen.get(key) if key is not None else None
        if earlier is not None:
            renamed.update(zip(node.outputs, earlier.outputs))
            changed = True
            continue
        if key is not None:
            seen[key] = node
        kept.append(node)
    graph.nodes = kept
    graph.outputs = [renamed.get(v, v) for v in graph.outputs]
    return changed


def _key(node, key_of):
    if not node.pure or node.generic or node.region is not None:
        return None
    fingerprint = key_of(node)
    if fingerprint is None:
        return None
    return fingerprint, tuple(id(v) for v in node.inputs)


def _may_pass_gradients(node):
    return any(v.dtype.kind == 'f' and v.kind != 'const'
               for v in node.inputs)
