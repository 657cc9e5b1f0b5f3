"""Model twins of the tests that compare a jitted model with its eager
copy: the small MLP they are mostly made of, an eager model and a deep
copy with a jitted ``forward``, inputs, one training call, and the checks
that gradients, parameters and compiled calls agree. Shared by
``test_function*.py``, ``test_calls_configurations.py``,
``ops_tests/test_rnn.py`` and ``fastpaths_tests/test_optimizer_settings.py``.
"""

import copy

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from numpy.testing import assert_allclose
from numpy.testing import assert_array_equal

import chainerjit


F32 = numpy.float32
F64 = numpy.float64
F16 = numpy.float16


def _normal(dtype=F32, scale=0.5):
    return chainer.initializers.Normal(scale, dtype=dtype)


class MLP(chainer.Chain):

    def __init__(self, n_in=4, n_hidden=5, n_out=3, dtype=F32):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(n_in, n_hidden, initialW=_normal(dtype),
                               initial_bias=_normal(dtype))
            self.l2 = L.Linear(n_hidden, n_out, initialW=_normal(dtype),
                               initial_bias=_normal(dtype))

    def forward(self, x):
        return self.l2(F.tanh(self.l1(x)))


def _twins(cls=MLP, *args, **kwargs):
    """An eager model and a copy with a jitted forward."""
    numpy.random.seed(0)
    eager = cls(*args, **kwargs)
    jitted = copy.deepcopy(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    return eager, jitted


def _params(model):
    return [p for _, p in sorted(model.namedparams())]


def _assert_grads(eager, jitted, rtol=1e-5, atol=1e-6):
    for (name, p), (_, q) in zip(sorted(eager.namedparams()),
                                 sorted(jitted.namedparams())):
        assert (q.grad is None) == (p.grad is None), name
        if p.grad is not None:
            assert_allclose(q.grad, p.grad, rtol=rtol, atol=atol,
                            err_msg=name)


def _assert_params_equal(eager, jitted):
    for (name, p), (_, q) in zip(sorted(eager.namedparams()),
                                 sorted(jitted.namedparams())):
        assert q.array.dtype == p.array.dtype, name
        assert_array_equal(q.array, p.array, err_msg=name)


def _assert_compiled(jfn, hits=1):
    for entry in jfn.cache_entries():
        assert entry.fallback is None, entry.fallback
    assert jfn.cache_info().hits >= hits, jfn.cache_report()


def _x(rng, n=3, d=4, dtype=F32):
    return rng.randn(n, d).astype(dtype)


def _train_call(model, x):
    """Clears the gradients, calls the model on a fresh Variable around
    ``x`` and backprops a squared sum; returns ``(y, input Variable)``."""
    model.cleargrads()
    v = chainer.Variable(x.copy())
    y = model(v)
    F.sum(y * y).backward()
    return y, v
