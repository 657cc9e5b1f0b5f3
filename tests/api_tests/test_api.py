"""The three ways to apply jit, argument and result structures."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import api
from chainerjit import testing
from tests import threads


class Net(chainer.Chain):

    def __init__(self, n_in=4, n_out=3):
        super(Net, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(n_in, n_out)

    def eager(self, x):
        return F.relu(self.l1(x))

    @chainerjit.jit
    def forward(self, x):
        return F.relu(self.l1(x))


def _x(rng, batch=2, n=4):
    return rng.randn(batch, n).astype(numpy.float32)


def test_decorated_method_matches_eager(rng):
    net = Net()
    testing.assert_jit_matches_eager(
        net.eager, [(_x(rng),) for _ in range(3)], jitted=net.forward,
        expect_entries=1, lowered=['LinearFunction', 'ReLU'])


def test_decorated_method_has_a_cache_per_instance(rng):
    a, b = Net(), Net()
    with chainer.no_backprop_mode():
        x = _x(rng)
        ya, yb = a.forward(x), b.forward(x)
        a.forward(x)
    numpy.testing.assert_allclose(ya.array, a.eager(x).array)
    numpy.testing.assert_allclose(yb.array, b.eager(x).array)
    assert a.forward.cache_info().hits == 1
    assert b.forward.cache_info().hits == 0
    assert a.forward is a.forward
    assert a.forward is not b.forward


def test_calling_the_link_uses_the_jitted_forward(rng):
    net = Net()
    with chainer.no_backprop_mode():
        x = _x(rng)
        net(x)
        y = net(x)
    numpy.testing.assert_allclose(y.array, net.eager(x).array)
    assert net.forward.cache_info().hits == 1


def test_bound_method(rng):
    net = Net()
    eager = net.eager
    net.eager = chainerjit.jit(net.eager)
    testing.assert_jit_matches_eager(
        eager, [(_x(rng),) for _ in range(3)], jitted=net.eager,
        expect_entries=1)


def test_plain_function_with_options(rng):
    def f(x, y):
        return F.tanh(x) * y + 1.0

    jf = chainerjit.jit(maxsize=4)(f)
    assert jf.cache_info().maxsize == 4
    calls = [(_x(rng), _x(rng)) for _ in range(3)]
    testing.assert_jit_matches_eager(f, calls, jitted=jf, expect_entries=1)


def test_variables_arrays_scalars_none_and_nesting(rng):
    def f(inputs, scale, bias=None, mode='sum'):
        a, b = inputs['pair']
        h = a * scale + F.sum(b, axis=1, keepdims=True)
        if bias is not None:
            h = h + bias
        return {'out': h, 'mode': mode, 'parts': [a, h * 2.0]}

    def call():
        return ({'pair': (chainer.Variable(_x(rng)), _x(rng))}, 2.0,
                _x(rng), 'sum')

    testing.assert_jit_matches_eager(
        f, [call() for _ in range(3)], expect_entries=1)


@pytest.mark.parametrize('values', [(2, 3, 2), (2.0, 3.0, 2.0)],
                         ids=['int', 'float'])
def test_python_scalar_value_is_part_of_the_key(rng, values):
    """With ``dynamic=False``. (A float or an int that changes leaves the
    key by default: see tests/frontend_tests/test_varying_floats.py and
    test_varying_ints.py.)"""
    def f(x, k):
        return x * k

    jf = chainerjit.jit(f, dynamic=False)
    x = chainer.Variable(_x(rng))
    with chainer.no_backprop_mode():
        for k in values:
            numpy.testing.assert_allclose(jf(x, k).array, x.array * k)
    assert jf.cache_info().currsize == 2
    assert jf.cache_info().hits == 1


def test_returning_an_input_returns_the_same_object(rng):
    def f(x, y):
        return x, F.exp(y)

    jf = chainerjit.jit(f)
    with chainer.no_backprop_mode():
        for _ in range(2):
            x = chainer.Variable(_x(rng))
            out, _ = jf(x, _x(rng))
            assert out is x


def test_results_are_variables_without_a_graph(rng):
    net = Net()
    with chainer.no_backprop_mode():
        x = _x(rng)
        net.forward(x)
        y = net.forward(x)
    assert isinstance(y, chainer.Variable)
    assert y.creator is None
    assert y.requires_grad == net.eager(x).requires_grad


def test_gradients_flow_through_the_compiled_program(rng):
    net, eager = Net(), Net()
    eager.copyparams(net)
    for _ in range(3):
        x = _x(rng)
        for model in (net, eager):
            model.cleargrads()
            y = model.forward(x) if model is net else model.eager(x)
            assert y.creator is not None
            F.sum(y * y).backward()
        for p, q in zip(net.params(), eager.params()):
            numpy.testing.assert_allclose(p.grad, q.grad, rtol=1e-6)
    entry, = net.forward.cache_entries()
    assert entry.training is not None and entry.hits == 2


def test_no_grad_needed_with_backprop_enabled_compiles(rng):
    def f(x):
        return F.tanh(x) * 3.0

    def call():
        return (chainer.Variable(_x(rng), requires_grad=False),)

    testing.assert_jit_matches_eager(
        f, [call() for _ in range(3)], no_backprop=False, expect_entries=1)


def test_unsupported_argument_falls_back_with_a_warning(rng):
    class Box(object):
        pass

    def f(x, box):
        return F.relu(x)

    jf = chainerjit.jit(f)
    x = _x(rng)
    with chainer.no_backprop_mode():
        with pytest.warns(chainerjit.FallbackWarning,
                          match='UnsupportedArgument.*Box'):
            y = jf(x, Box())
    numpy.testing.assert_allclose(y.array, numpy.maximum(x, 0))


def test_jitted_function_called_while_recording_is_inlined(rng):
    inner = chainerjit.jit(lambda x: F.sigmoid(x))

    def outer(x):
        return inner(x) * 2.0

    jf = testing.assert_jit_matches_eager(
        outer, [(_x(rng),) for _ in range(3)], lowered=['Sigmoid'])
    assert jf.cache_info().currsize == 1


def test_warnings_are_shown_once(rng):
    def f(x):
        return F.relu(x) * float(x.array.sum())

    jf = chainerjit.jit(f)
    with chainer.no_backprop_mode(), warnings.catch_warnings(record=True) \
            as caught:
        warnings.simplefilter('always')
        jf(chainer.Variable(_x(rng)))
        jf(chainer.Variable(_x(rng, batch=3)))
    assert len([w for w in caught
                if issubclass(w.category, chainerjit.FallbackWarning)]) == 1


def test_sequential_with_function_layers(rng):
    model = chainer.Sequential(L.Linear(4, 5), F.relu, L.Linear(5, 2))
    testing.assert_jit_matches_eager(
        model.forward, [(_x(rng),) for _ in range(3)], expect_entries=1)


def test_jit_of_a_link_object(rng):
    model = chainer.Sequential(L.Linear(4, 5), F.tanh)
    testing.assert_jit_matches_eager(
        model.forward, [(_x(rng),) for _ in range(3)],
        jitted=chainerjit.jit(model), expect_entries=1)


def test_threads_compiling_at_once(rng):
    def f(x):
        h = x
        for _ in range(20):
            h = F.tanh(h) * 1.1
        return h

    jf = chainerjit.jit(f)
    inputs = [rng.randn(n, 4).astype(numpy.float32) for n in range(1, 9)]
    results = {}

    def work(i):
        with chainer.no_backprop_mode():
            for _ in range(3):
                results[i] = jf(chainer.Variable(inputs[i])).array

    threads.run_in_threads(work, 8)
    with chainer.no_backprop_mode():
        for i, x in enumerate(inputs):
            numpy.testing.assert_allclose(results[i], f(x).array,
                                          rtol=1e-6)
    assert all(e.fallback is None for e in jf.cache_entries())


def test_deepcopy_and_pickle_rebind_to_the_copy(rng):
    import copy
    import pickle

    model = Net()
    model.eager_forward = model.eager
    model.eager = chainerjit.jit(model.eager)
    x = _x(rng)
    with chainer.no_backprop_mode():
        model.eager(x)
        for clone in (copy.deepcopy(model),
                      pickle.loads(pickle.dumps(model))):
            clone.l1.W.array[...] = 0.5
            assert clone.eager.cache_info().currsize == 0
            numpy.testing.assert_allclose(
                clone.eager(x).array, clone.eager_forward(x).array)
            numpy.testing.assert_allclose(
                model.eager(x).array, model.eager_forward(x).array)


def test_hooks_observe_eager_calls(rng):
    from chainer import function_hooks
    from chainer import link_hooks

    net = Net()
    x = _x(rng)
    with chainer.no_backprop_mode():
        net.forward(x)
        hook = function_hooks.TimerHook()
        with hook:
            net.forward(x)
        assert len(hook.call_history) == 2  # LinearFunction, ReLU
        timer = link_hooks.TimerHook()
        net.l1.add_hook(timer)
        net.forward(x)
        net.forward(x)
        assert len(timer.call_history) == 2
        net.l1.delete_hook(timer.name)
        net.forward(x)
        net.forward(x)
    hooked, plain = net.forward.cache_entries()  # least recent first
    assert 'link hooks on /l1' in hooked.fallback
    assert plain.fallback is None and plain.hits == 2


@pytest.mark.parametrize('line, kind', [
    ('x: shape (32, 784) -> (17, 784) at axis 0', 'x: shape at axis 0'),
    ('xs[2]: added', 'xs[2]: added'),
    ('xs[3]: removed', 'xs[3]: removed'),
    ('k: 2.0 -> 3.0', 'k: value')])
def test_what_keeps_changing_names_the_kind_of_change(line, kind):
    # (an item added to a list is no value of the key)
    assert api._change_kind(line) == kind


class _DecoratedForward(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 3)

    @chainerjit.jit
    def forward(self, x):
        return F.relu(self.l1(x))


def test_jit_of_a_model_whose_forward_is_jitted_runs_that_forward():
    model = _DecoratedForward()
    jitted = chainerjit.jit(model)
    for n in (2, 3, 2):
        x = numpy.random.RandomState(n).randn(n, 4).astype(numpy.float32)
        testing.assert_results_equal(jitted(x),
                                     _DecoratedForward.forward._fn(model, x))
    assert jitted.cache_info().hits >= 1


class _OddBatchesScaled(chainer.Chain):
    def forward(self, x):
        return F.tanh(x) * (x.shape[0] % 2 + 1)


class _OddBatchesShifted(chainer.Chain):
    def forward(self, x):
        return F.sigmoid(x) + x.shape[0] % 2


# Two classes of one name, as a notebook cell defining ``Net`` run again.
_OddBatchesScaled.forward.__qualname__ = 'Net.forward'
_OddBatchesShifted.forward.__qualname__ = 'Net.forward'


def test_functions_of_one_name_and_other_code_each_warn(monkeypatch):
    from chainerjit import errors
    monkeypatch.setattr(errors, '_warned', set())
    rng = numpy.random.RandomState(0)
    for cls in (_OddBatchesScaled, _OddBatchesShifted):
        model = cls()
        jitted = chainerjit.jit(model.forward)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            for batch in (3, 8, 17, 8):
                x = rng.randn(batch, 4).astype(numpy.float32)
                testing.assert_results_equal(jitted(x), model.forward(x))
        assert any('Net.forward keeps the size of x.shape[0]' in
                   str(w.message) and 'taken modulo' in str(w.message)
                   for w in caught), [str(w.message) for w in caught]
