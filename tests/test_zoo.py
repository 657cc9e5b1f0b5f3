"""A zoo of Chainer models, jitted, against eager Chainer.

Every case (``tests/zoo_cases.py``, its models in ``tests/zoo_models.py``)
builds one model, copies it (identical parameters and persistents), jits
the copy's ``forward`` and calls both with the same fresh inputs: several
calls per input signature, at least two signatures. After every call the
outputs, ``chainer.report`` values, raised exception types and the whole
state of both models (parameters, persistents, array and Python attributes
of every link) must agree. A case may fall back to eager mode only where
it says so (``fallback_ok``); the summary of compiled and fallen-back
cases is printed at the end of the module. ``test_zoo_training.py``
compares states and results with the helpers here.
"""

import collections
import copy
import warnings

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from tests import summaries
from tests.zoo_cases import _split
from tests.zoo_cases import CASES


# ----------------------------------------------------------------------
# The harness


SUMMARY = collections.OrderedDict()


@pytest.fixture(scope='module', autouse=True)
def _print_summary(request):
    yield
    summaries.write_after_module(request, SUMMARY, _write_summary)


def _write_summary(tr):
    done = {n: s for n, s in SUMMARY.items() if 'entries' in s}
    fell = [n for n, s in done.items() if s['eager'] or s['warnings']]
    no_hits = [n for n, s in done.items() if not s['hits']]
    tr.write_line('')
    tr.write_line(
        'test_zoo: %d cases; %d ran to the end: %d fully compiled, %d '
        'with a fallback, %d never hit the cache; %d failed (bugs, '
        'xfail)' % (len(SUMMARY), len(done), len(done) - len(fell),
                    len(fell), len(no_hits), len(SUMMARY) - len(done)))
    for name in fell:
        s = done[name]
        tr.write_line('  fallback %s: %d/%d entries eager; warning: %s' % (
            name, s['eager'], s['entries'],
            '; '.join(sorted(set(s['warnings'])))[:200]))
    for name in no_hits:
        s = done[name]
        tr.write_line('  no hits %s: %d entries, %d eager' % (
            name, s['entries'], s['eager']))


def _value(v):
    """A comparable snapshot of an attribute value."""
    if isinstance(v, chainer.Parameter):
        return ('param', None if v.array is None else v.array.copy(),
                None if v.grad is None else v.grad.copy())
    if isinstance(v, chainer.Variable):
        return ('var', None if v.array is None else v.array.copy())
    if isinstance(v, numpy.ndarray):
        return ('arr', v.copy())
    if isinstance(v, (bool, int, float, str, type(None), numpy.generic)):
        return ('py', v)
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [_value(x) for x in v])
    if isinstance(v, dict):
        return ('dict', {k: _value(x) for k, x in v.items()})
    if isinstance(v, chainer.Link):
        return ('link', type(v).__name__)
    return ('obj', type(v).__name__)


def _state(model):
    state = {}
    for path, link in model.namedlinks():
        for k, v in vars(link).items():
            if k in ('forward', '_children'):
                continue
            if k.startswith('_') and k not in ('_persistent', '_params'):
                continue
            if k in ('_persistent', '_params'):
                v = sorted(v)
            state[path + '/' + k] = _value(v)
    return state


def _assert_values_equal(a, e, where, rtol, atol):
    assert a[0] == e[0], '%s: %r vs eager %r' % (where, a[0], e[0])
    if a[0] == 'param':
        _assert_values_equal(('arr', a[1]), ('arr', e[1]), where, rtol,
                             atol)
        _assert_values_equal(('arr', a[2]), ('arr', e[2]), where + '.grad',
                             rtol, atol)
    elif a[0] in ('var', 'arr'):
        if e[1] is None or a[1] is None:
            assert a[1] is None and e[1] is None, where
            return
        assert a[1].shape == e[1].shape, '%s: shape %s vs eager %s' % (
            where, a[1].shape, e[1].shape)
        assert a[1].dtype == e[1].dtype, where
        numpy.testing.assert_allclose(a[1], e[1], rtol=rtol, atol=atol,
                                      err_msg=where)
    elif a[0] in ('list', 'tuple'):
        assert len(a[1]) == len(e[1]), where
        for i, (x, y) in enumerate(zip(a[1], e[1])):
            _assert_values_equal(x, y, '%s[%d]' % (where, i), rtol, atol)
    elif a[0] == 'dict':
        assert sorted(a[1]) == sorted(e[1]), where
        for k in a[1]:
            _assert_values_equal(a[1][k], e[1][k], '%s[%r]' % (where, k),
                                 rtol, atol)
    else:
        assert type(a[1]) is type(e[1]) and (
            a[1] == e[1] or a[1] != a[1] and e[1] != e[1]), (
            '%s: %r vs eager %r' % (where, a[1], e[1]))


def _assert_states_equal(actual, expected, rtol, atol, when):
    assert sorted(actual) == sorted(expected), (
        '%s: attributes differ: %s' % (when, sorted(
            set(actual).symmetric_difference(expected))))
    for k in expected:
        _assert_values_equal(actual[k], expected[k], '%s: %s' % (when, k),
                             rtol, atol)


def _call(model, args, kwargs, seed):
    reporter = chainer.Reporter()
    reporter.add_observer('main', model)
    reporter.add_observers('main', model.namedlinks(skipself=True))
    observation = {}
    numpy.random.seed(seed)
    with reporter.scope(observation):
        try:
            out = model(*args, **kwargs)
        except Exception as e:
            return None, observation, e
    rng_state = numpy.random.get_state()
    observation['(numpy.random position)'] = (
        rng_state[2], int(rng_state[1].sum()))
    return out, observation, None


def _variables(out):
    if isinstance(out, chainer.Variable):
        return [out]
    if isinstance(out, (list, tuple)):
        return [v for o in out for v in _variables(o)]
    if isinstance(out, dict):
        return [v for k in sorted(out) for v in _variables(out[k])]
    return []


def _outputs_snapshot(out):
    return [(type(v).__name__, v.requires_grad, v.array.copy())
            for v in _variables(out)]


def _arrays(out):
    if isinstance(out, chainer.Variable):
        return [out.array]
    if isinstance(out, numpy.ndarray):
        return [out]
    if isinstance(out, (list, tuple)):
        return [a for o in out for a in _arrays(o)]
    if isinstance(out, dict):
        return [a for k in sorted(out) for a in _arrays(out[k])]
    return []


def _scribble(out):
    """Changes every output array in place, as a user might."""
    for a in _arrays(out):
        if a.dtype.kind == 'f' and a.ndim:
            a *= 0.5


def run_case(c):
    rng = numpy.random.RandomState(0)
    numpy.random.seed(0)
    fallbacks = []
    with chainer.using_config('train', c.train), \
            chainer.no_backprop_mode(), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always', chainerjit.FallbackWarning)
        model = c.build()
        if c.warmup:
            args, kwargs = _split(c.sigs[0](rng))
            numpy.random.seed(12345)
            model(*args, **kwargs)
        jmodel = copy.deepcopy(model)
        jmodel.forward = chainerjit.jit(jmodel.forward)
        _assert_states_equal(_state(jmodel), _state(model), 0, 0, 'copy')
        kept = []
        for s, make in enumerate(c.sigs):
            for i in range(c.n_calls):
                args, kwargs = _split(make(rng))
                jargs, jkwargs = copy.deepcopy((args, kwargs))
                seed = 1000 + 10 * s + i
                when = '%s sig %d call %d' % (c.name, s, i)
                with chainer.using_config('enable_backprop', c.backprop):
                    e_out, e_obs, e_exc = _call(model, args, kwargs, seed)
                    j_out, j_obs, j_exc = _call(jmodel, jargs, jkwargs,
                                                seed)
                if c.backprop and e_exc is None and j_exc is None:
                    F.sum(_variables(e_out)[0]).backward()
                    F.sum(_variables(j_out)[0]).backward()
                if e_exc is not None or j_exc is not None:
                    assert type(j_exc) is type(e_exc), (
                        '%s: raised %r, eager raised %r' % (
                            when, j_exc, e_exc))
                else:
                    testing.assert_results_equal(j_out, e_out, c.rtol,
                                                 c.atol)
                    for a, e in zip(_outputs_snapshot(j_out),
                                    _outputs_snapshot(e_out)):
                        assert a[:2] == e[:2], '%s: output %s vs eager %s' % (
                            when, a[:2], e[:2])
                    kept.append((when, _outputs_snapshot(j_out), j_out))
                assert sorted(j_obs) == sorted(e_obs), when
                for k in e_obs:
                    _assert_values_equal(
                        _value(j_obs[k]), _value(e_obs[k]),
                        '%s: report %s' % (when, k), c.rtol, c.atol)
                _assert_states_equal(_state(jmodel), _state(model), c.rtol,
                                     c.atol, when)
                if c.hook is not None:
                    c.hook(model, s, i)
                    c.hook(jmodel, s, i)
                if c.scribble and e_exc is None:
                    _scribble(e_out)
                    _scribble(j_out)
                    _assert_states_equal(_state(jmodel), _state(model),
                                         c.rtol, c.atol, when + ' scribbled')
        if not c.scribble:
            # Later calls must not overwrite the arrays returned earlier.
            for when, snapshot, out in kept:
                for (_, _, old), (_, _, now) in zip(
                        snapshot, _outputs_snapshot(out)):
                    numpy.testing.assert_array_equal(
                        now, old, err_msg=when + ' changed by later calls')
    for w in caught:
        if issubclass(w.category, chainerjit.FallbackWarning):
            fallbacks.append(str(w.message).splitlines()[0])
    entries = jmodel.forward.cache_entries()
    eager = [e.fallback for e in entries if e.fallback is not None]
    SUMMARY[c.name] = dict(
        entries=len(entries), hits=jmodel.forward.cache_info().hits,
        eager=len(eager), warnings=fallbacks)
    if not c.fallback_ok and not c.backprop:
        assert not eager and not fallbacks, (
            '%s fell back: %s' % (c.name, eager + fallbacks))
        assert jmodel.forward.cache_info().hits > 0, c.name
    return jmodel


def _params():
    for c in CASES:
        marks = ()
        if c.xfail:
            marks = (pytest.mark.xfail(strict=True, reason=c.xfail),)
        yield pytest.param(c, id=c.name, marks=marks)


@pytest.mark.parametrize('c', list(_params()))
def test_zoo(c):
    SUMMARY[c.name] = {}
    run_case(c)


@pytest.mark.parametrize('c', list(_params()))
def test_zoo_in_onnxruntime(c, monkeypatch):
    """The zoo with ``jit(backend='onnxruntime')``: programs that convert
    run in onnxruntime, the rest stay on the VM; the same checks."""
    pytest.importorskip('onnxruntime')
    if c.fallback_ok:
        # Python numbers read from arrays onnxruntime computed differ in
        # their last digits, and the zoo compares them exactly.
        pytest.skip('reads array values into Python numbers')
    monkeypatch.setenv('CHAINERJIT_BACKEND', 'onnxruntime')
    # The one-time warnings the case expects were given by test_zoo.
    monkeypatch.setattr(errors, '_warned', set())
    run_case(c)
