"""Functions bound to names of the user's own (``from numpy import
asarray``) before the recording patches them: each call records what the
patched function records, in the forward's module and in the helpers'
modules, so that an array computed from an argument is not frozen as a
constant of the first call."""

from numpy import asarray

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.frontend_tests import aliased_helpers


class _Net(chainer.Chain):
    def __init__(self, how):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(6, 4)
        self.how = how

    def forward(self, x):
        if self.how == 'here':
            h = asarray(x) + 0.0
        elif self.how == 'helper':
            h = aliased_helpers.as_plain_array(x) + 0.0
        else:
            h = aliased_helpers.as_plain_array(x)
        return self.l1(h)


@pytest.mark.parametrize('how', ['here', 'helper', 'view'])
def test_an_aliased_numpy_function_follows_new_values(how):
    model = _Net(how)
    jitted = chainerjit.jit(model.forward)
    for seed in range(5):
        x = numpy.random.RandomState(seed).randn(3, 6).astype(numpy.float32)
        testing.assert_results_equal(jitted(x), model.forward(x))
    assert jitted.cache_info().hits >= 3


def test_an_aliased_chainer_function_serves_every_batch_size():
    row = chainer.Variable(numpy.arange(3, dtype=numpy.float32))

    def scaled(x):
        return F.sum(x * aliased_helpers.broadcast_rows(row, x))
    jitted = chainerjit.jit(scaled)
    for n in (3, 5, 8, 4, 6):
        x = numpy.random.RandomState(n).randn(n, 3).astype(numpy.float32)
        testing.assert_results_equal(jitted(x), scaled(x))
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('x: f32[B,3]'), entry.signature


def test_the_names_are_bound_again_after_recording():
    jitted = chainerjit.jit(_Net('helper').forward)
    jitted(numpy.ones((2, 6), numpy.float32))
    assert aliased_helpers.asarray is numpy.asarray
    assert asarray is numpy.asarray
    assert aliased_helpers.broadcast_to is F.broadcast_to
