"""What the differential fuzzer (``test_fuzz.py``) found, each minimised
into a plain test: results that differed from eager Chainer's, and false
failures of ``chainerjit.testing``.
"""

import warnings

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.fuzz_tests import programs
from tests.fuzz_tests import runner


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


class StoresANewLeaf(chainer.Chain):
    """Keeps a new leaf (stored and returned: one object) beside the
    connected output it was made from, and an unchained output."""

    def forward(self, x):
        h = F.tanh(x)
        self.kept = chainer.Variable(h.array)
        cut = x * 2
        cut.unchain()
        return h, self.kept, cut


def test_new_leaves_stored_returned_and_unchained(rng):
    eager, model = StoresANewLeaf(), StoresANewLeaf()
    jitted = chainerjit.jit(model.forward)
    for _ in range(3):
        a, g = _a(rng, 2, 3), _a(rng, 2, 3)
        for run, owner in ((eager.forward, eager), (jitted, model)):
            x = chainer.Variable(a.copy())
            h, kept, cut = _quiet(run, x)
            assert kept is owner.kept
            assert kept.creator is None and cut.creator is None
            assert kept.requires_grad and cut.requires_grad
            kept.grad, cut.grad = g, g
            chainer.backward([kept, cut], [kept.grad_var, cut.grad_var])
            assert x.grad is None
            F.sum(h * g).backward()
            numpy.testing.assert_allclose(
                x.grad, g * (1 - numpy.tanh(a) ** 2), rtol=1e-5)
    assert jitted.cache_info().compiled > 0


# --- a list item read only by an op whose result is unused -------------------

def dead_read_of_a_list_item(xs):
    F.tanh(xs[0])  # computed, never used
    return F.tanh(xs[-1])


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


def array_read_of_a_list_item(xs, y):
    (y > xs[-1].array)  # a NumPy test, no gradient
    return F.relu(F.relu(xs[0])), y > xs[-1].array


def test_a_list_item_read_only_as_an_array_gets_no_gradient(rng):
    jitted = chainerjit.jit(array_read_of_a_list_item)
    for n in range(3):
        items, y = [_a(rng, 2) for _ in range(3)], _a(rng, 2)
        for run in (array_read_of_a_list_item, jitted):
            xs = [chainer.Variable(a.copy()) for a in items]
            out, test = _quiet(run, xs, y)
            numpy.testing.assert_array_equal(test, y > items[-1])
            F.sum(out).backward()
            assert xs[-1].grad is None, 'call %d, %s' % (
                n, 'jitted' if run is jitted else 'eager')


# --- an output that needs no gradient ----------------------------------------

def an_output_needing_no_gradient(x, y):
    return F.tanh(y), F.tanh(x)


def test_an_output_needing_no_gradient_passes_none(rng):
    """Eager mode makes F.tanh of a plain array the output of a Tanh node
    that requires no grad; a compiled call makes it a leaf (a compiled
    call is one node of Chainer's graph, and an output of that node would
    pass gradients to the node's other inputs). Either way, backprop from
    it gives the arguments nothing."""
    jitted = chainerjit.jit(an_output_needing_no_gradient)
    for _ in range(3):
        x, y = chainer.Variable(_a(rng, 2, 3)), _a(rng, 3)
        expected = an_output_needing_no_gradient(x, y)
        actual = _quiet(jitted, x, y)
        testing.assert_results_equal(actual, expected)
        assert not actual[0].requires_grad and not expected[0].requires_grad
        actual[0].grad = numpy.ones_like(actual[0].array)
        actual[0].backward()
        assert x.grad is None
        F.sum(actual[1]).backward()
        numpy.testing.assert_allclose(
            x.grad, 1 - numpy.tanh(x.array) ** 2, rtol=1e-6)
    assert jitted.cache_info().compiled > 0


CONSTANT = numpy.linspace(-1, 1, 6).astype(numpy.float32).reshape(2, 3)


def an_output_of_a_constant(x):
    return F.tanh(CONSTANT), F.tanh(x)


def test_the_gradient_check_of_an_output_needing_no_gradient(rng):
    testing.assert_jit_grads_match_eager(
        an_output_of_a_constant, [(_a(rng, 2, 3),) for _ in range(3)])


# --- a NumPy scalar in a training call --------------------------------------

class NumPyScalarOfASum(chainer.Chain):

    def forward(self, x):
        self.last = numpy.tanh(F.sum(x).array)  # a NumPy scalar
        return F.relu(x), self.last


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

def test_results_with_a_nan_scalar_compare_equal():
    testing.assert_results_equal((numpy.float32('nan'), numpy.zeros(2)),
                                 (numpy.float32('nan'), numpy.zeros(2)))


# --- a NumPy scalar computed within rounding ---------------------------------

def test_a_numpy_scalar_equal_within_rounding_is_no_mismatch():
    """The sum of a batch normalization over batch statistics without
    backprop (not bit for bit eager's), returned as a NumPy scalar: the
    self-check and chainerjit.testing compare it within rounding (they
    compared scalars in the result's structure exactly)."""
    runner.check(programs.Program(
        template='Straight', args=((('B',), 'array'), (('B',), 'alias')),
        params=(('bn0', 'bn', (1,)),),
        pre=(('expand', 1, 0), ('bn', 2, 'bn0', False)), body=(), carry=0,
        init=0, then=(), orelse=(), tested=0, probe_sum=False,
        threshold=0.0, last=3, outs=('one', ((3, 'scalar'),)),
        batches=(1,), lengths=(1, 1, 1), grad=False, train=True,
        mutate=False, dtype='float32', special=None,
        layouts=(('c', 'c'), 'odd'), seed=1), events=False)


# --- an item of F.separate of a list's item --------------------------------

def test_an_item_of_a_list_items_parts_keeps_its_row():
    """``F.separate(xs[-1], 0)[0]`` of a list argument's last item: the
    row indexing (moved before the part that reads it) was lost when the
    part itself moved before its reader, and the program read an
    undefined value."""
    runner.check(programs.Program(
        template='ListStraight',
        args=((('T', 'B'), 'list_array'), (('B',), 'array')), params=(),
        pre=(('separate', 1, 0, 0), ('unary', 3, 'relu'),
             ('unary', 4, 'relu')), body=(), carry=0, init=0, then=(),
        orelse=(), tested=0, probe_sum=False, threshold=0.0, last=5,
        outs=('one', ((5, 'same'),)), batches=(1, 2), lengths=(3, 3, 3),
        grad=False, train=True, mutate=False, dtype='float32', special=None,
        layouts=(('c', 'c'), 'odd'), seed=0), events=False)
