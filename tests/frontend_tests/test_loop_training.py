"""Training through loop regions over several lengths, against eager
Chainer: optimizers stepping a model whose symbolic entry verifies new
lengths, LSTM state carried across calls, and parameters replaced after a
length was verified."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest
from chainer import optimizers

import chainerjit


pytestmark = pytest.mark.adversarial


def _max_diff(a, b):
    return float(abs(a - b).max())


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


class _FirstAndLast(chainer.Chain):
    """The first step's state (peeled before the loop: ``L.LSTM`` and
    ``L.GRU`` have no state yet) read beside the last: the loop keeps
    the first state for its backward, so nothing may then write the sum
    into it in place."""

    def __init__(self, link):
        super(_FirstAndLast, self).__init__()
        with self.init_scope():
            self.rnn = link

    def forward(self, xs):
        self.rnn.reset_state()
        hs = [self.rnn(xs[t]) for t in range(xs.shape[0])]
        return hs[0] + hs[-1]


@pytest.mark.parametrize('make', [lambda: L.LSTM(4, 5),
                                  lambda: L.GRU(4, 5)], ids=['lstm', 'gru'])
def test_gradients_of_the_first_and_last_states(make):
    numpy.random.seed(0)
    eager = _FirstAndLast(make())
    jitted = _FirstAndLast(make())
    jitted.copyparams(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    rng = numpy.random.RandomState(1)
    for length in (4, 4, 6, 4, 3, 6):
        xs = rng.randn(length, 3, 4).astype(numpy.float32)
        for model in (eager, jitted):
            model.cleargrads()
            y = model(xs)
            F.sum(y * y).backward()
        for (name, a), (_, b) in zip(sorted(eager.namedparams()),
                                     sorted(jitted.namedparams())):
            assert _max_diff(a.grad, b.grad) < 1e-5, name
    assert len(jitted.forward.cache_entries()) == 1
