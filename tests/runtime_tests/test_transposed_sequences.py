"""``F.n_step_lstm`` and its kin, called as Chainer's functions on steps
``F.transpose_sequence`` made of sorted sequences: the call is one node on
the sequences, as a link's is, and its output steps transposed back are
that node's outputs, so that a list of sentences is joined and one entry
per mode serves every number and length of them, with values and
gradients equal to eager's."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from benchmarks.bench_programs import sequence_embed
from tests import differential
from tests.runtime_tests.test_joined_lists import \
    checked_without_recompiling

I32 = numpy.int32

#: (number of sentences, longest length) call by call: batches of one
#: sentence among them, one of a single word.
_SHAPES = ((4, 6), (1, 1), (3, 9), (1, 5), (5, 2), (2, 7), (6, 12), (2, 1))


def _sorted_batches(rng, shapes):
    """Sentences sorted by decreasing length, as Chainer's N-step functions
    take them, and a label for each, call by call."""
    calls = []
    for n, longest in shapes:
        lengths = sorted(rng.randint(1, longest + 1, n), reverse=True)
        lengths[0] = longest
        calls.append(([rng.randint(0, 30, k).astype(I32) for k in lengths],
                      rng.randint(0, 3, n).astype(I32)))
    return calls


class _Tagger(chainer.Chain):
    """Words embedded, the N-step link ``rnn`` (whose weights the
    forward gives a function), and an output layer of its ``units``."""

    def __init__(self, rnn, units):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.rnn = rnn
            self.out = L.Linear(units, 3)


class _FunctionalGRU(_Tagger):
    """``F.n_step_gru`` with an ``L.NStepGRU``'s weights, over the
    embedded sentences transposed, its outputs transposed back and each
    averaged."""

    def __init__(self):
        super().__init__(L.NStepGRU(2, 6, 5, 0.0), 5)

    def forward(self, xs, t):
        exs = [self.embed(x) for x in xs]
        hx = self.xp.zeros((2, len(xs), 5), 'f')
        hy, ys = F.n_step_gru(2, 0.0, hx, self.rnn.ws, self.rnn.bs,
                              F.transpose_sequence(exs))
        ys = F.transpose_sequence(ys)
        means = F.concat([F.mean(y, axis=0, keepdims=True) for y in ys],
                         axis=0)
        return F.softmax_cross_entropy(self.out(means + hy[-1]), t)


class _FunctionalBiLSTM(_Tagger):
    """``F.n_step_bilstm`` on weights listed by hand, as Chainer's
    tests pass them, both states a Variable of zeros; every word's output
    scored."""

    def __init__(self):
        super().__init__(L.NStepBiLSTM(1, 6, 4, 0.0), 8)

    def forward(self, xs, t):
        ws = [[getattr(w, 'w%d' % i) for i in range(8)] for w in self.rnn]
        bs = [[getattr(w, 'b%d' % i) for i in range(8)] for w in self.rnn]
        h0 = chainer.Variable(self.xp.zeros((2, len(xs), 4), 'f'))
        steps = F.transpose_sequence([self.embed(x) for x in xs])
        hy, cy, ys = F.n_step_bilstm(1, 0.0, h0, h0, ws, bs, steps)
        words = self.out(F.concat(F.transpose_sequence(ys), axis=0))
        return F.sum(words) * 0.01 + F.softmax_cross_entropy(
            self.out(F.concat((hy[0], hy[1]), axis=1)), t)


class _FunctionalLSTMOfSegments(_Tagger):
    """``F.n_step_lstm`` of two layers, with dropout, on the sentences as
    Chainer's examples embed them (``sequence_embed``: joined, embedded,
    cut at their offsets); a tagger of its outputs transposed back."""

    def __init__(self):
        super().__init__(L.NStepLSTM(2, 6, 5, 0.3), 5)

    def forward(self, xs, t):
        hx = self.xp.zeros((2, len(xs), 5), 'f')
        _, _, ys = F.n_step_lstm(
            2, 0.3, hx, hx, self.rnn.ws, self.rnn.bs,
            F.transpose_sequence(sequence_embed(self.embed, xs, 0.1)))
        words = self.out(F.concat(F.transpose_sequence(ys), axis=0))
        return F.sum(words * words) * 0.01


class _FunctionalRNN(_Tagger):
    """``F.n_step_rnn`` of ReLU units (``activation=`` given) over
    sentences' features made of their embeddings, one a word."""

    def __init__(self):
        super().__init__(L.NStepRNNReLU(1, 6, 5, 0.0), 5)

    def forward(self, xs, t):
        hx = self.xp.zeros((1, len(xs), 5), 'f')
        steps = F.transpose_sequence([F.tanh(self.embed(x)) for x in xs])
        hy, _ = F.n_step_rnn(1, 0.0, hx, self.rnn.ws, self.rnn.bs, steps,
                             activation='relu')
        return F.softmax_cross_entropy(self.out(hy[0]), t)


@pytest.mark.parametrize('cls', [_FunctionalGRU, _FunctionalBiLSTM,
                                 _FunctionalLSTMOfSegments, _FunctionalRNN])
@pytest.mark.parametrize('train', [True, False])
def test_a_functional_nstep_call_serves_every_batch_of_sentences(cls, train):
    numpy.random.seed(0)
    jitted = checked_without_recompiling(
        cls, _sorted_batches(numpy.random.RandomState(3), _SHAPES), train)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array)'), \
        entry.signature
    ops = [node.op for node in entry.graph.nodes]
    assert [op for op in ops if 'NStep' in op] in (
        ['PackedNStepRNN'], ['PackedNStepRNNDropout']), ops
    assert 'TransposeSequence' not in ops, ops


class _TimeMajorTagger(_Tagger):
    """A tagger of ``F.n_step_bilstm``'s output steps read time-major, as
    they are (``F.concat(ys, axis=0)``), and its tags transposed alike."""

    def __init__(self):
        super().__init__(L.NStepBiLSTM(1, 6, 4, 0.0), 8)

    def forward(self, xs, ts):
        hx = self.xp.zeros((2, len(xs), 4), 'f')
        steps = F.transpose_sequence([self.embed(x) for x in xs])
        _, _, ys = F.n_step_bilstm(1, 0.0, hx, hx, self.rnn.ws, self.rnn.bs,
                                   steps)
        return F.softmax_cross_entropy(
            self.out(F.concat(ys, axis=0)),
            F.concat(F.transpose_sequence(ts), axis=0))


class _TimeMajorFeatures(chainer.Chain):
    """``F.n_step_gru`` on sequences of features given as they are, its
    output steps read time-major."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.rnn = L.NStepGRU(1, 4, 5, 0.0)
            self.out = L.Linear(5, 3)

    def forward(self, xs, ts):
        hx = self.xp.zeros((1, len(xs), 5), 'f')
        _, ys = F.n_step_gru(1, 0.0, hx, self.rnn.ws, self.rnn.bs,
                             F.transpose_sequence(xs))
        return F.softmax_cross_entropy(
            self.out(F.concat(ys, axis=0)),
            F.concat(F.transpose_sequence(ts), axis=0))


def _of_features(calls):
    """The sentences of ``calls`` as features, four a word."""
    rng = numpy.random.RandomState(10)
    return [([rng.standard_normal((len(x), 4)).astype(numpy.float32)
              for x in xs], ts) for xs, ts in calls]


class _FunctionalSeq2Seq(chainer.Chain):
    """An ``F.n_step_lstm`` encoder and decoder, the decoder from the
    encoder's last states, over sources and targets each sorted; the
    targets embedded word by word and scored whole."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed_x = L.EmbedID(30, 6)
            self.embed_y = L.EmbedID(30, 6)
            self.encoder = L.NStepLSTM(1, 6, 5, 0.0)
            self.decoder = L.NStepLSTM(1, 6, 5, 0.0)
            self.out = L.Linear(5, 30)

    def forward(self, xs, ys):
        hx = self.xp.zeros((1, len(xs), 5), 'f')
        hy, cy, _ = F.n_step_lstm(
            1, 0.0, hx, hx, self.encoder.ws, self.encoder.bs,
            F.transpose_sequence([self.embed_x(x) for x in xs]))
        _, _, os = F.n_step_lstm(
            1, 0.0, hy, cy, self.decoder.ws, self.decoder.bs,
            F.transpose_sequence([self.embed_y(y) for y in ys]))
        h = self.out(F.concat(F.transpose_sequence(os), axis=0))
        return F.softmax_cross_entropy(h, F.concat(ys, axis=0))


def _sentence_pairs(calls):
    """The sentences of ``calls`` and targets of other lengths, sorted."""
    rng = numpy.random.RandomState(12)
    return [(xs, [rng.randint(0, 30, k).astype(I32) for k in sorted(
        rng.randint(1, 8, len(xs)), reverse=True)]) for xs, _ in calls]


@pytest.mark.parametrize('train', [True, False])
def test_a_functional_encoder_decoder_serves_every_batch(train):
    numpy.random.seed(0)
    jitted = checked_without_recompiling(_FunctionalSeq2Seq, _sentence_pairs(
        _sorted_batches(numpy.random.RandomState(13), _SHAPES)), train)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array), '
        'ys[0]: i32[W2]@cpu (array), ys[1]: i64[B]@cpu (array)'), \
        entry.signature


def _tagged(calls):
    """The sentences of ``calls`` with a tag for each word."""
    rng = numpy.random.RandomState(7)
    return [(xs, [rng.randint(0, 3, len(x)).astype(I32) for x in xs])
            for xs, _ in calls]


@pytest.mark.parametrize('cls, words', [
    (_TimeMajorTagger, 'i32[W]'), (_TimeMajorFeatures, 'f32[W,4]')])
@pytest.mark.parametrize('train', [True, False])
def test_steps_read_time_major_are_the_rows_reordered(cls, words, train):
    # One node orders the rows of the joined sentences time-major, the
    # outputs' and the tags', at every number and length of them.
    numpy.random.seed(0)
    calls = _tagged(_sorted_batches(numpy.random.RandomState(8), _SHAPES))
    if cls is _TimeMajorFeatures:
        calls = _of_features(calls)
    jitted = checked_without_recompiling(cls, calls, train)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: %s@cpu (array), xs[1]: i64[B]@cpu (array), '
        'ts[0]: i32[W]@cpu (array), ts[1]: i64[B]@cpu (array)' % words), \
        entry.signature
    ops = [node.op for node in entry.graph.nodes]
    assert ops.count('TimeMajorSegments') == 2, ops


def test_an_output_step_read_alone_keeps_chainers_steps():
    # ys[0], each sentence's first output, read as it is: the steps are
    # Chainer's, whose gradient takes the steps not read as zeros, the
    # lengths in the key.
    class FirstStep(_FunctionalGRU):
        def forward(self, xs, t):
            hx = self.xp.zeros((2, len(xs), 5), 'f')
            hy, ys = F.n_step_gru(2, 0.0, hx, self.rnn.ws, self.rnn.bs,
                                  F.transpose_sequence(
                                      [self.embed(x) for x in xs]))
            return F.softmax_cross_entropy(self.out(ys[0] + hy[-1]), t)

    rng = numpy.random.RandomState(11)
    calls = [([rng.randint(0, 30, n).astype(I32) for n in lengths],
              rng.randint(0, 3, len(lengths)).astype(I32))
             for lengths in ((5, 3, 2),) * 3 + ((4, 4), (5, 3, 2))]
    numpy.random.seed(0)
    jitted = differential.check_seeded(FirstStep(), calls)
    assert jitted.cache_info().hits > 0


def test_steps_joined_and_read_alone_too_have_eagers_gradients():
    # The steps joined time-major are one node on the sentences; the
    # steps read alone are Chainer's, the others then unread.
    class StepsJoinedAndRead(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.embed = L.EmbedID(30, 6)

        def forward(self, xs, t):
            steps = F.transpose_sequence([self.embed(x) for x in xs])
            h = F.concat(steps, axis=0)
            return F.sum(h * h) + F.sum(steps[0]) + F.sum(steps[-1] * 2)

    rng = numpy.random.RandomState(14)
    calls = [([rng.randint(0, 30, n).astype(I32) for n in (6, 4, 3, 2)],
              None) for _ in range(3)]
    numpy.random.seed(0)
    jitted = differential.check_seeded(StepsJoinedAndRead(), calls)
    assert jitted.cache_info().hits > 0


def test_steps_of_sequences_of_variables_keep_their_lengths_in_the_key():
    # Variables are not joined: one node on the items, at their lengths,
    # values and gradients equal to eager's.
    def tagger(xs, ts):
        steps = F.transpose_sequence([F.tanh(x) for x in xs])
        return F.sum(F.concat(steps, axis=0) * F.concat(
            F.transpose_sequence(ts), axis=0)[:, None])

    rng = numpy.random.RandomState(9)
    calls = []
    for lengths in ((4, 2, 2), (5, 3, 1), (4, 2, 2)):
        calls.append(([rng.standard_normal((n, 3)).astype(numpy.float32)
                       for n in lengths],
                      [rng.standard_normal(n).astype(numpy.float32)
                       for n in lengths]))
    jitted = differential.check_grads(tagger, calls)
    graph = str(jitted.cache_entries()[0].graph)
    assert 'TimeMajorItems' in graph and 'TransposeSequence' not in graph, \
        graph
    assert len(jitted.cache_entries()) == 2, jitted.cache_report()


def test_sentences_not_sorted_are_refused_as_eagerly():
    # Chainer's F.transpose_sequence refuses them; so does the program
    # that serves sorted ones, which then leaves the call to eager, whose
    # error the caller gets.
    model = _FunctionalGRU()
    jitted = chainerjit.jit(model.forward)
    calls = _sorted_batches(numpy.random.RandomState(5), ((3, 6), (4, 8)))
    assert len(calls[-1][0][0]) > len(calls[-1][0][1])
    xs, t = calls[-1]
    xs = [xs[1], xs[0]] + xs[2:]  # (the lengths checked, out of order)
    with chainer.using_config('train', False):
        for args in calls:
            jitted(*args)
        with pytest.raises(chainer.utils.type_check.InvalidType):
            model.forward(xs, t)
        with pytest.raises(chainer.utils.type_check.InvalidType) as error:
            jitted(xs, t)
        assert 'sorted by decreasing length' in str(error.value.__context__)
