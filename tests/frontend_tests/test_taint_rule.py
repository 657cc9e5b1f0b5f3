"""The taint rule: every value a forward derives from its inputs at run
time is recorded as an op of the program, guarded, or makes the call run
eagerly with a warning naming the line; never a constant frozen at
recording time.

The tests walk NumPy's public functions (``numpy.__all__``) and the
ndarray methods, called on an input-derived array inside a jitted
forward, and check each compiled call against eager on new values.
"""

import warnings

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import errors

F32 = numpy.float32

# What cannot take an array as its first argument, or is no computation.
_SKIPPED = frozenset([
    'seterr', 'geterr', 'seterrcall', 'geterrcall', 'errstate',
    'setbufsize', 'getbufsize', 'set_printoptions', 'get_printoptions',
    'printoptions', 'set_string_function', 'save', 'savez',
    'savez_compressed', 'savetxt', 'load', 'loadtxt', 'genfromtxt',
    'fromfile', 'tofile', 'memmap', 'lookfor', 'info', 'source', 'who',
    'show_config', 'show_runtime', 'test', 'deprecate',
    'deprecate_with_doc', 'disp', 'recfromcsv', 'recfromtxt',
    'add_newdoc', 'add_docstring', 'add_newdoc_ufunc', 'get_include',
    'may_share_memory', 'shares_memory', 'nested_iters', 'nditer',
    'broadcast', 'busdaycalendar', 'vectorize', 'frompyfunc', 'ndindex',
    'ndenumerate', 'Arrayterator', 'DataSource', 'poly1d', 'asmatrix',
    'mat', 'bmat', 'matrix', 'recarray', 'chararray', 'format_parser',
    'iterable', 'require',
    # memory's addresses and memory not written: no values to compare
    'byte_bounds', 'empty_like'])


def _numpy_functions():
    names = []
    for name in sorted(numpy.__all__):
        fn = getattr(numpy, name, None)
        if name in _SKIPPED or name.startswith('_') or not callable(fn) or \
                isinstance(fn, type) and not issubclass(fn, numpy.generic):
            continue
        names.append(name)
    return names


def _method_names():
    return sorted(name for name in dir(numpy.ndarray)
                  if not name.startswith('_') and
                  callable(getattr(numpy.ndarray, name)) and
                  name not in ('tofile', 'dump', 'dumps', 'setfield',
                               'setflags', 'itemset', 'resize', 'fill',
                               'put', 'sort', 'partition', 'byteswap',
                               'view', 'getfield', 'newbyteorder'))


def _forward(apply):
    """A forward that applies ``apply`` to its input's array outside
    Chainer functions, then uses the result in a Chainer function (or
    returns it)."""
    def forward(x):
        result = apply(F.tanh(x).array)
        if isinstance(result, numpy.ndarray) and result.dtype.kind in 'fiub':
            return F.identity(result.astype(F32)) + 0.5
        return result
    return forward


def _inputs():
    rng = numpy.random.RandomState(7)
    return [rng.uniform(-0.9, 0.9, (3, 4)).astype(F32) for _ in range(4)]


def _eager_or_none(fn, x):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            return fn(x)
    except Exception:
        return None


def _as_arrays(result):
    """The numbers of a result (a type or a method a function returns
    compares by identity, which a new call never keeps)."""
    if isinstance(result, chainer.Variable):
        return [result.array]
    if isinstance(result, (tuple, list)):
        return [a for r in result for a in _as_arrays(r)]
    array = numpy.asarray(result)
    return [array] if array.dtype.kind in 'biufcSU' else []


def _never_frozen(forward):
    """Calls ``forward`` eagerly and jitted on new values; the jitted
    result equals eager's, or the call ran eagerly with a warning."""
    xs = _inputs()
    if any(_eager_or_none(forward, x) is None for x in xs):
        return 'eager raises'
    jitted = chainerjit.jit(forward)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.FallbackWarning)
        for x in xs:
            expected = _as_arrays(forward(x))
            got = _as_arrays(jitted(x))
            assert len(got) == len(expected)
            for g, e in zip(got, expected):
                numpy.testing.assert_array_equal(g, e)
    info = jitted.cache_info()
    ran_eagerly = info.eager > 0 or info.compiled < info.hits
    if ran_eagerly:
        # A FallbackWarning is shown once per line, and the forwards here
        # share theirs: each entry that runs eagerly must say why and where.
        fallbacks = [e.fallback for e in jitted.cache_entries()]
        assert fallbacks and all(
            f and 'test_taint_rule.py' in f for f in fallbacks), fallbacks
    return 'eager' if ran_eagerly else 'compiled'


def _called_through_numpy(name):
    """``numpy.NAME(a)``, the function looked up when it is called, as
    code written ``numpy.asarray(x)`` does."""
    return lambda a: getattr(numpy, name)(a)


@pytest.mark.parametrize('name', _numpy_functions())
def test_numpy_functions_on_an_input_derived_array(name):
    _never_frozen(_forward(_called_through_numpy(name)))


@pytest.mark.parametrize('name', _method_names())
def test_ndarray_methods_on_an_input_derived_array(name):
    _never_frozen(_forward(lambda a: getattr(a, name)()))


def test_the_walk_covers_the_conversions_and_sees_them_compiled():
    outcomes = dict(
        (name, _never_frozen(_forward(_called_through_numpy(name))))
        for name in ('asarray', 'array', 'ascontiguousarray', 'copy', 'abs',
                     'exp'))
    assert outcomes == dict.fromkeys(outcomes, 'compiled')
