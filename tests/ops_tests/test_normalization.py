import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from chainerjit import testing
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import make_calls


def _bn_calls(rng, x_shape, param_shape, dtype):
    """Calls ``(x, gamma, beta, mean, var)`` with a positive ``var``."""
    calls = make_calls(rng, [x_shape] + [param_shape] * 3, dtype)
    var_calls = make_calls(rng, [param_shape], dtype, low=0.5, high=2.0)
    return [c + v for c, v in zip(calls, var_calls)]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,param_shape,axis', [
    ((3, 4), (4,), None),
    ((2, 3, 4, 5), (3,), None),
    ((0, 3, 2, 2), (3,), None),
    ((2, 3, 4), (3, 4), None),
    ((2, 3, 4), (3,), (0, 2)),
])
def test_fixed_batch_normalization(rng, dtype, x_shape, param_shape, axis):
    testing.assert_jit_matches_eager(
        lambda x, gamma, beta, mean, var: F.fixed_batch_normalization(
            x, gamma, beta, mean, var, eps=1e-3, axis=axis),
        _bn_calls(rng, x_shape, param_shape, dtype),
        expect_entries=1, lowered=['FixedBatchNormalization'])


@pytest.mark.parametrize('dtype', DTYPES)
def test_batch_normalization_link_test_mode(rng, dtype):
    bn = L.BatchNormalization(3, dtype=dtype)
    bn.avg_mean[...] = rng.standard_normal(3)
    bn.avg_var[...] = rng.uniform(0.5, 2.0, 3)
    with chainer.using_config('train', False):
        testing.assert_jit_matches_eager(
            bn.forward, make_calls(rng, [(2, 3, 4, 4)], dtype),
            expect_entries=1, lowered=['FixedBatchNormalization'])


GROUP_NORM_CASES = [
    # x shape, groups
    ((2, 6, 4, 3), 3),
    ((3, 4), 2),
    ((2, 4, 5), 4),
    ((1, 6, 2, 2), 1),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,groups', GROUP_NORM_CASES)
def test_group_normalization(rng, dtype, x_shape, groups):
    channels = x_shape[1]
    testing.assert_jit_matches_eager(
        lambda x, gamma, beta: F.group_normalization(x, groups, gamma, beta),
        make_calls(rng, [x_shape, (channels,), (channels,)], dtype),
        expect_entries=1, lowered=['GroupNormalization'])


def test_group_normalization_link(rng):
    link = L.GroupNormalization(2, 4)
    link.gamma.array[...] = rng.standard_normal(4)
    link.beta.array[...] = rng.standard_normal(4)
    testing.assert_jit_matches_eager(
        link, make_calls(rng, [(3, 4, 5, 5)], numpy.float32),
        expect_entries=1, lowered=['GroupNormalization'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(3, 5), (1, 7), (0, 4)])
def test_layer_normalization(rng, dtype, shape):
    testing.assert_jit_matches_eager(
        lambda x, gamma, beta: F.layer_normalization(x, gamma, beta),
        make_calls(rng, [shape, shape[1:], shape[1:]], dtype),
        expect_entries=1, lowered=['LayerNormalization'])


def test_layer_normalization_link(rng):
    ln = L.LayerNormalization(6)
    testing.assert_jit_matches_eager(
        ln.forward, make_calls(rng, [(4, 6)], numpy.float32),
        expect_entries=1, lowered=['LayerNormalization'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape,axis', [
    ((3, 4), 1), ((2, 3, 4), (1, 2)), ((2, 3, 4), 0), ((0, 3), 1)])
def test_normalize(rng, dtype, shape, axis):
    testing.assert_jit_matches_eager(
        lambda x: F.normalize(x, axis=axis),
        make_calls(rng, [shape], dtype),
        expect_entries=1, lowered=['NormalizeL2'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape,options', [
    ((2, 7, 3, 3), {}), ((3, 4), {'n': 3, 'k': 1, 'alpha': 1e-2}),
    ((1, 6, 2, 2), {'n': 4, 'beta': 0.5})])
def test_local_response_normalization(rng, dtype, shape, options):
    testing.assert_jit_matches_eager(
        lambda x: F.local_response_normalization(x, **options),
        make_calls(rng, [shape], dtype),
        expect_entries=1, lowered=['LocalResponseNormalization'])
