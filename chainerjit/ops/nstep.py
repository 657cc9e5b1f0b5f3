"""A whole ``L.NStepLSTM`` (or GRU, or plain RNN) call as one op.

Chainer's CPU path for these links records about ten nodes per time step
and layer, and their structure depends on every sequence's length. The
recording patches (``frontend/recording_patches.py``) apply
:class:`NStepRNN` instead: one node whose forward and backward read the
lengths from the arrays they receive, and compute with NumPy what
Chainer's nodes compute, in the same products of the same shapes (the
batch shrinking over the sorted sequences) and the same formulas.

Inputs, in order: ``hx``, ``cx`` (LSTM only), the ``n_items`` sequences
``xs`` (each ``(length, in_size)``), then for each layer and direction
``l * directions + d`` its weights ``ws[l * directions + d][k]`` and then
its biases ``bs[...][k]`` (Chainer's ``_combine_inputs`` order).
Outputs: ``hy``, ``cy`` (LSTM only), then the ``n_items`` outputs ``ys``.
"""

import collections
import functools
import weakref

import chainer
from chainer.links.rnn import n_step_rnn as n_step_rnn_link
import numpy

from chainerjit.ops import Follow
from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import lowering
from chainerjit.ops import takes_axes
from chainerjit.ops import rnn
from chainerjit.ops import segments as segments_ops
from chainerjit.ops.array import onnx_items_padded
from chainerjit.ops.linear import grad_linear


#: The number of weights (and of biases) per layer and direction.
N_WEIGHTS = {'lstm': 8, 'gru': 6, 'tanh': 2, 'relu': 2}


class Spec(collections.namedtuple(
        'Spec', 'n_layers bidirectional cell n_items permute dropout',
        defaults=(None,))):
    """What an :class:`NStepRNN` node is, besides its arrays (``dropout``:
    the ratio its layers after the first drop out of their inputs while
    training, 0 included; ``None`` when not training, which draws
    nothing)."""

    @property
    def directions(self):
        return 2 if self.bidirectional else 1

    @property
    def n_states(self):
        """1 (``hx``), or 2 for an LSTM (``hx`` and ``cx``)."""
        return 2 if self.cell == 'lstm' else 1

    @property
    def n_inputs(self):
        return self.n_states + self.n_items + \
            2 * N_WEIGHTS[self.cell] * self.n_layers * self.directions


class NStepRNN(chainer.FunctionNode):
    """A stacked (bi)LSTM, GRU or RNN over ``n_items`` sequences, as the
    link computes it on CPU (see the module's docstring for the inputs
    and outputs). ``permute``: sort the items by decreasing length as the
    link does, and give the results back in the caller's order; false
    for items already sorted."""

    def __init__(self, n_layers, bidirectional, cell, n_items, permute):
        if cell not in N_WEIGHTS:
            raise ValueError('unknown cell: %r' % (cell,))
        self.n_layers = n_layers
        self.bidirectional = bool(bidirectional)
        self.cell = cell
        self.n_items = n_items
        self.permute = bool(permute)

    dropout = None  # no draws (not training)

    @property
    def spec(self):
        return Spec(self.n_layers, self.bidirectional, self.cell,
                    self.n_items, self.permute, self.dropout)

    def forward(self, inputs):
        outputs, self._record = run_forward(self.spec, inputs)
        return outputs

    def backward(self, indexes, grad_outputs):
        spec = self._record.spec
        return _grads_of(functools.partial(run_backward, self._record),
                         spec.n_states + spec.n_items, spec.n_inputs,
                         indexes, grad_outputs)


class NStepRNNDropout(NStepRNN):
    """An :class:`NStepRNN` that drops out the inputs of its layers after
    the first, as the links do while training: each direction draws its
    mask from NumPy's generator as ``F.dropout`` of each time step does,
    in the same order (a random op: ``ops.draws_only``)."""

    def __init__(self, n_layers, bidirectional, cell, n_items, permute,
                 dropout):
        super().__init__(n_layers, bidirectional, cell, n_items, permute)
        self.dropout = dropout


def _grads_of(backward, n_outputs, n_inputs, indexes, grad_outputs):
    """A link op's ``backward``: its inputs' gradients by an
    :class:`NStepRNNGrad` node running ``backward``."""
    present = tuple(i for i, g in enumerate(grad_outputs) if g is not None)
    return NStepRNNGrad(backward, n_outputs, n_inputs, present,
                        indexes).apply([grad_outputs[i] for i in present])


def _plain(array):
    """``array`` as a NumPy array itself where it is a view of a subclass
    (the recording call's record holds the traced views it ran on, which
    the gradients it computes would otherwise be)."""
    if isinstance(array, numpy.ndarray) and type(array) is not numpy.ndarray:
        return array.view(numpy.ndarray)
    return array


class NStepRNNGrad(chainer.FunctionNode):
    """The gradients of an :class:`NStepRNN` or :class:`PackedNStepRNN`
    (of its ``n_inputs`` inputs, those listed in ``indexes``) from the
    gradients of its ``n_outputs`` outputs listed in ``present``, by
    ``backward(gys, wanted)`` on the record its forward kept
    (:func:`run_backward`, :func:`packed_backward`). Not differentiable
    itself."""

    def __init__(self, backward, n_outputs, n_inputs, present, indexes):
        self._backward = backward
        self.n_outputs = n_outputs
        self.n_inputs = n_inputs
        self.present = present
        self.indexes = tuple(indexes)

    def forward(self, inputs):
        gys = [None] * self.n_outputs
        for i, g in zip(self.present, inputs):
            gys[i] = g
        wanted = [i in self.indexes for i in range(self.n_inputs)]
        grads = self._backward(gys, wanted)
        return tuple(_plain(grads[i]) for i in self.indexes)

    def backward(self, indexes, grad_outputs):
        raise NotImplementedError(
            'double backpropagation through an NStepRNN op (a whole '
            'NStepLSTM, NStepGRU or NStepRNN link call) is not supported')


class PackedNStepRNN(chainer.FunctionNode):
    """:class:`NStepRNN` over sequences given packed: their rows joined in
    order (``packed``, as ``F.concat(xs, axis=0)`` joins them) and an
    array of their lengths (``lengths``), so that one node takes any
    number of sequences. Inputs: ``hx``, ``cx`` (LSTM only; neither for
    ``zero_states``, the zeros of ``hx=None``, or those ``zero_states``
    flags, one for each, as zeros), ``packed``, ``lengths``,
    then the weights and biases as :class:`NStepRNN` takes them. Outputs:
    ``hy``, ``cy`` (LSTM only), and the output sequences packed the same
    way. Its forward and backward are :class:`NStepRNN`'s on the
    sequences cut from ``packed``; ``permute`` as :class:`NStepRNN`'s
    (false where the sequences must come sorted, as ``F.n_step_lstm``
    takes them)."""

    dropout = None  # no draws (not training)

    def __init__(self, n_layers, bidirectional, cell, zero_states,
                 permute=True):
        if cell not in N_WEIGHTS:
            raise ValueError('unknown cell: %r' % (cell,))
        self.n_layers = n_layers
        self.bidirectional = bool(bidirectional)
        self.cell = cell
        self.zero_states = tuple(bool(z) for z in zero_states) \
            if type(zero_states) is tuple else bool(zero_states)
        self.permute = bool(permute)

    @property
    def spec(self):
        """The :class:`Spec` of the sequences (``n_items`` 0: by call)."""
        return Spec(self.n_layers, self.bidirectional, self.cell, 0,
                    self.permute, self.dropout)

    def forward(self, inputs):
        outputs, self._record = packed_forward(self.spec, self.zero_states,
                                               inputs)
        return outputs

    def backward(self, indexes, grad_outputs):
        spec = self._record.spec
        return _grads_of(functools.partial(packed_backward,
                                           self.zero_states, self._record),
                         spec.n_states + 1,
                         _packed_n_inputs(spec, self.zero_states), indexes,
                         grad_outputs)


class PackedNStepRNNDropout(PackedNStepRNN):
    """A :class:`PackedNStepRNN` that drops out the inputs of its layers
    after the first, as :class:`NStepRNNDropout` does."""

    def __init__(self, n_layers, bidirectional, cell, zero_states, dropout,
                 permute=True):
        super().__init__(n_layers, bidirectional, cell, zero_states, permute)
        self.dropout = dropout


def _given(spec, zero_states):
    """The indexes of the states a :class:`PackedNStepRNN` takes as inputs
    (``zero_states``: true for none, false for all, or a flag for each,
    true where the op makes it zeros)."""
    flags = zero_states if type(zero_states) is tuple else \
        (zero_states,) * spec.n_states
    return tuple(i for i, zero in enumerate(flags) if not zero)


def _packed_n_inputs(spec, zero_states):
    """The number of inputs of a :class:`PackedNStepRNN` of ``spec``."""
    return len(_given(spec, zero_states)) + 2 + \
        2 * N_WEIGHTS[spec.cell] * spec.n_layers * spec.directions


def given_states(node):
    """The values a node of a :class:`PackedNStepRNN` takes as its states
    (``hx``, and ``cx`` of an LSTM, where given), whose second axis is the
    number of sequences."""
    attrs = dict(node.attrs)
    flags = attrs['zero_states']
    if type(flags) is not tuple:
        flags = (flags,) * (2 if attrs['cell'] == 'lstm' else 1)
    return node.inputs[:sum(not zero for zero in flags)]


def packed_forward(spec, zero_states, arrays, masks=None):
    """``(outputs, record)`` of a :class:`PackedNStepRNN`: ``run_forward``
    over the sequences cut from the packed rows at their lengths, its
    output sequences packed again (``masks`` as ``run_forward`` takes
    them)."""
    given = _given(spec, zero_states)
    n_given = len(given)
    (packed, lengths), params = arrays[n_given:n_given + 2], \
        list(arrays[n_given + 2:])
    if lengths.ndim != 1 or len(lengths) == 0 or \
            int(lengths.min()) < 1 or int(lengths.sum()) != len(packed):
        raise ValueError('packed sequences of lengths %s do not make the '
                         '%d rows given' % (lengths.tolist(), len(packed)))
    spec = spec._replace(n_items=len(lengths))
    xs = segments_ops.items_of(packed, lengths)
    states = [None] * spec.n_states
    if n_given < spec.n_states:
        units = params[0].shape[0]
        shape = (spec.n_layers * spec.directions, len(lengths), units)
        states = [numpy.zeros(shape, packed.dtype)] * spec.n_states
    for i, state in zip(given, arrays[:n_given]):
        states[i] = state
    outputs, record = run_forward(spec, states + xs + params, masks)
    ys = numpy.concatenate(outputs[spec.n_states:])
    return tuple(outputs[:spec.n_states]) + (ys,), record


def packed_backward(zero_states, record, gys, wanted):
    """The gradients of a :class:`PackedNStepRNN`'s inputs (None where not
    ``wanted``) from those of its outputs (``gys``, None for zeros)."""
    spec = record.spec
    given = _given(spec, zero_states)
    n_given = len(given)
    g_packed = gys[spec.n_states]
    lengths = [len(rows) for rows in record.rows]
    if record.order is not None:
        lengths = [lengths[i] for i in record.inverse]
    g_items = [None] * spec.n_items if g_packed is None else \
        segments_ops.items_of(g_packed, lengths)
    want_xs = wanted[n_given]
    item_wanted = [i in given and wanted[given.index(i)]
                   for i in range(spec.n_states)] + \
        [want_xs] * spec.n_items + list(wanted[n_given + 2:])
    grads = run_backward(record, list(gys[:spec.n_states]) + g_items,
                         item_wanted)
    g_xs = grads[spec.n_states:spec.n_states + spec.n_items]
    return tuple(grads[i] for i in given) + (
        numpy.concatenate(g_xs) if want_xs else None, None) + \
        tuple(grads[spec.n_states + spec.n_items:])


# The record of a forward, for its backward: ``order`` and ``inverse``
# (the sorting permutation, or None), ``bounds`` (the rows of each time
# step in the packed arrays), ``rows`` (each sorted item's rows), and
# per layer its ``_Direction`` records; the states' size and dtype.
Record = collections.namedtuple(
    'Record', 'spec order inverse bounds rows layers n_units dtype')

# One direction of a layer: its stacked weights, its time steps in
# processing order, what each step kept, and its packed input and dropout
# mask (the layer's input and None where it drops nothing out).
_Direction = collections.namedtuple('_Direction',
                                    'weights steps kept inputs mask')


def _split_inputs(spec, arrays):
    """``(hx, cx, xs, ws, bs)`` of an op's input arrays (``cx`` None but
    for an LSTM; ``ws[i]`` and ``bs[i]`` lists per layer and
    direction)."""
    hx = arrays[0]
    cx = arrays[1] if spec.n_states == 2 else None
    start = spec.n_states
    xs = arrays[start:start + spec.n_items]
    n = N_WEIGHTS[spec.cell]
    ws, bs = [], []
    position = start + spec.n_items
    for _ in range(spec.n_layers * spec.directions):
        ws.append(list(arrays[position:position + n]))
        bs.append(list(arrays[position + n:position + 2 * n]))
        position += 2 * n
    return hx, cx, list(xs), ws, bs


def _sorting(spec, xs):
    """``(order, inverse)``: Chainer's permutation of the items by
    decreasing length and its inverse, or ``(None, None)``."""
    if not spec.permute:
        lengths = [len(x) for x in xs]
        if any(a < b for a, b in zip(lengths, lengths[1:])):
            raise ValueError('the sequences of F.n_step_lstm (and its kin) '
                             'must come sorted by decreasing length, as '
                             'F.transpose_sequence takes them: %r'
                             % lengths)
        return None, None
    order = n_step_rnn_link.argsort_list_descent(xs)
    inverse = numpy.empty_like(order)
    inverse[order] = numpy.arange(len(order), dtype=order.dtype)
    return order, inverse


def _time_layout(lengths):
    """``(bounds, rows)`` of sequences sorted by decreasing length, packed
    time-major as ``transpose_sequence`` does: ``bounds[t]`` is the
    ``(start, stop)`` of time step t's rows, ``rows[j]`` item j's rows."""
    n_steps = lengths[0] if lengths else 0
    counts = numpy.zeros(n_steps + 1, numpy.intp)
    for n in lengths:
        counts[n] += 1
    batches = len(lengths) - numpy.cumsum(counts)[:n_steps]
    starts = numpy.concatenate([[0], numpy.cumsum(batches)])
    bounds = [(int(starts[t]), int(starts[t + 1])) for t in range(n_steps)]
    rows = [starts[:n] + j for j, n in enumerate(lengths)]
    return bounds, rows


def _pack(xs, rows, n_rows):
    """The sequences ``xs`` as one time-major array."""
    packed = numpy.empty((n_rows,) + xs[0].shape[1:], xs[0].dtype)
    for x, r in zip(xs, rows):
        packed[r] = x
    return packed


def _join(new, old, batch):
    """``concat([new, old[batch:]])`` as Chainer's loop rejoins a state
    whose first ``batch`` rows went through a step."""
    if batch == len(old):
        return new
    return numpy.concatenate([new, old[batch:]])


def _sum_in_order(first, parts):
    """``((first + parts[0]) + parts[1]) ...``, the order in which Chainer
    accumulates the gradients of a variable with several consumers."""
    total = first
    for part in parts:
        total = part if total is None else total + part
    return total


def _accumulate(total, grad):
    return grad if total is None else total + grad


def _linear(x, W, b):
    """``LinearFunction.forward``: ``x W^T`` then ``+= b``."""
    y = numpy.dot(x, W.T)
    y += b
    return y


def _linear_grads(x, W, gy, want_x):
    """``(gx, gW, gb)`` as ``LinearFunction.backward`` (``grad_linear``)."""
    return grad_linear((x, W, None), (None,), (gy,), (want_x, True, True))


# The cells: each has ``stack(w, b)`` -> the stacked weights ``(Wx, Wh,
# bx, bh)`` its Chainer function builds, ``step(x, h, c, weights)`` ->
# ``(h, c, kept)``, ``grad(x, h, c, c_new, kept, gh, gc, weights)`` ->
# ``(gx_in, gh_in, h_parts, gc)`` (the gradients of the two linear
# layers' outputs, those of ``h`` in Chainer's order of accumulation and
# that of ``c``), and ``unstack(gWx, gWh, gbx, gbh)`` -> ``(gws, gbs)``.

def _stack_lstm_weight(ws):
    """``n_step_lstm._stack_weight``: the gates interleaved row by row."""
    w = numpy.stack(ws, axis=1)
    return w.reshape((w.shape[0] * w.shape[1],) + w.shape[2:])


_LSTM_ORDER = (2, 0, 1, 3)  # a, i, f, o of Chainer's LSTM from w[0:4]


def _lstm_stack(w, b):
    return (_stack_lstm_weight([w[k] for k in _LSTM_ORDER]),
            _stack_lstm_weight([w[4 + k] for k in _LSTM_ORDER]),
            _stack_lstm_weight([b[k] for k in _LSTM_ORDER]),
            _stack_lstm_weight([b[4 + k] for k in _LSTM_ORDER]))


def _lstm_step(x, h, c, weights):
    Wx, Wh, bx, bh = weights
    lstm_in = _linear(x, Wx, bx) + _linear(h, Wh, bh)
    c_new, h_new, gates = rnn._step(c, lstm_in)
    return h_new, c_new, gates


def _lstm_grad(x, h, c, c_new, gates, gh, gc, weights):
    gc_prev, g_in = rnn._lstm_grad_from_gates(gates, c, c_new, gc, gh)
    return g_in, g_in, None, gc_prev


def _unstack_lstm(g, first):
    """The gradients of the four weights stacked by ``_stack_lstm_weight``
    (``w[first:first + 4]``), in their own order."""
    g = g.reshape((len(g) // 4, 4) + g.shape[1:])
    grads = [None] * 4
    for position, k in enumerate(_LSTM_ORDER):
        grads[k] = numpy.ascontiguousarray(g[:, position])
    return grads


def _lstm_unstack(gWx, gWh, gbx, gbh):
    return (_unstack_lstm(gWx, 0) + _unstack_lstm(gWh, 4),
            _unstack_lstm(gbx, 0) + _unstack_lstm(gbh, 4))


def _gru_stack(w, b):
    """``n_step_gru._gru``'s concatenated weights (r, z, candidate)."""
    return (numpy.concatenate(w[0:3]), numpy.concatenate(w[3:6]),
            numpy.concatenate(b[0:3]), numpy.concatenate(b[3:6]))


def _sigmoid(x):
    """Chainer's CPU ``Sigmoid.forward``."""
    half = x.dtype.type(0.5)
    return numpy.tanh(x * half) * half + half


def _gru_step(x, h, c, weights):
    Wx, Wh, bx, bh = weights
    w_r, w_z, w_x = numpy.split(_linear(x, Wx, bx), 3, axis=1)
    u_r, u_z, u_x = numpy.split(_linear(h, Wh, bh), 3, axis=1)
    r = _sigmoid(w_r + u_r)
    z = _sigmoid(w_z + u_z)
    h_bar = numpy.tanh(w_x + r * u_x)
    one = z.dtype.type(1)
    h_new = (one - z) * h_bar + z * h
    return h_new, None, (r, z, h_bar, u_x)


def _gru_grad(x, h, c, c_new, kept, gh, gc, weights):
    """The gradients of ``_gru_step`` as Chainer's nodes compute them, one
    node's backward after the other."""
    r, z, h_bar, u_x = kept
    one = z.dtype.type(1)
    g_hbar = gh * (one - z)
    gz = -(gh * h_bar) + gh * h  # 1 - z, then z * h
    g_h_mul = gh * z
    g_cand = g_hbar * (one - h_bar * h_bar)
    g_r = g_cand * u_x
    g_ux = g_cand * r
    g_zin = gz * z * (one - z)
    g_rin = g_r * r * (one - r)
    gx_in = numpy.concatenate([g_rin, g_zin, g_cand], axis=1)
    gh_in = numpy.concatenate([g_rin, g_zin, g_ux], axis=1)
    return gx_in, gh_in, [g_h_mul], None


def _gru_unstack(gWx, gWh, gbx, gbh):
    return (numpy.split(gWx, 3) + numpy.split(gWh, 3),
            numpy.split(gbx, 3) + numpy.split(gbh, 3))


def _plain_stack(w, b):
    return w[0], w[1], b[0], b[1]


def _plain_step(activation):
    def step(x, h, c, weights):
        Wx, Wh, bx, bh = weights
        rnn_in = _linear(x, Wx, bx) + _linear(h, Wh, bh)
        if activation == 'tanh':
            return numpy.tanh(rnn_in), None, None
        return numpy.maximum(rnn_in, 0, dtype=rnn_in.dtype), None, None
    return step


def _plain_grad(activation):
    def grad(x, h, c, h_new, kept, gh, gc, weights):
        if activation == 'tanh':
            g_in = gh * (h_new.dtype.type(1) - h_new * h_new)
        else:
            g_in = (gh * (h_new > 0)).astype(gh.dtype, copy=False)
        return g_in, g_in, None, None
    return grad


def _plain_unstack(gWx, gWh, gbx, gbh):
    return [gWx, gWh], [gbx, gbh]


_Cell = collections.namedtuple('_Cell', 'stack step grad unstack')

_CELLS = {
    'lstm': _Cell(_lstm_stack, _lstm_step, _lstm_grad, _lstm_unstack),
    'gru': _Cell(_gru_stack, _gru_step, _gru_grad, _gru_unstack),
    'tanh': _Cell(_plain_stack, _plain_step('tanh'), _plain_grad('tanh'),
                  _plain_unstack),
    'relu': _Cell(_plain_stack, _plain_step('relu'), _plain_grad('relu'),
                  _plain_unstack),
}


def run_forward(spec, arrays, masks=None):
    """``(outputs, record)``: the op's outputs (new arrays, sharing no
    memory with the record) and what its backward reads. ``masks``: the
    dropout masks of an earlier run of these arrays (``masks_of``), to
    compute it again; else drawn."""
    masks = None if masks is None else iter(masks)
    cell = _CELLS[spec.cell]
    hx, cx, xs, ws, bs = _split_inputs(spec, arrays)
    order, inverse = _sorting(spec, xs)
    if order is not None:
        xs = [xs[i] for i in order]  # permutate_list(xs, order, False)
        hx = hx.take(order, axis=1)
        cx = None if cx is None else cx.take(order, axis=1)
    bounds, rows = _time_layout([len(x) for x in xs])
    n_rows = bounds[-1][1] if bounds else 0
    inputs = _pack(xs, rows, n_rows)
    n_units = hx.shape[2]
    hy, cy, layers = [], [], []
    for layer in range(spec.n_layers):
        outputs = numpy.empty((n_rows, n_units * spec.directions), hx.dtype)
        directions = []
        for d in range(spec.directions):
            index = layer * spec.directions + d
            steps = range(len(bounds))
            if d == 1:
                steps = steps[::-1]
            weights = cell.stack(ws[index], bs[index])
            mask = None if not layer or spec.dropout is None else \
                _dropout_mask(inputs, spec.dropout) if masks is None \
                else next(masks)
            dropped = inputs if mask is None else inputs * mask
            h, c, kept = _run_direction(
                cell, dropped, bounds, steps, weights, hx[index],
                None if cx is None else cx[index],
                outputs[:, d * n_units:(d + 1) * n_units])
            hy.append(h)
            cy.append(c)
            directions.append(_Direction(weights, steps, kept, dropped,
                                         mask))
        layers.append(directions)
        inputs = outputs
    results = [_unsorted(numpy.stack(hy), inverse)]
    if cx is not None:
        results.append(_unsorted(numpy.stack(cy), inverse))
    ys = [inputs[r] for r in rows]
    if order is not None:
        ys = [ys[i] for i in inverse]
    record = Record(spec, order, inverse, bounds, rows, layers, n_units,
                    hx.dtype)
    return tuple(results + ys), record


def masks_of(record):
    """The dropout masks a forward drew, in the order it drew them."""
    return [d.mask for layer in record.layers[1:] for d in layer]


def _dropout_mask(inputs, ratio):
    """``F.dropout``'s mask of each time step of a packed input, drawn as
    ``Dropout.forward_cpu`` draws it, step after step (one draw of all
    the rows gives the same numbers in the same order), even at a ratio of
    0 (which draws and keeps every row)."""
    scale = inputs.dtype.type(1. / (1 - ratio))
    return scale * (numpy.random.rand(*inputs.shape) >= ratio)


def _unsorted(stacked, inverse):
    """``permutate(stacked, order, axis=1, inv=True)``."""
    if inverse is None:
        return stacked
    return stacked.take(inverse, axis=1)


def _run_direction(cell, inputs, bounds, steps, weights, h, c, outputs):
    """One direction of a layer, as ``_one_directional_loop``: writes
    each step's ``h`` into its rows of ``outputs``; returns the final
    ``(h, c)`` and, per step, ``(h, c, c_new, kept)`` for the backward
    (``c_new`` is the new ``h`` for the cells without ``c``)."""
    kept = []
    for t in steps:
        start, stop = bounds[t]
        batch = stop - start
        h_in = h[:batch]
        c_in = None if c is None else c[:batch]
        h_new, c_new, extra = cell.step(inputs[start:stop], h_in, c_in,
                                        weights)
        outputs[start:stop] = h_new
        kept.append((h_in, c_in, h_new if c_new is None else c_new, extra))
        h = _join(h_new, h, batch)
        if c is not None:
            c = _join(c_new, c, batch)
    return h, c, kept


def run_backward(record, gys, wanted):
    """The gradients of all the op's inputs (None where not ``wanted``)
    from those of its outputs (``gys``, None for zeros)."""
    spec = record.spec
    cell = _CELLS[spec.cell]
    n_units = record.n_units
    ghy, gcy, gys_items = _output_grads(record, gys)
    n_rows = record.bounds[-1][1] if record.bounds else 0
    g_outputs = _pack(gys_items, record.rows, n_rows)
    x_start = spec.n_states
    want_xs = any(wanted[x_start:x_start + spec.n_items])
    gws, gbs = {}, {}
    ghx = [None] * (spec.n_layers * spec.directions)
    gcx = list(ghx)
    for layer in reversed(range(spec.n_layers)):
        want_inputs = layer > 0 or want_xs
        g_inputs = None
        for d, direction in enumerate(record.layers[layer]):
            index = layer * spec.directions + d
            g_dir = g_outputs[:, d * n_units:(d + 1) * n_units]
            gx, ghx[index], gcx[index], gW = _grad_direction(
                cell, direction.inputs, record.bounds, direction, g_dir,
                ghy[index], None if gcy is None else gcy[index],
                want_inputs)
            gws[index], gbs[index] = cell.unstack(*gW)
            if want_inputs and direction.mask is not None:
                gx = gx * direction.mask  # DropoutGrad
            if want_inputs:
                g_inputs = _accumulate(g_inputs, gx)
        g_outputs = g_inputs
    return _input_grads(record, ghx, gcx, g_outputs, gws, gbs, wanted)


def _output_grads(record, gys):
    """``(ghy, gcy, gys)`` sorted as the forward's items, zeros for
    missing gradients (Chainer's nodes take them as zeros)."""
    spec = record.spec
    n_units = record.n_units
    state_shape = (spec.n_layers * spec.directions, spec.n_items, n_units)

    def state(g):
        if g is None:
            return numpy.zeros(state_shape, record.dtype)
        return g if record.order is None else g.take(record.order, axis=1)
    ghy = state(gys[0])
    gcy = state(gys[1]) if spec.n_states == 2 else None
    items = list(gys[spec.n_states:])
    if record.order is not None:
        items = [items[i] for i in record.order]
    width = n_units * spec.directions
    items = [numpy.zeros((len(r), width), record.dtype) if g is None else g
             for g, r in zip(items, record.rows)]
    return ghy, gcy, items


def _grad_direction(cell, inputs, bounds, direction, g_outputs, gh, gc,
                    want_inputs):
    """The backward of ``_run_direction``: ``(g_inputs, gh0, gc0, (gWx,
    gWh, gbx, gbh))``, the weights' gradients summed over the steps in
    the order Chainer's backward adds them (the last step's first)."""
    weights = direction.weights
    Wx, Wh = weights[0], weights[1]
    g_inputs = numpy.zeros_like(inputs) if want_inputs else None
    n_items = len(gh)
    h_parts = [gh]  # the gradients of the h leaving the current step
    sums = [None] * 4
    for t, kept in zip(reversed(direction.steps), reversed(direction.kept)):
        start, stop = bounds[t]
        batch = stop - start
        h_in, c_in, c_new, extra = kept
        if batch < n_items:  # the step's h went through a split
            g_state = _sum_in_order(None, h_parts)
            g_h_new = g_outputs[start:stop] + g_state[:batch]
        else:
            g_h_new = _sum_in_order(g_outputs[start:stop], h_parts)
        g_c_new = None if gc is None else gc[:batch]
        gx_in, gh_in, parts, gc_in = cell.grad(
            inputs[start:stop], h_in, c_in, c_new, extra, g_h_new, g_c_new,
            weights)
        gx, gWx, gbx = _linear_grads(inputs[start:stop], Wx, gx_in,
                                     want_inputs)
        gh_lin, gWh, gbh = _linear_grads(h_in, Wh, gh_in, True)
        for k, g in enumerate((gWx, gWh, gbx, gbh)):
            sums[k] = _accumulate(sums[k], g)
        if want_inputs:
            g_inputs[start:stop] = gx
        # Chainer adds a step's h's gradients from the output first, then
        # from the cell's product (GRU), then from the linear layer.
        h_parts = (parts or []) + [gh_lin]
        if batch < n_items:
            h_parts = [_join(_sum_in_order(None, h_parts), g_state, batch)]
            if gc is not None:
                gc = _join(gc_in, gc, batch)
        elif gc is not None:
            gc = gc_in
    sums = [numpy.zeros_like(w) if g is None else g  # no step at all
            for g, w in zip(sums, weights)]
    return g_inputs, _sum_in_order(None, h_parts), gc, tuple(sums)


def _input_grads(record, ghx, gcx, g_inputs, gws, gbs, wanted):
    """The gradients in the op's input order, back in the caller's item
    order, None where not wanted."""
    spec = record.spec
    grads = [_unsorted(numpy.stack(ghx), record.inverse)]
    if spec.n_states == 2:
        grads.append(_unsorted(numpy.stack(gcx), record.inverse))
    if any(wanted[spec.n_states:spec.n_states + spec.n_items]):
        gxs = [g_inputs[r] for r in record.rows]
        if record.order is not None:
            gxs = [gxs[i] for i in record.inverse]
    else:
        gxs = [None] * spec.n_items
    grads.extend(gxs)
    for index in range(spec.n_layers * spec.directions):
        grads.extend(gws[index])
        grads.extend(gbs[index])
    return tuple(g if w else None for g, w in zip(grads, wanted))


@lowering(NStepRNN, NStepRNNDropout)
def lower_nstep_rnn(node, ctx):
    """The whole link call: ``run_forward`` and ``run_backward``, which
    read every length from the arrays of each call."""
    if ctx.xp is not numpy:
        return None
    spec = node.spec
    return _link_kernel(
        spec, lambda arrays, masks: run_forward(spec, arrays, masks),
        run_backward, spec.n_inputs,
        {'items': spec.n_items, 'permute': spec.permute},
        _items_lengths(spec), functools.partial(_to_onnx, spec))


@lowering(PackedNStepRNN, PackedNStepRNNDropout)
def lower_packed_nstep_rnn(node, ctx):
    """The whole link call over packed sequences: ``packed_forward`` and
    ``packed_backward``, which read the number of sequences and their
    lengths from the arrays of each call."""
    if ctx.xp is not numpy:
        return None
    spec, zero_states = node.spec, node.zero_states
    return _link_kernel(
        spec, lambda arrays, masks: packed_forward(spec, zero_states, arrays,
                                                   masks),
        functools.partial(packed_backward, zero_states),
        _packed_n_inputs(spec, zero_states),
        {'zero_states': zero_states, 'permute': spec.permute},
        _packed_rows(spec, zero_states),
        functools.partial(_packed_to_onnx, spec, zero_states))


def _link_kernel(spec, run, backward, n_inputs, attrs, rule, onnx):
    """The kernel of a link op of ``spec`` whose forward is ``run(arrays,
    masks)`` (``(outputs, record)``; the dropout masks of an earlier run,
    or ``None`` to draw them) and whose gradients are ``backward(record,
    gys, wanted)``; ``attrs`` besides the cell's, its ``Kernel.lengths``
    ``rule``, its ONNX form (none where it drops out)."""
    records = _Records()

    def forward(*arrays):
        outputs, record = run(arrays, None)
        records.keep(outputs[0], record, spec.dropout)
        return outputs

    def grad(xs, ys, gys, wanted):
        record, masks = records.take(ys[0])
        if record is None:  # a forward long ago, or not this kernel's
            record = run(xs, masks)[1]
        return backward(record, gys, wanted)
    attrs = dict(attrs, cell=spec.cell, layers=spec.n_layers,
                 directions=spec.directions)
    if spec.dropout is not None:
        attrs['dropout'] = spec.dropout
    return Kernel(forward, attrs, multi=True,
                  grad=GradRule(grad, inputs=range(n_inputs), outputs=(0,)),
                  fresh=True, lengths=rule,
                  onnx=None if spec.dropout is not None else onnx)


class _Records(object):
    """What the forwards whose first output (``hy``, new on every call)
    is alive computed, by that output: the last few records whole, and
    every dropout mask, so that a gradient gets its own forward's values
    or computes them again with its masks, whatever ran in between."""

    #: Records kept whole (a forward's values are as large as the
    #: activations of all its steps).
    KEPT = 2

    def __init__(self):
        self._records = collections.OrderedDict()
        self._masks = {}

    def keep(self, y, record, dropout):
        key = id(y)
        self._records[key] = record
        while len(self._records) > self.KEPT:
            self._records.popitem(last=False)
        if dropout is not None:
            self._masks[key] = masks_of(record)
        weakref.finalize(y, self._forget, key)

    def _forget(self, key):
        self._records.pop(key, None)
        self._masks.pop(key, None)

    def take(self, y):
        """``(record or None, masks or None)`` of the forward of ``y``."""
        key = id(y)
        return self._records.get(key), self._masks.get(key)


# Per cell: the ONNX op, which of Chainer's weights of the input are the
# op's gates in its order (the state's weights follow in Chainer's list,
# in the same order), and the op's attributes. NStepLSTM holds w0 (i), w1
# (f), w2 (c), w3 (o), ONNX's LSTM wants i, o, f, c; NStepGRU holds w0
# (r), w1 (z), w2 (h), with the state's bias inside the reset (ONNX's
# linear_before_reset), ONNX's GRU wants z, r, h.
_ONNX_CELLS = {
    'lstm': ('LSTM', (0, 3, 1, 2), {}),
    'gru': ('GRU', (1, 0, 2), {'linear_before_reset': 1}),
    'tanh': ('RNN', (0,), {'activations': ['Tanh']}),
    'relu': ('RNN', (0,), {'activations': ['Relu']}),
}


def _to_onnx(spec, b, ins, outs):
    """The op as ONNX ``LSTM``, ``GRU`` or ``RNN`` nodes, one per layer
    (both directions in one): the items padded to the longest, one batch
    column each, with their lengths as ``sequence_lens``; each output item
    cut back to its length."""
    hx, cx, xs, ws, bs = _split_inputs(spec, ins)
    inputs, lengths = onnx_items_padded(b, xs, 2, 1)
    seq_lens = b.op('Cast', [b.op('Concat', lengths, axis=0)[0]], to=6)[0]
    inputs = _onnx_layers(spec, b, inputs, seq_lens, (hx, cx), ws, bs,
                          outs[:spec.n_states])
    for k, (n, y) in enumerate(zip(lengths, outs[spec.n_states:])):
        column = b.op('Gather', [inputs, b.int64s(k)], axis=1)[0]
        b.op('Slice', [column, b.int64s([0]), n, b.int64s([0])], [y])


def _packed_to_onnx(spec, zero_states, b, ins, outs):
    """:class:`PackedNStepRNN` as :func:`_to_onnx`'s layers: the packed
    rows gathered into a time-major block (``(T, N, in_size)``, ``T`` the
    longest length), and the output block's rows of each sequence
    compressed back into packed rows, in order."""
    given = _given(spec, zero_states)
    n_given = len(given)
    states = [None, None]
    for i, state in zip(given, ins[:n_given]):
        states[i] = state
    packed, lengths = ins[n_given:n_given + 2]
    params = ins[n_given + 2:]
    ws, bs = _split_inputs(spec._replace(n_items=0), [None] * spec.n_states
                           + list(params))[3:]
    lengths = b.op('Cast', [lengths], to=7)[0]  # int64
    steps = b.op('Range', [b.constant(numpy.asarray(0, numpy.int64)),
                           b.op('ReduceMax', [lengths], keepdims=0)[0],
                           b.constant(numpy.asarray(1, numpy.int64))])[0]
    steps = b.op('Unsqueeze', [steps, b.int64s([1])])[0]  # (T, 1)
    starts = b.op('CumSum', [lengths, b.constant(
        numpy.asarray(0, numpy.int64))], exclusive=1)[0]
    inside = b.op('Less', [steps, lengths])[0]  # (T, N)
    rows = b.op('Where', [inside, b.op('Add', [steps, starts])[0],
                          b.constant(numpy.asarray(0, numpy.int64))])[0]
    block = b.op('Gather', [packed, rows], axis=0)[0]
    seq_lens = b.op('Cast', [lengths], to=6)[0]
    block = _onnx_layers(spec, b, block, seq_lens, states, ws, bs,
                         outs[:spec.n_states])
    # (T, N, units) -> (N * T, units), compressed to the rows in sequences
    by_item = b.op('Transpose', [block], perm=[1, 0, 2])[0]
    flat = b.op('Flatten', [by_item], axis=2)[0]
    kept = b.op('Reshape', [b.op('Transpose', [inside], perm=[1, 0])[0],
                            b.int64s([-1])])[0]
    b.op('Compress', [flat, kept], [outs[spec.n_states]], axis=0)


def _onnx_layers(spec, b, inputs, seq_lens, initial, ws, bs, outs):
    """The layers of the op on a time-major block ``inputs``, each an
    ONNX ``LSTM``, ``GRU`` or ``RNN`` node from the states ``initial``
    (``(hx, cx)``, ``None`` for zeros): writes the last states into
    ``outs`` and returns the last layer's output block. The number of
    units is the first weight's rows."""
    op_type, gates, attrs = _ONNX_CELLS[spec.cell]
    units = b.in_shapes[len(b.in_shapes) - 2 * N_WEIGHTS[spec.cell] *
                        spec.n_layers * spec.directions][0]
    attrs = dict(attrs, hidden_size=units, direction=(
        'bidirectional' if spec.bidirectional else 'forward'))
    if 'activations' in attrs:
        attrs['activations'] = attrs['activations'] * spec.directions
    state_gates = [len(gates) + k for k in gates]
    states = [[] for _ in range(spec.n_states)]
    for layer in range(spec.n_layers):
        first = layer * spec.directions
        index = range(first, first + spec.directions)
        given = [_layer_state(b, state, first, spec.directions)
                 for state in initial[:spec.n_states] if state is not None]
        found = b.op(op_type, [
            inputs, _stacked(b, ws, index, gates),
            _stacked(b, ws, index, state_gates),
            _stacked(b, bs, index, list(gates) + state_gates), seq_lens] +
            given, [b.fresh('y')] + [b.fresh('state') for _ in states],
            **attrs)
        for kept, state in zip(states, found[1:]):
            kept.append(state)
        # (T, directions, N, units) -> (T, N, directions * units)
        inputs = b.op('Reshape', [b.op(
            'Transpose', [found[0]], perm=[0, 2, 1, 3])[0],
            b.int64s([0, 0, -1])])[0]
    for kept, out in zip(states, outs):
        b.op('Concat', kept, [out], axis=0)
    return inputs


def _stacked(b, arrays, directions, picks):
    """For each of ``directions``, its arrays ``picks`` joined, stacked
    along a new first axis."""
    return b.op('Concat', [b.op('Unsqueeze', [b.op('Concat', [
        arrays[d][k] for k in picks], axis=0)[0], b.int64s([0])])[0]
        for d in directions], axis=0)[0]


def _layer_state(b, state, first, count):
    """The states of one layer's directions, ``state[first:first +
    count]``."""
    return b.op('Slice', [state, b.int64s([first]),
                          b.int64s([first + count]), b.int64s([0])])[0]


def _items_lengths(spec):
    """The ``Kernel.lengths`` rule: any lengths of the sequences, each
    output sequence with the rows of its input; the states and weights
    fixed."""
    items = slice(spec.n_states, spec.n_states + spec.n_items)

    def lengths(rows):
        if any(r is not None for r in rows[:items.start] + rows[items.stop:]):
            return None
        return Follow((None,) * spec.n_states + tuple(rows[items]))
    return lengths


def _packed_rows(spec, zero_states):
    """The ``Kernel.lengths`` rule of a :class:`PackedNStepRNN`: any number
    of sequences (the rows of ``lengths``, which the states have on their
    second axis) and any lengths (the rows of ``packed``, which the
    output sequences have); the weights fixed."""
    n_given = len(_given(spec, zero_states))

    @takes_axes
    def lengths(rows):
        states, (packed, counts) = rows[:n_given], rows[n_given:n_given + 2]
        if any(r is not None for r in rows[n_given + 2:]) or \
                (packed is not None and packed.axis) or \
                (counts is not None and counts.axis):
            return None
        across = None if counts is None else counts._replace(axis=1)
        if any(r != across for r in states):
            return None
        return Follow((across,) * spec.n_states + (packed,))
    return lengths
