"""Gradients of the lowered normalization ops against eager Chainer's,
over the cases of the forward tests in test_normalization.py; and batch
normalization in training mode (generic path), with its running
statistics."""

import copy
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from chainerjit.ops import ForwardMemo
from tests.ops_tests import test_normalization as forward
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import make_calls
from tests.ops_tests.common import cases_of
from tests.ops_tests.test_connection_grad import tolerances


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize(
    'x_shape,param_shape,axis',
    cases_of(forward.test_fixed_batch_normalization,
             'x_shape,param_shape,axis'))
def test_fixed_batch_normalization_grad(rng, dtype, x_shape, param_shape,
                                        axis):
    # All five inputs require grad (mean and var included).
    testing.assert_jit_grads_match_eager(
        lambda x, gamma, beta, mean, var: F.fixed_batch_normalization(
            x, gamma, beta, mean, var, eps=1e-3, axis=axis),
        forward._bn_calls(rng, x_shape, param_shape, dtype),
        lowered=['FixedBatchNormalization'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,groups', forward.GROUP_NORM_CASES)
def test_group_normalization_grad(rng, dtype, x_shape, groups):
    channels = x_shape[1]
    testing.assert_jit_grads_match_eager(
        lambda x, gamma, beta: F.group_normalization(x, groups, gamma, beta),
        make_calls(rng, [x_shape, (channels,), (channels,)], dtype),
        lowered=['GroupNormalization'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize(
    'shape', cases_of(forward.test_layer_normalization, 'shape'))
def test_layer_normalization_grad(rng, dtype, shape):
    testing.assert_jit_grads_match_eager(
        lambda x, gamma, beta: F.layer_normalization(x, gamma, beta),
        make_calls(rng, [shape, shape[1:], shape[1:]], dtype),
        lowered=['LayerNormalization'], **tolerances(dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize(
    'shape,axis', cases_of(forward.test_normalize, 'shape,axis'))
def test_normalize_grad(rng, dtype, shape, axis):
    testing.assert_jit_grads_match_eager(
        lambda x: F.normalize(x, axis=axis),
        make_calls(rng, [shape], dtype),
        lowered=['NormalizeL2'], **tolerances(dtype))


def test_normalize_zero_norm_grad(rng):
    """Rows of zeros: eager masks the division by their zero norm."""
    calls = make_calls(rng, [(4, 3)], numpy.float64)
    for x, in calls:
        x[1] = 0
    testing.assert_jit_grads_match_eager(
        lambda x: F.normalize(x), calls, lowered=['NormalizeL2'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize(
    'shape,options',
    cases_of(forward.test_local_response_normalization, 'shape,options'))
def test_local_response_normalization_grad(rng, dtype, shape, options):
    testing.assert_jit_grads_match_eager(
        lambda x: F.local_response_normalization(x, **options),
        make_calls(rng, [shape], dtype),
        lowered=['LocalResponseNormalization'], **tolerances(dtype))


def _twin_steps(eager, jitted, calls, arrays, **tol):
    """Runs ``eager`` and the jitted twin ``jitted`` (same parameters) on
    each call with backprop: outputs, input and parameter gradients and the
    named persistent ``arrays`` must be equal after every call."""
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        for i, args in enumerate(calls):
            results = []
            for model in (eager, jitted):
                model.cleargrads()
                xs = [chainer.Variable(a.copy()) for a in args]
                y = model(*xs)
                y.grad = numpy.random.RandomState(i).standard_normal(
                    y.shape).astype(y.dtype)
                y.backward()
                results.append((y, xs))
            (y_e, xs_e), (y_j, xs_j) = results
            testing.assert_results_equal(y_j, y_e, **tol)
            for x_j, x_e in zip(xs_j, xs_e):
                testing.assert_results_equal(x_j.grad, x_e.grad, **tol)
            for (name, p_e), (_, p_j) in zip(sorted(eager.namedparams()),
                                             sorted(jitted.namedparams())):
                assert p_j.grad is not None, name
                testing.assert_results_equal(p_j.grad, p_e.grad, **tol)
            for name in arrays:
                testing.assert_results_equal(
                    getattr(jitted, name), getattr(eager, name), **tol)
    assert jitted.forward.cache_info().hits > 0
    entries = jitted.forward.cache_entries()
    assert all(e.training is not None for e in entries)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape', [(5, 3), (4, 3, 2, 2)])
def test_batch_normalization_link_train_mode(rng, dtype, x_shape):
    eager = L.BatchNormalization(3, dtype=dtype)
    eager.gamma.array[...] = rng.uniform(0.5, 1.5, 3)
    eager.beta.array[...] = rng.standard_normal(3)
    jitted = copy.deepcopy(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    with chainer.using_config('train', True):
        _twin_steps(eager, jitted, make_calls(rng, [x_shape], dtype),
                    ['avg_mean', 'avg_var'], **tolerances(dtype))
    assert (jitted.avg_mean != 0).all()  # updated on every call


@pytest.mark.parametrize('dtype', DTYPES)
def test_batch_normalization_function_train_mode(rng, dtype):
    """F.batch_normalization with running statistics given by the
    caller: they are updated in place on every compiled call."""
    param_shape = (3,)

    def make_state():
        return (numpy.zeros(param_shape, dtype),
                numpy.ones(param_shape, dtype))
    eager_state, jit_state = make_state(), make_state()

    def bn(state):
        def fn(x, gamma, beta):
            return F.batch_normalization(
                x, gamma, beta, running_mean=state[0],
                running_var=state[1], decay=0.8)
        return fn
    calls = make_calls(rng, [(4, 3, 2), param_shape, param_shape], dtype)
    jfn = testing.assert_jit_grads_match_eager(
        bn(eager_state), calls, jitted=chainerjit.jit(bn(jit_state)),
        **tolerances(dtype))
    assert (jit_state[0] != 0).all()
    for e, a in zip(eager_state, jit_state):
        testing.assert_results_equal(a, e, **tolerances(dtype))
    assert jfn.cache_info().hits > 0


@pytest.mark.parametrize('given', ['link', 'caller', 'none'])
def test_batch_normalization_in_training_is_lowered(rng, given):
    """Batch statistics in training run Chainer's CPU implementation
    directly (not the generic node), whether the running averages are a
    link's, the caller's arrays or absent; the first call's self-check
    does not update them a second time."""
    state = (numpy.zeros(3, numpy.float32), numpy.ones(3, numpy.float32))
    link = L.BatchNormalization(3)

    def fn(x, gamma, beta):
        if given == 'link':
            return link(x)
        kwargs = dict(running_mean=state[0], running_var=state[1]) \
            if given == 'caller' else {}
        return F.batch_normalization(x, gamma, beta, **kwargs)
    jfn = chainerjit.jit(fn)
    x = rng.standard_normal((4, 3)).astype(numpy.float32)
    params = [chainer.Variable(numpy.ones(3, numpy.float32)),
              chainer.Variable(numpy.zeros(3, numpy.float32))]
    with chainer.using_config('train', True):
        jfn(x, *params)
    expected = x.mean(axis=0) * 0.1  # one update from zeros, decay 0.9
    running = link.avg_mean if given == 'link' else state[0]
    if given != 'none':
        numpy.testing.assert_allclose(running, expected, rtol=1e-5)
    entry, = jfn.cache_entries()
    names = entry.training.forward.kernel_names
    assert any(n.startswith('BatchNormalization[') for n in names), names
    assert not any('generic' in n for n in names), names


def test_batch_normalization_gradient_takes_the_forwards_statistics(
        rng, monkeypatch):
    """As eager's node keeps them: the backward of the last forward reads
    its mean and inv_std; a backward of an earlier call (its x another
    array) computes them again from that x. Both match eager bit for
    bit."""
    from chainerjit.ops import normalization
    computed = []
    own = normalization._ChannelsLastStats.get_mean_and_var

    def counted(self, *args):
        computed.append(args[2].shape)
        return own(self, *args)
    monkeypatch.setattr(normalization._ChannelsLastStats,
                        'get_mean_and_var', counted)
    eager = L.BatchNormalization(3)
    jitted = copy.deepcopy(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    xs = [rng.standard_normal((4, 3, 2, 2)).astype(numpy.float32)
          for _ in range(3)]
    with chainer.using_config('train', True):
        for _ in range(2):  # records, then checks its first program run
            jitted(chainer.Variable(xs[0]))
        results = {}
        for name, link in (('eager', eager), ('jit', jitted)):
            first = link(chainer.Variable(xs[1]))
            second = link(chainer.Variable(xs[2]))
            before = len(computed)
            F.sum(second * second).backward()
            reused = len(computed) == before
            F.sum(first * first).backward()
            results[name] = (first, second, reused, len(computed) - before)
    assert results['jit'][2:] == (True, 1)  # the second's; the first again
    for e, a in zip(results['eager'][:2], results['jit'][:2]):
        assert a.array.tobytes() == e.array.tobytes()
        assert a.creator_node is not None
    for e, a in zip(eager.params(), jitted.params()):
        assert a.grad.tobytes() == e.grad.tobytes(), a.name


def test_a_forward_memo_serves_only_its_own_array():
    memo = ForwardMemo()
    x, other = numpy.zeros(3), numpy.zeros(3)
    assert memo.take(x) is None
    memo.keep(x, 'kept')
    assert memo.take(other) is None
    assert memo.take(x) == 'kept'
    assert memo.take(x) == 'kept'  # kept until the next forward
    memo.keep(other, 'next')
    assert memo.take(x) is None
    del other  # a weak reference: a later array in its place is another
    assert memo.take(numpy.zeros(3)) is None
