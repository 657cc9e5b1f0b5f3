"""Recording: run a forward define-by-run and turn what it applied into IR.

While recording, ``chainer.FunctionNode.apply`` is wrapped so that every
top-level node applied becomes a :class:`chainerjit.ir.Node`, its input
arrays mapped to IR values by identity. Arguments, parameters and
persistent arrays are bound to IR values before the forward runs; an
array the recording has not seen is a constant.

To be sure no constant secretly depends on an input, every NumPy array
derived from the inputs and parameters is viewed as a :class:`TracedArray`
while recording. NumPy run on one outside Chainer functions is recorded
as a node too; reading one back into Python (``float``, ``.item()``,
``bool``, a NumPy reduction to a scalar) or making a shape depend on its
values is a *data escape*: the call is not compiled and runs eagerly (see
``errors.DataDependentValue``). Assignments to link attributes and
``chainer.report`` calls are recorded to be replayed on compiled calls.
"""

import inspect
import os
import sys
import threading

import chainer
import numpy

from chainerjit.frontend import _keys
from chainerjit.ops.scratch import Scratch
from chainerjit.frontend import control
from chainerjit import errors
from chainerjit.frontend import guards
from chainerjit import ir
from chainerjit import ops
from chainerjit.frontend import packing
from chainerjit.frontend import signature


_INTERNAL_DIRS = tuple(
    os.path.dirname(m.__file__) + os.sep for m in (chainer, numpy))
_JIT_DIR = os.path.dirname(  # the package's directory
    os.path.dirname(os.path.abspath(__file__))) + os.sep


def _is_library_file(filename):
    """Chainer's, NumPy's, chainerjit's or a frozen module's code (CuPy's
    is told apart by ``_is_cupy_file``)."""
    return filename.startswith(_INTERNAL_DIRS + (_JIT_DIR, '<frozen'))


def _is_cupy_file(filename):
    return 'cupy' + os.sep in filename


def user_location(depth=1):
    """The innermost caller's ``(filename, lineno)`` outside Chainer,
    NumPy, CuPy and chainerjit itself."""
    frame = sys._getframe(depth)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (_is_library_file(filename) or _is_cupy_file(filename)):
            return filename, frame.f_lineno
        frame = frame.f_back
    return None


# An escape: an input-derived array that is not a recorded value.
_UNFOLLOWED = ('an array derived from the inputs that the recording cannot '
               'follow (kept by a Chainer function besides its outputs, or '
               'made by NumPy code chainerjit does not record), when %s')


_state = _keys.recording  # this thread's; the hit path reads it in C
# One recording at a time: the patches of Chainer below are process-wide.
_recording_lock = threading.RLock()


def is_recording():
    """True while this thread records a forward."""
    return _state.recorder is not None


def _escape(what):
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


def _untag(obj):
    if isinstance(obj, TracedArray):
        return obj.view(numpy.ndarray)
    if _is_gpu_argument(obj):
        return obj.view(chainer.backends.cuda.ndarray)
    if type(obj) in (list, tuple):
        return type(obj)(_untag(x) for x in obj)
    return obj


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
    if not _is_arrays(result):
        test = _branch_test() if label in _TRUTH_REDUCTIONS else None
        if test is not None and isinstance(result, numpy.bool_):
            recorder.record_branch(label, fn, args, kwargs, result, test)
            return
        recorder.note_escape('%s gives a Python value' % label,
                             user_location(3))
    elif 'out' in kwargs:
        recorder.note_escape('%s with out= changes an array in place'
                             % label, user_location(3))
    elif _value_shaped(label, args):
        recorder.note_escape('%s gives a shape that depends on the values'
                             % label, user_location(3))
    else:
        recorder.record_call(label, fn, args, kwargs, result)


# What ``x.all()``, ``x.any()``, ``numpy.all(x)`` and ``numpy.any(x)`` run.
_TRUTH_REDUCTIONS = frozenset([
    'numpy.logical_and.reduce', 'numpy.logical_or.reduce', 'numpy.all',
    'numpy.any'])


def _branch_test():
    """The ``control.BranchTest`` of the user's line running now."""
    frame = sys._getframe(2)
    while frame is not None and not control.is_user_code(frame.f_code):
        frame = frame.f_back
    if frame is None:
        return None
    return control.branch_test(frame.f_code, frame.f_lineno)


def _guard_kernel(expected):
    """Checks that a branch goes the way it went while recording."""
    def guard(condition):
        if bool(condition) != expected:
            raise errors.GuardFailed(
                'a branch on an array value went the other way')
        return condition
    return guard


# NumPy calls on recorded arrays that ONNX export converts: comparisons
# and logical ops elementwise, and the reductions of ``.all()``/``.any()``.
_ONNX_ELEMENTWISE = {
    'equal': 'Equal', 'greater': 'Greater', 'less': 'Less',
    'greater_equal': 'GreaterOrEqual', 'less_equal': 'LessOrEqual',
    'logical_and': 'And', 'logical_or': 'Or', 'logical_not': 'Not',
    'not_equal': 'Equal', 'invert': 'Not'}
_ONNX_REDUCTIONS = {'logical_and': 'ReduceMin', 'logical_or': 'ReduceMax'}


def _numpy_to_onnx(fn, template):
    """The ONNX converter of a recorded NumPy call, or ``None``."""
    ufunc = getattr(fn, '__self__', None)
    if not isinstance(ufunc, numpy.ufunc):
        return None
    args, kwargs = template
    name = ufunc.__name__
    if fn.__name__ == '__call__' and name in _ONNX_ELEMENTWISE and \
            not kwargs:
        return _elementwise_to_onnx(name, args)
    if fn.__name__ == 'reduce' and name in _ONNX_REDUCTIONS and \
            args == (_Slot,) and kwargs.get('axis') is None and \
            not kwargs.get('keepdims') and kwargs.get('dtype') is None:
        return _reduction_to_onnx(_ONNX_REDUCTIONS[name])
    return None


def _elementwise_to_onnx(name, args):
    def convert(b, ins, outs):
        arrays = iter(ins)
        dtype = b.in_dtypes[0]
        operands = [next(arrays) if a is _Slot else b.constant(
            numpy.asarray(a, dtype)) for a in args]
        if name == 'not_equal':
            equal = b.op('Equal', operands)[0]
            b.op('Not', [equal], outs)
        elif name == 'invert' and dtype != bool:
            raise _export_error('numpy.invert of integers')
        else:
            b.op(_ONNX_ELEMENTWISE[name], operands, outs)
    return convert


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


def _split_arrays(obj, arrays):
    """Replaces the arrays in nested tuples, lists and dicts by slots."""
    if isinstance(obj, chainer.get_array_types()):
        arrays.append(obj)
        return _Slot
    if type(obj) in (tuple, list):
        return type(obj)(_split_arrays(x, arrays) for x in obj)
    if type(obj) is dict:
        return {k: _split_arrays(v, arrays) for k, v in obj.items()}
    return obj


def _fill(template, arrays):
    """Puts arrays (an iterator) back into :func:`_split_arrays`' slots."""
    if template is _Slot:
        return next(arrays)
    if type(template) in (tuple, list):
        return type(template)(_fill(x, arrays) for x in template)
    if type(template) is dict:
        return {k: _fill(v, arrays) for k, v in template.items()}
    return template


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
        untagged = {k: _untag(v) for k, v in kwargs.items()}
        result = call(*_untag(inputs), **untagged)
        if method == '__call__' and isinstance(result, numpy.generic):
            # An elementwise op on 0-d arrays: keep it an array, followed.
            result = numpy.asarray(result)
        result = _tag(result)
        if 'out' in kwargs:  # as NumPy does, return `out` itself
            out = kwargs['out']
            result = out[0] if len(out) == 1 else out
        name = ufunc.__name__ + ('' if method == '__call__' else
                                 '.' + method)
        _record_numpy('numpy.' + name, call, inputs, kwargs, result)
        return result

    def __array_function__(self, func, types, args, kwargs):
        untagged = {k: _untag(v) for k, v in kwargs.items()}
        result = _tag(func(*_untag(args), **untagged))
        _record_numpy('numpy.' + func.__name__, func, args, kwargs, result)
        return result

    def _replayed(name):
        base = getattr(numpy.ndarray, name)

        def replayed(self, *args, **kwargs):
            plain = self.view(numpy.ndarray)
            result = base(plain, *args, **kwargs)
            if result is plain:  # a no-op: astype(same dtype, copy=False)
                return self
            result = _tag(result)
            _record_numpy('ndarray.' + name, base, (self,) + args, kwargs,
                          result)
            return result
        replayed.__name__ = name
        return replayed

    for _name in ('astype', 'reshape', 'transpose', 'swapaxes', 'copy',
                  'ravel', 'flatten', 'squeeze', 'argmax', 'argmin',
                  'nonzero', '__getitem__', 'repeat', 'take', 'dot'):
        locals()[_name] = _replayed(_name)

    @property
    def T(self):
        return self.transpose()

    def _read(name):
        base = getattr(numpy.ndarray, name)

        def read(self, *args, **kwargs):
            _escape('%s of an array value' % name.strip('_'))
            return base(self.view(numpy.ndarray), *args, **kwargs)
        read.__name__ = name
        return read

    for _name in ('__float__', '__int__', '__index__', '__bool__',
                  '__complex__', 'item', 'tolist', 'tobytes',
                  '__setitem__'):
        locals()[_name] = _read(_name)
    del _name, _read, _replayed

    def __iter__(self):
        if self.ndim <= 1:
            _escape('iterating over an array value')
        return numpy.ndarray.__iter__(self)


class Recording(object):
    """What one recording produced (see :func:`record`)."""

    def __init__(self, graph, outputs, effects, result, escape,
                 param_arrays, generic_outputs, param_owners, recorder=None,
                 watcher=None, written_first=frozenset()):
        self.graph = graph
        self.written_first = written_first  # {(link path, name)}
        self.loops = watcher.runs if watcher else []  # control.LoopRun
        self.no_source = watcher.no_source if watcher else []
        self.templates = recorder.templates if recorder else {}
        graph.templates = self.templates
        self.values = recorder.values if recorder else {}  # id -> Value
        self.param_owners = param_owners  # param Value -> Variable or link
        self.generic_outputs = generic_outputs  # generic Node -> outputs
        self.effects = effects  # assignments and reports to replay
        self.param_arrays = param_arrays  # param Value -> array it read
        self.outputs = outputs  # (structure, leaf specs) of the result
        self.result = result  # what the eager run returned
        self.escape = escape  # None or (description, loc)
        self.row_nodes = []  # nodes indexing packed lists' rows
        self.config_names = frozenset()  # chainer.config entries read
        self.rows_read = True  # each read by an op, none returned


class _Recorder(object):

    def __init__(self, graph):
        self.graph = graph
        self.scratch = Scratch()  # the lowered kernels' temporaries
        self.depth = 0
        self.values = {}  # id(array) -> Value
        self.alive = []  # keeps recorded arrays, so ids stay unique
        self.effects = []  # ('setattr', link, name, value) and
        # ('report', observer, None, values), in order
        self.param_arrays = {}  # param Value -> its array before the run
        self.constant_values = set()  # temps computed from constants only
        self.generic_outputs = {}  # generic or impure Node -> its result
        self.param_owners = {}  # param Value -> Variable (or link) of it
        self.applied = []  # the FunctionNodes applied, for _untag_graph
        self.templates = {}  # ir.Node -> its FunctionNode before apply,
        # or ('numpy', template) for NumPy calls: what makes two nodes alike
        self.escape = None
        self.first_access = {}  # (id(link), name) -> 'read' or 'write'
        # Values a Variable that requires grad holds: a gradient may reach
        # them. A node that reads one other than through that Variable
        # (``F.tanh(y.array)``, see _gradient_stopped) reads it through a
        # StopGradient, as eager mode builds no graph there.
        self.grad_values = set()
        self.for_training = chainer.config.enable_backprop
        # id(VariableNode) -> (value, id(array)): the value each Variable
        # holds. Variables are looked up by their node first: two
        # Variables around one array (``F.identity(x.array)``,
        # ``Variable(x.array)``) hold different values.
        self.holders = {}
        self.computed = set()  # values output by recorded FunctionNodes
        self.config_names = set()  # chainer.config entries read
        self.gpu_fills = {}  # id(array) -> (CuPy array, its fill value)
        self.output_specs = {}  # id(Variable) -> (it, its result leaf spec)

    def note_escape(self, what, loc):
        if self.escape is None:
            self.escape = (what, loc)

    def note_effect(self, kind, target, name, value):
        """Notes an assignment to a link attribute or a ``chainer.report``
        made by the forward's code, to replay on compiled calls. Only the
        last assignment to an attribute is kept: the earlier ones cannot
        be seen after the call (a loop assigning ``self.h`` each step)."""
        if self.depth:
            return
        if kind == 'setattr':
            self.effects = [e for e in self.effects if not (
                e[0] == 'setattr' and e[1] is target and e[2] == name)]
        self.effects.append((kind, target, name, value))

    def bind(self, array, value):
        self.values[id(array)] = value
        self.alive.append(array)
        return value

    def bind_temps(self, arrays):
        """Binds arrays a node computed to new temporary values."""
        return [self.bind(a, self.graph.add_value('temp', a.shape, a.dtype))
                for a in arrays]

    def bind_param(self, array, name, source, owner):
        """Binds a model array; ``source`` says where to read it on each
        call: ``('path', ('l1', 'W'))`` or ``('object', parameter)``;
        ``owner`` is the Variable holding it, or the link."""
        value = self.graph.add_value('param', array.shape, array.dtype,
                                     name, data=source)
        self.param_arrays[value] = _untag(array)
        self.param_owners[value] = owner
        self.bind(array, value)
        self.note_variable(owner, value)
        return value

    def note_variable(self, x, value):
        """Notes that Variable ``x`` (if it is one) holds ``value``."""
        if not isinstance(x, chainer.Variable):
            return
        node = x.node
        self.holders[id(node)] = (value, id(signature.leaf_array(x)))
        self.alive.append(node)
        if x.requires_grad:
            self.grad_values.add(value)

    def _held(self, x):
        """The value Variable ``x`` holds, if it is the one noted."""
        held = self.holders.get(id(x.node))
        if held is not None and held[1] == id(signature.leaf_array(x)):
            return held[0]
        return None

    def _gradient_stopped(self, inputs, in_values):
        """``in_values`` with each value a gradient may reach, read here
        not by the Variable that holds it with its graph (an array, a new
        Variable around the array, an unchained or a no-grad Variable, or
        inside ``no_backprop_mode``), behind a StopGradient node."""
        if not self.for_training:
            return in_values
        building = chainer.config.enable_backprop
        found = []
        for x, value in zip(inputs, in_values):
            if value in self.grad_values and not (
                    building and isinstance(x, chainer.Variable) and
                    x.requires_grad and self._held(x) is value and not (
                        value in self.computed and x.creator_node is None)):
                value = self._stop_gradient(value)
            found.append(value)
        return found

    def _stop_gradient(self, value):
        out = self.graph.add_value('temp', value.shape, value.dtype)
        node = self.add_node(ir.Node(
            'StopGradient', ops.Kernel(_identity, onnx=ops.onnx_op(
                'Identity')), [value], [out], loc=user_location(4)))
        self.templates[node] = ('stop', 'StopGradient', ())
        return out

    def value_of(self, x):
        if isinstance(x, chainer.Variable):
            value = self._held(x)
            if value is not None:
                return value
        array = signature.leaf_array(x)
        value = self.values.get(id(array))
        if value is not None:
            return value
        if isinstance(array, TracedArray):
            self.note_escape(_UNFOLLOWED % 'used by a Chainer function',
                             user_location(3))
        elif isinstance(x, chainer.Parameter):
            return self.bind_param(array, x.name or 'param', ('object', x),
                                   x)
        elif not isinstance(array, numpy.ndarray) and \
                not self._still_filled(array):
            # CuPy arrays cannot be traced: an unknown one may have been
            # computed from the inputs, so it is not taken as a constant.
            self.note_escape('a CuPy array created outside Chainer '
                             'functions used by a Chainer function',
                             user_location(3))
        return self.bind(array, self.graph.add_value(
            'const', array.shape, array.dtype, data=array))

    def _still_filled(self, array):
        """True for a CuPy array made while recording by ``cupy.zeros``,
        ``ones`` or ``full`` (an initial state, say) that still holds its
        fill value: a constant."""
        made = self.gpu_fills.get(id(array))
        return made is not None and made[0] is array and bool(numpy.all(
            chainer.backends.cuda.to_cpu(array) == made[1]))

    def _data_attributes(self, template):
        """The attributes of a node that hold arrays computed by the
        forward: ``[((name, index), value)]``."""
        found = []
        for name, index, array in ops.array_attributes(template):
            value = self.values.get(id(array))
            if value is not None and value.kind != 'const':
                if array.dtype == bool and ops.node_label(
                        template) == 'GetItem':
                    self.note_escape('indexing with a boolean mask gives '
                                     'a shape that depends on the values',
                                     user_location(4))
                found.append(((name, index), value))
            elif isinstance(array, TracedArray):
                self.note_escape(_UNFOLLOWED % 'passed to a Chainer function',
                                 user_location(4))
        return found

    def record_call(self, label, fn, args, kwargs, result):
        """Records NumPy run outside Chainer functions."""
        kernel_fn, arrays = numpy_kernel(fn, args, kwargs)
        in_values = [self.value_of(a) for a in arrays]
        multi = type(result) in (tuple, list)
        outs = list(result) if multi else [result]
        if multi:
            kernel_fn = _as_tuple(kernel_fn)
        elif result.ndim == 0 and isinstance(result, numpy.ndarray):
            # NumPy gives a scalar for a 0-d result
            kernel_fn = _as_array(kernel_fn)
        template = _split_arrays((args, kwargs), [])
        node = self.add_node(ir.Node(
            label, ops.Kernel(kernel_fn, multi=multi,
                              onnx=_numpy_to_onnx(fn, template)),
            in_values, self.bind_temps(outs), loc=user_location(4)))
        self.templates[node] = ('numpy', fn, template)

    def record_branch(self, label, fn, args, kwargs, result, test):
        """Records ``if <array>.all():`` (or ``any``, or a ``while``
        test): the reduction as a node giving a 0-d array, then a guard
        that the branch goes the same way (a loop turns the guard of its
        ``break`` into an exit)."""
        kernel_fn, arrays = numpy_kernel(fn, args, kwargs)
        in_values = [self.value_of(a) for a in arrays]
        out = numpy.asarray(result)
        condition = self.graph.add_value('temp', (), out.dtype)
        loc = user_location(4)
        template = _split_arrays((args, kwargs), [])
        reduction = self.add_node(ir.Node(
            label, ops.Kernel(_as_array(kernel_fn),
                              onnx=_numpy_to_onnx(fn, template)),
            in_values, [condition], loc=loc))
        self.templates[reduction] = ('numpy', fn, template)
        taken = bool(result) != test.negated
        checked = self.graph.add_value('temp', (), out.dtype)
        guard = ir.Node('Guard', ops.Kernel(_guard_kernel(bool(result))),
                        [condition], [checked], (('expect', bool(result)),),
                        pure=False, loc=loc)
        self.add_node(guard)
        self.templates[guard] = ('guard', test, taken)

    def add_node(self, node):
        """Adds a node; a pure node of constants computes a constant."""
        self.graph.add_node(node)
        if node.pure and all(self.is_constant(v) for v in node.inputs):
            self.constant_values.update(node.outputs)
        return node

    def is_constant(self, value):
        """True for a value that does not depend on any input."""
        return value.kind == 'const' or value in self.constant_values

    def _trace_new_attributes(self, node, template):
        """Arrays a node's forward computed and kept as attributes besides
        its outputs (``MaxPooling2D.indexes``) depend on the inputs but are
        not recorded values: view them as traced, so that a use of one is
        noticed as an escape."""
        before = set(id(a) for _, _, a in ops.array_attributes(template))
        found = [(name, index, array)
                 for name, index, array in ops.array_attributes(node)
                 if type(array) is numpy.ndarray
                 and id(array) not in before and id(array) not in self.values]
        ops.set_array_attributes(
            ops.state_holder(node), [(n, i) for n, i, _ in found],
            [a.view(TracedArray) for _, _, a in found])

    def record_node(self, node, template, inputs, outputs):
        in_values = self._gradient_stopped(
            inputs, [self.value_of(x) for x in inputs])
        data_attrs = self._data_attributes(template)
        self._trace_new_attributes(node, template)
        out_arrays = []
        for y in outputs:
            array = y._data[0]
            if type(array) is numpy.ndarray:
                array = array.view(TracedArray)
                y._data[0] = array
            out_arrays.append(array)
        in_arrays = [signature.leaf_array(x) for x in inputs]
        ctx = ops.LowerContext(
            chainer.backend.get_array_module(*(in_arrays + out_arrays)),
            tuple(a.shape for a in in_arrays),
            tuple(a.dtype for a in in_arrays),
            tuple(a.shape for a in out_arrays),
            tuple(a.dtype for a in out_arrays), self.scratch)
        attrs = [attr for attr, _ in data_attrs]
        if data_attrs:  # the arrays are extra inputs
            # Model arrays (running averages) may be lowered; computed
            # ones (F.where's condition) run generic.
            kernel = ops.lower(node, ctx, attrs) if all(
                v.kind == 'param' for _, v in data_attrs) else None
            in_values += [value for _, value in data_attrs]
        else:
            kernel = ops.lower(node, ctx)
            if kernel is not None and kernel.grad is None:
                # No gradient rule: train through the node's own backward.
                kernel = kernel._replace(
                    grad=ops.generic_kernel(template, ctx).grad)
        generic = kernel is None
        if kernel is None:
            kernel = ops.generic_kernel(template, ctx, attrs)
        out_values = self.bind_temps(out_arrays)
        self.computed.update(out_values)
        for y, value in zip(outputs, out_values):
            self.note_variable(y, value)
        label = ops.node_label(node)
        ir_node = self.add_node(ir.Node(
            label, kernel, in_values, out_values, kernel.attrs,
            generic=bool(generic),
            pure=not generic and not ops.is_impure(label),
            loc=user_location(3)))
        self.templates[ir_node] = template
        if not ir_node.pure:  # the self-check must not run it again
            self.generic_outputs[ir_node] = tuple(
                _untag(a) for a in out_arrays)


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
    while frame is not None and _is_cupy_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame is not None and not _is_library_file(
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


def _gpu_argument_type():
    """The GpuArgument class, made on first use (it subclasses
    ``cupy.ndarray``)."""
    if _gpu_argument_class:
        return _gpu_argument_class[0]
    base = chainer.backends.cuda.ndarray

    def __getattribute__(self, name):
        if name[:1] != '_' and name not in _GPU_METADATA and \
                _used_by_the_forward():
            _escape('%s of a CuPy argument' % name)
        return base.__getattribute__(self, name)

    def __getitem__(self, index):
        if _used_by_the_forward():
            if not _is_basic_index(index):
                _escape('indexing a CuPy argument with arrays or masks')
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
                _escape('%s of a CuPy argument' % name.strip('_'))
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


_original_apply = chainer.FunctionNode.apply
_array_properties = (chainer.Variable.array, chainer.Variable.data)


def _watching_gpu_reads(prop):
    """``Variable.array`` (or ``.data``) while recording: reading a CuPy
    array in user code is an escape, since CuPy arrays cannot be traced."""
    def read(variable):
        array = prop.fget(variable)
        if array is not None and not isinstance(array, numpy.ndarray):
            frame = sys._getframe(1)
            if not frame.f_code.co_filename.startswith(
                    _INTERNAL_DIRS + (_JIT_DIR,)):
                _escape('reading a CuPy array of a Variable')
        return array
    return property(read, prop.fset, None, prop.__doc__)


_recording_array_properties = tuple(
    _watching_gpu_reads(p) for p in _array_properties)


def _recording_apply(node, inputs):
    recorder = _state.recorder  # thread-local: other threads see None
    if recorder is None or recorder.depth:
        return _original_apply(node, inputs)
    template = ops.pristine_copy(node)
    recorder.depth += 1
    try:
        outputs = _original_apply(node, inputs)
    finally:
        recorder.depth -= 1
    recorder.record_node(node, template, inputs, outputs)
    recorder.applied.append(node)
    return outputs


def _model_arrays(instance):
    """Yields ``(path, owner)`` for each array a Link's forward may read:
    initialized parameters (owner: the Parameter), and persistent arrays,
    array attributes and Variable attributes such as ``L.LSTM``'s state
    (owner: the Variable, or the Link holding the array)."""
    if not isinstance(instance, chainer.Link):
        return
    arrays = chainer.get_array_types()
    for link_path, link in instance.namedlinks():
        parts = tuple(p for p in link_path.split('/') if p)
        for name, value in sorted(vars(link).items()):
            if isinstance(value, chainer.Variable):
                if value._data[0] is not None:
                    yield parts + (name,), value
            elif isinstance(value, arrays):
                yield parts + (name,), link


_INITIALIZERS_DIR = os.path.join(
    os.path.dirname(chainer.__file__), 'initializers') + os.sep
_GLOBAL_RANDOM = [name for name in dir(numpy.random)
                  if getattr(getattr(numpy.random, name), '__self__', None)
                  is numpy.random.mtrand._rand]


def _watching_random(name, draw):
    """``numpy.random.NAME`` while recording: a draw outside Chainer's
    initializers is an escape (the recording would freeze the numbers)."""
    def watched(*args, **kwargs):
        if not sys._getframe(1).f_code.co_filename.startswith(
                _INITIALIZERS_DIR):
            _escape('numpy.random.%s draws random numbers' % name)
        return draw(*args, **kwargs)
    return watched


def _patch_global_random():
    """Watches the global NumPy random functions; returns the originals."""
    originals = {name: getattr(numpy.random, name) for name in _GLOBAL_RANDOM}
    for name, draw in originals.items():
        setattr(numpy.random, name, _watching_random(name, draw))
    return originals


# CuPy's functions that make arrays of one value, and that value (None:
# their ``fill_value`` argument).
_GPU_FILLS = {'zeros': 0, 'zeros_like': 0, 'ones': 1, 'ones_like': 1,
              'full': None, 'full_like': None}


def _patch_gpu_fills(recorder):
    """Notes the arrays CuPy's ``zeros``, ``ones`` and ``full`` make while
    recording (see ``_Recorder._still_filled``); returns the originals."""
    if not chainer.backends.cuda.available:
        return {}
    cupy = chainer.backends.cuda.cupy
    originals = dict((name, getattr(cupy, name)) for name in _GPU_FILLS)
    for name, make in originals.items():
        setattr(cupy, name, _noting_fill(make, _GPU_FILLS[name], recorder))
    return originals


def _noting_fill(make, fill, recorder):
    def made(*args, **kwargs):
        array = make(*args, **kwargs)
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


def _python_state(instance):
    """What the forward could change in place without assigning: the
    contents of lists, dicts and sets held by links, and the state of
    random generators they hold."""
    if not isinstance(instance, chainer.Link):
        return {}
    state = {}
    for _, link in instance.namedlinks():
        for name, value in vars(link).items():
            if type(value) in (list, dict, set):
                state[id(link), name] = guards.snapshot(value)
            elif isinstance(value, numpy.random.RandomState):
                state[id(link), name] = repr(value.get_state(legacy=False))
            elif isinstance(value, numpy.random.Generator):
                state[id(link), name] = repr(value.bit_generator.state)
    return state


def _note_changed_python_state(instance, before, recorder):
    """An escape for each list, dict, set or random generator of the model
    that the forward changed in place (assignments are replayed)."""
    after = _python_state(instance)
    assigned = set((id(target), name)
                   for kind, target, name, _ in recorder.effects
                   if kind == 'setattr')
    for key, old in before.items():
        if after.get(key) != old and key not in assigned:
            recorder.note_escape('changing the list, dict, set or random '
                                 'generator %r of a link in place' % key[1],
                                 None)


def _note_changed_arguments(passed, compared, originals, copies, proxies,
                            leaves, recorder):
    """An escape when the forward changed a list or dict argument in
    place (it ran on copies of the caller's containers, with the leaves
    traced): ``compared``, the arguments as the forward left them, differ
    from the call's structure ``passed``. The change is copied into the
    caller's containers, so that this call has eager's effect."""
    now = []
    try:
        changed = signature.flatten(compared, now) != passed or any(
            a is not b for a, b in zip(now, proxies))
    except errors.UnsupportedArgument:
        changed = True
    if not changed:
        return
    recorder.note_escape('changing a list or dict argument in place', None)
    _copy_back(originals, copies, proxies, leaves)


def _copy_back(original, copy, proxies, leaves):
    """Makes the caller's containers in ``original`` hold what their
    copies in ``copy`` hold now."""
    if isinstance(original, tuple) and isinstance(copy, tuple):
        for o, c in zip(original, copy):
            _copy_back(o, c, proxies, leaves)
    elif isinstance(original, list) and isinstance(copy, list):
        original[:] = [_copied_item(original, i, c, proxies, leaves)
                       for i, c in enumerate(copy)]
    elif isinstance(original, dict) and isinstance(copy, dict):
        items = [(k, _copied_item(original, k, c, proxies, leaves))
                 for k, c in copy.items()]
        original.clear()
        original.update(items)


def _copied_item(original, key, copy, proxies, leaves):
    """The caller's own container at ``key`` updated in place, or the
    copy's item with proxies turned back into the caller's objects."""
    try:
        mine = original[key]
    except (IndexError, KeyError):
        mine = None
    if type(mine) is type(copy) and isinstance(copy, (list, dict, tuple)):
        _copy_back(mine, copy, proxies, leaves)
        return mine
    return _untag_result(copy, proxies, leaves)


def _swap_model_arrays(instance, recorder):
    """Binds the model's arrays to IR params and views them as traced.
    Returns the list of restore actions."""
    restore = []
    for path, owner in _model_arrays(instance):
        if isinstance(owner, chainer.Variable):
            array = owner._data[0]
        else:
            array = getattr(owner, path[-1])
        value = recorder.bind_param(array, '.'.join(path), ('path', path),
                                    owner)
        if type(array) is numpy.ndarray:
            traced = array.view(TracedArray)
            _set_model_array(owner, path[-1], traced)
            restore.append((owner, path[-1], array, traced))
            recorder.bind(traced, value)  # and the original, once restored
            recorder.note_variable(owner, value)  # now holding the view
    return restore


def _set_model_array(owner, name, array):
    if isinstance(owner, chainer.Variable):
        owner._data[0] = array
    else:
        object.__setattr__(owner, name, array)


def _restore_model_arrays(restore):
    """Undoes :func:`_swap_model_arrays` where the forward did not assign
    a new array itself."""
    for owner, name, array, traced in restore:
        if isinstance(owner, chainer.Variable):
            if owner._data[0] is traced:
                owner._data[0] = array
        elif getattr(owner, name, None) is traced:
            object.__setattr__(owner, name, array)


def _identity(x):
    return x


def _traced_leaf(leaf, restore):
    """What the forward gets for an argument while recording: the same
    Variable with its array viewed as traced (undone by ``restore``), or
    a traced view of an array."""
    array = signature.leaf_array(leaf)
    traced = array.view(TracedArray) if type(array) is numpy.ndarray \
        else array
    if not isinstance(leaf, chainer.Variable):
        if chainer.backends.cuda.available and \
                type(array) is chainer.backends.cuda.ndarray:
            return array.view(_gpu_argument_type())
        return traced
    if traced is not array:
        leaf._data[0] = traced
        restore.append((leaf, None, array, traced))
    return leaf


def record(fn, instance, args, kwargs, leaves, name, input_names,
           packed=None):
    """Runs ``fn`` define-by-run and records it.

    Args:
        fn: the function, unbound (``instance`` is passed first if given).
        instance: the Link whose method ``fn`` is, or ``None``.
        args, kwargs: the call's arguments; ``leaves`` their flattened
            Variables and arrays (see :func:`signature.flatten`).
        name: the graph's name; ``input_names`` names the leaves.
        packed: for a call whose list arguments ``chainerjit.frontend.packing``
            stacked into ``args`` and ``kwargs``: ``(paths, the caller's
            args, the caller's kwargs)``. The forward then gets lists of
            the stacked arrays' rows.

    Returns:
        Recording: the graph, where each parameter comes from, the
        result's structure, the eager result and any data escape.
    """
    with _recording_lock:
        return _record_locked(fn, instance, args, kwargs, leaves, name,
                              input_names, packed)


def _record_locked(fn, instance, args, kwargs, leaves, name, input_names,
                   packed):
    graph = ir.Graph(name)
    recorder = _Recorder(graph)
    python_state = _python_state(instance)
    restore = _swap_model_arrays(instance, recorder)
    made = {}  # one proxy per object: `x is y` must hold as in eager mode
    for leaf in leaves:
        if id(leaf) not in made:
            made[id(leaf)] = _traced_leaf(leaf, restore)
    proxies = [made[id(leaf)] for leaf in leaves]
    for proxy, input_name in zip(proxies, input_names):
        array = signature.leaf_array(proxy)
        recorder.note_variable(proxy, recorder.bind(
            array, graph.add_value('input', array.shape, array.dtype,
                                   input_name)))
    passed = signature.flatten((args, kwargs), [])
    call_args, call_kwargs = signature.unflatten(passed, proxies)
    random_functions = _patch_global_random()
    gpu_fills = _patch_gpu_fills(recorder)
    _state.recorder = recorder
    link_setattr = chainer.Link.__setattr__
    backward, grad = chainer.Variable.backward, chainer.grad
    report = chainer.reporter.report
    chainer.FunctionNode.apply = _recording_apply
    chainer.Link.__setattr__ = _recording_setattr(link_setattr, recorder)
    chainer.Link.__getattribute__ = _recording_getattribute(recorder)
    chainer.reporter.report = chainer.report = _recording_report(
        report, recorder)
    chainer.Variable.backward = _escaping('backward()', backward)
    chainer.grad = _escaping('chainer.grad', grad)
    chainer.Variable.array, chainer.Variable.data = \
        _recording_array_properties
    _LocalConfig.__getattr__ = _recording_config_getattr
    watcher = control.LoopWatcher(
        lambda: len(graph.nodes), getattr(fn, '__code__', None),
        _loop_arguments(fn, instance, args, kwargs, proxies))
    rows = _Rows()
    try:
        if packed is not None:
            call_args, call_kwargs = rows.unpack(
                graph, call_args, call_kwargs, packed, proxies)
            watcher.arguments.update(rows.arguments)
        with watcher:
            if instance is not None:
                result = fn(instance, *call_args, **call_kwargs)
            else:
                result = fn(*call_args, **call_kwargs)
    finally:
        chainer.FunctionNode.apply = _original_apply
        chainer.Link.__setattr__ = link_setattr
        _restore_link_getattribute()
        chainer.reporter.report = chainer.report = report
        chainer.Variable.backward, chainer.grad = backward, grad
        chainer.Variable.array, chainer.Variable.data = _array_properties
        _LocalConfig.__getattr__ = _config_getattr
        for name, draw in random_functions.items():
            setattr(numpy.random, name, draw)
        for name, make in gpu_fills.items():
            setattr(chainer.backends.cuda.cupy, name, make)
        _state.recorder = None
        _restore_model_arrays(restore)
    _note_changed_python_state(instance, python_state, recorder)
    rows.copy_back_changed_rows(recorder)
    # Rows of packed lists are the caller's items, as arguments are.
    stand_ins, originals = proxies + rows.objects, leaves + rows.originals
    _note_changed_arguments(
        passed, rows.repacked(call_args, call_kwargs),
        packed[1:] if packed is not None else (args, kwargs),
        (call_args, call_kwargs), stand_ins, originals, recorder)
    _untag_graph(recorder.applied)
    _adopt_lazy_params(instance, recorder)
    outputs = _record_outputs(result, recorder, proxies)
    effects = _record_effects(instance, recorder, proxies)
    for kind, link, name, value in recorder.effects:
        untagged = _untag_result(value, stand_ins, originals)
        if kind == 'setattr' and untagged is not value and \
                getattr(link, name, None) is value:
            object.__setattr__(link, name, untagged)
    recording = Recording(
        graph, outputs, effects, _untag_result(result, stand_ins, originals),
        recorder.escape, recorder.param_arrays, recorder.generic_outputs,
        recorder.param_owners, recorder, watcher,
        _written_first(instance, recorder))
    recording.row_nodes = rows.nodes
    recording.rows_read = rows.note_unread(graph)
    recording.config_names = frozenset(recorder.config_names)
    return recording


class _Rows(object):
    """The lists of rows a packed call's forward gets instead of its list
    arguments (see ``chainerjit.frontend.packing``).

    Attributes:
        nodes: the recorded nodes that index the rows.
        objects, originals: each row, and the caller's item it stands for.
        arguments: ``{id(list): ('leaf', index of the packed leaf)}``, for
            the loop watcher's trip counts.
    """

    def __init__(self):
        self.nodes = []
        self.objects = []
        self.originals = []
        self.arguments = {}
        self._lists = []  # (path, list given, its rows, packed proxy)

    def unpack(self, graph, call_args, call_kwargs, packed, proxies):
        """The forward's arguments with each packed proxy as a list of
        its rows, indexed by recorded nodes."""
        paths, caller_args, caller_kwargs = packed
        first = len(graph.nodes)
        args, kwargs, rows = packing.unpacked_arguments(
            call_args, call_kwargs, paths)
        self.nodes = graph.nodes[first:]
        for path, items in rows:
            proxy = packing.holder(call_args, call_kwargs, path)[path[1]]
            given = packing.holder(args, kwargs, path)[path[1]]
            caller = packing.holder(caller_args, caller_kwargs,
                                    path)[path[1]]
            for row, item in zip(items, caller):
                if isinstance(row, chainer.Variable):
                    row.name = item.name
            self.objects.extend(items)
            self.originals.extend(caller)
            self._lists.append((path, given, tuple(items), proxy))
            leaf = next(i for i, p in enumerate(proxies) if p is proxy)
            self.arguments[id(given)] = ('leaf', leaf)
        return args, kwargs

    def note_unread(self, graph):
        """Tells each packing node which rows no recorded op read, so
        that, as in eager mode, they get no gradient from this call.
        Returns whether every row was read by an op and none returned."""
        users = graph.users()

        def read(node):  # by an op that passes gradients
            return any(r is not None and r.op != 'StopGradient'
                       for r in users.get(node.outputs[0], []))
        start = 0
        for _, _, items, proxy in self._lists:
            nodes = self.nodes[start:start + len(items)]
            start += len(items)
            if isinstance(proxy, chainer.Variable) and \
                    isinstance(proxy.creator, packing.PackRows):
                proxy.creator.unread = frozenset(
                    k for k, node in enumerate(nodes) if not read(node))
        return all(read(n) and None not in users.get(n.outputs[0], [])
                   for n in self.nodes)

    def copy_back_changed_rows(self, recorder):
        """Rows are views of the stacked array: a forward that changed
        one in place changed the stack, not the caller's item. Copies
        such changes into the items (as eager mode would have made them)
        and notes the escape."""
        rows = [_untag(signature.leaf_array(r)) for r in self.objects]
        for row, item in zip(rows, self.originals):
            array = signature.leaf_array(item)
            if not numpy.array_equal(row, array, equal_nan=True):
                array[...] = row
                recorder.note_escape('changing an argument in place', None)

    def repacked(self, call_args, call_kwargs):
        """The forward's arguments with each list of rows it left as it
        was back as its packed proxy (to compare with the call's)."""
        args, kwargs = list(call_args), dict(call_kwargs)
        for path, given, items, proxy in self._lists:
            arguments = packing.holder(args, kwargs, path)
            if arguments[path[1]] is given and len(given) == len(items) \
                    and all(a is b for a, b in zip(given, items)):
                arguments[path[1]] = proxy
        return tuple(args), kwargs


def _loop_arguments(fn, instance, args, kwargs, proxies):
    """What the loop watcher needs to tie a trip count to the call's
    arguments: the proxies by identity and the int arguments by name,
    with their path in the key's structure."""
    found = {id(proxy): ('leaf', i) for i, proxy in enumerate(proxies)}
    try:
        bound = inspect.signature(fn).bind(
            *((instance,) if instance is not None else ()) + tuple(args),
            **kwargs)
    except (TypeError, ValueError):
        return found
    positional = list(inspect.signature(fn).parameters)
    skip = 1 if instance is not None else 0
    for name, value in bound.arguments.items():
        if type(value) is not int:
            continue
        if name in kwargs:
            found[('static', name)] = (('kwargs', name), value)
        else:
            index = positional.index(name) - skip
            if 0 <= index < len(args):
                found[('static', name)] = (('args', index), value)
    return found


def _untag_graph(nodes):
    """Turns the traced views kept by Chainer's graph (retained inputs
    and outputs and arrays nodes keep as attributes, for the eager
    backward of the recording call) back into plain arrays, so that
    gradients and optimizer states computed from them are plain too."""
    for node in nodes:
        where, plains = [], []
        for name, index, array in ops.array_attributes(node):
            plain = _untag(array)
            if plain is not array:
                where.append((name, index))
                plains.append(plain)
        ops.set_array_attributes(ops.state_holder(node), where, plains)
        if node._retained_output_data is not None:
            node._retained_output_data = tuple(
                _untag(a) for a in node._retained_output_data)
        for variable_node in node.inputs or ():
            plain = _untag(variable_node.data)
            if plain is not variable_node.data:
                variable_node.data = plain


def _adopt_lazy_params(instance, recorder):
    """Parameters initialized during the run (``L.Linear(None, n)``) were
    seen as free Parameter objects; give them their path in the model."""
    if not isinstance(instance, chainer.Link):
        return
    paths = {id(p): tuple(x for x in n.split('/') if x)
             for n, p in instance.namedparams()}
    for value in recorder.graph.params:
        kind, obj = value.data
        if kind == 'object' and id(obj) in paths:
            path = paths[id(obj)]
            value.data = ('path', path)
            value.name = '.'.join(path)


def _leaf_spec(leaf, recorder, proxies, what):
    """How to rebuild one leaf of the result (or of the model state) on a
    compiled call: ``(kind, where, is_variable, requires_grad)`` with kind
    ``'value'`` (``where`` indexes ``graph.outputs``), ``'arg'`` (the
    argument leaf returned as is), ``'model'`` (a Variable of the model,
    such as a Parameter, returned as is; ``where`` is its source) or
    ``'const'`` (an array that does not depend on the inputs, copied)."""
    is_var = isinstance(leaf, chainer.Variable)
    grad = leaf.requires_grad if is_var else False
    for i, proxy in enumerate(proxies):
        if leaf is proxy:
            return 'arg', i, is_var, grad
    array = signature.leaf_array(leaf)
    value = recorder.values.get(id(array))
    if value is not None and value.kind == 'param' and \
            recorder.param_owners.get(value) is leaf:
        return 'model', value.data, is_var, grad
    if value is None or recorder.is_constant(value):
        if isinstance(array, TracedArray) and value is None:
            recorder.note_escape(_UNFOLLOWED % what, None)
        # A copy per call: the caller may write into what it gets.
        return 'const', _untag(array).copy(), is_var, grad
    recorder.graph.outputs.append(value)
    return 'value', len(recorder.graph.outputs) - 1, is_var, grad


def _record_outputs(result, recorder, proxies):
    """Returns ``(structure, leaf specs)`` of the result."""
    out_leaves = []
    try:
        structure = signature.flatten(result, out_leaves)
    except errors.UnsupportedArgument as e:
        recorder.note_escape('returning %s' % e, None)
        return None
    specs = []
    for i, leaf in enumerate(out_leaves):
        same = [j for j in range(i) if out_leaves[j] is leaf]
        specs.append(('same', same[0], False, False) if same else
                     _leaf_spec(leaf, recorder, proxies, 'returning'))
        if not same and isinstance(leaf, chainer.Variable):
            recorder.output_specs[id(leaf)] = (leaf, specs[-1])
    return structure, specs


def _effect_leaf_spec(leaf, recorder, proxies, what):
    """A leaf's spec for an effect: a Variable also returned, or also
    stored by an earlier effect, gets that spec (one Variable on compiled
    calls too); see :func:`_leaf_spec`."""
    found = recorder.output_specs.get(id(leaf))
    if found is not None and found[0] is leaf:
        return found[1]
    spec = _leaf_spec(leaf, recorder, proxies, what)
    if isinstance(leaf, chainer.Variable):
        recorder.output_specs[id(leaf)] = (leaf, spec)
    return spec


def _record_effects(instance, recorder, proxies):
    """What the forward did besides returning a result: link attributes it
    assigned (``self.h = h``) and values it reported (``chainer.report``),
    as ``(kind, link path, name, structure, leaf specs)`` to do again on
    every compiled call. The path is ``None`` for a report without an
    observer."""
    paths = {}
    if isinstance(instance, chainer.Link):
        paths = {id(link): tuple(p for p in path.split('/') if p)
                 for path, link in instance.namedlinks()}
    effects = []
    for kind, target, name, value in recorder.effects:
        what = 'assigning %s' % name if kind == 'setattr' else 'reporting'
        if target is not None and id(target) not in paths:
            recorder.note_escape('%s on %s outside the model' % (
                what, type(target).__name__), None)
            continue
        leaves = []
        try:
            structure = signature.flatten(value, leaves)
        except errors.UnsupportedArgument as e:
            recorder.note_escape('%s %s' % (what, e), None)
            continue
        effects.append((kind, paths.get(id(target)), name, structure, [
            _effect_leaf_spec(leaf, recorder, proxies, what)
            for leaf in leaves]))
    return effects


def _escaping(what, fn):
    """``fn`` while recording: calling it is an escape (its effects, such
    as gradients written by backprop inside the forward, are not
    recorded)."""
    def escaping(*args, **kwargs):
        _escape('calling %s in the forward' % what)
        return fn(*args, **kwargs)
    return escaping


_LocalConfig = chainer.configuration.LocalConfig
_config_getattr = _LocalConfig.__getattr__


def _recording_config_getattr(config, name):
    """``chainer.config.<name>``, noting ``name`` for the recording made
    in this thread (``guards.config_reads``)."""
    recorder = _state.recorder
    if recorder is not None:
        recorder.config_names.add(name)
    return _config_getattr(config, name)


def _recording_setattr(link_setattr, recorder):
    """``Link.__setattr__`` while recording: notes the recording thread's
    assignments (the patch is process-wide; ``_state`` is this thread's)."""
    def setattr_recorded(link, name, value):
        if _state.recorder is recorder:
            recorder.first_access.setdefault((id(link), name), 'write')
            recorder.note_effect('setattr', link, name, value)
        link_setattr(link, name, value)
    return setattr_recorded


_link_getattribute = chainer.Link.__getattribute__
# Link inherits object's: restoring means deleting the patch, since an
# explicit class attribute, even object's own, makes every attribute
# read of every Link go through a slower slot.
_LINK_DEFINES_GETATTRIBUTE = '__getattribute__' in vars(chainer.Link)


def _restore_link_getattribute():
    if _LINK_DEFINES_GETATTRIBUTE:
        chainer.Link.__getattribute__ = _link_getattribute
    else:
        del chainer.Link.__getattribute__


def _recording_getattribute(recorder):
    """``Link.__getattribute__`` while recording: notes which instance
    attributes the forward reads before it assigns them."""
    first_access = recorder.first_access

    def getattribute(link, name):
        value = _link_getattribute(link, name)
        if _state.recorder is recorder and \
                name in _link_getattribute(link, '__dict__'):
            first_access.setdefault((id(link), name), 'read')
        return value
    return getattribute


def _written_first(instance, recorder):
    """``{(link path, name)}`` of the link attributes the forward assigned
    before reading them: their value before the call does not matter."""
    if not isinstance(instance, chainer.Link):
        return frozenset()
    paths = dict((id(link), path or '/') for path, link in
                 instance.namedlinks())
    return frozenset((paths[link_id], name) for (link_id, name), access
                     in recorder.first_access.items()
                     if access == 'write' and link_id in paths)


def _recording_report(report, recorder):
    """``chainer.report`` while recording: notes the recording thread's
    reports, to replay."""
    def report_recorded(values, observer=None):
        if _state.recorder is recorder:
            recorder.note_effect('report', observer, None, values)
        report(values, observer)
    return report_recorded


def _untag_result(result, proxies, leaves):
    """The eager result with traced views turned back into plain arrays
    and argument proxies back into the caller's objects."""
    out_leaves = []
    try:
        structure = signature.flatten(result, out_leaves)
    except errors.UnsupportedArgument:
        return result
    return signature.unflatten(structure, [
        _untag_leaf(leaf, proxies, leaves) for leaf in out_leaves])


def _untag_leaf(leaf, proxies, leaves):
    for proxy, original in zip(proxies, leaves):
        if leaf is proxy:
            return original
    if isinstance(leaf, chainer.Variable):
        leaf._data[0] = _untag(leaf._data[0])
        return leaf
    return _untag(leaf)
