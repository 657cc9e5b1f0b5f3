"""Jitted functions that are not a model's own forward: a loss or an
evaluation step calling a global model, a training step, a helper reading
gradients or a configuration object. Their values, gradients and the
model's state must follow eager Chainer's as the model, its persistent
arrays and the Python objects they read change between calls.
"""

import copy
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing


F32 = numpy.float32


def _normalized_net():
    numpy.random.seed(0)
    return chainer.Sequential(L.Linear(4, 8), L.BatchNormalization(8),
                              F.relu, L.Linear(8, 3))


def _x(seed, batch=5):
    return numpy.random.RandomState(seed).randn(batch, 4).astype(F32)


@pytest.mark.parametrize('backend', ['auto', 'onnxruntime', 'numpy'])
def test_an_evaluation_sees_running_averages_training_updated(
        backend, monkeypatch):
    # The model is a global of the lambda: its persistent arrays are read
    # from it on every call, as a model's own (never an onnxruntime
    # session's constants).
    from chainerjit.runtime import backends
    monkeypatch.setattr(backends, 'CHOOSE_AFTER_SECONDS', 0.0)
    model = _normalized_net()
    evaluate = chainerjit.jit(lambda x: F.softmax(model(x)), backend=backend)
    for epoch in range(3):
        model(_x(10 + epoch, 16) * 3 + epoch)  # a training forward
        with chainer.using_config('train', False), \
                chainer.no_backprop_mode():
            for batch in (3, 7, 3):
                x = _x(epoch * 10 + batch, batch)
                testing.assert_results_equal(evaluate(x),
                                             F.softmax(model(x)))
    assert evaluate.cache_info().hits > 0


def test_a_persistent_array_read_by_numpy_and_python_follows_changes():
    model = _normalized_net()
    bn = model[1]

    def standardized(x):
        h = model[0](x).array
        scale = float(bn.avg_var[0])  # (a read into Python: runs eagerly)
        return (h - bn.avg_mean) / numpy.sqrt(bn.avg_var + 1e-5) * scale

    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        jitted = chainerjit.jit(standardized)
        for call in range(4):
            model(_x(20 + call, 16) * 2 + call)  # updates the averages
            x = _x(call)
            testing.assert_results_equal(jitted(x), standardized(x))


def test_a_global_variable_gets_its_gradient_on_every_call():
    lin = L.Linear(4, 5)
    bias = chainer.Variable(numpy.random.RandomState(1).randn(5).astype(F32))

    def f(x):
        return F.sum(F.tanh(lin(x) + bias))
    jitted = chainerjit.jit(f)
    for call in range(3):
        x = _x(call)
        bias.cleargrad()
        f(x).backward()
        expected = bias.grad.copy()
        bias.cleargrad()
        jitted(x).backward()
        numpy.testing.assert_allclose(bias.grad, expected, rtol=1e-6)
        bias.array += 0.5  # changed between calls, in place
    assert jitted.cache_info().hits >= 2


def test_a_training_step_inside_the_function_runs_every_part():
    # cleargrads(), backward() and optimizer.update() are Python effects:
    # each runs on every call, as eagerly.
    numpy.random.seed(0)
    model = chainer.Sequential(L.Linear(4, 6), F.relu, L.Linear(6, 3))
    twin = copy.deepcopy(model)
    optimizers = []
    for m in (model, twin):
        optimizers.append(chainer.optimizers.MomentumSGD(0.1))
        optimizers[-1].setup(m)

    def make_step(m, opt):
        def step(x, t):
            m.cleargrads()
            loss = F.softmax_cross_entropy(m(x), t)
            loss.backward()
            opt.update()
            return loss
        return step
    eager = make_step(model, optimizers[0])
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        jitted = chainerjit.jit(make_step(twin, optimizers[1]))
        for call in range(5):
            x, t = _x(call, 3), numpy.arange(3, dtype=numpy.int32)
            testing.assert_results_equal(jitted(x, t), eager(x, t))
            for (_, a), (_, b) in zip(sorted(twin.namedparams()),
                                      sorted(model.namedparams())):
                numpy.testing.assert_allclose(a.array, b.array, rtol=1e-6)
    assert optimizers[1].t == optimizers[0].t == 5


def test_a_global_variable_a_function_made_passes_gradients_back():
    # (made before the call by an op: its creator's parameters get their
    # gradients through it on every call, and a new array is seen)
    source = L.Linear(3, 5)
    held = {'h': source(_x(5)[:, :3])}

    def f(x):
        return F.sum(F.tanh(x[:, :1] + held['h']))
    jitted = chainerjit.jit(f)
    for call in range(3):
        x = _x(call)
        source.cleargrads()
        f(x).backward()
        expected = source.W.grad.copy()
        source.cleargrads()
        jitted(x).backward()
        numpy.testing.assert_allclose(source.W.grad, expected, rtol=1e-6)
    held['h'].array = numpy.zeros((5, 5), F32)
    testing.assert_results_equal(jitted(_x(9)), f(_x(9)))


def test_gradients_read_by_the_function_are_the_latest():
    model = chainer.Sequential(L.Linear(4, 3))

    def grad_norm():
        return sum(F.sum(p.grad_var ** 2) for p in model.params())
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        jitted = chainerjit.jit(grad_norm)
        for call in range(3):
            model.cleargrads()
            F.sum(model(_x(call)) ** 2).backward()
            testing.assert_results_equal(jitted(), grad_norm())


class _Config(object):
    temperature = 1.0  # a default the instance shadows later

    def __init__(self):
        self.step = 0

    @property
    def weight(self):
        return min(1.0, self.step / 4.0)


def test_class_defaults_and_properties_of_a_global_object_are_guarded():
    lin = L.Linear(4, 3)
    config = _Config()
    optimizer = chainer.optimizers.SGD(lr=0.1)
    optimizer.setup(lin)

    def f(x):
        h = F.sum(lin(x)) / config.temperature
        return h * config.weight * optimizer.lr
    jitted = chainerjit.jit(f)
    for call in range(5):
        config.step = call
        optimizer.lr = 0.1 / (call + 1)
        if call == 3:
            config.temperature = 0.25
        with chainer.no_backprop_mode():
            testing.assert_results_equal(jitted(_x(call)), f(_x(call)))


MODELS = {}


@pytest.mark.parametrize('backend', ['onnxruntime', 'numpy'])
@pytest.mark.parametrize('freeze', [False, True])
def test_arrays_of_a_model_in_a_dict_changed_in_place_are_seen(
        backend, freeze):
    # A link reached through a dict is no free link: its arrays are the
    # program's constants, which a session takes as inputs on every call
    # (never a copy of the recording's values).
    if freeze and backend == 'numpy':
        pytest.skip('serving mode needs onnxruntime')
    MODELS['net'] = model = _normalized_net()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.UnguardedWarning)
        evaluate = chainerjit.jit(lambda x: MODELS['net'](x),
                                  backend=backend, freeze=freeze)
        for call in range(4):
            model[1].avg_mean += 1.0
            model[1].avg_var *= 1.5
            with chainer.using_config('train', False), \
                    chainer.no_backprop_mode():
                x = _x(call)
                testing.assert_results_equal(evaluate(x), model(x))
    assert evaluate.cache_info().hits > 0


class _AttrDict(dict):
    __getattr__ = dict.__getitem__  # (a KeyError, not an AttributeError)


SETTINGS = _AttrDict(scale=2.0)


def test_a_global_whose_getattr_raises_other_errors_is_read():
    def f(x):
        return F.tanh(x) * SETTINGS.scale
    jitted = chainerjit.jit(f)
    for call in range(3):
        testing.assert_results_equal(jitted(_x(call)), f(_x(call)))


def _sum_of(x, *, model):
    return F.sum(model(x))


@pytest.mark.parametrize('form', ['default', 'keyword-only default',
                                  'partial'])
def test_a_model_bound_by_default_or_partial_is_followed(form):
    # Its layer replaced, its running averages reset by new arrays: the
    # ones the program updates are the model's.
    eager, twin = _normalized_net(), _normalized_net()
    if form == 'partial':
        import functools
        jitted = chainerjit.jit(functools.partial(_sum_of, model=twin))
    elif form == 'default':
        def loss(x, model=twin):
            return F.sum(model(x))
        jitted = chainerjit.jit(loss)
    else:
        def loss(x, *, model=twin):
            return F.sum(model(x))
        jitted = chainerjit.jit(loss)
    for call in range(5):
        if call == 2:  # a layer replaced, running averages reset
            layer = L.Linear(8, 3)
            eager[3], twin[3] = layer, copy.deepcopy(layer)
            for m in (eager, twin):
                m[1].avg_mean = numpy.zeros(8, F32)
        x = _x(call)
        testing.assert_results_equal(jitted(x), F.sum(eager(x)))
        numpy.testing.assert_allclose(twin[1].avg_mean, eager[1].avg_mean,
                                      rtol=1e-5, atol=1e-6)


class _Penalized(chainer.Chain):
    """A gradient penalty: ``chainer.grad`` of the output by the input,
    inside the forward."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 1)

    def forward(self, x):
        x = chainer.Variable(x)
        y = self.fc(x)
        gx, = chainer.grad([F.sum(y)], [x])
        return F.sum(y) + F.sum(gx * gx)


def test_a_gradient_penalty_in_the_forward_runs_eagerly():
    model = _Penalized()
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin)
    with pytest.warns(chainerjit.FallbackWarning, match='chainer.grad'):
        for call in range(4):
            x = _x(call)
            model.cleargrads()
            twin.cleargrads()
            expected, actual = model(x), jitted(x)
            testing.assert_results_equal(actual, expected)
            expected.backward()
            actual.backward()
            numpy.testing.assert_allclose(twin.fc.W.grad, model.fc.W.grad,
                                          rtol=1e-6)
