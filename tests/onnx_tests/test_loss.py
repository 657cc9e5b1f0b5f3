"""ONNX export of the losses, over the forward tests' cases."""

import warnings

import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.ops_tests.common import make_calls
from tests.ops_tests.test_loss import SOFTMAX_CASES
from tests.ops_tests.test_loss import _label_calls
from tests.ops_tests.test_loss import _pair_label_calls


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


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('norm', ['L1', 'L2'])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
def test_hinge(rng, dtype, norm, reduce):
    testing.assert_onnx_matches_eager(
        lambda x, t: F.hinge(x, t, norm=norm, reduce=reduce),
        _label_calls(rng, (5, 4), (5,), dtype, 4), lowered=['Hinge'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('margin', [1, 2.5])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
@pytest.mark.parametrize('label_dtype', [numpy.int32, numpy.int16])
def test_contrastive(rng, dtype, margin, reduce, label_dtype):
    testing.assert_onnx_matches_eager(
        lambda x0, x1, y: F.contrastive(x0, x1, y, margin, reduce),
        _pair_label_calls(rng, (6, 3), dtype, label_dtype),
        lowered=['Contrastive'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('margin', [0.2, 1.5])
@pytest.mark.parametrize('reduce', ['mean', 'no'])
def test_triplet(rng, dtype, margin, reduce):
    testing.assert_onnx_matches_eager(
        lambda a, p, n: F.triplet(a, p, n, margin, reduce),
        make_calls(rng, [(6, 3)] * 3, dtype), lowered=['Triplet'])


def test_margin_losses_with_a_dynamic_batch(rng):
    def losses(x, t, x1, y, n):
        return (F.hinge(x, t), F.hinge(x, t, 'L2', 'no'),
                F.contrastive(x, x1, y), F.contrastive(x, x1, y, reduce='no'),
                F.triplet(x, x1, n), F.triplet(x, x1, n, reduce='no'))
    calls = [c + make_calls(rng, [(k, 3)], numpy.float32, n=1)[0][:1] +
             (rng.randint(0, 2, k).astype(numpy.int32),) +
             make_calls(rng, [(k, 3)], numpy.float32, n=1)[0]
             for k in (4, 1, 7)
             for c in _label_calls(rng, (k, 3), (k,), numpy.float32, 3, 1)]
    testing.assert_onnx_matches_eager(losses, calls, dynamic_batch=True)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(6, 3), (2, 3, 4)])
def test_binary_accuracy(rng, dtype, shape):
    calls = [(x, rng.randint(-1, 2, size=shape).astype(numpy.int32))
             for x, in make_calls(rng, [shape], dtype)]
    calls[-1][1][...] = -1  # every label ignored
    testing.assert_onnx_matches_eager(
        lambda x, t: F.binary_accuracy(x, t), calls,
        lowered=['BinaryAccuracy'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(7, 3), (6,)])
@pytest.mark.parametrize('multioutput', ['uniform_average', 'raw_values'])
def test_r2_score(rng, dtype, shape, multioutput):
    calls = make_calls(rng, [shape, shape], dtype)
    calls[-1][1][...] = 1.5  # a constant truth scores 0
    testing.assert_onnx_matches_eager(
        lambda pred, true: F.r2_score(pred, true, multioutput=multioutput),
        calls, lowered=['R2_score'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,t_shape', [((8, 4), (8,)),
                                             ((3, 4, 2), (3, 2))])
@pytest.mark.parametrize('label_num,beta,ignore_label', [
    (4, 1.0, -1), (6, 0.5, 0), (3, 2.0, -1)])
def test_classification_summary(rng, dtype, x_shape, t_shape, label_num,
                                beta, ignore_label):
    calls = [(x, numpy.where(t == -1, ignore_label, t).astype(t.dtype))
             for x, t in _label_calls(rng, x_shape, t_shape, dtype,
                                      x_shape[1])]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)  # 0 / 0
        testing.assert_onnx_matches_eager(
            lambda x, t: F.classification_summary(
                x, t, label_num, beta, ignore_label),
            calls, lowered=['ClassificationSummary'])


def test_classification_summary_of_labels_counted_is_not_exported(rng):
    # Without label_num, the outputs' length depends on the labels.
    from chainerjit import onnx_export
    x, t = _label_calls(rng, (6, 4), (6,), numpy.float32, 4)[0]
    with pytest.raises(onnx_export.ExportError,
                       match='ClassificationSummary'):
        onnx_export.export_onnx(chainerjit.jit(
            lambda x, t: F.precision(x, t)), (x, t))


def test_evaluations_with_a_dynamic_batch(rng):
    def scores(x, t, b, y):
        return (F.binary_accuracy(x, b), F.r2_score(x, y),
                F.r2_score(x, y, multioutput='raw_values'),
                F.f1_score(x, t, label_num=3))
    calls = [c + (rng.randint(-1, 2, (n, 3)).astype(numpy.int32),
                  rng.standard_normal((n, 3)).astype(numpy.float32))
             for n in (6, 2, 9)
             for c in _label_calls(rng, (n, 3), (n,), numpy.float32, 3, 1)]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)
        testing.assert_onnx_matches_eager(scores, calls, dynamic_batch=True)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('reduce', ['half_squared_sum', 'no'])
def test_decov(rng, dtype, reduce):
    testing.assert_onnx_matches_eager(
        lambda h: F.decov(h, reduce), make_calls(rng, [(6, 4)], dtype),
        lowered=['DeCov'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('reduce', ['half_squared_sum', 'no'])
def test_cross_covariance(rng, dtype, reduce):
    testing.assert_onnx_matches_eager(
        lambda y, z: F.cross_covariance(y, z, reduce),
        make_calls(rng, [(6, 4), (6, 3)], dtype),
        lowered=['CrossCovariance'])


def test_covariance_losses_with_a_dynamic_batch(rng):
    def losses(y, z):
        return (F.decov(y), F.decov(y, 'no'), F.cross_covariance(y, z),
                F.cross_covariance(y, z, 'no'))
    calls = [make_calls(rng, [(n, 4), (n, 3)], numpy.float32, n=1)[0]
             for n in (5, 2, 8)]
    testing.assert_onnx_matches_eager(losses, calls, dynamic_batch=True)
