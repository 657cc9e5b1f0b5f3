"""Lowerings of ``chainer.functions.connection.linear``: the linear
layer's forward (with a ReLU after it in one pass, where the fuse pass
joined them), its gradient, and the checks that decide which of the
equivalent products gives eager's bits on this machine."""

import collections
import os

import chainer
from chainer.functions.connection import linear
import numpy

from chainerjit import errors
from chainerjit.ops import FACTORS
from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import LOOP_DTYPES
from chainerjit.ops import _loops_elementwise
from chainerjit.ops import _loops_normalization
from chainerjit.ops import lowering
from chainerjit.ops import rows_row_wise


@lowering(linear.LinearFunction)
def lower_linear(node, ctx):
    """``y = x W^T (+ b)``, as ``LinearFunction.forward``."""
    # NumPy needs a copy of a non-contiguous x with a unit axis
    # (chainer/chainer#2744); the shapes tell whether it can happen, and
    # the dtypes whether the product needs a cast back to x's dtype.
    unit_axis = ctx.xp is numpy and 1 in ctx.in_shapes[0]
    cast = ctx.in_dtypes[0] != ctx.in_dtypes[1]
    # Up to 64 rows, ``(W x^T)^T``, which OpenBLAS runs up to twice as
    # fast there (16 x 128 by 512: 22 us instead of 37 us; from 128 rows
    # on it is slower), where it gives the same bits (see
    # swapped_product_agrees); the transposed product is copied to C
    # order with the bias added in the same pass.
    # Each number of rows is probed at its first call (a program for any
    # batch size meets several), and looked up after (inlined as
    # ``weight_first[len(x)]``: the kernels' Python frames are a tenth of
    # an MLP's call at batch 1).
    rows = ctx.in_shapes[0][0] if len(ctx.in_shapes[0]) == 2 else 0
    swappable = ctx.xp is numpy and not unit_axis and \
        len(set(ctx.in_dtypes)) == 1 and rows > 0
    weight_first = _WeightFirst((ctx.in_shapes[1][1], ctx.in_shapes[1][0],
                                 ctx.in_dtypes[0]) if swappable else None)
    product = _product(weight_first, unit_axis, cast)

    def linear_fn(x, W, b=None):
        y = product(x, W)
        if weight_first[len(x)]:
            if b is None:
                return numpy.ascontiguousarray(y)
            return numpy.add(y, b, order='C')
        if b is not None:
            y += b
        return y

    def linear_into(out, x, W, b=None):
        y = product(x, W, out)
        if weight_first[len(x)]:
            if b is None:
                numpy.copyto(out, y)
                return out
            return numpy.add(y, b, out=out)
        if b is not None:
            out += b
        return out

    # For passes/fuse.py's LSTM step; the second for a step whose input
    # projection, hoisted, already rounds otherwise than eager's.
    linear_fn.product = product
    linear_fn.rounded_product = _product(
        _WeightFirst(always=rows if swappable and rows <= 64 else None),
        unit_axis, cast)
    into = None if cast or ctx.xp is not numpy or \
        len(ctx.in_shapes[0]) != 2 else linear_into
    if len(ctx.in_shapes) == 3 and ctx.in_dtypes[0] in _FUSED_DTYPES:
        if into is not None:
            linear_fn.then_relu = _then_relu(product)
        elif ctx.xp is not numpy and not cast:
            linear_fn.then_relu = _then_relu_on_gpu(product)
    # The rows' number is read from x (``len(x)`` above), a unit axis of x
    # can only be another axis than the rows (``runtime.ragged`` keeps
    # lengths of 1 in the key), and ``into`` runs only with the arena.
    return Kernel(linear_fn, grad=GradRule(
        grad_linear, inputs=(0, 1), onnx=_grad_linear_to_onnx(ctx)),
        onnx=_linear_to_onnx, fresh=True, into=into,
        lengths=rows_row_wise)


class _WeightFirst(dict):
    """``{rows: whether x W^T is taken as (W x^T)^T}`` for a linear layer:
    where ``shapes`` (``(inner, cols, dtype)``) are given, for 1 to 64 rows
    where the weight-first product gives the same bits
    (:func:`swapped_product_agrees`, probed at each number's first call);
    or for the number ``always`` only."""

    def __init__(self, shapes=None, always=None):
        super(_WeightFirst, self).__init__()
        self.shapes, self.always = shapes, always

    def __missing__(self, rows):
        taken = rows == self.always or (
            self.shapes is not None and 0 < rows <= 64 and
            swapped_product_agrees(rows, *self.shapes))
        self[rows] = taken
        return taken


def _product(weight_first, unit_axis, cast):
    def product(x, W, out=None):
        """``x W^T`` in ``x``'s dtype, into ``out`` if given; weight first
        (then F-ordered, and ``out`` is not used) at the numbers of rows
        ``weight_first`` says."""
        if weight_first[len(x)]:
            return W.dot(x.T).T
        if unit_axis and not (x.flags.c_contiguous or
                              x.flags.f_contiguous):
            x = numpy.ascontiguousarray(x)
        y = x.dot(W.T, out=out)
        return y.astype(x.dtype, copy=False) if cast else y
    return product


_FUSED_DTYPES = LOOP_DTYPES  # (tests turn the one-pass kernel off)


def _then_relu(product):
    """``(fn, into)``: a Linear with a bias, then a ReLU, with the bias and
    the ReLU in one pass (``_loops_elementwise.bias_relu``) after ``product``
    (``lower_linear``'s), for ``passes/fuse.py``. The same products, sums
    and maxima as the two kernels in turn (for all dtypes alike, float32
    or float64)."""
    def fn(x, W, b):
        y = product(x, W)
        out = y if y.flags.c_contiguous else numpy.empty(y.shape, y.dtype)
        return out if _loops_elementwise.bias_relu(y, b, out) else \
            _numpy_bias_relu(y, b, out)

    def into(out, x, W, b):
        y = product(x, W, out)
        return out if _loops_elementwise.bias_relu(y, b, out) else \
            _numpy_bias_relu(y, b, out)
    return fn, into


def _then_relu_on_gpu(product):
    """``(fn, None)``: as :func:`_then_relu`, with the bias and the ReLU in
    one CUDA kernel (one launch instead of CuPy's ``+=`` and
    ``maximum``; NaN propagates as ``maximum``'s does)."""
    def fn(x, W, b):
        y = product(x, W)
        chainer.backends.cuda.elementwise(  # memoized by Chainer
            'T b', 'T y', 'T t = y + b; y = isnan(t) ? t : max(t, (T)0)',
            'chainerjit_bias_relu')(b, y)
        return y
    return fn, None


def _numpy_bias_relu(y, b, out):
    """``out = maximum(y + b, 0)`` in two ufuncs, for the arrays
    ``_loops_elementwise.bias_relu``'s one loop does not take (it takes a
    contiguous bias, as a link's is)."""
    return numpy.maximum(numpy.add(y, b, out=out), 0, out=out)


def grad_linear(xs, ys, gys, wanted, rounded=False):
    """As LinearGradData, LinearGradWeight and Sum(axis=0); ``rounded``:
    the faster order for ``gx`` even where it rounds otherwise (see
    ``passes/fuse.py``'s LSTM step)."""
    x, W = xs[0], xs[1]
    gy, = gys
    gx = None
    if wanted[0] and _weight_first(gy, W, rounded):
        gx = numpy.ascontiguousarray(W.T.dot(gy.T).T)
    elif wanted[0]:
        gx = gy.dot(W).astype(gy.dtype, copy=False)
    if wanted[1] is FACTORS:  # in W's dtype, as the product's result
        gW = (gy.astype(W.dtype, copy=False), x.astype(W.dtype, copy=False))
    else:
        gW = gy.T.dot(x).astype(W.dtype, copy=False) if wanted[1] else None
    if len(xs) == 2:
        return gx, gW
    gb = _column_sums(gy) if wanted[2] else None
    return gx, gW, gb


def _column_sums(gy):
    """``gy.sum(axis=0)``: for a C-ordered (rows, columns) array in one C
    loop adding the rows in turn, as NumPy's reduction does
    (``_loops_normalization.channel_sums``; 2.3 -> 0.9 us at 64 x 100)."""
    if type(gy) is numpy.ndarray and gy.ndim == 2:
        out = numpy.empty(gy.shape[1], gy.dtype)
        if _loops_normalization.channel_sums(gy, None, out):
            return out
    return gy.sum(axis=0)


grad_linear.factors = (1,)  # gW = gy^T x
grad_linear.fortran_inputs = (1,)  # W (see _weight_first)


def _weight_first(gy, W, rounded=False):
    """Is ``gy W`` faster as ``(W^T gy^T)^T``, with the same bits? For an
    F-ordered ``W`` (``W^T`` C-ordered; autodiff makes such a copy for a
    loop, ``fortran_inputs``) and 9 to 64 rows of ``gy``, in OpenBLAS:
    69 us instead of 102 at 16 x 512 by 128, 112 instead of 142 at 32
    rows; equal at 64, slower at 8 rows or fewer, and 10% slower for a
    C-ordered ``W``."""
    return type(gy) is numpy.ndarray and gy.ndim == 2 and \
        8 < len(gy) <= 64 and gy.dtype == W.dtype and \
        W.flags.f_contiguous and not W.flags.c_contiguous and \
        (rounded or swapped_product_agrees(len(gy), W.shape[0], W.shape[1],
                                           W.dtype))


_AGREES = {}


def swapped_product_agrees(rows, inner, cols, dtype):
    """Does this machine's BLAS give the product ``a b`` of an (rows,
    inner) ``a`` and an (inner, cols) ``b`` the same bits as ``(b^T
    a^T)^T``? A BLAS kernel may sum in another order when its operands
    swap (OpenBLAS 0.3.23 does in float32 on an AMD EPYC with AVX-512 and
    did not on the machines before it), so a kernel takes the faster
    swapped order only where this says so. The order of a BLAS sum
    depends on the shapes and layouts, not on the values: one probe on
    random arrays of these shapes, C- and F-ordered, settles it, and is
    remembered. ``CHAINERJIT_EXACT_BLAS=0`` (read at a shape's first
    probe) takes the faster order everywhere, with values then equal
    within rounding."""
    return faster_order_agrees(_probe_swapped_product, rows, inner, cols,
                               dtype)


def faster_order_agrees(probe, *args, seen=0):
    """``probe(*args)`` (sizes, then a dtype: does a faster order of a
    product give this machine's BLAS's bits at those sizes?), probed once
    per process and arguments; ``True`` without probing where
    ``CHAINERJIT_EXACT_BLAS=0`` (read at the first call). With ``seen``,
    ``False`` until these arguments were asked about ``seen`` times
    before: a probe of large products costs about as much as the
    products, worth paying for sizes met again and again, not for each
    of a stream of new ones (the padded batches of a text CNN)."""
    if seen and _asked(probe, args) <= seen:
        return False
    return _remembered(probe, *args, exact_blas_switch=True)


def probed(probe, *args, seen=0):
    """``probe(*args)`` (sizes, then a dtype), probed once per process and
    arguments and remembered (an answer other than ``None``); with
    ``seen``, ``False`` until asked ``seen`` times before, as
    :func:`faster_order_agrees`, whose ``CHAINERJIT_EXACT_BLAS`` switch
    it does not read."""
    if seen and _asked(probe, args) <= seen:
        return False
    return _remembered(probe, *args)


_ASKED = collections.Counter()
#: The most arguments :func:`_asked` counts (then it starts again).
_ASKED_KEPT = 4096


def _asked(probe, args):
    """How many times ``faster_order_agrees`` was asked about ``args``
    for ``probe``, this time included."""
    key = (probe.__name__,) + args
    if key not in _ASKED and len(_ASKED) >= _ASKED_KEPT:
        _ASKED.clear()
    _ASKED[key] += 1
    return _ASKED[key]


def stacked_product_agrees(steps, rows, inner, cols, dtype):
    """Does this machine's BLAS give the product of a (steps * rows,
    inner) ``a`` and an (inner, cols) ``b`` the bits of one product per
    block of ``rows`` rows in turn? (``passes/hoist.py`` computes a
    loop's input projection so; OpenBLAS does not keep the bits in
    float32 on an AMD EPYC with AVX-512.) Probed and remembered as
    :func:`swapped_product_agrees`."""
    return _remembered(_probe_stacked_product, steps, rows, inner, cols,
                       dtype)


def _remembered(probe, *args, exact_blas_switch=False):
    """``probe(*args)`` (sizes, then a dtype), computed once per process
    and arguments, in ``_AGREES`` (keyed by the probe's name and the
    arguments); with ``exact_blas_switch``, ``True`` where
    ``CHAINERJIT_EXACT_BLAS=0``."""
    key = (probe.__name__,) + args[:-1] + (numpy.dtype(args[-1]),)
    agrees = _AGREES.get(key)
    if agrees is None:
        agrees = _AGREES[key] = exact_blas_switch and os.environ.get(
            'CHAINERJIT_EXACT_BLAS', '1') == '0' or probe(*key[1:])
    return agrees


def _probe_stacked_product(steps, rows, inner, cols, dtype):
    a, b = probe_arrays(steps * rows, inner, cols, dtype)
    for b_ in (b, numpy.asfortranarray(b)):
        blocks = [a[k:k + rows].dot(b_) for k in range(0, len(a), rows)]
        if not numpy.array_equal(a.dot(b_), numpy.concatenate(blocks)):
            return False
    return True


def probe_arrays(rows, inner, cols, dtype):
    return (probe_values((rows, inner), dtype, 0),
            probe_values((inner, cols), dtype, 1))


#: The length of the random values probes' arrays repeat (a prime, so
#: that no BLAS block of a power of two lines up with it).
_PROBE_PERIOD = 65537
_PROBE_POOLS = {}


def probe_values(shape, dtype, which=0):
    """A C-ordered array of ``shape`` for a probe of summation orders:
    standard normal values (drawn once per dtype) repeating every
    :data:`_PROBE_PERIOD` elements, from the ``which``-th of a few
    starting points, so that one probe's arrays differ. Each element of
    a product still sums values of no pattern an order could keep the
    bits of, and filling an array costs a copy, not a draw: 0.4 ms
    instead of 22 for a text CNN's (3840, 384) patches."""
    dtype = numpy.dtype(dtype)
    pool = _PROBE_POOLS.get(dtype)
    if pool is None:
        pool = _PROBE_POOLS[dtype] = numpy.random.RandomState(0) \
            .standard_normal(_PROBE_PERIOD).astype(dtype)
    return numpy.resize(pool[which * 7919 % _PROBE_PERIOD:], shape)


def _probe_swapped_product(rows, inner, cols, dtype):
    a, b = probe_arrays(rows, inner, cols, dtype)
    for a_ in (a, numpy.asfortranarray(a)):
        for b_ in (b, numpy.asfortranarray(b)):
            if not numpy.array_equal(a_.dot(b_), b_.T.dot(a_.T).T):
                return False
    return True


def _grad_linear_to_onnx(ctx):
    """The ONNX gradient of a linear layer of a 2-D ``x`` whose inputs
    have one dtype: ``gy W``, ``gy^T x`` and the column sums of ``gy``."""
    def convert(b, xs, ys, gys, wanted):
        if len(ctx.in_shapes[0]) != 2 or len(set(ctx.in_dtypes)) != 1 \
                or FACTORS in wanted:
            raise errors.ExportError('this gradient of LinearFunction '
                                     'cannot be exported')
        x, W = xs[0], xs[1]
        gy, = gys
        found = [b.op('MatMul', [gy, W])[0] if wanted[0] else None,
                 b.op('Gemm', [gy, x], transA=1)[0] if wanted[1] else None]
        if len(wanted) == 3:
            found.append(b.op('ReduceSum', [gy, b.int64s([0])],
                              keepdims=0)[0] if wanted[2] else None)
        return tuple(found)
    return convert


def _linear_to_onnx(b, ins, outs):
    """Gemm computes ``x W^T (+ b)`` for a 2-D ``x``, as LinearFunction
    does (its type check wants a 2-D ``x``: ``F.linear`` reshapes to it
    for ``n_batch_axes`` and higher ranks, and that reshape is recorded as
    a node of its own); the bias is Gemm's optional ``C``."""
    if len(b.in_shapes[0]) != 2:
        raise errors.ExportError('LinearFunction of a %d-D input cannot be '
                                 'exported; reshape it to 2-D first'
                                 % len(b.in_shapes[0]))
    b.op('Gemm', cast_to_x(b, ins), outs, transB=1)


def cast_to_x(b, ins):
    """The inputs with W (and b) cast to x's dtype, the dtype Chainer's
    result has (ONNX wants one dtype)."""
    return [ins[0]] + [b.cast(name, dtype, b.in_dtypes[0])
                       for name, dtype in zip(ins[1:], b.in_dtypes[1:])]
