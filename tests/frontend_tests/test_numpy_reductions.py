"""NumPy reductions of the arguments in the forward's own code (a padded
batch's mask counted with ``masks.sum()``, ``m.mean()``) are nodes whose
kernels run at any size: a loss normalised by the number of real tokens
keeps one entry for every length and batch size, and the scalars they
give are computed again on every call, from the call's values.

Each model runs jitted and eagerly with new values on every call; losses
and the parameters' gradients must equal eager Chainer's.
"""

import copy
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing


I, H, C = 5, 7, 4
SIZES = ((5, 3), (5, 3), (8, 3), (11, 6), (4, 2), (13, 1), (6, 9))


class MaskedLanguageModel(chainer.Chain):
    """A time-major padded batch: the loss of the real tokens over their
    number, counted by NumPy (``how``: the form of the count)."""

    def __init__(self, how):
        super(MaskedLanguageModel, self).__init__()
        self.how = how
        with self.init_scope():
            self.lstm = L.LSTM(I, H)
            self.out = L.Linear(H, C)

    def forward(self, xs, masks, ts):
        self.lstm.reset_state()
        loss = 0
        for x, m, t in zip(xs, masks, ts):
            y = self.out(self.lstm(x))
            loss += F.sum(F.softmax_cross_entropy(y, t, reduce='no') * m)
        return loss / self._count(masks, ts)

    def _count(self, masks, ts):
        if self.how == 'sum':
            return masks.sum()
        if self.how == 'numpy.sum':
            return numpy.sum(masks, axis=(0, 1))
        if self.how == 'labels':
            return (ts >= 0).sum().astype(numpy.float32)
        return masks.mean() * masks.size  # (the size: a number per call)


def _padded_batches(rng, sizes=SIZES):
    calls = []
    for T, B in sizes:
        masks = (rng.rand(T, B) > 0.3).astype(numpy.float32)
        masks[0] = 1  # (a token in every sequence)
        ts = rng.randint(0, C, (T, B)).astype(numpy.int32)
        ts[masks == 0] = -1
        calls.append((rng.standard_normal((T, B, I)).astype(numpy.float32),
                      masks, ts))
    return calls


def _grads(model, fn, args):
    model.cleargrads()
    loss = fn(*args)
    loss.backward()
    return loss.array, {name: p.grad.copy()
                        for name, p in model.namedparams()}


@pytest.mark.parametrize('how', ['sum', 'numpy.sum', 'labels'])
def test_a_loss_over_the_tokens_counted_keeps_one_entry(how):
    model = MaskedLanguageModel(how)
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        warnings.simplefilter('error', errors.RecompileWarning)
        for args in _padded_batches(numpy.random.RandomState(0)):
            expected, e_grads = _grads(model, model, args)
            actual, j_grads = _grads(twin, jitted, args)
            numpy.testing.assert_allclose(actual, expected, rtol=1e-5)
            for name in e_grads:
                numpy.testing.assert_allclose(
                    j_grads[name], e_grads[name], rtol=1e-4, atol=1e-6,
                    err_msg=name)
    assert jitted.cache_info().currsize == 1, jitted.cache_report()
    assert jitted.cache_info().hits > 0
    entry, = jitted.cache_entries()
    assert 'xs: f32[T,B,5]' in str(entry.signature), entry.signature


def test_a_mean_of_an_argument_is_computed_on_every_call():
    # x.mean() gives a NumPy scalar: followed as a node, not the
    # recorded call's number.
    def scaled(x, w):
        return F.tanh(x) * w.mean() + w.max(axis=1, keepdims=True)

    rng = numpy.random.RandomState(1)
    calls = [(rng.standard_normal((b, 3)).astype(numpy.float32),
              rng.standard_normal((b, 3)).astype(numpy.float32))
             for b in (4, 4, 6, 1, 9)]
    jitted = testing.assert_jit_matches_eager(scaled, calls)
    entry, = jitted.cache_entries()
    assert 'ndarray.mean' in str(entry.graph), entry.graph


def test_a_reduction_along_the_batch_keeps_its_rows_elsewhere():
    # The sum over the features keeps one row per example; the one over
    # the batch is a fixed shape: both serve every batch size.
    def normalised(h, m):
        per_row = m.sum(axis=1, keepdims=True) + 1
        per_column = numpy.sum(m, axis=0, keepdims=True) + 1
        return F.sum(h * m / per_row / per_column, axis=1)

    rng = numpy.random.RandomState(2)
    calls = []
    for b in (4, 4, 7, 1, 12, 3):
        m = (rng.rand(b, 3) > 0.4).astype(numpy.float32)
        m[:, 0] = 1
        calls.append((rng.standard_normal((b, 3)).astype(numpy.float32), m))
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = testing.assert_jit_matches_eager(normalised, calls)
    assert jitted.cache_info().currsize == 1, jitted.cache_report()


def test_a_reduction_with_a_where_mask_keeps_the_size_with_a_warning():
    def masked_sum(h, m):
        return F.sum(h) / numpy.sum(m, where=m > 0.5)

    rng = numpy.random.RandomState(3)
    calls = [(rng.standard_normal((b, 3)).astype(numpy.float32),
              rng.rand(b, 3).astype(numpy.float32) + 0.5)
             for b in (4, 4, 7, 2)]
    with pytest.warns(errors.RecompileWarning, match='numpy.sum'):
        testing.assert_jit_matches_eager(masked_sum, calls)


def test_a_mean_times_the_size_keeps_sizes_in_the_key():
    # masks.size is a size the forward computes with: each new one
    # compiles again, with a warning, and every value is eager's.
    model = MaskedLanguageModel('size')
    jitted = chainerjit.jit(copy.deepcopy(model))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for args in _padded_batches(numpy.random.RandomState(4)):
            with chainer.using_config('train', False):
                numpy.testing.assert_allclose(
                    jitted(*args).array, model(*args).array, rtol=1e-5)
    assert any(issubclass(w.category, (errors.LoopWarning,
                                       errors.RecompileWarning))
               for w in caught), [str(w.message) for w in caught]
