"""Shared inputs for the op tests."""

import numpy


DTYPES = [numpy.float32, numpy.float64]


def make_calls(rng, shapes, dtype, n=3, low=None, high=None):
    """``n`` argument tuples of arrays with fresh values, one per shape.

    Values are standard normal, or uniform in ``[low, high)`` if given.
    """
    def make(shape):
        if low is not None:
            values = rng.uniform(low, high, size=shape)
        else:
            values = rng.standard_normal(size=shape)
        return numpy.asarray(values, dtype=dtype)
    return [tuple(make(s) for s in shapes) for _ in range(n)]


def calls_of(rng, shape_sets, dtype, **kwargs):
    """Three calls with fresh values for each set of argument shapes."""
    calls = []
    for shapes in shape_sets:
        calls += make_calls(rng, shapes, dtype, **kwargs)
    return calls


def cases_of(test, argnames):
    """The values a forward test is parametrized with for ``argnames``
    (so that a gradient test runs the same cases without copying them)."""
    for mark in test.pytestmark:
        if mark.name == 'parametrize' and mark.args[0] == argnames:
            return list(mark.args[1])
    raise LookupError('%s is not parametrized over %r' % (
        test.__name__, argnames))
