"""Adversarial differential tests of the Cython hot paths: the cache-hit
call (``_calls.CachedCall``), the fast optimizer update
(``chainerjit.fastpaths.optimizers``) and the LSTM lowering (``ops/rnn.py``
with
``_elementwise``), each against an identical eager model.

Every test seeds its random numbers. Tests marked ``xfail(strict=True)``
pin down a difference from eager Chainer that chainerjit has today; each
reason says what differs."""

import copy
import io
import pickle
import threading
import types
import warnings

import chainer
import chainer.functions as F
import chainer.link_hooks
import chainer.links as L
import numpy
from numpy.testing import assert_allclose
from numpy.testing import assert_array_equal
import pytest

import chainerjit
from chainerjit import errors
from chainerjit.fastpaths import optimizers as jit_optimizers


F32 = numpy.float32
F64 = numpy.float64
F16 = numpy.float16


def _normal(dtype=F32, scale=0.5):
    return chainer.initializers.Normal(scale, dtype=dtype)


class MLP(chainer.Chain):

    def __init__(self, n_in=4, n_hidden=5, n_out=3, dtype=F32):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(n_in, n_hidden, initialW=_normal(dtype),
                               initial_bias=_normal(dtype))
            self.l2 = L.Linear(n_hidden, n_out, initialW=_normal(dtype),
                               initial_bias=_normal(dtype))

    def forward(self, x):
        return self.l2(F.tanh(self.l1(x)))


class Decorated(MLP):

    @chainerjit.jit
    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


class DecoratedEager(MLP):
    forward = Decorated.forward.__wrapped__


def _twins(cls=MLP, *args, **kwargs):
    """An eager model and a copy with a jitted forward."""
    numpy.random.seed(0)
    eager = cls(*args, **kwargs)
    jitted = copy.deepcopy(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    return eager, jitted


def _decorated_twins(n_hidden=5):
    numpy.random.seed(0)
    jitted = Decorated(n_hidden=n_hidden)
    eager = DecoratedEager(n_hidden=n_hidden)
    eager.copyparams(jitted)
    return eager, jitted


def _params(model):
    return [p for _, p in sorted(model.namedparams())]


def _assert_grads(eager, jitted, rtol=1e-5, atol=1e-6):
    for (name, p), (_, q) in zip(sorted(eager.namedparams()),
                                 sorted(jitted.namedparams())):
        assert (q.grad is None) == (p.grad is None), name
        if p.grad is not None:
            assert_allclose(q.grad, p.grad, rtol=rtol, atol=atol,
                            err_msg=name)


def _assert_params_equal(eager, jitted):
    for (name, p), (_, q) in zip(sorted(eager.namedparams()),
                                 sorted(jitted.namedparams())):
        assert q.array.dtype == p.array.dtype, name
        assert_array_equal(q.array, p.array, err_msg=name)


def _assert_compiled(jfn, hits=1):
    for entry in jfn.cache_entries():
        assert entry.fallback is None, entry.fallback
    assert jfn.cache_info().hits >= hits, jfn.cache_report()


def _x(rng, n=3, d=4, dtype=F32):
    return rng.randn(n, d).astype(dtype)


def _train_call(model, x):
    """Clears the gradients, calls the model on a fresh Variable around
    ``x`` and backprops a squared sum; returns ``(y, input Variable)``."""
    model.cleargrads()
    v = chainer.Variable(x.copy())
    y = model(v)
    F.sum(y * y).backward()
    return y, v


# --- the hit path: configurations, flags and arguments ---------------------

class BNNet(chainer.Chain):

    def __init__(self):
        super(BNNet, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 5)
            self.bn = L.BatchNormalization(5)
            self.l2 = L.Linear(5, 3)

    def forward(self, x):
        return self.l2(F.relu(self.bn(self.l1(x))))


CONFIGS = [(True, True), (False, False), (True, False), (False, True)]


def test_train_and_backprop_settings_alternating_between_hits(rng):
    eager, jitted = _twins(BNNet)
    for train, backprop in CONFIGS * 3:
        x = _x(rng, 6)
        outs = []
        with chainer.using_config('train', train), \
                chainer.using_config('enable_backprop', backprop):
            for model in (eager, jitted):
                model.cleargrads()
                y = model(x)
                if backprop:
                    F.sum(y * y).backward()
                outs.append(y)
        assert outs[1].requires_grad == outs[0].requires_grad
        assert (outs[1].creator is None) == (outs[0].creator is None)
        assert_allclose(outs[1].array, outs[0].array, rtol=1e-5, atol=1e-6)
        for name in ('avg_mean', 'avg_var'):
            assert_allclose(getattr(jitted.bn, name),
                            getattr(eager.bn, name), rtol=1e-6, atol=1e-7)
        _assert_grads(eager, jitted)
    info = jitted.forward.cache_info()
    assert (info.misses, info.hits) == (4, 8)


def test_input_requires_grad_changing_between_calls(rng):
    eager, jitted = _twins()
    for kind in ['array', 'constant', 'variable'] * 3:
        x = _x(rng)
        args = []
        for model in (eager, jitted):
            model.cleargrads()
            arg = x.copy() if kind == 'array' else chainer.Variable(
                x.copy(), requires_grad=kind == 'variable')
            F.sum(model(arg) ** 2).backward()
            args.append(arg)
        if kind == 'variable':
            assert_allclose(args[1].grad, args[0].grad, rtol=1e-5, atol=1e-6)
        elif kind == 'constant':
            assert args[1].grad is None and args[0].grad is None
        _assert_grads(eager, jitted)
    info = jitted.forward.cache_info()
    assert (info.misses, info.hits) == (3, 6)


LAYOUTS = {
    'fortran': numpy.asfortranarray,
    'strided': lambda a: numpy.repeat(a, 2, axis=1)[:, ::2],
    'reversed': lambda a: numpy.ascontiguousarray(a[::-1])[::-1],
}


def test_hits_on_inputs_of_other_memory_layouts(rng):
    """The key holds shapes and dtypes, not strides: a program compiled
    for C-ordered inputs runs on other layouts."""
    eager, jitted = _twins()
    for model in (eager, jitted):
        _train_call(model, _x(rng.__class__(5)))
    for layout in sorted(LAYOUTS) * 2:
        x = LAYOUTS[layout](_x(rng))
        assert not x.flags.c_contiguous
        ye, ve = _train_call(eager, x)
        v = chainer.Variable(x)  # the strided array itself
        jitted.cleargrads()
        yj = jitted(v)
        F.sum(yj * yj).backward()
        assert_allclose(yj.array, ye.array, rtol=1e-6, atol=1e-7,
                        err_msg=layout)
        assert_allclose(v.grad, ve.grad, rtol=1e-5, atol=1e-6,
                        err_msg=layout)
        _assert_grads(eager, jitted)
    info = jitted.forward.cache_info()
    assert (info.misses, info.hits) == (1, 6)


def test_parameters_replaced_by_arrays_of_other_layouts(rng):
    eager, jitted = _twins()
    x = _x(rng)
    for step in range(4):
        if step == 2:
            for model in (eager, jitted):
                model.l1.W.array = numpy.asfortranarray(model.l1.W.array * 2)
                wide = numpy.repeat(model.l2.W.array, 2, axis=1)
                model.l2.W.array = wide[:, ::2]
        ye, ve = _train_call(eager, x)
        yj, vj = _train_call(jitted, x)
        assert_allclose(yj.array, ye.array, rtol=1e-6, atol=1e-7)
        assert_allclose(vj.grad, ve.grad, rtol=1e-5, atol=1e-6)
        _assert_grads(eager, jitted)
        with chainer.no_backprop_mode():
            assert_allclose(jitted(x).array, eager(x).array, rtol=1e-6,
                            atol=1e-7)
    assert jitted.forward.cache_info().misses == 2  # training, inference


def test_parameter_shapes_switching_back_and_forth(rng):
    eager, jitted = _twins()
    small = {name: p.array.copy() for name, p in eager.namedparams()}
    big = {'/l1/W': rng.randn(7, 4).astype(F32),
           '/l1/b': rng.randn(7).astype(F32),
           '/l2/W': rng.randn(3, 7).astype(F32),
           '/l2/b': rng.randn(3).astype(F32)}
    for arrays in [small, big, small, big, small, small]:
        for model in (eager, jitted):
            for name, p in model.namedparams():
                p.array = arrays[name].copy()
        x = _x(rng)
        ye, ve = _train_call(eager, x)
        yj, vj = _train_call(jitted, x)
        assert_allclose(yj.array, ye.array, rtol=1e-6, atol=1e-7)
        assert_allclose(vj.grad, ve.grad, rtol=1e-5, atol=1e-6)
        _assert_grads(eager, jitted)
    info = jitted.forward.cache_info()
    assert (info.misses, info.hits) == (2, 4)


def test_function_hook_on_every_other_call(rng):
    eager, jitted = _twins()
    for step in range(6):
        x = _x(rng)
        hooks = []
        ys = []
        for model in (eager, jitted):
            model.cleargrads()
            if step % 2:
                hook = chainer.function_hooks.TimerHook()
                with hook:
                    y = model(x)
                    F.sum(y).backward()
                hooks.append(len(hook.call_history))
            else:
                y = model(x)
                F.sum(y).backward()
            ys.append(y)
        assert_allclose(ys[1].array, ys[0].array, rtol=1e-6, atol=1e-7)
        _assert_grads(eager, jitted)
        if hooks:
            assert hooks[1] == hooks[0]  # each eager op seen by the hook
    assert jitted.forward.cache_info().hits == 2


def test_link_hooks_global_and_local_on_some_calls(rng):
    eager, jitted = _twins()
    for step in range(7):
        x = _x(rng)
        if step == 2:
            for model in (eager, jitted):
                model.l2.add_hook(chainer.link_hooks.TimerHook(), name='t')
        if step == 4:
            for model in (eager, jitted):
                model.l2.delete_hook('t')
        ys, seen = [], []
        for model in (eager, jitted):
            model.cleargrads()
            if step in (1, 5):
                with chainer.link_hooks.TimerHook() as hook:
                    y = model(x)
                seen.append(len(hook.call_history))
            else:
                y = model(x)
            F.sum(y * y).backward()
            ys.append(y)
        assert_allclose(ys[1].array, ys[0].array, rtol=1e-6, atol=1e-7)
        _assert_grads(eager, jitted)
        if seen:
            assert seen[1] == seen[0] > 0
    assert jitted.forward.cache_info().hits >= 2


class Inner(chainer.Chain):

    def __init__(self):
        super(Inner, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 4, initialW=_normal())

    def forward(self, x):
        return F.tanh(self.l1(x))


def test_a_jitted_model_inside_another_recording_and_on_its_own(rng):
    eager, inner = _twins(Inner)

    def twice(model):
        return lambda x: model(model(x)) * 2
    outer_eager, outer = twice(eager), chainerjit.jit(twice(inner))
    for step in range(5):
        if step == 3:
            for model in (eager, inner):
                model.l1.W.array *= 2
        x = _x(rng)
        results = []
        for model, outer_fn in ((eager, outer_eager), (inner, outer)):
            model.cleargrads()
            v = chainer.Variable(x.copy())
            y = outer_fn(v) + model(v)
            F.sum(y * y).backward()
            results.append((y.array, v.grad, model.l1.W.grad))
        for a, e in zip(results[1], results[0]):
            assert_allclose(a, e, rtol=1e-5, atol=1e-6)
    _assert_compiled(outer, 4)
    _assert_compiled(inner.forward, 4)


class TrainScaled(MLP):

    def forward(self, x):
        h = F.relu(self.l1(x))
        if chainer.config.train:
            h = h * 0.5
        return self.l2(h)


def test_another_thread_calls_with_its_own_configuration(rng):
    eager, jitted = _twins(TrainScaled)
    x = _x(rng)
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for _ in range(3):
            jitted(x)
    got = {}

    def worker():  # the global configuration: train, backprop
        got['y'] = [jitted(x) for _ in range(3)]

    with chainer.using_config('train', False), chainer.no_backprop_mode():
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(30)
        main = jitted(x)
        expected_test = eager(x)
    expected_train = eager(x)
    for y in got['y']:
        assert y.creator is not None
        assert_allclose(y.array, expected_train.array, rtol=1e-6, atol=1e-7)
    assert main.creator is None
    assert_allclose(main.array, expected_test.array, rtol=1e-6, atol=1e-7)


class _Rendezvous(object):
    """Stops a forward being recorded (the first call while armed) until
    the main thread lets it go."""

    def __init__(self):
        self.inside = threading.Event()
        self.go = threading.Event()
        self.armed = False

    def __call__(self):
        if self.armed:
            self.armed = False
            self.inside.set()
            self.go.wait(10)


_RENDEZVOUS = _Rendezvous()


class Waiting(chainer.Chain):

    def __init__(self):
        super(Waiting, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 3)

    def forward(self, x):
        h = self.l1(x)
        _RENDEZVOUS()
        return F.tanh(h)


def _while_another_thread_records(jitted, x, action):
    """Runs ``action`` in this thread while another thread records
    ``jitted``'s first call."""
    global _RENDEZVOUS
    _RENDEZVOUS = _Rendezvous()
    _RENDEZVOUS.armed = True

    def worker():
        with chainer.no_backprop_mode():
            jitted(x)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert _RENDEZVOUS.inside.wait(10)
        action()
    finally:
        _RENDEZVOUS.go.set()
        thread.join(30)


def test_a_report_from_another_thread_is_not_replayed(rng):
    """trace.record patches chainer.report process-wide; only the
    recording thread's reports become effects of the entry."""
    eager, jitted = _twins(Waiting)
    x = _x(rng)

    def report():
        with chainer.Reporter().scope({}):
            chainer.report({'other/value': chainer.Variable(
                numpy.array(5, F32))})

    _while_another_thread_records(jitted, x, report)
    for model in (eager, jitted):
        observed = {}
        with chainer.Reporter().scope(observed), chainer.no_backprop_mode():
            model(x)
            model(x)
        assert observed == {}


def test_another_threads_unrelated_link_does_not_force_eager_mode(rng):
    """Nor is another thread's assignment on an unrelated link (L.LSTM
    stepping) during a recording taken for the forward's."""
    eager, jitted = _twins(Waiting)
    other = L.LSTM(4, 3)
    x = _x(rng)

    def step():
        with chainer.no_backprop_mode():
            other(x)

    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.FallbackWarning)
        _while_another_thread_records(jitted, x, step)
    with chainer.no_backprop_mode():
        assert_allclose(jitted(x).array, eager(x).array, rtol=1e-6)
    _assert_compiled(jitted.forward)


def test_two_instances_of_a_decorated_class_interleaved(rng):
    pairs = [_decorated_twins(5), _decorated_twins(7)]
    for step in range(4):
        for eager, jitted in pairs + pairs[::-1]:
            x = _x(rng)
            ye, ve = _train_call(eager, x)
            yj, vj = _train_call(jitted, x)
            assert_allclose(yj.array, ye.array, rtol=1e-6, atol=1e-7)
            assert_allclose(vj.grad, ve.grad, rtol=1e-5, atol=1e-6)
            _assert_grads(eager, jitted)
    (_, a), (_, b) = pairs
    assert a.forward is not b.forward
    assert a.forward.cache_info().misses == b.forward.cache_info().misses == 1


COPIES = {
    'copy': lambda m: m.copy(mode='copy'),
    'deepcopy': copy.deepcopy,
    'pickle': lambda m: pickle.loads(pickle.dumps(m)),
}


@pytest.mark.parametrize('how', sorted(COPIES))
def test_a_copied_model_trains_on_its_own(rng, how):
    eager, jitted = _decorated_twins()
    x = _x(rng)
    for _ in range(2):
        _train_call(jitted, x)
        _train_call(eager, x)
    copies = [(eager, jitted), (eager.copy(mode='copy'),
                                COPIES[how](jitted))]
    assert copies[1][1].forward is not jitted.forward
    optimizers = [[chainer.optimizers.SGD(0.1) for _ in pair]
                  for pair in copies]
    for pair, opts in zip(copies, optimizers):
        for model, optimizer in zip(pair, opts):
            optimizer.setup(model)
    for step in range(3):
        for (eager_model, jitted_model), opts in zip(copies, optimizers):
            x = _x(rng)  # other data for the copy and the original
            for model, optimizer in zip((eager_model, jitted_model), opts):
                _train_call(model, x)
                optimizer.update()
            for p, q in zip(_params(eager_model), _params(jitted_model)):
                assert_allclose(q.array, p.array, rtol=1e-6, atol=1e-7)
    assert copies[1][1].forward.cache_info().misses == 1
    assert jitted.forward.cache_info().misses == 1


def test_copies_of_an_instance_attribute_jit_read_their_own_parameters(
        rng):
    eager, jitted = _twins()
    x = _x(rng)
    with chainer.no_backprop_mode():
        jitted(x)
        jitted(x)
    for k, how in enumerate(['deepcopy', 'pickle']):
        eager_copy = copy.deepcopy(eager)
        jitted_copy = COPIES[how](jitted)
        for model in (eager_copy, jitted_copy):
            model.l1.W.array[...] = 0.25 * (k + 1)
        with chainer.no_backprop_mode():
            for _ in range(3):
                assert_allclose(jitted_copy(x).array, eager_copy(x).array,
                                rtol=1e-6, atol=1e-7, err_msg=how)
                assert_allclose(jitted(x).array, eager(x).array,
                                rtol=1e-6, atol=1e-7, err_msg=how)
        _assert_compiled(jitted_copy.forward, 2)


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


class Multi(MLP):

    def forward(self, x):
        h = F.relu(self.l1(x))
        y = self.l2(h)
        self.last = y
        return {'y': y, 'h': h, 'both': (h, y), 'x': x}


LOSSES = {
    'y': lambda r, m: F.sum(r['y'] ** 2),
    'h': lambda r, m: F.sum(r['h'] ** 2),
    'both': lambda r, m: F.sum(r['both'][0]) + F.sum(r['both'][1] ** 2),
    'input': lambda r, m: F.sum(r['x'] * 3),
    'stored': lambda r, m: F.sum(m.last * r['h'][:, :3]),
}


def test_structured_outputs_with_gradients_through_some(rng):
    eager, jitted = _twins(Multi)
    # self.last, added by the first call, makes the second a miss too
    for loss in ['y', 'y'] + sorted(LOSSES) * 2:
        x = _x(rng)
        found = []
        for model in (eager, jitted):
            model.cleargrads()
            v = chainer.Variable(x.copy())
            result = model(v)
            assert result['x'] is v
            assert result['both'][0] is result['h']
            assert model.last is result['y']
            LOSSES[loss](result, model).backward()
            found.append((result, v))
        (re, ve), (rj, vj) = found
        for key in ('y', 'h'):
            assert_allclose(rj[key].array, re[key].array, rtol=1e-6,
                            atol=1e-7, err_msg=loss)
        assert_allclose(vj.grad, ve.grad, rtol=1e-5, atol=1e-6,
                        err_msg=loss)
        _assert_grads(eager, jitted)
    _assert_compiled(jitted.forward, 10)


def test_an_output_stored_on_the_model_is_the_returned_variable(rng):
    eager, jitted = _twins(Multi)
    x = _x(rng)
    with chainer.no_backprop_mode():
        for model in (eager, jitted):
            for _ in range(3):
                result = model(x)
            assert model.last.array is result['y'].array
            assert model.last is result['y']


class StoresACopy(MLP):

    def forward(self, x):
        y = self.l2(F.relu(self.l1(x)))
        self.last = chainer.Variable(y.array)
        return y


def test_a_stored_variable_of_the_same_array_stays_another_variable(rng):
    eager, jitted = _twins(StoresACopy)
    x = _x(rng)
    with chainer.no_backprop_mode():
        for model in (eager, jitted):
            for _ in range(3):
                y = model(x)
            assert model.last is not y
            assert_allclose(model.last.array, y.array)
    _assert_compiled(jitted.forward)


def test_results_kept_from_earlier_hits_stay_intact(rng):
    eager, jitted = _twins()
    xs = [_x(rng) for _ in range(4)]
    with chainer.no_backprop_mode():
        kept = [jitted(x) for x in xs]
        for x, y in zip(xs, kept):
            assert_allclose(y.array, eager(x).array, rtol=1e-6, atol=1e-7)
    kept = [jitted(x) for x in xs]
    variables = [chainer.Variable(x.copy()) for x in xs]
    grads = []
    for v in variables:
        F.sum(jitted(v) ** 2).backward()
        grads.append(v.grad)
    for x, y, g in zip(xs, kept, grads):
        v = chainer.Variable(x.copy())
        ye = eager(v)
        F.sum(ye ** 2).backward()
        assert_allclose(y.array, ye.array, rtol=1e-6, atol=1e-7)
        assert_allclose(g, v.grad, rtol=1e-5, atol=1e-6)


def test_results_changed_in_place_do_not_leak_into_later_hits(rng):
    eager, jitted = _twins()
    x = _x(rng)
    with chainer.no_backprop_mode():
        for _ in range(4):
            y = jitted(x)
            assert_allclose(y.array, eager(x).array, rtol=1e-6, atol=1e-7)
            y.array[...] = 7
    for _ in range(3):
        y = jitted(x)
        assert_allclose(y.array, eager(x).array, rtol=1e-6, atol=1e-7)
        y.array[...] = -7
        F.sum(y).backward()


def test_read_only_inputs_are_read_and_never_written(rng):
    eager, jitted = _twins()
    x = _x(rng)
    original = x.copy()
    x.flags.writeable = False
    with chainer.no_backprop_mode():
        for _ in range(3):
            assert_allclose(jitted(x).array, eager(x).array, rtol=1e-6,
                            atol=1e-7)
    for _ in range(3):
        v = chainer.Variable(x)
        F.sum(jitted(v) ** 2).backward()
    assert_array_equal(x, original)


def _elementwise(x, y):
    return F.tanh(x) * 2 + y * F.sigmoid(x)


def test_non_native_byte_order_inputs(rng):
    jitted = chainerjit.jit(_elementwise)
    with chainer.no_backprop_mode():
        for dtype in ['<f4', '>f4', '>f4', '<f4', '>f8', '>f8', '<f8']:
            x, y = [rng.randn(3, 4).astype(dtype) for _ in range(2)]
            expected, actual = _elementwise(x, y), jitted(x, y)
            assert actual.dtype == expected.dtype
            assert_array_equal(actual.array, expected.array, err_msg=dtype)
    assert jitted.cache_info().misses == 4


def test_an_empty_batch(rng):
    eager, jitted = _twins()
    for n in [0, 0, 3, 0]:
        x = numpy.zeros((n, 4), F32)
        with chainer.no_backprop_mode():
            assert jitted(x).shape == eager(x).shape == (n, 3)
        ye, ve = _train_call(eager, x)
        yj, vj = _train_call(jitted, x)
        assert vj.grad.shape == ve.grad.shape
        _assert_grads(eager, jitted)


def _gated(a, b):
    return F.tanh(a) * b + a * a


def test_aliased_arguments(rng):
    jitted = chainerjit.jit(_gated)
    x, y = _x(rng), _x(rng)
    for pattern in ['ab', 'ab', 'aa', 'aa', 'a_array', 'a_array',
                    'a_shared', 'a_shared', 'ab', 'aa']:
        found = []
        for fn in (_gated, jitted):
            a = chainer.Variable(x.copy())
            b = {'ab': chainer.Variable(y.copy()), 'aa': a,
                 'a_array': a.array,
                 'a_shared': chainer.Variable(a.array)}[pattern]
            out = fn(a, b)
            F.sum(out * out).backward()
            found.append((out.array, a.grad, getattr(b, 'grad', None)))
        for got, expected in zip(found[1], found[0]):
            assert (got is None) == (expected is None)
            if expected is not None:
                assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert jitted.cache_info().misses == 4


def _matmul_relu(h, W):
    return F.matmul(F.relu(h), W) * 2


def test_an_input_with_a_creator_and_a_parameter_argument(rng):
    numpy.random.seed(0)
    link = L.Linear(4, 4)
    jitted = chainerjit.jit(_matmul_relu)
    for _ in range(3):
        x = _x(rng)
        found = []
        for fn in (_matmul_relu, jitted):
            link.cleargrads()
            v = chainer.Variable(x.copy())
            out = fn(link(v) * 3, link.W)
            F.sum(out * out).backward()
            found.append((out.array, v.grad, link.W.grad.copy(),
                          link.b.grad.copy()))
        for got, expected in zip(found[1], found[0]):
            assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    _assert_compiled(jitted, 2)


def test_forget_around_a_jitted_model(rng):
    eager, jitted = _twins()
    for _ in range(4):
        x = _x(rng)
        found = []
        for model in (eager, jitted):
            model.cleargrads()
            v = chainer.Variable(x.copy())
            y = F.forget(lambda a: model(a) * 2, v)
            F.sum(y * y).backward()
            found.append((y.array, v.grad))
        for got, expected in zip(found[1], found[0]):
            assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        _assert_grads(eager, jitted)
    _assert_compiled(jitted.forward, 4)


class Dropping(MLP):

    def forward(self, x):
        h = F.dropout(F.relu(self.l1(x)), 0.3)
        return self.l2(F.dropout(h, 0.5))


def test_dropout_masks_follow_the_global_generator(rng):
    eager, jitted = _twins(Dropping)
    for step in range(6):
        x = _x(rng, 5)
        found = []
        with chainer.using_config('train', step % 3 != 2):
            for model in (eager, jitted):
                numpy.random.seed(100 + step)
                y, v = _train_call(model, x)
                found.append((y.array, v.grad, numpy.random.rand()))
        for got, expected in zip(found[1], found[0]):
            assert_array_equal(got, expected)
        _assert_grads(eager, jitted, rtol=0, atol=0)
    _assert_compiled(jitted.forward, 4)


def _maybe_double(x, y):
    if y.array is None:
        return F.identity(x) * 2
    return x * y


def test_an_uninitialized_variable_runs_eagerly(rng):
    jitted = chainerjit.jit(_maybe_double)
    x = _x(rng)
    expected = _maybe_double(x, chainer.Variable())
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.FallbackWarning)
        actual = jitted(x, chainer.Variable())
    assert_array_equal(actual.array, expected.array)


class Logs(MLP):

    def forward(self, x):
        return F.log(self.l1(x))


def test_debug_mode_nan_check_on_an_inference_hit(rng):
    eager, jitted = _twins(Logs)
    x = _x(rng)
    with chainer.no_backprop_mode(), warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)
        jitted(x)
        jitted(x)
        for model in (eager, jitted):
            with chainer.using_config('debug', True):
                with pytest.raises(RuntimeError):
                    model(x)


class Flagged(MLP):

    def forward(self, x):
        h = self.l1(x)
        if getattr(chainer.config, 'double_hidden', False):
            h = h * 2
        return self.l2(h)


def test_a_configuration_value_read_by_the_forward(rng):
    """A ``chainer.config`` entry read while recording is guarded: a
    change is a miss, recorded again, and a change back hits the first
    entry."""
    eager, jitted = _twins(Flagged)
    x = _x(rng)
    with chainer.no_backprop_mode():
        for flag in [False, False, True, True, False]:
            with chainer.using_config('double_hidden', flag):
                assert_allclose(jitted(x).array, eager(x).array, rtol=1e-6,
                                atol=1e-7)
    info = jitted.forward.cache_info()
    assert (info.hits, info.misses, info.currsize) == (3, 2, 2)
    with chainer.using_config('double_hidden', 2), \
            chainer.no_backprop_mode():
        text = jitted.forward.explain(x)
    assert 'chainer.config.double_hidden: ' in text and '-> 2' in text, text


class Configured(MLP):

    def __init__(self):
        super(Configured, self).__init__()
        self.options = types.SimpleNamespace(scale=1.0)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x))) * self.options.scale


def test_a_scalar_on_an_object_held_by_the_model(rng):
    """``self.options.scale``, read by the forward's own code, is a guard
    (guards._attribute_chains): a change is a miss, explained; so is
    replacing the object."""
    eager, jitted = _twins(Configured)
    x = _x(rng)
    with chainer.no_backprop_mode():
        for scale in [1.0, 1.0, 3.0, 3.0]:
            for model in (eager, jitted):
                model.options.scale = scale
            assert_allclose(jitted(x).array, eager(x).array, rtol=1e-6,
                            atol=1e-7)
        for model in (eager, jitted):
            model.options = types.SimpleNamespace(scale=-2.0)
        text = jitted.forward.explain(x)
        assert 'self.options.scale: ' in text and '-> -2.0' in text, text
        assert_allclose(jitted(x).array, eager(x).array, rtol=1e-6,
                        atol=1e-7)
        del jitted.options.scale
        assert 'self.options.scale: -2.0 -> (absent)' in \
            jitted.forward.explain(x)
    info = jitted.forward.cache_info()
    assert (info.misses, info.hits) == (3, 2)


def test_a_one_entry_cache_with_alternating_batch_sizes(rng):
    numpy.random.seed(0)
    eager = MLP()
    jitted = copy.deepcopy(eager)
    jitted.forward = chainerjit.jit(maxsize=1)(jitted.forward)
    for n in [2, 3, 2, 2, 3, 3, 2]:
        x = _x(rng, n)
        ye, ve = _train_call(eager, x)
        yj, vj = _train_call(jitted, x)
        assert_allclose(yj.array, ye.array, rtol=1e-6, atol=1e-7)
        assert_allclose(vj.grad, ve.grad, rtol=1e-5, atol=1e-6)
        _assert_grads(eager, jitted)
    info = jitted.forward.cache_info()
    assert (info.misses, info.hits, info.currsize) == (5, 2, 1)


class Tied(chainer.Chain):

    def __init__(self):
        super(Tied, self).__init__()
        with self.init_scope():
            self.enc = L.Linear(6, 3)
            self.dec_b = chainer.Parameter(numpy.zeros(6, F32))

    def forward(self, x):
        h = F.tanh(self.enc(x))
        return F.linear(h, F.transpose(self.enc.W), self.dec_b)


def test_tied_weights_chainer_grad_and_retained_output_grads(rng):
    eager, jitted = _twins(Tied)
    for _ in range(3):
        x = rng.randn(4, 6).astype(F32)
        found = []
        for model in (eager, jitted):
            model.cleargrads()
            y = model(x)
            loss = F.mean_squared_error(y, x)
            loss.backward(retain_grad=True)
            gW, = chainer.grad([F.sum(model(x) ** 2)], [model.enc.W])
            found.append((loss.array, y.grad, model.enc.W.grad,
                          model.dec_b.grad, gW.array))
        for got, expected in zip(found[1], found[0]):
            assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    _assert_compiled(jitted.forward, 4)


# --- the optimizer update ---------------------------------------------------

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


# --- the LSTM lowering ------------------------------------------------------

def _lstm(c, x):
    return F.lstm(c, x)


def _bits_equal(actual, expected):
    """Same dtype, shape and bytes (NaNs and signs of zeros included)."""
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert_array_equal(actual, expected)
    assert_array_equal(numpy.signbit(actual), numpy.signbit(expected))


def _lstm_run(fn, c, x, gc, gh):
    """``(c, h, c_prev.grad, x.grad)`` of ``fn(c, x)`` with the output
    gradients ``gc`` and ``gh`` (``None``: no gradient through it)."""
    cv = chainer.Variable(c.copy(order='K'))
    xv = chainer.Variable(x.copy(order='K'))
    c_next, h = fn(cv, xv)
    outputs = [(o, g) for o, g in ((c_next, gc), (h, gh)) if g is not None]
    chainer.backward([o for o, _ in outputs],
                     [chainer.Variable(g.copy()) for _, g in outputs])
    return c_next.array, h.array, cv.grad, xv.grad


def _fortran(shape):
    return lambda rng, d: numpy.asfortranarray(rng.randn(*shape).astype(d))


def _c(shape):
    return lambda rng, d: rng.randn(*shape).astype(d)


LSTM_CASES = {
    'c_ordered': (_c((3, 4)), _c((3, 16))),
    'fortran': (_fortran((3, 4)), _fortran((3, 16))),
    'strided_gates': (_c((3, 4)),
                      lambda rng, d: rng.randn(3, 32).astype(d)[:, ::2]),
    'reversed_rows': (lambda rng, d: rng.randn(3, 4).astype(d)[::-1],
                      lambda rng, d: rng.randn(3, 16).astype(d)[::-1]),
    'shrinking_extra_axis': (_c((5, 3, 2)), _c((2, 12, 2))),
    'shrinking_fortran': (_fortran((5, 3)), _fortran((2, 12))),
    'extra_axes_fortran': (_fortran((2, 3, 4)), _fortran((2, 12, 4))),
}


def _lstm_calls(rng, case, dtype, outputs, n=3):
    make_c, make_x = LSTM_CASES[case]
    calls = []
    for _ in range(n):
        c, x = make_c(rng, dtype), make_x(rng, dtype)
        rows = (len(x),) + c.shape[1:]
        gc = rng.randn(*c.shape).astype(dtype) if 'c' in outputs else None
        gh = rng.randn(*rows).astype(dtype) if 'h' in outputs else None
        calls.append((c, x, gc, gh))
    return calls


@pytest.mark.parametrize('case', sorted(LSTM_CASES))
def test_lstm_bit_for_bit_on_other_layouts(rng, case):
    jitted = chainerjit.jit(_lstm)
    for dtype in (F32, F64):
        for c, x, gc, gh in _lstm_calls(rng, case, dtype, 'ch'):
            expected = _lstm_run(_lstm, c, x, gc, gh)
            actual = _lstm_run(jitted, c, x, gc, gh)
            for a, e in zip(actual, expected):
                _bits_equal(a, e)
    _assert_compiled(jitted, 4)


@pytest.mark.parametrize('output', ['c', 'h'])
def test_lstm_gradient_through_one_output_equals_eagers_values(
        rng, output):
    """Bit for bit, signs of zeros included, in the C loop and in the
    NumPy passes."""
    for case in ('c_ordered', 'fortran', 'shrinking_extra_axis'):
        jitted = chainerjit.jit(_lstm)
        for dtype in (F32, F64):
            for c, x, gc, gh in _lstm_calls(rng, case, dtype, output):
                expected = _lstm_run(_lstm, c, x, gc, gh)
                actual = _lstm_run(jitted, c, x, gc, gh)
                for a, e in zip(actual, expected):
                    _bits_equal(a, e)
        _assert_compiled(jitted, 4)


@pytest.mark.parametrize('case', ['c_ordered', 'fortran'])
def test_lstm_gradient_through_c_only_keeps_the_signs_of_zeros(rng, case):
    jitted = chainerjit.jit(_lstm)
    for c, x, gc, gh in _lstm_calls(rng, case, F32, 'c'):
        expected = _lstm_run(_lstm, c, x, gc, gh)
        actual = _lstm_run(jitted, c, x, gc, gh)
        _bits_equal(actual[3], expected[3])


@pytest.mark.parametrize('layout', [numpy.ascontiguousarray,
                                    numpy.asfortranarray])
def test_lstm_gradient_through_h_only_keeps_the_signs_of_zeros(
        rng, layout):
    jitted = chainerjit.jit(_lstm)
    for _ in range(3):
        c = layout(rng.randn(3, 4).astype(F32) * 20)  # tanh(c) is +-1
        x = layout(rng.randn(3, 16).astype(F32) * 20)
        gh = -numpy.abs(rng.randn(3, 4)).astype(F32)
        expected = _lstm_run(_lstm, c, x, None, gh)
        actual = _lstm_run(jitted, c, x, None, gh)
        _bits_equal(actual[2], expected[2])


def test_lstm_gradient_through_c_only_propagates_nan(rng):
    jitted = chainerjit.jit(_lstm)
    for step in range(3):
        c = rng.randn(3, 4).astype(F64)
        x = rng.randn(3, 16).astype(F64)
        if step:
            x[0, 0] = numpy.nan  # gate a of unit 0, row 0: c is NaN there
        gc = rng.randn(3, 4).astype(F64)
        expected = _lstm_run(_lstm, c, x, gc, None)
        actual = _lstm_run(jitted, c, x, gc, None)
        assert_array_equal(numpy.isnan(actual[2]), numpy.isnan(expected[2]))


def _three_steps(c, x1, x2, x3):
    c, h1 = F.lstm(c, x1)
    c, h2 = F.lstm(c, x2)
    c, h3 = F.lstm(c, x3)
    return c, h3 * 2 + h1[:len(h3)]


@pytest.mark.parametrize('shapes', [
    [(3, 4), (3, 16), (3, 16), (3, 16)],
    [(4, 5), (4, 20), (3, 20), (2, 20)],
    [(4, 2, 3), (4, 8, 3), (3, 8, 3), (1, 8, 3)],
])
def test_lstm_steps_with_a_shrinking_batch_bit_for_bit(rng, shapes):
    jitted = chainerjit.jit(_three_steps)
    for step, dtype in enumerate([F32, F32, F32, F64, F64, F64]):
        arrays = [rng.randn(*s).astype(dtype) for s in shapes]
        found = []
        for fn in (_three_steps, jitted):
            variables = [chainer.Variable(a.copy()) for a in arrays]
            outs = fn(*variables)
            grads = numpy.random.RandomState(step)
            chainer.backward(list(outs), [chainer.Variable(
                grads.randn(*o.shape).astype(dtype)) for o in outs])
            found.append([o.array for o in outs] +
                         [v.grad for v in variables])
        for a, e in zip(*found):
            assert a.dtype == e.dtype
            assert_array_equal(a, e)
    _assert_compiled(jitted, 4)


def test_lstm_with_one_plain_array_argument(rng):
    jitted = chainerjit.jit(_lstm)
    for variable in ['c', 'x', 'c', 'x', 'c', 'x']:
        c, x = rng.randn(2, 3).astype(F32), rng.randn(2, 12).astype(F32)
        found = []
        for fn in (_lstm, jitted):
            v = chainer.Variable((c if variable == 'c' else x).copy())
            args = (v, x) if variable == 'c' else (c, v)
            c_next, h = fn(*args)
            F.sum(c_next * h).backward()
            found.append((c_next.array, h.array, v.grad))
        for a, e in zip(*found):
            assert_array_equal(a, e)
    _assert_compiled(jitted, 4)


class Sequence(chainer.Chain):

    def __init__(self, dtype):
        super(Sequence, self).__init__()
        with self.init_scope(), chainer.using_config('dtype', dtype):
            self.lstm = L.LSTM(3, 5, lateral_init=_normal(dtype),
                               upward_init=_normal(dtype),
                               bias_init=_normal(dtype))
            self.out = L.Linear(5, 2, initialW=_normal(dtype),
                                initial_bias=_normal(dtype))

    def forward(self, xs):
        self.lstm.reset_state()
        loss = 0
        for x in xs:
            loss += F.sum(self.out(self.lstm(x)) ** 2)
        return loss


@pytest.mark.parametrize('dtype, batches', [
    (F32, [4, 4, 4]), (F64, [4, 4, 4]), (F32, [4, 3, 1]), (F64, [5, 2, 2])])
def test_lstm_link_stepped_in_a_loop_trains_like_eager(rng, dtype, batches):
    """A shrinking batch ([4, 3, 1]) too: L.LSTM splits its state."""
    eager, jitted = _twins(Sequence, dtype)
    optimizers = []
    for model in (eager, jitted):
        optimizer = chainer.optimizers.MomentumSGD(lr=0.01)
        optimizer.setup(model)
        optimizers.append(optimizer)
    for _ in range(4):
        xs = [rng.randn(n, 3).astype(dtype) for n in batches]
        losses = []
        for model, optimizer in zip((eager, jitted), optimizers):
            model.cleargrads()
            loss = model(xs)
            loss.backward()
            optimizer.update()
            losses.append(loss.array)
        assert losses[1].dtype == losses[0].dtype
        assert_allclose(losses[1], losses[0], rtol=1e-6)
        for p, q in zip(_params(eager), _params(jitted)):
            assert_allclose(q.array, p.array, rtol=1e-6, atol=1e-7)
        assert_allclose(jitted.lstm.c.array, eager.lstm.c.array, rtol=1e-6,
                        atol=1e-7)
    _assert_compiled(jitted.forward, 3)
