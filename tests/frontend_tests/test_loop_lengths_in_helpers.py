"""Sequence models written as they are in real code: the loop in a helper
method, in a sub-chain's forward or in a function the forward calls; the
model under another name than ``self``, or held by a global; the steps'
outputs stacked or joined and then reduced; a stateful ``L.LSTM`` link;
the input projection of all steps at once (``T * B`` rows). Each keeps
one cache entry for every sequence length and batch size, and its outputs
and gradients equal eager Chainer's at each call, with new values.
"""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing


I, H = 6, 8
# (length, batch): new lengths, then new batch sizes with new lengths
SIZES = ((5, 4), (9, 4), (17, 3), (6, 7), (12, 2), (7, 5))


class _Cells(chainer.Chain):
    def __init__(self):
        super(_Cells, self).__init__()
        with self.init_scope():
            self.x2h = L.Linear(I, 4 * H)
            self.h2h = L.Linear(H, 4 * H, nobias=True)
            self.out = L.Linear(H, 3)


class Encoder(_Cells):
    """The loop in a sub-chain's own forward."""

    def forward(self, xs):
        T, batch, _ = xs.shape
        h = c = self.xp.zeros((batch, H), xs.dtype)
        for t in range(T):
            c, h = F.lstm(c, self.x2h(xs[t]) + self.h2h(h))
        return h


class Classifier(chainer.Chain):
    def __init__(self):
        super(Classifier, self).__init__()
        with self.init_scope():
            self.encoder = Encoder()
            self.out = L.Linear(H, 3)

    def forward(self, xs):
        return self.out(self.encoder(xs))


class EncodeMethod(_Cells):
    """The loop in a helper method, over the steps themselves."""

    def forward(self, xs):
        return self.out(self.encode(xs))

    def encode(self, xs):
        h = c = None
        for x in xs:
            if h is None:
                h = c = self.xp.zeros((x.shape[0], H), numpy.float32)
            c, h = F.lstm(c, self.x2h(x) + self.h2h(h))
        return h


def encode(model, xs):
    """A function taking the model under another name than ``self``."""
    h = c = model.xp.zeros((xs.shape[1], H), numpy.float32)
    for t in range(len(xs)):
        c, h = F.lstm(c, model.x2h(xs[t]) + model.h2h(h))
    return h


class EncodeFunction(_Cells):
    def forward(self, xs):
        return self.out(encode(self, xs))


class MeanOfStackedSteps(_Cells):
    """The steps' outputs stacked, then averaged over time."""

    def forward(self, xs):
        T, batch, _ = xs.shape
        h = c = self.xp.zeros((batch, H), numpy.float32)
        hs = []
        for t in range(T):
            c, h = F.lstm(c, self.x2h(xs[t]) + self.h2h(h))
            hs.append(h)
        return self.out(F.mean(F.stack(hs), axis=0))


class BidirectionalFirstStepMade(_Cells):
    """Each direction makes its state in its first step; the backward
    one starts from the last item."""

    def forward(self, xs):
        forward = backward = None
        for t in range(len(xs)):
            gates = self.x2h(xs[t])
            if forward is not None:
                gates = gates + self.h2h(forward)
            forward = F.tanh(gates[:, :H])
        for t in reversed(range(len(xs))):
            gates = self.x2h(xs[t])
            if backward is not None:
                gates = gates + self.h2h(backward)
            backward = F.tanh(gates[:, :H])
        return self.out(forward + backward)


class StatefulLSTMLink(chainer.Chain):
    """``L.LSTM`` keeps its state on the link and makes its first cell
    state itself, as many rows as the batch."""

    def __init__(self):
        super(StatefulLSTMLink, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(I, H)
            self.out = L.Linear(H, 3)

    def forward(self, xs):
        self.lstm.reset_state()
        for x in xs:
            y = self.lstm(x)
        return self.out(y)


class StackedLSTMLinkSteps(StatefulLSTMLink):
    """``L.LSTM``'s outputs collected and stacked batch-first, then
    summed over time: its first step, which makes the state, is peeled
    off the loop and joined before the loop's steps."""

    def forward(self, xs):
        self.lstm.reset_state()
        hs = []
        for x in xs:
            hs.append(self.lstm(x))
        return self.out(F.sum(F.stack(hs, axis=1), axis=1))


class LastOfAComprehension(StatefulLSTMLink):
    """The last of ``L.LSTM``'s outputs made by a comprehension."""

    def forward(self, xs):
        self.lstm.reset_state()
        hs = [self.lstm(x) for x in xs]
        return self.out(hs[-1])


class ProjectedAtOnce(_Cells):
    """The input projection of all steps at once: ``T * B`` rows, then
    split back into steps."""

    def forward(self, xs):
        T, batch, _ = xs.shape
        gates = F.reshape(self.x2h(F.reshape(xs, (T * batch, I))),
                          (T, batch, 4 * H))
        h = c = self.xp.zeros((batch, H), numpy.float32)
        for t in range(T):
            c, h = F.lstm(c, gates[t] + self.h2h(h))
        return self.out(h)


class SumOfConcatenatedSteps(_Cells):
    """The steps joined on the batch's axis: ``T * B`` rows, summed."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        hs = []
        for x in xs:
            c, h = F.lstm(c, self.x2h(x) + self.h2h(h))
            hs.append(h)
        return self.out(F.sum(F.concat(hs, axis=0), axis=0, keepdims=True))


class BatchFirstOutputs(_Cells):
    """The steps' outputs stacked batch-first, ``(B, T, H)``, then summed
    over time."""

    over_time = staticmethod(F.sum)

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        hs = []
        for x in xs:
            c, h = F.lstm(c, self.x2h(x) + self.h2h(h))
            hs.append(h)
        return self.out(self.over_time(F.stack(hs, axis=1), axis=1))


class MaxOfStackedSteps(BatchFirstOutputs):
    """The steps' outputs stacked batch-first, then their maximum over
    time (``F.max``)."""

    over_time = staticmethod(F.max)


FORMS = [Classifier, EncodeMethod, EncodeFunction, MeanOfStackedSteps,
         MaxOfStackedSteps, BidirectionalFirstStepMade, StatefulLSTMLink,
         StackedLSTMLinkSteps, LastOfAComprehension, ProjectedAtOnce,
         SumOfConcatenatedSteps, BatchFirstOutputs]


def _calls(sizes=SIZES, seed=0):
    rng = numpy.random.RandomState(seed)
    return [(rng.standard_normal((n, b, I)).astype(numpy.float32),)
            for n, b in sizes]


def _twins(cls, device=None):
    model, twin = cls(), cls()
    twin.copyparams(model)
    if device is not None:
        model.to_device(device)
        twin.to_device(device)
    return model, twin


def _matches_eager(cls, calls, device=None):
    """The jitted twin of a ``cls`` model gives eager's outputs and
    gradients at each of ``calls``; on ``device`` (``'@cupy:0'``), the
    models and the arguments are sent there."""
    model, twin = _twins(cls, device)
    jitted = chainerjit.jit(twin)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        warnings.simplefilter('error', errors.RecompileWarning)
        for (xs,) in calls:
            if device is not None:
                xs = model.device.send(xs)
            model.cleargrads()
            twin.cleargrads()
            expected, actual = model(xs), jitted(xs)
            testing.assert_results_equal(actual, expected, 1e-5, 1e-6)
            if chainer.config.train:
                F.sum(expected * expected).backward()
                F.sum(actual * actual).backward()
                _grads_match(model, twin)
    return jitted


def _grads_match(model, twin):
    """The twins' parameter gradients are equal (on any device)."""
    for (_, p), (_, q) in zip(sorted(model.namedparams()),
                              sorted(twin.namedparams())):
        testing.assert_results_equal(q.grad, p.grad, 1e-4, 1e-5)


@pytest.mark.parametrize('cls', FORMS)
def test_one_entry_for_every_length_and_batch_size_in_training(cls):
    jitted = _matches_eager(cls, _calls())
    assert jitted.cache_info().currsize == 1, jitted.cache_report()
    entry, = jitted.cache_entries()
    assert 'f32[T,B,6]' in str(entry.signature), str(entry.signature)
    assert jitted.cache_info().hits >= 3


@pytest.mark.parametrize('cls', FORMS)
def test_one_entry_for_every_length_and_batch_size_in_inference(cls):
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        jitted = _matches_eager(cls, _calls(seed=1))
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


_MODEL = _Cells()


def _encode_with_the_global_model(xs):
    """A function jitted on its own, its links a global's."""
    return _MODEL.out(encode(_MODEL, xs))


def test_a_plain_function_reading_a_global_model():
    jitted = testing.assert_jit_grads_match_eager(
        _encode_with_the_global_model, _calls(), rtol=1e-4, atol=1e-5)
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


class LengthInAHelper(_Cells):
    """A helper that uses the length otherwise (a guard): it stays in the
    key where the comparison cannot be a guard, with a warning naming the
    helper's line."""

    def forward(self, xs):
        return self.out(self.encode(xs))

    def encode(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in range(xs.shape[0] // 2):
            c, h = F.lstm(c, self.x2h(xs[t]) + self.h2h(h))
        return h


def test_a_length_a_helper_uses_otherwise_is_named():
    model, twin = _twins(LengthInAHelper)
    jitted = chainerjit.jit(twin)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for (xs,) in _calls(((5, 4), (9, 4), (6, 4))):
            testing.assert_results_equal(jitted(xs), model(xs))
    messages = [str(w.message) for w in caught
                if issubclass(w.category, errors.LoopWarning)]
    assert any('test_loop_lengths_in_helpers.py' in m for m in messages), \
        messages
    assert jitted.cache_info().currsize == 3, jitted.cache_report()


class BatchInPython(_Cells):
    """The batch size in a shape Python computes: the batch flattened
    into one row."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for x in xs:
            c, h = F.lstm(c, self.x2h(x) + self.h2h(h))
        return F.sum(F.reshape(h, (1, xs.shape[1] * H)), axis=1)


def test_a_batch_size_python_uses_stays_in_the_key_with_a_warning():
    # The length stays symbolic; the batch size stays in the key, with a
    # warning naming the use and its line.
    model, twin = _twins(BatchInPython)
    jitted = chainerjit.jit(twin)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for (xs,) in _calls(((5, 4), (9, 4), (6, 3), (7, 3))):
            testing.assert_results_equal(jitted(xs), model(xs))
    messages = [str(w.message) for w in caught
                if issubclass(w.category, errors.RecompileWarning)]
    assert any('keeps the size of xs.shape[1]' in m and 'Reshape' in m and
               'test_loop_lengths_in_helpers.py' in m
               for m in messages), messages
    assert jitted.cache_info().currsize == 2, jitted.cache_report()
    assert all('f32[T,' in str(e.signature)
               for e in jitted.cache_entries())


class MaskedWithWhere(_Cells):
    """Padded steps kept out by ``F.where`` on a mask the forward
    computes, the steps and masks read together with ``zip``."""

    def forward(self, xs, ms):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for x, m in zip(xs, ms):
            c_new, h_new = F.lstm(c, self.x2h(x) + self.h2h(h))
            keep = F.broadcast_to(F.expand_dims(m, 1), h.shape).array > 0
            h = F.where(keep, h_new, h)
            c = F.where(keep, c_new, c)
        return self.out(h)


@pytest.mark.parametrize('train', [True, False])
def test_masked_steps_with_where_keep_one_entry(train):
    model, twin = _twins(MaskedWithWhere)
    jitted = chainerjit.jit(twin)
    rng = numpy.random.RandomState(3)
    with chainer.using_config('train', train), \
            chainer.using_config('enable_backprop', train), \
            warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        warnings.simplefilter('error', errors.RecompileWarning)
        for n, b in SIZES:
            xs = rng.standard_normal((n, b, I)).astype(numpy.float32)
            ms = (rng.rand(n, b) > 0.3).astype(numpy.float32)
            model.cleargrads()
            twin.cleargrads()
            expected, actual = model(xs, ms), jitted(xs, ms)
            testing.assert_results_equal(actual, expected, 1e-5, 1e-6)
            if train:
                F.sum(expected * expected).backward()
                F.sum(actual * actual).backward()
                for (_, p), (_, q) in zip(sorted(model.namedparams()),
                                          sorted(twin.namedparams())):
                    testing.assert_results_equal(q.grad, p.grad, 1e-4, 1e-5)
    assert jitted.cache_info().currsize == 1, jitted.cache_report()
    assert 'Where' in str(jitted.cache_entries()[0].graph)


class TransposedToTimeMajor(_Cells):
    """Batch-first steps made time-major before the loop."""

    def forward(self, xs):
        xs = F.transpose(xs, (1, 0, 2))
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in range(xs.shape[0]):
            c, h = F.lstm(c, self.x2h(xs[t]) + self.h2h(h))
        return self.out(h)


class SwappedToTimeMajor(_Cells):
    def forward(self, xs):
        steps = F.swapaxes(xs, 0, 1)
        h = c = None
        for x in steps:
            gates = self.x2h(x)
            if h is None:
                h = c = self.xp.zeros((x.shape[0], H), numpy.float32)
            c, h = F.lstm(c, gates + self.h2h(h))
        return self.out(h)


@pytest.mark.parametrize('cls', [TransposedToTimeMajor, SwappedToTimeMajor])
def test_batch_first_steps_made_time_major(cls):
    calls = [(xs.transpose(1, 0, 2).copy(),) for xs, in _calls()]
    jitted = _matches_eager(cls, calls)
    assert jitted.cache_info().currsize == 1, jitted.cache_report()
    entry, = jitted.cache_entries()
    assert 'f32[B,T,6]' in str(entry.signature), str(entry.signature)


def _directed(cell, xs):
    h = cell.xp.zeros((xs.shape[1], 4 * H), numpy.float32)
    hs = []
    for t in range(len(xs)):
        h = F.tanh(cell(xs[t]) + h)
        hs.append(h)
    return hs


class BothDirectionsOnOneLine(_Cells):
    """A helper's loop called twice on one line: each call's list is
    used whole (stacked), which the line alone does not tell."""

    def forward(self, xs):
        f = _directed(self.x2h, xs); b = _directed(self.x2h, xs[::-1])  # noqa: E702,E501
        return F.sum(F.stack(f) * F.stack(b[::-1]), axis=(0, 2))


def test_a_helper_called_twice_on_one_line():
    jitted = _matches_eager(BothDirectionsOnOneLine, _calls())
    assert jitted.cache_info().currsize == 1, jitted.cache_report()
