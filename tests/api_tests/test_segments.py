"""A forward that runs eagerly (a value read into Python, a signature no
longer recorded) still runs the links it calls compiled, each as a
segment with a jitted forward of its own, for the time of the call:
values and gradients stay eager's."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing

F32 = numpy.float32


class Encoder(chainer.Chain):

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(6, 8)
            self.l2 = L.Linear(8, 3)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


class Counting(chainer.Chain):
    """Reads a count into Python and branches on it, after a ``return``
    (so it is not cut at a graph break): runs eagerly."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.enc = Encoder()
            self.out = L.Linear(3, 3)

    def forward(self, x, t=None):
        y = self.enc(x)
        if t is None:
            return y
        if int((y.array.argmax(axis=1) == t).sum()) > len(t) // 2:
            y = y * 2
        return F.softmax_cross_entropy(self.out(y), t)


def _twins():
    eager, model = Counting(), Counting()
    model.copyparams(eager)
    return eager, model


def _calls(rng, n=5):
    return [(rng.standard_normal((4, 6)).astype(F32),
             rng.randint(0, 3, 4).astype(numpy.int32)) for _ in range(n)]


def _grads(model):
    return dict((name, p.grad.copy()) for name, p in model.namedparams())


def test_the_links_of_an_eager_forward_run_compiled(rng):
    eager, model = _twins()
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        for x, t in _calls(rng):
            for m, fn in ((eager, eager.forward), (model, jitted)):
                m.cleargrads()
                fn(x, t).backward()
            testing.assert_results_equal(jitted(x, t), eager.forward(x, t))
            expected, actual = _grads(eager), _grads(model)
            for name in expected:
                numpy.testing.assert_allclose(actual[name], expected[name],
                                              rtol=1e-5, atol=1e-6)
    info = jitted.cache_info()
    # The first eager call records the segments; the others run them.
    assert info.compiled == 0 and info.eager == 9 and info.segmented == 8
    segments = jitted.segments()
    assert sorted(segments) == ['enc', 'out']
    assert segments['enc'].cache_info().compiled >= 8
    assert 'enc (' in jitted.cache_report()
    explained = jitted.explain(x, t)
    assert 'runs eagerly: int of an array value at ' in explained
    assert 'run compiled, as segments: enc, out.' in explained


def _jitted_after_a_call(rng):
    """Twins, the second's forward jitted and called once; one call's
    arguments."""
    eager, model = _twins()
    jitted = chainerjit.jit(model.forward)
    (x, t), = _calls(rng, 1)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        jitted(x, t)
    return eager, model, jitted, x, t


def test_segments_last_for_the_call_only(rng):
    eager, model, jitted, x, t = _jitted_after_a_call(rng)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        jitted(x, t)
    enc = jitted.segments()['enc']
    calls = enc.cache_info().hits + enc.cache_info().misses
    testing.assert_results_equal(model.enc(x), eager.enc(x))
    assert enc.cache_info().hits + enc.cache_info().misses == calls


def test_hooks_see_every_op_of_an_eager_forward(rng):
    _, _, jitted, x, t = _jitted_after_a_call(rng)
    hook = chainer.function_hooks.TimerHook()
    with hook:
        jitted(x, t)
    names = set(name for name, _ in hook.call_history)
    assert 'LinearFunction' in names and 'ReLU' in names
    assert not jitted.segments()


def test_a_link_jitted_by_the_user_keeps_its_own_forward(rng):
    eager, model = _twins()
    model.enc.forward = own = chainerjit.jit(model.enc.forward)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        for x, t in _calls(rng, 3):
            testing.assert_results_equal(jitted(x, t), eager.forward(x, t))
    assert sorted(jitted.segments()) == ['out']
    assert own.cache_info().compiled >= 1


@pytest.mark.parametrize('stop', ['fallbacks', 'new values'])
def test_signatures_no_longer_recorded_run_segments(rng, stop):
    class Scaled(Counting):
        def forward(self, x, t, k):
            return super().forward(x, t) * k

    eager, model = Scaled(), Scaled()
    model.copyparams(eager)
    jitted = chainerjit.jit(model.forward, recompile_limit=2)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for n, (x, t) in enumerate(_calls(rng, 8)):
            if stop == 'fallbacks':  # a new signature for the model only
                t = t.astype((numpy.int32, numpy.int64)[n % 2])
            k = float(n) if stop == 'new values' else 1.0
            testing.assert_results_equal(jitted(x, t, k),
                                         eager.forward(x, t, k))
    assert jitted.budget.stopped
    assert jitted.segments()['enc'].cache_info().compiled > 0


class OwnCall(chainer.Link):
    """A link of the older kind, which defines ``__call__`` and no
    ``forward`` (as ChainerMN's batch normalization does)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.w = chainer.Parameter(numpy.ones(3, F32))

    def __call__(self, x):
        return x * self.w


def test_a_link_that_defines_its_own_call_runs_as_it_is(rng):
    class WithOwnCall(Counting):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.scale = OwnCall()

        def forward(self, x, t):
            return super().forward(x, t) + F.sum(self.scale(self.enc(x)))

    eager, model = WithOwnCall(), WithOwnCall()
    model.copyparams(eager)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        for x, t in _calls(rng, 3):
            testing.assert_results_equal(jitted(x, t), eager.forward(x, t))
    assert sorted(jitted.segments()) == ['enc', 'out']
