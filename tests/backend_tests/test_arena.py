"""The arena (``chainerjit/backend/arena.py``): kernels write results into
buffers a program allocated once, with the same bits as without it, and
never into a buffer whose contents outlive the call. The adversarial cases
are in ``test_arena_lifetimes.py``, ``test_arena_loops.py``,
``test_arena_training.py`` and ``test_arena_concurrency.py``."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from benchmarks import bench_memory
from benchmarks import run
import chainerjit
from chainerjit import testing
from chainerjit.backend import _vm
from chainerjit.backend import arena
from chainerjit.backend import opcodes
from chainerjit.ops.scratch import Scratch
from chainerjit.ops.scratch import scratch_bytes
from chainerjit.ops.scratch import scratch_mark
from examples import models
from tests import threads


def _dis(jitted):
    return '\n'.join(p.dis() for p in testing.programs(jitted))


def _run_both(monkeypatch, fn, calls):
    """Runs ``jit(fn)`` with and without arenas on ``calls`` (two calls
    each, so the second runs the program); returns both results of every
    call and the jitted function with arenas."""
    results = {}
    jitted = {}
    for setting in ('1', '0'):
        monkeypatch.setenv('CHAINERJIT_ARENA', setting)
        jitted[setting] = chainerjit.jit(fn)
        with chainer.no_backprop_mode():
            results[setting] = [jitted[setting](*args) for args in calls]
    return results['1'], results['0'], jitted['1']


# --- same bits as the kernels without the arena ------------------------------

def _exact(monkeypatch, fn, calls, expect_arena=True):
    with_arena, without, jitted = _run_both(monkeypatch, fn, calls)
    for a, b in zip(with_arena, without):
        numpy.testing.assert_array_equal(a.array, b.array)
    assert ('(arena' in _dis(jitted)) == expect_arena, _dis(jitted)
    testing.assert_jit_matches_eager(fn, calls)
    return jitted


def _arrays(rng, *shapes, calls=3, dtype=numpy.float32):
    return [tuple(rng.standard_normal(s).astype(dtype) for s in shapes)
            for _ in range(calls)]


@pytest.mark.parametrize('activation', [F.relu, F.tanh, F.sigmoid])
@pytest.mark.parametrize('batch', [1, 20, 64, 65])
def test_linear_with_an_activation_gives_the_same_bits(
        monkeypatch, rng, activation, batch):
    l1, l2 = L.Linear(30, 40), L.Linear(40, 10)

    def f(x):
        return l2(activation(l1(x)))
    _exact(monkeypatch, f, _arrays(rng, (batch, 30)),
           expect_arena=batch * 40 * 4 >= arena.MIN_BYTES)


@pytest.mark.parametrize('op', [
    lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
    lambda a, b: a / b, lambda a, b: F.maximum(a, b)])
def test_binary_ops_broadcasting_gives_the_same_bits(monkeypatch, rng, op):
    def f(x, y):
        h = op(F.tanh(x), F.broadcast_to(y, (16, 32)))
        return F.sum(h, axis=0)
    _exact(monkeypatch, f, _arrays(rng, (16, 32), (1, 32)))


@pytest.mark.parametrize('op', [
    lambda x: x + 2.5, lambda x: 2.5 - x, lambda x: x * 3.0,
    lambda x: 3.0 / (x * x + 1)])
def test_ops_with_a_constant_give_the_same_bits(monkeypatch, rng, op):
    def f(x):
        return F.sum(op(F.tanh(x)), axis=1)
    _exact(monkeypatch, f, _arrays(rng, (16, 32)))


def test_attention_gives_the_same_bits(monkeypatch, rng):
    block = models.EncoderBlock(d_model=32, n_heads=4, d_ff=64)
    with chainer.using_config('train', False):
        jitted = _exact(monkeypatch, block.forward, _arrays(rng, (2, 16, 32)))
    dis = _dis(jitted)
    for op in ('MatMul', 'Softmax', 'LayerNormalization', 'MulConstant'):
        assert any(op in line and '(arena' in line
                   for line in dis.splitlines()), (op, dis)


def test_float64_and_mixed_dtypes(monkeypatch, rng):
    def f(x, y):
        return F.sum(F.tanh(x) * F.cast(y, numpy.float64), axis=0)
    calls = [(x.astype(numpy.float64), y) for x, y in
             _arrays(rng, (16, 32), (16, 32))]
    _exact(monkeypatch, f, calls)


# --- what must not use the arena ---------------------------------------------

def test_results_are_not_overwritten_by_the_next_call(rng):
    def f(x, w):
        h = F.tanh(F.matmul(x, w))
        return F.reshape(h, (-1,)), F.transpose(h * 2.0), h[0], h + 1.0

    jitted = chainerjit.jit(f)
    calls = _arrays(rng, (16, 32), (32, 16), calls=4)
    with chainer.no_backprop_mode():
        results = [jitted(*args) for args in calls]
        copies = [[y.array.copy() for y in r] for r in results]
        for args in calls:
            jitted(*args)
    for r, c in zip(results, copies):
        for y, expected in zip(r, c):
            numpy.testing.assert_array_equal(y.array, expected)
    testing.assert_jit_matches_eager(f, calls)


def test_a_view_read_after_the_value_dies_keeps_its_buffer(rng):
    def f(x, w):
        h = F.tanh(F.matmul(x, w))
        v = F.reshape(h, (-1,))  # h dies here; v is read at the end
        g = F.sigmoid(F.matmul(x, w) * 3.0)
        k = F.relu(g - 0.5) * 2.0
        return F.sum(k) + F.sum(v * v)
    jitted = testing.assert_jit_matches_eager(
        f, _arrays(rng, (16, 32), (32, 16)))
    assert '(arena' in _dis(jitted)


def test_two_forwards_before_one_backward(rng):
    mlp = models.MLP(n_hidden=64)
    eager = mlp.copy(mode='copy')
    mlp.forward = chainerjit.jit(mlp.forward)
    xs = [rng.standard_normal((32, 784)).astype(numpy.float32)
          for _ in range(3)]
    t = numpy.arange(32, dtype=numpy.int32) % 10
    for model in (mlp, eager):
        model(xs[0])  # records
        model.cleargrads()
        loss = F.softmax_cross_entropy(model(xs[1]), t) + \
            F.softmax_cross_entropy(model(xs[2]), t)
        loss.backward()
    assert '(arena' in _dis(mlp.forward)
    for (name, a), (_, b) in zip(sorted(mlp.namedparams()),
                                 sorted(eager.namedparams())):
        numpy.testing.assert_allclose(a.grad, b.grad, rtol=1e-5,
                                      atol=1e-6, err_msg=name)


def test_loop_bodies_use_the_arena_at_every_length(rng):
    model = models.LSTMClassifier(n_in=16, n_hidden=32)
    eager = model.copy(mode='copy')
    model.forward = chainerjit.jit(model.forward)
    with chainer.no_backprop_mode():
        for T in (3, 7, 12, 7):
            xs = rng.standard_normal((T, 16, 16)).astype(numpy.float32)
            for m in (model, eager):
                m.lstm.reset_state()
            numpy.testing.assert_allclose(model(xs).array, eager(xs).array,
                                          rtol=1e-5, atol=1e-6)
    entry, = model.forward.cache_entries()
    assert entry.symbolic and '(arena' in entry.program.dis()


def test_in_a_program_of_varying_shapes_other_shapes_allocate():
    # In a symbolic program, the kernels bound to arena buffers check
    # their inputs' shapes (today only hoisted projections, which have no
    # arena variant, carry the length in their shapes).
    out = numpy.empty((2, 3), numpy.float32)

    def into(a, b):
        return numpy.add(a, b, out=out)
    run = arena._checking_shapes(into, lambda a, b: a + b, ((2, 3), (3,)))
    a, b = numpy.ones((2, 3), numpy.float32), numpy.ones(3, numpy.float32)
    assert run(a, b) is out
    longer = numpy.ones((5, 3), numpy.float32)
    y = run(longer, b)
    assert y is not out
    numpy.testing.assert_array_equal(y, longer + b)


# --- calls that overlap ------------------------------------------------------

def _machine_calling(kernel, plain_kernel):
    code = opcodes.encode_call(0, [0], [1], False) + [opcodes.RET, 1, 1]
    return _vm.Machine(numpy.asarray(code, numpy.int32), [kernel],
                       [None, None], 1, [plain_kernel])


def test_a_call_that_starts_during_a_call_runs_without_the_arena():
    used = []

    def with_arena(n):
        used.append(('arena', n))
        if n:
            machine.run([n - 1])
        return n

    def plain(n):
        used.append(('plain', n))
        return n
    machine = _machine_calling(with_arena, plain)
    machine.run([1])
    assert used == [('arena', 1), ('plain', 0)]
    machine.run([0])  # the flag was cleared
    assert used[-1] == ('arena', 0)


def test_the_arena_is_free_again_after_a_kernel_raised():
    def failing(n):
        raise RuntimeError('no')
    machine = _machine_calling(failing, lambda n: 'plain')
    with pytest.raises(_vm.VMFault):
        machine.run([0])
    with pytest.raises(_vm.VMFault):  # the arena kernel ran again
        machine.run([0])


def test_threads_calling_one_program_get_their_own_results(rng):
    def f(x, w):
        return F.sum(F.tanh(F.matmul(x, w) * 2.0) + 1.0, axis=1)
    jitted = chainerjit.jit(f)
    w = rng.standard_normal((64, 64)).astype(numpy.float32)
    xs = [rng.standard_normal((64, 64)).astype(numpy.float32)
          for _ in range(8)]
    with chainer.no_backprop_mode():
        jitted(xs[0], w)
        expected = [f(x, w).array for x in xs]

    def work(k):
        with chainer.no_backprop_mode():
            for _ in range(50):
                y = jitted(xs[k], w).array
                numpy.testing.assert_allclose(y, expected[k], rtol=1e-5,
                                              atol=1e-5)
    threads.run_in_threads(work, 8)
    assert '(arena' in _dis(jitted)


@pytest.mark.parametrize('train', [False, True])
def test_threads_training_one_convolution_get_their_own_gradients(
        rng, train):
    """The convolution's patches and its input gradient's product live in
    scratch buffers one call holds at a time: threads running the same
    programs at once (one holding them, the others on new arrays) each
    get the values and gradients of a call alone (eager's, within the
    inference convolution's rounding)."""
    conv = L.Convolution2D(3, 4, 3, pad=1)
    W, b = conv.W.array, conv.b.array

    def f(x):
        return F.convolution_2d(x, W, b, pad=1) * 2

    jitted = chainerjit.jit(f)
    xs = [rng.standard_normal((4, 3, 9, 9)).astype(numpy.float32)
          for _ in range(6)]
    gy = rng.standard_normal((4, 4, 9, 9)).astype(numpy.float32)

    def step(fn, x):
        x = chainer.Variable(x)
        y = fn(x)
        if train:
            y.grad = gy
            y.backward()
            return y.array, x.grad
        return y.array, None
    with chainer.using_config('enable_backprop', train):
        for _ in range(2):  # records, then checks its first program run
            step(jitted, xs[0])
        expected = [step(jitted, x) for x in xs]
        for got, want in zip(expected, [step(f, x) for x in xs]):
            for a, e in zip(got, want):
                if e is not None:
                    numpy.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)

    def work(k):
        with chainer.using_config('enable_backprop', train):
            for _ in range(20):
                for got, want in zip(step(jitted, xs[k]), expected[k]):
                    if want is not None:
                        assert got.tobytes() == want.tobytes()
    threads.run_in_threads(work, 6)


# --- memory ------------------------------------------------------------------

def test_steady_state_calls_allocate_less(monkeypatch, rng):
    block = models.EncoderBlock(d_model=64, n_heads=4, d_ff=256)
    x = rng.standard_normal((8, 32, 64)).astype(numpy.float32)
    peaks = {}
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for setting in ('0', '1'):
            monkeypatch.setenv('CHAINERJIT_ARENA', setting)
            mark = scratch_mark()
            jitted = chainerjit.jit(block.forward)
            jitted(x)
            peaks[setting] = bench_memory.peak_of_call(lambda: jitted(x))
        eager = bench_memory.peak_of_call(lambda: block(x))
    built = run.Built(None, 0, None)
    built.jitted, built.scratch_mark = jitted, mark
    held = bench_memory.held_bytes(built)
    assert held >= sum(b.nbytes for p in testing.programs(jitted)
                       for b in p.arena) > 0
    # The call's own peak is about its result (128 KiB) and small temps.
    assert peaks['1'] < peaks['0'] / 2
    assert peaks['1'] + held < eager


def test_scratch_bytes_count_the_buffers_made_since_a_mark():
    mark = scratch_mark()
    scratch = Scratch()
    assert scratch.serial > mark and scratch_bytes(mark) == 0
    with scratch.held() as buffers:
        buffers.array(0, (10,), numpy.float64)
    assert scratch_bytes(mark) == 80
    assert scratch_bytes(scratch_mark()) == 0
    del scratch, buffers
    assert scratch_bytes(mark) == 0  # collected


def test_disabled_by_the_environment(monkeypatch, rng):
    monkeypatch.setenv('CHAINERJIT_ARENA', '0')
    mlp = models.MLP()
    mlp.forward = chainerjit.jit(mlp.forward)
    with chainer.no_backprop_mode():
        mlp(rng.standard_normal((64, 784)).astype(numpy.float32))
    assert 'arena' not in _dis(mlp.forward)


def test_scratch_buffers_are_kept_grown_and_held_by_one_call_at_a_time():
    scratch = Scratch()
    with scratch.held() as buffers:
        assert buffers is scratch
        a = buffers.array(0, (3, 4), numpy.float32)
        assert a.shape == (3, 4) and a.flags.c_contiguous
        b = buffers.array(1, (5,), numpy.float64)
        assert not numpy.shares_memory(a, b)
        with scratch.held() as other:  # a call that starts meanwhile
            assert other is not scratch
            c = other.array(0, (3, 4), numpy.float32)
            assert not numpy.shares_memory(a, c)
    with scratch.held() as buffers:  # released: the same memory again
        again = buffers.array(0, (2, 6), numpy.float32)
        assert numpy.shares_memory(a, again)
        grown = buffers.array(0, (100,), numpy.float64)
        assert grown.shape == (100,) and not numpy.shares_memory(a, grown)
