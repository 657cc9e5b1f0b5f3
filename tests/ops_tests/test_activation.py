import chainer.functions as F
import pytest

from chainerjit import testing
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import make_calls


SHAPES = [(3, 4), (2, 3, 5), ()]


@pytest.mark.parametrize('shape', SHAPES)
@pytest.mark.parametrize('dtype', DTYPES)
def test_relu(rng, shape, dtype):
    testing.assert_jit_matches_eager(
        lambda x: F.relu(x), make_calls(rng, [shape], dtype),
        expect_entries=1, lowered=['ReLU'])
