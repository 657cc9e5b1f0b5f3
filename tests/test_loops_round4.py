"""Round 4 of adversarial loop tests: training across verified lengths,
optimizers and carried LSTM state, parameters replaced after
verification, and Python state mutated deep in a link's containers."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest
from chainer import optimizers

import chainerjit


def _max_diff(a, b):
    return float(abs(a - b).max())


# =============================================================================
# Training over several lengths, with optimizers and carried state

class LSTMModel(chainer.Chain):
    def __init__(self):
        super(LSTMModel, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(3, 4)
            self.out = L.Linear(4, 2)

    def forward(self, xs):
        h = None
        for t in range(xs.shape[0]):
            h = self.lstm(xs[t])
        return self.out(h)

    jitted = chainerjit.jit(forward)


class RNN(chainer.Chain):
    def __init__(self, n=4):
        super(RNN, self).__init__()
        with self.init_scope():
            self.w = L.Linear(3, n)
            self.u = L.Linear(n, n, nobias=True)

    def forward(self, xs, h):
        for t in range(xs.shape[0]):
            h = F.tanh(self.w(xs[t]) + self.u(h))
        return h

    def forward_exit(self, xs, h):
        for t in range(xs.shape[0]):
            h = F.tanh(self.w(xs[t]) + self.u(h))
            if (h.array > 0.95).all():
                break
        return h

    jitted = chainerjit.jit(forward)
    jitted_exit = chainerjit.jit(forward_exit)


def _train_pair(cls, call, eager_call, lengths, reset_every, opt_cls, n=4):
    rng = numpy.random.RandomState(0)
    model, twin = cls(), cls()
    twin.copyparams(model)
    opt, twin_opt = opt_cls(), opt_cls()
    opt.setup(model)
    twin_opt.setup(twin)
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.FallbackWarning)
        for i, length in enumerate(lengths):
            xs = rng.randn(length, 2, 3).astype(numpy.float32)
            if reset_every and i % reset_every == 0:
                model.lstm.reset_state()
                twin.lstm.reset_state()
            y, e = call(model, xs, n), eager_call(twin, xs, n)
            assert _max_diff(y.array, e.array) < 1e-5
            model.cleargrads()
            twin.cleargrads()
            F.sum(y * y).backward()
            F.sum(e * e).backward()
            for (name, p), (_, q) in zip(sorted(model.namedparams()),
                                         sorted(twin.namedparams())):
                assert _max_diff(p.grad, q.grad) < 1e-5, (length, name)
            opt.update()
            twin_opt.update()
    return model


@pytest.mark.parametrize('reset_every', [0, 2, 3])
def test_lstm_state_carried_with_sgd(reset_every):
    _train_pair(LSTMModel, lambda m, xs, n: m.jitted(xs),
                lambda m, xs, n: m.forward(xs),
                [3, 4, 4, 5, 3, 5, 6, 6], reset_every,
                lambda: optimizers.SGD(0.1))


@pytest.mark.parametrize('method', ['jitted', 'jitted_exit'])
def test_rnn_verified_lengths_with_adam(method):
    eager = {'jitted': RNN.forward, 'jitted_exit': RNN.forward_exit}[method]
    _train_pair(
        RNN,
        lambda m, xs, n: getattr(m, method)(
            xs, numpy.zeros((2, n), numpy.float32)),
        lambda m, xs, n: eager(m, xs, numpy.zeros((2, n), numpy.float32)),
        [3, 4, 4, 5, 3, 7, 7, 4], 0, optimizers.Adam)


def test_rnn_params_replaced_after_verification():
    rng = numpy.random.RandomState(1)
    model = RNN()

    def check(lengths, n):
        for length in lengths:
            xs = rng.randn(length, 2, 3).astype(numpy.float32)
            h = numpy.zeros((2, n), numpy.float32)
            assert _max_diff(model.jitted(xs, h).array,
                             model.forward(xs, h).array) < 1e-5

    check([3, 3, 5, 5], 4)
    model.u.W.array = rng.randn(4, 4).astype(numpy.float32)
    model.w.W.array[...] = 0.5
    check([5, 7, 7], 4)
    del model.u, model.w
    with model.init_scope():
        model.u = L.Linear(6, 6, nobias=True)
        model.w = L.Linear(3, 6)
    check([5, 7, 8, 8], 6)
    model.u.W.array = rng.randn(6, 6).astype(numpy.float32)
    model.w.W.array = rng.randn(6, 3).astype(numpy.float32)
    check([8, 9, 9], 6)


# =============================================================================
# Python state deep in a link's containers (silently wrong)

class Deep(chainer.Chain):
    def __init__(self):
        super(Deep, self).__init__()
        with self.init_scope():
            self.w = L.Linear(3, 4)
        self.flat = {'n': 0}
        self.two = {'a': [0]}
        self.three = {'a': {'b': [0]}}

    def _bump(self):
        self.three['a']['b'][0] += 1
        return self.three['a']['b'][0]

    def flat_item(self, x):
        self.flat['n'] += 1
        return self.w(x) * self.flat['n']

    def two_levels(self, x):
        self.two['a'][0] += 1
        return self.w(x) * self.two['a'][0]

    def three_levels(self, x):
        self.three['a']['b'][0] += 1
        return self.w(x) * self.three['a']['b'][0]

    def helper(self, x):
        return self.w(x) * self._bump()

    def loop_helper(self, xs):
        h = 0
        for t in range(xs.shape[0]):
            h = h + self.w(xs[t]) * self._bump()
        return h

    def loop_flat_exit(self, xs):
        h = 0
        for t in range(xs.shape[0]):
            self.flat['n'] += 1
            h = h + F.tanh(self.w(xs[t]))
            if (h.array > 100).all():
                break
        return h


_DEEP = ['flat_item', 'two_levels', 'three_levels', 'helper',
         'loop_helper', 'loop_flat_exit']
for _name in _DEEP:
    setattr(Deep, 'jit_' + _name, chainerjit.jit(getattr(Deep, _name)))


def _deep(name):
    model, twin = Deep(), Deep()
    twin.copyparams(model)
    rng = numpy.random.RandomState(0)
    for length in [3, 3, 3, 4, 4, 5]:
        shape = (length, 2, 3) if name.startswith('loop') else (2, 3)
        x = rng.randn(*shape).astype(numpy.float32)
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            y = getattr(model, 'jit_' + name)(x)
        e = getattr(twin, name)(x)
        assert _max_diff(y.array, e.array) < 1e-5, length
    assert (model.flat, model.two, model.three) == \
        (twin.flat, twin.two, twin.three)


@pytest.mark.parametrize('name', ['flat_item', 'loop_flat_exit'])
def test_link_dict_item_mutation(name):
    _deep(name)


@pytest.mark.parametrize('name', ['two_levels', 'three_levels', 'helper',
                                  'loop_helper'])
def test_nested_container_mutation(name):
    _deep(name)
