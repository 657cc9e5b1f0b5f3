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


@pytest.mark.parametrize('dtype', [numpy.float16, numpy.float32,
                                   numpy.float64])
@pytest.mark.parametrize('ksize,cover_all', [(2, True), (2, False),
                                             (3, True), ((1, 2), False)])
def test_max_pooling_over_tiles_in_one_loop_is_exact(monkeypatch, rng, dtype,
                                                     ksize, cover_all):
    """Windows tiling the image (LeNet's 2x2 with stride 2): the gradient
    in one C loop, bit for bit eager's, with ties (to the first maximum),
    signed zeros, infinities and NaN (to the first NaN, as argmax);
    float16 takes the im2col path. Rows of nine 2x2 windows: float32's
    SIMD loop takes four windows at a time and the ninth alone."""
    from chainerjit.ops import _elementwise
    used = []
    loop = _elementwise.max_pool_tiles_grad
    monkeypatch.setattr(_elementwise, 'max_pool_tiles_grad',
                        lambda *a: used.append(loop(*a)) or used[-1])
    calls = []
    for x, in make_calls(rng, [(2, 3, 6, 18)], dtype, low=-2, high=2):
        x = numpy.round(x)  # many ties
        flat = x.reshape(-1)
        flat[:8] = [numpy.nan, 1, -0.0, 0.0, numpy.inf, -numpy.inf, 0.0,
                    -0.0]
        flat[18:22] = [numpy.nan, 5, -numpy.inf, numpy.nan]  # rows below
        flat[40] = numpy.nan
        flat[53] = numpy.nan  # the ninth window of a row
        calls.append((x,))
    testing.assert_jit_grads_match_eager(
        lambda x: F.max_pooling_2d(x, ksize, cover_all=cover_all), calls,
        lowered=['MaxPoolingND'], rtol=0, atol=0)
    if testing.device_under_test() is None:  # a CPU loop
        assert used and all(used) == (dtype != numpy.float16)
