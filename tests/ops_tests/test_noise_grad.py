"""Dropout in training mode (generic path): seeded jitted calls give
eager's outputs and gradients, with the mask the forward drew."""

import warnings

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import make_calls
from tests.ops_tests.test_connection_grad import tolerances


def _seeded_grads(fn, x, W, seed, gy_seed):
    numpy.random.seed(seed)
    xv, Wv = chainer.Variable(x.copy()), chainer.Variable(W.copy())
    y = fn(xv, Wv)
    y.grad = numpy.random.RandomState(gy_seed).standard_normal(
        y.shape).astype(y.dtype)
    y.backward()
    return y, xv.grad, Wv.grad, numpy.random.get_state()[1].copy()


@pytest.mark.parametrize('dtype', DTYPES)
def test_dropout_train_mode_grad(rng, dtype):
    def fn(x, W):
        return F.linear(F.relu(F.dropout(x, 0.4)), W)
    jfn = chainerjit.jit(fn)
    calls = make_calls(rng, [(5, 6), (3, 6)], dtype)
    with chainer.using_config('train', True), warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        for i, (x, W) in enumerate(calls):
            expected = _seeded_grads(fn, x, W, i, 10 + i)
            actual = _seeded_grads(jfn, x, W, i, 10 + i)
            for a, e in zip(actual[:3], expected[:3]):
                testing.assert_results_equal(a, e, **tolerances(dtype))
            # The same numbers were drawn from NumPy's generator.
            numpy.testing.assert_array_equal(actual[3], expected[3])
    entries = jfn.cache_entries()
    assert all(e.training is not None for e in entries)
    assert jfn.cache_info().hits > 0
    ops = [n.op for e in entries for n in e.graph.nodes]
    assert 'Dropout' in ops
