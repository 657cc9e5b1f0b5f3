"""The same models on CuPy (skipped where CuPy or a GPU is absent)."""

import warnings

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing
from examples import models
from tests.frontend_tests import test_counter_counting_down as counting_down
from tests.frontend_tests import test_loop_lengths_in_helpers as helpers
from tests.frontend_tests import test_two_lengths as two_lengths
from tests.runtime_tests import test_sizes_seen as sizes_seen
from tests.test_training import _classification_batch
from tests.test_training import DropCNN
from tests.test_training import _train_side_by_side


pytestmark = pytest.mark.gpu


def _on_gpu(model):
    return model.to_device('@cupy:0')


def _calls(shape, n=3):
    import cupy
    rng = cupy.random.RandomState(0)
    return [(rng.standard_normal(shape, dtype=numpy.float32),)
            for _ in range(n)]


def test_mlp_on_gpu():
    model = _on_gpu(models.MLP())
    testing.assert_jit_matches_eager(
        model.forward, _calls((8, 784)), rtol=1e-4, atol=1e-5,
        expect_entries=1, lowered=['LinearFunction', 'ReLU'])


def test_lenet_on_gpu_in_test_mode():
    model = _on_gpu(models.LeNet())
    with chainer.using_config('train', False):
        testing.assert_jit_matches_eager(
            model.forward, _calls((4, 1, 28, 28)), rtol=1e-4, atol=1e-5,
            expect_entries=1)


def test_moving_the_model_to_the_gpu_is_a_miss():
    model = models.MLP()
    model.forward = chainerjit.jit(model.forward)
    with chainer.no_backprop_mode():
        model.forward(numpy.zeros((2, 784), numpy.float32))
        _on_gpu(model)
        x, = _calls((2, 784), n=1)[0]
        y = model.forward(x)
    assert model.forward.cache_info().misses == 2
    assert chainer.backend.get_array_module(y) is not numpy


def test_reading_a_gpu_value_runs_eagerly():
    def f(x):
        return F.relu(x) * float(x.array.sum())

    jf = chainerjit.jit(f)
    x, = _calls((3, 4), n=1)[0]
    with chainer.no_backprop_mode(), warnings.catch_warnings(record=True) \
            as caught:
        warnings.simplefilter('always')
        jf(chainer.Variable(x))
    assert any(issubclass(w.category, chainerjit.FallbackWarning)
               for w in caught)


def _to_gpu(array):
    return chainer.backend.GpuDevice.from_device_id(0).send(array)


def _train_on_gpu(model, make_batch, make_optimizer, steps=8):
    return _train_side_by_side(model, make_batch, F.softmax_cross_entropy,
                               make_optimizer, steps=steps,
                               device='@cupy:0')


@pytest.mark.parametrize('make_optimizer', [
    lambda: chainer.optimizers.MomentumSGD(lr=0.05),
    lambda: chainer.optimizers.Adam(alpha=0.01),
], ids=['MomentumSGD', 'Adam'])
def test_mlp_trains_on_gpu_like_eager(make_optimizer):
    _train_on_gpu(models.MLP(20, 16, 5), _classification_batch((8, 20), 5),
                  make_optimizer)


def test_lenet_trains_on_gpu_like_eager():
    _train_on_gpu(models.LeNet(), _classification_batch((4, 1, 28, 28)),
                  lambda: chainer.optimizers.MomentumSGD(lr=0.01),
                  steps=4)


class BatchNormalizedCNN(DropCNN):
    """DropCNN without its dropout (CuPy's random numbers are not
    seeded here)."""

    def forward(self, x):
        return self.fc(F.max_pooling_2d(F.relu(self.bn(self.conv(x))), 2))


def test_batch_normalization_trains_on_gpu_like_eager():
    jitted = _train_on_gpu(
        BatchNormalizedCNN(), _classification_batch((6, 1, 8, 8)),
        lambda: chainer.optimizers.MomentumSGD(lr=0.05))
    assert isinstance(jitted.bn.avg_mean, type(_to_gpu(numpy.zeros(1))))


def _sequences(lengths, n_in=8, batch=3):
    import cupy
    rng = cupy.random.RandomState(1)
    return [(rng.standard_normal((t, batch, n_in), dtype=numpy.float32),)
            for t in lengths]


def test_lstm_loop_on_gpu_is_one_program():
    model = _on_gpu(models.LSTMClassifier(8, 12, 4))
    testing.assert_jit_matches_eager(
        model.forward, _sequences([5, 5, 9, 3]), rtol=1e-4, atol=1e-5,
        expect_entries=1)


def test_lstm_gradients_on_gpu():
    model = _on_gpu(models.LSTMClassifier(8, 12, 4))
    testing.assert_jit_grads_match_eager(
        model.forward, _sequences([5, 5, 7]), rtol=1e-4, atol=1e-5)


def test_lstm_trains_on_gpu_like_eager():
    def make(rng):
        return (rng.randn(6, 3, 8).astype(numpy.float32),
                rng.randint(0, 4, 3).astype(numpy.int32))
    _train_on_gpu(models.LSTMClassifier(8, 12, 4), make,
                  lambda: chainer.optimizers.Adam(alpha=0.01))


def test_encoder_block_on_gpu():
    import cupy
    model = _on_gpu(models.EncoderBlock())
    rng = cupy.random.RandomState(2)
    calls = [(rng.standard_normal((2, 5, 16), dtype=numpy.float32),)
             for _ in range(3)]
    testing.assert_jit_grads_match_eager(model.forward, calls, rtol=1e-4,
                                         atol=1e-5)


def test_classifier_with_jitted_loss_trains_on_gpu():
    import chainer.links as L
    import copy
    eager = _on_gpu(L.Classifier(models.MLP(20, 16, 5)))
    jitted = copy.deepcopy(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    opts = [chainer.optimizers.SGD(lr=0.1) for _ in range(2)]
    for opt, m in zip(opts, (eager, jitted)):
        opt.setup(m)
    rng = numpy.random.RandomState(3)
    for step in range(6):
        x, t = _classification_batch((8, 20), 5)(rng)
        x, t = _to_gpu(x), _to_gpu(t)
        losses = []
        for opt, m in zip(opts, (eager, jitted)):
            opt.update(m, x, t)
            losses.append(float(m.loss.array))
        numpy.testing.assert_allclose(losses[1], losses[0], rtol=1e-5,
                                      atol=1e-6)
    assert jitted.forward.cache_info().hits >= 4


@pytest.mark.parametrize('read', [
    lambda xs: float(xs.sum()),
    lambda xs: float(xs[0, 0, 0]),
    lambda xs: bool((xs > 0).all()),
    lambda xs: F.sum(chainer.Variable(xs * 2)),
    lambda xs: F.sum(xs[xs > 0]),
    lambda xs: float(__import__('cupy').sum(xs)),
], ids=['sum', 'item', 'compare', 'arithmetic', 'mask', 'cupy.sum'])
def test_reading_a_gpu_argument_runs_eagerly(read):
    def f(v, xs):
        r = read(xs)
        if isinstance(r, chainer.Variable):
            return F.relu(v) + F.broadcast_to(r, v.shape)
        return F.relu(v) * float(r)

    jf = chainerjit.jit(f)
    (v,), = _calls((3, 4), n=1)
    for xs, in _sequences([2, 2, 2]):
        with chainer.no_backprop_mode(), warnings.catch_warnings():
            warnings.simplefilter('ignore', chainerjit.FallbackWarning)
            y = jf(v, xs)
        testing.assert_results_equal(y, f(v, xs))
    entry, = jf.cache_entries()
    assert entry.fallback is not None


def test_indexing_a_gpu_argument_is_recorded():
    def f(xs):
        h = F.tanh(xs[0])
        return h + F.sum(xs[1:], axis=0) + xs[..., None][2, :, :, 0]

    jf = testing.assert_jit_matches_eager(
        f, _sequences([4, 4, 4]), rtol=1e-5, atol=1e-6, expect_entries=1)
    y = jf(_sequences([4])[0][0])
    assert type(y.array) is type(_sequences([4])[0][0])


def test_a_gpu_state_made_by_cupy_zeros_is_a_constant():
    import cupy

    def f(x):
        h = chainer.Variable(cupy.zeros(x.shape, x.dtype))
        return F.tanh(chainer.Variable(x) + h) + F.broadcast_to(
            chainer.Variable(cupy.full((1,) + x.shape[1:], 2.0, x.dtype)),
            x.shape)

    testing.assert_jit_matches_eager(f, _calls((3, 4)), expect_entries=1)


def test_a_filled_gpu_array_changed_in_place_runs_eagerly():
    import cupy

    def f(x):
        h = cupy.zeros(x.shape, x.dtype)
        h += 1  # no longer the fill: chainerjit cannot tell what changed it
        return F.tanh(x + h)

    jf = chainerjit.jit(f)
    for x, in _calls((3, 4)):
        with chainer.no_backprop_mode(), warnings.catch_warnings():
            warnings.simplefilter('ignore', chainerjit.FallbackWarning)
            testing.assert_results_equal(jf(chainer.Variable(x)),
                                         f(chainer.Variable(x)))
    assert jf.cache_entries()[0].fallback is not None


def test_linear_and_relu_in_one_gpu_kernel_keep_nan_and_zeros():
    import cupy
    model = _on_gpu(models.MLP(6, 5, 3))
    calls = []
    for x, in _calls((4, 6)):
        x[0, 0] = numpy.nan
        x[1] = 0
        calls.append((x,))
    jf = testing.assert_jit_matches_eager(model.forward, calls,
                                          expect_entries=1)
    assert 'LinearFunction+ReLU' in [
        n.op for n in jf.cache_entries()[0].graph.nodes]
    assert bool(cupy.isnan(jf(calls[0][0]).array[0]).all())


def test_relu_gradient_on_gpu_is_chainers_kernel():
    """ReLUGrad2 on GPU gives 0 where y <= 0 even for a NaN gradient
    (its CPU formula, ``gy * (y > 0)``, gives NaN there)."""
    import cupy

    def f(x):
        return F.relu(x * 2.0)

    jf = chainerjit.jit(f)
    for x, in _calls((3, 4)):
        x[0, 0] = -1
        grads = []
        for fn in (f, jf):
            v = chainer.Variable(x)
            gy = cupy.ones_like(x)
            gy[0, 0] = numpy.nan
            chainer.backward([fn(v)], [chainer.Variable(gy)])
            grads.append(v.grad)
        testing.assert_results_equal(grads[1], grads[0], rtol=0, atol=0)
        assert float(grads[1][0, 0]) == 0
    assert jf.cache_info().hits >= 1
    assert jf.cache_entries()[0].training is not None


@pytest.mark.parametrize('cls', [
    pytest.param(cls, marks=pytest.mark.xfail(
        strict=True, raises=chainerjit.RecompileWarning,
        reason='on the GPU the batch size stays in the key, with a warning'))
    if cls is helpers.LastOfAComprehension else cls
    for cls in helpers.FORMS])
def test_sequence_models_keep_one_entry_for_every_length_and_batch_on_gpu(
        cls):
    """The trip count and the batch stay symbolic on the GPU: the same
    forms as on the CPU, training with gradients, at new lengths, batch
    sizes and values."""
    jitted = helpers._matches_eager(cls, helpers._calls(), device='@cupy:0')
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


def test_two_lengths_keep_one_entry_on_gpu():
    jitted = two_lengths._matches_eager(
        *two_lengths._twins(two_lengths.Seq2Seq, '@cupy:0'),
        two_lengths._calls())
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


@pytest.mark.parametrize('train', [False, True])
@pytest.mark.parametrize('cls', [sizes_seen._ZerosThenSteps,
                                 sizes_seen._LazyState,
                                 sizes_seen._WhileSteps])
def test_steps_and_batch_in_any_order_keep_one_entry_on_gpu(cls, train):
    """A batch of one early, a first call of one step, steps and batch
    changed at once: the sizes seen open both axes on the GPU too."""
    for order in sizes_seen.ORDERS[:3]:
        jitted = sizes_seen._calls_alike(cls(), order, train,
                                         sizes_seen._steps, '@cupy:0')
        assert sizes_seen._signatures(jitted) == ['xs: f32[T,B,3]'], (
            jitted.cache_report())


def test_a_batch_of_one_between_others_keeps_one_entry_on_gpu():
    jitted = sizes_seen._calls_alike(
        sizes_seen._MLP(), [(64,), (1,), (64,), (1,), (8,)], True,
        sizes_seen._rows, '@cupy:0')
    assert sizes_seen._signatures(jitted) == ['x: f32[B,12]'], (
        jitted.cache_report())


@pytest.mark.parametrize('train', [False, True])
def test_numbers_of_a_counter_counting_down_on_gpu(train):
    """A reversed loop masked by ``lengths > t``: its numbers follow the
    length on the GPU too, one entry."""
    jitted = counting_down._matches_eager(counting_down._FirstStepPeeled,
                                          train, '@cupy:0')
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


def test_an_int_compared_with_a_gpu_argument_gives_eagers_values():
    # ``t < lengths`` (the comparison reflected to CuPy's) runs around a
    # graph break on the GPU: eager's values, the other lines compiled.
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        counting_down._matches_eager(counting_down._RangeDown, True,
                                     '@cupy:0')
