"""Which loops roll into one symbolic entry and which keep their length
(or a guard) in the cache key, against eager Chainer: loops left unrolled
(with a warning where the trip count may vary), branches and breaks on
array values, sizes of other axes read in the source, lengths through an
alias or a comprehension, and Python lists of arrays packed into one
array. Models have eager twins with the same parameters; outputs and
gradients are compared.
"""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from chainerjit.frontend import packing
from tests.frontend_tests.rolling_twins import _assert_grads_equal
from tests.frontend_tests.rolling_twins import _rand
from tests.frontend_tests.rolling_twins import _twins


# --- what stays unrolled, and says so ----------------------------------------

def test_a_loop_whose_iterations_differ_is_unrolled_with_a_warning():
    def f(xs):
        h = xs[0]
        for t in range(1, xs.shape[0]):
            if t % 2:
                h = h * xs[t]
            else:
                h = F.relu(h + xs[t])
        return h

    rng = numpy.random.RandomState(7)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jf = testing.assert_jit_matches_eager(
            f, [(_rand(rng, 5, 3),), (_rand(rng, 5, 3),),
                (_rand(rng, 6, 3),), (_rand(rng, 6, 3),)])
    loop_warnings = [w for w in caught
                     if issubclass(w.category, errors.LoopWarning)]
    assert len(loop_warnings) == 1, [str(w.message) for w in caught]
    assert 'for t in range(1, xs.shape[0])' in str(loop_warnings[0].message)
    assert jf.cache_info().currsize == 2  # one per trip count


def test_a_loop_without_source_is_unrolled_with_a_warning():
    namespace = {'F': F}
    exec('def f(xs):\n'
         '    h = xs[0]\n'
         '    for t in range(1, xs.shape[0]):\n'
         '        h = F.tanh(h + xs[t])\n'
         '    return h\n', namespace)
    rng = numpy.random.RandomState(8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jf = testing.assert_jit_matches_eager(
            namespace['f'], [(_rand(rng, 4, 2),), (_rand(rng, 4, 2),),
                             (_rand(rng, 7, 2),)])
    assert any('source cannot be read' in str(w.message) for w in caught)
    assert jf.cache_info().currsize == 2


def test_a_loop_over_the_models_own_links_is_unrolled_quietly():
    class Deep(chainer.ChainList):
        def __init__(self):
            super(Deep, self).__init__(L.Linear(3, 5), L.Linear(5, 2))

        def forward(self, x):
            for link in self:
                x = F.relu(link(x))
            return x

    rng = numpy.random.RandomState(9)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        testing.assert_jit_matches_eager(
            Deep().forward, [(_rand(rng, 2, 3),), (_rand(rng, 2, 3),)])


@pytest.mark.parametrize('use_a_generator', [False, True])
def test_a_loop_over_a_written_out_tuple_is_unrolled_quietly(
        use_a_generator, rng):
    # As in examples.models.EncoderBlock: q, k, v = (f(t) for t in ...).
    def statement(q, k, v):
        out = []
        for t in (q, k, v):
            out.append(F.tanh(t) * F.sum(t))
        return out

    def generator(q, k, v):
        q, k, v = (F.tanh(t) * F.sum(t) for t in (q, k, v))
        return q, k, v

    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        testing.assert_jit_matches_eager(
            generator if use_a_generator else statement,
            [tuple(_rand(rng, 2, 3) for _ in range(3)) for _ in range(2)])


def test_a_length_used_otherwise_stays_in_the_key():
    def f(xs):
        h = xs[0]
        for t in range(1, xs.shape[0]):
            h = h + xs[t]
        return h / float(xs.shape[0])  # the length is baked into the program

    rng = numpy.random.RandomState(10)
    jf = testing.assert_jit_matches_eager(
        f, [(_rand(rng, 3, 2),), (_rand(rng, 3, 2),), (_rand(rng, 5, 2),),
            (_rand(rng, 5, 2),)])
    assert jf.cache_info().currsize == 2
    assert all('f32[T' not in str(e.signature) for e in jf.cache_entries())


def test_a_length_numpy_divides_by_is_read_at_run_time():
    def f(xs):
        h = xs[0]
        for t in range(1, xs.shape[0]):
            h = h + xs[t]
        return h / xs.shape[0]  # NumPy's division, of the size at run time

    rng = numpy.random.RandomState(10)
    jf = testing.assert_jit_matches_eager(
        f, [(_rand(rng, 3, 2),), (_rand(rng, 3, 2),), (_rand(rng, 5, 2),),
            (_rand(rng, 5, 2),), (_rand(rng, 9, 2),)])
    entry, = jf.cache_entries()
    assert 'f32[T' in str(entry.signature)
    assert 'python.size' in str(entry.graph)


# --- branches on array values ---------------------------------------------

def test_a_branch_on_an_array_value_is_guarded():
    def f(x):
        if (x.array > 0).all():
            return F.relu(x) * 2
        return F.sigmoid(x)

    jf = chainerjit.jit(f)
    calls = [numpy.ones((2, 3), numpy.float32),
             numpy.full((2, 3), 2, numpy.float32),
             -numpy.ones((2, 3), numpy.float32),
             numpy.full((2, 3), 3, numpy.float32)]
    for x in calls:
        testing.assert_results_equal(jf(chainer.Variable(x)),
                                     f(chainer.Variable(x)))
    assert jf.cache_info().currsize == 1
    assert 'Guard[expect=True]' in str(jf.last_entry.graph)


def test_a_branch_with_random_ops_before_it_runs_eagerly():
    def f(x):
        y = F.dropout(x, 0.5)
        if (y.array > 0).any():
            return y * 2
        return y

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        with chainer.using_config('train', True):
            chainerjit.jit(f)(numpy.ones((2, 3), numpy.float32))
    assert any(issubclass(w.category, errors.FallbackWarning)
               for w in caught)


@pytest.mark.parametrize('limit', [-5.0, 0.5, 100.0])
def test_break_on_an_array_value_trains_like_eager(limit):
    class Repeat(chainer.Chain):
        def __init__(self):
            super(Repeat, self).__init__()
            with self.init_scope():
                self.layer = L.Linear(4, 4)

        def forward(self, h, limit):
            outs = []
            for i in range(8):
                h = F.tanh(self.layer(h)) * 1.5
                outs.append(h)
                if (F.sum(h).array > limit.array).all():
                    break
            return F.stack(outs)

    model, twin = _twins(Repeat)
    jf = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(11)
    for trial in range(4):
        h = _rand(rng, 2, 4)
        bound = numpy.array(limit + trial, numpy.float32)
        model.cleargrads()
        twin.cleargrads()
        h_jit, h_eager = chainer.Variable(h), chainer.Variable(h.copy())
        y = jf(h_jit, chainer.Variable(bound))
        expected = twin.forward(h_eager, chainer.Variable(bound))
        testing.assert_results_equal(y, expected, rtol=1e-4, atol=1e-5)
        F.sum(y * y).backward()
        F.sum(expected * expected).backward()
        _assert_grads_equal(model, twin)
        numpy.testing.assert_allclose(h_jit.grad, h_eager.grad, rtol=1e-4,
                                      atol=1e-5)


# --- sizes of other axes read in the source ---------------------------------

_W3 = numpy.random.RandomState(1).standard_normal((3, 3)).astype(
    numpy.float32)


def _time_major_rnn(xs):
    h = numpy.zeros((xs.shape[1], 3), numpy.float32)
    for t in range(xs.shape[0]):
        h = F.tanh(F.matmul(xs[t], _W3) + h)
    return h


def _batch_major_rnn(xs):
    h = numpy.zeros((xs.shape[0], 3), numpy.float32)
    scale = numpy.float32(1.0 / xs.shape[1])
    for t in range(xs.shape[1]):
        h = F.tanh(F.matmul(xs[:, t], _W3) * scale + h)
    return h


def test_reading_the_batch_size_keeps_the_length_symbolic(rng):
    calls = [(rng.standard_normal((n, 2, 3)).astype(numpy.float32),)
             for n in (4, 4, 9, 1)]
    jf = testing.assert_jit_matches_eager(_time_major_rnn, calls)
    entry, = jf.cache_entries()
    assert 'xs: f32[T,2,3]' in str(entry.signature)


def test_reading_the_size_of_the_length_axis_keeps_it_in_the_key(rng):
    # xs.shape[1] is the length here, and also read for a scale.
    calls = [(rng.standard_normal((2, n, 3)).astype(numpy.float32),)
             for n in (4, 4, 5)]
    jf = testing.assert_jit_matches_eager(_batch_major_rnn, calls[:2])
    entry, = jf.cache_entries()
    assert 'xs: f32[2,4,3]' in str(entry.signature)
    testing.assert_jit_matches_eager(_batch_major_rnn, calls[2:], jitted=jf)


# --- lengths through an alias, and comprehensions ---------------------------

class _RNNLinks(chainer.Chain):
    def __init__(self):
        super(_RNNLinks, self).__init__()
        with self.init_scope():
            self.x2h = L.Linear(4, 3)
            self.h2h = L.Linear(3, 3)


class LenAliasRNN(_RNNLinks):
    def forward(self, xs):
        T = len(xs)
        h = self.xp.zeros((xs.shape[1], 3), numpy.float32)
        for t in range(T):
            h = F.tanh(self.x2h(xs[t]) + self.h2h(h))
        return h


class ShapeAliasRNN(_RNNLinks):
    def forward(self, xs):
        T = xs.shape[0]
        h = self.xp.zeros((xs.shape[1], 3), numpy.float32)
        for t in range(T):
            h = F.tanh(self.x2h(xs[t]) + self.h2h(h))
        return h


class ItemsComprehension(_RNNLinks):
    def forward(self, xs):
        return F.stack([F.tanh(self.x2h(x)) for x in xs])


class IndexesComprehension(_RNNLinks):
    def forward(self, xs):
        hs = [F.relu(self.x2h(xs[t])) for t in range(len(xs))]
        return F.stack(hs)


class TwoLineComprehension(_RNNLinks):
    def forward(self, xs):
        hs = [F.sigmoid(self.x2h(x))
              for x in xs]
        return F.concat(hs, axis=1)


def _train_both(model, twin, xs):
    for m in (model, twin):
        m.cleargrads()
        F.sum(m(xs) ** 2).backward()


@pytest.mark.parametrize('cls', [
    LenAliasRNN, ShapeAliasRNN, ItemsComprehension, IndexesComprehension,
    TwoLineComprehension])
def test_alias_and_comprehension_lengths_share_one_entry(cls, rng):
    model, twin = _twins(cls)
    model.forward = chainerjit.jit(model.forward)
    for length in (3, 3, 7, 1, 12):
        xs = _rand(rng, length, 2, 4)
        with chainer.no_backprop_mode():
            testing.assert_results_equal(model(xs), twin(xs),
                                         rtol=1e-5, atol=1e-6)
        _train_both(model, twin, xs)
        _assert_grads_equal(model, twin)
    entries = model.forward.cache_entries()
    assert len(entries) == 2, model.forward.cache_report()  # test, train
    assert all('xs: f32[T,2,4]' in str(e.signature) for e in entries)


def _alias_used_as_a_value(xs):
    T = len(xs)
    h = xs[0]
    for t in range(1, T):
        h = h + xs[t]
    return h * (1.0 / T)  # the float divides: the length is baked in


def _comprehension_read_by_item(xs):
    hs = [F.tanh(x) for x in xs]
    return hs[len(hs) // 2] * 2


def _comprehension_with_a_filter(xs):
    return F.stack([F.tanh(x) for x in xs if x.shape[0] > 1])


def _appended_read_in_the_middle(xs):
    hs = []
    for x in xs:
        hs.append(F.tanh(x))
    return hs[1] * 2  # a step the recorded length decides


def _reversed_under_another_name(xs):
    hs = []
    for x in xs:
        hs.append(F.tanh(x))
    rs = hs[::-1]
    return F.stack(rs) * rs[0]


@pytest.mark.parametrize('fn', [
    _alias_used_as_a_value, _comprehension_read_by_item,
    _comprehension_with_a_filter,
    _appended_read_in_the_middle, _reversed_under_another_name])
def test_lengths_the_python_can_see_stay_in_the_key(fn, rng):
    calls = [(_rand(rng, n, 2, 3),) for n in (3, 3, 5, 5)]
    jf = testing.assert_jit_matches_eager(fn, calls)
    assert jf.cache_info().currsize == 2, jf.cache_report()
    assert all('f32[T' not in str(e.signature) for e in jf.cache_entries())


def _comprehension_read_at_its_end(xs):
    hs = [F.tanh(x) for x in xs]
    return hs[-1] * 2


def _comprehension_read_at_both_ends(xs):
    hs = [F.tanh(x) for x in xs]
    return hs[-1] * 2 + hs[0]  # (its first step is peeled off)


@pytest.mark.parametrize('fn, lengths', [
    (_comprehension_read_at_its_end, (3, 3, 5, 8, 1, 4, 5)),
    (_comprehension_read_at_both_ends, (3, 3, 5, 8, 2, 4, 5))])
def test_a_comprehension_read_at_its_ends_takes_every_length(
        fn, lengths, rng):
    calls = [(_rand(rng, n, 2, 3),) for n in lengths]
    jf = testing.assert_jit_matches_eager(fn, calls)
    assert jf.cache_info().currsize == 1, jf.cache_report()
    assert 'f32[T,2,3]' in str(jf.cache_entries()[0].signature)


def _comprehension_in_a_helper(xs):
    return _stack_of_squares(xs)


def _stack_of_squares(xs):
    return F.stack([x * x for x in xs])


def test_comprehension_in_a_helper_takes_every_length(rng):
    calls = [(_rand(rng, n, 2, 3),) for n in (3, 3, 5, 8)]
    jf = testing.assert_jit_matches_eager(_comprehension_in_a_helper, calls)
    assert jf.cache_info().currsize == 1, jf.cache_report()
    assert 'f32[T,2,3]' in str(jf.cache_entries()[0].signature)


# --- Python lists of arrays: packed into one array -------------------------

class ListRNN(_RNNLinks):
    """An RNN over a Python list of steps, as most Chainer code has it."""

    def forward(self, xs):
        h = self.xp.zeros((xs[0].shape[0], 3), numpy.float32)
        for x in xs:
            h = F.tanh(self.x2h(x) + self.h2h(h))
        return h


def _steps(rng, length, as_variables=True):
    xs = [_rand(rng, 2, 4) for _ in range(length)]
    if as_variables:
        return [chainer.Variable(x) for x in xs]
    return xs


def _copies(xs):
    return [chainer.Variable(x.array.copy()) for x in xs]


def test_a_list_of_any_length_shares_one_entry(rng):
    model, twin = _twins(ListRNN)
    model.forward = chainerjit.jit(model.forward)
    sizes = set()
    for length in (3, 3, 7, 70, 1):
        xs = _steps(rng, length)
        theirs = _copies(xs)
        for m, steps in ((model, xs), (twin, theirs)):
            m.cleargrads()
            y = m(steps)
            F.sum(y ** 2).backward()
        testing.assert_results_equal(y, twin(theirs), rtol=1e-5, atol=1e-6)
        _assert_grads_equal(model, twin)
        for mine, eager in zip(xs, theirs):  # each step gets its gradient
            numpy.testing.assert_allclose(mine.grad, eager.grad,
                                          rtol=1e-4, atol=1e-5)
        if length >= packing.MIN_ITEMS:
            sizes.add(model.forward.last_entry.n_instructions)
    # Lists shorter than packing.MIN_ITEMS are recorded item by item.
    signatures = sorted(str(e.signature)
                        for e in model.forward.cache_entries())
    assert len(signatures) == 2
    assert signatures[0].startswith('xs: f32[T,2,4]')
    assert signatures[1].startswith('xs[0]: f32[2,4]')
    assert len(sizes) == 1  # the program does not grow with the length


def _zip_lists(xs, ys):
    h = 0
    for x, y in zip(xs, ys):
        h = F.tanh(x * y + h)
    return h


def _enumerate_list(xs):
    h = 0
    for t, x in enumerate(xs):
        h = h + x * xs[t]
    return h


def _index_a_list(xs):
    h = xs[0] * 0
    for t in range(len(xs)):
        h = F.tanh(h + xs[t])
    return h


def _comprehension_over_a_list(xs):
    return F.stack([F.sigmoid(x) for x in xs])


@pytest.mark.parametrize('fn, n_lists', [
    (_zip_lists, 2), (_enumerate_list, 1), (_index_a_list, 1),
    (_comprehension_over_a_list, 1)])
@pytest.mark.parametrize('kind', [list, tuple])
def test_list_loops_are_symbolic_and_match_eager(fn, n_lists, kind, rng):
    calls = [tuple(kind(_steps(rng, n, as_variables=False))
                   for _ in range(n_lists)) for n in (3, 3, 6, 4, 9)]
    jf = testing.assert_jit_matches_eager(fn, calls)
    assert jf.cache_info().currsize == 1, jf.cache_report()
    assert 'f32[T,2,4]' in str(jf.cache_entries()[0].signature)


def _read_after_the_loop(xs):
    h = 0
    for x in xs:
        h = h + x
    return h * xs[-1]


def _over_a_slice(xs):
    h = xs[0]
    for x in xs[1:]:
        h = F.tanh(h + x)
    return h


def _reversed_list(xs):
    h = 0
    for x in reversed(xs):
        h = F.tanh(h * 0.5 + x)
    return h


def _mean_by_length(xs):
    h = 0
    for x in xs:
        h = h + x
    return h / len(xs)


def _returns_a_step(xs):
    for x in xs:
        pass
    return xs[1]


@pytest.mark.parametrize('fn', [_over_a_slice, _returns_a_step, sum])
def test_list_loops_the_python_can_see_keep_lengths_in_the_key(fn, rng):
    calls = [(_steps(rng, n),) for n in (3, 3, 5, 5)]
    jf = testing.assert_jit_matches_eager(fn, calls, rtol=1e-5, atol=1e-6)
    assert jf.cache_info().currsize == 2, jf.cache_report()
    if fn is _returns_a_step:  # the caller's own Variable, as eagerly
        xs = _steps(rng, 4)
        assert jf(xs) is xs[1]


def test_a_step_read_in_the_loop_and_after_it_takes_every_length(rng):
    # (the last step's row, taken where the last iteration reads it, is
    # that iteration's value after the loop)
    calls = [(_steps(rng, n),) for n in (3, 3, 5, 8, 4)]
    jf = testing.assert_jit_grads_match_eager(_read_after_the_loop, calls,
                                              rtol=1e-5, atol=1e-6)
    assert jf.cache_info().currsize == 1, jf.cache_report()


def test_a_list_loops_mean_by_its_length_takes_every_length(rng):
    # (len(xs) of the packed list: its array's size, read when run)
    calls = [(_steps(rng, n),) for n in (3, 3, 5, 8, 4)]
    jf = testing.assert_jit_grads_match_eager(_mean_by_length, calls,
                                              rtol=1e-5, atol=1e-6)
    assert jf.cache_info().currsize == 1, jf.cache_report()


def test_reversed_list_loop_takes_every_length(rng):
    # The first step (h is the int 0) is peeled: it reads the last item,
    # counted from the end at every length.
    calls = [(_steps(rng, n),) for n in (3, 3, 5, 8, 4)]
    jf = testing.assert_jit_grads_match_eager(_reversed_list, calls,
                                              rtol=1e-5, atol=1e-6)
    assert jf.cache_info().currsize == 1, jf.cache_report()


def test_steps_no_op_reads_get_no_gradient_as_in_eager_mode(rng):
    def first_step_only(xs):
        return xs[0] * 2

    jf = chainerjit.jit(first_step_only)
    for n in (3, 3, 4):
        xs = _steps(rng, n)
        theirs = _copies(xs)
        F.sum(jf(xs)).backward()
        F.sum(first_step_only(theirs)).backward()
        assert [x.grad is None for x in xs] == \
            [x.grad is None for x in theirs] == [False] + [True] * (n - 1)


def test_a_list_and_the_stacked_array_are_different_entries(rng):
    def f(xs):
        h = 0
        for x in xs:
            h = F.tanh(h + x)
        return h

    steps = _steps(rng, 4, as_variables=False)
    jf = testing.assert_jit_matches_eager(
        f, [(steps,), (steps,), (numpy.stack(steps),),
            (numpy.stack(steps),)])
    assert jf.cache_info().currsize == 2


def test_a_list_of_unlike_arrays_is_recorded_item_by_item(rng):
    def f(xs):
        return [F.sum(x) for x in xs]

    calls = [([_rand(rng, n, 3) for n in (1, 2, 3)],),
             ([_rand(rng, n, 3) for n in (1, 2, 3)],)]
    jf = testing.assert_jit_matches_eager(f, calls)
    assert 'xs[2]: f32[3,3]' in str(jf.cache_entries()[0].signature)
