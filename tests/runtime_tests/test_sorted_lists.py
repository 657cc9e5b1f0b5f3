"""Lists the forward sorts by the lengths of their items itself, as
Chainer's N-step functions want them (``sorted(xs, key=len,
reverse=True)``, with their labels: ``sorted(zip(xs, ts), key=...)``):
each call joins them in that order, and one entry per mode serves every
number, length and order of them, with values and gradients equal to
eager's. Other orders keep the lengths in the key, and stay right."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from benchmarks.bench_programs import sequence_embed
from tests import differential
from tests.runtime_tests.test_joined_lists import \
    checked_without_recompiling

I32 = numpy.int32

#: (number of sentences, longest length) call by call: batches of one
#: sentence among them, one of a single word, lengths tied often.
_SHAPES = ((4, 6), (1, 1), (3, 9), (5, 3), (1, 5), (2, 7), (6, 12),
           (2, 1), (4, 4))


def _batches(rng, shapes, tags=True):
    """Sentences in any order, and a tag for each word of each (or a label
    for each), call by call."""
    calls = []
    for n, longest in shapes:
        lengths = rng.randint(1, longest + 1, n)
        lengths[rng.randint(n)] = longest
        xs = [rng.randint(0, 30, k).astype(I32) for k in lengths]
        calls.append((xs, [rng.randint(0, 3, k).astype(I32) for k in lengths]
                      if tags else rng.randint(0, 3, n).astype(I32)))
    return calls


class _Model(chainer.Chain):
    """Words embedded, an N-step link ``rnn`` (whose weights the forward
    may give a function) and an output layer."""

    def __init__(self, rnn=None):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.rnn = rnn or L.NStepLSTM(2, 6, 5, 0.25)
            self.out = L.Linear(5, 3)

    def lstm(self, exs):
        """``F.n_step_lstm`` with ``rnn``'s weights over ``exs``
        transposed; its last states and its outputs transposed back."""
        hx = self.xp.zeros((2, len(exs), 5), 'f')
        hy, _, ys = F.n_step_lstm(2, 0.25, hx, hx, self.rnn.ws, self.rnn.bs,
                                  F.transpose_sequence(exs))
        return hy, F.transpose_sequence(ys)


class _PairsTagger(_Model):
    """Sentences and their tags sorted together by the sentences'
    lengths, as pairs; every word scored."""

    def forward(self, xs, ts):
        pairs = sorted(zip(xs, ts), key=lambda p: len(p[0]), reverse=True)
        xs, ts = [x for x, _ in pairs], [t for _, t in pairs]
        _, ys = self.lstm(sequence_embed(self.embed, xs, 0.1))
        return F.softmax_cross_entropy(self.out(F.concat(ys, axis=0)),
                                       F.concat(ts, axis=0))


class _UnzippedTagger(_Model):
    """The pairs sorted by the second's lengths, unzipped into tuples, each
    word embedded on its own; the tags joined by NumPy."""

    def forward(self, xs, ts):
        ts, xs = zip(*sorted(zip(ts, xs), key=lambda p: p[1].shape[0],
                             reverse=True))
        _, ys = self.lstm([self.embed(x) for x in xs])
        return F.softmax_cross_entropy(self.out(F.concat(ys, axis=0)),
                                       self.xp.concatenate(ts))


class _Encoder(_Model):
    """The sentences alone sorted (a negated length as the key), ``F.n_step
    _gru`` over them; the squares of the last states."""

    def __init__(self):
        super().__init__(L.NStepGRU(1, 6, 5, 0.0))

    def forward(self, xs, ts):
        xs = sorted(xs, key=lambda x: -len(x))
        hx = self.xp.zeros((1, len(xs), 5), 'f')
        hy, _ = F.n_step_gru(1, 0.0, hx, self.rnn.ws, self.rnn.bs,
                             F.transpose_sequence(
                                 sequence_embed(self.embed, xs)))
        return F.sum(hy * hy)


class _AscendingLink(_Model):
    """Sorted by increasing length, into the link, which takes any
    order; the outputs joined."""

    def forward(self, xs, ts):
        xs = sorted(xs, key=len)
        _, _, ys = self.rnn(None, None, sequence_embed(self.embed, xs))
        return F.sum(F.tanh(self.out(F.concat(ys, axis=0))))


@pytest.mark.parametrize('cls, tags', [
    (_PairsTagger, 'W'), (_UnzippedTagger, 'W'), (_Encoder, 'W2'),
    (_AscendingLink, 'W2')])
@pytest.mark.parametrize('train', [True, False])
def test_lists_sorted_by_length_are_joined_in_that_order(cls, tags, train):
    # Tags sorted with their sentences are as long, item by item (one
    # width); those left in the caller's order are not.
    numpy.random.seed(0)
    jitted = checked_without_recompiling(
        cls, _batches(numpy.random.RandomState(3), _SHAPES), train)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array), '
        'ts[0]: i32[%s]@cpu (array), ts[1]: i64[B]@cpu (array)' % tags), \
        entry.signature
    ops = [node.op for node in entry.graph.nodes]
    assert [op for op in ops if 'NStep' in op] in (
        ['PackedNStepRNN'], ['PackedNStepRNNDropout']), ops


class _Seq2Seq(_Model):
    """Sources and targets sorted by the sources' lengths, an
    ``F.n_step_lstm`` encoder and the link as decoder from its states."""

    def forward(self, xs, ys):
        pairs = sorted(zip(xs, ys), key=lambda p: len(p[0]), reverse=True)
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        hx = self.xp.zeros((2, len(xs), 5), 'f')
        hy, cy, _ = F.n_step_lstm(2, 0.0, hx, hx, self.rnn.ws, self.rnn.bs,
                                  F.transpose_sequence(
                                      sequence_embed(self.embed, xs)))
        _, _, os = self.rnn(hy, cy, sequence_embed(self.embed, ys))
        return F.sum(F.tanh(self.out(F.concat(os, axis=0))))


def _with_targets(calls):
    """The sentences of ``calls`` and targets of other lengths."""
    rng = numpy.random.RandomState(12)
    return [(xs, [rng.randint(0, 30, k).astype(I32)
                  for k in rng.randint(1, 8, len(xs))]) for xs, _ in calls]


@pytest.mark.parametrize('train', [True, False])
def test_targets_sorted_by_their_sources_lengths(train):
    numpy.random.seed(0)
    jitted = checked_without_recompiling(_Seq2Seq, _with_targets(
        _batches(numpy.random.RandomState(13), _SHAPES)), train)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array), '
        'ys[0]: i32[W2]@cpu (array), ys[1]: i64[B]@cpu (array)'), \
        entry.signature


def test_inference_first_then_training_keeps_one_entry_each():
    model = _PairsTagger()
    jitted = chainerjit.jit(model.forward)
    twin = model.copy(mode='copy')
    calls = _batches(numpy.random.RandomState(4), _SHAPES)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        for k, args in enumerate(calls):
            with chainer.using_config('train', k % 3 != 0):
                numpy.random.seed(k)
                loss = jitted(*args)
                numpy.random.seed(k)
                chainerjit.testing.assert_results_equal(
                    loss, twin.forward(*args))
    assert len(jitted.cache_entries()) == 2, jitted.cache_report()


class _OriginalOrderToo(_Model):
    """The sentences sorted into the link, and the first sentence as the
    caller gave it embedded besides."""

    def forward(self, xs, ts):
        hy, _ = self.lstm(sequence_embed(self.embed, sorted(
            xs, key=len, reverse=True)))
        return F.sum(hy * hy) + F.sum(self.embed(xs[0]))


class _SortedOtherwise(_Model):
    """Sorted by a key computed of the lengths otherwise (modulo 3)."""

    def forward(self, xs, ts):
        xs = sorted(xs, key=lambda x: len(x) % 3, reverse=True)
        _, _, ys = self.rnn(None, None, sequence_embed(self.embed, xs))
        return F.sum(F.concat(ys, axis=0) * F.concat(ys[:1] * len(ys),
                                                     axis=0)[:1])


class _OutputsEach(_Model):
    """Sorted, and each sentence's outputs returned on its own (which a
    joined program does not give): recorded item by item."""

    def forward(self, xs, ts):
        _, ys = self.lstm(sequence_embed(self.embed, sorted(
            xs, key=len, reverse=True)))
        return F.sum(F.stack([F.sum(y) * (k + 1) for k, y in enumerate(ys)]))


class _PaddedFirstToo(_Model):
    """The sentences sorted, each embedded and scored by its position
    (a program for any lengths of them, item by item), and the first as
    the caller gave it besides."""

    def forward(self, xs, ts):
        hs = [F.sum(self.embed(x)) for x in sorted(xs, key=len)]
        return sum(h * (k + 1) for k, h in enumerate(hs)) + \
            F.sum(self.embed(xs[0]))


@pytest.mark.parametrize('cls, why', [
    (_PaddedFirstToo, 'compared by sorted()'),
    (_OriginalOrderToo, 'compared by sorted()'),
    (_SortedOtherwise, 'taken modulo'),
    (_OutputsEach, 'the lengths of the items of xs compared by sorted() '
     'at test_sorted_lists.py:')])
def test_other_orders_keep_the_lengths_in_the_key_and_stay_right(cls, why):
    # The same lengths in another order, then the first again: the order
    # of a recording's sort is no guess.
    calls = _batches(numpy.random.RandomState(5), ((3, 6), (4, 8)))
    xs, ts = calls[0]
    calls += [(xs[::-1], ts[::-1]), (xs[1:] + xs[:1], ts[1:] + ts[:1])]
    calls += calls * 2
    numpy.random.seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jitted = differential.check_seeded(cls(), calls)
    said = ' '.join(str(w.message) for w in caught)
    assert why in said, said
    assert jitted.cache_info().hits > 0


def test_a_tuple_of_sentences_sorted_is_joined_too():
    # As ``xs, ts = zip(*batch)`` gives them.
    calls = [(tuple(xs), tuple(ts)) for xs, ts in _batches(
        numpy.random.RandomState(7), _SHAPES)]
    numpy.random.seed(0)
    jitted = checked_without_recompiling(_PairsTagger, calls, True)
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()


class _StatesOfTheSteps(_Model):
    """Initial states of a row for each step rather than each sentence:
    Chainer's function passes the rows past the sentences' through to
    ``hy``, which the op does not; Chainer's own runs."""

    def forward(self, xs, ts):
        steps = F.transpose_sequence(sequence_embed(self.embed, sorted(
            xs, key=len, reverse=True)))
        hx = chainer.Variable(self.xp.zeros((2, len(steps), 5), 'f'))
        hy, cy, _ = F.n_step_lstm(2, 0.0, hx, hx, self.rnn.ws, self.rnn.bs,
                                  steps)
        return hy * hy


@pytest.mark.parametrize('first', [(3, 2, 1), (2, 7)])
@pytest.mark.parametrize('train', [True, False])
def test_states_of_another_number_of_rows_run_as_chainers(first, train):
    # As many steps as sentences at the first call, or not.
    rng = numpy.random.RandomState(8)
    model = _StatesOfTheSteps()
    jitted = chainerjit.jit(model.copy(mode='copy').forward)
    for lengths in (first, (7, 6, 6), (3, 2, 2), (1, 5), (3, 3, 1)):
        xs = [rng.randint(0, 30, k).astype(I32) for k in lengths]
        with chainer.using_config('train', train):
            chainerjit.testing.assert_results_equal(
                jitted(xs, None), model.forward(xs, None))


class _TwoSorted(_Model):
    """Two lists each sorted by its own items' lengths, each into
    ``F.n_step_gru``."""

    def __init__(self):
        super().__init__(L.NStepGRU(1, 6, 5, 0.0))

    def encoded(self, xs):
        hx = self.xp.zeros((1, len(xs), 5), 'f')
        hy, _ = F.n_step_gru(1, 0.0, hx, self.rnn.ws, self.rnn.bs,
                             F.transpose_sequence(
                                 sequence_embed(self.embed, xs)))
        return hy[-1]

    def forward(self, xs, ys):
        return F.sum(self.encoded(sorted(xs, key=len, reverse=True)) *
                     self.encoded(sorted(ys, key=len, reverse=True)))


@pytest.mark.parametrize('first', [
    ((5, 3, 6), (3, 3, 3)),  # the targets alike (packed, as one array)
    ((5, 3, 6), (5, 3, 6))])  # as long as their sources, by chance
@pytest.mark.parametrize('cls', [_TwoSorted, _Seq2Seq])
def test_the_first_calls_lengths_decide_nothing(first, cls):
    rng = numpy.random.RandomState(9)
    calls = [([rng.randint(0, 30, k).astype(I32) for k in xs],
              [rng.randint(0, 30, k).astype(I32) for k in ys])
             for xs, ys in (first, ((2, 4, 2), (4, 3, 4)), ((3, 5), (7, 4)),
                            ((6, 5, 3, 1, 1), (1, 1, 3, 5, 6)),
                            ((5, 5, 7, 7), (6, 7, 7, 6)))]
    numpy.random.seed(0)
    jitted = checked_without_recompiling(cls, calls, False)
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()


class _Shuffled(_Model):
    """The sentences shuffled by a random key (each drawn once, as Python's
    ``sorted`` calls the key once an item), then dropped out."""

    def forward(self, xs, ts):
        xs = sorted(xs, key=lambda x: numpy.random.rand())
        _, _, ys = self.rnn(None, None, sequence_embed(self.embed, xs, 0.2))
        return F.sum(F.concat(ys, axis=0)[:1])


def test_a_key_is_called_once_an_item():
    numpy.random.seed(0)
    differential.check_seeded(_Shuffled(), _batches(
        numpy.random.RandomState(10), _SHAPES[:4]))


def test_lists_of_other_counts_leave_the_joined_entry():
    # Tags of another number than the sentences (zip stops at the
    # shorter): run item by item, the tags' width still the sentences'.
    calls = _batches(numpy.random.RandomState(11), ((3, 6), (2, 4)))
    xs, ts = _batches(numpy.random.RandomState(12), ((4, 5),))[0]
    calls += [(xs, ts[:3])] + _batches(numpy.random.RandomState(13),
                                       ((5, 7), (3, 3)))
    model = _PairsTagger()
    jitted = chainerjit.jit(model.copy(mode='copy').forward)
    with chainer.using_config('train', False):
        for args in calls:
            testing.assert_results_equal(jitted(*args), model.forward(*args))
    joined = [str(e.signature) for e in jitted.cache_entries()
              if str(e.signature).startswith('xs[0]: i32[W]')]
    assert len(joined) == 1 and 'ts[0]: i32[W]@cpu' in joined[0], joined


# --- numpy.argsort of the lengths, the lists indexed by its order -----------

class _ArgsortTagger(_Model):
    """Chainer's older examples: ``inds = numpy.argsort([-len(x) for x in
    xs]).astype('i')``, the sentences and their tags indexed by it, every
    word scored."""

    def forward(self, xs, ts):
        inds = numpy.argsort([-len(x) for x in xs]).astype('i')
        xs = [xs[i] for i in inds]
        ts = [ts[i] for i in inds]
        _, ys = self.lstm(sequence_embed(self.embed, xs, 0.1))
        return F.softmax_cross_entropy(self.out(F.concat(ys, axis=0)),
                                       F.concat(ts, axis=0))


class _ArgsortReversed(_Model):
    """The increasing order reversed (``[::-1]``), listed, the lengths
    read as ``x.shape[0]``; the last states of the sentences in that
    order added up one after another, so that the order of sentences as
    long as each other shows."""

    def forward(self, xs, ts):
        order = numpy.argsort([x.shape[0] for x in xs])[::-1].tolist()
        xs = [xs[i] for i in order]
        hy, _ = self.lstm([self.embed(x) for x in xs])
        return F.sum(F.cumsum(hy[-1], axis=0) ** 2)


class _ArgsortLink(_Model):
    """The increasing order itself, into the link, which takes any; the
    outputs in that order added up one after another."""

    def forward(self, xs, ts):
        inds = numpy.argsort([len(x) for x in xs], kind='stable')
        _, _, ys = self.rnn(None, None,
                            sequence_embed(self.embed, [xs[i] for i in inds]))
        return F.sum(F.cumsum(F.tanh(self.out(F.concat(ys, axis=0))),
                              axis=0) ** 2)


@pytest.mark.parametrize('cls', [_ArgsortTagger, _ArgsortReversed,
                                 _ArgsortLink])
@pytest.mark.parametrize('train', [True, False])
def test_lists_indexed_by_an_argsort_of_lengths_are_joined(cls, train):
    numpy.random.seed(0)
    jitted = checked_without_recompiling(
        cls, _batches(numpy.random.RandomState(14), _SHAPES), train)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array)'), \
        entry.signature


def test_an_argsort_orders_items_as_long_as_each_other_as_numpy_does():
    # NumPy's default sort is not stable: of twenty sentences of one to
    # three words, the rows of the states returned are in its order.
    rng = numpy.random.RandomState(15)
    calls = [([rng.randint(0, 30, k).astype(I32)
               for k in rng.randint(1, 4, n)], None)
             for n in (20, 24, 3, 33, 20, 17)]
    for train in (True, False):
        jitted = checked_without_recompiling(_ArgsortReversed, calls, train)
        assert len(jitted.cache_entries()) == 1, jitted.cache_report()


class _UnsortedByArgsort(_Model):
    """The states put back in the caller's order by ``numpy.argsort`` of
    the order."""

    def forward(self, xs, ts):
        inds = numpy.argsort([-len(x) for x in xs])
        hy, _ = self.lstm(sequence_embed(self.embed, [xs[i] for i in inds]))
        return F.sum(F.cumsum(hy[-1][numpy.argsort(inds)], axis=0) ** 2)


class _UnsortedByPermutate(_Model):
    """Put back by ``F.permutate`` with the order inverted."""

    def forward(self, xs, ts):
        inds = numpy.argsort([-len(x) for x in xs]).astype(numpy.int32)
        hy, _ = self.lstm(sequence_embed(self.embed, [xs[i] for i in inds]))
        return F.sum(F.cumsum(F.permutate(hy[-1], inds, inv=True),
                              axis=0) ** 2)


class _UnsortedByAssignment(_Model):
    """Each sentence's outputs put back where the caller had it."""

    def forward(self, xs, ts):
        inds = numpy.argsort([-len(x) for x in xs])
        _, ys = self.lstm(sequence_embed(self.embed, [xs[i] for i in inds]))
        back = list(ys)
        for k, i in enumerate(inds):
            back[i] = F.sum(ys[k], axis=0)
        return F.sum(F.cumsum(F.stack(back), axis=0) ** 2)


class _TagsLeft(_Model):
    """The sentences indexed by the order, their tags not (wrongly, but
    as eager computes it)."""

    def forward(self, xs, ts):
        inds = numpy.argsort([-len(x) for x in xs])
        _, ys = self.lstm(sequence_embed(self.embed, [xs[i] for i in inds]))
        return F.sum(self.out(F.concat(ys, axis=0))[:, 0]) + \
            F.sum(self.embed(F.concat(ts, axis=0)))


class _CountedOrder(_Model):
    """The order's length read, and its indexes into an array."""

    def forward(self, xs, ts):
        inds = numpy.argsort([-len(x) for x in xs])
        hy, _ = self.lstm(sequence_embed(self.embed, [xs[i] for i in inds]))
        return F.sum(hy[-1] * self.xp.asarray(inds, 'f')[:, None]) / len(
            inds)


@pytest.mark.parametrize('cls', [_UnsortedByArgsort, _UnsortedByPermutate,
                                 _UnsortedByAssignment, _TagsLeft,
                                 _CountedOrder])
def test_orders_read_otherwise_stay_right(cls):
    # Sorted calls first (the order reads alike there), in any order
    # after; the same lengths again in another order.
    calls = _batches(numpy.random.RandomState(16), ((3, 6), (4, 8)))
    calls = [([x for x in sorted(xs, key=len, reverse=True)], ts)
             for xs, ts in calls]
    xs, ts = _batches(numpy.random.RandomState(17), ((5, 7),))[0]
    calls += [(xs, ts), (xs[::-1], ts[::-1]), (xs[1:] + xs[:1], ts)]
    calls += _batches(numpy.random.RandomState(18), _SHAPES)
    numpy.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for train in (True, False):
            with chainer.using_config('train', train):
                differential.check_seeded(cls(), calls)


def test_calls_sorted_already_find_the_order_again():
    # A call whose sentences come sorted reads any list alike in the
    # order of the argsort: the next finds how to join again.
    calls = [([x for x in sorted(xs, key=len, reverse=True)], ts)
             for xs, ts in _batches(numpy.random.RandomState(19), _SHAPES)]
    calls += _batches(numpy.random.RandomState(20), _SHAPES)
    numpy.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        jitted = differential.check_seeded(_ArgsortTagger(), calls)
    assert jitted.cache_info().hits > 0


class _OrderKept(_Model):
    """The order kept on the model, or reported."""

    def __init__(self, reported):
        super().__init__()
        self.reported = reported

    def forward(self, xs, ts):
        inds = numpy.argsort([-len(x) for x in xs])
        hy, _ = self.lstm(sequence_embed(self.embed, [xs[i] for i in inds]))
        if self.reported:
            chainer.report({'order': inds}, self)
        else:
            self.order = inds
        return F.sum(F.cumsum(hy[-1], axis=0) ** 2)


def _order_of(model, reported, forward, args):
    """The loss of ``forward(*args)``, and the order it kept or reported."""
    observation = {}
    with chainer.reporter.Reporter().scope(observation):
        chainer.reporter.get_current_reporter().add_observer('main', model)
        loss = forward(*args)
    return loss, observation['main/order'] if reported else model.order


@pytest.mark.parametrize('reported', [False, True])
def test_an_order_kept_or_reported_is_each_calls(reported):
    model = _OrderKept(reported)
    twin = model.copy(mode='copy')
    jitted = chainerjit.jit(twin.forward)
    for k, args in enumerate(_batches(numpy.random.RandomState(21),
                                      _SHAPES)):
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            numpy.random.seed(k)
            loss, order = _order_of(twin, reported, jitted, args)
            numpy.random.seed(k)
            expected, expected_order = _order_of(model, reported,
                                                 model.forward, args)
        testing.assert_results_equal(loss, expected)
        numpy.testing.assert_array_equal(order, expected_order)
