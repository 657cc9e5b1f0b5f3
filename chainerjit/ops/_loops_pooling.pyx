# cython: language_level=3, boundscheck=False, wraparound=False
"""C loops of max pooling: the gradient over windows that tile the image,
bit for bit as Chainer's im2col code.
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


cdef void _window_row_maxima(floating* x, Py_ssize_t row_step,
                             Py_ssize_t step, Py_ssize_t gx_width,
                             Py_ssize_t out_w, Py_ssize_t kh, Py_ssize_t kw,
                             Py_ssize_t* at, Py_ssize_t* at_gx) noexcept nogil:
    """For the row of ``out_w`` windows starting at ``x`` (its rows
    ``row_step`` bytes apart, its elements ``step``): the byte offset
    ``at`` of each window's first maximum from its corner, and ``at_gx``,
    that position's offset in a C-ordered image ``gx_width`` wide; the
    first NaN if there is one, as argmax. Window positions outside,
    windows inside, and no branches: the windows are independent chains
    of arithmetic, which pipeline (branches on the random signs of pooled
    values, or one window at a time, ran 3x slower)."""
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
                # Greater, or the first NaN (nothing is taken after one).
                take = (v > t) | ((v != v) & (t == t))
                at[ox] += take * (offset - at[ox])
                at_gx[ox] += take * (offset_gx - at_gx[ox])


cdef int _max_pool_tiles_grad(floating* x, Py_ssize_t* strides,
                              floating* gy, floating* gx, Py_ssize_t* dims,
                              Py_ssize_t kh, Py_ssize_t kw) except -1 nogil:
    """``x`` of any strides (in bytes), ``gy`` and ``gx`` C-ordered;
    ``dims``: N, C, H, W."""
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
                    strides[3], width, out_w, kh, kw, at, at + out_w)
                for i in range(kh):
                    memset(gx + start + i * width, 0,
                           width * sizeof(floating))
                for ox in range(out_w):
                    gx[start + ox * kw + at[out_w + ox]] = gy[k + ox]
    free(at)
    return 0


cdef extern from *:
    """
    /* The gradient of 2x2 tiling windows in float32, four windows at a
       time in SSE2 (x86-64's baseline): argmax's scan as masks (greater,
       or the first NaN, nothing taken after one), the gradients as
       masked copies of gy (+0 elsewhere). x and gx are C-ordered, 2 * rows
       rows of width; gy C-ordered, rows rows of width / 2. Returns 0,
       writing nothing, without SSE2. */
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
    static inline int cj_takes1(float v, float t) {
        return (v > t) | ((v != v) & (t == t));
    }
    static int cj_pool_2x2_grad_f32(const float* x, const float* gy,
                                    float* gx, Py_ssize_t rows,
                                    Py_ssize_t width) {
        Py_ssize_t out_w = width / 2, p, ox;
        for (p = 0; p < rows; p++) {
            const float* r0 = x + 2 * p * width;
            const float* r1 = r0 + width;
            float* g0 = gx + 2 * p * width;
            float* g1 = g0 + width;
            const float* g_row = gy + p * out_w;
            for (ox = 0; ox + 4 <= out_w; ox += 4) {
                __m128 lo = _mm_loadu_ps(r0 + 2 * ox);
                __m128 hi = _mm_loadu_ps(r0 + 2 * ox + 4);
                __m128 a = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
                __m128 b = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
                __m128 c, d, t, tb, tc, td, g;
                lo = _mm_loadu_ps(r1 + 2 * ox);
                hi = _mm_loadu_ps(r1 + 2 * ox + 4);
                c = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
                d = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
                tb = cj_takes(b, a);
                t = cj_select(tb, b, a);
                tc = cj_takes(c, t);
                t = cj_select(tc, c, t);
                td = cj_takes(d, t);
                g = _mm_loadu_ps(g_row + ox);
                /* The window's position taken last is its maximum. */
                tc = _mm_andnot_ps(td, tc);
                tb = _mm_andnot_ps(_mm_or_ps(tc, td), tb);
                a = _mm_andnot_ps(_mm_or_ps(_mm_or_ps(tb, tc), td), g);
                b = _mm_and_ps(tb, g);
                c = _mm_and_ps(tc, g);
                d = _mm_and_ps(td, g);
                _mm_storeu_ps(g0 + 2 * ox, _mm_unpacklo_ps(a, b));
                _mm_storeu_ps(g0 + 2 * ox + 4, _mm_unpackhi_ps(a, b));
                _mm_storeu_ps(g1 + 2 * ox, _mm_unpacklo_ps(c, d));
                _mm_storeu_ps(g1 + 2 * ox + 4, _mm_unpackhi_ps(c, d));
            }
            for (; ox < out_w; ox++) {
                float a = r0[2 * ox], b = r0[2 * ox + 1];
                float c = r1[2 * ox], d = r1[2 * ox + 1], t = a;
                int at = 0;
                if (cj_takes1(b, t)) { at = 1; t = b; }
                if (cj_takes1(c, t)) { at = 2; t = c; }
                if (cj_takes1(d, t)) { at = 3; }
                g0[2 * ox] = g0[2 * ox + 1] = 0;
                g1[2 * ox] = g1[2 * ox + 1] = 0;
                (at < 2 ? g0 : g1)[2 * ox + (at & 1)] = g_row[ox];
            }
        }
        return 1;
    }
    #else
    static int cj_pool_2x2_grad_f32(const float* x, const float* gy,
                                    float* gx, Py_ssize_t rows,
                                    Py_ssize_t width) {
        return 0;
    }
    #endif
    """
    int cj_pool_2x2_grad_f32(const float* x, const float* gy, float* gx,
                             Py_ssize_t rows, Py_ssize_t width) nogil


def max_pool_tiles_grad(x, gy, gx, Py_ssize_t kh, Py_ssize_t kw):
    """``gx`` = ``gy`` at the first maximum of each window of ``x``, zero
    elsewhere; ``x`` (N, C, H, W) of any strides (a convolution's
    transposed output, say), ``gy`` (N, C, H / kh, W / kw) and ``gx``
    C-ordered. Returns False, writing nothing, for arrays it does not
    take."""
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
                                gy.shape[3], x.shape[3]):
            return True
    for k in range(4):
        dims[k] = x.shape[k]
        strides[k] = x.strides[k]
    if kind == cnp.NPY_FLOAT:
        _max_pool_tiles_grad(<float*>_data(x), strides, <float*>_data(gy),
                             <float*>_data(gx), dims, kh, kw)
    else:
        _max_pool_tiles_grad(<double*>_data(x), strides, <double*>_data(gy),
                             <double*>_data(gx), dims, kh, kw)
    return True
