# cython: language_level=3, boundscheck=False, wraparound=False
"""C loops of max pooling: the gradient over windows that tile the image,
bit for bit as Chainer's im2col code, and that of a ReLU then such a
pooling (``passes.fuse.fuse_relu_max_pooling``) as the two run one after
the other.
"""

from cython cimport floating
from libc.stdlib cimport free
from libc.stdlib cimport malloc
from libc.string cimport memset
cimport numpy as cnp
import numpy

cnp.import_array()

include "_arrays.pxi"


# --- max pooling over windows that tile the image ------------------------
# Windows of kh x kw with the same stride, no padding, tiling H x W
# exactly: the gradient goes to the first position holding each window's
# maximum (NumPy's argmax: the first NaN if there is one), as Chainer
# computes it through im2col, in one pass over the image (5x faster).


cdef bint _tiles(x, y, Py_ssize_t kh, Py_ssize_t kw):
    """Are ``x`` (N, C, H, W) and ``y`` (N, C, H / kh, W / kw) 4-d
    arrays of those shapes?"""
    return (<cnp.ndarray>x).ndim == 4 and (<cnp.ndarray>y).ndim == 4 and \
        kh > 0 and kw > 0 and x.shape[0] == y.shape[0] and \
        x.shape[1] == y.shape[1] and x.shape[2] == y.shape[2] * kh and \
        x.shape[3] == y.shape[3] * kw


cdef inline floating _relu(floating v) noexcept nogil:
    """NumPy's ``maximum(v, 0)``: ``v`` where ``v > 0`` or NaN, else
    ``+0`` (for -0 too: of equals, NumPy takes the second)."""
    return v if (v > 0) | (v != v) else 0


cdef void _window_row_maxima(floating* x, Py_ssize_t row_step,
                             Py_ssize_t step, Py_ssize_t gx_width,
                             Py_ssize_t out_w, Py_ssize_t kh, Py_ssize_t kw,
                             Py_ssize_t* at, Py_ssize_t* at_gx,
                             bint relu) noexcept nogil:
    """For the row of ``out_w`` windows starting at ``x`` (its rows
    ``row_step`` bytes apart, its elements ``step``): the byte offset
    ``at`` of each window's first maximum from its corner, and ``at_gx``,
    that position's offset in a C-ordered image ``gx_width`` wide; the
    first NaN if there is one, as argmax; with ``relu``, of the ReLU of
    the values. Window positions outside, windows inside, and no
    branches: the windows are independent chains of arithmetic, which
    pipeline (branches on the random signs of pooled values, or one
    window at a time, ran 3x slower)."""
    cdef Py_ssize_t i, j, ox, offset, offset_gx, take
    cdef floating v, t
    cdef char* corner
    for ox in range(out_w):
        at[ox] = 0
        at_gx[ox] = 0
    for i in range(kh):
        for j in range(kw):
            offset = i * row_step + j * step
            offset_gx = i * gx_width + j
            for ox in range(out_w):
                corner = <char*>x + ox * kw * step
                v = (<floating*>(corner + offset))[0]
                t = (<floating*>(corner + at[ox]))[0]
                if relu:
                    v = _relu(v)
                    t = _relu(t)
                # Greater, or the first NaN (nothing is taken after one).
                take = (v > t) | ((v != v) & (t == t))
                at[ox] += take * (offset - at[ox])
                at_gx[ox] += take * (offset_gx - at_gx[ox])


cdef int _max_pool_tiles_grad(floating* x, Py_ssize_t* strides,
                              floating* gy, floating* gx, Py_ssize_t* dims,
                              Py_ssize_t kh, Py_ssize_t kw,
                              bint relu) except -1 nogil:
    """``x`` of any strides (in bytes), ``gy`` and ``gx`` C-ordered;
    ``dims``: N, C, H, W. With ``relu``, the gradient of the pooling of
    ``relu(x)``, then that of the ReLU: ``gy * (maximum > 0)`` at the
    maximum's position (ReLUGrad2's product by 1 or 0), +0 elsewhere."""
    cdef floating g
    cdef Py_ssize_t n, c, oy, ox, i, start, k
    cdef Py_ssize_t height = dims[2], width = dims[3], out_h = height // kh
    cdef Py_ssize_t out_w = width // kw
    cdef char* plane
    cdef Py_ssize_t* at = <Py_ssize_t*>malloc(2 * out_w * sizeof(Py_ssize_t))
    if at == NULL:
        with gil:
            raise MemoryError()
    for n in range(dims[0]):
        for c in range(dims[1]):
            plane = <char*>x + n * strides[0] + c * strides[1]
            for oy in range(out_h):
                start = ((n * dims[1] + c) * height + oy * kh) * width
                k = ((n * dims[1] + c) * out_h + oy) * out_w
                _window_row_maxima(
                    <floating*>(plane + oy * kh * strides[2]), strides[2],
                    strides[3], width, out_w, kh, kw, at, at + out_w, relu)
                for i in range(kh):
                    memset(gx + start + i * width, 0,
                           width * sizeof(floating))
                for ox in range(out_w):
                    g = gy[k + ox]
                    if relu:
                        g = g * (1 if (<floating*>(
                            plane + oy * kh * strides[2] + ox * kw *
                            strides[3] + at[ox]))[0] > 0 else 0)
                    gx[start + ox * kw + at[out_w + ox]] = g
    free(at)
    return 0


cdef extern from *:
    """
    /* The gradient of 2x2 tiling windows in float32, four windows at a
       time in SSE2 (x86-64's baseline): argmax's scan as masks (greater,
       or the first NaN, nothing taken after one), the gradients as
       masked copies of gy (+0 elsewhere). x and gx are C-ordered, 2 * rows
       rows of width; gy C-ordered, rows rows of width / 2. With relu, of
       the ReLU of x (maximum(x, 0): x if x > 0 or NaN, else +0), then
       the ReLU's gradient: gy * (maximum > 0 ? 1 : 0). Returns 0, writing
       nothing, without SSE2. */
    #if defined(__SSE2__)
    #include <emmintrin.h>
    static inline __m128 cj_takes(__m128 v, __m128 t) {
        return _mm_or_ps(_mm_cmpgt_ps(v, t),
                         _mm_andnot_ps(_mm_cmpunord_ps(t, t),
                                       _mm_cmpunord_ps(v, v)));
    }
    static inline __m128 cj_select(__m128 m, __m128 v, __m128 t) {
        return _mm_or_ps(_mm_and_ps(m, v), _mm_andnot_ps(m, t));
    }
    /* maximum(v, 0) as far as the scan can tell: v where v > 0 or NaN,
       else a zero (-0 for -0, which compares as +0 does). */
    static inline __m128 cj_relu(__m128 v) {
        return _mm_max_ps(_mm_setzero_ps(), v);  /* v unless 0 > v */
    }

    /* Four windows: rows r0 and r1 (8 values each) and their gradients
       g_row (4), the window gradients into g0 and g1 (8 each). Inlined
       into one copy per value of relu (a test of it in the loop made the
       loop 2x slower). */
    static inline __attribute__((always_inline)) void cj_pool_4_windows(
            const float* r0, const float* r1, const float* g_row, float* g0,
            float* g1, const int relu) {
        __m128 lo = _mm_loadu_ps(r0);
        __m128 hi = _mm_loadu_ps(r0 + 4);
        __m128 a = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
        __m128 b = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
        __m128 c, d, t, tb, tc, td, g;
        lo = _mm_loadu_ps(r1);
        hi = _mm_loadu_ps(r1 + 4);
        c = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
        d = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
        if (relu) {
            a = cj_relu(a);
            b = cj_relu(b);
            c = cj_relu(c);
            d = cj_relu(d);
        }
        tb = cj_takes(b, a);
        t = cj_select(tb, b, a);
        tc = cj_takes(c, t);
        t = cj_select(tc, c, t);
        td = cj_takes(d, t);
        g = _mm_loadu_ps(g_row);
        if (relu) {
            t = cj_select(td, d, t);
            g = _mm_mul_ps(g, _mm_and_ps(_mm_cmpgt_ps(t, _mm_setzero_ps()),
                                         _mm_set1_ps(1.0f)));
        }
        /* The window's position taken last is its maximum. */
        tc = _mm_andnot_ps(td, tc);
        tb = _mm_andnot_ps(_mm_or_ps(tc, td), tb);
        a = _mm_andnot_ps(_mm_or_ps(_mm_or_ps(tb, tc), td), g);
        b = _mm_and_ps(tb, g);
        c = _mm_and_ps(tc, g);
        d = _mm_and_ps(td, g);
        _mm_storeu_ps(g0, _mm_unpacklo_ps(a, b));
        _mm_storeu_ps(g0 + 4, _mm_unpackhi_ps(a, b));
        _mm_storeu_ps(g1, _mm_unpacklo_ps(c, d));
        _mm_storeu_ps(g1 + 4, _mm_unpackhi_ps(c, d));
    }
    static inline __attribute__((always_inline)) void cj_pool_2x2_rows(
            const float* x, const float* gy, float* gx, Py_ssize_t rows,
            Py_ssize_t width, const int relu) {
        Py_ssize_t out_w = width / 2, p, ox, left, i;
        float in0[8], in1[8], g_in[4], out0[8], out1[8];
        for (p = 0; p < rows; p++) {
            const float* r0 = x + 2 * p * width;
            const float* r1 = r0 + width;
            float* g0 = gx + 2 * p * width;
            float* g1 = g0 + width;
            const float* g_row = gy + p * out_w;
            for (ox = 0; ox + 4 <= out_w; ox += 4)
                cj_pool_4_windows(r0 + 2 * ox, r1 + 2 * ox, g_row + ox,
                                  g0 + 2 * ox, g1 + 2 * ox, relu);
            /* The last windows (a third of LeNet's): the row's last four
               again, some of them a second time (the same values); in
               rows of fewer, copied out, padded with windows whose
               results are dropped. A scalar loop over them, branching on
               the random signs of their values, took longer than the
               rest of the row. */
            left = out_w - ox;
            if (left > 0 && out_w >= 4) {
                ox = out_w - 4;
                cj_pool_4_windows(r0 + 2 * ox, r1 + 2 * ox, g_row + ox,
                                  g0 + 2 * ox, g1 + 2 * ox, relu);
            } else if (left > 0) {
                for (i = 0; i < 8; i++) {
                    in0[i] = i < 2 * left ? r0[2 * ox + i] : 0;
                    in1[i] = i < 2 * left ? r1[2 * ox + i] : 0;
                }
                for (i = 0; i < 4; i++)
                    g_in[i] = i < left ? g_row[ox + i] : 0;
                cj_pool_4_windows(in0, in1, g_in, out0, out1, relu);
                for (i = 0; i < 2 * left; i++) {
                    g0[2 * ox + i] = out0[i];
                    g1[2 * ox + i] = out1[i];
                }
            }
        }
    }
    static int cj_pool_2x2_grad_f32(const float* x, const float* gy,
                                    float* gx, Py_ssize_t rows,
                                    Py_ssize_t width, int relu) {
        if (relu)
            cj_pool_2x2_rows(x, gy, gx, rows, width, 1);
        else
            cj_pool_2x2_rows(x, gy, gx, rows, width, 0);
        return 1;
    }
    #else
    static int cj_pool_2x2_grad_f32(const float* x, const float* gy,
                                    float* gx, Py_ssize_t rows,
                                    Py_ssize_t width, int relu) {
        return 0;
    }
    #endif
    """
    int cj_pool_2x2_grad_f32(const float* x, const float* gy, float* gx,
                             Py_ssize_t rows, Py_ssize_t width,
                             int relu) nogil


def max_pool_tiles_grad(x, gy, gx, Py_ssize_t kh, Py_ssize_t kw,
                        bint relu=False):
    """``gx`` = ``gy`` at the first maximum of each window of ``x``, zero
    elsewhere; ``x`` (N, C, H, W) of any strides (a convolution's
    transposed output, say), ``gy`` (N, C, H / kh, W / kw) and ``gx``
    C-ordered. With ``relu``, the gradient of ``relu(x)``'s pooling then
    of the ReLU, as the two give it one after the other: the windows'
    maxima of ``maximum(x, 0)``, and ``gy * (maximum > 0)`` there.
    Returns False, writing nothing, for arrays it does not take."""
    cdef int kind = _c_ordered(gy, -1, False)
    cdef Py_ssize_t dims[4]
    cdef Py_ssize_t strides[4]
    cdef int k
    if kind < 0 or _c_ordered(gx, kind, True) < 0 or \
            type(x) is not _ndarray or \
            cnp.PyArray_TYPE(<cnp.ndarray>x) != kind or \
            not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>x) or \
            not _tiles(x, gy, kh, kw) or x.shape != gx.shape or \
            _shares_memory(gx, x) or _shares_memory(gx, gy):
        return False
    if kind == cnp.NPY_FLOAT and kh == 2 and kw == 2 and gy.shape[3] > 0:
        # Row-contiguous for the SIMD loop: a convolution's channels-last
        # output copied C-ordered first (45 us on LeNet's first layer, the
        # loop then 5x faster than the strided one below).
        rows = numpy.ascontiguousarray(x)
        if cj_pool_2x2_grad_f32(<float*>_data(rows), <float*>_data(gy),
                                <float*>_data(gx), cnp.PyArray_SIZE(gy) //
                                gy.shape[3], x.shape[3], relu):
            return True
    for k in range(4):
        dims[k] = x.shape[k]
        strides[k] = x.strides[k]
    if kind == cnp.NPY_FLOAT:
        _max_pool_tiles_grad(<float*>_data(x), strides, <float*>_data(gy),
                             <float*>_data(gx), dims, kh, kw, relu)
    else:
        _max_pool_tiles_grad(<double*>_data(x), strides, <double*>_data(gy),
                             <double*>_data(gx), dims, kh, kw, relu)
    return True




# --- ReLU after max pooling over windows that tile the image -------------
# The forward that passes.fuse.fuse_relu_max_pooling runs: the windows'
# maxima, then maximum(m, 0). NumPy's maximum keeps a NaN from either side,
# so a window with a NaN gives NaN whatever the order of the comparisons,
# and the ReLU gives +0 for every other maximum <= 0: the values the pooling
# of strided views and the ReLU give, in one pass.

cdef extern from *:
    """
    /* 2x2 windows of float32 images with unit channel strides (a
       convolution's output, channels-last in memory): each window's four
       corners are runs of channels, taken four channels at a time in
       SSE2, the run's last four again where the channels are not a
       multiple of four (the same values written twice). Branch-free:
       branches on the random signs of the values ran 6x slower. The
       first NaN of a window, in the order NumPy's maxima of views meet
       them, is its value; else the maximum, -0 and +0 alike, then
       maximum(m, 0) (+0 for every m <= 0). Strides in elements: x's and
       y's of N, H, W. Returns 0, writing nothing, without SSE2 or for
       fewer than four channels. */
    #if defined(__SSE2__)
    #include <emmintrin.h>
    static inline __m128 cj_first_nan_or_max(__m128 a, __m128 b) {
        __m128 a_nan = _mm_cmpunord_ps(a, a);
        __m128 b_nan = _mm_cmpunord_ps(b, b);
        __m128 m = _mm_max_ps(a, b);  /* b where either is NaN */
        /* a where a is NaN; else m (b, NaN or not, where b is NaN). */
        return _mm_or_ps(_mm_and_ps(a_nan, a), _mm_andnot_ps(a_nan,
               _mm_or_ps(_mm_and_ps(b_nan, b), _mm_andnot_ps(b_nan, m))));
    }
    static inline void cj_relu_max_4(const float* r0, const float* r1,
                                     Py_ssize_t right, float* out) {
        __m128 m = cj_first_nan_or_max(
            cj_first_nan_or_max(_mm_loadu_ps(r0), _mm_loadu_ps(r1)),
            cj_first_nan_or_max(_mm_loadu_ps(r0 + right),
                                _mm_loadu_ps(r1 + right)));
        __m128 nan = _mm_cmpunord_ps(m, m);
        m = _mm_or_ps(_mm_and_ps(nan, m),
                      _mm_andnot_ps(nan, _mm_max_ps(m, _mm_setzero_ps())));
        _mm_storeu_ps(out, m);
    }
    static int cj_relu_max_pool_2x2_f32(
            const float* x, const Py_ssize_t* xs, float* y,
            const Py_ssize_t* ys, const Py_ssize_t* dims) {
        Py_ssize_t n, oy, ox, c, channels = dims[1];
        if (channels < 4)
            return 0;
        for (n = 0; n < dims[0]; n++)
            for (oy = 0; oy < dims[2]; oy++)
                for (ox = 0; ox < dims[3]; ox++) {
                    const float* r0 = x + n * xs[0] + 2 * oy * xs[1] +
                                      2 * ox * xs[2];
                    float* out = y + n * ys[0] + oy * ys[1] + ox * ys[2];
                    for (c = 0; c + 4 <= channels; c += 4)
                        cj_relu_max_4(r0 + c, r0 + xs[1] + c, xs[2],
                                      out + c);
                    if (c < channels) {
                        c = channels - 4;
                        cj_relu_max_4(r0 + c, r0 + xs[1] + c, xs[2],
                                      out + c);
                    }
                }
        return 1;
    }
    #else
    static int cj_relu_max_pool_2x2_f32(
            const float* x, const Py_ssize_t* xs, float* y,
            const Py_ssize_t* ys, const Py_ssize_t* dims) {
        return 0;
    }
    #endif
    """
    int cj_relu_max_pool_2x2_f32(const float* x, const Py_ssize_t* xs,
                                 float* y, const Py_ssize_t* ys,
                                 const Py_ssize_t* dims) nogil


def relu_max_pool_tiles(x, y, Py_ssize_t kh, Py_ssize_t kw):
    """``y`` = the ReLU of the maxima of ``x``'s 2x2 windows that tile
    it, ``x`` (N, C, H, W) and ``y`` (N, C, H / 2, W / 2) float32 with
    four channels or more, both channels-last in memory (unit channel
    strides: a convolution's output, and ``numpy.empty_like`` of a
    strided view of it), ``y`` writeable and apart from ``x``. Returns
    False, writing nothing, for other arrays or windows."""
    cdef Py_ssize_t x_steps[3]
    cdef Py_ssize_t y_steps[3]
    cdef Py_ssize_t dims[4]
    cdef int k
    if kh != 2 or kw != 2 or _strided_kind(x) != cnp.NPY_FLOAT or \
            _strided_kind(y) != cnp.NPY_FLOAT or \
            not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>y) or \
            not _tiles(x, y, kh, kw) or x.strides[1] != 4 or \
            y.strides[1] != 4 or \
            _shares_memory(<cnp.ndarray>x, <cnp.ndarray>y):
        return False
    for k in range(4):
        dims[k] = y.shape[k]
    for k, axis in enumerate((0, 2, 3)):
        x_steps[k] = x.strides[axis] // 4
        y_steps[k] = y.strides[axis] // 4
    return bool(cj_relu_max_pool_2x2_f32(
        <float*>_data(x), x_steps, <float*>_data(y), y_steps, dims))
