"""Sizes the forward's own code reads of values it computed, or hands to
code that reads them unseen, against eager Chainer at batch sizes and
lengths that a baked-in size would get wrong (odd after even ones, sizes
inside the range first checked).

A size read of a convolution's or a reduction's output is its argument's
(the ops' rules for other rows say so); its uses are noted as the
argument's own: a division reads it when run, a decision keeps it in the
key with a warning naming the line."""

import math
import operator
import warnings

import chainer
import chainer.distributions as D
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from tests import differential

F32 = numpy.float32

#: Even batch sizes first (each checked), then odd ones inside their range.
BATCHES = (4, 6, 8, 10, 12, 2, 5, 7, 9, 3)


class _Convolved(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.conv = L.Convolution2D(2, 3, 3, pad=1)
            self.out = L.Linear(12, 4)
            self.reduced = L.Linear(3, 4)


class _DividedByTheConvolvedRows(_Convolved):
    def forward(self, x):
        h = F.relu(self.conv(x))
        pooled = F.max_pooling_2d(h, 2)
        return F.sum(h * h) / h.shape[0] + \
            F.sum(self.out(pooled)) / len(pooled)


class _ParityOfTheReducedRows(_Convolved):
    def forward(self, x):
        h = F.sum(F.relu(self.conv(x)), axis=(2, 3))
        return self.reduced(h) * (h.shape[0] % 2 + 1)


def _images(batches, seed=0):
    rng = numpy.random.RandomState(seed)
    return [(rng.randn(b, 2, 4, 4).astype(F32),) for b in batches]


def test_a_division_by_a_computed_values_rows_serves_every_batch():
    model = _DividedByTheConvolvedRows()
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = differential.check_grads(None, _images(BATCHES), model,
                                          'forward')
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('x: f32[B,2,4,4]'), \
        entry.signature


def test_a_decision_on_a_computed_values_rows_keeps_the_batch_size():
    model = _ParityOfTheReducedRows()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        differential.check_grads(None, _images(BATCHES + (5, 7)), model,
                                 'forward')
    assert any('x.shape[0] taken modulo at test_sizes_read.py' in
               str(w.message) for w in caught), \
        [str(w.message) for w in caught]


def _mean_of_all(x):
    return F.sum(F.tanh(x)) / x.size + F.sum(x) / numpy.prod(x.shape)


def _mean_of_rows_and_steps(x):
    return F.sum(F.tanh(x)) * (1.0 / (x.shape[0] * x.shape[1]))


@pytest.mark.parametrize('fn', [_mean_of_all, _mean_of_rows_and_steps])
def test_a_product_of_sizes_is_read_when_run(fn):
    rng = numpy.random.RandomState(1)
    calls = [(rng.randn(b, 3, 2).astype(F32),) for b in BATCHES]
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = differential.check_grads(fn, calls)
    entry, = jitted.cache_entries()
    assert 'python.size[c=1, factors=' in str(entry.graph), entry.graph


def test_a_product_of_sizes_runs_in_onnxruntime():
    pytest.importorskip('onnxruntime')
    jitted = chainerjit.jit(_mean_of_all, backend='onnxruntime')
    rng = numpy.random.RandomState(2)
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for b in BATCHES:
            x = rng.randn(b, 3, 2).astype(F32)
            testing.assert_results_equal(jitted(x), _mean_of_all(x), 1e-6,
                                         1e-6)
    entry, = jitted.cache_entries()
    assert entry.backend == 'onnxruntime', entry.describe_backend()


_WEIGHTS = {5: 3.0, 7: 2.0}


def _weighted_by_a_table(x):
    return F.tanh(x) * _WEIGHTS.get(len(x), 1.0)


def _weighted_by_a_set(x):
    return F.tanh(x) * (2.0 if x.shape[0] in {5, 9} else 1.0)


@pytest.mark.parametrize('fn', [_weighted_by_a_table, _weighted_by_a_set])
def test_a_size_used_as_a_key_stays_in_the_key(fn):
    rng = numpy.random.RandomState(3)
    calls = [(rng.randn(b, 3).astype(F32),) for b in BATCHES + (5, 9)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        differential.check_grads(fn, calls)
    assert any('used as a dict key or set member at test_sizes_read.py'
               in str(w.message) for w in caught), \
        [str(w.message) for w in caught]


#: A weight per batch size: the same for the sizes first checked, then not.
_SCALES = (1.0,) * 13 + (2.0,) * 20


def _scaled_by_a_tuple(x):
    return F.tanh(x) * _SCALES[len(x)]


def _scaled_by_a_tuple_named(x):
    B = x.shape[0]
    return F.tanh(x) * _SCALES[B - 1] + x[B - 1]


def _scaled_on_a_line_of_its_own(x):
    n: int = x.shape[0]
    n += 0
    w = _SCALES[n]
    return F.tanh(x) * w


def test_a_size_indexing_a_tuple_stays_in_the_key():
    # (the tuple reads it in C; the same size indexing the argument, an
    # array, is seen)
    rng = numpy.random.RandomState(3)
    calls = [(rng.randn(b, 3).astype(F32),) for b in BATCHES + (13, 15, 4)]
    for fn in (_scaled_by_a_tuple, _scaled_by_a_tuple_named,
               _scaled_on_a_line_of_its_own):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            differential.check_grads(fn, calls)
        assert any('used as an index of a list or tuple at '
                   'test_sizes_read.py' in str(w.message)
                   for w in caught), [str(w.message) for w in caught]


def _doubled_past_a_formatted_size(x):
    # (str's % formats the int in C: no Length method sees it)
    if '%d' % x.shape[0] > '8':
        return F.tanh(x) * 2
    return F.tanh(x)


def test_a_size_formatted_by_str_stays_in_the_key():
    rng = numpy.random.RandomState(3)
    calls = [(rng.randn(b, 3).astype(F32),) for b in (2, 12, 4, 11, 10, 9,
                                                      9, 3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        differential.check_grads(_doubled_past_a_formatted_size, calls)
    assert any("x.shape[0] formatted by str's % at test_sizes_read.py" in
               str(w.message) for w in caught), \
        [str(w.message) for w in caught]


def _last_row_weighed(x):
    B = len(x)
    return F.tanh(x[:B]) * x[B - 1]


def _one_entry_for_every_batch(fn, seed):
    """``fn`` jitted and eagerly over :data:`BATCHES`, new values each
    call, equal in values and gradients: one entry, no warning."""
    rng = numpy.random.RandomState(seed)
    calls = [(rng.randn(b, 3).astype(F32),) for b in BATCHES]
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = differential.check_grads(fn, calls)
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


def test_a_size_indexing_an_array_serves_every_batch():
    _one_entry_for_every_batch(_last_row_weighed, 6)


_PICKED = [False]


def _picked_on_a_line_not_run(x):
    B, n = x.shape
    h = F.tanh(x)
    if _PICKED[0]:
        return (h, h)[B - 1]  # (reads B in C, but only where it runs)
    return h * n


def test_a_size_indexing_a_tuple_on_a_line_not_run_serves_every_batch():
    _one_entry_for_every_batch(_picked_on_a_line_not_run, 7)


_ROW = chainer.Variable(numpy.arange(3, dtype=F32))


def _broadcast_to_a_numpy_int(x):
    return x * F.broadcast_to(_ROW, (numpy.int64(x.shape[0]), 3))


def test_a_shape_of_numpy_ints_broadcasts_as_eagerly():
    rng = numpy.random.RandomState(4)
    calls = [(rng.randn(b, 3).astype(F32),) for b in (3, 5, 3, 8)]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.RecompileWarning)
        differential.check_grads(_broadcast_to_a_numpy_int, calls)


def _odd_batches_weighed_in_c(x):
    # (the float's C code reads the size, unseen by the recording)
    return F.tanh(x) * (1.0 + math.fmod(len(x), 2))


def test_a_size_dependence_one_mode_finds_drops_the_others_entry():
    jitted = chainerjit.jit(_odd_batches_weighed_in_c)
    rng = numpy.random.RandomState(5)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.RecompileWarning)
        for b in (2, 4, 6, 8, 10, 12, 14):  # a training entry, checked
            x = chainer.Variable(rng.randn(b, 3).astype(F32))
            F.sum(jitted(x)).backward()
        with chainer.using_config('train', False), \
                chainer.no_backprop_mode():
            for b in (2, 4, 5):  # inference finds the odd size out
                x = rng.randn(b, 3).astype(F32)
                testing.assert_results_equal(
                    jitted(x), _odd_batches_weighed_in_c(x))
        for b in (7, 9, 11):  # training at sizes it no longer checks
            x = rng.randn(b, 3).astype(F32)
            testing.assert_results_equal(
                jitted(x), _odd_batches_weighed_in_c(x))
    assert not any('B' in str(e.signature) for e in jitted.cache_entries())


class _MaskedSteps(chainer.Chain):
    """A time-major masked RNN whose steps a first call of two unrolls:
    the padding past them would hide a program that runs only those."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.cell = L.Linear(4, 4)

    def forward(self, xs, ms):
        h = self.xp.zeros(xs.shape[1:], F32)
        for x, m in zip(xs, ms):
            h = m[:, None] * F.tanh(self.cell(x) + h) + \
                (1 - m[:, None]) * h
        return h


@pytest.mark.parametrize('backend', ['auto', 'onnxruntime'])
def test_a_loop_unrolled_over_the_first_axis_is_not_widened(backend):
    if backend == 'onnxruntime':
        pytest.importorskip('onnxruntime')
    model = _MaskedSteps()
    jitted = chainerjit.jit(model.forward, backend=backend)
    rng = numpy.random.RandomState(6)
    with warnings.catch_warnings(), \
            chainer.using_config('train', False), chainer.no_backprop_mode():
        warnings.simplefilter('ignore', errors.RecompileWarning)
        warnings.simplefilter('ignore', errors.LoopWarning)
        for steps, real in ((2, 2), (9, 2), (9, 9), (9, 6)):
            xs = rng.randn(steps, 3, 4).astype(F32)
            ms = numpy.zeros((steps, 3), F32)
            ms[:real] = 1
            testing.assert_results_equal(jitted(xs, ms),
                                         model.forward(xs, ms), 1e-5, 1e-6)


class _Asserted(_Convolved):
    """Chainer's text classification example asserts its state's shape:
    two sizes of the same batch compared hold at every size."""

    def forward(self, x):
        h = F.sum(F.relu(self.conv(x)), axis=(2, 3))
        assert h.shape == (len(x), 3)
        return self.reduced(h)


def test_a_size_compared_with_itself_serves_every_batch():
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = differential.check_grads(None, _images(BATCHES),
                                          _Asserted(), 'forward')
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('x: f32[B,2,4,4]'), \
        entry.signature


def _mean_of_an_alias(x):
    y = x
    return F.sum(F.tanh(y)) * (1.0 / len(y)) + F.sum(y) * (0.5 * y.shape[0])


def test_a_literal_over_a_size_of_another_name_is_read_when_run():
    # (y is x: its size is the argument's, and 1.0 / len(y) a float of C's
    # unless the literal is the recording's own)
    _one_entry_for_every_batch(_mean_of_an_alias, 7)


class _Averaged(chainer.Chain):
    """A mean or a doubled sum, as the model's flag says."""

    average = False

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(3, 4)

    def forward(self, x):
        if self.average:
            return F.sum(self.l1(x)) / len(x)
        return F.sum(self.l1(x)) * float(x.shape[0])


def test_an_entry_for_every_size_leaves_those_of_another_state():
    model = _Averaged()
    jitted = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(8)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.RecompileWarning)
        for b, average in [(4, False), (3, False), (6, True), (5, True),
                           (4, False), (3, False), (7, True)]:
            model.average = average
            x = rng.randn(b, 3).astype(F32)
            with chainer.using_config('train', False):
                testing.assert_results_equal(jitted(x), model.forward(x),
                                             rtol=1e-5, atol=1e-5)
    info = jitted.cache_info()
    # Both sizes of the first state's; the sizes seen then open the batch
    # at the second state's first call.
    assert info.misses == 3, jitted.cache_report()


def _bernoulli_entropy(x):
    # (Chainer's ModifiedXLogX holds log(p) as an attribute, not an input)
    return F.sum(D.Bernoulli(logit=x).entropy) * 2


def test_a_function_holding_a_computed_variable_runs_eagerly():
    rng = numpy.random.RandomState(9)
    calls = [(rng.randn(3, 4).astype(F32),) for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        differential.check_grads(_bernoulli_entropy, calls,
                                 fallback_ok=True)


class _WeighedByParity(chainer.Chain):
    """An LSTM over the steps whose output is weighed by the parity of the
    batch size, read in C: written in binary by ``bin`` or taken as a
    plain int first (``int.__index__``), which no Length sees."""

    def __init__(self, read):
        super().__init__()
        self.read = read
        with self.init_scope():
            self.cell = L.StatelessLSTM(3, 4)

    def forward(self, xs):
        T, B, _ = xs.shape
        c = h = None
        for t in range(T):
            c, h = self.cell(c, h, xs[t])
        odd = bin(B).endswith('1') if self.read == 'bin' else \
            int.__index__(B) % 2 == 1
        return h * (0.5 if odd else 1.0)


@pytest.mark.parametrize('read', ['bin', 'index'])
def test_a_parity_read_in_c_never_reaches_another_batch(read):
    # even batch sizes first, then odd ones inside their range
    rng = numpy.random.RandomState(12)
    calls = [(rng.randn(t, b, 3).astype(F32),) for t, b in [
        (5, 4), (7, 2), (9, 6), (6, 8), (8, 10), (7, 5), (9, 3), (5, 7),
        (7, 5), (9, 3)]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        differential.check_grads(None, calls, model=_WeighedByParity(read),
                                 method='forward', fallback_ok=True)
    if read == 'bin':
        assert any('xs.shape[1] passed to bin at test_sizes_read.py' in
                   str(w.message) for w in caught), \
            [str(w.message) for w in caught]


def _less_a_share(x):
    return F.tanh(x) * (1.0 - 1.0 / x.shape[0])


def _less_a_named_share(x):
    share = 1.0 / len(x)
    return F.tanh(x) * (1.0 - share)


@pytest.mark.parametrize('fn', [_less_a_share, _less_a_named_share])
def test_a_literal_less_a_share_of_the_size_serves_every_batch(fn):
    # (the literal's arithmetic with the Scalar of 1.0 / B is recorded)
    _one_entry_for_every_batch(fn, 13)


class _FirstItemScaled(chainer.Chain):
    """Sentences padded, scaled by the first one's length as the forward
    reads it: ``xs[0].__len__()``, ``operator.length_hint(xs[0])`` or
    ``xs[0].nbytes // xs[0].itemsize``."""

    def __init__(self, read):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(20, 4)
        self.read = read

    def forward(self, xs):
        ids = F.pad_sequence(xs, padding=-1).array
        n = self.read(xs[0])
        return F.sum(self.embed(numpy.maximum(ids, 0)), axis=1) * float(n)


@pytest.mark.parametrize('read', [
    lambda x: x.__len__(), operator.length_hint,
    lambda x: x.nbytes // x.itemsize], ids=['__len__', 'length_hint',
                                            'nbytes'])
def test_an_items_length_read_otherwise_than_by_len_is_not_baked_in(read):
    # The same number and longest length at the third call, the first
    # sentence's length another: a length baked in would be the second's.
    rng = numpy.random.RandomState(4)
    model = _FirstItemScaled(read)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.RecompileWarning)
        for lengths in ([7, 7, 7], [7, 4, 4], [4, 7, 4], [5, 7, 2]):
            xs = [rng.randint(0, 20, n).astype(numpy.int32)
                  for n in lengths]
            testing.assert_results_equal(jitted(xs), model.forward(xs))


_CUT_AND_MOVED = {  # the rows of x[2:] (two fewer than x's) read elsewhere
    'a new first axis': lambda x: x[2:][None].shape[1],
    'expanded': lambda x: F.expand_dims(F.tanh(x[2:]), 0).shape[1],
    'transposed': lambda x: x[2:].T.shape[1],
    'swapped': lambda x: F.swapaxes(F.tanh(x[2:]), 0, 1).shape[1],
}


@pytest.mark.parametrize('moved', sorted(_CUT_AND_MOVED))
def test_rows_cut_off_the_first_axis_and_moved_are_read_as_such(moved):
    # Unchecked against eager, so that a program reading the wrong size
    # shows: the rows moved are two fewer than the argument's.
    size = _CUT_AND_MOVED[moved]

    def positions(x):
        return numpy.arange(size(x) + 1, dtype=numpy.float32)
    jitted = chainerjit.jit(positions, check=False)
    rng = numpy.random.RandomState(0)
    for batch in (3, 3, 4, 4, 6, 6, 9):
        x = rng.standard_normal((batch, 5)).astype(numpy.float32)
        numpy.testing.assert_array_equal(jitted(x), positions(x))
