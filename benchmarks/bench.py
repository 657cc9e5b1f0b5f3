"""Benchmark: eager Chainer against chainerjit, side by side.

Inference: MLP 784-100-100-10 at batch 1 and 64, and LeNet on 28x28
images at batch 32, in test mode without backprop. Training: the full
step (clear grads, forward, softmax cross entropy, backward, SGD update)
for the MLP at batch 64 and LeNet at batch 32, in training mode. Eager
and jit are timed in interleaved rounds in one process, after checking
that both compute the same outputs (and, for training, the same
gradients) on the same input.

Usage::

    python benchmarks/bench.py [--threads 1] [--rounds 15]
        [--output docs/benchmarks.md]

BLAS threads are limited to ``--threads`` (default 1) before numpy is
imported, so the numbers measure per-call overhead, not parallelism.
"""

import argparse
import copy
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from benchmarks import timing  # noqa: E402  (imports no numpy)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--threads', type=int, default=1,
                        help='BLAS/OpenMP threads; 0 leaves the '
                        'environment as it is (default 1)')
    parser.add_argument('--rounds', type=int, default=15)
    parser.add_argument('--target-ms', type=float, default=20.0,
                        help='length of one timed sample (default 20)')
    parser.add_argument('--output', help='write a Markdown report here')
    return parser.parse_args(argv)


def cases():
    """``(name, kind, model factory, input shape)`` for each benchmark;
    kind is ``'inference'`` or ``'training'``."""
    from examples import models
    return [
        ('MLP 784-100-100-10, batch 1', 'inference', models.MLP, (1, 784)),
        ('MLP 784-100-100-10, batch 64', 'inference', models.MLP,
         (64, 784)),
        ('LeNet 28x28, batch 32', 'inference', models.LeNet,
         (32, 1, 28, 28)),
        ('MLP 784-100-100-10, batch 64', 'training', models.MLP,
         (64, 784)),
        ('LeNet 28x28, batch 32', 'training', models.LeNet,
         (32, 1, 28, 28)),
    ]


def build(factory, shape):
    """An eager model, a jitted copy with the same weights, and an
    input; the jitted forward's first call (the compile) is timed."""
    import chainerjit
    import numpy

    rng = numpy.random.RandomState(0)
    numpy.random.seed(0)
    x = rng.uniform(-1, 1, shape).astype(numpy.float32)
    eager = factory()
    eager(x)  # initializes lazily sized layers
    jitted = copy.deepcopy(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    start = time.perf_counter()
    jitted(x)
    compile_seconds = time.perf_counter() - start
    return eager, jitted, x, compile_seconds


def run_case(name, kind, factory, shape, args):
    """Checks and times one case; returns a result dict."""
    import chainer
    import numpy

    if kind == 'inference':
        with chainer.using_config('train', False), \
                chainer.no_backprop_mode():
            eager, jitted, x, compile_seconds = build(factory, shape)
            numpy.testing.assert_allclose(jitted(x).array, eager(x).array,
                                          rtol=1e-5, atol=1e-6)
            samples = timing.interleaved(
                {'eager': lambda: eager(x), 'jit': lambda: jitted(x)},
                rounds=args.rounds, target_seconds=args.target_ms / 1e3)
        compiled = all(entry.program is not None
                       for entry in jitted.forward.cache_entries())
    else:
        eager, jitted, x, compile_seconds = build(factory, shape)
        steps = {m: training_step(m, x) for m in (eager, jitted)}
        check_same_step(eager, jitted, steps)
        samples = timing.interleaved(
            {'eager': steps[eager], 'jit': steps[jitted]},
            rounds=args.rounds, target_seconds=args.target_ms / 1e3)
        compiled = all(entry.training is not None
                       for entry in jitted.forward.cache_entries())
    summaries, ratio = timing.compare(samples)
    return dict(name=name, kind=kind, eager=summaries['eager'],
                jit=summaries['jit'], ratio=ratio,
                compile_seconds=compile_seconds, compiled=compiled,
                cache=jitted.forward.cache_info())


def training_step(model, x):
    """One SGD step on random labels: clear grads, forward, loss,
    backward, update."""
    import chainer
    import chainer.functions as F
    import numpy

    t = numpy.random.RandomState(1).randint(0, 10, len(x)).astype(
        numpy.int32)
    optimizer = chainer.optimizers.SGD(lr=1e-3)
    optimizer.setup(model)

    def step():
        model.cleargrads()
        loss = F.softmax_cross_entropy(model(x), t)
        loss.backward()
        optimizer.update()
        return loss
    return step


def check_same_step(eager, jitted, steps):
    """Both models compute the same loss and gradients on a step from the
    same weights."""
    import numpy

    for _ in range(2):  # the first jitted step records
        losses = [float(steps[m]().array) for m in (eager, jitted)]
        numpy.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
        for p, q in zip(eager.params(), jitted.params()):
            numpy.testing.assert_allclose(q.grad, p.grad, rtol=1e-4,
                                          atol=1e-6)


def format_table(results, kind):
    """The results of one kind as a Markdown table."""
    lines = [
        '| %s | eager (us) | jit (us) | jit/eager | speed-up | '
        'first call (ms) |' % kind,
        '|---|---|---|---|---|---|',
    ]
    for r in results:
        if r['kind'] != kind:
            continue
        note = '' if r['compiled'] else ' (ran eagerly: fallback)'
        lines.append('| %s%s | %s | %s | %.2f | %.2fx | %.1f |' % (
            r['name'], note, _cell(r['eager']), _cell(r['jit']),
            r['ratio'], 1 / r['ratio'], r['compile_seconds'] * 1e3))
    return '\n'.join(lines)


def _cell(summary):
    return '%.1f [%.1f-%.1f]' % (summary.median * 1e6,
                                 summary.q1 * 1e6, summary.q3 * 1e6)


def format_report(info, args, table):
    """The Markdown document written by ``--output``."""
    return '\n'.join([
        '# Benchmarks',
        '',
        'Generated by `python benchmarks/bench.py --output '
        'docs/benchmarks.md` (eager Chainer and chainerjit in one '
        'process; inference in test mode under `no_backprop_mode`; '
        'training: clear grads, forward, softmax cross entropy, '
        'backward and an SGD update, in training mode).',
        '',
        '* date: %(date)s' % info,
        '* machine: %(machine)s' % info,
        '* Python %(python)s, numpy %(numpy)s, chainer %(chainer)s' % info,
        '* threads: %(threads)s' % info,
        '* BLAS: %(blas)s' % info,
        '* %d interleaved rounds of ~%g ms per case; per-call median '
        'and interquartile range in microseconds' % (
            args.rounds, args.target_ms),
        '* first call: recording, compiling and self-checking the '
        'program',
        '',
        table,
        '',
    ])


def main(argv=None):
    args = parse_args(argv)
    timing.limit_threads(args.threads or None)
    info = timing.machine_info()
    for key in ('date', 'machine', 'numpy', 'chainer', 'threads', 'blas'):
        print('%-8s %s' % (key + ':', info[key]))
    results = []
    for name, kind, factory, shape in cases():
        r = run_case(name, kind, factory, shape, args)
        print('%-9s %-30s eager %s  jit %s  jit/eager %.2f (%.2fx)  '
              'first call %.1f ms  %s' % (
                  kind, r['name'], r['eager'].format(), r['jit'].format(),
                  r['ratio'], 1 / r['ratio'], r['compile_seconds'] * 1e3,
                  r['cache']))
        results.append(r)
    table = '\n\n'.join(
        format_table(results, kind) for kind in ('inference', 'training'))
    print()
    print(table)
    if args.output:
        with open(args.output, 'w') as f:
            f.write(format_report(info, args, table))
        print('wrote %s' % args.output)


if __name__ == '__main__':
    main()
