# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Scalar C loops for bench_elementwise.py: each chain in one pass over
the data (compiled on first import with pyximport; not part of
chainerjit)."""

from libc.math cimport tanhf


def lstm_cell(float[:, ::1] gates, float[:, ::1] c_prev, float[:, ::1] c,
              float[:, ::1] h):
    """Chainer's LSTM cell on gates laid out (B, 4H) as a, i, f, o
    blocks of H: ``c = tanh(a) * sig(i) + sig(f) * c_prev``, ``h =
    sig(o) * tanh(c)``, with sig(x) = tanh(x / 2) / 2 + 1 / 2."""
    cdef Py_ssize_t b, k, n = c.shape[1]
    cdef float a, i, f, o, cc
    for b in range(c.shape[0]):
        for k in range(n):
            a = tanhf(gates[b, k])
            i = tanhf(gates[b, n + k] * 0.5) * 0.5 + 0.5
            f = tanhf(gates[b, 2 * n + k] * 0.5) * 0.5 + 0.5
            o = tanhf(gates[b, 3 * n + k] * 0.5) * 0.5 + 0.5
            cc = a * i + f * c_prev[b, k]
            c[b, k] = cc
            h[b, k] = o * tanhf(cc)


def bias_relu(float[:, ::1] x, float[::1] bias, float[:, ::1] out):
    cdef Py_ssize_t r, k
    cdef float v
    for r in range(x.shape[0]):
        for k in range(x.shape[1]):
            v = x[r, k] + bias[k]
            out[r, k] = v if v > 0 else 0


def scale_shift(float[:, ::1] x, float[:, ::1] mu, float[:, ::1] inv_std,
                float[::1] gamma, float[::1] beta, float[:, ::1] out):
    cdef Py_ssize_t r, k
    for r in range(x.shape[0]):
        for k in range(x.shape[1]):
            out[r, k] = (x[r, k] - mu[r, 0]) * inv_std[r, 0] * gamma[k] \
                + beta[k]
