"""Number arguments that vary by call in a forward whose loops have
symbolic trip counts, or that takes a list of sequences of any lengths
(``frontend.scalars.SizesAndNumbers``): one entry for every length and
every value, with eager's results."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from numpy.testing import assert_allclose
from numpy.testing import assert_array_equal
import pytest

import chainerjit
from chainerjit import errors
from chainerjit.frontend import scalars


F32 = numpy.float32
LENGTHS = [5, 9, 17, 4]


class _Annealed(chainer.Chain):
    """An LSTM over a sequence whose steps a float scales and an int
    divides (a KL weight and a count that change every step)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.lstm = L.LSTM(4, 8)
            self.out = L.Linear(8, 3)

    def forward(self, xs, beta, k):
        self.lstm.reset_state()
        total = 0
        for x in xs:
            h = self.lstm(x) * beta
            total += F.sum(h) / k
        return self.out(h) * (beta + 1) + total


class _Branching(_Annealed):
    def forward(self, xs, beta, k):
        self.lstm.reset_state()
        for t in range(xs.shape[0]):
            h = self.lstm(xs[t])
        if xs.shape[0] > 8:  # a guard on the length
            h = h * 2
        return self.out(h) * beta - k


def _twins(cls):
    eager, model = cls(), cls()
    model.copyparams(eager)
    return eager, model


def _train(cls, calls, rng):
    """Training steps of a jitted twin and an eager one at new lengths
    and numbers on every call; their losses and gradients must agree
    (the loop's weights' gradients within rounding: the backward sums
    them over the steps in one product). Returns the jitted function."""
    eager, model = _twins(cls)
    jitted = chainerjit.jit(model.forward, backend='numpy')
    for i in range(calls):
        xs = rng.randn(LENGTHS[i % len(LENGTHS)], 2, 4).astype(F32)
        beta, k = 0.1 * (i + 1), i + 2
        outputs = []
        for m, fn in ((eager, eager.forward), (model, jitted)):
            m.cleargrads()
            y = fn(xs, beta, k)
            F.sum(y * y).backward()
            outputs.append(y.array)
        assert_array_equal(outputs[1], outputs[0])
        for (_, a), (_, b) in zip(sorted(model.namedparams()),
                                  sorted(eager.namedparams())):
            assert_allclose(a.grad, b.grad, rtol=1e-5, atol=1e-6)
    return jitted


def test_numbers_and_lengths_new_on_every_call_share_one_entry(rng):
    jitted = _train(_Annealed, 10, rng)
    info = jitted.cache_info()
    assert info.compiles == 2 and info.currsize == 1, jitted.cache_report()
    entry, = jitted.cache_entries()
    assert isinstance(entry.symbolic, scalars.SizesAndNumbers)
    text = str(entry.signature)
    assert 'xs: f32[T,2,4]' in text and 'beta: float' in text and \
        'k: int' in text, text
    # The first call at each other length was checked against eager (with
    # new values, which count as the checked ones).
    assert info.eager == len(set(LENGTHS)) - 1
    assert info.compiled == 10 - 2 - info.eager


def test_a_guard_on_the_length_holds_with_varying_numbers(rng):
    jitted = _train(_Branching, 12, rng)
    entries = jitted.cache_entries()
    assert len(entries) == 2, jitted.cache_report()  # T > 8 and T <= 8
    assert all(isinstance(e.symbolic, scalars.SizesAndNumbers)
               for e in entries)


class _Tested(_Annealed):
    def forward(self, xs, beta, k):
        self.lstm.reset_state()
        for x in xs:
            h = self.lstm(x)
            if beta > 0.5:  # bakes beta in
                h = h * 2
        return self.out(h) * k


def test_a_number_the_loop_bakes_in_stays_in_the_key(rng):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jitted = _train(_Tested, 5, rng)
    text = [str(w.message) for w in caught
            if issubclass(w.category, errors.RecompileWarning)]
    assert any('beta compared at' in t for t in text), text
    assert not any(isinstance(e.symbolic, scalars.SizesAndNumbers)
                   for e in jitted.cache_entries())


class _Sentences(chainer.Chain):
    """Chainer's text classification example's encoder (``sequence_embed``
    and ``L.NStepLSTM`` over a list of sentences), its loss weighted by a
    float argument."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 8)
            self.encoder = L.NStepLSTM(1, 8, 8, 0.0)
            self.out = L.Linear(8, 3)

    def forward(self, xs, t, beta):
        sections = numpy.cumsum([len(x) for x in xs[:-1]])
        exs = F.split_axis(self.embed(F.concat(xs, axis=0)), sections, 0)
        last_h, _, _ = self.encoder(None, None, exs)
        return F.softmax_cross_entropy(self.out(last_h[-1]), t) * beta


def test_numbers_and_sentence_lengths_and_counts_new_on_every_call(rng):
    eager, model = _twins(_Sentences)
    jitted = chainerjit.jit(model.forward, backend='numpy')
    for i in range(8):
        n = 4 + i % 3  # (and their number)
        xs = [rng.randint(0, 30, int(rng.randint(2, 12))).astype(numpy.int32)
              for _ in range(n)]
        t = rng.randint(0, 3, n).astype(numpy.int32)
        outputs = []
        for m, fn in ((eager, eager.forward), (model, jitted)):
            m.cleargrads()
            y = fn(xs, t, 0.5 + i / 8)
            y.backward()
            outputs.append((y.array, m.embed.W.grad))
        assert_array_equal(outputs[1][0], outputs[0][0])
        assert_allclose(outputs[1][1], outputs[0][1], rtol=1e-5, atol=1e-7)
    info = jitted.cache_info()
    assert info.compiles == 2 and info.currsize == 1, jitted.cache_report()
    entry, = jitted.cache_entries()
    assert isinstance(entry.symbolic, scalars.SizesAndNumbers)
    # (the sentences joined: any number of them, of any lengths)
    assert 'xs[0]: i32[W]' in str(entry.signature)
    assert 'beta: float' in str(entry.signature)


class _Tempered(chainer.Chain):
    """A classifier whose logits a temperature divides, and whose loss a
    weight adds a penalty to."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.hidden = L.Linear(8, 6)
            self.out = L.Linear(6, 3)

    def forward(self, x, t, beta):
        h = F.relu(self.hidden(x))
        return F.softmax_cross_entropy(self.out(h) / beta, t) + \
            beta * F.mean(h * h)


def test_numbers_and_batch_sizes_new_on_every_call(rng):
    eager, model = _twins(_Tempered)
    jitted = chainerjit.jit(model.forward, backend='numpy')
    for i in range(10):
        n = int(rng.randint(2, 40))
        x = rng.randn(n, 8).astype(F32)
        t = rng.randint(0, 3, n).astype(numpy.int32)
        outputs = []
        for m, fn in ((eager, eager.forward), (model, jitted)):
            m.cleargrads()
            y = fn(x, t, 0.5 + i / 10)
            y.backward()
            outputs.append((y.array, m.hidden.W.grad))
        assert_array_equal(outputs[1][0], outputs[0][0])
        assert_array_equal(outputs[1][1], outputs[0][1])
    info = jitted.cache_info()
    assert info.compiles == 2 and info.currsize == 1, jitted.cache_report()
    entry, = jitted.cache_entries()
    assert isinstance(entry.symbolic, scalars.SizesAndNumbers)
    assert 'x: f32[B,8]' in str(entry.signature)


def test_serving_at_any_batch_size_with_a_new_temperature(rng):
    model = _Tempered()
    jitted = chainerjit.jit(lambda x, tau: F.softmax(model.out(
        F.relu(model.hidden(x))) / tau), backend='numpy')
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for i in range(10):
            x = rng.randn(int(rng.randint(2, 40)), 8).astype(F32)
            tau = 0.5 + i / 10
            assert_array_equal(
                jitted(x, tau).array,
                F.softmax(model.out(F.relu(model.hidden(x))) / tau).array)
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


@pytest.mark.parametrize('first', ['numbers', 'batch sizes'])
def test_numbers_then_batch_sizes_or_the_reverse_converge(rng, first):
    # An entry made symbolic in one (new temperatures at one batch size,
    # or new batch sizes at one temperature) is recorded again with both
    # open once both change: three compiles in all.
    model = _Tempered()

    def forward(x, tau):
        return F.softmax(model.out(F.relu(model.hidden(x))) / tau)
    jitted = chainerjit.jit(forward, backend='numpy')
    if first == 'numbers':
        calls = [(8, 0.5 + i / 10) for i in range(5)]
    else:
        calls = [(int(rng.randint(2, 40)), 0.5) for i in range(5)]
    calls += [(int(rng.randint(2, 40)), 1.5 + i / 10) for i in range(10)]
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for n, tau in calls:
            x = rng.randn(n, 8).astype(F32)
            assert_array_equal(jitted(x, tau).array, forward(x, tau).array)
    assert jitted.cache_info().compiles == 3, jitted.cache_report()
    assert isinstance(jitted.last_entry.symbolic, scalars.SizesAndNumbers)
