import warnings

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import make_calls


@pytest.mark.parametrize('dtype', DTYPES)
def test_dropout_test_mode_records_nothing(rng, dtype):
    with chainer.using_config('train', False):
        jfn = testing.assert_jit_matches_eager(
            lambda x: F.relu(F.dropout(x, 0.3)),
            make_calls(rng, [(3, 4)], dtype),
            expect_entries=1, lowered=['ReLU'])
    ops = [n.op for e in jfn.cache_entries() for n in e.graph.nodes]
    assert ops == ['ReLU']


@pytest.mark.parametrize('dtype', DTYPES)
def test_dropout_train_mode_matches_seeded_eager(rng, dtype):
    def fn(x):
        return F.relu(F.dropout(x, 0.3))
    jfn = chainerjit.jit(fn)
    with chainer.no_backprop_mode(), warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        for i, (x,) in enumerate(make_calls(rng, [(5, 6)], dtype)):
            numpy.random.seed(i)
            expected = fn(x)
            numpy.random.seed(i)
            testing.assert_results_equal(jfn(x), expected)
    assert jfn.cache_info().hits > 0
    nodes = [n for e in jfn.cache_entries() for n in e.graph.nodes]
    assert [n.op for n in nodes] == ['Dropout', 'ReLU']
