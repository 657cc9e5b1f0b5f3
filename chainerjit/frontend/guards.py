"""Guards on Python values a recorded forward depends on.

A recording freezes what the forward's code read from Python: a module
global (``x * SCALE``), a class attribute, a closure variable, a default
argument, an attribute of the object a method is bound to or of a plain
object it holds (``self.options.scale``). Each such value
that the forward's own code names becomes a :class:`PythonGuard`, checked
on every call; a changed value is a cache miss. Scalars are compared by
value (``repr`` too, so that ``-0.0`` is not ``0.0``), arrays and
Variables and functions by identity (an array changed in place is read as
it is), lists, tuples, dicts and sets by their contents, and a link named
outside the model by :class:`LinkGuard`.

The helpers the forward calls by name (a global function, a method, the
``forward`` of a link of the user's own class) are read the same way, a
few calls deep; deeper ones are not covered (see the known limits).
Entries of ``chainer.config`` read while recording, by the forward or by
Chainer, are guarded too
(:func:`config_reads`): a forward that branches on
``chainer.config.some_flag`` is recorded again when the flag changes.
"""

import ast
import collections
import dis
import functools
import inspect
import sys
import types
import weakref

import chainer
import numpy

from chainerjit.frontend import _keys
from chainerjit.frontend import epochs
from chainerjit.frontend import source


#: Compared by value: Python's scalars and NumPy's (``numpy.float32(2)``).
_SCALARS = epochs.NUMBERS


ABSENT = _keys.ABSENT  # a value that is not there


def is_scalar(value):
    """A Python scalar, or a tuple of them."""
    return isinstance(value, _SCALARS) or (
        type(value) is tuple and all(isinstance(x, _SCALARS) for x in value))


#: Compared by their contents (subclasses too: ``OrderedDict``, a
#: namedtuple); a ``functools.partial`` by its function, arguments and
#: keywords.
_CONTAINERS = (list, tuple, dict, set, frozenset, collections.deque,
               functools.partial)

#: NumPy arrays of at most this many bytes are compared by their values
#: too (a hash of their bytes, where the ``xxhash`` package is installed,
#: else a copy): the forward may have read one into Python
#: (``float(TEMPERATURE)``) or computed with it while recording (``mask
#: > 0``), and an onnxruntime session holds it as a constant. Larger ones
#: are compared by identity only (``UnguardedWarning``).
HASHED_BYTES = 1 << 20


def snapshot(container, depth=8, written=frozenset(), objects=True):
    """The contents of a container (:data:`_CONTAINERS`): scalars by
    value, nested containers and the attributes of plain objects by their
    contents (``depth`` levels down), arrays of up to
    :data:`HASHED_BYTES` by value and identity (but those the program
    itself writes, ``written``: their ids), other objects by identity
    (plain objects too, without ``objects``)."""
    if isinstance(container, functools.partial):
        return [('id', id(container.func)),
                snapshot(container.args, depth, written, objects),
                snapshot(container.keywords, depth, written, objects)]
    if isinstance(container, dict):
        return [(k, _item(v, depth, written, objects))
                for k, v in container.items()]
    if isinstance(container, (set, frozenset)):
        return sorted(repr(_item(x, depth, written, objects))
                      for x in container)
    return [_item(x, depth, written, objects) for x in container]


def _item(value, depth, written, objects):
    if is_scalar(value):
        return 'value', type(value), repr(value)
    if isinstance(value, _CONTAINERS) and depth > 0:
        return 'items', type(value), id(value), snapshot(
            value, depth - 1, written, objects)
    if objects and depth > 0 and _plain_object(value):  # (settings)
        return 'object', id(value), snapshot(vars(value), depth - 1,
                                             written, objects)
    if _small_array(value) and id(value) not in written:
        return 'array', id(value), array_value(value)
    return 'id', id(value)


def _without_values(shot, written):
    """A snapshot taken before with the arrays ``written`` compared by
    identity only, as :func:`snapshot` with ``written`` takes them."""
    if isinstance(shot, tuple) and len(shot) == 3 and shot[0] == 'array' \
            and shot[1] in written:
        return 'id', shot[1]
    if isinstance(shot, (list, tuple)):
        return type(shot)(_without_values(x, written) for x in shot)
    return shot


def _small_array(value):
    return isinstance(value, numpy.ndarray) and \
        value.nbytes <= HASHED_BYTES


def array_value(array):
    """What tells an array's values from others, as :func:`_small_array`'s
    guard compares them: dtype, shape and the bytes' hash (or the
    bytes)."""
    data = numpy.ascontiguousarray(array)
    return array.dtype.str, array.shape, (
        data.tobytes() if digest is None else digest(data))


def _digest_function():
    try:
        import xxhash
    except ImportError:
        return None
    return xxhash.xxh3_128_intdigest


#: XXH3's 128-bit hash of an array's bytes (the ``xxhash`` package), or
#: ``None`` where that is not installed.
digest = _digest_function()


class PythonGuard(collections.namedtuple(
        'PythonGuard', 'label read expected kind shot written',
        defaults=(None, frozenset()))):
    """A value read by ``read()`` that must still be ``expected``; kind is
    ``'value'``, ``'identity'``, ``'contents'`` (a container whose
    :func:`snapshot` was ``shot``, taken when the guard was made) or
    ``'array'`` (a small array, the same one holding the same values:
    ``shot``). ``written``: the ids of arrays the program writes itself
    (batch normalization's running averages), compared by identity only
    (:func:`writes_replayed`)."""

    def holds(self):
        current = self.read()
        if self.kind == 'identity':
            return current is self.expected
        if self.kind == 'array':
            return current is self.expected and \
                array_value(current) == self.shot
        if type(current) is not type(self.expected):
            return False
        if self.kind == 'value':
            return repr(current) == repr(self.expected)
        return snapshot(current, written=self.written) == self.shot

    def describe(self):
        if self.kind == 'value':
            return '%s: %r -> %r' % (self.label, self.expected, self.read())
        if self.kind == 'array' and self.read() is self.expected:
            return '%s: its values changed' % self.label
        return '%s: %s' % (self.label, 'another object'
                           if self.kind in ('identity', 'array')
                           else 'changed')


def number_of(link, name, value):
    """A guard on the number ``value`` that ``link`` holds as ``name``
    (the link held weakly: once gone, as a link the forward made and
    dropped, ``copy.copy(self)``, nothing reads it again, and the guard
    holds)."""
    held = weakref.ref(link)

    def read():
        link = held()
        return value if link is None else vars(link).get(name, ABSENT)
    return PythonGuard('%s.%s' % (type(link).__name__, name), read, value,
                       'value')


class LinkGuard(object):
    """A link the forward names outside its model (a global model, a
    closure's, a plain object's attribute), whose parameters the program
    reads as they were recorded: it must still be that link, holding
    the same parameters and links and the same Python scalars. Compared
    again only when one of its links was assigned to (its epoch moved:
    ``frontend.epochs``)."""

    kind = 'link'

    def __init__(self, label, read, link):
        self.label, self.read, self.expected = label, read, link
        self.epoch = epochs.model_epoch(link)
        self.facts, self.count = link_facts(link), self.epoch[0]
        self.ignored = frozenset()

    def ignore(self, unread):
        """Stops comparing the numbers ``unread`` (``(link path, name)``:
        those the forward did not read, ``model_state.unread_numbers``)."""
        self.ignored = frozenset(unread)
        self.facts = (without_ignored(self.facts[0], self.ignored),) + \
            self.facts[1:]

    def holds(self):
        if self.read() is not self.expected:
            return False
        if self.count == self.epoch[0]:
            return True
        epochs.watch_model(self.expected)  # links added since too
        if link_facts(self.expected, self.ignored) != self.facts:
            return False
        self.count = self.epoch[0]
        return True

    def describe(self):
        return '%s: %s' % (self.label, 'another object'
                           if self.read() is not self.expected else
                           'its links, parameters or attributes changed')


def free_links(guards):
    """``(name, link)`` of the links ``guards`` keep the same outside
    the model (:class:`LinkGuard`: a global model, a closure's), named
    as the forward names them (``model`` of ``global model``)."""
    return [(_named_as(guard.label), guard.expected) for guard in guards
            if isinstance(guard, LinkGuard)]


def _named_as(label):
    """``'model'`` of a guard's label ``'global model'``, ``'closure
    model of helper'``; ``'default0'`` of ``'default 0'``."""
    words = label.split(' of ')[0].split()
    return ''.join(words[-2:]) if words[-1].isdigit() else words[-1]


def unguarded(parameters, guards):
    """The Parameters among ``parameters`` (those a program reads as they
    were recorded, found outside its model) that no guard of ``guards``
    follows: neither a link guard on a link holding one, nor an identity
    guard on the parameter itself."""
    followed = set()
    for guard in guards:
        if isinstance(guard, LinkGuard):
            followed.update(id(p) for p in guard.expected.params())
        elif isinstance(guard.expected, chainer.Parameter):
            followed.add(id(guard.expected))
    return [p for p in parameters if id(p) not in followed]


def writes_replayed(guards, written):
    """``guards`` with the arrays the program writes itself (``written``:
    their ids; batch normalization's running averages in a closure)
    compared by identity only: the program's runs change their values as
    the recorded call did, which is no change of what it assumed."""
    found = []
    for g in guards:
        if g.kind == 'array' and id(g.expected) in written:
            g = g._replace(kind='identity', shot=None)
        elif g.kind == 'contents':
            g = g._replace(shot=_without_values(g.shot, written),
                           written=frozenset(written))
        found.append(g)
    return found


def arrays_by_identity(guards):
    """``[(label, array)]``: the NumPy arrays ``guards`` compare by
    identity only (larger than :data:`HASHED_BYTES`)."""
    return [(g.label, g.expected) for g in guards
            if g.kind == 'identity' and
            isinstance(g.expected, numpy.ndarray)]


def link_facts(link, ignored=frozenset()):
    """What a program recorded with ``link`` outside its model assumes of
    it: its :func:`link_state` (but for the ``ignored`` attributes), and
    which array or Variable (a parameter, a persistent array such as a
    batch normalization's running mean) each attribute holds, since the
    program holds those ones."""
    arrays = (chainer.Variable,) + chainer.get_array_types()
    return link_state(link, ignored), tuple(
        (path, name, id(value)) for path, sub in link.namedlinks()
        for name, value in sorted(vars(sub).items())
        if isinstance(value, arrays))


def _make(label, read, value, kinds=('value', 'identity', 'contents')):
    shot = None
    if is_scalar(value):
        kind = 'value'
    elif _small_array(value) and 'identity' in kinds:
        kind, shot = 'array', array_value(value)
    elif isinstance(value, (chainer.Variable,) + chainer.get_array_types()):
        kind = 'identity'  # a parameter too: the program reads this one
    elif isinstance(value, chainer.Link):
        return [LinkGuard(label, read, value)] if 'identity' in kinds or \
            'link' in kinds else []  # the model's own: the cache's
    elif isinstance(value, _CONTAINERS):
        kind, shot = 'contents', snapshot(value)  # taken now
    elif isinstance(value, types.ModuleType) or value is ABSENT:
        return []
    else:
        # A generator (its state: see generator_states), a helper function
        # (redefined: recorded again), any other object (an Enum member):
        # by identity.
        kind = 'identity'
    if ('identity' if kind == 'array' else kind) not in kinds:
        return []
    return [PythonGuard(label, read, value, kind, shot)]


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


def _codes_within(code):
    """``code`` and the code objects it holds (a comprehension's, a
    lambda's, a nested function's), at any depth."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes_within(const)


def _instructions_within(code):
    """The instructions of ``code`` and of the code it holds."""
    for each in _codes_within(code):
        yield from dis.get_instructions(each)


def _code_names(code):
    return set(name for each in _codes_within(code)
               for name in each.co_names)


def _global_loads(code):
    """The names ``code`` (and the code it holds: a comprehension's, a
    lambda's) reads or writes as globals, not as attributes (``x.T``
    names no global ``T``)."""
    return set(i.argval for i in _instructions_within(code)
               if i.opname in _GLOBAL_ACCESS)


_GLOBAL_ACCESS = frozenset(['LOAD_GLOBAL', 'LOAD_NAME', 'STORE_GLOBAL',
                            'DELETE_GLOBAL', 'STORE_NAME', 'DELETE_NAME'])


@functools.lru_cache(maxsize=1024)
def names_read(code):
    """The attribute names ``code`` (and the code it holds: a lambda's, a
    comprehension's) loads, and its string constants (``getattr(self,
    'beta')``, ``object.__getattribute__(self, 'beta')``)."""
    return frozenset(i.argval for i in _instructions_within(code)
                     if i.opname in _ATTRIBUTE_LOADS or
                     i.opname == 'LOAD_CONST' and type(i.argval) is str)


def looks_up_its_own(link):
    """Does a class of ``link`` define its own ``__getattribute__``, which
    a recording's ``Link.__getattribute__`` would not see?"""
    return any('__getattribute__' in vars(kind)
               for kind in type(link).__mro__
               if kind not in (chainer.Link, object))


def python_guards(fn, instance):
    """Guards for the Python values ``fn``'s own code names: attributes of
    ``instance`` (for a Link only lists, dicts and sets; its scalars and
    arrays are guarded and read by the cache), attributes of plain
    objects it holds (``self.options.scale``), class attributes, module
    globals, closure variables and default arguments; a link named
    outside the model (:class:`LinkGuard`) and a function by identity.
    The same for the functions it calls that are named so (a helper
    function, a method ``self.step``: their code read the same way, a few
    calls deep), and for the ``forward`` of each link of the model whose
    class is not Chainer's."""
    reading = _Reading(fn)
    reading.read(fn, instance, 'self', _CALLS_DEEP)
    if isinstance(instance, chainer.Link):  # (its own too: self(x))
        reading.read_forwards(instance, 'self')
    read = 0
    while read < len(reading.guards):  # links named outside the model
        guard = reading.guards[read]
        read += 1
        if isinstance(guard, LinkGuard):
            reading.read_forwards(guard.expected, guard.label)
    return reading.guards


#: How many calls deep :func:`python_guards` reads helpers' code.
_CALLS_DEEP = 4

#: Modules whose functions are taken as they are, not read for guards.
_LIBRARIES = ('chainer', 'chainerjit', 'numpy', 'cupy', 'onnx', 'builtins')


def _users_function(value):
    """A Python function of the user's code, not a library's."""
    return isinstance(value, types.FunctionType) and \
        _users_module(value.__module__ or '')


def _jitted(value):
    """The function a jitted function (``api.JitFunction``) wraps, or
    ``None``: another jitted function the forward calls is run inlined in
    its recording, its Python read as the forward's."""
    if not hasattr(type(value), 'cache_entries'):  # (no __getattr__ run)
        return None
    return getattr(value, '__wrapped__', None)


def _jitted_instance(jitted):
    """The model a jitted method is bound to, or ``None``."""
    get = getattr(jitted, '_get_instance', None)
    return None if get is None else get()


def _users_module(name):
    """Is the module ``name`` the user's code: not chainerjit's, Chainer's
    or NumPy's (:data:`_LIBRARIES`), not Python's own, not one installed
    in ``site-packages``?"""
    top = name.split('.')[0]
    if top in _LIBRARIES or top in sys.stdlib_module_names:
        return False
    path = getattr(sys.modules.get(name), '__file__', None) or ''
    return 'site-packages' not in path and 'dist-packages' not in path


class _Reading(object):
    """The guards of :func:`python_guards`, gathered function by function
    (each once), each value once: ``(namespace id, name)`` of a global
    or class attribute, the cell of a closure variable, and so on."""

    def __init__(self, top):
        self.top, self.guards = top, []
        self.seen, self.sources, self.labels = set(), set(), set()

    def read(self, fn, instance, prefix, depth):
        """Adds the guards of ``fn``'s code, bound to ``instance``
        (``prefix`` names it), then of the functions they guard,
        ``depth`` calls deep."""
        if isinstance(fn, functools.partial):
            self._read_partial(fn, instance, prefix, depth)
            return
        code = getattr(fn, '__code__', None)
        if code is None or (code, id(instance)) in self.seen:
            return
        self.seen.add((code, id(instance)))
        found = []  # (source, guard, the instance its calls are bound to)
        names = sorted(_code_names(code))
        loaded = _global_loads(code)
        for name in names:
            found += _named(fn, instance, name, prefix, self._module(fn),
                            name in loaded)
        for module in _users_modules(fn, names):
            found += _module_attributes(module, names)
        found += _global_chains(fn, set(names))
        where = '' if fn is self.top else ' of %s' % fn.__qualname__
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            read = functools.partial(_cell_contents, cell)
            found += [(id(cell), g, None) for g in _make(
                'closure %s%s' % (name, where), read, read())]
        for i, value in enumerate(fn.__defaults__ or ()):
            found += [((id(fn), i), g, None) for g in _make(
                'default %d%s' % (i, where),
                functools.partial(_default, fn, i), value,
                ('contents', 'link'))]
        for name, value in sorted((fn.__kwdefaults__ or {}).items()):
            found += [((id(fn), name), g, None) for g in _make(
                'default %s%s' % (name, where),
                functools.partial(_kwdefault, fn, name), value,
                ('contents', 'link'))]
        if instance is not None:
            for chain in sorted(_attribute_chains(fn)):
                found += [((id(instance), chain), g, None)
                          for g in _chained(instance, chain, prefix)]
        self._add(found)
        if depth > 0:
            for _, guard, bound in found:
                if _users_function(guard.expected):
                    self.read(guard.expected, bound, prefix, depth - 1)
                elif _users_function(_jitted(guard.expected)):
                    self.read(_jitted(guard.expected),
                              _jitted_instance(guard.expected), prefix,
                              depth - 1)
            for label, obj in _objects_held(fn, instance, prefix, names):
                for method in _methods_called(obj, names):
                    self.read(method, obj, label, depth - 1)

    def _add(self, found):
        """Keeps the guards of ``found``, ``[(source, guard, _)]``, but
        of a source or a label kept already."""
        for read_from, guard, _ in found:
            if read_from not in self.sources and \
                    guard.label not in self.labels:
                self.sources.add(read_from)
                self.labels.add(guard.label)
                self.guards.append(guard)

    def _read_partial(self, fn, instance, prefix, depth):
        """A ``functools.partial``: its arguments (a model passed so, by
        identity; others by contents), then its function."""
        self._add([((id(fn), key), guard, None)
                   for key, value in list(enumerate(fn.args)) +
                   sorted(fn.keywords.items())
                   for guard in _make(
                       'argument %s of the partial' % (key,),
                       functools.partial(_bound_argument, fn, key), value,
                       ('contents', 'link'))])
        self.read(fn.func, instance, prefix, depth)

    def read_forwards(self, model, prefix):
        """Adds the guards of the ``forward`` of each link of ``model``
        (itself too) whose class is the user's, bound to that link, and
        of the user's functions a ``chainer.Sequential`` of it calls
        (``lambda h: h * SCALE``)."""
        for path, link in model.namedlinks():
            label = prefix + path.replace('/', '.')
            forward = getattr(type(link), 'forward', None)
            forward = _jitted(forward) or forward  # (@jit on the class)
            if _users_function(forward):
                self.read(forward, link, label, _CALLS_DEEP - 1)
            if isinstance(link, chainer.Sequential):
                for layer in link._layers:
                    if _users_function(layer) or \
                            isinstance(layer, functools.partial):
                        self.read(layer, None, label, _CALLS_DEEP - 1)

    def _module(self, fn):
        """How a global of ``fn`` is named: ``''`` in the jitted
        function's module, else that module's name and a dot."""
        if fn.__globals__ is getattr(self.top, '__globals__', None):
            return ''
        return '%s.' % fn.__globals__.get('__name__', '?')


def _users_modules(fn, names):
    """The modules of the user's code among the globals ``names`` and the
    closure variables of ``fn`` (``utils`` of ``utils.helper(x)``)."""
    values = [fn.__globals__.get(name) for name in names] + \
        [_cell_contents(cell) for cell in fn.__closure__ or ()]
    return [value for value in values
            if isinstance(value, types.ModuleType) and
            _users_module(value.__name__)]


def _module_attributes(module, names):
    """``[(source, guard, None)]`` on the attributes of a user's module
    among ``names`` (the attribute names a function's code reads too)."""
    namespace = vars(module)
    return [((id(namespace), name), g, None) for name in names
            if name in namespace for g in _make(
                'global %s.%s' % (module.__name__, name),
                functools.partial(namespace.get, name, ABSENT),
                namespace[name])]


def _attribute_chains(fn):
    """The attribute chains of two names or more on ``fn``'s first
    argument (``self.options.scale``: ``('options', 'scale')``) that its
    source reads, from its AST (through a name bound to a part of one
    too: ``o = self.options`` then ``o.scale``); empty if the source
    cannot be read."""
    code = fn.__code__
    if not code.co_argcount:
        return set()
    chains = _name_chains(fn).get(code.co_varnames[0], ())
    return set(chain for chain in chains if len(chain) >= 2)


def _name_chains(fn):
    """``{name: {attribute chain}}``: the attributes the source of ``fn``
    reads on each name (``CFG.scale``: ``{'CFG': {('scale',)}}``), a
    name bound to an attribute chain (``o = self.options``) read as that
    chain; from its AST, empty if the source cannot be read."""
    tree = source.function_ast(fn.__code__)
    if tree is None:  # (a lambda, exec: by its bytecode)
        return _bytecode_chains(fn.__code__)
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            rooted = _rooted_chain(node.value)
            if rooted is not None and rooted[1]:
                aliases[node.targets[0].id] = rooted
    chains = collections.defaultdict(set)
    for node in ast.walk(tree):
        rooted = _rooted_chain(node)
        if rooted is None or not rooted[1]:
            continue
        root, chain = rooted
        chains[root].add(chain)
        if root in aliases:
            alias_root, alias_chain = aliases[root]
            chains[alias_root].add(alias_chain + chain)
    return chains


_LOADS = frozenset(['LOAD_GLOBAL', 'LOAD_DEREF', 'LOAD_FAST', 'LOAD_NAME',
                    'LOAD_CLASSDEREF'])
_ATTRIBUTE_LOADS = frozenset(['LOAD_ATTR', 'LOAD_METHOD'])


def _bytecode_chains(code):
    """:func:`_name_chains` of a function without readable source, from
    its bytecode (and its comprehensions' and lambdas'): each name loaded
    and the attributes loaded on it right after."""
    chains = collections.defaultdict(set)
    for each in _codes_within(code):
        root, chain = None, ()
        for instruction in dis.get_instructions(each):
            if instruction.opname in _ATTRIBUTE_LOADS and root is not None:
                chain += (instruction.argval,)
                continue
            if root is not None and chain:
                chains[root].add(chain)
            root, chain = (instruction.argval, ()) \
                if instruction.opname in _LOADS else (None, ())
        if root is not None and chain:
            chains[root].add(chain)
    return chains


def _rooted_chain(node):
    """``(name, attributes)`` of an expression ``name.a.b``, else
    ``None``."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return node.id, tuple(reversed(names))


def _global_chains(fn, names):
    """``[(source, guard, None)]`` on the attributes the code of ``fn``
    reads on plain objects (``CFG.scale`` of ``CFG =
    argparse.Namespace(...)``, a dataclass) that the globals ``names``
    and its closure variables hold, read through ``__dict__`` from the
    global or the cell on each call."""
    code = fn.__code__
    cells = dict(zip(code.co_freevars, fn.__closure__ or ()))
    found = []
    for name, chains in sorted(_name_chains(fn).items()):
        if name in cells:
            get = functools.partial(_cell_contents, cells[name])
        elif name in names and name not in code.co_varnames:
            get = functools.partial(fn.__globals__.get, name, ABSENT)
        else:
            continue
        if not _plain_object(get()):
            continue
        for chain in sorted(chains):
            read = functools.partial(_read_after, get, chain)
            found += [((id(get()), chain), g, None) for g in _make(
                '%s %s.%s' % ('closure' if name in cells else 'global', name,
                              '.'.join(chain)), read, read())]
    return found


def _objects_held(fn, instance, prefix, names):
    """``[(label, object)]``: the plain objects (:func:`_plain_object`)
    that ``names`` of ``fn``'s code may name: attributes of ``instance``,
    globals, closure variables."""
    found = []
    held = vars(instance) if instance is not None else {}
    code = fn.__code__
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        found.append(('closure %s' % name, _cell_contents(cell)))
    for name in names:
        if name in held:
            found.append(('%s.%s' % (prefix, name), held[name]))
        elif name in fn.__globals__:
            found.append(('global %s' % name, fn.__globals__[name]))
    return [(label, obj) for label, obj in found if _plain_object(obj)]


def _methods_called(obj, names):
    """The methods of the user's code on ``type(obj)`` that ``names`` may
    call: those it names, and ``__call__`` (``self.scaler(h)``)."""
    kind = type(obj)
    methods = [getattr(kind, name, None) for name in names] + \
        [getattr(kind, '__call__', None)]
    return [m for m in methods if _users_function(m)]


def plain_objects(instance, depth=2):
    """``[(label, object, {name: id(value)})]``: the plain objects
    (:func:`_plain_object`) of the user's classes (not a jitted function
    set on the model) the model's links hold as attributes, or in
    lists, tuples and dicts of them (``depth`` deep), with what their
    attributes hold now (:func:`assigned_since` compares)."""
    found, seen = [], set()

    def visit(label, value, left):
        if id(value) in seen:
            return
        seen.add(id(value))
        if _plain_object(value) and \
                _users_module(type(value).__module__ or ''):
            found.append((label, value, dict(
                (k, id(v)) for k, v in vars(value).items())))
        elif left and isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                visit('%s[%d]' % (label, i), item, left - 1)
        elif left and isinstance(value, dict):
            for k, item in list(value.items()):
                visit('%s[%r]' % (label, k), item, left - 1)
    if isinstance(instance, chainer.Link):
        for path, link in instance.namedlinks():
            for name, value in list(vars(link).items()):
                visit('self%s.%s' % (path.rstrip('/').replace('/', '.'),
                                     name), value, depth)
    return found


def assigned_since(objects):
    """``label.name`` of each attribute of the :func:`plain_objects`
    ``objects`` assigned since they were listed."""
    return ['%s.%s' % (label, name) for label, obj, before in objects
            for name, value in vars(obj).items()
            if before.get(name) != id(value)]


def _plain_object(value):
    """An object of the user's own class holding attributes: not a link,
    an array, a scalar, a container, a module, a class or a function."""
    return hasattr(value, '__dict__') and not isinstance(
        value, (chainer.Link, chainer.Variable, type, types.ModuleType,
                types.FunctionType, types.MethodType) +
        chainer.get_array_types() + _CONTAINERS) and not is_scalar(value)


def _read_after(get, chain):
    return _read_chain(get(), chain)


def _chained(instance, chain, prefix='self'):
    """A guard on ``instance.a.b...`` where ``a`` is a plain object (not
    a link, whose scalars the cache guards, nor an array), or one a link
    of the model holds (``self.l.cfg.t``): read through the objects'
    ``__dict__`` on each call."""
    holder, k = instance, 0
    while k < len(chain) - 1 and isinstance(
            vars(holder).get(chain[k]), chainer.Link):
        holder, k = vars(holder)[chain[k]], k + 1
    if not _plain_object(vars(holder).get(chain[k])):
        return []
    read = functools.partial(_read_chain, instance, chain)
    return _make('%s.%s' % (prefix, '.'.join(chain)), read, read())


def _read_chain(obj, chain):
    for name in chain:
        obj = _plain_attribute(obj, name)
        if obj is ABSENT:
            break
    return obj


def _plain_attribute(obj, name):
    """``obj.name`` from its ``__dict__``, else from its class's (a
    default the instance may shadow later); a property's value (its
    getter run, as a data descriptor's: ``optimizer.lr``, a namedtuple's
    field); ``ABSENT`` for an attribute not found so."""
    held = inspect.getattr_static(type(obj), name, ABSENT)
    if inspect.isdatadescriptor(held):  # (a property, a namedtuple's field)
        try:
            return getattr(obj, name)
        except Exception:
            return ABSENT
    namespace = getattr(obj, '__dict__', None)
    if namespace is None:
        return ABSENT
    return namespace.get(name, held)


def _named(fn, instance, name, prefix='self', module='', as_global=True):
    """``[(source, guard, instance)]``: the guard on what ``name`` in
    ``fn``'s code may name (an attribute of ``instance``, a class
    attribute, a global where the code reads it as one, ``as_global``:
    ``'global %s%s' % (module, name)``), with what it reads and the
    instance a function it holds is bound to (a method's), else
    ``None``."""
    if instance is not None and name in vars(instance):
        link = isinstance(instance, chainer.Link)
        return [((id(instance), name), g, None) for g in _make(
            '%s.%s' % (prefix, name), functools.partial(
                _attribute, instance, name), vars(instance)[name],
            ('contents',) if link else ('value', 'identity', 'contents'))]
    classes = [c for c in type(instance).__mro__
               if not c.__module__.startswith('chainer')] \
        if instance is not None else []
    owner = next((c for c in classes if name in vars(c)), None)
    if owner is None and not as_global:
        return []
    namespace = vars(owner) if owner is not None else fn.__globals__
    label = '%s.%s' % (owner.__name__, name) if owner is not None \
        else 'global %s%s' % (module, name)
    bound = instance if owner is not None else None
    return [((id(namespace), name), g, bound) for g in _make(
        label, functools.partial(namespace.get, name, ABSENT),
        namespace.get(name, ABSENT))]


def _attribute(obj, name):
    return vars(obj).get(name, ABSENT)


def _default(fn, i):
    return fn.__defaults__[i]


def _kwdefault(fn, name):
    return (fn.__kwdefaults__ or {}).get(name, ABSENT)


def _bound_argument(partial, key):
    """A ``functools.partial``'s argument ``key`` (a position or a
    keyword)."""
    if isinstance(key, int):
        return partial.args[key] if key < len(partial.args) else ABSENT
    return partial.keywords.get(key, ABSENT)


def _cell_contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return ABSENT


# --- what a program assumes of links -----------------------------------------

class Number(object):
    """A Python scalar (or a tuple of them) as a program assumes it: equal
    to one of the same type and ``repr`` only (``3`` is not ``3.0``,
    ``-0.0`` not ``0.0``, and NaN is NaN); shown as the value."""

    __slots__ = ('value', '_key')

    def __init__(self, value):
        self.value = value
        self._key = tuple((type(x), repr(x)) for x in value) \
            if type(value) is tuple else (type(value), repr(value))

    def __eq__(self, other):
        return type(other) is Number and self._key == other._key

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return repr(self.value)


def attribute_state(value):
    """What a program assumes of one link attribute: its value for Python
    scalars (a :class:`Number`); its type for Variables (read on every
    call); its type, dtype and shape for arrays (read on every call, but
    the forward may have read the shape into Python: ``x[:,
    :self.w.shape[0]]``); the device it names for a device; its identity
    for anything else (a function, a link, an object, a container: those
    the forward names are guarded by their contents,
    ``python_guards``)."""
    if is_scalar(value):
        return Number(value)
    if isinstance(value, chainer.Variable):
        return '<%s>' % type(value).__name__
    if isinstance(value, chainer.get_array_types()):
        return '<%s %s%s>' % (type(value).__name__, value.dtype.name,
                              list(value.shape))
    if isinstance(value, chainer.backend.Device):
        return '<device %s>' % value
    return '<%s at %#x>' % (type(value).__name__, id(value))


def link_state(instance, ignored=frozenset()):
    """What a compiled program assumes of a model: for each link, its
    class and identity and the state of its attributes, but for the
    ``ignored`` ``(link path, name)`` pairs (attributes the forward
    assigns before reading, ``L.LSTM.reset_state()``, or holding numbers
    it does not read)."""
    if not isinstance(instance, chainer.Link):
        return {}
    state = dict((path or '/', _one_link_state(link))
                 for path, link in instance.namedlinks())
    return without_ignored(state, ignored) if ignored else state


def _one_link_state(link):
    attrs = tuple(sorted((k, attribute_state(v))
                         for k, v in vars(link).items()
                         if k != '_local_link_hooks'))
    attrs += (('(link hooks)', tuple(link_hooks(link))),)
    return type(link).__name__, id(link), _items_of(link), attrs


def _items_of(link):
    """What a program assumes of a link's items: a ``ChainList``'s
    number (its links are in the state), a ``chainer.Sequential``'s
    layers, functions included, by identity."""
    if isinstance(link, chainer.Sequential):
        return tuple(id(layer) for layer in link._layers)
    return len(link) if isinstance(link, chainer.ChainList) else None


def without_ignored(state, ignored):
    """A :func:`link_state` without the ``ignored`` attributes (one the
    forward assigns first may be there yet or not)."""
    return dict(
        (path, value[:3] + (tuple(
            (k, v) for k, v in value[3] if (path, k) not in ignored),))
        for path, value in state.items())


def link_hooks(link):
    """The names of the hooks registered on one link."""
    return list(vars(link).get('_local_link_hooks') or ())


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
