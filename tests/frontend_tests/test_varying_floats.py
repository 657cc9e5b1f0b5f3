"""Float arguments that vary by call (``frontend.scalars``): one entry for
every value where the forward only computes with them, values and
gradients equal to eager's; the uses that keep them in the key, each
named with its line; a use the recording cannot see, caught by the check
of the first new values."""

import cmath
import math
import operator
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
from hypothesis import given
from hypothesis import strategies as st
import numpy
from numpy.testing import assert_array_equal
import pytest

import chainerjit
from chainerjit import errors
from chainerjit.frontend import scalars
from chainerjit.frontend import signature

# backend='auto' chooses at an entry's third call.
pytestmark = pytest.mark.usefixtures('choose_soon')


F32 = numpy.float32


def _run_both(jitted, fn, calls):
    """Calls ``jitted`` and ``fn`` on each of ``calls``; asserts their
    results are equal, bit for bit."""
    for args in calls:
        got, expected = jitted(*args), fn(*args)
        got = got if isinstance(got, tuple) else (got,)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for a, b in zip(got, expected):
            assert_array_equal(getattr(a, 'array', a),
                               getattr(b, 'array', b))
            assert type(a) is type(b)


def _calls(rng, values, shape=(3, 4)):
    return [(chainer.Variable(rng.randn(*shape).astype(F32)), k)
            for k in values]


VALUES = [1.0, 1.25, 0.3, 2.0, -0.7, 1e-3]


def scaled(x, k):
    return F.tanh(x) * k + 1.0 / k - (2 * k) ** 2 + x / k - k


def test_a_float_new_on_every_call_compiles_twice(rng):
    jitted = chainerjit.jit(scaled, backend='numpy')
    _run_both(jitted, scaled, _calls(rng, VALUES))
    info = jitted.cache_info()
    assert info.compiles == 2 and info.currsize == 1
    assert info.compiled == len(VALUES) - 2 - scalars.CHECKED_VALUES
    entry, = jitted.cache_entries()
    assert 'k: float' in str(entry.signature)
    text = str(entry.graph)
    assert 'MulConstant(' in text and 'python.rtruediv' in text


@pytest.mark.parametrize('dynamic, compiles', [(True, 1), (False, 4)])
def test_dynamic_true_from_the_first_call_false_never(
        rng, dynamic, compiles):
    jitted = chainerjit.jit(scaled, backend='numpy', dynamic=dynamic)
    _run_both(jitted, scaled, _calls(rng, VALUES[:4]))
    assert jitted.cache_info().compiles == compiles


def test_python_arithmetic_as_python_computes_it(rng):
    def fn(x, a, b=0.5):
        c = (a // b) + (a % b) * -abs(b) + (+a) ** 3 - 2 ** b
        return x * c + (1 - a) / (b + 2)
    jitted = chainerjit.jit(fn, backend='numpy')
    for a, b in [(1.5, 0.5), (-2.25, 0.75), (7.0, -1.5), (0.1, 3.0)]:
        _run_both(jitted, fn, [(chainer.Variable(
            rng.randn(2, 3).astype(F32)), a, b)])
    assert jitted.cache_info().compiles == 2


def test_a_division_by_zero_raises_as_eagerly(rng):
    jitted = chainerjit.jit(lambda x, k: x * (1.0 / k), backend='numpy')
    _run_both(jitted, jitted.__wrapped__, _calls(rng, [1.0, 2.0, 3.0]))
    with pytest.raises(ZeroDivisionError):
        jitted(chainer.Variable(numpy.ones((2, 2), F32)), 0.0)


class _Annealed(chainer.Chain):
    """A VAE-like loss whose KL term's weight and temperature change at
    every step."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.enc = L.Linear(6, 4)
            self.dec = L.Linear(4, 6)

    def forward(self, x, beta, tau=1.0):
        z = F.tanh(self.enc(x)) / tau
        rec = F.mean_squared_error(self.dec(z), x)
        kl = F.mean(z * z)
        return rec + beta * kl + (1 - beta) * 0.5 * kl ** tau


def _annealed_twins():
    numpy.random.seed(3)
    eager = _Annealed()
    jitted = eager.copy(mode='copy')
    optimizers = []
    for model in (eager, jitted):
        optimizers.append(chainer.optimizers.MomentumSGD(0.05))
        optimizers[-1].setup(model)
    return eager, jitted, optimizers


@pytest.mark.parametrize('backend', ['numpy', 'auto'])
def test_training_with_an_annealed_weight_follows_eager(rng, backend):
    eager, jitted, optimizers = _annealed_twins()
    forward = chainerjit.jit(jitted.forward, backend=backend)
    for step in range(7):
        x = rng.randn(5, 6).astype(F32)
        beta, tau = min(1.0, step / 4), 0.5 + step / 3
        losses = []
        for model, fn, optimizer in zip((eager, jitted),
                                        (eager.forward, forward),
                                        optimizers):
            model.cleargrads()
            loss = fn(x, beta, tau=tau)
            loss.backward()
            losses.append(float(loss.array))
            optimizer.update()
        # (The compiled backward sums the gradients z gets from its
        # three uses in another order than Chainer's.)
        numpy.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
        for a, b in zip(eager.params(), jitted.params()):
            numpy.testing.assert_allclose(a.array, b.array, rtol=1e-5,
                                          atol=1e-7)
    assert forward.cache_info().compiles == 2
    entry, = forward.cache_entries()
    assert 'beta: float, tau: float' in str(entry.signature)


def test_a_varying_float_runs_in_onnxruntime(rng):
    pytest.importorskip('onnxruntime')
    jitted = chainerjit.jit(scaled, backend='onnxruntime')
    calls = _calls(rng, VALUES)
    for x, k in calls:
        numpy.testing.assert_allclose(jitted(x, k).array,
                                      scaled(x, k).array, rtol=1e-5)
    entry, = jitted.cache_entries()
    assert entry.describe_backend().startswith('onnxruntime')


def _reported(x, k):
    chainer.report({'k': k})
    return x * 2


class _Assigns(chainer.Chain):
    def forward(self, x, k):
        self.last = k
        return x * 2


def _floats_stay(fn, rng, n=4):
    """Runs ``fn`` jitted and eagerly on ``n`` new values; returns the
    RecompileWarning text (the float stays in the key: one entry per
    value, but for the second, recorded with it varying)."""
    jitted = chainerjit.jit(fn, backend='numpy')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        _run_both(jitted, fn, _calls(rng, VALUES[:n]))
    assert jitted.cache_info().currsize == n - 1
    text = [str(w.message) for w in caught
            if issubclass(w.category, errors.RecompileWarning)]
    assert text, 'no warning said why'
    return text[0]


@pytest.mark.parametrize('fn, use', [
    (lambda x, k: x * k if k > 0.5 else x, 'k compared at'),
    (lambda x, k: x * float(k), 'k converted to float at'),
    (lambda x, k: x * float(f'{k:.3f}'), 'k formatted at'),
    (lambda x, k: F.leaky_relu(x, slope=k), 'k passed to LeakyReLU (its '
     'slope) at'),
    (lambda x, k: x + numpy.full(x.shape, k, F32), 'k passed to numpy.'),
    (lambda x, k: (x * 2, k * 3), 'k returned at'),
    (lambda x, k: x * round(k, 1), 'k rounded at'),
    (lambda x, k: x * math.exp(k), 'k passed to math.exp at'),
    (lambda x, k: x * math.copysign(1.0, k), 'k passed to math.copysign'),
], ids=['compared', 'float', 'format', 'attribute', 'numpy', 'returned',
        'round', 'math', 'sign'])
def test_each_use_that_bakes_it_in_keeps_it_in_the_key(rng, fn, use):
    text = _floats_stay(fn, rng)
    assert use in text and 'test_varying_floats.py' in text, text


def test_an_assignment_keeps_it_in_the_key(rng):
    with chainer.using_config('train', False):
        model = _Assigns()
        assert 'k assigned to self.last' in _floats_stay(model.forward, rng)
        assert model.last == VALUES[3]


def test_a_report_is_a_program_output_of_each_calls_number(rng):
    """The reporter gets each call's float (a program output turned back
    into a Python float), from one entry."""
    jitted = chainerjit.jit(_reported, backend='numpy')
    for x, k in _calls(rng, VALUES):
        seen = []
        for fn in (_reported, jitted):
            observation = {}
            with chainer.Reporter().scope(observation):
                assert_array_equal(fn(x, k).array, (x * 2).array)
            seen.append(observation['k'])
        assert type(seen[1]) is float and seen == [k, k]
    assert jitted.cache_info().currsize == 1
    assert jitted.cache_info().compiled == len(VALUES) - 4


def test_a_use_the_recording_cannot_see_is_caught_at_a_new_value(rng):
    def fn(x, k):
        return x * cmath.exp(k).real  # read in C: no use noted
    jitted = chainerjit.jit(fn, backend='numpy')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        _run_both(jitted, fn, _calls(rng, VALUES))
    assert any('gave another result than eagerly' in str(w.message)
               for w in caught)
    assert all(not isinstance(e.symbolic, scalars.VaryingScalars)
               for e in jitted.cache_entries())


def test_the_key_leaves_out_the_values_only():
    x = numpy.ones((2, 3), F32)

    def key(*args, **kwargs):
        return signature.make_key(args, kwargs, True, True)[0]

    def paths(a, b, ints=()):
        return scalars.varying_paths(a, b, lambda path: path in ints)
    assert paths(key(x, 1.0), key(x, 2.0)) == (('args', 1),)
    assert paths(key(x, 1.0, b=2.0), key(x, 1.0, b=3.0)) == (
        ('kwargs', 'b'),)
    assert paths(key(x, 1.0), key(x, 1.0)) is None
    assert paths(key(x, 1.0), key(x, 1)) is None
    assert paths(key(x, 1.0), key(x[:1], 2.0)) is None
    assert paths(key(x, 1), key(x, 2)) is None  # ints only where allowed
    assert paths(key(x, 1), key(x, 2), [('args', 1)]) == (('args', 1),)
    assert paths(key(x, True), key(x, False), [('args', 1)]) is None
    assert scalars.number_paths(key(x, 1.0, 2, b=3.0, c='s', d=4),
                                lambda path: path == ('kwargs', 'd')) == (
        ('args', 1), ('kwargs', 'b'), ('kwargs', 'd'))
    varying = scalars.VaryingScalars((('args', 1), ('kwargs', 'b')))
    general, values = varying.generalize(key(x, 1.5, b=-2.0))
    assert values == [1.5, -2.0]
    assert general == varying.generalize(key(x, 7.0, b=0.0))[0]
    # An int keeps its type in the key: it is another entry's.
    as_int, values = varying.generalize(key(x, 1, b=0.0))
    assert values == [1, 0.0] and as_int != general
    assert varying.generalize(key(x, 'one', b=0.0)) is None


_OPERATORS = [operator.add, operator.sub, operator.mul, operator.truediv,
              operator.pow]


def _expressions():
    """Python arithmetic over ``k`` and constants, as nested tuples."""
    leaves = st.one_of(st.just('k'), st.floats(-3, 3, allow_nan=False)
                       .map(lambda c: round(c, 2)))
    return st.recursive(leaves, lambda inner: st.tuples(
        st.sampled_from(_OPERATORS), inner, inner), max_leaves=5)


def _evaluate(expression, k):
    if expression == 'k':
        return k
    if not isinstance(expression, tuple):
        return expression
    fn, a, b = expression
    return fn(_evaluate(a, k), _evaluate(b, k))


@given(_expressions(), st.lists(st.floats(0.1, 4).map(
    lambda v: round(v, 3)), min_size=3, max_size=5, unique=True))
def test_arithmetic_on_a_varying_float_gives_eagers_bits(expression,
                                                         values):
    def fn(x, k):
        c = _evaluate(expression, k)
        return F.sin(x) * c + c
    x = chainer.Variable(numpy.linspace(-1, 1, 6, dtype=F32))
    calls = []
    for k in values:
        try:
            c = _evaluate(expression, k)
        except (ZeroDivisionError, OverflowError):
            return
        if not isinstance(c, float) or not math.isfinite(c) or \
                abs(c) > 1e30:
            return
        calls.append((x, k))
    jitted = chainerjit.jit(fn, backend='numpy')
    _run_both(jitted, fn, calls)


class _Rounded(chainer.Chain):
    """A loss weighted by a test of a function of its argument computed
    in C (``cmath``: no use noted), which the first values pass."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 2)

    def forward(self, x, k):
        weight = 1.0 if cmath.sqrt(k).real > 0.5 else 0.0
        return F.sum(self.fc(x)) * weight


def test_a_value_caught_in_one_mode_is_kept_in_the_key_in_both(rng):
    """The training entry, taking ``k`` at any value, is checked at its
    first new values; the inference entry's check at ``k = 0.0`` catches
    the weight baked in: the training entry goes too (its program bakes
    the same weight)."""
    model = _Rounded()
    jitted = chainerjit.jit(model.forward, backend='numpy')
    x = rng.randn(4, 3).astype(F32)
    calls = [(k, True) for k in (0.6, 0.7, 0.8, 0.9, 0.95)] + \
        [(0.6, False), (0.7, False), (0.0, False), (0.0, True), (0.1, True)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for k, train in calls:
            with chainer.using_config('train', train):
                assert_array_equal(jitted(x, k).array,
                                   model.forward(x, k).array)
    assert any('gave another result than eagerly' in str(w.message)
               for w in caught)


def test_a_number_formatted_with_percent_stays_in_the_key(rng):
    def fn(x, k):
        return x * float('%.0f' % k)  # (read in C)
    jitted = chainerjit.jit(fn, backend='numpy')
    x = rng.randn(2, 3).astype(F32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        _run_both(jitted, fn, [(x, k) for k in (0.6, 0.7, 0.8, 0.9, 0.0)])
    assert any('k formatted with % at test_varying_floats' in str(w.message)
               for w in caught)
