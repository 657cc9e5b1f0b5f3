"""Adversarial differential tests of list packing
(``chainerjit.frontend.packing``): branches and breaks on item values, and
the mismatches found in which items get gradients (items a loop reads
only as arrays or never reads, items after a break) and in loops over one
length.

Values and item gradients must equal eager Chainer's. Tests marked
``xfail(strict=True)`` pin down mismatches found here (see their
reasons); they start passing when the bug is fixed.
"""

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.frontend_tests.packing_checks import _assert_grads_equal
from tests.frontend_tests.packing_checks import _check_grads
from tests.frontend_tests.packing_checks import _copies
from tests.frontend_tests.packing_checks import _rand
from tests.frontend_tests.packing_checks import _steps
from tests.frontend_tests.packing_checks import _zip_two
from tests.frontend_tests.packing_checks import LENGTHS


pytestmark = [
    pytest.mark.adversarial,
    pytest.mark.filterwarnings('ignore::UserWarning'),
]


# --- branches on values ------------------------------------------------------

def _signed_steps(rng, n, positive):
    xs = _steps(rng, n, shape=(1, 2))
    for k, x in enumerate(xs):
        x.array[...] = numpy.abs(x.array) * (1 if k in positive else -1)
    return xs


def _filtered_by_value(xs):
    ys = [F.tanh(x) for x in xs if (x.array > 0).all()]
    h = xs[0] * 0
    for y in ys:
        h = h + y
    return h


def _branch_in_the_loop(xs):
    h = xs[0] * 0
    for x in xs:
        if (x.array > 0).all():
            h = F.tanh(h + x)
    return h


@pytest.mark.parametrize('fn', [_filtered_by_value, _branch_in_the_loop])
def test_branches_on_item_values(fn):
    rng = numpy.random.RandomState(33)
    jf = chainerjit.jit(fn)
    for n, positive in ((3, {0, 1, 2}), (3, {0, 1, 2}), (3, {0, 2}),
                        (3, {0, 2}), (4, {1}), (4, {1}), (4, {0, 1, 2, 3}),
                        (4, {0, 1, 2, 3})):
        xs = _signed_steps(rng, n, positive)
        theirs = _copies(xs)
        actual, expected = jf(xs), fn(theirs)
        testing.assert_results_equal(actual, expected)
        F.sum(actual).backward()
        F.sum(expected).backward()
        _assert_grads_equal(xs, theirs)


def _breaks_on_a_value(xs):
    h = 0
    for x in xs:
        h = F.tanh(h + x)
        if (h.array > 0.5).all():
            break
    return h


def _steps_stopping_at(rng, n, stop):
    xs = _steps(rng, n, shape=(1, 2))
    for k, x in enumerate(xs):
        x.array[...] = 3.0 if k == stop else -0.3
        x.array += rng.uniform(0, 0.1, size=x.shape).astype(numpy.float32)
    return xs


def test_break_on_a_value_forward():
    rng = numpy.random.RandomState(34)
    calls = [([x.array for x in _steps_stopping_at(rng, n, stop)],)
             for n, stop in ((4, None), (4, None), (4, 1), (4, 1), (5, 2),
                             (5, 2), (5, None), (3, 0), (3, 0))]
    testing.assert_jit_matches_eager(_breaks_on_a_value, calls)


# --- found mismatches (xfail) ------------------------------------------------

def _first_row_and_an_array_read(xs):
    return xs[0] * 2 + F.tanh(xs[1].array)


def test_a_row_read_only_as_an_array_gets_no_gradient():
    rng = numpy.random.RandomState(40)
    jf = chainerjit.jit(_first_row_and_an_array_read)
    xs = _steps(rng, 2)
    theirs = _copies(xs)
    F.sum(jf(xs)).backward()
    F.sum(_first_row_and_an_array_read(theirs)).backward()
    assert theirs[1].grad is None
    _assert_grads_equal(xs, theirs)


def _argmax_in_the_loop(xs):
    h = xs[0] * 1
    for x in xs:
        h = h + F.argmax(x, axis=1).array.astype(numpy.float32)[:, None]
    return h


def test_rows_read_by_a_non_differentiable_op_get_no_gradient():
    _check_grads(_argmax_in_the_loop, LENGTHS, numpy.random.RandomState(41))


def _first_row_then_arrays_in_the_loop(xs):
    h = xs[0] * 2
    for x in xs:
        h = h + F.tanh(x.array)
    return h


def test_array_reads_in_a_packed_loop_stay_detached():
    rng = numpy.random.RandomState(42)
    jf = chainerjit.jit(_first_row_then_arrays_in_the_loop)
    for n in (3, 3, 3):  # the last two run the compiled program
        xs = _steps(rng, n)
        theirs = _copies(xs)
        F.sum(jf(xs)).backward()
        F.sum(_first_row_then_arrays_in_the_loop(theirs)).backward()
        numpy.testing.assert_allclose(xs[0].grad, theirs[0].grad, 1e-4,
                                      1e-5)


def _detached_plain(x, y):
    return x * 2 + F.tanh(y.array) * y


def test_array_reads_stay_detached_without_lists():
    jf = chainerjit.jit(_detached_plain)
    for _ in range(3):
        mine = [chainer.Variable(numpy.ones(2, numpy.float32))
                for _ in range(2)]
        theirs = _copies(mine)
        F.sum(jf(*mine)).backward()
        F.sum(_detached_plain(*theirs)).backward()
        _assert_grads_equal(mine, theirs)


def test_zip_with_a_longer_list_gives_unread_items_no_gradient():
    rng = numpy.random.RandomState(43)
    jf = chainerjit.jit(_zip_two)
    for n, m in ((3, 3), (3, 3), (3, 5), (3, 5)):
        xs, ys = _steps(rng, n), _steps(rng, m)
        xt, yt = _copies(xs), _copies(ys)
        F.sum(jf(xs, ys)).backward()
        F.sum(_zip_two(xt, yt)).backward()
        _assert_grads_equal(xs + ys, xt + yt)


def test_items_after_a_break_get_no_gradient():
    rng = numpy.random.RandomState(44)
    jf = chainerjit.jit(_breaks_on_a_value)
    for n, stop in ((4, None), (4, None), (4, 1), (4, 1)):
        xs = _steps_stopping_at(rng, n, stop)
        theirs = _copies(xs)
        F.sum(jf(xs)).backward()
        F.sum(_breaks_on_a_value(theirs)).backward()
        _assert_grads_equal(xs, theirs)


def _two_loops_over_one_length(xs, ys):
    h = 0
    for t in range(len(ys)):
        h = F.tanh(h + ys[t])
    for t in range(len(ys)):
        h = F.tanh(h + xs[t])
    return h


def _two_loops_over_one_array(xs):
    h = numpy.zeros((2, 3), numpy.float32)
    for x in xs:
        h = F.tanh(h + x)
    for x in xs:
        h = F.tanh(h * 2 + x)
    return h


@pytest.mark.parametrize('as_lists', [True, False])
def test_two_loops_over_one_length(as_lists):
    rng = numpy.random.RandomState(53)
    if as_lists:
        fn = _two_loops_over_one_length
        calls = [(_steps(rng, n, as_variables=False),
                  _steps(rng, n, as_variables=False)) for n in (3, 3, 4)]
    else:
        fn = _two_loops_over_one_array
        calls = [(_rand(rng, (n, 2, 3)),) for n in (3, 3, 4)]
    jf = chainerjit.jit(fn)
    for args in calls:
        testing.assert_results_equal(jf(*args), fn(*args))
