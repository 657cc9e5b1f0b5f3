"""Gradients of the lowered activations against eager Chainer's, over the
cases of the forward tests in test_activation.py."""

import chainer.functions as F
import pytest

from chainerjit import testing
from tests.ops_tests import test_activation as forward
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import calls_of
from tests.ops_tests.common import make_calls
from tests.ops_tests.test_math_grad import assert_partial_grads_match_eager
from tests.ops_tests.test_math_grad import several_inputs


@pytest.mark.parametrize('shape', forward.SHAPES)
@pytest.mark.parametrize('dtype', DTYPES)
def test_relu_grad(rng, shape, dtype):
    testing.assert_jit_grads_match_eager(
        F.relu, make_calls(rng, [shape], dtype), lowered=['ReLU'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', forward.CASES, ids=lambda case: case[0])
def test_activation_grad(rng, case, dtype):
    op, fn, shape_sets = case[:3]
    options = case[3] if len(case) > 3 else {}
    testing.assert_jit_grads_match_eager(
        fn, calls_of(rng, shape_sets, dtype, **options), lowered=[op])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', several_inputs(forward.CASES),
                         ids=lambda case: case[0])
def test_partial_grad(rng, case, dtype):
    assert_partial_grads_match_eager(rng, case, dtype)


@pytest.mark.parametrize('dtype', DTYPES)
def test_elu_negative_alpha_grad(rng, dtype):
    # A negative alpha makes ELU's backward read its input.
    testing.assert_jit_grads_match_eager(
        lambda x: F.elu(x, alpha=-0.5),
        calls_of(rng, forward.ELEMENTWISE_SHAPES, dtype), lowered=['ELU'])
