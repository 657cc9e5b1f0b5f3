"""Helpers of ``test_loop_rolling*.py``: random inputs, a model and its
eager twin with the same parameters, and their parameter gradients
compared."""

import numpy


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(numpy.float32)


def _twins(cls, *args):
    numpy.random.seed(0)  # Chainer's initializers draw from it
    model = cls(*args)
    twin = cls(*args)
    twin.copyparams(model)
    return model, twin


def _assert_grads_equal(model, twin, rtol=1e-4, atol=1e-5):
    mine = dict(model.namedparams())
    for name, param in twin.namedparams():
        if param.grad is None:
            assert mine[name].grad is None, name
        else:
            numpy.testing.assert_allclose(mine[name].grad, param.grad,
                                          rtol=rtol, atol=atol,
                                          err_msg=name)
