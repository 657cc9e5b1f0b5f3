"""Micro-benchmarks of the VM and the cache-hit path, in microseconds.

* dispatch: a program of N ``CALL1`` instructions whose kernel returns its
  argument, run on the VM; the per-instruction cost is the slope over N.
* hit: a jitted function whose program runs no kernel (it returns its
  argument), called with one array: the cost of computing the key,
  finding the entry, checking its guards and building the result.

Usage: ``python benchmarks/bench_vm.py``
"""

import os
import sys
import timeit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))


def _noop(x):
    return x


def dispatch_cost(n):
    """Microseconds per run of a program of ``n`` no-op calls."""
    from chainerjit.backend import opcodes
    from chainerjit.backend import program

    code = []
    for _ in range(n):
        code += opcodes.encode_call(0, [0], [0], False)
    code += [opcodes.RET, 1, 0]
    prog = program.Program('noops', code, [_noop], ['noop'], [], 1, 1,
                           ['x'], {})
    run = prog.run
    args = [0]
    return min(timeit.repeat(lambda: run(args), number=20000,
                             repeat=7)) / 20000 * 1e6


def hit_cost():
    """Microseconds per cache hit of a function that computes nothing."""
    import chainer
    import numpy

    import chainerjit

    f = chainerjit.jit(lambda x: x)
    x = numpy.zeros((2, 3), numpy.float32)
    with chainer.no_backprop_mode():
        f(x)
        return min(timeit.repeat(lambda: f(x), number=20000,
                                 repeat=7)) / 20000 * 1e6


def main():
    small, large = dispatch_cost(10), dispatch_cost(1010)
    print('VM: %.3f us per instruction (no-op kernel), %.2f us per run '
          'of 10 instructions' % ((large - small) / 1000, small))
    print('cache hit (key, lookup, guards, result): %.2f us' % hit_cost())


if __name__ == '__main__':
    main()
