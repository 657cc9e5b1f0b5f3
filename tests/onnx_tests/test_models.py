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
