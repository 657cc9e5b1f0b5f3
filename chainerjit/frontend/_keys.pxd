"""C-level declarations of :mod:`chainerjit.frontend._keys` for the
runtime's hit path (``runtime/_calls.pyx``)."""

cdef object _config(str name)
cpdef bint config_holds(tuple reads)
cpdef tuple config_flags()
cpdef list leaf_arrays(list leaves)
cpdef object aliasing(list leaves)
cpdef tuple make_key(tuple args, dict kwargs, bint train,
                     bint enable_backprop)
cpdef list read_params(list owners, list specs)
