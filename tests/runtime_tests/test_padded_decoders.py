"""Decoders stepping over their targets padded in the forward
(``Y = F.pad_sequence(ys, padding=-1)``, then ``for t in
range(Y.shape[1])``), fed the previous target word read from the padded
block's array (``Y.array[:, t]``, teacher forcing), with Luong attention
over an N-step encoder's outputs padded into a block and masked past
each sentence's end: the lists are joined, the loop rolls over the
targets' width, and one entry per mode serves every number and length
of sources and targets, with values and gradients equal to eager's at
each call."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit

from benchmarks.bench_programs import sequence_embed
from tests.runtime_tests.test_joined_lists import \
    checked_without_recompiling

I32, F32 = numpy.int32, numpy.float32
V, U = 20, 6


class _TeacherForced(chainer.Chain):
    """An LSTM decoder over the padded targets, each step fed the last
    target word (``-1`` past a target's end, read as ``0``)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(V, U, ignore_label=-1)
            self.decoder = L.LSTM(U, U)
            self.out = L.Linear(U, V)

    def forward(self, xs, ys):
        targets = F.pad_sequence(ys, padding=-1)
        self.decoder.reset_state()
        loss, previous = 0, self.xp.zeros((len(ys),), I32)
        for t in range(targets.shape[1]):
            h = self.decoder(self.embed(previous))
            loss += F.softmax_cross_entropy(self.out(h), targets[:, t],
                                            ignore_label=-1)
            previous = self.xp.maximum(targets.array[:, t], 0)
        return loss


class _Attending(chainer.Chain):
    """The same decoder attending to a GRU encoder's outputs, padded into
    a block (``F.pad_sequence(hs)``) and masked past each source's end
    (``xp.arange(S)[None, :] < lengths[:, None]``, ``F.where``)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(V, U, ignore_label=-1)
            self.encoder = L.NStepGRU(1, U, U, 0.0)
            self.decoder = L.LSTM(2 * U, U)
            self.attention = L.Linear(U, U, nobias=True)
            self.out = L.Linear(2 * U, V)

    def forward(self, xs, ys):
        _, hs = self.encoder(None, sequence_embed(self.embed, xs, 0.0))
        enc = F.pad_sequence(hs, padding=0.0)
        lengths = self.xp.array([len(x) for x in xs])
        mask = self.xp.arange(enc.shape[1])[None, :] < lengths[:, None]
        targets = F.pad_sequence(ys, padding=-1)
        self.decoder.reset_state()
        context = chainer.Variable(self.xp.zeros((len(xs), U), F32))
        loss, previous = 0, self.xp.zeros((len(xs),), I32)
        for t in range(targets.shape[1]):
            h = self.decoder(F.concat([self.embed(previous), context]))
            scores = F.squeeze(F.matmul(enc, F.expand_dims(
                self.attention(h), 2)), 2)
            scores = F.where(mask, scores,
                             self.xp.full(scores.shape, -1e9, F32))
            weights = F.broadcast_to(F.softmax(scores)[:, :, None],
                                     enc.shape)
            context = F.sum(enc * weights, axis=1)
            loss += F.softmax_cross_entropy(
                self.out(F.concat([h, context])), targets[:, t],
                ignore_label=-1)
            previous = self.xp.maximum(targets.array[:, t], 0).astype(I32)
        return loss


def _pairs(rng, shapes):
    """Sources and targets, ``(count, longest)`` of them call by call."""
    def sentences(n, longest):
        return [rng.randint(0, V, rng.randint(1, longest + 1)).astype(I32)
                for _ in range(n)]
    return [(sentences(n, longest), sentences(n, longest // 2 + 1))
            for n, longest in shapes]


@pytest.mark.parametrize('cls', [_TeacherForced, _Attending])
@pytest.mark.parametrize('train', [True, False])
def test_a_decoder_over_targets_padded_in_the_forward_keeps_one_entry(
        cls, train):
    numpy.random.seed(0)
    calls = _pairs(numpy.random.RandomState(5),
                   [(4, 6), (7, 9), (3, 6), (2, 9), (5, 12), (1, 4), (6, 3)])
    jitted = checked_without_recompiling(cls, calls, train)
    entry, = jitted.cache_entries()
    assert 'ys: i32[B,T]' in str(entry.signature), entry.signature
    assert any(node.region is not None for node in entry.graph.nodes)


def test_sizes_checked_against_eager_once_are_not_checked_again():
    # The sizes a call checks (the trip count, the number of sentences,
    # the words, and the longest and total lengths of each list, no key's)
    # are noted once checked: calls at the same sizes again, with other
    # words, all run compiled (but the two recording calls' sizes, checked
    # at their first hits).
    model = _Attending()
    jitted = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(9)
    calls = _pairs(rng, [(rng.randint(1, 12), rng.randint(2, 14))
                         for _ in range(30)])
    counted = []
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for again in range(3):
            for pair in calls:
                jitted(*([rng.randint(0, V, len(x)).astype(I32) for x in xs]
                         for xs in pair))
            counted.append(jitted.cache_info().eager)
    assert counted[2] == counted[1], jitted.cache_info()
