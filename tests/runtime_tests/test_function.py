"""The graph around a compiled training call (``runtime.function``: the
``CompiledFunction`` node a training call applies), against an identical
eager model: a stateful link, truncated backprop, several outputs, cuts
with ``unchain`` and ``unchain_backward``, gradients accumulated over
several backward calls, parameters changed between forward and backward,
and fp16 GAN updates.

Every test seeds its random numbers. What a compiled call returns and
takes is in ``test_function_values.py``, Chainer's features around it in
``test_function_features.py``; the model twins are in ``twins.py``.
"""

import copy

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from numpy.testing import assert_allclose
import pytest

import chainerjit
from tests.runtime_tests.twins import _assert_compiled
from tests.runtime_tests.twins import _assert_grads
from tests.runtime_tests.twins import _assert_params_equal
from tests.runtime_tests.twins import _normal
from tests.runtime_tests.twins import _params
from tests.runtime_tests.twins import _twins
from tests.runtime_tests.twins import _x
from tests.runtime_tests.twins import F16
from tests.runtime_tests.twins import F32
from tests.runtime_tests.twins import MLP


pytestmark = pytest.mark.adversarial


# --- the graph around a training hit ----------------------------------------

class Stepper(chainer.Chain):

    def __init__(self):
        super(Stepper, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(3, 4)
            self.out = L.Linear(4, 2)

    def forward(self, x):
        return self.out(self.lstm(x))


@pytest.mark.parametrize('backprop', [True, False])
def test_a_stateful_link_called_alone_follows_eager(rng, backprop):
    """Each call replays ``lstm.h = ...`` and ``lstm.c = ...``; with no
    other link assignment between the jitted calls (the eager twin runs
    first), the next hit must read the new state, not the Variables the
    last model check found."""
    eager, jitted = _twins(Stepper)
    xs = [rng.randn(2, 3).astype(F32) for _ in range(8)]
    with chainer.using_config('enable_backprop', backprop):
        expected = [eager(x).array for x in xs]
        actual = [jitted(x).array for x in xs]
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert_allclose(a, e, rtol=1e-6, atol=1e-7, err_msg='call %d' % k)
    _assert_compiled(jitted.forward, 6)


def test_truncated_backprop_with_unchain_backward(rng):
    eager, jitted = _twins(Stepper)
    optimizers = []
    for model in (eager, jitted):
        optimizer = chainer.optimizers.SGD(0.1)
        optimizer.setup(model)
        optimizers.append(optimizer)
        model.lstm.reset_state()
    losses = [0, 0]
    for t in range(12):
        x = rng.randn(2, 3).astype(F32)
        for k, model in enumerate((eager, jitted)):
            losses[k] += F.sum(model(x) ** 2)
        if t % 4 == 3:
            for loss, model, optimizer in zip(losses, (eager, jitted),
                                              optimizers):
                model.cleargrads()
                loss.backward()
                loss.unchain_backward()
                optimizer.update()
            assert_allclose(losses[1].array, losses[0].array, rtol=1e-6)
            for p, q in zip(_params(eager), _params(jitted)):
                assert_allclose(q.array, p.array, rtol=1e-6, atol=1e-7)
            losses = [0, 0]
    _assert_compiled(jitted.forward, 5)


class TwoOutputs(MLP):

    def forward(self, x):
        h = F.tanh(self.l1(x))
        return h, self.l2(h)


class SharedWeight(MLP):
    """Three outputs; ``l1`` is used both before and after ``h``."""

    def __init__(self):
        super(SharedWeight, self).__init__(n_in=4, n_hidden=4, n_out=4)

    def forward(self, x):
        a = self.l1(x)
        h = F.tanh(a)
        return h, self.l1(h) + self.l2(x), F.sin(a)


def _two_outputs_after_a_hit(rng, cut_and_loss, cls=TwoOutputs):
    """Both models' ``(input grad, l1.W.grad, l2.W.grad)`` after
    ``cut_and_loss(*outputs)`` on ``outputs = model(x)`` (a hit for the
    jitted model) and backprop from the loss it returns."""
    eager, jitted = _twins(cls)
    x = _x(rng)
    jitted(chainer.Variable(x.copy()))
    found = []
    for model in (eager, jitted):
        model.cleargrads()
        v = chainer.Variable(x.copy())
        outputs = model(v)  # alive until backward (see README)
        cut_and_loss(*outputs).backward()
        found.append((v.grad, model.l1.W.grad, model.l2.W.grad))
    assert jitted.forward.cache_info().hits == 1
    for e, a in zip(*found):
        assert (a is None) == (e is None)
        if e is not None:
            assert_allclose(a, e, rtol=1e-5, atol=1e-6)


def _unchain_backward_h(h, y):
    h.unchain_backward()
    return F.sum(y * y)


def _unchain_h(h, y):
    h.unchain()
    return F.sum(y * y)


def _unchain_backward_y(h, y):
    y.unchain_backward()
    return F.sum(h * h) + F.sum(y * y)


def _no_cut(h, y):
    return F.sum(h * h) + F.sum(y[:, :1] * h[:, :1])


def test_two_outputs_of_a_hit(rng):
    for cut_and_loss in (_unchain_backward_y, _no_cut):
        _two_outputs_after_a_hit(rng, cut_and_loss)


def test_unchain_backward_on_one_of_two_outputs(rng):
    _two_outputs_after_a_hit(rng, _unchain_backward_h)


def test_unchain_on_an_output_another_output_depends_on(rng):
    _two_outputs_after_a_hit(rng, _unchain_h)


def test_a_freed_output_is_not_a_cut(rng):
    eager, jitted = _twins(TwoOutputs)
    x = _x(rng)
    jitted(chainer.Variable(x.copy()))
    grads = []
    for model in (eager, jitted):
        v = chainer.Variable(x.copy())
        y = model(v)[1]  # h is freed at once
        F.sum(y * y).backward()
        grads.append(v.grad)
    assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-6)
    _assert_compiled(jitted.forward)


def _cut_h_of_three(cut):
    def cut_and_loss(h, y, z):
        getattr(h, cut)()
        return F.sum(y * y) + F.sum(z) + F.sum(h)
    return cut_and_loss


@pytest.mark.parametrize('cut', ['unchain', 'unchain_backward'])
def test_cutting_one_of_three_outputs_with_a_shared_weight(rng, cut):
    """unchain_backward on h also cuts z (made from h's ancestor a);
    l1's weight still gets the gradient of its use after h."""
    for _ in range(2):  # the cut backward is compiled once, then reused
        _two_outputs_after_a_hit(rng, _cut_h_of_three(cut), SharedWeight)


class LoopTwoOutputs(MLP):

    def __init__(self):
        super(LoopTwoOutputs, self).__init__(n_in=4, n_hidden=4, n_out=4)

    def forward(self, xs):
        h = xs[0]
        for t in range(1, len(xs)):
            h = F.tanh(self.l1(h) + xs[t])
        return h, self.l2(h)


def test_cutting_an_output_of_a_loop_program_is_a_clear_error(rng):
    jitted = LoopTwoOutputs()
    jitted.forward = chainerjit.jit(jitted.forward)
    xs = rng.randn(5, 3, 4).astype(F32)
    jitted(chainer.Variable(xs.copy()))
    h, y = jitted(chainer.Variable(xs.copy()))
    assert jitted.forward.cache_entries()[0].training is not None
    h.unchain()
    with pytest.raises(NotImplementedError, match='unchaining one of'):
        F.sum(y).backward()


def test_gradients_accumulate_over_several_backward_calls(rng):
    eager, jitted = _twins()
    for clear in ['cleargrads', 'zerograds', 'cleargrads', 'zerograds']:
        x1, x2 = _x(rng), _x(rng, 5)
        for model in (eager, jitted):
            getattr(model, clear)()
            F.sum(model(x1) ** 2).backward()
            F.sum(model(x2)).backward()
            F.sum(model(x1) * 3).backward()
        _assert_grads(eager, jitted)
    assert jitted.forward.cache_info().hits >= 9


def _steps_match(rng, step):
    """Three calls of ``step(model, v)`` on twins, from cleared grads, with
    an input Variable ``v``: its gradient and the parameters' agree."""
    eager, jitted = _twins()
    for _ in range(3):
        x = _x(rng)
        grads = []
        for model in (eager, jitted):
            model.cleargrads()
            v = chainer.Variable(x.copy())
            step(model, v)
            grads.append(v.grad)
        assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-6)
        _assert_grads(eager, jitted)


def test_backward_twice_through_the_same_graph(rng):
    def step(model, v):
        loss = F.sum(model(v) ** 2)
        loss.backward()
        loss.backward()
    _steps_match(rng, step)


def test_in_place_parameter_change_between_forward_and_backward(rng):
    def step(model, v):
        y = model(v)
        model.l2.W.array *= 2
        model.l1.W.array *= 3
        F.sum(y * y).backward()
    _steps_match(rng, step)


def test_parameter_array_replaced_between_forward_and_backward(rng):
    """Eager Chainer retains the Parameter and reads its current array in
    the backward; so does a training hit (``saved_inputs``)."""
    eager, jitted = _twins()
    jitted(chainer.Variable(_x(rng)))
    x = _x(rng)
    grads = []
    for model in (eager, jitted):
        model.cleargrads()
        v = chainer.Variable(x.copy())
        y = model(v)
        model.l2.W.array = model.l2.W.array * 2
        F.sum(y * y).backward()
        grads.append((v.grad, model.l1.W.grad))
    assert jitted.forward.cache_info().hits == 1
    for a, e in zip(grads[1], grads[0]):
        assert_allclose(a, e, rtol=1e-5, atol=1e-6)


def test_a_parameter_replaced_by_another_shape_is_a_clear_error(rng):
    eager, jitted = _twins()
    jitted(chainer.Variable(_x(rng)))
    y = jitted(chainer.Variable(_x(rng)))
    jitted.l2.W.array = jitted.l2.W.array[:, :-1].copy()
    with pytest.raises(ValueError, match='replaced between the forward and '
                       'the backward'):
        F.sum(y * y).backward()


class Discriminator(chainer.Chain):

    def __init__(self):
        super(Discriminator, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 6, initialW=_normal(F16),
                               initial_bias=_normal(F16))
            self.l2 = L.Linear(6, 1, initialW=_normal(F16),
                               initial_bias=_normal(F16))

    def forward(self, x):
        return self.l2(F.leaky_relu(self.l1(x)))


class Generator(chainer.Chain):

    def __init__(self):
        super(Generator, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(3, 4, initialW=_normal(F16),
                               initial_bias=_normal(F16))

    def forward(self, z):
        return F.tanh(self.l1(z))


def test_dcgan_update_order_with_fp16_parameters(rng):
    """Chainer's DCGAN update (update the discriminator, then backprop
    the generator's loss through the same discriminator graph) with
    float16 models and use_fp32_update, which replaces param.array."""
    numpy.random.seed(0)
    gen, dis = Generator(), Discriminator()
    setups = []
    for g, d, jit in ((gen, dis, False),
                      (copy.deepcopy(gen), copy.deepcopy(dis), True)):
        if jit:
            d.forward = chainerjit.jit(d.forward)
        opts = []
        for model in (g, d):
            optimizer = chainer.optimizers.Adam(alpha=0.01)
            optimizer.setup(model)
            optimizer.use_fp32_update()
            opts.append(optimizer)
        setups.append((g, d) + tuple(opts))

    def loss_dis(y_fake, y_real):
        return F.sum(F.softplus(y_fake)) + F.sum(F.softplus(-y_real))

    def loss_gen(y_fake):
        return F.sum(F.softplus(-y_fake))

    for _ in range(3):
        x_real = rng.randn(5, 4).astype(F16)
        z = rng.randn(5, 3).astype(F16)
        for g, d, g_opt, d_opt in setups:
            y_real = d(x_real)
            y_fake = d(g(z))
            d_opt.update(loss_dis, y_fake, y_real)
            g_opt.update(loss_gen, y_fake)
    (g1, d1, _, _), (g2, d2, _, _) = setups
    _assert_params_equal(g1, g2)
    _assert_params_equal(d1, d2)
