"""Fusing a linear layer with the activation after it, and an inference
convolution with the test-mode batch normalization after it."""

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
    return graph, _fuse(graph, _activation_after, _fused)


def fuse_conv_batchnorm(graph):
    """Makes ``fixed_batch_normalization(conv(x, W, b), ...)`` one
    convolution when both were recorded for inference and nothing else
    reads the convolution: each call scales ``W`` and ``b`` per output
    channel by the normalization's scale and adds its shift to ``b``
    (equal within rounding, as the inference convolution already is), so
    the normalization's passes over the activations disappear.

    Before::

        %0: f32[32,6,28,28] = Convolution2DFunction(x, W, b)
        %1: f32[32,6,28,28] = FixedBatchNormalization(%0, g, b2, m, v)

    After::

        %1: f32[32,6,28,28] = Convolution2DFunction+FixedBatchNormalization(
            x, W, b, g, b2, m, v)
    """
    return graph, _fuse(graph, _normalization_after, _conv_normalized)


def _fuse(graph, find, make):
    """Replaces each node and the node ``find(node, users)`` returns by
    ``make(node, found)``, in ``graph`` and its loop bodies. The fused
    node takes the place of the second one: the second's other inputs
    may be computed between the two."""
    changed = False
    users = graph.users()
    replaced = {}  # the first node -> None; the second -> fused node
    for node in graph.nodes:
        if node.region is not None:
            changed |= _fuse(node.region.body, find, make)
        second = find(node, users)
        if second is not None:
            replaced[second] = make(node, second)
            replaced[node] = None
    if replaced:
        graph.nodes = [replaced.get(n, n) for n in graph.nodes
                       if replaced.get(n, n) is not None]
    return changed or bool(replaced)


def _only_reader(node, users):
    readers = users.get(node.outputs[0], [])
    if len(readers) != 1 or readers[0] is None:
        return None
    return readers[0]


def _activation_after(linear, users):
    """The activation node that alone reads ``linear``'s output, if both
    can be fused."""
    if linear.op != 'LinearFunction' or linear.generic or \
            not linear.kernel.fresh or linear.kernel.grad is None:
        return None
    act = _only_reader(linear, users)
    if act is None:
        return None
    if act.op not in ACTIVATIONS or act.generic or not act.kernel.inplace \
            or act.kernel.grad is None or act.kernel.grad.inputs:
        return None
    return act


def _then_in_place(linear_fn, act_into):
    def fn(*arrays):
        return act_into(linear_fn(*arrays))
    return fn


def _then_in_place_into(linear_into, act_into):
    def into(out, x, W, b=None):
        return act_into(linear_into(out, x, W, b))
    return into


def _fused(linear, act):
    linear_fn, act_into = linear.kernel.fn, act.kernel.inplace[0]
    linear_grad, act_grad = linear.kernel.grad, act.kernel.grad

    one_pass = getattr(linear_fn, 'then_relu', None)
    if act.op == 'ReLU' and one_pass is not None:
        fn, into = one_pass  # the bias and the ReLU in one loop
    else:
        fn = _then_in_place(linear_fn, act_into)
        into = None
        if linear.kernel.into is not None and act.kernel.into is not None:
            into = _then_in_place_into(linear.kernel.into, act_into)

    def grad(xs, ys, gys, wanted):
        g, = act_grad.fn((None,), ys, gys, (True,))
        return linear_grad.fn(xs, (None,), (g,), wanted)

    kernel = ops.Kernel(fn, dict(linear.kernel.attrs), grad=ops.GradRule(
        grad, linear_grad.inputs, act_grad.outputs),
        onnx=_chained_onnx(linear, act), fresh=True, into=into)
    return ir.Node('%s+%s' % (linear.op, act.op), kernel, linear.inputs,
                   act.outputs, linear.attrs, loc=linear.loc)


def _normalization_after(conv, users):
    """The test-mode batch normalization over channels that alone reads
    ``conv``'s output, if both were lowered for inference (their kernels
    say so: ``per_output_channel`` and ``scale_shift``)."""
    if conv.op != 'Convolution2DFunction' or conv.generic or \
            not getattr(conv.kernel.fn, 'per_output_channel', False):
        return None
    bn = _only_reader(conv, users)
    if bn is None or bn.op != 'FixedBatchNormalization' or bn.generic or \
            bn.inputs[0] is not conv.outputs[0] or \
            dict(bn.kernel.attrs).get('axis') != (0, 2, 3) or \
            getattr(bn.kernel.fn, 'scale_shift', None) is None:
        return None
    return bn


def _conv_normalized(conv, bn):
    conv_fn, scale_shift = conv.kernel.fn, bn.kernel.fn.scale_shift
    n_conv = len(conv.inputs)

    def fn(x, W, *rest):
        scale, shift = scale_shift(*rest[n_conv - 2:])
        bias = shift if n_conv == 2 else rest[0] * scale + shift
        W = (W * scale.reshape(-1, 1, 1, 1)).astype(W.dtype, copy=False)
        return conv_fn(x, W, bias.astype(x.dtype, copy=False))

    attrs = dict(conv.kernel.attrs)
    attrs['eps'] = dict(bn.kernel.attrs)['eps']
    kernel = ops.Kernel(fn, attrs, onnx=_chained_onnx(conv, bn), fresh=True)
    return ir.Node('%s+%s' % (conv.op, bn.op), kernel,
                   conv.inputs + bn.inputs[1:], bn.outputs, conv.attrs,
                   loc=conv.loc)


def _chained_onnx(first, second):
    """The ONNX converter of a fused node: ``first``'s converter on the
    first node's inputs, then ``second``'s on that product and the rest
    of the inputs; ``None`` if either has none."""
    if not (first.kernel.onnx and second.kernel.onnx):
        return None
    n_first = len(first.inputs)

    def convert(b, ins, outs):
        product = b.fresh(first.op.lower())
        first.kernel.onnx(b, ins[:n_first], [product])
        second.kernel.onnx(b, [product] + ins[n_first:], outs)
    return convert
