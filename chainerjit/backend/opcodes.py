"""The VM's opcodes: one table read by codegen, the VM and ``dis``.

The VM's C enum of them, ``_opcodes.pxi``, is written from this file by
``setup.py``: after a change here, rebuild the extensions. This file
imports nothing, so that ``setup.py`` can run it by its path.

Each instruction is a run of ints in ``Program.code``: the opcode, then its
arguments. Argument kinds: ``k`` a kernel index, ``r`` a register, ``n`` a
count followed by that many registers.

======  ==================================  ===============================
opcode  layout                              effect
======  ==================================  ===============================
CALL1   CALL1 k a out                       r[out] = K[k](r[a])
CALL2   CALL2 k a b out                     r[out] = K[k](r[a], r[b])
CALL3   CALL3 k a b c out                   r[out] = K[k](r[a], r[b], r[c])
CALLN   CALLN k n a1..an out                r[out] = K[k](r[a1], ...)
CALLM   CALLM k n a1..an m o1..om           r[o1], ... = K[k](r[a1], ...)
FREE    FREE r                              r[r] = None (last use)
RET     RET n o1..on                        return (r[o1], ...)
MOVE    MOVE a b                            r[b] = r[a]
SETI    SETI r v                            r[r] = v (an int)
FORI    FORI c n t                          if r[c] >= r[n]: jump to t
NEXT    NEXT c t                            r[c] += 1; jump to t
NEWLIST NEWLIST r                           r[r] = []
APPEND  APPEND l a                          r[l].append(r[a])
JUMPIF  JUMPIF c t                          if r[c]: jump to t
JUMPIFNOT JUMPIFNOT c t                     if not r[c]: jump to t
======  ==================================  ===============================

A loop region is ``SETI c 0``, ``FORI c n end``, the body, ``NEXT c
top``: ``t`` is an offset into the code (a jump target). A loop's exits
(``while`` on an array, ``if ...: break``) are ``JUMPIF`` or
``JUMPIFNOT`` on the condition.
"""

CALL1 = 1
CALL2 = 2
CALL3 = 3
CALLN = 4
CALLM = 5
FREE = 6
RET = 7
MOVE = 8
SETI = 9
FORI = 10
NEXT = 11
NEWLIST = 12
APPEND = 13
JUMPIF = 14
JUMPIFNOT = 15

OPNAMES = {
    CALL1: 'CALL1', CALL2: 'CALL2', CALL3: 'CALL3', CALLN: 'CALLN',
    CALLM: 'CALLM', FREE: 'FREE', RET: 'RET', MOVE: 'MOVE', SETI: 'SETI',
    FORI: 'FORI', NEXT: 'NEXT', NEWLIST: 'NEWLIST', APPEND: 'APPEND',
    JUMPIF: 'JUMPIF', JUMPIFNOT: 'JUMPIFNOT',
}

# Control opcodes: (registers read, registers written, has a jump target
# or an immediate as last argument).
CONTROL = {
    MOVE: (1, 1, False), SETI: (0, 1, True), FORI: (2, 0, True),
    NEXT: (1, 0, True), NEWLIST: (0, 1, False), APPEND: (2, 0, False),
    JUMPIF: (1, 0, True), JUMPIFNOT: (1, 0, True),
}

# Opcodes whose register lists are fixed-length: number of input registers.
FIXED_ARITY = {CALL1: 1, CALL2: 2, CALL3: 3}


def decode(code, pc):
    """Decodes the instruction at ``pc``.

    Returns:
        tuple: ``(opcode, kernel, inputs, outputs, next_pc)``; ``kernel``
        is ``None`` for FREE, RET and the control opcodes, whose
        arguments are listed in ``inputs``.
    """
    op = code[pc]
    if op in FIXED_ARITY:
        n = FIXED_ARITY[op]
        ins = list(code[pc + 2:pc + 2 + n])
        return op, code[pc + 1], ins, [code[pc + 2 + n]], pc + 3 + n
    if op == CALLN:
        n = code[pc + 2]
        ins = list(code[pc + 3:pc + 3 + n])
        return op, code[pc + 1], ins, [code[pc + 3 + n]], pc + 4 + n
    if op == CALLM:
        n = code[pc + 2]
        ins = list(code[pc + 3:pc + 3 + n])
        m = code[pc + 3 + n]
        outs = list(code[pc + 4 + n:pc + 4 + n + m])
        return op, code[pc + 1], ins, outs, pc + 4 + n + m
    if op == FREE:
        return op, None, [code[pc + 1]], [], pc + 2
    if op == RET:
        n = code[pc + 1]
        return op, None, list(code[pc + 2:pc + 2 + n]), [], pc + 2 + n
    if op in CONTROL:
        return op, None, list(code[pc + 1:pc + 1 + control_size(op)]), [], \
            pc + 1 + control_size(op)
    raise ValueError('bad opcode %r at pc %d' % (op, pc))


def encode_call(kernel, inputs, outputs, multi):
    """The ints of a call instruction."""
    if multi:
        return [CALLM, kernel, len(inputs)] + list(inputs) + [
            len(outputs)] + list(outputs)
    n = len(inputs)
    if 1 <= n <= 3:
        return [(CALL1, CALL2, CALL3)[n - 1], kernel] + list(inputs) + [
            outputs[0]]
    return [CALLN, kernel, n] + list(inputs) + [outputs[0]]


def control_size(op):
    """The number of arguments of a control opcode."""
    n_in, n_out, last = CONTROL[op]
    return n_in + n_out + last
