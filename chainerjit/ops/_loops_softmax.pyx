# cython: language_level=3, boundscheck=False, wraparound=False
"""C loops of softmax along rows: the row maxima, softmax and log-softmax
(around NumPy's own exp and log), the gradient of softmax cross entropy
and its mean label loss, bit for bit as Chainer's NumPy code.
"""

from cython cimport floating
cimport numpy as cnp
import numpy

cnp.import_array()

include "_arrays.pxi"
include "_sums.pxi"


# --- the maxima of rows -------------------------------------------------


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


# --- softmax along rows -------------------------------------------------


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


# --- log-softmax along rows ---------------------------------------------


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


# --- softmax cross entropy: the label gradient and the mean label loss ---


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
