"""Compiled programs and their disassembler.

A :class:`Program` is what codegen produces and the VM runs: a flat int
array of instructions (``opcodes.py``), a register file layout (arguments,
then constants, then temporaries), a kernel table and a constant pool.
``program.dis()`` prints it in the form documented in ``docs/bytecode.md``::

    program MLP.forward: 5 inputs, 0 consts, 7 registers, 2 kernels
      inputs: %0=x %1=l1.W %2=l1.b ...
     line     pc  opcode  args
       14      0  CALL3   k0:LinearFunction+ReLU  %0 %1 %2 -> %5
              6  CALL3   k1:LinearFunction  %5 %3 %4 -> %6
             12  FREE    %5
"""

import collections
import io
import weakref

import numpy

from chainerjit import errors
from chainerjit import ir
from chainerjit.backend import _vm
from chainerjit.backend import opcodes


#: Every live program (``chainerjit.profile`` instruments them), and the
#: callables each new one is passed to.
LIVE = weakref.WeakSet()
NEW_PROGRAM_HOOKS = []


Instruction = collections.namedtuple(
    'Instruction', 'pc opname kernel inputs outputs argrepr loc')
Instruction.__doc__ = """One decoded instruction.

Fields:
    pc: offset of the instruction in ``Program.code``.
    opname: the opcode's name (``CALL1``, ``FREE``, ...).
    kernel: the kernel's index in the kernel table, or ``None``.
    inputs: registers read.
    outputs: registers written.
    argrepr: the arguments as printed.
    loc: the user's ``(filename, lineno)`` the instruction comes from.
"""


class Program(object):
    """A compiled forward.

    Attributes:
        name: the function's name.
        code: ``numpy.int32`` array of instructions.
        kernels: list of callables; ``kernel_names`` their printed names.
        consts: the constant pool (arrays), in registers ``n_inputs`` on.
        n_inputs: number of argument registers (arrays, then parameters).
        n_regs: size of the register file.
        input_names: printed names of the argument registers.
        locs: ``pc -> (filename, lineno)``.
        arena: the buffers some kernels write their results into (see
            ``chainerjit.backend.arena``); ``plain_kernels``, the kernel table
            without them, runs a call that starts while one is running.
    """

    def __init__(self, name, code, kernels, kernel_names, consts, n_inputs,
                 n_regs, input_names, locs, plain_kernels=None, arena=()):
        self.name = name
        self.code = numpy.asarray(code, dtype=numpy.int32)
        self.kernels = kernels
        self.kernel_names = kernel_names
        self.consts = consts
        self.n_inputs = n_inputs
        self.n_regs = n_regs
        self.input_names = input_names
        self.locs = locs
        self.arena = list(arena)
        self.plain_kernels = plain_kernels
        #: ``run(inputs)``: runs the program on input arrays (arguments,
        #: then parameters) and returns the tuple of its outputs; raises
        #: :class:`chainerjit.errors.VMError` (from the kernel's error) if
        #: a kernel raises, its message showing the program with ``-->``
        #: at the failing instruction. The VM's own method, no Python in
        #: between (a profile, ``chainerjit.profile``, swaps in a timed
        #: one while it runs).
        self.run = self.machine_run(kernels, plain_kernels)
        LIVE.add(self)
        for hook in NEW_PROGRAM_HOOKS:
            hook(self)

    def machine_run(self, kernels, plain_kernels=None):
        """A VM's ``run`` for this program's code with the kernel tables
        ``kernels`` (and ``plain_kernels`` for a call that starts while
        one is running, where the program has an arena)."""
        template = [None] * self.n_regs
        template[self.n_inputs:self.n_inputs + len(self.consts)] = \
            self.consts
        return _vm.Machine(
            self.code, list(kernels), template, self.n_inputs,
            None if plain_kernels is None else list(plain_kernels),
            _fault_of(weakref.ref(self))).run

    @property
    def n_instructions(self):
        return sum(1 for _ in self.instructions())

    def instructions(self):
        """Yields an :class:`Instruction` per instruction, in order."""
        code = self.code.tolist()
        pc = 0
        while pc < len(code):
            op, k, ins, outs, next_pc = opcodes.decode(code, pc)
            yield Instruction(pc, opcodes.OPNAMES[op], k, ins, outs,
                              self._argrepr(op, k, ins, outs),
                              self.locs.get(pc))
            pc = next_pc

    def _argrepr(self, op, k, ins, outs):
        if op in opcodes.CONTROL:
            n_regs = len(ins) - opcodes.CONTROL[op][2]
            text = ' '.join('%%%d' % r for r in ins[:n_regs])
            if op in (opcodes.FORI, opcodes.NEXT, opcodes.JUMPIF,
                      opcodes.JUMPIFNOT):
                return '%s  to %d' % (text, ins[-1])
            if op == opcodes.SETI:
                return '%s %d' % (text, ins[-1])
            return text
        regs = ' '.join('%%%d' % r for r in ins)
        if k is None:
            return regs
        return 'k%d:%s  %s -> %s' % (k, self.kernel_names[k], regs,
                                     ' '.join('%%%d' % r for r in outs))

    def info(self):
        """The header ``dis`` prints: sizes and the register layout."""
        lines = ['program %s: %d inputs, %d consts, %d registers, '
                 '%d kernels' % (self.name, self.n_inputs, len(self.consts),
                                 self.n_regs, len(self.kernels))]
        if self.input_names:
            lines.append('  inputs: ' + ' '.join(
                '%%%d=%s' % (i, n) for i, n in enumerate(self.input_names)))
        if self.arena:
            lines.append('  arena: %d buffer%s, %s' % (
                len(self.arena), 's' if len(self.arena) > 1 else '',
                _size(sum(b.nbytes for b in self.arena))))
        if self.consts:
            lines.append('  consts: ' + ' '.join(
                '%%%d=%s' % (self.n_inputs + i, _describe_const(c))
                for i, c in enumerate(self.consts)))
        return '\n'.join(lines)

    def dis(self, file=None, mark=None):
        """Returns (and writes to ``file``, if given) the disassembly.

        Args:
            mark: a pc to point at with ``-->``, as ``dis.distb`` does.
        """
        out = io.StringIO()
        out.write(self.info() + '\n')
        out.write('    line    pc  opcode  args\n')
        last_line = None
        for inst in self.instructions():
            line = inst.loc[1] if inst.loc else None
            shown = '    '
            if line is not None and line != last_line:
                shown = '%4d' % line
                last_line = line
            arrow = '-->' if inst.pc == mark else '   '
            out.write('%s %s %5d  %-6s  %s\n' % (
                arrow, shown, inst.pc, inst.opname, inst.argrepr))
        text = out.getvalue()
        if file is not None:
            file.write(text)
        return text


def _fault_of(program_ref):
    """The VM's ``fault``: a kernel's error as a VMError showing the
    program (held weakly: the program holds the machine)."""
    def fault(pc, error):
        program = program_ref()
        listing = '\n' + program.dis(mark=pc) if program is not None else ''
        return errors.VMError('kernel raised %s: %s%s' % (
            type(error).__name__, error, listing))
    return fault


def _size(nbytes):
    if nbytes < 1024:
        return '%d bytes' % nbytes
    if nbytes < 1024 ** 2:
        return '%.1f KiB' % (nbytes / 1024.)
    return '%.1f MiB' % (nbytes / 1024. ** 2)


def _describe_const(value):
    if value is None:
        return 'None'
    if isinstance(value, numpy.generic) and value.dtype.kind in 'iu':
        return str(value)  # a trip count
    return ir.format_type(value.shape, value.dtype)
