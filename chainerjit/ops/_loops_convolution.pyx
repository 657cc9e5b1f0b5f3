# cython: language_level=3, boundscheck=False, wraparound=False
"""C loops over a convolution's windows: its patches (im2col) copied out of
the image, and the patches' gradients added back (col2im), bit for bit
as Chainer's NumPy code.
"""

cimport cython
from cython cimport floating
from libc.stdlib cimport free
from libc.stdlib cimport malloc
from libc.string cimport memcpy
from libc.string cimport memset
cimport numpy as cnp

cnp.import_array()

include "_arrays.pxi"
include "_avx512.pxi"


# --- convolution patches (im2col) --------------------------------------
# The zero-padded patches of a convolution without cover_all, copied out
# of a C-ordered (N, C, H, W) image: one C loop instead of NumPy's copy of
# a 6-d strided view, whose innermost runs are only kw elements (3x to 5x
# faster on LeNet's layers). The same values, so the products after it
# are unchanged.


ctypedef struct Geometry:
    # A convolution's kernel size, stride, padding and dilation.
    Py_ssize_t kh, kw, sy, sx, ph, pw, dy, dx


cdef bint _read_geometry(tuple values, Geometry* g):
    """Fills ``g`` from ``(kh, kw, sy, sx, ph, pw, dy, dx)``; False for
    values no convolution has."""
    if len(values) != 8:
        return False
    g.kh, g.kw, g.sy, g.sx, g.ph, g.pw, g.dy, g.dx = values
    return min(g.kh, g.kw, g.sy, g.sx, g.dy, g.dx) >= 1 and \
        min(g.ph, g.pw) >= 0


cdef int _image_and_patches(image, patches, Geometry* g, Py_ssize_t* dims,
                            bint image_written,
                            bint any_layout=False) except -2:
    """The loops' dtype (as ``_loop_type``) if ``image`` is a C-ordered
    4-d array (N, C, H, W) (or, read and ``any_layout``, one with
    non-negative strides, such as a convolution's transposed output) and
    ``patches`` a C-ordered 6-d array of its dtype, apart from it, the one
    written writeable; else -1. Sets ``dims`` to N, C, H, W, out_h, out_w
    (the convolution's output size)."""
    cdef int kind = _strided_kind(image) if any_layout and \
        not image_written else _c_ordered(image, -1, image_written)
    if kind < 0 or _c_ordered(patches, kind, not image_written) < 0 or \
            (<cnp.ndarray>image).ndim != 4 or \
            (<cnp.ndarray>patches).ndim != 6 or \
            _shares_memory(<cnp.ndarray>image, <cnp.ndarray>patches):
        return -1
    dims[0], dims[1], dims[2], dims[3] = image.shape
    dims[4] = (dims[2] + 2 * g.ph - (g.kh - 1) * g.dy - 1) // g.sy + 1
    dims[5] = (dims[3] + 2 * g.pw - (g.kw - 1) * g.dx - 1) // g.sx + 1
    return kind


@cython.cdivision(True)
cdef inline Py_ssize_t _ceil_div(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    """``ceil(a / b)`` for ``b > 0`` (C division truncates towards 0)."""
    return (a + b - 1) // b if a >= 0 else -((-a) // b)


cdef inline void _inside(Py_ssize_t start, Py_ssize_t step,
                         Py_ssize_t count, Py_ssize_t limit, Py_ssize_t* lo,
                         Py_ssize_t* hi) noexcept nogil:
    """``[lo, hi)``: the ``k < count`` with ``start + k * step`` in ``[0,
    limit)`` (``step > 0``)."""
    lo[0] = min(count, max(0, _ceil_div(-start, step)))
    hi[0] = min(count, max(lo[0], _ceil_div(limit - start, step)))


# Rows this long or longer are copied by ``memcpy``; shorter ones (a text
# CNN's images are one column wide) element by element, as a call of
# ``memcpy`` costs more than a few copies.
cdef enum:
    _MEMCPY_FROM = 8


cdef inline void _pad_image(floating* x, floating* image, Py_ssize_t n,
                     Py_ssize_t* dims, Py_ssize_t* steps,
                     Geometry g) noexcept nogil:
    """Copies image ``n`` of ``x`` (element strides ``steps``) into the
    interior of ``image``, its zero-padded C-ordered copy (C, H + 2 ph,
    W + 2 pw), whose padding is left as it is."""
    cdef Py_ssize_t channels = dims[1], height = dims[2], width = dims[3]
    cdef Py_ssize_t padded_w = width + 2 * g.pw
    cdef Py_ssize_t plane = (height + 2 * g.ph) * padded_w
    cdef Py_ssize_t c, y, j
    cdef floating* row
    cdef floating* source
    if steps[1] < steps[2] and (width == 1 or steps[1] < steps[3]):
        # Channels last in memory (a text CNN's embedded words): read in
        # memory order (2.3x faster than a read per cache line).
        for y in range(height):
            for j in range(width):
                row = image + (y + g.ph) * padded_w + g.pw + j
                source = x + n * steps[0] + y * steps[2] + j * steps[3]
                for c in range(channels):
                    row[c * plane] = source[c * steps[1]]
        return
    for c in range(channels):
        for y in range(height):
            row = image + c * plane + (y + g.ph) * padded_w + g.pw
            source = x + n * steps[0] + c * steps[1] + y * steps[2]
            if steps[3] == 1 and width >= _MEMCPY_FROM:
                memcpy(row, source, width * sizeof(floating))
            else:
                for j in range(width):
                    row[j] = source[j * steps[3]]


cdef inline floating* _padded_buffer(floating* x, Py_ssize_t* dims,
                              Geometry g) except NULL nogil:
    """A zeroed buffer (C, H + 2 ph, W + 2 pw) of ``x``'s type for
    :func:`_pad_image`, to ``free``."""
    cdef Py_ssize_t size = dims[1] * (dims[2] + 2 * g.ph) * (
        dims[3] + 2 * g.pw) * sizeof(floating)
    cdef floating* image = <floating*>malloc(size)
    if image == NULL:
        with gil:
            raise MemoryError()
    memset(image, 0, size)
    return image


cdef int _patch_rows(floating* x, floating* out, Py_ssize_t* dims,
                     Py_ssize_t* steps, Geometry g) except -1 nogil:
    """``out`` as (N, out_h, out_w, C, kh, kw), from ``x`` with the
    element strides ``steps`` (N, C, H, W): from a zero-padded C-ordered
    copy of ``x``, so that each patch row is ``kw`` elements copied with
    no bounds to test (3x faster than testing them per row)."""
    cdef Py_ssize_t channels = dims[1], height = dims[2], width = dims[3]
    cdef Py_ssize_t padded_h = height + 2 * g.ph, padded_w = width + 2 * g.pw
    cdef Py_ssize_t plane = padded_h * padded_w
    cdef Py_ssize_t n, oy, ox, c, i, j, y, x0
    cdef floating* image = _padded_buffer(x, dims, g)
    cdef floating* source
    cdef floating* row
    for n in range(dims[0]):
        # The interior copied here, not by _pad_image: with that call GCC
        # compiles the loops below 2.3x slower on a text CNN's images.
        for c in range(channels):
            for y in range(height):
                row = image + c * plane + (y + g.ph) * padded_w + g.pw
                source = x + n * steps[0] + c * steps[1] + y * steps[2]
                for j in range(width):
                    row[j] = source[j * steps[3]]
        for oy in range(dims[4]):
            for ox in range(dims[5]):
                x0 = oy * g.sy * padded_w + ox * g.sx
                for c in range(channels):
                    for i in range(g.kh):
                        row = image + c * plane + x0 + i * g.dy * padded_w
                        if g.dx == 1 and g.kw == 5:  # LeNet's, unrolled
                            out[0] = row[0]
                            out[1] = row[1]
                            out[2] = row[2]
                            out[3] = row[3]
                            out[4] = row[4]
                        elif g.dx == 1 and g.kw == 3:
                            out[0] = row[0]
                            out[1] = row[1]
                            out[2] = row[2]
                        else:
                            for j in range(g.kw):
                                out[j] = row[j * g.dx]
                        out += g.kw
    free(image)
    return 0


cdef inline Py_ssize_t _block_start(
        Py_ssize_t n, Py_ssize_t c, Py_ssize_t i, Py_ssize_t j,
        Py_ssize_t* dims, Geometry g, bint images_inside) noexcept nogil:
    """Where image ``n``'s (out_h, out_w) block of channel ``c`` and
    kernel row and column ``i``, ``j`` starts in patches laid out (N, C,
    kh, kw, out_h, out_w), im2col's layout, or with ``images_inside`` as
    (C, kh, kw, N, out_h, out_w), col2im's."""
    cdef Py_ssize_t position = (c * g.kh + i) * g.kw + j
    cdef Py_ssize_t block = dims[4] * dims[5]
    if images_inside:
        return (position * dims[0] + n) * block
    return (n * dims[1] * g.kh * g.kw + position) * block


cdef int _patch_columns(floating* x, floating* patches, Py_ssize_t* dims,
                        Py_ssize_t* steps, Geometry g,
                        bint images_inside) except -1 nogil:
    """``patches`` as (N, C, kh, kw, out_h, out_w), im2col's layout, or
    with ``images_inside`` as (C, kh, kw, N, out_h, out_w), from a
    zero-padded copy of each image of ``x`` (element strides ``steps``),
    so that each row of out_w patch values is copied with no bounds to
    test (2x faster than testing them)."""
    cdef Py_ssize_t channels = dims[1], height = dims[2], width = dims[3]
    cdef Py_ssize_t out_w = dims[5]
    cdef Py_ssize_t padded_h = height + 2 * g.ph, padded_w = width + 2 * g.pw
    cdef Py_ssize_t plane = padded_h * padded_w
    cdef Py_ssize_t n, oy, ox, c, i, j
    cdef floating* image = _padded_buffer(x, dims, g)
    cdef floating* source
    cdef floating* out
    for n in range(dims[0]):
        _pad_image(x, image, n, dims, steps, g)
        for c in range(channels):
            for i in range(g.kh):
                for j in range(g.kw):
                    out = patches + _block_start(n, c, i, j, dims, g,
                                                 images_inside)
                    for oy in range(dims[4]):
                        source = image + c * plane + (
                            oy * g.sy + i * g.dy) * padded_w + j * g.dx
                        if g.sx == 1 and out_w >= _MEMCPY_FROM:
                            memcpy(out, source, out_w * sizeof(floating))
                        else:
                            for ox in range(out_w):
                                out[ox] = source[ox * g.sx]
                        out += out_w
    free(image)
    return 0


#: The layouts of a convolution's patches: one patch a row, (N, out_h,
#: out_w, C, kh, kw); im2col's columns, (N, C, kh, kw, out_h, out_w); and
#: col2im's, the images inside the kernel positions, (C, kh, kw, N, out_h,
#: out_w).
ROWS, COLUMNS, IMAGES_INSIDE = 'rows', 'columns', 'images inside'


cdef tuple _patches_shape(str layout, Py_ssize_t* dims, Geometry g):
    if layout == ROWS:
        return (dims[0], dims[4], dims[5], dims[1], g.kh, g.kw)
    if layout == COLUMNS:
        return (dims[0], dims[1], g.kh, g.kw, dims[4], dims[5])
    return (dims[1], g.kh, g.kw, dims[0], dims[4], dims[5])


def convolution_patches(x, out, tuple geometry, str layout):
    """Fills ``out`` with the patches of ``x`` (N, C, H, W) for a
    convolution of ``geometry`` ``(kh, kw, sy, sx, ph, pw, dy, dx)``, laid
    out as ``layout`` says (:data:`ROWS`, :data:`COLUMNS` or
    :data:`IMAGES_INSIDE`). Returns False, writing nothing, unless
    ``x`` is a float32 or float64 array with non-negative strides (such
    as a convolution's transposed output) and ``out`` a writeable
    C-ordered array of its dtype and of that shape, apart from it."""
    cdef Geometry g
    cdef Py_ssize_t dims[6]
    cdef Py_ssize_t steps[4]
    cdef int k
    cdef bint rows = layout == ROWS
    cdef bint inside = layout == IMAGES_INSIDE
    if not _read_geometry(geometry, &g) or \
            layout not in (ROWS, COLUMNS, IMAGES_INSIDE):
        return False
    cdef int kind = _image_and_patches(x, out, &g, dims, False, True)
    if kind < 0 or out.shape != _patches_shape(layout, dims, g):
        return False
    for k in range(4):
        steps[k] = x.strides[k] // x.itemsize
    if kind == cnp.NPY_FLOAT and rows:
        _patch_rows(<float*>_data(x), <float*>_data(out), dims, steps, g)
    elif kind == cnp.NPY_FLOAT:
        _patch_columns(<float*>_data(x), <float*>_data(out), dims, steps, g,
                       inside)
    elif rows:
        _patch_rows(<double*>_data(x), <double*>_data(out), dims, steps, g)
    else:
        _patch_columns(<double*>_data(x), <double*>_data(out), dims, steps,
                       g, inside)
    return True


cdef void _add_patches(floating* patches, floating* img, Py_ssize_t* dims,
                       Geometry g, bint images_inside) noexcept nogil:
    """``img += `` the ``patches`` (with ``images_inside``, (C, kh, kw, N,
    out_h, out_w), col2im's layout; else (N, C, kh, kw, out_h, out_w))
    put back where they came from, kernel position by kernel position (j,
    i) as ``col2im_cpu`` adds them, so each pixel sums in its order; patch
    values that fall on the padding are dropped (col2im cuts it off).
    Images are independent: the loops read the patches in their order
    (images inside or outside the kernel positions)."""
    cdef Py_ssize_t images = dims[0], channels = dims[1]
    cdef Py_ssize_t c, j, i, n
    if images_inside:
        for c in range(channels):
            for j in range(g.kh):
                for i in range(g.kw):
                    for n in range(images):
                        _add_block(patches, img, n, c, j, i, dims, g, True)
    else:
        for n in range(images):
            for c in range(channels):
                for j in range(g.kh):
                    for i in range(g.kw):
                        _add_block(patches, img, n, c, j, i, dims, g, False)


cdef inline void _add_block(floating* patches, floating* img, Py_ssize_t n,
                            Py_ssize_t c, Py_ssize_t j, Py_ssize_t i,
                            Py_ssize_t* dims, Geometry g,
                            bint images_inside) noexcept nogil:
    """``img +=`` image ``n``'s (out_h, out_w) block of patch values of
    channel ``c`` at kernel row ``j`` and column ``i``."""
    cdef Py_ssize_t channels = dims[1], height = dims[2], width = dims[3]
    cdef Py_ssize_t oy, iy, lo, hi, k
    cdef Py_ssize_t x0 = i * g.dx - g.pw
    cdef floating* row
    cdef floating* col = patches + _block_start(n, c, j, i, dims, g,
                                                images_inside)
    _inside(x0, g.sx, dims[5], width, &lo, &hi)
    for oy in range(dims[4]):
        iy = oy * g.sy + j * g.dy - g.ph
        if 0 <= iy < height and lo < hi:
            row = img + ((n * channels + c) * height + iy) * width + x0 + \
                lo * g.sx
            for k in range(hi - lo):
                row[k * g.sx] = row[k * g.sx] + col[lo + k]
        col += dims[5]


def add_convolution_patches(col, img, tuple geometry,
                            str layout=IMAGES_INSIDE):
    """``img`` (N, C, H, W), zeros, += the patches ``col`` of a
    convolution of ``geometry``, laid out as ``layout`` says
    (:data:`IMAGES_INSIDE`, col2im's, or :data:`COLUMNS`, im2col's):
    ``col2im_cpu``'s result, bit for bit. Returns False, writing nothing,
    for arrays it does not take (as ``convolution_patches``)."""
    cdef Geometry g
    cdef Py_ssize_t dims[6]
    cdef bint inside = layout == IMAGES_INSIDE
    if not _read_geometry(geometry, &g) or \
            layout not in (COLUMNS, IMAGES_INSIDE):
        return False
    cdef int kind = _image_and_patches(img, col, &g, dims, True)
    if kind < 0 or col.shape != _patches_shape(layout, dims, g):
        return False
    if kind == cnp.NPY_FLOAT:
        _add_patches(<float*>_data(col), <float*>_data(img), dims, g, inside)
    else:
        _add_patches(<double*>_data(col), <double*>_data(img), dims, g,
                     inside)
    return True


# --- direct convolution by fused multiply-adds ------------------------------
# A convolution with stride and dilation 1 computed output row by output
# row, without its patches: each output the sum over (c, i, j) of
# W[o, c, i, j] * x[c, y + i, x + j], from +0, one fused multiply-add at a
# time in that order. OpenBLAS sums a product's inner axis so (each
# element's chain of FMAs in order, in one block where the axis is short),
# so that where a probe finds the same bits as the patches' product
# (``ops.connection``), this gives Chainer's results without gathering
# the patches: LeNet's first layer (one channel, 25 products an output,
# 6 outputs) 3x faster than its product by BLAS.

cdef extern from *:
    """
    #if defined(CJ_AVX512)
    /* One output row of 8 output channels, 16 columns from ox (a mask
       for the last ones): the accumulators in registers (a loop over a
       variable count of them kept them in memory, 4x slower), each row
       of the padded image loaded once per kernel position; w: the 8
       channels' filters, taps apart. The loops over the 8 have a
       constant count: the compiler unrolls them. */
    __attribute__((target("avx512f,fma")))
    static inline void cj_direct_16(
            const float* image, Py_ssize_t channels, Py_ssize_t plane,
            Py_ssize_t padded_w, Py_ssize_t oy, Py_ssize_t ox,
            __mmask16 mask, const float* w, Py_ssize_t taps,
            Py_ssize_t kh, Py_ssize_t kw, __m512* out) {
        Py_ssize_t c, i, j, k = 0;
        __m512 a[8];
        int o;
        for (o = 0; o < 8; o++)
            a[o] = _mm512_setzero_ps();
        for (c = 0; c < channels; c++)
            for (i = 0; i < kh; i++) {
                const float* row = image + c * plane + (oy + i) * padded_w
                                   + ox;
                for (j = 0; j < kw; j++, k++) {
                    __m512 v = _mm512_maskz_loadu_ps(mask, row + j);
                    for (o = 0; o < 8; o++)
                        a[o] = _mm512_fmadd_ps(
                            _mm512_set1_ps(w[o * taps + k]), v, a[o]);
                }
            }
        for (o = 0; o < 8; o++)
            out[o] = a[o];
    }
    /* y (N, out_h, out_w, O), C-ordered, = the convolution of x (N, C,
       H, W; element strides steps), zero-padded by ph and pw, with w (O,
       C, kh, kw), plus bias (O) if given, added after the sum. */
    __attribute__((target("avx512f,fma")))
    static int cj_direct_conv_avx512(
            const float* x, const Py_ssize_t* dims, const Py_ssize_t* steps,
            const float* w,
            Py_ssize_t outs, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t ph,
            Py_ssize_t pw, const float* bias, float* y) {
        Py_ssize_t n, c, r, col, oy, ox, o0, o, count;
        Py_ssize_t channels = dims[1], height = dims[2], width = dims[3];
        Py_ssize_t out_h = height + 2 * ph - kh + 1;
        Py_ssize_t out_w = width + 2 * pw - kw + 1;
        /* 16 columns of slack: a masked load reads none of them. */
        Py_ssize_t padded_w = width + 2 * pw + 16;
        Py_ssize_t plane = (height + 2 * ph) * padded_w;
        Py_ssize_t taps = channels * kh * kw;
        Py_ssize_t blocks = (outs + 7) / 8;
        float* image = (float*)calloc(channels * plane, sizeof(float));
        /* The filters, zeros for the last block's missing channels. */
        float* filters = (float*)calloc(blocks * 8 * taps, sizeof(float));
        __m512 acc[8];
        if (image == NULL || filters == NULL) {
            free(image);
            free(filters);
            return -1;
        }
        memcpy(filters, w, outs * taps * sizeof(float));
        /* Where the 16 columns of one output channel go in y. */
        __m512i index = _mm512_mullo_epi32(
            _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3,
                             2, 1, 0),
            _mm512_set1_epi32((int)outs));
        for (n = 0; n < dims[0]; n++) {
            const float* source = x + n * steps[0];
            if (steps[1] == 1 && channels > 1) {  /* channels-last */
                for (r = 0; r < height; r++)
                    for (col = 0; col < width; col++)
                        for (c = 0; c < channels; c++)
                            image[c * plane + (r + ph) * padded_w + pw +
                                  col] = source[r * steps[2] + col *
                                                steps[3] + c];
            } else {
                for (c = 0; c < channels; c++)
                    for (r = 0; r < height; r++)
                        for (col = 0; col < width; col++)
                            image[c * plane + (r + ph) * padded_w + pw +
                                  col] = source[c * steps[1] + r * steps[2]
                                                + col * steps[3]];
            }
            for (oy = 0; oy < out_h; oy++)
                for (ox = 0; ox < out_w; ox += 16) {
                    count = out_w - ox < 16 ? out_w - ox : 16;
                    for (o0 = 0; o0 < outs; o0 += 8) {
                        Py_ssize_t o_count = outs - o0 < 8 ? outs - o0 : 8;
                        float* out = y + ((n * out_h + oy) * out_w + ox)
                                     * outs + o0;
                        cj_direct_16(image, channels, plane, padded_w, oy,
                                     ox, (__mmask16)((1u << count) - 1),
                                     filters + o0 * taps, taps, kh, kw, acc);
                        for (o = 0; o < o_count; o++) {
                            if (bias != NULL)
                                acc[o] = _mm512_add_ps(
                                    acc[o], _mm512_set1_ps(bias[o0 + o]));
                            _mm512_mask_i32scatter_ps(
                                out + o, (__mmask16)((1u << count) - 1),
                                index, acc[o], 4);
                        }
                    }
                }
        }
        free(image);
        free(filters);
        return 0;
    }
    /* gx (N, C, H, W), C-ordered, = the gradient of a convolution with
       respect to its input, as Chainer computes it: for each kernel
       position (j, i), each input channel's products summed over the
       output channels o in order by fused multiply-adds from +0 (the
       product W^T gy by BLAS), each added to the pixel's sum (from +0)
       in col2im's order, j then i, only where the position reads it.
       gy (N, O, out_h, out_w) of element strides gsteps, unit along
       its rows; w (O, C, kh, kw); stride and dilation 1. Eight input
       channels and 16 columns of gx at a time, in registers. */
    __attribute__((target("avx512f,fma")))
    static int cj_direct_grad_x_avx512(
            const float* gy, const Py_ssize_t* gdims,
            const Py_ssize_t* gsteps, const float* w, Py_ssize_t channels,
            Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t ph, Py_ssize_t pw,
            Py_ssize_t height, Py_ssize_t width, float* gx) {
        Py_ssize_t outs = gdims[1], out_h = gdims[2], out_w = gdims[3];
        Py_ssize_t taps = kh * kw, blocks = (channels + 7) / 8;
        Py_ssize_t n, b, c, o, Y, X, j, i, y, x, lo, hi, t;
        /* The filters by kernel position, output and input channel,
           zeros for the last block's missing channels. */
        float* f = (float*)calloc(blocks * taps * outs * 8, sizeof(float));
        if (f == NULL)
            return -1;
        for (o = 0; o < outs; o++)
            for (c = 0; c < channels; c++)
                for (t = 0; t < taps; t++)
                    f[((c / 8 * taps + t) * outs + o) * 8 + c % 8] =
                        w[(o * channels + c) * taps + t];
        for (n = 0; n < gdims[0]; n++)
            for (b = 0; b < blocks; b++)
                for (Y = 0; Y < height; Y++)
                    for (X = 0; X < width; X += 16) {
                        __m512 s[8], p[8];
                        __mmask16 row_mask = (__mmask16)(
                            (1u << (width - X < 16 ? width - X : 16)) - 1);
                        for (c = 0; c < 8; c++)
                            s[c] = _mm512_setzero_ps();
                        for (j = 0; j < kh; j++) {
                            y = Y + ph - j;
                            if (y < 0 || y >= out_h)
                                continue;
                            for (i = 0; i < kw; i++) {
                                const float* wt = f + ((b * taps + j * kw +
                                                        i) * outs) * 8;
                                const float* row = gy + n * gsteps[0] +
                                                   y * gsteps[2];
                                __mmask16 m;
                                x = X + pw - i;
                                lo = x < 0 ? -x : 0;
                                hi = out_w - x < 16 ? out_w - x : 16;
                                if (hi <= lo)
                                    continue;
                                m = row_mask & (__mmask16)(
                                    ((1u << hi) - 1) & ~((1u << lo) - 1));
                                for (c = 0; c < 8; c++)
                                    p[c] = _mm512_setzero_ps();
                                for (o = 0; o < outs; o++) {
                                    __m512 v = _mm512_maskz_loadu_ps(
                                        m, row + o * gsteps[1] + x);
                                    const float* wo = wt + o * 8;
                                    for (c = 0; c < 8; c++)
                                        p[c] = _mm512_fmadd_ps(
                                            _mm512_set1_ps(wo[c]), v, p[c]);
                                }
                                for (c = 0; c < 8; c++)
                                    s[c] = _mm512_mask_add_ps(s[c], m, s[c],
                                                              p[c]);
                            }
                        }
                        for (c = 0; c < 8 && b * 8 + c < channels; c++)
                            _mm512_mask_storeu_ps(
                                gx + ((n * channels + b * 8 + c) * height +
                                      Y) * width + X, row_mask, s[c]);
                    }
        free(f);
        return 0;
    }
    /* G (<= 8) taps' accumulators over the k in [k0, k1), 16 output
       channels a vector: acc[g] += x's value at tap g times gy's 16
       values at k, by FMAs in k's order; then added to total (the
       taps' rows, total_step apart). Inlined with G constant, so that the accumulators
       stay in registers. */
    __attribute__((target("avx512f,fma"), always_inline))
    static inline void cj_grad_w_taps(
            const float* image, const Py_ssize_t* at, const Py_ssize_t* off,
            const float* g, Py_ssize_t g_step, Py_ssize_t k0, Py_ssize_t k1,
            const int G, float* total, Py_ssize_t total_step) {
        __m512 acc[8];
        Py_ssize_t k;
        int t;
        for (t = 0; t < G; t++)
            acc[t] = _mm512_setzero_ps();
        for (k = k0; k < k1; k++) {
            __m512 v = _mm512_loadu_ps(g + k * g_step);
            const float* base = image + at[k];
            for (t = 0; t < G; t++)
                acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(base[off[t]]), v,
                                         acc[t]);
        }
        for (t = 0; t < G; t++)
            _mm512_storeu_ps(total + total_step * t, _mm512_add_ps(
                _mm512_loadu_ps(total + total_step * t), acc[t]));
    }
    /* gw (O, C, kh, kw) = the gradient of a convolution with respect to
       its filter, as BLAS computes Chainer's product of gy (O, K) by the
       patches (K, C * kh * kw), K = N * out_h * out_w in (n, y, x) order:
       K cut into blocks as OpenBLAS's driver cuts a product's inner axis
       (q at a time while 2q or more are left, then two halves rounded up
       to unroll where more than q are), each block summed from +0 by
       FMAs in order and added to the result (from +0). x (N, C, H, W)
       of element strides steps, gy (N, O, out_h, out_w) of gsteps;
       stride and dilation 1. */
    __attribute__((target("avx512f,fma")))
    static int cj_direct_grad_w_avx512(
            const float* x, const Py_ssize_t* dims, const Py_ssize_t* steps,
            const float* gy, const Py_ssize_t* gsteps, Py_ssize_t outs,
            Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t ph, Py_ssize_t pw,
            Py_ssize_t q, Py_ssize_t unroll, float* gw) {
        Py_ssize_t channels = dims[1], height = dims[2], width = dims[3];
        Py_ssize_t out_h = height + 2 * ph - kh + 1;
        Py_ssize_t out_w = width + 2 * pw - kw + 1;
        Py_ssize_t padded_w = width + 2 * pw;
        Py_ssize_t plane = (height + 2 * ph) * padded_w;
        Py_ssize_t taps = channels * kh * kw, o_pad = (outs + 15) / 16 * 16;
        Py_ssize_t inner = dims[0] * out_h * out_w;
        Py_ssize_t n, c, r, col, i, j, t, o, k, k0, k1, ob, y, xo;
        float* image = (float*)calloc(dims[0] * channels * plane,
                                      sizeof(float));
        float* g = (float*)calloc(inner * o_pad, sizeof(float));
        float* total = (float*)calloc(taps * o_pad, sizeof(float));
        Py_ssize_t* at = (Py_ssize_t*)malloc(inner * sizeof(Py_ssize_t));
        Py_ssize_t* off = (Py_ssize_t*)malloc((taps + 8) *
                                              sizeof(Py_ssize_t));
        int failed = image == NULL || g == NULL || total == NULL ||
                     at == NULL || off == NULL;
        if (!failed) {
            for (n = 0; n < dims[0]; n++)
                for (c = 0; c < channels; c++)
                    for (r = 0; r < height; r++)
                        for (col = 0; col < width; col++)
                            image[(n * channels + c) * plane + (r + ph) *
                                  padded_w + pw + col] =
                                x[n * steps[0] + c * steps[1] +
                                  r * steps[2] + col * steps[3]];
            k = 0;
            for (n = 0; n < dims[0]; n++)
                for (y = 0; y < out_h; y++)
                    for (xo = 0; xo < out_w; xo++, k++) {
                        at[k] = n * channels * plane + y * padded_w + xo;
                        for (o = 0; o < outs; o++)
                            g[k * o_pad + o] = gy[n * gsteps[0] +
                                                  o * gsteps[1] +
                                                  y * gsteps[2] +
                                                  xo * gsteps[3]];
                    }
            t = 0;
            for (c = 0; c < channels; c++)
                for (i = 0; i < kh; i++)
                    for (j = 0; j < kw; j++)
                        off[t++] = c * plane + i * padded_w + j;
            for (k0 = 0; k0 < inner; k0 = k1) {
                Py_ssize_t left = inner - k0, block = left;
                if (left - q >= q)  /* (2 * q may overflow) */
                    block = q;
                else if (left > q)
                    block = (left / 2 + unroll - 1) / unroll * unroll;
                k1 = k0 + block;
                for (ob = 0; ob < o_pad; ob += 16)
                    for (t = 0; t < taps; t += 8) {
                        #define CJ_TAPS(G) case G: cj_grad_w_taps( \
                            image, at, off + t, g + ob, o_pad, k0, k1, G, \
                            total + t * o_pad + ob, o_pad); break;
                        switch (taps - t < 8 ? taps - t : 8) {
                            CJ_TAPS(8) CJ_TAPS(7) CJ_TAPS(6) CJ_TAPS(5)
                            CJ_TAPS(4) CJ_TAPS(3) CJ_TAPS(2) CJ_TAPS(1)
                        }
                        #undef CJ_TAPS
                    }
            }
            for (o = 0; o < outs; o++)
                for (t = 0; t < taps; t++)
                    gw[o * taps + t] = total[t * o_pad + o];
        }
        free(image);
        free(g);
        free(total);
        free(at);
        free(off);
        return failed ? -1 : 0;
    }
    #endif
    /* The entry points: 1 once done, 0 (nothing written) on a CPU
       without AVX-512 and FMA, -1 where memory ran out. */
    static int cj_direct_conv_f32(
            const float* x, const Py_ssize_t* dims, const Py_ssize_t* steps,
            const float* w, Py_ssize_t outs, Py_ssize_t kh, Py_ssize_t kw,
            Py_ssize_t ph, Py_ssize_t pw, const float* bias, float* y) {
        #if defined(CJ_AVX512)
        if (!cj_avx512_fma())
            return 0;
        return cj_direct_conv_avx512(x, dims, steps, w, outs, kh, kw, ph,
                                     pw, bias, y) == 0 ? 1 : -1;
        #else
        return 0;
        #endif
    }
    static int cj_direct_grad_x_f32(
            const float* gy, const Py_ssize_t* gdims,
            const Py_ssize_t* gsteps, const float* w, Py_ssize_t channels,
            Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t ph, Py_ssize_t pw,
            Py_ssize_t height, Py_ssize_t width, float* gx) {
        #if defined(CJ_AVX512)
        if (!cj_avx512_fma())
            return 0;
        return cj_direct_grad_x_avx512(gy, gdims, gsteps, w, channels, kh,
                                       kw, ph, pw, height, width,
                                       gx) == 0 ? 1 : -1;
        #else
        return 0;
        #endif
    }
    static int cj_direct_grad_w_f32(
            const float* x, const Py_ssize_t* dims, const Py_ssize_t* steps,
            const float* gy, const Py_ssize_t* gsteps, Py_ssize_t outs,
            Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t ph, Py_ssize_t pw,
            Py_ssize_t q, Py_ssize_t unroll, float* gw) {
        #if defined(CJ_AVX512)
        if (!cj_avx512_fma())
            return 0;
        return cj_direct_grad_w_avx512(x, dims, steps, gy, gsteps, outs, kh,
                                       kw, ph, pw, q, unroll,
                                       gw) == 0 ? 1 : -1;
        #else
        return 0;
        #endif
    }
    """
    int cj_direct_conv_f32(const float* x, const Py_ssize_t* dims,
                           const Py_ssize_t* steps, const float* w,
                           Py_ssize_t outs, Py_ssize_t kh,
                           Py_ssize_t kw, Py_ssize_t ph, Py_ssize_t pw,
                           const float* bias, float* y) nogil
    int cj_direct_grad_x_f32(const float* gy, const Py_ssize_t* gdims,
                             const Py_ssize_t* gsteps, const float* w,
                             Py_ssize_t channels, Py_ssize_t kh,
                             Py_ssize_t kw, Py_ssize_t ph, Py_ssize_t pw,
                             Py_ssize_t height, Py_ssize_t width,
                             float* gx) nogil
    int cj_direct_grad_w_f32(const float* x, const Py_ssize_t* dims,
                             const Py_ssize_t* steps, const float* gy,
                             const Py_ssize_t* gsteps, Py_ssize_t outs,
                             Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t ph,
                             Py_ssize_t pw, Py_ssize_t q, Py_ssize_t unroll,
                             float* gw) nogil


def direct_convolution_available():
    """Does this CPU run :func:`direct_convolution` (AVX-512 and FMA)?"""
    return bool(cj_avx512_fma())


def direct_convolution(x, W, b, y, Py_ssize_t ph, Py_ssize_t pw):
    """``y`` (N, out_h, out_w, O), C-ordered = the convolution of ``x``
    (N, C, H, W) with ``W`` (O, C, kh, kw), stride and dilation 1,
    padding ``ph`` and ``pw``, plus ``b`` (O,) if not ``None``: each sum
    over (c, i, j) in that order by fused multiply-adds from +0, then
    the bias added. All float32, ``x`` of any non-negative strides (a
    pooled convolution's channels-last output), the others C-ordered,
    ``y`` apart from them. Returns False, writing nothing, for arrays it
    does not take or a CPU without AVX-512."""
    cdef Py_ssize_t dims[4]
    cdef Py_ssize_t steps[4]
    cdef int k, done
    if _strided_kind(x) != cnp.NPY_FLOAT or \
            _c_ordered(W, cnp.NPY_FLOAT, False) < 0 or \
            _c_ordered(y, cnp.NPY_FLOAT, True) < 0 or \
            (b is not None and (_c_ordered(b, cnp.NPY_FLOAT, False) < 0 or
                                b.shape != (W.shape[0],))) or \
            x.ndim != 4 or W.ndim != 4 or x.shape[1] != W.shape[1] or \
            ph < 0 or pw < 0 or \
            y.shape != (x.shape[0], x.shape[2] + 2 * ph - W.shape[2] + 1,
                        x.shape[3] + 2 * pw - W.shape[3] + 1, W.shape[0]) or \
            min(y.shape) < 1 or x.shape[1] < 1 or \
            any([_shares_memory(y, a) for a in (x, W) + (
                () if b is None else (b,))]):
        return False
    for k in range(4):
        dims[k] = x.shape[k]
        steps[k] = x.strides[k] // 4
    done = cj_direct_conv_f32(
        <float*>_data(x), dims, steps, <float*>_data(W), W.shape[0],
        W.shape[2], W.shape[3], ph, pw,
        NULL if b is None else <float*>_data(b),
        <float*>_data(y))
    if done < 0:
        raise MemoryError()
    return done == 1


def direct_convolution_grad_x(gy, W, gx, Py_ssize_t ph, Py_ssize_t pw):
    """``gx`` (N, C, H, W), C-ordered = the gradient with respect to its
    input of the convolution by ``W`` (O, C, kh, kw), stride and dilation
    1, padding ``ph`` and ``pw``, given ``gy`` (N, O, out_h, out_w): for
    each kernel position, the sum over the output channels in order by
    fused multiply-adds from +0, the positions' sums added in col2im's
    order. All float32, ``gy`` with unit steps along its rows, ``W``
    C-ordered, ``gx`` apart from them. Returns False, writing nothing,
    for arrays it does not take or a CPU without AVX-512."""
    cdef Py_ssize_t gdims[4]
    cdef Py_ssize_t gsteps[4]
    cdef int k, done
    if _strided_kind(gy) != cnp.NPY_FLOAT or \
            _c_ordered(W, cnp.NPY_FLOAT, False) < 0 or \
            _c_ordered(gx, cnp.NPY_FLOAT, True) < 0 or \
            gy.ndim != 4 or W.ndim != 4 or gx.ndim != 4 or \
            gy.shape[1] != W.shape[0] or gx.shape[1] != W.shape[1] or \
            gy.shape[0] != gx.shape[0] or ph < 0 or pw < 0 or \
            gy.shape[2] != gx.shape[2] + 2 * ph - W.shape[2] + 1 or \
            gy.shape[3] != gx.shape[3] + 2 * pw - W.shape[3] + 1 or \
            min(gy.shape) < 1 or min(gx.shape) < 1 or \
            gy.strides[3] != 4 or \
            _shares_memory(gx, gy) or _shares_memory(gx, W):
        return False
    for k in range(4):
        gdims[k] = gy.shape[k]
        gsteps[k] = gy.strides[k] // 4
    done = cj_direct_grad_x_f32(
        <float*>_data(gy), gdims, gsteps, <float*>_data(W), W.shape[1],
        W.shape[2], W.shape[3], ph, pw, gx.shape[2], gx.shape[3],
        <float*>_data(gx))
    if done < 0:
        raise MemoryError()
    return done == 1


def direct_convolution_grad_w(x, gy, gW, Py_ssize_t ph, Py_ssize_t pw,
                              Py_ssize_t q, Py_ssize_t unroll):
    """``gW`` (O, C, kh, kw), C-ordered = the gradient with respect to its
    filter of the convolution of ``x`` (N, C, H, W), stride and dilation
    1, padding ``ph`` and ``pw``, given ``gy`` (N, O, out_h, out_w): the
    product of ``gy`` by the patches over (n, y, x) in blocks as
    OpenBLAS's driver cuts its inner axis (``q`` a block, halves rounded
    up to ``unroll``), each summed from +0 by fused multiply-adds in
    order, the blocks added in turn. All float32, ``x`` and ``gy`` of
    any non-negative strides, ``gW`` apart from them. Returns False,
    writing nothing, for arrays it does not take or a CPU without
    AVX-512."""
    cdef Py_ssize_t dims[4]
    cdef Py_ssize_t steps[4]
    cdef Py_ssize_t gsteps[4]
    cdef int k, done
    if _strided_kind(x) != cnp.NPY_FLOAT or \
            _strided_kind(gy) != cnp.NPY_FLOAT or \
            _c_ordered(gW, cnp.NPY_FLOAT, True) < 0 or \
            x.ndim != 4 or gy.ndim != 4 or gW.ndim != 4 or \
            gy.shape[0] != x.shape[0] or gy.shape[1] != gW.shape[0] or \
            gW.shape[1] != x.shape[1] or ph < 0 or pw < 0 or \
            q < 1 or unroll < 1 or \
            gy.shape[2] != x.shape[2] + 2 * ph - gW.shape[2] + 1 or \
            gy.shape[3] != x.shape[3] + 2 * pw - gW.shape[3] + 1 or \
            min(gy.shape) < 1 or min(x.shape) < 1 or min(gW.shape) < 1 or \
            _shares_memory(gW, x) or _shares_memory(gW, gy):
        return False
    for k in range(4):
        dims[k] = x.shape[k]
        steps[k] = x.strides[k] // 4
        gsteps[k] = gy.strides[k] // 4
    done = cj_direct_grad_w_f32(
        <float*>_data(x), dims, steps, <float*>_data(gy), gsteps,
        gW.shape[0], gW.shape[2], gW.shape[3], ph, pw, q, unroll,
        <float*>_data(gW))
    if done < 0:
        raise MemoryError()
    return done == 1
