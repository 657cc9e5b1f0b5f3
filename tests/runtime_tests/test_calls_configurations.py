"""The cache-hit call (``_calls.CachedCall``) under changing
configurations, flags and arguments, against an identical eager model:
train and backprop settings alternating between hits, inputs that start
or stop requiring grad, other memory layouts, replaced parameters, hooks
on some calls, nested jitted models, other threads (their own
configuration, reports, recordings), decorated classes and copied models.

Every test seeds its random numbers."""

import copy
import pickle
import threading
import warnings

import chainer
import chainer.functions as F
import chainer.link_hooks
import chainer.links as L
import numpy
from numpy.testing import assert_allclose
import pytest

import chainerjit
from chainerjit import errors
from tests.runtime_tests.twins import _assert_compiled
from tests.runtime_tests.twins import _assert_grads
from tests.runtime_tests.twins import _normal
from tests.runtime_tests.twins import _params
from tests.runtime_tests.twins import _train_call
from tests.runtime_tests.twins import _twins
from tests.runtime_tests.twins import _x
from tests.runtime_tests.twins import F32
from tests.runtime_tests.twins import MLP


pytestmark = pytest.mark.adversarial


class Decorated(MLP):

    @chainerjit.jit
    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


class DecoratedEager(MLP):
    forward = Decorated.forward.__wrapped__


def _decorated_twins(n_hidden=5):
    numpy.random.seed(0)
    jitted = Decorated(n_hidden=n_hidden)
    eager = DecoratedEager(n_hidden=n_hidden)
    eager.copyparams(jitted)
    return eager, jitted


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
    the main thread lets it go. (Its state is in events: an attribute the
    forward's call assigned would be a change of a guarded value, which
    makes the forward run eagerly.)"""

    def __init__(self):
        self.inside = threading.Event()
        self.go = threading.Event()
        self.armed = threading.Event()

    def __call__(self):
        if self.armed.is_set():
            self.armed.clear()
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
    _RENDEZVOUS.armed.set()

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
