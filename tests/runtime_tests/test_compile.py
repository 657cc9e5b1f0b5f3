"""The compile pipeline on its own (``runtime.compile.compile_call``):
the entries it builds for a call that missed the cache, run against eager
Chainer with new input values."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from chainerjit import errors
from chainerjit import testing
from chainerjit.frontend import packing
from chainerjit.frontend import signature
from chainerjit.runtime import cache
from chainerjit.runtime import compile as pipeline


class _Reports(object):
    """Collects what the pipeline reports back to its caller."""

    def __init__(self):
        self.fallbacks = []
        self.unrolled = []
        self.misses = []
        self.backprop_programs = 0

    def caller(self, fn, instance=None, check=True):
        return pipeline.Caller(
            fn=fn, instance=instance, name=getattr(fn, '__name__', 'f'),
            check=check, lengths_unsound=False,
            warn_fallback=lambda error, loc, cut=None: self.fallbacks.append(
                error),
            warn_unrolled=lambda error, loc: self.unrolled.append(error),
            explain_miss=self._explain_miss,
            on_backprop_program=self._note_backprop_program)

    def _explain_miss(self, sig, key):
        self.misses.append(sig)
        return 'first call'

    def _note_backprop_program(self):
        self.backprop_programs += 1


def _compile(caller, *args):
    train, backprop = signature.config_flags()
    key, leaves = signature.make_key(args, {}, train, backprop)
    return pipeline.compile_call(caller, key, leaves, args, {})


def _run_compiled(entry, instance, *args):
    """Runs ``entry``'s program on a call with ``args`` through a cache,
    as a cache hit does."""
    entries = cache.Cache(None)
    entries.insert(entry)
    train, backprop = signature.config_flags()
    key, leaves = signature.make_key(args, {}, train, backprop)
    found, params, symbols = entries.lookup(key, instance)
    assert found is entry
    outs = entry.program.run(signature.leaf_arrays(leaves) + params +
                             symbols)
    return entry.build_result(outs, leaves, instance)


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(numpy.float32)


_W = numpy.random.RandomState(1).standard_normal((4, 3)).astype(
    numpy.float32)


def _mlp_step(x, b):
    return F.sum(F.relu(F.matmul(x, _W) + b), axis=1), F.tanh(x) * 2


def _time_major_rnn(xs):
    h = numpy.zeros((xs.shape[1], 3), numpy.float32)
    for t in range(xs.shape[0]):
        h = F.tanh(F.matmul(xs[t], _W[:3]) + h)
    return h


class _MLP(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 5)
            self.l2 = L.Linear(5, 2)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


def _read_into_python(x):
    return F.relu(x) * float(x.array.sum())


def test_the_program_matches_eager_for_new_values(rng):
    reports = _Reports()
    x, b = _rand(rng, 6, 4), _rand(rng, 3)
    compiled = _compile(reports.caller(_mlp_step), x, b)
    testing.assert_results_equal(compiled.result, _mlp_step(x, b))
    entry = compiled.entry
    assert entry.fallback is None and entry.program is not None
    assert compiled.miss_reason == 'first call' and compiled.unpack is None
    assert reports.fallbacks == [] and len(reports.misses) == 1
    for _ in range(3):
        x, b = _rand(rng, 6, 4), _rand(rng, 3)
        testing.assert_results_equal(_run_compiled(entry, None, x, b),
                                     _mlp_step(x, b))


def test_a_models_program_reads_its_parameters_anew(rng):
    numpy.random.seed(0)
    model = _MLP()
    reports = _Reports()
    with chainer.no_backprop_mode():
        entry = _compile(reports.caller(_MLP.forward, model),
                         _rand(rng, 3, 4)).entry
        for _ in range(3):
            for param in model.params():
                param.array[...] = _rand(rng, *param.shape)
            x = _rand(rng, 3, 4)
            testing.assert_results_equal(_run_compiled(entry, model, x),
                                         model(x))
    assert entry.training is None and reports.backprop_programs == 0


def test_a_rolled_loop_runs_at_other_lengths(rng):
    reports = _Reports()
    entry = _compile(reports.caller(_time_major_rnn), _rand(rng, 4, 2, 3)
                     ).entry
    assert entry.symbolic is not None and reports.unrolled == []
    assert 'xs: f32[T,2,3]' in str(entry.signature)
    for length in (4, 9, 1):
        xs = _rand(rng, length, 2, 3)
        testing.assert_results_equal(_run_compiled(entry, None, xs),
                                     _time_major_rnn(xs))


def _first_of(xs):
    return F.relu(xs[0])


def test_packed_lists_without_a_loop_are_to_be_recorded_item_by_item(rng):
    reports = _Reports()
    xs = [_rand(rng, 2, 3) for _ in range(3)]
    paths = packing.list_paths((xs,), {})
    args, kwargs = packing.pack((xs,), {}, paths)
    key, leaves = signature.make_key(args, kwargs,
                                     *signature.config_flags())
    compiled = pipeline.compile_call(
        reports.caller(_first_of), packing.mark_key(key, paths), leaves,
        (xs,), {}, (paths, args, kwargs))
    testing.assert_results_equal(compiled.result, _first_of(xs))
    assert compiled.entry is None and compiled.unpack == paths


def test_a_value_read_into_python_gives_a_fallback_entry(rng):
    reports = _Reports()
    x = chainer.Variable(_rand(rng, 3, 4))
    compiled = _compile(reports.caller(_read_into_python), x)
    testing.assert_results_equal(compiled.result, _read_into_python(x))
    entry = compiled.entry
    assert entry.program is None and entry.training is None
    assert entry.fallback and 'test_compile.py' in entry.fallback
    error, = reports.fallbacks
    assert isinstance(error, errors.DataDependentValue)


def test_a_training_entry_is_built_when_a_parameter_requires_grad(rng):
    numpy.random.seed(0)
    model = _MLP()
    reports = _Reports()
    x = _rand(rng, 3, 4)
    with chainer.using_config('enable_backprop', True):
        entry = _compile(reports.caller(_MLP.forward, model), x).entry
    assert entry.fallback is None
    assert entry.training is not None and reports.backprop_programs == 1


@pytest.mark.parametrize('requires_grad', [True, False])
def test_an_argument_variable_gets_a_training_entry_if_it_requires_grad(
        rng, requires_grad):
    reports = _Reports()
    x = chainer.Variable(_rand(rng, 6, 4), requires_grad=requires_grad)
    entry = _compile(reports.caller(_mlp_step), x, _rand(rng, 3)).entry
    assert (entry.training is not None) == requires_grad
    assert reports.backprop_programs == 1  # backprop is on either way


def test_without_the_self_check_a_program_is_still_built(rng):
    reports = _Reports()
    x, b = _rand(rng, 6, 4), _rand(rng, 3)
    entry = _compile(reports.caller(_mlp_step, check=False), x, b).entry
    assert entry.fallback is None
    testing.assert_results_equal(_run_compiled(entry, None, x, b),
                                 _mlp_step(x, b))
