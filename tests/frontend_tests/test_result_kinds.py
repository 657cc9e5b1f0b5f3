"""Every leaf of a compiled call's result is of the kind eager's is: a
NumPy scalar where eager NumPy gives one (an elementwise op on 0-d
arrays), a 0-d or n-d array, a Variable, in the same containers; on the
recording call and on every compiled call with new values."""

import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing

F32 = numpy.float32


def absolute(x):
    return abs(x)


def doubled_scalar(x):
    return x * 2.0 + 1.0


def scalar_beside_a_variable(x):
    return F.relu(x), (abs(x) + x, [x * 0.5])


def a_0d_array(x):
    return F.sum(F.tanh(x)).array


def a_0d_variable(x):
    return F.sum(F.tanh(x))


def a_scalar_of_an_nd_argument(x):
    return numpy.maximum(x[0, 0], x[1, 1]), F.tanh(x)


def _calls(rng, shape):
    return [(numpy.asarray(rng.standard_normal(shape), F32),)
            for _ in range(4)]


@pytest.mark.parametrize('fn, shape', [
    (absolute, ()), (doubled_scalar, ()), (scalar_beside_a_variable, ()),
    (a_0d_array, (3,)), (a_0d_variable, (3,)),
])
def test_result_kinds_match_eager(rng, fn, shape):
    calls = _calls(rng, shape)
    testing.assert_jit_matches_eager(fn, calls)
    jitted = chainerjit.jit(fn)
    for args in calls:
        got, expected = jitted(*args), fn(*args)
        testing.assert_results_equal(got, expected)
    assert jitted.cache_info().compiled == len(calls) - 1


def test_an_element_read_as_a_numpy_scalar_runs_eagerly(rng):
    """``x[0, 0]`` of an array is a NumPy scalar that Python code may
    test (``isinstance``, ``int()``): the call runs eagerly, with eager's
    kinds."""
    calls = _calls(rng, (2, 2))
    jitted = chainerjit.jit(a_scalar_of_an_nd_argument)
    with pytest.warns(errors.FallbackWarning, match='Python value'):
        jitted(*calls[0])
    for args in calls:
        testing.assert_results_equal(jitted(*args),
                                     a_scalar_of_an_nd_argument(*args))
    assert jitted.cache_info().compiled == 0


def test_a_returned_scalar_is_a_numpy_scalar(rng):
    jitted = chainerjit.jit(absolute)
    for (x,) in _calls(rng, ()):
        got = jitted(x)
        assert type(got) is numpy.float32 and got == abs(x)
