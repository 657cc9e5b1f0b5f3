"""The user-facing entry point, :func:`jit`."""

import collections
import contextlib
import functools
import logging
import os
import weakref

import chainer

from chainerjit import errors
from chainerjit import fastpaths
from chainerjit.fastpaths import optimizers
from chainerjit.frontend import epochs
from chainerjit.frontend import joining
from chainerjit.frontend import lengths
from chainerjit.frontend import packing
from chainerjit.frontend import scalars
from chainerjit.frontend import signature
from chainerjit.frontend import symbolic as symbolic_module
from chainerjit.frontend import trace
from chainerjit.frontend import trip_counts
from chainerjit.runtime import _calls
from chainerjit.runtime import backends
from chainerjit.runtime import batch
from chainerjit.runtime import blas
from chainerjit.runtime import budget
from chainerjit.runtime import cache as cache_module
from chainerjit.runtime import compile as pipeline
from chainerjit.runtime import ragged
from chainerjit.runtime import undo


logger = logging.getLogger('chainerjit')
if os.environ.get('CHAINERJIT_LOG'):
    logger.addHandler(logging.StreamHandler())
    logger.setLevel(logging.INFO)


def jit(fn=None, maxsize=64, check=True, recompile_limit=8, backend=None,
        providers=None, freeze=False, dynamic=None):
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
            keeps changing between calls; after this many misses in a row
            for new values of a Python argument, stop recording new
            signatures and run them eagerly (``runtime.budget``).
        backend: what runs a compiled program: ``'numpy'`` (chainerjit's
            VM and kernels, bit for bit), ``'onnxruntime'`` (one
            onnxruntime session wherever the program converts and passes
            the self-check) or ``'auto'`` (the faster of the two,
            measured on a call's inputs once the program's calls have run
            ``runtime.backends.CHOOSE_AFTER_SECONDS`` on the VM). ``None``:
            the ``CHAINERJIT_BACKEND`` environment variable, else
            ``'auto'``. A training step's forward and backward are chosen
            each on its own (``runtime.backends``).
        providers: onnxruntime execution providers for its sessions (as
            ``onnxruntime.InferenceSession`` takes them; default the CPU's).
        freeze: serving mode. A program run by onnxruntime owns the
            model's parameters as constants, which onnxruntime can fold
            and prepack, and the parameters become read-only: a write into
            one is an error, and a parameter replaced by another array is
            recorded again. :meth:`JitFunction.unfreeze` (or
            ``cache_clear()``) makes them writable again. Not with
            ``backend='numpy'``.
        dynamic: ``None`` (default): a program serves every batch size
            once a second one is seen, where one onnxruntime session or
            the VM can run it so, its first calls at new sizes checked
            against eager (``runtime.batch``); ``True``: the VM's program
            serves every batch size from the first call, and every other
            axis it takes at any size (``batch.every_axis_of``);
            ``False``: every batch size compiles on its own.

    Returns:
        JitFunction: calls like ``fn`` and has ``cache_info()``,
        ``cache_clear()``, ``cache_entries()`` and ``explain(*args)``.
    """
    _install()
    if backend is None:
        backend = os.environ.get('CHAINERJIT_BACKEND', 'auto')
    backends.check_option(backend, freeze)
    if dynamic not in (None, False, True):
        raise ValueError('chainerjit: dynamic must be None, True or False, '
                         'not %r' % (dynamic,))
    options = dict(maxsize=maxsize, check=check,
                   recompile_limit=recompile_limit, backend=backend,
                   providers=providers, freeze=freeze, dynamic=dynamic)
    if fn is None:
        return lambda f: jit(f, **options)
    if isinstance(fn, chainer.Link):  # (its class's forward, unjitted)
        forward = type(fn).forward
        return JitFunction(forward._fn if isinstance(forward, JitFunction)
                           else forward, lambda: fn, options)
    if hasattr(fn, '__self__') and hasattr(fn, '__func__'):
        instance = fn.__self__
        return JitFunction(fn.__func__, lambda: instance, options)
    return JitFunction(fn, None, options)


@contextlib.contextmanager
def _reports_noted():
    """Notes in the list it gives what the block reports to the current
    reporter (``chainer.report``), as it reports it; ``None`` where no
    reporter is current (a report then goes nowhere)."""
    reporters = chainer.reporter._get_reporters()
    if not reporters:
        yield None
        return
    reporter, noted = reporters[-1], []
    report = reporter.report

    def noting(values, observer=None):
        noted.append(dict(values))
        return report(values, observer)
    reporter.report = noting
    try:
        yield noted
    finally:
        del reporter.report


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
        self._batch_static = False  # likewise for batch sizes
        self._numbers_static = False  # float and int arguments stay in the key
        self._sizes_seen = batch.SizesSeen()  # at the calls that missed
        self._unpacked = set()  # list arguments recorded item by item
        # list arguments an entry serves item by item at any lengths
        self._ragged_paths = set()
        # The joining.Join of the list arguments calls join: None until a
        # recording says, () once they may not; lists of one item not, once
        # such a call could not be.
        self._joins = None
        self._single_unjoined = False
        # the modes whose next call finds the joins again (their items
        # drew where the recording that joined them did not)
        self._rejoin_modes = set()
        self._rejoined_modes = set()  # (once each)
        # Parameter arrays its frozen programs made read-only (unfreeze()).
        self._made_read_only = []
        # the links an eager call runs as compiled segments (_fallback)
        self._segments = weakref.WeakKeyDictionary()
        self._segment_links = weakref.WeakKeyDictionary()
        # A graph break (breaks.Cut) calls run around, once a recording
        # found one, its driver and its jitted pieces.
        self._cut, self._driver, self._pieces = None, None, {}
        self._uncut = None  # why calls no longer run around a break
        # As a piece of a cut forward: what the whole assigns before reading
        self._written_by_whole = frozenset()
        self._is_piece = False
        # a piece whose program holds no op runs as Python from then on
        self._plain = False
        self.cache = cache_module.Cache(options['maxsize'])
        # when misses stop being recorded (runtime.budget)
        self.budget = budget.RecordingBudget(options['recompile_limit'],
                                             options['maxsize'])
        self._warned_stopped = False
        self.last_entry = None  # the entry the latest call used
        functools.update_wrapper(self, fn)
        self.__name__ = getattr(fn, '__qualname__', repr(fn))
        # A warning is shown once per function: its name and its code (two
        # classes of one name, a notebook's cell run again, warn apart).
        self._warn_site = (self.__name__, getattr(
            getattr(fn, '__func__', fn), '__code__', None))

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

    def bound_to(self, instance):
        """Is this the function jitted for ``instance`` by
        ``instance.forward = jit(instance.forward)``?"""
        return self._get_instance is not None and \
            self._get_instance() is instance

    def rebound(self, instance):
        """The same function jitted for ``instance`` (a copy of the
        model), with a cache of its own (``fastpaths.copies``)."""
        return JitFunction(self._fn, lambda: instance, self._options)

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
        try:
            return self._call_general(args, kwargs)
        except ValueError as e:
            if not self._made_read_only or 'read-only' not in str(e) or \
                    isinstance(e, errors.FrozenParameters):
                raise
            raise errors.FrozenParameters(
                'chainerjit: %s was jitted with freeze=True: its serving '
                'sessions own the model\'s parameters, which are read-only, '
                'and this call wrote into one (%s). Call %s.unfreeze() '
                'before training, or train with a function jitted without '
                'freeze.' % (self.__name__, e, self.__name__)) from e

    def _call_general(self, args, kwargs):
        self.last_entry = None
        instance = self._instance()
        if trace.is_recording() or _checking[0]:  # inlined into an outer
            return self._run(instance, args, kwargs)  # recording, or a check
        if chainer.get_function_hooks() or chainer._get_link_hooks() or \
                chainer.config.debug:  # hooks and debug checks see each op
            return self._eager(instance, args, kwargs)
        if self._cut is not None:  # every call runs around the break
            self.cache.hits += 1
            return self._run_cut(instance, args, kwargs, hit=True)
        if self._plain:  # nothing to compile (numbers Python computes)
            return self._eager(instance, args, kwargs)
        train, backprop = signature.config_flags()
        try:
            key, leaves, packed = self.call_key(args, kwargs, train, backprop)
        except errors.UnsupportedArgument as e:
            self._warn_fallback(e, trace.user_location(2))
            return self._fallback(instance, args, kwargs)
        entry, params, symbols = self.cache.lookup(key, instance)
        if entry is None:
            self.cache.misses += 1
            self._sizes_seen.note(key)
            if not self.budget.may_record(self.cache.hits):
                self._warn_stopped()
                return self._fallback(instance, args, kwargs)
            if isinstance(packed, joining.Joined):
                return self._compile_joined(key, leaves, instance, args,
                                            kwargs, packed)
            if self.cache.entries():
                self._warn_variable_lists(args, kwargs)
            varying, sibling, batched = (None, None, None) \
                if packed is not None else self._varying_numbers(key)
            if varying:
                result = self._compile(key, leaves, instance, args, kwargs,
                                       batched=batched, varying=varying)
                if sibling is not None and not self._numbers_static and (
                        batched is None or _serves(self.last_entry,
                                                   sibling)):
                    self.cache.remove(sibling)  # the new entry serves it
                return result
            dynamic = not self._batch_static and \
                self._options.get('dynamic') is not False
            if dynamic:
                result = self._widen_batch(key, leaves, instance, args,
                                           kwargs)
                if result is not _NOT_WIDENED:
                    return result
                return self._compile_any_batch(key, leaves, instance, args,
                                               kwargs, packed)
            return self._compile(key, leaves, instance, args, kwargs, packed)
        self.last_entry = entry
        self.cache.hits += 1
        entry.hits += 1
        if not entry.values_checked and entry.program is not None:
            result = self._verify_values(entry, leaves, params, symbols,
                                         instance, args, kwargs)
            if result is not _VALUES_SEEN:
                return result
        checked = _size_to_check(entry, key, symbols) or \
            _derived_to_check(entry, packed, args, kwargs)
        if checked is not None and checked not in entry.verified_lengths \
                and entry.program is not None:
            return self._verify_length(entry, leaves, params, symbols,
                                       instance, args, kwargs, checked)
        if entry.symbolic is not None and packed is None:
            self.cache.remember_general(key, entry, symbols)
        training = backprop and entry.needs_grad(leaves)
        if (entry.training if training else entry.program) is None:
            return self._fallback(instance, args, kwargs, hit=True)
        return _calls.run_entry(self, entry, leaves, params, symbols,
                                instance, args, kwargs, training)

    def call_key(self, args, kwargs, train, backprop):
        """``(key, leaves, packed)`` of a call (``onnx_export`` reads it
        too). List arguments of alike arrays are packed into one array
        each (``chainerjit.frontend.packing``) unless this function records
        them item by item; ``packed`` is then ``(paths, packed args,
        packed kwargs)``, else ``None``. Lists the function joins
        (``chainerjit.frontend.joining``) are joined first; ``packed`` is
        then a ``joining.Joined``."""
        if self._joins and (train, backprop) not in self._rejoin_modes:
            joined = joining.join(args, kwargs, self._joins)
            apart = None if joined is not None else \
                joining.widths_apart(args, kwargs, self._joins)
            if apart is not None:  # (one width only by chance: two now)
                self._joins = apart
                self._remove_joined_otherwise(apart)
                joined = joining.join(args, kwargs, apart)
            elif joined is None and joining.rows_by_chance(args, kwargs,
                                                           self._joins):
                self._find_joins_again()  # (one row each by chance)
            if joined is not None and not (self._single_unjoined and
                                           joining.counts(joined) == {1}):
                key, leaves = signature.make_key(joined.args, joined.kwargs,
                                                 train, backprop)
                return joining.mark_key(key, self._joins), leaves, joined
        paths = packing.list_paths(args, kwargs)
        if paths and paths not in self._unpacked and \
                not self._ragged_paths.intersection(paths):
            args, kwargs = packing.pack(args, kwargs, paths)
            key, leaves = signature.make_key(args, kwargs, train, backprop)
            return packing.mark_key(key, paths), leaves, (paths, args,
                                                          kwargs)
        key, leaves = signature.make_key(args, kwargs, train, backprop)
        return key, leaves, None

    def _verify_length(self, entry, leaves, params, symbols, instance, args,
                       kwargs, checked):
        """The first call of a symbolic entry at a new length (or batch
        size: ``checked``) runs the program (it has no side effects but
        draws from NumPy's generator, whose state is put back) and then
        eagerly, and compares: Python state the recording could not
        see (an iterator's position, a counter deep in a container) may
        make that length differ. On a difference the function stops making
        lengths (or batch sizes) symbolic. The call returns eager's
        result."""
        result, agrees = self._compared_with_eager(
            entry, leaves, params, symbols, instance, args, kwargs)
        if agrees is None:
            return result
        if agrees:
            entry.verified_lengths.update(
                checked if _checks_items(entry.symbolic) and
                checked[:1] != (_DERIVED,) else [checked])
            return result
        return self._length_mismatch(entry, checked, result)

    def _verify_values(self, entry, leaves, params, symbols, instance, args,
                       kwargs):
        """The hits of an entry whose program holds arrays the recording
        computed (``cache.Entry.values_checked``) run the program and
        eagerly, and compare (as :meth:`_verify_length`): an array made
        from an argument's values out of the recording's sight (a
        conversion it cannot reach) would be a constant of the first call.
        The first hit is checked, and each where an array argument first
        comes with other values than recorded (a DQN's flags of episodes
        ended, all zeros at first; labels of one class), until each did,
        at most ``runtime.cache.VALUE_CHECKS`` times, watching
        ``VALUE_WATCH`` hits at most. On a difference the entry runs
        eagerly from now on, with a warning. The call returns eager's
        result; a hit not checked, :data:`_VALUES_SEEN`."""
        now = cache_module.values_digests(leaves, entry.unvaried)
        unvaried = dict((i, d) for i, d in entry.unvaried.items()
                        if now.get(i) == d)
        checked = len(unvaried) < len(entry.unvaried) or \
            not entry.value_checks
        entry.unvaried = unvaried
        entry.value_checks += checked
        entry.values_checked = not unvaried or \
            entry.value_checks >= cache_module.VALUE_CHECKS or \
            entry.hits >= cache_module.VALUE_WATCH
        if not checked:
            return _VALUES_SEEN
        result, agrees = self._compared_with_eager(
            entry, leaves, params, symbols, instance, args, kwargs)
        if agrees is False:
            why = 'at new argument values its program gave another ' \
                'result than eagerly (an array computed from the ' \
                'arguments out of the recording\'s sight is a constant of ' \
                'the first call)'
            entry.fallback = why
            entry.program = entry.training = None
            self._warn_fallback(errors.CompiledMismatch(why),
                                entry.graph.nodes[0].loc
                                if entry.graph.nodes else None)
        return result

    def _compared_with_eager(self, entry, leaves, params, symbols,
                             instance, args, kwargs):
        """``(eager's result, whether the entry's program agrees with it)``
        for a call (``None``: the program did not run, as a failed guard
        says), its effects undone in between; see :meth:`_verify_length`."""
        # Dropout draws the same again and batch normalization updates its
        # running averages once.
        snapshot = undo.Snapshot(entry.graph, params)
        try:
            outs = entry.program.run(signature.leaf_arrays(leaves) + params
                                     + symbols)
            compiled = entry.build_result(outs, leaves, instance)
            reported = entry.reported(outs, leaves, instance)
        except errors.VMError as e:
            # A kernel that raised where eager Chainer does not (below) is
            # as wrong as another result; a branch is the guard's to judge.
            compiled = None if isinstance(e.__cause__, errors.GuardFailed) \
                else _RAISED
        snapshot.restore()
        trained = reference = None
        if compiled is not None and compiled is not _RAISED:
            trained = self._training_result(entry, leaves, params, symbols,
                                            instance, args, kwargs)
        if trained is not None:
            reference = self._eager_reference(entry, params, instance, args,
                                              kwargs)
        with _reports_noted() as eager_reports:
            result = self._check_eagerly(instance, args, kwargs, hit=True)
        if compiled is None:
            return result, None
        return result, compiled is not _RAISED and \
            pipeline.compare_results(result, compiled) is None and (
                eager_reports is None or pipeline.compare_results(
                    eager_reports, reported) is None) and (
                trained is None or reference is None or
                _gradients_agree(reference, trained, (args, kwargs),
                                 instance))

    def _length_mismatch(self, entry, checked, result):
        """What a check at new sizes (``checked``) that found another result
        than eager's does: the sizes stay in the key from now on, with a
        warning. Returns eager's ``result``."""
        self.cache.remove(entry)
        if checked[:1] == (_DERIVED,):
            self._forget_joined()
            self._warn_joins('the number of items of list arguments stays in '
                             'the cache key (each new number compiles '
                             'again): at new lengths of the longest item or '
                             'new totals of the items, its program gave '
                             'another result than eagerly')
            return result
        if isinstance(entry.symbolic, _NUMBERS):
            if isinstance(entry.symbolic, scalars.SizesAndNumbers):
                checked = checked[1]  # (sizes, numbers)
            for other in self.cache.entries():  # (the other mode's too)
                if isinstance(other.symbolic, _NUMBERS):
                    self.cache.remove(other)
            self._warn_varying(
                'the number arguments %s stay in the cache key: at %s its '
                'program gave another result than eagerly' % (', '.join(
                    name for name, v in entry.signature.items
                    if isinstance(v, signature.Varying)),
                    ', '.join(repr(float.fromhex(v) if isinstance(v, str)
                                   else v) for v in checked)))
            return result
        narrowed = batch.without_one_row(entry.symbolic, checked)
        if narrowed is not None:
            entry.symbolic = narrowed
            self.cache.insert(entry)
            errors.warn_once(
                (self._warn_site, 'one row'), errors.RecompileWarning,
                'chainerjit: %s: a batch of one keeps an entry of its own: '
                'at one row its program gave another result than eagerly'
                % self.__name__)
            return result
        if isinstance(entry.symbolic, _BATCHES):
            self._batch_static = True
            self._drop_symbolic(_BATCHES)
            if self._joins:
                self._forget_joined()
            self._lengths_unsound |= isinstance(entry.symbolic,
                                                batch.TripsAndBatch)
            size = checked[-1][-1] if isinstance(
                entry.symbolic, batch.TripsAndBatch) else checked[0][-1] \
                if isinstance(entry.symbolic, batch.TwoAxes) else checked[-1]
            self._warn_batch_static(
                'at batch size %d its program gave another result than '
                'eagerly' % size)
            return result
        self._lengths_unsound = True
        self._drop_symbolic(_LENGTHS)
        if isinstance(entry.symbolic, ragged.Ragged):
            entry.items_note = 'at other lengths its program gave another ' \
                'result than eagerly'
            self._warn_items('the lengths of the items of list arguments '
                             'stay in the cache key: %s' % entry.items_note)
            return result
        self._warn_unrolled(errors.UnrolledLoop(
            'at another length, this loop gave another result than eagerly '
            '(its Python depends on the length in a way chainerjit cannot '
            'see): each length compiles on its own from now on'),
            entry.graph.nodes[0].loc if entry.graph.nodes else None)
        return result

    def _drop_symbolic(self, kinds):
        """Removes the entries that serve any sizes of ``kinds``: a size
        dependence one entry's check found at new sizes is the other
        mode's too (the forward's Python is the same)."""
        for entry in self.cache.entries():
            if isinstance(getattr(entry.symbolic, 'sizes', entry.symbolic),
                          kinds):
                self.cache.remove(entry)

    def _widen_batch(self, key, leaves, instance, args, kwargs):
        """A call that missed only for its batch size, where the entry of
        another batch size runs in one onnxruntime session: that session
        is built again with the batch dynamic (``runtime.batch``) and runs
        the call, as does eager Chainer. If they agree, the entry serves
        every batch size and the call returns eager's result; otherwise
        (or where no such entry is) :data:`_NOT_WIDENED`, and the call is
        compiled, or, if the session ran, returns eager's result. A session
        that gave another result keeps the batch size in the key only with
        ``backend='onnxruntime'``; else the VM's program may take any batch
        size at the next call of a new one (``Entry.session_note``)."""
        found = batch.sibling(self.cache, key, self._options['backend'])
        if found is None:
            return _NOT_WIDENED
        entry, batched = found
        params = entry.fetch_params(instance)
        if params is None:
            return _NOT_WIDENED
        decision = batch.decision_on_batch(entry, batched)
        sizes = batch.axes_named(batched.batch_axes(),
                                 [name for name, _ in entry.signature.items],
                                 ' and ')
        if decision is not None and self._options['backend'] != \
                'onnxruntime':
            return _NOT_WIDENED  # (the VM's program may guard the size)
        if decision is not None:
            entry.batch_note = decision
            self._warn_batch_static(decision, sizes)
            return _NOT_WIDENED
        inputs = signature.leaf_arrays(leaves) + params
        try:
            program = batch.dynamic_program(
                entry, batched, self._options.get('providers'), inputs)
            outs = program.run(inputs)
            compiled = entry.build_result(outs, leaves, instance)
        except Exception as error:  # no converter; onnxruntime refused
            if self._options['backend'] != 'onnxruntime':
                return _NOT_WIDENED  # the VM may serve every batch size
            entry.batch_note = backends.first_line(error)
            self._warn_batch_static(entry.batch_note, sizes)
            return _NOT_WIDENED
        result = self._check_eagerly(instance, args, kwargs)
        problem = pipeline.compare_results(result, compiled)
        if problem is not None:
            note = 'at batch size %d its program gave another result than ' \
                'eagerly: %s' % (batched.size_of(key), problem)
            if self._options['backend'] != 'onnxruntime':
                entry.session_note = note  # the VM's may serve every batch
                return result
            entry.batch_note = note
            self._warn_batch_static(entry.batch_note, sizes)
            return result
        batch.widen(self.cache, entry, batched, program, [
            batched.size_of(entry.key), batched.size_of(key)])
        self.last_entry = entry
        return result

    def _compile_any_batch(self, key, leaves, instance, args, kwargs,
                           packed=None):
        """Compiles a call, for any batch size where the VM may run its
        program so (``batch.rows_batched``): with the axes calls were seen
        at several sizes open (:meth:`_compile_seen`), or where the call
        missed an entry only for the sizes of one or two axes, those, or,
        with ``jit(dynamic=True)``, from the first call on, every other
        axis of its arrays too where the program takes it at any size
        (``batch.every_axis_of``). The entry compiled for the other size is
        then left out (the new one serves it), or, where the batch size
        stays in the key, keeps its size too, with the same note."""
        sibling, batched = batch.widened_sibling(self.cache, key)
        seen = self._sizes_seen.batched(key)
        if seen is not None and (batched is None or batch.open_axes(
                batched) <= batch.open_axes(seen)):
            return self._compile_seen(key, leaves, instance, args, kwargs,
                                      packed, seen)
        if batched is None and self._options.get('dynamic'):
            batched = batch.every_axis_of(key)
        elif batched is not None and batched.size_of(key) < batch.MIN_SIZE:
            batched = None
        result = self._compile(key, leaves, instance, args, kwargs, packed,
                               batched=batched)
        entry = self.last_entry
        self._drop_stale(entry)
        if sibling is None or entry is None:
            return result
        if isinstance(entry.symbolic, batch.TripsAndBatch) and \
                batched.kept is None and \
                batch.same_guards(sibling, entry) and \
                entry.symbolic.batch.generalize(sibling.key) is not None:
            self.cache.remove(sibling)
        if type(entry.symbolic) in (batch.RowsBatched, batch.TwoAxes,
                                    batch.TripsAndBatch):
            self._drop_served(entry)
        elif entry.batch_note is not None:
            sibling.batch_note = entry.batch_note
        return result

    def _compile_seen(self, key, leaves, instance, args, kwargs, packed,
                      batched):
        """Compiles a call with the axes calls were seen at several sizes
        open (``batch.SizesSeen``), and drops the entries the new one
        serves; where its sizes stay in the key, the entries of other sizes
        keep theirs too, with the same note."""
        result = self._compile(key, leaves, instance, args, kwargs, packed,
                               batched=batched)
        entry = self.last_entry
        if entry is not None and entry.symbolic is not None:
            self._drop_served(entry)
        if entry is not None and entry.batch_note is not None:
            for other in batch.alike_in_form(self.cache, entry):
                other.batch_note = other.batch_note or entry.batch_note
        self._drop_stale(entry)
        return result

    def _drop_served(self, entry):
        """Drops the entries whose calls ``entry``, compiled for any sizes,
        serves."""
        served = batch.served_by(self.cache, entry) if type(
            entry.symbolic) in (batch.RowsBatched, batch.TwoAxes) else \
            batch.generalized_by(self.cache, entry) + \
            batch.short_ones_served_by(self.cache, entry)
        for other in served:
            self.cache.remove(other)

    def _drop_stale(self, entry):
        """Drops, after a call of one row compiled ``entry``, the entries
        of other sizes that their next call compiles for any
        (``batch.SizesSeen.stale``)."""
        if entry is not None:
            for other in self._sizes_seen.stale(self.cache, entry):
                self.cache.remove(other)

    def _compile_joined(self, key, leaves, instance, args, kwargs, joined):
        """Compiles a call whose lists are joined (see :meth:`call_key`)
        for any number of items and width of a padded list
        (``batch.of_joined``)."""
        count, = joining.counts(joined)
        batched = self._sizes_seen.joined_batch(key, batch.of_joined(
            key, joining.joined_leaves(joined, leaves), count))
        varying, sibling, _ = self._varying_numbers(key)
        result = self._compile(key, leaves, instance, args, kwargs, joined,
                               batched=batched, varying=varying)
        entry = self.last_entry
        if sibling is not None and entry is not None and \
                isinstance(entry.symbolic, scalars.SizesAndNumbers) and \
                batch.open_axes(entry.symbolic) >= batch.open_axes(
                    sibling.symbolic):
            self.cache.remove(sibling)  # (the new entry takes its numbers)
        if entry is not None and entry.symbolic is not None:
            for other in batch.served_by(self.cache, entry):
                if _is_joined(other):  # (a batch of one, first)
                    self.cache.remove(other)
        return result

    def _find_joins_again(self):
        """Finds how to join lists again at the next call recorded item by
        item, and drops the entries of joined calls."""
        self._joins = None
        self._remove_entries(joined=True)

    def _forget_joined(self):
        """Stops joining lists, and drops the entries of joined calls."""
        self._joins = ()
        self._remove_entries(joined=True)

    def _remove_joined_otherwise(self, joins):
        """Drops the entries of calls joined otherwise than ``joins``."""
        for entry in self.cache.entries():
            if _is_joined(entry) and entry.key[2][1] != joins:
                self.cache.remove(entry)

    def _remove_entries(self, joined):
        """Drops the entries of joined calls, or of the others."""
        for entry in self.cache.entries():
            if _is_joined(entry) == joined:
                self.cache.remove(entry)

    def _holds_joined(self, key):
        """Does the cache hold an entry of joined calls in the mode
        (``train``, backprop) of ``key``?"""
        return any(_is_joined(entry) and entry.key[:2] == key[:2]
                   for entry in self.cache.entries())

    def _varying_numbers(self, key):
        """``(paths, entry, batched)``: the paths of the float arguments
        (and the int ones :meth:`_int_varies` allows) to record as inputs
        of the program (``frontend.scalars``), with ``jit(dynamic=True)``
        all, else those whose values alone make the call miss ``entry``,
        compiled for other values, its symbolic sizes left open, or its
        batch size too (``batched``, a ``batch.Batched``, else ``None``);
        or ``(None, None, None)``."""
        dynamic = self._options.get('dynamic')
        if dynamic is False or self._numbers_static:
            return None, None, None
        if dynamic:
            return scalars.number_paths(key, self._int_varies) or None, \
                None, None
        batched = None if self._batch_static else batch.batch_of(key)
        for entry in self.cache.entries():
            found = _numbers_missed(entry, key, batched, self._int_varies)
            if found is not None:
                return found[0], entry, found[1]
        self._warn_ints_kept(key)
        return None, None, None

    def _int_varies(self, path):
        """May the int argument at ``path`` be an input of the program
        (``scalars.IntScalar``)? Where the forward's source only computes
        with it (``trip_counts.arithmetic_only_names``)."""
        code = getattr(self._fn, '__code__', None)
        return code is not None and signature.argument_name(
            self._fn, self._instance(), path) in \
            trip_counts.arithmetic_only_names(code)

    def _warn_ints_kept(self, key):
        """Warns once, where ``key`` misses an entry only for the values of
        int arguments that stay in the key (:meth:`_int_varies`), naming
        the use that keeps each."""
        code = getattr(self._fn, '__code__', None)
        for entry in self.cache.entries():
            for path in scalars.kept_int_paths(key, entry.key,
                                               self._int_varies):
                name = signature.argument_name(self._fn, self._instance(),
                                               path)
                why = code and trip_counts.int_kept_why(code, name)
                errors.warn_once(
                    (self._warn_site, 'int', name), errors.RecompileWarning,
                    'chainerjit: %s keeps the int argument %r in the cache '
                    'key (each new value compiles again)%s. Where it is a '
                    'size, pass an array of that size instead: array sizes '
                    'are symbolic.' % (self.__name__, name,
                                       ': ' + why if why else ''))

    def _warn_varying(self, why):
        self._numbers_static = True
        errors.warn_once(
            (self._warn_site, 'numbers', why), errors.RecompileWarning,
            'chainerjit: %s: %s. Each new value compiles again.'
            % (self.__name__, why))

    def _warn_batch_static(self, why, sizes=None):
        """Warns once that the batch size (``sizes``: the axes that
        changed, as the forward reads them, ``x.shape[0]``) stays in the
        key, and why."""
        what = 'the batch size' if sizes is None else \
            'the size of %s' % sizes
        errors.warn_once(
            (self._warn_site, 'batch'), errors.RecompileWarning,
            'chainerjit: %s keeps %s in the cache key (each new size '
            'compiles again): %s' % (self.__name__, what, why))

    def _warn_variable_lists(self, args, kwargs):
        """Warns once, at a miss, where a list argument holds Variables:
        only lists of arrays are joined (one entry for every number and
        length of items), so each new one compiles again; lists of arrays
        beside it are joined where it is of another count (an N-step
        link's states, ``(hx, cx)``)."""
        counts = set(len(items) for _, items in
                     joining.list_arguments(args, kwargs))
        for path in packing.sequence_paths(args, kwargs):
            items = packing.holder(args, kwargs, path)[path[1]]
            if any(isinstance(x, chainer.Variable) for x in items) and (
                    not counts or len(items) in counts):
                errors.warn_once(
                    (self._warn_site, 'variable lists'),
                    errors.RecompileWarning,
                    'chainerjit: %s: the list argument %s holds Variables: '
                    'lists are joined into one entry for every number and '
                    'length of their items where they hold NumPy arrays '
                    '(pass [v.array for v in xs] where no gradient of the '
                    'items is needed); each new number or length compiles '
                    'again' % (self.__name__, signature.argument_name(
                        self._fn, self._instance(), path[:2])))
                return

    def _warn_sizes(self, why):
        if why is not None:
            errors.warn_once((self._warn_site, 'sizes'),
                             errors.RecompileWarning,
                             'chainerjit: %s: %s' % (self.__name__, why))

    def _warn_items(self, why, about='items'):
        errors.warn_once((self._warn_site, about), errors.RecompileWarning,
                         'chainerjit: %s: %s' % (self.__name__, why))

    def _warn_joins(self, why):
        self._warn_items(why, 'joins')

    def _after_vm_error(self, entry, error, instance, args, kwargs):
        """A kernel raised (an index out of range, say) or a guard failed
        (a branch on an array value went the other way). Eager Chainer
        decides what that call gives: it is run again eagerly, unless the
        program had side effects, when the kernel's own error is raised."""
        if isinstance(error.__cause__, errors.GuardFailed):
            entry.branch_misses += 1
            if entry.branch_misses <= _RERECORD_LIMIT and \
                    pipeline.pure_but_guards(entry.graph.nodes):
                # Record again from this call: its branches may give a
                # program that covers more calls (a loop that ran longer
                # rolls into a region with an exit).
                self.cache.remove(entry)
                self.cache.eager_hits += 1  # this call records again
                key, leaves, packed = self.call_key(
                    args, kwargs, *signature.config_flags())
                replaced = self._compile_joined(
                    key, leaves, instance, args, kwargs, packed) \
                    if isinstance(packed, joining.Joined) else \
                    self._compile(key, leaves, instance, args, kwargs, packed)
                if self.last_entry is not None:
                    self.last_entry.branch_misses = entry.branch_misses
                return replaced
        if pipeline.pure_but_guards(entry.graph.nodes):
            return self._eager(instance, args, kwargs, hit=True)
        raise error.__cause__ from error

    def _instance(self):
        if self._get_instance is None:
            return None
        instance = self._get_instance()
        if instance is None:
            raise ReferenceError('%s: its model no longer exists'
                                 % self.__name__)
        return instance

    def _fallback(self, instance, args, kwargs, hit=False):
        """Runs a call chainerjit does not compile whole: as compiled
        segments around the statement where the forward reads a value into
        Python (a graph break: :meth:`_run_cut`), or eagerly, the links it
        calls in compiled segments of their own: each link the model holds
        directly runs a jitted forward for the time of the call (as if
        jitted by the user; ``runtime._calls.segments``), so that what
        can be compiled is, around the construct that cannot. Counted as
        :meth:`_eager`."""
        if self._cut is not None:
            return self._run_cut(instance, args, kwargs, hit)
        forwards = self._segment_forwards(instance)
        if not forwards:
            return self._eager(instance, args, kwargs, hit)
        jitted = [fn for _, fn in forwards.values()]
        before = _compiled_calls(jitted)
        with _calls.segments(forwards):
            result = self._eager(instance, args, kwargs, hit)
        self.cache.segmented += _compiled_calls(jitted) > before
        return result

    def _run_cut(self, instance, args, kwargs, hit):
        """Runs a call as the forward cut at its graph break
        (``frontend.breaks``): the statements before the break as one
        jitted function, the break in Python, the statements after as
        another. Counted as compiled where either piece ran compiled."""
        before = _compiled_calls(self._pieces.values())
        result = self._driver(instance, *args, **kwargs) \
            if instance is not None else self._driver(*args, **kwargs)
        self.cache.segmented += 1
        if _compiled_calls(self._pieces.values()) == before:  # all eager
            self.cache.eager += 1
            self.cache.eager_hits += hit
        stopped = next((p for p in self._pieces.values()
                        if _stopped_mostly_eager(p)), None)
        if stopped is not None:
            self._undo_cut(stopped)
        return result

    def _undo_cut(self, piece):
        """Calls no longer run around the graph break: ``piece`` stopped
        recording and runs eagerly, so the driver would only add its own
        cost to eager code. They run as a forward that cannot be cut does
        (eagerly, the links compiled; see :meth:`_fallback`)."""
        self._uncut = '%s stopped recording (%s)' % (
            piece.__name__, piece.budget.stopped)
        logger.info('chainerjit: %s no longer runs around its graph break: '
                    '%s', self.__name__, self._uncut)
        for each in self._pieces.values():
            each.unfreeze()  # the parameters they own writable again
        self._cut, self._driver, self._pieces = None, None, {}

    def _cut_at(self, cut, written=frozenset()):
        """From now on, calls run as ``cut`` (a ``breaks.Cut``): its
        driver calling the jitted pieces. Every call can: the cut
        forward does what the forward does. ``written``: the link
        attributes the forward assigns before reading them, which the
        pieces do not guard (``Caller.written_by_whole``)."""
        self._pieces = dict((what, self._piece(fn, what, written))
                            for what, fn in cut.pieces().items())
        self._driver = cut.driver(self._pieces, self._eager_statement)
        self._cut = cut

    def _piece(self, fn, what, written=frozenset()):
        """A piece of a cut forward, jitted as this function is."""
        piece = JitFunction(fn, self._get_instance, self._options)
        piece.__name__ = '%s<%s>' % (self.__name__, what)
        piece._written_by_whole = self._written_by_whole | written
        piece._is_piece = True
        return piece

    def _eager_statement(self):
        """The context a graph break's statement runs in: the links the
        model holds run compiled, as segments (see :meth:`_fallback`)."""
        forwards = self._segment_forwards(self._instance())
        return _calls.segments(forwards) if forwards else _NO_CONTEXT

    def graph_break(self):
        """The graph break this function's calls run around, or ``None``:
        ``(cut, pieces)``, where the cut (``frontend.breaks.Cut``) has
        ``line``, ``reason`` and ``describe()``, and ``pieces`` is
        ``{'prefix': JitFunction, 'suffix': JitFunction}`` (either may be
        missing; a read in a loop adds ``'body prefix'`` and ``'body
        suffix'``), each with ``cache_info()``, ``explain()`` and the rest;
        the suffix may have a break of its own."""
        if self._cut is None:
            return None
        return self._cut, dict(self._pieces)

    def _segment_forwards(self, instance):
        """``{id(link): (link, jitted forward)}`` for the links
        ``instance`` holds directly whose forward is not jitted already,
        made once for each state of the model's links."""
        if not isinstance(instance, chainer.Link):
            return None
        epoch = epochs.model_epoch(instance)
        count, forwards = self._segments.get(instance, (None, None))
        if count != epoch[0]:
            epochs.watch_model(instance)
            forwards = dict(
                (id(link), (link, self._segment_of(link)))
                for link in instance.children()
                if _runs_its_forward(link) and
                not _calls.jitted_forward(link))
            self._segments[instance] = (epoch[0], forwards)
        return forwards

    def _segment_of(self, link):
        """The jitted forward of a link run as a segment (one per link,
        kept while the link lives)."""
        found = self._segment_links.get(link)
        if found is None:
            found = JitFunction(type(link).forward, weakref.ref(link),
                                self._options)
            found.__name__ = '%s.forward' % type(link).__name__
            self._segment_links[link] = found
        return found

    def segments(self):
        """The jitted forwards of the links that calls run eagerly ran as
        compiled segments, ``{link path: JitFunction}``: each has
        ``cache_info()``, ``explain()`` and the rest."""
        instance = self._instance()
        if not isinstance(instance, chainer.Link):
            return {}
        return dict((name, self._segment_links[link])
                    for name, link in _named_links(instance)
                    if link in self._segment_links)

    def _eager(self, instance, args, kwargs, hit=False):
        """Runs the call eagerly (counted in ``cache_info().eager``;
        ``hit``: the call found an entry, so it is no compiled call)."""
        self.cache.eager += 1
        self.cache.eager_hits += hit
        return self._run(instance, args, kwargs)

    def _training_result(self, entry, leaves, params, symbols, instance,
                         args, kwargs):
        """For the check of a training call at a new size: the result of
        the entry's training program (a node of Chainer's graph, whose
        gradients :func:`_gradients_agree` compares with eager's), its
        effects on the model undone (the model attributes it assigns, an
        ``L.LSTM``'s state, put back, so that eager mode reads them as
        they were); ``None`` where it does not apply (inference) or
        raised."""
        if not (chainer.config.enable_backprop and entry.needs_grad(leaves)
                and entry.training is not None):
            return None
        return _undone(entry, params, instance, lambda: _calls.run_entry(
            self, entry, leaves, params, symbols, instance, args, kwargs,
            True))

    def _eager_reference(self, entry, params, instance, args, kwargs):
        """An eager result of the call whose gradients a check compares
        (``chainer.grad``), its effects on the model undone: not the one
        the call returns, whose graph the user's backward then runs (a
        Chainer function may run its backward once only: ``F.hinge``
        scales its retained arrays in place); ``None`` where it raised."""
        def run():
            _checking[0] += 1
            try:
                return self._run(instance, args, kwargs)
            finally:
                _checking[0] -= 1
        return _undone(entry, params, instance, run)

    def _check_eagerly(self, instance, args, kwargs, hit=False):
        """:meth:`_eager`, for a check of a program at a new size: jitted
        functions it calls that miss run as they are, not compiled for
        the sizes of a call that only checks."""
        _checking[0] += 1
        try:
            return self._eager(instance, args, kwargs, hit)
        finally:
            _checking[0] -= 1

    def _choose_backend(self, entry, inputs, training):
        """Makes the choice of backend due for ``entry`` (``'auto'``, once
        its calls have run for a while: ``runtime.backends.Deferred``) on
        the program ``inputs`` of the call about to run. Where choosing
        fails, the VM keeps the program."""
        try:
            entry.choice_seconds += backends.choose_deferred(
                self._options.get('providers'), entry, inputs, training)
        except Exception as error:  # the VM's program still runs the call
            entry.backend_note = 'onnxruntime not used: %s' % (
                backends.first_line(error))
        logger.info('chainerjit: %s: %s runs on %s', self.__name__,
                    'training' if training else 'inference',
                    entry.describe_backend())

    def _run(self, instance, args, kwargs):
        """The undecorated forward, called on the arguments."""
        if instance is not None:
            return self._fn(instance, *args, **kwargs)
        return self._fn(*args, **kwargs)

    # --- compiling ----------------------------------------------------------

    def _compile(self, key, leaves, instance, args, kwargs, packed=None,
                 batched=None, varying=None):
        """Compiles the call (``runtime.compile.compile_call``; ``batched``
        and ``varying`` as it takes them) and caches its entry; returns the
        call's result. A call with packed lists (see :meth:`call_key`) may
        get no entry: the function then records those lists item by item
        from the next call on. Likewise a call with varying number
        arguments: they stay in the key from then on."""
        compiled = pipeline.compile_call(self._caller(instance, key), key,
                                         leaves, args, kwargs, packed,
                                         batched, varying)
        if varying is not None and compiled.entry is None:
            self._numbers_static = True
        if compiled.unpack is not None:
            self._unpacked.add(compiled.unpack)
        if compiled.joins:  # calls join from now on: drop the others
            self._joins = compiled.joins
            self._rejoin_modes.clear()
            self._remove_entries(joined=False)
            self._remove_joined_otherwise(compiled.joins)
        elif compiled.joins is not None:
            self._forget_joined()
        if compiled.rejoin and key[:2] in self._rejoined_modes:
            self._forget_joined()  # (found again, their draws unseen still)
        elif compiled.rejoin:  # (the next call of its mode finds them again)
            self._rejoin_modes.add(key[:2])
            self._rejoined_modes.add(key[:2])
        if compiled.single_unjoined is True or \
                compiled.single_unjoined and self._holds_joined(key):
            self._single_unjoined = True
        entry = compiled.entry
        if entry is None:
            return compiled.result
        if isinstance(entry.symbolic, ragged.Ragged):
            # (Items alike at a call are of lengths this entry serves.)
            self._ragged_paths.update(packing.sequence_paths(args, kwargs))
        self.last_entry = entry
        if entry.cut is not None and self._cut is None and not self._uncut:
            # (what a piece reads, its own recording says)
            self._cut_at(entry.cut, entry.written_first)
        self._made_read_only += entry.made_read_only
        self.cache.compiles += entry.fallback is None
        if entry.escaped and self.budget.note_fallback(entry.fallback):
            self._warn_stopped()
        evicted = self.cache.insert(entry)
        if evicted is not None:
            self.budget.note_eviction(evicted)
        if isinstance(entry.symbolic, (symbolic_module.Symbolic,
                                       batch.TripsAndBatch)):
            for other in batch.generalized_by(self.cache, entry):
                self.cache.remove(other)  # (a first call of a few steps)
        self._note_item_counts(entry)
        self._plain = self._is_piece and entry.program is not None and \
            not entry.graph.nodes
        logger.info('chainerjit: %s: cache miss (%s); %s in %.3f s%s',
                    self.__name__, compiled.miss_reason,
                    'runs eagerly' if entry.fallback else 'compiled %d '
                    'instructions' % entry.n_instructions,
                    entry.compile_seconds,
                    '; evicted %s' % evicted.signature if evicted else '')
        return compiled.result

    def _note_item_counts(self, entry):
        """Warns, once, where a new entry serving any lengths of a list's
        items (``runtime.ragged``) has another number of items than an
        entry that does the same: that number stays in the key."""
        counts = _item_counts(entry)
        if not counts:
            return
        for other in self.cache.entries():
            theirs = _item_counts(other) if other is not entry else {}
            lists = sorted(name for name, n in counts.items()
                           if theirs.get(name, n) != n)
            if lists:
                errors.warn_once(
                    (self._warn_site, 'item counts'), errors.RecompileWarning,
                    'chainerjit: %s: the number of items of %s stays in the '
                    'cache key (each new number compiles again): the '
                    'program takes each item as an input of its own, at any '
                    'length' % (self.__name__, ', '.join(lists)))
                return

    def _caller(self, instance, key=None):
        """What the compile pipeline needs from this function, for a call
        on ``instance`` (of ``key``)."""
        return pipeline.Caller(
            fn=self._fn, instance=instance, name=self.__name__,
            check=self._check, backend=self._options.get('backend', 'auto'),
            providers=self._options.get('providers'),
            freeze=self._options.get('freeze', False),
            lengths_unsound=self._lengths_unsound,
            warn_fallback=self._warn_fallback,
            warn_unrolled=self._warn_unrolled,
            warn_items=self._warn_items,
            warn_joins=self._warn_joins,
            warn_batch=self._warn_batch_static,
            warn_varying=self._warn_varying,
            warn_sizes=self._warn_sizes,
            written_by_whole=self._written_by_whole,
            join_lists=(self._joins is None or key is not None and
                        key[:2] in self._rejoin_modes) and
            not self._batch_static and
            self._options.get('dynamic') is not False and
            self._options.get('backend', 'auto') != 'onnxruntime',
            explain_miss=functools.partial(self._miss_reason,
                                           instance=instance),
            on_backprop_program=functools.partial(_note_jitted_link,
                                                  instance))

    def _miss_reason(self, sig, key, instance):
        entries = self.cache.entries()
        if not entries:
            return 'first call'
        lines = min((self._differences(e, sig, key, instance)
                     for e in entries), key=len)
        kinds = [_change_kind(line) for line in lines]
        self._changes.update(kinds)
        self.budget.note_miss(_rare_change(kinds, sig))
        if self._keeps_recompiling() and not self._warned_recompile:
            self._warned_recompile = True
            errors.warn_once(
                (self._warn_site, 'recompile'), errors.RecompileWarning,
                'chainerjit: %s has compiled %d times; what keeps '
                'changing: %s. Each new value is a new cache entry.%s'
                % (self.__name__, self.cache.misses, self._what_changes(),
                   _attribute_hint(self._changes)))
        return '; '.join(lines) or 'evicted earlier'

    def _keeps_recompiling(self):
        """Have the misses reached ``recompile_limit`` with more than half
        as many entries made and kept (or evicted)? Misses that made
        entries for any size, which replaced those of one size, or made
        none, do not count so."""
        limit = self._options['recompile_limit']
        return self.cache.misses >= limit and \
            len(self.cache.entries()) + self.cache.evictions > limit // 2

    @staticmethod
    def _differences(entry, sig, key, instance):
        general = entry.symbolic.generalize(key) if entry.symbolic and \
            hasattr(entry.symbolic, 'generalize') else None
        if entry.key == key or general is not None and \
                general[0] == entry.key:  # (a key it serves: its guards)
            return entry.guard_failures(instance)
        untied = getattr(entry.symbolic, 'untied', None)
        return entry.signature.diff(sig) + (untied(key, [
            name for name, _ in sig.items]) if untied else []) + \
            entry.guard_failures(instance)  # (a model attribute, too)

    def _warn_unrolled(self, error, loc):
        errors.warn_once((self._warn_site, loc, 'unrolled'),
                         errors.LoopWarning,
                         errors.unrolled_message(self.__name__, error, loc))

    def _warn_stopped(self):
        if self._warned_stopped:
            return
        self._warned_stopped = True
        errors.warn_once(
            (self._warn_site, 'stopped'), errors.RecompileWarning,
            'chainerjit: %s no longer records new signatures: %s. They run '
            'eagerly from now on; the entries compiled so far still run. '
            'cache_clear() starts recording again. What changed between '
            'calls: %s.' % (self.__name__, self.budget.stopped,
                            self._what_changes() or 'nothing'))

    def _what_changes(self):
        return ', '.join('%s (%d times)' % kv
                         for kv in self._changes.most_common(3))

    def _warn_fallback(self, error, loc, cut=None):
        if cut is not None:
            errors.warn_once((self._warn_site, loc, 'break'),
                             errors.GraphBreakWarning,
                             errors.break_message(self.__name__, error, loc,
                                                  cut.describe_lines()))
            return
        errors.warn_once((self._warn_site, loc, type(error)),
                         errors.FallbackWarning,
                         errors.fallback_message(self.__name__, error, loc))

    # --- inspection ---------------------------------------------------------

    def cache_info(self):
        """``CacheInfo(hits, misses, maxsize, currsize, compiled, eager,
        compiles, segmented)``: ``functools.lru_cache``'s four, then the
        calls a compiled program answered, the calls that ran eagerly
        besides recordings, the programs compiled, and the calls that ran
        in compiled segments (see ``runtime.cache.CacheInfo``)."""
        info = self.cache.info()
        if self._pieces:  # cut at a graph break
            info = info._replace(compiles=info.compiles + sum(
                p.cache_info().compiles for p in self._pieces.values()))
        return info

    def cache_clear(self):
        """Forgets every compiled program and resets the statistics; the
        parameters frozen programs owned become writable again."""
        self.unfreeze()
        self.cache.clear()
        self._sizes_seen = batch.SizesSeen()
        self.budget.clear()
        self._cut, self._driver, self._pieces = None, None, {}
        self._uncut = None
        self._plain = False
        self._warned_stopped = False
        self._changes.clear()
        self._warned_recompile = False

    def unfreeze(self):
        """Drops the programs that own the model's parameters
        (``jit(freeze=True)``) and makes the parameters they made read-only
        writable again; the next calls record anew."""
        for entry in self.cache.entries():
            if entry.frozen:
                self.cache.remove(entry)
        backends.unfreeze(self._made_read_only)
        self._made_read_only = []
        for piece in self._pieces.values():
            piece.unfreeze()

    def cache_entries(self):
        """The cache entries, least recently used first. Each has
        ``signature``, ``hits``, ``compile_seconds``, ``n_instructions``,
        ``graph`` (IR), ``program`` (bytecode; ``program.dis()``) and
        ``describe()``."""
        return self.cache.entries()

    def cache_report(self):
        """A table of the entries with hits and compile times, and why
        new signatures no longer record, if they do not."""
        report = self.cache.report()
        if self.budget.stopped:
            report += ('\nNew signatures run eagerly, unrecorded: %s.'
                       % self.budget.stopped)
        segments = dict((name, fn) for name, fn in self.segments().items()
                        if fn.cache_info().compiled)
        if segments:
            report += '\nCalls run eagerly ran these links compiled: %s.' % (
                ', '.join('%s (%d compiled calls)' % (
                    name, fn.cache_info().compiled)
                    for name, fn in sorted(segments.items())))
        if self._uncut:
            report += '\nCalls no longer run around a graph break: %s.' % (
                self._uncut)
        if self._plain:
            report += '\nIts program holds no op: calls run as Python.'
        if self._cut is not None:
            report += '\nEvery call runs around a %s.%s' % (
                self._cut.describe(), ''.join(
                    '\n%s:\n%s' % (piece.__name__, _indented(
                        piece.cache_report()))
                    for _, piece in sorted(self._pieces.items())))
        return report

    def explain(self, *args, **kwargs):
        """Says which entry a call with these arguments would use, or, on
        a miss, how it differs from the closest entry. Runs nothing."""
        instance = self._instance()
        if self._cut is not None:
            return self._explain_cut(args, kwargs)
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
                return '%s would hit entry #%d: %s%s%s' % (
                    self.__name__, i, entry.signature,
                    _how_it_runs(entry, config.enable_backprop and
                                 entry.needs_grad(leaves)),
                    self._explain_segments(instance)
                    if entry.fallback else '')
        return self._explain_miss(instance, key, leaves, args, kwargs) + (
            '\nIt runs eagerly, unrecorded: %s.%s' % (
                self.budget.stopped, self._explain_segments(instance))
            if self.budget.stopped else '')

    def _explain_cut(self, args, kwargs):
        """Explains a call of a function cut at a graph break: the break,
        and the entry of the statements before it the call would use (those
        after it take what the break gives, unknown until it runs)."""
        text = '%s runs around a %s' % (self.__name__, self._cut.describe())
        prefix = self._pieces.get('prefix')
        if prefix is not None:
            text += '\n' + prefix.explain(*args, **kwargs)
        suffix = self._pieces.get('suffix')
        if suffix is not None:
            text += '\n%s: %d cache entries (see cache_report())' % (
                suffix.__name__, suffix.cache_info().currsize)
        return text

    def _explain_segments(self, instance):
        forwards = self._segment_forwards(instance)
        if not forwards:
            return ''
        return '\nThe links it calls run compiled, as segments: %s.' % (
            ', '.join(sorted(name for name, link in _named_links(instance)
                             if id(link) in forwards)))

    def _explain_miss(self, instance, key, leaves, args, kwargs):
        entries = self.cache.entries()
        if not entries:
            return '%s: cache miss: the cache is empty' % self.__name__
        sig = pipeline.call_signature(self._fn, instance, key, leaves, args,
                                      kwargs)
        diffs = [(len(d), i, d) for i, d in enumerate(
            self._differences(e, sig, key, instance) for e in entries)]
        _, nearest, lines = min(diffs)
        return ('%s: cache miss: closest entry #%d differs in\n%s' % (
            self.__name__, nearest,
            '\n'.join('  * %s' % line for line in lines +
                      entries[nearest].size_notes())))


_NO_CONTEXT = contextlib.nullcontext()
_RAISED = object()  # a program that raised at a new length
_NOT_WIDENED = object()  # no entry of another batch size serves the call
_VALUES_SEEN = object()  # a hit whose values need no check against eager
_checking = [0]  # calls checking a program against eager, running


def _serves(entry, other):
    """Does ``entry``'s program serve the calls of ``other``'s key (one of
    fixed sizes)?"""
    if entry is None or entry is other or entry.symbolic is None or (
            other.symbolic is not None and
            not isinstance(other.symbolic, scalars.VaryingScalars)):
        return False
    general = entry.symbolic.generalize(other.key)
    return general is not None and general[0] == entry.key


def _numbers_missed(entry, key, batched, int_varies):
    """``(paths, batched)`` where ``key`` misses ``entry`` only for the
    values of number arguments (at ``paths``), its sizes left open as the
    entry leaves them; or for those and its batch size, ``batched`` (a
    ``batch.Batched`` of the call, or the entry's batch): the call is to
    be recorded with both open. Else ``None``."""
    if entry.fallback is not None:
        return None
    symbolic = entry.symbolic
    if isinstance(symbolic, scalars.VaryingScalars):  # numbers already
        numbers = symbolic.generalize(key) if batched else None
        both = numbers and (batched.generalize(numbers[0]),
                            batched.generalize(entry.key))
        if both and None not in both and both[0][0] == both[1][0]:
            return symbolic.paths, batched
        return None
    own = batch.Batched(symbolic.leaves, symbolic.axes) if isinstance(
        symbolic, batch.RowsBatched) else None  # any batch size already
    for by_batch in (None, batched) if batched else (None,):
        general = _sizes_open(entry, key, by_batch)
        paths = general and scalars.varying_paths(general[0], general[1],
                                                  int_varies)
        if paths:
            return paths, by_batch or own
    return None


def _sizes_open(entry, key, batched=None):
    """``(key, the entry's key)`` as an entry with no symbolic sizes, or
    with symbolic trip counts, lengths of list items or batch size only
    (the VM's), reads them (those sizes left open; with ``batched``, a
    ``batch.Batched``, an entry with no symbolic sizes reads both with
    their batch size open); else ``None``."""
    if batched is not None:
        if entry.symbolic is not None:
            return None
        general = batched.generalize(key), batched.generalize(entry.key)
        return None if None in general else (general[0][0], general[1][0])
    if entry.symbolic is None:
        return key, entry.key
    if not isinstance(entry.symbolic, (symbolic_module.Symbolic,
                                       ragged.Ragged, batch.RowsBatched,
                                       batch.TwoAxes)):
        return None
    general = entry.symbolic.generalize(key)
    return None if general is None else (general[0], entry.key)


def _is_joined(entry):
    """Is ``entry`` one of joined calls (``frontend.joining.mark_key``)?"""
    return entry.key[2][:1] == ('joined',)


def _item_counts(entry):
    """``{list name: number of items}`` of the lists whose items' lengths
    an entry takes at any value."""
    sizes = getattr(entry.symbolic, 'sizes', entry.symbolic)
    if not isinstance(sizes, ragged.Ragged):
        return {}
    return dict((name, len(leaves)) for name, leaves in ragged.items_by_list(
        entry.signature, sizes.leaves).items())


def _size_to_check(entry, key, symbols):
    """What the first call at a new size of a symbolic entry checks
    against eager: its trip counts, ``(batch size,)``, or the lengths of
    list items (``runtime.ragged``, at its first calls); else ``None``."""
    if isinstance(entry.symbolic, batch.Batched):
        return (entry.symbolic.size_of(key),)
    if isinstance(entry.symbolic, _CHECKING_SIZES):
        return entry.symbolic.to_check(key, entry.verified_lengths, symbols)
    return tuple(symbols) if symbols else None


#: How the sizes of a joined call's lists that no key holds are noted
#: when checked against eager (:func:`_derived_to_check`).
_DERIVED = 'derived'


def _derived_to_check(entry, joined, args, kwargs):
    """``('derived', sizes)``: the lengths of the longest items and the
    items' totals of the lists of a joined call (``joined``; ``args`` and
    ``kwargs`` the caller's), where the call is to be checked against
    eager at them (``lengths.to_check_sizes``, each as a batch size is)
    because the forward read the shape of a value it computed; else
    ``None``. No key holds them, but a block padded to the longest has
    that width, and the items joined that many rows: a size the
    forward's Python baked in shows at another."""
    if not entry.reads_shapes or not isinstance(joined, joining.Joined):
        return None
    sizes = tuple(n for j in joined.joins for n in ragged.derived_sizes(
        [len(a) for a in packing.holder(args, kwargs, j.path)[j.path[1]]]))
    seen = [c[1] for c in entry.verified_lengths
            if type(c) is tuple and c[:1] == (_DERIVED,)]
    return (_DERIVED, sizes) if lengths.to_check_sizes(sizes, seen) \
        else None


# The symbolic sizes that say what a call checks (``to_check(key, checked,
# symbols)``).
_CHECKING_SIZES = (batch.RowsBatched, batch.TripsAndBatch, batch.TwoAxes,
                   ragged.Ragged, scalars.VaryingScalars,
                   scalars.SizesAndNumbers, symbolic_module.Symbolic)


def _checks_items(sizes):
    """Whether a call checked against eager at the sizes of ``sizes``
    verifies several items (a trip count and a batch size, or the trip
    counts of two lengths), each once."""
    return isinstance(sizes, batch.TripsAndBatch) or \
        isinstance(sizes, symbolic_module.Symbolic) and bool(sizes.more)


#: The symbolic sizes of entries serving every batch size, and of those
#: serving every length.
_BATCHES = (batch.BatchAxis, batch.TripsAndBatch, batch.TwoAxes)
_NUMBERS = (scalars.VaryingScalars, scalars.SizesAndNumbers)
_LENGTHS = (symbolic_module.Symbolic, batch.TripsAndBatch, ragged.Ragged)

_RERECORD_LIMIT = 3  # guard failures after which an entry stops recording


def _note_jitted_link(instance):
    """Lets ``optimizers`` take its fast update for this model."""
    if isinstance(instance, chainer.Link):
        optimizers.jitted_links.add(instance)


def _install():
    """What the first use of :func:`jit` sets up for the process: the
    fast paths into Chainer, and OpenBLAS's kernels for this CPU where it
    fell back to older ones (``runtime.blas``)."""
    fastpaths.install()
    blas.use_cpu_kernels()


def _rebuild(fn, instance, options):
    _install()
    return JitFunction(fn, None if instance is None else lambda: instance,
                       options)


def _how_it_runs(entry, grad):
    if entry.fallback:
        return ' (runs eagerly: %s)' % entry.fallback
    if grad:
        return ' (with gradients: %s)' % (
            'runs eagerly, an op has no gradient rule'
            if entry.training is None else 'compiled forward and backward')
    return ' (runs on %s)' % entry.describe_backend()


def _runs_its_forward(link):
    """True for a link whose call runs its ``forward`` through
    ``Link.__call__`` (not an older link that defines ``__call__``
    itself), which a segment can take over."""
    return callable(getattr(type(link), 'forward', None)) and \
        type(link).__call__ is chainer.Link.__call__


def _named_links(instance):
    """``(dotted path, link)`` of each link a model holds, itself aside:
    ``('enc.l1', link)``."""
    return [(name.lstrip('/').replace('/', '.'), link)
            for name, link in instance.namedlinks(skipself=True)]


def _indented(text):
    return '\n'.join('  ' + line for line in text.splitlines())


def _stopped_mostly_eager(piece):
    """Has a piece of a cut forward stopped recording, fewer than half its
    calls compiled?"""
    cache = piece.cache
    return piece.budget.stopped is not None and \
        2 * cache.compiled < cache.hits + cache.misses


def _undone(entry, params, instance, run):
    """``run()`` for a check, its effects on the model put back (the
    running averages and random draws of ``entry``'s program, and the
    model attributes it assigns: ``runtime.undo``); ``None`` where it
    raised (the forward's check then has the last word)."""
    snapshot = undo.Snapshot(entry.graph, params,
                             entry.assigned_attributes(instance))
    try:
        return run()
    except Exception:
        return None
    finally:
        snapshot.restore()


def _gradients_agree(eager, trained, arguments, instance):
    """Do eager's result and a training program's give the same gradients
    of the Variables among the ``arguments`` (``(args, kwargs)``, as the
    user gave them: the items of a list too) and of the model's
    parameters that need them (``runtime.compile.gradients_differ``)?
    Where the comparison itself fails, the forward's check has the last
    word."""
    try:
        given = []
        signature.flatten(arguments, given)
        inputs = [v for v in given if isinstance(v, chainer.Variable) and
                  v.requires_grad]
        if isinstance(instance, chainer.Link):
            inputs += [p for p in instance.params() if p.requires_grad and
                       p.array is not None]
        problem = pipeline.gradients_differ(eager, trained, inputs)
    except Exception:
        return True
    if problem is not None:
        logger.info('chainerjit: at a new size, %s', problem)
    return problem is None


def _compiled_calls(functions):
    """The compiled calls of jitted functions so far."""
    return sum(fn.cache.compiled for fn in functions)


def _rare_change(kinds, sig):
    """What the changes of a miss (``kinds``, see :func:`_change_kind`)
    changed if that rarely comes back, else ``None``: a Python argument's
    value, the items of a list or dict argument, or the shapes of the
    items of a list of arrays whose shapes differ (sequences of different
    lengths, whose combinations rarely repeat)."""
    if any(kind.endswith(': value') for kind in kinds):
        return 'a new value of a Python argument'
    if any(kind.endswith((': added', ': removed')) for kind in kinds):
        return 'a new structure of the arguments (items added or removed)'
    lists = _ragged_lists(sig)
    for kind in kinds:
        name, _, what = kind.partition(': ')
        if what.startswith('shape') and ragged.list_of(name) in lists:
            return 'new lengths of the items of %s' % ragged.list_of(name)
    return None


def _ragged_lists(sig):
    """The list arguments of a signature whose items are arrays of
    different shapes."""
    lists = ragged.items_by_list(sig, range(len(sig.items)))
    return set(base for base, leaves in lists.items()
               if len(set(sig.items[leaf][1].shape for leaf in leaves)) > 1)


def _attribute_hint(changes):
    """What to do where the model's attributes' values keep changing
    (``changes``: their kinds, ``'(model).beta: value'``), or ``''``."""
    names = sorted(set(kind.partition(': ')[0][len('(model).'):]
                       for kind in changes
                       if kind.startswith('(model).') and
                       kind.endswith(': value')))
    if not names:
        return ''
    return ' The forward reads numbers the model holds (%s): each value ' \
        'is part of what a program assumes of the model. Pass a number ' \
        'that changes as an argument instead (a float or int argument ' \
        'that changes is an input of the program).' % ', '.join(
            'self.%s' % name for name in names)


def _change_kind(line):
    """``'x: shape (32, 784) -> (17, 784) at axis 0'`` -> ``'x: shape at
    axis 0'``: what changed, without the values."""
    name, _, rest = line.partition(': ')
    what = rest.split(' ')[0] if rest else ''
    if what not in ('shape', 'dtype', 'device', 'requires_grad',
                    'is_variable', 'link', 'length', 'missing', 'added',
                    'removed'):
        what = 'value'  # a static argument, a setting: 'k: 2.0 -> 3.0'
    where = rest[rest.index(' at axis'):] if ' at axis' in rest else ''
    return '%s: %s%s' % (name, what, where)
