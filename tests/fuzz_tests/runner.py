"""The differential check of one fuzzer program: its forward run eagerly
and through ``chainerjit.jit`` on twin models, call after call.

Every call gets new input values (in the memory layouts the program
says), and between calls the parameters may move as an optimizer would
move them. Compared after each call: the results (structure, kinds of
leaves, shapes, dtypes, values, ``requires_grad``), the attribute the
forward assigns on the model, the model's persistent arrays, the
gradients of the inputs and of the parameters on the calls that
backprop, and the arguments, which must be left as they were given. At
the end: the results of earlier calls still hold their values (no buffer
of the program was reused under them), and the cache says that some call
ran compiled, unless a FallbackWarning said why not (or a branch test may
go either way). A FallbackWarning for a program that chainerjit's own
check found wrong (``CompiledMismatch``) is a failure.
"""

import contextlib
import warnings

import chainer
import hypothesis
import numpy

import chainerjit
from chainerjit import errors
from chainerjit import testing
from chainerjit.frontend import signature
from tests.fuzz_tests import models
from tests.fuzz_tests import programs

RTOL, ATOL = 1e-5, 1e-5


@contextlib.contextmanager
def fresh_one_time_warnings():
    """chainerjit warns once per function and line; each program is a new
    function of the same lines, so it gets its warnings afresh."""
    saved = errors._warned
    errors._warned = set()
    try:
        yield
    finally:
        errors._warned = saved


def calls_of(program):
    """``(batch, length)`` of each call: three at the first batch size and
    length, each with new values (the first records; so may the second,
    which sees the attribute the first assigned), then the other lengths,
    then two calls at the second batch size where the program runs
    there. With ``program.grad == 'mixed'``, the calls alternate between
    backprop (even calls) and no backprop, and five calls come first."""
    lengths = program.lengths
    first = [lengths[0]] * (5 if program.grad == 'mixed' else 3) + list(
        lengths[1:])
    plan = [(program.batches[0], n) for n in first]
    for b in program.batches[1:]:
        plan += [(b, lengths[0]), (b, lengths[0])]
    return plan


def leaves(result):
    found = []
    signature.flatten(result, found)
    return found


def snapshot(result):
    return [numpy.array(signature.leaf_array(v), copy=True)
            for v in leaves(result)]


def input_variables(args):
    found = []
    for a in args:
        if isinstance(a, chainer.Variable):
            found.append(a)
        elif isinstance(a, list):
            found += [r for r in a if isinstance(r, chainer.Variable)]
    return found


def backprop(result, seed):
    """Backprops seeded random gradients from the float Variables of a
    result that require grad. Every such leaf draws its gradient, so that
    the two runs pair them by position even where a leaf that needs no
    gradient is a graph node in one run and not in the other."""
    rng = numpy.random.RandomState(seed)
    outs, grads = [], []
    for v in leaves(result):
        if isinstance(v, chainer.Variable) and v.dtype.kind == 'f':
            g = rng.standard_normal(v.shape).astype(v.dtype)
            if v.requires_grad:
                outs.append(v)
                grads.append(chainer.Variable(g))
    if outs:
        chainer.backward(outs, grads)


def assert_grads_equal(actual, expected, what):
    assert len(actual) == len(expected), what
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert (a is None) == (e is None), '%s %d: jit %s, eager %s' % (
            what, k, a is None and 'None' or 'a gradient',
            e is None and 'None' or 'a gradient')
        if e is not None:
            try:
                testing.assert_results_equal(a, e, RTOL, ATOL)
            except AssertionError as error:
                raise AssertionError('%s %d (jit, then eager): %s' % (
                    what, k, error))


def backprop_on(program, n):
    """Whether the ``n``-th call runs with backprop (and so has its
    gradients compared)."""
    return program.grad if program.grad != 'mixed' else n % 2 == 0


def run_one(fn, model, args, program, n):
    """The ``n``-th call; its result. NumPy's generator is seeded the same
    for both models (dropout in training draws from it)."""
    numpy.random.seed(n)
    model.cleargrads()
    with chainer.using_config('train', program.train), \
            chainer.using_config('enable_backprop', backprop_on(program, n)):
        return fn(*args)


def persistents(model):
    """The model's persistent arrays (batch normalization's statistics)."""
    return [(path + '/' + name, getattr(link, name))
            for path, link in sorted(model.namedlinks())
            for name in sorted(link._persistent)
            if isinstance(getattr(link, name), numpy.ndarray)]


def mutate(models_, n, rng, scale_at):
    """What an optimizer or a user does between calls, to both models
    alike: every parameter moves (in place on even calls, a new array on
    odd ones), and after call ``scale_at`` the scalar attribute ``scale``
    changes (the entries recorded before are then stale)."""
    params = [sorted(m.namedparams()) for m in models_]
    for k in range(len(params[0])):
        delta = rng.uniform(-0.1, 0.1, params[0][k][1].shape).astype(
            params[0][k][1].dtype)
        for ps in params:
            p = ps[k][1]
            if n % 2:
                p.array = p.array + delta
            else:
                p.array += delta
    if n == scale_at:
        for m in models_:
            m.scale = 1.5 + n


def arg_arrays(args):
    """The arrays of the arguments of a call, list items one by one."""
    found = []
    for a in args:
        for item in a if isinstance(a, list) else [a]:
            found.append(models.as_array(item))
    return found


def compare_call(what, actual, expected, jit_model, eager_model):
    try:
        testing.assert_results_equal(actual, expected, RTOL, ATOL)
    except AssertionError as e:
        raise AssertionError('%s: result (jit, then eager): %s' % (what, e))
    for k, (a, e) in enumerate(zip(leaves(actual), leaves(expected))):
        if isinstance(e, chainer.Variable):
            assert a.requires_grad == e.requires_grad, (
                '%s: leaf %d: requires_grad %s, eager %s' % (
                    what, k, a.requires_grad, e.requires_grad))
    assert hasattr(jit_model, 'last') == hasattr(eager_model, 'last'), what
    if hasattr(eager_model, 'last'):
        try:
            testing.assert_results_equal(jit_model.last, eager_model.last,
                                         RTOL, ATOL)
        except AssertionError as e:
            raise AssertionError(
                '%s: self.last (jit, then eager): %s' % (what, e))


def compare_grads(what, actual, expected, jit_args, eager_args, jit_model,
                  eager_model, seed):
    backprop(expected, seed)
    backprop(actual, seed)
    assert_grads_equal(
        [v.grad for v in input_variables(jit_args)],
        [v.grad for v in input_variables(eager_args)],
        '%s: input gradient' % what)
    assert_grads_equal(
        [p.grad for _, p in sorted(jit_model.namedparams())],
        [p.grad for _, p in sorted(eager_model.namedparams())],
        '%s: parameter gradient' % what)


def check(program, events=True):
    """Runs ``program`` eagerly and jitted and compares them; see the
    module's docstring. Returns the jitted function and the
    FallbackWarnings it gave."""
    cls = models.TEMPLATES[program.template]
    eager_model, jit_model = cls(program), cls(program)
    jitted = chainerjit.jit(jit_model.forward)
    rng = numpy.random.RandomState(program.seed)
    plan = calls_of(program)
    kept = []
    with fresh_one_time_warnings(), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for n, (batch, length) in enumerate(plan):
            raw = programs.raw_args(program, batch, length, rng)
            eager_args = programs.call_args(program, raw, n)
            jit_args = programs.call_args(program, raw, n)
            given = [a.copy() for a in arg_arrays(jit_args)]
            expected = run_one(eager_model.forward, eager_model, eager_args,
                               program, n)
            actual = run_one(jitted, jit_model, jit_args, program, n)
            what = 'call %d (batch %d, length %d)' % (n, batch, length)
            compare_call(what, actual, expected, jit_model, eager_model)
            for (name, a), (_, e) in zip(persistents(jit_model),
                                         persistents(eager_model)):
                numpy.testing.assert_allclose(
                    a, e, RTOL, ATOL, err_msg='%s: %s' % (what, name))
            kept.append((n, actual, snapshot(actual)))
            if backprop_on(program, n):
                compare_grads(what, actual, expected, jit_args, eager_args,
                              jit_model, eager_model, n)
            for k, (a, b) in enumerate(zip(arg_arrays(jit_args), given)):
                numpy.testing.assert_array_equal(
                    a, b, err_msg='%s changed argument array %d' % (what, k))
            if program.mutate:
                mutate((eager_model, jit_model), n, rng, len(plan) - 3)
    for n, result, values in kept:
        for k, (v, was) in enumerate(zip(leaves(result), values)):
            numpy.testing.assert_array_equal(
                signature.leaf_array(v), was,
                err_msg='the result of call %d, leaf %d, changed later'
                % (n, k))
    fell_back = check_cache(jitted, program, plan, caught, events)
    return jitted, fell_back


def check_cache(jitted, program, plan, caught, events=True):
    info = jitted.cache_info()
    fell_back = [w for w in caught
                 if issubclass(w.category, errors.FallbackWarning)]
    assert info.hits + info.misses == len(plan), (info, len(plan))
    for w in fell_back:
        # chainerjit's own check of a new program found it wrong.
        assert 'CompiledMismatch' not in str(w.message), str(w.message)
    for entry in jitted.cache_entries():
        if entry.fallback is not None:
            assert fell_back, 'entry runs eagerly without a warning: %s' % (
                entry.fallback,)
    if events:
        hypothesis.event('compiled' if info.compiled else 'eager')
        for w in fell_back:
            hypothesis.event('fallback: %s' % str(w.message).split(
                '\n')[0].split(': ', 2)[-1][:60])
    if fell_back:
        return fell_back
    # A test of NaN or of infinities may go either way, whatever the
    # threshold: a guard then fails, and the call records again.
    branch_may_flip = program.template in (
        'Branch', 'BranchAny', 'LoopExit') and (
        program.threshold == 0.0 or program.special == 'nonfinite')
    if not branch_may_flip:
        assert info.compiled > 0, (
            'no call ran compiled, and no FallbackWarning: %s\n%s' % (
                info, jitted.cache_report()))
    return fell_back
