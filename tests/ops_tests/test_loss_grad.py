"""Gradients of the lowered loss ops against eager Chainer's, over the
cases of the forward tests in test_loss.py."""

import chainer.functions as F
import numpy
import pytest

from chainerjit import testing
from tests.ops_tests import test_loss as forward
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import make_calls
from tests.ops_tests.common import cases_of
from tests.ops_tests.test_connection_grad import tolerances


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize(
    'shape', cases_of(forward.test_mean_squared_error, 'shape'))
def test_mean_squared_error_grad(rng, dtype, shape):
    testing.assert_jit_grads_match_eager(
        lambda x0, x1: F.mean_squared_error(x0, x1),
        make_calls(rng, [shape, shape], dtype),
        lowered=['MeanSquaredError'], **tolerances(dtype))


@pytest.mark.parametrize(
    'dtype', cases_of(forward.test_mean_absolute_error, 'dtype'))
@pytest.mark.parametrize(
    'shape', cases_of(forward.test_mean_absolute_error, 'shape'))
def test_mean_absolute_error_grad(rng, dtype, shape):
    testing.assert_jit_grads_match_eager(
        lambda x0, x1: F.mean_absolute_error(x0, x1),
        make_calls(rng, [shape, shape], dtype),
        lowered=['MeanAbsoluteError'], **tolerances(dtype))


def _softmax_cases():
    for x_shape, t_shape in forward.SOFTMAX_CASES:
        if 0 in x_shape:
            # Eager's gradient node returns two gradients for an empty x,
            # and backward raises.
            yield pytest.param(x_shape, t_shape, marks=pytest.mark.skip(
                reason='eager backward raises for an empty x'))
        else:
            yield x_shape, t_shape


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('normalize', [True, False])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
@pytest.mark.parametrize('x_shape,t_shape', list(_softmax_cases()))
def test_softmax_cross_entropy_grad(rng, dtype, normalize, reduce, x_shape,
                                    t_shape):
    testing.assert_jit_grads_match_eager(
        lambda x, t: F.softmax_cross_entropy(
            x, t, normalize=normalize, reduce=reduce),
        forward._label_calls(rng, x_shape, t_shape, dtype, x_shape[1]),
        lowered=['SoftmaxCrossEntropy'], **tolerances(dtype))


def test_softmax_cross_entropy_ignore_label_grad(rng):
    calls = forward._label_calls(rng, (6, 4), (6,), numpy.float32, 4)
    calls = [(x, numpy.where(t == -1, 2, t).astype(numpy.int32))
             for x, t in calls]
    testing.assert_jit_grads_match_eager(
        lambda x, t: F.softmax_cross_entropy(x, t, ignore_label=2),
        calls, lowered=['SoftmaxCrossEntropy'],
        **tolerances(numpy.float32))


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('normalize', [True, False])
@pytest.mark.parametrize('ignore_label', [-1, 2])
@pytest.mark.parametrize('label_dtype', [numpy.int32, numpy.int64])
def test_softmax_cross_entropy_grad_is_eagers_bit_for_bit(
        rng, dtype, normalize, ignore_label, label_dtype):
    """The label gradient's C loop (``_loops_softmax.softmax_ce_grad``),
    with ignored labels, every row ignored, and both counts."""
    calls = [(rng.standard_normal((6, 4)).astype(dtype) * 3,
              rng.randint(0, 4, 6).astype(label_dtype)) for _ in range(3)]
    calls[1][1][[0, 3]] = ignore_label
    calls[2][1][:] = ignore_label
    testing.assert_jit_grads_match_eager(
        lambda x, t: F.softmax_cross_entropy(
            x, t, normalize=normalize, ignore_label=ignore_label),
        calls, lowered=['SoftmaxCrossEntropy'], rtol=0, atol=0)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('reduce', ['mean', 'no'])
@pytest.mark.parametrize('loss', ['cross-entropy', 'kl-divergence'])
def test_softmax_cross_entropy_soft_target_grad(rng, dtype, reduce, loss):
    # t requires grad too; eager gives it none, and so must jit.
    calls = [(x, t / t.sum(axis=1, keepdims=True)) for x, t in
             make_calls(rng, [(3, 4, 2), (3, 4, 2)], dtype, low=0.1,
                        high=1.0)]
    testing.assert_jit_grads_match_eager(
        lambda x, t: F.softmax_cross_entropy(
            x, t, reduce=reduce, soft_target_loss=loss),
        calls, lowered=['SoftmaxCrossEntropy'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('normalize', [True, False])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
@pytest.mark.parametrize(
    'shape', cases_of(forward.test_sigmoid_cross_entropy, 'shape'))
def test_sigmoid_cross_entropy_grad(rng, dtype, normalize, reduce, shape):
    testing.assert_jit_grads_match_eager(
        lambda x, t: F.sigmoid_cross_entropy(
            x, t, normalize=normalize, reduce=reduce),
        forward._label_calls(rng, shape, shape, dtype, 2),
        lowered=['SigmoidCrossEntropy'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize(
    'shape', cases_of(forward.test_huber_loss, 'shape'))
@pytest.mark.parametrize('delta', [1.0, 0.3])
@pytest.mark.parametrize('reduce', ['sum_along_second_axis', 'no'])
def test_huber_loss_grad(rng, dtype, shape, delta, reduce):
    testing.assert_jit_grads_match_eager(
        lambda x0, x1: F.huber_loss(x0, x1, delta, reduce=reduce),
        make_calls(rng, [shape, shape], dtype),
        lowered=['HuberLoss'], **tolerances(dtype))
