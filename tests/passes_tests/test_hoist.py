"""Hoisting a loop's input projections: before/after IR, and results and
gradients against eager Chainer at several lengths."""

import re

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from chainerjit.passes import hoist
from tests.differential import check_unchanged
from tests.differential import rand


class RNN(chainer.Chain):
    """``h = tanh(W xs[t] + b + V h)`` over time axis 0."""

    axis = 0

    def __init__(self, reuse_step=False):
        super(RNN, self).__init__()
        self.reuse_step = reuse_step
        with self.init_scope():
            self.inp = L.Linear(4, 6)
            self.rec = L.Linear(6, 6, nobias=True)

    def forward(self, xs):
        h = self.xp.zeros((xs.shape[1], 6), numpy.float32)
        for t in range(xs.shape[0]):
            x = xs[t]
            h = F.tanh(self.inp(x) + self.rec(h))
            if self.reuse_step:
                h = h + F.sum(x) * 0.1
        return h


class BatchMajorRNN(RNN):
    """The same over time axis 1."""

    axis = 1

    def forward(self, xs):
        h = self.xp.zeros((xs.shape[0], 6), numpy.float32)
        for t in range(xs.shape[1]):
            h = F.tanh(self.inp(xs[:, t]) + self.rec(h))
        return h


def _jit_twin(model):
    twin = type(model)(model.reuse_step)
    twin.copyparams(model)
    twin.forward = chainerjit.jit(twin.forward)
    return twin


def _text(graph):
    return re.sub(r'  # .*', '', str(graph))


def _compiled_graph(model, xs):
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        model(xs)
    entry, = model.forward.cache_entries()
    return _text(entry.graph)


def test_the_projection_of_every_step_moves_before_the_loop(rng):
    model = _jit_twin(RNN())
    text = _compiled_graph(model, rng.standard_normal((5, 3, 4)).astype(
        numpy.float32))
    outside, body = text.split('body')
    assert re.search(r'f32\[T,3,6\] = LinearFunction\[steps=0\]\(xs, '
                     r'inp\.W, inp\.b\)', outside)
    assert 'IndexAt[index=[i]]' in body
    assert body.count('LinearFunction') == 1  # the recurrent one


@pytest.mark.parametrize('axis', [0, 1])
@pytest.mark.parametrize('array_input', [True, False])
def test_results_and_gradients_match_eager(rng, axis, array_input):
    eager = (RNN, BatchMajorRNN)[axis]()
    jitted = _jit_twin(eager)
    for length in (5, 5, 2, 9):
        shape = (length, 3, 4) if axis == 0 else (3, length, 4)
        xs = rng.standard_normal(shape).astype(numpy.float32)
        results, grads = [], []
        for model in (eager, jitted):
            model.cleargrads()
            x = xs if array_input else chainer.Variable(xs.copy())
            y = model(x)
            F.sum(y * y).backward()
            results.append(y.array)
            grads.append([p.grad for p in (model.inp.W, model.inp.b,
                                           model.rec.W)] +
                         ([] if array_input else [x.grad]))
        testing.assert_results_equal(results[1], results[0], 1e-5, 1e-6)
        for actual, expected in zip(grads[1], grads[0]):
            testing.assert_results_equal(actual, expected, 1e-5, 1e-6)
    assert 'steps=' in _text(jitted.forward.cache_entries()[0].graph)


def test_a_step_read_twice_is_not_hoisted(rng):
    model = _jit_twin(RNN(reuse_step=True))
    assert 'steps=' not in _compiled_graph(
        model, rng.standard_normal((5, 3, 4)).astype(numpy.float32))


def test_the_pass_leaves_loops_without_projections_unchanged(rng):
    def f(xs, w):
        h = xs[0]
        for t in range(xs.shape[0]):
            h = F.tanh(F.matmul(h, w)) + xs[t]
        return h

    calls = [(rng.standard_normal((n, 3, 3)).astype(numpy.float32),
              rng.standard_normal((3, 3)).astype(numpy.float32))
             for n in (3, 3, 5)]
    jitted = testing.assert_jit_matches_eager(f, calls)
    graph = jitted.cache_entries()[0].graph
    assert hoist.hoist_projections(graph) == (graph, False)


def test_a_hoisted_loop_exports_to_onnx(rng):
    pytest.importorskip('onnxruntime')
    numpy.random.seed(0)
    calls = [(rng.standard_normal((n, 3, 4)).astype(numpy.float32),)
             for n in (5, 5, 8, 1)]
    testing.assert_onnx_matches_eager(RNN().forward, calls, rtol=1e-4,
                                      atol=1e-5)


# --- adversarial: loops the hoisting must leave as eager computes them ------


class _RNN(chainer.Chain):

    def __init__(self, mode, nobias=False, dtype=numpy.float32):
        super(_RNN, self).__init__()
        self.mode = mode
        init = chainer.initializers.Normal(dtype=dtype)
        with self.init_scope():
            self.inp = L.Linear(4, 6, nobias=nobias, initialW=init,
                                initial_bias=None if nobias else
                                chainer.initializers.Zero(dtype))
            self.rec = L.Linear(6, 6, nobias=True, initialW=init)
            self.inp2 = L.Linear(4, 6, initialW=init,
                                 initial_bias=chainer.initializers.Zero(
                                     dtype))

    def forward(self, xs):
        mode = self.mode
        xp = self.xp
        T = xs.shape[1] if mode == 'axis1' else xs.shape[0]
        B = xs.shape[0] if mode == 'axis1' else xs.shape[1]
        h = xp.zeros((B, 6), xs.dtype)
        if mode == 'axis1':
            for t in range(T):
                h = F.tanh(self.inp(xs[:, t]) + self.rec(h))
        elif mode == 'reversed':
            for t in reversed(range(T)):
                h = F.tanh(self.inp(xs[t]) + self.rec(h))
        elif mode == 'reversed_index':
            for t in range(T):
                h = F.tanh(self.inp(xs[T - 1 - t]) + self.rec(h))
        elif mode == 'next':
            for t in range(T - 1):
                h = F.tanh(self.inp(xs[t + 1]) + self.rec(h))
        elif mode == 'xs_after':
            for t in range(T):
                h = F.tanh(self.inp(xs[t]) + self.rec(h))
            h = h + F.sum(xs, axis=(0, 2))[:, None]
        elif mode == 'xs_in_body':
            for t in range(T):
                h = F.tanh(self.inp(xs[t]) + self.rec(h)) + \
                    F.sum(xs) * 0.01
        elif mode == 'two_loops':
            for t in range(T):
                h = F.tanh(self.inp(xs[t]) + self.rec(h))
            for t in range(T):
                h = F.relu(self.inp(xs[t]) + self.rec(h))
        elif mode == 'two_projections':
            for t in range(T):
                h = F.tanh(self.inp(xs[t]) + self.inp2(xs[t]) +
                           self.rec(h))
        elif mode == 'relu_proj':
            for t in range(T):
                h = F.relu(self.inp(xs[t])) + F.tanh(self.rec(h))
        elif mode == 'nested':
            for t in range(T):
                for s in range(T):
                    h = F.tanh(self.inp(xs[s]) + self.rec(h))
        elif mode == 'returned_projection':
            ps = []
            for t in range(T):
                p = self.inp(xs[t])
                h = F.tanh(p + self.rec(h))
                ps.append(p)
            return h, F.stack(ps)
        elif mode == 'get_item':
            for t in range(T):
                h = F.tanh(self.inp(F.get_item(xs, t)) + self.rec(h))
        elif mode == 'projection_in_place':
            for t in range(T):
                p = self.inp(xs[t])
                h = F.tanh(p * 2.0 + self.rec(h))
        return h


MODES = ['axis1', 'reversed', 'reversed_index', 'next', 'xs_after',
         'xs_in_body', 'two_loops', 'two_projections', 'relu_proj',
         'nested', 'returned_projection', 'get_item',
         'projection_in_place']


def _rnn_pair(mode, **kw):
    numpy.random.seed(0)
    eager, jitted = _RNN(mode, **kw), _RNN(mode, **kw)
    jitted.copyparams(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    return eager, jitted


def _compare_rnn(eager, jitted, shapes, as_variable, dtype=numpy.float32,
                 rtol=1e-5, atol=1e-6):
    rng = numpy.random.RandomState(1)
    for shape in shapes:
        xs = rng.standard_normal(shape).astype(dtype)
        original = xs.copy()
        results, grads = [], []
        for model in (eager, jitted):
            model.cleargrads()
            x = chainer.Variable(xs.copy()) if as_variable else xs
            y = model(x)
            ys = y if isinstance(y, tuple) else (y,)
            loss = sum(F.sum(v * v) for v in ys)
            loss.backward()
            results.append([v.array for v in ys])
            grads.append([p.grad for _, p in sorted(model.namedparams())] +
                         ([x.grad] if as_variable else []))
        numpy.testing.assert_array_equal(xs, original)
        for a, e in zip(results[1], results[0]):
            testing.assert_results_equal(a, e, rtol, atol)
        for a, e in zip(grads[1], grads[0]):
            if e is None:
                assert a is None
            else:
                testing.assert_results_equal(a, e, rtol, atol)
    with chainer.no_backprop_mode():
        for shape in shapes:
            xs = rng.standard_normal(shape).astype(dtype)
            original = xs.copy()
            e, a = eager(xs), jitted(xs)
            numpy.testing.assert_array_equal(xs, original)
            es = e if isinstance(e, tuple) else (e,)
            as_ = a if isinstance(a, tuple) else (a,)
            for av, ev in zip(as_, es):
                testing.assert_results_equal(av, ev, rtol, atol)


@pytest.mark.adversarial
@pytest.mark.parametrize('mode', MODES)
def test_hoisting_variants(mode):
    # xs is an array for half the modes and a Variable (its gradient
    # compared) for the other half.
    as_variable = MODES.index(mode) % 2 == 1
    eager, jitted = _rnn_pair(mode)
    lengths = {'next': (3, 3, 5, 2), 'nested': (2, 2, 3, 1)}.get(
        mode, (3, 3, 5, 1))
    shapes = [(2, n, 4) if mode == 'axis1' else (n, 2, 4) for n in lengths]
    _compare_rnn(eager, jitted, shapes, as_variable, rtol=1e-4, atol=1e-5)


@pytest.mark.adversarial
def test_hoisting_without_bias():
    eager, jitted = _rnn_pair('reversed', nobias=True)
    _compare_rnn(eager, jitted, [(n, 2, 4) for n in (3, 3, 7, 1)], True,
                 rtol=1e-4, atol=1e-5)


@pytest.mark.adversarial
def test_hoisting_float64():
    eager, jitted = _rnn_pair('axis1', dtype=numpy.float64)
    _compare_rnn(eager, jitted, [(2, n, 4) for n in (3, 3, 7, 1)], True,
                 dtype=numpy.float64, rtol=1e-10, atol=1e-12)


@pytest.mark.adversarial
def test_hoisting_with_xs_read_as_array_and_grad_flag(rng):
    def f(xs, w, b):
        h = F.matmul(xs[0], w) * 0
        for t in range(xs.shape[0]):
            h = F.tanh(F.linear(xs[t], w.T, b) + h)
        return h
    calls = [(rand(rng, n, 3, 4), rand(rng, 4, 4), rand(rng, 4))
             for n in (3, 3, 7, 1)]
    check_unchanged(f, calls, rtol=1e-4, atol=1e-5)
    testing.assert_jit_grads_match_eager(f, calls, rtol=1e-4, atol=1e-5)


@pytest.mark.adversarial
def test_hoisting_weight_is_loop_carried(rng):
    def f(xs, w):
        h = F.matmul(xs[0], w) * 0
        for t in range(xs.shape[0]):
            h = F.tanh(F.linear(xs[t], w) + h)
            w = w * 0.5
        return h
    calls = [(rand(rng, n, 3, 4), rand(rng, 4, 4)) for n in (3, 3, 7, 1)]
    testing.assert_jit_matches_eager(f, calls, rtol=1e-4, atol=1e-5)
    testing.assert_jit_grads_match_eager(f, calls, rtol=1e-4, atol=1e-5)


@pytest.mark.adversarial
def test_hoisting_xs_modified_in_loop(rng):
    def f(xs, w):
        h = F.matmul(xs[0], w) * 0
        for t in range(xs.shape[0]):
            h = F.tanh(F.linear(xs[t], w) + h)
            xs = xs * 0.5
        return h
    calls = [(rand(rng, n, 3, 4), rand(rng, 4, 4)) for n in (3, 3, 7, 1)]
    testing.assert_jit_matches_eager(f, calls, rtol=1e-4, atol=1e-5)


@pytest.mark.adversarial
def test_hoisting_array_of_a_variable_stops_gradient(rng):
    def f(xs, w, b):
        h = F.linear(xs.array[0], w, b) * 0
        for t in range(xs.shape[0]):
            h = F.tanh(F.linear(xs.array[t], w, b) + h)
        return h
    jitted = chainerjit.jit(f)
    for n in (3, 3, 5, 1):
        arrays = [rand(rng, n, 3, 4), rand(rng, 4, 4), rand(rng, 4)]
        grads = []
        for fn in (f, jitted):
            args = [chainer.Variable(a.copy()) for a in arrays]
            F.sum(fn(*args)).backward()
            grads.append([a.grad for a in args])
        assert grads[1][0] is None and grads[0][0] is None
        for a, e in zip(grads[1][1:], grads[0][1:]):
            numpy.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)


@pytest.mark.adversarial
def test_hoisting_grads_of_every_argument(rng):
    def f(xs, w, b):
        h = F.linear(xs[0], w, b) * 0
        for t in range(xs.shape[0]):
            h = F.tanh(F.linear(xs[t], w, b) + h)
        return h
    testing.assert_jit_grads_match_eager(
        f, [(rand(rng, n, 3, 4), rand(rng, 4, 4), rand(rng, 4))
            for n in (3, 3, 7, 1)], rtol=1e-4, atol=1e-5)
