"""Forwards chainerjit cannot compile: never much slower than eager.

Three workloads that chainerjit runs eagerly, each timed eagerly and
jitted side by side from a fresh model, every call's result checked
against eager's:

* ``new value every call``: a forward whose Python ``float`` argument
  changes on every call (each call is a new signature);
* ``count, one shape``: a classifier whose forward reads its accuracy
  count into Python (``int((y.array.argmax(1) == t).sum())``), at one
  batch shape: the signature falls back to eager once and its entry
  answers every call after;
* ``count, new lengths``: the same over batches of varying length (a
  tagger over sentences of 5 to 40 tokens): each new length is a new
  signature.

For each: the total time of the whole sequence of calls (recordings and
compiles included), its ratio to eager's, and, once the jitted function
stopped recording, the steady-state cost per call against eager's
(medians of interleaved rounds): the wrapper's overhead around an eager
call. ``cache_info()`` at the end says what ran how.

Usage::

    python benchmarks/bench_fallback.py [--calls 300]
        [--output docs/benchmarks_fallback.md]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from benchmarks import timing  # noqa: E402

WORKLOADS = ('new value every call', 'count, one shape',
             'count, new lengths')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--calls', type=int, default=300)
    parser.add_argument('--threads', type=int, default=1,
                        help='BLAS threads (0: leave as is)')
    parser.add_argument('--rounds', type=int, default=15)
    parser.add_argument('--target-ms', type=float, default=20.0)
    parser.add_argument('--output', help='write a Markdown report here')
    return parser.parse_args(argv)


def models():
    """The two model classes, defined once chainer is imported."""
    import chainer
    import chainer.functions as F
    import chainer.links as L

    class Scaled(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.fc = L.Linear(64, 64)

        def forward(self, x, k):
            return F.tanh(self.fc(x)) * k

    class Counting(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.fc = L.Linear(64, 10)

        def forward(self, x, t):
            y = self.fc(x)
            correct = int((y.array.argmax(axis=1) == t).sum())
            chainer.report({'accuracy': correct / len(t)}, self)
            return F.softmax_cross_entropy(y, t)

    return {'new value every call': Scaled, 'count, one shape': Counting,
            'count, new lengths': Counting}


def calls_of(workload, n, rng):
    import numpy

    def batch(rows):
        return rng.standard_normal((rows, 64)).astype(numpy.float32)
    if workload == 'new value every call':
        return [(batch(16), 1.0 + k / n) for k in range(n)]
    lengths = [16] * n if workload == 'count, one shape' else \
        [int(k) for k in rng.randint(5, 41, n)]
    return [(batch(m), rng.randint(0, 10, m).astype(numpy.int32))
            for m in lengths]


def twins(cls):
    import chainerjit
    import numpy

    numpy.random.seed(0)
    eager, jitted = cls(), cls()
    jitted.copyparams(eager)
    return eager.forward, chainerjit.jit(jitted.forward)


def total_seconds(fn, calls):
    start = time.perf_counter()
    results = [fn(*args) for args in calls]
    return time.perf_counter() - start, results


def run_workload(workload, args):
    """Times one workload; checks every result against eager's."""
    import warnings
    import numpy
    from chainerjit import testing

    rng = numpy.random.RandomState(1)
    calls = calls_of(workload, args.calls, rng)
    eager, jitted = twins(models()[workload])
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        eager(*calls[0])  # Chainer's own first-call costs, not timed
        eager_total, expected = total_seconds(eager, calls)
        jit_total, actual = total_seconds(jitted, calls)
        for a, e in zip(actual, expected):
            testing.assert_results_equal(a, e)
        tail = calls[-min(len(calls), 50):]

        def run_tail(fn):
            return lambda: [fn(*c) for c in tail]
        samples = timing.interleaved(
            {'eager': run_tail(eager), 'jit': run_tail(jitted)},
            rounds=args.rounds, target_seconds=args.target_ms / 1e3)
    summaries, ratio = timing.compare(samples)
    per_call = {k: s.median / len(tail) for k, s in summaries.items()}
    return {'workload': workload, 'eager_total': eager_total,
            'jit_total': jit_total, 'eager_call': per_call['eager'],
            'jit_call': per_call['jit'], 'info': jitted.cache_info(),
            'stopped': jitted.budget.stopped}


def format_table(rows):
    lines = ['| workload | eager, total | jit, total | ratio | eager per '
             'call | jit per call | overhead | compiles | recorded | '
             'calls run eagerly |',
             '|---|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        info = r['info']
        lines.append(
            '| %s | %.1f ms | %.1f ms | %.2fx | %.1f us | %.1f us | '
            '%+.1f us | %d | %d | %d of %d |' % (
                r['workload'], r['eager_total'] * 1e3, r['jit_total'] * 1e3,
                r['jit_total'] / r['eager_total'], r['eager_call'] * 1e6,
                r['jit_call'] * 1e6, (r['jit_call'] - r['eager_call']) * 1e6,
                info.compiles, info.currsize, info.eager,
                info.hits + info.misses))
    return '\n'.join(lines)


def main(argv=None):
    args = parse_args(argv)
    info = timing.start(args.threads)
    rows = [run_workload(w, args) for w in WORKLOADS]
    table = format_table(rows)
    stops = ['* %s: %s.' % (r['workload'], r['stopped']) for r in rows
             if r['stopped']]
    report = '\n'.join([
        '# Forwards that run eagerly',
        '',
        'Generated by `python benchmarks/bench_fallback.py --calls %d%s`. '
        'Each workload is %d calls of a fresh model, eagerly and through '
        '`chainerjit.jit`, every result checked against eager\'s. *Total*: '
        'the whole sequence, recordings and compiles included. *Per call*: '
        'medians of %d interleaved rounds over the last 50 calls, once '
        'the jitted function has stopped recording; *overhead* is the '
        'difference, the cost of the wrapper around an eager call. '
        '*recorded*: signatures recorded (entries kept); the other misses '
        'ran eagerly unrecorded.' % (
            args.calls, ' --output %s' % args.output if args.output else '',
            args.calls, args.rounds),
        '',
        '* date: %(date)s' % info,
        '* machine: %(machine)s' % info,
        '* Python %(python)s, numpy %(numpy)s, chainer %(chainer)s' % info,
        '* threads: %(threads)s; BLAS: %(blas)s' % info,
        '',
        table,
        '',
        'Why each jitted function stopped recording:',
        '',
    ] + stops) + '\n'
    timing.publish(report, args.output)
    return rows


if __name__ == '__main__':
    main()
