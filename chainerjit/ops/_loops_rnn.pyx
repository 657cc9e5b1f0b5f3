# cython: language_level=3, boundscheck=False, wraparound=False
"""C loops of Chainer's LSTM: the gates made gate-major, the cell, the whole
step around NumPy's own tanh loop, and the gradient, bit for bit as
Chainer's NumPy code.
"""

from cython cimport floating
cimport numpy as cnp
import numpy

cnp.import_array()

include "_arrays.pxi"
include "_flat.pxi"


# --- the sigmoid's last step, a flat loop (``_flat.pxi``) -----------------


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


cdef extern from *:
    """
    #include "numpy/ufuncobject.h"
    /* The first loop of a unary ufunc's table from type to type, and its
       data; NULL where none is found. Only NumPy 1's table is read: NumPy
       2 keeps loops as ArrayMethods, which the table need not list. */
    static void *chainerjit_unary_loop(PyObject *ufunc, int type,
                                       void **data) {
    #if NPY_ABI_VERSION < 0x02000000
        PyUFuncObject *u = (PyUFuncObject *)ufunc;
        int k;
        if (u->types == NULL || u->functions == NULL)
            return NULL;
        for (k = 0; k < u->ntypes; k++) {
            if (u->types[2 * k] == type && u->types[2 * k + 1] == type) {
                *data = u->data == NULL ? NULL : u->data[k];
                return (void *)u->functions[k];
            }
        }
    #endif
        return NULL;
    }
    """
    void* chainerjit_unary_loop(object ufunc, int type, void** data)


cdef void _find_tanh_loops():
    _tanh_loops[0] = <_UnaryLoop>chainerjit_unary_loop(
        numpy.tanh, cnp.NPY_FLOAT, &_tanh_data[0])
    _tanh_loops[1] = <_UnaryLoop>chainerjit_unary_loop(
        numpy.tanh, cnp.NPY_DOUBLE, &_tanh_data[1])


_find_tanh_loops()


def numpy_loops_found():
    """True where NumPy's own tanh loops were found (NumPy 1): without
    them, :func:`tanh` and :func:`lstm_step` take no arrays, and the LSTM
    step runs NumPy's functions instead."""
    return _tanh_loops[0] != NULL and _tanh_loops[1] != NULL


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
