"""A function that keeps missing stops recording (``runtime.budget``):
new signatures run eagerly, unrecorded, with a one-time warning; the
entries compiled before still run; results stay eager's throughout."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from chainerjit.runtime import budget


class Scaled(chainer.Chain):

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 3)

    def forward(self, x, k):
        return F.tanh(self.fc(x)) * k


class Counting(chainer.Chain):
    """Reads an accuracy count into Python after a ``return`` (so it is
    not cut at a graph break): every signature runs eagerly."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 3)

    def forward(self, x, t=None):
        y = self.fc(x)
        if t is None:
            return y
        self.correct = int((y.array.argmax(axis=1) == t).sum())
        return F.softmax_cross_entropy(y, t)


class Reporting(Counting):
    """Reports the count instead of keeping it on the model."""

    def forward(self, x, t=None):
        y = self.fc(x)
        if t is None:
            return y
        chainer.report({'correct': int((y.array.argmax(axis=1) == t).sum())},
                       self)
        return F.softmax_cross_entropy(y, t)


def _run(fn, calls):
    """The results of ``fn`` on each call, and the RecompileWarnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        results = [fn(*args) for args in calls]
    return results, [str(w.message) for w in caught
                     if issubclass(w.category, chainerjit.RecompileWarning)
                     and 'no longer records' in str(w.message)]


def _twins(cls):
    """The eager model and the jitted forward of its twin. ``Scaled``'s
    with ``dynamic=False``: each value of ``k`` is an entry of its own (by
    default a float or int that changes leaves the key, see
    ``frontend.scalars``)."""
    eager, jitted = cls(), cls()
    jitted.copyparams(eager)
    return eager, chainerjit.jit(jitted.forward, recompile_limit=3,
                                 dynamic=False if cls is Scaled else None)


def _scaled_calls(rng, values):
    """Calls with ``k`` an int."""
    return [(rng.standard_normal((2, 4)).astype(numpy.float32), int(k))
            for k in values]


def test_a_python_value_new_on_every_call_stops_recording(rng):
    eager, jitted = _twins(Scaled)
    calls = _scaled_calls(rng, [float(k) for k in range(1, 11)])
    results, stops = _run(jitted, calls)
    for r, args in zip(results, calls):
        testing.assert_results_equal(r, eager.forward(*args))
    info = jitted.cache_info()
    # The first call, then three recorded for a new value of k.
    assert info.compiles == 4 and info.misses == 10 and info.hits == 0
    assert info.eager == 6
    assert len(stops) == 1
    assert 'new value of a Python argument' in stops[0]
    assert 'k: value' in stops[0]
    assert 'unrecorded' in jitted.cache_report()
    # An entry compiled before still runs; a new value still runs eagerly.
    again = _scaled_calls(rng, [2.0, 99.0])
    for args in again:
        testing.assert_results_equal(jitted(*args), eager.forward(*args))
    info = jitted.cache_info()
    assert info.compiled == 1 and info.eager == 7 and info.compiles == 4
    assert 'runs eagerly, unrecorded' in jitted.explain(*again[1])


def test_values_that_repeat_keep_recording(rng):
    eager, jitted = _twins(Scaled)
    values = [1.0, 2.0, 3.0, 1.0, 4.0, 5.0, 6.0, 2.0, 7.0, 8.0]
    results, stops = _run(jitted, _scaled_calls(rng, values))
    assert not stops and jitted.budget.stopped is None
    info = jitted.cache_info()
    assert info.compiles == 8 and info.compiled == 2 and info.eager == 0


def test_shapes_stop_recording_past_what_the_cache_holds(rng):
    f = chainerjit.jit(maxsize=4, recompile_limit=2, dynamic=False)(
        lambda x: F.exp(x) * 2)
    calls = [(rng.standard_normal((n, 3)).astype(numpy.float32),)
             for n in range(1, 9)]
    results, stops = _run(f, calls)
    for r, (x,) in zip(results, calls):
        testing.assert_results_equal(r, F.exp(x) * 2)
    assert f.cache_info().compiles == 4 and f.cache_info().eager == 4
    assert len(stops) == 1 and 'more than the cache holds' in stops[0]


def _cycling(rng, sizes, repeats):
    """Calls cycling through ``(n, 3)`` arrays of each of ``sizes``, each
    size ``repeats`` times in a row."""
    return [(rng.standard_normal((n, 3)).astype(numpy.float32),)
            for _ in range(3) for n in sizes for _ in range(repeats)]


def test_entries_evicted_unused_stop_recording(rng):
    """Calls cycling through more shapes than the cache holds, a few
    calls at each: what is compiled is evicted before it pays back."""
    f = chainerjit.jit(maxsize=4, recompile_limit=3, dynamic=False)(
        lambda x: F.exp(x) * 2)
    calls = _cycling(rng, range(1, 9), 2)
    results, stops = _run(f, calls)
    for r, (x,) in zip(results, calls):
        testing.assert_results_equal(r, F.exp(x) * 2)
    assert len(stops) == 1 and 'were evicted having served fewer than 4 ' \
        'calls each' in stops[0], stops
    info = f.cache_info()
    # Four entries filled the cache, three more evicted one each.
    assert info.compiles == 7 and info.currsize == 4
    assert info.compiled + info.eager == len(calls) - info.compiles


def test_entries_evicted_after_serving_keep_recording(rng):
    """Shapes that change seldom, each serving many calls before the next:
    evicting them does not stop recording."""
    f = chainerjit.jit(maxsize=4, recompile_limit=3, dynamic=False)(
        lambda x: F.exp(x) * 2)
    _, stops = _run(f, _cycling(rng, range(1, 9), 5))
    assert not stops and f.budget.stopped is None
    assert f.cache_info().compiles == 24


def test_new_shapes_beyond_the_value_limit_still_record(rng):
    f = chainerjit.jit(recompile_limit=2, dynamic=False)(
        lambda x: F.exp(x) * 2)
    calls = [(rng.standard_normal((n, 3)).astype(numpy.float32),)
             for n in range(1, 9)]
    _, stops = _run(f, calls)
    assert not stops and f.cache_info().compiles == 8


class Encoder(chainer.Chain):
    """The first two words of each of a list of sequences of different
    lengths padded to the longest: a cut of the padded words, which keeps
    their lengths in the key (``runtime.ragged``)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(20, 6)
            self.out = L.Linear(6, 3)

    def forward(self, xs, t):
        padded = F.pad_sequence([self.embed(x) for x in xs])
        h = F.sum(padded[:, :2], axis=1)
        return F.softmax_cross_entropy(self.out(h), t)


def _sequences(rng, n=4):
    return ([rng.randint(0, 20, rng.randint(2, 9)).astype(numpy.int32)
             for _ in range(n)], rng.randint(0, 3, n).astype(numpy.int32))


def test_new_lengths_of_a_list_of_sequences_stop_recording(rng):
    eager, jitted = _twins(Encoder)
    calls = [_sequences(rng) for _ in range(12)]
    with chainer.no_backprop_mode():
        results, stops = _run(jitted, calls)
        for r, args in zip(results, calls):
            testing.assert_results_equal(r, eager.forward(*args))
    mine = [s for s in stops if 'Encoder.forward' in s]
    assert len(mine) == 1 and 'new lengths of the items of xs' in mine[0]
    info = jitted.cache_info()
    # (The first two calls find the list joinable, padded whole, then
    # not: the cut of the padded words takes the recorded width only.)
    assert info.compiles == 4 and info.eager == 6
    # Eagerly the links still run compiled, as segments (but the first).
    assert jitted.segments()['out'].cache_info().compiled >= info.eager - 1


def test_lists_of_alike_items_that_change_keep_recording(rng):
    # Items of one shape (a batch size changing for all of them) are no
    # sequences of different lengths.
    f = chainerjit.jit(recompile_limit=2, dynamic=False)(
        lambda xs: F.exp(xs[0]) + xs[1])
    calls = [([rng.standard_normal((n, 3)).astype(numpy.float32)
               for _ in range(2)],) for n in range(1, 7)]
    _, stops = _run(f, calls)
    assert not stops and f.cache_info().compiles == 6


def test_the_same_fallback_on_new_signatures_stops_recording(rng):
    eager, jitted = _twins(Counting)
    calls = [(rng.standard_normal((n, 4)).astype(numpy.float32),
              rng.randint(0, 3, n).astype(numpy.int32))
             for n in (2, 3, 4, 5, 3, 6)]
    results, stops = _run(jitted, calls)
    for r, args in zip(results, calls):
        testing.assert_results_equal(r, eager.forward(*args))
    info = jitted.cache_info()
    # Recorded twice (lengths 2 and 3), both falling back at the count;
    # the rest run eagerly unrecorded, except length 3's entry, hit.
    assert info.compiles == 0 and info.currsize == 2
    assert info.misses == 5 and info.hits == 1 and info.eager == 4
    assert len(stops) == 1
    assert '%d signatures ran eagerly' % budget.FALLBACK_REPEATS in stops[0]
    assert 'forward' in stops[0] or 'line' in stops[0]


def test_cache_clear_records_again(rng):
    eager, jitted = _twins(Scaled)
    _run(jitted, _scaled_calls(rng, [float(k) for k in range(1, 8)]))
    assert jitted.budget.stopped is not None
    jitted.cache_clear()
    assert jitted.budget.stopped is None
    _run(jitted, _scaled_calls(rng, [50.0, 50.0]))
    info = jitted.cache_info()
    assert info.compiles == 1 and info.compiled == 1


def test_a_fallback_entry_hit_in_c_runs_eagerly_once(rng, monkeypatch):
    """The C hit path runs an entry without a program eagerly itself
    (one key, one lookup), counted as a hit that ran eagerly."""
    eager, jitted = _twins(Reporting)
    x = rng.standard_normal((3, 4)).astype(numpy.float32)
    t = rng.randint(0, 3, 3).astype(numpy.int32)
    _run(jitted, [(x, t), (x, t)])  # records; checks the model once

    original = type(jitted).call_general

    def call_general(self, args, kwargs):  # the links' segments may
        if self is jitted:
            pytest.fail('the call went to call_general')
        return original(self, args, kwargs)
    monkeypatch.setattr(type(jitted), 'call_general', call_general)
    for _ in range(3):
        testing.assert_results_equal(jitted(x, t), eager.forward(x, t))
    info = jitted.cache_info()
    assert info.hits == 4 and info.eager == 4 and info.compiled == 0


class _Annealed(chainer.Chain):
    """A VAE-like loss weighted by a step the model counts
    (``self.iteration``, read and then advanced by the forward)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 4)
        self.iteration = 0

    def forward(self, x):
        beta = min(1.0, self.iteration / 5.0)
        self.iteration += 1
        return F.sum(self.l1(x)) * beta


def test_the_recompile_warning_names_an_attribute_that_changed(rng):
    # The batch size changes at the same calls: an entry serves every
    # size, and what keeps changing is the attribute.
    eager, jitted = _Annealed(), _Annealed()
    jitted.copyparams(eager)
    fn = chainerjit.jit(jitted.forward)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for batch in (1, 2, 3, 4, 6, 8, 11, 16, 3, 5):
            x = rng.standard_normal((batch, 4)).astype(numpy.float32)
            testing.assert_results_equal(fn(x), eager.forward(x))
    said = [str(w.message) for w in caught if 'keeps changing' in
            str(w.message)]
    assert len(said) == 1 and '(model).iteration: value' in said[0], said
    assert 'The forward reads numbers the model holds (self.iteration)' \
        in said[0], said
