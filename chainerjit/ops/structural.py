"""Structural kernels: the ops chainerjit inserts itself, as opposed to
the lowerings of Chainer's functions in the other modules of ``ops``.

The recorder (``frontend.trace``) makes guards on branches and the stops
of gradients; loop rolling (``frontend.rolling``) makes a loop, its
exits, the skip of a peeled first iteration, the per-iteration lists and
their unpacking, and counter-indexed reads; the backward
(``passes.autodiff``) makes the gradients' sums and its loops'
bookkeeping. Each kernel names its kind (``Kernel.structural``, one of
the constants below), and the stages ask :func:`kind` rather than testing
op names.
"""

import collections

import chainer
from chainer import utils
import numpy

from chainerjit import errors
from chainerjit.ops import Follow
from chainerjit.ops import draws_only
from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import onnx_op
from chainerjit.ops import rows_in_place
from chainerjit.ops import rows_indexed
from chainerjit.ops import rows_joined
from chainerjit.ops import takes_axes
from chainerjit.ops import updates_inputs_only
from chainerjit.ops.math import onnx_dtype
from chainerjit.ops.scratch import Scratch

LOOP = 'loop'
EXIT = 'exit'
SKIP = 'skip'
GUARD = 'guard'
STOP_GRADIENT = 'stop_gradient'
UNPACK = 'unpack'
JOIN = 'join'
INDEX = 'index'
ACCUMULATE = 'accumulate'
REVERSE = 'reverse'
AT = 'at'
COLLECT = 'collect'
SCATTER_ADD = 'scatter_add'
OUTER_SUM = 'outer_sum'
FORTRAN_COPY = 'fortran_copy'


def kind(node):
    """The structural kind of ``node``'s kernel, or ``None``."""
    kernel = node.kernel
    return None if kernel is None else kernel.structural


def is_guard(node):
    return kind(node) == GUARD


def side_effect_free(nodes, guards):
    """No node has side effects, in loop bodies too (nodes run through
    Chainer's own code never count as pure). ``guards``: whether a guard,
    which only checks, may be there."""
    for node in nodes:
        if node.region is not None:
            if not side_effect_free(node.region.body.nodes, guards):
                return False
        elif is_guard(node):
            if not guards:
                return False
        elif not node.pure:
            return False
    return True


def undoable(nodes, loops=False, guards=True, in_loop=False):
    """No node has side effects but guards (where ``guards``), draws from
    NumPy's global random generator (dropout) and updates of model
    arrays it takes (batch normalization's running averages, outside
    loops: :func:`state_params`): putting the generator's state and those
    arrays back undoes a run. With ``loops``, in the bodies of loop
    regions too (else none may be)."""
    return not_undone(nodes, loops, guards, in_loop) is None


def not_undone(nodes, loops=False, guards=True, in_loop=False):
    """The first node that makes :func:`undoable` false (a loop node where
    ``loops`` is false), or ``None``."""
    for node in nodes:
        if node.region is not None:
            found = not_undone(node.region.body.nodes, loops, guards,
                               True) if loops else node
        elif node.pure or (guards and is_guard(node)) or \
                draws_only(node.op) or \
                (updates_inputs_only(node.op) and not in_loop):
            found = None
        else:
            found = node
        if found is not None:
            return found
    return None


def state_params(graph):
    """The indexes in ``graph.params`` of the model arrays its nodes update
    (``ops.updates_inputs_only``)."""
    updated = set(v for node in graph.nodes
                  if updates_inputs_only(node.op) for v in node.inputs)
    return [i for i, v in enumerate(graph.params) if v in updated]


def own_state(graph):
    """The arrays ``graph``'s nodes update in place that are none of
    their inputs (the running averages a batch normalization's node holds
    where they are no model arrays: a link reached through a closure,
    arrays the forward passed)."""
    return [a for node in graph.nodes if updates_inputs_only(node.op) and
            node.kernel is not None
            for a in getattr(node.kernel.fn, 'own_state', ())]


def is_exit(node):
    return kind(node) == EXIT


def stops_gradient(node):
    return kind(node) == STOP_GRADIENT


# --- recording ---------------------------------------------------------------

def guard(expected):
    """Checks that a branch on an array value goes the way it went while
    recording (``expected``); passes the condition on."""
    def run(condition):
        if bool(condition) != expected:
            raise errors.GuardFailed(
                'a branch on an array value went the other way')
        return condition
    return Kernel(run, structural=GUARD)


def stop_gradient():
    """The identity, through which no gradient flows: a Variable the
    forward made from an input's array by hand (``Variable(x.array)``)."""
    return Kernel(_identity, onnx=onnx_op('Identity'),
                  structural=STOP_GRADIENT, lengths=rows_in_place)


def _identity(x):
    return x


# --- loops -------------------------------------------------------------------

def loop():
    """A Loop node's kernel: the VM runs its region (``ir.regions``)."""
    return Kernel(None, structural=LOOP)


def exit_():
    """A loop's exit (``break``, a ``while`` test): the VM ends the loop
    when its condition takes the node's ``when``."""
    return Kernel(None, structural=EXIT)


def skip_if(leaves_on):
    """The trip count of a loop whose peeled first iteration ended with
    the loop's own exit: 0 when the exit was taken, else the loop's."""
    def trip_count(condition, n):
        return numpy.int64(0) if bool(condition) == leaves_on else n

    def to_onnx(b, ins, outs):
        zero = b.int64s(0)
        b.op('Where', [ins[0]] + ([zero, ins[1]] if leaves_on
                                  else [ins[1], zero]), outs)
    return Kernel(trip_count, onnx=to_onnx, structural=SKIP)


def unpack(n):
    """``Unpack(list) -> v0, v1, ...``: the ``n`` per-iteration values
    used after a loop (a loop that ran another number of iterations fails
    the guard this is)."""
    def run(items):
        if len(items) != n:
            raise errors.GuardFailed(
                'the loop ran %d iterations, not %d' % (len(items), n))
        return tuple(items)

    def to_onnx(b, ins, outs):
        parts = b.op('Split', [ins[0], b.int64s([1] * n)],
                     [b.fresh('part') for _ in range(n)], axis=0)
        for part, out in zip(parts, outs):
            b.op('Squeeze', [part, b.int64s([0])], [out])

    def lengths(rows):
        # A list's rows are its items'.
        return Follow((rows[0],) * n)
    return Kernel(run, multi=True, grad=GradRule(_unpack_grad),
                  onnx=to_onnx, structural=UNPACK,
                  lengths=takes_axes(lengths))


def _unpack_grad(xs, ys, gys, wanted):
    return list(gys),


def join(op, axis, prefix, count=None, reverse=False, after=0):
    """``op`` (``'Stack'`` or ``'Concat'``) of ``prefix`` arrays, then a
    loop's list of arrays (``reverse``: that list reversed), then
    ``after`` arrays (the first step's, peeled before a reversed loop
    that inserts each step's value in front); ``count`` arrays in all
    when recorded."""
    def items(args):
        listed = list(args[prefix])
        return list(args[:prefix]) + (listed[::-1] if reverse else listed) \
            + list(args[prefix + 1:])

    def run(*args):
        found = items(args)
        xp = chainer.backend.get_array_module(found[0])
        if op == 'Stack':
            return xp.stack(found, axis=axis)
        return xp.concatenate(found, axis=axis)

    def grad(xs, ys, gys, wanted):
        gy, = gys
        xp = chainer.backend.get_array_module(gy)
        if op == 'Stack':
            parts = [xp.take(gy, i, axis=axis)
                     for i in range(gy.shape[axis])]
        else:
            sizes = numpy.cumsum([x.shape[axis] for x in items(xs)])[:-1]
            parts = xp.split(gy, sizes, axis=axis)
        end = len(parts) - after
        listed = list(parts[prefix:end])
        return tuple(parts[:prefix]) + (
            listed[::-1] if reverse else listed,) + tuple(parts[end:])
    kept = () if op == 'Stack' else range(prefix + 1 + after)
    attrs = {'axis': axis, 'reverse': True} if reverse else {'axis': axis}
    return Kernel(run, attrs, grad=GradRule(grad, kept),
                  onnx=_join_to_onnx(op, axis, prefix, reverse),
                  structural=JOIN, lengths=rows_joined(op, axis, count))


def python_sum(start):
    """Python's ``sum()`` of a loop's list of arrays, ``((0 + l0) + l1) +
    ...``, or (``start``) of a total of values from before the loop and
    then the list's, ``(total + l0) + l1 ...``, as Chainer's AddConstant
    and Adds compute it (the same bits); each item's gradient is the
    output's, as theirs are."""
    def run(*args):
        items = args[-1]
        if start:
            total, rest = args[0], items
        else:
            total = utils.force_array(items[0] + items[0].dtype.type(0))
            rest = items[1:]
        for item in rest:
            total = utils.force_array(total + item)
        return total

    def grad(xs, ys, gys, wanted):
        gy, = gys
        return ((gy,) if start else ()) + ([gy] * len(xs[-1]),)

    def to_onnx(b, ins, outs):  # the steps stacked on axis 0
        if not start:
            b.op('ReduceSum', [ins[0], b.int64s([0])], outs, keepdims=0)
            return
        b.op('Add', [ins[0], b.single('ReduceSum', ins[1], b.int64s([0]),
                                      keepdims=0)], outs)

    def lengths(rows):
        # A list's rows are its items'.
        if start and rows[0] != rows[1]:
            return None
        return Follow((rows[-1],))
    return Kernel(run, grad=GradRule(grad, (1 if start else 0,)),
                  onnx=to_onnx, lengths=takes_axes(lengths))


def _join_to_onnx(op, axis, prefix, reverse=False):
    """The loop's scan output is already stacked on axis 0: put the values
    from before the loop in front (or reverse it), move the steps' axis
    to ``axis`` (and, for ``concat``, merge it with the next)."""
    def convert(b, ins, outs):
        steps = ins[prefix]
        if reverse:
            steps = b.op('Slice', [steps] + [b.int64s(v) for v in (
                [-1], [-2 ** 63], [0], [-1])])[0]
        parts = [b.op('Unsqueeze', [x, b.int64s([0])])[0]
                 if x is not ins[prefix] else steps for x in ins]
        stacked = b.op('Concat', parts, axis=0)[0] if len(parts) > 1 \
            else steps
        shape = list(b.out_shapes[0])
        ndim = len(shape) - (op == 'Stack')  # of each step's value
        if axis:
            stacked = b.op('Transpose', [stacked], perm=list(
                range(1, axis + 1)) + [0] + list(range(axis + 1,
                                                       ndim + 1)))[0]
        if op == 'Stack':
            b.op('Identity', [stacked], outs)
            return
        b.op('Reshape', [stacked, b.int64s(
            [0] * axis + [-1] + shape[axis + 1:])], outs)
    return convert


def index(slices, counters):
    """``x[index]`` where the integer entries at the ``counters``'
    positions follow the loop counter ``i`` (``(position, start, step)``:
    ``start + step * i``); with no ``counters``, a constant index whose
    kernel and gradient do not depend on ``x``'s recorded shape."""
    slices = list(slices)

    def at(i):
        found = list(slices)
        for position, start, step in counters:
            found[position] = _counted_entry(slices[position],
                                             start + step * i)
        return tuple(found)

    def run(x, i=None):
        return utils.force_array(x[at(i)])

    def grad(xs, ys, gys, wanted):
        x = xs[0]
        gy, = gys
        xp = chainer.backend.get_array_module(gy)
        gx = xp.zeros(x.shape, gy.dtype)
        gx[at(xs[1] if counters else None)] += gy  # as add.at: -0.0 is 0.0
        return (gx, None)[:len(xs)]

    def scatter(total, x, *i_gy):
        # A loop's running sum of x's gradient, one step added in place.
        gy = i_gy[-1]
        if gy is None:
            return total
        if total is None:
            xp = chainer.backend.get_array_module(gy)
            total = xp.zeros(x.shape, gy.dtype)
        total[at(i_gy[0] if counters else None)] += gy
        return total
    grad.scatter = scatter
    n_inputs = 2 if counters else 1
    return Kernel(run, grad=GradRule(grad, range(n_inputs),
                                     onnx=_index_grad_to_onnx(slices,
                                                              counters)),
                  onnx=_index_to_onnx(slices, counters), structural=INDEX,
                  lengths=rows_indexed(tuple(slices)))


def _counted_entry(recorded, k):
    """The index entry a counter gives at ``k``: the int ``k``, or for a
    step recorded as a slice of one (``xs[t:t+1]``), ``k:k+1``."""
    if type(recorded) is not slice:
        return k
    return slice(k, k + 1 if k != -1 else None)


def counted_slice(entry):
    """Does a counter read one step of an axis as the index entry
    ``entry`` gives it, keeping the axis (``xs[t:t+1]``, a slice of one:
    ``fingerprints.one_step_slice``)? Else it takes the axis away
    (``xs[t]``)."""
    return type(entry) is slice


def counted_number(start, step, dtype=numpy.float64, recorded_trip=None):
    """The number ``start + step * i`` of the loop counter ``i`` (ints), a
    0-d array of ``dtype``: the constant of an op that the recorded
    iterations gave as a multiple of their count (``h * (t + 1)``, a
    float64), or an int argument of a NumPy call (``lengths > t``, an
    int64). With ``recorded_trip``, the trip count of the recorded loop,
    the number follows the loop's trip count ``n``, a second input, as
    those of a counter counting down to a fixed end do (``t`` of
    ``reversed(range(T))``): ``start + step * (i + recorded_trip - n)``."""
    def run(i, n=None):
        shift = 0 if n is None else recorded_trip - int(n)
        return numpy.asarray(start + step * (int(i) + shift), dtype)

    def to_onnx(b, ins, outs):
        position = ins[0] if recorded_trip is None else b.op('Add', [
            ins[0], b.op('Sub', [b.int64s(recorded_trip), ins[1]])[0]])[0]
        b.op('Cast', [_counter_position(b, position, start, step)], outs,
             to=onnx_dtype(dtype))
    attrs = {'start': start, 'step': step}
    if recorded_trip is not None:
        attrs['recorded_trip'] = recorded_trip
    return Kernel(run, attrs, onnx=to_onnx)


class CountedPower(collections.namedtuple('CountedPower', 'base start')):
    """The constant ``base ** (start + i)`` of the loop counter ``i``, as
    Python computes it (an int or a float: ``h * 0.9 ** t``), that the
    recorded iterations of a loop gave an op."""

    __slots__ = ()

    def label(self):
        return '%r**(%d+i)' % (self.base, self.start)

    def kernel(self):
        """The number as a float64 0-d array, computed by Python as the
        forward computes it."""
        base, start = self.base, self.start

        def run(i):
            return numpy.asarray(base ** (start + int(i)), numpy.float64)

        def to_onnx(b, ins, outs):
            exponent = b.op('Cast', [_counter_position(b, ins[0], start, 1)],
                            to=onnx_dtype(numpy.float64))[0]
            b.op('Pow', [b.constant(numpy.asarray(base, numpy.float64)),
                         exponent], outs)
        return Kernel(run, {'base': base, 'start': start}, onnx=to_onnx)


def _index_to_onnx(slices, counters):
    """``x[..., i, ...]`` as ONNX ``Gather`` nodes: one per integer index
    (the counter's computed from the Loop's iteration number), and an
    ``Unsqueeze`` per new axis (``None``)."""
    starts = dict((c[0], c[1:]) for c in counters)

    def convert(b, ins, outs):
        steps, axis = [], 0
        for j, item in enumerate(slices):
            if type(item) is int or j in starts:
                position = _counter_position(b, ins[1], *starts[j]) \
                    if j in starts else b.int64s(item)
                steps.append(('Gather', position, {'axis': axis}))
                if counted_slice(item):  # (x[i:i+1] keeps the axis)
                    steps.append(('Unsqueeze', b.int64s([axis]), {}))
                    axis += 1
            elif item is None:
                steps.append(('Unsqueeze', b.int64s([axis]), {}))
                axis += 1
            elif item == slice(None):
                axis += 1
            else:
                raise errors.ExportError(
                    'indexing with %r in a loop cannot be exported' % (
                        item,))
        x = ins[0]
        for k, (op, argument, attrs) in enumerate(steps):
            x = b.op(op, [x, argument],
                     outs if k == len(steps) - 1 else None, **attrs)[0]
        if not steps:
            b.op('Identity', [x], outs)
    return convert


def _counter_position(b, counter, start, step):
    """The ONNX value of ``start + step * counter``."""
    return b.op('Add', [b.int64s(start), b.op(
        'Mul', [counter, b.int64s(step)])[0]])[0]


def _index_grad_to_onnx(slices, counters):
    """The gradient of ``x[:, ..., i]`` (one integer, the counter's, after
    whole axes) in ONNX: ``gy`` put into zeros of ``x``'s shape at ``i``
    (``ScatterElements``); ``None`` for other indexes."""
    ints = [j for j, s in enumerate(slices) if type(s) is int]
    if len(counters) != 1 or ints != [counters[0][0]] or any(
            s != slice(None) for j, s in enumerate(slices) if j != ints[0]):
        return None
    axis, start, step = counters[0]

    def convert(b, xs, ys, gys, wanted):
        import onnx.numpy_helper

        update = b.single('Unsqueeze', gys[0], b.int64s([axis]))
        where = b.single('Expand', b.single('Reshape', _counter_position(
            b, xs[1], start, step), b.int64s([1])), b.single('Shape', update))
        zeros = b.single('ConstantOfShape', b.single('Shape', xs[0]),
                         value=onnx.numpy_helper.from_array(
                             numpy.zeros(1, b.out_dtypes[0])))
        return b.single('ScatterElements', zeros, where, update,
                        axis=axis), None
    return convert


def index_pattern(slices, counters):
    """How an index following the counter prints: ``[i, :]``,
    ``[2+i]``, ``[-1-i]``."""
    starts = dict((c[0], c[1:]) for c in counters)
    return '[%s]' % ', '.join(
        _format_counter(*starts[j], kept=counted_slice(s)) if j in starts
        else _format_index(s) for j, s in enumerate(slices))


def _format_counter(start, step, kept=False):
    sign = '' if step == 1 else '-'
    at = '%si' % sign if start == 0 else '%d%s%si' % (
        start, '+' if step == 1 else '', sign)
    return '%s:%s+1' % (at, at) if kept else at


def _format_index(s):
    if isinstance(s, slice):
        return ':' if s == slice(None) else '%s:%s%s' % (
            '' if s.start is None else s.start,
            '' if s.stop is None else s.stop,
            '' if s.step is None else ':%s' % s.step)
    if s is Ellipsis:
        return '...'
    if s is None:
        return 'None'
    return str(s)


# --- the backward's sums and loops -------------------------------------------

def accumulate():
    """The sum of two gradients, either of which may be ``None``."""
    return Kernel(_accumulate, structural=ACCUMULATE,
                  onnx=_accumulate_to_onnx)


def _accumulate_to_onnx(b, ins, outs):
    """Both gradients there (a session takes no ``None``): their sum."""
    if any(d == object for d in b.in_dtypes):
        raise errors.ExportError('a sum of a loop\'s lists of gradients '
                                 'cannot be exported')
    b.op('Add', ins, outs)


def _accumulate(a, b):
    """The sum of two gradients, either of which may be ``None`` (a rule
    found no gradient, as Chainer's backward returns ``None``)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, list):  # of a loop's list: item by item
        return [_accumulate(x, y) for x, y in zip(a, b)]
    return utils.force_array(a + b)


def sum_into():
    """A backward loop's running sum of an invariant's gradients."""
    return Kernel(_sum_into, structural=ACCUMULATE)


def _sum_into(total, grad):
    """The first gradient is copied, so that the later ones can be added
    in place (the running sum is the loop's own carried value)."""
    if grad is None:
        return total
    if total is None:
        return utils.force_array(grad.copy())
    total += grad
    return total


def scatter_add(scatter):
    """A backward loop's running sum of an indexed input's gradient, the
    step's ``scatter(total, x, i, gy)`` added in place."""
    return Kernel(scatter, structural=SCATTER_ADD)


def reverse():
    """``k = n - 1 - j``: a backward loop's counter ``j`` counts up, the
    forward iteration ``k`` it undoes counts down."""
    return Kernel(_reverse, structural=REVERSE)


def _reverse(j, n):
    return n - 1 - j


def at():
    """Item ``k`` of a list of per-iteration values."""
    return Kernel(_at, structural=AT)


def _at(items, k):
    return items[k]


def at_or_none():
    """Item ``k`` of a list of per-iteration gradients, which may be
    ``None`` (no gradient reached any of them)."""
    return Kernel(_at_or_none, structural=AT)


def _at_or_none(items, k):
    return None if items is None else items[k]


def collect():
    """A loop's list of an invariant's gradient factors ``(a, b)``, one
    pair per iteration that has them (see :func:`outer_sum`)."""
    return Kernel(_collect, structural=COLLECT)


def _collect(items, factors):
    if factors is None:
        return items
    if items is None:
        items = []
    items.append(factors)
    return items


def outer_sum(dtype):
    """The kernel summing a weight's gradient over a loop's iterations in
    one product, ``sum_k a_k^T b_k`` as ``[a_0; a_1; ...]^T [b_0; b_1;
    ...]``, from :func:`collect`'s list (collected backward, stacked in
    forward order). One product over all the rows instead of one per
    iteration and a running sum: 2x faster for an LSTM's recurrent
    weight, equal within rounding (the sums run in another order, as for
    the input projection that ``passes/hoist.py`` takes out of the
    loop)."""
    scratch = Scratch()

    def run(items):
        if items is None:
            return None
        if len(items) == 1:
            a, b = items[0]
            return a.T.dot(b).astype(dtype, copy=False)
        with scratch.held() as buffers:
            a = _stack([a for a, _ in reversed(items)], buffers, 0)
            b = _stack([b for _, b in reversed(items)], buffers, 1)
            return a.T.dot(b).astype(dtype, copy=False)
    return Kernel(run, structural=OUTER_SUM)


def _stack(arrays, buffers, k):
    """``concatenate(arrays)`` into scratch buffer ``k`` (an LSTM's
    training step stacks 0.8 MB of gradient factors; taking fresh pages
    for them each step had cost 0.7 ms of faults)."""
    if any(type(a) is not numpy.ndarray for a in arrays):
        xp = chainer.backend.get_array_module(arrays[0])
        return xp.concatenate(arrays)  # CuPy's memory pool keeps it
    shape = (sum(len(a) for a in arrays),) + arrays[0].shape[1:]
    return numpy.concatenate(arrays, out=buffers.array(
        k, shape, numpy.result_type(*arrays)))


def fortran_copy():
    """An F-ordered copy of a weight that a backward loop's gradient
    rules read faster in Fortran order, made once before the loop."""
    return Kernel(_fortran_copy, structural=FORTRAN_COPY)


def _fortran_copy(array):
    return chainer.backend.get_array_module(array).asfortranarray(array)
