"""Ops on 0-d inputs: the compiled backward gives 0-d *arrays* as
gradients, as Chainer requires of a backward (a NumPy scalar is "Type of
grad is invalid" to it, and ``gy[()]`` of a 0-d array is one)."""

import chainer.functions as F
import numpy
import pytest

from chainerjit import testing

FUNCTIONS = {
    'pad': lambda x: F.pad(x, 0, 'constant') * 2,
    'identity': lambda x: F.identity(x) * 3,
    'get_item': lambda x: F.get_item(x, ()) * x,
    'tanh': F.tanh,
    'exp': F.exp,
    'sigmoid': F.sigmoid,
    'relu': F.relu,
    'leaky_relu': F.leaky_relu,
    'softplus': F.softplus,
    'absolute': F.absolute,
    'square': F.square,
    'sqrt': lambda x: F.sqrt(x * x + 1),
    'arithmetic': lambda x: (x * 2 + 1) / (x * x + 2) - x ** 3,
    'clip': lambda x: F.clip(x, -0.5, 0.5),
    'maximum': lambda x: F.maximum(x, x * 0.5),
    'where': lambda x: F.where(x.array > 0, x, -x),
    'cast': lambda x: F.cast(x, numpy.float64),
    'broadcast_to': lambda x: F.broadcast_to(x, (2, 3)),
    'reshape': lambda x: F.reshape(x, (1, 1)),
    'expand_dims': lambda x: F.expand_dims(x, 0),
    'sum': lambda x: F.sum(x * x),
    'tile': lambda x: F.tile(x, 3),
    'stack': lambda x: F.stack([x, x * 2]),
}


@pytest.mark.parametrize('name', sorted(FUNCTIONS))
def test_gradients_of_a_0d_input_are_arrays(name, rng):
    calls = [(numpy.asarray(rng.standard_normal(), numpy.float32),)
             for _ in range(4)]
    testing.assert_jit_grads_match_eager(FUNCTIONS[name], calls)
