"""A NumPy scalar the forward computes by a reduction (an accuracy count,
``xp.sum(y == p)`` or ``(y == t).sum()``) is followed as an op of the
program, not read into Python: reported, stored or returned, it is the
NumPy scalar eager gives, computed anew on every call. Read into Python
(``int()``, a branch), or in a forward whose code tests types, it runs
the forward eagerly as before."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing

F32 = numpy.float32


class Tagger(chainer.Chain):
    """Counts correct tags over the steps for its report, as Chainer's
    CRF tagger example does."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 3)

    def forward(self, xs, ts):
        loss, correct = 0, 0
        for x, t in zip(xs, ts):
            y = self.fc(x)
            loss += F.softmax_cross_entropy(y, t)
            correct += self.xp.sum(y.array.argmax(axis=1) == t)
        chainer.report({'correct': correct, 'loss': loss}, self)
        self.correct = correct
        return loss, (y.array.argmax(axis=1) == t).sum(), correct / 2


def _batches(rng, n, steps=3):
    return [(rng.standard_normal((steps, 5, 4)).astype(F32),
             rng.randint(0, 3, (steps, 5)).astype(numpy.int32))
            for _ in range(n)]


def test_an_accuracy_count_is_compiled_and_reported(rng):
    eager, model = Tagger(), Tagger()
    model.copyparams(eager)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        for xs, ts in _batches(rng, 4):
            observed = []
            for forward, owner in ((eager.forward, eager), (jitted, model)):
                reporter = chainer.Reporter()
                reporter.add_observer('main', owner)
                observation = {}
                with reporter.scope(observation):
                    result = forward(xs, ts)
                observed.append((result, observation))
            (expected, seen), (actual, got) = observed
            testing.assert_results_equal(actual, expected)
            for kind in (type(expected[1]), type(expected[2])):
                assert issubclass(kind, numpy.generic)
            assert type(got['main/correct']) is type(seen['main/correct'])
            assert got['main/correct'] == seen['main/correct']
            assert type(model.correct) is type(eager.correct)
            assert model.correct == eager.correct
    info = jitted.cache_info()
    # The attribute the first call set is no miss at the second.
    assert (info.compiles, info.compiled, info.eager) == (1, 3, 0), info


def count_in_place(x, t):
    hits = (x.argmax(axis=1) == t).sum()
    hits += (x.argmin(axis=1) == t).sum()
    hits *= 2
    return F.relu(x) * 2, hits


def count_then_read_into_python(x, t):
    return F.relu(x) * int((x.argmax(axis=1) == t).sum())


def count_in_a_forward_that_tests_types(x, t):
    hits = numpy.sum(x.argmax(axis=1) == t)
    if isinstance(hits, numpy.ndarray):  # never, eagerly
        return F.relu(x)
    return F.relu(x) * 2, hits


def _calls(rng, n=4):
    return [(rng.standard_normal((6, 3)).astype(F32),
             rng.randint(0, 3, 6).astype(numpy.int64)) for _ in range(n)]


def test_a_followed_scalar_changes_in_place_as_a_scalar(rng):
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        jitted = testing.assert_jit_matches_eager(count_in_place,
                                                  _calls(rng))
    assert jitted.cache_info().compiled == 3


def count_as_text(x, t):
    return F.relu(x), 'hits: %s' % (x.argmax(axis=1) == t).sum()


def count_formatted(x, t):
    return F.relu(x), f'{(x.argmax(axis=1) == t).sum():d} hits'


def count_as_a_numpy_float(x, t):
    hits = numpy.float32((x.argmax(axis=1) == t).sum())  # read in C
    return F.relu(x), hits / len(t)


@pytest.mark.parametrize('fn, what', [
    (count_then_read_into_python, 'int of an array value'),
    (count_as_a_numpy_float, 'gives a Python value'),
    (count_in_a_forward_that_tests_types, 'gives a Python value'),
    (count_as_text, 'str of an array value'),
    (count_formatted, 'format of an array value'),
])
def test_a_scalar_read_into_python_runs_eagerly(rng, fn, what):
    jitted = chainerjit.jit(fn)
    with pytest.warns(errors.FallbackWarning, match=what):
        jitted(*_calls(rng, 1)[0])
    for args in _calls(rng):
        testing.assert_results_equal(jitted(*args), fn(*args))
    assert jitted.cache_info().compiled == 0
