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

For each loop, in the jitted function or in a function or method it
calls, the watcher also reads the trip-count expression
(``range(len(xs))``, ``range(xs.shape[0])``, ``range(n)``, ``for x in
xs``; see :mod:`.trip_counts`) so that a trip count that comes from an
argument can be symbolic in the cache key. How a
loop can be left is read from its source by :mod:`.loop_analysis`.
"""

import ast
import collections
import ctypes
import dis
import os
import sys
import sysconfig
import types

import chainer
import numpy

from chainerjit.frontend import loop_analysis
from chainerjit.frontend import source
from chainerjit.frontend import trip_counts


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
_NUMPY_DIR = os.path.dirname(numpy.__file__) + os.sep
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
    """The loop sites of a function's own ``for`` and ``while``
    statements, or ``None`` when its source cannot be read or parsed."""
    parsed = source.parsed_source(code)
    if parsed is None:
        return None
    tree, offset = parsed
    function = next((n for n in ast.walk(tree) if isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))), None)
    if function is None:
        return None
    sites = {}
    body = function.body if isinstance(function.body, list) else []
    for node in _own_statements(body):
        if isinstance(node, (ast.For, ast.While)):
            site = LoopSite(
                'for' if isinstance(node, ast.For) else 'while',
                source.header_line(node) + offset, node.lineno + offset,
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
        trip: how the trip count follows from the arguments (see
            :func:`trip_source`), or ``None``.
        reads: ``(position, description)`` of array values read into
            Python during the loop.
    """

    def __init__(self, site, position, trip):
        self.site = site
        self.boundaries = [position]
        self.end = None
        self.exit = None
        self.trip = trip
        self.last_header = True  # the latest line event was the header
        # a trip count to read once the header computed its iterable
        self.iterable_pending = False
        # (code, line) of the call of a helper whose loop this is
        self.caller = None
        self.caller_top = False  # the jitted function is the caller
        self.bound = None  # how many iterations the loop allows at most
        self.snapshots = []  # the frame's locals at each pass
        self.code = None  # the code object the loop is in
        self.global_kinds = {}  # see global_kinds
        self.links = frozenset()  # see links_held
        self.targets = ()  # the names the loop statement binds
        self.defined = set()  # IR values its iterations computed
        self.python_safe = False  # see rolling.note_python_problem
        self.python_problem = None
        self.previous_lasti = -1  # a comprehension's latest line event
        self.previous_line = None
        # id -> length of the lists it filled from empty, one item per
        # step, when it ran out (a helper may return one: lengths), and
        # their names; the names of those an op took whole (F.crf1d)
        self.filled = {}
        self.filled_names = {}
        self.consumed = set()
        # id -> (items before, length) of the lists it appended one item
        # per step to, when it ran out, from empty or not (hs = [h0])
        self.grown = {}
        # the names counting its steps (n += 1), its trip count's after it
        self.counted = frozenset()

    @property
    def n_iterations(self):
        return len(self.boundaries) - (1 if self.exit == 'done' else 0)

    @property
    def loc(self):
        return self.site.filename, self.site.first

    @property
    def varies(self):
        """Whether its trip count may change between calls
        (:func:`may_vary`)."""
        return may_vary(self.site, self.links)


def links_held(code, frame):
    """The names of ``frame`` (running ``code``) that hold a link, or a
    list of links the function writes out (``cells = [self.c0,
    self.c1]``, :func:`source.written_out_lists`): a loop over them runs
    as many times at every call."""
    written = source.written_out_lists(code)
    return frozenset(
        name for name, value in frame.f_locals.items()
        if isinstance(value, chainer.Link) or name in written and
        type(value) in (list, tuple) and value and
        all(isinstance(v, chainer.Link) for v in value))


def pause_tracing():
    """Unsets a :class:`LoopWatcher`'s trace function in force, and
    returns it (else ``None``): the recorder's, Chainer's and NumPy's code
    inside a node run no loop of the forward, and a trace function
    called at each of their calls slowed recording 2 to 3 times."""
    trace = sys.gettrace()
    if isinstance(getattr(trace, '__self__', None), LoopWatcher):
        sys.settrace(None)
        return trace
    return None


def resume_tracing(trace):
    """Sets back what :func:`pause_tracing` returned; the frames traced
    before get their line events again."""
    if trace is not None:
        sys.settrace(trace)


class LoopWatcher(object):
    """Follows line events in user code while a forward is recorded.

    Args:
        position: returns the number of IR nodes recorded so far.
        top_code: the jitted function's code object.
        arguments: ``{id(object): ('leaf', index)}`` for the call's
            Variables and arrays and ``{('static', name): (path, value)}``
            for its int arguments, to resolve trip counts.
        first_item: returns ``(position, origin, (filename, line),
            shift, start)`` of the latest node that took item 0 of a
            value's first axis (or the last of ``F.separate``'s items),
            that axis's origin (``lengths.origin_of``), the user's line,
            the rows that axis has more than the origin
            (``lengths.shift_of``) and the node a loop over the items
            starts at, or ``None``: the trip count of a loop over a value
            its header computes.
        numpy_call: called with ``(name, arguments, caller frame)`` for
            a NumPy function user code calls.
        trip_length: returns the trip count ``n`` of a loop over an
            argument's axis (its ``trip_counts.TripSource``) as a size of
            that axis (``lengths.Length``), or, as a float (for a count
            in a float, in ``frame``), a number computed of it at run
            time (``scalars.Scalar``); or ``None``.
    """

    def __init__(self, position, top_code, arguments, first_item=None,
                 numpy_call=None, trip_length=None):
        self.position = position
        self.top_code = top_code
        self.arguments = arguments
        self.first_item = first_item
        self.numpy_call = numpy_call
        self.trip_length = trip_length
        # The offsets of the jitted function's subscripts that index with
        # a varying int, and how often each ran (see watch_indexes).
        self.index_offsets = frozenset()
        self.indexed = collections.Counter()
        # The lines of the jitted function that ran (its line events).
        self.lines_run = set()
        self.runs = []  # LoopRuns, in order of their end
        self.no_source = []  # code objects with loops but no source
        self.codes_run = set()  # the user's code objects that ran
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

    def watch_indexes(self, offsets):
        """Counts the runs of the jitted function's instructions at
        ``offsets`` (subscripts indexing with a varying int) in
        :attr:`indexed`: the recording tells those it saw from those
        CPython ran in C."""
        self.index_offsets = frozenset(offsets)

    def _on_call(self, frame, event, arg):
        if self.numpy_call is not None and event == 'call' and \
                frame.f_code.co_filename.startswith(_NUMPY_DIR):
            self._numpy_called(frame)
        local = self._local_tracer(frame, event)
        if frame.f_code is not self.top_code or event != 'call':
            return local
        frame.f_trace_opcodes = bool(self.index_offsets)
        lines_run = self.lines_run

        def on_event(frame, event, arg):
            if event == 'opcode':
                if frame.f_lasti in self.index_offsets:
                    self.indexed[frame.f_lasti] += 1
                return on_event
            if event == 'line':
                lines_run.add(frame.f_lineno)
            if local is not None:
                local(frame, event, arg)
            return on_event
        return on_event

    def _numpy_called(self, frame):
        """A NumPy function in Python (or the Python function that
        collects the arguments of one in C: ``numpy.argmax``'s
        ``_argmax_dispatcher``, ``numpy.concatenate``'s) that user code
        called: ``numpy_call(name, arguments, caller frame)``."""
        caller, name = frame.f_back, frame.f_code.co_name
        if caller is not None and is_user_code(caller.f_code):
            if name.startswith('_') and name.endswith('_dispatcher'):
                name = name[1:-len('_dispatcher')]
            self.numpy_call(name, tuple(frame.f_locals.values()), caller)

    def _local_tracer(self, frame, event):
        code = frame.f_code
        if event != 'call' or not is_user_code(code):
            return None
        self.codes_run.add(code)
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
                self._close(stack.pop(), 'left', frame)
            site = loop_sites(frame.f_code).get(line)
            if stack and stack[-1].iterable_pending:
                self._iterable_computed(stack[-1])
            if stack:
                stack[-1].last_header = site is stack[-1].site
            if site is not None:
                if stack and stack[-1].site is site:
                    stack[-1].boundaries.append(self.position())
                    stack[-1].snapshots.append(_locals_summary(frame))
                else:
                    stack.append(self._start(site, frame))
        elif event == 'return':
            self._close_all(id(frame), frame)
        return self._on_statement_event

    def _start(self, site, frame):
        top = frame.f_code is self.top_code
        run = LoopRun(site, self.position(),
                      self._trip_source(site, frame, top))
        run.code = frame.f_code
        run.global_kinds = global_kinds(frame.f_code, frame)
        run.links = links_held(frame.f_code, frame)
        if site.kind != 'comp' and loop_analysis.only_array_exits(
                frame.f_code, site.header):
            run.bound = iteration_bound(site, frame)
        run.snapshots.append(_locals_summary(frame))
        run.targets = site.targets
        if not top and frame.f_back is not None:  # a helper's loop
            run.caller = _call_site(frame.f_back)
            run.caller_top = frame.f_back.f_code is self.top_code
        run.iterable_pending = run.trip is None and \
            self.first_item is not None and \
            trip_counts.iterated_call(site) is not None
        return run

    def _iterable_computed(self, run, taken_at=None):
        """For a loop over a value its header computes (``for x in
        F.tanh(xs)``), at the first line of its body (of a comprehension,
        at the end of its first step, whose first node took the item:
        ``taken_at``): the iterable's nodes come before the loop, which
        starts at the node that took its item 0, and runs as many times
        as the value's first axis is long, where that is an argument's
        axis."""
        run.iterable_pending = False
        found = self.first_item()
        if taken_at is None:
            taken_at = self.position() - 1
        if found is None or found[1] is None or found[0] != taken_at or \
                found[0] < run.boundaries[0] or \
                found[2] != (run.site.filename, run.site.header):
            return  # (not the loop's own first item)
        run.boundaries[0] = found[4]
        run.trip = trip_counts.TripSource('dim', found[1], -found[3])

    def _start_comprehension(self, site, frame):
        """A comprehension gets its trip count from its iterable, read in
        the frame of the function it is written in, as a ``for``
        statement's does."""
        parent = frame.f_back
        found = loop_analysis.comprehension_and_parents(
            parent.f_code, site.header) if parent is not None else None
        if found is None:
            return LoopRun(site, self.position(), None)
        generator = found[0].generators[0]
        site = site._replace(iter_expr=generator.iter)  # see may_vary
        top = parent.f_code is self.top_code
        run = LoopRun(site, self.position(),
                      self._trip_source(site, parent, top))
        run.code = parent.f_code
        run.links = links_held(parent.f_code, parent)
        run.targets = tuple(n.id for n in ast.walk(generator.target)
                            if isinstance(n, ast.Name))
        if not top and parent.f_back is not None:  # a helper's list
            run.caller = _call_site(parent.f_back)
            run.caller_top = parent.f_back.f_code is self.top_code
        run.snapshots.append(_locals_summary(frame))
        run.iterable_pending = run.trip is None and \
            self.first_item is not None and \
            trip_counts.iterated_call(site) is not None
        return run

    def _trip_source(self, site, frame, top):
        """How the trip count of a loop starting in ``frame`` follows from
        the call: from an argument's size in any function (the same
        Variable or array passed on, or a size read from it), from an int
        argument only in the jitted function's own code (where its name
        is the argument's)."""
        trip = trip_counts.trip_source(site, frame, self.arguments)
        if trip is not None and trip.kind == 'static' and not top:
            return None
        return trip or self._filled_list_source(site, frame)

    def _filled_list_source(self, site, frame):
        """The trip source of a loop over a list (``for h in hs``,
        ``zip(hf, reversed(hb))``: its first; ``hs[1:]``: all but its
        first items) that a loop over an argument's axis filled, one item
        per step: that loop's, counting the items the list had before
        (``hs = [h0]``) and those skipped."""
        name, skipped = trip_counts.iterated_name(site)
        items = frame.f_locals.get(name) if name is not None else None
        if type(items) is not list:
            return None
        for run in reversed(self.runs):
            if run.trip is None or run.trip.kind != 'dim':
                continue
            before, length = run.grown.get(id(items), (0, None))
            if run.filled.get(id(items)) == len(items) or length == \
                    len(items) and run.trip.offset >= before:
                return run.trip._replace(
                    offset=run.trip.offset - before + skipped)
        return None

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
                if run.iterable_pending:  # ([f(x) for x in F.flip(xs)])
                    self._iterable_computed(run, run.boundaries[0])
                run.boundaries.append(self.position())  # a jump back
                if run.code is not None:
                    run.snapshots.append(_locals_summary(frame))
            run.previous_lasti = frame.f_lasti
            run.previous_line = frame.f_lineno
        elif event == 'return' and not _suspended(frame):
            del self._comps[id(frame)]
            self._close(run, 'done', result=arg)
        return self._on_comprehension_event

    def _close(self, run, how, frame=None, result=None):
        run.end = self.position()
        # Left right after passing the header: the loop ran out.
        run.exit = 'done' if how == 'done' or run.last_header else 'left'
        if run.exit == 'done' and run.trip is not None:
            for name, items in _filled_lists(run, frame, result):
                run.filled[id(items)] = len(items)
                run.filled_names[id(items)] = name
            for items, before in _grown_lists(run, frame):
                run.grown[id(items)] = (before, len(items))
            self._count_steps(run, frame)
        self.runs.append(run)

    def _count_steps(self, run, frame):
        """After a ``for`` loop over an argument's axis that ran out, the
        names counting its steps (``loop_analysis.step_counters``: ``n +=
        1``) hold their value before plus the trip count, as a size of
        that axis (``trip_length``), times their step, and its counter
        (``loop_analysis.counter_start``: ``i`` of ``enumerate``) its
        start plus the trip count less one: as ``len(xs)`` would, what
        the forward does with them is followed, and they are the same at
        any trip count (``run.counted``)."""
        if run.site.kind == 'comp' or frame is None or \
                self.trip_length is None or run.trip.kind != 'dim' or \
                not run.snapshots:
            return
        found = {}  # name: (its value now, step, start)
        for name, step in loop_analysis.step_counters(
                run.code, run.site.header).items():
            before = run.snapshots[0].get(name)
            start = _whole_number(before)
            if start is not None:
                found[name] = (before[1](start + step * run.n_iterations),
                               step, start)
        counter = loop_analysis.counter_start(run.code, run.site.header)
        if counter is not None and run.n_iterations:
            name, start = counter  # (it ends at start + n - 1)
            found[name] = (start + run.n_iterations - 1, 1, start - 1)
        counted = set()
        for name, (value, step, start) in found.items():
            now = frame.f_locals.get(name)
            trips = self.trip_length(run.trip, run.n_iterations, frame,
                                     type(value) is float) \
                if type(now) is type(value) and now == value else None
            if trips is not None and _rebound(frame, name,
                                              trips * step + start):
                counted.add(name)
        run.counted = frozenset(counted)

    def _close_all(self, frame_id, frame=None):
        for run in reversed(self._open.pop(frame_id, [])):
            self._close(run, 'left', frame)


def _whole_number(summary):
    """The int a local's summary (``_summary``) at a loop's start holds:
    an int's, or a float's that is a whole number (``steps = 0.``);
    else ``None``."""
    if summary is None or summary[0] != 'scalar' or \
            summary[1] not in (int, float):
        return None
    number = summary[1](summary[2])
    return int(number) if number == int(number) else None


def _rebound(frame, name, value):
    """Binds the local ``name`` of ``frame`` (a function's, being traced)
    to ``value`` at once (``frame.f_locals`` is a copy of the frame's
    locals, which any later read of it refreshes); ``False`` where this
    Python cannot."""
    to_fast = getattr(ctypes.pythonapi, 'PyFrame_LocalsToFast', None)
    if to_fast is None:
        return False
    frame.f_locals[name] = value
    to_fast(ctypes.py_object(frame), ctypes.c_int(0))
    return True


def _filled_lists(run, frame, result):
    """``(name, list)`` of the lists that ``run``, a loop that ran out,
    filled with one item per step: from empty, a comprehension's
    ``result`` (named ``None``), or those its body appends to; or made of
    as many ``None`` as it ran steps, those whose item at its counter it
    assigns (``ys[t] = h``); as ``frame`` holds them."""
    if run.site.kind == 'comp':
        found = [(None, result)]
    elif frame is None or not run.snapshots:
        found = []
    else:
        start = run.snapshots[0]
        found = [(name, frame.f_locals.get(name)) for name in
                 loop_analysis.appended_lists(run.code, run.site.header)
                 if start.get(name, ('',))[0] == 'list' and (
                     not start[name][2] or
                     _all_none(start[name][2], run.n_iterations))]
    return [(name, items) for name, items in found
            if type(items) is list and len(items) == run.n_iterations and
            not any(item is None for item in items)]


def _grown_lists(run, frame):
    """``(list, items before)`` of the lists that ``run``, a ``for`` loop
    that ran out, appended one item per step to (``hs = [h0]``, then
    ``hs.append(h)`` in the loop), as ``frame`` holds them."""
    if run.site.kind == 'comp' or frame is None or not run.snapshots:
        return []
    start, found = run.snapshots[0], []
    for name in loop_analysis.appended_lists(run.code, run.site.header):
        items = frame.f_locals.get(name)
        if type(items) is list and start.get(name, ('',))[0] == 'list' \
                and len(items) == len(start[name][2]) + run.n_iterations:
            found.append((items, len(start[name][2])))
    return found


def _all_none(summaries, n):
    """``n`` summaries of ``None`` (``[None] * n``)?"""
    return len(summaries) == n and all(
        s == ('scalar', type(None), 'None') for s in summaries)


_FUNCTIONS = (types.FunctionType, types.MethodType, types.BuiltinFunctionType,
              type, types.ModuleType)


def _locals_summary(frame):
    """What the Python state of a frame is at a loop header: scalars by
    value, arrays and Variables by the identity of their array (and small
    arrays by contents too), lists by length and items, dicts, sets and
    the attributes of other objects two levels deep (of kind ``'link'``
    for Chainer's links: ``self``, or a model passed in), and those of
    every link a link holds, down to :data:`LINK_LEVELS` links deep (a
    loop may call them: ``self.encoder.lstm(x)``, ``self.lstm.upward(x)``).
    """
    return dict((name, _summary(value, 2))
                for name, value in frame.f_locals.items())


#: How many links deep the summaries of a frame's state follow the links
#: a link holds.
LINK_LEVELS = 8


def _own_attributes(value):
    """``value.__dict__``, or ``None``: read as ``object`` reads it, not
    through a link's own lookup, which notes a read of the forward's
    while recording (``model_state.unread_numbers``)."""
    try:
        return object.__getattribute__(value, '__dict__')
    except (AttributeError, TypeError):
        return None


def _summary(value, depth, links=LINK_LEVELS):
    if isinstance(value, chainer.Variable):
        return ('array', id(value._data[0]))
    if isinstance(value, chainer.get_array_types()):
        small = isinstance(value, numpy.ndarray) and value.size <= 64
        return ('array', id(value)) + (  # the view does not read it as
            (value.view(numpy.ndarray).tobytes(),) if small else ())  # data
    if isinstance(value, (int, float)) and type(value) not in (
            bool, int, float):  # a proxy: its own repr notes a use
        return ('scalar', type(value), (float if isinstance(
            value, float) else int).__repr__(value))
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
    attributes = _own_attributes(value)
    if attributes is None:
        return ('object', id(value))
    if not isinstance(value, chainer.Link):
        return ('object', id(value), tuple(
            (k, _summary(v, depth - 1, links))
            for k, v in sorted(attributes.items())))
    return ('link', id(value), tuple(
        (k, _summary(v, max(depth, 1), links - 1)
         if isinstance(v, chainer.Link) and links > 0 else
         _summary(v, depth - 1, links))
        for k, v in sorted(attributes.items())))


def global_kinds(code, frame):
    """``{name: 'function' or 'link'}`` for the global names ``code``
    reads in ``frame`` (and those of its enclosing function's, and its
    own locals) that hold a function of user code (a helper
    ``step(model, x, h)``, or a closure ``def step(x, h):`` the forward
    defines), a link, or Chainer's ``Variable`` or one of its functions
    imported by name (``from chainer import Variable``, ``from
    chainer.functions import relu``): a loop body calls them as it calls
    the model's methods and links."""
    found = {}
    own = code.co_freevars + code.co_varnames + code.co_cellvars
    for name in code.co_names + own:
        value = frame.f_locals.get(name) if name in own \
            else frame.f_globals.get(name)
        if isinstance(value, chainer.Link):
            found[name] = 'link'
        elif isinstance(value, types.FunctionType) and \
                is_user_code(value.__code__) or _chainers_own(value):
            found[name] = 'function'
    return found


def _chainers_own(value):
    """``chainer.Variable``, or a function of ``chainer.functions``."""
    return value is chainer.Variable or \
        isinstance(value, types.FunctionType) and \
        value.__module__.startswith('chainer.functions.')


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


def may_vary(site, links=()):
    """Whether a loop's trip count may change between calls: false for a
    ``for`` over the model's own lists and counts (``for layer in
    self.layers``, ``range(model.n_layers)``: ``self``, or ``links``, the
    names holding a link) or over a tuple or list written out (``for t in
    (q, k, v)``)."""
    if site.iter_expr is None:
        return True
    if isinstance(site.iter_expr, (ast.Tuple, ast.List)) and not any(
            isinstance(e, ast.Starred) for e in site.iter_expr.elts):
        return False  # for t in (q, k, v)
    names = [n.id for n in ast.walk(site.iter_expr)
             if isinstance(n, ast.Name)]
    return not all(n in _ITERATION_BUILTINS or n in links for n in names)


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
        return UNBOUNDED if loop_analysis.branch_test(
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

#: The file name of a loop's header evaluated again to learn its trip
#: count: chainerjit's code, not the forward's (``traced.is_library_file``).
LOOP_BOUND = '<loop bound>'


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
        value = eval(compile(expression, LOOP_BOUND, 'eval'),
                     frame.f_globals, dict(frame.f_locals))
        return len(value) if isinstance(value, _SIZED) else None
    except Exception:
        return None


def _while_test(site, code):
    found = source.function_and_offset(code)
    if found is None:
        return None
    function, offset, _ = found
    for node in ast.walk(function):
        if isinstance(node, ast.While) and \
                node.test.lineno + offset == site.header:
            return node.test
    return None


def _call_site(frame):
    """``(code, line, instruction offset)`` of the call ``frame`` is in
    (``loop_analysis.caller_uses_whole``: which of two calls on a line)."""
    return frame.f_code, frame.f_lineno, frame.f_lasti
