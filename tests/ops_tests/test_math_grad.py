"""Gradients of the lowered math ops against eager Chainer's, over the
cases of the forward tests in test_math.py."""

import warnings

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.ops_tests import test_math as forward
from tests.ops_tests.common import cases_of
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import calls_of
from tests.ops_tests.common import make_calls


# Chainer's Arctan2 and Fmod do not sum their gradients to the input
# shapes, so eager backprop fails where they broadcast: only the cases
# without broadcasting are compared (test_grad_fails_as_eager checks the
# others).
NOT_BROADCASTING = ('Arctan2', 'Fmod')


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', forward.ELEMENTWISE_CASES,
                         ids=forward._case_id)
def test_elementwise_grad(rng, case, dtype):
    op, fn, shape_sets = case[:3]
    options = case[3] if len(case) > 3 else {}
    if op in NOT_BROADCASTING:
        shape_sets = [s for s in shape_sets if len(set(s)) == 1]
    testing.assert_jit_grads_match_eager(
        fn, calls_of(rng, shape_sets, dtype, **options), lowered=[op])


def assert_grad_fails_as_eager(fn, shapes):
    """Where eager backprop raises, so does the jitted function's (the op
    has no gradient rule for that case, so the call runs eagerly)."""
    jfn = chainerjit.jit(fn)
    errors = []
    for f in (fn, jfn):
        ys = f(*(chainer.Variable(numpy.full(s, 0.5)) for s in shapes))
        ys = ys if isinstance(ys, tuple) else (ys,)
        with pytest.raises(ValueError) as info:
            chainer.backward(ys, [
                chainer.Variable(numpy.ones_like(y.array)) for y in ys])
        errors.append(str(info.value))
    assert errors[0] == errors[1]


@pytest.mark.parametrize('op', [F.arctan2, F.fmod])
def test_grad_fails_as_eager(op):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        assert_grad_fails_as_eager(op, [(3, 4), (4,)])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('op,reduce,axis,keepdims', forward.REDUCTION_CASES)
def test_reduction_grad(rng, op, reduce, axis, keepdims, dtype):
    kwargs = {'keepdims': keepdims} if keepdims else {}
    shape_sets = forward.REDUCTION_SHAPES
    if isinstance(axis, tuple):
        shape_sets = shape_sets[1:]
    if op != 'Sum' and axis in (None, (0, 2)):
        shape_sets = shape_sets[:-1]  # reduces over the empty axis
    testing.assert_jit_grads_match_eager(
        lambda x: reduce(x, axis=axis, **kwargs),
        calls_of(rng, shape_sets, dtype), lowered=[op])


@pytest.mark.parametrize('op,reduce', [('Max', F.max),
                                       ('Min', F.min)])
@pytest.mark.parametrize('axis', [None, 1])
def test_max_min_ties_grad(rng, op, reduce, axis):
    # Every element equal to the extremum gets the gradient.
    calls = [(rng.randint(-2, 2, size=(3, 4)).astype(numpy.float64),)
             for _ in range(3)]
    testing.assert_jit_grads_match_eager(
        lambda x: reduce(x, axis=axis), calls, lowered=[op])


def test_sum_of_scalar_grad(rng):
    testing.assert_jit_grads_match_eager(
        F.sum, make_calls(rng, [()], numpy.float32),
        lowered=['Sum'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('a_shape,b_shape,transa,transb',
                         forward.MATMUL_CASES)
def test_matmul_grad(rng, a_shape, b_shape, transa, transb, dtype):
    testing.assert_jit_grads_match_eager(
        lambda a, b: F.matmul(a, b, transa=transa, transb=transb),
        make_calls(rng, [a_shape, b_shape], dtype), lowered=['MatMul'])


def test_matmul_mixed_dtypes_grad(rng):
    calls = [(a, b.astype(numpy.float64)) for a, b in make_calls(
        rng, [(3, 4), (4, 2)], numpy.float32)]
    testing.assert_jit_grads_match_eager(
        lambda a, b: F.matmul(a, b), calls, lowered=['MatMul'])


@pytest.mark.filterwarnings('ignore::DeprecationWarning')
@pytest.mark.parametrize('a_shape,b_shape,transa,transb', cases_of(
    forward.test_batch_matmul, 'a_shape,b_shape,transa,transb'))
def test_batch_matmul_grad(rng, a_shape, b_shape, transa, transb):
    testing.assert_jit_grads_match_eager(
        lambda a, b: F.batch_matmul(
            a, b, transa=transa, transb=transb),
        make_calls(rng, [a_shape, b_shape], numpy.float32),
        lowered=['BatchMatMul'])


def several_inputs(cases):
    """The cases of ops with several inputs."""
    return [case for case in cases
            if case[1].__code__.co_argcount > 1 or case[0] == 'MultiAdd']


def _with_constant(fn, index, constant):
    """``fn`` with argument ``index`` fixed."""
    def partial(*args):
        args = list(args)
        args.insert(index, constant)
        return fn(*args)
    return partial


def assert_partial_grads_match_eager(rng, case, dtype):
    """Each input of a case's op in turn is a constant (no gradient
    wanted), the others arguments."""
    op, fn, shape_sets = case[:3]
    options = case[3] if len(case) > 3 else {}
    if op in NOT_BROADCASTING:
        shape_sets = [s for s in shape_sets if len(set(s)) == 1]
    shapes = shape_sets[min(1, len(shape_sets) - 1)]  # broadcasts if any
    for index in range(len(shapes)):
        constant, = make_calls(rng, [shapes[index]], dtype, n=1, **options)
        others = shapes[:index] + shapes[index + 1:]
        partial = _with_constant(fn, index, constant[0])
        testing.assert_jit_grads_match_eager(
            partial, calls_of(rng, [others], dtype, **options),
            lowered=[op])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', several_inputs(forward.ELEMENTWISE_CASES),
                         ids=forward._case_id)
def test_partial_grad(rng, case, dtype):
    assert_partial_grads_match_eager(rng, case, dtype)


@pytest.mark.parametrize('transa', [False, True])
@pytest.mark.parametrize('index', [0, 1])
def test_matmul_partial_grad(rng, transa, index):
    a, b = make_calls(rng, [(4, 3) if transa else (3, 4), (4, 5)],
                      numpy.float64, n=1)[0]
    if index == 0:
        fn, calls = (lambda b: F.matmul(a, b, transa=transa),
                     make_calls(rng, [(4, 5)], numpy.float64))
    else:
        fn, calls = (lambda a: F.matmul(a, b, transa=transa),
                     make_calls(rng, [a.shape], numpy.float64))
    testing.assert_jit_grads_match_eager(fn, calls, lowered=['MatMul'])


@pytest.mark.parametrize('fn', [lambda x, y: F.identity(x, y)[1] * x,
                                lambda x, y: x * F.identity(x, y)[1]])
def test_identity_unused_output_grad(rng, fn):
    testing.assert_jit_grads_match_eager(
        fn, calls_of(rng, [[(3, 4), (3, 4)]], numpy.float64),
        lowered=['Identity'])


@pytest.mark.parametrize('op,fn', [('Maximum', F.maximum),
                                   ('Minimum', F.minimum)])
def test_maximum_minimum_ties_grad(rng, op, fn):
    # Ties send the gradient to the first input, as in Chainer.
    calls = [tuple(rng.randint(-1, 2, size=s).astype(numpy.float64)
                   for s in [(3, 4), (4,)]) for _ in range(3)]
    testing.assert_jit_grads_match_eager(fn, calls, lowered=[op])


def tolerances(dtype):
    """rtol and atol for a dtype."""
    if dtype == numpy.float64:
        return {'rtol': 1e-5, 'atol': 1e-6}
    return {'rtol': 1e-4, 'atol': 1e-5}


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape,to', cases_of(forward.test_sum_to,
                                              'shape,to'))
def test_sum_to_grad(rng, shape, to, dtype):
    testing.assert_jit_grads_match_eager(
        lambda x: F.sum_to(x, to), make_calls(rng, [shape], dtype),
        lowered=['SumTo'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape,axis,keepdims', cases_of(
    forward.test_prod, 'shape,axis,keepdims'))
def test_prod_grad(rng, shape, axis, keepdims, dtype):
    testing.assert_jit_grads_match_eager(
        lambda x: F.prod(x, axis=axis, keepdims=keepdims),
        make_calls(rng, [shape], dtype), lowered=['Prod'],
        **tolerances(dtype))


def test_prod_with_zeros_grad(rng):
    # Products of the others, not the product divided by each element.
    calls = [(rng.randint(-1, 2, size=(4, 3)).astype(numpy.float64),)
             for _ in range(3)]
    testing.assert_jit_grads_match_eager(
        lambda x: F.prod(x, axis=0), calls, lowered=['Prod'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape,axis', cases_of(forward.test_cumprod,
                                                'shape,axis'))
def test_cumprod_grad(rng, shape, axis, dtype):
    testing.assert_jit_grads_match_eager(
        lambda x: F.cumprod(x, axis=axis), make_calls(rng, [shape], dtype),
        lowered=['Cumprod'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('xmul_shape,xadd_shape,axis', cases_of(
    forward.test_cumprodsum, 'xmul_shape,xadd_shape,axis'))
def test_cumprodsum_grad(rng, xmul_shape, xadd_shape, axis, dtype):
    testing.assert_jit_grads_match_eager(
        forward.apply_cumprodsum(axis),
        make_calls(rng, [xmul_shape, xadd_shape], dtype),
        lowered=['Cumprodsum'], **tolerances(dtype))


@pytest.mark.parametrize('index', [0, 1])
def test_cumprodsum_partial_grad(rng, index):
    constant, = make_calls(rng, [(3, 2), (4, 2)][index:index + 1],
                           numpy.float64, n=1)[0]
    fn = _with_constant(forward.apply_cumprodsum(0), index, constant)
    testing.assert_jit_grads_match_eager(
        fn, make_calls(rng, [(4, 2) if index == 0 else (3, 2)],
                       numpy.float64), lowered=['Cumprodsum'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('a_shape,b_shape,axes', forward.TENSORDOT_CASES)
def test_tensordot_grad(rng, a_shape, b_shape, axes, dtype):
    testing.assert_jit_grads_match_eager(
        lambda a, b: F.tensordot(a, b, axes=axes),
        make_calls(rng, [a_shape, b_shape], dtype), lowered=['TensorDot'],
        **tolerances(dtype))


def test_tensordot_mixed_dtypes_grad(rng):
    calls = [(a, b.astype(numpy.float64)) for a, b in make_calls(
        rng, [(3, 4), (4, 2)], numpy.float32)]
    testing.assert_jit_grads_match_eager(
        lambda a, b: F.tensordot(a, b, axes=1), calls,
        lowered=['TensorDot'], **tolerances(numpy.float32))


@pytest.mark.parametrize('index', [0, 1])
def test_tensordot_partial_grad(rng, index):
    shapes = [(2, 3, 4), (4, 3, 5)]
    constant, = make_calls(rng, shapes[index:index + 1], numpy.float64,
                           n=1)[0]
    fn = _with_constant(lambda a, b: F.tensordot(
        a, b, axes=((1, 2), (1, 0))), index, constant)
    testing.assert_jit_grads_match_eager(
        fn, make_calls(rng, shapes[1 - index:2 - index], numpy.float64),
        lowered=['TensorDot'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('fn,op,shape', forward.LINALG_CASES)
def test_linalg_grad(rng, fn, op, shape, dtype):
    testing.assert_jit_grads_match_eager(
        fn, forward.invertible_calls(rng, shape, dtype), lowered=[op],
        **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('transform', [F.fft, F.ifft])
@pytest.mark.parametrize('shape', cases_of(forward.test_fft, 'shape'))
def test_fft_grad(rng, transform, shape, dtype):
    testing.assert_jit_grads_match_eager(
        lambda real, imag: transform((real, imag)),
        make_calls(rng, [shape, shape], dtype), lowered=['FFT'],
        **tolerances(dtype))


@pytest.mark.parametrize('part', [0, 1])
def test_fft_of_one_part_grad(rng, part):
    # The other output gets no gradient: FFT's backward takes zeros.
    testing.assert_jit_grads_match_eager(
        lambda real, imag: F.fft((real, imag))[part] * 2,
        make_calls(rng, [(3, 8), (3, 8)], numpy.float64), lowered=['FFT'])
