"""The stacked RNN links (``L.NStepLSTM``, ``NStepBiGRU``, ...) as one
``NStepRNN`` op (``ops/nstep.py``): the op alone against the link run
eagerly (outputs bit for bit, gradients of inputs, states and every
parameter), and a jitted text model calling a link, recorded as a single
node, against the same model run eagerly; while training, the op draws
the dropout masks of the layers after the first as the link does, at a
ratio of 0 too; the op over packed sequences (``PackedNStepRNN``) against
the link."""

import copy

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from numpy.testing import assert_allclose
from numpy.testing import assert_array_equal
import pytest

import chainerjit
from chainerjit.ops import nstep
from tests import differential


# link class, its cell, and whether its gradients are Chainer's bit for
# bit with two layers (see test_op_gradients).
LINKS = {
    'NStepLSTM': (L.NStepLSTM, 'lstm'),
    'NStepBiLSTM': (L.NStepBiLSTM, 'lstm'),
    'NStepGRU': (L.NStepGRU, 'gru'),
    'NStepBiGRU': (L.NStepBiGRU, 'gru'),
    'NStepRNNTanh': (L.NStepRNNTanh, 'tanh'),
    'NStepRNNReLU': (L.NStepRNNReLU, 'relu'),
    'NStepBiRNNTanh': (L.NStepBiRNNTanh, 'tanh'),
    'NStepBiRNNReLU': (L.NStepBiRNNReLU, 'relu'),
}

IN_SIZE, UNITS = 4, 5


def _link(name, n_layers, rng, dropout=0.0):
    cls, _ = LINKS[name]
    link = cls(n_layers, IN_SIZE, UNITS, dropout)
    for p in link.params():
        p.array[...] = rng.standard_normal(p.shape).astype(p.dtype) * 0.5
    return link


def _params(link):
    """The link's parameters in the op's input order."""
    params = []
    for ws, bs in zip(link.ws, link.bs):
        params += list(ws) + list(bs)
    return params


def _states(link, n_items, rng):
    shape = (link.n_layers * link.direction, n_items, UNITS)
    n = 2 if LINKS[type(link).__name__][1] == 'lstm' else 1
    return [rng.standard_normal(shape).astype(numpy.float32)
            for _ in range(n)]


def _backprop(outputs, seed):
    """Backprops seeded random gradients from all ``outputs`` but ``hy``
    (a gradient that never arrives is zeros)."""
    rng = numpy.random.RandomState(seed)
    grads = [rng.standard_normal(y.shape).astype(y.dtype) for y in outputs]
    pairs = list(zip(outputs, grads))[1:]
    chainer.backward([y for y, _ in pairs],
                     [chainer.Variable(g) for _, g in pairs])


def _eager(link, states, xs):
    """The link's own outputs, flat, and the gradients of the states, the
    sequences and the parameters."""
    link.cleargrads()
    states = [chainer.Variable(s.copy()) for s in states]
    xs = [chainer.Variable(x.copy()) for x in xs]
    result = link(*(states + [xs]))
    outputs = list(result[:-1]) + list(result[-1])
    _backprop(outputs, 1)
    return outputs, [v.grad for v in states + xs + _params(link)]


def _op(link, states, xs):
    """As :func:`_eager`, through one NStepRNN node."""
    link.cleargrads()
    cell = LINKS[type(link).__name__][1]
    states = [chainer.Variable(s.copy()) for s in states]
    xs = [chainer.Variable(x.copy()) for x in xs]
    node = nstep.NStepRNN(link.n_layers, link.use_bi_direction, cell,
                          len(xs), permute=True)
    outputs = list(node.apply(states + xs + _params(link)))
    _backprop(outputs, 1)
    return outputs, [v.grad for v in states + xs + _params(link)]


# Bit for bit except the second layer of a bidirectional link (Chainer
# adds its input weights' gradients over time steps in an order its
# scheduler draws from the ranks of both directions' nodes) and GRU's
# stacked layers (a state with three consumers, added in an order that
# depends on the ranks of the next layer's nodes): both within rounding.
def _exact_grads(name, n_layers):
    cls, cell = LINKS[name]
    return n_layers == 1 or not (cls.use_bi_direction or cell == 'gru')


@pytest.mark.parametrize('name', sorted(LINKS))
@pytest.mark.parametrize('n_layers', [1, 2])
@pytest.mark.parametrize('lengths', [[5, 3, 3, 1], [2, 4, 1, 6], [3, 3]])
def test_op_against_link(rng, name, n_layers, lengths):
    link = _link(name, n_layers, rng)
    xs = [rng.standard_normal((n, IN_SIZE)).astype(numpy.float32)
          for n in lengths]
    states = _states(link, len(xs), rng)
    expected, expected_grads = _eager(link, states, xs)
    actual, actual_grads = _op(link, states, xs)
    for a, e in zip(actual, expected):
        assert_array_equal(a.array, e.array)
    for a, e in zip(actual_grads, expected_grads):
        if _exact_grads(name, n_layers):
            assert_array_equal(a, e)
        else:
            assert_allclose(a, e, rtol=1e-5, atol=1e-6)


def _packed(link, states, xs, zero_states):
    """As :func:`_op`, through one PackedNStepRNN node over the rows of
    ``xs`` joined and their lengths (``states`` unused for
    ``zero_states``): the outputs with the output sequences cut again,
    and the gradients with that of the rows cut again. ``zero_states``
    may flag each state (an LSTM's ``hx`` given, ``cx`` zeros)."""
    link.cleargrads()
    cell = LINKS[type(link).__name__][1]
    states = [chainer.Variable(s.copy()) for s in states]
    zeros = zero_states if type(zero_states) is tuple else \
        (zero_states,) * len(states)
    packed = chainer.Variable(numpy.concatenate(xs))
    lengths = numpy.array([len(x) for x in xs])
    node = nstep.PackedNStepRNN(link.n_layers, link.use_bi_direction, cell,
                                zero_states)
    found = node.apply([v for v, zero in zip(states, zeros) if not zero] +
                       [packed, lengths] + _params(link))
    ys = F.split_axis(found[-1], numpy.cumsum(lengths)[:-1], 0)
    outputs = list(found[:-1]) + list(ys)
    _backprop(outputs, 1)
    gxs = numpy.split(packed.grad, numpy.cumsum(lengths)[:-1])
    return outputs, [None if zero else v.grad
                     for v, zero in zip(states, zeros)] + \
        gxs + [v.grad for v in _params(link)]


@pytest.mark.parametrize('name, zero_states', [
    (name, zero_states) for name in sorted(LINKS)
    for zero_states in [False, True] + (
        [(False, True), (True, False)] if 'LSTM' in name else [])])
@pytest.mark.parametrize('lengths', [[2, 4, 1, 6], [3, 3, 3]])
def test_packed_op_against_link(rng, name, zero_states, lengths):
    # (An LSTM's states: both given, both zeros, or one zeros.)
    link = _link(name, 2, rng)
    xs = [rng.standard_normal((n, IN_SIZE)).astype(numpy.float32)
          for n in lengths]
    states = _states(link, len(xs), rng)
    zeros = zero_states if type(zero_states) is tuple else \
        (zero_states,) * len(states)
    states = [numpy.zeros_like(s) if zero else s
              for s, zero in zip(states, zeros)]
    expected, expected_grads = _eager(link, states, xs)
    actual, actual_grads = _packed(link, states, xs, zero_states)
    for a, e in zip(actual, expected):
        assert_array_equal(a.array, e.array)
    for a, e in zip(actual_grads, expected_grads):
        if a is None:  # the zero states of hx=None
            continue
        if _exact_grads(name, 2):
            assert_array_equal(a, e)
        else:
            assert_allclose(a, e, rtol=1e-5, atol=1e-6)


def test_packed_op_refuses_lengths_that_do_not_make_the_rows(rng):
    link = _link('NStepLSTM', 1, rng)
    packed = rng.standard_normal((5, IN_SIZE)).astype(numpy.float32)
    for lengths in ([2, 2], [5, 0], []):
        with pytest.raises(ValueError, match='do not make'):
            nstep.PackedNStepRNN(1, False, 'lstm', True).apply(
                [packed, numpy.array(lengths, numpy.int64)] + _params(link))


def test_op_without_permutation(rng):
    link = _link('NStepLSTM', 1, rng)
    xs = [rng.standard_normal((n, IN_SIZE)).astype(numpy.float32)
          for n in (4, 4, 2)]
    states = _states(link, 3, rng)
    node = nstep.NStepRNN(1, False, 'lstm', 3, permute=False)
    outputs = node.apply(states + xs + _params(link))
    expected, _ = _eager(link, states, xs)
    for a, e in zip(outputs, expected):
        assert_array_equal(a.array, e.array)
    with pytest.raises(ValueError):
        node = nstep.NStepRNN(1, False, 'lstm', 3, permute=False)
        node.apply(states + xs[::-1] + _params(link))


def test_no_double_backprop(rng):
    link = _link('NStepGRU', 1, rng)
    x = chainer.Variable(rng.standard_normal((3, IN_SIZE)).astype('f'))
    h = chainer.Variable(numpy.zeros((1, 1, UNITS), 'f'))
    node = nstep.NStepRNN(1, False, 'gru', 1, permute=True)
    hy, y = node.apply([h, x] + _params(link))
    gx, = chainer.grad([F.sum(y * y)], [x], enable_double_backprop=True)
    with pytest.raises(NotImplementedError):
        chainer.grad([F.sum(gx)], [x])


class Classifier(chainer.Chain):
    """Embeds token lists, runs a stacked RNN link over them, and scores
    its final states and all its outputs."""

    def __init__(self, name, n_layers, dropout=0.0, with_states=False):
        super(Classifier, self).__init__()
        numpy.random.seed(0)
        self.lstm = LINKS[name][1] == 'lstm'
        self.with_states = with_states
        with self.init_scope():
            self.embed = L.EmbedID(10, IN_SIZE)
            self.rnn = LINKS[name][0](n_layers, IN_SIZE, UNITS, dropout)
            self.out = L.Linear(UNITS, 3)

    def forward(self, tokens, hx=None, cx=None):
        xs = [self.embed(t) for t in tokens]
        if not self.with_states:
            hx = cx = None
        if self.lstm:
            hy, cy, ys = self.rnn(hx, cx, xs)
            hy = hy + cy
        else:
            hy, ys = self.rnn(hx, xs)
        return F.sum(self.out(hy[-1])) + F.sum(F.tanh(F.concat(ys, axis=0)))


def _token_calls(rng, lengths, n_states, directions, n_layers, n=3):
    shape = (n_layers * directions, len(lengths), UNITS)
    return [([rng.randint(0, 10, n_tokens).astype(numpy.int32)
              for n_tokens in lengths],) +
            tuple(rng.standard_normal(shape).astype(numpy.float32)
                  for _ in range(n_states)) for _ in range(n)]


def _is_link_call(node):
    """A whole link call: over its sequences (``NStepRNN``), or, where the
    list of token arrays is joined at the call, over their rows
    (``PackedNStepRNN``)."""
    return node.op.startswith(('NStepRNN', 'PackedNStepRNN'))


def _nstep_nodes(jitted):
    return [node for entry in jitted.cache_entries()
            for node in entry.graph.nodes if _is_link_call(node)]


def _assert_one_node(jitted):
    info = jitted.cache_info()
    assert info.compiled >= 1 and info.hits >= 1, jitted.cache_report()
    entry, = jitted.cache_entries()
    nodes = [node for node in entry.graph.nodes if _is_link_call(node)]
    assert len(nodes) == 1 and not nodes[0].generic, str(entry.graph)
    # Nothing of Chainer's per-step nodes is left.
    assert not any(node.op in ('LSTM', 'TransposeSequence', 'SplitAxis')
                   for node in entry.graph.nodes), str(entry.graph)


@pytest.mark.bit_exact
@pytest.mark.parametrize('name', sorted(LINKS))
@pytest.mark.parametrize('n_layers', [1, 2])
@pytest.mark.parametrize('with_states', [False, True])
def test_jitted_classifier(rng, name, n_layers, with_states):
    model = Classifier(name, n_layers, with_states=with_states)
    n_states = (2 if model.lstm else 1) if with_states else 0
    calls = _token_calls(rng, [5, 3, 3, 1], n_states,
                         model.rnn.direction, n_layers)
    jitted = differential.check_grads(None, calls, model=model,
                                      method='forward', rtol=1e-5,
                                      atol=1e-6)
    _assert_one_node(jitted)


@pytest.mark.parametrize('name', ['NStepLSTM', 'NStepBiGRU'])
def test_jitted_classifier_of_equal_lengths(rng, name):
    model = Classifier(name, 1, with_states=True)
    n_states = 2 if model.lstm else 1
    calls = _token_calls(rng, [4, 4, 4], n_states, model.rnn.direction, 1)
    jitted = differential.check_grads(None, calls, model=model,
                                      method='forward', rtol=1e-5,
                                      atol=1e-6)
    _assert_one_node(jitted)


@pytest.mark.bit_exact
def test_jitted_lstm_forward_is_eager_bit_for_bit(rng):
    model = Classifier('NStepBiLSTM', 2)
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    for tokens, in _token_calls(rng, [6, 2, 5, 2], 0, 2, 2, n=3):
        with chainer.no_backprop_mode():
            assert_array_equal(jitted(tokens).array, model(tokens).array)
    _assert_one_node(jitted)


@pytest.mark.bit_exact
@pytest.mark.parametrize('name', ['NStepLSTM', 'NStepBiGRU'])
@pytest.mark.parametrize('dropout', [0.3, 0.0])  # 0.0 draws too
def test_dropout_while_training_draws_as_the_link(rng, name, dropout):
    model = Classifier(name, 3, dropout=dropout)
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    # (the first call shows the token lists read item by item, and the
    # next is recorded joined)
    for seed, (tokens,) in enumerate(_token_calls(rng, [5, 3, 3, 1], 0, 1,
                                                  2, n=5)):
        results = []
        for m, forward in ((model, model), (twin, jitted)):
            numpy.random.seed(seed)
            m.cleargrads()
            y = forward(tokens)
            F.sum(y * y).backward()
            results.append((y.array, [p.grad for _, p in
                                      sorted(m.namedparams())],
                            numpy.random.rand()))
        (y, grads, after), (y_jit, grads_jit, after_jit) = results
        assert_array_equal(y_jit, y)
        for a, e in zip(grads_jit, grads):
            numpy.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
        assert after_jit == after  # as many numbers drawn
    _assert_one_node(jitted)
    assert jitted.cache_info().compiled >= 3


@pytest.mark.bit_exact
def test_one_layer_draws_no_dropout_and_is_one_node(rng):
    model = Classifier('NStepLSTM', 1, dropout=0.3)
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    for tokens, in _token_calls(rng, [5, 3, 3, 1], 0, 1, 2):
        state = numpy.random.get_state()
        expected = model(tokens)
        numpy.random.set_state(state)
        assert_array_equal(jitted(tokens).array, expected.array)
    _assert_one_node(jitted)


@pytest.mark.bit_exact
def test_dropout_while_testing_is_one_node(rng):
    model = Classifier('NStepLSTM', 2, dropout=0.3)
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    with chainer.using_config('train', False):
        for tokens, in _token_calls(rng, [5, 3, 3, 1], 0, 1, 2):
            assert_array_equal(jitted(tokens).array, model(tokens).array)
    _assert_one_node(jitted)
