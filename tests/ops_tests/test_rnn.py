"""F.lstm: lowered forward, gradients through its own backward, ONNX."""

import chainer.functions as F
import numpy
import pytest

from chainerjit import testing
from tests.ops_tests.common import DTYPES


def _calls(rng, c_shape, x_shape, dtype, n=3):
    return [(rng.randn(*c_shape).astype(dtype),
             rng.randn(*x_shape).astype(dtype)) for _ in range(n)]


SHAPES = [((3, 4), (3, 16)), ((2, 3, 5), (2, 12, 5)), ((4, 2), (2, 8))]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('c_shape, x_shape', SHAPES)
def test_lstm(rng, c_shape, x_shape, dtype):
    testing.assert_jit_matches_eager(
        lambda c, x: F.lstm(c, x), _calls(rng, c_shape, x_shape, dtype),
        rtol=0, atol=0, lowered=['LSTM'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('c_shape, x_shape', SHAPES)
def test_lstm_grad(rng, c_shape, x_shape, dtype):
    testing.assert_jit_grads_match_eager(
        lambda c, x: F.lstm(c, x), _calls(rng, c_shape, x_shape, dtype))


@pytest.mark.parametrize('c_shape, x_shape', SHAPES[:2])
def test_lstm_onnx(rng, c_shape, x_shape):
    pytest.importorskip('onnxruntime')
    testing.assert_onnx_matches_eager(
        lambda c, x: F.lstm(c, x),
        _calls(rng, c_shape, x_shape, numpy.float32), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('output', [0, 1])
@pytest.mark.parametrize('c_shape, x_shape', SHAPES)
def test_lstm_grad_through_one_output(rng, c_shape, x_shape, output):
    """Only c or only h reaches the loss: the other output's gradient is
    missing (``None``) in the rule."""
    testing.assert_jit_grads_match_eager(
        lambda c, x: F.lstm(c, x)[output] * 2,
        _calls(rng, c_shape, x_shape, numpy.float32))
