"""Data-parallel training of LeNet on scikit-learn's digits with ChainerMN,
eagerly and with chainerjit.

Run it over N processes with MPI::

    .venv/bin/mpiexec -n 2 .venv/bin/python examples/train_digits_mn.py

Each process trains on its shard of the training split
(``chainermn.scatter_dataset``); the multi-node optimizer averages the
gradients over the processes after each backward, and the multi-node
evaluator averages the test accuracy. By default the batch normalization
layers are ChainerMN's ``MultiNodeBatchNormalization``, whose statistics
are averaged over the processes too (``--bn local`` keeps Chainer's).

The eager and the jitted model start from the same weights and see the
same batches. In the jitted one the classifier's forward is jitted: each
process runs its compiled forward and backward programs, the collectives
of the batch normalization among their kernels, and the optimizer's
allreduce after them. The script prints, on the first process, the
accuracy and the time per epoch of each process, and checks that every
process holds the same parameters and that the jitted run's agree with
the eager run's.

Usage: ``mpiexec -n N python examples/train_digits_mn.py [--epochs 5]
[--batchsize 32] [--bn multi-node|local] [--communicator naive]``
"""

import argparse
import copy
import os
import sys
import tempfile
import time
import warnings

import chainer
from chainer import training
from chainer.training import extensions
import chainermn
import numpy

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

import chainerjit  # noqa: E402
from benchmarks import timing  # noqa: E402
from examples import train_digits  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--epochs', type=int, default=5)
    parser.add_argument('--batchsize', type=int, default=32,
                        help='examples per process and step')
    parser.add_argument('--bn', choices=('multi-node', 'local'),
                        default='multi-node',
                        help='batch normalization over all processes\' '
                        'batches (ChainerMN\'s) or over each one\'s')
    parser.add_argument('--communicator', default='naive',
                        help='ChainerMN communicator (naive and flat run '
                        'on the CPU; pure_nccl needs GPUs)')
    return parser.parse_args(argv)


def make_models(comm, x, bn):
    """The eager model and its jitted twin, the same weights on every
    process: LeNet in a classifier, its batch normalization ChainerMN's
    when ``bn`` is ``'multi-node'``."""
    eager = train_digits.make_model(x)
    if bn == 'multi-node':
        with warnings.catch_warnings():  # ChainerMN calls it experimental
            warnings.simplefilter('ignore', FutureWarning)
            eager = chainermn.links.create_mnbn_model(eager, comm)
    jitted = copy.deepcopy(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    return eager, jitted


def shards(comm):
    """This process's shards of the training and test splits (the first
    process splits them; ``scatter_dataset`` sends each its part)."""
    train_set = test_set = None
    if comm.rank == 0:
        x, y = train_digits.load_digits()
        n_test = train_digits.N_TEST
        train_set = chainer.datasets.TupleDataset(x[n_test:], y[n_test:])
        test_set = chainer.datasets.TupleDataset(x[:n_test], y[:n_test])
    train_set = chainermn.scatter_dataset(
        train_set, comm, shuffle=True, seed=train_digits.SEED)
    test_set = chainermn.scatter_dataset(test_set, comm)
    return train_set, test_set


def train(comm, model, train_set, test_set, args):
    """Trains ``model`` data-parallel; returns this process's seconds per
    epoch (evaluation included) and the last test accuracy, averaged over
    the processes."""
    order = chainer.iterators.ShuffleOrderSampler(
        numpy.random.RandomState(train_digits.SEED + comm.rank))
    train_iter = chainer.iterators.SerialIterator(
        train_set, args.batchsize, order_sampler=order)
    test_iter = chainer.iterators.SerialIterator(
        test_set, 64, repeat=False, shuffle=False)
    optimizer = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(lr=0.05), comm)
    optimizer.setup(model)
    updater = training.updaters.StandardUpdater(train_iter, optimizer)
    evaluator = chainermn.create_multi_node_evaluator(
        extensions.Evaluator(test_iter, model), comm)
    with tempfile.TemporaryDirectory() as out:
        trainer = training.Trainer(updater, (args.epochs, 'epoch'), out)
        trainer.extend(evaluator)
        if comm.rank == 0:
            trainer.extend(extensions.LogReport())
            trainer.extend(extensions.PrintReport(
                ['epoch', 'main/loss', 'main/accuracy',
                 'validation/main/accuracy', 'elapsed_time']))
        comm.mpi_comm.Barrier()
        start = time.perf_counter()
        trainer.run()
        seconds = (time.perf_counter() - start) / args.epochs
        accuracy = float(evaluator()['validation/main/accuracy'])
    return seconds, accuracy


def flat_arrays(model, persistent=True):
    """The model's parameters, and its persistent arrays (batch
    normalization's running statistics) if ``persistent``, in one float64
    vector."""
    arrays = [p.array for _, p in sorted(model.namedparams())]
    if persistent:
        for _, link in sorted(model.namedlinks()):
            arrays += [getattr(link, name)
                       for name in sorted(link._persistent)]
    return numpy.concatenate([numpy.asarray(a, numpy.float64).ravel()
                              for a in arrays])


def check_parameters(comm, eager, jitted, bn):
    """Asserts that every process holds the same parameters in each run
    (and the same running statistics, where the batch normalization is
    ChainerMN's), and that the jitted run's arrays agree with the eager
    run's; returns the largest difference between the runs."""
    for name, model in (('eager', eager), ('jit', jitted)):
        mine = flat_arrays(model, persistent=bn == 'multi-node')
        for rank, theirs in enumerate(comm.mpi_comm.allgather(mine)):
            if not numpy.array_equal(mine, theirs):
                raise AssertionError('%s: parameters of process %d differ '
                                     'from process %d\'s'
                                     % (name, rank, comm.rank))
    a, b = flat_arrays(eager), flat_arrays(jitted)
    numpy.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    return float(numpy.abs(a - b).max())


def main(argv=None):
    args = parse_args(argv)
    comm = chainermn.create_communicator(args.communicator)
    timing.limit_threads(1)  # one BLAS thread per process
    train_set, test_set = shards(comm)
    x_init = numpy.zeros((1, 1, 8, 8), numpy.float32)
    eager, jitted = make_models(comm, x_init, args.bn)
    if comm.rank == 0:
        print('%d processes, %d training examples each, batch %d per '
              'process, %s batch normalization; %s'
              % (comm.size, len(train_set), args.batchsize, args.bn,
                 timing.cpu_model()))

    results = {}
    for name, model in (('eager', eager), ('jit', jitted)):
        if comm.rank == 0:
            print('\n== training %s (%d epochs)' % (name, args.epochs))
        with timing.system_context(name)():
            results[name] = train(comm, model, train_set, test_set, args)

    difference = check_parameters(comm, eager, jitted, args.bn)
    rows = comm.mpi_comm.gather(
        (comm.rank, results['eager'][0], results['jit'][0],
         jitted.forward.cache_info()))
    if comm.rank == 0:
        print('\n== results (%d processes)' % comm.size)
        for name in ('eager', 'jit'):
            print('%-6s test accuracy %.4f' % (name, results[name][1]))
        for rank, eager_s, jit_s, info in rows:
            print('process %d: eager %.3f s/epoch, jit %.3f s/epoch, '
                  'jit/eager %.2f; %d compiled calls of %d'
                  % (rank, eager_s, jit_s, jit_s / eager_s, info.compiled,
                     info.hits + info.misses))
        print('parameters equal on every process in each run; jit vs '
              'eager (parameters and running statistics): largest '
              'difference %.2g (assert_allclose, rtol=1e-4, atol=1e-5)'
              % difference)
        print('\n== chainerjit cache (process 0)')
        print(jitted.forward.cache_info())
        print(jitted.forward.cache_report())


if __name__ == '__main__':
    main()
