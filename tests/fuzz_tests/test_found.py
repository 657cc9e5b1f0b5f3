"""What the differential fuzzer (``test_fuzz.py``) found, each minimised
into a plain test.

The strict xfails are chainerjit bugs still open: each says what differs
from eager Chainer. ``runner.py`` knows them (``fresh_leaves``,
``unread_list_items``, ``backprop``, ``assert_same_results``) so that the
fuzzer keeps looking past them; when one is fixed, its xfail here fails
and the runner's allowance can go.
"""

import warnings

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing


def _a(rng, *shape):
    return rng.standard_normal(shape).astype(numpy.float32)


def _quiet(jitted, *args):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return jitted(*args)


# --- a new Variable around an array, returned as it is ----------------------

def new_variable_around_an_argument(x):
    return chainer.Variable(x.array)


class NewVariableAroundAnOutput(chainer.Chain):

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.W = chainer.Parameter(
                numpy.array([[0.5, -1.0, 2.0]], numpy.float32))

    def forward(self, x):
        return chainer.Variable(F.linear(x, self.W).array)


def _grads_of_new_variable(fn, params, calls):
    """Backprops ones from ``fn``'s output, eagerly and jitted; returns
    the gradients of the argument and of ``params``, per call."""
    jitted = chainerjit.jit(fn)
    found = []
    for x in calls:
        for run in (fn, jitted):
            for p in params:
                p.cleargrad()
            v = chainer.Variable(x.copy())
            y = _quiet(run, v)
            y.grad = numpy.ones_like(y.array)
            y.backward()
            found.append((run is jitted, v.grad, [p.grad for p in params]))
    assert jitted.cache_info().compiled > 0
    return found


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    'wrong value vs eager: chainer.Variable(v.array) returned as it is is '
    'a new leaf in eager mode, so backprop from it gives v (and what v '
    'was computed from) no gradient; a compiled call passes the output\'s '
    'gradient on to v as if the output were v itself'))
@pytest.mark.parametrize('case', ['argument', 'parameter'])
def test_a_new_variable_around_an_array_passes_no_gradient(rng, case):
    calls = [_a(rng, 2, 3) for _ in range(3)]
    if case == 'argument':
        found = _grads_of_new_variable(
            new_variable_around_an_argument, [], calls)
    else:
        model = NewVariableAroundAnOutput()
        found = _grads_of_new_variable(model.forward, [model.W], calls)
    for compiled, x_grad, p_grads in found:
        assert x_grad is None, 'jitted' if compiled else 'eager'
        assert all(g is None for g in p_grads), \
            'jitted' if compiled else 'eager'


# --- a list item read only by an op whose result is unused -------------------

def dead_read_of_a_list_item(xs):
    F.tanh(xs[0])  # computed, never used
    return F.tanh(xs[-1])


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    'wrong value vs eager: on the call that records, an item of a list '
    'argument (three or more Variables, packed) read only by an op whose '
    'result is unused gets a zero gradient; eager mode gives it none '
    '(None), as the compiled calls after it do'))
def test_a_list_item_read_by_dead_code_gets_no_gradient(rng):
    jitted = chainerjit.jit(dead_read_of_a_list_item)
    for n in range(3):
        items = [_a(rng, 2, 3) for _ in range(4)]
        for run in (dead_read_of_a_list_item, jitted):
            xs = [chainer.Variable(a.copy()) for a in items]
            F.sum(_quiet(run, xs)).backward()
            assert xs[0].grad is None, 'call %d, %s' % (
                n, 'jitted' if run is jitted else 'eager')
            assert xs[-1].grad is not None


# --- an output that needs no gradient ----------------------------------------

def an_output_needing_no_gradient(x, y):
    return F.tanh(y), F.tanh(x)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    'difference vs eager: F.tanh of a plain array is an output of a '
    'graph node in eager mode (its creator is the Tanh node); from a '
    'compiled call, where it needs no gradient, it is a leaf (creator '
    'None). Values and gradients are right'))
def test_an_output_needing_no_gradient_has_a_creator(rng):
    jitted = chainerjit.jit(an_output_needing_no_gradient)
    for _ in range(3):
        x, y = chainer.Variable(_a(rng, 2, 3)), _a(rng, 3)
        expected = an_output_needing_no_gradient(x, y)
        actual = _quiet(jitted, x, y)
        assert expected[0].creator is not None
        assert not actual[0].requires_grad and not expected[0].requires_grad
        assert actual[0].creator is not None
    assert jitted.cache_info().compiled > 0


CONSTANT = numpy.linspace(-1, 1, 6).astype(numpy.float32).reshape(2, 3)


def an_output_of_a_constant(x):
    return F.tanh(CONSTANT), F.tanh(x)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    'false failure of chainerjit.testing: assert_jit_grads_match_eager '
    'draws a gradient only for the outputs that have a creator, so where '
    'the compiled output that needs no gradient has none (see the test '
    'above) the two runs pair different gradients with x\'s output, and '
    'a right function fails the check'))
def test_the_gradient_check_of_an_output_needing_no_gradient(rng):
    testing.assert_jit_grads_match_eager(
        an_output_of_a_constant, [(_a(rng, 2, 3),) for _ in range(3)])


# --- a NumPy scalar in a training call --------------------------------------

class NumPyScalarOfASum(chainer.Chain):

    def forward(self, x):
        self.last = numpy.tanh(F.sum(x).array)  # a NumPy scalar
        return F.relu(x), self.last


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    'wrong kind vs eager: where a gradient may be needed, a NumPy scalar '
    'that NumPy computed from a 0-d array (numpy.tanh(F.sum(x).array)) '
    'comes back from a compiled call as a Variable, both in the result '
    'and in the attribute the forward assigns; eager gives numpy.float32 '
    '(the values are right, and calls without backprop are right)'))
@pytest.mark.parametrize('where', ['result', 'attribute'])
def test_a_numpy_scalar_stays_one_in_training(rng, where):
    eager, model = NumPyScalarOfASum(), NumPyScalarOfASum()
    jitted = chainerjit.jit(model.forward)
    for _ in range(3):
        a = _a(rng, 2, 3)
        expected = eager.forward(chainer.Variable(a.copy()))
        actual = _quiet(jitted, chainer.Variable(a.copy()))
        assert type(expected[1]) is numpy.float32
        assert type(eager.last) is numpy.float32
        if where == 'result':
            testing.assert_results_equal(actual, expected)
        else:
            assert type(model.last) is numpy.float32
    assert jitted.cache_info().compiled > 0


# --- NaN scalars in results ------------------------------------------------

@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    'false failure of chainerjit.testing: assert_results_equal compares '
    'NumPy scalars as part of the structure, with ==, and a NaN is not '
    'equal to itself, so equal results holding a NaN scalar fail'))
def test_results_with_a_nan_scalar_compare_equal():
    testing.assert_results_equal((numpy.float32('nan'), numpy.zeros(2)),
                                 (numpy.float32('nan'), numpy.zeros(2)))
