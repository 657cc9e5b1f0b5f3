"""Adversarial differential tests of the arena
(``chainerjit/backend/arena.py``) while training: optimizer steps,
backward after several forwards or of an older forward, outputs and
gradients held across steps, generic nodes retaining their inputs,
``forget``, dropout, batch normalization in every mode, loops in training
and truncated BPTT, each against eager Chainer.
"""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.backend_tests.test_arena_lifetimes import _arrays
from tests.backend_tests.test_arena_lifetimes import _Stateful
from tests.backend_tests.test_arena_lifetimes import _uses_arena
from tests.backend_tests.test_arena_lifetimes import ATOL
from tests.backend_tests.test_arena_lifetimes import RTOL
from tests.backend_tests.test_arena_loops import _Seq
from tests.backend_tests.test_arena_loops import _SeqViews


pytestmark = pytest.mark.adversarial


@pytest.fixture(autouse=True)
def _arena_on(monkeypatch):
    """These tests are about the arena: on whatever the environment says."""
    monkeypatch.setenv('CHAINERJIT_ARENA', '1')


# --- training ----------------------------------------------------------------

class _Net(chainer.Chain):

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(32, 64)
            self.l2 = L.Linear(64, 64)
            self.l3 = L.Linear(64, 10)
            self.ln = L.LayerNormalization(64)

    def forward(self, x):
        h = F.relu(self.l1(x))
        g = F.tanh(h * 2.0 + 1.0)  # MulConstant and AddConstant keep nothing
        k = self.ln(self.l2(g) - h)
        s = F.softmax(k * 0.5) * 3.0
        return self.l3(F.sigmoid(s) + g)


def _twins(model):
    eager = model.copy(mode='copy')
    model.forward = chainerjit.jit(model.forward)
    return model, eager


def _assert_params_close(a, b, rtol=1e-4, atol=1e-5):
    """Parameters and gradients; ``atol`` relative to the largest
    magnitude (float32 sums in another order round differently)."""
    pa, pb = dict(a.namedparams()), dict(b.namedparams())
    assert sorted(pa) == sorted(pb)
    for name in pa:
        for x, y in ((pa[name].array, pb[name].array),
                     (pa[name].grad, pb[name].grad)):
            assert (x is None) == (y is None), name
            if y is not None:
                scale = max(1.0, float(numpy.abs(y).max()))
                numpy.testing.assert_allclose(x, y, rtol=rtol,
                                              atol=atol * scale,
                                              err_msg=name)


@pytest.mark.parametrize('optimizer', ['SGD', 'Adam', 'MomentumSGD'])
def test_optimizer_steps_match_eager(rng, optimizer):
    model, eager = _twins(_Net())
    opts = []
    for m in (model, eager):
        opt = getattr(chainer.optimizers, optimizer)()
        opt.setup(m)
        opts.append(opt)
    t = rng.randint(0, 10, 24).astype(numpy.int32)
    for step in range(6):
        x = rng.standard_normal((24, 32)).astype(numpy.float32)
        for m, opt in zip((model, eager), opts):
            m.cleargrads()
            loss = F.softmax_cross_entropy(m(x), t)
            loss.backward()
            opt.update()
    _assert_params_close(model, eager)
    assert _uses_arena(model.forward)
    entry, = model.forward.cache_entries()
    assert '(arena' in entry.training.forward.dis()


def test_backward_after_several_forwards(rng):
    model, eager = _twins(_Net())
    t = numpy.arange(24, dtype=numpy.int32) % 10
    xs = [rng.standard_normal((24, 32)).astype(numpy.float32)
          for _ in range(5)]
    for m in (model, eager):
        m(xs[0])  # records the jit's entry
        m.cleargrads()
        losses = [F.softmax_cross_entropy(m(x), t) for x in xs[1:]]
        sum(losses[1:], losses[0]).backward()
    _assert_params_close(model, eager)
    assert '(arena' in model.forward.cache_entries()[0].training.forward.dis()


def test_backward_of_an_older_forward_after_a_newer_one(rng):
    model, eager = _twins(_Net())
    t = numpy.arange(24, dtype=numpy.int32) % 10
    xs = [rng.standard_normal((24, 32)).astype(numpy.float32)
          for _ in range(6)]
    for m in (model, eager):
        m(xs[0])
        m.cleargrads()
        old = F.softmax_cross_entropy(m(xs[1]), t)
        young = F.softmax_cross_entropy(m(xs[2]), t)
        m(xs[3])  # a forward whose graph is dropped
        old.backward()
        m(xs[4])
        young.backward()
    _assert_params_close(model, eager)


def test_outputs_kept_across_training_steps(rng):
    model, eager = _twins(_Net())
    t = numpy.arange(24, dtype=numpy.int32) % 10
    held = []
    opts = []
    for m in (model, eager):
        opt = chainer.optimizers.SGD(0.1)
        opt.setup(m)
        opts.append(opt)
    for step in range(5):
        x = rng.standard_normal((24, 32)).astype(numpy.float32)
        ys = []
        for m, opt in zip((model, eager), opts):
            m.cleargrads()
            y = m(x)
            F.softmax_cross_entropy(y, t).backward()
            opt.update()
            ys.append(y)
        held.append(ys)
    for y, ey in held:
        numpy.testing.assert_allclose(y.array, ey.array, 1e-4, 1e-5)


def _grad_calls(rng, *shapes, calls=4):
    return _arrays(rng, *shapes, calls=calls)


@pytest.mark.parametrize('fn', [
    lambda x, w: F.reshape(F.tanh(F.matmul(x, w) * 2.0) + 0.5, (-1,)),
    lambda x, w: (F.softmax(F.matmul(x, w) * 0.5) * 3.0).T,
    lambda x, w: F.sum(F.sigmoid(F.matmul(x, w) - 1.0) / 3.0, axis=1),
    lambda x, w: F.split_axis(F.relu(F.matmul(x, w) + 1.0) * 2.0, 2, 1),
    lambda x, w: (F.maximum(F.matmul(x, w), x * 2.0) * 0.5,
                  F.matmul(x, w) * 0.5),
    lambda x, w: F.layer_normalization(
        F.matmul(x, w) * 2.0, w[0], w[1]) * 1.5,
    lambda x, w: 1.0 / (F.matmul(x, w) ** 2 + 2.0),
], ids=['reshape', 'softmax_T', 'sigmoid_div', 'split', 'maximum',
        'layer_norm', 'div_from_constant'])
def test_gradients_match_eager(rng, fn):
    jitted = testing.assert_jit_grads_match_eager(
        fn, _grad_calls(rng, (16, 32), (32, 32)))
    assert jitted.cache_info().hits >= 2


def test_gradients_held_across_calls(rng):
    def f(x, w):
        return F.tanh(F.matmul(x, w) * 2.0) * 3.0 + 1.0
    jitted = chainerjit.jit(f)
    held = []
    for x_, w_ in _arrays(rng, (16, 32), (32, 32), calls=5):
        pair = []
        for fn in (f, jitted):
            x = chainer.Variable(x_.copy())
            w = chainer.Variable(w_.copy())
            y = fn(x, w)
            F.sum(y * y).backward()
            pair.append((y, x.grad, w.grad))
        held.append(pair)
    for (ey, egx, egw), (y, gx, gw) in held:
        numpy.testing.assert_allclose(y.array, ey.array, RTOL, ATOL)
        numpy.testing.assert_allclose(gx, egx, 1e-4, 1e-5)
        numpy.testing.assert_allclose(gw, egw, 1e-4, 1e-5)
    assert _uses_arena(jitted)


class _KeepsForBackward(chainer.FunctionNode):
    """A user op that retains its input for its backward."""

    def forward(self, inputs):
        self.retain_inputs((0,))
        x, = inputs
        return x * x,

    def backward(self, indexes, grad_outputs):
        x, = self.get_retained_inputs()
        return 2 * x * grad_outputs[0],


def test_a_generic_node_retaining_its_input_for_backward(rng):
    def f(x, w):
        h = F.tanh(F.matmul(x, w) * 2.0) + 1.0
        y, = _KeepsForBackward().apply((h,))
        return F.sum(y * 0.5, axis=1)
    testing.assert_jit_grads_match_eager(f, _grad_calls(rng, (16, 32),
                                                        (32, 32)))


def test_generic_node_retained_input_with_backward_after_more_forwards(rng):
    def f(x, w):
        h = F.tanh(F.matmul(x, w) * 2.0) + 1.0
        y, = _KeepsForBackward().apply((h,))
        return F.sum(y * 0.5)
    jitted = chainerjit.jit(f)
    w_ = rng.standard_normal((32, 32)).astype(numpy.float32)
    xs = [rng.standard_normal((16, 32)).astype(numpy.float32)
          for _ in range(5)]
    grads = []
    for fn in (f, jitted):
        w = chainer.Variable(w_.copy())
        fn(xs[0], w)
        losses = [fn(x, w) for x in xs[1:]]
        for loss in losses[::-1]:
            loss.backward()
        grads.append(w.grad)
    numpy.testing.assert_allclose(grads[1], grads[0], 1e-4, 1e-5)


def test_forget_in_training(rng):
    def f(x, w):
        h = F.forget(lambda a, b: F.tanh(F.matmul(a, b) * 2.0) + 1.0, x, w)
        return F.sum(h * 3.0, axis=1)
    testing.assert_jit_grads_match_eager(f, _grad_calls(rng, (16, 32),
                                                        (32, 32)))


class _Dropping(chainer.Chain):

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(32, 64)
            self.l2 = L.Linear(64, 10)

    def forward(self, x):
        h = F.relu(self.l1(x) * 2.0)
        h = F.dropout(h + 0.5, 0.3)
        return self.l2(F.tanh(h))


@pytest.mark.parametrize('backprop', [False, True])
def test_dropout_with_seeds(rng, backprop):
    model, eager = _twins(_Dropping())
    t = numpy.arange(16, dtype=numpy.int32) % 10
    held = []
    for step in range(4):
        x = rng.standard_normal((16, 32)).astype(numpy.float32)
        ys = []
        for m in (model, eager):
            numpy.random.seed(step)
            m.cleargrads()
            with chainer.using_config('enable_backprop', backprop):
                y = m(x)
                if backprop:
                    F.softmax_cross_entropy(y, t).backward()
            ys.append(y)
        held.append(ys)
    for y, ey in held:
        numpy.testing.assert_allclose(y.array, ey.array, RTOL, ATOL)
    if backprop:
        _assert_params_close(model, eager)


class _Normed(chainer.Chain):

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(32, 64)
            self.bn = L.BatchNormalization(64)
            self.l2 = L.Linear(64, 10)

    def forward(self, x):
        h = F.tanh(self.l1(x) * 2.0)
        h = F.relu(self.bn(h + 1.0))
        return self.l2(h * 0.5), h


@pytest.mark.parametrize('train,backprop', [
    (True, True), (True, False), (False, False), (False, True)])
def test_batch_normalization_modes(rng, train, backprop):
    model, eager = _twins(_Normed())
    opts = []
    for m in (model, eager):
        opt = chainer.optimizers.Adam()
        opt.setup(m)
        opts.append(opt)
    t = numpy.arange(16, dtype=numpy.int32) % 10
    held = []
    with chainer.using_config('train', train):
        for step in range(5):
            x = rng.standard_normal((16, 32)).astype(numpy.float32)
            outs = []
            for m, opt in zip((model, eager), opts):
                m.cleargrads()
                with chainer.using_config('enable_backprop', backprop):
                    y, h = m(x)
                    if backprop:
                        F.softmax_cross_entropy(y, t).backward()
                        opt.update()
                outs.append((y, h))
            held.append(outs)
    for (y, h), (ey, eh) in held:
        numpy.testing.assert_allclose(y.array, ey.array, 1e-4, 1e-5)
        numpy.testing.assert_allclose(h.array, eh.array, 1e-4, 1e-5)
    for name in ('avg_mean', 'avg_var'):
        numpy.testing.assert_allclose(getattr(model.bn, name),
                                      getattr(eager.bn, name), 1e-4, 1e-5)
    _assert_params_close(model, eager)


@pytest.mark.parametrize('cls,cell', [(_Seq, 'tanh'), (_Seq, 'gru'),
                                      (_SeqViews, 'gru')])
def test_loops_in_training(rng, cls, cell):
    model, eager = _twins(cls(cell=cell))
    for T in (4, 4, 6, 4):
        xs = rng.standard_normal((T, 8, 16)).astype(numpy.float32)
        h0 = rng.standard_normal((8, 32)).astype(numpy.float32)
        outs = []
        for m in (model, eager):
            m.cleargrads()
            ys, h = m(xs, h0)
            F.sum(ys * ys * 0.01 + 0.5 * F.sum(h)).backward()
            outs.append((ys, h))
        (ys, h), (eys, eh) = outs
        numpy.testing.assert_allclose(ys.array, eys.array, 1e-4, 1e-5)
        numpy.testing.assert_allclose(h.array, eh.array, 1e-4, 1e-5)
        _assert_params_close(model, eager)


def test_truncated_bptt_through_link_state(rng):
    model, eager = _twins(_Stateful())
    opts = []
    for m in (model, eager):
        opt = chainer.optimizers.SGD(0.05)
        opt.setup(m)
        opts.append(opt)
    for step in range(6):
        x = rng.standard_normal((16, 32)).astype(numpy.float32)
        for m, opt in zip((model, eager), opts):
            loss = F.sum(m(x)) * 0.01
            if step % 2 == 1:
                m.cleargrads()
                loss.backward()
                m.state.unchain_backward()
                opt.update()
    numpy.testing.assert_allclose(model.state.array, eager.state.array,
                                  1e-4, 1e-5)
    _assert_params_close(model, eager)
