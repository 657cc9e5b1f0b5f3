"""The cache-hit call in C (``_calls.CachedCall``): it answers plain
hits, hands every other call to ``call_general`` unchanged, and gives the
same values, gradients and cache counts as that path and as eager."""

import weakref

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit


class MLP(chainer.Chain):

    def __init__(self):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 5)
            self.l2 = L.Linear(5, 3)

    def forward(self, x, scale=None):
        h = F.relu(self.l1(x))
        if scale is not None:
            h = h * scale
        return self.l2(h)


class Spy(object):
    """Counts the calls that reach ``call_general``."""

    def __init__(self, jitted, monkeypatch):
        self.calls = 0
        general = jitted.call_general

        def counted(args, kwargs):
            self.calls += 1
            return general(args, kwargs)
        monkeypatch.setattr(jitted, 'call_general', counted)


def _models():
    eager = MLP()
    jitted = eager.copy(mode='copy')
    jitted.forward = chainerjit.jit(jitted.forward)
    return eager, jitted


def _x(rng, n=2):
    return rng.randn(n, 4).astype(numpy.float32)


def _hitting(rng, monkeypatch):
    """Models, an input whose entry has had its first (checking) hit, and
    a spy on the jitted model's general path."""
    eager, jitted = _models()
    x = _x(rng)
    with chainer.no_backprop_mode():
        jitted(x)
        jitted(x)
    return eager, jitted, x, Spy(jitted.forward, monkeypatch)


def test_a_plain_hit_skips_the_general_path(rng, monkeypatch):
    eager, jitted = _models()
    spy = Spy(jitted.forward, monkeypatch)
    x = _x(rng)
    with chainer.no_backprop_mode():
        for _ in range(3):
            y = jitted(x)
            numpy.testing.assert_allclose(y.array, eager(x).array,
                                          rtol=1e-6, atol=1e-6)
    # the miss, and the first hit, which checks the model it compiled for
    assert spy.calls == 2
    info = jitted.forward.cache_info()
    assert (info.hits, info.misses) == (2, 1)
    assert jitted.forward.last_entry.hits == 2
    with chainer.no_backprop_mode():
        assert y.requires_grad == eager(x).requires_grad


def test_training_hits_match_eager_gradients(rng, monkeypatch):
    eager, jitted = _models()
    spy = Spy(jitted.forward, monkeypatch)
    for _ in range(3):
        x, t = _x(rng, 3), rng.randint(0, 3, 3).astype(numpy.int32)
        for model in (eager, jitted):
            model.cleargrads()
            F.softmax_cross_entropy(model(x), t).backward()
        for (name, p), q in zip(sorted(eager.namedparams()),
                                [p for _, p in sorted(jitted.namedparams())]):
            numpy.testing.assert_allclose(q.grad, p.grad, rtol=1e-5,
                                          atol=1e-6, err_msg=name)
    assert spy.calls == 2


def test_gradients_accumulate_over_two_hits(rng):
    eager, jitted = _models()
    x = _x(rng)
    for model in (eager, jitted):
        model(x)  # compiles
        model.cleargrads()
        (F.sum(model(x)) + F.sum(model(x * 2))).backward()
    numpy.testing.assert_allclose(jitted.l1.W.grad, eager.l1.W.grad,
                                  rtol=1e-5, atol=1e-6)


def test_an_input_variable_gets_its_gradient(rng):
    eager, jitted = _models()
    grads = []
    for model in (eager, jitted, jitted):
        x = chainer.Variable(_x(rng.__class__(0)))
        F.sum(model(x)).backward()
        grads.append(x.grad)
    numpy.testing.assert_allclose(grads[2], grads[0], rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('call', [
    lambda m, x: m(x, scale=2.0),           # a keyword argument
    lambda m, x: m(x, 2.0),                 # a Python scalar
])
def test_other_arguments_take_the_general_path(rng, monkeypatch, call):
    eager, jitted = _models()
    spy = Spy(jitted.forward, monkeypatch)
    x = _x(rng)
    with chainer.no_backprop_mode():
        for _ in range(2):
            y = call(jitted, x)
        numpy.testing.assert_allclose(y.array, call(eager, x).array,
                                      rtol=1e-6, atol=1e-6)
    assert spy.calls == 2
    assert jitted.forward.cache_info().hits == 1


def test_a_function_hook_takes_the_general_path(rng, monkeypatch):
    eager, jitted, x, spy = _hitting(rng, monkeypatch)
    with chainer.no_backprop_mode():
        hook = chainer.function_hooks.TimerHook()
        with hook:
            y = jitted(x)
    assert spy.calls == 1
    assert len(hook.call_history) == 3  # eager ops, each seen by the hook
    numpy.testing.assert_allclose(y.array, eager(x).array, rtol=1e-6,
                                  atol=1e-6)


def test_a_changed_model_is_checked_again(rng, monkeypatch):
    eager, jitted, x, spy = _hitting(rng, monkeypatch)
    with chainer.no_backprop_mode():
        for model in (eager, jitted):
            del model.l2
            with model.init_scope():
                model.l2 = L.Linear(5, 2)
        jitted.l2.copyparams(eager.l2)
        y = jitted(x)  # the link_epoch moved: the general path checks,
        jitted(x)  # (a miss), then checks the new entry's model once
        y2 = jitted(x)
    assert spy.calls == 2
    assert y.shape == (2, 2)
    numpy.testing.assert_allclose(y2.array, eager(x).array, rtol=1e-6,
                                  atol=1e-6)
    assert jitted.forward.cache_info().misses == 2


def test_a_replaced_parameter_array_is_a_miss(rng):
    eager, jitted = _models()
    x = _x(rng)
    with chainer.no_backprop_mode():
        jitted(x)
        for model in (eager, jitted):
            model.l1.W.array = numpy.ones((5, 4), numpy.float64)
        y = jitted(x)
        numpy.testing.assert_allclose(y.array, eager(x).array, rtol=1e-6,
                                      atol=1e-6)
    assert jitted.forward.cache_info().misses == 2


def test_a_kernel_error_on_a_hit_runs_eagerly(rng):
    """An index out of range raised by a hit's kernel: the pure program's
    call is run again eagerly, which raises as eager does."""
    def take(x, i):
        return F.embed_id(i, x)
    jitted = chainerjit.jit(take)
    x = rng.randn(3, 2).astype(numpy.float32)
    good = numpy.array([0, 2], numpy.int32)
    with chainer.no_backprop_mode():
        jitted(x, good)
        jitted(x, good)
        with pytest.raises(Exception) as raised:
            jitted(x, numpy.array([0, 7], numpy.int32))
        with pytest.raises(type(raised.value)):
            take(x, numpy.array([0, 7], numpy.int32))


def test_a_method_whose_model_is_gone_says_so(rng):
    orphan = chainerjit.api.JitFunction(
        MLP.forward, weakref.ref(MLP()),
        dict(maxsize=4, check=True, recompile_limit=8))
    with pytest.raises(ReferenceError):
        orphan(_x(rng))


def _pair(a, b, scale=None):
    """A function of two arrays whose result tells them apart."""
    return a * 2.0 - b


@pytest.mark.parametrize('second', [
    'same', 'aliased', 'float64', 'shape', 'variable', 'train', 'backprop'])
def test_the_remembered_key_is_only_reused_for_the_same_signature(
        rng, second):
    """The hit path remembers the key of the last call whose arguments
    were distinct arrays; a call that differs in any part of the key
    (aliasing, dtype, shape, a Variable, the configuration) gets its own
    entry and eager's result."""
    jitted = chainerjit.jit(_pair)
    a, b = (rng.randn(3, 2).astype(numpy.float32) for _ in range(2))
    for _ in range(3):
        jitted(a, b)
    args = {'same': (a, b), 'aliased': (a, a),
            'float64': (a, b.astype(numpy.float64)),
            'shape': (a[:2], b[:2]), 'variable': (a, chainer.Variable(b)),
            'train': (a, b), 'backprop': (a, b)}[second]
    config = {'train': ('train', False),
              'backprop': ('enable_backprop', False)}.get(
                  second, ('train', True))
    with chainer.using_config(*config):
        for _ in range(3):
            result = jitted(*args)
            expected = _pair(*args)
            numpy.testing.assert_array_equal(
                getattr(result, 'array', result),
                getattr(expected, 'array', expected))
    assert jitted.cache_info().misses == (1 if second == 'same' else 2)


def test_new_variable_builds_what_init_unchecked_builds(rng):
    from chainerjit.runtime import _calls
    x = rng.randn(3, 2).astype(numpy.float32)
    for requires_grad in (False, True):
        ours = _calls.new_variable(x, requires_grad)
        chainers = chainer.Variable._init_unchecked(
            x, requires_grad=requires_grad)
        for a, b in ((ours, chainers), (ours._node, chainers._node)):
            assert type(a) is type(b)
            assert list(vars(a)) == list(vars(b))
        mine, theirs = dict(vars(ours)), dict(vars(chainers))
        assert mine.pop('_data')[0] is theirs.pop('_data')[0] is x
        mine.pop('_node'), theirs.pop('_node')
        assert mine == theirs
        mine, theirs = dict(vars(ours._node)), dict(vars(chainers._node))
        assert mine.pop('_variable')() is ours
        assert theirs.pop('_variable')() is chainers
        assert mine == theirs
        assert ours.requires_grad is requires_grad
        assert ours.node.shape == x.shape and ours.node.dtype == x.dtype


class Recurrent(chainer.Chain):
    """A loop over the steps of ``xs`` (T, B, 4): one program for every
    length."""

    def __init__(self):
        super(Recurrent, self).__init__()
        with self.init_scope():
            self.lstm = L.StatelessLSTM(4, 5)

    def forward(self, xs):
        c = h = None
        for t in range(xs.shape[0]):
            c, h = self.lstm(c, h, xs[t])
        return h


def test_hits_of_a_program_for_any_length_skip_the_general_path(
        rng, monkeypatch):
    eager = Recurrent()
    model = eager.copy(mode='copy')
    model.forward = chainerjit.jit(model.forward)
    spy = Spy(model.forward, monkeypatch)

    def run(lengths, training=False):
        for n in lengths:
            xs = rng.randn(n, 2, 4).astype(numpy.float32)
            with chainer.using_config('enable_backprop', training):
                y, expected = model(xs), eager(xs)
            numpy.testing.assert_allclose(y.array, expected.array,
                                          rtol=1e-5, atol=1e-6)
            if training:
                for m, out in ((model, y), (eager, expected)):
                    m.cleargrads()
                    F.sum(out * out).backward()
                numpy.testing.assert_allclose(
                    model.lstm.upward.W.grad, eager.lstm.upward.W.grad,
                    rtol=1e-5, atol=1e-6)
    # Compiled at 5; each length's first call checked against eager, its
    # second noted for the C path: all on the general path.
    run([5, 5, 9, 9, 3, 3])
    assert len(model.forward.cache_entries()) == 1
    assert spy.calls == 6
    run([9, 5, 3, 9, 3, 5])  # each length's own trip count, in C
    assert spy.calls == 6
    run([7, 7, 7])  # a new length
    assert spy.calls == 8
    model.forward.cache_clear()  # forgets which entry answered
    run([5])
    assert spy.calls == 9
    # Training calls: an entry of their own, its hits in C too.
    run([5, 5, 9, 9, 5], training=True)
    before = spy.calls
    run([9, 5], training=True)
    assert spy.calls == before
