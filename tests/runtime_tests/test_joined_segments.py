"""Sentences joined, then cut at their offsets into a recurrent link, as
Chainer's examples embed them (``sequence_embed``: ``F.concat(xs,
axis=0)``, then ``F.split_axis`` at ``numpy.cumsum`` of their lengths into
``L.NStepLSTM``): the list is joined at the call into its words and their
lengths, and the link takes them packed (``ops.nstep.PackedNStepRNN``),
so that one entry per mode serves any number and lengths of sentences,
with values and gradients equal to eager's; where the forward reads a
part or a length otherwise, the number of sentences stays in the key,
with a warning that says why."""

import copy
import itertools
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from benchmarks.bench_programs import sequence_embed
from tests.runtime_tests.test_joined_lists import \
    checked_without_recompiling
from tests.runtime_tests.test_joined_lists import reported_step
from tests.runtime_tests import test_ragged_lists
from tests import differential

I32 = numpy.int32

_COUNTS = (4, 4, 7, 2, 9, 3, 12, 5)


def _batches(rng, counts, low=1, high=10):
    """Sentences and their labels (one array), ``counts`` of them call by
    call."""
    return [([rng.randint(0, 30, int(rng.randint(low, high))).astype(I32)
              for _ in range(n)], rng.randint(0, 3, n).astype(I32))
            for n in counts]


class _Encoder(chainer.Chain):
    """The example's RNN text classifier, with any stacked RNN link."""

    def __init__(self, link=None, n_states=2, dropout=0.3):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.encoder = link or L.NStepLSTM(2, 6, 5, dropout)
            self.out = L.Linear(None, 3)
        self.n_states = n_states  # hx, and cx for an LSTM
        self.dropout = dropout

    def forward(self, xs, t):
        exs = sequence_embed(self.embed, xs, self.dropout)
        hy = self.encoder(*[None] * self.n_states, exs)[0]
        h = F.dropout(hy[-1], ratio=self.dropout)
        return F.softmax_cross_entropy(self.out(h), t)


_LINKS = {
    'lstm': (lambda: L.NStepLSTM(2, 6, 5, 0.3), 2),
    'bilstm': (lambda: L.NStepBiLSTM(1, 6, 5, 0.0), 2),
    'gru': (lambda: L.NStepGRU(2, 6, 5, 0.0), 1),
    'birnn_tanh': (lambda: L.NStepBiRNNTanh(1, 6, 5, 0.0), 1),
}


def _encoder(name):
    make, n_states = _LINKS[name]
    numpy.random.seed(0)
    return _Encoder(make(), n_states)


class _LanguageModel(chainer.Chain):
    """Each sentence's words but its last in, its words but its first
    predicted: the items cut at their ends, then embedded joined."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.rnn = L.NStepLSTM(1, 6, 5, 0.0)
            self.out = L.Linear(5, 30)

    def forward(self, xs):
        inputs = [x[:-1] for x in xs]
        targets = [x[1:] for x in xs]
        _, _, hs = self.rnn(None, None, sequence_embed(self.embed, inputs,
                                                       0.0))
        return F.softmax_cross_entropy(self.out(F.concat(hs, axis=0)),
                                       F.concat(targets, axis=0))


def test_sentences_cut_at_their_ends_are_joined():
    # A batch of one sentence is served by the entry of joined ones too.
    rng = numpy.random.RandomState(5)
    calls = [(xs,) for xs, _ in _batches(rng, (4, 4, 7, 1, 3, 1, 9, 5),
                                         low=2)]
    jitted = differential.check_seeded(_LanguageModel(), calls)
    joined = [e for e in jitted.cache_entries()
              if str(e.signature).startswith('xs[0]: i32[W]')]
    assert len(joined) == 1, jitted.cache_report()
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()


class _ZeroStates(_Encoder):
    """The first states given as zeros the forward makes for the batch
    (``xp.zeros((n_layers, len(xs), units))``), as the link makes them
    for ``None``."""

    def forward(self, xs, t):
        exs = sequence_embed(self.embed, xs, self.dropout)
        zeros = self.xp.zeros((2, len(xs), 5), numpy.float32)
        hy = self.encoder(*[zeros] * self.n_states, exs)[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


@pytest.mark.parametrize('train', [True, False])
def test_first_states_made_of_zeros_are_joined(train):
    jitted = checked_without_recompiling(
        lambda: _ZeroStates(L.NStepLSTM(2, 6, 5, 0.0), 2, 0.0),
        _batches(numpy.random.RandomState(7), _COUNTS), train)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]'), entry.signature


class _OverFeatures(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.encoder = L.NStepGRU(1, 4, 3, 0.0)

    def forward(self, xs):
        return self.encoder(None, xs)[0][-1]


def test_a_list_of_variables_says_it_compiles_again(monkeypatch):
    monkeypatch.setattr(errors, '_warned', set())  # (warned once a name)
    # (features an upstream network computed: gradients reach them, so
    # the list is recorded item by item, with a word)
    model = _OverFeatures()
    rng = numpy.random.RandomState(8)
    calls = [[rng.randn(n, 4).astype(numpy.float32) for n in lengths]
             for lengths in ((3, 2), (3, 2), (5, 4, 1), (2, 2, 2, 6))]
    with pytest.warns(errors.RecompileWarning,
                      match='the list argument xs holds Variables'):
        differential.check_grads(model.forward, [(xs,) for xs in calls])


class _LengthsTwice(_Encoder):
    """The list of the sentences' lengths made once and read twice: into
    the offsets of the cut, and into an array."""

    def forward(self, xs, t):
        x_len = [len(x) for x in xs]
        exs = F.split_axis(self.embed(F.concat(xs, axis=0)),
                           numpy.cumsum(x_len[:-1]), 0)
        hy = self.encoder(*[None] * self.n_states, exs)[0]
        scale = self.xp.array(x_len, numpy.float32)[:, None]
        return F.softmax_cross_entropy(self.out(hy[-1] * scale), t)


class _OffsetsCutAfter(_Encoder):
    """The offsets of the cut as the cumulative sums of all the lengths
    less the last (``numpy.cumsum(x_len)[:-1]``)."""

    def forward(self, xs, t):
        x_len = [len(x) for x in xs]
        exs = F.split_axis(self.embed(F.concat(xs, axis=0)),
                           numpy.cumsum(x_len)[:-1], 0)
        hy = self.encoder(*[None] * self.n_states, exs)[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


@pytest.mark.parametrize('cls, seed', [(_LengthsTwice, 6),
                                       (_OffsetsCutAfter, 7)])
def test_lengths_read_into_offsets_otherwise_are_joined(cls, seed):
    jitted = checked_without_recompiling(
        lambda: cls(L.NStepGRU(1, 6, 5, 0.0), 1),
        _batches(numpy.random.RandomState(seed), _COUNTS), True)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]'), entry.signature


def _listed_offsets(xs):
    return numpy.cumsum([len(x) for x in xs])[:-1].tolist()


def _listed_offsets_of_all_but_the_last(xs):
    return numpy.cumsum([len(x) for x in xs[:-1]]).tolist()


def _offsets_converted(xs):
    return numpy.cumsum([len(x) for x in xs[:-1]]).astype(numpy.int32)


def _offsets_of_a_type(xs):
    return numpy.cumsum([len(x) for x in xs], dtype=numpy.int32)[:-1]


def _iterated_offsets(xs):
    x_len = [len(x) for x in xs]
    return list(numpy.cumsum(x_len[:-1]))


def _accumulated_offsets(xs):
    return list(itertools.accumulate(len(x) for x in xs[:-1]))


def _all_accumulated(xs):
    x_len = [len(x) for x in xs]
    return tuple(itertools.accumulate(x_len))[:-1]


def _summed_in_a_loop(xs):
    offsets, total = [], 0
    for x in xs[:-1]:
        total += len(x)
        offsets.append(total)
    return offsets


def _offsets_of_an_array(xs):
    x_len = numpy.array([len(x) for x in xs], numpy.int32)
    return numpy.cumsum(x_len)[:-1]


class _CutAt(_Encoder):
    """The sentences cut at the offsets ``sections`` gives of them."""

    def __init__(self, sections):
        super().__init__(L.NStepGRU(1, 6, 5, 0.0), 1)
        self.sections = sections

    def forward(self, xs, t):
        exs = F.split_axis(self.embed(F.concat(xs, axis=0)),
                           self.sections(xs), 0)
        hy = self.encoder(None, exs)[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


@pytest.mark.parametrize('sections', [
    _listed_offsets, _listed_offsets_of_all_but_the_last,
    _offsets_converted, _offsets_of_a_type, _iterated_offsets,
    _accumulated_offsets, _all_accumulated, _summed_in_a_loop,
    _offsets_of_an_array])
@pytest.mark.parametrize('train', [False, True])
def test_offsets_as_python_ints_or_of_an_array_are_joined(sections, train):
    # (.tolist() of the offsets, running sums of the lengths, an array of
    # the lengths: each call's offsets, made of its lengths)
    calls = _batches(numpy.random.RandomState(9), (4, 2, 7, 3, 9, 2, 5))
    jitted = checked_without_recompiling(lambda: _CutAt(sections), calls,
                                         train)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]'), entry.signature


def _offsets_written(xs):
    offsets = numpy.cumsum([len(x) for x in xs])[:-1]
    offsets[0] = 1  # (the first part: one word)
    return offsets


def _offsets_written_before_the_cut(xs):
    offsets = numpy.cumsum([len(x) for x in xs])
    offsets[0] = 1
    return offsets[:-1]


def _offsets_listed_and_written(xs):
    offsets = numpy.cumsum([len(x) for x in xs])[:-1].tolist()
    offsets[0] = 1
    return offsets


def _agrees(model, calls, train):
    """``jit(model.forward)`` gives eager's results over ``calls``, in
    training (losses, gradients) or in inference, whatever it warns."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        if train:
            return differential.check_seeded(model, calls)
        jitted = chainerjit.jit(model.forward)
        with chainer.no_backprop_mode(), \
                chainer.using_config('train', False):
            for args in calls:
                testing.assert_results_equal(jitted(*args),
                                             model.forward(*args))
    return jitted


@pytest.mark.parametrize('sections', [
    _offsets_written, _offsets_written_before_the_cut,
    _offsets_listed_and_written])
@pytest.mark.parametrize('train', [False, True])
def test_offsets_written_into_are_cut_at_as_written(sections, train):
    calls = _batches(numpy.random.RandomState(3), (2, 3, 3, 4, 3, 5))
    _agrees(_CutAt(sections), calls, train)


@pytest.mark.parametrize('train', [False, True])
def test_offsets_of_an_array_of_lengths_alike_or_not(train):
    # (sentences of one length are stacked, not joined)
    rng = numpy.random.RandomState(4)
    calls = [_batches(rng, (count,), low, low + 1 + spread)[0]
             for count, low, spread in ((2, 3, 4), (3, 5, 0), (4, 1, 8),
                                        (3, 5, 0), (2, 2, 0), (5, 1, 8))]
    _agrees(_CutAt(_offsets_of_an_array), calls, train)


class _SumsReadOtherwise(_Encoder):
    """The running sums of the lengths cut at, and the last compared."""

    def forward(self, xs, t):
        sections = list(itertools.accumulate(len(x) for x in xs[:-1]))
        h = self.embed(F.concat(xs, axis=0))
        if sections[-1] > 12:
            h = h * 2
        hy = self.encoder(*[None] * self.n_states,
                          F.split_axis(h, sections, 0))[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


class _SumsOfOtherLengths(_Encoder):
    """The sentences cut one word later: sums of lengths, not the offsets
    of the sentences."""

    def forward(self, xs, t):
        sections = itertools.accumulate(len(x) for x in xs[:-1])
        h = self.embed(F.concat(xs, axis=0))
        hy = self.encoder(*[None] * self.n_states, F.split_axis(
            h, [n + 1 for n in sections], 0))[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


class _CountedWhileSummed(_Encoder):
    """The offsets summed in a loop that counts the sentences too."""

    def forward(self, xs, t):
        offsets, total, n = [], 0, 1
        for x in xs[:-1]:
            total += len(x)
            offsets.append(total)
            n += 1
        h = self.embed(F.concat(xs, axis=0))
        hy = self.encoder(*[None] * self.n_states,
                          F.split_axis(h, offsets, 0))[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t) * n


class _LengthsAsSections(_Encoder):
    """The sentences cut at their lengths, not at their offsets."""

    def forward(self, xs, t):
        h = self.embed(F.concat(xs, axis=0))
        hy = self.encoder(*[None] * self.n_states, F.split_axis(
            h, [len(x) for x in xs[:-1]], 0))[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


@pytest.mark.parametrize('cls, why', [
    (_SumsReadOtherwise, 'compared at test_joined_segments'),
    (_SumsOfOtherLengths, 'reads the length of an item'),
    (_LengthsAsSections, 'reads the length of an item'),
    (_CountedWhileSummed, 'read by slicing the list')])
def test_sums_of_lengths_read_otherwise_keep_the_count_in_the_key(cls, why):
    # (sentences longer one after the other: each length a valid offset)
    rng = numpy.random.RandomState(5)
    calls = [([numpy.arange(n, dtype=I32) % 30 for n in sorted(
        rng.choice(range(2, 12), count, replace=False))],
        rng.randint(0, 3, count).astype(I32)) for count in (3, 3, 4, 2, 5)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        differential.check_seeded(cls(L.NStepGRU(1, 6, 5, 0.0), 1), calls)
    assert any('number of items' in str(w.message) and
               why in str(w.message) for w in caught), \
        [str(w.message) for w in caught]


@pytest.mark.parametrize('name', sorted(_LINKS))
def test_rnn_classifier_trains_at_any_count_and_lengths(name):
    calls = _batches(numpy.random.RandomState(1), _COUNTS + _COUNTS[2:5])
    jitted = checked_without_recompiling(lambda: _encoder(name), calls,
                                         True)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array), '
        't: i32[B]@cpu (array)'), entry.signature
    assert entry.training is not None
    assert jitted.cache_info().compiled >= 2  # (new sizes check eagerly)


def test_the_program_holds_one_packed_link_call():
    model = _encoder('lstm')
    jitted = chainerjit.jit(model.forward)
    with chainer.using_config('train', False):
        for xs, t in _batches(numpy.random.RandomState(2), (3, 5)):
            jitted(xs, t)
    graph = str(jitted.cache_entries()[0].graph)
    assert 'PackedNStepRNN[cell=lstm' in graph, graph
    for gone in ('Concat', 'SplitAxis', '= NStepRNN', 'python.offsets'):
        assert gone not in graph, graph


def test_serving_batches_of_one_to_many_sentences():
    model = _encoder('gru')
    jitted = chainerjit.jit(model.forward)
    calls = _batches(numpy.random.RandomState(3), (1, 2, 17, 1, 5, 40, 3))
    with chainer.no_backprop_mode(), chainer.using_config('train', False):
        for xs, t in calls:
            testing.assert_results_equal(jitted(xs, t), model.forward(xs, t))
    # the single sentence recorded first is served by the entry of every
    # count once there is one
    assert [str(e.signature)[:40] for e in jitted.cache_entries()] == \
        ['xs[0]: i32[W]@cpu (array), xs[1]: i64[B]'], jitted.cache_report()


@pytest.mark.parametrize('train', [False, True])
def test_a_batch_of_one_sentence_seen_second_keeps_one_entry(train):
    # The single sentence, recorded with its widths open and its batch
    # fixed, is served by the entry of every count that follows.
    calls = _batches(numpy.random.RandomState(4), (3, 1, 4, 1, 2, 1))
    jitted = checked_without_recompiling(lambda: _encoder('lstm'), calls,
                                         train)
    assert [str(e.signature)[:40] for e in jitted.cache_entries()] == \
        ['xs[0]: i32[W]@cpu (array), xs[1]: i64[B]'], jitted.cache_report()


@settings(deadline=None, max_examples=10)
@given(st.sampled_from(sorted(_LINKS)),
       st.lists(st.lists(st.integers(1, 9), min_size=2, max_size=9),
                min_size=3, max_size=5),
       st.booleans(), st.integers(0, 2 ** 16))
def test_any_counts_and_lengths_in_training_or_inference(
        name, batches, train, seed):
    """Batches of random counts and lengths through the RNN classifiers, in
    training (losses, gradients, dropout's draws) or in inference: eager's
    results, one entry."""
    rng = numpy.random.RandomState(seed)
    calls = [([rng.randint(0, 30, n).astype(I32) for n in lengths],
              rng.randint(0, 3, len(lengths)).astype(I32))
             for lengths in batches]
    jitted = checked_without_recompiling(lambda: _encoder(name), calls,
                                         train)
    assert len(jitted.cache_entries()) == 1


class _Tagger(_Encoder):
    """A tag for each word: the link's output sequences joined
    (``F.concat(ys, axis=0)``), scored against the tags joined."""

    def __init__(self):
        super().__init__(L.NStepBiLSTM(2, 6, 5, 0.2))

    def forward(self, xs, ts):
        exs = sequence_embed(self.embed, xs, self.dropout)
        _, _, ys = self.encoder(None, None, exs)
        h = self.out(F.concat(ys, axis=0))
        return F.softmax_cross_entropy(h, F.concat(ts, axis=0))


def test_tagger_trains_at_any_count_and_lengths():
    # The tags, concatenated, are joined too: their lengths are the
    # words', one W for both.
    rng = numpy.random.RandomState(6)
    calls = []
    for n in _COUNTS:
        lengths = rng.randint(1, 10, n)
        calls.append(([rng.randint(0, 30, k).astype(I32) for k in lengths],
                      [rng.randint(0, 3, k).astype(I32) for k in lengths]))
    numpy.random.seed(0)
    jitted = checked_without_recompiling(_Tagger, calls, True)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array), '
        'ts[0]: i32[W]@cpu (array), ts[1]: i64[B]@cpu (array)'), \
        entry.signature
    assert 'Concat' not in str(entry.graph)


class _DecoderOverPaddedTargets(_Encoder):
    """Sentences joined into an N-step encoder, and a decoder loop over
    the steps of padded targets (``-1`` past each target's end): the
    batch, the source words and the target steps all change."""

    def __init__(self):
        super().__init__(L.NStepLSTM(1, 6, 5, 0.0))
        del self.out  # (the classifier's)
        with self.init_scope():
            self.decoder = L.LSTM(6 + 5, 5)
            self.target = L.EmbedID(30, 6, ignore_label=-1)
            self.words = L.Linear(5, 30)

    def forward(self, xs, ys):
        hy = self.encoder(None, None, sequence_embed(self.embed, xs))[0]
        self.decoder.reset_state()
        h, loss = hy[-1], 0
        for y in F.separate(ys, axis=1):
            h = self.stepped(self.decoder(F.concat((self.target(y), h),
                                                   axis=1)))
            loss += F.softmax_cross_entropy(self.words(h), y,
                                            ignore_label=-1)
        return loss

    def stepped(self, h):
        """The decoder's output at a step, as the loop carries it."""
        return h


class _AttentionDecoder(_DecoderOverPaddedTargets):
    """Luong attention: the encoder's outputs padded into a block
    (``F.pad_sequence`` of the link's output sequences), each decoder
    step scoring them and reading their weighted sum."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.query = L.Linear(5, 5)

    def forward(self, xs, ys):
        hy, _, enc = self.encoder(None, None,
                                  sequence_embed(self.embed, xs))
        enc = F.pad_sequence(enc)  # (B, S, 5), zeros past each sentence
        self.decoder.reset_state()
        context, loss = hy[-1], 0
        for y in F.separate(ys, axis=1):
            h = self.decoder(F.concat((self.target(y), context), axis=1))
            scores = F.matmul(enc, F.expand_dims(self.query(h), 2))
            weights = F.softmax(scores, axis=1)  # (B, S, 1)
            context = F.sum(enc * F.broadcast_to(weights, enc.shape),
                            axis=1)
            loss += F.softmax_cross_entropy(self.words(h + context), y,
                                            ignore_label=-1)
        return loss


class _FilledInTheLoop(_DecoderOverPaddedTargets):
    """An array made of a step's shape in the decoder loop
    (``xp.full(h.shape, 0.5)``): made again at each step, the loop
    rolls."""

    def stepped(self, h):
        return F.where(h.array > 0, h, self.xp.full(h.shape, 0.5, h.dtype))


def _encoded_and_valid(model, xs):
    """``(hy, enc, valid)``: the encoder's last states, its outputs
    padded into a block, and which of the block's positions each
    sentence has (``xp.arange(enc.shape[1]) < lengths[:, None]``, the
    width read in Python), as attention models mask them."""
    hy, _, enc = model.encoder(None, None, sequence_embed(model.embed, xs))
    enc = F.pad_sequence(enc)
    lengths = model.xp.array([len(x) for x in xs])
    return hy, enc, model.xp.arange(enc.shape[1])[None, :] < \
        lengths[:, None]


class _MaskedAttentionDecoder(_AttentionDecoder):
    """The attention masked past each sentence's end: a mask of the
    padded block's positions (``xp.arange(enc.shape[1])``, the width
    read in Python) against the sentences' lengths, and ``F.where`` with
    ``xp.full(scores.shape, -1e9)``, as attention models write it."""

    def forward(self, xs, ys):
        hy, enc, valid = _encoded_and_valid(self, xs)
        xp = self.xp
        self.decoder.reset_state()
        context, loss = hy[-1], 0
        for y in F.separate(ys, axis=1):
            h = self.decoder(F.concat((self.target(y), context), axis=1))
            scores = F.matmul(enc, F.expand_dims(self.query(h), 2))
            scores = F.where(valid[:, :, None], scores,
                             xp.full(scores.shape, -1e9, scores.dtype))
            weights = F.softmax(scores, axis=1)
            context = F.sum(enc * F.broadcast_to(weights, enc.shape),
                            axis=1)
            loss += F.softmax_cross_entropy(self.words(h + context), y,
                                            ignore_label=-1)
        return loss


def _source_and_targets(rng, shapes):
    """Sentences and padded targets (``-1`` past each end), ``(count,
    target steps)`` call by call."""
    calls = []
    for count, steps in shapes:
        ys = rng.randint(0, 30, (count, steps)).astype(I32)
        for row, end in zip(ys, rng.randint(1, steps + 1, count)):
            row[end:] = -1
        calls.append(([rng.randint(0, 30, int(n)).astype(I32)
                       for n in rng.randint(1, 9, count)], ys))
    return calls


_SHAPES = [(3, 4), (3, 6), (5, 6), (2, 3), (6, 8), (4, 5)]


@pytest.mark.parametrize('train', [True, False])
def test_a_row_beyond_a_short_sequence_raises_as_eagerly(train):
    """``y[-2]`` of a sequence of one row raises IndexError, eagerly and
    from the program serving every count and length; and does not
    export (ONNX's Gather would read another sequence's row)."""
    rng = numpy.random.RandomState(17)
    calls = [([rng.standard_normal((int(rng.randint(2, 9)), 4)).astype(
        numpy.float32) for _ in range(n)],) for n in _COUNTS]
    jitted = checked_without_recompiling(
        lambda: _FeatureSequences(_READS['second last']), calls, train)
    graph = str(jitted.cache_entries()[0].graph)
    assert 'ReduceSegments[kind=row -2]' in graph, graph
    short = [rng.standard_normal((n, 4)).astype(numpy.float32)
             for n in (3, 1, 4)]
    with chainer.using_config('train', train), pytest.raises(IndexError):
        jitted(short)
    with pytest.raises(chainerjit.errors.ExportError,
                       match='ReduceSegments'):
        chainerjit.export_onnx(jitted, (calls[0][0],))


def _one_joined_entry(make, calls, train, rest):
    """The one entry of ``make()``'s forward checked against eager over
    ``calls`` with no recompile (``checked_without_recompiling``), whose
    signature is the words and lengths of ``xs`` joined, then ``rest``."""
    numpy.random.seed(0)
    jitted = checked_without_recompiling(make, calls, train)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array), ' + rest), \
        entry.signature
    return entry


@pytest.mark.parametrize('cls', [_DecoderOverPaddedTargets,
                                 _AttentionDecoder, _FilledInTheLoop,
                                 _MaskedAttentionDecoder])
@pytest.mark.parametrize('train', [True, False])
def test_a_decoder_over_padded_targets_serves_every_shape(cls, train):
    # A new target length and a new batch with new words at once: each
    # checked against eager, the trip counts and the sizes apart.
    _one_joined_entry(cls, _source_and_targets(
        numpy.random.RandomState(9), _SHAPES), train, 'ys: i32[B,T]')


def test_the_encoders_outputs_are_padded_by_one_node():
    model = _AttentionDecoder()
    jitted = chainerjit.jit(model.forward)
    with chainer.using_config('train', False):
        for xs, ys in _source_and_targets(numpy.random.RandomState(4),
                                          _SHAPES[:3]):
            jitted(xs, ys)
    graph = str(jitted.cache_entries()[0].graph)
    assert 'PadSegments[length=None, padding=0]' in graph, graph
    assert 'SplitAxis' not in graph and 'PadSequence' not in graph, graph


class _Pooled(_Encoder):
    """Max or mean pooling over each sentence's words: a reduction of
    each of an N-step link's output sequences, stacked."""

    def __init__(self, pool):
        super().__init__(L.NStepBiLSTM(1, 6, 5, 0.0))
        self.pool = pool

    def forward(self, xs, t):
        _, _, ys = self.encoder(None, None, sequence_embed(self.embed, xs))
        h = F.stack([self.pool(y, axis=0) for y in ys])
        return F.softmax_cross_entropy(self.out(h), t)


_POOLS = {'max': F.max, 'min': F.min, 'sum': F.sum, 'mean': F.mean,
          'average': F.average}


def _classifier_graph(make, seed, train):
    """The printed graph of the one joined entry of the classifier
    ``make()`` trained, or run, on batches of :data:`_COUNTS` sentences."""
    return str(_one_joined_entry(
        make, _batches(numpy.random.RandomState(seed), _COUNTS), train,
        't: i32[B]').graph)


@pytest.mark.parametrize('pool', sorted(_POOLS))
@pytest.mark.parametrize('train', [True, False])
def test_pooling_over_the_words_serves_every_count_and_length(pool, train):
    graph = _classifier_graph(lambda: _Pooled(_POOLS[pool]), 12, train)
    assert 'ReduceSegments' in graph and 'SplitAxis' not in graph, graph


class _DividedByItsSentence(_Encoder):
    """Mean pooling written by hand: each output sequence summed over its
    words, divided by the length of the sentence it was made of, read
    there or (``listed``) from a list of the lengths."""

    def __init__(self, listed=False):
        super().__init__(L.NStepGRU(1, 6, 5, 0.0), 1)
        self.listed = listed

    def forward(self, xs, t):
        ys = self.encoder(None, sequence_embed(self.embed, xs))[1]
        if self.listed:
            x_len = [len(x) for x in xs]
            h = F.stack([F.sum(y, axis=0) / n for y, n in zip(ys, x_len)])
        else:
            h = F.stack([F.sum(y, axis=0) / len(x)
                         for y, x in zip(ys, xs)])
        return F.softmax_cross_entropy(self.out(h), t)


@pytest.mark.parametrize('listed', [False, True])
@pytest.mark.parametrize('train', [True, False])
def test_sums_divided_by_their_sentences_lengths_are_means(listed, train):
    graph = _classifier_graph(lambda: _DividedByItsSentence(listed), 13,
                              train)
    assert 'ReduceSegments' in graph and 'SplitAxis' not in graph, graph


class _PooledEmbeddings(_Encoder):
    """Each sentence's words embedded, pooled over the words (a bag of
    embeddings, max or mean), the pools stacked; or (``apart``) the
    pools read on their own, which keeps the number of sentences in the
    key."""

    def __init__(self, pool, apart=False):
        super().__init__()
        self.pool, self.apart = pool, apart

    def forward(self, xs, t):
        pools = [self.pool(F.tanh(self.embed(x)), axis=0) for x in xs]
        h = F.stack(pools) if not self.apart else \
            F.stack([p * (k + 1) for k, p in enumerate(pools)])
        return F.softmax_cross_entropy(self.out(h), t)


@pytest.mark.parametrize('pool', ['max', 'mean'])
@pytest.mark.parametrize('train', [True, False])
def test_pooled_embeddings_serve_every_count_and_length(pool, train):
    entry = _one_joined_entry(
        lambda: _PooledEmbeddings(_POOLS[pool]),
        _batches(numpy.random.RandomState(13), _COUNTS), train, 't: i32[B]')
    assert 'ReduceSegments' in str(entry.graph), entry.graph


def test_pools_read_on_their_own_keep_the_count():
    numpy.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.RecompileWarning)
        warnings.simplefilter('ignore', errors.LoopWarning)
        jitted = differential.check_seeded(
            _PooledEmbeddings(F.max, apart=True),
            _batches(numpy.random.RandomState(14), (3, 3, 5, 3)))
    assert all('xs[0]: i32[W]' not in str(e.signature)
               for e in jitted.cache_entries()), jitted.cache_report()


class _PooledScores(_Pooled):
    def forward(self, xs):
        _, _, ys = self.encoder(None, None, sequence_embed(self.embed, xs))
        return self.out(F.stack([self.pool(y, axis=0) for y in ys]))


class _MaskedAttentionPool(_Encoder):
    """Attention pooling of the encoder's padded outputs, masked past
    each sentence's end by the lengths read in Python
    (``xp.arange(enc.shape[1]) < lengths[:, None]``, ``F.where`` with
    ``xp.full``), then the classifier; ``scores`` returns the logits."""

    def __init__(self, scores=False):
        super().__init__(L.NStepLSTM(1, 6, 5, 0.0), dropout=0.0)
        with self.init_scope():
            self.query = L.Linear(5, 5)
        self.scores = scores

    def forward(self, xs, t=None):
        hy, enc, valid = _encoded_and_valid(self, xs)
        xp = self.xp
        scores = F.matmul(enc, F.expand_dims(self.query(hy[-1]), 2))
        scores = F.where(valid[:, :, None], scores,
                         xp.full(scores.shape, -1e9, scores.dtype))
        weights = F.broadcast_to(F.softmax(scores, axis=1), enc.shape)
        logits = self.out(F.sum(enc * weights, axis=1))
        return logits if self.scores else F.softmax_cross_entropy(logits, t)


@pytest.mark.parametrize('train', [True, False])
def test_masked_attention_pooling_serves_every_count_and_length(train):
    entry = _one_joined_entry(_MaskedAttentionPool, _batches(
        numpy.random.RandomState(18), _COUNTS), train, 't: i32[B]')
    graph = str(entry.graph)
    assert 'numpy.arange[fill=arange, shape=like its input]' in graph, graph


def test_exported_masked_attention_runs_at_other_counts_and_lengths():
    _exported_runs_at_other_counts(
        lambda: _MaskedAttentionPool(scores=True),
        [(xs,) for xs, _ in _batches(numpy.random.RandomState(19),
                                     (3, 4, 6, 2, 9))])


class _PositionRead(_Encoder):
    """One position of the encoder's padded outputs read for every
    sentence (``enc[:, 0]``, the first word's; ``enc[:, -1]``, the
    block's last, zeros past a shorter sentence's end, as eagerly)."""

    def __init__(self, position=0, scores=False):
        super().__init__(L.NStepLSTM(1, 6, 5, 0.0), dropout=0.0)
        self.position, self.scores = position, scores

    def forward(self, xs, t=None):
        hy, _, enc = self.encoder(None, None,
                                  sequence_embed(self.embed, xs))
        enc = F.pad_sequence(enc)
        logits = self.out(enc[:, self.position] + hy[-1])
        return logits if self.scores else F.softmax_cross_entropy(logits, t)


@pytest.mark.parametrize('position', [0, -1])
@pytest.mark.parametrize('train', [True, False])
def test_a_position_of_the_padded_outputs_serves_every_shape(position,
                                                             train):
    _one_joined_entry(lambda: _PositionRead(position), _batches(
        numpy.random.RandomState(20), _COUNTS), train, 't: i32[B]')


def test_exported_position_read_runs_at_other_counts_and_lengths():
    _exported_runs_at_other_counts(
        lambda: _PositionRead(-1, scores=True),
        [(xs,) for xs, _ in _batches(numpy.random.RandomState(21),
                                     (3, 4, 6, 2, 9))])


_ENDS_AS_POOLS = {'first': lambda y, axis: y[0],
                  'last': lambda y, axis: y[-1]}


@pytest.mark.parametrize('pool', sorted(_POOLS) + sorted(_ENDS_AS_POOLS))
def test_exported_pooling_runs_at_other_counts_and_lengths(pool):
    _exported_runs_at_other_counts(
        lambda: _PooledScores(dict(_POOLS, **_ENDS_AS_POOLS)[pool]),
        [(xs,) for xs, _ in _batches(numpy.random.RandomState(17),
                                     (3, 4, 6, 2, 9))])


class _OutputEnds(_Encoder):
    """Each output sequence's last (or first) row, stacked, or kept as a
    row and concatenated: each sentence's state at its end (a
    bidirectional link's backward direction ends at the first word)."""

    def __init__(self, end):
        super().__init__(L.NStepBiLSTM(1, 6, 5, 0.0))
        self.end = end

    def forward(self, xs, t):
        _, _, ys = self.encoder(None, None, sequence_embed(self.embed, xs))
        return F.softmax_cross_entropy(self.out(self.end(ys)), t)


_ENDS = {'last': lambda ys: F.stack([y[-1] for y in ys]),
         'last, reversed': lambda ys: F.stack([y[-1] for y in ys[::-1]]),
         'first': lambda ys: F.stack([y[0] for y in ys]),
         'last row': lambda ys: F.concat([y[-1:] for y in ys], axis=0),
         'first row': lambda ys: F.concat([y[:1] for y in ys], axis=0)}


@pytest.mark.parametrize('end', sorted(_ENDS))
@pytest.mark.parametrize('train', [True, False])
def test_each_sequences_end_serves_every_count_and_length(end, train):
    graph = _classifier_graph(lambda: _OutputEnds(_ENDS[end]), 15, train)
    assert 'ReduceSegments' in graph and 'GetItem' not in graph, graph


class _FeatureSequences(chainer.Chain):
    """Sequences of features (not word ids) straight into the link, its
    outputs read by ``read``, into a loss."""

    def __init__(self, read):
        super().__init__()
        with self.init_scope():
            self.encoder = L.NStepLSTM(1, 4, 5, 0.0)
            self.out = L.Linear(5, 3)
        self.read = read

    def forward(self, xs):
        _, _, ys = self.encoder(None, None, xs)
        return F.sum(self.read(self, ys) ** 2)


_READS = {
    'padded': lambda model, ys: F.sum(F.pad_sequence(ys), axis=1),
    'last': lambda model, ys: model.out(F.stack([y[-1] for y in ys])),
    # (the first row weighed more: the order of the rows matters)
    'first row, reversed': lambda model, ys: _first_weighed(model.out(
        F.concat([y[:1] for y in reversed(ys)], axis=0))),
    'max': lambda model, ys: model.out(
        F.stack([F.max(y, axis=0) for y in ys])),
    'mean row': lambda model, ys: F.concat(
        [F.mean(y, axis=0, keepdims=True) for y in ys], axis=0),
    'second last': lambda model, ys: model.out(F.stack([y[-2] for y in ys])),
    'second': lambda model, ys: model.out(F.stack([y[1] for y in ys])),
    # both: the rows padded (for attention) and each sequence's last row
    'padded and last': lambda model, ys: F.sum(
        F.pad_sequence(ys), axis=1) * model.out(F.stack([
            y[-1] for y in ys]))[:, :1]}


def _first_weighed(rows):
    return rows[0] * 3 + F.sum(rows, axis=0)


@pytest.mark.parametrize('read', sorted(_READS))
@pytest.mark.parametrize('train', [True, False])
def test_feature_sequences_serve_every_count_and_length(read, train):
    rng = numpy.random.RandomState(16)
    calls = [([rng.standard_normal((int(rng.randint(2, 9)), 4)).astype(
        numpy.float32) for _ in range(n)],) for n in _COUNTS]
    numpy.random.seed(0)
    jitted = checked_without_recompiling(
        lambda: _FeatureSequences(_READS[read]), calls, train)
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()


class _Pair(_Encoder):
    """Two sentences a pair (premise, hypothesis), each list encoded by
    one link: two widths (``W``, ``W2``)."""

    def __init__(self):
        super().__init__(L.NStepGRU(1, 6, 5, 0.0), 1)

    def forward(self, ps, hs, t):
        hp = self.encoder(None, sequence_embed(self.embed, ps, 0.1))[0]
        hh = self.encoder(None, sequence_embed(self.embed, hs, 0.1))[0]
        h = F.concat([hp[-1], hh[-1]], axis=1)
        return F.softmax_cross_entropy(self.out(h), t)


class _Seq2seq(test_ragged_lists._Seq2seq):
    """An encoder and a decoder over lists, as Chainer's seq2seq example,
    its targets given with and without the end-of-sentence id (the
    example makes them item by item, which keeps the count in the key)."""

    def __init__(self):
        super().__init__(2, 0.1)

    def forward(self, xs, ys_in, ys_out):
        exs = sequence_embed(self.embed_x, xs)
        eys = sequence_embed(self.embed_y, ys_in)
        batch = len(xs)
        hx, cx, _ = self.encoder(None, None, exs)
        _, _, os = self.decoder(hx, cx, eys)
        loss = F.sum(F.softmax_cross_entropy(
            self.W(F.concat(os, axis=0)), F.concat(ys_out, axis=0),
            reduce='no')) / batch
        return loss


class _TargetsEmbeddedAndScored(test_ragged_lists._Seq2seq):
    """An encoder and a decoder, the targets both embedded word by word
    into the decoder and scored whole (``F.concat(ys, axis=0)``)."""

    def __init__(self):
        super().__init__(1, 0.0)

    def forward(self, xs, ys, t):
        hx, cx, _ = self.encoder(None, None, [self.embed_x(x) for x in xs])
        _, _, os = self.decoder(hx, cx, [self.embed_y(y) for y in ys])
        return F.softmax_cross_entropy(self.W(F.concat(os, axis=0)),
                                       F.concat(ys, axis=0))


def _pairs(rng, with_targets):
    """Calls of two lists of sentences of their own lengths (and labels,
    or the second list again, shifted, as targets)."""
    calls = []
    for n in _COUNTS + (6, 3, 8, 4):  # (checks at new sizes of 3 axes)
        xs = [rng.randint(0, 30, k).astype(I32)
              for k in rng.randint(1, 10, n)]
        ys = [rng.randint(1, 30, k).astype(I32)
              for k in rng.randint(1, 10, n)]
        calls.append((xs, [numpy.insert(y, 0, 0) for y in ys],
                      [numpy.append(y, 0).astype(I32) for y in ys])
                     if with_targets else
                     (xs, ys, rng.randint(0, 3, n).astype(I32)))
    return calls


@pytest.mark.parametrize('cls, signature', [
    (_Pair, 'ps[0]: i32[W]@cpu (array), ps[1]: i64[B]@cpu (array), '
     'hs[0]: i32[W2]@cpu (array), hs[1]: i64[B]@cpu (array), t: i32[B]'),
    (_Seq2seq, 'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array), '
     'ys_in[0]: i32[W2]@cpu (array), ys_in[1]: i64[B]@cpu (array), '
     'ys_out[0]: i32[W2]@cpu (array), ys_out[1]: i64[B]'),
    (_TargetsEmbeddedAndScored, 'xs[0]: i32[W]@cpu (array), xs[1]: '
     'i64[B]@cpu (array), ys[0]: i32[W2]@cpu (array), ys[1]: i64[B]')])
def test_two_lists_of_their_own_lengths(cls, signature):
    calls = _pairs(numpy.random.RandomState(7), cls is _Seq2seq)
    numpy.random.seed(0)
    jitted = checked_without_recompiling(cls, calls, True)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(signature), entry.signature
    assert jitted.cache_info().compiled >= 3


@settings(deadline=None, max_examples=8)
@given(st.lists(st.tuples(st.integers(1, 8), st.integers(0, 2 ** 16)),
                min_size=3, max_size=5),
       st.booleans())
def test_pairs_of_any_counts_and_lengths(batches, train):
    """Sentence pairs of random counts, each sentence of a random length,
    in training or inference: eager's results, one entry (and one for a
    single pair, recorded item by item)."""
    calls = []
    for n, seed in batches:
        rng = numpy.random.RandomState(seed)
        calls.append(tuple([rng.randint(0, 30, k).astype(I32)
                            for k in rng.randint(1, 7, n)] for _ in 'ph') +
                     (rng.randint(0, 3, n).astype(I32),))
    numpy.random.seed(0)
    jitted = checked_without_recompiling(_Pair, calls, train)
    assert len(jitted.cache_entries()) <= 1 + any(n == 1 for n, _ in batches)


class _EachEmbedded(_Encoder):
    """Each sentence embedded on its own (``[self.embed(x) for x in xs]``),
    as the N-step links' documentation writes it, then through ``tanh``."""

    def forward(self, xs, t):
        exs = [F.tanh(self.embed(x)) for x in xs]
        hy = self.encoder(*[None] * self.n_states, exs)[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


def _the_one_entry(make_model, calls, train):
    """The one entry ``jit(model.forward)`` of ``make_model()`` holds after
    ``calls``, each checked against eager, without a recompile warning."""
    numpy.random.seed(0)
    jitted = checked_without_recompiling(make_model, calls, train)
    entry, = jitted.cache_entries()
    return entry


@pytest.mark.parametrize('name', ['lstm', 'gru'])
def test_sentences_embedded_each_are_joined(name):
    # Each function a loop over the sentences applies to every one is
    # applied once to the rows of all.
    make, n_states = _LINKS[name]
    entry = _the_one_entry(lambda: _EachEmbedded(make(), n_states),
                           _batches(numpy.random.RandomState(9), _COUNTS),
                           True)
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array)')
    ops = [node.op for node in entry.graph.nodes]
    assert ops[:2] == ['EmbedIDFunction', 'Tanh'], ops
    assert 'GetItem' not in ops[:3], ops


class _EachDroppedTwice(_Encoder):
    """Each sentence embedded and dropped out twice on its own: item by
    item, the draws of the two dropouts alternate, which two draws over all
    the rows would not give, so such a loop is not applied whole."""

    def forward(self, xs, t):
        exs = [F.dropout(F.tanh(F.dropout(self.embed(x), 0.2)), 0.1)
               for x in xs]
        hy = self.encoder(None, None, exs)[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


class _PartsDroppedTwice(_Encoder):
    """``sequence_embed``'s parts each dropped out twice on its own: the
    draws alternate, as :class:`_EachDroppedTwice`'s."""

    def forward(self, xs, t):
        exs = [F.dropout(F.tanh(F.dropout(e, 0.2)), 0.1)
               for e in sequence_embed(self.embed, xs)]
        hy = self.encoder(None, None, exs)[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


class _EachInALoop(_Encoder):
    """Each sentence embedded in a ``for`` statement that counts them too:
    its count is used on another line than the embedding."""

    def forward(self, xs, t):
        exs, n = [], 0
        for x in xs:
            exs.append(self.embed(x))
            n += 1
        hy = self.encoder(None, None, exs)[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t) / n


class _OutputsReadApart(_Encoder):
    """The link's output sequences read one by one (their last two
    rows)."""

    def forward(self, xs, t):
        ys = self.encoder(None, None, sequence_embed(self.embed, xs))[-1]
        h = F.concat([y[-2:] for y in ys], axis=0)
        return F.softmax_cross_entropy(self.out(F.reshape(h, (-1, 10))), t)


class _OutputsReturned(_Encoder):
    """The link's output sequences returned with the loss."""

    def forward(self, xs, t):
        hy, _, ys = self.encoder(None, None, [self.embed(x) for x in xs])
        return F.softmax_cross_entropy(self.out(hy[-1]), t), ys


def test_output_sequences_returned_are_cut_from_the_joined_rows():
    model = _OutputsReturned(dropout=0.0)
    jitted = chainerjit.jit(model.forward)
    calls = _batches(numpy.random.RandomState(4), (3, 3, 5, 4, 5), low=2)
    with warnings.catch_warnings(), chainer.using_config('train', False):
        warnings.simplefilter('error', errors.RecompileWarning)
        for args in calls:
            testing.assert_results_equal(jitted(*args), model.forward(*args))
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()


class _PartRead(_Encoder):
    """A part of the cut read besides the link's call."""

    def forward(self, xs, t):
        exs = sequence_embed(self.embed, xs)
        hy = self.encoder(None, None, exs)[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t) + \
            F.sum(exs[0]) * 0.01


class _LongestWordsRead(_Encoder):
    """The longest sentence's length, computed in Python, too."""

    def forward(self, xs, t):
        scale = 1. / max(len(x) for x in xs)
        return super().forward(xs, t) * scale


class _CutElsewhere(_Encoder):
    """The embedded words cut at fixed offsets (not the sentences')."""

    def forward(self, xs, t):
        ex = self.embed(F.concat(xs, axis=0))
        first, rest = F.split_axis(ex, [1], 0)
        hy = self.encoder(None, None, [first, rest])[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t[:2])


@pytest.mark.parametrize('cls, why', [
    (_EachDroppedTwice, 'read on its own by Dropout at '
     'test_joined_segments'),
    (_PartsDroppedTwice, 'read on its own by Dropout at '
     'test_joined_segments'),
    (_EachInALoop, 'counted by iterating'),
    (_OutputsReadApart, 'read on its own'),
    (_PartRead, 'a value of one item'),
    (_LongestWordsRead, 'reads the length of an item'),
    (_CutElsewhere, None)])
def test_a_cut_read_otherwise_keeps_the_count_in_the_key(cls, why):
    calls = _batches(numpy.random.RandomState(4), (3, 3, 5, 4, 5),
                     low=2)
    numpy.random.seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jitted = differential.check_seeded(cls(dropout=0.0), calls)
    messages = [str(w.message) for w in caught
                if issubclass(w.category, errors.RecompileWarning)]
    if why is not None:
        assert any('number of items' in m and why in m
                   for m in messages), messages
    assert all('i32[W]' not in str(e.signature)
               for e in jitted.cache_entries())


class _DroppedEach(_Encoder):
    """Each sentence (or, ``parts``, each part of ``sequence_embed``'s)
    dropped out on its own: ``how`` ``'alike'``, in order at one ratio;
    ``'reversed'``, in reverse order; ``'ratios'``, at a ratio of its
    own. Only the first draw for one after the other as one draw over
    all the rows does."""

    def __init__(self, how, parts):
        super().__init__(L.NStepGRU(1, 6, 5, 0.0), 1)
        self.how, self.parts = how, parts

    def forward(self, xs, t):
        exs = sequence_embed(self.embed, xs) if self.parts else \
            [self.embed(x) for x in xs]
        if self.how == 'reversed':
            exs = [F.dropout(e, 0.3) for e in exs[::-1]][::-1]
        else:
            exs = [F.dropout(e, 0.3 if self.how == 'alike' else
                             0.1 * (k % 3 + 1)) for k, e in enumerate(exs)]
        hy = self.encoder(None, exs)[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


@pytest.mark.parametrize('how', ['alike', 'reversed', 'ratios'])
@pytest.mark.parametrize('parts', [False, True])
@pytest.mark.parametrize('evaluated_first', [False, True])
def test_items_dropped_each_draw_as_eagerly(how, parts, evaluated_first):
    # Evaluated first, the recording that joins the sentences draws
    # nothing: the first training call finds the joins again, and its
    # draws. Only dropouts alike, in order, draw for all rows at once.
    numpy.random.seed(0)
    model = _DroppedEach(how, parts)
    model(*_batches(numpy.random.RandomState(0), (2,))[0])
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    calls = _batches(numpy.random.RandomState(25), (4, 4, 6, 3, 5))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for k, (xs, t) in enumerate(calls):
            modes = (False, True) if evaluated_first else (True,)
            for train in modes:
                with chainer.using_config('train', train):
                    numpy.random.seed(k)
                    expected = model(xs, t)
                    numpy.random.seed(k)
                    testing.assert_results_equal(jitted(xs, t), expected)
    if how == 'alike':
        signatures = [str(e.signature) for e in jitted.cache_entries()]
        assert len(signatures) == (2 if evaluated_first else 1), signatures
        assert all(s.startswith('xs[0]: i32[W]') for s in signatures), \
            signatures


class _OutputsDroppedEach(_Encoder):
    """A tagger's loss added up sentence by sentence, each output sequence
    of the N-step link dropped out on its own."""

    def __init__(self):
        super().__init__(L.NStepBiLSTM(2, 6, 4, 0.5), 2)
        with self.init_scope():
            self.tagger = L.Linear(8, 3)

    def forward(self, xs, ts):
        _, _, ys = self.encoder(None, None, [self.embed(x) for x in xs])
        loss = 0
        for y, t in zip(ys, ts):
            loss += F.softmax_cross_entropy(self.tagger(F.dropout(y, 0.3)),
                                            t)
        return loss


def test_outputs_dropped_each_join_in_training_alone():
    # The output sequences' draws are the items': joined, they draw for
    # the rows of all at once, from the first training call on.
    calls = _tagged(numpy.random.RandomState(26), (4, 3, 5, 2, 4, 6))
    numpy.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        jitted = differential.check_seeded(_OutputsDroppedEach(), calls)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('xs[0]: i32[W]'), entry.signature
    assert jitted.cache_info().hits >= 3


class _EmbeddedJoinedCutDropped(_Encoder):
    """Each sentence embedded, the embeddings joined and cut again at the
    sentences' offsets, each part dropped out: how the parts draw is not
    told from the items' functions."""

    def __init__(self):
        super().__init__(L.NStepGRU(1, 6, 5, 0.0), 1)

    def forward(self, xs, t):
        rows = F.concat([self.embed(x) for x in xs], axis=0)
        parts = F.split_axis(rows, numpy.cumsum([len(x) for x in xs[:-1]]),
                             0)
        hy = self.encoder(None, [F.dropout(p, 0.2) for p in parts])[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


def test_draws_unseen_again_leave_the_lists_item_by_item():
    # Found again in training, the parts' draws are still unseen: the
    # lists are recorded item by item from then on, not again and again.
    calls = _batches(numpy.random.RandomState(27), (4, 4, 4, 3, 3, 4))
    numpy.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        jitted = differential.check_seeded(_EmbeddedJoinedCutDropped(),
                                           calls)
    assert jitted.cache_info().currsize >= 1, jitted.cache_info()


def _words_and_lengths(xs):
    """What an exported model of a joined call takes for the list ``xs``."""
    return [numpy.concatenate(xs), numpy.array([len(x) for x in xs])]


class _SentenceDecoder(test_ragged_lists._Seq2seq):
    """A sentence VAE's decoder: its first hidden state computed from the
    encoder's (a code), its first cell state zeros (``cx=None``, or made
    by the forward); ``functional``: ``F.n_step_lstm`` on the targets
    given sorted, its ``hx`` zeros made by the forward and ``cx`` the
    code."""

    def __init__(self, functional=False):
        super().__init__(1, 0.0)
        self.functional = functional
        with self.init_scope():
            self.code = L.Linear(5, 5)

    def forward(self, xs, ys_in, ys_out):
        hx, _, _ = self.encoder(None, None, sequence_embed(self.embed_x, xs))
        code = F.tanh(self.code(hx[-1]))[None]
        eys = sequence_embed(self.embed_y, ys_in)
        if self.functional:
            zeros = self.xp.zeros(code.shape, 'f')
            _, _, os = F.n_step_lstm(1, 0.0, zeros, code, self.decoder.ws,
                                     self.decoder.bs,
                                     F.transpose_sequence(eys))
            os = F.transpose_sequence(os)
        else:
            _, _, os = self.decoder(code, None, eys)
        return F.softmax_cross_entropy(self.W(F.concat(os, axis=0)),
                                       F.concat(ys_out, axis=0))


def _sorted_targets(calls):
    """``calls`` of :func:`_pairs` with their targets sorted by
    decreasing length, as ``F.n_step_lstm`` takes them."""
    def by_length(ys):
        return sorted(ys, key=len, reverse=True)
    return [(xs, by_length(ys_in), by_length(ys_out))
            for xs, ys_in, ys_out in calls]


@pytest.mark.parametrize('functional', [False, True])
@pytest.mark.parametrize('train', [True, False])
def test_a_decoder_from_a_computed_state_and_zeros(functional, train):
    # One state computed and the other zeros: the op makes the zeros of
    # the batch's size, and one entry serves every batch.
    calls = _pairs(numpy.random.RandomState(21), True)
    _one_joined_entry(lambda: _SentenceDecoder(functional), _sorted_targets(
        calls) if functional else calls, train,
        'ys_in[0]: i32[W2]@cpu (array), ys_in[1]: i64[B]@cpu (array)')


@pytest.mark.parametrize('make, calls', [
    (_SentenceDecoder, _pairs(numpy.random.RandomState(22), True)[:5]),
    (lambda: _encoder('bilstm'),
     _batches(numpy.random.RandomState(5), (3, 4, 6, 2, 9))),
    # the decoder's output sequences joined: the words' rows compressed
    # back from its ONNX LSTM's time-major block
    (_Seq2seq, _pairs(numpy.random.RandomState(8), True)[:5]),
    # sentences reversed and framed item by item, as the example does
    (lambda: _Framed(), _batches(numpy.random.RandomState(10),
                                 (3, 4, 6, 2, 9)))],
    ids=['decoder from a code', 'classifier', 'seq2seq', 'framed'])
def test_exported_model_takes_the_words_and_lengths(make, calls):
    _exported_runs_at_other_counts(make, calls)


def _exported_runs_at_other_counts(make, calls):
    """The model ``make()`` exported after its first calls runs the others
    in onnxruntime as eagerly, given the words and lengths of its lists."""
    numpy.random.seed(0)
    test_ragged_lists._check_exported(make(), calls, _words_and_lengths)


# --- ops on each item, run once on the rows of all ---------------------------

class _Framed(_Encoder):
    """Each sentence reversed and framed by a start and an end id in
    Python, item by item (as Chainer's seq2seq example prepares its
    sentences), then embedded joined; the batch size read from the
    framed list."""

    def __init__(self):
        super().__init__(L.NStepLSTM(1, 6, 5, 0.0))

    def forward(self, xs, t):
        bos = numpy.array([1], I32)
        eos = numpy.array([2, 2], I32)
        xs = [F.concat([bos, x[::-1], eos], axis=0) for x in xs]
        hy = self.encoder(None, None, sequence_embed(self.embed, xs))[0]
        return F.sum(F.softmax_cross_entropy(
            self.out(hy[-1]), t, reduce='no')) / len(xs)


class _EachDropped(_EachEmbedded):
    """Each sentence embedded and dropped out on its own: dropout draws
    item by item, as one draw over all the rows does."""

    def forward(self, xs, t):
        exs = [F.dropout(self.embed(x), 0.2) for x in xs]
        hy = self.encoder(*[None] * self.n_states, exs)[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


class _PartsEachActivated(_EachEmbedded):
    """``sequence_embed``'s parts each through ``tanh`` and dropout on its
    own: applied once to the rows of all, dropout drawing for the parts
    one after the other as one draw over all the rows does."""

    def forward(self, xs, t):
        exs = [F.dropout(F.tanh(e), 0.1)
               for e in sequence_embed(self.embed, xs, 0.2)]
        hy = self.encoder(*[None] * self.n_states, exs)[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


class _EachAppended(_EachEmbedded):
    """Each sentence embedded and dropped out in a ``for`` statement that
    only appends them to a list, as a comprehension makes it."""

    def forward(self, xs, t):
        exs = []
        for x in xs:
            exs.append(F.dropout(F.tanh(self.embed(x)), 0.1))
        hy = self.encoder(*[None] * self.n_states, exs)[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


class _DroppedApart(_EachEmbedded):
    """The same sentences, each embedded, dropped out by two loops over
    them: each loop draws masks of its own."""

    def forward(self, xs, t):
        exs = [self.embed(x) for x in xs]
        first = [F.dropout(e, 0.3) for e in exs]
        second = [F.dropout(e, 0.3) for e in exs]
        h = self.encoder(None, first)[0][-1] + \
            self.encoder(None, second)[0][-1]
        return F.softmax_cross_entropy(self.out(h), t)


class _EachEmbeddedCounted(_EachEmbedded):
    """Each sentence embedded on its own, the loss divided by the number
    of embedded sentences (``len(exs)``)."""

    def forward(self, xs, t):
        exs = [self.embed(x) for x in xs]
        hy = self.encoder(*[None] * self.n_states, exs)[0]
        return F.sum(F.softmax_cross_entropy(
            self.out(hy[-1]), t, reduce='no')) / len(exs)


@pytest.mark.parametrize('make', [
    _Framed, lambda: _EachEmbeddedCounted(L.NStepGRU(1, 6, 5, 0.0), 1),
    lambda: _EachDropped(L.NStepLSTM(2, 6, 5, 0.3), 2),
    lambda: _PartsEachActivated(L.NStepBiLSTM(2, 6, 5, 0.2), 2),
    lambda: _EachAppended(L.NStepGRU(1, 6, 5, 0.0), 1),
    lambda: _DroppedApart(L.NStepGRU(1, 6, 5, 0.0), 1)],
    ids=['framed', 'counted', 'dropped', 'parts', 'appended',
         'dropped apart'])
@pytest.mark.parametrize('train', [True, False])
def test_ops_on_each_item_run_on_all_rows(make, train):
    entry = _one_joined_entry(make, _batches(
        numpy.random.RandomState(10), _COUNTS), train, 't: i32[B]')
    assert 'ndarray.__getitem__' not in str(entry.graph), entry.graph


def test_the_framed_rows_are_one_node_each():
    model = _Framed()
    jitted = chainerjit.jit(model.forward)
    with chainer.using_config('train', False):
        for xs, t in _batches(numpy.random.RandomState(11), (3, 5)):
            jitted(xs, t)
    graph = str(jitted.cache_entries()[0].graph)
    assert graph.count('joined.reversed') == 1, graph
    assert graph.count('joined.framed') == 1, graph
    # a start and two end ids framing each of B sentences of W words
    assert 'i32[3*B+W] = joined.framed[after=2, before=1]' in graph, graph


class _FramedItemRead(_Framed):
    """A framed sentence read on its own besides the joined embedding."""

    def forward(self, xs, t):
        eos = numpy.array([2], I32)
        ys = [F.concat([x, eos], axis=0) for x in xs]
        hy = self.encoder(None, None, sequence_embed(self.embed, ys))[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t) + \
            F.sum(self.embed(ys[0])) * 0.01


def test_a_framed_item_read_on_its_own_keeps_the_count():
    calls = _batches(numpy.random.RandomState(12), (3, 3, 5, 4))
    numpy.random.seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jitted = differential.check_seeded(_FramedItemRead(), calls)
    messages = [str(w.message) for w in caught
                if issubclass(w.category, errors.RecompileWarning)]
    # (the sum of its rows is computed for all the items at once: their
    # sum alone is joined, not one item's returned, scaled, in the loss)
    assert any('number of items' in m and 'a value of one item' in m and
               'is returned by Add at test_joined_segments' in m
               for m in messages), messages
    assert all('i32[W]' not in str(e.signature)
               for e in jitted.cache_entries())


@settings(deadline=None, max_examples=20)
@given(st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=5),
                min_size=1, max_size=4),
       st.integers(0, 2), st.integers(0, 2),
       st.sampled_from(['reversed', 'framed', 'sliced']),
       st.integers(0, 2 ** 16))
def test_reversed_framed_and_sliced_rows_equal_each_item_s(
        batches, n_before, n_after, kind, seed):
    """The kernels against each item reversed, framed or sliced on its
    own (items of no rows too)."""
    from chainerjit.ops import segments
    rng = numpy.random.RandomState(seed)
    before = rng.randint(0, 9, (n_before, 2)).astype(I32)
    after = rng.randint(0, 9, (n_after, 2)).astype(I32)
    for lengths in batches:
        items = [rng.randint(0, 9, (n, 2)).astype(I32) for n in lengths]
        rows, sizes = numpy.concatenate(items), numpy.array(lengths)
        if kind == 'reversed':
            got = segments.reversed_rows(rows, sizes)
            items = [x[::-1] for x in items]
        elif kind == 'framed':
            got = segments.framed_rows(rows, sizes, before, after)
            items = [numpy.concatenate([before, x, after]) for x in items]
        else:
            got = segments.sliced_rows(rows, sizes, n_before, n_after)
            items = [x[n_before:len(x) - n_after] for x in items]
        numpy.testing.assert_array_equal(got, numpy.concatenate(items))


def _trained_with_one_entry(model, calls):
    """Trains ``model`` and a jitted copy of it by Adam over ``calls``,
    with their reports, and checks they give the same values, without a
    warning; the copy's one cache entry."""
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    optimizers = [chainer.optimizers.Adam(), chainer.optimizers.Adam()]
    optimizers[0].setup(model)
    optimizers[1].setup(twin)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        warnings.simplefilter('error', errors.LoopWarning)
        for seed, args in enumerate(calls):
            eager = reported_step(model, model.forward, optimizers[0],
                                  seed, args)
            compiled = reported_step(twin, jitted, optimizers[1], seed,
                                     args)
            testing.assert_results_equal(compiled, eager)
    entry, = jitted.cache_entries()
    return entry


def test_chainer_seq2seq_example_trains_with_its_reports():
    # Chainer's seq2seq example's model as it is written, with its reports
    # (the perplexity: NumPy on the loss's array, the number of sentences
    # and the number of target words)
    model = test_ragged_lists._example('seq2seq')
    calls = [args[:2] for args in _pairs(numpy.random.RandomState(13), False)]
    entry = _trained_with_one_entry(model, calls)
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array), '
        'ys[0]: i32[W2]@cpu (array), ys[1]: i64[B]'), entry.signature
    # the number of target words: W2 + B, read at run time
    assert 'python.size[axes=((0, 1), (0, 1))' in str(entry.graph), \
        entry.graph


# --- sequences of features straight into a link ------------------------------

class _Features(chainer.Chain):
    """Sequences of feature vectors (speech frames, sensor readings) of
    their own lengths, straight into a stacked RNN link."""

    def __init__(self, link, n_states):
        super().__init__()
        with self.init_scope():
            self.encoder = link
            self.out = L.Linear(None, 3)
        self.n_states = n_states

    def forward(self, xs, t):
        hy = self.encoder(*[None] * self.n_states, xs)[0]
        return F.softmax_cross_entropy(self.out(F.concat(
            [hy[-1], hy[0]], axis=1)), t)


_FEATURE_LINKS = {
    'bilstm': (lambda: L.NStepBiLSTM(2, 5, 4, 0.2), 2),
    'gru': (lambda: L.NStepGRU(1, 5, 4, 0.0), 1),
}


def _feature_batches(rng, counts):
    return [([rng.randn(int(rng.randint(1, 9)), 5).astype(numpy.float32)
              for _ in range(n)], rng.randint(0, 3, n).astype(I32))
            for n in counts]


@pytest.mark.parametrize('name', sorted(_FEATURE_LINKS))
@pytest.mark.parametrize('train', [True, False])
def test_feature_sequences_into_a_link_are_joined(name, train):
    make, n_states = _FEATURE_LINKS[name]
    entry = _the_one_entry(
        lambda: _Features(make(), n_states),
        _feature_batches(numpy.random.RandomState(15), _COUNTS), train)
    assert str(entry.signature).startswith(
        'xs[0]: f32[W,5]@cpu (array), xs[1]: i64[B]@cpu (array), '
        't: i32[B]'), entry.signature
    assert 'PackedNStepRNN' in str(entry.graph)


def test_exported_feature_sequences_model():
    _exported_runs_at_other_counts(
        lambda: _Features(_FEATURE_LINKS['bilstm'][0](), 2),
        _feature_batches(numpy.random.RandomState(16), (3, 4, 6, 2, 9)))


# --- items sliced: x[1:], x[:-1] ---------------------------------------------

class _NextWord(chainer.Chain):
    """A language model over sentences of their own lengths: each
    sentence but its last word predicts each but its first, its
    perplexity reported over the number of target words."""

    def __init__(self, link=None, n_states=2, reports=True):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.rnn = link or L.NStepLSTM(1, 6, 5, 0.0)
            self.out = L.Linear(5, 30)
        self.n_states = n_states
        self.reports = reports

    def forward(self, xs):
        inputs = [x[:-1] for x in xs]
        targets = [x[1:] for x in xs]
        hs = self.rnn(*[None] * self.n_states,
                      [self.embed(x) for x in inputs])[-1]
        t = F.concat(targets, axis=0)
        loss = F.softmax_cross_entropy(self.out(F.concat(hs, axis=0)), t)
        n_words = len(t)
        if self.reports:
            chainer.report({'loss': loss, 'perp': numpy.exp(
                loss.array * n_words / n_words)}, self)
        return loss


class _FramedThenCut(_Encoder):
    """Each sentence framed by a start and an end id, then its first and
    last rows cut again: ``x[1:-1]`` of ``F.concat([bos, x, eos])``."""

    def __init__(self):
        super().__init__(L.NStepGRU(1, 6, 5, 0.0), 1)

    def forward(self, xs, t):
        bos, eos = numpy.array([1], I32), numpy.array([2], I32)
        ys = [F.concat([bos, x, eos], axis=0) for x in xs]
        ys = [y[1:-1] for y in ys]
        hy = self.encoder(None, [self.embed(y) for y in ys])[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


def _sentences(rng, counts, low=2):
    return [([rng.randint(0, 30, int(rng.randint(low, 10))).astype(I32)
              for _ in range(n)],) for n in counts]


@pytest.mark.parametrize('name', ['lstm', 'gru'])
def test_a_language_model_over_sliced_sentences_trains_with_one_entry(name):
    make, n_states = _LINKS[name]
    numpy.random.seed(0)
    model = _NextWord(make(), n_states)
    entry = _trained_with_one_entry(
        model, _sentences(numpy.random.RandomState(14), _COUNTS))
    graph = str(entry.graph)
    assert 'joined.sliced[end=1, start=0]' in graph, graph
    assert 'joined.sliced[end=0, start=1]' in graph, graph
    assert 'i32[W-B] = joined.sliced' in graph, graph


@pytest.mark.parametrize('train', [True, False])
def test_framed_items_cut_again_are_joined(train):
    calls = _batches(numpy.random.RandomState(15), _COUNTS)
    numpy.random.seed(0)
    jitted = checked_without_recompiling(_FramedThenCut, calls, train)
    entry, = jitted.cache_entries()
    assert 'ndarray.__getitem__' not in str(entry.graph), entry.graph


class _CutTwice(chainer.Chain):
    """``x[1:-1]`` of sentences of one word or more: a sentence of one
    word has none left, so the rows are not the words less twice the
    number of sentences."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)

    def forward(self, xs):
        cut = [x[1:-1] for x in xs]
        return F.sum(F.tanh(self.embed(F.concat(cut, axis=0))))


def test_a_slice_longer_than_some_items_stays_item_by_item():
    calls = _sentences(numpy.random.RandomState(16), (3, 4, 3, 5), low=1)
    calls[0][0][1] = calls[0][0][1][:1]  # (a sentence of one word)
    numpy.random.seed(0)
    model = _CutTwice()
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for args in calls:
            model.cleargrads()
            compiled = jitted(*args)
            compiled.backward()
            grad = model.embed.W.grad.copy()
            model.cleargrads()
            eager = model.forward(*args)
            eager.backward()
            testing.assert_results_equal(compiled, eager)
            testing.assert_results_equal(grad, model.embed.W.grad)
    assert any(issubclass(w.category, (errors.RecompileWarning,
                                       errors.LoopWarning))
               for w in caught), [str(w.message) for w in caught]
    assert all('i32[W]' not in str(e.signature)
               for e in jitted.cache_entries())


def test_exported_language_model_takes_the_words_and_lengths():
    _exported_runs_at_other_counts(
        lambda: _NextWord(reports=False),
        _sentences(numpy.random.RandomState(17), (3, 4, 6, 2, 9)))


class _ScaledByTheWidth(_Encoder):
    """The padded block's width (the longest sentence) in float
    arithmetic with Variables: read from the block when run."""

    def __init__(self):
        super().__init__(L.NStepLSTM(1, 6, 5, 0.0), dropout=0.0)

    def forward(self, xs, t):
        _, enc, _ = _encoded_and_valid(self, xs)
        width = enc.shape[1]
        return F.sum(enc * enc) / width + F.sum(F.average(enc, axis=1)) * \
            width


class _WidthInPython(_ScaledByTheWidth):
    """The width in int arithmetic: the lists stay item by item."""

    def forward(self, xs, t):
        _, enc, _ = _encoded_and_valid(self, xs)
        return F.sum(enc) * (enc.shape[1] - 1)


class _WidthTimesTheCount(_ScaledByTheWidth):
    """The width times the number of sentences (a size on the left): not
    the recorded width in a product of sizes."""

    def forward(self, xs, t):
        _, enc, _ = _encoded_and_valid(self, xs)
        return F.sum(enc) / (len(xs) * enc.shape[1])


def _truncated(rng, counts, longest=6):
    """Sentences cut at ``longest`` words, every batch holding one that
    long until the last ones, which hold none."""
    calls = []
    for k, n in enumerate(counts):
        sizes = list(rng.randint(1, longest, n))
        if k < len(counts) - 3:
            sizes[0] = longest
        calls.append(([rng.randint(0, 30, int(m)).astype(I32)
                       for m in sizes], rng.randint(0, 3, n).astype(I32)))
    return calls


@pytest.mark.parametrize('train', [True, False])
def test_the_padded_width_in_float_arithmetic_is_read_when_run(train):
    # (batches holding the longest sentence first: a width baked in
    # would pass the first checks)
    entry = _one_joined_entry(_ScaledByTheWidth, _truncated(
        numpy.random.RandomState(19), (4, 3, 5, 6, 2, 4, 3, 5, 4)), train,
        't: i32[B]')
    assert 'python.size' in str(entry.graph), entry.graph


@pytest.mark.parametrize('cls', [_WidthInPython, _WidthTimesTheCount])
def test_the_padded_width_in_python_keeps_the_lists_item_by_item(cls):
    calls = _truncated(numpy.random.RandomState(20), (4, 3, 5, 4, 3, 5))
    numpy.random.seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jitted = differential.check_seeded(cls(), calls)
    assert any('a number computed from the lengths of the items of xs '
               'used in arithmetic with a Variable' in str(w.message)
               for w in caught), [str(w.message) for w in caught]
    assert all('i32[W]' not in str(e.signature)
               for e in jitted.cache_entries())


class _TaggerOfNumPyTags(_Tagger):
    """A tagger whose tags NumPy joins (``xp.concatenate(ts)``), its
    accuracy reported."""

    def forward(self, xs, ts):
        _, _, ys = self.encoder(None, None, [self.embed(x) for x in xs])
        h, t = self.out(F.concat(ys, axis=0)), self.xp.concatenate(ts)
        chainer.report({'accuracy': F.accuracy(h, t)}, self)
        return F.softmax_cross_entropy(h, t)


class _TaggerScoringEach(_Tagger):
    """A tagger scoring each output sequence on its own (``[self.out(y)
    for y in ys]``), then joining the scores."""

    def forward(self, xs, ts):
        _, _, ys = self.encoder(None, None, sequence_embed(self.embed, xs))
        scores = [self.out(y) for y in ys]
        return F.softmax_cross_entropy(F.concat(scores, axis=0),
                                       F.concat(ts, axis=0))


def _tagged(rng, counts):
    calls = []
    for n in counts:
        lengths = rng.randint(1, 10, n)
        calls.append(([rng.randint(0, 30, k).astype(I32) for k in lengths],
                      [rng.randint(0, 3, k).astype(I32) for k in lengths]))
    return calls


@pytest.mark.parametrize('cls', [_TaggerOfNumPyTags, _TaggerScoringEach])
@pytest.mark.parametrize('train', [True, False])
def test_taggers_as_scripts_write_them_serve_every_count_and_length(
        cls, train):
    entry = _the_one_entry(cls, _tagged(numpy.random.RandomState(21),
                                        _COUNTS), train)
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array), '
        'ts[0]: i32[W]@cpu (array), ts[1]: i64[B]@cpu (array)'), \
        entry.signature
    ops = [node.op for node in entry.graph.nodes]
    assert ops.count('LinearFunction') == 1, ops


class _SummedScoresMasked(_MaskedAttentionPool):
    """Sentences embedded each; attention scores summed over the features
    (``(B, W)``), masked by ``xp.full(scores.shape, ...)``: the scores'
    width is the longest sentence's, not the words'."""

    def forward(self, xs, t=None):
        _, _, enc = self.encoder(None, None, [self.embed(x) for x in xs])
        enc = F.pad_sequence(enc)
        scores = F.sum(enc, axis=2)
        scores = F.where(scores.array > 0, scores,
                         self.xp.full(scores.shape, -1e9, scores.dtype))
        weights = F.broadcast_to(F.softmax(scores)[:, :, None], enc.shape)
        return F.softmax_cross_entropy(
            self.out(F.sum(enc * weights, axis=1)), t)


@pytest.mark.parametrize('train', [True, False])
def test_a_mask_as_wide_as_summed_scores_serves_every_count_and_length(
        train):
    _one_joined_entry(_SummedScoresMasked, _batches(
        numpy.random.RandomState(22), _COUNTS), train, 't: i32[B]')


def test_a_sentence_of_one_word_alone_is_served_by_the_joined_entry():
    # (a batch of one sentence, of one word, among others)
    rng = numpy.random.RandomState(23)
    calls = _tagged(rng, (4, 1, 3, 1, 5, 2, 1))
    calls[1] = ([numpy.array([3], I32)], [numpy.array([1], I32)])
    calls[4][0][2], calls[4][1][2] = calls[1][0][0], calls[1][1][0]
    entry = _the_one_entry(_TaggerOfNumPyTags, calls, True)
    assert str(entry.signature).startswith('xs[0]: i32[W]@cpu'), \
        entry.signature


def test_a_sentence_of_one_word_alone_first_in_one_mode_leaves_the_others():
    # Evaluation between training steps: a batch of one sentence of one
    # word is inference's first joined call, after training's entry; it
    # runs eagerly, and later batches of one sentence are joined still, in
    # both modes: one entry each.
    rng = numpy.random.RandomState(24)
    calls = _batches(rng, (4, 1, 3, 1, 5, 1))
    calls[1][0][0] = calls[1][0][0][:1]
    numpy.random.seed(0)
    model = _EachEmbedded(L.NStepGRU(1, 6, 5, 0.0), 1)
    model.forward(*calls[0])  # (its output layer's weights made)
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    for xs, t in calls:
        with chainer.using_config('train', False), \
                chainer.no_backprop_mode():
            testing.assert_results_equal(jitted(xs, t), model.forward(xs, t))
        model.cleargrads()
        twin.cleargrads()
        loss = jitted(xs, t)
        expected = model.forward(xs, t)
        testing.assert_results_equal(loss, expected)
        loss.backward()
        expected.backward()
        for (name, p), (_, q) in zip(sorted(model.namedparams()),
                                     sorted(twin.namedparams())):
            numpy.testing.assert_allclose(q.grad, p.grad, rtol=1e-4,
                                          atol=1e-6, err_msg=name)
    signatures = [str(e.signature) for e in jitted.cache_entries()]
    assert len(signatures) == 2, jitted.cache_report()
    assert all(s.startswith('xs[0]: i32[W]@cpu (array), xs[1]: i64[B]')
               for s in signatures), signatures


class _LastOfEachPadded(_Encoder):
    """Each sentence's last output, read from the padded block by the
    sentences' positions and lengths (``enc[xp.arange(len(xs)), lengths
    - 1]``)."""

    def forward(self, xs, t):
        _, _, enc = self.encoder(None, None, [self.embed(x) for x in xs])
        enc = F.pad_sequence(enc)
        lengths = self.xp.array([len(x) for x in xs])
        last = enc[self.xp.arange(len(xs)), lengths - 1]
        return F.softmax_cross_entropy(self.out(last), t)


class _TagsReadTwice(_Tagger):
    """The tags joined twice, by NumPy for the loss and by ``F.concat``
    for the accuracy reported."""

    def forward(self, xs, ts):
        _, _, ys = self.encoder(None, None, [self.embed(x) for x in xs])
        h = self.out(F.concat(ys, axis=0))
        chainer.report({'accuracy': F.accuracy(h, F.concat(ts, axis=0))},
                       self)
        return F.softmax_cross_entropy(h, self.xp.concatenate(ts))


@pytest.mark.parametrize('train', [True, False])
def test_the_last_output_of_each_padded_sentence_serves_every_shape(train):
    entry = _one_joined_entry(lambda: _LastOfEachPadded(dropout=0.0),
                              _batches(numpy.random.RandomState(24),
                                       _COUNTS), train, 't: i32[B]')
    assert 'GetItem[generic]' not in str(entry.graph), entry.graph


@pytest.mark.parametrize('train', [True, False])
def test_tags_joined_twice_serve_every_count_and_length(train):
    _the_one_entry(_TagsReadTwice, _tagged(numpy.random.RandomState(25),
                                           _COUNTS), train)


class _ScaledByTheWidthOfScores(_Encoder):
    """Attention over the link's padded outputs, a term scaled by the
    scores' width (``sc.shape[1]``, the longest sentence's) in training."""

    def __init__(self):
        super().__init__(L.NStepLSTM(1, 6, 5, 0.0), dropout=0.0)

    def forward(self, xs, t):
        _, _, ys = self.encoder(None, None, [self.embed(x) for x in xs])
        enc = F.pad_sequence(ys)
        sc = F.sum(enc, axis=2)
        a = F.softmax(sc)
        ctx = F.sum(enc * F.broadcast_to(a[:, :, None], enc.shape), axis=1)
        return F.softmax_cross_entropy(self.out(ctx), t) + \
            F.sum(a * a) * sc.shape[1]


def test_a_width_of_padded_outputs_in_arithmetic_serves_every_length():
    # (each batch of the first calls holds a 12-word sentence, as a data
    # set clipped at 12 words gives; then shorter ones)
    rng = numpy.random.RandomState(26)
    calls = []
    for k, n in enumerate((4, 2, 6) * 9):
        lengths = list(rng.randint(1, 12, n))
        if k < 18:
            lengths[rng.randint(n)] = 12
        calls.append(([rng.randint(0, 30, m).astype(I32) for m in lengths],
                      rng.randint(0, 3, n).astype(I32)))
    _the_one_entry(_ScaledByTheWidthOfScores, calls, True)


class _EachScaled(_Tagger):
    """Element-wise functions and constants applied to each sentence and
    to each output sequence (``F.exp(e) * 0.5``, ``F.elu(y) + 1``)."""

    def forward(self, xs, ts):
        _, _, ys = self.encoder(None, None, [
            F.exp(self.embed(x)) * numpy.float32(0.5) for x in xs])
        h = F.concat([F.elu(y) + 1 for y in ys], axis=0)
        return F.softmax_cross_entropy(self.out(h), F.concat(ts, axis=0))


class _EachScaledApart(_EachScaled):
    """Each sentence scaled by a constant of its own (``e * (k + 1)``):
    not one function of all the rows."""

    def forward(self, xs, ts):
        _, _, ys = self.encoder(None, None, [
            self.embed(x) * (k + 1) for k, x in enumerate(xs)])
        h = F.concat(ys, axis=0)
        return F.softmax_cross_entropy(self.out(h), F.concat(ts, axis=0))


@pytest.mark.parametrize('train', [True, False])
def test_element_wise_functions_of_each_item_run_on_all_rows(train):
    entry = _the_one_entry(_EachScaled, _tagged(
        numpy.random.RandomState(27), _COUNTS), train)
    ops = [node.op for node in entry.graph.nodes]
    assert ops.count('Exp') == ops.count('ELU') == 1, ops


def test_constants_of_each_items_own_keep_eagers_values():
    numpy.random.seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        differential.check_seeded(_EachScaledApart(), _tagged(
            numpy.random.RandomState(28), (4, 4, 5)))
    assert any('number of items' in str(w.message) for w in caught)


class _ZeroStatesAndLabels(_Encoder):
    """The link's initial states made of the batch size, zeros wrapped in
    Variables, and the labels, a list of one row each, stacked by
    ``concat_examples``."""

    def __init__(self):
        super().__init__(L.NStepLSTM(1, 6, 5, 0.0))

    def forward(self, xs, ys):
        zeros = self.xp.zeros((1, len(xs), 5), numpy.float32)
        hy = self.encoder(chainer.Variable(zeros), chainer.Variable(zeros),
                          [self.embed(x) for x in xs])[0]
        t = chainer.dataset.concat_examples(ys).ravel()
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


def test_zero_states_of_the_batch_size_and_stacked_labels():
    rng = numpy.random.RandomState(14)
    calls = [(xs, [t[k:k + 1] for k in range(len(t))])
             for xs, t in _batches(rng, _COUNTS)]
    for train in (True, False):
        jitted = checked_without_recompiling(_ZeroStatesAndLabels, calls,
                                             train)
        entry, = jitted.cache_entries()
        assert 'ys: i32[B,1]' in str(entry.signature), entry.signature


class _StackedTargets(_Encoder):
    """Targets framed by ``numpy.hstack`` (a start of sentence before
    each, an end after), decoded after the sources' encoder."""

    def __init__(self):
        super().__init__(L.NStepLSTM(1, 6, 5, 0.0))
        with self.init_scope():
            self.decoder = L.NStepLSTM(1, 6, 5, 0.0)

    def forward(self, xs, ys):
        eos = numpy.array([2], I32)
        ys_in = [numpy.hstack([eos, y]) for y in ys]
        ys_out = [numpy.hstack([y, eos]) for y in ys]
        h, c, _ = self.encoder(None, None, [self.embed(x) for x in xs])
        _, _, os = self.decoder(h, c, [self.embed(y) for y in ys_in])
        return F.softmax_cross_entropy(self.out(F.concat(os, axis=0)),
                                       numpy.concatenate(ys_out))


def test_targets_framed_by_hstack():
    rng = numpy.random.RandomState(15)
    calls = [(xs, [rng.randint(0, 3, k).astype(I32)
                   for k in rng.randint(1, 6, len(xs))])
             for xs, _ in _batches(rng, _COUNTS)]
    for train in (True, False):
        jitted = checked_without_recompiling(_StackedTargets, calls, train)
        entry, = jitted.cache_entries()
        assert 'joined.framed' in str(entry.graph)


class _CountedTagger(_Encoder):
    """Chainer's ``sequence_embed`` with the lengths of all the sentences
    but the last, and the accuracy counted by NumPy over the tags joined,
    over their number."""

    def __init__(self):
        super().__init__(L.NStepBiLSTM(1, 6, 5, 0.0))

    def forward(self, xs, ts):
        sections = numpy.cumsum([len(x) for x in xs[:-1]])
        exs = F.split_axis(self.embed(F.concat(xs, axis=0)), sections, 0)
        _, _, hs = self.encoder(None, None, exs)
        y = self.out(F.concat(hs, axis=0))
        t = numpy.concatenate(ts)
        accuracy = (y.array.argmax(axis=1) == t).sum() / len(t)
        return F.softmax_cross_entropy(y, t), accuracy


def test_offsets_of_all_but_the_last_and_the_words_counted():
    rng = numpy.random.RandomState(16)
    calls = [(xs, [rng.randint(0, 3, len(x)).astype(I32) for x in xs])
             for xs, _ in _batches(rng, _COUNTS)]
    jitted = checked_without_recompiling(_CountedTagger, calls, False)
    entry, = jitted.cache_entries()
    assert 'ts[0]: i32[W]' in str(entry.signature), entry.signature


# --- the longest item's length read in Python -----------------------------

class _PaddedToTheLongest(_Encoder):
    """The embedded words padded to the longest sentence's length, as
    computed in Python (``max(len(x) for x in xs)``, a mask of ``arange``
    of it against the lengths) and every position scored at once
    (``F.reshape(h, (B * T, H))``), then summed over the sentence's
    words."""

    def __init__(self):
        super().__init__(L.NStepLSTM(1, 6, 5, 0.0), dropout=0.0)

    def forward(self, xs, t):
        longest = max(len(x) for x in xs)
        return self.scored(xs, t, longest)

    def scored(self, xs, t, longest):
        h = F.pad_sequence([self.embed(x) for x in xs], length=longest)
        valid = self.xp.arange(longest)[None, :] < \
            self.xp.array([len(x) for x in xs])[:, None]
        scores = F.reshape(self.out(F.reshape(h, (len(xs) * longest, 6))),
                           (len(xs), longest, 3))
        scores = scores * valid[:, :, None].astype(numpy.float32)
        return F.softmax_cross_entropy(F.sum(scores, axis=1), t)


class _LongestOfAList(_PaddedToTheLongest):
    def forward(self, xs, t):
        longest = max([x.shape[0] for x in xs])
        return self.scored(xs, t, longest)


class _LongestMapped(_PaddedToTheLongest):
    def forward(self, xs, t):
        return self.scored(xs, t, max(map(len, xs)))


_LONGEST = {'generator': _PaddedToTheLongest, 'list': _LongestOfAList,
            'map': _LongestMapped}


@pytest.mark.parametrize('longest', sorted(_LONGEST))
@pytest.mark.parametrize('train', [True, False])
def test_padding_to_the_longest_length_read_serves_every_shape(longest,
                                                               train):
    calls = _batches(numpy.random.RandomState(20), _COUNTS)
    entry = _one_joined_entry(_LONGEST[longest], calls, train, 't: i32[B]')
    graph = str(entry.graph)
    assert 'PadSegments' in graph and 'PadSequence' not in graph, graph


class _PaddedLonger(_PaddedToTheLongest):
    """Padded two words past the longest sentence: that length, computed
    of all the lengths, is the node's."""

    def forward(self, xs, t):
        h = F.pad_sequence([self.embed(x) for x in xs],
                           length=max(len(x) for x in xs) + 2)
        return F.softmax_cross_entropy(self.out(F.sum(h, axis=1)), t)


class _LongestOfTwo(_PaddedToTheLongest):
    """The longer of the first two sentences, compared in Python."""

    def forward(self, xs, t):
        h = F.pad_sequence([self.embed(x) for x in xs],
                           length=max(len(x) for x in xs) +
                           max(len(xs[0]), len(xs[1])))
        return F.softmax_cross_entropy(self.out(F.sum(h, axis=1)), t)


class _PaddedThenScaled(_PaddedToTheLongest):
    """The longest length padded to, then in float arithmetic (``1.0 /
    T``, which the float computes in C)."""

    def forward(self, xs, t):
        longest = max(len(x) for x in xs)
        return self.scored(xs, t, longest) * (1.0 / longest)


@pytest.mark.parametrize('cls, why', [
    (_PaddedThenScaled, 'compared'),
    (_PaddedLonger, 'a number computed from the lengths of the items of xs '
                    'passed to F.pad_sequence'),
    (_LongestOfTwo, 'compared')])
def test_other_uses_of_the_longest_length_keep_the_lengths(cls, why):
    calls = _batches(numpy.random.RandomState(21), (4, 4, 5, 3, 4))
    numpy.random.seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jitted = differential.check_seeded(cls(), calls)
    said = ' '.join(str(w.message) for w in caught
                    if issubclass(w.category, errors.RecompileWarning))
    assert why in said, said
    assert jitted.cache_info().currsize > 1


# --- each item's value returned ---------------------------------------------

class _ScoresOfEach(_Encoder):
    """A tagger returning each sentence's scores on its own (a list), or
    with the link's last states (``(hy, ys)``, the output sequences as
    the link gives them), or as a tuple."""

    def __init__(self, returns):
        super().__init__(L.NStepBiLSTM(1, 6, 5, 0.0))
        self.returns = returns
        self.out(numpy.zeros((1, 10), numpy.float32))  # (its weights made)

    def forward(self, xs, t):
        hy, _, ys = self.encoder(None, None, sequence_embed(self.embed, xs))
        if self.returns == 'outputs':
            return hy, ys
        scores = [self.out(y) for y in ys]
        if self.returns == 'best':  # each word's best tag, as arrays
            return [F.argmax(s, axis=1).array for s in scores]
        if self.returns == 'softmax':
            return [F.log_softmax(s) for s in scores]
        return tuple(scores) if self.returns == 'tuple' else scores


@pytest.mark.parametrize('returns', ['list', 'tuple', 'outputs', 'best',
                                     'softmax'])
@pytest.mark.parametrize('train', [True, False])
def test_each_items_value_returned_comes_from_the_joined_rows(returns,
                                                              train):
    # One entry per mode: the program returns the rows of all, cut at the
    # sentences' lengths on each call, and gradients flow back through
    # the cut.
    model = _ScoresOfEach(returns)
    twin = model.copy(mode='copy')
    jitted = chainerjit.jit(twin.forward)
    for xs, t in _batches(numpy.random.RandomState(23), _COUNTS):
        results = []
        for m, forward in ((model, model.forward), (twin, jitted)):
            m.cleargrads()
            with chainer.using_config('train', train):
                result = forward(xs, t)
            if train and returns != 'best':
                flat = result[1] if returns == 'outputs' else result
                F.sum(F.stack([F.sum(y) * (i + 1)
                               for i, y in enumerate(flat)])).backward()
            results.append((result, [p.grad for _, p in sorted(
                m.namedparams())]))
        (actual, grads), (expected, expected_grads) = results[1], results[0]
        assert type(actual) is type(expected)
        testing.assert_results_equal(actual, expected)
        for a, e in zip(grads, expected_grads):
            assert (a is None) == (e is None)
            if e is not None:
                numpy.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()


def test_items_returned_are_not_exported():
    model = _ScoresOfEach('list')
    jitted = chainerjit.jit(model.forward)
    calls = _batches(numpy.random.RandomState(24), (3, 4, 5))
    with chainer.using_config('train', False):
        for xs, t in calls:
            jitted(xs, t)
    with pytest.raises(chainerjit.errors.ExportError,
                       match='return them joined'):
        chainerjit.export_onnx(jitted, calls[-1])


class _TagsReturned(_Encoder):
    """A tagger's loss over its tags joined by NumPy, the tags returned
    besides, as the caller gave them."""

    def __init__(self):
        super().__init__(L.NStepLSTM(1, 6, 5, 0.0))
        self.out(numpy.zeros((1, 5), numpy.float32))  # (its weights made)

    def forward(self, xs, ts):
        _, _, ys = self.encoder(None, None, [self.embed(x) for x in xs])
        scores = F.concat([self.out(y) for y in ys], axis=0)
        return F.softmax_cross_entropy(scores, numpy.concatenate(ts)), ts


@pytest.mark.parametrize('train', [True, False])
def test_items_of_an_argument_returned_as_they_are(train):
    # A batch of one sentence (the list joined alone) among others: the
    # items returned are the caller's.
    rng = numpy.random.RandomState(25)
    model = _TagsReturned()
    jitted = chainerjit.jit(model.copy(mode='copy').forward)
    for lengths in ((2, 1), (3,), (3,), (4, 2, 2), (5,)):
        xs = [rng.randint(0, 30, n).astype(I32) for n in lengths]
        ts = [rng.randint(0, 3, n).astype(I32) for n in lengths]
        with chainer.using_config('train', train):
            loss, returned = jitted(xs, ts)
            testing.assert_results_equal(loss, model.forward(xs, ts)[0])
        assert len(returned) == len(ts) and all(
            (a == b).all() for a, b in zip(returned, ts))


def test_one_sentence_pair_at_a_time_serves_every_pair_of_lengths():
    # Translation, one pair a call, after training on joined batches: the
    # source's and the target's widths open, the batch of one fixed.
    rng = numpy.random.RandomState(26)
    model = _SentenceDecoder()
    jitted = chainerjit.jit(model.copy(mode='copy').forward)
    jitted(*_pairs(rng, True)[0])  # (a batch, in training: joined)
    with warnings.catch_warnings(), chainer.using_config('train', False):
        warnings.simplefilter('error', errors.RecompileWarning)
        for n, k in ((3, 4), (5, 2), (2, 2), (6, 7), (1, 3), (4, 1)):
            args = ([rng.randint(0, 30, n).astype(I32)],
                    [rng.randint(1, 30, k).astype(I32)],
                    [rng.randint(1, 30, k).astype(I32)])
            testing.assert_results_equal(jitted(*args), model.forward(*args))
    single = [str(e.signature) for e in jitted.cache_entries()
              if e.key[0] is False]
    assert len(single) == 1 and single[0].startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[1]@cpu (array), '
        'ys_in[0]: i32[W2]@cpu (array), ys_in[1]: i64[1]@cpu (array)'), \
        single


class _WordScores(chainer.Chain):
    """A score for each word of each sentence from functions of each
    sentence alone: joined by ``F.concat`` on the first axis (scored
    against the tags joined, or returned), or returned as a list
    (``how``)."""

    def __init__(self, how):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.out = L.Linear(6, 3)
        self.how = how

    def forward(self, xs, ts):
        how = self.how
        if how == 'tagged':
            h = F.concat([self.out(F.tanh(self.embed(x))) for x in xs],
                         axis=0)
            return F.softmax_cross_entropy(h, F.concat(ts, axis=0))
        if how == 'dropped':
            h = F.concat([F.dropout(self.embed(x), 0.3) for x in xs],
                         axis=0)
            return F.softmax_cross_entropy(self.out(h),
                                           F.concat(ts, axis=0))
        if how == 'concatenated':
            return F.concat([self.embed(x) for x in xs], axis=0)
        if how == 'returned':
            return [F.softmax(self.out(self.embed(x))) for x in xs]
        if how == 'returned in a tuple':
            return F.concat(ts, axis=0), [
                F.log_softmax(self.out(self.embed(x))) for x in xs]
        if how == 'reversed':
            return [self.embed(x) for x in xs[::-1]]
        if how == 'concatenated reversed':
            return F.concat([self.embed(x) for x in reversed(xs)], axis=0)
        if how == 'some returned':
            return [self.embed(x) for x in xs[:-1]]
        if how == 'two ways':
            return [F.tanh(self.embed(x)) if k % 2 else self.embed(x)
                    for k, x in enumerate(xs)]
        raise ValueError(how)


def _tagged_batches(rng, counts):
    """Sentences and a tag for each word, ``counts`` of them call by call
    (lengths 1 to 9)."""
    return [([rng.randint(0, 30, int(rng.randint(1, 10))).astype(I32)
              for _ in range(n)],) for n in counts]


def _with_tags(calls):
    return [(xs, [x % 3 for x in xs]) for xs, in calls]


@pytest.mark.parametrize('how', ['tagged', 'dropped', 'concatenated',
                                 'returned', 'returned in a tuple'])
@pytest.mark.parametrize('train', [False, True])
def test_functions_of_each_item_joined_or_returned_are_joined(how, train):
    calls = _with_tags(_tagged_batches(numpy.random.RandomState(6),
                                       (3, 2, 5, 1, 4, 7, 2)))
    model = _WordScores(how)
    if train and how in ('tagged', 'dropped'):
        jitted = checked_without_recompiling(lambda: model, calls, True)
    elif train:
        with warnings.catch_warnings():
            warnings.simplefilter('error', errors.RecompileWarning)
            warnings.simplefilter('error', errors.LoopWarning)
            jitted = differential.check_grads(None, calls, model=model,
                                              method='forward')
    else:
        jitted = checked_without_recompiling(lambda: model, calls, False)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('xs[0]: i32[W]'), \
        entry.signature


@pytest.mark.parametrize('how', ['reversed', 'concatenated reversed',
                                 'some returned', 'two ways'])
def test_functions_of_each_item_otherwise_give_eagers_values(how):
    calls = _with_tags(_tagged_batches(numpy.random.RandomState(7),
                                       (3, 2, 4, 3, 5)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        differential.check_grads(None, calls, model=_WordScores(how),
                                 method='forward', fallback_ok=True)
    if 'reversed' in how:  # (not joined in vain: the items out of order)
        assert not any('sentences joined' in str(w.message)
                       for w in caught), [str(w.message) for w in caught]


class _EachTagged(chainer.Chain):
    """A tag for each word of each sentence embedded on its own."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 4)
            self.encoder = L.NStepLSTM(1, 4, 5, 0.0)
            self.out = L.Linear(5, 3)

    def forward(self, xs, ts):
        _, _, ys = self.encoder(None, None, [self.embed(x) for x in xs])
        return F.softmax_cross_entropy(self.out(F.concat(ys, axis=0)),
                                       F.concat(ts, axis=0))


@pytest.mark.parametrize('train', [False, True])
def test_sentences_of_one_word_each_first_keep_one_entry(train):
    # (their tags, one row each, joined as labels by chance at first)
    rng = numpy.random.RandomState(8)
    calls = [([rng.randint(0, 30, n).astype(I32) for n in lengths],
              [rng.randint(0, 3, n).astype(I32) for n in lengths])
             for lengths in ((1, 1, 1), (1, 1, 1), (3, 5, 2), (2, 4),
                             (4, 7, 2, 2), (1, 1), (5, 1))]
    jitted = _agrees(_EachTagged(), calls, train)
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()


class _DroppedByPosition(chainer.Chain):
    """Each sentence dropped out at a ratio of its position in the list
    (the first four at one, the others at another), joined again into an
    N-step link, scored by a tag for each word (``how``), or summed, then
    normalized over the batch, the calls counted: the items' draws, alike
    at four sentences, are no one draw of all at more."""

    def __init__(self, how):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.encoder = L.NStepGRU(1, 6, 6, 0.0)
            self.out = L.Linear(6, 3)
            self.norm = L.BatchNormalization(3)
        self.how = how
        self.steps = 0

    def forward(self, xs, ts):
        self.steps += 1
        exs = [F.dropout(self.embed(x), 0.2 if k < 4 else 0.5)
               for k, x in enumerate(xs)]
        if self.how == 'linked':
            h = self.out(self.encoder(None, exs)[0][-1])
        elif self.how == 'tagged':
            h = self.out(F.concat(exs, axis=0))
        else:
            h = F.stack([F.sum(self.out(e), axis=0) for e in exs])
        h = self.norm(h)
        t = F.concat(ts, axis=0) if self.how == 'tagged' else \
            F.concat([t[:1] for t in ts], axis=0)
        return F.softmax_cross_entropy(h, t)


@pytest.mark.parametrize('how', ['linked', 'tagged', 'summed'])
def test_draws_of_each_items_own_are_eagers_at_every_count(how):
    rng = numpy.random.RandomState(2)
    calls = [([rng.randint(0, 30, n).astype(I32) for n in lengths],
              [rng.randint(0, 3, n).astype(I32) for n in lengths])
             for lengths in ((2, 3, 2, 4), (5, 2, 3, 1, 2, 3, 4),
                             (3, 3, 1, 2, 5, 2), (2, 2, 3, 4))]
    model = _DroppedByPosition(how)
    twin = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        differential.check_seeded(model, calls, twin=twin,
                                  jitted=chainerjit.jit(twin.forward))
    numpy.testing.assert_allclose(twin.norm.avg_mean, model.norm.avg_mean,
                                  rtol=1e-5, atol=1e-6)
    assert twin.steps == model.steps


class _DroppedByPositionLazily(chainer.Chain):
    """Each sentence dropped out at a ratio of its position, the words
    normalized over the batch, and, where ``extra`` is given, the first
    sentence through a lazily initialized layer too."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.norm = L.BatchNormalization(6)
            self.extra = L.Linear(None, 3)

    def forward(self, xs, extra=False):
        h = self.norm(F.concat([F.dropout(self.embed(x), 0.2 if k < 4
                                          else 0.5)
                                for k, x in enumerate(xs)], axis=0))
        return F.sum(h * h) + F.sum(self.extra(self.embed(xs[0]))) \
            if extra else F.sum(h * h)


def test_draws_of_each_items_own_rerun_from_links_outside_and_lazy_ones():
    # (the model a closure's, not the jitted function's own; a layer first
    # initialized at the call that runs again eagerly)
    rng = numpy.random.RandomState(3)
    calls = [([rng.randint(0, 30, n).astype(I32) for n in lengths], extra)
             for lengths, extra in (((2, 3, 2), False),
                                    ((5, 2, 3, 1, 2, 3, 4), True),
                                    ((3, 3, 1, 2, 5, 2), True))]
    model = _DroppedByPositionLazily()
    twin = copy.deepcopy(model)

    def forward(xs, extra):
        return twin(xs, extra=extra)
    jitted = chainerjit.jit(forward)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for seed, (xs, extra) in enumerate(calls):
            numpy.random.seed(seed)
            expected = model(xs, extra=extra)
            drawn_next = numpy.random.rand()  # (as many draws made)
            numpy.random.seed(seed)
            testing.assert_results_equal(jitted(xs, extra), expected)
            assert numpy.random.rand() == drawn_next
    numpy.testing.assert_allclose(twin.norm.avg_mean, model.norm.avg_mean,
                                  rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(twin.extra.W.array, model.extra.W.array)


# --- items cut off the graph ------------------------------------------------

class _CutOff(chainer.Chain):
    """Words embedded one sentence at a time into an N-step GRU, and what
    the forward does with the items off the graph (``how``)."""

    def __init__(self, how):
        super().__init__()
        self.how = how
        with self.init_scope():
            self.embed = L.EmbedID(10, 3)
            self.rnn = L.NStepGRU(1, 3, 3, 0.0)
            self.mid = L.Linear(3, 3)
            self.out = L.Linear(3, 2)

    def forward(self, xs):
        if self.how == 'frozen encoder':
            with chainer.no_backprop_mode():
                hy, _ = self.rnn(None, [self.embed(x) for x in xs])
            return F.sum(self.out(hy[-1]) + self.out(F.stack(
                [F.sum(self.embed(x), axis=0) for x in xs])))
        hy, ys = self.rnn(None, [self.embed(x) for x in xs])
        if self.how == 'arrays':
            ys = [y.array for y in ys]
        elif self.how == 'new variables':
            ys = [chainer.Variable(y.array) for y in ys]
        elif self.how == 'unchained':
            for y in ys:
                y.unchain()
        elif self.how == 'joined again':
            return F.sum(self.mid(F.concat([y.array for y in ys], axis=0))) \
                + F.sum(hy * hy)
        return F.sum(self.out(F.stack(
            [F.sum(self.mid(y), axis=0) for y in ys])) + self.out(hy[0]))


@pytest.mark.parametrize('how', ['arrays', 'new variables', 'unchained',
                                 'joined again', 'frozen encoder'])
def test_items_cut_off_the_graph_get_no_gradient_at_any_call(how):
    # The call that first joins the lists too.
    rng = numpy.random.RandomState(21)
    calls = [([rng.randint(0, 10, k).astype(I32) for k in lengths],)
             for lengths in ((4, 1, 5), (3, 2, 1), (2, 2, 5), (1, 4, 4, 2),
                             (5, 3), (2, 6, 1))]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        jitted = differential.check_seeded(_CutOff(how), calls)
    if how == 'frozen encoder':  # (the rows made without gradient apart)
        assert len(jitted.cache_entries()) == 1, jitted.cache_report()


# --- a decoder's step of every sentence -------------------------------------

def test_the_seq2seq_examples_translation_compiles_once():
    # Its decoder's step splits the words of all sentences into one row
    # each (F.split_axis(eys, batch, 0)) for the N-step link, inside the
    # loop of steps before the graph break that cuts each output at its
    # end of sentence.
    from benchmarks.bench_programs import models
    numpy.random.seed(0)
    model = models()[6]()
    twin = model.copy(mode='copy')
    jitted = chainerjit.jit(twin.translate)
    rng = numpy.random.RandomState(24)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for n in (3, 5, 2, 7, 4, 6, 3, 8, 5, 2):
            xs = [rng.randint(1, 100, k).astype(I32)
                  for k in rng.randint(1, 10, n)]
            expected, actual = model.translate(xs, 6), jitted(xs, 6)
            assert [y.tolist() for y in actual] == \
                [y.tolist() for y in expected]
    assert jitted.cache_info().compiles <= 3, jitted.cache_report()
    entry, = jitted.graph_break()[1]['prefix'].cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu'), entry.signature
