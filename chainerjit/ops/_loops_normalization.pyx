# cython: language_level=3, boundscheck=False, wraparound=False
"""C loops of batch and layer normalization: per-channel sums, statistics,
affine maps and gradients of channels-last arrays (a convolution's
output; the sums also give a convolution's bias gradient), the gradients
over the channel planes of C-ordered arrays, and layer normalization
along rows, each adding in NumPy's order.
"""

from cython cimport floating
from libc.math cimport sqrt
from libc.math cimport sqrtf
from libc.stdlib cimport free
from libc.stdlib cimport malloc
cimport numpy as cnp
import numpy

cnp.import_array()

include "_arrays.pxi"
include "_sums.pxi"


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


# The elementwise maps below run over runs of whole positions, with each
# per-channel vector repeated along a run (its channels in memory order),
# so that the inner loop is one contiguous pass the compiler vectorizes:
# 3x faster than a loop over each position's few channels.

cdef Py_ssize_t _positions_a_run(Py_ssize_t n_ch) noexcept nogil:
    """How many positions one run holds: a multiple of 16 elements and
    256 or more (LeNet's 6 channels: 48 positions)."""
    cdef Py_ssize_t reps = 1
    while (reps * n_ch) % 16:
        reps += 1
    while reps * n_ch < 256:
        reps *= 2
    return reps


cdef floating* _buffer(floating* like, Py_ssize_t size) except NULL nogil:
    """``size`` elements of ``like``'s type, to ``free``."""
    cdef floating* out = <floating*>malloc(size * sizeof(floating))
    if out == NULL:
        with gil:
            raise MemoryError()
    return out


cdef floating* _repeated(floating* vector, floating* out, Py_ssize_t n_ch,
                         Py_ssize_t reps) noexcept nogil:
    """``out`` = ``vector`` of ``n_ch`` repeated ``reps`` times; ``out``."""
    cdef Py_ssize_t i
    for i in range(reps * n_ch):
        out[i] = vector[i % n_ch]
    return out


cdef void _affine_run(floating* x, floating* mean, floating* scale,
                      floating* gamma, floating* beta, floating* out,
                      Py_ssize_t count) noexcept nogil:
    cdef Py_ssize_t i
    cdef floating t
    if gamma == NULL:
        for i in range(count):
            t = x[i] - mean[i]
            out[i] = t * scale[i]
        return
    for i in range(count):
        t = x[i] - mean[i]
        t = t * scale[i]
        t = t * gamma[i]
        out[i] = t + beta[i]


cdef int _channel_affine(floating* x, floating* mean, floating* scale,
                         floating* gamma, floating* beta, floating* out,
                         Py_ssize_t n_pos, Py_ssize_t n_ch) except -1 nogil:
    cdef Py_ssize_t reps = _positions_a_run(n_ch), run = reps * n_ch, p = 0
    cdef floating* tiled = _buffer(x, 4 * run)
    cdef floating* g = NULL
    cdef floating* b = NULL
    _repeated(mean, tiled, n_ch, reps)
    _repeated(scale, tiled + run, n_ch, reps)
    if gamma != NULL:
        g = _repeated(gamma, tiled + 2 * run, n_ch, reps)
        b = _repeated(beta, tiled + 3 * run, n_ch, reps)
    while p < n_pos:
        _affine_run(x + p * n_ch, tiled, tiled + run, g, b, out + p * n_ch,
                    min(reps, n_pos - p) * n_ch)
        p += reps
    free(tiled)
    return 0


cdef void _input_grad_run(floating* gy, floating* x_hat, floating* ggamma,
                          floating* gbeta, floating inv_m,
                          floating* gamma_inv_std, floating* gx,
                          Py_ssize_t count) noexcept nogil:
    cdef Py_ssize_t i
    cdef floating t
    for i in range(count):
        t = x_hat[i] * ggamma[i]
        t = t + gbeta[i]
        t = t * inv_m
        t = gy[i] - t
        gx[i] = gamma_inv_std[i] * t


cdef int _channel_input_grad(floating* gy, floating* x_hat, floating* ggamma,
                             floating* gbeta, floating inv_m,
                             floating* gamma_inv_std, floating* gx,
                             Py_ssize_t n_pos,
                             Py_ssize_t n_ch) except -1 nogil:
    cdef Py_ssize_t reps = _positions_a_run(n_ch), run = reps * n_ch, p = 0
    cdef floating* tiled = _buffer(gy, 3 * run)
    _repeated(ggamma, tiled, n_ch, reps)
    _repeated(gbeta, tiled + run, n_ch, reps)
    _repeated(gamma_inv_std, tiled + 2 * run, n_ch, reps)
    while p < n_pos:
        _input_grad_run(gy + p * n_ch, x_hat + p * n_ch, tiled, tiled + run,
                        inv_m, tiled + 2 * run, gx + p * n_ch,
                        min(reps, n_pos - p) * n_ch)
        p += reps
    free(tiled)
    return 0


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


# --- gradients over the channel planes of C-ordered arrays ---------------


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


# --- layer normalization along rows -------------------------------------


def scale_shift_rows(floating[:, ::1] x, const floating[:, ::1] scale,
                     const floating[::1] gamma, const floating[::1] beta):
    """In place: ``x = x * scale * gamma + beta``, ``scale`` one value
    per row (shape ``(rows, 1)``), ``gamma`` and ``beta`` one per column,
    in that order of operations. Only ``x`` is written: the parameters
    may be read-only (``jit(freeze=True)``)."""
    cdef Py_ssize_t r, k, n_rows = x.shape[0], n = x.shape[1]
    cdef floating s, v
    with nogil:
        for r in range(n_rows):
            s = scale[r, 0]
            for k in range(n):
                v = x[r, k] * s
                v = v * gamma[k]
                x[r, k] = v + beta[k]


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
    :func:`scale_shift_rows`). Into ``out`` (as
    ``_loops_softmax.softmax_rows``'s) if given, else a new array; None
    for arrays it does not take."""
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
