"""Bad input raises what eager Chainer raises; NaN, inf and empty batches
behave as in eager mode."""

import chainer
import chainer.functions as F
import chainer.links as L
from chainer.utils import type_check
import numpy
import pytest

import chainerjit
from chainerjit import testing


class MLP(chainer.Chain):

    def __init__(self):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 5)
            self.l2 = L.Linear(5, 3)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


def _eager_error(fn, x):
    with pytest.raises(Exception) as info:
        fn(x)
    return info.value


@pytest.mark.parametrize('bad', [
    numpy.zeros((2, 7), numpy.float32),   # wrong shape
    numpy.zeros((2, 4), numpy.float64),   # wrong dtype
    numpy.zeros((4,), numpy.float32),     # wrong number of dimensions
    numpy.zeros((2, 4), numpy.int32),     # integer input
])
def test_bad_input_raises_the_eager_error(bad):
    model = MLP()
    eager_error = _eager_error(model.forward, bad)
    jf = chainerjit.jit(model.forward)
    with chainer.no_backprop_mode():
        jf(numpy.ones((2, 4), numpy.float32))  # compiled before
        with pytest.raises(type(eager_error)) as info:
            jf(bad)
        assert str(info.value) == str(eager_error)
        if isinstance(eager_error, type_check.InvalidType):
            assert 'LinearFunction' in str(info.value)
        # The cache and Chainer are left as they were.
        assert chainer.FunctionNode.apply.__name__ == 'apply'
        assert jf.cache_info().currsize == 1
        y = jf(numpy.ones((2, 4), numpy.float32))
    numpy.testing.assert_allclose(
        y.array, model.forward(numpy.ones((2, 4), numpy.float32)).array)


def test_nan_and_inf_propagate_as_in_eager_mode():
    model = MLP()

    def call():
        x = numpy.random.RandomState(1).randn(3, 4).astype(numpy.float32)
        x[0, 0] = numpy.nan
        x[1, 2] = numpy.inf
        x[2, 1] = -numpy.inf
        return (x,)

    testing.assert_jit_matches_eager(
        lambda x: F.log_softmax(model.forward(x)), [call(), call(), call()])


def test_empty_batch_behaves_as_in_eager_mode():
    model = MLP()
    calls = [(numpy.zeros((0, 4), numpy.float32),)] * 2 + [
        (numpy.ones((2, 4), numpy.float32),)] * 2
    testing.assert_jit_matches_eager(model.forward, calls, expect_entries=2)
