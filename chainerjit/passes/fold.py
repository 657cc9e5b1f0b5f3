"""Constant folding."""


def fold_constants(graph):
    """Computes, once, the pure nodes whose inputs are all constants.

    Before::

        c0: f32[3,4] = const
        %0: f32[3,4] = Tanh(c0)
        %1: f32[3,4] = Mul(x, %0)
        return (%1)

    After (``%0`` became the constant ``c1``; DCE drops ``c0``)::

        c0: f32[3,4] = const
        c1: f32[3,4] = const
        %0: f32[3,4] = Mul(x, c1)
        return (%0)

    Generic and impure nodes (random draws, state updates) are kept.
    """
    kept = []
    changed = False
    for node in graph.nodes:
        if node.pure and node.region is None and node.inputs and all(
                v.kind == 'const' for v in node.inputs):
            outputs = node.kernel.fn(*[v.data for v in node.inputs])
            if not node.kernel.multi:
                outputs = (outputs,)
            for value, array in zip(node.outputs, outputs):
                value.kind, value.data = 'const', array
                graph.consts.append(value)
            changed = True
        else:
            kept.append(node)
    graph.nodes = kept
    return graph, changed
