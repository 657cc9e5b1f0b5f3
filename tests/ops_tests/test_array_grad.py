"""Gradients of the lowered array ops against eager Chainer's, over the
cases of the forward tests in test_array.py."""

import warnings

import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.ops_tests import test_array as forward
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import calls_of
from tests.ops_tests.common import make_calls
from tests.ops_tests.test_math_grad import assert_grad_fails_as_eager
from tests.ops_tests.test_math_grad import assert_partial_grads_match_eager
from tests.ops_tests.common import cases_of
from tests.ops_tests.test_math_grad import several_inputs


def overlapping_split(case):
    """``split_axis`` at decreasing indices (``[2, 2, 1]``): NumPy returns
    overlapping pieces and eager backprop fails."""
    op, fn, shape_sets = case
    if op != 'SplitAxis':
        return False
    x = numpy.zeros(shape_sets[0][0])
    return sum(y.size for y in fn(x)) != x.size


def integer_output(case):
    """An op whose outputs are integers: no gradient flows through it."""
    op, fn, shape_sets = case
    ys = fn(*(numpy.zeros(s, numpy.float32) for s in shape_sets[0]))
    ys = ys if isinstance(ys, (tuple, list)) else (ys,)
    return all(y.dtype.kind != 'f' for y in ys)


GRAD_CASES = [case for case in forward.CASES
              if not overlapping_split(case) and not integer_output(case)]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', GRAD_CASES, ids=lambda case: case[0])
def test_array_grad(rng, case, dtype):
    op, fn, shape_sets = case
    testing.assert_jit_grads_match_eager(
        fn, calls_of(rng, shape_sets, dtype), lowered=[op])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', several_inputs(GRAD_CASES),
                         ids=lambda case: case[0])
def test_partial_grad(rng, case, dtype):
    assert_partial_grads_match_eager(rng, case, dtype)


@pytest.mark.parametrize('case', [
    case for case in forward.CASES if overlapping_split(case)])
def test_overlapping_split_grad_fails_as_eager(case):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        assert_grad_fails_as_eager(case[1], case[2][0])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('slices', forward.SLICES)
def test_get_item_grad(rng, slices, dtype):
    testing.assert_jit_grads_match_eager(
        lambda x: F.get_item(x, slices),
        make_calls(rng, [(4, 5, 6)], dtype), lowered=['GetItem'])


@pytest.mark.parametrize('slices', cases_of(forward.test_get_item_empty,
                                            'slices'))
def test_get_item_empty_grad(rng, slices):
    testing.assert_jit_grads_match_eager(
        lambda x: F.get_item(x, slices),
        make_calls(rng, [(0, 5, 6)], numpy.float32), lowered=['GetItem'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('n', [3, 0])
def test_select_item_grad(rng, n, dtype):
    calls = [(x, rng.randint(0, 4, size=n).astype(numpy.int32))
             for x, in make_calls(rng, [(n, 4)], dtype)]
    testing.assert_jit_grads_match_eager(
        lambda x, t: F.select_item(x, t), calls,
        lowered=['SelectItem'])


@pytest.mark.parametrize('op,fn,shapes', [
    # outputs without a gradient: zeros in their place
    ('SplitAxis', lambda x: F.split_axis(x, 2, 1)[0], [(3, 4)]),
    ('Separate', lambda x: F.separate(F.tile(F.flip(x, 0), 1))[1], [(3, 4)]),
    ('GetItem', lambda x: F.separate(x)[1], [(3, 4)]),
    ('Broadcast', lambda x, y: F.broadcast(x, y)[0] + y, [(3, 1), (3, 4)]),
])
def test_unused_output_grad(rng, op, fn, shapes):
    testing.assert_jit_grads_match_eager(
        fn, calls_of(rng, [shapes], numpy.float64), lowered=[op])


def test_unused_broadcast_output_grad(rng):
    testing.assert_jit_grads_match_eager(
        lambda x, y: F.broadcast(x, y)[0], calls_of(
            rng, [[(3, 1), (3, 4)]], numpy.float64), lowered=['Broadcast'])
