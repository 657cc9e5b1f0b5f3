"""The fast ``Link.__call__`` (chainerjit/fastpaths/link_call.py,
``_calls.link_call``): a link whose forward is jitted is called
straight from C while no link hook is registered, with the same result
as Chainer's own ``Link.__call__``; every other link and call runs
Chainer's own, which a spy on the fallback sees."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import fastpaths
from chainerjit import testing
from chainerjit.runtime import _calls


class MLP(chainer.Chain):

    def __init__(self):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(6, 8)
            self.l2 = L.Linear(8, 5)

    def forward(self, x, scale=1.0):
        return self.l2(F.relu(self.l1(x))) * scale


class DecoratedMLP(MLP):

    @chainerjit.jit
    def forward(self, x, scale=1.0):
        return self.l2(F.relu(self.l1(x))) * scale


class _CallMixin(object):
    """A mixin whose ``__call__`` Chainer's ``Link.__call__`` prefers to
    ``forward``."""

    def __call__(self, x):
        return self.forward(x) * 2.0


class MixinMLP(MLP, _CallMixin):
    pass


class _Recorder(chainer.LinkHook):
    name = 'Recorder'

    def __init__(self):
        self.calls = []

    def forward_preprocess(self, args):
        self.calls.append(('pre', args.link))

    def forward_postprocess(self, args):
        self.calls.append(('post', args.link))


@pytest.fixture
def fallbacks():
    """The links whose call went to Chainer's own ``Link.__call__``."""
    seen = []

    def spy(self, *args, **kwargs):
        seen.append(self)
        return previous(self, *args, **kwargs)
    previous = _calls.set_link_call_fallback(spy)
    yield seen
    _calls.set_link_call_fallback(previous)


def _model(cls=MLP, jit=True):
    numpy.random.seed(0)
    model = cls()
    if jit and cls is not DecoratedMLP:
        model.forward = chainerjit.jit(model.forward)
    return model


def _x(seed=1):
    return numpy.random.RandomState(seed).standard_normal(
        (4, 6)).astype(numpy.float32)


def _eager(cls, *args, **kwargs):
    model = _model(MLP if cls is DecoratedMLP else cls, jit=False)
    return testing.with_fast_paths_off(
        lambda: model(*args, **kwargs), 'link_call').array


def test_it_is_installed_on_import():
    assert chainer.Link.__call__ is _calls.link_call


@pytest.mark.parametrize('cls', [MLP, DecoratedMLP])
def test_a_jitted_link_is_called_from_c(cls, fallbacks):
    model = _model(cls)
    x = _x()
    results = [model(x).array for _ in range(3)]
    for result in results:
        numpy.testing.assert_array_equal(result, _eager(cls, x))
    # The model's call took the fast path; only its eager sublinks (run
    # while the first call was recorded) went to Chainer's.
    assert model not in fallbacks
    assert set(fallbacks) <= {model.l1, model.l2}
    assert model.forward.cache_info().hits == 2


@pytest.mark.parametrize('cls', [MLP, DecoratedMLP])
def test_keyword_arguments_and_misses_take_the_general_path(cls):
    model = _model(cls)
    x = _x()
    numpy.testing.assert_array_equal(model(x, scale=3.0).array,
                                     _eager(cls, x, scale=3.0))
    numpy.testing.assert_array_equal(model(x[:2]).array, _eager(cls, x[:2]))
    numpy.testing.assert_array_equal(model(x, 0.5).array,
                                     _eager(cls, x, 0.5))


def test_an_eager_link_runs_chainers_call(fallbacks):
    model = _model(jit=False)
    x = _x()
    numpy.testing.assert_array_equal(model(x).array, _eager(MLP, x))
    assert fallbacks == [model, model.l1, model.l2]


def test_a_global_link_hook_sees_a_jitted_link(fallbacks):
    model = _model()
    x = _x()
    model(x)
    with _Recorder() as hook:
        result = model(x)
    numpy.testing.assert_array_equal(result.array, _eager(MLP, x))
    assert hook.calls[0] == ('pre', model)
    assert hook.calls[-1] == ('post', model)
    assert model in fallbacks


def test_a_local_link_hook_sees_a_jitted_link(fallbacks):
    model = _model()
    x = _x()
    model(x)
    hook = _Recorder()
    model.add_hook(hook)
    model(x)
    assert hook.calls == [('pre', model), ('post', model)]
    model.delete_hook(hook.name)
    del fallbacks[:]
    model(x)
    assert fallbacks == [] and len(hook.calls) == 2


def test_a_mixins_call_comes_first_as_in_chainer(fallbacks):
    model = _model(MixinMLP)
    x = _x()
    expected = _eager(MixinMLP, x)
    numpy.testing.assert_array_equal(expected, 2.0 * _eager(MLP, x))
    numpy.testing.assert_array_equal(model(x).array, expected)
    assert model in fallbacks


def test_a_forward_not_jitted_on_the_instance_runs_chainers_call(fallbacks):
    model = _model(jit=False)
    model.forward = lambda x: x * 2.0
    x = _x()
    numpy.testing.assert_array_equal(model(x), x * 2.0)
    assert fallbacks == [model]


def test_a_data_descriptor_forward_wins_over_the_instance_dict(fallbacks):
    class PropertyForward(chainer.Link):
        forward = property(lambda self: (lambda x: x + 1.0))

    link = PropertyForward()
    link.__dict__['forward'] = chainerjit.jit(lambda x: x * 10.0)
    x = _x()
    numpy.testing.assert_array_equal(link(x), x + 1.0)
    assert fallbacks == [link]


def test_a_link_whose_init_was_not_called_fails_as_in_chainer():
    class NoInit(chainer.Link):
        def __init__(self):
            pass

        @chainerjit.jit
        def forward(self, x):
            return x

    with pytest.raises(RuntimeError, match='has not been called'):
        NoInit()(_x())


def test_a_subclass_calling_super_call_takes_the_fast_path(fallbacks):
    class Wrapped(MLP):
        def __call__(self, x):
            return super(Wrapped, self).__call__(x) + 1.0

    model = _model(Wrapped)
    x = _x()
    expected = _eager(MLP, x) + 1.0
    for _ in range(2):
        numpy.testing.assert_array_equal(model(x).array, expected)
    assert model not in fallbacks


def test_training_through_the_fast_call_matches_eager():
    x, t = _x(), numpy.array([0, 1, 2, 3], numpy.int32)
    grads = []
    for jit in (False, True):
        model = _model(jit=jit)
        for _ in range(2):
            model.cleargrads()
            F.softmax_cross_entropy(model(x), t).backward()
        grads.append([p.grad.copy() for p in model.params()])
    for jitted, eager in zip(grads[1], grads[0]):
        numpy.testing.assert_allclose(jitted, eager, rtol=1e-6, atol=1e-7)


def test_uninstall_restores_chainers_call():
    fastpaths.uninstall('link_call')
    try:
        assert chainer.Link.__call__.__module__ == 'chainer.link'
    finally:
        fastpaths.install('link_call')
    assert chainer.Link.__call__ is _calls.link_call
