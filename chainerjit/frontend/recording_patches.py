"""The patches in force only while a forward is recorded, in one table.

Each :class:`RecordingPatch` of :data:`RECORDING_PATCHES` replaces one
attribute of Chainer, NumPy or CuPy for the time of a recording;
:func:`in_force` applies them all and puts back what their owners held.
The patches are process-wide (``trace`` records one forward at a time);
each acts for the recording thread only, whose recorder is ``_state``'s.

=================================  ====================================
what it replaces                   while recording
=================================  ====================================
``FunctionNode.apply``             records each node applied at the top
``Link.__setattr__``               notes assignments, to replay
``Link.__getattribute__``          notes attributes read before set
``chainer.report``                 notes reports, to replay
``Variable.backward``, ``grad``    calling one is an escape
``Variable.array``, ``.data``      reading a CuPy array is an escape
``LocalConfig.__getattr__``        notes the config entries read
``numpy.random``'s functions       a draw is recorded as an op
``random``'s, ``Random``'s draws   a draw is an escape
``numpy.asarray``, ``array``, ...  a traced array's: recorded as ops
``concat_examples``' stack, pad    of traced arrays: one op each
NumPy on items of joined lists     once for all items, and sums
``shape``, ``size``, ``len``       an argument's sizes: ``Length`` ints
``sorted`` by items' lengths       noted: a joined call sorts the list
``Variable`` ``/`` and ``*``       a size there: read at run time
``numpy.zeros``, ``ones``, ...     notes the sizes passed to them
``math``'s functions               note the varying numbers passed
the NStep links' ``forward``       one ``ops.nstep.NStepRNN`` node
``F.n_step_lstm`` and its kin      on transposed sequences: so too
``F.dropout`` in test mode         of items, no count of them
CuPy's ``zeros``, ``ones``, ...    notes the arrays made, as constants
=================================  ====================================

The patches of the fast paths, installed for good, are the other table:
``chainerjit.fastpaths.PATCHES``.
"""

import builtins
import collections
import contextlib
import math
import operator
import os
import random
import sys
import sysconfig

import chainer
import chainer.functions
from chainer.functions.array import transpose_sequence as \
    transpose_sequence_module
from chainer.functions.loss import crf1d as crf1d_module
from chainer.functions.math import bias as bias_module
from chainer.functions.math import scale as scale_module
from chainer.links.rnn import n_step_gru
from chainer.links.rnn import n_step_lstm
from chainer.links.rnn import n_step_rnn
import numpy

from chainerjit import ops
from chainerjit.ops import array as array_ops
from chainerjit.ops import loss as loss_ops
from chainerjit.ops import nstep
from chainerjit import patching
from chainerjit.frontend import _keys
from chainerjit.frontend import control
from chainerjit.frontend import item_sums
from chainerjit.frontend import joining
from chainerjit.frontend import lengths
from chainerjit.frontend import scalars
from chainerjit.frontend import sorting
from chainerjit.frontend import traced
from chainerjit.frontend import trip_counts

_state = _keys.recording  # this thread's


class RecordingPatch(collections.namedtuple('RecordingPatch',
                                            'owner name make')):
    """``owner.name`` becomes ``make(original, recorder)`` while
    ``recorder`` records a forward."""


def _recording_apply(apply, recorder):
    """``FunctionNode.apply`` while recording: a node applied by the
    forward's code (not inside another node) becomes an IR node."""
    def recording_apply(node, inputs):
        current = _state.recorder  # thread-local: other threads see None
        if current is None or current.depth:
            return apply(node, inputs)
        if current.segment_items:
            outputs = joining.applied_to_items(node, inputs) or \
                item_sums.applied(node, inputs)
            if outputs is not None:
                return outputs
        trace = control.pause_tracing()
        try:
            template = ops.pristine_copy(node)
            outputs = traced.as_library(apply, node, inputs)
            current.record_node(node, template, inputs, outputs)
        finally:
            control.resume_tracing(trace)
        current.applied.append(node)
        return outputs
    return recording_apply


def _recording_setattr(link_setattr, recorder):
    """``Link.__setattr__`` while recording: notes the recording thread's
    assignments."""
    def setattr_recorded(link, name, value):
        if _state.recorder is recorder:
            loc = traced.user_location(2)
            value = lengths.plain(value, recorder.length_uses,
                                  'assigned to self.%s' % name, loc)
            recorder.first_access.setdefault((id(link), name), 'write')
            recorder.note_effect('setattr', link, name, value, loc)
        link_setattr(link, name, value)
    return setattr_recorded


def _recording_getattribute(link_getattribute, recorder):
    """``Link.__getattribute__`` while recording: notes which instance
    attributes the forward reads before it assigns them (``__dict__``
    itself read by the user's code, ``vars(link)``, as read:
    ``model_state.unread_numbers``; Chainer's own reads of it, for its
    parameters and links, ``self.children()``, are not), in other
    threads too (a helper the forward runs in a thread pool; the
    recording thread's reads alone are the links' it reads, which
    ``model_state.numbers_read_outside`` guards)."""
    first_access, links_read = recorder.first_access, recorder.links_read

    def getattribute(link, name):
        value = link_getattribute(link, name)
        current = _state.recorder
        if (current is recorder or current is None) and (
                name in link_getattribute(link, '__dict__') or
                name == '__dict__' and
                control.is_user_code(sys._getframe(1).f_code)) and \
                (id(link), name) not in first_access:
            first_access[id(link), name] = 'read'
            if current is recorder:
                links_read[id(link)] = link
        return value
    return getattribute


def _recording_report(report, recorder):
    """``chainer.report`` while recording: notes the recording thread's
    reports, to replay."""
    def report_recorded(values, observer=None):
        if _state.recorder is recorder:
            values, numbers = _reported_numbers(
                dict(values), recorder, sys._getframe(1))
            values = lengths.plain(values, recorder.length_uses,
                                   'reported', traced.user_location(2))
            recorder.note_effect('report', observer, None, values)
            # The reporter keeps what eager mode gives it.
            values = dict((k, numbers.get(k, traced.as_eager(v)))
                          for k, v in values.items())
        report(values, observer)
    return report_recorded


def _reported_numbers(values, recorder, frame):
    """``values`` with each varying number (``scalars.Scalar``, a float
    argument or the ``float()`` a graph break gave; an int the forward's
    code at ``frame`` computed of argument sizes, ``total += len(y)``) as
    a 0-d array bound to a node's output giving it
    (``recorder.numbers``), so that a compiled call reports its own
    number; and ``{key: number}`` of those numbers, which eager's reporter
    gets."""
    numbers = {}
    for key, value in values.items():
        base = None
        if type(value) is lengths.Length:  # (an int, reported as one)
            found = lengths.as_scalar(value, recorder, frame)
            value, base = (value, None) if found is None else (found, int)
        if scalars.is_varying(value):
            out, found = scalars.reported(value)
            base = base or found
            numbers[key] = base(scalars.plain_numbers(value))
            marker = numpy.array(numbers[key])
            recorder.bind(marker, out)
            recorder.numbers[id(marker)] = base
            values[key] = marker
    return values, numbers


def _escaping(what, cut=True):
    """The patch making a call of ``what`` an escape (its effects, such
    as gradients written by backprop inside the forward, are not
    recorded). Without ``cut``, the forward is not cut there but runs
    eagerly: ``chainer.grad`` differentiates through Variables the
    forward made before it (``gx`` of ``x = Variable(x)``), which a
    compiled piece before the call would make anew, out of the graph the
    gradients follow."""
    def make(fn, recorder):
        def escaping(*args, **kwargs):
            traced.escape('calling %s in the forward' % what)
            current = _state.recorder
            if not cut and current is not None and not current.depth:
                current.escape_line = None  # (never cut: eagerly)
            # (the gradient nodes backprop applies are not the forward's)
            return traced.as_library(fn, *args, **kwargs)
        return escaping
    return make


def _called_by_user(also=()):
    """Is the caller of the patched function calling this the user's
    code: not Chainer's, NumPy's or chainerjit's (nor in the files
    ``also``)?"""
    return not sys._getframe(2).f_code.co_filename.startswith(
        traced.LIBRARY_DIRS + also)


#: Python's ``random``: the module's functions (methods of its hidden
#: generator, bound when it was imported) and the draws of
#: ``random.Random`` that its other methods (``uniform``, ``choice``)
#: make. A draw by the forward's code is an escape: the recording would
#: replay the one it saw.
_PYTHON_DRAWS = ('random', 'getrandbits', 'uniform', 'randint', 'randrange',
                 'choice', 'choices', 'shuffle', 'sample', 'gauss',
                 'normalvariate', 'lognormvariate', 'expovariate',
                 'vonmisesvariate', 'gammavariate', 'betavariate',
                 'paretovariate', 'weibullvariate', 'triangular', 'seed',
                 'setstate')


def _python_draw(name):
    """The patch of ``random.NAME`` (or of ``random.Random.NAME``): a call
    from the forward's code is an escape."""
    def make(draw, recorder):
        def drawn(*args, **kwargs):
            if _state.recorder is recorder and not recorder.depth and \
                    _called_by_user((random.__file__,)):
                traced.escape('random.%s in the forward (Python\'s '
                              'generator)' % name)
            return draw(*args, **kwargs)
        return drawn
    return make


def _watching_gpu_reads(prop, recorder):
    """``Variable.array`` (or ``.data``) while recording: reading a CuPy
    array in user code is an escape, since CuPy arrays cannot be traced;
    so is assigning one to a Variable that a node of the recording made
    (``h.array = numpy.clip(h.array, -1, 1)``): Chainer's backward still
    runs through ``h``'s creator, which the recorded graph would not (the
    new array is data, with no gradient)."""
    def read(variable):
        array = prop.fget(variable)
        if array is not None and not isinstance(array, numpy.ndarray) and \
                _called_by_user():
            traced.escape('reading a CuPy array of a Variable')
        return array

    def write(variable, array):
        if variable.creator_node is not None and _called_by_user():
            traced.escape('assigning the array of a Variable a function '
                          'made (its gradient still reaches the function)')
        prop.fset(variable, array)
    return property(read, write, None, prop.__doc__)


def _reading_gradients(prop, recorder):
    """``Variable.grad`` (or ``.grad_var``) while recording: the
    gradient a forward's own code reads (a gradient's norm) is that of an
    earlier backward, which no node computes: an escape."""
    def read(variable):
        if _called_by_user():
            traced.escape('reading the gradient of a Variable')
        return prop.fget(variable)
    return property(read, prop.fset, prop.fdel, prop.__doc__)


def _noting_made_variables(init, recorder):
    """``Variable._init_impl`` while recording: notes each Variable
    made (``trace.Recorder.made_variables``)."""
    def noting(variable, *args):
        init(variable, *args)
        current = _state.recorder
        if current is not None:
            current.made_variables.add(id(variable))
    return noting


def _symbolic(read, depth=2):
    """The patch of ``x.shape`` (``read``: ``lengths.read_shape``) or
    ``x.size`` (``lengths.read_size``) while recording: an argument's
    sizes read by the forward are ``lengths.Length`` ints. ``depth``: the
    frames from ``read`` up to the forward's (3 through a GpuArgument's
    ``__getattribute__``)."""
    def make(prop, recorder):
        def get(x):
            return read(lengths.data_of(x), prop.__get__(x), depth)
        return property(get, getattr(prop, '__set__', None))
    return make


def _numpy_shape(shape, recorder):
    """``numpy.shape(x)`` while recording, as ``x.shape`` (NumPy reads
    the attribute itself, out of the forward's sight)."""
    def shape_of(a):
        return lengths.read_shape(lengths.data_of(a), shape(a), 2)
    shape_of.__wrapped__ = shape
    return shape_of


def _numpy_size(size, recorder):
    """``numpy.size(x, axis)`` while recording, as ``x.shape[axis]``
    (``x.size`` without an axis)."""
    def size_of(a, axis=None):
        if axis is None:
            return lengths.read_size(lengths.data_of(a), size(a), 2)
        return lengths.read_shape(lengths.data_of(a), numpy.shape(a),
                                  2)[axis]
    size_of.__wrapped__ = size
    return size_of


def _numpy_prod(prod, recorder):
    """``numpy.prod(x.shape)`` by the forward's code while recording: the
    product of the sizes, a Length (NumPy multiplies them in C,
    unseen)."""
    def product(a, *args, **kwargs):
        if args or kwargs or type(a) not in (tuple, list) or \
                not lengths.contained(a) or lengths.forward_line(1) is None \
                or not all(isinstance(n, int) for n in a):
            return prod(a, *args, **kwargs)
        return lengths.product_of(a)
    product.__wrapped__ = prod
    return product


def _symbolic_len(builtin_len, recorder):
    """``len(x)`` while recording, as ``x.shape[0]`` (:func:`_symbolic`);
    of a joined list, or a list of all the items of a value made of its
    items, its number of items."""
    def length(x):
        if joining.is_joined(x):  # its count is the joined array's
            return lengths.read_shape(x.joined, (builtin_len(x),), 2)[0]
        counted = _count_of(x) if recorder.segment_items and \
            type(x) in (list, tuple) else None
        if counted is not None:  # [f(x) for x in xs] of a joined xs
            return lengths.read_shape(counted, (builtin_len(x),), 2)[0]
        if type(x) is list and _state.recorder is recorder and \
                not recorder.depth:  # a loop's steps: its trip count
            lengths.note_loop_filled(recorder, x, sys._getframe(1))
        return lengths.read_shape(lengths.data_of(x), (builtin_len(x),), 2)[0]
    return length


def _symbolic_dunder_len(dunder_len, recorder):
    """``x.__len__()`` of a traced array or a Variable while recording
    (``operator.length_hint(x)`` calls it too), as ``len(x)`` reads it
    (:func:`_symbolic_len`): ``x.shape[0]``."""
    def length(x):
        return lengths.read_shape(lengths.data_of(x), (dunder_len(x),),
                                  2)[0]
    return length


def _count_of(xs):
    """The lengths of a joined list's items whose number ``len(xs)`` of the
    list ``xs`` the forward made is (``joining.count_of``,
    ``item_sums.count_of``), or ``None``."""
    counted = joining.count_of(xs)
    return item_sums.count_of(xs) if counted is None and \
        type(xs) is list else counted


def _recording_item_index(getitem, recorder):
    """``TracedArray.__getitem__`` while recording: ``x[::-1]``, ``x[1:]``
    and the like of an item of a joined list are the item's part of all
    the items so indexed (``joining.indexed_item``); an index holding the
    size of the axis it indexes counts from the end (``xs[-1]``:
    :func:`_from_the_end`)."""
    def getitem_of_items(x, index):
        if _state.recorder is recorder and not recorder.depth:
            cut = lengths.offsets_but_the_last(x, index)
            if cut is not None:  # (numpy.cumsum(x_len)[:-1])
                return cut
            index = _sized_index_seen(x, index, recorder)
            if recorder.segment_items and joining.is_item_index(index):
                found = joining.indexed_item(x, index)
                if found is not None:
                    return found
        return getitem(x, index)
    return getitem_of_items


def _recording_array_ufunc(array_ufunc, recorder):
    """``TracedArray.__array_ufunc__`` while recording: NumPy's element-wise
    functions of the items of joined lists (``y.array.argmax(axis=1) ==
    t``: ``joining.numpy_applied_to_items``), the sum of an item's
    elements and the sums of those (``correct += (...).sum()``:
    ``item_sums.numpy_applied``), each for all the items at once; else
    the traced call."""
    def dispatched(self, ufunc, method, *inputs, **kwargs):
        if _records_items(recorder):
            found = (joining.numpy_applied_to_items(ufunc, inputs)
                     if method == '__call__' and not kwargs else None)
            if found is None:
                found = item_sums.numpy_applied(ufunc, method, inputs,
                                                kwargs)
            if found is not None:
                return found
        return array_ufunc(self, ufunc, method, *inputs, **kwargs)
    return dispatched


def _records_items(recorder):
    """Is ``recorder`` recording this thread's forward's own code (not a
    function's inside) where it holds items of joined lists?"""
    return bool(recorder.segment_items) and _state.recorder is recorder \
        and not recorder.depth


def _recording_item_method(name):
    """A row-wise method of traced arrays (``joining.ROW_WISE_METHODS``)
    while recording: of an item of a joined list, the item's rows of it
    applied to the rows of all at once; ``astype`` of the offsets of a
    joined list's items, those offsets (``lengths.offsets_converted``);
    else the traced call."""
    def make(method, recorder):
        def on_item(self, *args, **kwargs):
            if name == 'astype' and _state.recorder is recorder and \
                    not recorder.depth:  # (of a joined list's offsets)
                found = lengths.offsets_converted(self, args, kwargs)
                if found is not None:
                    return found
            if _records_items(recorder):
                found = joining.numpy_method_on_item(name, method, self,
                                                     args, kwargs)
                if found is not None:
                    return found
            return method(self, *args, **kwargs)
        on_item.__wrapped__ = method
        return on_item
    return make


def _joins_rows(func, arrays, kwargs):
    """Does NumPy's ``func`` join ``arrays`` on their first axis
    (``numpy.concatenate``, on axis 0; ``numpy.hstack`` of 1-d arrays)?"""
    if func is _CONCATENATE:
        return kwargs in ({}, {'axis': 0})
    return func is numpy.hstack and not kwargs and \
        type(arrays) in (list, tuple) and \
        all(isinstance(a, numpy.ndarray) and a.ndim == 1 for a in arrays)


def _recording_array_function(array_function, recorder):
    """``TracedArray.__array_function__`` while recording: of the
    forward's ``numpy.concatenate`` (on the first axis) of an item of a
    joined list between constant rows (``xp.concatenate([eos, y])``,
    ``numpy.hstack`` of 1-d ones), the
    item's part of all the items so framed (``joining.framed_item``), as
    ``F.concat`` of them gives; of ``numpy.sum`` of an item's elements,
    the sums of all the items' at once (``item_sums.numpy_summed``); else
    the traced call."""
    def dispatched(self, func, types, args, kwargs):
        if _state.recorder is recorder and not recorder.depth and \
                len(args) == 1 and _joins_rows(func, args[0], kwargs):
            found = joining.framed_item(traced.undispatched(args)[0])
            if found is not None:
                return found
        if func is numpy.sum and _records_items(recorder) and \
                len(args) == 1 and not kwargs:  # (xp.sum(y == t))
            found = item_sums.numpy_summed(args[0])
            if found is not None:
                return found
        return array_function(self, func, types, args, kwargs)
    return dispatched


_CONCATENATE = numpy.concatenate


def _from_the_end(getitem, recorder):
    """``Variable.__getitem__`` while recording: an index holding the size
    of the axis it indexes (``h[T - 1]``) counts from the end (``h[-1]``:
    ``lengths.index_from_the_end``), the same at every size."""
    def getitem_from_the_end(x, index):
        if _state.recorder is recorder and not recorder.depth:
            index = _sized_index_seen(x, index, recorder)
        return getitem(x, index)
    return getitem_from_the_end


def _sized_index_seen(x, index, recorder):
    """``lengths.index_from_the_end`` of ``x[index]``, where the index
    holds sizes: the forward's indexing (two frames up) noted as one the
    recording saw (not a list's, in C: ``trip_counts.index_size_uses``).
    """
    return recorder.index_from_the_end(x, index, sys._getframe(2))


def _noting_lengths(name):
    """The patch of ``numpy.NAME``, an array maker: argument sizes passed
    to it by the forward are noted (``lengths.note_passed``)."""
    def make(fn, recorder):
        def noting(*args, **kwargs):
            return lengths.made_noting(name, fn, args, kwargs, 3)
        noting.__wrapped__ = fn
        return noting
    return make


def _recording_padding(pad, recorder):
    """``concat_examples(xs, padding=p)``'s padding of a batch while
    recording: a batch of arrays computed from the inputs (a list
    argument's items) is padded by one node, run again on every call,
    instead of by writes into an array NumPy made (which the program
    would take for a constant). Items alike but for their first axis are
    padded by ``F.pad_sequence``, at any lengths; others by Chainer's
    own code."""
    def padded(arrays, padding):
        if _state.recorder is not recorder or recorder.depth or \
                not traced.holds_traced(list(arrays)) or \
                not all(isinstance(a, numpy.ndarray) for a in arrays):
            return pad(arrays, padding)
        first = arrays[0]
        if first.ndim and isinstance(padding, (int, float)) and all(
                a.shape[1:] == first.shape[1:] and a.dtype == first.dtype
                for a in arrays):
            return chainer.functions.pad_sequence(
                list(arrays), padding=padding).array
        return traced.record_library_call(
            'concat_examples(padding=%r)' % (padding,),
            lambda *items: pad(items, padding), tuple(arrays))
    return padded


def _recording_stacking(concat, recorder):
    """``concat_examples(xs)``'s stack of a batch of arrays alike, computed
    from the inputs (a list argument's labels of one row each), while
    recording: ``numpy.stack`` of them, as Chainer's own code computes it
    (``concatenate([x[None] for x in xs])``), which ``joining`` joins;
    else Chainer's code."""
    def stacked(arrays, padding):
        if padding is not None or _state.recorder is not recorder or \
                recorder.depth or not isinstance(arrays, (list, tuple)) or \
                not arrays or not traced.holds_traced(list(arrays)):
            return concat(arrays, padding)
        first = arrays[0]
        if not all(isinstance(a, numpy.ndarray) and a.shape == first.shape
                   and a.dtype == first.dtype for a in arrays):
            return concat(arrays, padding)
        return numpy.stack(arrays)
    stacked.__wrapped__ = concat
    return stacked


# NumPy's array makers whose arguments are sizes.
_MAKERS = ('zeros', 'ones', 'empty', 'full', 'arange', 'eye', 'identity',
           'linspace')


def _recording_tri(tri, recorder):
    """``numpy.tri`` while recording, called by the forward's code with
    sizes it read (a decoder's causal mask, ``numpy.tri(T)``): the same
    array as ``numpy.tril`` of ones of that shape, made so (ones of sizes
    and their lower triangle follow the steps); else as ``numpy.zeros``
    and the other makers are (:func:`_noting_lengths`)."""
    def lower_triangle(N, M=None, k=0, dtype=float, **kwargs):
        if kwargs or _state.recorder is not recorder or \
                not lengths.contained((N, M)) or \
                lengths.contained(k) or lengths.forward_line(1) is None:
            return lengths.made_noting('tri', tri, (N, M, k, dtype),
                                       kwargs, 3)
        ones = lengths.made_noting('ones', numpy.ones.__wrapped__, (
            (N, N if M is None else M),), {'dtype': dtype}, 3)
        return numpy.tril(ones, k)
    lower_triangle.__wrapped__ = tri
    return lower_triangle


def _sizes_as_scalars(divides):
    """The patch of ``Variable.__truediv__`` (``divides``), ``__mul__`` or
    ``__rmul__`` while recording: an argument's size on the other side
    (``loss / T``) is a ``scalars.Scalar`` read from the argument's shape
    at run time (``lengths.as_scalar``), not a number Chainer would bake
    into its node's attribute. Likewise a varying int divides as a float
    (``loss / k``: Chainer computes ``1. / k`` in C, unseen)."""
    def make(operator, recorder):
        def apply(self, other):
            mean = joining.mean_of_item(self, other) if divides and \
                _state.recorder is recorder and not recorder.depth else None
            if mean is not None:  # (F.sum(x, axis=0) / len(x), joined)
                return mean
            if type(other) in (lengths.Length, lengths.SizeOf,
                               lengths.Longest) and \
                    _state.recorder is recorder and recorder.depth == 0:
                scalar = (lengths.as_scalar if type(other) is lengths.Length
                          else lengths.width_as_scalar)(
                              other, recorder, sys._getframe(1))
                if scalar is not None:
                    other = scalar
                elif type(other) is lengths.Length:  # (a constant of it)
                    other._note('used in arithmetic with a Variable')
                else:
                    other.noted('used in arithmetic with a Variable', 2)
            elif divides and type(other) is scalars.IntScalar:
                other = other.as_float()
            return operator(self, other)
        apply.__name__ = operator.__name__
        return apply
    return make


def _noting_config_reads(config_getattr, recorder):
    """``chainer.config.<name>`` while recording: notes ``name`` for the
    recording made in this thread (``guards.config_reads``), but where
    Chainer's initializers read it, filling a parameter a link makes at
    its first call (``L.Linear(None, 16)``), which later calls do not."""
    def config_read(config, name):
        current = _state.recorder
        if current is not None and not _initializing(sys._getframe(1)):
            current.config_names.add(name)
        return config_getattr(config, name)
    return config_read


def _initializing(frame, depth=4):
    """Is the code at ``frame``, or up to ``depth`` frames above it, in
    Chainer's initializers?"""
    while frame is not None and depth:
        if frame.f_code.co_filename.startswith(_INITIALIZERS_DIR):
            return True
        frame, depth = frame.f_back, depth - 1
    return False


_INITIALIZERS_DIR = os.path.join(
    os.path.dirname(chainer.__file__), 'initializers') + os.sep
_GLOBAL_RANDOM = [name for name in dir(numpy.random)
                  if getattr(getattr(numpy.random, name), '__self__', None)
                  is numpy.random.mtrand._rand] + ['seed', 'default_rng']


# Calls that set, read or make a generator, or shuffle in place: escapes.
_GENERATOR_STATE = traced.GENERATOR_STATE | frozenset(['default_rng'])


def _recording_random(name):
    """The patch of ``numpy.random.NAME``: a draw outside Chainer's
    initializers (which fill parameters once) is recorded as an op that
    draws again on every call (``traced.record_draw``)."""
    def make(draw, recorder):
        def drawn(*args, **kwargs):
            if name in _GENERATOR_STATE:
                traced.escape('numpy.random.%s in the forward' % name)
                return draw(*args, **kwargs)
            result = traced.as_library(draw, *args, **kwargs)
            if sys._getframe(1).f_code.co_filename.startswith(
                    _INITIALIZERS_DIR) or _state.recorder is not recorder:
                return result
            return traced.record_draw('numpy.random.%s' % name, draw, args,
                                      kwargs, result)
        return drawn
    return make


# NumPy's conversions that hand back a plain ndarray (and so would lose
# the trace): of a traced array, each is recorded as an op on it.
_CONVERSIONS = ('array', 'asarray', 'ascontiguousarray', 'asfortranarray',
                'asarray_chkfinite', 'frombuffer', 'fromstring',
                'from_dlpack')


def _recording_conversion(name):
    """The patch of ``numpy.NAME``: a conversion or copy of a traced array
    by the forward's code is recorded (``traced.record_conversion``)."""
    def make(convert, recorder):
        def converted(a, *args, **kwargs):
            if type(a) in (list, tuple) and a and \
                    type(a[0]) is lengths.Length and \
                    _state.recorder is recorder:  # [len(x) for x in xs]
                sizes = lengths.sizes_array(convert, a, args, kwargs)
                if sizes is not None:
                    return sizes
            if _state.recorder is not recorder or recorder.depth or \
                    not traced.holds_traced(a):
                # (a size made an array: NumPy's arithmetic on it is no
                # Length's, numpy.asarray(T) % 4, so the size is a use)
                lengths.note_passed('numpy.' + name, (a,) + args, kwargs,
                                    depth=2)
                made = convert(a, *args, **kwargs)
                return traced.made_view(made, 2) if _of_numbers(a) or \
                    isinstance(a, traced.MadeArray) else made
            return traced.record_conversion('numpy.' + name, convert, a,
                                            args, kwargs)
        converted.__wrapped__ = convert
        return converted
    return make


# NumPy's functions whose dispatch sees their first argument alone.
_UNDISPATCHED = ('take', 'repeat', 'roll')


def _recording_undispatched(name):
    """The patch of ``numpy.NAME``: given a traced array after the first
    argument (``numpy.take(table, t)`` of the labels), recorded
    (``traced.recorded_past_dispatch``)."""
    def make(fn, recorder):
        def called(*args, **kwargs):
            if _state.recorder is not recorder or recorder.depth:
                return fn(*args, **kwargs)
            return traced.recorded_past_dispatch('numpy.' + name, fn,
                                                 args, kwargs)
        called.__wrapped__ = fn
        return called
    return make


def _of_numbers(data):
    """Is ``data`` Python's numbers, or lists and tuples of them (a table
    of class weights), which no array the forward computed gave?"""
    if type(data) in (list, tuple):
        return all(_of_numbers(x) for x in data)
    return type(data) in (int, float, bool, complex)


def _recording_offsets(cumsum, recorder):
    """``numpy.cumsum`` while recording: of the lengths of a joined list's
    items (a list of them, or their array), the offsets of the items
    joined (``lengths.offsets_array``)."""
    def offsets(a, *args, **kwargs):
        found = None
        recording = _state.recorder is recorder
        if recording and type(a) is list and \
                (not a or type(a[0]) is lengths.Length):
            found = lengths.offsets_array(cumsum, a, args, kwargs)
        elif recording and type(a) is traced.TracedArray:  # of an array
            found = lengths.offsets_of_lengths(cumsum, a, args, kwargs)
        return cumsum(a, *args, **kwargs) if found is None else found
    offsets.__wrapped__ = cumsum
    return offsets


def _recording_offsets_read(name):
    """The patch of ``TracedArray.NAME`` (``tolist``, ``__iter__``) while
    recording: of the offsets of a joined list's items
    (``lengths.offsets_array``), the running sums of their lengths
    (``lengths.running_sums``), listed or iterated, which
    ``F.split_axis`` takes back as those offsets."""
    def make(read, recorder):
        def listed(x):
            if _state.recorder is recorder and not recorder.depth:
                sums = lengths.running_sums(x)
                if sums is not None:
                    return sums if name == 'tolist' else iter(sums)
            return read(x)
        listed.__wrapped__ = read
        return listed
    return make


def _recording_split(split, recorder):
    """``F.split_axis`` while recording: a cut on the first axis at the
    offsets of a joined list's items (``lengths.offsets_array``) gives
    ``joining.Segments``, which the recurrent links take whole; one at
    the offsets of a list's items recorded item by item is counted
    (``joining.found_joins`` may join that list)."""
    def split_axis(x, indices_or_sections, axis, force_tuple=True):
        found = _row_of_each_item(x, indices_or_sections, axis, recorder)
        if found is not None and force_tuple:
            first = len(recorder.graph.nodes)
            parts = split(x, int(indices_or_sections), 0)
            recorder.droppable.extend(recorder.graph.nodes[first:])
            return joining.cut_at_items(parts, x, found)
        found = None
        if _state.recorder is recorder and not recorder.depth:
            made = lengths.offsets_of_sums(indices_or_sections)
            if made is not None:  # (itertools.accumulate of the lengths)
                indices_or_sections = made
            found = lengths.noted_offsets(indices_or_sections)
        at = _into_its_rows(x, indices_or_sections, axis, recorder)
        if at is not None and force_tuple:
            return _items_one_by_one(x, at, (None,), recorder)
        at = _into_merged_rows(x, indices_or_sections, axis, recorder)
        if at is not None and force_tuple:
            return _items_one_by_one(_merged_split(x, at, recorder), at, (),
                                     recorder)
        if found is None or found[0] is not indices_or_sections or \
                axis != 0 or not force_tuple:
            return split(x, indices_or_sections, axis, force_tuple)
        if found[1] is None:  # of a list recorded item by item
            recorder.item_splits += 1
            return split(x, indices_or_sections, axis, force_tuple)
        items_lengths = found[1]
        if int(traced.untag(items_lengths).sum()) != len(x):
            return split(x, found[2], axis)  # (not the items' rows)
        return joining.cut_at_items(split(x, found[2], axis), x,
                                    items_lengths)
    split_axis.__wrapped__ = split
    return split_axis


def _row_of_each_item(x, sections, axis, recorder):
    """Where ``F.split_axis(x, len(xs), 0)`` cuts ``x``, a row for each
    item of a joined list ``xs`` (the last words of every sentence, a
    decoder's step, into an N-step link), into its rows: the lengths of
    those parts, ones (a traced array of the items' number); else
    ``None``."""
    if _state.recorder is not recorder or recorder.depth or axis != 0 or \
            type(sections) is not lengths.Length or \
            sections.affine != (1, 0) or len(sections.origins) != 1:
        return None
    leaf, at = next(iter(sections.origins))
    items_lengths = recorder.item_lengths.get(leaf)
    if at != 0 or items_lengths is None or \
            len(lengths.data_of(x)) != int.__int__(sections):
        return None
    ones = items_lengths * 0 + 1
    recorder.length_leaves[id(ones)] = recorder.length_leaves[
        id(items_lengths)]
    return ones


def _into_its_rows(x, sections, axis, recorder):
    """``F.split_axis(x, sections, axis)`` called by the forward's code
    with ``sections`` the size it read of that axis, an argument's
    (``F.split_axis(xs, len(xs), axis=0)``: its rows one by one): the
    axis, else ``None``."""
    if _split_by_a_size(x, sections, axis, recorder) is None:
        return None
    return lengths.rows_split_axis(x, sections, axis)


def _into_merged_rows(x, sections, axis, recorder):
    """``F.split_axis(x, sections, axis)`` called by the forward's code
    where that axis of ``x`` merges a run of arguments' axes, the first
    of size ``sections`` and one other (``F.split_axis(gx, T, axis=0)``
    of the steps' projection ``(T * B, H)``: each part a step's rows, of
    the other's shape): the axis, else ``None``."""
    at = _split_by_a_size(x, sections, axis, recorder)
    run = None if at is None else lengths.merged_origins(x, at)
    if run is None or len(run) != 2 or \
            sections.origins != frozenset([run[0]]) or \
            math.prod(_run_sizes(run, recorder)) != \
            traced.untag(lengths.data_of(x)).shape[at]:
        return None
    return at


def _split_by_a_size(x, sections, axis, recorder):
    """The axis (not negative) of ``F.split_axis(x, sections, axis)``
    called by the forward's code with ``sections`` an argument's size the
    forward read (``len(xs)``), else ``None``."""
    if _state.recorder is not recorder or recorder.depth or \
            type(axis) is not int or not isinstance(
                sections, lengths.Length) or \
            sections.affine != (1, 0) or lengths.forward_line(3) is None:
        return None
    at = axis + x.ndim if axis < 0 else axis
    return at if 0 <= at < x.ndim else None


def _merged_split(x, at, recorder):
    """``x`` with its axis ``at``, which merges a run of arguments' axes,
    split into that run (the same values: ``F.split_axis`` into as many
    parts as the first's size cuts them as its rows), those axes theirs
    (``lengths.note_merged``)."""
    array = lengths.data_of(x)
    shape = traced.untag(array).shape
    run = lengths.merged_origins(x, at)
    split = chainer.functions.reshape(
        x, shape[:at] + _run_sizes(run, recorder) + shape[at + 1:])
    origins = recorder.length_leaves.get(id(array)) or (None,) * x.ndim
    recorder.length_leaves[id(lengths.data_of(split))] = \
        tuple(origins[:at]) + tuple(run) + tuple(origins[at + 1:])
    return split


def _run_sizes(run, recorder):
    """The recorded sizes of the arguments' axes ``run``."""
    return tuple(traced.untag(recorder.input_arrays[leaf]).shape[axis]
                 for leaf, axis in run)


def _items_one_by_one(x, at, kept, recorder):
    """The items of ``x`` along its axis ``at``, an argument's, taken one
    by one (``F.get_item``, the same values and gradients as Chainer's
    ``F.separate``, or with ``kept`` ``(None,)``, ``F.split_axis``'s
    rows), each indexing moved to where its item is read (``rolling``),
    so that a loop over them rolls as one over the argument does, and
    ``len()`` of them is that axis's size."""
    array = lengths.data_of(x)
    first = len(recorder.graph.nodes)
    items = tuple(chainer.functions.get_item(
        x, (slice(None),) * at + (k,) + kept)
        for k in range(traced.untag(array).shape[at]))
    recorder.separated_nodes.extend(recorder.graph.nodes[first:])
    lengths.note_separated(recorder, array, at, items)
    if not kept:  # (F.separate's)
        recorder.separated_from[id(items)] = (items, x, at)
    if items:  # (for a loop over them in its header: after them)
        last = len(recorder.graph.nodes) - 1
        recorder.first_items.append((
            last, lengths.origin_of(x, at), recorder.graph.nodes[last].loc,
            0, last + 1))
    return items


def _recording_separate(separate, recorder):
    """``F.separate`` while recording, called by the forward's code on an
    argument's axis (``lengths.origin_of``): its items taken one by one
    (``F.get_item``, the same values and gradients), each indexing moved
    to where its item is read (``rolling``), so that a loop over them
    rolls as one over the argument does (``for x in F.separate(xs)``
    as ``for x in xs``), and ``len()`` of them is that axis's size."""
    def separating(x, axis=0):
        if _state.recorder is not recorder or recorder.depth or \
                type(axis) is not int or lengths.forward_line(1) is None:
            return separate(x, axis)
        at = axis + x.ndim if axis < 0 else axis
        if 0 <= at < x.ndim and lengths.origin_of(x, at) is not None:
            return _items_one_by_one(x, at, (), recorder)
        first = len(recorder.graph.nodes)
        items = separate(x, axis)
        recorder.droppable.extend(recorder.graph.nodes[first:])
        recorder.separated_from[id(items)] = (items, x, at)
        return items
    separating.__wrapped__ = separate
    return separating


def _recording_stack(stack, recorder):
    """``F.stack`` while recording, called by the forward's code: of the
    list a loop over an argument's axis filled, its stacked axis is that
    argument's (``lengths.note_stacked``)."""
    def stacked(xs, axis=0):
        reduced = joining.reduced_segments(xs, recorder) if axis == 0 and \
            type(xs) is list and _state.recorder is recorder and \
            not recorder.depth else None
        if reduced is not None:
            return _apply_reduced_segments(*reduced, recorder)
        whole = item_sums.stacked(xs) if axis == 0 and \
            _records_items(recorder) else None
        if whole is not None:
            return whole
        result = stack(xs, axis)
        if type(xs) is list and type(axis) is int and \
                _state.recorder is recorder and not recorder.depth and \
                lengths.forward_line(1) is not None:
            lengths.note_stacked(recorder, xs, axis % result.ndim, result,
                                 sys._getframe(1))
        return result
    stacked.__wrapped__ = stack
    return stacked


def _apply_reduced_segments(segments, kind, each, reverse, recorder):
    """``F.stack(xs)`` (or ``F.concat``) of a reduction of each part of
    ``segments`` (``joining.reduced_segments``) as one node on their rows
    (``ops.array.ReduceSegments``), its rows flipped where ``xs`` took
    the parts in ``reverse`` order; the nodes reducing each part
    (``each``) go where nothing else reads them."""
    recorder.droppable.extend(each)
    # (A loop over the parts that only reduced them counts no items: on
    # their lines, or in the stack's, where a helper reduced each.)
    recorder.iterated_lines.update(node.loc for node in each if node.loc)
    recorder.iterated_lines.add(traced.user_location())
    reduced = array_ops.ReduceSegments(kind).apply(
        (segments.packed, segments.joined))[0]
    return chainer.functions.flip(reduced, 0) if reverse else reduced


def _recording_broadcast_to(broadcast_to, recorder):
    """``F.broadcast_to`` while recording, called by the forward's code
    with the shape it read of an array (``lengths.shape_source``):
    recorded as a broadcast like that array (``ops.array.BroadcastLike``),
    which follows its sizes at any lengths and batch sizes (``m`` to
    ``h.shape`` in a masked step, a mean over the batch to ``h.shape``, a
    query to the stacked steps' ``enc.shape``)."""
    def broadcasting(x, shape):
        source = _like_source(x, shape, recorder)
        if source is not None:
            return array_ops.BroadcastLike().apply((x, source))[0]
        sized = _sized_broadcast(x, shape, recorder)
        return broadcast_to(x, shape) if sized is None else sized
    broadcasting.__wrapped__ = broadcast_to
    return broadcasting


def _recording_pad_sequence(pad_sequence, recorder):
    """``F.pad_sequence`` while recording, of a joined list (``xs`` given
    as its padded block, ``joining``), called by the forward's code: the
    block it pads is that argument's, and its axes are the argument's
    (``xp.shape[1]``, the width, reads a Length; a loop over it, ``for t
    in range(xp.shape[1])``, runs for that size). Of the parts of joined
    items (an N-step link's outputs, ``joining.Segments``; the items each
    embedded, ``[self.embed(x) for x in xs]``): one node padding their
    rows at their lengths (``ops.array.PadSegments``)."""
    def padded(xs, length=None, padding=0):
        whole = None if _state.recorder is not recorder or \
            recorder.depth else xs if joining.is_segments(xs) else \
            joining.items_whole(xs) if recorder.segment_items else None
        longest = length if lengths.pads_to_longest(length, xs) else None
        if longest is not None:  # (max(len(x) for x in xs): the longest)
            length = None
        if whole is not None:  # (an N-step link's outputs; embedded items)
            _note_length_passed(length)
            block = array_ops.PadSegments(length, padding).apply(
                (whole.packed, whole.joined))[0]
            if length is None:
                lengths.note_padded_width(lengths.data_of(block), 1,
                                          whole.joined)
            if longest is not None:
                longest.pads(block, 1)
            return block
        result = pad_sequence(xs, length, padding)
        if longest is not None:
            longest.pads(result, 1)
        if length is not None or not joining.is_joined(xs) or \
                _state.recorder is not recorder or recorder.depth or \
                lengths.forward_line(1) is None:
            return result
        block, array = xs.joined, lengths.data_of(result)
        origins = recorder.length_leaves.get(id(block))
        if origins is not None and array.shape == block.shape:
            recorder.length_leaves[id(array)] = origins
            recorder.note_value_origins([array], [recorder.value_of(result)])
        return result
    padded.__wrapped__ = pad_sequence
    return padded


def _note_length_passed(length):
    """Notes ``F.pad_sequence``'s ``length`` (of a joined list's items),
    where the forward computed it of sizes, as used so: the node padding
    them holds it."""
    what = 'passed to F.pad_sequence'
    if isinstance(length, lengths.SizeOf):
        length.noted(what, 3)
    elif isinstance(length, lengths.Length):
        length._note(what, depth=3)


def _recording_dropout(dropout, recorder):
    """``F.dropout`` while recording, in test mode, of an item of a joined
    list (or of a value made of all its items): it gives the item as it
    is, as it would the rows of all; the loop over the items calling it
    applies it to all at once (``joining.applied_to_items``), no count of
    them (``[F.dropout(e) for e in exs]``)."""
    def dropped(x, ratio=.5, **kwargs):
        if _state.recorder is recorder and not recorder.depth and \
                not chainer.config.train and \
                joining.item_of(x) is not None:
            recorder.iterated_lines.add(traced.user_location())
        return dropout(x, ratio, **kwargs)
    dropped.__wrapped__ = dropout
    return dropped


def _recording_transpose_sequence(transpose_sequence, recorder):
    """``F.transpose_sequence`` while recording, called by the forward's
    code on a list: notes the list its steps transpose, for ``F.crf1d``
    of them (:func:`_recording_crf1d`); its node goes where nothing else
    reads them."""
    def transposed(xs):
        if _state.recorder is not recorder or recorder.depth or \
                not isinstance(xs, (list, tuple)) or \
                lengths.forward_line(1) is None:
            return transpose_sequence(xs)
        sequences = _sequences_transposed(xs, recorder)
        if sequences is not None:  # (a node's outputs, transposed back)
            return tuple(sequences)
        if not xs:
            return transpose_sequence(xs)
        return _steps_noted(xs, recorder)
    transposed.__wrapped__ = transpose_sequence
    return transposed


def _note_transposed(steps, sequences, recorder):
    """Notes ``steps`` (a list or tuple) as ``sequences`` transposed."""
    recorder.transposed_from[id(steps)] = (
        steps, list(steps),
        sequences if joining.is_segments(sequences) else list(sequences))


def _sequences_transposed(steps, recorder):
    """The list of sequences ``F.transpose_sequence`` transposed into
    ``steps``, as the forward passed them, where ``steps`` still holds
    those steps; else ``None``."""
    found = recorder.transposed_from.get(id(steps))
    if found is None or found[0] is not steps or \
            len(steps) != len(found[1]) or \
            any(a is not b for a, b in zip(steps, found[1])):
        return None
    return found[2]


def _recording_argmax_crf1d(argmax_crf1d, recorder):
    """``F.argmax_crf1d`` while recording, of sequences the forward sorted
    and transposed itself: one node on the sequences
    (``ops.loss.ArgmaxCRF1dOfSequences``), each's path transposed to
    steps as Chainer returns them, which ``F.transpose_sequence`` gives
    back as that node's paths; of the items of joined lists, one node on
    their rows (``ops.loss.ArgmaxCRF1dOfSegments``), the paths its rows cut
    at their lengths. Else Chainer's, step by step."""
    def best(cost, xs):
        sequences = _sequences_transposed(xs, recorder) \
            if _state.recorder is recorder and not recorder.depth else None
        if not sequences:
            return argmax_crf1d(cost, xs)
        score, paths = _best_paths(cost, sequences, recorder)
        first = len(recorder.graph.nodes)
        steps = [p.array for p in transpose_sequence_module.
                 transpose_sequence([p.array for p in paths])]
        recorder.droppable.extend(recorder.graph.nodes[first:])
        _note_transposed(steps, paths, recorder)
        return score, steps
    best.__wrapped__ = argmax_crf1d
    return best


def _best_paths(cost, sequences, recorder, kind=chainer.Variable):
    """``(score, each sequence's best path)`` of the CRF of ``cost`` over
    ``sequences``: one node on their rows where they are joined items
    (each path a Variable, or for ``kind`` ``None`` a traced array, noted
    as their items are), else on them (Variables)."""
    whole = _whole_sequences(sequences, recorder)
    if whole is None:
        found = loss_ops.ArgmaxCRF1dOfSequences(len(sequences)).apply(
            [cost] + list(sequences))
        return found[0], found[1:]
    found = loss_ops.ArgmaxCRF1dOfSegments().apply(
        (cost, whole.packed, whole.joined))
    return found[0], list(joining.parts_like(found[1].array, sequences,
                                             kind))


def _recording_crf1d(crf1d, recorder):
    """``F.crf1d`` while recording (``L.CRF1d`` calls it), of a loop's
    steps: ``xs`` the list a loop over an argument's axis filled, one
    score per step, and ``ys`` an array of the labels of all steps, or
    ``F.separate``'s rows of one. Recorded as one node on the scores
    stacked (``ops.loss.CRF1dStacked``), whose kernel runs Chainer's own
    crf1d on their rows: the loop rolls and the program serves every
    length and batch size. Of sequences the forward sorted and transposed
    itself (``F.crf1d(cost, F.transpose_sequence(hs),
    F.transpose_sequence(ys))``), one node on the sequences as they are
    (``ops.loss.CRF1dOfSequences``, as ``L.CRF1d`` with
    ``transpose=True``). Else Chainer's crf1d, step by step."""
    def crf(cost, xs, ys, reduce='mean'):
        if _state.recorder is not recorder or recorder.depth or \
                reduce not in ('mean', 'no') or \
                not isinstance(xs, (list, tuple)) or len(xs) < 2:
            return crf1d(cost, xs, ys, reduce)
        scores, labels = (_sequences_transposed(xs, recorder),
                          _sequences_transposed(ys, recorder))
        if scores and labels and len(scores) == len(labels):
            return _crf_of_sequences(cost, scores, labels, reduce, recorder)
        labels = _all_steps(ys, recorder)
        scores = _all_steps(xs, recorder)
        if scores is None and _steps_of_a_loop(xs, recorder):
            lengths.note_consumed(recorder, xs)
            scores = chainer.functions.stack(xs)
            lengths.note_stacked(recorder, xs, 0, scores, sys._getframe(1))
        if scores is None or labels is None or lengths.data_of(
                labels).shape != lengths.data_of(scores).shape[:2]:
            return crf1d(cost, xs, ys, reduce)
        return loss_ops.CRF1dStacked(reduce).apply(
            (cost, scores, labels))[0]
    crf.__wrapped__ = crf1d
    return crf


def _recording_crf1d_link(forward, recorder):
    """``L.CRF1d.forward`` while recording, called with
    ``transpose=True`` on lists of sequences (Chainer's POS tagging
    example: ``self.crf(hs, ys, transpose=True)``): one node on the
    sequences as they are (``ops.loss.CRF1dOfSequences``), whose kernel
    runs Chainer's code on them, so that a program serves any lengths of
    the items (``runtime.ragged``) instead of unrolling Chainer's loop
    over the steps; of the items of joined lists, one node on their rows
    (``ops.loss.CRF1dOfSegments``), for any number of them. Else the
    link's own forward."""
    def crf(link, xs, ys, reduce='mean', transpose=False):
        if _state.recorder is not recorder or recorder.depth or \
                not transpose or reduce not in ('mean', 'no') or \
                not isinstance(xs, list) or not isinstance(ys, list) or \
                not xs or len(xs) != len(ys):
            return forward(link, xs, ys, reduce, transpose)
        return _crf_of_sequences(link.cost, xs, ys, reduce, recorder)
    crf.__wrapped__ = forward
    return crf


def _crf_of_sequences(cost, scores, labels, reduce, recorder):
    """The CRF's loss of the sequences ``scores`` and their ``labels`` as
    one node: on their rows where they are joined items
    (``ops.loss.CRF1dOfSegments``), else on them
    (``ops.loss.CRF1dOfSequences``)."""
    whole = _whole_sequences(scores, recorder)
    tags = None if whole is None else _whole_sequences(labels, recorder)
    if tags is not None:
        return loss_ops.CRF1dOfSegments(reduce).apply(
            (cost, whole.packed, whole.joined, tags.packed))[0]
    return loss_ops.CRF1dOfSequences(reduce, len(scores)).apply(
        [cost] + list(scores) + list(labels))[0]


def _recording_crf1d_argmax(argmax, recorder):
    """``L.CRF1d.argmax`` while recording, with ``transpose=True`` on a
    list of sequences: one node
    (``ops.loss.ArgmaxCRF1dOfSequences``) running Chainer's code, as
    :func:`_recording_crf1d_link`; its paths follow the sequences'
    lengths. Of the items of a joined list, one node on their rows
    (``ops.loss.ArgmaxCRF1dOfSegments``), the paths its rows cut at their
    lengths. Else the link's own."""
    def best(link, xs, transpose=False):
        if _state.recorder is not recorder or recorder.depth or \
                not transpose or not isinstance(xs, list) or not xs:
            return argmax(link, xs, transpose)
        score, paths = _best_paths(link.cost, xs, recorder, None)
        return score, [lengths.array_of(path) for path in paths]
    best.__wrapped__ = argmax
    return best


def _steps_of_a_loop(xs, recorder):
    """Is ``xs`` the list a loop over an argument's axis filled, one step
    each, all of one shape?"""
    return type(xs) is list and \
        len(set(lengths.data_of(x).shape for x in xs)) == 1 and \
        lengths.loop_filled(recorder, xs, sys._getframe(2)) is not None


def _all_steps(items, recorder):
    """The array (or Variable) whose rows ``items`` are, all of them, in
    order: ``F.separate``'s of it, or NumPy's of an argument (``list(ts)``);
    an array of two or more axes itself; else ``None``."""
    found = recorder.separated_from.get(id(items))
    if found is not None and found[0] is items:
        return found[1] if found[2] == 0 else None
    if isinstance(items, (chainer.Variable, numpy.ndarray)):
        return items if lengths.data_of(items).ndim >= 2 else None
    if type(items) is not list or not all(
            type(x) is traced.TracedArray for x in items):
        return None
    return _argument_rows(items, recorder)


def _argument_rows(items, recorder):
    """The argument array whose rows, in order, are the arrays ``items``
    (views of it), or ``None``."""
    owner = traced.memory_owner(items[0])
    for array in recorder.input_arrays:
        if not isinstance(array, numpy.ndarray) or \
                traced.memory_owner(array) is not owner or \
                array.shape != (len(items),) + items[0].shape:
            continue
        start = array.__array_interface__['data'][0]
        if all(x.dtype == array.dtype and x.strides == array.strides[1:] and
               x.__array_interface__['data'][0] ==
               start + k * array.strides[0] for k, x in enumerate(items)):
            _droppable_makers(items, recorder)
            return array
    return None


def _droppable_makers(items, recorder):
    """Notes the nodes that gave the arrays ``items`` (indexing an
    argument's rows) as going if nothing reads them."""
    values = set(recorder.values.get(id(x)) for x in items)
    recorder.droppable.extend(node for node in recorder.graph.nodes
                              if any(v in values for v in node.outputs))


def _recording_bias_or_scale(combine):
    """``F.bias`` (``combine``: an addition) or ``F.scale`` (a product)
    while recording, as ``L.Bias`` and ``L.Scale`` call them: ``y``
    broadcast like ``x`` (``ops.array.BroadcastLike``), which follows its
    sizes at any lengths and batch sizes, where Chainer broadcasts it to
    the shape it read. The same values and gradients."""
    def make(original, recorder):
        def applied(x, y, axis=1):
            if _state.recorder is not recorder or recorder.depth:
                return original(x, y, axis)
            rank, y_shape = len(x.shape), tuple(y.shape)
            y1 = chainer.functions.reshape(y, (1,) * axis + y_shape + (
                1,) * (rank - axis - len(y_shape)))
            return combine(x, array_ops.BroadcastLike().apply((y1, x))[0])
        applied.__wrapped__ = original
        return applied
    return make


def _recording_tile(tile, recorder):
    """``F.tile`` while recording, called by the forward's code with
    repetitions made of arguments' sizes it read on axes of ``x`` of size
    one (``F.tile(F.expand_dims(h, 0), (len(xs), 1, 1))``): the same values
    and gradient as a broadcast to those sizes, recorded as one
    (``ops.array.BroadcastSized``), which follows the length and the
    batch, after a tile by the numbers on other axes (``F.tile(b, (B,
    2))``); else Chainer's tile."""
    def tiling(x, reps):
        split = _split_repetitions(x, reps)
        if split is None:
            return tile(x, reps)
        numbers, sizes = split
        y = x if all(r == 1 for r in numbers) else tile(x, numbers)
        sized = _sized_broadcast(y, _tiled_shape(y, sizes), recorder)
        return tile(x, reps) if sized is None else sized
    tiling.__wrapped__ = tile
    return tiling


def _split_repetitions(x, reps):
    """The repetitions ``reps`` of ``F.tile(x, reps)`` in two, where they
    hold sizes the forward read (``lengths.Length``) only on axes of ``x``
    of size one: ``(the numbers, a tile of their own, the sizes, a
    broadcast after it)``; else ``None``."""
    if not isinstance(reps, tuple) or not lengths.contained(reps) or any(
            not isinstance(r, int) for r in reps):
        return None
    shape = traced.untag(lengths.data_of(x)).shape
    ndim = max(len(shape), len(reps))
    shape = (1,) * (ndim - len(shape)) + tuple(shape)
    reps = (1,) * (ndim - len(reps)) + reps
    read = [isinstance(r, lengths.Length) for r in reps]
    if any(is_read and n != 1 for is_read, n in zip(read, shape)):
        return None
    return (tuple(1 if is_read else r for is_read, r in zip(read, reps)),
            tuple(r if is_read else 1 for is_read, r in zip(read, reps)))


def _sized_broadcast(x, shape, recorder):
    """``x`` broadcast to ``shape``, made of arguments' sizes the forward
    read (``None`` on axes ``x`` keeps), as one
    ``ops.array.BroadcastSized`` reading them on every call
    (:func:`_sizes_of_arguments`); ``None`` where it cannot be."""
    sized = None if shape is None else \
        _sizes_of_arguments(x, shape, recorder, depth=1)
    return None if sized is None else \
        array_ops.BroadcastSized(sized[0]).apply((x,) + sized[1])[0]


def _recording_repeat(repeat, recorder):
    """``F.repeat`` while recording, called by the forward's code with a
    size it read as the count, along an axis of ``x`` of size one
    (``F.repeat(self.h0, B, axis=0)``): a broadcast to that size, as
    ``F.tile`` of it is (:func:`_recording_tile`); else Chainer's
    repeat."""
    def repeating(x, repeats, axis=None):
        sized = _sized_broadcast(x, _repeated_shape(x, repeats, axis),
                                 recorder)
        return repeat(x, repeats, axis) if sized is None else sized
    repeating.__wrapped__ = repeat
    return repeating


def _repeated_shape(x, repeats, axis):
    """As :func:`_tiled_shape`, of ``F.repeat(x, repeats, axis)``: the
    size ``repeats`` (or ``(repeats,)``) at ``axis`` of ``x``, where ``x``
    has one item."""
    if type(repeats) in (tuple, list) and len(repeats) == 1:
        repeats = repeats[0]
    if not isinstance(repeats, lengths.Length) or type(axis) is not int:
        return None
    shape = traced.untag(lengths.data_of(x)).shape
    if not -len(shape) <= axis < len(shape) or shape[axis] != 1:
        return None
    found = [None] * len(shape)
    found[axis] = repeats
    return tuple(found)


def _recording_normal_sample(sample_n, recorder):
    """``chainer.distributions.Normal.sample_n`` while recording, on the
    CPU: Chainer's own arithmetic on a draw of the distribution's shape
    that follows its rows (``traced.record_draw_like``), so that a VAE's
    sample takes any batch size; else Chainer's."""
    def sampling(self, n):
        if _state.recorder is not recorder or recorder.depth or \
                type(n) is not int or not isinstance(
                    lengths.data_of(self.loc), numpy.ndarray):
            return sample_n(self, n)
        eps = traced.record_draw_like(
            'numpy.random.standard_normal',
            numpy.random.mtrand._rand.standard_normal, self.loc, (n,))
        return self.loc + self.scale * eps.astype(self.loc.dtype)
    sampling.__wrapped__ = sample_n
    return sampling


def _tiled_shape(x, reps):
    """The shape ``F.tile(x, reps)`` gives, where ``reps`` holds a size
    the forward read (``lengths.Length``) and repeats only axes of size
    one (a broadcast), with ``None`` on the axes it keeps as ``x`` has
    them; else ``None``."""
    if not isinstance(reps, tuple) or not lengths.contained(reps):
        return None
    shape = traced.untag(lengths.data_of(x)).shape
    ndim = max(len(shape), len(reps))
    shape = (1,) * (ndim - len(shape)) + tuple(shape)
    reps = (1,) * (ndim - len(reps)) + reps
    if any(not isinstance(r, int) or n != 1 and r != 1
           for n, r in zip(shape, reps)):
        return None
    return tuple(None if r == 1 else r for r in reps)


def _sizes_of_arguments(x, shape, recorder, depth=0):
    """For a ``shape`` the forward's code made of arguments' sizes it read
    and numbers (``(len(xs),) + h.shape``, ``(T, B, H)``) that ``x``
    broadcasts to: ``(the sizes, as ops.array.BroadcastSized takes them,
    the argument arrays they are read from)``; else ``None``. ``None`` in
    ``shape`` stands for ``x``'s own size on that axis. ``depth``: the
    frames between the patch the forward called and this function, as
    :func:`_forward_broadcast` counts them."""
    if not isinstance(shape, (tuple, list)) or any(
            n is not None and not isinstance(n, int) for n in shape) or \
            not _forward_broadcast(
            x, array_ops.sized_shape(shape, (), _aligned_shape(x, shape)),
            recorder, depth):
        return None
    sized = lengths.argument_sizes(shape, recorder)
    return None if sized is None else (sized[0], tuple(
        recorder.input_arrays[leaf] for leaf in sized[1]))


def _aligned_shape(x, shape):
    """The shape of ``x`` with as many axes as ``shape``."""
    own = traced.untag(lengths.data_of(x)).shape
    return (1,) * (len(shape) - len(own)) + tuple(own)


def _recording_numpy_broadcast_to(broadcast_to, recorder):
    """``numpy.broadcast_to`` while recording, as ``F.broadcast_to`` (see
    :func:`_recording_broadcast_to`): a mask broadcast to a step's
    ``h.shape``, ``numpy.broadcast_to(m[:, None], h.shape)``, recorded as
    a NumPy call broadcasting like ``h`` (``traced.broadcast_like``)."""
    def broadcasting(x, shape, subok=False):
        source = None if subok or not isinstance(x, numpy.ndarray) else \
            _like_source(x, shape, recorder)
        if source is not None:
            return traced.record_library_call(
                traced.BROADCAST_LIKE, traced.broadcast_like,
                (x, lengths.data_of(source)))
        sized = _sizes_of_arguments(x, shape, recorder) if not subok and (
            isinstance(x, traced.TracedArray) or type(x) is traced.MadeArray
            and recorder.holds_made(x)) else None
        if sized is not None:  # (a mask of positions to (B, T, T))
            return traced.record_library_call(
                traced.BROADCAST_SIZED, traced.broadcast_sized(sized[0]),
                (x,) + sized[1])
        return broadcast_to(x, shape, subok=subok)
    broadcasting.__wrapped__ = broadcast_to
    return broadcasting


def _like_source(x, shape, recorder):
    """The array whose shape the forward's code read as ``shape``, where
    ``x`` broadcasts to it (``lengths.shape_source``); else ``None``."""
    source = lengths.shape_source(shape)
    if source is None or tuple(shape) != source.shape or \
            not _forward_broadcast(x, shape, recorder):
        return None
    return source


def _forward_broadcast(x, shape, recorder, depth=0):
    """Is this a broadcast of ``x`` to another ``shape`` that the forward's
    own code asks ``recorder`` (the current recording) for, two frames
    up (and ``depth`` more)?"""
    return _state.recorder is recorder and not recorder.depth and \
        lengths.forward_line(3 + depth) is not None and _broadcasts(
            traced.untag(lengths.data_of(x)).shape, shape)


def _broadcasts(shape, target):
    """Does an array of ``shape`` broadcast to ``target``, another
    shape?"""
    return tuple(shape) != tuple(target) and len(shape) <= len(target) and \
        all(n in (1, m) for n, m in zip(shape[::-1], target[::-1]))


def _recording_concat(concat, recorder):
    """``F.concat`` while recording: of ``joining.Segments`` on the first
    axis, the array they were cut from (or a link made packed); of one row
    of each part of Segments (``[y[-1:] for y in ys]``), one node taking
    them (``joining.reduced_segments``); of all the
    items of a value made of a joined list's items, that value
    (``joining.concatenated``); of steps ``F.transpose_sequence`` made of
    sequences, their rows time-major (:func:`_time_major`)."""
    def concatenated(xs, axis=1):
        if axis == 0 and _state.recorder is recorder and not recorder.depth:
            if joining.is_segments(xs):
                return xs.packed
            sequences = _sequences_transposed(xs, recorder) \
                if isinstance(xs, (list, tuple)) else None
            if sequences:
                return _time_major(sequences, recorder)
            reduced = joining.reduced_segments(xs, recorder, 'concat') \
                if type(xs) is list else None
            if reduced is not None:
                return _apply_reduced_segments(*reduced, recorder)
            whole = joining.concatenated(xs) if recorder.segment_items \
                else None
            if whole is not None:
                return whole
        return concat(xs, axis)
    concatenated.__wrapped__ = concat
    return concatenated


def _time_major(sequences, recorder):
    """``F.concat(F.transpose_sequence(sequences), axis=0)``: the rows of
    the sequences joined, in time-major order, one node on the rows and
    lengths of joined items (``ops.array.TimeMajorSegments``), or on the
    items (``ops.array.TimeMajorItems``, which a joined call reads
    whole)."""
    whole = _whole_sequences(sequences, recorder)
    if whole is None:
        return array_ops.TimeMajorItems().apply(sequences)[0]
    return array_ops.TimeMajorSegments().apply(
        (whole.packed, whole.joined))[0]


# CuPy's functions that make arrays of one value, and that value (None:
# their ``fill_value`` argument).
_GPU_FILLS = {'zeros': 0, 'zeros_like': 0, 'ones': 1, 'ones_like': 1,
              'full': None, 'full_like': None}


def _noting_fills(name, fill):
    """The patch of ``cupy.NAME``, making arrays of ``fill``: notes the
    arrays it makes for the recorder (``trace._Recorder._still_filled``
    takes one still holding its fill value for a constant), and the
    argument sizes passed to it and the arrays with the rows of a batch, as
    for NumPy's makers (``lengths.made_noting``)."""
    def noting(make, recorder):
        def made(*args, **kwargs):
            array = lengths.made_noting(name, make, args, kwargs, 3, 'cupy')
            value = fill
            if value is None:
                value = kwargs.get('fill_value', args[1] if len(args) > 1
                                   else None)
            if _state.recorder is recorder and isinstance(
                    value, (int, float, bool, numpy.generic)):
                recorder.gpu_fills[id(array)] = (array, value)
            return array
        made.__wrapped__ = make
        return made
    return noting


# The cell of each stacked RNN link, by the ``rnn`` method its class uses.
_NSTEP_CELLS = {
    n_step_lstm.NStepLSTM.rnn: 'lstm', n_step_lstm.NStepBiLSTM.rnn: 'lstm',
    n_step_gru.NStepGRU.rnn: 'gru', n_step_gru.NStepBiGRU.rnn: 'gru',
    n_step_rnn.NStepRNNTanh.rnn: 'tanh', n_step_rnn.NStepBiRNNTanh.rnn: 'tanh',
    n_step_rnn.NStepRNNReLU.rnn: 'relu', n_step_rnn.NStepBiRNNReLU.rnn: 'relu',
}


class _NStep(collections.namedtuple(
        '_NStep', 'n_layers bidirectional cell dropout params')):
    """A stacked RNN's call as the ops take it: a link's, or one of the
    functions ``F.n_step_lstm`` and its kin (``params``: the weights and
    biases of each layer and direction, in Chainer's order)."""

    __slots__ = ()

    @property
    def draws(self):
        """Does the call drop out the inputs of its layers after the
        first? While training, at any ratio: ``F.dropout`` draws its mask
        at 0 too."""
        return chainer.config.train and self.n_layers > 1

    def applies(self, states, xs):
        """Does :class:`~chainerjit.ops.nstep.NStepRNN` compute this call
        on the sequences ``xs``? NumPy arrays of one float dtype and
        sequences of at least one step (the op draws the dropout Chainer
        draws while training, but not as iDeep would)."""
        if not isinstance(xs, (list, tuple)) or not xs:
            return False
        if self.draws and chainer.config.use_ideep != 'never':
            return False
        arrays = [lengths.data_of(a) for a in list(xs) + [
            s for s in states if s is not None] + self.params]
        if any(type(a) is not numpy.ndarray and
               not isinstance(a, traced.TracedArray) for a in arrays):
            return False
        if len(set(a.dtype for a in arrays)) != 1 or \
                arrays[0].dtype.kind != 'f':
            return False
        return all(a.ndim == 2 and a.shape[0] > 0 for a in arrays[:len(xs)])

    def packed(self, states, segments, permute=True):
        """The call over ``joining.Segments`` as one PackedNStepRNN node,
        of any number of sequences of any lengths: ``(hy, cy, ys)`` or
        ``(hy, ys)``, ``ys`` the Segments of the packed outputs; states
        ``None`` for zeros (all, none, or some: a flag for each)."""
        zeros = tuple(s is None for s in states)
        zero_states = zeros[0] if len(set(zeros)) == 1 else zeros
        args = (self.n_layers, self.bidirectional, self.cell, zero_states)
        if self.draws:
            node = nstep.PackedNStepRNNDropout(*args, dropout=self.dropout,
                                               permute=permute)
        else:
            node = nstep.PackedNStepRNN(*args, permute=permute)
        outputs = node.apply([s for s in states if s is not None] + [
            segments.packed, segments.joined] + self.params)
        ys = joining.cut(outputs[-1], segments.joined, joining.SegmentList)
        joining.note_outputs(ys, outputs[-1], segments)
        return tuple(outputs[:-1]) + (ys,)

    def on_items(self, states, xs, permute=True):
        """The call as one NStepRNN node: ``(hy, cy, ys)`` or ``(hy,
        ys)``."""
        args = (self.n_layers, self.bidirectional, self.cell, len(xs),
                permute)
        node = nstep.NStepRNNDropout(*args, dropout=self.dropout) \
            if self.draws else nstep.NStepRNN(*args)
        outputs = node.apply(list(states) + list(xs) + self.params)
        n_states = len(states)
        return tuple(outputs[:n_states]) + (list(outputs[n_states:]),)


def _recording_nstep(n_states):
    """The patch of ``forward`` of the stacked RNN links (``n_states``: 2
    for ``NStepLSTMBase.forward(hx, cx, xs)``, 1 for
    ``NStepRNNBase.forward(hx, xs)``): while recording, the whole call is
    one :class:`~chainerjit.ops.nstep.NStepRNN` node instead of Chainer's
    nodes per time step. Falls back to the link's own forward for what
    the op does not cover (CuPy arrays, dropout while training, a
    subclass of its own)."""
    def make(forward, recorder):
        def nstep_forward(link, *args, **kwargs):
            states, xs = args[:n_states], args[n_states:]
            cell = _nstep_cell(link, n_states)
            call = None if cell is None else _NStep(
                link.n_layers, link.use_bi_direction, cell, link.dropout,
                _nstep_params(link))
            if _state.recorder is not recorder or recorder.depth or \
                    kwargs or len(xs) != 1 or call is None or \
                    not _row_for_each(states, xs[0]):
                return forward(link, *args, **kwargs)
            states = tuple(None if _made_zeros(s, recorder) else s
                           for s in states)
            if not call.applies(states, xs[0]):
                return forward(link, *args, **kwargs)
            whole = _whole_sequences(xs[0], recorder)
            if whole is not None:
                return call.packed(states, whole)
            # The zero states of ``hx=None``, made as the link makes them.
            return call.on_items(
                [link.init_hx(xs[0]) if s is None else s for s in states],
                list(xs[0]))
        return nstep_forward
    return make


def _whole_sequences(xs, recorder):
    """``xs`` as ``joining.Segments`` where they are joined items (cut
    at their offsets, or made each of one), else ``None``."""
    return xs if joining.is_segments(xs) else \
        joining.items_whole(xs) if recorder.segment_items else None


def _row_for_each(states, xs):
    """Have ``states`` (those given, zeros or not) a row for each of the
    sequences ``xs``, on their second axis? Chainer's N-step functions
    pass more rows through to ``hy``; the ops do not."""
    return all(lengths.data_of(s).ndim == 3 and
               lengths.data_of(s).shape[1] == len(xs)
               for s in states if s is not None)


def _made_zeros(state, recorder):
    """Is ``state`` an array of zeros the forward made (``xp.zeros((1,
    len(xs), H))``, or a Variable it made of one), which a stacked RNN
    link takes as it takes ``None``? The sizes it was made of are then no
    uses of them (as where a node makes it again,
    ``trace.Recorder.value_of``)."""
    if isinstance(state, chainer.Variable) and \
            id(state) in recorder.made_variables:
        state = state.array  # (its gradient is not kept: docs/limits.md)
    if type(state) is not traced.MadeArray or state.any():
        return False
    if recorder.holds_made(state):
        recorder.value_of(state)
    return True


def _nstep_cell(link, n_states):
    """The cell of a stacked RNN link whose class is one of Chainer's own
    (not one overriding what it computes), or None."""
    cls = type(link)
    cell = _NSTEP_CELLS.get(getattr(cls, 'rnn', None))
    if cell is None or (cell == 'lstm') != (n_states == 2) or \
            cls._call is not n_step_rnn.NStepRNNBase._call:
        return None
    return cell


def _nstep_params(link):
    """The weights and biases of a stacked RNN link, as its ops take
    them."""
    return _layers_params(link.ws, link.bs)


def _layers_params(ws, bs):
    """The weights and biases ``ws[i]``, ``bs[i]`` of each layer and
    direction ``i``, in one list as the N-step ops take them."""
    params = []
    for w, b in zip(ws, bs):
        params += list(w) + list(b)
    return params


#: The functions ``F.n_step_lstm`` and its kin: their cell (``None``:
#: the ``activation`` argument's), whether bidirectional, their states.
_NSTEP_FUNCTIONS = {
    'n_step_lstm': ('lstm', False, 2), 'n_step_bilstm': ('lstm', True, 2),
    'n_step_gru': ('gru', False, 1), 'n_step_bigru': ('gru', True, 1),
    'n_step_rnn': (None, False, 1), 'n_step_birnn': (None, True, 1),
}


def _recording_nstep_function(name):
    """The patch of ``F.n_step_lstm`` (or one of its kin, ``name``)
    called by the forward's code on steps ``F.transpose_sequence`` made of
    sequences (``F.n_step_gru(1, 0., hx, ws, bs,
    F.transpose_sequence(xs))``): the whole call is one node on the
    sequences as they are, as a link's call is (:func:`_recording_nstep`),
    and its output steps, transposed back by ``F.transpose_sequence``, are
    that node's output sequences. The sequences must come sorted by
    decreasing length, as Chainer's take them. Else Chainer's own."""
    cell, bidirectional, n_states = _NSTEP_FUNCTIONS[name]

    def make(function, recorder):
        def nstep_function(*args, **kwargs):
            found = _nstep_function_call(
                args, kwargs, cell, bidirectional, n_states, recorder)
            if found is None:
                return function(*args, **kwargs)
            call, states, zeros, sequences = found
            whole = _whole_sequences(sequences, recorder)
            if whole is not None:
                outputs = call.packed(zeros, whole, permute=False)
            else:
                outputs = call.on_items(states, sequences, permute=False)
            return outputs[:-1] + (
                _steps_noted(outputs[-1], recorder),)
        nstep_function.__wrapped__ = function
        return nstep_function
    return make


def _nstep_function_call(args, kwargs, cell, bidirectional, n_states,
                         recorder):
    """``(the _NStep call, its states, they or None for zeros the forward
    made, the sequences its steps were transposed from)`` of a call of an
    N-step function with ``args`` and ``kwargs`` that one node computes;
    else ``None``."""
    if _state.recorder is not recorder or recorder.depth or \
            lengths.forward_line(2) is None:
        return None
    kwargs = dict(kwargs)
    if cell is None and len(args) == n_states + 6:
        args, kwargs['activation'] = args[:-1], args[-1]
    activation = kwargs.pop('activation', 'tanh') if cell is None else None
    if kwargs or len(args) != n_states + 5 or \
            activation not in (None, 'tanh', 'relu'):
        return None
    n_layers, ratio = args[:2]
    states, (ws, bs, xs) = args[2:2 + n_states], args[2 + n_states:]
    sequences = _sequences_transposed(xs, recorder) \
        if isinstance(xs, (list, tuple)) else None
    cell = cell or activation
    n_weights = nstep.N_WEIGHTS[cell]
    directions = 2 if bidirectional else 1
    if not sequences or any(s is None for s in states) or \
            type(n_layers) is not int or \
            len(ws) != n_layers * directions or len(bs) != len(ws) or \
            any(len(w) != n_weights or len(b) != n_weights
                for w, b in zip(ws, bs)):
        return None
    call = _NStep(n_layers, bidirectional, cell, ratio,
                  _layers_params(ws, bs))
    if not _row_for_each(states, sequences):
        return None
    zeros = tuple(None if _made_zeros(s, recorder) else s for s in states)
    if not call.applies(zeros, sequences):
        return None
    return call, states, zeros, sequences


def _steps_noted(sequences, recorder):
    """The steps of ``sequences`` (the forward's, or an N-step node's
    outputs) as ``F.transpose_sequence`` makes them, noted as transposed
    (so that it gives back ``sequences``, and a node taking the sequences
    takes them); recorded, they go where nothing else reads them (those
    read alone get zeros for the others' gradients)."""
    first = len(recorder.graph.nodes)
    steps = array_ops.StepsOfSequences(len(sequences[0])).apply(sequences)
    recorder.droppable.extend(recorder.graph.nodes[first:])
    _note_transposed(steps, sequences, recorder)
    return steps


def _gpu_patches():
    """CuPy's makers of filled arrays, and a CuPy argument's shape and
    size, where CuPy is installed."""
    if not chainer.backends.cuda.available:
        return ()
    cupy = chainer.backends.cuda.cupy
    argument = traced.gpu_argument_type()
    return tuple(RecordingPatch(cupy, name, _noting_fills(name, fill))
                 for name, fill in _GPU_FILLS.items()) + (
        RecordingPatch(argument, 'shape', _symbolic(lengths.read_shape, 3)),
        RecordingPatch(argument, 'size', _symbolic(lengths.read_size, 3)))


def _noting_numbers(label):
    """A function of the ``math`` module (or ``bin``, ``hex``, ``oct``)
    while recording: the varying numbers (``frontend.scalars``) and the
    sizes (``lengths.Length``) the forward's code passes to it are baked
    in (it reads them in C, unseen by their own methods: ``math.sqrt(T)``,
    ``bin(B)``)."""
    def make(fn, recorder):
        def noting(*args, **kwargs):
            if _state.recorder is recorder and (
                    recorder.varying or not recorder.depth and
                    lengths.contained((args, kwargs)) and
                    lengths.forward_line(1) is not None):
                recorder.note_constants((args, kwargs), 'passed to %s'
                                        % label, traced.user_location(2))
            return fn(*args, **kwargs)
        return noting
    return make


def _recording_max(builtin_max, recorder):
    """``max()`` while recording, called by the forward's code: of the
    lengths of all the items of a list (``max(len(x) for x in xs)``), a
    ``lengths.Longest``, where the jitted function's own code calls it
    and does not read what it gives in C (``1.0 / T``, unseen by a
    Length: ``trip_counts.maximum_read_in_c``); else ``max()``'s,
    comparing as the forward's code (``lengths.for_the_forward``: the
    uses of sizes are noted)."""
    @lengths.for_the_forward
    def maximum(*args, **kwargs):
        if _state.recorder is not recorder or recorder.depth or \
                len(args) != 1 or kwargs or lengths.forward_line(1) is None:
            return builtin_max(*args, **kwargs)
        values = list(args[0])
        code = sys._getframe(1).f_code
        found = None if code is not recorder.forward_code or \
            trip_counts.maximum_read_in_c(code) else \
            lengths.longest_of(values)
        return builtin_max(values) if found is None else found
    return maximum


#: The builtins that write an int in another base, reading it in C.
_BASE_WRITERS = ('bin', 'hex', 'oct')

_MATH_FUNCTIONS = tuple(name for name in dir(math)
                        if not name.startswith('_') and
                        callable(getattr(math, name)))


RECORDING_PATCHES = (
    RecordingPatch(chainer.FunctionNode, 'apply', _recording_apply),
    RecordingPatch(chainer.Link, '__setattr__', _recording_setattr),
    RecordingPatch(chainer.Link, '__getattribute__',
                   _recording_getattribute),
    RecordingPatch(chainer.reporter, 'report', _recording_report),
    RecordingPatch(chainer, 'report', _recording_report),
    RecordingPatch(chainer.Variable, 'backward', _escaping('backward()')),
    RecordingPatch(chainer.Variable, 'grad', _reading_gradients),
    RecordingPatch(chainer.Variable, '_init_impl', _noting_made_variables),
    RecordingPatch(chainer.Variable, 'grad_var', _reading_gradients),
) + tuple(RecordingPatch(owner, name, _escaping('%s()' % name))
          for owner, name in (
              (chainer.Link, 'cleargrads'), (chainer.Link, 'zerograds'),
              (chainer.Link, 'addgrads'), (chainer.Variable, 'cleargrad'),
              (chainer.Variable, 'zerograd'),
              (chainer.Optimizer, 'update'),
              (chainer.optimizer.GradientMethod, 'update'))) + (
    RecordingPatch(chainer, 'grad', _escaping('chainer.grad', cut=False)),
) + tuple(RecordingPatch(owner, name, _python_draw(name))
          for name in _PYTHON_DRAWS
          for owner in (random, random.Random) if hasattr(owner, name)) + (
    RecordingPatch(chainer.Variable, 'array', _watching_gpu_reads),
    RecordingPatch(chainer.Variable, 'data', _watching_gpu_reads),
    RecordingPatch(chainer.configuration.LocalConfig, '__getattr__',
                   _noting_config_reads),
    RecordingPatch(chainer.Variable, 'shape',
                   _symbolic(lengths.read_shape)),
    RecordingPatch(chainer.Variable, 'size', _symbolic(lengths.read_size)),
    RecordingPatch(chainer.Variable, '__truediv__', _sizes_as_scalars(True)),
    RecordingPatch(chainer.Variable, '__mul__', _sizes_as_scalars(False)),
    RecordingPatch(chainer.Variable, '__rmul__', _sizes_as_scalars(False)),
    RecordingPatch(traced.TracedArray, 'shape',
                   _symbolic(lengths.read_shape)),
    RecordingPatch(traced.TracedArray, 'size', _symbolic(lengths.read_size)),
    RecordingPatch(traced.TracedArray, 'nbytes',
                   _symbolic(lengths.read_nbytes)),
    RecordingPatch(traced.TracedArray, '__len__', _symbolic_dunder_len),
    RecordingPatch(chainer.Variable, '__len__', _symbolic_dunder_len),
    RecordingPatch(traced.MadeArray, 'shape', _symbolic(lengths.read_shape)),
    RecordingPatch(traced.TracedArray, '__getitem__',
                   _recording_item_index),
    RecordingPatch(traced.TracedArray, '__array_ufunc__',
                   _recording_array_ufunc),
    RecordingPatch(traced.TracedArray, 'tolist',
                   _recording_offsets_read('tolist')),
    RecordingPatch(traced.TracedArray, '__iter__',
                   _recording_offsets_read('__iter__')),
) + tuple(RecordingPatch(traced.TracedArray, name,
                         _recording_item_method(name))
          for name in joining.ROW_WISE_METHODS) + (
    RecordingPatch(traced.TracedArray, '__array_function__',
                   _recording_array_function),
    RecordingPatch(chainer.Variable, '__getitem__', _from_the_end),
    RecordingPatch(builtins, 'len', _symbolic_len),
    RecordingPatch(builtins, 'max', _recording_max),
    RecordingPatch(builtins, 'sorted', sorting.recording_sorted),
    RecordingPatch(numpy, 'argsort', sorting.recording_argsort),
    RecordingPatch(numpy, 'shape', _numpy_shape),
    RecordingPatch(numpy, 'size', _numpy_size),
    RecordingPatch(numpy, 'prod', _numpy_prod),
    RecordingPatch(chainer.dataset.convert, '_concat_arrays_with_padding',
                   _recording_padding),
    RecordingPatch(chainer.dataset.convert, '_concat_arrays',
                   _recording_stacking),
) + tuple(RecordingPatch(numpy, name, _noting_lengths(name))
          for name in _MAKERS) + (
    RecordingPatch(numpy, 'tri', _recording_tri),) + tuple(
    RecordingPatch(numpy.random, name, _recording_random(name))
    for name in _GLOBAL_RANDOM) + tuple(
    RecordingPatch(numpy, name, _recording_conversion(name))
    for name in _CONVERSIONS) + (
    RecordingPatch(numpy, 'cumsum', _recording_offsets),) + tuple(
    RecordingPatch(numpy, name, _recording_undispatched(name))
    for name in _UNDISPATCHED) + (
    RecordingPatch(chainer.functions, 'split_axis', _recording_split),
    RecordingPatch(chainer.functions, 'concat', _recording_concat),
    RecordingPatch(chainer.functions, 'separate', _recording_separate),
    RecordingPatch(chainer.functions, 'stack', _recording_stack),
    RecordingPatch(chainer.functions, 'broadcast_to',
                   _recording_broadcast_to),
    RecordingPatch(numpy, 'broadcast_to', _recording_numpy_broadcast_to),
    RecordingPatch(chainer.functions, 'tile', _recording_tile),
    RecordingPatch(chainer.functions, 'repeat', _recording_repeat),
    RecordingPatch(chainer.distributions.Normal, 'sample_n',
                   _recording_normal_sample),
) + tuple(RecordingPatch(owner, name, _recording_bias_or_scale(combine))
          for name, module, combine in (
              ('bias', bias_module, operator.add),
              ('scale', scale_module, operator.mul))
          for owner in (chainer.functions, module)) + (
    RecordingPatch(chainer.functions, 'transpose_sequence',
                   _recording_transpose_sequence),
    RecordingPatch(chainer.functions, 'dropout', _recording_dropout),
    RecordingPatch(chainer.functions, 'crf1d', _recording_crf1d),
    RecordingPatch(chainer.functions, 'argmax_crf1d',
                   _recording_argmax_crf1d),
    RecordingPatch(crf1d_module, 'argmax_crf1d', _recording_argmax_crf1d),
    RecordingPatch(crf1d_module, 'crf1d', _recording_crf1d),
    RecordingPatch(chainer.links.CRF1d, 'forward', _recording_crf1d_link),
    RecordingPatch(chainer.links.CRF1d, 'argmax', _recording_crf1d_argmax),
    RecordingPatch(chainer.functions, 'pad_sequence',
                   _recording_pad_sequence),
    RecordingPatch(n_step_rnn.NStepRNNBase, 'forward', _recording_nstep(1)),
    RecordingPatch(n_step_lstm.NStepLSTMBase, 'forward',
                   _recording_nstep(2)),
) + tuple(RecordingPatch(chainer.functions, name,
                         _recording_nstep_function(name))
          for name in _NSTEP_FUNCTIONS) + tuple(
    RecordingPatch(math, name, _noting_numbers('math.' + name))
    for name in _MATH_FUNCTIONS) + tuple(
    RecordingPatch(builtins, name, _noting_numbers(name))
    for name in _BASE_WRITERS) + _gpu_patches()


#: The installed libraries' and the standard library's folders.
_INSTALLED = tuple(set(sysconfig.get_paths()[k] + os.sep for k in (
    'stdlib', 'platstdlib', 'purelib', 'platlib')))


def user_namespaces(fn):
    """The module globals where the forward's code may hold a patched
    function under a name of its own (``from numpy import asarray``):
    ``fn``'s, and those of the loaded modules outside the installed
    libraries (the user's helpers)."""
    found = [fn.__globals__] if hasattr(fn, '__globals__') else []
    for module in list(sys.modules.values()):
        filename = getattr(module, '__file__', None)
        if filename and not filename.startswith(_INSTALLED) and \
                not traced.is_library_file(filename) and \
                not traced.is_cupy_file(filename) and \
                all(vars(module) is not names for names in found):
            found.append(vars(module))
    return found


@contextlib.contextmanager
def in_force(recorder, namespaces=()):
    """Makes ``recorder`` this thread's recording, with every patch of
    :data:`RECORDING_PATCHES` applied, for the block. When it ends, even
    by an exception, each owner gets back what it held itself: an
    attribute it only inherits (``Link.__getattribute__``) is deleted
    again, since an explicit one, even object's own, would make every
    attribute read of every Link go through a slower slot.

    ``namespaces``: module globals (:func:`user_namespaces`) where a name
    bound to a patched function (``from numpy import asarray``) is bound
    to its patch too, for the block."""
    held = []  # (patch, what its owner's own __dict__ held)
    aliases = []  # (globals, name, the function it held)
    try:
        made = {}  # id(original) -> (original, its patch)
        for patch in RECORDING_PATCHES:
            original = getattr(patch.owner, patch.name)
            made[id(original)] = (original, patch.make(original, recorder))
            held.append((patch, patching.replace(
                patch.owner, patch.name, made[id(original)][1])))
        for names in namespaces:
            for name, value in list(names.items()):
                found = made.get(id(value))
                if found is not None and found[0] is value:
                    aliases.append((names, name, value))
                    names[name] = found[1]
        _state.recorder = recorder
        yield
    finally:
        _state.recorder = None
        for names, name, value in aliases:
            names[name] = value
        for patch, own in reversed(held):
            patching.put_back(patch.owner, patch.name, own)
