"""Lowerings of chainer.functions.rnn."""

from chainer.functions.rnn import lstm
import numpy

from chainerjit import _elementwise
from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import lowering


@lowering(lstm.LSTM)
def lower_lstm(node, ctx):
    """One LSTM step, ``(c_prev, x) -> (c, h)``, with Chainer's formulas
    (its CPU sigmoid, ``tanh(x / 2) / 2 + 1 / 2``) on gates copied once
    into a contiguous gate-major buffer: Chainer's own kernel works on
    stride-4 views of ``x``, which is twice as slow."""
    if ctx.xp is not numpy:
        return None
    batch = ctx.in_shapes[1][0]

    def lstm_step(c_prev, x):
        g = _gates(x)
        a, s = g[0], g[1:]
        c_next = numpy.empty_like(c_prev)
        c = c_next[:batch]
        numpy.multiply(a, s[0], out=c)
        c += s[1] * c_prev[:batch]
        h = numpy.tanh(c)
        h *= s[2]
        c_next[batch:] = c_prev[batch:]
        return c_next, h
    return Kernel(lstm_step, multi=True,
                  grad=GradRule(_lstm_grad, (0, 1), (0,)),
                  onnx=_lstm_to_onnx(batch < ctx.in_shapes[0][0]), fresh=True)


def _gates(x):
    """``tanh(a)`` and the sigmoids of i, f, o (Chainer's CPU sigmoid,
    ``tanh(x * 0.5) * 0.5 + 0.5``), stacked in a new contiguous ``(4, B,
    H, ...)`` array. Chainer interleaves the gates (``x.reshape(B, H, 4,
    ...)``): one C loop copies them out, halving i, f and o on the way
    (NumPy's copy of the strided view took a third of an LSTM step), and
    one ``tanh`` runs over all four."""
    shape = (len(x), x.shape[1] // 4, 4) + x.shape[2:]
    g = numpy.empty((4,) + shape[:2] + shape[3:], x.dtype)
    if not _elementwise.gate_major(x, g, 0.5):
        g[...] = numpy.moveaxis(x.reshape(shape), 2, 0)
        g[1:] *= 0.5
    numpy.tanh(g, out=g)
    s = g[1:]
    if not _elementwise.half_plus_half(s):
        s *= 0.5
        s += 0.5
    return g


def _lstm_grad(xs, ys, gys, wanted):
    """Chainer's ``LSTMGrad`` formulas on gate-major buffers: in one C
    loop for C-ordered 2-D arrays (``_elementwise.lstm_grad``, which also
    interleaves the gates' gradients back), else in NumPy passes."""
    c_prev, x = xs
    gc, gh = gys
    batch = len(x)
    # A missing gradient is zeros, as in LSTMGrad (which keeps the signs
    # of zero products and NaN from c).
    if gc is None:
        gc = numpy.zeros_like(c_prev)
    if gh is None:
        gh = numpy.zeros((batch,) + c_prev.shape[1:], c_prev.dtype)
    gates = _gates(x)
    co = numpy.tanh(ys[0][:batch])
    gc_prev = numpy.empty_like(c_prev)
    gx = numpy.empty(x.shape, x.dtype)
    if not _elementwise.lstm_grad(gates, co, c_prev, gh, gc, gc_prev, gx):
        _lstm_grad_passes(gates, co, c_prev, gh, gc, gc_prev, gx)
    gc_prev[batch:] = 0 if gc is None else gc[batch:]
    return (gc_prev if wanted[0] else None, gx if wanted[1] else None)


def _lstm_grad_passes(gates, co, c_prev, gh, gc, gc_prev, gx):
    """``_elementwise.lstm_grad`` in NumPy passes (any layout, trailing
    axes)."""
    batch = len(gx)
    a, (i, f, o) = gates[0], gates[1:]
    g = gc_prev[:batch]
    if gh is None:
        g[...] = 0
    else:
        numpy.multiply(gh, o, out=g)
        g *= 1 - co * co
    if gc is not None:
        g += gc[:batch]
    grads = numpy.empty_like(gates)
    numpy.multiply(g, i, out=grads[0])
    grads[0] *= 1 - a * a
    numpy.multiply(g, a, out=grads[1])
    grads[1] *= i * (1 - i)
    numpy.multiply(g, c_prev[:batch], out=grads[2])
    grads[2] *= f * (1 - f)
    if gh is None:
        grads[3] = 0
    else:
        numpy.multiply(gh, co, out=grads[3])
        grads[3] *= o * (1 - o)
    g *= f
    numpy.moveaxis(gx.reshape(grads.shape[1:3] + (4,) + gx.shape[2:]),
                   2, 0)[...] = grads


def _lstm_to_onnx(partial):
    def convert(b, ins, outs):
        from chainerjit.onnx_export import ExportError
        if partial:
            raise ExportError('LSTM with a batch smaller than its state '
                              "(a shrinking batch) cannot be exported")
        c_prev, x = ins
        units = b.in_shapes[0][1]
        gates = b.op('Reshape', [x, b.int64s([0, units, 4, -1])])[0]
        a, i, f, o = b.op('Split', [gates, b.int64s([1, 1, 1, 1])],
                          [b.fresh('gate') for _ in range(4)], axis=2)
        shape = b.int64s([0, units] + list(b.in_shapes[0][2:]))
        a, i, f, o = [b.op('Reshape', [g, shape])[0] for g in (a, i, f, o)]
        a = b.op('Tanh', [a])[0]
        i, f, o = [b.op('Sigmoid', [g])[0] for g in (i, f, o)]
        c = b.op('Add', [b.op('Mul', [a, i])[0],
                         b.op('Mul', [f, c_prev])[0]], [outs[0]])[0]
        b.op('Mul', [o, b.op('Tanh', [c])[0]], [outs[1]])
    return convert
