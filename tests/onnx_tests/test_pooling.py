"""ONNX export of the pooling ops, over the forward tests' cases."""

import chainer.functions as F
import numpy
import pytest

from chainerjit import onnx_export
from chainerjit import testing
from tests.ops_tests.common import make_calls
from tests.ops_tests.test_pooling import AVERAGE_CASES
from tests.ops_tests.test_pooling import MAX_CASES


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
