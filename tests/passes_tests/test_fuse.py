"""Fusing a linear layer with its activation, an LSTM step with its
lateral product and sum, and an inference convolution with its batch
normalization: before/after IR, results, gradients and ONNX against eager
Chainer."""

import re

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing
from chainerjit.ops import rnn
from chainerjit.passes import fuse
from examples import models
from tests.differential import check_unchanged
from tests.differential import rand


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


# --- LSTM step: lateral product + sum + LSTM ---------------------------

def _lstm_steps(xs, c, h, Wx, b, Wh, lateral_first=False):
    """``L.LSTM``'s step by hand from a given state, over the steps of
    ``xs``; returns the last ``h`` and ``c``."""
    for t in range(xs.shape[0]):
        u, lateral = F.linear(xs[t], Wx, b), F.linear(h, Wh)
        c, h = F.lstm(c, lateral + u if lateral_first else u + lateral)
    return h, c


def _lstm_calls(rng, dtype=numpy.float32, batch=3, state_batch=3, n=3):
    def a(*shape):
        return rng.standard_normal(shape).astype(dtype)
    return [(a(4, batch, 5), a(state_batch, 6), a(batch, 6), a(24, 5), a(24),
             a(24, 6)) for _ in range(n)]


def test_an_lstm_step_takes_in_its_lateral_product_and_sum(rng):
    numpy.random.seed(0)
    model = models.LSTMClassifier(n_in=5, n_hidden=6)
    calls = [(rng.standard_normal((7, 3, 5)).astype(numpy.float32),)
             for _ in range(3)]
    jitted = testing.assert_jit_matches_eager(model.forward, calls, rtol=0,
                                              atol=0)
    text = _text(jitted.cache_entries()[0].graph)
    # The first step has no lateral term; the loop's body is one node.
    assert text.count('LinearFunction+Add+LSTM(') == 1
    assert 'Add(' not in text.replace('+Add+', '')


def _stacked_product_is_exact(xs, W):
    """Does this machine's BLAS give ``gy W`` for all of ``xs``' steps at
    once, (T * B) rows, the bits of one product per step's B rows? (Not
    for some shapes with OpenBLAS on an AMD EPYC with AVX-512.)"""
    gy = numpy.random.RandomState(1).standard_normal(
        (xs.shape[0] * xs.shape[1], W.shape[0])).astype(W.dtype)
    steps = [gy[k:k + xs.shape[1]].dot(W)
             for k in range(0, len(gy), xs.shape[1])]
    return numpy.array_equal(gy.dot(W), numpy.concatenate(steps))


def _assert_lstm_steps_match_eager(f, calls):
    """Values and gradients of ``f(xs, c, h, Wx, b, Wh)`` jitted against
    eager: bit for bit, but for the weights' gradients (``Wx``, ``b``,
    ``Wh``), which are summed over all steps at once: the hoisted input
    projection's (``passes/hoist.py``) and the recurrent weight's (one
    product after the loop, ``autodiff``). The gradient of ``xs`` is the
    hoisted projection's product over all steps' rows at once: bit for
    bit where the BLAS sums those rows as it does a step's, else within
    rounding."""
    jitted = chainerjit.jit(f)
    for i, args in enumerate(calls):
        exact = (0, 1, 2) if _stacked_product_is_exact(args[0], args[3]) \
            else (1, 2)
        eager = [chainer.Variable(a) for a in args]
        jit = [chainer.Variable(a) for a in args]
        expected, actual = f(*eager), jitted(*jit)
        for e, a in zip(expected, actual):
            assert a.array.tobytes() == e.array.tobytes()
        for outputs in (expected, actual):
            (F.sum(outputs[0] * outputs[0]) + F.sum(outputs[1])).backward()
        for k, (e, a) in enumerate(zip(eager, jit)):
            if k not in exact:
                numpy.testing.assert_allclose(a.grad, e.grad, rtol=1e-5,
                                              atol=1e-6)
            else:
                assert a.grad.tobytes() == e.grad.tobytes(), k
    return jitted


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('lateral_first', [False, True])
def test_fused_lstm_steps_give_eagers_values_and_grads(
        rng, dtype, lateral_first):
    def f(xs, c, h, Wx, b, Wh):
        return _lstm_steps(xs, c, h, Wx, b, Wh, lateral_first)
    jitted = _assert_lstm_steps_match_eager(f, _lstm_calls(rng, dtype))
    assert 'LinearFunction+Add+LSTM' in str(jitted.cache_entries()[0].graph)
    with chainer.no_backprop_mode():
        testing.assert_jit_matches_eager(f, _lstm_calls(rng, dtype), rtol=0,
                                         atol=0)


def test_a_fused_lstm_step_with_a_larger_state_keeps_its_rows(rng):
    """A shrinking batch: ``c`` has rows past ``x``'s, which the step
    passes through (and their gradient too)."""
    jitted = _assert_lstm_steps_match_eager(
        _lstm_steps, _lstm_calls(rng, state_batch=5))
    assert 'LinearFunction+Add+LSTM' in str(jitted.cache_entries()[0].graph)


def test_lstm_steps_the_fusion_does_not_take_stay_apart(rng):
    def read_elsewhere(xs, c, h, Wx, b, Wh):
        for t in range(xs.shape[0]):
            lateral = F.linear(h, Wh)
            c, h = F.lstm(c, F.linear(xs[t], Wx, b) + lateral)
            h = h + lateral[:, :6]
        return h

    for f in (read_elsewhere, _steps_with_lateral_bias):
        jitted = testing.assert_jit_grads_match_eager(f, _lstm_calls(rng))
        graph = jitted.cache_entries()[0].graph
        assert '+Add+LSTM' not in str(graph)
        assert fuse.fuse_lstm_step(graph) == (graph, False)
    half = [tuple(a.astype(numpy.float16) for a in call)
            for call in _lstm_calls(rng)]
    jitted = testing.assert_jit_matches_eager(_lstm_steps, half)
    assert '+Add+LSTM' not in str(jitted.cache_entries()[0].graph)


def _steps_with_lateral_bias(xs, c, h, Wx, b, Wh):
    for t in range(xs.shape[0]):
        c, h = F.lstm(c, F.linear(xs[t], Wx) + F.linear(h, Wh, b))
    return h


def test_fused_lstm_steps_export_to_onnx(rng):
    pytest.importorskip('onnxruntime')
    testing.assert_onnx_matches_eager(_lstm_steps, _lstm_calls(rng, n=2),
                                      rtol=1e-5, atol=1e-6)
    jitted = chainerjit.jit(_lstm_steps)
    jitted(*_lstm_calls(rng, n=1)[0])
    assert '+Add+LSTM' in str(jitted.cache_entries()[0].graph)


@pytest.mark.parametrize('stacking_keeps_bits', [False, True])
def test_a_hoisted_projection_that_rounds_lets_the_step_swap_its_product(
        rng, monkeypatch, stacking_keeps_bits):
    """Where the BLAS gives the swapped product other bits, the step keeps
    eager's order, unless its input projection, hoisted, already rounds
    otherwise than eager's (then it takes the faster order, forward and
    backward, within rounding)."""
    from chainerjit.ops import linear as linear_ops
    monkeypatch.setattr(linear_ops, '_AGREES', {})
    monkeypatch.setattr(linear_ops, '_probe_swapped_product',
                        lambda *key: False)
    monkeypatch.setattr(linear_ops, '_probe_stacked_product',
                        lambda *key: stacking_keeps_bits)
    made = []
    fused_step = rnn.fused_step

    def spy(product, rounded=False):
        made.append((product, rounded))
        return fused_step(product, rounded)
    monkeypatch.setattr(rnn, 'fused_step', spy)
    numpy.random.seed(0)
    model = models.LSTMClassifier(n_in=5, n_hidden=16)
    calls = [(rng.standard_normal((6, 16, 5)).astype(numpy.float32),)
             for _ in range(2)]
    testing.assert_jit_matches_eager(model.forward, calls, rtol=1e-5,
                                     atol=1e-6)
    testing.assert_jit_grads_match_eager(model.forward, calls, rtol=1e-4,
                                         atol=1e-5)
    assert made and all(rounded is not stacking_keeps_bits
                        for _, rounded in made)
    h = rng.standard_normal((16, 16)).astype(numpy.float32)
    W = model.lstm.lateral.W.array
    product = made[0][0](h, W)
    assert product.flags.f_contiguous is not stacking_keeps_bits
    numpy.testing.assert_allclose(product, h.dot(W.T), rtol=1e-5, atol=1e-5)


# --- adversarial: linear + activation, the backward and ONNX export ----------


@pytest.mark.adversarial
def test_fused_product_also_returned(rng):
    def f(x, w, b):
        p = F.linear(x, w, b)
        return F.relu(p), p
    check_unchanged(f, [(rand(rng, 3, 4), rand(rng, 5, 4),
                         rand(rng, 5)) for _ in range(3)])
    testing.assert_jit_grads_match_eager(
        f, [(rand(rng, 3, 4), rand(rng, 5, 4), rand(rng, 5))
            for _ in range(3)])


@pytest.mark.adversarial
@pytest.mark.parametrize('act', [F.relu, F.tanh, F.sigmoid])
@pytest.mark.parametrize('rows', [1, 64, 65])
def test_fused_activation_grads(rng, act, rows):
    def f(x, w, b):
        return act(F.linear(x, w, b))
    calls = [(rand(rng, rows, 4), rand(rng, 5, 4), rand(rng, 5))
             for _ in range(3)]
    check_unchanged(f, calls)
    testing.assert_jit_grads_match_eager(f, calls)


@pytest.mark.adversarial
def test_fused_chained_activations(rng):
    def f(x, w):
        return F.sigmoid(F.tanh(F.relu(F.linear(x, w))))
    calls = [(rand(rng, 3, 4), rand(rng, 5, 4)) for _ in range(3)]
    check_unchanged(f, calls)
    testing.assert_jit_grads_match_eager(f, calls)


@pytest.mark.adversarial
def test_fused_3d_linear(rng):
    def f(x, w, b):
        return F.tanh(F.linear(x, w, b, n_batch_axes=2))
    calls = [(rand(rng, 2, 3, 4), rand(rng, 5, 4), rand(rng, 5))
             for _ in range(3)]
    check_unchanged(f, calls)
    testing.assert_jit_grads_match_eager(f, calls)


@pytest.mark.adversarial
def test_double_backprop_through_fused_is_clear_error(rng):
    def f(x, w):
        return F.tanh(F.linear(x, w))
    jitted = chainerjit.jit(f)
    x = rand(rng, 3, 4)
    w = rand(rng, 5, 4)
    results = []
    for fn in (f, jitted, jitted):
        xv = chainer.Variable(x.copy())
        wv = chainer.Variable(w.copy())
        y = fn(xv, wv)
        try:
            gx, = chainer.grad([F.sum(y)], [xv],
                               enable_double_backprop=True)
            F.sum(gx * gx).backward()
        except NotImplementedError as e:  # a clear error is acceptable
            assert fn is jitted and 'double backprop' in str(e)
            continue
        results.append(wv.grad)
    for r in results[1:]:
        numpy.testing.assert_allclose(r, results[0], rtol=1e-5, atol=1e-6)


@pytest.mark.adversarial
@pytest.mark.parametrize('act', [F.relu, F.tanh, F.sigmoid])
def test_fused_backward_keeps_user_gy_and_outputs(rng, act):
    def f(x, w, b):
        return act(F.linear(x, w, b))
    jitted = chainerjit.jit(f)
    for _ in range(3):
        arrays = [rand(rng, 3, 4), rand(rng, 5, 4), rand(rng, 5)]
        grads = []
        for fn in (f, jitted):
            args = [chainer.Variable(a.copy()) for a in arrays]
            y = fn(*args)
            before = y.array.copy()
            g = numpy.random.RandomState(7).standard_normal(
                (3, 5)).astype(numpy.float32)
            y.grad = g
            y.backward()
            numpy.testing.assert_array_equal(
                g, numpy.random.RandomState(7).standard_normal(
                    (3, 5)).astype(numpy.float32))
            numpy.testing.assert_array_equal(y.array, before)
            grads.append([a.grad for a in args])
        for a, e in zip(grads[1], grads[0]):
            numpy.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


@pytest.mark.adversarial
def test_fused_and_hoisted_export_to_onnx(rng):
    pytest.importorskip('onnxruntime')

    def f(xs, w, b):
        h = F.relu(F.linear(xs[0], w, b))
        for t in range(xs.shape[0]):
            h = F.tanh(F.linear(xs[t], w, b) + h)
        return F.sigmoid(F.linear(h, w, b))
    calls = [(rand(rng, n, 3, 4), rand(rng, 4, 4), rand(rng, 4))
             for n in (3, 3, 5)]
    testing.assert_onnx_matches_eager(f, calls, rtol=1e-4, atol=1e-5)
