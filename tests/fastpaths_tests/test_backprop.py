"""The fast ``loss.backward()`` through jitted nodes
(chainerjit/fastpaths/backprop.py, ``_native.lean_backward``): every gradient
bit for bit as under
Chainer's own ``backward`` (the same nodes' ``backward`` in the same
order, the same sums in the same order), and Chainer's own path wherever
the fast one would skip something that is not a no-op."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import fastpaths
from chainerjit import testing
from chainerjit.fastpaths import _native
from chainerjit.fastpaths import backprop


class MLP(chainer.Chain):

    def __init__(self):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(6, 8)
            self.l2 = L.Linear(8, 5)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


class TwoOutputs(chainer.Chain):

    def __init__(self):
        super(TwoOutputs, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(6, 8)
            self.l2 = L.Linear(8, 5)

    def forward(self, x):
        h = F.tanh(self.l1(x))
        return self.l2(h), h


def _chainers(run):
    """``run()`` under Chainer's own code."""
    return testing.with_fast_paths_off(run, 'backprop')


def _jitted(cls):
    numpy.random.seed(0)
    model = cls()
    model.forward = chainerjit.jit(model.forward)
    return model


def _inputs(calls=3, shape=(7, 6)):
    rng = numpy.random.RandomState(1)
    return [rng.standard_normal(shape).astype(numpy.float32)
            for _ in range(calls)]


def _labels(n=7, classes=5):
    return numpy.random.RandomState(2).randint(0, classes, n).astype(
        numpy.int32)


def _grads(model, *variables):
    found = [p.grad for _, p in sorted(model.namedparams())]
    found.extend(v.grad for v in variables)
    return [None if g is None else g.copy() for g in found]


def _assert_same(run):
    expected = _chainers(run)
    actual = run()
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        if e is None:
            assert a is None
        else:
            numpy.testing.assert_array_equal(a, e)
    return actual


def _mlp_steps(step):
    """Runs ``step(model, x, t)`` for a few calls (the first records) and
    returns the gradients after each."""
    def run():
        model = _jitted(MLP)
        model.cleargrads()  # a new link's gradients are NaN
        results = []
        for array in _inputs():
            x = chainer.Variable(array)
            step(model, x, _labels())
            results.extend(_grads(model, x))
        return results
    return run


def _cleared(loss_of):
    def step(model, x, t):
        model.cleargrads()
        loss_of(model, x, t).backward()
    return step


STEPS = {
    'loss': lambda model, x, t: F.softmax_cross_entropy(model(x), t),
    'two forwards': lambda model, x, t: F.softmax_cross_entropy(
        model(x), t) + F.softmax_cross_entropy(model(x * 2), t),
    'a diamond': lambda model, x, t: F.sum(F.tanh(model(x))) +
    F.sum(model(x) * model(x)),
    'a weight shared with an eager op': lambda model, x, t: F.sum(
        F.linear(model(x), model.l1.W[:, :5])),
    'a leaf used twice': lambda model, x, t: F.sum(model(x) * F.sum(x)),
    'an eager head': lambda model, x, t: F.mean_squared_error(
        F.sigmoid(model(x)), numpy.full((7, 5), 0.5, numpy.float32)),
}


@pytest.mark.parametrize('name', sorted(STEPS))
def test_gradients_are_chainers_bit_for_bit(name):
    _assert_same(_mlp_steps(_cleared(STEPS[name])))


def test_gradients_accumulate_without_cleargrads():
    def step(model, x, t):
        F.softmax_cross_entropy(model(x), t).backward()
    _assert_same(_mlp_steps(step))


def test_zerograds_accumulate_into_zeros():
    def step(model, x, t):
        model.zerograds()
        F.softmax_cross_entropy(model(x), t).backward()
    _assert_same(_mlp_steps(step))


def test_lazy_grad_sum():
    def step(model, x, t):
        model.cleargrads()
        with chainer.using_config('lazy_grad_sum', True):
            loss = F.sum(model(x)) + F.sum(model(x * 3))
        loss.backward()
    _assert_same(_mlp_steps(step))


def test_a_loss_scale_scales_and_is_recorded():
    def step(model, x, t):
        model.cleargrads()
        F.softmax_cross_entropy(model(x), t).backward(loss_scale=8.0)
        assert model.l1.W._loss_scale == 8.0
    _assert_same(_mlp_steps(step))


def test_an_initial_gradient_set_by_hand():
    def step(model, x, t):
        model.cleargrads()
        y = model(x)
        y.grad = numpy.arange(35, dtype=numpy.float32).reshape(7, 5)
        y.backward()
        assert y.grad is None  # as in Chainer: the start's grad is taken
    _assert_same(_mlp_steps(step))


def _two_outputs(use):
    def run():
        model = _jitted(TwoOutputs)
        results = []
        for array in _inputs():
            x = chainer.Variable(array)
            model.cleargrads()
            y, h = model(x)
            use(y, h).backward()
            results.extend(_grads(model, x))
        return results
    return run


@pytest.mark.parametrize('use', [
    lambda y, h: F.sum(y),  # only one output in the loss
    lambda y, h: F.sum(y) + F.sum(h * h),
    lambda y, h: F.sum(h),
])
def test_several_outputs(use):
    _assert_same(_two_outputs(use))


def test_an_unchained_output():
    def use(y, h):
        h.unchain_backward()
        return F.sum(y) + F.sum(h)
    _assert_same(_two_outputs(use))


def _spy(monkeypatch):
    calls = []
    original = backprop._chainer_backward

    def spied(*args):
        calls.append(args)
        return original(*args)
    monkeypatch.setattr(backprop, '_chainer_backward', spied)
    return calls


def _jitted_loss():
    model = _jitted(MLP)
    model.cleargrads()  # a new link's gradients are NaN
    x = _inputs(1)[0]
    model(x)
    return model, F.softmax_cross_entropy(model(x), _labels())


def test_a_jitted_graph_takes_the_fast_path(monkeypatch):
    calls = _spy(monkeypatch)
    model, loss = _jitted_loss()
    loss.backward()
    assert calls == []
    assert model.l1.W.grad is not None


def test_an_eager_graph_takes_chainers_path(monkeypatch):
    calls = _spy(monkeypatch)
    y = chainer.Variable(numpy.ones((3, 4), numpy.float32))
    F.sum(y * y).backward()
    assert len(calls) == 1
    numpy.testing.assert_array_equal(y.grad, numpy.full((3, 4), 2))


@pytest.mark.parametrize('kwargs', [
    {'retain_grad': True}, {'enable_double_backprop': True}])
def test_options_it_does_not_take_go_to_chainer(monkeypatch, kwargs):
    calls = _spy(monkeypatch)
    model, loss = _jitted_loss()
    try:
        loss.backward(**kwargs)
    except NotImplementedError:  # double backprop through compiled code
        pass
    assert len(calls) == 1


class _Recorder(chainer.FunctionHook):

    def __init__(self):
        self.seen = []

    def backward_postprocess(self, function, in_data, out_grad):
        self.seen.append(function.label)


def test_function_hooks_take_chainers_path(monkeypatch):
    calls = _spy(monkeypatch)
    model, loss = _jitted_loss()
    with _Recorder() as hook:
        loss.backward()
    assert len(calls) == 1
    assert 'SoftmaxCrossEntropy' in hook.seen


def test_a_node_hook_takes_chainers_path(monkeypatch):
    calls = _spy(monkeypatch)
    model, loss = _jitted_loss()
    hook = _Recorder()
    loss.creator_node.add_hook(hook)
    loss.backward()
    assert len(calls) == 1
    assert hook.seen == ['SoftmaxCrossEntropy']


def test_debug_mode_takes_chainers_path(monkeypatch):
    calls = _spy(monkeypatch)
    model, loss = _jitted_loss()
    with chainer.using_config('debug', True):
        loss.backward()
    assert len(calls) == 1


class _BadGradient(chainer.FunctionNode):
    """An eager node whose backward returns ``grads(x)``."""

    def __init__(self, grads):
        self.grads = grads

    def forward(self, inputs):
        return inputs[0] * 2,

    def backward(self, indexes, grad_outputs):
        return self.grads(grad_outputs[0])


def _error_after_jitted(grads):
    def run():
        model = _jitted(MLP)
        model.cleargrads()
        x = _inputs(1)[0]
        model(x)
        y, = _BadGradient(grads).apply((model(x),))
        with pytest.raises(Exception) as caught:
            F.sum(y).backward()
        return [type(caught.value), str(caught.value)]
    return run


@pytest.mark.parametrize('grads', [
    lambda g: (g, g),  # too many gradients
    lambda g: (chainer.Variable(g.array[:3]),),  # a wrong shape
    lambda g: (chainer.Variable(g.array.astype(numpy.float64)),),
])
def test_an_eager_nodes_bad_gradient_fails_as_in_chainer(grads):
    expected = _chainers(_error_after_jitted(grads))
    assert _error_after_jitted(grads)() == expected
    assert expected[0] in (ValueError, TypeError)


def test_lean_backward_refuses_a_graph_without_jitted_nodes():
    y = chainer.Variable(numpy.ones((3,), numpy.float32))
    loss = F.sum(y * y)
    assert not _native.lean_backward(loss, None)
    assert y.grad is None and loss.grad is None


def test_a_non_scalar_loss_of_one_element_warns_as_in_chainer():
    model = _jitted(MLP)
    model.cleargrads()
    x = _inputs(1)[0][:1]
    model(x)
    y = F.sum(model(x), axis=1)
    with pytest.warns(DeprecationWarning):
        y.backward()
    assert model.l1.W.grad is not None


def test_turned_off(monkeypatch):
    monkeypatch.setenv('CHAINERJIT_FAST_BACKWARD', '0')
    fastpaths.uninstall('backprop')
    try:
        fastpaths.install('backprop')
        assert chainer.Variable.backward is backprop._chainer_backward
    finally:
        monkeypatch.delenv('CHAINERJIT_FAST_BACKWARD')
        fastpaths.install('backprop')
    assert chainer.Variable.backward is backprop.backward


def test_the_configuration_is_restored():
    model, loss = _jitted_loss()
    local = chainer.config._local.__dict__
    assert 'enable_backprop' not in local
    loss.backward()
    assert 'enable_backprop' not in local
    model, loss = _jitted_loss()
    with chainer.using_config('enable_backprop', True):
        loss.backward()
        assert local['enable_backprop'] is True
    assert 'enable_backprop' not in local


def test_the_configuration_is_restored_after_an_error():
    model = _jitted(MLP)
    model.cleargrads()
    x = _inputs(1)[0]
    model(x)
    y, = _BadGradient(lambda g: (g, g)).apply((model(x),))
    with chainer.using_config('enable_backprop', True):
        with pytest.raises(ValueError):
            F.sum(y).backward()
        assert chainer.config.enable_backprop is True


def test_the_loss_is_left_as_chainer_leaves_it():
    def run():
        model, loss = _jitted_loss()
        loss.backward(loss_scale=2.0)
        return [loss.grad, loss.grad_var, loss._grad_valid,
                model.l1.W._loss_scale, model.l1.W.grad_var.requires_grad]
    assert run() == _chainers(run)
    assert run()[:4] == [None, None, True, 2.0]
