"""The arguments' sizes as symbols while recording.

A forward reads ``xs.shape[0]`` or ``len(xs)`` and hands the number on:
to ``range`` (a loop's trip count, which the loop watcher sees as the
loop runs), into integer arithmetic (``T - 1``, ``T * B``), or to
something that makes the recording depend on its value: a comparison
(``if T > 10:``), ``float(T)``, a string, a Chainer function's attribute
(``F.reshape(x, (T * B, I))``), an array made in Python
(``numpy.zeros((T, H))``), the result or a model attribute.

While recording, the sizes of the arguments' dimensions that the
forward's own code reads are :class:`Length` ints. A Length is the number
itself, for Python, NumPy and Chainer alike; integer arithmetic on it
gives a Length again, and each other use by the forward's code is noted
as a :class:`Use`, with its line. A loop's trip count can be left out of
the cache key only where its length had no such use (``symbolic``), and
a use that keeps it in the key is named in the warning. A comparison of
``a * T + b`` with an int is the one use a program can keep as a guard
(``Use.condition``: the entry then serves the lengths where it goes the
same way); the batch size's uses decide whether an inference program may
serve every batch size (``runtime.batch``).

A use this misses (the number passed through C code other than
``range``) is caught when the program first runs at another length: it
runs eagerly too, and the results are compared (``api``).
"""

import collections
import os
import sys

import chainer
import numpy

from chainerjit import errors
from chainerjit import ir
from chainerjit.ir import fingerprints
from chainerjit import ops
from chainerjit.ops import array as array_ops
from chainerjit.frontend import _keys
from chainerjit.frontend import loop_analysis
from chainerjit.frontend import scalars
from chainerjit.frontend import traced


_state = _keys.recording  # this thread's


class Use(collections.namedtuple(
        'Use', 'origins what loc condition rows_of terms sides',
        defaults=(None, None, None, None))):
    """A use of argument sizes that the recording depends on.

    ``origins``: the ``(leaf index, axis)`` of the sizes the number was
    computed from; ``what``: how it was used (``'compared'``); ``loc``:
    ``(filename, line)`` of the forward's code that used it;
    ``condition``: for a comparison of ``a * size + b`` (one size) with an
    int, ``(a, b, op, the int, the result)``, which a program may keep as
    a guard (:func:`holds`); ``rows_of``: for a product of sizes given as
    the first axis of a node's output shape (``F.reshape(xs, (T * B,
    I))``), that node, whose kernel may infer it from its input's rows;
    ``terms``: for a sum of several sizes (``W - B``), ``((origin, a),
    ...)``, each size's multiple in it. ``sides``: for a use of two
    numbers of sizes together (``T > B``, ``max(len(x) for x in xs)``),
    the :func:`_described` form of each."""

    __slots__ = ()

    def describe(self, names):
        """``'xs.shape[0] compared at model.py:31'``; ``names`` are the
        leaves'."""
        where = '' if self.loc is None else \
            ' at ' + errors.short_location(self.loc)
        sides = self.sides or ((self.origins, self.terms),)
        sizes = ' and '.join(_sizes_named(origins, terms, names)
                             for origins, terms in sides)
        return '%s %s%s' % (sizes, self.what, where)


def _sizes_named(origins, terms, names):
    """``'x.shape[0] * x.shape[1]'`` of a product of sizes (``terms``
    ``None``), ``'W - B'`` of a sum of their multiples (``terms``)."""
    if terms == LONGEST:
        leaf, axis = origins[0]
        return 'max(len(x) for x in %s)' % _list_named(names[leaf])
    if terms == ITEMS:
        return 'the lengths of the items of %s' % _list_named(
            names[origins[0][0]])
    if terms == COMPUTED:
        lists = sorted(set(_list_named(names[leaf]) for leaf, _ in origins))
        if len(lists) == 1 and all(axis <= 0 for _, axis in origins):
            return 'a number computed from the lengths of the items of %s' \
                % lists[0]
        return 'a number computed from %s' % ', '.join(
            _size_named(names[leaf], axis) for leaf, axis in origins)
    if terms is None:
        return ' * '.join(_size_named(names[leaf], axis)
                          for leaf, axis in origins)
    return ops.sum_label([ops.times_label(a, _size_named(names[leaf], axis))
                          for (leaf, axis), a in terms])


def _totaled(length):
    """``length``, or where it is the sum of the lengths of every item of a
    joined list cut at their offsets (``total += len(t)`` in a loop over
    them), those items' words: the joined rows' number, a size of the
    argument the call passes (the items' lengths read for it alone). Of
    items recorded one by one, a sum of their lengths is noted
    (``recorder.length_totals``: ``joining.found_joins`` may join their
    list)."""
    recorder = _state.recorder
    terms = None if length.linear is None or length.linear[1] else \
        length.linear[0]
    if recorder is None or not terms or len(terms) < 2 or \
            any(a != 1 for a in terms.values()):
        return length
    origins = frozenset(terms)
    leaves = set(leaf for leaf, _ in origins)
    if len(leaves) > 1:
        if all(axis == 0 for _, axis in origins):
            recorder.length_totals.add(origins)
        return length
    leaf, = leaves
    words = recorder.words_of.get(leaf)
    if words is None or origins != frozenset(
            (leaf, -1 - k) for k in range(traced.untag(
                recorder.item_lengths[leaf]).shape[0])):
        return length
    forget_reads(recorder, sorted(origins))
    recorder.iterated_lines.add(traced.user_location())
    return Length(int(length), frozenset([(words, 0)]), length.uses, (1, 0))


def _linear(op, length, other):
    """``Length.linear`` of ``length op other`` (``other`` an int or a
    Length): sums and differences of sizes, and their multiples; else
    ``None``."""
    terms = length.linear
    theirs = getattr(other, 'linear', None) if isinstance(other, Length) \
        else ({}, int.__int__(other))
    if terms is None or theirs is None:
        return None
    if op in ('__mul__', '__rmul__'):
        if isinstance(other, Length):
            return None
        return (dict((o, a * other) for o, a in terms[0].items()),
                terms[1] * other)
    sign = {'__add__': 1, '__radd__': 1, '__sub__': -1}.get(op)
    if op == '__rsub__':  # (other - length: the negation of length - other)
        found = _linear('__sub__', length, other)
        return None if found is None else \
            (dict((o, -a) for o, a in found[0].items()), -found[1])
    if sign is None:  # (// and %: no sum of sizes)
        return None
    summed = dict(terms[0])
    for origin, a in theirs[0].items():
        summed[origin] = summed.get(origin, 0) + sign * a
    return summed, terms[1] + sign * theirs[1]


def _monomial(op, length, other):
    """``Length.monomial`` of ``length op other`` (``other`` an int or a
    Length): products of sizes and ints (``x.shape[0] * x.shape[1]``,
    ``x.size``); else ``None``."""
    theirs = getattr(other, 'monomial', None) if isinstance(other, Length) \
        else ({}, int.__int__(other))
    if op not in ('__mul__', '__rmul__') or length.monomial is None or \
            theirs is None:
        return None
    powers = dict(length.monomial[0])
    for origin, power in theirs[0].items():
        powers[origin] = powers.get(origin, 0) + power
    return powers, length.monomial[1] * theirs[1]


#: The integer operators whose result is a step function of the size
#: (``(B + 31) // 32``), as noted: the program is compiled for one value,
#: and checking it against eager at a few new sizes may not see another.
_STEPPED = {'__floordiv__': 'floor-divided', '__rfloordiv__': 'floor-divided',
            '__mod__': 'taken modulo', '__rmod__': 'taken modulo'}


#: The divisions of a size giving a float, which :meth:`Length._in_float`
#: computes at run time.
_DIVISIONS = frozenset(['__truediv__', '__rtruediv__'])


def _size_named(name, axis):
    """``'xs.shape[1]'``; the length of an item of a joined list (its
    lengths passed as ``name``, ``xs[1]``), ``'len(xs[k])'``."""
    if axis >= 0:
        return '%s.shape[%d]' % (name, axis)
    return 'len(%s[%d])' % (_list_named(name), -1 - axis)


def _list_named(name):
    """``'xs'`` of the name of an item of the list ``xs`` (``'xs[1]'``)."""
    return name.rpartition('[')[0] or name


def _takes_sizes(other):
    """Does ``other``'s reflected operator take a :class:`Length` (a
    Variable's; a traced array's, reading it at run time,
    ``trace.sizes_at_run_time``)?"""
    return isinstance(other, (chainer.Variable, traced.TracedArray))


class Length(int):
    """An argument's size, or an integer computed from sizes, read by the
    forward's code while it is recorded (see the module docstring)."""

    python_int = True  # given to NumPy as a plain int (traced.eager_numbers)

    def __new__(cls, value, origins, uses, affine=None, product=False,
                linear=None, monomial=None):
        self = int.__new__(cls, value)
        self.origins = origins  # frozenset of (leaf, axis)
        self.uses = uses  # the recorder's list of Use
        # (a, b): the number is a * the size + b, for one origin
        self.affine = affine if len(origins) == 1 else None
        # the number is an int times sizes (T * B, 4 * T)
        self.product = product
        # ({origin: a}, b): the number is the sum of a * each size, + b
        if linear is None and self.affine is not None:
            (origin,), (a, b) = origins, self.affine
            linear = ({origin: a}, b)
        self.linear = linear
        # ({origin: power}, c): the number is c times a product of sizes
        if monomial is None and self.affine is not None and \
                self.affine[1] == 0:
            monomial = ({next(iter(origins)): 1}, self.affine[0])
        self.monomial = monomial
        return self

    def use(self, what, loc, other=None, condition=None):
        """The :class:`Use` of this number (with ``other``, a Length or
        not) as ``what`` at ``loc``."""
        origins = self.origins | getattr(other, 'origins', frozenset())
        if isinstance(other, Length):  # (two sizes: T > B)
            return Use(tuple(sorted(origins)), what, loc, condition,
                       sides=(self._described(), other._described()))
        return Use(tuple(sorted(origins)), what, loc, condition,
                   terms=self._described()[1])

    def _described(self):
        """``(origins, terms)`` as :meth:`Use.describe` names this number:
        ``terms`` for a sum of multiples of several sizes, else ``None``
        (a product of its origins)."""
        terms = None
        if self.linear is not None and len(self.linear[0]) > 1:
            terms = tuple(sorted(self.linear[0].items()))
        elif self.linear is None and self.monomial is None and \
                len(self.origins) > 1:
            terms = COMPUTED
        return tuple(sorted(self.origins)), terms

    def _note(self, what, other=None, condition=None, depth=2):
        """Notes a use by the forward's code (not by Chainer's, NumPy's or
        chainerjit's own, which compare shapes all the time), ``depth``
        frames up."""
        loc = forward_line(depth)
        if loc is not None and _state.recorder is not None:
            self.uses.append(self.use(what, loc, other, condition))

    def _arithmetic(op, affine):
        def apply(self, other):
            if _takes_sizes(other):
                return NotImplemented  # (its reflected operator)
            if type(other) is SizeOf and other.longest is not None:
                other = other.longest  # (B * T: the rows of the block)
            elif type(other) is SizeOf:  # (a padded width: not a constant)
                other.noted('used in arithmetic', depth=2)
            if scalars.is_varying(other):
                other.note('used in arithmetic with a size')
            if type(other) is list and op in ('__mul__', '__rmul__'):
                return self._list_of_size(other)
            if not isinstance(other, int) or isinstance(other, bool):
                computed = self._in_float(op, other) \
                    if type(other) in _FLOATS else None
                if computed is not None:
                    return computed
                self._note('used in arithmetic with a %s' %
                           type(other).__name__, other)
                return getattr(int, op)(self, other)
            plain = type(other) is int and self.affine is not None
            product = op in ('__mul__', '__rmul__') and self.product and \
                getattr(other, 'product', type(other) is int)
            if op in _STEPPED:  # (B // 32: the same at the sizes checked)
                self._note(_STEPPED[op], other)
            return _totaled(Length(
                getattr(int, op)(self, other), self.origins |
                getattr(other, 'origins', frozenset()), self.uses,
                affine(*self.affine, other) if plain and affine else None,
                product, _linear(op, self, other),
                _monomial(op, self, other)))
        apply.__name__ = op
        return apply

    def _in_float(self, op, other):
        """``self op other`` (a float, or an int dividing) computed at run
        time as a ``scalars.Scalar`` (:func:`as_scalar`: ``acc * (1.0 /
        T)``), where the forward's own code computes it; else ``None``.
        Its uses that bake it in (a comparison) are this size's."""
        recorder = _state.recorder
        if recorder is None or recorder.depth or forward_line(2) is None:
            return None
        scalar = as_scalar(self, recorder, sys._getframe(2))
        return None if scalar is None else getattr(scalar, op)(
            scalars.plain_literal(other))

    def _list_of_size(self, items):
        """``[None] * T``: the list, its use of the size noted, which a
        loop over that size filling it one item per step forgives
        (:func:`forgive_filled`)."""
        before = len(self.uses)
        self._note('used in arithmetic with a list', items, depth=3)
        made = items * int(self)
        recorder = _state.recorder
        if len(self.uses) > before and recorder is not None and \
                len(items) == 1 and self.affine == (1, 0):
            recorder.sized_lists.append((made, self.uses[-1]))
        return made

    for _op, _affine in (
            ('__add__', lambda a, b, n: (a, b + n)),
            ('__radd__', lambda a, b, n: (a, b + n)),
            ('__sub__', lambda a, b, n: (a, b - n)),
            ('__rsub__', lambda a, b, n: (-a, n - b)),
            ('__mul__', lambda a, b, n: (a * n, b * n)),
            ('__rmul__', lambda a, b, n: (a * n, b * n)),
            ('__floordiv__', None), ('__rfloordiv__', None),
            ('__mod__', None), ('__rmod__', None)):
        locals()[_op] = _arithmetic(_op, _affine)

    def __neg__(self):
        return self * -1

    def __pos__(self):
        return self

    def _decision(op, what):
        def apply(self, *args):
            if args and _takes_sizes(args[0]) and op != '__pow__':
                return NotImplemented
            computed = self._in_float(op, args[0]) if (
                op in _DIVISIONS and type(args[0]) in (int,) + _FLOATS or
                op == '__pow__' and type(args[0]) in _FLOATS) else None
            if computed is not None:
                return computed
            self._note(what, args[0] if args else None)
            return getattr(int, op)(self, *args)
        apply.__name__ = op
        return apply

    def _comparison(op):
        def apply(self, other):
            if _takes_sizes(other):
                return NotImplemented
            if scalars.is_varying(other):
                other.note('compared with a size')
            result = getattr(int, op)(self, other)
            if isinstance(other, Length) and self.linear is not None and \
                    self.linear == other.linear:
                return result  # (the same number at every size)
            condition = None
            if type(other) is int and self.affine is not None:
                condition = self.affine + (op, other, result)
            self._note('compared', other, condition)
            return result
        apply.__name__ = op
        return apply

    for _op in ('__lt__', '__le__', '__gt__', '__ge__', '__eq__', '__ne__'):
        locals()[_op] = _comparison(_op)
    for _op, _what in (('__bool__', 'tested'),
                       ('__float__', 'converted to float'),
                       ('__int__', 'converted with int()'),
                       ('__truediv__', 'divided'),
                       ('__rtruediv__', 'divided by'),
                       ('__pow__', 'raised to a power'),
                       ('__rpow__', 'used as an exponent'),
                       ('__divmod__', 'divided with divmod()'),
                       ('__rdivmod__', 'divided with divmod()'),
                       ('__lshift__', 'shifted'), ('__rlshift__', 'shifted'),
                       ('__rshift__', 'shifted'), ('__rrshift__', 'shifted'),
                       ('__and__', 'used in a bitwise and'),
                       ('__rand__', 'used in a bitwise and'),
                       ('__or__', 'used in a bitwise or'),
                       ('__ror__', 'used in a bitwise or'),
                       ('__xor__', 'used in a bitwise xor'),
                       ('__rxor__', 'used in a bitwise xor'),
                       ('__invert__', 'inverted'),
                       ('__abs__', 'given to abs()'),
                       ('__round__', 'rounded'), ('__trunc__', 'truncated'),
                       ('__floor__', 'rounded down'),
                       ('__ceil__', 'rounded up'),
                       ('__str__', 'formatted'),
                       ('__repr__', 'formatted'),
                       ('__format__', 'formatted'),
                       ('bit_length', 'counted in bits'),
                       ('bit_count', 'counted in bits'),
                       ('to_bytes', 'written in bytes'),
                       ('as_integer_ratio', 'written as a ratio')):
        locals()[_op] = _decision(_op, _what)
    del _op, _what, _affine, _arithmetic, _decision, _comparison

    def __hash__(self):  # (a dict's key, a set's member: a decision)
        self._note('used as a dict key or set member')
        return int.__hash__(self)

    def __reduce__(self):
        return int, (int(self),)


#: ``Use.terms`` of a :class:`Longest`: named as ``max(len(x) for x in
#: xs)``; of a number computed of several sizes otherwise than as a sum
#: or a product of them (``max(len(x) for x in xs) + 2``).
LONGEST, COMPUTED = 'longest', 'computed'

#: ``Use.terms`` of the lengths of all the items of a list, together
#: (``sorted(xs, key=len)``).
ITEMS = 'items'


class Longest(Length):
    """The longest of the lengths of all the items of a list argument, as
    the forward's code takes it (``max(len(x) for x in xs)``,
    :func:`longest_of`): a Length of all those lengths, no sum or product
    of them, each of whose uses is one of all of them. Given as the
    ``length`` of ``F.pad_sequence`` of items as long, item by item, it
    pads to the longest, as no ``length`` does, without a use
    (:func:`pads_to_longest`); of a joined list, the block so padded is
    the one whose width it then is (``array``, ``axis``: an array made of
    it, ``xp.arange(T)``, is made again of that width at run time, as of
    a :class:`SizeOf`)."""

    def __new__(cls, value, origins, uses, shift):
        self = Length.__new__(cls, value, origins, uses)
        self.shift = shift  # (each item's length plus shift)
        self.array = self.axis = None
        return self

    def _described(self):
        return tuple(sorted(self.origins)), LONGEST

    def noted(self, what, depth):
        """Notes the use ``what`` by the forward's code ``depth`` frames
        above this method (as :meth:`SizeOf.noted`)."""
        self._note(what, depth=depth + 1)

    def pads(self, block, axis):
        """Notes axis ``axis`` of ``block`` as the items padded to this
        length (:func:`pads_to_longest`)."""
        self.array, self.axis = data_of(block), axis


def width_of(n):
    """``(array, axis)`` of the padded block whose width ``n`` is (a
    :class:`SizeOf`, or a :class:`Longest` padded to), or ``None``."""
    if type(n) is SizeOf or type(n) is Longest and n.array is not None:
        return n.array, n.axis
    return None


def longest_of(values):
    """``max(values)`` where ``values`` are the lengths the forward read of
    all the items of one list (plus one shift for all): a
    :class:`Longest`, of a joined list's items, or of items recorded one
    by one (the reads of whose lengths ``joining.found_joins`` then
    forgives, ``recorder.length_totals``); else ``None``."""
    recorder = _state.recorder
    if recorder is None or len(values) < 2 or not all(
            type(n) is Length and n.affine is not None and
            n.affine[0] == 1 for n in values) or \
            len(set(n.affine[1] for n in values)) > 1:
        return None
    origins = frozenset(next(iter(n.origins)) for n in values)
    leaves = set(leaf for leaf, _ in origins)
    if len(origins) != len(values):
        return None
    if len(leaves) == 1:
        leaf, = leaves
        if leaf not in recorder.words_of or origins != frozenset(
                (leaf, -1 - k) for k in range(traced.untag(
                    recorder.item_lengths[leaf]).shape[0])):
            return None
        forget_reads(recorder, sorted(origins))
        recorder.iterated_lines.add(traced.user_location())
    elif all(axis == 0 for _, axis in origins):
        recorder.length_totals.add(origins)
    else:
        return None
    return Longest(max(int.__int__(n) for n in values), origins,
                   recorder.length_uses, values[0].affine[1])


def pads_to_longest(length, items):
    """Is ``length``, given to ``F.pad_sequence`` of ``items`` (a list of
    Variables or arrays), the longest of their lengths at every size: a
    :class:`Longest` of the lengths of items as long as these, item by
    item (of one joined list, ``shift`` and all; or of the arguments
    whose first axes these items' are)?"""
    recorder = _state.recorder
    if type(length) is not Longest or recorder is None:
        return False
    origins = [origin_of(x, 0) for x in items]
    return len(set(origins)) == len(items) and \
        frozenset(origins) == length.origins and \
        all(recorder.length_shifts.get(id(data_of(x)), 0) == length.shift
            for x in items)


#: The floats a :class:`Length`'s arithmetic computes at run time with.
_FLOATS = (float, scalars.Literal)


#: The code of the patches that call on the forward's behalf (:func:`for_the
#: forward`).
_ON_BEHALF = set()


def for_the_forward(fn):
    """Makes ``fn``, a patch of a builtin that calls back into what it is
    given (``max(map(len, xs))``, ``max(xs, key=len)``), the forward's
    own code for :func:`forward_line`: what it calls is called by the
    forward."""
    _ON_BEHALF.add(fn.__code__)
    return fn


def forward_line(depth):
    """``(filename, line)`` of the code ``depth`` frames above the caller
    of this function, if that is the forward's (not a library's)."""
    frame = sys._getframe(depth + 1)
    while frame.f_code in _ON_BEHALF:
        frame = frame.f_back
    filename = frame.f_code.co_filename
    if traced.is_library_file(filename) or traced.is_cupy_file(filename):
        return None
    return filename, frame.f_lineno


def read_shape(array, shape, depth=1):
    """``shape``, read from ``array`` by the code ``depth`` frames up: the
    sizes of its axes that are an argument's (all, for an argument's
    array; those an index of one kept, :func:`note_indexed`) as
    :class:`Length` ints, if that code is the forward's. The forward's
    reads of other arrays' shapes are noted (``recorder.shapes_read``: a
    loop's stacked values may take any length only where Python did not
    read it)."""
    recorder = _state.recorder
    loc = None if recorder is None else forward_line(depth)
    if loc is None:
        return shape
    recorder.size_read_lines.add(loc)
    origins = recorder.length_leaves.get(id(array)) or \
        _made_origins(recorder, array)
    if origins is None and id(array) in recorder.joined_rows:
        return (_joined_rows(recorder, recorder.joined_rows[id(array)]),) + \
            tuple(shape[1:])
    if origins is None:
        recorder.shapes_read.add(id(array))  # a computed value's
        return _noted_shape(recorder, _with_padded_width(
            recorder, array, tuple(shape)), array)
    cut = recorder.cut_axes.get(id(array), {})
    recorder.length_reads.update(o for o in origins if o is not None)
    recorder.item_length_reads.extend(
        (o, loc) for o in origins
        if o is not None and is_item_length(o))
    shift = recorder.length_shifts.get(id(array), 0)
    return _noted_shape(recorder, _with_padded_width(recorder, array, tuple(
        Length(n, frozenset([cut[axis][0]]), recorder.length_uses,
               (1, cut[axis][1]), False) if axis in cut else
        n if origin is None else Length(
            n, frozenset([origin]), recorder.length_uses,
            (1, shift if axis == 0 else 0), not shift or axis > 0)
        for axis, (origin, n) in enumerate(zip(origins, shape)))), array)


class SizeOf(int):
    """The size of ``axis`` of ``array``, a value the forward computed,
    read by the forward's code: the width of a block of segments padded
    to the longest (:func:`note_padded_width`), which varies with the
    items' lengths. An array made of it (``xp.arange(enc.shape[1])``) is
    made again of that value's size at run time (:func:`_made_arange`),
    and so is a Variable multiplied or divided by it
    (:func:`width_as_scalar`). In int arithmetic it is ``longest``, where
    the items are a joined list argument's: the :class:`Longest` of their
    lengths (``B, T = h.shape[:2]``, then ``F.reshape(h, (B * T, H))``).
    Any other use by the forward's code (a comparison, a float; int
    arithmetic of other items) is noted (``recorder.width_uses``): the
    recording then does not read its lists whole
    (``joining.take_joins``)."""

    def __new__(cls, value, array, axis, longest=None):
        self = int.__new__(cls, value)
        self.array, self.axis, self.longest = array, axis, longest
        return self

    def noted(self, what, depth):
        """Notes the use ``what`` of this width by the forward's code
        ``depth`` frames above this method (``recorder.width_uses``)."""
        loc, recorder = forward_line(depth), _state.recorder
        if loc is not None and recorder is not None:
            recorder.width_uses.append((what, loc))

    def _noting(op, what):
        def apply(self, *args):
            if args and _takes_sizes(args[0]):
                return NotImplemented  # (its reflected operator)
            self.noted(what, depth=2)
            return getattr(int, op)(self, *args)
        apply.__name__ = op
        return apply

    def _as_longest(op):
        def apply(self, *args):
            if self.longest is None or args and _takes_sizes(args[0]):
                return SizeOf._arithmetic_noted[op](self, *args)
            return getattr(self.longest, op)(*args)
        apply.__name__ = op
        return apply

    _arithmetic_noted = {}
    for _op in ('__add__', '__radd__', '__sub__', '__rsub__', '__mul__',
                '__rmul__', '__floordiv__', '__rfloordiv__', '__mod__',
                '__rmod__', '__truediv__', '__rtruediv__', '__pow__',
                '__rpow__', '__neg__', '__divmod__', '__rdivmod__'):
        _arithmetic_noted[_op] = _noting(_op, 'used in arithmetic')
        locals()[_op] = _as_longest(_op)
    for _op in ('__lt__', '__le__', '__gt__', '__ge__', '__eq__', '__ne__'):
        locals()[_op] = _noting(_op, 'compared')
    for _op, _what in (('__bool__', 'tested'),
                       ('__float__', 'converted to float'),
                       ('__int__', 'converted with int()'),
                       ('__hash__', 'used as a dict key or set member'),
                       ('__str__', 'formatted'), ('__repr__', 'formatted'),
                       ('__format__', 'formatted')):
        locals()[_op] = _noting(_op, _what)
    del _op, _what, _noting, _as_longest

    def __reduce__(self):
        return int, (int(self),)


def note_padded_width(array, axis, item_lengths=None):
    """Notes ``axis`` of ``array`` as the width of segments padded to the
    longest (``ops.array.PadSegments``), of the items ``item_lengths``
    (a traced array) gives the lengths of: the forward reads it as a
    :class:`SizeOf`."""
    recorder = _state.recorder
    if recorder is not None:
        recorder.padded_widths[id(array)] = (array, axis, item_lengths)


def _note_widths_followed(recorder, kernel, in_arrays, out_arrays):
    """Notes the axis of each output that keeps the width of an input
    padded to the longest item (:func:`note_padded_width`), as the
    kernel's rule for other rows maps it (``F.sum(enc, axis=2)`` of the
    block ``enc``: its second axis): the forward reads it as a
    :class:`SizeOf` too, not a size to bake in."""
    noted = [recorder.padded_widths.get(id(a)) for a in in_arrays]
    if kernel is None or not any(n is not None and n[0] is a
                                 for n, a in zip(noted, in_arrays)):
        return
    rows = [ops.Rows(((None, a.shape[n[1]]),), n[1], True)
            if n is not None and n[0] is a else None
            for n, a in zip(noted, in_arrays)]
    item_lengths = next(n[2] for n, a in zip(noted, in_arrays)
                        if n is not None and n[0] is a)
    following = ops.follow_kernel(kernel, rows)
    for array, r in zip(out_arrays, following.outputs if following else ()):
        if r is not None and r.widest and not r.also:
            note_padded_width(array, r.axis, item_lengths)


def _with_padded_width(recorder, array, shape):
    """``shape`` with the width :func:`note_padded_width` noted of
    ``array`` as a :class:`SizeOf`."""
    noted = recorder.padded_widths.get(id(array))
    if noted is None or noted[0] is not array:
        return shape
    _, axis, item_lengths = noted
    longest = _longest_of_joined(recorder, shape[axis], item_lengths)
    if longest is not None:
        longest.pads(array, axis)
    return shape[:axis] + (SizeOf(shape[axis], array, axis, longest),) + \
        shape[axis + 1:]


def _longest_of_joined(recorder, width, item_lengths):
    """The :class:`Longest` of the lengths of a joined list argument's
    items, ``width``, where ``item_lengths`` is that argument (not lengths
    shifted); else ``None``."""
    leaf = next((leaf for leaf, found in recorder.item_lengths.items()
                 if found is item_lengths and leaf in recorder.words_of),
                None)
    if leaf is None:
        return None
    count = traced.untag(item_lengths).shape[0]
    return Longest(width, frozenset((leaf, -1 - k) for k in range(count)),
                   recorder.length_uses, 0)


def _made_origins(recorder, array):
    """The arguments' axes whose sizes the forward made ``array`` of
    (``lengths.MadeSized``), where it is the array made; else ``None``."""
    made = recorder.made_sized.get(id(traced.memory_owner(array))) \
        if isinstance(array, numpy.ndarray) else None
    if made is None or made.array is not array or made.like is not None:
        return None
    return tuple(None if not isinstance(n, tuple) or n[2:] else
                 (made.leaves[n[0]], n[1]) for n in made.sizes)


def _noted_shape(recorder, shape, array):
    """``shape``, read of ``array`` by the forward's code, noted as its
    (:func:`shape_source`)."""
    recorder.shape_sources[id(shape)] = (shape, array)
    return shape


def shape_source(shape):
    """The array whose shape ``shape`` is, as the forward's code read it
    while recording (``F.broadcast_to(m, h.shape)``: ``h``'s); else
    ``None``."""
    recorder = _state.recorder
    found = None if recorder is None else \
        recorder.shape_sources.get(id(shape))
    return found[1] if found is not None and found[0] is shape else None


def note_joined_rows(array, words, items, shift):
    """Notes the first axis of ``array`` as the rows of all the items of a
    joined list, each ``shift`` rows longer (``F.concat([eos, y])`` of
    each): as many as the words of the argument ``words`` plus ``shift``
    times the number of items (the first axis of the argument ``items``,
    their lengths), which reading its shape gives (a :class:`Length`)."""
    recorder = _state.recorder
    inputs = recorder.graph.inputs
    recorder.joined_rows[id(array)] = tuple(
        (leaf, inputs[leaf].shape[0]) for leaf in (words, items)) + (shift,)


def _joined_rows(recorder, rows):
    """The :class:`Length` of joined rows (:func:`note_joined_rows`)."""
    (words, n_words), (items, n_items), shift = rows
    recorder.length_reads.update([(words, 0)] + [(items, 0)] * bool(shift))
    found = Length(n_words, frozenset([(words, 0)]), recorder.length_uses,
                   (1, 0), True)
    if shift:
        found = found + Length(n_items, frozenset([(items, 0)]),
                               recorder.length_uses, (1, 0), True) * shift
    return found


def read_size(array, size, depth=1):
    """``size`` (``x.size``) as :func:`read_shape` reads a shape: the
    product of all its axes' Lengths."""
    shape = read_shape(array, array.shape, depth + 1)
    return product_of(shape) if contained(shape) else size


def read_nbytes(array, nbytes, depth=1):
    """``nbytes`` (``x.nbytes``) as :func:`read_size` reads a size, times
    the bytes of an element."""
    size = read_size(array, array.size, depth + 1)
    return size * array.itemsize if isinstance(size, Length) else nbytes


def product_of(sizes):
    """The product of ``sizes``, Lengths among them (a Length itself,
    ``Length.monomial``, where one is)."""
    total = 1
    for n in sizes:
        total = n * total
    return total


def argument_axes(leaf, ndim):
    """The origins of an argument's axes, for ``length_leaves``."""
    return tuple((leaf, axis) for axis in range(ndim))


def note_indexed(recorder, array, index, result):
    """Notes ``result = array[index]`` in ``recorder``: the axes a basic
    index keeps whole of an argument's array (or of such a result) are
    the argument's, and their sizes read Lengths (``x.shape[0]`` of
    ``x = xs[t]`` is the batch of a time-major ``xs``)."""
    origins = recorder.length_leaves.get(id(array))
    if origins is None:
        return
    index = index if isinstance(index, tuple) else (index,)
    shift = recorder.length_shifts.get(id(array), 0)
    cut = _first_axis_cut(index, origins)
    if cut:  # xs[1:], xs[:-1]: the argument's axis, a few rows shorter
        index, shift = (slice(None),) + index[1:], shift - cut
    kept = _kept_axes(index, origins)
    if kept is not None and shift:
        kept = _shift_kept_first(kept, origins[0])
    if kept is not None and any(o is not None for o in kept):
        recorder.length_leaves[id(result)] = kept
        if shift and kept[0] is origins[0] and \
                not is_item_length(origins[0]):
            recorder.length_shifts[id(result)] = shift
        cut = _cut_axes(index, origins)
        if cut:
            recorder.cut_axes[id(result)] = cut


def _shift_kept_first(kept, shifted):
    """The origins ``kept`` of a value's axes, where the origin
    ``shifted``, its first axis's, is some rows more or fewer
    (``length_shifts``: ``xs[1:]``): kept on the first axis alone, as
    the shift is (``xs[1:].T`` has none)."""
    return tuple(None if k and o == shifted else o
                 for k, o in enumerate(kept))


def _cut_axes(index, origins):
    """``{axis of x[index]: (origin, rows added)}`` of the axes of an
    argument's (not an item's length) that ``index``, basic, cuts by ints
    (``x[:, :-1]``: ``{1: (origin, -1)}``), whose sizes read so follow
    that argument's (:func:`read_shape`); the origins of ``x``'s axes are
    ``origins``."""
    index = fingerprints.written_out(index, len(origins))
    cut, source, axis = {}, iter(origins), 0
    for item in index:
        if isinstance(item, (int, numpy.integer)):
            next(source, None)
            continue
        origin = None if item is None else next(source, None)
        n = ops.rows_cut(item)
        if n and origin is not None and not is_item_length(origin):
            cut[axis] = (origin, -n)
        axis += 1
    return cut


def _first_axis_cut(index, origins):
    """How many rows ``x[index]`` cuts off the first axis of an ``x``
    whose first axis is an argument's (not a list item's length): ``k +
    m`` for ``x[k:]``, ``x[:-m]`` or ``x[k:-m]`` (``k``, ``m`` ints of a
    recorded index), else 0."""
    if not index or origins[0] is None or is_item_length(origins[0]):
        return 0
    return ops.rows_cut(index[0]) or 0


def shift_of(value):
    """How many rows more (or, negative, fewer) the first axis of
    ``value`` has than the argument's axis it follows (``xs[1:]``: -1)."""
    recorder = _state.recorder
    return 0 if recorder is None else recorder.length_shifts.get(
        id(data_of(value)), 0)


def note_separated(recorder, array, axis, items):
    """Notes ``items``, a tuple of ``array``'s items along ``axis``
    (``F.separate``): where that axis is an argument's, their number is
    its size (``len(items)`` reads a :class:`Length`, and a loop over them
    runs as many times as one over the argument)."""
    recorder.length_leaves[id(items)] = (
        recorder.length_leaves[id(array)][axis],)
    recorder.separated.append(items)  # (its id stays its own)


#: Chainer functions whose outputs keep their inputs' axes: element-wise
#: ones (broadcasting alike), a softmax along an axis, a normalization,
#: an LSTM's step (its states' and its input's batch), a reversal.
SAME_AXES = frozenset([
    'ReLU', 'Sigmoid', 'Tanh', 'LeakyReLU', 'ELU', 'ClippedReLU',
    'Softplus', 'HardSigmoid', 'Softmax', 'LogSoftmax', 'Dropout', 'Add',
    'AddConstant', 'Sub', 'SubFromConstant', 'Mul', 'MulConstant', 'Div',
    'DivFromConstant', 'Neg', 'Absolute', 'PowVarConst', 'PowConstVar',
    'PowVarVar', 'Exp', 'Log', 'Sqrt', 'Square', 'Clip', 'Sin', 'Cos',
    'Maximum', 'Minimum', 'Cast', 'Copy', 'Identity', 'BatchNormalization',
    'FixedBatchNormalization', 'LayerNormalization', 'LSTM', 'Flip',
    'FlipLR', 'FlipUD', 'LinearInterpolate', 'Where', 'Expm1', 'Log1p',
    'Log2', 'Log10', 'Tan', 'Arcsin', 'Arccos', 'Arctan', 'Arctan2', 'Sinh',
    'Cosh', 'Erf', 'Erfc', 'Fmod', 'NormalizeL2',
    'LocalResponseNormalization', 'PReLUFunction', 'RReLU', 'Swish',
    'Zoneout'])


def note_computed(recorder, name, in_arrays, out_arrays, shape=None,
                  kernel=None):
    """Notes the axes of an argument's (not a list item's) that the
    outputs of the Chainer function ``name`` keep from its inputs (of
    :data:`SAME_AXES` where their sizes agree, an embedding's ids, a
    linear layer's rows), so that their sizes read Lengths and a loop over
    them (``exs = self.embed(xs)``, then ``for x in exs``) runs for that
    argument's size: see :func:`origin_of`. A reshape to a ``shape`` of
    arguments' sizes (``(T, B, H)`` after the steps were merged with the
    batch) gives its axes theirs."""
    note_merged(recorder, name, in_arrays, out_arrays)
    _note_widths_followed(recorder, kernel, in_arrays, out_arrays)
    if name == 'Reshape' and shape is not None and \
            recorder.length_leaves.get(id(in_arrays[0])) is None:
        kept = _split_again(recorder, in_arrays[0], out_arrays[0].shape,
                            _sized_axes(shape), _reshaped_by_chainer())
        if any(kept) and len(kept) == out_arrays[0].ndim:
            recorder.length_leaves[id(out_arrays[0])] = kept
        return
    origins = [recorder.length_leaves.get(id(a)) for a in in_arrays]
    shifts = set(recorder.length_shifts.get(id(a), 0)
                 for a, o in zip(in_arrays, origins) if o is not None)
    if not any(origins) or len(shifts) > 1 or shifts != {0} and any(
            o is not None and is_item_length(o[0]) for o in origins if o):
        return  # (sizes other than the argument's: not followed)
    shift = shifts.pop()
    unit = _past_unit_axes(in_arrays[0].shape, out_arrays[0].shape,
                           origins[0]) \
        if name in ('Squeeze', 'ExpandDims', 'Reshape') and origins[0] \
        else ()
    if name == 'EmbedIDFunction':
        found = [tuple(origins[0] or ()) + (None,)]
    elif name == 'LinearFunction' and in_arrays[0].ndim == 2:
        found = [((origins[0] or (None,))[0], None)]
    elif name in SAME_AXES:
        found = [_same_axes(a.shape, in_arrays, origins) for a in out_arrays]
    elif any(unit):
        found = [unit]
    elif shift == 0 and kernel is not None:  # (x.reshape(len(x), -1))
        found = _followed_axes(kernel, in_arrays, origins, out_arrays)
    else:
        return
    first = next(o[0] for o in origins if o)  # a shifted input's
    for array, kept in zip(out_arrays, found):
        kept = tuple(None if o is None or is_item_length(o) else o
                     for o in kept)
        if shift:
            kept = _shift_kept_first(kept, first)
        if len(kept) == array.ndim and any(kept):
            recorder.length_leaves[id(array)] = kept
            if shift and kept[0] == first:
                recorder.length_shifts[id(array)] = shift


def note_merged(recorder, name, in_arrays, out_arrays):
    """Notes the axes of an output of the Chainer function ``name`` that
    merge a run of arguments' axes (``F.reshape(xs, (-1, I))`` of a
    time-major ``xs``: ``T`` then ``B``), with the origins of the run, in
    ``recorder.merged_axes``: a reshape merging them, or a linear layer
    or an op of :data:`SAME_AXES` keeping such an axis of its first
    input. A reshape splitting such an axis again gives the parts their
    origins (:func:`_split_again`: ``(T, -1, H)``), and ``F.split_axis``
    into the first's size cuts it as that reshape's rows
    (``recording_patches``)."""
    x, y = in_arrays[0], out_arrays[0]
    if name in ('Reshape', 'ndarray.reshape'):  # (or NumPy's, of an array)
        merged = _merged_of_reshape(recorder, x, y.shape)
    elif name == 'LinearFunction' and x.ndim == 2 or \
            name in SAME_AXES and x.shape == y.shape:
        merged = recorder.merged_axes.get(id(x), {})
        merged = dict((k, run) for k, run in merged.items() if k == 0) \
            if name == 'LinearFunction' else merged
    else:
        return
    if merged:
        recorder.merged_axes[id(y)] = merged


def _merged_of_reshape(recorder, x, shape):
    """``{axis: origins of the run it merges}`` of a reshape of ``x`` to
    ``shape`` that merges runs of arguments' axes."""
    origins = recorder.length_leaves.get(id(x))
    regrouped = array_ops.regrouped(x.shape, tuple(shape))
    if origins is None or regrouped is None or regrouped[0] != 'merge':
        return {}
    return dict((k, tuple(origins[a] for a in run))
                for k, run in enumerate(regrouped[1]) if len(run) > 1 and
                all(origins[a] is not None and not is_item_length(origins[a])
                    for a in run))


def merged_origins(x, axis):
    """The origins of the run of arguments' axes that ``x``'s ``axis``
    merges (:func:`note_merged`), while recording; else ``None``."""
    recorder = _state.recorder
    if recorder is None:
        return None
    return recorder.merged_axes.get(id(data_of(x)), {}).get(axis)


def _split_again(recorder, x, shape, kept, by_chainer=False):
    """``kept``, the origins of the axes of a reshape of ``x`` to
    ``shape``, with those of the parts of an axis of ``x`` that merged a
    run of arguments' axes (:func:`note_merged`) where the reshape splits
    it into as many parts, the first of the run's size where it is a
    Length (``(T, -1, H)`` of ``(T * B, H)``), or where a link's code
    split it (``by_chainer``) into the sizes the run's axes have."""
    merged = recorder.merged_axes.get(id(x))
    regrouped = array_ops.regrouped(x.shape, tuple(shape))
    if not merged or regrouped is None or regrouped[0] != 'split':
        return kept
    kept = list(kept)
    for axis, run in enumerate(regrouped[1]):
        origins = merged.get(axis)
        if origins is None or len(origins) != len(run) or any(
                kept[k] not in (None, o) for k, o in zip(run, origins)) or \
                kept[run[0]] is None and not (by_chainer and all(
                    shape[k] == recorder.input_arrays[leaf].shape[a]
                    for k, (leaf, a) in zip(run, origins))):
            continue  # (the first part's size not read of its origin)
        for k, origin in zip(run, origins):
            kept[k] = origin
    return tuple(kept)


def _reshaped_by_chainer():
    """Is the reshape being recorded asked for by Chainer's code
    (``F.linear(x, W, n_batch_axes=2)`` splitting its rows back into the
    axes it read of ``x``), not by the forward's? Its sizes are then read
    from its input at every call."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code not in _RESHAPES:
        frame = frame.f_back
    while frame is not None and frame.f_code in _RESHAPES:
        frame = frame.f_back
    return frame is not None and \
        frame.f_code.co_filename.startswith(_CHAINER_DIR)


#: ``F.reshape`` and ``Variable.reshape``, whose caller asks for a reshape.
_RESHAPES = (chainer.functions.reshape.__code__,
             chainer.Variable.reshape.__code__)

#: Where Chainer's code is.
_CHAINER_DIR = os.path.dirname(chainer.__file__) + os.sep


def draw_of_sizes(recorder, draw, args, kwargs, result):
    """For a random draw of no array whose shape holds sizes of one
    argument (``numpy.random.normal(size=(len(x), 8))``, ``randn(B, H)``,
    ``randn(*x.shape)``): ``(fn, leaf, origins, rest)``, ``fn(x)`` drawing
    again with those sizes read from the argument ``x`` (the ``leaf``),
    ``origins`` the ``(leaf, axis)`` of each of the result's axes that is
    one (else ``None``), ``rest`` the draw's arguments with the sizes as
    recorded, as ``(args, kwargs)``. Else ``None``."""
    shape, placed = _draw_shape(draw, args, kwargs)
    if shape is None or len(shape) != result.ndim:
        return None
    read = [n for n in shape if isinstance(n, Length)]
    if not read or any(n.affine != (1, 0) or len(n.origins) != 1 or
                       is_item_length(next(iter(n.origins))) for n in read):
        return None
    origins = tuple(next(iter(n.origins)) if isinstance(n, Length) else None
                    for n in shape)
    leaves = set(o[0] for o in origins if o is not None)
    leaf = leaves.pop()
    if leaves or leaf >= len(recorder.input_arrays):
        return None
    recorded = tuple(int.__int__(n) for n in shape)

    def drawn(x):
        again, kw = placed(tuple(n if o is None else x.shape[o[1]]
                                 for n, o in zip(recorded, origins)))
        return draw(*again, **kw)
    return drawn, leaf, origins, placed(recorded)


def _draw_shape(draw, args, kwargs):
    """``(shape, placed)``: the shape a random draw takes (its ``size``,
    a tuple among its arguments, or the sizes ``randn`` and ``rand``
    take), and ``placed(shape)``, its arguments with another shape; or
    ``(None, None)``."""
    size = kwargs.get('size')
    if isinstance(size, Length):
        return (size,), lambda s: (args, dict(kwargs, size=s[0]))
    if isinstance(size, (tuple, list)):
        return tuple(size), lambda s: (args, dict(kwargs, size=s))
    for k, arg in enumerate(args):
        if isinstance(arg, (tuple, list)) and contained(arg, 1):
            return tuple(arg), lambda s: (args[:k] + (s,) + args[k + 1:],
                                          kwargs)
    if getattr(draw, '__name__', None) in ('randn', 'rand') and \
            all(type(n) is int or isinstance(n, Length) for n in args):
        return tuple(args), lambda s: (s, kwargs)
    return None, None


def _followed_axes(kernel, in_arrays, origins, out_arrays):
    """The origins of each output's axes, as the kernel's rule for other
    rows (``Kernel.lengths``, which a program serving every size follows:
    a convolution's or a pooling's batch, a reduction's kept axes) maps
    its inputs' axes of each origin to them, one to one."""
    found = [[None] * array.ndim for array in out_arrays]
    for origin in set(o for axes in origins if axes for o in axes
                      if o is not None and not is_item_length(o)):
        rows = []
        for array, axes in zip(in_arrays, origins):
            on = [k for k, o in enumerate(axes or ()) if o == origin]
            rows.append(ops.Rows(((origin[0], array.shape[on[0]]),),
                                 on[0], also=tuple(on[1:])) if on else None)
        following = ops.follow_kernel(kernel, rows)
        for kept, r in zip(found, following.outputs if following else ()):
            if r is not None and r.count() == (((origin[0], 1),), 0) and \
                    not r.widest:  # (the longest item's rows: not its)
                for axis in r.axes:
                    kept[axis] = origin
    return found


def inferred_sizes(in_shape, shape):
    """The sizes in ``shape``, a reshape's target, that its kernel infers
    from its input's rows where they follow: a product of sizes on the
    first axis; where the reshape (of ``in_shape``, if given) only
    regroups runs of axes (``array_ops.regrouped``), each merged axis,
    and each part of a split one (its kernel then reads them from its
    input when run: the first part, or the second where the rows were
    merged in after the first, ``(B * T, H)`` to ``(B, T, H)``); both
    parts of a split first axis where axes of size one keep it from
    regrouping only (``(B * T, 1)`` to ``(B, T, 1)``)."""
    if not isinstance(shape, (tuple, list)) or not shape:
        return []
    found = regrouped = None
    ints = tuple(int.__int__(n) for n in shape)
    if in_shape is not None:
        regrouped = array_ops.regrouped(in_shape, ints)
    if regrouped is not None and regrouped[0] == 'merge':
        found = list(shape)
    elif regrouped is not None:
        found = [shape[a] for run in regrouped[1] for a in run]
    elif in_shape is not None and \
            array_ops.splits_first_in_two(in_shape, ints):
        found = list(shape[:2])
    else:
        found = [shape[0]] if getattr(shape[0], 'product', False) else []
    return [n for n in found if isinstance(n, Length)]


def note_reshaped(recorder, array, shape, node, what, loc):
    """Notes the sizes in ``shape``, the target of NumPy's reshape of
    ``array`` (``node``: ``x.reshape(len(x), -1)``): those its kernel
    infers from the rows of ``array``'s own axes (:func:`inferred_sizes`)
    as the rows of ``node`` (``Use.rows_of``, as an ``F.reshape``'s),
    the others as used."""
    own = set(recorder.length_leaves.get(id(array)) or ())
    inferred = inferred_sizes(array.shape, shape)
    for n in contained(shape):
        use = n.use(what, loc)
        if any(n is m for m in inferred) and set(use.origins) <= own:
            use = use._replace(rows_of=node)
        recorder.length_uses.append(use)


def _sized_axes(shape):
    """The origin of each size of ``shape`` that is an argument's size
    itself (``T``, not ``T * B``), else ``None``."""
    return tuple(next(iter(n.origins))
                 if isinstance(n, Length) and n.affine == (1, 0) and
                 not is_item_length(next(iter(n.origins))) else None
                 for n in shape)


def _past_unit_axes(in_shape, shape, origins):
    """The origins of the axes of a reshape of ``in_shape`` to ``shape``
    that only adds and removes axes of size one (``F.squeeze(x, 0)``):
    the other axes keep theirs."""
    unit = array_ops.unit_axes_of_reshape(in_shape, shape)
    if unit is None:
        return ()
    added, removed = unit
    kept = [o for k, o in enumerate(origins) if k not in removed]
    for axis in added:
        kept.insert(axis, None)
    return tuple(kept)


def _same_axes(shape, in_arrays, origins):
    """The origins of an output of ``shape`` along each axis: those of
    the inputs of as many axes and that size there, where they agree."""
    kept = []
    for axis, n in enumerate(shape):
        found = set(o[axis] for a, o in zip(in_arrays, origins)
                    if o is not None and a.ndim == len(shape) and
                    a.shape[axis] == n)
        kept.append(found.pop() if len(found) == 1 else None)
    return kept


#: Python's own ``len``: a recording patches the builtin, whose patch
#: asks :func:`note_loop_filled`.
_count = len


def loop_filled(recorder, items, frame):
    """The argument axis of the loop (``control.LoopRun.trip``) that filled
    the list ``items`` of ``frame`` from empty, one item per step, if it
    ran over all of one; or of the loop of a helper that filled and
    returned it; else ``None``."""
    trip = _filling_trip(recorder, items, frame)
    return None if trip is None or trip.offset else trip.where


def _filling_trip(recorder, items, frame):
    """The ``TripSource`` of :func:`loop_filled`'s loop, which may run over
    an argument's axis less a few steps (``for x in xs[1:]``), or
    ``None``."""
    trip = _filled_in_frame(recorder, items, frame)
    if trip is not None:
        return trip
    run = next((r for r in reversed(recorder.loop_runs)
                if _filled_by(r, items)), None)
    return None if run is None or run.trip.kind != 'dim' else run.trip


def forgive_filled(recorder):
    """Drops the use of an argument's size that made a list (``ys = [None]
    * T``) which a loop over that axis then filled, one item per step
    (``ys[t] = h``): its length is the loop's trip count, which ``len()``
    of it then reads."""
    for made, use in recorder.sized_lists:
        run = next((r for r in recorder.loop_runs if _filled_by(r, made)),
                   None)
        if run is not None and run.trip is not None and \
                run.trip.kind == 'dim' and not run.trip.offset and \
                use.origins == (run.trip.where,):
            recorder.length_uses[:] = [u for u in recorder.length_uses
                                       if u is not use]
            recorder.length_leaves[id(made)] = (run.trip.where,)


def _filled_by(run, items):
    """Did ``run`` fill the list ``items``, as it is now
    (``control.LoopRun.filled``)?"""
    return run.filled.get(id(items)) == _count(items)


def note_consumed(recorder, items):
    """Notes the list ``items``, which a loop filled, as taken whole by an
    op (``F.crf1d`` of a loop's scores): the source's check of the loop
    lets that use of the list's name be."""
    for run in recorder.loop_runs:
        name = run.filled_names.get(id(items))
        if name is not None and _filled_by(run, items):
            run.consumed.add(name)


def _filled_in_frame(recorder, items, frame):
    """:func:`_filling_trip` of a loop of ``frame``'s own code."""
    run = next((r for r in reversed(recorder.loop_runs)
                if r.code is frame.f_code), None)
    if run is None or run.exit != 'done' or run.trip is None or \
            run.trip.kind != 'dim' or \
            run.n_iterations != _count(items) or not run.snapshots:
        return None
    if run.site.kind == 'comp':  # hs = [f(x) for x in xs]
        name = loop_analysis.comprehension_list_name(run.code,
                                                     run.site.header)
        found = name is not None and frame.f_locals.get(name) is items
        return run.trip if found else None
    names = [name for name in loop_analysis.appended_lists(
        run.code, run.site.header) if frame.f_locals.get(name) is items]
    at_start = run.snapshots[0].get(names[0]) if names else None
    if at_start is None or at_start[0] != 'list' or at_start[2]:
        return None  # (not filled by that loop from empty)
    return run.trip


def note_loop_filled(recorder, items, frame):
    """Notes the length of the list ``items`` of ``frame`` as the argument
    axis of the loop that filled it (:func:`loop_filled`): ``len(hs)``
    then reads a :class:`Length`."""
    if type(items) is list and id(items) not in recorder.length_leaves:
        trip = _filling_trip(recorder, items, frame)
        if trip is not None:  # (xs[1:]: a step less)
            recorder.length_leaves[id(items)] = (trip.where,)
            if trip.offset:
                recorder.length_shifts[id(items)] = -trip.offset


def note_stacked(recorder, items, axis, result, frame):
    """Notes ``result``, ``F.stack(items, axis)`` in ``frame``, where
    ``items`` is the list a loop that ran over an argument's axis
    (``control.LoopRun.trip``) filled, one item per step: its ``axis``
    is that argument's, and its other axes the items' where all have
    them (``enc.shape`` of ``enc = F.stack(hs)`` then reads Lengths)."""
    where = loop_filled(recorder, items, frame)
    if where is None:
        return
    kept = set(recorder.length_leaves.get(id(data_of(x))) for x in items)
    item = kept.pop() if len(kept) == 1 else None
    item = item or (None,) * (data_of(result).ndim - 1)
    recorder.length_leaves[id(data_of(result))] = \
        tuple(item[:axis]) + (where,) + tuple(item[axis:])


def data_of(x):
    """The array of ``x``, a Variable (not read through its patched
    ``array``) or an array."""
    return x._data[0] if isinstance(x, chainer.Variable) else x


def note_permuted(recorder, array, axes, result):
    """Notes ``result``, ``array``'s axes in the order ``axes`` (a
    transpose): the arguments' axes among them are ``result``'s too
    (``xs.shape[0]`` of a batch-first ``xs`` made time-major is its
    length); an axis some rows more or fewer than the argument's
    (``length_shifts``: ``xs[1:]``) moved off the first is read as
    those rows (``cut_axes``)."""
    origins = recorder.length_leaves.get(id(array))
    if origins is None or len(origins) != len(axes):
        return
    kept = tuple(origins[a] for a in axes)
    shift = recorder.length_shifts.get(id(array), 0)
    cut = dict(recorder.cut_axes.get(id(array), {}))
    if shift and axes[0] == 0:
        recorder.length_shifts[id(result)] = shift
    elif shift:
        kept = _shift_kept_first(kept, origins[0])
        if not is_item_length(origins[0]):
            cut[0] = (origins[0], shift)
    moved = dict((k, cut[a]) for k, a in enumerate(axes) if a in cut)
    if moved:
        recorder.cut_axes[id(result)] = moved
    recorder.length_leaves[id(result)] = kept


def rows_split_axis(x, sections, axis):
    """The axis (not negative) that ``F.split_axis(x, sections, axis)``
    cuts into its rows one by one, ``sections`` being the size the
    forward read of that axis, an argument's (``F.split_axis(xs, T,
    axis=1)`` of ``T = xs.shape[1]``); else ``None``."""
    if type(axis) is not int or not isinstance(sections, Length) or \
            sections.affine != (1, 0):
        return None
    at = axis + x.ndim if axis < 0 else axis
    origin = origin_of(x, at) if 0 <= at < x.ndim else None
    return at if origin is not None and \
        sections.origins == frozenset([origin]) else None


def origin_of(value, axis):
    """``(leaf, axis)`` of the argument whose axis is ``value``'s axis
    ``axis`` (an argument's array, or one an index or a transpose of it
    kept), while recording; else ``None``."""
    recorder = _state.recorder
    if recorder is None:
        return None
    origins = recorder.length_leaves.get(id(data_of(value)))
    if origins is None or not 0 <= axis < len(origins):
        return None
    return origins[axis]


def _kept_axes(index, origins):
    """The origins of the axes of ``x[index]`` for those of ``x``'s axes:
    an axis taken whole (``:``, ``::-1``) keeps its own, an inserted one
    (``None``) or one sliced has none; ``None`` for an index that is not
    basic."""
    index = fingerprints.written_out(index, len(origins))
    kept, source = [], iter(origins)
    for item in index:
        if item is None:
            kept.append(None)
        elif isinstance(item, slice):
            whole = item.start is None and item.stop is None and \
                item.step in (None, 1, -1)
            origin = next(source, None)
            kept.append(origin if whole else None)
        elif isinstance(item, (int, numpy.integer)) and \
                not isinstance(item, bool):
            next(source, None)
        else:
            return None
    return tuple(kept) + tuple(source)


def note_passed(what, args, kwargs, depth=1):
    """Notes the Lengths in a call's arguments as passed to ``what``, if
    the code ``depth`` frames up is the forward's; and the varying numbers
    (``scalars``), which NumPy's makers read in C."""
    recorder = _state.recorder
    if recorder is not None:
        recorder.note_constants((args, kwargs), 'passed to %s' % what)
    if recorder is None or not (contained(args) or contained(kwargs)):
        return
    loc = forward_line(depth)
    if loc is not None:
        for values in (args, kwargs):
            recorder.length_uses += uses_in(values, 'passed to %s' % what,
                                            loc)


class MadeRows(collections.namedtuple(
        'MadeRows', 'array leaf axis rest fill uses')):
    """An array the forward made with CuPy (``cupy.zeros((len(x), H))``;
    NumPy's are :class:`MadeSized`) whose first axis is an argument's
    size: ``array``, made with the size of axis ``axis`` of the argument
    ``leaf``, then ``rest``, filled with ``fill``; the ``uses`` of that
    size its making noted. A program may make it again at run time from
    that argument (``runtime.batch``). ``leaf`` is ``None`` for an array
    Chainer's code made, with a size it read as a plain int."""

    __slots__ = ()


# The makers whose arrays :class:`MadeRows` may make again: their fill.
_FILLS = {'zeros': lambda args, kwargs: 0, 'ones': lambda args, kwargs: 1,
          'full': lambda args, kwargs: args[1] if len(args) > 1 else
          kwargs.get('fill_value')}


def made_noting(name, fn, args, kwargs, depth=1, module='numpy'):
    """``fn(*args, **kwargs)`` for the array maker ``name`` of NumPy (or
    CuPy: ``module``), its argument sizes noted as passed to it
    (:func:`note_passed`); an array made with arguments' sizes, noted as
    :class:`MadeSized` (or with the first axis of one, by CuPy, as
    :class:`MadeRows`)."""
    recorder = _state.recorder
    before = 0 if recorder is None else len(recorder.length_uses)
    note_passed('%s.%s' % (module, name), args, kwargs, depth)
    array = traced.made_view(fn(*args, **kwargs), depth)
    if recorder is None:
        return array
    recorder.made_arrays[id(array)] = (array, frozenset(
        o for use in recorder.length_uses[before:] for o in use.origins))
    if len(recorder.length_uses) > before:
        uses = tuple(recorder.length_uses[before:])
        sized = _made_sized(name, array, args, kwargs, uses, recorder)
        if sized is not None:
            recorder.note_made_sized(sized)
        made = None if sized is not None else \
            _made_rows(name, array, args, kwargs, uses)
    else:  # made of no argument's size: of a value's shape, or by Chainer
        sized = _made_sized(name, array, args, kwargs, (), recorder) \
            if forward_line(depth - 1) is not None else None
        if sized is not None:
            recorder.note_made_sized(sized)
        made = None if sized is not None else \
            _made_by_a_library(name, array, args, kwargs, depth)
    if made is not None:
        recorder.made_rows.append(made)
    return array


def _made_by_a_library(name, array, args, kwargs, depth):
    """The :class:`MadeRows` of an array that Chainer's code filled
    (``L.LSTM``'s first cell state, ``zeros((batch, H))``), whose first
    axis may be the batch of an argument it does not name (``leaf`` and
    ``axis`` ``None``; ``runtime.batch`` takes it for one whose size it
    has); else ``None``."""
    if name not in _FILLS or forward_line(depth) is not None or \
            not _is_array(array) or array.ndim < 1:
        return None
    fill = _FILLS[name](args, kwargs)
    if not isinstance(fill, (int, float)):
        return None
    return MadeRows(array, None, None, array.shape[1:], fill, ())


def _made_rows(name, array, args, kwargs, uses):
    """The :class:`MadeRows` of an array made by ``name``, or ``None``:
    its shape's first entry an argument's size, as read, and no other size
    among its arguments."""
    if name not in _FILLS:
        return None
    shape = args[0] if args else kwargs.get('shape')
    shape = (shape,) if isinstance(shape, int) else shape
    if not isinstance(shape, (tuple, list)) or not shape:
        return None
    first = shape[0]
    if not isinstance(first, Length) or first.affine != (1, 0):
        return None
    (leaf, axis), = first.origins
    others = [a for a in args[1:]] + [v for k, v in kwargs.items()
                                      if k != 'shape']
    if contained(list(shape[1:])) or contained(others) or \
            not _is_array(array):
        return None
    return MadeRows(array, leaf, axis, tuple(int(n) for n in shape[1:]),
                    _FILLS[name](args, kwargs), uses)


class MadeSized(collections.namedtuple(
        'MadeSized', 'array sizes leaves fill uses value like',
        defaults=(None,))):
    """An array the forward made with NumPy of a shape holding arguments'
    sizes it read (``numpy.ones((len(xs), B, H))``): ``sizes`` as
    ``ops.array.BroadcastSized`` has them, of the arguments ``leaves``,
    filled with ``fill``; the ``uses`` of those sizes its making noted;
    the ``value`` of a node making it again from those arguments, recorded
    where it was made. Read by an op while it holds its fill, it is that
    value (``trace.Recorder.value_of``), and the program follows their
    sizes. ``like``: instead of arguments, the value whose whole shape the
    forward read and made it of (``xp.full(scores.shape, -1e9)``), which
    ``sizes`` then name as the first array's. A ``fill`` of
    :data:`ARANGE`: ``numpy.arange(T)``, the positions of the steps."""

    __slots__ = ()

    def unchanged(self):
        """Does the array made hold what it was made with still?"""
        array = self.array.view(numpy.ndarray)
        if self.fill is ARANGE:
            return numpy.array_equal(array.reshape(-1),
                                     numpy.arange(array.size))
        return bool((array == self.fill).all())

    def kernel(self):
        """The kernel making it again."""
        if self.fill is ARANGE:
            return array_ops.arange_sized(self.sizes, self.array.dtype)
        return array_ops.full_sized(self.sizes, self.fill, self.array.dtype,
                                    numpy)


#: The :attr:`MadeSized.fill` of ``numpy.arange(n)``.
ARANGE = 'arange'


def _made_sized(name, array, args, kwargs, uses, recorder):
    """The :class:`MadeSized` of an array made by ``name``, or ``None``."""
    if name == 'arange' and type(array) is traced.MadeArray:
        return _made_arange(array, args, kwargs, uses, recorder)
    if name not in _FILLS or type(array) is not traced.MadeArray:
        return None
    shape = args[0] if args else kwargs.get('shape')
    shape = (shape,) if isinstance(shape, int) else shape
    others = [a for a in args[1:]] + [v for k, v in kwargs.items()
                                      if k != 'shape']
    fill = _FILLS[name](args, kwargs)
    if contained(others) or not isinstance(fill, (int, float)):
        return None
    like = _made_like(array, shape, fill, uses)
    if like is not None and not all(isinstance(n, Length) for n in shape):
        return like  # (a value's shape: its other axes too)
    sized = argument_sizes(shape, recorder)
    if sized is None:
        return like
    return MadeSized(array, sized[0], sized[1], fill, uses, None)


def _made_arange(array, args, kwargs, uses, recorder):
    """The :class:`MadeSized` of ``numpy.arange(T)`` (or ``arange(0,
    T)``, a ``dtype`` given or not) of an argument's size ``T``, or of a
    padded block's width (a :class:`SizeOf`); or ``None``."""
    if set(kwargs) - set(['dtype']) or len(args) not in (1, 2) or \
            len(args) == 2 and (isinstance(args[0], Length) or args[0] != 0):
        return None
    width = width_of(args[-1])
    if width is not None:
        return MadeSized(array, ((0, width[1]),), (), ARANGE, uses, None,
                         width[0])
    sized = argument_sizes(args[-1:], recorder)
    return None if sized is None else \
        MadeSized(array, sized[0], sized[1], ARANGE, uses, None)


def _made_like(array, shape, fill, uses):
    """The :class:`MadeSized` of an array made of the whole shape the
    forward read of a value it computed (:func:`shape_source`), or
    ``None``."""
    source = shape_source(shape) if isinstance(shape, tuple) else None
    if source is None:
        return None
    return MadeSized(array, tuple((0, axis) for axis in range(len(shape))),
                     (), fill, uses, None, data_of(source))


def view_sizes(made, view):
    """The sizes (as :class:`MadeSized` has them) of ``view``, the array
    ``made`` made or a view of it, whose elements all hold the same fill
    as long as it does: per axis, the made array's size on the axis it
    steps through whole, else a number where that is one; ``None`` where
    an axis is a part of one (``w[:3]``, ``w[::-1]``)."""
    base = made.array
    if view.dtype != base.dtype:
        return None
    sizes, taken = [], set()
    for n, stride in zip(view.shape, view.strides):
        axis = next((a for a in range(base.ndim) if a not in taken and
                     base.shape[a] == n and base.strides[a] == stride), None)
        if axis is None and n != 1:
            return None
        if axis is None:
            sizes.append(1)
            continue
        taken.add(axis)
        sizes.append(made.sizes[axis])
    return tuple(sizes)


def argument_sizes(shape, recorder):
    """For a ``shape`` the forward made of numbers and arguments' sizes it
    read, at least one, each plus a number or not (``(len(xs), B, H)``,
    ``(B, T - 1)``): ``(the sizes, as ops.array.BroadcastSized takes
    them, the leaves of the arguments they are read from)``; else
    ``None``. ``None`` in ``shape`` stays (a broadcast's own size)."""
    if not isinstance(shape, (tuple, list)):
        return None
    sizes, leaves = [], []
    for n in shape:
        if n is None or not isinstance(n, Length):
            sizes.append(n if n is None else int(n))
            continue
        found = _argument_axis(n, recorder, leaves) \
            if n.affine is not None and n.affine[0] == 1 else None
        if found is None:
            return None
        sizes.append(found + (n.affine[1],) if n.affine[1] else found)
    return (tuple(sizes), tuple(leaves)) if leaves else None


def _argument_axis(n, recorder, leaves):
    """``(k, axis)``: the Length ``n`` (of one origin) is the size of
    ``axis`` of the ``k``-th of ``leaves``, the argument added to them if
    new; ``None`` where it is an item's length, or no argument's."""
    (leaf, axis), = n.origins
    if is_item_length((leaf, axis)) or leaf >= len(recorder.input_arrays):
        return None
    if leaf not in leaves:
        leaves.append(leaf)
    return leaves.index(leaf), axis


def index_from_the_end(x, index):
    """``x[index]`` where an int of the index, or a slice's bound, is the
    size of the axis it indexes less a number, not negative (``xs[T -
    1]``, ``xs[:T - 1]``, ``h[:, len(ws) - 2]`` where that axis follows
    ``T``'s argument's), or a slice's stop is that size (``xs[1:T]``):
    the index counted from the end instead (``xs[-1]``, ``xs[:-1]``,
    ``xs[1:]``), which reads the same at every size and uses no size;
    else ``index`` as it is."""
    entries = index if type(index) is tuple else (index,)
    if not contained(entries):
        return index
    entries = fingerprints.written_out(entries, data_of(x).ndim)
    axes = _axes_indexed(entries)
    if axes is None:
        return index
    found = []
    for entry, axis in zip(entries, axes):
        if isinstance(entry, slice):
            forwards = entry.step is None or (
                isinstance(entry.step, int) and entry.step > 0)
            entry = slice(_from_the_end(x, axis, entry.start, False),
                          _from_the_end(x, axis, entry.stop, forwards),
                          entry.step)
        elif axis is not None:
            entry = _from_the_end(x, axis, entry, False)
        found.append(entry)
    return tuple(found) if type(index) is tuple else found[0]


def _axes_indexed(entries):
    """The axis that each entry of a basic index with no ``...`` takes
    (``None`` for ``None``), or ``None`` where the index is not one."""
    if any(e is not None and not isinstance(e, (int, slice))
           for e in entries):
        return None
    axes, axis = [], 0
    for e in entries:
        axes.append(None if e is None else axis)
        axis += e is not None
    return axes


def _from_the_end(x, axis, n, may_be_whole):
    """``n`` counted from the end of ``x``'s ``axis`` where it is that
    axis's size less some, and not negative (a negative one counts from
    the end already, another number from it at other sizes); where
    ``may_be_whole`` (a forward slice's stop), the size itself is
    ``None``. Else ``n``."""
    array = data_of(x)
    if not isinstance(n, Length) or n.affine is None or \
            n.affine[0] != 1 or axis >= array.ndim or int.__int__(n) < 0:
        return n
    (origin,), size = n.origins, array.shape[axis]
    less = n.affine[1] - (shift_of(x) if axis == 0 else 0)
    if origin_of(x, axis) != origin or int.__int__(n) != size + less or \
            less > 0 or less == 0 and not may_be_whole:
        return n
    return None if less == 0 else less


def sized_index(index, recorder):
    """For ``x[index]`` whose slices' bounds hold arguments' sizes the
    forward read, each a size plus a number (``pe[:T]`` of a positional
    encoding, ``pe[:, :T]``): ``(the index with those bounds as
    ops.array.SizedBound, the leaves whose sizes they are)``; else
    ``None`` (no such bound, or another use of a size in it)."""
    entries = index if type(index) is tuple else (index,)
    leaves, found = [], []
    for entry in entries:
        if not isinstance(entry, slice):
            if entry is Ellipsis or contained(entry):
                return None
            found.append(entry)
            continue
        bounds = []
        for bound in (entry.start, entry.stop):
            sized = _sized_bound(bound, recorder, leaves)
            if sized is False:
                return None
            bounds.append(bound if sized is None else sized)
        if contained(entry.step):
            return None
        found.append(slice(bounds[0], bounds[1], entry.step))
    if not leaves:
        return None
    return (tuple(found) if type(index) is tuple else found[0]), \
        tuple(leaves)


def _sized_bound(bound, recorder, leaves):
    """A slice's bound as an ``ops.array.SizedBound`` (its leaf added to
    ``leaves``), ``None`` where it is no size, or ``False`` where it is a
    size the kernel cannot read (of an item, times a number)."""
    if not isinstance(bound, Length):
        return None
    found = _argument_axis(bound, recorder, leaves) \
        if bound.affine is not None and bound.affine[0] == 1 else None
    return False if found is None else \
        array_ops.SizedBound(found[0], found[1], bound.affine[1])


def _is_array(array):
    """A NumPy or a CuPy array."""
    return isinstance(array, (numpy.ndarray, chainer.backends.cuda.ndarray))


#: How many sizes other than the recorded one an entry checks against
#: eager, at their first calls (besides any size beyond those): a batch
#: size, the longest item's length, the items' total, the sum of two
#: lengths.
CHECKED_SIZES = 3


def to_check_size(size, seen):
    """Is a call at ``size`` checked against eager, the sizes ``seen``
    checked already: the first calls at :data:`CHECKED_SIZES` sizes other
    than recorded, at a size below or above all those checked (where a
    step of the size in Python that Length ints do not see, ``1.0 * B //
    32`` in a helper, goes the other way first), and at the first odd or
    even size (where such a use tells them apart, ``B % 2`` in C). A size
    baked into a program gives another result at any other size: the
    first other one is checked."""
    if size in seen:
        return False
    return len(seen) <= CHECKED_SIZES or not \
        min(seen) <= size <= max(seen) or \
        size % 2 not in set(n % 2 for n in seen)


def to_check_sizes(sizes, seen):
    """Is any of ``sizes`` (a tuple) one to check against eager
    (:func:`to_check_size`), ``seen`` the tuples of such sizes checked
    already, position by position?"""
    return any(to_check_size(n, set(s[k] for s in seen))
               for k, n in enumerate(sizes))


def contained(value, depth=3):
    """The Lengths in ``value``: a Length, or one in a tuple, list, dict or
    slice (to ``depth`` levels)."""
    if isinstance(value, Length):
        return [value]
    if depth <= 0:
        return []
    if isinstance(value, (tuple, list)):
        items = value
    elif isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, slice):
        items = (value.start, value.stop, value.step)
    else:
        return []
    return [n for item in items for n in contained(item, depth - 1)]


def uses_in(values, what, loc):
    """:class:`Use` of each Length in ``values``."""
    return [n.use(what, loc) for n in contained(values)]


def plain(value, uses, what, loc=None, depth=3):
    """``value`` with each Length in it (in tuples, lists and dicts, to
    ``depth`` levels) an int again, noting each as a :class:`Use`: what
    the forward returns or assigns keeps no Length past the recording.
    Likewise a ``scalars.Scalar`` becomes a float, its use noted.
    Lists and dicts are changed in place, tuples rebuilt."""
    if isinstance(value, Length):
        uses.append(value.use(what, loc))
        return int.__int__(value)
    if scalars.is_varying(value):
        return value.baked(what, loc)
    if depth <= 0:
        return value
    if type(value) is tuple:
        items = tuple(plain(v, uses, what, loc, depth - 1) for v in value)
        return value if all(a is b for a, b in zip(items, value)) \
            else items
    if type(value) is list:
        value[:] = [plain(v, uses, what, loc, depth - 1) for v in value]
    elif type(value) is dict:
        for k in value:
            value[k] = plain(value[k], uses, what, loc, depth - 1)
    return value


# --- sizes in float arithmetic with a Variable ----------------------------

def as_scalar(length, recorder, frame):
    """An argument's size in float arithmetic with a Variable (``loss /
    T``, ``h * B`` in the forward's code at ``frame``) as a
    ``scalars.Scalar`` computed at run time from the argument's shape by a
    ``python.size`` node: Chainer's operator takes it as an input of its
    node (``scalars.varying_constant``), and the program serves every
    length. ``None`` where ``length`` is neither ``a * size + b`` of one
    axis of an array argument nor an int times a product of such sizes
    (``x.size``). The operation's place in the source is noted
    (``recorder.size_operations``), as the source's own check of sizes
    in float arithmetic (``trip_counts.float_size_uses``) would count it
    as baked in."""
    found = _affine_size(length, recorder.graph.inputs) or \
        _product_size(length, recorder.graph.inputs) or \
        _sum_size(length, recorder.graph.inputs)
    if found is None:
        return None
    kernel, inputs = found
    return _size_scalar(kernel, inputs, length, recorder, frame,
                        _LengthUses(length))


def width_as_scalar(width, recorder, frame):
    """A padded block's width (a :class:`SizeOf`) in float arithmetic with
    a Variable (``F.sum(h) / enc.shape[1]``) as a ``scalars.Scalar`` read
    from that block's shape at run time, as :func:`as_scalar` reads an
    argument's size; ``None`` where the block is not a recorded value."""
    block, axis = width_of(width) or (None, None)
    value = recorder.values.get(id(block))
    if value is None:
        return None
    return _size_scalar(_linear_size(axis, 1, 0), [value], width,
                        recorder, frame, _WidthUses(recorder))


def _size_scalar(kernel, inputs, number, recorder, frame, uses):
    """The ``scalars.Scalar`` of ``number`` computed by a ``python.size``
    node of ``kernel`` from ``inputs``' shapes, its uses noted into
    ``uses``."""
    out = recorder.graph.add_value('temp', (), numpy.float64)
    _noted_alike(recorder, recorder.add_node(ir.Node(
        'python.size', kernel, inputs, [out], kernel.attrs,
        loc=(frame.f_code.co_filename, frame.f_lineno))),
        dict(kernel.attrs))
    recorder.size_operations.add(operation_position(frame))
    recorder.varying = True  # Scalars are about: note their uses
    return scalars.Scalar(float(int.__int__(number)), out, 'size', uses)


def _is_argument_axis(origin, inputs):
    """Is ``origin`` an axis of an array argument (not an item's
    length)?"""
    leaf, axis = origin
    return 0 <= leaf < len(inputs) and 0 <= axis < len(inputs[leaf].shape)


def _affine_size(length, inputs):
    """``(the python.size kernel, its inputs)`` of ``a * size + b`` of one
    argument axis, as a float; else ``None``."""
    if length.affine is None or \
            not _is_argument_axis(next(iter(length.origins)), inputs):
        return None
    (leaf, axis), = length.origins
    return _linear_size(axis, *length.affine), [inputs[leaf]]


def _linear_size(axis, a, b):
    """The ``python.size`` kernel of ``a`` times the size of its input's
    ``axis``, plus ``b``, as a float."""
    return ops.Kernel(
        _linear_reader(((axis, a),), b, float), {'axis': axis, 'a': a,
                                                 'b': b},
        onnx=_linear_to_onnx(((axis, a),), b, numpy.float64),
        lengths=_any_rows)


def _product_size(length, inputs):
    """:func:`_affine_size` of an int times a product of argument axes'
    sizes."""
    monomial = getattr(length, 'monomial', None)
    if monomial is None or not all(
            _is_argument_axis(o, inputs) for o in monomial[0]):
        return None
    powers, c = monomial
    leaves = sorted(set(leaf for leaf, _ in powers))
    factors = tuple((leaves.index(leaf), axis, power)
                    for (leaf, axis), power in sorted(powers.items())
                    if power)
    return ops.Kernel(
        _product_reader(factors, c), {'factors': factors, 'c': c},
        onnx=_product_to_onnx(factors, c), lengths=_any_rows), [
            inputs[leaf] for leaf in leaves]


def _product_reader(factors, c):
    """The kernel of a ``python.size`` node: ``c`` times the product of
    the sizes of axis ``axis`` of input ``k`` to the ``power`` (``(k,
    axis, power)`` each ``factors``), as a float."""
    def size(*xs):
        total = c
        for k, axis, power in factors:
            total *= xs[k].shape[axis] ** power
        return float(total)
    return size


def _product_to_onnx(factors, c):
    """The ONNX form of :func:`_product_reader`, a float64."""
    def convert(builder, ins, outs):
        total = builder.constant(numpy.asarray(c, numpy.int64))
        for k, axis, power in factors:
            for _ in range(power):
                total = builder.op('Mul', [total, _onnx_size(
                    builder, ins[k], axis)])[0]
        builder.op('Identity', [builder.cast(total, numpy.int64,
                                             numpy.float64)], outs)
    return convert


def as_run_time_int(length, recorder, loc):
    """``length`` computed at run time from the arguments' shapes, by a
    ``python.size`` node giving a 0-d int64 array (which a NumPy call the
    forward makes with it takes as a Python int again,
    ``traced.AsInt``); ``None`` where ``length`` is not a sum of multiples
    of the sizes of the arguments' axes (``Length.linear``)."""
    found = _linear_terms(length, recorder.graph.inputs)
    if found is None:
        return None
    axes, b, inputs = found
    array = traced.tagged(numpy.array(int.__int__(length), numpy.int64))
    made_by_node('python.size', _linear_reader(axes, b, _int64),
                 {'axes': axes, 'b': b},
                 _linear_to_onnx(axes, b, numpy.int64), inputs, array, loc,
                 _any_rows)
    return traced.AsInt(array)


def _linear_terms(length, inputs):
    """``((axis, a) of each term, b, the input of each term)`` of
    ``length``, a sum of multiples of the sizes of arguments' axes plus
    ``b`` (``Length.linear``: ``len(x0) + len(x1)`` of items recorded
    each as an input); ``None`` for another."""
    if getattr(length, 'linear', None) is None:
        return None
    terms, b = length.linear
    terms = sorted((origin, a) for origin, a in terms.items() if a)
    if not terms or any(not 0 <= leaf < len(inputs) or
                        not 0 <= axis < len(inputs[leaf].shape)
                        for (leaf, axis), _ in terms):
        return None  # (an item's length)
    return tuple((axis, a) for (_, axis), a in terms), b, [
        inputs[leaf] for (leaf, _), _ in terms]


def _sum_size(length, inputs):
    """:func:`_affine_size` of a sum of multiples of argument axes' sizes
    (:func:`_linear_terms`: the words of items recorded each as an input,
    ``sum(len(x) for x in xs)``)."""
    found = _linear_terms(length, inputs)
    if found is None:
        return None
    axes, b, inputs = found
    return ops.Kernel(_linear_reader(axes, b, float), {'axes': axes, 'b': b},
                      onnx=_linear_to_onnx(axes, b, numpy.float64),
                      lengths=_any_rows), inputs


def _int64(n):
    return numpy.array(n, numpy.int64)


def _linear_reader(axes, b, convert):
    """The kernel of a ``python.size`` node: the sum of ``a`` times the
    size of axis ``axis`` of each input (``axes``: ``(axis, a)`` each),
    plus ``b``, given to ``convert`` (``float``: a Python number)."""
    def size(*xs):
        return convert(sum(a * x.shape[axis] for x, (axis, a) in
                           zip(xs, axes)) + b)
    return size


def _linear_to_onnx(axes, b, dtype):
    """The ONNX form of :func:`_linear_reader`, its sum as ``dtype``."""
    def convert(builder, ins, outs):
        total = builder.constant(numpy.asarray(b, numpy.int64))
        for x, (axis, a) in zip(ins, axes):
            total = builder.op('Add', [total, builder.op('Mul', [
                _onnx_size(builder, x, axis),
                builder.constant(numpy.asarray(a, numpy.int64))])[0]])[0]
        builder.op('Identity', [builder.cast(total, numpy.int64, dtype)],
                   outs)
    return convert


def _onnx_size(builder, x, axis, shape=()):
    """ONNX: the size of axis ``axis`` of ``x``, an int64 of ``shape``
    (``()``, or ``(1,)`` to be joined with others)."""
    index = numpy.full(shape, axis, numpy.int64)
    return builder.op('Gather', [builder.op('Shape', [x])[0],
                                 builder.constant(index)], axis=0)[0]


#: How a use of a joined list's count by the forward iterating over it is
#: described (``joining``).
ITERATED = 'counted by iterating over the list'

#: The use of the number of a joined list's items a slice of them makes
#: (but all of them, or all reversed).
SLICED = 'read by slicing the list'


def note_item_lengths(items, lengths, shift=0):
    """Notes the first axis of each of a joined list's ``items`` (traced
    arrays or Variables) as the item's length, held in ``lengths``, the
    traced array of the items' lengths the call passes with the joined
    list (``joining``), plus ``shift`` (the items of ``F.concat([eos,
    y])`` of each item ``y``): ``len(x)`` of item ``k`` is a
    :class:`Length` of origin ``(the leaf of lengths, -1 - k)``
    (:func:`is_item_length`), which an array of all of them in order
    (:func:`sizes_array`) takes back."""
    recorder = _state.recorder
    leaf = leaf_of(lengths)
    recorder.item_lengths[leaf] = lengths
    for k, item in enumerate(items):
        array = array_of(item)
        recorder.length_leaves[id(array)] = ((leaf, -1 - k),) + \
            (None,) * (item.ndim - 1)
        if shift:
            recorder.length_shifts[id(array)] = shift


def array_of(x):
    """The array of ``x``, a Variable or an array."""
    return x.array if isinstance(x, chainer.Variable) else x


def leaf_of(array):
    """The index of the argument whose traced array ``array`` is."""
    recorder = _state.recorder
    return recorder.graph.inputs.index(recorder.values[id(array)])


def shifted_lengths(leaf, shift):
    """The traced array of the lengths of the items of the joined list
    whose lengths are the argument ``leaf``, each plus ``shift``: that
    argument, or its sum with ``shift`` (recorded once)."""
    recorder = _state.recorder
    lengths = recorder.item_lengths[leaf]
    if not shift:
        return lengths
    found = recorder.shifted_lengths.get((leaf, shift))
    if found is None:
        found = recorder.shifted_lengths[(leaf, shift)] = lengths + shift
        # (as many as the list's items: len() of segments cut at them)
        recorder.length_leaves[id(found)] = recorder.length_leaves[
            id(lengths)]
    return found


def is_item_length(origin):
    """Is ``origin`` a joined list item's length
    (:func:`note_item_lengths`)?"""
    return origin[1] < 0


def sizes_array(convert, sizes, args, kwargs, depth=1):
    """``numpy.array([len(x) for x in xs], dtype)`` by the forward's code
    (``depth`` frames up), each number the size of one axis of an array
    argument (the items of a list: their lengths): an array made on every
    call from those arguments' shapes by a ``python.sizes`` node, which
    the program runs at any lengths. ``None`` where ``sizes`` are not so,
    or the array is not one axis of ints or floats."""
    recorder = _state.recorder
    loc = forward_line(depth + 1)
    shift = _shift_of(sizes)
    origins = _origins_of_each(sizes, shift)
    if recorder is None or recorder.depth or not sizes or loc is None or \
            origins is None:
        return None
    array = convert([int.__int__(n) for n in sizes], *args, **kwargs)
    if not isinstance(array, numpy.ndarray) or array.ndim != 1 or \
            array.dtype.kind not in 'iuf':
        return None
    if any(is_item_length(origin) for origin in origins):
        return _joined_lengths(convert, origins, shift, args, kwargs, loc)
    if shift:
        return None
    inputs = recorder.graph.inputs
    if not all(0 <= leaf < len(inputs) for leaf, _ in origins):
        return None
    axes, dtype = tuple(axis for _, axis in origins), array.dtype
    return _lengths_array(made_by_node(
        'python.sizes', _sizes_reader(axes, dtype),
        {'axes': axes, 'dtype': dtype}, _sizes_to_onnx(axes, dtype),
        [inputs[leaf] for leaf, _ in origins], array, loc, _any_rows),
        origins, 0)


def _lengths_array(array, origins, shift):
    """``array``, the sizes ``origins`` (each plus ``shift``) in order,
    noted for ``numpy.cumsum`` to take for their offsets
    (:func:`offsets_of_lengths`)."""
    _state.recorder.length_arrays[id(array)] = (array, origins, shift)
    return array


def _origins_of_each(sizes, shift=0):
    """The origin of each of ``sizes``, where each is one argument's size
    as read (``len(x)``, ``x.shape[0]``), plus ``shift``; else
    ``None``."""
    if not all(type(n) is Length and n.affine == (1, shift) and
               len(n.origins) == 1 for n in sizes):
        return None
    return [next(iter(n.origins)) for n in sizes]


def _shift_of(sizes):
    """What the first of ``sizes`` adds to an argument's size it was read
    from (``len(y) + 1`` of ``F.concat([eos, y])``), or 0."""
    affine = getattr(sizes[0], 'affine', None) if sizes else None
    return affine[1] if affine is not None and affine[0] == 1 else 0


def made_by_node(op, fn, attrs, onnx, inputs, array, loc, rule=None):
    """``array``, as the output of a node ``op`` recorded to make it on
    every call from ``inputs`` by ``fn`` (with ``attrs``, its ONNX form
    ``onnx`` and ``Kernel.lengths`` ``rule``)."""
    recorder = _state.recorder
    result = traced.tagged(array)
    _noted_alike(recorder, recorder.add_node(ir.Node(
        op, ops.Kernel(fn, attrs, onnx=onnx, lengths=rule), inputs,
        recorder.bind_temps([result]), tuple(sorted(attrs.items())),
        loc=loc)), attrs)
    return result


def _noted_alike(recorder, node, attrs):
    """Notes what makes ``node``, computing sizes from its inputs, run
    the computation of another (``ir.fingerprints``): its op and
    ``attrs``. The nodes two iterations of a loop record so are alike
    (``loss += F.sum(h) / B`` in the body rolls)."""
    recorder.templates[node] = ('python', node.op,
                                tuple(sorted(attrs.items())))


def _joined_lengths(convert, origins, shift, args, kwargs, loc):
    """:func:`sizes_array` of the lengths of every item of a joined list
    (each plus ``shift``), in order: the conversion of the array of them
    the call passed; the forward's iterating over the list on that line
    made it, and is no use of the count. ``None`` for other lengths."""
    recorder = _state.recorder
    leaf = origins[0][0]
    if origins != [(leaf, -1 - k) for k in range(len(origins))] or \
            len(origins) != len(recorder.item_lengths[leaf]):
        return None
    _forget_iterated(recorder, [loc])
    forget_reads(recorder, origins)
    return _lengths_array(traced.record_conversion(
        'numpy.array', convert, shifted_lengths(leaf, shift), args, kwargs),
        origins, shift)


def _forget_iterated(recorder, locs, what=(ITERATED,)):
    """Forgets the forward's iterating over a joined list at ``locs`` (or
    slicing it: ``what``): it made the items' lengths taken back as an
    array of them all."""
    recorder.length_uses[:] = [use for use in recorder.length_uses
                               if use.what not in what or
                               use.loc not in locs]


def forget_reads(recorder, origins):
    """Forgets one read of each of the item lengths ``origins``, if any
    is left (a list of the lengths read once may make both their offsets
    and their array)."""
    reads = recorder.item_length_reads
    for origin in origins:
        read = next((r for r in reads if r[0] == origin), None)
        if read is not None:
            reads.remove(read)
            recorder.spent_reads.append(read)


def spend_reads(recorder, origins):
    """:func:`forget_reads` of ``origins``, read into a value made of all
    the items (a mean over each item's rows), and of the forward's
    iterating over the list on the lines that read them (``x_len =
    [len(x) for x in xs]``, each length dividing its item's sum; a length
    read there for anything else is left, and keeps the list item by
    item)."""
    _forget_iterated(recorder, _lines_spent(recorder, origins))


def _lines_spent(recorder, origins):
    """:func:`forget_reads` of ``origins``; the lines that read them (here
    or before)."""
    forget_reads(recorder, origins)
    return set(line for origin, line in recorder.spent_reads
               if origin in origins)


def offsets_array(cumsum, sizes, args, kwargs, depth=1):
    """``numpy.cumsum(x_len[:-1])`` by the forward's code (``depth`` frames
    up), ``x_len`` the lengths of every item of a joined list, in order
    (``[len(x) for x in xs]``; ``[]`` of the one joined list of a single
    item): the offsets at which ``F.split_axis`` cuts the items joined
    again, made on every call from the array of their lengths the call
    passed, by a ``python.offsets`` node. The last length, read on the
    same line as the others and left out, is taken for read into this
    array too. ``None`` for other sizes."""
    recorder = _state.recorder
    loc = forward_line(depth + 1)
    shift = _shift_of(sizes)
    origins = _origins_of_each(sizes, shift)
    if recorder is None or recorder.depth or args or \
            set(kwargs) - {'dtype'} or loc is None or origins is None:
        return None
    leaf = origins[0][0] if origins else _single_item_list(recorder)
    if leaf not in recorder.item_lengths:
        return _items_offsets(cumsum([int.__int__(n) for n in sizes],
                                     **kwargs), origins, shift) \
            if origins and _of_items(origins) else None
    count = len(recorder.item_lengths[leaf])
    dropped = len(origins) == count - 1
    counted = [(leaf, -1 - k) for k in range(len(origins) + dropped)]
    lines = [loc for origin, loc in recorder.item_length_reads
             if origin in counted]
    read = set(origin for origin, _ in recorder.item_length_reads)
    # (the last length read and left out: x_len[:-1]; or not read, of
    # the items but the last: [len(x) for x in xs[:-1]])
    last_read = not dropped or counted[-1] in read
    if origins != counted[:len(origins)] or len(counted) != count or \
            not read.issuperset(counted[:len(origins)]) or \
            dropped and (len(lines) != count - (not last_read) or
                         len(set(lines)) != 1):
        return None  # (not the lengths of all, or taken into offsets)
    forget_reads(recorder, counted)
    _forget_iterated(recorder, set(lines),
                     (ITERATED,) if last_read else (ITERATED, SLICED))
    array = cumsum([int.__int__(n) for n in sizes], **kwargs)
    return _offsets_made(shifted_lengths(leaf, shift), array, dropped, loc)


def offsets_of_lengths(cumsum, array, args, kwargs, depth=1):
    """``numpy.cumsum(x_len)`` by the forward's code (``depth`` frames up)
    of ``x_len``, the array of the lengths of every item of a joined list
    (:func:`sizes_array`): their offsets as :func:`offsets_array` makes
    them; ``None`` for other arrays."""
    recorder = _state.recorder
    loc = forward_line(depth + 1)
    found = None if recorder is None or recorder.depth or args or \
        kwargs or loc is None else recorder.length_arrays.get(id(array))
    if found is None or found[0] is not array:
        return None
    _, origins, shift = found
    offsets = cumsum(traced.untag(array))
    if _of_items(origins):
        return _items_offsets(offsets, origins, shift)
    if not all(is_item_length(origin) for origin in origins):
        return None  # (sizes of a stacked argument's axes)
    return _offsets_made(shifted_lengths(origins[0][0], shift), offsets,
                         False, loc)


def _offsets_made(lengths, array, dropped, loc):
    """``array``, the offsets of items of ``lengths`` (a traced array; but
    the last item's, ``dropped``), as made on every call from them by a
    ``python.offsets`` node, noted for ``F.split_axis``."""
    recorder = _state.recorder
    result = made_by_node(
        'python.offsets', _offsets_reader(dropped, array.dtype),
        {'dropped': dropped, 'dtype': array.dtype},
        _offsets_to_onnx(dropped, array.dtype),
        [recorder.values[id(lengths)]], array, loc)
    recorder.offsets[id(result)] = (result, lengths, array.tolist())
    return result


def offsets_but_the_last(offsets, index, depth=1):
    """``offsets[:-1]`` by the forward's code (``depth`` frames up) of the
    offsets of every item of a joined list (``numpy.cumsum(x_len)[:-1]``):
    those offsets made without the last, as ``numpy.cumsum(x_len[:-1])``
    gives them; else ``None``."""
    recorder = _state.recorder
    found = None if recorder is None else \
        _unwritten(recorder.offsets.get(id(offsets)))
    if found is None or found[0] is not offsets or found[1] is None or \
            index != slice(None, -1) or \
            len(found[2]) != len(traced.untag(found[1])):
        return None
    loc = forward_line(depth + 1)
    return None if loc is None else _offsets_made(
        found[1], traced.untag(offsets)[:-1].copy(), True, loc)


def noted_offsets(indices):
    """What ``recorder.offsets`` notes of ``indices``, or of the offsets
    it is all but the last of (``numpy.cumsum(x_len)[:-1]`` of a list's
    items recorded one by one: NumPy's slice of them); else ``None``."""
    recorder = _state.recorder
    found = recorder.offsets.get(id(indices))
    base = getattr(indices, 'base', None)
    if found is not None or not isinstance(indices, numpy.ndarray) or \
            base is None:
        return _unwritten(found)
    whole = recorder.offsets.get(id(base))
    if whole is None or whole[0] is not base or whole[1] is not None or \
            indices.ndim != 1 or len(indices) != len(base) - 1 or \
            indices.ctypes.data != base.ctypes.data:
        return None
    return _unwritten((indices, None, whole[2][:-1]))


def _unwritten(found):
    """``found``, what ``recorder.offsets`` notes of offsets, where the
    forward did not write into them since (``sections[0] = 1``); else
    ``None``."""
    if found is None or traced.untag(found[0]).tolist() != found[2]:
        return None
    return found


def offsets_converted(offsets, args, kwargs):
    """``offsets.astype(dtype)`` by the forward's code of the offsets of a
    joined list's items (:func:`offsets_array`): those offsets of that
    type; ``None`` for other arrays."""
    found, loc = _offsets_read(offsets)
    if found is None:
        return None
    array = traced.untag(offsets).astype(*args, **kwargs)
    if array.dtype.kind not in 'iu':
        return None
    count = traced.untag(found[1]).shape[0]
    return _offsets_made(found[1], array, len(found[2]) < count, loc)


def running_sums(offsets):
    """``offsets.tolist()`` by the forward's code of the offsets of a
    joined list's items (:func:`offsets_array`): each a :class:`Length`,
    the sum of the lengths of the items up to it, which ``F.split_axis``
    takes back as those offsets (:func:`offsets_of_sums`); ``None`` for
    other arrays."""
    found, _ = _offsets_read(offsets)
    if found is None:
        return None
    leaf, shift = _leaf_and_shift(_state.recorder, found[1])
    return _running_sums([(leaf, -1 - k) for k in range(len(found[2]))],
                         shift, found[2])


def _offsets_read(offsets):
    """``(what recorder.offsets notes of them, the line)`` where
    ``offsets`` are the offsets of a joined list's items as made
    (:func:`offsets_array`; not written into since) and the forward's
    code (two frames above the caller) reads them; else ``(None,
    None)``."""
    recorder = _state.recorder
    found = None if recorder is None else \
        _unwritten(recorder.offsets.get(id(offsets)))
    loc = forward_line(3)
    if found is None or found[0] is not offsets or found[1] is None or \
            loc is None:
        return None, None
    return found, loc


def _leaf_and_shift(recorder, lengths):
    """``(leaf, shift)`` of the traced array of a joined list's item
    lengths, each plus ``shift`` (:func:`shifted_lengths`)."""
    for leaf, array in recorder.item_lengths.items():
        if array is lengths:
            return leaf, 0
    return next(key for key, array in recorder.shifted_lengths.items()
                if array is lengths)


def _running_sums(origins, shift, values):
    """The :class:`Length` ``values``, each the sum of the sizes
    ``origins`` up to it, each plus ``shift``."""
    uses = _state.recorder.length_uses
    return [Length(n, frozenset(origins[:k + 1]), uses,
                   (1, shift) if k == 0 else None, False,
                   (dict.fromkeys(origins[:k + 1], 1), (k + 1) * shift))
            for k, n in enumerate(values)]


def offsets_of_sums(sections, depth=1):
    """``sections`` given to ``F.split_axis`` by the forward's code
    (``depth`` frames up) where they are the running sums of the lengths
    of all the items of a list but the last, in order
    (``list(itertools.accumulate(len(x) for x in xs[:-1]))``, or
    :func:`running_sums`): the offsets of the items as
    :func:`offsets_array` makes them. The reads of those lengths (here,
    or into an array or offsets before), and the forward's iterating over
    the list on the lines that read them, or in a loop adding them up
    (``for x in xs[:-1]: total += len(x); offsets.append(total)``), made
    the offsets. ``None`` for other sections."""
    recorder = _state.recorder
    loc = forward_line(depth + 1)
    found = None if recorder is None or recorder.depth or loc is None \
        else _running_origins(sections)
    if found is None:
        return None
    origins, shift = found
    values = [int.__int__(n) for n in sections]
    if _of_items(origins):
        return _items_offsets(values, origins, shift)
    leaf = origins[0][0]
    if origins != [(leaf, -1 - k) for k in range(len(origins))] or \
            leaf not in recorder.item_lengths or traced.untag(
                recorder.item_lengths[leaf]).shape[0] != len(origins) + 1:
        return None
    lines = _lines_spent(recorder, origins)
    loops = set(use.loc for use in recorder.length_uses
                if use.what in (ITERATED, SLICED) and
                loop_analysis.sums_lengths_only(use.loc, lines))
    _forget_iterated(recorder, lines | loops, (ITERATED, SLICED))
    return _offsets_made(shifted_lengths(leaf, shift),
                         numpy.array(values, numpy.int64), True, loc)


def _running_origins(sections):
    """``(origins, shift)`` where ``sections`` (a list or tuple) are the
    running sums of the sizes ``origins`` (each a different one), each
    plus ``shift``: the first is the first size, the next adds the next;
    else ``None``."""
    if type(sections) not in (list, tuple) or not sections:
        return None
    origins, shift = [], None
    for k, n in enumerate(sections):
        if type(n) is not Length or n.linear is None:
            return None
        terms, b = n.linear
        added = [origin for origin in terms if origin not in origins]
        if len(terms) != k + 1 or len(added) != 1 or \
                any(a != 1 for a in terms.values()):
            return None
        origins.append(added[0])
        shift = b if shift is None else shift
        if b != (k + 1) * shift:
            return None
    return origins, shift


def _single_item_list(recorder):
    """The leaf of the lengths of the one joined list of a single item
    whose item's length the forward read (and did not take into offsets
    yet), or ``None``."""
    leaves = set(origin[0] for origin, _ in recorder.item_length_reads
                 if len(recorder.item_lengths[origin[0]]) == 1)
    return leaves.pop() if len(leaves) == 1 else None


def _of_items(origins):
    """Are ``origins`` the first axes of arguments, each another's (the
    items of a list recorded item by item)?"""
    return all(axis == 0 and leaf >= 0 for leaf, axis in origins) and \
        len(set(origins)) == len(origins)


def _items_offsets(offsets, origins, shift):
    """The ``offsets`` (ints, or NumPy's array of them) of the items of a
    list recorded item by item, the running sums of the sizes ``origins``
    of their first axes, each plus ``shift``: NumPy's array, noted
    (``recorder.offsets``, without a leaf) for ``F.split_axis`` to tell a
    cut at them (``joining`` then joins the list)."""
    array = numpy.asarray(offsets).view(ItemOffsets)
    array.origins, array.shift = origins, shift
    _state.recorder.offsets[id(array)] = (array, None, array.tolist())
    return array


class ItemOffsets(numpy.ndarray):
    """The offsets of the items of a list recorded item by item
    (:func:`offsets_array`), whose ``tolist()`` (or iteration) by the
    forward's code gives the running sums of the items' lengths
    (:class:`Length`) that ``F.split_axis`` takes back
    (:func:`offsets_of_sums`), and whose ``astype`` to ints such
    offsets."""

    origins, shift = None, 0  # of the sizes summed (_items_offsets)

    def tolist(self):
        summed, values = self._summed(), numpy.ndarray.tolist(self)
        return values if summed is None else _running_sums(*summed, values)

    def astype(self, *args, **kwargs):
        summed = self._summed()
        array = numpy.ndarray.astype(self.view(numpy.ndarray), *args,
                                     **kwargs)
        return array if summed is None or array.dtype.kind not in 'iu' \
            else _items_offsets(array, *summed)

    def __iter__(self):
        summed = self._summed()
        return numpy.ndarray.__iter__(self) if summed is None else iter(
            _running_sums(*summed, numpy.ndarray.tolist(self)))

    def _summed(self):
        """``(origins, shift)`` of the sizes these offsets sum, where the
        forward's code (two frames up) reads them while recording; else
        ``None``."""
        recorder = _state.recorder
        found = None if recorder is None or recorder.depth or \
            forward_line(2) is None else noted_offsets(self)
        whole = self if self.origins is not None else self.base
        origins = getattr(whole, 'origins', None)
        if found is None or origins is None:
            return None
        return origins[:len(found[2])], whole.shift


def _offsets_reader(dropped, dtype):
    def offsets(lengths):
        found = numpy.cumsum(lengths).astype(dtype)
        return found[:-1] if dropped else found
    return offsets


def _offsets_to_onnx(dropped, dtype):
    def convert(builder, ins, outs):
        found = builder.op('CumSum', [ins[0], builder.constant(
            numpy.asarray(0, numpy.int64))])[0]
        if dropped:
            found = builder.op('Slice', [found, builder.int64s([0]),
                                         builder.int64s([-1]),
                                         builder.int64s([0])])[0]
        builder.op('Identity', [builder.cast(found, numpy.int64, dtype)],
                   outs)
    return convert


def _sizes_reader(axes, dtype):
    def sizes(*xs):
        return numpy.array([x.shape[a] for x, a in zip(xs, axes)], dtype)
    return sizes


def _sizes_to_onnx(axes, dtype):
    def convert(builder, ins, outs):
        sizes = [_onnx_size(builder, x, axis, (1,))
                 for x, axis in zip(ins, axes)]
        joined = builder.op('Concat', sizes, axis=0)[0]
        builder.op('Identity', [builder.cast(joined, numpy.int64, dtype)],
                   outs)
    return convert


def operation_position(frame):
    """``(filename, line, column)`` where the operation ``frame`` runs
    starts in its source."""
    positions = list(frame.f_code.co_positions())
    line, _, column, _ = positions[frame.f_lasti // 2]
    return frame.f_code.co_filename, line, column


@ops.takes_widest
@ops.takes_square
def _any_rows(rows):
    """A ``python.size`` node reads its size from its input at run time,
    whichever axes the rows are on (a padded block's width too)."""
    return ops.Follow((None,))


class _LengthUses(object):
    """Where a Scalar made from a size (:func:`as_scalar`) notes the uses
    that bake it in: as :class:`Use` of that size."""

    def __init__(self, length):
        self.length = length

    def append(self, use):
        self.length.uses.append(self.length.use(
            '%s (as a float)' % use.what, use.loc))

    def operated(self, frame):
        """Notes the forward's operation at ``frame`` on the Scalar as one
        computed at run time (``1.0 - 1.0 / T``), where it was
        recorded."""
        recorder = _state.recorder
        if frame is not None and recorder is not None:
            recorder.size_operations.add(operation_position(frame))


class _WidthUses(object):
    """Where a Scalar made from a padded block's width
    (:func:`width_as_scalar`) notes the uses that bake it in."""

    def __init__(self, recorder):
        self.recorder = recorder

    def append(self, use):
        self.recorder.width_uses.append(('%s (as a float)' % use.what,
                                         use.loc))


def pins(condition):
    """Whether a ``Use.condition`` holds for one size only (``T == 5``
    was true): as a guard it would make a symbolic length one length."""
    op, result = condition[2], condition[4]
    return op == '__eq__' and result or op == '__ne__' and not result


def holds(condition, size):
    """Whether a ``Use.condition`` gives its recorded result at ``size``."""
    a, b, op, other, result = condition
    return getattr(int, op)(a * size + b, other) == result


_OPERATORS = {'__lt__': '<', '__le__': '<=', '__gt__': '>', '__ge__': '>=',
              '__eq__': '==', '__ne__': '!='}


def describe_condition(condition, symbol='T'):
    """``'T - 1 > 10'`` or ``'not T > 10'``."""
    a, b, op, other, result = condition
    value = ops.times_label(a, symbol)
    if b:
        value += ' %s %d' % ('+' if b > 0 else '-', abs(b))
    text = '%s %s %d' % (value, _OPERATORS[op], other)
    return text if result else 'not ' + text
