import chainer
import chainer.functions as F
import numpy
import pytest

from chainerjit import testing
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import calls_of
from tests.ops_tests.common import make_calls


def _var(x):
    return chainer.as_variable(x)


UNARY_SHAPES = [[(3, 4)], [(0, 4)], [(2, 3, 5)], [()]]
BINARY_SHAPES = [[(3, 4), (3, 4)], [(3, 4), (4,)], [(2, 3, 1), (3, 5)],
                 [(0, 4), (4,)], [(), ()]]
POSITIVE = {'low': 0.5, 'high': 2.0}
UNIT = {'low': -0.99, 'high': 0.99}

ELEMENTWISE_CASES = [
    # lowered op, function, argument shape sets[, make_calls options]
    ('Neg', lambda x: -_var(x), UNARY_SHAPES),
    ('Absolute', lambda x: F.absolute(x), UNARY_SHAPES),
    ('Exp', lambda x: F.exp(x), UNARY_SHAPES),
    ('Log', lambda x: F.log(x), UNARY_SHAPES, POSITIVE),
    ('Log2', lambda x: F.log2(x), UNARY_SHAPES, POSITIVE),
    ('Log10', lambda x: F.log10(x), UNARY_SHAPES, POSITIVE),
    ('Expm1', lambda x: F.expm1(x), UNARY_SHAPES),
    ('Log1p', lambda x: F.log1p(x), UNARY_SHAPES, UNIT),
    ('Sqrt', lambda x: F.sqrt(x), UNARY_SHAPES, POSITIVE),
    ('Sqrt', lambda x: F.rsqrt(x), UNARY_SHAPES, POSITIVE),
    ('Square', lambda x: F.square(x), UNARY_SHAPES),
    ('Sin', lambda x: F.sin(x), UNARY_SHAPES),
    ('Cos', lambda x: F.cos(x), UNARY_SHAPES),
    ('Tan', lambda x: F.tan(x), UNARY_SHAPES, {'low': -1.2, 'high': 1.2}),
    ('Arcsin', lambda x: F.arcsin(x), UNARY_SHAPES, UNIT),
    ('Arccos', lambda x: F.arccos(x), UNARY_SHAPES, UNIT),
    ('Arctan', lambda x: F.arctan(x), UNARY_SHAPES),
    ('Sinh', lambda x: F.sinh(x), UNARY_SHAPES),
    ('Cosh', lambda x: F.cosh(x), UNARY_SHAPES),
    ('Arctanh', lambda x: F.arctanh(x), UNARY_SHAPES, UNIT),
    ('Erf', lambda x: F.erf(x), UNARY_SHAPES),
    ('Erfc', lambda x: F.erfc(x), UNARY_SHAPES),
    ('Ndtr', lambda x: F.ndtr(x), UNARY_SHAPES),
    ('LogNdtr', lambda x: F.log_ndtr(x), UNARY_SHAPES),
    ('Erfcx', lambda x: F.erfcx(x), UNARY_SHAPES),
    ('ErfInv', lambda x: F.erfinv(x), UNARY_SHAPES, UNIT),
    ('ErfcInv', lambda x: F.erfcinv(x), UNARY_SHAPES,
     {'low': 0.1, 'high': 1.9}),
    ('Ndtri', lambda x: F.ndtri(x), UNARY_SHAPES,
     {'low': 0.05, 'high': 0.95}),
    ('LGamma', lambda x: F.lgamma(x), UNARY_SHAPES, POSITIVE),
    ('DiGamma', lambda x: F.digamma(x), UNARY_SHAPES, POSITIVE),
    ('Add', lambda x, y: x + _var(y), BINARY_SHAPES),
    ('Sub', lambda x, y: _var(x) - y, BINARY_SHAPES),
    ('Mul', lambda x, y: _var(x) * y, BINARY_SHAPES),
    ('Div', lambda x, y: _var(x) / y, BINARY_SHAPES, POSITIVE),
    ('PowVarVar', lambda x, y: _var(x) ** y, BINARY_SHAPES, POSITIVE),
    ('Maximum', lambda x, y: F.maximum(x, y), BINARY_SHAPES),
    ('Minimum', lambda x, y: F.minimum(x, y), BINARY_SHAPES),
    ('Arctan2', lambda x, y: F.arctan2(x, y), BINARY_SHAPES),
    ('Fmod', lambda x, y: F.fmod(x, y), BINARY_SHAPES, POSITIVE),
    ('AddConstant', lambda x: _var(x) + 2.5, UNARY_SHAPES),
    ('AddConstant', lambda x: _var(x) - 1.5, UNARY_SHAPES),
    ('SubFromConstant', lambda x: 2.5 - _var(x), UNARY_SHAPES),
    ('MulConstant', lambda x: _var(x) * 3, UNARY_SHAPES),
    ('MulConstant', lambda x: _var(x) / 4.0, UNARY_SHAPES),
    ('DivFromConstant', lambda x: 3.0 / _var(x), UNARY_SHAPES, POSITIVE),
    ('PowVarConst', lambda x: _var(x) ** 2, UNARY_SHAPES),
    ('PowVarConst', lambda x: _var(x) ** 0.5, UNARY_SHAPES, POSITIVE),
    ('PowVarConst', lambda x: _var(x) ** -1.3, UNARY_SHAPES, POSITIVE),
    ('PowConstVar', lambda x: 2.0 ** _var(x), UNARY_SHAPES),
    ('MultiAdd', lambda x, y, z: F.add(x, y, z),
     [[(3, 4)] * 3, [(3, 4), (4,), (3, 4)], [(4,), (3, 4), (4,)],
      [(3, 1), (4,), (2, 1, 1)], [(0, 4), (4,), (0, 4)], [()] * 3]),
    ('MultiAdd', lambda *xs: F.add(*xs), [[(2, 3)] * 5]),
    ('SquaredError', lambda x, y: F.squared_difference(x, y),
     [[(3, 4)] * 2, [(0, 4)] * 2, [()] * 2]),
    ('AbsoluteError', lambda x, y: F.absolute_error(x, y),
     [[(3, 4)] * 2, [(0, 4)] * 2, [()] * 2]),
    ('BatchL2NormSquared', lambda x: F.batch_l2_norm_squared(x),
     [[(3, 4)], [(2, 3, 5)], [(1, 6)]]),
    ('Cumsum', lambda x: F.cumsum(x, axis=1), [[(3, 4)], [(2, 3, 5)]]),
    ('Cumsum', lambda x: F.cumsum(x, axis=-1), [[(2, 3, 5)], [(0, 4)]]),
    ('Cumsum', lambda x: F.cumsum(x, axis=None), [[(3, 4)], [(5,)]]),
    ('LinearInterpolate', lambda p, x, y: F.linear_interpolate(p, x, y),
     [[(3, 4)] * 3, [(0, 4)] * 3, [()] * 3]),
    ('Identity', lambda x, y: F.identity(x, y), [[(3, 4), (2,)]]),
    ('Identity', lambda x: F.identity(x), UNARY_SHAPES),
    ('Clip', lambda x: F.clip(x, -0.5, 0.5), UNARY_SHAPES),
    ('Clip', lambda x: F.clip(x, None, 0.3), UNARY_SHAPES),
    ('Clip', lambda x: F.clip(x, -0.2, None), UNARY_SHAPES),
]


def _case_id(case):
    return case[0]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', ELEMENTWISE_CASES, ids=_case_id)
def test_elementwise(rng, case, dtype):
    op, fn, shape_sets = case[:3]
    options = case[3] if len(case) > 3 else {}
    testing.assert_jit_matches_eager(
        fn, calls_of(rng, shape_sets, dtype, **options),
        expect_entries=len(shape_sets), lowered=[op])


REDUCTION_SHAPES = [[(3, 4)], [(2, 3, 5)], [(0, 3, 5)]]
REDUCTIONS = [
    ('Sum', F.sum), ('Mean', F.mean), ('Max', F.max), ('Min', F.min),
    ('LogSumExp', F.logsumexp),
]
AXES = [(None, False), (1, False), (-1, True), ((1, 2), False),
        ((0, 2), True)]
REDUCTION_CASES = [
    (op, reduce, axis, keepdims)
    for op, reduce in REDUCTIONS for axis, keepdims in AXES
    if not (op == 'LogSumExp' and keepdims)]  # logsumexp has no keepdims


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('op,reduce,axis,keepdims', REDUCTION_CASES)
def test_reduction(rng, op, reduce, axis, keepdims, dtype):
    kwargs = {'keepdims': keepdims} if keepdims else {}
    shape_sets = REDUCTION_SHAPES
    if isinstance(axis, tuple):
        shape_sets = shape_sets[1:]
    if op != 'Sum' and axis in (None, (0, 2)):
        shape_sets = shape_sets[:-1]  # reduces over the empty axis
    testing.assert_jit_matches_eager(
        lambda x: reduce(x, axis=axis, **kwargs),
        calls_of(rng, shape_sets, dtype),
        expect_entries=len(shape_sets), lowered=[op])


def test_sum_of_scalar(rng):
    testing.assert_jit_matches_eager(
        lambda x: F.sum(x), make_calls(rng, [()], numpy.float32),
        expect_entries=1, lowered=['Sum'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('op,arg', [('ArgMax', F.argmax),
                                    ('ArgMin', F.argmin)])
@pytest.mark.parametrize('axis', [None, 0, -1])
def test_arg_max_min(rng, op, arg, axis, dtype):
    testing.assert_jit_matches_eager(
        lambda x: arg(x, axis=axis),
        calls_of(rng, [[(3, 4)], [(2, 3, 5)]], dtype),
        expect_entries=2, lowered=[op])


MATMUL_CASES = [
    # a shape, b shape, transa, transb
    ((3, 4), (4, 5), False, False),
    ((4, 3), (4, 5), True, False),
    ((3, 4), (5, 4), False, True),
    ((4, 3), (5, 4), True, True),
    ((0, 4), (4, 5), False, False),
    ((2, 3, 4), (2, 4, 5), False, False),
    ((2, 4, 3), (4, 5), True, False),
    ((3, 1, 3, 4), (2, 5, 4), False, True),
    ((4,), (4, 5), False, False),
    ((4, 3), (4,), True, False),
    ((2, 3, 4), (4,), False, False),
    ((4,), (4,), False, False),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('a_shape,b_shape,transa,transb', MATMUL_CASES)
def test_matmul(rng, a_shape, b_shape, transa, transb, dtype):
    testing.assert_jit_matches_eager(
        lambda a, b: F.matmul(a, b, transa=transa, transb=transb),
        make_calls(rng, [a_shape, b_shape], dtype),
        expect_entries=1, lowered=['MatMul'])


def test_matmul_mixed_dtypes(rng):
    calls = [(a, b.astype(numpy.float64)) for a, b in make_calls(
        rng, [(3, 4), (4, 2)], numpy.float32)]
    testing.assert_jit_matches_eager(
        lambda a, b: F.matmul(a, b), calls, expect_entries=1,
        lowered=['MatMul'])


@pytest.mark.filterwarnings('ignore::DeprecationWarning')
@pytest.mark.parametrize('a_shape,b_shape,transa,transb', [
    ((2, 3, 4), (2, 4, 5), False, False),
    ((2, 4, 3), (2, 5, 4), True, True),
    ((2, 3), (2, 3), True, False),
    ((2, 3), (2, 4), False, True),
])
def test_batch_matmul(rng, a_shape, b_shape, transa, transb):
    testing.assert_jit_matches_eager(
        lambda a, b: F.batch_matmul(a, b, transa=transa, transb=transb),
        make_calls(rng, [a_shape, b_shape], numpy.float32),
        expect_entries=1, lowered=['BatchMatMul'])


def _orders_and_points(rng, shape, dtype, n=3):
    """Calls ``(n, x)``: integer orders 0 to 3 and points in [0.5, 3)."""
    return [(rng.randint(0, 4, size=shape).astype(numpy.int32),
             rng.uniform(0.5, 3, size=shape).astype(dtype))
            for _ in range(n)]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(3, 4), (0, 2), ()])
def test_polygamma(rng, dtype, shape):
    calls = _orders_and_points(rng, shape, dtype)
    fn = lambda n, x: F.polygamma(n, x)  # noqa: E731
    testing.assert_jit_matches_eager(fn, calls, lowered=['PolyGamma'])
    testing.assert_jit_grads_match_eager(fn, calls, lowered=['PolyGamma'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(3, 4), (0, 2), ()])
@pytest.mark.parametrize('x', [2.0, 3.5])
def test_zeta(rng, dtype, shape, x):
    calls = [(rng.uniform(0.5, 3, size=shape).astype(dtype),)
             for _ in range(3)]
    fn = lambda q: F.zeta(x, q)  # noqa: E731
    testing.assert_jit_matches_eager(fn, calls, lowered=['Zeta'])
    testing.assert_jit_grads_match_eager(fn, calls, lowered=['Zeta'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape,to', [
    ((3, 4), (1, 4)), ((3, 4), (3, 1)), ((3, 4), (1, 1)), ((3, 4), ()),
    ((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)), ((2, 1, 4), (1, 1, 4)),
    ((0, 4), (4,)), ((0, 4), (1, 4))])
def test_sum_to(rng, shape, to, dtype):
    testing.assert_jit_matches_eager(
        lambda x: F.sum_to(x, to), make_calls(rng, [shape], dtype),
        expect_entries=1, lowered=['SumTo'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape,axis,keepdims', [
    ((3, 4), None, False), ((3, 4), 1, False), ((2, 3, 5), -1, True),
    ((2, 3, 5), (0, 2), False), ((2, 3, 5), (2, 0), True),
    ((2, 3, 5), (-2, 0, 2), False), ((0, 3), 1, False), ((0, 3), 0, True),
    ((4,), 0, False), ((), None, False), ((), None, True)])
def test_prod(rng, shape, axis, keepdims, dtype):
    testing.assert_jit_matches_eager(
        lambda x: F.prod(x, axis=axis, keepdims=keepdims),
        make_calls(rng, [shape], dtype), expect_entries=1,
        lowered=['Prod'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape,axis', [
    ((3, 4), 1), ((2, 3, 5), -1), ((2, 3, 5), 0), ((3, 4), None),
    ((5,), None), ((5,), -1), ((3, 1), 1), ((1, 3), 0), ((0, 4), 1),
    ((0, 4), 0), ((), None)])
def test_cumprod(rng, shape, axis, dtype):
    testing.assert_jit_matches_eager(
        lambda x: F.cumprod(x, axis=axis), make_calls(rng, [shape], dtype),
        expect_entries=1, lowered=['Cumprod'])


def apply_cumprodsum(axis):
    """The node Cumprod's backward applies (``y[i] = y[i - 1] *
    xmul[i - 1] + xadd[i]`` along ``axis``), applied directly."""
    from chainer.functions.math import cumprod

    def fn(xmul, xadd):
        return cumprod.Cumprodsum(axis).apply((xmul, xadd))[0]
    return fn


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('xmul_shape,xadd_shape,axis', [
    ((3,), (4,), 0), ((3, 2), (4, 2), 0), ((2, 2, 3), (2, 3, 3), 1),
    ((2, 4), (2, 5), 1), ((0, 3), (1, 3), 0), ((2, 0), (3, 0), 0)])
def test_cumprodsum(rng, xmul_shape, xadd_shape, axis, dtype):
    testing.assert_jit_matches_eager(
        apply_cumprodsum(axis),
        make_calls(rng, [xmul_shape, xadd_shape], dtype),
        expect_entries=1, lowered=['Cumprodsum'])


TENSORDOT_CASES = [
    # a shape, b shape, axes
    ((3, 4, 5), (4, 5, 2), 2),
    ((3, 4), (4, 5), 1),
    ((3, 4), (2, 5), 0),
    ((2, 3, 4), (2, 3, 4), 3),
    ((2, 3, 4), (4, 3, 5), ((1, 2), (1, 0))),
    ((2, 3, 4), (5, 2), ((0,), (1,))),
    ((3, 4), (5, 3), (0, 1)),
    ((4,), (4,), 1),
    ((0, 4), (4, 5), 1),
    ((3, 0), (0, 5), 1),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('a_shape,b_shape,axes', TENSORDOT_CASES)
def test_tensordot(rng, a_shape, b_shape, axes, dtype):
    testing.assert_jit_matches_eager(
        lambda a, b: F.tensordot(a, b, axes=axes),
        make_calls(rng, [a_shape, b_shape], dtype), expect_entries=1,
        lowered=['TensorDot'])


def test_tensordot_mixed_dtypes(rng):
    calls = [(a, b.astype(numpy.float64)) for a, b in make_calls(
        rng, [(3, 4), (4, 2)], numpy.float32)]
    testing.assert_jit_matches_eager(
        lambda a, b: F.tensordot(a, b, axes=1), calls, expect_entries=1,
        lowered=['TensorDot'])


def invertible_calls(rng, shape, dtype, n=3):
    """``n`` calls of one array of square matrices, each far from
    singular (standard normal values plus three times the identity)."""
    eye = 3 * numpy.eye(shape[-1]) if shape[-1] else 0
    return [(numpy.asarray(rng.standard_normal(shape) + eye, dtype),)
            for _ in range(n)]


# function, op, shape
LINALG_CASES = [
    (F.inv, 'Inv', (4, 4)), (F.inv, 'Inv', (1, 1)),
    (F.batch_inv, 'BatchInv', (3, 4, 4)),
    (F.batch_inv, 'BatchInv', (2, 1, 1)),
    (F.batch_inv, 'BatchInv', (0, 3, 3)),
    (F.det, 'BatchDet', (4, 4)), (F.det, 'BatchDet', (1, 1)),
    (F.batch_det, 'BatchDet', (3, 4, 4)),
    (F.batch_det, 'BatchDet', (2, 1, 1)),
    (F.batch_det, 'BatchDet', (0, 3, 3)),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('fn,op,shape', LINALG_CASES)
def test_linalg(rng, fn, op, shape, dtype):
    testing.assert_jit_matches_eager(
        fn, invertible_calls(rng, shape, dtype), expect_entries=1,
        lowered=[op])


@pytest.mark.parametrize('fn,op,shape', [(F.inv, 'Inv', (2, 2)),
                                         (F.batch_inv, 'BatchInv', (1, 2, 2))])
def test_inv_of_singular_matrices_fails_as_eager(rng, fn, op, shape):
    jfn = testing.assert_jit_matches_eager(
        fn, invertible_calls(rng, shape, numpy.float32), lowered=[op])
    singular = numpy.zeros(shape, numpy.float32)
    for f in (fn, jfn):
        with pytest.raises(ValueError, match='singular'):
            f(singular)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('transform', [F.fft, F.ifft])
@pytest.mark.parametrize('shape', [(3, 8), (2, 3, 5), (6,), (0, 4)])
def test_fft(rng, transform, shape, dtype):
    testing.assert_jit_matches_eager(
        lambda real, imag: transform((real, imag)),
        make_calls(rng, [shape, shape], dtype), expect_entries=1,
        lowered=['FFT'])
