"""The benchmark competitors (NumPy floors, PyTorch twins) against
eager Chainer."""

import copy

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from benchmarks import competitors
from examples import models

TOLERANCE = dict(rtol=1e-4, atol=1e-5)
LR = 0.1


def _inputs(*shape):
    return numpy.random.RandomState(1).randn(*shape).astype(numpy.float32)


def _labels(n, n_out=10):
    return numpy.random.RandomState(2).randint(0, n_out, n).astype(
        numpy.int32)


def _eager(model, *inputs):
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        return model(*inputs).array


def _randomize_batch_norm(model):
    rng = numpy.random.RandomState(3)
    for link in model.links():
        if isinstance(link, L.BatchNormalization):
            link.avg_mean[...] = rng.randn(*link.avg_mean.shape)
            link.avg_var[...] = rng.uniform(0.5, 2, link.avg_var.shape)
            link.gamma.array[...] = rng.uniform(0.5, 2, link.gamma.shape)
            link.beta.array[...] = rng.randn(*link.beta.shape)


def _randomize_vectors(model):
    """Biases and layer normalization scales start as zeros and ones;
    random ones catch misplaced or stale vectors."""
    rng = numpy.random.RandomState(4)
    for link in model.links():
        for name in ('b', 'beta'):
            param = getattr(link, name, None)
            if isinstance(param, chainer.Parameter):
                param.array[...] = rng.uniform(-0.5, 0.5, param.shape)
        if isinstance(link, L.LayerNormalization):
            link.gamma.array[...] = rng.uniform(0.5, 2, link.gamma.shape)


def _mlp():
    return models.MLP(), _inputs(4, 784)


def _lstm():
    return models.LSTMClassifier(n_in=64, n_hidden=128), _inputs(5, 3, 64)


def _lenet(size=28):
    model, x = models.LeNet(), _inputs(2, 1, size, size)
    _eager(model, x)  # initializes fc1
    _randomize_batch_norm(model)
    return model, x


def _encoder():
    return models.EncoderBlock(), _inputs(2, 7, 16)


def _wide_encoder():
    # d_head (12), heads, batch and length all differ, to catch a mixed
    # up head layout.
    return models.EncoderBlock(d_model=24, n_heads=2, d_ff=40), \
        _inputs(3, 5, 24)


# case name -> (model name in the factory names, builder)
CASES = {'mlp': ('mlp', _mlp), 'lstm': ('lstm', _lstm),
         'lenet': ('lenet', _lenet), 'lenet_8x8': ('lenet', lambda: _lenet(8)),
         'encoder': ('encoder', _encoder),
         'wide_encoder': ('encoder', _wide_encoder)}


def _build(case):
    numpy.random.seed(0)
    model, x = CASES[case][1]()
    _randomize_vectors(model)
    return model, x


def _factory(case, kind, backend):
    if backend == 'torch':
        pytest.importorskip('torch')
    name = CASES[case][0]
    return getattr(competitors, '%s_%s_%s' % (name, kind, backend))


def _array(y):
    return y.detach().numpy() if hasattr(y, 'detach') else numpy.asarray(y)


def _snapshot(model):
    return {name: p.array.copy() for name, p in model.namedparams()}


def _assert_params_equal(actual, expected):
    assert actual.keys() == expected.keys()
    for name in expected:
        numpy.testing.assert_array_equal(actual[name], expected[name])


@pytest.mark.parametrize('backend', ['numpy', 'torch'])
@pytest.mark.parametrize('case', sorted(CASES))
def test_inference_matches_eager(case, backend):
    model, x = _build(case)
    before = _snapshot(model)
    call = _factory(case, 'inference', backend)(model, x)
    first = _array(call()).copy()
    numpy.testing.assert_allclose(first, _eager(model, x), **TOLERANCE)
    # A second call reuses the buffers and gives the same result.
    numpy.testing.assert_array_equal(_array(call()), first)
    _assert_params_equal(_snapshot(model), before)


def _eager_steps(model, x, t, n_steps):
    """``(loss, params)`` after each of ``n_steps`` eager SGD steps."""
    optimizer = chainer.optimizers.SGD(LR)
    optimizer.setup(model)
    for _ in range(n_steps):
        model.cleargrads()
        loss = F.softmax_cross_entropy(model(x), t)
        loss.backward()
        optimizer.update()
        params = {name.lstrip('/'): p.array.copy()
                  for name, p in model.namedparams()}
        yield float(loss.array), params


@pytest.mark.parametrize('name,backend', [
    ('mlp', 'numpy'), ('mlp', 'torch'), ('lstm', 'numpy'), ('lstm', 'torch'),
    ('lenet', 'torch')])
def test_training_steps_match_eager(name, backend):
    model, x = _build(name)
    # One label per example in the batch (LSTM inputs are (T, B, n)).
    t = _labels(x.shape[1] if name == 'lstm' else x.shape[0])
    before = _snapshot(model)
    step = _factory(name, 'training', backend)(model, x, t, LR)
    _assert_params_equal(_snapshot(model), before)
    eager = _eager_steps(copy.deepcopy(model), x, t, n_steps=2)
    for expected_loss, expected in eager:
        loss = float(_array(step()))
        assert loss == pytest.approx(expected_loss, rel=1e-5, abs=1e-6)
        params = {k: _array(v) for k, v in step.params.items()}
        assert params.keys() == expected.keys()
        for key in expected:
            numpy.testing.assert_allclose(params[key], expected[key],
                                          **TOLERANCE, err_msg=key)
    # The steps train the competitor's own copy of the weights.
    _assert_params_equal(_snapshot(model), before)
    last = {'lstm': 'out/W', 'lenet': 'fc3/W'}.get(name, 'l3/W')
    assert not numpy.allclose(params[last], before['/' + last])


def test_lenet_numpy_rejects_sizes_it_cannot_pool():
    numpy.random.seed(0)
    model, x = models.LeNet(), _inputs(1, 1, 30, 30)
    _eager(model, x)
    with pytest.raises(ValueError):
        competitors.lenet_inference_numpy(model, x)


def test_torch_twins_are_none_without_torch(monkeypatch):
    monkeypatch.setattr(competitors, '_torch', lambda: None)
    model, x = _build('mlp')
    t = _labels(4)
    assert competitors.mlp_inference_torch(model, x) is None
    assert competitors.mlp_training_torch(model, x, t, LR) is None
    assert competitors.lstm_inference_torch(model, x) is None
    assert competitors.lstm_training_torch(model, x, t, LR) is None
    assert competitors.lenet_inference_torch(model, x) is None
    assert competitors.lenet_training_torch(model, x, t, LR) is None
    assert competitors.encoder_inference_torch(model, x) is None
