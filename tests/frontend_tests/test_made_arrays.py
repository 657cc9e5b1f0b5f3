"""Arrays the forward makes with NumPy (``numpy.full``, ``zeros``, ...)
and then writes into: written with Python values they are constants of
the program; written with values computed from the inputs (a batch padded
by ``concat_examples``, or by hand), never. Each forward is called jitted
and eagerly with new values at the same shapes, and at new shapes."""

import warnings

import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from tests.runtime_tests.test_ragged_lists import _BagOfWords
from tests.runtime_tests.test_ragged_lists import _model
from tests import differential

F32 = numpy.float32
I32 = numpy.int32


def _sentences(rng, lengths):
    xs = [rng.randint(0, 30, n).astype(I32) for n in lengths]
    ys = [rng.randint(0, 3, (1,)).astype(I32) for _ in lengths]
    return xs, ys


def test_a_batch_padded_by_concat_examples_is_read_on_every_call(rng):
    calls = [_sentences(rng, (3, 5, 4)) for _ in range(4)]
    jitted = differential.check_seeded(_model(_BagOfWords), calls)
    entry, = jitted.cache_entries()
    # joined at the call boundary (frontend.joining), padded on each call
    assert 'xs: i32[B,W]' in str(entry.graph), entry.graph
    assert 'const' not in str(entry.graph), entry.graph


def test_a_batch_padded_by_concat_examples_at_new_lengths(rng):
    calls = [_sentences(rng, lengths) for lengths in
             [(3, 5, 4), (3, 5, 4), (6, 2, 2), (2, 7, 3), (3, 5, 4)]]
    differential.check_seeded(_model(_BagOfWords), calls)


def _padded_by_hand(xs, w):
    block = numpy.full((len(xs), 6), -1, dtype=I32)
    for i, x in enumerate(xs):
        block[i, :len(x)] = x
    return F.embed_id(block, w, ignore_label=-1)


def _positions_from_an_input(x, t):
    mask = numpy.zeros(x.shape, dtype=F32)
    mask[numpy.arange(len(t)), t] = 1
    return F.sum(x * mask, axis=1)


def _written_after_use(x):
    scale = numpy.ones(x.shape[1:], dtype=F32)
    y = x * scale
    scale[0] = 3
    return y + x * scale


def _through_a_view(x):
    block = numpy.zeros((3, 5), dtype=F32)
    block[1][:2] = x[0, :2]
    return F.relu(x * block)


def _added_in_place(x):
    block = numpy.ones((3, 5), dtype=F32)
    block += x
    return F.relu(x * block)


def _copied_to(x):
    block = numpy.ones((3, 5), dtype=F32)
    numpy.copyto(block, x)
    return F.relu(x * block)


def _ufunc_out(x):
    block = numpy.zeros((3, 5), dtype=F32)
    numpy.multiply(x, 2, out=block)
    return F.relu(x * block)


def _through_flat(x):
    block = numpy.zeros((3, 5), dtype=F32)
    block.flat[:5] = x[0]
    return F.relu(x * block)


def _put(x):
    block = numpy.zeros((3, 5), dtype=F32)
    block.put([0, 1, 2], x[0, :3])
    return F.relu(x * block)


def _added_at(x):
    block = numpy.zeros((3, 5), dtype=F32)
    numpy.add.at(block, [0, 0], x[0])
    return F.relu(x * block)


def _floats(rng):
    return rng.standard_normal((3, 5)).astype(F32),


@pytest.mark.parametrize('fn', [
    _through_a_view, _added_in_place, _copied_to, _ufunc_out, _through_flat,
    _put, _added_at])
def test_every_way_of_writing_is_watched(rng, fn):
    test_writes_the_program_cannot_follow_are_never_constants(rng, fn,
                                                              _floats)


@pytest.mark.parametrize('fn, make', [
    (_padded_by_hand, lambda rng: (
        [rng.randint(0, 20, n).astype(I32) for n in (3, 6, 2)],
        rng.standard_normal((20, 4)).astype(F32))),
    (_positions_from_an_input, lambda rng: (
        rng.standard_normal((3, 5)).astype(F32),
        rng.randint(0, 5, 3).astype(I32))),
    (_written_after_use, lambda rng: (
        rng.standard_normal((3, 5)).astype(F32),)),
])
def test_writes_the_program_cannot_follow_are_never_constants(
        rng, fn, make):
    jitted = chainerjit.jit(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for _ in range(4):
            args = make(rng)
            testing.assert_results_equal(jitted(*args), fn(*args))
    assert any(isinstance(w.message, errors.FallbackWarning)
               for w in caught), [str(w.message) for w in caught]


def _causal(x):
    n = x.shape[1]
    mask = numpy.zeros((n, n), dtype=F32)
    mask[numpy.triu_indices(n, 1)] = -1e4
    return F.softmax(F.matmul(x, x, transb=True) + mask)


def _hand_filled(x):
    table = numpy.empty((2, x.shape[-1]), dtype=F32)
    table[0] = 0.5
    table[1, :] = numpy.arange(x.shape[-1])
    return F.linear(x, table)


@pytest.mark.parametrize('fn', [_causal, _hand_filled])
def test_an_array_written_with_python_values_is_a_constant(rng, fn):
    calls = [(rng.standard_normal((4, 4)).astype(F32),) for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        testing.assert_jit_matches_eager(fn, calls)
    jitted = chainerjit.jit(fn)
    for args in calls:
        jitted(*args)
    assert jitted.cache_info().hits == len(calls) - 1
    assert 'const' in str(jitted.last_entry.graph)
