"""A copy of a model whose forward was jitted on the instance
(``model.forward = chainerjit.jit(model.forward)``) runs its own forward,
with its own parameters and state: ``model.copy()`` (each mode),
``copy.copy``, ``copy.deepcopy``, pickling and ``to_device``; compared
with eager twins over several calls with new values."""

import copy
import pickle

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit

F32 = numpy.float32


class Tagger(chainer.Chain):
    """An LSTM whose state moves with every call, as the language models
    of Chainer's examples keep it."""

    def __init__(self):
        super(Tagger, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(3, 4)
            self.out = L.Linear(4, 2)

    def forward(self, x):
        return self.out(self.lstm(x))


def _models():
    numpy.random.seed(0)
    jitted, twin = Tagger(), Tagger()
    twin.copyparams(jitted)
    jitted.forward = chainerjit.jit(jitted.forward)
    return jitted, twin


def _inputs(rng, n=4):
    return [rng.standard_normal((2, 3)).astype(F32) for _ in range(n)]


def _assert_same_runs(jitted, twin, xs):
    with chainer.no_backprop_mode():
        for x in xs:
            numpy.testing.assert_allclose(jitted(x).array, twin(x).array,
                                          rtol=1e-5, atol=1e-6)


COPIES = {
    'copy_share': lambda m: m.copy(),
    'copy_copy': lambda m: m.copy(mode='copy'),
    'copy_module': copy.copy,
    'deepcopy': copy.deepcopy,
    'pickle': lambda m: pickle.loads(pickle.dumps(m)),
}


@pytest.mark.parametrize('how', sorted(COPIES))
def test_a_copy_runs_its_own_forward_and_state(rng, how):
    jitted, twin = _models()
    xs = _inputs(rng)
    _assert_same_runs(jitted, twin, xs[:2])  # compiled, state moved
    jitted_copy, twin_copy = COPIES[how](jitted), COPIES[how](twin)
    jitted_copy.lstm.reset_state()
    twin_copy.lstm.reset_state()
    _assert_same_runs(jitted_copy, twin_copy, xs)
    # The original's state is its own: it did not move with the copy's.
    numpy.testing.assert_array_equal(jitted.lstm.h.array, twin.lstm.h.array)
    _assert_same_runs(jitted, twin, xs)
    assert jitted_copy.forward is not jitted.forward
    assert jitted_copy.forward.bound_to(jitted_copy)


def test_a_copy_called_through_forward_reads_its_own_parameters(rng):
    jitted, twin = _models()
    jitted_copy, twin_copy = jitted.copy(mode='copy'), twin.copy(mode='copy')
    for m in (jitted_copy, twin_copy):
        m.out.W.array[...] *= -2.0
    for x in _inputs(rng):
        with chainer.no_backprop_mode():
            numpy.testing.assert_allclose(
                jitted_copy.forward(x).array, twin_copy.forward(x).array,
                rtol=1e-5, atol=1e-6)
            numpy.testing.assert_allclose(
                jitted.forward(x).array, twin.forward(x).array,
                rtol=1e-5, atol=1e-6)


def test_an_evaluation_copy_leaves_training_alone(rng):
    """Chainer's training scripts validate on ``eval_model =
    model.copy()``: the losses on the copy are the copy's, and training
    goes on with the model's own state."""
    jitted, twin = _models()
    xs, ts = _inputs(rng), [rng.randint(0, 2, 2) for _ in range(4)]
    for model in (jitted, twin):
        model.cleargrads()
        loss = sum(F.softmax_cross_entropy(model(x), t)
                   for x, t in zip(xs, ts))
        loss.backward()
    eval_jitted, eval_twin = jitted.copy(), twin.copy()
    eval_jitted.lstm.reset_state()
    eval_twin.lstm.reset_state()
    _assert_same_runs(eval_jitted, eval_twin, xs)
    _assert_same_runs(jitted, twin, xs)
    for p, q in zip(jitted.params(), twin.params()):
        numpy.testing.assert_allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6)


def test_to_device_keeps_the_model_its_forward_is_bound_to(rng):
    jitted, twin = _models()
    jitted.to_device('@numpy')
    twin.to_device('@numpy')
    assert jitted.forward.bound_to(jitted)
    _assert_same_runs(jitted, twin, _inputs(rng))


def test_uninstalled_copies_are_chainers(rng):
    from chainerjit import fastpaths
    jitted, _ = _models()
    fastpaths.uninstall('copies')
    try:
        assert '__copy__' not in vars(chainer.Link)
    finally:
        fastpaths.install('copies')
    assert chainer.Link.__copy__ is not None
    assert copy.copy(jitted).forward.bound_to(jitted) is False
