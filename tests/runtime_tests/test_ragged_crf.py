"""A linear-chain CRF over sentences of any lengths as Chainer's POS
tagging example writes it (``L.CRF1d`` with ``transpose=True``: the
sentences sorted, transposed to steps of a shrinking batch): one entry
for every length of the sentences, in training and prediction, with
eager's values and gradients."""

import copy
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from tests import differential

VOCABULARY, TAGS = 30, 5


class _Tagger(chainer.Chain):
    """Chainer's examples/pos ``CRF``: each word's tag scores looked up,
    the CRF's loss over the sentences transposed, its best paths."""

    def __init__(self, reduce='mean'):
        super(_Tagger, self).__init__()
        self.reduce = reduce
        with self.init_scope():
            self.feature = L.EmbedID(VOCABULARY, TAGS)
            self.crf = L.CRF1d(TAGS)

    def forward(self, xs, ys):
        hs = [self.feature(x) for x in xs]
        return self.crf(hs, ys, reduce=self.reduce, transpose=True)

    def predict(self, xs):
        hs = [self.feature(x) for x in xs]
        return self.crf.argmax(hs, transpose=True)


class _RecurrentTagger(_Tagger):
    """Scores from a bidirectional N-step LSTM over the sentences."""

    def __init__(self):
        super(_RecurrentTagger, self).__init__()
        with self.init_scope():
            self.embed = L.EmbedID(VOCABULARY, 6)
            self.rnn = L.NStepBiLSTM(1, 6, 4, 0.0)
            self.out = L.Linear(8, TAGS)

    def forward(self, xs, ys):
        _, _, hs = self.rnn(None, None, [self.embed(x) for x in xs])
        return self.crf([self.out(h) for h in hs], ys, transpose=True)


def _sentences(seed, n_calls=6, n_items=4):
    """Calls of ``n_items`` sentences of 2 to 12 words in any order, with
    their tags."""
    rng = numpy.random.RandomState(seed)
    calls = []
    for _ in range(n_calls):
        lengths = rng.randint(2, 13, size=n_items)
        calls.append(([rng.randint(0, VOCABULARY, n).astype(numpy.int32)
                       for n in lengths],
                      [rng.randint(0, TAGS, n).astype(numpy.int32)
                       for n in lengths]))
    return calls


def _one_entry(jitted, joined=True):
    """The one entry of ``jitted``: of the sentences joined, their words
    and their lengths; else of each sentence at any length."""
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'xs[0]: i32[W]@cpu (array), xs[1]: i64[B]@cpu (array)' if joined
        else 'xs[0]: i32[L0]'), entry.signature
    return entry


@pytest.mark.parametrize('cls, reduce', [(_Tagger, 'mean'), (_Tagger, 'no'),
                                         (_RecurrentTagger, 'mean')])
def test_training_serves_every_length(cls, reduce):
    numpy.random.seed(0)
    model = cls() if cls is _RecurrentTagger else cls(reduce)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = differential.check_grads(None, _sentences(1), model=model,
                                          method='forward')
    _one_entry(jitted)


def test_prediction_serves_every_length_and_number():
    # The best paths returned are cut at each call's lengths.
    numpy.random.seed(0)
    model = _Tagger()
    jitted = chainerjit.jit(model.predict)
    calls = _sentences(2, 2) + _sentences(3, 2, 7) + _sentences(4, 2, 2) + \
        _sentences(5, 2, 5)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        with chainer.no_backprop_mode():
            for xs, _ in calls:
                score, paths = jitted(xs)
                expected_score, expected = model.predict(xs)
                numpy.testing.assert_allclose(score.array,
                                              expected_score.array,
                                              rtol=1e-5)
                assert [p.tolist() for p in paths] == \
                    [p.tolist() for p in expected]
    _one_entry(jitted)


def test_the_cost_learns_as_eagerly():
    # A few steps of the example's optimizer: the transition costs and
    # the embeddings follow eager's.
    import copy

    numpy.random.seed(3)
    model = _Tagger()
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin)
    optimizers = []
    for chain in (model, twin):
        optimizer = chainer.optimizers.Adam()
        optimizer.setup(chain)
        optimizers.append(optimizer)
    for xs, ys in _sentences(4, n_calls=5):
        for fn, optimizer in zip((model, jitted), optimizers):
            optimizer.target.cleargrads()
            fn(xs, ys).backward()
            optimizer.update()
    numpy.testing.assert_allclose(twin.crf.cost.array, model.crf.cost.array,
                                  rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(twin.feature.W.array,
                                  model.feature.W.array, rtol=1e-5,
                                  atol=1e-6)
    _one_entry(jitted)


class _TransposedByHand(chainer.Chain):
    """``F.crf1d`` over sentences the forward sorted and transposed
    itself, as Chainer's POS tagging example did before ``L.CRF1d`` took
    ``transpose=True``: one node on the sentences as they are."""

    def __init__(self, reduce='mean'):
        super(_TransposedByHand, self).__init__()
        self.reduce = reduce
        with self.init_scope():
            self.feature = L.EmbedID(VOCABULARY, TAGS)
            self.crf = L.CRF1d(TAGS)

    def forward(self, xs, ys):
        hs = F.transpose_sequence([self.feature(x) for x in xs])
        return F.crf1d(self.crf.cost, hs, F.transpose_sequence(ys),
                       reduce=self.reduce)

    def predict(self, xs):
        hs = F.transpose_sequence([self.feature(x) for x in xs])
        score, path = F.argmax_crf1d(self.crf.cost, hs)
        return score, F.transpose_sequence(path)

    def predict_changed(self, xs):
        """The first step's tags changed in the list of steps before they
        are transposed back."""
        hs = F.transpose_sequence([self.feature(x) for x in xs])
        score, path = F.argmax_crf1d(self.crf.cost, hs)
        path[0] = (path[0] + 1) % TAGS
        return score, F.transpose_sequence(path)


@pytest.mark.parametrize('reduce', ['mean', 'no'])
def test_a_crf_over_a_list_transposed_by_hand_serves_every_length(reduce):
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = differential.check_grads(
            None, _sorted_sentences(5), model=_TransposedByHand(reduce),
            method='forward')
    entry = _one_entry(jitted)
    assert 'CRF1dOfSegments' in str(entry.graph), entry.graph
    assert 'TransposeSequence' not in str(entry.graph), entry.graph


def _sorted_sentences(seed, n_items=4):
    calls = []
    for xs, ys in _sentences(seed, n_items=n_items):
        order = numpy.argsort([-len(x) for x in xs], kind='stable')
        calls.append(([xs[k] for k in order], [ys[k] for k in order]))
    return calls


def _best_paths_as_eager(model, method, seed):
    """``method`` of ``model`` jitted against eager: the scores and each
    sentence's path; the jitted function."""
    jitted = chainerjit.jit(getattr(model, method))
    for xs, _ in _sorted_sentences(seed) + _sorted_sentences(seed, 7) + \
            _sorted_sentences(seed, 2):
        (score, paths), (e_score, e_paths) = jitted(xs), \
            getattr(model, method)(xs)
        numpy.testing.assert_allclose(score.array, e_score.array,
                                      rtol=1e-5, atol=1e-6)
        assert len(paths) == len(e_paths)
        for path, expected in zip(paths, e_paths):
            assert path.dtype == expected.dtype
            numpy.testing.assert_array_equal(path.array, expected.array)
    return jitted


def test_best_paths_of_a_list_transposed_by_hand_serve_every_length():
    # predicting (no backprop): the best paths, one node for every length
    with warnings.catch_warnings(), chainer.no_backprop_mode():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = _best_paths_as_eager(_TransposedByHand(), 'predict', 6)
    entry = _one_entry(jitted)
    assert 'TransposeSequence' not in str(entry.graph), entry.graph


@pytest.mark.parametrize('cls', [_TransposedByHand, _Tagger])
def test_the_best_paths_score_has_eagers_gradient(cls):
    # with backprop, the one node's score is differentiable as eager's,
    # transposed by hand or by L.CRF1d.argmax(hs, transpose=True)
    numpy.random.seed(2)
    model = cls()
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.predict)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        for xs, _ in _sorted_sentences(8) + _sorted_sentences(9, 6):
            for m, fn in ((model, model.predict), (twin, jitted)):
                m.cleargrads()
                F.sum(fn(xs)[0]).backward()
            for name in ('cost', 'W'):
                link = 'crf' if name == 'cost' else 'feature'
                expected = getattr(getattr(model, link), name).grad
                actual = getattr(getattr(twin, link), name).grad
                assert actual is not None, name
                numpy.testing.assert_allclose(actual, expected, rtol=1e-5,
                                              atol=1e-6)
    entry = _one_entry(jitted)
    assert 'ArgmaxCRF1dOf' in str(entry.graph), entry.graph


class _ExampleTagger(_Tagger):
    """Chainer's examples/pos ``CRF.forward`` as written: the loss, and
    the best paths compared with the tags, word by word, to report how
    many are right of how many."""

    def forward(self, xs, ys):
        hs = [self.feature(x) for x in xs]
        loss = self.crf(hs, ys, transpose=True)
        chainer.report({'loss': loss}, self)
        _, predict = self.crf.argmax(hs, transpose=True)
        correct = 0
        total = 0
        for y, p in zip(ys, predict):
            correct += self.xp.sum(y == p)
            total += len(y)
        chainer.report({'correct': correct}, self)
        chainer.report({'total': total}, self)
        return loss


class _MarginTagger(_ExampleTagger):
    """The example's step, its loss less a share of the best paths'
    scores, whose gradient it takes."""

    def forward(self, xs, ys):
        hs = [self.feature(x) for x in xs]
        score, predict = self.crf.argmax(hs, transpose=True)
        correct = sum(self.xp.sum(y == p) for y, p in zip(ys, predict))
        chainer.report({'correct': correct}, self)
        return self.crf(hs, ys, transpose=True) - F.mean(score) * 0.1


@pytest.mark.parametrize('cls', [_ExampleTagger, _MarginTagger])
def test_the_examples_training_step_serves_every_batch(cls):
    # Any number and lengths of sentences, and its reports: the right
    # tags counted for all at once, the words counted in Python (total +=
    # len(y)) an int computed from the sentences' lengths at each call.
    numpy.random.seed(5)
    model = cls()
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    calls = [call for k, n in enumerate((5, 5, 3, 8, 1, 6, 2))
             for call in _sentences(9 + k, n_calls=1, n_items=n)]
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        for xs, ys in calls:
            found = []
            for m, fn in ((model, model.forward), (twin, jitted)):
                reporter = chainer.Reporter()
                reporter.add_observer('main', m)
                observed = {}
                m.cleargrads()
                with reporter.scope(observed):
                    fn(xs, ys).backward()
                found.append((observed, m.crf.cost.grad, m.feature.W.grad))
            (expected, cost, w), (actual, jit_cost, jit_w) = found
            assert sorted(actual) == sorted(expected)
            for key, value in expected.items():
                assert type(actual[key]) is type(value), key
                numpy.testing.assert_allclose(
                    getattr(actual[key], 'array', actual[key]),
                    getattr(value, 'array', value), rtol=1e-5, err_msg=key)
            numpy.testing.assert_allclose(jit_cost, cost, rtol=1e-5,
                                          atol=1e-6)
            numpy.testing.assert_allclose(jit_w, w, rtol=1e-5, atol=1e-6)
    _one_entry(jitted)


def test_steps_changed_before_they_are_transposed_back_stay_changed():
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.RecompileWarning)
        _best_paths_as_eager(_TransposedByHand(), 'predict_changed', 7)
