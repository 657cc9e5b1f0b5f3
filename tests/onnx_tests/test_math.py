"""Math ops exported to ONNX and run in onnxruntime, over the cases of
the forward op tests."""

import chainer
import numpy
import pytest

from chainerjit import onnx_export
from tests.onnx_tests.test_activation import check_onnx
from tests.onnx_tests.test_activation import check_shape_sets
from tests.ops_tests import test_math as cases
from tests.ops_tests.common import cases_of
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import make_calls


pytest.importorskip('onnxruntime')
F = cases.F


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', cases.ELEMENTWISE_CASES,
                         ids=cases._case_id)
def test_elementwise(rng, case, dtype):
    op, fn, shape_sets = case[:3]
    check_shape_sets(rng, fn, shape_sets, dtype, op,
                     case[3] if len(case) > 3 else None, rtol=1e-5,
                     atol=1e-5)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('op,reduce,axis,keepdims', cases.REDUCTION_CASES)
def test_reduction(rng, op, reduce, axis, keepdims, dtype):
    kwargs = {'keepdims': keepdims} if keepdims else {}
    shape_sets = cases.REDUCTION_SHAPES
    if isinstance(axis, tuple):
        shape_sets = shape_sets[1:]
    if op != 'Sum' and axis in (None, (0, 2)):
        shape_sets = shape_sets[:-1]  # reduces over the empty axis
    check_shape_sets(rng, lambda x: reduce(x, axis=axis, **kwargs),
                     shape_sets, dtype, op)


def test_sum_of_scalar(rng):
    check_shape_sets(rng, lambda x: F.sum(x), [[()]], numpy.float32, 'Sum')


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('op,arg', [('ArgMax', F.argmax),
                                    ('ArgMin', F.argmin)])
@pytest.mark.parametrize('axis', [None, 0, -1])
def test_arg_max_min(rng, op, arg, axis, dtype):
    check_shape_sets(rng, lambda x: arg(x, axis=axis),
                     [[(3, 4)], [(2, 3, 5)]], dtype, op)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('a_shape,b_shape,transa,transb',
                         cases.MATMUL_CASES)
def test_matmul(rng, a_shape, b_shape, transa, transb, dtype):
    check_shape_sets(
        rng, lambda a, b: F.matmul(a, b, transa=transa, transb=transb),
        [[a_shape, b_shape]], dtype, 'MatMul')


def test_matmul_mixed_dtypes(rng):
    calls = [(a, b.astype(numpy.float64)) for a, b in make_calls(
        rng, [(3, 4), (4, 2)], numpy.float32, n=2)]
    check_onnx(lambda a, b: F.matmul(a, b), calls, 'MatMul')


@pytest.mark.filterwarnings('ignore::DeprecationWarning')
@pytest.mark.parametrize('a_shape,b_shape,transa,transb', [
    ((2, 3, 4), (2, 4, 5), False, False),
    ((2, 4, 3), (2, 5, 4), True, True),
    ((2, 3), (2, 3), True, False),
    ((2, 3), (2, 4), False, True),
])
def test_batch_matmul(rng, a_shape, b_shape, transa, transb):
    check_shape_sets(
        rng, lambda a, b: F.batch_matmul(a, b, transa=transa,
                                         transb=transb),
        [[a_shape, b_shape]], numpy.float32, 'BatchMatMul')


@pytest.mark.filterwarnings('ignore::DeprecationWarning')
def test_batch_matmul_with_a_dynamic_batch(rng):
    calls = [make_calls(rng, [(n, 3, 4), (n, 4, 5)], numpy.float32, n=1)[0]
             for n in (2, 1, 5)]
    check_onnx(lambda a, b: F.batch_matmul(a, b), calls, 'BatchMatMul',
               dynamic_batch=True)


NUMPY_ARITHMETIC = {
    'add_scalar': lambda x: numpy.add(x, 1.5),
    'chain': lambda x: numpy.tanh(x) * 2 + numpy.exp(-x) / 3 -
    numpy.maximum(x, 0.1) + numpy.sqrt(numpy.abs(x)),
    'reciprocal_log': lambda x: numpy.reciprocal(numpy.abs(x) + 1) +
    numpy.log(numpy.abs(x) + 0.5),
    'promoted_to_float64': lambda x: numpy.multiply(
        x, numpy.full(x.shape, 0.5, numpy.float64)),
    'sin_cos_minimum': lambda x: numpy.minimum(numpy.sin(x), numpy.cos(x)),
}


@pytest.mark.parametrize('name', sorted(NUMPY_ARITHMETIC))
def test_numpy_arithmetic_on_arrays(rng, name):
    numpy_fn = NUMPY_ARITHMETIC[name]

    def fn(x):
        return F.relu(numpy_fn(x))
    check_onnx(fn, make_calls(rng, [(3, 4)], numpy.float32, n=3), 'ReLU')


def assert_no_converter(fn, calls, op):
    """A lowered op without an ONNX form fails to export, naming
    itself."""
    args = tuple(chainer.Variable(a) for a in calls[0])
    with pytest.raises(onnx_export.ExportError, match=op):
        onnx_export.export_onnx(fn, args)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape,to', cases_of(cases.test_sum_to,
                                              'shape,to'))
def test_sum_to(rng, shape, to, dtype):
    check_shape_sets(rng, lambda x: F.sum_to(x, to), [[shape]], dtype,
                     'SumTo')


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape,axis,keepdims', cases_of(
    cases.test_prod, 'shape,axis,keepdims'))
def test_prod(rng, shape, axis, keepdims, dtype):
    check_shape_sets(
        rng, lambda x: F.prod(x, axis=axis, keepdims=keepdims), [[shape]],
        dtype, 'Prod')


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('a_shape,b_shape,axes', cases.TENSORDOT_CASES)
def test_tensordot(rng, a_shape, b_shape, axes, dtype):
    check_shape_sets(
        rng, lambda a, b: F.tensordot(a, b, axes=axes),
        [[a_shape, b_shape]], dtype, 'TensorDot', atol=1e-5)


def test_tensordot_mixed_dtypes(rng):
    calls = [(a, b.astype(numpy.float64)) for a, b in make_calls(
        rng, [(3, 4), (4, 2)], numpy.float32, n=2)]
    check_onnx(lambda a, b: F.tensordot(a, b, axes=1), calls, 'TensorDot')


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('fn,shape', [
    (F.det, (4, 4)), (F.batch_det, (3, 4, 4)), (F.batch_det, (2, 1, 1))])
def test_det(rng, fn, shape, dtype):
    check_onnx(fn, [tuple(chainer.Variable(a) for a in args) for args in
                    cases.invertible_calls(rng, shape, dtype, n=2)],
               'BatchDet', rtol=1e-4)


@pytest.mark.parametrize('fn,op,shapes', [
    (F.cumprod, 'Cumprod', [(3, 4)]),
    (cases.apply_cumprodsum(0), 'Cumprodsum', [(3, 4), (4, 4)])])
def test_without_converter(rng, fn, op, shapes):
    assert_no_converter(fn, make_calls(rng, shapes, numpy.float32), op)


@pytest.mark.parametrize('fn,op,shape', [(F.inv, 'Inv', (3, 3)),
                                         (F.batch_inv, 'BatchInv', (2, 3, 3))])
def test_inv_without_converter(rng, fn, op, shape):
    assert_no_converter(
        fn, cases.invertible_calls(rng, shape, numpy.float32), op)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('transform', [F.fft, F.ifft])
@pytest.mark.parametrize('shape', cases_of(cases.test_fft, 'shape'))
def test_fft(rng, transform, shape, dtype):
    check_shape_sets(rng, lambda real, imag: transform((real, imag)),
                     [[shape, shape]], dtype, 'FFT', atol=1e-5)
