"""A second adversarial round against loop regions, symbolic trip counts,
guards on array branches and loop exits.

Every program runs jitted and eagerly over several calls (trip counts and
data change); outputs, structure and gradients must equal eager
Chainer's, or the call must run eagerly with a warning. A LoopWarning
(a loop left unrolled) is fine; a FallbackWarning is asserted only where
the construct is documented to run eagerly.

The ``test_was_bug_*`` tests were silently wrong (or crashed) when this
round was written; they stay as regression tests.
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


pytestmark = pytest.mark.filterwarnings(
    'ignore::chainerjit.errors.LoopWarning',
    'ignore::chainerjit.errors.RecompileWarning')

RTOL, ATOL = 1e-5, 1e-6


def _a(rng, *shape):
    return rng.standard_normal(shape).astype(numpy.float32)


def _calls(make, lengths, seed=0):
    rng = numpy.random.RandomState(seed)
    return [make(rng, n) for n in lengths]


def _variables(make):
    """``make`` with float arrays wrapped as Variables (the first
    iteration then records the same ops as the others)."""
    def made(rng, n):
        return tuple(chainer.Variable(x) if isinstance(x, numpy.ndarray)
                     and x.dtype.kind == 'f' else x for x in make(rng, n))
    return made


def _fwd(fn, make, lengths, **kwargs):
    return testing.assert_jit_matches_eager(
        fn, _calls(make, lengths), rtol=RTOL, atol=ATOL, **kwargs)


def _grads(fn, make, lengths, **kwargs):
    return testing.assert_jit_grads_match_eager(
        fn, _calls(make, lengths), rtol=RTOL, atol=ATOL, **kwargs)


def _seq(rng, n):
    return _a(rng, n, 2, 3), _a(rng, 2, 3)


def _symbolic(jf):
    """The calls after the first all hit one symbolic entry."""
    info = jf.cache_info()
    assert info.currsize == 1 and info.misses == 1, jf.cache_report()
    assert jf.cache_entries()[0].symbolic is not None


def _twins(cls):
    model, twin = cls(), cls()
    twin.copyparams(model)
    return model, twin


# =============================================================================
# Passing: exits (array tests leaving a loop)
# =============================================================================

def break_not_any(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
        if not (h.array < 0.9).any():
            break
    return F.stack(ys), h


def test_break_on_not_any_forward_and_grads():
    lengths = (5, 9, 3, 12, 7, 7)
    _fwd(break_not_any, _variables(_seq), lengths)
    _grads(break_not_any, _seq, lengths)


def break_numpy_all(xs, h):
    ys = []
    for x in xs:
        h = F.tanh(x * 3 + h)
        ys.append(h)
        if numpy.all(h.array > -0.5):
            break
    return F.concat(ys, axis=0)


def test_break_on_numpy_all_over_a_variable():
    lengths = (5, 9, 3, 12, 7, 7, 8, 20)
    _fwd(break_numpy_all, _seq, lengths)
    _grads(break_numpy_all, _seq, lengths)


def exit_symbolic(xs, h):
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t] + h)
        if (h.array > 0.99).all():
            break
    return h


def test_exit_with_a_symbolic_length_down_to_one_and_zero():
    jf = _grads(exit_symbolic, _seq, (5, 9, 1, 3, 1, 12, 2, 7))
    _symbolic(jf)
    _fwd(exit_symbolic, _variables(_seq), (5, 9, 1, 3, 1, 0, 12, 0, 7))


def exit_unused_outputs(xs, h):
    ys, zs = [], []
    for x in xs:
        h = F.tanh(x + h)
        ys.append(h)
        zs.append(h * 2)  # never used
        if (h.array > 0.9).any():
            break
    return F.stack(ys)


def test_exit_with_an_unused_scan_trains():
    lengths = (5, 9, 3, 12, 7, 7, 1, 8)
    _grads(exit_unused_outputs, _seq, lengths)
    _fwd(exit_unused_outputs, _variables(_seq), lengths)


def exit_after_peel(xs):
    h = None
    ys = []
    for x in xs:
        h = x if h is None else F.tanh(x + h)
        ys.append(h)
        if (h.array > 0.5).all():
            break
    return F.stack(ys), h


def _make_peel(rng, n):
    xs = _a(rng, n, 2) * 0.5
    if n % 2:
        xs[0] = 1.0  # the peeled first iteration leaves at once
    return xs,


def test_exit_in_the_peeled_first_iteration():
    lengths = (5, 9, 3, 12, 7, 6, 1, 8)
    _grads(exit_after_peel, _make_peel, lengths)
    _fwd(exit_after_peel, _variables(_make_peel), lengths)


def exit_loss(xs, ts, W):
    h = xs[0] * 0
    loss = 0
    for t in range(xs.shape[0]):
        h = F.tanh(F.matmul(h, W) + xs[t])
        loss = loss + F.sum((h - ts[t]) ** 2)
        if (h.array > 0.8).any():
            break
    return loss


def test_exit_accumulating_a_loss_trains():
    def make(rng, n):
        return _a(rng, n, 2, 3), _a(rng, n, 2, 3), _a(rng, 3, 3) * 0.5
    _grads(exit_loss, make, (5, 9, 3, 12, 7, 7, 1))


def exit_in_the_middle(xs, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        if (h.array > 0.9).any():
            break
        h = h * 0.5
    return h


def test_exit_in_the_middle_of_the_body():
    lengths = (5, 9, 3, 12, 7, 7, 8)
    _fwd(exit_in_the_middle, _variables(_seq), lengths)
    _grads(exit_in_the_middle, _seq, lengths)


def append_after_exit(xs, h):
    ys = [h]
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        if (h.array > 0.9).any():
            break
        ys.append(h)
    return F.stack(ys)


def test_append_after_the_exit_test():
    _fwd(append_after_exit, _variables(_seq), (5, 9, 3, 12, 7, 7, 8))


def inner_exit(xs, h):
    for t in range(len(xs)):
        for k in range(6):
            h = h * 0.5 + xs[t]
            if (h.array > 1.5).all():
                break
    return h


def _make_inner(rng, n):
    return (numpy.abs(_a(rng, n, 2)) + 0.1 * (n % 4),
            numpy.zeros((2,), numpy.float32))


def test_exit_of_an_inner_loop():
    lengths = (4, 5, 6, 4, 6)
    _fwd(inner_exit, _variables(_make_inner), lengths)
    _grads(inner_exit, _make_inner, lengths)


# --- while loops on array tests ----------------------------------------------

def while_never_runs(h):
    while (h.array > 10).all():
        h = h * 0.5
    return h


def test_while_that_does_not_run_then_runs():
    def make(rng, n):
        return _a(rng, 2, 3) + n,
    _fwd(while_never_runs, _variables(make), (0, 0, 20, 0, 30, 0))


def while_long(h):
    while (h.array < 1).any():
        h = h + 0.01
    return h


def test_while_running_hundreds_of_iterations():
    def make(rng, n):
        return numpy.full((2,), 1 - 0.01 * n + 0.001, numpy.float32),
    _fwd(while_long, _variables(make), (10, 300, 50, 700, 1))


def while_long_stack(h):
    ys = []
    while not (h.array >= 1).all():
        h = h + 0.01
        ys.append(F.sum(h))
    return F.stack(ys)


def test_while_stacking_hundreds_of_iterations_trains():
    def make(rng, n):
        return numpy.full((2,), 1 - 0.01 * n + 0.001, numpy.float32),
    _grads(while_long_stack, make, (10, 300, 50, 700, 2))


def while_previous(h, W):
    prev = h * 0
    while (abs(h.array - prev.array) > 1e-2).any():
        prev = h
        h = F.tanh(F.matmul(h, W) + 0.5)
    return h, prev


def test_while_test_on_the_previous_iteration():
    def make(rng, n):
        return _a(rng, 2, 3) * n, _a(rng, 3, 3) * 0.3
    lengths = (1, 2, 3, 4, 5, 1, 0)
    _grads(while_previous, make, lengths)
    _fwd(while_previous, _variables(make), lengths)


def while_scan_unused(h, W):
    ys = []
    while (h.array < 2).any():
        h = h + F.sigmoid(F.matmul(h, W)) * 0.1 + 0.2
        ys.append(F.sum(h))
    return h


def test_while_with_an_unused_scan_trains():
    def make(rng, n):
        return numpy.abs(_a(rng, 2, 3)) - n, _a(rng, 3, 3)
    _grads(while_scan_unused, make, (1, 2, 5, 3, 8, 0, 1))


def while_counter_index(xs, h):
    t = 0
    while (h.array < 2).any():
        h = h + xs[t]
        t += 1
    return h


def test_while_indexing_with_a_python_counter():
    def make(rng, n):
        xs = numpy.full((12, 2), 0.1, numpy.float32)
        xs[n] = 5
        return xs, numpy.zeros((2,), numpy.float32)
    _fwd(while_counter_index, _variables(make), (3, 5, 2, 7, 3))
    _grads(while_counter_index, make, (3, 5, 2, 7, 3))


def while_returns_list(h):
    ys = []
    while (h.array < 1).any():
        h = h + 0.25
        ys.append(h)
    return ys


def _make_steps(rng, n):
    """A state that needs ``n`` steps of 0.25 to reach 1."""
    return numpy.full((2,), 1 - 0.25 * n, numpy.float32) + 0.01,


def test_while_returning_its_list():
    _fwd(while_returns_list, _variables(_make_steps), (3, 5, 2, 7, 3))


def while_else(h):
    while (h.array < 1).any():
        h = h + 0.25
    else:
        h = h * 2
    return h


def test_while_else_without_break():
    _fwd(while_else, _variables(_make_steps), (3, 5, 0, 2, 7))


# =============================================================================
# Passing: guards
# =============================================================================

def guard_nested(xs, h):
    for t in range(len(xs)):
        for k in range(3):
            if (xs[t].array > 0).all():
                h = F.tanh(h + xs[t])
            else:
                h = F.sigmoid(h - xs[t])
    return h


def _make_signs(rng, n):
    xs, h = _seq(rng, n)
    xs = numpy.abs(xs)
    if n % 3 == 0:
        xs[n // 2] *= -1
    return xs, h


def test_guard_in_nested_loops():
    lengths = (4, 6, 5, 6, 4)
    _fwd(guard_nested, _variables(_make_signs), lengths)
    _grads(guard_nested, _make_signs, lengths)


def guard_in_loop(xs, h):
    for t in range(len(xs)):
        if (xs[t].array > -2).all():
            h = F.tanh(xs[t] + h)
        else:
            h = F.sigmoid(xs[t] - h)
    return h


def test_guard_going_the_other_way_in_a_later_iteration():
    def make(rng, n):
        xs, h = _seq(rng, n)
        xs = numpy.clip(xs, -1.5, None)
        if n in (7, 8):
            xs[n - 3, 0, 0] = -5
        return xs, h
    lengths = (5, 9, 7, 3, 8, 12, 7, 7, 7, 5)
    _fwd(guard_in_loop, _variables(make), lengths)
    _grads(guard_in_loop, make, lengths)


def continue_on_array(xs, h):
    for t in range(len(xs)):
        if (xs[t].array < -1).any():
            continue
        h = F.tanh(xs[t] + h)
    return h


def test_continue_on_an_array_test():
    lengths = (5, 9, 7, 3, 8, 12, 7, 7, 7, 5)
    _fwd(continue_on_array, _variables(_seq), lengths)
    _grads(continue_on_array, _seq, lengths)


def guard_and_dropout(xs, h):
    for t in range(len(xs)):
        h = F.dropout(F.tanh(xs[t] + h), 0.3)
    if (h.array > 0).any():
        h = h * 2
    return h


def test_guard_with_dropout_runs_eagerly_with_a_warning():
    jf = chainerjit.jit(guard_and_dropout)
    calls = _calls(_seq, (5, 9, 5))
    with pytest.warns(errors.FallbackWarning, match='random or stateful'):
        for args in calls:
            numpy.random.seed(1)
            expected = guard_and_dropout(*args)
            numpy.random.seed(1)
            testing.assert_results_equal(jf(*args), expected)
    assert all(e.fallback for e in jf.cache_entries())


def guard_and_dropout_eval(xs, h):
    for t in range(len(xs)):
        h = F.dropout(F.tanh(xs[t] + h), 0.3)
    if (h.array > 0).any():
        h = h * 2
    return h


def test_guard_with_dropout_compiles_in_test_mode():
    with chainer.using_config('train', False):
        _fwd(guard_and_dropout_eval, _seq, (5, 9, 5, 9))


class BNExit(chainer.Chain):
    def __init__(self):
        super(BNExit, self).__init__()
        with self.init_scope():
            self.bn = L.BatchNormalization(3)

    def forward(self, xs, h):
        for t in range(len(xs)):
            h = F.tanh(self.bn(xs[t]) + h)
            if (h.array > 0.99).all():
                break
        return h


def test_exit_with_batchnorm_runs_eagerly_with_a_warning():
    model, twin = _twins(BNExit)
    jf = chainerjit.jit(model.forward)
    with pytest.warns(errors.FallbackWarning, match='random or stateful'):
        for args in _calls(_seq, (5, 9, 3, 9)):
            testing.assert_results_equal(jf(*args), twin(*args))
            numpy.testing.assert_allclose(model.bn.avg_mean,
                                          twin.bn.avg_mean, rtol=RTOL)
            numpy.testing.assert_allclose(model.bn.avg_var,
                                          twin.bn.avg_var, rtol=RTOL)


class BNLoop(BNExit):
    def forward(self, xs, h):
        for t in range(len(xs)):
            h = F.tanh(self.bn(xs[t]) + h)
        return h


def test_batchnorm_statistics_in_a_symbolic_loop():
    model, twin = _twins(BNLoop)
    jf = chainerjit.jit(model.forward)
    for args in _calls(_seq, (5, 9, 3, 9, 5)):
        testing.assert_results_equal(jf(*args), twin(*args), RTOL, 1e-5)
        numpy.testing.assert_allclose(model.bn.avg_mean, twin.bn.avg_mean,
                                      rtol=RTOL, atol=ATOL)
        numpy.testing.assert_allclose(model.bn.avg_var, twin.bn.avg_var,
                                      rtol=RTOL, atol=ATOL)
    assert jf.cache_info().hits > 0
    assert all(e.fallback is None for e in jf.cache_entries())


def listcomp_array_condition(xs, h):
    ys = [F.tanh(x + h) for x in xs if (x.array > -3).all()]
    return F.stack(ys)


def test_array_condition_in_a_comprehension_runs_eagerly_with_a_warning():
    jf = chainerjit.jit(listcomp_array_condition)
    with pytest.warns(errors.FallbackWarning, match='gives a Python value'):
        with chainer.no_backprop_mode():
            for args in _calls(_variables(_seq), (5, 9, 3)):
                testing.assert_results_equal(
                    jf(*args), listcomp_array_condition(*args))


# =============================================================================
# Passing: trip counts, ranges, helpers
# =============================================================================

def enumerate_from_one(xs, ws, h):
    for t, x in enumerate(xs, 1):
        h = F.tanh(x * ws[t] + h)
    return h


def test_enumerate_with_a_start():
    def make(rng, n):
        return _a(rng, n, 2, 3), _a(rng, n + 1, 2, 3), _a(rng, 2, 3)
    jf = _grads(enumerate_from_one, make, (5, 9, 3, 12))
    _symbolic(jf)


def enumerate_from_argument(xs, ws, h, k):
    for t, x in enumerate(xs, k):
        h = F.tanh(x * ws[t] + h)
    return h


def test_enumerate_with_a_start_from_an_argument():
    def make(rng, n):
        return _a(rng, n, 2, 3), _a(rng, n + 3, 2, 3), _a(rng, 2, 3), n % 3
    _fwd(enumerate_from_argument, make, (5, 9, 3, 12, 4, 6))


def range_n_minus_one(xs, h, n):
    for t in range(n - 1):
        h = F.tanh(xs[t] + h)
    return h


def range_step_two(xs, h, n):
    for t in range(0, n, 2):
        h = F.tanh(xs[t] + h)
    return h


@pytest.mark.parametrize('fn', [range_n_minus_one, range_step_two])
def test_range_arithmetic_on_an_int_argument(fn):
    def make(rng, n):
        return _a(rng, 12, 2, 3), _a(rng, 2, 3), n
    _fwd(fn, _variables(make), (5, 9, 3, 12, 1, 0, 5))


def range_from_two(xs, h):
    for t in range(2, xs.shape[0]):
        h = F.tanh(xs[t] + h)
    return h


def test_range_from_two_below_and_at_its_minimum():
    jf = _fwd(range_from_two, _variables(_seq), (5, 9, 3, 2, 1, 0, 7))
    assert any(e.symbolic is not None for e in jf.cache_entries())


def read_whole_after(xs, h):
    for x in xs:
        h = F.tanh(x + h)
    return h + F.sum(xs, axis=0)


def test_sequence_also_read_whole_after_the_loop():
    # Not symbolic (xs is used whole): one entry per length.
    _fwd(read_whole_after, _seq, (5, 9, 5, 9))
    _grads(read_whole_after, _seq, (5, 9, 5, 9))


def closures_of_loop_variable(xs, h):
    fs = []
    for t in range(len(xs)):
        fs.append(lambda v: v + xs[t])  # late binding: all read xs[-1]
    for f in fs:
        h = f(h)
    return h


def closures_with_default(xs, h):
    fs = []
    for t in range(len(xs)):
        fs.append(lambda v, t=t: F.tanh(v + xs[t]))
    for f in fs:
        h = f(h)
    return h


@pytest.mark.parametrize('fn', [closures_of_loop_variable,
                                closures_with_default])
def test_loop_variable_captured_by_lambdas(fn):
    _fwd(fn, _variables(_seq), (5, 9, 3, 12, 9))


def length_in_a_helper(xs, h):
    def n_steps():
        return len(xs)
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
    return h / n_steps()


def test_length_read_by_a_nested_helper():
    _fwd(length_in_a_helper, _seq, (5, 9, 3, 9, 5))


def constant_reads(xs, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
    return h + xs[-2] - xs[1]


def test_symbolic_entry_with_constant_reads_below_its_minimum():
    jf = _fwd(constant_reads, _seq, (5, 9, 3, 2, 9))
    _symbolic(jf)
    # T=1: xs[-2] is out of range in both modes.
    xs, h = _seq(numpy.random.RandomState(1), 1)
    with pytest.raises(IndexError):
        constant_reads(xs, h)
    with pytest.raises(IndexError):
        jf(xs, h)


def static_trip(xs, h, n):
    for t in range(n):
        h = F.tanh(xs[t] + h)
    return h


def test_int_trip_count_past_the_sequence_raises_as_eager():
    def make(rng, n):
        return _a(rng, 12, 2, 3), _a(rng, 2, 3), n
    jf = _fwd(static_trip, _variables(make), (5, 9, 3, 12, 1))
    _symbolic(jf)
    rng = numpy.random.RandomState(1)
    xs, h = chainer.Variable(_a(rng, 3, 2, 3)), _a(rng, 2, 3)
    with chainer.no_backprop_mode():
        with pytest.raises(IndexError):
            static_trip(xs, h, 5)
        with pytest.raises(IndexError):
            jf(xs, h, 5)


def _doubled(xs):
    for x in xs:
        yield x * 2


def over_a_generator(xs, h):
    for y in _doubled(xs):
        h = F.tanh(y + h)
    return h


def test_loop_over_a_user_generator():
    _fwd(over_a_generator, _seq, (5, 9, 3, 5, 9))
    _grads(over_a_generator, _seq, (5, 9, 5, 9))


def listcomp_python_condition(xs, h):
    ys = [F.tanh(xs[t] + h) for t in range(len(xs)) if t % 2 == 0]
    return F.stack(ys)


def test_list_comprehension_with_a_python_condition():
    _fwd(listcomp_python_condition, _seq, (5, 9, 3, 5, 9))


def over_python_list(items, h):
    for t in range(len(items)):
        h = F.tanh(items[t] + h)
    return h


def test_lists_of_different_lengths():
    def make(rng, n):
        return [_a(rng, 2, 3) for _ in range(n)], _a(rng, 2, 3)
    _fwd(over_python_list, make, (5, 9, 3, 12, 9, 5, 1, 0))


def counted_in_python(xs, h):
    k = numpy.float32(0)
    c = [0]
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        k += 1
        c[0] += 1
    return h * k + c[0]


def test_python_counters_that_the_snapshot_sees():
    _fwd(counted_in_python, _seq, (5, 9, 3, 12))


def report_each_step(xs, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        chainer.report({'h': F.sum(h)})
    return h


def test_report_in_a_symbolic_loop():
    jf = chainerjit.jit(report_each_step)
    with chainer.no_backprop_mode():
        for xs, h in _calls(_seq, (5, 9, 3, 5)):
            reporter = chainer.Reporter()
            eager, jitted = {}, {}
            with reporter.scope(eager):
                expected = report_each_step(xs, h)
            with reporter.scope(jitted):
                testing.assert_results_equal(jf(xs, h), expected)
            testing.assert_results_equal(jitted['h'], eager['h'])
    # A report per iteration reads every iteration: not symbolic.
    assert jf.cache_info().currsize == 3


def training_flag(xs, h):
    for t in range(len(xs)):
        x = xs[t]
        if chainer.config.train:
            x = x * 2
        h = F.tanh(x + h)
    return h


def test_train_flag_switching_between_calls():
    jf = chainerjit.jit(training_flag)
    with chainer.no_backprop_mode():
        for i, args in enumerate(_calls(_seq, (5, 9, 5, 3, 9, 4, 4))):
            with chainer.using_config('train', i % 2 == 0):
                testing.assert_results_equal(jf(*args), training_flag(*args))
    assert jf.cache_info().currsize == 2, jf.cache_report()


def stacked_then_other_ops(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(F.sum(h, axis=(0,)))
    return F.vstack(ys), F.dstack(ys), F.hstack(ys)


def test_vstack_dstack_hstack_of_the_scan():
    _fwd(stacked_then_other_ops, _seq, (5, 9, 3, 12, 9))


_GENERIC_POST = {
    'softmax': lambda s: F.softmax(s, axis=0),
    'transpose': lambda s: F.transpose(s, (1, 0, 2)),
    'reshape': lambda s: F.reshape(s, (-1, 3)),
    'mean_squared_error': lambda s: F.mean_squared_error(s, s * 0.5),
    'cumsum': lambda s: F.cumsum(s, axis=0),
    'pad': lambda s: F.pad(s, ((1, 1), (0, 0), (0, 0)), 'constant'),
    'where': lambda s: F.where(s.array > 0, s, s * 0.1),
}


@pytest.mark.parametrize('post', sorted(_GENERIC_POST))
def test_stacked_scan_through_shape_free_ops_trains(post):
    def fn(xs, h):
        ys = []
        for t in range(len(xs)):
            h = F.tanh(xs[t] + h)
            ys.append(h)
        return _GENERIC_POST[post](F.stack(ys))
    # An op on the stacked list could bake its length: one entry per
    # length (only a list returned as it is may vary).
    _grads(fn, _seq, (5, 3, 9, 2, 5))


def test_stacked_scan_mean_forward():
    def fn(xs, h):
        ys = []
        for t in range(len(xs)):
            h = F.tanh(xs[t] + h)
            ys.append(h)
        return F.mean(F.stack(ys), axis=0)
    _fwd(fn, _seq, (5, 3, 9, 2, 5))


# --- links ----------------------------------------------------------------

class CarriedLSTM(chainer.Chain):
    def __init__(self):
        super(CarriedLSTM, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(3, 4)

    def forward(self, xs):
        ys = []
        for x in xs:
            ys.append(self.lstm(x))
        return F.stack(ys)


def _check_lstm(lengths, grads, reset_every=None):
    model, twin = _twins(CarriedLSTM)
    jf = chainerjit.jit(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        calls = _calls(lambda r, n: (_a(r, n, 2, 3),), lengths)
        for i, (xs,) in enumerate(calls):
            if reset_every and i % reset_every == 0:
                model.lstm.reset_state()
                twin.lstm.reset_state()
            model.cleargrads()
            twin.cleargrads()
            with chainer.using_config('enable_backprop', grads):
                actual, expected = jf(xs), twin(xs)
            testing.assert_results_equal(actual, expected, 1e-5, 1e-5)
            testing.assert_results_equal(model.lstm.h, twin.lstm.h,
                                         1e-5, 1e-5)
            if grads:
                F.sum(actual * actual).backward()
                F.sum(expected * expected).backward()
                mine = dict(model.namedparams())
                for name, p in twin.namedparams():
                    assert (p.grad is None) == (mine[name].grad is None)
                    if p.grad is not None:
                        numpy.testing.assert_allclose(
                            mine[name].grad, p.grad, 1e-4, 1e-5,
                            err_msg=name)
    assert jf.cache_info().hits > 0


@pytest.mark.parametrize('reset_every', [None, 2])
@pytest.mark.parametrize('grads', [False, True])
def test_lstm_state_across_calls(grads, reset_every):
    _check_lstm((3, 4, 5, 6, 3, 9, 1, 2, 1), grads, reset_every)


# =============================================================================
# Former bugs, now regression tests
# =============================================================================

# --- 1. gradients of ops applied to a stacked scan use the recorded length --

def _stack_then(post):
    def fn(xs, h):
        ys = []
        for t in range(len(xs)):
            h = F.tanh(xs[t] + h)
            ys.append(h)
        return post(F.stack(ys))
    return fn


_SHAPED_POST = {
    # silently wrong gradients
    'mean_axis0': lambda s: F.mean(s, axis=0),
    'mean_all': lambda s: F.mean(s),
    'average': lambda s: F.average(s, axis=0),
    'last_item': lambda s: s[-1],
    # the backward program raises VMError
    'sum_axis0': lambda s: F.sum(s, axis=0),
    'sum_all': lambda s: F.sum(s),
    'max_axis0': lambda s: F.max(s, axis=0),
    'logsumexp': lambda s: F.logsumexp(s, axis=0),
    'first_two': lambda s: s[:2],
    'broadcast_back': lambda s: s * F.sum(s, axis=0, keepdims=True),
    'tile': lambda s: F.tile(s, (2, 1, 1)),
    'concat_self': lambda s: F.concat([s, s], axis=0),
}


@pytest.mark.parametrize('post', sorted(_SHAPED_POST))
def test_was_bug_stacked_scan_then_reduction_gradients(post):
    _grads(_stack_then(_SHAPED_POST[post]), _seq, (5, 3, 9, 3))


def while_mean(h):
    ys = []
    while (h.array < 1).any():
        h = h + 0.25
        ys.append(h)
    return F.mean(F.stack(ys), axis=0)


def test_was_bug_while_exit_then_mean_gradients():
    _grads(while_mean, _make_steps, (5, 2, 3))


# --- 2. Python reads the shape of a stacked scan -----------------------------

def stacked_len_mul(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    s = F.stack(ys)
    return F.sum(s, axis=0) / s.shape[0]


def stacked_len_builtin(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    return h * len(F.stack(ys))


def stacked_half(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    s = F.stack(ys)
    return s[:s.shape[0] // 2]


def stacked_split(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    return F.split_axis(F.stack(ys), 2, axis=0)


def stacked_separate(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    return F.separate(F.stack(ys), axis=0)


def concat_split(xs, h):
    ys = []
    for x in xs:
        h = F.tanh(x + h)
        ys.append(h)
    return F.split_axis(F.concat(ys, axis=1), 3, axis=1)


@pytest.mark.parametrize('fn', [stacked_len_mul, stacked_len_builtin,
                                stacked_half, stacked_split,
                                stacked_separate, concat_split])
def test_was_bug_python_reads_the_length_of_the_stacked_scan(fn):
    _fwd(fn, _seq, (6, 10, 4, 6))


def while_stack_shape(h):
    ys = []
    while (h.array < 1).any():
        h = h + 0.25
        ys.append(h)
    s = F.stack(ys)
    return F.sum(s, axis=0) / s.shape[0]


def test_was_bug_while_exit_then_stacked_shape():
    _fwd(while_stack_shape, _variables(_make_steps), (3, 5, 2))


# --- 3. Python state changed by the loop that the snapshot misses ----------

def dict_counter(xs, h):
    c = {'n': 0}
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        c['n'] += 1
    return h * c['n']


def set_counter(xs, h):
    seen = set()
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        seen.add(len(seen))
    return h * len(seen)


class _Box(object):
    pass


def attribute_counter(xs, h):
    box = _Box()
    box.n = 0
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        box.n += 1
    return h * box.n


def numpy_inplace_counter(xs, h):
    k = numpy.zeros((), numpy.float32)
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        k += 1
    return h * k


def list_extended(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys += [h]
    return F.stack(ys) * len(ys)


@pytest.mark.parametrize('fn', [dict_counter, set_counter,
                                attribute_counter, numpy_inplace_counter,
                                list_extended])
def test_was_bug_python_state_the_snapshot_misses(fn):
    _fwd(fn, _seq, (5, 9, 3))


class StepCounter(chainer.Chain):
    def __init__(self):
        super(StepCounter, self).__init__()
        with self.init_scope():
            self.lin = L.Linear(3, 3)
        self.steps = 0

    def forward(self, xs, h):
        self.steps = 0
        for t in range(len(xs)):
            h = F.tanh(self.lin(xs[t]) + h)
            self.steps += 1
        return h * self.steps


def test_was_bug_model_attribute_counted_in_a_symbolic_loop():
    model, twin = _twins(StepCounter)
    jf = chainerjit.jit(model.forward)
    with chainer.no_backprop_mode():
        for args in _calls(_seq, (5, 9, 3)):
            testing.assert_results_equal(jf(*args), twin(*args))
            assert model.steps == twin.steps


# --- 4. the counter indexing Python or NumPy constants ---------------------

def schedule_list(xs, h):
    scales = [1.0] * 6 + [3.0] * 20
    for t in range(len(xs)):
        h = F.tanh(xs[t] * scales[t] + h)
    return h


SCALES = numpy.array([1.0] * 6 + [3.0] * 20, numpy.float32)


def schedule_global_array(xs, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] * SCALES[t] + h)
    return h


@pytest.mark.parametrize('fn', [schedule_list, schedule_global_array])
def test_was_bug_counter_indexes_a_python_constant(fn):
    _fwd(fn, _seq, (5, 9, 3))


# --- 5. Python state of loops with exits -----------------------------------

def while_counts_steps(h):
    n = 0
    while (h.array < 1).any():
        h = h + 0.25
        n += 1
    return h * n


def while_returns_steps(h):
    n = 0
    while (h.array < 1).any():
        h = h + 0.25
        n += 1
    return h, n


def while_returns_len(h):
    ys = []
    while (h.array < 1).any():
        h = h + 0.25
        ys.append(h)
    return F.stack(ys), len(ys)


@pytest.mark.parametrize('fn', [while_counts_steps, while_returns_steps,
                                while_returns_len])
def test_was_bug_while_exit_with_a_python_counter(fn):
    _fwd(fn, _variables(_make_steps), (3, 5, 2))


def break_counts_steps(xs, h):
    steps = 0
    for t in range(xs.shape[0]):
        h = h * 0.5 + xs[t]
        steps += 1
        if (h.array > 3).all():
            break
    return h / steps


def test_was_bug_break_with_a_python_counter():
    def make(rng, n):
        xs = numpy.ones((10, 2), numpy.float32)
        xs[n] = 10
        return xs, numpy.zeros((2,), numpy.float32)
    _fwd(break_counts_steps, _variables(make), (3, 5, 2))


# --- 6. Python statements after the exit -----------------------------------

def assign_after_break(xs, h):
    prev = h
    for t in range(len(xs)):
        h = h * 0.5 + xs[t]
        if (h.array > 100).all():
            break
        prev = h
    return h, prev


def accept_unless(xs, h):
    for t in range(len(xs)):
        candidate = h * 0.5 + xs[t]
        if (candidate.array > 100).all():
            break
        h = candidate
    return h


def _make_jump(rng, n):
    """Ones, and a large row at ``n`` (no row when ``n`` is past the
    end): the loop breaks there."""
    xs = numpy.ones((4, 2), numpy.float32)
    if n < 4:
        xs[n] = 1000
    return xs, numpy.zeros((2,), numpy.float32)


@pytest.mark.parametrize('fn', [assign_after_break, accept_unless])
def test_was_bug_assignment_after_the_break(fn):
    _fwd(fn, _variables(_make_jump), (9, 2, 9))


def for_else(xs, h):
    for t in range(len(xs)):
        h = h * 0.5 + xs[t]
        if (h.array > 100).all():
            break
    else:
        h = h * 10
    return h


@pytest.mark.parametrize('first', [9, 1])
def test_was_bug_for_else_with_an_array_break(first):
    _fwd(for_else, _variables(_make_jump), (first, 1, 9, 1, 9))


# --- 7. zero iterations of a symbolic entry --------------------------------

def offset_range(xs, h):
    for t in range(1, xs.shape[0]):
        h = F.tanh(xs[t] + h)
    return h


def test_was_bug_zero_iterations_return_a_copy_of_the_argument():
    jf = chainerjit.jit(offset_range)
    rng = numpy.random.RandomState(0)
    with chainer.no_backprop_mode():
        xs, h = [chainer.Variable(a) for a in _seq(rng, 5)]
        jf(xs, h)
        xs, h = [chainer.Variable(a) for a in _seq(rng, 1)]
        assert offset_range(xs, h) is h
        assert jf(xs, h) is h
