"""The forms of Python loops rolled into loop regions, against eager
Chainer: trip counts from arguments (shapes, ``len``, ints), iteration over
Variables, arrays, lists, ``enumerate`` and ``zip``, ``while``, nested
loops, ``break`` and ``continue``, comprehensions, helper methods, reversed
ranges and arithmetic on the counter, several loops in one forward, and
the warnings for loops left unrolled.

Each program runs jitted and eagerly with several trip counts: outputs,
input gradients and parameter gradients must equal eager Chainer's (or the
call must fall back to eager mode with a FallbackWarning, which these
tests treat as a failure). Where chainerjit generalizes the trip count (a
symbolic cache entry), the tests also check the cache. The checkers here
are shared with ``test_loop_carried.py``.
"""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing


pytestmark = [
    pytest.mark.adversarial,
    pytest.mark.filterwarnings('ignore::chainerjit.errors.LoopWarning'),
]

RTOL, ATOL = 1e-5, 1e-6
LENGTHS = (1, 2, 3, 7, 3)  # first, then a recompile, then hits
SYMBOLIC = (5, 9, 2)  # one entry when the trip count is symbolic


def _a(rng, *shape):
    return rng.standard_normal(shape).astype(numpy.float32)


def _calls(make, lengths, seed=0):
    rng = numpy.random.RandomState(seed)
    return [make(rng, n) for n in lengths]


def _fwd(fn, make, lengths=LENGTHS, rtol=RTOL, atol=ATOL, **kwargs):
    return testing.assert_jit_matches_eager(
        fn, _calls(make, lengths), rtol=rtol, atol=atol, **kwargs)


def _grads(fn, make, lengths=LENGTHS, rtol=RTOL, atol=ATOL, **kwargs):
    return testing.assert_jit_grads_match_eager(
        fn, _calls(make, lengths), rtol=rtol, atol=atol, **kwargs)


def _as_variable_args(make):
    """``make`` with float arrays as Variables: the first iteration then
    records the same ops as the others (no NumPy op on an argument)."""
    def made(rng, n):
        return tuple(chainer.Variable(a) if isinstance(a, numpy.ndarray)
                     and a.dtype.kind == 'f' else a for a in make(rng, n))
    return made


def _one_entry(fn, make, grads=False, lengths=SYMBOLIC):
    """Runs ``lengths`` (distinct trip counts) and checks that one symbolic
    cache entry served them all."""
    jf = chainerjit.jit(fn)
    (_grads if grads else _fwd)(fn, make, lengths, jitted=jf)
    assert jf.cache_info().currsize == 1, jf.cache_report()
    assert jf.cache_info().hits == len(lengths) - 1, jf.cache_report()
    graph = str(jf.cache_entries()[0].graph)
    assert 'trip=T' in graph, graph
    return jf


# --- a differential checker for nested arguments and models -----------------

def _as_variables(obj):
    """Float arrays (also inside lists and tuples) as fresh Variables that
    require grad."""
    if isinstance(obj, numpy.ndarray) and obj.dtype.kind == 'f':
        return chainer.Variable(obj.copy(), requires_grad=True)
    if isinstance(obj, chainer.Variable):
        return chainer.Variable(obj.array.copy(), requires_grad=True)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_as_variables(o) for o in obj)
    return obj


def _variables_in(obj):
    if isinstance(obj, chainer.Variable):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [v for o in obj for v in _variables_in(o)]
    if isinstance(obj, dict):
        return [v for k in sorted(obj) for v in _variables_in(obj[k])]
    return []


def _seeded_backward(result, seed):
    outs = [v for v in _variables_in(result)
            if v.creator is not None and v.dtype.kind == 'f']
    rng = numpy.random.RandomState(seed)
    chainer.backward(outs, [chainer.Variable(
        rng.standard_normal(v.shape).astype(v.dtype)) for v in outs])


def _assert_grads_equal(actual, expected, rtol, atol, what):
    assert (actual is None) == (expected is None), what
    if expected is not None:
        testing.assert_results_equal(actual, expected, rtol, atol)


def _differential(jitted, eager, calls, grads, models=(), rtol=RTOL,
                  atol=ATOL, state=None):
    """Calls ``jitted`` and ``eager`` (twins) on each argument tuple.

    With ``grads``, float arrays become Variables requiring grad and seeded
    random output gradients are backpropagated in both; input gradients
    and, for ``models = (jit model, eager model)``, parameter gradients
    must agree. Without, runs under ``no_backprop_mode``. ``state(model)``
    returns extra values to compare after each call (a link's state).
    """
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        for i, args in enumerate(calls):
            for m in models:
                m.cleargrads()
            if grads:
                jit_args, eager_args = _as_variables(args), \
                    _as_variables(args)
                actual, expected = jitted(*jit_args), eager(*eager_args)
            else:
                with chainer.no_backprop_mode():
                    expected, actual = eager(*args), jitted(*args)
            testing.assert_results_equal(actual, expected, rtol, atol)
            if state is not None:
                testing.assert_results_equal(
                    state(models[0]), state(models[1]), rtol, atol)
            if not grads:
                continue
            _seeded_backward(expected, i)
            _seeded_backward(actual, i)
            for a, e in zip(_variables_in(jit_args),
                            _variables_in(eager_args)):
                _assert_grads_equal(a.grad_var, e.grad_var, rtol, atol,
                                    'input grad, call %d' % i)
            if models:
                jit_params = dict(models[0].namedparams())
                for name, e in sorted(models[1].namedparams()):
                    _assert_grads_equal(jit_params[name].grad_var,
                                        e.grad_var, rtol, atol,
                                        '%s.grad, call %d' % (name, i))
    entries = jitted.cache_entries()
    for entry in entries:
        assert entry.fallback is None, entry.fallback
        if grads:
            assert entry.training is not None, 'no training program'
    assert jitted.cache_info().hits > 0, 'no call ran the program'
    return jitted


def _twins(cls, *args):
    model = cls(*args)
    twin = cls(*args)
    twin.copyparams(model)
    return model, twin


def _model_check(cls, make, grads, lengths=LENGTHS, method='forward',
                 rtol=RTOL, atol=ATOL, state=None, init_args=()):
    model, twin = _twins(cls, *init_args)
    jitted = chainerjit.jit(getattr(model, method))
    return _differential(jitted, getattr(twin, method),
                         _calls(make, lengths), grads, (model, twin),
                         rtol, atol, state)


# --- programs: the trip count from an argument ---------------------------

def rnn_shape0(xs, h, W):
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t] + F.matmul(h, W))
    return h


def _make_rnn(rng, n):
    return _a(rng, n, 2, 3), _a(rng, 2, 3), _a(rng, 3, 3) * 0.5


def test_range_shape0_forward():
    _fwd(rnn_shape0, _make_rnn)


def test_range_shape0_grads():
    _grads(rnn_shape0, _make_rnn)


def test_range_shape0_one_entry():
    _one_entry(rnn_shape0, _make_rnn)
    jf = _one_entry(rnn_shape0, _make_rnn, grads=True)
    assert 'xs: f32[T,2,3]' in str(jf.cache_entries()[0].graph)


def init_in_list(xs, h):
    ys = [h]
    for t in range(len(xs)):
        h = F.tanh(xs[t] + ys[-1])
        ys.append(h)
    return F.stack(ys)


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


def _make_seq(rng, n):
    return _a(rng, n, 2, 3), _a(rng, 2, 3)


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


def _make_xs(rng, n):
    return _a(rng, n, 2, 3),


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


def _make_var_seq(rng, n):
    xs, h = _make_seq(rng, n)
    return chainer.Variable(xs), h


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


def _make_while(rng, n):
    return _a(rng, 8, 2, 3), _a(rng, 2, 3), n


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
    _fwd(same_sequence_twice, _as_variable_args(_make_seq), (2, 3, 7))


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
