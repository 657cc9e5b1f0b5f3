"""C-level declarations of :mod:`chainerjit.runtime._calls` for the
fast paths (``fastpaths/_native.pyx``)."""

cpdef object new_variable(object array, bint requires_grad)
cpdef bint debug_or_function_hooks()
cdef tuple _nodes()
