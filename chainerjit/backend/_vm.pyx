# cython: language_level=3, boundscheck=False, wraparound=False
"""The bytecode VM: runs a :class:`chainerjit.backend.program.Program`.

The loop decodes a flat int array (see ``opcodes.py``) and calls kernels
from a list on a register list. It touches no Variables and does no dict
look-ups per instruction.
"""

from chainerjit import errors as _errors

# The opcodes (``cdef enum``), written from ``opcodes.py`` by setup.py.
include "_opcodes.pxi"


class VMFault(Exception):
    """A kernel raised; ``pc`` is where (the original error is chained)."""

    def __init__(self, pc, error):
        Exception.__init__(self, pc, error)
        self.pc = pc
        self.error = error


cdef tuple _Faults = (VMFault, _errors.VMError)


cdef class Machine:
    """One program, ready to run: code, kernels and the register template
    (arguments first, then constants, then temporaries).

    ``plain``: when some kernels write into the program's arena, the
    kernel table without it; a call that starts while another call is
    running (re-entered, or from another thread) runs with it, so that
    two calls never share an arena buffer. The check and the flag are C
    code run under the GIL, so no other thread runs between them."""

    cdef int[::1] code
    cdef list kernels
    cdef list plain
    cdef list template
    cdef Py_ssize_t n_inputs
    cdef bint busy
    cdef object fault

    def __init__(self, code, list kernels, list template, Py_ssize_t n_inputs,
                 list plain=None, fault=VMFault):
        self.code = code
        self.kernels = kernels
        self.plain = plain
        self.template = template
        self.n_inputs = n_inputs
        self.busy = False
        self.fault = fault

    def run(self, inputs):
        """Runs the program on a sequence of input arrays and returns the
        tuple of its outputs.

        Raises:
            ``fault(pc, error)`` (a :class:`VMFault` unless the machine
            was made with another ``fault``), from the error, if a kernel
            raises; a fault raised by a machine a kernel ran, as it is.
        """
        cdef list regs = list(self.template)
        cdef Py_ssize_t i
        if len(inputs) != self.n_inputs:
            raise ValueError('expected %d inputs, got %d'
                             % (self.n_inputs, len(inputs)))
        for i in range(self.n_inputs):
            regs[i] = inputs[i]
        cdef int[::1] code = self.code
        cdef list kernels = self.kernels
        cdef bint owner = False
        if self.plain is not None:
            if self.busy:
                kernels = self.plain
            else:
                self.busy = True
                owner = True
        cdef int pc = 0
        cdef int op, n, m, j
        cdef object result
        cdef tuple args
        try:
            while True:
                op = code[pc]
                if op == CALL1:
                    regs[code[pc + 3]] = kernels[code[pc + 1]](
                        regs[code[pc + 2]])
                    pc += 4
                elif op == CALL2:
                    regs[code[pc + 4]] = kernels[code[pc + 1]](
                        regs[code[pc + 2]], regs[code[pc + 3]])
                    pc += 5
                elif op == FREE:
                    regs[code[pc + 1]] = None
                    pc += 2
                elif op == CALL3:
                    regs[code[pc + 5]] = kernels[code[pc + 1]](
                        regs[code[pc + 2]], regs[code[pc + 3]],
                        regs[code[pc + 4]])
                    pc += 6
                elif op == CALLN:
                    n = code[pc + 2]
                    args = tuple([regs[code[pc + 3 + j]] for j in range(n)])
                    regs[code[pc + 3 + n]] = kernels[code[pc + 1]](*args)
                    pc += 4 + n
                elif op == CALLM:
                    n = code[pc + 2]
                    args = tuple([regs[code[pc + 3 + j]] for j in range(n)])
                    result = kernels[code[pc + 1]](*args)
                    m = code[pc + 3 + n]
                    if len(result) != m:
                        raise ValueError(
                            'kernel returned %d outputs, expected %d'
                            % (len(result), m))
                    for j in range(m):
                        regs[code[pc + 4 + n + j]] = result[j]
                    pc += 4 + n + m
                elif op == MOVE:
                    regs[code[pc + 2]] = regs[code[pc + 1]]
                    pc += 3
                elif op == FORI:
                    if regs[code[pc + 1]] >= regs[code[pc + 2]]:
                        pc = code[pc + 3]
                    else:
                        pc += 4
                elif op == NEXT:
                    regs[code[pc + 1]] = regs[code[pc + 1]] + 1
                    pc = code[pc + 2]
                elif op == APPEND:
                    regs[code[pc + 1]].append(regs[code[pc + 2]])
                    pc += 3
                elif op == JUMPIF:
                    if regs[code[pc + 1]]:
                        pc = code[pc + 2]
                    else:
                        pc += 3
                elif op == JUMPIFNOT:
                    if regs[code[pc + 1]]:
                        pc += 3
                    else:
                        pc = code[pc + 2]
                elif op == SETI:
                    regs[code[pc + 1]] = code[pc + 2]
                    pc += 3
                elif op == NEWLIST:
                    regs[code[pc + 1]] = []
                    pc += 2
                elif op == RET:
                    n = code[pc + 1]
                    return tuple([regs[code[pc + 2 + j]] for j in range(n)])
                else:
                    raise ValueError('bad opcode %d' % op)
        except _Faults:
            raise
        except Exception as e:
            raise self.fault(pc, e) from e
        finally:
            if owner:
                self.busy = False
