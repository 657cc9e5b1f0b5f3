"""Checks run in each of several MPI processes (``mpiexec -n 2 python -m
tests.chainermn_tests.processes NAME``; ``test_chainermn`` starts them).

Each check compares a jitted model with its eager twin on every process,
for several calls with new values (each process its own), and the
processes with each other. A failed check raises, so the process exits
non-zero and ``mpiexec`` with it."""

import copy
import pickle
import sys
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import chainermn
import chainermn.functions
import numpy

import chainerjit

warnings.simplefilter('ignore', FutureWarning)  # ChainerMN's experimental

STEPS = 4


class ConvNet(chainer.Chain):
    """Convolution, batch normalization, pooling and two linear layers."""

    def __init__(self):
        super(ConvNet, self).__init__()
        with self.init_scope():
            self.conv = L.Convolution2D(1, 4, 3, pad=1)
            self.bn = L.BatchNormalization(4)
            self.fc1 = L.Linear(4 * 3 * 3, 16)
            self.fc2 = L.Linear(16, 5)

    def forward(self, x):
        h = F.max_pooling_2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc2(F.relu(self.fc1(h)))


def twins(comm, multi_node_bn):
    """A classifier and its jitted twin, the same weights on every
    process; batch normalization ChainerMN's if ``multi_node_bn``."""
    numpy.random.seed(0)
    model = L.Classifier(ConvNet())
    if multi_node_bn:
        model = chainermn.links.create_mnbn_model(model, comm)
    jitted = copy.deepcopy(model)
    jitted.forward = chainerjit.jit(jitted.forward)
    return model, jitted


def batch(comm, step, n=6):
    """A batch of this process's own for ``step``."""
    rs = numpy.random.RandomState(100 * step + comm.rank)
    return (rs.rand(n, 1, 6, 6).astype(numpy.float32),
            rs.randint(0, 5, n).astype(numpy.int32))


def arrays(model):
    """``{name: array}`` of the parameters and persistent arrays."""
    found = dict((name, p.array) for name, p in model.namedparams())
    for path, link in model.namedlinks():
        for name in link._persistent:
            found['%s/%s' % (path, name)] = getattr(link, name)
    return found


def gradients(model):
    return dict((name, p.grad) for name, p in model.namedparams())


def assert_close(expected, actual, what):
    assert sorted(expected) == sorted(actual), what
    for name in expected:
        numpy.testing.assert_allclose(
            numpy.asarray(actual[name]), numpy.asarray(expected[name]),
            rtol=1e-5, atol=1e-6, err_msg='%s: %s' % (what, name))


def assert_same_on_every_process(comm, found, what):
    """``found`` (a dict of arrays) is the same, bit for bit, on every
    process."""
    for rank, theirs in enumerate(comm.mpi_comm.allgather(found)):
        for name in found:
            if not numpy.array_equal(numpy.asarray(found[name]),
                                     numpy.asarray(theirs[name])):
                raise AssertionError('%s: %s differs between processes %d '
                                     'and %d' % (what, name, comm.rank, rank))


def assert_compiled(forward, calls):
    info = forward.cache_info()
    assert info.eager == 0 and info.compiled >= calls - info.compiles, info


def check_allreduced_gradients(comm, multi_node_bn=False):
    """A jitted backward's gradients, averaged over the processes by
    ``multi_node_mean_grad``, equal eager's on every process; then the
    multi-node optimizer's updates keep the parameters equal."""
    eager, jitted = twins(comm, multi_node_bn)
    for step in range(STEPS):
        x, t = batch(comm, step)
        for model in (eager, jitted):
            model.cleargrads()
            model(x, t).backward()
            comm.multi_node_mean_grad(model)
        assert_close(gradients(eager), gradients(jitted), 'gradients')
        assert_same_on_every_process(comm, gradients(jitted), 'gradients')
        assert_close(arrays(eager), arrays(jitted), 'statistics')
    assert_compiled(jitted.forward, STEPS)
    check_multi_node_optimizer(comm, eager, jitted, multi_node_bn)


def check_multi_node_optimizer(comm, eager, jitted, multi_node_bn):
    optimizers = []
    for model in (eager, jitted):
        optimizer = chainermn.create_multi_node_optimizer(
            chainer.optimizers.MomentumSGD(lr=0.1), comm)
        optimizer.setup(model)
        optimizers.append(optimizer)
    for step in range(STEPS):
        x, t = batch(comm, STEPS + step)
        for model, optimizer in zip((eager, jitted), optimizers):
            optimizer.update(model, x, t)
        assert_close(arrays(eager), arrays(jitted), 'after an update')
        mine = arrays(jitted) if multi_node_bn else dict(
            jitted.namedparams())
        assert_same_on_every_process(
            comm, dict((k, getattr(v, 'array', v)) for k, v in mine.items()),
            'parameters')
    assert_compiled(jitted.forward, 2 * STEPS)


def check_multi_node_batch_normalization(comm):
    """ChainerMN's batch normalization runs compiled (its node lowered,
    its statistics averaged over the processes by ChainerMN's code), in
    training and in test mode."""
    check_allreduced_gradients(comm, multi_node_bn=True)
    eager, jitted = twins(comm, multi_node_bn=True)
    for step in range(STEPS):
        x, t = batch(comm, step)
        with chainer.using_config('train', step % 2 == 0):
            expected, actual = eager(x, t), jitted(x, t)
        numpy.testing.assert_allclose(actual.array, expected.array,
                                      rtol=1e-5, atol=1e-6)
        assert_close(arrays(eager), arrays(jitted), 'statistics')
    assert_compiled(jitted.forward, STEPS)
    for entry in jitted.forward.cache.entries():
        for node in entry.graph.nodes:
            assert 'BatchNormalization' not in node.op or \
                not node.generic, entry.describe()


def check_evaluator(comm):
    """``create_multi_node_evaluator`` over each process's shard of a test
    set: the jitted model's averaged metrics equal the eager one's."""
    eager, jitted = twins(comm, multi_node_bn=True)
    data = None
    if comm.rank == 0:
        rs = numpy.random.RandomState(7)
        data = chainer.datasets.TupleDataset(
            rs.rand(40, 1, 6, 6).astype(numpy.float32),
            rs.randint(0, 5, 40).astype(numpy.int32))
    data = chainermn.scatter_dataset(data, comm)
    results = []
    for model in (eager, jitted):
        iterator = chainer.iterators.SerialIterator(
            data, 8, repeat=False, shuffle=False)
        evaluator = chainermn.create_multi_node_evaluator(
            chainer.training.extensions.Evaluator(iterator, model), comm)
        results.append(evaluator())
    assert sorted(results[0]) == sorted(results[1])
    for name in results[0]:
        numpy.testing.assert_allclose(float(results[1][name]),
                                      float(results[0][name]), rtol=1e-6)
    assert_same_on_every_process(
        comm, dict((k, float(v)) for k, v in results[1].items()), 'metrics')
    assert jitted.forward.cache_info().compiled > 0


class Gathering(chainer.Chain):
    """``chainermn.functions.allgather`` inside the forward."""

    def __init__(self, comm):
        super(Gathering, self).__init__()
        self.comm = comm
        with self.init_scope():
            self.l1 = L.Linear(4, 3)
            self.l2 = L.Linear(3 * comm.size, 2)

    def forward(self, x):
        h = F.tanh(self.l1(x))
        h = F.concat(chainermn.functions.allgather(self.comm, h), axis=1)
        return F.sum(self.l2(h) ** 2)


class Broadcasting(chainer.Chain):
    """``chainermn.functions.bcast`` inside the forward: the first
    process's hidden values scale every process's; on the others the
    function's input is a dummy Variable its ``__call__`` makes."""

    def __init__(self, comm):
        super(Broadcasting, self).__init__()
        self.comm = comm
        with self.init_scope():
            self.l1 = L.Linear(4, 3)
            self.l2 = L.Linear(3, 2)

    def forward(self, x):
        h = F.tanh(self.l1(x))
        w = chainermn.functions.bcast(self.comm, h, root=0)
        return F.sum(self.l2(w * h))


def check_collectives(comm):
    """Collectives inside a jitted forward, and their gradients (whose
    backward is a collective too, run by every process even where no
    gradient of its input is wanted there)."""
    for model_class in (Gathering, Broadcasting):
        numpy.random.seed(0)
        eager = model_class(comm)
        jitted = copy.deepcopy(eager)
        jitted.forward = chainerjit.jit(jitted.forward)
        for step in range(STEPS):
            x = batch(comm, step, n=5)[0].reshape(5, -1)[:, :4]
            results = []
            for model in (eager, jitted):
                model.cleargrads()
                xv = chainer.Variable(x.copy())
                loss = model(xv)
                loss.backward()
                results.append((loss.array, xv.grad, gradients(model)))
            (loss, gx, grads), (jloss, jgx, jgrads) = results
            numpy.testing.assert_allclose(jloss, loss, rtol=1e-6)
            numpy.testing.assert_allclose(jgx, gx, rtol=1e-5, atol=1e-6)
            assert_close(grads, jgrads, model_class.__name__)
        assert_compiled(jitted.forward, STEPS)


def check_copies(comm):
    """The copies ChainerMN makes of a jitted model: ``create_mnbn_model``
    (deep copies, then children replaced) of a model already called,
    the deep copy of ``MultiNodeBatchNormalization`` (which keeps the
    communicator), and a model pickled to every process by
    ``bcast_obj``."""
    numpy.random.seed(0)
    eager = L.Classifier(ConvNet())
    jitted = copy.deepcopy(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    x, t = batch(comm, 0)
    eager(x, t)
    jitted(x, t)  # compiled with Chainer's batch normalization
    eager = chainermn.links.create_mnbn_model(eager, comm)
    jitted = chainermn.links.create_mnbn_model(jitted, comm)
    assert type(jitted.predictor.bn).__name__ == \
        'MultiNodeBatchNormalization'
    check_twins_train_alike(comm, eager, jitted)
    eager, jitted = copy.deepcopy(eager), copy.deepcopy(jitted)
    assert jitted.predictor.bn.comm is comm
    check_twins_train_alike(comm, eager, jitted)

    numpy.random.seed(1)
    eager = L.Classifier(ConvNet())
    jitted = copy.deepcopy(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    eager(x, t)
    jitted(x, t)
    jitted = comm.bcast_obj(jitted if comm.rank == 0 else None)
    eager = comm.bcast_obj(eager if comm.rank == 0 else None)
    assert isinstance(pickle.loads(pickle.dumps(jitted)), L.Classifier)
    check_twins_train_alike(comm, eager, jitted)


def check_twins_train_alike(comm, eager, jitted):
    before = jitted.forward.cache_info().compiled
    for step in range(STEPS):
        x, t = batch(comm, step + 1)
        for model in (eager, jitted):
            model.cleargrads()
            model(x, t).backward()
            comm.multi_node_mean_grad(model)
        assert_close(gradients(eager), gradients(jitted), 'gradients')
        assert_close(arrays(eager), arrays(jitted), 'statistics')
    assert jitted.forward.cache_info().compiled >= before + STEPS - 1


CHECKS = {
    'allreduced_gradients': check_allreduced_gradients,
    'multi_node_batch_normalization': check_multi_node_batch_normalization,
    'evaluator': check_evaluator,
    'collectives': check_collectives,
    'copies': check_copies,
}


def main(argv):
    comm = chainermn.create_communicator('naive')
    CHECKS[argv[0]](comm)
    comm.mpi_comm.Barrier()
    if comm.rank == 0:
        print('ok %s on %d processes' % (argv[0], comm.size))


if __name__ == '__main__':
    main(sys.argv[1:])
