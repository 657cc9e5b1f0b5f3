"""What user code returns and what it is called with, jitted, against
eager Chainer: dicts of mixed values, an input returned unchanged, one
Variable returned twice; the same input passed twice, in-place NumPy on
an input, ``requires_grad`` under ``no_backprop_mode``, a jitted function
calling another, ``F.forget``, views with array indices and a Variable as
an index, integer, bool and float16 inputs, zero-dimensional and empty
ones. The calls and their checks are those of ``test_user_code.py``.
"""

import warnings

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.api_tests.user_code_checks import _compiled
from tests.api_tests.user_code_checks import _r
from tests.api_tests.user_code_checks import _same
from tests.api_tests.user_code_checks import _v
from tests.api_tests.user_code_checks import f32


pytestmark = pytest.mark.adversarial


# ----------------------------------------------------------------------
# What is returned


def _mixed(x, a):
    y = F.tanh(x)
    return {'var': y, 'arr': y.array, 'int': x.shape[0], 'str': 'out',
            'none': None, 'list': [a, y * 2, (1.5, True)],
            'input_var': x, 'input_arr': a}


def test_dict_output_with_mixed_values_and_inputs(rng):
    jf = chainerjit.jit(_mixed)
    for _ in range(3):
        for n in (2, 1):
            x, a = _v(rng, n, 3), _r(rng, n, 3)
            out, _ = _same(jf, _mixed, x, a)
            assert out['input_var'] is x and out['input_arr'] is a
            assert out['list'][0] is a
    _compiled(jf, 2)


def test_returning_an_input_array_unchanged(rng):
    def f(a, x):
        return a, F.relu(x), a
    jf = chainerjit.jit(f)
    for n in (2, 2, 2, 1, 1, 1, 2, 2, 1):
        a = _r(rng, n, 3)
        out, _ = _same(jf, f, a, _v(rng, n, 3))
        assert out[0] is a and out[2] is a
    _compiled(jf, 1)  # (for every batch size)


def test_returning_the_same_variable_twice(rng):
    def f(x):
        y = F.relu(x)
        return y, [y]
    jf = chainerjit.jit(f)
    for n in (2, 2, 2, 1, 1, 1):
        out, expected = _same(jf, f, _v(rng, n, 3))
        assert expected[0] is expected[1][0]
        assert out[0] is out[1][0]


# ----------------------------------------------------------------------
# Inputs: aliasing, in place, requires_grad, dtypes, 0-d, empty


def _alias(x, y):
    return x * y + x


def test_the_same_input_twice_then_different(rng):
    jf = chainerjit.jit(_alias)
    for _ in range(3):
        x = _v(rng, 2, 3)
        _same(jf, _alias, x, x)
        _same(jf, _alias, x, _v(rng, 2, 3))
        a = _r(rng, 2, 3)
        _same(jf, _alias, a, chainer.Variable(a))  # same array
    _compiled(jf, 3)


def test_identity_of_the_same_variable_passed_twice(rng):
    def f(x, y):
        return F.relu(x), x is y

    jf = chainerjit.jit(f)
    for _ in range(3):
        x = _v(rng, 2, 3)
        _same(jf, f, x, x)
        _same(jf, f, x, chainer.Variable(x.array))


def test_in_place_numpy_on_an_input_array(rng):
    def f(a):
        a[0] = 0
        return F.relu(a) * 2

    jf = chainerjit.jit(f)
    seen = []
    for n in (2, 2, 2, 3, 3, 3):
        a = _r(rng, n, 3)
        b = a.copy()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            with chainer.no_backprop_mode():
                expected = f(a)
                actual = jf(b)
        testing.assert_results_equal(actual, expected)
        numpy.testing.assert_array_equal(a, b)  # the side effect
        seen += [str(w.message) for w in caught
                 if issubclass(w.category, chainerjit.FallbackWarning)]
    assert any('setitem' in m for m in seen), seen  # ran eagerly, warned


def test_requires_grad_true_and_false_under_no_backprop(rng):
    def f(x, w):
        return F.tanh(x) * w
    jf = chainerjit.jit(f)
    for _ in range(3):
        for grad in (True, False):
            x = chainer.Variable(_r(rng, 2, 3), requires_grad=grad)
            w = chainer.Variable(_r(rng, 3), requires_grad=not grad)
            out, expected = _same(jf, f, x, w)
            assert out.requires_grad == expected.requires_grad
            assert out.creator is None
    _compiled(jf, 2)
    # with backprop enabled the same function runs eagerly and has a graph
    x = chainer.Variable(_r(rng, 2, 3))
    y = jf(x, _r(rng, 3))
    assert y.creator is not None
    F.sum(y).backward()
    assert x.grad is not None


def test_a_jitted_function_calling_another(rng):
    @chainerjit.jit
    def inner(x, k):
        return F.relu(x) * k

    def inner_eager(x, k):
        return F.relu(x) * k

    def outer_eager(x):
        return inner_eager(x, 2.0) + inner_eager(x * -1, 3.0)

    outer = chainerjit.jit(lambda x: inner(x, 2.0) + inner(x * -1, 3.0))
    for _ in range(3):
        _same(outer, outer_eager, _v(rng, 2, 3))
        _same(outer, outer_eager, _v(rng, 4, 3))
        _same(inner, inner_eager, _v(rng, 4, 3), 1.0)
    _compiled(outer, 1)  # one entry for both batch sizes
    _compiled(inner, 1)


def _views(x, idx):
    h = F.forget(lambda a, b: F.tanh(a) * b, x, x)
    return (h.reshape(-1), h.T, h.transpose(1, 0), h[idx.array],
            h[:, ::-1], h[None, 1:])


def test_forget_and_variable_views_with_array_indices(rng):
    jf = chainerjit.jit(_views)
    for _ in range(3):
        _same(jf, _views, _v(rng, 3, 4),
              chainer.Variable(rng.randint(0, 3, 2).astype(numpy.int32)))
        _same(jf, _views, _v(rng, 5, 2),
              chainer.Variable(rng.randint(0, 5, 4).astype(numpy.int64)))
    _compiled(jf, 2)


def test_variable_as_an_index_raises_like_eager(rng):
    def f(x, i):
        return x[i]
    jf = chainerjit.jit(f)
    for _ in range(3):
        x = _v(rng, 3, 4)
        i = chainer.Variable(numpy.array([1, 0], numpy.int32))
        with chainer.no_backprop_mode():
            with pytest.raises(IndexError):
                f(x, i)
            with pytest.raises(IndexError):
                jf(x, i)


def _typed(ids, mask, x):
    h = F.cast(ids, x.dtype) + x
    return F.where(mask, h, x * 2), ids * 2, mask


def test_integer_bool_and_float16_inputs(rng):
    jf = chainerjit.jit(_typed)
    for _ in range(3):
        for dtype in (f32, numpy.float16):
            ids = rng.randint(-3, 3, (2, 3)).astype(numpy.int32)
            mask = rng.rand(2, 3) > 0.5
            out, _ = _same(jf, _typed, ids, mask, _v(rng, 2, 3,
                                                     dtype=dtype))
            assert out[2] is mask
    _compiled(jf, 2)


def _small(x, s):
    return F.exp(x) * s + F.sum(x), F.reshape(x, (-1,))


def test_zero_dim_and_empty_inputs(rng):
    jf = chainerjit.jit(_small)
    for _ in range(3):
        _same(jf, _small, _v(rng), _r(rng))
        _same(jf, _small, _v(rng, 0, 3), _r(rng, 0, 3))
        _same(jf, _small, _v(rng, 2, 0), _r(rng))
    _compiled(jf, 3)
