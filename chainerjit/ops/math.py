"""Lowerings of chainer.functions.math.

Element-wise ops are described by tables mapping a FunctionNode class to
the operator or the name of the array-module function its ``forward``
applies, and to the formula of its ``backward``; reductions, clipping and
matrix products have their own lowerings.

Gradient formulas keep Python constants typed as the arrays they meet
(``dtype.type(c)``), as Chainer's ``*_Constant`` nodes do: NumPy promotes a
0-d float32 array times a Python float to float64.
"""

import collections.abc
import functools
import math
import operator

from chainer.backends import cuda
from chainer.functions.loss import absolute_error
from chainer.functions.loss import squared_error
from chainer.functions.math import arctanh
from chainer.functions.math import average
from chainer.functions.math import basic_math
from chainer.functions.math import batch_l2_norm_squared
from chainer.functions.math import clip
from chainer.functions.math import cumprod
from chainer.functions.math import cumsum
from chainer.functions.math import det
from chainer.functions.math import digamma
from chainer.functions.math import erf
from chainer.functions.math import erfc
from chainer.functions.math import erfcinv
from chainer.functions.math import erfcx
from chainer.functions.math import erfinv
from chainer.functions.math import exponential
from chainer.functions.math import exponential_m1
from chainer.functions.math import fft
from chainer.functions.math import fmod
from chainer.functions.math import hyperbolic
from chainer.functions.math import identity
from chainer.functions.math import inv
from chainer.functions.math import lgamma
from chainer.functions.math import linear_interpolate
from chainer.functions.math import log_ndtr
from chainer.functions.math import logarithm_1p
from chainer.functions.math import logsumexp
from chainer.functions.math import matmul
from chainer.functions.math import maximum
from chainer.functions.math import minimum
from chainer.functions.math import minmax
from chainer.functions.math import ndtr
from chainer.functions.math import ndtri
from chainer.functions.math import polygamma
from chainer.functions.math import prod
from chainer.functions.math import sqrt
from chainer.functions.math import square
from chainer.functions.math import sum as sum_
from chainer.functions.math import tensordot
from chainer.functions.math import trigonometric
from chainer.functions.math import zeta
from chainer import utils
import numpy

from chainerjit.ops import Follow
from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import lowering
from chainerjit.ops import onnx_op
from chainerjit.ops import rows_broadcast
from chainerjit.ops import rows_reduced_over
from chainerjit.ops import rows_through_reduction
from chainerjit.ops import rows_elementwise
from chainerjit.ops import rows_in_place
from chainerjit.ops import same_rows
from chainerjit.ops import takes_square
from chainerjit.ops import takes_widest


def grad_rule(ctx, fn, inputs=(), outputs=(), onnx=None):
    """A :class:`GradRule` of ``fn`` (and its ONNX form ``onnx``); where an
    input is 0-d (NumPy then returns scalars), its results are forced to
    arrays."""
    if () not in ctx.in_shapes:
        return GradRule(fn, inputs, outputs, onnx)
    force = utils.force_array

    def forced(xs, ys, gys, wanted):
        return tuple(None if g is None else force(g)
                     for g in fn(xs, ys, gys, wanted))
    return GradRule(forced, inputs, outputs, onnx)


def onnx_sum_to(b, name, shape, to):
    """``name``, of ``shape``, summed to the broadcastable shape ``to`` as
    ``chainer.functions.sum_to`` sums (ONNX ``ReduceSum``)."""
    lead = len(shape) - len(to)
    axes = list(range(lead)) + [lead + i for i, n in enumerate(to)
                                if n == 1 and shape[lead + i] != 1]
    if not axes:
        return name
    summed = b.op('ReduceSum', [name, b.int64s(axes)], keepdims=1)[0]
    if lead:
        summed = b.op('Reshape', [summed, b.int64s(list(to))])[0]
    return summed


def onnx_scalar(b, value, dtype):
    """An ONNX initializer holding ``value`` as a 0-d array of
    ``dtype``."""
    return b.constant(numpy.asarray(value, dtype))


def onnx_dtype(dtype):
    """The ONNX element type of a NumPy dtype."""
    import onnx.helper
    return onnx.helper.np_dtype_to_tensor_dtype(numpy.dtype(dtype))


def onnx_zeros(b, shape, dtype):
    """Zeros of ``shape`` and ``dtype`` (ONNX ``ConstantOfShape``, not an
    initializer of that size)."""
    import onnx.numpy_helper
    return b.single('ConstantOfShape', b.shape(tuple(shape)),
                    value=onnx.numpy_helper.from_array(
                        numpy.zeros(1, dtype)))


def onnx_scatter_add(b, shape, indices, updates, dtype):
    """Zeros of ``shape`` and ``dtype`` with ``updates`` added at the
    int64 ``indices`` in turn, as ``numpy.add.at`` (ONNX ``ScatterND``,
    reduction ``'add'``; float16 adds in float32, which onnxruntime's CPU
    kernel needs)."""
    wide = numpy.float32 if numpy.dtype(dtype) == numpy.float16 else dtype
    summed = b.single('ScatterND', onnx_zeros(b, shape, wide), indices,
                      b.cast(updates, dtype, wide), reduction='add')
    return b.cast(summed, wide, dtype)


def onnx_swap_last(b, x, ndim):
    """``x`` with its last two axes swapped (ONNX ``Transpose``)."""
    perm = list(range(ndim))
    perm[-2:] = perm[-1], perm[-2]
    return b.op('Transpose', [x], perm=perm)[0]


def _onnx_then(op_type, then, value):
    """An ONNX converter: ``then(op_type(x), value)`` (``then`` an ONNX
    binary op, ``value`` a constant of the input's dtype)."""
    def convert(b, ins, outs):
        c = onnx_scalar(b, value, b.in_dtypes[0])
        b.op(then, b.op(op_type, ins) + [c], outs)
    return convert


def _onnx_before(then, value, op_type):
    """An ONNX converter: ``op_type(then(x, value))``."""
    def convert(b, ins, outs):
        c = onnx_scalar(b, value, b.in_dtypes[0])
        b.op(op_type, b.op(then, [ins[0], c]), outs)
    return convert


def _onnx_arctan2(b, ins, outs):
    """``atan(x0 / x1)``, moved by pi (towards the sign of ``x0``) where
    ``x1 < 0``. Signed zeros aside, this is ``arctan2`` (but ``x0 = x1 =
    0`` gives NaN, NumPy 0)."""
    x0, x1 = ins
    dtype = b.out_dtypes[0]
    zero = onnx_scalar(b, 0, dtype)
    atan, = b.op('Atan', b.op('Div', [x0, x1]))
    shift = b.op('Where', b.op('Less', [x0, zero]) + [
        onnx_scalar(b, -math.pi, dtype), onnx_scalar(b, math.pi, dtype)])
    b.op('Where', b.op('Less', [x1, zero]) + b.op(
        'Add', [atan] + shift) + [atan], outs)


# f(x): an operator, or the name of an array-module function; and the ONNX
# op type (or converter) computing it.
_UNARY = {
    basic_math.Neg: (operator.neg, 'Neg'),
    basic_math.Absolute: (abs, 'Abs'),
    exponential.Exp: ('exp', 'Exp'),
    exponential.Log: ('log', 'Log'),
    exponential.Log2: ('log2', _onnx_then('Log', 'Mul', 1 / math.log(2))),
    exponential.Log10: (
        'log10', _onnx_then('Log', 'Mul', 1 / math.log(10))),
    exponential_m1.Expm1: ('expm1', _onnx_then('Exp', 'Sub', 1)),
    logarithm_1p.Log1p: ('log1p', _onnx_before('Add', 1, 'Log')),
    sqrt.Sqrt: ('sqrt', 'Sqrt'),
    square.Square: ('square', lambda b, ins, outs: b.op(
        'Mul', ins * 2, outs)),
    trigonometric.Sin: ('sin', 'Sin'),
    trigonometric.Cos: ('cos', 'Cos'),
    trigonometric.Tan: ('tan', 'Tan'),
    trigonometric.Arcsin: ('arcsin', 'Asin'),
    trigonometric.Arccos: ('arccos', 'Acos'),
    trigonometric.Arctan: ('arctan', 'Atan'),
    hyperbolic.Sinh: ('sinh', 'Sinh'),
    hyperbolic.Cosh: ('cosh', 'Cosh'),
    arctanh.Arctanh: ('arctanh', 'Atanh'),
}

# f(x0, x1), broadcasting, and its ONNX op type (or converter).
_BINARY = {
    basic_math.Add: (operator.add, 'Add'),
    basic_math.Sub: (operator.sub, 'Sub'),
    basic_math.Mul: (operator.mul, 'Mul'),
    basic_math.Div: (operator.truediv, 'Div'),
    basic_math.PowVarVar: (operator.pow, 'Pow'),
    maximum.Maximum: ('maximum', 'Max'),
    minimum.Minimum: ('minimum', 'Min'),
    trigonometric.Arctan2: ('arctan2', _onnx_arctan2),
    fmod.Fmod: ('fmod', onnx_op('Mod', fmod=1)),
}

# f(x, value), ``value`` cast to the dtype of ``x`` as Chainer does; the
# ONNX op type and whether ``value`` is its first operand.
_WITH_CONSTANT = {
    basic_math.AddConstant: (lambda x, value: x + value, 'Add', False),
    basic_math.SubFromConstant: (lambda x, value: value - x, 'Sub', True),
    basic_math.MulConstant: (lambda x, value: value * x, 'Mul', False),
    basic_math.DivFromConstant: (lambda x, value: value / x, 'Div', True),
    basic_math.PowVarConst: (lambda x, value: x ** value, 'Pow', False),
    basic_math.PowConstVar: (lambda x, value: value ** x, 'Pow', True),
}


#: The ops with a constant whose int constant a rolled loop may compute
#: from its counter (``h * (t + 1)``: ``frontend.rolling``).
COUNTED_CONSTANTS = frozenset(_WITH_CONSTANT)


# The _WITH_CONSTANT ops whose ``fn`` is one ufunc call, as ``into``
# writes it (not the powers: NumPy's ``x ** 2`` takes a faster path of
# its own).
_WITH_CONSTANT_UFUNC = {
    basic_math.AddConstant: 'add', basic_math.SubFromConstant: 'subtract',
    basic_math.MulConstant: 'multiply',
    basic_math.DivFromConstant: 'divide'}


def _all_alike(ctx):
    """Are all inputs and outputs NumPy arrays of one dtype (so that a
    ufunc's ``out=`` gives the same bits)?"""
    return ctx.xp is numpy and len(set(ctx.in_dtypes + ctx.out_dtypes)) == 1


def _onnx(spec):
    """A converter from an ONNX op type or a converter."""
    return onnx_op(spec) if isinstance(spec, str) else spec


def _resolve(fn, xp):
    return getattr(xp, fn) if isinstance(fn, str) else fn


def _attr_value(value):
    """A constant as shown in printed IR."""
    return value.item() if isinstance(value, numpy.generic) else value


def _c(like, value):
    """``value`` as a scalar of ``like``'s dtype."""
    return like.dtype.type(value)


# The backward of each _UNARY op as ``gx = f(xp, v, gy)``, where ``v`` is
# what the node retains: its input ``'x'``, its output ``'y'`` or nothing.
_UNARY_GRAD = {
    basic_math.Neg: (None, lambda xp, _, gy: -gy),
    basic_math.Absolute: ('x', lambda xp, x, gy: xp.sign(x) * gy),
    exponential.Exp: ('y', lambda xp, y, gy: y * gy),
    exponential.Log: ('x', lambda xp, x, gy: gy / x),
    exponential.Log2: (
        'x', lambda xp, x, gy: gy / x * _c(x, 1 / math.log(2))),
    exponential.Log10: (
        'x', lambda xp, x, gy: gy / x * _c(x, 1 / math.log(10))),
    exponential_m1.Expm1: ('y', lambda xp, y, gy: (y + _c(y, 1)) * gy),
    logarithm_1p.Log1p: ('x', lambda xp, x, gy: gy / (x + _c(x, 1))),
    sqrt.Sqrt: ('y', lambda xp, y, gy: gy / (y * _c(y, 2))),
    sqrt.RsqrtGPU: (
        'y', lambda xp, y, gy: _c(y, -0.5) * (gy * y ** _c(y, 3))),
    square.Square: ('x', lambda xp, x, gy: gy * _c(x, 2) * x),
    trigonometric.Sin: ('x', lambda xp, x, gy: xp.cos(x) * gy),
    trigonometric.Cos: ('x', lambda xp, x, gy: -xp.sin(x) * gy),
    trigonometric.Tan: ('x', lambda xp, x, gy: gy / xp.square(xp.cos(x))),
    trigonometric.Arcsin: ('x', lambda xp, x, gy: (
        xp.reciprocal(xp.sqrt(_c(x, 1) - xp.square(x))) * gy)),
    trigonometric.Arccos: ('x', lambda xp, x, gy: (
        -xp.reciprocal(xp.sqrt(_c(x, 1) - xp.square(x))) * gy)),
    trigonometric.Arctan: ('x', lambda xp, x, gy: (
        xp.reciprocal(xp.square(x) + _c(x, 1)) * gy)),
    hyperbolic.Sinh: ('x', lambda xp, x, gy: xp.cosh(x) * gy),
    hyperbolic.Cosh: ('x', lambda xp, x, gy: xp.sinh(x) * gy),
    arctanh.Arctanh: (
        'x', lambda xp, x, gy: _c(x, 1.) / (_c(x, 1) - x ** _c(x, 2)) * gy),
}


def _unary_grad(cls, ctx):
    uses, formula = _UNARY_GRAD[cls]
    xp = ctx.xp

    def grad(xs, ys, gys, wanted):
        v = xs[0] if uses == 'x' else ys[0]
        return formula(xp, v, gys[0]),
    return grad_rule(ctx, grad, inputs=(0,) if uses == 'x' else (),
                     outputs=(0,) if uses == 'y' else ())


@functools.lru_cache(maxsize=None)
def _special(name):
    """``scipy.special``'s function ``name`` as Chainer's CPU forward
    calls it (the result cast to the input's dtype); made once a name, as
    the gradients call it on every run."""
    from scipy import special
    fn = getattr(special, name)
    return lambda x: utils.force_array(fn(x), x.dtype)


def _polygamma_1(x):
    from scipy import special
    return utils.force_array(special.polygamma(numpy.array(1), x), x.dtype)


# Functions of SciPy's that Chainer calls on the CPU: the ``scipy.special``
# name, the ONNX op type (or None), and the backward as ``gx = f(xp, v,
# gy)`` in Chainer's own order of operations, ``v`` the input (``'x'``)
# or the output (``'y'``).
_SPECIAL = {
    erf.Erf: ('erf', 'Erf', 'x', lambda xp, x, gy: _c(
        x, 2 / numpy.pi ** 0.5) * xp.exp(-(x ** _c(x, 2))) * gy),
    erfc.Erfc: ('erfc', None, 'x', lambda xp, x, gy: _c(
        x, -2 / numpy.pi ** 0.5) * xp.exp(-(x ** _c(x, 2))) * gy),
    ndtr.Ndtr: ('ndtr', None, 'x', lambda xp, x, gy: _c(
        x, (2 * numpy.pi) ** -0.5) * xp.exp(
            _c(x, -0.5) * x ** _c(x, 2)) * gy),
    log_ndtr.LogNdtr: ('log_ndtr', None, 'x', lambda xp, x, gy: _c(
        x, (2 / numpy.pi) ** 0.5) / _special('erfcx')(
            _c(x, 1. / 2 ** 0.5) * -x) * gy),
    erfcx.Erfcx: ('erfcx', None, 'x', lambda xp, x, gy: _c(x, 2) * (
        x * _special('erfcx')(x) + _c(x, -numpy.pi ** -0.5)) * gy),
    erfinv.ErfInv: ('erfinv', None, 'y', lambda xp, y, gy: _c(
        y, erfinv.BACKWORDC) * xp.exp(y ** _c(y, 2)) * gy),
    erfcinv.ErfcInv: ('erfcinv', None, 'y', lambda xp, y, gy: _c(
        y, -erfcinv.BACKWORDC) * xp.exp(y ** _c(y, 2)) * gy),
    ndtri.Ndtri: ('ndtri', None, 'y', lambda xp, y, gy: _c(
        y, (2 * math.pi) ** 0.5) * xp.exp(_c(y, 0.5) * y ** _c(y, 2)) * gy),
    lgamma.LGamma: ('gammaln', None, 'x', lambda xp, x, gy: _special(
        'digamma')(x) * gy),
    digamma.DiGamma: ('digamma', None, 'x', lambda xp, x, gy: _polygamma_1(
        x) * gy),
}


@lowering(*_SPECIAL)
@rows_elementwise
def lower_special(node, ctx):
    """A function of ``scipy.special`` and its gradient, on the CPU where
    SciPy is installed (Chainer's CPU forward calls the same function;
    without SciPy, it runs as Chainer's own code)."""
    if not _scipy_on_cpu(ctx):
        return None
    name, onnx, uses, formula = _SPECIAL[type(node)]

    def grad(xs, ys, gys, wanted):
        return formula(numpy, xs[0] if uses == 'x' else ys[0], gys[0]),
    return Kernel(_special(name), grad=grad_rule(
        ctx, grad, inputs=(0,) if uses == 'x' else (),
        outputs=(0,) if uses == 'y' else (),
        onnx=_erf_grad_to_onnx if isinstance(node, erf.Erf) else None),
        onnx=_onnx(onnx))


def _erf_grad_to_onnx(b, xs, ys, gys, wanted):
    """``2 / sqrt(pi) * exp(-x ** 2) * gy``."""
    x, = xs
    c = onnx_scalar(b, 2 / numpy.pi ** 0.5, b.in_dtypes[0])
    e = b.single('Exp', b.single('Neg', b.single('Mul', x, x)))
    return b.single('Mul', b.single('Mul', c, e), gys[0]),


def _scipy_on_cpu(ctx):
    """Whether a ``scipy.special`` function lowers: on the CPU, with SciPy
    installed (else it runs as Chainer's own code)."""
    if ctx.xp is not numpy:
        return False
    try:
        import scipy.special  # noqa: F401
    except ImportError:
        return False
    return True


@lowering(polygamma.PolyGamma)
def lower_polygamma(node, ctx):
    """``polygamma(n, x)``; the gradient with respect to ``x`` is
    ``polygamma(n + 1, x) * gy``, as Chainer's (none for ``n``)."""
    if not _scipy_on_cpu(ctx):
        return None
    from scipy import special

    def fn(n, x):
        return utils.force_array(special.polygamma(n, x), x.dtype)

    def grad(xs, ys, gys, wanted):
        n, x = xs
        return None, fn(utils.force_array(n + 1), x) * gys[0]
    return Kernel(fn, grad=grad_rule(ctx, grad, inputs=(0, 1)))


@lowering(zeta.Zeta)
def lower_zeta(node, ctx):
    """Hurwitz's ``zeta(x, q)`` for a constant ``x``; the gradient
    ``gy * -x * zeta(x + 1, q)``, as Chainer's."""
    if not _scipy_on_cpu(ctx):
        return None
    from scipy import special
    x = node._x

    def fn(q):
        return utils.force_array(special.zeta(x, q), q.dtype)

    def grad(xs, ys, gys, wanted):
        q, = xs
        return _c(q, -x) * gys[0] * utils.force_array(
            special.zeta(x + 1, q), q.dtype),
    return Kernel(fn, attrs={'x': x},
                  grad=grad_rule(ctx, grad, inputs=(0,)))


@lowering(*_UNARY)
@rows_elementwise
def lower_unary(node, ctx):
    fn, onnx = _UNARY[type(node)]
    fn = _resolve(fn, ctx.xp)
    dtype = ctx.out_dtypes[0]
    return Kernel(lambda x: utils.force_array(fn(x), dtype),
                  grad=_unary_grad(type(node), ctx), onnx=_onnx(onnx))


@lowering(sqrt.RsqrtGPU)
@rows_elementwise
def lower_rsqrt_gpu(node, ctx):
    # Recorded on GPU only (``F.rsqrt`` is ``1 / sqrt(x)`` on CPU).
    rsqrt = cuda.cupyx.rsqrt
    dtype = ctx.in_dtypes[0]
    return Kernel(lambda x: utils.force_array(rsqrt(x, dtype=dtype)),
                  grad=_unary_grad(sqrt.RsqrtGPU, ctx),
                  onnx=lambda b, ins, outs: b.op(
                      'Reciprocal', b.op('Sqrt', ins), outs))


# The backward of each _BINARY op before ``sum_to`` the input shapes:
# whether it reads the inputs and the output, and the formulas of ``gx0``
# and of ``gx1`` as ``f(xp, x0, x1, y, gy)``.
_BINARY_GRAD = {
    basic_math.Add: (False, False, lambda xp, x0, x1, y, gy: gy,
                     lambda xp, x0, x1, y, gy: gy),
    basic_math.Sub: (False, False, lambda xp, x0, x1, y, gy: gy,
                     lambda xp, x0, x1, y, gy: -gy),
    basic_math.Mul: (True, False, lambda xp, x0, x1, y, gy: gy * x1,
                     lambda xp, x0, x1, y, gy: gy * x0),
    basic_math.Div: (True, False, lambda xp, x0, x1, y, gy: gy / x1,
                     lambda xp, x0, x1, y, gy: -(gy / x1) * x0 / x1),
    basic_math.PowVarVar: (
        True, True,
        lambda xp, x0, x1, y, gy: x1 * (x0 ** (x1 - _c(x1, 1))) * gy,
        lambda xp, x0, x1, y, gy: xp.log(x0) * y * gy),
    maximum.Maximum: (
        True, False,
        lambda xp, x0, x1, y, gy: xp.where(x0 >= x1, gy, _c(gy, 0)),
        lambda xp, x0, x1, y, gy: xp.where(x0 >= x1, _c(gy, 0), gy)),
    minimum.Minimum: (True, False,
                      lambda xp, x0, x1, y, gy: gy * (x0 <= x1),
                      lambda xp, x0, x1, y, gy: gy * (x0 > x1)),
    # These two do not sum gradients to the input shapes: Chainer fails to
    # backprop through them when they broadcast (no rule then).
    trigonometric.Arctan2: (
        True, False,
        lambda xp, x0, x1, y, gy: x1 / (x0 ** 2 + x1 ** 2) * gy,
        lambda xp, x0, x1, y, gy: -x0 / (x0 ** 2 + x1 ** 2) * gy),
    fmod.Fmod: (True, False, lambda xp, x0, x1, y, gy: gy,
                lambda xp, x0, x1, y, gy: -xp.fix(x0 / x1) * gy),
}


# The ONNX forms of some _BINARY_GRAD entries: ``(gx0, gx1)`` of the
# names ``x0, x1, gy``, before they are summed to the input shapes.
_BINARY_GRAD_ONNX = {
    basic_math.Add: lambda b, x0, x1, gy: (gy, gy),
    basic_math.Sub: lambda b, x0, x1, gy: (gy, b.op('Neg', [gy])[0]),
    basic_math.Mul: lambda b, x0, x1, gy: (b.op('Mul', [gy, x1])[0],
                                           b.op('Mul', [gy, x0])[0]),
}


def _binary_grad_to_onnx(node, ctx):
    """The ONNX form of a _BINARY op's gradient, or ``None``."""
    formula = _BINARY_GRAD_ONNX.get(type(node))
    if formula is None or len(set(ctx.in_dtypes + ctx.out_dtypes)) != 1:
        return None
    out = ctx.out_shapes[0]

    def convert(b, xs, ys, gys, wanted):
        found = formula(b, xs[0], xs[1], gys[0])
        return tuple(onnx_sum_to(b, g, out, shape) if w else None
                     for g, shape, w in zip(found, ctx.in_shapes, wanted))
    return convert


def _sum_to_inputs(ctx, gx0_of, gx1_of, axes=((), ())):
    """The wanted gradients, summed to the input shapes as
    ``chainer.functions.sum_to`` does; to each input's shape with the
    output gradient's sizes on its ``axes`` (those whose rows vary)."""
    sum_to = utils.sum_to
    shape0, shape1 = ctx.in_shapes
    xp = ctx.xp

    def grad(xs, ys, gys, wanted):
        gy = gys[0]
        args = (xp, xs[0], xs[1], ys[0], gy)
        return (sum_to(gx0_of(*args), _with_rows(shape0, axes[0], gy))
                if wanted[0] else None,
                sum_to(gx1_of(*args), _with_rows(shape1, axes[1], gy))
                if wanted[1] else None)
    return grad


def _with_rows(shape, axes, gy):
    """``shape`` with the sizes of ``gy`` on ``axes`` (``shape``'s, its
    axes the last of ``gy``'s)."""
    shift = gy.ndim - len(shape)
    for axis in axes:
        shape = shape[:axis] + (gy.shape[axis + shift],) + shape[axis + 1:]
    return shape


def _broadcast_any_rows(kernel, ctx, grad_of, taken=None):
    """The :attr:`Kernel.lengths` rule of a broadcasting op
    (``rows_broadcast``) whose gradient at any lengths is
    ``grad_of(axes)``, which sums to the input shapes with the sizes of
    the output's gradient on each input's ``axes`` whose rows vary: those
    followed before (``taken``: a trip count's, then a batch's) and
    these."""
    rule = rows_broadcast(ctx.in_shapes, ctx.out_shapes[0])

    @takes_square
    @takes_widest
    def lengths(rows):
        following = rule(rows)
        if following is None or kernel.grad is None:
            return following
        axes = tuple(t + (() if r is None else r.axes)
                     for t, r in zip(taken or ((),) * len(rows), rows))
        return following._replace(kernel=kernel._replace(
            grad=grad_of(axes),
            lengths=_broadcast_any_rows(kernel, ctx, grad_of, axes)))
    return lengths


_UFUNC_OF_OPERATOR = {operator.add: 'add', operator.sub: 'subtract',
                      operator.mul: 'multiply', operator.truediv: 'divide'}


def _binary_into(fn, ctx):
    """``(inplace, into)``: ``fn(x0, x1)`` written into either operand,
    and into a given array (a NumPy ufunc, with all dtypes alike, gives the
    same bits with ``out=``); ``(None, None)`` otherwise."""
    fn = _resolve(_UFUNC_OF_OPERATOR.get(fn, fn), ctx.xp)
    if not isinstance(fn, numpy.ufunc) or len(set(
            ctx.in_dtypes + ctx.out_dtypes)) != 1:
        return None, None
    return ({0: lambda x0, x1: fn(x0, x1, out=x0),
             1: lambda x0, x1: fn(x0, x1, out=x1)},
            lambda out, x0, x1: fn(x0, x1, out=out))


@lowering(*_BINARY)
def lower_binary(node, ctx):
    fn, onnx = _BINARY[type(node)]
    fn = _resolve(fn, ctx.xp)
    dtype = ctx.out_dtypes[0]
    reads_x, reads_y = _BINARY_GRAD[type(node)][:2]
    reads = ((0, 1) if reads_x else (), (0,) if reads_y else ())

    def grad_of(axes):
        return grad_rule(ctx, _sum_to_inputs(
            ctx, *_BINARY_GRAD[type(node)][2:], axes=axes), *reads)
    grad = None
    if (type(node) not in (trigonometric.Arctan2, fmod.Fmod)
            or ctx.in_shapes[0] == ctx.in_shapes[1]):
        grad = grad_of(((), ()))._replace(
            onnx=_binary_grad_to_onnx(node, ctx))
    inplace, into = _binary_into(fn, ctx)
    kernel = Kernel(lambda x0, x1: utils.force_array(fn(x0, x1), dtype),
                    grad=grad, onnx=_onnx(onnx), fresh=True,
                    inplace=inplace, into=into)
    return kernel._replace(lengths=_broadcast_any_rows(kernel, ctx,
                                                       grad_of))


# The backward of each _WITH_CONSTANT op as ``gx = f(v, gy, c, t)``, as
# its gradient node computes it from the node's constant ``c`` (a Python
# number) and ``t``, the dtype of ``x`` (``t(c)`` is the constant as the
# node's forward casts it); and what it reads (as in _UNARY_GRAD).
_WITH_CONSTANT_GRAD = {
    basic_math.AddConstant: (None, lambda _, gy, c, t: gy),
    basic_math.SubFromConstant: (None, lambda _, gy, c, t: -gy),
    basic_math.MulConstant: (None, lambda _, gy, c, t: t(c) * gy),
    basic_math.DivFromConstant: (
        'x', lambda x, gy, c, t: -t(c) * gy / (x ** 2)),
    basic_math.PowVarConst: ('x', lambda x, gy, c, t: (
        t(c) * (x ** t(c - 1)) * gy)),
    basic_math.PowConstVar: ('y', lambda y, gy, c, t: (
        t(math.log(c)) * y * gy)),
}


def _constant_grad(node, ctx, number_dtype=None):
    """The gradient rule of an op with a constant: ``node.value``, or,
    given the ``number_dtype`` of a varying one, the number the kernel
    takes as its second input (see :func:`lower_varying_constant`)."""
    uses, formula = _WITH_CONSTANT_GRAD[type(node)]
    dtype = ctx.in_dtypes[0].type
    varying = number_dtype is not None

    def grad(xs, ys, gys, wanted):
        v = xs[0] if uses == 'x' else ys[0]
        c = xs[1] if varying else node.value
        gx = formula(v, gys[0], c, dtype)
        return (gx, None) if varying else (gx,)
    inputs = ((0,) if uses == 'x' else ()) + ((1,) if varying else ())
    return grad_rule(ctx, grad, inputs=inputs,
                     outputs=(0,) if uses == 'y' else (),
                     onnx=_with_constant_grad_to_onnx(node, ctx,
                                                      number_dtype))


@lowering(*_WITH_CONSTANT)
@rows_elementwise
def lower_with_constant(node, ctx):
    if not numpy.isscalar(node.value):
        return None
    fn, op_type, first = _WITH_CONSTANT[type(node)]
    value = ctx.in_dtypes[0].type(node.value)
    dtype = ctx.out_dtypes[0]

    def to_onnx(b, ins, outs):
        c = b.constant(numpy.asarray(value))
        b.op(op_type, [c] + ins if first else ins + [c], outs)
    into = _constant_into(_WITH_CONSTANT_UFUNC.get(type(node)), value,
                          first, ctx)
    return Kernel(lambda x: utils.force_array(fn(x, value), dtype),
                  {'value': _attr_value(node.value)},
                  grad=_constant_grad(node, ctx), onnx=to_onnx, fresh=True,
                  into=into)


def lower_varying_constant(node, ctx,
                           number_dtype=numpy.dtype(numpy.float64)):
    """The kernel of an op with a constant whose constant is a Python
    number that varies by call (``frontend.scalars``): it takes the
    number (a float, or an int: ``number_dtype`` in the program) as its
    second input, cast to the dtype of ``x`` on each call as the node's
    forward casts it."""
    fn, op_type, first = _WITH_CONSTANT[type(node)]
    dtype, cast = ctx.out_dtypes[0], ctx.in_dtypes[0].type

    def forward(x, number):
        return utils.force_array(fn(x, cast(number)), dtype)

    def to_onnx(b, ins, outs):
        c = b.cast(ins[1], number_dtype, ctx.in_dtypes[0])
        b.op(op_type, [c, ins[0]] if first else [ins[0], c], outs)
    return Kernel(forward, grad=_constant_grad(node, ctx, number_dtype),
                  onnx=to_onnx, fresh=True, lengths=rows_in_place)


# The ONNX forms of some _WITH_CONSTANT_GRAD entries: ``gx`` of the names
# ``gy`` and ``value`` (the constant typed as ``x``).
_WITH_CONSTANT_GRAD_ONNX = {
    basic_math.AddConstant: lambda b, gy, value: gy,
    basic_math.SubFromConstant: lambda b, gy, value: b.op('Neg', [gy])[0],
    basic_math.MulConstant: lambda b, gy, value: b.op('Mul',
                                                      [value, gy])[0],
}


def _pow_const_grad_to_onnx(ctx, value):
    """``value * x ** (value - 1) * gy``, as PowVarConst's backward."""
    dtype = ctx.in_dtypes[0]

    def convert(b, xs, ys, gys, wanted):
        power = b.op('Pow', [xs[0], b.constant(numpy.asarray(
            value - 1, dtype))])[0]
        scaled = b.op('Mul', [b.constant(numpy.asarray(value, dtype)),
                              power])[0]
        return b.op('Mul', [scaled, gys[0]])[0],
    return convert


def _with_constant_grad_to_onnx(node, ctx, number_dtype=None):
    varying = number_dtype is not None
    if isinstance(node, basic_math.PowVarConst) and not varying:
        return _pow_const_grad_to_onnx(ctx, node.value)
    formula = _WITH_CONSTANT_GRAD_ONNX.get(type(node))
    if formula is None:
        return None
    dtype = ctx.in_dtypes[0]

    def convert(b, xs, ys, gys, wanted):
        value = b.cast(xs[1], number_dtype, dtype) if varying else \
            b.constant(numpy.asarray(dtype.type(node.value)))
        gx = formula(b, gys[0], value)
        return (gx, None) if varying else (gx,)
    return convert


def _constant_into(ufunc, value, first, ctx):
    """The arena variant of an op with a constant, or ``None``."""
    if ufunc is None or not _all_alike(ctx):
        return None
    ufunc = _resolve(ufunc, ctx.xp)
    if first:
        return lambda out, x: ufunc(value, x, out=out)
    return lambda out, x: ufunc(x, value, out=out)


def _sum_to_each(ctx, axes=None):
    """The gradient of an addition: ``gy`` summed to each input's shape
    (with the sizes of ``gy`` on its ``axes`` whose rows vary)."""
    sum_to = utils.sum_to
    shapes = ctx.in_shapes
    axes = axes or ((),) * len(shapes)

    def grad(xs, ys, gys, wanted):
        gy, = gys
        return tuple(sum_to(gy, _with_rows(shape, a, gy)) if w else None
                     for shape, a, w in zip(shapes, axes, wanted))
    return grad_rule(ctx, grad)


@lowering(basic_math.MultiAdd)
def lower_multi_add(node, ctx):
    if len(ctx.in_shapes) == 1:
        return Kernel(lambda x: x, grad=_sum_to_each(ctx),
                      onnx=onnx_op('Identity'))
    # MultiAdd.forward adds a later input in place when it has the shape
    # of the running sum: the shapes tell which ones.
    shape = numpy.broadcast_shapes(*ctx.in_shapes[:2])
    in_place = []
    for s in ctx.in_shapes[2:]:
        in_place.append(s == shape)
        shape = numpy.broadcast_shapes(s, shape)

    def fn(x0, x1, *xs):
        y = x0 + x1
        for x, add_in_place in zip(xs, in_place):
            if add_in_place:
                y += x
            else:
                y = x + y
        return utils.force_array(y)
    kernel = Kernel(fn, {'n': len(ctx.in_shapes)}, grad=_sum_to_each(ctx),
                    onnx=onnx_op('Sum'))
    return kernel._replace(lengths=_broadcast_any_rows(
        kernel, ctx, lambda rows: _sum_to_each(ctx, rows)))


@lowering(squared_error.SquaredError)
def lower_squared_error(node, ctx):
    dtype = ctx.out_dtypes[0]

    def fn(x0, x1):
        diff = x0 - x1
        return utils.force_array(diff * diff, dtype)

    def grad(xs, ys, gys, wanted):
        x0, x1 = xs
        gy, = gys
        gx = gy * _c(gy, 2) * (x0 - x1)
        return gx if wanted[0] else None, -gx if wanted[1] else None

    def to_onnx(b, ins, outs):
        b.op('Mul', b.op('Sub', ins) * 2, outs)
    return Kernel(fn, grad=grad_rule(ctx, grad, inputs=(0, 1)),
                  onnx=to_onnx)


@lowering(absolute_error.AbsoluteError)
def lower_absolute_error(node, ctx):
    dtype, xp = ctx.out_dtypes[0], ctx.xp

    def fn(x0, x1):
        return utils.force_array(abs(x0 - x1), dtype)

    def grad(xs, ys, gys, wanted):
        x0, x1 = xs
        gx = gys[0] * xp.sign(x0 - x1)
        return gx if wanted[0] else None, -gx if wanted[1] else None

    def grad_to_onnx(b, xs, ys, gys, wanted):
        gx = b.single('Mul', gys[0], b.single('Sign', b.single('Sub', *xs)))
        return gx, b.single('Neg', gx)
    return Kernel(fn, grad=grad_rule(ctx, grad, inputs=(0, 1),
                                     onnx=grad_to_onnx),
                  onnx=lambda b, ins, outs: b.op(
                      'Abs', b.op('Sub', ins), outs))


@lowering(batch_l2_norm_squared.BatchL2NormSquared)
def lower_batch_l2_norm_squared(node, ctx):
    """The squared L2 norm of each row; its gradient as
    ``BatchL2NormSquaredGrad``'s CPU forward."""
    if ctx.xp is not numpy:  # CuPy's own reduction kernel sums otherwise
        return None
    ndim = len(ctx.in_shapes[0])

    def fn(x):
        x = x.reshape(len(x), -1)
        return (x * x).sum(axis=1)

    def grad(xs, ys, gys, wanted):
        x, = xs
        return 2 * x * gys[0].reshape((-1,) + (1,) * (ndim - 1)),

    def to_onnx(b, ins, outs):
        rows = b.single('Flatten', ins[0], axis=1)
        b.op('ReduceSum', [b.single('Mul', rows, rows), b.int64s([1])],
             outs, keepdims=0)

    def grad_to_onnx(b, xs, ys, gys, wanted):
        two = onnx_scalar(b, 2, b.in_dtypes[0])
        gy = b.single('Reshape', gys[0], b.int64s([-1] + [1] * (ndim - 1)))
        return b.single('Mul', b.single('Mul', two, xs[0]), gy),
    return Kernel(fn, grad=grad_rule(ctx, grad, inputs=(0,),
                                     onnx=grad_to_onnx), onnx=to_onnx,
                  lengths=rows_of_each_row)


@takes_widest  # (a padded block merged: one value a row, pads too)
def rows_of_each_row(rows):
    """A :attr:`Kernel.lengths` rule for a kernel giving one value per row
    of its inputs' first axis, which all have the same rows there (a norm
    of each row, a row's item picked), reading their number from the
    arrays."""
    found = same_rows(rows)
    if found is None or found.axis or found.also:
        return None
    return Follow((found,))


@lowering(cumsum.Cumsum)
def lower_cumsum(node, ctx):
    """``numpy.cumsum`` along ``axis`` (``None``: the flattened array);
    its gradient sums from the other end, as Chainer's (flip, cumsum,
    flip)."""
    if ctx.xp is not numpy:
        return None
    axis, shape = node.axis, ctx.in_shapes[0]
    along = 0 if axis is None else axis

    def fn(x):
        return numpy.cumsum(x, axis=axis)

    def grad(xs, ys, gys, wanted):
        gy = gys[0]
        gx = numpy.flip(numpy.cumsum(numpy.flip(gy, along), along), along)
        return gx.reshape(shape) if axis is None else gx,

    def to_onnx(b, ins, outs):
        x = ins[0] if axis is not None else b.single(
            'Reshape', ins[0], b.int64s([-1]))
        b.op('CumSum', [x, b.int64s(along)], outs)

    def grad_to_onnx(b, xs, ys, gys, wanted):
        gx = b.single('CumSum', gys[0], b.int64s(along), reverse=1)
        return (b.single('Reshape', gx, b.int64s(shape)) if axis is None
                else gx),
    return Kernel(fn, attrs={'axis': axis}, grad=grad_rule(
        ctx, grad, onnx=grad_to_onnx), onnx=to_onnx,
        lengths=_cumulative_rows(axis, shape))


def _cumulative_rows(axis, shape):
    """The ``Kernel.lengths`` rule of a cumulative sum or product along
    ``axis``: the rows of any axis stay where they are, but where it
    flattens an array of several axes (``axis=None``)."""
    return None if axis is None and len(shape) > 1 else rows_in_place


@lowering(linear_interpolate.LinearInterpolate)
def lower_linear_interpolate(node, ctx):
    one = ctx.in_dtypes[0].type(1)

    def grad(xs, ys, gys, wanted):
        # As LinearInterpolateGrad.forward_cpu.
        p, x, y = xs
        gz, = gys
        pg = p * gz if wanted[1] or wanted[2] else None
        return ((x - y) * gz if wanted[0] else None,
                pg if wanted[1] else None,
                gz - pg if wanted[2] else None)

    def to_onnx(b, ins, outs):
        p, x, y = ins
        q = b.op('Sub', [b.constant(numpy.asarray(one)), p])
        b.op('Add', b.op('Mul', [p, x]) + b.op('Mul', q + [y]), outs)
    # Inputs of one shape (as Chainer checks); no shape in the formulas.
    return Kernel(lambda p, x, y: utils.force_array(p * x + (one - p) * y),
                  grad=grad_rule(ctx, grad, inputs=(0, 1, 2)),
                  onnx=to_onnx, lengths=rows_broadcast(ctx.in_shapes,
                                                       ctx.out_shapes[0]))


@lowering(identity.Identity)
def lower_identity(node, ctx):
    def grad(xs, ys, gys, wanted):
        # As Identity.backward: the output gradients, None included.
        return tuple(g if w else None for g, w in zip(gys, wanted))

    def to_onnx(b, ins, outs):
        for x, y in zip(ins, outs):
            b.op('Identity', [x], [y])
    return Kernel(lambda *xs: xs, multi=True, grad=GradRule(grad),
                  onnx=to_onnx)


@lowering(clip.Clip)
@rows_elementwise
def lower_clip(node, ctx):
    xp_clip = ctx.xp.clip
    x_min, x_max = node.x_min, node.x_max
    dtype = ctx.out_dtypes[0]

    def grad(xs, ys, gys, wanted):
        # As ClipGrad.
        x, = xs
        cond = True
        if x_min is not None:
            cond = cond * (x_min <= x)
        if x_max is not None:
            cond = cond * (x <= x_max)
        return utils.force_array(gys[0] * cond, dtype),

    def to_onnx(b, ins, outs):
        bounds = ['' if v is None else onnx_scalar(b, v, dtype)
                  for v in (x_min, x_max)]
        b.op('Clip', ins + bounds, outs)
    return Kernel(
        lambda x: utils.force_array(xp_clip(x, x_min, x_max), dtype),
        {'x_min': _attr_value(x_min), 'x_max': _attr_value(x_max)},
        grad=grad_rule(ctx, grad, inputs=(0,)), onnx=to_onnx)


def _kept_shape(node, ctx):
    """The shape of a reduction's output with the reduced axes kept (as
    length 1), or ``None`` where the output already has it (as Sum's and
    Mean's backward decide)."""
    shape = ctx.in_shapes[0]
    if not shape or node.axis is None or node.keepdims:
        return None
    axes = [a % len(shape) for a in node.axis]
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _broadcast_back(node, ctx, multiplier=None):
    """Sum's and Mean's backward: ``gy`` (times ``multiplier``) reshaped
    to keep the reduced axes and broadcast to the input shape."""
    broadcast_to = ctx.xp.broadcast_to
    shape = ctx.in_shapes[0]
    kept = _kept_shape(node, ctx)

    def grad(xs, ys, gys, wanted):
        gy, = gys
        if multiplier is not None:
            gy = gy.dtype.type(multiplier) * gy
        if kept is not None:
            gy = gy.reshape(kept)
        return broadcast_to(gy, shape),

    def to_onnx(b, xs, ys, gys, wanted):
        gy = gys[0]
        if multiplier is not None:
            gy = b.op('Mul', [b.constant(numpy.asarray(
                multiplier, ctx.in_dtypes[0])), gy])[0]
        if kept is not None:
            gy = b.op('Reshape', [gy, b.int64s(list(kept))])[0]
        return b.op('Expand', [gy, b.int64s(list(shape))])[0],
    return grad_rule(ctx, grad, onnx=to_onnx)


@lowering(sum_.Sum)
def lower_sum(node, ctx):
    axis, keepdims = node.axis, node.keepdims

    def to_onnx(b, ins, outs):
        # opset 13+: the axes are an input.
        axes = [] if axis is None else [b.int64s(_onnx_axes(axis, ctx))]
        b.op('ReduceSum', ins + axes, outs, keepdims=int(keepdims))
    kernel = Kernel(lambda x: utils.force_array(x.sum(axis=axis,
                                                      keepdims=keepdims)),
                    {'axis': axis, 'keepdims': keepdims},
                    grad=_broadcast_back(node, ctx), onnx=to_onnx, fresh=True)
    shape = ctx.in_shapes[0]
    if not shape:
        return kernel
    return kernel._replace(lengths=_reduction_rows(kernel, node, ctx))


@lowering(sum_.SumTo)
def lower_sum_to(node, ctx):
    """``utils.sum_to`` the node's shape; the gradient broadcasts back to
    the input's shape, as SumTo's backward."""
    to, shape = node._shape, ctx.in_shapes[0]
    broadcast_to = ctx.xp.broadcast_to

    def grad(xs, ys, gys, wanted):
        return broadcast_to(gys[0], shape),

    def to_onnx(b, ins, outs):
        b.op('Identity', [onnx_sum_to(b, ins[0], shape, tuple(to))], outs)

    def grad_to_onnx(b, xs, ys, gys, wanted):
        return b.single('Expand', gys[0], b.int64s(list(shape))),
    return Kernel(lambda x: utils.sum_to(x, to), {'shape': tuple(to)},
                  grad=grad_rule(ctx, grad, onnx=grad_to_onnx),
                  onnx=to_onnx, fresh=shape != tuple(to))


def _reduction_rows(kernel, node, ctx, mean=False):
    """The ``Kernel.lengths`` rule of a sum (or a ``mean``), for rows on
    any axis: where that axis is reduced the output is fixed, else it
    keeps the rows (on its own axis). The kernel for other lengths
    broadcasts the gradient back to the input's shape, as Sum's and
    Mean's backward (divided by the number of entries averaged): the
    recorded shape with the rows of the output gradient, or, for a
    kernel already taking other lengths (a loop's and a batch's, or the
    rows summed), the input's shape at run time."""
    shape = ctx.in_shapes[0]
    axes = tuple(range(len(shape))) if node.axis is None else \
        _onnx_axes(node.axis, ctx)
    keepdims, broadcast_to = node.keepdims, ctx.xp.broadcast_to

    def back(gy, x_shape):
        if mean:
            gy = gy.dtype.type(1.0 / numpy.prod(
                [x_shape[a] for a in axes], dtype=int)) * gy
        if not keepdims:
            gy = gy.reshape(tuple(1 if i in axes else n
                                  for i, n in enumerate(x_shape)))
        return broadcast_to(gy, x_shape)

    def grad_at_input_shape(xs, ys, gys, wanted):
        return back(gys[0], xs[0].shape),

    def grad_with_rows(axis, out_axis):
        def grad(xs, ys, gys, wanted):
            x_shape = list(shape)
            x_shape[axis] = gys[0].shape[out_axis]
            return back(gys[0], tuple(x_shape)),
        return grad

    def rule(first):
        def lengths(rows):
            found = rows[0]
            if found is None or any(r is not None for r in rows[1:]):
                return None
            out = rows_through_reduction(found, axes, keepdims)
            if out is None:
                return Follow((None,), general)
            variant = general if not first or found.also else \
                kernel._replace(grad=grad_rule(
                    ctx, grad_with_rows(found.axis, out.axis)),
                    lengths=rule(False))
            return Follow((out,), variant)
        return takes_square(takes_widest(lengths))
    general = kernel._replace(
        grad=grad_rule(ctx, grad_at_input_shape, inputs=(0,)),
        lengths=rule(False))
    return rule(True)


@lowering(average.Mean)
def lower_mean(node, ctx):
    axis, keepdims = node.axis, node.keepdims
    shape = ctx.in_shapes[0]
    divider = 1
    for a in range(len(shape)) if axis is None else axis:
        divider *= shape[a]
    grad = None
    if divider:  # Mean.forward divides 1.0 by it
        grad = _broadcast_back(node, ctx, 1.0 / divider)
    kernel = Kernel(lambda x: utils.force_array(x.mean(axis=axis,
                                                       keepdims=keepdims)),
                    {'axis': axis, 'keepdims': keepdims}, grad=grad,
                    onnx=_onnx_reduce('ReduceMean', axis, keepdims, ctx))
    if grad is None or not shape:
        return kernel
    return kernel._replace(lengths=_reduction_rows(kernel, node, ctx,
                                                   True))


@lowering(prod.Prod)
def lower_prod(node, ctx):
    """``x.prod``; its gradient, as Prod's backward, the product of the
    elements before and of those after each along the reduced axes, times
    the output gradient."""
    xp = ctx.xp
    axis, keepdims = node.axis, node.keepdims
    shape = ctx.in_shapes[0]
    axes = tuple(range(len(shape))) if axis is None else tuple(
        a % len(shape) for a in axis)
    kept = tuple(1 if i in axes else n for i, n in enumerate(shape))

    def grad(xs, ys, gys, wanted):
        gy = gys[0] if keepdims else gys[0].reshape(kept)
        return _products_of_others(xp, xs[0], axes) * gy,

    def grad_to_onnx(b, xs, ys, gys, wanted):
        others = _onnx_products_of_others(b, xs[0], shape, axes,
                                          ctx.in_dtypes[0])
        return b.single('Mul', others, b.single(
            'Reshape', gys[0], b.int64s(list(kept)), allowzero=1)),
    return Kernel(lambda x: xp.asarray(x.prod(axis=axis, keepdims=keepdims)),
                  {'axis': axis, 'keepdims': keepdims},
                  grad=grad_rule(ctx, grad, inputs=(0,),
                                 onnx=grad_to_onnx),
                  onnx=_onnx_reduce('ReduceProd', axis, keepdims, ctx),
                  fresh=True)


def _products_of_others(xp, x, axes):
    """For each element of ``x``, the product of the others along
    ``axes``, step by step as Prod's backward: the reduced axes moved
    first and merged, exclusive cumulative products from either end
    multiplied."""
    kept_axes = tuple(a for a in range(x.ndim) if a not in axes)
    order = axes + kept_axes
    x = x.transpose(order)
    transposed_shape = x.shape
    n_reduced = 1
    for n in transposed_shape[:len(axes)]:
        n_reduced *= n
    x = x.reshape((n_reduced,) + transposed_shape[len(axes):])

    def shifted_cumprod(a):
        ones = xp.ones((1,) + a.shape[1:], a.dtype)
        return xp.cumprod(xp.concatenate([ones, a])[:-1], 0)
    others = utils.force_array(shifted_cumprod(x) * xp.flip(
        shifted_cumprod(xp.flip(x, 0)), 0))
    return others.reshape(transposed_shape).transpose(
        list(numpy.argsort(order)))


def _onnx_products_of_others(b, x, shape, axes, dtype):
    """:func:`_products_of_others` in ONNX, which has no cumulative
    product: the ``n`` reduced elements repeated ``n`` times, each copy
    with its own element set to one, multiplied (``ReduceProd``)."""
    kept_axes = tuple(a for a in range(len(shape)) if a not in axes)
    order = axes + kept_axes
    transposed = tuple(shape[a] for a in order)
    n = int(numpy.prod(transposed[:len(axes)], dtype=int))
    rows = b.single('Reshape', _onnx_transpose(b, x, order),
                    b.int64s([1, n] + list(transposed[len(axes):])),
                    allowzero=1)
    own = numpy.eye(n, dtype=bool).reshape(
        (n, n) + (1,) * len(kept_axes))
    others = b.single('ReduceProd', b.single(
        'Where', b.constant(own), onnx_scalar(b, 1, dtype), rows),
        axes=[1], keepdims=0)
    return _onnx_transpose(b, b.single(
        'Reshape', others, b.int64s(list(transposed)), allowzero=1),
        [int(a) for a in numpy.argsort(order)])


def _onnx_transpose(b, x, perm):
    """``x`` transposed by ``perm`` (itself where that moves nothing)."""
    if list(perm) == sorted(perm):
        return x
    return b.single('Transpose', x, perm=list(perm))


def _onnx_axes(axis, ctx):
    """Reduction axes, made non-negative (onnxruntime 1.31 reduces an
    empty array wrongly along a negative axis)."""
    return [a % len(ctx.in_shapes[0]) for a in axis]


def _onnx_reduce(op_type, axis, keepdims, ctx):
    """An ONNX reduction taking its axes as an attribute (until opset 18);
    ``axis=None`` reduces all."""
    attrs = {'keepdims': int(keepdims)}
    if axis is not None:
        attrs['axes'] = _onnx_axes(axis, ctx)
    return onnx_op(op_type, **attrs)


@lowering(minmax.Max, minmax.Min)
def lower_max_min(node, ctx):
    fn = ctx.xp.amax if isinstance(node, minmax.Max) else ctx.xp.amin
    axis, keepdims = node.axis, node.keepdims
    broadcast_to = ctx.xp.broadcast_to
    shape = ctx.in_shapes[0]
    axes = range(len(shape)) if axis is None else [
        a % len(shape) for a in axis]

    def grad(xs, ys, gys, wanted):
        # As SelectorBase.backward: every element equal to the extremum
        # (ties included) gets the gradient. (The shapes are the input's
        # at run time: a batch's or a loop's rows may change them.)
        x, = xs
        kept = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
        cond = x == ys[0].reshape(kept)
        return broadcast_to(gys[0].reshape(kept), x.shape) * cond,
    return Kernel(lambda x: fn(x, axis=axis, keepdims=keepdims),
                  {'axis': axis, 'keepdims': keepdims},
                  grad=grad_rule(ctx, grad, inputs=(0,), outputs=(0,)),
                  onnx=_onnx_reduce('ReduceMax' if isinstance(
                      node, minmax.Max) else 'ReduceMin', axis, keepdims,
                      ctx), lengths=rows_reduced_over(axes, keepdims))


@lowering(minmax.ArgMax, minmax.ArgMin)
def lower_arg_max_min(node, ctx):
    xp = ctx.xp
    fn = xp.argmax if isinstance(node, minmax.ArgMax) else xp.argmin
    axis = node.axis
    op_type = type(node).__name__

    def to_onnx(b, ins, outs):
        x = ins if axis is not None else b.op(
            'Reshape', ins + [b.int64s([-1])])
        b.op('Cast', b.op(op_type, x, axis=axis or 0, keepdims=0), outs,
             to=onnx_dtype(numpy.int32))
    ndim = len(ctx.in_shapes[0])
    return Kernel(lambda x: xp.asarray(fn(x, axis=axis).astype(numpy.int32)),
                  {'axis': axis}, onnx=to_onnx,
                  lengths=rows_reduced_over(
                      range(ndim) if axis is None else (axis % ndim,), False))


@lowering(logsumexp.LogSumExp)
def lower_logsumexp(node, ctx):
    """``F.logsumexp`` at any shape: its rows pass where they are not
    reduced (a batch's, a loop's)."""
    xp = ctx.xp
    axis = node.axis
    ndim = len(ctx.in_shapes[0])
    axes = tuple(range(ndim)) if axis is None else tuple(
        sorted(a % ndim for a in axis))

    def fn(x):
        m = x.max(axis=axis, keepdims=True)
        y = utils.force_array(x - m)
        xp.exp(y, out=y)
        y_sum = y.sum(axis=axis)
        return xp.asarray(xp.log(y_sum) + m.reshape(y_sum.shape))

    def grad(xs, ys, gys, wanted):
        x, = xs
        kept = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
        y = xp.broadcast_to(ys[0].reshape(kept), x.shape)
        return xp.broadcast_to(gys[0].reshape(kept), x.shape) * \
            xp.exp(x - y),

    def grad_to_onnx(b, xs, ys, gys, wanted):
        y, gy = (b.single('Unsqueeze', v, b.int64s(list(axes)))
                 for v in (ys[0], gys[0]))
        return b.single('Mul', gy, b.single(
            'Exp', b.single('Sub', xs[0], y))),
    return Kernel(fn, {'axis': axis},
                  grad=grad_rule(ctx, grad, inputs=(0,), outputs=(0,),
                                 onnx=grad_to_onnx),
                  onnx=_onnx_reduce('ReduceLogSumExp', axis, False, ctx),
                  lengths=rows_reduced_over(axes, False))


def _swap_last(trans, ndim):
    """Whether ``_matmul`` transposes an operand's last two axes."""
    return trans and ndim != 1


@lowering(matmul.MatMul)
def lower_matmul(node, ctx):
    xp_matmul = ctx.xp.matmul
    a_ndim, b_ndim = (len(s) for s in ctx.in_shapes)
    transa, transb = node.transa, node.transb
    if node.transc:
        transa, transb = not transb, not transa
        a_ndim, b_ndim = b_ndim, a_ndim
    swap_a = _swap_last(transa, a_ndim)
    swap_b = _swap_last(transb, b_ndim)
    swap_inputs = bool(node.transc)
    dtype = ctx.out_dtypes[0]

    def fn(a, b, out=None):
        if swap_inputs:
            a, b = b, a
        if swap_a:
            a = a.swapaxes(-1, -2)
        if swap_b:
            b = b.swapaxes(-1, -2)
        return utils.force_array(xp_matmul(a, b, out=out), dtype)

    def into(out, a, b):
        return fn(a, b, out)

    def to_onnx(b, ins, outs):
        ins = [x if t == dtype else b.op('Cast', [x], to=onnx_dtype(dtype))[0]
               for x, t in zip(ins, b.in_dtypes)]
        a, b_ = ins[::-1] if swap_inputs else ins
        if swap_a and b_ndim == 1 or swap_b and a_ndim == 1:
            # ``a^T v == v a`` and ``v b^T == b v``, without a Transpose
            # (onnxruntime 1.31 fuses Transpose into a wrong MatMul with
            # a vector).
            b.op('MatMul', [b_, a], outs)
            return
        if swap_a:
            a = onnx_swap_last(b, a, a_ndim)
        if swap_b:
            b_ = onnx_swap_last(b, b_, b_ndim)
        b.op('MatMul', [a, b_], outs)
    kernel = Kernel(fn, {'transa': node.transa, 'transb': node.transb,
                         'transc': node.transc},
                    grad=grad_rule(ctx, _matmul_grad(node, ctx),
                                   inputs=(0, 1),
                                   onnx=_matmul_grad_to_onnx(node, ctx)),
                    onnx=to_onnx, fresh=True,
                    into=into if _all_alike(ctx) and 1 not in (a_ndim, b_ndim)
                    else None)
    return kernel._replace(lengths=_matmul_rows(kernel, node, ctx))


def _matmul_rows(kernel, node, ctx):
    """The ``Kernel.lengths`` rule of a matrix product of operands of as
    many axes, two or more, and the same batch axes (none broadcast):
    the rows of a batch axis both have, or of the first operand's
    matrices' rows (``(B, T, H) @ (B, H, 1)``: attention scores over
    ``T`` steps), or of the second's columns, are the product's, on both
    where both are (queries by keys, ``(B, T, T)``); rows that both
    contract (``F.matmul(enc, a, transa=True)``: ``(B, T, H)`` and ``(B,
    T, 1)``, a context summed over the steps; the weights of those scores
    by the values) are none of the product's. At any rows its gradient
    is the products of the output's gradient, which have the operands'
    shapes (:func:`_matmul_grad`, its ONNX form that of the recorded
    sizes left out)."""
    a_shape, b_shape = ctx.in_shapes
    ndim = len(a_shape)
    if ndim < 2 or len(b_shape) != ndim or a_shape[:-2] != b_shape[:-2]:
        return None
    # The axes of the matrices' rows, columns and contraction.
    a_rows, a_inner = (ndim - 1, ndim - 2) if node.transa else \
        (ndim - 2, ndim - 1)
    b_inner, b_cols = (ndim - 1, ndim - 2) if node.transb else \
        (ndim - 2, ndim - 1)
    out_rows, out_cols = (ndim - 1, ndim - 2) if node.transc else \
        (ndim - 2, ndim - 1)

    def product_rows(a, b):
        if a is not None and b is not None and \
                a.on_axes([0]) != b.on_axes([0]):
            return False
        a_axes = set(a.axes) if a is not None else set()
        b_axes = set(b.axes) if b is not None else set()
        batch = set(range(ndim - 2))
        if a_axes & batch != b_axes & batch or \
                (a_inner in a_axes) != (b_inner in b_axes):
            return False  # one operand's rows broadcast, or left alone
        out = (a_axes & batch) | \
            (set([out_rows]) if a_rows in a_axes else set()) | \
            (set([out_cols]) if b_cols in b_axes else set())
        return (a or b).on_axes(out) if out else None

    @takes_widest  # (neither joins nor splits rows: pads stay pads)
    @takes_square
    def lengths(rows):
        found = product_rows(*rows)
        return None if found is False else Follow((found,), any_rows)
    any_rows = kernel._replace(grad=kernel.grad._replace(onnx=None),
                               lengths=lengths)
    return lengths


def _matmul_grad_to_onnx(node, ctx):
    """MatMul's gradient in ONNX, for operands of two axes or more and one
    dtype: each operand's the product of the output gradient and the
    other operand, transposed as MatMul.backward does, summed to its
    shape over the batch axes it broadcast along."""
    shapes = ctx.in_shapes
    if min(len(s) for s in shapes) < 2 or \
            len(set(ctx.in_dtypes + ctx.out_dtypes)) != 1:
        return None
    batch = ctx.out_shapes[0][:-2]
    ta, tb, tc = node.transa, node.transb, node.transc

    out_ndim = len(batch) + 2

    def product(b, x, y, tx, ty, tout, ndims):
        x = onnx_swap_last(b, x, ndims[0]) if tx else x
        y = onnx_swap_last(b, y, ndims[1]) if ty else y
        z = b.op('MatMul', [x, y])[0]
        return onnx_swap_last(b, z, out_ndim) if tout else z

    def convert(b, xs, ys, gys, wanted):
        a, b_ = xs
        gy, = gys
        found = []
        for k, (x, y, tx, ty, tout, ndims) in enumerate((
                (gy, b_, tc, not tb, ta, (out_ndim, len(shapes[1]))),
                (a, gy, not ta, tc, tb, (len(shapes[0]), out_ndim)))):
            found.append(onnx_sum_to(
                b, product(b, x, y, tx, ty, tout, ndims),
                batch + shapes[k][-2:], shapes[k]) if wanted[k] else None)
        return tuple(found)
    return convert


def _outer(u, v, trans, to_vector):
    """``u * v`` as MatMul.backward computes the gradient of a matrix
    operand when the other one is a vector (``to_vector``: the gradient
    wanted is itself a vector's)."""
    if not to_vector:
        if trans:
            u, v = v, u
        u = u[..., None]
        if v.ndim > 1:
            v = v[..., None, :]
    return u * v


def _matmul_grad(node, ctx):
    """As MatMul.backward (vectors, transpositions, batch broadcasting,
    dtypes)."""
    xp = ctx.xp
    mm = matmul._matmul
    force, sum_to = utils.force_array, utils.sum_to
    a_shape, b_shape = ctx.in_shapes
    a_dtype, b_dtype = ctx.in_dtypes
    a_vec, b_vec = len(a_shape) == 1, len(b_shape) == 1
    ta, tb, tc = node.transa, node.transb, node.transc

    def grad(xs, ys, gys, wanted):
        a, b = xs
        gy, = gys
        ga = gb = None
        if wanted[0]:
            if b_vec:
                ga = _outer(gy.astype(b_dtype, copy=False), b, ta, a_vec)
                ga = force(ga).astype(a_dtype, copy=False)
            elif a_vec:
                bt = xp.rollaxis(b, -1 if tb else -2)
                ga = force(xp.tensordot(bt, gy, gy.ndim)).astype(
                    a_dtype, copy=False)
            else:
                ga = sum_to(force(mm(gy, b, tc, not tb, ta), a_dtype),
                            a.shape)
        if wanted[1]:
            if a_vec:
                gb = _outer(a, gy.astype(a_dtype, copy=False), tb, b_vec)
                gb = force(gb).astype(b_dtype, copy=False)
            elif b_vec:
                at = xp.rollaxis(a, -2 if ta else -1)
                gb = force(xp.tensordot(at, gy, gy.ndim)).astype(
                    b_dtype, copy=False)
            else:
                gb = sum_to(force(mm(a, gy, not ta, tc, tb), b_dtype),
                            b.shape)
        return ga, gb
    return grad


@lowering(matmul.BatchMatMul)
def lower_batch_matmul(node, ctx):
    """The deprecated ``F.batch_matmul``: each operand made a batch of
    matrices (``(B, N, -1)``, as Chainer's ``_as_batch_mat``: a batch of
    vectors a batch of columns), then their products; at any sizes of
    operands of two or three axes (:func:`_matmul_rows`, as ``F.matmul``
    of the vectors as columns)."""
    xp_matmul = ctx.xp.matmul
    a_shape, b_shape = (s[:2] + (-1,) for s in ctx.in_shapes)
    swap_a, swap_b = node.transa, node.transb

    def fn(a, b):
        a = a.reshape(a.shape[:2] + (-1,))
        b = b.reshape(b.shape[:2] + (-1,))
        if swap_a:
            a = a.swapaxes(-1, -2)
        if swap_b:
            b = b.swapaxes(-1, -2)
        return xp_matmul(a, b)

    def grad(xs, ys, gys, wanted):
        # As BatchMatMulGrad.forward.
        a, b = xs
        gy, = gys
        bmm = matmul._batch_matmul
        return (bmm(gy, b, False, not swap_b, swap_a).reshape(a.shape)
                if wanted[0] else None,
                bmm(a, gy, not swap_a, False, swap_b).reshape(b.shape)
                if wanted[1] else None)

    def to_onnx(b, ins, outs):
        # Axis 0 (the batch) is copied, as 0 in the target shape; batches
        # of matrices are already.
        a, b_ = (x if len(full) == 3 else
                 b.op('Unsqueeze', [x, b.int64s((2,))])[0] if len(full) == 2
                 else b.op('Reshape', [x, b.int64s((0, shape[1], -1))])[0]
                 for x, shape, full in zip(ins, (a_shape, b_shape),
                                           ctx.in_shapes))
        if swap_a:
            a = onnx_swap_last(b, a, 3)
        if swap_b:
            b_ = onnx_swap_last(b, b_, 3)
        b.op('MatMul', [a, b_], outs)
    kernel = Kernel(fn, {'transa': swap_a, 'transb': swap_b},
                    grad=GradRule(grad, inputs=(0, 1)), onnx=to_onnx)
    if any(len(shape) not in (2, 3) for shape in ctx.in_shapes):
        return kernel
    as_matmul = collections.namedtuple('AsMatMul', 'transa transb transc')(
        swap_a, swap_b, False)
    as_matrices = ctx._replace(in_shapes=tuple(  # (a vector's axes kept)
        shape + (1,) * (3 - len(shape)) for shape in ctx.in_shapes))
    return kernel._replace(lengths=_matmul_rows(kernel, as_matmul,
                                                as_matrices))


def _along(axis, ndim, sl):
    """An index taking the slice ``sl`` along ``axis`` of ``ndim`` axes."""
    return (slice(None),) * axis + (sl,) + (slice(None),) * (
        ndim - axis - 1)


def _flip_cumprodsum(xp, xmul, xadd, axis):
    """``_flipcumprodsum`` of Chainer's cumprod module: Cumprodsum's
    forward from the other end along ``axis``."""
    z, = cumprod.Cumprodsum(axis).forward(
        (xp.flip(xmul, axis), xp.flip(xadd, axis)))
    return xp.flip(z, axis)


@lowering(cumprod.Cumprod)
def lower_cumprod(node, ctx):
    """``cumprod`` along ``axis`` (``None``: the flattened array); its
    gradient as Cumprod's backward: the gradient summed from the other
    end through the later factors (Cumprodsum), times the products
    before each element."""
    xp = ctx.xp
    axis, shape = node.axis, ctx.in_shapes[0]
    along = 0 if axis is None else axis % len(shape)

    def grad(xs, ys, gys, wanted):
        (x,), (y,), (gy,) = xs, ys, gys
        if axis is None:
            x = x.reshape(-1)
        if y.shape[along] > 1:
            ones = xp.ones_like(y[_along(along, y.ndim, slice(-1, None))])
            before = xp.concatenate(
                [ones, y[_along(along, y.ndim, slice(None, -1))]], along)
            later = x[_along(along, x.ndim, slice(1, None))]
            gy = utils.force_array(
                _flip_cumprodsum(xp, later, gy, along) * before)
        return gy.reshape(shape) if axis is None else gy,
    return Kernel(lambda x: xp.cumprod(x, axis=axis), {'axis': axis},
                  grad=grad_rule(ctx, grad, inputs=(0,), outputs=(0,)),
                  fresh=True, lengths=_cumulative_rows(axis, shape))


@lowering(cumprod.Cumprodsum)
def lower_cumprodsum(node, ctx):
    """Cumprodsum (applied by Cumprod's backward): ``y[0] = xadd[0]``,
    ``y[i] = y[i - 1] * xmul[i - 1] + xadd[i]`` along ``axis``, by its own
    forward; its gradient as its backward."""
    xp, axis = ctx.xp, node.axis

    def fn(xmul, xadd):
        return cumprod.Cumprodsum(axis).forward((xmul, xadd))[0]

    def grad(xs, ys, gys, wanted):
        (xmul, _), (y,), (gy,) = xs, ys, gys
        gxadd = _flip_cumprodsum(xp, xmul, gy, axis)
        gxmul = None
        if wanted[0]:
            gxmul = utils.force_array(
                gxadd[_along(axis, y.ndim, slice(1, None))] *
                y[_along(axis, y.ndim, slice(None, -1))])
        return gxmul, gxadd if wanted[1] else None
    return Kernel(fn, {'axis': axis},
                  grad=grad_rule(ctx, grad, inputs=(0,), outputs=(0,)),
                  fresh=True)


def _tensordot_axes(node, a_ndim, b_ndim):
    """``(a_axes, b_axes, c_axes)`` as TensorDot's forward settles them
    for operands of these ranks; ``c_axes`` is ``None`` where the forward
    transposes nothing."""
    if node.a_axes is not None and node.b_axes is not None:
        return node.a_axes, node.b_axes, node.c_axes
    a_axes, b_axes = [[], []], [[], []]
    if isinstance(node.axes, collections.abc.Sequence):
        a_axes[1], b_axes[0] = node.axes
        if numpy.isscalar(a_axes[1]):
            a_axes[1] = a_axes[1],
        if numpy.isscalar(b_axes[0]):
            b_axes[0] = b_axes[0],
    else:
        a_axes[1] = range(a_ndim - node.axes, a_ndim)
        b_axes[0] = range(node.axes)
    a_axes[0] = [i for i in range(a_ndim) if i not in a_axes[1]]
    b_axes[1] = [i for i in range(b_ndim) if i not in b_axes[0]]
    return a_axes, b_axes, node.c_axes


@lowering(tensordot.TensorDot)
def lower_tensordot(node, ctx):
    """``numpy.tensordot`` over the node's axes (and the transposition
    to ``c_axes``); the gradients as the TensorDot nodes of its backward
    compute them."""
    a_axes, b_axes, c_axes = _tensordot_axes(
        node, *(len(s) for s in ctx.in_shapes))
    dot, dtype = tensordot._tensordot, node.dtype
    a_dtype, b_dtype = ctx.in_dtypes
    c_ndim = len(ctx.out_shapes[0])
    settled_c = c_axes or [range(len(a_axes[0])),
                           range(len(a_axes[0]), c_ndim)]

    def grad(xs, ys, gys, wanted):
        (a, b), (gc,) = xs, gys
        return (utils.force_array(dot(
                    gc, b, settled_c, [b_axes[1], b_axes[0]], a_axes),
                    a_dtype) if wanted[0] else None,
                utils.force_array(dot(
                    a, gc, [a_axes[1], a_axes[0]], settled_c, b_axes),
                    b_dtype) if wanted[1] else None)
    return Kernel(
        lambda a, b: utils.force_array(dot(a, b, a_axes, b_axes, c_axes),
                                       dtype),
        {'a_axes': _listed(a_axes), 'b_axes': _listed(b_axes)},
        grad=grad_rule(ctx, grad, inputs=(0, 1),
                       onnx=_tensordot_grad_to_onnx(
                           ctx, a_axes, b_axes, settled_c)),
        onnx=_tensordot_to_onnx(ctx, a_axes, b_axes, c_axes), fresh=True)


def _listed(axes):
    """Pairs of axis sequences as tuples (for printed IR)."""
    return tuple(tuple(a) for a in axes)


def _einsum_equation(a_ndim, b_ndim, a_axes, b_axes, c_axes):
    """The ``numpy.einsum`` (and ONNX ``Einsum``) equation of
    ``tensordot._tensordot``, or ``None`` beyond 26 subscripts."""
    if a_ndim + b_ndim > 26:
        return None
    letters = iter('abcdefghijklmnopqrstuvwxyz')
    a_sub, b_sub = [None] * a_ndim, [None] * b_ndim
    for i, j in zip(a_axes[1], b_axes[0]):
        a_sub[i] = b_sub[j] = next(letters)
    a_sub = [s or next(letters) for s in a_sub]
    b_sub = [s or next(letters) for s in b_sub]
    if c_axes is None:  # numpy's order: a's free axes, then b's
        out = [a_sub[i] for i in sorted(a_axes[0])] + [
            b_sub[j] for j in sorted(b_axes[1])]
    else:
        out = [None] * (len(a_axes[0]) + len(b_axes[1]))
        for c, i in zip(c_axes[0], a_axes[0]):
            out[c] = a_sub[i]
        for c, j in zip(c_axes[1], b_axes[1]):
            out[c] = b_sub[j]
    return '%s,%s->%s' % (''.join(a_sub), ''.join(b_sub), ''.join(out))


def _tensordot_to_onnx(ctx, a_axes, b_axes, c_axes):
    """TensorDot as ONNX ``Einsum`` on operands cast to the output's
    dtype, or ``None``."""
    (a_shape, b_shape), dtype = ctx.in_shapes, ctx.out_dtypes[0]
    equation = _einsum_equation(len(a_shape), len(b_shape), a_axes, b_axes,
                                c_axes)
    if equation is None:
        return None

    def convert(b, ins, outs):
        ins = [b.cast(x, t, dtype) for x, t in zip(ins, b.in_dtypes)]
        b.op('Einsum', ins, outs, equation=equation)
    return convert


def _tensordot_grad_to_onnx(ctx, a_axes, b_axes, c_axes):
    """TensorDot's gradient as two ONNX ``Einsum`` nodes, for operands
    and output of one dtype; or ``None``."""
    (a_shape, b_shape), c_ndim = ctx.in_shapes, len(ctx.out_shapes[0])
    equations = (
        _einsum_equation(c_ndim, len(b_shape), c_axes,
                         [b_axes[1], b_axes[0]], a_axes),
        _einsum_equation(len(a_shape), c_ndim, [a_axes[1], a_axes[0]],
                         c_axes, b_axes))
    if None in equations or len(set(ctx.in_dtypes + ctx.out_dtypes)) != 1:
        return None

    def convert(b, xs, ys, gys, wanted):
        (a, b_), (gc,) = xs, gys
        return (b.single('Einsum', gc, b_, equation=equations[0])
                if wanted[0] else None,
                b.single('Einsum', a, gc, equation=equations[1])
                if wanted[1] else None)
    return convert


def _linalg_on_cpu(ctx):
    """Whether a ``numpy.linalg`` op lowers: NumPy arrays of float32 or
    float64 (Chainer computes float16 in float32, and CuPy otherwise)."""
    return ctx.xp is numpy and ctx.in_dtypes[0] in (
        numpy.dtype(numpy.float32), numpy.dtype(numpy.float64))


def _inverse(x):
    """``numpy.linalg.inv`` as Inv's and BatchInv's CPU forward calls it:
    singular matrices raise ``ValueError``."""
    try:
        return utils.force_array(numpy.linalg.inv(x))
    except numpy.linalg.LinAlgError:
        raise ValueError('Input has singular matrices.')


@lowering(inv.Inv, inv.BatchInv)
def lower_inv(node, ctx):
    """The inverse of a matrix (``Inv``) or of each of a batch
    (``BatchInv``); the gradient ``-inv^T gy inv^T`` by the two matrix
    products of their backward."""
    if not _linalg_on_cpu(ctx):
        return None
    mm = matmul._matmul
    batch = isinstance(node, inv.BatchInv)

    def grad(xs, ys, gys, wanted):
        (invx,), (gy,) = ys, gys
        if batch:
            return utils.force_array(mm(
                utils.force_array(mm(-invx, gy, transa=True)), invx,
                transb=True)),
        invx_t = invx.T
        return utils.force_array(mm(utils.force_array(mm(
            utils.force_array(-invx_t), gy)), invx_t)),

    def grad_to_onnx(b, xs, ys, gys, wanted):
        invx_t = onnx_swap_last(b, ys[0], 3 if batch else 2)
        return b.single('MatMul', b.single(
            'MatMul', b.single('Neg', invx_t), gys[0]), invx_t),
    return Kernel(_inverse, grad=grad_rule(ctx, grad, outputs=(0,),
                                           onnx=grad_to_onnx), fresh=True)


@lowering(det.BatchDet)
def lower_batch_det(node, ctx):
    """``numpy.linalg.det`` of each matrix; the gradient ``gy * det *
    inv(x^T)``, as BatchDet's backward (ONNX ``Det`` for the forward)."""
    if not _linalg_on_cpu(ctx):
        return None
    broadcast_to = numpy.broadcast_to

    def grad(xs, ys, gys, wanted):
        (x,), (detx,), (gy,) = xs, ys, gys
        inv_x = _inverse(x.transpose(0, 2, 1))
        return utils.force_array(utils.force_array(
            broadcast_to(gy[:, None, None], inv_x.shape) *
            broadcast_to(detx[:, None, None], inv_x.shape)) * inv_x),
    return Kernel(lambda x: utils.force_array(numpy.linalg.det(x)),
                  grad=grad_rule(ctx, grad, inputs=(0,), outputs=(0,)),
                  onnx=onnx_op('Det'), fresh=True)


def _fourier(method):
    """FFT's CPU forward: ``numpy.fft``'s ``method`` of ``real + imag *
    1j``, its parts in the inputs' dtypes."""
    transform = getattr(numpy.fft, method)

    def fn(real, imag):
        y = transform(real + imag * 1j)
        return (y.real.astype(real.dtype, copy=False),
                y.imag.astype(imag.dtype, copy=False))
    return fn


@lowering(fft.FFT)
def lower_fft(node, ctx):
    """``fft`` or ``ifft`` of ``real + imag * 1j`` over the last axis;
    the gradient, as FFT's backward, the same transform of the output
    gradients swapped (zeros for one not given)."""
    if ctx.xp is not numpy:
        return None
    fn = _fourier(node._method)

    def grad(xs, ys, gys, wanted):
        gr, gi = gys
        if gr is None:
            gr = numpy.zeros_like(gi)
        if gi is None:
            gi = numpy.zeros_like(gr)
        gxi, gxr = fn(gi, gr)
        return gxr if wanted[0] else None, gxi if wanted[1] else None
    ndim, inverse = len(ctx.in_shapes[0]), int(node._method == 'ifft')
    dtype = ctx.in_dtypes[0]

    def to_onnx(b, ins, outs):
        _onnx_fourier(b, ins[0], ins[1], ndim, inverse, dtype, outs)

    def grad_to_onnx(b, xs, ys, gys, wanted):
        zeros = [b.constant(numpy.zeros(shape, dtype)) for shape, dtype
                 in zip(ctx.out_shapes, ctx.out_dtypes)]
        gr, gi = (g if g is not None else z for g, z in zip(gys, zeros))
        gxi, gxr = _onnx_fourier(b, gi, gr, ndim, inverse, dtype)
        return gxr if wanted[0] else None, gxi if wanted[1] else None
    return Kernel(fn, {'method': node._method}, multi=True,
                  grad=grad_rule(ctx, grad, onnx=grad_to_onnx),
                  onnx=to_onnx, fresh=True)


def _onnx_fourier(b, real, imag, ndim, inverse, dtype, outs=None):
    """The real and imaginary parts of the discrete Fourier transform
    (``inverse``: the inverse, divided by the length) of ``real + imag *
    1j`` over its last axis, by ONNX ``DFT`` (which wants a batch axis
    first and the parts on a last axis of two), in float64 as NumPy
    computes it, the parts cast back to ``dtype``."""
    last = b.int64s([-1])
    pair = b.single('Concat', b.single('Unsqueeze', real, last),
                    b.single('Unsqueeze', imag, last), axis=-1)
    if ndim == 1:
        pair = b.single('Unsqueeze', pair, b.int64s([0]))
    y = b.cast(b.single(
        'DFT', b.cast(pair, dtype, numpy.float64), axis=max(ndim - 1, 1),
        inverse=inverse), numpy.float64, dtype)
    parts = b.op('Split', [y], [b.fresh('part') for _ in range(2)],
                 axis=-1)
    squeezed = b.int64s([0, -1] if ndim == 1 else [-1])
    outs = outs or [b.fresh('part') for _ in range(2)]
    return [b.op('Squeeze', [part, squeezed], [out])[0]
            for part, out in zip(parts, outs)]
