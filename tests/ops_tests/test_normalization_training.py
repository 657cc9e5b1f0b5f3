"""Batch normalization in training mode, against eager Chainer: the link
and the function over several steps, dtypes, axes and options
(finetuning, running arrays in closures or as arguments), switching
between train and test mode, two forwards before one backward, outputs
partly used, running averages reassigned between calls, and training
with a convolution and SGD. Outputs, gradients, parameters and persistent
values are compared after every step.

The twins trainer here is shared by the training cases of the other op
families and of ``lean_apply``."""

import copy
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing

F16, F32, F64 = numpy.float16, numpy.float32, numpy.float64

pytestmark = pytest.mark.adversarial


def _r(rng, shape, dtype=F32):
    return rng.standard_normal(shape).astype(dtype)


def _calls(seed, shapes, n=3, dtype=F32):
    rng = numpy.random.RandomState(seed)
    return [tuple(_r(rng, s, dtype) for s in shapes) for _ in range(n)]


def _tol(dtype):
    return {F16: (5e-3, 5e-3), F32: (1e-5, 1e-6), F64: (1e-12, 1e-12)}[
        numpy.dtype(dtype).type]


class _BN(chainer.Chain):
    def __init__(self, size, dtype=F32, finetune=False, **kwargs):
        super(_BN, self).__init__()
        with self.init_scope():
            self.bn = L.BatchNormalization(size, dtype=dtype, **kwargs)
        self.finetune = finetune
        rng = numpy.random.RandomState(1)
        self.bn.gamma.array[...] = rng.uniform(0.5, 1.5, self.bn.gamma.shape)
        self.bn.beta.array[...] = rng.standard_normal(self.bn.beta.shape)

    def forward(self, x):
        return self.bn(x, finetune=self.finetune)


class _Net(chainer.Chain):
    """A chain of the given links whose forward is ``fwd(self, x)``."""

    def __init__(self, fwd, **links):
        super(_Net, self).__init__()
        self.fwd = fwd
        with self.init_scope():
            for name, link in links.items():
                setattr(self, name, link)

    def forward(self, x):
        return self.fwd(self, x)


def _persistent(model):
    return sorted((path + '/' + name, getattr(link, name))
                  for path, link in model.namedlinks()
                  for name in link._persistent)


def _check_state(jitted_model, eager_model, rtol, atol):
    for (name, e), (_, a) in zip(_persistent(eager_model),
                                 _persistent(jitted_model)):
        if e is None:
            assert a is None, name
            continue
        numpy.testing.assert_allclose(a, e, rtol=rtol, atol=atol,
                                      err_msg=name)


def _train_twins(model, batches, optimizer=None,
                 rtol=1e-5, atol=1e-6, loss=None, between=None,
                 expect_hits=True):
    """Trains an eager model and a jitted copy side by side; compares the
    outputs, parameter gradients, parameters and persistent values after
    every step."""
    eager = model
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    loss = loss or (lambda ys, g: F.sum(ys * g))
    opts = []
    for m in (eager, twin):
        opt = optimizer() if optimizer else chainer.optimizers.SGD(lr=0.1)
        opt.setup(m)
        opts.append(opt)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        for i, xs in enumerate(batches):
            if between is not None:
                between(i, eager, twin)
            outs = []
            for m, fwd, opt in ((eager, eager.forward, opts[0]),
                                (twin, jitted, opts[1])):
                m.cleargrads()
                ys = [fwd(x.copy()) for x in xs]
                g = numpy.random.RandomState(i).standard_normal(
                    ys[0].shape).astype(ys[0].dtype)
                total = sum(loss(y, g) for y in ys)
                total.backward()
                outs.append((ys, {n: p.grad for n, p in m.namedparams()}))
                opt.update()
            (e_ys, e_gs), (a_ys, a_gs) = outs
            for e, a in zip(e_ys, a_ys):
                testing.assert_results_equal(a, e, rtol, atol)
            for name in e_gs:
                numpy.testing.assert_allclose(a_gs[name], e_gs[name],
                                              rtol=rtol, atol=atol,
                                              err_msg='grad ' + name)
            _check_state(twin, eager, rtol, atol)
    assert jitted.cache_info().hits > 0 or not expect_hits
    for entry in jitted.cache_entries():
        assert entry.fallback is None and entry.training is not None
    return jitted


def _batches(seed, shape, n=4, dtype=F32, per_step=1):
    rng = numpy.random.RandomState(seed)
    return [[_r(rng, shape, dtype) * 3 + 1 for _ in range(per_step)]
            for _ in range(n)]


@pytest.mark.parametrize('dtype', [F16, F32, F64])
@pytest.mark.parametrize('shape', [(5, 4), (3, 4, 5, 2), (1, 4, 3, 3)])
def test_bn_link_training_steps_match_eager(dtype, shape):
    rtol, atol = _tol(dtype)
    if dtype is F16:
        rtol, atol = 2e-2, 2e-2
    _train_twins(_BN(4, dtype), _batches(0, shape, dtype=dtype),
                 rtol=rtol, atol=atol)


@pytest.mark.parametrize('kwargs,shape', [
    (dict(use_gamma=False), (4, 4, 3)),
    (dict(use_beta=False, decay=0.5, eps=1e-1), (3, 4, 2, 2)),
    (dict(axis=(0, 2)), (3, 4, 5)),
    (dict(axis=0), (6, 4)),
])
def test_bn_link_options(kwargs, shape):
    size = 4 if 'axis' not in kwargs else tuple(
        d for i, d in enumerate(shape) if i not in (
            (kwargs['axis'],) if isinstance(kwargs['axis'], int)
            else kwargs['axis']))
    net = _Net(lambda m, x: m.bn(x) * 2,
               bn=L.BatchNormalization(size, **kwargs))
    _train_twins(net, _batches(37, shape))


def test_bn_switching_train_and_test_mode_while_training():
    model = _BN(4)
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    rng = numpy.random.RandomState(38)
    for train in (True, True, False, True, False, True):
        x = _r(rng, (5, 4, 2, 2)) * 2 + 1
        with chainer.using_config('train', train):
            e, a = model.forward(x), jitted(x.copy())
            g = _r(rng, e.shape)
            F.sum(e * g).backward()
            F.sum(a * g).backward()
        testing.assert_results_equal(a, e)
        _check_state(twin, model, 1e-6, 1e-7)
        for (n, p), (_, q) in zip(sorted(model.namedparams()),
                                  sorted(twin.namedparams())):
            numpy.testing.assert_allclose(q.grad, p.grad, rtol=1e-5,
                                          atol=1e-6, err_msg=n)
    assert jitted.cache_info().hits > 0


def test_bn_float16_input_float32_link():
    # x float16, gamma float32: the intermediate dtype is promoted.
    model = _BN(4, F32)
    _train_twins(model, _batches(1, (6, 4, 3, 3), dtype=F16), rtol=2e-2,
                 atol=2e-2)


@pytest.mark.parametrize('shape', [(6, 4), (2, 4, 3, 3)])
def test_bn_finetune_counts_like_eager(shape):
    # N (so decay) changes on every call: each call records anew.
    _train_twins(_BN(4, finetune=True), _batches(2, shape, n=5),
                 expect_hits=False)


def test_bn_two_forwards_before_one_backward():
    _train_twins(_BN(4), _batches(3, (4, 4, 2, 2), per_step=2))


def test_bn_output_partly_used():
    def loss(y, g):
        return F.sum(y[:, 1:3] * g[:, 1:3])
    _train_twins(_BN(4), _batches(4, (5, 4, 3, 2)), loss=loss)


def test_bn_running_averages_reassigned_between_calls():
    def between(i, eager, twin):
        if i in (1, 3):
            rng = numpy.random.RandomState(i)
            mean, var = _r(rng, 4), rng.uniform(0.5, 2, 4).astype(F32)
            eager.bn.avg_mean, eager.bn.avg_var = mean, var
            twin.bn.avg_mean, twin.bn.avg_var = mean.copy(), var.copy()
    _train_twins(_BN(4), _batches(5, (6, 4)), between=between)


def test_bn_with_conv_relu_trains_with_sgd():
    numpy.random.seed(0)
    net = _Net(lambda m, x: m.fc(F.relu(m.bn(m.c(x)))),
               c=L.Convolution2D(3, 4, 3, pad=1),
               bn=L.BatchNormalization(4), fc=L.Linear(4 * 5 * 5, 3))
    _train_twins(net, _batches(6, (2, 3, 5, 5), n=6), rtol=1e-4,
                 atol=1e-5,
                 optimizer=lambda: chainer.optimizers.MomentumSGD(lr=0.01))


def test_bn_recording_call_updates_running_stats_once():
    model = _BN(4)
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    x = _r(numpy.random.RandomState(7), (8, 4)) * 5 + 2
    model.forward(x)
    jitted(x.copy())
    assert twin.bn.N == model.bn.N
    _check_state(twin, model, 1e-6, 1e-7)


@pytest.mark.parametrize('axis', [None, 0, (0, 2), (0, 2, 3), 1])
def test_bn_function_axis(axis):
    shape = (4, 3, 2, 5)
    keep = [d for d in range(4)
            if d not in ((0, 2, 3) if axis is None else
                         ((axis,) if isinstance(axis, int) else axis))]
    size = tuple(shape[d] for d in keep)

    def f(x, gamma, beta):
        return F.batch_normalization(x, gamma, beta, axis=axis) * 2
    rng = numpy.random.RandomState(8)
    calls = [(_r(rng, shape), _r(rng, size), _r(rng, size))
             for _ in range(3)]
    testing.assert_jit_grads_match_eager(f, calls, 1e-5, 1e-5)


def test_bn_function_with_running_arrays_in_a_closure():
    rng = numpy.random.RandomState(9)
    stats = {k: (_r(rng, 3), rng.uniform(0.5, 2, 3).astype(F32))
             for k in ('eager', 'jit')}
    stats['jit'] = tuple(a.copy() for a in stats['eager'])

    def make(key):
        # (A dict of its own: one holding the eager twin's arrays too would
        # change, as those are not the program's to write, at every eager
        # call.)
        held = {'stats': stats[key]}

        def f(x, gamma, beta):
            mean, var = held['stats']
            return F.batch_normalization(x, gamma, beta, running_mean=mean,
                                         running_var=var, decay=0.7)
        return f
    eager, jfn = make('eager'), chainerjit.jit(make('jit'))
    calls = [(_r(rng, (5, 3, 2)), _r(rng, 3), _r(rng, 3))
             for _ in range(3)]
    testing.assert_jit_grads_match_eager(eager, calls, jitted=jfn)
    for e, a in zip(stats['eager'], stats['jit']):
        numpy.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7)


def test_bn_function_with_running_arrays_as_arguments():
    def f(x, gamma, beta, mean, var):
        return F.batch_normalization(x, gamma, beta, running_mean=mean,
                                     running_var=var)
    jfn = chainerjit.jit(f)
    rng = numpy.random.RandomState(10)
    for _ in range(3):
        x, gamma, beta = _r(rng, (6, 3)), _r(rng, 3), _r(rng, 3)
        mean, var = _r(rng, 3), rng.uniform(0.5, 2, 3).astype(F32)
        em, ev, jm, jv = mean.copy(), var.copy(), mean.copy(), var.copy()
        y_e = f(chainer.Variable(x), gamma, beta, em, ev)
        y_j = jfn(chainer.Variable(x.copy()), gamma, beta, jm, jv)
        testing.assert_results_equal(y_j, y_e)
        numpy.testing.assert_allclose(jm, em, rtol=1e-6)
        numpy.testing.assert_allclose(jv, ev, rtol=1e-6)


def test_bn_function_without_running_arrays_float64():
    def f(x, gamma, beta):
        return F.batch_normalization(x, gamma, beta, eps=1e-3)
    rng = numpy.random.RandomState(11)
    calls = [(_r(rng, (3, 2, 4, 4), F64), _r(rng, 2, F64), _r(rng, 2, F64))
             for _ in range(3)]
    testing.assert_jit_grads_match_eager(f, calls, 1e-12, 1e-12)


@pytest.mark.parametrize('backend', ['onnxruntime', 'auto', 'numpy'])
def test_bn_of_a_link_in_a_closure_updates_running_stats_once(
        backend, monkeypatch):
    # The link is no argument: its running averages are the node's own,
    # which the runs that only check or time a program (onnxruntime's
    # trials, a new batch size's check) put back too.
    from chainerjit.runtime import backends
    monkeypatch.setattr(backends, 'CHOOSE_AFTER_SECONDS', 0.0)

    def make():
        numpy.random.seed(0)
        return chainer.Sequential(L.Linear(5, 4), L.BatchNormalization(4))
    eager, held = make(), make()

    def loss(x):
        return F.relu(held(x))
    jitted = chainerjit.jit(loss, backend=backend)
    rng = numpy.random.RandomState(11)
    for batch in (4, 4, 7, 4, 2, 9, 7):
        x = _r(rng, (batch, 5)) * 3 + 1
        expected = F.relu(eager(chainer.Variable(x)))
        actual = jitted(chainer.Variable(x.copy()))
        testing.assert_results_equal(actual, expected, 1e-5, 1e-5)
        for name in ('avg_mean', 'avg_var'):
            numpy.testing.assert_allclose(
                getattr(held[1], name), getattr(eager[1], name),
                rtol=1e-5, atol=1e-6, err_msg='%s at %d' % (name, batch))
    assert jitted.cache_info().hits > 0
