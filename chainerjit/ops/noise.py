"""Lowerings of chainer.functions.noise.

None yet: ``F.dropout`` applies nothing in test mode, and in train mode a
recorded ``Dropout`` node holds its mask after ``forward`` whether it drew
it or was given it, so it cannot be lowered safely from the node alone; it
runs on the generic path, which draws a fresh mask as Chainer does.
"""

from chainer.functions.noise import dropout

from chainerjit.ops import generic_lengths
from chainerjit.ops import rows_in_place


@generic_lengths(dropout.Dropout)
def dropout_lengths(template):
    """A dropout with no mask given draws one of its input's shape on each
    call (``numpy.random.rand(*x.shape)``), and its backward multiplies by
    that mask: it takes any number of rows, on any axis."""
    return rows_in_place if template.mask is None else None
