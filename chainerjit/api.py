"""The user-facing entry point, :func:`jit`."""

import collections
import functools
import logging
import os
import time
import weakref

import chainer
import numpy

from chainerjit.runtime import _calls
from chainerjit.passes import autodiff
from chainerjit.runtime import cache as cache_module
from chainerjit.backend import codegen
from chainerjit.frontend import control
from chainerjit import errors
from chainerjit import fastpaths
from chainerjit.runtime import function
from chainerjit.frontend import guards
from chainerjit.fastpaths import optimizers
from chainerjit.frontend import packing
from chainerjit import passes
from chainerjit.frontend import rolling
from chainerjit.frontend import symbolic
from chainerjit.frontend import signature
from chainerjit.frontend import trace


logger = logging.getLogger('chainerjit')
if os.environ.get('CHAINERJIT_LOG'):
    logger.addHandler(logging.StreamHandler())
    logger.setLevel(logging.INFO)


def jit(fn=None, maxsize=64, check=True, recompile_limit=8):
    """Compiles a Chainer forward on its first call for each input
    signature.

    Use it on a method in a Chain's class body, on a bound method or on a
    plain function of Variables and arrays::

        class MLP(chainer.Chain):
            @chainerjit.jit
            def forward(self, x):
                return self.l2(F.relu(self.l1(x)))

        model.forward = chainerjit.jit(model.forward)
        f = chainerjit.jit(maxsize=8)(my_function)

    Args:
        fn: the function or bound method.
        maxsize: how many signatures to keep compiled (LRU); ``None`` for
            no bound.
        check: run each new program once on the inputs it was recorded
            with and compare with the eager result (on by default).
        recompile_limit: after this many misses, warn (once) naming what
            keeps changing between calls.

    Returns:
        JitFunction: calls like ``fn`` and has ``cache_info()``,
        ``cache_clear()``, ``cache_entries()`` and ``explain(*args)``.
    """
    fastpaths.install()
    options = dict(maxsize=maxsize, check=check,
                   recompile_limit=recompile_limit)
    if fn is None:
        return lambda f: jit(f, **options)
    if isinstance(fn, chainer.Link):
        return JitFunction(type(fn).forward, lambda: fn, options)
    if hasattr(fn, '__self__') and hasattr(fn, '__func__'):
        instance = fn.__self__
        return JitFunction(fn.__func__, lambda: instance, options)
    return JitFunction(fn, None, options)


class JitFunction(_calls.CachedCall):
    """A jitted function, or a jitted method bound to one model.

    Used as a method in a class body it is a descriptor: each instance
    gets its own JitFunction and cache (``model.forward.cache_info()``).
    """

    def __init__(self, fn, get_instance, options):
        self._fn = fn
        self._get_instance = get_instance
        self._options = options
        self._bound = weakref.WeakKeyDictionary()
        self._check = options['check']
        self._changes = collections.Counter()
        self._warned_recompile = False
        self._lengths_unsound = False  # a symbolic length gave another
        # result than eager: lengths stay in the key
        self._unpacked = set()  # list arguments recorded item by item
        self.cache = cache_module.Cache(options['maxsize'])
        self.last_entry = None  # the entry the latest call used
        functools.update_wrapper(self, fn)
        self.__name__ = getattr(fn, '__qualname__', repr(fn))

    def __get__(self, instance, owner=None):
        if instance is None or self._get_instance is not None:
            return self
        bound = self._bound.get(instance)
        if bound is None:
            bound = JitFunction(self._fn, weakref.ref(instance),
                                self._options)
            bound.__name__ = '%s.%s' % (type(instance).__name__,
                                        self._fn.__name__)
            self._bound[instance] = bound
        return bound

    def __repr__(self):
        return '<chainerjit.JitFunction %s>' % self.__name__

    def __reduce__(self):
        """Pickles (and deep-copies) as ``jit`` of the same function bound
        to the same, or the copied, model, with an empty cache, as Python
        does for bound methods."""
        instance = self._instance()
        return _rebuild, (self._fn, instance, self._options)

    # --- calling ------------------------------------------------------------
    # A call that hits the cache runs in C (``_calls.CachedCall``,
    # the base class); every other call runs ``call_general``.

    def call_general(self, args, kwargs):
        """The call in Python: misses, fallbacks, symbolic lengths, hooks,
        list arguments and guards to check again."""
        self.last_entry = None
        instance = self._instance()
        if trace.is_recording():  # inlined into an outer recording
            return self._eager(instance, args, kwargs)
        if chainer.get_function_hooks() or chainer._get_link_hooks() or \
                chainer.config.debug:  # hooks and debug checks see each op
            return self._eager(instance, args, kwargs)
        train, backprop = signature.config_flags()
        try:
            key, leaves, packed = self.call_key(args, kwargs, train, backprop)
        except errors.UnsupportedArgument as e:
            self._warn_fallback(e, trace.user_location(2))
            return self._eager(instance, args, kwargs)
        entry, params, symbols = self.cache.lookup(key, instance)
        if entry is None:
            self.cache.misses += 1
            return self._compile(key, leaves, instance, args, kwargs, packed)
        self.last_entry = entry
        self.cache.hits += 1
        entry.hits += 1
        if symbols and tuple(symbols) not in entry.verified_lengths and \
                entry.program is not None:
            return self._verify_length(entry, leaves, params, symbols,
                                       instance, args, kwargs)
        training = backprop and entry.needs_grad(leaves)
        if (entry.training if training else entry.program) is None:
            return self._eager(instance, args, kwargs)
        return _calls.run_entry(self, entry, leaves, params, symbols,
                                instance, args, kwargs, training)

    def call_key(self, args, kwargs, train, backprop):
        """``(key, leaves, packed)`` of a call (``onnx_export`` reads it
        too). List arguments of alike arrays are packed into one array
        each (``chainerjit.frontend.packing``) unless this function records
        them item by item; ``packed`` is then ``(paths, packed args,
        packed kwargs)``, else ``None``."""
        paths = packing.list_paths(args, kwargs)
        if paths and paths not in self._unpacked:
            args, kwargs = packing.pack(args, kwargs, paths)
            key, leaves = signature.make_key(args, kwargs, train, backprop)
            return packing.mark_key(key, paths), leaves, (paths, args,
                                                          kwargs)
        key, leaves = signature.make_key(args, kwargs, train, backprop)
        return key, leaves, None

    def _verify_length(self, entry, leaves, params, symbols, instance, args,
                       kwargs):
        """The first call of a symbolic entry at a new length runs the
        program (it has no side effects) and then eagerly, and compares:
        Python state the recording could not see (an iterator's position,
        a counter deep in a container) may make that length differ. On a
        difference the function stops making lengths symbolic. The call
        returns eager's result."""
        try:
            outs = entry.program.run(signature.leaf_arrays(leaves) + params
                                     + symbols)
            compiled = entry.build_result(outs, leaves, instance)
        except errors.VMError:
            compiled = None
        result = self._eager(instance, args, kwargs)
        if compiled is not None and _compare(result, compiled) is None:
            entry.verified_lengths.add(tuple(symbols))
            return result
        if compiled is not None:
            self.cache.remove(entry)
            self._lengths_unsound = True
            self._warn_unrolled(errors.UnrolledLoop(
                'at another length, this loop gave another result than '
                'eagerly (its Python depends on the length in a way '
                'chainerjit cannot see): each length compiles on its own '
                'from now on'), entry.graph.nodes[0].loc if entry.graph.nodes
                else None)
        return result

    def _after_vm_error(self, entry, error, instance, args, kwargs):
        """A kernel raised (an index out of range, say) or a guard failed
        (a branch on an array value went the other way). Eager Chainer
        decides what that call gives: it is run again eagerly, unless the
        program had side effects, when the kernel's own error is raised."""
        if isinstance(error.__cause__, errors.GuardFailed):
            entry.branch_misses += 1
            if entry.branch_misses <= _RERECORD_LIMIT and \
                    _pure_but_guards(entry.graph.nodes):
                # Record again from this call: its branches may give a
                # program that covers more calls (a loop that ran longer
                # rolls into a region with an exit).
                self.cache.remove(entry)
                key, leaves, packed = self.call_key(
                    args, kwargs, *signature.config_flags())
                replaced = self._compile(key, leaves, instance, args, kwargs,
                                         packed)
                if self.last_entry is not None:
                    self.last_entry.branch_misses = entry.branch_misses
                return replaced
        if _pure_but_guards(entry.graph.nodes):
            return self._eager(instance, args, kwargs)
        raise error.__cause__ from error

    def _instance(self):
        if self._get_instance is None:
            return None
        instance = self._get_instance()
        if instance is None:
            raise ReferenceError('%s: its model no longer exists'
                                 % self.__name__)
        return instance

    def _eager(self, instance, args, kwargs):
        if instance is not None:
            return self._fn(instance, *args, **kwargs)
        return self._fn(*args, **kwargs)

    # --- compiling ----------------------------------------------------------

    def _signature(self, key, leaves, instance, args, kwargs):
        fn = self._fn if instance is None else functools.partial(
            self._fn, instance)
        return signature.Signature.of_call(
            fn, args, kwargs, key, leaves,
            cache_module.model_param_items(instance))

    def _compile(self, key, leaves, instance, args, kwargs, packed=None):
        """Records the call and caches its entry; returns the call's
        result. A call with packed lists (see :meth:`call_key`) keeps its
        entry only where packing cannot be seen (``_packing_pays``);
        otherwise the function records those lists item by item from the
        next call on (this call's recording already ran, and its result
        stands)."""
        start = time.perf_counter()
        recorded_args = (args, kwargs) if packed is None else packed[1:]
        sig = self._signature(key, leaves, instance, *recorded_args)
        reason = self._miss_reason(sig, key, instance)
        model_state = cache_module.link_state(instance)
        py_guards = guards.python_guards(self._fn, instance)
        recording = trace.record(
            self._fn, instance, recorded_args[0], recorded_args[1], leaves,
            self.__name__, [name for name, _ in sig.items[:len(leaves)]],
            None if packed is None else (packed[0], args, kwargs))
        fallback = self._fallback_reason(recording, py_guards, instance)
        if packed is not None and fallback is not None:
            self._unpacked.add(packed[0])
            return recording.result
        if fallback is None and _has_guards(recording.graph.nodes) and \
                not _pure_but_guards(recording.graph.nodes):
            fallback = ('a branch on an array value in a forward with '
                        'random or stateful operations')
            self._warn_fallback(errors.DataDependentValue(fallback), None)
        if fallback is not None:
            entry = cache_module.Entry(
                key, sig, model_state, py_guards=py_guards,
                config_reads=guards.config_reads(recording.config_names),
                fallback=fallback)
        else:
            entry = self._compiled_entry(key, sig, model_state, py_guards,
                                         recording, leaves, instance)
        if packed is not None and not _packing_pays(entry, recording):
            self._unpacked.add(packed[0])
            return recording.result
        entry.compile_seconds = time.perf_counter() - start
        self.last_entry = entry
        evicted = self.cache.insert(entry)
        logger.info('chainerjit: %s: cache miss (%s); %s in %.3f s%s',
                    self.__name__, reason,
                    'runs eagerly' if entry.fallback else 'compiled %d '
                    'instructions' % entry.n_instructions,
                    entry.compile_seconds,
                    '; evicted %s' % evicted.signature if evicted else '')
        return recording.result

    def _fallback_reason(self, recording, py_guards, instance):
        """Why this recording cannot be compiled (warning once), or
        ``None``."""
        hooked = [path for path, link in _links(instance)
                  if cache_module.link_hooks(link)]
        if hooked:
            return 'link hooks on %s observe each call' % ', '.join(hooked)
        changed = _changed_by_the_call(py_guards, recording)
        if changed and recording.escape is None:
            recording.escape = ('changing %s in place' % changed[0], None)
        if recording.escape is None:
            return None
        what, loc = recording.escape
        self._warn_fallback(errors.DataDependentValue(what), loc)
        return '%s at %s' % (what, _format_loc(loc))

    def _compiled_entry(self, key, sig, model_state, py_guards, recording,
                        leaves, instance):
        """Runs the passes, compiles, self-checks and, with backprop
        enabled, builds the training program."""
        symbolic = self._roll_loops(recording, sig, len(leaves))
        symbols = []
        if symbolic is not None:
            key, symbols = symbolic.generalize(key)
            sig = sig.with_symbols(symbolic.wildcards, symbolic.kind,
                                   symbolic.where)
        graph = passes.run(recording.graph)
        param_arrays = [recording.param_arrays[v] for v in graph.params]
        entry = cache_module.Entry(
            key, sig, model_state, graph, codegen.compile_graph(graph),
            recording.outputs, recording.effects, param_arrays,
            py_guards=py_guards,
            config_reads=guards.config_reads(recording.config_names))
        entry.symbolic = symbolic
        entry.verified_lengths.add(tuple(symbols))
        entry.ignore_state(recording.written_first)
        if self._check:
            self._self_check(entry, leaves, instance, param_arrays,
                             recording, symbols)
        if key[1] and entry.program is not None:  # backprop enabled
            entry.training = self._training(graph, leaves, recording)
            _note_jitted_link(instance)
        return entry

    def _roll_loops(self, recording, sig, n_leaves):
        """Rolls the recorded loops into regions (warning once for each
        loop left unrolled) and makes trip counts symbolic where sound.
        Returns the entry's ``symbolic.Symbolic`` or ``None``."""
        for code in recording.no_source:
            self._warn_unrolled(errors.UnrolledLoop(
                'a loop in %s, whose source cannot be read (a lambda, exec '
                'or a plain REPL), is unrolled: each trip count is a cache '
                'entry of its own' % code.co_name),
                (code.co_filename, code.co_firstlineno))
        rolled, unrolled = rolling.roll_loops(recording.graph, recording)
        for loop in unrolled:
            if not loop.varies:
                continue  # over the model's own lists: never another count
            self._warn_unrolled(errors.UnrolledLoop(
                'this loop is unrolled, with its trip count in the cache '
                'key: %s' % loop.reason), loop.loc)
        if not rolled or self._lengths_unsound or not _pure_but_guards(
                recording.graph.nodes):
            return None  # a length cannot be checked by running twice
        input_names = [name for name, _ in sig.items[:n_leaves]]
        code = getattr(self._fn, '__code__', None)
        if code is None:
            return None
        return symbolic.symbolize(
            recording.graph, rolled, input_names,
            control.length_only_names(code), recording)

    def _training(self, graph, leaves, recording):
        """The training program for gradients of the argument Variables
        that require grad and of the model's Variables, or ``None`` (with a
        warning) if an op on the way has no gradient rule."""
        wrt = [v for v, leaf in zip(graph.inputs, leaves)
               if isinstance(leaf, chainer.Variable) and leaf.requires_grad
               and v.dtype.kind == 'f']
        wrt += [v for v in graph.params if v.dtype.kind == 'f' and
                isinstance(recording.param_owners[v], chainer.Variable)]
        if not wrt:
            return None
        try:
            return function.TrainingProgram(
                autodiff.differentiate(graph, wrt))
        except errors.NotDifferentiable as e:
            self._warn_fallback(e, e.loc)
            return None

    def _self_check(self, entry, leaves, instance, param_arrays, recording,
                    symbols):
        """Runs a new program on the recorded inputs and parameters and
        compares with the eager result; on a difference the entry runs
        eagerly from now on. Generic nodes, which may draw random numbers
        or update state, return what they returned while recording."""
        check = codegen.compile_graph(entry.graph, recording.generic_outputs)
        arrays = [signature.leaf_array(leaf) for leaf in leaves]
        try:
            outs = check.run(arrays + param_arrays + symbols)
            result = entry.build_result(outs, leaves, instance)
            problem = _compare(recording.result, result)
        except errors.VMError as e:
            problem = str(e)
        if problem:
            entry.fallback = 'compiled result differs from eager: %s' % (
                problem)
            entry.program = None
            self._warn_fallback(errors.CompiledMismatch(problem), None)

    def _miss_reason(self, sig, key, instance):
        entries = self.cache.entries()
        if not entries:
            return 'first call'
        lines = min((self._differences(e, sig, key, instance)
                     for e in entries), key=len)
        for line in lines:
            self._changes[_change_kind(line)] += 1
        if (self.cache.misses >= self._options['recompile_limit']
                and not self._warned_recompile):
            self._warned_recompile = True
            common = ', '.join('%s (%d times)' % kv
                               for kv in self._changes.most_common(3))
            errors.warn_once(
                (self.__name__, 'recompile'), errors.RecompileWarning,
                'chainerjit: %s has compiled %d times; what keeps '
                'changing: %s. Each new value is a new cache entry.'
                % (self.__name__, self.cache.misses, common))
        return '; '.join(lines) or 'evicted earlier'

    @staticmethod
    def _differences(entry, sig, key, instance):
        if entry.key == key:
            return entry.guard_failures(instance)
        return entry.signature.diff(sig)

    def _warn_unrolled(self, error, loc):
        errors.warn_once((self.__name__, loc, 'unrolled'), errors.LoopWarning,
                         errors.unrolled_message(self.__name__, error, loc))

    def _warn_fallback(self, error, loc):
        errors.warn_once((self.__name__, loc, type(error)),
                         errors.FallbackWarning,
                         errors.fallback_message(self.__name__, error, loc))

    # --- inspection ---------------------------------------------------------

    def cache_info(self):
        """``CacheInfo(hits, misses, maxsize, currsize)``, as
        ``functools.lru_cache`` reports it."""
        return self.cache.info()

    def cache_clear(self):
        """Forgets every compiled program and resets the statistics."""
        self.cache.clear()
        self._changes.clear()
        self._warned_recompile = False

    def cache_entries(self):
        """The cache entries, least recently used first. Each has
        ``signature``, ``hits``, ``compile_seconds``, ``n_instructions``,
        ``graph`` (IR), ``program`` (bytecode; ``program.dis()``) and
        ``describe()``."""
        return self.cache.entries()

    def cache_report(self):
        """A table of the entries with hits and compile times."""
        return self.cache.report()

    def explain(self, *args, **kwargs):
        """Says which entry a call with these arguments would use, or, on
        a miss, how it differs from the closest entry. Runs nothing."""
        instance = self._instance()
        config = chainer.config
        try:
            key, leaves, packed = self.call_key(
                args, kwargs, config.train, config.enable_backprop)
        except errors.UnsupportedArgument as e:
            return '%s would run eagerly: %s' % (self.__name__, e)
        if packed is not None:
            args, kwargs = packed[1:]
        entries = self.cache.entries()
        for i, entry in enumerate(entries):
            general = entry.symbolic.generalize(key) if entry.symbolic \
                else (key, [])
            if general is not None and entry.key == general[0] and \
                    entry.fetch_params(instance) is not None:
                return '%s would hit entry #%d: %s%s' % (
                    self.__name__, i, entry.signature,
                    _how_it_runs(entry, config.enable_backprop and
                                 entry.needs_grad(leaves)))
        if not entries:
            return '%s: cache miss: the cache is empty' % self.__name__
        sig = self._signature(key, leaves, instance, args, kwargs)
        diffs = [(len(d), i, d) for i, d in enumerate(
            self._differences(e, sig, key, instance) for e in entries)]
        _, nearest, lines = min(diffs)
        return ('%s: cache miss: closest entry #%d differs in\n%s' % (
            self.__name__, nearest,
            '\n'.join('  * %s' % line for line in lines)))


_RERECORD_LIMIT = 3  # guard failures after which an entry stops recording


def _has_guards(nodes):
    return any(node.op == 'Guard' for node in nodes)


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


def _note_jitted_link(instance):
    """Lets ``optimizers`` take its fast update for this model."""
    if isinstance(instance, chainer.Link):
        optimizers.jitted_links.add(instance)


def _pure_but_guards(nodes):
    """No node has side effects, apart from guards (which only check)."""
    for node in nodes:
        if node.region is not None:
            if not _pure_but_guards(node.region.body.nodes):
                return False
        elif not node.pure and node.op != 'Guard':
            return False
    return True


def _rebuild(fn, instance, options):
    fastpaths.install()
    return JitFunction(fn, None if instance is None else lambda: instance,
                       options)


def _how_it_runs(entry, grad):
    if entry.fallback:
        return ' (runs eagerly: %s)' % entry.fallback
    if grad:
        return ' (with gradients: %s)' % (
            'runs eagerly, an op has no gradient rule'
            if entry.training is None else 'compiled forward and backward')
    return ''


def _changed_by_the_call(py_guards, recording):
    """Labels of guarded Python values the recorded call itself changed
    (an append to a default list, a closed-over dict); attributes the
    forward assigns are replayed instead."""
    assigned = set('self.%s' % name for kind, path, name, _, _ in
                   recording.effects if kind == 'setattr' and path == ())
    return [g.label for g in py_guards
            if not g.holds() and g.label not in assigned]


def _links(instance):
    if not isinstance(instance, chainer.Link):
        return []
    return [(path or '/', link) for path, link in instance.namedlinks()]


def _format_loc(loc):
    if loc is None:
        return 'an unknown line'
    return '%s:%d' % loc


def _change_kind(line):
    """``'x: shape (32, 784) -> (17, 784) at axis 0'`` -> ``'x: shape at
    axis 0'``: what changed, without the values."""
    name, _, rest = line.partition(': ')
    what = rest.split(' ')[0] if rest else ''
    if what not in ('shape', 'dtype', 'device', 'requires_grad',
                    'is_variable', 'link', 'length', 'missing'):
        what = 'value'  # a static argument, a setting: 'k: 2.0 -> 3.0'
    where = rest[rest.index(' at axis'):] if ' at axis' in rest else ''
    return '%s: %s%s' % (name, what, where)


def _compare(expected, actual):
    """Returns ``None`` if two results match, else what differs."""
    exp_leaves, act_leaves = [], []
    try:
        exp_structure = signature.flatten(expected, exp_leaves)
        act_structure = signature.flatten(actual, act_leaves)
    except errors.UnsupportedArgument as e:
        return str(e)
    if exp_structure != act_structure:
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
        if e.dtype.kind in 'fc':
            finite = numpy.isfinite(e)
            scale = float(numpy.abs(e[finite]).max()) \
                if e.size and bool(finite.any()) else 1.0
            ok = bool(numpy.allclose(a, e, rtol=1e-4,
                                     atol=1e-5 * max(scale, 1.0),
                                     equal_nan=True))
        else:
            ok = bool((a == e).all())
        if not ok:
            return 'output %d: values differ' % i
    return None
