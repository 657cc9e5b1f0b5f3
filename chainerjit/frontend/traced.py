"""Traced arrays: what the inputs flow into outside Chainer functions.

While recording, every NumPy array derived from the inputs and parameters
is viewed as a :class:`TracedArray`, and a CuPy argument as a
``GpuArgument`` (:func:`gpu_argument_type`). NumPy run on one outside
Chainer functions is recorded as a node (:func:`record_call`; the test of
``if x.all():`` as a guarded branch, :func:`record_branch`); reading one
back into Python (``float``, ``.item()``, ``bool``, a NumPy reduction to
a scalar) or making a shape depend on its values is a *data escape*
(:func:`escape`), noted on this thread's recorder (``trace``).
"""

import ast
import functools
import operator
import os
import sys

import chainer
import numpy

from chainerjit import ir
from chainerjit import ops
from chainerjit.frontend import _keys
from chainerjit.frontend import control
from chainerjit.frontend import loop_analysis
from chainerjit.frontend import source
from chainerjit.ops import array as array_ops
from chainerjit.ops import structural


_INTERNAL_DIRS = tuple(
    os.path.dirname(m.__file__) + os.sep for m in (chainer, numpy))
_JIT_DIR = os.path.dirname(  # the package's directory
    os.path.dirname(os.path.abspath(__file__))) + os.sep
#: The directories of Chainer's, NumPy's and chainerjit's code.
LIBRARY_DIRS = _INTERNAL_DIRS + (_JIT_DIR,)

_state = _keys.recording  # this thread's; the hit path reads it in C


def is_library_file(filename):
    """Chainer's, NumPy's, chainerjit's or a frozen module's code (CuPy's
    is told apart by :func:`is_cupy_file`)."""
    return filename.startswith(LIBRARY_DIRS + ('<frozen',
                                               control.LOOP_BOUND))


def is_cupy_file(filename):
    return 'cupy' + os.sep in filename


def user_location(depth=1):
    """The innermost caller's ``(filename, lineno)`` outside Chainer,
    NumPy, CuPy and chainerjit itself."""
    frame = user_frame(depth + 1)
    return None if frame is None else (frame.f_code.co_filename,
                                       frame.f_lineno)


def user_frame(depth=1):
    """The innermost caller's frame outside Chainer, NumPy, CuPy and
    chainerjit itself, or ``None``."""
    frame = sys._getframe(depth)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (is_library_file(filename) or is_cupy_file(filename)):
            return frame
        frame = frame.f_back
    return None


def escape(what):
    """Notes a data escape by the forward's own code (not inside a
    Chainer function), at the line of the caller's caller."""
    recorder = _state.recorder
    if recorder is not None and recorder.depth == 0:
        recorder.note_escape(what, user_location(3))


def _as_array(fn):
    def run(*arrays):
        return numpy.asarray(fn(*arrays))
    return run


def _as_tuple(fn):
    def run(*arrays):
        return tuple(fn(*arrays))
    return run


def untag(obj):
    """``obj`` with traced views and made arrays (:class:`MadeArray`; in
    lists and tuples too) turned back into plain arrays."""
    if isinstance(obj, (TracedArray, MadeArray)):
        return obj.view(numpy.ndarray)
    if _is_gpu_argument(obj):
        return obj.view(chainer.backends.cuda.ndarray)
    if type(obj) in (list, tuple):
        return type(obj)(untag(x) for x in obj)
    return obj


def eager_numbers(obj):
    """``obj`` with the ints that stand for a Python int (``lengths.Length``:
    its class sets ``python_int``), in lists and tuples too, as plain ints:
    NumPy 2 takes a subclass of int for an int64 array, whose dtype would
    win over float32 (``h / xs.shape[0]``), where a plain int does not."""
    if getattr(type(obj), 'python_int', False):
        return int(obj)
    if type(obj) in (list, tuple):
        return type(obj)(eager_numbers(x) for x in obj)
    return obj


def as_eager(obj):
    """What eager NumPy gave for ``obj``: a traced view as a plain array,
    one standing for a NumPy scalar (:func:`is_scalar`) as that scalar."""
    if is_scalar(obj):
        return untag(obj)[()]
    return untag(obj)


def tagged(array):
    """``array`` (a NumPy array) viewed as a :class:`TracedArray`, to bind
    to a value the recording computes."""
    return _tag(array)


def _tag(obj):
    if type(obj) is numpy.ndarray:
        return obj.view(TracedArray)
    if type(obj) in (list, tuple):
        return type(obj)(_tag(x) for x in obj)
    return obj


# NumPy functions whose result's shape depends on the values (``where``
# with one argument is ``nonzero``).
_VALUE_SHAPED = frozenset([
    'nonzero', 'argwhere', 'flatnonzero', 'unique', 'compress', 'extract',
    'trim_zeros', 'histogram', 'bincount'])


def _record_numpy(label, fn, args, kwargs, result):
    """Records NumPy called on traced arrays outside Chainer functions as a
    node of the graph, or notes an escape if it cannot be replayed."""
    recorder = _state.recorder
    if recorder is None or recorder.depth:
        return
    trace = control.pause_tracing()
    try:
        _record_numpy_call(recorder, label, fn, args, kwargs, result)
    finally:
        control.resume_tracing(trace)


def _record_numpy_call(recorder, label, fn, args, kwargs, result):
    index = recorder.varying_index(args[1]) \
        if label == 'ndarray.__getitem__' and _is_arrays(result) else None
    if index is not None:  # x[k] of a varying int k
        record_call(recorder, label, fn, args, kwargs, result, index)
        return
    loc = user_location(3)
    if label == 'ndarray.__getitem__' and isinstance(result, numpy.ndarray) \
            and recorder.cut_to_sizes(args[0], args[1], result, loc):
        return  # (pe[:T])
    if label == 'ndarray.__getitem__':  # (xs[T - 10:] as xs[-10:])
        args = (args[0], recorder.index_from_the_end(
            args[0], args[1], user_frame(3)))
    if isinstance(getattr(fn, '__self__', None), numpy.ufunc) and \
            fn.__name__ == '__call__':
        args = recorder.sizes_at_run_time(args, loc, user_frame(3))
    target = _reshape_target(label, args, kwargs, result)
    if target is not None:  # (noted once its node is recorded)
        recorder.note_constants(kwargs, 'passed to %s' % label, loc)
        node = record_call(recorder, label, fn, args, kwargs, result)
        recorder.note_reshaped(args[0], target, node,
                               'passed to %s' % label, loc)
        return
    recorder.note_constants((args, kwargs), 'passed to %s' % label, loc)
    if not _is_arrays(result):
        test = _branch_test() if label in _TRUTH_REDUCTIONS else None
        if test is not None and isinstance(result, numpy.bool_):
            record_branch(recorder, label, fn, args, kwargs, result, test)
            return
        recorder.note_escape('%s gives a Python value' % label, loc)
    elif 'out' in kwargs:
        recorder.note_escape('%s with out= changes an array in place'
                             % label, loc)
    elif _value_shaped(label, args):
        recorder.note_escape('%s gives a shape that depends on the values'
                             % label, loc)
    else:
        record_call(recorder, label, fn, args, kwargs, result)


def _recorded_of_made(label, fn, args, kwargs, result):
    """``result`` of NumPy's ``fn`` run by the forward on ``args``,
    recorded as a node, and traced, where it reads an array the forward
    made of sizes that a node makes again (:func:`_of_made`); else as it
    is."""
    if type(result) is not numpy.ndarray or not _of_made(args):
        return result
    return _recorded(label, fn, args, kwargs, result)


def _recorded(label, fn, args, kwargs, result):
    """``result``, an array NumPy's ``fn`` gave the forward, traced and
    recorded as a node."""
    result = _tag(result)
    _record_numpy(label, fn, args, kwargs, result)
    return result


def _of_made(inputs):
    """Does NumPy run by the forward on ``inputs`` (or on the lists among
    them: a join's) read an array it made with arguments' sizes that a
    node makes again (``trace.Recorder.holds_made``), the others being
    numbers or arrays not computed from the inputs?"""
    recorder = _state.recorder
    inputs = [x for found in inputs for x in (
        found if type(found) in (list, tuple) else (found,))]
    if recorder is None or recorder.depth or any(
            isinstance(x, TracedArray) for x in inputs):
        return False
    return any(type(x) is MadeArray and recorder.holds_made(x)
               for x in inputs)


def holds_traced(obj):
    """Is ``obj`` a traced array, or a list, tuple or dict holding one (the
    items of a joined list are)?"""
    if isinstance(obj, (TracedArray, ItemsOfJoined)):
        return True
    if type(obj) in (list, tuple, dict):
        return any(holds_traced(x) for x in (
            obj.values() if type(obj) is dict else obj))
    return False


def _note_scalar(array):
    """Marks a traced 0-d array that the forward's own code got where
    eager NumPy gives a NumPy scalar (inside a Chainer function, where
    ``force_array`` makes one an array again, nothing is marked)."""
    recorder = _state.recorder
    if recorder is not None and recorder.depth == 0:
        array.scalar = True


# Names by which Python code tests a value's type, which a 0-d array
# standing for a NumPy scalar would fail (isinstance(s, numpy.ndarray)).
_TYPE_TESTS = frozenset(['isinstance', 'type', 'issubclass', 'isscalar'])

# NumPy's scalar types: ``numpy.float32(s)`` of a 0-d array reads its value
# in C, unseen (as does ``dtype.type(s)``).
_SCALAR_TYPES = frozenset(
    [name for name in dir(numpy) if isinstance(getattr(numpy, name), type)
     and issubclass(getattr(numpy, name), numpy.generic)] + ['type'])


def follows_scalars(code):
    """May a recording of ``code`` follow the NumPy scalars it computes
    as 0-d arrays (:func:`_followed_scalar`)? Not where its code (or a
    function or comprehension in it) names a type test, or calls a NumPy
    scalar type (without source, names one): there a scalar stays a
    scalar, and reading it into Python is an escape."""
    if _TYPE_TESTS & _names(code):
        return False
    function = source.function_ast(code)
    if function is None:  # a lambda, or no source: by its names alone
        return not _SCALAR_TYPES & _names(code)
    return not any(isinstance(node, ast.Call) and _called_name(node.func) in
                   _SCALAR_TYPES for node in ast.walk(function))


def _names(code):
    """The global and attribute names ``code`` and the code in it use."""
    found = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, 'co_names'):
            found |= _names(const)
    return found


def _called_name(func):
    if isinstance(func, ast.Attribute):
        return func.attr
    return getattr(func, 'id', None)


def _followed_scalar(result, followed):
    """``result`` traced; where NumPy gave a scalar and ``followed``, as a
    0-d array marked as standing for that scalar (:func:`is_scalar`): it
    is followed through the forward's code, and the NumPy scalar eager
    gives comes back where it is returned or reported. Elsewhere, or in a
    forward that does not allow it (:func:`follows_scalars`), a scalar is
    a Python value: an element ``x[0, 1]``, an index ``argmax()``."""
    recorder = _state.recorder
    if not (followed and isinstance(result, numpy.generic) and
            recorder is not None and recorder.follows_scalars):
        return _tag(result)
    result = _tag(numpy.asarray(result))
    _note_scalar(result)
    return result


# NumPy's reductions of one array along ``axis`` (with ``keepdims``).
_AXIS_REDUCTIONS = frozenset([
    'sum', 'prod', 'mean', 'std', 'var', 'max', 'min', 'amax', 'amin',
    'ptp', 'count_nonzero', 'nansum', 'nanprod', 'nanmean', 'nanstd',
    'nanvar', 'nanmax', 'nanmin'])

# NumPy's positions of the greatest or least values along ``axis``.
_ARG_REDUCTIONS = frozenset(['argmax', 'argmin', 'nanargmax', 'nanargmin'])

# NumPy functions whose scalar result is followed (see _followed_scalar).
_SCALAR_REDUCTIONS = _AXIS_REDUCTIONS | frozenset([
    'average', 'dot', 'vdot', 'inner', 'trace'])


def is_scalar(array):
    """Is ``array`` a traced 0-d array standing for the NumPy scalar that
    eager NumPy gave (``abs(x)`` of a 0-d ``x``)?"""
    return isinstance(array, TracedArray) and \
        array.__dict__.get('scalar', False)


def memory_owner(array):
    """The ndarray at the end of ``array``'s chain of bases: two arrays
    with the same owner view the same memory."""
    while isinstance(array.base, numpy.ndarray):
        array = array.base
    return array


def record_conversion(label, convert, a, args, kwargs):
    """``convert(a, *args, **kwargs)`` (``numpy.asarray``, ``numpy.array``,
    ...) of a traced array, recorded as a node: a conversion or copy of an
    argument is read from the argument on every call. Of a list of arrays
    alone, it is their stack (``numpy.asarray(xs)``), which ``joining``
    joins as it joins ``numpy.stack(xs)``."""
    if isinstance(a, ItemsOfJoined):
        a = a.plain()
    if type(a) in (list, tuple) and a and not args and not kwargs and all(
            isinstance(x, numpy.ndarray) for x in a):
        label, convert = 'numpy.stack', numpy.stack
    result = _tag(convert(untag(a), *args, **kwargs))
    _record_numpy(label, convert, (a,) + args, kwargs, result)
    return result


#: The label of ``numpy.broadcast_to(x, a.shape)`` of a shape the forward
#: read from ``a``, recorded as :func:`broadcast_like` (``x``, ``a``).
BROADCAST_LIKE = 'numpy.broadcast_to(like)'


def broadcast_like(x, a):
    """``numpy.broadcast_to(x, a.shape)``."""
    return numpy.broadcast_to(x, a.shape)


#: The label of :func:`broadcast_sized`'s calls.
BROADCAST_SIZED = 'numpy.broadcast_to(sized)'


@functools.lru_cache(maxsize=None)
def broadcast_sized(sizes):
    """``(x, *arrays) -> numpy.broadcast_to(x, shape)`` of a shape made
    of the arrays' sizes (``sizes`` as ``ops.array.BroadcastSized``
    takes them): a mask broadcast to ``(B, T, T)``. One function for
    each ``sizes``: the broadcasts a loop's steps record are alike
    (``ir.fingerprints``)."""
    def broadcast(x, *arrays):
        return numpy.broadcast_to(x, array_ops.sized_shape(sizes, arrays,
                                                           x.shape))
    broadcast.sizes = sizes
    return broadcast


def record_library_call(label, fn, args):
    """``fn(*args)``, a library function of NumPy arrays (Chainer's
    padding of a batch), run on traced arrays as if it were one NumPy
    function: its inside is not the forward's code (no made arrays, no
    uses of sizes), and the call is recorded as a node calling it."""
    result = _tag(as_library(fn, *untag(args)))
    _record_numpy(label, fn, args, {}, result)
    return result


def as_library(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` run as library code, not the forward's: the
    arrays NumPy makes inside are its own (no :class:`MadeArray`), and
    the sizes read are not the forward's uses."""
    recorder = _state.recorder
    if recorder is None:
        return fn(*args, **kwargs)
    recorder.depth += 1
    try:
        return fn(*args, **kwargs)
    finally:
        recorder.depth -= 1


def _reshape_target(label, args, kwargs, result):
    """The target shape of ``x.reshape(...)`` of an array, as given (its
    sizes may be argument sizes), or ``None`` for another call."""
    if label != 'ndarray.reshape' or kwargs or len(args) < 2 or \
            not isinstance(args[0], numpy.ndarray) or \
            not isinstance(result, numpy.ndarray):
        return None
    shape = args[1] if len(args) == 2 else args[1:]
    return tuple(shape) if type(shape) in (tuple, list) else (shape,)


def record_call(recorder, label, fn, args, kwargs, result, index=None):
    """Records NumPy run outside Chainer functions as a node, and returns
    it; ``index``: ``x[k]`` of a varying int, ``(kernel, value of k)``."""
    if index is not None:
        node = recorder.add_node(ir.Node(
            label, index[0], [recorder.value_of(args[0]), index[1]],
            recorder.bind_temps([result]), index[0].attrs,
            loc=user_location(4)))
        recorder.templates[node] = ('numpy', fn, _split_arrays(
            (args, kwargs), []))
        return node
    kernel_fn, arrays = numpy_kernel(fn, args, kwargs)
    in_values = [recorder.value_of(a) for a in arrays]
    multi = type(result) in (tuple, list)
    outs = list(result) if multi else [result]
    if multi:
        kernel_fn = _as_tuple(kernel_fn)
    elif result.ndim == 0 and isinstance(result, numpy.ndarray):
        # NumPy gives a scalar for a 0-d result
        kernel_fn = _as_array(kernel_fn)
    template = _split_arrays((args, kwargs), [])
    axes = _permutation(label, fn, args, kwargs, result)
    if label == 'ndarray.__getitem__':
        recorder.note_indexed(args[0], args[1], result)
    elif axes is not None:
        recorder.note_permuted(args[0], axes, result)
    kernel = ops.Kernel(kernel_fn, multi=multi,
                        onnx=_numpy_to_onnx(fn, template, label))
    rows_rule = array_ops.rows_permuted(axes) if axes is not None else \
        _rows_kept(label, fn, args, kwargs, arrays, result, kernel)
    kernel = kernel._replace(lengths=rows_rule)
    if rows_rule is not None and axes is None and \
            label != 'ndarray.__getitem__':  # (x.reshape(len(x), -1))
        recorder.note_computed(label, arrays, outs, kernel)
    node = recorder.add_node(ir.Node(
        label, kernel, in_values, recorder.bind_temps(outs),
        _printed_settings(label, args, kwargs), loc=user_location(4)))
    recorder.templates[node] = ('numpy', fn, template)
    # (the argument's axes of ``steps = xs[:-1]``, whose steps a while
    # loop indexes with its counter)
    recorder.note_value_origins(outs, node.outputs)
    if label == 'ndarray.__getitem__':
        recorder.note_first_item(args[0], args[1], node)
    return node


# NumPy's functions and methods that reorder an array's axes.
_PERMUTATIONS = frozenset([
    'ndarray.transpose', 'numpy.transpose', 'ndarray.swapaxes',
    'numpy.swapaxes', 'numpy.moveaxis', 'numpy.rollaxis'])


def _permutation(label, fn, args, kwargs, result):
    """The axes order of ``result``, the array ``args[0]`` transposed by
    one of :data:`_PERMUTATIONS` (``xs.transpose(1, 0, 2)``), as the same
    call gives it on an array whose sizes tell its axes apart; else
    ``None``."""
    if label not in _PERMUTATIONS or not isinstance(args[0], numpy.ndarray) \
            or not isinstance(result, numpy.ndarray) or \
            result.ndim != args[0].ndim or args[0].ndim > 6:
        return None
    probe = numpy.empty(tuple(range(2, 2 + args[0].ndim)), numpy.int8)
    try:
        shape = fn(probe, *args[1:], **kwargs).shape
    except (TypeError, ValueError):
        return None
    return tuple(n - 2 for n in shape)


def _printed_settings(label, args, kwargs):
    """The node's attributes, as the IR prints them: the index of
    ``x[index]`` (``ndarray.__getitem__[index=[-1]]``), the axis of a
    join (``numpy.concatenate[axis=0]``)."""
    if label in JOINS:
        axis = _join_axis(args, kwargs)
        return (('axis', axis),) if type(axis) is int else ()
    if label != 'ndarray.__getitem__':
        return ()
    index = args[1] if type(args[1]) is tuple else (args[1],)
    return (('index', array_ops.index_label(index)),)


#: NumPy's reshapes, and its flattenings (``tags.ravel()``, a reshape to
#: one axis), whose rows ``ops.array.reshape_lengths`` follows.
_RESHAPES = frozenset(['ndarray.reshape', 'ndarray.ravel', 'ndarray.flatten',
                       'numpy.ravel'])


def _join_axis(args, kwargs):
    """The axis a NumPy join (``numpy.concatenate(arrays, axis)``,
    ``numpy.stack``) is given, as given: 0 where it is not."""
    return args[1] if len(args) > 1 else kwargs.get('axis', 0)


def _rows_concatenated(args, kwargs, arrays, result):
    """``ops.array.rows_concatenated`` of ``numpy.concatenate(args[0],
    axis)``, a list of the arrays ``arrays`` alone; else ``None``."""
    axis = _join_axis(args, kwargs)
    if not 1 <= len(args) <= 2 or set(kwargs) - set(['axis']) or \
            type(args[0]) not in (list, tuple) or type(axis) is not int or \
            len(arrays) != len(args[0]) or any(
                a is not b for a, b in zip(arrays, args[0])) or \
            not isinstance(result, numpy.ndarray) or not result.ndim:
        return None
    axis %= result.ndim
    return array_ops.rows_concatenated(axis,
                                       [a.shape[axis] for a in arrays])


def _rows_kept(label, fn, args, kwargs, arrays, result, kernel):
    """The ``Kernel.lengths`` rule of NumPy (run by ``kernel``) that keeps
    the rows of its operands at any number of them (``runtime.ragged``,
    ``runtime.batch``): ``x[::-1]``, ``x[:]``, ``x[:, 3]``, ``xs[0]`` of
    a time-major ``xs``, an element-wise ufunc, ``x.reshape(-1)`` as
    ``F.reshape``; else ``None``. (NumPy run on arrays has no
    gradient.)"""
    if label in _RESHAPES and len(arrays) == 1 and \
            args[0] is arrays[0] and isinstance(result, numpy.ndarray):
        return array_ops.reshape_lengths(kernel, arrays[0].shape,
                                         result.shape)
    if label == 'ndarray.__getitem__':  # (xs[-1]: at any number of rows)
        return ops.rows_indexed(args[1], constant=True, ndim=args[0].ndim)
    if label == BROADCAST_LIKE:
        return array_ops.rows_broadcast_like(args[0].shape, args[1].ndim)
    if label == 'numpy.concatenate':
        return _rows_concatenated(args, kwargs, arrays, result)
    if label == BROADCAST_SIZED:
        return array_ops.rows_broadcast_sized(
            fn.sizes, result.ndim - args[0].ndim)
    if label in _SHAPE_KEEPING and len(arrays) == 1 and \
            isinstance(result, numpy.ndarray) and \
            result.shape == arrays[0].shape:
        return ops.rows_in_place  # (rows on any axis: a time-major mask)
    if (isinstance(getattr(fn, '__self__', None), numpy.ufunc) and
            fn.__name__ == '__call__' and 'out' not in kwargs or
            label == 'numpy.where' and len(args) == 3 and not kwargs) and \
            isinstance(result, numpy.ndarray):
        return ops.rows_broadcast([a.shape for a in arrays], result.shape)
    reduced = _reduced_axes(label, fn, args, kwargs, arrays)
    if reduced is not None:
        return ops.rows_reduced_over(*reduced)
    repeated = _repeated_axis(label, args, kwargs, arrays)
    if repeated is not None:  # (a mask for each of attention's heads)
        return ops.rows_repeated(*repeated)
    joined = JOINS.get(label)
    if joined is not None and isinstance(result, numpy.ndarray) and \
            type(args[0]) in (list, tuple) and len(args[0]) > 1 and \
            _the_same(args[0], arrays):
        axis = _join_axis(args, kwargs)
        if type(axis) is int and set(kwargs) <= {'axis'}:
            return ops.rows_joined(joined, axis % result.ndim)
    return None


def _repeated_axis(label, args, kwargs, arrays):
    """``(count, axis)`` of NumPy's ``repeat`` of one array by an int
    count along an axis (``numpy.repeat(mask, H, axis=0)``), else
    ``None``."""
    if label not in ('numpy.repeat', 'ndarray.repeat') or \
            len(arrays) != 1 or args[0] is not arrays[0]:
        return None
    named = dict(zip(('repeats', 'axis'), args[1:]), **kwargs)
    repeats, axis = named.get('repeats'), named.get('axis')
    if type(repeats) is not int or type(axis) is not int or \
            set(named) != {'repeats', 'axis'} or repeats < 1:
        return None
    return repeats, axis % arrays[0].ndim


def _the_same(items, arrays):
    """Are ``items`` the very ``arrays``, in order?"""
    return len(items) == len(arrays) and all(
        a is b for a, b in zip(items, arrays))


#: NumPy's joins of a list of arrays along ``axis``, by their Chainer op's
#: name (``ops.rows_joined``; ``joining``): side by side, they keep the
#: rows.
JOINS = {'numpy.concatenate': 'Concat', 'numpy.stack': 'Stack'}


# Reductions of one array with NumPy's ``axis`` and ``keepdims``, by the
# label of their call: their kernel takes any shape.
_REDUCTIONS = frozenset(
    ['numpy.' + name for name in _AXIS_REDUCTIONS | {'all', 'any'} |
     _ARG_REDUCTIONS] +
    ['ndarray.' + name for name in {'mean', 'var', 'std'} | _ARG_REDUCTIONS])


def _reduced_axes(label, fn, args, kwargs, arrays):
    """``(axes, keepdims)`` of a NumPy reduction of one array (a ufunc's
    ``reduce``, ``numpy.sum``, ``x.mean()``, ...) given its axis alone
    (``x.sum(axis=1, keepdims=True)``), the axes non-negative; else
    ``None``."""
    if len(arrays) != 1 or args[0] is not arrays[0] or len(args) > 2 or \
            set(kwargs) - set(['axis', 'keepdims', 'dtype', 'where']) or \
            kwargs.get('where', True) is not True:
        return None
    if fn.__name__ == 'reduce' and isinstance(
            getattr(fn, '__self__', None), numpy.ufunc):
        axis = kwargs.get('axis', 0)  # (a ufunc's reduce: axis 0 unsaid)
    elif label in _REDUCTIONS:
        axis = args[1] if len(args) > 1 else kwargs.get('axis')
    else:
        return None
    ndim = arrays[0].ndim
    if axis is None:
        return tuple(range(ndim)), bool(kwargs.get('keepdims', False))
    axes = axis if isinstance(axis, tuple) else (axis,)
    if not all(isinstance(a, int) for a in axes):
        return None
    return tuple(a % ndim for a in axes), bool(kwargs.get('keepdims', False))


# Conversions of one array that keep its shape (a copy, another dtype):
# each row is the row of the input (``_rows_kept``; ONNX ``Cast``).
_SHAPE_KEEPING_CONVERSIONS = frozenset([
    'numpy.array', 'numpy.asarray', 'numpy.ascontiguousarray',
    'numpy.asfortranarray', 'ndarray.astype', 'ndarray.copy'])

# Arrays made like one (of zeros): as many rows as it (``_rows_kept``).
_MADE_LIKE = frozenset(['numpy.zeros_like', 'numpy.ones_like',
                        'numpy.full_like'])
# Masks made of one array, of its shape: a decoder's over the steps.
_MASKS = frozenset(['tril', 'triu'])
# Element-wise functions of one array and numbers (``numpy.clip(r, -4,
# 4)`` of relative positions).
_ELEMENTWISE = frozenset(['numpy.clip', 'numpy.around', 'numpy.round',
                          'numpy.round_', 'numpy.nan_to_num'])
# Orders of an array's values along an axis, of its shape (``h[numpy.
# argsort(t)]``: each row's place).
_ORDERS = frozenset(['numpy.argsort', 'ndarray.argsort', 'numpy.sort'])
_SHAPE_KEEPING = _SHAPE_KEEPING_CONVERSIONS | _MADE_LIKE | _ELEMENTWISE | \
    _ORDERS | frozenset('numpy.' + name for name in _MASKS)


def record_draw(label, draw, args, kwargs, result):
    """Records a random draw made by the forward's code (``numpy.random.
    randn(*x.shape)``, a draw in ``chainer.distributions``) as an impure
    node calling ``draw`` with the same arguments on every call: the same
    generator, in the same order as in eager mode. Returns the result,
    traced. A draw giving a Python number is an escape."""
    recorder = _state.recorder
    if recorder is None or recorder.depth:
        return result
    sized = recorder.draw_of_sizes(draw, args, kwargs, result) \
        if isinstance(result, numpy.ndarray) and \
        not numpy_kernel(draw, args, kwargs)[1] else None
    if sized is not None:
        return _sized_draw(recorder, label, draw, sized, result)
    recorder.note_constants((args, kwargs), 'passed to %s' % label,
                            user_location(3))
    if not isinstance(result, numpy.ndarray):
        recorder.note_escape('%s gives a Python value' % label,
                             user_location(3))
        return result
    kernel_fn, arrays = numpy_kernel(draw, args, kwargs)
    in_values = [recorder.value_of(a) for a in arrays]
    if result.ndim == 0:
        kernel_fn = _as_array(kernel_fn)
    return _draw_node(recorder, label, ops.Kernel(kernel_fn), in_values,
                      result, ('numpy', draw, _split_arrays((args, kwargs),
                                                            [])))


def _sized_draw(recorder, label, draw, sized, result):
    """Records a draw whose shape holds an argument's size
    (``recorder.draw_of_sizes``: ``sized``) as an impure node reading that
    argument's size on every call: the result's axes of that size follow
    its rows (a GAN's noise at any batch size)."""
    drawn, leaf, origins, rest = sized
    recorder.note_constants(rest, 'passed to %s' % label, user_location(4))
    result = _draw_node(recorder, label, ops.Kernel(
        drawn, lengths=_rows_drawn(origins)),
        [recorder.value_of(recorder.input_arrays[leaf])], result,
        ('numpy', draw, _split_arrays(rest, [])))
    recorder.length_leaves[id(result)] = origins  # (its sizes are those)
    return result


def _rows_drawn(origins):
    """The ``Kernel.lengths`` rule of a draw whose axes are the sizes of
    its input's axes ``origins`` (``(leaf, axis)`` or ``None`` each): its
    rows there; none, of rows on an axis of the input it does not read
    (a mask drawn once of the batch's size, ``rand(B, H)``, before a loop
    over the steps)."""
    @ops.takes_axes
    def lengths(rows):
        found = rows[0]
        if found is None or found.also or found.widest:
            return None
        axes = [k for k, o in enumerate(origins)
                if o is not None and o[1] == found.axis]
        return ops.Follow((found.on_axes(axes) if axes else None,))
    return lengths


def _draw_node(recorder, label, kernel, in_values, result, template):
    """Records the impure node of a draw that gave ``result``; returns the
    result, traced."""
    result = _tag(result)
    node = recorder.add_node(ir.Node(
        label, kernel, in_values, recorder.bind_temps([result]), pure=False,
        loc=user_location(4)))
    recorder.templates[node] = template
    # The self-check runs the program without drawing again: it reads
    # what this draw gave.
    recorder.generic_outputs[node] = (untag(result),)
    return result


def record_draw_like(label, draw, like, lead):
    """``draw(lead + like.shape)``: a draw of the shape of ``like`` (a
    distribution's mean), ``n`` times over (``lead``: ``(n,)``), from
    NumPy's global generator, recorded as an impure node reading
    ``like``'s shape on every call: the axes after ``lead`` follow
    ``like``'s rows (a VAE's sample at any batch size)."""
    array = like._data[0] if isinstance(like, chainer.Variable) else like
    result = draw(lead + tuple(untag(array).shape))
    recorder = _state.recorder
    if recorder is None or recorder.depth:
        return result

    def drawn(x):
        return draw(lead + x.shape)
    return _draw_node(recorder, label, ops.Kernel(
        drawn, lengths=_rows_after(len(lead))), [recorder.value_of(like)],
        result, ('numpy', draw, ((lead,), {})))


def _rows_after(k):
    """The ``Kernel.lengths`` rule of an array whose axes after its first
    ``k`` are its input's: the rows move ``k`` axes on."""
    @ops.takes_widest
    def lengths(rows):
        return ops.Follow((rows[0]._replace(axis=rows[0].axis + k),))
    return lengths


# A generator's methods that set, read or copy its state, or change an
# array in place: escapes when the forward calls them.
GENERATOR_STATE = frozenset([
    'seed', 'get_state', 'set_state', 'shuffle', 'spawn', 'jumped',
    'bit_generator', '__getstate__', '__setstate__', '__reduce__'])


class RecordingGenerator(object):
    """Stands for a NumPy random generator (``RandomState`` or
    ``Generator``) held by a link while the forward is recorded: each
    draw is recorded (:func:`record_draw`) as a call of the generator's
    own method, which the program makes again on every call; using its
    state is an escape."""

    def __init__(self, generator, label):
        object.__setattr__(self, '_generator', generator)
        object.__setattr__(self, '_label', label)

    def __getattr__(self, name):
        attr = getattr(self._generator, name)
        if name in GENERATOR_STATE or name.startswith('_') or \
                not callable(attr):
            escape('using %s.%s in the forward' % (self._label, name))
            return attr
        label = '%s.%s' % (self._label, name)

        def draw(*args, **kwargs):
            return record_draw(label, attr, args, kwargs,
                               as_library(attr, *args, **kwargs))
        return draw

    def __setattr__(self, name, value):
        escape('changing %s in the forward' % self._label)
        setattr(self._generator, name, value)


def record_branch(recorder, label, fn, args, kwargs, result, test):
    """Records ``if <array>.all():`` (or ``any``, or a ``while`` test):
    the reduction as a node giving a 0-d array, then a guard that the
    branch goes the same way (a loop turns the guard of its ``break`` into
    an exit)."""
    kernel_fn, arrays = numpy_kernel(fn, args, kwargs)
    in_values = [recorder.value_of(a) for a in arrays]
    out = numpy.asarray(result)
    condition = recorder.graph.add_value('temp', (), out.dtype)
    loc = user_location(4)
    template = _split_arrays((args, kwargs), [])
    # (of one array, over all its axes: at any number of its rows)
    rule = ops.rows_reduced_over(tuple(range(arrays[0].ndim)), False) \
        if len(arrays) == 1 and out.ndim == 0 else None
    reduction = recorder.add_node(ir.Node(
        label, ops.Kernel(_as_array(kernel_fn),
                          onnx=_numpy_to_onnx(fn, template), lengths=rule),
        in_values, [condition], loc=loc))
    recorder.templates[reduction] = ('numpy', fn, template)
    taken = bool(result) != test.negated
    checked = recorder.graph.add_value('temp', (), out.dtype)
    guard = ir.Node('Guard', structural.guard(bool(result)), [condition],
                    [checked], (('expect', bool(result)),), pure=False,
                    loc=loc)
    recorder.add_node(guard)
    recorder.templates[guard] = ('guard', test, taken)


# What ``x.all()``, ``x.any()``, ``numpy.all(x)`` and ``numpy.any(x)`` run.
_TRUTH_REDUCTIONS = frozenset([
    'numpy.logical_and.reduce', 'numpy.logical_or.reduce', 'numpy.all',
    'numpy.any'])


def _branch_test():
    """The ``loop_analysis.BranchTest`` of the user's line running now."""
    frame = sys._getframe(2)
    while frame is not None and not control.is_user_code(frame.f_code):
        frame = frame.f_back
    if frame is None:
        return None
    return loop_analysis.branch_test(frame.f_code, frame.f_lineno)


# NumPy calls on recorded arrays that ONNX export converts: comparisons
# and logical ops elementwise, and the reductions of ``.all()``/``.any()``.
_ONNX_ELEMENTWISE = {
    'equal': 'Equal', 'greater': 'Greater', 'less': 'Less',
    'greater_equal': 'GreaterOrEqual', 'less_equal': 'LessOrEqual',
    'logical_and': 'And', 'logical_or': 'Or', 'logical_not': 'Not',
    'not_equal': 'Equal', 'invert': 'Not'}
_ONNX_REDUCTIONS = {'logical_and': 'ReduceMin', 'logical_or': 'ReduceMax'}
# Arithmetic on floats: each operand is cast to the result's dtype first,
# as NumPy's type promotion does.
_ONNX_ARITHMETIC = {
    'add': 'Add', 'subtract': 'Sub', 'multiply': 'Mul',
    'true_divide': 'Div', 'divide': 'Div', 'negative': 'Neg',
    'absolute': 'Abs',
    'exp': 'Exp', 'log': 'Log', 'tanh': 'Tanh', 'sqrt': 'Sqrt',
    'sin': 'Sin', 'cos': 'Cos', 'reciprocal': 'Reciprocal',
    'maximum': 'Max', 'minimum': 'Min'}


def _numpy_to_onnx(fn, template, label=None):
    """The ONNX converter of a recorded NumPy call, or ``None``."""
    args, kwargs = template
    if label in _ONNX_METHODS and not kwargs:
        return _ONNX_METHODS[label](args)
    if label in _SHAPE_KEEPING_CONVERSIONS and \
            set(kwargs) <= {'copy', 'dtype', 'order'}:
        return _astype_to_onnx
    if label == 'numpy.sum' and args == (_Slot,) and set(kwargs) <= {
            'axis'} and kwargs.get('axis') is None:
        return _sum_to_onnx
    ufunc = getattr(fn, '__self__', None)
    if not isinstance(ufunc, numpy.ufunc):
        return None
    name = ufunc.__name__
    if fn.__name__ == '__call__' and name in _ONNX_ELEMENTWISE and \
            not kwargs:
        return _elementwise_to_onnx(name, args)
    if fn.__name__ == '__call__' and name in _ONNX_ARITHMETIC and \
            not kwargs:
        return _arithmetic_to_onnx(_ONNX_ARITHMETIC[name], args)
    if fn.__name__ == 'reduce' and name == 'add' and args == (_Slot,) and \
            kwargs.get('axis') is None and not kwargs.get('keepdims') and \
            kwargs.get('dtype') is None and \
            set(kwargs) <= {'axis', 'dtype', 'keepdims', 'where'} and \
            kwargs.get('where', True) is True:  # (w.sum())
        return _sum_to_onnx
    if fn.__name__ == 'reduce' and name in _ONNX_REDUCTIONS and \
            args == (_Slot,) and kwargs.get('axis') is None and \
            not kwargs.get('keepdims') and kwargs.get('dtype') in (
                None, numpy.dtype(bool)):  # (NumPy 2's x.all() names bool)
        return _reduction_to_onnx(_ONNX_REDUCTIONS[name])
    return None


def _elementwise_to_onnx(name, args):
    def convert(b, ins, outs):
        arrays = iter(zip(ins, b.in_dtypes))
        # The arrays compared in the type NumPy promotes them to (an int32
        # input against an int64 arange), a Python number (a loop's
        # counter too) in theirs.
        slots = [a for a in args if a in (_Slot, _IntSlot)]
        dtype = numpy.result_type(*[
            d for a, d in zip(slots, b.in_dtypes) if a is _Slot] + [
            a.dtype for a in args if isinstance(a, numpy.ndarray)] or [
            b.in_dtypes[0]])
        operands = _operands(b, arrays, args, dtype)
        if name == 'not_equal':
            equal = b.op('Equal', operands)[0]
            b.op('Not', [equal], outs)
        elif name == 'invert' and dtype != bool:
            raise _export_error('numpy.invert of integers')
        else:
            b.op(_ONNX_ELEMENTWISE[name], operands, outs)
    return convert


def _arithmetic_to_onnx(op, args):
    def convert(b, ins, outs):
        dtype = b.out_dtypes[0]
        if dtype.kind not in 'fiu' or (dtype.kind != 'f' and
                                       op not in _ONNX_INTEGER_ARITHMETIC):
            raise _export_error('numpy arithmetic on %s' % dtype)
        b.op(op, _operands(b, iter(zip(ins, b.in_dtypes)), args, dtype),
             outs)
    return convert


def _operands(b, arrays, args, dtype):
    """The ONNX operands of a NumPy call's ``args``, each of ``dtype``: the
    next of ``arrays`` (``(name, dtype)`` pairs) for each slot, cast; a
    constant for the others."""
    return [b.cast(*next(arrays), dtype) if a in (_Slot, _IntSlot) else
            b.constant(numpy.asarray(a, dtype)) for a in args]


# Arithmetic that ONNX computes on integers as NumPy does (wrapping).
_ONNX_INTEGER_ARITHMETIC = frozenset(['Add', 'Sub', 'Mul', 'Neg', 'Abs',
                                      'Max', 'Min'])


def _sum_to_onnx(b, ins, outs):
    """``numpy.sum`` of all elements (booleans counted as NumPy's ints)."""
    summed = b.cast(ins[0], b.in_dtypes[0], b.out_dtypes[0])
    b.op('ReduceSum', [summed], outs, keepdims=0)


def _astype_to_onnx(b, ins, outs):
    """``x.astype(dtype)``, ``numpy.array(x, dtype)`` and the like as ONNX
    ``Cast`` (an ``Identity`` where the dtype is the same)."""
    b.op('Identity', [b.cast(ins[0], b.in_dtypes[0], b.out_dtypes[0])],
         outs)


def _reshape_to_onnx(args):
    """``x.reshape(shape)`` (C order) as ONNX ``Reshape`` to the recorded
    shape (with a dynamic batch, axis 0 follows it: ``ops.array``)."""
    shape = args[1] if len(args) == 2 and isinstance(args[1], tuple) \
        else args[1:]
    if not all(type(n) is int for n in shape):
        return None

    def convert(b, ins, outs):
        array_ops.onnx_reshape(b, ins[0], b.out_shapes[0], outs)
    return convert


def _basic_index_to_onnx(args):
    """``x[index]`` with ints, slices of ints, ``None`` and ``Ellipsis``,
    as ``F.get_item``'s ONNX form (``ops.array.onnx_get_item``); or with
    one array of ints (a table's rows picked by labels, ``w[t]``), a
    ``Gather``."""
    if len(args) == 2 and args[1] is _Slot:
        return _gathered_to_onnx
    index = args[1] if isinstance(args[1], tuple) else (args[1],)
    if len(args) != 2 or not all(
            type(i) is int or i is None or i is Ellipsis or (
                type(i) is slice and all(
                    type(v) in (int, type(None))
                    for v in (i.start, i.stop, i.step)) and i.step != 0)
            for i in index):
        return None

    def convert(b, ins, outs):
        array_ops.onnx_get_item(index, len(b.in_shapes[0]))(b, ins, outs)
    return convert


def _gathered_to_onnx(b, ins, outs):
    if b.in_dtypes[1].kind != 'i':
        raise _export_error('an array indexed by an array of %s'
                            % b.in_dtypes[1])
    b.op('Gather', ins, outs, axis=0)


# ``ndarray`` methods recorded with an ONNX form: ``fn(args)`` gives the
# converter of a call, or ``None``.
_ONNX_METHODS = {'ndarray.reshape': _reshape_to_onnx,
                 'ndarray.__getitem__': _basic_index_to_onnx,
                 BROADCAST_LIKE: lambda args: array_ops.broadcast_like_to_onnx}


def _reduction_to_onnx(op):
    def convert(b, ins, outs):
        as_int = b.op('Cast', ins, to=6)[0]  # int32: ReduceMin needs numbers
        reduced = b.op(op, [as_int], keepdims=0)[0]
        b.op('Cast', [reduced], outs, to=9)  # bool
    return convert


def _export_error(what):
    from chainerjit.errors import ExportError
    return ExportError('%s cannot be exported' % what)


def _value_shaped(label, args):
    name = label.split('.')[-1]
    if name == '__getitem__':
        return _has_bool_array(args[1])
    if name == 'repeat':  # (as many copies as a value computed says)
        return len(args) > 1 and holds_traced(args[1])
    return name in _VALUE_SHAPED or (name == 'where' and len(args) == 1)


def _is_arrays(result):
    types = chainer.get_array_types()
    if type(result) in (tuple, list):
        return bool(result) and all(isinstance(r, types) for r in result)
    return isinstance(result, types)


def _has_bool_array(index):
    items = index if type(index) is tuple else (index,)
    return any(isinstance(i, numpy.ndarray) and i.dtype == bool
               for i in items)


class _Slot(object):
    """Marks where an array goes in :func:`_split_arrays`' template."""


class _IntSlot(object):
    """Marks where an :class:`AsInt` array goes, as a Python int."""


class AsInt(object):
    """A 0-d int array a recorded NumPy call takes as a Python int (an
    argument's size computed at run time: ``lengths.as_run_time_int``)."""

    __slots__ = ('array',)

    def __init__(self, array):
        self.array = array


def _split_arrays(obj, arrays):
    """Replaces the arrays in nested tuples, lists and dicts by slots."""
    if isinstance(obj, chainer.get_array_types()):
        arrays.append(obj)
        return _Slot
    if type(obj) is AsInt:
        arrays.append(obj.array)
        return _IntSlot
    if type(obj) in (tuple, list):
        return type(obj)(_split_arrays(x, arrays) for x in obj)
    if type(obj) is dict:
        return {k: _split_arrays(v, arrays) for k, v in obj.items()}
    return eager_numbers(obj)


def _fill(template, arrays):
    """Puts arrays (an iterator) back into :func:`_split_arrays`' slots."""
    if template is _Slot:
        return next(arrays)
    if template is _IntSlot:
        return int(next(arrays))
    if type(template) in (tuple, list):
        return type(template)(_fill(x, arrays) for x in template)
    if type(template) is dict:
        return {k: _fill(v, arrays) for k, v in template.items()}
    return template


def ufunc_taking_ints(template, label, inputs, ints):
    """A recorded NumPy ufunc's call (``template``, ``label``, reading
    ``inputs``) given instead the 0-d int arrays ``ints`` (``(argument
    position, value)`` each) as its int arguments at those positions, as
    Python ints: ``(kernel function, ONNX converter or None, its
    inputs)``."""
    _, fn, (args, kwargs) = template
    at = dict(ints)
    args = tuple(_IntSlot if k in at else a for k, a in enumerate(args))
    recorded = iter(inputs)
    taken = [at[k] if k in at else next(recorded)
             for k, a in enumerate(args) if a is _Slot or a is _IntSlot]
    taken += list(recorded)  # (those of the keyword arguments)
    template = (args, kwargs)

    def run(*arrays):
        args, kwargs = _fill(template, iter(arrays))
        return fn(*args, **kwargs)
    convert = _numpy_to_onnx(fn, template, label)
    return run, convert and _ints_cast(convert, [
        n for n, v in enumerate(taken) if v in at.values()]), taken


def _ints_cast(convert, positions):
    """``convert``, an ONNX converter, given its inputs at ``positions``
    (int64 counts) cast to the first other input's type."""
    def cast(b, ins, outs):
        dtype = next(d for n, d in enumerate(b.in_dtypes)
                     if n not in positions)
        ins = [b.cast(x, b.in_dtypes[n], dtype) if n in positions else x
               for n, x in enumerate(ins)]
        return convert(b, ins, outs)
    return cast


class ItemsOfJoined:
    """Base of the lists the forward gets for a joined list argument
    (``joining.JoinedList``), which note the forward iterating over them.
    NumPy's dispatch iterates a list passed to its functions itself, in C
    (``xp.concatenate(ts)``): :meth:`dispatched` takes that back."""

    def dispatched(self):
        raise NotImplementedError

    def plain(self):
        """The items in a plain list (or tuple), not iterated."""
        kind = list if isinstance(self, list) else tuple
        return kind(kind.__iter__(self))


def undispatched(args):
    """``args`` of a NumPy function, a list of a joined argument's items
    first (``xp.concatenate(ts)``, ``xp.stack(xs)``) as a plain one, its
    iteration by NumPy's dispatch not the forward's."""
    if not args or not isinstance(args[0], ItemsOfJoined):
        return args
    args[0].dispatched()
    return (args[0].plain(),) + tuple(args[1:])


def numpy_kernel(fn, args, kwargs):
    """A kernel calling ``fn(*args, **kwargs)`` with new arrays in place of
    the recorded ones. Returns ``(kernel function, recorded arrays)``."""
    arrays = []
    template = _split_arrays((args, kwargs), arrays)

    def run(*new_arrays):
        args, kwargs = _fill(template, iter(new_arrays))
        return fn(*args, **kwargs)
    return run, arrays


class TracedArray(numpy.ndarray):
    """A NumPy array computed from the inputs, seen while recording.

    It behaves as an ordinary ndarray. NumPy run on it outside Chainer
    functions (``x.array > 0``, ``numpy.abs(v.array)``) is recorded as a
    node; turning its values into Python values (``float``, ``.item()``,
    ``bool``) is a data escape.
    """

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        call = getattr(ufunc, method)
        untagged = {k: untag(v) for k, v in kwargs.items()}
        result = call(*eager_numbers(untag(inputs)), **untagged)
        name = 'numpy.' + ufunc.__name__ + ('' if method == '__call__' else
                                            '.' + method)
        # An elementwise op on 0-d arrays, or a sum (``(y == t).sum()``):
        # the NumPy scalar eager gives, kept a followed 0-d array.
        result = _followed_scalar(result, method in ('__call__', 'reduce')
                                  and name not in _TRUTH_REDUCTIONS)
        if 'out' in kwargs:  # as NumPy does, return `out` itself
            out = kwargs['out']
            result = out[0] if len(out) == 1 else out
        _record_numpy(name, call, inputs, kwargs, result)
        return result

    def __array_function__(self, func, types, args, kwargs):
        args = undispatched(args)
        untagged = {k: untag(v) for k, v in kwargs.items()}
        result = _followed_scalar(func(*eager_numbers(untag(args)),
                                       **untagged),
                                  func.__name__ in _SCALAR_REDUCTIONS)
        _record_numpy('numpy.' + func.__name__, func, args, kwargs, result)
        return result

    def _replayed(name):
        base = getattr(numpy.ndarray, name)

        def replayed(self, *args, **kwargs):
            plain = self.view(numpy.ndarray)
            result = base(plain, *args, **kwargs)
            if result is plain:  # a no-op: astype(same dtype, copy=False)
                return self
            result = _followed_scalar(result, name in _SCALAR_REDUCTIONS)
            _record_numpy('ndarray.' + name, base, (self,) + args, kwargs,
                          result)
            return result
        replayed.__name__ = name
        return replayed

    # mean, var and std divide with out= inside: one op each instead.
    for _name in ('astype', 'reshape', 'transpose', 'swapaxes', 'copy',
                  'ravel', 'flatten', 'squeeze', 'argmax', 'argmin',
                  'argsort', 'nonzero', '__getitem__', 'repeat', 'take',
                  'dot', 'mean', 'var', 'std'):
        locals()[_name] = _replayed(_name)

    @property
    def T(self):
        return self.transpose()

    def _not_in_place(name, operator):
        """``x += y`` of a 0-d array standing for a NumPy scalar
        (:func:`is_scalar`): a new value, as for the immutable scalar
        eager has (``correct += (y == t).sum()`` in a loop)."""
        in_place = getattr(numpy.ndarray, name)

        def apply(self, other):
            if self.__dict__.get('scalar', False):
                return operator(self, other)
            return in_place(self, other)
        apply.__name__ = name
        return apply

    for _name, _operator in (
            ('__iadd__', operator.add), ('__isub__', operator.sub),
            ('__imul__', operator.mul), ('__itruediv__', operator.truediv),
            ('__ifloordiv__', operator.floordiv),
            ('__imod__', operator.mod), ('__ipow__', operator.pow),
            ('__iand__', operator.and_), ('__ior__', operator.or_),
            ('__ixor__', operator.xor)):
        locals()[_name] = _not_in_place(_name, _operator)

    def _read(name):
        base = getattr(numpy.ndarray, name)

        def read(self, *args, **kwargs):
            escape('%s of an array value' % name.strip('_'))
            return base(self.view(numpy.ndarray), *args, **kwargs)
        read.__name__ = name
        return read

    # A value turned into text (``print(h.array)``, ``f'{acc}'``) is read
    # into Python too: compiled calls would neither print nor format it.
    for _name in ('__float__', '__int__', '__index__', '__bool__',
                  '__complex__', 'item', 'tolist', 'tobytes', 'tostring',
                  '__str__', '__repr__', '__format__'):
        if hasattr(numpy.ndarray, _name):  # NumPy 2 has no tostring
            locals()[_name] = _read(_name)
    del _name, _read, _replayed

    def __setitem__(self, index, value):
        # Writing an array onto its own memory (``self.avg_mean[:] =
        # func.running_mean`` after the node updated it in place, as
        # ChainerMN's batch normalization does) changes nothing: nothing
        # to replay. Any other write is an escape.
        if not _is_self_copy(self, index, value):
            escape('setitem of an array value')
        return numpy.ndarray.__setitem__(self.view(numpy.ndarray), index,
                                         value)

    def __iter__(self):
        if self.ndim <= 1:
            escape('iterating over an array value')
        return numpy.ndarray.__iter__(self)


class MadeArray(numpy.ndarray):
    """An array the forward made with a NumPy maker (``numpy.full``,
    ``zeros``, ...) while recording, and the views of it. It is a plain
    array (NumPy run on it gives plain arrays), but for writes: one of a
    value computed from the inputs (``block[i, :len(x)] = x``, a batch
    padded by hand), or at positions computed from them,
    is an escape, since the array would otherwise be taken for a constant
    holding the recorded values. So is any write once the array's memory
    is a constant of the program."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if 'out' in kwargs:
            out = kwargs['out']
            _note_write(out, inputs)
            kwargs['out'] = tuple(_plain(x) for x in out)
        if method == 'at':  # ``numpy.add.at(a, index, b)`` writes into a
            _note_write(inputs[:1], inputs[1:])
        result = getattr(ufunc, method)(*_plain(inputs), **kwargs)
        if 'out' in kwargs:  # (w /= w.sum(): w, a made array still)
            return out[0] if len(out) == 1 and \
                result is kwargs['out'][0] else result
        if method == '__call__':
            # Of positions made of a size: ``pos[None] <= pos[:, None]``.
            result = _recorded_of_made('numpy.' + ufunc.__name__,
                                       ufunc.__call__, inputs, kwargs,
                                       result)
        return made_view(result, 2)  # (w.sum(0): a reduction)

    def __array_function__(self, func, types, args, kwargs):
        if func.__name__ in _WRITERS:
            _note_write(args[:1], (args[1:], kwargs))
        result = func(*_plain(args), **_plain(kwargs))
        label = 'numpy.' + func.__name__
        if func.__name__ in _MASKS or label in _MADE_LIKE or \
                label in JOINS:
            # (numpy.tril(numpy.ones((T, T))), a state's zeros_like(h),
            # labels joined: concatenate([ones((B, 1)), zeros((B, 1))]))
            result = _recorded_of_made(label, func, args, kwargs, result)
        # (a table the forward made, numpy.tile(w, 2), indexed by labels)
        return made_view(result, 2)

    def _followed(name):
        """The method ``name`` of a copy (``made.astype('i')``: positions
        of a size as ids; ``h.copy()``: a second state), recorded where
        the array is made of sizes a node makes again; else a made array
        of its own."""
        method = getattr(numpy.ndarray, name)

        def followed(self, *args, **kwargs):
            plain = self.view(numpy.ndarray)
            result = method(plain, *args, **kwargs)
            if result is plain:
                return self
            recorded = _recorded_of_made('ndarray.' + name, method,
                                         (self,) + args, kwargs, result)
            return recorded if recorded is not result else \
                result.view(MadeArray)
        followed.__name__ = name
        return followed

    astype = _followed('astype')
    copy = _followed('copy')
    del _followed

    def _reading(name):
        """The method ``name``, given a traced array (``made.take(t)`` of
        the labels), a node reading it, where NumPy's would read it in C;
        else NumPy's, a made array."""
        method = getattr(numpy.ndarray, name)

        def reading(self, *args, **kwargs):
            plain = self.view(numpy.ndarray)
            if not holds_traced((args, kwargs)):
                return made_view(method(plain, *args, **kwargs), 2)
            result = method(plain, *untag(args), **untag(kwargs))
            return _recorded('ndarray.' + name, method, (self,) + args,
                             kwargs, result)
        reading.__name__ = name
        return reading

    for _name in ('take', 'repeat', 'choose', 'compress', 'searchsorted',
                  'dot', 'clip'):
        locals()[_name] = _reading(_name)
    del _name, _reading

    def __getitem__(self, index):
        """A view or copy of a made array, as NumPy's; indexed by a
        traced array (one-hot rows, ``numpy.eye(n)[t]`` of the labels),
        a node reading the index."""
        getitem = numpy.ndarray.__getitem__
        if not holds_traced(index):
            return getitem(self, index)
        result = getitem(self.view(numpy.ndarray), untag(index))
        if type(result) is not numpy.ndarray:
            return result
        return _recorded('ndarray.__getitem__', getitem, (self, index), {},
                         result)

    def __setitem__(self, index, value):
        _note_write((self,), (index, value))
        numpy.ndarray.__setitem__(self.view(numpy.ndarray), index,
                                  untag(value))

    def _writing(name):
        write = getattr(numpy.ndarray, name)

        def writing(self, *args, **kwargs):
            _note_write((self,), (args, kwargs))
            return write(self.view(numpy.ndarray), *untag(args), **kwargs)
        writing.__name__ = name
        return writing

    for _name in ('put', 'itemset', 'setfield'):
        if hasattr(numpy.ndarray, _name):  # NumPy 2 has no itemset
            locals()[_name] = _writing(_name)
    del _name, _writing

    @property
    def flat(self):
        return _WatchedFlat(self)


class _WatchedFlat(object):
    """``made.flat`` of a :class:`MadeArray`: a write through it is
    watched as one into the array."""

    def __init__(self, array):
        self._array = array
        self._flat = array.view(numpy.ndarray).flat

    def __setitem__(self, index, value):
        _note_write((self._array,), (index, value))
        self._flat[index] = untag(value)

    def __getattr__(self, name):
        return getattr(self._flat, name)

    def __getitem__(self, index):
        return self._flat[index]

    def __iter__(self):
        return iter(self._flat)

    def __len__(self):
        return len(self._flat)

    def __array__(self, *args, **kwargs):
        return self._flat.__array__(*args, **kwargs)


def recorded_past_dispatch(label, fn, args, kwargs):
    """``fn(*args, **kwargs)``, a NumPy function whose dispatch sees its
    first argument alone (``numpy.take``'s indices, ``repeat``'s counts
    are not looked at), recorded where a traced array is among the others
    and the first is not: NumPy would compute it in C, unseen."""
    result = fn(*args, **kwargs)
    if isinstance(args[0] if args else None, TracedArray) or \
            type(result) is not numpy.ndarray or \
            not holds_traced((args[1:], kwargs)):
        return result
    return _recorded(label, fn, args, kwargs, result)


# NumPy's functions that write into their first argument.
_WRITERS = frozenset(['copyto', 'fill_diagonal', 'place', 'put',
                      'put_along_axis', 'putmask'])


def made_view(array, depth):
    """``array``, just made by a NumPy maker (or by NumPy from a made
    array, or of Python's numbers) called ``depth`` frames up, seen as a
    :class:`MadeArray` where the forward's own code made it (not
    Chainer's, NumPy's or chainerjit's: Chainer's padding of a batch is
    recorded as one op, ``recording_patches._recording_padding``); else
    as it is. Indexed by a traced array, a made array is read by a node
    (a table of class weights, ``numpy.array([1., 10.])[t]``), where
    NumPy's own indexing would hand back the recorded values."""
    recorder = _state.recorder
    if recorder is None or recorder.depth or \
            type(array) is not numpy.ndarray or is_library_file(
                _past_numpy(sys._getframe(depth)).f_code.co_filename):
        return array
    return array.view(MadeArray)


def _past_numpy(frame):
    """``frame``, or the first above it outside NumPy's own code (a
    method's, ``w.sum(0)`` reducing in ``numpy/core/_methods.py``)."""
    while frame.f_back is not None and \
            frame.f_code.co_filename.startswith(_NUMPY_DIR):
        frame = frame.f_back
    return frame


_NUMPY_DIR = os.path.dirname(numpy.__file__) + os.sep


def constant(array):
    """The data of a constant of the program holding ``array``: an array
    the forward made, as it is now (the code after a graph break may
    write into it once the recording is over), else ``array`` itself."""
    if isinstance(array, MadeArray):
        return array.view(numpy.ndarray).copy()
    return array


def _plain(obj):
    """``obj`` with made arrays (in lists, tuples and dicts too) as plain
    ones."""
    if isinstance(obj, MadeArray):
        return obj.view(numpy.ndarray)
    if type(obj) in (list, tuple):
        return type(obj)(_plain(x) for x in obj)
    if type(obj) is dict:
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def _note_write(targets, written):
    """Notes an escape where the arrays ``targets`` are written with (or
    at positions given by) a value computed from the inputs in
    ``written``, or where one's memory is a constant of the program."""
    recorder = _state.recorder
    if recorder is None or recorder.depth:
        return
    loc = user_location(3)
    recorder.note_write(written, loc)
    if holds_traced(list(written)):
        recorder.note_escape('writing an array computed from the inputs '
                             'into an array made by NumPy', loc)
    elif any(isinstance(t, numpy.ndarray) and recorder.is_constant_memory(t)
             for t in targets):
        recorder.note_escape('writing into an array the program already '
                             'took as a constant', loc)


def _is_self_copy(target, index, value):
    """True when ``target[index] = value`` writes every element of
    ``target`` with itself: the index selects the whole array and
    ``value`` is an array over the same memory, element for element."""
    items = index if type(index) is tuple else (index,)
    whole = len(items) <= max(target.ndim, 1) and all(
        i is Ellipsis or (type(i) is slice and i == slice(None))
        for i in items)
    return whole and isinstance(value, numpy.ndarray) and \
        value.dtype == target.dtype and value.shape == target.shape and \
        value.strides == target.strides and \
        value.__array_interface__['data'][0] == \
        target.__array_interface__['data'][0]


def untag_graph(nodes):
    """Turns the traced views kept by Chainer's graph (retained inputs
    and outputs and arrays nodes keep as attributes, for the eager
    backward of the recording call) back into plain arrays, so that
    gradients and optimizer states computed from them are plain too."""
    for node in nodes:
        where, plains = [], []
        for name, index, array in ops.array_attributes(node):
            plain = untag(array)
            if plain is not array:
                where.append((name, index))
                plains.append(plain)
        ops.set_array_attributes(ops.state_holder(node), where, plains)
        if node._retained_output_data is not None:
            node._retained_output_data = tuple(
                untag(a) for a in node._retained_output_data)
        # (an output nothing read, alive still, is what the backward
        # retains of it: F.slstm's cell state when only h is returned)
        for variable_node in list(node.inputs or ()) + [
                ref() for ref in getattr(node, 'outputs', None) or ()]:
            if variable_node is None:
                continue
            plain = untag(variable_node.data)
            if plain is not variable_node.data:
                variable_node.data = plain


# --- CuPy arguments ----------------------------------------------------------
# CuPy arrays cannot be traced as NumPy's are (TracedArray: CuPy's own
# functions do not hand subclasses back). A CuPy array passed as an
# argument is viewed while recording as a GpuArgument: its basic indexing
# by the forward's code (``xs[t]``) is recorded, as NumPy's is; any other
# use by that code (arithmetic, methods, reading values) is an escape.
# Its shape and dtype may be read, and Chainer functions take it as usual.

_GPU_METADATA = frozenset(['shape', 'dtype', 'ndim', 'size', 'itemsize',
                           'nbytes', 'strides', 'device', 'flags'])
_GPU_OPERATORS = (
    'add sub mul truediv floordiv mod pow matmul and or xor lshift rshift '
    'divmod').split()
_GPU_READS = (
    '__float__ __int__ __index__ __bool__ __complex__ __setitem__ '
    '__contains__ __neg__ __pos__ __abs__ __invert__ __lt__ __le__ __gt__ '
    '__ge__ __eq__ __ne__').split() + [
    '__%s%s__' % (prefix, op) for op in _GPU_OPERATORS
    for prefix in ('', 'r', 'i')]
_gpu_argument_class = []


def _is_gpu_argument(obj):
    return bool(_gpu_argument_class) and isinstance(
        obj, _gpu_argument_class[0])


def _used_by_the_forward():
    """True when the code using a GpuArgument (two frames up, past CuPy's
    own Python code) is the forward's, outside Chainer functions."""
    recorder = _state.recorder
    if recorder is None or recorder.depth:
        return False
    frame = sys._getframe(2)
    while frame is not None and is_cupy_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame is not None and not is_library_file(
        frame.f_code.co_filename)


def _is_basic_index(index):
    """Integers, slices of integers, ``None`` and ``...``."""
    def integer(i):
        return isinstance(i, (int, numpy.integer)) and not isinstance(
            i, (bool, numpy.bool_))
    return all(
        i is None or i is Ellipsis or integer(i) or (
            type(i) is slice and all(b is None or integer(b)
                                     for b in (i.start, i.stop, i.step)))
        for i in (index if type(index) is tuple else (index,)))


def gpu_argument_type():
    """The GpuArgument class, made on first use (it subclasses
    ``cupy.ndarray``)."""
    if _gpu_argument_class:
        return _gpu_argument_class[0]
    base = chainer.backends.cuda.ndarray

    def __getattribute__(self, name):
        if name[:1] != '_' and name not in _GPU_METADATA and \
                _used_by_the_forward():
            escape('%s of a CuPy argument' % name)
        return base.__getattribute__(self, name)

    def __getitem__(self, index):
        if _used_by_the_forward():
            if not _is_basic_index(index):
                escape('indexing a CuPy argument with arrays or masks')
            else:
                result = base.__getitem__(self, index)
                _record_numpy('ndarray.__getitem__', base.__getitem__,
                              (self, index), {}, result)
                return result
        return base.__getitem__(self, index)

    def reading(name):
        method = getattr(base, name)

        def read(self, *args):
            if _used_by_the_forward():
                escape('%s of a CuPy argument' % name.strip('_'))
            return method(self, *args)
        read.__name__ = name
        return read

    namespace = dict((name, reading(name)) for name in _GPU_READS
                     if hasattr(base, name))
    namespace.update(__getattribute__=__getattribute__,
                     __getitem__=__getitem__, __doc__=(
                         'A CuPy argument seen while recording.'))
    _gpu_argument_class.append(type('GpuArgument', (base,), namespace))
    return _gpu_argument_class[0]
