"""Automatic dynamic batch: one inference program for every batch size.

A call that misses only because its batch size changed (axis 0 of every
array argument, one size for all of them) finds the entry compiled for
another batch size (:func:`sibling`). Where that entry's program is one
onnxruntime session, its graph is converted again with the batch dynamic
(:func:`dynamic_program`: ``onnx_graph.Builder`` with ``dynamic_batch``,
whose converters read the batch size from the input where the recording
had it), without recording again. The new session runs the call, and so
does eager Chainer; if they agree, the entry serves every batch size
(:class:`Batched`): its key and signature show axis 0 as ``B``
(``x: f32[B,784]``), and the first call at each further size is checked
against eager in the same way. Where they differ, or the session cannot
be built, the entry keeps its batch size and says why.

With ``backend='auto'``, an entry whose program the VM runs (it measured
faster at the recorded size) serves every batch size the same way where
onnxruntime can run it: the VM at the recorded size, the dynamic session at
the others (:func:`per_size`). Training programs, and everything with
``backend='numpy'``, keep the batch size in the key: the VM's kernels and
its memory plan are built for the recorded shapes.
"""

import collections

from chainerjit import errors
from chainerjit import ops
from chainerjit.backend import ort
from chainerjit.frontend import signature
from chainerjit.runtime import backends

#: The symbol of the batch axis in keys and signatures.
BATCH = 'B'


class Batched(collections.namedtuple('Batched', 'leaves')):
    """How an entry that serves every batch size reads a call's key:
    ``leaves`` are the indexes of the arguments whose axis 0 is the batch
    (every array argument)."""

    __slots__ = ()

    def generalize(self, key):
        """``(the key with the batch axes as 'B', [])``, or ``None`` where
        the call's batched arguments differ in batch size."""
        size = self.size_of(key)
        if size is None:
            return None
        specs = list(key[3])
        for leaf in self.leaves:
            spec = specs[leaf]
            specs[leaf] = ((BATCH,) + tuple(spec[0][1:]),) + tuple(spec[1:])
        return key[:3] + (tuple(specs),) + key[4:], []

    def size_of(self, key):
        """The call's batch size, or ``None``."""
        specs = key[3]
        sizes = set()
        for leaf in self.leaves:
            if leaf >= len(specs) or not specs[leaf] or \
                    not signature.is_array_spec(specs[leaf]) or \
                    not specs[leaf][0]:
                return None
            sizes.add(specs[leaf][0][0])
        return sizes.pop() if len(sizes) == 1 else None


def sibling(cache, key, backend):
    """``(entry, Batched)``: a cached entry whose program may serve other
    batch sizes (:func:`_widens`) and whose key differs from ``key`` only
    in the batch size of every array argument; else ``None``."""
    for entry in cache.entries():
        if not _widens(entry, backend) or entry.key[:3] != key[:3] or \
                entry.key[4:] != key[4:]:
            continue
        leaves = _batched_leaves(entry.key[3], key[3])
        if leaves:
            return entry, Batched(leaves)
    return None


def _widens(entry, backend):
    """An entry whose program may serve other batch sizes: inference (no
    backprop), no symbolic lengths, run by one onnxruntime session, or by
    the VM where ``backend`` is ``'auto'``."""
    if entry.program is None or entry.symbolic is not None or \
            entry.key[1] or entry.batch_note is not None:
        return False
    if entry.backend == 'onnxruntime':
        return entry.backend_note is None
    return backend == 'auto'


def _batched_leaves(old, new):
    """The array leaves, if every one has one batch size in ``old`` and
    another in ``new`` and is otherwise the same; else ``()``."""
    if len(old) != len(new):
        return ()
    leaves, sizes = [], set()
    for leaf, (a, b) in enumerate(zip(old, new)):
        if not (signature.is_array_spec(a) and signature.is_array_spec(b)):
            if a != b:
                return ()
            continue
        if not a[0] or len(a[0]) != len(b[0]) or a[1:] != b[1:] or \
                a[0][1:] != b[0][1:] or a[0][0] == b[0][0]:
            return ()
        leaves.append(leaf)
        sizes.add((a[0][0], b[0][0]))
    return tuple(leaves) if len(sizes) == 1 else ()


def decision_on_batch(entry, batched):
    """How the entry's forward used the batch size in Python, if it did
    otherwise than in an op's arguments (``'x.shape[0] compared at
    model.py:12'``, ``'... reported'``): a program for other sizes could go
    the other way, or replay the recorded number."""
    names = [name for name, _ in entry.signature.items]
    for use in entry.size_uses:
        if not use.what.startswith('passed to') and any(
                axis == 0 and leaf in batched.leaves
                for leaf, axis in use.origins):
            return use.describe(names)
    return None


def dynamic_program(entry, batched, providers, inputs):
    """The entry's graph as one onnxruntime session with the batch
    dynamic, for a call's ``inputs`` (arguments, then parameters): the
    parameters as the entry's session has them (the frozen ones are the
    new session's constants). For an entry the VM runs, a program running
    it at the recorded batch size and the session at the others.

    Raises:
        chainerjit.errors.ExportError: onnxruntime cannot run the graph.
    """
    graph = entry.graph
    params = inputs[len(graph.inputs):]
    frozen = [a if any(a is f for f in entry.frozen) else None
              for a in params] if entry.frozen else None
    if entry.backend != 'onnxruntime':
        reason = backends.why_not(graph, inputs)
        if reason is not None:
            raise errors.ExportError(reason)
    first = graph.inputs[batched.leaves[0]]
    size = first.shape[0]
    session = ort.session_program(graph, providers, frozen,
                                  batch=(first, size))
    if entry.backend == 'onnxruntime':
        return session
    return per_size(graph, entry.program, session, batched.leaves[0], size)


def per_size(graph, recorded, dynamic, leaf, size):
    """A program running ``recorded`` where argument ``leaf`` has batch
    ``size`` (the VM's program, built for it), else ``dynamic``."""
    def run(*arrays):
        program = recorded if arrays[leaf].shape[0] == size else dynamic
        return program.run(list(arrays))
    return ort.one_kernel_program(graph, ops.Kernel(run, multi=True))


def widen(cache, entry, batched, program, sizes):
    """Makes ``entry`` serve every batch size with ``program``; ``sizes``
    are the batch sizes already checked against eager."""
    cache.remove(entry)
    entry.key = batched.generalize(entry.key)[0]
    entry.symbolic = batched
    entry.program = program
    entry.signature = entry.signature.with_symbols(
        [(leaf, (0,)) for leaf in batched.leaves], symbol=BATCH)
    entry.verified_lengths.update((size,) for size in sizes)
    entry.backend_note = 'any batch size B' if entry.backend == \
        'onnxruntime' else 'onnxruntime at batch sizes other than %d' % \
        sizes[0]
    cache.insert(entry)
