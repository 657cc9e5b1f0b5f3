# NumPy's pairwise summation, for the loops that sum runs of contiguous
# elements as ``add.reduce`` does; included by the ``_loops_*.pyx``
# modules that need it.

from cython cimport floating

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
