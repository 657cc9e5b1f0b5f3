"""The fast optimizer update (``fastpaths.optimizers``) while the
optimizer's settings change during training, against an identical eager
model: learning rates and other hyperparameters changed between steps,
update rules disabled, removed or given hooks midway, loss scaling
(static, dynamic with fp16 overflows), fp16 parameters with and without
fp32 updates, the ``lossfun`` form, ``zerograds``, parameters without
gradients, two jitted children, a new target after ``setup``, optimizer
state saved and loaded, read-only parameters."""

import copy
import io
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from numpy.testing import assert_array_equal
import pytest

import chainerjit
from chainerjit.fastpaths import optimizers as jit_optimizers
from tests.runtime_tests.twins import _assert_compiled
from tests.runtime_tests.twins import _assert_params_equal
from tests.runtime_tests.twins import _normal
from tests.runtime_tests.twins import F16
from tests.runtime_tests.twins import F32
from tests.runtime_tests.twins import F64
from tests.runtime_tests.twins import MLP


pytestmark = pytest.mark.adversarial


# --- settings changed between steps ------------------------------------------


class _MLP(chainer.Chain):

    def __init__(self, dtype=numpy.float32):
        super(_MLP, self).__init__()
        init = chainer.initializers.Normal(dtype=dtype)
        with self.init_scope():
            self.l1 = L.Linear(5, 4, initialW=init,
                               initial_bias=chainer.initializers.Zero(dtype))
            self.l2 = L.Linear(4, 3, initialW=init,
                               initial_bias=chainer.initializers.Zero(dtype))

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


class _Two(chainer.Chain):

    def __init__(self):
        super(_Two, self).__init__()
        with self.init_scope():
            self.a = _MLP()
            self.b = _MLP()

    def forward(self, x):
        return self.a(x) + self.b(x)


def _opt_pair(make, setup=None, model_cls=_MLP, jit_children=False,
              **kw):
    numpy.random.seed(0)
    eager, jitted = model_cls(**kw), model_cls(**kw)
    jitted.copyparams(eager)
    if jit_children:
        jitted.a.forward = chainerjit.jit(jitted.a.forward)
        jitted.b.forward = chainerjit.jit(jitted.b.forward)
    else:
        jitted.forward = chainerjit.jit(jitted.forward)
    pairs = []
    for model in (eager, jitted):
        opt = make()
        opt.setup(model)
        if setup is not None:
            setup(opt, model)
        pairs.append((model, opt))
    return pairs


def _train(pairs, steps=4, dtype=numpy.float32, lossfun=False,
           between=None):
    rng = numpy.random.RandomState(1)
    for step in range(steps):
        x = rng.standard_normal((6, 5)).astype(dtype)
        t = rng.randint(0, 3, 6).astype(numpy.int32)
        for model, opt in pairs:
            if between is not None:
                between(step, opt, model)
            if lossfun:
                opt.update(lambda x, t: F.softmax_cross_entropy(
                    model(x), t), x, t)
            else:
                model.cleargrads()
                F.softmax_cross_entropy(model(x), t).backward()
                opt.update()
    (eager, eo), (jitted, jo) = pairs
    for (name, p), (_, q) in zip(sorted(eager.namedparams()),
                                 sorted(jitted.namedparams())):
        numpy.testing.assert_array_equal(q.array, p.array, err_msg=name)
    assert eo.t == jo.t


def test_optimizer_lossfun_form_with_args():
    _train(_opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01)),
           lossfun=True)


def test_optimizer_lr_changes_between_steps():
    def between(step, opt, model):
        opt.lr = 0.1 / (step + 1)
    _train(_opt_pair(lambda: chainer.optimizers.MomentumSGD(lr=0.1)),
           between=between)


def test_optimizer_adam_alpha_changes_between_steps():
    def between(step, opt, model):
        opt.hyperparam.alpha = 0.01 * (step + 1)
        if step == 2:
            model.l1.W.update_rule.hyperparam.alpha = 0.5
    _train(_opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01)),
           between=between)


def test_optimizer_rule_disabled():
    def setup(opt, model):
        model.l1.W.update_rule.enabled = False
    _train(_opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01),
                     setup=setup))


def test_optimizer_rule_disabled_midway():
    def between(step, opt, model):
        model.l2.b.update_rule.enabled = step % 2 == 0
    _train(_opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01)),
           between=between, steps=5)
    pairs = _opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01))
    _train(pairs, between=between, steps=5)
    (eager, _), (jitted, _) = pairs
    assert eager.l2.b.update_rule.t == jitted.l2.b.update_rule.t


def test_optimizer_hooks():
    def setup(opt, model):
        opt.add_hook(chainer.optimizer_hooks.WeightDecay(1e-3))
        opt.add_hook(chainer.optimizer_hooks.GradientClipping(0.1))
        opt.add_hook(chainer.optimizer_hooks.GradientHardClipping(-0.01,
                                                                  0.01))
        opt.add_hook(chainer.optimizer_hooks.Lasso(1e-3))
    _train(_opt_pair(lambda: chainer.optimizers.SGD(lr=0.1), setup=setup))


def test_optimizer_rule_hook():
    def setup(opt, model):
        model.l1.W.update_rule.add_hook(
            chainer.optimizer_hooks.WeightDecay(1e-2))
    _train(_opt_pair(lambda: chainer.optimizers.MomentumSGD(lr=0.1),
                     setup=setup))


def test_optimizer_fp16():
    _train(_opt_pair(lambda: chainer.optimizers.SGD(lr=0.1),
                     dtype=numpy.float16), dtype=numpy.float16)


def test_optimizer_fp16_fp32_update():
    def setup(opt, model):
        opt.use_fp32_update()
    _train(_opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01),
                     setup=setup, dtype=numpy.float16),
           dtype=numpy.float16)


def test_optimizer_loss_scaling():
    def setup(opt, model):
        opt.loss_scaling(scale=128.0)
    _train(_opt_pair(lambda: chainer.optimizers.SGD(lr=0.1), setup=setup))


def test_optimizer_two_jitted_children():
    pairs = _opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01),
                      model_cls=_Two, jit_children=True)
    _train(pairs)


def test_optimizer_zerograds_accumulate():
    def setup(opt, model):
        opt._use_cleargrads = False
    _train(_opt_pair(lambda: chainer.optimizers.MomentumSGD(lr=0.1),
                     setup=setup), lossfun=True)


def test_optimizer_param_without_grad():
    class M(_MLP):
        def __init__(self, **kw):
            super(M, self).__init__(**kw)
            with self.init_scope():
                self.unused = L.Linear(2, 2)
    _train(_opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01),
                     model_cls=M))


def test_optimizer_new_target_after_setup():
    pairs = _opt_pair(lambda: chainer.optimizers.SGD(lr=0.1))
    _train(pairs, steps=2)
    numpy.random.seed(5)
    fresh = _MLP(), _MLP()
    fresh[1].copyparams(fresh[0])
    for (model, opt), new in zip(pairs, fresh):
        opt.setup(new)
    _train([(fresh[0], pairs[0][1]), (fresh[1], pairs[1][1])], steps=2)


# --- more settings, hooks, scaling and state ---------------------------------


class Classifier(MLP):

    def __init__(self, dtype=F32, lazy=False):
        super(Classifier, self).__init__(None if lazy else 5, 4, 3, dtype)
        with self.init_scope():
            self.unused = L.Linear(2, 2, initialW=_normal(dtype),
                                   initial_bias=_normal(dtype))

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


def _optimizer_pairs(make, dtype=F32, setup=None, lazy=False):
    numpy.random.seed(0)
    eager = Classifier(dtype, lazy)
    jitted = copy.deepcopy(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    pairs = []
    for model in (eager, jitted):
        optimizer = make()
        optimizer.setup(model)
        if setup is not None:
            setup(optimizer, model)
        pairs.append((model, optimizer))
    return pairs


def _train_steps(pairs, steps=4, dtype=F32, before=None, style='backward',
                 scale=1):
    """Trains both models on the same batches; ``before(step, optimizer,
    model)`` runs before each step of each."""
    rng = numpy.random.RandomState(1)
    for step in range(steps):
        x = (rng.standard_normal((6, 5)) * scale).astype(dtype)
        t = rng.randint(0, 3, 6).astype(numpy.int32)
        for model, optimizer in pairs:
            if before is not None:
                before(step, optimizer, model)

            def loss():
                return F.softmax_cross_entropy(model(x), t)
            if style == 'lossfun':
                optimizer.update(loss)
                continue
            model.cleargrads()
            if style == 'twice':
                loss().backward()
            loss().backward(loss_scale=optimizer._loss_scale)
            optimizer.update()
    (eager, eager_opt), (jitted, jitted_opt) = pairs
    _assert_params_equal(eager, jitted)
    assert jitted_opt.t == eager_opt.t >= steps
    assert jit_optimizers._trains_jitted(jitted_opt)
    assert not jit_optimizers._trains_jitted(eager_opt)
    _assert_compiled(jitted.forward, steps - 1)


def _momentum():
    return chainer.optimizers.MomentumSGD(lr=0.1)


def _sgd():
    return chainer.optimizers.SGD(lr=0.1)


def _adam():
    return chainer.optimizers.Adam(alpha=0.01)


def _change_lr_and_momentum(step, optimizer, model):
    optimizer.lr = 0.1 / (step + 1)
    if hasattr(optimizer, 'momentum'):
        optimizer.momentum = 0.5 + 0.1 * step


def _change_alpha(step, optimizer, model):
    optimizer.alpha = 0.01 * (step + 1)
    optimizer.beta1 = 0.8 + 0.02 * step


def test_hyperparameters_changed_between_steps():
    for make, change in [(_momentum, _change_lr_and_momentum),
                         (_sgd, _change_lr_and_momentum),
                         (_adam, _change_alpha)]:
        _train_steps(_optimizer_pairs(make), before=change)


def test_one_parameters_learning_rate_changed_every_step():
    def per_param(step, optimizer, model):
        model.l1.W.update_rule.hyperparam.lr = 0.3 * (step + 1)
        model.l2.b.update_rule.hyperparam.momentum = 0.1 * step
    _train_steps(_optimizer_pairs(_momentum), before=per_param)


def test_disable_and_enable_update_midway():
    def toggle(step, optimizer, model):
        if step == 1:
            model.l1.disable_update()
        if step == 3:
            model.l1.enable_update()
    _train_steps(_optimizer_pairs(_momentum), steps=5, before=toggle)


def test_hooks_added_midway():
    def add(step, optimizer, model):
        if step == 2:
            model.l2.W.update_rule.add_hook(
                chainer.optimizer_hooks.WeightDecay(0.1))
            optimizer.add_hook(chainer.optimizer_hooks.GradientClipping(0.01))
        if step == 4:
            model.l2.W.update_rule.remove_hook('WeightDecay')
    _train_steps(_optimizer_pairs(_adam), steps=6, before=add)


def test_update_rule_removed_midway():
    def remove(step, optimizer, model):
        if step == 1:
            model.l2.b.update_rule = None
    _train_steps(_optimizer_pairs(_momentum), before=remove)


def test_static_loss_scaling():
    def scaled(optimizer, model):
        optimizer.loss_scaling(scale=128.0)
    _train_steps(_optimizer_pairs(_momentum, setup=scaled))


def test_dynamic_loss_scaling_with_fp16_and_overflows():
    def dynamic(optimizer, model):
        optimizer.loss_scaling(interval=1)
        optimizer.use_fp32_update()
    pairs = _optimizer_pairs(_momentum, F16, setup=dynamic)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)
        warnings.simplefilter('ignore', UserWarning)  # non-finite grads
        _train_steps(pairs, steps=20, dtype=F16, scale=300)
    assert pairs[1][1]._loss_scaling_isnan_ever  # some steps skipped
    assert pairs[1][1]._loss_scale == pairs[0][1]._loss_scale


@pytest.mark.parametrize('dtype', [F16, F64])
def test_other_dtypes_without_fp32_update(dtype):
    for make in (_sgd, _momentum, _adam):
        _train_steps(_optimizer_pairs(make, dtype), dtype=dtype)


def test_lazily_initialized_link_with_the_lossfun_form():
    def seed(step, optimizer, model):
        if step == 0:
            numpy.random.seed(7)  # the same initial weights for both
    _train_steps(_optimizer_pairs(_momentum, lazy=True), before=seed,
                 style='lossfun')


def test_lossfun_form_with_zerograds():
    def zerograds(optimizer, model):
        optimizer._use_cleargrads = False
    _train_steps(_optimizer_pairs(_adam, setup=zerograds), style='lossfun')


def test_gradients_of_two_backward_calls_before_an_update():
    _train_steps(_optimizer_pairs(_momentum), style='twice')


def test_more_optimizers():
    for make in [
            lambda: chainer.optimizers.AdamW(alpha=0.01,
                                             weight_decay_rate=0.1),
            lambda: chainer.optimizers.Adam(alpha=0.01, amsgrad=True),
            lambda: chainer.optimizers.CorrectedMomentumSGD(lr=0.1),
            lambda: chainer.optimizers.RMSpropGraves()]:
        _train_steps(_optimizer_pairs(make))


def test_an_unused_parameter_decays_under_adamw():
    pairs = _optimizer_pairs(lambda: chainer.optimizers.AdamW(
        alpha=0.01, weight_decay_rate=0.1))
    before = pairs[1][0].unused.W.array.copy()
    _train_steps(pairs, steps=1)
    _train_steps(pairs, steps=3)  # zero gradients, as eager allocates
    unused = pairs[1][0].unused.W
    assert_array_equal(unused.grad, numpy.zeros_like(unused.array))
    assert not numpy.array_equal(unused.array, before)


def test_optimizer_state_saved_and_loaded():
    pairs = _optimizer_pairs(_adam)
    _train_steps(pairs, steps=2)
    model_file, optimizer_file = io.BytesIO(), io.BytesIO()
    chainer.serializers.save_npz(model_file, pairs[0][0])
    chainer.serializers.save_npz(optimizer_file, pairs[0][1])
    loaded = _optimizer_pairs(_adam)
    for model, optimizer in loaded:
        model_file.seek(0)
        optimizer_file.seek(0)
        chainer.serializers.load_npz(model_file, model)
        chainer.serializers.load_npz(optimizer_file, optimizer)
        assert optimizer.t == 2
    _train_steps(loaded, steps=3)
    assert loaded[1][1].t == 5


def test_a_read_only_parameter_raises_as_in_chainer():
    pairs = _optimizer_pairs(_sgd)
    _train_steps(pairs, steps=2)
    x = numpy.ones((2, 5), F32)
    raised = []
    for model, optimizer in pairs:
        model.cleargrads()
        F.sum(model(x)).backward()
        model.l1.W.array.flags.writeable = False
        with pytest.raises(ValueError) as info:
            optimizer.update()
        raised.append(str(info.value))
    assert raised[0] == raised[1]
    _assert_params_equal(pairs[0][0], pairs[1][0])
