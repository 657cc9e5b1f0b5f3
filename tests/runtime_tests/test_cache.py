"""The cache: hits, misses, guards, LRU eviction and explanations."""

import logging
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit.frontend import epochs
from chainerjit.frontend import guards
from chainerjit.runtime import cache


class MLP(chainer.Chain):

    def __init__(self):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(6, 5)
            self.l2 = L.Linear(5, 3)
        self.slope = 0.2

    @chainerjit.jit
    def forward(self, x):
        return self.l2(F.leaky_relu(self.l1(x), slope=self.slope))

    def eager(self, x):
        return self.l2(F.leaky_relu(self.l1(x), slope=self.slope))


@pytest.fixture
def net():
    return MLP()


def _x(rng, batch=4, dtype=numpy.float32):
    return rng.randn(batch, 6).astype(dtype)


def _check(net, x):
    with chainer.no_backprop_mode():
        y = net.forward(x)
        numpy.testing.assert_allclose(y.array, net.eager(x).array,
                                      rtol=1e-5, atol=1e-6)


def test_hit_and_miss_counts(net, rng):
    for batch in (4, 4, 7, 4, 7):
        _check(net, _x(rng, batch))
    info = net.forward.cache_info()
    assert (info.hits, info.misses, info.currsize) == (3, 2, 1)  # one
    # entry serves both batch sizes
    assert info.maxsize == 64


def test_miss_on_dtype_and_config(net, rng):
    net.to_cpu()
    _check(net, _x(rng))
    net.to_device('@numpy')  # no-op move keeps entries valid
    _check(net, _x(rng))
    net.l1.W.array = net.l1.W.array.astype(numpy.float64)
    net.l1.b.array = net.l1.b.array.astype(numpy.float64)
    net.l2.W.array = net.l2.W.array.astype(numpy.float64)
    net.l2.b.array = net.l2.b.array.astype(numpy.float64)
    _check(net, _x(rng, dtype=numpy.float64))
    with chainer.using_config('train', False):
        _check(net, _x(rng, dtype=numpy.float64))
    assert net.forward.cache_info().currsize == 3


class _Gated(MLP):
    """Branches on ``chainer.config.gate`` (unset, a scalar, or an
    object compared by identity)."""

    def forward(self, x):
        return self.eager(x)

    def eager(self, x):
        y = self.l1(x)
        gate = getattr(chainer.config, 'gate', None)
        if gate is True or callable(gate):
            y = F.tanh(y) if gate is True else gate(y)
        return self.l2(y)


def test_a_configuration_entry_read_by_the_forward_is_guarded(rng):
    numpy.random.seed(0)
    eager = _Gated()
    net = _Gated()
    net.copyparams(eager)
    net.forward = chainerjit.jit(net.forward)
    double, also_double = (lambda y: y * 2), (lambda y: y * 2)
    for gate in [None, None, True, True, double, double, also_double, None]:
        with chainer.using_config('gate', gate) if gate is not None \
                else _unset('gate'):
            x = chainer.Variable(_x(rng))
            y = net(x)
            numpy.testing.assert_allclose(
                y.array, eager(x).array, rtol=1e-6, atol=1e-7)
            F.sum(y).backward()  # training calls are guarded alike
    info = net.forward.cache_info()
    # Unset, True, double and also_double (another object) each record;
    # the repeats and the return to unset hit.
    assert (info.misses, info.hits) == (4, 4)


class _unset(object):
    """No ``chainer.config.<name>`` in this block (as outside any
    ``using_config``)."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        assert not hasattr(chainer.config, self.name)

    def __exit__(self, *exc):
        return False


def test_parameters_are_read_on_every_call(net, rng):
    x = _x(rng)
    _check(net, x)
    net.l1.W.array[...] = rng.randn(5, 6)  # in place
    _check(net, x)
    net.l2.W.array = rng.randn(3, 5).astype(numpy.float32)  # new array
    _check(net, x)
    assert net.forward.cache_info().currsize == 1


def test_parameter_reshaped_is_a_miss(net, rng):
    _check(net, _x(rng))
    del net.l2
    with net.init_scope():
        net.l2 = L.Linear(5, 4)
    _check(net, _x(rng))
    assert net.forward.cache_info().misses == 2


def test_link_replaced_with_same_shapes_is_a_miss(net, rng):
    x = _x(rng)
    _check(net, x)
    del net.l1
    with net.init_scope():
        net.l1 = L.Linear(6, 5)
    _check(net, x)
    assert net.forward.cache_info().misses == 2


def test_python_attribute_change_is_a_miss(net, rng):
    x = _x(rng)
    _check(net, x)
    net.slope = 0.5
    _check(net, x)
    net.slope = 0.2
    _check(net, x)
    info = net.forward.cache_info()
    assert (info.misses, info.hits) == (2, 1)


def test_only_the_checked_models_links_move_its_epoch(net, rng):
    other = L.Linear(2, 3)
    other.tag = 1  # a link no entry checks
    assert epochs.model_epoch_if_watched(other) is None
    _check(net, _x(rng))
    _check(net, _x(rng))  # the entry checked the model: its links watched
    epoch = epochs.model_epoch_if_watched(net)
    for link in (net, net.l1, net.l2):
        before = epoch[0]
        link.tag = 1
        assert epoch[0] == before + 1
    before = epoch[0]
    other.tag = 2
    second = MLP()
    _check(second, _x(rng))
    _check(second, _x(rng))
    second.l1.tag = 2  # another watched model
    assert epoch[0] == before
    assert epochs.model_epoch_if_watched(second)[0] > 1


def test_a_change_to_another_model_does_not_compare_this_one_again(
        net, rng, monkeypatch):
    x = _x(rng)
    second = MLP()
    second.l1.tag = 1
    for model in (net, net, second, second):
        _check(model, x)
    compared = []
    real = guards.link_state
    monkeypatch.setattr(guards, 'link_state',
                        lambda *a, **k: compared.append(a[0]) or real(*a, **k))
    for _ in range(3):
        second.l1.W = second.l1.W  # the same, as a stateful link's state
        _check(second, x)
        _check(net, x)
    assert [m is net for m in compared] == [False] * 3
    net.l1.W = net.l1.W  # the same: compared again, still a hit
    _check(net, x)
    assert compared[3:] == [net]
    assert net.forward.cache_info().misses == 1


def test_a_number_assigned_over_a_number_compares_the_numbers_only(
        net, rng, monkeypatch):
    x = _x(rng)
    net.iteration = 0
    _check(net, x)
    _check(net, x)  # (its first hit compares the model)
    compared = []
    real = guards.link_state
    monkeypatch.setattr(guards, 'link_state',
                        lambda *a, **k: compared.append(a[0]) or real(*a, **k))
    for step in range(1, 4):
        net.iteration = step  # not read: a hit, the model not compared
        net.slope = 0.2  # read, the same value
        _check(net, x)
    assert compared == [] and net.forward.cache_info().misses == 1
    net.slope = 0.3  # read, another value: compiled again
    _check(net, x)
    assert net.forward.cache_info().misses == 2
    net.slope = 0.2
    _check(net, x)
    assert net.forward.cache_info().misses == 2


def test_a_sublink_added_later_is_watched(net, rng):
    x = _x(rng)
    _check(net, x)
    _check(net, x)
    with net.init_scope():
        net.extra = L.Linear(2, 2)  # the model changed: checked again
    _check(net, x)
    _check(net, x)
    net.extra.flag = 3  # now a watched link: the model is checked again
    _check(net, x)
    info = net.forward.cache_info()
    assert info.misses == 3  # the first call, and each change of extra


def test_a_watched_models_state_is_read_once_per_change(net, monkeypatch):
    read = []
    real = guards.link_state
    monkeypatch.setattr(guards, 'link_state',
                        lambda *a, **k: read.append(a[0]) or real(*a, **k))
    assert cache.current_link_state(net) == real(net)  # not watched yet
    epochs.watch_model(net)
    first = cache.current_link_state(net)
    assert cache.current_link_state(net) is first
    assert len(read) == 2
    net.l1.scale = 2  # a watched link assigned to: read again
    second = cache.current_link_state(net)
    assert second != first and second == real(net)
    assert cache.current_link_state(net) is second
    other = MLP()
    epochs.watch_model(other)
    assert cache.current_link_state(other) == real(other)  # its own
    ignored = frozenset([('/l1', 'scale')])
    assert cache.current_link_state(net, ignored) == real(net, ignored)
    assert cache.current_link_state(net, ignored) != second


class Predictor(chainer.Chain):

    def __init__(self):
        super(Predictor, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(6, 3)

    def forward(self, x):
        return self.l1(x)


def test_a_classifier_around_a_jitted_predictor_hits_in_c(monkeypatch, rng):
    """``L.Classifier`` assigns ``self.y`` and more on every call; those
    assignments to a link no entry checks leave the predictor's hits on
    the C path."""
    predictor = Predictor()
    predictor.forward = chainerjit.jit(predictor.forward)
    classifier = L.Classifier(predictor)
    x, t = _x(rng), rng.randint(0, 3, 4).astype(numpy.int32)
    for _ in range(3):
        classifier(x, t).backward()
    general = []
    original = chainerjit.JitFunction.call_general

    def counted(self, *args):
        general.append(args)
        return original(self, *args)
    monkeypatch.setattr(chainerjit.JitFunction, 'call_general', counted)
    for _ in range(3):
        classifier(x, t).backward()
    assert general == []
    assert predictor.forward.cache_info().hits >= 4


def test_lru_eviction():
    f = chainerjit.jit(maxsize=2, dynamic=False)(lambda x: F.exp(x))
    with chainer.no_backprop_mode():
        for n in (1, 2, 3, 1):
            f(numpy.ones((n, 2), numpy.float32))
    assert f.cache_info().currsize == 2
    assert f.cache_info().misses == 4
    shapes = [e.signature.items[0][1].shape for e in f.cache_entries()]
    assert shapes == [(3, 2), (1, 2)]


def test_cache_clear(net, rng):
    _check(net, _x(rng))
    net.forward.cache_clear()
    assert net.forward.cache_info() == (0, 0, 64, 0, 0, 0, 0, 0)


def _calls_of(f, n, rng):
    with chainer.no_backprop_mode():
        for _ in range(n):
            f(rng.standard_normal((2, 3)).astype(numpy.float32))


def _doubled(x):
    return F.relu(x) * 2.0


def _reads_a_float(x):
    return F.relu(x) * float(x.sum() > 0)


def test_compiled_calls_are_counted_apart_from_eager_ones(rng):
    f = chainerjit.jit(_doubled)
    _calls_of(f, 4, rng)
    info = f.cache_info()
    assert info[:4] == (3, 1, 64, 1)
    assert (info.compiled, info.eager, info.compiles) == (3, 0, 1)


def test_an_entry_that_runs_eagerly_has_hits_but_no_compiled_calls(rng):
    f = chainerjit.jit(_reads_a_float)
    with pytest.warns(chainerjit.FallbackWarning):
        _calls_of(f, 4, rng)
    info = f.cache_info()
    assert (info.hits, info.misses, info.currsize) == (3, 1, 1)
    assert (info.compiled, info.eager, info.compiles) == (0, 3, 0)
    report = f.cache_report()
    assert '#0 runs eagerly: float of an array value at ' in report
    assert 'test_cache.py:' in report


def test_calls_under_hooks_run_eagerly_and_are_counted(rng):
    f = chainerjit.jit(_doubled)
    _calls_of(f, 2, rng)
    with chainer.function_hooks.TimerHook():
        _calls_of(f, 3, rng)
    info = f.cache_info()
    assert (info.hits, info.compiled, info.eager) == (1, 1, 3)


def test_explain_hit_and_miss(net, rng):
    with chainer.no_backprop_mode():
        net.forward(_x(rng, 32))
        assert net.forward.explain(_x(rng, 32)).startswith(
            'MLP.forward would hit entry #0: x: f32[32,6]@cpu')
        text = net.forward.explain(_x(rng, 17))
    assert text == ('MLP.forward: cache miss: closest entry #0 differs in\n'
                    '  * x: shape (32, 6) -> (17, 6) at axis 0')


def test_explain_names_config_and_model_changes(net, rng):
    x = _x(rng)
    with chainer.no_backprop_mode():
        net.forward(x)
        with chainer.using_config('train', False):
            assert '* train: True -> False' in net.forward.explain(x)
        net.slope = 0.3
        assert '* (model).slope: 0.2 -> 0.3' in net.forward.explain(x)


def test_explain_with_gradients_needed(net, rng):
    x = _x(rng)
    net.forward(x)  # backprop enabled: a training entry
    assert net.forward.explain(x).endswith(
        '(with gradients: compiled forward and backward)')


def test_entries_describe_themselves(net, rng):
    with chainer.no_backprop_mode():
        net.forward(_x(rng))
        net.forward(_x(rng))
    entry, = net.forward.cache_entries()
    assert entry.hits == 1
    assert entry.compile_seconds > 0
    assert entry.n_instructions > 0
    text = entry.describe()
    assert 'LinearFunction' in text and 'CALL3' in text
    assert 'x: f32[4,6]@cpu' in net.forward.cache_report()


def test_recompile_warning_names_what_changes():
    f = chainerjit.jit(recompile_limit=4, dynamic=False)(lambda x: F.exp(x))
    with chainer.no_backprop_mode(), warnings.catch_warnings(record=True) \
            as caught:
        warnings.simplefilter('always')
        for n in range(1, 7):
            f(numpy.ones((n, 2), numpy.float32))
    messages = [str(w.message) for w in caught
                if issubclass(w.category, chainerjit.RecompileWarning)]
    assert len(messages) == 1
    assert 'x: shape at axis 0' in messages[0]


def test_log_lines_for_misses(caplog, rng):
    f = chainerjit.jit(lambda x: F.exp(x))
    with caplog.at_level(logging.INFO, logger='chainerjit'), \
            chainer.no_backprop_mode():
        f(_x(rng, 2))
        f(_x(rng, 2))
        f(_x(rng, 3))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert 'cache miss (first call); compiled' in lines[0]
    assert 'x: shape (2, 6) -> (3, 6) at axis 0' in lines[1]


def test_explain_names_static_arguments(rng):
    f = chainerjit.jit(lambda x, scale, mode=None: F.exp(x) * scale)
    x = _x(rng)
    with chainer.no_backprop_mode():
        f(x, 2.0, mode='a')
        text = f.explain(x, 3.0, mode='a')
    assert text.endswith('  * scale: 2.0 -> 3.0')
    assert 'scale=2.0' in str(f.cache_entries()[0].signature)


def test_recompile_warning_names_static_values():
    f = chainerjit.jit(recompile_limit=3)(lambda x, k: F.exp(x) * k)
    x = numpy.ones((2, 2), numpy.float32)
    with chainer.no_backprop_mode(), pytest.warns(
            chainerjit.RecompileWarning, match=r'k: value \(2 times\)'):
        for k in range(4):
            f(x, k)  # an int: a float that changes leaves the key


def test_a_jitted_link_inlined_into_an_outer_recording_is_no_eager_call(
        rng):
    inner = chainerjit.jit(_doubled)
    outer = chainerjit.jit(lambda x: F.tanh(inner(x)))
    _calls_of(outer, 3, rng)
    assert inner.cache_info().eager == 0
    assert outer.cache_info().compiled == 2


class _KeepsItsLoss(chainer.Chain):
    """Stores its loss on itself, an attribute it has not before its
    first call (as the VAE example's loss function does)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(6, 3)

    def forward(self, x):
        self.loss = F.sum(self.l1(x) ** 2)
        return self.loss


def test_an_attribute_the_forward_makes_first_is_no_miss(rng):
    model = _KeepsItsLoss()
    twin = model.copy(mode='copy')
    jitted = chainerjit.jit(twin.forward)
    for _ in range(4):
        x = _x(rng)
        loss = jitted(x)
        expected = model.forward(x)
        numpy.testing.assert_allclose(loss.array, expected.array, rtol=1e-6)
        assert twin.loss is loss
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()
