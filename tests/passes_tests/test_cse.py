"""Common subexpression elimination (``passes.cse``), against eager
Chainer: nodes that look alike but differ (indices, slopes, shapes, random
ops in train mode), the same op inside a loop and outside it, and
gradients through merged duplicates."""

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.differential import check_unchanged
from tests.differential import rand


pytestmark = pytest.mark.adversarial


def test_cse_two_get_items_with_different_indices(rng):
    def f(x):
        return F.relu(F.get_item(x, 0)) + F.relu(F.get_item(x, 1)) + \
            F.relu(x[2]) * F.relu(x[2])
    check_unchanged(f, [(rand(rng, 3, 4),) for _ in range(3)])


def test_cse_dropout_twice_in_train_mode(rng):
    def f(x):
        with chainer.using_config('train', True):
            a = F.dropout(x, 0.5)
            b = F.dropout(x, 0.5)
        return a, b
    jitted = chainerjit.jit(f)
    with chainer.no_backprop_mode():
        for _ in range(3):
            a, b = jitted(rand(rng, 50, 50) + 10)
            assert not numpy.array_equal(a.array, b.array)


def test_cse_different_reshapes_and_transposes(rng):
    def f(x):
        return (F.transpose(x, (1, 0, 2)) * 1.0, F.transpose(x, (0, 2, 1)),
                F.reshape(x, (6, 4)), F.reshape(x, (4, 6)),
                F.sum(x, axis=0), F.sum(x, axis=1),
                F.sum(x, axis=0, keepdims=True))
    check_unchanged(f, [(rand(rng, 2, 3, 4),) for _ in range(3)])


def test_cse_leaky_relu_different_slopes(rng):
    def f(x):
        return F.leaky_relu(x, 0.1) + F.leaky_relu(x, 0.3), \
            F.clip(x, -0.5, 0.5) - F.clip(x, -0.2, 0.2)
    check_unchanged(f, [(rand(rng, 3, 4),) for _ in range(3)])


def test_cse_same_op_inside_loop_and_outside(rng):
    def f(xs, w):
        a = F.tanh(F.matmul(xs[0], w))
        h = a
        for t in range(xs.shape[0]):
            h = h + F.tanh(F.matmul(xs[0], w)) + F.tanh(F.matmul(xs[t], w))
        return h, a
    calls = [(rand(rng, n, 3, 4), rand(rng, 4, 4)) for n in (3, 3, 7, 1)]
    check_unchanged(f, calls, rtol=1e-4, atol=1e-5)
    testing.assert_jit_grads_match_eager(f, calls, rtol=1e-4, atol=1e-5)


def test_cse_duplicates_with_grads(rng):
    def f(x, w):
        a = F.relu(F.linear(x, w))
        b = F.relu(F.linear(x, w))
        return a * b + F.sigmoid(F.linear(x, w))
    testing.assert_jit_grads_match_eager(
        f, [(rand(rng, 3, 4), rand(rng, 5, 4)) for _ in range(3)])
