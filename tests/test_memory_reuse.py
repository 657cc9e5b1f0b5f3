"""Codegen's memory reuse: a kernel writes its result into an input's
buffer only when nothing else can see that buffer."""

import chainer
import chainer.functions as F
import numpy

from chainerjit import testing


def _program(jitted):
    entry, = jitted.cache_entries()
    return entry.program.dis()


def _calls(rng, *shapes):
    return [tuple(rng.standard_normal(s).astype(numpy.float32)
                  for s in shapes) for _ in range(3)]


def test_an_activation_fills_the_buffer_of_the_product_before_it(rng):
    def f(x, w):
        return F.tanh(F.relu(F.matmul(x, w)) * 2.0)
    jitted = testing.assert_jit_matches_eager(f, _calls(rng, (3, 4), (4, 5)))
    dis = _program(jitted)
    assert 'ReLU (into' in dis and 'Tanh (into' in dis


def test_a_buffer_read_again_is_not_reused(rng):
    def f(x, w):
        h = F.matmul(x, w)
        return F.relu(h) + h
    jitted = testing.assert_jit_matches_eager(f, _calls(rng, (3, 4), (4, 5)))
    assert 'ReLU (into' not in _program(jitted)


def test_returned_arguments_and_views_are_never_written(rng):
    def f(x, w):
        h = F.matmul(x, w)
        v = F.get_item(h, 0)  # a view of h
        return F.relu(x), F.tanh(v), h * 1.0
    calls = _calls(rng, (3, 4), (4, 5))
    originals = [tuple(a.copy() for a in call) for call in calls]
    jitted = testing.assert_jit_matches_eager(f, calls)
    dis = _program(jitted)
    assert 'ReLU (into' not in dis and 'Tanh (into' not in dis
    for call, original in zip(calls, originals):
        for a, b in zip(call, original):
            numpy.testing.assert_array_equal(a, b)


def test_a_buffer_with_a_live_view_is_not_written(rng):
    # h dies at the ReLU, but its reshaped view is read after it.
    def f(x, w):
        h = F.matmul(x, w)
        v = F.reshape(h, (15,))
        return F.relu(h), v * 2.0
    jitted = testing.assert_jit_matches_eager(f, _calls(rng, (3, 4), (4, 5)))
    assert 'ReLU (into' not in _program(jitted)


def test_either_operand_of_a_sum_can_take_the_result(rng):
    def f(x, w):
        return F.get_item(x, 0) + F.matmul(x, w)[0]
    jitted = testing.assert_jit_matches_eager(f, _calls(rng, (4, 4), (4, 4)))
    assert 'Add (into' not in _program(jitted)  # [0] of a product: a view

    def g(x, w):
        return F.get_item(x, 0) + F.sum(F.matmul(x, w), axis=0)
    jitted = testing.assert_jit_matches_eager(g, _calls(rng, (4, 4), (4, 4)))
    assert 'Add (into' in _program(jitted)


def test_gradients_through_reused_buffers_match_eager(rng):
    def f(x, w):
        return F.sigmoid(F.tanh(F.matmul(x, w)) + F.matmul(x, w))
    jitted = testing.assert_jit_grads_match_eager(
        f, _calls(rng, (3, 4), (4, 4)))
    entry, = jitted.cache_entries()
    # The training forward keeps what the backward reads: no reuse there.
    assert 'Tanh (into' not in entry.training.forward.dis()


def test_inside_loops(rng):
    def f(xs, w):
        h = xs[0] * 0
        for t in range(xs.shape[0]):
            h = F.tanh(F.matmul(h, w) + xs[t])
        return h
    calls = [(rng.standard_normal((n, 3, 3)).astype(numpy.float32),
              rng.standard_normal((3, 3)).astype(numpy.float32))
             for n in (4, 4, 6)]
    with chainer.using_config('train', False):
        jitted = testing.assert_jit_matches_eager(f, calls)
    assert 'Add (into' in _program(jitted)
