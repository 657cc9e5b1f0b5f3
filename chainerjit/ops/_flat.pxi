# The checks of the flat loops over whole arrays, included by the
# ``_loops_*.pyx`` modules that have such loops, after ``_arrays.pxi``.

cimport numpy as cnp


# A flat loop over whole arrays (``relu_grad``, ``half_plus_half``, the
# optimizer updates) takes NumPy arrays of any one shape, each one dense
# block of memory in the same order of axes (C-contiguous, or a dense
# transposed layout such as a convolution's NHWC output seen as NCHW, with
# equal strides), all float32 or all float64 in native byte order, the
# ones it writes writeable and not partly overlapping another; it loops
# over the blocks in memory order. It returns False, writing nothing, for
# arrays it does not take (``_loop_type``), so that the caller runs
# NumPy's code instead. The checks are C, so a call costs about a
# microsecond.


cdef bint _partly_overlap(cnp.ndarray a, cnp.ndarray b):
    """Do ``a`` and ``b`` share memory without starting at the same place?
    (Elementwise loops may write into an identical block.)"""
    return cnp.PyArray_DATA(a) != cnp.PyArray_DATA(b) and \
        _shares_memory(a, b)


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
