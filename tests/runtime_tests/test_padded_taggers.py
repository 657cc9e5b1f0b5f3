"""Taggers that score a padded block of their sentences' outputs: the
outputs of an N-step link padded to the longest sentence
(``F.pad_sequence(ys)``), merged into rows (``F.reshape(y, (B * T,
H))`` of the block's shape read in Python, ``(-1, H)``, or a linear
layer over two batch axes), scored against the tags padded the same way
(``F.pad_sequence(ts, padding=-1)``, flattened) with ``ignore_label``,
and the accuracy counted over the same rows. The tags, padded item by
item as the sentences are, are joined with them: one entry per mode
serves every number and length of sentences, with values and gradients
equal to eager's at each call."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from tests.runtime_tests.test_joined_lists import \
    checked_without_recompiling
from tests.runtime_tests.test_joined_segments import _tagged


class _PaddedTagger(chainer.Chain):
    """An LSTM tagger whose scores are computed over the padded block;
    ``merge`` says how the forward merges its rows."""

    def __init__(self, merge):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.encoder = L.NStepLSTM(1, 6, 5, 0.0)
            self.out = L.Linear(5, 4)
            self.norm = L.LayerNormalization(5)
        self.merge = merge

    def forward(self, xs, ts):
        _, _, ys = self.encoder(None, None, [self.embed(x) for x in xs])
        if self.merge == 'longest_in_python':  # (in the forward's code)
            longest = max(len(x) for x in xs)
            y = F.pad_sequence(ys, length=longest)
            scores = self.out(F.reshape(y, (len(xs) * longest, -1)))
        else:
            scores = getattr(self, '_' + self.merge)(ys)
        return self.scored(scores, ts)

    def scored(self, scores, ts):
        tags = F.pad_sequence(ts, padding=-1).array.reshape(-1)
        loss = F.softmax_cross_entropy(scores, tags, ignore_label=-1)
        chainer.report({'accuracy': F.accuracy(scores, tags,
                                               ignore_label=-1)}, self)
        return loss

    def _shape_read(self, ys):
        y = F.pad_sequence(ys)
        batch, width = y.shape[:2]
        return self.out(F.reshape(y, (batch * width, -1)))

    def _width_first(self, ys):
        y = F.pad_sequence(ys)
        batch, width, units = y.shape
        return self.out(F.reshape(y, (width * batch, units)))

    def _rows_inferred(self, ys):
        y = F.pad_sequence(ys)
        return self.out(F.reshape(y, (-1, y.shape[2])))

    def _two_batch_axes(self, ys):
        return F.reshape(self.out(F.pad_sequence(ys), n_batch_axes=2),
                         (-1, 4))

    def _normalized(self, ys):
        y = F.pad_sequence(ys)
        batch, width, units = y.shape
        return self.out(self.norm(F.reshape(y, (batch * width, units))))

    def _split_again(self, ys):
        y = F.pad_sequence(ys)
        batch, width, units = y.shape
        scores = F.reshape(self.out(F.reshape(y, (batch * width, units))),
                           (batch, width, -1))
        return F.reshape(scores, (batch * width, -1))


_MERGES = ['shape_read', 'width_first', 'rows_inferred', 'two_batch_axes',
           'longest_in_python', 'split_again', 'normalized']


@pytest.mark.parametrize('merge', _MERGES)
@pytest.mark.parametrize('train', [True, False])
def test_a_padded_tagger_serves_every_count_and_length(merge, train):
    numpy.random.seed(0)
    jitted = checked_without_recompiling(
        lambda: _PaddedTagger(merge),
        _tagged(numpy.random.RandomState(3), (4, 4, 7, 2, 9, 3, 5)), train)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array), '
        'ts[0]: i32[W]@cpu (array)'), entry.signature
    ops = [node.op for node in entry.graph.nodes]
    assert ops.count('PadSegments') == 2, ops


class _PickedByHand(_PaddedTagger):
    """A tagger scoring its rows by hand: each row's log-probability of
    its tag picked by ``F.select_item`` (the padding's tag made 0 and
    masked out), summed along the rows by ``F.cumsum``."""

    def scored(self, scores, ts):
        tags = F.pad_sequence(ts, padding=-1).array.reshape(-1)
        kept = (tags >= 0).astype(numpy.float32)
        picked = F.select_item(F.log_softmax(scores), numpy.maximum(tags, 0))
        return -F.cumsum(picked * kept, axis=0)[-1] / kept.sum()


@pytest.mark.parametrize('train', [True, False])
def test_rows_picked_and_summed_by_hand_serve_every_count(train):
    numpy.random.seed(0)
    jitted = checked_without_recompiling(
        lambda: _PickedByHand('shape_read'),
        _tagged(numpy.random.RandomState(3), (4, 4, 7, 2, 9, 3, 5)), train)
    assert len(jitted.cache_entries()) == 1


def _of_lengths(rng, *lengths_of_calls):
    return [([rng.randint(0, 30, k).astype(numpy.int32) for k in lengths],
             [rng.randint(0, 4, k).astype(numpy.int32) for k in lengths])
            for lengths in lengths_of_calls]


@pytest.mark.parametrize('train', [True, False])
def test_sentences_of_one_word_each_keep_the_lists_joined(train):
    # Their words are as many as the sentences: the second call, recorded
    # to take any number and length of sentences, cannot tell which is
    # which, and runs as recorded; the third compiles the entry.
    numpy.random.seed(0)
    calls = _of_lengths(numpy.random.RandomState(5), [3, 5, 2], [1] * 6,
                        [3, 5, 2, 2], [1] * 4, [6, 1])
    jitted = checked_without_recompiling(
        lambda: _PaddedTagger('shape_read'), calls, train)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array)'), \
        entry.signature
