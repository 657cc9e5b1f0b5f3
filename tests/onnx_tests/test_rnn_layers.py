"""Loops that are one LSTM or GRU layer become ONNX's ``LSTM`` or ``GRU``
operator (``backend.onnx_rnn``): exported models and onnxruntime programs
equal eager Chainer at several lengths (one step, where the loop takes
none, included) and batch sizes, with new values at each call; other
loops stay ONNX ``Loop`` nodes, without the values nothing reads."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from chainerjit.backend import ort
from examples import models
from tests.onnx_tests.test_loops import Tagger

pytest.importorskip('onnxruntime')

N_IN, UNITS = 6, 8  # Tagger's: the first step is peeled before the loop


class FromZeros(chainer.Chain):
    """``F.lstm`` on the sum of two links, from zero states, the input
    term first; the last state only. The steps on ``axis``."""

    def __init__(self, nobias=False, dtype=numpy.float32, axis=0):
        super(FromZeros, self).__init__()
        self.axis = axis
        with self.init_scope():
            self.up = L.Linear(N_IN, 4 * UNITS, nobias=nobias,
                               initial_bias=0.5)
            self.lat = L.Linear(UNITS, 4 * UNITS, nobias=True)
        self.to(dtype)

    def to(self, dtype):
        for param in self.params():
            param.array = param.array.astype(dtype)

    def forward(self, xs):
        shape = (xs.shape[1 - self.axis], UNITS)
        c = h = self.xp.zeros(shape, xs.dtype)
        for t in range(xs.shape[self.axis]):
            x = xs[t] if self.axis == 0 else xs[:, t]
            c, h = F.lstm(c, self.up(x) + self.lat(h))
        return h, c


class BatchFirst(Tagger):
    """Steps on axis 1: ``xs[:, t]``."""

    def forward(self, xs):
        c = h = None
        for t in range(xs.shape[1]):
            c, h = self.lstm(c, h, xs[:, t])
        return h


class Reversed(Tagger):
    """From the last step to the first; the states in the loop's order and
    in the steps' order."""

    def forward(self, xs):
        c = h = None
        states = []
        for t in reversed(range(xs.shape[0])):
            c, h = self.lstm(c, h, xs[t])
            states.append(h)
        return F.stack(states), F.stack(states[::-1])


class Leaky(Tagger):
    """Something besides the step in the body: stays an ONNX ``Loop``."""

    def forward(self, xs):
        c = h = None
        for t in range(xs.shape[0]):
            c, h = self.lstm(c, h, xs[t])
            h = h * 0.5
        return h


def _random_biases(link):
    """Biases drawn from NumPy's global generator (Chainer's are zeros,
    which would hide a bias put in the wrong place)."""
    for name, param in link.namedparams():
        if name.endswith('/b'):
            param.array[...] = numpy.random.uniform(-1, 1, param.shape)


class GRUFromZeros(chainer.Chain):
    """``L.StatelessGRU`` from a zero state, time-major."""

    def __init__(self):
        super(GRUFromZeros, self).__init__()
        with self.init_scope():
            self.gru = L.StatelessGRU(N_IN, UNITS)
        _random_biases(self)

    def forward(self, xs):
        h = self.xp.zeros((xs.shape[1], UNITS), xs.dtype)
        for t in range(xs.shape[0]):
            h = self.gru(h, xs[t])
        return h


class StatefulGRU(chainer.Chain):
    """``L.GRU`` reset at the start: the first step is peeled."""

    def __init__(self):
        super(StatefulGRU, self).__init__()
        with self.init_scope():
            self.gru = L.GRU(N_IN, UNITS)
        _random_biases(self)

    def forward(self, xs):
        self.gru.reset_state()
        for t in range(xs.shape[0]):
            h = self.gru(xs[t])
        return h


class ReversedGRU(GRUFromZeros):
    """Batch-first, from the last step; every step's state."""

    def forward(self, xs):
        h = self.xp.zeros((xs.shape[0], UNITS), xs.dtype)
        states = []
        for t in reversed(range(xs.shape[1])):
            h = self.gru(h, xs[:, t])
            states.append(h)
        return h, F.stack(states, axis=1)


class ScaledGRU(GRUFromZeros):
    """Something besides the step in the body: stays an ONNX ``Loop``."""

    def forward(self, xs):
        h = self.xp.zeros((xs.shape[1], UNITS), xs.dtype)
        for t in range(xs.shape[0]):
            h = self.gru(h, xs[t]) * 0.5
        return h


def _calls(rng, shapes, dtype=numpy.float32):
    return [(rng.standard_normal(shape).astype(dtype),) for shape in shapes]


TIME_MAJOR = [(5, 2, N_IN), (5, 2, N_IN), (9, 2, N_IN), (1, 2, N_IN),
              (2, 2, N_IN)]


def _op_types(model):
    """The op types of ``model``'s graph, with the branches of its ``If``
    nodes (a layer runs in one: the other keeps the state when the loop
    takes no step) but not the bodies of its ``Loop`` nodes."""
    def walk(nodes):
        for node in nodes:
            yield node.op_type
            if node.op_type == 'If':
                for attribute in node.attribute:
                    for found in walk(attribute.g.node):
                        yield found
    return list(walk(model.graph.node))


BATCH_FIRST = [(2, 5, N_IN), (2, 5, N_IN), (2, 9, N_IN), (2, 1, N_IN)]


@pytest.mark.parametrize('make, shapes, op', [
    (Tagger, TIME_MAJOR, 'LSTM'),
    (FromZeros, TIME_MAJOR, 'LSTM'),
    (lambda: FromZeros(nobias=True), TIME_MAJOR, 'LSTM'),
    (BatchFirst, BATCH_FIRST, 'LSTM'),
    (Reversed, TIME_MAJOR, 'LSTM'),
    (GRUFromZeros, TIME_MAJOR, 'GRU'),
    (StatefulGRU, TIME_MAJOR, 'GRU'),
    (ReversedGRU, BATCH_FIRST, 'GRU'),
])
def test_a_layer_exports_as_one_node(rng, make, shapes, op):
    numpy.random.seed(0)
    model = testing.assert_onnx_matches_eager(
        make().forward, _calls(rng, shapes), rtol=1e-4, atol=1e-5)
    assert _op_types(model).count(op) == 1
    assert 'Loop' not in _op_types(model)


def test_any_batch_size(rng):
    numpy.random.seed(0)
    calls = _calls(rng, [(2, 5, N_IN), (3, 7, N_IN), (4, 1, N_IN)])
    model = testing.assert_onnx_matches_eager(
        FromZeros(axis=1).forward, calls, rtol=1e-4, atol=1e-5,
        dynamic_batch=True)
    assert 'LSTM' in _op_types(model)


def test_double_precision_stays_a_loop(rng):
    # onnxruntime's LSTM takes float32 only.
    model = testing.assert_onnx_matches_eager(
        FromZeros(dtype=numpy.float64).forward,
        _calls(rng, [(5, 2, N_IN), (7, 2, N_IN), (1, 2, N_IN)],
               numpy.float64), rtol=1e-10, atol=1e-12)
    assert 'Loop' in _op_types(model)


def test_a_gru_body_doing_more_than_the_step_stays_a_loop(rng):
    model = testing.assert_onnx_matches_eager(
        ScaledGRU().forward, _calls(rng, TIME_MAJOR), rtol=1e-4, atol=1e-5)
    assert 'GRU' not in _op_types(model) and 'Loop' in _op_types(model)


def test_a_body_doing_more_than_the_step_stays_a_loop_without_dead_values(
        rng):
    numpy.random.seed(0)
    model = testing.assert_onnx_matches_eager(
        Leaky().forward, _calls(rng, TIME_MAJOR), rtol=1e-4, atol=1e-5)
    loop, = [n for n in model.graph.node if n.op_type == 'Loop']
    body = loop.attribute[0].g
    # The fused step's gates (for its gradient) are not computed.
    assert 'Concat' not in [n.op_type for n in body.node]


def test_a_stateful_lstm_runs_as_one_lstm_node_in_onnxruntime(rng):
    model = models.LSTMClassifier(n_in=N_IN, n_hidden=UNITS, n_out=3)
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for t in (5, 9, 5, 1, 17):
            xs = rng.standard_normal((t, 2, N_IN)).astype(numpy.float32)
            testing.assert_results_equal(jitted(xs), model.forward(xs),
                                         1e-4, 1e-5)
            # The link's state, which the program assigns.
            state = model.lstm.h.array.copy()
            model.forward(xs)
            numpy.testing.assert_allclose(state, model.lstm.h.array,
                                          rtol=1e-4, atol=1e-5)
    entry, = jitted.cache_entries()
    assert entry.backend == 'onnxruntime'
    onnx_model = ort.to_onnx(entry.graph)[0]
    assert 'LSTM' in _op_types(onnx_model)


def test_a_stateful_gru_runs_as_one_gru_node_in_onnxruntime(rng):
    model = StatefulGRU()
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for t in (5, 9, 5, 1, 17):
            xs = rng.standard_normal((t, 3, N_IN)).astype(numpy.float32)
            testing.assert_results_equal(jitted(xs), model.forward(xs),
                                         1e-4, 1e-5)
    entry, = jitted.cache_entries()
    assert entry.backend == 'onnxruntime'
    assert 'GRU' in _op_types(ort.to_onnx(entry.graph)[0])


@pytest.mark.parametrize('make, shapes', [
    (lambda: models.LSTMClassifier(n_in=N_IN, n_hidden=UNITS, n_out=3),
     TIME_MAJOR),
    (BatchFirst, BATCH_FIRST),
])
def test_the_step_peeled_from_zero_states_runs_in_the_lstm_node(
        rng, make, shapes):
    # L.LSTM's and L.StatelessLSTM's first step (no h yet) is the layer's
    # step from zero states: the LSTM node takes it too, from the first
    # step on, and nothing else computes gates.
    model = testing.assert_onnx_matches_eager(
        make().forward, _calls(rng, shapes), rtol=1e-4, atol=1e-5)
    kinds = _op_types(model)
    assert kinds.count('LSTM') == 1
    assert not set(kinds) & {'If', 'Tanh', 'Sigmoid', 'Loop'}
