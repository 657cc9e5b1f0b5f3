"""Lowerings of chainer.functions.rnn."""

from chainer.functions.rnn import lstm
import numpy

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
        a, s = _gates(x)
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


def _gate_major(x):
    """``x``'s gates (Chainer interleaves them: ``x.reshape(B, H, 4,
    ...)``) as a contiguous ``(4, B, H, ...)`` copy: a, i, f, o."""
    shape = (len(x), x.shape[1] // 4, 4) + x.shape[2:]
    return numpy.moveaxis(x.reshape(shape), 2, 0).copy()


def _gates(x):
    """``tanh(a)`` and the sigmoids of i, f, o, stacked."""
    g = _gate_major(x)
    numpy.tanh(g[0], out=g[0])
    s = g[1:]
    s *= 0.5
    numpy.tanh(s, out=s)
    s *= 0.5
    s += 0.5
    return g[0], s


def _lstm_grad(xs, ys, gys, wanted):
    """Chainer's ``LSTMGrad`` formulas on gate-major buffers."""
    c_prev, x = xs
    gc, gh = gys
    batch = len(x)
    a, (i, f, o) = _gates(x)
    co = numpy.tanh(ys[0][:batch])
    gc_prev = numpy.empty_like(c_prev)
    g = gc_prev[:batch]
    if gh is None:
        g[...] = 0
    else:
        numpy.multiply(gh, o, out=g)
        g *= 1 - co * co
    if gc is not None:
        g += gc[:batch]
    grads = numpy.empty((4,) + a.shape, x.dtype)
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
    gc_prev[batch:] = 0 if gc is None else gc[batch:]
    gx = numpy.empty_like(x)
    numpy.moveaxis(gx.reshape(grads.shape[1:3] + (4,) + x.shape[2:]),
                   2, 0)[...] = grads
    return (gc_prev if wanted[0] else None, gx if wanted[1] else None)


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
