"""Helpers of a user's module that bind NumPy's and Chainer's functions
to names of their own before any recording (see
``test_aliased_functions``)."""

from chainer.functions import broadcast_to
from numpy import asarray


def as_plain_array(x):
    return asarray(x)


def broadcast_rows(row, x):
    return broadcast_to(row, x.shape)
