"""Python numbers that vary by call: float and int arguments as program
inputs.

A forward called with a float that changes from call to call (a KL weight
annealed at each step, a temperature, a noise scale) would be recorded
and compiled once per value. Where a call misses only because such
arguments changed (or from the first call with ``jit(dynamic=True)``),
it is recorded with each of them as a :class:`Scalar`: the number itself
for Python, NumPy and Chainer, whose arithmetic with Python numbers
(``0.5 * beta``, ``1.0 / tau``) records nodes doing that arithmetic at
run time, and which Chainer's operators with a constant (``x * beta``,
``x / tau``, ``x - b``, ``x ** p``) take as an input of their node
(:func:`varying_constant`). Every other use bakes the number into the
recording: a comparison (``if beta > 0:``), a conversion (``float(beta)``,
a format), a Chainer function's attribute (``F.dropout(x, ratio)``),
NumPy called with it, the result, an attribute assigned or a report.
Each is noted as a :class:`Use` with its line; the argument then stays
in the cache key, and a warning names the use.

A use this misses (C code reading the number without converting it,
``math.exp(beta)``) is caught where the first calls at new values also
run eagerly and are compared (``api``).

An int argument is an :class:`IntScalar` likewise, where the forward's
source never indexes, slices or counts with it
(``trip_counts.arithmetic_only_names``): CPython reads ints in C there.
"""

import collections
import operator
import sys

from chainer.functions.math import basic_math
import numpy

from chainerjit import errors
from chainerjit import ir
from chainerjit import ops
from chainerjit.frontend import _keys
from chainerjit.frontend import signature
from chainerjit.frontend import traced


_state = _keys.recording  # this thread's


class Use(collections.namedtuple('Use', 'name what loc')):
    """A use of a varying argument that the recording depends on:
    ``name`` is the argument's, ``what`` the use (``'compared'``), ``loc``
    ``(filename, line)`` of the code that made it, or ``None``."""

    __slots__ = ()

    def describe(self):
        """``'beta compared at model.py:31'``."""
        where = '' if self.loc is None else \
            ' at ' + errors.short_location(self.loc)
        return '%s %s%s' % (self.name, self.what, where)


# The operators a Scalar records, and the Python function each applies.
_ARITHMETIC = {
    '__add__': operator.add, '__sub__': operator.sub,
    '__mul__': operator.mul, '__truediv__': operator.truediv,
    '__floordiv__': operator.floordiv, '__mod__': operator.mod,
    '__pow__': pow,
}

# The conversions and decisions that bake a Scalar into the recording.
_DECISIONS = (
    ('__bool__', 'tested'), ('__float__', 'converted to float'),
    ('__int__', 'converted with int()'), ('__round__', 'rounded'),
    ('__trunc__', 'truncated'), ('__floor__', 'rounded down'),
    ('__ceil__', 'rounded up'), ('__str__', 'formatted'),
    ('__repr__', 'formatted'), ('__format__', 'formatted'),
    ('__hash__', 'hashed'), ('__divmod__', 'divided with divmod()'),
    ('__rdivmod__', 'divided with divmod()'),
    ('is_integer', 'tested'), ('hex', 'formatted'),
    ('as_integer_ratio', 'converted to a ratio'),
    ('conjugate', 'conjugated'),
    ('__eq__', 'compared'), ('__ne__', 'compared'), ('__lt__', 'compared'),
    ('__le__', 'compared'), ('__gt__', 'compared'), ('__ge__', 'compared'))


class _Proxy(object):
    """What :class:`Scalar` and :class:`IntScalar` share: ``value`` is the
    IR value holding the number at run time; ``name`` names the argument
    it comes from, for messages; ``uses`` is the recorder's list of
    :class:`Use`. ``_BASE`` is the number type."""

    __slots__ = ()
    _BASE = float

    def note(self, what, loc=None, depth=2):
        """Notes a use that bakes this number in (at ``loc``, or at the
        line of the code ``depth`` frames above the caller)."""
        if loc is None:
            loc = traced.user_location(depth + 1)
        self.uses.append(Use(self.name, what, loc))

    def baked(self, what, loc=None):
        """This number as a plain one, noting the use."""
        self.note(what, loc, depth=3)
        return _plain(self)

    def __neg__(self):
        return _record(operator.neg, (self,), '__neg__')

    def __pos__(self):
        return self

    def __abs__(self):
        return _record(abs, (self,), '__abs__')

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        for x in inputs:
            if isinstance(x, _VARYING):
                x.note('passed to numpy.%s' % ufunc.__name__)
        return getattr(ufunc, method)(*plain_numbers(inputs), **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        self.note('passed to numpy.%s' % func.__name__)
        return func(*plain_numbers(args), **plain_numbers(kwargs))

    def __reduce__(self):
        return self._BASE, (_plain(self),)


class Literal(float):
    """A float literal of the forward's code that its source puts into
    arithmetic with sizes (``1.0 / T``), while recording
    (``trip_counts.literals_watched``). Its arithmetic with a number that
    computes it at run time itself (``lengths.Length._in_float``, as in
    ``T / 2.0``), which the float would do in C, unseen, is that
    number's; any other is a float's."""

    def _arithmetic(op, reflected):
        def apply(self, other):
            if isinstance(other, _VARYING):  # (1.0 - 1.0 / T: recorded)
                return getattr(other, reflected)(float(self))
            in_float = getattr(type(other), '_in_float', None)
            if in_float is not None:
                computed = in_float(other, reflected, float(self))
                if computed is not None:
                    return computed
            return getattr(float, op)(float(self), other)
        apply.__name__ = op
        return apply

    for _op, _reflected in (('__add__', '__radd__'), ('__radd__', '__add__'),
                            ('__sub__', '__rsub__'), ('__rsub__', '__sub__'),
                            ('__mul__', '__rmul__'), ('__rmul__', '__mul__'),
                            ('__truediv__', '__rtruediv__'),
                            ('__rtruediv__', '__truediv__')):
        locals()[_op] = _arithmetic(_op, _reflected)
    del _op, _reflected, _arithmetic

    __hash__ = float.__hash__

    def __reduce__(self):
        return float, (float(self),)


def plain_literal(x):
    """``x``, a :class:`Literal` as a plain float."""
    return float(x) if type(x) is Literal else x


def _arithmetic(name, fn, reflected):
    """A proxy's operator ``name`` applying ``fn``: recorded with Python
    numbers and other proxies; as Python computes it, the number baked
    in, with anything else that is a number."""
    def apply(self, other):
        other = plain_literal(other)
        if type(other) in (int, float) or isinstance(other, _VARYING):
            operands = (other, self) if reflected else (self, other)
            return _record(fn, operands, name)
        if not isinstance(other, (int, float)):
            return NotImplemented
        # A bool, a NumPy float or an argument's size: as Python
        # computes it, the number baked in.
        self.note('used in arithmetic with a %s' % type(other).__name__)
        if isinstance(other, int) and type(other) is not bool:
            other = int(other)  # an argument's size notes its use
        number = _plain(self)
        return fn(other, number) if reflected else fn(number, other)
    apply.__name__ = name
    return apply


def _decision(name, what, base):
    """A proxy's method ``name`` of ``base`` that bakes it in (but where
    Chainer's operators with a constant only convert or show it)."""
    def apply(self, *args):
        if not _made_by_chainers_operator(sys._getframe(1)):
            self.note(what)
        return getattr(base, name)(self, *args)
    apply.__name__ = name
    return apply


def _with_methods(cls, decisions):
    """``cls`` with the recorded operators and the noting methods."""
    for name, fn in _ARITHMETIC.items():
        setattr(cls, name, _arithmetic(name, fn, False))
        reflected = '__r' + name[2:]
        setattr(cls, reflected, _arithmetic(reflected, fn, True))
    for name, what in decisions:
        if hasattr(cls._BASE, name):
            setattr(cls, name, _decision(name, what, cls._BASE))
    return cls


class Scalar(_Proxy, float):
    """A varying float argument, or a number computed from such, while
    the forward is recorded (see the module docstring)."""

    _BASE = float

    def __new__(cls, number, value, name, uses):
        self = float.__new__(cls, number)
        self.value, self.name, self.uses = value, name, uses
        return self


# The bitwise operators, which bake an IntScalar in.
_BITWISE = ('__and__', '__rand__', '__or__', '__ror__', '__xor__',
            '__rxor__', '__lshift__', '__rlshift__', '__rshift__',
            '__rrshift__', '__invert__')


class IntScalar(_Proxy, int):
    """A varying int argument, or an int computed from such (``k + 1``),
    while the forward is recorded: as :class:`Scalar`, for ints. Its true
    division (``k / 2``) and arithmetic with floats give Scalars; its
    integer arithmetic, IntScalars. Only where the forward's source does
    not index, slice or count with the argument
    (``trip_counts.arithmetic_only_names``) is an int recorded so: CPython
    reads an int subclass in C without calling its methods there
    (``range(k)``, ``x[:k]``)."""

    _BASE = int

    def __new__(cls, number, value, name, uses):
        self = int.__new__(cls, number)
        self.value, self.name, self.uses = value, name, uses
        return self

    def as_float(self):
        """This number as a :class:`Scalar`, ``float(k)`` at run time."""
        return _record(float, (self,), 'float')


_with_methods(Scalar, _DECISIONS)
_with_methods(IntScalar, _DECISIONS + tuple(
    (name, 'used in bitwise arithmetic') for name in _BITWISE) + (
    ('__index__', 'used as an index'), ('bit_length', 'measured'),
    ('to_bytes', 'converted')))
_VARYING = (Scalar, IntScalar)


def reported(number):
    """``(value, base)`` for a varying number the forward reports: the IR
    value of a node giving it as a 0-d array (a program output, which the
    compiled call reports as a number again), and its number type."""
    recorder = _state.recorder
    dtype = number.value.dtype
    out = recorder.graph.add_value('temp', (), dtype)
    node = recorder.add_node(ir.Node(
        'python.array', ops.Kernel(
            lambda v: numpy.array(v, dtype), {}, onnx=_identity_to_onnx),
        [number.value], [out], (), loc=traced.user_location(3)))
    recorder.templates[node] = ('python', 'array', ())
    return out, number._BASE


def _identity_to_onnx(b, ins, outs):
    b.op('Identity', ins, outs)


def is_varying(x):
    """Is ``x`` a Scalar or an IntScalar?"""
    return isinstance(x, _VARYING)


def _plain(x):
    """A Scalar or IntScalar as the number it stands for."""
    if isinstance(x, Scalar):
        return float.__float__(x)
    if isinstance(x, IntScalar):
        return int.__int__(x)
    return x


def _record(fn, operands, name):
    """``fn(*operands)`` as Python computes it, and, where a float or an
    int, a Scalar or IntScalar computed by a node that applies ``fn`` to
    the varying numbers among the operands at run time (the other operands
    fixed)."""
    numbers = [_plain(x) for x in operands]
    result = fn(*numbers)
    scalars = [x for x in operands if isinstance(x, _VARYING)]
    recorder = _state.recorder
    kind = _KINDS.get(type(result))
    if kind is None or recorder is None:
        if kind is None:
            scalars[0].note('gave a %s by %s' % (type(result).__name__,
                                                 name.strip('_')))
        return result
    positions = [i for i, x in enumerate(operands)
                 if isinstance(x, _VARYING)]

    def run(*values):
        args = list(numbers)
        for i, v in zip(positions, values):
            args[i] = v
        return fn(*args)
    out = recorder.graph.add_value('temp', (), kind[1])
    fixed = {'operand%d' % i: x for i, x in enumerate(numbers)
             if i not in positions}
    node = recorder.add_node(ir.Node(
        'python.%s' % name.strip('_'), ops.Kernel(
            run, fixed, onnx=_arithmetic_to_onnx(
                fn, numbers, positions, kind[1],
                [x.value.dtype for x in scalars])),
        [x.value for x in scalars], [out], tuple(fixed.items()),
        loc=traced.user_location(3)))
    # What makes two alike (ir.fingerprints): the operation, the fixed
    # operands and where the varying ones are.
    recorder.templates[node] = ('python', name, (
        tuple(sorted(fixed.items())), tuple(positions)))
    operated = getattr(scalars[0].uses, 'operated', None)
    if operated is not None:  # (a size's: the operation is seen)
        operated(traced.user_frame())
    return kind[0](result, out, scalars[0].name, scalars[0].uses)


# The Python number types a recorded node may give, their proxy and the
# dtype of its value in the program.
_KINDS = {float: (Scalar, numpy.dtype(numpy.float64)),
          int: (IntScalar, numpy.dtype(numpy.int64))}

# The operators with an ONNX form giving Python's result (on doubles, and
# on 64-bit ints for the integer ones).
_ONNX_ARITHMETIC = {operator.add: 'Add', operator.sub: 'Sub',
                    operator.mul: 'Mul', operator.truediv: 'Div',
                    operator.neg: 'Neg', abs: 'Abs', float: 'Identity'}


def _arithmetic_to_onnx(fn, numbers, positions, dtype, in_dtypes):
    """The ONNX form of a recorded Python operation giving ``dtype``: its
    varying inputs (of ``in_dtypes``) and constants cast to ``dtype``
    first (true division gives a float for ints, as Python's)."""
    integer = dtype.kind == 'i'
    op_type = _ONNX_ARITHMETIC.get(fn) or (
        _ONNX_INTEGER_ARITHMETIC.get(fn) if integer else None)
    if op_type is None or (fn is operator.truediv and integer) or (
            fn in _ONNX_INTEGER_ARITHMETIC and 1 in positions):
        return None  # (a varying divisor may be 0: Python raises)

    def convert(b, ins, outs):
        args = list(numbers)
        for i, name, in_dtype in zip(positions, ins, in_dtypes):
            args[i] = b.cast(name, in_dtype, dtype)
        args = [a if isinstance(a, str) else b.constant(
            numpy.asarray(a, dtype)) for a in args]
        if fn is operator.floordiv:  # Python's floor: (a - a % b) / b
            remainder = b.op('Mod', args)[0]
            b.op('Div', [b.op('Sub', [args[0], remainder])[0], args[1]],
                 outs)
        else:
            b.op(op_type, args, outs)
    return convert


# Python's integer operators with an ONNX form on 64-bit ints: ``Mod``
# takes the divisor's sign, as Python's ``%`` (``//`` is computed from it).
_ONNX_INTEGER_ARITHMETIC = {operator.mod: 'Mod', operator.floordiv: 'Div'}


def plain_numbers(obj):
    """``obj`` with each Scalar and IntScalar in it (in tuples, lists and
    dicts) a plain number, without noting a use."""
    if isinstance(obj, _VARYING):
        return _plain(obj)
    if type(obj) in (tuple, list):
        return type(obj)(plain_numbers(x) for x in obj)
    if type(obj) is dict:
        return {k: plain_numbers(v) for k, v in obj.items()}
    return obj


def note_baked_in(obj, what, loc=None, depth=4):
    """Notes each Scalar in ``obj`` (in tuples, lists and dicts, to
    ``depth`` levels) as used ``what``: a recorded node holds it as a
    constant."""
    if isinstance(obj, _VARYING):
        obj.note(what, loc)
    elif depth > 0 and type(obj) in (tuple, list):
        for x in obj:
            note_baked_in(x, what, loc, depth - 1)
    elif depth > 0 and type(obj) is dict:
        for x in obj.values():
            note_baked_in(x, what, loc, depth - 1)


# Chainer's nodes of an operator with a constant, which take a varying
# one as an input (``ops.math.lower_varying_constant``).
VARYING_CONSTANT_NODES = (
    basic_math.AddConstant, basic_math.SubFromConstant,
    basic_math.MulConstant, basic_math.DivFromConstant,
    basic_math.PowVarConst, basic_math.PowConstVar)


def varying_constant(template, label, loc):
    """The Scalar a recorded node of an operator with a constant takes as
    its constant, or ``None``. Scalars in the attributes of any other
    node (or in another attribute) are noted as baked in."""
    function = getattr(template, '_function', template)
    found = None
    for name, attr in vars(function).items():
        if isinstance(attr, _VARYING) and name == 'value' and \
                isinstance(function, VARYING_CONSTANT_NODES):
            found = attr
        else:
            note_baked_in(attr, 'passed to %s (its %s)' % (label, name),
                          loc)
    return found


def varying_index(index):
    """``(position, IntScalar)`` for an index (``F.get_item``'s, or
    NumPy's) that holds one IntScalar as an integer (``y[k]``, ``y[:, k %
    n]``), the rest plain ints, slices of them, ``None`` and ``...``;
    else ``None``."""
    items = index if type(index) is tuple else (index,)
    found = [(j, s) for j, s in enumerate(items) if isinstance(s, _VARYING)]
    if len(found) != 1 or not isinstance(found[0][1], IntScalar) or any(
            not _plain_index(s) for j, s in enumerate(items)
            if j != found[0][0]):
        return None
    return found[0]


def _plain_index(item):
    return item is None or item is Ellipsis or type(item) is int or (
        type(item) is slice and all(type(v) in (int, type(None))
                                    for v in (item.start, item.stop,
                                              item.step)))


# The code of Chainer's operators with a constant that reads it: the
# conversion to the operand's dtype (which a node with a varying constant
# repeats at run time) and the node's label.
_OPERATOR_READS = (basic_math._preprocess_const.__code__,
                   basic_math._convert_value_to_string.__code__)


def _made_by_chainers_operator(frame):
    """Whether ``frame``, past this module's own, is code of Chainer's
    operators with a constant that only converts or shows it."""
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return frame is not None and frame.f_code in _OPERATOR_READS


class VaryingScalars(collections.namedtuple('VaryingScalars', 'paths')):
    """How an entry compiled with varying number arguments follows from a
    call's key: ``paths`` are where they are, ``('args', index)`` or
    ``('kwargs', name)``; :meth:`generalize` leaves their values out of
    the key and gives them as the program's symbols, in order."""

    def generalize(self, key):
        """``(general key, the arguments' values)``, or ``None`` where
        one of them is not a float or an int (each keeps its type in the
        key)."""
        train, backprop, structure, specs, alias = key
        joins, structure = _joined_and_structure(structure)
        values = []
        for path in self.paths:
            item = signature.static_item(structure, path)
            if item is None or item[1] not in _KINDS:
                return None
            values.append(item[2])  # the caller's number
            structure = signature.with_static_item(
                structure, path, ('S', item[1], 'varying'))
        if joins is not None:
            structure = ('joined', joins, structure)
        return (train, backprop, structure, specs, alias), values

    def to_check(self, key, verified, symbols):
        """The values the call checks against eager (its first calls at
        new values, :data:`CHECKED_VALUES` of them, told apart by their
        bits: ``-0.0`` is new after ``0.0``), or ``None``."""
        values = self.checked(key, symbols)
        if len(verified) > CHECKED_VALUES or values in verified:
            return None
        return values

    @staticmethod
    def checked(key, values):
        """How the values of a call are told apart: floats by their
        bits."""
        return tuple(float.hex(v) if isinstance(v, float) else v
                     for v in values)


#: The calls at new values that are also run eagerly and compared, after
#: the one recorded.
CHECKED_VALUES = 2


class SizesAndNumbers(collections.namedtuple('SizesAndNumbers',
                                             'sizes numbers')):
    """An entry whose sizes and number arguments (``numbers``, a
    :class:`VaryingScalars`) both vary by call. ``sizes``: its loops' trip
    counts (a ``frontend.symbolic.Symbolic``), which the program takes as
    symbols after the numbers' (made when the recording started); or
    sizes read from the arrays (``checked_at`` a key): the lengths of a
    list's items (a ``runtime.ragged.Ragged``) or the batch size (a
    ``runtime.batch.RowsBatched``)."""

    def generalize(self, key):
        """``(general key, the numbers' values, then the trip counts)``,
        or ``None``."""
        sizes = self.sizes.generalize(key)
        if sizes is None:
            return None
        numbers = self.numbers.generalize(sizes[0])
        if numbers is None:
            return None
        return numbers[0], numbers[1] + list(sizes[1])

    def to_check(self, key, verified, symbols):
        """What a call checks against eager, ``(sizes, numbers as
        checked)``: at sizes its kind of sizes checks (new trip counts; an
        item's first other lengths), or at the first
        :data:`CHECKED_VALUES` new values; else ``None``."""
        checked = self.checked(key, symbols)
        sizes = [s for s, _ in verified]
        numbers = set(n for _, n in verified)
        if self._sizes_due(key, checked[0], sizes) or (
                checked[1] not in numbers and
                len(numbers) <= CHECKED_VALUES):
            return checked
        return None

    def _sizes_due(self, key, now, seen):
        if self._from_arrays():  # items' lengths, a batch size
            return self.sizes.to_check(key, seen) is not None
        return now not in seen

    def _from_arrays(self):
        return hasattr(self.sizes, 'checked_at')

    def checked(self, key, symbols):
        """``(sizes, numbers)`` of a call, as checked: its trip counts,
        its items' lengths or its batch size (those recorded, for ``key``
        ``None``)."""
        n = len(self.numbers.paths)
        sizes = self.sizes.checked_at(key) if self._from_arrays() else \
            tuple(symbols[n:])
        return sizes, VaryingScalars.checked(key, symbols[:n])


def varying_paths(key, other_key, int_varies):
    """The paths of the number arguments whose values alone make ``key``
    differ from ``other_key`` (an entry's), or ``None`` where they differ
    otherwise (or not at all): floats, and ints at the paths where
    ``int_varies(path)`` holds (both of the same type)."""
    (joins, structure), (other_joins, other) = (
        _joined_and_structure(key[2]), _joined_and_structure(other_key[2]))
    if key[:2] != other_key[:2] or key[3:] != other_key[3:] or \
            joins != other_joins or not _is_call_structure(structure) or \
            not _is_call_structure(other):
        return None
    paths = []
    for mine, theirs, name in zip(signature.argument_parts(structure),
                                  signature.argument_parts(other),
                                  ('args', 'kwargs')):
        if mine is None or theirs is None:
            if mine != theirs:
                return None
            continue
        if mine[:-1] != theirs[:-1] or len(mine[-1]) != len(theirs[-1]):
            return None
        for i, (a, b) in enumerate(zip(mine[-1], theirs[-1])):
            if a == b:
                continue
            path = (name, mine[1][i] if name == 'kwargs' else i)
            if not (_number_type(a) is _number_type(b) is not None and
                    (_number_type(a) is float or int_varies(path))):
                return None
            paths.append(path)
    return tuple(paths) or None


def kept_int_paths(key, other_key, int_varies):
    """The paths of the int arguments whose values alone (with floats')
    make ``key`` differ from ``other_key`` but which stay in the key
    (``int_varies(path)`` false); ``()`` where none is so."""
    paths = varying_paths(key, other_key, lambda path: True)
    if not paths or varying_paths(key, other_key, int_varies):
        return ()
    args, kwargs = signature.argument_parts(
        _joined_and_structure(key[2])[1])
    return tuple(path for path in paths if not int_varies(path) and
                 _number_type(args[1][path[1]] if path[0] == 'args' else
                              kwargs[2][kwargs[1].index(path[1])]) is int)


def _joined_and_structure(structure):
    """``(the joins, the call's structure)`` of a joined call's key
    structure (``joining.mark_key``: its lists joined), else ``(None,
    structure)``."""
    if type(structure) is tuple and len(structure) == 3 and \
            structure[0] == 'joined':
        return structure[1], structure[2]
    return None, structure


def number_paths(key, int_varies):
    """The paths of all the float arguments of a call (top level), and of
    the int ones where ``int_varies(path)`` holds."""
    if not _is_call_structure(key[2]):
        return ()
    args, kwargs = signature.argument_parts(key[2])
    found = [('args', i) for i, item in enumerate(args[1])]
    items = list(args[1])
    if kwargs is not None:
        found += [('kwargs', k) for k in kwargs[1]]
        items += list(kwargs[2])
    return tuple(path for path, item in zip(found, items)
                 if _number_type(item) is float or
                 (_number_type(item) is int and int_varies(path)))


def _number_type(item):
    """``float`` or ``int`` for a static float or int argument (not a
    bool), else ``None``."""
    if type(item) is tuple and len(item) >= 3 and item[0] == 'S' and \
            item[1] in _KINDS:
        return item[1]
    return None


def _is_call_structure(structure):
    """A call's structure as ``signature.flatten`` gives it for ``(args,
    kwargs)``: ``('tuple', items)``, or that and ``('dict', keys,
    items)`` (not a packed call's)."""
    if type(structure) is not tuple or not structure:
        return False
    if structure[0] == 'tuple':
        return True
    return len(structure) == 2 and type(structure[0]) is tuple and \
        structure[0][:1] == ('tuple',) and \
        type(structure[1]) is tuple and structure[1][:1] == ('dict',)


def proxies(args, kwargs, paths, graph, uses, names):
    """The call's arguments with a :class:`Scalar` (:class:`IntScalar`
    for an int) at each of ``paths``, held by a new symbol of ``graph``
    (named by ``names``, the leaves' names are the arguments'); returns
    ``(args, kwargs)``."""
    args, kwargs = list(args), dict(kwargs)
    for path, name in zip(paths, names):
        holder = args if path[0] == 'args' else kwargs
        number = holder[path[1]]
        proxy, dtype = _KINDS[type(number)]
        value = graph.add_value('sym', (), dtype, name)
        holder[path[1]] = proxy(number, value, name, uses)
    return tuple(args), kwargs
