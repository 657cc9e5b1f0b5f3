"""A reference interpreter of the IR: runs a graph node by node in Python,
calling each node's kernel, with loops run as their regions say (as
torch.fx's ``Interpreter`` runs a graph module).

It states the meaning of a graph without registers, jumps, buffer reuse
or arenas, so the tests use it as an oracle: a program that
``codegen.compile_graph`` made must compute what :func:`run` computes on
the same graph, and a pass must not change what :func:`run` computes.
"""

from chainerjit.ops import structural


def run(graph, arguments):
    """The outputs of ``graph`` for ``arguments``: its inputs, then its
    parameters, then its symbols (trip counts), as a program takes them.
    """
    names = graph.inputs + graph.params + graph.symbols
    if len(arguments) != len(names):
        raise ValueError('%s takes %d arguments, not %d' % (
            graph.name, len(names), len(arguments)))
    env = dict(zip(names, arguments))
    for const in graph.all_consts():
        env[const] = const.data
    _run_nodes(graph.nodes, env)
    return tuple(env[v] for v in graph.outputs)


def _run_nodes(nodes, env):
    for node in nodes:
        if node.region is not None:
            _run_loop(node, env)
        elif structural.is_exit(node):
            raise ValueError('an Exit outside a loop body: %r' % node)
        else:
            _call(node, env)


def _call(node, env):
    result = node.kernel.fn(*[env[v] for v in node.inputs])
    if node.kernel.multi:
        for value, item in zip(node.outputs, result):
            env[value] = item
    else:
        env[node.outputs[0]] = result


def _run_loop(node, env):
    """A Loop node: ``trip`` iterations of its body, each reading the
    counter, the carried values and the invariants, until an exit is
    taken; its outputs are the carried values after the last iteration,
    the count of iterations run (with exits), then the scan lists."""
    region = node.region
    body = region.body
    n_read = sum(region.carried_read)
    trip = int(env[node.inputs[0]])
    carried = _initial_carried(node, env)
    lists = [[] for _ in range(region.n_scans)]
    count = trip
    for i in range(trip):
        inner = dict(env)
        inner[body.inputs[0]] = i
        read = [c for c, r in zip(carried, region.carried_read) if r]
        inner.update(zip(body.inputs[1:1 + n_read], read))
        inner.update(zip(body.inputs[1 + n_read:],
                         [env[v] for v in node.inputs[1 + n_read:]]))
        if _left_at_once(body.nodes, inner):
            count = i
            break
        outs = [inner[v] for v in body.outputs]
        for items, value in zip(lists, outs[region.n_carried:]):
            items.append(value)
        carried = outs[:region.n_carried]
        if _left_at_end(body.nodes, inner):
            count = i + 1
            break
    results = carried + ([count] if region.counts else []) + lists
    for value, result in zip(node.outputs, results):
        env[value] = result


def _initial_carried(node, env):
    """The carried values before the first iteration: the initial values
    of those the body reads; ``None`` for the others, which have no value
    until an iteration ran."""
    region = node.region
    inits = iter(env[v] for v in node.inputs[1:1 + sum(region.carried_read)])
    return [next(inits) if read else None for read in region.carried_read]


def _left_at_once(nodes, env):
    """Runs one iteration's nodes; True if an exit placed ``here`` was
    taken (the iteration ends there, and counts not)."""
    for node in nodes:
        if structural.is_exit(node):
            if _where(node) == 'here' and _taken(node, env):
                return True
        elif node.region is not None:
            _run_loop(node, env)
        else:
            _call(node, env)
    return False


def _left_at_end(nodes, env):
    """Was an exit placed at the end of the body taken (after the
    iteration's values were collected)?"""
    return any(structural.is_exit(n) and _where(n) == 'end' and
               _taken(n, env) for n in nodes)


def _where(exit_node):
    return dict(exit_node.attrs)['where']


def _taken(exit_node, env):
    return bool(env[exit_node.inputs[0]]) == dict(exit_node.attrs)['when']
