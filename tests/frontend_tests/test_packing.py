"""Adversarial differential tests of list packing
(``chainerjit.frontend.packing``): values and gradients of functions over
lists.

A jitted function called with a list (or tuple) of alike arrays or
Variables must give what eager Chainer gives: outputs and the gradients of
every list item (``None`` where eager leaves ``None``), for every kind of
call (keywords, tuples, mixed ``requires_grad``, nested lists, dtypes,
empty lists) and for items made by Chainer functions. Each function is
called with several lengths in sequence, lengths repeating, so that
recording calls, compiled calls and the verification of a new length on a
symbolic entry are all exercised. Links over lists are in
``test_packing_links.py``, branches on item values and the mismatches
found in ``test_packing_branches.py``, the identity of returned items and
changes the caller can see in ``test_packing_identity.py``; the helpers
they share are in ``packing_checks.py``.
"""

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.frontend_tests.packing_checks import _array_calls
from tests.frontend_tests.packing_checks import _assert_grads_equal
from tests.frontend_tests.packing_checks import _check_grads
from tests.frontend_tests.packing_checks import _copies
from tests.frontend_tests.packing_checks import _is_packed
from tests.frontend_tests.packing_checks import _rand
from tests.frontend_tests.packing_checks import _steps
from tests.frontend_tests.packing_checks import _zip_two
from tests.frontend_tests.packing_checks import LENGTHS
from tests.frontend_tests.packing_checks import LENGTHS_2
from tests.frontend_tests.packing_checks import LENGTHS_SHORT


pytestmark = [
    pytest.mark.adversarial,
    pytest.mark.filterwarnings('ignore::UserWarning'),
]


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


#: (items, batch size) of lists of steps, the lengths and the batch
#: changing apart and at once.
_LENGTHS_AND_BATCHES = ((3, 2), (5, 2), (4, 2), (4, 5), (6, 3), (3, 7),
                        (5, 4))


@pytest.mark.parametrize('fn', [_plain_rnn, _first_outside, _stack_outputs,
                                _peeled_sum])
def test_lists_of_steps_serve_every_length_and_batch_size(fn):
    """Each step a batch of rows: one packed entry, its batch size a
    symbol too, with outputs and every item's gradient as eager's."""
    rng = numpy.random.RandomState(20)
    jf = chainerjit.jit(fn)
    for n, batch in _LENGTHS_AND_BATCHES:
        mine = _steps(rng, n, shape=(batch, 3))
        theirs = _copies(mine)
        expected, actual = fn(theirs), jf(mine)
        testing.assert_results_equal(actual, expected, 1e-4, 1e-5)
        F.sum(expected * expected).backward()
        F.sum(actual * actual).backward()
        _assert_grads_equal(mine, theirs)
    signatures = [str(e.signature) for e in jf.cache_entries()]
    assert signatures == ['xs: f32[T,B,3]@cpu grad, train=True, '
                          'enable_backprop=True'], signatures


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


def _mean_over_the_items(xs):
    h = 0
    for t in range(len(xs)):
        h = F.tanh(h + xs[t])
    return h / len(xs) + (h * 2 if len(xs) > 4 else h)


def test_the_number_of_items_is_a_size_read_when_run():
    """``len(xs)`` of a packed list is its array's first size: divided
    by, it is read from the array when run; compared, it is a guard
    (an entry on each side)."""
    rng = numpy.random.RandomState(9)
    jf = _check_grads(_mean_over_the_items, (3, 5, 4, 7, 3, 6), rng)
    signatures = sorted(str(e.signature) for e in jf.cache_entries())
    assert len(signatures) == 2 and all(
        s.startswith('xs: f32[T,2,3]') for s in signatures), signatures


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
