"""Gradients of the lowered connection ops against eager Chainer's, over
the cases of the forward tests in test_connection.py."""

import warnings

import chainer.functions as F
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
