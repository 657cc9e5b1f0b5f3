"""User models between calls, jitted, against eager Chainer: a
``Sequential`` with lambdas, a model reading ``xp`` and moved to NumPy,
parameters loaded, copied and cleared between calls, deep copies and
pickles of a jitted model, and separate models in threads. The calls
and their checks are those of ``test_user_code.py``.
"""

import copy
import pickle
import threading
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.api_tests.user_code_checks import _compiled
from tests.api_tests.user_code_checks import _pair
from tests.api_tests.user_code_checks import _r
from tests.api_tests.user_code_checks import _same
from tests.api_tests.user_code_checks import _same_state


pytestmark = pytest.mark.adversarial


# ----------------------------------------------------------------------
# Models: Sequential with lambdas, xp, surgery between calls


def _sequential():
    return chainer.Sequential(
        L.Linear(3, 4), lambda h: F.leaky_relu(h, 0.3),
        lambda h: h * 2 + 1, L.Linear(4, 2), F.tanh)


def test_sequential_with_lambdas(rng):
    eager, model = _sequential(), _sequential()
    model.copyparams(eager)
    model.forward = chainerjit.jit(model.forward)
    for _ in range(3):
        _same(model, eager, _r(rng, 2, 3))
        _same(model, eager, _r(rng, 5, 3))
    _compiled(model.forward, 1)  # one entry for both batch sizes


class XpNet(chainer.Chain):
    def __init__(self):
        super(XpNet, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)

    def forward(self, x):
        xp = self.xp
        bias = xp.arange(3, dtype=x.dtype)
        h = self.fc(x) + bias
        return F.where(h.array > 0, h, xp.zeros_like(h.array))


class Net(chainer.Chain):
    def __init__(self):
        super(Net, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 4)
            self.bn = L.BatchNormalization(4)

    def forward(self, x):
        return F.relu(self.bn(self.fc(x)))


class JNet(Net):
    forward = chainerjit.jit(Net.forward)


def _surgery_round(rng, model, eager):
    for _ in range(3):
        _same(model, eager, _r(rng, 2, 3))
        _same(model, eager, _r(rng, 1, 3))
        _same_state(model, eager)


def test_model_reading_xp_and_moved_to_numpy(rng):
    eager, model = _pair(XpNet)
    _surgery_round(rng, model, eager)
    eager.to_device('@numpy')
    model.to_device('@numpy')
    _surgery_round(rng, model, eager)
    _compiled(model.forward)


def test_load_npz_copyparams_and_cleargrads(rng, tmp_path):
    eager, model = Net(), JNet()
    model.copyparams(eager)
    _surgery_round(rng, model, eager)

    other = Net()
    other.fc.W.array[...] = _r(rng, 4, 3)
    other.bn.avg_mean[...] = _r(rng, 4)
    other.bn.avg_var[...] = 2.0
    path = str(tmp_path / 'other.npz')
    chainer.serializers.save_npz(path, other)
    chainer.serializers.load_npz(path, eager)
    chainer.serializers.load_npz(path, model)
    _surgery_round(rng, model, eager)

    third = Net()
    third.bn.gamma.array[...] = _r(rng, 4)
    eager.copyparams(third)
    model.copyparams(third)
    _surgery_round(rng, model, eager)

    for m in (eager, model):  # gradients then cleargrads
        with chainer.using_config('train', False):
            F.sum(m(_r(rng, 2, 3))).backward()
        m.cleargrads()
    _surgery_round(rng, model, eager)
    assert model.fc.W.grad is None
    _compiled(model.forward)


def test_deepcopy_of_a_jitted_model_then_both(rng):
    model = JNet()
    eager = Net()
    eager.copyparams(model)
    _surgery_round(rng, model, eager)
    twin = copy.deepcopy(model)
    twin_eager = copy.deepcopy(eager)
    twin.fc.W.array[...] = twin_eager.fc.W.array[...] = _r(rng, 4, 3)
    _surgery_round(rng, twin, twin_eager)
    _surgery_round(rng, model, eager)
    assert not numpy.allclose(model.fc.W.array, twin.fc.W.array)
    _compiled(twin.forward)


def test_pickled_jitted_model(rng):
    model = JNet()
    eager = Net()
    eager.copyparams(model)
    _surgery_round(rng, model, eager)
    clone = pickle.loads(pickle.dumps(model))
    clone.bn.avg_mean[...] = _r(rng, 4)
    eager.copyparams(clone)
    eager.bn.avg_mean[...] = clone.bn.avg_mean
    _surgery_round(rng, clone, eager)
    _compiled(clone.forward)


def test_threads_with_separate_models(rng):
    pairs = []
    for _ in range(4):
        eager = Net()
        model = JNet()
        model.copyparams(eager)
        pairs.append((eager, model))
    inputs = [[_r(rng, 1 + i % 2, 3) for i in range(6)] for _ in pairs]
    errors = []

    def work(eager, model, xs):
        try:
            with chainer.no_backprop_mode():
                for x in xs:
                    expected = eager(x)
                    testing.assert_results_equal(model(x), expected)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.FallbackWarning)
        threads = [threading.Thread(target=work, args=p + (xs,))
                   for p, xs in zip(pairs, inputs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    for eager, model in pairs:
        _same_state(model, eager)
