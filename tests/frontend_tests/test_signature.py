"""Call signatures (``chainerjit.frontend.signature``): the cache key of
a call is equal for calls alike (same structure, shapes, dtypes, static
values and configuration, whatever the values in the arrays) and differs
for a changed shape, dtype, train or backprop flag, static argument,
Variable or array, ``requires_grad`` or aliasing; :class:`Signature`
prints a key readably and says how two differ."""

import chainer
import numpy
import pytest

from chainerjit.frontend import signature


F32, F64 = numpy.float32, numpy.float64


def forward(x, hs, scale=1.0):
    """The function whose calls are keyed (only its parameters matter)."""


def _key(args, kwargs=None, train=False, backprop=False):
    return signature.make_key(args, kwargs or {}, train, backprop)[0]


def _call(rng, batch=3, dtype=F32, requires_grad=True):
    """``(x, hs)``: an array and a list of a Variable and an int array."""
    x = rng.standard_normal((batch, 4)).astype(dtype)
    hs = [chainer.Variable(rng.standard_normal(5).astype(F64),
                           requires_grad=requires_grad),
          rng.randint(0, 9, size=2).astype(numpy.int32)]
    return x, hs


def test_calls_alike_have_equal_keys(rng):
    a = _key(_call(rng), {'scale': 2.0}, train=True)
    b = _key(_call(rng), {'scale': 2.0}, train=True)
    assert a == b and hash(a) == hash(b)
    train, backprop, structure, specs, alias = a
    assert (train, backprop, alias) == (True, False, None)
    assert specs == (((3, 4), numpy.dtype(F32), 'cpu', False, False),
                     ((5,), numpy.dtype(F64), 'cpu', True, True),
                     ((2,), numpy.dtype(numpy.int32), 'cpu', False, False))


def test_the_leaves_are_the_calls_arrays_and_variables(rng):
    x, hs = _call(rng)
    key, leaves = signature.make_key((x, hs), {}, False, False)
    assert len(leaves) == 3
    assert leaves[0] is x and leaves[1] is hs[0] and leaves[2] is hs[1]


@pytest.mark.parametrize('change', [
    'shape', 'dtype', 'train', 'backprop', 'static', 'static_type',
    'requires_grad', 'array_for_variable', 'tuple_for_list', 'keyword'])
def test_a_changed_call_has_another_key(rng, change):
    x, hs = _call(rng)
    base = dict(args=(x, hs), kwargs={'scale': 2.0}, train=False,
                backprop=True)
    changed = dict(base)
    if change == 'shape':
        changed['args'] = _call(rng, batch=5)
    elif change == 'dtype':
        changed['args'] = _call(rng, dtype=F64)
    elif change == 'train':
        changed['train'] = True
    elif change == 'backprop':
        changed['backprop'] = False
    elif change == 'static':
        changed['kwargs'] = {'scale': 3.0}
    elif change == 'static_type':
        changed['kwargs'] = {'scale': 2}
    elif change == 'requires_grad':
        changed['args'] = _call(rng, requires_grad=False)
    elif change == 'array_for_variable':
        changed['args'] = (x, [hs[0].array, hs[1]])
    elif change == 'tuple_for_list':
        changed['args'] = (x, tuple(hs))
    elif change == 'keyword':
        changed['kwargs'] = {}
    assert _key(**base) != _key(**changed)


def test_the_same_array_twice_is_keyed_by_its_aliasing(rng):
    x = rng.standard_normal((3, 4)).astype(F32)
    y = x.copy()
    apart = _key((x, y))
    together = _key((x, x))
    assert apart[:4] == together[:4]
    assert apart[4] is None and together[4] is not None
    assert _key((y, y)) == together


def _signature(args, kwargs=None, train=False, backprop=False):
    key, leaves = signature.make_key(args, kwargs or {}, train, backprop)
    return signature.Signature.of_call(forward, args, kwargs or {}, key,
                                       leaves)


def test_a_signature_names_every_argument(rng):
    x, hs = _call(rng)
    text = str(_signature((x, hs), {'scale': 2.0}, backprop=True))
    assert text == ('x: f32[3,4]@cpu (array), hs[0]: f64[5]@cpu grad, '
                    'hs[1]: i32[2]@cpu (array), scale=2.0, train=False, '
                    'enable_backprop=True')
    no_grad = str(_signature(_call(rng, requires_grad=False)))
    assert 'hs[0]: f64[5]@cpu, hs[1]' in no_grad


def test_a_signature_says_how_another_differs(rng):
    old = _signature(_call(rng), {'scale': 2.0})
    assert old.diff(_signature(_call(rng), {'scale': 2.0})) == []
    new = _signature(_call(rng, batch=5, dtype=F64), {'scale': 3.0},
                     train=True)
    assert old.diff(new) == [
        'x: shape (3, 4) -> (5, 4) at axis 0',
        'x: dtype float32 -> float64',
        'scale: 2.0 -> 3.0',
        'train: False -> True',
    ]


def test_a_symbolic_length_prints_as_T(rng):
    xs = rng.standard_normal((7, 2, 3)).astype(F32)
    sig = _signature((xs, []))
    symbolic = sig.with_symbols([(0, (0,))], 'dim', (0, 0))
    assert str(symbolic).startswith('x: f32[T,2,3]@cpu (array)')
    other = _signature((rng.standard_normal((9, 2, 3)).astype(F32), []))
    assert symbolic.diff(other.with_symbols([(0, (0,))], 'dim', (0, 0))) \
        == []
