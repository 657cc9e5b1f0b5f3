import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import ops
from chainerjit import testing
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import calls_of
from tests.ops_tests.common import make_calls


CONDITION = numpy.array([[True, False, True, True],
                         [False, False, True, False],
                         [True, True, False, True]])
PERMUTATION = numpy.array([2, 0, 3, 1], numpy.int32)

CASES = [
    # lowered op, function, argument shape sets
    ('Reshape', lambda x: F.reshape(x, (4, 3)), [[(3, 4)], [(2, 6)]]),
    ('Reshape', lambda x: F.reshape(x, (-1, 2)), [[(3, 4)], [(0, 4)]]),
    ('Reshape', lambda x: F.flatten(x), [[(3, 4)], [(2, 3, 5)], [(0, 4)]]),
    ('ExpandDims', lambda x: F.expand_dims(x, 0), [[(3, 4)], [()]]),
    ('ExpandDims', lambda x: F.expand_dims(x, -1), [[(3, 4)], [(0, 4)]]),
    ('ExpandDims', lambda x: F.expand_dims(x, 1), [[(3, 4)]]),
    ('Squeeze', lambda x: F.squeeze(x), [[(3, 1, 4, 1)], [(1, 1)]]),
    ('Squeeze', lambda x: F.squeeze(x, axis=-1), [[(3, 1, 4, 1)],
                                                  [(0, 1)]]),
    ('Squeeze', lambda x: F.squeeze(x, axis=(0, 2)), [[(1, 3, 1)]]),
    ('BroadcastTo', lambda x: F.broadcast_to(x, (2, 3, 4)),
     [[(3, 1)], [(4,)], [()], [(2, 3, 4)]]),
    ('BroadcastTo', lambda x: F.broadcast_to(x, (0, 4)), [[(4,)]]),
    ('Broadcast', lambda x, y: F.broadcast(x, y),
     [[(3, 1), (2, 1, 4)], [(3, 4), (3, 4)], [(0, 1), (5,)]]),
    ('Transpose', lambda x: F.transpose(x), [[(3, 4)], [(2, 3, 5)],
                                             [(0, 4)]]),
    ('Transpose', lambda x: F.transpose(x, (1, 0, 2)), [[(2, 3, 5)]]),
    ('Transpose', lambda x: F.transpose(x, (-1, 0, 1)), [[(2, 3, 5)]]),
    ('Swapaxes', lambda x: F.swapaxes(x, 0, 2), [[(2, 3, 5)], [(0, 3, 4)]]),
    ('Swapaxes', lambda x: F.swapaxes(x, -1, 1), [[(2, 3, 5)]]),
    ('Rollaxis', lambda x: F.rollaxis(x, 2), [[(2, 3, 5)], [(0, 3, 4)]]),
    ('Rollaxis', lambda x: F.rollaxis(x, 0, 3), [[(2, 3, 5)]]),
    ('Rollaxis', lambda x: F.rollaxis(x, -1, 1), [[(2, 3, 5, 4)]]),
    ('Rollaxis', lambda x: F.rollaxis(x, 1, 1), [[(2, 3, 5)]]),
    ('Moveaxis', lambda x: F.moveaxis(x, 0, -1), [[(2, 3, 5)], [(0, 3)]]),
    ('Moveaxis', lambda x: F.moveaxis(x, (0, 1), (2, 0)),
     [[(2, 3, 5)], [(2, 3, 5, 4)]]),
    ('Flip', lambda x: F.flip(x, 0), [[(3, 4)], [(0, 4)]]),
    ('Flip', lambda x: F.flip(x, -1), [[(3, 4)], [(2, 3, 5)]]),
    ('FlipLR', lambda x: F.fliplr(x), [[(3, 4)], [(2, 3, 5)]]),
    ('FlipUD', lambda x: F.flipud(x), [[(3, 4)], [(5,)]]),
    ('Permutate', lambda x: F.permutate(x, PERMUTATION),
     [[(4, 3)], [(4,)]]),
    ('Permutate', lambda x: F.permutate(x, PERMUTATION, axis=1, inv=True),
     [[(2, 4, 3)], [(0, 4)]]),
    # Chainer indexes with ``(slice(None),) * axis``: axis 0 here.
    ('Permutate', lambda x: F.permutate(x, PERMUTATION, axis=-1),
     [[(4, 3)]]),
    ('Where', lambda x, y: F.where(CONDITION, x, y),
     [[(3, 4), (3, 4)], [(3, 1), (4,)]]),
    ('Concat', lambda x, y: F.concat((x, y)),
     [[(3, 4), (3, 2)], [(0, 4), (0, 1)]]),
    ('Concat', lambda x, y, z: F.concat((x, y, z), axis=0),
     [[(3, 4), (1, 4), (2, 4)], [(1,), (0,), (3,)]]),
    ('Concat', lambda x: F.concat((x,), axis=-1), [[(3, 4)]]),
    ('Stack', lambda x, y: F.stack((x, y)), [[(3, 4)] * 2, [()] * 2]),
    ('Stack', lambda x, y: F.stack((x, y), axis=-1),
     [[(3, 4)] * 2, [(0, 2)] * 2]),
    ('Hstack', lambda x, y: F.hstack((x, y)),
     [[(3, 4), (3, 2)], [(2,), (3,)], [(), ()], [(0, 4), (0, 1)]]),
    ('Vstack', lambda x, y: F.vstack((x, y)),
     [[(3, 4), (1, 4)], [(2,), (2,)], [(), ()]]),
    ('Dstack', lambda x, y: F.dstack((x, y)),
     [[(3, 4, 2), (3, 4, 1)], [(3, 4), (3, 4)], [(2,), (2,)], [(), ()]]),
    ('SplitAxis', lambda x: F.split_axis(x, 2, 1), [[(3, 4)], [(0, 6)]]),
    ('SplitAxis', lambda x: F.split_axis(x, 3, 0), [[(0, 4)]]),
    ('SplitAxis', lambda x: F.split_axis(x, [1, 3], -1),
     [[(3, 4)], [(2, 3, 5)]]),
    ('SplitAxis', lambda x: F.split_axis(x, [2, 2, 1], 0), [[(3, 4)]]),
    ('SplitAxis', lambda x: F.split_axis(x, numpy.array([1, 2]), 0),
     [[(3, 4)]]),
    ('SplitAxis', lambda x: F.split_axis(x, [], 0), [[(3, 4)]]),
    ('SplitAxis', lambda x: F.split_axis(x, 1, 0, force_tuple=False),
     [[(3, 4)]]),
    # (of a value of no argument's axes: an argument's items are taken one
    # by one)
    ('Separate', lambda x: F.separate(F.tile(F.flip(x, 0), 1)),
     [[(3, 4)], [(2,)]]),
    ('Separate', lambda x: F.separate(F.tile(F.flip(x, 0), 1), axis=-1),
     [[(2, 3, 4)], [(0, 2)]]),
    ('GetItem', lambda x: F.separate(x, axis=-1), [[(2, 3, 4)], [(0, 2)]]),
    ('Tile', lambda x: F.tile(x, 2), [[(3, 4)], [()], [(0, 2)]]),
    ('Tile', lambda x: F.tile(x, (2, 1, 3)), [[(3, 4)], [(2,)]]),
    ('Repeat', lambda x: F.repeat(x, 2), [[(3, 4)], [()], [(0, 2)]]),
    ('Repeat', lambda x: F.repeat(x, 2, axis=1), [[(3, 4)], [(0, 2)]]),
    ('Repeat', lambda x: F.repeat(x, (1, 0, 2), axis=0), [[(3, 4)]]),
    ('Pad', lambda x: F.pad(x, 1, 'constant'), [[(3, 4)], [(0, 2)], [(2,)]]),
    ('Pad', lambda x: F.pad(x, ((1, 0), (0, 2)), 'constant',
                            constant_values=1.5), [[(3, 4)], [(0, 2)]]),
    ('Pad', lambda x: F.pad(x, (2, 1), 'constant', constant_values=-1),
     [[(3, 4)], [(2, 3, 5)]]),
    ('PadSequence', lambda x, y, z: F.pad_sequence((x, y, z)),
     [[(3, 4), (1, 4), (2, 4)], [(2,), (5,), (1,)]]),
    ('PadSequence', lambda x, y: F.pad_sequence((x, y), 6, padding=-1.5),
     [[(3, 2), (6, 2)], [(0,), (4,)]]),
    ('Cast', lambda x: F.cast(x, numpy.float16), [[(3, 4)], [()]]),
    ('Cast', lambda x: F.cast(x, 'i'), [[(3, 4)], [(0,)]]),
    ('Copy', lambda x: F.copy(x, '@numpy'), [[(3, 4)], [()]]),
    ('Space2Depth', lambda x: F.space2depth(x, 2),
     [[(2, 3, 4, 6)], [(0, 2, 2, 2)]]),
    ('Depth2Space', lambda x: F.depth2space(x, 2),
     [[(2, 12, 2, 3)], [(0, 4, 1, 1)]]),
    ('Diagonal', lambda x: F.diagonal(x), [[(3, 4)], [(2, 3, 5)]]),
    ('Diagonal', lambda x: F.diagonal(x, 1, 2, 0), [[(2, 3, 5)]]),
    ('Diagonal', lambda x: F.diagonal(x, -1), [[(4, 3)]]),
    ('Im2Col', lambda x: F.im2col(x, 3, pad=1), [[(2, 3, 4, 5)]]),
    ('Im2Col', lambda x: F.im2col(x, (2, 3), stride=2, cover_all=True),
     [[(1, 2, 5, 6)]]),
    ('Im2Col', lambda x: F.im2col(x, 3, dilate=2), [[(1, 1, 7, 7)]]),
    ('SpatialTransformerGrid',
     lambda theta: F.spatial_transformer_grid(theta, (4, 5)),
     [[(2, 2, 3)], [(0, 2, 3)]]),
    ('SpatialTransformerGrid',
     lambda theta: F.spatial_transformer_grid(theta, (1, 3)), [[(3, 2, 3)]]),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', CASES, ids=lambda case: case[0])
def test_array(rng, case, dtype):
    op, fn, shape_sets = case
    testing.assert_jit_matches_eager(
        fn, calls_of(rng, shape_sets, dtype),
        expect_entries=len(shape_sets), lowered=[op])


@pytest.mark.parametrize('dtype', DTYPES)
def test_spatial_transformer_grid_is_exact(rng, dtype):
    testing.assert_jit_matches_eager(
        lambda theta: F.spatial_transformer_grid(theta, (6, 7)),
        make_calls(rng, [(3, 2, 3)], dtype), rtol=0, atol=0,
        expect_entries=1, lowered=['SpatialTransformerGrid'])


INDEX_ARRAY = numpy.array([[0, 1], [3, 2]])
MASK = numpy.array([True, False, True, True])
MASK_2D = numpy.array([[True, False, True, False, True]] * 4)

SLICES = [
    1, -1, slice(1, 3), slice(None, None, -2), (slice(None), 2),
    (Ellipsis, 1), (None, slice(None, None, 2)), (1, 2, 3), (Ellipsis, None),
    (slice(1, None), None, Ellipsis, slice(0, 4, 3)),
    numpy.array([0, 2, 3]), [0, 2], ([0, 1], [2, 3]), INDEX_ARRAY,
    (slice(None), INDEX_ARRAY), (0, Ellipsis, numpy.array([1, 0])),
    MASK, MASK_2D, (slice(None), numpy.array([True] * 5)),
    numpy.array(True),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('slices', SLICES)
def test_get_item(rng, slices, dtype):
    testing.assert_jit_matches_eager(
        lambda x: F.get_item(x, slices),
        make_calls(rng, [(4, 5, 6)], dtype), expect_entries=1,
        lowered=['GetItem'])


@pytest.mark.parametrize('slices', SLICES[:10])
def test_get_item_gradient_of_basic_indexes_is_chainers_bytes(rng, slices):
    """A basic index's gradient, added on the view of the zeros (no
    position repeats), gives the bytes of Chainer's ``numpy.add.at``: an
    output gradient's -0 gives +0."""
    def fn(x):
        return F.get_item(x, slices)
    jitted = chainerjit.jit(fn)
    for _ in range(3):
        x = rng.standard_normal((4, 5, 6)).astype(numpy.float32)
        gy = rng.standard_normal(fn(x).shape).astype(numpy.float32)
        gy.reshape(-1)[:min(2, gy.size - 1)] = -0.0  # (one left as it is)
        grads = []
        for f in (fn, jitted):
            v = chainer.Variable(x.copy())
            y = f(v)
            y.grad = gy.copy()
            y.backward()
            grads.append(v.grad.tobytes())
        assert grads[0] == grads[1]


@pytest.mark.parametrize('slices', [slice(0, 2), (slice(None), 1),
                                    (Ellipsis, None, 1)])
def test_get_item_empty(rng, slices):
    testing.assert_jit_matches_eager(
        lambda x: F.get_item(x, slices),
        make_calls(rng, [(0, 5, 6)], numpy.float32), expect_entries=1,
        lowered=['GetItem'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('n', [3, 0])
def test_select_item(rng, n, dtype):
    calls = [(x, rng.randint(0, 4, size=n).astype(numpy.int32))
             for x, in make_calls(rng, [(n, 4)], dtype)]
    testing.assert_jit_matches_eager(
        lambda x, t: F.select_item(x, t), calls, expect_entries=1,
        lowered=['SelectItem'])


# --- rows through an index: a cut of the first or last few ------------------

@pytest.mark.parametrize('index, rows', [
    ((slice(1, None),), 'L0-1'), ((slice(None, -1),), 'L0-1'),
    ((slice(2, -1), 0), 'L0-3'), ((slice(None),), 'L0'),
    ((slice(0, None),), 'L0'),
])
def test_a_cut_of_the_first_or_last_rows_follows_them(index, rows):
    found = ops.index_rows(index, ops.Rows.of_item(0, 9))
    assert str(found) == rows and found.axis == 0


@pytest.mark.parametrize('index', [
    (slice(None, 0),), (slice(1, 0),), (slice(None, 3),), (slice(-2, None),),
    (slice(1, None, 2),), (1,), (-2,), (slice(-1, 0),),
    (slice(numpy.int64(1), None),)])
def test_other_indexes_of_the_rows_are_not_followed(index):
    """(One row taken with an int, of a padded block's: no rows left.)"""
    assert ops.index_rows(index, ops.Rows.of_item(0, 9), True) is None
    assert ops.index_rows(index, ops.Rows.of_item(0, 9)._replace(
        widest=True)) is (ops.TAKEN if index in ((1,), (-2,)) else None)


@pytest.mark.parametrize('index', [
    (0,), (-1,), (slice(None, 1),), (slice(0, 1),), (slice(-1, None),)])
def test_positions_every_length_has_leave_no_rows(index):
    """An item of any length has a first and a last row (``y[-1]``)."""
    assert ops.index_rows(index, ops.Rows.of_item(0, 9), True) is ops.TAKEN
    assert ops.index_rows(index, ops.Rows.of_item(0, 9)) is None  # counter


def test_positions_two_items_of_any_lengths_have_leave_no_rows():
    rows = ops.Rows(((0, 9), (1, 4)))
    assert ops.index_rows((-2,), rows, True) is ops.TAKEN
    assert ops.index_rows((slice(None, 2),), rows, True) is ops.TAKEN
    assert ops.index_rows((2,), rows, True) is None
    assert ops.index_rows((-1,), rows.negated(), True) is None
    assert ops.index_rows((slice(None), -1), rows._replace(axis=1),
                          True) is ops.TAKEN


@pytest.mark.parametrize('in_shape, shape, runs', [
    ((3, 5, 4), (3, 20), ((0,), (1, 2))),
    ((3, 5, 4), (15, 4), ((0, 1), (2,))),
    ((3, 5, 4), (60,), ((0, 1, 2),)),
    ((3, 5, 4), (3, 5, 4), ((0,), (1,), (2,))),
    ((3, 5, 4), (3, 4, 5), None),  # not a merge
    ((6, 4), (3, 8), None),  # a split and a merge
    ((3, 1, 4), (3, 4), None),  # axes of one: the unit-axes rule's
])
def test_merged_runs(in_shape, shape, runs):
    from chainerjit.ops import array as array_ops
    assert array_ops.merged_runs(in_shape, shape) == runs
