"""Running a program in onnxruntime.

:func:`session_program` converts a graph (after the passes) to an ONNX model
with ``backend.onnx_graph`` and compiles a :class:`~.program.Program`
whose one instruction calls an onnxruntime session on the program's
inputs: the arguments, the model's parameters, then the trip-count
symbols. The parameters are inputs of the session, not initializers, so
an update of a parameter between calls is seen; constants are
initializers, which onnxruntime may fold and prepack, but for those that
something outside the recording holds (:func:`held_constants`). In serving mode
(``jit(freeze=True)``) the parameters are initializers too, made
read-only in the model (:func:`freeze`).

The session is built once per program, for low latency: every graph
optimisation, sequential execution, and as many threads as NumPy's BLAS
uses (one where the user set one), which sleep between calls.
"""

import functools
import os

import chainer
import numpy

from chainerjit import errors
from chainerjit import ir
from chainerjit import ops
from chainerjit.backend import codegen
from chainerjit.backend import onnx_graph

#: Environment variables that set a thread count, read in order.
THREAD_VARIABLES = ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS',
                    'MKL_NUM_THREADS')


def available():
    """True where onnxruntime can be imported."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def session_program(graph, providers=None, frozen=None, batch=None,
                    read_only=True):
    """A program running ``graph`` as one onnxruntime session.

    ``frozen``: one array or ``None`` per parameter of ``graph``. The
    session owns a frozen parameter's values as an initializer (which
    onnxruntime may fold and prepack). With ``read_only``, a call checks
    that the parameter is still that array and still read-only
    (:func:`freeze` made it so), and fails as a guard does otherwise, so
    that the call is recorded again; without, the caller checks that the
    values did not change (``runtime.backends``).

    ``batch``: ``(input value, recorded batch size)`` makes axis 0 of the
    graph's inputs dynamic (``onnx_graph.Builder``'s ``dynamic_batch``,
    which reads the batch size from that input where the recording had
    it); ``None`` keeps the recorded shapes.

    Raises:
        chainerjit.errors.ExportError: a node has no ONNX converter, or is
            a guard (a branch on an array value); or a Python object (a
            loop's per-iteration lists) would be an input or an output.
    """
    kernel = session_kernel(graph, providers, frozen, batch, read_only)
    return one_kernel_program(graph, kernel)


def one_kernel_program(graph, kernel):
    """A program with ``graph``'s inputs and outputs whose one instruction
    runs ``kernel`` (it returns the outputs as a tuple)."""
    return codegen.compile_graph(_one_node_graph(graph, kernel))


def session_kernel(graph, providers=None, frozen=None, batch=None,
                   read_only=True):
    """The kernel of :func:`session_program`: it takes the graph's
    inputs, parameters and symbols, and returns its outputs."""
    frozen = list(frozen or [None] * len(graph.params))
    model, input_names, output_names = to_onnx(graph, frozen, batch)
    run_session = _runner(session(model, providers))
    n_args = len(graph.inputs)
    n_params = len(frozen)
    fed = list(range(n_args)) + [
        n_args + i for i, array in enumerate(frozen) if array is None] + \
        list(range(n_args + n_params, n_args + n_params + len(graph.symbols)))
    checked = [(n_args + i, array) for i, array in enumerate(frozen)
               if array is not None and read_only]
    held = held_constants(graph)
    fed_values = graph.inputs + [v for v, array in zip(graph.params, frozen)
                                 if array is None] + graph.symbols + held
    # A 0-d value may come as a Python number (a symbol, a number the
    # program computed): fed as a 0-d array of its dtype.
    numbers = [(k, v.dtype) for k, v in enumerate(fed_values)
               if v.shape == ()]

    def run(*arrays):
        for i, array in checked:
            if arrays[i] is not array or array.flags.writeable:
                raise errors.GuardFailed(
                    'a frozen parameter was replaced or made writable')
        values = [arrays[i] for i in fed] + [v.data for v in held]
        for k, dtype in numbers:
            values[k] = numpy.asarray(values[k], dtype)
        feed = dict(zip(input_names, values))
        return tuple(run_session(output_names, feed))

    return ops.Kernel(run, multi=True)


def _runner(session):
    """``session.run`` without its checks of the feed, which cost more
    than a small model's whole run (a third of an MLP's at batch 1): the
    kernels above always feed every input the session has, as NumPy
    arrays. Falls back to ``session.run`` where onnxruntime has no
    ``_sess`` (its binding) to call."""
    binding = getattr(session, '_sess', None)
    if binding is None or not hasattr(binding, 'run'):
        return session.run
    return lambda output_names, feed: binding.run(output_names, feed, None)


def region_program(graph, providers=None, vm_when_faster=False):
    """A program running each longest run of consecutive nodes that
    convert to ONNX as an onnxruntime session of its own, and the nodes
    between them (no converter) on the VM. With ``vm_when_faster``, the
    nodes whose converter is marked ``ops.vm_faster_on_cpu`` run on the
    VM too. Returns ``(program, number of sessions, names of the nodes
    left to the VM)``.

    Raises:
        chainerjit.errors.ExportError: no node converts, or the program
            would take more than :data:`MAX_SESSIONS` sessions.
    """
    names = onnx_graph.names_of(graph)
    converts = [_converts(node, names) and not (
        vm_when_faster and runs_faster_on_vm(node)) for node in graph.nodes]
    if not any(converts):
        raise errors.ExportError('no node converts to ONNX')
    runs = _runs(graph.nodes, converts)
    n_sessions = sum(1 for _, on_ort in runs if on_ort)
    if n_sessions > MAX_SESSIONS:
        raise errors.ExportError(
            'it would take %d sessions, the VM between them' % n_sessions)
    split = ir.Graph(graph.name)
    split.inputs, split.params = graph.inputs, graph.params
    split.symbols, split.consts = graph.symbols, graph.consts
    split.outputs = graph.outputs
    for k, (nodes, on_ort) in enumerate(runs):
        if not on_ort:
            for node in nodes:
                split.add_node(node)
            continue
        later = set(graph.outputs)
        for rest, _ in runs[k + 1:]:
            later.update(v for node in rest for v in node.inputs)
        sub = _region_graph(graph, nodes, later)
        split.add_node(ir.Node(
            'OnnxRuntime', session_kernel(sub, providers),
            sub.inputs + sub.symbols, sub.outputs, pure=False))
    left = [node.op for nodes, on_ort in runs if not on_ort
            for node in nodes]
    return codegen.compile_graph(split), n_sessions, left


#: The most sessions a program runs in, the VM between them: each call of
#: one costs tens of microseconds, and building one a millisecond or two
#: when the program is compiled; a program split more finely stays on the
#: VM.
MAX_SESSIONS = 8


def runs_faster_on_vm(node):
    """Does the VM run ``node`` faster than onnxruntime on the CPU (its
    converter is marked so: ``ops.vm_faster_on_cpu``)?"""
    return node.kernel.onnx is not None and \
        ops.is_vm_faster_on_cpu(node.kernel.onnx)


def _converts(node, names):
    """Does ``node`` convert to ONNX (tried on a scratch builder)?"""
    try:
        onnx_graph.convert_node(onnx_graph.Builder(False), node, names)
    except Exception:  # ExportError, or a converter's own refusal
        return False
    return True


def _runs(nodes, converts):
    """``[(nodes, converts), ...]``: the longest runs of consecutive nodes
    alike in ``converts``."""
    runs = []
    for node, ok in zip(nodes, converts):
        if runs and runs[-1][1] == ok:
            runs[-1][0].append(node)
        else:
            runs.append(([node], ok))
    return runs


def _region_graph(graph, nodes, later):
    """The graph of a run of ``nodes``: its inputs are the values they
    read that none of them computes (constants aside), its outputs those
    they compute that ``later`` (what comes after, the graph's outputs)
    reads."""
    sub = ir.Graph(graph.name)
    defined = set(v for node in nodes for v in node.outputs)
    consts = set(graph.consts)
    for node in nodes:
        for value in node.inputs:
            if value in defined or value in sub.inputs or \
                    value in sub.symbols or value in sub.consts:
                continue
            if value in consts:
                sub.consts.append(value)
            elif value.kind == 'sym':
                sub.symbols.append(value)
            else:
                sub.inputs.append(value)
        sub.add_node(node)
    sub.outputs = [v for node in nodes for v in node.outputs
                   if v in later]
    return sub


def freeze(arrays):
    """Makes the arrays a session owns read-only, so that a write into one
    is an error instead of a result the session would not see. Returns
    those that were writable."""
    changed = [array for array in arrays if array.flags.writeable]
    for array in changed:
        array.flags.writeable = False
    return changed


def can_freeze(array):
    """An array that holds its own memory: making it read-only stops every
    write into it (a view's base could still be written)."""
    return type(array) is numpy.ndarray and array.base is None


def to_onnx(graph, frozen=None, batch=None):
    """``(model, input names, output names)`` of ``graph`` as an ONNX
    model whose inputs are the program's but the ``frozen`` parameters
    (one array or ``None`` per parameter), which are initializers; with
    a dynamic ``batch`` (see :func:`session_program`)."""
    names = onnx_graph.names_of(graph)
    builder = onnx_graph.Builder(False) if batch is None else \
        onnx_graph.Builder(True, names[batch[0]], batch[1])
    for value in graph.all_consts():
        if not value.held:
            builder.constant(chainer.backend.CpuDevice().send(value.data),
                             names[value])
    frozen = frozen or [None] * len(graph.params)
    for value, array in zip(graph.params, frozen):
        if array is not None:
            builder.constant(array, names[value])
    onnx_graph.convert_nodes(builder, graph.nodes, names)
    inputs = graph.inputs + [v for v, array in zip(graph.params, frozen)
                             if array is None] + graph.symbols + \
        held_constants(graph)
    if any(v.dtype == object for v in inputs + graph.outputs):
        raise errors.ExportError(
            'a Python object (the per-iteration values a loop keeps for '
            'its backward, a gradient that is None) would be an input or '
            'an output of the session')
    shaped = not graph.symbols and batch is None
    outputs = [builder.op('Identity', [names[v]], ['y%d' % i])[0]
               for i, v in enumerate(graph.outputs)]
    model = onnx_graph.model(
        builder, graph.name or 'program',
        [onnx_graph.value_info(_type(v), names[v], batch is not None and
                               v in graph.inputs, v.symbols)
         for v in inputs],
        [onnx_graph.value_info(_type(v), name, False, shaped=shaped)
         for v, name in zip(graph.outputs, outputs)])
    return model, [names[v] for v in inputs], outputs


def held_constants(graph):
    """The constants of ``graph`` whose arrays something outside the
    recording holds (``ir.Value.held``: a link out of the program's
    reach, a global), which may change in place: inputs of a session,
    fed as they are on each call (the VM reads them so), not
    initializers it would copy."""
    return [v for v in graph.all_consts() if v.held]


def _type(value):
    return value.shape, value.dtype


def session(model, providers=None):
    """An onnxruntime session of the ONNX ``model`` set for low latency;
    its errors come back as exceptions, not written to stderr."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = \
        onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = thread_count()
    options.inter_op_num_threads = 1
    options.log_severity_level = 4  # (errors are raised, and handled)
    # Its threads sleep when done instead of spinning: between two calls
    # the process runs other work (NumPy's BLAS threads, Chainer), which
    # spinning threads would slow down.
    options.add_session_config_entry('session.intra_op.allow_spinning', '0')
    return onnxruntime.InferenceSession(
        model.SerializeToString(), options,
        providers=providers or ['CPUExecutionProvider'])


def thread_count():
    """The threads a session gets: as many as NumPy's BLAS uses now (as
    ``threadpoolctl`` reports it, so that ``threadpool_limits(1)`` counts),
    else the first of ``THREAD_VARIABLES`` that is set
    (``OMP_NUM_THREADS=1`` gives one), else the cores."""
    blas = _blas_threads()
    if blas:
        return blas
    for name in THREAD_VARIABLES:
        value = os.environ.get(name, '')
        if value.isdigit() and int(value) > 0:
            return int(value)
    return os.cpu_count() or 1


def _blas_threads():
    controller = _blas_controller()
    if controller is None:
        return None
    counts = [pool.get('num_threads') for pool in controller.info()
              if pool.get('num_threads')]
    return min(counts) if counts else None


@functools.lru_cache(maxsize=None)
def _blas_controller():
    """``threadpoolctl``'s controller of the BLAS libraries loaded, found
    once (finding them walks the process's libraries: a millisecond, for
    every session built); asked for their threads on each use."""
    try:
        import threadpoolctl
    except ImportError:
        return None
    return threadpoolctl.ThreadpoolController().select(user_api='blas')


def _one_node_graph(graph, kernel):
    """A graph with ``graph``'s inputs and outputs and one node, running
    ``kernel``."""
    single = ir.Graph(graph.name)
    single.inputs, single.params = graph.inputs, graph.params
    single.symbols = graph.symbols
    outputs = []
    for value in graph.outputs:  # an output may be an input, or repeated
        outputs.append(ir.Value('temp', value.shape, value.dtype))
    single.add_node(ir.Node(
        'OnnxRuntime', kernel, graph.inputs + graph.params + graph.symbols,
        outputs, pure=False))
    single.outputs = outputs
    return single
