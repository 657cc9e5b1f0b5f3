"""ONNX export of the losses, over the forward tests' cases."""

import chainer.functions as F
import numpy
import pytest

from chainerjit import testing
from tests.ops_tests.common import make_calls
from tests.ops_tests.test_loss import SOFTMAX_CASES
from tests.ops_tests.test_loss import _label_calls


pytest.importorskip('onnxruntime')

DTYPES = [numpy.float32, numpy.float64]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(3, 4), (2, 3, 5), ()])
def test_mean_squared_error(rng, dtype, shape):
    testing.assert_onnx_matches_eager(
        lambda x0, x1: F.mean_squared_error(x0, x1),
        make_calls(rng, [shape, shape], dtype),
        lowered=['MeanSquaredError'])


@pytest.mark.parametrize('dtype', DTYPES + [numpy.float16])
@pytest.mark.parametrize('shape', [(3, 4), (2, 3, 5), ()])
def test_mean_absolute_error(rng, dtype, shape):
    tol = 1e-3 if dtype == numpy.float16 else 1e-6
    testing.assert_onnx_matches_eager(
        lambda x0, x1: F.mean_absolute_error(x0, x1),
        make_calls(rng, [shape, shape], dtype), rtol=tol, atol=tol,
        lowered=['MeanAbsoluteError'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('normalize', [True, False])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
@pytest.mark.parametrize('x_shape,t_shape', SOFTMAX_CASES)
def test_softmax_cross_entropy(rng, dtype, normalize, reduce, x_shape,
                               t_shape):
    testing.assert_onnx_matches_eager(
        lambda x, t: F.softmax_cross_entropy(
            x, t, normalize=normalize, reduce=reduce),
        _label_calls(rng, x_shape, t_shape, dtype, x_shape[1]),
        lowered=['SoftmaxCrossEntropy'])


def test_softmax_cross_entropy_ignore_label(rng):
    calls = _label_calls(rng, (6, 4), (6,), numpy.float32, 4)
    calls = [(x, numpy.where(t == -1, 2, t).astype(numpy.int32))
             for x, t in calls]
    testing.assert_onnx_matches_eager(
        lambda x, t: F.softmax_cross_entropy(x, t, ignore_label=2),
        calls, lowered=['SoftmaxCrossEntropy'])


def test_softmax_cross_entropy_all_ignored(rng):
    calls = [(x, numpy.full(4, -1, numpy.int32)) for x, _ in
             _label_calls(rng, (4, 3), (4,), numpy.float32, 3)]
    testing.assert_onnx_matches_eager(
        lambda x, t: F.softmax_cross_entropy(x, t), calls,
        lowered=['SoftmaxCrossEntropy'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('reduce', ['mean', 'no'])
@pytest.mark.parametrize('loss', ['cross-entropy', 'kl-divergence'])
def test_softmax_cross_entropy_soft_target(rng, dtype, reduce, loss):
    calls = [(x, t / t.sum(axis=1, keepdims=True)) for x, t in
             make_calls(rng, [(3, 4, 2), (3, 4, 2)], dtype, low=0.1,
                        high=1.0)]
    testing.assert_onnx_matches_eager(
        lambda x, t: F.softmax_cross_entropy(
            x, t, reduce=reduce, soft_target_loss=loss),
        calls, lowered=['SoftmaxCrossEntropy'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('normalize', [True, False])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
@pytest.mark.parametrize('shape', [(4, 3), (2, 3, 2), (0, 3)])
def test_sigmoid_cross_entropy(rng, dtype, normalize, reduce, shape):
    testing.assert_onnx_matches_eager(
        lambda x, t: F.sigmoid_cross_entropy(
            x, t, normalize=normalize, reduce=reduce),
        _label_calls(rng, shape, shape, dtype, 2),
        lowered=['SigmoidCrossEntropy'])


@pytest.mark.parametrize('normalize', [True, False])
def test_losses_with_a_dynamic_batch(rng, normalize):
    def losses(x, t, y, labels):
        return (F.softmax_cross_entropy(x, t, normalize=normalize),
                F.sigmoid_cross_entropy(x, labels, normalize=normalize),
                F.mean_squared_error(x, y), F.mean_absolute_error(x, y))
    calls = [c + (rng.standard_normal((n, 3)).astype(numpy.float32),
                  rng.randint(-1, 2, size=(n, 3)).astype(numpy.int32))
             for n in (4, 1, 7)
             for c in _label_calls(rng, (n, 3), (n,), numpy.float32, 3, 1)]
    testing.assert_onnx_matches_eager(losses, calls, dynamic_batch=True)


def test_soft_target_with_a_dynamic_batch(rng):
    calls = [(x, t / t.sum(axis=1, keepdims=True)) for n in (3, 1, 5)
             for x, t in make_calls(rng, [(n, 4, 2), (n, 4, 2)],
                                    numpy.float32, n=1, low=0.1, high=1.0)]
    testing.assert_onnx_matches_eager(
        lambda x, t: F.softmax_cross_entropy(x, t), calls,
        dynamic_batch=True)


@pytest.mark.parametrize('x_shape,t_shape', [((6, 4), (6,)),
                                             ((3, 5, 2), (3, 2))])
def test_accuracy(rng, x_shape, t_shape):
    testing.assert_onnx_matches_eager(
        lambda x, t: F.accuracy(x, t),
        _label_calls(rng, x_shape, t_shape, numpy.float32, x_shape[1]),
        lowered=['Accuracy'])
