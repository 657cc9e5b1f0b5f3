"""Lists of sequences of any lengths (``runtime.ragged``): one entry serves
every length of the items of a list argument, with values and gradients
equal to eager's, and where it cannot, a warning says why."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import ops
from chainerjit.ops import Kernel
from chainerjit.ops import rows_follow_first
from tests import differential


class _PerItem(chainer.Chain):
    """Each sentence's tokens embedded and projected, returned per item."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.fc = L.Linear(6, 4)

    def forward(self, xs):
        return [self.fc(self.embed(x)) for x in xs]


class _Vectors(chainer.Chain):
    """Float sequences (Variables needing gradients) through a linear
    layer."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 5)

    def forward(self, xs):
        return [self.fc(x) for x in xs]


def _tokens(rng, n_items=4, low=2, high=9):
    return [rng.randint(0, 30, int(rng.randint(low, high))).astype(
        numpy.int32) for _ in range(n_items)]


def _calls(rng, n, **kw):
    return [(_tokens(rng, **kw),) for _ in range(n)]


def _model(cls):
    numpy.random.seed(0)
    return cls()


def test_one_entry_for_any_lengths_in_training():
    rng = numpy.random.RandomState(0)
    jitted = differential.check_grads(None, _calls(rng, 7),
                                      model=_model(_PerItem),
                                      method='forward')
    entry, = jitted.cache_entries()
    assert jitted.cache_info().compiled >= 3
    assert 'xs[0]: i32[L]' in str(entry.signature)
    assert 'f32[L,6] = EmbedIDFunction' in str(entry.graph)


def test_one_entry_for_any_lengths_in_inference():
    rng = numpy.random.RandomState(1)
    model = _model(_PerItem)
    jitted = chainerjit.jit(model.forward)
    with chainer.no_backprop_mode():
        for args in _calls(rng, 6):
            chainerjit.testing.assert_results_equal(jitted(*args),
                                                    model.forward(*args))
    assert len(jitted.cache_entries()) == 1
    assert jitted.cache_info().compiled >= 3


def test_float_items_get_their_gradients():
    rng = numpy.random.RandomState(2)
    calls = [([rng.standard_normal((int(rng.randint(2, 7)), 3)).astype(
        numpy.float32) for _ in range(3)],) for _ in range(6)]
    jitted = differential.check_grads(None, calls, model=_model(_Vectors),
                                      method='forward')
    assert len(jitted.cache_entries()) == 1


def test_short_items_and_other_counts_are_entries_of_their_own():
    rng = numpy.random.RandomState(3)
    calls = _calls(rng, 3) + [([numpy.array([3], numpy.int32)] +
                               _tokens(rng, 3),)] + _calls(rng, 2, n_items=5)
    jitted = differential.check_grads(None, calls, model=_model(_PerItem),
                                      method='forward')
    assert len(jitted.cache_entries()) == 3


class _ReadsLength(_PerItem):
    def forward(self, xs):
        return [self.fc(self.embed(x)) * (2.0 if len(x) > 4 else 1.0)
                for x in xs]


class _SumsItems(_PerItem):
    def forward(self, xs):
        return [F.sum(self.embed(x), axis=0) for x in xs]


@pytest.mark.parametrize('cls, why', [
    (_ReadsLength, 'xs[0].shape[0] compared at test_ragged_lists.py:'),
    (_SumsItems, 'a value computed from xs[0] read by Sum'),
])
def test_a_length_the_program_depends_on_stays_in_the_key(cls, why):
    rng = numpy.random.RandomState(4)
    calls = _calls(rng, 4)
    model = _model(cls)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for args in calls + calls:
            chainerjit.testing.assert_results_equal(jitted(*args),
                                                    model.forward(*args))
    messages = [str(w.message) for w in caught
                if w.category is chainerjit.errors.RecompileWarning]
    assert any('lengths of the items of xs stay in the cache key' in m and
               why in m for m in messages), messages
    assert len(jitted.cache_entries()) == 4
    assert why in '\n'.join(jitted.cache_entries()[0].size_notes())


class _Baked(chainer.FunctionNode):
    """Doubles its rows; its (wrong) lowering below returns as many rows as
    it was recorded with."""

    def forward(self, inputs):
        return inputs[0] * 2,


@ops.lowering(_Baked)
def _lower_baked(node, ctx):
    rows = ctx.in_shapes[0][0]
    return Kernel(lambda x: x[:rows] * 2, lengths=rows_follow_first)


class _UsesBaked(_PerItem):
    def forward(self, xs):
        return [_Baked().apply((self.embed(x),))[0] for x in xs]


def test_a_program_wrong_at_other_lengths_is_caught_by_eager():
    rng = numpy.random.RandomState(5)
    model = _model(_UsesBaked)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        with chainer.no_backprop_mode():
            for args in [([numpy.arange(6, dtype=numpy.int32),
                           numpy.arange(3, dtype=numpy.int32)],)] + \
                    _calls(rng, 4, n_items=2, low=7, high=9):
                chainerjit.testing.assert_results_equal(
                    jitted(*args), model.forward(*args))
    assert any('gave another result than eagerly' in str(w.message)
               for w in caught), [str(w.message) for w in caught]
    assert all(e.symbolic is None for e in jitted.cache_entries())
