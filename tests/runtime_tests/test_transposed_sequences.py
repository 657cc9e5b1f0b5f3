"""``F.n_step_lstm`` and its kin, called as Chainer's functions on steps
``F.transpose_sequence`` made of sorted sequences: the call is one node on
the sequences, as a link's is, and its output steps transposed back are
that node's outputs, so that a list of sentences is joined and one entry
per mode serves every number and length of them, with values and
gradients equal to eager's."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
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


class _FunctionalGRU(chainer.Chain):
    """``F.n_step_gru`` with an ``L.NStepGRU``'s weights, over the
    embedded sentences transposed, its outputs transposed back and each
    averaged."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.rnn = L.NStepGRU(2, 6, 5, 0.0)
            self.out = L.Linear(5, 3)

    def forward(self, xs, t):
        exs = [self.embed(x) for x in xs]
        hx = self.xp.zeros((2, len(xs), 5), 'f')
        hy, ys = F.n_step_gru(2, 0.0, hx, self.rnn.ws, self.rnn.bs,
                              F.transpose_sequence(exs))
        ys = F.transpose_sequence(ys)
        means = F.concat([F.mean(y, axis=0, keepdims=True) for y in ys],
                         axis=0)
        return F.softmax_cross_entropy(self.out(means + hy[-1]), t)


class _FunctionalBiLSTM(chainer.Chain):
    """``F.n_step_bilstm`` on weights listed by hand, as Chainer's
    tests pass them, both states a Variable of zeros; every word's output
    scored."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.rnn = L.NStepBiLSTM(1, 6, 4, 0.0)
            self.out = L.Linear(8, 3)

    def forward(self, xs, t):
        ws = [[getattr(w, 'w%d' % i) for i in range(8)] for w in self.rnn]
        bs = [[getattr(w, 'b%d' % i) for i in range(8)] for w in self.rnn]
        h0 = chainer.Variable(self.xp.zeros((2, len(xs), 4), 'f'))
        steps = F.transpose_sequence([self.embed(x) for x in xs])
        hy, cy, ys = F.n_step_bilstm(1, 0.0, h0, h0, ws, bs, steps)
        words = self.out(F.concat(F.transpose_sequence(ys), axis=0))
        return F.sum(words) * 0.01 + F.softmax_cross_entropy(
            self.out(F.concat((hy[0], hy[1]), axis=1)), t)


class _FunctionalRNN(chainer.Chain):
    """``F.n_step_rnn`` of ReLU units (``activation=`` given) over
    sentences' features made of their embeddings, one a word."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(30, 6)
            self.rnn = L.NStepRNNReLU(1, 6, 5, 0.0)
            self.out = L.Linear(5, 3)

    def forward(self, xs, t):
        hx = self.xp.zeros((1, len(xs), 5), 'f')
        steps = F.transpose_sequence([F.tanh(self.embed(x)) for x in xs])
        hy, _ = F.n_step_rnn(1, 0.0, hx, self.rnn.ws, self.rnn.bs, steps,
                             activation='relu')
        return F.softmax_cross_entropy(self.out(hy[0]), t)


@pytest.mark.parametrize('cls', [_FunctionalGRU, _FunctionalBiLSTM,
                                 _FunctionalRNN])
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


def test_the_steps_read_otherwise_keep_chainers_call():
    # The outputs' steps concatenated as they are (time-major): Chainer's
    # own call, its values equal to eager's.
    class StepsJoined(_FunctionalGRU):
        def forward(self, xs, t):
            hx = self.xp.zeros((2, len(xs), 5), 'f')
            hy, ys = F.n_step_gru(2, 0.0, hx, self.rnn.ws, self.rnn.bs,
                                  F.transpose_sequence(
                                      [self.embed(x) for x in xs]))
            return F.sum(self.out(F.concat(ys, axis=0)))

    calls = _sorted_batches(numpy.random.RandomState(4), ((3, 4), (3, 4)))
    model = StepsJoined()
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for args in calls:
            numpy.testing.assert_allclose(jitted(*args).array,
                                          model.forward(*args).array,
                                          rtol=1e-5)


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
