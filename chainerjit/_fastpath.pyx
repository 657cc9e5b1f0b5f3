# cython: language_level=3, boundscheck=False, wraparound=False
"""The per-call hot path: call keys (``signature``) and parameter guards
(``cache``), compiled with Cython. ``signature.py`` and ``cache.py``
document them and are their only callers."""

import weakref

import chainer
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


def config_flags():
    """``(chainer.config.train, chainer.config.enable_backprop)``, read
    as ``chainer.configuration.LocalConfig`` does, without its
    ``__getattr__``."""
    cdef dict local = _local.__dict__
    train = local['train'] if 'train' in local else _global.train
    if 'enable_backprop' in local:
        return train, local['enable_backprop']
    return train, _global.enable_backprop


cpdef str array_device(array):
    """``'cpu'`` for NumPy arrays, ``'gpu0'``, ... for CuPy arrays."""
    if isinstance(array, _ndarray):
        return 'cpu'
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


def make_key(tuple args, dict kwargs, bint train, bint enable_backprop):
    """Returns ``(key, leaves)`` for a call: the key is ``(train,
    enable_backprop, structure, leaf specs, aliasing)``."""
    cdef list leaves = []
    cdef object structure = flatten(args, leaves)
    if kwargs:
        structure = (structure, flatten(kwargs, leaves))
    cdef tuple specs = tuple([leaf_spec(leaf) for leaf in leaves])
    alias = aliasing(leaves) if len(leaves) > 1 else None
    return (train, enable_backprop, structure, specs, alias), leaves


def read_params(list owners, list specs):
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
        if (type(array) is not spec[2] or array.shape != spec[0]
                or array.dtype != spec[1]):
            return None
        if spec[3] is not None and array_device(array) != spec[3]:
            return None
        arrays.append(array)
    return arrays


# --- applying a chainerjit node (``function.lean_apply``) --------------------

cdef object _FunctionNode = chainer.FunctionNode
cdef object _init_unchecked = chainer.Variable._init_unchecked
cdef object _new_variable = chainer.Variable.__new__
cdef object _weakref = weakref.ref
cdef tuple _NO_LAYOUT = (None,)


cdef object _config(str name):
    """``chainer.config.<name>``, read without ``LocalConfig.__getattr__``."""
    cdef dict local = _local.__dict__
    return local[name] if name in local else getattr(_global, name)


cdef object _input_variable(object x):
    if isinstance(x, _Variable):
        return x
    if type(x) is _ndarray:
        return _init_unchecked(x, requires_grad=False)
    return _Variable(x, requires_grad=False)


cdef bint _plain_numpy_call(object node, list input_vars):
    """Would ``FunctionNode.apply`` only run ``forward`` and link the
    graph for these inputs: NumPy arrays in the default layout, no
    function hooks, no debug mode and no static graph?"""
    if _config('debug') or _config('schedule_func') is not None or \
            chainer.get_function_hooks() or \
            node._n_local_function_hooks != 0:
        return False
    for v in input_vars:
        if type(v._data[0]) is not _ndarray or v._layout is not None:
            return False
    return True


def lean_apply(object node, object inputs):
    """``node.apply(inputs)`` without the steps of ``FunctionNode.apply``
    that do nothing for a chainerjit node (see :func:`_plain_numpy_call`);
    anything else takes Chainer's own ``apply``. It links the node into
    the graph exactly as that does, reading Chainer 7's attributes
    (``_node``, ``_rank``) where its properties only return them."""
    cdef list input_vars = [_input_variable(x) for x in inputs]
    if not _plain_numpy_call(node, input_vars):
        return _FunctionNode.apply(node, input_vars)
    cdef Py_ssize_t n_in = len(input_vars), rank = 0
    cdef bint requires_grad = False
    for v in input_vars:
        if v._requires_grad:
            requires_grad = True
    node._input_layouts = _NO_LAYOUT * n_in
    node._input_indexes_to_retain = None
    node._output_indexes_to_retain = None
    outputs = node.forward(tuple([v._data[0] for v in input_vars]))
    cdef Py_ssize_t n_out = len(outputs)
    node._output_layouts = _NO_LAYOUT * n_out
    node._output_count = n_out
    cdef tuple ret = tuple([_init_unchecked(y, requires_grad=requires_grad)
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
        node.lazy_grad_sum = _config('lazy_grad_sum')
    return ret
