"""Symbolic trip counts (``chainerjit.frontend.symbolic``): one cache
entry for every length of the sequence a loop iterates over, against eager
Chainer. Ranges, ``enumerate`` and helpers that read the length, LSTM state
carried across calls of other lengths, ops applied to a stacked scan, the
length of a stacked scan read by Python, the counter indexing Python
constants, and zero iterations.

Every program runs jitted and eagerly over several calls (trip counts and
data change); outputs, structure and gradients must equal eager
Chainer's, or the call must run eagerly with a warning. A LoopWarning
(a loop left unrolled) is fine.

The ``test_was_bug_*`` tests were silently wrong (or crashed) before the
fix they name; they stay as regression tests.
"""

import copy
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from tests.frontend_tests import loop_cases as cases


pytestmark = [
    pytest.mark.adversarial,
    pytest.mark.filterwarnings(
        'ignore::chainerjit.errors.LoopWarning',
        'ignore::chainerjit.errors.RecompileWarning'),
]


def _make_steps(rng, n):
    """A state that needs ``n`` steps of 0.25 to reach 1."""
    return numpy.full((2,), 1 - 0.25 * n, numpy.float32) + 0.01,


# --- trip counts, ranges, helpers -------------------------------------------


def enumerate_from_one(xs, ws, h):
    for t, x in enumerate(xs, 1):
        h = F.tanh(x * ws[t] + h)
    return h


def test_enumerate_with_a_start():
    def make(rng, n):
        return (cases.a(rng, n, 2, 3), cases.a(rng, n + 1, 2, 3),
                cases.a(rng, 2, 3))
    jf = cases.grads(enumerate_from_one, make, (5, 9, 3, 12))
    cases.symbolic(jf)


def enumerate_from_argument(xs, ws, h, k):
    for t, x in enumerate(xs, k):
        h = F.tanh(x * ws[t] + h)
    return h


def test_enumerate_with_a_start_from_an_argument():
    def make(rng, n):
        return (cases.a(rng, n, 2, 3), cases.a(rng, n + 3, 2, 3),
                cases.a(rng, 2, 3), n % 3)
    cases.fwd(enumerate_from_argument, make, (5, 9, 3, 12, 4, 6))


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
        return cases.a(rng, 12, 2, 3), cases.a(rng, 2, 3), n
    cases.fwd(fn, cases.variables(make), (5, 9, 3, 12, 1, 0, 5))


def range_from_two(xs, h):
    for t in range(2, xs.shape[0]):
        h = F.tanh(xs[t] + h)
    return h


def test_range_from_two_below_and_at_its_minimum():
    jf = cases.fwd(range_from_two, cases.variables(cases.seq),
                   (5, 9, 3, 2, 1, 0, 7))
    assert any(e.symbolic is not None for e in jf.cache_entries())


def read_whole_after(xs, h):
    for x in xs:
        h = F.tanh(x + h)
    return h + F.sum(xs, axis=0)


def test_sequence_also_read_whole_after_the_loop():
    # Not symbolic (xs is used whole): one entry per length.
    cases.fwd(read_whole_after, cases.seq, (5, 9, 5, 9))
    cases.grads(read_whole_after, cases.seq, (5, 9, 5, 9))


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
    cases.fwd(fn, cases.variables(cases.seq), (5, 9, 3, 12, 9))


def length_in_a_helper(xs, h):
    def n_steps():
        return len(xs)
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
    return h / n_steps()


def test_length_read_by_a_nested_helper():
    cases.fwd(length_in_a_helper, cases.seq, (5, 9, 3, 9, 5))


def constant_reads(xs, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
    return h + xs[-2] - xs[1]


def test_symbolic_entry_with_constant_reads_below_its_minimum():
    jf = cases.fwd(constant_reads, cases.seq, (5, 9, 3, 2, 9))
    cases.symbolic(jf)
    # T=1: xs[-2] is out of range in both modes.
    xs, h = cases.seq(numpy.random.RandomState(1), 1)
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
        return cases.a(rng, 12, 2, 3), cases.a(rng, 2, 3), n
    jf = cases.fwd(static_trip, cases.variables(make), (5, 9, 3, 12, 1))
    cases.symbolic(jf)
    rng = numpy.random.RandomState(1)
    xs, h = chainer.Variable(cases.a(rng, 3, 2, 3)), cases.a(rng, 2, 3)
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
    cases.fwd(over_a_generator, cases.seq, (5, 9, 3, 5, 9))
    cases.grads(over_a_generator, cases.seq, (5, 9, 5, 9))


def listcomp_python_condition(xs, h):
    ys = [F.tanh(xs[t] + h) for t in range(len(xs)) if t % 2 == 0]
    return F.stack(ys)


def test_list_comprehension_with_a_python_condition():
    cases.fwd(listcomp_python_condition, cases.seq, (5, 9, 3, 5, 9))


def over_python_list(items, h):
    for t in range(len(items)):
        h = F.tanh(items[t] + h)
    return h


def test_lists_of_different_lengths():
    def make(rng, n):
        return [cases.a(rng, 2, 3) for _ in range(n)], cases.a(rng, 2, 3)
    cases.fwd(over_python_list, make, (5, 9, 3, 12, 9, 5, 1, 0))


def counted_in_python(xs, h):
    k = numpy.float32(0)
    c = [0]
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        k += 1
        c[0] += 1
    return h * k + c[0]


def test_python_counters_that_the_snapshot_sees():
    cases.fwd(counted_in_python, cases.seq, (5, 9, 3, 12))


def report_each_step(xs, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        chainer.report({'h': F.sum(h)})
    return h


def test_report_in_a_symbolic_loop():
    jf = chainerjit.jit(report_each_step)
    with chainer.no_backprop_mode():
        for xs, h in cases.calls(cases.seq, (5, 9, 3, 5)):
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
        calls = cases.calls(cases.seq, (5, 9, 5, 3, 9, 4, 4))
        for i, args in enumerate(calls):
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
    cases.fwd(stacked_then_other_ops, cases.seq, (5, 9, 3, 12, 9))


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
    cases.grads(fn, cases.seq, (5, 3, 9, 2, 5))


def test_stacked_scan_mean_forward():
    def fn(xs, h):
        ys = []
        for t in range(len(xs)):
            h = F.tanh(xs[t] + h)
            ys.append(h)
        return F.mean(F.stack(ys), axis=0)
    cases.fwd(fn, cases.seq, (5, 3, 9, 2, 5))


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
    model, twin = cases.twins(CarriedLSTM)
    jf = chainerjit.jit(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        calls = cases.calls(lambda r, n: (cases.a(r, n, 2, 3),), lengths)
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


# --- ops applied to a stacked scan use the recorded length ------------------


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
    cases.grads(_stack_then(_SHAPED_POST[post]), cases.seq, (5, 3, 9, 3))


def while_mean(h):
    ys = []
    while (h.array < 1).any():
        h = h + 0.25
        ys.append(h)
    return F.mean(F.stack(ys), axis=0)


def test_was_bug_while_exit_then_mean_gradients():
    cases.grads(while_mean, _make_steps, (5, 2, 3))


# --- Python reads the shape of a stacked scan -------------------------------


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
    cases.fwd(fn, cases.seq, (6, 10, 4, 6))


def while_stack_shape(h):
    ys = []
    while (h.array < 1).any():
        h = h + 0.25
        ys.append(h)
    s = F.stack(ys)
    return F.sum(s, axis=0) / s.shape[0]


def test_was_bug_while_exit_then_stacked_shape():
    cases.fwd(while_stack_shape, cases.variables(_make_steps), (3, 5, 2))


# --- the counter indexing Python or NumPy constants -------------------------


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
    cases.fwd(fn, cases.seq, (5, 9, 3))


# --- zero iterations of a symbolic entry ------------------------------------


def offset_range(xs, h):
    for t in range(1, xs.shape[0]):
        h = F.tanh(xs[t] + h)
    return h


def test_was_bug_zero_iterations_return_a_copy_of_the_argument():
    jf = chainerjit.jit(offset_range)
    rng = numpy.random.RandomState(0)
    with chainer.no_backprop_mode():
        xs, h = [chainer.Variable(a) for a in cases.seq(rng, 5)]
        jf(xs, h)
        xs, h = [chainer.Variable(a) for a in cases.seq(rng, 1)]
        assert offset_range(xs, h) is h
        assert jf(xs, h) is h


class _FirstStepScaled(chainer.Chain):
    """A first step that differs from the others (``h * 2`` at ``i ==
    0``), peeled off the loop; its output appended with the others', the
    last of them returned (``hs[-1]``: at one step, that first one)."""

    def __init__(self, joined):
        super().__init__()
        with self.init_scope():
            self.lstm = L.LSTM(3, 4)
        self.joined = joined

    def forward(self, xs):
        self.lstm.reset_state()
        hs = []
        for i, x in enumerate(xs):
            h = self.lstm(x)
            if i == 0:
                h = h * 2
            hs.append(h)
        return (F.concat(hs, axis=0), hs[-1]) if self.joined else hs[-1]


@pytest.mark.parametrize('joined', [True, False])
def test_was_bug_a_first_step_of_its_own_returned_at_one_step(joined):
    # The loop left with no iteration gave the state it starts from, not
    # the first step's value appended: the check against eager at one
    # step caught it, and every size then stayed in the key.
    rng = numpy.random.RandomState(0)
    model = _FirstStepScaled(joined)
    jitted = chainerjit.jit(model.forward)
    shapes = [(5, 4), (9, 4), (1, 4), (2, 3), (7, 5), (1, 4), (3, 2)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        with chainer.using_config('train', False):
            for n, batch in shapes:
                xs = rng.standard_normal((n, batch, 3)).astype(
                    numpy.float32)
                testing.assert_results_equal(jitted(xs), model.forward(xs))
    said = [str(w.message) for w in caught
            if issubclass(w.category, errors.RecompileWarning)]
    assert not any('another result' in m for m in said), said
    # One entry for one step, one for every other length and batch size
    # (the first batch change came at a length too short to roll: that
    # entry goes once one takes both).
    signatures = sorted(str(e.signature)[:15] for e in jitted.cache_entries())
    assert signatures == ['xs: f32[1,4,3]@', 'xs: f32[T,B,3]@'], signatures


class _LSTMSteps(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.lstm = L.LSTM(3, 4)

    def forward(self, xs):
        self.lstm.reset_state()
        hs = [self.lstm(x) for x in xs]
        return F.stack(hs), hs[-1]


@pytest.mark.parametrize('train', [True, False])
def test_a_batch_changed_first_at_a_length_too_short_to_roll(train):
    # At two steps the loop does not roll: the entry of that length takes
    # any batch; the next batch change widens the entry of any length,
    # which then serves both.
    rng = numpy.random.RandomState(1)
    model = _LSTMSteps()
    jitted = chainerjit.jit(model.forward)
    with chainer.using_config('train', train):
        for n, batch in [(5, 4), (9, 4), (1, 4), (2, 3), (1, 2), (7, 5),
                         (3, 2), (1, 6)]:
            xs = rng.standard_normal((n, batch, 3)).astype(numpy.float32)
            testing.assert_results_equal(jitted(xs), model.forward(xs))
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('xs: f32[T,B,3]@'), \
        entry.signature


# --- a list of the steps returned --------------------------------------------

class _LazyStateSteps(chainer.Chain):
    """A forward that returns the list of its steps' outputs, as a model
    whose loss is computed outside it does: the program returns them
    stacked, and each call cuts them apart again. Its state made at the
    first step."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.gru = L.StatelessGRU(3, 4)
            self.lstm = L.LSTM(3, 4)
            self.out = L.Linear(4, 2)

    def forward(self, xs):
        h, hs = None, []
        for x in xs:
            if h is None:
                h = self.xp.zeros((len(x), 4), x.dtype)
            h = self.gru(h, x)
            hs.append(h)
        return hs


class _LinkStateSteps(_LazyStateSteps):
    """``L.LSTM``'s outputs scored, returned with its last state."""

    def forward(self, xs):
        self.lstm.reset_state()
        ys = []
        for x in xs:
            ys.append(self.out(self.lstm(x)))
        return ys, self.lstm.h


class _IndexedSteps(_LazyStateSteps):
    """``F.lstm`` over ``xs[t]``, its states made of zeros."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], 4), numpy.float32)
        ys = []
        for t in range(xs.shape[0]):
            c, h = F.lstm(c, self.lstm.upward(xs[t]) + self.lstm.lateral(h))
            ys.append(self.out(h))
        return ys


class _HelpersSteps(_LazyStateSteps):
    """The loop in a helper method, whose list the forward returns."""

    def forward(self, xs):
        return self.scored_steps(xs)

    def scored_steps(self, xs):
        h = c = self.xp.zeros((xs.shape[1], 4), numpy.float32)
        ys = []
        for x in xs:
            c, h = F.lstm(c, self.lstm.upward(x) + self.lstm.lateral(h))
            ys.append(self.out(h))
        return ys


class _ComprehendedSteps(_LazyStateSteps):
    """The steps' list a comprehension makes, returned as it is."""

    def forward(self, xs):
        self.lstm.reset_state()
        return [self.out(self.lstm(x)) for x in xs]


_STEPS_RETURNED = {'lazy state': _LazyStateSteps,
                   'link state': _LinkStateSteps, 'indexed': _IndexedSteps,
                   "a helper's": _HelpersSteps,
                   "a comprehension's": _ComprehendedSteps}


def _steps_and_gradients(model, result, seed):
    """The outputs of ``result`` (its lists' items each) and the model's
    parameters' gradients of a random weighting of them."""
    steps = [v for part in (result if isinstance(result, tuple)
                            else (result,))
             for v in (part if isinstance(part, list) else [part])]
    rng = numpy.random.RandomState(seed)
    model.cleargrads()
    sum(F.sum(v * rng.standard_normal(v.shape).astype(numpy.float32))
        for v in steps).backward()
    return [v.array for v in steps], [p.grad for _, p in
                                      sorted(model.namedparams())]


@pytest.mark.parametrize('form', sorted(_STEPS_RETURNED))
def test_a_list_of_the_steps_returned_serves_every_length(form):
    rng = numpy.random.RandomState(4)
    model = _STEPS_RETURNED[form]()
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    shapes = [(5, 4), (9, 4), (3, 3), (9, 6), (2, 2), (12, 5)]
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        warnings.simplefilter('error', errors.RecompileWarning)
        for seed, (n, batch) in enumerate(shapes):
            xs = rng.standard_normal((n, batch, 3)).astype(numpy.float32)
            expected = _steps_and_gradients(model, model.forward(xs), seed)
            result = jitted(xs)
            assert isinstance(result if form != 'link state' else result[0],
                              list)
            actual = _steps_and_gradients(twin, result, seed)
            assert len(actual[0]) == len(expected[0]) == n + (
                form == 'link state')
            for a, e in zip(actual[0] + actual[1], expected[0] + expected[1]):
                assert (a is None) == (e is None)
                if e is not None:
                    numpy.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('xs: f32[T,B,3]@'), \
        entry.signature


class _StepsTwice(_LazyStateSteps):
    def forward(self, xs):
        hs = []
        for x in xs:
            hs.append(F.tanh(self.out(self.lstm.upward(x)[:, :4])))
        return hs, hs


def test_a_list_of_the_steps_returned_twice_is_one_list():
    rng = numpy.random.RandomState(6)
    model = _StepsTwice()
    jitted = chainerjit.jit(model.forward)
    with chainer.using_config('train', False):
        for n in (5, 7, 3, 9):
            xs = rng.standard_normal((n, 2, 3)).astype(numpy.float32)
            first, second = jitted(xs)
            testing.assert_results_equal(first, model.forward(xs)[0])
            assert second is first or n == 5  # (the recording's: eager's)
    assert jitted.cache_info().currsize == 1
