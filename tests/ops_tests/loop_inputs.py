"""Inputs of the C loop tests (``test_loops_*.py``): arrays whose first
values are special (NaN, infinities, zeros of both signs, a tiny value),
and values over many magnitudes, so that another order of additions would
show."""

import numpy


def _special(rng, shape, dtype):
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    special = [numpy.nan, numpy.inf, -numpy.inf, -0.0, 0.0, 1e-30]
    flat[:len(special)] = special[:flat.size]
    return x


def _spread(rng, shape, dtype):
    """Values over many magnitudes, so that the order of a sum shows."""
    return (rng.standard_normal(shape) *
            numpy.exp(rng.uniform(-3, 5, shape))).astype(dtype)


SPECIAL = [numpy.nan, numpy.inf, -numpy.inf, -0.0, 0.0, 1e30]
