"""F.lstm: lowered forward, gradients through its own backward, ONNX."""

import chainer
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


def _product_then_lstm(c, x, W):
    """The gates as an LSTM link makes them: a product (F-ordered when
    the weight goes first, up to 64 rows), then the cell."""
    return F.lstm(c, F.linear(x, W))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('batch', [16, 100])
def test_lstm_at_link_sizes_is_bit_for_bit(rng, dtype, batch):
    """16 x 128 units (the benchmark's) and 100 rows (a C-ordered
    product): the gates copied out and halved in one C loop, one tanh,
    the sigmoid finished in another loop; values and gradients equal
    eager's bit for bit."""
    calls = [(rng.randn(batch, 128).astype(dtype),
              rng.randn(batch, 64).astype(dtype),
              (rng.randn(512, 64) * 0.3).astype(dtype)) for _ in range(3)]
    testing.assert_jit_matches_eager(_product_then_lstm, calls, rtol=0,
                                     atol=0, lowered=['LSTM'])
    testing.assert_jit_grads_match_eager(_product_then_lstm, calls, rtol=0,
                                         atol=0, lowered=['LSTM'])


@pytest.mark.parametrize('dtype', DTYPES)
def test_lstm_grads_are_bit_for_bit(rng, dtype):
    for c_shape, x_shape in SHAPES:
        testing.assert_jit_grads_match_eager(
            lambda c, x: F.lstm(c, x),
            _calls(rng, c_shape, x_shape, dtype), rtol=0, atol=0)


def test_the_gpu_lowering_runs_chainers_own_lstm_kernels():
    """The GPU lowering calls Chainer's LSTM and LSTMGrad forwards; on
    NumPy arrays they must give eager's step and gradients too."""
    from chainerjit.ops import rnn
    rng = numpy.random.RandomState(0)
    c_prev = rng.randn(3, 4).astype(numpy.float32)
    x = rng.randn(3, 16).astype(numpy.float32)
    gc, gh = (rng.randn(3, 4).astype(numpy.float32) for _ in range(2))
    c, h = rnn._chainer_lstm_step(c_prev, x)
    vc, vx = chainer.Variable(c_prev), chainer.Variable(x)
    ec, eh = F.lstm(vc, vx)
    numpy.testing.assert_array_equal(c, ec.array)
    numpy.testing.assert_array_equal(h, eh.array)
    chainer.backward([ec, eh], [chainer.Variable(gc), chainer.Variable(gh)])
    gc_prev, gx = rnn._chainer_lstm_grad((c_prev, x), (c, h), (gc, gh),
                                         (True, True))
    numpy.testing.assert_allclose(gc_prev, vc.grad, rtol=1e-6)
    numpy.testing.assert_allclose(gx, vx.grad, rtol=1e-6)
