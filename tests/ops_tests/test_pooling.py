import chainer.functions as F
import numpy
import pytest

from chainerjit import testing
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import make_calls


MAX_CASES = [
    # x shape, ksize, options
    ((2, 3, 6, 6), 2, {}),
    ((1, 2, 7, 5), 3, {'stride': 2, 'pad': 1}),
    ((2, 2, 7, 7), (3, 2), {'stride': (2, 3), 'cover_all': False}),
    ((1, 3, 5, 6), 3, {'stride': 2, 'cover_all': True}),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', MAX_CASES)
def test_max_pooling_2d(rng, dtype, x_shape, ksize, options):
    testing.assert_jit_matches_eager(
        lambda x: F.max_pooling_2d(x, ksize, **options),
        make_calls(rng, [x_shape], dtype),
        expect_entries=1, lowered=['MaxPoolingND'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', [
    ((2, 3, 8), 2, {}), ((1, 2, 5, 4, 6), 3, {'stride': 2, 'pad': 1})])
def test_max_pooling_nd(rng, dtype, x_shape, ksize, options):
    testing.assert_jit_matches_eager(
        lambda x: F.max_pooling_nd(x, ksize, **options),
        make_calls(rng, [x_shape], dtype),
        expect_entries=1, lowered=['MaxPoolingND'])


AVERAGE_CASES = [
    ((2, 3, 6, 6), 2, {}),
    ((1, 2, 7, 5), 3, {'stride': 2, 'pad': 1}),
    ((2, 2, 7, 7), (3, 2), {'stride': (2, 3), 'pad': (1, 0)}),
    ((0, 2, 4, 4), 2, {}),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', AVERAGE_CASES)
def test_average_pooling_2d(rng, dtype, x_shape, ksize, options):
    testing.assert_jit_matches_eager(
        lambda x: F.average_pooling_2d(x, ksize, **options),
        make_calls(rng, [x_shape], dtype),
        expect_entries=1, lowered=['AveragePooling2D'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('pad_value', [0, None])
@pytest.mark.parametrize('x_shape,ksize,options', [
    ((2, 3, 8), 3, {'stride': 2, 'pad': 1}),
    ((1, 2, 5, 4, 6), 3, {'stride': 2, 'pad': 1})])
def test_average_pooling_nd(rng, dtype, pad_value, x_shape, ksize, options):
    testing.assert_jit_matches_eager(
        lambda x: F.average_pooling_nd(x, ksize, pad_value=pad_value,
                                       **options),
        make_calls(rng, [x_shape], dtype),
        expect_entries=1, lowered=['AveragePoolingND'])


UNPOOLING_CASES = [
    # x shape, ksize, options: windows that tile the output (with an ONNX
    # form), cover_all's sizes, strides unlike the window, padding, and
    # an output size given
    ((2, 3, 4, 5), 2, {'cover_all': False}),
    ((2, 3, 4, 5), (2, 3), {'cover_all': False}),
    ((2, 3, 4, 4), 2, {}),
    ((2, 2, 3, 3), 3, {'stride': 2, 'cover_all': False}),
    ((1, 2, 4, 4), 2, {'pad': 2, 'cover_all': False}),
    ((2, 2, 3, 4), 2, {'outsize': (6, 8), 'cover_all': False}),
    ((0, 2, 3, 3), 2, {'cover_all': False}),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', UNPOOLING_CASES)
def test_unpooling_2d(rng, dtype, x_shape, ksize, options):
    testing.assert_jit_matches_eager(
        lambda x: F.unpooling_2d(x, ksize, **options),
        make_calls(rng, [x_shape], dtype),
        expect_entries=1, lowered=['Unpooling2D'])


UNPOOLING_ND_CASES = [
    # x shape, ksize, options: 1-, 2- and 3-d; windows that tile the
    # output (with an ONNX form), cover_all's sizes, strides unlike the
    # window, padding, an output size given, an empty batch
    ((2, 3, 5), 2, {'cover_all': False}),
    ((2, 3, 4), 3, {}),
    ((1, 2, 5), 3, {'stride': 2, 'pad': 1, 'cover_all': False}),
    ((2, 3, 4, 5), (2, 3), {'cover_all': False}),
    ((2, 2, 3, 3), 3, {'stride': 2, 'cover_all': False}),
    ((2, 2, 3, 4, 2), 2, {'cover_all': False}),
    ((1, 2, 3, 3, 4), (2, 3, 2), {'stride': (1, 2, 3), 'pad': (1, 0, 1)}),
    ((2, 2, 3, 4), 2, {'outsize': (6, 8), 'cover_all': False}),
    ((0, 2, 3, 3, 3), 2, {'cover_all': False}),
]

UNPOOLING_BY_NDIM = {1: F.unpooling_1d, 2: F.unpooling_nd, 3: F.unpooling_3d}


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', UNPOOLING_ND_CASES)
def test_unpooling_nd(rng, dtype, x_shape, ksize, options):
    unpooling = UNPOOLING_BY_NDIM[len(x_shape) - 2]
    testing.assert_jit_matches_eager(
        lambda x: unpooling(x, ksize, **options),
        make_calls(rng, [x_shape], dtype),
        expect_entries=1, lowered=['UnpoolingND'])


UPSAMPLING_CASES = [
    # x shape, ksize, options: windows that tile the output (with an ONNX
    # form), cover_all's sizes, overlapping windows, padding, an empty
    # batch
    ((2, 3, 3, 4), 2, {'outsize': (6, 8)}),
    ((2, 2, 3, 3), (2, 3), {'cover_all': False}),
    ((2, 3, 3, 4), 2, {}),
    ((1, 2, 4, 4), 3, {'stride': 2, 'pad': 1, 'cover_all': False}),
    ((0, 2, 3, 3), 2, {'cover_all': False}),
]


def upsampling(x_shape, ksize, options):
    """``F.upsampling_2d`` with fixed random indexes (as a max pooling
    with ``return_indices`` gives them) for inputs of ``x_shape``."""
    kh, kw = (ksize, ksize) if isinstance(ksize, int) else ksize
    indexes = numpy.random.RandomState(0).randint(0, kh * kw, x_shape)
    return lambda x: F.upsampling_2d(x, indexes, ksize, **options)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', UPSAMPLING_CASES)
def test_upsampling_2d(rng, dtype, x_shape, ksize, options):
    testing.assert_jit_matches_eager(
        upsampling(x_shape, ksize, options),
        make_calls(rng, [x_shape], dtype), rtol=0, atol=0,
        expect_entries=1, lowered=['Upsampling2D'])
