"""LSTM over sequences of several lengths: eager Chainer vs chainerjit.

The model is the usual Chainer code: ``L.LSTM(64, 128)`` reset, then
called once per time step in a Python ``for`` loop, and a classifier on
the last state, at batch 16. For each length T the script times
inference (test mode, ``no_backprop_mode``) and a training step (clear
grads, forward, softmax cross entropy, backward, SGD update), checks that
both systems compute the same outputs and gradients, and counts how many
times chainerjit compiled: the loop is one region whose trip count is
symbolic, so every length after the first runs the same program.

With ``--as-list`` the steps come as a Python list of T arrays
(``models.ListLSTMClassifier``, ``for x in xs``), which chainerjit packs
into one input (``chainerjit/frontend/packing.py``).

Usage::

    python benchmarks/bench_lstm.py [--lengths 10 20 50 100]
        [--threads 1] [--as-list] [--output docs/benchmarks_lstm.md]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from benchmarks import timing  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--lengths', type=int, nargs='+',
                        default=[10, 20, 50, 100])
    parser.add_argument('--threads', type=int, default=1,
                        help='BLAS threads (0: leave as is)')
    parser.add_argument('--rounds', type=int, default=15)
    parser.add_argument('--target-ms', type=float, default=30.0)
    parser.add_argument('--as-list', action='store_true',
                        help='pass the steps as a Python list of arrays')
    parser.add_argument('--output', help='write a Markdown report here')
    return parser.parse_args(argv)


def build(as_list=False):
    """An eager model and a jitted twin with the same weights."""
    import chainerjit
    import numpy
    from examples import models

    numpy.random.seed(0)
    cls = models.ListLSTMClassifier if as_list else models.LSTMClassifier
    eager, jitted = cls(), cls()
    jitted.copyparams(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    return eager, jitted


def training_step(model, xs, t):
    import chainer
    import chainer.functions as F

    optimizer = chainer.optimizers.SGD(lr=1e-3)
    optimizer.setup(model)

    def step():
        model.cleargrads()
        loss = F.softmax_cross_entropy(model(xs), t)
        loss.backward()
        optimizer.update()
        return loss
    return step


def check_same(eager, jitted, xs, t):
    """Same outputs (inference) and, from equal weights, the same loss
    and gradients (training)."""
    import chainer
    import chainer.functions as F
    import numpy

    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for _ in range(2):
            numpy.testing.assert_allclose(jitted(xs).array, eager(xs).array,
                                          rtol=1e-4, atol=1e-5)
    jitted.copyparams(eager)
    for _ in range(2):
        losses = []
        for model in (eager, jitted):
            model.cleargrads()
            loss = F.softmax_cross_entropy(model(xs), t)
            loss.backward()
            losses.append(float(loss.array))
        numpy.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
        for p, q in zip(eager.params(), jitted.params()):
            numpy.testing.assert_allclose(q.grad, p.grad, rtol=1e-3,
                                          atol=1e-5)


def run_length(eager, jitted, length, args):
    import chainer
    import numpy

    rng = numpy.random.RandomState(length)
    xs = rng.standard_normal((length, 16, 64)).astype(numpy.float32)
    if args.as_list:
        xs = list(xs)
    t = rng.randint(0, 10, 16).astype(numpy.int32)
    misses = jitted.forward.cache_info().misses
    check_same(eager, jitted, xs, t)
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        inference = timing.interleaved(
            {'eager': lambda: eager(xs), 'jit': lambda: jitted(xs)},
            rounds=args.rounds, target_seconds=args.target_ms / 1e3,
            around=timing.system_contexts(['eager']))
    steps = {'eager': training_step(eager, xs, t),
             'jit': training_step(jitted, xs, t)}
    training = timing.interleaved(steps, rounds=args.rounds,
                                  target_seconds=args.target_ms / 1e3,
                                  around=timing.system_contexts(['eager']))
    return dict(
        length=length, inference=timing.compare(inference),
        training=timing.compare(training),
        compiles=jitted.forward.cache_info().misses - misses,
        entries=jitted.forward.cache_info().currsize,
        compiled=all(e.program is not None and (
            e.training is not None or not e.key[1])  # key[1]: backprop
            for e in jitted.forward.cache_entries()))


def format_table(results):
    lines = [
        '| T | inference eager (ms) | inference jit (ms) | jit/eager | '
        'training eager (ms) | training jit (ms) | jit/eager | '
        'new compiles | cache entries |',
        '|---|---|---|---|---|---|---|---|---|',
    ]
    for r in results:
        (inf, inf_ratio), (train, train_ratio) = r['inference'], \
            r['training']
        lines.append('| %d | %s | %s | %.2f | %s | %s | %.2f | %d | %d |' % (
            r['length'], _cell(inf['eager']), _cell(inf['jit']), inf_ratio,
            _cell(train['eager']), _cell(train['jit']), train_ratio,
            r['compiles'], r['entries']))
    return '\n'.join(lines)


def _cell(summary):
    return '%.2f [%.2f-%.2f]' % (summary.median * 1e3, summary.q1 * 1e3,
                                 summary.q3 * 1e3)


def main(argv=None):
    args = parse_args(argv)
    info = timing.start(args.threads)
    eager, jitted = build(args.as_list)
    results = []
    for length in args.lengths:
        result = run_length(eager, jitted, length, args)
        results.append(result)
        assert result['compiled'], 'an entry ran eagerly'
        print('T=%-4d inference %.2fx of eager, training %.2fx, '
              '%d new compiles' % (length, result['inference'][1],
                                   result['training'][1],
                                   result['compiles']))
    table = format_table(results)
    print(table)
    if args.output:
        with open(args.output, 'w') as f:
            f.write('\n'.join([
                '# LSTM benchmark',
                '',
                'Generated by `python benchmarks/bench_lstm.py%s --output '
                '%s`: `L.LSTM(64, 128)` over T steps in a Python loop%s, '
                'batch 16, a linear classifier on the last state. '
                'Inference in test mode under `no_backprop_mode`; '
                'training: clear grads, forward, softmax cross entropy, '
                'backward, SGD update. Medians and interquartile ranges '
                'of %d interleaved rounds, in milliseconds. "new '
                'compiles" counts recordings at that length (the first '
                'length compiles twice, an inference entry without '
                'backprop and a training entry; later lengths hit the '
                'same two symbolic entries).' % (
                    ' --as-list' if args.as_list else '', args.output,
                    ' over a Python list of T arrays' if args.as_list
                    else '', args.rounds),
                '',
                '* date: %(date)s' % info,
                '* machine: %(machine)s' % info,
                '* Python %(python)s, numpy %(numpy)s, chainer %(chainer)s'
                % info,
                '* threads: %(threads)s' % info,
                '* BLAS: %(blas)s' % info,
                '',
                table,
                '']))


if __name__ == '__main__':
    main()
