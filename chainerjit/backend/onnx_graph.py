"""Converting an IR graph to ONNX: the :class:`Builder` that the
converters of the kernels write into (``Kernel.onnx``, next to each
lowering in ``chainerjit/ops``), :func:`convert_node` for a node, loops
included (an ONNX ``Loop``), and :func:`value_info` for a typed graph
input or output. ``chainerjit.onnx_export`` writes a cache entry's
program as a model with them; ``backend.ort`` runs a program's graph in
onnxruntime.

A converter is a function ``convert(b, ins, outs)`` where ``b`` is a
:class:`Builder`, ``ins`` the names of the node's inputs and ``outs`` the
names its outputs must get. It emits ONNX nodes with ``b.op(...)``.
"""

import numpy

from chainerjit import errors
from chainerjit import ir
from chainerjit.backend import onnx_rnn
from chainerjit.errors import ExportError
from chainerjit.ops import structural


OPSET = 17
# The IR version of opset 17 (onnx 1.12); newer onnx packages would write a
# newer one than many onnxruntime builds read.
IR_VERSION = 8


class Builder(object):
    """Collects ONNX nodes and initializers for one graph.

    Attributes:
        dynamic_batch: axis 0 of every array input is symbolic; converters
            must not bake recorded batch sizes into shapes (ONNX
            ``Reshape`` copies a dimension given as 0).
        in_shapes, out_shapes, in_dtypes, out_dtypes: recorded types of
            the node being converted (set by the exporter).
    """

    def __init__(self, dynamic_batch, batch_input=None, batch_size=None):
        self.dynamic_batch = dynamic_batch
        self.batch_size = batch_size  # the example's, with a dynamic batch
        self.nodes = []
        self.initializers = []
        self._count = 0
        self._batch_input = batch_input
        self._batch_dim = None
        self.producers = {}  # IR value -> the node giving it

    def convert(self, node, ins, outs):
        """Runs ``node``'s converter on the value names ``ins`` and
        ``outs``, with the recorded types set to ``node``'s own (the
        converters of a fused node's parts each see theirs)."""
        self.in_shapes = [v.shape for v in node.inputs]
        self.in_dtypes = [v.dtype for v in node.inputs]
        self.out_shapes = [v.shape for v in node.outputs]
        self.out_dtypes = [v.dtype for v in node.outputs]
        node.kernel.onnx(self, ins, outs)

    def fresh(self, hint='t'):
        """A new unique value name."""
        self._count += 1
        return '%s_%d' % (hint, self._count)

    def op(self, op_type, inputs, outputs=None, **attrs):
        """Adds a node; returns its output names (one fresh name if
        ``outputs`` is not given)."""
        import onnx.helper

        if outputs is None:
            outputs = [self.fresh(op_type.lower())]
        self.nodes.append(onnx.helper.make_node(
            op_type, list(inputs), list(outputs), **attrs))
        return list(outputs)

    def single(self, op_type, *inputs, **attrs):
        """Adds a node of one output on ``inputs``; returns its name."""
        return self.op(op_type, inputs, **attrs)[0]

    def constant(self, array, name=None):
        """Adds an initializer holding ``array``; returns its name."""
        import onnx.numpy_helper

        name = name or self.fresh('const')
        self.initializers.append(onnx.numpy_helper.from_array(
            numpy.asarray(array), name))
        return name

    def int64s(self, values, name=None):
        """An int64 1-D initializer (shapes, axes for opset 13+ ops)."""
        return self.constant(numpy.asarray(values, dtype=numpy.int64),
                             name)

    def cast(self, name, dtype, to_dtype):
        """``name`` as ``to_dtype`` (a Cast node where the dtypes
        differ)."""
        import onnx.helper

        if numpy.dtype(dtype) == numpy.dtype(to_dtype):
            return name
        return self.op('Cast', [name], to=onnx.helper.np_dtype_to_tensor_dtype(
            numpy.dtype(to_dtype)))[0]

    def shape(self, shape):
        """An int64 shape tensor for ``shape``; with a dynamic batch, an
        axis 0 of the example's batch size is the input's batch size at
        run time."""
        if not (self.dynamic_batch and shape and
                shape[0] == self.batch_size):
            return self.int64s(shape)
        if self._batch_dim is None:
            whole = self.op('Shape', [self._batch_input])[0]
            self._batch_dim = self.op(
                'Slice', [whole, self.int64s([0]), self.int64s([1])])[0]
        return self.op('Concat', [self._batch_dim,
                                  self.int64s(list(shape[1:]))],
                       axis=0)[0]


def names_of(graph):
    """``graph.value_names`` made valid as ONNX names: every value named,
    no name twice (arguments may share a name)."""
    names, seen = {}, set()
    for value, name in graph.value_names('v%d').items():
        if not name or name in seen:
            name = 'u%d_%s' % (len(seen), name or 'value')
        seen.add(name)
        names[value] = name
    return names


def model(builder, name, inputs, outputs, opset=OPSET):
    """The ONNX model of what ``builder`` collected, with the typed
    ``inputs`` and ``outputs`` (see :func:`value_info`)."""
    import onnx.helper

    nodes = live_nodes(builder.nodes, [o.name for o in outputs])
    read = set(_reads(nodes))
    return onnx.helper.make_model(
        onnx.helper.make_graph(nodes, name, inputs, outputs,
                               [i for i in builder.initializers
                                if i.name in read]),
        opset_imports=[onnx.helper.make_opsetid('', opset)],
        producer_name='chainerjit', ir_version=IR_VERSION)


def live_nodes(nodes, outputs):
    """The ONNX ``nodes`` that the names ``outputs`` need, in order: a
    converter may give values nothing reads (a fused LSTM step's gates,
    which only its gradient reads; a projection that an ``LSTM`` node
    computes itself), which onnxruntime would compute at every call."""
    needed = set(outputs)
    live = []
    for node in reversed(nodes):
        if needed.intersection(node.output):
            live.append(node)
            needed.update(_reads([node]))
    return live[::-1]


def _reads(nodes):
    """The names ``nodes`` read, in the graphs of their attributes
    (a ``Loop``'s body) too."""
    for node in nodes:
        for name in node.input:
            yield name
        for attribute in node.attribute:
            if attribute.HasField('g'):
                for name in _reads(attribute.g.node):
                    yield name


def convert_nodes(builder, nodes, names):
    """Converts ``nodes`` in order (a graph's, a loop body's)."""
    builder.producers.update((v, node) for node in nodes
                             for v in node.outputs)
    for node in nodes:
        convert_node(builder, node, names)


def convert_node(builder, node, names):
    if node.region is not None:
        if not onnx_rnn.convert_rnn_loop(builder, node, names):
            _convert_loop(builder, node, names)
        return
    if structural.is_guard(node):
        raise ExportError(
            'a branch on an array value cannot be exported (the ONNX model '
            'would need both branches).\n%s' % errors.source_excerpt(
                node.loc))
    convert = getattr(node.kernel, 'onnx', None)
    if convert is None:
        raise ExportError(
            '%s has no ONNX converter (%s).\n%s\nExport supports the ops '
            'listed as lowered in docs/ops_coverage.md that have a '
            'converter; rewrite this part with those, or keep the model '
            'in chainerjit for this op.' % (
                node.op, 'it runs on the generic path' if node.generic
                else 'not written yet',
                errors.source_excerpt(node.loc)))
    builder.convert(node, [names[v] for v in node.inputs],
                    [names[v] for v in node.outputs])


def value_info(type_, name, dynamic_batch, symbols=None, shaped=True):
    """A typed graph input or output; ``type_`` is ``(shape, dtype)``;
    ``symbols`` names axes of any size (``{0: 'T'}``); ``shaped`` false
    leaves the shape out (an output of a program whose loops run any
    number of times)."""
    import onnx.helper

    shape, dtype = list(type_[0]), type_[1]
    if not shaped:  # the rank is known, the sizes are named
        shape = ['%s_%d' % (name, axis) for axis in range(len(shape))]
    if dynamic_batch and shape:
        shape[0] = 'batch'
    for axis, symbol in (symbols or {}).items():
        shape[axis] = symbol
    return onnx.helper.make_tensor_value_info(
        name, onnx.helper.np_dtype_to_tensor_dtype(numpy.dtype(dtype)),
        shape)


def _convert_loop(builder, node, names):
    """A Loop node as an ONNX ``Loop``: carried values are loop-carried,
    the per-iteration lists are scan outputs (stacked on axis 0), the
    body reads invariants from the outer scope, and an exit at the end of
    the body is the loop's condition."""
    body = node.region.body
    exits = [n for n in body.nodes if structural.is_exit(n)]
    test = _leading_test(body, exits)
    if len(exits) > 1 or (exits and test is None and
                          dict(exits[0].attrs)['where'] != 'end'):
        raise ExportError('a loop left in the middle of its body cannot be '
                          'exported.\n%s' % errors.source_excerpt(node.loc))
    _name_loop_inputs(builder, node, names)
    graph, initial = _loop_body_graph(builder, node, names, exits, test)
    _add_loop(builder, node, names, graph, initial, exits, test)


def _name_loop_inputs(builder, node, names):
    """Names the body's counter, and its invariants as the outer values
    they read."""
    region = node.region
    body = region.body
    n_read = sum(region.carried_read)
    names[body.inputs[0]] = builder.fresh('iter')
    for value, invariant in zip(body.inputs[1 + n_read:],
                                node.inputs[1 + n_read:]):
        names[value] = names[invariant]  # read from the outer scope


def _loop_body_graph(builder, node, names, exits, test):
    """``(graph, initial)``: the ONNX graph of a Loop node's body, and the
    names of its carried values' initial values."""
    import onnx.helper

    region = node.region
    body = region.body
    outer_nodes = builder.nodes
    builder.nodes = []
    cond_in = builder.fresh('cond')
    start_inputs = [onnx.helper.make_tensor_value_info(
        names[body.inputs[0]], onnx.TensorProto.INT64, []),
        onnx.helper.make_tensor_value_info(cond_in, onnx.TensorProto.BOOL,
                                           [])]
    initial, body_inputs = _carried_inputs(builder, node, names)
    cond_out = builder.fresh('cond')
    _convert_body(builder, node, names, exits, test, cond_in, cond_out)
    outs = [builder.op('Identity', [names[v]])[0] for v in body.outputs]
    count_out = []
    if region.counts:  # a carried count of the iterations run
        count_in = builder.fresh('count')
        body_inputs.append(onnx.helper.make_tensor_value_info(
            count_in, onnx.TensorProto.INT64, []))
        count_out = builder.op('Add', [count_in, builder.int64s(1)])
    body_nodes, builder.nodes = builder.nodes, outer_nodes
    outputs = _body_outputs(region, cond_out, outs, count_out)
    graph = onnx.helper.make_graph(
        live_nodes(body_nodes, [o.name for o in outputs]),
        builder.fresh('body'), start_inputs + body_inputs, outputs)
    return graph, initial


def _carried_inputs(builder, node, names):
    """``(initial, body_inputs)``: the names of a loop's carried values'
    initial values, and the body's typed inputs for them."""
    region = node.region
    body = region.body
    n_read = sum(region.carried_read)
    inits = iter(node.inputs[1:1 + n_read])
    carried_ins = iter(body.inputs[1:1 + n_read])
    initial, body_inputs = [], []
    for value, read in zip(body.outputs[:region.n_carried],
                           region.carried_read):
        if read:
            inner = next(carried_ins)
            initial.append(names[next(inits)])
        else:  # only its last value is used: starts as zeros
            inner = ir.Value('temp', value.shape, value.dtype)
            names[inner] = builder.fresh('unused')
            initial.append(builder.constant(numpy.zeros(value.shape,
                                                        value.dtype)))
        body_inputs.append(_typed(names[inner], inner))
    return initial, body_inputs


def _convert_body(builder, node, names, exits, test, cond_in, cond_out):
    """Converts the nodes of a loop's body, and gives ``cond_out``,
    whether to go on: from the ``while`` test, the exit at the end, or
    ``cond_in``."""
    region = node.region
    body = region.body
    if test is not None:
        # A ``while`` test at the top of the body: ONNX tests at the end,
        # so the test runs once before the loop, then after each body.
        n_read = sum(region.carried_read)
        convert_nodes(builder, body.nodes[len(test) + 1:], names)
        _convert_test(builder, test, exits[0], names, dict(zip(
            body.inputs[1:1 + n_read],
            [names[v] for v, read in zip(body.outputs[:region.n_carried],
                                         region.carried_read) if read])),
            cond_out)
        return
    convert_nodes(builder, [n for n in body.nodes
                            if not structural.is_exit(n)], names)
    if exits:
        condition = names[exits[0].inputs[0]]
        leaves_on = dict(exits[0].attrs)['when']
        builder.op('Identity' if not leaves_on else 'Not', [condition],
                   [cond_out])
    else:
        builder.op('Identity', [cond_in], [cond_out])


def _body_outputs(region, cond_out, outs, count_out):
    """The typed outputs of a loop's body graph: whether to go on, the
    carried values, the count (if any), and the scan values."""
    import onnx.helper

    body = region.body
    n_carried = region.n_carried
    return (
        [onnx.helper.make_tensor_value_info(cond_out,
                                            onnx.TensorProto.BOOL, [])] +
        [_typed(name, v) for name, v in zip(outs[:n_carried],
                                            body.outputs)] +
        [onnx.helper.make_tensor_value_info(count_out[0],
                                            onnx.TensorProto.INT64, [])
         for _ in count_out] +
        [_typed(name, v, scan=True) for name, v in zip(
            outs[n_carried:], body.outputs[n_carried:])])


def _add_loop(builder, node, names, graph, initial, exits, test):
    """The ``Loop`` node: its trip count, first condition (the ``while``
    test on the initial values, if any), initial values and outputs."""
    region = node.region
    body = region.body
    n_read = sum(region.carried_read)
    n_carried = region.n_carried
    trip = names[node.inputs[0]]
    counts = [builder.int64s(0)] if region.counts else []
    first_cond = builder.constant(numpy.array(True))
    if test is not None:
        first_cond = builder.fresh('cond')
        _convert_test(builder, test, exits[0], names, dict(
            (v, names[o]) for v, o in zip(body.inputs[1:1 + n_read],
                                          node.inputs[1:1 + n_read])),
            first_cond)
    results = [names[v] for v in node.outputs]
    scan_outputs = results[n_carried + region.counts:]
    loop_outputs = results[:n_carried] + results[
        n_carried:n_carried + region.counts] + scan_outputs
    builder.op('Loop', [trip, first_cond] + initial + counts, loop_outputs,
               body=graph)


def _leading_test(body, exits):
    """The nodes of a ``while`` test at the top of a loop body (before its
    exit, used only by it), or ``None``."""
    if len(exits) != 1 or dict(exits[0].attrs)['where'] != 'here':
        return None
    position = body.nodes.index(exits[0])
    test = body.nodes[:position]
    made = set(v for n in test for v in n.outputs)
    rest = body.nodes[position + 1:]
    if body.inputs[0] in set(v for n in test for v in n.inputs) or any(
            v in made for n in rest for v in n.inputs) or any(
            v in made for v in body.outputs):
        return None
    return test


def _convert_test(builder, test, exit_node, names, renamed, cond):
    """Converts a loop's test on the carried values named by ``renamed``
    (body input -> ONNX name), giving ``cond``: whether to go on."""
    local = dict(names)
    local.update(renamed)
    for inner in test:
        for value in inner.outputs:
            local[value] = builder.fresh('test')
        convert_node(builder, inner, local)
    leaves_on = dict(exit_node.attrs)['when']
    builder.op('Identity' if not leaves_on else 'Not',
               [local[exit_node.inputs[0]]], [cond])


def _typed(name, value, scan=False):
    """A body output's type: the axes that vary by call (``value.symbols``:
    a batch of any size) named, not sized."""
    import onnx.helper

    symbols = value.symbols or {}
    return onnx.helper.make_tensor_value_info(
        name, onnx.helper.np_dtype_to_tensor_dtype(value.dtype),
        [symbols.get(axis, n) for axis, n in enumerate(value.shape)])
