"""Call signatures: the cache key of a call, and its readable form.

A call's arguments are flattened into a *structure* (nesting, static
Python values, where the arrays go) and a list of array *leaves*
(Variables and NumPy/CuPy arrays). The cache key is::

    (train, enable_backprop, structure, leaf specs, aliasing)

where a leaf spec is ``(shape, dtype, device, requires_grad, is_variable)``.
:class:`Signature` is the same information with argument names, printed
as ``x: f32[32,784]@cpu, train=False`` and compared item by item to
explain a cache miss.
"""

import collections
import functools
import inspect

import chainer
import numpy

from chainerjit import ir
from chainerjit.frontend import _keys


# The hot path lives in Cython; see _keys.pyx.
array_device = _keys.array_device
flatten = _keys.flatten
leaf_array = _keys.leaf_array
leaf_spec = _keys.leaf_spec
aliasing = _keys.aliasing
leaf_arrays = _keys.leaf_arrays
# make_key(args, kwargs, train, enable_backprop) returns ``(key, leaves)``
# for a call: ``key`` is ``(train, enable_backprop, structure, leaf specs,
# aliasing)`` where a leaf spec is ``(shape, dtype, device, requires_grad,
# is_variable)``.
make_key = _keys.make_key
# config_flags() returns ``(chainer.config.train, enable_backprop)``.
config_flags = _keys.config_flags


def same_structure(a, b, close=None):
    """``a == b`` for structures from :func:`flatten`, but that a NaN
    held in them equals a NaN of the same type, and that NumPy float
    scalars (computed values) compare with ``close(a, b)`` if given."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(
            same_structure(x, y, close) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, (float, complex, numpy.inexact)) and a != a:
        return b != b
    if close is not None and isinstance(a, numpy.inexact):
        return bool(close(a, b))
    return a == b


def unflatten(structure, leaves):
    """Rebuilds an object from :func:`flatten`'s structure and leaves."""
    return _unflatten(structure, iter(leaves))


def _unflatten(structure, leaves):
    if structure == 'V' or structure == 'A':
        return next(leaves)
    tag = structure[0]
    if tag == 'S':
        return structure[2]
    if tag == 'dict':
        return {k: _unflatten(s, leaves)
                for k, s in zip(structure[1], structure[2])}
    items = [_unflatten(s, leaves) for s in structure[1]]
    return items if tag == 'list' else tuple(items)


# --- the call's own arguments in a structure --------------------------------
#
# A call's structure is ``flatten((args, kwargs))``: the positional
# arguments' ``('tuple', items)``, and, when keywords were given, with the
# keywords' ``('dict', keys, items)`` beside it. An argument is found at a
# path ``('args', index)`` or ``('kwargs', name)``.

def argument_parts(structure):
    """``(positional part, keyword part or None)`` of a call's
    structure."""
    if structure[0] == 'tuple':
        return structure, None
    return structure


def _argument_index(structure, path):
    args, kwargs = argument_parts(structure)
    if path[0] == 'args':
        return path[1] if path[1] < len(args[1]) else None
    if kwargs is None or path[1] not in kwargs[1]:
        return None
    return kwargs[1].index(path[1])


def static_item(structure, path):
    """The ``('S', type, value, ...)`` item of the argument at ``path`` of
    a call's structure, or ``None`` (no such argument, or not a static
    value)."""
    index = _argument_index(structure, path)
    if index is None:
        return None
    args, kwargs = argument_parts(structure)
    item = (args if path[0] == 'args' else kwargs)[-1][index]
    if type(item) is tuple and len(item) >= 3 and item[0] == 'S':
        return item
    return None


def with_static_item(structure, path, item):
    """A call's structure with ``item`` in place of the argument at
    ``path`` (which must be there)."""
    args, kwargs = argument_parts(structure)
    part = args if path[0] == 'args' else kwargs
    items = list(part[-1])
    items[_argument_index(structure, path)] = item
    part = part[:-1] + (tuple(items),)
    args, kwargs = (part, kwargs) if path[0] == 'args' else (args, part)
    return args if kwargs is None else (args, kwargs)


ArraySpec = collections.namedtuple(
    'ArraySpec', 'shape dtype device requires_grad is_variable')


def is_array_spec(spec):
    """Whether a key's spec of a leaf describes an array (a tuple
    starting with its shape)."""
    return type(spec) is tuple and spec and type(spec[0]) is tuple


def _is_array(obj):
    return isinstance(obj, chainer.get_array_types())


# --- the readable form -----------------------------------------------------

def describe_spec(spec):
    """``f32[32,784]@cpu`` plus ``grad`` when the Variable requires it."""
    text = '%s@%s' % (ir.format_type(spec.shape, spec.dtype), spec.device)
    if not spec.is_variable:
        text += ' (array)'
    elif spec.requires_grad:
        text += ' grad'
    return text


def describe_arguments(fn, args, kwargs):
    """Names a call's arguments after ``fn``'s parameters.

    Returns:
        tuple: the names of the array leaves, in flattening order (``x``,
        ``xs[0]``, ``batch['img']``), and ``(name, value)`` for the static
        values (``scale=2.0``).
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names, statics = [], []
    for i, arg in enumerate(args):
        if i < len(params) and params[i].kind in (
                params[i].POSITIONAL_ONLY, params[i].POSITIONAL_OR_KEYWORD):
            base = params[i].name
        else:
            base = 'args[%d]' % i
        _describe(arg, base, names, statics)
    for key, arg in (kwargs or {}).items():
        _describe(arg, key, names, statics)
    return names, statics


def _describe(obj, base, names, statics):
    if isinstance(obj, chainer.Variable) or _is_array(obj):
        names.append(base)
    elif type(obj) in (list, tuple):
        for i, item in enumerate(obj):
            _describe(item, '%s[%d]' % (base, i), names, statics)
    elif type(obj) is dict:
        for k, item in obj.items():
            _describe(item, '%s[%r]' % (base, k), names, statics)
    else:
        statics.append((base, obj))


def argument_name(fn, instance, path):
    """The name of the argument at ``path`` (``('args', index)`` or
    ``('kwargs', name)``) of a call of ``fn`` (bound to ``instance``, if
    given), as :func:`describe_arguments` names it."""
    if path[0] == 'kwargs':
        return path[1]
    try:
        bound = fn if instance is None else functools.partial(fn, instance)
        params = list(inspect.signature(bound).parameters.values())
    except (TypeError, ValueError):
        params = []
    i = path[1]
    if i < len(params) and params[i].kind in (
            params[i].POSITIONAL_ONLY, params[i].POSITIONAL_OR_KEYWORD):
        return params[i].name
    return 'args[%d]' % i


#: The names of the symbolic lengths of loops' trip counts, in the order a
#: program gets them (``frontend.symbolic``).
TRIP_SYMBOLS = ('T', 'U', 'V', 'W')


class Symbol(str):
    """A length that varies by call, printed as its name."""

    def __repr__(self):
        return str(self)


class Varying(object):
    """A number argument that varies by call, printed ``beta: float`` (or
    ``k: int``)."""

    def __init__(self, kind='float'):
        self.kind = kind

    def __eq__(self, other):
        return isinstance(other, Varying) and other.kind == self.kind

    def __hash__(self):
        return hash((Varying, self.kind))

    def __repr__(self):
        return self.kind


class Signature(object):
    """The readable form of a cache key, with argument and parameter names.

    ``items`` is an ordered tuple of ``(name, description)`` pairs, where a
    description is an :class:`ArraySpec` or a static Python value.
    """

    def __init__(self, items):
        self.items = tuple(items)

    @classmethod
    def of_call(cls, fn, args, kwargs, key, leaves, params=()):
        train, backprop, structure, specs, alias = key
        names, statics = describe_arguments(fn, args, kwargs)
        items = list(zip(names, [ArraySpec(*spec) for spec in specs]))
        items.extend(statics)
        if alias is not None:
            items.append(('aliasing', alias))
        items.append(('train', train))
        items.append(('enable_backprop', backprop))
        items.extend(params)
        return cls(items)

    def with_symbols(self, wildcards, kind=None, where=None, symbol='T'):
        """This signature with the symbolic dimensions (``(leaf, axes)``
        pairs) shown as ``symbol`` and, for a length given as an int
        argument (``kind`` ``'static'``, ``where`` ``(path, name)``), that
        argument shown as ``symbol``."""
        items = list(self.items)
        for leaf, axes in wildcards:
            name, spec = items[leaf]
            shape = tuple(symbol if i in axes else d
                          for i, d in enumerate(spec.shape))
            items[leaf] = (name, spec._replace(shape=shape))
        if kind == 'static':
            items = [(n, Symbol(symbol) if n == where[1] else v)
                     for n, v in items]
        return Signature(items)

    def with_varying(self, names, kinds):
        """This signature with the number arguments ``names`` shown as
        varying by call, each of its kind (``'float'``, ``'int'``)."""
        kind_of = dict(zip(names, kinds))
        return Signature([(n, Varying(kind_of[n]) if n in kind_of else v)
                          for n, v in self.items])

    def __str__(self):
        return ', '.join(
            '%s: %s' % (name, describe_spec(v)) if isinstance(v, ArraySpec)
            else '%s: %r' % (name, v) if isinstance(v, Varying)
            else '%s=%r' % (name, v) for name, v in self.items)

    def diff(self, other):
        """Lines saying how ``other`` differs from this signature."""
        mine = collections.OrderedDict(self.items)
        theirs = collections.OrderedDict(other.items)
        lines = []
        for name in list(mine) + [n for n in theirs if n not in mine]:
            if name not in theirs:
                lines.append('%s: removed' % name)
            elif name not in mine:
                lines.append('%s: added' % name)
            elif mine[name] != theirs[name]:
                lines.extend(_diff_item(name, mine[name], theirs[name]))
        return lines


def _shape_text(shape):
    """``(T, 16, 64)``: a shape as Python prints it, symbols unquoted."""
    if len(shape) == 1:
        return '(%s,)' % shape[0]
    return '(%s)' % ', '.join(str(d) for d in shape)


def _any_length(dim):
    """A symbolic length of a signature, which takes any size (a batch,
    ``B``, takes those from a smallest)."""
    return dim in TRIP_SYMBOLS or isinstance(dim, str) and \
        dim[:1] == 'L' and dim[1:].isdigit()


def _diff_item(name, old, new):
    if not (isinstance(old, ArraySpec) and isinstance(new, ArraySpec)):
        return ['%s: %r -> %r' % (name, old, new)]
    lines = []
    if old.shape != new.shape:
        where = ''
        if len(old.shape) != len(new.shape):
            where = ' (ndim %d -> %d)' % (len(old.shape), len(new.shape))
        else:  # a length ('T', an item's 'L0') takes any size
            axes = [i for i, (a, b) in enumerate(zip(old.shape, new.shape))
                    if a != b and not _any_length(a) and
                    not _any_length(b)]
            where = ' at axis %s' % ', '.join(str(a) for a in axes)
        if where != ' at axis ':
            lines.append('%s: shape %s -> %s%s' % (
                name, _shape_text(old.shape), _shape_text(new.shape),
                where))
    for field in ('dtype', 'device', 'requires_grad', 'is_variable'):
        a, b = getattr(old, field), getattr(new, field)
        if a != b:
            lines.append('%s: %s %s -> %s' % (name, field, a, b))
    return lines
