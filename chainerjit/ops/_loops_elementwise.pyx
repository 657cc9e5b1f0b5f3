# cython: language_level=3, boundscheck=False, wraparound=False
"""C loops over arrays: chains of elementwise arithmetic in one pass (a bias
and a ReLU, the ReLU's gradient, the SGD and momentum SGD updates). The
other ``_loops_*`` modules hold the loops of one op family each:
convolution patches, max pooling, normalization, LSTM gates, softmax.

``benchmarks/bench_elementwise.py`` measured the CPU options: for chains
of additions, products and a ReLU, one C loop is 3x to 5x faster than
NumPy's passes (one per ufunc, each through memory and a Python call),
while NumPy's SIMD tanh and exp beat any scalar C loop, so chains with
those stay NumPy ufuncs writing in place. Each loop of these modules
does, element by element, the same float operations in the same order as
the NumPy code it replaces (built with ``-ffp-contract=off``, so no fused
multiply-add changes a rounding), and gives the same values; the window
loops copy values, or add them in Chainer's order. The code they share
is in ``_arrays.pxi``, ``_flat.pxi`` and ``_sums.pxi``, which they
include.
"""

from cython cimport floating
cimport numpy as cnp

cnp.import_array()

include "_arrays.pxi"
include "_flat.pxi"


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


# --- flat loops over whole arrays (``_flat.pxi``) -------------------------


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
