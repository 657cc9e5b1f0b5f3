"""Code generation (``chainerjit.backend.codegen``): a graph compiled with
``compile_graph`` becomes a program whose bytecode (``dis()``) has the
documented shape (arguments, then constants, then temporaries in
registers; one ``CALL`` per node; ``FREE`` after a value's last use; a
loop as ``SETI``/``FORI``/``NEXT``; ``RET`` of the outputs), and whose
run gives eager Chainer's values for new inputs."""

import re

import chainer
import chainer.functions as F
import numpy

import chainerjit
from chainerjit import passes
from chainerjit.backend import codegen
from chainerjit.frontend import signature
from chainerjit.frontend import trace


F32 = numpy.float32


def _compile(fn, *args):
    """The graph of ``fn`` recorded on ``args`` (after the passes), and its
    program."""
    leaves = []
    signature.flatten((args, {}), leaves)
    with chainer.no_backprop_mode():
        recording = trace.record(fn, None, args, {}, leaves, 'f',
                                 ['x%d' % i for i in range(len(leaves))])
    graph = passes.run(recording.graph)
    return graph, codegen.compile_graph(graph)


def _opnames(program):
    return [i.opname for i in program.instructions()]


def _run_matches_eager(program, fn, args, symbols=()):
    outs = program.run(list(args) + list(symbols))
    with chainer.no_backprop_mode():
        expected = fn(*args)
    if not isinstance(expected, tuple):
        expected = expected,
    assert len(outs) == len(expected)
    for out, e in zip(outs, expected):
        assert type(out) is numpy.ndarray
        assert out.shape == e.shape and out.dtype == e.dtype
        numpy.testing.assert_allclose(out, e.array, rtol=1e-5, atol=1e-6)


def _mlp(x, W, b):
    h = F.relu(F.linear(x, W, b))
    return F.tanh(h * 2.0), F.sum(h, axis=1)


def _mlp_args(rng, batch=4):
    return (rng.standard_normal((batch, 5)).astype(F32),
            rng.standard_normal((3, 5)).astype(F32),
            rng.standard_normal(3).astype(F32))


def test_a_straight_line_program(rng):
    graph, program = _compile(_mlp, *_mlp_args(rng))
    assert [n.op for n in graph.nodes] == [
        'LinearFunction+ReLU', 'MulConstant', 'Tanh', 'Sum']
    text = program.dis()
    assert text.startswith('program f: 3 inputs, 0 consts, ')
    assert '  inputs: %0=x0 %1=x1 %2=x2\n' in text
    # One call per node, with as many inputs as the node; a temporary is
    # freed after its last use, and the outputs are returned.
    assert _opnames(program) == [
        'CALL3', 'CALL1', 'CALL1', 'FREE', 'CALL1', 'FREE', 'RET']
    assert re.search(r'CALL3   k0:LinearFunction\+ReLU  %0 %1 %2 -> %3\n',
                     text), text
    # tanh writes into the buffer of the product before it, which dies
    assert re.search(r'CALL1   k2:Tanh \(into %4\)  %4 -> %5\n', text), text
    assert re.search(r'RET     %5 %4\n', text), text
    assert program.n_inputs == 3 and len(program.kernels) == 4
    # Registers are reused: fewer than the values of the graph.
    assert program.n_regs == 6 < 3 + len(graph.nodes) + 1
    for _ in range(3):
        _run_matches_eager(program, _mlp, _mlp_args(rng))


def _masked(x):
    mask = numpy.tril(numpy.ones((3, 3), F32))
    return F.sigmoid(F.matmul(x, mask)) + mask[0]


def test_constants_get_registers_after_the_arguments(rng):
    graph, program = _compile(_masked, rng.standard_normal((2, 3)).astype(
        F32))
    assert len(graph.consts) == 2
    text = program.dis()
    assert text.startswith('program f: 1 inputs, 2 consts, ')
    assert '  consts: %1=f32[3,3] %2=f32[3]\n' in text, text
    assert _opnames(program)[-1] == 'RET'
    assert [c.shape for c in program.consts] == [(3, 3), (3,)]
    for _ in range(3):
        _run_matches_eager(program, _masked,
                           (rng.standard_normal((2, 3)).astype(F32),))


def _chain(x):
    for _ in range(8):
        x = F.tanh(x * 0.5)
    return x


def test_a_long_chain_runs_in_a_few_registers(rng):
    graph, program = _compile(_chain, rng.standard_normal((4, 4)).astype(
        F32))
    assert len(graph.nodes) == 16
    assert _opnames(program).count('CALL1') == 16
    assert program.n_regs <= 4
    for _ in range(3):
        _run_matches_eager(program, _chain,
                           (rng.standard_normal((4, 4)).astype(F32),))


def _rnn(xs, h, W):
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t] + F.matmul(h, W))
    return h


def _rnn_args(rng, n):
    return (rng.standard_normal((n, 2, 3)).astype(F32),
            rng.standard_normal((2, 3)).astype(F32),
            rng.standard_normal((3, 3)).astype(F32) * 0.5)


def test_a_loop_with_a_symbolic_trip_count(rng):
    jitted = chainerjit.jit(_rnn)
    with chainer.no_backprop_mode():
        for n in (4, 5):
            jitted(*_rnn_args(rng, n))
    entry, = jitted.cache_entries()
    graph = entry.graph
    assert graph.symbols and graph.symbols[0].name == 'T'
    program = codegen.compile_graph(graph)
    text = program.dis()
    assert program.n_inputs == 4  # xs, h, W, then the trip count
    assert '  inputs: %0=xs %1=h %2=W %3=T\n' in text
    names = _opnames(program)
    # The carried value starts as h; the counter counts to T; the body's
    # calls run each iteration; its result is moved back into the carried
    # register before NEXT jumps to the loop's test.
    assert names[:3] == ['MOVE', 'SETI', 'FORI']
    assert names[-3:] == ['NEXT', 'FREE', 'RET']
    assert names.count('CALL2') == 3 and names.count('CALL1') == 1
    assert re.search(r'FORI    %5 %3  to \d+\n', text), text
    assert re.search(r'NEXT    %5  to 6\n', text), text
    assert text == entry.program.dis()  # the same program as the cache's
    for n in (3, 7, 1, 4):
        _run_matches_eager(program, _rnn, _rnn_args(rng, n), symbols=[n])
