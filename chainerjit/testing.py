"""Differential testing: check that a jitted function gives eager results.

Users can check their own models the way chainerjit's tests check ours::

    from chainerjit import testing
    testing.assert_jit_matches_eager(
        model.forward_eager_version, [(x1,), (x2,), (x3,)])

With ``CHAINERJIT_TEST_DEVICE=@cupy:0`` the checks send the NumPy arrays
they are given (arguments, and Variables' arrays) to that device first, so
that the same differential tests run on a GPU; the checks that an op was
lowered, which are about the CPU's lowerings, are then skipped.
"""

import contextlib
import os
import warnings

import chainer
import numpy

from chainerjit import api
from chainerjit import errors
from chainerjit import fastpaths
from chainerjit.frontend import signature
from chainerjit.runtime import batch


@contextlib.contextmanager
def fast_paths_off(*groups):
    """Within it, Chainer's own code runs where the fast paths of
    ``groups`` (by default all of them: ``'link_call'``, ``'backprop'``,
    ``'losses'``, ``'optimizers'``; see :mod:`chainerjit.fastpaths`) were
    installed; those are installed again afterwards. The fast paths'
    tests compare their results with such runs, and
    ``benchmarks/run.py`` times eager Chainer in one."""
    groups = groups or tuple(fastpaths.SWITCHES)
    was = fastpaths.installed(*groups)
    fastpaths.uninstall(*groups)
    try:
        yield
    finally:
        if was:  # install() of no group installs them all
            fastpaths.install(*set(patch.group for patch in was))


def with_fast_paths_off(run, *groups):
    """``run()`` within :func:`fast_paths_off` of ``groups``."""
    with fast_paths_off(*groups):
        return run()


def _leaves(result):
    leaves = []
    structure = signature.flatten(result, leaves)
    return structure, leaves


def assert_results_equal(actual, expected, rtol=1e-5, atol=1e-6):
    """Asserts two results have the same structure, types, shapes, dtypes
    and values (``numpy.testing.assert_allclose``); NaNs equal NaNs."""
    a_structure, a_leaves = _leaves(actual)
    e_structure, e_leaves = _leaves(expected)
    assert signature.same_structure(
        a_structure, e_structure, lambda a, e: numpy.allclose(
            a, e, rtol=rtol, atol=atol)), (
        'structure differs: %r vs eager %r' % (a_structure, e_structure))
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        assert type(a) is type(e), 'leaf %d: %s vs eager %s' % (
            i, type(a), type(e))
        a, e = signature.leaf_array(a), signature.leaf_array(e)
        assert type(a) is type(e), 'leaf %d: array %s vs eager %s' % (
            i, type(a), type(e))
        assert a.shape == e.shape, 'leaf %d: shape %s vs eager %s' % (
            i, a.shape, e.shape)
        assert a.dtype == e.dtype, 'leaf %d: dtype %s vs eager %s' % (
            i, a.dtype, e.dtype)
        numpy.testing.assert_allclose(
            chainer.backend.CpuDevice().send(a),
            chainer.backend.CpuDevice().send(e), rtol=rtol, atol=atol,
            err_msg='leaf %d' % i)


def programs(jitted):
    """Every compiled program of a jitted function's cache entries: the
    inference programs, then each training entry's forward and backward."""
    found = []
    for entry in jitted.cache_entries():
        if entry.program is not None:
            found.append(entry.program)
        if entry.training is not None:
            found += [entry.training.forward, entry.training.backward]
    return found


def device_under_test():
    """The device ``CHAINERJIT_TEST_DEVICE`` names, or ``None``."""
    return os.environ.get('CHAINERJIT_TEST_DEVICE')


def _on_test_device(args):
    """``args`` with their NumPy arrays (and the arrays of Variables) sent
    to the device that ``CHAINERJIT_TEST_DEVICE`` names (``'@cupy:0'``),
    if set: the same differential checks then run there."""
    name = device_under_test()
    if not name:
        return args
    send = chainer.get_device(name).send

    def moved(a):
        if isinstance(a, numpy.ndarray):
            return send(a)
        if type(a) is chainer.Variable and \
                isinstance(a.array, numpy.ndarray):
            return chainer.Variable(send(a.array),
                                    requires_grad=a.requires_grad)
        return a
    return tuple(moved(a) for a in args)


def _signatures_served(entry):
    if isinstance(entry.symbolic, batch.Batched):
        return sum(1 for sizes in entry.verified_lengths if sizes)
    return 1


def assert_jit_matches_eager(fn, calls, rtol=1e-5, atol=1e-6,
                             expect_entries=None, lowered=(),
                             no_backprop=True, jitted=None):
    """Calls ``jit(fn)`` with each argument tuple in ``calls`` and compares
    every result with eager ``fn``'s.

    The first call of a signature records (its result is eager's own);
    later calls run the program, so pass at least two argument tuples per
    signature. Fails if any call falls back to eager mode.

    Args:
        fn: a plain function (or bound method) to jit.
        calls: argument tuples; fresh values each, same or new shapes.
        expect_entries: if given, the number of signatures the cache
            serves: an entry for every batch size (``runtime.batch``)
            counts once for each batch size it ran.
        lowered: op names (``'ReLU'``) that must appear in the IR as
            lowered (not generic) nodes.
        no_backprop: run under ``chainer.no_backprop_mode()`` (the
            compiled path; with backprop a gradient may be needed).
        jitted: an already jitted ``fn`` to use.

    Returns:
        JitFunction: the jitted function, for further checks.
    """
    jfn = jitted if jitted is not None else api.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        for args in calls:
            args = _on_test_device(args)
            with chainer.using_config('enable_backprop', not no_backprop):
                expected = fn(*args)
                actual = jfn(*args)
            assert_results_equal(actual, expected, rtol, atol)
    entries = jfn.cache_entries()
    for entry in entries:
        assert entry.fallback is None, entry.fallback
    if expect_entries is not None:
        assert sum(_signatures_served(e) for e in entries) == \
            expect_entries, jfn.cache_report()
    if len(calls) > len(entries):
        assert jfn.cache_info().hits > 0, 'no call ran the program'

    for op in () if device_under_test() else lowered:  # the CPU's lowerings
        nodes = [n for e in entries for n in e.graph.nodes
                 if _applies(n.op, op)]
        assert nodes, '%s not in the IR:\n%s' % (
            op, '\n'.join(str(e.graph) for e in entries))
        assert not any(n.generic for n in nodes), (
            '%s ran on the generic path' % op)
    return jfn


def _variables(args):
    """Each float array argument as a Variable requiring grad (a copy, so
    that eager and jitted runs get separate ones); other arguments as
    they are."""
    return tuple(
        chainer.Variable(a.copy(), requires_grad=True)
        if isinstance(a, chainer.get_array_types()) and a.dtype.kind == 'f'
        else a for a in args)


def _backprop(result, seed):
    """Backprops seeded random gradients from every float Variable of a
    result that has a creator. Each float Variable draws its gradient,
    whether it has one or not, so that both runs pair the same gradients
    with the same outputs (an output needing no gradient is a node's
    output in eager mode and a leaf from a compiled call)."""
    leaves = [v for v in _leaves(result)[1]
              if isinstance(v, chainer.Variable) and v.dtype.kind == 'f']
    rng = numpy.random.RandomState(seed)
    grads = [chainer.Variable(chainer.backend.get_device_from_array(
        v.array).send(rng.standard_normal(v.shape).astype(v.dtype)))
        for v in leaves]
    pairs = [(v, g) for v, g in zip(leaves, grads) if v.creator is not None]
    chainer.backward([v for v, _ in pairs], [g for _, g in pairs])


def assert_jit_grads_match_eager(fn, calls, rtol=1e-5, atol=1e-6,
                                 lowered=(), jitted=None):
    """Checks ``jit(fn)``'s outputs and input gradients against eager
    ``fn``'s.

    Each float array argument becomes a Variable that requires grad; the
    outputs are backpropagated with the same random gradients in both
    modes and the arguments' ``.grad`` compared. As in
    :func:`assert_jit_matches_eager`, the first call of a signature
    records (eager); the later ones run the compiled training program.

    Returns:
        JitFunction: the jitted function.
    """
    jfn = jitted if jitted is not None else api.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        for i, args in enumerate(calls):
            args = _on_test_device(args)
            eager_args, jit_args = _variables(args), _variables(args)
            expected, actual = fn(*eager_args), jfn(*jit_args)
            assert_results_equal(actual, expected, rtol, atol)
            _backprop(expected, i)
            _backprop(actual, i)
            for e, a in zip(eager_args, jit_args):
                if isinstance(e, chainer.Variable):
                    assert (a.grad is None) == (e.grad is None)
                    if e.grad is not None:
                        assert_results_equal(a.grad, e.grad, rtol, atol)
    entries = jfn.cache_entries()
    for entry in entries:
        assert entry.fallback is None, entry.fallback
        assert entry.training is not None, 'no training program'
    assert jfn.cache_info().hits > 0, 'no call ran the program'
    for op in () if device_under_test() else lowered:  # the CPU's lowerings
        names = [n.op[:-len('Grad')] for e in entries
                 for n in e.training.graphs.backward.nodes
                 if n.op.endswith('Grad')]
        assert any(_applies(name, op) for name in names), \
            '%s has no gradient in\n%s' % (
            op, '\n'.join(str(e.training.graphs.backward)
                          for e in entries))
    return jfn


def assert_onnx_matches_eager(fn, calls, rtol=1e-5, atol=1e-6, lowered=(),
                              dynamic_batch=False):
    """Exports ``jit(fn)`` for the first call's arguments to ONNX, runs the
    model in onnxruntime on every call's arrays and compares each output
    with eager ``fn``'s (in test mode, without backprop).

    With ``dynamic_batch``, later calls may have other batch sizes.

    Returns:
        onnx.ModelProto: the exported model.
    """
    import onnxruntime

    from chainerjit import onnx_export

    jfn = api.jit(fn)
    model = onnx_export.export_onnx(jfn, calls[0],
                                    dynamic_batch=dynamic_batch)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=['CPUExecutionProvider'])
    entry = [e for e in jfn.cache_entries() if e.program is not None][-1]
    names = [i.name for i in session.get_inputs()]
    for op in lowered:
        assert any(_applies(n.op, op) and not n.generic
                   for n in entry.graph.nodes)
    for args in calls:
        leaves = []
        signature.flatten(args, leaves)
        feed = dict(zip(names, [numpy.asarray(signature.leaf_array(a))
                                for a in leaves]))
        outputs = session.run(None, feed)
        with chainer.no_backprop_mode(), \
                chainer.using_config('train', False):
            expected = fn(*args)
        leaves = _leaves(expected)[1]
        # The result's arrays; the attributes the forward assigns follow.
        names_out = [o.name for o in session.get_outputs()]
        n = len(leaves)
        assert names_out[:n] == ['y%d' % i for i in range(n)] and \
            'y%d' % n not in names_out
        for out, leaf in zip(outputs, leaves):
            e = chainer.backend.CpuDevice().send(signature.leaf_array(leaf))
            assert out.shape == e.shape, (out.shape, e.shape)
            assert out.dtype == e.dtype, (out.dtype, e.dtype)
            numpy.testing.assert_allclose(out, e, rtol=rtol, atol=atol)
    return model


def _applies(node_op, op):
    """Does a node labelled ``node_op`` apply ``op``? (A fused node's
    label joins its ops with ``+``.)"""
    return op in node_op.split('+')
