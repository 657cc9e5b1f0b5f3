"""Array ops exported to ONNX and run in onnxruntime, over the cases of
the forward op tests."""

import chainer
import chainer.functions as F
import numpy
import pytest

from chainerjit import onnx_export
from tests.onnx_tests.test_activation import check_onnx
from tests.onnx_tests.test_activation import check_shape_sets
from tests.ops_tests import test_array as cases
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import make_calls


pytest.importorskip('onnxruntime')


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', cases.CASES, ids=lambda case: case[0])
def test_array(rng, case, dtype):
    op, fn, shape_sets = case
    # A broadcast to the input's own shape returns the input: the
    # exported graph then has no outputs, which onnxruntime rejects.
    shape_sets = [s for s in shape_sets
                  if not (op == 'BroadcastTo' and s == [(2, 3, 4)])]
    check_shape_sets(rng, fn, shape_sets, dtype, op)


def _exportable(slices):
    """Basic indexing, or one integer array among slices."""
    items = slices if isinstance(slices, tuple) else (slices,)
    arrays = [s for s in items if isinstance(s, (list, numpy.ndarray))]
    return not arrays or (
        len(arrays) == 1 and numpy.asarray(arrays[0]).dtype.kind != 'b'
        and not any(s is None or isinstance(s, int) for s in items))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('slices', cases.SLICES)
def test_get_item(rng, slices, dtype):
    def fn(x):
        return F.get_item(x, slices)
    calls = make_calls(rng, [(4, 5, 6)], dtype, n=2)
    if _exportable(slices):
        check_onnx(fn, calls, 'GetItem')
    else:
        with pytest.raises(onnx_export.ExportError, match='GetItem'):
            check_onnx(fn, calls, 'GetItem')


@pytest.mark.parametrize('slices', [slice(0, 2), (slice(None), 1),
                                    (Ellipsis, None, 1)])
def test_get_item_empty(rng, slices):
    check_shape_sets(rng, lambda x: F.get_item(x, slices), [[(0, 5, 6)]],
                     numpy.float32, 'GetItem')


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('n', [3, 0])
def test_select_item(rng, n, dtype):
    calls = [(x, rng.randint(0, 4, size=n).astype(numpy.int32))
             for x, in make_calls(rng, [(n, 4)], dtype, n=2)]
    check_onnx(lambda x, t: F.select_item(x, t), calls, 'SelectItem')


DYNAMIC_CASES = [
    # lowered op, function, argument shapes after the batch axis
    ('Reshape', lambda x: F.reshape(x, (len(x), 3, 4)), [(12,)]),
    ('Reshape', lambda x: F.flatten(x[:, None]), [(1,)]),
    ('Reshape', lambda x: F.reshape(x, (x.shape[0], -1)), [(3, 4)]),
    ('Reshape', lambda x: F.reshape(x, (-1, 4)), [(3, 4)]),
    ('Reshape', lambda x: F.reshape(F.reshape(x, (-1, 4)), x.shape),
     [(3, 4)]),
    ('Transpose', lambda x: F.transpose(x, (1, 0, 2)), [(3, 4)]),
    ('Swapaxes', lambda x: F.swapaxes(x, 0, 2), [(3, 4)]),
    ('Concat', lambda x, y: F.concat((x, y)), [(3,), (2,)]),
    ('Concat', lambda x, y: F.concat((x, y), axis=0), [(3,), (3,)]),
    ('GetItem', lambda x: x[:, 1:3], [(4, 2)]),
    ('GetItem', lambda x: x[..., ::-2, None], [(4, 5)]),
    ('GetItem', lambda x: x[:, 2, :-1], [(4, 5)]),
    ('GetItem', lambda x: x[:, [2, 0]], [(4, 5)]),
    ('BroadcastSized', lambda x: F.broadcast_to(x[:, None], (len(x), 3, 2)),
     [(2,)]),
    ('Stack', lambda x, y: F.stack((x, y), axis=1), [(3,), (3,)]),
    ('SelectItem', lambda x, y: F.select_item(x, F.argmax(y, axis=1)),
     [(3,), (3,)]),
]


@pytest.mark.parametrize('case', DYNAMIC_CASES, ids=lambda case: case[0])
def test_dynamic_batch(rng, case):
    op, fn, shapes = case
    calls = [tuple(chainer.Variable(a) for a in make_calls(
        rng, [(n,) + s for s in shapes], numpy.float32, n=1)[0])
        for n in (4, 1, 3)]
    check_onnx(fn, calls, op, dynamic_batch=True)
