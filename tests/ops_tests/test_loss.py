import chainer.functions as F
import numpy
import pytest

from chainerjit import testing
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import make_calls


def _label_calls(rng, x_shape, t_shape, dtype, n_labels, n=3):
    """Calls ``(x, t)`` with int32 labels in ``[-1, n_labels)``."""
    return [(rng.standard_normal(x_shape).astype(dtype),
             rng.randint(-1, n_labels, size=t_shape).astype(numpy.int32))
            for _ in range(n)]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(3, 4), (2, 3, 5), ()])
def test_mean_squared_error(rng, dtype, shape):
    testing.assert_jit_matches_eager(
        lambda x0, x1: F.mean_squared_error(x0, x1),
        make_calls(rng, [shape, shape], dtype),
        expect_entries=1, lowered=['MeanSquaredError'])


@pytest.mark.parametrize('dtype', DTYPES + [numpy.float16])
@pytest.mark.parametrize('shape', [(3, 4), (2, 3, 5), ()])
def test_mean_absolute_error(rng, dtype, shape):
    testing.assert_jit_matches_eager(
        lambda x0, x1: F.mean_absolute_error(x0, x1),
        make_calls(rng, [shape, shape], dtype),
        expect_entries=1, lowered=['MeanAbsoluteError'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(3, 4), (2, 3, 5), (0, 4)])
@pytest.mark.parametrize('delta', [1.0, 0.3])
@pytest.mark.parametrize('reduce', ['sum_along_second_axis', 'no'])
def test_huber_loss(rng, dtype, shape, delta, reduce):
    testing.assert_jit_matches_eager(
        lambda x0, x1: F.huber_loss(x0, x1, delta, reduce=reduce),
        make_calls(rng, [shape, shape], dtype),
        expect_entries=1, lowered=['HuberLoss'])


SOFTMAX_CASES = [
    # x shape, t shape
    ((4, 3), (4,)),
    ((2, 5, 3, 2), (2, 3, 2)),
    ((0, 3), (0,)),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('normalize', [True, False])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
@pytest.mark.parametrize('x_shape,t_shape', SOFTMAX_CASES)
def test_softmax_cross_entropy(rng, dtype, normalize, reduce, x_shape,
                               t_shape):
    testing.assert_jit_matches_eager(
        lambda x, t: F.softmax_cross_entropy(
            x, t, normalize=normalize, reduce=reduce),
        _label_calls(rng, x_shape, t_shape, dtype, x_shape[1]),
        expect_entries=1, lowered=['SoftmaxCrossEntropy'])


def test_softmax_cross_entropy_ignore_label(rng):
    calls = _label_calls(rng, (6, 4), (6,), numpy.float32, 4)
    calls = [(x, numpy.where(t == -1, 2, t).astype(numpy.int32))
             for x, t in calls]
    testing.assert_jit_matches_eager(
        lambda x, t: F.softmax_cross_entropy(x, t, ignore_label=2),
        calls, expect_entries=1, lowered=['SoftmaxCrossEntropy'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('reduce', ['mean', 'no'])
@pytest.mark.parametrize('loss', ['cross-entropy', 'kl-divergence'])
def test_softmax_cross_entropy_soft_target(rng, dtype, reduce, loss):
    calls = [(x, t / t.sum(axis=1, keepdims=True)) for x, t in
             make_calls(rng, [(3, 4, 2), (3, 4, 2)], dtype, low=0.1,
                        high=1.0)]
    testing.assert_jit_matches_eager(
        lambda x, t: F.softmax_cross_entropy(
            x, t, reduce=reduce, soft_target_loss=loss),
        calls, expect_entries=1, lowered=['SoftmaxCrossEntropy'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('normalize', [True, False])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
@pytest.mark.parametrize('shape', [(4, 3), (2, 3, 2), (0, 3)])
def test_sigmoid_cross_entropy(rng, dtype, normalize, reduce, shape):
    testing.assert_jit_matches_eager(
        lambda x, t: F.sigmoid_cross_entropy(
            x, t, normalize=normalize, reduce=reduce),
        _label_calls(rng, shape, shape, dtype, 2),
        expect_entries=1, lowered=['SigmoidCrossEntropy'])
