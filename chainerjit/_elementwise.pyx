# cython: language_level=3, boundscheck=False, wraparound=False
"""Fused elementwise kernels: chains of arithmetic in one pass.

``benchmarks/bench_elementwise.py`` measured the CPU options: for chains
of additions, products and a ReLU, one C loop is 3x to 5x faster than
NumPy's passes (one per ufunc, each through memory and a Python call),
while NumPy's SIMD tanh and exp beat any scalar C loop, so chains with
those stay NumPy ufuncs writing in place. Each loop here does, element
by element, the same float operations in the same order as the NumPy
code it replaces (built with ``-ffp-contract=off``, so no fused
multiply-add changes a rounding), and gives the same values.
"""

from cython cimport floating


def bias_relu(floating[:, :] y, floating[::1] b, floating[:, ::1] out):
    """``out = maximum(y + b, 0)`` (``b`` broadcast along rows); ``y`` may
    be any 2-d view, ``out`` may be ``y``. Returns nothing."""
    cdef Py_ssize_t r, k, n_rows = y.shape[0], n = y.shape[1]
    cdef floating v
    with nogil:
        for r in range(n_rows):
            for k in range(n):
                v = y[r, k] + b[k]
                out[r, k] = v if (v > 0 or v != v) else 0


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


def relu_grad(floating[::1] gy, floating[::1] y, floating[::1] out):
    """``out = gy * (y > 0)``, the gradient of a ReLU given its output
    (a product by 1 or 0, as NumPy multiplies by the boolean mask), over
    flat contiguous arrays. ``out`` may be ``gy``."""
    cdef Py_ssize_t i
    with nogil:
        for i in range(gy.shape[0]):
            out[i] = gy[i] * (1 if y[i] > 0 else 0)


def sgd_update(floating[::1] w, floating[::1] g, double lr):
    """``SGDRule.update_core_cpu`` on NumPy arrays, ``w -= lr * g``: the
    product rounded to ``w``'s dtype (NumPy casts the Python float
    ``lr`` to it), then the difference; no temporary array."""
    cdef Py_ssize_t i
    cdef floating rate = <floating>lr
    with nogil:
        for i in range(w.shape[0]):
            w[i] = w[i] - rate * g[i]


def momentum_sgd_update(floating[::1] w, floating[::1] g, floating[::1] v,
                        double lr, double momentum):
    """``MomentumSGDRule.update_core_cpu`` on NumPy arrays: ``v *=
    momentum; v -= lr * g; w += v``, element by element with the same
    roundings."""
    cdef Py_ssize_t i
    cdef floating rate = <floating>lr, mu = <floating>momentum
    cdef floating step
    with nogil:
        for i in range(w.shape[0]):
            step = v[i] * mu
            step = step - rate * g[i]
            v[i] = step
            w[i] = w[i] + step
