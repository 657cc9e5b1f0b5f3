"""Fusing a linear layer with the activation after it, an LSTM step with
the lateral product and sum before it, an inference convolution with
the test-mode batch normalization after it, and a ReLU with the max
pooling after it."""

from chainerjit import ir
from chainerjit import ops
from chainerjit.ops import linear as linear_ops
from chainerjit.ops import rnn

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


def fuse_relu_max_pooling(graph):
    """Makes ``max_pooling(relu(x))`` one node when nothing else reads the
    ReLU's output and the pooling's windows tile the image: its kernels
    (the pooling's ``after_relu``) give the two nodes' bits, the forward
    with the ReLU over the pooled values, a window's size fewer, the
    gradient in one pass with the ReLU's.

    Before::

        %2: f32[32,6,28,28] = ReLU(%1)
        %3: f32[32,6,14,14] = MaxPoolingND(%2)

    After::

        %3: f32[32,6,14,14] = ReLU+MaxPoolingND(%1)
    """
    return graph, _fuse(graph, _max_pooling_after, _relu_pooled)


def _fuse(graph, find, make):
    """Replaces each node and the nodes ``find(node, users)`` returns (a
    tuple, empty for none) by ``make(node, *found)``, in ``graph`` and
    its loop bodies. The fused node takes the place of the last one
    found: the inputs of the others may be computed in between."""
    changed = False
    users = graph.users()
    replaced = {}  # the nodes fused -> None; the last one -> fused node
    for node in graph.nodes:
        if node.region is not None:
            changed |= _fuse(node.region.body, find, make)
        found = find(node, users)
        if found:
            for gone in (node,) + found[:-1]:
                replaced[gone] = None
            replaced[found[-1]] = make(node, *found)
    if replaced:
        graph.nodes = [replaced.get(n, n) for n in graph.nodes
                       if replaced.get(n, n) is not None]
    return changed or bool(replaced)


def fuse_lstm_step(graph):
    """Makes ``lstm(c, u + linear(h, W))`` one node when nothing else reads
    the product or the sum (``L.LSTM``'s step with a previous state): the
    product stays in the layout the linear kernel computes it in (a
    transposed view at small batches), and one C loop sums it with ``u``
    as it copies the gates out of Chainer's interleaved layout, in place
    of NumPy's copy to C order, its sum and the LSTM's own copy. The
    node's third output holds the activated gates for the gradient,
    which then need not recompute them.

    Before::

        %13: f32[16,512] = LinearFunction(%5, %10)
        %14: f32[16,512] = Add(%12, %13)
        %15: f32[16,128], %16: f32[16,128] = LSTM(%6, %14)

    After::

        %15: f32[16,128], %16: f32[16,128], %17: f32[4,16,128] =
            LinearFunction+Add+LSTM(%6, %12, %5, %10)

    The product takes the faster weight-first order where it gives
    eager's bits (``linear_ops.swapped_product_agrees``), and also where
    ``u`` is a step of an input projection hoisted out of the loop whose
    stacked product does not (``linear_ops.stacked_product_agrees``):
    the step's values are then equal to eager's within rounding anyway
    (so is the product for h's gradient).
    """
    rounded = _rounded_steps(graph)

    def make(linear, add, lstm):
        return _lstm_step(linear, add, lstm, rounded)
    return graph, _fuse(graph, _sum_and_step_after, make)


def _rounded_steps(graph):
    """The loop bodies' steps (``IndexAt`` outputs) of hoisted input
    projections that this machine's BLAS computes with other bits than
    eager's one product per step, in ``graph`` and its loops."""
    producer = {v: node for node in graph.nodes for v in node.outputs}
    rounded = set()
    for loop in graph.nodes:
        if loop.region is None:
            continue
        body = loop.region.body
        rounded |= _rounded_steps(body)
        for outer, inner in zip(loop.inputs, body.inputs):
            hoisted = producer.get(outer)
            if hoisted is not None and _rounds(hoisted):
                rounded.update(n.outputs[0] for n in body.nodes
                               if n.op == 'IndexAt' and n.inputs[0] is inner)
    return rounded


def _rounds(node):
    """Is ``node`` a linear over the steps of a (steps, rows, features)
    array (``passes/hoist.py``) whose product rounds otherwise than one
    product per step?"""
    if node.op != 'LinearFunction' or dict(node.attrs).get('steps') != 0:
        return False
    (steps, rows, inner), (cols, _) = node.inputs[0].shape, \
        node.inputs[1].shape
    return not linear_ops.stacked_product_agrees(
        steps, rows, inner, cols, node.inputs[0].dtype)


def _only_reader(node, users):
    readers = users.get(node.outputs[0], [])
    if len(readers) != 1 or readers[0] is None:
        return None
    return readers[0]


def _activation_after(linear, users):
    """``(activation,)``: the activation node that alone reads
    ``linear``'s output, if both can be fused; else ``()``."""
    if linear.op != 'LinearFunction' or linear.generic or \
            not linear.kernel.fresh or linear.kernel.grad is None:
        return ()
    act = _only_reader(linear, users)
    if act is None:
        return ()
    if act.op not in ACTIVATIONS or act.generic or not act.kernel.inplace \
            or act.kernel.grad is None or act.kernel.grad.inputs:
        return ()
    return (act,)


def _sum_and_step_after(linear, users):
    """``(add, lstm)``: the sum that alone reads ``linear``'s bias-free
    product and the LSTM step that alone reads the sum, as its ``x``, if
    the three can be fused (lowered, one float dtype the C loops take);
    else ``()``."""
    if linear.op != 'LinearFunction' or linear.generic or \
            len(linear.inputs) != 2 or \
            getattr(linear.kernel.fn, 'product', None) is None:
        return ()
    add = _only_reader(linear, users)
    if add is None or add.op != 'Add' or add.generic or \
            len(set(v.shape for v in add.inputs + add.outputs)) != 1:
        return ()
    lstm = _only_reader(add, users)
    if lstm is None or lstm.op != 'LSTM' or \
            not getattr(lstm.kernel.fn, 'fusable', False) or \
            lstm.inputs[1] is not add.outputs[0] or \
            lstm.inputs[0] is add.outputs[0] or \
            len(add.outputs[0].shape) != 2:
        return ()
    values = linear.inputs + add.inputs + lstm.inputs + lstm.outputs
    if len(set(v.dtype for v in values)) != 1 or \
            values[0].dtype not in ops.LOOP_DTYPES:
        return ()
    return add, lstm


def _lstm_step(linear, add, lstm, rounded):
    u = add.inputs[1 if add.inputs[0] is linear.outputs[0] else 0]
    rounds = u in rounded
    fn, grad = rnn.fused_step(linear.kernel.fn.rounded_product if rounds
                              else linear.kernel.fn.product, rounds)
    x, c = add.outputs[0], lstm.outputs[0]
    gates = ir.Value('temp', (4, x.shape[0], c.shape[1]), c.dtype)
    if x.symbols and 0 in x.symbols:
        gates.symbols = {1: x.symbols[0]}
    kernel = ops.Kernel(fn, multi=True, grad=ops.GradRule(
        grad, (0, 2, 3), (0, 2)), onnx=_lstm_step_onnx(linear, add, lstm),
        fresh=True, lengths=_step_rows)
    return ir.Node('%s+%s+%s' % (linear.op, add.op, lstm.op), kernel,
                   [lstm.inputs[0], u] + linear.inputs,
                   lstm.outputs + [gates], loc=lstm.loc)


def _step_rows(rows):
    """The ``Kernel.lengths`` rule of a fused LSTM step ``(c_prev, u, h,
    W)``: the state, the input and ``h`` have the same rows; its gates
    are read by its gradient only."""
    if rows[3] is not None:
        return None
    return rnn.rows_of_step(rows[:3], outputs=3)


def _lstm_step_onnx(linear, add, lstm):
    if not (linear.kernel.onnx and add.kernel.onnx and lstm.kernel.onnx):
        return None

    def convert(b, ins, outs):
        c_prev, u, h, W = ins
        product, total = b.fresh('linearfunction'), b.fresh('add')
        b.convert(linear, [h, W], [product])
        b.convert(add, [product, u] if add.inputs[0] is linear.outputs[0]
                  else [u, product], [total])
        b.convert(lstm, [c_prev, total], outs)  # c, h and the gates
    return convert


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
    for name in ('factors', 'fortran_inputs'):  # the weight's, as the
        if hasattr(linear_grad.fn, name):  # linear's
            setattr(grad, name, getattr(linear_grad.fn, name))

    kernel = ops.Kernel(fn, dict(linear.kernel.attrs), grad=ops.GradRule(
        grad, linear_grad.inputs, act_grad.outputs,
        _chained_grad_onnx(linear_grad.onnx, act_grad.onnx)),
        onnx=_chained_onnx(linear, act), fresh=True, into=into,
        lengths=_chained_lengths(linear.kernel.lengths, act.kernel.lengths))
    return ir.Node('%s+%s' % (linear.op, act.op), kernel, linear.inputs,
                   act.outputs, linear.attrs, loc=linear.loc)


def _chained_grad_onnx(linear, act):
    """The ONNX gradient of a linear layer then an activation: the
    activation's, then the linear layer's of it."""
    if linear is None or act is None:
        return None

    def convert(b, xs, ys, gys, wanted):
        g, = act(b, (None,), ys, gys, (True,))
        return linear(b, xs, (None,), (g,), wanted)
    return convert


def _chained_lengths(first, then):
    """The ``Kernel.lengths`` rule of two kernels run one after the other
    (the second on the first's one output), where both take any rows as
    they are."""
    if first is None or then is None:
        return None

    def lengths(rows):
        found = first(rows)
        if found is None or found.kernel is not None:
            return None
        after = then(found.outputs)
        return None if after is None or after.kernel is not None else after
    return lengths


def _max_pooling_after(relu, users):
    """``(pooling,)``: the max pooling that alone reads ``relu``'s output,
    if its kernel has a form for a ReLU's input (``after_relu``); else
    ``()``."""
    if relu.op != 'ReLU' or relu.generic or relu.kernel.grad is None or \
            not relu.kernel.inplace:
        return ()
    pool = _only_reader(relu, users)
    if pool is None or pool.op != 'MaxPoolingND' or pool.generic or \
            pool.kernel.grad is None or \
            getattr(pool.kernel.fn, 'after_relu', None) is None or \
            pool.inputs != [relu.outputs[0]]:
        return ()
    return (pool,)


def _relu_pooled(relu, pool):
    fn, grad = pool.kernel.fn.after_relu(relu.kernel)
    onnx = _relu_pooled_grad_onnx(relu.kernel.grad.onnx,
                                  pool.kernel.grad.onnx)
    kernel = ops.Kernel(fn, dict(pool.kernel.attrs), grad=ops.GradRule(
        grad, (0,), (), onnx),
        onnx=_chained_onnx(relu, pool), fresh=True,
        lengths=_chained_lengths(relu.kernel.lengths, pool.kernel.lengths))
    return ir.Node('%s+%s' % (relu.op, pool.op), kernel, relu.inputs,
                   pool.outputs, pool.attrs, loc=pool.loc)


def _relu_pooled_grad_onnx(relu_grad, pool_grad):
    """The ONNX gradient of a fused ReLU and max pooling, given ``x``: the
    ReLU's output, the pooling's gradient of it, then the ReLU's."""
    if relu_grad is None or pool_grad is None:
        return None

    def convert(b, xs, ys, gys, wanted):
        y, = b.op('Relu', [xs[0]])
        g, = pool_grad(b, (y,), (None,), gys, (True,))
        return relu_grad(b, (None,), (y,), (g,), wanted)
    if ops.is_vm_faster_on_cpu(pool_grad):
        return ops.vm_faster_on_cpu(convert)
    return convert


def _normalization_after(conv, users):
    """The test-mode batch normalization over channels that alone reads
    ``conv``'s output, if both were lowered for inference (their kernels
    say so: ``per_output_channel`` and ``scale_shift``)."""
    if conv.op != 'Convolution2DFunction' or conv.generic or \
            not getattr(conv.kernel.fn, 'per_output_channel', False):
        return ()
    bn = _only_reader(conv, users)
    if bn is None or bn.op != 'FixedBatchNormalization' or bn.generic or \
            bn.inputs[0] is not conv.outputs[0] or \
            dict(bn.kernel.attrs).get('axis') != (0, 2, 3) or \
            getattr(bn.kernel.fn, 'scale_shift', None) is None:
        return ()
    return (bn,)


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
    kernel = ops.Kernel(fn, attrs, onnx=_chained_onnx(conv, bn), fresh=True,
                        lengths=_chained_lengths(conv.kernel.lengths,
                                                 bn.kernel.lengths))
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
        b.convert(first, ins[:n_first], [product])
        b.convert(second, [product] + ins[n_first:], outs)
    return convert
