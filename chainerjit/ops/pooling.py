"""Lowerings of chainer.functions.pooling.

They mirror Chainer's im2col CPU implementations; on the GPU Chainer uses
cuDNN or its own kernels, so those nodes stay on the generic path there.
"""

import copy
import functools
import operator

import numpy

from chainer.functions.pooling import average_pooling_2d
from chainer.functions.pooling import average_pooling_nd
from chainer.functions.pooling import max_pooling_nd
from chainer.functions.pooling import unpooling_2d
from chainer.functions.pooling import unpooling_nd
from chainer.functions.pooling import upsampling_2d
from chainer.utils import conv
from chainer.utils import conv_nd

from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import _loops_pooling
from chainerjit.ops import lowering
from chainerjit.ops import own_forward
from chainerjit.ops import rows_follow_first
from chainerjit.ops import vm_faster_on_cpu
from chainerjit.ops.math import onnx_dtype


def _nd_attrs(node):
    return {'ksize': node.ksize, 'stride': node.stride, 'pad': node.pad,
            'cover_all': node.cover_all}


@lowering(max_pooling_nd.MaxPoolingND)
def lower_max_pooling_nd(node, ctx):
    """Maximum over each window of the ``-inf``-padded input."""
    if ctx.xp is not numpy:
        return None
    tiles = _windows_tile(node, ctx)
    forward = _max_pool_tiles(node.ksize) if tiles else _max_pool(node, ctx)
    grad = _max_pool_grad(node, ctx, tiles)
    if tiles:
        forward.after_relu = _after_relu(node, forward, grad)
    return Kernel(forward, attrs=_nd_attrs(node),
                  grad=GradRule(grad,
                                inputs=(0,),
                                onnx=vm_faster_on_cpu((
                                    _tiled_max_pool_grad_to_onnx if tiles
                                    else _max_pool_grad_to_onnx)(node,
                                                                 ctx))),
                  onnx=_max_pool_to_onnx(node), lengths=rows_follow_first)


def _max_pool_col_shape(node, ctx):
    """The shape of a max pooling's patches: ``(N, C, window size)`` and
    the output's spatial shape."""
    return (ctx.in_shapes[0][:2]
            + (functools.reduce(operator.mul, node.ksize),)
            + ctx.out_shapes[0][2:])


def _windows_tile(node, ctx):
    """Whether the pooling windows tile the input exactly (2x2 windows
    with stride 2 on even sizes, no padding)."""
    ksize = node.ksize
    return ksize == node.stride and not any(node.pad) and all(
        o * k == d for o, k, d in zip(ctx.out_shapes[0][2:], ksize,
                                      ctx.in_shapes[0][2:]))


def _max_pool(node, ctx):
    """Max pooling by im2col, as Chainer's."""
    ksize, stride, pad = node.ksize, node.stride, node.pad
    cover_all = node.cover_all
    col_shape = _max_pool_col_shape(node, ctx)

    def max_pool(x):
        col = conv_nd.im2col_nd_cpu(x, ksize, stride, pad,
                                    pval=-float('inf'), cover_all=cover_all)
        return col.reshape((len(x),) + col_shape[1:]).max(axis=2)
    return max_pool


def _max_pool_tiles(ksize):
    """Max pooling of windows that tile the input: the elementwise maximum
    of strided views, the same values without im2col, one axis at a time
    (rows first: they are contiguous; twice as fast as all positions at
    once)."""
    steps = [[(slice(None),) * axis + (slice(i, None, k),) for i in range(k)]
             for axis, k in enumerate(ksize, 2)]

    def max_pool_tiles(x):
        for views in steps:
            x = functools.reduce(numpy.maximum, [x[v] for v in views])
        return x
    return max_pool_tiles


def _after_relu(node, max_pool_tiles, grad):
    """``relu -> (forward, gradient)``: of this pooling of the output of
    the ReLU whose kernel is ``relu``, given the ReLU's input ``x``
    (``passes.fuse.fuse_relu_max_pooling``), bit for bit as the two nodes
    give them.

    The forward pools ``x``, then takes the ReLU of the maxima, a
    window's size fewer: the same bits, since NumPy's ``maximum(v, 0)``
    is monotonic, gives ``+0`` for every ``v <= 0`` (-0 included) and
    keeps NaN, and the pooling's maxima of views keep the first NaN
    (for 2x2 windows of a channels-last float32 image, in one C loop:
    ``_loops_pooling.relu_max_pool_tiles``).

    The gradient scans the ReLU of ``x`` for the maxima, in one C loop
    with the ReLU's gradient (``_loops_pooling.max_pool_tiles_grad``);
    else it runs the ReLU and the two gradients."""
    ndim = len(node.ksize)

    two_by_two = tuple(node.ksize) == (2, 2)

    def fused(relu):
        def forward(x):
            if two_by_two and type(x) is numpy.ndarray and \
                    x.strides[1] == x.itemsize:
                # One C loop over a convolution's channels-last output
                # (2x faster), the layout NumPy's maxima of views give.
                y = numpy.empty_like(x[:, :, ::2, ::2])
                if _loops_pooling.relu_max_pool_tiles(x, y, *node.ksize):
                    return y
            pooled = max_pool_tiles(x)
            if pooled is not x and pooled.flags.owndata:  # not a view of x
                return relu.inplace[0](pooled)
            return relu.fn(pooled)

        def relu_grad(xs, ys, gys, wanted):
            if not wanted[0]:
                return None,
            x, gy = xs[0], gys[0]
            if ndim == 2 and type(x) is numpy.ndarray:
                gx = numpy.empty(x.shape, x.dtype)
                if _loops_pooling.max_pool_tiles_grad(
                        x, gy, gx, *node.ksize, relu=True):
                    return gx,
            y = relu.fn(x)
            g, = grad((y,), (None,), gys, wanted)
            return relu.grad.fn((None,), (y,), (g,), (True,))
        return forward, relu_grad
    return fused


def _max_pool_grad(node, ctx, tiles):
    """The gradient rule of max pooling: MaxPoolingNDGrad's CPU forward,
    with the argmax indexes the forward keeps recomputed from x as the
    forward computes them (for 2-D ``tiles``, in one C loop with argmax's
    choice of position)."""
    ksize, stride, pad = node.ksize, node.stride, node.pad
    cover_all = node.cover_all
    col_shape = _max_pool_col_shape(node, ctx)
    ndim = len(ksize)
    dims = ctx.in_shapes[0][2:]
    in_dtype = ctx.in_dtypes[0]
    prod_ksize = col_shape[2]
    offsets = {}  # by number of images: the windows' first positions

    def grad(xs, ys, gys, wanted):
        if not wanted[0]:
            return None,
        x, gy = xs[0], gys[0]
        if tiles and ndim == 2 and type(x) is numpy.ndarray:
            gx = numpy.empty(x.shape, x.dtype)
            if _loops_pooling.max_pool_tiles_grad(x, gy, gx, *ksize):
                return gx,
        col = conv_nd.im2col_nd_cpu(x, ksize, stride, pad,
                                    pval=-float('inf'), cover_all=cover_all)
        indexes = col.reshape((len(x),) + col_shape[1:]).argmax(axis=2)
        if len(x) not in offsets:
            offsets[len(x)] = numpy.arange(0, gy.size * prod_ksize,
                                           prod_ksize)
        gcol = numpy.zeros(gy.size * prod_ksize, dtype=in_dtype)
        gcol[indexes.ravel() + offsets[len(x)]] = gy.ravel()
        gcol = gcol.reshape(gy.shape + ksize)
        for i in range(ndim):
            gcol = numpy.swapaxes(gcol, 2 + i, ndim + 2 + i)
        # col2im returns a view into its padded image: C-ordered, the
        # gradients before it (a ReLU's, a normalization's) run on
        # operands of one layout, several times faster.
        return numpy.ascontiguousarray(
            conv_nd.col2im_nd_cpu(gcol, stride, pad, dims)),
    return grad


@lowering(average_pooling_2d.AveragePooling2D)
def lower_average_pooling_2d(node, ctx):
    """Mean over each window of the zero-padded input."""
    if ctx.xp is not numpy:
        return None
    args = (node.kh, node.kw, node.sy, node.sx, node.ph, node.pw)

    def average_pool(x):
        return conv.im2col_cpu(x, *args).mean(axis=(2, 3))

    kh, kw = node.kh, node.kw
    im_args = (node.sy, node.sx, node.ph, node.pw) + ctx.in_shapes[0][2:]

    def grad(xs, ys, gys, wanted):
        # AveragePooling2DGrad's CPU forward.
        if not wanted[0]:
            return None,
        gcol = numpy.tile(gys[0][:, :, None, None], (1, 1, kh, kw, 1, 1))
        gx = conv.col2im_cpu(gcol, *im_args)
        gx /= kh * kw
        return gx,
    return Kernel(average_pool, attrs={
        'ksize': (node.kh, node.kw), 'stride': (node.sy, node.sx),
        'pad': (node.ph, node.pw)}, grad=GradRule(grad),
        lengths=rows_follow_first,
        onnx=_average_pool_to_onnx(
            'AveragePooling2D', (node.kh, node.kw), (node.sy, node.sx),
            (node.ph, node.pw), True))


@lowering(average_pooling_nd.AveragePoolingND)
def lower_average_pooling_nd(node, ctx):
    """Mean over each window, counting the padding (``pad_value=0``) or
    not (``pad_value=None``)."""
    if ctx.xp is not numpy:
        return None
    ksize, stride, pad = node.ksize, node.stride, node.pad
    cover_all = node.cover_all
    axes = tuple(range(2, 2 + len(ksize)))
    attrs = _nd_attrs(node)
    attrs['pad_value'] = node.pad_value

    def im2col(x):
        return conv_nd.im2col_nd_cpu(x, ksize, stride, pad,
                                     cover_all=cover_all)
    dims = ctx.in_shapes[0][2:]
    n_odims = len(ctx.out_shapes[0]) - 2
    gy_index = (slice(None), slice(None)) + (None,) * len(dims)
    gcol_reps = (1, 1) + ksize + (1,) * n_odims
    window = functools.reduce(operator.mul, ksize)

    def tile_col2im(gy):
        gcol = numpy.tile(gy[gy_index], gcol_reps)
        return conv_nd.col2im_nd_cpu(gcol, stride, pad, dims)

    if node.pad_value == 0:
        def grad(xs, ys, gys, wanted):
            # AveragePoolingNDGrad's CPU forward.
            if not wanted[0]:
                return None,
            gx = tile_col2im(gys[0])
            gx /= window
            return gx,
        return Kernel(lambda x: im2col(x).mean(axis=axes), attrs=attrs,
                      grad=GradRule(grad), onnx=_average_pool_to_onnx(
                          'AveragePoolingND', ksize, stride, pad, True),
                      lengths=rows_follow_first)
    width = node._get_pooling_width(numpy, dims, ctx.in_dtypes[0])

    def grad_unpadded(xs, ys, gys, wanted):
        # AveragePoolingNDGrad's CPU forward; that divides gy by the
        # widths in place, this into a new array.
        if not wanted[0]:
            return None,
        gy = gys[0]
        return tile_col2im(numpy.divide(gy, width, dtype=gy.dtype)),
    return Kernel(lambda x: im2col(x).sum(axis=axes) / width, attrs=attrs,
                  grad=GradRule(grad_unpadded), onnx=_average_pool_to_onnx(
                      'AveragePoolingND', ksize, stride, pad, False),
                  lengths=rows_follow_first)


def _export_error(message):
    from chainerjit.errors import ExportError
    return ExportError(message)


def _grown_axes(b, ksize, stride, pad, shapes=None):
    """The axes where Chainer's ``cover_all`` added an output element
    (checking that every other axis has the plain size); ``shapes``: the
    pooling's input and output shapes, if not the node's being
    converted."""
    in_shape, out_shape = shapes or (b.in_shapes[0], b.out_shapes[0])
    grown = []
    for i, (k, s, p) in enumerate(zip(ksize, stride, pad)):
        d, out = in_shape[2 + i], out_shape[2 + i]
        plain = (d + 2 * p - k) // s + 1
        if out == plain + 1 and out == (d + 2 * p - k + s - 1) // s + 1:
            grown.append(i)
        elif out != plain:
            raise _export_error('unexpected pooling output size %s'
                                % (out_shape,))
    return grown


def _max_pool_to_onnx(node):
    """MaxPool (ONNX pads are ignored, as Chainer's ``-inf`` padding is).
    Where ``cover_all`` adds an output, that is ``ceil_mode=1``, unless
    the last window would start in the padding (onnxruntime drops it;
    Chainer gives ``-inf``)."""
    def convert(b, ins, outs):
        b.op('MaxPool', ins, outs, **_max_pool_attrs(
            b, node, (b.in_shapes[0], b.out_shapes[0])))
    return convert


def _max_pool_attrs(b, node, shapes):
    """The attributes of the ONNX MaxPool of ``node`` with its input and
    output ``shapes`` (see :func:`_max_pool_to_onnx`)."""
    ksize, stride, pad = list(node.ksize), list(node.stride), list(node.pad)
    attrs = dict(kernel_shape=ksize, strides=stride, pads=pad + pad)
    if _grown_axes(b, ksize, stride, pad, shapes):
        attrs['ceil_mode'] = 1
        for i, (s, p) in enumerate(zip(stride, pad)):
            d, out = shapes[0][2 + i], shapes[1][2 + i]
            if (out - 1) * s >= d + p:
                raise _export_error(
                    'MaxPoolingND with cover_all=True: a window of '
                    'only padding cannot be exported; use '
                    'cover_all=False or a pad that avoids it')
    return attrs


def _max_pool_grad_to_onnx(node, ctx):
    """Max pooling's gradient in ONNX: each output's gradient added at the
    position of its window's maximum, the first in the window's order
    (MaxPool's ``Indices``, the position ``argmax`` picks in Chainer's
    backward), into zeros of the input's shape."""
    shapes = (ctx.in_shapes[0], ctx.out_shapes[0])
    size = int(numpy.prod(shapes[0]))

    def convert(b, xs, ys, gys, wanted):
        _, indices = b.op('MaxPool', xs[:1], [b.fresh('maxima'),
                                              b.fresh('argmax')],
                          **_max_pool_attrs(b, node, shapes))
        flat = b.int64s([-1])
        zeros = b.constant(numpy.zeros(size, ctx.in_dtypes[0]))
        added = b.op('ScatterElements', [
            zeros, b.op('Reshape', [indices, flat])[0],
            b.op('Reshape', [gys[0], flat])[0]], axis=0,
            reduction='add')[0]
        return b.op('Reshape', [added, b.int64s(list(shapes[0]))])[0],
    return convert


def _tiled_max_pool_grad_to_onnx(node, ctx):
    """Max pooling's gradient in ONNX where the windows tile the input:
    each output's gradient at its window's first maximum in the window's
    order (where Chainer's ``argmax`` puts it), found without MaxPool's
    ``Indices`` (onnxruntime computes those five times slower than the
    pooling itself). The input is regrouped with the positions within a
    window first, ``(k1 * k2, N * C * o1 * o2)``, so that every step runs
    over long rows: each element compared with its window's maximum, and
    the equal one kept that has no equal one before it (an exclusive
    running count of zero)."""
    shape, pooled = ctx.in_shapes[0], ctx.out_shapes[0]
    ksize = tuple(node.ksize)
    n = len(ksize)
    tiled = shape[:2] + tuple(d for o, k in zip(pooled[2:], ksize)
                              for d in (o, k))
    # (N, C, o1, k1, o2, k2, ...) -> (k1, k2, ..., N, C, o1, o2, ...)
    perm = [3 + 2 * i for i in range(n)] + [0, 1] + \
        [2 + 2 * i for i in range(n)]
    grouped = [tiled[p] for p in perm]
    windows = (int(numpy.prod(ksize)), int(numpy.prod(pooled)))

    def convert(b, xs, ys, gys, wanted):
        op = b.single
        x = op('Reshape', op('Transpose', op('Reshape', xs[0],
                                             b.int64s(tiled)), perm=perm),
               b.int64s(windows))
        at_max = op('Equal', x, op('ReduceMax', x, axes=[0], keepdims=1))
        before = op('CumSum', op('Cast', at_max, to=onnx_dtype(numpy.int32)),
                    b.constant(numpy.array(0, numpy.int64)), exclusive=1)
        first = op('And', at_max, op('Equal', before, b.constant(
            numpy.array(0, numpy.int32))))
        gy = op('Reshape', gys[0], b.int64s((1, windows[1])))
        gx = op('Where', first, gy, b.constant(numpy.zeros(
            (), ctx.in_dtypes[0])))
        return op('Reshape', op('Transpose', op('Reshape', gx, b.int64s(
            grouped)), perm=[int(i) for i in numpy.argsort(perm)]),
            b.int64s(shape)),
    return convert


def _average_pool_to_onnx(label, ksize, stride, pad, include_pad):
    """AveragePool; Chainer divides by the whole window (padded zeros
    counted, ``count_include_pad=1``), or for ``pad_value=None`` by the
    elements inside the input (``count_include_pad=0``). Chainer's
    average poolings refuse ``cover_all``."""
    ksize, stride, pad = list(ksize), list(stride), list(pad)

    def convert(b, ins, outs):
        if _grown_axes(b, ksize, stride, pad):
            raise _export_error('%s with cover_all=True cannot be '
                                'exported; use cover_all=False' % label)
        b.op('AveragePool', ins, outs, kernel_shape=ksize, strides=stride,
             pads=pad + pad, count_include_pad=int(include_pad))
    return convert


@lowering(unpooling_2d.Unpooling2D)
def lower_unpooling_2d(node, ctx):
    """See :func:`_unpooling`."""
    return _unpooling(node, ctx, unpooling_2d.Unpooling2DGrad,
                      (node.kh, node.kw), (node.sy, node.sx),
                      (node.ph, node.pw))


@lowering(unpooling_nd.UnpoolingND)
def lower_unpooling_nd(node, ctx):
    """See :func:`_unpooling`."""
    return _unpooling(node, ctx, unpooling_nd.UnpoolingNDGrad, node.ksize,
                      node.stride, node.pad)


def _unpooling(node, ctx, grad_class, ksize, stride, pad):
    """Each value spread over its window (the node's own forward, on a
    copy of the recorded node, so every size and padding is Chainer's; at
    any batch size); the gradient is the forward of ``grad_class``, the
    node Chainer's backward applies: the sum over each window. Where the
    windows tile the output without padding, both have ONNX forms (a
    broadcast and a sum)."""
    if ctx.xp is not numpy:
        return None
    settled = _settled(node, ctx)

    def grad(xs, ys, gys, wanted):
        return grad_class(settled).forward(gys)
    dims = ctx.in_shapes[0][2:]
    tiles = _windows_tile_output(ksize, stride, pad, ctx)
    return Kernel(own_forward(settled), attrs={
        'ksize': tuple(ksize), 'stride': tuple(stride), 'pad': tuple(pad)},
        grad=GradRule(grad, onnx=_unpool_grad_to_onnx(ksize, dims)
                      if tiles else None),
        onnx=_unpool_to_onnx(ksize, dims) if tiles else None,
        lengths=rows_follow_first)  # (its sizes settled are the image's)


def _settled(node, ctx):
    """A copy of ``node`` whose forward ran once, here, on zeros of the
    input's shape: that settles the output size (and for some nodes
    which form the gradient takes), for the copies that run it again
    and for the gradient node made from it."""
    settled = copy.copy(node)
    settled.forward((numpy.zeros(ctx.in_shapes[0], ctx.in_dtypes[0]),))
    return settled


def _windows_tile_output(ksize, stride, pad, ctx):
    """Whether an unpooling's windows tile its output exactly (no
    padding, strides of the windows' size, no rows or columns left
    over)."""
    dims = ctx.in_shapes[0][2:]
    return not any(pad) and tuple(stride) == tuple(ksize) and \
        ctx.out_shapes[0][2:] == tuple(d * k for d, k in zip(dims, ksize))


def _unpool_to_onnx(ksize, dims):
    """Unpooling where the windows tile the output: each value broadcast
    over a new axis of its window's size after its own axis."""
    # (0 in a shape: that axis of the input's, the batch's among them)
    split = [0, 0, 0, 1] + [n for d in dims[1:] for n in (d, 1)]
    windows = [1, 1] + [n for k in ksize for n in (1, k)]
    shape = [0, 0] + [d * k for d, k in zip(dims, ksize)]

    def convert(b, ins, outs):
        spread = b.single('Expand', b.single(
            'Reshape', ins[0], b.int64s(split)), b.int64s(windows))
        b.op('Reshape', [spread, b.int64s(shape)], outs)
    return convert


def _unpool_grad_to_onnx(ksize, dims):
    """The gradient of :func:`_unpool_to_onnx`'s form: the sum over each
    window."""
    split = [0, 0] + [n for d, k in zip(dims, ksize) for n in (d, k)]
    axes = [3 + 2 * i for i in range(len(dims))]

    def convert(b, xs, ys, gys, wanted):
        windows = b.single('Reshape', gys[0], b.int64s(split))
        return b.single('ReduceSum', windows, b.int64s(axes), keepdims=0),
    return convert


@lowering(upsampling_2d.Upsampling2D)
def lower_upsampling_2d(node, ctx):
    """Each value put at its place in its window, which the node's
    indexes give (its own forward, on a copy of the recorded node); the
    gradient is ``Upsampling2DGrad``'s forward, the gradient at that
    place. The indexes are a constant here (indexes computed in the call
    keep the node generic). Where the windows tile the output without
    padding, both have ONNX forms (a ``Where`` on the windows' places)."""
    if ctx.xp is not numpy or type(node.indexes) is not numpy.ndarray:
        return None
    settled = _settled(node, ctx)

    def grad(xs, ys, gys, wanted):
        return upsampling_2d.Upsampling2DGrad(settled).forward(gys)
    ksize = (node.kh, node.kw)
    places = None
    if _windows_tile_output(ksize, (node.sy, node.sx), (node.ph, node.pw),
                            ctx):
        places = _OneOfEachWindow(node.indexes, ksize, ctx.in_dtypes[0])
    return Kernel(own_forward(settled), attrs={
        'ksize': ksize, 'stride': (node.sy, node.sx),
        'pad': (node.ph, node.pw)},
        grad=GradRule(grad, onnx=None if places is None
                      else places.grad_to_onnx),
        onnx=None if places is None else places.to_onnx)


class _OneOfEachWindow(object):
    """ONNX forms of an upsampling whose windows tile the output: the
    output, ``(N, C, h, kh, w, kw)`` by window, is its input where the
    window's place is the index's, zero elsewhere; the gradient, the sum
    over each window of the output's gradient there."""

    def __init__(self, indexes, ksize, dtype):
        n, c, h, w = indexes.shape
        kh, kw = ksize
        self.windows = [n, c, h, kh, w, kw]
        self.dtype = dtype
        places = numpy.arange(kh * kw).reshape(1, 1, 1, kh, 1, kw)
        self.taken = indexes.reshape(n, c, h, 1, w, 1) == places

    def _where(self, b, values):
        if b.dynamic_batch:
            raise _export_error('Upsampling2D: its indexes are for a batch '
                                'of %d; export it without a dynamic batch'
                                % self.windows[0])
        return b.single('Where', b.constant(self.taken), values,
                        b.constant(numpy.zeros((), self.dtype)))

    def to_onnx(self, b, ins, outs):
        n, c, h, kh, w, kw = self.windows
        spread = self._where(b, b.single('Reshape', ins[0], b.int64s(
            [n, c, h, 1, w, 1])))
        b.op('Reshape', [spread, b.int64s([n, c, h * kh, w * kw])], outs)

    def grad_to_onnx(self, b, xs, ys, gys, wanted):
        taken = self._where(b, b.single('Reshape', gys[0],
                                        b.int64s(self.windows)))
        return b.single('ReduceSum', taken, b.int64s([3, 5]), keepdims=0),
