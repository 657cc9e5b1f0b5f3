"""What the bodies of loop regions do, against eager Chainer: ``break``,
``continue`` and ``return`` inside the loop, comprehensions, helper
methods, reversed ranges and arithmetic on the counter, several loops in
one forward, and the warnings for loops left unrolled.

Each program runs jitted and eagerly with several trip counts: outputs,
input gradients and parameter gradients must equal eager Chainer's (or the
call must fall back to eager mode with a FallbackWarning, which these
tests treat as a failure). Where chainerjit generalizes the trip count (a
symbolic cache entry), the tests also check the cache. The forms of the
loops themselves are in ``test_loop_forms.py``; the checkers are in
``loop_checks.py``.
"""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from tests.frontend_tests.loop_checks import _a
from tests.frontend_tests.loop_checks import _as_variable_args
from tests.frontend_tests.loop_checks import _calls
from tests.frontend_tests.loop_checks import _fwd
from tests.frontend_tests.loop_checks import _grads
from tests.frontend_tests.loop_checks import _make_rnn
from tests.frontend_tests.loop_checks import _make_seq
from tests.frontend_tests.loop_checks import _make_xs
from tests.frontend_tests.loop_checks import _model_check
from tests.frontend_tests.loop_checks import LENGTHS
from tests.frontend_tests.loop_checks import SYMBOLIC


pytestmark = [
    pytest.mark.adversarial,
    pytest.mark.filterwarnings('ignore::chainerjit.errors.LoopWarning'),
]


# --- break and continue ------------------------------------------------------

def break_at_3(xs, h):
    for t in range(xs.shape[0]):
        if t == 3:
            break
        h = F.tanh(xs[t] + h)
    return h


def test_break_forward():
    _fwd(break_at_3, _make_seq, (1, 2, 3, 7, 3, 5))


def test_break_grads():
    _grads(break_at_3, _make_seq, (1, 2, 3, 7, 3, 5))


def test_break_after_recording_a_break():
    _fwd(break_at_3, _make_seq, (7, 5, 9, 5, 2))


def continue_odd(xs, h):
    for t in range(len(xs)):
        if t % 2:
            continue
        h = F.tanh(xs[t] + h)
    return h


def test_continue_forward():
    _fwd(continue_odd, _make_seq)


def test_continue_grads():
    _grads(continue_odd, _make_seq)


def skip_tail(xs, h):
    for t in range(len(xs)):
        if t >= 4:
            continue
        h = F.tanh(xs[t] + h)
    return h


def test_continue_past_a_threshold():
    _fwd(skip_tail, _make_seq, (2, 3, 7, 3, 7))


def break_on_argument(xs, h, k):
    for t in range(len(xs)):
        if t == k:
            break
        h = F.tanh(xs[t] + h)
    return h


def test_break_on_an_int_argument():
    def make(rng, n):
        return _make_seq(rng, n) + (3,)
    _fwd(break_on_argument, _as_variable_args(make), (2, 3, 7))


def return_in_loop(xs, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        if t == 3:
            return h * 2
    return h


def test_return_inside_the_loop():
    _fwd(return_in_loop, _as_variable_args(_make_seq), (2, 3, 7, 3, 5))


# --- comprehensions ----------------------------------------------------------

def listcomp_stack(xs, W):
    return F.stack([F.tanh(F.matmul(xs[t], W)) for t in range(len(xs))])


def _make_xs_w(rng, n):
    return _a(rng, n, 2, 3), _a(rng, 3, 3)


def test_list_comprehension():
    _fwd(listcomp_stack, _make_xs_w)
    _grads(listcomp_stack, _make_xs_w)


def genexpr_sum(xs):
    return sum(F.sum(x * x) for x in xs)


def test_generator_expression_sum():
    _fwd(genexpr_sum, _make_xs)
    _grads(genexpr_sum, _make_xs)


def test_generator_expression_sum_over_nothing():
    _fwd(genexpr_sum, _make_xs, (2, 0, 0))


# --- helpers and methods -----------------------------------------------------

class HelperStep(chainer.Chain):
    def __init__(self):
        super(HelperStep, self).__init__()
        with self.init_scope():
            self.lin = L.Linear(3, 3)

    def step(self, x, h):
        return F.tanh(self.lin(x) + h)

    def run(self, xs, h):
        for t in range(len(xs)):
            h = self.step(xs[t], h)
        return h

    def forward(self, xs, h):
        return self.run(xs, h) * 2

    def forward_inline(self, xs, h):
        for t in range(xs.shape[0]):
            h = self.step(xs[t], h)
        return h


def test_loop_in_a_helper_method():
    _model_check(HelperStep, _make_seq, False)
    _model_check(HelperStep, _make_seq, True)


def test_loop_calling_a_helper_method():
    _model_check(HelperStep, _make_seq, False, method='forward_inline')
    jf = _model_check(HelperStep, _make_seq, True, SYMBOLIC,
                      method='forward_inline')
    assert jf.cache_info().currsize == 1, jf.cache_report()


class Encoder(chainer.Chain):
    def __init__(self):
        super(Encoder, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(3, 3)


class NestedLinks(chainer.Chain):
    """Links called through the links that hold them."""

    def __init__(self):
        super(NestedLinks, self).__init__()
        with self.init_scope():
            self.enc = Encoder()
            self.cell = L.LSTM(3, 3)

    def forward(self, xs, h):  # the LSTM's own state, a link two deep
        self.enc.lstm.reset_state()
        for t in range(len(xs)):
            h = self.enc.lstm(xs[t] + h)
        return h

    def forward_by_parts(self, xs, h):  # its linear layers, a step by hand
        c = h * 0
        for t in range(xs.shape[0]):
            c, h = F.lstm(c, self.cell.upward(xs[t]) +
                          self.cell.lateral(h))
        return h, c


def test_a_loop_calling_links_of_links_rolls():
    for method in ('forward', 'forward_by_parts'):
        _model_check(NestedLinks, _make_seq, False, method=method)
        jf = _model_check(NestedLinks, _make_seq, True, SYMBOLIC,
                          method=method)
        assert jf.cache_info().currsize == 1, jf.cache_report()


class Counting(chainer.Link):
    def __init__(self):
        super(Counting, self).__init__()
        self.calls = 0

    def forward(self, h):
        self.calls += 1
        return F.tanh(h)


class CountingInside(chainer.Chain):
    """A link of a link counting its calls in a Python attribute, read
    after the loop: as many as its steps."""

    def __init__(self):
        super(CountingInside, self).__init__()
        with self.init_scope():
            self.enc = chainer.Chain()
            with self.enc.init_scope():
                self.enc.count = Counting()
                self.enc.lin = L.Linear(3, 3)

    def forward(self, xs, h):
        self.enc.count.calls = 0
        for t in range(len(xs)):
            h = self.enc.count(self.enc.lin(xs[t]) + h)
        return h * self.enc.count.calls


def test_python_state_of_a_link_of_a_link_is_seen():
    # (the counter's last value is in the key: lengths repeat to hit)
    for grads in (False, True):
        _model_check(CountingInside, _make_seq, grads, (5, 5, 9, 9, 2, 2),
                     state=lambda model: model.enc.count.calls)


# --- reverse and counter arithmetic ------------------------------------------

def reverse_range(xs, h):
    ys = []
    for t in range(xs.shape[0] - 1, -1, -1):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    return F.stack(ys[::-1]), h


def test_reverse_range():
    _fwd(reverse_range, _make_seq)
    _grads(reverse_range, _make_seq)


def reversed_builtin(xs, h):
    for t in reversed(range(len(xs))):
        h = F.tanh(xs[t] * h + xs[t])
    return h


def test_reversed_builtin():
    _fwd(reversed_builtin, _make_seq)
    _grads(reversed_builtin, _make_seq)


def bidirectional(xs, h):
    fw, bw = h, h
    for t in range(len(xs)):
        fw = F.tanh(xs[t] + fw)
        bw = F.tanh(xs[-1 - t] + bw)
    return fw, bw


def test_forward_and_backward_in_one_loop():
    _fwd(bidirectional, _make_seq)
    _grads(bidirectional, _make_seq)


def counter_scale(xs, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h * t)
    return h


def test_counter_as_a_multiplier():
    _fwd(counter_scale, _make_seq)
    _grads(counter_scale, _make_seq)


def counter_floor(xs, h):
    for t in range(len(xs)):
        h = h + xs[t] * (t // 3)
    return h


def test_counter_constant_over_the_first_trips():
    _fwd(counter_floor, _make_seq, (2, 3, 7, 3))


def test_counter_constant_over_the_first_trips_grads():
    _grads(counter_floor, _make_seq, (2, 3, 7, 3))


def branch_on_counter(xs, h):
    for t in range(len(xs)):
        if t < 4:
            h = F.tanh(xs[t] + h)
        else:
            h = F.sigmoid(xs[t] + h)
    return h


def test_branch_on_counter():
    _fwd(branch_on_counter, _make_seq, (2, 3, 7, 3))


def test_branch_on_counter_grads():
    _grads(branch_on_counter, _make_seq, (2, 3, 7, 3))


def alternate_weights(xs, ws, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] * ws[t % 2] + h)
    return h


def _make_alternate(rng, n):
    return _a(rng, n, 2, 3), _a(rng, 6, 2, 3), _a(rng, 2, 3)


def test_alternating_weights_by_counter_modulo():
    _fwd(alternate_weights, _make_alternate, (2, 3, 5, 3))


def test_alternating_weights_by_counter_modulo_grads():
    _grads(alternate_weights, _make_alternate, (2, 3, 5, 3))


def clamped_counter(xs, h):
    for t in range(len(xs)):
        t = min(t, 1)
        h = F.tanh(xs[t] + h)
    return h


def test_counter_reassigned_in_the_body():
    _fwd(clamped_counter, _as_variable_args(_make_seq), (2, 3, 7, 3))


# --- several loops -----------------------------------------------------------

def two_loops(xs, ys, h):
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t] + h)
    for t in range(ys.shape[0]):
        h = F.sigmoid(ys[t] * h)
    return h


def test_two_loops_over_independent_lengths():
    def make(rng, n):
        return _a(rng, n, 2, 3), _a(rng, 1 + (n * 5) % 4, 2, 3), \
            _a(rng, 2, 3)
    _fwd(two_loops, make, (2, 3, 4, 7, 3, 5))
    _grads(two_loops, make, (2, 3, 4, 7, 3, 5))


def same_sequence_twice(xs, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
    g = h
    for t in range(1, len(xs)):
        g = g * xs[t] + h
    return g + xs[-1]


def test_two_loops_over_the_same_sequence():
    _fwd(same_sequence_twice, _make_seq, (1, 2, 3, 7, 3, 1))


def test_two_loops_over_the_same_sequence_grads():
    _grads(same_sequence_twice, _make_seq, (1, 2, 3, 7, 3, 1))


def test_two_loops_over_the_same_sequence_variables():
    _fwd(same_sequence_twice, _as_variable_args(_make_seq), (2, 3, 7, 3, 7))


def test_two_loops_over_the_same_sequence_long():
    # Both loops rolled (trip T and T-1): correct, though not generalized
    # (one entry per length today).
    _fwd(same_sequence_twice, _make_seq, (5, 9, 5, 9))
    _grads(same_sequence_twice, _make_seq, (5, 9, 5, 9))


def long_loop(xs, h, W):
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t] + F.matmul(h, W))
    return h


def test_long_loop():
    _fwd(long_loop, _make_rnn, (40, 3, 64, 40), rtol=1e-4, atol=1e-5)
    _grads(long_loop, _make_rnn, (40, 3, 64, 40), rtol=1e-4, atol=1e-5)


# --- warnings --------------------------------------------------------------

def unrolled_for_warning(xs, h):
    for t in range(len(xs)):
        if t % 2:
            continue
        h = F.tanh(xs[t] + h)
    return h


def test_unrolled_loop_warns_once():
    jf = chainerjit.jit(unrolled_for_warning)
    with pytest.warns(errors.LoopWarning, match='unrolled'):
        _fwd(unrolled_for_warning, _make_seq, (3, 3), jitted=jf)


def strided(xs, h):
    for t in range(0, xs.shape[0], 2):
        h = F.tanh(xs[t] + h)
    return h


def test_a_strided_loop_says_so_and_equals_eager():
    jf = chainerjit.jit(strided)
    with pytest.warns(errors.LoopWarning, match='steps 2 apart'):
        _fwd(strided, _make_seq, (5, 9, 5, 2), jitted=jf)
    _grads(strided, _make_seq, (5, 9, 5, 2))


class DifferentLayers(chainer.Chain):
    def __init__(self):
        super(DifferentLayers, self).__init__()
        with self.init_scope():
            self.layers = chainer.ChainList(
                L.Linear(3, 4), L.Linear(4, 5), L.Linear(5, 2))

    def forward(self, x):
        for layer in self.layers:
            x = F.relu(layer(x))
        return x


def test_layers_of_different_sizes_do_not_warn():
    # Unrolled, but over the model's own list: the trip count never varies.
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        _model_check(DifferentLayers, _make_seq_first, False, (2, 2, 4, 4))
        _model_check(DifferentLayers, _make_seq_first, True, (2, 2, 4, 4))


def _make_seq_first(rng, n):
    return _a(rng, n, 3),


def data_dependent_break(xs, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        if float(F.sum(h).array) > 1.0:
            break
    return h


def test_data_dependent_break_runs_eagerly():
    # Documented: reading an array value into Python falls back to eager.
    jf = chainerjit.jit(data_dependent_break)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.FallbackWarning)
        for args in _calls(_make_seq, LENGTHS):
            with chainer.no_backprop_mode():
                testing.assert_results_equal(
                    jf(*args), data_dependent_break(*args))
    assert all(e.fallback for e in jf.cache_entries())
