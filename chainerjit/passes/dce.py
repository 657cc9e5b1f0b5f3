"""Dead-code elimination."""


def dce(graph):
    """Removes pure nodes none of whose outputs is used.

    Before::

        %0: f32[2,3] = Exp(x)
        %1: f32[2,3] = ReLU(x)
        return (%1)

    After::

        %0: f32[2,3] = ReLU(x)
        return (%0)

    Generic and impure nodes (random draws, state updates) are kept.
    Constants and parameters no node uses are dropped.
    """
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if node.pure and not any(v in live for v in node.outputs):
            continue
        kept.append(node)
        live.update(node.inputs)
    changed = len(kept) != len(graph.nodes)
    graph.nodes = kept[::-1]
    used = set(v for node in graph.nodes for v in node.inputs)
    used.update(graph.outputs)
    graph.consts = [c for c in graph.consts if c in used]
    graph.params = [p for p in graph.params if p in used]
    return graph, changed
