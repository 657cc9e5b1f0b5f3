"""Compiling a call that missed the cache.

:func:`compile_call` reads top-down as the stages of the pipeline:
signature, recording (``frontend.trace``), the fallback decision, rolling
loops (``frontend.rolling``) and making their trip counts symbolic
(``frontend.symbolic``), the passes (``passes.run``), code generation
(``backend.codegen``), the self-check against eager Chainer, autodiff
(the training program) and the cache entry. Each stage is a function
below it.

The jitted function (``api.JitFunction``) hands the pipeline what it
needs as a :class:`Caller` and caches the entry it gets back.
"""

import collections
import functools
import gc
import logging
import time

import chainer
import numpy

from chainerjit import errors
from chainerjit import ops
from chainerjit import passes
from chainerjit.backend import codegen
from chainerjit.frontend import breaks
from chainerjit.frontend import guards
from chainerjit.frontend import joining
from chainerjit.frontend import lengths
from chainerjit.frontend import packing
from chainerjit.frontend import rolling
from chainerjit.frontend import scalars
from chainerjit.frontend import signature
from chainerjit.frontend import sorting
from chainerjit.frontend import symbolic
from chainerjit.frontend import trace
from chainerjit.frontend import trip_counts
from chainerjit.ops import structural
from chainerjit.passes import autodiff
from chainerjit.runtime import backends
from chainerjit.runtime import batch
from chainerjit.runtime import cache
from chainerjit.runtime import function
from chainerjit.runtime import ragged
from chainerjit.runtime import undo


logger = logging.getLogger('chainerjit')


class Caller(collections.namedtuple('Caller', (
        'fn', 'instance', 'name', 'check', 'lengths_unsound',
        'warn_fallback', 'warn_unrolled', 'explain_miss',
        'on_backprop_program', 'backend', 'providers', 'freeze',
        'warn_items', 'warn_batch', 'warn_varying', 'warn_sizes',
        'join_lists', 'warn_joins', 'written_by_whole'),
        defaults=('numpy', None, False, None, None, None, None, False,
                  None, frozenset()))):
    """What the pipeline needs from the jitted function it compiles for.

    Attributes:
        fn: the wrapped function (a method's function, unbound).
        instance: the model ``fn`` is bound to, or ``None``.
        name: the function's name in warnings and in the recording.
        check: whether to self-check each new program (``jit(check=)``).
        lengths_unsound: a symbolic length once gave another result than
            eagerly: trip counts stay in the key.
        warn_fallback: ``warn_fallback(error, loc, cut=None)`` warns, once,
            that the call runs eagerly (or around ``cut``, a graph break).
        warn_unrolled: ``warn_unrolled(error, loc)`` warns, once, that a
            loop stays unrolled.
        explain_miss: ``explain_miss(sig, key)`` says how the call differs
            from the cached entries; called before the call is recorded.
        on_backprop_program: called with no arguments once a program is
            compiled with backprop enabled.
        backend: what runs the inference program (``jit(backend=)``; see
            ``runtime.backends``); ``'numpy'`` if not given.
        providers: onnxruntime's execution providers (``jit(providers=)``).
        freeze: sessions own the parameters (``jit(freeze=)``).
        warn_items: ``warn_items(why)`` warns, once, that the lengths of
            the items of a list argument stay in the key
            (``runtime.ragged``).
        warn_batch: ``warn_batch(why, sizes)`` warns, once, that the
            batch size (``sizes``: the axes that changed, ``x.shape[0]``)
            stays in the key (``runtime.batch``).
        warn_varying: ``warn_varying(why)`` warns, once, that float or
            int arguments stay in the key (``frontend.scalars``).
        warn_sizes: ``warn_sizes(why)`` warns, once, that the sizes of an
            axis other than the batch stay in the key where the batch's
            size changes too (``runtime.batch.TwoAxes``).
        join_lists: whether a recording that reads a list argument whole
            (``frontend.joining``) is to say so, from the call after it.
        warn_joins: ``warn_joins(why)`` warns, once, that the function
            stopped joining lists.
        written_by_whole: for a piece of a forward cut at a graph break,
            the link attributes the whole forward assigns before reading
            them (``self.last = float(...)`` in the Python between the
            pieces), which no piece reads first either: not guarded.
    """

    __slots__ = ()


class Compiled(collections.namedtuple('Compiled', (
        'result', 'entry', 'miss_reason', 'unpack', 'joins',
        'single_unjoined', 'rejoin'), defaults=(None, False, False))):
    """What :func:`compile_call` gives back.

    Attributes:
        result: what the call returns (the recording ran it eagerly).
        entry: the new ``cache.Entry`` (compiled, or running eagerly with
            a ``fallback`` reason), or ``None`` when ``unpack`` is set.
        miss_reason: what :attr:`Caller.explain_miss` said.
        unpack: the paths of packed list arguments that the function
            records item by item from now on, or ``None``.
        joins: the ``joining.Join`` of the list arguments the function
            joins from now on (``()``: none, ever), or ``None``.
        single_unjoined: a joined call of lists of one item got no entry:
            the function records such calls item by item from now on,
            and joins the others still; ``'sizes'`` where the program
            could not leave its sizes open at that call's (a sentence of
            one word): only once an entry of joined calls in that mode
            (training or not) serves others.
        rejoin: a joined call whose items drew where the recording that
            joined them did not: the next call finds the joins again.
    """

    __slots__ = ()


def compile_call(caller, key, leaves, args, kwargs, packed=None,
                 batched=None, varying=None):
    """Records a call that missed the cache and builds its entry (see
    :func:`_compile_call`), without the cyclic garbage collector: the
    recording makes many objects that live until it ends, and collections
    among them took a tenth of the time of compiling a CRF tagger."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _compile_call(caller, key, leaves, args, kwargs, packed,
                             batched, varying)
    finally:
        if enabled:
            gc.enable()


def _compile_call(caller, key, leaves, args, kwargs, packed=None,
                  batched=None, varying=None):
    """Records a call that missed the cache and builds its entry.

    ``batched`` (a ``batch.Batched``): the call's batch size is to be left
    out of the key where the VM may run the program at any batch size
    (``batch.rows_batched``); the entry then serves every batch size.

    ``varying`` (paths of number arguments, see ``frontend.scalars``): the
    call is recorded with those arguments as inputs of the program, and
    gets an entry for all their values where the forward only computed
    with them; otherwise no entry (``caller.warn_varying`` says why).

    A call with packed lists (``packed`` is ``(paths, packed args, packed
    kwargs)``, see ``frontend.packing``) gets an entry only where packing
    cannot be seen (:func:`_packing_pays`); otherwise no entry, and the
    function is to record those lists item by item from the next call on
    (this call's recording already ran, and its result stands).

    A call with joined lists (``packed`` is a ``joining.Joined``) gets an
    entry where the recording reads each list whole and the VM's program
    takes any number of items (and width of a padded list); otherwise no
    entry, and the function stops joining lists. A recording of lists
    item by item that reads them whole gets no entry either, where
    ``caller.join_lists``: the function joins them from the next call on.

    Returns:
        Compiled: the call's result and its entry.
    """
    start = time.perf_counter()
    recorded_args, recorded_kwargs = (args, kwargs) if packed is None \
        else packed[1:]
    sig = call_signature(caller.fn, caller.instance, key, leaves,
                         recorded_args, recorded_kwargs)
    miss_reason = caller.explain_miss(sig, key)
    model_state = guards.link_state(caller.instance)  # before the call
    held = guards.plain_objects(caller.instance)
    py_guards = guards.python_guards(caller.fn, caller.instance)
    generators = guards.generator_states(py_guards)
    varying_names = None
    if varying is not None:
        varying = scalars.VaryingScalars(varying)
        varying_names = [signature.argument_name(
            caller.fn, caller.instance, path) for path in varying.paths]
    joined = isinstance(packed, joining.Joined)
    # (to run a joined call that gets no entry again: _as_eagerly)
    before = undo.CallState(caller.instance, [
        link for _, link in guards.free_links(py_guards)]) \
        if joined else None
    recording = _record(caller, sig, leaves, recorded_args, recorded_kwargs,
                        None if packed is None else (packed[0], args,
                                                     kwargs),
                        None if varying is None else (varying.paths,
                                                      varying_names),
                        guards.free_links(py_guards))
    # (a piece of a cut forward: what the whole assigns first, too)
    recording.written_first = frozenset(recording.written_first) | \
        caller.written_by_whole
    one_row_each = joined and _one_row_each(packed, args, kwargs)
    why_unjoined = joining.take_joins(
        recording, packed.joins, [name for name, _ in sig.items]) \
        if joined else None
    if why_unjoined is not None:
        _as_eagerly(caller, recording, before, args, kwargs)
        return _unjoined(caller, recording, miss_reason, why_unjoined,
                         packed)
    py_guards = guards.writes_replayed(
        py_guards, _arrays_written(recording.templates)) + \
        recording.outside_numbers
    for guard in py_guards:
        if isinstance(guard, guards.LinkGuard):
            guard.ignore(recording.free_unread.get(id(guard.expected), ()))
    fallback = _fallback_reason(caller, recording, py_guards, generators,
                                held)
    if fallback is not None and packed is not None:
        if joined:
            _as_eagerly(caller, recording, before, args, kwargs)
        return Compiled(recording.result, None, miss_reason,
                        None if joined else packed[0], () if joined else None)
    joins = _joins_found(recording, packed, args, kwargs, leaves) \
        if fallback is None and caller.join_lists else ()
    if joins:
        return Compiled(recording.result, None, miss_reason,
                        None if packed is None else packed[0], joins)
    if varying is not None and (fallback is not None or _why_fixed(
            caller, recording, varying_names) is not None):
        return Compiled(recording.result, None, miss_reason, None)
    if fallback is not None:
        entry = cache.Entry(
            key, sig, model_state, py_guards=py_guards,
            config_reads=guards.config_reads(recording.config_names),
            fallback=fallback)
        entry.escaped = recording.escape is not None
        entry.cut = recording.cut
        entry.ignore_state(recording.written_first, recording.unread_numbers)
    else:
        recording.length_uses += _size_uses_in_c(caller, recording, sig,
                                                 len(leaves))
        lengths, length_note, unrolled, kept = _roll_loops(
            caller, recording, sig, len(leaves))
        key, sig, symbols = _with_symbolic_lengths(key, sig, lengths)
        if varying is not None:  # their symbols come first
            key, sig, numbers = _with_varying(key, sig, varying,
                                              varying_names)
            symbols = numbers + symbols
        graph = passes.run(recording.graph)
        items, items_note = (None, None) if lengths is not None or \
            packed is not None else _items_of_any_length(
                caller, graph, sig, len(leaves), recording)
        if batched is not None and batched.seen:  # (trips take theirs)
            batched = batched.without_axes(batch.trip_axes(lengths))
        if joined:
            batched = batch.with_states_passed(batched, graph)
        if joined and batched is not None and one_row_each:
            batched = batched._replace(guessed=True)  # (may not open)
        if batched is not None:
            batched = batched.but_single_rows(key)
        rows, batch_note = (None, None) if \
            items is not None or batched is None or (
                varying is not None and lengths is not None) or \
            type(batched.size_of(key)) is not int \
            else _batch_of_any_size(caller, graph, sig, batched, recording,
                                    lengths is not None or key[1],
                                    batch.trip_axes(lengths))
        # (A packed call whose packing does not pay is recorded again.)
        if packed is None or joined:
            _warn_unrolled_loops(caller, unrolled, items, sig,
                                 packed if joined else None)
        sizes = items or rows  # the entry's VM program takes any sizes
        if rows is not None and not batch.records_open(rows, key):
            sizes = rows = None  # an axis too short to leave open
        if packed is None or joined:  # (else once the entry is kept)
            _warn_kept_lengths(caller, kept, rows)
        program = codegen.compile_graph(graph, arena=sizes is None)
        if sizes is not None:
            key, sig = sizes.generalize(key)[0], sizes.signature_of(sig)
        symbolic = batch.TripsAndBatch(lengths, rows) if lengths and rows \
            else scalars.SizesAndNumbers(lengths or sizes, varying) \
            if (lengths or sizes) and varying \
            else lengths or sizes or varying
        entry = _compiled_entry(key, sig, model_state, py_guards, recording,
                                graph, program, symbolic, symbols)
        entry.size_uses += _loop_uses(
            recording, getattr(caller.fn, '__code__', None),
            [name for name, _ in sig.items])
        entry.values_checked = not caller.check or not _holds_arrays(
            graph, recording.outputs)
        if not entry.values_checked:
            entry.unvaried = cache.values_digests(leaves)
        entry.reads_shapes = bool(recording.shapes_read)
        _warn_unguarded(caller, recording.graph, py_guards)
        entry.length_note, entry.items_note = length_note, items_note
        entry.batch_note = batch_note
        if varying is not None:  # (their sizes, numbers) pairs
            entry.verified_lengths = {symbolic.checked(None, symbols)}
        elif sizes is not None:
            entry.verified_lengths.add(sizes.checked_at(None))
        if caller.check:
            _self_check(caller, entry, leaves, recording, symbols)
        # onnxruntime's sessions have fixed sizes; 'auto' chooses later
        choosing = sizes is None and entry.program is not None
        deferred = choosing and backends.defers(caller.backend,
                                                caller.freeze)
        if choosing and not deferred:
            _choose_backend(caller, entry, leaves, recording, symbols)
        if key[1] and entry.program is not None:  # backprop enabled
            entry.training = _training_program(caller, graph, leaves,
                                               recording, sizes is None)
            caller.on_backprop_program()
            if entry.training is not None and choosing and not deferred:
                entry.training_note = backends.choose_training(
                    caller.backend, caller.providers, entry.training,
                    _recorded_inputs(graph, leaves, recording, symbols))
        if deferred:
            entry.deferred = backends.Deferred(
                [False] + ([True] if entry.training is not None else []))
    if joined:
        why_unjoined = _why_joins_fixed(entry, batched)
        if why_unjoined is not None and one_row_each:
            return Compiled(recording.result, None, miss_reason, None)
        if why_unjoined is not None:
            return _unjoined(caller, recording, miss_reason, why_unjoined,
                             packed, sized=entry.program is not None)
    elif packed is not None and not _packing_pays(entry, recording):
        return Compiled(recording.result, None, miss_reason, packed[0])
    elif packed is not None:
        _warn_kept_lengths(caller, kept, rows)
    entry.compile_seconds = time.perf_counter() - start
    return Compiled(recording.result, entry, miss_reason, None)


# --- signature and recording ------------------------------------------------

def call_signature(fn, instance, key, leaves, args, kwargs):
    """The readable ``signature.Signature`` of a call with call key
    ``key``, its arguments' names and the model's parameters with it."""
    bound = fn if instance is None else functools.partial(fn, instance)
    return signature.Signature.of_call(
        bound, args, kwargs, key, leaves, cache.model_param_items(instance))


def _record(caller, sig, leaves, args, kwargs, packed, varying=None,
            free_links=()):
    """Runs the call define-by-run and records it (``trace.record``);
    ``packed`` is ``(paths, args, kwargs)`` as called, before packing;
    ``varying``, ``(paths, names)`` of the varying number arguments;
    ``free_links``, the links it names outside its model."""
    input_names = [name for name, _ in sig.items[:len(leaves)]]
    return trace.record(caller.fn, caller.instance, args, kwargs, leaves,
                        caller.name, input_names, packed, varying,
                        free_links)


# --- number arguments that vary by call -------------------------------------

def _why_fixed(caller, recording, names):
    """Why the varying number arguments ``names`` must stay in the key (the
    uses that baked them into the recording, warned about), or
    ``None``."""
    uses = recording.scalar_uses + _formatted(caller, names)
    if not uses:
        return None
    why = 'the number argument%s %s stay%s in the cache key: %s' % (
        's' if len(names) > 1 else '', ', '.join(names),
        '' if len(names) > 1 else 's',
        '; '.join(sorted(set(use.describe() for use in uses))[:3]))
    caller.warn_varying(why)
    return why


def _formatted(caller, names):
    """The ``scalars.Use`` of the varying number arguments ``names`` that
    the forward's source formats with ``%`` (in C: no use noted)."""
    code = getattr(caller.fn, '__code__', None)
    if code is None:
        return []
    return [scalars.Use(name, 'formatted with %', (code.co_filename, line))
            for name, line in trip_counts.formatted_names(code)
            if name in names]


def _with_varying(key, sig, varying, names):
    """``(key, sig, symbols)``: the key and signature of an entry for
    every value of the varying number arguments (``names``), and their
    values."""
    general, values = varying.generalize(key)
    return general, sig.with_varying(
        names, [type(v).__name__ for v in values]), values


# --- the fallback decision --------------------------------------------------

def _graph_break(caller, recording):
    """The ``breaks.Cut`` of the forward at the statement where the
    recording found its escape, or ``None`` where it cannot be cut there
    (logged)."""
    if recording.escape_line is None:
        return None
    cut = breaks.cut(caller.fn, recording.escape_line,
                     caller.instance is not None)
    if isinstance(cut, str):
        logger.info('chainerjit: %s is not cut at line %d: %s', caller.name,
                    recording.escape_line, cut)
        return None
    cut.reason = recording.escape[0]
    return cut


def _fallback_reason(caller, recording, py_guards, generators,
                     held=()):
    """Why this recording cannot be compiled, or ``None``: link hooks on
    the model, a value read into Python (or a guarded Python value the
    call changed, or an attribute it assigned of a plain object the model
    holds, ``held``: ``guards.plain_objects``, which a program would not
    assign), or a branch on an array value in a forward with side
    effects. The last two warn (once)."""
    hooked = [path for path, link in _links(caller.instance)
              if guards.link_hooks(link)]
    if hooked:
        return 'link hooks on %s observe each call' % ', '.join(hooked)
    changed = _changed_by_the_call(py_guards, recording)
    assigned = guards.assigned_since(held)
    if assigned and recording.escape is None:  # (links' are replayed)
        recording.escape = ('assigning %s, an attribute of an object that '
                            'is not a link' % assigned[0], None)
    drawn = guards.drawn_from(generators)
    if drawn and recording.escape is None:
        recording.escape = ('drawing from the random generator %s'
                            % drawn[0], None)
    if changed and recording.escape is None:
        recording.escape = ('changing %s in place' % changed[0], None)
    if recording.escape is not None:
        what, loc = recording.escape
        recording.cut = _graph_break(caller, recording)
        caller.warn_fallback(errors.DataDependentValue(what), loc,
                             recording.cut)
        return '%s at %s' % (what, _format_loc(loc))
    guard = _first_guard(recording.graph.nodes)
    if guard is not None and not pure_but_guards(recording.graph.nodes):
        reason = ('a branch on an array value in a forward with random or '
                  'stateful operations')
        caller.warn_fallback(errors.DataDependentValue(reason), guard.loc)
        return '%s at %s' % (reason, _format_loc(guard.loc))
    return None


def _warn_unguarded(caller, graph, py_guards):
    """Warns, once per function, where the program reads a parameter
    outside the model that no guard follows (a link in a list the forward
    indexes, one reached by ``getattr`` or deeper than the guards read),
    and where the forward names an array too large to hash."""
    for label, array in guards.arrays_by_identity(py_guards)[:1]:
        errors.warn_once(
            (caller.name, 'unhashed'), errors.UnguardedWarning,
            'chainerjit: %s reads %s, an array of %.1f MB, which is compared '
            'by identity only (arrays of up to %d KB are hashed on each '
            'call): a change of its values in place reaches the kernels '
            'that read it, but not what the forward computed from it while '
            'recording, nor an onnxruntime session, which holds it as a '
            'constant; call cache_clear() after changing it in place. See '
            'docs/errors.md#UnguardedWarning'
            % (caller.name, label, array.nbytes / 1e6,
               guards.HASHED_BYTES >> 10))
    reads = [v for v in graph.params if v.data[0] == 'object' and
             isinstance(v.data[1], chainer.Parameter)]
    unguarded = guards.unguarded([v.data[1] for v in reads], py_guards)
    if not unguarded:
        return
    value = next(v for v in reads if v.data[1] is unguarded[0])
    loc = next((n.loc for n in graph.nodes if value in n.inputs and n.loc),
               None)
    errors.warn_once(
        (caller.name, 'unguarded'), errors.UnguardedWarning,
        'chainerjit: %s reads the parameter %s %s (%d parameters in all) '
        'of a link it reaches outside its model by a way no guard follows '
        '(a list or dict of links, getattr, a helper deeper than the guards '
        'read), at %s: an update of its values is seen, but a new '
        'parameter or link put in its place is not; call cache_clear() '
        'after replacing one. See docs/errors.md#UnguardedWarning'
        % (caller.name, value.name, tuple(value.shape), len(unguarded),
           _format_loc(loc)))


def _arrays_written(templates):
    """The ids of the arrays that the Chainer functions of stateful nodes
    hold (``templates``: the recording's, by node), which their programs
    write as they did: batch normalization's running averages."""
    return frozenset(
        id(array) for node, template in templates.items()
        if not node.pure and isinstance(template, chainer.FunctionNode)
        for _, _, array in ops.array_attributes(template))


def _links(instance):
    if not isinstance(instance, chainer.Link):
        return []
    return [(path or '/', link) for path, link in instance.namedlinks()]


def _changed_by_the_call(py_guards, recording):
    """Labels of guarded Python values the recorded call itself changed
    (an append to a default list, a closed-over dict); attributes the
    forward assigns are replayed instead."""
    assigned = set('self.%s' % name for kind, path, name, _, _ in
                   recording.effects if kind == 'setattr' and path == ())
    return [g.label for g in py_guards
            if not g.holds() and g.label not in assigned]


def _format_loc(loc):
    if loc is None:
        return 'an unknown line'
    return '%s:%d' % loc


def _first_guard(nodes):
    return next((node for node in nodes if structural.is_guard(node)), None)


def pure_but_guards(nodes):
    """No node has side effects, apart from guards (which only check)."""
    return structural.side_effect_free(nodes, guards=True)


def _size_uses_in_c(caller, recording, sig, n_leaves):
    """The sizes of the arguments the forward's own source puts into
    float arithmetic (``1.0 / x.shape[0]``: the float computes it, unseen
    by ``lengths.Length``), or index a list with (in C too), but those on
    lines that did not run, as uses that keep them in the key."""
    code = getattr(caller.fn, '__code__', None)
    if code is None:
        return []
    read = recording.size_read_lines
    return symbolic.size_uses_in_c(
        code, [name for name, _ in sig.items[:n_leaves]], recording.graph,
        recording.size_operations, read,
        None if read is None else read | _lines_of(recording.graph.nodes),
        recording.lines_run)


def _lines_of(nodes):
    """The ``(filename, line)`` that recorded ``nodes`` (and their loops'
    bodies' nodes)."""
    found = set()
    for node in nodes:
        found.add(node.loc)
        if node.region is not None:
            found |= _lines_of(node.region.body.nodes)
    return found


# --- loops ------------------------------------------------------------------

def _roll_loops(caller, recording, sig, n_leaves):
    """Rolls the recorded loops into regions and makes trip counts
    symbolic where sound. Returns ``(the entry's symbolic.Symbolic or
    None, why a length stays in the key or None, the loops left unrolled,
    rolling.Unrolled, and the symbolic.Concrete of each length kept in
    the key, to warn of: _warn_kept_lengths)``."""
    for code in recording.no_source:
        caller.warn_unrolled(errors.UnrolledLoop(
            'a loop in %s, whose source cannot be read (a lambda, exec '
            'or a plain REPL), is unrolled: each trip count is a cache '
            'entry of its own' % code.co_name),
            (code.co_filename, code.co_firstlineno))
    rolled, unrolled = rolling.roll_loops(recording.graph, recording)
    if not rolled or caller.lengths_unsound:
        return None, None, unrolled, []
    if not structural.undoable(recording.graph.nodes, loops=True):
        # A new length is checked by running the program and eagerly,
        # NumPy's generator and batch normalization's averages (outside
        # loops) put back in between (api._verify_length).
        varying = [run for run in rolled.values() if run.trip is not None]
        if varying:
            caller.warn_unrolled(errors.UnrolledLoop(
                'this loop keeps its trip count in the cache key (each new '
                'length compiles again): %s' % _side_effects(
                    recording.graph)),
                varying[0].loc)
        return None, None, unrolled, []
    input_names = [name for name, _ in sig.items[:n_leaves]]
    code = getattr(caller.fn, '__code__', None)
    if code is None:
        return None, None, unrolled, []
    found, kept = symbolic.symbolize(
        recording.graph, rolled, input_names,
        trip_counts.length_only_names(code), recording)
    concrete = kept + ([found] if isinstance(found, symbolic.Concrete)
                       else [])
    note = '; '.join(_with_line(c.reason, c.loc) for c in concrete) or None
    return None if isinstance(found, symbolic.Concrete) else found, note, \
        unrolled, concrete


def _warn_kept_lengths(caller, kept, sizes):
    """Warns once for each loop that keeps its trip count in the key
    (``kept``, ``symbolic.Concrete``), but where that length is the size
    of an axis the entry's program takes at any size (``sizes``, of
    ``runtime.batch``), or tied to no argument's size where the program
    takes some at any size: then no length compiles again."""
    open_axes = batch.open_axes(sizes)
    for concrete in kept:
        if not (open_axes and concrete.origins is not None and
                concrete.origins <= open_axes):
            caller.warn_unrolled(errors.UnrolledLoop(
                'this loop keeps its trip count in the cache key (each '
                'new length compiles again): %s' % concrete.reason),
                concrete.loc)


def _warn_unrolled_loops(caller, unrolled, items, sig, joined=None):
    """Warns once for each loop left unrolled whose trip count may vary,
    but for a loop over the items of a list whose lengths the entry takes
    at any value (``items``): its count is the number of items, which is
    in the key as the list's structure is; or over a list joined
    (``joined``, a ``joining.Joined``), or all its items but the last
    (``[len(x) for x in xs[:-1]]``), which no node of it read."""
    counts = set() if items is None else set(
        len(leaves) for leaves in ragged.items_by_list(
            sig, items.leaves).values())
    if joined is not None:
        counts.update(n - d for n in joining.counts(joined) for d in (0, 1))
    for loop in unrolled:
        if loop.varies and loop.iterations not in counts:
            caller.warn_unrolled(errors.UnrolledLoop(
                'this loop is unrolled, with its trip count in the cache '
                'key: %s' % loop.reason), loop.loc)


def _items_of_any_length(caller, graph, sig, n_leaves, recording):
    """``(ragged.Ragged or None, why the lengths of a list argument's
    items stay in the key or None)``: the items of list arguments whose
    lengths the program may take at any value (``runtime.ragged``); warns
    once where they cannot."""
    lists = ragged.ragged_items(sig, n_leaves)
    if not lists or caller.lengths_unsound or \
            caller.backend == 'onnxruntime':
        return None, None
    leaves = sorted(leaf for items in lists.values() for leaf in items)
    names = [name for name, _ in sig.items[:n_leaves]]
    ties = ragged.tied_items(sig, lists)
    tied = dict(ties)
    why = ragged.why_fixed(graph, dict(
        (leaf, ops.Rows.of_item(tied.get(leaf, leaf),
                                sig.items[leaf][1].shape[0]))
        for leaf in leaves), recording.length_uses, names)
    if why is None and not structural.undoable(graph.nodes):
        # Other lengths are checked by running the program and eagerly,
        # NumPy's generator restored in between.
        why = _loop_in(graph) or _side_effects(graph)
    if why is None:
        return ragged.Ragged(tuple(leaves), tuple(
            sig.items[leaf][1].shape[0] for leaf in leaves), ties,
            bool(recording.shapes_read)), None
    if caller.warn_items is not None:
        caller.warn_items('the lengths of the items of %s stay in the cache '
                          'key (each new combination compiles again): %s' %
                          (', '.join(sorted(lists)), why))
    return None, why


def _loop_in(graph):
    """Why items of any length are not taken by a program whose only
    node a check could not undo is a loop of pure steps; else ``None``."""
    if not structural.undoable(graph.nodes, loops=True):
        return None
    loop = next(node for node in graph.nodes if node.region is not None)
    return 'the program runs a loop%s, and only programs without loops ' \
        'take items of any length (a trip count may follow the lengths)' \
        % ragged.at(loop.loc)


def _side_effects(graph):
    """Why sizes stay in the key of a program that a check at another size
    could not undo (``structural.not_undone``), naming the node."""
    node = structural.not_undone(graph.nodes, loops=True)
    where = '' if node is None else ' (%s%s)' % (node.op, ragged.at(
        node.loc))
    if node is not None and node.generic:
        return '%s%s runs as Chainer\'s own function (chainerjit has no ' \
            'kernel of its own for it), which might keep a state or draw ' \
            'random numbers that a check at another size could not undo' % (
                node.op, ragged.at(node.loc))
    return 'the program has side effects%s: a state update other than ' \
        'batch normalization\'s, or a random draw other than from ' \
        'NumPy\'s global generator' % where


_ONE_SIZE_PER_SESSION = (
    "with backend='onnxruntime' its sessions are built for one batch size "
    "(the default backend, 'auto', runs the VM at every batch size)")


def _batch_of_any_size(caller, graph, sig, batched, recording,
                       not_widened, open_already=frozenset()):
    """``(batch.RowsBatched or None, why the batch size stays in the key
    or None)``: whether the VM may run the program at any batch size
    (``batch.rows_batched``); warns once where it cannot. With
    ``backend='onnxruntime'``, ``runtime.batch`` widens an inference
    session to every batch size instead, where the batch is axis 0; the
    sessions of other programs (training ones, and those with symbolic
    trip counts: ``not_widened``) keep it, which this warns of. A program
    onnxruntime cannot run (``backends.why_not``) is the VM's."""
    rows, why = None, None
    names = [name for name, _ in sig.items]
    if caller.backend == 'onnxruntime' and \
            backends.why_not(graph, ()) is None:  # (else the VM runs it)
        why = _ONE_SIZE_PER_SESSION if not_widened or any(
            axis for _, axis in batched.batch_axes()) else None
    elif not structural.undoable(graph.nodes, loops=True):
        why = _side_effects(graph)
    else:  # (axes seen at several sizes: whichever may be the batch)
        for tried in batched.each_first() if batched.seen else [batched]:
            rows, why_not = _rows_open(caller, graph, sig, tried, recording,
                                       names, open_already)
            if rows is not None:
                why = None
                break
            why = why or why_not  # (the first group's)
    if why is not None and caller.warn_batch is not None:
        changed = batch.axes_named(batched.batch_axes(), names, ' and ')
        caller.warn_batch(why, changed)
    return rows, why


def _rows_open(caller, graph, sig, batched, recording, names,
               open_already):
    """``_batch_of_any_size``'s ``(rows, why)`` of the VM's program.
    Other sizes are checked by running the program and eagerly."""
    made_again = batch.remake_rows(graph, recording.made_rows, batched)
    uses = [use for use in recording.length_uses if use not in made_again]
    kept = batch.kept_axes(batched)
    rows, why = batch.rows_batched(
        graph, batched, _recorded_size(sig, batched), uses, names,
        batch.free_symbol(kept))
    for other in kept if rows is not None else ():
        if other.leaves and not set(other.batch_axes()) <= open_already:
            rows = _with_other_axis(caller, graph, sig, rows, other, uses,
                                    names, batched.guessed)
    return rows, why


def _recorded_size(sig, batched):
    """The size of the axes of ``batched`` in the recorded call."""
    leaf, axis = batched.batch_axes()[0]
    return sig.items[leaf][1].shape[axis]


def _with_other_axis(caller, graph, sig, rows, kept, uses, names,
                     guessed=False):
    """``batch.TwoAxes`` of the ``rows`` of one axis (or of those axes)
    and those of the axis ``kept`` (``batch.width_sibling``; a width of
    joined lists; with ``guessed``, one ``jit(dynamic=True)`` asks for),
    where the VM may run the program at any sizes of all; else ``rows``
    (``kept`` keeps its size, which this warns of, unless guessed)."""
    other, why = batch.rows_batched(graph, kept, _recorded_size(sig, kept),
                                    uses, names, kept.symbol)
    batched = rows.batch if isinstance(rows, batch.TwoAxes) else rows
    if other is None:
        short = _recorded_size(sig, kept) <= batch.TOO_SHORT  # (may open)
        if caller.warn_sizes is not None and not guessed and not short:
            caller.warn_sizes(
                '%s and %s changed in one call, and the program takes any '
                'size of the first but not of the second: %s' % (
                    batch.axes_named(batched.batch_axes(), names),
                    batch.axes_named(kept.batch_axes(), names), why))
        return rows
    if isinstance(rows, batch.TwoAxes):  # a further width
        return rows.with_width(other)
    return batch.TwoAxes(*sorted((rows, other),
                                 key=lambda r: r.symbol != batch.BATCH))


def _checks(symbolic_sizes, symbols):
    """What the recorded call at trip counts ``symbols`` verified: each
    length's counts, for trip counts of several lengths
    (``symbolic.Symbolic.checks``)."""
    trips = getattr(symbolic_sizes, 'trips', symbolic_sizes)
    if isinstance(trips, symbolic.Symbolic) and trips.more:
        return trips.checks(symbols)
    return [tuple(symbols)]


def _with_line(reason, loc):
    """``reason``, naming the line ``loc`` unless it does already."""
    if loc is None:
        return reason
    where = errors.short_location(loc)
    return reason if where in reason else '%s (%s)' % (reason, where)


def _with_symbolic_lengths(key, sig, lengths):
    """``(key, sig, symbols)``: the key and signature with the trip counts
    that ``lengths`` (a ``symbolic.Symbolic`` or ``None``) made symbolic
    left open, and this call's values of them."""
    if lengths is None:
        return key, sig, []
    key, symbols = lengths.generalize(key)
    for part in lengths.parts():
        sig = sig.with_symbols(part.wildcards, part.kind, part.where,
                               part.symbol)
    return key, sig, symbols


# --- the entry, checked -----------------------------------------------------

def _compiled_entry(key, sig, model_state, py_guards, recording, graph,
                    program, lengths, symbols):
    """The cache entry of a compiled ``program`` of ``graph`` (the
    recording after the passes)."""
    param_arrays = [recording.param_arrays[v] for v in graph.params]
    entry = cache.Entry(
        key, sig, model_state, graph, program, recording.outputs,
        recording.effects, param_arrays, py_guards=py_guards,
        config_reads=guards.config_reads(recording.config_names))
    entry.symbolic = lengths
    if symbols:
        entry.verified_lengths.update(_checks(lengths, symbols))
    entry.size_uses = list(recording.length_uses)
    entry.ignore_state(recording.written_first, recording.unread_numbers)
    return entry


def _holds_arrays(graph, outputs):
    """Does ``graph`` (its loops' bodies too), or the result
    (``outputs``, ``(structure, leaf specs)``), hold an array constant of
    several values (not one filled with one number, a first state of
    zeros, unless NumPy made it out of the recording's sight:
    ``ir.Value.held``)? One computed from the arguments out of the
    recording's sight would be the first call's; the entry's first hits
    are checked (``api``)."""
    arrays = [(v.data, v.held) for v in graph.all_consts()] + [
        (spec[1], False) for spec in (outputs[1] if outputs else ())
        if spec[0] == 'const']
    return any(getattr(a, 'size', 1) > 1 and (held or not _filled(a))
               for a, held in arrays)


def _filled(array):
    """Is ``array`` one number throughout?"""
    array = chainer.backend.CpuDevice().send(array)
    return bool((array == array.flat[0]).all()) or \
        array.dtype.kind in 'fc' and bool(numpy.isnan(array).all())


def _loop_uses(recording, code, names):
    """A ``lengths.Use`` of each argument's axis a loop of the recording
    ran over (``for x in xs``, a time-major batch's steps), or may have (a
    loop over an iterable naming array arguments, ``enumerate(zip(xs,
    ms))``, that ran as many times as their first axes have rows, or over
    a range of a first axis's size, ``range(0, len(xs), 2)``): a program
    serving other sizes of it must have rolled that loop (an unrolled one
    runs its recorded steps), which ``batch.decision_on_batch`` asks.
    ``names`` are the leaves'."""
    found = []
    for run in recording.loops:
        if run.trip is not None and run.trip.kind == 'dim':
            found.append(lengths.Use((run.trip.where,), 'counted by a loop',
                                     run.loc))
            continue
        read = set() if run.trip is not None or code is None else \
            trip_counts.parameters_read(run.site.iter_expr, code)
        counted = trip_counts.reads_first_size(run.site.iter_expr)
        found += [lengths.Use(((leaf, 0),), 'maybe counted by a loop',
                              run.loc)
                  for leaf, value in enumerate(recording.graph.inputs)
                  if names[leaf] in read and value.shape and (
                      counted or value.shape[0] == run.n_iterations)]
    return found


def _self_check(caller, entry, leaves, recording, symbols):
    """Runs a new program on the recorded inputs and parameters and
    compares with the eager result; on a difference the entry runs
    eagerly from now on. Generic nodes, which may draw random numbers
    or update state, return what they returned while recording."""
    check = codegen.compile_graph(entry.graph, recording.generic_outputs)
    try:
        outs = check.run(_recorded_inputs(entry.graph, leaves, recording,
                                          symbols))
        result = entry.build_result(outs, leaves, caller.instance)
        problem = compare_results(recording.result, result)
    except errors.VMError as e:
        problem = str(e)
    if problem:
        entry.fallback = 'compiled result differs from eager: %s' % (
            problem)
        entry.program = None
        caller.warn_fallback(errors.CompiledMismatch(problem), None)


def _recorded_inputs(graph, leaves, recording, symbols):
    """The inputs a program of ``graph`` ran on while recording:
    arguments, parameters, symbols."""
    return [signature.leaf_array(leaf) for leaf in leaves] + \
        [recording.param_arrays[v] for v in graph.params] + list(symbols)


def _choose_backend(caller, entry, leaves, recording, symbols):
    """Keeps the VM's program or takes onnxruntime's for the entry, as
    ``caller.backend`` says (``runtime.backends``), measured on the
    recorded inputs and checked against the eager result."""
    inputs = _recorded_inputs(entry.graph, leaves, recording, symbols)

    def problem_of(program):
        problem = compare_results(recording.result, entry.build_result(
            program.run(inputs), leaves, caller.instance))
        return problem and '%s (against eager)' % problem
    backends.choose(caller.backend, caller.providers, entry, inputs,
                    problem_of, caller.freeze)


def _close_enough(a, b):
    """The self-check's tolerance for a NumPy float scalar result."""
    return numpy.allclose(a, b, rtol=1e-4, atol=1e-5 * max(
        abs(complex(a)), abs(complex(b)), 1.0))


def compare_results(expected, actual):
    """Returns ``None`` if two results match, else what differs."""
    exp_leaves, act_leaves = [], []
    try:
        exp_structure = signature.flatten(expected, exp_leaves)
        act_structure = signature.flatten(actual, act_leaves)
    except errors.UnsupportedArgument as e:
        return str(e)
    if not signature.same_structure(exp_structure, act_structure,
                                    _close_enough):
        return 'the result has another structure'
    for i, (e, a) in enumerate(zip(exp_leaves, act_leaves)):
        e, a = signature.leaf_array(e), signature.leaf_array(a)
        if type(e) is not type(a) or e.shape != a.shape or \
                e.dtype != a.dtype:
            return 'output %d: %s %s %s vs eager %s %s %s' % (
                i, type(a).__name__, a.shape, a.dtype,
                type(e).__name__, e.shape, e.dtype)
        # On the host: CuPy would compile kernels for these checks.
        e, a = (chainer.backend.CpuDevice().send(x) for x in (e, a))
        if not backends.arrays_close(a, e):
            return 'output %d: values differ' % i
    return None


def gradients_differ(expected, actual, inputs):
    """Returns ``None`` if the gradients of two results (eager's and a
    training program's, alike per :func:`compare_results`) with respect
    to the Variables ``inputs`` match, for one random gradient of each
    float output (the same for both), else what differs. Neither result's
    graph is changed: ``chainer.grad`` sets no ``grad``."""
    exp_leaves, act_leaves = [], []
    signature.flatten(expected, exp_leaves)
    signature.flatten(actual, act_leaves)
    # (an output eager's graph reaches, the program's perhaps not: its
    # gradients are then none)
    pairs = [(e, a) for e, a in zip(exp_leaves, act_leaves)
             if isinstance(e, chainer.Variable) and
             isinstance(a, chainer.Variable) and e.dtype.kind == 'f' and
             e.creator is not None]
    if not pairs or not inputs:
        return None
    rng = numpy.random.RandomState(0)
    gys = [chainer.backend.get_device_from_array(e.array).send(
        rng.standard_normal(e.shape).astype(e.dtype)) for e, _ in pairs]
    # (each its own copy: Chainer's F.hinge divides its gradient in place)
    found = [chainer.grad([e for e, _ in pairs], inputs,
                          [chainer.Variable(gy.copy()) for gy in gys])]
    try:
        found.append(chainer.grad([a for _, a in pairs], inputs,
                                  [chainer.Variable(gy) for gy in gys]))
    except errors.VMError as error:  # where eager's gradient did not
        return 'the gradient raised %s' % str(error).splitlines()[0]
    expected = [None if e is None else _on_host(e) for e in found[0]]
    # Each within the tolerance of the largest of all: a gradient through
    # a batch normalization in training sums terms that cancel, over
    # every row and pixel, in another order than eager's (a bias's before
    # it is zero but for rounding), as large as the gradients around it.
    scale = max([backends.largest(e) for e in expected if e is not None
                 and e.dtype.kind in 'fc'] or [1.0])
    for i, (e, a) in enumerate(zip(expected, found[1])):
        if (e is None) != (a is None):
            return 'gradient %d: %s' % (i, 'none' if a is None else
                                        'none in eager mode')
        if e is None:
            continue
        a = _on_host(a)
        if e.shape != a.shape or not backends.arrays_close(a, e,
                                                           scale=scale):
            return 'gradient %d: values differ' % i
    return None


def _on_host(variable):
    return chainer.backend.CpuDevice().send(variable.array)


# --- autodiff ---------------------------------------------------------------

def _training_program(caller, graph, leaves, recording, arena=True):
    """The training program for gradients of the argument Variables
    that require grad and of the model's Variables, or ``None`` (with a
    warning) if an op on the way has no gradient rule. ``arena``: as
    ``codegen.compile_graph``'s."""
    wrt = [v for v, leaf in zip(graph.inputs, leaves)
           if isinstance(leaf, chainer.Variable) and leaf.requires_grad
           and v.dtype.kind == 'f']
    wrt += [v for v in graph.params if v.dtype.kind == 'f' and
            isinstance(recording.param_owners[v], chainer.Variable)]
    if not wrt:
        return None
    try:
        return function.TrainingProgram(autodiff.differentiate(graph, wrt),
                                        arena)
    except errors.NotDifferentiable as e:
        caller.warn_fallback(e, e.loc)
        return None


# --- packed lists -----------------------------------------------------------

def _packing_pays(entry, recording):
    """Packed lists are kept where the lengths became symbolic, every row
    is read by an op that passes gradients (not only returned, or read as
    an array), and no loop may stop early: then each row gets a gradient
    exactly where eager mode gives its item one (see
    ``chainerjit.frontend.packing``)."""
    return entry.symbolic is not None and entry.program is not None and \
        recording.rows_read and not any(
            node.region is not None and node.region.counts
            for node in entry.graph.nodes)


# --- joined lists -----------------------------------------------------------

def _as_eagerly(caller, recording, before, args, kwargs):
    """Makes the result of a joined call's ``recording`` that gets no
    entry eager's: where it drew random numbers for the rows of all the
    items at once, which need not be eager's draws one item after another
    (a dropout ratio of each item's own), or where a gradient flows from
    it (through functions the recording applied to the rows of all the
    items, where the forward applied them to some alone), the call runs
    again eagerly from the state before it (``before``,
    ``undo.CallState``)."""
    if before is None or not (before.drew() or
                              _on_a_graph(recording.result)):
        return
    before.restore()
    recording.result = caller.fn(*args, **kwargs) if caller.instance is None \
        else caller.fn(caller.instance, *args, **kwargs)


def _on_a_graph(result):
    """Does ``result`` (a forward's, in lists, tuples and dicts) hold a
    Variable a gradient flows from?"""
    if isinstance(result, chainer.Variable):
        return result.creator_node is not None
    if type(result) is dict:
        result = list(result.values())
    return isinstance(result, (list, tuple)) and any(map(_on_a_graph,
                                                         result))


def _unjoined(caller, recording, miss_reason, why, joined, sized=False):
    """What a joined call (``joined``) that gets no entry gives back: the
    function records its lists item by item from now on, which this warns
    of; calls of lists of one item only, where ``joined`` is one (a
    sentence framed or cut at its ends alone; ``sized``: its program
    compiled, but at sizes too small to leave open)."""
    if why in joining.UNSEEN:
        return Compiled(recording.result, None, miss_reason, None, None,
                        rejoin=True)
    if joining.counts(joined) == set([1]):
        return Compiled(recording.result, None, miss_reason, None, None,
                        'sizes' if sized else True)
    if caller.warn_joins is not None:
        caller.warn_joins('the number of items of list arguments stays in '
                          'the cache key (each new number compiles again): '
                          '%s' % why)
    return Compiled(recording.result, None, miss_reason, None, ())


def _joins_found(recording, packed, args, kwargs, leaves):
    """The ``joining.Join`` of the list arguments of a recording made item
    by item (or packed: ``packed``) that the forward read whole, or
    ``()``."""
    lists, start = [], 0
    paths = () if packed is None else packed[0]
    found = joining.list_arguments(args, kwargs)
    for path, items in found:
        if path in paths:  # its rows, taken from the stacked array
            nodes = recording.row_nodes[start:start + len(items)]
            start += len(items)
            stacked = packing.holder(packed[1], packed[2], path)[path[1]]
            lists.append((path, [node.outputs[0] for node in nodes], items,
                          [i for i, leaf in enumerate(leaves)
                           if leaf is stacked]))
            continue
        at = [next((i for i, leaf in enumerate(leaves) if leaf is item),
                   None) for item in items]
        if None not in at:
            lists.append((path, [recording.graph.inputs[i] for i in at],
                          items, at))
    lists, orders = sorting.sorted_lists(lists, recording.sorts) or \
        (None, None)
    if lists is None:
        return ()
    uses = [use for use in recording.length_uses
            if use.what not in sorting.SORTS]
    joins = joining.found_joins(recording.graph, lists,
                                recording.length_reads, recording.shapes_read,
                                uses, recording.item_splits,
                                recording.length_totals, recording.droppable,
                                recording.templates, orders)
    keys = set(order[0] for order in orders.values())
    if _left_alike(found, joins, args, kwargs) or any(
            j.kind != 'segments' for j in joins if j.path in keys):
        return ()  # (a joined recording reads the lengths of segments)
    return joins


def _left_alike(found, joins, args, kwargs):
    """Is a list argument that ``joins`` (of lists of arrays ``found``,
    ``(path, items)``) leave item by item as long as those they join?
    Its count in the key would be theirs. One of another count (an
    N-step link's states passed as a tuple, ``(hx, cx)``) keeps only its
    own."""
    joined = [items for path, items in found
              if any(j.path == path for j in joins)]
    counts = set(len(items) for items in joined)
    return not joins or any(
        len(items) in counts for items in joining.lists_of_arrays(
            args, kwargs) if not any(items is other for other in joined))


def _one_row_each(joined, args, kwargs):
    """Has every item of the lists ``joined`` (a ``joining.Joined``) one
    row at most (sentences of one word)? Their rows are then as many as
    the items, which a recording cannot tell apart: its program may keep
    both, and the lists stay joined for the next call to open them."""
    return all(len(item) <= 1 for j in joined.joins
               for item in packing.argument_at(args, kwargs, j.path))


def _why_joins_fixed(entry, batched):
    """Why the entry of a joined call does not take the number of items
    (or the width of a padded list) at any size, the axes ``batched``
    (``batch.of_joined``) asked it to, or ``None``."""
    if entry.program is None:
        return entry.fallback
    shut = batch.open_axes(batched) - batch.open_axes(entry.symbolic) - \
        batch.trip_axes(entry.symbolic)
    if not shut or batch.too_short_to_open(entry.key, shut):
        return None
    return entry.batch_note or 'the program takes them at their recorded ' \
        'sizes only'
