"""Checkers and inputs of the loop-form tests (``test_loop_forms.py``,
``test_loop_bodies.py``, ``test_loop_carried.py``): a program run jitted
and eagerly over several trip counts, the check that one symbolic entry
served them all, a differential checker for nested arguments and models,
and the inputs and the program those modules share.
"""

import warnings

import chainer
import chainer.functions as F
import numpy

import chainerjit
from chainerjit import errors
from chainerjit import testing


RTOL, ATOL = 1e-5, 1e-6
LENGTHS = (1, 2, 3, 7, 3)  # first, then a recompile, then hits
SYMBOLIC = (5, 9, 2)  # one entry when the trip count is symbolic


def _a(rng, *shape):
    return rng.standard_normal(shape).astype(numpy.float32)


def _calls(make, lengths, seed=0):
    rng = numpy.random.RandomState(seed)
    return [make(rng, n) for n in lengths]


def _fwd(fn, make, lengths=LENGTHS, rtol=RTOL, atol=ATOL, **kwargs):
    return testing.assert_jit_matches_eager(
        fn, _calls(make, lengths), rtol=rtol, atol=atol, **kwargs)


def _grads(fn, make, lengths=LENGTHS, rtol=RTOL, atol=ATOL, **kwargs):
    return testing.assert_jit_grads_match_eager(
        fn, _calls(make, lengths), rtol=rtol, atol=atol, **kwargs)


def _as_variable_args(make):
    """``make`` with float arrays as Variables: the first iteration then
    records the same ops as the others (no NumPy op on an argument)."""
    def made(rng, n):
        return tuple(chainer.Variable(a) if isinstance(a, numpy.ndarray)
                     and a.dtype.kind == 'f' else a for a in make(rng, n))
    return made


def _one_entry(fn, make, grads=False, lengths=SYMBOLIC):
    """Runs ``lengths`` (distinct trip counts) and checks that one symbolic
    cache entry served them all."""
    jf = chainerjit.jit(fn)
    (_grads if grads else _fwd)(fn, make, lengths, jitted=jf)
    assert jf.cache_info().currsize == 1, jf.cache_report()
    assert jf.cache_info().hits == len(lengths) - 1, jf.cache_report()
    graph = str(jf.cache_entries()[0].graph)
    assert 'trip=T' in graph, graph
    return jf


# --- a differential checker for nested arguments and models -----------------

def _as_variables(obj):
    """Float arrays (also inside lists and tuples) as fresh Variables that
    require grad."""
    if isinstance(obj, numpy.ndarray) and obj.dtype.kind == 'f':
        return chainer.Variable(obj.copy(), requires_grad=True)
    if isinstance(obj, chainer.Variable):
        return chainer.Variable(obj.array.copy(), requires_grad=True)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_as_variables(o) for o in obj)
    return obj


def _variables_in(obj):
    if isinstance(obj, chainer.Variable):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [v for o in obj for v in _variables_in(o)]
    if isinstance(obj, dict):
        return [v for k in sorted(obj) for v in _variables_in(obj[k])]
    return []


def _seeded_backward(result, seed):
    outs = [v for v in _variables_in(result)
            if v.creator is not None and v.dtype.kind == 'f']
    rng = numpy.random.RandomState(seed)
    chainer.backward(outs, [chainer.Variable(
        rng.standard_normal(v.shape).astype(v.dtype)) for v in outs])


def _assert_grads_equal(actual, expected, rtol, atol, what):
    assert (actual is None) == (expected is None), what
    if expected is not None:
        testing.assert_results_equal(actual, expected, rtol, atol)


def _differential(jitted, eager, calls, grads, models=(), rtol=RTOL,
                  atol=ATOL, state=None):
    """Calls ``jitted`` and ``eager`` (twins) on each argument tuple.

    With ``grads``, float arrays become Variables requiring grad and seeded
    random output gradients are backpropagated in both; input gradients
    and, for ``models = (jit model, eager model)``, parameter gradients
    must agree. Without, runs under ``no_backprop_mode``. ``state(model)``
    returns extra values to compare after each call (a link's state).
    """
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        for i, args in enumerate(calls):
            for m in models:
                m.cleargrads()
            if grads:
                jit_args, eager_args = _as_variables(args), \
                    _as_variables(args)
                actual, expected = jitted(*jit_args), eager(*eager_args)
            else:
                with chainer.no_backprop_mode():
                    expected, actual = eager(*args), jitted(*args)
            testing.assert_results_equal(actual, expected, rtol, atol)
            if state is not None:
                testing.assert_results_equal(
                    state(models[0]), state(models[1]), rtol, atol)
            if not grads:
                continue
            _seeded_backward(expected, i)
            _seeded_backward(actual, i)
            for a, e in zip(_variables_in(jit_args),
                            _variables_in(eager_args)):
                _assert_grads_equal(a.grad_var, e.grad_var, rtol, atol,
                                    'input grad, call %d' % i)
            if models:
                jit_params = dict(models[0].namedparams())
                for name, e in sorted(models[1].namedparams()):
                    _assert_grads_equal(jit_params[name].grad_var,
                                        e.grad_var, rtol, atol,
                                        '%s.grad, call %d' % (name, i))
    entries = jitted.cache_entries()
    for entry in entries:
        assert entry.fallback is None, entry.fallback
        if grads:
            assert entry.training is not None, 'no training program'
    assert jitted.cache_info().hits > 0, 'no call ran the program'
    return jitted


def _twins(cls, *args):
    model = cls(*args)
    twin = cls(*args)
    twin.copyparams(model)
    return model, twin


def _model_check(cls, make, grads, lengths=LENGTHS, method='forward',
                 rtol=RTOL, atol=ATOL, state=None, init_args=()):
    model, twin = _twins(cls, *init_args)
    jitted = chainerjit.jit(getattr(model, method))
    return _differential(jitted, getattr(twin, method),
                         _calls(make, lengths), grads, (model, twin),
                         rtol, atol, state)


# --- inputs and a program shared by the modules ------------------------------

def _make_rnn(rng, n):
    return _a(rng, n, 2, 3), _a(rng, 2, 3), _a(rng, 3, 3) * 0.5


def init_in_list(xs, h):
    ys = [h]
    for t in range(len(xs)):
        h = F.tanh(xs[t] + ys[-1])
        ys.append(h)
    return F.stack(ys)


def _make_seq(rng, n):
    return _a(rng, n, 2, 3), _a(rng, 2, 3)


def _make_xs(rng, n):
    return _a(rng, n, 2, 3),


def _make_var_seq(rng, n):
    xs, h = _make_seq(rng, n)
    return chainer.Variable(xs), h


def _make_while(rng, n):
    return _a(rng, 8, 2, 3), _a(rng, 2, 3), n
