"""ONNX export of the pooling ops, over the forward tests' cases."""

import chainer.functions as F
import numpy
import pytest

from chainerjit import onnx_export
from chainerjit import testing
from tests.ops_tests.common import make_calls
from tests.ops_tests.test_pooling import AVERAGE_CASES
from tests.ops_tests.test_pooling import MAX_CASES
from tests.ops_tests.test_pooling import UNPOOLING_BY_NDIM
from tests.ops_tests.test_pooling import upsampling


pytest.importorskip('onnxruntime')

DTYPES = [numpy.float32, numpy.float64]
# onnxruntime's CPU AveragePool takes float32 only.
AVERAGE_DTYPES = [numpy.float32]

MAX_ND_CASES = [((2, 3, 8), 2, {}),
                ((1, 2, 5, 4, 6), 3, {'stride': 2, 'pad': 1})]
AVERAGE_ND_CASES = [((2, 3, 8), 3, {'stride': 2, 'pad': 1}),
                    ((1, 2, 5, 4, 6), 3, {'stride': 2, 'pad': 1})]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', MAX_CASES)
def test_max_pooling_2d(rng, dtype, x_shape, ksize, options):
    testing.assert_onnx_matches_eager(
        lambda x: F.max_pooling_2d(x, ksize, **options),
        make_calls(rng, [x_shape], dtype), lowered=['MaxPoolingND'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', MAX_ND_CASES)
def test_max_pooling_nd(rng, dtype, x_shape, ksize, options):
    testing.assert_onnx_matches_eager(
        lambda x: F.max_pooling_nd(x, ksize, **options),
        make_calls(rng, [x_shape], dtype), lowered=['MaxPoolingND'])


@pytest.mark.parametrize('dtype', AVERAGE_DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', AVERAGE_CASES)
def test_average_pooling_2d(rng, dtype, x_shape, ksize, options):
    testing.assert_onnx_matches_eager(
        lambda x: F.average_pooling_2d(x, ksize, **options),
        make_calls(rng, [x_shape], dtype), lowered=['AveragePooling2D'])


@pytest.mark.parametrize('dtype', AVERAGE_DTYPES)
@pytest.mark.parametrize('pad_value', [0, None])
@pytest.mark.parametrize('x_shape,ksize,options', AVERAGE_ND_CASES)
def test_average_pooling_nd(rng, dtype, pad_value, x_shape, ksize,
                            options):
    testing.assert_onnx_matches_eager(
        lambda x: F.average_pooling_nd(x, ksize, pad_value=pad_value,
                                       **options),
        make_calls(rng, [x_shape], dtype), lowered=['AveragePoolingND'])


def test_max_pooling_window_of_padding_only(rng):
    # cover_all adds a last window that starts in the padding: Chainer
    # gives -inf there, onnxruntime's ceil_mode drops the window.
    x, = make_calls(rng, [(1, 1, 4, 4)], numpy.float32, n=1)[0]
    with pytest.raises(onnx_export.ExportError, match='MaxPoolingND'):
        onnx_export.export_onnx(
            lambda x: F.max_pooling_2d(x, 2, stride=3, pad=1), (x,))


# Unpoolings whose windows tile the output (the cases with an ONNX form).
UNPOOLING_TILES_CASES = [
    ((2, 3, 5), 2, {'cover_all': False}),
    ((2, 3, 4, 5), (2, 3), {'cover_all': False}),
    ((1, 2, 3, 4, 2), (2, 1, 3), {'cover_all': False}),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', UNPOOLING_TILES_CASES)
def test_unpooling_nd(rng, dtype, x_shape, ksize, options):
    unpooling = UNPOOLING_BY_NDIM[len(x_shape) - 2]
    testing.assert_onnx_matches_eager(
        lambda x: unpooling(x, ksize, **options),
        make_calls(rng, [x_shape], dtype), lowered=['UnpoolingND'])


@pytest.mark.parametrize('dtype', DTYPES)
def test_unpooling_2d(rng, dtype):
    testing.assert_onnx_matches_eager(
        lambda x: F.unpooling_2d(x, (2, 3), cover_all=False),
        make_calls(rng, [(2, 3, 4, 5)], dtype), lowered=['Unpooling2D'])


@pytest.mark.parametrize('unpooling,op', [(F.unpooling_2d, 'Unpooling2D'),
                                          (F.unpooling_nd, 'UnpoolingND')])
def test_unpooling_of_overlapping_windows_has_no_converter(rng, unpooling,
                                                           op):
    x, = make_calls(rng, [(1, 2, 3, 3)], numpy.float32, n=1)[0]
    with pytest.raises(onnx_export.ExportError, match=op):
        onnx_export.export_onnx(
            lambda x: unpooling(x, 3, stride=2, cover_all=False), (x,))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,options', [
    ((2, 3, 3, 4), 2, {'outsize': (6, 8)}),
    ((2, 2, 3, 3), (2, 3), {'cover_all': False})])
def test_upsampling_2d(rng, dtype, x_shape, ksize, options):
    testing.assert_onnx_matches_eager(
        upsampling(x_shape, ksize, options),
        make_calls(rng, [x_shape], dtype), lowered=['Upsampling2D'])


@pytest.mark.parametrize('options,dynamic_batch', [
    ({'cover_all': False, 'stride': 1}, False),
    ({'cover_all': False}, True)])
def test_upsampling_2d_without_onnx_form(rng, options, dynamic_batch):
    # Overlapping windows have no ONNX form; the indexes are for one
    # batch size.
    fn = upsampling((2, 2, 3, 3), 2, options)
    x, = make_calls(rng, [(2, 2, 3, 3)], numpy.float32, n=1)[0]
    with pytest.raises(onnx_export.ExportError, match='Upsampling2D'):
        onnx_export.export_onnx(fn, (x,), dynamic_batch=dynamic_batch)
