"""Kernels that compute Chainer's sums another, faster way still give
Chainer's results bit for bit (so that long training runs do not drift
apart from eager ones)."""

import chainer.functions as F
import numpy
import pytest

from chainerjit import testing


CONVOLUTIONS = [
    ((4, 3, 9, 9), (5, 3, 3, 3), dict(pad=1)),
    ((2, 6, 14, 14), (16, 6, 5, 5), dict(pad=2)),
    ((2, 2, 8, 8), (3, 2, 3, 3), dict(stride=2, dilate=2)),
    ((3, 1, 7, 5), (2, 1, 2, 3), dict(stride=(2, 1), pad=(0, 1))),
]


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('x_shape, w_shape, options', CONVOLUTIONS)
def test_convolution_is_bit_exact(rng, x_shape, w_shape, options, dtype):
    def f(x, W, b):
        return F.convolution_2d(x, W, b, **options)

    calls = [(rng.randn(*x_shape).astype(dtype),
              rng.randn(*w_shape).astype(dtype),
              rng.randn(w_shape[0]).astype(dtype)) for _ in range(3)]
    # Recorded for training: Chainer's sums, bit for bit.
    testing.assert_jit_matches_eager(f, calls, rtol=0, atol=0,
                                     no_backprop=False)
    testing.assert_jit_grads_match_eager(f, calls, rtol=0, atol=0)
    # For inference: a faster product, equal within rounding.
    testing.assert_jit_matches_eager(f, calls, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('shape,ksize', [
    ((2, 3, 8, 8), 2), ((1, 2, 4, 6), 2), ((2, 2, 6, 9), 3),
    ((2, 1, 4, 6), (2, 3))])
@pytest.mark.parametrize('ties', [False, True])
def test_tiling_max_pooling_is_bit_exact(rng, shape, ksize, ties):
    # Its forward and gradient skip im2col and col2im.
    def f(x):
        return F.max_pooling_2d(x, ksize)

    calls = [(rng.randn(*shape).astype(numpy.float32),) for _ in range(3)]
    if ties:  # windows with several maxima: the first one gets the grad
        calls = [(numpy.round(x * 0.6),) for x, in calls]
    testing.assert_jit_matches_eager(f, calls, rtol=0, atol=0,
                                     lowered=['MaxPoolingND'])
    testing.assert_jit_grads_match_eager(f, calls, rtol=0, atol=0)


def test_fixed_batch_normalization_is_bit_exact_when_recorded_for_training(
        rng):
    def f(x, gamma, beta, mean, var):
        return F.fixed_batch_normalization(x, gamma, beta, mean, var)

    calls = [(rng.randn(4, 3, 5, 5).astype(numpy.float32),
              rng.randn(3).astype(numpy.float32),
              rng.randn(3).astype(numpy.float32),
              rng.randn(3).astype(numpy.float32),
              rng.uniform(0.5, 2, 3).astype(numpy.float32))
             for _ in range(3)]
    testing.assert_jit_matches_eager(f, calls, rtol=0, atol=0,
                                     no_backprop=False)
    # For inference: a scale and a shift per channel, equal within rounding.
    testing.assert_jit_matches_eager(f, calls, rtol=1e-5, atol=1e-5)
