"""Differential checks: a function jitted against the same function run
eagerly, outputs (and the arguments left as they were given) or outputs
and the gradients of inputs and parameters (``None`` against an array
included). Shared by the test modules of the passes, gradient stopping,
memory reuse and comprehensions."""

import copy
import warnings

import chainer
import numpy

import chainerjit
from chainerjit import testing


LENGTHS = (3, 3, 5, 1, 8, 8)


def _leaves(result):
    if isinstance(result, (tuple, list)):
        return [leaf for item in result for leaf in _leaves(item)]
    if isinstance(result, dict):
        return [leaf for k in sorted(result) for leaf in _leaves(result[k])]
    return [result]


def _as_variables(args):
    """Float arrays as Variables requiring grad (a copy per run), lists of
    float arrays as lists of such Variables, the rest as it is."""
    def wrap(a):
        if isinstance(a, numpy.ndarray) and a.dtype.kind == 'f':
            return chainer.Variable(a.copy())
        if isinstance(a, list):
            return [wrap(item) for item in a]
        return a
    return [wrap(a) for a in args]


def _input_variables(args):
    return [v for v in _leaves(args) if isinstance(v, chainer.Variable)]


def _run(fn, args, seed, model=None):
    """Runs ``fn`` on Variables and backprops seeded gradients from every
    output that requires grad, all in one ``chainer.backward`` as a loss
    over all of them would. Returns the output arrays, then each input's
    and parameter's gradient (``None`` where there is none)."""
    variables = _as_variables(args)
    if model is not None:
        model.cleargrads()
    result = fn(*variables)
    outs = [v for v in _leaves(result) if isinstance(v, chainer.Variable)]
    rng = numpy.random.RandomState(seed)
    grads = [rng.standard_normal(v.shape).astype(v.dtype) for v in outs]
    pairs = [(v, chainer.Variable(g)) for v, g in zip(outs, grads)
             if v.requires_grad and v.dtype.kind == 'f']
    if pairs:
        chainer.backward([v for v, _ in pairs], [g for _, g in pairs])
    values = [chainer.as_array(v).copy() for v in _leaves(result)
              if isinstance(v, (chainer.Variable, numpy.ndarray))]
    grads = [None if v.grad is None else v.grad.copy()
             for v in _input_variables(variables)]
    if model is not None:
        grads += [None if p.grad is None else p.grad.copy()
                  for _, p in sorted(model.namedparams())]
    return values, grads


def _same(actual, expected, what, rtol=1e-4, atol=1e-5):
    assert len(actual) == len(expected), what
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert (a is None) == (e is None), '%s %d: jit %s, eager %s' % (
            what, i, 'None' if a is None else 'array',
            'None' if e is None else 'array')
        if e is not None:
            assert a.shape == e.shape and a.dtype == e.dtype, (what, i)
            numpy.testing.assert_allclose(a, e, rtol=rtol, atol=atol,
                                          err_msg='%s %d' % (what, i))


def check_grads(fn, calls, model=None, method=None, fallback_ok=False,
                rtol=1e-4, atol=1e-5):
    """``jit(fn)`` against ``fn`` with backprop: outputs, gradients of the
    inputs and (with ``model``, whose ``method`` is jitted on a deep copy)
    of the parameters, None-vs-array included."""
    if model is not None:
        twin = copy.deepcopy(model)
        eager = getattr(model, method)
        jitted = chainerjit.jit(getattr(twin, method))
    else:
        twin, eager, jitted = None, fn, chainerjit.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.errors.LoopWarning)
        if fallback_ok:
            warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        else:
            warnings.simplefilter('error', chainerjit.FallbackWarning)
        for i, args in enumerate(calls):
            e_values, e_grads = _run(eager, args, i, model)
            j_values, j_grads = _run(jitted, args, i, twin)
            _same(j_values, e_values, 'call %d output' % i, rtol, atol)
            _same(j_grads, e_grads, 'call %d grad' % i, rtol, atol)
    if not fallback_ok:
        assert all(e.fallback is None for e in jitted.cache_entries())
        assert jitted.cache_info().hits > 0
    return jitted


def arrays(rng, *shapes, n=3, dtype=numpy.float32):
    return [tuple(rng.standard_normal(s).astype(dtype) for s in shapes)
            for _ in range(n)]


def sequences(rng, *rest, lengths=LENGTHS):
    """One call per length: a (T, 2, 4) array, then ``rest`` as given."""
    return [(rng.standard_normal((t, 2, 4)).astype(numpy.float32),) + rest
            for t in lengths]


def rand(rng, *shape, dtype=numpy.float32):
    return rng.standard_normal(shape).astype(dtype)


def check_unchanged(fn, calls, **kw):
    """Like assert_jit_matches_eager, and the arguments stay as given."""
    originals = [tuple(a.copy() for a in call) for call in calls]
    jitted = testing.assert_jit_matches_eager(fn, calls, **kw)
    for call, original in zip(calls, originals):
        for a, b in zip(call, original):
            numpy.testing.assert_array_equal(a, b)
    return jitted


def check_seeded(model, calls, twin=None, jitted=None, **options):
    """``jit(model.forward, **options)`` of a twin (or ``jitted``, the
    forward of ``twin`` jitted) against ``model.forward``, each call seeded
    alike: losses, parameters' gradients (``None`` where a parameter gets
    none), and as many random numbers drawn."""
    if jitted is None:
        twin = copy.deepcopy(model)
        jitted = chainerjit.jit(twin.forward, **options)
    for seed, args in enumerate(calls):
        losses, grads, next_draws = [], [], []
        for m, forward in ((model, model.forward), (twin, jitted)):
            numpy.random.seed(seed)
            m.cleargrads()
            loss = forward(*args)
            loss.backward()
            losses.append(loss.array)
            grads.append([p.grad for _, p in sorted(m.namedparams())])
            next_draws.append(numpy.random.rand())  # as many draws made
        chainerjit.testing.assert_results_equal(losses[1], losses[0])
        for a, e in zip(*grads):
            assert (a is None) == (e is None), (a, e)
            if e is not None:
                numpy.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
        assert next_draws[0] == next_draws[1]
    return jitted


def check_on_arrays(model, calls, rtol=1e-4, atol=1e-5):
    """``jit(twin.forward)`` of a copy of ``model`` against
    ``model.forward``, given the arguments as they are (NumPy arrays, not
    Variables: NumPy code of the forward runs on them): outputs, and
    parameters' gradients of a weighted sum of the output."""
    twin = copy.deepcopy(model)
    jitted = chainerjit.jit(twin.forward)
    for k, args in enumerate(calls):
        results = []
        for forward, owner in ((model.forward, model), (jitted, twin)):
            owner.cleargrads()
            y = forward(*args)
            weights = numpy.arange(y.size, dtype=y.dtype).reshape(y.shape)
            chainer.functions.sum(y * weights).backward()
            results.append(([y.array], [p.grad for _, p in sorted(
                owner.namedparams())]))
        (expected, e_grads), (actual, j_grads) = results
        _same(actual, expected, 'call %d output' % k, rtol, atol)
        _same(j_grads, e_grads, 'call %d grad' % k, rtol, atol)
    return jitted
