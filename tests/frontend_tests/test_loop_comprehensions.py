"""Comprehensions and ``T = len(xs)`` length aliases in rolled loops,
against eager Chainer: list comprehensions and generator expressions over
a sequence (multi-line, nested, filtered, over a written-out tuple, in
methods), aliases of the length (reassigned, minus one, read by a closure,
of another argument), and gradients of a list read by two consumers."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.differential import check_grads
from tests.differential import check_seeded
from tests.differential import sequences


pytestmark = pytest.mark.adversarial


def _comp_over_xs(xs, W):
    return F.stack([F.tanh(F.matmul(x, W)) for x in xs])


def _comp_multiline(xs, W):
    hs = [
        F.tanh(
            F.matmul(xs[t], W)
        ) * 2.0
        for t in range(len(xs))
    ]
    return F.stack(hs, axis=1)


def _comp_nested(xs, W):
    return F.stack([F.stack([F.tanh(x[i] * W[0]) for i in range(2)])
                    for x in xs])


def _comp_filtered(xs, W):
    return F.stack([F.tanh(F.matmul(xs[t], W))
                    for t in range(len(xs)) if t % 2 == 0])


def _comp_generator_sum(xs, W):
    return sum(F.tanh(F.matmul(x, W)) for x in xs)


def _comp_divided_by_len(xs, W):
    return F.sum(F.stack([F.matmul(x, W) for x in xs]), axis=0) / len(xs)


def _comp_counter_as_value(xs, W):
    T = len(xs)
    return F.stack([F.matmul(xs[t], W) * (t + 1.0) / T for t in range(T)])


def _comp_over_written_tuple(xs, W):
    a, b, c = xs[0], xs[-1], xs[0] * 2
    return F.stack([F.tanh(F.matmul(t, W)) for t in (a, b, c)])


def _comp_list_returned(xs, W):
    return [F.tanh(F.matmul(x, W)) for x in xs]


def _comp_reversed_after(xs, W):
    hs = [F.tanh(F.matmul(x, W)) for x in xs]
    return F.stack(hs[::-1])


def _comp_appended_after(xs, W):
    hs = [F.tanh(F.matmul(x, W)) for x in xs]
    out = F.stack(hs)
    hs.append(out[0])
    return out * 1.0, F.stack(hs) * 1.0


def _comp_zip_reversed(xs, W):
    return F.stack([F.matmul(x, W) + y for x, y in zip(xs, xs[::-1])])


def _comp_enumerate_value(xs, W):
    return F.stack([F.matmul(x, W) * i for i, x in enumerate(xs)])


def _comp_two_over_xs(xs, W):
    return F.stack([F.matmul(x, W) for x in xs]) + F.stack(
        [F.sigmoid(F.matmul(x, W)) for x in xs])


def _loop_len_alias(xs, W):
    T = len(xs)
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[t])
    return h


def _loop_alias_as_value(xs, W):
    T = len(xs)
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[t] / T)
    return h * float(T)


def _loop_alias_reassigned(xs, W):
    T = len(xs)
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[t])
    T = 2
    return h * T


def _loop_alias_reassigned_before(xs, W):
    T = len(xs)
    if T > 4:
        T = 4
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[t])
    return h


def _loop_alias_minus_one(xs, W):
    T = len(xs)
    h = xs[0]
    for t in range(T - 1):
        h = F.tanh(F.matmul(h, W) + xs[t + 1])
    return h


def _loop_shape_alias_reversed_index(xs, W):
    T = xs.shape[0]
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[T - 1 - t])
    return h


def _loop_alias_of_alias(xs, W):
    T = len(xs)
    n = T
    h = xs[0]
    for t in range(n):
        h = F.tanh(F.matmul(h, W) + xs[t])
    return h


def _loop_alias_range_from_one(xs, W):
    T = len(xs)
    h = xs[0]
    for t in range(1, T):
        h = F.tanh(F.matmul(h, W) + xs[t])
    return h


def _loop_alias_in_broadcast(xs, W):
    T = len(xs)
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[t])
    return F.broadcast_to(h, (T,) + h.shape)


def _loop_alias_loop_variable_rebinds(xs, W):
    T = len(xs)
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[t])
    for T in range(2):
        h = h + 1.0
    return h


def _loop_alias_read_by_closure(xs, W):
    T = len(xs)

    def scale():
        return float(T)
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[t])
    return h * scale()


COMPREHENSIONS = [
    _comp_over_xs, _comp_multiline, _comp_nested, _comp_filtered,
    _comp_generator_sum, _comp_divided_by_len, _comp_counter_as_value,
    _comp_over_written_tuple, _comp_list_returned, _comp_reversed_after,
    _comp_appended_after, _comp_zip_reversed, _comp_enumerate_value,
    _comp_two_over_xs]

ALIASES = [
    _loop_len_alias, _loop_alias_as_value, _loop_alias_reassigned,
    _loop_alias_reassigned_before, _loop_alias_minus_one,
    _loop_shape_alias_reversed_index, _loop_alias_of_alias,
    _loop_alias_range_from_one, _loop_alias_in_broadcast,
    _loop_alias_loop_variable_rebinds, _loop_alias_read_by_closure]


@pytest.mark.parametrize('fn', COMPREHENSIONS + ALIASES)
def test_comprehensions_and_aliases_match_eager(fn):
    rng = numpy.random.RandomState(31)
    W = rng.standard_normal((4, 4)).astype(numpy.float32) * 0.5
    calls = sequences(rng, W)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.errors.LoopWarning)
        testing.assert_jit_matches_eager(fn, calls)
    check_grads(fn, calls)


def test_a_plain_comprehension_rolls_into_one_entry():
    rng = numpy.random.RandomState(32)
    W = rng.standard_normal((4, 4)).astype(numpy.float32)
    for fn in (_comp_over_xs, _comp_multiline, _loop_len_alias):
        jitted = testing.assert_jit_matches_eager(fn, sequences(rng, W))
        assert len(jitted.cache_entries()) == 1, fn.__name__


def _loop_len_alias_reversed_index(xs, W):
    T = len(xs)
    hs = []
    h = xs[0] * 0
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[T - 1 - t] - xs[t])
        hs.append(h)
    return F.stack(hs)


class _Backwards(chainer.Chain):
    """``L.LSTM`` over the steps from the last, its first step peeled."""

    def __init__(self):
        super(_Backwards, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(4, 3)

    def forward(self, xs):
        self.lstm.reset_state()
        T = len(xs)
        for t in range(T):
            h = self.lstm(xs[T - 1 - t])
        return F.sum(h * h)


@pytest.mark.parametrize('fn', [_loop_shape_alias_reversed_index,
                                _loop_len_alias_reversed_index, None])
def test_an_index_counted_down_from_the_length_rolls_into_one_entry(fn):
    # xs[T - 1 - t]: the length read in the body's indexes only.
    rng = numpy.random.RandomState(33)
    W = rng.standard_normal((4, 4)).astype(numpy.float32) * 0.5
    lengths = (3, 3, 5, 8, 2, 8, 6)
    if fn is None:
        numpy.random.seed(0)
        jitted = check_seeded(_Backwards(), sequences(rng, lengths=lengths))
    else:
        jitted = check_grads(fn, sequences(rng, W, lengths=lengths))
    entry, = jitted.cache_entries()
    assert 'f32[T,2,4]' in str(entry.signature), entry.signature


class _Helpers(chainer.Chain):

    def __init__(self):
        super(_Helpers, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 4)

    def steps(self, xs):
        return [F.tanh(self.fc(x)) for x in xs]

    def through_helper(self, xs):
        return F.stack(self.steps(xs))

    def comprehension_of_alias(self, xs):
        T = len(xs)
        return F.stack([F.tanh(self.fc(xs[t])) for t in range(T)])


@pytest.mark.parametrize('method', ['through_helper',
                                    'comprehension_of_alias'])
def test_comprehensions_in_methods(method):
    numpy.random.seed(0)
    rng = numpy.random.RandomState(33)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.errors.LoopWarning)
        check_grads(None, sequences(rng), model=_Helpers(), method=method)


def test_length_alias_of_another_argument():
    def f(xs, ys, W):
        T = len(ys)
        h = xs[0]
        for t in range(T):
            h = F.tanh(F.matmul(h, W) + xs[t] + ys[t])
        return h
    rng = numpy.random.RandomState(34)
    W = rng.standard_normal((4, 4)).astype(numpy.float32) * 0.5
    calls = [(rng.standard_normal((a, 2, 4)).astype(numpy.float32),
              rng.standard_normal((b, 2, 4)).astype(numpy.float32), W)
             for a, b in ((5, 3), (5, 3), (6, 2), (4, 4), (8, 1), (8, 1))]
    check_grads(f, calls)


def _stack_and_last_of_comprehension(xs, W):
    hs = [F.matmul(x, W) for x in xs]
    return F.stack(hs), hs[-1]


def _stack_and_first_of_loop(xs, W):
    hs = []
    for x in xs:
        hs.append(F.tanh(F.matmul(x, W)))
    return F.stack(hs), hs[0]


def _concat_and_stack(xs, W):
    hs = [F.matmul(x, W) for x in xs]
    return F.concat(hs), F.stack(hs)


def _stack_and_sum_of_last(xs, W):
    hs = [F.matmul(x, W) for x in xs]
    return F.stack(hs), F.sum(hs[-1])


@pytest.mark.parametrize('fn', [_stack_and_last_of_comprehension,
                                _stack_and_first_of_loop, _concat_and_stack,
                                _stack_and_sum_of_last])
def test_list_gradients_from_two_consumers_add_up(fn):
    rng = numpy.random.RandomState(35)
    W = rng.standard_normal((4, 4)).astype(numpy.float32) * 0.5
    check_grads(fn, sequences(rng, W, lengths=(3, 3, 3)))


def test_loss_over_stack_and_last_item_trains_like_eager():
    rng = numpy.random.RandomState(36)
    W0 = rng.standard_normal((4, 4)).astype(numpy.float32)
    jitted = chainerjit.jit(_stack_and_last_of_comprehension)
    for _ in range(3):
        xs = rng.standard_normal((3, 2, 4)).astype(numpy.float32)
        grads = []
        for fn in (_stack_and_last_of_comprehension, jitted):
            W = chainer.Variable(W0.copy())
            seq, last = fn(chainer.Variable(xs.copy()), W)
            (F.sum(seq) + F.sum(last)).backward()
            grads.append(W.grad)
        numpy.testing.assert_allclose(grads[1], grads[0], rtol=1e-5,
                                      atol=1e-6)


class _Collected(chainer.Chain):
    """``L.LSTM``'s states collected step by step and stacked: its first
    step, where the link makes its state, is peeled off the loop."""

    def __init__(self):
        super(_Collected, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(4, 3)

    def forward(self, xs):
        self.lstm.reset_state()
        hs = []
        for x in xs:
            hs.append(self.lstm(x))
        return F.sum(F.stack(hs) ** 2)


def test_a_peeled_loop_collecting_its_steps_serves_one_step_too():
    # A sequence of one step runs the loop no time: its list is empty.
    rng = numpy.random.RandomState(34)
    numpy.random.seed(0)
    jitted = check_seeded(_Collected(), sequences(
        rng, lengths=(3, 5, 1, 4, 1, 2, 6)))
    entry, = jitted.cache_entries()
    assert 'f32[T,2,4]' in str(entry.signature), entry.signature


def _mean_after_the_first(xs, W):
    losses = []
    for x in xs[1:]:
        losses.append(F.sum(F.tanh(F.matmul(x, W))))
    return sum(losses) / len(losses)


def _mean_of_a_counted_range(xs, W):
    losses = []
    for t in range(1, len(xs)):
        losses.append(F.sum(F.tanh(F.matmul(xs[t] - xs[t - 1], W))))
    return F.sum(F.stack(losses)) / len(losses)


def _mean_of_a_comprehension_but_the_last(xs, W):
    losses = [F.sum(F.tanh(F.matmul(x, W))) for x in xs[:-1]]
    return sum(losses) / len(losses)


@pytest.mark.parametrize('fn', [_mean_after_the_first,
                                _mean_of_a_counted_range,
                                _mean_of_a_comprehension_but_the_last])
def test_len_of_the_steps_of_a_cut_loop_is_read_at_run_time(fn):
    # len(losses) is T - 1, not the recorded trip count.
    rng = numpy.random.RandomState(35)
    W = rng.standard_normal((4, 4)).astype(numpy.float32) * 0.5
    jitted = check_grads(fn, sequences(rng, W, lengths=(5, 9, 4, 9, 6)))
    entry, = jitted.cache_entries()
    assert 'f32[T,2,4]' in str(entry.signature), entry.signature


def _steps_rebound_to_their_stack(xs, W):
    hs = []
    h = xs[0] * 0
    for x in xs:
        h = F.tanh(F.matmul(h, W) + x)
        hs.append(h)
    hs = F.stack(hs)  # the name holds the stack from here on
    weights = F.softmax(F.sum(hs * F.broadcast_to(h, hs.shape), axis=2),
                        axis=0)
    return F.sum(hs * F.broadcast_to(F.expand_dims(weights, 2), hs.shape),
                 axis=0)


def test_a_list_rebound_to_its_stack_rolls_into_one_entry():
    rng = numpy.random.RandomState(36)
    W = rng.standard_normal((4, 4)).astype(numpy.float32) * 0.5
    jitted = check_grads(_steps_rebound_to_their_stack,
                         sequences(rng, W, lengths=(5, 9, 4, 9, 6)))
    entry, = jitted.cache_entries()
    assert 'f32[T,2,4]' in str(entry.signature), entry.signature
