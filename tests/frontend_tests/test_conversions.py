"""Arrays made from an argument by NumPy's conversions and copies
(``numpy.asarray``, ``numpy.array``, ``ascontiguousarray``, ``copy``,
``astype``, ...) are ops of the program, read from the argument on every
call, never constants frozen at recording time: each forward is called
jitted and eagerly with new values at the same shapes."""

import warnings

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from tests import differential

F32 = numpy.float32


def _calls(rng, n=4, shape=(3, 4)):
    return [(rng.standard_normal(shape).astype(F32),) for _ in range(n)]


def variable_of_asarray(x):
    return F.relu(chainer.Variable(numpy.asarray(x))) * 2.0


def sum_of_asarray(x):
    return F.sum(numpy.asarray(x), axis=1)


def variable_of_array(x):
    return F.tanh(chainer.Variable(numpy.array(x)))


def variable_of_array_as_float64(x):
    return F.tanh(chainer.Variable(numpy.array(x, dtype=numpy.float64)))


def contiguous(x):
    return F.sigmoid(numpy.ascontiguousarray(x.T))


def fortran(x):
    return F.sigmoid(numpy.asfortranarray(x)) + 1.0


def numpy_copy(x):
    return F.exp(chainer.Variable(numpy.copy(x)))


def method_copy(x):
    return F.exp(chainer.Variable(x.copy()))


def method_astype(x):
    return F.exp(chainer.Variable(x.astype(numpy.float64)))


def get_array_module_asarray(x):
    xp = chainer.backend.get_array_module(x)
    return F.relu(chainer.Variable(xp.asarray(x)))


def as_variable_of_asarray(x):
    return F.relu(chainer.as_variable(numpy.asarray(x)))


def to_cpu(x):
    return F.relu(chainer.Variable(chainer.backends.cuda.to_cpu(x)))


def asarray_of_a_column(x):
    return F.relu(chainer.Variable(numpy.asarray(x[:, 0])))


def array_of_a_list(x):
    return F.sum(chainer.Variable(numpy.array([x, x * 2.0])), axis=0)


def asarray_of_a_variables_array(x):
    v = F.tanh(x)
    return F.relu(chainer.Variable(numpy.asarray(v.array))) + v


@pytest.mark.parametrize('fn', [
    variable_of_asarray, sum_of_asarray, variable_of_array,
    variable_of_array_as_float64, contiguous, fortran, numpy_copy,
    method_copy, method_astype, get_array_module_asarray,
    as_variable_of_asarray, to_cpu, asarray_of_a_column, array_of_a_list,
    asarray_of_a_variables_array,
])
def test_a_converted_argument_is_read_on_every_call(rng, fn):
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        testing.assert_jit_matches_eager(fn, _calls(rng))


def statistics_along_an_axis(x):
    a = x.array if isinstance(x, chainer.Variable) else x
    return (F.tanh(x) * a.mean(axis=1, keepdims=True), a.var(axis=0),
            a.std(axis=1, ddof=1))


def test_array_statistics_along_an_axis_are_compiled(rng):
    """``mean``, ``var`` and ``std`` divide in place (``out=``) inside
    NumPy; each is recorded as one op instead of running eagerly."""
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        testing.assert_jit_matches_eager(statistics_along_an_axis,
                                         _calls(rng))
        testing.assert_jit_grads_match_eager(statistics_along_an_axis,
                                             _calls(rng))


def test_the_conversion_is_compiled(rng):
    jitted = chainerjit.jit(variable_of_asarray)
    calls = _calls(rng)
    for (x,) in calls:
        jitted(x)
    info = jitted.cache_info()
    assert info.misses == 1 and info.hits == len(calls) - 1
    assert 'numpy.asarray' in str(jitted.last_entry.graph)
    assert jitted.last_entry.fallback is None


class Captioner(chainer.Chain):
    """A language model building its per-step token Variables as image
    captioning examples do: ``Variable(xp.asarray(captions[:, i]))``."""

    def __init__(self):
        super(Captioner, self).__init__()
        with self.init_scope():
            self.embed = chainer.links.EmbedID(6, 4)
            self.out = chainer.links.Linear(4, 6)

    def forward(self, captions):
        loss = 0
        for i in range(captions.shape[1] - 1):
            x = chainer.Variable(self.xp.asarray(captions[:, i]))
            t = chainer.Variable(self.xp.asarray(captions[:, i + 1]))
            loss += F.softmax_cross_entropy(self.out(self.embed(x)), t)
        return loss


def test_token_variables_made_with_asarray_follow_each_batch(rng):
    model, twin = Captioner(), Captioner()
    twin.copyparams(model)
    model.forward = chainerjit.jit(model.forward)
    for _ in range(4):
        captions = rng.randint(0, 6, (3, 5)).astype(numpy.int32)
        with chainer.no_backprop_mode():
            got = model(captions)
            expected = twin(captions)
        numpy.testing.assert_allclose(got.array, expected.array,
                                      rtol=1e-5, atol=1e-6)


def _early_bound(x):
    return F.relu(chainer.Variable(_asarray(x)))


def _held_in_a_dict(x):
    return F.relu(chainer.Variable(_CONVERSIONS['array'](x)))


_asarray = numpy.asarray  # bound before any recording patches it
_CONVERSIONS = {'array': numpy.asarray}  # out of the recording's reach


def test_an_early_bound_conversion_records_as_numpys_own(rng):
    """``from numpy import asarray`` is bound before a recording patches
    NumPy: the name is bound to the patch too while recording."""
    jitted = chainerjit.jit(_early_bound)
    calls = _calls(rng)
    for (x,) in calls:
        numpy.testing.assert_array_equal(jitted(x).array,
                                         _early_bound(x).array)
    assert jitted.cache_info().hits == len(calls) - 1


def test_a_view_made_by_an_unpatched_conversion_is_never_a_constant(rng):
    """A conversion the recording cannot reach: the plain view it gives of
    a traced array is noticed by its base, and the call runs eagerly with
    a warning instead of freezing it."""
    jitted = chainerjit.jit(_held_in_a_dict)
    calls = _calls(rng)
    with pytest.warns(errors.FallbackWarning, match='derived from the'):
        results = [jitted(x) for (x,) in calls]
    for (x,), got in zip(calls, results):
        numpy.testing.assert_array_equal(got.array,
                                         _held_in_a_dict(x).array)


def _copied_out_of_sight(x):
    return F.relu(chainer.Variable(_CONVERSIONS['array'](x) * 1.0))


def test_a_copy_made_out_of_the_recordings_sight_is_caught_at_new_values(
        rng):
    """An array computed from an argument by code the recording cannot
    reach is a constant of the first call: the entry's first hit, at new
    values, runs eagerly too, finds the difference, and the function runs
    eagerly from then on, with a warning."""
    jitted = chainerjit.jit(_copied_out_of_sight)
    calls = _calls(rng)
    with pytest.warns(errors.FallbackWarning, match='at new argument '
                      'values its program gave another result'):
        results = [jitted(x) for (x,) in calls]
    for (x,), got in zip(calls, results):
        numpy.testing.assert_array_equal(got.array,
                                         _copied_out_of_sight(x).array)


def test_a_copy_out_of_sight_is_checked_until_the_arguments_change(
        rng, monkeypatch):
    """The first hit with the values recorded (a notebook's cell run
    twice) agrees with eager: the hits after it are checked too, until the
    argument comes with other values, which find the difference."""
    monkeypatch.setattr(errors, '_warned', set())  # (warned once above)
    jitted = chainerjit.jit(_copied_out_of_sight)
    first, *others = [x for (x,) in _calls(rng)]
    calls = [first, first.copy()] + others
    with pytest.warns(errors.FallbackWarning, match='at new argument '
                      'values its program gave another result'):
        results = [jitted(x) for x in calls]
    for x, got in zip(calls, results):
        numpy.testing.assert_array_equal(got.array,
                                         _copied_out_of_sight(x).array)


class _WeightedByClass(chainer.Chain):
    """A classifier whose loss weighs each row by its label's weight,
    looked up in a table the forward makes (``table``: how), or by its
    one-hot row."""

    def __init__(self, table):
        super().__init__()
        with self.init_scope():
            self.fc = chainer.links.Linear(4, 2)
        self.table, self.weights = table, [1.0, 10.0]

    def forward(self, x, t):
        y = self.fc(x)
        w = getattr(self, '_' + self.table)(t)
        return F.sum(F.softmax_cross_entropy(y, t, reduce='no') * w) / \
            (F32(1) + w.sum())

    def _listed(self, t):
        return numpy.array([1.0, 10.0], F32)[t]

    def _listed_on_the_model(self, t):
        return numpy.asarray(self.weights, F32)[t]

    def _computed(self, t):
        return (numpy.arange(2, dtype=F32) * 9 + 1)[t]

    def _tiled(self, t):
        return numpy.tile(numpy.array([1.0, 10.0], F32), 2)[t + 2]

    def _of_two_axes(self, t):
        return numpy.array([[1.0, 2.0], [3.0, 10.0]], F32)[t, 1 - t]

    def _taken(self, t):
        return numpy.take(numpy.eye(2, dtype=F32), t, axis=0) @ \
            numpy.array([1.0, 10.0], F32)

    def _taken_by_the_method(self, t):
        return numpy.array([1.0, 10.0], F32).take(t)

    def _normalized_in_place(self, t):
        w = numpy.array([1.0, 10.0], F32)
        w /= w.sum()
        w += 1
        return w[t]

    def _converted_again(self, t):
        return numpy.array(numpy.asarray(self._listed(slice(None))))[t]

    def _reduced_by_a_method(self, t):
        w = numpy.array([[1.0, 10.0], [2.0, 3.0]], F32)
        return w.sum(0)[t] + w.max(axis=0)[t]

    def _taken_from_the_list(self, t):
        return numpy.take(self.weights, t).astype(F32)

    def _of_a_scalar_type(self, t):  # (numpy.float32 is a type: unseen)
        return numpy.float32([1.0, 10.0])[t]


def _labels_of_one_class_first(rng, batch=6):
    """Calls whose labels are all 0 at first (a table indexed by them
    reads one weight), then of both classes."""
    calls = []
    for k in range(9):
        t = numpy.zeros(batch, numpy.int32) if k < 6 else \
            (numpy.arange(batch) % 2).astype(numpy.int32)
        calls.append((rng.standard_normal((batch, 4)).astype(F32), t))
    return calls


@pytest.mark.parametrize('table', [
    'listed', 'listed_on_the_model', 'computed', 'tiled', 'of_two_axes',
    'taken', 'taken_by_the_method', 'normalized_in_place',
    'converted_again', 'reduced_by_a_method', 'taken_from_the_list'])
def test_a_table_the_forward_makes_is_read_at_its_labels(rng, table):
    jitted = differential.check_grads(
        None, _labels_of_one_class_first(rng), model=_WeightedByClass(table),
        method='forward')
    # (A table is an array constant: the first hit and the first with
    # other labels are checked against eager.)
    assert jitted.cache_info().currsize == 1
    assert jitted.cache_info().eager <= 2, jitted.cache_info()


def test_a_table_made_unseen_is_checked_when_the_labels_change(rng):
    """A table made by ``numpy.float32(list)`` is a constant: indexed by
    labels all of one class (one weight throughout), the entry runs
    eagerly too at the first hit, and then where the labels change."""
    jitted = differential.check_grads(
        None, _labels_of_one_class_first(rng),
        model=_WeightedByClass('of_a_scalar_type'), method='forward',
        fallback_ok=True)
    entry, = jitted.cache_entries()
    assert entry.fallback.startswith('at new argument values its program '
                                     'gave another result'), entry.fallback
    assert jitted.cache_info().eager == 2 + 2  # (its checks, then eager)


class _Repeated(chainer.Chain):
    """Rows repeated as many times as a value computed from the inputs
    says (``numpy.repeat`` of their positions): a shape NumPy decides
    from the values, which the program cannot follow."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = chainer.links.Linear(4, 3)

    def forward(self, x, counts):
        y = self.fc(x)
        rows = numpy.repeat(numpy.arange(len(counts)), counts + 1)
        return F.sum(y[rows]) / len(rows) + F.mean(y[rows])


def test_rows_repeated_by_values_computed_run_in_python(rng):
    calls = [(rng.standard_normal((6, 4)).astype(F32),
              rng.randint(0, 3, 6).astype(numpy.int32)) for _ in range(4)]
    differential.check_grads(None, calls, model=_Repeated(),
                             method='forward', fallback_ok=True)


class _ViewsOfATable(chainer.Chain):
    """A table read at the labels, written through a view of it (or into
    it, after a view was read) by Python at a graph break, and read
    again: the piece before the break hands out both, which must stay
    views of one memory."""

    def __init__(self, into_the_base):
        super().__init__()
        with self.init_scope():
            self.fc = chainer.links.Linear(4, 3)
        self.into_the_base = into_the_base

    def forward(self, x, t):
        y = self.fc(x)
        if self.into_the_base:
            table = numpy.array([0.0, 1.0, 10.0, 3.0], F32)
            view = table[1:]
            w = view[t]
            table[1] = 7
            w = w + view[t]
        else:
            table = numpy.array([1.0, 10.0, 3.0], F32)
            w = table[t]
            view = table[:2]
            view[0] = 5
            w = w + table[t]
        return F.sum(y * w[:, None])


@pytest.mark.parametrize('into_the_base', [False, True])
def test_views_of_a_table_handed_out_stay_views(rng, into_the_base):
    calls = [(rng.standard_normal((6, 4)).astype(F32),
              rng.randint(0, 3, 6).astype(numpy.int32)) for _ in range(6)]
    differential.check_grads(None, calls,
                             model=_ViewsOfATable(into_the_base),
                             method='forward', fallback_ok=True)


class _FilledUnseen(_ViewsOfATable):
    """A table read, then filled by a method the recording does not see
    (``ndarray.fill``), and read again: the check of the recording finds
    the difference, and the calls after it run eagerly."""

    def forward(self, x, t):
        y = self.fc(x)
        table = numpy.array([1.0, 10.0, 3.0], F32)
        w = table[t]
        table.fill(2)
        return F.sum(y * (w + table[t])[:, None])


def test_an_entry_whose_recording_check_failed_runs_eagerly(rng):
    calls = [(rng.standard_normal((6, 4)).astype(F32),
              rng.randint(0, 3, 6).astype(numpy.int32)) for _ in range(3)]
    differential.check_grads(None, calls, model=_FilledUnseen(False),
                             method='forward', fallback_ok=True)


def test_a_table_read_at_its_labels_runs_in_onnxruntime(rng):
    model = _WeightedByClass('listed')
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    with chainer.using_config('train', False), \
            chainer.using_config('enable_backprop', False):
        for batch in (6, 4, 6, 5, 3):
            x = rng.standard_normal((batch, 4)).astype(F32)
            t = rng.randint(0, 2, batch).astype(numpy.int32)
            numpy.testing.assert_allclose(
                jitted(x, t).array, model.forward(x, t).array, 1e-5, 1e-6)
    entry, = jitted.cache_entries()
    assert entry.describe_backend().startswith('onnxruntime'), \
        entry.describe_backend()
