"""Dead-code elimination."""

from chainerjit.ops import structural


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
    changed = _dropped_unread(graph)
    used = set(v for node in graph.nodes for v in node.inputs)
    used.update(graph.outputs)
    graph.consts = [c for c in graph.consts if c in used]
    graph.params = [p for p in graph.params if p in used]
    return graph, changed


def _dropped_unread(graph):
    """Drops the pure nodes of ``graph`` and of its loops' bodies none of
    whose outputs is used (a body's exits, which end the loop, stay). Did
    any go?"""
    live = set(graph.outputs)
    kept, changed = [], False
    for node in reversed(graph.nodes):
        if node.pure and not structural.is_exit(node) and \
                not any(v in live for v in node.outputs):
            changed = True
            continue
        if node.region is not None:
            changed = _dropped_unread(node.region.body) or changed
        kept.append(node)
        live.update(node.inputs)
    graph.nodes = kept[::-1]
    return changed
