"""The zoo of tests/test_zoo.py, trained: jitted against eager Chainer
with backprop enabled.

Every case of ``zoo_cases.CASES`` builds one model, copies it, jits the
copy's ``forward`` and trains both twins side by side with
``MomentumSGD``: at least three steps per input signature (the first two
signatures), each a forward with backprop enabled (``numpy.random``
reseeded identically before each side, for dropout), a scalar loss (the
sum of squares of every float output Variable), ``loss.backward()`` and an
update. After every step the losses, outputs, the gradients of every
parameter and of the input Variables, the reports, the position of
NumPy's global generator and the whole state of both models (parameters
after the update, persistents such as batch-normalization statistics,
link attributes) must agree, and so must the outputs' ``requires_grad``
(checked at the end of the case). In the first signature the float array
arguments are passed as Variables that require grad; in the second as
arrays (gradients of the parameters only).

A case may fall back to eager mode (with a ``FallbackWarning``) only where
test_zoo allows it (``fallback_ok``); every other case must run compiled
training programs. The module prints how many cases did which.

Further tests: gradients accumulating over two steps without
``cleargrads`` and ``backward(retain_grad=True)`` (the outputs'
gradients compared too), on a subset of the zoo; truncated BPTT through
the stateful LSTM with ``unchain_backward``, batch-normalization
statistics in training mode, the outputs of a jitted forward used twice
in a loss; and minimal reproducers of the bugs found.
"""

import collections
import copy
import types
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests import summaries
from tests.test_zoo import _assert_states_equal
from tests.test_zoo import _assert_values_equal
from tests.test_zoo import _call
from tests.test_zoo import _scribble
from tests.test_zoo import _state
from tests.test_zoo import _value
from tests.test_zoo import _variables
from tests.zoo_cases import _split
from tests.zoo_cases import CASES
from tests.zoo_models import _rand
from tests.zoo_models import ResBlock
from tests.zoo_models import Seq
from tests.zoo_models import StatefulLSTM


# Cases that only test inference-specific behaviour: nothing about them is
# trained that another case does not train already.
SKIP = {
    # Written for the eager path that backprop calls took before training
    # was compiled; the same model trains here as resnet_block_train.
    'backprop_enabled_eager_path':
        'inference-era check of the eager backprop path; trained as '
        'resnet_block_train',
}

# Cases whose float array arguments are Variables in every signature, not
# only the first: eager Chainer 7.8.1 itself crashes in
# Deconvolution2DFunction.backward (``_set_cover_all(x, W)`` is given
# Variables, not shapes) when the input does not require grad.
VARIABLES_ONLY = {'deconv2d', 'deconv2d_outsize'}

XFAIL = {}

# Cases trained with gradients accumulated over two steps.
ACCUMULATE = {'conv2d_dilate_groups', 'bilinear', 'embed_id_ignore_label',
              'nstep_lstm', 'batchnorm_train', 'resnet_block_train',
              'vgg_like', 'dropout_train', 'classifier', 'matmuls',
              'losses_ignore_label', 'prelu_scale_bias'}

_INNER = ('known limit: with retain_grad=True, the .grad of an output '
          'that the forward also uses internally lacks the internal '
          'uses\' gradient (eager: the total gradient)')

# Cases trained with ``loss.backward(retain_grad=True)``, comparing the
# outputs' gradients too.
RETAIN_GRAD = {'vgg_like', 'classifier', 'bilinear', 'nstep_lstm',
               'batchnorm_train', 'lstm_stateful', 'stateful_gru',
               'attention_where_mask', 'dict_tuple_python_values',
               'list_loop', 'aliased_outputs'}
RETAIN_GRAD_XFAIL = {
    'attention_where_mask': _INNER,
    'dict_tuple_python_values': _INNER,
}

SUMMARY = collections.OrderedDict()


@pytest.fixture(scope='module', autouse=True)
def _print_summary(request):
    yield
    summaries.write_after_module(request, SUMMARY, _write_summary)


def _write_summary(tr):
    done = {n: s for n, s in SUMMARY.items() if 'entries' in s}
    compiled = [n for n, s in done.items() if s['trained']]
    fell = [n for n, s in done.items() if s['eager'] or s['warnings']]
    neither = [n for n in done if n not in compiled and n not in fell]
    failed = [n for n, s in SUMMARY.items() if not s.get('ok')]
    tr.write_line('')
    tr.write_line(
        'test_zoo_training: %d cases, %d skipped; %d trained to the end: '
        '%d ran compiled training programs, %d fell back (warning), %d '
        'neither (a miss every call); %d failed (bugs, xfail): %s' % (
            len(CASES), len(SKIP), len(done), len(compiled), len(fell),
            len(neither), len(failed), ', '.join(failed)))
    for name in fell:
        s = done[name]
        tr.write_line('  fallback %s: %d/%d entries eager, %d trained; '
                      'warning: %s' % (
                          name, s['eager'], s['entries'], s['trained'],
                          '; '.join(sorted(set(s['warnings'])))[:200]))
    for name in neither:
        s = done[name]
        tr.write_line('  no training program hit %s: %d entries, %d hits'
                      % (name, s['entries'], s['hits']))


# ----------------------------------------------------------------------
# The harness


def _as_variables(obj, found):
    """``obj`` with every float array made a Variable that requires grad;
    every Variable of the result is appended to ``found``."""
    if isinstance(obj, numpy.ndarray) and obj.dtype.kind == 'f':
        obj = chainer.Variable(obj, requires_grad=True)
    if isinstance(obj, chainer.Variable):
        found.append(obj)
        return obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(_as_variables(x, found) for x in obj)
    if isinstance(obj, dict):
        return {k: _as_variables(obj[k], found) for k in obj}
    return obj


def _inputs(args, kwargs, make_variables):
    found = []
    if make_variables:
        args, kwargs = _as_variables((args, kwargs), found)
    else:
        _collect((args, kwargs), found)
    return args, kwargs, found


def _collect(obj, found):
    if isinstance(obj, chainer.Variable):
        found.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _collect(x, found)
    elif isinstance(obj, dict):
        for k in sorted(obj):
            _collect(obj[k], found)
    return obj


def _float_outputs(out):
    return [v for v in _variables(out) if v.dtype.kind == 'f']


def _loss(out):
    """The sum of squares of every float output Variable (``None`` if
    there is none)."""
    terms = [F.sum(v * v) for v in _float_outputs(out)]
    if not terms:
        return None
    loss = terms[0]
    for t in terms[1:]:
        loss = loss + F.cast(t, loss.dtype)
    return loss


def _grad_snapshot(variables):
    return [None if v.grad is None else v.grad.copy() for v in variables]


def _assert_grads_equal(actual, expected, where, rtol, atol):
    assert len(actual) == len(expected), where
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert (a is None) == (e is None), '%s[%d]: grad %s vs eager %s' % (
            where, i, 'None' if a is None else 'array',
            'None' if e is None else 'array')
        if e is not None:
            _assert_values_equal(('arr', a), ('arr', e), '%s[%d]' % (
                where, i), rtol, atol)


def _fresh(make):
    """A copy of the signature function ``make`` whose closure's iterators
    (``zoo_models._ids_seq`` draws from one) are copies, so that every run,
    in any order after test_zoo, sees the same values."""
    if not make.__closure__ or not any(
            hasattr(cell.cell_contents, '__next__')
            for cell in make.__closure__):
        return make
    cells = tuple(
        types.CellType(copy.copy(cell.cell_contents))
        if hasattr(cell.cell_contents, '__next__') else cell
        for cell in make.__closure__)
    return types.FunctionType(make.__code__, make.__globals__,
                              make.__name__, make.__defaults__, cells)


# Taken at collection, before any test draws from the iterators.
_SIGS = {c.name: [_fresh(make) for make in c.sigs] for c in CASES}


def _twins(c, rng):
    model = c.build()
    if c.warmup:  # initializes lazy parameters, as in test_zoo
        args, kwargs = _split(c.sigs[0](rng))
        numpy.random.seed(12345)
        with chainer.no_backprop_mode():
            model(*args, **kwargs)
    jmodel = copy.deepcopy(model)
    jmodel.forward = chainerjit.jit(jmodel.forward)
    _assert_states_equal(_state(jmodel), _state(model), 0, 0, 'copy')
    return model, jmodel


def _optimizer(model):
    opt = chainer.optimizers.MomentumSGD(lr=0.01)
    opt.setup(model)
    return opt


def _step(model, opt, args, kwargs, inputs, seed, clear=True, update=True,
          retain_grad=False):
    """One training step: forward, loss, backward and update. Returns what
    the comparison needs."""
    if clear:
        model.cleargrads()
        for v in inputs:
            v.cleargrad()
    out, obs, exc = _call(model, args, kwargs, seed)
    step = dict(out=out, obs=obs, exc=exc, loss=None)
    if exc is not None:
        return step
    loss = _loss(out)
    if loss is not None:
        loss.backward(retain_grad=retain_grad)
        step['loss'] = float(loss.array)
    if retain_grad:
        step['out_grads'] = _grad_snapshot(_float_outputs(out))
    step['in_grads'] = _grad_snapshot(inputs)
    step['state_after_backward'] = _state(model)
    if update:
        opt.update()
    return step


def _compare_steps(j, e, model, jmodel, when, rtol, atol, flags):
    """Asserts two steps agree; differences in the outputs'
    ``requires_grad`` are appended to ``flags`` (checked at the end)."""
    if e['exc'] is not None or j['exc'] is not None:
        assert type(j['exc']) is type(e['exc']), (
            '%s: raised %r, eager raised %r' % (when, j['exc'], e['exc']))
    else:
        testing.assert_results_equal(j['out'], e['out'], rtol, atol)
        for k, (a, b) in enumerate(zip(_variables(j['out']),
                                       _variables(e['out']))):
            if a.requires_grad != b.requires_grad:
                flags.append('%s: output %d requires_grad %s, eager %s' % (
                    when, k, a.requires_grad, b.requires_grad))
        assert (j['loss'] is None) == (e['loss'] is None), when
        if e['loss'] is not None:
            numpy.testing.assert_allclose(j['loss'], e['loss'], rtol=rtol,
                                          atol=atol, err_msg=when + ' loss')
        if 'out_grads' in e:  # with retain_grad
            _assert_grads_equal(j['out_grads'], e['out_grads'],
                                when + ': output grad', rtol, atol)
        _assert_grads_equal(j['in_grads'], e['in_grads'],
                            when + ': input grad', rtol, atol)
        _assert_states_equal(j['state_after_backward'],
                             e['state_after_backward'], rtol, atol,
                             when + ' after backward')
    assert sorted(j['obs']) == sorted(e['obs']), when
    for k in e['obs']:
        _assert_values_equal(_value(j['obs'][k]), _value(e['obs'][k]),
                             '%s: report %s' % (when, k), rtol, atol)
    _assert_states_equal(_state(jmodel), _state(model), rtol, atol,
                         when + ' after update')


def _fallback_messages(caught):
    return [str(w.message).splitlines()[0] for w in caught
            if issubclass(w.category, chainerjit.FallbackWarning)]


def _record(name, jmodel, caught):
    entries = jmodel.forward.cache_entries()
    stats = dict(
        entries=len(entries), hits=jmodel.forward.cache_info().hits,
        eager=sum(e.fallback is not None for e in entries),
        trained=sum(e.training is not None and e.hits > 0
                    for e in entries),
        warnings=_fallback_messages(caught))
    if name is not None:
        SUMMARY[name] = stats
    return stats


def run_training_case(c, accumulate=False, retain_grad=False,
                      record=False):
    """Trains both twins of case ``c`` side by side. With ``accumulate``,
    gradients are cleared and applied every second step only (they add up
    over two steps); with ``retain_grad``, the outputs' gradients are
    compared too. With ``record``, the summary counts it."""
    rng = numpy.random.RandomState(0)
    numpy.random.seed(0)
    n_calls = max(3, c.n_calls)
    c = c._replace(sigs=[_fresh(make) for make in _SIGS[c.name]])
    with chainer.using_config('train', c.train), \
            chainer.using_config('enable_backprop', True), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always', chainerjit.FallbackWarning)
        model, jmodel = _twins(c, rng)
        opt, jopt = _optimizer(model), _optimizer(jmodel)
        kept, flags = [], []
        for s, make in enumerate(c.sigs[:2]):
            for i in range(n_calls):
                args, kwargs = _split(make(rng))
                jargs, jkwargs = copy.deepcopy((args, kwargs))
                as_vars = s == 0 or c.name in VARIABLES_ONLY
                args, kwargs, inputs = _inputs(args, kwargs, as_vars)
                jargs, jkwargs, jinputs = _inputs(jargs, jkwargs, as_vars)
                seed = 1000 + 10 * s + i
                when = '%s sig %d step %d' % (c.name, s, i)
                how = dict(clear=not accumulate or i % 2 == 0,
                           update=not accumulate or i % 2 == 1,
                           retain_grad=retain_grad)
                e = _step(model, opt, args, kwargs, inputs, seed, **how)
                j = _step(jmodel, jopt, jargs, jkwargs, jinputs, seed,
                          **how)
                _compare_steps(j, e, model, jmodel, when, c.rtol, c.atol,
                               flags)
                if e['exc'] is None:
                    kept.append((when, e['out'], j['out']))
                if c.hook is not None:
                    c.hook(model, s, i)
                    c.hook(jmodel, s, i)
                if c.scribble and e['exc'] is None:
                    _scribble(e['out'])
                    _scribble(j['out'])
                    _assert_states_equal(_state(jmodel), _state(model),
                                         c.rtol, c.atol, when + ' scribbled')
        # Outputs returned earlier change later (a view of a parameter
        # updated in place) exactly where eager's do.
        for when, e_out, j_out in kept:
            testing.assert_results_equal(j_out, e_out, c.rtol, c.atol)
    stats = _record(c.name if record else None, jmodel, caught)
    assert not flags, flags
    if not c.fallback_ok:
        assert not stats['eager'] and not stats['warnings'], (
            '%s fell back: %s' % (c.name, stats['warnings']))
        assert stats['trained'], (
            '%s: no compiled training program ran\n%s' % (
                c.name, jmodel.forward.cache_report()))
    return jmodel


def _params(names=None, xfail=XFAIL):
    for c in CASES:
        if names is not None and c.name not in names:
            continue
        marks = ()
        if c.name in SKIP:
            marks = (pytest.mark.skip(reason=SKIP[c.name]),)
        elif c.name in xfail:
            marks = (pytest.mark.xfail(strict=True, reason=xfail[c.name]),)
        yield pytest.param(c, id=c.name, marks=marks)


@pytest.mark.parametrize('c', list(_params()))
def test_zoo_training(c):
    SUMMARY[c.name] = {}
    run_training_case(c, record=True)
    SUMMARY[c.name]['ok'] = True


@pytest.mark.parametrize('c', list(_params(ACCUMULATE)))
def test_zoo_gradients_accumulate_over_two_steps(c):
    run_training_case(c, accumulate=True)


@pytest.mark.parametrize('c', list(_params(
    RETAIN_GRAD, xfail=RETAIN_GRAD_XFAIL)))
def test_zoo_retain_grad(c):
    run_training_case(c, retain_grad=True)


# ----------------------------------------------------------------------
# Patterns of training loops


def _lstm_twins():
    numpy.random.seed(0)
    model = StatefulLSTM()
    jmodel = copy.deepcopy(model)
    jmodel.forward = chainerjit.jit(jmodel.forward)
    return model, jmodel


def _assert_twins_equal(model, jmodel, when, rtol=1e-4, atol=1e-5):
    _assert_states_equal(_state(jmodel), _state(model), rtol, atol, when)


def _assert_trained(jmodel):
    entries = jmodel.forward.cache_entries()
    assert any(e.training is not None and e.hits for e in entries), (
        jmodel.forward.cache_report())
    assert not any(e.fallback for e in entries)


def test_truncated_bptt_with_unchain_backward():
    """The stateful LSTM fed one step at a time; every second step the
    summed loss is backpropagated, the graph cut with
    ``unchain_backward`` and the parameters updated. Then the state is
    reset and training goes on with another batch size."""
    model, jmodel = _lstm_twins()
    rng = numpy.random.RandomState(0)
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.FallbackWarning)
        sides = [[m, _optimizer(m), 0] for m in (model, jmodel)]
        for batch in (3, 2):
            for m, _, _ in sides:
                m.reset_state()
            for step in range(8):
                x = _rand(rng, batch, 3)
                losses = []
                for side in sides:
                    m, opt, _ = side
                    y = m(chainer.Variable(x.copy()))
                    side[2] = side[2] + F.sum(y * y)
                    losses.append(float(side[2].array))
                    if step % 2 == 1:
                        m.cleargrads()
                        side[2].backward()
                        side[2].unchain_backward()
                        opt.update()
                        side[2] = 0
                when = 'batch %d step %d' % (batch, step)
                numpy.testing.assert_allclose(losses[1], losses[0],
                                              rtol=1e-4, err_msg=when)
                _assert_twins_equal(model, jmodel, when)
                assert (jmodel.lstm.h.creator is None) == (
                    model.lstm.h.creator is None)
    _assert_trained(jmodel)


def test_batch_normalization_statistics_in_training_mode():
    numpy.random.seed(0)
    model = ResBlock()
    jmodel = copy.deepcopy(model)
    jmodel.forward = chainerjit.jit(jmodel.forward)
    rng = numpy.random.RandomState(0)
    opts = [_optimizer(m) for m in (model, jmodel)]
    with chainer.using_config('train', True), warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.FallbackWarning)
        for step in range(6):
            x = _rand(rng, 2 + step % 2, 4, 3, 3)
            for m, opt in zip((model, jmodel), opts):
                m.cleargrads()
                F.sum(F.square(m(x.copy()))).backward()
                opt.update()
            for bn in ('b1', 'b2'):
                for name in ('avg_mean', 'avg_var', 'N'):
                    numpy.testing.assert_allclose(
                        getattr(getattr(jmodel, bn), name),
                        getattr(getattr(model, bn), name), rtol=1e-5,
                        atol=1e-6, err_msg='step %d %s.%s' % (
                            step, bn, name))
            _assert_twins_equal(model, jmodel, 'step %d' % step)
    _assert_trained(jmodel)


def test_outputs_used_twice_in_the_loss():
    """Each output feeds the loss twice (and a tuple's outputs are mixed),
    and the output of one jitted call is the input of the next."""
    def forward(m, x):
        h = m.fc(x)
        return h, F.tanh(h)

    numpy.random.seed(0)
    model = Seq(forward, fc=L.Linear(4, 4))
    jmodel = copy.deepcopy(model)
    jmodel.forward = chainerjit.jit(jmodel.forward)
    rng = numpy.random.RandomState(0)
    opts = [_optimizer(m) for m in (model, jmodel)]
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.FallbackWarning)
        for step in range(4):
            x = _rand(rng, 3, 4)
            grads, losses = [], []
            for m, opt in zip((model, jmodel), opts):
                m.cleargrads()
                xv = chainer.Variable(x.copy())
                h, t = m(xv)
                h2, t2 = m(t)  # the output of one call into the next
                loss = F.sum(h * h) + F.sum(h * t) + F.sum(F.exp(t)) + \
                    F.sum(h2 * t) + F.sum(t2 * h2 * h)
                loss.backward()
                opt.update()
                grads.append(xv.grad)
                losses.append(float(loss.array))
            numpy.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
            numpy.testing.assert_allclose(grads[1], grads[0], rtol=1e-5,
                                          atol=1e-6)
            _assert_twins_equal(model, jmodel, 'step %d' % step, 1e-5,
                                1e-6)
    _assert_trained(jmodel)


# ----------------------------------------------------------------------
# Minimal reproducers of the bugs the zoo found


def _eager_and_jitted(f):
    """``f``, then ``jit(f)`` twice (the first jitted call records, the
    second runs the compiled training program)."""
    jf = chainerjit.jit(f)
    return [('eager', f), ('recording', jf), ('compiled', jf)]


def test_stale_output_grad_is_not_backpropagated_again():
    results = {}
    for name, fn in _eager_and_jitted(lambda x: (x * 3, x * 2)):
        x = chainer.Variable(numpy.ones(2, numpy.float32))
        y, h = fn(x)
        F.sum(y).backward(retain_grad=True)  # leaves y.grad = 1
        x.cleargrad()
        F.sum(h).backward()  # reaches the call through h only
        results[name] = x.grad
    numpy.testing.assert_array_equal(results['eager'], [2, 2])
    numpy.testing.assert_array_equal(results['compiled'], [2, 2])


@pytest.mark.xfail(strict=True, reason=_INNER)
def test_retained_grad_of_an_output_used_inside_the_forward():
    def f(x):
        a = x * 1.5
        return a, a * 3  # a is returned and used again

    results = {}
    for name, fn in _eager_and_jitted(f):
        x = chainer.Variable(numpy.ones(2, numpy.float32))
        a, b = fn(x)
        (F.sum(a) + F.sum(b)).backward(retain_grad=True)
        results[name] = a.grad, x.grad
    numpy.testing.assert_array_equal(results['eager'][0], [4, 4])
    numpy.testing.assert_array_equal(results['compiled'][1], [6, 6])
    numpy.testing.assert_array_equal(results['compiled'][0], [4, 4])


def test_argmax_next_to_a_gradient_does_not_fall_back():
    jf = chainerjit.jit(lambda x: (F.tanh(x), F.argmax(x, axis=1)))
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.FallbackWarning)
        for _ in range(2):
            x = chainer.Variable(numpy.ones((2, 3), numpy.float32))
            y, _ = jf(x)
            F.sum(y).backward()
    entry, = jf.cache_entries()
    assert entry.training is not None and entry.hits == 1


def test_output_that_needs_no_gradient_does_not_require_grad():
    flags = {}
    for name, fn in _eager_and_jitted(lambda x, y: (x * 2, F.tanh(y))):
        x = chainer.Variable(numpy.ones(2, numpy.float32))
        _, b = fn(x, numpy.ones(2, numpy.float32))
        flags[name] = b.requires_grad
    assert flags == {'eager': False, 'recording': False,
                     'compiled': False}
