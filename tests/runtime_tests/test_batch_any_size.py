"""Programs the VM runs at any batch size (``runtime.batch.rows_batched``):
a call that misses only for its batch size is compiled once more with the
batch symbolic, in training and inference, and that entry serves every
batch size with values and gradients equal to eager's; where it cannot, a
warning names the op or the use that keeps the size in the key."""

import copy
import math
import warnings

import chainer
import chainer.distributions as D
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from tests import differential

F32 = numpy.float32
BATCHES = (3, 8, 17, 30, 8, 5, 17)


class _Classifier(chainer.Chain):
    """An MLP's loss and accuracy, as ``L.Classifier`` computes them."""

    ratio = 0.0  # dropout's

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(12, 16)
            self.l2 = L.Linear(16, 4)

    def forward(self, x, t):
        h = F.relu(self.l1(x))
        y = self.l2(F.dropout(h, self.ratio) if self.ratio else h)
        return F.softmax_cross_entropy(y, t), F.accuracy(y, t)


class _ConvNet(chainer.Chain):
    """Convolutions, pooling of both kinds, a reshape keeping the images
    and a linear layer over the flattened maps."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.c1 = L.Convolution2D(3, 4, 3, pad=1)
            self.c2 = L.Convolution2D(4, 4, 3, pad=1, groups=2)
            self.fc = L.Linear(4 * 4 * 4, 4)

    def forward(self, x, t):
        h = F.max_pooling_2d(F.relu(self.c1(x)), 2)
        h = F.average_pooling_2d(F.leaky_relu(self.c2(h)), 2)
        h = F.reshape(h, (-1, 4 * 4 * 4))
        return F.softmax_cross_entropy(self.fc(h), t)


class _Distilled(_ConvNet):
    """AlexNet's local response normalization, scored against soft
    targets (a teacher's softmax, in both of Chainer's losses), and
    gated by a cumulative product over the classes."""

    def forward(self, x, t):
        h = F.local_response_normalization(F.relu(self.c1(x)))
        h = F.average_pooling_2d(F.relu(self.c2(h)), 4)
        y = self.fc(F.reshape(h, (len(x), -1)))
        soft = F.softmax(2 * y).array
        gated = y * F.cumprod(F.sigmoid(y), axis=1)
        return F.softmax_cross_entropy(y, soft) + F.softmax_cross_entropy(
            gated, soft, soft_target_loss='kl-divergence') + F.mean(
            F.softmax_cross_entropy(y, soft, reduce='no'))


class _VolumesAndSignals(chainer.Chain):
    """N-dimensional convolutions: of signals (``L.Convolution1D``) and
    of volumes (``L.Convolution3D``, strided)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.c1 = L.Convolution1D(3, 4, 3, pad=1)
            self.c3 = L.Convolution3D(1, 2, 3, stride=2, pad=1)
            self.fc = L.Linear(4 * 16 + 2 * 2 * 2 * 8, 4)

    def forward(self, x, t):
        signals = F.relu(self.c1(x[:, :, 0]))
        volumes = F.relu(self.c3(F.expand_dims(x[:, :, :4], 1)))
        h = F.concat([F.reshape(signals, (len(x), -1)),
                      F.reshape(volumes, (len(x), -1))], axis=1)
        return F.softmax_cross_entropy(self.fc(h), t)


class _PooledSignals(_VolumesAndSignals):
    """Signals pooled by ``F.average_pooling_1d`` (Chainer's
    ``AveragePoolingND``, with and without counting the padding) and
    summed along their positions by ``F.cumsum``."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.pooled_fc = L.Linear(4 * 8, 4)

    def forward(self, x, t):
        signals = F.relu(self.c1(x[:, :, 0]))
        pooled = F.average_pooling_1d(signals, 2) + F.average_pooling_1d(
            signals, 3, 2, 1, pad_value=None)
        h = F.reshape(F.cumsum(pooled, axis=2), (len(x), -1))
        return F.softmax_cross_entropy(self.pooled_fc(h), t)


class _Branches(chainer.Chain):
    """Element-wise arithmetic with broadcasting, slices of the features,
    a join side by side and sums over the features."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(12, 16)
            self.l2 = L.Linear(16, 4)
            self.scale = chainer.Parameter(numpy.linspace(
                0.5, 1.5, 16).astype(F32))

    def forward(self, x, t):
        h = self.l1(x)
        g = F.tanh(h) * self.scale + F.sigmoid(h) * 2.0 - F.exp(-abs(h))
        g = F.concat([g[:, :8], F.softmax(h)[:, 8:]], axis=1)
        g = g + F.broadcast_to(F.sum(g, axis=1, keepdims=True), g.shape)
        return F.softmax_cross_entropy(self.l2(g), t) + \
            F.mean(F.sum(h * h, axis=1))


class _BagOfWords(chainer.Chain):
    """Token ids embedded and summed over each row's words."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 8)
            self.fc = L.Linear(8, 4)

    def forward(self, x, t):
        return F.softmax_cross_entropy(self.fc(F.sum(self.embed(x),
                                                     axis=1)), t)


class _TextCNN(chainer.Chain):
    """A convolution over each row's embedded words, its maximum over the
    words (``F.max``), as Chainer's text classification CNN encoder."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 8)
            self.conv = L.Convolution2D(1, 5, (3, 8), pad=(1, 0))
            self.fc = L.Linear(5, 4)

    def forward(self, x, t):
        h = F.relu(self.conv(F.expand_dims(self.embed(x), 1)))
        return F.softmax_cross_entropy(self.fc(F.max(h, axis=2)), t)


class _Losses(chainer.Chain):
    """Losses over the batch: squared and absolute errors, sigmoid cross
    entropy, as a mean and per element."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(12, 4)

    def forward(self, x, t):
        y = self.l1(x)
        per_element = F.sigmoid_cross_entropy(y, t, reduce='no')
        return F.mean_squared_error(y, x[:, :4]) + \
            F.mean_absolute_error(y, x[:, 4:8]) + \
            F.sigmoid_cross_entropy(y, t) + F.mean(per_element * y)


class _RowWise(_Losses):
    """Ops of each row: a loss summed over the batch and divided by its
    size (``normalize=False``), an item picked, a row normalized, a row's
    squared norm."""

    def forward(self, x, t):
        y = self.l1(x)
        return F.softmax_cross_entropy(y, t, normalize=False) + F.sum(
            F.select_item(F.normalize(y), t) *
            F.batch_l2_norm_squared(y))


class _ReshapedByNumPy(_Losses):
    """NumPy's reshape of an argument to its rows, ``x.reshape(len(x),
    -1)``, and to the batch size read once (``B = x.shape[0]``)."""

    def forward(self, x, t):
        B = x.shape[0]
        y = self.l1(x.reshape(len(x), -1)) + self.l1((x * 2).reshape(B, 12))
        return F.softmax_cross_entropy(y, t)


class _LabelsFlattened(_Losses):
    """Labels flattened by NumPy (``t.ravel()``, ``t.flatten()``,
    ``numpy.ravel(t)``) against the scores flattened."""

    def forward(self, x, t):
        labels = chainer.as_array(t)
        y = F.reshape(self.l1(x), (-1,))
        return F.sigmoid_cross_entropy(y, labels.ravel()) + \
            F.sigmoid_cross_entropy(y, labels.flatten()) + \
            F.sigmoid_cross_entropy(y, numpy.ravel(labels))


class _FeaturesSideBySide(_Losses):
    """Features joined beside the batch's rows by ``F.hstack`` and
    ``F.dstack``."""

    def forward(self, x, t):
        y = self.l1(x)
        both = F.hstack([y, F.tanh(y)])
        deep = F.dstack([F.expand_dims(y, 2), F.expand_dims(y * y, 2)])
        return F.softmax_cross_entropy(both[:, :4] + F.sum(deep, axis=2), t)


class _SizedAtTheFirstCall(_Losses):
    """A link whose weight is made at its first call (``L.Linear(None,
    4)``): the recording of that call is the program's. (A constant
    weight: the eager twin makes its own.)"""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l2 = L.Linear(None, 4,
                               initialW=chainer.initializers.Constant(0.1))

    def forward(self, x, t):
        return F.softmax_cross_entropy(self.l2(F.tanh(self.l1(x))), t)


class _MaskedForEachHead(_Losses):
    """Two heads merged with the batch (``(B * 2, 4)``), each masked by
    its row's mask repeated by NumPy (``numpy.repeat(m, 2, axis=0)``, as
    multi-head attention repeats a padding mask); each row repeated by
    ``F.repeat``."""

    def forward(self, x, t):
        y = self.l1(x)
        heads = F.reshape(F.concat([y, y * 2], axis=1), (-1, 4))
        mask = numpy.repeat(chainer.as_array(x)[:, :4] > 0, 2, axis=0)
        h = F.reshape(F.where(mask, heads, -heads), (-1, 8))
        twice = F.reshape(F.repeat(y, 2, axis=0), (-1, 8))
        return F.softmax_cross_entropy(h[:, :4] + h[:, 4:] + twice[:, 4:], t)


class _TiledBias(_Losses):
    """A learned row tiled to the batch and along its features at once
    (``F.tile(self.b, (len(x), 2))``), then cut in halves."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.b = chainer.Parameter(
                numpy.linspace(-1, 1, 4, dtype=F32)[None])

    def forward(self, x, t):
        tiled = F.tile(self.b, (len(x), 2))
        y = self.l1(x) + tiled[:, :4] * tiled[:, 4:]
        return F.sigmoid_cross_entropy(y, t) + F.sum(tiled) / 8


class _Hinged(_Classifier):
    """``F.hinge``, whose Chainer backward divides its gradient in place
    by the batch size."""

    def forward(self, x, t):
        return F.hinge(self.l2(F.relu(self.l1(x))), t)


class _BiasedAndScaled(chainer.Chain):
    """``L.Bias`` and ``L.Scale`` (Caffe's layers, a tied language
    model's output bias): their parameters broadcast to the batch."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(12, 6, nobias=True)
            self.bias = L.Bias(shape=(6,))
            self.scale = L.Scale(W_shape=(6,), bias_term=True)

    def forward(self, x, t):
        h = self.scale(F.tanh(self.bias(self.l1(x))))
        return F.softmax_cross_entropy(h[:, :4], t) + F.sum(
            F.scale(h, self.bias.b, axis=1))


class _DiscriminatorLoss(chainer.Chain):
    """DCGAN's loss: a linear layer flattening images (its input reshaped
    by Chainer, ``x.reshape(len(x), -1)``), summed and divided by the
    length of its output."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(3 * 16 * 16, 1)

    def forward(self, x, t):
        y = self.l1(x)
        return F.sum(F.softplus(-y)) / len(y) + F.sum(y * t[:, None]) / 4


class _UnusedAverage(_Classifier):
    """A division of a float by the batch size on a line that does not
    run (``average`` off): it uses no size."""

    average = False

    def forward(self, x, t):
        y = self.l2(F.relu(self.l1(x)))
        if not self.average:
            return F.softmax_cross_entropy(y, t)
        return F.sum(y) * (1.0 / len(x))


def _binary_labels(rng, batch):
    return (rng.randn(batch, 12).astype(F32),
            rng.randint(0, 2, (batch, 4)).astype(numpy.int32))


def _features(rng, batch):
    return (rng.randn(batch, 12).astype(F32),
            rng.randint(0, 4, batch).astype(numpy.int32))


def _images(rng, batch):
    return (rng.randn(batch, 3, 16, 16).astype(F32),
            rng.randint(0, 4, batch).astype(numpy.int32))


def _words(rng, batch):
    return (rng.randint(0, 30, (batch, 6)).astype(numpy.int32),
            rng.randint(0, 4, batch).astype(numpy.int32))


def _model(cls):
    numpy.random.seed(0)
    return cls()


def _calls(make, batches=BATCHES):
    rng = numpy.random.RandomState(0)
    return [make(rng, batch) for batch in batches]


def _recompile_warnings(jitted, calls, eager=None):
    """Calls ``jitted`` on each argument tuple (comparing with ``eager``'s
    results, if given); the messages of the ``RecompileWarning`` raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for args in calls:
            result = jitted(*args)
            if eager is not None:
                testing.assert_results_equal(result, eager(*args))
    return [str(w.message) for w in caught
            if issubclass(w.category, errors.RecompileWarning)]


@pytest.fixture
def fresh_warnings(monkeypatch):
    """Warnings warned once by the function's name warn again."""
    monkeypatch.setattr(errors, '_warned', set())


class _Centered(_Classifier):
    """The hidden features centered and scaled over the batch by hand,
    broadcast back to their shape (``F.broadcast_to(m, h.shape)``)."""

    def forward(self, x, t):
        h = F.relu(self.l1(x))
        mean = F.broadcast_to(F.mean(h, axis=0), h.shape)
        scale = F.broadcast_to(F.sqrt(F.mean((h - mean) ** 2, axis=0,
                                             keepdims=True) + 1e-5),
                               h.shape)
        y = self.l2((h - mean) / scale)
        return F.softmax_cross_entropy(y, t), F.accuracy(y, t)


class _PairsLogSumExp(_Classifier):
    """Scores of each pair of classes, as a CRF's step has them, reduced
    by ``F.logsumexp`` over one axis, then over all."""

    def forward(self, x, t):
        y = self.l2(F.relu(self.l1(x)))
        pairs = F.matmul(F.expand_dims(y, 2), F.expand_dims(y, 1))
        z = F.logsumexp(pairs, axis=1)
        return F.softmax_cross_entropy(z, t) + F.logsumexp(z) * 0.1


class _QLearning(_Classifier):
    """A DQN's step: the value of the action taken (``F.select_item``),
    its target from a second pass without gradients, scored by
    ``F.huber_loss`` per row, and summed along the actions."""

    def forward(self, x, t):
        q = self.l2(F.relu(self.l1(x)))
        with chainer.no_backprop_mode():
            best = F.max(self.l2(F.relu(self.l1(x * 0.5))), axis=1).array
        taken = F.select_item(q, t)
        return F.mean(F.huber_loss(taken, 0.9 * best, 1.0, reduce='no')) + \
            F.mean(F.huber_loss(q, q.array * 0.5, 0.5))


MODELS = [(_Classifier, _features), (_ConvNet, _images),
          (_VolumesAndSignals, _images), (_PooledSignals, _images),
          (_Distilled, _images),
          (_Branches, _features), (_BagOfWords, _words),
          (_TextCNN, _words), (_Losses, _binary_labels),
          (_Centered, _features), (_BiasedAndScaled, _features),
          (_DiscriminatorLoss, _images), (_UnusedAverage, _features),
          (_RowWise, _features), (_ReshapedByNumPy, _features),
          (_FeaturesSideBySide, _features),
          (_SizedAtTheFirstCall, _features),
          (_MaskedForEachHead, _features), (_TiledBias, _binary_labels),
          (_Hinged, _features), (_LabelsFlattened, _binary_labels),
          (_PairsLogSumExp, _features), (_QLearning, _features)]


def _checked_without_recompiling(calls, model=None, method='forward',
                                 fn=None):
    """``differential.check_grads`` of ``model``'s ``method`` (or of
    ``fn``) over ``calls``, a ``RecompileWarning`` an error."""
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        return differential.check_grads(fn, calls, model=model,
                                        method=method)


@pytest.mark.parametrize('cls, make', MODELS)
def test_one_training_entry_for_every_batch_size(cls, make):
    jitted = _checked_without_recompiling(_calls(make), _model(cls))
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('x: '), entry.signature
    assert '[B' in str(entry.signature), entry.signature
    assert entry.training is not None


@pytest.mark.parametrize('cls, make', MODELS)
@pytest.mark.parametrize('backend', ['numpy', 'auto'])
def test_one_inference_entry_for_every_batch_size(cls, make, backend):
    model = _model(cls)
    jitted = chainerjit.jit(model.forward, backend=backend)
    with chainer.using_config('train', False), \
            chainer.using_config('enable_backprop', False), \
            warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        for args in _calls(make):
            testing.assert_results_equal(jitted(*args),
                                         model.forward(*args), 1e-4, 1e-5)
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


def test_printed_signature_and_rows():
    model = _model(_Classifier)
    jitted = chainerjit.jit(model.forward, backend='numpy')
    for args in _calls(_features, (3, 8)):
        jitted(*args)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'x: f32[B,12]@cpu (array), t: i32[B]@cpu (array)'), entry.signature
    assert 'f32[B,16] = LinearFunction' in str(entry.graph) or \
        'f32[B,16] = LinearFunction+ReLU' in str(entry.graph), entry.graph


def _twice(x):
    """Rows of two batches joined: the printed rows say so."""
    return F.tanh(F.concat([x, x * 2.0], axis=0))


def test_rows_of_a_join_of_batches():
    jitted = chainerjit.jit(_twice, backend='numpy', dynamic=True)
    rng = numpy.random.RandomState(0)
    for batch in (4, 9, 6):
        x = chainer.Variable(rng.randn(batch, 3).astype(F32))
        testing.assert_results_equal(jitted(x), _twice(x))
    entry, = jitted.cache_entries()
    assert 'f32[2*B,3]' in str(entry.graph), entry.graph


class _Dropped(_Classifier):
    ratio = 0.25


def test_dynamic_true_compiles_once_from_the_first_call():
    model = _model(_Dropped)
    jitted = chainerjit.jit(model.forward, dynamic=True)
    differential_calls = _calls(_features, (5, 9, 17, 5))
    with chainer.using_config('enable_backprop', False):
        for args in differential_calls:
            numpy.random.seed(1)
            expected = model.forward(*args)
            numpy.random.seed(1)
            testing.assert_results_equal(jitted(*args), expected)
    info = jitted.cache_info()
    assert info.compiles == 1 and info.currsize == 1, jitted.cache_report()


def test_dynamic_false_keeps_each_batch_size():
    model = _model(_Classifier)
    jitted = chainerjit.jit(model.forward, dynamic=False)
    with chainer.using_config('train', False):
        for args in _calls(_features, (3, 8, 17)):
            jitted(*args)
    assert jitted.cache_info().currsize == 3, jitted.cache_report()


def test_a_batch_of_one_is_served_by_the_entry_of_every_size():
    # (recorded first, its entry is replaced by the one of every size,
    # checked against eager at its next call of one row)
    model = _model(_Classifier)
    jitted = chainerjit.jit(model.forward, backend='numpy')
    with chainer.using_config('train', False):
        for args in _calls(_features, (1, 8, 17, 1, 30, 1)):
            testing.assert_results_equal(jitted(*args),
                                         model.forward(*args))
    sizes = [str(e.signature)[:8] for e in jitted.cache_entries()]
    assert sizes == ['x: f32[B'], jitted.cache_report()
    entry, = jitted.cache_entries()
    assert ('B', 1) in entry.verified_lengths, entry.verified_lengths


def _squeezed(x):
    # one row: the batch's axis squeezed too
    return F.squeeze(F.tanh(x[:, :1]))


def test_a_batch_of_one_that_differs_keeps_an_entry_of_its_own():
    jitted = chainerjit.jit(_squeezed)
    rng = numpy.random.RandomState(7)
    with pytest.warns(errors.RecompileWarning, match='a batch of one keeps '
                      'an entry of its own: at one row its program gave '
                      'another result than eagerly'):
        for b in (4, 4, 7, 1, 1, 9, 1, 2):
            x = rng.standard_normal((b, 3)).astype(F32)
            testing.assert_results_equal(jitted(x), _squeezed(x))
    sizes = sorted(str(e.signature)[:8] for e in jitted.cache_entries())
    assert sizes == ['x: f32[1', 'x: f32[B'], jitted.cache_report()
    assert jitted.cache_info().hits >= 4


class _NormalizedConvNet(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.c1 = L.Convolution2D(3, 4, 3, pad=1)
            self.bn = L.BatchNormalization(4)
            self.fc = L.Linear(None, 4)

    def forward(self, x, t):
        return F.softmax_cross_entropy(
            self.fc(F.relu(self.bn(self.c1(x)))), t)


def test_batch_normalization_in_test_mode_serves_every_batch_size():
    model = _model(_NormalizedConvNet)
    model(*_calls(_images, (2,))[0])  # the linear layer's shape
    jitted = chainerjit.jit(model.forward, backend='numpy')
    with chainer.using_config('train', False), \
            chainer.using_config('enable_backprop', False):
        for args in _calls(_images):
            testing.assert_results_equal(jitted(*args),
                                         model.forward(*args), 1e-4, 1e-5)
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


class _Gram(chainer.Chain):
    """Rows transposed into columns: the batch moves to axis 1, and the
    product sums over it (its rows contracted)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(12, 3)

    def forward(self, x, t):
        h = self.l1(x)
        return F.sum(F.matmul(F.transpose(h), h))


class _Similarities(_Gram):
    """Rows by rows transposed: the product has the batch on both axes
    (``ops.Rows.also``), summed."""

    def forward(self, x, t):
        h = self.l1(x)
        return F.sum(F.matmul(h, F.transpose(h)))


class _FirstSimilarities(_Gram):
    """The similarities of the first row: a cut of the batch on one of
    its two axes, which no rule follows."""

    def forward(self, x, t):
        h = self.l1(x)
        return F.sum(F.matmul(h, F.transpose(h))[0])


@pytest.mark.parametrize('cls', [_Gram, _Similarities])
def test_a_product_summing_over_the_batch_serves_every_batch_size(cls):
    jitted = _checked_without_recompiling(_calls(_features), _model(cls))
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


def test_batch_normalization_in_training_serves_every_batch_size():
    model = _model(_NormalizedConvNet)
    model(*_calls(_images, (2,))[0])  # the linear layer's shape
    jitted = _checked_without_recompiling(_calls(_images), model)
    assert jitted.cache_info().currsize == 1, jitted.cache_report()
    # The running averages: updated once a call, as eagerly (the checks
    # at new sizes put back what the program's run updated).
    _same_running_averages(jitted._instance(), model)


class _BiasBeforeNormalization(chainer.Chain):
    """A linear layer's bias before a batch normalization: its gradient is
    zero but for rounding, which differs between any two orders of
    summing."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.c1 = L.Convolution2D(3, 8, 3, pad=1)
            self.fc = L.Linear(8, 4)
            self.bn = L.BatchNormalization(4)

    def forward(self, x, t):
        h = F.max_pooling_2d(F.relu(self.c1(x)), 2)
        return self.bn(self.fc(F.mean(h, axis=(2, 3)))) * 10


def test_a_bias_before_batch_normalization_serves_every_batch_size():
    jitted = _checked_without_recompiling(
        _calls(_images, (3, 8, 17, 30, 64, 5)),
        _model(_BiasBeforeNormalization))
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


def _same_running_averages(model, twin):
    numpy.testing.assert_allclose(model.bn.avg_mean, twin.bn.avg_mean,
                                  rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(model.bn.avg_var, twin.bn.avg_var,
                                  rtol=1e-5, atol=1e-6)
    assert model.bn.N == twin.bn.N


class _Sampled(chainer.Chain):
    """A draw of randomized leaky ReLU's slopes: a side effect the check at
    a new size cannot undo."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(12, 3)

    def forward(self, x, t):
        return F.sum(F.rrelu(self.l1(x)))


class _Permuted(_Sampled):
    """Rows picked by an array of ints the forward computed
    (``h[numpy.argsort(t)]``)."""

    def forward(self, x, t):
        return F.sum(self.l1(x)[numpy.argsort(t)] * 2)


class _VAE(chainer.Chain):
    """A variational autoencoder's loss: its sample drawn from NumPy's
    generator, which a check at a new size puts back."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.encode = L.Linear(12, 6)
            self.mean = L.Linear(6, 3)
            self.ln_var = L.Linear(6, 3)
            self.decode = L.Linear(3, 12)

    def forward(self, x, t):
        h = F.tanh(self.encode(x))
        mean, ln_var = self.mean(h), self.ln_var(h)
        z = F.gaussian(mean, ln_var)
        return (F.bernoulli_nll(x, self.decode(z)) +
                F.gaussian_kl_divergence(mean, ln_var)) / len(x)


class _DistributionsVAE(_VAE):
    """Chainer's VAE example: a ``Normal`` posterior sampled ``k`` times,
    a ``Bernoulli`` decoder over the samples, the KL divergence to a
    standard ``Normal`` prior (``chainer.distributions``)."""

    k = 2

    def forward(self, x, t):
        h = F.tanh(self.encode(x))
        q_z = D.Normal(loc=self.mean(h), log_scale=self.ln_var(h))
        z = q_z.sample(self.k)
        p_x = D.Bernoulli(logit=self.decode(z, n_batch_axes=2))
        p_z = D.Normal(self.xp.zeros(3, F32), scale=self.xp.ones(3, F32))
        reconstructed = F.mean(p_x.log_prob(
            F.broadcast_to(x[None, :], (self.k,) + x.shape)))
        return F.mean(chainer.kl_divergence(q_z, p_z)) - reconstructed


@pytest.mark.parametrize('cls', [_VAE, _DistributionsVAE])
def test_a_vae_serves_every_batch_size_in_both_modes(cls):
    calls = [((x > 0).astype(F32), t) for x, t in _calls(_features)]
    model = _model(cls)
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        differential.check_seeded(model, calls, twin, jitted)
        with chainer.using_config('train', False):
            differential.check_seeded(model, calls, twin, jitted)
    assert jitted.cache_info().currsize == 2, jitted.cache_report()


@pytest.mark.parametrize('cls, make, why', [
    (_FirstSimilarities, _features,
     'a value computed from x read by GetItem['),
    (_Sampled, _features, 'RReLU at test_batch_any_size.py:%d runs as '
     'Chainer\'s own function' % (_Sampled.forward.__code__.co_firstlineno
                                  + 1)),
])
def test_where_the_batch_size_stays_in_the_key_a_warning_says_why(
        cls, make, why):
    model = _model(cls)
    model(*make(numpy.random.RandomState(0), 2))
    jitted = chainerjit.jit(model.forward, backend='numpy')
    messages = _recompile_warnings(jitted, _calls(make, (3, 8, 17, 8)))
    assert any('keeps the size of x.shape[0]' in m and why in m
               for m in messages), messages
    assert jitted.cache_info().currsize == 3
    assert why in jitted.explain(*make(numpy.random.RandomState(1), 5))


class _Recurrent(chainer.Chain):
    """A loop over the steps of batch-first sequences, rolled into a
    region with a symbolic trip count."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.x2h = L.Linear(4, 8)
            self.h2h = L.Linear(8, 8, nobias=True)

    def forward(self, x):
        h = None
        for t in range(x.shape[1]):
            a = self.x2h(x[:, t])
            h = F.tanh(a if h is None else a + self.h2h(h))
        return F.sum(h)


class _StateFromAStep(_Recurrent):
    """The state made by the first step from its size (``len`` of the
    step's ``x[:, t]``)."""

    def forward(self, x):
        h = None
        for t in range(x.shape[1]):
            x_t = x[:, t]
            if h is None:
                h = self.xp.zeros((len(x_t), 8), numpy.float32)
            h = F.tanh(self.x2h(x_t) + self.h2h(h))
        return F.sum(h)


class _FixedSteps(_Recurrent):
    """Six steps, always, and a loss over the batch."""

    def forward(self, x, t):
        h = None
        for i in range(6):
            a = self.x2h(x[:, i])
            h = F.tanh(a if h is None else a + self.h2h(h))
        return F.softmax_cross_entropy(h, t)


def _sequences(rng, batch, steps):
    return rng.randn(batch, steps, 4).astype(F32),


SHAPES = [(3, 5), (3, 7), (8, 6), (8, 5), (17, 4), (5, 9), (17, 6)]


@pytest.mark.parametrize('cls, printed', [
    ('_Recurrent', 'f32[B,8] = Tanh'),
    ('_LSTMSteps', '+LSTM'),  # the fused step
    ('_StateFromAStep', 'f32[B,8] = Tanh'),
])
def test_a_loop_serves_every_batch_size_and_length(cls, printed):
    rng = numpy.random.RandomState(0)
    calls = [_sequences(rng, *shape) for shape in SHAPES]
    jitted = _checked_without_recompiling(calls, _model(globals()[cls]))
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('x: f32[B,T,4]'), \
        entry.signature
    assert printed in str(entry.graph), entry.graph


class _EncoderDecoder(chainer.Chain):
    """Time-major source ids encoded, then a decoder fed the target's
    previous word (teacher forcing), its loss averaged over the steps."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(20, 6)
            self.encoder = L.Linear(6 + 8, 8)
            self.decoder = L.Linear(6 + 8, 8)
            self.out = L.Linear(8, 20)

    def forward(self, xs, ys):
        h = self.xp.zeros((xs.shape[1], 8), numpy.float32)
        for x in xs:
            h = F.tanh(self.encoder(F.concat([self.embed(x), h])))
        loss = 0
        for t in range(len(ys) - 1):
            h = F.tanh(self.decoder(F.concat([self.embed(ys[t]), h])))
            loss += F.softmax_cross_entropy(self.out(h), ys[t + 1])
        return loss / len(ys)


@pytest.mark.parametrize('shapes', [
    # (source length, target length, batch): the first target of two
    # words, a decoder of one step, too short to roll
    [(5, 2, 4), (7, 5, 3), (9, 8, 4), (6, 6, 2), (8, 3, 5), (4, 9, 4)],
    [(5, 2, 4), (7, 5, 4), (9, 8, 3), (6, 6, 2), (8, 3, 5), (4, 2, 4)]])
def test_a_decoder_too_short_to_roll_at_first_leaves_one_entry(shapes):
    rng = numpy.random.RandomState(2)
    calls = [(rng.randint(0, 20, (n, b)).astype(numpy.int32),
              rng.randint(0, 20, (m, b)).astype(numpy.int32))
             for n, m, b in shapes]
    jitted = differential.check_grads(None, calls, model=_EncoderDecoder(),
                                      method='forward')
    assert jitted.cache_info().currsize == 1, jitted.cache_report()
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('xs: i32[T,B]'), entry.signature


def test_a_loop_of_fixed_steps_serves_every_batch_size():
    rng = numpy.random.RandomState(0)
    calls = [(rng.randn(batch, 6, 4).astype(F32),
              rng.randint(0, 8, batch).astype(numpy.int32))
             for batch in BATCHES]
    jitted = _checked_without_recompiling(calls, _model(_FixedSteps))
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


class _CollectedSteps(_Recurrent):
    """Six steps whose states are collected in a list, stacked and read
    after the loop, and the last one's by itself."""

    def forward(self, x):
        h, hs = None, []
        for i in range(6):
            a = self.x2h(x[:, i])
            h = F.tanh(a if h is None else a + self.h2h(h))
            hs.append(h)
        y = F.stack(hs, axis=1)
        return F.sum(y * y, axis=(1, 2)) + hs[-1][:, 0]


def test_per_step_values_collected_in_a_list_serve_every_batch_size():
    rng = numpy.random.RandomState(0)
    calls = [(rng.randn(batch, 6, 4).astype(F32),) for batch in BATCHES]
    jitted = _checked_without_recompiling(calls, _model(_CollectedSteps))
    entry, = jitted.cache_entries()
    assert 'f32[B,6,8] = Stack' in str(entry.graph), entry.graph


class _Weighted(_Recurrent):
    """A loop over batch-first steps, and weights of another length."""

    def forward(self, x, w):
        h = None
        for t in range(x.shape[1]):
            a = self.x2h(x[:, t])
            h = F.tanh(a if h is None else a + self.h2h(h))
        return F.sum(h) * F.sum(w)


def test_sizes_other_than_a_batch_with_a_loop_open_too(fresh_warnings):
    # The batch changes only at the third call, with the steps and the
    # weights' length: the sizes seen open the batch and the weights, the
    # steps a symbolic trip count, and one entry serves every call.
    model = _model(_Weighted)
    rng = numpy.random.RandomState(0)
    jitted = chainerjit.jit(model.forward)
    messages = _recompile_warnings(jitted, [
        (rng.randn(batch, steps, 4).astype(F32), rng.randn(n).astype(F32))
        for batch, steps, n in [(3, 5, 2), (3, 7, 2), (8, 6, 5), (2, 9, 3),
                                (1, 4, 7), (8, 6, 5)]], model.forward)
    assert messages == []
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'x: f32[B,T,4]@cpu (array), w: f32[W]@cpu'), entry.signature
    assert jitted.cache_info().misses == 2


class _LSTMSteps(chainer.Chain):
    """LSTM steps over batch-first sequences, the state made by the first
    step (the lateral product, the sum and the step fuse into one
    kernel)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.x2h = L.Linear(4, 4 * 8)
            self.h2h = L.Linear(8, 4 * 8, nobias=True)

    def forward(self, x):
        h = c = None
        for t in range(x.shape[1]):
            a = self.x2h(x[:, t])
            if h is None:
                c, h = F.lstm(a[:, :8] * 0, a)
            else:
                c, h = F.lstm(c, a + self.h2h(h))
        return F.sum(h * h)


class _Discriminator(chainer.Chain):
    """A GAN discriminator over real and fake batches joined, its scores
    cut in two equal sections."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(6, 8)
            self.l2 = L.Linear(8, 1)

    def forward(self, real, fake):
        h = F.leaky_relu(self.l1(F.concat([real, fake], axis=0)))
        y_real, y_fake = F.split_axis(self.l2(h), 2, axis=0)
        return F.mean(F.softplus(-y_real)) + F.mean(F.softplus(y_fake))


class _DividedByTheBatch(_Discriminator):
    """The same loss divided by ``len(real)``: its node reads the size
    from ``real`` at run time."""

    def forward(self, real, fake):
        h = F.leaky_relu(self.l1(F.concat([real, fake], axis=0)))
        y_real, y_fake = F.split_axis(self.l2(h), 2, axis=0)
        return F.sum(F.softplus(-y_real) + F.softplus(y_fake)) / len(real)


class _CutAtTheRealBatch(_Discriminator):
    """The scores of the joined batches cut at the real batch's size,
    ``y[:len(real)]`` and ``y[len(real):]``: the cut reads the size from
    ``real`` at run time."""

    def forward(self, real, fake):
        y = self.l2(F.leaky_relu(self.l1(F.concat([real, fake], axis=0))))
        y_real, y_fake = y[:len(real)], y[len(real):]
        return F.mean(F.softplus(-y_real)) + F.mean(F.softplus(y_fake))


class _LabelsJoinedByNumPy(_Discriminator):
    """The joined batches' labels made by NumPy, ones for the real
    examples and zeros for the fake, joined as the batches are."""

    def forward(self, real, fake):
        y = self.l2(F.leaky_relu(self.l1(F.concat([real, fake], axis=0))))
        t = self.xp.concatenate([self.xp.ones((len(real), 1), numpy.int32),
                                 self.xp.zeros((len(fake), 1), numpy.int32)])
        return F.sigmoid_cross_entropy(y, t)


def _inverse(n):
    return 1.0 / n  # (the forward's own source is read; this is not)


class _ScaledByTheBatch(_Discriminator):
    """The same loss scaled by ``1.0 / len(real)``, a float Python computes
    in C, in a helper, unseen: the program would scale by the recorded
    size, which the check at a new size sees."""

    def forward(self, real, fake):
        h = F.leaky_relu(self.l1(F.concat([real, fake], axis=0)))
        y_real, y_fake = F.split_axis(self.l2(h), 2, axis=0)
        loss = F.sum(F.softplus(-y_real) + F.softplus(y_fake))
        return loss * _inverse(len(real))


class _ScaledInTheForward(_ScaledByTheBatch):
    """As :class:`_ScaledByTheBatch`, in the forward's own source, which
    says so."""

    def forward(self, real, fake):
        h = F.leaky_relu(self.l1(F.concat([real, fake], axis=0)))
        y_real, y_fake = F.split_axis(self.l2(h), 2, axis=0)
        loss = F.sum(F.softplus(-y_real) + F.softplus(y_fake))
        return loss * (1.0 / float(len(real)))


class _ScaledByASquareRoot(_ScaledByTheBatch):
    """As :class:`_ScaledInTheForward`, by ``math.sqrt`` of the batch
    size, which reads it in C."""

    def forward(self, real, fake):
        h = F.leaky_relu(self.l1(F.concat([real, fake], axis=0)))
        y_real, y_fake = F.split_axis(self.l2(h), 2, axis=0)
        loss = F.sum(F.softplus(-y_real) + F.softplus(y_fake))
        return loss * (1.0 / math.sqrt(real.shape[0]))


def _pairs(rng, batch):
    return (rng.randn(batch, 6).astype(F32), rng.randn(batch, 6).astype(F32))


def _one_entry_for_every_batch_size(model_class):
    """The one entry of ``model_class``'s jitted forward after calls at
    several batch sizes, whose values and gradients are eager's, with no
    RecompileWarning."""
    jitted = _checked_without_recompiling(_calls(_pairs), _model(model_class))
    entry, = jitted.cache_entries()
    return entry


@pytest.mark.parametrize('cls', [_Discriminator, _CutAtTheRealBatch,
                                 _LabelsJoinedByNumPy])
def test_a_join_of_batches_cut_in_sections_serves_every_batch_size(cls):
    entry = _one_entry_for_every_batch_size(cls)
    assert 'f32[2*B,8]' in str(entry.graph), entry.graph


class _GreedyDecoder(chainer.Chain):
    """Each step's most likely word (``F.argmax``) fed to the next."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(10, 6)
            self.cell = L.StatelessGRU(6, 6)
            self.out = L.Linear(6, 10)

    def forward(self, h, steps):
        y = self.xp.zeros((h.shape[0],), numpy.int32)
        scores = []
        for _ in range(steps):
            h = self.cell(h, self.embed(y))
            scores.append(self.out(h))
            y = F.argmax(scores[-1], axis=1).array.astype(numpy.int32)
        return F.stack(scores)


def test_a_greedy_decoder_serves_every_batch_size_and_number_of_steps():
    model = _model(_GreedyDecoder)
    rng = numpy.random.RandomState(5)
    calls = [(rng.randn(b, 6).astype(F32), n)
             for b, n in ((3, 4), (8, 6), (3, 9), (16, 5), (5, 4), (1, 7))]
    with chainer.using_config('train', False), warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        warnings.simplefilter('error', errors.LoopWarning)
        jitted = testing.assert_jit_matches_eager(model.forward, calls)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('h: f32[B,6]'), entry.signature
    assert 'ArgMax' in str(entry.graph), entry.graph


def test_a_loss_divided_by_the_batch_serves_every_batch_size():
    entry = _one_entry_for_every_batch_size(_DividedByTheBatch)
    assert 'python.size[a=1, axis=0, b=0](real)' in str(entry.graph)


@pytest.mark.parametrize('cls, why', [
    (_ScaledByTheBatch, 'gave another result than eagerly'),
    (_ScaledInTheForward, 'real.shape[0] converted to float at '
     'test_batch_any_size.py:'),
    (_ScaledByASquareRoot, 'real.shape[0] passed to math.sqrt at '
     'test_batch_any_size.py:')])
def test_a_size_used_in_python_is_caught_at_a_new_size(
        cls, why, fresh_warnings):
    model = _model(cls)
    jitted = chainerjit.jit(model.forward, backend='numpy')
    messages = _recompile_warnings(jitted, _calls(_pairs), model.forward)
    assert any(why in m for m in messages), messages
    for entry in jitted.cache_entries():
        assert '[B' not in str(entry.signature), entry.signature


class _StateFromTheShape(_LSTMSteps):
    """The state made with NumPy from the batch the forward reads:
    ``B, T, _ = xs.shape``, ``zeros((B, H))`` and ``zeros((len(x), H))``."""

    def forward(self, x):
        batch, steps, _ = x.shape
        h = self.xp.zeros((batch, 8), dtype=x.dtype)
        c = self.xp.zeros((len(x), 8), numpy.float32)
        for t in range(steps):
            c, h = F.lstm(c, self.x2h(x[:, t]) + self.h2h(h))
        return F.sum(h * h)


class _StateChangedInPlace(_LSTMSteps):
    """A state made from the batch, then changed in Python: it stays a
    constant, and the batch size in the key."""

    def forward(self, x):
        h = numpy.zeros((x.shape[0], 8), numpy.float32)
        h[:, 0] = 1.0
        c = numpy.zeros((x.shape[0], 8), numpy.float32)
        for t in range(x.shape[1]):
            c, h = F.lstm(c, self.x2h(x[:, t]) + self.h2h(h))
        return F.sum(h * h)


def test_a_state_made_from_the_batch_serves_every_batch_size():
    rng = numpy.random.RandomState(0)
    calls = [_sequences(rng, *shape) for shape in SHAPES]
    jitted = _checked_without_recompiling(calls, _model(_StateFromTheShape))
    entry, = jitted.cache_entries()
    assert 'f32[B,8] = numpy.full[fill=0, shape=(x.shape[0], 8)](x)' in \
        str(entry.graph), entry.graph


def test_a_state_changed_in_place_keeps_the_batch_size(fresh_warnings):
    model = _model(_StateChangedInPlace)
    rng = numpy.random.RandomState(0)
    messages = _recompile_warnings(
        chainerjit.jit(model.forward),
        [_sequences(rng, *shape) for shape in SHAPES], model.forward)
    assert any('x.shape[0] passed to numpy.zeros at' in m
               for m in messages), messages


class _Steps(chainer.Chain):
    """The RNN forwards over time-major sequences ``(T, B, 4)`` as people
    write them: each keeps one entry for every length and batch size."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.x2h = L.Linear(4, 4 * 8)
            self.h2h = L.Linear(8, 4 * 8, nobias=True)
            self.back = L.Linear(4, 4 * 8)
            self.gru = L.StatelessGRU(4, 8)
            self.lstm = L.StatelessLSTM(4, 8)
            self.rnn = L.LSTM(4, 8)
            self.layers = chainer.ChainList(L.LSTM(4, 4), L.LSTM(4, 4))
            self.cells = chainer.ChainList(L.StatelessLSTM(4, 4),
                                           L.StatelessLSTM(4, 4))

    def step(self, x, h, c):
        c, h = F.lstm(c, self.x2h(x) + self.h2h(h))
        return h, c

    def shape_pair(self, xs):
        T, B = xs.shape[0], xs.shape[1]
        h = self.xp.zeros((B, 8), dtype=xs.dtype)
        c = self.xp.zeros((B, 8), dtype=xs.dtype)
        for t in range(T):
            h, c = self.step(xs[t], h, c)
        return F.sum(h)

    def each_step(self, xs):
        h = c = self.xp.zeros((xs.shape[1], 8), numpy.float32)
        for x in xs:
            h, c = self.step(x, h, c)
        return F.sum(h * h)

    def both_ways(self, xs):
        T, B, _ = xs.shape
        h = c = self.xp.zeros((B, 8), numpy.float32)
        for t in range(T):
            h, c = self.step(xs[t], h, c)
        hb = cb = self.xp.zeros((B, 8), numpy.float32)
        for t in reversed(range(T)):
            cb, hb = F.lstm(cb, self.back(xs[t]) + self.h2h(hb))
        return F.sum(h + hb)

    def both_ways_joined(self, xs):
        # each direction's states stacked, joined along their features
        forward, backward = self._both_directions(xs)
        hs = F.concat([F.stack(forward), F.stack(backward[::-1])], axis=2)
        return F.sum(F.reshape(hs, (-1, 16)) ** 2)

    def _both_directions(self, xs):
        """Each direction's states, the backward one's in the order of
        its steps (last step first)."""
        T, B, _ = xs.shape
        h = c = hb = cb = self.xp.zeros((B, 8), numpy.float32)
        forward, backward = [], []
        for t in range(T):
            h, c = self.step(xs[t], h, c)
            forward.append(h)
        for t in reversed(range(T)):
            cb, hb = F.lstm(cb, self.back(xs[t]) + self.h2h(hb))
            backward.append(hb)
        return forward, backward

    def reversed_in_place(self, xs):
        forward, backward = self._both_directions(xs)
        backward.reverse()
        return F.sum(F.concat([F.stack(forward), F.stack(backward)],
                              axis=2) ** 2)

    def reversed_by_name(self, xs):
        forward, backward = self._both_directions(xs)
        backward = list(reversed(backward))
        return F.sum((F.stack(forward) - F.stack(backward)) ** 2)

    def reversed_comprehension(self, xs):
        hs = [F.tanh(self.back(x)) for x in reversed(xs)][::-1]
        return F.sum(F.stack(hs) * xs[:, :, :1])

    def stacked_links(self, xs):
        # stateful layers of a ChainList, each step through them all
        for layer in self.layers:
            layer.reset_state()
        hs = []
        for x in xs:
            for layer in self.layers:
                x = layer(x)
            hs.append(x)
        return F.sum(F.stack(hs) ** 2)

    def stacked_cells(self, xs):
        # stateless cells of a ChainList, their states in lists by layer
        B = xs.shape[1]
        hs = [self.xp.zeros((B, 4), numpy.float32) for _ in self.cells]
        cs = [self.xp.zeros((B, 4), numpy.float32) for _ in self.cells]
        for t in range(xs.shape[0]):
            z = xs[t]
            for k, cell in enumerate(self.cells):
                cs[k], hs[k] = cell(cs[k], hs[k], z)
                z = hs[k]
        return F.sum(hs[-1] * hs[0])

    def flipped_comprehension(self, xs):
        # a comprehension over a value its header computes, with state
        # carried by a link (L.LSTM's, made at the first step)
        self.rnn.reset_state()
        hs = [self.rnn(x) for x in F.flip(xs, 0)]
        return F.sum(F.stack(hs) * xs[:, :, :1])

    def filled_backwards(self, xs):
        T = len(xs)
        hb = cb = self.xp.zeros((xs.shape[1], 8), numpy.float32)
        hs = [None] * T
        for t in reversed(range(T)):
            cb, hb = F.lstm(cb, self.back(xs[t]) + self.h2h(hb))
            hs[t] = hb
        return F.sum(F.stack(hs, axis=1) ** 2)

    def reversed_and_read(self, xs):
        # the backward direction's states reversed in place, its last
        # step read from the list, first in position
        hb = cb = self.xp.zeros((xs.shape[1], 8), numpy.float32)
        backward = []
        for x in xs[::-1]:
            cb, hb = F.lstm(cb, self.back(x) + self.h2h(hb))
            backward.append(hb)
        backward.reverse()
        return F.sum(F.stack(backward) * backward[0])

    def directions_joined_each_step(self, xs):
        # a third loop over both directions' lists, joining each step's
        forward, backward = self._both_directions(xs)
        joined = [F.concat((f, b))
                  for f, b in zip(forward, reversed(backward))]
        return F.sum(F.stack(joined) ** 2)

    def second_layer(self, xs):
        # a second recurrent layer over the first one's states, the
        # first step of the first layer made before its loop
        h = c = self.xp.zeros((xs.shape[1], 8), numpy.float32)
        h, c = self.step(xs[0], h, c)
        first = [h]
        for x in xs[1:]:
            h, c = self.step(x, h, c)
            first.append(h)
        h2 = c2 = self.xp.zeros((xs.shape[1], 8), numpy.float32)
        for state in first:
            c2, h2 = F.lstm(c2, self.h2h(state) + self.h2h(h2))
        return F.sum(h2 * h2)

    def reading_constant_steps_each_step(self, xs):
        # a loop over the first loop's states that reads the argument's
        # first and last steps at each of its own
        h = c = self.xp.zeros((xs.shape[1], 8), numpy.float32)
        states = []
        for x in xs:
            h, c = self.step(x, h, c)
            states.append(h)
        outs = []
        for state in states:
            outs.append(F.tanh(self.x2h(xs[0] - xs[-1]) + self.h2h(state)))
        return F.sum(F.stack(outs) ** 2)

    def all_but_the_first_step(self, xs):
        # a comprehension over the first loop's states but its first
        h = c = self.xp.zeros((xs.shape[1], 8), numpy.float32)
        states = []
        for x in xs:
            h, c = self.step(x, h, c)
            states.append(h)
        return F.sum(F.stack([F.tanh(self.h2h(s)) for s in states[1:]]))

    def over_the_reversed_steps(self, xs):
        # a comprehension over the steps reversed in its header
        hs = [F.tanh(self.back(x)) for x in xs[::-1]]
        return F.sum(F.stack(hs[::-1]) * xs[:, :, :1])

    def ends_of_a_list(self, xs):
        # each direction's last state read from its list after the loop,
        # the backward one's first in position
        forward, backward = self._both_directions(xs)
        backward = backward[::-1]
        return F.sum(forward[-1] * backward[0])

    def gru_link(self, xs):
        h = self.xp.zeros((xs.shape[1], 8), numpy.float32)
        for t in range(xs.shape[0]):
            h = self.gru(h, xs[t])
        return F.sum(h)

    def lstm_link(self, xs):
        h = c = self.xp.zeros((xs.shape[1], 8), numpy.float32)
        for t in range(xs.shape[0]):
            c, h = self.lstm(c, h, xs[t])
        return F.sum(h)

    def counter(self, xs):
        h = c = self.xp.zeros((xs.shape[1], 8), numpy.float32)
        t = 0
        while t < xs.shape[0]:
            h, c = self.step(xs[t], h, c)
            t += 1
        return F.sum(h)

    def separated(self, xs):
        h = c = self.xp.zeros((xs.shape[1], 8), numpy.float32)
        for x in F.separate(xs):
            h, c = self.step(x, h, c)
        return F.sum(h)

    def state_like_a_step(self, xs):
        # the states made like the first step's projection, in the loop
        h = c = None
        for x in xs:
            a = self.x2h(x)
            if h is None:
                h = c = self.xp.zeros_like(a.array[:, :8])
            c, h = F.lstm(c, a + self.h2h(h))
        return F.sum(h)

    def lazy_state(self, xs):
        h = c = None
        for x in xs:
            if h is None:
                h = c = self.xp.zeros((x.shape[0], 8), numpy.float32)
            h, c = self.step(x, h, c)
        return F.sum(h * h)

    def stacked(self, xs, axis=0):
        h = c = self.xp.zeros((xs.shape[1], 8), numpy.float32)
        hs = []
        for x in xs:
            h, c = self.step(x, h, c)
            hs.append(h)
        return F.stack(hs, axis)

    def batch_first_outputs(self, xs):
        # the steps' outputs stacked on axis 1, then element-wise ops
        return F.exp(-self.stacked(xs, 1) ** 2) * 0.5

    def attended(self, xs):
        # every step's output weighed by the last one, broadcast over the
        # steps by a new axis (h[None]), as attention scores are
        hs = self.stacked(xs)
        return F.sum(hs * hs[-1][None], axis=2)

    def weighed(self, xs):
        # the weights broadcast to the shape of the stacked steps, which
        # the forward reads
        hs = self.stacked(xs)
        scores = F.softmax(F.sum(hs * hs[-1][None], axis=2), axis=0)
        weights = F.broadcast_to(F.expand_dims(scores, 2), hs.shape)
        return F.sum(hs * weights, axis=0)

    def queried(self, xs):
        # the last state broadcast as a query to the stacked steps' shape
        hs = self.stacked(xs)
        query = F.broadcast_to(hs[-1], hs.shape)
        scores = F.softmax(F.sum(hs * query, axis=2), axis=0)
        return F.sum(hs * F.broadcast_to(scores[:, :, None], hs.shape),
                     axis=0)

    def scored_by_batch_matmul(self, xs):
        # as old code scores them, with the deprecated F.batch_matmul
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', DeprecationWarning)
            return self.scored(xs, F.batch_matmul)

    def scored_by_batch_matmul_of_vectors(self, xs):
        # F.batch_matmul takes a batch of vectors as one of columns:
        # scores (B, T, 1) of the last state, and the context of weights
        # (B, T) contracting the steps
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', DeprecationWarning)
            steps, h = self.batch_first_steps(xs)
            scores = F.batch_matmul(steps, h)
            weights = F.softmax(scores[:, :, 0], axis=1)
            return F.batch_matmul(steps, weights, transa=True)[:, :, 0]

    def batch_first_steps(self, xs):
        T, B, _ = xs.shape
        h = c = self.xp.zeros((B, 8), numpy.float32)
        hs = []
        for x in xs:
            h, c = self.step(x, h, c)
            hs.append(h)
        return F.stack(hs, axis=1), h

    def scored(self, xs, product=F.matmul):
        # batch-first steps scored by a batched matrix product with the
        # last state, the scores reshaped to (B, T) and normalized
        T, B, _ = xs.shape
        steps, h = self.batch_first_steps(xs)
        scores = product(steps, F.expand_dims(h, 2))
        weights = F.softmax(F.reshape(scores, (B, T)), axis=1)
        return F.sum(steps * F.expand_dims(weights, 2), axis=1)

    def attended_each_step(self, xs):
        # a second loop over the steps attending to all of them at each
        # (self-attention one step at a time), its weights kept too
        hs = self.stacked(xs)
        h, weights = hs[-1], []
        for t in range(xs.shape[0]):
            a = F.softmax(F.sum(hs * F.broadcast_to(h, hs.shape), axis=2),
                          axis=0)
            h = F.tanh(h + F.sum(
                hs * F.broadcast_to(F.expand_dims(a, 2), hs.shape), axis=0))
            weights.append(a)
        return F.sum(h * h) + F.sum(F.stack(weights) ** 2)

    def divided_each_step(self, xs):
        # each step's loss over the batch size, in the loop's body
        B = xs.shape[1]
        h = self.xp.zeros((B, 8), numpy.float32)
        loss = 0
        for x in xs:
            h = self.gru(h, x)
            loss += F.sum(h * h) / B
        return loss

    def masked_to_a_shape_made(self, xs):
        # a mask of the first steps broadcast to a shape made of the
        # batch's size, in the loop's body
        T, B = xs.shape[:2]
        mask = numpy.arange(T)[:, None] < numpy.arange(B)[None, :] + 2
        h = numpy.zeros((B, 8), numpy.float32)
        for t in range(T):
            h = F.where(numpy.broadcast_to(mask[t][:, None], (B, 8)),
                        self.gru(h, xs[t]), h)
        return F.sum(h * h)

    def attention(self, xs):
        # the scores normalized over the steps' axis, and the steps'
        # outputs weighed by them
        hs = self.stacked(xs)
        scores = F.softmax(F.sum(hs * hs[-1][None], axis=2), axis=0)
        context = F.sum(hs * F.expand_dims(scores, 2), axis=0)
        return context + F.log_softmax(hs, axis=0)[-1]


@pytest.mark.parametrize('method', ['shape_pair', 'each_step', 'both_ways',
                                    'both_ways_joined', 'reversed_in_place',
                                    'reversed_by_name',
                                    'reversed_comprehension',
                                    'filled_backwards', 'ends_of_a_list',
                                    'reversed_and_read', 'attended_each_step',
                                    'directions_joined_each_step',
                                    'second_layer', 'over_the_reversed_steps',
                                    'reading_constant_steps_each_step',
                                    'all_but_the_first_step',
                                    'scored_by_batch_matmul',
                                    'scored_by_batch_matmul_of_vectors',
                                    'gru_link', 'lstm_link', 'counter',
                                    'separated', 'lazy_state', 'stacked',
                                    'state_like_a_step',
                                    'attended', 'attention', 'scored',
                                    'weighed', 'queried',
                                    'batch_first_outputs',
                                    'divided_each_step',
                                    'flipped_comprehension',
                                    'stacked_links', 'stacked_cells',
                                    'masked_to_a_shape_made'])
def test_time_major_forwards_serve_every_length_and_batch_size(method):
    rng = numpy.random.RandomState(0)
    calls = [(rng.randn(steps, batch, 4).astype(F32),)
             for batch, steps in SHAPES]
    jitted = _checked_without_recompiling(calls, _model(_Steps), method)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('xs: f32[T,B,4]'), \
        entry.signature


class _TargetsUnread(_Steps):
    """Targets passed with the steps, which inference does not read."""

    def forward(self, xs, ts):
        self.rnn.reset_state()
        return F.stack([self.rnn(x) for x in xs])


def test_an_argument_no_op_reads_is_of_any_length():
    model = _model(_TargetsUnread)
    rng = numpy.random.RandomState(2)
    calls = [(rng.randn(steps, batch, 4).astype(F32),
              rng.randint(0, 3, (steps, batch)).astype(numpy.int32))
             for batch, steps in SHAPES]
    with chainer.using_config('train', False), warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        warnings.simplefilter('error', errors.LoopWarning)
        jitted = testing.assert_jit_matches_eager(model.forward, calls)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('xs: f32[T,B,4]'), \
        entry.signature


class _WordsModel(chainer.Chain):
    """A language model: time-major word ids embedded at once, a loop
    over the embedded steps, all states scored against the next words."""

    def __init__(self):
        super(_WordsModel, self).__init__()
        with self.init_scope():
            self.embed = L.EmbedID(20, 4)
            self.cell = L.Linear(4 + 6, 6)
            self.words = L.Linear(6, 20)

    def forward(self, ids, targets):
        h = self.xp.zeros((ids.shape[1], 6), numpy.float32)
        hs = []
        for x in self.embed(ids):
            h = F.tanh(self.cell(F.concat([x, h], axis=1)))
            hs.append(h)
        return F.softmax_cross_entropy(
            self.words(F.concat(hs, axis=0)), targets.reshape(-1))


def test_a_first_entry_served_by_a_later_one_is_dropped():
    # the first call's length and batch size change together at the
    # second: its entry, of fixed sizes, is served by the entry of every
    # length and batch size that follows
    rng = numpy.random.RandomState(1)
    calls = [(rng.randint(0, 20, (steps, batch)).astype(numpy.int32),
              rng.randint(0, 20, (steps, batch)).astype(numpy.int32))
             for batch, steps in [(7, 7), (4, 9), (8, 5), (5, 6), (7, 7),
                                  (4, 9), (3, 3)]]
    jitted = _checked_without_recompiling(calls, _model(_WordsModel))
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('ids: i32[T,B]'), \
        entry.signature


class _Masked(_Steps):
    """Padded sequences and their masks, a step kept where the mask is
    0 (``h = m * h_new + (1 - m) * h``)."""

    def forward(self, xs, ms):
        h = c = self.xp.zeros((xs.shape[1], 8), numpy.float32)
        for t in range(len(xs)):
            h_new, c_new = self.step(xs[t], h, c)
            m = F.broadcast_to(F.expand_dims(ms[t], 1), h.shape)
            h = m * h_new + (1 - m) * h
            c = m * c_new + (1 - m) * c
        return F.sum(h * h)


def test_masked_padding_serves_every_length_and_batch_size():
    rng = numpy.random.RandomState(0)
    calls = [(rng.randn(steps, batch, 4).astype(F32),
              (rng.rand(steps, batch) > .3).astype(F32))
             for batch, steps in SHAPES]
    jitted = _checked_without_recompiling(calls, _model(_Masked))
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs: f32[T,B,4]@cpu grad, ms: f32[T,B]@cpu grad'), entry.signature


def test_a_program_for_every_length_and_batch_size_exports_so():
    ort = pytest.importorskip('onnxruntime')
    model = _model(_Steps)
    jitted = chainerjit.jit(model.shape_pair)
    rng = numpy.random.RandomState(0)
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for batch, steps in SHAPES[:3]:
            jitted(rng.randn(steps, batch, 4).astype(F32))
    exported = chainerjit.export_onnx(
        jitted, (rng.randn(6, 8, 4).astype(F32),))
    dims = [d.dim_param or d.dim_value for d in
            exported.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ['T', 'B', 4], dims
    session = ort.InferenceSession(exported.SerializeToString())
    for steps, batch in [(6, 8), (9, 5), (3, 17)]:
        x = rng.randn(steps, batch, 4).astype(F32)
        with chainer.using_config('train', False):
            expected = model.shape_pair(x).array
        numpy.testing.assert_allclose(
            session.run(None, {'xs': x})[0], expected, rtol=1e-5,
            atol=1e-5)


class _PaddedBagOfWords(chainer.Chain):
    """Padded rows of token ids (``-1`` past each sentence's end, ignored
    by the lookup), their embeddings averaged over the words."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 8, ignore_label=-1)
            self.fc = L.Linear(8, 4)

    def forward(self, x, t):
        h = F.mean(self.embed(x), axis=1)
        return F.softmax_cross_entropy(self.fc(h), t)


def _padded_words(rng, words, batch=5):
    ids = rng.randint(0, 30, (batch, words)).astype(numpy.int32)
    ids[:, rng.randint(1, words + 1):] = -1
    return ids, rng.randint(0, 4, batch).astype(numpy.int32)


@pytest.mark.parametrize('cls', [_PaddedBagOfWords, _TextCNN])
def test_padded_batches_of_every_sentence_length_share_one_entry(cls):
    """The number of words, axis 1 of the ids, varies by batch (a bucketed
    iterator's padded batches) at a fixed batch size: the lookup keeps it
    on its axis, a convolution over the words follows it (Chainer's own
    kernels), the mean or the maximum over the words gives fixed rows."""
    rng = numpy.random.RandomState(3)
    calls = [_padded_words(rng, words) for words in (6, 11, 4, 17, 11, 9)]
    jitted = _checked_without_recompiling(calls, _model(cls))
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


@pytest.mark.parametrize('cls', [_PaddedBagOfWords, _TextCNN])
def test_padded_batches_of_every_size_and_width_share_one_entry(cls):
    """The batch size and the width change, alone and together (a bucketed
    iterator's last, smaller batch; serving): after one entry per axis, one
    serves both, ``x: i32[B,W]``."""
    rng = numpy.random.RandomState(4)
    calls = [_padded_words(rng, words, batch) for batch, words in
             [(5, 6), (5, 11), (3, 4), (5, 17), (3, 9), (7, 8), (2, 12),
              (5, 5), (6, 14)]]
    jitted = _checked_without_recompiling(calls, _model(cls))
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'x: i32[B,W]@cpu (array), t: i32[B]@cpu (array)'), entry.signature
    assert jitted.cache_info().compiled >= 2, jitted.cache_report()


# Both sizes change on most calls: entries of fixed sizes first, then of
# one open axis, then one for both, which takes their places.
_BOTH_CHANGING = [(5, 9), (9, 10), (2, 12), (3, 8), (6, 7), (7, 14), (8, 14),
                  (5, 10), (6, 15), (9, 14), (4, 6), (3, 13)]


@pytest.mark.parametrize('cls', [_PaddedBagOfWords, _TextCNN])
def test_one_training_entry_left_where_both_sizes_change_on_most_calls(cls):
    rng = numpy.random.RandomState(5)
    calls = [_padded_words(rng, words, batch)
             for batch, words in _BOTH_CHANGING]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.RecompileWarning)
        jitted = differential.check_grads(
            None, calls, model=_model(cls), method='forward')
    entry, = jitted.cache_entries()
    assert '[B,W]' in str(entry.signature), jitted.cache_report()


@pytest.mark.parametrize('cls', [_PaddedBagOfWords, _TextCNN])
def test_one_inference_entry_left_where_both_sizes_change_on_most_calls(
        cls):
    """Inference entries of one open batch run in onnxruntime sessions;
    the entry for both sizes runs on the VM."""
    rng = numpy.random.RandomState(6)
    model = _model(cls)
    jitted = chainerjit.jit(model.forward)
    with chainer.using_config('train', False), \
            chainer.using_config('enable_backprop', False), \
            warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.RecompileWarning)
        for batch, words in _BOTH_CHANGING:
            args = _padded_words(rng, words, batch)
            testing.assert_results_equal(jitted(*args),
                                         model.forward(*args), 1e-4, 1e-5)
    entry, = jitted.cache_entries()
    assert '[B,W]' in str(entry.signature), jitted.cache_report()


class _MeanOverSteps(chainer.Chain):
    """A time-major batch projected at once and averaged over the steps."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 6)

    projected = 'product'

    def forward(self, xs):
        steps, batch, width = xs.shape
        merged = (steps * batch, width) if self.projected == 'product' \
            else (-1, width)
        h = F.tanh(self.fc(F.reshape(xs, merged)))
        return F.mean(F.reshape(h, (steps, batch, 6)), axis=0)


class _MeanOverStepsFlattened(_MeanOverSteps):
    """The mean over the steps flattened into one row: the steps may take
    any size, the batch, merged with the features, may not."""

    def forward(self, xs):
        return F.reshape(super().forward(xs), (1, -1))


#: Time-major calls whose steps change first, then their batch.
_STEPS_THEN_BATCH = [(6, 3), (9, 3), (7, 5), (4, 2), (8, 6), (5, 7), (3, 3),
                     (10, 4)]


def _time_major_calls(cls, projected):
    """``cls``'s forward jitted against eager over
    :data:`_STEPS_THEN_BATCH`, its input projected at once as
    ``projected`` gives it; the jitted function and its warnings."""
    rng = numpy.random.RandomState(8)
    model = _model(cls)
    model.projected = projected
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for steps, batch in _STEPS_THEN_BATCH:
            xs = rng.randn(steps, batch, 4).astype(F32)
            testing.assert_results_equal(jitted(xs), model.forward(xs),
                                         1e-5, 1e-6)
    return jitted, [str(w.message) for w in caught
                    if w.category is errors.RecompileWarning]


@pytest.mark.parametrize('projected', ['product', 'inferred'])
def test_the_steps_then_the_batch_open_both(projected):
    """The steps open first (axis 0), then the batch: the batch, open
    already, stays the batch, and the rows of both follow through the
    reshapes that merge them and split them again."""
    jitted, messages = _time_major_calls(_MeanOverSteps, projected)
    assert not messages, messages
    entry, = jitted.cache_entries()
    assert 'xs: f32[B,W,4]' in str(entry.signature), entry.signature


def test_two_axes_changing_at_once_say_that_they_compile_again():
    jitted, messages = _time_major_calls(_MeanOverStepsFlattened, 'product')
    assert any('xs.shape[0] and xs.shape[1] changed in one call, and the '
               'program takes any size of the first but not of the second'
               in m for m in messages), messages


def _scored_by_a_table(x, table):
    """A batch scored against a table of a fixed shape passed as an
    argument, broadcast over the batch."""
    return F.sum(F.tanh(x[:, None] * table), axis=(1, 2))


def test_an_argument_of_a_fixed_shape_next_to_the_batch():
    rng = numpy.random.RandomState(12)
    table = rng.randn(3, 4).astype(F32)
    calls = [(rng.randn(batch, 4).astype(F32), table * k)
             for k, batch in enumerate((3, 5, 5, 9, 2, 17, 6))]
    jitted = _checked_without_recompiling(calls, fn=_scored_by_a_table)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'x: f32[B,4]@cpu grad, table: f32[3,4]@cpu grad'), entry.signature


class _SummedLoss(_Classifier):
    """The loss summed over the batch, reported per example with NumPy on
    its array: ``loss.array / len(x)`` and ``loss.array * x.shape[0]``
    take the batch size as a Python int, on either side."""

    def forward(self, x, t):
        loss = F.sum(F.softmax_cross_entropy(self.l2(F.relu(self.l1(x))), t,
                                             reduce='no'))
        chainer.report({'mean': loss.array / len(x),
                        'scaled': numpy.exp(-loss.array / (x.shape[0] + 1)),
                        'total': loss.array * x.shape[0],
                        'left': len(x) * loss.array - (len(x) - loss.array),
                        'below': x.shape[0] < loss.array}, self)
        return loss


def _reports(model, forward, args):
    observation = {}
    with chainer.reporter.Reporter().scope(observation):
        chainer.reporter.get_current_reporter().add_observer('main', model)
        loss = forward(*args)
    return loss.array, observation


def test_a_batch_size_in_numpy_arithmetic_is_read_at_run_time():
    # NumPy given the batch size as a number by the forward's code: the
    # program computes it from the argument's shape, at any batch size.
    model = _model(_SummedLoss)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        for args in _calls(_features):
            testing.assert_results_equal(_reports(model, jitted, args),
                                         _reports(model, model.forward, args))
    entry, = jitted.cache_entries()
    assert 'x: f32[B,12]' in str(entry.signature)
    assert 'python.size' in str(entry.graph)


class _RowsCounted(_SummedLoss):
    """The batch size counted by iterating over the rows in Python, which
    the recording does not see, into a report only."""

    def forward(self, x, t):
        loss = F.sum(F.softmax_cross_entropy(self.l2(F.relu(self.l1(x))), t,
                                             reduce='no'))
        n = sum(1 for _ in x)
        chainer.report({'mean': loss.array / n}, self)
        return loss


def test_a_report_that_differs_at_a_new_batch_size_keeps_it_in_the_key(
        fresh_warnings):
    # The first call at a new batch size compares what it reports with
    # eager's too, not only what it returns.
    model = _model(_RowsCounted)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for args in _calls(_features):
            testing.assert_results_equal(_reports(model, jitted, args),
                                         _reports(model, model.forward, args))
    assert any('batch size' in str(w.message) and 'another result' in
               str(w.message) for w in caught), [str(w.message)
                                                 for w in caught]
    assert all('[B' not in str(e.signature) for e in jitted.cache_entries())


class _PositionWise(chainer.Chain):
    """A position-wise layer over a batch of sequences of one length,
    ``(B, T, 8)``, averaged over the steps: no loop."""

    def __init__(self):
        super(_PositionWise, self).__init__()
        with self.init_scope():
            self.hidden = L.Linear(8, 8)
            self.out = L.Linear(8, 3)

    def forward(self, x, t):
        h = F.relu(self.hidden(x, n_batch_axes=2))
        return F.softmax_cross_entropy(self.out(F.mean(h, axis=1)), t)


def test_the_batch_and_length_changed_in_one_call_open_both():
    rng = numpy.random.RandomState(3)
    calls = [(rng.standard_normal((b, n, 8)).astype(numpy.float32),
              rng.randint(0, 3, b).astype(numpy.int32))
             for b, n in [(2, 5), (3, 7), (4, 9), (2, 5), (5, 11), (3, 7)]]
    jitted = differential.check_grads(None, calls, model=_PositionWise(),
                                      method='forward')
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('x: f32[B,W,8]'), \
        entry.signature


# --- rows the gradients must find where the forward put them ------------

def _advanced_apart(x):
    # an int and a list apart: NumPy puts their axis first, (2, B, 4)
    h = x[:, 0, :, [1, 2]]
    return F.sum(h * h, axis=1)


def test_an_index_moving_the_batch_keeps_its_gradient_right():
    rng = numpy.random.RandomState(3)
    calls = [(rng.randn(batch, 3, 4, 5).astype(F32),)
             for batch in (2, 3, 4, 5, 6, 7, 8, 7)]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.RecompileWarning)
        differential.check_grads(_advanced_apart, calls)


class _MergedSteps(chainer.Chain):
    """Batch-first steps merged with the batch for one linear layer and
    split again, ``(B * T, D)`` to ``(B, T, 3)``."""

    def __init__(self):
        super(_MergedSteps, self).__init__()
        with self.init_scope():
            self.layer = L.Linear(5, 3)

    def forward(self, x):
        B, T, D = x.shape
        h = F.reshape(self.layer(F.reshape(x, (B * T, D))), (B, T, 3))
        return F.mean(h, axis=1) + F.sum(h * h, axis=1)


@pytest.mark.parametrize('steps', [[2, 4, 3, 6, 5, 7, 6],
                                   [3, 2, 5, 6, 7, 5]])
def test_steps_merged_with_the_batch_split_again_at_any_length(steps):
    # compiled for every length at the second call, where the length
    # equals the batch size, or divides it: the rows of the merged axis
    # are the steps', second after the split
    rng = numpy.random.RandomState(4)
    calls = [(rng.randn(4, n, 5).astype(F32),) for n in steps]
    jitted = _checked_without_recompiling(calls, _model(_MergedSteps))
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('x: f32[4,B,5]'), \
        entry.signature


class _StatefulJoined(chainer.Chain):
    """An ``L.LSTM`` (whose state the forward assigns) over the steps,
    their states joined with the reversed ones along the features."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.lstm = L.LSTM(4, 8)

    def forward(self, xs):
        self.lstm.reset_state()
        hs = F.stack([self.lstm(x) for x in xs])
        joined = F.concat([hs, hs[::-1]], axis=2)
        return F.sum(F.reshape(joined, (-1, 16)) ** 2)


@pytest.mark.parametrize('make, method', [
    (lambda: _model(_Steps), 'both_ways_joined'),
    (lambda: _model(_StatefulJoined), 'forward')])
def test_a_gradient_wrong_at_a_new_size_is_caught_by_its_check(
        monkeypatch, make, method):
    # a join's gradient made to cut at the recorded sizes, as it once did:
    # the first training call at a new size compares the gradients with
    # eager's too (a program that assigns the model's attributes as well,
    # which are put back before eager runs), and the batch size stays in
    # the key
    from chainerjit.ops import array as array_ops

    def recorded_shapes(ctx, axis, sizes, any_rows=False):
        rule = real(ctx, axis, sizes)
        return rule._replace(fn=lambda xs, ys, gys, wanted: tuple(
            None if g is None else g.reshape(shape) for g, shape in zip(
                rule.fn(xs, ys, (gys[0][:len(gys[0])],), wanted),
                ctx.in_shapes)))
    real = array_ops._split_grad
    monkeypatch.setattr(array_ops, '_split_grad', recorded_shapes)
    rng = numpy.random.RandomState(5)
    calls = [(rng.randn(steps, batch, 4).astype(F32),)
             for batch, steps in [(3, 4), (4, 3), (6, 2), (2, 6), (4, 3)]]
    with pytest.warns(errors.RecompileWarning, match='another result'):
        differential.check_grads(None, calls, model=make(), method=method)


def test_the_stacked_steps_of_all_but_the_first_are_printed_one_fewer():
    rng = numpy.random.RandomState(1)
    calls = [(rng.randn(steps, batch, 4).astype(F32),)
             for batch, steps in SHAPES]
    jitted = _checked_without_recompiling(calls, _model(_Steps),
                                          'all_but_the_first_step')
    entry, = jitted.cache_entries()
    assert 'f32[T-1,B,32] = Stack' in str(entry.graph), entry.graph


class _HingeLoss(chainer.Chain):
    """``F.hinge``, whose backward scales the arrays it retained in place:
    it may run once per forward only."""

    def __init__(self):
        super(_HingeLoss, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 3)

    def forward(self, x, t):
        return F.hinge(self.l1(x), t)


@pytest.mark.filterwarnings('ignore::chainerjit.RecompileWarning')
def test_a_new_batch_size_checked_leaves_the_users_backward_as_eager():
    # The check of gradients at a new size takes them of an eager result
    # of its own, not of the one the call returns. (Here the check finds
    # the program's gradient at another batch size differs, and the size
    # stays in the key.)
    numpy.random.seed(0)
    eager = _HingeLoss()
    jitted = _HingeLoss()
    jitted.copyparams(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    rng = numpy.random.RandomState(3)
    for batch in BATCHES:
        x = rng.randn(batch, 4).astype(F32)
        t = rng.randint(0, 3, batch).astype(numpy.int32)
        for model in (eager, jitted):
            model.cleargrads()
            model(x, t).backward()
        for (name, a), (_, b) in zip(sorted(eager.namedparams()),
                                     sorted(jitted.namedparams())):
            numpy.testing.assert_allclose(b.grad, a.grad, rtol=1e-5,
                                          atol=1e-6, err_msg=name)


class _Chunked(chainer.Chain):
    """A loss scaled by a step function of the batch size: the same at
    every size up to 32, where the first sizes are checked."""

    def __init__(self, scale):
        super(_Chunked, self).__init__()
        self.scale = scale
        with self.init_scope():
            self.l1 = L.Linear(6, 4)

    def forward(self, x):
        h = self.l1(x)
        return F.sum(h * h) * self.scale(self.xp, len(x))


STEPPED = [
    lambda xp, b: 1.0 / ((b + 31) // 32),
    lambda xp, b: -(-b // 32),
    lambda xp, b: b % 32 + 1,
    lambda xp, b: xp.asarray((b >> 5) + 1, F32),
    lambda xp, b: sum([b // 32, 1]),
    lambda xp, b: divmod(b, 32)[0] + 1,
    lambda xp, b: (b & ~31) + 1,
    # The float computes it, unseen: found by the check at a size beyond
    # those checked.
    lambda xp, b: math.ceil(1.0 * b / 32),
]


@pytest.mark.filterwarnings('ignore::chainerjit.RecompileWarning')
@pytest.mark.parametrize('scale', STEPPED)
def test_a_step_function_of_the_batch_size_keeps_it_in_the_key(scale):
    # Checking the program against eager at the first new batch sizes
    # (all up to 32 here, where the step is the same) could not see it.
    rng = numpy.random.RandomState(0)
    calls = [(rng.randn(b, 6).astype(F32),)
             for b in (3, 8, 17, 30, 5, 12, 64, 40, 64, 8)]
    numpy.random.seed(0)
    model = _Chunked(scale)
    differential.check_grads(None, calls, model=model, method='forward')
    jitted = chainerjit.jit(copy.deepcopy(model).forward, backend='numpy')
    with chainer.using_config('train', False), \
            chainer.using_config('enable_backprop', False):
        for x, in calls:
            testing.assert_results_equal(jitted(x), model(x), 1e-5, 1e-6)
    assert not any('[B' in str(entry.signature)
                   for entry in jitted.cache_entries()), jitted.cache_report()


def _scaled_by_float_arithmetic_of_the_batch(x):
    return F.tanh(x) * (len(x) / 4.0) + F.sum(x) / (x.shape[0] * 0.5)


def test_a_size_in_float_arithmetic_first_is_computed_at_run_time():
    # (the size on the left: its own operator gives a number the program
    # computes; 1.0 / B, the float's, stays in the key)
    rng = numpy.random.RandomState(8)
    calls = [(rng.randn(b, 3).astype(F32),) for b in (4, 4, 7, 1, 12, 3)]
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = testing.assert_jit_matches_eager(
            _scaled_by_float_arithmetic_of_the_batch, calls)
    entry, = jitted.cache_entries()
    assert 'python.truediv[operand1=4.0]' in str(entry.graph), entry.graph


def _odd_rows_by_numpy(x):
    return F.tanh(x) * (numpy.shape(x)[0] % 2) + x * (numpy.size(x, 0) % 2)


def test_numpy_shape_of_a_variable_is_the_size_read():
    # (odd sizes after even ones: the check of the first new sizes would
    # not see a size baked in)
    jitted = chainerjit.jit(_odd_rows_by_numpy)
    rng = numpy.random.RandomState(9)
    calls = [(rng.randn(b, 3).astype(F32),)
             for b in (4, 6, 8, 10, 12, 2, 5, 7, 5)]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.RecompileWarning)
        differential.check_grads(_odd_rows_by_numpy, calls)
        for x, in calls:
            testing.assert_results_equal(
                jitted(chainer.Variable(x)), _odd_rows_by_numpy(x))


SIZE_ARITHMETIC = [
    lambda x: x * (len(x) % 3),
    lambda x: x * (len(x) // 3),
    lambda x: x * (10 // len(x)),
    lambda x: x * (10 % len(x)),
    lambda x: x * (numpy.arange(len(x)) < len(x) // 3)[:, None],
    lambda x: x * (len(x) - len(x) // 2),
]


@pytest.mark.filterwarnings('ignore::chainerjit.RecompileWarning')
@pytest.mark.parametrize('fn', SIZE_ARITHMETIC)
def test_a_size_floor_divided_or_taken_modulo_is_computed_as_eager(fn):
    # Unchecked programs (check=False): // and % of a size are no sum of
    # sizes, whatever the number's form.
    jitted = chainerjit.jit(fn, check=False)
    with chainer.using_config('enable_backprop', False):
        for b in (4, 4, 7, 4, 2, 7):
            x = numpy.random.RandomState(b).randn(b, 2).astype(F32)
            testing.assert_results_equal(jitted(x), fn(x))


class _Stepped(_Classifier):
    """A model attribute the forward reads, changed after every call."""

    def __init__(self):
        super().__init__()
        self.step = 0

    def forward(self, x, t):
        return super().forward(x, t)[0] + self.step


def test_a_miss_at_a_size_the_entry_serves_names_the_guard(fresh_warnings):
    # The entry serves every batch size: what misses is its guard.
    model = _model(_Stepped)
    jitted = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for i in range(16):
            x, t = _features(rng, 3 + i % 3)
            testing.assert_results_equal(jitted(x, t), model.forward(x, t))
            model.step += 1
    messages = [str(w.message) for w in caught
                if issubclass(w.category, errors.RecompileWarning)]
    assert any('no longer records' in m and '(model).step: value' in m
               for m in messages), messages
    assert jitted.cache_info().compiles <= 10


class _Positions(chainer.Chain):
    """A transformer's input of batch-first steps: the steps' number read
    from the shape, its positions' encoding made by NumPy."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(8, 8)

    def encoding(self, positions, d):
        xp = self.xp
        angles = positions / 10000 ** (
            2 * xp.arange(d // 2, dtype=F32)[None, :] / d)
        return xp.concatenate([xp.sin(angles), xp.cos(angles)], axis=1)

    def forward(self, x):
        _, T, d = x.shape
        positions = self.xp.arange(T, dtype=F32)[:, None]
        h = self.l1(x, n_batch_axes=2) + self.encoding(positions, d)
        return h * (T - 1) * T ** -0.5


class _PositionsSelected(_Positions):
    def encoding(self, positions, d):
        xp = self.xp
        i = xp.arange(d, dtype=F32)[None, :]
        angles = positions / 10000 ** (2 * (i // 2) / d)
        return xp.where(i % 2 == 0, xp.sin(angles), xp.cos(angles))


@pytest.mark.parametrize('cls', [_Positions, _PositionsSelected])
def test_positions_made_by_numpy_serve_every_length_and_batch(cls):
    rng = numpy.random.RandomState(0)
    calls = [(rng.randn(batch, steps, 8).astype(F32),) for batch, steps in
             [(4, 5), (4, 9), (4, 17), (4, 3), (2, 6), (7, 6), (5, 11)]]
    jitted = _checked_without_recompiling(calls, _model(cls))
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


class _LongOnesScaled(chainer.Chain):
    """A decision on the steps' number of batch-first steps, with no
    loop."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(8, 8)

    def forward(self, x):
        _, T, _ = x.shape
        h = self.l1(x, n_batch_axes=2)
        if T > 10:
            h = h * 2
        return F.sum(h, axis=1)


@pytest.mark.parametrize('batches', [(4,) * 8, (4, 4, 3, 5, 2, 6, 3, 7)])
def test_a_decision_on_a_size_is_a_guard_taking_both_sides(batches):
    rng = numpy.random.RandomState(0)
    steps = (5, 9, 17, 12, 3, 6, 14, 11)
    model = _model(_LongOnesScaled)
    jitted = _checked_without_recompiling(
        [(rng.randn(b, t, 8).astype(F32),) for b, t in zip(batches, steps)],
        model)
    described = sorted(e.describe().splitlines()[1]
                       for e in jitted.cache_entries())
    symbol = 'W' if len(set(batches)) > 1 else 'B'
    assert described == ['for sizes where: %s > 10' % symbol,
                         'for sizes where: not %s > 10' % symbol], described


class _OneHot(_Classifier):
    """Labels made one-hot by indexing an identity the forward makes
    (``numpy.eye(4)[t]``), for a squared error against the softmax."""

    def forward(self, x, t):
        p = F.softmax(self.l2(F.relu(self.l1(x))))
        return F.mean_squared_error(p, numpy.eye(4, dtype=F32)[t])


def test_labels_made_one_hot_serve_every_batch_size():
    jitted = _checked_without_recompiling(_calls(_features),
                                          _model(_OneHot))
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('x: f32[B,12]'), entry.signature


class _TagsOverTime(chainer.Chain):
    """A tag for each step of a batch-first block: scores of ``(B, C, T)``
    from a convolution over the steps, the loss over the tags ``(B, T)``
    (padded with -1)."""

    def __init__(self, reduce='mean', normalize=True):
        super().__init__()
        with self.init_scope():
            self.conv = L.Convolution1D(5, 4, 3, pad=1)
        self.reduce, self.normalize = reduce, normalize

    def forward(self, x, t):
        scores = self.conv(F.transpose(x, (0, 2, 1)))
        return F.softmax_cross_entropy(scores, t, normalize=self.normalize,
                                       reduce=self.reduce)


def _tagged_steps(rng, shapes):
    calls = []
    for batch, steps in shapes:
        t = rng.randint(0, 4, (batch, steps)).astype(numpy.int32)
        t[rng.rand(batch, steps) < 0.2] = -1
        calls.append((rng.randn(batch, steps, 5).astype(F32), t))
    return calls


@pytest.mark.parametrize('reduce, normalize', [
    ('mean', True), ('mean', False), ('no', True)])
def test_a_loss_over_classes_and_steps_serves_every_batch_and_length(
        reduce, normalize):
    # (the batch and the steps change, also both at once)
    calls = _tagged_steps(numpy.random.RandomState(3), [
        (4, 6), (4, 6), (7, 6), (7, 11), (3, 5), (9, 2), (4, 13)])
    jitted = _checked_without_recompiling(
        calls, _TagsOverTime(reduce, normalize))
    assert len(jitted.cache_entries()) == 1


class _Predicted(_Classifier):
    """The classes predicted by NumPy's ``argmax`` of the scores' array
    (``predict(argmax=True)`` of Chainer's text classifier example)."""

    def forward(self, x, t=None):
        y = self.l2(F.relu(self.l1(x)))
        return self.xp.argmax(y.array, axis=1), y.array.argmin(axis=1)


def test_classes_predicted_by_numpy_serve_every_batch_size():
    model = _model(_Predicted)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        for x, _ in _calls(_features):
            testing.assert_results_equal(jitted(x), model.forward(x))
    assert len(jitted.cache_entries()) == 1


class _Upsampled(chainer.Chain):
    """Signals spread by ``F.unpooling_2d`` (a vocoder's upsampling), cut
    by a causal convolution back to their length (``h[:, :, :length]``
    of ``length = x.shape[2]``), as WaveNet does."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.conv = L.Convolution2D(3, 4, (2, 1), pad=(1, 0))

    def forward(self, x, t):
        x = F.unpooling_2d(x, (2, 1), cover_all=False)
        length = x.shape[2]
        h = self.conv(x)[:, :, :length, :]
        return F.softmax_cross_entropy(F.sum(h, axis=(2, 3)), t)


def test_upsampled_and_causally_cut_signals_serve_every_batch_size():
    calls = [(x[:, :, :, :1], t) for x, t in _calls(_images)]
    jitted = _checked_without_recompiling(calls, _model(_Upsampled))
    assert len(jitted.cache_entries()) == 1


@pytest.mark.parametrize('train', [True, False])
def test_rows_picked_by_computed_ints_serve_every_batch_size(train):
    calls = _calls(_features)
    model = _model(_Permuted)
    if train:
        jitted = _checked_without_recompiling(calls, model)
    else:
        jitted = chainerjit.jit(model.forward)
        with warnings.catch_warnings(), chainer.using_config('train', False):
            warnings.simplefilter('error', errors.RecompileWarning)
            for args in calls:
                testing.assert_results_equal(jitted(*args),
                                             model.forward(*args))
    assert len(jitted.cache_entries()) == 1


class _FirstRowRepeated(_Sampled):
    """Every row replaced by the first (``h[xp.zeros(len(x), 'i')]``: an
    index array made of the batch size, its gradient accumulated)."""

    def forward(self, x, t):
        h = self.l1(x)
        return F.sum(h[self.xp.zeros(len(x), 'i')] * h)


def test_rows_picked_by_an_index_made_of_the_batch_size():
    jitted = _checked_without_recompiling(_calls(_features),
                                          _model(_FirstRowRepeated))
    assert len(jitted.cache_entries()) == 1


class _PaddedToFour(chainer.Chain):
    """A mean over the steps padded to a multiple of four, the padding
    computed by NumPy from the number of steps (``numpy.asarray(T) %
    4``): NumPy's arithmetic, not a size's."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 5)

    def forward(self, x):
        T = x.shape[1]
        pad = int(-numpy.asarray(T) % 4)
        return F.sum(self.fc(x, n_batch_axes=2), axis=1) / (T + pad)


def test_a_size_made_an_array_by_numpy_stays_in_the_key():
    # (the steps are multiples of four at the first new sizes, where a
    # padding baked in would pass the checks against eager)
    rng = numpy.random.RandomState(5)
    calls = [(rng.randn(3, t, 4).astype(F32),)
             for t in [4, 8, 12, 16, 20] * 2 + [6, 10, 14, 18]]
    model = _model(_PaddedToFour)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for args in calls:
            testing.assert_results_equal(jitted(*args), model.forward(*args))
    assert any('passed to numpy.asarray' in str(w.message) for w in caught)
