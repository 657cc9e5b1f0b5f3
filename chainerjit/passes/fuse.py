"""Fusing a linear layer with the activation after it."""

from chainerjit import ir
from chainerjit import ops

ACTIVATIONS = frozenset(['ReLU', 'Tanh', 'Sigmoid'])


def fuse_linear_activation(graph):
    """Makes ``act(linear(x, W, b))`` one node when nothing else reads the
    linear output: one kernel call that applies the activation in place on
    the product's buffer, with the two gradient rules chained.

    Before::

        %0: f32[64,100] = LinearFunction(x, W, b)
        %1: f32[64,100] = ReLU(%0)

    After::

        %1: f32[64,100] = LinearFunction+ReLU(x, W, b)

    Loop bodies are fused too.
    """
    return graph, _fuse(graph)


def _fuse(graph):
    changed = False
    users = graph.users()
    replaced = {}  # linear node -> fused node; activation -> None
    for node in graph.nodes:
        if node.region is not None:
            changed |= _fuse(node.region.body)
        act = _activation_after(node, users)
        if act is not None:
            replaced[node] = _fused(node, act)
            replaced[act] = None
    if replaced:
        graph.nodes = [replaced.get(n, n) for n in graph.nodes
                       if replaced.get(n, n) is not None]
    return changed or bool(replaced)


def _activation_after(linear, users):
    """The activation node that alone reads ``linear``'s output, if both
    can be fused."""
    if linear.op != 'LinearFunction' or linear.generic or \
            not linear.kernel.fresh or linear.kernel.grad is None:
        return None
    readers = users.get(linear.outputs[0], [])
    if len(readers) != 1 or readers[0] is None:
        return None
    act = readers[0]
    if act.op not in ACTIVATIONS or act.generic or not act.kernel.inplace \
            or act.kernel.grad is None or act.kernel.grad.inputs:
        return None
    return act


def _fused(linear, act):
    linear_fn, act_into = linear.kernel.fn, act.kernel.inplace[0]
    linear_grad, act_grad = linear.kernel.grad, act.kernel.grad

    def fn(*arrays):
        return act_into(linear_fn(*arrays))

    def grad(xs, ys, gys, wanted):
        g, = act_grad.fn((None,), ys, gys, (True,))
        return linear_grad.fn(xs, (None,), (g,), wanted)

    def to_onnx(b, ins, outs):
        product = b.fresh('linear')
        linear.kernel.onnx(b, ins, [product])
        act.kernel.onnx(b, [product], outs)

    onnx = to_onnx if linear.kernel.onnx and act.kernel.onnx else None
    kernel = ops.Kernel(fn, dict(linear.kernel.attrs), grad=ops.GradRule(
        grad, linear_grad.inputs, act_grad.outputs), onnx=onnx, fresh=True)
    return ir.Node('%s+%s' % (linear.op, act.op), kernel, linear.inputs,
                   act.outputs, linear.attrs, loc=linear.loc)
