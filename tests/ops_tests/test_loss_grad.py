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


def _away_from_hinge_kinks(calls):
    """The calls with scores moved off ``|x| == 1``, where the hinge loss
    has no derivative."""
    return [(numpy.where(abs(abs(x) - 1) < 1e-2, x * 1.1, x).astype(x.dtype),
             t) for x, t in calls]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape', cases_of(forward.test_hinge, 'x_shape'))
@pytest.mark.parametrize('norm', ['L1', 'L2'])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
def test_hinge_grad(rng, dtype, x_shape, norm, reduce):
    if reduce == 'mean' and not x_shape[0]:
        pytest.skip('the mean of no rows divides by zero')
    calls = forward._label_calls(rng, x_shape, x_shape[:1], dtype,
                                 x_shape[1])
    testing.assert_jit_grads_match_eager(
        lambda x, t: F.hinge(x, t, norm=norm, reduce=reduce),
        _away_from_hinge_kinks(calls), lowered=['Hinge'],
        **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', cases_of(forward.test_contrastive, 'shape'))
@pytest.mark.parametrize('margin', [1, 3.0])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
def test_contrastive_grad(rng, dtype, shape, margin, reduce):
    testing.assert_jit_grads_match_eager(
        lambda x0, x1, y: F.contrastive(x0, x1, y, margin, reduce),
        forward._pair_label_calls(rng, shape, dtype),
        lowered=['Contrastive'], **tolerances(dtype))


def test_contrastive_grad_of_equal_pairs(rng):
    # The distance is clamped to eps where the pair is equal.
    calls = [(x0, x0.copy(), y) for x0, _, y in
             forward._pair_label_calls(rng, (4, 3), numpy.float32)]
    testing.assert_jit_grads_match_eager(
        lambda x0, x1, y: F.contrastive(x0, x1, y, reduce='no'), calls,
        lowered=['Contrastive'], **tolerances(numpy.float32))


def test_contrastive_grad_of_one_input(rng):
    calls = [(x0, x1, y) for x0, x1, y in
             forward._pair_label_calls(rng, (5, 3), numpy.float64)]
    testing.assert_jit_grads_match_eager(
        lambda x0, x1, y: F.contrastive(x0, x1.array, y, margin=2),
        calls, lowered=['Contrastive'], **tolerances(numpy.float64))


def _away_from_triplet_kinks(calls, margin):
    """The calls with the positives moved where a row's hinge is 0 only
    well away from its kink."""
    moved = []
    for a, p, n in calls:
        dist = ((a - p) ** 2 - (a - n) ** 2).sum(axis=1) + margin
        near = abs(dist) < 1e-2
        p = numpy.where(near[:, None], p + 0.5, p).astype(p.dtype)
        moved.append((a, p, n))
    return moved


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', cases_of(forward.test_triplet, 'shape'))
@pytest.mark.parametrize('margin', cases_of(forward.test_triplet, 'margin'))
@pytest.mark.parametrize('reduce', ['mean', 'no'])
def test_triplet_grad(rng, dtype, shape, margin, reduce):
    testing.assert_jit_grads_match_eager(
        lambda a, p, n: F.triplet(a, p, n, margin, reduce),
        _away_from_triplet_kinks(make_calls(rng, [shape] * 3, dtype),
                                 margin),
        lowered=['Triplet'], **tolerances(dtype))


def test_triplet_grad_of_the_anchor_only(rng):
    calls = make_calls(rng, [(5, 3)] * 3, numpy.float64)
    testing.assert_jit_grads_match_eager(
        lambda a, p, n: F.triplet(a, p.array, n.array, reduce='no'),
        calls, lowered=['Triplet'], **tolerances(numpy.float64))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', cases_of(forward.test_decov, 'shape'))
@pytest.mark.parametrize('reduce', ['half_squared_sum', 'no'])
def test_decov_grad(rng, dtype, shape, reduce):
    testing.assert_jit_grads_match_eager(
        lambda h: F.decov(h, reduce), make_calls(rng, [shape], dtype),
        lowered=['DeCov'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize(
    'shapes', cases_of(forward.test_cross_covariance, 'shapes'))
@pytest.mark.parametrize('reduce', ['half_squared_sum', 'no'])
def test_cross_covariance_grad(rng, dtype, shapes, reduce):
    testing.assert_jit_grads_match_eager(
        lambda y, z: F.cross_covariance(y, z, reduce),
        make_calls(rng, shapes, dtype),
        lowered=['CrossCovariance'], **tolerances(dtype))


@pytest.mark.parametrize('reduce', ['half_squared_sum', 'no'])
def test_cross_covariance_grad_of_one_input(rng, reduce):
    testing.assert_jit_grads_match_eager(
        lambda y, z: F.cross_covariance(y.array, z, reduce),
        make_calls(rng, [(5, 4), (5, 3)], numpy.float64),
        lowered=['CrossCovariance'], **tolerances(numpy.float64))
