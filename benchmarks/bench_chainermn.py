"""Data-parallel training with ChainerMN: time per iteration for 1 and 2
MPI processes, eager Chainer vs chainerjit, side by side.

The workload is the training iteration of ``examples/train_digits_mn.py``:
LeNet in a classifier on 8x8 digits, batch 32 per process, a multi-node
MomentumSGD (the gradients averaged over the processes by an allreduce
after each backward). Batch normalization is Chainer's (each process's
own statistics) or ChainerMN's ``MultiNodeBatchNormalization``
(statistics averaged over the processes, a collective in each forward
and backward). With chainerjit the classifier's forward is jitted.

Every process times the eager and the jitted iteration in interleaved
rounds (the same number of iterations for each, in the same order on
every process, since each iteration is a collective), after a warm-up
that compiles. The median time per iteration and the ratio jit/eager are
reported for each process count, and the numbers are checked: after the
timing the eager and the jitted models, which made the same updates on
the same batches, must hold parameters that agree, the same on every
process.

Usage::

    python benchmarks/bench_chainermn.py [--processes 1 2] [--rounds 9]
        [--output docs/benchmarks_chainermn.md]

(It starts ``mpiexec`` itself; ``--worker`` is the part each MPI process
runs.)
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from benchmarks import timing  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH_NORMS = ('local', 'multi-node')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--processes', type=int, nargs='+', default=[1, 2])
    parser.add_argument('--rounds', type=int, default=9)
    parser.add_argument('--inner', type=int, default=10,
                        help='iterations per timed sample')
    parser.add_argument('--batchsize', type=int, default=32)
    parser.add_argument('--output', help='write a Markdown report here')
    parser.add_argument('--worker', action='store_true',
                        help='run as one MPI process (internal)')
    return parser.parse_args(argv)


# --- one MPI process ---------------------------------------------------------

def _iteration(comm, model, batch):
    import chainer
    import chainermn
    optimizer = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(lr=0.01), comm)
    optimizer.setup(model)
    return lambda: optimizer.update(model, *batch)


def _batch(comm, size):
    from examples import train_digits
    x, y = train_digits.load_digits()
    start = (comm.rank * size) % (len(x) - size)
    return x[start:start + size], y[start:start + size]


def _check(comm, eager, jitted):
    """The twins' parameters agree, and each is the same on every
    process."""
    import numpy
    from examples import train_digits_mn
    for model in (eager, jitted):
        mine = train_digits_mn.flat_arrays(model, persistent=False)
        for theirs in comm.mpi_comm.allgather(mine):
            assert numpy.array_equal(mine, theirs)
    numpy.testing.assert_allclose(
        train_digits_mn.flat_arrays(jitted),
        train_digits_mn.flat_arrays(eager), rtol=1e-3, atol=1e-4)


def worker(args):
    import chainermn
    from examples import train_digits_mn
    comm = chainermn.create_communicator('naive')
    timing.limit_threads(1)
    batch = _batch(comm, args.batchsize)
    results = {}
    for bn in BATCH_NORMS:
        eager, jitted = train_digits_mn.make_models(comm, batch[0], bn)
        steps = {'eager': _iteration(comm, eager, batch),
                 'jit': _iteration(comm, jitted, batch)}
        comm.mpi_comm.Barrier()
        samples = timing.interleaved(
            steps, rounds=args.rounds, inner=args.inner, warmup=3,
            around=timing.system_contexts(['eager']))
        _check(comm, eager, jitted)
        info = jitted.forward.cache_info()
        results[bn] = {'eager': samples['eager'], 'jit': samples['jit'],
                       'compiled': info.compiled, 'calls':
                       info.hits + info.misses}
    gathered = comm.mpi_comm.gather(results)
    if comm.rank == 0:
        print('RESULTS ' + json.dumps(gathered))


# --- the driver --------------------------------------------------------------

def run_processes(n, args):
    """Runs the worker in ``n`` MPI processes; the results of each."""
    mpiexec = shutil.which('mpiexec', path=os.path.dirname(
        sys.executable)) or shutil.which('mpiexec')
    if mpiexec is None:
        sys.exit('bench_chainermn: mpiexec not found (scripts/install.sh '
                 'installs MPICH and mpi4py)')
    command = [mpiexec, '-n', str(n), sys.executable,
               os.path.abspath(__file__), '--worker', '--rounds',
               str(args.rounds), '--inner', str(args.inner), '--batchsize',
               str(args.batchsize)]
    env = dict(os.environ, OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1',
               MKL_NUM_THREADS='1')
    done = subprocess.run(command, cwd=ROOT, env=env, check=True,
                          stdout=subprocess.PIPE, text=True)
    line, = [x for x in done.stdout.splitlines() if x.startswith('RESULTS ')]
    return json.loads(line[len('RESULTS '):])


def report(info, results, args):
    lines = [
        '# ChainerMN data-parallel training: eager vs chainerjit',
        '',
        'Made by `benchmarks/bench_chainermn.py`: LeNet on 8x8 digits, '
        'batch %d per process, multi-node MomentumSGD; one BLAS thread '
        'per process; processes on one machine, MPICH over shared memory. '
        'Milliseconds per training iteration (forward, backward, '
        'allreduce, update), median of %d samples of %d iterations, for '
        'each process; ratio jit/eager of the medians. The eager and '
        'jitted models were checked to agree after the timing, with the '
        'same parameters on every process.'
        % (args.batchsize, args.rounds, args.inner),
        '',
        '- machine: %s' % info['machine'],
        '- numpy: %s; chainer: %s' % (info['numpy'], info['chainer']),
        '- BLAS: %s' % info['blas'],
        '- date: %s' % info['date'],
        '',
        '| processes | batch normalization | process | eager ms | jit ms '
        '| jit/eager | compiled calls |',
        '| --- | --- | --- | --- | --- | --- | --- |',
    ]
    for n, per_process in results:
        for bn in BATCH_NORMS:
            for rank, result in enumerate(per_process):
                summaries, ratio = timing.compare(
                    {'eager': result[bn]['eager'],
                     'jit': result[bn]['jit']})
                lines.append('| %d | %s | %d | %.2f | %.2f | %.2f | %d of '
                             '%d |' % (
                                 n, bn, rank,
                                 summaries['eager'].median * 1e3,
                                 summaries['jit'].median * 1e3, ratio,
                                 result[bn]['compiled'],
                                 result[bn]['calls']))
    return '\n'.join(lines) + '\n'


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    info = timing.start(1)
    results = [(n, run_processes(n, args)) for n in args.processes]
    timing.publish(report(info, results, args), args.output)


if __name__ == '__main__':
    main()
