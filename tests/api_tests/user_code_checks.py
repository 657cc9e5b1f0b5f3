"""Checks of the user-code tests (``test_user_code*.py``): random inputs,
one call of a jitted function and its eager original compared (with or
without a fallback allowed), the compiled cache entries, the states of a
model and its copy compared, and a model paired with a jitted copy."""

import copy
import warnings

import chainer
import numpy

import chainerjit
from chainerjit import testing


f32 = numpy.float32


def _r(rng, *shape, **kw):
    return rng.uniform(-1, 1, shape).astype(kw.get('dtype', f32))


def _v(rng, *shape, **kw):
    return chainer.Variable(_r(rng, *shape, **kw))


def _same(jitted, eager, *args, **kwargs):
    """One call of both under no_backprop_mode; no fallback allowed."""
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.FallbackWarning)
        with chainer.no_backprop_mode():
            expected = eager(*args, **kwargs)
            actual = jitted(*args, **kwargs)
    testing.assert_results_equal(actual, expected)
    return actual, expected


def _same_eager(jitted, eager, *args):
    """One call of both; the jitted one may run eagerly."""
    with chainer.no_backprop_mode():
        testing.assert_results_equal(jitted(*args), eager(*args))


def _compiled(jitted, n_entries=None):
    entries = jitted.cache_entries()
    assert all(e.fallback is None for e in entries), jitted.cache_report()
    assert jitted.cache_info().hits > 0, jitted.cache_report()
    if n_entries is not None:
        assert len(entries) == n_entries, jitted.cache_report()


def _state(model):
    """Parameters, persistents and scalar attributes of every link."""
    state = {}
    for path, link in model.namedlinks():
        for name, value in sorted(vars(link).items()):
            if isinstance(value, chainer.Variable):
                value = None if value.array is None else value.array.copy()
            elif isinstance(value, numpy.ndarray):
                value = value.copy()
            elif not isinstance(value, (bool, int, float, str, type(None))):
                continue
            state[path + '/' + name] = value
    return state


def _same_state(a, b):
    sa, sb = _state(a), _state(b)
    assert sorted(sa) == sorted(sb)
    for k in sa:
        if isinstance(sa[k], numpy.ndarray):
            numpy.testing.assert_allclose(sa[k], sb[k], rtol=1e-5,
                                          atol=1e-6, err_msg=k)
        else:
            assert sa[k] == sb[k], k


def _pair(cls, *args):
    eager = cls(*args)
    model = copy.deepcopy(eager)
    model.forward = chainerjit.jit(model.forward)
    return eager, model
