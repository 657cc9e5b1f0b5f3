"""ONNX export of the connection ops, over the forward tests' cases."""

import chainer
import chainer.functions as F
import numpy
import pytest

from chainerjit import testing
from tests.ops_tests.common import make_calls
from tests.ops_tests.test_connection import CONV_CASES
from tests.ops_tests.test_connection import DECONV_CASES
from tests.ops_tests.test_connection import SHIFT_CASES
from tests.ops_tests.test_connection import _embed_calls


pytest.importorskip('onnxruntime')

DTYPES = [numpy.float32, numpy.float64]
# onnxruntime's CPU Conv and ConvTranspose take float32 only.
CONV_DTYPES = [numpy.float32]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('shapes', [[(3, 4), (5, 4)], [(0, 4), (5, 4)]])
def test_linear(rng, dtype, bias, shapes):
    shapes = shapes + ([(5,)] if bias else [])
    testing.assert_onnx_matches_eager(
        lambda *args: F.linear(*args), make_calls(rng, shapes, dtype),
        lowered=['LinearFunction'])


def test_linear_n_batch_axes(rng):
    testing.assert_onnx_matches_eager(
        lambda x, W, b: F.linear(
            chainer.as_variable(x), W, b, n_batch_axes=2),
        make_calls(rng, [(2, 3, 4), (5, 4), (5,)], numpy.float32),
        lowered=['LinearFunction'])


@pytest.mark.parametrize('dtype', CONV_DTYPES)
@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('x_shape,w_shape,options', CONV_CASES)
def test_convolution_2d(rng, dtype, bias, x_shape, w_shape, options):
    shapes = [x_shape, w_shape] + ([(w_shape[0],)] if bias else [])
    testing.assert_onnx_matches_eager(
        lambda *args: F.convolution_2d(*args, **options),
        make_calls(rng, shapes, dtype), rtol=1e-4, atol=1e-5,
        lowered=['Convolution2DFunction'])


@pytest.mark.parametrize('dtype', CONV_DTYPES)
@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('x_shape,w_shape,options', DECONV_CASES)
def test_deconvolution_2d(rng, dtype, bias, x_shape, w_shape, options):
    out_channels = w_shape[1] * options.get('groups', 1)
    shapes = [x_shape, w_shape] + ([(out_channels,)] if bias else [])
    testing.assert_onnx_matches_eager(
        lambda *args: F.deconvolution_2d(*args, **options),
        make_calls(rng, shapes, dtype), rtol=1e-4, atol=1e-5,
        lowered=['Deconvolution2DFunction'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('ignore_label', [None, -1])
@pytest.mark.parametrize('ids_shape', [(5,), (2, 4), (0,)])
def test_embed_id(rng, dtype, ignore_label, ids_shape):
    testing.assert_onnx_matches_eager(
        lambda x, W: F.embed_id(x, W, ignore_label=ignore_label),
        _embed_calls(rng, ids_shape, 6, dtype, ignore_label),
        lowered=['EmbedIDFunction'])


def test_connections_with_a_dynamic_batch(rng):
    W = rng.standard_normal((6, 3)).astype(numpy.float32)
    Wd = rng.standard_normal((2, 3, 3, 3)).astype(numpy.float32)

    def f(x, ids):
        return (F.deconvolution_2d(x, Wd, stride=2, outsize=(8, 10)),
                F.embed_id(ids, W, ignore_label=-1))
    calls = [(rng.standard_normal((n, 2, 3, 4)).astype(numpy.float32),
              rng.randint(-1, 6, size=(n, 4)).astype(numpy.int32))
             for n in (2, 1, 3)]
    testing.assert_onnx_matches_eager(f, calls, rtol=1e-4, atol=1e-5,
                                      dynamic_batch=True)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,dilate',
                         [case for case in SHIFT_CASES if case[0][0]])
def test_shift(rng, dtype, x_shape, ksize, dilate):
    testing.assert_onnx_matches_eager(
        lambda x: F.shift(x, ksize, dilate),
        make_calls(rng, [x_shape], dtype), rtol=0, atol=0,
        lowered=['Shift'])


def test_shift_with_a_dynamic_batch(rng):
    calls = [make_calls(rng, [(n, 9, 4, 5)], numpy.float32, n=1)[0]
             for n in (2, 1, 3)]
    testing.assert_onnx_matches_eager(
        lambda x: F.shift(x, 3, 2), calls, lowered=['Shift'],
        dynamic_batch=True)
