"""Whole models, jitted, against eager Chainer (inference)."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from chainerjit import testing
from examples import models


def _calls(rng, shape, n=3, dtype=numpy.float32):
    return [(rng.randn(*shape).astype(dtype),) for _ in range(n)]


@pytest.mark.parametrize('batch', [1, 64])
def test_mlp(rng, batch):
    model = models.MLP()
    testing.assert_jit_matches_eager(
        model.forward, _calls(rng, (batch, 784)), expect_entries=1,
        lowered=['LinearFunction', 'ReLU'])


def _randomize_batch_norm(model, rng):
    for link in model.links():
        if isinstance(link, L.BatchNormalization):
            link.avg_mean[...] = rng.randn(*link.avg_mean.shape)
            link.avg_var[...] = rng.uniform(0.5, 2, link.avg_var.shape)
            link.gamma.array[...] = rng.uniform(0.5, 2, link.gamma.shape)
            link.beta.array[...] = rng.randn(*link.beta.shape)


@pytest.mark.parametrize('size', [8, 28])
def test_lenet_with_batch_normalization(rng, size):
    model = models.LeNet()
    _randomize_batch_norm(model, rng)
    with chainer.using_config('train', False):
        testing.assert_jit_matches_eager(
            model.forward, _calls(rng, (4, 1, size, size)),
            rtol=1e-4, atol=1e-5, expect_entries=1)


def test_lenet_batch_normalization_statistics_are_read_each_call(rng):
    model = models.LeNet()
    jitted = models.LeNet()
    eager_forward = model.forward
    jitted.forward = testing.api.jit(jitted.forward)
    (x,), = _calls(rng, (2, 1, 8, 8), n=1)
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        eager_forward(x)  # initializes fc1
        jitted.copyparams(model)
        jitted.forward(x)
        for m in (model, jitted):
            _randomize_batch_norm(m, numpy.random.RandomState(5))
        testing.assert_results_equal(jitted.forward(x), eager_forward(x),
                                     rtol=1e-4, atol=1e-5)


class LSTMCell(chainer.Chain):
    """One step of an LSTM: ``(x, h, c) -> (h', c')``."""

    def __init__(self, n_in=6, n_units=5):
        super(LSTMCell, self).__init__()
        with self.init_scope():
            self.upward = L.Linear(n_in, 4 * n_units)
            self.lateral = L.Linear(n_units, 4 * n_units, nobias=True)

    def forward(self, x, h, c):
        c, h = F.lstm(c, self.upward(x) + self.lateral(h))
        return h, c


def test_lstm_cell_step(rng):
    cell = LSTMCell()

    def call():
        return (rng.randn(3, 6).astype(numpy.float32),
                rng.randn(3, 5).astype(numpy.float32),
                rng.randn(3, 5).astype(numpy.float32))

    testing.assert_jit_matches_eager(
        cell.forward, [call() for _ in range(3)], expect_entries=1)


def test_stateless_lstm_link(rng):
    link = L.StatelessLSTM(6, 5)

    def call():
        return (rng.randn(3, 5).astype(numpy.float32),
                rng.randn(3, 5).astype(numpy.float32),
                rng.randn(3, 6).astype(numpy.float32))

    testing.assert_jit_matches_eager(
        link.forward, [call() for _ in range(3)], expect_entries=1)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_transformer_encoder_block(rng, dtype):
    block = models.EncoderBlock()
    if dtype == numpy.float64:
        for p in block.params():
            p.array = p.array.astype(numpy.float64)
    calls = _calls(rng, (2, 7, 16), dtype=dtype) + _calls(
        rng, (3, 5, 16), dtype=dtype)
    # The batch and the steps changed in one call: one entry serves both.
    testing.assert_jit_matches_eager(
        block.forward, calls, rtol=1e-4, atol=1e-5, expect_entries=1)


def test_transformer_encoder_block_with_mask(rng):
    block = models.EncoderBlock()

    def call():
        x = rng.randn(2, 6, 16).astype(numpy.float32)
        mask = rng.uniform(size=(2, 6)) > 0.3
        mask[:, 0] = True
        return x, mask

    testing.assert_jit_matches_eager(
        block.forward, [call() for _ in range(3)], rtol=1e-4, atol=1e-5,
        expect_entries=1)
