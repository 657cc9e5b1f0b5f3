"""ONNX export of the normalization ops, over the forward tests'
cases."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from chainerjit import testing
from tests.ops_tests.common import cases_of
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import make_calls
from tests.ops_tests import test_normalization as forward
from tests.ops_tests.test_normalization import _bn_calls


pytest.importorskip('onnxruntime')


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,param_shape,axis', cases_of(
    forward.test_fixed_batch_normalization, 'x_shape,param_shape,axis'))
def test_fixed_batch_normalization(rng, dtype, x_shape, param_shape, axis):
    testing.assert_onnx_matches_eager(
        lambda x, gamma, beta, mean, var: F.fixed_batch_normalization(
            x, gamma, beta, mean, var, eps=1e-3, axis=axis),
        _bn_calls(rng, x_shape, param_shape, dtype),
        rtol=1e-5, atol=1e-5, lowered=['FixedBatchNormalization'])


@pytest.mark.parametrize('dtype', DTYPES)
def test_batch_normalization_link_test_mode(rng, dtype):
    bn = L.BatchNormalization(3, dtype=dtype)
    bn.avg_mean[...] = rng.standard_normal(3)
    bn.avg_var[...] = rng.uniform(0.5, 2.0, 3)
    with chainer.using_config('train', False):
        testing.assert_onnx_matches_eager(
            bn.forward, make_calls(rng, [(2, 3, 4, 4)], dtype),
            rtol=1e-5, atol=1e-5, lowered=['FixedBatchNormalization'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,groups', forward.GROUP_NORM_CASES)
def test_group_normalization(rng, dtype, x_shape, groups):
    channels = x_shape[1]
    testing.assert_onnx_matches_eager(
        lambda x, gamma, beta: F.group_normalization(x, groups, gamma, beta),
        make_calls(rng, [x_shape, (channels,), (channels,)], dtype),
        rtol=1e-5, atol=1e-5, lowered=['GroupNormalization'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', cases_of(
    forward.test_layer_normalization, 'shape'))
def test_layer_normalization(rng, dtype, shape):
    testing.assert_onnx_matches_eager(
        lambda x, gamma, beta: F.layer_normalization(x, gamma, beta),
        make_calls(rng, [shape, shape[1:], shape[1:]], dtype),
        rtol=1e-5, atol=1e-5, lowered=['LayerNormalization'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape,axis', cases_of(
    forward.test_normalize, 'shape,axis'))
def test_normalize(rng, dtype, shape, axis):
    testing.assert_onnx_matches_eager(
        lambda x: F.normalize(x, axis=axis),
        make_calls(rng, [shape], dtype), lowered=['NormalizeL2'])


# onnxruntime's CPU LRN takes float32 only.
@pytest.mark.parametrize('dtype', [numpy.float32])
@pytest.mark.parametrize('shape,options', [
    ((2, 7, 3, 3), {}), ((3, 4), {'n': 3, 'k': 1, 'alpha': 1e-2}),
    ((1, 6, 2, 2), {'n': 4, 'beta': 0.5}), ((2, 5, 2, 3, 2), {}),
    ((0, 5, 2, 3, 2), {})])
def test_local_response_normalization(rng, dtype, shape, options):
    testing.assert_onnx_matches_eager(
        lambda x: F.local_response_normalization(x, **options),
        make_calls(rng, [shape], dtype),
        lowered=['LocalResponseNormalization'])


def test_normalizations_with_a_dynamic_batch(rng):
    ln = L.LayerNormalization(5)

    def f(x, y):
        return (F.local_response_normalization(x),
                F.normalize(y), ln(y))
    calls = [make_calls(rng, [(n, 5, 2, 3, 2), (n, 5)], numpy.float32)[0]
             for n in (2, 1, 4)]
    testing.assert_onnx_matches_eager(f, calls, rtol=1e-5, atol=1e-5,
                                      dynamic_batch=True)
