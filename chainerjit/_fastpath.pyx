# cython: language_level=3, boundscheck=False, wraparound=False
"""The per-call hot path, compiled with Cython: call keys (``signature``),
parameter guards (``cache``), linking a compiled node into Chainer's graph
(``function``) and the whole call of a jitted function that hits its
cache (``api.JitFunction``'s base class, :class:`CachedCall`).
``signature.py``, ``cache.py``, ``function.py`` and ``api.py`` document
them."""

from cpython.object cimport PyObject
from cpython.object cimport PyTypeObject
from cpython.object cimport Py_TYPE

import heapq
import threading
import weakref

import chainer
from chainer import _backprop_utils
import numpy

from chainerjit import errors

cdef object _ndarray = numpy.ndarray
cdef object _Variable = chainer.Variable
cdef object _Parameter = chainer.Parameter
cdef object _generic = numpy.generic
cdef tuple _STATIC_TYPES = (type(None), bool, int, float, str, numpy.dtype)
cdef object _array_types = chainer.get_array_types()


cdef object _local = chainer.config._local
cdef object _global = chainer.config._global
cdef object _chainer_local = chainer._thread_local


class _Recording(threading.local):
    recorder = None


#: This thread's recording (``trace``): ``recorder`` is set while a
#: forward is recorded.
recording = _Recording()
cdef object _recording = recording

#: A count of attribute assignments on links (``cache``).
link_epoch = [0]
cdef list _link_epoch = link_epoch


cdef object _config(str name):
    """``chainer.config.<name>``, read as ``chainer.configuration.
    LocalConfig`` does, without its ``__getattr__``."""
    cdef dict local = _local.__dict__
    return local[name] if name in local else getattr(_global, name)


class _Absent(object):
    def __repr__(self):
        return '(absent)'


#: A value that is not there (a configuration entry not set; ``guards``).
ABSENT = _Absent()
cdef object _ABSENT = ABSENT


cpdef bint config_holds(tuple reads):
    """Does ``chainer.config`` still hold each ``(name, value)`` of
    ``reads`` (``guards.config_reads``)? Scalars and dtypes are compared
    by value (floats by ``repr``, so that -0.0 is not 0.0), other objects
    by identity."""
    cdef dict local = _local.__dict__
    cdef tuple read
    for read in reads:
        name, expected = read
        current = local[name] if name in local else \
            getattr(_global, name, _ABSENT)
        if current is expected:
            continue
        if type(current) is not type(expected) or \
                not isinstance(current, _STATIC_TYPES) or \
                current != expected or (type(current) is float and
                                        repr(current) != repr(expected)):
            return False
    return True


cpdef tuple config_flags():
    """``(chainer.config.train, chainer.config.enable_backprop)``."""
    return _config('train'), _config('enable_backprop')


cdef object _cupy_ndarray = chainer.backends.cuda.ndarray \
    if chainer.backends.cuda.available else None
cdef list _gpu_names = []  # 'gpu0', 'gpu1', ...


cpdef str array_device(array):
    """``'cpu'`` for NumPy arrays, ``'gpu0'``, ... for CuPy arrays."""
    cdef Py_ssize_t i
    if isinstance(array, _ndarray):
        return 'cpu'
    if _cupy_ndarray is not None and isinstance(array, _cupy_ndarray):
        i = array.device.id
        while len(_gpu_names) <= i:
            _gpu_names.append('gpu%d' % len(_gpu_names))
        return _gpu_names[i]
    device = chainer.backend.get_device_from_array(array)
    if hasattr(device, 'device'):
        return 'gpu%d' % device.device.id
    return str(device)


cpdef object flatten(object obj, list leaves):
    """Returns the hashable structure of ``obj``, appending its Variables
    and arrays to ``leaves`` in order.

    Raises:
        chainerjit.errors.UnsupportedArgument: for an argument that is not
            a Variable, an array, a static Python value or a list, tuple or
            dict of those.
    """
    cdef object kind = type(obj)
    if kind is _ndarray:
        leaves.append(obj)
        return 'A'
    if kind is _Variable or kind is _Parameter or isinstance(obj, _Variable):
        leaves.append(obj)
        return 'V'
    if isinstance(obj, _array_types):
        leaves.append(obj)
        return 'A'
    if kind is float:  # repr tells 0.0 from -0.0, which compare equal
        return ('S', kind, obj, repr(obj))
    if isinstance(obj, _STATIC_TYPES) or isinstance(obj, _generic):
        return ('S', kind, obj)
    if kind is tuple or kind is list:
        return (kind.__name__, tuple([flatten(item, leaves) for item in obj]))
    if kind is dict:
        keys = tuple(obj)
        return ('dict', keys, tuple([flatten(obj[k], leaves) for k in keys]))
    raise errors.UnsupportedArgument(
        'an argument of type %s (chainerjit takes Variables, arrays, '
        'Python scalars, None and lists, tuples and dicts of them)'
        % kind.__name__)


cpdef object leaf_array(object leaf):
    """The array of a leaf: ``leaf.array`` for a Variable."""
    if isinstance(leaf, _Variable):
        return leaf._data[0]
    return leaf


cpdef list leaf_arrays(list leaves):
    """The arrays of the leaves."""
    return [leaf._data[0] if isinstance(leaf, _Variable) else leaf
            for leaf in leaves]


cpdef tuple leaf_spec(object leaf):
    """``(shape, dtype, device, requires_grad, is_variable)`` of a leaf."""
    cdef object array
    if type(leaf) is _ndarray:
        return (leaf.shape, leaf.dtype, 'cpu', False, False)
    if isinstance(leaf, _Variable):
        array = leaf._data[0]
        if array is None:
            raise errors.UnsupportedArgument(
                'an uninitialized Variable (its array is None)')
        return (array.shape, array.dtype, array_device(array),
                leaf.requires_grad, True)
    return (leaf.shape, leaf.dtype, array_device(leaf), False, False)


cpdef object aliasing(list leaves):
    """``None`` when every leaf and its array are distinct, else, for each
    leaf, the indexes of the first leaf that is the same object and of the
    first leaf holding the same array."""
    arrays = [id(leaf_array(leaf)) for leaf in leaves]
    if len(set(arrays)) == len(arrays):
        return None
    objects = [id(leaf) for leaf in leaves]
    return tuple([(objects.index(o), arrays.index(a))
                  for o, a in zip(objects, arrays)])


cpdef tuple make_key(tuple args, dict kwargs, bint train,
                     bint enable_backprop):
    """Returns ``(key, leaves)`` for a call: the key is ``(train,
    enable_backprop, structure, leaf specs, aliasing)``."""
    cdef list leaves = []
    cdef object structure = flatten(args, leaves)
    if kwargs:
        structure = (structure, flatten(kwargs, leaves))
    cdef tuple specs = tuple([leaf_spec(leaf) for leaf in leaves])
    alias = aliasing(leaves) if len(leaves) > 1 else None
    return (train, enable_backprop, structure, specs, alias), leaves


cpdef list read_params(list owners, list specs):
    """Reads the model arrays a program takes (``cache.Entry``): each
    owner is ``(parameter, None)`` or ``(link, name)`` and each spec
    ``(shape, dtype, class, device)``. Returns ``None`` if one no longer
    matches its spec."""
    cdef list arrays = []
    cdef Py_ssize_t i
    cdef tuple owner, spec
    for i in range(len(owners)):
        owner = owners[i]
        spec = specs[i]
        if owner[1] is None:
            array = owner[0]._data[0]
        else:
            array = getattr(owner[0], owner[1], None)
        if type(array) is not spec[2] or array.shape != spec[0]:
            return None
        dtype = array.dtype
        if dtype is not spec[1] and dtype != spec[1]:
            return None
        if spec[3] is not None and array_device(array) != spec[3]:
            return None
        arrays.append(array)
    return arrays


# --- applying a chainerjit node (``function.lean_apply``) --------------------

cdef object _FunctionNode = chainer.FunctionNode
cdef object _init_unchecked = chainer.Variable._init_unchecked
cdef object _weakref = weakref.ref


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
        from chainerjit import function
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


# --- calling a link whose forward is jitted (``chainerjit.link_call``) ------

cdef object _Link = chainer.Link
cdef object _chainer_link_call = chainer.Link.__call__  # the fallback
cdef str _FORWARD = 'forward'
cdef dict _mixin_free = {}  # link class -> no ``__call__`` after Link in MRO

cdef extern from "Python.h":
    PyObject* _PyType_Lookup(PyTypeObject* kind, PyObject* name)


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


cdef object _jitted_forward(object link):
    """What ``link.forward`` gives if it is a jitted function and Chainer's
    ``Link.__call__`` would call it (no mixin's ``__call__`` comes first),
    else None; runs no Python code of the link."""
    cdef object kind = type(link)
    cdef PyObject* raw = _PyType_Lookup(<PyTypeObject*>kind,
                                         <PyObject*>_FORWARD)
    cdef dict own
    if raw is not NULL and Py_TYPE(<object>raw).tp_descr_set is not NULL:
        return None  # a data descriptor: link.forward is what it makes
    own = getattr(link, '__dict__', None)
    forward = own.get('forward') if own is not None else None
    if forward is None and raw is not NULL and \
            isinstance(<object>raw, CachedCall):
        forward = (<object>raw).__get__(link, kind)
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
    """``jitfn(*args, **kwargs)`` when its key's newest entry is compiled
    and its model checked since the last change (``cache.Entry.
    fetch_params``), else :data:`_MISS`, having done nothing."""
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
    if not bucket:
        return _MISS
    entry = bucket[0]
    if entry.symbolic is not None or entry._epoch != _link_epoch[0] or \
            entry._owners is None or entry.py_guards or \
            not config_holds(entry.config_reads):
        return _MISS
    params = read_params(entry._owners, entry.param_specs)
    if params is None:
        return _MISS
    cdef bint training = backprop and needs_grad(entry._owners, leaves)
    if (entry.training if training else entry.program) is None:
        return _MISS
    cache._lru.move_to_end(entry)
    cache.hits += 1
    entry.hits += 1
    jitfn.last_entry = entry
    return run_entry(jitfn, entry, leaves, params, [], instance, args,
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
    ``jitfn._after_vm_error``."""
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


cpdef tuple publish(object node, tuple outputs, list requires_grad):
    """The Variables a training call returns for ``node``'s outputs:
    outputs eager would not connect to the graph (``requires_grad`` false
    there) detached, and each of several outputs behind a node of its
    own (``function._Output``). An output that is the same value as an
    earlier one (a returned loss that the forward also stored and
    reported) is the same Variable, as in eager mode."""
    cdef list first = node.training.first_of
    cdef Py_ssize_t n_flags = len(requires_grad), i
    cdef bint single = len(set(first)) == 1, grad
    cdef list published = [], connected = []
    for i in range(len(outputs)):
        y = outputs[i]
        grad = i >= n_flags or requires_grad[i]
        if first[i] != i and grad == (first[i] >= n_flags or
                                      requires_grad[first[i]]):
            y = published[first[i]]
        elif not grad:
            y = new_variable(y._data[0], False)
        elif not single:
            y, = lean_apply(_nodes()[1](), (y,))
            connected.append(i)
        published.append(y)
    node._published = [_weakref(y) for y in published]
    node._connected = connected
    return tuple(published)


# --- backprop through jitted nodes (``backprop``) ---------------------------

cdef object _heappush = heapq.heappush
cdef object _heappop = heapq.heappop
cdef object _plain_backward_accumulate = _FunctionNode.backward_accumulate
cdef object _check_grad_type = chainer.variable._check_grad_type


cpdef bint lean_backward(object loss, object loss_scale):
    """``loss.backward(loss_scale=loss_scale)`` (no retained gradients,
    no double backprop) as Chainer 7's ``Variable.backward`` and
    ``_backprop_to_all`` run it, without their steps that do nothing here,
    where the graph holds a chainerjit node (see :func:`_lean_graph`).
    Returns False, having done nothing, for anything else."""
    array = loss._data[0]
    if type(array) is not _ndarray or loss._layout is not None or \
            debug_or_function_hooks():
        return False
    root = loss._node._creator_node
    if root is None or not _lean_graph(root):
        return False
    cdef bint start_with_one = array.size == 1 and \
        loss._grad_var is None and loss._grad is None
    if start_with_one and (array.ndim != 0 or array.dtype.kind != 'f'):
        return False  # Chainer's own backward warns, or its check raises
    if start_with_one:  # what ``loss.grad = 1`` and taking it leave
        ones = numpy.ones_like(array)
        if loss_scale is not None:
            ones *= loss_scale
        grad_var = new_variable(ones, True)
        loss._grad_valid = True
    else:
        grad_var = loss.grad_var
    loss._grad_var = loss._grad = None
    old = _set_local_config('enable_backprop', False)
    try:
        _backprop_to_all(loss._node, grad_var, loss_scale)
    finally:
        _restore_local_config('enable_backprop', old)
    return True


cdef object _set_local_config(str name, object value):
    """``chainer.config.<name> = value`` for this thread, as
    ``using_config`` sets it; returns the entry's previous local value,
    or :data:`ABSENT`."""
    cdef dict local = _local.__dict__
    old = local.get(name, _ABSENT)
    local[name] = value
    return old


cdef void _restore_local_config(str name, object old) except *:
    cdef dict local = _local.__dict__
    if old is _ABSENT:
        local.pop(name, None)
    else:
        local[name] = old


cdef bint _lean_graph(object root) except -1:
    """Does the graph behind the function node ``root`` hold a chainerjit
    node, and no node with function hooks of its own or its own
    ``backward_accumulate``?"""
    cdef list stack = [root]
    cdef set seen = {root}
    cdef bint jitted = False
    classes = _nodes()
    while stack:
        func = stack.pop()
        if func.inputs is None or func._n_local_function_hooks != 0 or \
                type(func).backward_accumulate is not \
                _plain_backward_accumulate:
            return False
        if type(func) in classes:
            jitted = True
        for x in func.inputs:
            creator = x._creator_node
            if creator is not None and creator not in seen:
                seen.add(creator)
                stack.append(creator)
    return jitted


cdef void _backprop_to_all(object y, object gy, object loss_scale) except *:
    """Chainer's ``_backprop_to_all([(y, gy)], False, loss_scale)``: the
    same nodes' ``backward`` in the same order (by rank, then first
    seen), the gradients summed in the same order, the same leaves'
    ``grad_var`` set. A chainerjit node's gradients are not checked
    against its inputs' shapes and dtypes: they are right by
    construction."""
    cdef list candidates = []
    cdef dict seen = {}
    cdef dict grads = {}
    cdef set leaves = set()
    cdef dict in_grad
    cdef tuple targets
    cdef bint jitted
    classes = _nodes()
    _grad_list(grads, y).append(gy)
    _add_candidate(candidates, seen, y._creator_node)
    while candidates:
        func = _heappop(candidates)[2]
        inputs = func.inputs
        targets = tuple([i for i in range(len(inputs))
                         if inputs[i]._requires_grad])
        out_grad = tuple([
            _pop_grad(grads, node)
            if node is not None and node._creator_node is not None else None
            for node in [ref() for ref in func.outputs]])
        if not targets:
            continue
        in_grad = {}
        for i in targets:
            x = inputs[i]
            if x not in in_grad:
                in_grad[x] = _grad_list(grads, x)
        jitted = type(func) in classes
        if jitted or _on_host(inputs, out_grad):
            _backprop_step(func, targets, out_grad, in_grad)
        else:
            with chainer.using_device(chainer.backend.get_device_from_array(
                    *([x._data for x in inputs] +
                      [None if g is None else g._data[0]
                       for g in out_grad]))):
                _backprop_step(func, targets, out_grad, in_grad)
        del out_grad
        for x, gx in in_grad.items():
            if not gx:
                continue
            if not jitted and not func.__dict__.get(
                    '_chainerjit_grad_checked'):
                for g in gx:
                    if g is not None:
                        _check_grad_type(func, x, True, g._data[0])
            if x._creator_node is None:
                leaves.add(x)
            else:
                _add_candidate(candidates, seen, x._creator_node)
    for x in leaves:
        variable = x._variable()
        gx = _pop_grad(grads, x)
        if variable is not None:
            _set_grad_var(variable, gx)
            variable._loss_scale = loss_scale


cdef object _chainer_set_grad_var = _Variable._set_grad_var_without_check


cdef inline void _set_grad_var(object variable, object gx) except *:
    """``variable._set_grad_var_without_check(gx)``: its two assignments
    made here for NumPy arrays, without the method's Python frame."""
    if type(variable)._set_grad_var_without_check is not \
            _chainer_set_grad_var or variable._has_chainerx_array or (
                gx is not None and gx._has_chainerx_array):
        variable._set_grad_var_without_check(gx)
        return
    variable._grad_var = gx
    variable._grad = None if gx is None else gx._data[0]


cdef inline void _add_candidate(list candidates, dict seen,
                                object func) except *:
    if func not in seen:
        _heappush(candidates, (-func.rank, len(seen), func))
        seen[func] = None


cdef list _grad_list(dict grads, object node):
    """``GradTable.get_as_list`` (``accumulate_grad_inputs=True``): a
    leaf's list starts with the gradient its Variable holds."""
    found = grads.get(node)
    if found is None:
        if node._creator_node is None:
            if node._old_style_grad_generator is not None:
                node._check_old_style_gradient()  # raises
            gv = _take_grad_var(node)
            found = [] if gv is None else [gv]
        else:
            found = []
        grads[node] = found
    return found


cdef object _pop_grad(dict grads, object node):
    """``GradTable.pop`` (``accumulate_grad_inputs=True``)."""
    found = grads.pop(node, None)
    if found is not None:
        return found[0] if len(found) == 1 else \
            _backprop_utils._reduce(found)
    return _take_grad_var(node)


cdef object _take_grad_var(object node):
    """``_backprop_utils._grad_var_from_alive_node``: the gradient of the
    node's Variable (made a Variable if only its array is there), which
    is then cleared."""
    var = node._variable()
    if var is None:
        return None
    if var._has_chainerx_array:
        return _backprop_utils._grad_var_from_alive_node(node)
    gv = var._grad_var
    if gv is None and var._grad is not None:
        gv = _Variable(var._grad, layout=var._layout)
    var._grad_var = var._grad = None
    return gv


cdef bint _on_host(tuple inputs, tuple out_grad):
    """Are the inputs' retained arrays and the output gradients NumPy
    arrays (or absent), so that the device context Chainer enters around
    a backward is the CPU's, which does nothing?"""
    for x in inputs:
        if x._data is not None and type(x._data) is not _ndarray:
            return False
    for g in out_grad:
        if g is not None and type(g._data[0]) is not _ndarray:
            return False
    return True


cdef void _backprop_step(object func, tuple targets, tuple out_grad,
                         dict in_grad) except *:
    """``_backprop_utils.backprop_step`` outside debug mode, for a node
    with Chainer's own ``backward_accumulate``."""
    gxs = func.backward(targets, out_grad)
    cdef Py_ssize_t n = len(gxs), n_inputs = len(func.inputs)
    if n == n_inputs:
        gxs = tuple([gxs[i] for i in targets])
    elif n != len(targets):
        msg = 'number of gradients returned from backward is incorrect: '
        if n_inputs == len(targets):
            msg += '%s != expected %s' % (n, n_inputs)
        else:
            msg += '%s != expected %s or %s' % (n, n_inputs, len(targets))
        raise ValueError(func._get_error_message(msg))
    inputs = func.inputs
    for i, gx in zip(targets, gxs):
        if gx is None or gx._data[0] is None:
            continue
        in_grad[inputs[i]].append(gx)
    if not func.lazy_grad_sum:
        for gx in in_grad.values():
            if len(gx) >= 2:
                _backprop_utils._reduce(gx)


# --- the optimizer update (``optimizers``) ---------------------------------

cdef object _UpdateRule = None  # chainer.optimizer.UpdateRule, and the
cdef object _SGDRule = None  # rules with a loop of their own, on first use
cdef object _MomentumSGDRule = None
cdef object _elementwise = None
cdef object _float16 = numpy.float16


cdef void _load_rules():
    global _UpdateRule, _SGDRule, _MomentumSGDRule, _elementwise, \
        _Hyperparameter
    from chainer import optimizer
    from chainer.optimizers import momentum_sgd, sgd
    from chainerjit import _elementwise as loops
    _UpdateRule = optimizer.UpdateRule
    _Hyperparameter = optimizer.Hyperparameter
    _SGDRule = sgd.SGDRule
    _MomentumSGDRule = momentum_sgd.MomentumSGDRule
    _elementwise = loops


cdef inline bint _plain_grad(object param):
    """Is ``param.grad`` Chainer 7's plain read for a NumPy parameter
    (standard layout, valid, no ChainerX), so that :func:`_grad` may read
    it directly?"""
    return param._layout is None and param._grad_valid and \
        not param._has_chainerx_array


cdef inline object _grad(object param):
    grad_var = param._grad_var
    return param._grad if grad_var is None else grad_var._data[0]


cpdef bint any_grad_cleared(list params):
    """Is some ``param.grad`` None (``reallocate_cleared_grads`` would
    allocate)?"""
    for param in params:
        if (_grad(param) if _plain_grad(param) else param.grad) is None:
            return True
    return False


cpdef bint plain_rule(object rule, object param):
    """Would ``rule.update(param)`` only call ``update_core_cpu`` (after
    initialising the states on the first call): the base class's
    ``update`` and ``update_core``, a NumPy parameter in the standard
    layout, no loss scaling, no fp32 update of a float16 parameter, no
    update hooks?"""
    if _UpdateRule is None:
        _load_rules()
    cls = type(rule)
    hooks = rule._hookable
    array = param._data[0]
    return (cls.update is _UpdateRule.update and
            cls.update_core is _UpdateRule.update_core and
            type(array) is _ndarray and _plain_grad(param) and
            param._loss_scale is None and
            not (rule._use_fp32_update and array.dtype == _float16) and
            not hooks._pre_update_hooks and not hooks._post_update_hooks)


cpdef bint update_in_one_pass(object rule, object param):
    """SGD's and momentum SGD's ``update_core_cpu`` as one loop over the
    arrays (``_elementwise``: the same roundings, no temporaries). False
    where the rule's own code must run (other rules, subclasses, arrays
    the loop does not take)."""
    if _UpdateRule is None:
        _load_rules()
    cls = type(rule)
    if cls is _SGDRule:
        grad = _grad(param)
        return grad is None or _elementwise.sgd_update(
            param._data[0], grad, _hyperparameter(rule.hyperparam, 'lr'))
    if cls is _MomentumSGDRule:
        grad = _grad(param)
        hyperparam = rule.hyperparam
        return grad is None or _elementwise.momentum_sgd_update(
            param._data[0], grad, rule.state['v'],
            _hyperparameter(hyperparam, 'lr'),
            _hyperparameter(hyperparam, 'momentum'))
    return False


cdef object _Hyperparameter = None  # chainer.optimizer.Hyperparameter


cdef object _hyperparameter(object hyperparam, str name):
    """``getattr(hyperparam, name)``: Chainer's ``Hyperparameter`` looks a
    name up its parents' chain in Python (``__getattr__``, 0.45 us);
    here the chain's dictionaries are read in C, and Chainer's own lookup
    runs for anything but plain ``Hyperparameter`` objects."""
    cdef dict attributes
    found = hyperparam
    while type(found) is _Hyperparameter:
        attributes = found.__dict__
        value = attributes.get(name, _ABSENT)
        if value is not _ABSENT:
            return value
        found = attributes.get('_parent')
    return getattr(hyperparam, name)


cpdef void update_params(list params) except *:
    """``param.update()`` for each parameter, with the rule's
    ``update_core_cpu`` (or the same arithmetic in one loop) called
    straight away where Chainer's steps around it would do nothing."""
    if _UpdateRule is None:
        _load_rules()
    for param in params:
        rule = param.update_rule
        if rule is None:
            continue
        if not plain_rule(rule, param):
            param.update()
            continue
        if not rule.enabled:
            continue
        rule.t += 1
        if rule.state is None:
            rule._init_states(param)
        if not update_in_one_pass(rule, param):
            rule.update_core_cpu(param)
