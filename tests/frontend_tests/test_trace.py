"""Recording: values read back into Python, constants, the generic path
and model state."""

import copy
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing


def _x(rng, *shape):
    return rng.randn(*(shape or (3, 4))).astype(numpy.float32)


def _run(jf, *args):
    with chainer.no_backprop_mode():
        return jf(*args)


# --- values read back into Python: eager, never stale ----------------------

ESCAPES = {
    'float': lambda x: F.relu(x) * float(x.array.max()),
    'item': lambda x: F.relu(x) * x[0, 0].item(),
    'bool': lambda x: F.relu(x) if (x.array > 0).any() else F.tanh(x),
    'boolean_mask': lambda x: F.relu(x[x.array > 0]),
    'nonzero': lambda x: F.relu(x[numpy.nonzero(x.array > 0)]),
    'argmax': lambda x: F.relu(x) * int(x.array.argmax()),
    'index_element': lambda x: F.relu(x) + x.array[0, 1],
    'iterate': lambda x: F.relu(x) * sum(v for v in x.array[0]),
}


@pytest.mark.parametrize('name', sorted(ESCAPES))
def test_value_read_into_python_runs_eagerly(rng, name):
    f = ESCAPES[name]
    jf = chainerjit.jit(f)

    def arg():
        return chainer.Variable(_x(rng))

    with pytest.warns(chainerjit.FallbackWarning,
                      match='DataDependentValue[\\s\\S]*test_trace.py'):
        _run(jf, arg())
    for _ in range(3):
        x = arg()
        testing.assert_results_equal(_run(jf, x), _run(f, x))
    entry, = jf.cache_entries()
    assert entry.fallback and 'test_trace.py' in entry.fallback


NUMPY_OUTSIDE_CHAINER = {
    'ufunc_on_array': lambda x: F.relu(x) * numpy.abs(
        chainer.Variable(x).array),
    'on_raw_argument': lambda x: F.relu(numpy.exp(x)),
    'comparison_mask': lambda x: F.where(
        chainer.Variable(x).array > 0.5, x, numpy.zeros_like(x)),
    'methods': lambda x: F.tanh(x.T.reshape(2, 6).astype(numpy.float64)),
    'function_and_index': lambda x: F.relu(
        numpy.concatenate([x[:, :2], numpy.flip(x, 1)], axis=1)),
    'reduction_to_array': lambda x: F.relu(x) - x.max(axis=1,
                                                      keepdims=True),
}


@pytest.mark.parametrize('name', sorted(NUMPY_OUTSIDE_CHAINER))
def test_numpy_outside_chainer_functions_is_recorded(rng, name):
    testing.assert_jit_matches_eager(
        NUMPY_OUTSIDE_CHAINER[name], [(_x(rng),) for _ in range(3)],
        expect_entries=1)


def test_shape_reads_are_not_escapes(rng):
    def f(x):
        n, d = x.shape
        return F.reshape(x, (n * d,)) * float(len(x)) + x.ndim + x.size

    testing.assert_jit_matches_eager(
        lambda x: f(chainer.Variable(x)), [(_x(rng),) for _ in range(3)])


def test_returning_an_array_of_a_variable(rng):
    testing.assert_jit_matches_eager(
        lambda x: F.softmax(x).array, [(_x(rng),) for _ in range(3)])


# --- constants ---------------------------------------------------------------

def test_arrays_created_inside_the_forward_are_constants(rng):
    def f(x):
        mask = numpy.tril(numpy.ones((3, 4), numpy.float32))
        return F.relu(x) * mask + numpy.float32(2)

    jf = testing.assert_jit_matches_eager(
        f, [(_x(rng),) for _ in range(3)], expect_entries=1)
    assert 'const' in str(jf.cache_entries()[0].graph)


def test_link_array_attribute_is_read_on_every_call(rng):
    class Masked(chainer.Chain):
        def __init__(self):
            super(Masked, self).__init__()
            self.mask = numpy.ones((3, 4), numpy.float32)

        @chainerjit.jit
        def forward(self, x):
            return F.relu(x) * self.mask

    m = Masked()
    x = _x(rng)
    _run(m.forward, x)
    m.mask = numpy.zeros((3, 4), numpy.float32)
    numpy.testing.assert_array_equal(_run(m.forward, x).array, 0)
    m.mask[...] = 2
    numpy.testing.assert_allclose(_run(m.forward, x).array,
                                  2 * numpy.maximum(x, 0))


# --- model state ------------------------------------------------------------

def test_lazy_initialized_parameters(rng):
    class Lazy(chainer.Chain):
        def __init__(self):
            super(Lazy, self).__init__()
            with self.init_scope():
                self.lin = L.Linear(None, 3)

        @chainerjit.jit
        def forward(self, x):
            return self.lin(x)

    m = Lazy()
    x = _x(rng)
    y1 = _run(m.forward, x)
    m.lin.W.array[...] = 1
    y2 = _run(m.forward, x)
    numpy.testing.assert_allclose(y2.array, m.lin(x).array, rtol=1e-6)
    assert not numpy.allclose(y1.array, y2.array)
    assert sorted(p.name for p in m.forward.cache_entries()[0].graph.params
                  ) == ["lin.W", "lin.b"]


def test_stateful_lstm_link_reads_its_state_every_call(rng):
    class Stateful(chainer.Chain):
        def __init__(self):
            super(Stateful, self).__init__()
            with self.init_scope():
                self.lstm = L.LSTM(4, 5)

        def forward(self, x):
            return self.lstm(x)

    eager, jitted = Stateful(), Stateful()
    jitted.copyparams(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    for step in range(5):
        if step == 3:
            eager.lstm.reset_state()
            jitted.lstm.reset_state()
        x = _x(rng, 2, 4)
        with chainer.no_backprop_mode():
            testing.assert_results_equal(jitted.forward(x), eager.forward(x))
    # Two entries: without state (steps 0 and 3) and with state.
    assert jitted.forward.cache_info().currsize == 2
    assert jitted.forward.cache_info().hits == 3


# --- the generic path -------------------------------------------------------

class Scale(chainer.FunctionNode):
    """A user-defined FunctionNode that keeps per-call state."""

    def __init__(self, k):
        self.k = k
        self.calls = 0

    def forward(self, inputs):
        self.calls += 1
        x, = inputs
        self.retain_inputs((0,))
        return x * self.k * self.calls,


class OldStyleSquare(chainer.Function):

    def forward(self, inputs):
        x, = inputs
        return x * x,


def test_user_function_node_runs_generic_with_a_fresh_node(rng):
    def f(x):
        y, = Scale(3.0).apply((x,))
        return F.relu(y)

    jf = testing.assert_jit_matches_eager(
        f, [(_x(rng),) for _ in range(4)], expect_entries=1)
    node = jf.cache_entries()[0].graph.nodes[0]
    assert node.op == 'Scale' and node.generic


def test_old_style_function_runs_generic(rng):
    def f(x):
        return OldStyleSquare()(x) + 1.0

    jf = testing.assert_jit_matches_eager(
        f, [(_x(rng),) for _ in range(3)], expect_entries=1)
    assert jf.cache_entries()[0].graph.nodes[0].op == 'OldStyleSquare'


def test_dead_pure_nodes_are_removed(rng):
    def f(x):
        F.exp(x)  # unused
        return F.relu(x)

    jf = testing.assert_jit_matches_eager(f, [(_x(rng),) for _ in range(2)])
    assert [n.op for n in jf.cache_entries()[0].graph.nodes] == ['ReLU']


def test_aliased_arguments_are_part_of_the_key(rng):
    def f(a, b):
        return a * 2.0 + F.exp(b)

    jf = chainerjit.jit(f)
    x = chainer.Variable(_x(rng))
    _run(jf, x, x)
    y = chainer.Variable(_x(rng))
    testing.assert_results_equal(_run(jf, x, y), _run(f, x, y))
    assert jf.cache_info().currsize == 2


# --- arrays held by nodes as attributes --------------------------------------

def test_where_condition_computed_from_inputs_is_not_a_constant(rng):
    def f(x, y):
        x = chainer.Variable(x)
        return F.where((x * 1.0).array > 0, x, y)

    jf = testing.assert_jit_matches_eager(
        f, [(_x(rng), _x(rng)) for _ in range(4)], expect_entries=1)
    node = jf.cache_entries()[0].graph.nodes[-1]
    assert node.op == 'Where' and len(node.inputs) == 3


def test_index_array_argument_is_not_a_constant(rng):
    def f(x, idx):
        return F.relu(chainer.Variable(x)[idx])

    def call():
        return _x(rng, 5, 3), rng.randint(0, 5, size=4).astype(numpy.int32)

    testing.assert_jit_matches_eager(
        f, [call() for _ in range(4)], expect_entries=1)


# --- side effects: reports ------------------------------------------------

def test_classifier_reports_are_replayed(rng):
    eager = L.Classifier(L.Linear(4, 3))
    jitted = L.Classifier(L.Linear(4, 3))
    jitted.copyparams(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    for model in (eager, jitted):
        model.reporter = chainer.Reporter()
        model.reporter.add_observer('main', model)
    for _ in range(4):
        x = _x(rng)
        t = rng.randint(0, 3, size=3).astype(numpy.int32)
        observed = []
        for model in (eager, jitted):
            obs = {}
            with model.reporter.scope(obs), chainer.no_backprop_mode():
                loss = model(x, t)
            observed.append((loss, obs, model.y))
        (e_loss, e_obs, e_y), (j_loss, j_obs, j_y) = observed
        testing.assert_results_equal(j_loss, e_loss)
        testing.assert_results_equal(j_y, e_y)
        assert sorted(j_obs) == ['main/accuracy', 'main/loss']
        for key in e_obs:
            testing.assert_results_equal(j_obs[key], e_obs[key])
    # The first call finds self.y None, later ones a Variable; the forward
    # assigns it before reading it, so one entry serves both.
    assert jitted.forward.cache_info()[:2] == (3, 1)


def test_numpy_split_and_three_argument_where_are_recorded(rng):
    def f(x):
        a, b = numpy.split(chainer.Variable(x).array, 2, axis=1)
        return F.relu(numpy.where(a > 0, a * 2, b) + numpy.abs(b))

    testing.assert_jit_matches_eager(
        f, [(_x(rng, 3, 4),) for _ in range(3)], expect_entries=1)


# --- random numbers and in-place changes ------------------------------------

class Noisy(chainer.Chain):

    def __init__(self):
        super(Noisy, self).__init__()
        self.history = []

    def with_history(self, x):
        y = F.relu(x)
        self.history.append(y)
        return y


@pytest.mark.parametrize('method', ['with_history'])
def test_random_draws_and_in_place_changes_run_eagerly(rng, method):
    model = Noisy()
    jf = chainerjit.jit(getattr(model, method))
    with pytest.warns(chainerjit.FallbackWarning, match='DataDependent'):
        _run(jf, _x(rng))
    outputs = [_run(jf, _x(rng)).array for _ in range(2)]
    assert not numpy.array_equal(outputs[0], outputs[1])
    if method == 'with_history':
        assert len(model.history) == 3


def test_recording_leaves_links_attribute_reads_as_they_were():
    # An explicit Link.__getattribute__, even object's own, would route
    # every attribute read of every Link through a slower slot.
    class Net(chainer.Chain):
        def __init__(self):
            super(Net, self).__init__()
            with self.init_scope():
                self.fc = L.Linear(3, 2)

        def forward(self, x):
            return self.fc(x)

    net = Net()
    net.forward = chainerjit.jit(net.forward)
    net(numpy.ones((1, 3), numpy.float32))
    assert '__getattribute__' not in vars(chainer.Link)


class SelfCopyingNorm(chainer.Link):
    """Batch normalization written as ChainerMN's link is: the node
    updates the running averages in place, then the link copies them onto
    themselves (``self.avg_mean[:] = func.running_mean``)."""

    def __init__(self, size=4):
        super().__init__()
        self.avg_mean = numpy.zeros(size, numpy.float32)
        self.avg_var = numpy.ones(size, numpy.float32)
        self.register_persistent('avg_mean')
        self.register_persistent('avg_var')
        with self.init_scope():
            self.gamma = chainer.Parameter(numpy.ones(size, numpy.float32))
            self.beta = chainer.Parameter(numpy.zeros(size, numpy.float32))

    def forward(self, x):
        from chainer.functions.normalization import batch_normalization
        func = batch_normalization.BatchNormalization(
            2e-5, self.avg_mean, self.avg_var, 0.9)
        y, = func.apply((x, self.gamma, self.beta))
        self.avg_mean[:] = func.running_mean
        self.avg_var[...] = func.running_var
        return y


def test_copying_a_model_array_onto_itself_is_compiled(rng):
    eager = SelfCopyingNorm()
    model = copy.deepcopy(eager)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.FallbackWarning)
        for _ in range(4):
            x = _x(rng, 5, 4)
            testing.assert_results_equal(jitted(x), eager.forward(x))
            for name in ('avg_mean', 'avg_var'):
                numpy.testing.assert_allclose(getattr(model, name),
                                              getattr(eager, name),
                                              rtol=1e-6)
    assert jitted.cache_info().compiled == 3


def test_writing_other_values_into_an_array_runs_eagerly(rng):
    class Writing(SelfCopyingNorm):
        def forward(self, x):
            y = super().forward(x)
            self.avg_mean[:] = y.array.mean(axis=0) * 2  # not a self-copy
            return y

    eager = Writing()
    model = copy.deepcopy(eager)
    jitted = chainerjit.jit(model.forward)
    x = _x(rng, 5, 4)
    with pytest.warns(chainerjit.FallbackWarning, match='setitem'):
        jitted(x)
    eager.forward(x)
    for _ in range(3):
        x = _x(rng, 5, 4)
        testing.assert_results_equal(jitted(x), eager.forward(x))
        numpy.testing.assert_allclose(model.avg_mean, eager.avg_mean,
                                      rtol=1e-6)
