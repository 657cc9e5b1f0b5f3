"""A loop counting down (``reversed(range(T))``, ``range(T - 1, -1, -1)``)
whose counter is a number (``lengths > t``, ``h * (t + 1)``): its values
depend on the length, so a program for any length computes them from
its trip count. The calls below begin each new length with every
sequence full (a mask of all ones, where a number kept from the
recorded length would agree with eager), then change the lengths."""

import copy
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing

H = 4

#: ``(steps, each sequence's length)`` of the batch-first calls.
CALLS = [(5, [5, 3]), (9, [9, 9]), (9, [9, 2]), (9, [4, 9]), (3, [1, 3, 2]),
         (12, [12, 1, 7]), (9, [1, 9])]


class _Masked(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.cell = L.StatelessGRU(3, H)


class _RangeDown(_Masked):
    """``range(T - 1, -1, -1)``, the mask a boolean ``F.where`` takes."""

    def forward(self, xs, lengths):
        B, T = xs.shape[:2]
        h = self.xp.zeros((B, H), numpy.float32)
        for t in range(T - 1, -1, -1):
            m = self.xp.broadcast_to((t < lengths)[:, None], (B, H))
            h = F.where(m, self.cell(h, xs[:, t]), h)
        return h


class _DownToOne(_Masked):
    """The first step run before a loop down to it, the mask a float."""

    def forward(self, xs, lengths):
        B, T = xs.shape[:2]
        h = self.cell(self.xp.zeros((B, H), numpy.float32), xs[:, 0])
        for t in range(T - 1, 0, -1):
            m = (lengths > t).astype(numpy.float32)[:, None]
            h = m * self.cell(h, xs[:, t]) + (1 - m) * h
        return h


class _Weighted(_Masked):
    """``reversed(range(T))``, each step's state weighted by ``t + 1``."""

    def forward(self, xs, lengths):
        h = self.xp.zeros((xs.shape[0], H), numpy.float32)
        for t in reversed(range(xs.shape[1])):
            h = self.cell(h, xs[:, t]) * (t + 1) / xs.shape[1]
        return h


class _TimeMajor(_Masked):
    """Time-major steps counted down by ``reversed(range(len(xs)))``."""

    def forward(self, xs, lengths):
        xs = F.transpose(xs, (1, 0, 2))
        h = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for t in reversed(range(len(xs))):
            h = F.where(self.xp.broadcast_to((lengths > t)[:, None],
                                             h.shape), self.cell(h, xs[t]), h)
        return h


class _FirstStepPeeled(_Masked):
    """State made of zeros before ``reversed(range(T))``: the first step,
    which reads the zeros, is recorded apart from the loop, its mask an
    int of the counter as the other steps' are."""

    def forward(self, xs, lengths):
        B, T = xs.shape[:2]
        h = self.xp.zeros((B, H), numpy.float32)
        for t in reversed(range(T)):
            m = (lengths > t).astype(numpy.float32)[:, None]
            h = m * self.cell(h, xs[:, t]) + (1 - m) * h
        return h


class _MadeInTheFirstStep(_Masked):
    """The state made in the first step, in a branch that alone reads the
    counter as a number."""

    def forward(self, xs, lengths):
        B, T = xs.shape[:2]
        h = None
        for t in reversed(range(T)):
            if h is None:
                m = (lengths > t).astype(numpy.float32)[:, None]
                h = m * self.cell(self.xp.zeros((B, H), numpy.float32),
                                  xs[:, t])
            else:
                h = self.cell(h, xs[:, t])
        return h


def _matches_eager(cls, train, device=None):
    """The jitted forward of a ``cls`` model against an eager copy at each
    of :data:`CALLS`, new values each time: outputs, and parameters'
    gradients in training; on ``device`` (``'@cupy:0'``), the models and
    the arguments are sent there."""
    model = cls()
    model.cleargrads()
    if device is not None:
        model.to_device(device)
    eager = copy.deepcopy(model)
    jitted = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(5)
    with chainer.using_config('train', train):
        for steps, lengths in CALLS:
            xs = rng.standard_normal((len(lengths), steps, 3)).astype(
                numpy.float32)
            lengths = numpy.array(lengths, numpy.int32)
            if device is not None:
                xs, lengths = model.device.send((xs, lengths))
            ours, theirs = jitted(xs, lengths), eager.forward(xs, lengths)
            testing.assert_results_equal(ours, theirs, 1e-4, 1e-5)
            if train:
                for y, m in ((ours, model), (theirs, eager)):
                    m.cleargrads()
                    F.sum(y * y).backward()
                for (_, p), (_, q) in zip(sorted(model.namedparams()),
                                          sorted(eager.namedparams())):
                    testing.assert_results_equal(p.grad, q.grad, 1e-4, 1e-5)
    return jitted


@pytest.mark.parametrize('train', [False, True])
@pytest.mark.parametrize('cls', [_RangeDown, _DownToOne, _Weighted,
                                 _FirstStepPeeled])
def test_numbers_of_a_counter_counting_down_follow_the_length(cls, train):
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        jitted = _matches_eager(cls, train)
    assert jitted.cache_info().currsize == 1, jitted.cache_report()
    assert 'xs: f32[B,T,3]' in str(jitted.cache_entries()[0].signature)


@pytest.mark.parametrize('train', [False, True])
@pytest.mark.parametrize('cls', [_TimeMajor, _MadeInTheFirstStep])
def test_numbers_of_a_counter_counting_down_give_eagers_values(cls, train):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.LoopWarning)
        warnings.simplefilter('ignore', errors.RecompileWarning)
        _matches_eager(cls, train)


def test_a_number_of_the_first_step_alone_keeps_the_length_and_says_why():
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.LoopWarning)
        warnings.simplefilter('ignore', errors.RecompileWarning)
        jitted = _matches_eager(_MadeInTheFirstStep, False)
    for entry in jitted.cache_entries():
        assert 'xs: f32[B,T' not in str(entry.signature)
        assert 'the loop counter, counting down from the length, is used ' \
            'as a number' in '\n'.join(entry.size_notes())
