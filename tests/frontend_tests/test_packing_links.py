"""Adversarial differential tests of list packing
(``chainerjit.frontend.packing``): links called over lists.

Rows and states stored on a link, LSTMs (stateful, with the state carried
from call to call, stateless) trained over lists with SGD and Adam, lists
of int ids into an ``EmbedID`` and lists of Variables that need no
gradient: outputs, parameter gradients, item gradients and the updated
parameters must equal eager Chainer's, over several lengths in sequence.
"""

import chainer
import chainer.functions as F
import chainer.links as L
from chainer import optimizers
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.frontend_tests.packing_checks import _assert_grads_equal
from tests.frontend_tests.packing_checks import _assert_param_grads_equal
from tests.frontend_tests.packing_checks import _copies
from tests.frontend_tests.packing_checks import _is_packed
from tests.frontend_tests.packing_checks import _Linked
from tests.frontend_tests.packing_checks import _steps
from tests.frontend_tests.packing_checks import _twins
from tests.frontend_tests.packing_checks import LENGTHS


pytestmark = [
    pytest.mark.adversarial,
    pytest.mark.filterwarnings('ignore::UserWarning'),
]


class _StoresTheLastRow(_Linked):
    def forward(self, xs):
        h = 0
        for x in xs:
            h = F.tanh(self.linear(x) + h)
            self.last = x
        return h


class _StoresTheFirstRow(_Linked):
    def forward(self, xs):
        self.first = xs[0]
        h = 0
        for x in xs:
            h = F.tanh(self.linear(x) + h)
        return h


class _StoresTheState(_Linked):
    def forward(self, xs):
        h = 0
        hs = []
        for x in xs:
            h = F.tanh(self.linear(x) + h)
            hs.append(h)
        self.h = h
        self.hs = hs
        return h


@pytest.mark.parametrize('cls, attr, index', [
    (_StoresTheLastRow, 'last', -1), (_StoresTheFirstRow, 'first', 0),
    (_StoresTheState, 'h', None)])
def test_rows_and_states_stored_on_a_link(cls, attr, index):
    rng = numpy.random.RandomState(29)
    model, twin = _twins(cls)
    model.forward = chainerjit.jit(model.forward)
    for n in LENGTHS:
        xs = _steps(rng, n)
        theirs = _copies(xs)
        model.cleargrads()
        twin.cleargrads()
        actual, expected = model(xs), twin(theirs)
        testing.assert_results_equal(actual, expected)
        F.sum(actual).backward()
        F.sum(expected).backward()
        _assert_param_grads_equal(model, twin)
        _assert_grads_equal(xs, theirs)
        testing.assert_results_equal(getattr(model, attr),
                                     getattr(twin, attr))
        if index is not None:
            assert getattr(model, attr) is xs[index]
        else:
            testing.assert_results_equal(model.hs, twin.hs)


class _StatefulLSTM(chainer.Chain):
    def __init__(self):
        super(_StatefulLSTM, self).__init__()
        with self.init_scope():
            self.lstm = L.LSTM(3, 4)
            self.out = L.Linear(4, 2)

    def forward(self, xs):
        self.lstm.reset_state()
        ys = []
        for x in xs:
            ys.append(self.out(self.lstm(x)))
        return F.stack(ys)


class _CarriedLSTM(_StatefulLSTM):
    """The state carries over from call to call."""

    def forward(self, xs):
        h = None
        for x in xs:
            h = self.lstm(x)
        return self.out(h)


class _StatelessLSTM(chainer.Chain):
    def __init__(self):
        super(_StatelessLSTM, self).__init__()
        with self.init_scope():
            self.lstm = L.StatelessLSTM(3, 4)
            self.out = L.Linear(4, 2)

    def forward(self, xs):
        c = h = None
        for x in xs:
            c, h = self.lstm(c, h, x)
        return self.out(h)


class _StatelessConcat(_StatelessLSTM):
    def forward(self, xs):
        c = h = None
        hs = []
        for x in xs:
            c, h = self.lstm(c, h, x)
            hs.append(self.out(h))
        return F.concat(hs, axis=1)


@pytest.mark.parametrize('cls', [
    _StatefulLSTM, _CarriedLSTM, _StatelessLSTM, _StatelessConcat])
@pytest.mark.parametrize('optimizer', [
    lambda: optimizers.SGD(0.1), lambda: optimizers.Adam()],
    ids=['sgd', 'adam'])
def test_lstm_training_over_lists(cls, optimizer):
    rng = numpy.random.RandomState(30)
    model, twin = _twins(cls)
    model.forward = chainerjit.jit(model.forward)
    mine, theirs = optimizer(), optimizer()
    mine.setup(model)
    theirs.setup(twin)
    for n in LENGTHS:
        _step_alike(model, twin, mine, theirs, _steps(rng, n))
    if cls is _CarriedLSTM:
        testing.assert_results_equal(model.lstm.h, twin.lstm.h, 1e-4, 1e-5)


def _step_alike(model, twin, mine, theirs, xs):
    """One training step of ``model`` (jitted) on ``xs`` and of ``twin``
    on copies, with the optimizers ``mine`` and ``theirs``: outputs,
    gradients and updated parameters equal."""
    ts = _copies(xs)
    model.cleargrads()
    twin.cleargrads()
    actual, expected = model(xs), twin(ts)
    testing.assert_results_equal(actual, expected, 1e-4, 1e-5)
    F.sum(actual * actual).backward()
    F.sum(expected * expected).backward()
    _assert_param_grads_equal(model, twin)
    _assert_grads_equal(xs, ts)
    mine.update()
    theirs.update()
    params = dict(model.namedparams())
    for name, param in twin.namedparams():
        numpy.testing.assert_allclose(params[name].array, param.array,
                                      1e-4, 1e-5, err_msg=name)


class _Embedder(chainer.Chain):
    def __init__(self):
        super(_Embedder, self).__init__()
        with self.init_scope():
            self.embed = L.EmbedID(10, 3)

    def forward(self, ids):
        h = 0
        for i in ids:
            h = F.tanh(h + self.embed(i))
        return h


def test_lists_of_int_ids():
    rng = numpy.random.RandomState(31)
    model, twin = _twins(_Embedder)
    model.forward = chainerjit.jit(model.forward)
    for n in LENGTHS:
        ids = [rng.randint(0, 10, size=(2,)).astype(numpy.int32)
               for _ in range(n)]
        model.cleargrads()
        twin.cleargrads()
        actual, expected = model(ids), twin(ids)
        testing.assert_results_equal(actual, expected)
        F.sum(actual).backward()
        F.sum(expected).backward()
        _assert_param_grads_equal(model, twin)
    assert _is_packed(model.forward)
    ids[-1][0] = 12  # out of range: eager's error
    with pytest.raises(IndexError):
        twin(ids)
    with pytest.raises(IndexError):
        model(ids)


def test_lists_of_variables_without_grad_train_the_parameters():
    rng = numpy.random.RandomState(32)
    model, twin = _twins(_StoresTheState)
    model.forward = chainerjit.jit(model.forward)
    for n in LENGTHS:
        xs = _steps(rng, n, requires_grad=False)
        model.cleargrads()
        twin.cleargrads()
        actual, expected = model(xs), twin(_copies(xs))
        testing.assert_results_equal(actual, expected)
        F.sum(actual).backward()
        F.sum(expected).backward()
        _assert_param_grads_equal(model, twin)
        assert all(x.grad is None for x in xs)


@pytest.mark.parametrize('cls', [_StatefulLSTM, _StatelessLSTM,
                                 _StatelessConcat])
def test_lstm_training_over_lists_of_any_batch_size(cls):
    """Lists of steps whose batch size changes too, as the last batch of
    an epoch's does: one packed entry (``xs: f32[T,B,3]``), trained as
    eagerly."""
    rng = numpy.random.RandomState(31)
    model, twin = _twins(cls)
    model.forward = chainerjit.jit(model.forward)
    mine, theirs = optimizers.SGD(0.1), optimizers.SGD(0.1)
    mine.setup(model)
    theirs.setup(twin)
    for n, batch in ((3, 2), (5, 2), (4, 2), (4, 5), (6, 3), (3, 7)):
        _step_alike(model, twin, mine, theirs,
                    _steps(rng, n, shape=(batch, 3)))
    entry, = model.forward.cache_entries()
    assert str(entry.signature).startswith('xs: f32[T,B,3]'), \
        entry.signature
