"""The VM's opcodes: one table read by codegen, the VM and ``dis``.

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
======  ==================================  ===============================
"""

CALL1 = 1
CALL2 = 2
CALL3 = 3
CALLN = 4
CALLM = 5
FREE = 6
RET = 7

OPNAMES = {
    CALL1: 'CALL1', CALL2: 'CALL2', CALL3: 'CALL3', CALLN: 'CALLN',
    CALLM: 'CALLM', FREE: 'FREE', RET: 'RET',
}

# Opcodes whose register lists are fixed-length: number of input registers.
FIXED_ARITY = {CALL1: 1, CALL2: 2, CALL3: 3}


def decode(code, pc):
    """Decodes the instruction at ``pc``.

    Returns:
        tuple: ``(opcode, kernel, inputs, outputs, next_pc)``; ``kernel``
        is ``None`` for FREE and RET, whose register is listed in
        ``inputs``.
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
