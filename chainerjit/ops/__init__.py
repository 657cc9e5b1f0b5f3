"""The op table: how each Chainer FunctionNode class becomes a VM kernel.

Each module here mirrors a family of ``chainer.functions`` and registers
*lowerings* with :func:`lowering`::

    @lowering(chainer.functions.activation.relu.ReLU)
    def relu(node, ctx):
        xp = ctx.xp
        return Kernel(lambda x: xp.maximum(x, x.dtype.type(0)))

A lowering receives the FunctionNode instance exactly as recorded (so it
can read attributes such as ``node.axis``) and a :class:`LowerContext`
with the array module and the recorded input and output types. It returns
a :class:`Kernel`, a plain callable on arrays that computes what the
node's ``forward`` computes, or ``None`` when this instance uses a variant
the lowering does not cover. Nodes without a lowering run on the *generic
path* (:func:`generic_kernel`): a fresh copy of the recorded node runs its
own ``forward`` on every call.
"""

import collections
import contextlib
import copy
import fractions
import functools
import weakref

import chainer
import numpy

from chainerjit.ir.fingerprints import node_label  # NOQA: ops.node_label
from chainerjit.ir.fingerprints import state_holder


class Kernel(collections.namedtuple('Kernel',
                                    'fn attrs multi grad onnx fresh inplace '
                                    'into structural lengths')):
    """A kernel: ``fn(*arrays)`` returns one array, or a tuple of arrays
    when ``multi`` is true. ``attrs`` is a dict shown in printed IR;
    ``grad`` is the op's :class:`GradRule` (``None``: not differentiable
    by chainerjit, so a gradient through it runs eagerly); ``onnx`` is its
    ONNX converter ``convert(builder, ins, outs)`` (see
    ``chainerjit.onnx_export``), or ``None``.

    For memory reuse (see ``codegen``): ``fresh`` says ``fn`` always
    returns newly allocated arrays (no views, never an input); ``inplace``
    maps an input position ``k`` to a function computing the same values,
    bit for bit, into ``arrays[k]`` and returning it, for when that input
    has the output's shape and dtype and is not read again.

    For the arena (see ``chainerjit.backend.arena``): ``into(out, *arrays)``
    computes the same values, bit for bit, into ``out`` (a C-contiguous
    array of the recorded output's shape and dtype) and returns it; only
    for kernels that are ``fresh`` and not ``multi``.

    ``structural`` names the kind of a kernel the compiler inserts itself
    (a loop, its exit, a guard, ...: see :mod:`chainerjit.ops.structural`),
    ``None`` for the lowering of a Chainer function; stages ask it
    instead of testing op names.

    ``lengths`` says how the kernel and its gradient take inputs whose
    first axis differs from the recorded one (``runtime.ragged``: the items
    of a list of sequences of any lengths): ``lengths(rows)`` gets, per
    input, the :class:`Rows` of its first axis (``None`` for a fixed one)
    and returns a :class:`Follow` (the outputs' rows, and a kernel to run
    instead at any lengths), or ``None`` where the kernel cannot take these
    inputs at other lengths. ``None`` (the default): the kernel may depend
    on the recorded shapes of all its inputs."""

    def __new__(cls, fn, attrs=None, multi=False, grad=None, onnx=None,
                fresh=False, inplace=None, into=None, structural=None,
                lengths=None):
        return super(Kernel, cls).__new__(
            cls, fn, tuple(sorted((attrs or {}).items())), multi, grad,
            onnx, fresh, inplace, into, structural, lengths)


class Rows(collections.namedtuple('Rows',
                                  'parts axis widest also inner lows',
                                  defaults=(0, False, (), False, ()))):
    """The number of rows of a value that varies by call: the rows of list
    items and fixed numbers of rows, joined in order (``Kernel.lengths``).
    ``parts``: ``(leaf index, recorded length)`` for an item's rows,
    ``(None, n)`` for ``n`` fixed rows; a part of an item's rows with a
    negative recorded length is minus them (``x[1:]`` of each item: the
    words less the number of items). ``axis``: the value's axis they
    are, the first but for a time-major batch (``(T, B, I)``); only the
    rules marked :func:`takes_axes` get rows on another axis. ``widest``:
    the rows are not the parts joined but as many as the longest item
    has (a batch of items padded to one length); only the rules marked
    :func:`takes_widest` get those. ``also``: further axes, after
    ``axis``, with the same rows (attention's scores over the steps,
    ``(B, T, T)``); only the rules marked :func:`takes_square` get
    those. ``inner``: the rows of an axis merged into the first after
    others (``(B * T, H)`` of a batch-first ``(B, T, H)``), so that a
    reshape splitting the first axis again finds them second, whatever
    the sizes recorded. ``lows``: ``(leaf, the fewest rows it has)``
    where that is more than one (the forward's ``if T > 10:`` guards
    the program), for :meth:`least`."""

    __slots__ = ()

    def __eq__(self, other):
        """The same rows on the same axes (``inner`` aside: what is known
        of how they were merged, not what they are)."""
        return isinstance(other, Rows) and self[:4] == other[:4]

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self[:4])

    @classmethod
    def of_item(cls, leaf, recorded):
        return cls(((leaf, recorded),))

    def __add__(self, other):
        """These rows followed by other :class:`Rows` or a fixed number."""
        if not isinstance(other, Rows):
            other = Rows(((None, other),) if other else ())
        return Rows(self.parts + other.parts)

    def __radd__(self, other):
        """A fixed number of rows followed by these."""
        return Rows(((None, other),) if other else ()) + self

    def count(self):
        """``({leaf: times}, fixed rows)``: what the number of rows is at
        any lengths, whatever the order of the parts."""
        items = collections.Counter()
        for leaf, n in self.parts:
            if leaf is not None:
                items[leaf] += -1 if n < 0 else 1
        return (tuple(sorted((leaf, times) for leaf, times in items.items()
                             if times)),
                sum(n for leaf, n in self.parts if leaf is None))

    def cancelled(self):
        """These rows, one item's rows and fixed ones that cancel out
        (``x[:-1]`` padded by a row back) as that item's rows alone; else
        as they are."""
        items, fixed = self.count()
        if fixed or len(items) != 1 or items[0][1] != 1 or self.widest:
            return self
        leaf = items[0][0]
        recorded = next((n for part, n in self.parts
                         if part == leaf and n > 0), None)
        return self if recorded is None else \
            self._replace(parts=((leaf, recorded),))

    def negated(self):
        """Minus these rows (of items recorded with some rows each)."""
        return self._replace(parts=tuple((leaf, -n)
                                         for leaf, n in self.parts))

    def scaled(self, numerator, denominator):
        """These rows times ``numerator / denominator`` (a reshape that
        merges the rows' axis with the next or splits it), or ``None``
        where that is not a whole number of each item's rows. Fixed rows
        may be fewer than none (the steps less one, ``xs[:, :-1]``, merged
        with the batch: ``B`` times the steps, less ``B``). Rows as many
        as the longest item's (:attr:`widest`) so scaled stay so: ``B``
        times the longest, of a padded block merged with its batch."""
        if self.also or any(
                leaf is not None and n < 0 for leaf, n in self.parts):
            return None
        factor = fractions.Fraction(numerator, denominator)
        items, fixed = self.count()
        recorded = dict((leaf, n) for leaf, n in self.parts)
        parts = []
        for leaf, times in items + ((None, fixed),):
            if not times:
                continue
            scaled = times * factor
            if scaled.denominator != 1 or scaled <= 0 and leaf is not None:
                return None
            parts += [(leaf, recorded[leaf])] * int(scaled) \
                if leaf is not None else [(None, int(scaled))]
        return Rows(tuple(parts), self.axis, self.widest)

    @property
    def axes(self):
        """Every axis that has these rows, in order."""
        return (self.axis,) + self.also

    def on_axes(self, axes):
        """These rows on ``axes`` (sorted, one at least)."""
        axes = sorted(axes)
        return self._replace(axis=axes[0], also=tuple(axes[1:]))

    def least(self):
        """The fewest rows these may be at any lengths: each length is one
        row at least (a loop runs once, an item or a batch has one row)
        or its :attr:`lows`, or ``None`` where a part is minus some
        rows."""
        if any(n < 0 for _, n in self.parts):
            return None
        lows = dict(self.lows)
        return sum(lows.get(leaf, 1) if leaf is not None else n
                   for leaf, n in self.parts)

    @property
    def first_leaf(self):
        return next(leaf for leaf, _ in self.parts if leaf is not None)

    def __str__(self):
        """``'L2'`` for the length of item (leaf) 2, ``'L0+...+L7+8'``
        for a sum, as printed IR shows it."""
        items, fixed = self.count()
        terms = [times_label(n, 'L%d' % leaf) for leaf, n in items]
        if len(terms) > 3:
            terms = [terms[0], '...', terms[-1]]
        if self.widest:
            return 'max(%s)' % ','.join(terms)
        return sum_label(terms + ([str(fixed)] if fixed else []))


def times_label(n, symbol):
    """``'B'``, ``'-B'``, ``'2*B'``: ``n`` times ``symbol``, printed."""
    return {1: symbol, -1: '-' + symbol}.get(n, '%d*%s' % (n, symbol))


def sum_label(terms):
    """``'W+B'``, ``'W-B'``: the printed ``terms`` added, those
    subtracted last."""
    return '+'.join(sorted(terms, key=lambda t: t.startswith('-'))
                    ).replace('+-', '-')


class Follow(collections.namedtuple('Follow', 'outputs kernel reads',
                                    defaults=(None, ()))):
    """What a ``Kernel.lengths`` rule returns: the :class:`Rows` of each
    output (``None`` for a fixed number); the kernel to run instead at any
    lengths (``None``: the same); the list items (leaf indexes) whose
    arrays that kernel takes after the node's inputs, for their lengths."""

    __slots__ = ()


def take_following(node, following, inputs, axes):
    """Gives ``node`` the kernel of ``following`` (its :class:`Follow`),
    with the arguments it reads the rows' number of (``Follow.reads``,
    leaves of ``inputs``) as further inputs, each read at its axis of
    ``axes`` (``{leaf: axis}``, the first by default)."""
    node.kernel = _reading_at_axes(following.kernel, len(node.inputs), [
        (axes.get(leaf, 0), len(inputs[leaf].shape))
        for leaf in following.reads])
    node.inputs = node.inputs + [inputs[leaf] for leaf in following.reads]


def _reading_at_axes(kernel, first, axes):
    """``kernel``, whose inputs from ``first`` on are arguments it reads
    the rows' number of as their first axis's size, reading each at its
    axis of ``axes`` (``(axis, ndim)`` each) instead (the batch of a
    batch-first argument made time-major): that axis swapped with the
    first."""
    perms = dict((first + k, _swapped_first(axis, ndim))
                 for k, (axis, ndim) in enumerate(axes) if axis)
    if not perms:
        return kernel

    def swapped(xs):
        return [x.transpose(perms[k]) if k in perms and x is not None
                else x for k, x in enumerate(xs)]

    def fn(*xs):
        return kernel.fn(*swapped(xs))

    def onnx(b, ins, outs):
        return kernel.onnx(b, [b.op('Transpose', [name], perm=perms[k])[0]
                               if k in perms else name
                               for k, name in enumerate(ins)], outs)

    grad = kernel.grad and kernel.grad._replace(
        fn=lambda xs, ys, gys, wanted: kernel.grad.fn(
            swapped(xs), ys, gys, wanted), onnx=None)
    return kernel._replace(fn=fn, grad=grad, onnx=kernel.onnx and onnx)


def _swapped_first(axis, ndim):
    """The permutation of ``ndim`` axes swapping ``axis`` and the
    first."""
    perm = list(range(ndim))
    perm[0], perm[axis] = axis, 0
    return perm


def rows_follow_first(rows):
    """A :attr:`Kernel.lengths` rule for a kernel that maps the rows of
    its first input to the rows of its one output, reading their number
    from the array (a lookup, a linear layer): only the first input may
    have a varying length."""
    if any(r is not None for r in rows[1:]):
        return None
    return Follow((rows[0],))


def vm_faster_on_cpu(convert):
    """An ONNX converter doing what ``convert`` does, marked as one whose
    form onnxruntime runs slower on the CPU than the VM runs the node's
    own kernel (a max pooling's gradient: onnxruntime has no fast
    scatter of window maxima). ``backend='auto'`` then also measures the
    program with such nodes on the VM between sessions
    (``runtime.backends``)."""
    def marked(*args):
        return convert(*args)
    marked.vm_faster_on_cpu = True
    return marked


def is_vm_faster_on_cpu(convert):
    """Was ``convert`` marked by :func:`vm_faster_on_cpu`?"""
    return getattr(convert, 'vm_faster_on_cpu', False)


#: The dtypes that the C loops (``chainerjit.ops._loops_*``) take.
LOOP_DTYPES = (numpy.dtype(numpy.float32), numpy.dtype(numpy.float64))


class GradRule(collections.namedtuple('GradRule',
                                      'fn inputs outputs onnx')):
    """The gradient of an op, as array kernels (no Variables).

    ``fn(xs, ys, gys, wanted)`` returns a tuple with one gradient per
    forward input: an array of that input's shape and dtype, or ``None``
    (not ``wanted``, or not differentiable, such as integer inputs).

    * ``xs``: the forward inputs; only those whose indexes are listed in
      ``inputs`` are kept for the backward pass, the others are ``None``.
    * ``ys``: the forward outputs, likewise kept only if in ``outputs``.
    * ``gys``: one gradient per forward output; ``None`` for an output no
      gradient flows to (possible only when the op has several outputs).
    * ``wanted``: one bool per forward input: is its gradient needed?

    Mirror the node's own ``backward`` (retain what it retains) so that
    gradients equal eager Chainer's.

    A rule whose gradient for some input is a matrix product ``a^T b`` (a
    linear layer's weight) may list those input positions in
    ``fn.factors``: asked with ``wanted[k] is FACTORS``, it returns the
    pair ``(a, b)`` there instead. A loop then sums its weight's
    gradient over all iterations in one product (``autodiff``). Inputs
    listed in ``fn.fortran_inputs`` are read faster in Fortran order (a
    weight in the products of small batches): a loop's backward that
    reads such an invariant only through such rules gets an F-ordered
    copy of it, made once before the loop.

    ``onnx(b, xs, ys, gys, wanted)``, where given, writes the gradient as
    ONNX nodes with the builder ``b`` (``backend.onnx_graph.Builder``):
    ``xs``, ``ys`` and ``gys`` are value names, ``None`` where not kept
    or absent; it returns one name (or ``None``) per forward input, or
    raises ``errors.ExportError``. A backward then runs in onnxruntime
    (``jit(backend='onnxruntime')``).
    """

    def __new__(cls, fn, inputs=(), outputs=(), onnx=None):
        return super(GradRule, cls).__new__(cls, fn, tuple(inputs),
                                            tuple(outputs), onnx)


class _Factors(object):
    """``GradRule``'s request for a gradient's factors (see there)."""

    def __repr__(self):
        return 'FACTORS'


FACTORS = _Factors()


class ForwardMemo(object):
    """What a kernel's last forward computed from its input ``x`` (a
    batch normalization's statistics), for the gradient of that same
    array object to take instead of computing it again, as eager's node
    keeps it. A gradient for another ``x`` (an earlier call's, a loop's
    earlier step) finds nothing and computes it.
    ``x`` is held by a weak reference; the value and the reference are
    set in one assignment, so a thread sees one forward's pair."""

    def __init__(self):
        self._kept = (None, None)

    def keep(self, x, value):
        self._kept = (weakref.ref(x), value)

    def take(self, x):
        """The value kept for ``x``, or ``None``."""
        ref, value = self._kept
        if ref is None or ref() is not x:
            return None
        return value


class LowerContext(collections.namedtuple(
        'LowerContext', 'xp in_shapes in_dtypes out_shapes out_dtypes '
        'scratch', defaults=(None,))):
    """What a lowering may know besides the node: the array module
    (``numpy`` or ``cupy``), the recorded input and output types, and the
    recorded graph's ``ops.scratch.Scratch``, which its kernels share for their
    temporaries (they run one at a time), or ``None``."""


_LOWERINGS = {}


def lowering(*classes):
    """Registers the decorated function as the lowering of ``classes``."""
    def register(fn):
        for cls in classes:
            _LOWERINGS[cls] = fn
        return fn
    return register


# FunctionNode classes (by name) whose forward draws random numbers or
# updates state outside its inputs: a program holding one is not re-run to
# self-check it against eager.
_IMPURE_NAMES = frozenset([
    'Dropout', 'Gaussian', 'SimplifiedDropconnect', 'Zoneout', 'RReLU',
    'BatchNormalization', 'GumbelSoftmax', 'NStepRNNDropout',
    'PackedNStepRNNDropout'])


def follow(node, rows):
    """What ``node``'s ``Kernel.lengths`` rule gives for inputs with
    ``rows`` (an :class:`Rows` or ``None`` each): a :class:`Follow`, or
    ``None`` where it has no rule or the rule refuses; rows on another
    axis than the first reach only the rules marked :func:`takes_axes`."""
    return follow_kernel(node.kernel, rows)


def follow_kernel(kernel, rows):
    """:func:`follow` of a kernel (``None`` too)."""
    rule = kernel.lengths if kernel is not None else None
    if rule is None or not getattr(rule, 'takes_axes', False) and \
            any(r is not None and r.axis for r in rows):
        return None
    if not getattr(rule, 'takes_widest', False) and \
            any(r is not None and r.widest for r in rows):
        return None
    if not getattr(rule, 'takes_square', False) and \
            any(r is not None and r.also for r in rows):
        return None
    return rule(rows)


def takes_axes(rule):
    """Marks a :attr:`Kernel.lengths` rule that reads ``Rows.axis``: the
    others get rows on the first axis only."""
    rule.takes_axes = True
    return rule


def takes_square(rule):
    """Marks a :attr:`Kernel.lengths` rule (one that :func:`takes_axes`)
    that reads ``Rows.also``: rows on several axes of a value at once
    (attention's scores over the steps)."""
    rule.takes_axes = rule.takes_square = True
    return rule


def takes_widest(rule):
    """Marks a :attr:`Kernel.lengths` rule (one that :func:`takes_axes`)
    whose kernels neither join nor split the rows, so that rows as many
    as the longest item's (``Rows.widest``) may reach it."""
    rule.takes_axes = rule.takes_widest = True
    return rule


@takes_widest
def rows_padded(rows):
    """The :attr:`Kernel.lengths` rule of a batch of list items padded to
    the longest (``concat_examples(xs, padding=p)``): its second axis has
    as many rows as the longest item."""
    if any(r is None or r.axis or r.widest or len(r.parts) != 1 or
           r.parts[0][0] is None for r in rows):
        return None
    return Follow((Rows(tuple(r.parts[0] for r in rows), 1, True),))


@takes_square
@takes_widest
def rows_in_place(rows):
    """:func:`rows_follow_first` for a kernel whose output keeps the axes
    of its first input where they are (an element-wise activation; a
    lookup ``W[ids]`` adds its own after them): the rows may be on any
    axis."""
    return rows_follow_first(rows)


@takes_widest
def rows_row_wise(rows):
    """:func:`rows_follow_first` for a kernel that maps each row of its
    first input alone (a linear layer), on the first axis only, also
    where they are as many as the longest item's times a batch
    (``Rows.widest``: a padded block merged with its batch)."""
    if any(r is not None and r.axis for r in rows):
        return None
    return rows_follow_first(rows)


#: What :func:`index_rows` gives where the index takes one position of a
#: padded block's rows with an int (``enc[:, 0]``), or positions fixed at
#: any lengths (``y[-1]``): the result has no rows.
TAKEN = 'taken'


def _basic(s):
    """Is ``s`` an item of a basic index (a slice, an int, ``None`` or
    ``...``), which leaves the axes it does not take in their order?"""
    return s is None or s is Ellipsis or isinstance(s, slice) or \
        isinstance(s, (int, numpy.integer)) and not isinstance(
            s, (bool, numpy.bool_))


def _rows_stay(index):
    """Does ``index`` leave the axes it does not take in their order? A
    basic index does; one array among slices too (``x[:, [1, 2]]``), but
    with ints or other arrays, NumPy puts the axes of the advanced items
    first where they are apart (``x[:, 0, :, [1, 2]]``)."""
    advanced = [s for s in index if not _basic(s)]
    if not advanced:
        return True
    return len(advanced) == 1 and numpy.ndim(advanced[0]) == 1 and \
        numpy.asarray(advanced[0]).dtype.kind in 'iu' and not any(
            isinstance(s, (int, numpy.integer)) for s in index)


def index_rows(index, rows, constant=False):
    """The :class:`Rows` of ``x[index]`` for rows of ``x`` (on any axis),
    where a basic index takes every row, in order or reversed (``x[:,
    3]``, ``xs[t]`` of a time-major ``xs``, ``xs[::-1]``), or all but a
    few first or last ones (``xs[1:]``); :data:`TAKEN` where it takes one
    of rows as many as the longest item's (``Rows.widest``: a padded
    block, whose positions are those eager code pads) with an int, or,
    for a ``constant`` index (not a loop's counter the recording saw at
    one value), the same positions at any lengths (``y[-1]``,
    ``y[:1]``); else ``None``."""
    index = index if isinstance(index, tuple) else (index,)
    if not _rows_stay(index):
        return None
    axis = out_axis = 0  # of x, and of the result, at each item
    for s in index:
        if s is None:  # a new axis of the result
            out_axis += 1
            continue
        if not isinstance(s, (slice, int, numpy.integer)):
            return None
        if axis == rows.axis:
            break
        axis += 1
        out_axis += isinstance(s, slice)
    else:
        return rows._replace(axis=out_axis + rows.axis - axis)
    if s == slice(None) or s == slice(None, None, -1):
        return rows._replace(axis=out_axis)
    if isinstance(s, (int, numpy.integer)) and rows.widest and \
            not rows.also or constant and _fixed_at_any_length(s, rows):
        return TAKEN
    cut = rows_cut(s)
    if cut is None or rows.widest:
        return None
    return (rows + -cut)._replace(axis=out_axis)


def _fixed_at_any_length(s, rows):
    """Does ``x[s]``, on the axis of ``rows`` (an item's own, not a
    padded block's), take the same positions at any lengths: an int or a
    slice within the fewest rows there may be, counted from the start or
    from the end (``y[-1]``, ``y[0]``, ``y[-1:]`` of each sentence)?"""
    least = None if rows.widest or rows.also else rows.least()
    need = rows_needed(s)
    return bool(least) and need is not None and need <= least


def rows_needed(s):
    """The fewest rows at which the index entry ``s`` takes the same
    positions at any number of rows, counted from the start or from the
    end (``y[0]``: 1, ``y[-2]``: 2, ``y[:3]``: 3, ``y[-2:]``: 2); ``None``
    for an entry whose positions depend on the number (``y[1:]``)."""
    if isinstance(s, (int, numpy.integer)):
        return s + 1 if s >= 0 else -s
    if not isinstance(s, slice) or s.step not in (None, 1):
        return None
    start = 0 if s.start is None else s.start
    if type(start) is not int or s.stop is not None and \
            type(s.stop) is not int:
        return None
    if start >= 0:  # x[a:b]
        return s.stop if s.stop is not None and start < s.stop else None
    stop = 0 if s.stop is None else s.stop  # x[-k:], x[-k:-m]
    return -start if start < stop <= 0 and (stop < 0 or s.stop is None) \
        else None


def rows_cut(s):
    """How many rows ``x[s]`` cuts off, for a slice ``x[k:]``, ``x[:-m]``
    or ``x[k:-m]`` (ints ``k, m >= 0``): ``k + m``; else ``None``."""
    if not isinstance(s, slice) or s.step not in (None, 1):
        return None
    start = 0 if s.start is None else s.start
    stop = 0 if s.stop is None else s.stop
    if type(start) is not int or type(stop) is not int or start < 0 or \
            stop > 0 or stop == 0 and s.stop is not None:  # (x[:0])
        return None
    return start - stop


def spelled_out(index, ndim):
    """``index`` of an array of ``ndim`` axes with its ``...`` spelled as
    the whole axes it stands for (``m[..., None]`` as ``m[:, :, None]``
    of a matrix)."""
    index = index if isinstance(index, tuple) else (index,)
    at = next((i for i, s in enumerate(index) if s is Ellipsis), None)
    if at is None:
        return index
    taken = sum(1 for s in index if s is not None and s is not Ellipsis)
    return index[:at] + (slice(None),) * (ndim - taken) + index[at + 1:]


def rows_indexed(index, constant=False, ndim=None):
    """The :attr:`Kernel.lengths` rule of ``x[index]`` (:func:`index_rows`,
    ``constant`` as there; further inputs, a loop's counter, fixed), or
    ``None`` where no rows of ``x`` can follow. ``ndim``: ``x``'s number
    of axes, where ``index`` may hold ``...``."""
    if ndim is not None:
        index = spelled_out(index, ndim)

    def lengths(rows):
        if rows[0] is None and len(rows) == 2 and _by_ids(index):
            return Follow(rows[1:])  # (numpy.eye(n)[t]: the ids' rows)
        if any(r is not None for r in rows[1:]):
            return None
        found = rows_of_index(index, rows[0], constant)
        if found is TAKEN:
            return Follow((None,))
        return None if found is None else Follow((found,))
    return takes_square(takes_widest(lengths))


def _by_ids(index):
    """Is ``index`` one array of ints, the rest of the axes whole (``x[t]``:
    a row of ``x`` for each of ``t``'s ids, in ``t``'s shape)?"""
    index = index if type(index) is tuple else (index,)
    return bool(index) and isinstance(index[0], numpy.ndarray) and \
        index[0].dtype.kind in 'iu' and \
        all(type(s) is slice and s == slice(None) for s in index[1:])


def rows_of_index(index, rows, constant=False):
    """:func:`index_rows`, of rows on one axis or several
    (:func:`_square_indexed`)."""
    return _square_indexed(index, rows) if rows.also else \
        index_rows(index, rows, constant)


def _square_indexed(index, rows):
    """:func:`index_rows` of rows on several axes (a mask over the steps
    made 3-d, ``m[None]``): each axis taken whole, or ``None``."""
    axes = []
    for axis in rows.axes:
        found = index_rows(index, rows.on_axes([axis]))
        if found is None or found is TAKEN or found.parts != rows.parts:
            return None
        axes.append(found.axis)
    return rows.on_axes(axes)


def same_rows(rows):
    """The rows every input has, or ``None`` where one has other rows (or
    fixed ones). Rows known to be merged in after others
    (``Rows.inner``) are those of an input that is not known so: for
    element-wise arithmetic to pair them, both are laid out alike."""
    if rows[0] is None or any(r != rows[0] for r in rows):
        return None
    return rows[0]._replace(inner=any(r.inner for r in rows))


def rows_joined(op, axis, count=None):
    """The :attr:`Kernel.lengths` rule of a stack or a concatenation at
    ``axis`` (not negative) of arrays (and lists of arrays) that all have
    the same rows: a stack puts its new axis among theirs, a join side by
    side keeps them; a join of the rows themselves has ``count`` times
    their rows (the arrays joined when recorded: a loop's steps, each a
    batch), or is refused where that is not given."""
    def lengths(rows):
        found = same_rows(rows)
        if found is None or axis < 0:
            return None
        if op == 'Concat' and axis == found.axis:
            joined = None if count is None else found.scaled(count, 1)
            return None if joined is None else Follow((joined,))
        if op == 'Stack' and axis <= found.axis:
            found = found._replace(axis=found.axis + 1)
        return Follow((found,))
    return takes_axes(lengths)


def rows_reduced(rows):
    """A :attr:`Kernel.lengths` rule for a kernel whose inputs all have the
    same rows and whose one output is fixed (a loss's mean, an accuracy),
    reading their number from its arrays, in its forward and gradient."""
    return None if same_rows(rows) is None else Follow((None,))


@takes_axes
def rows_averaged(rows):
    """:func:`rows_reduced` of a kernel averaging over all its elements (a
    mean squared error), whatever axis the rows are on (a batch's steps,
    ``(B, T, D)``)."""
    return rows_reduced(rows)


def rows_follow(lower):
    """Decorates a lowering whose kernels keep the shape of their one
    input, and read the rows' number from the arrays in their forward and
    gradient (a softmax along any axis): their :attr:`Kernel.lengths`
    rule is :func:`rows_in_place`, rows on any axis (a time-major batch's
    scores normalized over the steps, ``F.softmax(scores, axis=0)``)."""
    return _lowered_with_rule(lower, rows_in_place)


def rows_elementwise(lower):
    """Decorates a lowering of an element-wise kernel of one input (an
    activation, a math function, an op with a constant), whose output
    keeps its input's shape and whose gradient reads none: its
    :attr:`Kernel.lengths` rule is :func:`rows_in_place`, rows on any
    axis."""
    return _lowered_with_rule(lower, rows_in_place)


def _lowered_with_rule(lower, rule):
    """``lower`` whose kernels get the :attr:`Kernel.lengths` ``rule``."""
    @functools.wraps(lower)
    def lowered(node, ctx):
        kernel = lower(node, ctx)
        return None if kernel is None else kernel._replace(lengths=rule)
    return lowered


def rows_broadcast(in_shapes, out_shape, kernel=None):
    """A :attr:`Kernel.lengths` rule for an element-wise kernel whose
    inputs broadcast together: the inputs whose rows vary (on any axes)
    have all the same rows, which the output has on every axis one of
    them has them (scores over the steps, ``(B, T, T)``, plus a mask
    ``(B, 1, T)``; steps ``(B, T, D)`` plus positions ``(T, D)``); each
    input broadcasts along the rows it lacks (fewer axes, or one row).
    ``kernel``: the kernel to run at any lengths (one whose gradient
    reads the rows' number from its arrays), ``None`` where the node's
    does already. It neither joins nor splits the rows: those of the
    longest of a list's items may reach it."""
    @takes_square
    @takes_widest
    def lengths(rows):
        varying = [r for r in rows if r is not None]
        if any(r.on_axes([0]) != varying[0].on_axes([0]) for r in varying):
            return None
        own = [set() if r is None else set(
            a + len(out_shape) - len(shape) for a in r.axes)
            for r, shape in zip(rows, in_shapes)]
        axes = set().union(*own)
        for taken, shape in zip(own, in_shapes):
            for axis in axes - taken:
                at = axis - (len(out_shape) - len(shape))
                if at >= 0 and shape[at] != 1:
                    return None
        return Follow((varying[0].on_axes(axes),), kernel)
    return lengths


def rows_through_reduction(rows, axes, keepdims):
    """The rows of a reduction's output over ``axes`` of an input with
    ``rows``: on their axes not reduced, as the output numbers them, or
    ``None`` where all are (the output's shape is then fixed)."""
    kept = [a for a in rows.axes if a not in axes]
    if not kept:
        return None
    return rows.on_axes([a if keepdims else a - sum(1 for b in axes if b < a)
                         for a in kept])


def rows_repeated(repeats, axis):
    """The ``Kernel.lengths`` rule of ``repeat(x, repeats, axis)`` (an int
    count, ``axis`` not negative) whose kernel takes any shape: rows on
    that axis ``repeats`` times over, on another axis as they are."""
    @takes_axes
    def lengths(rows):
        found = rows[0]
        if found is None or any(r is not None for r in rows[1:]) or \
                found.also or found.widest:
            return None
        if found.axis != axis:
            return Follow((found,))
        repeated = found.scaled(repeats, 1)
        return None if repeated is None else Follow((repeated,))
    return lengths


def rows_reduced_over(axes, keepdims):
    """The ``Kernel.lengths`` rule of a reduction over ``axes`` whose
    kernel and gradient take any shape: the rows of its input through
    it."""
    @takes_square
    @takes_widest
    def lengths(rows):
        found = rows[0]
        if found is None or any(r is not None for r in rows[1:]):
            return None
        return Follow((rows_through_reduction(found, axes, keepdims),))
    return lengths


def is_impure(label):
    """True for a node label (class name) that is random or stateful."""
    return label in _IMPURE_NAMES


# Node labels whose only side effect is drawing from NumPy's global
# generator (``numpy.random.rand``): running one again after restoring the
# generator's state gives the same result.
_GLOBAL_DRAWS = frozenset(['Dropout', 'Gaussian', 'NStepRNNDropout',
                           'PackedNStepRNNDropout'])


def draws_only(label):
    """True for a node label whose only side effect is a draw from
    NumPy's global random generator (a Chainer function's, or one the
    forward makes: ``numpy.random.standard_normal``)."""
    return label in _GLOBAL_DRAWS or label.startswith('numpy.random.')


def updates_inputs_only(label):
    """True for a node label whose only side effect is updating model
    arrays it takes as inputs (batch normalization's running averages):
    saving and restoring them undoes a run."""
    return label == 'BatchNormalization'


_GENERIC_LENGTHS = {}


def generic_lengths(*classes):
    """Registers the decorated ``rule(template)``, which gives the
    ``Kernel.lengths`` rule of the generic kernel of a node of ``classes``
    (or ``None``)."""
    def register(fn):
        for cls in classes:
            _GENERIC_LENGTHS[cls] = fn
        return fn
    return register


def communicates(node):
    """True for a node of ChainerMN's functions (``allgather``, ``bcast``,
    ``send``, ...) or of its batch normalization: its forward or backward
    talks to the other processes, so every process must run it exactly
    as often as eager code would, forward and backward."""
    function = getattr(node, '_function', node)  # an old-style Function
    return type(function).__module__.startswith('chainermn.') or \
        type(getattr(node, '_impl_selector', None)).__module__.startswith(
            'chainermn.')


def lowered_classes():
    """The FunctionNode classes that have a lowering."""
    _load_op_modules()
    return frozenset(_LOWERINGS) | frozenset(_STATE_LOWERINGS)


_STATE_LOWERINGS = {}


def state_lowering(*classes, **options):
    """Registers the decorated function as the lowering of ``classes`` for
    a node holding model arrays as attributes (batch normalization's
    running averages): ``fn(node, ctx, state)`` gets the ``(name, index)``
    of those attributes, and its kernel takes their arrays after the
    node's inputs (and may update them in place, as the node does). With
    ``computed=True`` the attributes may also be arrays the forward
    computed (``F.where``'s condition), which the kernel only reads."""
    def register(fn):
        for cls in classes:
            _STATE_LOWERINGS[cls] = fn
            if options.get('computed'):
                _COMPUTED_ATTRIBUTES.add(cls)
        return fn
    return register


def takes_computed_attributes(node):
    """Whether the lowering of ``node`` takes array attributes the forward
    computed as inputs (:func:`state_lowering` with ``computed``)."""
    _load_op_modules()
    return type(node) in _COMPUTED_ATTRIBUTES


_COMPUTED_ATTRIBUTES = set()


def lower(node, ctx, state=None):
    """Returns the kernel of a recorded node, or ``None`` if it has no
    lowering (the caller then uses :func:`generic_kernel`). ``state``:
    the ``(name, index)`` of attributes holding model arrays, for a
    :func:`state_lowering`. An old-style ``chainer.Function`` is recorded
    as the ``FunctionAdapter`` around it; its lowering gets the Function."""
    _load_op_modules()
    if isinstance(node, chainer.function.FunctionAdapter):
        node = node._function
    cls = type(node)
    if state or cls not in _LOWERINGS:
        fn = _STATE_LOWERINGS.get(cls)
        kernel = None if fn is None else fn(node, ctx, tuple(state or ()))
    else:
        kernel = _LOWERINGS[cls](node, ctx)
    if kernel is None:
        return None
    if kernel.lengths is not None:
        kernel = kernel._replace(lengths=_variants_forced(kernel.lengths,
                                                          ctx))
    return _forced(kernel, ctx)


def _forced(kernel, ctx):
    """The kernel, its 0-d results and gradients arrays as Chainer's."""
    if () in ctx.out_shapes:
        kernel = _forcing_arrays(kernel)
    if kernel.grad is not None and () in ctx.in_shapes:
        kernel = kernel._replace(grad=_grad_forcing_arrays(kernel.grad))
    return kernel


def _variants_forced(rule, ctx):
    """A ``Kernel.lengths`` rule whose kernels for any lengths are
    :func:`_forced` as the node's own."""
    def lengths(rows):
        found = rule(rows)
        if found is None or found.kernel is None:
            return found
        return found._replace(kernel=_forced(found.kernel, ctx))
    return marked_like(lengths, rule)


def marked_like(rule, like):
    """``rule``, a ``Kernel.lengths`` rule wrapping ``like``, marked as
    ``like`` is (:func:`takes_axes`, :func:`takes_widest`,
    :func:`takes_square`)."""
    for mark in ('takes_axes', 'takes_widest', 'takes_square'):
        setattr(rule, mark, getattr(like, mark, False))
    return rule


def _forcing_arrays(kernel):
    """NumPy turns 0-d results into scalars; Chainer keeps 0-d arrays.
    (The wrapper keeps the attributes passes read from ``fn``.)"""
    fn = kernel.fn
    force = chainer.utils.force_array
    if kernel.multi:
        def run(*arrays):
            return tuple(force(y) for y in fn(*arrays))
    else:
        def run(*arrays):
            return force(fn(*arrays))
    return kernel._replace(fn=functools.wraps(fn)(run))


def _grad_forcing_arrays(rule):
    """A gradient rule whose 0-d gradients are arrays, as Chainer requires
    of a backward (``gy[()]`` of a 0-d array is a NumPy scalar). The
    wrapper keeps the attributes autodiff reads from ``fn``."""
    fn = rule.fn

    def run(xs, ys, gys, wanted):
        return tuple(numpy.asarray(g) if isinstance(g, numpy.generic) else g
                     for g in fn(xs, ys, gys, wanted))
    return rule._replace(fn=functools.wraps(fn)(run))


def pristine_copy(node):
    """A copy of a node taken before ``apply``, to run its forward again.

    Old-style ``chainer.Function`` objects are wrapped in a
    ``FunctionAdapter``; the wrapped function is copied too.
    """
    template = copy.copy(node)
    if isinstance(node, chainer.function.FunctionAdapter):
        _adopt(template, copy.copy(node._function))
    return template


def _adopt(adapter, function):
    adapter._function = function
    function._owned_node = None
    function._node = weakref.ref(adapter)


def onnx_op(op_type, **attrs):
    """An ONNX converter emitting one node of ``op_type`` with the same
    inputs and outputs as the Chainer op."""
    def convert(b, ins, outs):
        b.op(op_type, ins, outs, **attrs)
    return convert


def own_forward(node):
    """A kernel's ``fn`` computing what ``node``'s own ``forward`` computes
    on the CPU: a copy of the node runs it on the arrays (Chainer's code
    and bits, without Variables or a graph). For nodes whose one output
    depends only on their inputs and plain attributes."""
    def run(*arrays):
        return copy.copy(node).forward(arrays)[0]
    return run


def generic_kernel(template, ctx, array_attrs=(), config=None):
    """A kernel that runs a fresh copy of ``template``'s own forward.

    Its ``grad`` is a :class:`GenericTraining`: for training, the fresh
    node runs through ``apply`` on Variables, so that its own ``backward``
    gives the gradients.

    Args:
        array_attrs: ``(name, index)`` pairs of node attributes that hold
            arrays computed by the forward (``F.where``'s condition, index
            arrays of ``x[idx]``); the kernel takes their new values as
            extra trailing arguments. ``index`` is ``None`` for an array
            attribute, or the position in a tuple attribute.
        config: ``{name: value}`` of the ``chainer.config`` entries the
            forward set around the node (``using_config('train',
            False)``): the node's code runs under them on every call.
    """
    is_adapter = isinstance(template, chainer.function.FunctionAdapter)
    on_gpu = ctx.xp is not numpy
    n_inputs = len(ctx.in_shapes)
    layouts = (None,) * n_inputs

    def fresh(arrays):
        """A copy of the template ready to run, and its input arrays."""
        node = copy.copy(template)
        if is_adapter:
            _adopt(node, copy.copy(template._function))
        node._input_indexes_to_retain = None
        node._output_indexes_to_retain = None
        node._input_layouts = layouts
        if array_attrs:
            set_array_attributes(state_holder(node), array_attrs,
                                 arrays[n_inputs:])
        return node, arrays[:n_inputs]

    def run(*arrays):
        node, arrays = fresh(arrays)
        if on_gpu:
            device = chainer.backend.get_device_from_array(*arrays)
            with chainer.using_device(device):
                return node.forward(arrays)
        return node.forward(arrays)

    def run_for_training(*arrays):
        node, arrays = fresh(arrays)
        xs = [chainer.Variable(a, requires_grad=a.dtype.kind == 'f')
              for a in arrays]
        with chainer.force_backprop_mode():
            ys = node.apply(xs)
        return tuple(y.array for y in ys) + (_ChainerGraph(xs, ys),)
    _load_op_modules()
    rule = _GENERIC_LENGTHS.get(type(template))
    lengths = None if rule is None or array_attrs else rule(template)
    if config:
        return Kernel(_under_config(run, config), {'config': _format_config(
            config)}, multi=True, grad=GenericTraining(_under_config(
                run_for_training, config)), lengths=lengths)
    return Kernel(run, multi=True, grad=GenericTraining(run_for_training),
                  lengths=lengths)


def _under_config(fn, config):
    """``fn`` run with the ``chainer.config`` entries of ``config``."""
    items = sorted(config.items())

    def run(*arrays):
        with contextlib.ExitStack() as stack:
            for name, value in items:
                stack.enter_context(chainer.using_config(name, value))
            return fn(*arrays)
    return run


def _format_config(config):
    return ','.join('%s=%r' % item for item in sorted(config.items()))


class GenericTraining(collections.namedtuple('GenericTraining', 'forward')):
    """The training form of a generic kernel: ``forward(*arrays)`` returns
    the outputs and, last, a handle whose ``backward(gys, wanted)`` runs
    the node's own backward (see :func:`generic_grad_rule`)."""


class _ChainerGraph(object):
    """A node applied on Variables, kept for its backward."""

    def __init__(self, inputs, outputs):
        self.inputs = inputs
        self.outputs = outputs

    def backward(self, gys, wanted):
        pairs = [(y, chainer.Variable(g))
                 for y, g in zip(self.outputs, gys) if g is not None]
        targets = [x for x, w in zip(self.inputs, wanted) if w]
        gxs = iter(chainer.grad([y for y, _ in pairs], targets,
                                [g for _, g in pairs]))
        return tuple(_array_or_none(next(gxs)) if w else None
                     for w in wanted)


def _array_or_none(variable):
    return None if variable is None else variable.array


def generic_grad_rule(n_inputs, n_outputs):
    """The :class:`GradRule` of a generic node run for training: its last
    output (index ``n_outputs``) is the handle kept for the backward."""
    def grad(xs, ys, gys, wanted):
        return ys[n_outputs].backward(gys[:n_outputs], wanted)
    return GradRule(grad, outputs=(n_outputs,))


def set_array_attributes(node, array_attrs, arrays):
    """Sets ``(name, index)`` attributes (see :func:`array_attributes`)."""
    for (name, index), array in zip(array_attrs, arrays):
        if index is None:
            setattr(node, name, array)
        else:
            items = list(getattr(node, name))
            items[index] = array
            setattr(node, name, type(getattr(node, name))(items))


def array_attributes(node):
    """Yields ``(name, index, array)`` for every array a node (or the old
    style Function it wraps) holds as an attribute, directly or in a tuple
    or list."""
    arrays = chainer.get_array_types()
    for name, value in sorted(vars(state_holder(node)).items()):
        if isinstance(value, arrays):
            yield name, None, value
        elif type(value) in (tuple, list):
            for index, item in enumerate(value):
                if isinstance(item, arrays):
                    yield name, index, item


_loaded = []


def _load_op_modules():
    if _loaded:
        return
    _loaded.append(True)
    # Imported for their registrations.
    from chainerjit.ops import activation  # NOQA
    from chainerjit.ops import array  # NOQA
    from chainerjit.ops import connection  # NOQA
    from chainerjit.ops import distributions  # NOQA
    from chainerjit.ops import linear  # NOQA
    from chainerjit.ops import evaluation  # NOQA
    from chainerjit.ops import loss  # NOQA
    from chainerjit.ops import math  # NOQA
    from chainerjit.ops import noise  # NOQA
    from chainerjit.ops import normalization  # NOQA
    from chainerjit.ops import nstep  # NOQA
    from chainerjit.ops import pooling  # NOQA
    from chainerjit.ops import rnn  # NOQA
