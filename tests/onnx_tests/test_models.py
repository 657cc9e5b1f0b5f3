"""Whole models exported to ONNX and run in onnxruntime."""

import numpy
import pytest

from chainerjit import testing
from examples import models


pytest.importorskip('onnxruntime')


def _calls(rng, shapes):
    return [(rng.randn(*s).astype(numpy.float32),) for s in shapes]


def test_mlp(rng):
    model = models.MLP()
    testing.assert_onnx_matches_eager(
        model.forward, _calls(rng, [(4, 784)] * 2),
        lowered=['LinearFunction', 'ReLU'])


def test_mlp_with_a_dynamic_batch(rng):
    model = models.MLP()
    testing.assert_onnx_matches_eager(
        model.forward, _calls(rng, [(4, 784), (1, 784), (9, 784)]),
        dynamic_batch=True)


def _lenet():
    model = models.LeNet()
    rng = numpy.random.RandomState(1)
    for bn in (model.bn1, model.bn2):
        bn.avg_mean[...] = rng.standard_normal(bn.avg_mean.shape)
        bn.avg_var[...] = rng.uniform(0.5, 2.0, bn.avg_var.shape)
    return model


def test_lenet(rng):
    # Test mode: FixedBatchNormalization with the running statistics.
    testing.assert_onnx_matches_eager(
        _lenet().forward, _calls(rng, [(3, 1, 8, 8)] * 2),
        rtol=1e-4, atol=1e-5,
        lowered=['Convolution2DFunction', 'FixedBatchNormalization',
                 'MaxPoolingND', 'LinearFunction'])


def test_lenet_with_a_dynamic_batch(rng):
    testing.assert_onnx_matches_eager(
        _lenet().forward, _calls(rng, [(3, 1, 8, 8), (1, 1, 8, 8),
                                       (5, 1, 8, 8)]),
        rtol=1e-4, atol=1e-5, dynamic_batch=True)


def test_encoder_block(rng):
    testing.assert_onnx_matches_eager(
        models.EncoderBlock().forward, _calls(rng, [(2, 5, 16)] * 2),
        rtol=1e-4, atol=1e-5,
        lowered=['LinearFunction', 'LayerNormalization', 'Softmax'])


def test_encoder_block_with_a_dynamic_batch(rng):
    testing.assert_onnx_matches_eager(
        models.EncoderBlock().forward,
        _calls(rng, [(2, 5, 16), (1, 5, 16), (3, 5, 16)]),
        rtol=1e-4, atol=1e-5, dynamic_batch=True)
