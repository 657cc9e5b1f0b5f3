"""Number arguments that vary by call in a forward whose loops have
symbolic trip counts (``frontend.scalars.TripsAndNumbers``): one entry
for every length and every value, with eager's results."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from numpy.testing import assert_allclose
from numpy.testing import assert_array_equal

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
    assert isinstance(entry.symbolic, scalars.TripsAndNumbers)
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
    assert all(isinstance(e.symbolic, scalars.TripsAndNumbers)
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
    assert not any(isinstance(e.symbolic, scalars.TripsAndNumbers)
                   for e in jitted.cache_entries())
