"""Values carried through loop regions and collected by them, against
eager Chainer: scans (lists appended to and returned, stacked, sliced or
summed), links that keep state across iterations and calls (``L.LSTM``,
``F.lstm`` with explicit state), states swapped or reshaped between
iterations, losses accumulated over a loop, and values that outlive the
loop.

Each program runs jitted and eagerly with several trip counts: outputs,
input gradients and parameter gradients must equal eager Chainer's (or the
call must fall back to eager mode with a FallbackWarning, which these
tests treat as a failure). Where chainerjit generalizes the trip count (a
symbolic cache entry), the tests also check the cache.
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
from tests.frontend_tests.loop_checks import _differential
from tests.frontend_tests.loop_checks import _fwd
from tests.frontend_tests.loop_checks import _grads
from tests.frontend_tests.loop_checks import _make_seq
from tests.frontend_tests.loop_checks import _make_var_seq
from tests.frontend_tests.loop_checks import _make_while
from tests.frontend_tests.loop_checks import _make_xs
from tests.frontend_tests.loop_checks import _model_check
from tests.frontend_tests.loop_checks import _one_entry
from tests.frontend_tests.loop_checks import init_in_list
from tests.frontend_tests.loop_checks import LENGTHS
from tests.frontend_tests.loop_checks import SYMBOLIC


pytestmark = [
    pytest.mark.adversarial,
    pytest.mark.filterwarnings('ignore::chainerjit.errors.LoopWarning'),
]


# --- scans: appending, returning the list ------------------------------------

def return_list(xs, h):
    ys = []
    for t in range(xs.shape[0]):
        h = F.relu(xs[t] - h)
        ys.append(h)
    return ys


def test_return_the_list_forward():
    _fwd(return_list, _make_seq)


def test_return_the_list_grads():
    _grads(return_list, _make_seq)


def test_return_the_list_new_lengths():
    _fwd(return_list, _make_seq, (5, 9, 2, 9))
    _grads(return_list, _make_seq, (5, 9, 2, 9))


def stack_every_other(xs, h):
    ys = []
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    return F.stack(ys[::2]), ys[-1]


def test_stack_part_of_the_list():
    _fwd(stack_every_other, _make_seq, (5, 9, 2, 9))
    _grads(stack_every_other, _make_seq, (5, 9, 2, 9))


def stack_head(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    return F.stack(ys[:2])


def test_stack_a_slice_that_was_the_whole_list():
    _fwd(stack_head, _as_variable_args(_make_seq), (2, 5, 9))


def test_stack_a_slice_that_was_the_whole_list_grads():
    _grads(stack_head, _make_seq, (2, 5, 5, 9))


def stack_tail(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    return F.stack(ys[-3:])


def test_stack_the_last_three():
    _fwd(stack_tail, _as_variable_args(_make_seq), (3, 5, 9))


def python_sum_of_list(xs, h):
    ys = []
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    return sum(ys) / 4.0


def test_python_sum_of_the_list():
    _fwd(python_sum_of_list, _make_seq, (5, 9, 2, 9))
    _grads(python_sum_of_list, _make_seq, (5, 9, 2, 9))


def list_length_out(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    return F.concat(ys, axis=1), len(ys)


def test_list_length_returned():
    _fwd(list_length_out, _make_seq, (5, 9, 2, 9))


def return_counter(xs, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
    return h, t


def test_counter_returned():
    _fwd(return_counter, _as_variable_args(_make_seq), (2, 3, 7, 3))


# --- links -------------------------------------------------------------------

class LinearRNN(chainer.Chain):
    """The first iteration differs: the state starts as ``None``."""

    def __init__(self):
        super(LinearRNN, self).__init__()
        with self.init_scope():
            self.l_in = L.Linear(3, 4)
            self.l_h = L.Linear(4, 4, nobias=True)

    def forward(self, xs):
        h = None
        for t in range(xs.shape[0]):
            z = self.l_in(xs[t])
            h = F.tanh(z) if h is None else F.tanh(z + self.l_h(h))
        return h


def _make_x3(rng, n):
    return _a(rng, n, 2, 3),


def test_linear_rnn_forward():
    _model_check(LinearRNN, _make_x3, False, (1, 2, 3, 7, 3, 0, 0))


def test_linear_rnn_grads():
    _model_check(LinearRNN, _make_x3, True)


def test_linear_rnn_one_entry():
    jf = _model_check(LinearRNN, _make_x3, True, SYMBOLIC)
    assert jf.cache_info().currsize == 1, jf.cache_report()


class StatefulLSTM(chainer.Chain):
    def __init__(self):
        super(StatefulLSTM, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(3, 4)
            self.out = L.Linear(4, 2)

    def forward(self, xs):
        self.lstm.reset_state()
        ys = []
        for t in range(xs.shape[0]):
            ys.append(self.out(self.lstm(xs[t])))
        return F.stack(ys, axis=1)


def _lstm_state(model):
    return model.lstm.h, model.lstm.c


def test_stateful_lstm_forward():
    _model_check(StatefulLSTM, _make_x3, False, state=_lstm_state)


def test_stateful_lstm_grads():
    _model_check(StatefulLSTM, _make_x3, True, state=_lstm_state)


def test_stateful_lstm_symbolic_entries():
    # The forward resets lstm.h and lstm.c before reading them, so their
    # state before the call is not guarded: one symbolic entry.
    jf = _model_check(StatefulLSTM, _make_x3, False, SYMBOLIC,
                      state=_lstm_state)
    assert jf.cache_info().currsize == 1, jf.cache_report()
    assert jf.cache_info().hits == 2, jf.cache_report()
    for entry in jf.cache_entries():
        assert entry.symbolic is not None
        assert 'xs: f32[T,2,3]' in str(entry.graph)


class CarriedLSTM(chainer.Chain):
    """No reset: the state carries over from call to call."""

    def __init__(self):
        super(CarriedLSTM, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(3, 4)

    def forward(self, xs):
        for t in range(len(xs)):
            h = self.lstm(xs[t])
        return h


def test_stateful_lstm_state_across_calls():
    _model_check(CarriedLSTM, _make_x3, False, (2, 3, 3, 4, 3),
                 state=_lstm_state)


class ExplicitLSTM(chainer.Chain):
    def __init__(self):
        super(ExplicitLSTM, self).__init__()
        with self.init_scope():
            self.x2h = L.Linear(3, 16)
            self.h2h = L.Linear(4, 16, nobias=True)

    def forward(self, xs, c, h):
        for t in range(len(xs)):
            c, h = F.lstm(c, self.x2h(xs[t]) + self.h2h(h))
        return c, h


def _make_explicit(rng, n):
    return _a(rng, n, 2, 3), _a(rng, 2, 4), _a(rng, 2, 4)


def test_f_lstm_explicit_state_forward():
    _model_check(ExplicitLSTM, _make_explicit, False)


def test_f_lstm_explicit_state_grads():
    _model_check(ExplicitLSTM, _make_explicit, True)


def test_f_lstm_explicit_state_one_entry():
    jf = _model_check(ExplicitLSTM, _make_explicit, True, SYMBOLIC)
    assert jf.cache_info().currsize == 1, jf.cache_report()


class Stateless(chainer.Chain):
    def __init__(self):
        super(Stateless, self).__init__()
        with self.init_scope():
            self.cell = L.StatelessLSTM(3, 4)

    def forward(self, xs):
        c = h = None
        hs = []
        for t in range(xs.shape[0]):
            c, h = self.cell(c, h, xs[t])
            hs.append(h)
        return F.stack(hs, axis=1), c


def test_stateless_lstm_forward():
    _model_check(Stateless, _make_x3, False)


def test_stateless_lstm_grads():
    _model_check(Stateless, _make_x3, True)


def test_stateless_lstm_one_entry():
    jf = _model_check(Stateless, _make_x3, True, SYMBOLIC)
    assert jf.cache_info().currsize == 1, jf.cache_report()


class Stacked(chainer.Chain):
    """A loop over time around a loop over the model's own layers."""

    def __init__(self):
        super(Stacked, self).__init__()
        with self.init_scope():
            self.layers = chainer.ChainList(
                *[L.Linear(3, 3) for _ in range(3)])

    def forward(self, xs, h):
        for t in range(len(xs)):
            x = xs[t]
            for layer in self.layers:
                x = F.tanh(layer(x))
            h = h * 0.5 + x
        return h


def test_time_loop_around_layer_loop():
    _model_check(Stacked, _make_seq, False)
    _model_check(Stacked, _make_seq, True)


# --- state shapes and swaps --------------------------------------------------

def swap_state(xs, h, c):
    for t in range(len(xs)):
        h, c = c, F.tanh(h + xs[t])
    return h, c


def _make_swap(rng, n):
    return _a(rng, n, 2, 3), _a(rng, 2, 3), _a(rng, 2, 3)


def test_swapped_state_forward():
    _fwd(swap_state, _make_swap, (1, 2, 3, 7, 3, 4, 3, 2))


def test_swapped_state_grads():
    _grads(swap_state, _make_swap, (1, 2, 3, 7, 3, 4, 3, 2))


def test_swapped_state_new_lengths():
    # h reads what c was two iterations back: the loop stays unrolled.
    _fwd(swap_state, _make_swap, (5, 6, 9, 4, 2, 1, 5, 6, 1))
    _grads(swap_state, _make_swap, (5, 6, 9, 4, 2, 1, 5, 6, 1))


def first_differs(xs):
    h = None
    for t in range(len(xs)):
        if h is None:
            h = xs[t] * 2.0
        else:
            h = F.tanh(h + xs[t])
    return h


def test_first_iteration_differs():
    _fwd(first_differs, _make_xs, (1, 2, 3, 7, 3, 1))
    _grads(first_differs, _make_xs, (1, 2, 3, 7, 3, 1))


# --- accumulating ------------------------------------------------------------

def accumulate_loss(xs, ts):
    loss = 0
    for t in range(len(xs)):
        loss += F.sum((xs[t] - ts[t]) ** 2)
    return loss


def _make_pairs(rng, n):
    return _a(rng, n, 2, 3), _a(rng, n, 2, 3)


def test_accumulated_loss_forward():
    _fwd(accumulate_loss, _make_pairs)


def test_accumulated_loss_grads():
    _grads(accumulate_loss, _make_pairs)


def test_accumulated_loss_one_entry():
    _one_entry(accumulate_loss, _make_pairs, grads=True)


def test_accumulated_loss_over_nothing():
    _fwd(accumulate_loss, _make_pairs, (3, 0, 0, 2))


def mean_over_time(xs):
    acc = xs[0] * 0
    for t in range(len(xs)):
        acc = acc + xs[t]
    return acc / (t + 1)


def test_counter_used_after_the_loop():
    _fwd(mean_over_time, _make_xs, (2, 3, 7, 3))


def test_counter_used_after_the_loop_grads():
    _grads(mean_over_time, _make_xs, (2, 3, 7, 3))


def parity_swap(xs, a, b):
    acc = a * 0
    for t in range(len(xs)):
        a, b = b, a
        acc = acc + xs[t]
    return a * acc, b


def test_python_swap_without_ops():
    _fwd(parity_swap, _as_variable_args(_make_swap), (2, 3, 7, 3))


def test_python_swap_without_ops_grads():
    _grads(parity_swap, _make_swap, (2, 3, 7, 3))


# --- more scans and state ----------------------------------------------------

def append_invariant(xs, h, m):
    hs, ms = [], []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        hs.append(h)
        ms.append(m)
    return F.stack(hs), F.sum(F.stack(ms)) / 4


def _make_seq_mask(rng, n):
    return _a(rng, n, 2, 3), _a(rng, 2, 3), _a(rng, 2, 3)


def test_appending_a_loop_invariant():
    _fwd(append_invariant, _make_seq_mask)


def test_appending_a_loop_invariant_grads():
    _grads(append_invariant, _make_seq_mask)


def test_list_starting_with_the_initial_state():
    _fwd(init_in_list, _make_seq, (1, 2, 3, 7, 3, 5, 9))
    _grads(init_in_list, _make_seq, (1, 2, 3, 7, 3, 5, 9))


def append_slice(xs, h):
    ys = []
    for t in range(len(xs)):
        ys.append(xs[t])
        h = h + ys[-1]
    return F.stack(ys) * 2, h


def test_appending_the_indexed_slice():
    _fwd(append_slice, _make_seq, (1, 2, 3, 7, 3, 5, 9))
    _grads(append_slice, _make_seq, (1, 2, 3, 7, 3, 5, 9))


def last_item(xs, h):
    for x in xs:
        h = F.tanh(x + h)
    return h + x


def test_loop_variable_used_after_the_loop():
    _fwd(last_item, _make_var_seq, (1, 2, 3, 7, 3, 5))
    _grads(last_item, _make_seq, (1, 2, 3, 7, 3, 5))


def index_after(xs, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
    return h + xs[t]


def test_counter_indexes_after_the_loop():
    _fwd(index_after, _as_variable_args(_make_seq), (1, 2, 3, 7, 3, 2))
    _grads(index_after, _make_seq, (1, 2, 3, 7, 3, 2))


def layered_list_state(xs, hs0, Ws):
    hs = [hs0[0], hs0[1]]
    for t in range(len(xs)):
        x = xs[t]
        for k in range(2):
            hs[k] = F.tanh(F.matmul(x, Ws[k]) + hs[k])
            x = hs[k]
    return hs


def _make_layered(rng, n):
    return _a(rng, n, 2, 3), _a(rng, 2, 2, 3), _a(rng, 2, 3, 3) * 0.5


def test_state_kept_in_a_list_per_layer():
    _fwd(layered_list_state, _make_layered)
    _grads(layered_list_state, _make_layered)


def nested_genexpr(xs, ws):
    h = 0
    for t in range(len(xs)):
        h = h + sum(F.tanh(xs[t] * w) for w in ws)
    return h


def test_generator_expression_inside_a_loop():
    def make(rng, n):
        return _a(rng, n, 2, 3), [_a(rng, 2, 3), _a(rng, 2, 3)]
    jf = chainerjit.jit(nested_genexpr)
    _differential(jf, nested_genexpr, _calls(make, LENGTHS), False)
    jf = chainerjit.jit(nested_genexpr)
    _differential(jf, nested_genexpr, _calls(make, LENGTHS), True)


def while_true(xs, h, n):
    t = 0
    while True:
        h = F.tanh(xs[t] + h)
        t += 1
        if t >= n:
            break
    return h


def test_while_true_with_break():
    _fwd(while_true, _make_while, LENGTHS)
    _grads(while_true, _make_while, LENGTHS)


def inplace_accumulate(xs):
    acc = xs[0] * 0
    for t in range(len(xs)):
        acc += xs[t]
    return F.tanh(acc)


def test_in_place_accumulation():
    # On Variables, += makes a new Variable.
    _fwd(inplace_accumulate, _as_variable_args(_make_xs))
    _grads(inplace_accumulate, _make_xs)


def test_in_place_accumulation_on_arrays_runs_eagerly():
    # NumPy's in-place += on arrays: documented to fall back to eager.
    jf = chainerjit.jit(inplace_accumulate)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.FallbackWarning)
        with chainer.no_backprop_mode():
            for args in _calls(_make_xs, LENGTHS):
                testing.assert_results_equal(jf(*args),
                                             inplace_accumulate(*args))
    assert all(e.fallback for e in jf.cache_entries())
