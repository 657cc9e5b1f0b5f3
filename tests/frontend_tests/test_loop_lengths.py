"""Trip counts tied to the call by what the forward does with its sizes
(``chainerjit.frontend.lengths``, ``symbolic``): RNN forwards written the
ways people write them (``T, B = xs.shape``, a reversed loop, state made in
the first step, a ``while t < T`` counter) keep one cache entry for every
sequence length, and a forward whose Python uses the length otherwise keeps
it in the key with a warning naming the line and the use.

Each model runs jitted and eagerly over calls of several lengths, with new
values each call; outputs and gradients must equal eager Chainer's.
"""

import copy
import re
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from tests import differential


I, H, B = 6, 8, 4
LENGTHS = (5, 9, 17, 9, 3)


class _Steps(chainer.Chain):
    def __init__(self):
        super(_Steps, self).__init__()
        with self.init_scope():
            self.x2h = L.Linear(I, 4 * H)
            self.h2h = L.Linear(H, 4 * H, nobias=True)
            self.back = L.Linear(I, 4 * H)
            self.gru = L.StatelessGRU(I, H)
            self.out = L.Linear(H, 3)

    def step(self, x, h, c):
        c, h = F.lstm(c, self.x2h(x) + self.h2h(h))
        return h, c


class ShapeOfTwo(_Steps):
    def forward(self, xs):
        T, batch = xs.shape[0], xs.shape[1]
        h = c = self.xp.zeros((batch, H), dtype=xs.dtype)
        for t in range(T):
            h, c = self.step(xs[t], h, c)
        return self.out(h)


class ShapeUnpacked(_Steps):
    def forward(self, xs):
        T, batch, _ = xs.shape
        h = c = self.xp.zeros((batch, H), dtype=xs.dtype)
        for t in range(T):
            h, c = self.step(xs[t], h, c)
        return self.out(h)


class StateMadeInTheLoop(_Steps):
    def forward(self, xs):
        h = c = None
        for x in xs:
            if h is None:
                h = c = self.xp.zeros((x.shape[0], H), numpy.float32)
            h, c = self.step(x, h, c)
        return self.out(h)


class Bidirectional(_Steps):
    def forward(self, xs):
        T = len(xs)
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in range(T):
            h, c = self.step(xs[t], h, c)
        hb = cb = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in reversed(range(T)):
            cb, hb = F.lstm(cb, self.back(xs[t]) + self.h2h(hb))
        return self.out(h + hb)


class BatchFirst(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[0], H), numpy.float32)
        for t in range(xs.shape[1]):
            h, c = self.step(xs[:, t], h, c)
        return self.out(h)


class BatchFirstSeparated(BatchFirst):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[0], H), numpy.float32)
        for x in F.separate(xs, axis=1):
            h, c = self.step(x, h, c)
        return self.out(h)


class BatchFirstSplit(BatchFirst):
    """Batch-first steps split into one each (``F.split_axis(xs, T,
    axis=1)``, their axis kept), squeezed in a comprehension, then read
    by a loop."""

    def forward(self, xs):
        batch, steps = xs.shape[:2]
        h = c = self.xp.zeros((batch, H), numpy.float32)
        split = [F.reshape(x, (batch, I))
                 for x in F.split_axis(xs, steps, axis=1)]
        for x in split:
            h, c = self.step(x, h, c)
        return self.out(h)


class SeparatedInTheHeader(BatchFirst):
    """The header makes batch-first steps time-major and separates
    them."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[0], H), numpy.float32)
        for x in F.separate(F.transpose(F.tanh(xs), (1, 0, 2))):
            h, c = self.step(x, h, c)
        return self.out(h)


class SeparatedOnTheSecondAxisInTheHeader(BatchFirst):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[0], H), numpy.float32)
        for x in F.separate(F.tanh(xs), axis=1):
            h, c = self.step(x, h, c)
        return self.out(h)


class Separated(_Steps):
    def forward(self, xs):
        h = c = None
        for x in F.separate(xs):
            if h is None:
                h = c = self.xp.zeros((x.shape[0], H), numpy.float32)
            h, c = self.step(x, h, c)
        return self.out(h)


class SeparatedBothWays(_Steps):
    def forward(self, xs):
        steps = F.separate(xs, axis=0)
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for x in steps:
            h, c = self.step(x, h, c)
        hb = cb = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in reversed(range(len(steps))):
            cb, hb = F.lstm(cb, self.back(steps[t]) + self.h2h(hb))
        return self.out(h + hb)


class MaskedPadding(_Steps):
    def forward(self, xs, ms):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in range(len(xs)):
            h_new, c_new = self.step(xs[t], h, c)
            m = F.expand_dims(ms[t], 1)
            h = F.broadcast_to(m, h.shape) * h_new + \
                F.broadcast_to(1 - m, h.shape) * h
            c = F.broadcast_to(m, c.shape) * c_new + \
                F.broadcast_to(1 - m, c.shape) * c
        return self.out(h)


class MaskedPaddingCounted(_Steps):
    """A ``while`` counter over the steps, reading each step's mask
    beside the step (batch-first: ``mask[:, t]``), as NumPy booleans."""

    def __init__(self, batch_first=False):
        super(MaskedPaddingCounted, self).__init__()
        self.batch_first = batch_first

    def forward(self, xs, mask):
        batch = xs.shape[0 if self.batch_first else 1]
        h = c = self.xp.zeros((batch, H), numpy.float32)
        t = 0
        while t < xs.shape[1 if self.batch_first else 0]:
            if self.batch_first:
                x, m = xs[:, t], mask[:, t][:, None].astype(xs.dtype)
            else:
                x, m = xs[t], mask[t][:, None].astype(xs.dtype)
            h_new, c_new = self.step(x, h, c)
            h = m * h_new + (1 - m) * h
            c = m * c_new + (1 - m) * c
            t += 1
        return self.out(h)


@pytest.mark.parametrize('batch_first', [False, True])
def test_a_counter_loop_reading_a_mask_serves_every_length(batch_first):
    rng = numpy.random.RandomState(2)
    calls = []
    for T, batch in SHAPES:
        xs = rng.standard_normal((T, batch, I)).astype('f')
        mask = rng.rand(T, batch) > .3
        mask[0] = True
        if batch_first:
            xs, mask = xs.transpose(1, 0, 2).copy(), mask.T.copy()
        calls.append((xs, mask))
    entry = _one_entry_with_gradients(MaskedPaddingCounted(batch_first),
                                      calls)
    assert 'trip=T' in str(entry.graph), entry.graph


class GruLink(_Steps):
    def forward(self, xs):
        T, batch, _ = xs.shape
        h = self.xp.zeros((batch, H), numpy.float32)
        for t in range(T):
            h = self.gru(h, xs[t])
        return self.out(h)


class StackedOutputs(_Steps):
    def forward(self, xs):
        T, batch, _ = xs.shape
        h = c = self.xp.zeros((batch, H), numpy.float32)
        ys = []
        for t in range(T):
            h, c = self.step(xs[t], h, c)
            ys.append(h)
        return F.stack(ys)


class FirstAndLastOutputs(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        hs = []
        for t in range(len(xs)):
            h, c = self.step(xs[t], h, c)
            hs.append(h)
        return self.out(hs[0] * hs[-1])


class FirstOutputOfTheReversedLoop(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        hs = []
        for t in reversed(range(len(xs))):
            h, c = self.step(xs[t], h, c)
            hs.append(h)
        return F.concat([self.out(hs[0]), self.out(hs[-1])])


class StackedTimesTheFirst(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        hs = []
        for x in xs:
            h, c = self.step(x, h, c)
            hs.append(h)
        return F.stack(hs) * F.broadcast_to(hs[0], (len(hs),) + h.shape)


class StepOfAClosure(_Steps):
    def forward(self, xs):
        def step(x, h, c):
            c, h = F.lstm(c, self.x2h(x) + self.h2h(h))
            return h, c
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for x in xs:
            h, c = step(x, h, c)
        return self.out(h)


class _Layers(_Steps):
    def __init__(self):
        super(_Layers, self).__init__()
        with self.init_scope():
            self.upper = L.StatelessGRU(H, H)


class LayersWrittenOut(_Layers):
    def forward(self, xs):
        cells = [self.gru, self.upper]
        states = [numpy.zeros((xs.shape[1], H), 'f') for _ in cells]
        for x in xs:
            h = x
            for k, cell in enumerate(cells):
                states[k] = cell(states[k], h)
                h = states[k]
        return self.out(h)


class LayersStartedInTheLoop(_Layers):
    def forward(self, xs):
        cells = (self.gru, self.upper)
        states = [None, None]
        for x in xs:
            h = x
            for k, cell in enumerate(cells):
                if states[k] is None:
                    states[k] = self.xp.zeros((x.shape[0], H), 'f')
                states[k] = cell(states[k], h)
                h = states[k]
        return self.out(states[0] * states[1])


class LayersIndexed(_Layers):
    def forward(self, xs):
        cells = [self.gru, self.upper]
        states = [self.xp.zeros((xs.shape[1], H), 'f')] * 2
        hs = []
        for t in range(len(xs)):
            h = xs[t]
            for k in range(2):
                states[k] = cells[k](states[k], h)
                h = states[k]
            hs.append(h)
        return self.out(F.mean(F.stack(hs), axis=0))


class BatchFirstProjectedAtOnce(BatchFirst):
    def forward(self, xs):
        batch, T, _ = xs.shape
        gx = F.reshape(self.x2h(F.reshape(xs, (batch * T, I))),
                       (batch, T, 4 * H))
        h = c = self.xp.zeros((batch, H), numpy.float32)
        for t in range(T):
            c, h = F.lstm(c, gx[:, t] + self.h2h(h))
        return self.out(h)


class StepsReadByASecondLoop(_Steps):
    def forward(self, xs):
        T = len(xs)
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        hs = []
        for t in range(T):
            h, c = self.step(xs[t], h, c)
            hs.append(h)
        y = 0
        for t in range(T):
            y = y + F.tanh(hs[t])
        return self.out(y)


class BackwardStepsReadInOrder(_Steps):
    def forward(self, xs):
        T = len(xs)
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        hb = [None] * T
        for t in reversed(range(T)):
            h, c = self.step(xs[t], h, c)
            hb[t] = h
        y = 0
        for t in range(T):
            y = y + hb[t] * (t + 1)
        return self.out(y)


class BothDirectionsZipped(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        hf = []
        for x in xs:
            h, c = self.step(x, h, c)
            hf.append(h)
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        hb = []
        for t in reversed(range(len(xs))):
            c, h = F.lstm(c, self.back(xs[t]) + self.h2h(h))
            hb.append(h)
        joined = [F.concat((f, b)) for f, b in zip(hf, reversed(hb))]
        y = 0
        for h in joined:
            y = y + F.sum(h * h, axis=1, keepdims=True)
        return y


class LayersOfAChainListRebuiltEachStep(_Steps):
    def __init__(self):
        super(LayersOfAChainListRebuiltEachStep, self).__init__()
        with self.init_scope():
            self.cells = chainer.ChainList(L.Linear(I + H, H),
                                           L.Linear(2 * H, H))

    def forward(self, xs):
        hs = [self.xp.zeros((xs.shape[1], H), 'f')] * len(self.cells)
        for t in range(len(xs)):
            h, new = xs[t], []
            for cell, state in zip(self.cells, hs):
                h = F.tanh(cell(F.concat((h, state))))
                new.append(h)
            hs = new
        return self.out(hs[-1])


def _calls(model, lengths=LENGTHS, seed=0):
    rng = numpy.random.RandomState(seed)
    calls = []
    for n in lengths:
        if isinstance(model, BatchFirst):
            calls.append((rng.standard_normal((B, n, I)).astype('f'),))
            continue
        xs = rng.standard_normal((n, B, I)).astype('f')
        if isinstance(model, MaskedPadding):
            calls.append((xs, (rng.rand(n, B) > .3).astype('f')))
        else:
            calls.append((xs,))
    return calls


class Projected(_Steps):
    def forward(self, xs):
        T, batch, _ = xs.shape
        gx = F.reshape(self.x2h(F.reshape(xs, (T * batch, I))),
                       (T, batch, 4 * H))
        h = c = self.xp.zeros((batch, H), numpy.float32)
        for t in range(T):
            c, h = F.lstm(c, gx[t] + self.h2h(h))
        return self.out(h)


class ProjectedIterated(_Steps):
    """The steps projected at once, merged with the batch and split back
    to the argument's sizes (``xs.shape[:2]``), then iterated over."""

    def forward(self, xs):
        gx = F.reshape(self.x2h(F.reshape(xs, (-1, I))),
                       xs.shape[:2] + (4 * H,))
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for g in gx:
            c, h = F.lstm(c, g + self.h2h(h))
        return self.out(h)


class ReversedProjected(_Steps):
    def forward(self, xs):
        T, batch, _ = xs.shape
        gx = F.reshape(self.back(F.reshape(xs, (T * batch, I))),
                       (T, batch, 4 * H))
        h = c = self.xp.zeros((batch, H), numpy.float32)
        for t in reversed(range(T)):
            c, h = F.lstm(c, gx[t] + self.h2h(h))
        return self.out(h)


class StepsComputedAtOnce(_Steps):
    def forward(self, xs):
        ys = F.tanh(xs) * 2
        h = ys[0]
        for t in range(1, len(xs)):
            h = h + ys[t]
        return self.out(F.tanh(self.x2h(h)[:, :H]))


class CounterLoop(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        t = 0
        while t < xs.shape[0]:
            h, c = self.step(xs[t], h, c)
            t += 1
        return self.out(h)


class CounterLoopOverComputedSteps(_Steps):
    """A ``while`` loop counting over a value computed from the
    argument, by its length."""

    def forward(self, xs):
        exs = F.tanh(xs)
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        t = 0
        while t < len(exs):
            h, c = self.step(exs[t], h, c)
            t += 1
        return self.out(h)


class CounterWeighted(_Steps):
    """The counter as a number: each step's state weighted by its
    position (``h * (t + 1)``), and the enumerated inputs by theirs."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        total = 0
        for t in range(len(xs)):
            h, c = self.step(xs[t], h, c)
            total = total + h * (t + 1)
        for t, x in enumerate(xs):
            total = total + F.sum(x, axis=1, keepdims=True) * (2 * t - 3)
        return self.out(total)


class CounterDecayed(_Steps):
    """The counter as a power: each step's state discounted by ``0.9 **
    t`` (the total made by the first step, which is recorded before the
    loop), and doubled by ``2 ** (t + 1)``."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        total = 0
        for t in range(len(xs)):
            h, c = self.step(xs[t], h, c)
            total = total + 0.9 ** t * h + h * 2 ** (t + 1)
        return self.out(total)


class StepsFlattenedByBatch(_Steps):
    """The steps' states stacked batch-first and flattened with the
    length, ``(B, T * H)``, then split back into steps."""

    def forward(self, xs):
        T, B = xs.shape[0], xs.shape[1]
        h = c = self.xp.zeros((B, H), numpy.float32)
        hs = []
        for x in xs:
            h, c = self.step(x, h, c)
            hs.append(h)
        flat = F.reshape(F.stack(hs, axis=1), (B, T * H))
        steps = F.reshape(F.tanh(flat), (B, T, H))
        peak = F.max(flat, axis=1, keepdims=True)
        return self.out(F.sum(steps, axis=1) + peak)


class ArgumentFlattenedByBatch(_Steps):
    """The steps made batch-first and flattened with the length beside
    the loop, ``(B, T * I)``."""

    def forward(self, xs):
        T, batch, _ = xs.shape
        h = c = self.xp.zeros((batch, H), numpy.float32)
        for t in range(T):
            h, c = self.step(xs[t], h, c)
        flat = F.reshape(F.transpose(xs, (1, 0, 2)), (batch, T * I))
        return self.out(h) + F.sum(flat, axis=1, keepdims=True)


class _Encoder(_Steps):
    """A helper method runs the loop and returns the list of its
    steps."""

    def encode(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        hs = []
        for x in xs:
            h, c = self.step(x, h, c)
            hs.append(h)
        return hs


class HelperReturnsSteps(_Encoder):
    def forward(self, xs):
        hs = self.encode(xs)
        return self.out(F.concat(hs, axis=0))


class HelperStepsStacked(_Encoder):
    def forward(self, xs):
        return self.out(F.max(F.stack(self.encode(xs)), axis=0))


class HelperReturnsStepsAndState(_Steps):
    def encode(self, xs):  # a GRU's states, and the last
        states = []
        h = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for x in xs:
            states.append(self.gru(h, x))
            h = states[-1]
        return states, h

    def forward(self, xs):
        hs, h = self.encode(xs)
        return self.out(F.sum(F.stack(hs), axis=0) + h)


@pytest.mark.parametrize('cls', [
    ShapeOfTwo, ShapeUnpacked, StateMadeInTheLoop, Bidirectional,
    BatchFirst, MaskedPadding, GruLink, StackedOutputs, CounterLoop,
    Projected, ReversedProjected, StepsComputedAtOnce, Separated,
    SeparatedBothWays, BatchFirstSeparated, BatchFirstSplit,
    HelperReturnsSteps,
    HelperStepsStacked, HelperReturnsStepsAndState,
    CounterLoopOverComputedSteps, CounterWeighted, CounterDecayed,
    StepsFlattenedByBatch, ProjectedIterated,
    ArgumentFlattenedByBatch, SeparatedInTheHeader,
    SeparatedOnTheSecondAxisInTheHeader, FirstAndLastOutputs,
    FirstOutputOfTheReversedLoop, StackedTimesTheFirst, StepOfAClosure,
    LayersWrittenOut, LayersStartedInTheLoop, LayersIndexed,
    BatchFirstProjectedAtOnce, StepsReadByASecondLoop,
    BackwardStepsReadInOrder, BothDirectionsZipped,
    LayersOfAChainListRebuiltEachStep])
def test_one_entry_for_every_length_with_gradients(cls):
    model = cls()
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        jf = testing.assert_jit_grads_match_eager(
            model, _calls(model), rtol=1e-4, atol=1e-5)
    assert jf.cache_info().currsize == 1, jf.cache_report()
    entry, = jf.cache_entries()
    assert 'T' in str(entry.signature), str(entry.signature)
    assert 'trip=T' in str(entry.graph), entry.graph


@pytest.mark.parametrize('cls', [ShapeUnpacked, Bidirectional, Projected,
                                 SeparatedBothWays, FirstAndLastOutputs,
                                 BatchFirstSplit])
def test_one_entry_for_every_length_in_inference(cls):
    model = cls()
    with chainer.using_config('train', False):
        jf = testing.assert_jit_matches_eager(
            model, _calls(model, seed=1), rtol=1e-4, atol=1e-5)
    assert jf.cache_info().currsize == 1, jf.cache_report()


class FirstAndLastReturned(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        hs = []
        for t in range(len(xs)):
            h, c = self.step(xs[t], h, c)
            hs.append(h)
        return hs[0], hs[-1]


def test_the_first_output_returned_keeps_one_step_apart():
    # With one step, hs[0] is hs[-1]: that call keeps an entry of its own
    # (the entry of every other length gives two outputs).
    model = FirstAndLastReturned()
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        jf = testing.assert_jit_grads_match_eager(
            model, _calls(model, lengths=(5, 1, 5, 7, 9, 11, 1)),
            rtol=1e-4, atol=1e-5)
    assert jf.cache_info().currsize == 2, jf.cache_report()


@pytest.mark.parametrize('cls', [FirstAndLastOutputs, StackedTimesTheFirst])
def test_the_first_output_is_peeled_off_and_serves_one_step(cls):
    """``hs[0]`` after the loop: its first step is recorded before it, so
    one entry serves every length, one step included."""
    model = cls()
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        jf = testing.assert_jit_grads_match_eager(
            model, _calls(model, lengths=(5, 1, 9, 2, 4)), rtol=1e-4,
            atol=1e-5)
    assert jf.cache_info().currsize == 1, jf.cache_report()


class HelperStepsReadOneByOne(_Encoder):
    def forward(self, xs):
        y = 0
        for h in self.encode(xs):
            y = y + h
        return self.out(y)


class CounterSquared(_Steps):
    def forward(self, xs):
        total = 0
        for t in range(len(xs)):
            total = total + xs[t] * t ** 2
        return self.out(self.x2h(total)[:, :H])


def test_a_counter_used_otherwise_keeps_the_length_with_a_warning():
    model = CounterSquared()
    with pytest.warns(errors.LoopWarning,
                      match="its iterations give MulConstant a constant "
                      "that changes otherwise than by a fixed int step or "
                      "ratio"):
        testing.assert_jit_grads_match_eager(model, _calls(model),
                                             rtol=1e-4, atol=1e-5)


def test_steps_a_helper_returns_read_one_by_one_keep_the_length():
    model = HelperStepsReadOneByOne()
    with pytest.warns(errors.LoopWarning, match="the list 'hs' is returned "
                      "to a caller that uses it otherwise than whole"):
        jf = testing.assert_jit_grads_match_eager(
            model, _calls(model), rtol=1e-4, atol=1e-5)
    assert jf.cache_info().currsize == len(set(LENGTHS)), jf.cache_report()


class SeparatedOtherwise(_Steps):
    """F.separate's items read other than by a loop: by an index, unpacked,
    returned."""

    def __init__(self, how):
        super(SeparatedOtherwise, self).__init__()
        self.how = how

    def forward(self, xs):
        steps = F.separate(xs)
        if self.how == 'ends':
            return F.tanh(self.x2h(steps[0]) + self.back(steps[-1]))
        if self.how == 'unpacked':
            first, *rest, last = steps
            return F.tanh(self.x2h(first) + self.back(last))
        return steps


@pytest.mark.parametrize('how', ['ends', 'unpacked', 'returned'])
def test_separated_items_read_otherwise_match_eager(how):
    model = SeparatedOtherwise(how)
    jf = chainerjit.jit(model)
    for xs, in _calls(model):
        testing.assert_results_equal(jf(xs), model(xs))


def test_the_reversed_loop_counts_from_the_end():
    model = Bidirectional()
    jf = chainerjit.jit(model)
    jf(*_calls(model, (5,))[0])
    graph = str(jf.cache_entries()[0].graph)
    assert '[-1-i]' in graph, graph


# --- lengths that stay in the key, and why -----------------------------------


def test_the_steps_projected_at_once_follow_the_length():
    model = Projected()
    jf = chainerjit.jit(model)
    jf(*_calls(model, (5,))[0])
    graph = str(jf.cache_entries()[0].graph)
    assert 'f32[4*T,6] = Reshape' in graph, graph
    assert 'f32[T,4,32] = Reshape' in graph, graph


class RowsOfAllSteps(_Steps):
    def forward(self, xs):
        T, batch, _ = xs.shape
        gx = self.x2h(F.reshape(xs, (T * batch, I)))
        h = c = self.xp.zeros((batch, H), numpy.float32)
        for t in range(T):  # (reads the first T of the T * B rows)
            c, h = F.lstm(c, F.broadcast_to(gx[t], (batch, 4 * H)) +
                          self.h2h(h))
        return self.out(h)


class TimeFlattened(_Steps):
    def forward(self, xs):
        T, batch, _ = xs.shape
        h = c = self.xp.zeros((batch, H), numpy.float32)
        for t in range(T):
            h, c = self.step(xs[t], h, c)
        # (the steps' values reshaped otherwise than by merging axes)
        flat = F.reshape(xs, (batch, T * I))
        return self.out(h) + F.sum(flat, axis=1, keepdims=True)


class LongSequencesDiffer(_Steps):
    def forward(self, xs):
        T = xs.shape[0]
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in range(T):
            h, c = self.step(xs[t], h, c)
        if T > 10:
            h = h * 2
        return self.out(h)


def test_a_comparison_of_the_length_is_a_guard_taking_both_sides():
    # if T > 10: one symbolic entry for the lengths on each side.
    model = LongSequencesDiffer()
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        jf = testing.assert_jit_grads_match_eager(
            model, _calls(model, (5, 9, 17, 12, 3, 20, 7, 11, 10)),
            rtol=1e-4, atol=1e-5)
    assert jf.cache_info().currsize == 2, jf.cache_report()
    described = sorted(e.describe().split('\n')[1]
                       for e in jf.cache_entries())
    assert described == ['for sizes where: T > 10',
                         'for sizes where: not T > 10'], described


def test_a_side_first_met_with_one_row_keeps_one_entry():
    # A side recorded at a batch of one takes any length at that batch;
    # the entry of every batch size then met serves its calls.
    model = LongSequencesDiffer()
    rng = numpy.random.RandomState(0)
    calls = [(rng.standard_normal((n, b, I)).astype('f'),) for n, b in
             [(5, 4), (9, 3), (17, 8), (12, 1), (3, 5), (13, 2), (14, 6),
              (12, 1)]]
    with chainer.using_config('train', False):
        jf = testing.assert_jit_matches_eager(model, calls, rtol=1e-4,
                                              atol=1e-5)
    assert jf.cache_info().currsize == 2, jf.cache_report()


def test_entries_for_any_size_on_both_sides_do_not_warn_of_recompiling():
    # The first side of the guard is compiled for one batch size and then
    # for any; the sizes seen then open the other side's and the training
    # calls' batch at their first: five misses, four entries, no
    # recompiling to warn of.
    model = LongSequencesDiffer()
    eager = copy.deepcopy(model)
    model.forward = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(4)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        for train in (False, True):
            for n, batch in ((5, 3), (12, 4), (7, 2), (14, 5), (4, 6),
                             (11, 3)):
                xs = rng.standard_normal((n, batch, I)).astype('f')
                with chainer.using_config('train', train):
                    numpy.testing.assert_allclose(
                        model(xs).array, eager(xs).array, rtol=1e-5,
                        atol=1e-6)
    info = model.forward.cache_info()
    assert info.misses == 5 and info.currsize == 4, info


# --- loops over a value computed from the argument ---------------------------

V = 20  # the vocabulary of word ids


class _Embedded(_Steps):
    """Time-major word ids ``(T, B)`` embedded all at once before the
    loop, which goes over the embedded steps."""

    def __init__(self):
        super(_Embedded, self).__init__()
        with self.init_scope():
            self.embed = L.EmbedID(V, I)


class EmbeddedEach(_Embedded):
    def forward(self, ids):
        h = c = None
        exs = F.sigmoid(self.embed(ids))
        for x in exs:
            if h is None:
                h = c = self.xp.zeros((x.shape[0], H), numpy.float32)
            h, c = self.step(x, h, c)
        return self.out(h)


class EmbeddedCounted(_Embedded):
    def forward(self, ids):
        exs = F.tanh(self.embed(ids))
        h = c = self.xp.zeros((exs.shape[1], H), numpy.float32)
        for t in range(len(exs)):
            h, c = self.step(exs[t], h, c)
        return self.out(h)


class EmbeddedBatchFirst(_Embedded):
    def forward(self, ids):  # (B, T)
        exs = self.embed(ids)
        h = c = self.xp.zeros((exs.shape[0], H), numpy.float32)
        for t in range(exs.shape[1]):
            h, c = self.step(exs[:, t], h, c)
        return self.out(h)


class EmbeddedMasked(_Embedded):
    """Padded time-major ids (-1 after each sentence's end), each step
    kept where the mask NumPy made from the ids is 0."""

    def __init__(self):
        super(EmbeddedMasked, self).__init__()
        self.embed.ignore_label = -1

    def forward(self, ids):
        exs = self.embed(ids)
        mask = (ids >= 0).astype(numpy.float32)
        h = c = self.xp.zeros((ids.shape[1], H), numpy.float32)
        for t in range(len(exs)):
            h_new, c_new = self.step(exs[t], h, c)
            m = F.broadcast_to(mask[t][:, None], h.shape)
            h = m * h_new + (1 - m) * h
            c = m * c_new + (1 - m) * c
        return self.out(h)


class EmbeddedLongOnesDiffer(_Embedded):
    def forward(self, ids):
        exs = self.embed(ids)
        h = c = self.xp.zeros((ids.shape[1], H), numpy.float32)
        for x in exs:
            h, c = self.step(x, h, c)
        return self.out(h * 2 if len(exs) > 8 else h)


class EmbeddedInTheHeader(_Embedded):
    """The loop's header computes the steps it goes over."""

    def forward(self, ids):
        h = c = None
        for x in F.sigmoid(self.embed(ids)):
            if h is None:
                h = c = self.xp.zeros((x.shape[0], H), numpy.float32)
            h, c = self.step(x, h, c)
        return self.out(h)


class EnumeratedInTheHeader(_Embedded):
    """The header computes the steps and numbers them; the states are
    collected and stacked."""

    def forward(self, ids):
        h = c = self.xp.zeros((ids.shape[1], H), numpy.float32)
        hs = []
        for t, x in enumerate(self.embed(ids)):
            h, c = self.step(x, h, c)
            hs.append(h)
        return self.out(F.stack(hs)[-1])


class NextWordsOfSlices(_Embedded):
    """A language model whose inputs and targets are cut from one array
    of time-major ids: ``ids[:-1]`` and ``ids[1:]``."""

    def __init__(self):
        super(NextWordsOfSlices, self).__init__()
        with self.init_scope():
            self.words = L.Linear(H, V)

    def forward(self, ids):
        inputs, targets = ids[:-1], ids[1:]
        h = c = self.xp.zeros((ids.shape[1], H), numpy.float32)
        loss = 0
        for x, t in zip(inputs, targets):
            h, c = self.step(self.embed(x), h, c)
            loss += F.softmax_cross_entropy(self.words(h), t)
        return loss


class NextWordsOfEmbeddedSlices(NextWordsOfSlices):
    """The same, the inputs embedded at once and cut in the header."""

    def forward(self, ids):
        exs = self.embed(ids)
        h = c = self.xp.zeros((ids.shape[1], H), numpy.float32)
        loss = 0
        for x, t in zip(exs[:-1], ids[1:]):
            h, c = self.step(x, h, c)
            loss += F.softmax_cross_entropy(self.words(h), t)
        return loss


class CountedOverASlice(NextWordsOfSlices):
    """The inputs cut before they are embedded, the loop counted over
    them, each step's target read from the other cut."""

    def forward(self, ids):
        exs = F.tanh(self.embed(ids[:-1]))
        targets = ids[1:]
        h = c = self.xp.zeros((ids.shape[1], H), numpy.float32)
        hs = []
        for t in range(len(exs)):
            h, c = self.step(exs[t], h, c)
            hs.append(F.softmax_cross_entropy(self.words(h), targets[t]))
        return F.sum(F.stack(hs)) + F.sum(exs[0]) + F.sum(exs[-1])


class StepsAfterTheFirst(_Embedded):
    def forward(self, ids):
        h = c = self.xp.zeros((ids.shape[1], H), numpy.float32)
        for x in self.embed(ids)[1:]:
            h, c = self.step(x, h, c)
        return self.out(h)


class CellStateZerosLike(_Embedded):
    """The cell state made like the hidden one (``xp.zeros_like(h)``)."""

    def forward(self, ids):
        h = self.xp.zeros((ids.shape[1], H), numpy.float32)
        c = self.xp.zeros_like(h)
        for x in self.embed(ids):
            h, c = self.step(x, h, c)
        return self.out(h)


class CellStateCopied(_Embedded):
    """The cell state a copy of the hidden one (``h.copy()``)."""

    def forward(self, ids):
        h = self.xp.zeros((len(ids[0]), H), numpy.float32)
        c = h.copy()
        for x in self.embed(ids):
            h, c = self.step(x, h, c)
        return self.out(h)


@pytest.mark.parametrize('cls', [CellStateZerosLike, CellStateCopied])
def test_a_state_made_like_another_serves_every_length_and_batch(cls):
    entry = _one_entry_with_gradients(cls(), _id_calls(SHAPES))
    assert str(entry.signature).startswith('ids: i32[T,B]'), entry.signature


@pytest.mark.parametrize('cls', [NextWordsOfSlices,
                                 NextWordsOfEmbeddedSlices,
                                 CountedOverASlice, StepsAfterTheFirst])
def test_a_loop_over_cut_steps_serves_every_length_and_batch(cls):
    entry = _one_entry_with_gradients(cls(), _id_calls(SHAPES))
    # (T-2 where the first of the T-1 steps is peeled: loss = 0 + ...)
    assert re.search(r'Loop\[trip=T-[12]\]', str(entry.graph)), entry.graph
    assert str(entry.signature).startswith('ids: i32[T,B]'), entry.signature


#: (length, batch size) of each call
SHAPES = [(5, 4), (9, 4), (17, 3), (9, 6), (3, 2), (12, 5)]


def _one_entry_with_gradients(model, calls):
    """The one cache entry of ``model`` jitted, called with ``calls``, its
    values and gradients equal to eager's, with no warning."""
    numpy.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        warnings.simplefilter('error', errors.RecompileWarning)
        jf = testing.assert_jit_grads_match_eager(model, calls, rtol=1e-4,
                                                  atol=1e-5)
    assert jf.cache_info().currsize == 1, jf.cache_report()
    entry, = jf.cache_entries()
    return entry


def _id_calls(shapes, seed=0, padded=False):
    rng = numpy.random.RandomState(seed)
    return [(rng.randint(-1 if padded else 0, V, shape).astype(numpy.int32),)
            for shape in shapes]


@pytest.mark.parametrize('cls', [EmbeddedEach, EmbeddedCounted,
                                 EmbeddedBatchFirst, EmbeddedMasked,
                                 EmbeddedInTheHeader, EnumeratedInTheHeader])
def test_a_loop_over_embedded_steps_serves_every_length_and_batch(cls):
    # (lengths and batch sizes both change: a second compile makes both
    # symbolic)
    batch_first = cls is EmbeddedBatchFirst
    calls = _id_calls([s[::-1] if batch_first else s for s in SHAPES],
                      padded=cls is EmbeddedMasked)
    entry = _one_entry_with_gradients(cls(), calls)
    assert 'trip=T' in str(entry.graph), entry.graph
    assert str(entry.signature).startswith(
        'ids: i32[B,T]' if batch_first else 'ids: i32[T,B]'), entry.signature


class StepsProjectedAtOnce(_Embedded):
    """A language model whose loop collects the steps' states and
    projects all of them at once, its targets another argument of as many
    steps (``F.concat(hs)``, ``ts.reshape(-1)``)."""

    def __init__(self):
        super(StepsProjectedAtOnce, self).__init__()
        with self.init_scope():
            self.words = L.Linear(H, V)

    def forward(self, ids, ts):
        exs = self.embed(ids)
        h = c = self.xp.zeros((ids.shape[1], H), numpy.float32)
        hs = []
        for x in exs:
            h, c = self.step(x, h, c)
            hs.append(h)
        return F.softmax_cross_entropy(self.words(F.concat(hs, axis=0)),
                                       ts.reshape(-1))


class BatchFirstStepsProjectedAtOnce(StepsProjectedAtOnce):
    """:class:`StepsProjectedAtOnce` of batch-first ids and targets
    (``F.stack(hs, axis=1)``, ``F.reshape(ts, (-1,))``)."""

    def forward(self, ids, ts):
        exs = self.embed(ids)
        h = c = self.xp.zeros((ids.shape[0], H), numpy.float32)
        hs = []
        for t in range(ids.shape[1]):
            h, c = self.step(exs[:, t], h, c)
            hs.append(h)
        ys = self.words(F.reshape(F.stack(hs, axis=1), (-1, H)))
        return F.softmax_cross_entropy(ys, F.reshape(ts, (-1,)))


@pytest.mark.parametrize('batch_first', [False, True])
def test_steps_projected_at_once_against_targets_serve_every_length(
        batch_first):
    model = BatchFirstStepsProjectedAtOnce() if batch_first else \
        StepsProjectedAtOnce()
    shapes = [(5, 4), (9, 4), (17, 3), (9, 6), (3, 2), (12, 5)]
    shapes = [s[::-1] if batch_first else s for s in shapes]
    rng = numpy.random.RandomState(1)
    calls = [(rng.randint(0, V, s).astype(numpy.int32),
              rng.randint(0, V, s).astype(numpy.int32)) for s in shapes]
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        warnings.simplefilter('error', errors.RecompileWarning)
        jf = testing.assert_jit_grads_match_eager(model, calls, rtol=1e-4,
                                                  atol=1e-5)
    entry, = jf.cache_entries()
    axes = 'B,T' if batch_first else 'T,B'
    assert str(entry.signature).startswith(
        'ids: i32[%s]@cpu (array), ts: i32[%s]' % (axes, axes)), \
        entry.signature


class StackedLengthCompared(_Embedded):
    def forward(self, ids):
        h = c = self.xp.zeros((ids.shape[1], H), numpy.float32)
        hs = []
        exs = self.embed(ids)
        for x in exs:
            h, c = self.step(x, h, c)
            hs.append(h)
        steps = F.stack(hs)
        if steps.shape[0] > 8:  # the stacked steps' length: a guard
            return self.out(h) * 2
        return self.out(F.sum(steps, axis=0))


def test_a_decision_on_the_stacked_steps_length_is_a_guard():
    model = StackedLengthCompared()
    calls = _id_calls([(5, 4), (9, 4), (17, 4), (3, 4), (12, 4), (8, 4),
                       (9, 4), (5, 4)])
    jf = testing.assert_jit_grads_match_eager(model, calls, rtol=1e-4,
                                              atol=1e-5)
    assert jf.cache_info().currsize == 2, jf.cache_report()


def test_explain_says_the_targets_have_another_length():
    model = StepsProjectedAtOnce()
    jf = chainerjit.jit(model)
    rng = numpy.random.RandomState(2)

    def ids(*shape):
        return rng.randint(0, V, shape).astype(numpy.int32)
    for T in (5, 7):
        jf(ids(T, 3), ids(T, 3))
    text = jf.explain(ids(9, 3), ids(8, 3))
    assert 'ts: axis 0 is T, the length of ids (axis 0): 8 against 9' in \
        text, text


class EmbeddedWithDropout(_Embedded):
    def forward(self, ids):
        exs = F.dropout(self.embed(ids), 0.3)
        h = c = None
        for x in exs:
            if h is None:
                h = c = self.xp.zeros((x.shape[0], H), numpy.float32)
            h, c = self.step(F.dropout(x, 0.2), h, c)
        return self.out(F.dropout(h, 0.1))


def test_dropout_in_and_before_the_loop_serves_every_length():
    # The draws of the first call at a new length are put back between
    # the program's run and eager's, which then draw the same.
    model = EmbeddedWithDropout()
    jf = chainerjit.jit(model)
    calls = _id_calls([(5, 4), (9, 4), (17, 3), (9, 6), (3, 2), (12, 5)])
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        warnings.simplefilter('error', errors.RecompileWarning)
        for seed, (ids,) in enumerate(calls):
            results = []
            for fn in (jf, model):
                model.cleargrads()
                numpy.random.seed(seed)
                y = fn(ids)
                F.sum(y * y).backward()
                results.append((y.array, model.embed.W.grad.copy(),
                                model.x2h.W.grad.copy(),
                                numpy.random.rand()))
            testing.assert_results_equal(*results)
    assert jf.cache_info().currsize == 1, jf.cache_report()
    assert 'trip=T' in str(jf.cache_entries()[0].graph)


def test_a_length_of_embedded_steps_compared_is_a_guard():
    model = EmbeddedLongOnesDiffer()
    calls = _id_calls([(5, 4), (9, 4), (17, 4), (3, 4), (12, 4), (8, 4)])
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        jf = testing.assert_jit_grads_match_eager(model, calls, rtol=1e-4,
                                                  atol=1e-5)
    assert jf.cache_info().currsize == 2, jf.cache_report()


class FiveIsSpecial(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in range(len(xs)):
            h, c = self.step(xs[t], h, c)
        if len(xs) == 5:  # recorded at 5: a guard would allow 5 only
            h = h * 2
        return self.out(h)


class MeanOverTime(_Steps):
    def forward(self, xs):
        return self.out(self.summed(xs) * (1.0 / xs.shape[0]))

    def summed(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        total = 0
        for t in range(xs.shape[0]):
            h, c = self.step(xs[t], h, c)
            total = total + h
        return total


class MeanOverTimeByLiterals(_Steps):
    """Float literals on the left of arithmetic with sizes, which the
    float computes in C: each is computed from ``xs``'s shape at run
    time, as ``T / 2.0`` is."""

    def forward(self, xs):
        T, B, _ = xs.shape
        total = 0
        for x in xs:
            total = total + F.tanh(self.x2h(x))
        y = self.out(total[:, :H] * (1.0 / T)) * (0.5 * len(xs))
        return y * (-0.25 * B) + (2.0 - T) * F.sum(y)


class MeanOverTimeScaled(MeanOverTime):
    """A float attribute divided by the length: the float computes it in
    C, unseen."""
    scale = 1.0

    def forward(self, xs):
        return self.out(self.summed(xs) * (self.scale / xs.shape[0]))


class MeanByDivision(_Steps):
    """The length in a Variable's division and products: each a node
    reading it from ``xs``'s shape at run time."""

    def forward(self, xs):
        total = 0
        for x in xs:
            total = total + F.tanh(self.x2h(x))
        T = len(xs)
        y = self.out(total[:, :H] / T) * (T - 1)
        return 2 * T * y + F.sum(y) * T


@pytest.mark.parametrize('cls', [MeanByDivision, MeanOverTimeByLiterals,
                                 MeanOverTime])
def test_a_variable_divided_by_the_length_keeps_one_entry(cls):
    model = cls()
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        jf = testing.assert_jit_grads_match_eager(
            model, _calls(model, (5, 9, 17, 9, 5, 17)), rtol=1e-5,
            atol=1e-6)
    assert jf.cache_info().currsize == 1, jf.cache_report()
    assert jf.cache_info().compiled >= 3
    entry, = jf.cache_entries()
    if cls is MeanByDivision:
        assert 'python.size[a=1, axis=0, b=-1](xs)' in str(entry.graph)
    assert 'xs: f32[T,' in str(entry.signature), str(entry.signature)


@pytest.mark.parametrize('backend', ['numpy', 'onnxruntime'])
def test_the_batch_size_in_a_division_serves_every_batch_size(rng, backend):
    if backend == 'onnxruntime':
        pytest.importorskip('onnxruntime')
    model = _Steps()

    def mean(x):
        return F.sum(model.x2h(x), axis=0) / x.shape[0]
    jf = chainerjit.jit(mean, backend=backend)
    tolerance = 0 if backend == 'numpy' else 1e-6
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for n in (3, 8, 17, 30, 8):
            x = rng.standard_normal((n, I)).astype('f')
            testing.assert_results_equal(jf(x), mean(x), tolerance,
                                         tolerance)
    entry, = jf.cache_entries()
    assert entry.backend == backend, entry.describe_backend()
    assert 'x: f32[B,6]' in str(entry.signature)


@pytest.mark.parametrize('cls, use', [
    (TimeFlattened, 'xs.shape[0] passed to Reshape'),
    (RowsOfAllSteps, 'the loop reads a value computed from xs otherwise '
     'than one step indexed by its counter'),
    (MeanOverTimeScaled, 'used in float arithmetic'),
    # Recorded at 5, where the test holds: only 5 keeps its length; 9
    # records an entry guarded by "not T == 5", which serves 17 too.
    (FiveIsSpecial, 'xs.shape[0] compared'),
])
def test_a_length_used_otherwise_stays_in_the_key_with_a_warning(cls, use):
    model = cls()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jf = testing.assert_jit_grads_match_eager(
            model, _calls(model, (5, 9, 17, 9)), rtol=1e-4, atol=1e-5)
    messages = [str(w.message) for w in caught
                if issubclass(w.category, errors.LoopWarning)]
    assert any(use in m and 'test_loop_lengths.py' in m
               for m in messages), messages
    expected = 2 if cls is FiveIsSpecial else 3
    assert jf.cache_info().currsize == expected, jf.cache_report()


def test_explain_says_why_the_length_stays_in_the_key():
    model = TimeFlattened()
    jf = chainerjit.jit(model)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.LoopWarning)
        jf(*_calls(model, (5,))[0])
    text = jf.explain(*_calls(model, (9,))[0])
    assert 'the trip count stays in the cache key: xs.shape[0] passed ' \
        'to Reshape at test_loop_lengths.py' in text, text
    assert 'passed to Reshape' in jf.cache_entries()[0].describe()


class CountsByTwo(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        t = 0
        while t < xs.shape[0]:
            h, c = self.step(xs[t], h, c)
            t += 2
        return self.out(h)


def test_a_while_loop_that_does_not_count_by_one_keeps_its_length():
    model = CountsByTwo()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.LoopWarning)
        jf = testing.assert_jit_grads_match_eager(
            model, _calls(model, (5, 9, 17, 9)), rtol=1e-4, atol=1e-5)
    assert jf.cache_info().currsize == 3, jf.cache_report()


class CounterReadAfter(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        t = 0
        while t < xs.shape[0]:
            h, c = self.step(xs[t], h, c)
            t += 1
        return self.out(h) * t


def test_a_while_counter_read_after_the_loop_gives_eager_results():
    # Its last value is a number the recording keeps: the first call at
    # another length finds the difference and keeps lengths in the key.
    model = CounterReadAfter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jf = testing.assert_jit_grads_match_eager(
            model, _calls(model, (5, 9, 17, 9, 5)), rtol=1e-4, atol=1e-5)
    assert any('another result than eagerly' in str(w.message)
               for w in caught), [str(w.message) for w in caught]
    assert jf.cache_info().currsize == 3, jf.cache_report()


# --- no Length outlives the recording ----------------------------------------


class Reports(chainer.Chain):
    def forward(self, xs):
        self.steps = len(xs)
        chainer.report({'n': xs.shape[0]}, self)
        h = xs[0]
        for t in range(len(xs)):
            h = F.tanh(h + xs[t])
        return h, xs.shape


def test_sizes_returned_assigned_and_reported_are_ints():
    model = Reports()
    jf = chainerjit.jit(model)
    xs = numpy.ones((4, 2, 3), numpy.float32)
    reporter = chainer.Reporter()
    reporter.add_observer('main', model)
    observation = {}
    with reporter.scope(observation):
        _, shape = jf(xs)
    assert type(model.steps) is int and model.steps == 4
    assert all(type(n) is int for n in shape), shape
    assert all(type(v) is int for v in observation.values()), observation


class ReversedSlice(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for x in xs[::-1]:
            h, c = self.step(x, h, c)
        return self.out(h)


class ReversedSliceOfVariable(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for x in F.tanh(xs)[::-1]:
            h, c = self.step(x, h, c)
        return self.out(h)


class Flipped(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for x in F.flip(xs, 0):
            h, c = self.step(x, h, c)
        return self.out(h)


class BidirectionalSteps(_Steps):
    """Each step's state of a forward and of a backward loop, side by
    side: the backward's list reversed to the steps' order."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        forward = []
        for x in xs:
            h, c = self.step(x, h, c)
            forward.append(h)
        hb = cb = self.xp.zeros((xs.shape[1], H), numpy.float32)
        backward = []
        for x in xs[::-1]:
            cb, hb = F.lstm(cb, self.back(x) + self.h2h(hb))
            backward.append(hb)
        both = F.concat([F.stack(forward), F.stack(backward[::-1])], axis=2)
        return F.sum(both * both, axis=(0, 2))


class InsertedInFront(_Steps):
    """A backward loop whose state starts in its first step, each step's
    state inserted in front of those after it: the steps' order, the
    first step's state last."""

    def forward(self, xs):
        hs, h = [], None
        for t in reversed(range(len(xs))):
            h = F.tanh(self.back(xs[t])[:, :H]) if h is None else \
                self.gru(h, xs[t])
            hs.insert(0, h)
        return F.sum(F.stack(hs) ** 2, axis=(0, 2)), F.concat(hs, axis=1)


class LinkInsertedInFront(_Steps):
    """``L.LSTM`` over the steps backwards, its states inserted in front
    (the link's first step differs: it has no state yet)."""

    def __init__(self):
        super(LinkInsertedInFront, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(I, H)

    def forward(self, xs):
        self.lstm.reset_state()
        hs = []
        for t in reversed(range(xs.shape[0])):
            hs.insert(0, self.lstm(xs[t]))
        return self.out(F.reshape(F.stack(hs), (-1, H)))


class InsertedInFrontThenZipped(_Steps):
    """A bidirectional encoder as people write it: the forward states by
    a comprehension, the backward ones inserted in front, the two lists
    zipped into one output a step."""

    def __init__(self):
        super(InsertedInFrontThenZipped, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(I, H)
            self.both = L.Linear(2 * H, 3)

    def forward(self, xs):
        self.lstm.reset_state()
        h = self.xp.zeros((xs.shape[1], H), numpy.float32)
        fs = []
        for x in xs:
            h = self.gru(h, x)
            fs.append(h)
        bs = []
        for t in reversed(range(len(xs))):
            bs.insert(0, self.lstm(xs[t]))
        return F.stack([self.both(F.concat((f, b)))
                        for f, b in zip(fs, bs)])


class InsertedInFrontThenRead(_Steps):
    """States inserted in front, then read first and last (the last and
    the first step's), and one a step at a later loop's counter."""

    def forward(self, xs):
        hs, h = [], self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in range(xs.shape[0] - 1, -1, -1):
            h = self.gru(h, xs[t])
            hs.insert(0, h)
        ys = []
        for t in range(xs.shape[0]):
            ys.append(F.tanh(hs[t]) * (t + 1))
        return F.stack(ys), hs[0] * 2, hs[-1]


class FilledInPlace(_Steps):
    """Each step's state put at its place in a list made as long as the
    steps (``ys = [None] * T``), backwards then forwards."""

    def __init__(self):
        super(FilledInPlace, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(I, H)

    def forward(self, xs):
        T = xs.shape[0]
        self.lstm.reset_state()
        backward = [None] * T
        for t in range(T - 1, -1, -1):
            backward[t] = self.lstm(xs[t])
        forward, h = [None] * len(xs), None
        for t in range(len(xs)):
            h = F.tanh(self.back(xs[t])[:, :H]) if h is None else \
                self.gru(h, xs[t])
            forward[t] = h
        both = F.stack(backward) + F.stack(forward)
        return F.sum(self.out(F.reshape(both, (-1, H)))) / len(forward)


class RepeatedToTheLength(_Steps):
    """A list made as long as the steps but not filled by a loop over
    them (``[h] * T``): its number of items is the length, which stays in
    the key, with a warning."""

    def forward(self, xs):
        h = F.tanh(F.sum(xs, axis=0))
        return F.sum(F.stack([h] * xs.shape[0]) * xs, axis=0)


def test_a_list_made_long_enough_and_filled_in_place_keeps_one_entry():
    entry = _one_entry_with_gradients(FilledInPlace(), _step_calls(SHAPES))
    assert 'trip=T' in str(entry.graph), entry.graph


def test_a_list_made_long_enough_otherwise_keeps_the_length():
    model = RepeatedToTheLength()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jf = testing.assert_jit_grads_match_eager(
            model, _step_calls(SHAPES[:2] * 2), rtol=1e-4, atol=1e-5)
    assert len(jf.cache_entries()) == 2, jf.cache_report()
    assert any(issubclass(w.category, errors.RecompileWarning)
               for w in caught), [str(w.message) for w in caught]


def _defined_in_a_function():
    """A model class a function defines, its forward reading the names of
    that function: ``F`` imported there, a helper ``gated`` made there."""
    import chainer.functions as F

    def gated(h, x):
        return F.sigmoid(x) * h

    class Local(_Steps):
        def forward(self, xs):
            h = c = self.xp.zeros((xs.shape[0], H), numpy.float32)
            for x in F.separate(xs, axis=1):
                h, c = self.step(x, h, c)
                h = gated(h, self.back(x)[:, :H])
            return self.out(h)
    return Local()


def test_names_of_an_enclosing_function_serve_every_length_and_batch():
    rng = numpy.random.RandomState(3)
    calls = [(rng.standard_normal((b, n, I)).astype('f'),)
             for n, b in SHAPES]
    entry = _one_entry_with_gradients(_defined_in_a_function(), calls)
    assert 'trip=T' in str(entry.graph), entry.graph


def _step_calls(shapes, seed=0):
    rng = numpy.random.RandomState(seed)
    return [(rng.standard_normal((n, b, I)).astype('f'),) for n, b in shapes]


@pytest.mark.parametrize('cls', [ReversedSlice, ReversedSliceOfVariable,
                                 Flipped, BidirectionalSteps,
                                 InsertedInFront, LinkInsertedInFront,
                                 InsertedInFrontThenZipped,
                                 InsertedInFrontThenRead])
def test_reversed_steps_serve_every_length_and_batch(cls):
    entry = _one_entry_with_gradients(cls(), _step_calls(SHAPES))
    assert 'trip=T' in str(entry.graph), entry.graph
    assert str(entry.signature).startswith('xs: f32[T,B,6]'), \
        entry.signature


def test_reversed_steps_in_inference():
    model = BidirectionalSteps()
    with chainer.using_config('train', False):
        jf = testing.assert_jit_matches_eager(
            model, _step_calls([(5, 4), (9, 4), (7, 3), (2, 6)], seed=1),
            rtol=1e-4, atol=1e-5)
    assert jf.cache_info().currsize == 1, jf.cache_report()


class MaskBroadcastByNumPy(_Steps):
    """A padded batch's steps kept where the mask is off, the mask
    broadcast by NumPy to the state's shape."""

    def forward(self, xs, ms):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for x, m in zip(xs, ms):
            h_new, c_new = self.step(x, h, c)
            keep = self.xp.broadcast_to(m[:, None] > 0, h_new.shape)
            h = F.where(keep, h_new, h)
            c = F.where(keep, c_new, c)
        return self.out(h)


def _masked_calls(shapes, seed=0):
    rng = numpy.random.RandomState(seed)
    return [(rng.standard_normal((n, b, I)).astype('f'),
             (rng.rand(n, b) > .3).astype(numpy.int32)) for n, b in shapes]


def test_a_mask_numpy_broadcasts_serves_every_length_and_batch():
    entry = _one_entry_with_gradients(MaskBroadcastByNumPy(),
                                      _masked_calls(SHAPES))
    assert 'trip=T' in str(entry.graph), entry.graph
    assert 'numpy.broadcast_to(like)' in str(entry.graph), entry.graph


class LengthsOfTheMask(_Steps):
    """Each sequence's length summed from the padding mask, compared with
    the counter at each step: the mask's axis of steps is the length
    too."""

    def forward(self, xs, ms):
        lengths = ms.sum(axis=0)
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in range(xs.shape[0]):
            h_new, c_new = self.step(xs[t], h, c)
            keep = (lengths > t)[:, None].astype(numpy.float32)
            h = keep * h_new + (1 - keep) * h
            c = keep * c_new + (1 - keep) * c
        return self.out(h)


def test_lengths_summed_from_the_mask_serve_every_length_and_batch():
    entry = _one_entry_with_gradients(LengthsOfTheMask(),
                                      _masked_calls(SHAPES))
    assert str(entry.signature).startswith(
        'xs: f32[T,B,6]@cpu grad, ms: i32[T,B]'), entry.signature


class RefinedInPasses(_Steps):
    """A few passes over the steps, each from the last's state (a fixed
    loop around the time loop, left unrolled: each pass's loop serves
    every length)."""

    def forward(self, xs):
        state = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for _ in range(3):
            h, c = state, state
            for x in xs:
                h, c = self.step(x, h, c)
            state = h
        return self.out(state)


def test_passes_around_the_time_loop_serve_every_length():
    entry = _one_entry_with_gradients(RefinedInPasses(), _calls(
        RefinedInPasses(), (5, 9, 17, 9, 5, 12)))
    assert str(entry.graph).count('trip=T') == 3, entry.graph


def test_a_first_call_too_short_to_roll_is_served_by_the_next_entry():
    # (one step: its entry unrolled; the entry for every length serves
    # it afterwards, and takes its place)
    model = StackedOutputs()
    jf = testing.assert_jit_grads_match_eager(
        model, _calls(model, (1, 9, 17, 1, 5, 12)), rtol=1e-4, atol=1e-5)
    assert jf.cache_info().currsize == 1, jf.cache_report()


class ContextOverSteps(_Encoder):
    """Attention over batch-first steps whose context is the scores'
    product with the steps, contracting the steps' axis."""

    def forward(self, xs):
        hs = self.encode(xs)
        enc = F.stack(hs, axis=1)  # (B, T, H)
        scores = F.softmax(F.matmul(enc, F.expand_dims(hs[-1], 2)), axis=1)
        context = F.matmul(enc, scores, transa=True)  # (B, H, 1)
        return self.out(F.squeeze(context, 2))


class LossesAveraged(_Steps):
    """A loss per step collected in a list, averaged over its length:
    summed by ``F.sum`` of the stacked losses, or by Python's ``sum``."""

    python_sum = False

    def forward(self, xs, ts):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        losses = []
        for x, t in zip(xs, ts):
            h, c = self.step(x, h, c)
            losses.append(F.softmax_cross_entropy(self.out(h), t))
        total = sum(losses) if self.python_sum else F.sum(F.stack(losses))
        return total / len(losses)


def _labeled_calls(shapes, seed=0):
    rng = numpy.random.RandomState(seed)
    return [(rng.standard_normal((n, b, I)).astype('f'),
             rng.randint(0, 3, (n, b)).astype(numpy.int32))
            for n, b in shapes]


def test_a_context_contracting_the_steps_serves_every_length_and_batch():
    entry = _one_entry_with_gradients(ContextOverSteps(),
                                      _step_calls(SHAPES))
    assert 'trip=T' in str(entry.graph), entry.graph


def test_the_length_of_a_loops_list_is_its_trip_count():
    entry = _one_entry_with_gradients(LossesAveraged(),
                                      _labeled_calls(SHAPES))
    assert 'trip=T' in str(entry.graph), entry.graph


class LossesOfSomeSteps(_Steps):
    """Losses collected only at steps whose input passes a test of its
    values: their number is not the trip count."""

    def forward(self, xs, ts):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        losses = []
        for x, t in zip(xs, ts):
            h, c = self.step(x, h, c)
            if (x.array > 1).all():
                losses.append(F.softmax_cross_entropy(self.out(h), t))
        return F.sum(h) + len(losses)


def test_the_length_of_a_list_of_some_steps_is_counted():
    model = LossesOfSomeSteps()
    rng = numpy.random.RandomState(3)
    calls = []
    for n in (4, 4, 6, 4):
        xs = rng.standard_normal((n, 2, I)).astype('f')
        xs[rng.rand(n) > .5] = 5  # steps whose states are all positive
        calls.append((xs, rng.randint(0, 3, (n, 2)).astype(numpy.int32)))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.LoopWarning)
        warnings.simplefilter('ignore', errors.RecompileWarning)
        testing.assert_jit_grads_match_eager(model, calls, rtol=1e-4,
                                             atol=1e-5)


class StepsUntilAnInputStops(_Steps):
    """A loop that stops at an input whose values pass a test, the
    number of its steps returned."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        hs = []
        for x in xs:
            h, c = self.step(x, h, c)
            hs.append(h)
            if (x.array > 1).all():
                break
        return F.sum(F.stack(hs)) * len(hs)


def test_the_length_of_a_list_of_the_steps_before_a_break_is_counted():
    rng = numpy.random.RandomState(4)
    calls = []
    for n, stop in ((6, 2), (6, 4), (6, 5), (6, 1)):
        xs = rng.standard_normal((n, 2, I)).astype('f')
        xs[stop] = 5
        calls.append((xs,))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.LoopWarning)
        warnings.simplefilter('ignore', errors.RecompileWarning)
        testing.assert_jit_grads_match_eager(StepsUntilAnInputStops(), calls,
                                             rtol=1e-4, atol=1e-5)


class MeanOfComprehension(_Steps):
    """Python's ``sum()`` of a comprehension's steps, over their count."""

    def forward(self, xs):
        hs = [F.tanh(self.x2h(x)) for x in xs]
        return self.out(sum(hs)[:, :H] / len(hs))


class LossesSummedByPython(LossesAveraged):
    python_sum = True


class StatefulLinkSummed(_Steps):
    """A stateful LSTM link's steps (its first step, which makes the
    state, recorded before the loop) summed by Python."""

    def __init__(self):
        super(StatefulLinkSummed, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(I, H)

    def forward(self, xs):
        self.lstm.reset_state()
        hs = [self.lstm(x) for x in xs]
        return self.out(sum(hs))


@pytest.mark.parametrize('cls, calls', [
    (MeanOfComprehension, _step_calls), (StatefulLinkSummed, _step_calls),
    (LossesSummedByPython, _labeled_calls)])
def test_a_python_sum_of_the_steps_serves_every_length_and_batch(cls, calls):
    entry = _one_entry_with_gradients(cls(), calls(SHAPES))
    assert 'PythonSum' in str(entry.graph), entry.graph


class QueryBroadcastToTheSteps(_Encoder):
    """Attention whose query is broadcast to a shape made of the sizes the
    forward read: ``(len(xs),) + h.shape``, or ``(T, B, H)`` unpacked."""

    unpacked = False

    def forward(self, xs):
        hs = self.encode(xs)
        enc, last = F.stack(hs), hs[-1]  # (T, B, H), (B, H)
        q = F.expand_dims(last, 0)
        if self.unpacked:
            T, batch, _ = xs.shape
            q = F.broadcast_to(q, (T, batch, H))
        else:
            q = F.broadcast_to(q, (len(xs),) + last.shape)
        return self.out(F.sum(enc * q, axis=0))


class QueryBroadcastToUnpackedSizes(QueryBroadcastToTheSteps):
    unpacked = True


@pytest.mark.parametrize('cls', [QueryBroadcastToTheSteps,
                                 QueryBroadcastToUnpackedSizes])
def test_a_broadcast_to_sizes_read_serves_every_length_and_batch(cls):
    entry = _one_entry_with_gradients(cls(), _step_calls(SHAPES))
    assert 'BroadcastSized' in str(entry.graph), entry.graph


class BiasBroadcastInTheLoop(_Steps):
    """A bias broadcast in every step to the batch the forward read: the
    loop reads the argument's batch size, not its steps."""

    def forward(self, xs):
        T, batch, _ = xs.shape
        h = c = self.xp.zeros((batch, H), numpy.float32)
        for t in range(T):
            h, c = self.step(xs[t], h, c)
            h = h + F.broadcast_to(self.out.b[:1], (batch, H))
        return self.out(h)


def test_a_broadcast_in_the_loop_to_the_batch_read_serves_every_shape():
    entry = _one_entry_with_gradients(BiasBroadcastInTheLoop(),
                                      _step_calls(SHAPES))
    assert 'trip=T' in str(entry.graph), entry.graph


class QueryTiledToTheSteps(_Encoder):
    """``F.tile`` of the last state over the steps, ``(len(xs), 1, 1)``:
    the same values and gradient as a broadcast to those sizes."""

    def forward(self, xs):
        hs = self.encode(xs)
        q = F.tile(F.expand_dims(hs[-1], 0), (len(xs), 1, 1))
        return self.out(F.sum(F.stack(hs) * q, axis=0))


class BiasMadeWithTheSizes(_Encoder):
    """An array NumPy makes of the length and the batch read, used whole:
    ``numpy.ones((len(xs), B, H))``."""

    def forward(self, xs):
        hs = self.encode(xs)
        bias = self.xp.ones((len(xs), xs.shape[1], H), numpy.float32)
        return self.out(F.sum(F.stack(hs) + bias, axis=0))


class WeightsMadeOfTheLength(_Encoder):
    """An array made of the length, read through a view of it:
    ``numpy.full((T, H), .5)[:, None, :]``."""

    def forward(self, xs):
        T = xs.shape[0]
        hs = self.encode(xs)
        weights = self.xp.full((T, H), .5, numpy.float32)
        return self.out(F.sum(F.stack(hs) * F.broadcast_to(
            weights[:, None, :], (T, xs.shape[1], H)), axis=0))


class AttentionMaskMade(_Encoder):
    """A batch-first attention mask and its fill made by NumPy of the
    sizes read, as ``F.where``'s condition and other value."""

    def forward(self, xs):
        T, batch = len(xs), xs.shape[1]
        enc = F.stack(self.encode(xs), axis=1)  # (B, T, H)
        scores = F.sum(enc, axis=2)
        keep = self.xp.ones((batch, T), dtype=bool)
        scores = F.where(keep, scores, self.xp.full((batch, T), -1e9,
                                                    numpy.float32))
        weights = F.broadcast_to(F.softmax(scores)[:, :, None],
                                 (batch, T, H))
        return self.out(F.sum(enc * weights, axis=1))


@pytest.mark.parametrize('cls', [QueryTiledToTheSteps, BiasMadeWithTheSizes,
                                 WeightsMadeOfTheLength, AttentionMaskMade])
def test_arrays_made_or_tiled_to_sizes_read_serve_every_length_and_batch(
        cls):
    entry = _one_entry_with_gradients(cls(), _step_calls(SHAPES))
    assert 'trip=T' in str(entry.graph), entry.graph
    assert str(entry.signature).startswith('xs: f32[T,B,6]'), \
        entry.signature


class MadeThenWritten(_Encoder):
    """An array made of the length, then written in Python: a constant of
    the recorded values, so the length stays in the key."""

    def forward(self, xs):
        hs = self.encode(xs)
        weights = self.xp.ones((len(xs), 1, 1), numpy.float32)
        weights[0] = 2
        return self.out(F.sum(F.stack(hs) * weights, axis=0))


class MadeThenCut(_Encoder):
    """An array made of the length, read through a part of it: a constant
    of the recorded size, so the length stays in the key."""

    def forward(self, xs):
        hs = self.encode(xs)
        weights = self.xp.ones((len(xs), 1, 1), numpy.float32)
        return self.out(F.sum(F.stack(hs)[1:] * weights[1:], axis=0))


@pytest.mark.parametrize('cls', [MadeThenWritten, MadeThenCut])
def test_an_array_made_of_the_length_and_changed_keeps_it(cls):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jf = testing.assert_jit_grads_match_eager(
            cls(), _step_calls([(5, 4), (9, 4), (5, 4), (9, 4)]),
            rtol=1e-4, atol=1e-5)
    messages = [str(w.message) for w in caught
                if issubclass(w.category, errors.LoopWarning)]
    assert any('passed to numpy.ones' in m for m in messages), messages
    assert jf.cache_info().currsize == 2, jf.cache_report()


class StepsOfAHelperStacked(_Encoder):
    """The stacked steps a helper returned, their shape read:
    ``enc = F.stack(self.encode(xs))``, ``F.broadcast_to(q, enc.shape)``."""

    def forward(self, xs):
        enc = F.stack(self.encode(xs))
        q = F.broadcast_to(enc[-1], enc.shape)
        return self.out(F.sum(enc * q, axis=0))


class StepsOfAHelperCounted(_Encoder):
    """The length and Python's sum of the list a helper's loop filled."""

    def forward(self, xs):
        hs = self.encode(xs)
        return self.out(sum(hs) / len(hs))


class ComprehensionOfAHelper(_Steps):
    """A helper returns a comprehension's list; the caller stacks it, reads
    the stack's sizes and the list's length."""

    def encode(self, xs):
        return [F.tanh(self.x2h(x)[:, :H]) for x in xs]

    def forward(self, xs):
        hs = self.encode(xs)
        enc = F.stack(hs, axis=1)  # (B, T, H)
        weights = self.xp.ones(enc.shape[:2], numpy.float32)
        return self.out(F.sum(enc * F.broadcast_to(
            weights[:, :, None], enc.shape), axis=1) / len(hs))


class GRUStepsWeighted(_Steps):
    """``L.StatelessGRU`` steps stacked batch-first, weighted by an array
    made of the stack's sizes: the GRU's outputs keep the batch's axis
    (``LinearInterpolate`` among the functions that keep axes)."""

    def forward(self, xs):
        h = self.xp.zeros((xs.shape[1], H), numpy.float32)
        hs = []
        for x in xs:
            h = self.gru(h, x)
            hs.append(h)
        enc = F.stack(hs, axis=1)  # (B, T, H)
        weights = self.xp.full(enc.shape[:2], .5, numpy.float32)
        return self.out(F.sum(enc * F.broadcast_to(
            weights[:, :, None], enc.shape), axis=1))


@pytest.mark.parametrize('cls', [StepsOfAHelperStacked, StepsOfAHelperCounted,
                                 ComprehensionOfAHelper, GRUStepsWeighted])
def test_a_list_a_helper_fills_serves_every_length_and_batch(cls):
    _one_entry_with_gradients(cls(), _step_calls(SHAPES))


class SplitIntoSteps(_Steps):
    """A loop over ``F.split_axis(xs, len(xs), axis=0)``, each step's
    leading axis of one squeezed, the first state made in the first
    step."""

    def forward(self, xs):
        h = c = None
        for x in F.split_axis(xs, len(xs), axis=0):
            x = F.squeeze(x, 0)
            if h is None:
                h = c = self.xp.zeros((x.shape[0], H), numpy.float32)
            h, c = self.step(x, h, c)
        return self.out(h)


class SplitIntoStepsBatchFirst(_Steps):
    def forward(self, xs):
        xs = F.transpose(xs, (1, 0, 2))  # (B, T, I)
        batch, T, _ = xs.shape
        h = c = self.xp.zeros((batch, H), numpy.float32)
        for x in F.split_axis(xs, T, axis=1):
            h, c = self.step(F.reshape(x, (batch, I)), h, c)
        return self.out(h)


@pytest.mark.parametrize('cls', [SplitIntoSteps, SplitIntoStepsBatchFirst])
def test_a_loop_over_the_steps_split_apart_serves_every_length_and_batch(
        cls):
    entry = _one_entry_with_gradients(cls(), _step_calls(SHAPES))
    assert 'trip=T' in str(entry.graph), entry.graph


class ProjectionSplitIntoSteps(_Steps):
    """The steps projected at once, then ``F.split_axis`` of the
    projection into as many parts as steps (each a step's rows)."""

    def forward(self, xs):
        T, batch, _ = xs.shape
        gx = self.x2h(F.reshape(xs, (T * batch, I)))
        h = c = self.xp.zeros((batch, H), numpy.float32)
        for g in F.split_axis(gx, T, axis=0):
            c, h = F.lstm(c, g + self.h2h(h))
        return self.out(h)


class ProjectionSplitIntoStepsLazily(_Steps):
    """:class:`ProjectionSplitIntoSteps` reshaped back to ``(T, -1, 4 *
    H)`` first, the state made from a step's rows in the first step."""

    def forward(self, xs):
        T = xs.shape[0]
        gx = F.reshape(self.x2h(F.reshape(xs, (-1, I))), (T, -1, 4 * H))
        h = c = None
        for g in F.split_axis(gx, T, axis=0):
            g = F.squeeze(g, 0)
            if h is None:
                h = c = self.xp.zeros((g.shape[0], H), 'f')
            c, h = F.lstm(c, g + self.h2h(h))
        return self.out(h)


class SplitOfAllAxesMerged(_Steps):
    """``F.split_axis`` by the length of the steps merged with all other
    axes (``(T * B * I,)``): each part is flat, as Chainer cuts it."""

    def forward(self, xs):
        T = xs.shape[0]
        h = 0
        for part in F.split_axis(F.reshape(xs, (-1,)), T, axis=0):
            h = h + F.sum(part * part, axis=0)
        return h


def test_a_split_of_more_than_two_axes_merged_keeps_its_parts_flat():
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        testing.assert_jit_grads_match_eager(  # (each shape twice)
            SplitOfAllAxesMerged(), _step_calls(SHAPES[:3] * 2),
            rtol=1e-4, atol=1e-5)


class ProjectionIndexedLazily(_Steps):
    def forward(self, xs):
        T = xs.shape[0]
        gx = F.reshape(self.x2h(F.reshape(xs, (-1, I))), (T, -1, 4 * H))
        h = c = None
        for t in range(T):
            g = gx[t]
            if h is None:
                h = c = self.xp.zeros((g.shape[0], H), 'f')
            c, h = F.lstm(c, g + self.h2h(h))
        return self.out(h)


class BatchFirstMadeTimeMajorThenProjected(_Steps):
    """Batch-first steps transposed to time-major, then projected at
    once: the reshape back reads the steps' number of the batch-first
    argument's second axis."""

    def forward(self, xs):
        batch, T, D = xs.shape
        tm = F.transpose(xs, (1, 0, 2))
        gx = F.reshape(self.x2h(F.reshape(tm, (T * batch, D))),
                       (T, batch, 4 * H))
        h = c = self.xp.zeros((batch, H), 'f')
        for t in range(T):
            c, h = F.lstm(c, gx[t] + self.h2h(h))
        return self.out(h)


@pytest.mark.parametrize('cls', [
    ProjectionSplitIntoSteps, ProjectionSplitIntoStepsLazily,
    ProjectionIndexedLazily, BatchFirstMadeTimeMajorThenProjected,
    BatchFirstProjectedAtOnce])
def test_steps_projected_at_once_serve_every_length_and_batch(cls):
    # (lengths and batch sizes both change)
    batch_first = cls in (BatchFirstMadeTimeMajorThenProjected,
                          BatchFirstProjectedAtOnce)

    def calls(shapes, seed):
        return [(xs.transpose(1, 0, 2).copy() if batch_first else xs,)
                for xs, in _step_calls(shapes, seed)]
    entry = _one_entry_with_gradients(cls(), calls(SHAPES, 0))
    assert 'trip=T' in str(entry.graph), entry.graph
    with chainer.using_config('train', False):
        jf = testing.assert_jit_matches_eager(cls(), calls(SHAPES[::-1], 1),
                                              rtol=1e-4, atol=1e-5)
    assert jf.cache_info().currsize == 1, jf.cache_report()


class BatchFirstAttention(_Steps):
    """Attention pooling over batch-first states: the stacked states
    ``(B, T, H)`` merged to ``(B * T, H)`` for a linear scoring layer, its
    scores split back, written as people write it (``how``)."""

    def __init__(self, how):
        super(BatchFirstAttention, self).__init__()
        self.how = how
        with self.init_scope():
            self.score = L.Linear(H, 1)

    def forward(self, xs):
        batch, T, _ = xs.shape
        h = self.xp.zeros((batch, H), numpy.float32)
        hs = []
        for t in range(T):
            h = self.gru(h, xs[:, t])
            hs.append(h)
        enc = F.stack(hs, axis=1)
        if self.how == 'sizes':
            s = F.reshape(self.score(F.reshape(enc, (batch * T, H))),
                          (batch, T, 1))
        elif self.how == 'inferred':
            s = F.reshape(self.score(F.reshape(enc, (-1, H))),
                          (batch, -1))[:, :, None]
        else:  # Variable.reshape, a weighted sum by matmul
            s = self.score(enc.reshape(batch * T, H)).reshape(batch, T)
            a = F.softmax(s)
            return self.out(F.matmul(a[:, None, :], enc)[:, 0])
        a = F.softmax(s, axis=1)
        return self.out(F.sum(enc * F.broadcast_to(a, enc.shape), axis=1))


@pytest.mark.parametrize('how', ['sizes', 'inferred', 'method'])
def test_batch_first_attention_serves_every_length_and_batch(how):
    # (the lengths change first, then the batch sizes, then both)
    shapes = [(5, 4), (9, 4), (12, 3), (7, 6), (3, 2)]
    calls = [(xs.transpose(1, 0, 2).copy(),)
             for xs, in _step_calls(shapes)]
    entry = _one_entry_with_gradients(BatchFirstAttention(how), calls)
    assert str(entry.signature).startswith('xs: f32[B,T,6]'), \
        entry.signature
    with chainer.using_config('train', False):
        jf = testing.assert_jit_matches_eager(
            BatchFirstAttention(how), calls[::-1], rtol=1e-4, atol=1e-5)
    assert jf.cache_info().currsize == 1, jf.cache_report()


class MaskedAttention(chainer.Chain):
    """An encoder over padded steps with their mask, and a decoder
    attending to the encoder's steps, its scores masked by the same mask
    read whole (``s + (ms - 1) * 1e4``, or ``F.where(ms > 0, s, ...)``)."""

    def __init__(self, where=False):
        super().__init__()
        self.where = where
        with self.init_scope():
            self.enc = L.StatelessGRU(I, H)
            self.dec = L.StatelessGRU(5, H)
            self.embed = L.EmbedID(5, 5)
            self.out = L.Linear(2 * H, 5)

    def forward(self, xs, ms, ys):
        T, batch = xs.shape[:2]
        h = self.xp.zeros((batch, H), 'f')
        hs = []
        for t in range(T):
            m = ms[t][:, None]
            h = m * self.enc(h, xs[t]) + (1 - m) * h
            hs.append(h)
        enc = F.stack(hs)
        loss = 0
        prev = self.xp.zeros((batch,), numpy.int32)
        for t in range(len(ys)):
            h = self.dec(h, self.embed(prev))
            s = F.sum(enc * F.broadcast_to(h, enc.shape), axis=2)
            if self.where:
                s = F.where(chainer.as_array(ms) > 0, s,
                            self.xp.full(s.shape, -1e4, 'f'))
            else:
                s = s + (ms - 1) * 1e4
            a = F.softmax(s, axis=0)
            context = F.sum(enc * F.broadcast_to(a[:, :, None], enc.shape),
                            axis=0)
            loss += F.softmax_cross_entropy(
                self.out(F.concat((h, context))), ys[t])
            prev = ys[t]
        return loss / len(ys)


@pytest.mark.parametrize('where', [False, True])
def test_attention_masked_by_an_argument_serves_every_length(where):
    # (the mask is as long as the steps: the same rows as theirs)
    rng = numpy.random.RandomState(3)
    calls = []
    for T, batch, U in [(5, 4, 7), (9, 4, 4), (17, 3, 6), (9, 6, 3),
                        (3, 2, 8), (12, 5, 5)]:
        ms = (rng.rand(T, batch) > 0.3).astype('f')
        ms[0] = 1
        calls.append((rng.standard_normal((T, batch, I)).astype('f'), ms,
                      rng.randint(0, 5, (U, batch)).astype(numpy.int32)))
    entry = _one_entry_with_gradients(MaskedAttention(where), calls)
    assert 'trip=T' in str(entry.graph), entry.graph


class CounterOverACut(_Steps):
    """A ``while`` loop over all but the last step (``steps = xs[:-1]``,
    ``while t < len(steps):``)."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), 'f')
        steps = xs[:-1]
        t = 0
        while t < len(steps):
            h, c = self.step(steps[t], h, c)
            t += 1
        return self.out(h)


class FirstStateListed(_Steps):
    """The first state first in the list the loop appends to, the steps
    read after it without it (``F.stack(hs[1:])``)."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), 'f')
        hs = [h]
        for x in xs:
            h, c = self.step(x, h, c)
            hs.append(h)
        return self.out(F.sum(F.stack(hs[1:]), axis=0))


class FirstStatesSummedWithout(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), 'f')
        hs = [h, h]
        for x in xs:
            h, c = self.step(x, h, c)
            hs.append(h)
        return self.out(sum(hs[2:]) + F.concat(hs[1:], axis=0)[:1])


@pytest.mark.parametrize('cls', [CounterOverACut, FirstStateListed,
                                 FirstStatesSummedWithout])
def test_steps_of_a_cut_or_after_a_first_state_serve_every_length(cls):
    entry = _one_entry_with_gradients(cls(), _step_calls(SHAPES))
    assert 'trip=T' in str(entry.graph), entry.graph
    # (arrays: NumPy cuts them)
    with chainer.using_config('train', False), warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        warnings.simplefilter('error', errors.RecompileWarning)
        jf = testing.assert_jit_matches_eager(
            cls(), _step_calls(SHAPES, seed=1), rtol=1e-4, atol=1e-5)
    assert jf.cache_info().currsize == 1, jf.cache_report()


class LastStepsUnderAGuard(_Steps):
    """The last ten steps of longer sequences: ``xs[T - 10:]`` under ``if
    T > 10:``."""

    def forward(self, xs):
        T = len(xs)
        if T > 10:
            xs = xs[T - 10:]
        h = c = self.xp.zeros((xs.shape[1], H), 'f')
        for x in xs:
            h, c = self.step(x, h, c)
        return self.out(h)


class LastStepsCountedFromTheEnd(_Steps):
    def forward(self, xs):
        if len(xs) > 10:
            xs = xs[-10:]
        h = c = self.xp.zeros((xs.shape[1], H), 'f')
        for t in range(len(xs)):
            h, c = self.step(xs[t], h, c)
        return self.out(h)


class LastStepsOfBatchFirst(BatchFirst):
    def forward(self, xs):
        T = xs.shape[1]
        if T > 10:
            xs = xs[:, T - 10:]
        h = c = self.xp.zeros((xs.shape[0], H), 'f')
        for t in range(xs.shape[1]):
            h, c = self.step(xs[:, t], h, c)
        return self.out(h)


@pytest.mark.parametrize('cls', [LastStepsUnderAGuard,
                                 LastStepsCountedFromTheEnd,
                                 LastStepsOfBatchFirst])
def test_steps_cut_under_a_guard_keep_an_entry_for_each_side(cls):
    # A loop of T steps on one side, of ten steps of any longer sequence
    # on the other.
    shapes = [(5, 4), (12, 4), (17, 4), (9, 4), (3, 4), (14, 4), (11, 4)]
    calls = [(xs.transpose(1, 0, 2).copy() if cls is LastStepsOfBatchFirst
              else xs,) for xs, in _step_calls(shapes)]
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jf = testing.assert_jit_grads_match_eager(cls(), calls, rtol=1e-4,
                                                  atol=1e-5)
    described = sorted(e.describe().splitlines()[1]
                       for e in jf.cache_entries())
    assert len(described) == 2, jf.cache_report()
    assert described[0].endswith('> 10'), described
    assert described[1].startswith('for sizes where: not '), described


class SplitIntoFive(_Steps):
    """Five parts, whatever the length: the length stays in the key."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for x in F.split_axis(xs, 5, axis=0):
            h, c = self.step(F.sum(x, axis=0), h, c)
        return self.out(h)


def test_a_split_into_a_number_of_parts_keeps_the_length():
    with warnings.catch_warnings(record=True):
        warnings.simplefilter('always')
        jf = testing.assert_jit_grads_match_eager(
            SplitIntoFive(), _step_calls([(5, 4), (10, 4), (5, 4), (10, 4)]),
            rtol=1e-4, atol=1e-5)
    assert jf.cache_info().currsize == 2, jf.cache_report()


class MaskedByLengths(_Steps):
    """A padded batch masked by its sequences' lengths compared with the
    counter in NumPy (``lengths > t``), a comparison whose int follows
    the counter."""

    def forward(self, xs, lengths):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in range(len(xs)):
            h_new, c_new = self.step(xs[t], h, c)
            keep = self.xp.broadcast_to((lengths > t)[:, None], h.shape)
            h = F.where(keep, h_new, h)
            c = F.where(keep, c_new, c)
        return self.out(h)


def _length_calls(shapes, seed=0):
    rng = numpy.random.RandomState(seed)
    return [(rng.standard_normal((n, b, I)).astype('f'),
             rng.randint(1, n + 1, b).astype(numpy.int32))
            for n, b in shapes]


def test_a_mask_of_lengths_against_the_counter_serves_every_shape():
    entry = _one_entry_with_gradients(MaskedByLengths(),
                                      _length_calls(SHAPES))
    assert 'CountedInt' in str(entry.graph), entry.graph


class FirstStepByTheCounter(_Steps):
    """The first step told apart by the counter (``if t == 0:``): it is
    recorded before the loop, which rolls the others."""

    def forward(self, xs):
        for t in range(len(xs)):
            if t == 0:
                h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
            h, c = self.step(xs[t], h, c)
        return self.out(h)


def test_a_first_step_told_apart_by_the_counter_serves_every_shape():
    entry = _one_entry_with_gradients(FirstStepByTheCounter(),
                                      _step_calls(SHAPES))
    assert 'trip=T' in str(entry.graph), entry.graph


class CounterComparedWithANumber(_Steps):
    """Steps told apart by the counter compared with a number other than
    the first step's: each length keeps its entry, with eager's
    values."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in range(len(xs)):
            x = xs[t] if t < 4 else 2 * xs[t]
            h, c = self.step(x, h, c)
        return self.out(h)


def test_steps_told_apart_by_a_comparison_keep_eagers_results():
    with warnings.catch_warnings(record=True):
        warnings.simplefilter('always')
        jf = testing.assert_jit_grads_match_eager(
            CounterComparedWithANumber(),
            _step_calls([(5, 4), (9, 4), (5, 4), (9, 4)]), rtol=1e-4,
            atol=1e-5)
    assert jf.cache_info().currsize == 2, jf.cache_report()


class CounterLoopDown(_Steps):
    """A ``while`` loop counting down from the last step: its counter,
    made of the length, indexes the steps and is tested against 0."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        t = len(xs) - 1
        while t >= 0:
            h, c = self.step(xs[t], h, c)
            t -= 1
        return self.out(h)


def test_a_while_loop_counting_down_serves_every_length_and_batch():
    entry = _one_entry_with_gradients(CounterLoopDown(), _step_calls(SHAPES))
    assert 'trip=T' in str(entry.graph), entry.graph


class CountsDownByTwo(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        t = len(xs) - 1
        while t >= 0:
            h, c = self.step(xs[t], h, c)
            t -= 2
        return self.out(h)


def test_a_while_loop_counting_down_by_two_keeps_eagers_results():
    with warnings.catch_warnings(record=True):
        warnings.simplefilter('always')
        jf = testing.assert_jit_grads_match_eager(
            CountsDownByTwo(), _step_calls([(5, 4), (8, 4), (5, 4), (8, 4)]),
            rtol=1e-4, atol=1e-5)
    assert jf.cache_info().currsize == 2, jf.cache_report()


class CRFOverSteps(_Steps):
    """A linear-chain CRF (``L.CRF1d``) over the scores a loop made, one
    per step, and the labels' rows (``F.separate(ts)``): one node on the
    scores stacked runs Chainer's crf1d. ``by_function``: ``F.crf1d`` of
    the labels as one array, each sequence's loss."""

    by_function = numpy_rows = False

    def __init__(self):
        super(CRFOverSteps, self).__init__()
        with self.init_scope():
            self.crf = L.CRF1d(3, initial_cost=numpy.random.RandomState(
                4).uniform(-1, 1, (3, 3)).astype(numpy.float32))

    def forward(self, xs, ts):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        scores = []
        for x in xs:
            h, c = self.step(x, h, c)
            scores.append(self.out(h))
        if self.by_function:
            return F.sum(F.crf1d(self.crf.cost, scores, ts, reduce='no') *
                         0.5)
        return self.crf(scores, list(ts) if self.numpy_rows else
                        F.separate(ts))


class CRFFunctionOverSteps(CRFOverSteps):
    by_function = True


class CRFOverStepsAndRows(CRFOverSteps):
    """The labels as the rows NumPy iterates over (``list(ts)``)."""

    numpy_rows = True


@pytest.mark.parametrize('cls', [CRFOverSteps, CRFFunctionOverSteps,
                                 CRFOverStepsAndRows])
def test_a_crf_over_a_loops_scores_serves_every_length_and_batch(cls):
    entry = _one_entry_with_gradients(cls(), _labeled_calls(SHAPES))
    assert 'CRF1dStacked' in str(entry.graph), entry.graph
    assert 'trip=T' in str(entry.graph), entry.graph


def test_a_crfs_transition_costs_get_eagers_gradients():
    jitted = differential.check_grads(None, _labeled_calls(SHAPES),
                                      model=CRFOverSteps(), method='forward')
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()


class CRFTagger(chainer.Chain):
    """A tagger scoring all steps at once, cut into steps by
    ``F.separate`` (no loop), its labels the rows NumPy iterates over
    (``list(ys)``), as Chainer's POS-tagging example writes it for
    sentences of one length."""

    def __init__(self):
        super(CRFTagger, self).__init__()
        with self.init_scope():
            self.embed = L.EmbedID(20, 8)
            self.fc = L.Linear(8, 3)
            self.crf = L.CRF1d(3, initial_cost=numpy.random.RandomState(
                5).uniform(-1, 1, (3, 3)).astype(numpy.float32))

    def forward(self, xs, ys):
        steps, batch = xs.shape
        hs = self.fc(self.embed(xs.reshape(-1)))
        hs = F.separate(F.reshape(hs, (steps, batch, -1)), axis=0)
        return self.crf(hs, list(ys))


def test_a_crf_over_steps_cut_from_one_array_serves_every_shape():
    # (No loop: the steps are an axis like another, made symbolic when a
    # call changes its size alone.)
    rng = numpy.random.RandomState(6)
    calls = [(rng.randint(0, 20, (n, b)).astype(numpy.int32),
              rng.randint(0, 3, (n, b)).astype(numpy.int32))
             for n, b in [(5, 4), (9, 4), (9, 3), (17, 3), (17, 6), (3, 6),
                          (5, 4)]]
    jitted = differential.check_grads(None, calls, model=CRFTagger(),
                                      method='forward')
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()
    assert 'CRF1dStacked' in str(jitted.cache_entries()[0].graph)


class CounterDerived(_Steps):
    """The step read at a name computed from the counter (``t = T - 1 -
    i``), each state put at its place (``ys[t] = h``)."""

    def forward(self, xs):
        T = xs.shape[0]
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        hs = [None] * T
        for i in range(T):
            t = T - 1 - i
            h, c = self.step(xs[t], h, c)
            hs[t] = h
        return self.out(F.reshape(F.stack(hs), (-1, H)))


class CounterDerivedFromLen(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for i in range(len(xs)):
            t = len(xs) - i - 1
            h, c = self.step(xs[t], h, c)
        return self.out(h)


class OneStepSlices(_Steps):
    """Each step read as a slice of one, its axis kept (``xs[t:t+1]``)."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in range(xs.shape[0]):
            h, c = self.step(F.squeeze(xs[t:t + 1], axis=0), h, c)
        return self.out(h)


class OneStepSlicesBackwards(_Steps):
    def forward(self, xs):
        T = xs.shape[0]
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for i in range(T):
            t = T - 1 - i
            h, c = self.step(xs[t:t + 1][0], h, c)
        return self.out(h)


class StepsWithEllipsis(_Steps):
    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in range(xs.shape[0]):
            h, c = self.step(xs[t, ...], h, c)
        return self.out(h)


class BatchFirstWithEllipsis(_Steps):
    def forward(self, xs):
        xs = F.transpose(xs, (1, 0, 2))
        h = c = self.xp.zeros((xs.shape[0], H), numpy.float32)
        for t in range(xs.shape[1]):
            h, c = self.step(xs[:, t, ...], h, c)
        return self.out(h)


class LearnedInitialState(_Steps):
    """A learned first state repeated for each sequence of the batch."""

    def __init__(self):
        super(LearnedInitialState, self).__init__()
        with self.init_scope():
            self.h0 = chainer.Parameter(numpy.random.RandomState(
                4).standard_normal((1, H)).astype('f'))

    def forward(self, xs):
        B = xs.shape[1]
        h = F.repeat(self.h0, B, axis=0) + F.repeat(self.h0, (B,), axis=0)
        c = F.tile(self.h0, (B, 1))
        for x in xs:
            h, c = self.step(x, h, c)
        return self.out(h)


class FirstStepPeeledWithEllipsis(_Steps):
    """The state made by the first step (recorded before the loop), each
    step read as ``xs[t, ...]`` counting down."""

    def forward(self, xs):
        h = c = None
        for i in range(len(xs)):
            t = len(xs) - i - 1
            if h is None:
                h = F.tanh(self.back(xs[t, ...])[:, :H])
                c = h * 0.5
            h, c = self.step(xs[t, ...], h, c)
        return self.out(h)


class ConstantSlicesInTheBody(_Steps):
    """Each step reads the last and the first step too, as slices of
    one (``xs[-1:]``, ``xs[:1]``)."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in range(len(xs)):
            x = xs[t] + F.squeeze(xs[-1:], 0) * F.squeeze(xs[:1], 0)
            h, c = self.step(x, h, c)
        return self.out(h)


@pytest.mark.parametrize('cls', [CounterDerived, CounterDerivedFromLen,
                                 OneStepSlices, OneStepSlicesBackwards,
                                 StepsWithEllipsis, BatchFirstWithEllipsis,
                                 LearnedInitialState,
                                 FirstStepPeeledWithEllipsis,
                                 ConstantSlicesInTheBody])
def test_steps_read_at_other_spellings_serve_every_length_and_batch(cls):
    entry = _one_entry_with_gradients(cls(), _step_calls(SHAPES))
    assert 'trip=T' in str(entry.graph), entry.graph


class CounterDerivedUsedAfter(_Steps):
    """A name computed from the counter read after the loop: the loop's
    Python sees the count, which stays in the key."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for i in range(xs.shape[0]):
            t = i + 1
            h, c = self.step(xs[i], h, c)
        return self.out(h) * t


class CounterDoubled(_Steps):
    """``t = 2 * i``, then ``xs[t // 2]``: not a sum with the counter."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for i in range(xs.shape[0]):
            t = 2 * i
            h, c = self.step(xs[t // 2], h, c)
        return self.out(h)


@pytest.mark.parametrize('cls', [CounterDerivedUsedAfter, CounterDoubled])
def test_a_name_computed_otherwise_from_the_counter_keeps_the_length(cls):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jf = testing.assert_jit_grads_match_eager(
            cls(), _step_calls([(5, 4), (9, 4), (5, 4), (7, 4)]),
            rtol=1e-4, atol=1e-5)
    assert len(jf.cache_entries()) == 3, jf.cache_report()
    assert any(issubclass(w.category, errors.LoopWarning)
               for w in caught), [str(w.message) for w in caught]


class _NumPyTransposed(_Steps):
    """Batch-first NumPy steps made time-major by NumPy, then iterated."""

    def forward(self, xs):
        xs = self.transposed(xs)
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for x in xs:
            h, c = self.step(x, h, c)
        return self.out(h)


class NumPyTransposed(_NumPyTransposed):
    def transposed(self, xs):
        return xs.transpose(1, 0, 2)


class NumPySwapped(_NumPyTransposed):
    def transposed(self, xs):
        return numpy.swapaxes(xs, 0, 1)


class NumPyMoved(_NumPyTransposed):
    def transposed(self, xs):
        return numpy.moveaxis(xs, 1, 0)


@pytest.mark.parametrize('cls', [NumPyTransposed, NumPySwapped, NumPyMoved])
def test_steps_transposed_by_numpy_serve_every_length_and_batch(cls):
    rng = numpy.random.RandomState(7)
    calls = [(rng.standard_normal((b, n, I)).astype('f'),)
             for n, b in SHAPES]
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = differential.check_on_arrays(cls(), calls)
    entry, = jitted.cache_entries()
    assert 'trip=T' in str(entry.graph), entry.graph


class WhileOverProjectedSteps(_Steps):
    """A ``while`` loop over the steps projected at once by a linear layer
    over two batch axes, whose own reshapes merge and split the steps and
    the batch."""

    def forward(self, xs):
        T, batch, _ = xs.shape
        gx = self.x2h(xs, n_batch_axes=2)
        h = c = self.xp.zeros((batch, H), dtype=xs.dtype)
        t = 0
        while t < T:
            c, h = F.lstm(c, gx[t] + self.h2h(h))
            t += 1
        return self.out(h)


class WhileOverProjectedFunction(WhileOverProjectedSteps):
    """The same by ``F.linear``, over the batch-first steps."""

    def forward(self, xs):
        xs = F.transpose(xs, (1, 0, 2))
        gx = F.linear(xs, self.x2h.W, self.x2h.b, n_batch_axes=2)
        h = c = self.xp.zeros((xs.shape[0], H), dtype=xs.dtype)
        t = 0
        while t < xs.shape[1]:
            c, h = F.lstm(c, gx[:, t] + self.h2h(h))
            t += 1
        return self.out(h)


@pytest.mark.parametrize('cls', [WhileOverProjectedSteps,
                                 WhileOverProjectedFunction])
def test_a_while_loop_over_steps_projected_at_once_serves_every_shape(cls):
    entry = _one_entry_with_gradients(cls(), _step_calls(SHAPES))
    assert 'trip=T' in str(entry.graph), entry.graph


class LazyStateOfAProjectedStep(_Steps):
    """The state made in the loop's first step, of the size of the step
    projected (``len(z)``)."""

    def forward(self, xs):
        h = c = None
        for x in xs:
            z = self.x2h(x)
            if h is None:
                h = c = self.xp.zeros((len(z), H), dtype=z.dtype)
            c, h = F.lstm(c, z + self.h2h(h))
        return self.out(h)


def test_a_state_made_lazily_of_a_projected_step_serves_every_shape():
    _one_entry_with_gradients(LazyStateOfAProjectedStep(),
                              _step_calls(SHAPES))


class GRUOverAListOfSteps(_Steps):
    """``L.StatelessGRU`` over a list of steps (each step read by three
    of the link's products), its state made in the first step."""

    def forward(self, xs):
        h = None
        for x in xs:
            if h is None:
                h = self.xp.zeros((x.shape[0], H), dtype=x.dtype)
            h = self.gru(h, x)
        return self.out(h)


def test_a_gru_over_a_list_of_steps_serves_every_shape():
    calls = [([x for x in xs],) for xs, in _step_calls(SHAPES, seed=4)]
    entry = _one_entry_with_gradients(GRUOverAListOfSteps(), calls)
    assert 'trip=T' in str(entry.graph), entry.graph
