# cython: language_level=3, boundscheck=False, wraparound=False
"""Call keys in C: the configuration flags, the arguments flattened to
leaves and their specs (``signature``), configuration and parameter
guards (``guards``, ``runtime.cache``), and the recording's thread-local
state (``trace``). Those modules document them."""

import threading

import chainer
import numpy

from chainerjit import errors

cdef object _ndarray = numpy.ndarray
cdef object _Variable = chainer.Variable
cdef object _Parameter = chainer.Parameter
cdef object _generic = numpy.generic
class Unbound(object):
    """The type of :data:`UNBOUND`."""

    __slots__ = ()

    def __repr__(self):
        return 'UNBOUND'

    def __reduce__(self):
        return 'UNBOUND'


#: What a name left unassigned passes as between the pieces of a forward
#: cut at a graph break (``breaks``): a static value, as None is.
UNBOUND = Unbound()

# (a module, ``xp = self.xp``, passes between the pieces of a forward cut
# at a graph break: it is the same for every call its key matches)
cdef tuple _STATIC_TYPES = (type(None), bool, int, float, str, numpy.dtype,
                            Unbound, type(numpy))
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
        'Python scalars, modules, None and lists, tuples and dicts of '
        'them)'
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


