"""The same models on CuPy (skipped where CuPy or a GPU is absent)."""

import warnings

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing
from examples import models


pytestmark = pytest.mark.gpu


def _on_gpu(model):
    return model.to_device('@cupy:0')


def _calls(shape, n=3):
    import cupy
    rng = cupy.random.RandomState(0)
    return [(rng.standard_normal(shape, dtype=numpy.float32),)
            for _ in range(n)]


def test_mlp_on_gpu():
    model = _on_gpu(models.MLP())
    testing.assert_jit_matches_eager(
        model.forward, _calls((8, 784)), rtol=1e-4, atol=1e-5,
        expect_entries=1, lowered=['LinearFunction', 'ReLU'])


def test_lenet_on_gpu_in_test_mode():
    model = _on_gpu(models.LeNet())
    with chainer.using_config('train', False):
        testing.assert_jit_matches_eager(
            model.forward, _calls((4, 1, 28, 28)), rtol=1e-4, atol=1e-5,
            expect_entries=1)


def test_moving_the_model_to_the_gpu_is_a_miss():
    model = models.MLP()
    model.forward = chainerjit.jit(model.forward)
    with chainer.no_backprop_mode():
        model.forward(numpy.zeros((2, 784), numpy.float32))
        _on_gpu(model)
        x, = _calls((2, 784), n=1)[0]
        y = model.forward(x)
    assert model.forward.cache_info().misses == 2
    assert chainer.backend.get_array_module(y) is not numpy


def test_reading_a_gpu_value_runs_eagerly():
    def f(x):
        return F.relu(x) * float(x.array.sum())

    jf = chainerjit.jit(f)
    x, = _calls((3, 4), n=1)[0]
    with chainer.no_backprop_mode(), warnings.catch_warnings(record=True) \
            as caught:
        warnings.simplefilter('always')
        jf(chainer.Variable(x))
    assert any(issubclass(w.category, chainerjit.FallbackWarning)
               for w in caught)
