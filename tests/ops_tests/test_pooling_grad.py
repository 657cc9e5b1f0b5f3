"""Gradients of the lowered pooling ops against eager Chainer's, over the
cases of the forward tests in test_pooling.py."""

import chainer.functions as F
import numpy
import pytest

from chainerjit import testing
from tests.ops_tests import test_pooling as forward
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import make_calls
from tests.ops_tests.common import cases_of
from tests.ops_tests.test_connection_grad import tolerances


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', forward.MAX_CASES)
def test_max_pooling_2d_grad(rng, dtype, x_shape, ksize, options):
    testing.assert_jit_grads_match_eager(
        lambda x: F.max_pooling_2d(x, ksize, **options),
        make_calls(rng, [x_shape], dtype),
        lowered=['MaxPoolingND'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize(
    'x_shape,ksize,options',
    cases_of(forward.test_max_pooling_nd, 'x_shape,ksize,options'))
def test_max_pooling_nd_grad(rng, dtype, x_shape, ksize, options):
    testing.assert_jit_grads_match_eager(
        lambda x: F.max_pooling_nd(x, ksize, **options),
        make_calls(rng, [x_shape], dtype),
        lowered=['MaxPoolingND'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', forward.AVERAGE_CASES)
def test_average_pooling_2d_grad(rng, dtype, x_shape, ksize, options):
    testing.assert_jit_grads_match_eager(
        lambda x: F.average_pooling_2d(x, ksize, **options),
        make_calls(rng, [x_shape], dtype),
        lowered=['AveragePooling2D'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize(
    'pad_value', cases_of(forward.test_average_pooling_nd, 'pad_value'))
@pytest.mark.parametrize(
    'x_shape,ksize,options',
    cases_of(forward.test_average_pooling_nd, 'x_shape,ksize,options'))
def test_average_pooling_nd_grad(rng, dtype, pad_value, x_shape, ksize,
                                 options):
    testing.assert_jit_grads_match_eager(
        lambda x: F.average_pooling_nd(x, ksize, pad_value=pad_value,
                                       **options),
        make_calls(rng, [x_shape], dtype),
        lowered=['AveragePoolingND'], **tolerances(dtype))


def test_max_pooling_ties_grad(rng):
    """Windows with equal maxima: the gradient goes to the first, as in
    eager (the argmax indexes are recomputed from x)."""
    calls = [(numpy.round(x),) for x, in make_calls(
        rng, [(2, 2, 6, 6)], numpy.float64, low=0, high=2)]
    testing.assert_jit_grads_match_eager(
        lambda x: F.max_pooling_2d(x, 3, stride=2, pad=1), calls,
        lowered=['MaxPoolingND'])
