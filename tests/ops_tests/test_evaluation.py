"""chainer.functions.evaluation: accuracy, forward and gradients (none)."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
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
    numpy.testing.assert_allclose(jitted.predictor.W.array,
                                  eager.predictor.W.array, rtol=1e-5)
    entry, = jitted.forward.cache_entries()
    assert 'Accuracy[generic]' not in entry.training.forward.dis()


def test_a_classifier_storing_its_results_is_not_checked_again(
        rng, monkeypatch):
    # L.Classifier assigns self.y, self.loss and self.accuracy before
    # reading them: replaying those assignments keeps the model check
    # done, so later calls skip comparing the whole model.
    from chainerjit.runtime import cache
    model = L.Classifier(L.Linear(8, 4))
    model.forward = chainerjit.jit(model.forward)
    x = rng.standard_normal((6, 8)).astype(numpy.float32)
    t = rng.randint(0, 4, 6).astype(numpy.int32)
    for _ in range(3):
        model(x, t)
    checks = []
    original = cache.link_state
    monkeypatch.setattr(cache, 'link_state', lambda *a: checks.append(a)
                        or original(*a))
    for _ in range(3):
        model(x, t)
    assert checks == []
    model.predictor.W.array[...] = 0  # arrays are still read every call
    numpy.testing.assert_array_equal(model(x, t).array,
                                     F.softmax_cross_entropy(
                                         model.predictor(x), t).array)
