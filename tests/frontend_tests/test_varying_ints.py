"""Int arguments that vary by call (``frontend.scalars.IntScalar``): an
int the forward's source only computes with or indexes Variables and
arrays with (never slices or counts with) is an input of the program,
with eager's bits, gradients included; one it slices with, or indexes a
list with, stays in the key; a use the recording cannot see is caught by
the check of the first new values."""

import linecache
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy
from numpy.testing import assert_array_equal
import pytest

import chainerjit
from chainerjit import errors
from chainerjit.frontend import scalars


F32 = numpy.float32
VALUES = [2, 3, 7, 1, 12, 5, -4]


class _Scaled(chainer.Chain):
    """A layer whose output an int argument scales and shifts, in every
    way Chainer's operators take a constant."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 4)

    def forward(self, x, k):
        h = F.tanh(self.fc(x)) * k
        y = h / k + k - F.sum(h) / (k + 1) + (2 * abs(k)) ** 0.5 * h
        return y + (k - h) * (k // 3 - k % 3) + k / (h * h + 1) + h ** 2


def _twins():
    eager, model = _Scaled(), _Scaled()
    model.copyparams(eager)
    return eager, model


def _steps(eager, model, jitted, rng, values):
    """A forward and backward of both models on a new batch per value;
    their outputs and weight gradients must be equal, bit for bit."""
    for k in values:
        x = rng.randn(3, 4).astype(F32)
        outputs = []
        for m, fn in ((eager, eager.forward), (model, jitted)):
            m.cleargrads()
            y = fn(x, k)
            y.grad = numpy.ones_like(y.array)
            y.backward()
            outputs.append(y.array)
        assert_array_equal(outputs[1], outputs[0])
        assert_array_equal(model.fc.W.grad, eager.fc.W.grad)


def test_an_int_new_on_every_call_compiles_twice(rng):
    eager, model = _twins()
    jitted = chainerjit.jit(model.forward, backend='numpy')
    _steps(eager, model, jitted, rng, VALUES)
    info = jitted.cache_info()
    assert info.compiles == 2 and info.currsize == 1, jitted.cache_report()
    assert info.compiled == len(VALUES) - 2 - scalars.CHECKED_VALUES
    entry, = jitted.cache_entries()
    assert 'k: int' in str(entry.signature)
    assert 'python.floordiv' in str(entry.graph)


def test_an_int_runs_in_onnxruntime(rng):
    pytest.importorskip('onnxruntime')
    eager, model = _twins()
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for k in VALUES:
            x = rng.randn(3, 4).astype(F32)
            numpy.testing.assert_allclose(jitted(x, k).array,
                                          eager.forward(x, k).array,
                                          rtol=1e-5, atol=1e-6)
    entry, = jitted.cache_entries()
    assert entry.describe_backend().startswith('onnxruntime'), \
        entry.describe_backend()


def _sliced(x, k):
    return F.tanh(x[:, :k]) * 2


def _counted(x, k):
    for _ in range(k):
        x = F.tanh(x)
    return x * k


def _derived(x, k):
    n = k + 1
    return F.sum(x[:n]) * n


def _halved(x, k):
    return F.tanh(x) * (0.5 * k)


def _filled(x, k):
    return F.tanh(x) + numpy.full(x.shape, k, F32)


def _passed(x, k):
    return _steps_of(x, n=k) * 2


def _steps_of(x, n):
    for _ in range(n):  # a function given the int may read it in C
        x = F.tanh(x)
    return x


@pytest.mark.parametrize('fn, why', [
    (_sliced, 'used to slice or index at'),
    (_counted, 'passed to range() at'),
    (_derived, 'used to slice or index at'),
    (_halved, 'put on the right of a float at'),
    (_passed, 'passed to a function as an int at'),
    (_filled, 'passed to numpy.full() as an int at')])
def test_an_int_the_source_indexes_or_counts_with_stays_in_the_key(
        rng, fn, why):
    # CPython reads an int there in C, unseen (and a float on its left
    # multiplies in C): one entry per value, and a warning saying so.
    jitted = chainerjit.jit(fn, backend='numpy')
    values = [1, 2, 3]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for k in values:
            x = rng.randn(4, 4).astype(F32)
            assert_array_equal(jitted(x, k).array, fn(x, k).array)
    assert jitted.cache_info().currsize == len(values)
    assert all('k: int' not in str(e.signature)
               for e in jitted.cache_entries())
    line = fn.__code__.co_firstlineno + (2 if fn is _derived else 1)
    text, = [str(w.message) for w in caught
             if issubclass(w.category, errors.RecompileWarning)]
    assert "keeps the int argument 'k' in the cache key" in text, text
    assert '%s test_varying_ints.py:%d' % (why, line) in text, text


class _Picked(chainer.Chain):
    """Indexes Variables, a parameter and an argument's array with an
    int argument and integer arithmetic of it."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 4)

    def forward(self, xs, k):
        h = F.tanh(self.fc(xs[k % 3]))
        n = k + 1
        return h[:, k % 4] * 2 + h[:, -(k % 4)] + h[n % 2] + \
            self.fc.W[k % 4]


def test_an_int_indexing_variables_and_arrays_is_an_input(rng):
    eager, model = _Picked(), _Picked()
    model.copyparams(eager)
    jitted = chainerjit.jit(model.forward, backend='numpy')
    for k in VALUES:
        xs = rng.randn(3, 4, 4).astype(F32)
        outputs = []
        for m, fn in ((eager, eager.forward), (model, jitted)):
            m.cleargrads()
            y = fn(xs, k)
            F.sum(y * y).backward()
            outputs.append(y.array)
        assert_array_equal(outputs[1], outputs[0])
        assert_array_equal(model.fc.W.grad, eager.fc.W.grad)
    info = jitted.cache_info()
    assert info.compiles == 2 and info.currsize == 1, jitted.cache_report()
    entry, = jitted.cache_entries()
    assert 'k: int' in str(entry.signature)
    assert 'GetItem[index=[:, i]]' in str(entry.graph)
    assert 'ndarray.__getitem__[index=[i]]' in str(entry.graph)


def test_an_int_index_runs_in_onnxruntime(rng):
    pytest.importorskip('onnxruntime')
    eager, model = _Picked(), _Picked()
    model.copyparams(eager)
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for k in VALUES:
            xs = rng.randn(3, 4, 4).astype(F32)
            numpy.testing.assert_allclose(jitted(xs, k).array,
                                          eager.forward(xs, k).array,
                                          rtol=1e-5, atol=1e-6)
    entry, = jitted.cache_entries()
    assert entry.describe_backend() == 'onnxruntime', \
        entry.describe_backend()


def _columns(x, k):
    h = F.tanh(x)
    return h[:, k] + h[:, k + 1] * 2 + h[-k]


def test_an_int_index_trains_in_onnxruntime(rng):
    pytest.importorskip('onnxruntime')
    jitted = chainerjit.jit(_columns, backend='onnxruntime')
    for k in (1, 2, 0, -2, 1, -3):
        grads = []
        data = rng.randn(4, 4).astype(F32)
        for fn in (jitted, _columns):
            x = chainer.Variable(data.copy())
            y = fn(x, k)
            F.sum(y * y).backward()
            grads.append((y.array, x.grad))
        for a, b in zip(*grads):
            numpy.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    entry, = jitted.cache_entries()
    assert entry.describe_backend() == 'onnxruntime; training: forward ' \
        'in onnxruntime; backward in onnxruntime', entry.describe_backend()


def test_an_export_takes_the_examples_int(rng):
    ort = pytest.importorskip('onnxruntime')
    eager, model = _Picked(), _Picked()
    model.copyparams(eager)
    jitted = chainerjit.jit(model.forward, backend='numpy')
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for k in VALUES[:4]:  # an entry for every k
            jitted(rng.randn(3, 4, 4).astype(F32), k)
        assert isinstance(jitted.last_entry.symbolic,
                          scalars.VaryingScalars)
        xs = rng.randn(3, 4, 4).astype(F32)
        model_proto = chainerjit.export_onnx(jitted, (xs, 5))
        expected = eager.forward(xs, 5).array
    session = ort.InferenceSession(model_proto.SerializeToString(),
                                   providers=['CPUExecutionProvider'])
    name = session.get_inputs()[0].name
    numpy.testing.assert_allclose(session.run(None, {name: xs})[0],
                                  expected, rtol=1e-5, atol=1e-6)


def test_an_int_index_out_of_range_raises_eagers_error(rng):
    jitted = chainerjit.jit(_plain_index, backend='numpy')
    for k in (0, 1, 2, 3):
        x = rng.randn(4, 3).astype(F32)
        assert_array_equal(jitted(x, k).array, _plain_index(x, k).array)
    assert jitted.cache_info().currsize == 1
    with pytest.raises(IndexError, match='index 9 is out of bounds'):
        jitted(x, 9)


def _plain_index(x, k):
    return F.tanh(x)[k] * 3


_SCALES = [1.5, 2.5, 3.5, 4.5, 5.5]
_TABLE = numpy.arange(20, dtype=F32).reshape(5, 4)


def _from_a_list(x, k):
    return F.tanh(x)[k] * _SCALES[k]  # the list's index is read in C


def _from_an_array(x, k):
    return F.tanh(x)[k] + _TABLE[k]  # a plain array's too


@pytest.mark.parametrize('fn', [_from_a_list, _from_an_array])
def test_an_int_indexing_other_objects_stays_in_the_key(rng, fn):
    jitted = chainerjit.jit(fn, backend='numpy')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for k in (0, 1, 2, 3, 4):
            x = rng.randn(5, 4).astype(F32)
            assert_array_equal(jitted(x, k).array, fn(x, k).array)
    text = [str(w.message) for w in caught
            if issubclass(w.category, errors.RecompileWarning)]
    assert any('k used as an index of an object other than a Variable '
               'at test_varying_ints.py' in t for t in text), text
    assert all('k: int' not in str(e.signature)
               for e in jitted.cache_entries())


def _compared(x, k):
    if k > 2:
        return x * 2
    return x * k


def _recompile_warnings(fn, rng):
    """Runs ``fn`` jitted and eagerly at k = 1 to 4 (the results must be
    equal, bit for bit); returns the jitted function and the texts of
    its RecompileWarnings."""
    jitted = chainerjit.jit(fn, backend='numpy')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for k in (1, 2, 3, 4):
            x = chainer.Variable(rng.randn(2, 3).astype(F32))
            assert_array_equal(jitted(x, k).array, fn(x, k).array)
    return jitted, [str(w.message) for w in caught
                    if issubclass(w.category, errors.RecompileWarning)]


def _shifted(x, k):
    return x * (k << 1)


@pytest.mark.parametrize('fn, use', [
    (_compared, 'k compared at'),
    (_shifted, 'k used in bitwise arithmetic at')])
def test_a_use_that_bakes_it_in_keeps_it_in_the_key_with_a_warning(
        rng, fn, use):
    _, text = _recompile_warnings(fn, rng)
    assert any(use in t and 'test_varying_ints.py' in t for t in text), text


def _scaled_by_a_float(x, k):
    return x * ((1 / 2) * k)  # float.__mul__ reads k in C: no use noted


def test_a_use_the_recording_cannot_see_is_caught_at_a_new_value(rng):
    jitted, text = _recompile_warnings(_scaled_by_a_float, rng)
    assert any('gave another result than eagerly' in t for t in text), text
    assert all(not isinstance(e.symbolic, scalars.VaryingScalars)
               for e in jitted.cache_entries())


_OPERATIONS = ['+', '-', '*', '//', '%', '/']


def _expressions():
    """Python source of integer arithmetic over ``k`` and small ints."""
    leaves = st.one_of(st.just('k'), st.integers(-4, 4).map(
        lambda c: '(%d)' % c))
    return st.recursive(leaves, lambda inner: st.builds(
        lambda op, a, b: '(%s %s %s)' % (a, op, b),
        st.sampled_from(_OPERATIONS), inner, inner), max_leaves=5)


@settings(deadline=None, max_examples=40)
@given(_expressions(), st.lists(st.integers(-6, 9), min_size=3,
                                max_size=5, unique=True))
def test_arithmetic_on_a_varying_int_gives_eagers_bits(expression, values):
    fn = _function('def fn(x, k):\n    return F.sin(x) * %s\n' % expression)
    x = chainer.Variable(numpy.linspace(-1, 1, 6, dtype=F32))
    for k in values:
        try:
            c = eval(expression, {'k': k})
        except ZeroDivisionError:
            return
        if abs(c) > 1e6:
            return
    # (A float on the left of k, ``(0 / 1) + k``, reads it in C unseen:
    # the check of the first new values catches it, and k stays in the
    # key. Every way, the results are eager's.)
    jitted = chainerjit.jit(fn, backend='numpy')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.RecompileWarning)
        for k in values:
            assert_array_equal(jitted(x, k).array, fn(x, k).array)


def _function(source):
    """The function ``fn`` that ``source`` defines, its source readable
    (by ``inspect``, through ``linecache``) as a file's would be."""
    filename = '<test_varying_ints %d>' % len(_SOURCES)
    _SOURCES.append(source)
    linecache.cache[filename] = (len(source), None,
                                 source.splitlines(True), filename)
    namespace = {'F': F}
    exec(compile(source, filename, 'exec'), namespace)
    return namespace['fn']


_SOURCES = []
