"""Lowerings of chainer.functions.rnn."""

from chainer.functions.rnn import lstm
import numpy

from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import lowering


@lowering(lstm.LSTM)
def lower_lstm(node, ctx):
    """One LSTM step, ``(c_prev, x) -> (c, h)``, with Chainer's own gate
    split and sigmoid (its CPU formula); the gradient is Chainer's own
    ``LSTMGrad`` run on arrays."""
    if ctx.xp is not numpy:
        return None
    batch = ctx.in_shapes[1][0]
    partial = batch < ctx.in_shapes[0][0]

    def lstm_step(c_prev, x):
        a, i, f, o = lstm._extract_gates(x)
        a = numpy.tanh(a)
        i = lstm._sigmoid(i)
        f = lstm._sigmoid(f)
        o = lstm._sigmoid(o)
        c_next = numpy.empty_like(c_prev)
        c_next[:batch] = a * i + f * c_prev[:batch]
        h = o * numpy.tanh(c_next[:batch])
        if partial:
            c_next[batch:] = c_prev[batch:]
        return c_next, h
    return Kernel(lstm_step, multi=True,
                  grad=GradRule(_lstm_grad, (0, 1), (0,)),
                  onnx=_lstm_to_onnx(partial))


def _lstm_grad(xs, ys, gys, wanted):
    c_prev, x = xs
    gc, gh = gys
    gc_prev, gx = lstm.LSTMGrad().forward((c_prev, x, ys[0], gc, gh))
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
