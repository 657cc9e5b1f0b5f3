# The checks the C loops run on the NumPy arrays they are given, and the
# pointers to the arrays' data. Each ``_loops_*.pyx`` module includes this
# file (after ``cnp.import_array()``), so that its C compiler sees these
# functions and may inline them; a cimport from another module would call
# them through a pointer. ``_strided_kind`` and ``_takes_out``, which only
# some of the modules call, are ``inline``: the others compile no copy of
# them. The checks of flat loops are in ``_flat.pxi``.

cimport numpy as cnp
import numpy

cdef object _ndarray = numpy.ndarray


cdef inline void* _data(object a):
    return cnp.PyArray_DATA(<cnp.ndarray>a)


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


cdef inline int _strided_kind(image):
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


cdef inline bint _takes_out(object out, object x, int kind):
    """Can a row loop over ``x`` write into ``out``: C-ordered, of ``x``'s
    shape and type ``kind``, writeable, ``x`` itself or apart from it?"""
    if _c_ordered(out, kind, True) < 0 or out.shape != x.shape:
        return False
    cdef cnp.ndarray o = out, a = x
    return not _shares_memory(o, a) or \
        cnp.PyArray_DATA(o) == cnp.PyArray_DATA(a)
