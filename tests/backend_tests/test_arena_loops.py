"""Adversarial differential tests of the arena
(``chainerjit/backend/arena.py``) in loop regions: rolled loops that carry
and collect arena values, initial states and invariants of an arena kind,
loops returning their lists, nested loops, a greedy loop with ``break``,
link state held across calls of other lengths, loops over list arguments
and values whose shapes hold the length. Every result is compared with
eager Chainer's right away and again after all later calls.
"""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.backend_tests.test_arena_lifetimes import _check
from tests.backend_tests.test_arena_lifetimes import _uses_arena
from tests.backend_tests.test_arena_lifetimes import ATOL
from tests.backend_tests.test_arena_lifetimes import RTOL


pytestmark = pytest.mark.adversarial


@pytest.fixture(autouse=True)
def _arena_on(monkeypatch):
    """These tests are about the arena: on whatever the environment says."""
    monkeypatch.setenv('CHAINERJIT_ARENA', '1')


# --- loops -------------------------------------------------------------------

class _RNN(chainer.Chain):

    def __init__(self, n_in=16, n_hidden=32, cell='tanh'):
        super().__init__()
        with self.init_scope():
            self.x2h = L.Linear(n_in, 3 * n_hidden)
            self.h2h = L.Linear(n_hidden, 3 * n_hidden, nobias=True)
        self.cell = cell
        self.n_hidden = n_hidden

    def step(self, x, h):
        gx, gh = self.x2h(x), self.h2h(h)
        if self.cell == 'tanh':
            return F.tanh(gx[:, :self.n_hidden] + gh[:, :self.n_hidden])
        # GRU-like
        n = self.n_hidden
        z = F.sigmoid(gx[:, :n] + gh[:, :n])
        r = F.sigmoid(gx[:, n:2 * n] + gh[:, n:2 * n])
        c = F.tanh(gx[:, 2 * n:] + r * gh[:, 2 * n:])
        return z * h + (1.0 - z) * c


class _Seq(_RNN):
    def forward(self, xs, h0):
        h = h0
        ys = []
        for t in range(xs.shape[0]):
            h = self.step(xs[t], h)
            ys.append(h)
        return F.stack(ys), h


class _SeqNone(_RNN):
    """State that starts as ``None``: the first step is recorded before
    the loop."""

    def forward(self, xs):
        h = None
        ys = []
        for t in range(xs.shape[0]):
            if h is None:
                h = F.tanh(self.x2h(xs[t])[:, :self.n_hidden] * 2.0)
            else:
                h = self.step(xs[t], h)
            ys.append(h)
        return F.stack(ys)


class _SeqViews(_RNN):
    """Collects views of each step's value, and carries a reshaped one."""

    def forward(self, xs, h0):
        h = h0
        ys = []
        for t in range(xs.shape[0]):
            s = self.step(xs[t], h) * 2.0
            h = F.reshape(F.reshape(s, (-1,)), s.shape) * 0.5
            ys.append(F.expand_dims(s, 0)[:, :, ::2])
        return F.concat(ys, axis=0), h


def _seq_calls(rng, lengths, n_in=16, batch=8, n_hidden=32, h0=True):
    calls = []
    for T in lengths:
        xs = rng.standard_normal((T, batch, n_in)).astype(numpy.float32)
        if h0:
            calls.append((xs, rng.standard_normal(
                (batch, n_hidden)).astype(numpy.float32)))
        else:
            calls.append((xs,))
    return calls


@pytest.mark.parametrize('cls,cell,h0', [
    (_Seq, 'tanh', True), (_Seq, 'gru', True), (_SeqNone, 'tanh', False),
    (_SeqNone, 'gru', False), (_SeqViews, 'tanh', True),
    (_SeqViews, 'gru', True)])
@pytest.mark.parametrize('lengths', [(5, 5, 5, 5), (4, 4, 7, 2, 7, 1)])
def test_rolled_loops_collect_and_carry(rng, cls, cell, h0, lengths):
    model = cls(cell=cell)
    jitted = _check(model.forward, _seq_calls(rng, lengths, h0=h0),
                    expect_arena=None)
    assert len(jitted.cache_entries()) <= 2


def test_a_loop_whose_initial_state_is_an_arena_kind_of_value(rng):
    model = _RNN()

    def f(xs, h0):
        h = F.tanh(model.h2h(h0)[:, :32] * 2.0)  # the loop's initial state
        first = h
        for t in range(xs.shape[0]):
            h = model.step(xs[t], h)
        return h, first, F.sum(first * 3.0, axis=1)
    _check(f, _seq_calls(rng, (5, 5, 6, 5)))


def test_an_invariant_computed_before_the_loop_and_read_after(rng):
    model = _RNN()

    def f(xs, h0):
        bias = F.tanh(model.h2h(h0) * 0.5)[:, :32] * 2.0  # invariant
        h = h0
        for t in range(xs.shape[0]):
            h = model.step(xs[t], h) + bias
        return h, F.sum(bias * 1.5, axis=1), bias.T
    _check(f, _seq_calls(rng, (4, 4, 6, 4)))


def test_a_loop_returning_its_list(rng):
    model = _RNN()

    def f(xs, h0):
        h = h0
        ys = []
        for t in range(4):
            h = model.step(xs[t], h) * 1.0
            ys.append(h)
        return ys
    _check(f, _seq_calls(rng, (4, 4, 4, 4)), expect_arena=None)


def test_nested_loops(rng):
    model = _RNN()

    def f(xs, h0):
        h = h0
        ys = []
        for t in range(xs.shape[0]):
            x = xs[t]
            for j in range(3):
                h = model.step(x, h) * 0.5
            ys.append(F.tanh(h * 2.0))
        return F.stack(ys), h
    _check(f, _seq_calls(rng, (3, 3, 5, 3)), expect_arena=None)


EOS = 0


class _Greedy(chainer.Chain):

    def __init__(self, n_vocab=5, n_hidden=32):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(n_vocab, n_hidden)
            self.h2h = L.Linear(n_hidden, n_hidden)
            self.out = L.Linear(n_hidden, n_vocab)

    def forward(self, h, y, max_len):
        ys = []
        hs = []
        for i in range(max_len):
            h = F.tanh(self.h2h(h) + self.embed(y) * 2.0)
            hs.append(h * 1.0)
            y = F.argmax(self.out(h), axis=1)
            ys.append(y)
            if (y.array == EOS).all():
                break
        return F.stack(ys), F.stack(hs), h


def test_greedy_loop_with_break(rng):
    model = _Greedy()
    model.out.b.array[EOS] = 1.5  # stops after a few steps, not always
    calls = []
    for k in range(8):
        h = rng.standard_normal((16, 32)).astype(numpy.float32) * (k % 3)
        y = rng.randint(1, 5, 16).astype(numpy.int32)
        calls.append((h, y, 12))
    jitted = chainerjit.jit(model.forward)
    held = []
    with chainer.no_backprop_mode():
        for args in calls:
            expected, actual = model.forward(*args), jitted(*args)
            testing.assert_results_equal(actual, expected)
            held.append((actual, expected))
    for actual, expected in held:
        testing.assert_results_equal(actual, expected)
    assert jitted.cache_info().hits >= 1


# --- more loops: link state, list arguments, lengths in shapes ---------------

def test_lstm_link_state_held_across_calls_and_lengths(rng):
    from examples import models
    model = models.LSTMClassifier(n_in=16, n_hidden=32)
    eager = model.copy(mode='copy')
    model.forward = chainerjit.jit(model.forward)
    held = []
    with chainer.no_backprop_mode():
        for T in (4, 4, 7, 4, 2, 7):
            xs = rng.standard_normal((T, 16, 16)).astype(numpy.float32)
            y, ey = model(xs), eager(xs)
            held.append(((y, model.lstm.h, model.lstm.c),
                         (ey, eager.lstm.h, eager.lstm.c)))
    for got, want in held:
        for a, e in zip(got, want):
            numpy.testing.assert_allclose(a.array, e.array, RTOL, ATOL)
    assert _uses_arena(model.forward)


def test_a_loop_over_a_list_argument(rng):
    model = _RNN(cell='gru')

    def f(xs, h0):
        h = h0
        ys = []
        for x in xs:
            h = model.step(x, h)
            ys.append(F.tanh(h * 2.0))
        return F.stack(ys), h
    calls = []
    for T in (5, 5, 5, 7, 7):  # one entry per length
        calls.append(([rng.standard_normal((8, 16)).astype(numpy.float32)
                       for _ in range(T)],
                      rng.standard_normal((8, 32)).astype(numpy.float32)))
    _check(f, calls, expect_arena=None)


def test_values_whose_shapes_hold_the_length(rng):
    model = _RNN()

    def f(xs, h0):
        zs = F.tanh(xs * 2.0) + 1.0  # (T, 8, 16): arena at one length
        h = h0
        ys = []
        for t in range(xs.shape[0]):
            h = model.step(zs[t], h)
            ys.append(h)
        s = F.stack(ys) * 0.5 + 1.0
        return F.sum(F.sigmoid(s) * s, axis=2), zs[0], s
    # ``xs`` read whole: each length is an entry of its own
    _check(f, _seq_calls(rng, (5, 5, 8, 5, 3, 8, 5)), expect_arena=True)
