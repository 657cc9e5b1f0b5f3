"""Ops on the rows of joined items (an N-step link's outputs over
sentences joined), against Chainer's functions of the items cut apart, in
values and gradients, at any number and lengths of items:
``F.pad_sequence`` (``ops.array.PadSegments``), padded to the longest or
to a length, and a reduction of each item over its rows
(``ops.array.ReduceSegments``)."""

import chainer
import chainer.functions as F
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy
import pytest

from chainerjit.ops import array as array_ops


@settings(deadline=None, max_examples=40)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=7),
       st.sampled_from([None, 8]), st.sampled_from([0., -1.5]),
       st.sampled_from([numpy.float32, numpy.float64]),
       st.integers(0, 2 ** 16))
def test_pad_segments_is_pad_sequence_of_the_items(lengths, length, padding,
                                                   dtype, seed):
    rng = numpy.random.RandomState(seed)
    lengths = numpy.array(lengths, numpy.int64)
    rows = rng.standard_normal((int(lengths.sum()), 3)).astype(dtype)
    gy_shape = (len(lengths), length or max(lengths.max(), 0), 3)
    gy = rng.standard_normal(gy_shape).astype(dtype)

    x = chainer.Variable(rows.copy())
    y = array_ops.PadSegments(length, padding).apply(
        (x, lengths.copy()))[0]
    y.grad = gy.copy()
    y.backward()

    expected_x = chainer.Variable(rows.copy())
    items = F.split_axis(expected_x, numpy.cumsum(lengths)[:-1].tolist(),
                         0) if len(lengths) > 1 else [expected_x]
    expected = F.pad_sequence(list(items), length, padding)
    expected.grad = gy.copy()
    expected.backward()

    numpy.testing.assert_array_equal(y.array, expected.array)
    assert y.dtype == dtype
    numpy.testing.assert_array_equal(x.grad, expected_x.grad)


def _cut_apart(x, lengths):
    return list(F.split_axis(x, numpy.cumsum(lengths)[:-1].tolist(), 0)) \
        if len(lengths) > 1 else [x]


@pytest.mark.parametrize('kind, reduce', [
    ('max', F.max), ('min', F.min), ('sum', F.sum), ('mean', F.mean),
    ('first', lambda part, axis: part[0]),
    ('last', lambda part, axis: part[-1])])
@settings(deadline=None, max_examples=25)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=7),
       st.sampled_from([numpy.float32, numpy.float64]),
       st.booleans(), st.integers(0, 2 ** 16))
def test_reduce_segments_is_each_items_reduction(kind, reduce, lengths,
                                                 dtype, ties, seed):
    rng = numpy.random.RandomState(seed)
    lengths = numpy.array(lengths, numpy.int64)
    rows = rng.standard_normal((int(lengths.sum()), 3)).astype(dtype)
    if ties:  # equal maxima share the gradient, as Chainer's Max does
        rows = numpy.round(rows).astype(dtype)
    gy = rng.standard_normal((len(lengths), 3)).astype(dtype)

    x = chainer.Variable(rows.copy())
    y = array_ops.ReduceSegments(kind).apply((x, lengths.copy()))[0]
    y.grad = gy.copy()
    y.backward()

    expected_x = chainer.Variable(rows.copy())
    expected = F.stack([reduce(part, axis=0)
                        for part in _cut_apart(expected_x, lengths)])
    expected.grad = gy.copy()
    expected.backward()

    numpy.testing.assert_array_equal(y.array, expected.array)
    numpy.testing.assert_array_equal(x.grad, expected_x.grad)
