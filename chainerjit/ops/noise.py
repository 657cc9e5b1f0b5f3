"""Lowerings of chainer.functions.noise.

None yet: ``F.dropout`` applies nothing in test mode, and in train mode a
recorded ``Dropout`` node holds its mask after ``forward`` whether it drew
it or was given it, so it cannot be lowered safely from the node alone; it
runs on the generic path, which draws a fresh mask as Chainer does.
"""

from chainer.functions.noise import dropout
from chainer.functions.noise import gaussian

from chainerjit.ops import Follow
from chainerjit.ops import generic_lengths
from chainerjit.ops import rows_in_place
from chainerjit.ops import same_rows
from chainerjit.ops import takes_axes


@generic_lengths(dropout.Dropout)
def dropout_lengths(template):
    """A dropout with no mask given draws one of its input's shape on each
    call (``numpy.random.rand(*x.shape)``), and its backward multiplies by
    that mask: it takes any number of rows, on any axis."""
    return rows_in_place if template.mask is None else None


@generic_lengths(gaussian.Gaussian)
def gaussian_lengths(template):
    """A draw from a Gaussian with no noise given (a VAE's sample) draws
    one of its inputs' shape on each call, from NumPy's generator on the
    CPU: it takes any number of rows its mean and log variance both
    have, on any axis."""
    if template.eps is not None:
        return None

    @takes_axes
    def lengths(rows):
        found = same_rows(rows)
        return None if found is None else Follow((found,))
    return lengths
