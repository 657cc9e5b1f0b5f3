"""Training through compiled code: losses, gradients and updates equal
eager Chainer's."""

import copy

import chainer
from chainer import gradient_check
from chainer import optimizer_hooks
from chainer import training
import chainer.functions as F
import chainer.links as L
from chainer.training import extensions
import numpy
import pytest

import chainerjit
from chainerjit import testing
from examples import models


class DropCNN(chainer.Chain):
    """A small CNN with batch normalization and dropout."""

    def __init__(self):
        super(DropCNN, self).__init__()
        with self.init_scope():
            self.conv = L.Convolution2D(1, 4, 3, pad=1)
            self.bn = L.BatchNormalization(4)
            self.fc = L.Linear(4 * 4 * 4, 10)

    def forward(self, x):
        h = F.max_pooling_2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(F.dropout(h, 0.3))


def _twins(model):
    """An eager model and a jitted deep copy of it."""
    jitted = copy.deepcopy(model)
    jitted.forward = chainerjit.jit(jitted.forward)
    return model, jitted


def _train_side_by_side(model, make_batch, loss_fn, make_optimizer,
                        steps=30, rtol=1e-4, atol=1e-5, device=None):
    """Trains ``model`` and a jitted copy side by side (on ``device``, if
    given: ``'@cupy:0'``) and compares every loss and the final
    parameters."""
    if device is not None:
        with chainer.using_config('train', False), \
                chainer.no_backprop_mode():  # sizes lazy parameters
            model(*make_batch(numpy.random.RandomState(9))[:-1])
        model.to_device(device)
    send = chainer.get_device(device or '@numpy').send
    host = chainer.backend.CpuDevice().send
    eager, jitted = _twins(model)
    optimizers = []
    for m in (eager, jitted):
        opt = make_optimizer()
        opt.setup(m)
        optimizers.append(opt)
    rng = numpy.random.RandomState(0)
    for step in range(steps):
        batch = [send(a) for a in make_batch(rng)]
        losses = []
        for m, opt in zip((eager, jitted), optimizers):
            numpy.random.seed(step)  # dropout masks
            m.cleargrads()
            loss = loss_fn(m.forward(*batch[:-1]), batch[-1])
            loss.backward()
            opt.update()
            losses.append(float(loss.array))
        numpy.testing.assert_allclose(losses[1], losses[0], rtol=rtol,
                                      atol=atol, err_msg='step %d' % step)
    for (name, p), (_, q) in zip(sorted(eager.namedparams()),
                                 sorted(jitted.namedparams())):
        assert type(q.array) is type(p.array)
        numpy.testing.assert_allclose(host(q.array), host(p.array),
                                      rtol=rtol, atol=atol, err_msg=name)
    for entry in jitted.forward.cache_entries():
        assert entry.fallback is None, entry.fallback
        assert entry.training is not None, entry.describe()
    assert jitted.forward.cache_info().hits >= steps - 2
    return jitted


def _classification_batch(shape, n_classes=10):
    def make(rng):
        return (rng.randn(*shape).astype(numpy.float32),
                rng.randint(0, n_classes, shape[0]).astype(numpy.int32))
    return make


@pytest.mark.parametrize('make_optimizer', [
    lambda: chainer.optimizers.SGD(lr=0.1),
    lambda: chainer.optimizers.MomentumSGD(lr=0.05),
    lambda: chainer.optimizers.Adam(alpha=0.01),
], ids=['SGD', 'MomentumSGD', 'Adam'])
def test_mlp_trains_like_eager(make_optimizer):
    jitted = _train_side_by_side(
        models.MLP(20, 16, 5), _classification_batch((8, 20), 5),
        F.softmax_cross_entropy, make_optimizer)
    entry, = jitted.forward.cache_entries()
    assert entry.training is not None and entry.hits == 29


def test_optimizer_hooks():
    _train_side_by_side(
        models.MLP(20, 16, 5), _classification_batch((8, 20), 5),
        F.softmax_cross_entropy,
        lambda: _with_hooks(chainer.optimizers.MomentumSGD(lr=0.1)))


def _with_hooks(opt):
    """An optimizer whose ``setup`` also adds WeightDecay and
    GradientClipping."""
    setup = opt.setup

    def setup_with_hooks(model):
        setup(model)
        opt.add_hook(optimizer_hooks.WeightDecay(1e-3))
        opt.add_hook(optimizer_hooks.GradientClipping(0.5))
    opt.setup = setup_with_hooks
    return opt


def test_cnn_with_batch_normalization_and_dropout_trains_like_eager():
    jitted = _train_side_by_side(
        DropCNN(), _classification_batch((6, 1, 8, 8)),
        F.softmax_cross_entropy,
        lambda: chainer.optimizers.MomentumSGD(lr=0.05))
    # The running statistics followed eager's too.
    assert jitted.forward.cache_entries()[0].training is not None


class ConvBlocks(chainer.Chain):
    """LeNet's convolution blocks: convolution, batch normalization, ReLU
    and 2x2 max pooling, twice."""

    def __init__(self):
        super(ConvBlocks, self).__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(1, 4, 5, pad=2)
            self.bn1 = L.BatchNormalization(4)
            self.conv2 = L.Convolution2D(4, 6, 5, pad=2)
            self.bn2 = L.BatchNormalization(6)

    def forward(self, x):
        h = F.max_pooling_2d(F.relu(self.bn1(self.conv1(x))), 2)
        return F.max_pooling_2d(F.relu(self.bn2(self.conv2(h))), 2)


def test_convolution_blocks_train_bit_for_bit():
    """Convolutions, batch normalization (statistics and running
    averages), ReLU and 2x2 pooling recorded for training give eager's
    bits, step after step: the layouts eager's reductions sum in are kept
    (a C-ordered convolution output once made the steps drift apart)."""
    def loss_fn(y, t):
        return F.mean_squared_error(y, t)

    def make_batch(rng):
        return (rng.randn(16, 1, 8, 8).astype(numpy.float32),
                rng.randn(16, 6, 2, 2).astype(numpy.float32))
    numpy.random.seed(0)
    eager = ConvBlocks()
    jitted = _train_side_by_side(
        eager, make_batch, loss_fn,
        lambda: chainer.optimizers.MomentumSGD(lr=0.05), steps=8, rtol=0,
        atol=0)
    for bn in ('bn1', 'bn2'):
        for name in ('avg_mean', 'avg_var'):
            actual = getattr(getattr(jitted, bn), name)
            expected = getattr(getattr(eager, bn), name)
            assert actual.tobytes() == expected.tobytes(), (bn, name)


def test_transformer_block_trains_like_eager():
    def loss_fn(y, t):
        return F.mean_squared_error(y, t)

    def make_batch(rng):
        x = rng.randn(2, 5, 16).astype(numpy.float32)
        return x, numpy.tanh(x[:, ::-1])

    _train_side_by_side(models.EncoderBlock(), make_batch, loss_fn,
                        lambda: chainer.optimizers.Adam(alpha=0.005))


def test_loss_outside_the_jitted_forward_with_a_classifier():
    model = L.Classifier(models.MLP(20, 16, 5))
    model.predictor.forward = chainerjit.jit(model.predictor.forward)
    eager = L.Classifier(models.MLP(20, 16, 5))
    eager.copyparams(model)
    rng = numpy.random.RandomState(0)
    for _ in range(3):
        x, t = _classification_batch((8, 20), 5)(rng)
        for m in (eager, model):
            m.cleargrads()
            m(x, t).backward()
        for p, q in zip(eager.params(), model.params()):
            numpy.testing.assert_allclose(q.grad, p.grad, rtol=1e-5)


def test_trainer_with_standard_updater(tmp_path):
    rng = numpy.random.RandomState(0)
    x = rng.randn(64, 20).astype(numpy.float32)
    t = (x[:, 0] > 0).astype(numpy.int32)
    dataset = chainer.datasets.TupleDataset(x, t)
    results = []
    for jit in (False, True):
        numpy.random.seed(0)
        model = L.Classifier(models.MLP(20, 16, 2))
        if jit:
            model.predictor.forward = chainerjit.jit(
                model.predictor.forward)
        optimizer = chainer.optimizers.SGD(lr=0.1)
        optimizer.setup(model)
        iterator = chainer.iterators.SerialIterator(dataset, 16,
                                                    shuffle=False)
        updater = training.updaters.StandardUpdater(iterator, optimizer)
        trainer = training.Trainer(updater, (3, 'epoch'),
                                   out=str(tmp_path / str(jit)))
        trainer.extend(extensions.LogReport())
        trainer.run()
        results.append((trainer.observation['main/loss'],
                        model.predictor.l1.W.array.copy(), model))
    numpy.testing.assert_allclose(float(results[1][0].array),
                                  float(results[0][0].array), rtol=1e-5)
    numpy.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-5)
    assert results[1][2].predictor.forward.cache_info().hits > 0


def test_gradients_accumulate_like_eager(rng):
    eager, jitted = _twins(models.MLP(6, 5, 3))
    for m in (eager, jitted):
        m.cleargrads()
        for _ in range(3):  # no cleargrads in between: grads add up
            x = numpy.ones((2, 6), numpy.float32)
            F.sum(m.forward(x)).backward()
    for p, q in zip(eager.params(), jitted.params()):
        numpy.testing.assert_allclose(q.grad, p.grad, rtol=1e-6)


def test_two_forwards_then_one_backward_and_unused_outputs(rng):
    def f(x, W):
        h = F.tanh(F.matmul(x, W))
        return h, F.relu(h) * 2.0, F.exp(x)

    def loss(outs_a, outs_b):
        return F.sum(outs_a[0] * outs_b[1])  # outs[2] unused

    jf = chainerjit.jit(f)
    for _ in range(3):
        x1, x2 = rng.randn(3, 4), rng.randn(3, 4)
        W = rng.randn(4, 4)
        grads = []
        for fn in (f, jf):
            Wv = chainer.Variable(W.copy())
            a, b = chainer.Variable(x1.copy()), chainer.Variable(x2.copy())
            loss(fn(a, Wv), fn(b, Wv)).backward()
            grads.append((Wv.grad, a.grad, b.grad))
        for g_jit, g_eager in zip(grads[1], grads[0]):
            numpy.testing.assert_allclose(g_jit, g_eager, rtol=1e-10)
    assert jf.cache_info().hits >= 4


def test_double_backprop_raises_a_clear_error(rng):
    jf = chainerjit.jit(lambda x: F.tanh(x) * 3.0)
    for _ in range(2):
        x = chainer.Variable(rng.randn(2, 3))
        y = jf(x)
    with pytest.raises(NotImplementedError, match='double backprop'):
        F.sum(y).backward(enable_double_backprop=True)


def test_check_backward_on_a_jitted_function(rng):
    jf = chainerjit.jit(lambda x, W: F.relu(F.matmul(x, W)) * 2.0)
    x, W = rng.randn(3, 4) + 0.1, rng.randn(4, 2)
    with chainer.no_backprop_mode():
        jf(x, W)  # compile the inference entry too
    gradient_check.check_backward(
        jf, (x, W), rng.randn(3, 2), dtype=numpy.float64, atol=1e-6,
        rtol=1e-5)
    assert any(e.training is not None for e in jf.cache_entries())


def test_every_lowered_op_in_a_model_has_a_gradient(rng):
    testing.assert_jit_grads_match_eager(
        lambda x, W, b: F.relu(F.linear(x, W, b)),
        [(rng.randn(3, 4), rng.randn(5, 4), rng.randn(5))
         for _ in range(3)], lowered=['ReLU', 'LinearFunction'])


def test_zero_dimensional_gradients_accumulate(rng):
    testing.assert_jit_grads_match_eager(
        lambda x: x * x + x, [(numpy.asarray(rng.randn()),)
                              for _ in range(3)])
