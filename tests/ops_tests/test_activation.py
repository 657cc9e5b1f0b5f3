import chainer.functions as F
import pytest

from chainerjit import testing
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import calls_of
from tests.ops_tests.common import make_calls


SHAPES = [(3, 4), (2, 3, 5), ()]


@pytest.mark.parametrize('shape', SHAPES)
@pytest.mark.parametrize('dtype', DTYPES)
def test_relu(rng, shape, dtype):
    testing.assert_jit_matches_eager(
        lambda x: F.relu(x), make_calls(rng, [shape], dtype),
        expect_entries=1, lowered=['ReLU'])


ELEMENTWISE_SHAPES = [[(3, 4)], [(0, 4)], [(2, 3, 5)], [()]]
AXIS_SHAPES = [[(3, 4)], [(0, 4)], [(2, 3, 5)]]

CASES = [
    # lowered op, function, argument shape sets[, make_calls options]
    ('LeakyReLU', lambda x: F.leaky_relu(x), ELEMENTWISE_SHAPES),
    ('LeakyReLU', lambda x: F.leaky_relu(x, slope=-0.5), ELEMENTWISE_SHAPES),
    ('Sigmoid', lambda x: F.sigmoid(x), ELEMENTWISE_SHAPES),
    ('Tanh', lambda x: F.tanh(x), ELEMENTWISE_SHAPES),
    ('Softmax', lambda x: F.softmax(x), AXIS_SHAPES),
    ('Softmax', lambda x: F.softmax(x, axis=-1), AXIS_SHAPES),
    ('Softmax', lambda x: F.softmax(x, axis=0), [[(3, 4)], [(2, 3, 5)]]),
    ('LogSoftmax', lambda x: F.log_softmax(x), AXIS_SHAPES),
    ('LogSoftmax', lambda x: F.log_softmax(x, axis=-1), AXIS_SHAPES),
    ('ELU', lambda x: F.elu(x), ELEMENTWISE_SHAPES),
    ('ELU', lambda x: F.elu(x, alpha=0.3), ELEMENTWISE_SHAPES),
    ('ELU', lambda x: F.selu(x), ELEMENTWISE_SHAPES),
    ('Softplus', lambda x: F.softplus(x), ELEMENTWISE_SHAPES),
    ('Softplus', lambda x: F.softplus(x, beta=2.5), ELEMENTWISE_SHAPES),
    ('HardSigmoid', lambda x: F.hard_sigmoid(x), ELEMENTWISE_SHAPES,
     {'low': -4, 'high': 4}),
    ('ClippedReLU', lambda x: F.clipped_relu(x, 0.5), ELEMENTWISE_SHAPES),
    ('ClippedReLU', lambda x: F.relu6(x), ELEMENTWISE_SHAPES,
     {'low': -3, 'high': 9}),
    ('Swish', lambda x, beta: F.swish(x, beta),
     [[(3, 4), (4,)], [(0, 4), (4,)], [(2, 3, 5), (3,)],
      [(2, 3, 5), (3, 5)]]),
    ('CReLU', lambda x: F.crelu(x), [[(3, 4)], [(0, 4)], [(2, 3, 5)]]),
    ('CReLU', lambda x: F.crelu(x, axis=2), [[(2, 3, 5)]]),
    ('PReLUFunction', lambda x, W: F.prelu(x, W),
     [[(3, 4), (4,)], [(0, 4), (4,)], [(2, 3, 5), (3,)],
      [(2, 3, 5), (3, 5)]]),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', CASES, ids=lambda case: case[0])
def test_activation(rng, case, dtype):
    op, fn, shape_sets = case[:3]
    options = case[3] if len(case) > 3 else {}
    testing.assert_jit_matches_eager(
        fn, calls_of(rng, shape_sets, dtype, **options),
        expect_entries=len(shape_sets), lowered=[op])
