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


def _pair_label_calls(rng, shape, dtype, label_dtype=numpy.int32, n=3):
    """Calls ``(x0, x1, y)`` of two arrays and 0/1 labels per row."""
    return [tuple(make_calls(rng, [shape, shape], dtype, n=1)[0]) +
            (rng.randint(0, 2, size=shape[:1]).astype(label_dtype),)
            for _ in range(n)]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape', [(4, 3), (1, 5), (0, 3)])
@pytest.mark.parametrize('norm', ['L1', 'L2'])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
def test_hinge(rng, dtype, x_shape, norm, reduce):
    if reduce == 'mean' and not x_shape[0]:
        pytest.skip('the mean of no rows divides by zero')
    testing.assert_jit_matches_eager(
        lambda x, t: F.hinge(x, t, norm=norm, reduce=reduce),
        _label_calls(rng, x_shape, x_shape[:1], dtype, x_shape[1]),
        expect_entries=1, lowered=['Hinge'])


def test_hinge_with_int64_labels_and_large_scores(rng):
    calls = [(rng.standard_normal((5, 4)).astype(numpy.float32) * 3,
              rng.randint(0, 4, 5).astype(numpy.int64)) for _ in range(3)]
    testing.assert_jit_matches_eager(
        lambda x, t: F.hinge(x, t, norm='L2'), calls,
        expect_entries=1, lowered=['Hinge'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(4, 3), (1, 2), (6, 1)])
@pytest.mark.parametrize('margin', [1, 0.5, 3.0])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
def test_contrastive(rng, dtype, shape, margin, reduce):
    testing.assert_jit_matches_eager(
        lambda x0, x1, y: F.contrastive(x0, x1, y, margin, reduce),
        _pair_label_calls(rng, shape, dtype),
        expect_entries=1, lowered=['Contrastive'])


@pytest.mark.parametrize('label_dtype', [numpy.int64, numpy.int16])
def test_contrastive_label_dtypes(rng, label_dtype):
    # int16 labels keep the loss in float32; int64 ones make it float64.
    testing.assert_jit_matches_eager(
        lambda x0, x1, y: F.contrastive(x0, x1, y, 2.0),
        _pair_label_calls(rng, (5, 3), numpy.float32, label_dtype),
        expect_entries=1, lowered=['Contrastive'])


def test_contrastive_of_equal_pairs(rng):
    calls = [(x0, x0.copy(), y) for x0, _, y in
             _pair_label_calls(rng, (4, 3), numpy.float32)]
    testing.assert_jit_matches_eager(
        lambda x0, x1, y: F.contrastive(x0, x1, y, reduce='no'), calls,
        expect_entries=1, lowered=['Contrastive'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(4, 3), (1, 5), (6, 1)])
@pytest.mark.parametrize('margin', [0.2, 1.5])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
def test_triplet(rng, dtype, shape, margin, reduce):
    testing.assert_jit_matches_eager(
        lambda a, p, n: F.triplet(a, p, n, margin, reduce),
        make_calls(rng, [shape] * 3, dtype),
        expect_entries=1, lowered=['Triplet'])


def test_triplet_of_three_axes_runs_generic(rng):
    jitted = testing.assert_jit_matches_eager(
        lambda a, p, n: F.triplet(a, p, n),
        make_calls(rng, [(3, 4, 2)] * 3, numpy.float32), expect_entries=1)
    entry, = jitted.cache_entries()
    assert 'Triplet[generic]' in entry.program.dis()


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(5, 4), (1, 3), (6, 1)])
@pytest.mark.parametrize('reduce', ['half_squared_sum', 'no'])
def test_decov(rng, dtype, shape, reduce):
    testing.assert_jit_matches_eager(
        lambda h: F.decov(h, reduce), make_calls(rng, [shape], dtype),
        expect_entries=1, lowered=['DeCov'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shapes', [((5, 4), (5, 3)), ((1, 2), (1, 2)),
                                    ((6, 1), (6, 3))])
@pytest.mark.parametrize('reduce', ['half_squared_sum', 'no'])
def test_cross_covariance(rng, dtype, shapes, reduce):
    testing.assert_jit_matches_eager(
        lambda y, z: F.cross_covariance(y, z, reduce),
        make_calls(rng, shapes, dtype),
        expect_entries=1, lowered=['CrossCovariance'])
