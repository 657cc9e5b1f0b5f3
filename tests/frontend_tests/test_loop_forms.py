"""The forms of Python loops rolled into loop regions, against eager
Chainer: trip counts from arguments (shapes, ``len``, ints), iteration over
Variables, arrays, lists, ``enumerate`` and ``zip``, ``while``, nested
loops, NumPy-side reads and loops over other axes.

Each program runs jitted and eagerly with several trip counts: outputs,
input gradients and parameter gradients must equal eager Chainer's (or the
call must fall back to eager mode with a FallbackWarning, which these
tests treat as a failure). Where chainerjit generalizes the trip count (a
symbolic cache entry), the tests also check the cache. What the loop
bodies do is in ``test_loop_bodies.py``; the checkers are in
``loop_checks.py``.
"""

import chainer
import chainer.functions as F
import pytest

import chainerjit
from chainerjit import testing
from tests.frontend_tests.loop_checks import _a
from tests.frontend_tests.loop_checks import _as_variable_args
from tests.frontend_tests.loop_checks import _calls
from tests.frontend_tests.loop_checks import _differential
from tests.frontend_tests.loop_checks import _fwd
from tests.frontend_tests.loop_checks import _grads
from tests.frontend_tests.loop_checks import _make_rnn
from tests.frontend_tests.loop_checks import _make_seq
from tests.frontend_tests.loop_checks import _make_var_seq
from tests.frontend_tests.loop_checks import _make_while
from tests.frontend_tests.loop_checks import _make_xs
from tests.frontend_tests.loop_checks import _one_entry
from tests.frontend_tests.loop_checks import init_in_list
from tests.frontend_tests.loop_checks import LENGTHS


pytestmark = [
    pytest.mark.adversarial,
    pytest.mark.filterwarnings('ignore::chainerjit.errors.LoopWarning'),
]


# --- programs: the trip count from an argument ---------------------------

def rnn_shape0(xs, h, W):
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t] + F.matmul(h, W))
    return h


def test_range_shape0_forward():
    _fwd(rnn_shape0, _make_rnn)


def test_range_shape0_grads():
    _grads(rnn_shape0, _make_rnn)


def test_range_shape0_one_entry():
    _one_entry(rnn_shape0, _make_rnn)
    jf = _one_entry(rnn_shape0, _make_rnn, grads=True)
    assert 'xs: f32[T,2,3]' in str(jf.cache_entries()[0].graph)


def test_symbolic_entries_serve_one_iteration():
    # Recorded with 5 iterations, the program also runs T=1 (and the
    # carried state alone is the result of T=0 in eager mode, but T=0 is
    # recorded on its own today).
    for fn, make in [(rnn_shape0, _make_rnn), (repeat_n, _make_repeat),
                     (over_sequence, _make_seq), (over_axis1, _make_axis1),
                     (init_in_list, _make_seq)]:
        jf = chainerjit.jit(fn)
        _fwd(fn, _as_variable_args(make), (5, 1, 9, 1), jitted=jf)
        assert jf.cache_info().currsize == 1, jf.cache_report()
        jf = chainerjit.jit(fn)
        _grads(fn, make, (5, 1, 9, 1), jitted=jf)
        assert jf.cache_info().currsize == 1, jf.cache_report()


def test_range_shape0_zero_trips():
    jf = chainerjit.jit(rnn_shape0)
    _fwd(rnn_shape0, _make_rnn, (4, 0, 0, 3, 0), jitted=jf)
    _grads(rnn_shape0, _make_rnn, (0, 0, 2, 0))


def rnn_len_stack(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.sigmoid(xs[t] * h + 0.5)
        ys.append(h)
    return F.stack(ys), h


def test_range_len_stack_forward():
    _fwd(rnn_len_stack, _make_seq)


def test_range_len_stack_grads():
    _grads(rnn_len_stack, _make_seq)


def test_range_len_stack_one_entry():
    _one_entry(rnn_len_stack, _make_seq)
    _one_entry(rnn_len_stack, _make_seq, grads=True)


def from_one(xs):
    h = xs[0]
    for t in range(1, xs.shape[0]):
        h = F.maximum(h, xs[t]) * 0.9 + xs[t] * 0.1
    return h


def test_range_from_one_forward():
    _fwd(from_one, _make_xs, (1, 2, 3, 7, 3, 1))


def test_range_from_one_grads():
    _grads(from_one, _make_xs, (1, 2, 3, 7, 3, 1))


def test_range_from_one_one_entry():
    _one_entry(from_one, _make_xs, lengths=(5, 9, 3))
    _one_entry(from_one, _make_xs, grads=True, lengths=(5, 9, 3))


def repeat_n(h, W, n):
    for _ in range(n):
        h = F.tanh(F.matmul(h, W))
    return h


def _make_repeat(rng, n):
    return _a(rng, 2, 3), _a(rng, 3, 3), n


def test_range_int_argument_forward():
    _fwd(repeat_n, _make_repeat)


def test_range_int_argument_grads():
    _grads(repeat_n, _make_repeat)


def test_range_int_argument_one_entry():
    _one_entry(repeat_n, _make_repeat)
    _one_entry(repeat_n, _make_repeat, grads=True)


def test_range_int_argument_zero_trips():
    _fwd(repeat_n, _make_repeat, (3, 0, 0, 2, 0))
    _grads(repeat_n, _make_repeat, (3, 0, 0, 2, 0))


def test_range_int_keyword_argument():
    def call(rng, n):
        h, W, n = _make_repeat(rng, n)
        return h, W

    calls = _calls(call, (5, 9, 2, 9))
    jf = chainerjit.jit(repeat_n)
    with chainer.no_backprop_mode():
        for (h, W), n in zip(calls, (5, 9, 2, 9)):
            testing.assert_results_equal(jf(h, W, n=n), repeat_n(h, W, n=n))
    assert jf.cache_info().currsize == 1, jf.cache_report()
    assert jf.cache_info().hits == 3, jf.cache_report()


# --- iterating over Variables and arrays -------------------------------------

def over_sequence(xs, h):
    for x in xs:
        h = F.tanh(x + 2 * h)
    return h


def test_for_over_variable_forward():
    _fwd(over_sequence, _make_var_seq, (1, 2, 3, 7, 3, 0))


def test_for_over_variable_grads():
    _grads(over_sequence, _make_seq)


def test_for_over_variable_one_entry():
    _one_entry(over_sequence, _make_var_seq)
    _one_entry(over_sequence, _make_seq, grads=True)


def test_for_over_ndarray_forward():
    # The rows come from ndarray.__iter__, not from an indexing call.
    _fwd(over_sequence, _make_seq, (1, 2, 3, 7, 3, 3, 0))


def enumerate_scan(xs, h, W):
    ys = []
    for t, x in enumerate(xs):
        h = F.tanh(x + F.matmul(h, W))
        ys.append(h * 0.5)
    return F.stack(ys)


def test_enumerate_forward():
    _fwd(enumerate_scan, _make_rnn)


def test_enumerate_grads():
    _grads(enumerate_scan, _make_rnn)


def test_enumerate_one_entry():
    _one_entry(enumerate_scan, _make_rnn, grads=True)


def enumerate_index_other(xs, ws, h):
    for t, x in enumerate(xs):
        h = F.tanh(x * ws[t] + h)
    return h


def _make_two_seqs(rng, n):
    return _a(rng, n, 2, 3), _a(rng, n, 2, 3), _a(rng, 2, 3)


def test_enumerate_indexing_another_sequence_forward():
    _fwd(enumerate_index_other, _make_two_seqs)
    _grads(enumerate_index_other, _make_two_seqs)


def test_enumerate_indexing_another_sequence_longer():
    # ws longer than xs: only its first len(xs) rows are read.
    def make(rng, n):
        xs, ws, h = _make_two_seqs(rng, n)
        return xs, _a(rng, n + 2, 2, 3), h
    _fwd(enumerate_index_other, make, (4, 6, 2, 6))


def zip_pairs(xs, ys, h):
    for x, y in zip(xs, ys):
        h = F.tanh(x * y + h)
    return h


def test_zip_forward():
    _fwd(zip_pairs, _make_two_seqs)


def test_zip_grads():
    _grads(zip_pairs, _make_two_seqs)


def test_zip_one_entry():
    _one_entry(zip_pairs, _make_two_seqs)


def test_zip_second_sequence_shorter():
    # zip stops at the shorter sequence, here the second one.
    def make(rng, n):
        xs, ys, h = _make_two_seqs(rng, n)
        return xs, ys[:max(n - 2, 0)], h
    _fwd(zip_pairs, make, (5, 5, 9, 4))


def test_zip_first_sequence_shorter():
    def make(rng, n):
        xs, ys, h = _make_two_seqs(rng, n)
        return xs[:max(n - 2, 0)], ys, h
    _fwd(zip_pairs, make, (5, 5, 9, 4))


# --- Python lists ------------------------------------------------------------

def over_list(seq, h):
    out = []
    for x in seq:
        h = F.tanh(x + h)
        out.append(F.sum(h, axis=1))
    return h, F.concat(out, axis=0)


def _make_list(rng, n):
    return [_a(rng, 2, 3) for _ in range(n)], _a(rng, 2, 3)


def test_list_of_arrays_forward():
    jf = chainerjit.jit(over_list)
    _differential(jf, over_list, _calls(_make_list, LENGTHS), False)


def test_list_of_arrays_grads():
    jf = chainerjit.jit(over_list)
    _differential(jf, over_list, _calls(_make_list, LENGTHS), True)


def test_list_of_variables_forward():
    def make(rng, n):
        seq, h = _make_list(rng, n)
        return [chainer.Variable(x) for x in seq], h
    jf = chainerjit.jit(over_list)
    _differential(jf, over_list, _calls(make, LENGTHS), False)


def test_ragged_list_broadcasting():
    # Elements of two shapes that broadcast: the iterations differ.
    def make(rng, n):
        return [_a(rng, 1 + k % 2, 3) for k in range(n)], _a(rng, 2, 3)
    jf = chainerjit.jit(over_list)
    calls = _calls(make, LENGTHS)
    _differential(jf, over_list, calls, False)
    _differential(chainerjit.jit(over_list), over_list, calls, True)


# --- while loops ---------------------------------------------------------

def while_counter(xs, h, n):
    t = 0
    while t < n:
        h = F.tanh(xs[t] + h)
        t += 1
    return h


def test_while_counter_forward():
    _fwd(while_counter, _make_while, (1, 2, 3, 7, 3, 0, 0))


def test_while_counter_grads():
    _grads(while_counter, _make_while, (1, 2, 3, 7, 3, 0, 0))


def while_shape(xs, h):
    t = 0
    while t < xs.shape[0]:
        h = F.relu(xs[t] - h) * 0.5
        t = t + 1
    return h


def test_while_over_shape():
    _fwd(while_shape, _make_seq)
    _grads(while_shape, _make_seq)


# --- nested loops ------------------------------------------------------------

def nested(xs, h):
    for t in range(xs.shape[0]):
        for j in range(xs.shape[1]):
            h = F.tanh(xs[t, j] + h)
    return h


def _make_grid(rng, n):
    return _a(rng, n, 1 + n % 3, 2, 3), _a(rng, 2, 3)


def test_nested_two_axes_forward():
    _fwd(nested, _make_grid)


def test_nested_two_axes_grads():
    _grads(nested, _make_grid)


def test_nested_two_axes_same_inner():
    def make(rng, n):
        return _a(rng, n, 3, 2, 3), _a(rng, 2, 3)
    _fwd(nested, make, (2, 3, 4, 3))
    _grads(nested, make, (2, 3, 4, 3))


def nested_axis(xs, h):
    ys = []
    for t in range(xs.shape[0]):
        x = xs[t]
        for j in range(x.shape[1]):
            h = F.tanh(x[:, j] + h * 0.5)
        ys.append(h)
    return F.stack(ys)


def _make_nested_axis(rng, n):
    return _a(rng, n, 2, 3, 4), _a(rng, 2, 4)


def test_nested_inner_over_axis1_forward():
    _fwd(nested_axis, _make_nested_axis)


def test_nested_inner_over_axis1_grads():
    _grads(nested_axis, _make_nested_axis)


def nested_fixed_inner(xs, h, W):
    for t in range(len(xs)):
        for _ in range(2):
            h = F.tanh(F.matmul(h, W) + xs[t])
    return h


def test_nested_inner_reads_outer_counter_forward():
    _fwd(nested_fixed_inner, _make_rnn)


def test_nested_inner_reads_outer_counter_grads():
    _grads(nested_fixed_inner, _make_rnn)


def test_nested_inner_reads_outer_counter_equal_rows_first():
    calls = _calls(_make_rnn, (3, 3, 3))
    calls[0][0][...] = calls[0][0][0]  # the recorded call: equal rows
    testing.assert_jit_matches_eager(nested_fixed_inner, calls)


# --- NumPy-side reads and other axes ----------------------------------------

def numpy_side(xs, h):
    for t in range(xs.shape[0]):
        h = F.tanh(xs.array[t] * 2 + h)
    return h + xs[0]


def test_numpy_side_reads_forward():
    _fwd(numpy_side, _make_var_seq)


def test_numpy_side_reads_grads():
    _grads(numpy_side, _make_seq)


def over_axis1(xs, h):
    for t in range(xs.shape[1]):
        h = F.tanh(xs[:, t] + h)
    return h


def _make_axis1(rng, n):
    return _a(rng, 2, n, 3), _a(rng, 2, 3)


def test_loop_over_axis1():
    _fwd(over_axis1, _make_axis1)
    _grads(over_axis1, _make_axis1)


def test_loop_over_axis1_one_entry():
    jf = _one_entry(over_axis1, _make_axis1, grads=True)
    assert 'xs: f32[2,T,3]' in str(jf.cache_entries()[0].graph)
