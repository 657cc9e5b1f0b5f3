"""Python state a loop changes, against eager Chainer: the loop snapshot
must see every change to counters, lists, dicts, attributes and other
containers the forward's loops touch (or the call must run eagerly) when
the trip count is symbolic, left by an exit, or the state sits deep in a
link's containers.

Every program is compared with eager Chainer over several calls of
several lengths. The ``test_was_bug_*`` tests gave silently wrong results
before the fix they name; they stay as regression tests.
"""

import collections
import itertools
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests import differential


pytestmark = [
    pytest.mark.adversarial,
    pytest.mark.filterwarnings(
        'ignore::chainerjit.errors.LoopWarning',
        'ignore::chainerjit.errors.RecompileWarning'),
]

RTOL, ATOL = 1e-5, 1e-6
LENGTHS = (5, 9, 3, 5, 7)


def _a(rng, *shape):
    return rng.standard_normal(shape).astype(numpy.float32)


def _seq(rng, n):
    return _a(rng, n, 2, 3), _a(rng, 2, 3)


def _calls(make, lengths, seed=0):
    rng = numpy.random.RandomState(seed)
    return [make(rng, n) for n in lengths]


def _fwd(fn, make=_seq, lengths=LENGTHS):
    return testing.assert_jit_matches_eager(
        fn, _calls(make, lengths), rtol=RTOL, atol=ATOL)


def _grads(fn, make=_seq, lengths=LENGTHS):
    return testing.assert_jit_grads_match_eager(
        fn, _calls(make, lengths), rtol=RTOL, atol=ATOL)


def _steps(rng, n):
    """``while (h < 1).any(): h += 0.25`` runs ``n`` times."""
    return (chainer.Variable(numpy.full((2,), 1 - 0.25 * n,
                                        numpy.float32)),)


def _jump(rng, n):
    """Ones with a large row at ``n``: ``h > 3`` there."""
    xs = numpy.ones((10, 2), numpy.float32)
    xs[n] = 10
    return (chainer.Variable(xs),
            chainer.Variable(numpy.zeros((2,), numpy.float32)))


def _variables(make):
    """``make`` with float arrays wrapped as Variables (the first
    iteration then records the same ops as the others)."""
    def made(rng, n):
        return tuple(chainer.Variable(x) if isinstance(x, numpy.ndarray)
                     and x.dtype.kind == 'f' else x for x in make(rng, n))
    return made


def _make_steps(rng, n):
    """A state that needs ``n`` steps of 0.25 to reach 1."""
    return numpy.full((2,), 1 - 0.25 * n, numpy.float32) + 0.01,


def _twins(cls):
    model, twin = cls(), cls()
    twin.copyparams(model)
    return model, twin


def _max_diff(a, b):
    return float(abs(a - b).max())


class _Box(object):
    pass


COUNT = [0]
TOTAL = 0


# --- Python state the snapshot sees -----------------------------------------

def deep_list(xs, h):
    c = [[[0]]]
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        c[0][0][0] += 1
    return h * c[0][0][0]


def tuple_dict_list(xs, h):
    c = ({'n': [0]},)
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        c[0]['n'][0] += 1
    return h * c[0]['n'][0]


def closure_counter(xs, h):
    n = [0]

    def bump():
        n[0] += 1
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        bump()
    return h * n[0]


def nonlocal_counter(xs, h):
    n = 0

    def bump():
        nonlocal n
        n += 1
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        bump()
    return h * n


def global_list_counter(xs, h):
    COUNT[0] = 0
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        COUNT[0] += 1
    return h * COUNT[0]


def global_counter(xs, h):
    global TOTAL
    TOTAL = 0
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        TOTAL += 1
    return h * TOTAL


def generator_function_state(xs, h):
    def counter():
        i = 0
        while True:
            yield i
            i += 1
    g = counter()
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        next(g)
    return h * next(g)


def setattr_counter(xs, h):
    b = _Box()
    setattr(b, 'n', 0)
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        setattr(b, 'n', b.n + 1)
    return h * b.n


def dunder_dict_counter(xs, h):
    b = _Box()
    b.__dict__['n'] = 0
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        b.__dict__['n'] += 1
    return h * b.n


def index_assigned_sum(xs, h):
    ys = [h]
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys[0] = ys[0] + h
    return ys[0]


def index_assigned_int(xs, h):
    ys = [0]
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys[0] = ys[0] + 1
    return h * ys[0]


def shape_read_in_the_loop(xs, h):
    s = 0
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        s += h.shape[0]
    return h * s


def alias_before_the_loop_len(xs, h):
    ys = []
    zs = ys
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    return F.stack(ys) * len(zs)


def alias_after_the_loop_len(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    zs = ys
    return F.stack(zs) * len(zs)


def stacked_in_a_dict(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    return {'ys': F.stack(ys), 'h': h}


def stacked_in_a_nested_tuple(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    return (h, (F.stack(ys), h))


def stacked_if_flag(xs, h, flag=True):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    return F.stack(ys) if flag else h


def stacked_in_a_list(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    return [F.stack(ys)]


def stacked_and_its_len(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
    out = F.stack(ys)
    return out, len(out)


def inserted_at_the_front(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.insert(0, h)
    return F.stack(ys)


def two_appends(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys.append(h)
        ys.append(h * 2)
    return F.stack(ys)


def dict_keyed_by_counter(xs, h):
    d = {}
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        d[t] = h
    return h * len(d)


def deep_dict_keyed_by_counter(xs, h):
    b = _Box()
    b.c = _Box()
    b.c.d = {}
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        b.c.d[t] = h
    return h * len(b.c.d)


def deque_counter(xs, h):
    c = collections.deque()
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        c.append(1)
    return h * len(c)


@pytest.mark.parametrize('fn', [
    deep_list, tuple_dict_list, closure_counter, nonlocal_counter,
    global_list_counter, global_counter, setattr_counter,
    dunder_dict_counter, index_assigned_sum,
    index_assigned_int, shape_read_in_the_loop, alias_before_the_loop_len,
    alias_after_the_loop_len, stacked_in_a_dict, stacked_in_a_nested_tuple,
    stacked_if_flag, stacked_in_a_list, stacked_and_its_len,
    inserted_at_the_front, two_appends, dict_keyed_by_counter,
    deep_dict_keyed_by_counter, deque_counter])
def test_python_state_seen(fn):
    _fwd(fn)


@pytest.mark.parametrize('fn', [stacked_in_a_dict, index_assigned_sum,
                                inserted_at_the_front])
def test_python_state_seen_grads(fn):
    _grads(fn)


# --- Python state the snapshot misses ---------------------------------------

def deep_dict(xs, h):
    c = {'a': {'b': {'n': 0}}}
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        c['a']['b']['n'] += 1
    return h * c['a']['b']['n']


def deep_attribute(xs, h):
    b = _Box()
    b.c = _Box()
    b.c.d = _Box()
    b.c.d.n = 0
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        b.c.d.n += 1
    return h * b.c.d.n


@pytest.mark.parametrize('fn', [deep_dict, deep_attribute])
def test_was_bug_state_three_levels_deep(fn):
    _fwd(fn)


def range_iterator_state(xs, h):
    g = iter(range(100))
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        next(g)
    return h * next(g)


def itertools_count_state(xs, h):
    c = itertools.count()
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        next(c)
    return h * next(c)


def random_state_draws(xs, h):
    r = numpy.random.RandomState(1)
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        r.uniform()
    return h * numpy.float32(r.uniform())


def random_state_in_an_attribute(xs, h):
    b = _Box()
    b.r = numpy.random.RandomState(0)
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        b.r.uniform()
    return h * numpy.float32(b.r.uniform())


def bytearray_counter(xs, h):
    c = bytearray(1)
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        c[0] += 1
    return h * c[0]


def defaultdict_counter(xs, h):
    c = collections.defaultdict(int)
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        c['n'] += 1
    return h * c['n']


def counter_counter(xs, h):
    c = collections.Counter()
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        c['n'] += 1
    return h * c['n']


@pytest.mark.parametrize('fn', [
    range_iterator_state, itertools_count_state, generator_function_state,
    random_state_draws,
    random_state_in_an_attribute, bytearray_counter, defaultdict_counter,
    counter_counter])
def test_was_bug_opaque_state(fn):
    _fwd(fn)


def zip_with_count(xs, h):
    for x, k in zip(xs, itertools.count()):
        h = F.tanh(x + h)
    return h * k


def test_was_bug_zip_target_used_after_the_loop():
    _fwd(zip_with_count)


def appended_through_an_alias(xs, h):
    ys = []
    zs = ys
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        zs.append(h)
    return h * len(ys)


def appended_in_a_dict(xs, h):
    d = {'ys': []}
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        d['ys'].append(h)
    return h * len(d['ys'])


def appended_in_an_attribute(xs, h):
    b = _Box()
    b.c = _Box()
    b.c.ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        b.c.ys.append(h)
    return h * len(b.c.ys)


@pytest.mark.parametrize('fn', [appended_through_an_alias,
                                appended_in_a_dict,
                                appended_in_an_attribute])
def test_was_bug_list_appended_under_another_name(fn):
    _fwd(fn)


def list_in_a_list_appended(xs, h):
    d = [[]]
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        d[0].append(h)
    return h * len(d[0])


def test_list_in_a_list_appended():
    _fwd(list_in_a_list_appended)


# --- exits combined with missed state --------------------------------------

def while_deep_dict(h):
    c = {'a': {'b': {'n': 0}}}
    while (h.array < 1).any():
        h = h + 0.25
        c['a']['b']['n'] += 1
    return h * c['a']['b']['n']


def while_alias(h):
    ys = []
    zs = ys
    while (h.array < 1).any():
        h = h + 0.25
        zs.append(h)
    return h * len(ys)


def while_iterator(h):
    g = iter(range(100))
    while (h.array < 1).any():
        h = h + 0.25
        next(g)
    return h * next(g)


@pytest.mark.parametrize('fn', [while_deep_dict, while_alias,
                                while_iterator])
def test_was_bug_while_exit_with_missed_state(fn):
    _fwd(fn, _steps, (3, 5, 2, 4))


def break_deep_dict(xs, h):
    c = {'a': {'b': {'n': 0}}}
    for t in range(xs.shape[0]):
        h = h * 0.5 + xs[t]
        c['a']['b']['n'] += 1
        if (h.array > 3).all():
            break
    return h / c['a']['b']['n']


def test_was_bug_break_with_a_deep_counter():
    _fwd(break_deep_dict, _jump, (3, 5, 2, 6))


def while_deque(h):
    c = collections.deque()
    while (h.array < 1).any():
        h = h + 0.25
        c.append(1)
    return h * len(c)


def while_nonlocal(h):
    n = 0

    def bump():
        nonlocal n
        n += 1
    while (h.array < 1).any():
        h = h + 0.25
        bump()
    return h * n


@pytest.mark.parametrize('fn', [while_deque, while_nonlocal])
def test_while_exit_with_seen_state(fn):
    _fwd(fn, _steps, (3, 5, 2, 4))


# --- Python state the snapshot misses, in a symbolic loop -------------------


def dict_counter(xs, h):
    c = {'n': 0}
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        c['n'] += 1
    return h * c['n']


def set_counter(xs, h):
    seen = set()
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        seen.add(len(seen))
    return h * len(seen)


def attribute_counter(xs, h):
    box = _Box()
    box.n = 0
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        box.n += 1
    return h * box.n


def numpy_inplace_counter(xs, h):
    k = numpy.zeros((), numpy.float32)
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        k += 1
    return h * k


def list_extended(xs, h):
    ys = []
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        ys += [h]
    return F.stack(ys) * len(ys)


@pytest.mark.parametrize('fn', [dict_counter, set_counter,
                                attribute_counter, numpy_inplace_counter,
                                list_extended])
def test_was_bug_python_state_the_snapshot_misses(fn):
    _fwd(fn, _seq, (5, 9, 3))


class StepCounter(chainer.Chain):
    def __init__(self):
        super(StepCounter, self).__init__()
        with self.init_scope():
            self.lin = L.Linear(3, 3)
        self.steps = 0

    def forward(self, xs, h):
        self.steps = 0
        for t in range(len(xs)):
            h = F.tanh(self.lin(xs[t]) + h)
            self.steps += 1
        return h * self.steps


def test_was_bug_model_attribute_counted_in_a_symbolic_loop():
    model, twin = _twins(StepCounter)
    jf = chainerjit.jit(model.forward)
    with chainer.no_backprop_mode():
        for args in _calls(_seq, (5, 9, 3)):
            testing.assert_results_equal(jf(*args), twin(*args))
            assert model.steps == twin.steps


# --- Python state of loops with exits ---------------------------------------


def while_counts_steps(h):
    n = 0
    while (h.array < 1).any():
        h = h + 0.25
        n += 1
    return h * n


def while_returns_steps(h):
    n = 0
    while (h.array < 1).any():
        h = h + 0.25
        n += 1
    return h, n


def while_returns_len(h):
    ys = []
    while (h.array < 1).any():
        h = h + 0.25
        ys.append(h)
    return F.stack(ys), len(ys)


@pytest.mark.parametrize('fn', [while_counts_steps, while_returns_steps,
                                while_returns_len])
def test_was_bug_while_exit_with_a_python_counter(fn):
    _fwd(fn, _variables(_make_steps), (3, 5, 2))


def break_counts_steps(xs, h):
    steps = 0
    for t in range(xs.shape[0]):
        h = h * 0.5 + xs[t]
        steps += 1
        if (h.array > 3).all():
            break
    return h / steps


def test_was_bug_break_with_a_python_counter():
    def make(rng, n):
        xs = numpy.ones((10, 2), numpy.float32)
        xs[n] = 10
        return xs, numpy.zeros((2,), numpy.float32)
    _fwd(break_counts_steps, _variables(make), (3, 5, 2))


# --- Python state deep in a link's containers -------------------------------


class Deep(chainer.Chain):
    def __init__(self):
        super(Deep, self).__init__()
        with self.init_scope():
            self.w = L.Linear(3, 4)
        self.flat = {'n': 0}
        self.two = {'a': [0]}
        self.three = {'a': {'b': [0]}}

    def _bump(self):
        self.three['a']['b'][0] += 1
        return self.three['a']['b'][0]

    def flat_item(self, x):
        self.flat['n'] += 1
        return self.w(x) * self.flat['n']

    def two_levels(self, x):
        self.two['a'][0] += 1
        return self.w(x) * self.two['a'][0]

    def three_levels(self, x):
        self.three['a']['b'][0] += 1
        return self.w(x) * self.three['a']['b'][0]

    def helper(self, x):
        return self.w(x) * self._bump()

    def loop_helper(self, xs):
        h = 0
        for t in range(xs.shape[0]):
            h = h + self.w(xs[t]) * self._bump()
        return h

    def loop_flat_exit(self, xs):
        h = 0
        for t in range(xs.shape[0]):
            self.flat['n'] += 1
            h = h + F.tanh(self.w(xs[t]))
            if (h.array > 100).all():
                break
        return h


_DEEP = ['flat_item', 'two_levels', 'three_levels', 'helper',
         'loop_helper', 'loop_flat_exit']
for _name in _DEEP:
    setattr(Deep, 'jit_' + _name, chainerjit.jit(getattr(Deep, _name)))


def _deep(name):
    model, twin = Deep(), Deep()
    twin.copyparams(model)
    rng = numpy.random.RandomState(0)
    for length in [3, 3, 3, 4, 4, 5]:
        shape = (length, 2, 3) if name.startswith('loop') else (2, 3)
        x = rng.randn(*shape).astype(numpy.float32)
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            y = getattr(model, 'jit_' + name)(x)
        e = getattr(twin, name)(x)
        assert _max_diff(y.array, e.array) < 1e-5, length
    assert (model.flat, model.two, model.three) == \
        (twin.flat, twin.two, twin.three)


@pytest.mark.parametrize('name', ['flat_item', 'loop_flat_exit'])
def test_link_dict_item_mutation(name):
    _deep(name)


@pytest.mark.parametrize('name', ['two_levels', 'three_levels', 'helper',
                                  'loop_helper'])
def test_nested_container_mutation(name):
    _deep(name)


# --- a counter of the steps --------------------------------------------------

class _CountedSteps(chainer.Chain):
    """A loss averaged over the steps a Python counter counted (``steps +=
    1`` in the loop, as training loops count): after the loop the counter
    is the trip count, a size of ``xs``, divided by as the forward writes
    it."""

    def __init__(self, divide):
        super().__init__()
        with self.init_scope():
            self.cell = L.StatelessLSTM(3, 4)
            self.out = L.Linear(4, 2)
        self.divide = divide

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], 4), numpy.float32)
        loss, steps = 0.0, 0
        for x in xs:
            c, h = self.cell(c, h, x)
            loss += F.sum(self.out(h) ** 2)
            steps += 1
        if self.divide == 'by the count':
            return loss / steps
        if self.divide == 'by its inverse':
            return loss * (1.0 / steps)
        return loss / float(steps)  # (a float made of it: kept)


_STEP_SHAPES = [(5, 4), (9, 4), (3, 3), (9, 6), (1, 2), (12, 5), (4, 1)]


def _step_calls(seed):
    rng = numpy.random.RandomState(seed)
    return [(_a(rng, n, batch, 3),) for n, batch in _STEP_SHAPES]


def _trained_without_recompiling(model, calls):
    """``differential.check_seeded`` of ``model`` over ``calls``, with no
    warning of a size kept in the key or a loop unrolled."""
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.errors.RecompileWarning)
        warnings.simplefilter('error', chainerjit.errors.LoopWarning)
        return differential.check_seeded(model, calls)


@pytest.mark.parametrize('divide', ['by the count', 'by its inverse'])
def test_a_counter_of_the_steps_is_the_trip_count(divide):
    jitted = _trained_without_recompiling(_CountedSteps(divide),
                                          _step_calls(1))
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.errors.RecompileWarning)
        warnings.simplefilter('error', chainerjit.errors.LoopWarning)
        model = _CountedSteps(divide)
        inference = chainerjit.jit(model.forward)
        with chainer.using_config('train', False):
            for xs, in _step_calls(2):
                testing.assert_results_equal(inference(xs),
                                             model.forward(xs))
    assert jitted.cache_info().currsize == 1
    assert inference.cache_info().currsize == 1


class _CountedInAFloat(_CountedSteps):
    """The steps counted in a float (``steps = 0.``): after the loop, the
    trip count as a float computed at run time."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], 4), numpy.float32)
        loss = 0
        steps = 0.
        for x in xs:
            c, h = self.cell(c, h, x)
            loss += F.sum(self.out(h) ** 2)
            steps += 1
        loss = loss + F.sum(h)
        if self.divide == 'by the count':
            return loss / steps
        return loss * ('%.0f' % steps == '5')  # (formatted: kept)


class _CounterAfterTheLoop(_CountedSteps):
    """The loop's own counter read after it (``enumerate``'s, ``range``'s):
    the trip count less one plus its start."""

    def forward(self, xs):
        h = c = self.xp.zeros((xs.shape[1], 4), numpy.float32)
        loss = 0
        if self.divide == 'from one':
            for t, x in enumerate(xs, 1):
                c, h = self.cell(c, h, x)
                loss += F.sum(self.out(h) ** 2)
            return loss / t
        if self.divide == 'zipped':  # (over xs, as zip's first)
            for t, (x, y) in enumerate(zip(xs, xs[::-1]), start=1):
                c, h = self.cell(c, h, x - y)
                loss += F.sum(self.out(h) ** 2)
            return loss / t
        for t in range(xs.shape[0]):
            c, h = self.cell(c, h, xs[t])
            loss += F.sum(self.out(h) ** 2)
        if self.divide == 'by its inverse':
            return loss * (1.0 / (t + 1))
        return loss / float(t + 1)  # (a float made of it: kept)


@pytest.mark.parametrize('divide', ['from one', 'zipped', 'by its inverse'])
def test_the_counter_after_the_loop_is_the_trip_count(divide):
    jitted = _trained_without_recompiling(_CounterAfterTheLoop(divide),
                                          _step_calls(4))
    assert jitted.cache_info().currsize == 1


def test_the_steps_counted_in_a_float_are_the_trip_count():
    jitted = _trained_without_recompiling(_CountedInAFloat('by the count'),
                                          _step_calls(6))
    assert jitted.cache_info().currsize == 1


@pytest.mark.parametrize('cls, why', [
    (_CountedSteps, 'xs.shape[0] converted to float'),
    (_CounterAfterTheLoop, 'xs.shape[0] converted to float'),
    (_CountedInAFloat, 'formatted')])
def test_a_count_of_the_steps_made_a_float_keeps_the_length(cls, why):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        differential.check_seeded(cls('float'), _step_calls(3))
    said = [str(w.message) for w in caught]
    assert any(why in m for m in said), said
    assert not any('another result' in m for m in said), said
