"""List arguments read whole (``frontend.joining``): joined into one array
at the call boundary, so that one entry per mode serves any number of
items and any lengths, with values and gradients equal to eager's; and
where the forward reads a list otherwise, the number of items stays in
the key, with a warning that says why."""

import copy
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
from tests.runtime_tests.test_ragged_lists import _BagOfWords
from tests.runtime_tests.test_ragged_lists import _Convolutions
from tests.runtime_tests.test_ragged_lists import _Convolutions1D
from tests.runtime_tests.test_ragged_lists import _example
from tests.runtime_tests.test_ragged_lists import _ExampleBagOfWords
from tests.runtime_tests.test_ragged_lists import _model
from tests.runtime_tests.test_ragged_lists import _PaddedSequences
from tests.runtime_tests.test_ragged_lists import _PerItem
from tests import differential

I32 = numpy.int32
F32 = numpy.float32


def _batches(rng, counts, low=2, high=12):
    """Sentences and their labels, ``counts`` of them call by call."""
    calls = []
    for n in counts:
        xs = [rng.randint(0, 30, int(rng.randint(low, high))).astype(I32)
              for _ in range(n)]
        calls.append((xs, [rng.randint(0, 3, (1,)).astype(I32)
                           for _ in range(n)]))
    return calls


_COUNTS = (4, 4, 7, 2, 9, 4, 16, 3, 5)


class _PerSentence(_ExampleBagOfWords):
    """The example's bag of words, its loss divided by the number of
    sentences (a symbol)."""

    def forward(self, xs, ys):
        return super().forward(xs, ys) / len(xs)


class _EmbeddedThenPadded(_PerItem):
    """Each sentence embedded, then padded by ``F.pad_sequence``, a
    convolution over the words and their maximum."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.conv = chainer.links.Convolution1D(6, 4, 3, pad=1)

    def forward(self, xs, ys):
        h = F.pad_sequence([self.embed(x) for x in xs], padding=0.)
        h = F.max(F.relu(self.conv(F.transpose(h, (0, 2, 1)))), axis=2)
        return F.softmax_cross_entropy(h, F.concat(ys, axis=0))


class _MaskedMean(_PerItem):
    """Each sentence embedded, then padded, and its mean over its words
    by a mask made of the lengths (``arange(W) < lengths``)."""

    def forward(self, xs, ys):
        lengths = self.xp.array([len(x) for x in xs], 'i')
        h = F.pad_sequence([self.embed(x) for x in xs], padding=0.)
        mask = self.xp.arange(h.shape[1])[None, :] < lengths[:, None]
        mask = F.broadcast_to(mask[:, :, None].astype('f'), h.shape)
        h = F.sum(h * mask, axis=1) / lengths[:, None].astype('f')
        return F.softmax_cross_entropy(h[:, :3], F.concat(ys, axis=0))


class _MeanByLength(_PerItem):
    """A bag of words as people write it by hand: each sentence's
    embeddings summed and divided by its length, stacked."""

    def forward(self, xs, ys):
        h = F.stack([F.sum(self.embed(x), axis=0) / len(x) for x in xs])
        return F.softmax_cross_entropy(self.fc(h), F.concat(ys, axis=0))


class _MeanByLengthInALoop(_PerItem):
    """The same in a loop naming each sentence's embeddings, divided by
    ``x.shape[0]``."""

    def forward(self, xs, ys):
        hs = []
        for x in xs:
            e = F.tanh(self.embed(x))
            hs.append(F.sum(e, axis=0) / x.shape[0])
        return F.softmax_cross_entropy(self.fc(F.stack(hs)),
                                       F.concat(ys, axis=0))


class _MeanKeptAndJoined(_PerItem):
    """Each sentence's mean by hand with its axis kept, joined by
    ``F.concat(..., axis=0)``."""

    def forward(self, xs, ys):
        means = F.concat([F.sum(self.embed(x), axis=0, keepdims=True) /
                          len(x) for x in xs], axis=0)
        return F.softmax_cross_entropy(self.fc(means), F.concat(ys, axis=0))


@pytest.mark.parametrize('cls, signature', [
    (_BagOfWords, 'xs: i32[B,W]@cpu (array), ys: i32[B]@cpu (array)'),
    # each item embedded, then padded: the words and their lengths
    (_PaddedSequences, 'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu'),
    (_EmbeddedThenPadded, 'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu'),
    (_MaskedMean, 'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu'),
    (_MeanByLength, 'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu'),
    (_MeanByLengthInALoop, 'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu'),
    (_MeanKeptAndJoined, 'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu'),
    (_Convolutions, 'xs: i32[B,W]@cpu (array), ys: i32[B]@cpu (array)'),
    (_Convolutions1D, 'xs: i32[B,W]@cpu (array), ys: i32[B]@cpu (array)'),
    # the items' lengths too, for its xp.array([len(x) for x in xs])
    (_ExampleBagOfWords, 'xs[0]: i32[B,W]@cpu (array), xs[1]: i64[B]@cpu '
     '(array), ys: i32[B]@cpu (array)'),
    (_PerSentence, 'xs[0]: i32[B,W]@cpu (array), xs[1]: i64[B]@cpu')])
def test_text_classifier_trains_at_any_batch_size_and_lengths(cls,
                                                              signature):
    calls = _batches(numpy.random.RandomState(3), _COUNTS)
    jitted = checked_without_recompiling(lambda: _model(cls), calls, True)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(signature), entry.signature
    assert jitted.cache_info().compiled >= 2  # (new sizes check eagerly)


def _scores(model, xs):
    return model.scores(xs)


@pytest.mark.parametrize('train', [False, True])
def test_cnn_classifier_serves_any_batch_size_in_inference(train):
    model = _model(_Convolutions)
    jitted = chainerjit.jit(model.scores)
    rng = numpy.random.RandomState(4)
    with chainer.no_backprop_mode(), chainer.using_config('train', train):
        for xs, _ in _batches(rng, (1, 3, 3, 8, 2, 64, 5, 1, 30)):
            numpy.random.seed(len(xs))
            expected = model.scores(xs)
            numpy.random.seed(len(xs))
            testing.assert_results_equal(jitted(xs), expected)
    # the batch of one sentence recorded first is served by the entry of
    # every batch size once there is one (checked at its first call)
    assert [str(e.signature)[:12] for e in jitted.cache_entries()] == \
        ['xs: i32[B,W]'], jitted.cache_report()


class _Stacked(chainer.Chain):
    """Feature vectors of one size stacked into a batch (``F.stack``)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = chainer.links.Linear(5, 3)

    def forward(self, xs, ts):
        h = self.fc(F.stack(xs))
        return F.softmax_cross_entropy(h, F.concat(ts, axis=0)) + \
            F.sum(h) / len(xs)


def test_stacked_items_and_their_count_read_by_len():
    rng = numpy.random.RandomState(5)
    calls = [([rng.standard_normal(5).astype(F32) for _ in range(n)],
              [rng.randint(0, 3, (1,)).astype(I32) for _ in range(n)])
             for n in (3, 3, 6, 2, 11, 4, 8)]
    jitted = differential.check_seeded(_model(_Stacked), calls)
    entry, = jitted.cache_entries()
    assert 'xs: f32[B,5]@cpu (array), ts: i32[B]' in str(entry.signature)


class _LabelsRead(_PerItem):
    """Labels joined by ``F.concat``, and the first label read again."""

    def forward(self, xs, ys):
        h = F.concat([F.sum(self.fc(self.embed(x)), axis=0, keepdims=True)
                      for x in xs], axis=0)
        return F.softmax_cross_entropy(h, F.concat(ys, axis=0)) + \
            F.sum(h[0] * ys[0].astype(F32))


class _Counted(_BagOfWords):
    """The items counted by a Python loop over the list."""

    def forward(self, xs, ys):
        n = 0
        for _ in xs:
            n += 1
        return super().forward(xs, ys) * (1. / n)


class _ShapeRead(_BagOfWords):
    """The padded block's width read by the forward's Python."""

    def forward(self, xs, ys):
        x_block = chainer.dataset.convert.concat_examples(xs, padding=-1)
        h = F.max(self.embed(x_block), axis=1) * (1. / x_block.shape[1])
        return F.softmax_cross_entropy(self.out(h), F.concat(ys, axis=0))


class _LongestRead(_ExampleBagOfWords):
    """The longest sentence's length, computed in Python, besides the
    array of the lengths."""

    def forward(self, xs, ys):
        return super().forward(xs, ys) * (1. / max(len(x) for x in xs))


class _StepsOfTheFirst(_ExampleBagOfWords):
    """A Python loop as long as the first sentence, besides the array of
    the lengths."""

    def forward(self, xs, ys):
        loss = super().forward(xs, ys)
        for _ in range(len(xs[0])):
            loss = loss * 0.9
        return loss


@pytest.mark.parametrize('cls, why', [
    (_StepsOfTheFirst, 'reads the length of an item'),
    (_LabelsRead, None),
    (_Counted, 'xs.shape[0] counted by iterating over the list at '
     'test_joined_lists.py:'),
    (_ShapeRead, None),
    # (two sizes compared with each other, not their product)
    (_LongestRead, 'xs[1].shape[0] and xs[0].shape[0] compared at '
     'test_joined_lists.py:')])
def test_a_list_read_otherwise_keeps_its_count_in_the_key(cls, why):
    calls = _batches(numpy.random.RandomState(6), (3, 3, 5, 4, 5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jitted = differential.check_seeded(_model(cls), calls)
    messages = [str(w.message) for w in caught
                if issubclass(w.category, errors.RecompileWarning)]
    assert any('number of items' in m or 'lengths of the items' in m
               for m in messages), messages
    if why is not None:
        assert any(why in m for m in messages), messages
    assert all('xs: i32[B,W]' not in str(e.signature)
               for e in jitted.cache_entries())


def test_a_function_that_may_not_vary_sizes_keeps_lists_item_by_item():
    model = _model(_BagOfWords)
    jitted = chainerjit.jit(model.forward, dynamic=False)
    for xs, ys in _batches(numpy.random.RandomState(7), (3, 3, 4)):
        numpy.random.seed(0)
        expected = model.forward(xs, ys)
        numpy.random.seed(0)
        testing.assert_results_equal(jitted(xs, ys), expected)
    assert all('xs[0]' in str(e.signature) for e in jitted.cache_entries())


def test_explain_and_the_printed_program_show_the_joined_list():
    model = _model(_BagOfWords)
    jitted = chainerjit.jit(model.forward)
    calls = _batches(numpy.random.RandomState(8), (3, 4, 5))
    for xs, ys in calls:
        jitted(xs, ys)
    said = jitted.explain(*_batches(numpy.random.RandomState(9), (6,))[0])
    assert 'would hit entry #0: xs: i32[B,W]' in said, said
    graph = str(jitted.cache_entries()[0].graph)
    assert 'PadSequence' not in graph and 'Concat' not in graph, graph


@settings(deadline=None, max_examples=12)
@given(st.sampled_from([_BagOfWords, _Convolutions, _ExampleBagOfWords]),
       st.lists(st.lists(st.integers(1, 14), min_size=1, max_size=12)
                .filter(lambda lengths: max(lengths) > 1),
                min_size=3, max_size=6),
       st.booleans(), st.integers(0, 2 ** 16))
def test_any_counts_and_lengths_in_training_or_inference(
        cls, batches, train, seed):
    """Batches of random counts and lengths, through the padded text
    classifiers, in training (losses, gradients, dropout's draws) or in
    inference: eager's results, one entry (and one for a single
    sentence)."""
    rng = numpy.random.RandomState(seed)
    calls = [([rng.randint(0, 30, n).astype(I32) for n in lengths],
              [rng.randint(0, 3, (1,)).astype(I32) for _ in lengths])
             for lengths in batches]
    jitted = checked_without_recompiling(lambda: _model(cls), calls, train)
    assert len(jitted.cache_entries()) <= 1 + any(
        len(lengths) == 1 for lengths in batches)


def checked_without_recompiling(make_model, calls, train):
    """``jit(model.forward)`` of ``make_model()`` against eager over
    ``calls``, in training (``differential.check_seeded``) or in
    inference, with no warning of a size kept in the key or a loop
    unrolled."""
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        warnings.simplefilter('error', errors.LoopWarning)
        if train:
            return differential.check_seeded(make_model(), calls)
        model = make_model()
        jitted = chainerjit.jit(model.forward)
        with chainer.no_backprop_mode(), \
                chainer.using_config('train', False):
            for args in calls:
                testing.assert_results_equal(jitted(*args),
                                             model.forward(*args))
    return jitted


class _Reported(_Convolutions):
    """The example's classifier as it trains: its loss and accuracy
    reported."""

    def forward(self, xs, ys):
        h, t = self.scores(xs), F.concat(ys, axis=0)
        loss = F.softmax_cross_entropy(h, t)
        chainer.report({'loss': loss, 'accuracy': F.accuracy(h, t)}, self)
        return loss


def reported_step(model, forward, optimizer, seed, args):
    """One training step: the loss, and what it reported."""
    numpy.random.seed(seed)
    observation = {}
    with chainer.reporter.Reporter().scope(observation):
        chainer.reporter.get_current_reporter().add_observer('main', model)
        loss = forward(*args)
    model.cleargrads()
    loss.backward()
    optimizer.update()
    return loss.array, dict((k, getattr(v, 'array', v))
                            for k, v in observation.items())


def test_reports_and_updates_of_a_joined_classifier():
    model = _model(_Reported)
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    optimizers = [chainer.optimizers.Adam(), chainer.optimizers.Adam()]
    optimizers[0].setup(model)
    optimizers[1].setup(twin)
    calls = _batches(numpy.random.RandomState(10), (5, 5, 8, 3, 8, 8, 2))
    for seed, args in enumerate(calls):
        eager = reported_step(model, model.forward, optimizers[0], seed,
                              args)
        compiled = reported_step(twin, jitted, optimizers[1], seed, args)
        testing.assert_results_equal(compiled, eager)
    entry, = jitted.cache_entries()
    assert 'xs: i32[B,W]' in str(entry.signature)


class _SumOfACutByLength(_PerItem):
    """Each sentence but its first word summed, divided by its whole
    length: no mean of the rows summed."""

    def forward(self, xs, ys):
        h = F.stack([F.sum(self.embed(x[1:]), axis=0) / len(x) for x in xs])
        return F.softmax_cross_entropy(self.fc(h), F.concat(ys, axis=0))


def test_a_sum_divided_by_another_length_is_not_a_mean():
    calls = _batches(numpy.random.RandomState(8), _COUNTS)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.RecompileWarning)
        differential.check_grads(None, calls,
                                 model=_model(_SumOfACutByLength),
                                 method='forward', fallback_ok=True)


@pytest.mark.parametrize('cls', [_MeanByLength, _MeanKeptAndJoined])
def test_a_mean_by_hand_is_joined_in_inference_too(cls):
    # (no backprop: the sum's node has no creator to take its rows from)
    calls = _batches(numpy.random.RandomState(9), _COUNTS)
    jitted = checked_without_recompiling(lambda: _model(cls), calls, False)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('xs[0]: i32[W]@cpu (array)'), \
        entry.signature


class _Pairs(chainer.Chain):
    """Pairs of sentences, each list padded on its own (``concat_examples``
    of the premises and of the hypotheses): a width for each."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6, ignore_label=-1)
            self.out = L.Linear(12, 3)

    def forward(self, xs, ys):
        xb = chainer.dataset.convert.concat_examples(xs, padding=-1)
        yb = chainer.dataset.convert.concat_examples(ys, padding=-1)
        h = F.concat((F.sum(self.embed(xb), axis=1),
                      F.max(F.dropout(self.embed(yb), 0.2), axis=1)))
        return self.out(h)


class _AttendedAcross(_Pairs):
    """A target list attending to a source list, both padded, its scores
    ``(B, W2, W)`` masked past each source's end, a loss per target word
    of the target cut by one (``yb[:, 1:]``, a class of three per word;
    the padding, ``-1``, stays ignored)."""

    def forward(self, xs, ys):
        xb = chainer.dataset.convert.concat_examples(xs, padding=-1)
        yb = chainer.dataset.convert.concat_examples(ys, padding=-1)
        hx, hy = self.embed(xb), self.embed(yb[:, :-1])
        scores = F.matmul(hy, hx, transb=True)
        scores = F.where(F.broadcast_to((xb >= 0)[:, None, :], scores.shape),
                         scores, self.xp.full(scores.shape, -1e9, F32))
        context = F.matmul(F.softmax(scores, axis=2), hx)
        batch, width = hy.shape[:2]
        y = self.out(F.reshape(F.concat((context, hy), axis=2),
                               (batch * width, 12)))
        return F.softmax_cross_entropy(y, yb[:, 1:].reshape(-1) // 10)


class _PairsScored(_Pairs):
    def forward(self, xs, ys):
        return F.sum(super().forward(xs, ys) ** 2)


@pytest.mark.parametrize('cls, train', [
    (_Pairs, False), (_PairsScored, True), (_AttendedAcross, False),
    (_AttendedAcross, True)])
def test_two_padded_lists_have_a_width_each(cls, train):
    rng = numpy.random.RandomState(4)
    calls = [([rng.randint(0, 30, int(rng.randint(1, 9))).astype(I32)
               for _ in range(n)],
              [rng.randint(0, 30, int(rng.randint(2, 14))).astype(I32)
               for _ in range(n)]) for n in _COUNTS]
    jitted = checked_without_recompiling(lambda: _model(cls), calls, train)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs: i32[B,W]@cpu (array), ys: i32[B,W2]@cpu'), entry.signature


class _FramedThenPadded(chainer.Chain):
    """Targets after a first word, padded (a decoder's inputs): the first
    word joined by ``F.concat`` or by NumPy; or both the inputs and the
    targets before a last word, each padded (the items framed twice)."""

    def __init__(self, how='concat'):
        super().__init__()
        self.how = how
        with self.init_scope():
            self.embed = L.EmbedID(30, 6, ignore_label=-1)

    def forward(self, ys):
        bos = self.xp.array([1], I32)
        if self.how == 'concat':
            framed = [F.concat([bos, y], axis=0) for y in ys]
        else:
            framed = [self.xp.concatenate([bos, y]) for y in ys]
        block = F.pad_sequence(framed, padding=-1).array
        if self.how == 'both':  # (the targets, before a last word)
            eos = self.xp.array([0], I32)
            targets = chainer.dataset.convert.concat_examples(
                [self.xp.concatenate([y, eos]) for y in ys], padding=-1)
            return F.sum(self.embed(block) * self.embed(targets), axis=(1, 2))
        return F.sum(F.tanh(self.embed(block)) ** 2, axis=(1, 2))


@pytest.mark.parametrize('how', ['concat', 'numpy', 'both'])
@pytest.mark.parametrize('train', [False, True])
def test_items_framed_then_padded_serve_every_count_and_length(how, train):
    rng = numpy.random.RandomState(6)
    calls = [([rng.randint(0, 30, int(rng.randint(1, 12))).astype(I32)
               for _ in range(n)],) for n in _COUNTS]

    class Summed(_FramedThenPadded):  # (a loss to train on)
        def forward(self, ys):
            return F.sum(super().forward(ys))
    cls = Summed if train else _FramedThenPadded
    jitted = checked_without_recompiling(
        lambda: _model(lambda: cls(how)), calls, train)
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()


class _SourceAndFramedTargets(chainer.Chain):
    """A source list padded, and targets framed two ways and padded (the
    decoder's inputs after a first word, its targets before a last), as
    a transformer's training step writes them: the targets' block merged
    with the batch, by a linear layer over two batch axes and by
    ``(-1, E)``, for the words' scores and their loss."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6, ignore_label=-1)
            self.query = L.Linear(6, 6)
            self.words = L.Linear(6, 30)

    def forward(self, xs, ys):
        xp = self.xp
        x_block = chainer.dataset.convert.concat_examples(xs, padding=-1)
        y_in = chainer.dataset.convert.concat_examples(
            [xp.concatenate([xp.array([1], I32), y]) for y in ys], padding=-1)
        y_out = chainer.dataset.convert.concat_examples(
            [xp.concatenate([y, xp.array([0], I32)]) for y in ys], padding=-1)
        hx, hy = self.embed(x_block), self.embed(y_in)
        scores = F.matmul(self.query(hy, n_batch_axes=2), hx, transb=True)
        scores = F.where(F.broadcast_to((x_block >= 0)[:, None, :],
                                        scores.shape),
                         scores, xp.full(scores.shape, -1e9, F32))
        h = F.matmul(F.softmax(scores, axis=2), hx) + hy
        logits = self.words(F.reshape(h, (-1, 6)))
        return F.softmax_cross_entropy(logits, y_out.reshape(-1))


@pytest.mark.parametrize('train', [False, True])
def test_a_source_and_framed_targets_serve_every_count_and_length(train):
    rng = numpy.random.RandomState(8)
    calls = [([rng.randint(0, 30, int(rng.randint(1, 9))).astype(I32)
               for _ in range(n)],
              [rng.randint(2, 30, int(rng.randint(1, 12))).astype(I32)
               for _ in range(n)]) for n in _COUNTS]
    jitted = checked_without_recompiling(
        lambda: _model(_SourceAndFramedTargets), calls, train)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('xs: i32[B,W]@cpu'), \
        entry.signature


class _StackedByNumPy(_Stacked):
    """Feature vectors stacked by NumPy (``xp.stack(xs)``), their labels
    joined by NumPy (``xp.concatenate(ts)``)."""

    def forward(self, xs, ts):
        h = self.fc(self.xp.stack(xs))
        return F.softmax_cross_entropy(h, self.xp.concatenate(ts))


class _ConvertedByNumPy(_Stacked):
    """Feature vectors made one array by ``numpy.asarray(xs)``, their
    labels by ``numpy.concatenate(ts, axis=0)``."""

    def forward(self, xs, ts):
        h = self.fc(numpy.asarray(xs))
        return F.softmax_cross_entropy(h, numpy.concatenate(ts, axis=0))


@pytest.mark.parametrize('cls', [_StackedByNumPy, _ConvertedByNumPy])
@pytest.mark.parametrize('train', [True, False])
def test_lists_joined_by_numpy_serve_every_count(cls, train):
    # (NumPy's dispatch iterating over the list is not a loop counting
    # its items)
    rng = numpy.random.RandomState(9)
    calls = [([rng.standard_normal(5).astype(F32) for _ in range(n)],
              [rng.randint(0, 3, (1,)).astype(I32) for _ in range(n)])
             for n in (3, 3, 6, 2, 11, 4, 8)]
    jitted = checked_without_recompiling(lambda: _model(cls), calls, train)
    entry, = jitted.cache_entries()
    assert 'xs: f32[B,5]@cpu (array), ts: i32[B]' in str(entry.signature)


class _ShapeOfThePaddedBlock(_PerItem):
    """The padded block's shape unpacked (``B, T = x.shape``), its width
    dividing a Variable, its batch size scaling a float literal; in
    inference, an array of its shape returned too (``xp.zeros(x.shape)``).
    """

    def forward(self, xs, ys):
        x = F.pad_sequence(xs, padding=-1)
        B, T = x.shape
        h = F.sum(self.embed(x), axis=1) / T
        loss = F.softmax_cross_entropy(self.fc(h), F.concat(ys, axis=0)) + \
            0.01 * B
        if chainer.config.train:
            return loss
        return loss, self.xp.zeros(x.shape, F32)


@pytest.mark.parametrize('train', [True, False])
def test_sizes_of_the_padded_block_in_python_serve_every_shape(train):
    calls = _batches(numpy.random.RandomState(12), _COUNTS)
    jitted = checked_without_recompiling(
        lambda: _model(_ShapeOfThePaddedBlock), calls, train)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('xs: i32[B,W]@cpu'), \
        entry.signature


class _MaskedSteps(_PerItem):
    """A GRU over the padded sentences, each step masked by the lengths,
    the last states classified."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.cell = L.StatelessGRU(6, 5)
            self.out = L.Linear(5, 3)

    def forward(self, xs, ys):
        padded = F.pad_sequence(xs, padding=0).array
        lengths = self.xp.array([len(x) for x in xs], I32)
        words = self.embed(padded)
        h = self.xp.zeros((len(xs), 5), F32)
        for t in range(padded.shape[1]):
            m = (lengths > t).astype(F32)[:, None]
            h = m * self.cell(h, words[:, t]) + (1 - m) * h
        return F.softmax_cross_entropy(self.out(h), F.concat(ys, axis=0))


@pytest.mark.parametrize('train', [False, True])
@pytest.mark.parametrize('lengths', [
    [[6, 3, 2, 9, 1, 4, 4], [2, 2], [12], [1], [3, 8], [1, 1, 1, 1, 1],
     [7, 5, 3], [4, 6], [2]],
    [[2, 2], [1, 1, 1], [5, 3], [9, 2, 2], [2, 1]],
])
def test_sentences_too_short_to_open_at_first_keep_the_lists_joined(
        lengths, train):
    # Two words are too few for the loop to roll, one row broadcasts:
    # those calls' entries keep the width, the lists stay joined, and the
    # first call of longer sentences serves them all.
    rng = numpy.random.RandomState(len(lengths))
    calls = [([rng.randint(0, 30, n).astype(I32) for n in batch],
              [rng.randint(0, 3, (1,)).astype(I32) for _ in batch])
             for batch in lengths]
    jitted = checked_without_recompiling(_MaskedSteps, calls, train)
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()
    assert str(jitted.cache_entries()[0].signature).startswith(
        'xs[0]: i32[B,T]'), jitted.cache_report()


class _ShiftedStates(chainer.Chain):
    """An N-step GRU over the embedded sentences, its last states shifted
    by an argument whose second axis is the sentences (``(2, len(xs),
    H)``, as a link's states passed in are)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 4)
            self.rnn = L.NStepGRU(2, 4, 5, 0.0)
            self.out = L.Linear(5, 3)

    def forward(self, xs, shift):
        hy, _ = self.rnn(None, [self.embed(x) for x in xs])
        return self.out(hy[-1] + shift[1])


@pytest.mark.parametrize('train', [False, True])
def test_an_argument_of_the_sentences_on_its_second_axis_follows_them(
        train):
    rng = numpy.random.RandomState(7)
    calls = [([rng.randint(0, 30, n).astype(I32) for n in lengths],
              rng.standard_normal((2, len(lengths), 5)).astype(F32))
             for lengths in ([3, 5], [4], [2, 7, 1], [6, 2, 3, 9, 1], [5, 5],
                             [8, 1, 1])]
    model = _ShiftedStates()
    eager = copy.deepcopy(model)
    jitted = chainerjit.jit(model.forward)
    with chainer.using_config('train', train):
        for xs, shift in calls:
            model.cleargrads()
            eager.cleargrads()
            ours, theirs = jitted(xs, shift), eager.forward(xs, shift)
            testing.assert_results_equal(ours, theirs, 1e-5, 1e-6)
            if train:
                F.sum(ours).backward()
                F.sum(theirs).backward()
                for (_, p), (_, q) in zip(sorted(model.namedparams()),
                                          sorted(eager.namedparams())):
                    testing.assert_results_equal(p.grad, q.grad, 1e-5,
                                                 1e-6)
    signatures = [str(e.signature) for e in jitted.cache_entries()]
    assert len(signatures) == 1, jitted.cache_report()
    assert 'shift: f32[2,B,5]' in signatures[0], signatures


class _StatesPassedIn(chainer.Chain):
    """A decoder over the embedded sentences whose N-step link starts from
    states the caller passes (``hx``, and ``cx`` of an LSTM: ``(layers,
    len(xs), H)``), scoring each word against its tag."""

    def __init__(self, link, units):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 4)
            self.rnn = link
            self.out = L.Linear(units, 3)

    def forward(self, xs, ts, hx, cx=None):
        return self.scored((hx,) if cx is None else (hx, cx), xs, ts)

    def scored(self, states, xs, ts):
        found = self.rnn(*states, [self.embed(x) for x in xs])
        hy, ys = found[0], found[-1]
        return F.softmax_cross_entropy(self.out(F.concat(ys, axis=0)),
                                       F.concat(ts, axis=0)) + \
            F.sum(hy[-1] * hy[-1])


class _StatesPassedAsATuple(_StatesPassedIn):
    """The states passed as one tuple, a list argument of its own count
    (the first call's is the sentences' too: not joined then)."""

    def forward(self, states, xs, ts):
        return self.scored(states, xs, ts)


_STATES_PASSED = {  # (link, its units, its number of states, layers)
    'lstm': (lambda: L.NStepLSTM(2, 4, 5, 0.0), 5, 2, 2),
    'gru': (lambda: L.NStepGRU(1, 4, 5, 0.0), 5, 1, 1),
    'bilstm': (lambda: L.NStepBiLSTM(1, 4, 5, 0.0), 10, 2, 2),
}


@pytest.mark.parametrize('name', sorted(_STATES_PASSED))
@pytest.mark.parametrize('as_tuple', [False, True])
@pytest.mark.parametrize('train', [False, True])
def test_an_n_step_link_given_its_states_serves_every_count(
        name, as_tuple, train):
    # The first count is the number of layers: the states' first axis is
    # that number too, but the second is the sentences'.
    link, units, n_states, layers = _STATES_PASSED[name]
    rng = numpy.random.RandomState(8)
    calls = []
    for lengths in ([3, 5], [4, 1, 6], [2, 7, 1, 3], [6, 2, 3, 9, 1], [5],
                    [8, 1]):
        states = tuple(rng.standard_normal((layers, len(lengths), 5))
                       .astype(F32) for _ in range(n_states))
        calls.append((states,
                      [rng.randint(0, 30, n).astype(I32) for n in lengths],
                      [rng.randint(0, 3, n).astype(I32) for n in lengths]))
    model = (_StatesPassedAsATuple if as_tuple else _StatesPassedIn)(
        link(), units)
    eager = copy.deepcopy(model)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        with chainer.using_config('train', train), \
                chainer.using_config('enable_backprop', train):
            for states, xs, ts in calls:
                ours = tuple(chainer.Variable(s.copy()) for s in states)
                theirs = tuple(chainer.Variable(s.copy()) for s in states)
                model.cleargrads()
                eager.cleargrads()
                loss, expected = (jitted(ours, xs, ts),
                                  eager.forward(theirs, xs, ts)) \
                    if as_tuple else (jitted(xs, ts, *ours),
                                      eager.forward(xs, ts, *theirs))
                testing.assert_results_equal(loss, expected, 1e-5, 1e-6)
                if train:
                    loss.backward()
                    expected.backward()
                    for p, q in zip(ours + tuple(
                            p for _, p in sorted(model.namedparams())),
                            theirs + tuple(
                                p for _, p in sorted(eager.namedparams()))):
                        testing.assert_results_equal(p.grad, q.grad, 1e-4,
                                                     1e-5)
    signatures = [str(e.signature) for e in jitted.cache_entries()]
    assert len(signatures) == 1, jitted.cache_report()
    assert '%s: f32[%d,B,5]' % ('states[0]' if as_tuple else 'hx', layers) \
        in signatures[0], signatures


class _OneStateUnread(_StatesPassedIn):
    """A GRU's decoder called as an LSTM's is: it reads ``hx`` but not
    ``cx``, whose first axis is as many as the sentences once (its four
    layers, at four sentences), and passed before the sentences."""

    def __init__(self):
        super().__init__(L.NStepBiGRU(2, 4, 5, 0.0), 10)

    def forward(self, hx, cx, xs, ts):
        return self.scored((hx,), xs, ts)


def test_an_unread_state_as_many_as_the_sentences_keeps_its_batch_axis():
    rng = numpy.random.RandomState(2)
    calls = []
    for count in (1, 2, 3, 4, 5, 6, 4):
        lengths = rng.randint(1, 8, count)
        calls.append(tuple(rng.standard_normal((4, count, 5)).astype(F32)
                           for _ in range(2)) +
                     ([rng.randint(0, 30, n).astype(I32) for n in lengths],
                      [rng.randint(0, 3, n).astype(I32) for n in lengths]))
    jitted = differential.check_grads(None, calls, model=_OneStateUnread(),
                                      method='forward')
    signatures = [str(e.signature) for e in jitted.cache_entries()]
    assert len(signatures) == 1, jitted.cache_report()
    assert 'cx: f32[4,B,5]' in signatures[0], signatures


class _FunctionalBiGRU(_ShiftedStates):
    """``F.n_step_bigru`` over the embedded sentences, sorted and
    transposed, its first states zeros the forward makes."""

    def __init__(self):
        chainer.Chain.__init__(self)
        with self.init_scope():
            self.embed = L.EmbedID(30, 4)
            self.rnn = L.NStepBiGRU(1, 4, 5, 0.0)
            self.out = L.Linear(10, 3)

    def forward(self, xs, shift):
        xs = sorted(xs, key=len, reverse=True)
        hx = self.xp.zeros((2, len(xs), 5), F32)
        hy, _ = F.n_step_bigru(1, 0.0, hx, self.rnn.ws, self.rnn.bs,
                               F.transpose_sequence(
                                   [self.embed(x) for x in xs]))
        return self.out(F.concat((hy[0], hy[1]), axis=1))


@pytest.mark.parametrize('cls', [_ShiftedStates, _FunctionalBiGRU])
def test_gradients_of_a_recording_call_are_plain_arrays(cls):
    # The recording call runs the N-step op on traced views; the
    # gradients its backward gives the parameters are NumPy's arrays.
    model = cls()
    xs = [numpy.arange(n, dtype=I32) for n in (3, 5, 2)]
    F.sum(chainerjit.jit(model.forward)(
        xs, numpy.ones((2, 3, 5), F32))).backward()
    assert set(type(p.grad) for p in model.params()) == {numpy.ndarray}


@pytest.mark.parametrize('train', [True, False])
def test_a_first_call_of_sentences_all_as_long_warns_of_no_loop(train):
    # Alike, the first call's sentences are packed into one array; that
    # recording's entry goes, and its loops over them, which the joined
    # recording rolls, are not warned of.
    rng = numpy.random.RandomState(12)
    calls = [([rng.randint(0, 30, 7).astype(I32) for _ in range(6)],
              [rng.randint(0, 30, 5).astype(I32) for _ in range(6)])]
    for n in (5, 3, 8, 4):
        calls.append(tuple(
            [rng.randint(0, 30, rng.randint(1, 9)).astype(I32)
             for _ in range(n)] for _ in range(2)))
    jitted = checked_without_recompiling(lambda: _example('seq2seq'), calls,
                                         train)
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()
