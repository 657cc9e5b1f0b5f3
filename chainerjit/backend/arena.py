"""Memory planning: a preallocated arena of buffers per program.

A kernel with an ``into`` variant (``Kernel.into``: the same values, bit
for bit, written into a given array) can write its result into a buffer
the program allocated once, when it was compiled, instead of a new
array. Values whose lifetimes do not overlap share a buffer, so a
steady-state call allocates little beyond what it returns and keeps for
the backward pass.

A value gets an arena buffer only when nothing that may share its memory
outlives the call or the iteration that computed it. :func:`buffer_roots`
finds what may share memory: a kernel that is not ``fresh`` may return a
view of any input (or the input itself), and one with an ``inplace``
variant may write into an input. A value may not use the arena if a
value sharing its memory is a program output (the user's results, or
what the backward reads), a loop-carried or collected value, or a loop's
initial state; its buffer is busy until the last read of any value that
may share it.

Re-entrant and concurrent calls of one program cannot share its arena:
the VM runs a call that starts while another is running with the plain
kernels instead (``_vm.Machine``). Set ``CHAINERJIT_ARENA=0`` to compile
without arenas.
"""

import functools
import os

import numpy

from chainerjit.ops.scratch import view as _view


#: Smaller results are left to NumPy, which keeps freed blocks of under
#: 1 KiB for reuse: there the arena saves nothing and costs a call.
MIN_BYTES = 1024


def enabled():
    return os.environ.get('CHAINERJIT_ARENA', '1') != '0'


class _Escaped(object):
    def __repr__(self):
        return 'ESCAPED'


#: A root standing for memory the program does not own (arguments,
#: constants, loop state).
ESCAPED = _Escaped()


def buffer_roots(graph):
    """Returns ``(roots, escaped)``: ``roots[v]`` is the set of values
    whose buffers ``v`` may share (itself included), and ``escaped`` the
    values whose buffers outlive the call or iteration."""
    roots = {}
    for value in graph.inputs + graph.params + graph.symbols + \
            graph.all_consts():
        roots[value] = frozenset([ESCAPED])
    escaped = set()
    _visit(graph.nodes, roots, escaped)
    for value in graph.outputs:
        escaped.update(roots.get(value, ()))
    return roots, escaped


def _visit(nodes, roots, escaped, fresh=None):
    """Notes what each node's outputs may share. ``fresh``: the values
    fresh kernels computed, the only ones codegen writes into in place."""
    fresh = set() if fresh is None else fresh
    for node in nodes:
        if node.region is not None:
            _visit_loop(node, roots, escaped, fresh)
            continue
        kernel = node.kernel
        shared = set()
        if node.generic:
            # The node's own forward may keep its inputs (a user's
            # FunctionNode appending them to a list).
            for value in node.inputs:
                escaped.update(roots.get(value, ()))
        if kernel is None or not kernel.fresh:
            shared = _union(roots, node.inputs)
        else:
            fresh.update(node.outputs)
            if kernel.inplace:
                shared = _union(roots, [node.inputs[k] for k in kernel.inplace
                                        if node.inputs[k] in fresh])
        for value in node.outputs:
            roots[value] = frozenset(shared | {value})


def _visit_loop(node, roots, escaped, fresh):
    region = node.region
    body = region.body
    n_read = sum(region.carried_read)
    inits = node.inputs[1:1 + n_read]
    invariants = node.inputs[1 + n_read:]
    for value in inits:
        escaped.update(roots.get(value, ()))
    for value in body.inputs[:1 + n_read]:  # the counter, carried state
        roots[value] = frozenset([ESCAPED])
    for value, outer in zip(body.inputs[1 + n_read:], invariants):
        roots[value] = roots.get(outer, frozenset([ESCAPED]))
    _visit(body.nodes, roots, escaped, fresh)
    for value in body.outputs:
        escaped.update(roots.get(value, ()))
    for value in node.outputs:
        roots[value] = frozenset([ESCAPED])


def _union(roots, values):
    shared = set()
    for value in values:
        shared.update(roots.get(value, (ESCAPED,)))
    return shared


def release_positions(roots, last_use, position_of):
    """``{root: the last position at which a value sharing its buffer
    is read}`` (its own definition's position if none is read)."""
    release = {}
    for value, shared in roots.items():
        end = last_use.get(value, position_of.get(value, -1))
        for root in shared:
            if root is not ESCAPED and release.get(root, -1) < end:
                release[root] = end
    return release


class Planner(object):
    """Assigns arena buffers (slots) to values as codegen emits them, in
    program order, and reuses a slot once its value's buffer is no longer
    read."""

    def __init__(self, graph, last_use, position_of):
        self.roots, self.escaped = buffer_roots(graph)
        self.release = release_positions(self.roots, last_use, position_of)
        self.sizes = []  # bytes per slot
        self.free = []  # slots free for the next value
        self.busy = []  # (release position, slot)
        self.assigned = []  # (kernel index, node, slot)

    def eligible(self, node):
        """Can ``node``'s output go into the arena?"""
        if len(node.outputs) != 1 or node.kernel is None or \
                node.kernel.into is None:
            return False
        value = node.outputs[0]
        return _nbytes(value) >= MIN_BYTES and value not in self.escaped \
            and ESCAPED not in self.roots.get(value, (ESCAPED,))

    def assign(self, node, kernel_index):
        """Gives ``node``'s output a slot; returns the slot."""
        value = node.outputs[0]
        slot = self._take(_nbytes(value))
        self.busy.append((self.release[value], slot))
        self.assigned.append((kernel_index, node, slot))
        return slot

    def _take(self, nbytes):
        fitting = [s for s in self.free if self.sizes[s] >= nbytes]
        if fitting:
            slot = min(fitting, key=lambda s: self.sizes[s])
        elif self.free:
            slot = max(self.free, key=lambda s: self.sizes[s])
            self.sizes[slot] = nbytes
        else:
            self.sizes.append(nbytes)
            return len(self.sizes) - 1
        self.free.remove(slot)
        return slot

    def release_until(self, position):
        """Frees the slots whose values are not read after ``position``."""
        still = []
        for end, slot in self.busy:
            if end <= position:
                self.free.append(slot)
            else:
                still.append((end, slot))
        self.busy = still

    def bind(self, kernels, check_shapes):
        """Allocates the slots and puts each assigned node's ``into``,
        bound to its output's view of its slot, into ``kernels``.
        ``check_shapes``: the program's shapes may vary by call (a
        symbolic length), so each bound kernel checks its inputs' shapes
        and allocates when they differ from the recorded ones. Returns the
        buffers."""
        buffers = [numpy.empty(size, numpy.uint8) for size in self.sizes]
        for k, node, slot in self.assigned:
            value = node.outputs[0]
            out = _view(buffers[slot], value.shape, value.dtype)
            into = functools.partial(node.kernel.into, out)
            if check_shapes:
                into = _checking_shapes(
                    into, node.kernel.fn,
                    tuple(v.shape for v in node.inputs))
            kernels[k] = into
        return buffers


def _nbytes(value):
    return int(numpy.prod(value.shape)) * numpy.dtype(value.dtype).itemsize


def _checking_shapes(into, fn, shapes):
    def run(*arrays):
        for array, shape in zip(arrays, shapes):
            if getattr(array, 'shape', ()) != shape:
                return fn(*arrays)
        return into(*arrays)
    return run
