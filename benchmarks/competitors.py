"""Competitors for the benchmarks: NumPy floors and PyTorch twins.

Each factory takes an initialized eager model from ``examples.models``
and its inputs, copies what it needs (the Chainer model is never
modified), and returns a zero-argument callable: one inference call or
one full training step, which is what a benchmark times.

* ``*_numpy``: hand-written float32 NumPy, the fastest reasonable
  NumPy for the same math. Weights are copied once into contiguous
  layouts and every intermediate buffer is allocated at build time, so
  a steady-state call allocates (almost) nothing. An inference floor
  returns (a view of) one of its buffers, which the next call
  overwrites.
* ``*_torch``: the same architecture with the same weights in standard
  PyTorch modules. They return ``None`` when torch is not installed.

Training callables do one SGD step on their own copies of the weights,
return the loss and expose ``params``: the current weights in Chainer's
layout, keyed ``'link/param'`` (``'l1/W'``, ``'lstm/upward/W'``, ...).

Outside the convolutions (see ``_ConvBN``), the NumPy floors keep
activations feature-major, (features, batch): numpy's BLAS computes
``W @ x.T`` faster than ``x @ W.T`` for these shapes, reductions over
features become matrix products, and LSTM gates and attention heads
become contiguous blocks of rows.
"""

import contextlib
import math

import numpy
from numpy.lib.stride_tricks import as_strided

_F32 = numpy.float32


def _copy(array):
    return numpy.array(array, dtype=_F32, order='C')


def _empty(*shape):
    return numpy.empty(shape, _F32)


class _Trainer:
    """A training step callable with a ``params`` property."""

    def __init__(self, step, export):
        self._step = step
        self._export = export

    def __call__(self):
        return self._step()

    @property
    def params(self):
        return self._export()


# NumPy building blocks


class _Dense:
    """A Linear link's own weights, gradients and feature-major output
    buffer (out, batch). ``w`` and ``b`` replace the link's W and b, in
    the same layouts."""

    def __init__(self, link, batch, w=None, b=None):
        self.w = _copy(link.W.array if w is None else w)
        self.b = _copy(link.b.array if b is None else b)[:, None]
        # b tiled over the batch: adding a same-shape array is faster
        # than broadcasting and needs no ufunc buffer.
        self.b_tiled = numpy.repeat(self.b, batch, axis=1)
        self.y = _empty(self.b.size, batch)
        self.gw = numpy.zeros_like(self.w)
        self.gb = numpy.zeros_like(self.b)
        self.ones = numpy.ones((batch, 1), _F32)

    def forward(self, x):
        """``x`` is feature-major, (in, batch)."""
        numpy.dot(self.w, x, out=self.y)
        self.y += self.b_tiled
        return self.y

    def backward(self, x, gy, gx=None):
        """Gradients for W and b from ``gy``; also ``gx`` if given."""
        numpy.dot(gy, x.T, out=self.gw)
        numpy.dot(gy, self.ones, out=self.gb)
        if gx is not None:
            numpy.dot(self.w.T, gy, out=gx)

    def sgd(self, lr):
        _sgd(self.w, self.gw, lr)
        _sgd(self.b, self.gb, lr)
        numpy.copyto(self.b_tiled, self.b)

    def export(self, name):
        return {name + '/W': self.w.copy(), name + '/b': self.b[:, 0].copy()}


def _sgd(param, grad, lr):
    """``param -= lr * grad``, scaling ``grad`` in place."""
    numpy.multiply(grad, lr, out=grad)
    numpy.subtract(param, grad, out=param)


def _relu(x):
    numpy.maximum(x, 0, out=x)


def _relu_backward(gy, y, mask):
    """Zeroes ``gy`` where the relu output ``y`` was not positive."""
    numpy.greater(y, 0, out=mask)
    numpy.multiply(gy, mask, out=gy)


def _sigmoid(x):
    """In place, as Chainer's LSTM computes it."""
    numpy.multiply(x, 0.5, out=x)
    numpy.tanh(x, out=x)
    numpy.multiply(x, 0.5, out=x)
    numpy.add(x, 0.5, out=x)


class _SoftmaxCrossEntropy:
    """The batch-mean softmax cross entropy of feature-major logits
    (classes, batch) against integer labels; its gradient is written
    into ``self.gz``."""

    def __init__(self, t, n_out):
        self.t = numpy.asarray(t)
        self.columns = numpy.arange(self.t.size)
        self.gz = _empty(n_out, self.t.size)
        self.m = _empty(1, self.t.size)
        self.ones = numpy.ones((1, n_out), _F32)

    def forward_backward(self, z):
        """Returns the loss as a float; fills ``self.gz``."""
        g, m = self.gz, self.m
        numpy.max(z, axis=0, keepdims=True, out=m)
        numpy.subtract(z, m, out=g)
        picked = g[self.t, self.columns]
        numpy.exp(g, out=g)
        numpy.dot(self.ones, g, out=m)
        loss = float(numpy.mean(numpy.log(m[0]) - picked))
        numpy.divide(g, m, out=g)
        g[self.t, self.columns] -= 1
        numpy.multiply(g, 1.0 / self.t.size, out=g)
        return loss


# MLP


def _mlp_layers(model, batch):
    return [_Dense(link, batch) for link in (model.l1, model.l2, model.l3)]


def _mlp_forward(layers, x):
    l1, l2, l3 = layers
    h = l1.forward(x)
    _relu(h)
    h = l2.forward(h)
    _relu(h)
    return l3.forward(h)


def mlp_inference_numpy(model, x):
    """One MLP forward on ``x`` (N, n_in); returns the logits (N, 10)."""
    xt = numpy.asarray(x, _F32).T
    layers = _mlp_layers(model, xt.shape[1])
    return lambda: _mlp_forward(layers, xt).T


def mlp_training_numpy(model, x, t, lr):
    """One SGD step of the MLP on its own weights; returns the loss."""
    xt = numpy.asarray(x, _F32).T
    layers = _mlp_layers(model, xt.shape[1])
    l1, l2, l3 = layers
    xent = _SoftmaxCrossEntropy(t, l3.b.size)
    g2, g1 = numpy.empty_like(l2.y), numpy.empty_like(l1.y)
    mask2, mask1 = (numpy.empty(g.shape, bool) for g in (g2, g1))

    def step():
        loss = xent.forward_backward(_mlp_forward(layers, xt))
        l3.backward(l2.y, xent.gz, g2)
        _relu_backward(g2, l2.y, mask2)
        l2.backward(l1.y, g2, g1)
        _relu_backward(g1, l1.y, mask1)
        l1.backward(xt, g1)
        for layer in layers:
            layer.sgd(lr)
        return loss

    def export():
        params = {}
        for name, layer in zip(('l1', 'l2', 'l3'), layers):
            params.update(layer.export(name))
        return params

    return _Trainer(step, export)


# LSTM


def _gate_major(w):
    """Chainer's interleaved (4H, ...) gate rows -> gate-major blocks of
    rows, in the same gate order (a, i, f, o)."""
    n = w.shape[0] // 4
    return _copy(w.reshape(n, 4, -1).transpose(1, 0, 2).reshape(w.shape))


def _interleaved(w):
    """The inverse of ``_gate_major``."""
    n = w.shape[0] // 4
    return w.reshape(4, n, -1).transpose(1, 0, 2).reshape(w.shape).copy()


def _split_gates(g, n):
    """Views of the a, i, f and o blocks of gate-major (4H, B) gates."""
    return g[:n], g[n:2 * n], g[2 * n:3 * n], g[3 * n:]


class _LSTM:
    """``L.LSTM`` stepped over all of ``xs`` (T, B, n_in) from a reset
    state, with every step's state kept for BPTT."""

    def __init__(self, link, xs):
        self.xs = numpy.asarray(xs, _F32)
        n_steps, batch, n_in = self.xs.shape
        self.n = n = link.state_size
        self.wu = _gate_major(link.upward.W.array)
        self.bu = _gate_major(link.upward.b.array)[:, None]
        self.wl = _gate_major(link.lateral.W.array)
        # Gates of step t, activated in place: (a | i | f | o) rows.
        self.gates = _empty(n_steps, 4 * n, batch)
        self.c = numpy.zeros((n_steps + 1, n, batch), _F32)
        self.h = numpy.zeros((n_steps + 1, n, batch), _F32)
        self.tanh_c = _empty(n_steps, n, batch)
        self.tmp = _empty(4 * n, batch)

    def forward(self):
        """Returns the last hidden state, (H, B) (a buffer)."""
        n, c, h, tanh_c = self.n, self.c, self.h, self.tanh_c
        numpy.matmul(self.wu, self.xs.transpose(0, 2, 1), out=self.gates)
        self.gates += self.bu
        tmp = self.tmp[:n]
        for t, g in enumerate(self.gates):
            if t:  # Chainer skips the lateral term while h is None.
                numpy.dot(self.wl, h[t], out=self.tmp)
                g += self.tmp
            a, i, f, o = _split_gates(g, n)
            numpy.tanh(a, out=a)
            _sigmoid(g[n:])
            numpy.multiply(f, c[t], out=c[t + 1])
            numpy.multiply(a, i, out=tmp)
            c[t + 1] += tmp
            numpy.tanh(c[t + 1], out=tanh_c[t])
            numpy.multiply(o, tanh_c[t], out=h[t + 1])
        return h[-1]


class _LSTMGrad:
    """Backpropagation through time for an ``_LSTM``'s last forward."""

    def __init__(self, lstm):
        self.lstm = lstm
        n_steps, n4, batch = lstm.gates.shape
        self.gwu = numpy.zeros_like(lstm.wu)
        self.gbu = numpy.zeros_like(lstm.bu)
        self.gwl = numpy.zeros_like(lstm.wl)
        # d(pre-activation gates); activation derivatives of the gates.
        self.ggates = numpy.empty_like(lstm.gates)
        self.dact = numpy.empty_like(lstm.gates)
        # The gate gradients and h with (T, B) merged, for the weight
        # gradients' matmuls.
        self.ggates_by_row = _empty(n4, n_steps, batch)
        self.h_by_step = _empty(n_steps, batch, lstm.n)
        self.ones = numpy.ones((n_steps * batch, 1), _F32)
        self.gc = _empty(lstm.n, batch)
        self.tmp = numpy.empty_like(self.gc)

    def _activation_derivatives(self):
        n, g, d = self.lstm.n, self.lstm.gates, self.dact
        numpy.multiply(g, g, out=d)
        numpy.subtract(1, d[:, :n], out=d[:, :n])  # tanh: 1 - a^2
        numpy.subtract(g[:, n:], d[:, n:], out=d[:, n:])  # s - s^2

    def backward(self, gh):
        """Gradients of the weights from ``gh`` (H, B), the gradient of
        the last hidden state; ``gh`` is overwritten."""
        s, n, gc, tmp = self.lstm, self.lstm.n, self.gc, self.tmp
        self._activation_derivatives()
        gc.fill(0)
        for t in reversed(range(s.gates.shape[0])):
            g, gg = s.gates[t], self.ggates[t]
            a, i, f, o = _split_gates(g, n)
            ga, gi, gf, go = _split_gates(gg, n)
            numpy.multiply(gh, s.tanh_c[t], out=go)
            numpy.multiply(s.tanh_c[t], s.tanh_c[t], out=tmp)
            numpy.subtract(1, tmp, out=tmp)
            tmp *= o
            tmp *= gh
            gc += tmp
            numpy.multiply(gc, i, out=ga)
            numpy.multiply(gc, a, out=gi)
            numpy.multiply(gc, s.c[t], out=gf)
            gc *= f
            gg *= self.dact[t]
            if t:
                numpy.dot(s.wl.T, gg, out=gh)
        self._weight_gradients()

    def _weight_gradients(self):
        s, rows = self.lstm, self.ggates_by_row
        numpy.copyto(rows, self.ggates.transpose(1, 0, 2))
        rows = rows.reshape(rows.shape[0], -1)
        numpy.dot(rows, s.xs.reshape(-1, s.xs.shape[2]), out=self.gwu)
        numpy.dot(rows, self.ones, out=self.gbu)
        # h[0] is zero, so step 0 adds nothing, as in Chainer.
        numpy.copyto(self.h_by_step, s.h[:-1].transpose(0, 2, 1))
        numpy.dot(rows, self.h_by_step.reshape(-1, s.n), out=self.gwl)

    def sgd(self, lr):
        _sgd(self.lstm.wu, self.gwu, lr)
        _sgd(self.lstm.bu, self.gbu, lr)
        _sgd(self.lstm.wl, self.gwl, lr)


def lstm_inference_numpy(model, xs):
    """``LSTMClassifier`` forward over ``xs`` (T, B, n_in); returns the
    logits (B, 10)."""
    lstm = _LSTM(model.lstm, xs)
    out = _Dense(model.out, lstm.h.shape[2])
    return lambda: out.forward(lstm.forward()).T


def lstm_training_numpy(model, xs, t, lr):
    """One SGD step of ``LSTMClassifier`` (BPTT over all steps) on its
    own weights; returns the loss."""
    lstm = _LSTM(model.lstm, xs)
    grad = _LSTMGrad(lstm)
    out = _Dense(model.out, lstm.h.shape[2])
    xent = _SoftmaxCrossEntropy(t, out.b.size)
    gh = numpy.empty_like(grad.gc)

    def step():
        h = lstm.forward()
        loss = xent.forward_backward(out.forward(h))
        out.backward(h, xent.gz, gh)
        grad.backward(gh)
        out.sgd(lr)
        grad.sgd(lr)
        return loss

    def export():
        params = {'lstm/upward/W': _interleaved(lstm.wu),
                  'lstm/upward/b': _interleaved(lstm.bu).ravel(),
                  'lstm/lateral/W': _interleaved(lstm.wl)}
        params.update(out.export('out'))
        return params

    return _Trainer(step, export)


# LeNet


class _ConvBN:
    """A padded stride-1 convolution with test-mode batch normalization
    folded into its weights, as im2col and one matmul, followed by 2x2
    pooling.

    Activations are NHWC, and the im2col rows are output positions: the
    matmul is fastest that way round here. The rows are ordered (row
    parity, column parity, N, H/2, W/2), so the four inputs of each
    pooling window lie in four contiguous blocks of the output. Callers
    write the input into ``self.interior``, the unpadded part of the
    padding buffer.
    """

    def __init__(self, conv, bn, batch, height, width):
        w = conv.W.array
        out_c, in_c, kh, kw = w.shape
        p = conv.pad[0]
        scale = bn.gamma.array / numpy.sqrt(bn.avg_var + bn.eps)
        # (kh, kw, C) rows match the im2col columns.
        self.wt = _copy(w.transpose(2, 3, 1, 0).reshape(-1, out_c) * scale)
        self.b = _copy((conv.b.array - bn.avg_mean) * scale + bn.beta.array)
        padded = numpy.zeros((batch, height + 2 * p, width + 2 * p, in_c),
                             _F32)
        self.interior = padded[:, p:p + height, p:p + width]
        sn, sh, sw, sc = padded.strides
        half = (batch, height // 2, width // 2)
        self.windows = as_strided(
            padded, (2, 2) + half + (kh, kw, in_c),
            (sh, sw, sn, 2 * sh, 2 * sw, sh, sw, sc), writeable=False)
        self.cols = _empty(batch * height * width, kh * kw * in_c)
        self.y = _empty(batch * height * width, out_c)
        self.quarters = self.y.reshape((4,) + half + (out_c,))

    def forward_pool_relu(self, out):
        """Convolution, then max pooling and relu (which commute, and
        the pooled array is smaller) into ``out`` (N, H/2, W/2, C)."""
        numpy.copyto(self.cols.reshape(self.windows.shape), self.windows)
        numpy.dot(self.cols, self.wt, out=self.y)
        q = self.quarters
        numpy.maximum(q[0], q[1], out=out)
        numpy.maximum(out, q[2], out=out)
        numpy.maximum(out, q[3], out=out)
        # The bias is the same within a window: add it after pooling.
        numpy.add(out, self.b, out=out)
        _relu(out)


def lenet_inference_numpy(model, x):
    """LeNet forward in test mode; returns the logits. Needs image
    sizes that are multiples of 4, and ``model`` called once so that
    fc1 is initialized."""
    x = numpy.asarray(x, _F32)
    batch, _, height, width = x.shape
    if height % 4 or width % 4:
        raise ValueError('image sizes must be multiples of 4')
    conv1 = _ConvBN(model.conv1, model.bn1, batch, height, width)
    conv2 = _ConvBN(model.conv2, model.bn2, batch, height // 2, width // 2)
    pooled = _empty(batch, height // 4, width // 4, conv2.b.size)
    # fc1 reads pooled NHWC; Chainer flattens NCHW.
    w = model.fc1.W.array
    fc1 = _Dense(model.fc1, batch, w.reshape(
        (w.shape[0], pooled.shape[3]) + pooled.shape[1:3]).transpose(
            0, 2, 3, 1).reshape(w.shape))
    fc2, fc3 = _Dense(model.fc2, batch), _Dense(model.fc3, batch)
    flat = pooled.reshape(batch, -1).T

    def call():
        numpy.copyto(conv1.interior, x.transpose(0, 2, 3, 1))
        conv1.forward_pool_relu(conv2.interior)
        conv2.forward_pool_relu(pooled)
        h = fc1.forward(flat)
        _relu(h)
        h = fc2.forward(h)
        _relu(h)
        return fc3.forward(h).T

    return call


# EncoderBlock


class _LayerNorm:
    """LayerNormalization over the columns of a feature-major (D, M)
    buffer, in place; the means are matrix products."""

    def __init__(self, link, columns):
        self.gamma = _copy(link.gamma.array)[:, None]
        self.beta = _copy(link.beta.array)[:, None]
        self.eps = link.eps
        self.average = numpy.full((1, self.gamma.size),
                                  1.0 / self.gamma.size, _F32)
        self.mean = _empty(1, columns)
        self.std = _empty(1, columns)
        self.sq = _empty(self.gamma.size, columns)

    def __call__(self, x):
        numpy.dot(self.average, x, out=self.mean)
        x -= self.mean
        numpy.multiply(x, x, out=self.sq)
        numpy.dot(self.average, self.sq, out=self.std)
        self.std += self.eps
        numpy.sqrt(self.std, out=self.std)
        x /= self.std
        x *= self.gamma
        x += self.beta
        return x


class _ColumnSoftmax:
    """Softmax over axis 0 of a (K, M) buffer, in place."""

    def __init__(self, k, m):
        self.ones = numpy.ones((1, k), _F32)
        self.m = _empty(1, m)

    def __call__(self, x):
        numpy.max(x, axis=0, keepdims=True, out=self.m)
        x -= self.m
        numpy.exp(x, out=x)
        numpy.dot(self.ones, x, out=self.m)
        x /= self.m


def _heads(t, batch, length, heads):
    """Feature-major (D, B * L) -> per-head (B, heads, d_head, L) views."""
    return t.reshape(heads, -1, batch, length).transpose(2, 0, 1, 3)


def encoder_inference_numpy(model, x):
    """``EncoderBlock`` forward without a mask on ``x`` (B, L, D)."""
    x = numpy.asarray(x, _F32)
    batch, length, d = x.shape
    heads, rows = model.n_heads, batch * length
    # Fold the score scale into the query weights.
    w, b = _copy(model.qkv.W.array), _copy(model.qkv.b.array)
    w[:d] *= 1.0 / math.sqrt(d // heads)
    b[:d] *= 1.0 / math.sqrt(d // heads)
    qkv = _Dense(model.qkv, rows, w, b)
    out = _Dense(model.out, rows)
    ff1, ff2 = _Dense(model.ff1, rows), _Dense(model.ff2, rows)
    ln1, ln2 = _LayerNorm(model.ln1, rows), _LayerNorm(model.ln2, rows)
    q, k, v = (_heads(qkv.y[i * d:(i + 1) * d], batch, length, heads)
               for i in range(3))
    # Scores are key-major, (key, B, heads, query), so that softmax
    # reduces over axis 0; their transposes are the attention matrices.
    scores = _empty(length, batch, heads, length)
    scores_by_head = scores.transpose(1, 2, 0, 3)
    scores_2d = scores.reshape(length, -1)
    softmax = _ColumnSoftmax(length, scores_2d.shape[1])
    concat = _empty(d, rows)
    concat_by_head = _heads(concat, batch, length, heads)
    h = _empty(d, rows)
    xt = x.reshape(rows, d).T

    def call():
        qkv.forward(xt)
        numpy.matmul(k.transpose(0, 1, 3, 2), q, out=scores_by_head)
        softmax(scores_2d)
        numpy.matmul(v, scores_by_head, out=concat_by_head)
        numpy.add(xt, out.forward(concat), out=h)
        ln1(h)
        f = ff1.forward(h)
        _relu(f)
        numpy.add(h, ff2.forward(f), out=h)
        return ln2(h).T.reshape(batch, length, d)

    return call


# PyTorch twins


#: Where the PyTorch twins run: ``'cpu'``, or ``'cuda'`` for
#: ``benchmarks/bench_gpu.py``.
TORCH_DEVICE = 'cpu'


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _set(param, array):
    """Copies a Chainer array into a torch parameter or buffer."""
    import torch
    with torch.no_grad():
        param.copy_(torch.from_numpy(_copy(array)))


def _copy_linear(layer, link):
    _set(layer.weight, link.W.array)
    _set(layer.bias, link.b.array)
    return layer


def _torch_linear(link):
    import torch
    n_out, n_in = link.W.shape
    return _copy_linear(torch.nn.Linear(n_in, n_out), link)


#: Whether the twins built now run through ``torch.compile`` (set by
#: :func:`compiled_torch`).
_COMPILE = [False]


@contextlib.contextmanager
def compiled_torch():
    """The PyTorch twins built in the block are ``torch.compile``-d (its
    default, Inductor), for the ``torch_compile`` column."""
    _COMPILE[0] = True
    try:
        yield
    finally:
        _COMPILE[0] = False


def _maybe_compiled(torch, net):
    return torch.compile(net) if _COMPILE[0] else net


def _torch_inference(torch, net, *inputs):
    """An eval-mode, no-grad call of ``net`` on inputs converted once."""
    net.eval().to(TORCH_DEVICE)
    inputs = [torch.from_numpy(_copy(x)).to(TORCH_DEVICE) for x in inputs]
    run = _maybe_compiled(torch, net)

    def call():
        with torch.no_grad():
            return run(*inputs)

    return call


def _torch_training(torch, net, parameters, x, t, lr, export):
    """A full SGD step of ``net`` on ``x`` against labels ``t``."""
    net.train().to(TORCH_DEVICE)
    x = torch.from_numpy(_copy(x)).to(TORCH_DEVICE)
    t = torch.from_numpy(numpy.asarray(t, numpy.int64)).to(TORCH_DEVICE)
    optimizer = torch.optim.SGD(parameters, lr=lr)
    run = _maybe_compiled(torch, net)

    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(run(x), t)
        loss.backward()
        optimizer.step()
        return loss

    return _Trainer(step, export)


def _torch_mlp(torch, model):
    return torch.nn.Sequential(
        _torch_linear(model.l1), torch.nn.ReLU(),
        _torch_linear(model.l2), torch.nn.ReLU(),
        _torch_linear(model.l3))


def _linear_params(layer, name):
    return {name + '/W': layer.weight.detach(),
            name + '/b': layer.bias.detach()}


def mlp_inference_torch(model, x):
    """The MLP as ``nn.Sequential``; returns the logits."""
    torch = _torch()
    if torch is None:
        return None
    return _torch_inference(torch, _torch_mlp(torch, model), x)


def mlp_training_torch(model, x, t, lr):
    """One SGD step of the MLP twin; returns the loss tensor."""
    torch = _torch()
    if torch is None:
        return None
    net = _torch_mlp(torch, model)

    def export():
        params = {}
        for name, i in (('l1', 0), ('l2', 2), ('l3', 4)):
            params.update(_linear_params(net[i], name))
        return params

    return _torch_training(torch, net, net.parameters(), x, t, lr, export)


# Chainer's interleaved gate a, i, f, o <-> torch's blocks i, f, g, o.
_TORCH_GATES = [1, 2, 0, 3]  # the Chainer gate of each torch block
_CHAINER_GATES = [2, 0, 1, 3]  # the torch block of each Chainer gate


def _to_torch_gates(w):
    """Chainer (4H, ...) interleaved gate rows -> torch's gate blocks."""
    n = w.shape[0] // 4
    blocks = w.reshape(n, 4, -1)[:, _TORCH_GATES].transpose(1, 0, 2)
    return blocks.reshape(w.shape)


def _to_chainer_gates(w):
    """The inverse of ``_to_torch_gates``, for a torch tensor."""
    n = w.shape[0] // 4
    rows = w.detach().reshape(4, n, -1)[_CHAINER_GATES].transpose(0, 1)
    return rows.reshape(w.shape)


def _torch_lstm(torch, model):
    """``LSTMClassifier`` as an ``nn.LSTMCell`` loop; the cell's
    ``bias_hh`` is zero and frozen, as Chainer's lateral has no bias."""
    link = model.lstm
    n_in, n = link.upward.W.shape[1], link.state_size
    cell = torch.nn.LSTMCell(n_in, n)
    _set(cell.weight_ih, _to_torch_gates(link.upward.W.array))
    _set(cell.bias_ih, _to_torch_gates(link.upward.b.array))
    _set(cell.weight_hh, _to_torch_gates(link.lateral.W.array))
    _set(cell.bias_hh, numpy.zeros(4 * n))
    cell.bias_hh.requires_grad_(False)
    out = _torch_linear(model.out)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell, self.out = cell, out

        def forward(self, xs):
            state = None
            for x in xs:
                state = self.cell(x, state)
            return self.out(state[0])

    return Net()


def lstm_inference_torch(model, xs):
    """``LSTMClassifier`` twin over ``xs`` (T, B, n_in)."""
    torch = _torch()
    if torch is None:
        return None
    return _torch_inference(torch, _torch_lstm(torch, model), xs)


def lstm_training_torch(model, xs, t, lr):
    """One SGD step (BPTT) of the LSTM twin; returns the loss."""
    torch = _torch()
    if torch is None:
        return None
    net = _torch_lstm(torch, model)
    cell = net.cell
    parameters = [cell.weight_ih, cell.bias_ih, cell.weight_hh,
                  net.out.weight, net.out.bias]

    def export():
        params = {'lstm/upward/W': _to_chainer_gates(cell.weight_ih),
                  'lstm/upward/b': _to_chainer_gates(cell.bias_ih),
                  'lstm/lateral/W': _to_chainer_gates(cell.weight_hh)}
        params.update(_linear_params(net.out, 'out'))
        return params

    return _torch_training(torch, net, parameters, xs, t, lr, export)


def _torch_conv_bn(torch, conv, bn):
    out_c, in_c, kh, kw = conv.W.shape
    layer = torch.nn.Conv2d(in_c, out_c, (kh, kw), stride=conv.stride,
                            padding=conv.pad)
    _set(layer.weight, conv.W.array)
    _set(layer.bias, conv.b.array)
    norm = torch.nn.BatchNorm2d(out_c, eps=bn.eps)
    _set(norm.weight, bn.gamma.array)
    _set(norm.bias, bn.beta.array)
    _set(norm.running_mean, bn.avg_mean)
    _set(norm.running_var, bn.avg_var)
    # ceil_mode pools a ragged edge, like Chainer's cover_all.
    return [layer, norm, torch.nn.ReLU(),
            torch.nn.MaxPool2d(2, ceil_mode=True)]


def _torch_lenet(torch, model):
    return torch.nn.Sequential(
        *_torch_conv_bn(torch, model.conv1, model.bn1),
        *_torch_conv_bn(torch, model.conv2, model.bn2),
        torch.nn.Flatten(),
        _torch_linear(model.fc1), torch.nn.ReLU(),
        _torch_linear(model.fc2), torch.nn.ReLU(),
        _torch_linear(model.fc3))


def lenet_inference_torch(model, x):
    """LeNet in eval mode (batch normalization with running stats);
    ``model`` must have been called once so that fc1 is initialized."""
    torch = _torch()
    if torch is None:
        return None
    return _torch_inference(torch, _torch_lenet(torch, model), x)


def lenet_training_torch(model, x, t, lr):
    """One SGD step of LeNet in training mode (batch statistics; the
    running averages decay as Chainer's do)."""
    torch = _torch()
    if torch is None:
        return None
    net = _torch_lenet(torch, model)
    for bn, norm in ((model.bn1, net[1]), (model.bn2, net[5])):
        norm.momentum = 1 - bn.decay

    def export():
        params = {}
        for name, i in (('conv1', 0), ('conv2', 4)):
            params.update(_linear_params(net[i], name))
        for name, i in (('bn1', 1), ('bn2', 5)):
            params[name + '/gamma'] = net[i].weight.detach()
            params[name + '/beta'] = net[i].bias.detach()
        for name, i in (('fc1', 9), ('fc2', 11), ('fc3', 13)):
            params.update(_linear_params(net[i], name))
        return params

    return _torch_training(torch, net, net.parameters(), x, t, lr, export)


def _copy_layer_norm(norm, link):
    norm.eps = link.eps
    _set(norm.weight, link.gamma.array)
    _set(norm.bias, link.beta.array)


def encoder_inference_torch(model, x):
    """``EncoderBlock`` as a post-norm ``nn.TransformerEncoderLayer``
    (relu, no dropout); its qkv and output projections are laid out
    like Chainer's."""
    torch = _torch()
    if torch is None:
        return None
    d = model.qkv.W.shape[1]
    layer = torch.nn.TransformerEncoderLayer(
        d, model.n_heads, dim_feedforward=model.ff1.W.shape[0],
        dropout=0.0, activation='relu', layer_norm_eps=model.ln1.eps,
        batch_first=True)
    attention = layer.self_attn
    _set(attention.in_proj_weight, model.qkv.W.array)
    _set(attention.in_proj_bias, model.qkv.b.array)
    _copy_linear(attention.out_proj, model.out)
    _copy_linear(layer.linear1, model.ff1)
    _copy_linear(layer.linear2, model.ff2)
    _copy_layer_norm(layer.norm1, model.ln1)
    _copy_layer_norm(layer.norm2, model.ln2)
    return _torch_inference(torch, layer, x)
