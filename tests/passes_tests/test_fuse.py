"""Fusing a linear layer with its activation: before/after IR, results,
gradients and ONNX against eager Chainer."""

import re

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
