# cython: language_level=3, boundscheck=False, wraparound=False
"""C loops over arrays: chains of elementwise arithmetic in one pass, and
the loops over windows of convolutions and pooling that NumPy runs as
copies of strided views with short inner runs.

``benchmarks/bench_elementwise.py`` measured the CPU options: for chains
of additions, products and a ReLU, one C loop is 3x to 5x faster than
NumPy's passes (one per ufunc, each through memory and a Python call),
while NumPy's SIMD tanh and exp beat any scalar C loop, so chains with
those stay NumPy ufuncs writing in place. Each loop here does, element
by element, the same float operations in the same order as the NumPy
code it replaces (built with ``-ffp-contract=off``, so no fused
multiply-add changes a rounding), and gives the same values; the window
loops copy values, or add them in Chainer's order.
"""

cimport cython
from cython cimport floating
from libc.math cimport sqrt
from libc.math cimport sqrtf
from libc.stdlib cimport free
from libc.stdlib cimport malloc
from libc.string cimport memset
cimport numpy as cnp
import numpy

cnp.import_array()

cdef object _ndarray = numpy.ndarray


def bias_relu(y, b, out):
    """``out = maximum(y + b, 0)`` (``b`` broadcast along rows) for
    2-d ``y`` (any strides) and ``out`` (C-ordered, writeable; it may be
    ``y`` itself) and 1-d contiguous ``b``, all float32 or all float64.
    Returns False, writing nothing, for arrays it does not take. Checked
    in C (about 0.3 us a call; typed memoryviews took 1.3 us)."""
    cdef cnp.ndarray Y, B, O
    cdef Py_ssize_t r, n_rows, n
    cdef int kind = _c_ordered(out, -1, True)
    if kind < 0 or _c_ordered(b, kind, False) < 0 or \
            type(y) is not _ndarray:
        return False
    Y, B, O = y, b, out
    if cnp.PyArray_TYPE(Y) != kind or not cnp.PyArray_ISNOTSWAPPED(Y) or \
            Y.ndim != 2 or O.ndim != 2 or B.ndim != 1 or \
            Y.shape[0] != O.shape[0] or Y.shape[1] != O.shape[1] or \
            B.shape[0] != O.shape[1] or _shares_memory(O, B):
        return False
    in_place = cnp.PyArray_DATA(Y) == cnp.PyArray_DATA(O) and \
        cnp.PyArray_IS_C_CONTIGUOUS(Y)
    if not in_place and _shares_memory(Y, O):
        return False
    n_rows, n = O.shape[0], O.shape[1]
    for r in range(n_rows if n else 0):
        # In place, one pointer: with two the compiler cannot vectorise a
        # loop whose source and destination alias, and the scalar loop's
        # branch on the sign costs ten times as much.
        if in_place and kind == cnp.NPY_FLOAT:
            _bias_relu_in_place(<float*>_row(O, r), <float*>_data(B), n)
        elif in_place:
            _bias_relu_in_place(<double*>_row(O, r), <double*>_data(B), n)
        elif kind == cnp.NPY_FLOAT:
            _bias_relu_row(_row(Y, r), Y.strides[1], <float*>_data(B),
                           <float*>_row(O, r), n)
        else:
            _bias_relu_row(_row(Y, r), Y.strides[1], <double*>_data(B),
                           <double*>_row(O, r), n)
    return True


cdef inline char* _row(cnp.ndarray a, Py_ssize_t r):
    return <char*>cnp.PyArray_DATA(a) + r * a.strides[0]


cdef inline void _bias_relu_in_place(floating* row, floating* bias,
                                     Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k
    cdef floating v
    for k in range(n):
        v = row[k] + bias[k]
        row[k] = 0 if v <= 0 else v  # NaN stays NaN


cdef inline void _bias_relu_row(char* row, Py_ssize_t step, floating* bias,
                                floating* dest, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k
    cdef floating v
    for k in range(n):
        v = (<floating*>(row + k * step))[0] + bias[k]
        dest[k] = 0 if v <= 0 else v


def scale_shift_rows(floating[:, ::1] x, floating[:, ::1] scale,
                     floating[::1] gamma, floating[::1] beta):
    """In place: ``x = x * scale * gamma + beta``, ``scale`` one value
    per row (shape ``(rows, 1)``), ``gamma`` and ``beta`` one per column,
    in that order of operations."""
    cdef Py_ssize_t r, k, n_rows = x.shape[0], n = x.shape[1]
    cdef floating s, v
    with nogil:
        for r in range(n_rows):
            s = scale[r, 0]
            for k in range(n):
                v = x[r, k] * s
                v = v * gamma[k]
                x[r, k] = v + beta[k]


# --- flat loops over whole arrays ---------------------------------------
# Each takes NumPy arrays of any one shape, each one dense block of memory
# in the same order of axes (C-contiguous, or a dense transposed layout
# such as a convolution's NHWC output seen as NCHW, with equal strides),
# all float32 or all float64 in native byte order, the ones it writes
# writeable and not partly overlapping another; it loops over the blocks
# in memory order. It returns False, writing nothing, for arrays it does
# not take, so that the caller runs NumPy's code instead. The checks are
# C, so a call costs about a microsecond.


cdef int _loop_type(tuple arrays, Py_ssize_t n_written, Py_ssize_t* size):
    """The NumPy type number the loop runs in (``NPY_FLOAT`` or
    ``NPY_DOUBLE``), or -1 if ``arrays`` are not ones it takes; the first
    ``n_written`` are written to. Sets ``size`` to their size."""
    cdef cnp.ndarray first, a
    cdef int kind, k
    cdef Py_ssize_t i
    for i in range(len(arrays)):
        if type(arrays[i]) is not _ndarray:
            return -1
    first = arrays[0]
    kind = cnp.PyArray_TYPE(first)
    if kind != cnp.NPY_FLOAT and kind != cnp.NPY_DOUBLE or not _dense(first):
        return -1
    for i in range(len(arrays)):
        a = arrays[i]
        if cnp.PyArray_TYPE(a) != kind or not cnp.PyArray_ISNOTSWAPPED(a) \
                or not _same_layout(a, first):
            return -1
        if i < n_written and not cnp.PyArray_ISWRITEABLE(a):
            return -1
    for i in range(n_written):
        for k in range(len(arrays)):
            if k != i and _partly_overlap(arrays[i], arrays[k]):
                return -1
    size[0] = cnp.PyArray_SIZE(first)
    return kind


cdef bint _dense(cnp.ndarray a):
    """Is ``a`` one block of memory holding each element once, in some
    order of its axes (positive strides, each axis of more than one
    element stepping over the axes inside it)?"""
    cdef int k, inner, ndim = cnp.PyArray_NDIM(a)
    cdef Py_ssize_t step = cnp.PyArray_ITEMSIZE(a), stride
    cdef bint placed[cnp.NPY_MAXDIMS]
    if cnp.PyArray_IS_C_CONTIGUOUS(a):
        return True
    for k in range(ndim):
        placed[k] = cnp.PyArray_DIM(a, k) <= 1
    while True:  # the innermost axis not placed yet must step by ``step``
        inner = -1
        for k in range(ndim):
            if not placed[k] and (inner < 0 or cnp.PyArray_STRIDE(a, k) <
                                  cnp.PyArray_STRIDE(a, inner)):
                inner = k
        if inner < 0:
            return True
        if cnp.PyArray_STRIDE(a, inner) != step:
            return False
        step *= cnp.PyArray_DIM(a, inner)
        placed[inner] = True


cdef bint _same_layout(cnp.ndarray a, cnp.ndarray first):
    """Has ``a`` the shape of ``first`` (a dense array) and its order of
    elements in memory?"""
    cdef int k
    if cnp.PyArray_NDIM(a) != cnp.PyArray_NDIM(first):
        return False
    for k in range(cnp.PyArray_NDIM(a)):
        if cnp.PyArray_DIM(a, k) != cnp.PyArray_DIM(first, k):
            return False
    if cnp.PyArray_IS_C_CONTIGUOUS(first):
        return cnp.PyArray_IS_C_CONTIGUOUS(a)
    for k in range(cnp.PyArray_NDIM(a)):
        if cnp.PyArray_DIM(a, k) > 1 and \
                cnp.PyArray_STRIDE(a, k) != cnp.PyArray_STRIDE(first, k):
            return False
    return True


cdef int _c_ordered(object a, int kind, bint written):
    """``a``'s type number if it is a C-ordered NumPy array of float32 or
    float64 in native byte order (of type ``kind``, unless that is -1),
    writeable if ``written``; else -1."""
    cdef cnp.ndarray array
    cdef int found
    if type(a) is not _ndarray:
        return -1
    array = a
    found = cnp.PyArray_TYPE(array)
    if (found != cnp.NPY_FLOAT and found != cnp.NPY_DOUBLE) or \
            (kind >= 0 and found != kind) or \
            not cnp.PyArray_IS_C_CONTIGUOUS(array) or \
            not cnp.PyArray_ISNOTSWAPPED(array) or \
            (written and not cnp.PyArray_ISWRITEABLE(array)):
        return -1
    return found


cdef void _span(cnp.ndarray a, char** low, char** high):
    """The bytes ``a``'s elements lie in, ``[low, high)``, from its
    strides (empty for an empty array)."""
    cdef int k
    low[0] = high[0] = <char*>cnp.PyArray_DATA(a)
    if cnp.PyArray_SIZE(a) == 0:
        return
    high[0] += cnp.PyArray_ITEMSIZE(a)
    for k in range(a.ndim):
        if a.strides[k] < 0:
            low[0] += a.strides[k] * (a.shape[k] - 1)
        else:
            high[0] += a.strides[k] * (a.shape[k] - 1)


cdef bint _shares_memory(cnp.ndarray a, cnp.ndarray b):
    """May ``a`` and ``b`` share memory (do their spans intersect)?"""
    cdef char* low_a
    cdef char* high_a
    cdef char* low_b
    cdef char* high_b
    _span(a, &low_a, &high_a)
    _span(b, &low_b, &high_b)
    return low_a < high_b and low_b < high_a


cdef bint _partly_overlap(cnp.ndarray a, cnp.ndarray b):
    """Do ``a`` and ``b`` share memory without starting at the same place?
    (Elementwise loops may write into an identical block.)"""
    return cnp.PyArray_DATA(a) != cnp.PyArray_DATA(b) and \
        _shares_memory(a, b)


cdef void _relu_grad(floating* gy, floating* y, floating* out,
                     Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = gy[i] * (1 if y[i] > 0 else 0)


def relu_grad(gy, y, out):
    """``out = gy * (y > 0)``, the gradient of a ReLU given its output
    (a product by 1 or 0, as NumPy multiplies by the boolean mask).
    ``out`` may be ``gy``. Returns False for arrays it does not take."""
    cdef Py_ssize_t n
    cdef int kind = _loop_type((out, gy, y), 1, &n)
    if kind < 0:
        return False
    if kind == cnp.NPY_FLOAT:
        _relu_grad(<float*>_data(gy), <float*>_data(y), <float*>_data(out),
                   n)
    else:
        _relu_grad(<double*>_data(gy), <double*>_data(y),
                   <double*>_data(out), n)
    return True


cdef void _half_plus_half(floating* t, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        t[i] = t[i] * <floating>0.5 + <floating>0.5


def half_plus_half(t):
    """In place, ``t = t * 0.5 + 0.5`` (``t *= 0.5; t += 0.5``): Chainer's
    CPU sigmoid after ``t = tanh(x * 0.5)``. Returns False for arrays it
    does not take."""
    cdef Py_ssize_t n
    cdef int kind = _loop_type((t,), 1, &n)
    if kind < 0:
        return False
    if kind == cnp.NPY_FLOAT:
        _half_plus_half(<float*>_data(t), n)
    else:
        _half_plus_half(<double*>_data(t), n)
    return True


cdef void _sgd(floating* w, floating* g, floating rate,
               Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        w[i] = w[i] - rate * g[i]


def sgd_update(w, g, double lr):
    """``SGDRule.update_core_cpu`` on NumPy arrays, ``w -= lr * g``: the
    product rounded to ``w``'s dtype (NumPy casts the Python float
    ``lr`` to it), then the difference; no temporary array. Returns False
    for arrays it does not take."""
    cdef Py_ssize_t n
    cdef int kind = _loop_type((w, g), 1, &n)
    if kind < 0:
        return False
    if kind == cnp.NPY_FLOAT:
        _sgd(<float*>_data(w), <float*>_data(g), <float>lr, n)
    else:
        _sgd(<double*>_data(w), <double*>_data(g), lr, n)
    return True


cdef void _momentum_sgd(floating* w, floating* g, floating* v,
                        floating rate, floating mu,
                        Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef floating step
    for i in range(n):
        step = v[i] * mu
        step = step - rate * g[i]
        v[i] = step
        w[i] = w[i] + step


def momentum_sgd_update(w, g, v, double lr, double momentum):
    """``MomentumSGDRule.update_core_cpu`` on NumPy arrays: ``v *=
    momentum; v -= lr * g; w += v``, element by element with the same
    roundings. Returns False for arrays it does not take."""
    cdef Py_ssize_t n
    cdef int kind = _loop_type((w, v, g), 2, &n)
    if kind < 0:
        return False
    if kind == cnp.NPY_FLOAT:
        _momentum_sgd(<float*>_data(w), <float*>_data(g), <float*>_data(v),
                      <float>lr, <float>momentum, n)
    else:
        _momentum_sgd(<double*>_data(w), <double*>_data(g),
                      <double*>_data(v), lr, momentum, n)
    return True


cdef inline void* _data(object a):
    return cnp.PyArray_DATA(<cnp.ndarray>a)


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


cdef int _strided_kind(image):
    """The dtype's type number of a float32 or float64 NumPy array in
    native byte order whose strides are non-negative multiples of its
    item size; else -1."""
    cdef cnp.ndarray array
    cdef int kind, k
    if type(image) is not _ndarray:
        return -1
    array = image
    kind = cnp.PyArray_TYPE(array)
    if (kind != cnp.NPY_FLOAT and kind != cnp.NPY_DOUBLE) or \
            not cnp.PyArray_ISNOTSWAPPED(array):
        return -1
    for k in range(array.ndim):
        if array.strides[k] < 0 or \
                array.strides[k] % cnp.PyArray_ITEMSIZE(array):
            return -1
    return kind


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
    cdef floating* image = <floating*>malloc(
        channels * plane * sizeof(floating))
    cdef floating* source
    cdef floating* row
    if image == NULL:
        with gil:
            raise MemoryError()
    memset(image, 0, channels * plane * sizeof(floating))
    for n in range(dims[0]):
        for c in range(channels):  # the image's interior
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


cdef void _patch_columns(floating* x, floating* out, Py_ssize_t* dims,
                         Geometry g) noexcept nogil:
    """``out`` as (N, C, kh, kw, out_h, out_w), im2col's layout."""
    cdef Py_ssize_t height = dims[2], width = dims[3], out_w = dims[5]
    cdef Py_ssize_t n, oy, ox, c, i, j, iy, x0, lo, hi
    cdef floating* plane
    for n in range(dims[0]):
        for c in range(dims[1]):
            plane = x + (n * dims[1] + c) * height * width
            for i in range(g.kh):
                for j in range(g.kw):
                    x0 = j * g.dx - g.pw
                    _inside(x0, g.sx, out_w, width, &lo, &hi)
                    for oy in range(dims[4]):
                        iy = oy * g.sy - g.ph + i * g.dy
                        if iy < 0 or iy >= height:
                            for ox in range(out_w):
                                out[ox] = 0
                        else:
                            for ox in range(lo):
                                out[ox] = 0
                            for ox in range(lo, hi):
                                out[ox] = plane[iy * width + x0 + ox * g.sx]
                            for ox in range(hi, out_w):
                                out[ox] = 0
                        out += out_w


def convolution_patches(x, out, tuple geometry, bint rows):
    """Fills ``out`` with the patches of ``x`` (N, C, H, W) for a
    convolution of ``geometry`` ``(kh, kw, sy, sx, ph, pw, dy, dx)``:
    ``rows`` as a (N, out_h, out_w, C, kh, kw) array, else as im2col's
    (N, C, kh, kw, out_h, out_w). Returns False, writing nothing, unless
    ``x`` is a float32 or float64 array (C-ordered for im2col's layout;
    for rows, any non-negative strides, as a convolution's transposed
    output has) and ``out`` a writeable C-ordered array of its dtype and
    of that shape, apart from it."""
    cdef Geometry g
    cdef Py_ssize_t dims[6]
    cdef Py_ssize_t steps[4]
    cdef int k
    if not _read_geometry(geometry, &g):
        return False
    cdef int kind = _image_and_patches(x, out, &g, dims, False, rows)
    if kind < 0 or out.shape != ((dims[0], dims[4], dims[5], dims[1], g.kh,
                                  g.kw) if rows else
                                 (dims[0], dims[1], g.kh, g.kw, dims[4],
                                  dims[5])):
        return False
    for k in range(4):
        steps[k] = x.strides[k] // x.itemsize
    if kind == cnp.NPY_FLOAT and rows:
        _patch_rows(<float*>_data(x), <float*>_data(out), dims, steps, g)
    elif kind == cnp.NPY_FLOAT:
        _patch_columns(<float*>_data(x), <float*>_data(out), dims, g)
    elif rows:
        _patch_rows(<double*>_data(x), <double*>_data(out), dims, steps, g)
    else:
        _patch_columns(<double*>_data(x), <double*>_data(out), dims, g)
    return True


cdef void _add_patches(floating* col, floating* img, Py_ssize_t* dims,
                       Geometry g) noexcept nogil:
    """``img += `` the patches ``col`` (C, kh, kw, N, out_h, out_w) put
    back where they came from, kernel position by kernel position (j, i)
    as ``col2im_cpu`` adds them, so each pixel sums in its order; patch
    values that fall on the padding are dropped (col2im cuts it off)."""
    cdef Py_ssize_t channels = dims[1], height = dims[2], width = dims[3]
    cdef Py_ssize_t c, j, i, n, oy, iy, x0, lo, hi, k
    cdef floating* row
    for c in range(channels):
        for j in range(g.kh):
            for i in range(g.kw):
                x0 = i * g.dx - g.pw
                _inside(x0, g.sx, dims[5], width, &lo, &hi)
                for n in range(dims[0]):
                    for oy in range(dims[4]):
                        iy = oy * g.sy + j * g.dy - g.ph
                        if 0 <= iy < height and lo < hi:
                            row = img + ((n * channels + c) * height + iy) * \
                                width + x0 + lo * g.sx
                            for k in range(hi - lo):
                                row[k * g.sx] = row[k * g.sx] + col[lo + k]
                        col += dims[5]


def add_convolution_patches(col, img, tuple geometry):
    """``img`` (N, C, H, W), zeros, += the patches ``col`` (C, kh, kw, N,
    out_h, out_w) of a convolution of ``geometry``: ``col2im_cpu``'s
    result, bit for bit. Returns False, writing nothing, for arrays it
    does not take (as ``convolution_patches``)."""
    cdef Geometry g
    cdef Py_ssize_t dims[6]
    if not _read_geometry(geometry, &g):
        return False
    cdef int kind = _image_and_patches(img, col, &g, dims, True)
    if kind < 0 or col.shape != (dims[1], g.kh, g.kw, dims[0], dims[4],
                                 dims[5]):
        return False
    if kind == cnp.NPY_FLOAT:
        _add_patches(<float*>_data(col), <float*>_data(img), dims, g)
    else:
        _add_patches(<double*>_data(col), <double*>_data(img), dims, g)
    return True


# --- reductions over short rows -----------------------------------------


cdef inline floating _larger(floating v, floating top) noexcept nogil:
    return v if v > top else top


cdef void _row_max(floating* x, floating* out, Py_ssize_t n_rows,
                   Py_ssize_t n) noexcept nogil:
    """The maxima of ``n_rows`` rows of ``n``: NumPy's values (the first
    NaN of a row holding one; of equal zeros, any, where NumPy's SIMD
    reduction may give the other sign). Selects on four independent
    lanes and a NaN flag, no branch per element (the rows' signs are
    random): 3x faster than one lane on rows of 32."""
    cdef Py_ssize_t r, k
    cdef floating t0, t1, t2, t3, v0, v1, v2, v3, top
    cdef bint nan
    for r in range(n_rows):
        t0 = t1 = t2 = t3 = x[0]
        nan = False
        k = 0
        while k + 4 <= n:
            v0, v1, v2, v3 = x[k], x[k + 1], x[k + 2], x[k + 3]
            nan = nan | (v0 != v0) | (v1 != v1) | (v2 != v2) | (v3 != v3)
            t0 = _larger(v0, t0)
            t1 = _larger(v1, t1)
            t2 = _larger(v2, t2)
            t3 = _larger(v3, t3)
            k += 4
        top = _larger(t1, t0)
        top = _larger(t2, top)
        top = _larger(t3, top)
        while k < n:
            v0 = x[k]
            nan = nan | (v0 != v0)
            top = _larger(v0, top)
            k += 1
        if nan:  # rare: find the first NaN
            for k in range(n):
                if x[k] != x[k]:
                    top = x[k]
                    break
        out[r] = top
        x += n


def row_max(x, out):
    """``out[..., 0] = x.max(axis=-1)`` for a C-ordered float32 or float64
    ``x`` with at least one element per row and ``out`` of shape
    ``x.shape[:-1] + (1,)``: NumPy's values (NaN if a row holds one; a
    zero's sign may differ, which ``x - max`` does not see).
    NumPy's maximum over rows of a few dozen elements is 5x slower.
    Returns False, writing nothing, for arrays it does not take."""
    cdef cnp.ndarray X, O
    cdef Py_ssize_t n
    cdef int kind = _c_ordered(x, -1, False)
    if kind < 0 or _c_ordered(out, kind, True) < 0:
        return False
    X, O = x, out
    if X.ndim < 1 or out.shape != x.shape[:X.ndim - 1] + (1,) or \
            X.shape[X.ndim - 1] < 1 or _shares_memory(X, O):
        return False
    n = X.shape[X.ndim - 1]
    if kind == cnp.NPY_FLOAT:
        _row_max(<float*>_data(X), <float*>_data(O), cnp.PyArray_SIZE(O), n)
    else:
        _row_max(<double*>_data(X), <double*>_data(O), cnp.PyArray_SIZE(O),
                 n)
    return True


# --- LSTM gates ------------------------------------------------------------

cdef void _gate_major(char* x, Py_ssize_t row_step, Py_ssize_t col_step,
                      char* y, Py_ssize_t y_row_step, Py_ssize_t y_col_step,
                      floating* out, Py_ssize_t n_rows, Py_ssize_t n_units,
                      floating ifo_scale) noexcept nogil:
    cdef Py_ssize_t b, j, g, plane = n_rows * n_units
    cdef floating* a
    cdef floating* src
    cdef char* cell
    cdef char* other
    cdef floating v
    if y == NULL and col_step == sizeof(floating):  # rows of x in turn
        for b in range(n_rows):
            a = out + b * n_units  # gate a of row b; i, f, o a plane apart
            src = <floating*>(x + b * row_step)
            for j in range(n_units):
                a[j] = src[4 * j]
                a[plane + j] = src[4 * j + 1] * ifo_scale
                a[2 * plane + j] = src[4 * j + 2] * ifo_scale
                a[3 * plane + j] = src[4 * j + 3] * ifo_scale
        return
    for b in range(n_rows):
        a = out + b * n_units
        cell = x + b * row_step
        other = y + b * y_row_step if y != NULL else NULL
        for j in range(n_units):
            for g in range(4):
                v = (<floating*>cell)[0]
                if other != NULL:
                    v = v + (<floating*>other)[0]
                    other += y_col_step
                a[g * plane + j] = v if g == 0 else v * ifo_scale
                cell += col_step


def gate_major(x, out, double ifo_scale, addend=None):
    """``out[g, b, j] = x[b, 4 * j + g]`` (``+ addend[b, 4 * j + g]``, if
    given, the sum rounded as NumPy's ``x + addend``): the gates Chainer's
    LSTM interleaves (``x.reshape(B, H, 4)``), a, i, f, o, as contiguous
    blocks, with i, f and o multiplied by ``ifo_scale`` (in ``x``'s
    dtype: 0.5 starts Chainer's sigmoid, exactly; 1 copies). ``x`` and
    ``addend`` (B, 4H) float32 or float64 of any strides, ``out`` a
    C-ordered (4, B, H) array of their dtype. 3x faster than NumPy's copy
    of the strided view. Returns False, writing nothing, for arrays it
    does not take."""
    return _gate_major_checked(x, out, ifo_scale, addend)


cdef bint _gate_major_checked(x, out, double ifo_scale, addend):
    """:func:`gate_major`."""
    cdef int kind = _c_ordered(out, -1, True)
    cdef object a
    for a in (x,) if addend is None else (x, addend):
        if kind < 0 or type(a) is not _ndarray or \
                cnp.PyArray_TYPE(<cnp.ndarray>a) != kind or \
                not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>a) or \
                a.ndim != 2 or out.ndim != 3 or out.shape[0] != 4 or \
                out.shape[1] != a.shape[0] or \
                a.shape[1] != 4 * out.shape[2] or _shares_memory(out, a):
            return False
    cdef Py_ssize_t row_step = x.strides[0], col_step = x.strides[1]
    cdef Py_ssize_t y_row_step = 0, y_col_step = 0
    cdef Py_ssize_t n_rows = out.shape[1], n_units = out.shape[2]
    cdef char* y = NULL
    if addend is not None:
        y = <char*>_data(addend)
        y_row_step = addend.strides[0]
        y_col_step = addend.strides[1]
    if kind == cnp.NPY_FLOAT:
        _gate_major(<char*>_data(x), row_step, col_step, y, y_row_step,
                    y_col_step, <float*>_data(out), n_rows, n_units,
                    <float>ifo_scale)
    else:
        _gate_major(<char*>_data(x), row_step, col_step, y, y_row_step,
                    y_col_step, <double*>_data(out), n_rows, n_units,
                    ifo_scale)
    return True


cdef void _lstm_cell(floating* gates, floating* c_prev, floating* c,
                     Py_ssize_t n_rows, Py_ssize_t n_units) noexcept nogil:
    cdef Py_ssize_t k, plane = n_rows * n_units
    cdef floating* a = gates
    cdef floating* i = gates + plane
    cdef floating* f = gates + 2 * plane
    _half_plus_half(i, 3 * plane)  # two loops that vectorize
    for k in range(plane):
        c[k] = a[k] * i[k] + f[k] * c_prev[k]


def lstm_cell(gates, c_prev, c):
    """Chainer's LSTM cell after its ``tanh``s of the gates: from
    ``gates`` ((4, B, H): tanh(a), then tanh(x / 2) of i, f and o)
    finishes the sigmoids in place (``t * 0.5 + 0.5``) and writes ``c =
    a * i + f * c_prev`` into the first B rows of ``c`` from the first B
    rows of ``c_prev``. All C-ordered, of one dtype. Returns False,
    writing nothing, for arrays it does not take."""
    cdef int kind = _cell_arrays(gates, c_prev, c)
    if kind < 0:
        return False
    cdef Py_ssize_t n_rows = gates.shape[1], n_units = gates.shape[2]
    if kind == cnp.NPY_FLOAT:
        _lstm_cell(<float*>_data(gates), <float*>_data(c_prev),
                   <float*>_data(c), n_rows, n_units)
    else:
        _lstm_cell(<double*>_data(gates), <double*>_data(c_prev),
                   <double*>_data(c), n_rows, n_units)
    return True


cdef int _cell_arrays(gates, c_prev, c):
    """The dtype of :func:`lstm_cell`'s arrays, or -1 if it does not take
    them."""
    cdef int kind = _c_ordered(gates, -1, True)
    if kind < 0 or gates.ndim != 3 or gates.shape[0] != 4 or \
            _c_ordered(c_prev, kind, False) < 0 or \
            _c_ordered(c, kind, True) < 0:
        return -1
    cdef Py_ssize_t n_rows = gates.shape[1], n_units = gates.shape[2]
    cdef object array
    for array in (c_prev, c):
        if array.ndim != 2 or array.shape[0] < n_rows or \
                array.shape[1] != n_units:
            return -1
    if _shares_memory(gates, c) or _shares_memory(c_prev, c) or \
            _shares_memory(gates, c_prev):
        return -1
    return kind


# NumPy's own inner loops of ``numpy.tanh`` for float32 and float64 (the
# SIMD ones its dispatcher picked for this CPU), so that a C loop calls
# the very function ``numpy.tanh(a, out=a)`` runs on a contiguous array.
ctypedef void (*_UnaryLoop)(char**, cnp.npy_intp*, cnp.npy_intp*,
                           void*) noexcept nogil
cdef _UnaryLoop _tanh_loops[2]
cdef void* _tanh_data[2]


cdef void _find_tanh_loops():
    cdef cnp.ufunc tanh = numpy.tanh
    cdef int k, slot
    _tanh_loops[0] = _tanh_loops[1] = NULL
    for k in range(tanh.ntypes):
        if tanh.types[2 * k] != tanh.types[2 * k + 1]:
            continue
        slot = 0 if tanh.types[2 * k] == cnp.NPY_FLOAT else \
            1 if tanh.types[2 * k] == cnp.NPY_DOUBLE else -1
        if slot >= 0 and _tanh_loops[slot] == NULL:  # the one NumPy picks
            _tanh_loops[slot] = <_UnaryLoop>tanh.functions[k]
            _tanh_data[slot] = tanh.data[k]


_find_tanh_loops()


cdef inline bint _tanh_found(int kind):
    return _tanh_loops[0 if kind == cnp.NPY_FLOAT else 1] != NULL


cdef void _tanh(floating* x, floating* out, Py_ssize_t n) noexcept nogil:
    """``numpy.tanh(x, out=out)`` for contiguous ``x`` and ``out``."""
    cdef char* args[2]
    cdef cnp.npy_intp size = n
    cdef cnp.npy_intp steps[2]
    cdef int slot = 0 if floating is float else 1
    args[0] = <char*>x
    args[1] = <char*>out
    steps[0] = steps[1] = sizeof(floating)
    _tanh_loops[slot](args, &size, steps, _tanh_data[slot])


def tanh(x, out):
    """``numpy.tanh(x, out=out)`` through the loop the fused LSTM step
    calls, for C-ordered ``x`` and ``out`` of one shape and dtype (for
    tests). Returns False for arrays it does not take."""
    cdef int kind = _c_ordered(x, -1, False)
    if kind < 0 or _c_ordered(out, kind, True) < 0 or \
            x.shape != out.shape or _partly_overlap(x, out) or \
            not _tanh_found(kind):
        return False
    if kind == cnp.NPY_FLOAT:
        _tanh[float](<float*>_data(x), <float*>_data(out), x.size)
    else:
        _tanh[double](<double*>_data(x), <double*>_data(out), x.size)
    return True


cdef void _lstm_step(floating* gates, floating* c_prev, floating* c,
                     floating* h, Py_ssize_t n_rows,
                     Py_ssize_t n_units) noexcept nogil:
    cdef Py_ssize_t k, plane = n_rows * n_units
    cdef floating* o = gates + 3 * plane
    _tanh(gates, gates, 4 * plane)
    _lstm_cell(gates, c_prev, c, n_rows, n_units)
    _tanh(c, h, plane)
    for k in range(plane):
        h[k] = h[k] * o[k]


def lstm_step(x, addend, c_prev, gates, c, h):
    """Chainer's LSTM step on ``x`` (+ ``addend``, or None) in one call:
    the gates of ``x`` made gate-major into ``gates`` (:func:`gate_major`),
    NumPy's ``tanh`` of them all (its own loop, i, f and o halved first),
    the sigmoids finished and ``c`` written (:func:`lstm_cell`; the rows
    of ``c_prev`` past the batch copied), then ``h = tanh(c) * o``. The
    values of Chainer's NumPy code, bit for bit. ``x`` and ``addend`` (B,
    4H) of any strides; ``c_prev`` and ``c`` (B' >= B, H), ``gates`` (4,
    B, H) and ``h`` (B, H) C-ordered; all float32 or all float64. Returns
    False, writing nothing, for arrays it does not take."""
    cdef int kind = _cell_arrays(gates, c_prev, c)
    if kind < 0 or _c_ordered(h, kind, True) < 0 or h.ndim != 2 or \
            h.shape[0] != gates.shape[1] or h.shape[1] != gates.shape[2] or \
            c.shape[0] != c_prev.shape[0] or not _tanh_found(kind):
        return False
    cdef object array
    for array in (gates, c_prev, c):
        if _shares_memory(h, array):
            return False
    for array in (c_prev, c, h):
        if _shares_memory(x, array) or \
                (addend is not None and _shares_memory(addend, array)):
            return False
    if not _gate_major_checked(x, gates, 0.5, addend):
        return False
    cdef Py_ssize_t n_rows = gates.shape[1], n_units = gates.shape[2]
    if kind == cnp.NPY_FLOAT:
        _lstm_step(<float*>_data(gates), <float*>_data(c_prev),
                   <float*>_data(c), <float*>_data(h), n_rows, n_units)
    else:
        _lstm_step(<double*>_data(gates), <double*>_data(c_prev),
                   <double*>_data(c), <double*>_data(h), n_rows, n_units)
    if n_rows < c.shape[0]:
        c[n_rows:] = c_prev[n_rows:]
    return True


cdef void _lstm_grad(floating* gates, floating* co, floating* c_prev,
                     floating* gh, floating* gc, floating* gc_prev,
                     floating* gx, Py_ssize_t n_rows,
                     Py_ssize_t n_units) noexcept nogil:
    cdef Py_ssize_t b, j, k, plane = n_rows * n_units
    cdef floating a, i, f, o, c, g, one = 1
    cdef floating* row
    for b in range(n_rows):
        row = gx + b * 4 * n_units
        for j in range(n_units):
            k = b * n_units + j
            a = gates[k]
            i = gates[plane + k]
            f = gates[2 * plane + k]
            o = gates[3 * plane + k]
            c = co[k]
            g = 0
            if gh != NULL:
                g = gh[k] * o
                g = g * (one - c * c)
            if gc != NULL:
                g = g + gc[k]
            row[4 * j] = (g * i) * (one - a * a)
            row[4 * j + 1] = (g * a) * (i * (one - i))
            row[4 * j + 2] = (g * c_prev[k]) * (f * (one - f))
            row[4 * j + 3] = (gh[k] * c) * (o * (one - o)) if gh != NULL \
                else 0
            gc_prev[k] = g * f


def lstm_grad(gates, co, c_prev, gh, gc, gc_prev, gx):
    """The elementwise part of Chainer's ``LSTMGrad`` in one pass, with
    its operations in its order: from ``gates`` ((4, B, H): tanh(a) and
    the sigmoids of i, f, o), ``co = tanh(c)`` (B, H) and the first B rows
    of ``c_prev``, ``gc`` (``None`` for no gradient) and ``gh`` (B rows,
    or ``None``), writes the first B rows of ``gc_prev`` and ``gx`` (B,
    4H), its gates interleaved as Chainer lays them out. All C-ordered,
    of one dtype. Returns False, writing nothing, for arrays it does not
    take."""
    cdef int kind = _c_ordered(gates, -1, False)
    if kind < 0 or gates.ndim != 3 or gates.shape[0] != 4:
        return False
    cdef Py_ssize_t n_rows = gates.shape[1], n_units = gates.shape[2]
    cdef tuple rows = (n_rows, n_units)
    cdef object array
    for array, written, optional in (
            (co, False, False), (c_prev, False, False), (gh, False, True),
            (gc, False, True), (gc_prev, True, False), (gx, True, False)):
        if array is None:
            if not optional:
                return False
        elif _c_ordered(array, kind, written) < 0 or array.ndim != 2:
            return False
    if co.shape != rows or (gh is not None and gh.shape != rows) or \
            gx.shape != (n_rows, 4 * n_units):
        return False
    for array in (c_prev, gc, gc_prev):
        if array is not None and (array.shape[0] < n_rows or
                                  array.shape[1] != n_units):
            return False
    for array in (gates, co, c_prev, gh, gc):
        if array is not None and (_shares_memory(array, gc_prev) or
                                  _shares_memory(array, gx)):
            return False
    if _shares_memory(gc_prev, gx):
        return False
    if kind == cnp.NPY_FLOAT:
        _lstm_grad(<float*>_data(gates), <float*>_data(co),
                   <float*>_data(c_prev),
                   NULL if gh is None else <float*>_data(gh),
                   NULL if gc is None else <float*>_data(gc),
                   <float*>_data(gc_prev), <float*>_data(gx), n_rows,
                   n_units)
    else:
        _lstm_grad(<double*>_data(gates), <double*>_data(co),
                   <double*>_data(c_prev),
                   NULL if gh is None else <double*>_data(gh),
                   NULL if gc is None else <double*>_data(gc),
                   <double*>_data(gc_prev), <double*>_data(gx), n_rows,
                   n_units)
    return True


# --- per-channel sums of channels-last arrays ------------------------------
# A convolution's output as Chainer returns it is a transposed view: (N, C,
# H, W) over memory laid out (N, H, W, C). NumPy sums it over (0, 2, 3) in
# memory order, adding each position's C channels to the C running sums
# in turn (from zero), C elements per call of its inner loop: 4 ns an
# element for LeNet's 6 channels. These loops add in that same order.

cdef Py_ssize_t _positions(object x, int kind):
    """The number of positions (N * H * W ...) if ``x`` is a float32 or
    float64 (of type ``kind``, unless -1) array in native byte order,
    (N, C, ...) over memory laid out C-ordered (N, ..., C); else -1."""
    cdef cnp.ndarray a
    cdef Py_ssize_t expected, n_pos = 1
    cdef int k, axis
    if type(x) is not _ndarray:
        return -1
    a = x
    if a.ndim < 2 or (cnp.PyArray_TYPE(a) != cnp.NPY_FLOAT and
                      cnp.PyArray_TYPE(a) != cnp.NPY_DOUBLE) or \
            (kind >= 0 and cnp.PyArray_TYPE(a) != kind) or \
            not cnp.PyArray_ISNOTSWAPPED(a):
        return -1
    expected = cnp.PyArray_ITEMSIZE(a)
    for k in range(a.ndim):  # axes in memory order: 1, ndim - 1, ..., 2, 0
        axis = 1 if k == 0 else (0 if k == a.ndim - 1 else a.ndim - k)
        if a.shape[axis] > 1 and a.strides[axis] != expected:
            return -1
        expected *= a.shape[axis]
        if axis != 1:
            n_pos *= a.shape[axis]
    return n_pos


cdef bint _one_channel(object x):
    """Has ``x`` (N, C, ...) a single channel? Its positions are then one
    contiguous run, which NumPy sums pairwise, not position by position
    (the sums below refuse it)."""
    return x.shape[1] < 2


def channels_last(x):
    """Is ``x`` a float32 or float64 NumPy array (N, C, ...) laid out
    C-ordered (N, ..., C) in memory, as the loops below take it?"""
    return _positions(x, -1) >= 0


cdef extern from *:
    """
    /* Per-channel sums over positions of channels-last float32 data, in
       NumPy's order (each channel's sum runs along the positions in
       turn, from 0): up to 16 channels in SSE2 registers, four channels
       a vector, the last one to three as scalars, so that a position's
       additions run side by side instead of through memory. With
       ``mean``, the sums of the squared differences from it; with ``y``,
       of the products x * y. Returns 0 for more channels (or without
       SSE2). */
    #if defined(__SSE2__)
    #include <emmintrin.h>
    static int cj_channel_sums_f32(const float* x, const float* y,
                                   const float* mean, float* out,
                                   Py_ssize_t n_pos, Py_ssize_t n_ch) {
        Py_ssize_t n_vec = n_ch / 4, n_rem = n_ch % 4, p, k;
        Py_ssize_t tail = 4 * n_vec;
        __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, v;
        __m128 m0 = a0, m1 = a0, m2 = a0, m3 = a0;
        float r0 = 0, r1 = 0, r2 = 0, n0 = 0, n1 = 0, n2 = 0, t;
        if (n_ch > 16) return 0;
        if (mean) {
            if (n_vec > 0) m0 = _mm_loadu_ps(mean);
            if (n_vec > 1) m1 = _mm_loadu_ps(mean + 4);
            if (n_vec > 2) m2 = _mm_loadu_ps(mean + 8);
            if (n_vec > 3) m3 = _mm_loadu_ps(mean + 12);
            if (n_rem > 0) n0 = mean[tail];
            if (n_rem > 1) n1 = mean[tail + 1];
            if (n_rem > 2) n2 = mean[tail + 2];
        }
        #define CJ_TERM(acc, m, k) \
            v = _mm_loadu_ps(row + 4 * (k)); \
            if (mean) { v = _mm_sub_ps(v, m); v = _mm_mul_ps(v, v); } \
            else if (y) v = _mm_mul_ps(v, _mm_loadu_ps(other + 4 * (k))); \
            acc = _mm_add_ps(acc, v);
        #define CJ_SCALAR(r, n, k) \
            t = row[tail + (k)]; \
            if (mean) { t = t - n; t = t * t; } \
            else if (y) t = t * other[tail + (k)]; \
            r = r + t;
        for (p = 0; p < n_pos; p++) {
            const float* row = x + p * n_ch;
            const float* other = y ? y + p * n_ch : 0;
            switch (n_vec) {
            case 4: CJ_TERM(a3, m3, 3)
            case 3: CJ_TERM(a2, m2, 2)
            case 2: CJ_TERM(a1, m1, 1)
            case 1: CJ_TERM(a0, m0, 0)
            }
            switch (n_rem) {
            case 3: CJ_SCALAR(r2, n2, 2)
            case 2: CJ_SCALAR(r1, n1, 1)
            case 1: CJ_SCALAR(r0, n0, 0)
            }
        }
        #undef CJ_TERM
        #undef CJ_SCALAR
        if (n_vec > 0) _mm_storeu_ps(out, a0);
        if (n_vec > 1) _mm_storeu_ps(out + 4, a1);
        if (n_vec > 2) _mm_storeu_ps(out + 8, a2);
        if (n_vec > 3) _mm_storeu_ps(out + 12, a3);
        if (n_rem > 0) out[tail] = r0;
        if (n_rem > 1) out[tail + 1] = r1;
        if (n_rem > 2) out[tail + 2] = r2;
        (void)k;
        return 1;
    }
    #else
    static int cj_channel_sums_f32(const float* x, const float* y,
                                   const float* mean, float* out,
                                   Py_ssize_t n_pos, Py_ssize_t n_ch) {
        return 0;
    }
    #endif
    """
    int cj_channel_sums_f32(const float* x, const float* y, const float* mean,
                            float* out, Py_ssize_t n_pos,
                            Py_ssize_t n_ch) nogil


cdef void _channel_sums(floating* x, floating* y, floating* out,
                        Py_ssize_t n_pos, Py_ssize_t n_ch) noexcept nogil:
    cdef Py_ssize_t p, c
    cdef floating* row
    cdef floating* other
    if floating is float:
        if cj_channel_sums_f32(x, y, NULL, out, n_pos, n_ch):
            return
    for c in range(n_ch):
        out[c] = 0
    for p in range(n_pos):
        row = x + p * n_ch
        if y == NULL:
            for c in range(n_ch):
                out[c] = out[c] + row[c]
        else:
            other = y + p * n_ch
            for c in range(n_ch):
                out[c] = out[c] + row[c] * other[c]


cdef void _channel_mean_var(floating* x, floating* mean, floating* var,
                            Py_ssize_t n_pos, Py_ssize_t n_ch) noexcept nogil:
    cdef Py_ssize_t p, c
    cdef floating* row
    cdef floating d, count = <floating>n_pos
    _channel_sums(x, NULL, mean, n_pos, n_ch)
    for c in range(n_ch):
        mean[c] = mean[c] / count
        var[c] = 0
    if floating is float:
        if cj_channel_sums_f32(x, NULL, mean, var, n_pos, n_ch):
            for c in range(n_ch):
                var[c] = var[c] / count
            return
    for p in range(n_pos):
        row = x + p * n_ch
        for c in range(n_ch):
            d = row[c] - mean[c]
            d = d * d
            var[c] = var[c] + d
    for c in range(n_ch):
        var[c] = var[c] / count


cdef bint _channel_outputs(tuple outs, object x, int kind):
    cdef object out
    for out in outs:
        if _c_ordered(out, kind, True) < 0 or out.ndim != 1 or \
                out.shape[0] != x.shape[1] or _shares_memory(out, x):
            return False
    return True


def channel_sums(x, y, out):
    """``out = x.sum(axis=(0, 2, ...))``, or ``(x * y).sum(...)`` when
    ``y`` is given, as NumPy computes them (the same order of additions)
    for ``x`` (and ``y``) laid out channels-last (see
    :func:`_positions`), float32 or float64, ``out`` C-ordered (C,).
    Returns False, writing nothing, for arrays it does not take."""
    cdef int kind = _c_ordered(out, -1, True)
    cdef Py_ssize_t n_pos = _positions(x, kind)
    if kind < 0 or n_pos < 0 or _one_channel(x) or \
            not _channel_outputs((out,), x, kind) or \
            (y is not None and (_positions(y, kind) < 0 or
                                y.shape != x.shape or
                                _shares_memory(out, y))):
        return False
    cdef Py_ssize_t n_ch = x.shape[1]
    cdef void* other = NULL if y is None else _data(y)
    if kind == cnp.NPY_FLOAT:
        _channel_sums(<float*>_data(x), <float*>other, <float*>_data(out),
                      n_pos, n_ch)
    else:
        _channel_sums(<double*>_data(x), <double*>other, <double*>_data(out),
                      n_pos, n_ch)
    return True


def channel_mean_var(x, mean, var):
    """``mean = x.mean(axis=(0, 2, ...))`` and ``var = x.var(...)`` as
    NumPy computes them (sum, divided by the count; the sum of the squared
    differences from that mean, divided by the count) for ``x`` laid out
    channels-last, float32 or float64, into C-ordered (C,) arrays of its
    dtype. Returns False, writing nothing, for arrays it does not take."""
    cdef int kind = _c_ordered(mean, -1, True)
    cdef Py_ssize_t n_pos = _positions(x, kind)
    if kind < 0 or n_pos < 1 or _one_channel(x) or \
            not _channel_outputs((mean, var), x, kind) or \
            _shares_memory(mean, var):
        return False
    cdef Py_ssize_t n_ch = x.shape[1]
    if kind == cnp.NPY_FLOAT:
        _channel_mean_var(<float*>_data(x), <float*>_data(mean),
                          <float*>_data(var), n_pos, n_ch)
    else:
        _channel_mean_var(<double*>_data(x), <double*>_data(mean),
                          <double*>_data(var), n_pos, n_ch)
    return True


cdef void _channel_affine(floating* x, floating* mean, floating* scale,
                          floating* gamma, floating* beta, floating* out,
                          Py_ssize_t n_pos, Py_ssize_t n_ch) noexcept nogil:
    cdef Py_ssize_t p, c
    cdef floating t
    cdef floating* row
    cdef floating* dest
    for p in range(n_pos):
        row = x + p * n_ch
        dest = out + p * n_ch
        for c in range(n_ch):
            t = row[c] - mean[c]
            t = t * scale[c]
            if gamma != NULL:
                t = t * gamma[c]
                t = t + beta[c]
            dest[c] = t


cdef void _channel_input_grad(floating* gy, floating* x_hat, floating* ggamma,
                              floating* gbeta, floating inv_m,
                              floating* gamma_inv_std, floating* gx,
                              Py_ssize_t n_pos,
                              Py_ssize_t n_ch) noexcept nogil:
    cdef Py_ssize_t p, c, k
    cdef floating t
    for p in range(n_pos):
        for c in range(n_ch):
            k = p * n_ch + c
            t = x_hat[k] * ggamma[c]
            t = t + gbeta[c]
            t = t * inv_m
            t = gy[k] - t
            gx[k] = gamma_inv_std[c] * t


cdef bint _channel_vectors(tuple vectors, object x, int kind):
    """Are ``vectors`` C-ordered (C,) arrays of type ``kind``, C being
    ``x``'s channels (read only: they may share memory)?"""
    cdef object v
    for v in vectors:
        if _c_ordered(v, kind, False) < 0 or v.ndim != 1 or \
                v.shape[0] != x.shape[1]:
            return False
    return True


def channel_affine(x, mean, scale, gamma, beta, out):
    """``out = ((x - mean) * scale) * gamma + beta`` per channel, in that
    order of operations (Chainer's CPU batch normalization; with
    ``gamma`` and ``beta`` ``None``, ``(x - mean) * scale``, its
    ``x_hat``), for ``x`` and ``out`` laid out channels-last alike and
    C-ordered (C,) vectors, all float32 or all float64. Returns False,
    writing nothing, for arrays it does not take."""
    cdef int kind = _c_ordered(mean, -1, False)
    cdef Py_ssize_t n_pos = _positions(x, kind)
    cdef tuple vectors = (mean, scale) if gamma is None else (
        mean, scale, gamma, beta)
    if kind < 0 or n_pos < 0 or (gamma is None) != (beta is None) or \
            _positions(out, kind) < 0 or out.shape != x.shape or \
            not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>out) or \
            not _channel_vectors(vectors, x, kind) or \
            any([_shares_memory(out, a) for a in (x,) + vectors]):
        return False
    cdef Py_ssize_t n_ch = x.shape[1]
    cdef void* g = NULL if gamma is None else _data(gamma)
    cdef void* b = NULL if beta is None else _data(beta)
    if kind == cnp.NPY_FLOAT:
        _channel_affine(<float*>_data(x), <float*>_data(mean),
                        <float*>_data(scale), <float*>g, <float*>b,
                        <float*>_data(out), n_pos, n_ch)
    else:
        _channel_affine(<double*>_data(x), <double*>_data(mean),
                        <double*>_data(scale), <double*>g, <double*>b,
                        <double*>_data(out), n_pos, n_ch)
    return True


def channel_input_grad(gy, x_hat, ggamma, gbeta, double inv_m,
                       gamma_inv_std, gx):
    """Chainer's CPU batch normalization gradient of its input, ``gx =
    gamma_inv_std * (gy - (x_hat * ggamma + gbeta) * inv_m)`` per channel
    in that order, for ``gy``, ``x_hat`` and ``gx`` laid out channels-last
    alike and C-ordered (C,) vectors, all float32 or all float64 (``inv_m``
    rounded to it). Returns False, writing nothing, for arrays it does not
    take."""
    cdef int kind = _c_ordered(ggamma, -1, False)
    cdef Py_ssize_t n_pos = _positions(gy, kind)
    if kind < 0 or n_pos < 0 or _positions(x_hat, kind) < 0 or \
            _positions(gx, kind) < 0 or x_hat.shape != gy.shape or \
            gx.shape != gy.shape or \
            not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>gx) or \
            not _channel_vectors((ggamma, gbeta, gamma_inv_std), gy, kind) or \
            any([_shares_memory(gx, a) for a in (gy, x_hat, ggamma, gbeta,
                                                 gamma_inv_std)]):
        return False
    cdef Py_ssize_t n_ch = gy.shape[1]
    if kind == cnp.NPY_FLOAT:
        _channel_input_grad(<float*>_data(gy), <float*>_data(x_hat),
                            <float*>_data(ggamma), <float*>_data(gbeta),
                            <float>inv_m, <float*>_data(gamma_inv_std),
                            <float*>_data(gx), n_pos, n_ch)
    else:
        _channel_input_grad(<double*>_data(gy), <double*>_data(x_hat),
                            <double*>_data(ggamma), <double*>_data(gbeta),
                            inv_m, <double*>_data(gamma_inv_std),
                            <double*>_data(gx), n_pos, n_ch)
    return True


# --- the gradient of softmax cross entropy ---------------------------------

ctypedef fused label_t:
    int
    long long


cdef void _softmax_ce_grad(floating* y, label_t* t, Py_ssize_t n_rows,
                           Py_ssize_t n_classes, long long ignore_label,
                           floating scale) noexcept nogil:
    cdef Py_ssize_t r, j, target
    cdef floating valid, g
    cdef floating* row
    for r in range(n_rows):
        valid = 1 if t[r] != ignore_label else 0
        target = t[r] if t[r] != ignore_label else 0
        row = y + r * n_classes
        for j in range(n_classes):
            g = row[j]
            if j == target:
                g = g - 1
            row[j] = (g * valid) * scale


cdef bint _labels_in_range(label_t* t, Py_ssize_t n, long long ignore_label,
                           Py_ssize_t n_classes) noexcept nogil:
    cdef Py_ssize_t r
    for r in range(n):
        if t[r] != ignore_label and not 0 <= t[r] < n_classes:
            return False
    return True


def softmax_ce_grad(y, t, ignore_label, double scale):
    """In place, Chainer's label gradient of softmax cross entropy from
    the softmax ``y`` (N, C): ``y[r, t[r]] -= 1`` (column 0 for an
    ignored label), then ``y *= (t != ignore_label)[:, None]``, then ``y
    *= scale`` (rounded to ``y``'s dtype, as NumPy's in-place product
    with a float64 scalar), in that order for each element. ``y``
    C-ordered float32 or float64, ``t`` a C-ordered int32 or int64
    vector with each label in ``[0, C)`` or ``ignore_label``. Returns
    False, writing nothing, for arrays it does not take."""
    cdef int kind = _c_ordered(y, -1, True)
    if kind < 0 or y.ndim != 2 or type(t) is not _ndarray or t.ndim != 1 or \
            len(t) != len(y) or not t.flags.c_contiguous or \
            not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>t) or \
            t.dtype.kind != 'i' or t.dtype.itemsize not in (4, 8):
        return False
    cdef Py_ssize_t n_rows = y.shape[0], n_classes = y.shape[1]
    cdef long long ignore = ignore_label
    # A label out of range: NumPy's indexing raises or wraps around.
    if not (_labels_in_range(<int*>_data(t), n_rows, ignore, n_classes)
            if t.dtype.itemsize == 4 else _labels_in_range(
                <long long*>_data(t), n_rows, ignore, n_classes)):
        return False
    if t.dtype.itemsize == 4:
        if kind == cnp.NPY_FLOAT:
            _softmax_ce_grad(<float*>_data(y), <int*>_data(t), n_rows,
                             n_classes, ignore, <float>scale)
        else:
            _softmax_ce_grad(<double*>_data(y), <int*>_data(t), n_rows,
                             n_classes, ignore, scale)
    else:
        if kind == cnp.NPY_FLOAT:
            _softmax_ce_grad(<float*>_data(y), <long long*>_data(t), n_rows,
                             n_classes, ignore, <float>scale)
        else:
            _softmax_ce_grad(<double*>_data(y), <long long*>_data(t),
                             n_rows, n_classes, ignore, scale)
    return True


cdef int _plane_grads(floating* gy, floating* x, Py_ssize_t* steps,
                      floating* mean, floating* inv_std,
                      floating* gamma_inv_std, floating inv_m,
                      floating* x_hat, floating* gx, floating* ggamma,
                      floating* gbeta, Py_ssize_t* dims) except -1 nogil:
    """:func:`plane_grads` on (N, C, H, W) arrays; ``x`` by its element
    strides ``steps``, the rest C-ordered."""
    cdef Py_ssize_t n, c, h, w, k, start, plane = dims[2] * dims[3]
    cdef floating* source
    cdef floating* hat
    cdef floating* g
    cdef floating t
    cdef floating* product = <floating*>malloc(plane * sizeof(floating))
    if product == NULL:
        with gil:
            raise MemoryError()
    for c in range(dims[1]):
        ggamma[c] = 0
        gbeta[c] = 0
    for n in range(dims[0]):
        for c in range(dims[1]):
            hat = x_hat + (n * dims[1] + c) * plane
            g = gy + (n * dims[1] + c) * plane
            for h in range(dims[2]):
                source = x + n * steps[0] + c * steps[1] + h * steps[2]
                for w in range(dims[3]):
                    t = source[w * steps[3]] - mean[c]
                    hat[h * dims[3] + w] = t * inv_std[c]
            for k in range(plane):
                product[k] = g[k] * hat[k]
            gbeta[c] = gbeta[c] + _sum(g, plane)
            ggamma[c] = ggamma[c] + _sum(product, plane)
    free(product)
    for n in range(dims[0]):
        for c in range(dims[1]):
            start = (n * dims[1] + c) * plane
            for k in range(start, start + plane):
                t = x_hat[k] * ggamma[c]
                t = t + gbeta[c]
                t = t * inv_m
                t = gy[k] - t
                gx[k] = gamma_inv_std[c] * t
    return 0


cdef bint _overlapping(tuple written, tuple read):
    """May an array of ``written`` share memory with another one of them
    or with one of ``read``?"""
    cdef Py_ssize_t i
    for i in range(len(written)):
        for other in read + written[i + 1:]:
            if _shares_memory(written[i], other):
                return True
    return False


def plane_grads(gy, x, mean, inv_std, gamma_inv_std, double inv_m, x_hat,
                gx, ggamma, gbeta):
    """Chainer's CPU batch normalization gradient over the channels of
    (N, C, H, W) arrays for a C-ordered ``gy`` (a pooling's gradient), the
    layout all of its products then take: ``x_hat = (x - mean) *
    inv_std``, ``gbeta`` and ``ggamma``, the sums of ``gy`` and ``gy *
    x_hat`` over all but the channels in NumPy's order (per image, the
    pairwise sum of each channel's plane, added in turn), and ``gx =
    gamma_inv_std * (gy - (x_hat * ggamma + gbeta) * inv_m)`` in that
    order. ``x`` of any non-negative strides (a convolution's
    channels-last output); ``x_hat`` and ``gx`` C-ordered outputs,
    ``ggamma`` and ``gbeta`` (C,); vectors (C,); all float32 or all
    float64 (``inv_m`` rounded to it), planes of at most
    :data:`MAX_PAIRWISE_RUN`. Returns False, writing nothing, for arrays
    it does not take."""
    cdef int kind = _c_ordered(gy, -1, False)
    cdef Py_ssize_t dims[4]
    cdef Py_ssize_t steps[4]
    cdef int k
    if kind < 0 or gy.ndim != 4 or _strided_kind(x) != kind or \
            x.shape != gy.shape or _one_channel(gy) or \
            gy.shape[2] * gy.shape[3] > MAX_PAIRWISE_RUN or \
            any([_c_ordered(a, kind, True) < 0 or a.shape != gy.shape
                 for a in (x_hat, gx)]) or \
            not _channel_vectors((mean, inv_std, gamma_inv_std), gy, kind) or \
            not _channel_outputs((ggamma, gbeta), gy, kind) or \
            _overlapping((x_hat, gx, ggamma, gbeta),
                         (gy, x, mean, inv_std, gamma_inv_std)):
        return False
    for k in range(4):
        dims[k] = gy.shape[k]
        steps[k] = x.strides[k] // x.itemsize
    if kind == cnp.NPY_FLOAT:
        _plane_grads(<float*>_data(gy), <float*>_data(x), steps,
                     <float*>_data(mean), <float*>_data(inv_std),
                     <float*>_data(gamma_inv_std), <float>inv_m,
                     <float*>_data(x_hat), <float*>_data(gx),
                     <float*>_data(ggamma), <float*>_data(gbeta), dims)
    else:
        _plane_grads(<double*>_data(gy), <double*>_data(x), steps,
                     <double*>_data(mean), <double*>_data(inv_std),
                     <double*>_data(gamma_inv_std), inv_m,
                     <double*>_data(x_hat), <double*>_data(gx),
                     <double*>_data(ggamma), <double*>_data(gbeta), dims)
    return True


# --- log-softmax and the mean label loss of softmax cross entropy ---------

#: NumPy's ``add.reduce`` sums a run of contiguous elements by pairwise
#: summation in one inner loop call, up to its buffer size (8192 by
#: default) at a time; the loops below sum rows of up to this many.
MAX_PAIRWISE_RUN = 8192


cdef floating _pairwise_sum(floating* a, Py_ssize_t n) noexcept nogil:
    """NumPy 1.x's ``pairwise_sum`` (``loops_utils.h.src``) of ``n``
    contiguous elements: the same additions in the same order."""
    cdef floating res
    cdef floating r[8]
    cdef Py_ssize_t i, j, n2
    if n < 8:
        res = -(<floating>0)
        for i in range(n):
            res = res + a[i]
        return res
    if n <= 128:
        for j in range(8):
            r[j] = a[j]
        i = 8
        while i < n - (n % 8):
            for j in range(8):
                r[j] = r[j] + a[i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + \
            ((r[4] + r[5]) + (r[6] + r[7]))
        while i < n:
            res = res + a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise_sum(a, n2) + _pairwise_sum(a + n2, n - n2)


cdef inline floating _sum(floating* a, Py_ssize_t n) noexcept nogil:
    """``add.reduce`` of ``n`` (at most :data:`MAX_PAIRWISE_RUN`)
    contiguous elements: the identity plus their pairwise sum."""
    return <floating>0 + _pairwise_sum(a, n)


cdef void _max_and_shift(floating* x, floating* y, floating* m,
                         Py_ssize_t n_rows, Py_ssize_t n) noexcept nogil:
    """``m = x.max(axis=1)`` (NaN if a row has one, as NumPy's;
    :func:`_row_max`) and ``y = x - m[:, None]``."""
    cdef Py_ssize_t r, j
    cdef floating top
    _row_max(x, m, n_rows, n)
    for r in range(n_rows):
        top = m[r]
        for j in range(n):
            y[j] = x[j] - top
        x += n
        y += n


cdef void _row_sums(floating* y, floating* s, Py_ssize_t n_rows,
                    Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t r
    for r in range(n_rows):
        s[r] = _sum(y + r * n, n)


cdef void _subtract_log_z(floating* x, floating* y, floating* m,
                          floating* log_s, Py_ssize_t n_rows,
                          Py_ssize_t n) noexcept nogil:
    """``m += log_s`` (the log-sum-exp), then ``y = x - m[:, None]``."""
    cdef Py_ssize_t r, j
    cdef floating log_z
    for r in range(n_rows):
        log_z = m[r] + log_s[r]
        m[r] = log_z
        for j in range(n):
            y[r * n + j] = x[r * n + j] - log_z


def log_softmax(x):
    """Chainer's ``log_softmax._log_softmax(x)`` (along axis 1) of a
    C-ordered 2-d float32 or float64 ``x`` in native byte order with
    rows of 1 to :data:`MAX_PAIRWISE_RUN` elements, bit for bit: the row
    maxima, the shift and the sums in C, in NumPy's order (the sums
    pairwise, :func:`_pairwise_sum`), and NumPy's own ``exp`` and ``log``
    over the whole arrays, as ``logsumexp`` calls them. A new array, or
    None for arrays it does not take."""
    cdef int kind = _c_ordered(x, -1, False)
    if kind < 0 or x.ndim != 2 or x.size == 0 or \
            x.shape[1] > MAX_PAIRWISE_RUN:
        return None
    cdef Py_ssize_t n_rows = x.shape[0], n = x.shape[1]
    y = numpy.empty_like(x)
    m = numpy.empty((n_rows, 1), x.dtype)
    s = numpy.empty((n_rows, 1), x.dtype)
    if kind == cnp.NPY_FLOAT:
        _max_and_shift(<float*>_data(x), <float*>_data(y),
                       <float*>_data(m), n_rows, n)
    else:
        _max_and_shift(<double*>_data(x), <double*>_data(y),
                       <double*>_data(m), n_rows, n)
    numpy.exp(y, out=y)
    if kind == cnp.NPY_FLOAT:
        _row_sums(<float*>_data(y), <float*>_data(s), n_rows, n)
    else:
        _row_sums(<double*>_data(y), <double*>_data(s), n_rows, n)
    numpy.log(s, out=s)
    if kind == cnp.NPY_FLOAT:
        _subtract_log_z(<float*>_data(x), <float*>_data(y), <float*>_data(m),
                        <float*>_data(s), n_rows, n)
    else:
        _subtract_log_z(<double*>_data(x), <double*>_data(y),
                        <double*>_data(m), <double*>_data(s), n_rows, n)
    return y


cdef floating _picked_sum(floating* log_y, label_t* t, floating* picked,
                          Py_ssize_t n_rows, Py_ssize_t n,
                          long long ignore_label,
                          Py_ssize_t* count) noexcept nogil:
    """``sum(log_y[r, t[r]] * valid[r])`` (column 0 for an ignored label)
    in NumPy's order, counting the valid labels into ``count``."""
    cdef Py_ssize_t r, valid = 0
    for r in range(n_rows):
        if t[r] != ignore_label:
            picked[r] = log_y[r * n + t[r]] * 1
            valid += 1
        else:
            picked[r] = log_y[r * n] * 0
    count[0] = valid
    return _sum(picked, n_rows)


def picked_log_prob_sum(log_y, t, ignore_label):
    """For the mean label loss of softmax cross entropy, ``(log_p.sum(
    keepdims=True), count)`` as Chainer's CPU forward computes them (the
    sum a 1-element array) from the log-softmax
    ``log_y`` (N, C) and the labels ``t`` (N,): ``log_p = log_y[r, t[r]]
    * (t[r] != ignore_label)`` (column 0 for an ignored label), summed in
    ``log_y``'s dtype as NumPy sums it, and the number of labels not
    ignored. ``log_y`` C-ordered float32 or float64, ``t`` a C-ordered
    int32 or int64 vector of 1 to :data:`MAX_PAIRWISE_RUN` labels, each in
    ``[0, C)`` or ``ignore_label``. None for arrays it does not take."""
    cdef int kind = _c_ordered(log_y, -1, False)
    if kind < 0 or log_y.ndim != 2 or type(t) is not _ndarray or \
            t.ndim != 1 or len(t) != len(log_y) or len(t) == 0 or \
            len(t) > MAX_PAIRWISE_RUN or not t.flags.c_contiguous or \
            not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>t) or \
            t.dtype.kind != 'i' or t.dtype.itemsize not in (4, 8):
        return None
    cdef Py_ssize_t n_rows = log_y.shape[0], n_classes = log_y.shape[1]
    cdef Py_ssize_t count = 0
    cdef long long ignore = ignore_label
    if not (_labels_in_range(<int*>_data(t), n_rows, ignore, n_classes)
            if t.dtype.itemsize == 4 else _labels_in_range(
                <long long*>_data(t), n_rows, ignore, n_classes)):
        return None
    picked = numpy.empty(n_rows, log_y.dtype)
    if kind == cnp.NPY_FLOAT and t.dtype.itemsize == 4:
        total = _picked_sum(<float*>_data(log_y), <int*>_data(t),
                            <float*>_data(picked), n_rows, n_classes,
                            ignore, &count)
    elif kind == cnp.NPY_FLOAT:
        total = _picked_sum(<float*>_data(log_y), <long long*>_data(t),
                            <float*>_data(picked), n_rows, n_classes,
                            ignore, &count)
    elif t.dtype.itemsize == 4:
        total = _picked_sum(<double*>_data(log_y), <int*>_data(t),
                            <double*>_data(picked), n_rows, n_classes,
                            ignore, &count)
    else:
        total = _picked_sum(<double*>_data(log_y), <long long*>_data(t),
                            <double*>_data(picked), n_rows, n_classes,
                            ignore, &count)
    summed = numpy.empty(1, log_y.dtype)
    summed[0] = total
    return summed, count


# --- softmax and layer normalization along rows --------------------------

cdef void _divide_by_row_sums(floating* y, Py_ssize_t n_rows,
                              Py_ssize_t n) noexcept nogil:
    """``y /= y.sum(axis=-1, keepdims=True)``, the sums as NumPy's."""
    cdef Py_ssize_t r, j
    cdef floating s
    for r in range(n_rows):
        s = _sum(y, n)
        for j in range(n):
            y[j] = y[j] / s
        y += n


cdef bint _takes_out(object out, object x, int kind):
    """Can a row loop over ``x`` write into ``out``: C-ordered, of ``x``'s
    shape and type ``kind``, writeable, ``x`` itself or apart from it?"""
    if _c_ordered(out, kind, True) < 0 or out.shape != x.shape:
        return False
    cdef cnp.ndarray o = out, a = x
    return not _shares_memory(o, a) or \
        cnp.PyArray_DATA(o) == cnp.PyArray_DATA(a)


def softmax_rows(x, out=None):
    """Chainer's CPU ``Softmax.forward`` along the last axis of a
    C-ordered float32 or float64 ``x`` in native byte order with rows of
    1 to :data:`MAX_PAIRWISE_RUN` elements, bit for bit: the row maxima
    and the shift in C, NumPy's own ``exp`` over the whole array, the
    row sums (pairwise, in NumPy's order) and the division in C. Into
    ``out`` (C-ordered, of ``x``'s shape and dtype, ``x`` itself or not
    overlapping it) if given, else a new array; None, writing nothing,
    for arrays it does not take. Three passes instead of NumPy's six and
    the broadcasting: 3x faster on attention's rows of 32."""
    cdef int kind = _c_ordered(x, -1, False)
    if kind < 0 or x.ndim == 0 or x.size == 0 or \
            x.shape[x.ndim - 1] > MAX_PAIRWISE_RUN:
        return None
    if out is None:
        out = numpy.empty_like(x)
    elif not _takes_out(out, x, kind):
        return None
    cdef Py_ssize_t n = x.shape[x.ndim - 1], n_rows = x.size // n
    m = numpy.empty(n_rows, x.dtype)
    if kind == cnp.NPY_FLOAT:
        _max_and_shift(<float*>_data(x), <float*>_data(out),
                       <float*>_data(m), n_rows, n)
    else:
        _max_and_shift(<double*>_data(x), <double*>_data(out),
                       <double*>_data(m), n_rows, n)
    numpy.exp(out, out=out)
    if kind == cnp.NPY_FLOAT:
        _divide_by_row_sums(<float*>_data(out), n_rows, n)
    else:
        _divide_by_row_sums(<double*>_data(out), n_rows, n)
    return out


cdef void _normalize_rows(floating* x, floating* x_mu, floating* squares,
                          floating* inv_std, floating eps, Py_ssize_t n_rows,
                          Py_ssize_t n) noexcept nogil:
    """Layer normalization's statistics as Chainer computes them with
    NumPy (``mean`` sums pairwise, then divides by the count): ``x_mu = x
    - mean(x)`` and ``inv_std = 1 / sqrt(mean(x_mu ** 2) + eps)`` per
    row; ``squares`` is a row's scratch."""
    cdef Py_ssize_t r, j
    cdef floating count = <floating>n, mu, var, root
    for r in range(n_rows):
        mu = _sum(x, n) / count
        for j in range(n):
            x_mu[j] = x[j] - mu
            squares[j] = x_mu[j] * x_mu[j]
        var = _sum(squares, n) / count
        if floating is float:
            root = sqrtf(var + eps)
        else:
            root = sqrt(var + eps)
        inv_std[r] = <floating>1 / root
        x += n
        x_mu += n


def layer_norm_rows(x, gamma, beta, double eps, out=None):
    """Chainer's CPU ``LayerNormalization.forward`` (``x_hat * gamma +
    beta``, ``x_hat = (x - mean) / sqrt(var + eps)`` per row, with its
    ``_compute``'s operations) of a C-ordered 2-d float32 or float64
    ``x`` in native byte order with rows of 1 to
    :data:`MAX_PAIRWISE_RUN` elements and contiguous ``gamma`` and
    ``beta`` of its dtype, bit for bit, in two C passes (the statistics
    and the shift, then the scale and shift of
    :func:`scale_shift_rows`). Into ``out`` (as :func:`softmax_rows`'s)
    if given, else a new array; None for arrays it does not take."""
    cdef int kind = _c_ordered(x, -1, False)
    if kind < 0 or x.ndim != 2 or x.size == 0 or \
            x.shape[1] > MAX_PAIRWISE_RUN or \
            _c_ordered(gamma, kind, False) < 0 or \
            _c_ordered(beta, kind, False) < 0 or \
            gamma.shape != x.shape[1:] or beta.shape != x.shape[1:]:
        return None
    if out is None:
        out = numpy.empty_like(x)
    elif not _takes_out(out, x, kind) or _shares_memory(out, gamma) or \
            _shares_memory(out, beta):
        return None
    cdef Py_ssize_t n_rows = x.shape[0], n = x.shape[1]
    inv_std = numpy.empty((n_rows, 1), x.dtype)
    squares = numpy.empty(n, x.dtype)
    if kind == cnp.NPY_FLOAT:
        _normalize_rows(<float*>_data(x), <float*>_data(out),
                        <float*>_data(squares), <float*>_data(inv_std),
                        <float>eps, n_rows, n)
    else:
        _normalize_rows(<double*>_data(x), <double*>_data(out),
                        <double*>_data(squares), <double*>_data(inv_std),
                        eps, n_rows, n)
    scale_shift_rows(out, inv_std, gamma, beta)
    return out
