"""Export of compiled programs to ONNX.

``export_onnx(f, args, path)`` records ``f`` for ``args`` (or takes the
cache entry it already has) and writes its IR as a standard ONNX model:
array arguments become graph inputs (named after the function's
parameters), the model's parameters and persistent arrays become
initializers (named ``l1.W``, ...), constants become initializers too, the
result's arrays are outputs ``y0, y1, ...`` followed by the model
attributes the forward assigns (``lstm.h``) and the values it reports
(``report.loss``), and
each node is converted by the ONNX converter its lowering carries
(``Kernel.onnx``, next to its forward and gradient in ``chainerjit/ops``).
The model is checked with ``onnx.checker``.

The conversion of the IR itself, and the converters' ``Builder``, are
``chainerjit.backend.onnx_graph``'s.
"""

import os

import chainer
import numpy

from chainerjit import api
from chainerjit.backend import onnx_graph
from chainerjit.backend import ort
from chainerjit.backend.onnx_graph import Builder
from chainerjit.backend.onnx_graph import IR_VERSION
from chainerjit.backend.onnx_graph import OPSET
from chainerjit.errors import ExportError
from chainerjit.frontend import scalars
from chainerjit.frontend import signature
from chainerjit.runtime import batch
from chainerjit.runtime.backends import first_line

__all__ = ['Builder', 'ExportError', 'IR_VERSION', 'OPSET', 'export_onnx']


def export_onnx(f, args, path=None, kwargs=None, dynamic_batch=None,
                opset=OPSET):
    """Writes the program ``f`` runs for ``args`` as an ONNX model.

    Args:
        f: a jitted function or method (or a plain one, jitted here).
        args: example arguments; shapes and dtypes come from them.
        path: where to write the ``.onnx`` file (``None``: don't write).
        dynamic_batch: make axis 0 of every array input symbolic; by
            default, where the program for ``args`` already serves every
            batch size (its signature shows ``B`` on axis 0).
            Symbolic trip counts and batches of a program compiled for
            any sizes (``T``, ``B`` on other axes) are named axes
            whatever this says.
        opset: the ONNX opset (17 or newer).

    Returns:
        onnx.ModelProto: the checked model.

    Raises:
        ExportError: an op has no ONNX converter, or the call could not be
            compiled (it runs eagerly).
    """
    import onnx

    jitted = f if isinstance(f, api.JitFunction) else api.jit(f)
    entry = _entry_for(jitted, args, kwargs or {})
    if dynamic_batch is None:
        dynamic_batch = _serves_every_batch_size(entry)
    graph = entry.graph
    names = onnx_graph.names_of(graph)
    batched = [v for v in graph.inputs if v.shape]
    builder = Builder(dynamic_batch, names[batched[0]] if batched else None,
                      batched[0].shape[0] if batched else None)
    if dynamic_batch:
        _check_batch_unused(jitted, entry)
        _check_constants_batchless(graph, names, builder.batch_size)
    for value in graph.params + graph.all_consts():
        array = _model_array(entry, value)
        builder.constant(chainer.backend.CpuDevice().send(array),
                         names[value])
    _symbols(builder, entry, names,
             jitted.call_key(tuple(args), kwargs or {}, False, False)[0])
    onnx_graph.convert_nodes(builder, graph.nodes, names)
    outputs, sources = _output_names(builder, entry, names)
    types = {names[v]: (v.shape, v.dtype)
             for v in graph.inputs + graph.outputs}
    types.update((i.name, (tuple(i.dims), onnx.helper.tensor_dtype_to_np_dtype(
        i.data_type))) for i in builder.initializers)
    compared = batch.compared_symbols(entry.symbolic)
    model = onnx_graph.model(
        builder, jitted.__name__,
        [onnx_graph.value_info((v.shape, v.dtype), names[v], dynamic_batch,
                               _uncompared(v.symbols, compared))
         for v in graph.inputs],
        [onnx_graph.value_info(types[source], name, dynamic_batch,
                               _output_axes(types[source][0], name,
                                            dynamic_batch and
                                            builder.batch_size),
                               shaped=entry.symbolic is None)
         for source, name in zip(sources, outputs)], opset)
    onnx.checker.check_model(model)
    if dynamic_batch and builder.batch_size:
        _check_other_batches(model, jitted, args, kwargs or {}, entry,
                             _example_rows(args, kwargs or {}))
    if path is not None:
        onnx.save(model, os.fspath(path))
    return model


def _uncompared(symbols, compared):
    """An input's named axes (``{axis: symbol}``) but those of the
    symbols ``compared`` (:func:`batch.compared_symbols`), which keep
    their recorded sizes: onnxruntime then refuses the sizes on the other
    side of the comparison, where the program would be wrong."""
    return dict((axis, symbol) for axis, symbol in (symbols or {}).items()
                if symbol not in compared)


def _entry_for(jitted, args, kwargs):
    """The inference cache entry for ``args``, compiling it if needed."""
    with chainer.no_backprop_mode(), chainer.using_config('train', False):
        jitted(*args, **kwargs)
        if jitted.last_entry is None:  # it tried packing lists, kept none
            jitted(*args, **kwargs)
    entry = jitted.last_entry
    cut = jitted.graph_break()
    if cut is not None:
        raise ExportError(
            '%s runs around a %s. One ONNX graph cannot run Python between '
            'its parts: export the piece before the break with the same '
            'arguments (f.graph_break()[1][\'prefix\']), or move the read '
            'out of the forward' % (jitted.__name__, cut[0].describe()))
    if entry is None or entry.program is None:
        raise ExportError(
            '%s runs eagerly for these arguments (%s), so there is no '
            'program to export' % (jitted.__name__, entry.fallback if entry
                                   else 'not compiled'))
    carried = entry.carried_attributes()
    if carried:
        raise ExportError(
            '%s carries model state from call to call (%s: assigned by one '
            'call, read by the next); an ONNX model keeps no state. Assign '
            'it in the forward before reading it (a link\'s '
            'reset_state()) to export the model' % (
                jitted.__name__, ', '.join(carried)))
    if entry.fetch_params(jitted._instance()) is None:  # reads the arrays
        raise ExportError('%s: the model changed during the call'
                          % jitted.__name__)
    return entry


def _serves_every_batch_size(entry):
    """Whether the entry serves every batch size on axis 0 of its array
    inputs, from a program recorded at one (``runtime.batch.Batched``; a
    program compiled for any batch size names the axis itself)."""
    symbolic = entry.symbolic
    return isinstance(symbolic, batch.Batched) and all(
        axis == 0 for _, axis in symbolic.batch_axes())


def _check_constants_batchless(graph, names, batch_size):
    """Raises ExportError where a constant of the program is an array the
    forward made with an input's batch size: given axis 0 of an input, or
    with as many rows (more than one) as its example has
    (``numpy.full(s.shape, -1e9)``, ``s`` a value computed from the
    input): a model with a dynamic batch would hold it at the example's
    size whatever the batch."""
    for value in graph.all_consts():
        made = value.made_with
        if made is None:
            continue
        if any(axis == 0 for _, axis in made) or batch_size and \
                batch_size > 1 and value.shape[:1] == (batch_size,):
            raise ExportError(
                'the constant %s is an array the forward made with the '
                'batch size of the example on its first axis, which a '
                'model with a dynamic batch would keep: export with '
                'dynamic_batch=False, or make it from a value of the batch '
                '(numpy.full_like(s.array, ...))' % names[value])


#: Uses of a size the ONNX model holds no part of: the Python values the
#: forward returns, assigns or reports.
_NOT_IN_THE_MODEL = ('returned', 'assigned to', 'reported')


def _check_batch_unused(jitted, entry):
    """Raises ExportError where the forward's Python used the batch size
    (``1.0 / x.shape[0]``, ``if len(x) > 8:``): the model would keep the
    number, or the branch, of the example's batch."""
    batched = batch.batch_of(entry.key)
    decision = batched and batch.decision_on_batch(
        entry, batched, [use for use in entry.size_uses
                         if not use.what.startswith(_NOT_IN_THE_MODEL)])
    if decision:
        raise ExportError(
            '%s uses the batch size in Python (%s), so a model with a '
            'dynamic batch would keep the example\'s: export with '
            'dynamic_batch=False, or compute it from a value of the batch '
            'with Chainer functions' % (jitted.__name__, decision))


def _check_other_batches(model, jitted, args, kwargs, entry, size):
    """Runs the model with a dynamic batch in onnxruntime on the example's
    rows (``size`` of them; the entry may have been recorded at another
    batch size), twice over, and on its first row alone, and the forward
    eagerly on them (in test mode, without backprop); raises ExportError
    where onnxruntime cannot run it or the results differ (a converter
    kept the example's batch size; a batch of one squeezed or broadcast
    as several are not). The outputs at the example's batch and at twice
    it then declare the axes that changed with the batch
    (:func:`_declare_outputs`). A program that draws random numbers is
    not run."""
    if any(not node.pure for node in entry.graph.nodes):
        return
    session = ort.session(model)
    once = _run_at(session, jitted, args, kwargs, size, lambda a: a, size)
    twice = _run_at(session, jitted, args, kwargs, 2 * size,
                    lambda a: _concatenate([a, a]), size)
    if size != 1:
        _run_at(session, jitted, args, kwargs, 1, lambda a: a[:1], size)
    _declare_outputs(model, [out.shape for out in once], twice, size)


def _example_rows(args, kwargs):
    """The first axis's size of the example's first array (the batch)."""
    leaves = []
    signature.flatten((args, kwargs), leaves)
    return next(signature.leaf_array(leaf).shape[0] for leaf in leaves
                if signature.leaf_array(leaf).ndim)


def _run_at(session, jitted, args, kwargs, rows, cut, size):
    """The session's outputs on the example's arrays of ``size`` rows made
    ``rows`` long by ``cut``, checked against the eager forward's."""
    args, kwargs = _with_rows(args, size, cut), _with_rows(kwargs, size, cut)
    leaves, expected = [], []
    signature.flatten((args, kwargs), leaves)
    try:
        with chainer.no_backprop_mode(), \
                chainer.using_config('train', False):
            signature.flatten(jitted._run(jitted._instance(), args, kwargs),
                              expected)
    except Exception as error:  # (axis 0 is not a batch: the steps)
        raise ExportError(
            '%s: the forward itself fails at %d rows on axis 0 (%s), so '
            'that axis cannot be a dynamic batch: export with '
            'dynamic_batch=False' % (jitted.__name__, rows,
                                     first_line(error)))
    try:
        outputs = session.run(None, dict(zip(
            [i.name for i in session.get_inputs()],
            [numpy.asarray(signature.leaf_array(a)) for a in leaves])))
    except Exception as error:  # onnxruntime refused the other batch size
        raise ExportError(
            '%s: the model with a dynamic batch does not run at batch size '
            '%d (%s): export with dynamic_batch=False' % (
                jitted.__name__, rows, first_line(error)))
    for i, (out, leaf) in enumerate(zip(outputs, expected)):
        want = chainer.backend.CpuDevice().send(signature.leaf_array(leaf))
        tolerance = 5e-2 if want.dtype == numpy.float16 else 1e-3
        if out.shape != want.shape or not numpy.allclose(
                out, want, rtol=tolerance, atol=tolerance / 10,
                equal_nan=True):
            raise ExportError(
                '%s: the model with a dynamic batch gives another y%d than '
                'Chainer at batch size %d (%s, the example\'s %d): export '
                'with dynamic_batch=False' % (
                    jitted.__name__, i, rows, 'shape %s, Chainer\'s %s' % (
                        out.shape, want.shape) if out.shape != want.shape
                    else 'an op kept the batch size', size))
    return outputs


def _declare_outputs(model, shapes, outputs, size):
    """Declares each output's axes as the runs at the example's batch
    ``size`` (``shapes``) and at twice it (``outputs``) found them: an axis
    0 that doubled is ``batch``, another axis that changed is free
    (``y0_1``), the others keep their size; the program's own symbols
    (``T``) stay."""
    for info, shape, out in zip(model.graph.output, shapes, outputs):
        dims = info.type.tensor_type.shape.dim
        if len(dims) != out.ndim or len(shape) != out.ndim:
            continue
        for axis, (dim, example, n) in enumerate(zip(dims, shape,
                                                     out.shape)):
            if dim.dim_param not in ('', 'batch', '%s_%d' % (info.name,
                                                             axis)):
                continue
            dim.Clear()
            if n == example:
                dim.dim_value = example
            else:
                dim.dim_param = 'batch' if axis == 0 and example == size \
                    and n == 2 * size else '%s_%d' % (info.name, axis)


def _output_axes(shape, name, batch_size):
    """With a dynamic batch (the example's ``batch_size``), how an output
    declares its axes: axis 0 is the batch where it has the example's
    size, other axes of that size are free (``F.stack``'s ``(2, B, 4)``),
    the rest as recorded."""
    if not batch_size:
        return None
    return dict((axis, n if n != batch_size else 'batch' if axis == 0 else
                 '%s_%d' % (name, axis)) for axis, n in enumerate(shape))


def _with_rows(value, size, cut):
    """``value`` with each array whose first axis is ``size`` long given
    as ``cut(array)``, in tuples, lists and dicts."""
    if isinstance(value, (tuple, list)):
        return type(value)(_with_rows(v, size, cut) for v in value)
    if isinstance(value, dict):
        return dict((k, _with_rows(v, size, cut)) for k, v in value.items())
    array = value.array if isinstance(value, chainer.Variable) else value
    if not hasattr(array, 'shape') or not array.shape or \
            array.shape[0] != size:
        return value
    grown = cut(array)
    return chainer.Variable(grown) if array is not value else grown


def _concatenate(arrays):
    return chainer.backend.get_array_module(arrays[0]).concatenate(arrays)


def _model_array(entry, value):
    if value.kind == 'const':
        return value.data
    index = entry.graph.params.index(value)
    owner = entry._owners[index]
    return owner[0]._data[0] if owner[1] is None else getattr(*owner)


def _symbols(builder, entry, names, key):
    """The program's symbols: number arguments that vary by call, the
    example's values (constants of the model, as for a program compiled
    for them); trip counts that follow from the inputs (``T - 1`` for
    ``range(1, xs.shape[0])``), computed from the input's shape."""
    symbols = _trip_symbols(builder, entry, names, key)
    symbolic = getattr(entry.symbolic, 'trips', None) or getattr(
        entry.symbolic, 'sizes', entry.symbolic)
    if not symbols:  # no trip counts (any batch size or lengths)
        return
    counts = symbolic.generalize(key)[1]
    for part in symbolic.parts():  # each length's, in order
        n = len(part.deltas)
        _length_symbols(builder, entry, names, part, symbols[:n],
                        counts[:n])
        symbols, counts = symbols[n:], counts[n:]


def _length_symbols(builder, entry, names, part, symbols, counts):
    """The trip counts ``symbols`` of one length (``part``, a
    ``symbolic.Symbolic``): the example's ``counts`` for an int argument,
    else read from the input's shape."""
    if part.kind != 'dim':
        length = counts[0] + part.deltas[0]
        for value in symbols:
            builder.int64s(length - _delta(value), names[value])
        return
    leaf, axis = part.where
    whole = builder.op('Shape', [names[entry.graph.inputs[leaf]]])[0]
    length = builder.op('Gather', [whole, builder.int64s(axis)], axis=0)[0]
    for value in symbols:
        builder.op('Sub', [length, builder.int64s(_delta(value))],
                   [names[value]])


def _trip_symbols(builder, entry, names, key):
    """The symbols of the program but the varying numbers', whose values
    in the call of ``key`` it writes as constants."""
    symbols = list(entry.graph.symbols)
    numbers = getattr(entry.symbolic, 'numbers', entry.symbolic)
    if not isinstance(numbers, scalars.VaryingScalars):
        return symbols
    values = entry.symbolic.generalize(key)[1][:len(numbers.paths)]
    for value, number in zip(symbols, values):
        builder.constant(numpy.asarray(number, value.dtype), names[value])
    return symbols[len(values):]


def _delta(symbol):
    """3 for the symbol ``T-3`` (or ``U-3``), 0 for ``T``."""
    return int(symbol.name[2:]) if '-' in symbol.name else 0


def result_arrays(entry):
    """``(kind, where)`` of each array of the result, in order: see
    ``trace._leaf_spec`` (``'same'`` leaves are repeated arrays)."""
    _, specs = entry.outputs
    return [(kind, where) for kind, where, _, _ in specs]


def _output_names(builder, entry, names):
    """``(names, sources)`` of the model's outputs: ``y0, y1, ...``, each
    array of the result in order, then the arrays of the model attributes
    the forward assigns (``lstm.h``) and of the values it reports
    (``report.accuracy``), each made by an Identity node (it may be an
    argument, a parameter, a constant, or the same value twice)."""
    sources = _sources(builder, entry, names, result_arrays(entry))
    outputs = ['y%d' % i for i in range(len(sources))]
    for output, specs in _effect_arrays(entry):
        sources += _sources(builder, entry, names, specs)
        outputs += [output] if len(specs) == 1 else [
            '%s.%d' % (output, k) for k in range(len(specs))]
    return [builder.op('Identity', [source], [output])[0]
            for output, source in zip(outputs, sources)], sources


def _effect_arrays(entry):
    """``(name, [(kind, where), ...])`` of the arrays of each attribute
    the forward assigns (its last value) and each value it reports (the
    last reported under a key, as a reporter's observation keeps it)."""
    found = {}
    for kind, path, name, structure, specs in entry.effects:
        specs = [(s[0], s[1]) for s in specs]
        if kind == 'setattr':
            found['.'.join(path + (name,))] = specs
        elif structure[0] == 'dict' and len(structure[1]) == len(specs):
            found.update(('report.%s' % key, [spec])
                         for key, spec in zip(structure[1], specs))
        else:
            found['report'] = specs
    return [(name, specs) for name, specs in found.items() if specs]


def _sources(builder, entry, names, specs):
    """The ONNX names of the arrays ``specs`` give (``trace._leaf_spec``'s
    ``(kind, where)``; ``'same'`` repeats one of them)."""
    graph = entry.graph
    sources = []
    for kind, where in specs:
        if kind in ('value', 'scalar', 'leaf', 'steps'):
            sources.append(names[graph.outputs[where]])
        elif kind == 'arg':
            sources.append(names[graph.inputs[where]])
        elif kind == 'same':
            sources.append(sources[where])
        elif kind == 'items':
            raise ExportError('returning a list of the items of a list '
                              'argument joined cannot be exported (the '
                              'graph gives one array); return them '
                              'joined, F.concat(ys, axis=0)')
        elif kind == 'const':
            sources.append(builder.constant(
                chainer.backend.CpuDevice().send(where)))
        else:  # 'model': a Variable of the model, returned as is
            raise ExportError('returning a parameter of the model as it '
                              'is cannot be exported; return a copy')
    return sources
