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

This module holds the recorder and what it makes of the forward's result
and effects. Traced arrays and the NumPy recorded on them are
:mod:`.traced`'s; the patches in force while recording,
:mod:`.recording_patches`'; the model's arrays and state around the run,
:mod:`.model_state`'s; the arguments' proxies, :mod:`.arguments`'.
"""

import collections
import functools
import sys
import threading

import chainer
from chainer.functions.array import get_item
from chainer.functions.array import moveaxis
from chainer.functions.array import rollaxis
from chainer.functions.array import swapaxes
from chainer.functions.array import transpose
import numpy

from chainerjit import errors
from chainerjit import ir
from chainerjit import ops
from chainerjit.frontend import _keys
from chainerjit.frontend import arguments
from chainerjit.frontend import control
from chainerjit.frontend import joining
from chainerjit.frontend import lengths
from chainerjit.frontend import model_state
from chainerjit.frontend import recording_patches
from chainerjit.frontend import scalars
from chainerjit.frontend import signature
from chainerjit.frontend import sorting
from chainerjit.frontend import traced
from chainerjit.frontend import trip_counts
from chainerjit.ops import array as ops_array
from chainerjit.ops import math as ops_math
from chainerjit.ops import structural
from chainerjit.ops.scratch import Scratch

# Where other modules find them.
TracedArray = traced.TracedArray
numpy_kernel = traced.numpy_kernel
user_location = traced.user_location

# An escape: an input-derived array that is not a recorded value.
_UNFOLLOWED = ('an array derived from the inputs that the recording cannot '
               'follow (kept by a Chainer function besides its outputs, or '
               'made by NumPy code chainerjit does not record), when %s')


# The nodes that reorder their input's axes (``lengths.note_permuted``).
_PERMUTATIONS = (transpose.Transpose, swapaxes.Swapaxes, rollaxis.Rollaxis,
                 moveaxis.Moveaxis)

_state = _keys.recording  # this thread's; the hit path reads it in C
# One recording at a time: the patches of Chainer are process-wide.
_recording_lock = threading.RLock()


def is_recording():
    """True while this thread records a forward."""
    return _state.recorder is not None


class Recording(object):
    """What one recording produced (see :func:`record`)."""

    def __init__(self, graph, outputs, effects, result, escape,
                 param_arrays, generic_outputs, param_owners, recorder=None,
                 watcher=None, written_first=frozenset()):
        self.graph = graph
        self.written_first = written_first  # {(link path, name)}
        self.unread_numbers = frozenset()  # the same, unread numbers
        self.outside_numbers = []  # guards.PythonGuard
        # id(link) -> the unread numbers of a link named outside the model
        self.free_unread = {}
        self.loops = watcher.runs if watcher else []  # control.LoopRun
        self.no_source = watcher.no_source if watcher else []
        # the lines of the jitted function that ran, if it was watched
        self.lines_run = watcher.lines_run if watcher else None
        self.templates = recorder.templates if recorder else {}
        self.value_origins = recorder.value_origins if recorder else {}
        graph.templates = self.templates
        # lengths.Use: what the forward did with its arguments' sizes
        self.length_uses = recorder.length_uses if recorder else []
        # scalars.Use: what baked in the varying number arguments
        self.scalar_uses = recorder.scalar_uses if recorder else []
        self.length_reads = recorder.length_reads if recorder else set()
        self.length_totals = recorder.length_totals if recorder else set()
        self.item_length_reads = recorder.item_length_reads if recorder \
            else []
        self.width_uses = recorder.width_uses if recorder else []
        # the values of parts of a split of joined segments (joining)
        self.segment_parts = recorder.segment_parts if recorder else []
        self.item_splits = recorder.item_splits if recorder else 0
        # values of single items, or their partial sums (item_sums)
        self.item_sum_values = recorder.item_sum_values if recorder else []
        self.iterated_lines = recorder.iterated_lines if recorder else set()
        # sorting.Sort: the lists sorted by their items' lengths; the lines
        # ordering a joined list's sorted items otherwise
        self.sorts = recorder.sorts if recorder else []
        self.orders_read = recorder.orders_read if recorder else []
        self.orders_unseen = recorder.orders_unseen if recorder else False
        # the IR values whose shape the forward's Python read
        self.shapes_read = set(
            recorder.values[i] for i in recorder.shapes_read
            if i in recorder.values) if recorder else set()
        self.size_operations = recorder.size_operations if recorder \
            else set()
        self.size_read_lines = recorder.size_read_lines if recorder \
            else None
        self.made_rows = recorder.made_rows if recorder else []
        self.values = recorder.values if recorder else {}  # id -> Value
        self.param_owners = param_owners  # param Value -> Variable or link
        self.generic_outputs = generic_outputs  # generic Node -> outputs
        self.effects = effects  # assignments and reports to replay
        self.param_arrays = param_arrays  # param Value -> array it read
        self.outputs = outputs  # (structure, leaf specs) of the result
        self.result = result  # what the eager run returned
        self.escape = escape  # None or (description, loc)
        # the line of the jitted function an escape cuts it at (breaks)
        self.escape_line = recorder.escape_line if recorder else None
        self.cut = None  # that cut, once made (runtime.compile)
        self.row_nodes = []  # nodes indexing packed lists' rows
        self.separated_nodes = []  # nodes indexing F.separate's items
        self.droppable = []  # nodes that go if nothing reads them
        self.draws_unseen = False  # (trace._Recorder.draws_unseen)
        self.config_names = frozenset()  # chainer.config entries read
        self.rows_read = True  # each read by an op, none returned


class _Recorder(object):
    """Makes the nodes a forward applies (and the NumPy it runs on traced
    arrays, ``traced.record_call``) nodes of ``graph``, their arrays
    bound to IR values by identity."""

    def __init__(self, graph):
        self.graph = graph
        self.config_at_start = _config_in_force()
        self.scratch = Scratch()  # the lowered kernels' temporaries
        self.depth = 0
        self.values = {}  # id(array) -> Value
        self.alive = []  # keeps recorded arrays, so ids stay unique
        # The memory of the arrays bound to inputs, parameters and results
        # (``traced.memory_owner``): a plain view of it is no constant.
        self.derived_memory = set()
        self.constant_memory = set()
        # id(memory owner): the first constant array returned of it
        self.returned_memory = {}
        self.effect_lines = {}  # (id(link), name) -> line assigning it
        self.effects = []  # ('setattr', link, name, value) and
        # ('report', observer, None, values), in order
        self.param_arrays = {}  # param Value -> its array before the run
        self.constant_values = set()  # temps computed from constants only
        self.generic_outputs = {}  # generic or impure Node -> its result
        self.param_owners = {}  # param Value -> Variable (or link) of it
        self.applied = []  # the FunctionNodes applied, for untag_graph
        self.templates = {}  # ir.Node -> its FunctionNode before apply,
        # or ('numpy', template) for NumPy calls: what makes two nodes alike
        self.escape = None
        # Where the forward is defined: the line an escape found after it
        # returned (what it returns, what it changed) is reported at.
        self.forward_loc = None
        self.forward_code = None  # the jitted function's
        self.returned_steps = {}  # see _stacked_steps
        # NumPy scalars the forward computes are followed as 0-d arrays
        # where traced.follows_scalars says its code allows it.
        self.follows_scalars = False
        self.first_access = {}  # (id(link), name) -> 'read' or 'write'
        self.links_read = {}  # id(link) -> the links read from
        # Values a Variable that requires grad holds: a gradient may reach
        # them. A node that reads one other than through that Variable
        # (``F.tanh(y.array)``, see _gradient_stopped) reads it through a
        # StopGradient, as eager mode builds no graph there.
        self.grad_values = set()
        self.for_training = chainer.config.enable_backprop
        graph.for_training = self.for_training
        # id(VariableNode) -> (value, id(array)): the value each Variable
        # holds. Variables are looked up by their node first: two
        # Variables around one array (``F.identity(x.array)``,
        # ``Variable(x.array)``) hold different values.
        self.holders = {}
        self.computed = set()  # values output by recorded FunctionNodes
        self.config_names = set()  # chainer.config entries read
        self.gpu_fills = {}  # id(array) -> (CuPy array, its fill value)
        self.output_specs = {}  # id(Variable) -> (it, its result leaf spec)
        # The arguments' arrays by identity -> leaf index, and the uses of
        # their sizes by the forward (see ``lengths``).
        self.length_leaves = {}
        # {leaf: traced array}: the lengths of a joined list's items
        # (lengths.note_item_lengths), and how many of them the forward
        # read other than into an array of them all, as ((leaf, -1 - k),
        # the line that read it); the offsets of their items by id
        # (lengths.offsets_array: the array, the items' lengths, its
        # values), and the values of the parts split at them. Items whose
        # rows are more than the list's items' by id(array): that many
        # more, and the traced lengths of those by (leaf, that many)
        self.item_lengths = {}
        self.length_shifts = {}
        # id(array): {axis: (origin, rows added)} of an argument's axis
        # other than the first cut by ints (x[:, :-1]), read by its shape
        self.cut_axes = {}
        self.merged_axes = {}  # lengths.note_merged
        self.joined_rows = {}  # lengths.note_joined_rows
        self.padded_widths = {}  # lengths.note_padded_width
        self.width_uses = []  # (what, loc): lengths.SizeOf
        self.words_of = {}  # {leaf of lengths: leaf of their words}
        self.shifted_lengths = {}
        self.item_length_reads = []
        self.spent_reads = []  # those read into an array or offsets
        self.length_arrays = {}  # id(array) -> (it, origins, shift)
        self.offsets = {}
        self.segment_parts = []
        # id(a part's value) -> (it, its joining.Segments, its index)
        self.part_of = {}
        self.item_splits = 0  # cuts at the offsets of unjoined items
        # id(array) -> (packed, k, lengths, item): items of joined lists,
        # and by function and input the items of it applied to all of them
        # at once, with the lines of those loops over the items
        # (joining.applied_to_items)
        self.segment_items = {}
        self.applied_rows = {}
        # {leaf of a joined list's items' lengths: the width of its rows}
        self.item_widths = {}
        # id(array) -> item_sums.Summed: the values of items and their
        # partial sums the forward got, and their IR values
        self.item_sums = {}
        self.item_sum_values = []
        # the leaves of the lengths of the joined lists whose items' random
        # functions may draw for the rows of all at once (joining.Join),
        # or whose items' draws were not seen; whether one drew
        self.drawing_lists = set()
        self.unseen_draws = set()
        self.draws_unseen = False
        self.iterated_lines = set()
        # (sorting) the lists sorted by their items' lengths; id(array) ->
        # sorting.Position of the items of lists a joined call sorted; the
        # lines ordering those otherwise; whether numpy.argsort found them
        # sorted already (sorting._ordered)
        self.sorts = []
        self.sorted_items = {}
        # id(array) -> (Variable, its creator) of items noted as Variables
        # (joining.is_cut_off)
        self.item_variables = {}
        self.orders_read = []
        self.orders_unseen = False
        self.length_uses = []
        self.length_reads = set()  # (leaf, axis) whose size it read
        # frozensets of the (leaf, 0) of items recorded one by one whose
        # lengths the forward added up (lengths._totaled)
        self.length_totals = set()
        # id(array) of the computed arrays whose shape the forward read
        self.shapes_read = set()
        self.made_rows = []  # lengths.MadeRows: arrays made with a batch
        # id(memory owner) -> lengths.MadeSized: arrays the forward made
        # with arguments' sizes; those a constant holds part of
        self.made_sized = {}
        self.made_pinned = set()
        # the nodes indexing the items F.separate gave of an argument's
        # axis, and those tuples of items (lengths.note_separated)
        self.separated_nodes = []
        self.separated = []
        # id(items) -> (items, what F.separate cut, the axis it cut)
        self.separated_from = {}
        # id(steps) -> (steps, the list F.transpose_sequence transposed)
        self.transposed_from = {}
        # nodes that go if nothing reads them (packing.drop_unread)
        self.droppable = []
        self.loop_runs = []  # control.LoopRun of the loops ended so far
        # ([None] * T, the use of T noted): lengths.forgive_filled
        self.sized_lists = []
        # (position, origin, loc, shift, start): the nodes taking item 0
        # of a value's first axis (or the last of F.separate's items), that
        # axis's origin (lengths.origin_of), the line, the rows it has more
        # than the origin (lengths.shift_of), and where a loop over them
        # starts, for a loop over a value computed in its header
        # (control.LoopWatcher)
        self.first_items = []
        # id(array) -> (array, the (leaf, axis) of the argument sizes it
        # was made with): the arrays the forward made with NumPy's makers
        self.made_arrays = {}
        # ids of the Variables made while recording (the others held
        # before it: read from the object on every call, as Parameters)
        self.made_variables = set()
        self.input_arrays = []  # the arguments' arrays, by leaf
        # {Value: (origins, shift)} of the computed values whose axes are
        # arguments' (lengths.origin_of, shift_of): a loop indexing one
        # with its counter runs for that axis (symbolic._indexed_sources)
        self.value_origins = {}
        # id(shape) -> (shape, array) of the forward's shape reads
        self.shape_sources = {}
        # Number arguments that vary by call (scalars.Scalar, IntScalar)
        # are about, and the uses that bake them into the recording
        # (scalars.Use).
        self.varying = False
        self.scalar_uses = []
        # (filename, line, column) of the forward's operations of a
        # Variable with a size (lengths.as_scalar).
        self.size_operations = set()
        # (filename, line) where the forward's code read a shape or len().
        self.size_read_lines = set()
        # The jitted function's code, and how often an indexing with a
        # varying int at each of its instruction offsets was recorded.
        self.top_code = None
        self.indexes_seen = collections.Counter()
        # The line the jitted function's own frame (the outermost, if it
        # recurses) was at when the escape was found: where a graph break
        # cuts it (``breaks``); None after it returned.
        self.escape_line = None
        # id(0-d array) -> number type, for the varying numbers reported
        # (recording_patches._reported_numbers)
        self.numbers = {}

    def note_escape(self, what, loc):
        if self.escape is None:
            self.escape = (what, loc)
            self.escape_line = _outermost_line(self.top_code)

    def note_constants(self, obj, what, loc=None):
        """Notes the varying numbers (``scalars.Scalar``, ``IntScalar``) and
        the argument sizes (``lengths.Length``) in ``obj`` as baked in: a
        recorded node holds them as constants."""
        if self.varying:
            scalars.note_baked_in(obj, what, loc)
        sorting.note_orders_read(obj)
        if loc is not None:
            self.length_uses += lengths.uses_in(obj, what, loc)

    def sizes_at_run_time(self, args, loc, frame=None):
        """``args`` of a NumPy function the forward calls (at ``frame``),
        each argument size among them (``lengths.Length``, ``loss.array *
        len(xs)``) computed at run time where it can be
        (``lengths.as_run_time_int``), the operation's place noted as
        ``lengths.as_scalar`` notes it."""
        found = tuple(
            lengths.as_run_time_int(a, self, loc) or a
            if isinstance(a, lengths.Length) else a for a in args)
        if frame is not None and any(a is not b
                                     for a, b in zip(found, args)):
            self.size_operations.add(lengths.operation_position(frame))
        return found

    def index_from_the_end(self, x, index, frame):
        """``lengths.index_from_the_end`` of ``x[index]``, where the index
        holds sizes: the forward's indexing (at ``frame``) noted as one the
        recording saw (not a list's, in C: ``trip_counts.index_size_uses``).
        """
        if not lengths.contained(index):
            return index
        self.size_operations.add(lengths.operation_position(frame))
        return lengths.index_from_the_end(x, index)

    def note_effect(self, kind, target, name, value, loc=None):
        """Notes an assignment to a link attribute or a ``chainer.report``
        made by the forward's code (at ``loc``), to replay on compiled
        calls. Only the last assignment to an attribute is kept: the
        earlier ones cannot be seen after the call (a loop assigning
        ``self.h`` each step)."""
        if self.depth:
            return
        sorting.note_orders_read(value)  # (replayed as recorded)
        if kind == 'setattr':
            self.effects = [e for e in self.effects if not (
                e[0] == 'setattr' and e[1] is target and e[2] == name)]
            self.effect_lines[id(target), name] = loc
        self.effects.append((kind, target, name, value))

    def bind(self, array, value):
        self.values[id(array)] = value
        self.alive.append(array)
        if isinstance(array, numpy.ndarray):
            owner = id(traced.memory_owner(array))
            if value.kind == 'const':
                self.constant_memory.add(owner)
            else:
                self.derived_memory.add(owner)
        return value

    def draw_of_sizes(self, draw, args, kwargs, result):
        """A random draw of an argument's size: see
        ``lengths.draw_of_sizes``."""
        return lengths.draw_of_sizes(self, draw, args, kwargs, result)

    def note_reshaped(self, array, shape, node, what, loc):
        """NumPy's reshape of ``array`` to ``shape`` (``node``): see
        ``lengths.note_reshaped``."""
        lengths.note_reshaped(self, array, shape, node, what, loc)

    def note_write(self, written, loc):
        """Notes the varying numbers and argument sizes in ``written``
        (an index and the value written into an array the forward made)
        as baked into the recording."""
        self.note_constants(
            written, 'an index of a write into an array made by NumPy', loc)

    def is_constant_memory(self, array):
        """Is ``array``'s memory that of a constant of the program?"""
        return id(traced.memory_owner(array)) in self.constant_memory

    def note_indexed(self, array, index, result):
        """``result = array[index]``: see ``lengths.note_indexed``."""
        lengths.note_indexed(self, array, index, result)

    def note_computed(self, name, in_arrays, out_arrays, kernel):
        """The axes of arguments' that ``out_arrays``, computed by the
        kernel ``kernel`` (a NumPy call's), keep from ``in_arrays``: see
        ``lengths.note_computed``."""
        lengths.note_computed(self, name, in_arrays, out_arrays,
                              kernel=kernel)

    def note_permuted(self, array, axes, result):
        """``result``, ``array``'s axes in the order ``axes``: see
        ``lengths.note_permuted``."""
        lengths.note_permuted(self, array, axes, result)

    def note_value_origins(self, arrays, values):
        """Notes the argument axes of computed ``values`` (their
        ``arrays``'), in :attr:`value_origins`."""
        for array, value in zip(arrays, values):
            origins = self.length_leaves.get(id(array))
            if origins is not None:
                self.value_origins[value] = (
                    origins, self.length_shifts.get(id(array), 0))

    def bind_temps(self, arrays):
        """Binds arrays a node computed to new temporary values."""
        return [self.bind(a, self.graph.add_value('temp', a.shape, a.dtype))
                for a in arrays]

    def bind_inputs(self, proxies, names):
        """Binds the arrays of the arguments' proxies to input values."""
        for leaf, (proxy, name) in enumerate(zip(proxies, names)):
            array = signature.leaf_array(proxy)
            self.input_arrays.append(array)
            self.length_leaves.setdefault(
                id(array), lengths.argument_axes(leaf, array.ndim))
            self.note_variable(proxy, self.bind(
                array, self.graph.add_value('input', array.shape,
                                            array.dtype, name)))

    def bind_param(self, array, name, source, owner):
        """Binds a model array; ``source`` says where to read it on each
        call: ``('path', ('l1', 'W'))`` or ``('object', parameter)``;
        ``owner`` is the Variable holding it, or the link."""
        value = self.graph.add_value('param', array.shape, array.dtype,
                                     name, data=source)
        self.param_arrays[value] = traced.untag(array)
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

    def is_new_leaf(self, x, value):
        """Is Variable ``x``, whose array is ``value``'s, a leaf of eager's
        graph that the recording did not make one: a new Variable around
        an array, or an unchained one. Gradients stop at it."""
        return self._held(x) is not value or (
            value in self.computed and x.creator_node is None)

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
                    x.requires_grad and not self.is_new_leaf(x, value)):
                value = self._stop_gradient(value)
            found.append(value)
        return found

    def _stop_gradient(self, value):
        out = self.graph.add_value('temp', value.shape, value.dtype)
        node = self.add_node(ir.Node(
            'StopGradient', structural.stop_gradient(), [value], [out],
            loc=user_location(4)))
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
        if isinstance(array, TracedArray) or (
                isinstance(array, numpy.ndarray) and
                id(traced.memory_owner(array)) in self.derived_memory):
            self.note_escape(_UNFOLLOWED % 'used by a Chainer function',
                             user_location(3))
        elif isinstance(x, chainer.Parameter) or isinstance(
                x, chainer.Variable) and \
                id(x) not in self.made_variables:  # (a global Variable)
            return self.bind_param(array, x.name or 'param', ('object', x),
                                   x)
        elif self._made_value(array) is not None:
            return self.values[id(array)]
        elif not isinstance(array, numpy.ndarray) and \
                not self._still_filled(array):
            # CuPy arrays cannot be traced: an unknown one may have been
            # computed from the inputs, so it is not taken as a constant.
            self.note_escape('a CuPy array created outside Chainer '
                             'functions used by a Chainer function',
                             user_location(3))
        value = self.graph.add_value('const', array.shape, array.dtype,
                                     data=self._constant(array))
        made = self.made_arrays.get(id(array))
        if made is not None and made[0] is array:
            value.made_with = made[1]
        # An array the program reads as it is on each call (the VM), held
        # by something outside the recording (a link in a list, a global)
        # that may change it in place.
        value.held = value.data is array and made is None
        return self.bind(array, value)

    def holds_made(self, array):
        """Is ``array`` an array the forward made with arguments' sizes
        (or a view of one) that a node makes again, holding its values
        still (:meth:`_as_made`)?"""
        return self._as_made(array) is not None

    def _made_value(self, array):
        """The value of ``array`` where the forward made it with arguments'
        sizes, or it is a view of such an array, still holding its fill
        (:meth:`_made_again`); else ``None``."""
        made = self._as_made(array)
        return None if made is None else self._made_again(array, made)

    def _as_made(self, array):
        """The ``lengths.MadeSized`` that ``array`` (the array made, or a
        view of it) is, with its own sizes, where the array made holds its
        fill still and they follow the arguments'; else ``None``, and a
        constant will hold it: the sizes its making read are then uses of
        them, as they were."""
        if not isinstance(array, numpy.ndarray):
            return None
        made = self.made_sized.get(id(traced.memory_owner(array)))
        if made is None or id(made) in self.made_pinned:
            return None
        sizes = lengths.view_sizes(made, array)
        if sizes is None or not made.unchanged():
            self.made_pinned.add(id(made))
            self.length_uses += [use for use in made.uses if not any(
                use is u for u in self.length_uses)]
            return None
        return made._replace(array=array, sizes=sizes)

    def note_made_sized(self, made):
        """Notes an array the forward made with arguments' sizes
        (``made``, a ``lengths.MadeSized``), recording a node that makes it
        again from those arguments, here, where a loop's iteration made
        it: its value, if an op reads the array (:meth:`value_of`)."""
        self.made_sized[id(traced.memory_owner(made.array))] = \
            made._replace(value=self._full_sized(made))

    def _full_sized(self, made):
        """A node making ``made.array`` (a ``lengths.MadeSized``) from its
        arguments at run time, whose rows follow theirs: its output."""
        array = made.array
        out = self.graph.add_value('temp', array.shape, array.dtype)
        node = self.add_node(ir.Node(
            'numpy.%s' % ('arange' if made.fill is lengths.ARANGE
                          else 'full'), made.kernel(),
            self._made_of(made),
            [out], (('shape', self._sizes_named(made)),
                    ('fill', made.fill)),
            loc=made.uses[0].loc if made.uses else user_location()))
        # What it computes, for the loop rolling's fingerprints: two such
        # nodes of one loop's iterations run the same.
        self.templates[node] = ('numpy', 'made', (
            made.sizes, made.fill, str(array.dtype)))
        return out

    def _made_of(self, made):
        """The values whose sizes ``made`` (a ``lengths.MadeSized``) has:
        the arguments', or that of the value it is made like."""
        if made.like is not None:
            return [self.value_of(made.like)]
        return self.values_of_leaves(made.leaves)

    def values_of_leaves(self, leaves):
        """The values of the arguments ``leaves`` (their indexes)."""
        return [self.value_of(self.input_arrays[leaf]) for leaf in leaves]

    def _sizes_named(self, made):
        """``'(x.shape[0], 8)'``: the shape of ``made`` (a
        ``lengths.MadeSized``) as it is read."""
        if made.like is not None:
            return 'like its input'
        return '(%s)' % ', '.join(
            str(n) if isinstance(n, int) else '%s.shape[%d]%s' % (
                self.graph.inputs[made.leaves[n[0]]].name, n[1],
                ' %+d' % n[2] if n[2:] else '')
            for n in made.sizes)

    def _made_again(self, array, made):
        """The value of ``array``, made by the forward with arguments'
        sizes, or a view of it (``made``, a ``lengths.MadeSized`` of its
        own sizes): the node making it again. The sizes its making read
        are then no uses of them; a write into it after this is an
        escape, as into a constant."""
        whole = self.made_sized[id(traced.memory_owner(array))]
        out = whole.value if array is whole.array else \
            self._full_sized(made)
        self.values[id(array)] = out
        self.alive.append(array)
        self.constant_memory.add(id(traced.memory_owner(array)))
        self.length_uses[:] = [use for use in self.length_uses
                               if not any(use is u for u in made.uses)]
        return out

    def _constant(self, array):
        """The data of a constant holding ``array`` (``traced.constant``),
        which the arrays made with an argument's rows then name."""
        data = traced.constant(array)
        if data is not array:
            self.made_rows[:] = [made._replace(array=data)
                                 if made.array is array else made
                                 for made in self.made_rows]
        return data

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
            if value is None:
                value = self._made_value(array)
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
        self._note_held_variables(template)
        return found

    def _note_held_variables(self, template):
        """A Chainer function holding a Variable the forward computed as an
        attribute, not an input (``ModifiedXLogX`` of a distribution's
        entropy holds ``log x``), would run again with the recorded one:
        an escape."""
        for name, value in sorted(vars(ops.state_holder(template)).items()):
            if not isinstance(value, chainer.Variable):
                continue
            held = self.values.get(id(value._data[0]))
            if held is not None and not self.is_constant(held):
                self.note_escape('%s holds a Variable the forward computed '
                                 '(%s), not as an input' % (
                                     ops.node_label(template), name),
                                 user_location(5))

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

    def config_set_by_the_forward(self):
        """``{name: value}`` of the ``chainer.config`` entries that differ
        from what they were when the recording started: those the forward
        (or a link it calls) set around the node being recorded."""
        now, start = _config_in_force(), self.config_at_start
        return dict((name, value) for name, value in now.items()
                    if not _same_setting(start.get(name, _NOT_SET), value))

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
        # A lowering reads the configuration now, while it is the one the
        # node ran under; Chainer's own code, run later, gets it set.
        config = self.config_set_by_the_forward()
        index = self.varying_index(node.slices) if isinstance(
            template, get_item.GetItem) else None
        sized = lengths.sized_index(node.slices, self) if isinstance(
            template, get_item.GetItem) and index is None else None
        varying = scalars.varying_constant(
            node, ops.node_label(node), user_location(3)) \
            if self.varying and index is None else None
        if index is not None:  # the int is an input
            kernel = index[0]
            in_values.append(index[1])
        elif sized is not None:  # the sizes' arrays are inputs (W[:T])
            kernel = ops_array.cut_to_sizes(sized[0], ctx.xp)
            in_values += self.values_of_leaves(sized[1])
        elif varying is not None:  # the number is an input
            kernel = ops_math.lower_varying_constant(node, ctx,
                                                     varying.value.dtype)
            in_values.append(varying.value)
        elif data_attrs:  # the arrays are extra inputs
            # Model arrays (running averages) may be lowered; computed
            # ones where the lowering reads them (F.where's condition).
            kernel = ops.lower(node, ctx, attrs) if all(
                v.kind == 'param' for _, v in data_attrs) or \
                ops.takes_computed_attributes(node) else None
            in_values += [value for _, value in data_attrs]
        else:
            kernel = ops.lower(node, ctx)
            if kernel is not None and kernel.grad is None:
                # No gradient rule: train through the node's own backward.
                kernel = kernel._replace(grad=ops.generic_kernel(
                    template, ctx, config=config).grad)
        generic = kernel is None
        if kernel is None:
            kernel = ops.generic_kernel(template, ctx, attrs, config)
        out_values = self.bind_temps(out_arrays)
        if isinstance(template, get_item.GetItem):
            self.note_indexed(in_arrays[0], template.slices, out_arrays[0])
        elif isinstance(template, _PERMUTATIONS):
            self.note_permuted(in_arrays[0], ops_array.permutation(
                template, in_arrays[0].ndim), out_arrays[0])
        else:
            lengths.note_computed(self, type(template).__name__, in_arrays,
                                  out_arrays, getattr(template, 'shape',
                                                      None), kernel)
        self.note_value_origins(out_arrays, out_values)
        self.computed.update(out_values)
        for y, value in zip(outputs, out_values):
            self.note_variable(y, value)
        label = ops.node_label(node)
        ir_node = self.add_node(ir.Node(
            label, kernel, in_values, out_values, kernel.attrs,
            generic=bool(generic),
            pure=not generic and not ops.is_impure(label),
            loc=user_location(3)))
        ir_node.input_attrs = tuple(attrs)
        if isinstance(template, get_item.GetItem):
            self.note_first_item(in_arrays[0], template.slices, ir_node)
        if ops.communicates(template):
            ir_node.forced_grads = tuple(
                i for i, x in enumerate(inputs) if x.requires_grad)
        if sized is None:  # (its sizes are no uses: the node reads them)
            self.templates[ir_node] = template
        if not ir_node.pure:  # the self-check must not run it again
            self.generic_outputs[ir_node] = tuple(
                traced.untag(a) for a in out_arrays)

    def note_first_item(self, array, index, node):
        """Notes ``node``, the last one added, computing ``array[index]``,
        in :attr:`first_items` where it takes item 0 of ``array``'s first
        axis (as iterating over an array takes it)."""
        if _takes_first_item(index):
            position = len(self.graph.nodes) - 1
            self.first_items.append((
                position, lengths.origin_of(array, 0), node.loc,
                lengths.shift_of(array), position))

    def varying_index(self, index):
        """For an index holding a varying int as an integer
        (``scalars.varying_index``): ``(the kernel indexing with it, its
        value)``, the indexing counted as seen; else ``None``."""
        found = scalars.varying_index(index) if self.varying else None
        if found is None:
            return None
        self._note_index_seen()
        slices = index if type(index) is tuple else (index,)
        return _varying_index_kernel(slices, found[0]), found[1].value

    def cut_to_sizes(self, x, index, result, loc):
        """Records ``x[index]`` where its slices' bounds are arguments'
        sizes the forward read (``pe[:T]``), as a node reading them on
        every call (``ops.array.cut_to_sizes``), and returns ``True``;
        ``False`` for another index."""
        sized = lengths.sized_index(index, self)
        if sized is None:
            return False
        index, leaves = sized
        self.add_node(ir.Node(
            'ndarray.__getitem__', ops_array.cut_to_sizes(index),
            [self.value_of(x)] + self.values_of_leaves(leaves),
            self.bind_temps([result]), loc=loc))
        return True

    def _note_index_seen(self):
        """Counts an indexing with a varying int by the jitted function's
        own code (at its instruction) as seen (``control.LoopWatcher``
        counts those that ran)."""
        frame = sys._getframe(1)
        while frame is not None and frame.f_code is not self.top_code:
            frame = frame.f_back
        if frame is not None:
            self.indexes_seen[frame.f_lasti] += 1


def _varying_index_kernel(slices, position):
    """``y[..., k, ...]`` with ``k`` at ``position`` the node's second
    input."""
    kernel = structural.index(scalars.plain_numbers(slices),
                              [(position, 0, 1)])
    return kernel._replace(attrs=(('index', structural.index_pattern(
        scalars.plain_numbers(slices), [(position, 0, 1)])),))


_NOT_SET = object()


def _config_in_force():
    """This thread's ``chainer.config`` entries, read from the global and
    thread-local dictionaries (not through ``__getattr__``, which notes
    the reads of a recording as guards)."""
    values = dict(vars(chainer.global_config))
    values.update(vars(chainer.config._local))
    return values


def _same_setting(a, b):
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # a value that does not compare as a bool
        return False


def record(fn, instance, args, kwargs, leaves, name, input_names,
           packed=None, varying=None, free_links=()):
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
        varying: ``(paths, names)`` of number arguments the forward gets
            as ``scalars.Scalar`` (``IntScalar``) numbers held by symbols
            of the graph.
        free_links: ``(name, link)`` of the links the forward names
            outside ``instance`` (``guards.free_links``), whose arrays
            are bound as the model's are.

    Returns:
        Recording: the graph, where each parameter comes from, the
        result's structure, the eager result and any data escape.
    """
    with _recording_lock, trip_counts.literals_watched(fn):
        return _record_locked(fn, instance, args, kwargs, leaves, name,
                              input_names, packed, varying, free_links)


def _outermost_line(code):
    """The line of the outermost running frame of ``code``, or ``None``."""
    line, frame = None, sys._getframe(2)
    while frame is not None:
        if frame.f_code is code:
            line = frame.f_lineno
        frame = frame.f_back
    return line


def _record_locked(fn, instance, args, kwargs, leaves, name, input_names,
                   packed, varying, free_links):
    """:func:`record`, one recording at a time: binds the model's arrays
    and the arguments' proxies, runs the forward with the recording
    patches in force and puts back what it changed in place."""
    recorder = _Recorder(ir.Graph(name))
    code = getattr(fn, '__code__', None)
    if code is not None:
        recorder.forward_loc = (code.co_filename, code.co_firstlineno)
        recorder.forward_code = code
        recorder.follows_scalars = traced.follows_scalars(code)
    python_state = model_state.python_state(instance)
    restore = model_state.swap_model_arrays(instance, recorder, free_links)
    restore += model_state.swap_generators(instance)
    proxies = arguments.proxies_of(leaves, restore)
    recorder.bind_inputs(proxies, input_names)
    passed = signature.flatten((args, kwargs), [])
    call_args, call_kwargs = signature.unflatten(passed, proxies)
    rows = arguments.Rows()
    try:
        with recording_patches.in_force(
                recorder, recording_patches.user_namespaces(fn)):
            watcher = _loop_watcher(recorder, fn, instance, args, kwargs,
                                    proxies)
            recorder.loop_runs = watcher.runs
            if packed is not None:
                call_args, call_kwargs = rows.unpack(
                    recorder.graph, call_args, call_kwargs, packed, proxies)
                watcher.arguments.update(rows.arguments)
                for listed, (_, leaf) in rows.arguments.items():
                    # (len(xs) is the packed array's first size)
                    recorder.length_leaves[listed] = ((leaf, 0),)
            run_args, run_kwargs = call_args, call_kwargs
            index_sites = {}
            if varying is not None:  # the same objects, but the numbers
                recorder.varying = True
                run_args, run_kwargs = scalars.proxies(
                    call_args, call_kwargs, varying[0], recorder.graph,
                    recorder.scalar_uses, varying[1])
                index_sites = _index_sites(code, varying[1])
                watcher.watch_indexes(index_sites)
            recorder.top_code = code
            with watcher:
                result = _run_forward(fn, instance, run_args, run_kwargs)
            recorder.returned_steps = _stacked_steps(result, watcher)
            _note_indexes_unseen(recorder, watcher, index_sites)
    finally:
        model_state.restore_arrays(restore)
    model_state.note_changed_python_state(instance, python_state, recorder)
    rows.copy_back_changed_rows(recorder)
    # Rows of packed lists are the caller's items, as arguments are.
    stand_ins, originals = proxies + rows.objects, leaves + rows.originals
    arguments.note_changed_arguments(
        passed, rows.repacked(call_args, call_kwargs),
        packed[1:] if packed is not None else (args, kwargs),
        (call_args, call_kwargs), stand_ins, originals, recorder)
    return _recording(instance, recorder, watcher, rows, result, proxies,
                      (stand_ins, originals), free_links)


def _index_sites(code, names):
    """``{offset: name}`` of the jitted function's subscripts that index
    with the varying ints ``names`` (``trip_counts.arithmetic_only_names``)
    or numbers computed from them."""
    if code is None:
        return {}
    found = trip_counts.arithmetic_only_names(code)
    return dict((offset, name) for name in names
                for offset in found.get(name, ()))


def _note_indexes_unseen(recorder, watcher, sites):
    """A subscript indexing with a varying int more often than the
    recording saw it there indexed something other than a Variable (a
    list, a NumPy array), reading the int in C: that bakes it in."""
    for offset, name in sorted(sites.items()):
        if watcher.indexed[offset] != recorder.indexes_seen[offset]:
            line = next((p[0] for start, p in _positions(recorder.top_code)
                         if start == offset), None)
            recorder.scalar_uses.append(scalars.Use(
                name, 'used as an index of an object other than a Variable',
                (recorder.top_code.co_filename, line)))


def _positions(code):
    """``(offset, (line, end line, column, end column))`` of each
    instruction of ``code``."""
    return ((2 * i, p) for i, p in enumerate(code.co_positions()))


def _loop_watcher(recorder, fn, instance, args, kwargs, proxies):
    """The watcher of the forward's loops (``control.LoopWatcher``)."""
    return control.LoopWatcher(
        lambda: len(recorder.graph.nodes), getattr(fn, '__code__', None),
        arguments.loop_arguments(fn, instance, args, kwargs, proxies),
        first_item=functools.partial(_latest_first_item, recorder),
        numpy_call=functools.partial(_sizes_into_numpy, recorder),
        trip_length=functools.partial(_trip_length, recorder))


def _trip_length(recorder, trip, n, frame, in_float=False):
    """The trip count ``n`` of a loop over the axis ``trip.where`` of an
    argument (``trip_counts.TripSource`` of kind ``'dim'``), less
    ``trip.offset``, as a ``lengths.Length`` of that size; ``in_float``:
    as the ``scalars.Scalar`` computed of it at run time
    (``lengths.as_scalar``, at ``frame``), or ``None``."""
    length = lengths.Length(n, frozenset([trip.where]),
                            recorder.length_uses, (1, -trip.offset),
                            trip.offset == 0)
    return lengths.as_scalar(length, recorder, frame) if in_float \
        else length


def _sizes_into_numpy(recorder, name, args, caller):
    """The forward's code, at ``caller``, called ``numpy.NAME`` with
    ``args``: sizes among them (``numpy.argmax([len(x) for x in xs])``)
    are baked in, where no traced array goes along (whose recorded node
    follows them, ``traced.TracedArray``). NumPy reads them in C, unseen
    by their own methods."""
    if lengths.contained(args) and not traced.holds_traced(args):
        recorder.note_constants(args, 'passed to numpy.%s' % name,
                                (caller.f_code.co_filename, caller.f_lineno))


def _takes_first_item(slices):
    """Is ``x[slices]`` item 0 of ``x``'s first axis (as iterating over a
    Variable takes it)?"""
    return type(slices) in (tuple, list) and len(slices) == 1 and \
        type(slices[0]) is int and slices[0] == 0 or \
        type(slices) is int and slices == 0


def _latest_first_item(recorder):
    """``(position, origin, (filename, line), shift, start)`` of the
    latest node that took item 0 of a value's first axis (or the last of
    the items ``F.separate`` gave), that axis's origin (or ``None``), the
    user's line, how many rows more than the origin that axis has and
    the node a loop over the items starts at; ``None`` if none did."""
    return recorder.first_items[-1] if recorder.first_items else None


def _run_forward(fn, instance, call_args, call_kwargs):
    if instance is not None:
        return fn(instance, *call_args, **call_kwargs)
    return fn(*call_args, **call_kwargs)


def _recording(instance, recorder, watcher, rows, result, proxies,
               callers, free_links):
    """What the recorder made of the forward that returned ``result``;
    ``callers`` are ``(stand-ins, the caller's objects they stand for)``,
    put back in the result and in the link attributes assigned;
    ``free_links``, ``(label, link)`` of the links it names outside the
    model."""
    traced.untag_graph(recorder.applied)
    lengths.forgive_filled(recorder)
    result = lengths.plain(joining.as_plain(result), recorder.length_uses,
                           'returned', recorder.forward_loc)
    model_state.adopt_lazy_params(instance, recorder)
    outputs = _record_outputs(result, recorder, proxies)
    effects = _record_effects(instance, recorder, proxies)
    _untag_effect_values(recorder, *callers)
    recording = Recording(
        recorder.graph, outputs, effects,
        arguments.untag_result(result, *callers), recorder.escape,
        recorder.param_arrays, recorder.generic_outputs,
        recorder.param_owners, recorder, watcher,
        model_state.written_first(instance, recorder))
    named = model_state.names_named(recorder, watcher.codes_run)
    recording.unread_numbers = model_state.unread_numbers(instance,
                                                          recorder, named)
    recording.free_unread = dict(
        (id(link), model_state.unread_numbers(link, recorder, named))
        for _, link in free_links)
    recording.outside_numbers = model_state.numbers_read_outside(
        instance, recorder)
    recorder.links_read = {}
    recording.row_nodes = rows.nodes
    recording.separated_nodes = recorder.separated_nodes
    recording.droppable = recorder.droppable
    recording.draws_unseen = recorder.draws_unseen
    recorder.separated = []  # (the items, kept only while recording)
    recorder.separated_from = {}
    recorder.transposed_from = {}
    recorder.sized_lists = []
    recorder.shape_sources = {}
    recorder.padded_widths = {}
    recording.rows_read = rows.note_unread(
        recorder.graph, _connected_outputs(recorder.graph, outputs, effects),
        recorder.computed)
    recording.config_names = frozenset(recorder.config_names)
    return recording


def leaf_specs(outputs, effects):
    """The leaf specs (:func:`_leaf_spec`) of a recording's result
    (``outputs``, ``None`` if it escaped) and of its effects."""
    specs = list(outputs[1]) if outputs else []
    for effect in effects:
        specs += effect[4]
    return specs


def _connected_outputs(graph, outputs, effects):
    """The values of the Variables that the result and the effects hand
    out connected to the graph (backprop may start from them)."""
    return set(graph.outputs[where]
               for kind, where, is_var, grad in leaf_specs(outputs, effects)
               if kind in ('value', 'steps', 'items') and is_var and grad)


def _untag_effect_values(recorder, stand_ins, originals):
    """Turns the traced views and stand-ins in what the forward assigned
    and reported back into plain arrays and the caller's objects; a link
    attribute still holding an assigned value gets the plain one."""
    for kind, link, name, value in recorder.effects:
        untagged = arguments.untag_result(value, stand_ins, originals)
        if kind == 'setattr' and untagged is not value and \
                getattr(link, name, None) is value:
            object.__setattr__(link, name, untagged)


def _note_views_returned(recorder, array, what):
    """Notes an escape where ``array``, a constant handed out (copied on
    each call), views the memory of another one handed out (``cw`` and
    ``v = cw[:2]``, returned by a piece of a cut forward): their copies
    would not share it, and a write into one would miss the other."""
    if not isinstance(array, numpy.ndarray):
        return
    owner = id(traced.memory_owner(array))
    if recorder.returned_memory.setdefault(owner, array) is not array:
        recorder.note_escape('%s arrays it made that view one memory'
                             % what, recorder.forward_loc)


def _leaf_spec(leaf, recorder, proxies, what):
    """How to rebuild one leaf of the result (or of the model state) on a
    compiled call: ``(kind, where, is_variable, requires_grad)`` with kind
    ``'value'`` (``where`` indexes ``graph.outputs``), ``'scalar'`` (the
    same, returned as the NumPy scalar eager gave), ``'leaf'`` (the same,
    returned as a Variable that is a leaf of the graph, as the new
    Variable the forward made around an array is in eager mode), ``'arg'`` (the
    argument leaf returned as is), ``'model'`` (a Variable of the model,
    such as a Parameter, returned as is; ``where`` is its source) or
    ``'const'`` (an array, or a NumPy scalar, that does not depend on the
    inputs, copied) or ``'number'`` (a varying number reported: the
    output as a Python number, of the type ``grad`` holds)."""
    is_var = isinstance(leaf, chainer.Variable)
    grad = leaf.requires_grad if is_var else False
    base = recorder.numbers.get(id(leaf))
    if base is not None:  # a varying number reported: ``grad`` its type
        recorder.graph.outputs.append(recorder.values[id(leaf)])
        return 'number', len(recorder.graph.outputs) - 1, False, base
    for i, proxy in enumerate(proxies):
        if leaf is proxy:
            return 'arg', i, is_var, grad
    array = signature.leaf_array(leaf)
    value = recorder.values.get(id(array))
    if value is None and recorder.holds_made(array):  # (zeros(h.shape))
        value = recorder.value_of(array)
    if value is not None and value.kind == 'param' and \
            recorder.param_owners.get(value) is leaf:
        return 'model', value.data, is_var, grad
    if value is None or recorder.is_constant(value):
        if isinstance(array, TracedArray) and value is None:
            recorder.note_escape(_UNFOLLOWED % what, recorder.forward_loc)
        _note_views_returned(recorder, array, what)
        # A copy per call: the caller may write into what it gets.
        constant = traced.untag(array).copy()
        if traced.is_scalar(array) and not is_var:
            constant = constant[()]
        return 'const', constant, is_var, grad
    recorder.graph.outputs.append(value)
    if (traced.is_scalar(array) or isinstance(array, numpy.generic)) and \
            not is_var:  # a session gives a 0-d array for it
        kind = 'scalar'
    elif grad and recorder.is_new_leaf(leaf, value):
        kind = 'leaf'
    else:
        kind = 'value'
    return kind, len(recorder.graph.outputs) - 1, is_var, grad


def _record_outputs(result, recorder, proxies):
    """Returns ``(structure, leaf specs)`` of the result: a list of steps
    it returns (:func:`_stacked_steps`) as one leaf of kind ``'steps'``,
    the steps stacked."""
    out_leaves = []
    stacked = recorder.returned_steps
    rows, cuts = _items_as_rows(result, recorder)
    try:
        structure = signature.flatten(_steps_stacked(rows, stacked),
                                      out_leaves)
        if any(sum(leaf is r for leaf in out_leaves) > 1 for r in cuts):
            out_leaves, cuts = [], {}  # (the rows returned besides)
            structure = signature.flatten(_steps_stacked(result, stacked),
                                          out_leaves)
    except errors.UnsupportedArgument as e:
        recorder.note_escape('returning %s' % e, recorder.forward_loc)
        return None
    specs = []
    for i, leaf in enumerate(out_leaves):
        same = [j for j in range(i) if out_leaves[j] is leaf]
        specs.append(('same', same[0], False, False) if same else
                     _leaf_spec(leaf, recorder, proxies, 'returning'))
        if not same and any(leaf is steps for _, steps in stacked.values()):
            specs[-1] = ('steps',) + specs[-1][1:]
        elif not same and id(leaf) in cuts:
            kind, where, is_var, grad = specs[-1]
            specs[-1] = ('items', ItemsAt(where, *cuts[id(leaf)][1:]),
                         is_var, grad)
        elif not same and isinstance(leaf, chainer.Variable):
            recorder.output_specs[id(leaf)] = (leaf, specs[-1])
    return structure, specs


class ItemsAt(int):
    """Where a result leaf of kind ``'items'`` is: the index of the
    program output holding the rows of a list's items joined, with how
    each call cuts them again (:func:`_items_as_rows`): at the lengths of
    the items of the joined list whose argument is ``lengths`` (a leaf's
    index), each ``shift`` rows longer, into a ``container`` (``list`` or
    ``tuple``)."""

    def __new__(cls, where, lengths, shift, container):
        self = int.__new__(cls, where)
        self.lengths, self.shift, self.container = lengths, shift, container
        return self


def _items_as_rows(result, recorder):
    """``(result, cuts)``: ``result`` with each list it returns (as its
    result, or in the tuple it is) of all the items of a value made of a
    joined list's items, in order (``[self.out(y) for y in ys]`` of an
    N-step link's output sequences), that value's rows (a Variable) in its
    place, which each call cuts again (``cache``), so that a joined
    program returns them; ``cuts`` ``{id(rows): (rows, the lengths'
    leaf, shift, the list's type)}``."""
    if not recorder.segment_items:
        return result, {}
    cuts = {}

    def rows_of(items):
        found = joining.whole_items(items, recorder) \
            if isinstance(items, (list, tuple)) else None
        rows = found and _rows_as_items(found.packed, items, recorder)
        if rows is None:
            return items
        container = list if isinstance(items, list) else tuple
        cuts[id(rows)] = (rows, found.leaf, found.shift, container)
        return rows
    rows = rows_of(result)
    if rows is result and type(result) is tuple:
        return tuple(rows_of(r) for r in result), cuts
    return rows, cuts


def _stacked_steps(result, watcher):
    """``{id(list): (list, its items stacked)}`` of the lists the forward
    returns (as its result, or in the tuple it is) that a loop over an
    argument's axis filled with one Variable per step (``hs.append(h)``):
    the program returns their items stacked (``F.stack``, recorded here),
    which each call cuts apart again (``cache``), so that the loop's
    steps may be as many as the axis is long."""
    lists = [result] if type(result) is list else \
        [r for r in result if type(r) is list] \
        if type(result) is tuple else []
    filled = dict((i, n) for run in watcher.runs
                  if run.exit == 'done' and run.trip is not None and
                  run.trip.kind == 'dim' for i, n in run.filled.items())
    found = {}
    for items in lists:
        if filled.get(id(items)) == len(items) > 1 and all(
                isinstance(v, chainer.Variable) for v in items) and \
                len(set((v.shape, v.dtype) for v in items)) == 1:
            found[id(items)] = (items, chainer.functions.stack(items))
    return found


def _rows_as_items(rows, items, recorder):
    """``rows``, the rows of ``items`` joined, as the items are: a
    Variable of Variables, an array of arrays (a Variable's array of the
    arrays of Variables: ``[F.argmax(s, axis=1).array for s in ys]``),
    where the forward computed them (not a list argument's own items,
    which a call returns as the caller's); else ``None``."""
    if all(isinstance(x, chainer.Variable) for x in items):
        if not isinstance(rows, chainer.Variable):
            return None
    elif any(isinstance(x, chainer.Variable) for x in items):
        return None
    elif isinstance(rows, chainer.Variable):
        rows = rows.array
    value = recorder.values.get(id(signature.leaf_array(rows)))
    return rows if value is not None and \
        value not in recorder.graph.inputs else None


def _steps_stacked(result, stacked):
    """``result``, each list of :func:`_stacked_steps` in it (or a copy:
    the same items) its items stacked."""
    if type(result) is list:
        return next((steps for items, steps in stacked.values()
                     if len(items) == len(result) and
                     all(a is b for a, b in zip(items, result))), result)
    if type(result) is tuple:
        return tuple(_steps_stacked(r, stacked) if type(r) is list else r
                     for r in result)
    return result


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
                what, type(target).__name__),
                recorder.effect_lines.get((id(target), name)))
            continue
        leaves = []
        try:
            structure = signature.flatten(value, leaves)
        except errors.UnsupportedArgument as e:
            recorder.note_escape('%s %s' % (what, e), recorder.forward_loc)
            continue
        effects.append((kind, paths.get(id(target)), name, structure, [
            _effect_leaf_spec(leaf, recorder, proxies, what)
            for leaf in leaves]))
    return effects
