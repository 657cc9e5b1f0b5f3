"""Choosing what runs an entry's program: chainerjit's VM over NumPy
kernels, or onnxruntime sessions (``backend.ort``).

``jit(backend=...)`` says which:

* ``'numpy'``: the VM, bit for bit the kernels' results;
* ``'onnxruntime'``: the session wherever the program converts and its
  result passes the self-check (sessions for the runs of nodes that
  convert, the VM between them, where some do not), else the VM;
* ``'auto'``: the VM, until the program's calls have run
  :data:`CHOOSE_AFTER_SECONDS` (:class:`Deferred`); then both are run on
  a call's inputs and the faster is kept, where the session's outputs
  agree with the VM's (:func:`choose_deferred`).

Only a program without side effects is run by onnxruntime: no random or
stateful node, no node run through Chainer's own code, no branch on an
array value; and only on the CPU (NumPy arrays). A training program
may draw from NumPy's generator (dropout) and update batch
normalization's running averages: those nodes run on the VM between
sessions, and the runs that choose are undone (``runtime.undo``). The
entry records the choice and the times measured (``entry.backend``,
``entry.backend_times``; shown by ``describe()`` and ``cache_report()``).
In serving mode (``jit(freeze=True)``) the session
owns the parameters, which become read-only (``entry.frozen``).
"""

import functools
import time

import numpy

from chainerjit import errors
from chainerjit.backend import ort
from chainerjit.frontend import guards
from chainerjit.passes import autodiff
from chainerjit.ops import structural
from chainerjit.runtime import _calls
from chainerjit.runtime import undo

BACKENDS = ('auto', 'numpy', 'onnxruntime')
#: Timed runs of each program when choosing (the median is compared),
#: in interleaved rounds after one untimed run; fewer where a first run
#: took more than :data:`SLOW_RUN` seconds, so that choosing costs at most
#: a few tenths of a second of compile time.
TIMED_RUNS = 9
SLOW_RUN = 0.005
SLOW_TIMED_RUNS = 3
#: A session is kept where it ran in at most this share of the VM's time.
#: On a busy host two runs of one program differ by several per cent, and
#: the VM gives eager's bits.
FASTER_BY = 0.9
#: ``'auto'`` times the backends once an entry's calls have run this long
#: on the VM, about as long as timing them takes (the rule of renting
#: skis until the rent paid would have bought them): a program called a
#: few times never pays for sessions it would not keep. The call that
#: finds it due takes that much longer. 0: when the program is compiled.
CHOOSE_AFTER_SECONDS = 0.1
#: The most bytes of parameters a session owns outside serving mode
#: (``WhileUnchanged``: the session holds them, and each call hashes the
#: model's arrays).
OWNED_BYTES = 64 << 20


#: How :class:`WhileUnchanged` sees a change of the parameters: a hash of
#: their bytes, which reads them once (a comparison with copies reads
#: twice as many bytes, and the copies take as much memory again); two
#: different arrays hash alike with a chance of one in 2 ** 128.
#: ``None`` (no ``xxhash``): no session owns the parameters outside
#: serving mode.
digest = guards.digest

#: The name of a session owning the parameters in ``entry.backend_times``.
OWNED = 'onnxruntime owning the parameters'
OWNED_NOTE = 'the session owns the parameters while they do not change'


def check_option(backend, freeze=False):
    if backend not in BACKENDS:
        raise ValueError('chainerjit: backend must be one of %s, not %r'
                         % (', '.join(map(repr, BACKENDS)), backend))
    if freeze and backend == 'numpy':
        raise ValueError("chainerjit: freeze=True needs onnxruntime "
                         "(backend='onnxruntime' or 'auto')")


def defers(backend, freeze=False):
    """Does ``backend`` choose once an entry has run for a while
    (:class:`Deferred`) rather than when its program is compiled?"""
    return backend == 'auto' and not freeze and CHOOSE_AFTER_SECONDS > 0


class Deferred(object):
    """The choices ``'auto'`` has still to make for an entry, one per call
    mode (``False``: inference, ``True``: training): the mode's program
    runs on the VM until its calls have taken :data:`CHOOSE_AFTER_SECONDS`
    (``seconds``, by mode; a training call's forward only, as its
    backward runs later, in Chainer's backprop)."""

    def __init__(self, modes):
        self.seconds = dict.fromkeys(modes, 0.0)

    def due(self, training):
        return self.seconds.get(training, -1.0) >= CHOOSE_AFTER_SECONDS

    def ran(self, training, seconds):
        if training in self.seconds:
            self.seconds[training] += seconds

    def __repr__(self):
        return 'onnxruntime timed once the calls have run %.2f s (%s)' % (
            CHOOSE_AFTER_SECONDS, ', '.join(
                '%s %.3f s so far' % ('training' if mode else 'inference',
                                      seconds)
                for mode, seconds in sorted(self.seconds.items())))


def choose_deferred(providers, entry, inputs, training):
    """Makes the choice ``entry.deferred`` has due for the call mode
    ``training`` on a call's program ``inputs`` (arguments, parameters,
    symbols), before the call runs: a session must agree there with the
    VM's outputs and run faster. Returns the seconds it took."""
    start = time.perf_counter()
    deferred = entry.deferred
    if deferred is None or deferred.seconds.pop(training, None) is None:
        return 0.0  # another thread's call made it
    if not deferred.seconds:
        entry.deferred = None
    if training:
        entry.training_note = choose_training('auto', providers,
                                              entry.training, inputs)
    else:
        choose('auto', providers, entry, inputs)
    return time.perf_counter() - start


def choose(backend, providers, entry, inputs, problem_of=None,
           freeze=False):
    """Sets ``entry.program`` to the backend's program for ``backend``
    (one of :data:`BACKENDS`), its sessions on onnxruntime's execution
    ``providers`` (``None``: the CPU's). ``inputs`` are inputs of the
    program (the recorded ones, or a call's), ``problem_of(program)``
    what is wrong with a program's result there (``None`` if nothing: the
    self-check's comparison with the eager result); by default, where it
    differs from the VM's outputs. With ``freeze``, the session owns the
    parameters (``ort.session_program``) and, once chosen, makes them
    read-only."""
    entry.backend = 'numpy'
    if backend == 'numpy' or entry.program is None:
        return
    reason = why_not(entry.graph, inputs)
    if reason is not None:
        entry.backend_note = 'onnxruntime not used: %s' % reason
        return
    if problem_of is None:
        problem_of = _differing_from(entry.program, inputs)
    per_param = _frozen(entry.graph, inputs) if freeze else None
    frozen = [a for a in per_param or () if a is not None]
    made_read_only = ort.freeze(frozen)  # as the session's runs check
    try:
        _session_if_faster(backend, providers, entry, inputs, problem_of,
                           per_param)
    finally:
        if entry.backend == 'numpy':
            unfreeze(made_read_only)
    if entry.backend != 'numpy':
        entry.frozen, entry.made_read_only = frozen, made_read_only


def unfreeze(arrays):
    """Makes arrays :func:`ort.freeze` made read-only writable again."""
    for array in arrays:
        array.flags.writeable = True


def _differing_from(vm, inputs):
    """``problem_of(program)`` for :func:`choose`: how a program's outputs
    on ``inputs`` differ from those of the VM's program ``vm`` (of a pure
    graph), or ``None``."""
    expected = _comparable(vm.run(inputs))

    @functools.lru_cache(maxsize=None)
    def rounding_noise():
        return _comparable(vm.run(_nudged(inputs)))
    return lambda program: _differs(
        expected, _comparable(program.run(inputs)), rounding_noise)


def _comparable(outputs):
    """Program outputs as arrays to compare (:func:`_differs`): copies of
    the arrays (the VM's may be buffers its next run writes), numbers as
    0-d arrays."""
    return [numpy.array(a) if isinstance(
        a, (numpy.ndarray, numpy.generic, int, float)) else a
        for a in outputs]


def _session_if_faster(backend, providers, entry, inputs, problem_of,
                       frozen):
    """The session's program, where it passes the self-check (and with
    ``'auto'``, runs clearly faster than the VM's), becomes the entry's;
    it owns the ``frozen`` parameters (see ``ort.session_program``).
    With ``'auto'`` outside serving mode, an inference entry also races a
    session owning the parameters while they do not change
    (:class:`WhileUnchanged`)."""
    try:
        session, split = _session_program(entry.graph, providers, frozen)
        problem = problem_of(session)
        reason = problem and 'its result differs: %s' % problem
    except Exception as error:  # no converter, or onnxruntime refused
        reason = first_line(error)
    if reason is not None:
        entry.backend_note = 'onnxruntime not used: %s' % reason
        return
    if backend == 'auto':
        candidates = {'numpy': entry.program, 'onnxruntime': session}
        if frozen is None and split is None and not entry.key[1]:
            owning = _owning(providers, entry, inputs, problem_of)
            if owning is not None:
                candidates[OWNED] = owning
        times = entry.backend_times = dict(zip(
            candidates, _medians(list(candidates.values()), inputs)))
        kept = _kept(times)
        if kept == 'numpy':
            return
        if kept == OWNED:
            owning = candidates[OWNED]
            owning.fallback = entry.program if _kept(
                {'numpy': times['numpy'], 'onnxruntime':
                 times['onnxruntime']}) == 'numpy' else session
            session, split = owning, OWNED_NOTE
    entry.program = session
    entry.backend = 'onnxruntime'
    entry.backend_note = split


def _kept(times):
    """The name in ``times`` (seconds by program name, ``'numpy'`` the
    VM's) to keep: the fastest session where it ran at most
    :data:`FASTER_BY` of the VM's time, else the VM, whose results are
    eager's bits (a session faster by less than the host's noise is no
    gain)."""
    best, name = min((seconds, name) for name, seconds in times.items()
                     if name != 'numpy')
    return name if best <= FASTER_BY * times['numpy'] else 'numpy'


def _owning(providers, entry, inputs, problem_of):
    """A :class:`WhileUnchanged` program for an inference entry, its
    fallback still to be set, where its session owns parameters (those
    with their own memory, at most :data:`OWNED_BYTES` of them) and
    passes the self-check; else ``None``."""
    if digest is None:
        return None
    per_param = _frozen(entry.graph, inputs)
    start = len(entry.graph.inputs)
    positions = tuple(start + k for k, array in enumerate(per_param)
                      if array is not None)
    if not positions or sum(inputs[k].nbytes for k in positions) > \
            OWNED_BYTES:
        return None
    try:
        session = ort.session_program(entry.graph, providers, per_param,
                                      read_only=False)
        program = WhileUnchanged(session, None, positions, inputs)
        if problem_of(program) is None:
            return program
    except Exception:  # onnxruntime refused
        pass
    return None


class WhileUnchanged(object):
    """An inference program whose session owns the parameters at
    ``positions`` of the inputs (initializers, which onnxruntime folds
    and prepacks), though the model may still change them: each call
    first hashes their bytes (:data:`digest`) and compares the hashes
    with those of the arrays the session was built from. Once one differs
    (an optimizer's update, a snapshot loaded), that call and every later
    one run ``fallback``, the program that takes the parameters as
    inputs, and the session is dropped. A parameter replaced by an array
    of the same bytes changes nothing."""

    def __init__(self, owned, fallback, positions, inputs):
        self.owned, self.fallback = owned, fallback
        self.positions = positions
        self.digests = [digest(inputs[k]) for k in positions]

    def run(self, inputs):
        if self.owned is not None:
            if _calls.first_changed(inputs, self.positions, self.digests,
                                    digest) < 0:
                return self.owned.run(inputs)
            self.owned = None  # for good
        return self.fallback.run(inputs)

    def __getattr__(self, name):
        return getattr(self.owned or self.fallback, name)


def _session_program(graph, providers, frozen, vm_when_faster=False):
    """``(program, how it is split)`` running ``graph`` in onnxruntime:
    one session (split ``None``); or where some nodes do not convert (and
    nothing is frozen), sessions for the runs of nodes that do and the
    rest on the VM, with the nodes it runs faster where
    ``vm_when_faster`` (``ort.region_program``)."""
    if not vm_when_faster:
        try:
            return ort.session_program(graph, providers, frozen), None
        except errors.ExportError:
            if any(array is not None for array in frozen or ()):
                raise
    program, sessions, left = ort.region_program(graph, providers,
                                                 vm_when_faster)
    return program, 'in %d session%s; on the VM: %s' % (
        sessions, 's' if sessions > 1 else '', ', '.join(left))


def choose_training(backend, providers, training, inputs):
    """The training program's forward and backward run in onnxruntime
    (sessions for the runs of nodes that convert, gradients included, the
    rest on the VM), each where its results on the recorded ``inputs``
    agree with the VM program's within the self-check's tolerance and,
    with ``'auto'``, it runs faster. Returns what runs where, for
    ``describe()``."""
    if backend == 'numpy':
        return None
    forward = training.graphs.forward
    reason = why_not(forward, inputs, training.n_outputs, undone=True)
    if reason is None and any(v.dtype == numpy.float16 for v in
                              forward.inputs + forward.params):
        reason = 'float16 gradients sum otherwise in onnxruntime'
    if reason is not None:
        return 'training on the VM: %s' % reason
    # Every trial run starts from the state the recording left (the
    # same dropout masks), and the last leaves it so.
    snapshot = undo.Snapshot(forward, inputs[len(forward.inputs):])
    try:
        outs = _copied(training.forward.run(list(inputs)))
        gys = [_unit_gradient(v) for v in training.graphs.backward.inputs[
            len(outs) - training.n_outputs:]]
        symbols = list(inputs[len(inputs) - len(forward.symbols):]) \
            if forward.symbols else []
        notes = []
        for part, part_inputs in (('forward', list(inputs)), (
                'backward', list(outs[training.n_outputs:]) + gys +
                symbols)):
            note = _part_in_session(backend, providers, training, part,
                                    part_inputs, snapshot.restore)
            notes.append('%s %s' % (part, note))
    finally:
        snapshot.restore()
    return 'training: ' + '; '.join(notes)


def _part_in_session(backend, providers, training, part, inputs, rewind):
    """Puts a session's program in place of the training program's
    ``part`` (``'forward'`` or ``'backward'``) where it agrees with the
    VM's and, with ``'auto'``, runs faster; says where it runs.
    ``rewind()`` puts back the state a run changes."""
    program = getattr(training, part)
    graph = getattr(training.graphs, part)
    try:  # (the VM's outputs may be buffers its next run writes)
        rewind()
        expected = _copied(program.run(inputs))
    except Exception as error:
        return 'on the VM (onnxruntime not used: %s)' % first_line(error)

    @functools.lru_cache(maxsize=None)
    def rounding_noise():
        rewind()
        return _copied(program.run(_nudged(inputs)))
    found, problem = _sessions_agreeing(graph, providers, backend, expected,
                                        inputs, rewind, rounding_noise)
    if not found:
        return 'on the VM (onnxruntime not used: %s)' % problem
    chosen, measured = 0, ''
    if backend == 'auto':
        times = _medians([program] + [f[0] for f in found], inputs)
        vm_time, (best, chosen) = times[0], min(
            (seconds, k) for k, seconds in enumerate(times[1:]))
        if _kept({'numpy': vm_time, 'onnxruntime': best}) == 'numpy':
            return 'on the VM (%.0f us; onnxruntime %.0f us)' % (
                vm_time * 1e6, best * 1e6)
        measured = ' (%.0f us; the VM %.0f us)' % (best * 1e6, vm_time * 1e6)
    session, split, vm_when_faster = found[chosen]
    setattr(training, part, _WhereGiven(session, program, training,
                                        providers, part == 'backward',
                                        vm_when_faster))
    return 'in onnxruntime%s%s' % (
        '' if split is None else ' ' + split, measured)


def _sessions_agreeing(graph, providers, backend, expected, inputs, rewind,
                       rounding_noise):
    """``(programs, problem)``: the session programs of ``graph`` (as
    ``(program, split, vm_when_faster)``: see :func:`_session_program`)
    whose outputs on ``inputs`` agree with ``expected`` (:func:`_differs`,
    with ``rounding_noise``); the first runs every node that converts in
    sessions, and with ``'auto'`` on the CPU a second keeps on the VM the
    nodes it runs faster (``ort.runs_faster_on_vm``). ``problem``: why
    the last tried did not agree, or ``None``."""
    found, problem = [], None
    splits = [False]
    if backend == 'auto' and _on_cpu(providers) and any(
            ort.runs_faster_on_vm(node) for node in graph.nodes):
        splits.append(True)
    for vm_when_faster in splits:
        try:
            session, split = _session_program(graph, providers, None,
                                              vm_when_faster)
            rewind()
            problem = _differs(expected, session.run(inputs),
                               rounding_noise)
        except Exception as error:  # no converter, or onnxruntime refused
            problem = first_line(error)
        if problem is None:
            found.append((session, split, vm_when_faster))
    return found, problem


def _on_cpu(providers):
    """Do the sessions run on the CPU only?"""
    return all((p if isinstance(p, str) else p[0]) == 'CPUExecutionProvider'
               for p in providers or ())


def _copied(outputs):
    """The arrays among ``outputs`` copied; the rest as they are (the
    Python objects a node run by Chainer passes to its backward, such as
    dropout's)."""
    return [numpy.array(a) if isinstance(a, numpy.ndarray) else a
            for a in outputs]


def _unit_gradient(value):
    """An output gradient for the check: ones of the value's type."""
    return numpy.ones(value.shape, value.dtype)


def _nudged(inputs):
    """``inputs`` with each float array's elements moved by up to
    :data:`NUDGE` units in the last place, at random (a generator of its
    own: NumPy's is left alone)."""
    rng = numpy.random.RandomState(0)
    return [a * (1 + rng.uniform(-1, 1, a.shape).astype(a.dtype) *
                 NUDGE * numpy.finfo(a.dtype).eps)
            if isinstance(a, numpy.ndarray) and a.dtype.kind == 'f' else a
            for a in inputs]


#: How many units in the last place :func:`_nudged` moves elements by,
#: and how many times the change that makes in an output a session's
#: output may differ from the VM's beyond the self-check's tolerance.
NUDGE = 4
NOISE_FACTOR = 4


def _differs(expected, actual, rounding_noise=None):
    """What differs between two programs' outputs, or ``None``. With
    ``rounding_noise`` (a function giving the first program's outputs on
    :func:`_nudged` inputs, called only where an output is outside the
    tolerance), an element may also differ by :data:`NOISE_FACTOR` times
    what the nudge changed it by: a sum that cancels (the gradient of a
    bias before a batch normalization, zero but for rounding) differs by
    rounding noise as large as itself between any two orders of
    adding."""
    noise = None
    for k, (e, a) in enumerate(zip(expected, actual)):
        if e is None or a is None:
            if e is not a:
                return 'output %d is missing' % k
            continue
        if not isinstance(e, numpy.ndarray):
            continue  # a node's Python objects, each run's own
        if e.shape != a.shape or e.dtype != a.dtype:
            return 'output %d has another type' % k
        if arrays_close(a, e):
            continue
        if noise is None and rounding_noise is not None:
            noise = rounding_noise()
        if noise is None or not arrays_close(a, e, noise[k]):
            return 'output %d differs from the VM\'s' % k
    return None


def arrays_close(actual, expected, nudged=None, scale=1.0):
    """The self-check's comparison of two host arrays of one type: floats
    within its tolerance (relative to the largest finite value, or to
    ``scale`` where larger; NaN equal to NaN), others equal. With
    ``nudged``, see :func:`_differs`."""
    if expected.dtype.kind not in 'fc':
        return bool((actual == expected).all())
    close = numpy.isclose(actual, expected, rtol=1e-4,
                          atol=1e-5 * max(largest(expected), scale),
                          equal_nan=True)
    if nudged is not None:
        close |= numpy.abs(actual - expected) <= \
            NOISE_FACTOR * numpy.abs(nudged - expected)
    return bool(close.all())


def largest(array):
    """The largest magnitude of a host array's finite values (1.0 for
    none)."""
    finite = numpy.isfinite(array)
    return float(numpy.abs(array[finite]).max()) \
        if array.size and bool(finite.any()) else 1.0


class _WhereGiven(object):
    """A training program's part run by onnxruntime. A session cannot take
    a ``None`` input (an output no gradient reached, such as
    ``L.Classifier``'s accuracy): for each set of inputs that are
    ``None``, a backward without them (``autodiff.without_absent``) runs
    in sessions of its own, made at its first call, where they agree
    with the VM's program there; else the VM's program runs."""

    def __init__(self, session, vm, training, providers, backward,
                 vm_when_faster):
        self.session, self.vm = session, vm
        self.training, self.providers = training, providers
        self.vm_when_faster = vm_when_faster  # how the session was split
        self.backward = backward  # (only the backward's may be None)
        graph = training.graphs.backward if backward else \
            training.graphs.forward
        # Can a failed run be run again on the VM?
        self.pure = structural.side_effect_free(graph.nodes, guards=False)
        self.absent = {}  # positions of None inputs -> (program, present)

    def run(self, inputs):
        missing = tuple(k for k, a in enumerate(inputs) if a is None)
        if not missing:
            if self.session is None:
                return self.vm.run(inputs)
            try:
                return self.session.run(inputs)
            except Exception:  # a None within: the VM's from now on
                self.session = None
                if not self.pure:  # it may have drawn or updated state
                    raise
                return self.vm.run(inputs)
        if missing not in self.absent:
            self.absent[missing] = self._without(missing, inputs)
        found = self.absent[missing]
        if found is None:
            return self.vm.run(inputs)
        program, present = found
        outs = program.run([a for a in inputs if a is not None])
        results = [None] * len(self.training.graphs.backward.outputs)
        for k, out in zip(present, outs):
            results[k] = out
        return tuple(results)

    def _without(self, missing, inputs):
        """The program and the positions of its outputs for calls where
        the inputs at ``missing`` are ``None``, or ``None``."""
        pair = self.training.graphs
        if not self.backward:
            return None
        found = autodiff.without_absent(
            pair, [pair.backward.inputs[k] for k in missing])
        if found is None:
            return None
        graph, present = found

        def rounding_noise():
            noisy = self.vm.run(_nudged(inputs))
            return [noisy[k] for k in present]
        try:
            program, _ = _session_program(graph, self.providers, None,
                                          self.vm_when_faster)
            expected = _copied(self.vm.run(inputs))
            outs = program.run([a for a in inputs if a is not None])
        except Exception:  # no converter, or onnxruntime refused
            return None
        if any(expected[k] is not None for k in range(len(expected))
               if k not in present) or _differs(
                   [expected[k] for k in present], outs,
                   rounding_noise) is not None:
            return None
        return program, present

    def __getattr__(self, name):
        return getattr(self.session or self.vm, name)


def _frozen(graph, inputs):
    """For each parameter, its array if a session may own it."""
    start = len(graph.inputs)
    return [array if ort.can_freeze(array) else None
            for array in inputs[start:start + len(graph.params)]]


def first_line(error):
    """What went wrong, in a line: the kernel's own error for a VMError,
    named by its type unless it is an ExportError."""
    if isinstance(error, errors.VMError) and error.__cause__ is not None:
        error = error.__cause__  # the kernel's own error
    text = str(error).strip().split('\n')[0]
    return text if isinstance(error, errors.ExportError) else '%s: %s' % (
        type(error).__name__, text)


def why_not(graph, inputs, n_outputs=None, undone=False):
    """Why onnxruntime cannot run ``graph`` on ``inputs``, or ``None``;
    ``n_outputs``: how many of its outputs the caller gets (a training
    forward's others, kept for the backward, are only read). With
    ``undone``, the program may draw from NumPy's generator and update
    batch normalization's running averages (those nodes run on the VM,
    between sessions), as the caller undoes its trial runs
    (``runtime.undo``)."""
    if not ort.available():
        return 'onnxruntime is not installed'
    if any(type(a) is not numpy.ndarray for a in inputs
           if not isinstance(a, (int, float, numpy.integer))):
        return 'the inputs are not all NumPy arrays'
    if undone:
        if not structural.undoable(graph.nodes, loops=True, guards=False):
            return ('the program has stateful nodes other than batch '
                    'normalization, random ones other than dropout, nodes '
                    'run by Chainer, or a branch on an array value')
    elif not structural.side_effect_free(graph.nodes, guards=False):
        return ('the program has random or stateful nodes, nodes run by '
                'Chainer, or a branch on an array value')
    if _may_return_views(graph, n_outputs):
        return ('an output may be a view of an argument or a parameter '
                '(as eagerly), which a session would copy')
    return None


def _may_return_views(graph, n_outputs=None):
    """True where an output of ``graph`` may share memory with an input
    or a parameter: it is one, or kernels that may return a view of their
    input (``Kernel.fresh`` false: a reshape, an index) made it from
    one, in a loop's body too. onnxruntime's outputs are new arrays,
    where eager's (and the VM's) would be views, which the caller may
    write into."""
    maybe = set(graph.inputs) | set(graph.params)
    _spread_views(graph.nodes, maybe)
    return any(v in maybe for v in graph.outputs[:n_outputs])


def _spread_views(nodes, maybe):
    """Adds to ``maybe`` the values of ``nodes`` that may be views of a
    value in it."""
    for node in nodes:
        if node.region is not None:
            _spread_views_through_loop(node, maybe)
        elif not node.kernel.fresh:
            maybe.update(out for out in node.outputs if any(
                v in maybe and _may_view(node, v, out) for v in node.inputs))


def _may_view(node, value, out):
    """May ``out`` view ``value``'s memory? A view has its base's dtype,
    but for ``ndarray.view``, which reinterprets the bytes."""
    return out.dtype == value.dtype or node.op.endswith('view')


def _spread_views_through_loop(node, maybe):
    """A Loop node: its body's inputs after the counter are its own
    inputs after the trip count (initial carried values, invariants); a
    carried value after the loop is its initial value (no iteration) or
    the body's last; the scan lists are stacked copies."""
    region = node.region
    body = region.body
    inner = set(b for b, v in zip(body.inputs[1:], node.inputs[1:])
                if v in maybe)
    read = [k for k, r in enumerate(region.carried_read) if r]
    size = -1
    while size != len(inner):  # until the carried values settle
        size = len(inner)
        _spread_views(body.nodes, inner)
        for j, k in enumerate(read):
            if body.outputs[k] in inner:
                inner.add(body.inputs[1 + j])
    for k in range(region.n_carried):
        initial = node.inputs[1 + read.index(k)] if k in read else None
        if body.outputs[k] in inner or initial in maybe:
            maybe.add(node.outputs[k])


def _medians(programs, inputs):
    """The median seconds of a run of each of ``programs`` on ``inputs``,
    timed in interleaved rounds (each program once a round, after an
    untimed run each), so that a slow spell of the host weighs on all of
    them alike; fewer rounds where a first run took over
    :data:`SLOW_RUN`."""
    slow = max(_seconds(program, inputs) for program in programs) > SLOW_RUN
    times = [[] for _ in programs]
    for _ in range(SLOW_TIMED_RUNS if slow else TIMED_RUNS):
        for program, seconds in zip(programs, times):
            seconds.append(_seconds(program, inputs))
    return [sorted(seconds)[len(seconds) // 2] for seconds in times]


def _seconds(program, inputs):
    start = time.perf_counter()
    program.run(inputs)
    return time.perf_counter() - start
