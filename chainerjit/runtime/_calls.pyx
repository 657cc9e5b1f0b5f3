# cython: language_level=3, boundscheck=False, wraparound=False
"""The per-call hot path, compiled with Cython: linking a compiled node
into Chainer's graph (``runtime.function``), the whole call of a jitted
function that hits its cache (``api.JitFunction``'s base class,
:class:`CachedCall`) and the call of a link whose forward is jitted
(``fastpaths.link_call``). Those modules document them."""

from cpython.object cimport PyObject
cimport numpy as cnp
from cpython.object cimport PyTypeObject
from cpython.object cimport Py_TYPE

import time
import weakref

import chainer
import numpy

from chainerjit import errors
from chainerjit.frontend import _keys as _keys_module
from chainerjit.frontend._keys cimport _config
from chainerjit.frontend._keys cimport aliasing
from chainerjit.frontend._keys cimport config_flags
from chainerjit.frontend._keys cimport config_holds
from chainerjit.frontend._keys cimport leaf_arrays
from chainerjit.frontend._keys cimport make_key
from chainerjit.frontend._keys cimport read_params

cnp.import_array()

cdef object _ndarray = numpy.ndarray
cdef object _Variable = chainer.Variable
cdef object _array_types = chainer.get_array_types()
cdef object _chainer_local = chainer._thread_local
cdef object _recording = _keys_module.recording


# --- applying a chainerjit node (``function.lean_apply``) --------------------

cdef object _FunctionNode = chainer.FunctionNode
cdef object _init_unchecked = chainer.Variable._init_unchecked
cdef object _weakref = weakref.ref
cdef object _perf_counter = time.perf_counter


cdef tuple _NO_LAYOUT = (None,)


cdef object _VariableNode = chainer.variable.VariableNode
cdef object _new_object = object.__new__


cpdef object new_variable(object array, bint requires_grad):
    """``Variable._init_unchecked(array, requires_grad=requires_grad)``:
    for a NumPy array, the same attributes of the Variable and its
    VariableNode set to the same values in the same order, without
    Chainer's five Python frames (half the time)."""
    if type(array) is not _ndarray:
        return _init_unchecked(array, requires_grad=requires_grad)
    var = _new_object(_Variable)
    node = _new_object(_VariableNode)
    cdef dict attrs = var.__dict__
    attrs['_requires_grad'] = requires_grad
    attrs['_loss_scale'] = None
    attrs['_grad_var'] = None
    attrs['_device'] = None
    attrs['_grad_valid'] = True
    attrs['_layout'] = None
    attrs['_data'] = [array]
    attrs['_node'] = node
    attrs['_grad'] = None
    attrs = node.__dict__
    attrs['_variable'] = _weakref(var)
    attrs['name'] = None
    attrs['_requires_grad'] = requires_grad
    attrs['_layout'] = None
    attrs['dtype'] = array.dtype
    attrs['shape'] = array.shape
    return var


cdef object _input_variable(object x):
    if isinstance(x, _Variable):
        return x
    if type(x) is _ndarray:
        return new_variable(x, False)
    return _Variable(x, requires_grad=False)


cpdef bint debug_or_function_hooks():
    """Is debug mode on, or a function hook active in this thread: would
    Chainer's checks or a hook see every node applied?"""
    return _config('debug') or \
        bool(getattr(_chainer_local, 'function_hooks', None))


cdef bint _plain_numpy_call(object node, list input_vars):
    """Would ``FunctionNode.apply`` only run ``forward`` and link the
    graph for these inputs: NumPy arrays in the default layout, no
    function hooks, no debug mode and no static graph?"""
    if debug_or_function_hooks() or _config('schedule_func') is not None \
            or node._n_local_function_hooks != 0 or node.is_elementwise:
        return False
    for v in input_vars:
        if type(v._data[0]) is not _ndarray or v._layout is not None:
            return False
    return True


cpdef tuple lean_apply(object node, object inputs):
    """``node.apply(inputs)`` without the steps of ``FunctionNode.apply``
    that do nothing for a plain NumPy call (see :func:`_plain_numpy_call`):
    a chainerjit node, or an eager loss on a jitted output (``losses``);
    anything else takes Chainer's own ``apply``. It type-checks the inputs
    (a chainerjit node's check is empty), links the node into the graph
    and retains the inputs and outputs its forward asks for exactly as
    that does, reading Chainer 7's attributes (``_node``, ``_rank``) where
    its properties only return them."""
    cdef list input_vars = [_input_variable(x) for x in inputs]
    if not _plain_numpy_call(node, input_vars):
        return _FunctionNode.apply(node, input_vars)
    cdef Py_ssize_t n_in = len(input_vars), rank = 0
    cdef bint requires_grad = False
    for v in input_vars:
        if v._requires_grad:
            requires_grad = True
    cdef tuple in_data = tuple([v._data[0] for v in input_vars])
    node._input_layouts = _NO_LAYOUT * n_in
    if _config('type_check'):
        node._check_data_type_forward(in_data)
    node._input_indexes_to_retain = None
    node._output_indexes_to_retain = None
    outputs = node.forward(in_data)
    cdef Py_ssize_t n_out = len(outputs)
    node._output_layouts = _NO_LAYOUT * n_out
    node._output_count = n_out
    cdef tuple ret = tuple([new_variable(y, requires_grad)
                            for y in outputs])
    if _config('enable_backprop'):
        for v in input_vars:
            if v._node._rank > rank:
                rank = v._node._rank
        node.rank = rank
        for y in ret:
            y._node._creator_node = node
            y._node._rank = rank + 1
        node.inputs = tuple([v._node for v in input_vars])
        node.outputs = tuple([_weakref(y._node) for y in ret])
        _retain(node, input_vars, ret, outputs)
        node.lazy_grad_sum = _config('lazy_grad_sum')
    return ret


cdef void _retain(object node, list input_vars, tuple ret,
                  object outputs) except *:
    """What ``FunctionNode.apply`` keeps of the inputs and outputs that
    ``node.forward`` retained (``retain_inputs``, ``retain_outputs``)."""
    if node._input_indexes_to_retain is not None:
        for index in node._input_indexes_to_retain:
            input_vars[index].retain_data()
    if node._output_indexes_to_retain is not None:
        retained = []
        for index in node._output_indexes_to_retain:
            ret[index].retain_data()
            retained.append(outputs[index])
        node._retained_output_data = tuple(retained)


# --- a call that hits the cache (``api.JitFunction``) ----------------------

cdef object _MISS = object()
cdef object _VMError = errors.VMError
cdef object _node_classes = None  # (CompiledFunction, _Output), on first use


cdef tuple _nodes():
    global _node_classes
    if _node_classes is None:
        from chainerjit.runtime import function
        _node_classes = (function.CompiledFunction, function._Output)
    return _node_classes


cpdef bint takes_jitted_output(object inputs):
    """Outside a recording, is one of ``inputs`` (of an eager node about
    to be applied, ``losses``) a jitted forward's output: a Variable whose
    creator is a chainerjit node?"""
    if _recording.recorder is not None:
        return False
    cdef tuple jitted = _nodes()
    for x in inputs:
        if isinstance(x, _Variable):
            node = x._node
            if node is not None and type(node._creator_node) in jitted:
                return True
    return False


cdef class CachedCall:
    """The base class of ``api.JitFunction``: its ``__call__`` runs a call
    that hits the cache in C (:func:`_hit`), and any other call with
    ``self.call_general`` in Python. It remembers the key of the last
    call it made one for whose arguments were all distinct NumPy arrays,
    and the arrays' shapes and dtypes (:func:`_known_key`)."""
    # (((shape, dtype), ...), key, train, enable_backprop) of that call,
    # set in one assignment, so that threads see one call's whole.
    cdef tuple _remembered

    def __call__(self, *args, **kwargs):
        result = _hit(self, args, kwargs)
        if result is _MISS:
            return self.call_general(args, kwargs)
        return result


def jitted_forward(link):
    """The jitted function ``link``'s call runs, or None (see
    :func:`_jitted_forward`)."""
    return _jitted_forward(link)


# --- calling a link whose forward is jitted (``chainerjit.fastpaths.link_call``) ------

cdef object _Link = chainer.Link
cdef object _chainer_link_call = chainer.Link.__call__  # the fallback
cdef str _FORWARD = 'forward'
cdef dict _mixin_free = {}  # link class -> no ``__call__`` after Link in MRO

cdef extern from "Python.h":
    PyObject* _PyType_Lookup(PyTypeObject* kind, PyObject* name)
    object PyObject_GenericGetDict(object obj, void* context)


def link_call(self, *args, **kwargs):
    """``chainer.Link.__call__``: for a link whose ``forward`` is jitted,
    while no link hook is registered (globally or on the link), the call
    of the jitted forward; for any other link or call, Chainer's own.
    The same as Chainer's there (which calls ``self.forward`` after the
    hooks, of which there are none), minus its Python frame."""
    cdef object forward = _jitted_forward(self)
    if forward is None or not self._Link__init_done or \
            getattr(_chainer_local, 'link_hooks', None) or \
            self._local_link_hooks:
        return _chainer_link_call(self, *args, **kwargs)
    result = _hit(forward, args, kwargs)
    if result is _MISS:
        return forward.call_general(args, kwargs)
    return result


# While a forward that cannot be compiled runs eagerly, the links it calls
# run jitted forwards of their own (``api.JitFunction._fallback``):
# {id(link): (link, JitFunction)} of those links, and how deep such runs
# are nested.
cdef dict _segments = {}
cdef int _segment_depth = 0


class segments(object):
    """``with segments(forwards):`` for the time of an eager run, the call
    of a link in ``forwards`` (``{id(link): (link, jitted forward)}``) is
    the call of its jitted forward (see :func:`link_call`)."""

    def __init__(self, forwards):
        self.forwards = forwards

    def __enter__(self):
        global _segment_depth
        self.saved = dict((k, _segments[k]) for k in self.forwards
                          if k in _segments)
        _segments.update(self.forwards)
        _segment_depth += 1

    def __exit__(self, *exc):
        global _segment_depth
        _segment_depth -= 1
        for k in self.forwards:
            _segments.pop(k, None)
        _segments.update(self.saved)


cdef object _jitted_forward(object link):
    """What ``link.forward`` gives if it is a jitted function and Chainer's
    ``Link.__call__`` would call it (no mixin's ``__call__`` comes first),
    else None; runs no Python code of the link. Inside :class:`segments`,
    a link given there gets its jitted forward too."""
    cdef object kind = type(link)
    cdef PyObject* raw = _PyType_Lookup(<PyTypeObject*>kind,
                                         <PyObject*>_FORWARD)
    cdef dict own
    if raw is not NULL and Py_TYPE(<object>raw).tp_descr_set is not NULL:
        return None  # a data descriptor: link.forward is what it makes
    # (not through a recording's ``Link.__getattribute__``: the model's
    # numbers a forward reads, ``model_state.unread_numbers``)
    own = PyObject_GenericGetDict(link, NULL)
    forward = own.get('forward') if own is not None else None
    if forward is None and raw is not NULL and \
            isinstance(<object>raw, CachedCall):
        forward = (<object>raw).__get__(link, kind)
    if forward is None and _segment_depth:
        found = _segments.get(id(link))
        if found is not None and found[0] is link:
            forward = found[1]
    if not isinstance(forward, CachedCall) or not _no_mixin_call(kind):
        return None
    return forward


def set_link_call_fallback(fallback):
    """Makes :func:`link_call` run ``fallback`` (Chainer's ``Link.
    __call__`` by default) where it does not take the fast path; returns
    the previous one. For tests, which spy on it."""
    global _chainer_link_call
    previous, _chainer_link_call = _chainer_link_call, fallback
    return previous


cdef bint _no_mixin_call(object kind):
    """Does ``getattr(super(Link, link), '__call__', None)``, Chainer's
    test for a mixin's ``__call__``, give None for links of ``kind``?"""
    answer = _mixin_free.get(kind)
    if answer is None:
        mro = kind.__mro__
        answer = not any('__call__' in vars(base)
                         for base in mro[mro.index(_Link) + 1:])
        _mixin_free[kind] = answer
    return answer


cdef bint _plain_call(tuple args, dict kwargs):
    """Arrays and Variables only, none in a list, while no recording,
    hook or debug mode is active: the calls :func:`_hit` takes."""
    if kwargs or _recording.recorder is not None or \
            debug_or_function_hooks() or \
            getattr(_chainer_local, 'link_hooks', None):
        return False
    for arg in args:
        if type(arg) is not _ndarray and not isinstance(arg, _Variable) \
                and not isinstance(arg, _array_types):
            return False
    return True


cdef object _hit(CachedCall jitfn, tuple args, dict kwargs):
    """``jitfn(*args, **kwargs)`` when its key's newest entry is found (or
    the entry compiled for any size that answered the key before, with
    its trip counts: ``cache.Cache.remember_general``) and its model
    checked since the last change and its Python guards holding
    (``cache.Entry.fetch_params``), else
    :data:`_MISS`, having done nothing. An entry
    without a program for the call runs it eagerly, as ``call_general``
    would."""
    if not _plain_call(args, kwargs):
        return _MISS
    train, backprop = config_flags()
    get_instance = jitfn._get_instance
    instance = None
    if get_instance is not None:
        instance = get_instance()
        if instance is None:
            return _MISS
    cdef list leaves
    key = _known_key(jitfn, args, train, backprop)
    if key is not None:
        leaves = list(args)
    else:
        try:
            key, leaves = make_key(args, None, train, backprop)
        except errors.UnsupportedArgument:
            return _MISS  # call_general warns and runs it eagerly
        _remember_key(jitfn, key, args, train, backprop)
    cache = jitfn.cache
    bucket = cache._buckets.get(key)
    cdef list symbols = []
    if bucket:
        entry = bucket[0]
        if entry.symbolic is not None or not entry.values_checked:
            return _MISS
    else:
        # An entry compiled for any size that answered this key before.
        general = cache._general.get(key)
        if general is None:
            if jitfn.budget.stopped is not None and not cache._symbolics:
                cache.misses += 1  # a miss the function no longer records
                return jitfn._fallback(instance, args, kwargs)
            return _MISS
        entry, found = general
        symbols = list(found)
    cdef list epoch = entry._model_epoch
    if entry._epoch != epoch[0]:
        # (numbers assigned over numbers only: those it guards)
        if entry._structure != epoch[1] or not entry.numbers_hold():
            return _MISS
        entry._epoch = epoch[0]
    if entry._owners is None or not config_holds(entry.config_reads):
        return _MISS
    for guard in entry.py_guards:
        if not guard.holds():
            return _MISS
    params = read_params(entry._owners, entry.param_specs)
    if params is None:
        return _MISS
    cdef bint training = backprop and needs_grad(entry._owners, leaves)
    cache._lru.move_to_end(entry)
    cache.hits += 1
    entry.hits += 1
    jitfn.last_entry = entry
    if (entry.training if training else entry.program) is None:
        return jitfn._fallback(instance, args, kwargs, True)  # no program
    return run_entry(jitfn, entry, leaves, params, symbols, instance, args,
                     kwargs, training)


cdef object _known_key(CachedCall fn, tuple args, bint train,
                       bint backprop):
    """The key :func:`make_key` would make for ``args``, if it is the
    one ``fn`` remembers (all arguments distinct NumPy arrays of the same
    shapes and dtypes, in the same configuration), else None: about a
    tenth of the time of making it."""
    cdef tuple remembered = fn._remembered
    cdef tuple known
    cdef Py_ssize_t i, j
    if remembered is None:
        return None
    known, key, known_train, known_backprop = remembered
    if len(args) != len(known) or train != known_train or \
            backprop != known_backprop:
        return None
    for i in range(len(args)):
        arg, (shape, dtype) = args[i], known[i]
        if type(arg) is not _ndarray or arg.dtype is not dtype or \
                arg.shape != shape:
            return None
        for j in range(i):
            if args[j] is arg:
                return None
    return key


cdef void _remember_key(CachedCall fn, tuple key, tuple args, bint train,
                        bint backprop):
    """Keeps ``key`` for :func:`_known_key` if ``args`` are all distinct
    NumPy arrays (the key's aliasing entry, its last, is then None)."""
    for arg in args:
        if type(arg) is not _ndarray:
            return
    if key[4] is not None:
        return
    fn._remembered = (tuple([(arg.shape, arg.dtype) for arg in args]), key,
                      train, backprop)


cpdef bint needs_grad(list owners, list leaves):
    """May a call need gradients: does an argument or a model Variable
    (an owner ``(variable, None)``) require grad?"""
    for leaf in leaves:
        if isinstance(leaf, _Variable) and leaf._requires_grad:
            return True
    for owner in owners or ():
        if owner[1] is None and owner[0]._requires_grad:
            return True
    return False


cpdef list model_inputs(list owners, list params):
    """What a training node takes from the model: the Variables that hold
    the arrays read (so that gradients reach them), or the arrays
    themselves (persistents)."""
    return [owner[0] if owner[1] is None else array
            for owner, array in zip(owners, params)]


cpdef object run_entry(object jitfn, object entry, list leaves, list params,
                       list symbols, object instance, tuple args,
                       object kwargs, bint training):
    """Runs a found entry (``cache.Entry``): its training program as one
    node of Chainer's graph, with the model's Variables as inputs so that
    backprop reaches them, or its program; then replays its effects and
    returns the call's result. A kernel's error goes to
    ``jitfn._after_vm_error``. While the entry's backend is still to be
    chosen (``entry.deferred``), the run is timed, and the call that finds
    the choice due makes it first (``jitfn._choose_backend``)."""
    cdef object deferred = entry.deferred
    if deferred is None:
        return _run_entry(jitfn, entry, leaves, params, symbols, instance,
                          args, kwargs, training)
    if deferred.due(training):
        jitfn._choose_backend(entry, leaf_arrays(leaves) + params + symbols,
                              training)
    cdef double start = _perf_counter()
    result = _run_entry(jitfn, entry, leaves, params, symbols, instance,
                        args, kwargs, training)
    deferred.ran(training, _perf_counter() - start)
    return result


cdef object _run_entry(object jitfn, object entry, list leaves, list params,
                       list symbols, object instance, tuple args,
                       object kwargs, bint training):
    try:
        if training:
            node = _nodes()[0](entry.training, symbols)
            outs = publish(node, lean_apply(
                node, leaves + model_inputs(entry._owners, params)),
                entry.output_requires_grad)
        else:
            outs = entry.program.run(leaf_arrays(leaves) + params + symbols)
    except _VMError as e:
        return jitfn._after_vm_error(entry, e, instance, args, kwargs)
    if entry.effects:
        if not training:
            outs = entry.share_stored_outputs(outs)
        entry.replay_effects(instance, outs, leaves)
    return build_result(entry, outs, leaves, instance)


cpdef object build_result(object entry, tuple outs, list leaves,
                          object instance):
    """A call's result, shaped as eager's, from program outputs: a single
    output here, anything else by ``entry.build_structure``."""
    structure, specs = entry.outputs
    if structure == 'V':
        kind, where, is_var, grad = specs[0]
        if kind == 'value':
            return as_variable(outs[where], grad)
    return entry.build_structure(outs, leaves, instance)


cpdef object as_variable(object out, bint requires_grad):
    """A result Variable: the training node's output as it is, or a new
    Variable around an array the VM computed."""
    if isinstance(out, _Variable):
        return out
    return new_variable(out, requires_grad)


def compiled_init(self, training, symbols=()):
    """``function.CompiledFunction.__init__``."""
    self.training = training
    self.symbols = list(symbols)  # trip counts of symbolic loops
    self._saved = None
    self._published = ()  # weakrefs to the Variables handed out
    self._connected = ()  # which of them have an _Output node
    self._cut_nodes = frozenset()  # see CompiledFunction.unchain


def compiled_forward(self, inputs):
    """``function.CompiledFunction.forward``: runs the training forward
    program and keeps the values the backward reads."""
    training = self.training
    cdef tuple outs = training.forward.run(list(inputs) + self.symbols)
    cdef Py_ssize_t n = training.n_outputs
    self._saved = outs[n:]
    return outs[:n]


def compiled_backward(self, indexes, grad_outputs, backward=None,
                      grad_index=None, saved=None):
    """``function.CompiledFunction.backward``: runs the backward program
    (or ``backward``, reading the saved values at positions ``saved`` and
    giving gradients at ``grad_index``) on the saved values and the output
    gradients."""
    if _config('enable_backprop'):
        raise NotImplementedError(
            'chainerjit: double backprop (enable_double_backprop=True) '
            'through a compiled function is not supported: its backward '
            'runs compiled array code, which builds no graph. Call the '
            'function eagerly for this (the undecorated method, or '
            'chainerjit.jit(f).__wrapped__).')
    training = self.training
    cdef list args = list(self._saved)
    _read_retained_inputs(self.inputs, training.saved_inputs, args)
    if backward is None:
        backward, grad_index = training.backward, training.grad_index
    else:
        args = [args[k] for k in saved]
    for gy in grad_outputs:
        args.append(None if gy is None else gy._data[0])
    cdef tuple grads = backward.run(args + self.symbols)
    cdef list result = []
    for i in indexes:
        k = grad_index[i]
        grad = None if k is None else grads[k]
        result.append(None if grad is None else
                      new_variable(grad, False))
    return tuple(result)


cdef void _read_retained_inputs(tuple inputs, list saved_inputs,
                                list args) except *:
    """Puts in ``args`` (the saved values) the arrays the Variables of
    ``inputs`` hold now, where one was replaced since the forward
    (``param.array = ...``): eager's backward reads a retained input
    through its Variable (``TrainingProgram.saved_inputs``)."""
    cdef tuple pair
    for pair in saved_inputs:
        variable = inputs[pair[1]].get_variable_or_none()
        if variable is None:
            continue
        current = variable._data[0]
        saved = args[pair[0]]
        if current is saved or current is None:
            continue
        if type(current) is not type(saved) or \
                current.shape != saved.shape or current.dtype != saved.dtype:
            raise ValueError(
                'chainerjit: the array of %s was replaced between the '
                'forward and the backward by one of another type, shape '
                'or dtype (%s %s%s, was %s %s%s); the compiled backward '
                'cannot use it' % (
                    variable.name or 'an input Variable',
                    type(current).__name__, current.dtype,
                    list(current.shape), type(saved).__name__, saved.dtype,
                    list(saved.shape)))
        args[pair[0]] = current


cdef enum:  # how publish hands out an output: cache.DETACHED, ...
    DETACHED, CONNECTED, NEW_LEAF


cpdef tuple publish(object node, tuple outputs, list requires_grad):
    """The Variables a training call returns for ``node``'s outputs
    (``requires_grad`` says how, for each: ``cache.DETACHED``,
    ``CONNECTED`` or ``NEW_LEAF``): outputs eager would not connect to
    the graph detached (requiring grad where eager's new leaf did), and
    each of several connected outputs behind a node of its own
    (``function._Output``). An output that is the same value as an
    earlier one (a returned loss that the forward also stored and
    reported) is the same Variable, as in eager mode, except a new
    leaf."""
    cdef list first = node.training.first_of
    cdef Py_ssize_t n_flags = len(requires_grad), i
    cdef bint single = len(set(first)) == 1
    cdef int how
    cdef list published = [], connected = []
    for i in range(len(outputs)):
        y = outputs[i]
        how = requires_grad[i] if i < n_flags else CONNECTED
        if first[i] != i and how != NEW_LEAF and how == (
                requires_grad[first[i]] if first[i] < n_flags
                else CONNECTED):
            y = published[first[i]]
        elif how != CONNECTED:
            y = new_variable(y._data[0], how == NEW_LEAF)
        elif not single:
            y, = lean_apply(_nodes()[1](), (y,))
            connected.append(i)
        published.append(y)
    node._published = [_weakref(y) for y in published]
    node._connected = connected
    return tuple(published)




def first_changed(list inputs, tuple positions, list digests,
                  object digest):
    """The first of ``positions`` whose array in ``inputs`` no longer has
    the digest of its bytes in ``digests`` (or is not a C-ordered NumPy
    array, which counts as changed); ``-1`` where none changed.
    ``digest``: the function of an array's bytes (``runtime.backends``,
    whose program with a session owning the parameters checks them so)."""
    cdef Py_ssize_t k
    cdef object array
    for k in range(len(positions)):
        array = inputs[<Py_ssize_t>positions[k]]
        if type(array) is not _ndarray or \
                not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>array) or \
                digest(array) != digests[k]:
            return positions[k]
    return -1
