"""A loop that is one LSTM or GRU layer, converted to ONNX's ``LSTM`` or
``GRU`` operator.

An ``L.LSTM`` (``L.StatelessLSTM``, ``F.lstm`` on a linear of ``h``) or
an ``L.GRU`` (``L.StatelessGRU``) called once per step of a time-major or
batch-first array records as a Loop whose body takes one step. As a
generic ONNX ``Loop`` onnxruntime runs each step as some twenty nodes of
a subgraph; its ``LSTM`` and ``GRU`` operators run the whole layer as one
kernel, about twice as fast. :func:`convert_rnn_loop` converts such a
loop so, and leaves any other to the generic conversion.

An LSTM body is the step ``lstm(c, x_t + h U^T)`` on the step's input
projection, hoisted before the loop (``passes.hoist``). Chainer's gates
are interleaved (unit ``j``'s gate ``k`` is column ``4 j + k``, ``k`` for
the input ``a``, then ``i``, ``f``, ``o``); ONNX wants blocks in the order
``i, o, f, c``: the weights are gathered in that order.

A GRU body is Chainer's ``GRUBase`` step: ``r = sigmoid(W_r x + U_r h)``,
``z = sigmoid(W_z x + U_z h)``, ``h~ = tanh(W x + U (r h))``, ``h' = z h~ +
(1 - z) h``. ONNX's ``z`` weighs the old state: it is Chainer's ``1 -
z``, the sigmoid of the negated sum, so those weights are negated; ``r h``
before ``U`` is ONNX's default (``linear_before_reset=0``).

onnxruntime folds the gathers and negations where the weights are
initializers (a session that owns them, an exported model).
"""

import collections

import numpy

from chainerjit.ops import array as array_ops
from chainerjit.ops import structural

#: ONNX's LSTM gate blocks (i, o, f, c) as Chainer's gate indexes.
ONNX_GATE_ORDER = (1, 3, 2, 0)

#: A matched loop: the ONNX ``op``; the steps ``xs`` (on ``steps_axis``;
#: the loop reads step ``start + step * i``, ``step`` 1 or -1, a reversed
#: loop from the end); the positions of the op's states (``h``, then
#: ``c``) among the carried values; ``weights(b, names)``, which gives the
#: op's ``W``, ``R`` and ``B`` inputs; and ``peeled``: the loop's initial
#: states are the same layer's step from zero states on the step before
#: ``start`` (its first, peeled before the loop), which the node then
#: takes. The scan outputs all are ``h``.
Layer = collections.namedtuple(
    'Layer', 'op xs steps_axis start step carried weights peeled')


def convert_rnn_loop(builder, node, names):
    """Converts the Loop ``node`` as one ONNX ``LSTM`` or ``GRU`` node where
    its body is one step of such a layer (see the module); returns
    whether it did."""
    layer = match_rnn_loop(node, builder.producers)
    if layer is None:
        return False
    _emit(builder, node, names, layer)
    return True


def match_rnn_loop(node, producers):
    """The :class:`Layer` the Loop ``node`` runs, or ``None``.
    ``producers``: the node that gives each outer value."""
    region = node.region
    if region.counts or not all(region.carried_read) or \
            region.n_carried not in (1, 2):
        return None
    return (_match_lstm if region.n_carried == 2 else _match_gru)(
        node, producers)


# --- LSTM --------------------------------------------------------------------

def _match_lstm(node, producers):
    body = node.region.body
    step = _lstm_step(body)
    if step is None:
        return None
    x_t, c_in, h_in, U, c_out, h_out = step
    carried = body.inputs[1:3]
    if set(carried) != {c_in, h_in} or \
            [body.outputs[carried.index(v)] for v in (c_in, h_in)] != \
            [c_out, h_out] or not _scans_are(body, 2, h_out):
        return None
    outer = dict(zip(body.inputs, node.inputs))
    read = _counter_read(body, x_t, outer)
    if read is None or U not in outer:
        return None
    projections, steps_axis, start, step = read
    projection = producers.get(projections)
    if projection is None or projection.op != 'LinearFunction' or \
            projection.generic or \
            dict(projection.attrs).get('steps') != steps_axis:
        return None
    xs, W = projection.inputs[:2]
    b = projection.inputs[2] if len(projection.inputs) > 2 else None
    units = c_in.shape[-1]
    if not _float32(xs, W, outer[U], c_in, h_in, b) or \
            len(xs.shape) != 3 or len(c_in.shape) != 2 or \
            h_in.shape != c_in.shape or \
            x_t.shape != (c_in.shape[0], 4 * units) or \
            W.shape != (4 * units, xs.shape[2]) or \
            outer[U].shape != (4 * units, units) or \
            (b is not None and b.shape != (4 * units,)):
        return None
    at = (carried.index(h_in), carried.index(c_in))
    return Layer('LSTM', xs, steps_axis, start, step, at,
                 _lstm_weights(W, outer[U], b, units), _peeled_step(
                     producers, [node.inputs[1 + k] for k in at], xs, W, b,
                     steps_axis, start - step))


def _lstm_step(body):
    """``(x_t, c_in, h_in, U, c_out, h_out)`` where ``body``'s nodes are
    one step ``lstm(c_in, x_t + h_in U^T)`` and a read of ``x_t``: fused
    (``passes.fuse``) or as the linear, the sum and the step."""
    indexes = _index_nodes(body)
    nodes = [n for n in body.nodes if n not in indexes]
    if len(indexes) != 1:
        return None
    if len(nodes) == 1 and nodes[0].op == 'LinearFunction+Add+LSTM':
        fused = nodes[0]
        c_in, x_t, h_in, U = fused.inputs
        return (x_t, c_in, h_in, U) + tuple(fused.outputs[:2])
    if [n.op for n in nodes] != ['LinearFunction', 'Add', 'LSTM']:
        return None
    linear, add, lstm = nodes
    if len(linear.inputs) != 2 or lstm.inputs[1] is not add.outputs[0] or \
            linear.outputs[0] not in add.inputs:
        return None
    x_t = add.inputs[1 if add.inputs[0] is linear.outputs[0] else 0]
    h_in, U = linear.inputs
    return (x_t, lstm.inputs[0], h_in, U) + tuple(lstm.outputs)


def _peeled_step(producers, states, xs, W, b, axis, index):
    """Are ``states`` (``h``, ``c``) the LSTM step ``lstm(0, x W^T + b)``
    of ``x``, the step ``index`` of ``xs`` on ``axis`` (the first step of
    ``L.LSTM`` or ``L.StatelessLSTM``, which has no ``h`` yet, peeled
    before the loop)? That is the layer's step from zero states."""
    step = producers.get(states[0])
    if step is None or step.op != 'LSTM' or step.generic or \
            step.outputs != [states[1], states[0]] or \
            not _zeros(step.inputs[0], producers):
        return False
    linear = producers.get(step.inputs[1])
    if linear is None or linear.op != 'LinearFunction' or linear.generic \
            or linear.attrs or linear.inputs[1:] != [W] + (
                [b] if b is not None else []):
        return False
    read = producers.get(linear.inputs[0])
    slices = (index,) if axis == 0 else (slice(None), index)
    return read is not None and read.inputs == [xs] and \
        dict(read.attrs).get(_INDEX_ATTRIBUTES.get(read.op)) == \
        array_ops.index_label(slices)


#: Where a recorded index of a step prints its index: ``xs[0]`` of a
#: Variable (``F.get_item``) and of an array.
_INDEX_ATTRIBUTES = {'GetItem': 'slices', 'ndarray.__getitem__': 'index'}


def _zeros(value, producers):
    """Is ``value`` all zeros: a constant, or ``numpy.zeros``/``full``
    of zeros made of a size while recording?"""
    if value.kind == 'const':
        return value.data is not None and not numpy.any(value.data)
    made = producers.get(value)
    return made is not None and made.op in ('numpy.full', 'numpy.zeros') \
        and dict(made.attrs).get('fill', 0) == 0


def _lstm_weights(W, U, b, units):
    def weights(builder, names):
        order = builder.int64s([4 * j + k for k in ONNX_GATE_ORDER
                                for j in range(units)])

        def gathered(value):
            return builder.single('Gather', names[value], order, axis=0)
        bias = None
        if b is not None:
            bias = builder.single('Concat', gathered(b), builder.constant(
                numpy.zeros(4 * units, b.dtype)), axis=0)
        return gathered(W), gathered(U), bias
    return weights


# --- GRU ---------------------------------------------------------------------

def _match_gru(node, producers):
    body = node.region.body
    h_in, h_out = body.inputs[1], body.outputs[0]
    made = dict((v, n) for n in body.nodes for v in n.outputs)
    step = _gru_step(made, h_in, h_out)
    if step is None or not _scans_are(body, 1, h_out):
        return None
    x_t, used, linears = step
    outer = dict(zip(body.inputs, node.inputs))
    read = _counter_read(body, x_t, outer)
    invariants = [v for pair in linears for v in pair if v is not None]
    if read is None or set(used) | _index_nodes(body) != set(body.nodes) \
            or not all(v in outer for v in invariants):
        return None
    xs, steps_axis, start, step_ = read
    units = h_in.shape[-1]
    shapes = [(units, xs.shape[2])] * 3 + [(units, units)] * 3
    if not _float32(xs, h_in, *[outer[v] for v in invariants]) or \
            len(xs.shape) != 3 or len(h_in.shape) != 2 or \
            x_t.shape != (h_in.shape[0], xs.shape[2]) or any(
                outer[W].shape != shape or (b is not None and
                                            outer[b].shape != (units,))
                for (W, b), shape in zip(linears, shapes)):
        return None
    return Layer('GRU', xs, steps_axis, start, step_, (0,), _gru_weights(
        [(outer[W], None if b is None else outer[b]) for W, b in linears],
        units), False)


def _gru_step(made, h_in, h_out):
    """``(x_t, nodes, linears)`` where ``h_out`` is Chainer's GRU step on
    ``h_in`` and the step's input ``x_t``: ``nodes`` the step's nodes,
    ``linears`` the ``(W, b)`` (``b`` may be ``None``) of ``W_z``,
    ``W_r``, ``W``, then of ``U_z``, ``U_r``, ``U``; else ``None``."""
    mix = _made_by(made, h_out, 'LinearInterpolate')
    if mix is None or mix.inputs[2] is not h_in:
        return None
    z, candidate = mix.inputs[:2]
    gates = [_made_by(made, z, 'Sigmoid'), _made_by(made, candidate,
                                                    'Tanh')]
    if None in gates:
        return None
    update = _sum_of_linears(made, gates[0].inputs[0], h_in)
    new = _sum_of_linears(made, gates[1].inputs[0], None)
    if update is None or new is None:
        return None
    x_t = update[1][0]
    scaled = new[2][0]  # r h, the input of U
    product = _made_by(made, scaled, 'Mul')
    if product is None or h_in not in product.inputs or new[1][0] is not x_t:
        return None
    r = product.inputs[1 if product.inputs[0] is h_in else 0]
    reset_gate = _made_by(made, r, 'Sigmoid')
    reset = reset_gate and _sum_of_linears(made, reset_gate.inputs[0], h_in)
    if not reset or reset[1][0] is not x_t:
        return None
    nodes = [mix, product, reset_gate] + gates + [
        n for found in (update, reset, new) for n in found[0]]
    linears = [found[1][1:] for found in (update, reset, new)] + \
        [found[2][1:] for found in (update, reset, new)]
    return x_t, nodes, linears


def _sum_of_linears(made, total, h_in):
    """``(nodes, (x, W, b), (y, V, c))`` where ``total`` is the sum of a
    linear of ``x`` and a linear of ``y``, ``y`` being ``h_in`` (given
    ``None``: the one of the two that is not the step's input, which the
    caller checks); else ``None``."""
    add = _made_by(made, total, 'Add')
    if add is None:
        return None
    linears = [_made_by(made, v, 'LinearFunction') for v in add.inputs]
    if None in linears or len(set(add.inputs)) != 2:
        return None
    terms = [(n.inputs[0], n.inputs[1], n.inputs[2] if len(n.inputs) > 2
              else None) for n in linears]
    if h_in is not None:
        if [t[0] is h_in for t in terms].count(True) != 1:
            return None
        if terms[0][0] is h_in:
            terms.reverse()
    elif terms[0][0] in made and made[terms[0][0]].op == 'Mul':
        terms.reverse()  # U's input r h is the second term
    return [add] + linears, terms[0], terms[1]


def _made_by(made, value, op):
    """The node of ``op`` that gives ``value``, or ``None``."""
    node = made.get(value)
    return node if node is not None and node.op == op and \
        not node.generic else None


def _gru_weights(linears, units):
    def weights(builder, names):
        def rows(k, negated):
            W = names[linears[k][0]]
            return builder.single('Neg', W) if negated else W

        def bias(k, negated):
            b = linears[k][1]
            if b is None:
                return builder.constant(numpy.zeros(units, numpy.float32))
            return builder.single('Neg', names[b]) if negated else names[b]
        # ONNX's gates are z, r, h: Chainer's z negated.
        W = builder.single('Concat', *[rows(k, k == 0) for k in range(3)],
                           axis=0)
        R = builder.single('Concat', *[rows(k, k == 3)
                                       for k in range(3, 6)], axis=0)
        B = builder.single('Concat', *[bias(k, k in (0, 3))
                                       for k in range(6)], axis=0)
        return W, R, B
    return weights


# --- both --------------------------------------------------------------------

def _index_nodes(body):
    return set(n for n in body.nodes if structural.kind(n) ==
               structural.INDEX)


def _scans_are(body, n_carried, h_out):
    """Is every scan output of ``body`` the step's ``h``?"""
    return all(v is h_out for v in body.outputs[n_carried:])


def _float32(*values):
    """All float32 (onnxruntime's LSTM and GRU take no other dtype); a
    ``None`` (no bias) counts as one."""
    return all(v is None or v.dtype == numpy.float32 for v in values)


def _counter_read(body, x_t, outer):
    """``(outer array, axis, start, step)`` where ``x_t`` is the step
    ``start + step * i`` of an outer array along ``axis`` (0 or 1), read
    by the body's counter ``i``, from the start forwards or from the end
    backwards, by the body's only index node; else ``None``."""
    indexes = _index_nodes(body)
    if len(indexes) != 1:
        return None
    index, = indexes
    if index.outputs != [x_t] or index.inputs[1:] != [body.inputs[0]] or \
            index.inputs[0] not in outer or index.index is None or \
            len(index.counters) != 1:
        return None
    slices, _ = index.index
    (axis, start, step), = index.counters
    if (step, start < 0) not in ((1, False), (-1, True)) or \
            axis not in (0, 1) or structural.counted_slice(slices[axis]) or \
            any(s != slice(None) for j, s in enumerate(slices) if j != axis):
        return None
    return outer[index.inputs[0]], axis, start, step


def _emit(b, node, names, layer):
    """The ``LSTM`` or ``GRU`` node, and the loop's outputs from its
    results."""
    body = node.region.body
    units = body.inputs[1].shape[-1]
    trip = names[node.inputs[0]]
    reverse = layer.step < 0
    W, R, B = layer.weights(b, names)
    first = b.int64s([0])
    initial = []  # the states the loop starts from; none: zeros
    if layer.peeled:  # the peeled step too, from zero states
        trip = b.single('Add', trip, b.int64s(1))
        layer = layer._replace(start=layer.start - layer.step)
    else:
        initial = [b.single('Unsqueeze', names[node.inputs[1 + at]], first)
                   for at in layer.carried]
    inputs = [_steps(b, names[layer.xs], layer, trip)] + [
        b.single('Unsqueeze', w, first) if w else ''
        for w in (W, R, B)] + [''] + initial

    def run():
        return b.op(layer.op, inputs, [b.fresh(layer.op.lower()) for _ in
                                       range(1 + len(layer.carried))],
                    hidden_size=units,
                    direction='reverse' if reverse else 'forward')
    if layer.peeled:  # at least one step
        ys, *lasts = run()
    else:
        ys, *lasts = _if(b, b.single('Greater', trip, b.int64s(0)), run,
                         lambda: [b.single('Slice', b.single(
                             'Unsqueeze', initial[0], first), first, first,
                             first)] + [b.single('Identity', state)
                                        for state in initial])
    outs = [names[v] for v in node.outputs]
    for at, last in zip(layer.carried, lasts):
        b.op('Squeeze', [last, first], [outs[at]])
    n_carried = len(layer.carried)
    if outs[n_carried:]:
        ys = _loop_steps(b, ys, reverse, layer.peeled)
    for out in outs[n_carried:]:  # every step's h, in the loop's order
        b.op('Squeeze', [ys, b.int64s([1])], [out])


def _loop_steps(b, ys, reverse, peeled):
    """The rows of ``ys`` (ONNX's every step's ``h``, in the steps' order)
    of the loop's steps, in the loop's order: without the peeled step,
    the first taken; reversed where the loop runs backwards."""
    if peeled:
        ys = b.single('Slice', ys, *[b.int64s([v]) for v in (
            (0, -1) if reverse else (1, 2 ** 63 - 1))] + [b.int64s([0])])
    if reverse:
        ys = b.single('Slice', ys, b.int64s([-1]), b.int64s([-2 ** 63]),
                      b.int64s([0]), b.int64s([-1]))
    return ys


def _if(b, condition, then, otherwise):
    """An ONNX ``If`` on ``condition`` whose branches are the nodes that
    ``then()`` and ``otherwise()`` add (each returns its outputs' names);
    returns the names of its outputs. onnxruntime's ``LSTM`` and ``GRU``
    take no sequence of no steps (its GRU aborts the process): a loop
    that takes none keeps its initial state by the other branch."""
    import onnx.helper

    branches = []
    for make in (then, otherwise):
        outer, b.nodes = b.nodes, []
        results = make()
        nodes, b.nodes = b.nodes, outer
        branches.append(onnx.helper.make_graph(
            nodes, b.fresh('branch'), [], [
                onnx.helper.make_tensor_value_info(
                    name, onnx.TensorProto.FLOAT, None)
                for name in results]))
    n = len(branches[0].output)
    return b.op('If', [condition], [b.fresh('if') for _ in range(n)],
                then_branch=branches[0], else_branch=branches[1])


def _steps(b, xs, layer, trip):
    """The loop's steps of ``xs`` as ONNX's ``(steps, batch, features)``
    input."""
    axis, start = layer.steps_axis, layer.start
    count = b.single('Unsqueeze', trip, b.int64s([0]))
    if layer.step > 0:
        first, end = b.int64s([start]), b.single('Add', count,
                                                 b.int64s([start]))
    else:  # steps start, start - 1, ... counted from the end
        first = b.single('Sub', b.int64s([start + 1]), count)
        end = b.int64s([start + 1 if start < -1 else 2 ** 63 - 1])
    x = b.single('Slice', xs, first, end, b.int64s([axis]))
    if axis == 1:
        x = b.single('Transpose', x, perm=[1, 0, 2])
    return x
