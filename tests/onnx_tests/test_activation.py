"""Activations exported to ONNX and run in onnxruntime, over the cases of
the forward op tests."""

import chainer
import numpy
import pytest

from chainerjit import onnx_export
from chainerjit import testing
from tests.ops_tests import test_activation as cases
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import make_calls


pytest.importorskip('onnxruntime')


def check_onnx(fn, calls, op, rtol=1e-5, atol=1e-6, **kwargs):
    """``assert_onnx_matches_eager``, skipped where onnxruntime has no
    kernel for float64 (the model itself is valid ONNX)."""
    try:
        testing.assert_onnx_matches_eager(
            fn, calls, rtol, atol, lowered=[op] if op else [], **kwargs)
    except Exception as e:
        dtypes = {a.dtype for args in calls for a in args}
        if (type(e).__name__ == 'NotImplemented'
                and numpy.dtype(numpy.float64) in dtypes):
            pytest.skip('onnxruntime has no float64 kernel: %s' % e)
        raise


#: Lowered ops without an ONNX converter: exporting one is an error
#: naming it (onnxruntime backends run them on the VM between sessions).
WITHOUT_CONVERTER = frozenset((
    'Erfc', 'Ndtr', 'LogNdtr', 'Erfcx', 'ErfInv', 'ErfcInv', 'Ndtri',
    'LGamma', 'DiGamma', 'Diagonal', 'Im2Col', 'Cumprod', 'Cumprodsum',
    'Inv', 'BatchInv'))


def check_shape_sets(rng, fn, shape_sets, dtype, op, options=None,
                     **kwargs):
    """One export per set of argument shapes, run on two calls; ``op``
    must be in the first one's IR (a later one may record none: a
    broadcast to the same shape). The arguments are Variables, so that
    operators on them are Chainer's (NumPy's on arrays are recorded as
    NumPy calls, which have no ONNX converters). An op of
    :data:`WITHOUT_CONVERTER` must fail to export, naming itself."""
    for i, shapes in enumerate(shape_sets):
        calls = [tuple(chainer.Variable(a) for a in args) for args in
                 make_calls(rng, shapes, dtype, n=2, **(options or {}))]
        if op in WITHOUT_CONVERTER:
            with pytest.raises(onnx_export.ExportError, match=op):
                onnx_export.export_onnx(fn, calls[0])
            return
        check_onnx(fn, calls, op if i == 0 else None, **kwargs)


@pytest.mark.parametrize('dtype', DTYPES)
def test_relu(rng, dtype):
    check_shape_sets(rng, cases.F.relu, [[s] for s in cases.SHAPES],
                     dtype, 'ReLU')


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', cases.CASES, ids=lambda case: case[0])
def test_activation(rng, case, dtype):
    op, fn, shape_sets = case[:3]
    check_shape_sets(rng, fn, shape_sets, dtype, op,
                     case[3] if len(case) > 3 else None)
