"""Adversarial differential tests of the arena
(``chainerjit/backend/arena.py``) with calls that overlap or nest: a
jitted function calling another or itself, a program entered again from
inside its own call, threads holding results or training, and calls after
an error or a guard failure. Every result is compared with eager
Chainer's right away and again after all later calls.
"""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests import threads
from tests.backend_tests.test_arena_lifetimes import _arrays
from tests.backend_tests.test_arena_lifetimes import _base
from tests.backend_tests.test_arena_lifetimes import _uses_arena


pytestmark = pytest.mark.adversarial


@pytest.fixture(autouse=True)
def _arena_on(monkeypatch):
    """These tests are about the arena: on whatever the environment says."""
    monkeypatch.setenv('CHAINERJIT_ARENA', '1')


# --- nesting, recursion, threads, errors -------------------------------------

def test_a_jitted_function_calling_another(rng):
    def inner_eager(x, w):
        h, side = _base(x, w)
        return h.T, side

    inner = chainerjit.jit(inner_eager)

    def outer_eager(x, w):
        a, s = inner_eager(x, w)
        b, t = inner_eager(x * -1.0, w)
        return a * 2.0 + b, s + t, a

    outer = chainerjit.jit(
        lambda x, w: (lambda a, s, b, t: (a * 2.0 + b, s + t, a))(
            *(inner(x, w) + inner(x * -1.0, w))))
    held = []
    with chainer.no_backprop_mode():
        for x, w in _arrays(rng, (16, 32), (32, 32), calls=5):
            got_outer, want_outer = outer(x, w), outer_eager(x, w)
            got_inner, want_inner = inner(x, w), inner_eager(x, w)
            held.append((got_outer, want_outer))
            held.append((got_inner, want_inner))
    for got, want in held:
        testing.assert_results_equal(got, want)
    assert _uses_arena(inner) and _uses_arena(outer)


def _recursive_eager(x, w, depth):
    h, side = _base(x, w)
    if depth == 0:
        return h, side
    deeper, s = _recursive_eager(h, w, depth - 1)
    return deeper + h, side + s


_recursive = chainerjit.jit(_recursive_eager)


def test_a_jitted_function_calling_itself():
    rng = numpy.random.RandomState(3)
    _recursive.cache_clear()

    def f(x, w, depth):
        return _recursive(x, w, depth)
    held = []
    with chainer.no_backprop_mode():
        for k in range(4):
            x, w = _arrays(rng, (16, 32), (32, 32), calls=1)[0]
            w *= 0.2
            for depth in (0, 2):
                held.append((_recursive(x, w, depth),
                             _recursive_eager(x, w, depth)))
    for got, want in held:
        testing.assert_results_equal(got, want)
    assert _recursive.cache_info().hits >= 4


class _ReEnters(chainer.FunctionNode):
    """A user op whose forward, on compiled calls, calls the jitted
    function that is running it (with inputs of the same shapes, so the
    same program is entered again while its arena is in use)."""

    callee = None
    depth = [0]
    inner = []

    def forward(self, inputs):
        x, = inputs
        if type(self).callee is not None and self.depth[0] == 0 and \
                not chainerjit.frontend.trace.is_recording():
            self.depth[0] += 1
            try:
                with chainer.no_backprop_mode():
                    self.inner.append((x.copy(), type(self).callee(x)))
            finally:
                self.depth[0] -= 1
        return x * 2,


def test_a_program_entered_again_from_inside_its_own_call(rng):
    w = rng.standard_normal((32, 32)).astype(numpy.float32) * 0.2

    def f(x):
        k = F.tanh(F.matmul(x, w) * 2.0)  # in the arena across the call
        inner, = _ReEnters().apply((x * -1.5,))
        g = F.softmax(inner * 0.5)
        return F.sum(k * 3.0, axis=1) + F.sum(g, axis=1), g.T
    jitted = chainerjit.jit(f)
    del _ReEnters.inner[:]
    held = []
    try:
        with chainer.no_backprop_mode():
            for x, in _arrays(rng, (16, 32), calls=5):
                _ReEnters.callee = None
                expected = f(x)
                _ReEnters.callee = jitted
                held.append((jitted(x), expected))
    finally:
        _ReEnters.callee = None
    # Every compiled call entered again, and the eager run checking the
    # first hit (the program holds w, an array) entered the program too.
    assert len(_ReEnters.inner) == 5
    with chainer.no_backprop_mode():
        for x, got in _ReEnters.inner:
            testing.assert_results_equal(got, f(x))
    for got, want in held:
        testing.assert_results_equal(got, want)
    assert _uses_arena(jitted)


def test_threads_with_held_results_and_other_shapes(rng):
    def f(x, w):
        h, side = _base(x, w)
        return F.softmax(h * 2.0)[:, ::2], side
    # (an entry per batch size: the arena plans each program's sizes)
    jitted = chainerjit.jit(f, dynamic=False)
    w = rng.standard_normal((32, 32)).astype(numpy.float32)
    xs = [rng.standard_normal((16 + 8 * (k % 2), 32)).astype(numpy.float32)
          for k in range(6)]
    with chainer.no_backprop_mode():
        for x in xs[:2]:
            jitted(x, w)
        expected = [f(x, w) for x in xs]
    held = [[] for _ in xs]

    def work(k):
        with chainer.no_backprop_mode():
            for _ in range(30):
                held[k].append(jitted(xs[k], w))
    threads.run_in_threads(work, len(xs))
    for k, results in enumerate(held):
        for got in results[::5]:
            testing.assert_results_equal(got, expected[k])
    assert _uses_arena(jitted)


def test_threads_training(rng):
    def f(x, w):
        return F.sum(F.tanh(F.matmul(x, w) * 2.0) + 1.0, axis=1)
    jitted = chainerjit.jit(f)
    w_ = rng.standard_normal((32, 32)).astype(numpy.float32)
    xs = [rng.standard_normal((16, 32)).astype(numpy.float32)
          for _ in range(4)]
    jitted(xs[0], chainer.Variable(w_.copy()))  # records
    expected = []
    for x in xs:
        w = chainer.Variable(w_.copy())
        F.sum(f(x, w) ** 2).backward()
        expected.append(w.grad)

    def work(k):
        for _ in range(10):
            w = chainer.Variable(w_.copy())
            loss = F.sum(jitted(xs[k], w) ** 2)
            loss.backward()
            numpy.testing.assert_allclose(w.grad, expected[k], 1e-4, 1e-4)
    threads.run_in_threads(work, 4)


def test_an_error_in_one_call_then_more_calls(rng):
    embed = L.EmbedID(10, 32)

    def f(ids, w):
        e = embed(ids)
        h = F.tanh(F.matmul(e, w) * 2.0)
        return h.T, F.sum(F.relu(h + 0.5) * 3.0, axis=1)
    jitted = chainerjit.jit(f)
    w = rng.standard_normal((32, 32)).astype(numpy.float32)
    calls = [rng.randint(0, 10, 16).astype(numpy.int32) for _ in range(5)]
    held = []
    with chainer.no_backprop_mode():
        for k, ids in enumerate(calls):
            if k == 2:
                bad = ids.copy()
                bad[3] = 12
                with pytest.raises(Exception):
                    f(bad, w)
                with pytest.raises(Exception):
                    jitted(bad, w)
            held.append((jitted(ids, w), f(ids, w)))
    for got, want in held:
        testing.assert_results_equal(got, want)
    assert _uses_arena(jitted)


def test_a_guard_failure_then_more_calls(rng):
    def f(x, w):
        h, side = _base(x, w)
        if (h.array > 0.9).any():
            out = F.softmax(h * 2.0)
        else:
            out = F.sigmoid(h * 2.0)
        return out.T, side
    held = []
    jitted = chainerjit.jit(f)
    with chainer.no_backprop_mode():
        for k in range(8):
            x, w = _arrays(rng, (16, 32), (32, 32), calls=1)[0]
            if k % 3 == 2:
                x *= 0.0
                x -= 5.0  # h near tanh(...) + 0.5 of a constant
                w = numpy.abs(w)
            held.append((jitted(x, w), f(x, w)))
    for got, want in held:
        testing.assert_results_equal(got, want)
