"""The C loop of ``chainerjit/ops/_loops_pooling.pyx``: the gradient of a
max pooling whose windows tile the input gives NumPy's values (each
window's first maximum gets the gradient), reads an input of any strides
and refuses the arrays it does not take."""

import numpy
import pytest

from chainerjit.ops import _loops_pooling


def test_max_pool_tiles_grad_refuses_arrays_it_does_not_take(rng):
    x = rng.standard_normal((2, 3, 4, 6)).astype(numpy.float32)
    gy = rng.standard_normal((2, 3, 2, 3)).astype(numpy.float32)
    gx = numpy.zeros_like(x)
    take = _loops_pooling.max_pool_tiles_grad
    assert not take(x, gy, gx, 2, 3)  # windows that do not tile
    assert not take(x, gy, numpy.asfortranarray(gx), 2, 2)  # gx strided
    assert not take(x, numpy.asfortranarray(gy), gx, 2, 2)  # gy strided
    assert not take(x.astype(numpy.float64), gy, gx, 2, 2)  # mixed dtypes
    assert not take(x, gy, x, 2, 2)  # written over its input
    read_only = numpy.zeros_like(x)
    read_only.flags.writeable = False
    assert not take(x, gy, read_only, 2, 2)
    assert not gx.any()
    assert take(x, gy, gx, 2, 2)
    windows = x.reshape(2, 3, 2, 2, 3, 2).transpose(0, 1, 2, 4, 3, 5)
    first = windows.reshape(2, 3, 2, 3, 4).argmax(axis=-1)
    expected = numpy.zeros((2, 3, 2, 3, 4), numpy.float32)
    numpy.put_along_axis(expected, first[..., None], gy[..., None], -1)
    expected = expected.reshape(2, 3, 2, 3, 2, 2).transpose(
        0, 1, 2, 4, 3, 5).reshape(x.shape)
    assert gx.tobytes() == expected.tobytes()


@pytest.mark.parametrize('axes', [(0, 2, 3, 1), (3, 2, 1, 0)])
def test_max_pool_tiles_grad_reads_an_input_of_any_strides(rng, axes):
    """A convolution's output is a transposed view: the loop reads it by
    its strides (reversed ones too) and gives the C-ordered input's
    result."""
    x = numpy.round(rng.standard_normal((2, 3, 4, 6)) * 2).astype(
        numpy.float32)  # ties
    x.reshape(-1)[5] = numpy.nan
    gy = rng.standard_normal((2, 3, 2, 3)).astype(numpy.float32)
    expected = numpy.empty_like(x)
    assert _loops_pooling.max_pool_tiles_grad(x, gy, expected, 2, 2)
    inverse = numpy.argsort(axes)
    for strided in (numpy.ascontiguousarray(x.transpose(axes)).transpose(
            inverse), x[:, :, ::-1, ::-1].copy()[:, :, ::-1, ::-1]):
        assert not strided.flags.c_contiguous
        gx = numpy.empty_like(expected)
        assert _loops_pooling.max_pool_tiles_grad(strided, gy, gx, 2, 2)
        assert gx.tobytes() == expected.tobytes()
