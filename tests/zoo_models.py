"""The models of the zoo, and the makers of their input signatures: Chains
and Functions written as users write them, and functions that ``Seq``
applies as a model's forward. ``tests/zoo_cases.py`` builds its cases
from them; ``test_zoo_training.py`` also uses some directly."""

import itertools

import chainer
import chainer.functions as F
from chainer.functions.pooling import max_pooling_nd
import chainer.links as L
import numpy


f32 = numpy.float32


def _rand(rng, *shape, **kw):
    dtype = kw.pop('dtype', f32)
    return rng.uniform(-1, 1, shape).astype(dtype)


class Seq(chainer.Chain):
    """``forward`` applies ``fn(self, *args)``; links as keyword args."""

    def __init__(self, fn, **links):
        super(Seq, self).__init__()
        self.fn = fn
        with self.init_scope():
            for name, link in links.items():
                setattr(self, name, link)

    def forward(self, *args, **kwargs):
        return self.fn(self, *args, **kwargs)


def seq(fn, **links):
    return lambda: Seq(fn, **links)


def one(*shape, **kw):
    """A signature of one array argument with the given shape."""
    return lambda rng: (_rand(rng, *shape, **kw),)


def _bn_randomized(size, **kw):
    bn = L.BatchNormalization(size, **kw)
    r = numpy.random.RandomState(7)
    bn.avg_mean[...] = r.randn(size)
    bn.avg_var[...] = r.uniform(0.5, 2, size)
    bn.gamma.array[...] = r.uniform(0.5, 2, size)
    bn.beta.array[...] = r.randn(size)
    return bn


class ResBlock(chainer.Chain):
    def __init__(self, ch=4):
        super(ResBlock, self).__init__()
        with self.init_scope():
            self.c1 = L.Convolution2D(ch, ch, 3, pad=1, nobias=True)
            self.b1 = _bn_randomized(ch)
            self.c2 = L.Convolution2D(ch, ch, 3, pad=1, nobias=True)
            self.b2 = _bn_randomized(ch)

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)))
        h = self.b2(self.c2(h))
        return F.relu(h + x)


class VGG(chainer.Chain):
    def __init__(self):
        super(VGG, self).__init__()
        with self.init_scope():
            self.c1 = L.Convolution2D(None, 4, 3, pad=1)
            self.c2 = L.Convolution2D(4, 4, 3, pad=1)
            self.c3 = L.Convolution2D(4, 8, 3, pad=1)
            self.fc = L.Linear(None, 5)

    def forward(self, x):
        h = F.relu(self.c2(F.relu(self.c1(x))))
        h = F.max_pooling_2d(h, 2)
        h = F.relu(self.c3(h))
        h = F.average_pooling_2d(h, 2)
        return F.log_softmax(self.fc(h))


class Attention(chainer.Chain):
    def __init__(self, d=6):
        super(Attention, self).__init__()
        with self.init_scope():
            self.q = L.Linear(d, d)
            self.k = L.Linear(d, d)
            self.v = L.Linear(d, d)

    def forward(self, x, lengths):
        b, t, d = x.shape
        q = self.q(x, n_batch_axes=2)
        k = self.k(x, n_batch_axes=2)
        v = self.v(x, n_batch_axes=2)
        s = F.matmul(q, k, transb=True) / numpy.sqrt(d)
        xp = chainer.backend.get_array_module(x)
        valid = xp.arange(t)[None, :] < lengths[:, None]
        mask = xp.broadcast_to(valid[:, None, :], s.shape)
        s = F.where(mask, s, xp.full(s.shape, -1e9, s.dtype))
        a = F.softmax(s, axis=2)
        return F.matmul(a, v), a


class DictOut(chainer.Chain):
    def __init__(self):
        super(DictOut, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 2)

    def forward(self, xs, scale=2.0):
        hs = [self.fc(x) * scale for x in xs]
        total = hs[0]
        for h in hs[1:]:
            total = total + h
        return {'y': total, 'n': len(xs), 'shape': xs[0].shape,
                'parts': tuple(hs), 'name': 'dict-out', 'none': None}


class ShapeUser(chainer.Chain):
    def __init__(self):
        super(ShapeUser, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(None, 3)

    def forward(self, x):
        n, c = x.shape[:2]
        h = F.reshape(x, (n, -1))
        h = self.fc(h)
        h = h * (1.0 / c) + x.shape[2]
        return F.broadcast_to(F.sum(h, axis=0, keepdims=True), (n, 3)), n


class ListLoop(chainer.Chain):
    def __init__(self):
        super(ListLoop, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 4)

    def forward(self, xs):
        outs = []
        h = None
        for i, x in enumerate(xs):
            y = F.tanh(self.fc(x))
            h = y if h is None else h * 0.5 + y
            outs.append(h * (i + 1))
        return outs, len(xs)


class StatefulLSTM(chainer.Chain):
    def __init__(self):
        super(StatefulLSTM, self).__init__()
        with self.init_scope():
            self.embed = L.Linear(3, 4)
            self.lstm = L.LSTM(4, 5)
            self.out = L.Linear(5, 2)

    def reset_state(self):
        self.lstm.reset_state()

    def forward(self, x):
        return self.out(self.lstm(F.relu(self.embed(x))))


class GRUModel(chainer.Chain):
    def __init__(self):
        super(GRUModel, self).__init__()
        with self.init_scope():
            self.gru = L.StatefulGRU(3, 4)

    def reset_state(self):
        self.gru.reset_state()

    def forward(self, x):
        return self.gru(x)


def _reset_every(k):
    def hook(model, s, i):
        if i == k or i == 2:
            model.reset_state()
    return hook


def _stateful_sigs(batch):
    return lambda rng: (_rand(rng, batch, 3),)


class NStep(chainer.Chain):
    def __init__(self, cls, *args, **kwargs):
        super(NStep, self).__init__()
        self.lstm_like = cls in (L.NStepLSTM, L.NStepBiLSTM)
        with self.init_scope():
            self.rnn = cls(*args, **kwargs)

    def forward(self, xs):
        if self.lstm_like:
            hy, cy, ys = self.rnn(None, None, xs)
            return hy, cy, ys
        hy, ys = self.rnn(None, xs)
        return hy, ys


def _seqs(*lengths):
    return lambda rng: ([_rand(rng, n, 3) for n in lengths],)


class Counter(chainer.Chain):
    """Python state updated by the forward."""

    def __init__(self):
        super(Counter, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.add_persistent('calls', 0)
        self.last = None
        self.last_batch = None

    def forward(self, x):
        self.calls += 1
        h = self.fc(x)
        self.last = h
        self.last_batch = x.shape[0]
        chainer.report({'mean': F.mean(h), 'calls': self.calls}, self)
        return h * self.calls


class Reporter(chainer.Chain):
    def __init__(self):
        super(Reporter, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.last = None
        self.last_batch = None

    def forward(self, x):
        h = self.fc(x)
        self.last = h
        self.last_batch = x.shape[0]
        chainer.report({'mean': F.mean(h), 'max': F.max(h)}, self)
        chainer.report({'n': x.shape[0]}, self.fc)
        return h


class Accumulator(chainer.Chain):
    """An array persistent changed in place by NumPy."""

    def __init__(self):
        super(Accumulator, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.add_persistent('total', numpy.zeros(3, f32))

    def forward(self, x):
        h = self.fc(x)
        self.total += h.array.sum(axis=0)
        return h


class History(chainer.Chain):
    """A Python list attribute appended to by the forward."""

    def __init__(self):
        super(History, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.history = []

    def forward(self, x):
        h = self.fc(x)
        self.history.append(h)
        return h


class AccumulateNode(chainer.FunctionNode):
    """A user FunctionNode updating a running buffer in place."""

    def __init__(self, buf, decay):
        self.buf = buf
        self.decay = decay

    def forward(self, inputs):
        x, = inputs
        self.buf *= self.decay
        self.buf += (1 - self.decay) * x.mean(axis=0)
        return x - self.buf,


class RunningCenter(chainer.Chain):
    def __init__(self):
        super(RunningCenter, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.add_persistent('buf', numpy.zeros(3, f32))

    def forward(self, x):
        h = self.fc(x)
        y, = AccumulateNode(self.buf, 0.9).apply((h,))
        return y


class OldScale(chainer.Function):
    def __init__(self, k):
        self.k = k

    def forward(self, inputs):
        return inputs[0] * self.k + inputs[1],


class OldStyle(chainer.Chain):
    def __init__(self):
        super(OldStyle, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)

    def forward(self, x, k=2.0):
        h = self.fc(x)
        return OldScale(k)(h, F.tanh(h))


class Noisy(chainer.Chain):
    def __init__(self):
        super(Noisy, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 4)

    def forward(self, x):
        noise = numpy.random.uniform(-1, 1, x.shape).astype(x.dtype)
        return self.fc(x + noise)


class Embed(chainer.Chain):
    def __init__(self):
        super(Embed, self).__init__()
        with self.init_scope():
            self.e = L.EmbedID(7, 3, ignore_label=-1)
            self.fc = L.Linear(3, 2)

    def forward(self, ids):
        h = self.e(ids)
        return self.fc(F.sum(h, axis=1))


def _ids(*shape):
    return lambda rng: (rng.randint(-1, 7, shape).astype(numpy.int32),)


def _classifier():
    return L.Classifier(L.Linear(4, 3))


def _labels(batch):
    return lambda rng: (_rand(rng, batch, 4),
                        rng.randint(0, 3, batch).astype(numpy.int32))


def _typed(dtype, build):
    def make():
        with chainer.using_config('dtype', dtype):
            return build()
    return make


def _mlp():
    return chainer.Sequential(L.Linear(4, 5), F.relu, L.Linear(5, 2))


class Chains(chainer.ChainList):
    def __init__(self):
        super(Chains, self).__init__(
            L.Linear(4, 4), L.Linear(4, 4), L.Linear(4, 2))

    def forward(self, x):
        for link in self[:-1]:
            x = F.leaky_relu(link(x), slope=0.1)
        return self[-1](x)


def _grab_bag(m, x):
    """Many chainer.functions, one after the other."""
    a, b = F.split_axis(x, [1], axis=1)
    h = F.concat([F.sigmoid(a), F.tanh(b), F.elu(b)], axis=1)
    h = F.pad(h, ((0, 0), (0, 0), (1, 1), (1, 1)), 'constant')
    h = F.local_response_normalization(h, n=3)
    h = F.unpooling_2d(F.max_pooling_2d(h, 2), 2, outsize=h.shape[2:])
    h = F.space2depth(F.depth2space(F.tile(h, (1, 4, 1, 1)), 2), 2)
    h = F.transpose(h, (0, 2, 3, 1))
    h = F.flip(F.swapaxes(h, 1, 2), 3)
    h = F.clip(h, -0.5, 0.7) + F.softplus(h) * F.absolute(h)
    h = h[:, 1:, ::2] * 2 - F.expand_dims(F.max(h, axis=(1, 2)), 1)[
        :, :, None]
    s = F.stack([F.logsumexp(h, axis=3), F.mean(h, axis=3)], axis=0)
    return (F.squeeze(F.sum(s, axis=(2, 3), keepdims=True), (2, 3)),
            F.cumsum(h, axis=1), F.argmax(h, axis=3), F.tile(h[:, :1], 2))


def _matmuls(m, a, b):
    p = F.batch_matmul(a, b, transb=True)
    q = F.matmul(a, b, transb=True)
    r = F.einsum('bij,bkj->bik', a, b) if hasattr(F, 'einsum') else p
    return p - q, r, F.linear(a.reshape(-1, a.shape[-1]), b[0])


def _losses(m, x, t):
    return (F.softmax_cross_entropy(x, t),
            F.softmax_cross_entropy(x, t, reduce='no'),
            F.accuracy(x, t),
            F.sigmoid_cross_entropy(x, (t[:, None] > 0).astype(
                numpy.int32).repeat(x.shape[1], 1)),
            F.mean_squared_error(x, F.softmax(x)),
            F.select_item(x, F.where(t >= 0, t, numpy.zeros_like(t))))


def _ce_sigs(batch):
    def make(rng):
        t = rng.randint(-1, 4, batch).astype(numpy.int32)
        return _rand(rng, batch, 4), t
    return make


def _pooling_nd(m, x):
    return (F.max_pooling_nd(x, 2), F.average_pooling_nd(x, 2),
            F.max_pooling_2d(x[:, :, 0], 3, stride=2, cover_all=True))


def _ids_seq(values):
    values = itertools.cycle(values)  # each test that runs the case
    return lambda rng: (numpy.array(next(values), numpy.int32),)


def _labels_seq(values):
    values = itertools.cycle(values)
    return lambda rng: (_rand(rng, 2, 4),
                        numpy.array(next(values), numpy.int32))


def _ce(m, x, t):
    return F.softmax_cross_entropy(x, t), F.select_item(
        x, F.where(t >= 0, t, numpy.zeros_like(t)))


def _unpool_with_indexes(m, x):
    p = F.max_pooling_2d(x, 2, return_indices=True)
    y, idx = p
    up = F.upsampling_2d(y * 2, idx, 2, outsize=x.shape[2:])
    node = max_pooling_nd.MaxPoolingND(2, 2)
    z, = node.apply((x * -1,))
    up2 = F.upsampling_2d(z, node.indexes, 2, outsize=x.shape[2:])
    return up, up2, idx


def _data_if(m, x):
    h = m.fc(x)
    if (h.array > 0).sum() > 3:
        h = h * 2
    return h, float(h.array.max())


def _perturb(m, s, i):
    m.fc.W.array *= 0.9
    m.fc.b.array = m.fc.b.array + 1


def _replace_link(m, s, i):
    if i:
        return
    del m.fc
    with m.init_scope():
        m.fc = L.Linear(3, 3, initialW=numpy.full((3, 3), i + 1, f32),
                        nobias=bool(i % 2))


def _bn_flag(m, x, train):
    with chainer.using_config('train', train):
        return m.bn(x)


def _aliasing(m, x, y):
    h = m.fc(x)
    return h, h, x, m.fc.W, [h, (y, 1)], None


def _in_place(m, x):
    h = m.fc(x)
    h.array[...] = numpy.maximum(h.array, 0)
    return h * 2


def _bad_shape(m, x):
    return m.fc(x)


def _ported_numpy(m, x):
    x = chainer.as_variable(x)
    a = numpy.abs(x.array) + 1
    h = m.fc(F.log(a)) * numpy.float32(2)
    z = numpy.where(x.array > 0, x.array, 0)
    return h + m.fc(z), x.array.T.copy()


class Slope(chainer.Chain):
    def __init__(self):
        super(Slope, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.slope = 0.2

    def forward(self, x):
        return F.leaky_relu(self.fc(x), slope=self.slope)
