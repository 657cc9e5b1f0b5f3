"""Helpers of the loop tests: inputs made for several trip counts, and the
differential checks of a jitted function against eager Chainer over them.
"""

import chainer
import numpy

from chainerjit import testing


RTOL, ATOL = 1e-5, 1e-6


def a(rng, *shape):
    return rng.standard_normal(shape).astype(numpy.float32)


def calls(make, lengths, seed=0):
    rng = numpy.random.RandomState(seed)
    return [make(rng, n) for n in lengths]


def variables(make):
    """``make`` with float arrays wrapped as Variables (the first
    iteration then records the same ops as the others)."""
    def made(rng, n):
        return tuple(chainer.Variable(x) if isinstance(x, numpy.ndarray)
                     and x.dtype.kind == 'f' else x for x in make(rng, n))
    return made


def fwd(fn, make, lengths, **kwargs):
    return testing.assert_jit_matches_eager(
        fn, calls(make, lengths), rtol=RTOL, atol=ATOL, **kwargs)


def grads(fn, make, lengths, **kwargs):
    return testing.assert_jit_grads_match_eager(
        fn, calls(make, lengths), rtol=RTOL, atol=ATOL, **kwargs)


def seq(rng, n):
    return a(rng, n, 2, 3), a(rng, 2, 3)


def symbolic(jf):
    """The calls after the first all hit one symbolic entry."""
    info = jf.cache_info()
    assert info.currsize == 1 and info.misses == 1, jf.cache_report()
    assert jf.cache_entries()[0].symbolic is not None


def twins(cls):
    model, twin = cls(), cls()
    twin.copyparams(model)
    return model, twin
