"""Lowerings of chainer.functions.rnn."""

from chainer.functions.rnn import lstm
from chainer.functions.rnn import slstm
from chainer.functions.rnn import tree_lstm
import numpy

from chainerjit.ops import Follow
from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import _loops_rnn
from chainerjit.ops import lowering
from chainerjit.ops import same_rows
from chainerjit.ops.linear import grad_linear


@lowering(lstm.LSTM)
def lower_lstm(node, ctx):
    """One LSTM step, ``(c_prev, x) -> (c, h)``, with Chainer's formulas
    (its CPU sigmoid, ``tanh(x / 2) / 2 + 1 / 2``) on gates copied once
    into a contiguous gate-major buffer: Chainer's own kernel works on
    stride-4 views of ``x``, which is twice as slow."""
    if ctx.xp is not numpy:
        step, grad = _chainer_lstm_step, _chainer_lstm_grad
    else:
        def step(c_prev, x):
            return _step(c_prev, x)[:2]
        # passes.fuse.fuse_lstm_step may replace it by fused_step (C loops).
        step.fusable = True
        grad = _lstm_grad
    return Kernel(step, multi=True, grad=GradRule(grad, (0, 1), (0,)),
                  onnx=_lstm_to_onnx(ctx.in_shapes[1][0] <
                                     ctx.in_shapes[0][0]), fresh=True,
                  lengths=rows_of_step)


def rows_of_step(rows, outputs=2):
    """The ``Kernel.lengths`` rule of an LSTM step: its state and inputs
    have the same rows (the step reads their number from the arrays, in
    its forward and gradient), which ``c`` and ``h`` have; the first
    ``outputs`` outputs have them (a fused step's gates do not: their
    rows are axis 1, which only its gradient reads)."""
    found = same_rows(rows)
    if found is None:
        return None
    return Follow((found,) * 2 + (None,) * (outputs - 2))


def _chainer_lstm_step(c_prev, x):
    """Chainer's own LSTM kernel (on GPU: one CUDA elementwise kernel)."""
    return lstm.LSTM().forward((c_prev, x))


def _chainer_lstm_grad(xs, ys, gys, wanted):
    """Chainer's own ``LSTMGrad`` kernel."""
    gc_prev, gx = lstm.LSTMGrad().forward(tuple(xs) + (ys[0],) + tuple(gys))
    return (gc_prev if wanted[0] else None, gx if wanted[1] else None)


def fused_step(product, rounded=False):
    """``(fn, grad)`` of an LSTM step fused with the lateral product and
    the sum before it (``passes/fuse.py``): ``fn(c_prev, u, h, W)`` returns
    ``(c, h_next, gates)`` for ``lstm(c_prev, u + product(h, W))``, where
    ``product`` is the ``LinearFunction`` kernel's (it may return a
    transposed view, which the gates' C loop reads in place of NumPy's
    copy and sum), and ``gates`` are the activated gates, (4, B, H), kept
    for the gradient instead of recomputing them from the sum. ``grad``
    is the three nodes' gradient rules chained (GradRule inputs c_prev, h
    and W; outputs c and gates); ``rounded``: h's gradient in the faster
    order even where it rounds otherwise than eager's (``grad_linear``)."""
    def fn(c_prev, u, h, W):
        return _step(c_prev, u, product(h, W))

    def grad(xs, ys, gys, wanted):
        c_prev, _, h, W = xs
        c, _, gates = ys
        gc_prev, gx = _lstm_grad_from_gates(gates, c_prev, c, gys[0], gys[1])
        gh, gW = grad_linear((h, W), (None,), (gx,), wanted[2:], rounded)
        return (gc_prev if wanted[0] else None, gx if wanted[1] else None,
                gh, gW)
    grad.factors = (3,)  # gW = gx^T h, as grad_linear's
    grad.fortran_inputs = (3,)  # W, as grad_linear's
    return fn, grad


def _step(c_prev, x, addend=None):
    """``(c, h, gates)`` of Chainer's LSTM step on ``x`` (+ ``addend``),
    ``gates`` activated, gate-major (4, B, H): one C call
    (``_loops_rnn.lstm_step``, NumPy's own tanh loop inside) for 2-D
    float32 or float64, else NumPy passes."""
    batch, n_units = len(x), c_prev.shape[1]
    gates = numpy.empty((4, batch, n_units) + x.shape[2:], x.dtype)
    c_next = numpy.empty_like(c_prev)
    h = numpy.empty((batch,) + c_prev.shape[1:], c_prev.dtype)
    if _loops_rnn.lstm_step(x, addend, c_prev, gates, c_next, h):
        return c_next, h, gates
    gates = _activate(_halved_gates(x, addend))
    return _cell(gates, c_prev) + (gates,)


def _cell(gates, c_prev):
    """``(c, h)`` from the activated gates (``_activate``; the sigmoids
    are finished here, in place) and the state: ``c = a * i + f *
    c_prev`` and ``h = o * tanh(c)`` in the first B rows, the rest of
    ``c_prev`` copied."""
    batch = gates.shape[1]
    c_next = numpy.empty_like(c_prev)
    c = c_next[:batch]
    if not _loops_rnn.lstm_cell(gates, c_prev, c_next):
        _finish_sigmoids(gates)
        a, s = gates[0], gates[1:]
        numpy.multiply(a, s[0], out=c)
        c += s[1] * c_prev[:batch]
    h = numpy.tanh(c)
    h *= gates[3]
    if batch < len(c_prev):
        c_next[batch:] = c_prev[batch:]
    return c_next, h


def _halved_gates(x, addend=None):
    """The gates of ``x`` (+ ``addend``), (B, 4H, ...) with Chainer's
    interleaving (``x.reshape(B, H, 4, ...)``), as a new contiguous
    gate-major (4, B, H, ...) array, i, f and o halved (the first step of
    Chainer's CPU sigmoid, ``tanh(x * 0.5) * 0.5 + 0.5``). One C loop
    (NumPy's copy of the strided view took a third of an LSTM step)."""
    g = numpy.empty((4, len(x), x.shape[1] // 4) + x.shape[2:], x.dtype)
    if not _loops_rnn.gate_major(x, g, 0.5, addend):
        if addend is not None:
            x = x + addend
        g[...] = numpy.moveaxis(x.reshape((len(x), x.shape[1] // 4, 4) +
                                          x.shape[2:]), 2, 0)
        g[1:] *= 0.5
    return g


def _activate(gates):
    """One ``tanh`` over all four halved gates, in place."""
    return numpy.tanh(gates, out=gates)


def _finish_sigmoids(gates):
    s = gates[1:]
    if not _loops_rnn.half_plus_half(s):
        s *= 0.5
        s += 0.5


def _gates(x):
    """``tanh(a)`` and the sigmoids of i, f, o, as a new gate-major (4,
    B, H, ...) array."""
    g = _activate(_halved_gates(x))
    _finish_sigmoids(g)
    return g


def _lstm_grad(xs, ys, gys, wanted):
    """Chainer's ``LSTMGrad`` on the gates recomputed from ``x``."""
    c_prev, x = xs
    gc_prev, gx = _lstm_grad_from_gates(_gates(x), c_prev, ys[0], *gys)
    return (gc_prev if wanted[0] else None, gx if wanted[1] else None)


def _lstm_grad_from_gates(gates, c_prev, c_next, gc, gh):
    """``(gc_prev, gx)``: Chainer's ``LSTMGrad`` formulas on gate-major
    ``gates`` (as ``_gates`` returns them): in one C loop for C-ordered
    2-D arrays (``_loops_rnn.lstm_grad``, which also interleaves the
    gates' gradients back), else in NumPy passes."""
    batch = gates.shape[1]
    # A missing gradient is zeros, as in LSTMGrad (which keeps the signs
    # of zero products and NaN from c).
    if gc is None:
        gc = numpy.zeros_like(c_prev)
    if gh is None:
        gh = numpy.zeros((batch,) + c_prev.shape[1:], c_prev.dtype)
    co = numpy.tanh(c_next[:batch])
    gc_prev = numpy.empty_like(c_prev)
    gx = numpy.empty((batch, 4 * gates.shape[2]) + gates.shape[3:],
                     gates.dtype)
    if not _loops_rnn.lstm_grad(gates, co, c_prev, gh, gc, gc_prev, gx):
        _lstm_grad_passes(gates, co, c_prev, gh, gc, gc_prev, gx)
    if batch < len(c_prev):
        gc_prev[batch:] = gc[batch:]
    return gc_prev, gx


def _lstm_grad_passes(gates, co, c_prev, gh, gc, gc_prev, gx):
    """``_loops_rnn.lstm_grad`` in NumPy passes (any layout, trailing
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
        from chainerjit.errors import ExportError
        if partial:
            raise ExportError('LSTM with a batch smaller than its state '
                              "(a shrinking batch) cannot be exported")
        c_prev, x = ins
        a, i, f, o = _onnx_gates(b, x, b.in_shapes[0], 4, interleaved=True)
        a = b.op('Tanh', [a])[0]
        i, f, o = [b.op('Sigmoid', [g])[0] for g in (i, f, o)]
        c = b.op('Add', [b.op('Mul', [a, i])[0],
                         b.op('Mul', [f, c_prev])[0]], [outs[0]])[0]
        b.op('Mul', [o, b.op('Tanh', [c])[0]], [outs[1]])
        if len(outs) > 2:  # a fused step's activated gates, (4, B, H)
            b.op('Concat', [b.op('Unsqueeze', [g, b.int64s([0])])[0]
                            for g in (a, i, f, o)], [outs[2]], axis=0)
    return convert


def _onnx_gates(b, x, state_shape, n, interleaved):
    """ONNX values of the ``n`` gates of ``x``, each of ``state_shape``
    but for its batch: element ``k`` of each group of ``n`` along axis 1
    (``interleaved``, as ``lstm`` and ``slstm`` read them) or the ``k``-th
    of ``n`` blocks (as ``tree_lstm`` does)."""
    units = state_shape[1]
    grouped = [0, units, n, -1] if interleaved else [0, n, units, -1]
    gates = b.op('Reshape', [x, b.int64s(grouped)])[0]
    parts = b.op('Split', [gates, b.int64s([1] * n)],
                 [b.fresh('gate') for _ in range(n)],
                 axis=2 if interleaved else 1)
    shape = b.int64s([0, units] + list(state_shape[2:]))
    return [b.op('Reshape', [g, shape])[0] for g in parts]


def _onnx_sigmoid(b, x):
    """Chainer's CPU sigmoid, ``tanh(x / 2) / 2 + 1 / 2``, in ONNX."""
    dtype = b.in_dtypes[-1]
    half = b.constant(numpy.asarray(0.5, dtype))
    return b.single('Add', b.single('Mul', b.single(
        'Tanh', b.single('Mul', x, half)), half), half)


@lowering(slstm.SLSTM)
def lower_slstm(node, ctx):
    """An S-LSTM step, ``(c_prev1, c_prev2, x1, x2) -> (c, h)``: Chainer's
    own forward, and its ``SLSTMGrad``'s for the gradient."""
    def step(c_prev1, c_prev2, x1, x2):
        return slstm.SLSTM().forward((c_prev1, c_prev2, x1, x2))

    def grad(xs, ys, gys, wanted):
        grads = slstm.SLSTMGrad().forward(tuple(xs) + (ys[0],) + tuple(gys))
        return tuple(g if w else None for g, w in zip(grads, wanted))

    def to_onnx(b, ins, outs):
        c_prev1, c_prev2, x1, x2 = ins
        a1, i1, f1, o1 = _onnx_gates(b, x1, b.in_shapes[0], 4, True)
        a2, i2, f2, o2 = _onnx_gates(b, x2, b.in_shapes[1], 4, True)
        terms = [b.single('Mul', b.single('Tanh', a), _onnx_sigmoid(b, i))
                 for a, i in ((a1, i1), (a2, i2))]
        terms += [b.single('Mul', _onnx_sigmoid(b, f), c)
                  for f, c in ((f1, c_prev1), (f2, c_prev2))]
        c = b.op('Add', [b.single('Add', b.single('Add', *terms[:2]),
                                  terms[2]), terms[3]], [outs[0]])[0]
        o = _onnx_sigmoid(b, b.single('Add', o1, o2))
        b.op('Mul', [o, b.single('Tanh', c)], [outs[1]])
    return Kernel(step, multi=True, grad=GradRule(grad, (0, 1, 2, 3), (0,)),
                  onnx=to_onnx, fresh=True, lengths=rows_of_step)


@lowering(tree_lstm.TreeLSTM)
def lower_tree_lstm(node, ctx):
    """A Tree-LSTM step over ``n`` children, ``(c_1, ..., c_n, x) -> (c,
    h)``: Chainer's own forward, and for the gradient its backward after
    that forward (which keeps the activated gates on the Function)."""
    def step(*inputs):
        return tree_lstm.TreeLSTM().forward(inputs)

    def grad(xs, ys, gys, wanted):
        function = tree_lstm.TreeLSTM()
        function.forward(xs)
        grads = function.backward(xs, gys)
        return tuple(g if w else None for g, w in zip(grads, wanted))

    def to_onnx(b, ins, outs):
        cs, x = ins[:-1], ins[-1]
        gates = _onnx_gates(b, x, b.in_shapes[0], 3 + len(cs), False)
        a = b.single('Tanh', gates[0])
        i, o = _onnx_sigmoid(b, gates[1]), _onnx_sigmoid(b, gates[2])
        c = b.single('Mul', a, i)
        for f, c_child in zip(gates[3:], cs):
            c = b.single('Add', c, b.single('Mul', _onnx_sigmoid(b, f),
                                            c_child))
        c = b.op('Identity', [c], [outs[0]])[0]
        b.op('Mul', [o, b.single('Tanh', c)], [outs[1]])
    n_inputs = len(ctx.in_shapes)
    return Kernel(step, multi=True,
                  grad=GradRule(grad, tuple(range(n_inputs))),
                  onnx=to_onnx, fresh=True,
                  lengths=rows_of_step)
