"""Helpers of the list-packing tests (``test_packing*.py``): the lengths
of the lists passed, lists of random items and their copies, the
differential check of outputs and item gradients, a model and its twin,
and the program and the link that several of those modules call."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy

import chainerjit
from chainerjit import testing


LENGTHS = (3, 3, 5, 1, 8, 2, 8)
LENGTHS_2 = (3, 3, 5, 2, 8, 2, 8)  # for functions that need two items
LENGTHS_SHORT = (3, 3, 4, 1, 2, 4)  # for quadratic loops


def _rand(rng, shape, dtype=numpy.float32):
    return rng.standard_normal(shape).astype(dtype)


def _steps(rng, n, shape=(2, 3), as_variables=True, dtype=numpy.float32,
           requires_grad=True):
    xs = [_rand(rng, shape, dtype) for _ in range(n)]
    if as_variables:
        return [chainer.Variable(x, requires_grad=requires_grad)
                for x in xs]
    return xs


def _copies(xs):
    return [chainer.Variable(x.array.copy(), requires_grad=x.requires_grad)
            for x in xs]


def _variable_leaves(result):
    if isinstance(result, (list, tuple)):
        return [v for r in result for v in _variable_leaves(r)]
    if isinstance(result, dict):
        return [v for k in sorted(result) for v in _variable_leaves(result[k])]
    if isinstance(result, chainer.Variable) and result.dtype.kind == 'f':
        return [result]
    return []


def _loss(result):
    loss = None
    for v in _variable_leaves(result):
        term = F.sum(v * v)
        loss = term if loss is None else loss + term
    return loss


def _backward(result):
    loss = _loss(result)
    if loss is not None and loss.creator is not None:
        loss.backward()


def _assert_grads_equal(mine, theirs, rtol=1e-4, atol=1e-5):
    assert len(mine) == len(theirs)
    for k, (a, e) in enumerate(zip(mine, theirs)):
        assert (a.grad is None) == (e.grad is None), (
            'item %d: jit grad %s, eager grad %s' % (
                k, 'None' if a.grad is None else 'an array',
                'None' if e.grad is None else 'an array'))
        if e.grad is not None:
            numpy.testing.assert_allclose(a.grad, e.grad, rtol=rtol,
                                          atol=atol, err_msg='item %d' % k)


def _assert_param_grads_equal(model, twin, rtol=1e-4, atol=1e-5):
    mine = dict(model.namedparams())
    for name, param in twin.namedparams():
        assert (mine[name].grad is None) == (param.grad is None), name
        if param.grad is not None:
            numpy.testing.assert_allclose(mine[name].grad, param.grad,
                                          rtol=rtol, atol=atol, err_msg=name)


def _check_grads(fn, lengths, rng, n_lists=1, kind=list, rtol=1e-4,
                 atol=1e-5, **steps_kwargs):
    """Calls ``jit(fn)`` and ``fn`` on separate copies of lists of
    Variables, backprops a scalar loss, compares outputs and every item's
    gradient."""
    jf = chainerjit.jit(fn)
    for n in lengths:
        mine = [_steps(rng, n, **steps_kwargs) for _ in range(n_lists)]
        theirs = [_copies(xs) for xs in mine]
        expected = fn(*[kind(xs) for xs in theirs])
        actual = jf(*[kind(xs) for xs in mine])
        testing.assert_results_equal(actual, expected, rtol, atol)
        _backward(expected)
        _backward(actual)
        for xs, ys in zip(mine, theirs):
            _assert_grads_equal(xs, ys, rtol, atol)
    return jf


def _array_calls(rng, lengths, n_lists=1, kind=list, **steps_kwargs):
    return [tuple(kind(_steps(rng, n, as_variables=False, **steps_kwargs))
                  for _ in range(n_lists)) for n in lengths]


def _twins(cls):
    numpy.random.seed(0)  # Chainer's initializers draw from it
    model = cls()
    twin = cls()
    twin.copyparams(model)
    return model, twin


def _is_packed(jf):
    return any('[T' in str(e.signature) for e in jf.cache_entries())


def _zip_two(xs, ys):
    h = 0
    for x, y in zip(xs, ys):
        h = F.tanh(h + x * y)
    return h


class _Linked(chainer.Chain):
    def __init__(self):
        super(_Linked, self).__init__()
        with self.init_scope():
            self.linear = L.Linear(3, 3)
