"""Simplifying chains of views (``passes.simplify``), against eager
Chainer: reshape and transpose chains returned at several points, identity
views with gradients and as fresh returned objects, chains that must not
fold, ``-1`` in reshapes and view chains inside loops."""

import chainer.functions as F
import pytest

from chainerjit import testing
from tests.differential import check_unchanged
from tests.differential import rand


pytestmark = pytest.mark.adversarial


def test_reshape_chain_returned_at_several_points(rng):
    def f(x):
        a = F.reshape(x, (6, 4))
        b = F.reshape(a, (2, 12))
        c = F.expand_dims(b, 0)
        d = F.squeeze(c, 0)
        e = F.reshape(d, (2, 3, 4))
        return a, b, c, d, e, F.relu(e)
    check_unchanged(f, [(rand(rng, 2, 3, 4),) for _ in range(3)])


def test_transpose_chain_returned_at_several_points(rng):
    def f(x):
        a = F.transpose(x, (1, 2, 0))
        b = F.swapaxes(a, 0, 2)
        c = F.rollaxis(b, 2)
        d = F.moveaxis(c, 0, -1)
        e = F.transpose(d)
        return a, b, c, d, e, F.tanh(e)
    check_unchanged(f, [(rand(rng, 2, 3, 4),) for _ in range(3)])
    testing.assert_jit_grads_match_eager(
        f, [(rand(rng, 2, 3, 4),) for _ in range(3)])


def test_identity_views_with_grads(rng):
    def f(x):
        a = F.transpose(F.transpose(x, (1, 0)), (1, 0))
        b = F.reshape(F.reshape(x, (12,)), (3, 4))
        return F.relu(a) + F.tanh(b), a
    check_unchanged(f, [(rand(rng, 3, 4),) for _ in range(3)])
    testing.assert_jit_grads_match_eager(
        f, [(rand(rng, 3, 4),) for _ in range(3)])


def test_identity_view_returned_is_fresh_object(rng):
    def f(x):
        return F.reshape(x, (3, 4)), F.transpose(x, (0, 1))
    check_unchanged(f, [(rand(rng, 3, 4),) for _ in range(3)])


def test_transpose_then_reshape_not_folded(rng):
    def f(x):
        a = F.transpose(x)
        b = F.reshape(a, (12,))
        c = F.transpose(F.reshape(b, (4, 3)))
        return F.relu(c) * 1.0, b
    check_unchanged(f, [(rand(rng, 3, 4),) for _ in range(3)])


def test_reshape_with_minus_one_chain(rng):
    def f(x):
        return F.reshape(F.reshape(x, (-1, 2)), (x.shape[0], -1))
    check_unchanged(f, [(rand(rng, 3, 4),) for _ in range(2)] +
                    [(rand(rng, 5, 4),) for _ in range(2)])


def test_view_chain_in_loop(rng):
    def f(xs):
        h = F.reshape(xs[0], (-1,)) * 0
        for t in range(xs.shape[0]):
            h = h + F.reshape(F.transpose(F.transpose(xs[t])), (-1,))
        return h
    calls = [(rand(rng, n, 3, 4),) for n in (3, 3, 7, 1)]
    check_unchanged(f, calls)
    testing.assert_jit_grads_match_eager(f, calls)
