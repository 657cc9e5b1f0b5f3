"""Questions about a loop's source: the branches on array values
(:func:`branch_test`), and whether the Python of a loop or of a
comprehension could tell how many iterations ran
(:func:`symbolic_loop_problem`, :func:`comprehension_problem`), with what
the loop watcher and the rolling ask besides (:func:`only_array_exits`,
:func:`counter_indexed_names`, :func:`appended_lists`,
:func:`returned_directly`).
"""

import ast
import collections

from chainerjit.frontend import source


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
    found = source.function_and_offset(code)
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
                node not in loop.body or loop.orelse or not all(
                    map(_computes, loop.body[loop.body.index(node) + 1:]))):
            # Nested in another statement, a for-else, or a name bound
            # after it to a value made before it would see it.
            loop = None
        return BranchTest(
            'if' if isinstance(node, ast.If) else 'while', negated, breaks,
            None if loop is None else source.header_line(loop) + offset)
    return None


#: The values a statement after a loop's exit may bind: each makes a new
#: value (an op the recording sees), never one made before the exit.
_COMPUTED = (ast.Call, ast.BinOp, ast.UnaryOp, ast.Compare)


def _computes(statement):
    """Is ``statement`` (after an ``if ...: break`` in a loop's body)
    an augmented assignment, a call, or the assignment to names of a new
    value (``h = self.lstm(x)``, not ``prev = h``)?"""
    if isinstance(statement, ast.AugAssign):
        return isinstance(statement.target, ast.Name)
    if isinstance(statement, ast.Expr):
        return isinstance(statement.value, ast.Call)
    return isinstance(statement, ast.Assign) and all(
        isinstance(t, ast.Name) for t in statement.targets) and \
        isinstance(statement.value, _COMPUTED)


def _enclosing_loop(node, parents):
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.For, ast.While)):
            return node
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            return None
    return None


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


def comprehension_and_parents(code, header):
    """The one comprehension with a single ``for`` clause whose source
    spans ``header`` in ``code``'s function, innermost first, and each
    node's parent; ``None`` if there is none or the line is ambiguous."""
    found = source.function_and_offset(code)
    if found is None:
        return None
    function, offset, parents = found
    line = header - offset
    spanning = [n for n in ast.walk(function)
                if isinstance(n, source.COMPREHENSION_NODES) and
                n.lineno <= line <= n.end_lineno]
    innermost = [n for n in spanning
                 if not any(m is not n and m in set(ast.walk(n))
                            for m in spanning)]
    if len(innermost) != 1 or len(innermost[0].generators) != 1:
        return None
    return innermost[0], parents


def comprehension_problem(code, header, kinds=None, caller=None,
                          caller_top=False):
    """As :func:`symbolic_loop_problem`, for a comprehension in ``code``
    whose ``for`` clause is on ``header``: one ``for`` clause without
    ``if``; a counter (``range``, ``enumerate``) used only to index; no
    ``:=`` and no hidden Python state change; and the list it makes is
    used only whole, by ``F.stack`` or ``F.concat``, directly or through
    a name assigned once, or returned to the user (``caller_top``: by a
    helper whose list the jitted function returns)."""
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
    return _whole_list_use(comp, parents, code, caller, caller_top)


def _whole_list_use(comp, parents, code, caller, caller_top=False):
    """``None`` if the comprehension's list is only passed whole to a
    collector (``F.stack([...])``, or ``hs = [...]`` then ``F.stack(hs)``),
    or read at constant indexes (``hs[-1]``: the graph's checks then ask
    which steps those are, as for a list a loop appends to), or its length
    read; or if it is returned (``return [...]``) to a caller (``(code,
    line, instruction offset)``) that uses it so, or by the jitted
    function's last statement to the user (``trace`` stacks it)."""
    if _used_whole(comp, parents, counted=True):
        return None
    returned, index = _returned(comp, parents)
    if returned and caller is not None and caller_uses_whole(
            caller, code, index, counted=True, to_user=caller_top):
        return None
    if returned and caller is None and index is None and _returned_last(
            _enclosing_function(comp, parents), comp, parents):
        return None
    return 'the list the comprehension makes is used item by item'


def comprehension_list_name(code, header):
    """The name a comprehension's list (its ``for`` clause on ``header``
    of ``code``) is assigned to (``hs = [f(x) for x in xs]``), or
    ``None``."""
    found = comprehension_and_parents(code, header)
    if found is None:
        return None
    comp, parents = found
    holder = parents.get(comp)
    if not isinstance(holder, ast.Assign) or len(holder.targets) != 1 or \
            not isinstance(holder.targets[0], ast.Name):
        return None
    return holder.targets[0].id


def _used_whole(node, parents, index=None, counted=False):
    """Is the list ``node`` gives (or item ``index`` of the tuple it
    gives) only passed whole to a collector (``F.stack(node)``, or ``hs =
    node`` then ``F.stack(hs)``; ``hs, h = node`` for an item), or read
    at constant indexes (``hs[-1]``), or (``counted``: one item per step)
    its length read (``len(hs)``)?"""
    if index is None and _collected_whole(node, parents):
        return True
    holder = parents.get(node)
    if index is None and _through_reversal(node, parents) is not node:
        node = _through_reversal(node, parents)  # hs = [...][::-1]
        holder = parents.get(node)
    if not isinstance(holder, ast.Assign) or len(holder.targets) != 1:
        return False
    target = holder.targets[0]
    if index is not None:
        if not isinstance(target, ast.Tuple) or index >= len(target.elts) \
                or any(isinstance(e, ast.Starred) for e in target.elts):
            return False
        target = target.elts[index]
    if not isinstance(target, ast.Name):
        return False
    function = _enclosing_function(holder, parents)
    uses = [n for n in source.name_nodes(function, target.id)
            if n is not target]
    return all(_reordered(n, parents, target.id) or
               isinstance(n.ctx, ast.Load) and (
                   _collected_whole(n, parents) or
                   counted and _iterated(n, parents) or
                   _constant_item(n, parents.get(n)) or
                   counted and _length_read(n, parents.get(n)))
               for n in uses)


def _returned(node, parents):
    """``(True, None)`` where ``node`` is returned (``return hs``),
    ``(True, k)`` where it is item ``k`` of the tuple returned (``return
    hs, h``), else ``(False, None)``."""
    holder = parents.get(node)
    if isinstance(holder, ast.Return):
        return True, None
    if isinstance(holder, ast.Tuple) and \
            isinstance(parents.get(holder), ast.Return):
        return True, holder.elts.index(node)
    return False, None


def _returned_once(function, name):
    """Is the list ``name`` returned by ``function``'s last statement, as
    it is or in the tuple it returns, and by no other ``return``? (The
    jitted function returns it to its caller as the steps stacked, cut
    apart again: ``trace``.)"""
    last = _only_return(function)
    return last is not None and last.value is not None and any(
        isinstance(item, ast.Name) and item.id == name
        for item in (last.value.elts if isinstance(last.value, ast.Tuple)
                     else [last.value]))


def _returned_last(function, node, parents):
    """Does ``function`` return ``node`` itself by its last statement, its
    only ``return``?"""
    last = _only_return(function)
    return last is not None and parents.get(node) is last


def _only_return(function):
    """``function``'s last statement, where it is its only ``return``;
    else ``None``."""
    returns = [n for n in ast.walk(function) if isinstance(n, ast.Return)]
    last = function.body[-1] if function.body else None
    return last if returns == [last] else None


def caller_uses_whole(caller, callee, index=None, counted=False,
                      to_user=False):
    """Does the caller (``(code, line, instruction offset)`` of the frame
    that called ``callee``'s function) use the list the call returns (item
    ``index`` of the tuple it returns) whole only (:func:`_used_whole`;
    ``counted``: it has one item per step, and its length may be read)?
    ``to_user``: the caller is the jitted function, which may return the
    list as it is to the user by its last statement (``return
    self.encode(xs)``: ``trace`` stacks it)."""
    code, line, lasti = caller
    found = source.function_and_offset(code)
    if found is None:
        return False
    function, offset, parents = found
    local = line - offset
    calls = [n for n in ast.walk(function) if isinstance(n, ast.Call) and
             n.lineno <= local <= n.end_lineno and
             _call_name(n) == callee.co_name]
    if len(calls) > 1:  # (f = enc(a, xs); b = enc(b, xs))
        calls = [n for n in calls if source.at_instruction(
            n, code, lasti, offset)]
    return len(calls) == 1 and (
        _used_whole(calls[0], parents, index, counted) or
        to_user and counted and index is None and
        _returned_last(function, calls[0], parents))


def _constant_item(node, subscript):
    """``subscript`` reads one item of ``node`` at a constant index
    (``hs[-1]``, ``hs[0]``)."""
    if not isinstance(subscript, ast.Subscript) or \
            subscript.value is not node:
        return False
    index = subscript.slice
    if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub):
        index = index.operand
    return isinstance(index, ast.Constant) and type(index.value) is int


def _collected(node, call):
    """``call`` passes ``node`` whole to ``F.stack``, ``F.concat``..., or
    to Python's ``sum``."""
    return isinstance(call, ast.Call) and node in call.args and \
        _call_name(call) in _COLLECTORS or source.is_call(call, 'sum') and \
        call.args == [node] and not call.keywords


def _collected_whole(node, parents):
    """The list ``node`` is passed whole to a collector (:func:`_collected`),
    or reversed (``F.stack(hs[::-1])``, ``F.stack(list(reversed(hs)))``),
    or all but its first items (``F.stack(hs[1:])`` of ``hs = [h0]``
    that the loop appended to)."""
    node = _through_reversal(_through_first_cut(node, parents), parents)
    return _collected(node, parents.get(node))


def _through_first_cut(node, parents):
    """The cut of the first items of ``node`` that holds it (``hs[1:]``),
    or ``node``."""
    holder = parents.get(node)
    if isinstance(holder, ast.Subscript) and holder.value is node and \
            source.first_items_skipped(holder):
        return holder
    return node


def _through_reversal(node, parents):
    """The reversal of ``node`` that holds it (``hs[::-1]``,
    ``reversed(hs)``, ``list(reversed(hs))``), or ``node``."""
    holder = parents.get(node)
    if source.is_reversal(holder) and holder.value is node:
        return holder
    if _sole_argument(holder, 'reversed', node):
        outer = parents.get(holder)
        return outer if _sole_argument(outer, 'list', holder) else holder
    return node


def _iterated(node, parents):
    """Is the list ``node`` what a later loop iterates over (``for h in
    hs``, ``[f(h) for h in hs]``, all but its first items: ``hs[1:]``;
    through ``reversed``, ``enumerate`` and ``zip``: ``zip(hf,
    reversed(hb))``)? Its length is then that loop's trip count, tied to
    this one's by the recording (``control``)."""
    node = _through_first_cut(node, parents)
    holder = parents.get(node)
    while isinstance(holder, ast.Call) and node in holder.args and any(
            source.is_call(holder, name)
            for name in ('reversed', 'enumerate', 'zip')):
        node, holder = holder, parents.get(holder)
    return isinstance(holder, (ast.For, ast.comprehension)) and \
        holder.iter is node


def _at_a_later_counter(node, parents):
    """Is the list ``node`` read at the counter of a later loop around it
    (``for t in range(T): ... hs[t]``), one item a step, as a loop
    iterating over it reads them?"""
    subscript = parents.get(node)
    if not isinstance(subscript, ast.Subscript) or \
            subscript.value is not node or \
            not isinstance(subscript.slice, ast.Name) or \
            not isinstance(subscript.ctx, ast.Load):
        return False
    loop = _enclosing_loop(node, parents)
    return isinstance(loop, ast.For) and \
        _counter_name(loop) == subscript.slice.id and \
        not source.is_call(loop.iter, 'enumerate')


def _sole_argument(call, name, node):
    """``call`` is ``name(node)``."""
    return source.is_call(call, name) and call.args == [node] and \
        not call.keywords


def _reordered(use, parents, name):
    """Does ``use`` (of the list ``name``) only reverse it in place: the
    statement ``name.reverse()``, or ``name = name[::-1]`` (either name of
    it, or ``list(reversed(name))``)? Its later uses are checked as its
    own."""
    holder = parents.get(use)
    if isinstance(holder, ast.Attribute) and holder.attr == 'reverse':
        call = parents.get(holder)
        return isinstance(call, ast.Call) and not call.args and \
            not call.keywords and isinstance(parents.get(call), ast.Expr)
    if isinstance(use.ctx, ast.Store):
        assign = holder
        value = getattr(assign, 'value', None)
    else:
        value = _through_reversal(use, parents)
        assign = parents.get(value) if value is not use else None
    if not isinstance(assign, ast.Assign) or len(assign.targets) != 1 or \
            not isinstance(assign.targets[0], ast.Name) or \
            assign.targets[0].id != name:
        return False
    inner = [n for n in ast.walk(value) if isinstance(n, ast.Name) and
             n.id == name]
    return len(inner) == 1 and _through_reversal(inner[0], parents) is value


def _passed(node, parents):
    """``node`` is an argument of a call (``self.crf(scores, ys)``)."""
    call = parents.get(node)
    return isinstance(call, ast.Call) and node in call.args


def _length_read(node, call):
    """``call`` is ``len(node)``."""
    return source.is_call(call, 'len') and call.args == [node] and \
        not call.keywords


def _one_item_per_step(loop, inside, name):
    """Does the ``for`` loop append to the list ``name`` once in every
    step, whatever the values: one ``name.append(...)`` (or
    ``name.insert(0, ...)``) statement of its own body, and no ``break``
    (its length is then the trip count)? Or fill it in place, one
    ``name[t] = ...`` statement of its own body at its counter ``t`` (its
    length that of ``[None] * T``)?"""
    if not isinstance(loop, ast.For) or \
            any(isinstance(n, ast.Break) for n in inside):
        return False
    writes = [n for n in inside if isinstance(n, ast.Call) and isinstance(
        n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) and
        n.func.value.id == name] + [
        n for n in inside if isinstance(n, (ast.AugAssign, ast.Assign))
        and any(isinstance(t, ast.Name) and t.id == name for t in (
            n.targets if isinstance(n, ast.Assign) else [n.target]))]
    counters = _counters(loop)
    filled = [n for n in inside if _assigns_at(n, counters) and
              n.targets[0].value.id == name]
    if filled:
        return not writes and len(filled) == 1 and filled[0] in loop.body
    return len(writes) == 1 and isinstance(writes[0], ast.Call) and \
        _adds_one_item(writes[0]) and any(
            isinstance(s, ast.Expr) and s.value is writes[0]
            for s in loop.body)


def _adds_one_item(call):
    """Is ``call`` (of a list's method) ``append(...)`` or
    ``insert(0, ...)``, one item added at an end?"""
    if call.func.attr == 'append':
        return True
    return call.func.attr == 'insert' and len(call.args) == 2 and \
        isinstance(call.args[0], ast.Constant) and call.args[0].value == 0


def _enclosing_function(node, parents):
    """The function holding ``node`` (these very ast nodes)."""
    while node in parents and not isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        node = parents[node]
    return node


def symbolic_loop_problem(code, header, kinds=None, caller=None,
                          consumed=(), caller_top=False, counted=()):
    """Why the loop at ``header`` of ``code`` cannot run for another trip
    count than the one recorded, read from the source; ``None`` if it
    can. Its Python must not see the count: the loop variable is used
    only to index (``xs[t]``) and not after the loop; the body has no
    ``break``, ``continue`` or ``return`` other than ``if <array
    test>: break``; and the lists it appends to are used after it only
    whole, by ``F.stack`` or ``F.concat``. Python state it could change
    out of sight (``next(it)``, ``d['n'] += 1``, ``rng.uniform()``) is
    not allowed either: ``kinds`` gives each local's kind at the loop's
    start (``'array'``, ``'list'``, ``'link'``, ...), and of the globals
    it reads that hold a function of user code or a link. A helper may
    return such a list (``return hs``, ``return hs, h``) to a caller
    (``caller``: ``(code, line)`` of the frame that called it) that
    uses it whole, or, the jitted function (``caller_top``), returns it as
    it is; the jitted function may return it itself (``trace`` stacks it).
    The lists named in ``consumed`` an op took whole while recording
    (``F.crf1d``, ``lengths.note_consumed``): they may be passed to a
    call. The names in ``counted`` hold the trip count after the loop
    (``control``: a size of the call), which they may be used as."""
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
                          if isinstance(n, ast.Name)) - set(counted):
            for use in source.name_nodes(function, target):
                if use not in set(ast.walk(loop)) and \
                        use.lineno > loop.lineno and \
                        not _rebound_by_a_loop(use, target, parents):
                    return 'the loop variable %r is used after the loop' % (
                        target)
        derived = _derived_counters(loop)
        for counter in [_counter_name(loop)] + sorted(derived):
            problem = _counter_use_problem(loop, function, parents, inside,
                                           counter, derived,
                                           counter in counted)
            if problem:
                return problem
    if _appends_elsewhere(inside):
        return 'the loop appends to a list held by an attribute or an item'
    hidden = _hidden_state_change(
        inside, _with_inner_links(inside, kinds or {}), _counters(loop))
    if hidden:
        return hidden
    for name in _appended_lists(loop, inside):
        rebound = _rebound_after(function, loop, name)
        for use in source.name_nodes(function, name):
            if use in inside or use.lineno <= loop.lineno or \
                    rebound is not None and _after_rebinding(use, rebound):
                continue
            if _collected_whole(use, parents) or \
                    _reordered(use, parents, name) or \
                    (_length_read(use, parents.get(use)) or
                     _constant_item(use, parents.get(use)) or
                     _iterated(use, parents) or
                     _at_a_later_counter(use, parents)) and \
                    _one_item_per_step(loop, inside, name) or \
                    name in consumed and _passed(use, parents):
                continue
            returned, index = _returned(use, parents)
            if returned and caller is not None and caller_uses_whole(
                    caller, code, index,
                    _one_item_per_step(loop, inside, name), caller_top):
                continue
            if returned and caller is None and \
                    _one_item_per_step(loop, inside, name) and \
                    _returned_once(function, name):
                continue  # (to the user: stacked, then cut apart again)
            if returned:
                return 'the list %r is returned to a caller that uses it ' \
                    'otherwise than whole' % name
            return 'the list %r is used after the loop' % name
    return None


def first_item_read(code, header):
    """Does code after the loop (or the comprehension) at ``header`` of
    ``code`` read the first item (``hs[0]``) of a list the loop appends
    to once a step, or iterate over it (``for h in hs``, or ``hs[t]`` at a
    later loop's counter: whose first step may be peeled off)? Recorded
    before the loop (peeled off it), that item is then a value of its own
    at any trip count. (A list that held items before the loop, ``hs =
    [h0]``, has them first: the graph then reads no iteration's value.)"""
    found = _loop_and_parents(code, header)
    if found is not None:
        loop, parents = found
        inside = set(ast.walk(loop))
        names = [name for name in _appended_lists(loop, inside)
                 if _one_item_per_step(loop, inside, name) and
                 not _filled_at_the_counter(loop, inside)]
    else:
        found = comprehension_and_parents(code, header)
        name = comprehension_list_name(code, header)
        if found is None or name is None:
            return False
        loop, parents = found[0], found[1]
        loop = parents.get(loop)  # (the assignment)
        inside, names = set(ast.walk(loop)), [name]
    function = _enclosing_function(loop, parents)
    for name in names:
        rebound = _rebound_after(function, loop, name)
        if any(use not in inside and use.lineno >= loop.lineno and
               not (rebound is not None and _after_rebinding(use, rebound))
               and (_first_item(use, parents.get(use)) or
                    _iterated(use, parents) or
                    _at_a_later_counter(use, parents))
               for use in source.name_nodes(function, name)):
            return True
    return False


def _first_item(node, subscript):
    """``subscript`` is ``node[0]``."""
    return _constant_item(node, subscript) and \
        isinstance(subscript.slice, ast.Constant) and \
        subscript.slice.value == 0


def _counter_use_problem(loop, function, parents, inside, counter,
                         derived, after=False):
    """Why a use of the loop's counter (or of a name ``derived`` from it)
    lets the loop's Python see the trip count, or ``None``: it may index,
    be an operand with a Variable, be compared, or make a derived name
    (``t = T - 1 - i``), and is not used after the loop (but ``after``:
    it then holds a size of the call)."""
    target = _target_name(loop.target, counter)
    for use in source.name_nodes(function, counter):
        if use in inside and use is not target:
            if not _index_use(use, parents) and \
                    not _number_use(use, parents) and \
                    not _compared(use, parents) and \
                    not _derives(use, parents, derived):
                return 'the loop variable %r is used in Python' % counter
        elif use not in inside and use not in set(ast.walk(loop)) and \
                not after:
            if use.lineno > loop.lineno and not _rebound_by_a_loop(
                    use, counter, parents):
                return 'the loop variable %r is used after the loop' % (
                    counter)
    return None


def _derived_counters(loop):
    """``{name: its assignment}`` of the names a ``for`` loop's own body
    assigns once, from its counter in a sum or difference with constants
    and names (``t = T - 1 - i``), and reads only after that: each step's
    value follows the counter, as an index of it written in place (``xs[T
    - 1 - i]``) does."""
    counter = _counter_name(loop)
    if counter is None:
        return {}
    found = {}
    for statement in loop.body:
        if not isinstance(statement, ast.Assign) or \
                len(statement.targets) != 1 or \
                not isinstance(statement.targets[0], ast.Name):
            continue
        name = statement.targets[0].id
        if name != counter and _counter_arithmetic(statement.value,
                                                   counter) and \
                _assigned_before_read(loop, name, statement):
            found[name] = statement
    return found


def step_counters(code, header):
    """``{name: step}`` of the names the ``for`` loop at ``header`` of
    ``code`` counts its steps with (``n += 1`` once in its own body, an
    int constant each step, and read nowhere else in the loop), where
    every step runs to its end (no ``break`` or ``continue``): after the
    loop, each is its value before plus the trip count times its step."""
    loop = _for_loop(code, header)
    return {} if loop is None else counted_steps(loop)


def counted_steps(loop):
    """:func:`step_counters` of the ``ast.For`` ``loop``."""
    inside = list(ast.walk(loop))
    if any(isinstance(n, (ast.Break, ast.Continue)) for n in inside):
        return {}
    counted = {}
    for statement in loop.body:
        step = _int_step_of(statement)
        if step is not None:
            name = statement.target.id
            uses = [n for n in inside
                    if isinstance(n, ast.Name) and n.id == name]
            if uses == [statement.target]:  # (once, and only there)
                counted[name] = step
    return counted


def _int_step_of(statement):
    """``c`` of ``name += c`` (``-c`` of ``name -= c``), an int constant;
    else ``None``."""
    if not isinstance(statement, ast.AugAssign) or \
            not isinstance(statement.target, ast.Name) or \
            not isinstance(statement.op, (ast.Add, ast.Sub)):
        return None
    step = source.int_constant(statement.value, None)
    if step is None or type(step) is bool:
        return None
    return step if isinstance(statement.op, ast.Add) else -step


def _assigned_before_read(loop, name, statement):
    uses = [n for n in ast.walk(loop)
            if isinstance(n, ast.Name) and n.id == name]
    return all(use is statement.targets[0] or
               isinstance(use.ctx, ast.Load) and
               use.lineno > statement.end_lineno for use in uses)


def _counters(loop):
    """The ``for`` loop's counter and the names derived from it."""
    counter = _counter_name(loop) if isinstance(loop, ast.For) else None
    if counter is None:
        return frozenset()
    return frozenset([counter]) | frozenset(_derived_counters(loop))


def _counter_arithmetic(expression, counter):
    """``expression`` adds or subtracts (or negates) the name ``counter``
    once, and int constants and other names (``T - 1 - i``)."""
    names = [n for n in ast.walk(expression) if isinstance(n, ast.Name)]
    return sum(n.id == counter for n in names) == 1 and \
        _plain_int_terms(expression) and not any(
            isinstance(n, ast.Constant) and type(n.value) is not int
            for n in ast.walk(expression))


def _derives(use, parents, derived):
    """Is ``use`` in the value of one of the ``derived`` assignments?"""
    node = use
    while node in parents and not isinstance(node, ast.stmt):
        node = parents[node]
    return any(node is statement for statement in derived.values())


def derived_counters(code, header):
    """The names the ``for`` loop at ``header`` of ``code`` computes from
    its counter (:func:`_derived_counters`): they change between steps as
    the counter does."""
    loop = _for_loop(code, header)
    return frozenset() if loop is None else frozenset(_derived_counters(loop))


def _rebound_after(function, loop, name):
    """The first statement of ``function``'s own body after ``loop`` that
    binds ``name`` anew (``hs = F.stack(hs)``), or ``None``: the uses of
    ``name`` after it are of the new value."""
    end = getattr(loop, 'end_lineno', None) or loop.lineno
    return next((stmt for stmt in function.body
                 if isinstance(stmt, ast.Assign) and stmt.lineno > end and
                 any(isinstance(t, ast.Name) and t.id == name
                     for t in stmt.targets)), None)


def _after_rebinding(use, stmt):
    """Is ``use`` (a ``Name`` node) the target ``stmt`` binds, or after
    ``stmt``?"""
    last = getattr(stmt, 'end_lineno', None) or stmt.lineno
    return use.lineno > last or isinstance(use.ctx, ast.Store) and \
        stmt.lineno <= use.lineno <= last


# Calls a loop body may make: these builtins, functions of these modules,
# ``self.name(...)`` (a link or a method; ``self`` or a local holding a
# link), functions of user code and links held by globals, and methods of
# arrays and Variables (and ``append`` of lists).
_PURE_BUILTINS = frozenset(['len', 'range', 'min', 'max', 'abs', 'zip', 'sum',
                            'enumerate', 'reversed', 'isinstance', 'tuple',
                            'list'])
_ARRAY_MODULES = frozenset(['F', 'L', 'chainer', 'functions', 'links',
                            'numpy', 'np', 'xp', 'cupy', 'math'])
_LIST_METHODS = frozenset(['append', 'extend', 'insert'])


def _hidden_state_change(inside, kinds, counters=frozenset()):
    """What in a loop body could change Python state that the loop
    watcher's snapshots do not see, or ``None``. A list's item at the
    counter assigned (``ys[t] = h``) they see."""
    for node in inside:
        if isinstance(node, ast.AugAssign) and not isinstance(
                node.target, ast.Name):
            return 'the loop updates an item or attribute in place'
        if _assigns_at(node, counters) and \
                kinds.get(node.targets[0].value.id) == 'list':
            continue
        if isinstance(node, ast.Assign) and any(
                isinstance(t, (ast.Subscript, ast.Attribute)) and
                not _is_model(_root_name(t), kinds) and
                not _item_of_local_list(t, kinds) for t in node.targets):
            return 'the loop assigns an item or attribute'
        if isinstance(node, ast.Call):
            problem = _hidden_call(node, kinds)
            if problem:
                return problem
    return None


def _item_of_local_list(target, kinds):
    """``target`` is an item of a local list (``states[k] = h``, a state
    per layer): the loop watcher's snapshots see the list's items."""
    return isinstance(target, ast.Subscript) and \
        isinstance(target.value, ast.Name) and \
        kinds.get(target.value.id) == 'list' and \
        not isinstance(target.slice, ast.Slice)


def _with_inner_links(inside, kinds):
    """``kinds`` with the targets of the inner loops over the model's own
    links (:func:`_inner_link_loops`) as links: a body calls them as it
    calls ``self.lstm``."""
    found = dict(kinds)
    for name in _inner_link_loops(inside, kinds):
        found.setdefault(name, 'link')
    return found


def _inner_link_loops(inside, kinds, every_target=False):
    """The names the ``for`` loops among the nodes ``inside`` bind that
    iterate over the model's own links (``for layer in self.layers:``,
    ``for k, layer in enumerate(self.layers):``, the layer of ``for
    layer, h in zip(self.layers, hs)``; ``every_target``: ``h`` too): the
    same links, in the same order, at every pass of the loop around
    them."""
    names = set()
    for node in inside:
        if not isinstance(node, ast.For):
            continue
        iterated = node.iter
        if source.is_call(iterated, 'enumerate') and iterated.args:
            iterated = iterated.args[0]
        if source.is_call(iterated, 'zip') and \
                isinstance(node.target, ast.Tuple) and \
                len(node.target.elts) == len(iterated.args):
            # (for layer, h in zip(self.layers, hs): the layer)
            linked = [_links_of_the_model(arg, kinds)
                      for arg in iterated.args]
            names.update(
                name.id for at, target in zip(linked, node.target.elts)
                if any(linked) and (at or every_target)
                for name in ast.walk(target) if isinstance(name, ast.Name))
        elif _links_of_the_model(iterated, kinds):
            names.update(name.id for name in ast.walk(node.target)
                         if isinstance(name, ast.Name))
    return names


def _links_of_the_model(node, kinds):
    """``self.layers``, or a local list of links (``cells``)."""
    return _is_model(_root_name(node), kinds) and _attribute_chain(node)


def fresh_lists(code, header):
    """The names the body of the loop at ``header`` of ``code`` binds to a
    new empty list at its top (``new = []``), before any other use: each
    pass makes its own, which the body may append to (a layer's states
    for the next step: ``hs = new``)."""
    found = _loop_and_parents(code, header)
    if found is None:
        return frozenset()
    loop, _ = found
    names = set()
    for k, stmt in enumerate(loop.body):
        for name in _bound_to_empty_lists(stmt):
            if not any(isinstance(n, ast.Name) and n.id == name
                       for s in loop.body[:k] for n in ast.walk(s)):
                names.add(name)
    return frozenset(names)


def _bound_to_empty_lists(stmt):
    """The names ``stmt`` binds to ``[]`` (``new = []``, ``h, new = x,
    []``)."""
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return []
    target, value = stmt.targets[0], stmt.value
    pairs = [(target, value)]
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and \
            len(target.elts) == len(value.elts):
        pairs = list(zip(target.elts, value.elts))
    return [t.id for t, v in pairs if isinstance(t, ast.Name) and
            isinstance(v, ast.List) and not v.elts]


def inner_link_loop_targets(code, header, links=()):
    """The names the loops inside the loop at ``header`` bind iterating
    over the model's links (:func:`_inner_link_loops`; or over the names
    ``links``, lists of them): each pass binds them anew, whatever an
    earlier pass left in them."""
    found = _loop_and_parents(code, header)
    if found is None:
        return set()
    loop, _ = found
    inside = set(ast.walk(loop)) - {loop}
    kinds = dict.fromkeys(links, 'link')
    return _inner_link_loops(inside, kinds, every_target=True) | set(
        name.id for node in inside if isinstance(node, ast.For) and
        _fixed_range(node.iter, kinds) for name in ast.walk(node.target)
        if isinstance(name, ast.Name))


def _fixed_range(node, kinds):
    """``range(...)`` of int constants and the model's attributes
    (``range(2)``, ``range(self.n_layers)``): as many steps at every
    pass of a loop around it."""
    return source.is_call(node, 'range') and not node.keywords and all(
        isinstance(a, ast.Constant) and type(a.value) is int or
        isinstance(a, ast.Attribute) and _attribute_chain(a) and
        _is_model(_root_name(a), kinds) for a in node.args)


def _hidden_call(call, kinds):
    func = call.func
    if isinstance(func, ast.Name):
        return None if func.id in _PURE_BUILTINS or \
            kinds.get(func.id) in ('function', 'link') else \
            'the loop calls %s()' % func.id
    if isinstance(func, ast.Subscript) and _attribute_chain(func.value) and \
            _is_model(_root_name(func), kinds):
        return None  # self.layers[k](h), cells[k](h, x)
    if not isinstance(func, ast.Attribute):
        return 'the loop calls a computed function'
    root = _root_name(func)
    if root is None or root in _ARRAY_MODULES:
        return None  # a method of a value computed here, F.relu(...)
    model = _is_model(root, kinds)
    if model and isinstance(func.value, ast.Name):
        return None  # self.lstm(x), self.step(h)
    if model and _attribute_chain(func.value) and \
            func.value.attr != 'xp':
        return None  # self.encoder.lstm(x), self.lstm.upward(x)
    if model and isinstance(func.value, ast.Attribute) and \
            func.value.attr == 'xp' and isinstance(func.value.value, ast.Name):
        return None  # self.xp.zeros(...): the link's array module
    kind = kinds.get(root)
    if kind == 'array' or (kind == 'list' and func.attr in _LIST_METHODS
                           and isinstance(func.value, ast.Name)):
        return None  # h.reshape(...), y.array.all(), ys.append(h)
    return 'the loop calls %s()' % func.attr


def _attribute_chain(node):
    """Is ``node`` a chain of attributes of a name (``self.a.b``)?"""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _is_model(name, kinds):
    """A name for the model: ``self``, or a local holding a link (a model
    passed to a function, ``def step(model, x)``), whose own state the
    loop watcher's snapshots see two levels deep."""
    return name == 'self' or kinds.get(name) == 'link'


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
    found = source.function_and_offset(code)
    if found is None:
        return None
    function, offset, parents = found
    loop = next((n for n in ast.walk(function)
                 if isinstance(n, (ast.For, ast.While)) and
                 source.header_line(n) + offset == header), None)
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
    (or ``reversed(range(...))``) and ``for t, x in enumerate(...)``;
    ``None`` when the loop binds elements only (``for x in xs``)."""
    iterable = loop.iter
    if source.is_call(iterable, 'reversed') and len(iterable.args) == 1:
        iterable = iterable.args[0]
    if source.is_call(iterable, 'range') and isinstance(loop.target, ast.Name):
        return loop.target.id
    if source.is_call(iterable, 'enumerate') and isinstance(
            loop.target, ast.Tuple) and isinstance(loop.target.elts[0],
                                                   ast.Name):
        return loop.target.elts[0].id
    return None


def counter_start(code, header):
    """``(name, start)`` of the counter of the ``for`` loop at ``header``
    of ``code`` that counts up by one from an int constant: ``t`` of
    ``for t in range(E)`` (from 0) or ``range(a, E)`` (from ``a``), ``i``
    of ``for i, x in enumerate(X)`` (from 0, or its ``start``); else
    ``None``. Where the loop runs out, the counter ends one short of the
    start plus the trip count."""
    loop = _for_loop(code, header)
    return None if loop is None else counting_up(loop)


def counts_down(code, header):
    """Does the counter of the ``for`` loop at ``header`` of ``code`` count
    down, its values ending where they end whatever the trip count: ``t``
    of ``reversed(range(T))`` or of ``range(T - 1, -1, -1)``? ``None``
    where a ``range``'s step is not an int constant; ``False`` for a loop
    without a counter."""
    loop = _for_loop(code, header)
    if loop is None or _counter_name(loop) is None:
        return False
    iterable = loop.iter
    if source.is_call(iterable, 'reversed'):
        return True
    if source.is_call(iterable, 'range') and len(iterable.args) == 3:
        step = source.int_constant(iterable.args[2], None)
        return None if step is None else step < 0
    return False


def counter_as_number(code, header):
    """How the ``for`` loop at ``header`` of ``code`` uses its counter
    otherwise than in an index (``lengths > t``, ``h * (t + 1)``):
    ``'branch'`` where a use is in a block that may not run at every
    step (an ``if``'s, a loop's), ``'steps'`` where each runs at every
    step, else ``None``."""
    found = _loop_and_parents(code, header)
    if found is None or not isinstance(found[0], ast.For):
        return None
    loop, parents = found
    counter = _counter_name(loop)
    target = _target_name(loop.target, counter)
    uses = [use for body in loop.body
            for use in source.name_nodes(body, counter)
            if use is not target and not _index_use(use, parents)]
    if any(_in_a_block(use, loop, parents) for use in uses):
        return 'branch'
    return 'steps' if uses else None


#: The nodes whose blocks may run at some steps of a loop and not others.
_BLOCKS = (ast.If, ast.IfExp, ast.For, ast.While, ast.Try, ast.With,
           ast.comprehension, ast.Lambda, ast.BoolOp)


def _in_a_block(node, loop, parents):
    """Is ``node`` inside a block of ``loop``'s body (:data:`_BLOCKS`)?"""
    node = parents.get(node)
    while node is not None and node is not loop:
        if isinstance(node, _BLOCKS):
            return True
        node = parents.get(node)
    return False


def _for_loop(code, header):
    """The ``ast.For`` at ``header`` of ``code``, or ``None`` (no source,
    another kind of loop)."""
    found = _loop_and_parents(code, header)
    return found[0] if found is not None and \
        isinstance(found[0], ast.For) else None


def counting_up(loop):
    """:func:`counter_start` of the ``ast.For`` ``loop``."""
    name, iterable = _counter_name(loop), loop.iter
    if name is None or source.is_call(iterable, 'reversed'):
        return None
    starts = iterable.args[:-1] if source.is_call(iterable, 'range') else \
        iterable.args[1:] + [k.value for k in iterable.keywords
                             if k.arg == 'start']
    if len(starts) > 1 or source.is_call(iterable, 'range') and \
            len(iterable.args) > 2:
        return None
    start = source.int_constant(starts[0], None) if starts else 0
    return None if start is None else (name, start)


def _target_name(target, name):
    for node in ast.walk(target):
        if isinstance(node, ast.Name) and node.id == name:
            return node
    return None


def counter_indexed_names(code, header):
    """The names a ``for`` loop's counter indexes (``xs`` in ``xs[t]``,
    and in ``xs.array[t]`` of a Variable's array; not ``ys`` in ``ys[t] =
    h``, an item assigned), or ``None`` when one is not a plain name."""
    found = _loop_and_parents(code, header)
    if found is None:
        return None
    loop, parents = found
    if not isinstance(loop, ast.For):
        return set()
    counters = _counters(loop)
    names = set()
    for use in ast.walk(loop):
        if isinstance(use, ast.Name) and use.id in counters and \
                _index_use(use, parents):
            subscript = _indexed_by(use, parents)
            if isinstance(subscript.ctx, ast.Store):
                continue
            indexed = _array_of(subscript.value)
            if not isinstance(indexed, ast.Name):
                return None
            names.add(indexed.id)
    return names


def _array_of(node):
    """``xs`` of ``xs.array`` or ``xs.data`` (a Variable's array); else
    ``node``."""
    if isinstance(node, ast.Attribute) and node.attr in ('array', 'data'):
        return node.value
    return node


def _index_use(name, parents):
    """``xs[t]`` or ``xs[:, t]``: the name alone in an index, or in a sum
    or difference with constants and other names there (``ys[t + 1]``,
    ``xs[T - 1 - t]``): Python computes an index from the counter, which
    the recorded indexing reads as the loop counts."""
    return _indexed_by(name, parents) is not None


def _indexed_by(name, parents):
    """The ``ast.Subscript`` whose index :func:`_index_use` finds
    ``name`` in, or ``None``."""
    if not isinstance(name.ctx, ast.Load):
        return None
    node, parent = name, parents.get(name)
    while _index_arithmetic(parent, node):
        node, parent = parent, parents.get(parent)
    if isinstance(parent, ast.Slice) and parent.step is None and \
            node in (parent.lower, parent.upper):
        node, parent = parent, parents.get(parent)  # (xs[t:t+1])
    if isinstance(parent, ast.Tuple):
        node, parent = parent, parents.get(parent)
    return parent if isinstance(parent, ast.Subscript) and \
        parent.slice is node else None


def _number_use(name, parents):
    """``h * (t + 1)``, ``y + 2 * t``, ``h * 0.9 ** t``: the name in a
    sum, difference or product with int constants, or a number constant
    to its power, which is an operand of an operator with something else
    (a Variable's: the op takes the number as its constant, which the
    rolled loop computes from its counter where the recorded iterations
    gave it as a multiple of their count or a power of a number; a
    Python number that changes between iterations otherwise is seen
    there)."""
    if not isinstance(name.ctx, ast.Load):
        return False
    node, parent = name, parents.get(name)
    while _int_arithmetic(parent, node):
        node, parent = parent, parents.get(parent)
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Pow) \
            and parent.right is node and \
            isinstance(parent.left, ast.Constant) and \
            type(parent.left.value) in (int, float):
        node, parent = parent, parents.get(parent)
    if not isinstance(parent, ast.BinOp) or not isinstance(
            parent.op, (ast.Add, ast.Sub, ast.Mult)):
        return False
    other = parent.right if parent.left is node else parent.left
    return not isinstance(other, ast.Constant)


def _compared(name, parents):
    """``t == 0``, ``lengths > t``, ``t + 1 < n``: the name (in a sum,
    difference or product with int constants) compared once. Where the
    test's outcome changes between steps, the recorded steps differ (the
    first, when it is ``t == 0``, is recorded before the loop), and a
    NumPy comparison's int follows the counter (``rolling``)."""
    if not isinstance(name.ctx, ast.Load):
        return False
    node, parent = name, parents.get(name)
    while _int_arithmetic(parent, node):
        node, parent = parent, parents.get(parent)
    return isinstance(parent, ast.Compare) and len(parent.ops) == 1


def _int_arithmetic(parent, node):
    """``parent`` adds, subtracts or multiplies ``node`` and an int
    constant, or negates it."""
    if isinstance(parent, ast.UnaryOp):
        return isinstance(parent.op, ast.USub)
    if not isinstance(parent, ast.BinOp) or \
            not isinstance(parent.op, (ast.Add, ast.Sub, ast.Mult)):
        return False
    other = parent.right if parent.left is node else parent.left
    return isinstance(other, ast.Constant) and type(other.value) is int


def _index_arithmetic(parent, node):
    """``parent`` adds or subtracts ``node`` and a constant or a name
    (``t + 1``, ``T - 1 - t``), or negates it."""
    if isinstance(parent, ast.UnaryOp):
        return isinstance(parent.op, ast.USub)
    if not isinstance(parent, ast.BinOp) or \
            not isinstance(parent.op, (ast.Add, ast.Sub)):
        return False
    other = parent.right if parent.left is node else parent.left
    return _plain_int_terms(other)


def _plain_int_terms(expression):
    """``T - 1``, ``len(xs)``, ``xs.shape[0] - 1``: a sum or difference
    of constants, names, their lengths and their shapes' items."""
    return all(isinstance(n, (ast.Name, ast.Constant, ast.BinOp, ast.Load,
                              ast.Add, ast.Sub, ast.UnaryOp, ast.USub)) or
               _length_term(n) for n in ast.walk(expression))


def _length_term(node):
    """``len``, ``len(xs)``, ``xs.shape`` or ``xs.shape[0]``."""
    if isinstance(node, ast.Call):
        return source.is_call(node, 'len') and len(node.args) == 1 and \
            not node.keywords
    if isinstance(node, ast.Attribute):
        return node.attr == 'shape'
    if isinstance(node, ast.Subscript):
        return isinstance(node.value, ast.Attribute) and \
            node.value.attr == 'shape' and isinstance(node.slice,
                                                      ast.Constant)
    return False


def appending_lines(loc):
    """Where the ``for`` statement at ``loc`` (``(filename, line)``) only
    appends to lists, one value each (``exs.append(self.embed(x))``), as a
    comprehension makes a list, adds one value to a name (``loss +=
    F.softmax_cross_entropy(y, t)``), or names a value on the way (``e =
    self.embed(x)``): the ``(filename, line)`` spans of its statements;
    else ``None``."""
    loop = _for_statement(loc)
    if loop is None or not all(
            _appends_one(statement) or _names_one(statement) or
            _adds_one(statement) for statement in loop.body):
        return None
    return [[(loc[0], k) for k in range(
        statement.lineno, statement.end_lineno + 1)]
        for statement in loop.body]


def sums_lengths_only(loc, lines):
    """Does the ``for`` statement at ``loc`` (``(filename, line)``) only
    add up what it reads on ``lines`` (``total += len(x)``, the items'
    lengths) and append those sums to lists (``offsets.append(total)``)?"""
    loop = _for_statement(loc)
    if loop is None:
        return False
    sums = set(statement.target.id for statement in loop.body
               if _adds_one(statement) and
               (loc[0], statement.lineno) in lines)
    return bool(sums) and all(
        _adds_one(statement) and statement.target.id in sums or
        _appends_one(statement) and _names(statement.value.args[0], sums)
        for statement in loop.body)


def _names(node, names):
    """Is ``node`` one of the ``names``?"""
    return isinstance(node, ast.Name) and node.id in names


def _for_statement(loc):
    """The ``ast.For`` at ``loc`` (``(filename, line)``) with no ``else``,
    or ``None``."""
    tree = source.file_ast(loc[0])
    loop = None if tree is None else next(
        (n for n in ast.walk(tree)
         if isinstance(n, ast.For) and n.lineno == loc[1]), None)
    return None if loop is None or loop.orelse else loop


def comprehension_lines(loc):
    """The ``(filename, line)`` lines of the innermost comprehension on the
    line of ``loc`` (one written over several lines: ``[\n f(x) for x in
    xs]``), or ``()``."""
    filename, line = loc
    tree = source.file_ast(filename)
    found = [] if tree is None else [
        n for n in ast.walk(tree)
        if isinstance(n, (ast.ListComp, ast.GeneratorExp, ast.SetComp,
                          ast.DictComp)) and n.lineno <= line <= n.end_lineno]
    if not found:
        return ()
    inner = min(found, key=lambda n: n.end_lineno - n.lineno)
    return [(filename, k) for k in range(inner.lineno, inner.end_lineno + 1)]


def _appends_one(statement):
    """Is ``statement`` ``name.append(value)``, binding no name?"""
    call = statement.value if isinstance(statement, ast.Expr) else None
    return isinstance(call, ast.Call) and isinstance(
        call.func, ast.Attribute) and call.func.attr == 'append' and \
        isinstance(call.func.value, ast.Name) and len(call.args) == 1 and \
        not call.keywords and _binds_nothing(call)


def _names_one(statement):
    """Is ``statement`` ``name = value``, one name bound to one value?"""
    return isinstance(statement, ast.Assign) and \
        len(statement.targets) == 1 and \
        isinstance(statement.targets[0], ast.Name) and \
        _binds_nothing(statement.value)


def _adds_one(statement):
    """Is ``statement`` ``name += value``?"""
    return isinstance(statement, ast.AugAssign) and \
        isinstance(statement.op, ast.Add) and \
        isinstance(statement.target, ast.Name) and \
        _binds_nothing(statement.value)


def _binds_nothing(expression):
    """Does ``expression`` bind no name nor yield (no ``:=``, ``yield``,
    ``await``)?"""
    return not any(isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom,
                                  ast.Await)) for n in ast.walk(expression))


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
    """The lists the loop appends to, and those whose item at its counter
    it assigns (``ys[t] = h`` of ``ys = [None] * T``)."""
    found = set(_filled_at_the_counter(loop, inside))
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


def _filled_at_the_counter(loop, inside):
    """The names ``ys`` of the assignments ``ys[t] = ...`` in the loop,
    ``t`` its counter."""
    counters = _counters(loop)
    return [node.targets[0].value.id for node in inside
            if _assigns_at(node, counters)]


def _assigns_at(node, counters):
    """``name[t] = ...``, ``t`` one of ``counters``?"""
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
        return False
    target = node.targets[0]
    return isinstance(target, ast.Subscript) and \
        isinstance(target.value, ast.Name) and \
        isinstance(target.slice, ast.Name) and target.slice.id in counters


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
    tree = source.file_ast(filename)
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
