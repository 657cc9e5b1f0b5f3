"""An index holding the size of the axis it indexes (``xs[T - 1]``,
``h[:, len(ws) - 1]``, ``xs[:T - 1]``) reads the same items as one
counted from the end (``xs[-1]``, ``xs[:-1]``): recorded so
(``lengths.index_from_the_end``), one entry serves every size. An index
holding another axis's size is left as it is, and keeps that size in the
key. NumPy's indexing of an argument at a constant (``xs[-1]``, ``xs[0]``)
serves every size as ``F.get_item``'s does.

Each model runs jitted and eagerly over calls of several lengths and batch
sizes, with new values each call; outputs and gradients must equal eager
Chainer's."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from tests import differential

I, H = 6, 8
SHAPES = [(5, 4), (9, 3), (17, 8), (9, 1), (3, 5), (12, 2)]


class _Last(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.inner = L.Linear(I, H)
            self.out = L.Linear(H, 3)

    def steps(self, xs):
        return F.tanh(xs * 0.5)


class NumPyLast(_Last):
    def forward(self, xs):
        return self.out(self.inner(self.steps(xs[-1:])[0]))


class NumPyFirst(_Last):
    def forward(self, xs):
        return self.out(F.tanh(self.inner(xs[0])))


class NumPyLengthLessOne(_Last):
    def forward(self, xs):
        T = xs.shape[0]
        return self.out(F.tanh(self.inner(xs[T - 1])))


class NumPyLenLessOne(_Last):
    def forward(self, xs):
        return self.out(F.tanh(self.inner(xs[len(xs) - 1])))


class StepsLengthLessOne(_Last):
    def forward(self, xs):
        h = self.steps(xs)
        return self.out(self.inner(h[h.shape[0] - 1]))


class BatchFirstLengthLessOne(_Last):
    def forward(self, xs):
        T = xs.shape[0]
        h = F.transpose(self.steps(xs), (1, 0, 2))
        return self.out(self.inner(h[:, T - 1]))


class AllButTheLast(_Last):
    def forward(self, xs):
        T = len(xs)
        h = self.steps(xs)
        return self.out(self.inner(F.sum(h[:T - 1] * h[1:T], axis=0)))


class LastSlice(_Last):
    def forward(self, xs):
        T = xs.shape[0]
        return self.out(self.inner(F.sum(self.steps(xs[T - 1:T]), axis=0)))


def _calls(shapes=SHAPES, seed=0):
    rng = numpy.random.RandomState(seed)
    return [(rng.standard_normal((n, b, I)).astype('f'),) for n, b in shapes]


@pytest.mark.parametrize('cls', [
    NumPyLast, NumPyFirst, NumPyLengthLessOne, NumPyLenLessOne, LastSlice])
def test_numpy_indexing_of_an_argument_serves_every_size(cls):
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = differential.check_on_arrays(cls(), _calls())
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


@pytest.mark.parametrize('cls', [
    NumPyLast, NumPyFirst, NumPyLengthLessOne, NumPyLenLessOne,
    StepsLengthLessOne, BatchFirstLengthLessOne, AllButTheLast, LastSlice])
def test_an_index_of_the_size_less_some_serves_every_size(cls):
    numpy.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = differential.check_grads(None, _calls(), model=cls(),
                                          method='forward')
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


class AnotherAxisSize(_Last):
    """The batch size indexes the steps' axis: ``xs[B - 1]`` is not the
    last step."""

    def forward(self, xs):
        B = xs.shape[1]
        return self.out(F.tanh(self.inner(xs[B - 1])))


class TheLengthLessTwo(_Last):
    """``xs[T - 2]``: the same as ``xs[-2]``, which a single step has not:
    the length stays in the key."""

    def forward(self, xs):
        T = xs.shape[0]
        return self.out(self.inner(self.steps(xs)[T - 2]))


@pytest.mark.parametrize('cls', [AnotherAxisSize, TheLengthLessTwo])
def test_an_index_of_another_size_is_kept_with_a_warning(cls):
    calls = _calls([(5, 4), (9, 3), (6, 5), (9, 3), (7, 2)], seed=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jitted = differential.check_grads(None, calls, model=cls(),
                                          method='forward')
    assert jitted.cache_info().currsize == 4, jitted.cache_report()
    assert any(issubclass(w.category, errors.RecompileWarning)
               for w in caught)


def test_an_index_from_the_end_is_printed_as_such():
    model = NumPyLengthLessOne()
    jitted = chainerjit.jit(model.forward)
    for args in _calls(SHAPES[:3], seed=2):
        jitted(*args)
    entry, = jitted.cache_entries()
    assert '[-1]' in str(entry.graph), entry.graph


def _cut_from_a_size(xs):
    """``xs[T - 3:]``: at ``T < 3`` a negative start, which NumPy counts
    from the end (``xs[-1:]`` at ``T = 2``), not ``xs[-3:]``."""
    T = len(xs)
    return F.sum(xs[T - 3:], axis=0) + F.sum(xs[:T - 3], axis=0) * 2


def _stop_of_a_backward_slice(xs):
    """``xs[:T:-1]`` is empty (the stop is past the start), not
    ``xs[::-1]``."""
    T = xs.shape[0]
    return F.concat([xs[:T:-1], xs[T - 1::-1]], axis=0) * 3


@pytest.mark.parametrize('fn', [_cut_from_a_size, _stop_of_a_backward_slice])
@pytest.mark.parametrize('lengths', [(5, 2, 7, 1, 3, 5, 2),
                                     (2, 5, 1, 4, 2, 1)])
def test_an_index_that_is_not_the_same_from_the_end_reads_as_eager(
        fn, lengths):
    rng = numpy.random.RandomState(3)
    calls = [(rng.standard_normal((n, 2)).astype('f'),) for n in lengths]
    differential.check_grads(fn, calls)


class BackwardDifferences(_Last):
    """``xs[t] - xs[t - 1]`` counting down: the last step's ``t - 1`` is
    -1, the last row, as NumPy reads it."""

    def forward(self, xs):
        T = len(xs)
        h = 0
        for i in range(T):
            t = T - 1 - i
            h = F.tanh(self.inner(xs[t] - xs[t - 1]) + h)
        return self.out(h)


def test_a_step_before_the_first_reads_the_last_as_eager():
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.LoopWarning)
        differential.check_grads(None, _calls(SHAPES[:3] * 2),
                                 model=BackwardDifferences(),
                                 method='forward')
