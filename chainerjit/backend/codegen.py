"""Code generation: an IR graph becomes a :class:`Program`.

Registers are laid out as arguments (graph inputs, then parameters, then
symbols such as a trip count), constants, then temporaries. A temporary's
register is released with ``FREE`` after its last use and handed to the
next value defined, so the register file stays small and arrays die as
early as in eager mode.

Memory reuse: a kernel with an in-place variant (``Kernel.inplace``)
writes its result into an input that dies at that instruction, when the
input is a temporary that a ``fresh`` kernel allocated (not a view, not an
argument, constant, output or loop-carried value) with the output's shape
and dtype: ``relu(linear(x))`` then fills one buffer instead of two.

Arena: a ``fresh`` kernel with an ``into`` variant writes its result into
a buffer of the program's arena when no value sharing that buffer
outlives the call (``chainerjit.backend.arena``); ``dis()`` shows
``Linear (arena 0)``.

A Loop node becomes ``SETI``/``FORI``, its body inline, and ``NEXT``
jumping back; its carried values live in registers of their own, set
before the loop and by ``MOVE`` at the end of each iteration. Values
defined before a loop and read in its body stay live until the loop ends.
"""

from chainerjit.backend import arena
from chainerjit.backend import opcodes
from chainerjit.backend import program as program_module
from chainerjit.ir import regions
from chainerjit.ops import structural


def compile_graph(graph, replay=None, arena=True):
    """Compiles a graph (after passes) to a :class:`Program`.

    Args:
        replay: optional ``{node: outputs}``; those nodes' kernels return
            the given arrays instead of computing (for self-checks that
            must not repeat a node's side effects); for a node of a loop
            body, a ``regions.PerIteration`` list.
        arena: whether values may get buffers of the arena (sized for the
            recorded shapes); ``False`` for a program that runs at other
            shapes (``runtime.ragged``).
    """
    emitter = _Emitter(graph, replay or {}, arena)
    emitter.emit_nodes(graph.nodes)
    code = emitter.code + [opcodes.RET, len(graph.outputs)]
    code += [emitter.reg[v] for v in graph.outputs]
    args = graph.inputs + graph.params + graph.symbols
    kernels, plain, buffers = emitter.kernels, None, []
    if emitter.planner.assigned:
        plain = list(kernels)
        buffers = emitter.planner.bind(kernels, bool(graph.symbols))
    return program_module.Program(
        graph.name, code, kernels, emitter.kernel_names,
        [v.data for v in emitter.consts], len(args), emitter.n_regs,
        [v.name for v in args], emitter.locs, plain, buffers)


class _Emitter(object):

    def __init__(self, graph, replay, use_arena=True):
        args = graph.inputs + graph.params + graph.symbols
        self.consts = graph.all_consts()
        self.reg = {v: i for i, v in enumerate(args + self.consts)}
        self.pinned = set(self.reg) | set(graph.outputs)  # never freed
        # Read by a kernel that may return a view of them: a later kernel
        # must not write into their buffers while the view may be alive.
        self.viewed = set()
        self.replay = replay
        self.last_use = {}
        self.position = {}
        self.defined_at = {}
        self._number(graph.nodes, [0])
        self.planner = arena.Planner(graph, self.last_use, self.defined_at)
        self.use_arena = use_arena and arena.enabled()
        self.free_regs = []
        self.n_regs = len(self.reg)
        self.code = []
        self.locs = {}
        self.kernels = []
        self.kernel_names = []
        self.exit_jumps = []  # per loop being emitted: pcs to patch
        self.fresh = set()  # values in buffers no other value shares

    def _number(self, nodes, counter):
        """Numbers the nodes in the order they run (a loop after its
        body) and notes each value's last use."""
        for node in nodes:
            if node.region is not None:
                body = node.region.body
                self._number(body.nodes, counter)
                for value in body.outputs + [  # read at the end of the body
                        n.inputs[0] for n in _exits(body, 'end')]:
                    self.last_use[value] = counter[0]
            for value in node.inputs:
                self.last_use[value] = counter[0]
            self.position[node] = counter[0]
            for value in node.outputs:
                self.defined_at[value] = counter[0]
            counter[0] += 1

    def new_reg(self, value):
        self.reg[value] = self._fresh_reg()
        return self.reg[value]

    def free_dead(self, values, position):
        dead = [v for v in values if v not in self.pinned
                and self.last_use.get(v, -1) <= position]
        for value in _unique(dead):
            self.code += [opcodes.FREE, self.reg[value]]
            self.free_regs.append(self.reg[value])

    def emit_nodes(self, nodes):
        for node in nodes:
            if node.region is not None:
                self.emit_loop(node)
            elif structural.is_exit(node):
                if dict(node.attrs)['where'] == 'here':
                    self.exit_jumps[-1].append(len(self.code))
                    self.code += _jump_if(node, self.reg[node.inputs[0]])
            else:
                self.emit_call(node)
            self.free_dead(node.inputs + node.outputs, self.position[node])
            self.planner.release_until(self.position[node])

    def emit_call(self, node):
        ins = [self.reg[v] for v in node.inputs]
        outs = [self.new_reg(v) for v in node.outputs]
        self.locs[len(self.code)] = node.loc
        reused = self._reusable_input(node)
        where = '' if reused is None else ' (into %%%d)' % ins[reused]
        if node in self.replay:
            self.kernels.append(_returning(self.replay[node],
                                           node.kernel.multi))
        elif reused is not None:
            self.kernels.append(node.kernel.inplace[reused])
        elif self.use_arena and self.planner.eligible(node):
            # The planner binds the kernel to its buffer at the end.
            slot = self.planner.assign(node, len(self.kernels))
            self.kernels.append(node.kernel.fn)
            where = ' (arena %d)' % slot
        else:
            self.kernels.append(node.kernel.fn)
        if node not in self.replay and (node.kernel.fresh or
                                        reused is not None):
            self.fresh.update(node.outputs)
        else:
            self.viewed.update(node.inputs)
        self.kernel_names.append(node.label + where)
        self.code += opcodes.encode_call(len(self.kernels) - 1, ins, outs,
                                         node.kernel.multi)

    def _reusable_input(self, node):
        """The position of an input whose buffer ``node`` may write its
        result into, or ``None``."""
        out = node.outputs[0] if len(node.outputs) == 1 else None
        for k in sorted(node.kernel.inplace or ()):
            value = node.inputs[k]
            if (out is not None and value in self.fresh and
                    value not in self.pinned and value not in self.viewed
                    and value.shape and
                    self.last_use.get(value) == self.position[node] and
                    node.inputs.count(value) == 1 and
                    (value.shape, value.dtype) == (out.shape, out.dtype)):
                return k
        return None

    def emit_loop(self, node):
        """``SETI``/``FORI``, the body inline, and ``NEXT`` jumping back;
        the loop's jumps out land after it."""
        self.locs[len(self.code)] = node.loc
        # The loop may keep its inputs in its lists (the first iteration's
        # state, saved for the backward) or return them (no iteration):
        # no later kernel may write into their buffers in place.
        self.viewed.update(node.inputs)
        carried, count, lists = self._loop_registers(node)
        counter = self._fresh_reg()
        self.code += [opcodes.SETI, counter, 0]
        top = len(self.code)
        self.code += [opcodes.FORI, counter, self.reg[node.inputs[0]], -1]
        self._bind_body_inputs(node, counter, carried)
        self.exit_jumps.append([])
        self.emit_nodes(node.region.body.nodes)
        finished = self._end_iteration(node, carried, lists, counter, top)
        end = len(self.code)
        self.code[top + 3] = end
        for pc in finished + self.exit_jumps.pop():
            self.code[pc + 2] = end
        for r in count:
            self.code += [opcodes.MOVE, counter, r]
        self.code += [opcodes.FREE, counter]
        self.free_regs.append(counter)

    def _loop_registers(self, node):
        """``(carried, count, lists)``: registers of their own for the
        loop's carried values, its count of iterations and its scan
        lists; the carried values the body reads set to their initial
        values, the lists to new ones."""
        region = node.region
        n_carried = region.n_carried
        carried = [self.new_reg(v) for v in node.outputs[:n_carried]]
        count = [self.new_reg(v) for v in
                 node.outputs[n_carried:n_carried + region.counts]]
        lists = [self.new_reg(v) for v in
                 node.outputs[n_carried + region.counts:]]
        inits = node.inputs[1:1 + sum(region.carried_read)]
        for init, r in zip(inits, _read_by_body(carried, region)):
            self.code += [opcodes.MOVE, self.reg[init], r]
        for r in lists:
            self.code += [opcodes.NEWLIST, r]
        return carried, count, lists

    def _bind_body_inputs(self, node, counter, carried):
        """The body's inputs get registers already live: the counter's,
        the carried values' own, and the invariants' from outside the
        loop."""
        region = node.region
        body_inputs = region.body.inputs
        n_read = sum(region.carried_read)
        self.reg[body_inputs[0]] = counter
        for value, r in zip(body_inputs[1:1 + n_read],
                            _read_by_body(carried, region)):
            self.reg[value] = r
        for value, outer in zip(body_inputs[1 + n_read:],
                                node.inputs[1 + n_read:]):
            self.reg[value] = self.reg[outer]
        self.pinned.update(body_inputs)

    def _end_iteration(self, node, carried, lists, counter, top):
        """The end of the body: its scan values collected, its carried
        values moved for the next iteration, then ``NEXT``; the positions
        of the jumps still to patch to the loop's end (those of the exits
        at the end of the body), returned."""
        body = node.region.body
        n_carried = node.region.n_carried
        # Collect first: a scan value may be a carried value's input.
        for value, r in zip(body.outputs[n_carried:], lists):
            self.code += [opcodes.APPEND, r, self.reg[value]]
        self._parallel_move([self.reg[v] for v in body.outputs[:n_carried]],
                            carried)
        at_end = _exits(body, 'end')
        finished = []
        for exit_node in at_end:  # leave after this iteration
            finished.append(len(self.code))
            self.code += _jump_if(exit_node, self.reg[exit_node.inputs[0]])
        self.free_dead(body.outputs + [n.inputs[0] for n in at_end],
                       self.position[node])
        self.code += [opcodes.NEXT, counter, top]
        if finished:
            for pc in finished:
                self.code[pc + 2] = len(self.code)
            finished = [len(self.code)]
            self.code += [opcodes.NEXT, counter, -1]
        return finished

    def _fresh_reg(self):
        if self.free_regs:
            return self.free_regs.pop()
        self.n_regs += 1
        return self.n_regs - 1

    def _parallel_move(self, sources, targets):
        """``targets[j] = sources[j]`` for all ``j`` at once."""
        moves = [(s, t) for s, t in zip(sources, targets) if s != t]
        if any(s in targets for s, _ in moves):
            staged = []
            for s, t in moves:
                r = self._fresh_reg()
                self.code += [opcodes.MOVE, s, r]
                staged.append((r, t))
            for r, t in staged:
                self.code += [opcodes.MOVE, r, t, opcodes.FREE, r]
                self.free_regs.append(r)
            return
        for s, t in moves:
            self.code += [opcodes.MOVE, s, t]


def _read_by_body(carried, region):
    """Those of the ``carried`` registers whose values the body reads."""
    return [r for r, read in zip(carried, region.carried_read) if read]


def _exits(body, where):
    return [n for n in body.nodes if structural.is_exit(n)
            and dict(n.attrs)['where'] == where]


def _jump_if(exit_node, register):
    """A jump (target patched later) taken when the exit's condition has
    the value that leaves the loop."""
    leaves_on = dict(exit_node.attrs)['when']
    return [opcodes.JUMPIF if leaves_on else opcodes.JUMPIFNOT, register, -1]


def _returning(outputs, multi):
    """A kernel returning the recorded ``outputs`` (a tuple: all of them
    for a ``multi`` kernel, else its one array)."""
    if isinstance(outputs, regions.PerIteration):
        results = iter(outputs)

        def replayed_in_turn(*arrays):
            found = next(results)
            return found if multi else found[0]
        return replayed_in_turn

    def replayed(*arrays):
        return outputs if multi else outputs[0]
    return replayed


def _unique(values):
    seen = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen
