"""Control flow: the loop sites of the forward's source, and where each
loop's iterations begin while a call is recorded.

:func:`loop_sites` reads a function's source with ``inspect`` and ``ast``
and lists its ``for`` and ``while`` statements; a comprehension is a loop
of its own code object. While recording, a :class:`LoopWatcher` follows
the interpreter's line events (``sys.settrace``) in user code and notes,
for each loop it runs, the number of IR nodes recorded so far at every
pass through the loop header: the boundaries between iterations. The
rolling stage (``rolling.py``) uses them to roll uniform iterations into
one loop region.

For a loop in the jitted function itself, the watcher also reads the
trip-count expression (``range(len(xs))``, ``range(xs.shape[0])``,
``range(n)``, ``for x in xs``) so that a trip count that comes from an
argument can be symbolic in the cache key.
"""

import ast
import collections
import dis
import inspect
import linecache
import os
import sys
import sysconfig
import textwrap
import types

import chainer
import numpy


LoopSite = collections.namedtuple(
    'LoopSite', 'kind header first last iter_expr filename targets')
LoopSite.__doc__ = """One loop of the source.

Fields:
    kind: ``'for'``, ``'while'`` or ``'comp'`` (a comprehension).
    header: the line the interpreter passes once per iteration (the
        ``for`` or ``while`` line; for a comprehension, its ``for``
        clause).
    first, last: the lines the loop statement spans.
    iter_expr: the ``ast`` node of a ``for`` loop's iterable, or ``None``.
    filename: the source file.
    targets: the names a ``for`` statement binds.
"""

_INTERNAL_DIRS = tuple(
    os.path.dirname(m.__file__) + os.sep for m in (chainer, numpy)) + (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) +
    os.sep,) + tuple(
    set(sysconfig.get_paths()[k] + os.sep for k in ('stdlib', 'platstdlib')))
_COMPREHENSIONS = ('<listcomp>', '<genexpr>', '<setcomp>', '<dictcomp>')
_SITES = {}  # code object -> {header line: LoopSite} (or None: no source)


def is_user_code(code):
    """False for Chainer's, NumPy's, chainerjit's, the standard library's
    and frozen modules'."""
    filename = code.co_filename
    return not (filename.startswith(_INTERNAL_DIRS) or
                filename.startswith('<frozen') or
                'cupy' + os.sep in filename)


def loop_sites(code):
    """``{header line: LoopSite}`` for the loops of a code object, or
    ``None`` when its source cannot be read (a plain REPL, ``exec``)."""
    try:
        return _SITES[code]
    except KeyError:
        pass
    if code.co_name in _COMPREHENSIONS:
        sites = _comprehension_site(code)
    else:
        sites = _statement_sites(code)
    _SITES[code] = sites
    return sites


def _statement_sites(code):
    try:
        lines, start = inspect.getsourcelines(code)
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(textwrap.dedent(''.join(lines)))
    except SyntaxError:  # a lambda inside an expression
        return None
    function = next((n for n in ast.walk(tree) if isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))), None)
    if function is None:
        return None
    offset = start - 1 if start else 0
    sites = {}
    body = function.body if isinstance(function.body, list) else []
    for node in _own_statements(body):
        if isinstance(node, (ast.For, ast.While)):
            header = node.lineno if isinstance(node, ast.For) \
                else node.test.lineno
            site = LoopSite(
                'for' if isinstance(node, ast.For) else 'while',
                header + offset, node.lineno + offset,
                _body_end(node) + offset,
                node.iter if isinstance(node, ast.For) else None,
                code.co_filename, tuple(
                    n.id for n in ast.walk(node.target)
                    if isinstance(n, ast.Name))
                if isinstance(node, ast.For) else ())
            sites[site.header] = site
    return sites


def _body_end(loop):
    """The last line of a loop's body (its ``else:`` clause is after
    the loop)."""
    return max(getattr(stmt, 'end_lineno', stmt.lineno)
               for stmt in loop.body)


def _own_statements(body):
    """The statements of a function body, nested blocks included, but not
    those of nested functions and classes (other code objects)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef, ast.Lambda)):
            continue
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                stack.append(child)
            elif isinstance(child, ast.excepthandler):
                stack.extend(child.body)


def _comprehension_site(code):
    """A comprehension with one ``for`` clause is one loop; its header is
    the line of its ``FOR_ITER`` instruction."""
    loops = [i for i in dis.get_instructions(code) if i.opname == 'FOR_ITER']
    if len(loops) != 1:
        return {}
    lines = [line for _, line in dis.findlinestarts(code)
             if line is not None]
    header = _line_of(code, loops[0].offset)
    site = LoopSite('comp', header, min(lines + [header]),
                    max(lines + [header]), None, code.co_filename, ())
    return {header: site}


def _line_of(code, offset):
    line = code.co_firstlineno
    for start, lineno in dis.findlinestarts(code):
        if start > offset:
            break
        if lineno is not None:
            line = lineno
    return line


class LoopRun(object):
    """One execution of a loop site while recording.

    Attributes:
        site: the :class:`LoopSite`.
        boundaries: the number of IR nodes recorded at each pass through
            the header; iteration ``k`` recorded nodes
            ``boundaries[k]:boundaries[k + 1]``.
        end: the number of nodes recorded when the loop was left.
        exit: ``'done'`` when the loop ran out (its header was passed once
            more than it has iterations), else ``'left'`` (``break``,
            ``return`` or an exception).
        in_top_frame: the loop is in the jitted function's own code.
        trip: how the trip count follows from the arguments (see
            :func:`trip_source`), or ``None``.
        reads: ``(position, description)`` of array values read into
            Python during the loop.
    """

    def __init__(self, site, position, in_top_frame, trip):
        self.site = site
        self.boundaries = [position]
        self.end = None
        self.exit = None
        self.in_top_frame = in_top_frame
        self.trip = trip
        self.last_header = True  # the latest line event was the header
        self.bound = None  # how many iterations the loop allows at most
        self.snapshots = []  # the frame's locals at each pass
        self.code = None  # the code object the loop is in
        self.targets = ()  # the names the loop statement binds
        self.defined = set()  # IR values its iterations computed
        self.python_safe = False  # see regions.python_unaware
        self.previous_lasti = -1  # a comprehension's latest line event
        self.previous_line = None

    @property
    def n_iterations(self):
        return len(self.boundaries) - (1 if self.exit == 'done' else 0)

    @property
    def loc(self):
        return self.site.filename, self.site.first


class LoopWatcher(object):
    """Follows line events in user code while a forward is recorded.

    Args:
        position: returns the number of IR nodes recorded so far.
        top_code: the jitted function's code object.
        arguments: ``{id(object): ('leaf', index)}`` for the call's
            Variables and arrays and ``{('static', name): (path, value)}``
            for its int arguments, to resolve trip counts.
    """

    def __init__(self, position, top_code, arguments):
        self.position = position
        self.top_code = top_code
        self.arguments = arguments
        self.runs = []  # LoopRuns, in order of their end
        self.no_source = []  # code objects with loops but no source
        self._open = {}  # id(frame) -> [LoopRun]: statement loops
        self._comps = {}  # id(frame) -> LoopRun of a comprehension
        self._previous = None

    def __enter__(self):
        self._previous = sys.gettrace()
        sys.settrace(self._on_call)
        return self

    def __exit__(self, *exc):
        sys.settrace(self._previous)
        for frame_id in list(self._open):
            self._close_all(frame_id)
        self._comps.clear()

    def _on_call(self, frame, event, arg):
        code = frame.f_code
        if event != 'call' or not is_user_code(code):
            return None
        sites = loop_sites(code)
        if sites is None:
            if _has_loop(code) and code not in self.no_source:
                self.no_source.append(code)
            return None
        if not sites:
            return None
        if code.co_name in _COMPREHENSIONS:
            if id(frame) not in self._comps:  # not a generator resuming
                site, = sites.values()
                self._comps[id(frame)] = self._start_comprehension(
                    site, frame)
            return self._on_comprehension_event
        return self._on_statement_event

    def _on_statement_event(self, frame, event, arg):
        if event == 'line':
            line = frame.f_lineno
            stack = self._open.setdefault(id(frame), [])
            while stack and not (stack[-1].site.first <= line <=
                                 stack[-1].site.last):
                self._close(stack.pop(), 'left')
            site = loop_sites(frame.f_code).get(line)
            if stack:
                stack[-1].last_header = site is stack[-1].site
            if site is not None:
                if stack and stack[-1].site is site:
                    stack[-1].boundaries.append(self.position())
                    stack[-1].snapshots.append(_locals_summary(frame))
                else:
                    stack.append(self._start(site, frame))
        elif event == 'return':
            self._close_all(id(frame))
        return self._on_statement_event

    def _start(self, site, frame):
        top = frame.f_code is self.top_code
        trip = trip_source(site, frame, self.arguments) if top else None
        run = LoopRun(site, self.position(), top, trip)
        run.code = frame.f_code
        if site.kind != 'comp' and only_array_exits(frame.f_code,
                                                    site.header):
            run.bound = iteration_bound(site, frame)
        run.snapshots.append(_locals_summary(frame))
        run.targets = site.targets
        return run

    def _start_comprehension(self, site, frame):
        """A comprehension written in the jitted function itself gets its
        trip count from its iterable, read in that function's frame, as a
        ``for`` statement's does."""
        parent = frame.f_back
        found = comprehension_and_parents(parent.f_code, site.header) \
            if parent is not None else None
        if found is None:
            return LoopRun(site, self.position(), False, None)
        generator = found[0].generators[0]
        site = site._replace(iter_expr=generator.iter)  # see may_vary
        if parent.f_code is not self.top_code:
            return LoopRun(site, self.position(), False, None)
        trip = trip_source(site, parent, self.arguments)
        run = LoopRun(site, self.position(), True, trip)
        run.code = parent.f_code
        run.targets = tuple(n.id for n in ast.walk(generator.target)
                            if isinstance(n, ast.Name))
        run.snapshots.append(_locals_summary(frame))
        return run

    def _on_comprehension_event(self, frame, event, arg):
        run = self._comps.get(id(frame))
        if run is None:
            return None
        if event == 'line':
            # Back at FOR_ITER: from a later instruction, or on the line
            # of the previous event (a one-line comprehension has no
            # event on the way there: only the jump back makes one).
            if _at_for_iter(frame) and (
                    frame.f_lasti <= run.previous_lasti or
                    frame.f_lineno == run.previous_line):
                run.boundaries.append(self.position())  # a jump back
                if run.code is not None:
                    run.snapshots.append(_locals_summary(frame))
            run.previous_lasti = frame.f_lasti
            run.previous_line = frame.f_lineno
        elif event == 'return' and not _suspended(frame):
            del self._comps[id(frame)]
            self._close(run, 'done')
        return self._on_comprehension_event

    def _close(self, run, how):
        run.end = self.position()
        # Left right after passing the header: the loop ran out.
        run.exit = 'done' if how == 'done' or run.last_header else 'left'
        self.runs.append(run)

    def _close_all(self, frame_id):
        for run in reversed(self._open.pop(frame_id, [])):
            self._close(run, 'left')


_FUNCTIONS = (types.FunctionType, types.MethodType, types.BuiltinFunctionType,
              type, types.ModuleType)


def _locals_summary(frame):
    """What the Python state of a frame is at a loop header: scalars by
    value, arrays and Variables by the identity of their array (and small
    arrays by contents too), lists by length and items, dicts, sets and
    the attributes of other objects (``self`` and its links) two levels
    deep."""
    return dict((name, _summary(value, 2))
                for name, value in frame.f_locals.items())


def _summary(value, depth):
    if isinstance(value, chainer.Variable):
        return ('array', id(value._data[0]))
    if isinstance(value, chainer.get_array_types()):
        small = isinstance(value, numpy.ndarray) and value.size <= 64
        return ('array', id(value)) + (  # the view does not read it as
            (value.view(numpy.ndarray).tobytes(),) if small else ())  # data
    if value is None or isinstance(value, (bool, int, float, str,
                                           numpy.generic)):
        return ('scalar', type(value), repr(value))
    if type(value) in (list, tuple):
        return ('list', type(value), tuple(_summary(v, depth)
                                           for v in value))
    if depth <= 0 or isinstance(value, _FUNCTIONS):
        return ('object', id(value))
    if type(value) is dict:
        return ('dict', id(value), tuple(
            (repr(k), _summary(v, depth - 1)) for k, v in value.items()))
    if type(value) in (set, frozenset):
        return ('set', id(value), tuple(sorted(repr(v) for v in value)))
    attributes = getattr(value, '__dict__', None)
    if attributes is None:
        return ('object', id(value))
    return ('object', id(value), tuple(
        (k, _summary(v, depth - 1)) for k, v in sorted(attributes.items())))


def _has_loop(code):
    return any(i.opname == 'FOR_ITER' or (
        i.opname.startswith('JUMP_BACKWARD'))
        for i in dis.get_instructions(code))


_FOR_ITER = dis.opmap['FOR_ITER']
_YIELD_VALUE = dis.opmap['YIELD_VALUE']


def _at_for_iter(frame):
    return frame.f_code.co_code[frame.f_lasti] == _FOR_ITER


def _suspended(frame):
    """A generator frame returning at a ``yield`` (it will resume)."""
    return frame.f_code.co_code[frame.f_lasti] == _YIELD_VALUE


_ITERATION_BUILTINS = frozenset(['range', 'len', 'zip', 'enumerate',
                                 'reversed', 'self'])


def may_vary(site):
    """Whether a loop's trip count may change between calls: false for a
    ``for`` over ``self``'s own lists and counts (``for layer in
    self.layers``, ``range(self.n_layers)``) or over a tuple or list
    written out (``for t in (q, k, v)``)."""
    if site.iter_expr is None:
        return True
    if isinstance(site.iter_expr, (ast.Tuple, ast.List)) and not any(
            isinstance(e, ast.Starred) for e in site.iter_expr.elts):
        return False  # for t in (q, k, v)
    names = [n.id for n in ast.walk(site.iter_expr)
             if isinstance(n, ast.Name)]
    return not all(n in _ITERATION_BUILTINS for n in names)


UNBOUNDED = 2 ** 62
_SAFE_NODES = (ast.Expression, ast.Name, ast.Load, ast.Attribute,
               ast.Subscript, ast.Constant, ast.BinOp, ast.UnaryOp,
               ast.operator, ast.unaryop, ast.Call, ast.Slice, ast.Tuple)
_SAFE_CALLS = frozenset(['range', 'len', 'min', 'max', 'zip', 'enumerate',
                         'reversed', 'int'])


def iteration_bound(site, frame):
    """The most iterations a loop can run, read when it starts: the
    length of a ``for`` loop's iterable (when it is made of names,
    attributes, ``range``, ``len``, ``zip``...), ``UNBOUNDED`` for
    ``while True:`` and for a ``while`` on an array reduction (left by its
    test); ``None`` when unknown."""
    if site.kind == 'while':
        test = _while_test(site, frame.f_code)
        if test is None:
            return None
        if isinstance(test, ast.Constant) and test.value is True:
            return UNBOUNDED
        return UNBOUNDED if branch_test(
            frame.f_code, site.header) is not None else None
    if site.iter_expr is None:
        return None
    node = site.iter_expr
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id in ('zip', 'enumerate') and not node.keywords:
        parts = node.args if node.func.id == 'zip' else node.args[:1]
        lengths = [_sized_length(p, frame) for p in parts]
        if not lengths or None in lengths:
            return None
        return min(lengths)
    return _sized_length(node, frame)


_SIZED = (range, list, tuple, chainer.Variable) + chainer.get_array_types()


def _sized_length(node, frame):
    """``len`` of what a side-effect-free expression gives, or None."""
    expression = ast.Expression(node)
    for part in ast.walk(expression):
        if not isinstance(part, _SAFE_NODES):
            return None
        if isinstance(part, ast.Call) and not (
                isinstance(part.func, ast.Name) and
                part.func.id in _SAFE_CALLS - {'zip', 'enumerate'}):
            return None
    try:
        value = eval(compile(expression, '<loop bound>', 'eval'),
                     frame.f_globals, dict(frame.f_locals))
        return len(value) if isinstance(value, _SIZED) else None
    except Exception:
        return None


def _while_test(site, code):
    found = _function_and_offset(code)
    if found is None:
        return None
    function, offset, _ = found
    for node in ast.walk(function):
        if isinstance(node, ast.While) and \
                node.test.lineno + offset == site.header:
            return node.test
    return None


# --- trip counts -----------------------------------------------------------

TripSource = collections.namedtuple('TripSource', 'kind where offset')
TripSource.__doc__ = """How a loop's trip count follows from the call.

``kind`` ``'dim'``: ``where`` is ``(leaf index, axis)`` and the trip count
is that dimension minus ``offset``; ``'static'``: ``where`` is ``(path,
name)`` of an int argument (its path in the key's structure), the trip
count its value minus ``offset``.
"""


def trip_source(site, frame, arguments):
    """Reads a ``for`` loop's iterable: ``range(E)``, ``range(a, E)``,
    ``enumerate(X)``, ``zip(X, ...)`` or ``X``, where ``E`` is
    ``len(X)``, ``X.shape[k]`` or an int argument and ``X`` a Variable or
    array argument. Returns a :class:`TripSource` or ``None``."""
    node = site.iter_expr
    if node is None:
        return None
    if _is_call(node, 'range') and 1 <= len(node.args) <= 2 and \
            not node.keywords:
        start = 0
        if len(node.args) == 2:
            if not isinstance(node.args[0], ast.Constant) or \
                    type(node.args[0].value) is not int:
                return None
            start = node.args[0].value
        return _length_source(node.args[-1], frame, arguments, start)
    if (_is_call(node, 'enumerate') or _is_call(node, 'zip')) and \
            node.args and not node.keywords:
        node = node.args[0]
    return _sequence_source(node, frame, arguments, 0)


def _is_call(node, name):
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
        and node.func.id == name


def _length_source(node, frame, arguments, offset):
    if _is_call(node, 'len') and len(node.args) == 1:
        return _sequence_source(node.args[0], frame, arguments, offset)
    if isinstance(node, ast.Subscript) and \
            isinstance(node.value, ast.Attribute) and \
            node.value.attr == 'shape' and \
            isinstance(node.slice, ast.Constant) and \
            type(node.slice.value) is int and node.slice.value >= 0:
        where = _argument(node.value.value, frame, arguments)
        if where is not None and where[0] == 'leaf':
            return TripSource('dim', (where[1], node.slice.value), offset)
        return None
    where = _argument(node, frame, arguments)
    if where is not None and where[0] == 'static':
        return TripSource('static', (where[1], node.id), offset)
    length = _length_alias(node, frame.f_code)
    if length is not None:
        return _length_source(length, frame, arguments, offset)
    return None


def _length_alias(node, code):
    """For a name the function assigns once, in a statement of its own
    body, from ``len(X)`` or ``X.shape[k]`` (``T = len(xs)``), that
    expression; else ``None``."""
    if not isinstance(node, ast.Name):
        return None
    function = _function_ast(code)
    if function is None or any(isinstance(n, (ast.Global, ast.Nonlocal))
                               for n in ast.walk(function)):
        return None
    stores = [n for n in _names(function, node.id)
              if not isinstance(n.ctx, ast.Load)]
    if len(stores) != 1:
        return None
    assign = next((s for s in function.body if isinstance(s, ast.Assign)
                   and s.targets == [stores[0]]), None)
    if assign is None:
        return None
    value = assign.value
    if _is_call(value, 'len') and len(value.args) == 1 or \
            isinstance(value, ast.Subscript) and \
            isinstance(value.value, ast.Attribute) and \
            value.value.attr == 'shape':
        return value
    return None


def _sequence_source(node, frame, arguments, offset):
    where = _argument(node, frame, arguments)
    if where is not None and where[0] == 'leaf':
        return TripSource('dim', (where[1], 0), offset)
    return None


def _argument(node, frame, arguments):
    """What an argument named by ``node`` (a plain name) is, if the name
    still holds the object the call passed."""
    if not isinstance(node, ast.Name):
        return None
    value = frame.f_locals.get(node.id, _MISSING)
    if type(value) is int:
        path, passed = arguments.get(('static', node.id), (None, None))
        return ('static', path) if passed == value else None
    return arguments.get(id(value))


_MISSING = object()


# --- names used only as lengths ----------------------------------------------

# Constant indexes allowed on an axis whose length is symbolic.
CONSTANT_INDEXES = (0, 1, -1, -2)


def length_only_names(code):
    """The parameters of a function that its source uses only to count
    and index loop iterations: in a ``for`` loop's iterable
    (``range(len(xs))``, ``range(xs.shape[0])``, ``range(n)``,
    ``enumerate(xs)``, ``zip(xs, ...)``, ``xs``), indexed by that loop's
    variable (``xs[t]``, ``xs[:, t]``) or by one of a few constants
    (``xs[0]``, ``xs[-1]``), and in names assigned once from such a length
    (``T = xs.shape[0]``) that are themselves used only in a ``range``.

    Only for such a name can the length be a symbol of the cache key: any
    other use (``xs.shape`` in a reshape, ``if len(xs) > 5``, passing
    ``xs`` to a helper) could bake the length into the recording. Reading
    another axis's size (``xs.shape[1]``, a batch size) is allowed: that
    size stays in the key.

    Returns:
        dict: ``{name: the axes whose sizes it reads otherwise}``; the
        length may be symbolic only on an axis not among them.
    """
    function = _function_ast(code)
    if function is None:
        return {}
    parents = {}
    for node in ast.walk(function):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    params = [a.arg for a in function.args.args + function.args.kwonlyargs]
    found = {}
    for name in params:
        uses = [n for n in ast.walk(function)
                if isinstance(n, ast.Name) and n.id == name]
        sizes = set()
        for use in uses:
            if not _length_use(use, parents, function):
                sizes.add(_size_read(use, parents))
        if uses and None not in sizes:
            found[name] = frozenset(sizes)
    return found


def _size_read(name, parents):
    """``k`` for ``name.shape[k]`` with ``k`` a non-negative int, else
    ``None``."""
    length = _length_expression(name, parents)
    if length is None or not isinstance(length, ast.Subscript):
        return None
    k = length.slice.value
    return k if type(k) is int and k >= 0 else None


def _function_and_offset(code):
    """The ``ast`` of a code object's function, the number to add to its
    line numbers to get the file's, and each node's parent; or
    ``None``."""
    function = _function_ast(code)
    if function is None:
        return None
    try:
        _, start = inspect.getsourcelines(code)
    except (OSError, TypeError):
        return None
    parents = {}
    for node in ast.walk(function):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return function, (start - 1 if start else 0), parents


def _function_ast(code):
    try:
        lines, _ = inspect.getsourcelines(code)
        tree = ast.parse(textwrap.dedent(''.join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    return next((n for n in ast.walk(tree) if isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)


def _length_use(name, parents, function):
    if not isinstance(name.ctx, ast.Load):
        return False
    parent = parents.get(name)
    if _is_iterable_of_for(name, parents):  # for x in xs / zip(xs, ys)
        return True
    length = _length_expression(name, parents)
    if length is not None:
        holder = parents.get(length)
        if _is_range_bound(length, parents):
            return True
        if isinstance(holder, ast.Assign) and len(holder.targets) == 1 \
                and isinstance(holder.targets[0], ast.Name):
            alias = holder.targets[0].id
            uses = [n for n in ast.walk(function)
                    if isinstance(n, ast.Name) and n.id == alias]
            return all(n is holder.targets[0] or (
                isinstance(n.ctx, ast.Load) and _is_range_bound(n, parents))
                for n in uses)
        return False
    if isinstance(parent, ast.Subscript) and parent.value is name:
        return _loop_index(parent, parents)
    if _is_range_bound(name, parents):  # range(n), n an int argument
        return True
    return False


def _length_expression(name, parents):
    """``len(name)`` or ``name.shape[k]``: the expression, else None."""
    parent = parents.get(name)
    if _is_call(parent, 'len') and parent.args == [name]:
        return parent
    if isinstance(parent, ast.Attribute) and parent.attr == 'shape':
        sub = parents.get(parent)
        if isinstance(sub, ast.Subscript) and sub.value is parent and \
                isinstance(sub.slice, ast.Constant):
            return sub
    return None


def _is_range_bound(node, parents):
    """``node`` is the last argument of ``range(...)``, the iterable of a
    ``for`` statement."""
    call = parents.get(node)
    return _is_call(call, 'range') and call.args and \
        call.args[-1] is node and _is_for_iterable(call, parents)


def _is_for_iterable(node, parents):
    loop = parents.get(node)
    return isinstance(loop, (ast.For, ast.comprehension)) and \
        loop.iter is node


def _is_iterable_of_for(name, parents):
    if _is_for_iterable(name, parents):
        return True
    call = parents.get(name)
    return (_is_call(call, 'zip') or _is_call(call, 'enumerate')) and \
        name in call.args and _is_for_iterable(call, parents)


def _loop_index(subscript, parents):
    """``xs[t]`` or ``xs[:, t]`` inside ``for t in ...``, or ``xs[0]``."""
    index = subscript.slice
    items = index.elts if isinstance(index, ast.Tuple) else [index]
    variables = [i for i in items if isinstance(i, ast.Name)]
    constants = [i for i in items if isinstance(i, ast.Constant)
                 or (isinstance(i, ast.UnaryOp) and
                     isinstance(i.operand, ast.Constant))]
    full = [i for i in items if isinstance(i, ast.Slice) and
            i.lower is None and i.upper is None and i.step is None]
    if len(variables) + len(constants) != 1 or \
            len(full) + 1 != len(items):
        return False
    if constants:
        value = ast.literal_eval(constants[0])
        return value in CONSTANT_INDEXES
    target = variables[0].id
    node = subscript
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.For) and _targets(node.target, target):
            return True
        if isinstance(node, _COMPREHENSION_NODES) and any(
                _targets(g.target, target) for g in node.generators):
            return True
    return False


def _targets(target, name):
    """``for name in ...`` or ``for name, x in enumerate(...)``."""
    if isinstance(target, ast.Name):
        return target.id == name
    if isinstance(target, ast.Tuple) and target.elts and \
            isinstance(target.elts[0], ast.Name):
        return target.elts[0].id == name
    return False


# --- branches on array values ------------------------------------------------

BranchTest = collections.namedtuple('BranchTest',
                                    'kind negated breaks loop')
BranchTest.__doc__ = """An ``if`` or ``while`` whose test is one reduction
of an array to a truth value (``(y.array == EOS).all()``, ``not
numpy.any(m)``).

Fields:
    kind: ``'if'`` or ``'while'``.
    negated: the test is ``not <reduction>``.
    breaks: for an ``if``, its body is just ``break``.
    loop: the header line of the loop the test can leave (the ``while``
        itself, or the loop around a breaking ``if``), or ``None``.
"""

_REDUCTIONS = ('all', 'any')
_TESTS = {}  # (code, line) -> BranchTest or None


def branch_test(code, line):
    """The :class:`BranchTest` whose test is on ``line`` of ``code``'s
    source, or ``None``."""
    key = (code, line)
    if key not in _TESTS:
        _TESTS[key] = _find_branch_test(code, line)
    return _TESTS[key]


def _find_branch_test(code, line):
    found = _function_and_offset(code)
    if found is None:
        return None
    function, offset, parents = found
    local = line - offset
    for node in ast.walk(function):
        if not isinstance(node, (ast.If, ast.While)):
            continue
        test = node.test
        if not (test.lineno <= local <= getattr(test, 'end_lineno', local)):
            continue
        negated = isinstance(test, ast.UnaryOp) and isinstance(
            test.op, ast.Not)
        if negated:
            test = test.operand
        if not _is_reduction(test):
            return None
        breaks = isinstance(node, ast.If) and not node.orelse and \
            len(node.body) == 1 and isinstance(node.body[0], ast.Break)
        loop = node if isinstance(node, ast.While) else \
            _enclosing_loop(node, parents) if breaks else None
        if breaks and loop is not None and (
                loop.body[-1] is not node or loop.orelse):
            # Python after the break, or a for-else, would see it.
            loop = None
        return BranchTest(
            'if' if isinstance(node, ast.If) else 'while', negated, breaks,
            None if loop is None else _header_line(loop) + offset)
    return None


def _enclosing_loop(node, parents):
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.For, ast.While)):
            return node
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            return None
    return None


def _header_line(loop):
    return loop.lineno if isinstance(loop, ast.For) else loop.test.lineno


def _is_reduction(test):
    """``x.all()``, ``x.any()``, ``numpy.all(x)`` or ``xp.any(x)``."""
    if not isinstance(test, ast.Call) or test.keywords:
        return False
    func = test.func
    if not isinstance(func, ast.Attribute) or func.attr not in _REDUCTIONS:
        return False
    inner = [n for n in ast.walk(test) if n is not test and
             isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr in _REDUCTIONS]
    return not inner and len(test.args) <= 1


# --- loops whose trip count may be symbolic ----------------------------------

_COLLECTORS = frozenset(['stack', 'concat', 'vstack', 'hstack', 'dstack'])


_COMPREHENSION_NODES = (ast.ListComp, ast.SetComp, ast.DictComp,
                        ast.GeneratorExp)


def comprehension_and_parents(code, header):
    """The one comprehension with a single ``for`` clause whose source
    spans ``header`` in ``code``'s function, innermost first, and each
    node's parent; ``None`` if there is none or the line is ambiguous."""
    found = _function_and_offset(code)
    if found is None:
        return None
    function, offset, parents = found
    line = header - offset
    spanning = [n for n in ast.walk(function)
                if isinstance(n, _COMPREHENSION_NODES) and
                n.lineno <= line <= n.end_lineno]
    innermost = [n for n in spanning
                 if not any(m is not n and m in set(ast.walk(n))
                            for m in spanning)]
    if len(innermost) != 1 or len(innermost[0].generators) != 1:
        return None
    return innermost[0], parents


def comprehension_problem(code, header, kinds=None):
    """As :func:`symbolic_loop_problem`, for a comprehension in ``code``
    whose ``for`` clause is on ``header``: one ``for`` clause without
    ``if``; a counter (``range``, ``enumerate``) used only to index; no
    ``:=`` and no hidden Python state change; and the list it makes is
    used only whole, by ``F.stack`` or ``F.concat``, directly or through
    a name assigned once."""
    found = comprehension_and_parents(code, header)
    if found is None:
        return 'no source'
    comp, parents = found
    generator = comp.generators[0]
    if generator.ifs or generator.is_async:
        return 'the comprehension filters its items'
    inside = set(ast.walk(comp)) - set(ast.walk(generator.iter))
    if any(isinstance(n, (ast.NamedExpr, ast.Yield, ast.Await))
           for n in inside):
        return 'the comprehension assigns a name or yields'
    counter = _counter_name(generator)
    for use in inside:
        if isinstance(use, ast.Name) and use.id == counter and \
                isinstance(use.ctx, ast.Load) and \
                not _index_use(use, parents):
            return 'the loop variable %r is used in Python' % counter
    hidden = _hidden_state_change(inside, kinds or {})
    if hidden:
        return hidden
    return _whole_list_use(comp, parents)


def _whole_list_use(comp, parents):
    """``None`` if the comprehension's list is only passed whole to a
    collector (``F.stack([...])``, or ``hs = [...]`` then ``F.stack(hs)``
    only)."""
    holder = parents.get(comp)
    if _collected(comp, holder):
        return None
    if isinstance(holder, ast.Assign) and len(holder.targets) == 1 and \
            isinstance(holder.targets[0], ast.Name):
        function = _enclosing_function(holder, parents)
        uses = [n for n in _names(function, holder.targets[0].id)
                if n is not holder.targets[0]]
        if all(isinstance(n.ctx, ast.Load) and
               _collected(n, parents.get(n)) for n in uses):
            return None
    return 'the list the comprehension makes is used item by item'


def _collected(node, call):
    """``call`` passes ``node`` whole to ``F.stack``, ``F.concat``..."""
    return isinstance(call, ast.Call) and node in call.args and \
        _call_name(call) in _COLLECTORS


def _enclosing_function(node, parents):
    """The function holding ``node`` (these very ast nodes)."""
    while node in parents and not isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        node = parents[node]
    return node


def symbolic_loop_problem(code, header, kinds=None):
    """Why the loop at ``header`` of ``code`` cannot run for another trip
    count than the one recorded, read from the source; ``None`` if it
    can. Its Python must not see the count: the loop variable is used
    only to index (``xs[t]``) and not after the loop; the body has no
    ``break``, ``continue`` or ``return`` other than ``if <array
    test>: break``; and the lists it appends to are used after it only
    whole, by ``F.stack`` or ``F.concat``. Python state it could change
    out of sight (``next(it)``, ``d['n'] += 1``, ``rng.uniform()``) is
    not allowed either: ``kinds`` gives each local's kind at the loop's
    start (``'array'``, ``'list'``, ...)."""
    found = _loop_and_parents(code, header)
    if found is None:
        return 'no source'
    loop, parents = found
    function = _enclosing_function(loop, parents)
    inside = set(ast.walk(loop)) - {loop.iter if isinstance(loop, ast.For)
                                    else loop.test}
    for jump in _python_jumps(loop, inside, parents):
        return 'the body has a %s' % type(jump).__name__.lower()
    if isinstance(loop, ast.For):
        for target in set(n.id for n in ast.walk(loop.target)
                          if isinstance(n, ast.Name)):
            for use in _names(function, target):
                if use not in set(ast.walk(loop)) and \
                        use.lineno > loop.lineno and \
                        not _rebound_by_a_loop(use, target, parents):
                    return 'the loop variable %r is used after the loop' % (
                        target)
        counter = _counter_name(loop)
        for use in _names(function, counter):
            target = _target_name(loop.target, counter)
            if use in inside and use is not target:
                if not _index_use(use, parents):
                    return 'the loop variable %r is used in Python' % (
                        counter)
            elif use not in inside and use not in set(ast.walk(loop)):
                if use.lineno > loop.lineno and not _rebound_by_a_loop(
                        use, counter, parents):
                    return 'the loop variable %r is used after the loop' % (
                        counter)
    if _appends_elsewhere(inside):
        return 'the loop appends to a list held by an attribute or an item'
    hidden = _hidden_state_change(inside, kinds or {})
    if hidden:
        return hidden
    for name in _appended_lists(loop, inside):
        for use in _names(function, name):
            if use in inside or use.lineno <= loop.lineno:
                continue
            if not _collected(use, parents.get(use)):
                return 'the list %r is used after the loop' % name
    return None


# Calls a loop body may make: these builtins, functions of these modules,
# ``self.name(...)`` (a link or a method), and methods of arrays and
# Variables (and ``append`` of lists).
_PURE_BUILTINS = frozenset(['len', 'range', 'min', 'max', 'abs', 'zip',
                            'enumerate', 'isinstance', 'tuple', 'list'])
_ARRAY_MODULES = frozenset(['F', 'L', 'chainer', 'functions', 'links',
                            'numpy', 'np', 'xp', 'cupy', 'math'])
_LIST_METHODS = frozenset(['append', 'extend', 'insert'])


def _hidden_state_change(inside, kinds):
    """What in a loop body could change Python state that the loop
    watcher's snapshots do not see, or ``None``."""
    for node in inside:
        if isinstance(node, ast.AugAssign) and not isinstance(
                node.target, ast.Name):
            return 'the loop updates an item or attribute in place'
        if isinstance(node, ast.Assign) and any(
                isinstance(t, (ast.Subscript, ast.Attribute)) and
                _root_name(t) != 'self' for t in node.targets):
            return 'the loop assigns an item or attribute'
        if isinstance(node, ast.Call):
            problem = _hidden_call(node, kinds)
            if problem:
                return problem
    return None


def _hidden_call(call, kinds):
    func = call.func
    if isinstance(func, ast.Name):
        return None if func.id in _PURE_BUILTINS else \
            'the loop calls %s()' % func.id
    if not isinstance(func, ast.Attribute):
        return 'the loop calls a computed function'
    root = _root_name(func)
    if root is None or root in _ARRAY_MODULES:
        return None  # a method of a value computed here, F.relu(...)
    if root == 'self' and isinstance(func.value, ast.Name):
        return None  # self.lstm(x), self.step(h)
    kind = kinds.get(root)
    if kind == 'array' or (kind == 'list' and func.attr in _LIST_METHODS
                           and isinstance(func.value, ast.Name)):
        return None  # h.reshape(...), y.array.all(), ys.append(h)
    return 'the loop calls %s()' % func.attr


def _root_name(node):
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _python_jumps(loop, inside, parents):
    """The ``break``, ``continue``, ``return`` and ``yield`` in a loop's
    body, but for ``if <array test>: break`` leaving this loop."""
    jumps = [n for n in inside if isinstance(
        n, (ast.Break, ast.Continue, ast.Return, ast.Yield,
            ast.YieldFrom))]
    return [j for j in jumps if not (
        isinstance(j, ast.Break) and _is_array_break(j, parents) and
        _enclosing_loop(j, parents) is loop)]


def only_array_exits(code, header):
    """Whether the loop at ``header`` can be left only by its iterable
    running out, its own test, or ``if <array test>: break``: then how
    many iterations it may run is known when it starts."""
    found = _loop_and_parents(code, header)
    if found is None:
        return False
    loop, parents = found
    inside = set(ast.walk(loop))
    return not loop.orelse and not _python_jumps(loop, inside, parents)


def _loop_and_parents(code, header):
    found = _function_and_offset(code)
    if found is None:
        return None
    function, offset, parents = found
    loop = next((n for n in ast.walk(function)
                 if isinstance(n, (ast.For, ast.While)) and
                 _header_line(n) + offset == header), None)
    return None if loop is None else (loop, parents)


def _rebound_by_a_loop(use, name, parents):
    """The use is in (or is the target of) another ``for`` that binds the
    name again."""
    node = use
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.For) and _target_name(node.target, name):
            return True
    return False


def _is_array_break(jump, parents):
    test = parents.get(jump)
    if not isinstance(test, ast.If) or test.body != [jump] or test.orelse:
        return False
    expression = test.test
    if isinstance(expression, ast.UnaryOp) and isinstance(
            expression.op, ast.Not):
        expression = expression.operand
    return _is_reduction(expression)


def _counter_name(loop):
    """The name bound to the position: ``t`` in ``for t in range(...)``
    and ``for t, x in enumerate(...)``; ``None`` when the loop binds
    elements only (``for x in xs``)."""
    iterable = loop.iter
    if _is_call(iterable, 'range') and isinstance(loop.target, ast.Name):
        return loop.target.id
    if _is_call(iterable, 'enumerate') and isinstance(
            loop.target, ast.Tuple) and isinstance(loop.target.elts[0],
                                                   ast.Name):
        return loop.target.elts[0].id
    return None


def _target_name(target, name):
    for node in ast.walk(target):
        if isinstance(node, ast.Name) and node.id == name:
            return node
    return None


def _names(function, name):
    if name is None:
        return []
    return [n for n in ast.walk(function)
            if isinstance(n, ast.Name) and n.id == name]


def counter_indexed_names(code, header):
    """The names a ``for`` loop's counter indexes (``xs`` in ``xs[t]``),
    or ``None`` when one is not a plain name."""
    found = _loop_and_parents(code, header)
    if found is None:
        return None
    loop, parents = found
    if not isinstance(loop, ast.For):
        return set()
    counter = _counter_name(loop)
    names = set()
    for use in ast.walk(loop):
        if isinstance(use, ast.Name) and use.id == counter and \
                _index_use(use, parents):
            parent = parents[use]
            subscript = parents[parent] if isinstance(
                parent, ast.Tuple) else parent
            if not isinstance(subscript.value, ast.Name):
                return None
            names.add(subscript.value.id)
    return names


def _index_use(name, parents):
    """``xs[t]`` or ``xs[:, t]``: the name alone in an index."""
    if not isinstance(name.ctx, ast.Load):
        return False
    parent = parents.get(name)
    if isinstance(parent, ast.Tuple):
        parent = parents.get(parent)
    return isinstance(parent, ast.Subscript) and parent.value is not name


def appended_lists(code, header):
    """The names of the lists a loop appends to (``ys.append(h)``,
    ``ys += [h]``)."""
    found = _loop_and_parents(code, header)
    if found is None:
        return set()
    loop, _ = found
    return _appended_lists(loop, set(ast.walk(loop)))


def _appends_elsewhere(inside):
    """``self.ys.append(h)``, ``d['ys'].append(h)``: appending to a list
    that is not a plain local name."""
    return any(isinstance(node, ast.Call) and isinstance(
        node.func, ast.Attribute) and node.func.attr in (
            'append', 'extend', 'insert') and not isinstance(
            node.func.value, ast.Name) for node in inside)


def _appended_lists(loop, inside):
    found = set()
    for node in inside:
        if isinstance(node, ast.Call) and isinstance(
                node.func, ast.Attribute) and node.func.attr in (
                    'append', 'extend', 'insert') \
                and isinstance(node.func.value, ast.Name):
            found.add(node.func.value.id)
        elif isinstance(node, ast.AugAssign) and isinstance(
                node.target, ast.Name) and isinstance(
                    node.value, (ast.List, ast.ListComp, ast.Tuple)):
            found.add(node.target.id)  # ys += [h]
    return found


def _call_name(call):
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def returned_directly(loc):
    """Whether the source line ``loc`` is a ``return`` whose value is, or
    is a tuple holding, a call of ``stack``/``concat``/...: then Python
    cannot read the stacked value (its length) before it is returned."""
    if loc is None:
        return False
    filename, line = loc
    tree = _file_ast(filename)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None and \
                node.lineno <= line <= getattr(node, 'end_lineno', line):
            items = node.value.elts if isinstance(
                node.value, ast.Tuple) else [node.value]
            return any(isinstance(item, ast.Call) and
                       _call_name(item) in _COLLECTORS and
                       item.lineno <= line <= item.end_lineno
                       for item in items)
    return False


_FILES = {}


def _file_ast(filename):
    if filename not in _FILES:
        try:
            _FILES[filename] = ast.parse(''.join(
                linecache.getlines(filename)))
        except SyntaxError:
            _FILES[filename] = None
    return _FILES[filename]
