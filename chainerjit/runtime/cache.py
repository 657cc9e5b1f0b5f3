"""The per-function cache of compiled programs.

An :class:`Entry` is found by the call's key (``signature.make_key``) and
then checked against its *guards*: every parameter and persistent array
the program reads must still exist with the recorded shape, dtype and
device, and the model must still be the same tree of links with the same
Python scalar attributes. The model check is cheap on a hit: chainerjit
counts attribute assignments on the links of the models it checked
(``frontend.epochs``) and compares the model again only when that count
moved.
"""

import collections
import weakref

import chainer
import numpy

from chainerjit.frontend import _keys
from chainerjit.frontend import epochs
from chainerjit.frontend import guards
from chainerjit.frontend import lengths
from chainerjit.frontend import signature
from chainerjit.frontend import trace
from chainerjit.ops import segments as segments_ops
from chainerjit.runtime import _calls


#: ``[model, its epoch's count, its link state]``: the state of a
#: watched model, computed once per count (a stateful link called in
#: a loop moves the count on every call, and each entry a lookup tries
#: compares the model's state; its links' attributes are read once).
_last_state = [None, None, None]


def current_link_state(instance, ignored=frozenset()):
    """:func:`link_state`, the same for a watched model until one of its
    links is assigned to (its epoch moves: ``frontend.epochs``)."""
    epoch = epochs.model_epoch_if_watched(instance)
    if epoch is None:
        return guards.link_state(instance, ignored)
    model, count, state = _last_state
    if model is None or model() is not instance or count != epoch[0]:
        state = guards.link_state(instance)
        _last_state[:] = [weakref.ref(instance), epoch[0], state]
    return guards.without_ignored(state, ignored) if ignored else state


def diff_link_state(old, new):
    """Lines saying how a model changed between two :func:`link_state`."""
    lines = []
    for path in sorted(set(old) | set(new)):
        name = path.strip('/').replace('/', '.') or '(model)'
        if path not in new:
            lines.append('%s: link removed' % name)
        elif path not in old:
            lines.append('%s: link added' % name)
        elif old[path][:2] != new[path][:2]:
            lines.append('%s: link replaced (%s -> %s)' % (
                name, old[path][0], new[path][0]))
        elif old[path][2] != new[path][2]:
            lines.append('%s: length %s -> %s' % (name, old[path][2],
                                                  new[path][2]))
        else:
            a, b = dict(old[path][3]), dict(new[path][3])
            for k in sorted(set(a) | set(b)):
                if a.get(k, guards.ABSENT) != b.get(k, guards.ABSENT):
                    lines.append('%s.%s: %r -> %r' % (
                        name, k, a.get(k, guards.ABSENT),
                        b.get(k, guards.ABSENT)))
    return lines


# --- model arrays -----------------------------------------------------------

def resolve_link(instance, path):
    """Follows link names from ``namedlinks()`` (``('0', 'l1')``).

    A ChainList's names index its child links (``Sequential`` may also
    hold functions, which have no names)."""
    link = instance
    for part in path:
        if isinstance(link, chainer.ChainList):
            link = link._children[int(part)]
        else:
            link = getattr(link, part)
    return link


def resolve_owner(instance, path):
    """Follows a path like ``('l1', 'W')`` from a Link. Returns
    ``(parameter, None)``, ``(link, name)`` for a persistent array, or
    ``None`` when the path no longer exists."""
    try:
        obj = resolve_link(instance, path[:-1])
        leaf = getattr(obj, path[-1])
    except (AttributeError, IndexError, ValueError, TypeError):
        return None
    if isinstance(leaf, chainer.Variable):
        return leaf, None
    return obj, path[-1]


def source_owner(instance, source):
    """The owner (:func:`resolve_owner`) of a program's parameter on a
    call, by where the recording found it: ``('path', path)`` in the
    model ``instance``; ``('object', parameter)`` that parameter itself;
    ``('attribute', (link, name))`` that attribute of a link outside the
    model (re-read, as a path is); or ``None``."""
    kind, where = source
    if kind == 'object':
        return where, None
    if kind == 'attribute':
        link, name = where
        held = getattr(link, name, None)
        return (held, None) if isinstance(held, chainer.Variable) else \
            (link, name)
    return resolve_owner(instance, where)


def read_owner(owner):
    obj, attr = owner
    return obj._data[0] if attr is None else getattr(obj, attr, None)


def array_spec(array):
    """``(shape, dtype, array class, device)`` of a model array; the
    device is ``None`` for NumPy."""
    device = None if type(array) is numpy.ndarray else \
        signature.array_device(array)
    return array.shape, array.dtype, type(array), device


def matches(array, spec):
    return array is not None and array_spec(array) == spec


def describe_array_change(name, spec, array):
    if array is None:
        return '%s: missing' % name
    shape, dtype, cls, device = spec
    new = array_spec(array)
    if new[0] != shape:
        return '%s: shape %s -> %s' % (name, shape, new[0])
    if new[1] != dtype:
        return '%s: dtype %s -> %s' % (name, dtype, new[1])
    return '%s: device %s -> %s' % (name, device or 'cpu',
                                    new[3] or 'cpu')


# --- entries ----------------------------------------------------------------

class Entry(object):
    """One compiled (or eagerly run) signature of a function.

    Attributes:
        key: the call key it answers.
        signature: the readable :class:`signature.Signature`.
        graph: the IR after passes (``None`` for an eager entry).
        program: the :class:`program.Program` (``None`` if eager).
        outputs: ``(structure, leaf specs)`` of the result.
        py_guards: guards on Python values the forward names.
        config_reads: the ``chainer.config`` entries read while recording
            and their values (``guards.config_reads``), checked on each
            call.
        fallback: ``None``, or why this signature runs eagerly.
        escaped: whether it runs eagerly because of a construct of the
            forward (a value read into Python), which another signature
            would meet too.
        cut: the ``frontend.breaks.Cut`` its calls run as, compiled
            segments around the statement that escaped, or ``None``.
        hits: calls answered from this entry.
        compile_seconds: time spent recording, optimising and compiling.
    """

    def __init__(self, key, signature, model_state, graph=None,
                 program=None, outputs=None, effects=(), param_arrays=(),
                 fallback=None, py_guards=(), config_reads=()):
        self.key = key
        self.signature = signature
        self.graph = graph
        self.program = program
        self.outputs = outputs
        self.effects = effects
        self.training = None  # a function.TrainingProgram, once built
        self.output_requires_grad = _output_requires_grad(outputs, effects)
        self.py_guards = py_guards
        self.config_reads = config_reads  # guards.config_reads
        self.fallback = fallback
        self.escaped = False
        self.cut = None
        self.hits = 0
        self.compile_seconds = 0.0
        # frontend.symbolic.Symbolic: compiled for any length (or
        # runtime.batch.Batched, runtime.ragged.Ragged)
        self.symbolic = None
        self.verified_lengths = set()  # trip counts checked against eager
        # False: its hits are checked against eager (api._verify_values)
        # the first time and where an array argument first came with
        # other values than recorded (``unvaried``: values_digests of
        # those not yet), until each did, after VALUE_CHECKS checks or
        # VALUE_WATCH hits
        self.values_checked = True
        self.unvaried = {}
        self.value_checks = 0
        # the forward's Python read the shape of a value it computed (a
        # padded block's width: api._derived_to_check)
        self.reads_shapes = False
        self.branch_misses = 0  # calls where a branch on an array value
        # went the other way (each ran eagerly)
        # What runs the program (runtime.backends): 'numpy' or
        # 'onnxruntime'; the seconds each took when chosen; why
        # onnxruntime was not used.
        self.backend = 'numpy'
        self.backend_times = {}
        self.backend_note = None
        # runtime.backends.Deferred: the choices 'auto' makes once the
        # entry has run for a while (None: made), and the seconds taken.
        self.deferred = None
        self.choice_seconds = 0.0
        # Where the training program's forward and backward run
        # (runtime.backends.choose_training), or None.
        self.training_note = None
        # Why the program cannot serve other batch sizes, once tried
        # (runtime.batch); None: not tried, or it serves them.
        self.batch_note = None
        # why one onnxruntime session of any batch size does not serve it
        # (the VM's program may, where the backend is 'auto')
        self.session_note = None
        # Why a loop's trip count stays in the key (frontend.symbolic)
        self.length_note = None
        # Why the lengths of a list argument's items do (runtime.ragged)
        self.items_note = None
        # lengths.Use: what its forward's Python did with argument sizes
        # while recording (``if x.shape[0] > 10:``)
        self.size_uses = []
        self.frozen = []  # parameter arrays its session owns (read-only)
        self.made_read_only = []  # those its compile made read-only
        params = graph.params if graph is not None else []
        self.param_names = [v.name for v in params]
        self.param_sources = [v.data for v in params]
        self.param_specs = [array_spec(a) for a in param_arrays]
        self.link_state = model_state  # as it was before recording
        self.ignored_state = self.written_first = frozenset()
        self._assigned_state = _assigned_state(model_state, effects)
        self._owners_assigned = _owners_assigned(self.param_sources,
                                                 effects)
        self._owners = None
        # the epoch of the model and its counts when last checked
        self._model_epoch, self._epoch = epochs.UNWATCHED, -1  # check first
        self._structure = -1
        self._numbers = []  # (weakref to a link, name, guards.Number)

    def ignore_state(self, written_first, unread=frozenset()):
        """Stops guarding the link attributes ``written_first`` (``(path,
        name)`` pairs the forward assigns before reading) and ``unread``
        (those holding numbers it does not read)."""
        self.written_first = frozenset(written_first)
        self.ignored_state = self.written_first | unread
        self.link_state = guards.without_ignored(self.link_state,
                                                 self.ignored_state)

    @property
    def n_instructions(self):
        return self.program.n_instructions if self.program else 0

    def _resolve(self, instance):
        owners = []
        for source in self.param_sources:
            owner = source_owner(instance, source)
            if owner is None:
                return None
            owners.append(owner)
        return owners

    def fetch_params(self, instance):
        """The arrays the program reads from the model, or ``None`` if a
        guard fails (the call is then a miss)."""
        epoch = self._model_epoch
        if self._epoch != epoch[0] and not (
                self._structure == epoch[1] and self.numbers_hold()):
            if current_link_state(instance, self.ignored_state) != \
                    self.link_state:
                return None
            self._model_epoch = epoch = epochs.model_epoch(instance)
            epochs.watch_model(instance)  # links added since too
            self._owners = self._resolve(instance)
            self._numbers = self._numbers_guarded(instance)
            self._structure = epoch[1]
        self._epoch = epoch[0]
        if self._owners is None or not _keys.config_holds(
                self.config_reads):
            return None
        for guard in self.py_guards:
            if not guard.holds():
                return None
        return _keys.read_params(self._owners, self.param_specs)

    def numbers_hold(self):
        """Do the numbers this entry guards hold the values it was
        compiled for? Enough where the model's epoch moved for numbers
        assigned over numbers only (``frontend.epochs``)."""
        for held, name, expected in self._numbers:
            link = held()
            if link is None:
                return False
            value = vars(link).get(name, guards.ABSENT)
            if value is not expected.value and \
                    guards.attribute_state(value) != expected:
                return False
        return True

    def _numbers_guarded(self, instance):
        """``[(link, name, guards.Number)]`` of the numbers of the model
        that :attr:`link_state` guards, each link held weakly (the model
        holds its jitted forward, and so this entry)."""
        if not isinstance(instance, chainer.Link):
            return []
        return [(weakref.ref(link), name, state)
                for path, link in instance.namedlinks()
                for name, state in self.link_state[path or '/'][3]
                if type(state) is guards.Number]

    def needs_grad(self, leaves):
        """With backprop enabled: may this call need gradients? True if
        an argument or a model Variable the program reads (checked by
        the last :meth:`fetch_params`) requires grad."""
        return _calls.needs_grad(self._owners, leaves)

    def model_inputs(self, params):
        """What the training node takes from the model (see
        ``_calls.model_inputs``)."""
        return _calls.model_inputs(self._owners, params)

    def guard_failures(self, instance):
        """Lines saying why :meth:`fetch_params` fails, for ``explain``."""
        lines = diff_link_state(self.link_state, guards.link_state(
            instance, self.ignored_state))
        lines += guards.failures(self.py_guards)
        lines += guards.config_failures(self.config_reads)
        if lines:
            return lines
        for name, source, spec in zip(self.param_names, self.param_sources,
                                      self.param_specs):
            owner = source_owner(instance, source)
            array = read_owner(owner) if owner else None
            if array is None or not matches(array, spec):
                lines.append(describe_array_change(name, spec, array))
        return lines

    def build_result(self, outs, leaves, instance):
        """The call's result, shaped as eager's, from program outputs (a
        single output in C, ``_calls.build_result``; the rest with
        :meth:`build_structure`)."""
        return _calls.build_result(self, outs, leaves, instance)

    def build_structure(self, outs, leaves, instance):
        structure, specs = self.outputs
        made = []
        for spec in specs:
            made.append(made[spec[1]] if spec[0] == 'same' else
                        _make_leaf(spec, outs, leaves, instance))
        return signature.unflatten(structure, made)

    def share_stored_outputs(self, outs):
        """``outs`` (a program's arrays) with each output that an effect
        stores as a Variable (``self.last = y``) wrapped once, so that a
        Variable both stored and returned is one object, as in eager mode
        (``trace._record_effects`` gives both the same output)."""
        outs = list(outs)
        for _, _, _, _, specs in self.effects:
            for spec in specs:
                if spec[0] in ('value', 'leaf') and spec[2]:  # _make_leaf
                    outs[spec[1]] = _as_variable(outs[spec[1]], spec[3])
        return tuple(outs)

    def assigned_attributes(self, instance):
        """``(link, name)`` of the model attributes the effects assign
        (for ``undo.Snapshot``)."""
        return [(resolve_link(instance, path), name)
                for kind, path, name, _, _ in self.effects
                if kind == 'setattr' and path is not None]

    def carried_attributes(self):
        """``'link.name'`` of each model attribute the forward assigns and
        also reads as the call found it: state carried from call to call
        (an ``L.LSTM`` the forward does not ``reset_state()``), or an
        attribute of an object outside the model (``'?.name'``)."""
        return ['?.%s' % name if path is None else '.'.join(path + (name,))
                for kind, path, name, _, _ in self.effects
                if kind == 'setattr' and (
                    path is None or (_state_path(path), name)
                    not in self.ignored_state)]

    def replay_effects(self, instance, outs, leaves):
        """Assigns the link attributes and reports the values that the
        recorded forward assigned and reported.

        The assignments move the model's epoch; when nothing else moved
        it and each assigned attribute keeps the state this entry was
        compiled for (a Variable replaced by a Variable), the model is
        still the one the entry checked, so the next call skips
        comparing the whole model again."""
        epoch = self._model_epoch
        checked = self._epoch == epoch[0]
        assigned = []
        for kind, path, name, structure, specs in self.effects:
            value = _effect_value(structure, specs, outs, leaves, instance)
            target = None if path is None else resolve_link(instance, path)
            if kind == 'setattr':
                setattr(target, name, value)
                assigned.append((target, path, name))
            else:
                chainer.reporter.report(value, target)
        if checked and epoch[0] == self._epoch + len(assigned) and all(
                self._keeps_state(target, path, name)
                for target, path, name in assigned):
            if self._owners_assigned:
                # Assigned Variables the program reads (an LSTM's state):
                # read where they are now on the next call.
                self._owners = self._resolve(instance)
            self._epoch, self._structure = epoch[0], epoch[1]

    def reported(self, outs, leaves, instance):
        """The values the recorded forward reported (``chainer.report``),
        in order, made of the program's outputs ``outs``."""
        return [_effect_value(structure, specs, outs, leaves, instance)
                for kind, _, _, structure, specs in self.effects
                if kind == 'report']

    def _keeps_state(self, target, path, name):
        """Does an attribute :meth:`replay_effects` assigned keep what
        the model check compares: its state when the entry was compiled,
        or any value when the forward assigns it before reading it (as
        ``L.Classifier`` does ``self.y``)?"""
        return (_state_path(path), name) in self.ignored_state or \
            self._assigned_state[path, name] == guards.attribute_state(
                getattr(target, name))

    def describe(self):
        """A multi-line report of this entry: signature, stats, IR and
        bytecode."""
        lines = ['signature: %s' % self.signature]
        conditions = _conditions_described(self.symbolic)
        if conditions:
            lines.append('for sizes where: %s' % ', '.join(conditions))
        lines += self.size_notes()
        lines.append('hits: %d, compile: %.3f s' % (
            self.hits, self.compile_seconds))
        if self.cut is not None:
            lines.append('runs in compiled pieces around a %s'
                         % self.cut.describe())
        elif self.fallback:
            lines.append('runs eagerly: %s' % self.fallback)
        else:
            lines.append('instructions: %d' % self.n_instructions)
            lines.append('backend: %s' % self.describe_backend())
            lines.append(str(self.graph))
            lines.append(self.program.dis())
        return '\n'.join(lines)

    def size_notes(self):
        """Why sizes stay in this entry's key, a line each."""
        return ['%s stays in the cache key: %s' % (what, note)
                for what, note in (('the trip count', self.length_note),
                                   ('the batch size', self.batch_note),
                                   ('the items\' lengths', self.items_note))
                if note]

    def describe_backend(self):
        """``'onnxruntime (numpy 41.0 us, onnxruntime 12.5 us)'``: what
        runs the program, the times measured, or why onnxruntime does
        not."""
        text = self.backend
        if self.backend_times:
            text += ' (%s)' % ', '.join(
                '%s %.1f us' % (name, seconds * 1e6)
                for name, seconds in sorted(self.backend_times.items()))
        if self.backend_note:
            text += '; ' + self.backend_note
        if self.training_note:
            text += '; ' + self.training_note
        if self.deferred is not None:
            text += '; ' + repr(self.deferred)
        if self.choice_seconds:
            text += '; chosen in %.3f s' % self.choice_seconds
        return text


def _conditions_described(symbolic):
    """The comparisons of sizes an entry's symbolic sizes are guarded by,
    as printed (``'T > 10'``, ``'not W > 10'``)."""
    described = getattr(symbolic, 'conditions_described', None)
    if described is not None:
        return described()
    return [lengths.describe_condition(c)
            for c in getattr(symbolic, 'conditions', ())]


def _state_path(path):
    """A link path as :func:`link_state` keys it."""
    return '/' + '/'.join(path)


def _owners_assigned(param_sources, effects):
    """Does the forward assign an attribute on the path to an array the
    program reads from the model (``lstm.h`` itself, or a link holding
    it)?"""
    assigned = set(path + (name,) for kind, path, name, _, _ in effects
                   if kind == 'setattr' and path is not None)
    return any(kind == 'object' or any(
        tuple(source[:k]) in assigned for k in range(1, len(source) + 1))
        for kind, source in param_sources)


def _assigned_state(model_state, effects):
    """``{(link path, name): attribute state}`` before recording, of the
    attributes the forward assigns."""
    found = {}
    for kind, path, name, _, _ in effects:
        if kind == 'setattr':
            attrs = dict(model_state.get(_state_path(path), (
                None, None, None, ()))[3])
            found[path, name] = attrs.get(name, guards.ABSENT)
    return found


def _output_requires_grad(outputs, effects):
    """For each graph output the result or an effect uses, how a training
    call publishes it (``_calls.publish``): ``CONNECTED`` where eager's
    Variable for it required grad, ``NEW_LEAF`` where it was a new leaf
    requiring grad (a spec of kind ``'leaf'``), else ``DETACHED``."""
    flags = {}
    for kind, where, is_var, grad in trace.leaf_specs(outputs, effects):
        if kind == 'leaf':
            flags[where] = NEW_LEAF
        elif kind in ('value', 'scalar', 'steps', 'items'):
            flags[where] = max(flags.get(where, DETACHED),
                               CONNECTED if grad else DETACHED)
    return [flags.get(i, DETACHED)
            for i in range(max(flags, default=-1) + 1)]


DETACHED, CONNECTED, NEW_LEAF = 0, 1, 2  # as _calls.publish reads them


def _effect_value(structure, specs, outs, leaves, instance):
    """The value an effect assigns or reports, made of program outputs."""
    return signature.unflatten(structure, [
        _make_leaf(s, outs, leaves, instance) for s in specs])


#: How many hits of an entry whose program holds arrays the recording
#: computed are checked against eager at most (``Entry.values_checked``).
VALUE_CHECKS = 4

#: How many hits of such an entry watch for arguments with new values at
#: most (labels all of one class at the first calls).
VALUE_WATCH = 64


def values_digests(leaves, only=None):
    """``{leaf index: guards.array_value}`` of the NumPy arrays among a
    call's leaves (and Variables' arrays; ``only`` those at the indexes
    it holds, if given)."""
    return dict((i, guards.array_value(array))
                for i, array in enumerate(map(signature.leaf_array, leaves))
                if isinstance(array, numpy.ndarray) and (
                    only is None or i in only))


def _make_leaf(spec, outs, leaves, instance):
    """One leaf of a result: see ``trace._leaf_spec`` for the kinds."""
    kind, where, is_var, grad = spec
    if kind == 'arg':
        return leaves[where]
    if kind == 'model':
        return source_owner(instance, where)[0]
    if kind == 'number':  # ``grad`` holds the number's type
        return grad(signature.leaf_array(outs[where]))
    if kind == 'scalar':  # a training call's output is a Variable
        array = signature.leaf_array(outs[where])
        # (onnxruntime's int64 arrays are typed long long: the scalar
        # eager gives is of the dtype's own type.)
        return array.view(array.dtype.str)[()]
    if kind == 'steps':  # a loop's steps, stacked: a list of each again
        return _separated(_as_variable(outs[where], grad))
    if kind == 'items':  # a list's items, joined: cut again
        rows = _as_variable(outs[where], grad) if is_var else \
            signature.leaf_array(outs[where])
        return _cut(rows, leaves[where.lengths], where.shift,
                    where.container)
    leaf = outs[where] if kind in ('value', 'leaf') else where.copy()
    if is_var:
        return _as_variable(leaf, grad)
    return leaf.array if isinstance(leaf, chainer.Variable) else leaf


_as_variable = _calls.as_variable


def _cut(rows, lengths, shift, container):
    """The items whose ``rows`` (a Variable, or an array) are joined,
    each of the length ``lengths`` (an argument's array) gives plus
    ``shift``, cut apart by ``F.split_axis`` (connected to the graph where
    it needs a gradient), in a ``container``."""
    sizes = numpy.asarray(lengths) + shift
    if not isinstance(rows, chainer.Variable):
        return container(segments_ops.items_of(rows, sizes))
    stops = numpy.cumsum(sizes)[:-1].tolist()
    with chainer.using_config('enable_backprop', rows.requires_grad):
        return container(chainer.functions.split_axis(
            rows, stops, 0, force_tuple=True))


def _separated(steps):
    """The list of the Variables ``F.separate`` cuts ``steps`` into, along
    its first axis, connected to its graph where it needs a gradient."""
    with chainer.using_config('enable_backprop', steps.requires_grad):
        return list(chainer.functions.separate(steps, axis=0))


class CacheInfo(collections.namedtuple(
        'CacheInfo',
        'hits misses maxsize currsize compiled eager compiles segmented')):
    """A function's cache statistics: ``functools.lru_cache``'s four
    fields, then how its calls ran.

    Attributes:
        hits: calls that found an entry; misses: calls that recorded one.
        maxsize, currsize: the bound on entries, and the entries there are.
        compiled: calls a compiled program answered (hits, less those that
            ran eagerly), around a graph break too (where a piece before
            or after it ran compiled).
        eager: calls that ran eagerly besides recordings: an entry that
            runs eagerly, hooks, debug mode, arguments it cannot take, the
            check of a new length.
        compiles: programs compiled (an entry that runs eagerly is none),
            and those of the pieces of a function cut at a graph break.
        segmented: calls that ran in compiled segments: around a graph
            break (``JitFunction.graph_break()``), or eagerly with the
            links compiled (``JitFunction.segments()``).
    """


class Cache(object):
    """An LRU cache of :class:`Entry` objects for one function."""

    def __init__(self, maxsize):
        self.maxsize = maxsize
        self._reset_counts()
        self._buckets = {}
        self._lru = collections.OrderedDict()
        self._symbolics = []  # frontend.symbolic.Symbolic of the entries
        # {concrete key: (entry, trip counts)} of calls an entry compiled
        # for any size answered, its check at that size done: the hit
        # path in C (runtime._calls) finds them there. Emptied whenever
        # an entry comes or goes.
        self._general = {}

    def lookup(self, key, instance):
        """Returns ``(entry, param arrays, symbols)``, or ``(None, None,
        None)``. ``symbols`` are the trip counts of an entry compiled for
        any length (see ``frontend.symbolic.Symbolic``), read from ``key``."""
        found = self._lookup(key, instance, None)
        if found is not None:
            return found + ([],)
        for symbolic in self._symbolics:
            general = symbolic.generalize(key)
            if general is not None:
                found = self._lookup(general[0], instance, symbolic)
                if found is not None:
                    return found + (general[1],)
        return None, None, None

    def _lookup(self, key, instance, symbolic):
        bucket = self._buckets.get(key)
        if bucket:
            for entry in bucket:
                if entry.symbolic != symbolic:
                    continue
                arrays = entry.fetch_params(instance)
                if arrays is not None:
                    self._lru.move_to_end(entry)
                    return entry, arrays
        return None

    def remember_general(self, key, entry, symbols):
        """Notes that ``entry``, compiled for any size, answers calls of
        the concrete ``key`` with the trip counts ``symbols``, once its
        check at that size is done."""
        self._general[key] = (entry, tuple(symbols))

    def insert(self, entry):
        """Adds an entry; returns the entry evicted, if any."""
        self._general = {}
        self._buckets.setdefault(entry.key, []).insert(0, entry)
        self._lru[entry] = None
        evicted = None
        if self.maxsize is not None and len(self._lru) > self.maxsize:
            evicted, _ = self._lru.popitem(last=False)
            self.evictions += 1
            self._buckets[evicted.key].remove(evicted)
            if not self._buckets[evicted.key]:
                del self._buckets[evicted.key]
        self._symbolics = list(dict.fromkeys(  # (a copy: threads look up)
            e.symbolic for e in list(self._lru) if e.symbolic is not None))
        return evicted

    def remove(self, entry):
        """Forgets one entry."""
        self._general = {}
        if entry in self._lru:
            del self._lru[entry]
            self._buckets[entry.key].remove(entry)
            if not self._buckets[entry.key]:
                del self._buckets[entry.key]

    def entries(self):
        """Entries from least to most recently used."""
        return list(self._lru)

    def clear(self):
        self._general = {}
        self._buckets.clear()
        self._lru.clear()
        self._symbolics = []
        self._reset_counts()

    def _reset_counts(self):
        self.hits = 0  # counted by the hit path in C too
        self.misses = 0
        self.eager = 0
        self.eager_hits = 0
        self.compiles = 0
        self.segmented = 0
        self.evictions = 0  # entries the LRU dropped

    @property
    def compiled(self):
        """Calls a compiled program answered: hits, less those that ran
        eagerly."""
        return self.hits - self.eager_hits

    def info(self):
        return CacheInfo(self.hits, self.misses, self.maxsize,
                         len(self._lru), self.compiled, self.eager,
                         self.compiles, self.segmented)

    def report(self):
        """A table of the entries, most recently used last."""
        rows = ['  #  %-50s %6s %9s %6s  %s' % (
            'signature', 'hits', 'compile', 'insts', 'backend')]
        for i, entry in enumerate(self.entries()):
            sig = str(entry.signature)
            if len(sig) > 50:
                sig = sig[:47] + '...'
            rows.append('%3d  %-50s %6d %7.3f s %6s  %s' % (
                i, sig, entry.hits, entry.compile_seconds,
                'break' if entry.cut else 'eager' if entry.fallback
                else entry.n_instructions,
                '' if entry.fallback else entry.backend))
        rows += ['#%d runs eagerly: %s' % (i, entry.fallback)
                 if entry.cut is None else '#%d runs in compiled pieces '
                 'around a %s' % (i, entry.cut.describe())
                 for i, entry in enumerate(self.entries())
                 if entry.fallback]
        return '\n'.join(rows)


def format_param_item(name, array, requires_grad):
    """A ``(name, ArraySpec)`` signature item for a model array."""
    return (name, signature.ArraySpec(
        array.shape, array.dtype, signature.array_device(array),
        requires_grad, True))


def model_param_items(instance):
    """Signature items for every parameter of a model."""
    if not isinstance(instance, chainer.Link):
        return []
    return [format_param_item(n.strip('/').replace('/', '.'), p.array,
                              p.requires_grad)
            for n, p in sorted(instance.namedparams())
            if p is not None and p.array is not None]  # (``l.b = None``)
