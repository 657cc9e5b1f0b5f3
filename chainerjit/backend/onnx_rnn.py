"""A loop that is one LSTM layer, converted to ONNX's ``LSTM`` operator.

An ``L.LSTM`` (or ``L.StatelessLSTM``, or ``F.lstm`` on a linear of
``h``) called once per step of a time-major or batch-first array records
as a Loop whose body takes one step: the step's input projection, hoisted
before the loop (``passes.hoist``) and read by the counter, plus the
lateral product of ``h``, into ``F.lstm``. As a generic ONNX ``Loop``
onnxruntime runs each step as some twenty nodes of a subgraph;
its ``LSTM`` operator runs the whole layer as one kernel, two to three
times faster. :func:`convert_lstm_loop` converts such a loop so, and
leaves any other to the generic conversion.

Chainer's gates are interleaved (unit ``j``'s gate ``k`` is column
``4 j + k``, ``k`` for the input ``a``, then ``i``, ``f``, ``o``); ONNX
wants blocks in the order ``i, o, f, c``: the weights are gathered in
that order (onnxruntime folds it where they are initializers).
"""

import collections

import numpy

from chainerjit.ops import structural

#: ONNX's gate blocks (i, o, f, c) as Chainer's gate indexes.
ONNX_GATE_ORDER = (1, 3, 2, 0)

#: What a matched loop is made of: the steps ``xs`` (on ``steps_axis``;
#: the loop reads step ``start + step * i``, ``step`` 1 or -1, a reversed
#: loop from the end), the input weight, bias (or ``None``) and lateral
#: weight, as outer values; and the positions of ``h`` and ``c`` among
#: the carried values. The scan outputs all are ``h``.
Layer = collections.namedtuple(
    'Layer', 'xs steps_axis start step W b U h_at c_at')


def convert_lstm_loop(builder, node, names):
    """Converts the Loop ``node`` as one ONNX ``LSTM`` where its body is one
    step of an LSTM layer (see the module); returns whether it did."""
    layer = match_lstm_loop(node, builder.producers)
    if layer is None:
        return False
    _emit(builder, node, names, layer)
    return True


def match_lstm_loop(node, producers):
    """The :class:`Layer` the Loop ``node`` runs, or ``None`` where its
    body is not one LSTM step on a hoisted input projection.
    ``producers``: the node that gives each outer value."""
    region = node.region
    body = region.body
    if region.counts or region.n_carried != 2 or \
            not all(region.carried_read):
        return None
    step = _lstm_step(body)
    if step is None:
        return None
    x_t, c_in, h_in, U, c_out, h_out = step
    carried = body.inputs[1:3]
    if set(carried) != {c_in, h_in} or \
            [body.outputs[carried.index(v)] for v in (c_in, h_in)] != \
            [c_out, h_out] or \
            any(v is not h_out for v in body.outputs[2:]):
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
    if len(xs.shape) != 3:
        return None
    if not _alike(node, xs, W, b, outer[U], c_in, h_in):
        return None
    return Layer(xs, steps_axis, start, step, W, b, outer[U],
                 carried.index(h_in), carried.index(c_in))


def _lstm_step(body):
    """``(x_t, c_in, h_in, U, c_out, h_out)`` where ``body``'s nodes are
    one step ``lstm(c_in, x_t + h_in U^T)`` and a read of ``x_t``: fused
    (``passes.fuse``) or as the linear, the sum and the step."""
    nodes = [n for n in body.nodes if structural.kind(n) !=
             structural.INDEX]
    if len(body.nodes) - len(nodes) != 1:
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


def _counter_read(body, x_t, outer):
    """``(outer array, axis, start, step)`` where ``x_t`` is the step
    ``start + step * i`` of an outer array along ``axis`` (0 or 1), read
    by the body's counter ``i``, from the start forwards or from the end
    backwards; else ``None``."""
    index = [n for n in body.nodes if structural.kind(n) ==
             structural.INDEX][0]
    if index.outputs != [x_t] or index.inputs[1:] != [body.inputs[0]] or \
            index.inputs[0] not in outer or index.index is None:
        return None
    slices, _ = index.index
    (axis, start, step), = index.counters
    if (step, start < 0) not in ((1, False), (-1, True)) or \
            axis not in (0, 1) or any(
            s != slice(None) for j, s in enumerate(slices) if j != axis):
        return None
    return outer[index.inputs[0]], axis, start, step


def _alike(node, xs, W, b, U, c, h):
    """All float32 (onnxruntime's ``LSTM`` takes no other dtype), 2-D
    states of ``H`` units, and weights of ``4 H`` rows."""
    units = c.shape[-1]
    dtypes = set(v.dtype for v in (xs, W, U, c, h) + ((b,) if b else ()))
    return dtypes == {numpy.dtype(numpy.float32)} and len(c.shape) == 2 and \
        h.shape == c.shape and W.shape == (4 * units, xs.shape[2]) and \
        U.shape == (4 * units, units) and \
        (b is None or b.shape == (4 * units,))


def _emit(b, node, names, layer):
    """The ``LSTM`` node, and the loop's outputs from its results."""
    region = node.region
    body = region.body
    units = body.inputs[1 + layer.h_at].shape[-1]
    trip = names[node.inputs[0]]
    h0 = names[node.inputs[1 + layer.h_at]]
    c0 = names[node.inputs[1 + layer.c_at]]
    x = _steps(b, names[layer.xs], layer, trip)
    reverse = layer.step < 0
    order = b.int64s([4 * j + k for k in ONNX_GATE_ORDER
                      for j in range(units)])

    def gathered(name):
        rows = b.single('Gather', name, order, axis=0)
        return b.single('Unsqueeze', rows, b.int64s([0]))
    bias = ''
    if layer.b is not None:
        bias = b.single('Unsqueeze', b.single('Concat', b.single(
            'Gather', names[layer.b], order, axis=0), b.constant(
                numpy.zeros(4 * units, layer.b.dtype)), axis=0),
            b.int64s([0]))
    first = b.int64s([0])
    ys, last_h, last_c = b.op('LSTM', [
        x, gathered(names[layer.W]), gathered(names[layer.U]), bias, '',
        b.single('Unsqueeze', h0, first), b.single('Unsqueeze', c0, first)],
        [b.fresh('lstm_y'), b.fresh('lstm_h'), b.fresh('lstm_c')],
        hidden_size=units, direction='reverse' if reverse else 'forward')
    # With no step to take, ONNX's LSTM gives zeros: the loop keeps its
    # initial state.
    ran = b.single('Greater', trip, b.int64s(0))
    outs = [names[v] for v in node.outputs]
    for at, last, initial in ((layer.h_at, last_h, h0),
                              (layer.c_at, last_c, c0)):
        b.op('Where', [ran, b.single('Squeeze', last, first), initial],
             [outs[at]])
    if outs[2:] and reverse:  # ONNX gives them in the order of the steps
        ys = b.single('Slice', ys, b.int64s([-1]), b.int64s([-2 ** 63]),
                      b.int64s([0]), b.int64s([-1]))
    for out in outs[2:]:  # every step's h, in the loop's order
        b.op('Squeeze', [ys, b.int64s([1])], [out])


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
