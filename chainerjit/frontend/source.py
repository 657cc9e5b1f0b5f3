"""The forward's source, read back for the loop analyses: the ``ast`` of
a code object's function and of a whole file, each node's parent, and a
few questions about ``ast`` nodes that :mod:`.control`,
:mod:`.trip_counts` and :mod:`.loop_analysis` share.

A function's source is read again with ``inspect`` at each question; a
file's ``ast`` is parsed once and kept. The functions :mod:`.breaks` makes
from a forward's statements have no text of their own: their ``ast`` is
registered (:func:`register`) and read from there.
"""

import ast
import collections
import functools
import inspect
import linecache
import re
import textwrap
import weakref


# Comprehensions: each one is a code object of its own.
COMPREHENSION_NODES = (ast.ListComp, ast.SetComp, ast.DictComp,
                       ast.GeneratorExp)

_FILES = {}  # file name -> its ast, or None (not parsable)
# code object -> (its module's ast, its columns' dedent), for the
# functions made from a forward's statements (lines already the file's)
_MADE = weakref.WeakKeyDictionary()


def register(code, tree, dedent):
    """Registers the ``ast`` (a module holding one ``def``, in the file's
    lines and columns less ``dedent``) of a function made from another's
    statements, compiled to ``code``."""
    _MADE[code] = (tree, dedent)


def parsed_source(code):
    """The ``ast`` of a code object's source (dedented) and the number to
    add to its line numbers to get the file's; ``None`` when the source
    cannot be read (a plain REPL, ``exec``) or parsed (a lambda inside an
    expression)."""
    made = _MADE.get(code)
    if made is not None:
        return made[0], 0
    try:
        lines, start = source_lines(code)
        tree = ast.parse(textwrap.dedent(''.join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    return tree, (start - 1 if start else 0)


# The first line of a function's source, as ``inspect.findsource`` finds
# it above a code object's first line.
_DEF_LINE = re.compile(
    r'^(\s*def\s)|(\s*async\s+def\s)|(.*(?<!\w)lambda(:|\s))|^(\s*@)')


def source_lines(code):
    """``inspect.getsourcelines(code)`` of a code object, its file's lines
    read from ``linecache`` (checked against the file first, as inspect
    does) by the code's file name: inspect first looks the code's module
    up, which scans every module loaded (60 ms at a process's first
    compile). Inspect's own where ``linecache`` has no lines for the file
    (a module whose loader gives its source)."""
    filename = code.co_filename
    linecache.checkcache(filename)
    lines = linecache.getlines(filename)
    if not lines:
        return inspect.getsourcelines(code)
    first = code.co_firstlineno - 1
    while first > 0:
        if first >= len(lines):
            raise OSError('lineno is out of bounds')
        if _DEF_LINE.match(lines[first]):
            break
        first -= 1
    return inspect.getblock(lines[first:]), first + 1


def dedented_by(code):
    """How many columns :func:`parsed_source` took off the start of each
    line of a code object's source (a method's indentation): add them to
    an ``ast`` node's columns to get the file's."""
    made = _MADE.get(code)
    if made is not None:
        return made[1]
    try:
        first = source_lines(code)[0][0]
    except (OSError, TypeError):
        return 0
    indent = len(first) - len(first.lstrip())
    return indent - (len(textwrap.dedent(first)) -
                     len(textwrap.dedent(first).lstrip()))


def function_ast(code):
    """The ``ast`` of a code object's function (its ``def``), or
    ``None``."""
    parsed = parsed_source(code)
    return None if parsed is None else _first_function(parsed[0])


def function_and_offset(code):
    """The ``ast`` of a code object's function, the number to add to its
    line numbers to get the file's, and each node's parent; or
    ``None``."""
    parsed = parsed_source(code)
    if parsed is None:
        return None
    tree, offset = parsed
    function = _first_function(tree)
    if function is None:
        return None
    return function, offset, parents_of(function)


def at_instruction(node, code, lasti, offset):
    """Is ``node`` (of the dedented source of ``code``'s function, whose
    line numbers are the file's less ``offset``) the expression of the
    instruction at ``lasti`` (a call's, as the frame running it has it)?"""
    positions = list(code.co_positions())
    if not 0 <= lasti // 2 < len(positions):
        return False
    line, end_line, column, end_column = positions[lasti // 2]
    if None in (line, end_line, column, end_column):
        return False
    indent = _indentation(code)
    return (node.lineno + offset, node.end_lineno + offset,
            node.col_offset + indent, node.end_col_offset + indent) == \
        (line, end_line, column, end_column)


def _indentation(code):
    """How far ``textwrap.dedent`` moved the source of ``code``'s
    function left (:func:`parsed_source`)."""
    if code in _MADE:
        return 0
    lines, _ = source_lines(code)
    return min(len(line) - len(line.lstrip()) for line in lines
               if line.strip())


def _first_function(tree):
    return next((n for n in ast.walk(tree) if isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)


def parents_of(tree):
    """``{node: its parent}`` for the nodes below ``tree``."""
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return parents


def file_ast(filename):
    """The ``ast`` of a whole source file, or ``None`` if it does not
    parse."""
    if filename not in _FILES:
        try:
            _FILES[filename] = ast.parse(''.join(
                linecache.getlines(filename)))
        except SyntaxError:
            _FILES[filename] = None
    return _FILES[filename]


@functools.lru_cache(maxsize=256)  # (read at each loop's start)
def written_out_lists(code):
    """The names ``code``'s function binds once only, to a list or tuple
    written out (``cells = [self.c0, self.c1]``): they hold as many items
    at every call."""
    function = function_ast(code)
    if function is None:
        return frozenset()
    bound = collections.Counter()
    written = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound[node.id] += 1
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name) and \
                isinstance(node.value, (ast.List, ast.Tuple)) and not any(
                    isinstance(e, ast.Starred) for e in node.value.elts):
            written.add(node.targets[0].id)
    return frozenset(name for name in written if bound[name] == 1)


def header_line(loop):
    """The line of a ``for`` or ``while`` statement that the interpreter
    passes once per iteration: the ``for`` line, or the ``while`` test's."""
    return loop.lineno if isinstance(loop, ast.For) else loop.test.lineno


def is_call(node, name):
    """``node`` calls the plain name ``name`` (``len(xs)``)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
        and node.func.id == name


def is_reversal(node):
    """``node`` is ``X[::-1]``."""
    if not isinstance(node, ast.Subscript) or \
            not isinstance(node.slice, ast.Slice):
        return False
    s = node.slice
    step = s.step
    return s.lower is None and s.upper is None and \
        isinstance(step, ast.UnaryOp) and isinstance(step.op, ast.USub) and \
        isinstance(step.operand, ast.Constant) and step.operand.value == 1 \
        and type(step.operand.value) is int


def name_nodes(function, name):
    """The ``ast.Name`` nodes of ``name`` in ``function``; none for the
    name ``None``."""
    if name is None:
        return []
    return [n for n in ast.walk(function)
            if isinstance(n, ast.Name) and n.id == name]


def first_rows_cut(node):
    """For ``X[k:]``, ``X[:-m]`` or ``X[k:-m]`` (int constants), ``k +
    m``: how many fewer items it has than ``X``; else ``None``."""
    if not isinstance(node, ast.Subscript) or \
            not isinstance(node.slice, ast.Slice) or node.slice.step:
        return None
    start = int_constant(node.slice.lower, 0)
    stop = int_constant(node.slice.upper, 0)
    if start is None or stop is None or start < 0 or stop > 0 or \
            stop == 0 and node.slice.upper is not None or \
            (start, stop) == (0, 0):
        return None  # (X[:0] is empty)
    return start - stop


def first_items_skipped(node):
    """``k`` for ``X[k:]`` (an int constant, more than 0); else 0."""
    cut = first_rows_cut(node)
    return cut if cut is not None and node.slice.upper is None else 0


def int_constant(node, default):
    """The int a constant (or its negation) is, ``default`` for no node,
    else ``None``."""
    if node is None:
        return default
    negated = isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
    value = node.operand if negated else node
    if not isinstance(value, ast.Constant) or type(value.value) is not int:
        return None
    return -value.value if negated else value.value
