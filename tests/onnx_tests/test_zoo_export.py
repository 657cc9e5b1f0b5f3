"""The zoo of tests/test_zoo.py exported to ONNX and run in onnxruntime.

Every case builds its model (warmed up in test mode, as the zoo does),
checks whether its ``forward`` compiles in test mode for the example
arguments (the case's first signature) and exports
``chainerjit.jit(model.forward)`` with ``chainerjit.export_onnx``. A case
that exports runs in onnxruntime on fresh inputs of the example's shapes
and every output array (the result's arrays, in order) must equal eager
Chainer's in test mode: same shape, dtype and values within float
tolerance. Models whose inputs have a batch axis are exported again with
``dynamic_batch=True`` and run at batch sizes 1 and a larger one.

A case that cannot be exported must raise ``ExportError`` naming the op
(or the documented reason: the call runs eagerly, has side effects, or
returns a parameter as it is). Lists of arrays are unrolled for the
example's lengths, so those cases run at the example's lengths only. The
summary of exported and refused cases is printed at the end.
"""

import collections
import functools
import copy
import re
import warnings

import chainer
import numpy
import pytest

import chainerjit
from chainerjit import onnx_export
from chainerjit.frontend import signature
from tests import summaries
from tests.zoo_cases import _split
from tests.zoo_cases import CASES
from tests.zoo_models import _ids_seq
from tests.zoo_models import _labels_seq


onnxruntime = pytest.importorskip('onnxruntime')

# The zoo draws these from iterators shared with its own run, with bad
# values on purpose (eager raises; an ONNX Gather cannot): valid ones here.
EXAMPLES = {
    'embed_id_out_of_range': _ids_seq([[0, 1], [2, 3], [4, 0]] * 9),
    'cross_entropy_bad_label': _labels_seq([[0, 1], [2, -1], [3, 1]] * 9),
}

# ExportError messages that need not name an op.
REASONS = ('runs eagerly', 'runs around a graph break',
           'carries model state from call to call',
           'returning a parameter of the model',
           'made with the batch size of the example')

# Cases that cannot run here: case name -> reason.
BUGS = {
    'float64_model': (
        'onnxruntime 1.31 has no float64 Conv kernel: the exported model '
        'is valid (float32 weights are cast to float64 as Chainer '
        'computes), but it cannot run here'),
}

N_FRESH = 3
SUMMARY = collections.OrderedDict()


@pytest.fixture(scope='module', autouse=True)
def _print_summary(request):
    yield
    summaries.write_after_module(request, SUMMARY, _write_summary)


def _write_summary(tr):
    kinds = collections.Counter(s[0] for s in SUMMARY.values())
    tr.write_line('')
    tr.write_line(
        'test_zoo_export: %d cases: %d exported (%d also with a dynamic '
        'batch), %d raised ExportError, %d did not finish (bugs, xfail)' % (
            len(SUMMARY), kinds['exported'],
            sum(1 for s in SUMMARY.values() if s[1] == 'dynamic batch'),
            kinds['ExportError'], kinds['unfinished']))
    for name, (kind, detail) in SUMMARY.items():
        tr.write_line('  %-12s %s: %s' % (kind, name, detail[:150]))


def _example(c, rng):
    """``(args, kwargs)``: fresh arguments of the case's first signature."""
    return _split(EXAMPLES.get(c.name, c.sigs[0])(rng))


def _mode():
    return chainer.using_config('train', False)


def _eager(model, args, kwargs):
    """``(result, model)``: eager test-mode result of a fresh copy of
    ``model``, and that copy after the call."""
    model = copy.deepcopy(model)
    args, kwargs = copy.deepcopy((args, kwargs))
    with _mode(), chainer.no_backprop_mode():
        numpy.random.seed(5)
        return model(*args, **kwargs), model


def _build(c):
    numpy.random.seed(0)
    with _mode(), chainer.no_backprop_mode():
        model = c.build()
        if c.warmup:
            args, kwargs = _example(c, numpy.random.RandomState(1))
            model(*args, **kwargs)
    return model


def _compiles(model, args, kwargs):
    """Whether ``jit(model.forward)`` compiles for ``args`` in test mode."""
    model = copy.deepcopy(model)
    jitted = chainerjit.jit(model.forward)
    with _mode(), chainer.no_backprop_mode(), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always', chainerjit.FallbackWarning)
        for _ in range(2):
            jitted(*copy.deepcopy(args), **copy.deepcopy(kwargs))
    entries = jitted.cache_entries()
    return bool(entries) and all(
        e.fallback is None and e.program is not None for e in entries) \
        and not any(issubclass(w.category, chainerjit.FallbackWarning)
                    for w in caught)


def _export(model, args, kwargs, dynamic_batch):
    """``(onnx model, entry)``; raises ExportError after checking that its
    message names an op of the program (or a documented reason)."""
    jitted = chainerjit.jit(copy.deepcopy(model).forward)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', chainerjit.FallbackWarning)
            proto = chainerjit.export_onnx(
                jitted, copy.deepcopy(args), kwargs=copy.deepcopy(kwargs),
                dynamic_batch=dynamic_batch)
    except onnx_export.ExportError as e:
        message = str(e)
        if not any(r in message for r in REASONS):
            ops = {n.op for e in jitted.cache_entries() if e.graph
                   for n in e.graph.nodes}
            assert any(re.search(r'\b%s\b' % re.escape(op), message)
                       for op in ops), (
                'ExportError names none of the ops %s: %s' % (
                    sorted(ops), message))
        raise
    entry, = [e for e in jitted.cache_entries() if e.program is not None]
    return proto, entry


def _leaves(args, kwargs):
    return signature.make_key(tuple(args), kwargs, False, False)[1]


def _check(proto, entry, model, calls, rtol, atol, where):
    """Runs ``proto`` on each ``(args, kwargs)`` of ``calls`` and compares
    its outputs with the eager result's arrays, and the attributes the
    forward assigns with the eager model's after the call."""
    session = onnxruntime.InferenceSession(
        proto.SerializeToString(), providers=['CPUExecutionProvider'])
    names = [i.name for i in session.get_inputs()]
    n_out = len(onnx_export.result_arrays(entry))
    output_names = [o.name for o in session.get_outputs()]
    assert output_names[:n_out] == ['y%d' % i for i in range(n_out)]
    for k, (args, kwargs) in enumerate(calls):
        when = '%s, input %d' % (where, k)
        leaves = _leaves(args, kwargs)
        assert len(names) == len(leaves), (when, names)
        feed = {n: numpy.asarray(signature.leaf_array(a))
                for n, a in zip(names, leaves)}
        outputs = session.run(None, feed)
        result, after = _eager(model, args, kwargs)
        expected = _result_leaves(result)
        assert n_out == len(expected), when
        attributes = [(name, out) for name, out in zip(
            output_names[n_out:], outputs[n_out:])
            if not name.startswith('report')]
        for name, out in attributes:
            expected.append(functools.reduce(getattr, name.split('.'),
                                             after))
        outputs = outputs[:n_out] + [out for _, out in attributes]
        names_checked = output_names[:n_out] + [n for n, _ in attributes]
        for out, e, name in zip(outputs, expected, names_checked):
            e = numpy.asarray(signature.leaf_array(e))
            what = '%s, %s' % (when, name)
            assert out.shape == e.shape, (what, out.shape, e.shape)
            assert out.dtype == e.dtype, (what, out.dtype, e.dtype)
            numpy.testing.assert_allclose(out, e, rtol=rtol, atol=atol,
                                          err_msg=what)


def _result_leaves(result):
    """The arrays and Variables of an eager result, and its NumPy scalars
    (a sum of the data returned, which a program hands out computed)."""
    leaves = []
    signature.flatten(_scalars_as_arrays(result), leaves)
    return leaves


def _scalars_as_arrays(result):
    if isinstance(result, numpy.generic):
        return numpy.asarray(result)
    if type(result) in (list, tuple):
        return type(result)(_scalars_as_arrays(r) for r in result)
    if type(result) is dict:
        return {k: _scalars_as_arrays(v) for k, v in result.items()}
    return result


def _batch_size(model, args, kwargs):
    """The common axis-0 size of the array arguments (0-d ones aside), or
    ``None`` where there is none (or axis 0 is a sequence's time axis)."""
    if any(isinstance(link, chainer.links.rnn.n_step_rnn.NStepRNNBase)
           for link in model.links()):
        return None
    sizes = {signature.leaf_array(a).shape[0]
             for a in _leaves(args, kwargs) if signature.leaf_array(a).ndim}
    if len(sizes) != 1 or 0 in sizes:
        return None
    return sizes.pop()


def _flat(call):
    leaves = []
    args, kwargs = call
    return signature.flatten((list(args), kwargs), leaves), leaves


def _unflat(structure, leaves):
    args, kwargs = signature.unflatten(structure, leaves)
    return tuple(args), kwargs


def _fresh(c, rng, example):
    """New arrays for the example's arguments; its Python and NumPy
    scalars are static (the export holds them) and stay as they are."""
    structure, leaves = _flat(example)
    new = _flat(_example(c, rng))[1]
    assert len(new) == len(leaves)
    return _unflat(structure, new)


def _rebatched(example, draws, size):
    """The example's arguments with batch ``size``: rows of ``draws``."""
    structure, leaves = _flat(example)
    flat = [_flat(d)[1] for d in draws]
    new = []
    for i, leaf in enumerate(leaves):
        array = signature.leaf_array(leaf)
        if array.ndim:
            array = numpy.concatenate(
                [signature.leaf_array(f[i]) for f in flat])[:size]
        if isinstance(leaf, chainer.Variable):
            array = chainer.Variable(array,
                                     requires_grad=leaf.requires_grad)
        new.append(array)
    return _unflat(structure, new)


def run_case(c):
    SUMMARY[c.name] = ('unfinished', '')
    rng = numpy.random.RandomState(0)
    rtol, atol = max(c.rtol, 1e-4), max(c.atol, 1e-5)
    model = _build(c)
    args, kwargs = _example(c, rng)
    compiles = _compiles(model, args, kwargs)
    try:
        proto, entry = _export(model, args, kwargs, False)
    except onnx_export.ExportError as e:
        message = str(e).splitlines()[0]
        whole = not any(r in message for r in ('runs eagerly', 'graph break'))
        assert compiles == whole, (
            'the forward %s in test mode, but: %s' % (
                'compiles' if compiles else 'does not compile', message))
        SUMMARY[c.name] = ('ExportError', message)
        return
    assert compiles, 'exported a call that does not compile'
    example = args, kwargs
    calls = [example] + [_fresh(c, rng, example) for _ in range(N_FRESH)]
    _check(proto, entry, model, calls, rtol, atol, c.name)

    n = _batch_size(model, args, kwargs)
    if n is None:
        SUMMARY[c.name] = ('exported', 'static shapes')
        return
    try:
        proto, entry = _export(model, args, kwargs, True)
    except onnx_export.ExportError as e:
        SUMMARY[c.name] = ('exported', 'dynamic batch: ExportError: %s' % (
            str(e).splitlines()[0]))
        return
    big = n + 3
    draws = [_example(c, rng) for _ in range(2 * (big // n + 1))]
    half = len(draws) // 2
    calls = [_rebatched(example, draws[:half], 1),
             _rebatched(example, draws[:half], big),
             _rebatched(example, draws[half:], 1),
             _rebatched(example, draws[half:], big),
             _rebatched(example, draws[:1], n)]
    _check(proto, entry, model, calls, rtol, atol,
           c.name + ' (dynamic batch)')
    SUMMARY[c.name] = ('exported', 'dynamic batch')


def _params():
    for c in CASES:
        marks = ()
        if c.name in BUGS:
            marks = (pytest.mark.xfail(strict=True, reason=BUGS[c.name]),)
        yield pytest.param(c, id=c.name, marks=marks)


@pytest.mark.parametrize('c', list(_params()))
def test_zoo_export(c):
    run_case(c)
