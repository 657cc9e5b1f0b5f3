"""Fusing a linear layer with its activation, and an inference
convolution with its batch normalization: before/after IR, results,
gradients and ONNX against eager Chainer."""

import re

import chainer
import chainer.functions as F
import numpy
import pytest

from chainerjit import testing
from chainerjit.passes import fuse
from examples import models


def _text(graph):
    return re.sub(r'  # .*', '', str(graph))


def _mlp_calls(rng, n=3):
    return [(rng.standard_normal((4, 784)).astype(numpy.float32),)
            for _ in range(n)]


def test_each_linear_and_relu_become_one_node(rng):
    numpy.random.seed(0)
    jitted = testing.assert_jit_matches_eager(models.MLP().forward,
                                              _mlp_calls(rng))
    text = _text(jitted.cache_entries()[0].graph)
    assert text.count('LinearFunction+ReLU(') == 2
    assert 'ReLU(' not in text.replace('+ReLU(', '')
    assert text.count('LinearFunction(') == 1  # the last layer


def test_fused_gradients_match_eager(rng):
    def f(x, W, b, V):
        return F.sigmoid(F.linear(F.tanh(F.linear(x, W, b)), V))
    calls = [(rng.standard_normal((3, 4)).astype(numpy.float32),
              rng.standard_normal((5, 4)).astype(numpy.float32),
              rng.standard_normal(5).astype(numpy.float32),
              rng.standard_normal((2, 5)).astype(numpy.float32))
             for _ in range(3)]
    jitted = testing.assert_jit_grads_match_eager(f, calls)
    text = _text(jitted.cache_entries()[0].graph)
    assert 'LinearFunction+Tanh' in text and 'LinearFunction+Sigmoid' in text


def test_a_product_read_elsewhere_is_not_fused(rng):
    def f(x, W):
        h = F.linear(x, W)
        return F.relu(h) + h
    calls = [(rng.standard_normal((3, 4)).astype(numpy.float32),
              rng.standard_normal((5, 4)).astype(numpy.float32))
             for _ in range(3)]
    jitted = testing.assert_jit_matches_eager(f, calls)
    graph = jitted.cache_entries()[0].graph
    assert '+ReLU' not in str(graph)
    assert fuse.fuse_linear_activation(graph) == (graph, False)


def test_fused_layers_export_to_onnx(rng):
    pytest.importorskip('onnxruntime')
    numpy.random.seed(0)
    testing.assert_onnx_matches_eager(models.MLP().forward, _mlp_calls(rng),
                                      rtol=1e-4, atol=1e-5)


# --- convolution + test-mode batch normalization -----------------------------

def _lenet_calls(rng, n=3):
    return [(rng.standard_normal((4, 1, 8, 8)).astype(numpy.float32),)
            for _ in range(n)]


def _lenet():
    numpy.random.seed(0)
    model = models.LeNet()
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        model(numpy.zeros((1, 1, 8, 8), numpy.float32))  # sizes fc1
    # Statistics other than the initial 0 and 1, so that folding matters.
    rng = numpy.random.RandomState(5)
    for bn in (model.bn1, model.bn2):
        bn.avg_mean[...] = rng.standard_normal(bn.avg_mean.shape)
        bn.avg_var[...] = rng.uniform(0.5, 2.0, bn.avg_var.shape)
        bn.gamma.array[...] = rng.uniform(0.5, 1.5, bn.gamma.shape)
        bn.beta.array[...] = rng.standard_normal(bn.beta.shape)
    return model


def _inference(fn, calls, **kwargs):
    with chainer.using_config('train', False):
        return testing.assert_jit_matches_eager(fn, calls, rtol=1e-5,
                                                atol=1e-5, **kwargs)


def test_each_inference_convolution_takes_in_its_normalization(rng):
    jitted = _inference(_lenet().forward, _lenet_calls(rng))
    text = _text(jitted.cache_entries()[0].graph)
    assert text.count('Convolution2DFunction+FixedBatchNormalization') == 2
    assert text.count('FixedBatchNormalization') == 2


def test_statistics_changed_after_compiling_are_read_on_each_call(rng):
    model = _lenet()
    calls = _lenet_calls(rng)
    jitted = _inference(model.forward, calls)
    model.bn1.avg_var *= 3
    model.bn2.beta.array += 1
    _inference(model.forward, calls, jitted=jitted)
    assert jitted.cache_info().currsize == 1


def test_training_and_float16_keep_the_normalization(rng):
    model = _lenet()
    with chainer.using_config('train', False):  # backprop enabled
        jitted = testing.assert_jit_grads_match_eager(
            model.forward, _lenet_calls(rng), rtol=1e-4, atol=1e-4)
    assert '+FixedBatchNormalization' not in str(
        jitted.cache_entries()[0].graph)

    def f(x, W, gamma, beta, mean, var):
        y = F.convolution_2d(x, W, pad=1)
        return F.fixed_batch_normalization(y, gamma, beta, mean, var)
    half = [(rng.standard_normal((2, 3, 5, 5)).astype(numpy.float16),
             rng.standard_normal((4, 3, 3, 3)).astype(numpy.float16),
             numpy.ones(4, numpy.float16), numpy.zeros(4, numpy.float16),
             numpy.zeros(4, numpy.float16), numpy.ones(4, numpy.float16))
            for _ in range(2)]
    jitted = _inference(f, half)
    assert '+FixedBatchNormalization' not in str(
        jitted.cache_entries()[0].graph)


def test_a_convolution_read_elsewhere_keeps_its_normalization(rng):
    def f(x, W, gamma, beta, mean, var):
        y = F.convolution_2d(x, W, pad=1)
        return F.fixed_batch_normalization(y, gamma, beta, mean, var) + y
    calls = [(rng.standard_normal((2, 3, 5, 5)).astype(numpy.float32),
              rng.standard_normal((4, 3, 3, 3)).astype(numpy.float32),
              rng.uniform(0.5, 1.5, 4).astype(numpy.float32),
              rng.standard_normal(4).astype(numpy.float32),
              rng.standard_normal(4).astype(numpy.float32),
              rng.uniform(0.5, 2, 4).astype(numpy.float32))
             for _ in range(3)]
    jitted = _inference(f, calls)
    graph = jitted.cache_entries()[0].graph
    assert '+FixedBatchNormalization' not in str(graph)
    assert fuse.fuse_conv_batchnorm(graph) == (graph, False)


def test_fused_convolutions_export_to_onnx(rng):
    pytest.importorskip('onnxruntime')
    with chainer.using_config('train', False):
        testing.assert_onnx_matches_eager(_lenet().forward, _lenet_calls(rng),
                                          rtol=1e-4, atol=1e-5)
