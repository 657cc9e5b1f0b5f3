"""Lists of sequences of any lengths (``runtime.ragged``): one entry serves
every length of the items of a list argument, with values and gradients
equal to eager's, and where it cannot, a warning says why."""

import copy
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import ops
from chainerjit import testing
from chainerjit.ops import Kernel
from chainerjit.ops import rows_follow_first
from tests import differential


class _PerItem(chainer.Chain):
    """Each sentence's tokens embedded and projected, returned per item,
    the last first: in an order a join of the list does not give, the
    items stay inputs of their own (``test_joined_segments`` joins them
    returned in order)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.fc = L.Linear(6, 4)

    def forward(self, xs):
        return [self.fc(self.embed(x)) for x in xs][::-1]


class _Vectors(chainer.Chain):
    """Float sequences (Variables needing gradients) through a linear
    layer."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 5)

    def forward(self, xs):
        return [self.fc(x) for x in xs]


def _tokens(rng, n_items=4, low=2, high=9):
    return [rng.randint(0, 30, int(rng.randint(low, high))).astype(
        numpy.int32) for _ in range(n_items)]


def _calls(rng, n, **kw):
    return [(_tokens(rng, **kw),) for _ in range(n)]


def _model(cls):
    numpy.random.seed(0)
    return cls()


def _trained(cls, calls):
    """``jit(cls().forward)`` checked against eager with backprop: outputs
    and the gradients of the inputs and parameters."""
    return differential.check_grads(None, calls, model=_model(cls),
                                    method='forward')


def test_one_entry_for_any_lengths_in_training():
    rng = numpy.random.RandomState(0)
    jitted = _trained(_PerItem, _calls(rng, 7))
    entry, = jitted.cache_entries()
    assert jitted.cache_info().compiled >= 3
    assert 'xs[0]: i32[L0]@cpu (array), xs[1]: i32[L1]' in str(entry.signature)
    assert 'f32[L0,6] = EmbedIDFunction' in str(entry.graph)


def test_one_entry_for_any_lengths_in_inference():
    rng = numpy.random.RandomState(1)
    model = _model(_PerItem)
    jitted = chainerjit.jit(model.forward)
    with chainer.no_backprop_mode():
        for args in _calls(rng, 6):
            chainerjit.testing.assert_results_equal(jitted(*args),
                                                    model.forward(*args))
    assert len(jitted.cache_entries()) == 1
    assert jitted.cache_info().compiled >= 3


def test_float_items_get_their_gradients():
    rng = numpy.random.RandomState(2)
    calls = [([rng.standard_normal((int(rng.randint(2, 7)), 3)).astype(
        numpy.float32) for _ in range(3)],) for _ in range(6)]
    jitted = _trained(_Vectors, calls)
    assert len(jitted.cache_entries()) == 1


class _Activated(_PerItem):
    """A linear layer and activations (the linear and the ReLU fused)."""

    def forward(self, xs):
        return [F.sigmoid(F.tanh(F.relu(self.fc(self.embed(x)))))
                for x in xs]


def test_activations_of_each_item():
    rng = numpy.random.RandomState(17)
    jitted = _trained(_Activated, _calls(rng, 6))
    assert len(jitted.cache_entries()) == 1


class _Summed(_PerItem):
    """A bag of words: the sum of each sentence's embeddings."""

    def forward(self, xs):
        return F.stack([F.sum(self.embed(x), axis=0) for x in xs])


class _Averaged(_PerItem):
    """A bag of words: the mean of each sentence's embeddings."""

    def forward(self, xs):
        return F.stack([F.average(self.embed(x), axis=0) for x in xs])


@pytest.mark.parametrize('cls', [_Summed, _Averaged])
def test_sums_and_means_over_the_rows_of_each_item(cls):
    rng = numpy.random.RandomState(12)
    jitted = _trained(cls, _calls(rng, 6))
    assert len(jitted.cache_entries()) == 1


class _Ends(_PerItem):
    """Each sentence's last and first projected words: the same positions
    at any lengths."""

    def forward(self, xs):
        hs = [self.fc(self.embed(x)) for x in xs]
        return F.stack([h[-1] for h in hs]) + \
            F.concat([h[:1] for h in hs], axis=0)


def test_the_first_and_last_rows_of_each_item():
    rng = numpy.random.RandomState(18)
    jitted = _trained(_Ends, _calls(rng, 6))
    assert len(jitted.cache_entries()) == 1


class _Joined(_PerItem):
    """Items joined with an end-of-sentence id, embedded, joined along the
    rows and projected, as a decoder's targets and outputs are."""

    def forward(self, xs):
        eos = numpy.array([0], numpy.int32)
        joined = [F.concat([x, eos], axis=0) for x in xs]
        return self.fc(F.concat([self.embed(x) for x in joined], axis=0))


def test_joined_rows_follow_the_items():
    rng = numpy.random.RandomState(6)
    jitted = _trained(_Joined, _calls(rng, 6))
    entry, = jitted.cache_entries()
    assert 'f32[L0+...+L3+4,4] = LinearFunction' in str(entry.graph)


class _TextClassifier(chainer.Chain):
    """Chainer's text classification example's RNN encoder."""

    def __init__(self, encoder, n_states):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.encoder = encoder
            self.out = L.Linear(None, 3)
        self.n_states = n_states  # hx, and cx for an LSTM

    def forward(self, xs, t):
        states = [None] * self.n_states
        hy = self.encoder(*states, [self.embed(x) for x in xs])[0]
        return F.softmax_cross_entropy(self.out(hy[-1]), t)


class _Seq2seq(chainer.Chain):
    """Chainer's seq2seq example's step, its sources and targets embedded
    item by item."""

    def __init__(self, n_layers=1, dropout=0.0):
        super().__init__()
        with self.init_scope():
            self.embed_x = L.EmbedID(30, 6)
            self.embed_y = L.EmbedID(30, 6)
            self.encoder = L.NStepLSTM(n_layers, 6, 5, dropout)
            self.decoder = L.NStepLSTM(n_layers, 6, 5, dropout)
            self.W = L.Linear(5, 30)

    def forward(self, xs, ys):
        eos = self.xp.array([0], numpy.int32)
        ys_in = [F.concat([eos, y], axis=0) for y in ys]
        ys_out = [F.concat([y, eos], axis=0) for y in ys]
        hx, cx, _ = self.encoder(None, None, [self.embed_x(x) for x in xs])
        _, _, os = self.decoder(hx, cx, [self.embed_y(y) for y in ys_in])
        return F.softmax_cross_entropy(self.W(F.concat(os, axis=0)),
                                       F.concat(ys_out, axis=0))


def _example(name, **kw):
    """A model of Chainer's examples, as the benchmarks train it
    (``benchmarks/bench_programs.py``), small."""
    from benchmarks import bench_programs
    classes = dict(zip(['text classifier', 'seq2seq'],
                       bench_programs.models()[5:]))
    numpy.random.seed(0)
    return classes[name](units=6, **kw)


def test_chainer_text_classification_example_with_dropout():
    # Its sentences are joined (concat, then split at their offsets into
    # the NStepLSTM): one entry for every number and length of them.
    rng = numpy.random.RandomState(13)
    calls = []
    for xs in _tokens_of_new_counts(rng, 10):
        calls.append((xs, rng.randint(0, 3, len(xs)).astype(numpy.int32)))
    jitted = differential.check_seeded(_example('text classifier'), calls)
    assert len(jitted.cache_entries()) == 1
    assert jitted.cache_info().compiled >= 3


def test_chainer_seq2seq_example_with_its_dropout():
    # As the example writes it: each source reversed (x[::-1]) and each
    # target framed by the end-of-sentence id (F.concat([eos, y])), item by
    # item, then embedded joined. Both lists are joined at the call, and
    # those per-item ops run once over all the rows: one entry for every
    # number and length of sentences, without a warning.
    rng = numpy.random.RandomState(14)
    calls = [(xs, _tokens(rng, n_items=len(xs)))
             for xs in _tokens_of_new_counts(rng, 10)]
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.errors.LoopWarning)
        warnings.simplefilter('error', chainerjit.errors.RecompileWarning)
        jitted = differential.check_seeded(_example('seq2seq'), calls)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array), '
        'ys[0]: i32[W2]@cpu (array), ys[1]: i64[B]'), entry.signature
    assert jitted.cache_info().compiled >= 3


class _CutAtThree(_PerItem):
    """Cuts the joined rows after the third, where the first item of the
    first calls happens to end."""

    def forward(self, xs):
        return F.split_axis(self.embed(F.concat(xs, axis=0)), [3], 0)


def test_a_cut_that_met_the_items_by_chance_is_caught():
    model = _model(_CutAtThree)
    jitted = chainerjit.jit(model.forward)
    calls = [([numpy.arange(3, dtype=numpy.int32),
               numpy.arange(n, dtype=numpy.int32)],) for n in (5, 6, 7, 2)]
    calls.append(([numpy.arange(4, dtype=numpy.int32),
                   numpy.arange(5, dtype=numpy.int32)],))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        with chainer.no_backprop_mode():
            for args in calls:
                chainerjit.testing.assert_results_equal(
                    jitted(*args), model.forward(*args))
    assert any('gave another result than eagerly' in str(w.message)
               for w in caught)


class _CutOtherwise(_PerItem):
    """Cuts the joined rows at fixed offsets, not at the items'."""

    def forward(self, xs):
        joined = self.embed(F.concat(xs, axis=0))
        return F.split_axis(joined, [2, 4], 0)


def test_a_cut_inside_an_item_keeps_the_lengths_in_the_key():
    rng = numpy.random.RandomState(11)
    model = _model(_CutOtherwise)
    jitted = chainerjit.jit(model.forward)
    calls = _calls(rng, 3, n_items=2, low=3, high=9)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for args in calls:
            chainerjit.testing.assert_results_equal(jitted(*args),
                                                    model.forward(*args))
    assert any('read by SplitAxis' in str(w.message) for w in caught)
    assert all(e.symbolic is None for e in jitted.cache_entries())


@pytest.mark.parametrize('make, n_states', [
    (lambda: L.NStepLSTM(1, 6, 5, 0.0), 2),
    (lambda: L.NStepBiGRU(2, 6, 4, 0.0), 1),
], ids=['lstm', 'bigru'])
def test_text_classifier_over_sentences_of_new_lengths(make, n_states):
    rng = numpy.random.RandomState(7)
    numpy.random.seed(0)
    model = _TextClassifier(make(), n_states)
    calls = [(_tokens(rng), rng.randint(0, 3, 4).astype(numpy.int32))
             for _ in range(6)]
    model(*calls[0])  # the output layer's input size
    jitted = differential.check_grads(None, calls, model=model,
                                      method='forward')
    entry, = jitted.cache_entries()
    # The sentences, each embedded, are joined at the call: the link's call
    # is one node over their rows (which, training, draws the masks of the
    # dropout of a link of two layers).
    assert sum(n.op in ('PackedNStepRNN', 'PackedNStepRNNDropout')
               for n in entry.graph.nodes) == 1
    assert str(entry.signature).startswith('xs[0]: i32[W]')


def test_seq2seq_over_new_source_and_target_lengths():
    rng = numpy.random.RandomState(8)
    calls = [(_tokens(rng), _tokens(rng)) for _ in range(6)]
    jitted = _trained(_Seq2seq, calls)
    entry, = jitted.cache_entries()
    # Targets framed by the end-of-sentence id item by item, each then
    # embedded: joined, the framing and the embedding run once on all.
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array), '
        'ys[0]: i32[W2]@cpu (array), ys[1]: i64[B]'), entry.signature
    graph = str(entry.graph)
    assert graph.count('joined.framed') == 2, graph


class _Seq2seqFramedByNumPy(_Seq2seq):
    """The targets framed by NumPy (``xp.concatenate([eos, y])``), the
    loss per word summed and divided by the number of sentences."""

    def forward(self, xs, ys):
        eos = self.xp.array([0], numpy.int32)
        ys_in = [self.xp.concatenate([eos, y]) for y in ys]
        ys_out = [self.xp.concatenate([y, eos]) for y in ys]
        hx, cx, _ = self.encoder(None, None, [self.embed_x(x) for x in xs])
        _, _, os = self.decoder(hx, cx, [self.embed_y(y) for y in ys_in])
        loss = F.softmax_cross_entropy(self.W(F.concat(os, axis=0)),
                                       self.xp.concatenate(ys_out),
                                       reduce='no')
        return F.sum(loss) / len(xs)


def test_seq2seq_framed_by_numpy_over_new_counts_and_lengths():
    rng = numpy.random.RandomState(10)
    calls = [(_tokens(rng, n), _tokens(rng, n)) for n in (4, 4, 6, 3, 6, 5)]
    jitted = _trained(_Seq2seqFramedByNumPy, calls)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array), '
        'ys[0]: i32[W2]@cpu (array), ys[1]: i64[B]'), entry.signature
    assert str(entry.graph).count('joined.framed') == 2, entry.graph


@pytest.mark.parametrize('train', [True, False])
def test_seq2seq_over_one_pair_of_sentences_of_any_lengths(train):
    # A batch of one source and one target sentence: each list's one item
    # is as an array argument, both lengths symbols of one entry.
    rng = numpy.random.RandomState(9)
    calls = [(_tokens(rng, 1), _tokens(rng, 1)) for _ in range(7)]
    if train:
        jitted = _trained(_Seq2seq, calls)
    else:
        model = _model(_Seq2seq)
        jitted = chainerjit.jit(copy.deepcopy(model).forward)
        with chainer.using_config('train', False), \
                chainer.no_backprop_mode():
            for args in calls:
                chainerjit.testing.assert_results_equal(
                    jitted(*args), model(*args))
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[B]@cpu (array), ys[0]: i32[W]@cpu (array)'), \
        entry.signature


def test_short_items_and_other_counts_are_entries_of_their_own():
    rng = numpy.random.RandomState(3)
    calls = _calls(rng, 3) + [([numpy.array([3], numpy.int32)] +
                               _tokens(rng, 3),)] + _calls(rng, 2, n_items=5)
    jitted = _trained(_PerItem, calls)
    assert len(jitted.cache_entries()) == 3


class _OtherCounts(_PerItem):
    def forward(self, xs):  # a name of its own: warnings show once a name
        return [self.fc(self.embed(x)) for x in xs][::-1]


def test_another_number_of_items_says_that_it_compiles_again():
    rng = numpy.random.RandomState(4)
    model = _model(_OtherCounts)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings(record=True) as caught, \
            chainer.no_backprop_mode():
        warnings.simplefilter('always')
        for args in _calls(rng, 3) + _calls(rng, 2, n_items=6):
            chainerjit.testing.assert_results_equal(jitted(*args),
                                                    model.forward(*args))
    messages = [str(w.message) for w in caught
                if issubclass(w.category, chainerjit.RecompileWarning)]
    assert messages == [
        'chainerjit: _OtherCounts.forward: the number of items of xs stays '
        'in '
        'the cache key (each new number compiles again): the program takes '
        'each item as an input of its own, at any length'], messages
    assert len(jitted.cache_entries()) == 2
    with chainer.no_backprop_mode():
        text = jitted.explain(*_calls(rng, 1, n_items=5)[0])
    assert 'xs[4]: added' in text and 'shape' not in text, text


class _ReadsLength(_PerItem):
    def forward(self, xs):
        return [self.fc(self.embed(x)) * (2.0 if len(x) > 4 else 1.0)
                for x in xs]


class _PadsItems(_PerItem):
    """Each sentence's words padded to the longest and flattened: the
    padded axis merged with the features."""

    def forward(self, xs):
        padded = F.pad_sequence([self.embed(x) for x in xs])
        return F.reshape(padded, (len(xs), -1))


def test_items_padded_and_flattened_serve_every_length():
    rng = numpy.random.RandomState(4)
    jitted = _trained(_PadsItems, _calls(rng, 6))
    assert len(jitted.cache_entries()) == 1


class _SecondLast(_PerItem):
    def forward(self, xs):  # a row an item of two or more words has
        return F.stack([self.embed(x)[-2] for x in xs])


class _Strided(_PerItem):
    """A convolution over the padded words with a stride of 2, whose
    kernels are compiled for the recorded width."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.conv = L.Convolution2D(6, 4, (3, 1), stride=(2, 1),
                                        pad=(1, 0))

    def forward(self, xs):
        block = F.pad_sequence([self.embed(x) for x in xs])
        h = self.conv(F.transpose(block, (0, 2, 1))[:, :, :, None])
        return F.max(h, axis=2)


class _MaskedByTheWidth(_PerItem):
    """A mask made of the padded width the forward read (a number, the
    items recorded one by one) broadcast like the padded words."""

    def forward(self, xs):
        words = [self.embed(x) for x in xs]
        h = F.pad_sequence(words)
        mask = self.xp.arange(h.shape[1])[None, :] < numpy.array(
            [len(x) for x in xs])[:, None]
        h = h * F.broadcast_to(mask[:, :, None].astype('f'), h.shape)
        return [F.sum(h, axis=1)] + words


class _StepsOverTheWidth(_PerItem):
    """A loop over the padded words, whose trip count is the longest
    item's length."""

    def forward(self, xs):
        words = [self.embed(x) for x in xs]
        h = F.pad_sequence(words)
        s = h[:, 0]
        for t in range(1, h.shape[1]):
            s = F.tanh(s + h[:, t])
        return [s] + words


@pytest.mark.parametrize('cls, why', [
    (_ReadsLength, 'xs[0].shape[0] compared at test_ragged_lists.py:'),
    (_StepsOverTheWidth, 'the program runs a loop at test_ragged_lists.py:'),
    (_MaskedByTheWidth, 'a value computed from xs[0] read by BroadcastLike'),
    (_SecondLast, 'a value computed from xs[0] read by GetItem'),
    (_Strided, 'a value computed from xs[0] read by Convolution2D'),
])
def test_a_length_the_program_depends_on_stays_in_the_key(cls, why):
    rng = numpy.random.RandomState(4)
    calls = _calls(rng, 4)
    model = _model(cls)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for args in calls + calls:
            chainerjit.testing.assert_results_equal(jitted(*args),
                                                    model.forward(*args))
    messages = [str(w.message) for w in caught
                if w.category is chainerjit.errors.RecompileWarning]
    assert any('lengths of the items of xs stay in the cache key' in m and
               why in m for m in messages), messages
    assert any(w.category is chainerjit.errors.LoopWarning for w in caught)
    assert len(jitted.cache_entries()) == 4
    assert why in '\n'.join(jitted.cache_entries()[0].size_notes())


class _Longest(_PerItem):
    """The longest sentence picked by NumPy (``numpy.argmax`` of the
    lengths, read in C), and the sentences ordered by ``numpy.argsort``:
    the picks follow the lengths of every call."""

    def forward(self, xs):
        longest = xs[int(numpy.argmax([len(x) for x in xs]))]
        order = numpy.argsort([-x.shape[0] for x in xs])
        return [F.sum(self.embed(longest), axis=0)] + [
            self.fc(self.embed(xs[i])) for i in order.tolist()]


def test_an_item_picked_by_numpy_of_the_lengths_follows_them():
    # (the longest first in the calls the program is checked with)
    order = [[9, 5, 2], [10, 6, 3], [8, 7, 2], [12, 4, 2], [11, 9, 5],
             [7, 3, 2], [9, 8, 7], [6, 5, 4], [10, 3, 2], [2, 5, 9],
             [3, 9, 6], [4, 8, 2]]
    rng = numpy.random.RandomState(6)
    calls = [([rng.randint(0, 30, n).astype(numpy.int32) for n in lengths],)
             for lengths in order + order]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        differential.check_grads(None, calls, model=_model(_Longest),
                                 method='forward')
    messages = [str(w.message) for w in caught]
    assert any('passed to numpy.argmax at test_ragged_lists.py' in m
               for m in messages), messages


class _Baked(chainer.FunctionNode):
    """Doubles its rows; its (wrong) lowering below returns as many rows as
    it was recorded with."""

    def forward(self, inputs):
        return inputs[0] * 2,


@ops.lowering(_Baked)
def _lower_baked(node, ctx):
    rows = ctx.in_shapes[0][0]
    return Kernel(lambda x: x[:rows] * 2, lengths=rows_follow_first)


class _UsesBaked(_PerItem):
    def forward(self, xs):
        return [_Baked().apply((self.embed(x),))[0] for x in xs]


def test_a_program_wrong_at_other_lengths_is_caught_by_eager():
    rng = numpy.random.RandomState(5)
    model = _model(_UsesBaked)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        with chainer.no_backprop_mode():
            for args in [([numpy.arange(6, dtype=numpy.int32),
                           numpy.arange(3, dtype=numpy.int32)],)] + \
                    _calls(rng, 4, n_items=2, low=7, high=9):
                chainerjit.testing.assert_results_equal(
                    jitted(*args), model.forward(*args))
    assert any('gave another result than eagerly' in str(w.message)
               for w in caught), [str(w.message) for w in caught]
    assert all(e.symbolic is None for e in jitted.cache_entries())


class _Projected(_PerItem):
    def forward(self, xs):  # (the last first: not joined)
        return self.fc(F.concat([self.embed(x) for x in reversed(xs)],
                                axis=0))


def _check_exported(model, calls, joined=None):
    """Exports ``jit(model.forward)`` after two calls (at two combinations
    of lengths) and runs the model in onnxruntime on the other calls,
    against eager; returns the ONNX model. ``joined(xs)``: the arrays the
    model takes for a list argument, if not its items."""
    ort = pytest.importorskip('onnxruntime')
    jitted = chainerjit.jit(model.forward)
    with chainer.no_backprop_mode(), chainer.using_config('train', False):
        for args in calls[:2]:
            jitted(*args)
        exported = chainerjit.export_onnx(jitted, calls[0])
        session = ort.InferenceSession(exported.SerializeToString())
        names = [i.name for i in session.get_inputs()]
        for args in calls[2:]:
            arrays = [a for arg in args
                      for a in ((joined or list)(arg) if type(arg) is list
                                else [arg])]
            got = session.run(None, dict(zip(names, arrays)))
            expected = model.forward(*args)
            chainerjit.testing.assert_results_equal(
                tuple(got), tuple(y.array for y in expected)
                if type(expected) is tuple else (expected.array,))
    return exported


def test_exported_with_each_length_dynamic():
    exported = _check_exported(_model(_Projected), _calls(
        numpy.random.RandomState(9), 5, n_items=3))
    assert [i.type.tensor_type.shape.dim[0].dim_param
            for i in exported.graph.input] == ['L0', 'L1', 'L2']


def test_exported_text_classification_example():
    # Its sentences are joined: the model takes their words and lengths.
    rng = numpy.random.RandomState(16)
    exported = _check_exported(_example('text classifier'), [
        (xs, rng.randint(0, 3, len(xs)).astype(numpy.int32))
        for xs in _tokens_of_new_counts(rng, 6)], joined=lambda xs: [
            numpy.concatenate(xs), numpy.array([len(x) for x in xs])])
    assert [[d.dim_param for d in i.type.tensor_type.shape.dim]
            for i in exported.graph.input] == [['W'], ['B'], ['B']]


class _Encoded(_PerItem):
    def __init__(self, link, n_states):
        super().__init__()
        with self.init_scope():
            self.encoder = link
        self.n_states = n_states  # hx, and cx for an LSTM

    def forward(self, xs):
        found = self.encoder(*[None] * self.n_states,
                             [self.embed(x) for x in xs])
        return tuple(found[:-1]) + (F.concat(found[-1], axis=0),)


@pytest.mark.parametrize('make, n_states', [
    (lambda: L.NStepBiLSTM(2, 6, 5, 0.0), 2),
    (lambda: L.NStepGRU(2, 6, 5, 0.0), 1),
    (lambda: L.NStepBiRNNReLU(1, 6, 5, 0.0), 1),
], ids=['bilstm', 'gru', 'birnn_relu'])
def test_exported_n_step_links_run_at_other_lengths(make, n_states):
    # Its sentences, each embedded, are joined: the model takes their words
    # and lengths.
    numpy.random.seed(0)
    exported = _check_exported(_Encoded(make(), n_states), _calls(
        numpy.random.RandomState(15), 5, n_items=3), joined=lambda xs: [
            numpy.concatenate(xs), numpy.array([len(x) for x in xs])])
    assert {'LSTM', 'GRU', 'RNN'} & set(n.op_type
                                        for n in exported.graph.node)


class _EncodedAndPadded(_Encoded):
    """The link's output sequences padded into a block
    (``ops.array.PadSegments``), and a context of them by attention."""

    def forward(self, xs):
        hy, ys = self.encoder(None, [self.embed(x) for x in xs])
        enc = F.pad_sequence(ys, padding=-0.5)
        weights = F.softmax(F.matmul(enc, F.expand_dims(hy[-1], 2)), axis=1)
        return enc, F.matmul(weights, enc, transa=True)


def test_exported_padded_outputs_run_at_other_counts_and_lengths():
    numpy.random.seed(0)
    rng = numpy.random.RandomState(17)
    exported = _check_exported(
        _EncodedAndPadded(L.NStepGRU(1, 6, 5, 0.0), 1),
        [(xs,) for xs in _tokens_of_new_counts(rng, 6)],
        joined=lambda xs: [numpy.concatenate(xs),
                           numpy.array([len(x) for x in xs])])
    assert [[d.dim_param for d in i.type.tensor_type.shape.dim]
            for i in exported.graph.input] == [['W'], ['B']]


class _BagOfWords(chainer.Chain):
    """Chainer's text classification example's bag-of-words encoder: the
    sentences padded by ``concat_examples``, embedded, dropped out and
    maxed over the words."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6, ignore_label=-1)
            self.out = L.Linear(6, 3)

    def forward(self, xs, ys):
        x_block = chainer.dataset.convert.concat_examples(xs, padding=-1)
        h = F.max(F.dropout(self.embed(x_block), 0.2), axis=1)
        return F.softmax_cross_entropy(F.dropout(self.out(h), 0.1),
                                       F.concat(ys, axis=0))


class _PaddedSequences(_PerItem):
    """The embedded items padded by ``F.pad_sequence``, their mean over
    the words and their maximum."""

    def forward(self, xs, ys):
        padded = F.pad_sequence([self.embed(x) for x in xs], padding=-5.)
        h = F.mean(padded, axis=1) + F.max(padded, axis=1)
        return F.softmax_cross_entropy(self.fc(h), F.concat(ys, axis=0))


class _Classifier(chainer.Chain):
    """The loss of the classes ``self.scores(xs)`` gives, labels in a list
    of one each, as Chainer's text classification example has it."""

    def forward(self, xs, ys):
        return F.softmax_cross_entropy(self.scores(xs), F.concat(ys, axis=0))


def _block_embed(embed, xs):
    """The example's ``block_embed`` of the sentences padded by
    ``concat_examples``: their embeddings, dropped out, words on axis 2."""
    x_block = chainer.dataset.convert.concat_examples(xs, padding=-1)
    e = F.dropout(embed(x_block), 0.1)
    return F.transpose(e, (0, 2, 1))[:, :, :, None]


class _Convolutions(_Classifier):
    """Chainer's text classification example's CNN encoder: convolutions
    of three widths over the padded words, their maxima over the words."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6, ignore_label=-1)
            self.cnn_w3 = L.Convolution2D(6, 4, (3, 1), pad=(2, 0),
                                          nobias=True)
            self.cnn_w4 = L.Convolution2D(6, 4, (4, 1), pad=(3, 0))
            self.cnn_w5 = L.Convolution2D(6, 4, (5, 1), pad=(4, 0),
                                          dilate=(2, 1))
            self.out = L.Linear(12, 3)

    def scores(self, xs):
        e = _block_embed(self.embed, xs)
        h = F.concat([F.max(self.cnn_w3(e), axis=2),
                      F.max(self.cnn_w4(e), axis=2),
                      F.max(self.cnn_w5(e), axis=2)], axis=1)
        h = F.dropout(F.relu(h), 0.1)
        return self.out(F.reshape(h, (-1, 12)))


class _Convolutions1D(_Classifier):
    """The same encoder written with ``L.Convolution1D`` over the words
    on the last axis."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6, ignore_label=-1)
            self.cnn_w3 = L.Convolution1D(6, 4, 3, pad=2)
            self.cnn_w5 = L.Convolution1D(6, 4, 5, pad=4, dilate=2)
            self.out = L.Linear(8, 3)

    def scores(self, xs):
        e = _block_embed(self.embed, xs)[:, :, :, 0]
        h = F.concat([F.max(self.cnn_w3(e), axis=2),
                      F.max(self.cnn_w5(e), axis=2)], axis=1)
        return self.out(F.relu(h))


@pytest.mark.parametrize('cls, padded', [
    (_BagOfWords, 'xs: i32[B,W]'),  # the list joined (frontend.joining)
    # its items' embeddings: the list joined, the rows padded at once
    (_PaddedSequences, 'PadSegments'),
    (_Convolutions, 'xs: i32[B,W]'),
    (_Convolutions1D, 'xs: i32[B,W]')])
def test_items_padded_to_the_longest_at_any_lengths(cls, padded):
    rng = numpy.random.RandomState(21)
    calls = [(_tokens(rng), [rng.randint(0, 3, (1,)).astype(numpy.int32)
                             for _ in range(4)]) for _ in range(10)]
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.errors.RecompileWarning)
        jitted = differential.check_seeded(_model(cls), calls)
    entry, = jitted.cache_entries()
    assert padded in str(entry.graph), entry.graph
    assert jitted.cache_info().compiled >= 4


class _ConvolutionScores(_Convolutions):
    def forward(self, xs):
        return self.scores(xs)


def test_exported_cnn_text_classifier_runs_at_other_lengths():
    # The list is joined (frontend.joining): the model takes the block
    # concat_examples pads, of any batch size and width.
    exported = _check_exported(_model(_ConvolutionScores), [
        (xs,) for xs in _tokens_of_new_counts(numpy.random.RandomState(17),
                                              6)],
        joined=lambda xs: [chainer.dataset.convert.concat_examples(
            xs, padding=-1)])
    assert [d.dim_param for d in exported.graph.input[0].type.tensor_type.
            shape.dim] == ['B', 'W']


def _tokens_of_new_counts(rng, n):
    return [_tokens(rng, n_items=int(rng.randint(2, 7))) for _ in range(n)]


def _padded_features(xs):
    return F.tanh(chainer.dataset.convert.concat_examples(xs, padding=0.5))


def test_concat_examples_of_items_unlike_on_other_axes():
    rng = numpy.random.RandomState(18)
    jitted = chainerjit.jit(_padded_features)
    for _ in range(4):
        xs = [rng.randn(n, m).astype(numpy.float32)
              for n, m in ((3, 2), (2, 4), (4, 1))]
        chainerjit.testing.assert_results_equal(jitted(xs),
                                                _padded_features(xs))
    assert jitted.cache_info().compiled == 3
    assert 'concat_examples(padding=0.5)' in str(jitted.last_entry.graph)


class _ExampleBagOfWords(_Classifier):
    """Chainer's text classification example's bag-of-words encoder as
    written there: the sum over the padded words divided by each
    sentence's length, an array made from ``len(x)`` of each item."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6, ignore_label=-1)
            self.out = L.Linear(6, 3)

    def scores(self, xs):
        e = _block_embed(self.embed, xs)
        x_len = self.xp.array([len(x) for x in xs], numpy.int32)[:, None,
                                                                 None]
        return self.out(F.sum(e, axis=2) / x_len)


def test_an_array_of_the_items_lengths_is_made_on_every_call():
    rng = numpy.random.RandomState(23)
    calls = [(_tokens(rng), [rng.randint(0, 3, (1,)).astype(numpy.int32)
                             for _ in range(4)]) for _ in range(8)]
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.errors.RecompileWarning)
        # (with dynamic=False, not joined: frontend.joining)
        jitted = differential.check_seeded(_model(_ExampleBagOfWords),
                                           calls, dynamic=False)
    entry, = jitted.cache_entries()
    assert "i32[4] = python.sizes[axes=(0, 0, 0, 0), dtype=int32](xs[0], " \
        "xs[1], xs[2], xs[3])" in str(entry.graph), entry.graph
    assert jitted.cache_info().compiled >= 4


class _ExampleBagOfWordsScores(_ExampleBagOfWords):
    def forward(self, xs):
        return self.scores(xs)


def test_exported_lengths_array_follows_the_items():
    # The list is joined (frontend.joining), with its items' lengths.
    _check_exported(_model(_ExampleBagOfWordsScores), [
        (xs,) for xs in _tokens_of_new_counts(numpy.random.RandomState(29),
                                              6)],
        joined=lambda xs: [
            chainer.dataset.convert.concat_examples(xs, padding=-1),
            numpy.array([len(x) for x in xs])])


class _PaddedRNN(chainer.Chain):
    """An RNN written by hand over a list of token arrays padded into a
    block: ``F.pad_sequence(xs, padding=-1)``, embedded, then a loop over
    the block's width (``range(block.shape[1])``, ``e[:, t]``); masked by
    the items' lengths compared with the counter, or time-major."""

    masked = time_major = False

    def __init__(self):
        super(_PaddedRNN, self).__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6, ignore_label=-1)
            self.x2h = L.Linear(6, 5)
            self.h2h = L.Linear(5, 5, nobias=True)
            self.out = L.Linear(5, 3)

    def forward(self, xs):
        lengths = self.xp.array([len(x) for x in xs], numpy.int32)
        block = F.pad_sequence(xs, padding=-1)
        e = self.embed(block)
        h = self.xp.zeros((len(xs), 5), numpy.float32)
        if self.time_major:
            for x in F.transpose(e, (1, 0, 2)):
                h = F.tanh(self.x2h(x) + self.h2h(h))
            return F.sum(self.out(h))
        for t in range(block.shape[1]):
            h_new = F.tanh(self.x2h(e[:, t]) + self.h2h(h))
            if self.masked:
                keep = self.xp.broadcast_to((lengths > t)[:, None],
                                            h_new.shape)
                h_new = F.where(keep, h_new, h)
            h = h_new
        return F.sum(self.out(h))


class _PaddedRNNMasked(_PaddedRNN):
    masked = True


class _PaddedRNNTimeMajor(_PaddedRNN):
    time_major = True


class _PaddedLSTMByHand(_PaddedRNN):
    """An LSTM step written by hand with an ``L.LSTM``'s own linear
    layers (links of a link), its state and cell masked past each
    item's end."""

    def __init__(self):
        super(_PaddedLSTMByHand, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(6, 5)

    def forward(self, xs):
        lengths = self.xp.array([len(x) for x in xs], numpy.int32)
        e = self.embed(F.pad_sequence(xs, padding=-1))
        h = c = self.xp.zeros((len(xs), 5), numpy.float32)
        for t in range(e.shape[1]):
            c_new, h_new = F.lstm(c, self.lstm.upward(e[:, t]) +
                                  self.lstm.lateral(h))
            keep = self.xp.broadcast_to((lengths > t)[:, None], h.shape)
            h, c = F.where(keep, h_new, h), F.where(keep, c_new, c)
        return F.sum(self.out(h))


@pytest.mark.parametrize('cls', [_PaddedRNN, _PaddedRNNMasked,
                                 _PaddedRNNTimeMajor, _PaddedLSTMByHand])
def test_a_loop_over_a_padded_blocks_width_serves_every_list(cls):
    rng = numpy.random.RandomState(23)
    calls = [(xs,) for xs in _tokens_of_new_counts(rng, 8)]
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.errors.RecompileWarning)
        warnings.simplefilter('error', chainerjit.errors.LoopWarning)
        jitted = differential.check_seeded(_model(cls), calls)
    entry, = jitted.cache_entries()
    assert 'i32[B,T]' in str(entry.signature), entry.signature


class _AttentionOverNStepOutputs(chainer.Chain):
    """Attention of an N-step GRU's last state over its outputs padded
    into a block: broadcasts and products of rows as many as the longest
    item's (``Rows.widest``)."""

    def __init__(self):
        super(_AttentionOverNStepOutputs, self).__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.gru = L.NStepGRU(1, 6, 5, 0.0)
            self.out = L.Linear(5, 3)

    def forward(self, xs):
        hy, ys = self.gru(None, [self.embed(x) for x in xs])
        enc = F.pad_sequence(ys)  # (B, W, 5)
        q = F.broadcast_to(F.expand_dims(hy[-1], 1), enc.shape)
        weights = F.softmax(F.sum(enc * q, axis=2), axis=1)
        context = F.sum(enc * F.broadcast_to(weights[:, :, None], enc.shape),
                        axis=1)
        return F.sum(self.out(context))


class _ProductAttentionOverNStepOutputs(_AttentionOverNStepOutputs):
    """The same attention as matrix products (Luong's): the scores of
    the steps, then the context contracting them."""

    def forward(self, xs):
        hy, ys = self.gru(None, [self.embed(x) for x in xs])
        enc = F.pad_sequence(ys)  # (B, W, 5)
        scores = F.matmul(enc, F.expand_dims(hy[-1], 2))  # (B, W, 1)
        weights = F.softmax(scores, axis=1)
        context = F.matmul(weights, enc, transa=True)  # (B, 1, 5)
        return F.sum(self.out(F.squeeze(context, 1)))


@pytest.mark.parametrize('cls', [_AttentionOverNStepOutputs,
                                 _ProductAttentionOverNStepOutputs])
def test_attention_over_padded_n_step_outputs_at_any_lengths(cls):
    # (Four items each call: the items, read one by one by the padding,
    # are not joined, and their number stays in the key.)
    rng = numpy.random.RandomState(29)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.errors.RecompileWarning)
        jitted = differential.check_seeded(_model(cls), _calls(rng, 6))
    assert len(jitted.cache_entries()) == 1, jitted.cache_report()


class _Tagger(chainer.Chain):
    """A tag for every word: an N-step GRU over each sentence embedded,
    its outputs joined and scored against the labels joined; the labels
    a list as long as the sentences, item by item."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.rnn = L.NStepGRU(1, 6, 5, 0.0)
            self.out = L.Linear(5, 3)

    def forward(self, xs, ts):
        _, ys = self.rnn(None, [self.embed(x) for x in xs])
        return F.softmax_cross_entropy(self.out(F.concat(ys, axis=0)),
                                       F.concat(ts, axis=0))


def _tagged(rng, n_items=4):
    xs = _tokens(rng, n_items)
    return xs, [rng.randint(0, 3, len(x)).astype(numpy.int32) for x in xs]


def test_a_tagger_is_joined_with_its_labels():
    # The sentences embedded each into the link, their outputs and their
    # labels joined: one entry for every number and lengths of sentences.
    rng = numpy.random.RandomState(7)
    calls = [_tagged(rng, n) for n in (4, 3, 6, 4, 5, 2)]
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.errors.RecompileWarning)
        jitted = _trained(_Tagger, calls)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array), ts[0]: '
        'i32[W]@cpu (array), ts[1]: i64[B]'), entry.signature


def test_labels_as_long_as_the_sentences_follow_their_lengths():
    # Not joined (dynamic=False): item by item, the labels' lengths are
    # the sentences'.
    rng = numpy.random.RandomState(7)
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.errors.RecompileWarning)
        jitted = differential.check_seeded(
            _model(_Tagger), [_tagged(rng) for _ in range(6)],
            dynamic=False)
    entry, = jitted.cache_entries()
    # The labels' lengths are the sentences': one symbol each.
    assert 'xs[1]: i32[L1]' in str(entry.signature) and \
        'ts[1]: i32[L1]' in str(entry.signature), entry.signature
    # Labels of other lengths than their sentences fail as eagerly.
    xs, ts = _tagged(rng)
    ts[1] = ts[1][:-1]
    model = _model(_Tagger)
    with pytest.raises(Exception) as eager:
        model.forward(xs, ts)
    with pytest.raises(type(eager.value)):
        jitted(xs, ts)


class _SizesOfThePaddedBlock(chainer.Chain):
    """A padded block's batch size converted to a float (which keeps the
    number of sentences in the key) and its width in Python arithmetic."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(20, 4, ignore_label=-1)

    def forward(self, xs):
        x = F.pad_sequence(xs, padding=-1)
        B, T = x.shape
        e = self.embed(x)
        return F.sum(e) * float(B), F.sum(e) / (B * T)


def _clipped(rng, n_calls, items=3, longest=12, then=((2, 3, 4), (4, 5, 6),
                                                      (1, 1, 1), (15, 1, 2))):
    """Calls of sentences clipped at ``longest`` words, each batch holding
    one that long, as a data set clipped at a length gives; then sentences
    of the lengths ``then``."""
    lengths = []
    for _ in range(n_calls):
        sizes = list(rng.randint(1, longest, items))
        sizes[rng.randint(items)] = longest
        lengths.append(sizes)
    return [([rng.randint(0, 20, n).astype(numpy.int32) for n in sizes],)
            for sizes in lengths + [list(t) for t in then]]


def test_a_padded_width_baked_in_is_caught_at_a_new_longest_sentence():
    # (every call's result is eager's: the width is in no key, and the
    # calls at the first new lengths all hold a 12-word sentence)
    model = _SizesOfThePaddedBlock()
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings(), chainer.using_config('train', False):
        warnings.simplefilter('ignore')
        for args in _clipped(numpy.random.RandomState(3), 24):
            testing.assert_results_equal(jitted(*args),
                                         model.forward(*args))


class _PerWord(chainer.Chain):
    """A loss per word: over a padded block, divided by the number of
    words counted in Python (``sum(len(x) for x in xs)``), or over the
    words joined, by their count (``len(y)``)."""

    def __init__(self, joined):
        super().__init__()
        self.joined = joined
        with self.init_scope():
            self.embed = L.EmbedID(20, 6, ignore_label=-1)
            self.fc = L.Linear(6, 5)

    def forward(self, xs):
        if self.joined:
            y = F.concat([self.embed(x) for x in xs], axis=0)
            return F.sum(F.tanh(self.fc(y))) / len(y)
        x = F.pad_sequence(xs, padding=-1)
        h = F.tanh(self.fc(self.embed(x), n_batch_axes=2))
        mask = (x.array >= 0)[:, :, None].astype(numpy.float32)
        return F.sum(h * mask) / sum(len(s) for s in xs)


def _of_one_total(rng, n_calls, total=24, then=((2, 7, 2, 8), (6, 5, 6, 3),
                                                (9, 9, 9, 9), (3, 3, 3, 3))):
    """Calls of four sentences of ``total`` words each, then of the
    lengths ``then``."""
    lengths = []
    while len(lengths) < n_calls:
        sizes = rng.randint(2, 11, 4)
        if sizes.sum() == total:
            lengths.append(list(sizes))
    return [([rng.randint(0, 20, n).astype(numpy.int32) for n in sizes],)
            for sizes in lengths + [list(t) for t in then]]


@pytest.mark.parametrize('joined', [False, True])
def test_a_count_of_the_words_is_read_when_run(joined):
    # (the first calls all hold 24 words: a count baked in would pass
    # the checks at new lengths)
    numpy.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        differential.check_seeded(_PerWord(joined), _of_one_total(
            numpy.random.RandomState(4), 12))
