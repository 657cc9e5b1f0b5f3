"""Graph breaks: a forward cut around the statement that reads a value
into Python.

A recording that finds a value read into Python (``float(loss.array)``,
``.item()``) at a line of the forward's own code cannot replay it; the
forward is then cut at the statement of its body that holds that line:

* the *prefix*: the statements before it, as a function of the forward's
  parameters that returns the names they assign and later statements read;
* the *break*: that statement, run by Python on every call;
* the *suffix*: the statements after it, as a function of the names it
  reads.

The prefix and the suffix are jitted as functions of their own (by the
api), and a suffix that reads a value into Python is cut in turn. A
*driver* with the forward's signature runs the three::

    def forward(self, x, t):
        (h, y) = __prefix(x, t)             # jitted, bound to the model
        with __eager():                     # the links it calls compiled
            if float(F.sum(y).array) > 0:
                y = y * 2
        return __suffix(h, y)

Where the read is inside a block of that statement (a loop's body, a
``with``'s, a branch, at any depth), the block is cut the same way
(:class:`_Block`): the driver runs the statement with jitted pieces for
the block's statements around the read.

Statements move as written, with their lines and columns, so that
warnings, tracebacks and the loop analyses (:mod:`.source`) see the
forward's own lines. A name one part may leave unassigned (set in a loop
that may not run, deleted) passes as :data:`UNBOUND` and is deleted where
it arrives, so that Python raises where it would have. A forward is not
cut where moving statements could change what Python does: a generator,
``global`` or ``nonlocal``, calls that read the frame (``locals()``,
``vars()``, ``eval``, ``exec``), a ``return`` before the break, a read of
a name before a later part assigns it, or a name closures capture that
more than one part assigns. :func:`cut` then says why.
"""

import ast
import collections
import copy
import inspect
import os
import symtable
import types

from chainerjit.frontend import source
from chainerjit.frontend._keys import UNBOUND

# Calls that see the frame: moving statements into other frames changes
# what they give.
_FRAME_READERS = frozenset(['locals', 'vars', 'eval', 'exec', 'dir'])
_NOT_CUT_FLAGS = (inspect.CO_GENERATOR | inspect.CO_COROUTINE |
                  inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE)
_PREFIX, _SUFFIX, _EAGER = '__prefix', '__suffix', '__eager'
_APPENDED = '__appended_'
_UNBOUND, _UNBOUND_ERROR = '__UNBOUND', '__UnboundLocalError'

_UNBOUND_CELLS = {_UNBOUND: UNBOUND, _UNBOUND_ERROR: UnboundLocalError}


class Cut(object):
    """A forward cut at one statement.

    Attributes:
        line, end_line: the break statement's first and last lines.
        filename: the forward's file.
        prefix: the function of the statements before the break (the
            forward's parameters; returns the tuple of ``prefix_names``),
            or ``None`` where the break is the first statement.
        suffix: the function of the statements after it (the instance
            first, for a method, then ``suffix_names``), or ``None``.
    """

    def __init__(self, fn, function, index, method, line):
        body = function.body
        self.filename = fn.__code__.co_filename
        self.line = body[index].lineno
        self.end_line = body[index].end_lineno
        self._fn, self._function, self._index = fn, function, index
        self._method = method
        self.reason = None  # what the break reads into Python
        params = _parameters(function)
        before, stmt, after = body[:index], body[index], body[index + 1:]
        later = _names_read(after + [stmt])
        self.prefix_names = sorted(_assigned(before) & later)
        self.suffix_names = sorted(_names_read(after) & (
            params | _assigned(before) | _assigned([stmt])))
        self.suffix_names = [n for n in self.suffix_names
                             if n not in self._instance_name()]
        # Names that may be unassigned where a part ends (set in a loop,
        # deleted) pass as UNBOUND, and are deleted where they arrive.
        definite = _definitely_assigned(before, params)
        self._maybe_prefix = set(self.prefix_names) - definite
        self._maybe_suffix = set(self.suffix_names) - \
            _definitely_assigned([stmt], definite)
        self.prefix = self._piece(
            'prefix', before, function.args,
            self._returning_names(self.prefix_names, self._maybe_prefix)) \
            if before else None
        self.suffix = self._piece(
            'suffix', self._unbinding(self._maybe_suffix) + after,
            _plain_args(self._instance_name() + self.suffix_names)) \
            if after else None
        # The blocks of the statement cut too (a loop's body holding the
        # read, the branches of an if whose test reads): [(field, _Block)]
        self.inner = _inner_blocks(self, stmt, line, params,
                                   params | _assigned(body))

    def pieces(self):
        """``{name: function}`` of the pieces to jit: ``'prefix'``,
        ``'suffix'``, and for a read inside a block of the statement (a
        loop's body, a ``with``'s, a branch), the block's statements
        before and after the one that reads, named by their lines
        (``'lines 17-18'``), where there are such statements."""
        found = {'prefix': self.prefix, 'suffix': self.suffix}
        for _, block in self.inner:
            found.update(block.functions)
        return dict((k, fn) for k, fn in found.items() if fn is not None)

    def describe_lines(self):
        """Which lines run how: ``'line 31 runs in Python on every call,
        lines 25-30 and 32-40 compiled'``."""
        body, i = self._function.body, self._index
        parts = [_lines(stmts[0].lineno, stmts[-1].end_lineno) for stmts in (
            self._written(body[:i]) if self.prefix is not None else [],
            self._written(body[i + 1:]) if self.suffix is not None else [])
            if stmts]
        return '%s run%s in Python on every call%s' % (
            _lines(self.line, self.end_line),
            's' if self.line == self.end_line else '',
            ', %s compiled' % ' and '.join(parts) if parts else '') + (
            _describe_inner(self.inner))

    def _written(self, stmts):
        """``stmts`` less those a cut made (placed over the whole forward,
        in a piece cut again)."""
        whole = (self._function.lineno, self._function.end_lineno)
        return [s for s in stmts if (s.lineno, s.end_lineno) != whole]

    def describe(self):
        """The break, its reason and how the lines run."""
        return 'graph break at %s:%d (%s): %s' % (
            os.path.basename(self.filename), self.line, self.reason,
            self.describe_lines())

    def __repr__(self):
        return '<Cut of %s at line %d>' % (self._fn.__qualname__, self.line)

    def driver(self, jitted, eager):
        """The forward as Python that calls the jitted pieces (``jitted``,
        as :meth:`pieces` names them; for a method, bound to the instance,
        so called without it) and runs the break inside ``eager()``, a
        context manager."""
        first = self._function.body[0]
        body = []
        if self.prefix is not None:
            call = _call(_PREFIX, self._forwarded_args())
            body.append(_located(ast.Assign(
                targets=[_names_tuple(self.prefix_names, ast.Store())],
                value=call) if self.prefix_names else ast.Expr(call),
                first))
            body += self._unbinding(self._maybe_prefix)
        stmt = self._function.body[self._index]
        body.append(_driven(stmt, self.inner))
        if self.suffix is not None:
            body += self._binding(self._maybe_suffix)
            body.append(_located(ast.Return(_call(_SUFFIX, (
                [ast.Name(n, ast.Load()) for n in self.suffix_names],
                []))), stmt))
        cells = dict(_UNBOUND_CELLS, **{
            _PREFIX: jitted.get('prefix'), _SUFFIX: jitted.get('suffix'),
            _EAGER: eager})
        for _, block in self.inner:
            cells.update(block.cells(jitted))
        return self._compile('', body, self._function.args, cells,
                             defaults=True)

    # --- the pieces -----------------------------------------------------

    def _instance_name(self):
        return params_in_order(self._function)[:1] if self._method else []

    def _binding(self, maybe):
        """``try: name / except UnboundLocalError: name = __UNBOUND`` for
        each of ``maybe``, at the ``def`` line (which no escape is found
        at)."""
        return [_located(ast.Try(
            [ast.Expr(ast.Name(n, ast.Load()))],
            [ast.ExceptHandler(ast.Name(_UNBOUND_ERROR, ast.Load()), None, [
                ast.Assign([ast.Name(n, ast.Store())],
                           ast.Name(_UNBOUND, ast.Load()))])], [], []),
            self._function) for n in sorted(maybe)]

    def _unbinding(self, maybe):
        """``if name is __UNBOUND: del name`` for each of ``maybe``, at the
        ``def`` line (which no escape is found at)."""
        return [_located(ast.If(ast.Compare(
            ast.Name(n, ast.Load()), [ast.Is()],
            [ast.Name(_UNBOUND, ast.Load())]),
            [ast.Delete([ast.Name(n, ast.Del())])], []), self._function)
            for n in sorted(maybe)]

    def _piece(self, what, stmts, args, ret=None):
        body = list(stmts) + (ret or [])
        return self._compile('<%s>' % what, body, args, _UNBOUND_CELLS,
                             defaults=what == 'prefix', register=True)

    def _returning_names(self, names, maybe):
        """A piece's end, at the ``def`` line (which no loop and no escape
        is at): ``names`` returned as a tuple, those in ``maybe`` as
        UNBOUND where unassigned."""
        return self._binding(maybe) + [_located(ast.Return(
            _names_tuple(names, ast.Load())), self._function)]

    def _forwarded_args(self):
        """The driver's call of the prefix: the forward's parameters passed
        on as they came (less the instance, for a method)."""
        a = self._function.args
        positional = [p.arg for p in a.posonlyargs + a.args]
        if self._method:
            positional = positional[1:]
        args = [ast.Name(n, ast.Load()) for n in positional]
        if a.vararg is not None:
            args.append(ast.Starred(ast.Name(a.vararg.arg, ast.Load()),
                                    ast.Load()))
        keywords = [ast.keyword(p.arg, ast.Name(p.arg, ast.Load()))
                    for p in a.kwonlyargs]
        if a.kwarg is not None:
            keywords.append(ast.keyword(None, ast.Name(a.kwarg.arg,
                                                       ast.Load())))
        return args, keywords

    def _compile(self, qualifier, body, args, cells, defaults=False,
                 register=False):
        """A function of ``body`` with the forward's globals and closure
        cells (``cells``: more free names and their values)."""
        code_fn = self._fn.__code__
        function = self._def(body, args)
        compiled = function
        if '__class__' in code_fn.co_freevars:  # zero-argument super()
            compiled = self._def([_keep_class_cell(body[0])] + body, args)
        code = self._code(compiled, sorted(cells))
        outer = dict(zip(code_fn.co_freevars, self._fn.__closure__ or ()))
        closure = tuple(outer[n] if n in outer else
                        types.CellType(cells[n]) for n in code.co_freevars)
        made = types.FunctionType(code, self._fn.__globals__,
                                  self._fn.__name__, None, closure)
        made.__qualname__ = self._fn.__qualname__ + qualifier
        made.__module__ = self._fn.__module__
        if defaults:
            made.__defaults__ = self._fn.__defaults__
            made.__kwdefaults__ = self._fn.__kwdefaults__
        if register:
            source.register(code, ast.Module(body=[function],
                                             type_ignores=[]),
                            source.dedented_by(code_fn))
        return made

    def _def(self, body, args):
        function = ast.FunctionDef(
            name=self._fn.__name__, args=_without_defaults(args),
            body=list(body), decorator_list=[], returns=None,
            type_comment=None)
        ast.copy_location(function, self._function)
        function.end_lineno = body[-1].end_lineno
        return ast.fix_missing_locations(function)

    def _code(self, function, more_free):
        """The code of ``function`` compiled inside a factory whose
        parameters are the forward's free names and ``more_free``, so that
        they are free names of it too."""
        code_fn = self._fn.__code__
        factory = _located(ast.FunctionDef(
            name='__factory', args=_plain_args(list(dict.fromkeys(
                # (a piece cut again has the cells' names free already)
                list(code_fn.co_freevars) + list(more_free)))),
            body=[function, ast.Return(ast.Name(function.name, ast.Load()))],
            decorator_list=[], returns=None, type_comment=None),
            self._function)
        module = ast.Module(body=[_shifted(factory, source.dedented_by(
            code_fn))], type_ignores=[])
        factory_code = next(c for c in compile(
            module, self.filename, 'exec').co_consts
            if isinstance(c, types.CodeType))
        return next(c for c in factory_code.co_consts
                    if isinstance(c, types.CodeType))


class _Block(object):
    """A block of the forward (a loop's, a ``with``'s or a branch's
    statements) holding the read, cut at the statement that holds it: the
    statements before it and after it, each a jitted function the driver
    calls each time the block runs (``functions``, named by their lines),
    of every name of the forward they read and of those they may leave
    unassigned, returning every name they assign; the statement itself
    runs in Python, or, where it holds a block of its own around the read,
    is cut inside the same way. In a loop, values carried from one
    iteration to the next go through the driver's names. A list a piece
    only appends to (``ys.append(y)``, no other use) is not passed in,
    which would change an argument in place: the piece appends to a list
    of its own, which it returns and the driver adds to the forward's."""

    def __init__(self, cut, stmts, index, inner, params, local):
        self._cut, self._stmts, self._index = cut, stmts, index
        # inner: [(field, _Block)] of the statement at index
        self._inner, self._params = inner, params
        # name -> (inputs, outputs, maybe unassigned, appended lists)
        self._parts = {}
        self._sides = []  # the names of the pieces before and after
        self.functions = {}
        # index None: the whole block is one piece (a branch of an if
        # whose test reads)
        sides = (stmts, []) if index is None else (
            stmts[:index], stmts[index + 1:])
        for part in sides:
            what = _lines(part[0].lineno, part[-1].end_lineno) \
                if part else None
            self._sides.append(what)
            if part:
                self._parts[what] = self._names(part, local)
                self.functions[what] = self._function(what, part)
        for _, block in inner:
            self.functions.update(block.functions)

    def _names(self, part, local):
        appended = _appended_only(part, local)
        outputs = sorted(_assigned(part) & local)
        maybe = set(outputs) - _definitely_assigned(part, set())
        inputs = sorted(((_names_read(part) | maybe) & local) -
                        set(self._cut._instance_name()) - set(appended))
        return inputs, outputs + [_APPENDED + n for n in appended], maybe, \
            appended

    def _function(self, what, part):
        inputs, outputs, maybe, appended = self._parts[what]
        cut = self._cut
        fresh = [_located(ast.Assign([ast.Name(_APPENDED + n, ast.Store())],
                                     ast.List([], ast.Load())),
                          cut._function) for n in appended]
        body = cut._unbinding(set(inputs) - self._params) + fresh + \
            _appending_to_own(part, appended) + \
            cut._returning_names(outputs, maybe)
        return cut._compile('<%s>' % what, body, _plain_args(
            cut._instance_name() + inputs), _UNBOUND_CELLS, register=True)

    def cells(self, jitted):
        """The driver's free names of the jitted pieces, to ``jitted``'s
        functions."""
        return dict((_cell_of(what), jitted[what]) for what in self.functions)

    def driven(self):
        """The block as the driver runs it: the jitted pieces around the
        statement that reads, which runs inside ``eager()`` (or is cut
        inside)."""
        if self._index is None:
            return self._call(self._sides[0], self._stmts[0])
        stmt = self._stmts[self._index]
        return self._call(self._sides[0], stmt) + [
            _driven(stmt, self._inner)] + self._call(self._sides[1], stmt)

    def _call(self, what, where):
        """The driver's call of a piece (none where it has no statements):
        its inputs bound (UNBOUND where unassigned), its outputs assigned
        (deleted where UNBOUND)."""
        if what is None:
            return []
        inputs, outputs, maybe, appended = self._parts[what]
        cut = self._cut
        call = _call(_cell_of(what), (
            [ast.Name(n, ast.Load()) for n in inputs], []))
        stmt = ast.Assign(targets=[_names_tuple(outputs, ast.Store())],
                          value=call) if outputs else ast.Expr(call)
        extend = [_located(ast.Expr(ast.Call(ast.Attribute(
            ast.Name(n, ast.Load()), 'extend', ast.Load()),
            [ast.Name(_APPENDED + n, ast.Load())], [])), where)
            for n in appended]
        return cut._binding(set(inputs) - self._params) + \
            [_located(stmt, where)] + cut._unbinding(maybe) + extend


def _driven(stmt, inner):
    """``stmt`` as the driver runs it: with its blocks in ``inner`` cut
    (``[(field, _Block)]``), else inside ``eager()``."""
    if not inner:
        return _eagerly(stmt)
    driven = copy.copy(stmt)
    for field, block in inner:
        setattr(driven, field, block.driven())
    return driven


def _describe_inner(inner):
    names = [what for _, block in inner for what in block.functions]
    return '; inside it, %s compiled' % ' and '.join(
        sorted(names, key=_first_line)) if names else ''


def _cell_of(what):
    """The driver's free name of the piece of lines ``what``."""
    return '__piece_' + '_'.join(what.split()[-1].split('-'))


def _first_line(what):
    return int(what.split()[-1].split('-')[0])


def _appended_only(part, local):
    """The names of ``part`` used only as ``name.append(value)``
    statements (in its own scope), which it does not assign."""
    uses = collections.Counter(n.id for stmt in part for n in ast.walk(stmt)
                               if isinstance(n, ast.Name))
    appends = collections.Counter(
        _appended(node) for node in _own_nodes(part) if _appended(node))
    return sorted(n for n, count in appends.items()
                  if count == uses[n] and n in local and
                  n not in _assigned(part))


def _appended(stmt):
    """``name`` where ``stmt`` is ``name.append(value)``, else ``None``."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
            and call.func.attr == 'append' and isinstance(
                call.func.value, ast.Name) and len(call.args) == 1 and \
            not call.keywords and not isinstance(call.args[0], ast.Starred):
        return call.func.value.id
    return None


def _appending_to_own(part, names):
    """A copy of ``part`` whose ``name.append(value)`` statements append to
    ``__appended_name`` instead, for each of ``names``."""
    part = copy.deepcopy(part)
    for node in _own_nodes(part):
        if _appended(node) in names:
            node.value.func.value.id = _APPENDED + node.value.func.value.id
    return part


#: The compound statements cut inside, and their blocks.
_BLOCKS = ((ast.For, ('body',)), (ast.While, ('body',)),
           (ast.With, ('body',)), (ast.If, ('body', 'orelse')))


def _inner_blocks(cut, stmt, line, params, local):
    """``[(field, _Block)]``: the block of ``stmt`` (a loop's, a
    ``with``'s, a branch of an ``if``) holding ``line``, cut there; or,
    where ``line`` is in an ``if``'s test, its branches, each one piece.
    Only blocks whose statements around the read move without Python
    telling (no ``break``, ``continue`` or ``return`` among them, no name
    closures capture assigned in two parts); possibly none."""
    if isinstance(stmt, ast.If) and \
            stmt.test.lineno <= line <= stmt.test.end_lineno and not any(
                s.lineno <= line <= s.end_lineno
                for s in stmt.body + stmt.orelse):  # (not if t: n = int(x))
        return [(field, _Block(cut, getattr(stmt, field), None, [], params,
                               local))
                for field in ('body', 'orelse') if getattr(stmt, field) and
                not _exits(getattr(stmt, field)) and
                not _shared_in(cut, getattr(stmt, field), None)]
    fields = next((f for kind, f in _BLOCKS if isinstance(stmt, kind)), ())
    for field in fields:
        stmts = getattr(stmt, field)
        index = next((i for i, s in enumerate(stmts)
                      if s.lineno <= line <= s.end_lineno), None)
        if index is None:
            continue
        inner = _inner_blocks(cut, stmts[index], line, params, local)
        if len(stmts) == 1 and not inner:
            return []  # nothing around it to compile
        if _exits(stmts[:index] + stmts[index + 1:]) or _shared_in(
                cut, stmts, index):
            return []
        return [(field, _Block(cut, stmts, index, inner, params, local))]
    return []


def _shared_in(cut, stmts, index):
    """Does a name closures capture get assigned in two of the parts of
    ``stmts`` cut at ``index`` (for ``None``, in them and elsewhere in the
    forward)?"""
    if index is None:
        return bool(_cell_names(cut._function) & _assigned(stmts))
    return _shared_cell(cut._function, [
        _assigned(stmts[:index]), _assigned([stmts[index]]),
        _assigned(stmts[index + 1:])]) is not None


def _exits(stmts):
    """Do ``stmts`` leave their loop or function (``break`` or
    ``continue`` outside their own loops, ``return``)?"""
    stack = list(stmts)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Break, ast.Continue, ast.Return)):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.For, ast.While)):
            stack.extend(node.orelse)  # their body's exits are theirs
            stack.extend(_returns_in(node.body))
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def _returns_in(stmts):
    return [node for node in _own_nodes(stmts)
            if isinstance(node, ast.Return)]


def _eagerly(stmt):
    """``with __eager(): stmt``."""
    made = _located(ast.With(items=[ast.withitem(
        context_expr=_call(_EAGER, ([], [])))], body=[]), stmt)
    made.body = [stmt]
    return made


def cut(fn, line, method):
    """The :class:`Cut` of ``fn`` at the statement of its body holding
    ``line`` (of its file), or why it cannot be cut (a string).
    ``method``: the jitted function gets the instance as its first
    argument."""
    code = getattr(fn, '__code__', None)
    if code is None:
        return 'it is no Python function'
    if code.co_flags & _NOT_CUT_FLAGS:
        return 'it is a generator or a coroutine'
    found = source.function_and_offset(code)
    if found is None:
        return 'its source cannot be read'
    function, offset, _ = found
    function = copy.deepcopy(function)
    ast.increment_lineno(function, offset)
    body = function.body
    # (the narrowest: a piece's own statements span the whole forward)
    index = min((i for i, stmt in enumerate(body)
                 if stmt.lineno <= line <= stmt.end_lineno),
                key=lambda i: body[i].end_lineno - body[i].lineno,
                default=None)
    if index is None:
        return 'line %d is not in its body' % line
    why = _why_not_cut(function, index, method)
    if why is not None:
        return why
    made = Cut(fn, function, index, method, line)
    if len(body) == 1 and not made.inner:
        return 'its body is that one statement'
    return made


def _why_not_cut(function, index, method):
    body = function.body
    before, stmt, after = body[:index], body[index], body[index + 1:]
    for node in _own_nodes(body):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return 'it declares names global or nonlocal'
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            return 'it is a generator or a coroutine'
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in _FRAME_READERS:
            return 'it calls %s()' % node.func.id
    for node in _own_nodes(before):
        if isinstance(node, ast.Return):
            return 'it may return before line %d' % stmt.lineno
    params = _parameters(function)
    if method and not params_in_order(function):
        return 'it takes no instance argument'
    if method and params_in_order(function)[0] in _assigned(body):
        return 'it assigns to %s' % params_in_order(function)[0]
    why = _unbound_reads(before, stmt, after, params)
    if why is not None:
        return why
    return _shared_cells(function, before, stmt, after, params)


def _unbound_reads(before, stmt, after, params):
    """Why a name a later part reads may be unassigned where the earlier
    parts end (or is read by a part before one assigns it), or
    ``None``."""
    assigned_before = _assigned(before)
    local = params | assigned_before | _assigned([stmt]) | _assigned(after)
    checks = ((before, params | assigned_before),
              ([stmt], params | assigned_before | _assigned([stmt])))
    for part, bound in checks:
        early = (_names_read(part) & local) - bound
        if early:
            return 'it reads %s before assigning it' % sorted(early)[0]
    return None


def _shared_cells(function, before, stmt, after, params):
    """A name that closures capture (a cell) must be assigned by one part
    only, or a closure made in one part would not see another's
    assignment."""
    name = _shared_cell(function, [params, _assigned(before),
                                   _assigned([stmt]), _assigned(after)])
    if name is None:
        return None
    return ('%s, which a closure captures, is assigned on both sides of '
            'line %d' % (name, stmt.lineno))


def _shared_cell(function, parts):
    """The first name closures capture in ``function`` that more than one
    of ``parts`` (sets of names assigned) assigns, or ``None``."""
    return next((name for name in sorted(_cell_names(function))
                 if sum(name in part for part in parts) > 1), None)


# --- names ------------------------------------------------------------------

def params_in_order(function):
    a = function.args
    return [p.arg for p in a.posonlyargs + a.args]


def _parameters(function):
    a = function.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    return set(names)


def _own_nodes(stmts):
    """The nodes of ``stmts`` in the function's own scope (not inside the
    functions, lambdas and classes they define)."""
    stack = list(stmts)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _names_read(stmts):
    """Every name the statements mention, in any scope (more than they
    read from the function's: that only passes a name more)."""
    return set(n.id for stmt in stmts for n in ast.walk(stmt)
               if isinstance(n, ast.Name))


def _assigned(stmts):
    """The names the statements bind in the function's scope (assigned,
    imported, defined, caught, walrus targets), from ``symtable``."""
    if not stmts:
        return set()
    table = _table('def __part():\n' + ''.join(
        _indented(ast.unparse(stmt)) for stmt in stmts))
    return set(s.get_name() for s in table.get_symbols()
               if s.is_assigned() or s.is_imported())


def _cell_names(function):
    """The function's names that closures capture."""
    table = _table(ast.unparse(_without_decorators(function)))
    return set(s.get_name() for s in table.get_symbols()
               if s.is_local() and _captured(table, s.get_name()))


def _captured(table, name):
    for child in table.get_children():
        frees = child.get_frees() if isinstance(
            child, symtable.Function) else ()
        if name in frees or _captured(child, name):
            return True
    return False


def _table(text):
    return symtable.symtable(text, '<cut>', 'exec').get_children()[0]


def _indented(text):
    return ''.join('    ' + line + '\n' for line in text.splitlines())


def _definitely_assigned(stmts, bound):
    """The names certainly bound after ``stmts`` run to their end, given
    ``bound`` before: straight-line bindings, and those both sides of an
    ``if`` make; loops, ``try`` and ``match`` are taken to bind none, and
    a ``del`` anywhere in a statement to unbind its names."""
    bound = set(bound)
    for stmt in stmts:
        bound -= _deleted(stmt)
        if isinstance(stmt, ast.If):
            bound |= _definitely_assigned(stmt.body, bound) & \
                _definitely_assigned(stmt.orelse, bound)
        elif isinstance(stmt, ast.With):
            bound |= _assigned([ast.Assign(
                targets=[item.optional_vars], value=ast.Constant(None))
                for item in stmt.items if item.optional_vars is not None])
            bound |= _definitely_assigned(stmt.body, bound)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign,
                               ast.Import, ast.ImportFrom, ast.FunctionDef,
                               ast.ClassDef, ast.Expr)):
            if not isinstance(stmt, ast.AnnAssign) or stmt.value is not None:
                bound |= _assigned([stmt])
    return bound


def _lines(first, last):
    return 'line %d' % first if first >= last else 'lines %d-%d' % (
        first, last)


def _deleted(stmt):
    return set(node.id for node in _own_nodes([stmt])
               if isinstance(node, ast.Name) and
               isinstance(node.ctx, ast.Del))


# --- building ast ------------------------------------------------------------

def _plain_args(names):
    return ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names],
                         vararg=None, kwonlyargs=[], kw_defaults=[],
                         kwarg=None, defaults=[])


def _without_defaults(args):
    """The parameters without their defaults (the made function gets the
    forward's values) and annotations."""
    args = copy.deepcopy(args)
    args.defaults = []
    args.kw_defaults = [None] * len(args.kwonlyargs)
    for p in args.posonlyargs + args.args + args.kwonlyargs + [
            args.vararg, args.kwarg]:
        if p is not None:
            p.annotation = None
    return args


def _without_decorators(function):
    function = copy.copy(function)
    function.decorator_list = []
    function.returns = None
    function.args = _without_defaults(function.args)
    return function


def _names_tuple(names, ctx):
    return ast.Tuple([ast.Name(n, ctx) for n in names], ctx)


def _call(name, arguments):
    args, keywords = arguments
    return ast.Call(ast.Name(name, ast.Load()), args, keywords)


def _located(node, where):
    """``node`` and the nodes in it placed at ``where``'s lines."""
    ast.copy_location(node, where)
    return ast.fix_missing_locations(node)


def _keep_class_cell(where):
    """``if False: __class__``: keeps the ``__class__`` cell that a
    zero-argument ``super()`` reads in the made function's free names."""
    return _located(ast.If(ast.Constant(False), [ast.Expr(ast.Name(
        '__class__', ast.Load()))], []), where)


def _shifted(tree, columns):
    """A copy of ``tree`` with its columns moved right by ``columns`` (the
    file's, where the source was dedented)."""
    tree = copy.deepcopy(tree)
    for node in ast.walk(tree):
        for attr in ('col_offset', 'end_col_offset'):
            if getattr(node, attr, None) is not None:
                setattr(node, attr, getattr(node, attr) + columns)
    return tree
