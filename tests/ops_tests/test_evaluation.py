"""chainer.functions.evaluation: accuracy, forward and gradients (none)."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.ops_tests.common import make_calls
from tests.ops_tests.test_loss import _label_calls

CASES = [((6, 4), (6,)), ((3, 5, 2), (3, 2)), ((4, 3, 1), (4,))]


@pytest.mark.parametrize('dtype', [numpy.float16, numpy.float32,
                                   numpy.float64])
@pytest.mark.parametrize('x_shape,t_shape', CASES)
@pytest.mark.parametrize('ignore_label', [None, -1])
def test_accuracy(rng, dtype, x_shape, t_shape, ignore_label):
    testing.assert_jit_matches_eager(
        lambda x, t: F.accuracy(x, t, ignore_label=ignore_label),
        _label_calls(rng, x_shape, t_shape, dtype, x_shape[1]),
        expect_entries=1, lowered=['Accuracy'])


def test_accuracy_with_every_label_ignored(rng):
    calls = [(rng.standard_normal((3, 4)).astype(numpy.float32),
              numpy.full(3, -1, numpy.int32)) for _ in range(2)]
    testing.assert_jit_matches_eager(
        lambda x, t: F.accuracy(x, t, ignore_label=-1), calls,
        lowered=['Accuracy'])


def test_accuracy_next_to_a_loss_passes_no_gradient(rng):
    def f(x, t):
        return F.softmax_cross_entropy(x, t) + F.accuracy(x, t)
    testing.assert_jit_grads_match_eager(
        f, _label_calls(rng, (6, 4), (6,), numpy.float32, 4),
        lowered=['SoftmaxCrossEntropy'])


def test_a_jitted_classifier_trains_as_eager_and_keeps_identities(rng):
    predictor = L.Linear(8, 4)
    eager = L.Classifier(predictor.copy(mode='copy'))
    jitted = L.Classifier(predictor)
    jitted.forward = chainerjit.jit(jitted.forward)
    optimizers = [chainer.optimizers.SGD(0.1) for _ in range(2)]
    for optimizer, model in zip(optimizers, (eager, jitted)):
        optimizer.setup(model)
    for step in range(4):
        x = rng.standard_normal((6, 8)).astype(numpy.float32)
        t = rng.randint(0, 4, 6).astype(numpy.int32)
        losses = []
        for optimizer, model in zip(optimizers, (eager, jitted)):
            model.cleargrads()
            reporter, observed = chainer.Reporter(), {}
            reporter.add_observer('main', model)
            with reporter.scope(observed):
                loss = model(x, t)
            loss.backward()
            optimizer.update()
            losses.append((loss, model, observed))
        (e_loss, e_model, e_obs), (j_loss, j_model, j_obs) = losses
        numpy.testing.assert_allclose(j_loss.array, e_loss.array,
                                      rtol=1e-6)
        numpy.testing.assert_allclose(j_model.accuracy.array,
                                      e_model.accuracy.array)
        assert j_model.loss is j_loss  # one Variable, as in eager mode
        assert sorted(j_obs) == sorted(e_obs) == ['main/accuracy',
                                                  'main/loss']
        for key in e_obs:
            numpy.testing.assert_allclose(j_obs[key].array,
                                          e_obs[key].array, rtol=1e-6)
    # (onnxruntime, where chosen, sums in another order: a weight near
    # zero differs by a float32 rounding)
    numpy.testing.assert_allclose(jitted.predictor.W.array,
                                  eager.predictor.W.array, rtol=1e-5,
                                  atol=1e-6)
    entry, = jitted.forward.cache_entries()
    assert 'Accuracy[generic]' not in entry.training.forward.dis()


def test_a_classifier_storing_its_results_is_not_checked_again(
        rng, monkeypatch):
    # L.Classifier assigns self.y, self.loss and self.accuracy before
    # reading them: replaying those assignments keeps the model check
    # done, so later calls skip comparing the whole model.
    from chainerjit.frontend import guards
    model = L.Classifier(L.Linear(8, 4))
    model.forward = chainerjit.jit(model.forward)
    x = rng.standard_normal((6, 8)).astype(numpy.float32)
    t = rng.randint(0, 4, 6).astype(numpy.int32)
    for _ in range(3):
        model(x, t)
    checks = []
    original = guards.link_state
    monkeypatch.setattr(guards, 'link_state', lambda *a: checks.append(a)
                        or original(*a))
    for _ in range(3):
        model(x, t)
    assert checks == []
    model.predictor.W.array[...] = 0  # arrays are still read every call
    numpy.testing.assert_array_equal(model(x, t).array,
                                     F.softmax_cross_entropy(
                                         model.predictor(x), t).array)


def _sign_label_calls(rng, shape, dtype, n=3):
    """Calls ``(x, t)`` with labels 0, 1 and -1 (ignored) of x's shape."""
    return [(rng.standard_normal(shape).astype(dtype),
             rng.randint(-1, 2, size=shape).astype(numpy.int32))
            for _ in range(n)]


@pytest.mark.parametrize('dtype', [numpy.float16, numpy.float32,
                                   numpy.float64])
@pytest.mark.parametrize('shape', [(6, 3), (5,), (2, 3, 4), (0, 2)])
def test_binary_accuracy(rng, dtype, shape):
    testing.assert_jit_matches_eager(
        lambda x, t: F.binary_accuracy(x, t),
        _sign_label_calls(rng, shape, dtype),
        expect_entries=1, lowered=['BinaryAccuracy'])


def test_binary_accuracy_with_every_label_ignored(rng):
    calls = [(x, numpy.full_like(t, -1)) for x, t in
             _sign_label_calls(rng, (4, 2), numpy.float32)]
    testing.assert_jit_matches_eager(
        lambda x, t: F.binary_accuracy(x, t), calls,
        expect_entries=1, lowered=['BinaryAccuracy'])


@pytest.mark.parametrize('dtype', [numpy.float16, numpy.float32,
                                   numpy.float64])
@pytest.mark.parametrize('shape', [(7, 3), (6,), (4, 2, 3)])
@pytest.mark.parametrize('multioutput', ['uniform_average', 'raw_values'])
def test_r2_score(rng, dtype, shape, multioutput):
    testing.assert_jit_matches_eager(
        lambda pred, true: F.r2_score(pred, true, multioutput=multioutput),
        make_calls(rng, [shape, shape], dtype),
        expect_entries=1, lowered=['R2_score'])


@pytest.mark.parametrize('multioutput', ['uniform_average', 'raw_values'])
def test_r2_score_of_a_constant_truth(rng, multioutput):
    # A constant column scores 0 (its total sum of squares is 0).
    calls = [(pred, numpy.where(numpy.arange(3) == 1, 2.5, true))
             for pred, true in make_calls(rng, [(5, 3), (5, 3)],
                                          numpy.float64)]
    testing.assert_jit_matches_eager(
        lambda pred, true: F.r2_score(pred, true, multioutput=multioutput),
        calls, expect_entries=1, lowered=['R2_score'])


SUMMARY_CASES = [((8, 4), (8,)), ((3, 4, 2), (3, 2)), ((5, 3, 1), (5,))]


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('x_shape,t_shape', SUMMARY_CASES)
@pytest.mark.parametrize('label_num', [None, 'classes', 'more'])
@pytest.mark.parametrize('beta', [1.0, 0.5])
@pytest.mark.parametrize('ignore_label', [-1, 0])
def test_classification_summary(rng, dtype, x_shape, t_shape, label_num,
                                beta, ignore_label):
    n_classes = x_shape[1]
    label_num = {'classes': n_classes, 'more': n_classes + 2}.get(
        label_num, label_num)
    calls = [(x, numpy.where(t == -1, ignore_label, t).astype(t.dtype))
             for x, t in _label_calls(rng, x_shape, t_shape, dtype,
                                      n_classes)]
    # Every label once, so that the label count (label_num=None) is fixed.
    for _, t in calls:
        t.ravel()[:n_classes] = numpy.arange(n_classes)[:t.size]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)  # 0 / 0
        testing.assert_jit_matches_eager(
            lambda x, t: F.classification_summary(
                x, t, label_num=label_num, beta=beta,
                ignore_label=ignore_label),
            calls, expect_entries=1, lowered=['ClassificationSummary'])


@pytest.mark.parametrize('score', ['precision', 'recall', 'f1_score'])
@pytest.mark.parametrize('label_num', [None, 4])
def test_precision_recall_and_f1(rng, score, label_num):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)
        testing.assert_jit_matches_eager(
            lambda x, t: getattr(F, score)(x, t, label_num=label_num),
            _label_calls(rng, (12, 4), (12,), numpy.float32, 4),
            expect_entries=1, lowered=['ClassificationSummary'])


def test_classification_summary_counts_the_labels_of_each_call(rng):
    # label_num=None: the outputs have one entry per label up to the
    # largest of this call's labels, as eager's.
    calls = [(rng.standard_normal((6, 5)).astype(numpy.float32),
              rng.randint(0, high, 6).astype(numpy.int32))
             for high in (5, 3, 2, 5)]
    for (_, t), high in zip(calls, (5, 3, 2, 5)):
        t[0] = high - 1
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)
        testing.assert_jit_matches_eager(
            lambda x, t: F.classification_summary(x, t), calls,
            expect_entries=1, lowered=['ClassificationSummary'])


def test_evaluations_next_to_a_loss_pass_no_gradient(rng):
    def f(x, t, b):
        return (F.softmax_cross_entropy(x, t) + F.binary_accuracy(x, b) +
                F.r2_score(x, x * 2) + F.precision(x, t, label_num=4)[0][0])
    calls = [c + (rng.randint(0, 2, (6, 4)).astype(numpy.int32),)
             for c in _label_calls(rng, (6, 4), (6,), numpy.float64, 4)]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)
        jitted = testing.assert_jit_grads_match_eager(
            f, calls, lowered=['SoftmaxCrossEntropy'])
    entry, = jitted.cache_entries()
    nodes = entry.training.graphs.forward.nodes
    assert {'BinaryAccuracy', 'R2_score', 'ClassificationSummary'} <= set(
        n.op for n in nodes)
    assert not any(n.generic for n in nodes)
