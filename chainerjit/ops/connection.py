"""Lowerings of chainer.functions.connection: convolutions and embeddings
(the linear layer's are in ``linear.py``).

The convolutions recorded with backprop enabled compute Chainer's
im2col/col2im CPU sums bit for bit (a dense convolution without
``cover_all`` gathers its patches from a strided view of the padded input
and does one matrix product, which is faster); recorded for inference,
one product per image on im2col's layout, faster still, equal to
Chainer's within rounding. On the GPU Chainer uses cuDNN, so those nodes
stay on the generic path there.
"""

import collections
import copy
import functools
import math
import time
import types

import chainer
import numpy
from numpy.lib.stride_tricks import sliding_window_view

from chainer.functions.connection import convolution_2d
from chainer.functions.connection import convolution_nd
from chainer.functions.connection import deconvolution_2d
from chainer.functions.connection import deconvolution_nd
from chainer.functions.connection import embed_id
from chainer.functions.connection import shift
from chainer.utils import conv

from chainerjit.ops import Follow
from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import _loops_convolution
from chainerjit.ops import linear as linear_ops
from chainerjit.ops import math as math_ops
from chainerjit.ops import lowering
from chainerjit.ops import own_forward
from chainerjit.ops import rows_follow_first
from chainerjit.ops import rows_in_place
from chainerjit.ops import takes_widest
from chainerjit.ops.scratch import Scratch


def _conv_transpose(gy, W, groups, col2im_args, col2im_kwargs,
                    buffers=None):
    """``Deconvolution2DFunction``'s CPU forward without bias (the
    gradient of a convolution with respect to its input); its patches
    in ``buffers`` (a held ``ops.scratch.Scratch``) if given. Computed
    directly where that gives the same bits and runs faster (1.6x on
    LeNet's second layer)."""
    sy, sx, ph, pw, h, w = col2im_args
    key = ('direct grad_x', gy.shape, W.shape, gy.dtype)
    if groups == 1 and buffers is not None and \
            (sy, sx, col2im_kwargs['dy'], col2im_kwargs['dx']) == \
            (1, 1, 1, 1) and _may_run_faster(key) and \
            _direct_grad_x_agrees(gy, W, ph, pw, h, w) and _runs_faster(
                key, functools.partial(_direct_grad_x, gy, W, ph, pw, h, w),
                functools.partial(_conv_transpose_by_patches, gy, W, 1,
                                  col2im_args, col2im_kwargs, buffers)):
        gx = _direct_grad_x(gy, W, ph, pw, h, w)
        if gx is not None:
            return gx
    return _conv_transpose_by_patches(gy, W, groups, col2im_args,
                                      col2im_kwargs, buffers)


def _direct_grad_x(gy, W, ph, pw, h, w):
    """The input gradient of a convolution with stride and dilation 1 by
    ``_loops_convolution.direct_convolution_grad_x``, or ``None`` for
    arrays it does not take."""
    gx = numpy.empty((len(gy), W.shape[1], h, w), gy.dtype)
    if _loops_convolution.direct_convolution_grad_x(gy, W, gx, ph, pw):
        return gx
    return None


def _direct_grad_x_agrees(gy, W, ph, pw, h, w):
    """Does :func:`_direct_grad_x` take these arrays and give the bits of
    Chainer's product and col2im (probed once per shape, from the third
    call on)?"""
    return _DIRECT and type(gy) is numpy.ndarray and \
        gy.dtype == W.dtype == numpy.float32 and gy.size > 0 and \
        W.flags.c_contiguous and _wide_enough(w) and \
        linear_ops.faster_order_agrees(
            _probe_direct_grad_x, gy.shape, W.shape, ph, pw, h, w,
            gy.dtype, seen=PROBED_AFTER)


def _wide_enough(width):
    """Are rows of ``width`` (the image's, a direct loop's lanes run along
    them, 16 at a time) wide enough for it to run faster than the
    products? A text CNN's one-wide images would fill a lane in 16, and
    only their probes and timings would cost."""
    return width >= 8


def _probe_direct_grad_x(gy_shape, w_shape, ph, pw, h, w, dtype):
    gy = linear_ops.probe_values(gy_shape, dtype, 0)
    W = linear_ops.probe_values(w_shape, dtype, 1)
    gx = _direct_grad_x(gy, W, ph, pw, h, w)
    return gx is not None and numpy.array_equal(gx, _conv_transpose_by_patches(
        gy, W, 1, (1, 1, ph, pw, h, w), dict(dy=1, dx=1)))


def _conv_transpose_by_patches(gy, W, groups, col2im_args, col2im_kwargs,
                               buffers=None):
    """:func:`_conv_transpose` by Chainer's steps: the patches' product,
    then col2im."""
    layout = _loops_convolution.IMAGES_INSIDE
    if groups == 1 and buffers is not None and \
            type(gy) is numpy.ndarray and W.dtype == gy.dtype:
        by_image = functools.partial(_products_per_image, W, gy, buffers)
        at_once = functools.partial(_tensordot_into, W, gy, buffers)
        key = ('grad_x', gy.shape, W.shape, gy.dtype)
        if _may_run_faster(key) and _per_image_grad_agrees(W, gy) and \
                _runs_faster(key, by_image, at_once):
            patches, layout = by_image(), _loops_convolution.COLUMNS
        else:
            patches = at_once()
    elif groups == 1:
        patches = numpy.tensordot(W, gy, (0, 1)).astype(gy.dtype, copy=False)
    else:
        n, c_in, in_h, in_w = gy.shape
        _, c_out_g, kh, kw = W.shape
        gy = gy.transpose(1, 0, 2, 3).reshape(
            groups, c_in // groups, n * in_h * in_w)
        W = W.reshape(groups, c_in // groups, c_out_g * kh * kw)
        patches = numpy.matmul(W.transpose(0, 2, 1), gy).astype(
            gy.dtype, copy=False).reshape(c_out_g * groups, kh, kw, n, in_h,
                                          in_w)
    # patches: (C, kh, kw, N, out_h, out_w), or (N, C, kh, kw, out_h,
    # out_w) by image. col2im_cpu's sums in one C loop (3x faster), or
    # col2im_cpu itself on the transposed view.
    sy, sx, ph, pw, h, w = col2im_args
    by_image = patches if layout == _loops_convolution.COLUMNS else \
        patches.transpose(3, 0, 1, 2, 4, 5)  # a view
    n, c, kh, kw = by_image.shape[:4]
    img = numpy.zeros((n, c, h, w), patches.dtype)
    geometry = (kh, kw, sy, sx, ph, pw, col2im_kwargs['dy'],
                col2im_kwargs['dx'])
    into, geometry = _rows_as_columns(img, geometry)
    if patches.flags.c_contiguous and \
            _loops_convolution.add_convolution_patches(
                patches.reshape(_patches_shape(into.shape, geometry,
                                               layout)),
                into, geometry, layout):
        return img
    # C-ordered, not a view into col2im's padded image (its values and
    # order of axes, so the ops after it sum as they do in eager mode).
    return numpy.ascontiguousarray(conv.col2im_cpu(
        by_image, *col2im_args, **col2im_kwargs))


def _tensordot_into(W, gy, buffers):
    """``numpy.tensordot(W, gy, (0, 1))`` with its copy of ``gy`` (where
    it makes one) and its product in ``buffers``: the same transposes,
    reshapes and product (the same bits). A ``gy`` with its channels
    last (a convolution's output, as Chainer lays it out) is read as the
    F-ordered matrix tensordot reads it, not copied."""
    c_out = W.shape[0]
    w_t = W.transpose(1, 2, 3, 0).reshape(-1, c_out)
    gy_t = gy.transpose(1, 0, 2, 3).view()
    try:
        gy_t.shape = (c_out, gy.size // c_out)  # a view, as reshape's
    except AttributeError:  # reshape would copy: into a buffer
        gy_t = buffers.array(1, (c_out, gy.size // c_out), gy.dtype)
        gy_t.reshape((c_out, gy.shape[0]) + gy.shape[2:])[...] = \
            gy.transpose(1, 0, 2, 3)
    # Into buffer 0, the patches' (an input gradient gathers none).
    product = numpy.dot(w_t, gy_t, out=buffers.array(
        0, (len(w_t), gy_t.shape[1]), gy.dtype))
    return product.reshape(W.shape[1:] + (gy.shape[0],) + gy.shape[2:])


#: Does this CPU run the direct convolutions (AVX-512 and FMA)?
_DIRECT = _loops_convolution.direct_convolution_available()

#: The faster products of a convolution are probed (and taken where they
#: give the same bits) from the third call at a shape on: each probe runs
#: products as large as the convolution's.
PROBED_AFTER = 2

#: ``{(kernel, size classes, dtype): whether its other product ran
#: faster}`` (:func:`_runs_faster`), and the most classes it keeps (then
#: it starts again).
_FASTER = {}
_FASTER_KEPT = 4096


def _runs_faster(key, other, usual):
    """Does ``other()`` run faster than ``usual()``, two ways to compute
    the same bits, at ``key`` (a kernel's name, shapes and dtype)? Timed
    once per class of sizes (:func:`_size_class`; the better of two runs
    each) and remembered: one product per image is 2x faster on LeNet's
    layers and 1.3x to 1.9x slower on a text CNN's 128 channels."""
    key = _size_class(key)
    faster = _FASTER.get(key)
    if faster is None:
        if len(_FASTER) >= _FASTER_KEPT:
            _FASTER.clear()
        faster = _FASTER[key] = _best_time(other) < _best_time(usual)
    return faster


def _may_run_faster(key):
    """``False`` where :func:`_runs_faster` found the other way slower at
    sizes of ``key``'s class: the exact probe of its bits at ``key``'s
    shapes is then not worth its products (a text CNN's batches of every
    size and width would each pay one, for a way it never takes)."""
    return _FASTER.get(_size_class(key), True)


def _size_class(key):
    """``key`` with each size replaced by its bit length (32 to 63 are
    one class): the speeds of two ways to compute a product change
    little within such a class."""
    if isinstance(key, tuple):
        return tuple(_size_class(part) for part in key)
    return key.bit_length() if isinstance(key, int) else key


def _best_time(fn, runs=2):
    """The shortest of ``runs`` runs of ``fn()``, in seconds."""
    best = None
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        took = time.perf_counter() - start
        best = took if best is None else min(best, took)
    return best


def _products_per_image(W, gy, buffers):
    """The patches ``_tensordot_into`` gives, by image: (N, C, kh, kw,
    out_h, out_w), one product per image, with no transposed copy of
    ``gy`` (2x faster on LeNet's second layer, whose product of 6272
    columns runs at half the speed of its 196-column blocks)."""
    n, c_out = gy.shape[:2]
    w_t = W.transpose(1, 2, 3, 0).reshape(-1, c_out)
    block = gy.size // (n * c_out)
    product = numpy.matmul(
        w_t, numpy.ascontiguousarray(gy).reshape(n, c_out, block),
        out=buffers.array(0, (n, len(w_t), block), gy.dtype))
    return product.reshape((n,) + W.shape[1:] + gy.shape[2:])


def _per_image_grad_agrees(W, gy):
    """Does :func:`_products_per_image` give ``_tensordot_into``'s bits
    (probed once per shape: :func:`linear_ops.faster_order_agrees`)?"""
    n, c_out = gy.shape[:2]
    return gy.size > 0 and W.size > 0 and linear_ops.faster_order_agrees(
        _probe_products_per_image, n, W.size // c_out, c_out,
        gy.size // (n * c_out), gy.dtype, seen=PROBED_AFTER)


def _probe_products_per_image(images, rows, inner, block, dtype):
    a, b = linear_ops.probe_arrays(rows, inner, images * block, dtype)
    per_image = numpy.matmul(a, numpy.ascontiguousarray(
        b.reshape(inner, images, block).transpose(1, 0, 2)))
    return numpy.array_equal(a.dot(b).reshape(rows, images, block),
                             per_image.transpose(1, 0, 2))


def _conv_no_bias(x, W, groups, im2col_args, im2col_kwargs):
    """``Convolution2DFunction``'s CPU forward without bias (the gradient
    of a transposed convolution with respect to its input)."""
    col = conv.im2col_cpu(x, W.shape[2], W.shape[3], *im2col_args,
                          **im2col_kwargs)
    if groups == 1:
        y = numpy.tensordot(
            col, W, ((1, 2, 3), (1, 2, 3))).astype(x.dtype, copy=False)
        return numpy.rollaxis(y, 3, 1)
    n, c_in = x.shape[:2]
    c_out, _, kh, kw = W.shape
    out_h, out_w = col.shape[4:]
    col = col.transpose(1, 2, 3, 0, 4, 5).reshape(
        groups, c_in // groups * kh * kw, n * out_h * out_w)
    W = W.reshape(groups, c_out // groups, c_in // groups * kh * kw)
    y = numpy.matmul(W, col).astype(col.dtype, copy=False)
    return y.reshape(c_out, n, out_h, out_w).transpose(1, 0, 2, 3)


def _patches(x, kh, kw, sy, sx, ph, pw, dy=1, dx=1):
    """The patches of a convolution without ``cover_all``: a strided view
    ``(N, C, out_h, out_w, kh, kw)`` of the padded input."""
    pads = ((0, 0), (0, 0), (ph, ph), (pw, pw))
    window = (dy * (kh - 1) + 1, dx * (kw - 1) + 1)
    v = sliding_window_view(numpy.pad(x, pads), window, axis=(2, 3))
    return v[:, :, ::sy, ::sx, ::dy, ::dx]


def patch_matrix(x, kh, kw, sy, sx, ph, pw, dy=1, dx=1, buffers=None):
    """The patches of a convolution without ``cover_all`` as a C-ordered
    ``(N*out_h*out_w, C*kh*kw)`` matrix: ``im2col_cpu``'s values laid out
    exactly as ``numpy.tensordot`` lays them out for its product, so the
    products below give Chainer's results bit for bit. ``buffers``: a
    held ``ops.scratch.Scratch`` to gather them into."""
    rows = _gathered_patches(x, (kh, kw, sy, sx, ph, pw, dy, dx),
                             _loops_convolution.ROWS, buffers)
    if rows is None:
        v = _patches(x, kh, kw, sy, sx, ph, pw, dy, dx)
        rows = v.transpose(0, 2, 3, 1, 4, 5)
    return rows.reshape(-1, x.shape[1] * kh * kw)


def patch_columns(x, kh, kw, sy, sx, ph, pw, dy=1, dx=1, buffers=None):
    """``im2col_cpu``'s array ``(N, C, kh, kw, out_h, out_w)`` for a
    convolution without ``cover_all`` (into ``buffers``, as
    :func:`patch_matrix`)."""
    columns = _gathered_patches(x, (kh, kw, sy, sx, ph, pw, dy, dx),
                                _loops_convolution.COLUMNS, buffers)
    if columns is None:
        v = _patches(x, kh, kw, sy, sx, ph, pw, dy, dx)
        columns = numpy.ascontiguousarray(v.transpose(0, 1, 4, 5, 2, 3))
    return columns


def _gathered_patches(x, geometry, layout, buffers=None):
    """The patches copied by ``_loops_convolution.convolution_patches``
    in ``layout`` (one C loop, 3x to 5x faster than copying the strided
    view of ``_patches``), or ``None`` for arrays it does not take."""
    if type(x) is not numpy.ndarray or x.ndim != 4:
        return None
    shape = _patches_shape(x.shape, geometry, layout)
    if shape is None:
        return None
    out = numpy.empty(shape, x.dtype) if buffers is None else \
        buffers.array(0, shape, x.dtype)
    x, geometry = _rows_as_columns(x, geometry)
    if _loops_convolution.convolution_patches(
            x, out.reshape(_patches_shape(x.shape, geometry, layout)),
            geometry, layout):
        return out
    return None


def _patches_shape(image_shape, geometry, layout):
    """The shape of the patches of images of ``image_shape`` (N, C, H, W)
    for a convolution of ``geometry`` in ``layout``; ``None`` where they
    have no output."""
    kh, kw, sy, sx, ph, pw, dy, dx = geometry
    n, c, h, w = image_shape
    out_h = conv.get_conv_outsize(h, kh, sy, ph, d=dy)
    out_w = conv.get_conv_outsize(w, kw, sx, pw, d=dx)
    if out_h < 1 or out_w < 1:
        return None
    return {_loops_convolution.ROWS: (n, out_h, out_w, c, kh, kw),
            _loops_convolution.COLUMNS: (n, c, kh, kw, out_h, out_w),
            _loops_convolution.IMAGES_INSIDE: (c, kh, kw, n, out_h, out_w)
            }[layout]


def _rows_as_columns(x, geometry):
    """``(x, geometry)``, or for images one pixel wide and a kernel one
    wide (a text CNN's (3, 1) over its words) a view of them one pixel
    high, whose columns are their rows, and the same convolution of it:
    the same patches in the same order in every layout, while the C
    loops over them run along the words instead of a pixel at a time (5x
    to 10x faster for a text CNN's batch)."""
    kh, kw, sy, sx, ph, pw, dy, dx = geometry
    if x.shape[3] != 1 or kw != 1 or pw != 0:
        return x, geometry
    return x[:, :, :, 0][:, :, None, :], (1, kh, 1, sy, 0, ph, 1, dy)


def _add_to_rows(y, b):
    """``y += b`` for a C-ordered ``y`` whose last axis is ``b``'s: the
    same sums over rows of ``b`` repeated up to 512 times, where NumPy's
    loop over a short last axis (a convolution's channels) is 2x to 3x
    slower."""
    if b.dtype != y.dtype or not y.flags.c_contiguous:
        y += b
        return
    repeats = math.gcd(y.size // b.size, 512)
    y.reshape(-1, b.size * repeats)[...] += numpy.tile(b, repeats)


def _conv_grad_w(x, gy, w_shape, w_dtype, groups, im2col_args,
                 im2col_kwargs, buffers=None):
    """``Convolution2DGradW``'s CPU forward: the gradient of a convolution
    of ``x`` with respect to its filter, given the output gradient
    ``gy``; the patches gathered into ``buffers`` (a held
    ``ops.scratch.Scratch``), if given. Computed directly where that
    gives the same bits and runs faster (2x on LeNet's second layer)."""
    sy, sx, ph, pw = im2col_args
    if groups == 1 and buffers is not None and len(x) > 1 and \
            (sy, sx, im2col_kwargs['dy'], im2col_kwargs['dx']) == \
            (1, 1, 1, 1) and not im2col_kwargs['cover_all'] and \
            w_dtype == numpy.float32:
        key = ('direct grad_w', x.shape, gy.shape, x.dtype)
        blocks = _may_run_faster(key) and \
            _direct_grad_w_blocks(x, gy, w_shape, ph, pw)
        if blocks and _runs_faster(
                key, functools.partial(_direct_grad_w, x, gy, w_shape, ph,
                                       pw, blocks),
                functools.partial(_conv_grad_w_by_patches, x, gy, w_shape,
                                  w_dtype, groups, im2col_args,
                                  im2col_kwargs, buffers)):
            gW = _direct_grad_w(x, gy, w_shape, ph, pw, blocks)
            if gW is not None:
                return gW
    return _conv_grad_w_by_patches(x, gy, w_shape, w_dtype, groups,
                                   im2col_args, im2col_kwargs, buffers)


def _direct_grad_w(x, gy, w_shape, ph, pw, blocks):
    """The filter gradient of a convolution with stride and dilation 1 by
    ``_loops_convolution.direct_convolution_grad_w``, its inner axis cut
    in ``blocks`` (a block's size and rounding), or ``None`` for arrays it
    does not take."""
    gW = numpy.empty(w_shape, x.dtype)
    if _loops_convolution.direct_convolution_grad_w(x, gy, gW, ph, pw,
                                                    *blocks):
        return gW
    return None


#: The blocks OpenBLAS's kernels cut a product's inner axis into: the
#: sizes tried (``GEMM_Q``: 448 for SkylakeX's float32 kernels, 384 and
#: 256 for others), then one block; each with the roundings of the last
#: blocks tried (``GEMM_UNROLL_M``).
_BLOCKS_TRIED = (448, 384, 256, 320, 512, 192, 640, 128, 768, 1 << 62)
_ROUNDINGS_TRIED = (16, 8, 4, 32, 2, 1)


def _direct_grad_w_blocks(x, gy, w_shape, ph, pw):
    """The blocks (size, rounding) in which :func:`_direct_grad_w` gives
    the bits of Chainer's product of ``gy`` by the patches at these
    shapes, found by a probe from the third call at a shape on; else
    ``False``."""
    if not (_DIRECT and type(x) is numpy.ndarray and
            type(gy) is numpy.ndarray and
            x.dtype == gy.dtype == numpy.float32 and x.size and gy.size) \
            or _grad_w_copies(x.shape, gy.shape, ph, pw) > \
            DIRECT_GRAD_W_BYTES:
        return False
    return linear_ops.probed(_probe_grad_w_blocks, x.shape, gy.shape,
                             tuple(w_shape), ph, pw, x.dtype,
                             seen=PROBED_AFTER)


#: The most bytes the direct filter gradient's copies may take (beyond
#: them, the products with the patches).
DIRECT_GRAD_W_BYTES = 32 << 20


def _grad_w_copies(x_shape, gy_shape, ph, pw):
    """The bytes of the copies ``direct_convolution_grad_w`` makes: the
    zero-padded images, and the output's gradient with the channels last
    (rounded up to 16 of them)."""
    n, c, h, w = x_shape
    outs = -(-gy_shape[1] // 16) * 16
    return 4 * (n * c * (h + 2 * ph) * (w + 2 * pw) +
                n * gy_shape[2] * gy_shape[3] * outs)


def _probe_grad_w_blocks(x_shape, gy_shape, w_shape, ph, pw, dtype):
    x = linear_ops.probe_values(x_shape, dtype, 0)
    gy = linear_ops.probe_values(gy_shape, dtype, 1)
    expected = numpy.tensordot(gy, conv.im2col_cpu(
        x, w_shape[2], w_shape[3], 1, 1, ph, pw), ((0, 2, 3), (0, 4, 5)))
    for blocks in _distinct_blocks(gy.size // gy_shape[1]):
        gW = _direct_grad_w(x, gy, w_shape, ph, pw, blocks)
        if gW is None:
            return False
        if numpy.array_equal(gW, expected):
            return blocks
    return False


def _distinct_blocks(inner):
    """The (size, rounding) pairs of :data:`_BLOCKS_TRIED` and
    :data:`_ROUNDINGS_TRIED` that cut an inner axis of ``inner`` into
    different blocks, each the first that cuts it so (a size at least as
    long as the axis cuts none, and a rounding matters only where the
    last two blocks are halves)."""
    seen = set()
    for size in _BLOCKS_TRIED:
        for rounding in _ROUNDINGS_TRIED:
            cut = tuple(_blocks_of(inner, size, rounding))
            if cut not in seen:
                seen.add(cut)
                yield size, rounding


def _blocks_of(inner, size, rounding):
    """The blocks' lengths in which OpenBLAS's driver cuts an inner axis
    of ``inner`` (as ``_loops_convolution.direct_convolution_grad_w``
    does): ``size`` at a time while two or more are left, then two
    halves rounded up to ``rounding`` where more than one is."""
    start = 0
    while start < inner:
        left = inner - start
        block = left
        if left >= 2 * size:
            block = size
        elif left > size:
            block = (left // 2 + rounding - 1) // rounding * rounding
        yield block
        start += block


def _conv_grad_w_by_patches(x, gy, w_shape, w_dtype, groups, im2col_args,
                            im2col_kwargs, buffers=None):
    """:func:`_conv_grad_w` by products with the patches. (It gathers the
    patches again: keeping the forward's for it saved 0.25 ms of LeNet's
    step but held 6 MB from the forward to the backward, and the
    allocations around them then took fresh pages every step: 5.0 -> 8.2
    ms.)"""
    kh, kw = w_shape[2:]
    exact_patches = not im2col_kwargs['cover_all']
    dilate = dict(dy=im2col_kwargs['dy'], dx=im2col_kwargs['dx'])
    # Chainer's copy of a non-contiguous gy with a unit axis (NumPy needs
    # it, chainer/chainer#2744): then C-ordered, so is its product's
    # operand (the output of a text CNN's convolution, one pixel wide).
    if groups == 1 and not (gy.flags.c_contiguous or
                            gy.flags.f_contiguous) and 1 in gy.shape:
        gy = numpy.ascontiguousarray(gy)
    if groups == 1 and exact_patches and len(x) > 1:
        # The product tensordot(gy, col, ((0, 2, 3), (0, 4, 5))) makes: for
        # more than one image it copies the patches C-ordered. (For one it
        # reshapes them without a copy, F-ordered, and BLAS sums in
        # another order: that case takes tensordot itself, below.)
        c_out = gy.shape[1]
        gy = gy.transpose(1, 0, 2, 3).reshape(c_out, -1)
        columns = _columns_for_grad_w(x, gy, (kh, kw) + tuple(im2col_args)
                                      + (dilate['dy'], dilate['dx']),
                                      buffers)
        if columns is not None:  # (gy col)^T as col^T gy^T: 1.4x faster
            return numpy.ascontiguousarray(columns.dot(gy.T).T).astype(
                w_dtype, copy=False).reshape(w_shape)
        col = patch_matrix(x, kh, kw, *im2col_args, buffers=buffers,
                           **dilate)
        return gy.dot(col).astype(w_dtype, copy=False).reshape(w_shape)
    if groups == 1:
        col = patch_columns(x, kh, kw, *im2col_args, **dilate) \
            if exact_patches else conv.im2col_cpu(x, kh, kw, *im2col_args,
                                                  **im2col_kwargs)
        return numpy.tensordot(gy, col, ((0, 2, 3), (0, 4, 5))).astype(
            w_dtype, copy=False)
    n, c_in = x.shape[:2]
    _, c_out, out_h, out_w = gy.shape
    col = conv.im2col_cpu(x, kh, kw, *im2col_args, **im2col_kwargs)
    col = col.transpose(1, 2, 3, 0, 4, 5).reshape(
        groups, c_in // groups * kh * kw, n * out_h * out_w)
    col = col.transpose(0, 2, 1)
    gy = gy.transpose(1, 0, 2, 3).reshape(
        groups, c_out // groups, n * out_h * out_w)
    gW = numpy.matmul(gy, col).astype(w_dtype, copy=False)
    return gW.reshape(c_out, c_in // groups, kh, kw)


def _columns_for_grad_w(x, gy_t, geometry, buffers):
    """The patches of ``x`` as a C-ordered (C * kh * kw, N * out_h *
    out_w) matrix, where the product of ``gy_t`` (the output gradient as
    a (c_out, N * out_h * out_w) matrix) by them transposed gives the
    bits of ``gy_t`` by the patches as rows (probed once per shape:
    :func:`linear_ops.faster_order_agrees`); else ``None``."""
    if type(x) is not numpy.ndarray or x.dtype != gy_t.dtype or \
            gy_t.size == 0 or not linear_ops.faster_order_agrees(
                _probe_transposed_grad_w, len(gy_t), gy_t.shape[1],
                x.shape[1] * geometry[0] * geometry[1], x.dtype,
                seen=PROBED_AFTER):
        return None
    columns = _gathered_patches(x, geometry, _loops_convolution.IMAGES_INSIDE,
                                buffers)
    return None if columns is None else columns.reshape(-1, gy_t.shape[1])


def _probe_transposed_grad_w(rows, inner, cols, dtype):
    a, b = linear_ops.probe_arrays(rows, inner, cols, dtype)
    return numpy.array_equal(a.dot(b), numpy.ascontiguousarray(b.T).dot(
        a.T).T)


def _holding(scratch, fn, *settings):
    """``(a, b) -> fn(a, b, *settings, buffers)``, with ``scratch`` held
    for the call (``_conv_transpose``, ``_conv_grad_w``)."""
    def run(a, b):
        with scratch.held() as buffers:
            return fn(a, b, *settings, buffers)
    return run


def _conv_like_grad(grad_x, grad_w):
    """The gradient rule of a (de)convolution ``(x, W[, b])``: ``grad_x(gy,
    W)``, ``grad_w(x, gy)`` and the sum of ``gy`` for the bias."""
    def grad(xs, ys, gys, wanted):
        x, W = xs[0], xs[1]
        gy, = gys
        gx = grad_x(gy, W) if wanted[0] else None
        gW = grad_w(x, gy) if wanted[1] else None
        if len(xs) == 2:
            return gx, gW
        gb = gy.sum(axis=(0, 2, 3)) if wanted[2] else None
        return gx, gW, gb
    return grad


def _conv_attrs(node, **extra):
    attrs = {'stride': (node.sy, node.sx), 'pad': (node.ph, node.pw),
             'dilate': (node.dy, node.dx), 'groups': node.groups}
    attrs.update(extra)
    return attrs


@lowering(convolution_2d.Convolution2DFunction)
def lower_convolution_2d(node, ctx):
    """Convolution by im2col and a batched matmul."""
    if ctx.xp is not numpy or node._use_ideep or node.cudnn_fast:
        return None
    # The patches, a temporary of megabytes, in buffers kept from call to
    # call (see ops.scratch.Scratch), which the graph's kernels take turns
    # with. The forward and the gradient read the number of images from
    # the arrays.
    scratch = ctx.scratch or Scratch()
    return Kernel(_conv_forward(node, ctx, scratch),
                  attrs=_conv_attrs(node, cover_all=node.cover_all),
                  grad=GradRule(_conv_grad(node, ctx, scratch),
                                inputs=(0, 1),
                                onnx=_conv_grad_to_onnx(node, ctx)),
                  onnx=_conv_to_onnx(node),
                  lengths=_conv_lengths(node, ctx))


def _conv_lengths(node, ctx):
    """The ``Kernel.lengths`` rule of a convolution: its kernels take any
    number of images; rows on a spatial axis (the words of a text CNN,
    padded to the longest sentence) take the kernels lowered for each
    size met (:func:`_lowered_per_size`) (:func:`_rows_of_convolution`)."""
    def geometry(axis):
        return (None if axis not in (2, 3) else
                (node.sy, node.ph, node.dy) if axis == 2 else
                (node.sx, node.pw, node.dx))
    return _rows_of_convolution(node, ctx, geometry, _lowered_per_size)


def _rows_of_convolution(node, ctx, geometry, per_size):
    """The ``Kernel.lengths`` rule of a convolution whose ``geometry(axis)``
    is ``(stride, pad, dilate)`` of a spatial axis (``None`` for another):
    any number of images; rows on a spatial axis where the stride is 1 and
    windows do not cover all, each output as many as its input, plus
    twice the padding, less the dilated window's extent past its first
    row, by the kernel ``per_size(node, ctx, rule)`` makes for any size."""
    @takes_widest
    def lengths(rows):
        found = rows[0]
        if found is None or any(r is not None for r in rows[1:]):
            return None
        if found.axis == 0:
            return None if found.widest else Follow((found,))
        spatial = geometry(found.axis)
        if spatial is None or node.cover_all or spatial[0] != 1:
            return None
        _, pad, dilate = spatial
        offset = 2 * pad - dilate * (ctx.in_shapes[1][found.axis] - 1)
        out = found._replace(parts=found.parts + ((None, offset),)) \
            if offset else found
        return Follow((out,), per_size(node, ctx, lengths))
    return lengths


#: The most sizes :func:`_lowered_per_size` keeps kernels for.
_SIZES_KEPT = 64


def _lowered_per_size(node, ctx, lengths):
    """The kernel of a convolution whose input's spatial size varies: on
    each call, the forward and gradient lowered for that input's shape
    (kept for the last :data:`_SIZES_KEPT` shapes met), so each size runs
    the kernels a program recorded at it would."""
    lowered = collections.OrderedDict()
    k_h, k_w = ctx.in_shapes[1][2:]

    def kernel_for(x):
        kernel = lowered.get(x.shape)
        if kernel is None:
            n, _, h, w = x.shape
            out = (n, ctx.out_shapes[0][1],
                   conv.get_conv_outsize(h, k_h, node.sy, node.ph, d=node.dy),
                   conv.get_conv_outsize(w, k_w, node.sx, node.pw, d=node.dx))
            kernel = lower_convolution_2d(node, ctx._replace(
                in_shapes=(x.shape,) + tuple(ctx.in_shapes[1:]),
                out_shapes=(out,)))
            if len(lowered) >= _SIZES_KEPT:
                lowered.popitem(last=False)
            lowered[x.shape] = kernel
        return kernel

    def run(x, *rest):
        return kernel_for(x).fn(x, *rest)

    def grad(xs, ys, gys, wanted):
        return kernel_for(xs[0]).grad.fn(xs, ys, gys, wanted)
    first = lower_convolution_2d(node, ctx)
    return first._replace(fn=run, grad=first.grad._replace(fn=grad),
                          lengths=lengths)


def _conv_forward(node, ctx, scratch):
    """The forward of a convolution ``(x, W[, b])``.

    Recorded for training (backprop enabled), it gives Chainer's sums bit
    for bit, so that long training runs do not drift apart from eager
    ones, in Chainer's layout (the transposed view: a C-ordered copy
    makes the batch normalization after it 3.5x faster, but its
    reductions then sum in another order, and training drifts); for
    inference, the faster product."""
    if node.groups > 1:
        return _grouped_conv(node, ctx)
    if not chainer.config.enable_backprop:
        return _per_image_conv(node, ctx, scratch)
    if node.cover_all:
        return _dense_conv(node, ctx)
    return _windows_conv(node, ctx, scratch)


def _conv_sizes(ctx):
    """``(n, c_in, c_out, kh, kw, out_h, out_w)`` of a convolution."""
    n, c_in = ctx.in_shapes[0][:2]
    c_out, _, kh, kw = ctx.in_shapes[1]
    out_h, out_w = ctx.out_shapes[0][2:]
    return n, c_in, c_out, kh, kw, out_h, out_w


def _conv_im2col_settings(node, ctx):
    """The positional and keyword arguments of ``conv.im2col_cpu`` for a
    convolution's forward."""
    _, _, kh, kw = ctx.in_shapes[1]
    out_h, out_w = ctx.out_shapes[0][2:]
    col_args = (kh, kw, node.sy, node.sx, node.ph, node.pw)
    col_kwargs = dict(cover_all=node.cover_all, dy=node.dy, dx=node.dx,
                      out_h=out_h, out_w=out_w)
    return col_args, col_kwargs


def _per_image_conv(node, ctx, scratch):
    """The forward for inference: one product per image."""
    _, c_in, c_out, kh, kw, out_h, out_w = _conv_sizes(ctx)
    col_args, col_kwargs = _conv_im2col_settings(node, ctx)
    k = c_in * kh * kw
    dilate = dict(dy=node.dy, dx=node.dx)

    def per_image(x, W, b=None):
        # One product per image, W (c_out, k) by its patches (k, out_h *
        # out_w), on im2col's own layout: the result comes out C-ordered
        # (N, c_out, out_h, out_w), with no transposing copy of the patches
        # as tensordot makes (2x to 4x faster on LeNet's layers here), but
        # its sums may round differently from Chainer's in the last bit.
        with scratch.held() as buffers:
            col = conv.im2col_cpu(x, *col_args, **col_kwargs) \
                if node.cover_all else patch_columns(
                    x, *col_args, buffers=buffers, **dilate)
            y = numpy.matmul(W.reshape(c_out, k),
                             col.reshape(len(x), k, out_h * out_w))
        y = y.astype(x.dtype, copy=False).reshape(
            len(x), c_out, out_h, out_w)
        if b is not None:
            y += b.reshape(1, c_out, 1, 1)
        return y
    # Each output channel is linear in its own filter and bias, so a scale
    # per channel may be folded into them (passes/fuse.py).
    per_image.per_output_channel = True
    return per_image


def _dense_conv(node, ctx):
    """The forward with ``cover_all``, recorded for training: im2col and
    tensordot, as Chainer's."""
    col_args, col_kwargs = _conv_im2col_settings(node, ctx)

    def dense(x, W, b=None):
        col = conv.im2col_cpu(x, *col_args, **col_kwargs)
        y = numpy.tensordot(
            col, W, ((1, 2, 3), (1, 2, 3))).astype(x.dtype, copy=False)
        if b is not None:
            y += b
        return numpy.rollaxis(y, 3, 1)
    return dense


def _windows_conv(node, ctx, scratch):
    """The forward without ``cover_all``, recorded for training."""
    _, c_in, c_out, kh, kw, out_h, out_w = _conv_sizes(ctx)
    col_args, _ = _conv_im2col_settings(node, ctx)
    k = c_in * kh * kw
    direct = _DIRECT and \
        (node.sy, node.sx, node.dy, node.dx) == (1, 1, 1, 1)

    def by_blas(x, W, b):
        # ``dense``'s product (the one tensordot makes), with the patches
        # gathered in one copy instead of im2col's and tensordot's two;
        # or one product per image, where it gives the same bits.
        with scratch.held() as buffers:
            by_image = functools.partial(_forward_per_image, x, W, k,
                                         out_h * out_w, buffers, col_args,
                                         node)
            as_rows = functools.partial(_forward_as_rows, x, W, k, buffers,
                                        col_args, node)
            key = ('forward', x.shape, W.shape, x.dtype)
            if _may_run_faster(key) and \
                    _per_image_forward_agrees(x, W, k, out_h * out_w) and \
                    _runs_faster(key, by_image, as_rows):
                y = by_image()
            else:
                y = as_rows()
        y = y.reshape(len(x), out_h, out_w, c_out)
        if b is not None:
            _add_to_rows(y, b)
        return y

    def windows(x, W, b=None):
        # The direct convolution where it gives the same bits, and runs
        # faster (1.8x to 2.5x on LeNet's layers, its bias added in the
        # loop).
        key = ('direct', x.shape, W.shape, x.dtype)
        if direct and _may_run_faster(key) and \
                _direct_agrees(x, W, b, node) and _runs_faster(
                    key, functools.partial(_direct_forward, x, W, b, node),
                    functools.partial(by_blas, x, W, b)):
            y = _direct_forward(x, W, b, node)
            if y is not None:
                return numpy.rollaxis(y, 3, 1)
        return numpy.rollaxis(by_blas(x, W, b), 3, 1)
    return windows


def _direct_forward(x, W, b, node):
    """The convolution's output (N, out_h, out_w, c_out) by
    ``_loops_convolution.direct_convolution``, its bias added, or
    ``None`` for arrays it does not take."""
    n, _, h, w = x.shape
    y = numpy.empty((n, h + 2 * node.ph - W.shape[2] + 1,
                     w + 2 * node.pw - W.shape[3] + 1, len(W)), x.dtype)
    if _loops_convolution.direct_convolution(x, W, b, y, node.ph, node.pw):
        return y
    return None


def _direct_agrees(x, W, b, node):
    """Does :func:`_direct_forward` take these arrays and give the bits
    of the patches as rows by ``W^T`` (probed once per shape, from the
    third call on, as the products per image)?"""
    return type(x) is numpy.ndarray and x.dtype == W.dtype == \
        numpy.float32 and (b is None or b.dtype == x.dtype) and \
        x.size > 0 and W.flags.c_contiguous and \
        _wide_enough(x.shape[3] + 2 * node.pw - W.shape[3] + 1) and \
        linear_ops.faster_order_agrees(
            _probe_direct_forward, x.shape, W.shape, node.ph, node.pw,
            x.dtype, seen=PROBED_AFTER)


def _probe_direct_forward(x_shape, w_shape, ph, pw, dtype):
    x = linear_ops.probe_values(x_shape, dtype, 0)
    W = linear_ops.probe_values(w_shape, dtype, 1)
    node = _Geometry(1, 1, ph, pw, 1, 1)
    y = _direct_forward(x, W, None, node)
    kh, kw = w_shape[2:]
    expected = _forward_as_rows(x, W, W[0].size, None, (kh, kw, 1, 1, ph, pw),
                                node)
    return y is not None and numpy.array_equal(y.reshape(expected.shape),
                                               expected)


#: A convolution's strides, padding and dilations, as its node has them.
_Geometry = collections.namedtuple('_Geometry', 'sy sx ph pw dy dx')


def _per_image_forward_agrees(x, W, k, block):
    """Does :func:`_forward_per_image` give the bits of the patches as
    rows by ``W^T`` (probed once per shape)?"""
    return type(x) is numpy.ndarray and x.dtype == W.dtype and \
        x.size > 0 and linear_ops.faster_order_agrees(
            _probe_forward_per_image, len(x), block, k, len(W), x.dtype,
            seen=PROBED_AFTER)


def _forward_as_rows(x, W, k, buffers, col_args, node):
    """A training convolution's product as ``tensordot`` makes it: the
    patches as rows by ``W^T``."""
    col = patch_matrix(x, *col_args, dy=node.dy, dx=node.dx,
                       buffers=buffers)
    return col.dot(W.reshape(len(W), k).T).astype(x.dtype, copy=False)


def _forward_per_image(x, W, k, block, buffers, col_args, node):
    """A training convolution's product in Chainer's layout, (N * out_h *
    out_w, c_out), computed as ``W`` by each image's patches in im2col's
    layout, written transposed: 2x faster on LeNet's first layer (25
    products of a one-channel image)."""
    c_out = len(W)
    col = patch_columns(x, *col_args, dy=node.dy, dx=node.dx,
                        buffers=buffers)
    y = numpy.empty((len(x) * block, c_out), x.dtype)
    numpy.matmul(W.reshape(c_out, k), col.reshape(len(x), k, block),
                 out=y.reshape(len(x), block, c_out).transpose(0, 2, 1))
    return y


def _probe_forward_per_image(images, block, inner, cols, dtype):
    a, b = linear_ops.probe_arrays(images * block, inner, cols, dtype)
    W = numpy.ascontiguousarray(b.T)  # (c_out, k), as the filters are
    out = numpy.empty((images, block, cols), dtype)
    numpy.matmul(W, numpy.ascontiguousarray(
        a.reshape(images, block, inner).transpose(0, 2, 1)),
        out=out.transpose(0, 2, 1))
    return numpy.array_equal(a.dot(W.T), out.reshape(-1, cols))


def _grouped_conv(node, ctx):
    """The forward of a grouped convolution: im2col and a batched
    matmul, as Chainer's."""
    _, c_in, c_out, kh, kw, out_h, out_w = _conv_sizes(ctx)
    col_args, col_kwargs = _conv_im2col_settings(node, ctx)
    groups = node.groups

    def grouped(x, W, b=None):
        col = conv.im2col_cpu(x, *col_args, **col_kwargs)
        col = col.transpose(1, 2, 3, 0, 4, 5).reshape(
            groups, c_in // groups * kh * kw, len(x) * out_h * out_w)
        W = W.reshape(groups, c_out // groups, c_in // groups * kh * kw)
        y = numpy.matmul(W, col).astype(col.dtype, copy=False)
        y = y.reshape(c_out, len(x), out_h, out_w).transpose(1, 0, 2, 3)
        if b is not None:
            y += b.reshape(1, b.size, 1, 1)
        return y
    return grouped


def _conv_grad(node, ctx, scratch):
    """The gradient rule of a convolution, as
    Convolution2DFunction.backward: Deconvolution2DFunction's forward,
    Convolution2DGradW and Sum."""
    in_h, in_w = ctx.in_shapes[0][2:]
    w_shape, w_dtype = ctx.in_shapes[1], ctx.in_dtypes[1]
    dilate = dict(dy=node.dy, dx=node.dx)
    col2im_args = (node.sy, node.sx, node.ph, node.pw, in_h, in_w)
    im2col_args = (node.sy, node.sx, node.ph, node.pw)
    im2col_kwargs = dict(cover_all=node.cover_all, **dilate)
    return _conv_like_grad(
        _holding(scratch, _conv_transpose, node.groups, col2im_args,
                 dilate),
        _holding(scratch, _conv_grad_w, w_shape, w_dtype, node.groups,
                 im2col_args, im2col_kwargs))


@lowering(deconvolution_2d.Deconvolution2DFunction)
def lower_deconvolution_2d(node, ctx):
    """Transposed convolution by tensordot (grouped: batched matmul) and
    col2im."""
    if ctx.xp is not numpy or node._use_ideep:
        return None
    _, c_in, in_h, in_w = ctx.in_shapes[0]
    _, c_out_g, kh, kw = ctx.in_shapes[1]
    out_h, out_w = ctx.out_shapes[0][2:]
    groups = node.groups
    im_args = (node.sy, node.sx, node.ph, node.pw, out_h, out_w)
    im_kwargs = dict(dy=node.dy, dx=node.dx)

    def dense_col(x, W):
        col = numpy.tensordot(W, x, (0, 1)).astype(x.dtype, copy=False)
        return numpy.rollaxis(col, 3)

    def grouped_col(x, W):
        n = len(x)
        x = x.transpose(1, 0, 2, 3).reshape(
            groups, c_in // groups, n * in_h * in_w)
        W = W.reshape(groups, c_in // groups, c_out_g * kh * kw)
        col = numpy.matmul(W.transpose(0, 2, 1), x).astype(x.dtype,
                                                           copy=False)
        col = col.reshape(c_out_g * groups, kh, kw, n, in_h, in_w)
        return col.transpose(3, 0, 1, 2, 4, 5)

    to_col = grouped_col if groups > 1 else dense_col

    def deconv(x, W, b=None):
        y = conv.col2im_cpu(to_col(x, W), *im_args, **im_kwargs)
        if b is not None:
            y += b.reshape((1, b.size, 1, 1))
        return y

    # Deconvolution2DFunction._set_cover_all, as its backward computes it.
    cover_all = (
        in_h != conv.get_conv_outsize(out_h, kh, node.sy, node.ph,
                                      d=node.dy)
        or in_w != conv.get_conv_outsize(out_w, kw, node.sx, node.pw,
                                         d=node.dx))
    w_shape, w_dtype = ctx.in_shapes[1], ctx.in_dtypes[1]
    im2col_args = (node.sy, node.sx, node.ph, node.pw)
    im2col_kwargs = dict(cover_all=cover_all, dy=node.dy, dx=node.dx)

    # As Deconvolution2DFunction.backward: Convolution2DFunction's
    # forward, Convolution2DGradW (of gy and x) and Sum.
    grad = _conv_like_grad(
        lambda gy, W: _conv_no_bias(gy, W, groups, im2col_args,
                                    im2col_kwargs),
        lambda x, gy: _conv_grad_w(gy, x, w_shape, w_dtype, groups,
                                   im2col_args, im2col_kwargs))

    return Kernel(deconv, attrs=_conv_attrs(node, outsize=(out_h, out_w)),
                  grad=GradRule(grad, inputs=(0, 1)),
                  onnx=_deconv_to_onnx(node), lengths=rows_follow_first)


@lowering(embed_id.EmbedIDFunction)
def lower_embed_id(node, ctx):
    """Row lookup ``W[x]``; rows of ``ignore_label`` ids are zero."""
    xp = ctx.xp
    ignore_label = node.ignore_label
    w_shape = ctx.in_shapes[1]
    if xp is numpy:
        add_at = numpy.add.at
    else:
        import cupyx
        add_at = cupyx.scatter_add

    def grad(xs, ys, gys, wanted):
        # As EmbedIDGrad: rows of gy summed into the rows of gW their ids
        # name, in order; ids equal to ignore_label add nothing. (With no
        # ids at all EmbedIDGrad fails to reshape gy; this gives zeros.)
        if not wanted[1]:
            return None, None
        x = xs[0].ravel()
        gy = gys[0].reshape(x.size, w_shape[1])
        gW = xp.zeros(w_shape, dtype=gy.dtype)
        if ignore_label is not None:
            valid = x != ignore_label
            if xp is numpy:
                x, gy = x[valid], gy[valid]
            else:  # no boolean-mask indexing (it synchronizes)
                x = xp.where(valid, x, 0)
                gy = gy * valid[:, None]
        add_at(gW, x, gy)
        return None, gW

    rule = GradRule(grad, inputs=(0,),
                    onnx=_embed_grad_to_onnx(ignore_label, w_shape))
    if ignore_label is None:
        return Kernel(lambda x, W: W[x], grad=rule,
                      onnx=_embed_to_onnx(None), lengths=rows_in_place)

    def embed(x, W):
        mask = x == ignore_label
        return xp.where(mask[..., None], 0, W[xp.where(mask, 0, x)])
    return Kernel(embed, attrs={'ignore_label': ignore_label}, grad=rule,
                  onnx=_embed_to_onnx(ignore_label), lengths=rows_in_place)


def _export_error(message):
    from chainerjit.errors import ExportError
    return ExportError(message)


def _conv_grad_to_onnx(node, ctx):
    """A convolution's gradient in ONNX (one group, no ``cover_all``, one
    dtype): ``gx`` the transposed convolution of ``gy`` by ``W``; ``gW``
    the convolution of ``x`` by ``gy`` with images and channels swapped
    (strides and dilations swapped too), cut to the kernel's size; ``gb``
    the sums of ``gy`` over images and positions."""
    x_shape, w_shape = ctx.in_shapes[0], ctx.in_shapes[1]
    out_hw = ctx.out_shapes[0][2:]
    strides, dilations = [node.sy, node.sx], [node.dy, node.dx]
    pads = [node.ph, node.pw] * 2

    def convert(b, xs, ys, gys, wanted):
        if node.groups != 1 or node.cover_all or \
                len(set(ctx.in_dtypes)) != 1:
            raise _export_error('this gradient of Convolution2DFunction')
        x, W = xs[0], xs[1]
        gy, = gys
        found = [None, None]
        if wanted[0]:
            extra = [x_shape[2 + a] - ((out_hw[a] - 1) * strides[a] -
                                       2 * pads[a] + dilations[a] *
                                       (w_shape[2 + a] - 1) + 1)
                     for a in range(2)]
            if any(not 0 <= e < max(s, d)
                   for e, s, d in zip(extra, strides, dilations)):
                raise _export_error('this gradient of Convolution2DFunction')
            found[0] = b.op('ConvTranspose', [gy, W], strides=strides,
                            pads=pads, dilations=dilations,
                            kernel_shape=list(w_shape[2:]),
                            output_padding=extra)[0]
        if wanted[1]:
            swapped = [b.op('Transpose', [v], perm=[1, 0, 2, 3])[0]
                       for v in (x, gy)]
            products = b.op('Conv', swapped, strides=dilations,
                            dilations=strides, pads=pads,
                            kernel_shape=list(out_hw))[0]
            cut = b.op('Slice', [products, b.int64s([0, 0]),
                                 b.int64s(list(w_shape[2:])),
                                 b.int64s([2, 3])])[0]
            found[1] = b.op('Transpose', [cut], perm=[1, 0, 2, 3])[0]
        if len(wanted) == 3:
            found.append(b.op('ReduceSum', [gy, b.int64s([0, 2, 3])],
                              keepdims=0)[0] if wanted[2] else None)
        return tuple(found)
    return convert


def _conv_to_onnx(node):
    """Conv. With ``cover_all`` Chainer's im2col pads the bottom and the
    right by ``stride - 1`` more zeros (which only matters where it adds
    an output row or column): asymmetric ``pads`` say the same."""
    strides, dilations = [node.sy, node.sx], [node.dy, node.dx]
    pads = [node.ph, node.pw, node.ph, node.pw]
    if node.cover_all:
        pads[2] += node.sy - 1
        pads[3] += node.sx - 1
    groups = node.groups

    def convert(b, ins, outs):
        kernel = list(b.in_shapes[1][2:])
        for i in range(2):
            size = b.in_shapes[0][2 + i] + pads[i] + pads[i + 2]
            extent = (kernel[i] - 1) * dilations[i] + 1
            if (size - extent) // strides[i] + 1 != b.out_shapes[0][2 + i]:
                raise _export_error(
                    'Convolution2DFunction: unexpected output size %s'
                    % (b.out_shapes[0],))
        b.op('Conv', linear_ops.cast_to_x(b, ins), outs,
             kernel_shape=kernel, strides=strides, pads=pads,
             dilations=dilations, group=groups)
    return convert


def _deconv_to_onnx(node):
    """ConvTranspose with explicit pads: Chainer's col2im crops the full
    transposed convolution at ``pad`` to ``outsize``; where ``outsize``
    reaches past the full result's end the rest is zeros, which is
    ConvTranspose's ``output_padding``."""
    strides, dilations = [node.sy, node.sx], [node.dy, node.dx]
    begin = [node.ph, node.pw]
    groups = node.groups

    def convert(b, ins, outs):
        kernel = list(b.in_shapes[1][2:])
        end, output_padding = [], []
        for i in range(2):
            full = (strides[i] * (b.in_shapes[0][2 + i] - 1)
                    + (kernel[i] - 1) * dilations[i] + 1)
            rest = full - begin[i] - b.out_shapes[0][2 + i]
            end.append(max(rest, 0))
            output_padding.append(max(-rest, 0))
        attrs = {}
        if any(output_padding):
            attrs['output_padding'] = output_padding
        b.op('ConvTranspose', linear_ops.cast_to_x(b, ins), outs,
             kernel_shape=kernel, strides=strides, pads=begin + end,
             dilations=dilations, group=groups, **attrs)
    return convert


def _embed_to_onnx(ignore_label):
    """Gather of rows; ids equal to ``ignore_label`` give zero rows (they
    gather row 0, then Where replaces it)."""
    def convert(b, ins, outs):
        x, W = ins
        if ignore_label is None:
            b.op('Gather', [W, x], outs, axis=0)
            return
        mask, = b.op('Equal', [x, b.constant(
            numpy.asarray(ignore_label, dtype=b.in_dtypes[0]))])
        zero_id = b.constant(numpy.zeros((), dtype=b.in_dtypes[0]))
        ids, = b.op('Where', [mask, zero_id, x])
        rows, = b.op('Gather', [W, ids], axis=0)
        row_mask, = b.op('Unsqueeze', [mask, b.int64s([-1])])
        zero = b.constant(numpy.zeros((), dtype=b.in_dtypes[1]))
        b.op('Where', [row_mask, zero, rows], outs)
    return convert


def _embed_grad_to_onnx(ignore_label, w_shape):
    """The gradient of ``W`` as the VM's: rows of ``gy`` added into zeros
    at their ids (``ScatterND``); rows of ``ignore_label`` ids are zeroed
    first, and add to row 0."""
    def convert(b, xs, ys, gys, wanted):
        if not wanted[1]:
            return None, None
        ids = b.single('Reshape', xs[0], b.int64s([-1]))
        gy = b.single('Reshape', gys[0], b.int64s(
            [int(numpy.prod(b.in_shapes[0])), w_shape[1]]), allowzero=1)
        if ignore_label is not None:
            ids, gy = _embed_ignored(b, ids, gy, ignore_label)
        ids = b.single('Unsqueeze', b.cast(ids, b.in_dtypes[0],
                                           numpy.int64), b.int64s([1]))
        return None, math_ops.onnx_scatter_add(b, w_shape, ids, gy,
                                               b.out_dtypes[0])
    return convert


def _embed_ignored(b, ids, gy, ignore_label):
    """``ids`` with those equal to ``ignore_label`` made 0, and ``gy``
    with their rows zero."""
    ignored = b.single('Equal', ids, b.constant(
        numpy.asarray(ignore_label, dtype=b.in_dtypes[0])))
    ids = b.single('Where', ignored, b.constant(
        numpy.zeros((), b.in_dtypes[0])), ids)
    gy = b.single('Where', b.single('Unsqueeze', ignored, b.int64s([1])),
                  b.constant(numpy.zeros((), b.out_dtypes[0])), gy)
    return ids, gy


@lowering(convolution_nd.ConvolutionND)
def lower_convolution_nd(node, ctx):
    """An N-dimensional convolution (``convolution_1d``, ``_3d``, ``_nd``)
    by its own forward (im2col and a product: Chainer's bits); the
    gradient as Chainer's backward computes it: the input's by
    ``DeconvolutionND``'s forward, the filter's by
    ``ConvolutionNDGradW``'s, the bias's by a sum over all axes but the
    channels."""
    if ctx.xp is not numpy:
        return None
    grad_x = deconvolution_nd.DeconvolutionND(
        node.ndim, node.stride, node.pad, ctx.in_shapes[0][2:],
        dilate=node.dilate, groups=node.groups)
    return Kernel(own_forward(node), attrs={
        'stride': node.stride, 'pad': node.pad, 'dilate': node.dilate,
        'groups': node.groups, 'cover_all': node.cover_all},
        grad=_nd_grad(node, ctx, grad_x, lambda x, gy: (x, gy)),
        onnx=None if node.cover_all else _conv_nd_to_onnx(node),
        lengths=_conv_nd_lengths(node, ctx))


def _conv_nd_lengths(node, ctx):
    """The ``Kernel.lengths`` rule of an N-d convolution, as
    :func:`_conv_lengths`'s (``L.Convolution1D`` over the padded words),
    the input's gradient made for each size met
    (:func:`_nd_grad_per_size`)."""
    def geometry(axis):
        at = axis - 2
        return (node.stride[at], node.pad[at], node.dilate[at]) \
            if 0 <= at < node.ndim else None
    return _rows_of_convolution(node, ctx, geometry, _nd_grad_per_size)


def _nd_grad_per_size(node, ctx, lengths):
    """The kernel of an N-d convolution whose input's spatial sizes vary:
    its gradient made for each input shape met (the input's gradient, a
    transposed convolution, is made for an output size), the last
    :data:`_SIZES_KEPT` kept."""
    made = collections.OrderedDict()

    def grad(xs, ys, gys, wanted):
        shape = xs[0].shape
        rule = made.get(shape)
        if rule is None:
            rule = lower_convolution_nd(node, ctx._replace(
                in_shapes=(shape,) + tuple(ctx.in_shapes[1:]))).grad
            if len(made) >= _SIZES_KEPT:
                made.popitem(last=False)
            made[shape] = rule
        return rule.fn(xs, ys, gys, wanted)
    first = lower_convolution_nd(node, ctx)
    return first._replace(grad=first.grad._replace(fn=grad), lengths=lengths)


@lowering(deconvolution_nd.DeconvolutionND)
def lower_deconvolution_nd(node, ctx):
    """An N-dimensional transposed convolution (``deconvolution_1d``,
    ``_3d``, ``_nd``) by its own forward; the gradient as Chainer's
    backward computes it: the input's by ``ConvolutionND``'s forward, the
    filter's by ``ConvolutionNDGradW``'s on ``(gy, x)``, the bias's by a
    sum over all axes but the channels."""
    if ctx.xp is not numpy:
        return None
    grad_x = convolution_nd.ConvolutionND(
        node.ndim, node.stride, node.pad, node.cover_all,
        dilate=node.dilate, groups=node.groups)
    return Kernel(own_forward(node), attrs={
        'stride': node.stride, 'pad': node.pad, 'dilate': node.dilate,
        'groups': node.groups, 'outsize': node.outs},
        grad=_nd_grad(node, ctx, grad_x, lambda x, gy: (gy, x)))


def _nd_grad(node, ctx, grad_x, grad_w_inputs):
    """The gradient of an N-d (de)convolution ``node`` as Chainer's
    backward computes it: the input's by ``grad_x``'s forward on ``(gy,
    W)``, the filter's by ``ConvolutionNDGradW``'s on
    ``grad_w_inputs(x, gy)``, and the bias's (:func:`_bias_grad`)."""
    grad_w = _grad_w_node(node, ctx)
    sum_bias = _bias_grad(ctx)

    def grad(xs, ys, gys, wanted):
        x, W = xs[:2]
        gy, = gys
        gx = copy.copy(grad_x).forward((gy, W))[0] if wanted[0] else None
        gW = copy.copy(grad_w).forward(grad_w_inputs(x, gy))[0] \
            if wanted[1] else None
        return (gx, gW) + sum_bias(gy, wanted)
    return GradRule(grad, inputs=(0, 1))


def _grad_w_node(node, ctx):
    """``ConvolutionNDGradW`` as Chainer's backward makes it from the
    (de)convolution ``node``: it reads the filter's shape and dtype from
    the node's inputs, which the recorded types stand in for."""
    return convolution_nd.ConvolutionNDGradW(types.SimpleNamespace(
        inputs=(None, types.SimpleNamespace(
            shape=ctx.in_shapes[1], dtype=numpy.dtype(ctx.in_dtypes[1]))),
        ndim=node.ndim, stride=node.stride, pad=node.pad,
        cover_all=node.cover_all, dilate=node.dilate, groups=node.groups))


def _bias_grad(ctx):
    """``sum_bias(gy, wanted)``: ``()`` without a bias, else the bias's
    gradient as Chainer's backward makes it (a sum over all axes but the
    channels, cast to the bias's dtype), in a 1-tuple."""
    if len(ctx.in_dtypes) < 3:
        return lambda gy, wanted: ()
    axes = (0,) + tuple(range(2, len(ctx.in_shapes[0])))
    dtype = ctx.in_dtypes[2]

    def sum_bias(gy, wanted):
        if not wanted[2]:
            return None,
        return numpy.asarray(gy.sum(axis=axes)).astype(dtype, copy=False),
    return sum_bias


def _conv_nd_to_onnx(node):
    """Conv of any number of spatial axes, without ``cover_all``."""
    def convert(b, ins, outs):
        b.op('Conv', linear_ops.cast_to_x(b, ins), outs,
             kernel_shape=list(b.in_shapes[1][2:]),
             strides=list(node.stride), pads=list(node.pad) * 2,
             dilations=list(node.dilate), group=node.groups)
    return convert


@lowering(shift.Shift)
def lower_shift(node, ctx):
    """Each group of channels moved by its own offset, zeros moving in
    (Chainer's CPU forward, with the groups' places in the padded input
    found once); the gradient is the shift by the opposite offsets, as
    ``Shift.backward``. Both have ONNX forms (a ``Pad`` and a ``Slice``
    per group)."""
    if ctx.xp is not numpy:
        return None
    ksize, dilate = (node.kh, node.kw), (node.dy, node.dx)
    shape = ctx.in_shapes[0]
    forward = _Shifted(shape, ksize, dilate)
    backward = _Shifted(shape, ksize, (-node.dy, -node.dx))

    def grad(xs, ys, gys, wanted):
        return backward.run(gys[0]),

    def grad_to_onnx(b, xs, ys, gys, wanted):
        return backward.to_onnx(b, gys[0]),
    return Kernel(forward.run, attrs={'ksize': ksize, 'dilate': dilate},
                  grad=GradRule(grad, onnx=grad_to_onnx),
                  onnx=lambda b, ins, outs: forward.to_onnx(b, ins[0], outs),
                  lengths=rows_follow_first)


class _Shifted(object):
    """``F.shift`` of inputs of ``shape`` ``(N, C, H, W)``: the input
    padded by ``(py, px)`` rows and columns of zeros, and each group of
    channels, in order, its window of the padded input (Chainer's CPU
    forward: the centre group and the last swap their offsets; the last
    group also takes the channels left over)."""

    def __init__(self, shape, ksize, dilate):
        _, c, self.h, self.w = shape
        (kh, kw), (dy, dx) = ksize, dilate
        self.py, self.px = kh // 2 * abs(dy), kw // 2 * abs(dx)
        last = kh * kw - 1
        size = c // (last + 1)
        self.windows = []
        for i in range(last + 1):
            group = {last // 2: last, last: last // 2}.get(i, i)
            top = self.py - (group // kw - kh // 2) * dy
            left = self.px - (group % kw - kw // 2) * dx
            self.windows.append((i * size, (i + 1) * size if i < last else c,
                                 top, left))

    def run(self, x):
        py, px, h, w = self.py, self.px, self.h, self.w
        padded = numpy.zeros(x.shape[:2] + (h + 2 * py, w + 2 * px),
                             x.dtype)
        padded[:, :, py:py + h, px:px + w] = x
        y = numpy.empty(x.shape, x.dtype)
        for start, stop, top, left in self.windows:
            y[:, start:stop] = padded[:, start:stop, top:top + h,
                                      left:left + w]
        return y

    def to_onnx(self, b, x, outs=None):
        py, px, h, w = self.py, self.px, self.h, self.w
        padded = b.single('Pad', x, b.int64s([0, 0, py, px, 0, 0, py, px]))
        axes = b.int64s([1, 2, 3])
        groups = [b.single('Slice', padded, b.int64s([start, top, left]),
                           b.int64s([stop, top + h, left + w]), axes)
                  for start, stop, top, left in self.windows]
        return b.op('Concat', groups, outs, axis=1)[0]
