"""The reference interpreter (``chainerjit.backend.interpreter``) as an
oracle: for recorded graphs (straight-line code, a loop with a symbolic
trip count and a scan, a loop with a ``break``, nested loops, a training
program's forward and backward), the interpreter, the compiled program
and eager Chainer agree on new values of every call."""

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import passes
from chainerjit.backend import interpreter
from chainerjit.frontend import rolling
from chainerjit.frontend import signature
from chainerjit.frontend import trace
from chainerjit.ops import structural

F32 = numpy.float32


def _outputs_agree(graph, program, arguments):
    expected = program.run(list(arguments))
    found = interpreter.run(graph, list(arguments))
    assert len(found) == len(expected)
    for a, b in zip(found, expected):
        if isinstance(b, list):
            assert len(a) == len(b)
            a, b = numpy.stack(a), numpy.stack(b)
        if b is None:
            assert a is None
            continue
        numpy.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    return found


def _entry(fn, calls):
    jitted = chainerjit.jit(fn)
    with chainer.no_backprop_mode():
        for args in calls:
            jitted(*args)
    return jitted.last_entry


def _mlp(x, W, b):
    h = F.relu(F.linear(x, W, b))
    return F.tanh(h * 2.0), F.sum(h, axis=1)


def test_straight_line_code(rng):
    def args():
        return (rng.standard_normal((4, 5)).astype(F32),
                rng.standard_normal((3, 5)).astype(F32),
                rng.standard_normal(3).astype(F32))
    entry = _entry(_mlp, [args()])
    for _ in range(3):
        x, W, b = args()
        outs = _outputs_agree(entry.graph, entry.program, [x, W, b])
        eager = _mlp(x, W, b)
        for out, e in zip(outs, eager):
            numpy.testing.assert_allclose(out, e.array, rtol=1e-5, atol=1e-6)


def _rnn_with_outputs(xs, h, W):
    ys = []
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t] + F.matmul(h, W))
        ys.append(h * 2.0)
    return h, F.stack(ys)


def _rnn_args(rng, n):
    return (rng.standard_normal((n, 2, 3)).astype(F32),
            rng.standard_normal((2, 3)).astype(F32),
            rng.standard_normal((3, 3)).astype(F32) * 0.5)


def test_a_loop_with_a_symbolic_trip_count_and_a_scan(rng):
    entry = _entry(_rnn_with_outputs,
                   [_rnn_args(rng, 4), _rnn_args(rng, 5)])
    graph = entry.graph
    assert graph.symbols and any(n.region is not None for n in graph.nodes)
    for n in (3, 7, 1):
        args = _rnn_args(rng, n)
        h, ys = _outputs_agree(graph, entry.program, list(args) + [n])
        eager_h, eager_ys = _rnn_with_outputs(*args)
        numpy.testing.assert_allclose(h, eager_h.array, rtol=1e-5,
                                      atol=1e-6)
        numpy.testing.assert_allclose(ys, eager_ys.array, rtol=1e-5,
                                      atol=1e-6)


def _until_large(xs, h):
    for t in range(xs.shape[0]):
        h = h + F.relu(xs[t])
        if (h.array > 2.0).any():
            break
    return h * 1.0


def test_a_loop_that_breaks(rng):
    def args(n):
        return (rng.uniform(0, 1, (n, 3)).astype(F32),
                numpy.zeros(3, F32))
    entry = _entry(_until_large, [args(8)])
    graph = entry.graph
    loops = [n for n in graph.nodes if n.region is not None]
    assert loops and any(structural.is_exit(n)
                         for n in loops[0].region.body.nodes)
    for _ in range(4):
        xs, h = args(8)
        out, = _outputs_agree(graph, entry.program, [xs, h])
        numpy.testing.assert_allclose(out, _until_large(xs, h).array,
                                      rtol=1e-6)


def _nested(xs, h):
    h = F.tanh(h)
    for i in range(xs.shape[0]):
        row = F.identity(xs[i])
        for j in range(row.shape[0]):
            h = F.tanh(h + row[j])
    return h


def test_nested_loops(rng):
    def args():
        return (rng.standard_normal((3, 4, 2)).astype(F32),
                rng.standard_normal(2).astype(F32))
    entry = _entry(_nested, [args()])
    outer = [n for n in entry.graph.nodes if n.region is not None]
    assert outer and any(n.region is not None
                         for n in outer[0].region.body.nodes)
    for _ in range(3):
        xs, h = args()
        out, = _outputs_agree(entry.graph, entry.program, [xs, h])
        numpy.testing.assert_allclose(out, _nested(xs, h).array,
                                      rtol=1e-5, atol=1e-6)


def test_a_training_programs_forward_and_backward(rng):
    def forward(xs, h, W):
        return F.sum(_rnn_with_outputs(xs, h, W)[1])
    jitted = chainerjit.jit(forward)
    xs, h, W = _rnn_args(rng, 5)
    jitted(xs, h, chainer.Variable(W)).backward()
    training = jitted.last_entry.training
    pair = training.graphs
    assert pair.forward.symbols  # the loop, written in a helper
    for n in (5, 3, 7):
        xs, h, W = _rnn_args(rng, n)
        outs = _outputs_agree(pair.forward, training.forward,
                              [xs, h, W, n])
        saved = list(outs[pair.n_outputs:])
        gy = numpy.asarray(rng.standard_normal(), F32)
        gW, = _outputs_agree(pair.backward, training.backward,
                             saved + [gy, n])
        W_var = chainer.Variable(W)
        loss = forward(xs, h, W_var)
        loss.grad = gy
        loss.backward()
        numpy.testing.assert_allclose(gW, W_var.grad, rtol=1e-4, atol=1e-5)


def test_the_arguments_are_counted(rng):
    entry = _entry(_mlp, [(numpy.ones((2, 5), F32), numpy.ones((3, 5), F32),
                           numpy.ones(3, F32))])
    with pytest.raises(ValueError, match='takes 3 arguments'):
        interpreter.run(entry.graph, [numpy.ones((2, 5), F32)])


def _record(fn, args):
    """The graph of ``fn`` recorded on ``args``, its loops rolled."""
    leaves = []
    signature.flatten((args, {}), leaves)
    with chainer.no_backprop_mode():
        recording = trace.record(fn, None, args, {}, leaves, 'f',
                                 ['x%d' % i for i in range(len(leaves))])
    rolling.roll_loops(recording.graph, recording)
    return recording.graph


def _lstm_like(xs, h, W, b):
    for t in range(xs.shape[0]):
        h = F.tanh(F.linear(xs[t], W, b) + h)
    return F.relu(F.linear(h, W, b)) * 3.0


@pytest.mark.parametrize('fn, make_args', [
    (_mlp, lambda rng: (rng.standard_normal((4, 5)).astype(F32),
                        rng.standard_normal((3, 5)).astype(F32),
                        rng.standard_normal(3).astype(F32))),
    (_lstm_like, lambda rng: (rng.standard_normal((6, 2, 3)).astype(F32),
                              rng.standard_normal((2, 3)).astype(F32),
                              rng.standard_normal((3, 3)).astype(F32),
                              rng.standard_normal(3).astype(F32))),
])
def test_the_passes_keep_what_a_graph_computes(rng, fn, make_args):
    graph = _record(fn, make_args(rng))
    assert (fn is _mlp) != any(n.region is not None for n in graph.nodes)
    calls = [make_args(rng) for _ in range(3)]
    before = [interpreter.run(graph, list(args)) for args in calls]
    optimized = passes.run(graph)
    for args, expected in zip(calls, before):
        found = interpreter.run(optimized, list(args))
        for a, b in zip(found, expected):
            numpy.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
