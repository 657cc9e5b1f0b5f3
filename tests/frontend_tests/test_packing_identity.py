"""Adversarial differential tests of list packing
(``chainerjit.frontend.packing``): identity and changes the caller can
see.

A jitted function called with a list of alike arrays or Variables must
keep what eager Chainer keeps: returned items are the caller's own
objects, an item twice in the list is one object, an item also passed as
another argument is that argument, changes to the caller's list and items
(in place too) reach the caller, rows look like the caller's items, and
side effects on globals happen once per call.

Tests marked ``xfail(strict=True)`` pin down mismatches found here (see
their reasons); they start passing when the bug is fixed.
"""

import copy

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.frontend_tests.packing_checks import _Linked
from tests.frontend_tests.packing_checks import _steps
from tests.frontend_tests.packing_checks import LENGTHS


pytestmark = [
    pytest.mark.adversarial,
    pytest.mark.filterwarnings('ignore::UserWarning'),
]


# --- identity and changes the caller can see ---------------------------------

def _returns_the_first(xs):
    h = 0
    for x in xs:
        h = F.tanh(h + x)
    return h, xs[0]


def _returns_rows_in_containers(xs):
    h = 0
    for x in xs:
        h = F.tanh(h + x)
    return {'h': h, 'last': xs[-1], 'all': list(xs), 'tuple': tuple(xs)}


def _items_in_a_new_list(xs):
    return [x for x in xs]


@pytest.mark.parametrize('as_variables', [False, True])
def test_returned_items_are_the_callers_own(as_variables):
    rng = numpy.random.RandomState(26)
    first = chainerjit.jit(_returns_the_first)
    rows = chainerjit.jit(_returns_rows_in_containers)
    ident = chainerjit.jit(_items_in_a_new_list)
    for n in LENGTHS:
        xs = _steps(rng, n, as_variables=as_variables)
        assert first(xs)[1] is xs[0]
        result = rows(xs)
        assert result['last'] is xs[-1]
        assert len(result['all']) == n
        assert all(a is b for a, b in zip(result['all'], xs))
        assert all(a is b for a, b in zip(result['tuple'], xs))
        copied = ident(xs)
        assert len(copied) == n and all(a is b for a, b in zip(copied, xs))


def _then(change):
    """A forward that runs an RNN over ``xs``, then ``change(xs, h)``."""
    def forward(xs):
        h = 0
        for x in xs:
            h = F.tanh(h + x)
        change(xs, h)
        return h
    forward.__name__ = change.__name__
    return forward


def _append(xs, h):
    xs.append(h)


def _pop(xs, h):
    xs.pop()


def _set_item(xs, h):
    xs[0] = h


def _clear(xs, h):
    xs.clear()


def _reverse(xs, h):
    xs.reverse()


def _sort(xs, h):
    xs.sort(key=lambda v: float(v.array.sum()))


def _sets_items_in_the_loop(xs):
    h = 0
    for t in range(len(xs)):
        h = F.tanh(h + xs[t])
        xs[t] = h
    return h


def _same_contents(mine, theirs, originals):
    """The lists hold the same items: the caller's own at the same places,
    and new Variables of the same values."""
    if len(mine) != len(theirs):
        return False
    for a, e in zip(mine, theirs):
        a_given = any(a is o for o in originals)
        e_given = any(e is o for o in originals)
        if a_given != e_given or (a_given and a is not e):
            return False
        if not numpy.allclose(a.array, e.array, rtol=1e-5, atol=1e-6):
            return False
    return True


@pytest.mark.parametrize('fn', [
    _then(_append), _then(_pop), _then(_set_item), _then(_clear),
    _then(_reverse), _sets_items_in_the_loop, _then(_sort)])
def test_changes_to_the_callers_list(fn):
    rng = numpy.random.RandomState(27)
    jf = chainerjit.jit(fn)
    for n in LENGTHS:
        given = _steps(rng, n)
        mine, theirs = list(given), list(given)
        actual, expected = jf(mine), fn(theirs)
        testing.assert_results_equal(actual, expected)
        assert _same_contents(mine, theirs, given), n


_LOG = []


def _logs_each_step(xs):
    h = 0
    for x in xs:
        h = F.tanh(h + x)
        _LOG.append(1)
    return h


def test_side_effects_on_a_global_list():
    rng = numpy.random.RandomState(28)
    jf = chainerjit.jit(_logs_each_step)
    for n in LENGTHS:
        xs = _steps(rng, n, as_variables=False)
        del _LOG[:]
        jf(xs)
        assert len(_LOG) == n
    del _LOG[:]


# --- identity: found mismatches ----------------------------------------------

def _first_is_last(xs):
    h = 0
    for x in xs:
        h = F.tanh(h * 0.5 + x)
    if xs[0] is xs[-1]:
        h = h * 2
    return h


def test_an_item_twice_in_the_list_is_one_object():
    rng = numpy.random.RandomState(45)
    jf = chainerjit.jit(_first_is_last)
    for n in (3, 3):
        xs = _steps(rng, n, as_variables=False)
        xs.append(xs[0])
        testing.assert_results_equal(jf(xs), _first_is_last(xs))


def _first_is_the_other(xs, x0):
    h = x0 * 1
    for x in xs:
        h = F.tanh(h + x)
    if xs[0] is x0:
        h = h * 2
    return h


def test_an_item_passed_as_another_argument_is_that_argument():
    rng = numpy.random.RandomState(46)
    jf = chainerjit.jit(_first_is_the_other)
    for n in (3, 3):
        xs = _steps(rng, n)
        testing.assert_results_equal(jf(xs, xs[0]),
                                     _first_is_the_other(xs, xs[0]))


def _doubles_arrays_in_place(xs):
    h = 0
    for x in xs:
        x *= 2
        h = h + x
    return h


def _doubles_variables_in_place(xs):
    h = 0
    for x in xs:
        h = F.tanh(h + x)
        x.array *= 2
    return h


@pytest.mark.parametrize('fn, as_variables', [
    (_doubles_arrays_in_place, False), (_doubles_variables_in_place, True)])
def test_in_place_changes_reach_the_callers_items(fn, as_variables):
    rng = numpy.random.RandomState(47)
    jf = chainerjit.jit(fn)
    given = _steps(rng, 3, as_variables=as_variables)
    mine, theirs = copy.deepcopy(given), copy.deepcopy(given)
    testing.assert_results_equal(jf(mine), fn(theirs))
    for a, e in zip(mine, theirs):
        numpy.testing.assert_allclose(chainer.as_array(a),
                                      chainer.as_array(e))


def _scaled_by_name(xs):
    h = 0
    for x in xs:
        h = F.tanh(h + x * (2.0 if x.name == 'a' else 1.0))
    return h


def _scaled_by_creator(xs):
    h = 0
    for x in xs:
        h = F.tanh(h + x * (2.0 if x.creator is None else 1.0))
    return h


def _scaled_by_requires_grad(xs):
    h = 0
    for x in xs:
        h = F.tanh(h + x * (2.0 if x.requires_grad else 1.0))
    return h


@pytest.mark.parametrize('fn, backprop', [
    (_scaled_by_name, True),
    (_scaled_by_requires_grad, False)])
def test_rows_look_like_the_callers_items(fn, backprop):
    rng = numpy.random.RandomState(48)
    jf = chainerjit.jit(fn)
    with chainer.using_config('enable_backprop', backprop):
        for n in (3, 3):
            xs = _steps(rng, n)
            for x in xs:
                x.name = 'a'
            testing.assert_results_equal(jf(xs), fn(xs))


@pytest.mark.xfail(strict=True, reason=(
    'packed calls: rows are made by F.get_item, so x.creator is not None '
    'where the caller\'s items have no creator'))
def test_rows_have_no_creator_like_the_callers_items():
    rng = numpy.random.RandomState(48)
    jf = chainerjit.jit(_scaled_by_creator)
    for n in (3, 3):
        xs = _steps(rng, n)
        testing.assert_results_equal(jf(xs), _scaled_by_creator(xs))


def _is_the_other(xs, ys):
    h = 0
    for x in xs:
        h = F.tanh(h + x)
    if xs is ys:
        return h * 2
    return h * 3


@pytest.mark.xfail(strict=True, reason=(
    'not packing-specific: one list passed for two parameters arrives as '
    'two lists (xs is ys is False), packed or not'))
def test_the_same_list_for_two_parameters_is_one_list():
    rng = numpy.random.RandomState(49)
    jf = chainerjit.jit(_is_the_other)
    for n in (3, 3, 5):
        xs = _steps(rng, n, as_variables=False)
        testing.assert_results_equal(jf(xs, xs), _is_the_other(xs, xs))


def _returns_the_list(xs):
    h = 0
    for x in xs:
        h = F.tanh(h + x)
    return h, xs


@pytest.mark.xfail(strict=True, reason=(
    'not packing-specific: a returned list argument is a new list, not '
    'the caller\'s'))
def test_a_returned_list_is_the_callers_list():
    rng = numpy.random.RandomState(50)
    jf = chainerjit.jit(_returns_the_list)
    for n in (3, 3):
        xs = _steps(rng, n)
        assert jf(xs)[1] is xs


class _StoresTheList(_Linked):
    def forward(self, xs):
        self.seen = xs
        h = 0
        for x in xs:
            h = F.tanh(self.linear(x) + h)
        return h


@pytest.mark.xfail(strict=True, reason=(
    'not packing-specific: a list argument stored on a link '
    '(self.seen = xs) is a copy, not the caller\'s list'))
def test_a_list_stored_on_a_link_is_the_callers_list():
    rng = numpy.random.RandomState(51)
    model = _StoresTheList()
    model.forward = chainerjit.jit(model.forward)
    for n in (3, 3):
        xs = _steps(rng, n)
        model(xs)
        assert model.seen is xs


def _returns_an_items_array(xs):
    h = 0
    for x in xs:
        h = F.tanh(h + x)
    return h, xs[0].array


@pytest.mark.xfail(strict=True, reason=(
    'recording calls (packed, or not: also for a plain Variable argument) '
    'return another array than the caller\'s for x.array'))
def test_a_returned_items_array_is_the_callers_array():
    rng = numpy.random.RandomState(52)
    jf = chainerjit.jit(_returns_an_items_array)
    xs = _steps(rng, 3)
    assert jf(xs)[1] is xs[0].array
