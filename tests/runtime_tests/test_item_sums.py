"""Each sentence scored on its own and the scores added up in Python
(``loss += F.softmax_cross_entropy(self.out(y), t)`` over ``zip(ys, ts)``,
``sum(...)``, ``F.sum(F.stack(...))``): a joined call computes the score
of every sentence at once and their sum as one op, so that one entry per
mode serves any number and lengths of sentences, with values and
gradients equal to eager's; where the forward reads one sentence's score
otherwise, or counts the sentences in Python, the number of sentences
stays in the key, with a warning that says why."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy

from chainerjit import errors
from tests.runtime_tests.test_joined_lists import \
    checked_without_recompiling
from tests import differential

I32 = numpy.int32

_COUNTS = (4, 4, 7, 2, 9, 3, 1, 12, 5)


def _tagged(rng, counts, ignored=0.0, high=10):
    """Sentences and their tags, as long, ``counts`` of them call by call;
    a share ``ignored`` of the tags is -1 (Chainer's ignore label)."""
    calls = []
    for n in counts:
        lengths = rng.randint(1, high, n)
        xs = [rng.randint(0, 30, k).astype(I32) for k in lengths]
        ts = [numpy.where(rng.rand(k) < ignored, -1,
                          rng.randint(0, 4, k)).astype(I32)
              for k in lengths]
        calls.append((xs, ts))
    return calls


class _Tagger(chainer.Chain):
    """An LSTM tagger whose loss adds up each sentence's in a loop."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.rnn = L.NStepLSTM(1, 6, 5, 0.0)
            self.back = L.NStepGRU(1, 6, 5, 0.0)
            self.out = L.Linear(5, 4)

    def outputs(self, xs):
        return self.rnn(None, None, [self.embed(x) for x in xs])[2]

    def forward(self, xs, ts):
        loss = 0
        for y, t in zip(self.outputs(xs), ts):
            loss += F.softmax_cross_entropy(self.out(y), t)
        return loss / len(xs)


class _Summed(_Tagger):
    """``sum`` over a generator of the sentences' losses."""

    def forward(self, xs, ts):
        return sum(F.softmax_cross_entropy(self.out(y), t, normalize=False)
                   for y, t in zip(self.outputs(xs), ts))


class _Stacked(_Tagger):
    """The mean of the sentences' losses stacked, started from a loss of
    the batch, in reverse order."""

    def forward(self, xs, ts):
        ys = self.outputs(xs)
        losses = [F.softmax_cross_entropy(self.out(y), t)
                  for y, t in zip(ys, ts)]
        loss = F.mean(F.stack(losses))
        for y, t in reversed(list(zip(ys, ts))):
            loss = loss + F.softmax_cross_entropy(self.out(y), t)
        return loss


class _WordLosses(_Tagger):
    """Each word's loss (``reduce='no'``) of the outputs of two links
    added, sentence by sentence, then joined."""

    def forward(self, xs, ts):
        exs = [self.embed(x) for x in xs]
        ys = self.rnn(None, None, exs)[2]
        zs = self.back(None, exs)[1]
        losses = [F.softmax_cross_entropy(self.out(y + z), t, reduce='no')
                  for y, z, t in zip(ys, zs, ts)]
        return F.sum(F.concat(losses, axis=0)) / len(xs)


class _Pooled(_Tagger):
    """The sum of each sentence's squared outputs, and of its embedding
    passed through tanh, added up."""

    def forward(self, xs, ts):
        total = 0
        for x in xs:
            total += F.sum(F.tanh(self.embed(x)))
        return sum(F.sum(y * y) for y in self.outputs(xs)) + total * 0.1


def _with_ignored(seed):
    return _tagged(numpy.random.RandomState(seed), _COUNTS, ignored=0.3)


def _one_entry_per_mode(make, calls):
    for train in (True, False):
        jitted = checked_without_recompiling(make, calls, train)
        assert len(jitted.cache_entries()) == 1, jitted.cache_report()
        assert 'i32[W]' in str(jitted.cache_entries()[0].signature)
    return jitted


def test_losses_added_in_a_loop_are_one_entry_per_mode():
    jitted = _one_entry_per_mode(_Tagger, _with_ignored(0))
    graph = str(jitted.cache_entries()[0].graph)
    # every sentence's loss at once, summed: no op per sentence
    assert graph.count('SoftmaxCrossEntropy') == 1, graph
    assert 'f32[B] = ReduceSegments[kind=sum]' in graph, graph
    assert 'GetItem' not in graph and 'Add(' not in graph, graph


def test_losses_summed_by_a_generator_unnormalized():
    _one_entry_per_mode(_Summed, _with_ignored(1))


def test_losses_stacked_and_added_in_reverse():
    _one_entry_per_mode(_Stacked, _with_ignored(2))


def test_word_losses_of_two_links_added_item_by_item():
    _one_entry_per_mode(_WordLosses, _with_ignored(3))


def test_sums_of_each_sentence_added_up():
    _one_entry_per_mode(_Pooled, _with_ignored(4))


@settings(max_examples=8, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.integers(-1, 3), min_size=1, max_size=6),
                min_size=1, max_size=5))
def test_a_loss_of_sentences_of_any_tags_matches_eager(tags):
    """Tags all ignored in a sentence (Chainer divides by one there), or
    none: the joined entry of a first call's recording, against eager."""
    rng = numpy.random.RandomState(len(tags))
    ts = [numpy.array(t, I32) for t in tags]
    xs = [rng.randint(0, 30, len(t)).astype(I32) for t in tags]
    warm = _tagged(rng, (3, 2))
    differential.check_seeded(_tagger(), warm + [(xs, ts)])


def _tagger():
    numpy.random.seed(0)
    return _Tagger()


class _OneRead(_Tagger):
    """The first sentence's loss read on its own, besides the sum."""

    def forward(self, xs, ts):
        losses = [F.softmax_cross_entropy(self.out(y), t)
                  for y, t in zip(self.outputs(xs), ts)]
        return sum(losses) + losses[0] * 0.5


class _Counted(_Tagger):
    """The sentences counted in the loop by a Python int."""

    def forward(self, xs, ts):
        loss, n = 0, 0
        for y, t in zip(self.outputs(xs), ts):
            loss += F.softmax_cross_entropy(self.out(y), t)
            n += 1
        return loss / n


class _Sliced(_Tagger):
    """The loss of the first three sentences alone."""

    def forward(self, xs, ts):
        os = [self.out(y) for y in self.outputs(xs)]
        loss = 0
        for o, t in zip(os[:3], ts[:3]):
            loss += F.softmax_cross_entropy(o, t)
        return loss + 0 * F.sum(F.concat(os, axis=0))


def _kept_in_the_key(make, calls, why):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jitted = differential.check_seeded(make(), calls)
    messages = [str(w.message) for w in caught
                if issubclass(w.category, errors.RecompileWarning)]
    assert any('number of items' in m and why in m for m in messages), \
        messages
    assert all('i32[W]' not in str(e.signature)
               for e in jitted.cache_entries())


def test_a_loss_of_one_sentence_read_on_its_own_keeps_the_count():
    _kept_in_the_key(_OneRead, _tagged(numpy.random.RandomState(5),
                                       (3, 3, 5, 4)),
                     'a value of one item of the sentences joined')


def test_sentences_counted_in_python_keep_the_count():
    _kept_in_the_key(_Counted, _tagged(numpy.random.RandomState(6),
                                       (3, 3, 5, 4)),
                     'counted by iterating over the list')


def test_some_sentences_sliced_keep_the_count():
    # three sentences when recorded: all of them, then; five later
    _kept_in_the_key(_Sliced, _tagged(numpy.random.RandomState(7),
                                      (3, 3, 3, 5, 4)),
                     'read by slicing the list at test_item_sums')


class _Scored(_Tagger):
    """The loss and the accuracy of each sentence, both added up."""

    def forward(self, xs, ts):
        loss, accuracy = 0, 0
        for y, t in zip(self.outputs(xs), ts):
            scores = self.out(y)
            loss += F.softmax_cross_entropy(scores, t)
            accuracy += F.accuracy(scores, t, ignore_label=-1)
        return loss, accuracy / len(xs)


def test_accuracies_added_up_with_the_losses():
    calls = _with_ignored(8)
    for xs, ts in calls[::2]:
        ts[0][:] = -1  # (a sentence of no tags counted: accuracy 0)
    jitted = checked_without_recompiling(_Scored, calls, False)
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()
    assert str(jitted.cache_entries()[0].graph).count('Accuracy') == 0


class _Appended(_Tagger):
    """The losses appended to a list, then averaged by its length."""

    def forward(self, xs, ts):
        losses = []
        for y, t in zip(self.outputs(xs), ts):
            losses.append(F.softmax_cross_entropy(self.out(y), t))
        return sum(losses) / len(losses)


def test_losses_appended_and_averaged_by_their_count():
    # (len(losses) was the recorded count, baked in)
    _one_entry_per_mode(_Appended, _with_ignored(9))


class _Seq2seq(chainer.Chain):
    """Chainer's seq2seq example, its loss added up target by target: the
    decoder's outputs over each target framed by an end of sentence."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed_x = L.EmbedID(30, 6)
            self.embed_y = L.EmbedID(8, 6)
            self.encoder = L.NStepLSTM(1, 6, 5, 0.0)
            self.decoder = L.NStepLSTM(1, 6, 5, 0.0)
            self.out = L.Linear(5, 8)

    def forward(self, xs, ys):
        eos = numpy.array([0], I32)
        ys_in = [numpy.concatenate([eos, y]) for y in ys]
        ys_out = [numpy.concatenate([y, eos]) for y in ys]
        h, c, _ = self.encoder(None, None, [self.embed_x(x) for x in xs])
        _, _, os = self.decoder(h, c, [self.embed_y(y) for y in ys_in])
        loss = 0
        for o, t in zip(os, ys_out):
            loss += F.softmax_cross_entropy(self.out(o), t)
        return loss / len(xs)


def test_a_decoder_loss_added_up_target_by_target():
    rng = numpy.random.RandomState(10)
    calls = [([rng.randint(0, 30, k).astype(I32)
               for k in rng.randint(1, 8, n)],
              [rng.randint(1, 8, k).astype(I32)
               for k in rng.randint(1, 6, n)]) for n in _COUNTS]
    jitted = _one_entry_per_mode(_Seq2seq, calls)
    assert 'i32[W2]' in str(jitted.cache_entries()[0].signature)


class _Means(_Tagger):
    """The mean of each output sequence's elements, added up."""

    def forward(self, xs, ts):
        return sum(F.mean(F.tanh(y)) for y in self.outputs(xs)) + \
            F.softmax_cross_entropy(self.out(F.concat(self.outputs(xs),
                                                      axis=0)),
                                    F.concat(ts, axis=0))


def test_means_of_each_sentence_added_up():
    _one_entry_per_mode(_Means, _with_ignored(11))


class _Weighted(_Tagger):
    """Each sentence's loss scaled and added to a penalty on its scores,
    then a soft minimum of the sentences' losses."""

    def forward(self, xs, ts):
        loss = 0
        for y, t in zip(self.outputs(xs), ts):
            scores = self.out(y)
            loss += F.softmax_cross_entropy(scores, t) * 0.5 + \
                0.1 * F.sum(scores * scores)
        return loss - F.log(sum(
            F.exp(-F.softmax_cross_entropy(self.out(y), t))
            for y, t in zip(self.outputs(xs), ts)))


def test_losses_of_each_sentence_scaled_and_combined():
    jitted = _one_entry_per_mode(_Weighted, _with_ignored(12))
    assert 'Exp' in str(jitted.cache_entries()[0].graph)


class _CountedByNumPy(_Tagger):
    """The words tagged right counted by NumPy sentence by sentence, over
    the words counted in Python, beside the losses added up."""

    def forward(self, xs, ts):
        loss, correct, total = 0, 0, 0
        for y, t in zip(self.outputs(xs), ts):
            scores = self.out(y)
            loss += F.softmax_cross_entropy(scores, t)
            correct += (scores.array.argmax(axis=1) == t).sum()
            total += len(t)
        accuracy = correct / total
        chainer.report({'accuracy': accuracy}, self)
        return loss if chainer.config.train else (loss, accuracy)


def test_an_accuracy_counted_by_numpy_sentence_by_sentence():
    calls = _with_ignored(13)
    jitted = _one_entry_per_mode(_CountedByNumPy, calls)
    graph = str(jitted.cache_entries()[0].graph)
    assert 'numpy.argmax' in graph or 'ndarray.argmax' in graph, graph
    assert graph.count('ndarray.argmax') + graph.count('numpy.argmax') == 1


class _CountedByXpSum(_Tagger):
    """The count as the POS tagging example writes it, ``xp.sum(y ==
    p)``, the predictions made by NumPy beforehand."""

    def forward(self, xs, ts):
        loss, correct = 0, 0
        for y, t in zip(self.outputs(xs), ts):
            scores = self.out(y)
            loss += F.softmax_cross_entropy(scores, t)
            p = scores.array.argmax(axis=1)
            correct += self.xp.sum(t == p)
        chainer.report({'correct': correct}, self)
        return loss if chainer.config.train else (loss, correct)


def test_a_count_by_xp_sum_sentence_by_sentence():
    _one_entry_per_mode(_CountedByXpSum, _with_ignored(14))
