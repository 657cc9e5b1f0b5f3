"""Array tests inside loop regions, against eager Chainer: exits (a
``break`` on an array value, ``while`` on an array test), guards on array
branches in a loop body, and the Python statements that follow an exit.

Every program runs jitted and eagerly over several calls (trip counts and
data change); outputs, structure and gradients must equal eager
Chainer's, or the call must run eagerly with a warning. A LoopWarning
(a loop left unrolled) is fine; a FallbackWarning is asserted only where
the construct is documented to run eagerly.

The ``test_was_bug_*`` tests were silently wrong (or crashed) before the
fix they name; they stay as regression tests.
"""

import chainer
from chainer import Variable
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


# --- exits: array tests leaving a loop --------------------------------------

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
    cases.fwd(break_not_any, cases.variables(cases.seq), lengths)
    cases.grads(break_not_any, cases.seq, lengths)


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
    cases.fwd(break_numpy_all, cases.seq, lengths)
    cases.grads(break_numpy_all, cases.seq, lengths)


def exit_symbolic(xs, h):
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t] + h)
        if (h.array > 0.99).all():
            break
    return h


def test_exit_with_a_symbolic_length_down_to_one_and_zero():
    jf = cases.grads(exit_symbolic, cases.seq, (5, 9, 1, 3, 1, 12, 2, 7))
    cases.symbolic(jf)
    cases.fwd(exit_symbolic, cases.variables(cases.seq),
              (5, 9, 1, 3, 1, 0, 12, 0, 7))


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
    cases.grads(exit_unused_outputs, cases.seq, lengths)
    cases.fwd(exit_unused_outputs, cases.variables(cases.seq), lengths)


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
    xs = cases.a(rng, n, 2) * 0.5
    if n % 2:
        xs[0] = 1.0  # the peeled first iteration leaves at once
    return xs,


def test_exit_in_the_peeled_first_iteration():
    lengths = (5, 9, 3, 12, 7, 6, 1, 8)
    cases.grads(exit_after_peel, _make_peel, lengths)
    cases.fwd(exit_after_peel, cases.variables(_make_peel), lengths)


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
        return (cases.a(rng, n, 2, 3), cases.a(rng, n, 2, 3),
                cases.a(rng, 3, 3) * 0.5)
    cases.grads(exit_loss, make, (5, 9, 3, 12, 7, 7, 1))


def exit_in_the_middle(xs, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        if (h.array > 0.9).any():
            break
        h = h * 0.5
    return h


def test_exit_in_the_middle_of_the_body():
    lengths = (5, 9, 3, 12, 7, 7, 8)
    cases.fwd(exit_in_the_middle, cases.variables(cases.seq), lengths)
    cases.grads(exit_in_the_middle, cases.seq, lengths)


def append_after_exit(xs, h):
    ys = [h]
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        if (h.array > 0.9).any():
            break
        ys.append(h)
    return F.stack(ys)


def test_append_after_the_exit_test():
    cases.fwd(append_after_exit, cases.variables(cases.seq),
              (5, 9, 3, 12, 7, 7, 8))


def inner_exit(xs, h):
    for t in range(len(xs)):
        for k in range(6):
            h = h * 0.5 + xs[t]
            if (h.array > 1.5).all():
                break
    return h


def _make_inner(rng, n):
    return (numpy.abs(cases.a(rng, n, 2)) + 0.1 * (n % 4),
            numpy.zeros((2,), numpy.float32))


def test_exit_of_an_inner_loop():
    lengths = (4, 5, 6, 4, 6)
    cases.fwd(inner_exit, cases.variables(_make_inner), lengths)
    cases.grads(inner_exit, _make_inner, lengths)


# --- while loops on array tests ----------------------------------------------

def while_never_runs(h):
    while (h.array > 10).all():
        h = h * 0.5
    return h


def test_while_that_does_not_run_then_runs():
    def make(rng, n):
        return cases.a(rng, 2, 3) + n,
    cases.fwd(while_never_runs, cases.variables(make), (0, 0, 20, 0, 30, 0))


def while_long(h):
    while (h.array < 1).any():
        h = h + 0.01
    return h


def test_while_running_hundreds_of_iterations():
    def make(rng, n):
        return numpy.full((2,), 1 - 0.01 * n + 0.001, numpy.float32),
    cases.fwd(while_long, cases.variables(make), (10, 300, 50, 700, 1))


def while_long_stack(h):
    ys = []
    while not (h.array >= 1).all():
        h = h + 0.01
        ys.append(F.sum(h))
    return F.stack(ys)


def test_while_stacking_hundreds_of_iterations_trains():
    def make(rng, n):
        return numpy.full((2,), 1 - 0.01 * n + 0.001, numpy.float32),
    cases.grads(while_long_stack, make, (10, 300, 50, 700, 2))


def while_previous(h, W):
    prev = h * 0
    while (abs(h.array - prev.array) > 1e-2).any():
        prev = h
        h = F.tanh(F.matmul(h, W) + 0.5)
    return h, prev


def test_while_test_on_the_previous_iteration():
    def make(rng, n):
        return cases.a(rng, 2, 3) * n, cases.a(rng, 3, 3) * 0.3
    lengths = (1, 2, 3, 4, 5, 1, 0)
    cases.grads(while_previous, make, lengths)
    cases.fwd(while_previous, cases.variables(make), lengths)


def while_scan_unused(h, W):
    ys = []
    while (h.array < 2).any():
        h = h + F.sigmoid(F.matmul(h, W)) * 0.1 + 0.2
        ys.append(F.sum(h))
    return h


def test_while_with_an_unused_scan_trains():
    def make(rng, n):
        return numpy.abs(cases.a(rng, 2, 3)) - n, cases.a(rng, 3, 3)
    cases.grads(while_scan_unused, make, (1, 2, 5, 3, 8, 0, 1))


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
    cases.fwd(while_counter_index, cases.variables(make), (3, 5, 2, 7, 3))
    cases.grads(while_counter_index, make, (3, 5, 2, 7, 3))


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
    cases.fwd(while_returns_list, cases.variables(_make_steps),
              (3, 5, 2, 7, 3))


def while_else(h):
    while (h.array < 1).any():
        h = h + 0.25
    else:
        h = h * 2
    return h


def test_while_else_without_break():
    cases.fwd(while_else, cases.variables(_make_steps), (3, 5, 0, 2, 7))


# --- guards on array branches -----------------------------------------------

def guard_nested(xs, h):
    for t in range(len(xs)):
        for k in range(3):
            if (xs[t].array > 0).all():
                h = F.tanh(h + xs[t])
            else:
                h = F.sigmoid(h - xs[t])
    return h


def _make_signs(rng, n):
    xs, h = cases.seq(rng, n)
    xs = numpy.abs(xs)
    if n % 3 == 0:
        xs[n // 2] *= -1
    return xs, h


def test_guard_in_nested_loops():
    lengths = (4, 6, 5, 6, 4)
    cases.fwd(guard_nested, cases.variables(_make_signs), lengths)
    cases.grads(guard_nested, _make_signs, lengths)


def guard_in_loop(xs, h):
    for t in range(len(xs)):
        if (xs[t].array > -2).all():
            h = F.tanh(xs[t] + h)
        else:
            h = F.sigmoid(xs[t] - h)
    return h


def test_guard_going_the_other_way_in_a_later_iteration():
    def make(rng, n):
        xs, h = cases.seq(rng, n)
        xs = numpy.clip(xs, -1.5, None)
        if n in (7, 8):
            xs[n - 3, 0, 0] = -5
        return xs, h
    lengths = (5, 9, 7, 3, 8, 12, 7, 7, 7, 5)
    cases.fwd(guard_in_loop, cases.variables(make), lengths)
    cases.grads(guard_in_loop, make, lengths)


def continue_on_array(xs, h):
    for t in range(len(xs)):
        if (xs[t].array < -1).any():
            continue
        h = F.tanh(xs[t] + h)
    return h


def test_continue_on_an_array_test():
    lengths = (5, 9, 7, 3, 8, 12, 7, 7, 7, 5)
    cases.fwd(continue_on_array, cases.variables(cases.seq), lengths)
    cases.grads(continue_on_array, cases.seq, lengths)


def guard_and_dropout(xs, h):
    for t in range(len(xs)):
        h = F.dropout(F.tanh(xs[t] + h), 0.3)
    if (h.array > 0).any():
        h = h * 2
    return h


def test_guard_with_dropout_runs_eagerly_with_a_warning():
    jf = chainerjit.jit(guard_and_dropout)
    calls = cases.calls(cases.seq, (5, 9, 5))
    with pytest.warns(errors.FallbackWarning,
                      match=r'random or stateful.*\n.*test_loop_exits.py'):
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
        cases.fwd(guard_and_dropout_eval, cases.seq, (5, 9, 5, 9))


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
    model, twin = cases.twins(BNExit)
    jf = chainerjit.jit(model.forward)
    with pytest.warns(errors.FallbackWarning, match='random or stateful'):
        for args in cases.calls(cases.seq, (5, 9, 3, 9)):
            testing.assert_results_equal(jf(*args), twin(*args))
            numpy.testing.assert_allclose(model.bn.avg_mean,
                                          twin.bn.avg_mean, rtol=cases.RTOL)
            numpy.testing.assert_allclose(model.bn.avg_var,
                                          twin.bn.avg_var, rtol=cases.RTOL)


class BNLoop(BNExit):
    def forward(self, xs, h):
        for t in range(len(xs)):
            h = F.tanh(self.bn(xs[t]) + h)
        return h


def test_batchnorm_statistics_in_a_symbolic_loop():
    model, twin = cases.twins(BNLoop)
    jf = chainerjit.jit(model.forward)
    for args in cases.calls(cases.seq, (5, 9, 3, 9, 5)):
        testing.assert_results_equal(jf(*args), twin(*args), cases.RTOL, 1e-5)
        numpy.testing.assert_allclose(model.bn.avg_mean, twin.bn.avg_mean,
                                      rtol=cases.RTOL, atol=cases.ATOL)
        numpy.testing.assert_allclose(model.bn.avg_var, twin.bn.avg_var,
                                      rtol=cases.RTOL, atol=cases.ATOL)
    assert jf.cache_info().hits > 0
    assert all(e.fallback is None for e in jf.cache_entries())


def listcomp_array_condition(xs, h):
    ys = [F.tanh(x + h) for x in xs if (x.array > -3).all()]
    return F.stack(ys)


def test_array_condition_in_a_comprehension_runs_eagerly_with_a_warning():
    jf = chainerjit.jit(listcomp_array_condition)
    with pytest.warns(errors.FallbackWarning, match='gives a Python value'):
        with chainer.no_backprop_mode():
            for args in cases.calls(cases.variables(cases.seq), (5, 9, 3)):
                testing.assert_results_equal(
                    jf(*args), listcomp_array_condition(*args))


# --- Python statements after the exit ---------------------------------------

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
    cases.fwd(fn, cases.variables(_make_jump), (9, 2, 9))


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
    cases.fwd(for_else, cases.variables(_make_jump), (first, 1, 9, 1, 9))


# --- an exit before the rest of the body -------------------------------------

def appended_after_break(xs, h):
    ys = []
    for t in range(len(xs)):
        h = h * 0.5 + xs[t]
        if (h.array > 100).all():
            break
        ys.append(h)
    return F.stack(ys + [h])


def summed_after_break(xs, h):
    total = 0
    for t in range(len(xs)):
        x = xs[t] * 1
        if (x.array > 100).all():
            break
        h = F.tanh(h + x)
        total += h
    return total * h


@pytest.mark.parametrize('fn', [appended_after_break, summed_after_break])
def test_an_exit_before_the_rest_of_the_body(fn):
    # A value made before the exit and kept after it (appended) is the
    # previous pass's where the loop leaves: such a loop is unrolled.
    lengths = (9, 2, 9, 1, 3, 0, 9)
    cases.fwd(fn, cases.variables(_make_jump), lengths)
    cases.grads(fn, _make_jump, lengths)


class CaptionDecoder(chainer.Chain):
    """Chainer's image captioning example's decoder: each step reads the
    words of all captions, padded with -1, and leaves the loop where every
    caption ended, before the step; the loss and the number of words are
    added up after the exit."""

    def __init__(self):
        super(CaptionDecoder, self).__init__()
        with self.init_scope():
            self.embed_img = L.Linear(3, 4)
            self.embed = L.EmbedID(9, 4, ignore_label=-1)
            self.lstm = L.LSTM(4, 4)
            self.out = L.Linear(4, 9)

    def forward(self, feats, captions):
        self.lstm.reset_state()
        self.lstm(self.embed_img(feats))
        loss, size = 0, 0
        for i in range(captions.shape[1] - 1):
            x = Variable(self.xp.asarray(captions[:, i]))
            t = Variable(self.xp.asarray(captions[:, i + 1]))
            if (t.array == -1).all():
                break
            h = self.lstm(self.embed(x))
            loss += F.sum(F.softmax_cross_entropy(
                self.out(h), t, ignore_label=-1, reduce='no'))
            size += self.xp.sum(t.array != -1)
        return loss / max(size, 1)


def _captions(rng, batch):
    """Image features and captions of 2 to 10 words padded to 12."""
    captions = numpy.full((batch, 12), -1, numpy.int32)
    for row in captions:
        n = rng.randint(2, 11)
        row[:n] = rng.randint(0, 9, n)
    return cases.a(rng, batch, 3), captions


@pytest.mark.parametrize('train', [True, False])
def test_a_decoder_left_where_every_caption_ended_runs_compiled(train):
    model, twin = cases.twins(CaptionDecoder)
    jitted = chainerjit.jit(twin.forward)
    rng = numpy.random.RandomState(4)
    with chainer.using_config('train', train):
        for k in range(16):
            args = _captions(rng, k % 5 + 1)
            model.cleargrads()
            twin.cleargrads()
            expected, actual = model.forward(*args), jitted(*args)
            testing.assert_results_equal(actual, expected, rtol=cases.RTOL,
                                         atol=cases.ATOL)
            if train:
                expected.backward()
                actual.backward()
                for (name, p), (_, q) in zip(sorted(model.namedparams()),
                                             sorted(twin.namedparams())):
                    numpy.testing.assert_allclose(
                        q.grad, p.grad, rtol=1e-4, atol=1e-6, err_msg=name)
    info = jitted.cache_info()
    assert info.compiles <= 3 and info.compiled >= 8, jitted.cache_report()
