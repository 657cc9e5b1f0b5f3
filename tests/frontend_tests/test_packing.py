"""Adversarial differential tests of list packing
(``chainerjit.frontend.packing``): values and gradients.

A jitted function called with a list (or tuple) of alike arrays or
Variables must give what eager Chainer gives: outputs and gradients of the
parameters and of every list item (``None`` where eager leaves ``None``),
for every kind of call (keywords, tuples, mixed ``requires_grad``, nested
lists, dtypes, empty lists), items made by Chainer functions, links,
lists of ids and branches on item values. Each function is called with
several lengths in sequence, lengths repeating, so that recording calls,
compiled calls and the verification of a new length on a symbolic entry
are all exercised. The identity of returned items and changes the caller
can see are in ``test_packing_identity.py``, which shares the helpers
here.

Tests marked ``xfail(strict=True)`` pin down mismatches found here (see
their reasons); they start passing when the bug is fixed.
"""


import chainer
import chainer.functions as F
import chainer.links as L
from chainer import optimizers
import numpy
import pytest

import chainerjit
from chainerjit import testing


pytestmark = [
    pytest.mark.adversarial,
    pytest.mark.filterwarnings('ignore::UserWarning'),
]

LENGTHS = (3, 3, 5, 1, 8, 2, 8)
LENGTHS_2 = (3, 3, 5, 2, 8, 2, 8)  # for functions that need two items
LENGTHS_SHORT = (3, 3, 4, 1, 2, 4)  # for quadratic loops


# --- helpers -----------------------------------------------------------------

def _rand(rng, shape, dtype=numpy.float32):
    return rng.standard_normal(shape).astype(dtype)


def _steps(rng, n, shape=(2, 3), as_variables=True, dtype=numpy.float32,
           requires_grad=True):
    xs = [_rand(rng, shape, dtype) for _ in range(n)]
    if as_variables:
        return [chainer.Variable(x, requires_grad=requires_grad)
                for x in xs]
    return xs


def _copies(xs):
    return [chainer.Variable(x.array.copy(), requires_grad=x.requires_grad)
            for x in xs]


def _variable_leaves(result):
    if isinstance(result, (list, tuple)):
        return [v for r in result for v in _variable_leaves(r)]
    if isinstance(result, dict):
        return [v for k in sorted(result) for v in _variable_leaves(result[k])]
    if isinstance(result, chainer.Variable) and result.dtype.kind == 'f':
        return [result]
    return []


def _loss(result):
    loss = None
    for v in _variable_leaves(result):
        term = F.sum(v * v)
        loss = term if loss is None else loss + term
    return loss


def _backward(result):
    loss = _loss(result)
    if loss is not None and loss.creator is not None:
        loss.backward()


def _assert_grads_equal(mine, theirs, rtol=1e-4, atol=1e-5):
    assert len(mine) == len(theirs)
    for k, (a, e) in enumerate(zip(mine, theirs)):
        assert (a.grad is None) == (e.grad is None), (
            'item %d: jit grad %s, eager grad %s' % (
                k, 'None' if a.grad is None else 'an array',
                'None' if e.grad is None else 'an array'))
        if e.grad is not None:
            numpy.testing.assert_allclose(a.grad, e.grad, rtol=rtol,
                                          atol=atol, err_msg='item %d' % k)


def _assert_param_grads_equal(model, twin, rtol=1e-4, atol=1e-5):
    mine = dict(model.namedparams())
    for name, param in twin.namedparams():
        assert (mine[name].grad is None) == (param.grad is None), name
        if param.grad is not None:
            numpy.testing.assert_allclose(mine[name].grad, param.grad,
                                          rtol=rtol, atol=atol, err_msg=name)


def _check_grads(fn, lengths, rng, n_lists=1, kind=list, rtol=1e-4,
                 atol=1e-5, **steps_kwargs):
    """Calls ``jit(fn)`` and ``fn`` on separate copies of lists of
    Variables, backprops a scalar loss, compares outputs and every item's
    gradient."""
    jf = chainerjit.jit(fn)
    for n in lengths:
        mine = [_steps(rng, n, **steps_kwargs) for _ in range(n_lists)]
        theirs = [_copies(xs) for xs in mine]
        expected = fn(*[kind(xs) for xs in theirs])
        actual = jf(*[kind(xs) for xs in mine])
        testing.assert_results_equal(actual, expected, rtol, atol)
        _backward(expected)
        _backward(actual)
        for xs, ys in zip(mine, theirs):
            _assert_grads_equal(xs, ys, rtol, atol)
    return jf


def _array_calls(rng, lengths, n_lists=1, kind=list, **steps_kwargs):
    return [tuple(kind(_steps(rng, n, as_variables=False, **steps_kwargs))
                  for _ in range(n_lists)) for n in lengths]


def _twins(cls):
    numpy.random.seed(0)  # Chainer's initializers draw from it
    model = cls()
    twin = cls()
    twin.copyparams(model)
    return model, twin


def _is_packed(jf):
    return any('[T' in str(e.signature) for e in jf.cache_entries())


# --- functions over lists ----------------------------------------------------

def _plain_rnn(xs):
    h = 0
    for x in xs:
        h = F.tanh(h * 0.5 + x)
    return h


def _first_outside(xs):
    h = xs[0] * 2
    for x in xs:
        h = F.tanh(h + x)
    return h


def _last_outside(xs):
    h = 0
    for x in xs:
        h = F.tanh(h + x)
    return h + xs[-1]


def _last_before(xs):
    h = xs[-1] * 1
    for x in xs:
        h = F.tanh(h + x)
    return h


def _second_outside(xs):
    h = xs[1]
    for x in xs:
        h = F.tanh(h + x)
    return h


def _second_last_outside(xs):
    h = xs[-2] * 1
    for x in xs:
        h = F.tanh(h + x)
    return h


def _peeled_sum(xs):
    h = 0
    for x in xs:
        h = h + x
    return h


def _enumerate_arithmetic(xs):
    h = 0
    for t, x in enumerate(xs):
        h = h * 0.5 + x * (t + 1)
    return h


def _comprehension_with_index_filter(xs):
    return F.stack([F.tanh(x) for t, x in enumerate(xs) if t % 2 == 0])


def _stack_outputs(xs):
    hs = []
    h = 0
    for x in xs:
        h = F.tanh(h + x)
        hs.append(h)
    return F.stack(hs)


def _concat_outputs(xs):
    hs = []
    for x in xs:
        hs.append(F.sigmoid(x))
    return F.concat(hs, axis=0)


def _return_list(xs):
    return [F.tanh(x) for x in xs]


def _return_dict(xs):
    h = 0
    for x in xs:
        h = h + x
    return {'h': h, 'first': xs[0], 'last': xs[-1]}


def _mean_by_len(xs):
    h = 0
    for x in xs:
        h = h + x
    return h / len(xs)


def _if_on_len(xs):
    h = 0
    for x in xs:
        h = F.tanh(h + x)
    if len(xs) > 3:
        h = h * 2
    return h


def _len_alias_in_arithmetic(xs):
    T = len(xs)
    h = 0
    for t in range(T):
        h = F.tanh(h + xs[t])
    return h * T


def _while_over_index(xs):
    h = 0
    t = 0
    while t < len(xs):
        h = F.tanh(h + xs[t])
        t += 1
    return h


def _first_read_in_loop(xs):
    h = 0
    for t in range(len(xs)):
        h = F.tanh(h * 0.5 + xs[t] - xs[0])
    return h


def _last_read_in_loop(xs):
    h = 0
    for x in xs:
        h = F.tanh(h * 0.5 + x * xs[-1])
    return h


def _generator_sum(xs):
    return sum(F.tanh(x) for x in xs)


def _map_tanh(xs):
    return F.stack(list(map(F.tanh, xs)))


def _stack_and_loop(xs):
    s = F.stack(xs)
    h = 0
    for x in xs:
        h = F.tanh(h + x)
    return F.sum(s, axis=0) + h


def _loop_over_pairs(xs):
    h = 0
    for x in xs:
        for y in xs:
            h = F.tanh(h * 0.5 + x * y)
    return h


def _t_after_loop(xs):
    h = 0
    for t, x in enumerate(xs):
        h = h + x
    return h * t


def _x_after_loop(xs):
    h = 0
    for x in xs:
        h = F.tanh(h + x)
    return h * x


def _counter_in_loop(xs):
    h = 0
    n = 0
    for x in xs:
        h = h + x
        n += 1
    return h / n


def _zip_two(xs, ys):
    h = 0
    for x, y in zip(xs, ys):
        h = F.tanh(h + x * y)
    return h


def _two_hidden_states(xs, ys):
    hx = 0
    hy = 0
    for x, y in zip(xs, ys):
        hx = F.tanh(hx + x)
        hy = F.tanh(hy + y)
    return hx, hy


_ANY_LENGTH = [
    _plain_rnn, _first_outside, _last_outside, _last_before, _peeled_sum,
    _enumerate_arithmetic, _comprehension_with_index_filter, _stack_outputs,
    _concat_outputs, _return_list, _return_dict, _mean_by_len, _if_on_len,
    _len_alias_in_arithmetic, _while_over_index, _first_read_in_loop,
    _last_read_in_loop, _generator_sum, _map_tanh, _stack_and_loop,
    _loop_over_pairs, _t_after_loop, _x_after_loop, _counter_in_loop]
_TWO_OR_MORE = [_second_outside, _second_last_outside]


def _lengths_for(fn):
    if fn in _TWO_OR_MORE:
        return LENGTHS_2
    return LENGTHS_SHORT if fn is _loop_over_pairs else LENGTHS


@pytest.mark.parametrize('kind', [list, tuple])
@pytest.mark.parametrize('fn', _ANY_LENGTH + _TWO_OR_MORE)
def test_forward_matches_eager(fn, kind):
    rng = numpy.random.RandomState(0)
    testing.assert_jit_matches_eager(fn, _array_calls(rng, _lengths_for(fn),
                                                      kind=kind))


@pytest.mark.parametrize('fn', _ANY_LENGTH + _TWO_OR_MORE)
def test_item_gradients_match_eager(fn):
    _check_grads(fn, _lengths_for(fn), numpy.random.RandomState(1))


@pytest.mark.parametrize('lengths', [(1, 1, 2, 2, 3, 1), (2, 2, 1, 1, 4)])
def test_short_lists_first(lengths):
    rng = numpy.random.RandomState(2)
    for fn in (_plain_rnn, _first_outside, _last_outside, _stack_outputs,
               _peeled_sum):
        _check_grads(fn, lengths, rng)


def test_a_plain_loop_is_packed_and_symbolic():
    rng = numpy.random.RandomState(3)
    jf = _check_grads(_plain_rnn, LENGTHS, rng)
    packed = [e for e in jf.cache_entries() if 'xs: f32[T,2,3]' in str(
        e.signature)]
    assert len(packed) == 1  # and one entry per length under MIN_ITEMS


def test_zip_of_lists_of_different_lengths_forward():
    rng = numpy.random.RandomState(4)
    calls = [(_steps(rng, n, as_variables=False),
              _steps(rng, m, as_variables=False))
             for n, m in ((3, 3), (3, 3), (5, 3), (5, 3), (3, 5), (3, 5),
                          (4, 4), (2, 6), (6, 2), (1, 1), (8, 8))]
    testing.assert_jit_matches_eager(_zip_two, calls)


def test_zip_of_equal_lengths_gradients():
    rng = numpy.random.RandomState(5)
    _check_grads(_zip_two, LENGTHS, rng, n_lists=2)


def test_unused_output_gives_no_gradient_to_its_list():
    rng = numpy.random.RandomState(6)
    jf = chainerjit.jit(_two_hidden_states)
    for n in LENGTHS:
        xs, ys = _steps(rng, n), _steps(rng, n)
        xt, yt = _copies(xs), _copies(ys)
        F.sum(jf(xs, ys)[1]).backward()
        F.sum(_two_hidden_states(xt, yt)[1]).backward()
        _assert_grads_equal(xs + ys, xt + yt)


def _range_over_other(xs, ys):
    h = 0
    for t in range(len(ys)):
        h = F.tanh(h + xs[t] * ys[t])
    return h


def test_range_over_another_lists_length():
    rng = numpy.random.RandomState(7)
    calls = [(_steps(rng, n, as_variables=False),
              _steps(rng, m, as_variables=False))
             for n, m in ((3, 3), (3, 3), (5, 3), (4, 4), (6, 2), (1, 1),
                          (8, 8), (9, 7))]
    testing.assert_jit_matches_eager(_range_over_other, calls)


def test_index_error_like_eager():
    rng = numpy.random.RandomState(8)
    jf = chainerjit.jit(_range_over_other)
    for n in (3, 3, 4):
        jf(_steps(rng, n, as_variables=False),
           _steps(rng, n, as_variables=False))
    xs = _steps(rng, 2, as_variables=False)
    ys = _steps(rng, 5, as_variables=False)
    with pytest.raises(IndexError):
        _range_over_other(xs, ys)
    with pytest.raises(IndexError):
        jf(xs, ys)
    jf = chainerjit.jit(_second_last_outside)
    for n in (3, 3, 1, 1):
        xs = _steps(rng, n, as_variables=False)
        if n == 1:
            with pytest.raises(IndexError):
                jf(xs)
        else:
            jf(xs)


# --- kinds of calls ----------------------------------------------------------

def _with_keywords(a, xs=None, scale=1.0):
    h = a
    for x in xs:
        h = F.tanh(h + x * scale)
    return h


def test_keyword_lists_and_tuples():
    rng = numpy.random.RandomState(9)
    jf = chainerjit.jit(_with_keywords)
    for n in LENGTHS:
        xs = _steps(rng, n, as_variables=False)
        a = _rand(rng, (2, 3))
        for args, kwargs in (((a,), dict(xs=xs, scale=0.5)),
                             ((a,), dict(xs=tuple(xs))),
                             ((a, xs), {})):
            testing.assert_results_equal(jf(*args, **kwargs),
                                         _with_keywords(*args, **kwargs))


def _depends_on_the_kind(xs):
    h = 0
    for x in xs:
        h = F.tanh(h * 0.5 + x)
    if isinstance(xs, tuple):
        return h * 2
    return h


@pytest.mark.parametrize('fn', [_plain_rnn, _depends_on_the_kind])
def test_lists_and_tuples_alternate(fn):
    rng = numpy.random.RandomState(10)
    jf = chainerjit.jit(fn)
    for n in LENGTHS:
        xs = _steps(rng, n, as_variables=False)
        testing.assert_results_equal(jf(xs), fn(xs))
        testing.assert_results_equal(jf(tuple(xs)), fn(tuple(xs)))


def test_arrays_and_variables_of_one_length_alternate():
    rng = numpy.random.RandomState(11)
    jf = chainerjit.jit(_plain_rnn)
    for n in LENGTHS:
        xs = _steps(rng, n, as_variables=False)
        for items in (xs, [chainer.Variable(x) for x in xs],
                      [chainer.Variable(x, requires_grad=False)
                       for x in xs]):
            testing.assert_results_equal(jf(items), _plain_rnn(items))


def test_mixed_requires_grad_items():
    rng = numpy.random.RandomState(12)
    jf = chainerjit.jit(_plain_rnn)
    for n in LENGTHS_2:
        xs = _steps(rng, n)
        xs[0] = chainer.Variable(xs[0].array, requires_grad=False)
        theirs = _copies(xs)
        actual, expected = jf(xs), _plain_rnn(theirs)
        testing.assert_results_equal(actual, expected)
        F.sum(actual).backward()
        F.sum(expected).backward()
        _assert_grads_equal(xs, theirs)


def _over_nested_lists(xss):
    h = 0
    for xs in xss:
        for x in xs:
            h = F.tanh(h * 0.5 + x)
    return h


def test_nested_lists():
    rng = numpy.random.RandomState(13)
    calls = [([_steps(rng, n, as_variables=False) for _ in range(m)],)
             for n, m in ((3, 2), (3, 2), (4, 2), (2, 3), (2, 3), (1, 1),
                          (1, 1))]
    testing.assert_jit_matches_eager(_over_nested_lists, calls)


@pytest.mark.parametrize('dtype, tol', [
    (numpy.float16, 1e-2), (numpy.float64, 1e-6)])
def test_other_float_dtypes(dtype, tol):
    rng = numpy.random.RandomState(14)
    jf = _check_grads(_plain_rnn, LENGTHS, rng, dtype=dtype, rtol=tol,
                      atol=tol)
    assert _is_packed(jf)


def test_dtypes_change_between_calls():
    rng = numpy.random.RandomState(15)
    jf = chainerjit.jit(_plain_rnn)
    dtypes = [numpy.float32, numpy.float64, numpy.float32, numpy.float16,
              numpy.float64, numpy.float32, numpy.float32]
    for n, dtype in zip(LENGTHS, dtypes):
        xs = _steps(rng, n, as_variables=False, dtype=dtype)
        testing.assert_results_equal(jf(xs), _plain_rnn(xs), 1e-2, 1e-3)


def test_a_list_of_mixed_dtypes():
    rng = numpy.random.RandomState(16)
    calls = []
    for n in (3, 3, 4, 4):
        xs = _steps(rng, n, as_variables=False)
        xs[1] = xs[1].astype(numpy.float64)
        calls.append((xs,))
    testing.assert_jit_matches_eager(_plain_rnn, calls)


def _from_zeros(xs):
    h = numpy.zeros((2, 3), numpy.float32)
    for x in xs:
        h = F.tanh(h + x)
    return h


def test_empty_lists():
    rng = numpy.random.RandomState(17)
    jf = chainerjit.jit(_from_zeros)
    for n in (0, 0, 3, 3, 0, 5, 0, 1, 0):
        xs = _steps(rng, n, as_variables=False)
        testing.assert_results_equal(jf(xs), _from_zeros(xs))
        testing.assert_results_equal(jf(tuple(xs)), _from_zeros(tuple(xs)))


def test_item_shapes_change_between_calls():
    rng = numpy.random.RandomState(18)
    jf = chainerjit.jit(_plain_rnn)
    shapes = [(2, 3), (2, 3), (4, 3), (2, 3), (2, 5), (1, 1), (4, 3)]
    for n, shape in zip(LENGTHS, shapes):
        xs = _steps(rng, n, shape=shape, as_variables=False)
        testing.assert_results_equal(jf(xs), _plain_rnn(xs))


def test_zero_dimensional_items():
    rng = numpy.random.RandomState(19)
    _check_grads(_peeled_sum, LENGTHS, rng, shape=())
    _check_grads(_plain_rnn, LENGTHS, rng, shape=())


def test_config_flags_interleave():
    rng = numpy.random.RandomState(20)
    jf = chainerjit.jit(_plain_rnn)
    for i, n in enumerate(LENGTHS + LENGTHS):
        xs = _steps(rng, n)
        theirs = _copies(xs)
        backprop = i % 2 == 0
        with chainer.using_config('enable_backprop', backprop), \
                chainer.using_config('train', i % 3 == 0):
            actual, expected = jf(xs), _plain_rnn(theirs)
        testing.assert_results_equal(actual, expected)
        if backprop:
            F.sum(actual).backward()
            F.sum(expected).backward()
            _assert_grads_equal(xs, theirs)
        else:
            assert actual.creator is None


# --- where the items come from -----------------------------------------------

@pytest.mark.parametrize('split', [
    lambda w, n: F.split_axis(w, n, axis=0) if n > 1 else (w,),
    lambda w, n: list(F.separate(F.reshape(w, (n, 2, 3)), axis=0)),
    lambda w, n: [w[2 * k:2 * k + 2] * (k + 1) for k in range(n)],
], ids=['split_axis', 'separate', 'scaled_slices'])
def test_items_made_by_chainer_functions(split):
    rng = numpy.random.RandomState(21)
    jf = chainerjit.jit(_plain_rnn)
    for n in LENGTHS:
        w0 = _rand(rng, (2 * n, 3))
        mine, theirs = chainer.Variable(w0.copy()), chainer.Variable(w0)
        actual, expected = jf(split(mine, n)), _plain_rnn(split(theirs, n))
        testing.assert_results_equal(actual, expected)
        F.sum(actual * actual).backward()
        F.sum(expected * expected).backward()
        numpy.testing.assert_allclose(mine.grad, theirs.grad, 1e-4, 1e-5)


def test_gradients_accumulate_into_existing_grads():
    rng = numpy.random.RandomState(22)
    jf = chainerjit.jit(_plain_rnn)
    for n in LENGTHS:
        xs = _steps(rng, n)
        theirs = _copies(xs)
        for a, e in zip(xs, theirs):
            g = _rand(rng, (2, 3))
            a.grad, e.grad = g.copy(), g.copy()
        F.sum(jf(xs)).backward()
        F.sum(_plain_rnn(theirs)).backward()
        _assert_grads_equal(xs, theirs)


def test_the_same_list_for_two_parameters_gradients():
    rng = numpy.random.RandomState(23)
    jf = chainerjit.jit(_zip_two)
    for n in LENGTHS:
        xs = _steps(rng, n)
        theirs = _copies(xs)
        actual, expected = jf(xs, xs), _zip_two(theirs, theirs)
        testing.assert_results_equal(actual, expected)
        F.sum(actual).backward()
        F.sum(expected).backward()
        _assert_grads_equal(xs, theirs)


def test_the_same_variable_twice_in_a_list_gradients():
    rng = numpy.random.RandomState(24)
    jf = chainerjit.jit(_plain_rnn)
    for n in LENGTHS:
        xs = _steps(rng, n)
        theirs = _copies(xs)
        xs, theirs = xs + [xs[0]], theirs + [theirs[0]]
        actual, expected = jf(xs), _plain_rnn(theirs)
        testing.assert_results_equal(actual, expected)
        F.sum(actual).backward()
        F.sum(expected).backward()
        _assert_grads_equal(xs, theirs)


def _list_and_its_first(xs, x0):
    h = x0 * 1
    for x in xs:
        h = F.tanh(h + x)
    return h


def test_an_item_also_passed_as_another_argument_gradients():
    rng = numpy.random.RandomState(25)
    jf = chainerjit.jit(_list_and_its_first)
    for n in LENGTHS:
        xs = _steps(rng, n)
        theirs = _copies(xs)
        actual = jf(xs, xs[0])
        expected = _list_and_its_first(theirs, theirs[0])
        testing.assert_results_equal(actual, expected)
        F.sum(actual).backward()
        F.sum(expected).backward()
        _assert_grads_equal(xs, theirs)


# --- links -------------------------------------------------------------------

class _Linked(chainer.Chain):
    def __init__(self):
        super(_Linked, self).__init__()
        with self.init_scope():
            self.linear = L.Linear(3, 3)


class _StoresTheLastRow(_Linked):
    def forward(self, xs):
        h = 0
        for x in xs:
            h = F.tanh(self.linear(x) + h)
            self.last = x
        return h


class _StoresTheFirstRow(_Linked):
    def forward(self, xs):
        self.first = xs[0]
        h = 0
        for x in xs:
            h = F.tanh(self.linear(x) + h)
        return h


class _StoresTheState(_Linked):
    def forward(self, xs):
        h = 0
        hs = []
        for x in xs:
            h = F.tanh(self.linear(x) + h)
            hs.append(h)
        self.h = h
        self.hs = hs
        return h


@pytest.mark.parametrize('cls, attr, index', [
    (_StoresTheLastRow, 'last', -1), (_StoresTheFirstRow, 'first', 0),
    (_StoresTheState, 'h', None)])
def test_rows_and_states_stored_on_a_link(cls, attr, index):
    rng = numpy.random.RandomState(29)
    model, twin = _twins(cls)
    model.forward = chainerjit.jit(model.forward)
    for n in LENGTHS:
        xs = _steps(rng, n)
        theirs = _copies(xs)
        model.cleargrads()
        twin.cleargrads()
        actual, expected = model(xs), twin(theirs)
        testing.assert_results_equal(actual, expected)
        F.sum(actual).backward()
        F.sum(expected).backward()
        _assert_param_grads_equal(model, twin)
        _assert_grads_equal(xs, theirs)
        testing.assert_results_equal(getattr(model, attr),
                                     getattr(twin, attr))
        if index is not None:
            assert getattr(model, attr) is xs[index]
        else:
            testing.assert_results_equal(model.hs, twin.hs)


class _StatefulLSTM(chainer.Chain):
    def __init__(self):
        super(_StatefulLSTM, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(3, 4)
            self.out = L.Linear(4, 2)

    def forward(self, xs):
        self.lstm.reset_state()
        ys = []
        for x in xs:
            ys.append(self.out(self.lstm(x)))
        return F.stack(ys)


class _CarriedLSTM(_StatefulLSTM):
    """The state carries over from call to call."""

    def forward(self, xs):
        h = None
        for x in xs:
            h = self.lstm(x)
        return self.out(h)


class _StatelessLSTM(chainer.Chain):
    def __init__(self):
        super(_StatelessLSTM, self).__init__()
        with self.init_scope():
            self.lstm = L.StatelessLSTM(3, 4)
            self.out = L.Linear(4, 2)

    def forward(self, xs):
        c = h = None
        for x in xs:
            c, h = self.lstm(c, h, x)
        return self.out(h)


class _StatelessConcat(_StatelessLSTM):
    def forward(self, xs):
        c = h = None
        hs = []
        for x in xs:
            c, h = self.lstm(c, h, x)
            hs.append(self.out(h))
        return F.concat(hs, axis=1)


@pytest.mark.parametrize('cls', [
    _StatefulLSTM, _CarriedLSTM, _StatelessLSTM, _StatelessConcat])
@pytest.mark.parametrize('optimizer', [
    lambda: optimizers.SGD(0.1), lambda: optimizers.Adam()],
    ids=['sgd', 'adam'])
def test_lstm_training_over_lists(cls, optimizer):
    rng = numpy.random.RandomState(30)
    model, twin = _twins(cls)
    model.forward = chainerjit.jit(model.forward)
    mine, theirs = optimizer(), optimizer()
    mine.setup(model)
    theirs.setup(twin)
    for n in LENGTHS:
        xs = _steps(rng, n)
        ts = _copies(xs)
        model.cleargrads()
        twin.cleargrads()
        actual, expected = model(xs), twin(ts)
        testing.assert_results_equal(actual, expected, 1e-4, 1e-5)
        F.sum(actual * actual).backward()
        F.sum(expected * expected).backward()
        _assert_param_grads_equal(model, twin)
        _assert_grads_equal(xs, ts)
        mine.update()
        theirs.update()
        params = dict(model.namedparams())
        for name, param in twin.namedparams():
            numpy.testing.assert_allclose(params[name].array, param.array,
                                          1e-4, 1e-5, err_msg=name)
    if cls is _CarriedLSTM:
        testing.assert_results_equal(model.lstm.h, twin.lstm.h, 1e-4, 1e-5)


class _Embedder(chainer.Chain):
    def __init__(self):
        super(_Embedder, self).__init__()
        with self.init_scope():
            self.embed = L.EmbedID(10, 3)

    def forward(self, ids):
        h = 0
        for i in ids:
            h = F.tanh(h + self.embed(i))
        return h


def test_lists_of_int_ids():
    rng = numpy.random.RandomState(31)
    model, twin = _twins(_Embedder)
    model.forward = chainerjit.jit(model.forward)
    for n in LENGTHS:
        ids = [rng.randint(0, 10, size=(2,)).astype(numpy.int32)
               for _ in range(n)]
        model.cleargrads()
        twin.cleargrads()
        actual, expected = model(ids), twin(ids)
        testing.assert_results_equal(actual, expected)
        F.sum(actual).backward()
        F.sum(expected).backward()
        _assert_param_grads_equal(model, twin)
    assert _is_packed(model.forward)
    ids[-1][0] = 12  # out of range: eager's error
    with pytest.raises(IndexError):
        twin(ids)
    with pytest.raises(IndexError):
        model(ids)


def test_lists_of_variables_without_grad_train_the_parameters():
    rng = numpy.random.RandomState(32)
    model, twin = _twins(_StoresTheState)
    model.forward = chainerjit.jit(model.forward)
    for n in LENGTHS:
        xs = _steps(rng, n, requires_grad=False)
        model.cleargrads()
        twin.cleargrads()
        actual, expected = model(xs), twin(_copies(xs))
        testing.assert_results_equal(actual, expected)
        F.sum(actual).backward()
        F.sum(expected).backward()
        _assert_param_grads_equal(model, twin)
        assert all(x.grad is None for x in xs)


# --- branches on values ------------------------------------------------------

def _signed_steps(rng, n, positive):
    xs = _steps(rng, n, shape=(1, 2))
    for k, x in enumerate(xs):
        x.array[...] = numpy.abs(x.array) * (1 if k in positive else -1)
    return xs


def _filtered_by_value(xs):
    ys = [F.tanh(x) for x in xs if (x.array > 0).all()]
    h = xs[0] * 0
    for y in ys:
        h = h + y
    return h


def _branch_in_the_loop(xs):
    h = xs[0] * 0
    for x in xs:
        if (x.array > 0).all():
            h = F.tanh(h + x)
    return h


@pytest.mark.parametrize('fn', [_filtered_by_value, _branch_in_the_loop])
def test_branches_on_item_values(fn):
    rng = numpy.random.RandomState(33)
    jf = chainerjit.jit(fn)
    for n, positive in ((3, {0, 1, 2}), (3, {0, 1, 2}), (3, {0, 2}),
                        (3, {0, 2}), (4, {1}), (4, {1}), (4, {0, 1, 2, 3}),
                        (4, {0, 1, 2, 3})):
        xs = _signed_steps(rng, n, positive)
        theirs = _copies(xs)
        actual, expected = jf(xs), fn(theirs)
        testing.assert_results_equal(actual, expected)
        F.sum(actual).backward()
        F.sum(expected).backward()
        _assert_grads_equal(xs, theirs)


def _breaks_on_a_value(xs):
    h = 0
    for x in xs:
        h = F.tanh(h + x)
        if (h.array > 0.5).all():
            break
    return h


def _steps_stopping_at(rng, n, stop):
    xs = _steps(rng, n, shape=(1, 2))
    for k, x in enumerate(xs):
        x.array[...] = 3.0 if k == stop else -0.3
        x.array += rng.uniform(0, 0.1, size=x.shape).astype(numpy.float32)
    return xs


def test_break_on_a_value_forward():
    rng = numpy.random.RandomState(34)
    calls = [([x.array for x in _steps_stopping_at(rng, n, stop)],)
             for n, stop in ((4, None), (4, None), (4, 1), (4, 1), (5, 2),
                             (5, 2), (5, None), (3, 0), (3, 0))]
    testing.assert_jit_matches_eager(_breaks_on_a_value, calls)


# --- found mismatches (xfail) ------------------------------------------------

def _first_row_and_an_array_read(xs):
    return xs[0] * 2 + F.tanh(xs[1].array)


def test_a_row_read_only_as_an_array_gets_no_gradient():
    rng = numpy.random.RandomState(40)
    jf = chainerjit.jit(_first_row_and_an_array_read)
    xs = _steps(rng, 2)
    theirs = _copies(xs)
    F.sum(jf(xs)).backward()
    F.sum(_first_row_and_an_array_read(theirs)).backward()
    assert theirs[1].grad is None
    _assert_grads_equal(xs, theirs)


def _argmax_in_the_loop(xs):
    h = xs[0] * 1
    for x in xs:
        h = h + F.argmax(x, axis=1).array.astype(numpy.float32)[:, None]
    return h


@pytest.mark.xfail(strict=True, reason=(
    'rows read only by a non-differentiable op (F.argmax) get zero '
    'gradient arrays instead of None, at recording and compiled calls'))
def test_rows_read_by_a_non_differentiable_op_get_no_gradient():
    _check_grads(_argmax_in_the_loop, LENGTHS, numpy.random.RandomState(41))


def _first_row_then_arrays_in_the_loop(xs):
    h = xs[0] * 2
    for x in xs:
        h = h + F.tanh(x.array)
    return h


def test_array_reads_in_a_packed_loop_stay_detached():
    rng = numpy.random.RandomState(42)
    jf = chainerjit.jit(_first_row_then_arrays_in_the_loop)
    for n in (3, 3, 3):  # the last two run the compiled program
        xs = _steps(rng, n)
        theirs = _copies(xs)
        F.sum(jf(xs)).backward()
        F.sum(_first_row_then_arrays_in_the_loop(theirs)).backward()
        numpy.testing.assert_allclose(xs[0].grad, theirs[0].grad, 1e-4,
                                      1e-5)


def _detached_plain(x, y):
    return x * 2 + F.tanh(y.array) * y


def test_array_reads_stay_detached_without_lists():
    jf = chainerjit.jit(_detached_plain)
    for _ in range(3):
        mine = [chainer.Variable(numpy.ones(2, numpy.float32))
                for _ in range(2)]
        theirs = _copies(mine)
        F.sum(jf(*mine)).backward()
        F.sum(_detached_plain(*theirs)).backward()
        _assert_grads_equal(mine, theirs)


def test_zip_with_a_longer_list_gives_unread_items_no_gradient():
    rng = numpy.random.RandomState(43)
    jf = chainerjit.jit(_zip_two)
    for n, m in ((3, 3), (3, 3), (3, 5), (3, 5)):
        xs, ys = _steps(rng, n), _steps(rng, m)
        xt, yt = _copies(xs), _copies(ys)
        F.sum(jf(xs, ys)).backward()
        F.sum(_zip_two(xt, yt)).backward()
        _assert_grads_equal(xs + ys, xt + yt)


def test_items_after_a_break_get_no_gradient():
    rng = numpy.random.RandomState(44)
    jf = chainerjit.jit(_breaks_on_a_value)
    for n, stop in ((4, None), (4, None), (4, 1), (4, 1)):
        xs = _steps_stopping_at(rng, n, stop)
        theirs = _copies(xs)
        F.sum(jf(xs)).backward()
        F.sum(_breaks_on_a_value(theirs)).backward()
        _assert_grads_equal(xs, theirs)


def _two_loops_over_one_length(xs, ys):
    h = 0
    for t in range(len(ys)):
        h = F.tanh(h + ys[t])
    for t in range(len(ys)):
        h = F.tanh(h + xs[t])
    return h


def _two_loops_over_one_array(xs):
    h = numpy.zeros((2, 3), numpy.float32)
    for x in xs:
        h = F.tanh(h + x)
    for x in xs:
        h = F.tanh(h * 2 + x)
    return h


@pytest.mark.parametrize('as_lists', [True, False])
def test_two_loops_over_one_length(as_lists):
    rng = numpy.random.RandomState(53)
    if as_lists:
        fn = _two_loops_over_one_length
        calls = [(_steps(rng, n, as_variables=False),
                  _steps(rng, n, as_variables=False)) for n in (3, 3, 4)]
    else:
        fn = _two_loops_over_one_array
        calls = [(_rand(rng, (n, 2, 3)),) for n in (3, 3, 4)]
    jf = chainerjit.jit(fn)
    for args in calls:
        testing.assert_results_equal(jf(*args), fn(*args))
