"""Reference models shared by the examples, benchmarks and tests.

They are plain :class:`chainer.Chain` classes with an undecorated
``forward``, so a caller chooses whether to wrap it::

    model = LeNet()
    model.forward = chainerjit.jit(model.forward)
"""

import math

import chainer
import chainer.functions as F
import chainer.links as L
import numpy


class MLP(chainer.Chain):
    """A multi-layer perceptron: Linear-relu-Linear-relu-Linear."""

    def __init__(self, n_in=784, n_hidden=100, n_out=10):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(n_in, n_hidden)
            self.l2 = L.Linear(n_hidden, n_hidden)
            self.l3 = L.Linear(n_hidden, n_out)

    def forward(self, x):
        """Returns the logits for ``x`` of shape ``(N, n_in)``."""
        h = F.relu(self.l1(x))
        h = F.relu(self.l2(h))
        return self.l3(h)


class LeNet(chainer.Chain):
    """A LeNet-5 style convolutional network with batch normalization.

    Two blocks of 5x5 convolution (padded, so the size is kept),
    batch normalization, relu and 2x2 max pooling, then three fully
    connected layers. The first Linear infers its input size, so the
    model works on 28x28 (MNIST) and on 8x8 (scikit-learn digits)
    images alike.
    """

    def __init__(self, n_out=10, in_channels=1):
        super(LeNet, self).__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(in_channels, 6, 5, pad=2)
            self.bn1 = L.BatchNormalization(6)
            self.conv2 = L.Convolution2D(6, 16, 5, pad=2)
            self.bn2 = L.BatchNormalization(16)
            self.fc1 = L.Linear(None, 120)
            self.fc2 = L.Linear(120, 84)
            self.fc3 = L.Linear(84, n_out)

    def forward(self, x):
        """Returns the logits for images ``x`` of shape ``(N, C, H, W)``."""
        h = F.max_pooling_2d(F.relu(self.bn1(self.conv1(x))), 2)
        h = F.max_pooling_2d(F.relu(self.bn2(self.conv2(h))), 2)
        h = F.relu(self.fc1(h))
        h = F.relu(self.fc2(h))
        return self.fc3(h)


class LSTMClassifier(chainer.Chain):
    """``L.LSTM`` over the time steps of ``xs`` (T, N, n_in) in a Python
    loop, and a classifier on the last state."""

    def __init__(self, n_in=64, n_hidden=128, n_out=10):
        super(LSTMClassifier, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(n_in, n_hidden)
            self.out = L.Linear(n_hidden, n_out)

    def forward(self, xs):
        self.lstm.reset_state()
        for t in range(xs.shape[0]):
            h = self.lstm(xs[t])
        return self.out(h)


class ListLSTMClassifier(LSTMClassifier):
    """:class:`LSTMClassifier` over a Python list of T arrays (N, n_in),
    as much Chainer code passes sequences."""

    def forward(self, xs):
        self.lstm.reset_state()
        for x in xs:
            h = self.lstm(x)
        return self.out(h)


class EncoderBlock(chainer.Chain):
    """A transformer encoder block: multi-head self-attention and a
    feed-forward network, each with a residual and layer normalization."""

    def __init__(self, d_model=16, n_heads=4, d_ff=32):
        super(EncoderBlock, self).__init__()
        self.n_heads = n_heads
        with self.init_scope():
            self.qkv = L.Linear(d_model, 3 * d_model)
            self.out = L.Linear(d_model, d_model)
            self.ln1 = L.LayerNormalization(d_model)
            self.ff1 = L.Linear(d_model, d_ff)
            self.ff2 = L.Linear(d_ff, d_model)
            self.ln2 = L.LayerNormalization(d_model)

    def _split_heads(self, t, batch, length):
        d_head = t.shape[1] // self.n_heads
        t = F.reshape(t, (batch, length, self.n_heads, d_head))
        return F.reshape(F.transpose(t, (0, 2, 1, 3)),
                         (batch * self.n_heads, length, d_head))

    def forward(self, x, mask=None):
        batch, length, d_model = x.shape
        h = F.reshape(x, (batch * length, d_model))
        q, k, v = F.split_axis(self.qkv(h), 3, axis=1)
        q, k, v = (self._split_heads(t, batch, length) for t in (q, k, v))
        scores = F.matmul(q, k, transb=True) * (
            1.0 / math.sqrt(d_model // self.n_heads))
        if mask is not None:
            mask = chainer.Variable(mask)[:, None, None, :]
            mask = F.broadcast_to(mask, (batch, self.n_heads, length,
                                         length))
            scores = F.where(F.reshape(mask, scores.shape).array, scores,
                             numpy.full(scores.shape, -1e9, scores.dtype))
        attention = F.softmax(scores, axis=2)
        o = F.matmul(attention, v)
        o = F.transpose(F.reshape(o, (batch, self.n_heads, length, -1)),
                        (0, 2, 1, 3))
        o = F.reshape(o, (batch * length, d_model))
        h = self.ln1(h + self.out(o))
        h = self.ln2(h + self.ff2(F.relu(self.ff1(h))))
        return F.reshape(h, (batch, length, d_model))
