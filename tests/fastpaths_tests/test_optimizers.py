"""The fast optimizer update (chainerjit/fastpaths/optimizers.py): parameters
change bit for bit as under Chainer's own ``update``, for every optimizer and
hook, and the fast path applies only to targets that train a jitted
forward."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import fastpaths
from chainerjit.fastpaths import _native
from chainerjit.fastpaths import optimizers


class MLP(chainer.Chain):

    def __init__(self, dtype=numpy.float32):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(5, 4, initialW=chainer.initializers.Normal(
                dtype=dtype), initial_bias=chainer.initializers.Zero(dtype))
            self.l2 = L.Linear(4, 3, initialW=chainer.initializers.Normal(
                dtype=dtype), initial_bias=chainer.initializers.Zero(dtype))

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


OPTIMIZERS = [
    lambda: chainer.optimizers.SGD(lr=0.1),
    lambda: chainer.optimizers.MomentumSGD(lr=0.1),
    lambda: chainer.optimizers.Adam(alpha=0.01),
    lambda: chainer.optimizers.AdaGrad(),
    lambda: chainer.optimizers.RMSprop(),
    lambda: chainer.optimizers.AdaDelta(),
    lambda: chainer.optimizers.NesterovAG(),
    lambda: chainer.optimizers.SMORMS3(),
]


def _pair(make_optimizer, dtype=numpy.float32, setup=None):
    """An eager model with Chainer's update and a jitted twin."""
    numpy.random.seed(0)
    eager, jitted = MLP(dtype), MLP(dtype)
    jitted.copyparams(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    pairs = []
    for model in (eager, jitted):
        optimizer = make_optimizer()
        optimizer.setup(model)
        if setup is not None:
            setup(optimizer, model)
        pairs.append((model, optimizer))
    return pairs


def _train(pairs, steps=4, dtype=numpy.float32, lossfun=False):
    rng = numpy.random.RandomState(1)
    for _ in range(steps):
        x = rng.standard_normal((6, 5)).astype(dtype)
        t = rng.randint(0, 3, 6).astype(numpy.int32)
        for model, optimizer in pairs:
            def loss():
                return F.softmax_cross_entropy(model(x), t)
            if lossfun:
                optimizer.update(loss)
            else:
                model.cleargrads()
                loss().backward()
                optimizer.update()
    (eager, eager_opt), (jitted, jitted_opt) = pairs
    for (name, p), (_, q) in zip(sorted(eager.namedparams()),
                                 sorted(jitted.namedparams())):
        numpy.testing.assert_array_equal(q.array, p.array, err_msg=name)
    assert jitted_opt.t == eager_opt.t == steps


def _uses_fast_path(optimizer):
    return optimizers._trains_jitted(optimizer)


@pytest.mark.parametrize('make', OPTIMIZERS)
def test_every_optimizer_updates_bit_for_bit(make):
    pairs = _pair(make)
    _train(pairs)
    assert _uses_fast_path(pairs[1][1])
    assert not _uses_fast_path(pairs[0][1])


def test_lossfun_form():
    _train(_pair(OPTIMIZERS[1]), lossfun=True)


def _with_hooks(optimizer, model):
    optimizer.add_hook(chainer.optimizer_hooks.WeightDecay(1e-2))
    optimizer.add_hook(chainer.optimizer_hooks.GradientClipping(0.5))
    optimizer.add_hook(chainer.optimizer_hooks.GradientHardClipping(
        -0.1, 0.1))


def test_optimizer_hooks():
    _train(_pair(OPTIMIZERS[2], setup=_with_hooks))


def _rule_hook(optimizer, model):
    model.l1.W.update_rule.add_hook(chainer.optimizer_hooks.Lasso(0.1))
    model.l2.b.update_rule.enabled = False
    model.l2.W.update_rule.hyperparam.lr = 0.5


def test_per_parameter_hooks_disabled_rules_and_learning_rates():
    pairs = _pair(OPTIMIZERS[0], setup=_rule_hook)
    _train(pairs)
    # A rule with a hook of its own takes Chainer's path.
    model = pairs[1][0]
    assert not _native.plain_rule(model.l1.W.update_rule, model.l1.W)
    assert _native.plain_rule(model.l2.W.update_rule, model.l2.W)


def test_fp16_parameters_with_fp32_update():
    def fp32(optimizer, model):
        optimizer.use_fp32_update()
    _train(_pair(OPTIMIZERS[2], numpy.float16, setup=fp32),
           dtype=numpy.float16)


def test_a_parameter_without_a_gradient_gets_zeros():
    class Unused(MLP):
        def __init__(self, dtype=numpy.float32):
            super(Unused, self).__init__(dtype)
            with self.init_scope():
                self.unused = L.Linear(2, 2)

    numpy.random.seed(0)
    eager, jitted = Unused(), Unused()
    jitted.copyparams(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    pairs = []
    for model in (eager, jitted):
        optimizer = chainer.optimizers.MomentumSGD(lr=0.1)
        optimizer.setup(model)
        pairs.append((model, optimizer))
    _train(pairs)
    numpy.testing.assert_array_equal(jitted.unused.W.grad, 0)


def test_a_classifier_around_a_jitted_predictor_takes_the_fast_path():
    numpy.random.seed(0)
    eager, jitted = MLP(), MLP()
    jitted.copyparams(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    pairs = []
    for model in (L.Classifier(eager), L.Classifier(jitted)):
        optimizer = chainer.optimizers.Adam()
        optimizer.setup(model)
        pairs.append((model, optimizer))
    rng = numpy.random.RandomState(1)
    for _ in range(3):
        x = rng.standard_normal((6, 5)).astype(numpy.float32)
        t = rng.randint(0, 3, 6).astype(numpy.int32)
        for model, optimizer in pairs:
            optimizer.update(model, x, t)
    assert _uses_fast_path(pairs[1][1])
    for p, q in zip(eager.params(), jitted.params()):
        numpy.testing.assert_array_equal(q.array, p.array)


def test_uninstall_restores_chainers_update():
    try:
        fastpaths.uninstall('optimizers')
        assert chainer.optimizer.GradientMethod.update is \
            optimizers._chainer_update
        _train(_pair(OPTIMIZERS[0]))
    finally:
        fastpaths.install('optimizers')
    assert chainer.optimizer.GradientMethod.update is optimizers.update


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('make', [
    lambda: chainer.optimizers.SGD(lr=0.037),
    lambda: chainer.optimizers.MomentumSGD(lr=0.037, momentum=0.93)])
def test_sgd_rules_in_one_loop_give_the_rules_own_bits(dtype, make):
    # SGD and momentum SGD run as one loop (chainerjit.ops._loops_elementwise);
    # parameters holding NaN, infinities and signed zeros change exactly
    # as under the rule's own update_core_cpu.
    rng = numpy.random.RandomState(0)
    params = []
    for _ in range(2):
        link = chainer.Link()
        with link.init_scope():
            link.w = chainer.Parameter(rng.standard_normal(7).astype(dtype))
        params.append(link)
    for link in params:
        link.w.array[...] = [numpy.nan, numpy.inf, -0.0, 0.0, 1e-30, -2, 3]
    for step in range(3):
        grad = rng.standard_normal(7).astype(dtype)
        grad[2 + step] = -0.0
        for i, link in enumerate(params):
            link.w.grad = grad.copy()
            if step == 0:
                link.optimizer = make()
                link.optimizer.setup(link)
            rule = link.w.update_rule
            rule.t += 1
            if rule.state is None:
                rule._init_states(link.w)
            if i == 0:
                rule.update_core_cpu(link.w)
            else:
                assert _native.update_in_one_pass(rule, link.w)
        assert params[0].w.array.tobytes() == params[1].w.array.tobytes()


def test_learning_rates_are_read_as_chainer_reads_them():
    """The fast update reads a rule's hyperparameters along their parents
    in C: a rate set on the optimizer later, or on one rule, is the one
    used, as Chainer's own lookup finds it."""
    link = chainer.Link()
    with link.init_scope():
        link.w = chainer.Parameter(numpy.ones(3, numpy.float32))
        link.v = chainer.Parameter(numpy.ones(3, numpy.float32))
    optimizer = chainer.optimizers.MomentumSGD(lr=0.1, momentum=0.5)
    optimizer.setup(link)
    optimizer.lr = 0.25  # after setup: the rules read their parent
    link.v.update_rule.hyperparam.momentum = 0.75
    for param in link.params():
        param.grad = numpy.full(3, 2, numpy.float32)
        rule = param.update_rule
        rule._init_states(param)
        expected = param.array - 0.25 * 2  # v = -lr * grad the first time
        assert _native.update_in_one_pass(rule, param)
        numpy.testing.assert_array_equal(param.array, expected)
        assert rule.hyperparam.momentum == (0.75 if param is link.v
                                            else 0.5)
    # No rate anywhere along the chain: Chainer's error.
    rule = chainer.optimizers.sgd.SGDRule(chainer.optimizer.Hyperparameter())
    with pytest.raises(AttributeError):
        _native.update_in_one_pass(rule, link.w)
