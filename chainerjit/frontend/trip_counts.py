"""Trip counts that come from the call: where a loop's trip count is read
(:func:`trip_source`: ``range(len(xs))``, ``range(xs.shape[0])``,
``range(n)``, ``for x in xs``), and which parameters the source uses only
as such lengths and to index (:func:`length_only_names`). Only through
those can a trip count be symbolic in the cache key (:mod:`.symbolic`).
"""

import ast
import collections
import contextlib
import dis
import functools
import linecache
import types

import chainer.functions

from chainerjit import errors
from chainerjit.frontend import lengths
from chainerjit.frontend import loop_analysis
from chainerjit.frontend import scalars
from chainerjit.frontend import source


TripSource = collections.namedtuple('TripSource', 'kind where offset')
TripSource.__doc__ = """How a loop's trip count follows from the call.

``kind`` ``'dim'``: ``where`` is ``(leaf index, axis)`` and the trip count
is that dimension minus ``offset``; ``'static'``: ``where`` is ``(path,
name)`` of an int argument (its path in the key's structure), the trip
count its value minus ``offset``.
"""


def trip_source(site, frame, arguments):
    """Reads a ``for`` loop's iterable: ``range(E)``, ``range(a, E)``,
    ``range(E - 1, -1, -1)`` (:func:`_counted_down`), ``enumerate(X)``,
    ``zip(X, ...)`` or ``X`` (or ``reversed`` of one, or ``X[::-1]``),
    where ``E`` is ``len(X)``, ``X.shape[k]``, an int argument or a name
    holding an argument's size (``T, B, _ = xs.shape``), and ``X`` a
    Variable or array argument. Returns a :class:`TripSource` or
    ``None``."""
    node = site.iter_expr
    if node is None:
        return None
    if source.is_call(node, 'reversed') and len(node.args) == 1 and \
            not node.keywords:
        node = node.args[0]  # as many iterations
    if source.is_call(node, 'range') and 1 <= len(node.args) <= 2 and \
            not node.keywords:
        start = 0
        if len(node.args) == 2:
            if not isinstance(node.args[0], ast.Constant) or \
                    type(node.args[0].value) is not int:
                return None
            start = node.args[0].value
        return _length_source(node.args[-1], frame, arguments, start)
    if source.is_call(node, 'range') and len(node.args) == 3 and \
            not node.keywords:
        return _counted_down(node.args, frame, arguments)
    while (source.is_call(node, 'enumerate') or
           source.is_call(node, 'zip')) and node.args and \
            not (source.is_call(node, 'zip') and node.keywords):
        node = node.args[0]  # (enumerate(zip(xs, ts), 1): over xs)
    if source.is_reversal(node):
        node = node.value  # (xs[::-1]: as many iterations)
    return _sequence_source(node, frame, arguments, 0)


def _counted_down(args, frame, arguments):
    """``range(E - k, stop, -1)``, ``E`` a length as :func:`trip_source`
    reads it, ``k`` and ``stop`` ints (``range(T - 1, -1, -1)``: ``T``
    steps): its :class:`TripSource`, else ``None``."""
    first, stop = args[0], source.int_constant(args[1], None)
    if source.int_constant(args[2], None) != -1 or stop is None:
        return None
    less = 0
    if isinstance(first, ast.BinOp) and isinstance(first.op, ast.Sub):
        less = source.int_constant(first.right, None)
        if less is None:
            return None
        first = first.left
    return _length_source(first, frame, arguments, less + stop)


def iterated_name(site):
    """``(name, skipped)``: the name a ``for`` loop's header iterates over
    (``for h in hs``), through ``reversed``, ``enumerate`` and ``zip``
    (its first), and how many of its first items it skips (``hs[1:]``);
    else ``(None, 0)``."""
    node = site.iter_expr
    while any(source.is_call(node, name) for name in
              ('reversed', 'enumerate', 'zip')) and node.args and \
            not node.keywords:
        node = node.args[0]
    skipped = source.first_items_skipped(node)
    if skipped:
        node = node.value
    return (node.id, skipped) if isinstance(node, ast.Name) else (None, 0)


def iterated_call(site):
    """The call a ``for`` loop's header iterates over the result of
    (``for x in F.tanh(xs)``, ``enumerate(self.embed(xs))``, a few of
    its first or last items cut, ``self.embed(xs)[1:]``), other than
    ``range``, ``reversed``, ``zip`` or ``F.separate``; or the reversal
    it iterates over (``xs[::-1]``, ``self.embed(xs)[::-1]``); else
    ``None``."""
    node = site.iter_expr
    if source.is_call(node, 'enumerate') and len(node.args) == 1 and \
            not node.keywords:
        node = node.args[0]
    if source.is_reversal(node):
        return node
    if source.first_rows_cut(node) is not None:
        node = node.value
    if not isinstance(node, ast.Call) or any(
            source.is_call(node, name) for name in
            ('range', 'reversed', 'zip', 'enumerate')):
        return None
    separating = source.is_call(node, 'separate') or \
        isinstance(node.func, ast.Attribute) and node.func.attr == 'separate'
    if separating and (not node.args or isinstance(node.args[0], ast.Name)):
        return None  # (F.separate(xs): read as its argument's axis)
    return node


def _length_source(node, frame, arguments, offset):
    if source.is_call(node, 'len') and len(node.args) == 1:
        return _sequence_source(node.args[0], frame, arguments, offset)
    if isinstance(node, ast.Subscript) and \
            isinstance(node.value, ast.Attribute) and \
            node.value.attr == 'shape' and \
            isinstance(node.slice, ast.Constant) and \
            type(node.slice.value) is int and node.slice.value >= 0:
        where = _argument(node.value.value, frame, arguments)
        if where is not None and where[0] == 'leaf':
            return TripSource('dim', (where[1], node.slice.value), offset)
        return _axis_source(node.value.value, frame, node.slice.value,
                            offset)
    where = _argument(node, frame, arguments)
    if where is not None and where[0] == 'static':
        return TripSource('static', (where[1], node.id), offset)
    read = _read_length(node, frame, offset)
    if read is not None:
        return read
    length = _length_alias(node, frame.f_code)
    if length is not None:
        return _length_source(length, frame, arguments, offset)
    return None


def _read_length(node, frame, offset):
    """For a name holding an argument's size the forward read while
    recorded (``T, B, _ = xs.shape``), or that size minus a few
    (``lengths.Length``), its :class:`TripSource`; else ``None``."""
    if not isinstance(node, ast.Name):
        return None
    value = frame.f_locals.get(node.id)
    if not isinstance(value, lengths.Length) or value.affine is None:
        return None
    a, b = value.affine
    (where,) = value.origins
    if a != 1 or b > 0 or lengths.is_item_length(where):
        return None
    return TripSource('dim', where, offset - b)


def _length_alias(node, code):
    """For a name the function assigns once, in a statement of its own
    body, from ``len(X)`` or ``X.shape[k]`` (``T = len(xs)``), that
    expression; else ``None``."""
    if not isinstance(node, ast.Name):
        return None
    function = source.function_ast(code)
    if function is None or any(isinstance(n, (ast.Global, ast.Nonlocal))
                               for n in ast.walk(function)):
        return None
    stores = [n for n in source.name_nodes(function, node.id)
              if not isinstance(n.ctx, ast.Load)]
    if len(stores) != 1:
        return None
    assign = next((s for s in function.body if isinstance(s, ast.Assign)
                   and s.targets == [stores[0]]), None)
    if assign is None:
        return None
    value = assign.value
    if source.is_call(value, 'len') and len(value.args) == 1 or \
            isinstance(value, ast.Subscript) and \
            isinstance(value.value, ast.Attribute) and \
            value.value.attr == 'shape':
        return value
    return None


def _sequence_source(node, frame, arguments, offset):
    cut = source.first_rows_cut(node)
    if cut is not None:  # xs[1:], exs[:-1]: as many fewer iterations
        return _sequence_source(node.value, frame, arguments, offset + cut)
    separated = _separated(node, frame)
    if separated is not None:
        return _axis_source(separated[0], frame, separated[1], offset)
    where = _argument(node, frame, arguments)
    if where is not None and where[0] == 'leaf':
        return TripSource('dim', (where[1], 0), offset)
    return _axis_source(node, frame, 0, offset)


def _axis_source(node, frame, axis, offset):
    """For a name holding a value whose axis ``axis`` is an argument's (a
    transpose of one, ``lengths.origin_of``), its :class:`TripSource`."""
    if not isinstance(node, ast.Name):
        return None
    value = frame.f_locals.get(node.id)
    if value is None or axis < 0 and not hasattr(value, 'ndim'):
        return None
    axis = axis + value.ndim if axis < 0 else axis
    origin = lengths.origin_of(value, axis)
    if origin is None:
        return None
    # (xs[1:]: one row fewer than the argument's axis)
    return TripSource('dim', origin,
                      offset - (lengths.shift_of(value) if axis == 0 else 0))


def _separated(node, frame):
    """``(X, axis)`` of a call ``F.separate(X, axis)`` (the function
    ``chainer.functions.separate`` names while recording, named by the
    forward as a module's attribute or a global), or ``F.split_axis(X, T,
    axis)`` into its rows one by one (:func:`_split_into_rows`), else
    ``None``."""
    axis = _split_into_rows(node, frame)
    if axis is not None:
        return node.args[0], axis
    if not isinstance(node, ast.Call) or not 1 <= len(node.args) <= 2 or \
            [k.arg for k in node.keywords] not in ([], ['axis']) or \
            _named(node.func, frame) is not chainer.functions.separate:
        return None
    axis = source.int_constant(
        node.args[1] if len(node.args) == 2 else
        node.keywords[0].value if node.keywords else None, 0)
    return None if axis is None else (node.args[0], axis)


def _split_into_rows(node, frame):
    """The axis (as written) ``node``, a call ``F.split_axis(X, T,
    axis)``, cuts into its rows one by one, as ``F.separate`` gives
    them, each keeping the axis: ``T``, a name, holds the size the
    forward read of that axis of ``X``, a name too
    (``lengths.rows_split_axis``, as the recording splits them); else
    ``None``."""
    if not isinstance(node, ast.Call) or len(node.args) + len(
            node.keywords) != 3 or \
            [k.arg for k in node.keywords] not in ([], ['axis']) or \
            not all(isinstance(a, ast.Name) for a in node.args[:2]) or \
            _named(node.func, frame) is not chainer.functions.split_axis:
        return None
    axis = source.int_constant(
        node.args[2] if len(node.args) == 3 else node.keywords[0].value,
        None)
    x, sections = (frame.f_locals.get(a.id) for a in node.args[:2])
    return axis if hasattr(x, 'ndim') and lengths.rows_split_axis(
        x, sections, axis) is not None else None


def _named(node, frame):
    """What a global name or a module's attribute of one (``F.separate``)
    holds in ``frame``, without running any code; else ``None``. A name
    of the enclosing function's (a model class defined in a function that
    imports ``chainer.functions as F``) counts as a global."""
    if isinstance(node, ast.Name) and node.id in frame.f_code.co_freevars:
        return frame.f_locals.get(node.id)
    if isinstance(node, ast.Name) and node.id not in frame.f_locals:
        return frame.f_globals.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _named(node.value, frame)
        if isinstance(owner, types.ModuleType):
            return getattr(owner, node.attr, None)
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
    function = source.function_ast(code)
    if function is None:
        return {}
    parents = source.parents_of(function)
    params = [a.arg for a in function.args.args + function.args.kwonlyargs]
    counted = _counted_elsewhere(function)
    found = {}
    for name in params:
        uses = source.name_nodes(function, name)
        sizes = set()
        for use in uses:
            if not _length_use(use, parents, function):
                sizes.add(_size_read(use, parents))
        if uses and None not in sizes and name not in counted:
            found[name] = frozenset(sizes)
    return found


def _counted_elsewhere(function):
    """The names in the iterables of ``function``'s ``for`` loops whose
    steps a name counts (``n += 1``, ``loop_analysis.counted_steps``; or
    its counter, ``loop_analysis.counting_up``) that is read after the
    loop: that count is the length, used as its uses tell."""
    found = set()
    for loop in ast.walk(function):
        if not isinstance(loop, ast.For):
            continue
        inside = set(ast.walk(loop))
        counter = loop_analysis.counting_up(loop)
        names = list(loop_analysis.counted_steps(loop)) + (
            [counter[0]] if counter else [])
        if any(use not in inside and use.lineno > loop.end_lineno
               for name in names
               for use in source.name_nodes(function, name)):
            found.update(n.id for n in ast.walk(loop.iter)
                         if isinstance(n, ast.Name))
    return found


def arithmetic_only_names(code):
    """The parameters of a function that its source never slices with,
    nor passes to a builtin that reads an int in C
    (:data:`C_INT_READERS`: ``range(k)``, ``x[:k]``, ``[0] * list(...)``),
    nor passes to a function as an int (``self.decode(x, max_len=k)``),
    nor puts on the right of a float (``0.5 * k``), directly, through
    integer arithmetic (``range(k + 1)``) or through names assigned such
    arithmetic (``n = 2 * k``, then ``x[:n]``), and never assigns to.
    CPython reads an int subclass there without calling its methods (a
    function given one may too): only such a parameter may be an
    ``IntScalar`` (``frontend.scalars``) while recording, whose other
    uses its methods see.

    An integer index (``y[k]``, ``y[:, k % n]``) is allowed where the
    function's own code indexes: the recording sees it where ``y`` is a
    Variable, and counts the other indexings there (a list's, read in C;
    :func:`index_offsets`).

    Returns:
        dict: ``{name: the offsets of its index sites in code}``, found
        once per code object.
    """
    found = _ARITHMETIC_ONLY.get(code)
    if found is None:
        found = _ARITHMETIC_ONLY[code] = _arithmetic_only_names(code)
    return found


_ARITHMETIC_ONLY = {}  # code object -> arithmetic_only_names(code)


def _arithmetic_only_names(code):
    found = {}
    function = source.function_ast(code)
    if function is None:
        return found
    parents = source.parents_of(function)
    for name in _parameters(function):
        sites = []
        if _read_in_c_first(function, parents, name, set(), sites) is None:
            offsets = index_offsets(code, sites)
            if offsets is not None:
                found[name] = offsets
    return found


def _parameters(function):
    return [a.arg for a in function.args.args + function.args.kwonlyargs]


def int_kept_why(code, name):
    """Why the int parameter ``name`` of ``code`` stays in the cache key
    (not in :func:`arithmetic_only_names`): ``'passed to
    self.make_hidden() as an int at gan.py:14'``; or ``None`` where no
    use says (the source not read, an index in a comprehension)."""
    function = source.function_ast(code)
    if function is None or name not in _parameters(function):
        return None
    found = _read_in_c_first(function, source.parents_of(function), name,
                             set(), [])
    if found is None:
        return None
    node, what = found
    offset = source.parsed_source(code)[1]
    return '%s at %s' % (what, errors.short_location(
        (code.co_filename, node.lineno + offset)))


def index_offsets(code, sites):
    """The offsets in ``code`` of the ``BINARY_SUBSCR`` instructions of
    the ``ast.Subscript`` nodes ``sites`` (positions relative to the
    function's source), or ``None`` where one is not in ``code`` itself
    (in a comprehension or a lambda, code objects of their own)."""
    if not sites:
        return frozenset()
    parsed = source.parsed_source(code)
    if parsed is None:
        return None
    lines, columns = parsed[1], source.dedented_by(code)
    wanted = set((s.lineno + lines, s.end_lineno + lines,
                  s.col_offset + columns, s.end_col_offset + columns)
                 for s in sites)
    found = dict((tuple(i.positions), i.offset)
                 for i in dis.get_instructions(code)
                 if i.opname == 'BINARY_SUBSCR' and i.positions.lineno)
    if not wanted <= set(found):
        return None
    return frozenset(found[w] for w in wanted)


#: Builtins (and ``itertools`` functions) that read an int argument in C.
C_INT_READERS = frozenset([
    'range', 'list', 'tuple', 'bytes', 'bytearray', 'chr', 'hex', 'oct',
    'bin', 'enumerate', 'zip', 'islice', 'repeat'])

#: Builtins that call an int argument's own methods (``abs(k)`` calls
#: ``k.__abs__``), which an ``IntScalar`` records or notes.
METHOD_CALLERS = frozenset([
    'abs', 'round', 'divmod', 'pow', 'min', 'max', 'float', 'int', 'bool',
    'hash', 'repr', 'str', 'format'])


def _read_in_c_first(function, parents, name, seen, sites):
    """The first use of ``name`` (or of a name assigned from it) that may
    read it in C: ``(its ast node, what it does)``, a slice or an
    argument of a :data:`C_INT_READERS` builtin, an int passed to a
    function (``self.decode(x, max_len=k)``, whose ``range(max_len)``
    would read it in C; ``self.l(h * k)`` passes what a Variable's
    arithmetic gave), an assignment to it (to the parameter; ``seen``
    empty); or ``None``. The subscripts indexing with it are added to
    ``sites``."""
    derived = bool(seen)  # a name assigned from the parameter
    seen.add(name)
    for use in source.name_nodes(function, name):
        if not isinstance(use.ctx, ast.Load):
            if derived:
                continue
            return use, 'assigned to'
        node, parent = use, parents.get(use)
        while parent is not None and not isinstance(parent, ast.stmt):
            indexes = len(sites)
            what = _read_in_c(node, parent, seen, sites)
            if what:
                return parent, what
            if len(sites) > indexes:
                break  # what follows reads the item indexed
            node, parent = parent, parents.get(parent)
        if isinstance(parent, (ast.Assign, ast.AugAssign)) and \
                _int_arithmetic(parent.value, seen):  # an int assigned
            targets = parent.targets if isinstance(parent, ast.Assign) \
                else [parent.target]
            for target in ast.walk(ast.Tuple(elts=targets)):
                if isinstance(target, ast.Name) and target.id not in seen:
                    found = _read_in_c_first(function, parents, target.id,
                                             seen, sites)
                    if found is not None:
                        return found
    return None


def _read_in_c(node, parent, names, sites):
    """How ``parent`` may read ``node`` (an expression of the int
    ``names``) in C (``'sliced with'``), or ``''``: as a slice or an index
    other than an integer one (added to ``sites``), on the right of a
    float, as an argument of a :data:`C_INT_READERS` builtin, or as an
    int (``node`` their integer arithmetic) given to a function other
    than the :data:`METHOD_CALLERS`."""
    if isinstance(parent, ast.Subscript):
        if node is not parent.slice:
            return ''
        if isinstance(parent.ctx, ast.Load) and \
                _integer_index(node, names):
            sites.append(parent)
            return ''
        return 'used to slice or index'
    if isinstance(parent, ast.BinOp):
        return 'put on the right of a float' \
            if node is parent.right and _is_float(parent.left) else ''
    if isinstance(parent, ast.keyword):
        return 'passed to a function as an int' \
            if _int_arithmetic(node, names) else ''
    if isinstance(parent, ast.Call) and node in parent.args:
        called = _called_name(parent)
        if called in C_INT_READERS:
            return 'passed to %s()' % called
        if called not in METHOD_CALLERS and _int_arithmetic(node, names):
            return 'passed to %s() as an int' % _call_text(parent)
    return ''


def _call_text(call):
    """``'self.make_hidden'`` of ``self.make_hidden(n)``."""
    return ast.unparse(call.func)


def _integer_index(index, names):
    """``index`` (a subscript's) holds one item computed from ``names``,
    their integer arithmetic: ``k``, ``(slice, k % n)``; not ``k:``."""
    items = index.elts if isinstance(index, ast.Tuple) else [index]
    computed = [item for item in items if any(
        isinstance(n, ast.Name) and n.id in names for n in ast.walk(item))]
    return len(computed) == 1 and not isinstance(computed[0], ast.Slice) \
        and _int_arithmetic(computed[0], names)


def _int_arithmetic(node, names):
    """``node`` is arithmetic of ``names`` and int literals only: an int
    where they are ints (``k``, ``k + 1``, ``2 * n``)."""
    return all(isinstance(sub, (ast.BinOp, ast.UnaryOp, ast.operator,
                                ast.unaryop, ast.Load)) or
               isinstance(sub, ast.Name) and sub.id in names or
               isinstance(sub, ast.Constant) and type(sub.value) is int
               for sub in ast.walk(node))


def _is_float(node):
    """A float literal or ``float(...)``: Python's float does arithmetic
    with it in C, an int on the other side read unseen (``0.5 * k``,
    ``1.0 / T``)."""
    return _literal_value(node) is not None or source.is_call(node, 'float')


def _called_name(call):
    """The name a call calls: ``'range'`` for ``range(...)``, ``'islice'``
    for ``itertools.islice(...)``; else ``None``."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _size_read(name, parents):
    """``k`` for ``name.shape[k]`` with ``k`` a non-negative int, else
    ``None``."""
    length = _length_expression(name, parents)
    if length is None or not isinstance(length, ast.Subscript):
        return None
    k = length.slice.value
    return k if type(k) is int and k >= 0 else None


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
            uses = source.name_nodes(function, alias)
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
    if source.is_call(parent, 'len') and parent.args == [name]:
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
    return source.is_call(call, 'range') and call.args and \
        call.args[-1] is node and _is_for_iterable(call, parents)


def _is_for_iterable(node, parents):
    loop = parents.get(node)
    return isinstance(loop, (ast.For, ast.comprehension)) and \
        loop.iter is node


def _is_iterable_of_for(name, parents):
    if _is_for_iterable(name, parents):
        return True
    call = parents.get(name)
    return (source.is_call(call, 'zip') or
            source.is_call(call, 'enumerate')) and \
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
        if isinstance(node, source.COMPREHENSION_NODES) and any(
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


# --- sizes in float arithmetic -----------------------------------------------

@functools.lru_cache(maxsize=256)  # (read at each recording)
def float_size_uses(code):
    """``[(parameter, axis or None, (line, end line), column, seen)]``:
    sizes of the function's parameters (``xs.shape[k]``, ``len(xs)``,
    ``xs.size``) that its own source puts into float arithmetic, directly
    (``1.0 / xs.shape[1]``, ``h / len(xs)``: ``seen`` is ``'read'``, the
    recording reads the size on the operation's lines where it runs) or
    through a name assigned from one (``T / 2``: ``None``); the lines and
    the column are where the operation is in the file.

    ``lengths.Length`` notes what Python does with a size, but not
    ``1.0 / T``: the float does the arithmetic, in C (unless the float is
    a literal :func:`literals_watched` gives a Length's arithmetic).
    ``axis`` ``None`` stands for every axis (``xs.size``)."""
    return _size_uses(_operations(code, _in_floats))


@functools.lru_cache(maxsize=256)  # (read at each recording)
def format_size_uses(code):
    """As :func:`float_size_uses`, of the sizes the function's own source
    formats with ``str``'s ``%`` (``'%d' % T``), which reads the int in C
    too, unseen."""
    return _size_uses(_operations(code, _formats))


@functools.lru_cache(maxsize=256)  # (read at each recording)
def formatted_names(code):
    """``((name, line), ...)``: the names the function's own source
    formats with ``str``'s ``%`` (``'%.0f' % beta``), which reads a
    number in C, unseen by the number the recording passes (a varying
    argument: ``frontend.scalars``); ``()`` without source."""
    found = source.function_and_offset(code)
    if found is None:
        return ()
    function, offset, _ = found
    return tuple(sorted(set(
        (name.id, node.lineno + offset) for node in ast.walk(function)
        if isinstance(node, ast.BinOp) and _formats(node)
        for name in ast.walk(node.right) if isinstance(name, ast.Name))))


def _size_uses(found):
    """The uses of :func:`float_size_uses` in the operations
    :func:`_operations` found."""
    if found is None:
        return ()
    offset, indent, operations = found
    return tuple((p, axis, (node.lineno + offset, node.end_lineno + offset),
                  node.col_offset + indent, None if named else 'read')
                 for node, sides in operations
                 for side, read, named in sides for p, axis in read)


def _operations(code, test, of_any_array=False):
    """``(line offset, indent, [(binop, ((side, the (parameter, axis)
    sizes it reads, whether through names), ...))])`` of the function's
    arithmetic with sizes that ``test`` picks (:func:`_in_floats`, as
    :func:`float_size_uses` reads it; :func:`_formats`): of the
    parameters, or ``of_any_array`` named (``len(y)`` of ``y = x``);
    ``None`` without source."""
    found = _function_parts(code)
    if found is None:
        return None
    function, offset, indent, params, sizes = found
    if of_any_array:  # (B, T = x.shape of a value x the forward made)
        params = set(n.id for n in ast.walk(function)
                     if isinstance(n, ast.Name))
        sizes = _names_of_sizes(function, params)
    operations = []
    for node in ast.walk(function):
        if not isinstance(node, ast.BinOp) or not test(node):
            continue
        # (a side that is such an operation itself is a use of its own)
        sides = tuple((s, _sizes_read(s, params, sizes),
                       _reads_names(s, sizes))
                      for s in (node.left, node.right)
                      if _of_sizes_only(s) and not (
                          isinstance(s, ast.BinOp) and test(s)))
        sides = tuple(side for side in sides if side[1])
        if sides:
            operations.append((node, sides))
    return offset, indent, operations


def _function_parts(code):
    """``(function's ast, line offset, indent, its parameters, the names
    it assigns from their sizes: _names_of_sizes)``; ``None`` without
    source."""
    found = source.function_and_offset(code)
    if found is None:
        return None
    function, offset, _ = found
    header = linecache.getline(code.co_filename, function.lineno + offset)
    indent = len(header) - len(header.lstrip())  # dedented away
    params = set(a.arg for a in function.args.args +
                 function.args.kwonlyargs)
    return function, offset, indent, params, _names_of_sizes(function,
                                                             params)


@functools.lru_cache(maxsize=256)  # (read at each recording)
def index_size_uses(code):
    """As :func:`float_size_uses`, of the sizes the function's own source
    reads at (``SCALES[len(xs)]``, ``table[T - 1]``, ``pe[:T]``). An
    array's indexing sees the size (the recording notes where:
    ``lengths.operation_position``); a list's or a tuple's reads it in C,
    unseen. ``seen``: ``'read'`` for an index reading its sizes
    itself, ``'ran'`` for one of the model's arrays, whose line records
    nodes where it runs, ``('ran', name)`` for the parameter ``name``'s,
    as that where its argument is an array and the function binds it to
    nothing but cuts of itself, else ``None``."""
    found = _function_parts(code)
    if found is None:
        return ()
    function, offset, indent, params, sizes = found
    return tuple(
        (p, axis, (node.lineno + offset, node.end_lineno + offset),
         node.col_offset + indent, 'read'
         if not _reads_names(node.slice, sizes) else 'ran'
         if _of_the_model(node.value) else ('ran', node.value.id)
         if isinstance(node.value, ast.Name) and node.value.id in params
         and _cut_only(function, node.value.id) else None)
        for node in ast.walk(function) if isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Load)  # (not ys[t] = h of a loop)
        for part in _index_parts(node.slice)
        for p, axis in _sizes_read(part, params, sizes))


def _index_parts(index):
    """The parts of an index (``x[i, :T]``: ``i``, ``T``) that are
    arithmetic of sizes (:func:`_of_sizes_only`), not an array a call
    makes of them (``h[xp.zeros(B, 'i')]``)."""
    if isinstance(index, ast.Tuple):
        return [part for e in index.elts for part in _index_parts(e)]
    if isinstance(index, ast.Slice):
        return [part for e in (index.lower, index.upper, index.step)
                if e is not None for part in _index_parts(e)]
    return [index] if _of_sizes_only(index) else []


def _cut_only(function, name):
    """Does ``function`` bind ``name`` to nothing but an index of itself
    (``xs = xs[-10:]``: an array argument stays an array)?"""
    for node in ast.walk(function):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (
                ast.AugAssign, ast.AnnAssign, ast.For, ast.NamedExpr,
                ast.comprehension)) else \
            [item.optional_vars for item in node.items
             if item.optional_vars is not None] \
            if isinstance(node, ast.With) else []
        for target in targets:
            if any(isinstance(sub, ast.Name) and sub.id == name
                   for sub in ast.walk(target)) and not (
                    isinstance(node, ast.Assign) and
                    isinstance(target, ast.Name) and
                    isinstance(node.value, ast.Subscript) and
                    isinstance(node.value.value, ast.Name) and
                    node.value.value.id == name):
                return False
    return True


def _of_the_model(node):
    """``self.table``, ``self.embed.W``: an attribute of ``self`` (a
    model's array, traced while recording, whose indexing is seen)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id == 'self' \
        and not isinstance(node, ast.Subscript)


def _reads_names(node, names):
    return any(isinstance(sub, ast.Name) and sub.id in names
               for sub in ast.walk(node))


#: The key of a loop counter among :func:`_names_of_sizes`: a size after
#: its loop only.
AFTER = 'after'


def _names_of_sizes(function, params):
    """``{name: [(parameter, axis)]}`` of the names the function assigns
    from its parameters' sizes (``T, B, _ = xs.shape``, ``n = len(xs) -
    1``, a counter of a loop's steps); and ``{(name, AFTER): (line,
    [(parameter, axis)])}`` of a loop's counter, which is one after the
    loop, whose last line that is (``control``)."""
    sizes = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            unpacked = _unpacked_shape(node, params)
            if unpacked is not None:  # T, B, _ = xs.shape
                param, first = unpacked
                for axis, name in enumerate(node.targets[0].elts, first):
                    if isinstance(name, ast.Name):
                        sizes.setdefault(name.id, []).append((param, axis))
                continue
        if isinstance(node, ast.For):  # n += 1 counting its steps
            read = _iterated_sizes(node.iter, params, sizes)
            for name in loop_analysis.counted_steps(node) if read else ():
                sizes.setdefault(name, []).extend(read)
            counter = loop_analysis.counting_up(node)
            if counter is not None and read:  # its counter, after it
                sizes[counter[0], AFTER] = (node.end_lineno, read)
        # n = ..., n += ..., n: int = ...
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) \
                and node.value is not None:
            read = _sizes_read(node.value, params, sizes) \
                if _of_sizes_only(node.value) else []
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and read:
                        sizes.setdefault(name.id, []).extend(read)
    return sizes


@contextlib.contextmanager
def literals_watched(fn):
    """While recording ``fn``: the float literals its source puts into
    arithmetic with sizes (``1.0 / T``, ``0.5 * xs.shape[0]``) are
    ``scalars.Literal`` floats, whose arithmetic with a Length the
    float would do in C, unseen, computes at run time as the size's own
    does (``Length._in_float``). ``fn``'s code is swapped for one with
    those constants meanwhile."""
    code = getattr(fn, '__code__', None)
    watched = None if code is None else _with_watched_literals(code)
    if watched is None:
        yield
        return
    fn.__code__ = watched
    try:
        yield
    finally:
        fn.__code__ = code


@functools.lru_cache(maxsize=64)  # (one code object per function)
def _with_watched_literals(code):
    """``code`` with the float literals of :func:`literals_watched` (in
    its nested functions too) as ``scalars.Literal``; ``None`` if
    it has none."""
    found = _operations(code, _in_floats, of_any_array=True)
    values = set() if found is None else set(
        _literal_value(s) for node, sides in found[2]
        for s in (node.left, node.right)) - set([None])
    return _watching(code, values) if values else None


def _literal_value(node):
    """The float of a float literal (``-0.5`` too), else ``None``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _literal_value(node.operand)
        return None if value is None else -value
    if isinstance(node, ast.Constant) and type(node.value) is float:
        return node.value
    return None


def _watching(code, values):
    consts = tuple(
        scalars.Literal(c) if type(c) is float and c in values
        else _watching(c, values) if isinstance(c, types.CodeType)
        else c for c in code.co_consts)
    return code.replace(co_consts=consts)


def reads_first_size(node):
    """Does the expression ``node`` (a loop's iterable) read a first axis's
    size: ``len(...)``, ``X.shape[0]`` (``range(0, len(xs), 2)``)?"""
    return node is not None and any(
        source.is_call(sub, 'len') or isinstance(sub, ast.Subscript) and
        isinstance(sub.value, ast.Attribute) and sub.value.attr == 'shape'
        and isinstance(sub.slice, ast.Constant) and sub.slice.value == 0
        for sub in ast.walk(node))


def parameters_read(node, code):
    """The parameters of ``code``'s function the expression ``node`` (a
    loop's iterable) names (``zip(xs, ms)``: ``{'xs', 'ms'}``)."""
    params = set(code.co_varnames[:code.co_argcount +
                                  code.co_kwonlyargcount])
    return set() if node is None else set(
        sub.id for sub in ast.walk(node)
        if isinstance(sub, ast.Name) and sub.id in params)


@functools.lru_cache(maxsize=256)  # (read at each recording)
def maximum_read_in_c(code):
    """Does the function's own source read what a ``max()`` call gives
    (``T = max(len(x) for x in xs)``, or a name computed from one) where
    C code reads it unseen by a ``lengths.Length``: in float arithmetic
    (``1.0 / T``), formatted with ``%``, or as an index (``hs[T - 1]``)?
    True without source."""
    found = source.function_and_offset(code)
    if found is None:
        return True
    function = found[0]
    names = _names_given_by(function, 'max')
    return any(_reads_call(side, 'max', names)
               for node in ast.walk(function)
               for side in ((node.left, node.right)
                            if isinstance(node, ast.BinOp) and (
                                _in_floats(node) or _formats(node)) else
                            _index_parts(node.slice)
                            if isinstance(node, ast.Subscript) else ()))


def _names_given_by(function, call):
    """The names ``function`` assigns from what a call of ``call`` gives,
    or from arithmetic of names so assigned (``T = max(...) + 2``)."""
    names, before = set(), None
    while names != before:
        before = set(names)
        for node in ast.walk(function):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign,
                                 ast.NamedExpr)) and node.value is not None \
                    and (source.is_call(node.value, call) or
                         _of_sizes_only(node.value)) and \
                    _reads_call(node.value, call, names):
                targets = node.targets if isinstance(node, ast.Assign) \
                    else [node.target]
                names.update(sub.id for target in targets
                             for sub in ast.walk(target)
                             if isinstance(sub, ast.Name))
    return names


def _reads_call(node, call, names):
    """Does the expression ``node`` call ``call`` or read one of
    ``names``?"""
    return (source.is_call(node, call) or _of_sizes_only(node)) and any(
        source.is_call(sub, call) or
        isinstance(sub, ast.Name) and sub.id in names
        for sub in ast.walk(node))


def _in_floats(binop):
    """Does the arithmetic ``binop`` give a float: a true division, or an
    operation with a float literal?"""
    return isinstance(binop.op, ast.Div) or any(
        _is_float(s) for s in (binop.left, binop.right))


def _formats(binop):
    """Does ``binop`` format a string literal with ``%`` (``'%d' % T``)?"""
    return isinstance(binop.op, ast.Mod) and isinstance(
        binop.left, ast.Constant) and type(binop.left.value) is str


def _iterated_sizes(node, params, sizes):
    """The ``(parameter, axis)`` sizes a loop's iterable ``node`` reads
    (``range(xs.shape[0])``), or of the parameters it iterates over
    (``for x in xs``, ``zip(xs, ms)``: their first axes)."""
    return _sizes_read(node, params, sizes) or [
        (n.id, 0) for n in ast.walk(node)
        if isinstance(n, ast.Name) and n.id in params]


def _sizes_read(node, params, sizes):
    """The ``(parameter, axis)`` sizes an expression reads."""
    read = []
    indexed = set()  # xs.shape in xs.shape[k]
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in sizes:
            read += sizes[sub.id]
        after = sizes.get((sub.id, AFTER)) if isinstance(sub, ast.Name) \
            else None
        if after is not None and sub.lineno > after[0]:
            read += after[1]
        if isinstance(sub, ast.Subscript) and _size_of(sub.value, params) \
                and isinstance(sub.slice, ast.Constant) and \
                type(sub.slice.value) is int and sub.slice.value >= 0:
            indexed.add(sub.value)
            read.append((sub.value.value.id, sub.slice.value))
        elif _size_of(sub, params) and sub not in indexed:
            read.append((sub.value.id, None))
        if source.is_call(sub, 'len') and sub.args and \
                isinstance(sub.args[0], ast.Name) and \
                sub.args[0].id in params:
            read.append((sub.args[0].id, 0))
    return read


#: Calls that give a number made of the numbers they are given.
_NUMBER_CALLS = ('len', 'int', 'min', 'max', 'abs', 'round', 'float')


def _of_sizes_only(node):
    """Is ``node`` arithmetic of numbers, names, shapes and sizes
    (``T * B``, ``len(xs) - 1``, ``xs.shape[0]``), not a value that
    another call gives (``F.matmul(q, k)``, computed from sizes too)?"""
    if isinstance(node, (ast.Name, ast.Constant)):
        return True
    if isinstance(node, ast.BinOp):
        return _of_sizes_only(node.left) and _of_sizes_only(node.right)
    if isinstance(node, ast.UnaryOp):
        return _of_sizes_only(node.operand)
    if isinstance(node, ast.Tuple):
        return all(_of_sizes_only(e) for e in node.elts)
    if isinstance(node, ast.Attribute):
        return node.attr in ('shape', 'size') or _of_sizes_only(node.value)
    if isinstance(node, ast.Subscript):
        return _of_sizes_only(node.value)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
        and node.func.id in _NUMBER_CALLS and \
        all(_of_sizes_only(a) for a in node.args)


def _unpacked_shape(assign, params):
    """``(parameter, first axis)`` of ``a, b, c = xs.shape`` or ``a, b =
    xs.shape[1:3]`` (each name one axis), else ``None``."""
    target, value = assign.targets[0], assign.value
    if len(assign.targets) != 1 or not isinstance(target, ast.Tuple) or \
            any(isinstance(e, ast.Starred) for e in target.elts):
        return None
    first = 0
    if isinstance(value, ast.Subscript) and \
            isinstance(value.slice, ast.Slice) and value.slice.step is None:
        lower = value.slice.lower
        if lower is not None and not (isinstance(lower, ast.Constant) and
                                      type(lower.value) is int and
                                      lower.value >= 0):
            return None
        first, value = 0 if lower is None else lower.value, value.value
    if not (_size_of(value, params) and value.attr == 'shape'):
        return None
    return value.value.id, first


def _size_of(node, params):
    """``xs.shape`` or ``xs.size`` of a parameter ``xs``."""
    return isinstance(node, ast.Attribute) and \
        node.attr in ('shape', 'size') and \
        isinstance(node.value, ast.Name) and node.value.id in params
