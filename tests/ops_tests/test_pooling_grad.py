"""Gradients of the lowered pooling ops against eager Chainer's, over the
cases of the forward tests in test_pooling.py."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.ops_tests import test_pooling as forward
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import make_calls
from tests.ops_tests.common import cases_of
from tests.ops_tests.test_connection_grad import tolerances
from tests.ops_tests.test_normalization_training import _batches
from tests.ops_tests.test_normalization_training import _Net
from tests.ops_tests.test_normalization_training import _train_twins
from tests.ops_tests.test_normalization_training import F16
from tests.ops_tests.test_normalization_training import F32
from tests.ops_tests.test_normalization_training import F64


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
    from chainerjit.ops import _loops_pooling
    used = []
    loop = _loops_pooling.max_pool_tiles_grad
    monkeypatch.setattr(_loops_pooling, 'max_pool_tiles_grad',
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


# --- adversarial: max pooling over tiling windows ---------------------------

def _pool(k):
    def f(x):
        return F.max_pooling_2d(x, k, stride=k)
    return f


def _int_calls(seed, shape, n=3, dtype=F32, high=3):
    rng = numpy.random.RandomState(seed)
    return [(rng.randint(-high, high + 1, shape).astype(dtype),)
            for _ in range(n)]


@pytest.mark.adversarial
@pytest.mark.parametrize('k', [(1, 2), (2, 1), 2, 3, (2, 3)])
@pytest.mark.parametrize('dtype', [F32, F64])
def test_max_pool_tiles_ties(k, dtype):
    kh, kw = (k, k) if isinstance(k, int) else k
    testing.assert_jit_grads_match_eager(
        _pool(k), _int_calls(18, (2, 3, 6 * kh // 2 * 2, 6 * kw),
                             dtype=dtype, high=1), 0, 0,
        lowered=('MaxPoolingND',))


def _special(seed, shape, values):
    rng = numpy.random.RandomState(seed)
    out = []
    for _ in range(3):
        x = rng.randint(-2, 3, shape).astype(F32)
        mask = rng.randint(0, 4, shape) == 0
        x[mask] = rng.choice(values, mask.sum())
        out.append((x,))
    return out


@pytest.mark.adversarial
@pytest.mark.parametrize('values', [
    [numpy.nan], [numpy.inf], [-numpy.inf], [-numpy.inf, numpy.nan],
    [numpy.nan, numpy.inf, -numpy.inf, -0.0, 0.0], [-0.0, 0.0]],
    ids=['nan', 'inf', '-inf', '-inf,nan', 'all', 'zeros'])
@pytest.mark.parametrize('k', [2, (1, 2), 3])
def test_max_pool_tiles_special_values(values, k):
    kh, kw = (k, k) if isinstance(k, int) else k
    testing.assert_jit_grads_match_eager(
        _pool(k), _special(19, (2, 2, 3 * kh, 4 * kw), values), 0, 0)


@pytest.mark.adversarial
def test_max_pool_tiles_all_minus_inf_window():
    x = numpy.full((1, 1, 4, 4), -numpy.inf, F32)
    x[0, 0, 0, 0] = 1
    calls = [(x,), (x.copy(),), (x * 1,)]
    testing.assert_jit_grads_match_eager(_pool(2), calls, 0, 0)


@pytest.mark.adversarial
def test_max_pool_tiles_signed_zero_forward_bits():
    x = numpy.array([[[[-0.0, 0.0], [0.0, -0.0]]]], F32)
    jfn = chainerjit.jit(_pool(2))
    with chainer.no_backprop_mode():
        for _ in range(3):
            e, a = _pool(2)(x).array, jfn(x).array
            numpy.testing.assert_array_equal(numpy.signbit(a),
                                             numpy.signbit(e))


@pytest.mark.adversarial
def test_max_pool_tiles_float16_falls_back_to_argmax():
    testing.assert_jit_grads_match_eager(
        _pool(2), _int_calls(20, (2, 2, 4, 6), dtype=F16), 0, 0)


@pytest.mark.adversarial
@pytest.mark.parametrize('perm', [(0, 1, 3, 2), (1, 0, 2, 3),
                                  (0, 3, 1, 2)])
def test_max_pool_tiles_non_contiguous_input(perm):
    def f(x):
        return F.max_pooling_2d(F.transpose(x, perm), 2) * 3
    testing.assert_jit_grads_match_eager(f, _int_calls(21, (2, 4, 4, 6)),
                                         0, 0)


@pytest.mark.adversarial
def test_max_pool_tiles_strided_slice_input_and_gy():
    def f(x):
        y = F.max_pooling_2d(x[:, :, ::2], 2)
        return y[:, ::2]
    testing.assert_jit_grads_match_eager(f, _int_calls(22, (2, 4, 8, 6)),
                                         0, 0)


@pytest.mark.bit_exact
@pytest.mark.adversarial
def test_max_pool_after_conv_relu_trains_exactly():
    numpy.random.seed(2)
    net = _Net(lambda m, x: F.max_pooling_2d(F.relu(m.c(x)), (2, 3)),
               c=L.Convolution2D(2, 4, 3, pad=1))
    _train_twins(net, _batches(23, (2, 2, 6, 9)), rtol=0, atol=0)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', forward.UNPOOLING_CASES)
def test_unpooling_2d_grad(rng, dtype, x_shape, ksize, options):
    testing.assert_jit_grads_match_eager(
        lambda x: F.unpooling_2d(x, ksize, **options),
        make_calls(rng, [x_shape], dtype),
        lowered=['Unpooling2D'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', forward.UNPOOLING_ND_CASES)
def test_unpooling_nd_grad(rng, dtype, x_shape, ksize, options):
    unpooling = forward.UNPOOLING_BY_NDIM[len(x_shape) - 2]
    testing.assert_jit_grads_match_eager(
        lambda x: unpooling(x, ksize, **options),
        make_calls(rng, [x_shape], dtype),
        lowered=['UnpoolingND'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', forward.UPSAMPLING_CASES)
def test_upsampling_2d_grad(rng, dtype, x_shape, ksize, options):
    testing.assert_jit_grads_match_eager(
        forward.upsampling(x_shape, ksize, options),
        make_calls(rng, [x_shape], dtype), rtol=0, atol=0,
        lowered=['Upsampling2D'])
