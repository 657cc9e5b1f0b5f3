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
