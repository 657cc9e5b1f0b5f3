"""Self-attention over padded batches (a transformer's encoder layer):
one entry per mode for every batch size, every length, or both changing
in one call, where the scores ``(B, T, T)`` have the steps on two axes
(``ops.Rows.also``), with values and gradients equal to eager's, masked
as people write it."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from tests import differential

D = 8
HEADS = 2


class _Encoder(chainer.Chain):
    """One encoder layer: queries, keys and values of one projection cut
    apart, scaled dot-product attention over the steps (one head, or
    ``heads``), masked by ``mask`` in one of the ways people write it,
    a residual and layer normalization."""

    def __init__(self, masking=None, heads=1):
        super(_Encoder, self).__init__()
        self.masking, self.heads = masking, heads
        with self.init_scope():
            self.qkv = L.Linear(D, 3 * D)
            self.out = L.Linear(D, D)
            self.norm = L.LayerNormalization(D)

    def forward(self, x, mask):
        B, T, _ = x.shape
        h = F.reshape(x, (B * T, D))
        q, k, v = (self._heads(a, B, T) for a in
                   F.split_axis(self.qkv(h), 3, axis=1))
        scores = F.matmul(q, k, transb=True) / numpy.sqrt(D // self.heads)
        weights = F.softmax(self._masked(scores, mask), axis=-1)
        context = F.matmul(weights, v)
        if self.heads > 1:
            context = F.transpose(context, (0, 2, 1, 3))
        y = self.norm(h + self.out(F.reshape(context, (B * T, D))))
        return F.reshape(y, (B, T, D))

    def _heads(self, a, B, T):
        if self.heads == 1:
            return F.reshape(a, (B, T, D))
        return F.transpose(F.reshape(a, (B, T, self.heads, D // self.heads)),
                           (0, 2, 1, 3))

    def _masked(self, scores, mask):
        keys = mask[:, None, :] if self.heads == 1 else mask[:, None, None, :]
        if self.masking == 'added':
            return scores + (1 - keys) * -1e9
        if self.masking == 'ellipsis':  # (the keys' axis last)
            return scores + (1 - mask[..., None, :]) * -1e9
        if self.masking == 'full_like':  # soskek's attention_is_all_you_need
            minus = self.xp.full(scores.shape, -1e9, numpy.float32)
            kept = chainer.as_array(keys) > 0
            return F.where(F.broadcast_to(kept, scores.shape), scores, minus)
        if self.masking == 'numpy_broadcast':
            kept = self.xp.broadcast_to(chainer.as_array(keys) > 0,
                                        scores.shape)
            return F.where(kept, scores,
                           self.xp.full(scores.shape, -1e9, numpy.float32))
        return scores


SIZES = {'batch': [(2, 7), (5, 7), (9, 7), (3, 7)],
         'steps': [(4, 5), (4, 9), (4, 17), (4, 6)],
         'both': [(2, 5), (3, 9), (5, 17), (4, 6)]}
SIGNATURES = {'batch': 'x: f32[B,7,8]', 'steps': 'x: f32[4,B,8]',
              'both': 'x: f32[B,W,8]'}


def _calls(sizes, seed=0, features=D, mask_dtype=numpy.float32):
    """Padded batches of ``sizes`` (and again the second and third) and
    their masks, each with a sequence as long as the batch is wide."""
    rng = numpy.random.RandomState(seed)
    calls = []
    for batch, steps in sizes + sizes[1:3]:
        lengths = rng.randint(1, steps + 1, size=batch)
        lengths[0] = steps
        mask = (numpy.arange(steps)[None] < lengths[:, None])
        calls.append((rng.standard_normal((batch, steps, features)).astype(
            numpy.float32), mask.astype(mask_dtype)))
    return calls


def _one_entry_per_mode(model, calls):
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = differential.check_grads(None, calls, model=model,
                                          method='forward')
        for args in calls[:2]:  # inference too
            with chainer.no_backprop_mode():
                numpy.testing.assert_allclose(
                    jitted(*args).array, model.forward(*args).array,
                    rtol=1e-4, atol=1e-5)
    return jitted.cache_entries()


@pytest.mark.parametrize('changing', sorted(SIZES))
@pytest.mark.parametrize('masking', [None, 'added', 'full_like',
                                     'numpy_broadcast', 'ellipsis'])
def test_one_head_serves_every_size(changing, masking):
    numpy.random.seed(0)
    entries = _one_entry_per_mode(_Encoder(masking), _calls(SIZES[changing]))
    assert len(entries) == 2, [str(e.signature) for e in entries]
    for entry in entries:
        assert str(entry.signature).startswith(SIGNATURES[changing]), \
            entry.signature


@pytest.mark.parametrize('changing', sorted(SIZES))
def test_heads_serve_every_size(changing):
    numpy.random.seed(1)
    entries = _one_entry_per_mode(_Encoder('added', heads=HEADS),
                                  _calls(SIZES[changing], seed=1))
    assert len(entries) == 2, [str(e.signature) for e in entries]


class _FirstScores(chainer.Chain):
    """A cut of the scores on one of their axes of steps (the first
    key's): no rule takes rows on two axes there, so the steps stay in
    the key, with values equal to eager's."""

    def forward(self, x):
        scores = F.matmul(x, x, transb=True)
        return F.softmax(scores[:, :, 0], axis=1)


def test_a_cut_of_the_scores_keeps_the_steps_in_the_key():
    calls = [(x,) for x, _ in _calls(SIZES['steps'])]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        differential.check_grads(None, calls, model=_FirstScores(),
                                 method='forward')
    assert any(issubclass(w.category, errors.RecompileWarning) and
               'getitem' in str(w.message).lower() for w in caught), \
        [str(w.message) for w in caught]


class _KeysAndValues(chainer.Chain):
    """Two pieces of three of a projection cut along its features: the
    gradient of the one left out is zeros of the rows of the others, at
    any batch size."""

    def __init__(self):
        super(_KeysAndValues, self).__init__()
        with self.init_scope():
            self.projection = L.Linear(D, 3 * D)

    def forward(self, x):
        k, _, v = F.split_axis(self.projection(x), 3, axis=1)
        return k * v


def test_a_piece_without_a_gradient_at_any_batch_size():
    rng = numpy.random.RandomState(2)
    calls = [(rng.standard_normal((n, D)).astype('f'),)
             for n in (3, 8, 17, 5, 8)]
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = differential.check_grads(None, calls,
                                          model=_KeysAndValues(),
                                          method='forward')
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('x: f32[B,8]'), entry.signature


@pytest.mark.parametrize('changing', sorted(SIZES))
@pytest.mark.parametrize('masked', [False, True])
def test_the_example_encoder_block_serves_every_size(changing, masked):
    # examples/models.py: heads merged with the batch, the mask broadcast
    # to the scores and reshaped to their shape, filled with numpy.full.
    import copy

    from examples import models
    numpy.random.seed(4)
    model = models.EncoderBlock()
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        for x, mask in _calls(SIZES[changing], 3, 16, bool):
            kwargs = {'mask': mask} if masked else {}
            with chainer.using_config('train', False), \
                    chainer.no_backprop_mode():
                numpy.testing.assert_allclose(
                    jitted(x, **kwargs).array, model(x, **kwargs).array,
                    rtol=1e-4, atol=1e-5)
            grads = []
            for fn, chain in ((model, model), (jitted, twin)):
                chain.cleargrads()
                variable = chainer.Variable(x.copy())
                y = fn(variable, **kwargs)
                F.sum(y * y).backward()
                grads.append([variable.grad, chain.qkv.W.grad,
                              chain.ln1.gamma.grad])
            for got, expected in zip(grads[1], grads[0]):
                numpy.testing.assert_allclose(got, expected, rtol=1e-4,
                                              atol=1e-4)
    assert len(jitted.cache_entries()) == 2, jitted.cache_report()


@pytest.mark.parametrize('changing', ['steps', 'both'])
def test_dynamic_true_opens_the_steps_from_the_first_call(changing):
    numpy.random.seed(5)
    model = _Encoder('full_like')
    jitted = chainerjit.jit(model.forward, dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        with chainer.no_backprop_mode():
            for x, mask in _calls(SIZES[changing], seed=5):
                numpy.testing.assert_allclose(
                    jitted(x, mask).array, model.forward(x, mask).array,
                    rtol=1e-4, atol=1e-5)
    info = jitted.cache_info()
    assert info.compiles == 1 and info.currsize == 1, jitted.cache_report()
    entry, = jitted.cache_entries()
    # The features stay: no program takes them at any size.
    assert str(entry.signature).startswith(
        'x: f32[B,W,8]@cpu (array), mask: f32[B,W]'), entry.signature


def test_dynamic_true_opens_axes_of_several_sizes():
    # Two lengths (a source and a target), each its own symbol, and the
    # features of both.
    def pair(x, y):
        return F.sum(x, axis=1) * F.sum(y, axis=1)

    jitted = chainerjit.jit(pair, dynamic=True)
    rng = numpy.random.RandomState(6)
    for batch, n, m in [(3, 4, 6), (5, 7, 2), (2, 9, 9), (4, 3, 5)]:
        x = rng.standard_normal((batch, n, 2)).astype(numpy.float32)
        y = rng.standard_normal((batch, m, 2)).astype(numpy.float32)
        numpy.testing.assert_allclose(jitted(x, y).array, pair(x, y).array,
                                      rtol=1e-5)
    assert jitted.cache_info().compiles == 1, jitted.cache_report()
    entry, = jitted.cache_entries()
    # Axes of one size in the first call are one symbol (the features).
    assert str(entry.signature).startswith(
        'x: f32[B,W,W2]@cpu (array), y: f32[B,W3,W2]'), entry.signature


def test_a_batch_of_one_serves_every_length():
    # A batch of one keeps an entry of its own, which takes every length:
    # the heads' reshapes only add or drop its axis of one.
    from examples import models
    numpy.random.seed(7)
    model = models.EncoderBlock()
    jitted = chainerjit.jit(model)
    sizes = [(1, 5), (1, 9), (1, 14), (1, 6)]
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        with chainer.no_backprop_mode():
            for x, mask in _calls(sizes, 7, 16, bool):
                numpy.testing.assert_allclose(
                    jitted(x, mask).array, model(x, mask).array, rtol=1e-4,
                    atol=1e-5)
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('x: f32[1,B,16]'), \
        entry.signature


class _Positions(chainer.Chain):
    """Token embeddings plus positions as long as the steps, the ways
    transformers add them: a table cut to the length (a persistent
    array, or a parameter), or the positions ``xp.arange(T)`` looked
    up."""

    def __init__(self, how):
        super(_Positions, self).__init__()
        self.how = how
        with self.init_scope():
            self.embed = L.EmbedID(20, D)
            self.positions = L.EmbedID(64, D)
            self.out = L.Linear(D, 3)
        table = numpy.random.RandomState(8).standard_normal((64, D))
        self.add_persistent('table', table.astype(numpy.float32))

    def forward(self, ids):
        batch, steps = ids.shape
        h = self.embed(ids)
        if self.how == 'table':
            h = h + self.table[:steps]
        elif self.how == 'broadcast_table':
            h = h + F.broadcast_to(self.table[None, :steps], h.shape)
        elif self.how == 'parameter':
            h = h + self.positions.W[:steps]
        elif self.how == 'astype':
            h = h + self.positions(self.xp.arange(steps).astype('i'))[None]
        else:
            h = h + self.positions(
                self.xp.arange(steps, dtype=numpy.int32))[None]
        return self.out(F.max(F.tanh(h), axis=1))


@pytest.mark.parametrize('how', ['table', 'broadcast_table', 'parameter',
                                 'arange', 'astype'])
def test_positions_as_long_as_the_steps_serve_every_length(how):
    numpy.random.seed(9)
    rng = numpy.random.RandomState(9)
    calls = [(rng.randint(0, 20, (b, n)).astype(numpy.int32),)
             for b, n in [(3, 5), (3, 9), (4, 12), (2, 7), (5, 6), (3, 11)]]
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = differential.check_grads(None, calls,
                                          model=_Positions(how),
                                          method='forward')
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('ids: i32[B,W]'), entry.signature


class _TeacherForced(chainer.Chain):
    """A causal language model trained on the steps before the last
    (``x[:, :-1]``) to predict those after the first (``x[:, 1:]``),
    whose sizes the forward reads of the input cut (``B, T =
    xin.shape``), or of the ids less one step (``T - 1``): positions, a
    mask of ones, a causal mask and the scores' rows merged."""

    def __init__(self, how):
        super().__init__()
        self.how = how
        with self.init_scope():
            self.embed = L.EmbedID(20, D)
            self.positions = L.EmbedID(64, D)
            self.out = L.Linear(D, 20)

    def forward(self, ids):
        xin, targets = ids[:, :-1], ids[:, 1:]
        if self.how == 'less_one':
            batch, steps = ids.shape
            steps = steps - 1
        else:
            batch, steps = xin.shape
        xp = self.xp
        h = self.embed(xin) + F.broadcast_to(self.positions(
            xp.arange(steps, dtype=numpy.int32)), (batch, steps, D))
        h = h * xp.ones((batch, steps, 1), numpy.float32)
        scores = F.matmul(h, h, transb=True)
        causal = F.broadcast_to(xp.tri(steps, dtype=bool)[None],
                                scores.shape).array
        scores = F.where(causal, scores,
                         xp.full(scores.shape, -1e9, numpy.float32))
        h = F.matmul(F.softmax(scores, axis=2), h)
        y = self.out(F.reshape(h, (batch * steps, D)))
        return F.softmax_cross_entropy(y, targets.reshape(-1))


class _TimeMajorTeacherForced(_TeacherForced):
    """The same over time-major ids: the steps before the last embedded
    and made batch-first (``F.transpose``), whose shape the forward reads
    (the steps less one, now on the second axis)."""

    def forward(self, ids):
        h = F.transpose(self.embed(ids[:-1]), (1, 0, 2))
        batch, steps, _ = h.shape
        h = h + F.broadcast_to(self.positions(self.xp.arange(
            steps, dtype=numpy.int32)), (batch, steps, D))
        y = self.out(F.reshape(h, (batch * steps, D)))
        return F.softmax_cross_entropy(y, ids[1:].T.reshape(-1))


def test_a_time_major_teacher_forced_model_serves_all():
    rng = numpy.random.RandomState(5)
    calls = [(rng.randint(0, 20, (n, b)).astype(numpy.int32),)
             for n, b in [(6, 4), (9, 7), (12, 3), (5, 2), (7, 5)]]
    entries = _one_entry_per_mode(_TimeMajorTeacherForced(None), calls)
    assert len(entries) == 2  # (training, inference)


@pytest.mark.parametrize('how', ['cut_read', 'less_one'])
def test_a_teacher_forced_model_reading_the_steps_less_one_serves_all(how):
    rng = numpy.random.RandomState(4)
    calls = [(rng.randint(0, 20, (b, n)).astype(numpy.int32),)
             for b, n in [(2, 5), (3, 7), (4, 9), (2, 12), (5, 6), (3, 3)]]
    entries = _one_entry_per_mode(_TeacherForced(how), calls)
    assert len(entries) == 2  # (training, inference)
    assert all(str(e.signature).startswith('ids: i32[B,W]')
               for e in entries), entries


class _Shifted(_Positions):
    """Positions counted from 1 (``pe[1:T + 1]``), and a sum over one
    more row than the steps (``pe[:T + 1]``)."""

    def forward(self, ids):
        steps = ids.shape[1]
        h = self.embed(ids) + self.table[1:steps + 1]
        return self.out(F.sum(h, axis=1)) + F.sum(self.table[:steps + 1])


class _Doubled(_Positions):
    """A cut twice as long as the steps (``pe[:2 * T]``)."""

    def forward(self, ids):
        h = self.embed(ids)
        return self.out(F.sum(h, axis=1)) + F.sum(
            self.table[:2 * ids.shape[1]])


def _lengths_of(seed, lengths):
    rng = numpy.random.RandomState(seed)
    return [(rng.randint(0, 20, (3, n)).astype(numpy.int32),)
            for n in lengths]


def test_a_cut_shifted_from_the_length_serves_every_length():
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = differential.check_grads(
            None, _lengths_of(10, (4, 7, 9, 7, 5)), model=_Shifted('table'),
            method='forward')
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('ids: i32[3,B]'), entry.signature


def test_a_cut_past_the_length_keeps_it_in_the_key():
    # pe[:2 * T] does not follow the steps: the length stays in the key,
    # with eager's values.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        differential.check_grads(None, _lengths_of(11, (4, 7, 9)),
                                 model=_Doubled('table'), method='forward',
                                 fallback_ok=True)
    assert any(issubclass(w.category, errors.RecompileWarning)
               for w in caught), [str(w.message) for w in caught]


class _Decoder(chainer.Chain):
    """A decoder layer: self-attention over the target steps under a
    causal mask, made the ways people make it, or attention over the
    source steps (a length of its own); batch-first, ``(B, T, D)`` and
    ``(B, S, D)``."""

    def __init__(self, how):
        super(_Decoder, self).__init__()
        self.how = how
        with self.init_scope():
            self.query = L.Linear(D, D)
            self.keys_values = L.Linear(D, 2 * D)
            self.out = L.Linear(D, D)

    def forward(self, y, source):
        batch, steps, _ = y.shape
        q = self._projected(self.query, y)
        keys = source if self.how == 'source' else y
        k, v = (F.reshape(a, keys.shape) for a in F.split_axis(
            self.keys_values(F.reshape(keys, (-1, D))), 2, axis=1))
        scores = F.matmul(q, k, transb=True) / numpy.sqrt(D)
        if self.how != 'source':
            scores = F.where(self._history(batch, steps), scores,
                             self.xp.full(scores.shape, -1e9, 'f'))
        context = F.matmul(F.softmax(scores, axis=2), v)
        return self._projected(self.out, context)

    def _projected(self, link, x):
        return F.reshape(link(F.reshape(x, (-1, D))), x.shape)

    def _history(self, batch, steps):
        xp = self.xp
        if self.how == 'tril':
            mask = xp.tril(xp.ones((steps, steps), dtype=bool))
        elif self.how == 'tri':
            mask = xp.tri(steps, dtype=bool)
        else:  # soskek's make_history_mask
            positions = xp.arange(steps)
            mask = positions[None, ] <= positions[:, None]
        return xp.broadcast_to(mask[None], (batch, steps, steps))


@pytest.mark.parametrize('how', ['tril', 'tri', 'arange', 'source'])
def test_a_decoder_serves_every_batch_and_both_lengths(how):
    numpy.random.seed(12)
    rng = numpy.random.RandomState(12)
    calls = [(rng.standard_normal((b, t, D)).astype(numpy.float32),
              rng.standard_normal((b, s, D)).astype(numpy.float32))
             for b, t, s in [(3, 5, 7), (3, 9, 4), (4, 12, 6), (2, 7, 9),
                             (5, 6, 11), (3, 11, 5)]]
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = differential.check_grads(None, calls, model=_Decoder(how),
                                          method='forward')
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith(
        'y: f32[B,W,8]@cpu grad, source: f32[B,W2,8]'), entry.signature


class _WithAFirstStep(chainer.Chain):
    """A learned first step before the steps (a classifier's token,
    ``F.concat([cls, h], axis=1)``), its mask joined before the mask by
    NumPy, attention over all, and the first step's context."""

    def __init__(self):
        super(_WithAFirstStep, self).__init__()
        with self.init_scope():
            self.embed = L.Linear(D, D)
            self.first = chainer.Parameter(
                numpy.linspace(-1, 1, D, dtype=numpy.float32)[None, None])

    def forward(self, x, mask):
        batch = x.shape[0]
        h = self.embed(x, n_batch_axes=2)
        h = F.concat([F.broadcast_to(self.first, (batch, 1, D)), h], axis=1)
        mask = self.xp.concatenate([self.xp.ones((batch, 1), numpy.float32),
                                    chainer.as_array(mask)], axis=1)
        scores = F.matmul(h, h, transb=True) / numpy.sqrt(D)
        scores = scores + (1 - mask[:, None, :]) * -1e9
        return F.matmul(F.softmax(scores, axis=2), h)[:, 0]


class _ShiftedRight(chainer.Chain):
    """A decoder's inputs shifted right by a row of zeros (``F.pad(h[:,
    :-1], ((0, 0), (1, 0), (0, 0)))``), attended over under a causal
    mask, and added to the steps."""

    def __init__(self):
        super(_ShiftedRight, self).__init__()
        with self.init_scope():
            self.embed = L.Linear(D, D)

    def forward(self, x, mask):
        h = self.embed(x, n_batch_axes=2)
        shifted = F.pad(h[:, :-1], ((0, 0), (1, 0), (0, 0)), 'constant')
        steps = x.shape[1]
        causal = self.xp.tril(self.xp.ones((steps, steps), dtype=bool))
        scores = F.matmul(h, shifted, transb=True)
        scores = F.where(self.xp.broadcast_to(causal[None], scores.shape),
                         scores, self.xp.full(scores.shape, -1e9, 'f'))
        return h + F.matmul(F.softmax(scores, axis=2), shifted)


class _HeadsSeparated(chainer.Chain):
    """Queries, keys and values of one projection reshaped to ``(B, T, 3,
    heads, d)``, moved first and taken apart by ``F.separate(axis=0)``."""

    def __init__(self):
        super(_HeadsSeparated, self).__init__()
        with self.init_scope():
            self.qkv = L.Linear(D, 3 * D)

    def forward(self, x, mask):
        batch, steps, _ = x.shape
        qkv = F.reshape(self.qkv(x, n_batch_axes=2),
                        (batch, steps, 3, HEADS, D // HEADS))
        q, k, v = F.separate(F.transpose(qkv, (2, 0, 3, 1, 4)), axis=0)
        scores = F.matmul(q, k, transb=True) / numpy.sqrt(D // HEADS)
        context = F.matmul(F.softmax(scores, axis=-1), v)
        return F.reshape(F.transpose(context, (0, 2, 1, 3)), x.shape)


class _OneHeadPartUnused(_HeadsSeparated):
    """The keys taken apart but not read: their gradient is zeros."""

    def forward(self, x, mask):
        batch, steps, _ = x.shape
        qkv = F.reshape(self.qkv(x, n_batch_axes=2),
                        (batch, steps, 3, HEADS, D // HEADS))
        q, k, v = F.separate(F.transpose(qkv, (2, 0, 3, 1, 4)), axis=0)
        return F.tanh(q) * v


class _NextStepPredicted(chainer.Chain):
    """A language model's inputs and targets cut from one batch (``x[:,
    :-1]``, ``x[:, 1:]``), the inputs projected with the batch and the
    steps merged (``n_batch_axes=2``), positions as long as the inputs
    (``W[:T - 1]``)."""

    def __init__(self):
        super(_NextStepPredicted, self).__init__()
        with self.init_scope():
            self.embed = L.Linear(D, D)
            self.positions = L.EmbedID(64, D)

    def forward(self, x, mask):
        steps = x.shape[1]
        h = self.embed(x[:, :-1], n_batch_axes=2) + \
            self.positions.W[:steps - 1]
        return F.mean_squared_error(F.tanh(h), x[:, 1:])


class _RelativePositions(chainer.Chain):
    """Scores biased by the steps' distance, clipped (``numpy.clip(r[None]
    - r[:, None], -4, 4)`` of ``r = arange(T)``) and looked up, ``(T, T,
    1)`` cut to ``(T, T)``."""

    def __init__(self):
        super(_RelativePositions, self).__init__()
        with self.init_scope():
            self.embed = L.Linear(D, D)
            self.distance = L.EmbedID(9, 1)

    def forward(self, x, mask):
        h = self.embed(x, n_batch_axes=2)
        r = self.xp.arange(x.shape[1])
        apart = self.xp.clip(r[None, :] - r[:, None], -4, 4) + 4
        scores = F.matmul(h, h, transb=True) + \
            self.distance(apart.astype(numpy.int32))[:, :, 0]
        return F.matmul(F.softmax(scores, axis=2), h)


@pytest.mark.parametrize('changing', sorted(SIZES))
@pytest.mark.parametrize('cls, seed', [
    (_WithAFirstStep, 14), (_ShiftedRight, 15), (_HeadsSeparated, 16),
    (_OneHeadPartUnused, 17), (_NextStepPredicted, 18),
    (_RelativePositions, 19)])
def test_steps_joined_padded_taken_apart_or_cut_serve_every_size(
        cls, seed, changing):
    entries = _one_entry_per_mode(cls(), _calls(SIZES[changing], seed=seed))
    assert len(entries) == 2, [str(e.signature) for e in entries]
