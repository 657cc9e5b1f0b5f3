"""Gradients of the lowered connection ops against eager Chainer's, over
the cases of the forward tests in test_connection.py."""

import warnings

import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from tests.ops_tests import test_connection as forward
from tests.ops_tests.common import cases_of
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import calls_of
from tests.ops_tests.common import make_calls
from tests.ops_tests.test_normalization_training import _batches
from tests.ops_tests.test_normalization_training import _calls
from tests.ops_tests.test_normalization_training import _Net
from tests.ops_tests.test_normalization_training import _train_twins
from tests.ops_tests.test_normalization_training import F32
from tests.ops_tests.test_normalization_training import F64


def tolerances(dtype):
    """rtol and atol for a dtype (float32 sums in another order)."""
    if dtype == numpy.float64:
        return {'rtol': 1e-5, 'atol': 1e-6}
    if dtype == numpy.float32:
        return {'rtol': 1e-4, 'atol': 1e-5}
    return {'rtol': 1e-2, 'atol': 1e-3}


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('bias', [True, False])
def test_linear_grad(rng, dtype, bias):
    shape_sets = [[(3, 4), (5, 4), (5,)], [(0, 4), (5, 4), (5,)]]
    if not bias:
        shape_sets = [s[:2] for s in shape_sets]
    testing.assert_jit_grads_match_eager(
        lambda *args: F.linear(*args), calls_of(rng, shape_sets, dtype),
        lowered=['LinearFunction'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
def test_linear_n_batch_axes_grad(rng, dtype):
    testing.assert_jit_grads_match_eager(
        lambda x, W, b: F.linear(x, W, b, n_batch_axes=2),
        make_calls(rng, [(2, 3, 4), (5, 4), (5,)], dtype),
        lowered=['LinearFunction'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('x_shape,w_shape,options', forward.CONV_CASES)
def test_convolution_2d_grad(rng, dtype, bias, x_shape, w_shape, options):
    shapes = [x_shape, w_shape] + ([(w_shape[0],)] if bias else [])
    testing.assert_jit_grads_match_eager(
        lambda *args: F.convolution_2d(*args, **options),
        make_calls(rng, shapes, dtype),
        lowered=['Convolution2DFunction'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('x_shape,w_shape,options', forward.CONV_ND_CASES)
def test_convolution_nd_grad(rng, dtype, bias, x_shape, w_shape, options):
    shapes = [x_shape, w_shape] + ([(w_shape[0],)] if bias else [])
    testing.assert_jit_grads_match_eager(
        lambda *args: F.convolution_nd(*args, **options),
        make_calls(rng, shapes, dtype),
        lowered=['ConvolutionND'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('x_shape,w_shape,options', forward.DECONV_CASES)
def test_deconvolution_2d_grad(rng, dtype, bias, x_shape, w_shape,
                               options):
    out_channels = w_shape[1] * options.get('groups', 1)
    shapes = [x_shape, w_shape] + ([(out_channels,)] if bias else [])
    testing.assert_jit_grads_match_eager(
        lambda *args: F.deconvolution_2d(*args, **options),
        make_calls(rng, shapes, dtype),
        lowered=['Deconvolution2DFunction'], **tolerances(dtype))


def _embed_ids_cases():
    for ids_shape in cases_of(forward.test_embed_id, 'ids_shape'):
        if 0 in ids_shape:
            # Eager EmbedIDGrad cannot reshape an empty gy (it raises).
            yield pytest.param(ids_shape, marks=pytest.mark.skip(
                reason='eager backward raises with no ids'))
        else:
            yield ids_shape


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('ignore_label',
                         cases_of(forward.test_embed_id, 'ignore_label'))
@pytest.mark.parametrize('ids_shape', list(_embed_ids_cases()))
def test_embed_id_grad(rng, dtype, ignore_label, ids_shape):
    testing.assert_jit_grads_match_eager(
        lambda x, W: F.embed_id(x, W, ignore_label=ignore_label),
        forward._embed_calls(rng, ids_shape, 6, dtype, ignore_label),
        lowered=['EmbedIDFunction'], **tolerances(dtype))


def test_links_grad(rng):
    model = forward._ConvNet()
    calls = [(x, rng.randint(0, 6, size=(2, 8, 4)).astype(numpy.int32))
             for x, in make_calls(rng, [(2, 3, 4, 4)], numpy.float32)]
    testing.assert_jit_grads_match_eager(
        model.forward, calls,
        lowered=['Convolution2DFunction', 'Deconvolution2DFunction',
                 'EmbedIDFunction', 'LinearFunction'],
        **tolerances(numpy.float32))


def test_links_param_grads(rng):
    """Parameter gradients of a jitted model equal an eager twin's."""
    calls = [(x, rng.randint(0, 6, size=(2, 8, 4)).astype(numpy.int32))
             for x, in make_calls(rng, [(2, 3, 4, 4)], numpy.float32)]
    eager, jitted = forward._ConvNet(), forward._ConvNet()
    eager(*calls[0])  # initializes fc
    jitted(*calls[0])
    jitted.copyparams(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        for i, args in enumerate(calls):
            for model in (eager, jitted):
                model.cleargrads()
                y = model(*args)
                y.grad = numpy.random.RandomState(i).standard_normal(
                    y.shape).astype(y.dtype)
                y.backward()
            for (name, pe), (_, pj) in zip(sorted(eager.namedparams()),
                                           sorted(jitted.namedparams())):
                assert pj.grad is not None, name
                testing.assert_results_equal(
                    pj.grad, pe.grad, **tolerances(numpy.float32))
    entries = jitted.forward.cache_entries()
    assert entries and all(e.training is not None for e in entries)
    assert jitted.forward.cache_info().hits > 0


# --- adversarial: the convolution training path -----------------------------

CONV_CASES = [
    # x shape, W shape, kwargs
    ((2, 3, 7, 6), (4, 3, 3, 2), dict(stride=2, pad=1)),
    ((1, 2, 5, 5), (3, 2, 2, 2), dict(stride=(1, 3), pad=(3, 4))),
    ((2, 2, 4, 9), (2, 2, 3, 3), dict(dilate=(2, 1), pad=2)),
    ((2, 4, 6, 6), (6, 2, 3, 3), dict(groups=2, pad=1, stride=2)),
    ((2, 3, 7, 7), (2, 3, 3, 3), dict(stride=2, cover_all=True)),
    ((1, 1, 3, 8), (2, 1, 1, 5), dict(pad=(0, 6), stride=(1, 2))),
    ((3, 2, 5, 4), (5, 2, 5, 4), dict()),
    ((2, 3, 6, 6), (4, 3, 2, 2), dict(stride=3, dilate=2, pad=1)),
    # one pixel wide, a kernel one wide: gathered as rows one pixel high
    ((3, 5, 9, 1), (4, 5, 3, 1), dict(pad=(1, 0))),
    ((2, 3, 11, 1), (2, 3, 2, 1), dict(stride=(2, 3), dilate=(3, 2))),
    ((2, 2, 6, 1), (3, 2, 4, 1), dict(pad=(4, 0), stride=2)),
]


@pytest.mark.adversarial
@pytest.mark.parametrize('dtype', [F32, F64])
@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('x_shape,w_shape,kwargs', CONV_CASES)
def test_convolution_grads_bit_for_bit(x_shape, w_shape, kwargs, bias,
                                       dtype):
    def f(x, W, b=None):
        return F.convolution_2d(x, W, b, **kwargs)
    shapes = [x_shape, w_shape] + ([(w_shape[0],)] if bias else [])
    # Exact: the training forward, the gradients (tensordot / col2im)
    # follow Chainer's algorithms, batch 1 included.
    testing.assert_jit_grads_match_eager(
        f, _calls(12, shapes, dtype=dtype), 0, 0,
        lowered=('Convolution2DFunction',))


@pytest.mark.adversarial
@pytest.mark.parametrize('dtype', [F32, F64])
def test_convolution_filter_grad_batch_1_bit_for_bit(dtype):
    """Eager's tensordot reshapes one image's patches F-ordered without a
    copy; the compiled gradient must sum in that order too."""
    def f(x, W):
        return F.convolution_2d(x, W, pad=1)
    testing.assert_jit_grads_match_eager(
        f, _calls(0, [(1, 8, 12, 12), (16, 8, 3, 3)], dtype=dtype), 0, 0)


DECONV_CASES = [
    ((2, 3, 4, 5), (3, 2, 3, 3), dict(stride=2, pad=1)),
    ((1, 2, 3, 3), (2, 4, 2, 3), dict(stride=(3, 1), pad=(0, 2))),
    ((2, 4, 3, 4), (4, 1, 3, 3), dict(groups=2, stride=2)),
    ((2, 2, 3, 3), (2, 3, 3, 3), dict(stride=2, outsize=(8, 8))),
    ((1, 2, 4, 4), (2, 2, 2, 2), dict(dilate=2, pad=1)),
]


@pytest.mark.adversarial
@pytest.mark.parametrize('dtype', [F32, F64])
@pytest.mark.parametrize('x_shape,w_shape,kwargs', DECONV_CASES)
def test_deconvolution_grads_bit_for_bit(x_shape, w_shape, kwargs, dtype):
    def f(x, W, b):
        return F.deconvolution_2d(x, W, b, **kwargs)
    c_out = w_shape[1] * kwargs.get('groups', 1)
    testing.assert_jit_grads_match_eager(
        f, _calls(13, [x_shape, w_shape, (c_out,)], dtype=dtype), 0, 0,
        lowered=('Deconvolution2DFunction',))


@pytest.mark.bit_exact
@pytest.mark.adversarial
@pytest.mark.parametrize('kwargs', [
    dict(ksize=3, stride=2, pad=4), dict(ksize=(1, 3), nobias=True),
    dict(ksize=2, dilate=2, pad=1), dict(ksize=3, groups=3, pad=1)])
def test_convolution_link_trains_like_eager(kwargs):
    numpy.random.seed(1)
    net = _Net(lambda m, x: F.relu(m.c(x)), c=L.Convolution2D(3, 6, **kwargs))
    _train_twins(net, _batches(14, (2, 3, 6, 7), n=4), rtol=0, atol=0)


@pytest.mark.adversarial
def test_convolution_output_is_c_contiguous_and_transposed_after():
    def f(x, W):
        y = F.convolution_2d(x, W, pad=1)
        return F.transpose(y, (0, 2, 3, 1)) * 2, y
    testing.assert_jit_grads_match_eager(
        f, _calls(15, [(2, 3, 5, 5), (4, 3, 3, 3)]), 0, 0)


@pytest.mark.adversarial
def test_convolution_of_a_transposed_input():
    def f(x, W):
        return F.convolution_2d(F.transpose(x, (0, 3, 1, 2)), W, stride=2)
    testing.assert_jit_grads_match_eager(
        f, _calls(17, [(2, 6, 5, 3), (2, 3, 2, 2)]), 0, 0)


@pytest.mark.bit_exact
@pytest.mark.adversarial
def test_a_text_cnn_convolution_over_words_bit_for_bit():
    """A (3, 1) kernel over the transposed embeddings of padded words,
    (N, C, words, 1), as Chainer's text classification example's CNN:
    a batch and width of its own on each call."""
    def f(e, W, b):
        x = F.transpose(e, (0, 2, 1))[:, :, :, None]
        return F.max(F.relu(F.convolution_2d(x, W, b, pad=(1, 0))),
                     axis=(2, 3))
    rng = numpy.random.RandomState(19)
    calls = [(rng.standard_normal((n, words, 6)).astype(F32),
              rng.standard_normal((5, 6, 3, 1)).astype(F32),
              rng.standard_normal(5).astype(F32))
             for n, words in [(3, 7), (4, 12), (4, 12), (4, 12), (2, 9),
                              (3, 7), (3, 7), (5, 20)]]
    testing.assert_jit_grads_match_eager(f, calls, 0, 0)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('x_shape,w_shape,options', forward.DECONV_ND_CASES)
def test_deconvolution_nd_grad(rng, dtype, bias, x_shape, w_shape, options):
    out_channels = w_shape[1] * options.get('groups', 1)
    shapes = [x_shape, w_shape] + ([(out_channels,)] if bias else [])
    testing.assert_jit_grads_match_eager(
        lambda *args: F.deconvolution_nd(*args, **options),
        make_calls(rng, shapes, dtype),
        lowered=['DeconvolutionND'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,dilate', forward.SHIFT_CASES)
def test_shift_grad(rng, dtype, x_shape, ksize, dilate):
    testing.assert_jit_grads_match_eager(
        lambda x: F.shift(x, ksize, dilate),
        make_calls(rng, [x_shape], dtype), rtol=0, atol=0,
        lowered=['Shift'])
