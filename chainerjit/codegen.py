"""Code generation: an IR graph becomes a :class:`Program`.

Registers are laid out as arguments (graph inputs, then parameters),
constants, then temporaries. A temporary's register is released with
``FREE`` after its last use and handed to the next value defined, so the
register file stays small and arrays die as early as in eager mode.
"""

from chainerjit import opcodes
from chainerjit import program as program_module


def compile_graph(graph, replay=None):
    """Compiles a graph (after passes) to a :class:`Program`.

    Args:
        replay: optional ``{node: outputs}``; those nodes' kernels return
            the given arrays instead of computing (for self-checks that
            must not repeat a node's side effects).
    """
    replay = replay or {}
    args = graph.inputs + graph.params
    reg = {v: i for i, v in enumerate(args + graph.consts)}
    pinned = set(reg)  # never freed: arguments and constants
    outputs = set(graph.outputs)
    last_use = _last_uses(graph)
    free_regs = []
    n_regs = len(reg)
    code = []
    locs = {}
    kernels = []
    kernel_names = []
    for index, node in enumerate(graph.nodes):
        ins = [reg[v] for v in node.inputs]
        outs = []
        for value in node.outputs:
            if free_regs:
                reg[value] = free_regs.pop()
            else:
                reg[value] = n_regs
                n_regs += 1
            outs.append(reg[value])
        locs[len(code)] = node.loc
        kernels.append(_returning(replay[node]) if node in replay
                       else node.kernel.fn)
        kernel_names.append(node.label)
        code += opcodes.encode_call(len(kernels) - 1, ins, outs,
                                    node.kernel.multi)
        dead = [v for v in node.inputs + node.outputs
                if v not in pinned and v not in outputs
                and last_use.get(v, -1) <= index]
        for value in _unique(dead):
            code += [opcodes.FREE, reg[value]]
            free_regs.append(reg[value])
    code += [opcodes.RET, len(graph.outputs)]
    code += [reg[v] for v in graph.outputs]
    return program_module.Program(
        graph.name, code, kernels, kernel_names,
        [v.data for v in graph.consts], len(args), n_regs,
        [v.name for v in args], locs)


def _returning(outputs):
    def replayed(*arrays):
        return outputs
    return replayed


def _last_uses(graph):
    last = {}
    for index, node in enumerate(graph.nodes):
        for value in node.inputs:
            last[value] = index
    return last


def _unique(values):
    seen = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen
