"""Guards on Python values a recorded forward depends on.

A recording freezes what the forward's code read from Python: a module
global (``x * SCALE``), a class attribute, a closure variable, a default
argument, an attribute of the object a method is bound to or of a plain
object it holds (``self.options.scale``). Each such value
that the forward's own code names becomes a :class:`PythonGuard`, checked
on every call; a changed value is a cache miss. Scalars are compared by
value (``repr`` too, so that ``-0.0`` is not ``0.0``), arrays and
Variables by identity (an array changed in place is read as it is), and
lists, tuples, dicts and sets by their contents.

Names read only by functions the forward calls are not covered (see the
README's known limits). Entries of ``chainer.config`` read while
recording, by the forward or by Chainer, are guarded too
(:func:`config_reads`): a forward that branches on
``chainer.config.some_flag`` is recorded again when the flag changes.
"""

import ast
import collections
import functools

import chainer
import numpy

from chainerjit.frontend import _keys
from chainerjit.frontend import source


_SCALARS = (type(None), bool, int, float, str)


ABSENT = _keys.ABSENT  # a value that is not there


def is_scalar(value):
    """A Python scalar, or a tuple of them."""
    return isinstance(value, _SCALARS) or (
        type(value) is tuple and all(isinstance(x, _SCALARS) for x in value))


_CONTAINERS = (list, tuple, dict, set)


def snapshot(container, depth=4):
    """The contents of a list, tuple, dict or set: scalars by value,
    nested containers by their contents (``depth`` levels down), other
    objects by identity."""
    if type(container) is dict:
        return [(k, _item(v, depth)) for k, v in container.items()]
    if type(container) is set:
        return sorted(repr(_item(x, depth)) for x in container)
    return [_item(x, depth) for x in container]


def _item(value, depth):
    if is_scalar(value):
        return 'value', type(value), repr(value)
    if type(value) in _CONTAINERS and depth > 0:
        return 'items', id(value), snapshot(value, depth - 1)
    return 'id', id(value)


class PythonGuard(collections.namedtuple(
        'PythonGuard', 'label read expected kind')):
    """A value read by ``read()`` that must still be ``expected``; kind is
    ``'value'``, ``'identity'`` or ``'contents'``."""

    def holds(self):
        current = self.read()
        if self.kind == 'identity':
            return current is self.expected
        if type(current) is not type(self.expected):
            return False
        if self.kind == 'value':
            return repr(current) == repr(self.expected)
        return snapshot(current) == snapshot(self.expected)

    def describe(self):
        if self.kind == 'value':
            return '%s: %r -> %r' % (self.label, self.expected, self.read())
        return '%s: %s' % (self.label, 'another object'
                           if self.kind == 'identity' else 'changed')


def _make(label, read, value, kinds=('value', 'identity', 'contents')):
    if is_scalar(value):
        kind = 'value'
    elif isinstance(value, (chainer.Variable,) + chainer.get_array_types()):
        if isinstance(value, chainer.Parameter):
            return []  # a parameter is a program input
        kind = 'identity'
    elif type(value) in (list, tuple, dict, set):
        kind = 'contents'  # compared with a shallow copy taken now
        value = type(value)(value.items() if type(value) is dict else value)
    elif isinstance(value, GENERATORS):
        kind = 'identity'  # its state: see generator_states
    else:
        return []
    if kind not in kinds:
        return []
    return [PythonGuard(label, read, value, kind)]


GENERATORS = (numpy.random.RandomState, numpy.random.Generator)


def generator_state(generator):
    """The state of a NumPy random generator, comparable with ``==``."""
    if isinstance(generator, numpy.random.RandomState):
        return repr(generator.get_state(legacy=False))
    return repr(generator.bit_generator.state)


def generator_states(py_guards):
    """``[(label, generator, state)]`` of the random generators among the
    guarded values, taken before a recording: a draw the forward makes
    from one changes its state (see :func:`drawn_from`)."""
    return [(g.label, g.expected, generator_state(g.expected))
            for g in py_guards if isinstance(g.expected, GENERATORS)]


def drawn_from(states):
    """The labels of the generators in ``states`` whose state changed."""
    return [label for label, generator, state in states
            if generator_state(generator) != state]


def _code_names(code):
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, 'co_names'):
            names |= _code_names(const)
    return names


def python_guards(fn, instance):
    """Guards for the Python values ``fn``'s own code names: attributes of
    ``instance`` (for a Link only lists, dicts and sets; its scalars and
    arrays are guarded and read by the cache), attributes of plain
    objects it holds (``self.options.scale``), class attributes, module
    globals, closure variables and default arguments."""
    code = getattr(fn, '__code__', None)
    if code is None:
        return []
    guards = []
    for name in sorted(_code_names(code)):
        guards += _named(fn, instance, name)
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        read = functools.partial(_cell_contents, cell)
        guards += _make('closure %s' % name, read, read())
    for i, value in enumerate(fn.__defaults__ or ()):
        guards += _make('default %d' % i, functools.partial(
            _default, fn, i), value, ('contents',))
    if instance is not None:
        for chain in sorted(_attribute_chains(fn)):
            guards += _chained(instance, chain)
    return guards


def _attribute_chains(fn):
    """The attribute chains of two names or more on ``fn``'s first
    argument (``self.options.scale``: ``('options', 'scale')``) that its
    source reads, from its AST; empty if the source cannot be read."""
    code = fn.__code__
    if not code.co_argcount:
        return set()
    tree = source.function_ast(code)
    if tree is None:
        return set()
    first = code.co_varnames[0]
    chains = set()
    for node in ast.walk(tree):
        names = []
        while isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        if len(names) >= 2 and isinstance(node, ast.Name) and \
                node.id == first:
            chains.add(tuple(reversed(names)))
    return chains


def _chained(instance, chain):
    """A guard on ``instance.a.b...`` where ``a`` is a plain object (not
    a link, whose scalars the cache guards, nor an array): read through
    the objects' ``__dict__`` on each call, so no property runs."""
    first = vars(instance).get(chain[0])
    if first is None or isinstance(first, (chainer.Link, chainer.Variable) +
                                   chainer.get_array_types()) or \
            is_scalar(first) or type(first) in _CONTAINERS or \
            not hasattr(first, '__dict__'):
        return []
    read = functools.partial(_read_chain, instance, chain)
    return _make('self.%s' % '.'.join(chain), read, read())


def _read_chain(obj, chain):
    for name in chain:
        namespace = getattr(obj, '__dict__', None)
        if namespace is None:
            return ABSENT
        obj = namespace.get(name, ABSENT)
    return obj


def _named(fn, instance, name):
    if instance is not None and name in vars(instance):
        link = isinstance(instance, chainer.Link)
        return _make('self.%s' % name, functools.partial(
            _attribute, instance, name), vars(instance)[name],
            ('contents',) if link else ('value', 'identity', 'contents'))
    classes = [c for c in type(instance).__mro__
               if not c.__module__.startswith('chainer')] \
        if instance is not None else []
    owner = next((c for c in classes if name in vars(c)), None)
    namespace = vars(owner) if owner is not None else fn.__globals__
    label = '%s.%s' % (owner.__name__, name) if owner is not None \
        else 'global %s' % name
    return _make(label, functools.partial(namespace.get, name, ABSENT),
                 namespace.get(name, ABSENT))


def _attribute(obj, name):
    return vars(obj).get(name, ABSENT)


def _default(fn, i):
    return fn.__defaults__[i]


def _cell_contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return ABSENT


def failures(guards):
    """Lines naming the guarded values that changed."""
    return [g.describe() for g in guards if not g.holds()]


# Configuration entries not guarded: in the cache key already (train,
# enable_backprop), run eagerly (debug) or without effect on the values
# a forward computes.
_UNGUARDED_CONFIG = frozenset([
    'train', 'enable_backprop', 'debug', 'type_check',
    'keep_graph_on_report', 'warn_nondeterministic'])


def config_reads(names):
    """``((name, value), ...)``: the ``chainer.config`` entries ``names``
    (read while recording) with their values now, sorted; ``ABSENT`` for
    one that is not set. Compared on each call by
    ``_keys.config_holds``."""
    config = chainer.config
    return tuple(sorted((name, getattr(config, name, ABSENT))
                        for name in names if name not in _UNGUARDED_CONFIG))


def config_failures(reads):
    """Lines naming the ``chainer.config`` entries that changed."""
    return ['chainer.config.%s: %r -> %r' % (name, value, getattr(
        chainer.config, name, ABSENT)) for name, value in reads
        if not _keys.config_holds(((name, value),))]
