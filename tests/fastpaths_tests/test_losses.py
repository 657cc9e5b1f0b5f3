"""The fast softmax cross entropy on a jitted output
(chainerjit/fastpaths/losses.py): the loss and every gradient bit for bit as
under Chainer's own ``apply``
and ``backward``, the same node in the graph, and Chainer's own path
wherever the fast one would skip something that is not a no-op."""

import chainer
import chainer.functions as F
import chainer.links as L
from chainer.functions.loss import softmax_cross_entropy
import numpy
import pytest

import chainerjit
from chainerjit import fastpaths
from chainerjit import testing
from chainerjit.fastpaths import losses

SCE = softmax_cross_entropy.SoftmaxCrossEntropy
Grad = softmax_cross_entropy._SoftmaxCrossEntropyGrad_NoDoubleBackprop


class MLP(chainer.Chain):

    def __init__(self, dtype=numpy.float32, n_out=5):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(6, 8, initialW=chainer.initializers.Normal(
                dtype=dtype), initial_bias=chainer.initializers.Zero(dtype))
            self.l2 = L.Linear(8, n_out, initialW=chainer.initializers.Normal(
                dtype=dtype), initial_bias=chainer.initializers.Zero(dtype))

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


def _chainers(run):
    """``run()`` under Chainer's own code."""
    return testing.with_fast_paths_off(run, 'losses')


def _model(dtype=numpy.float32, n_out=5):
    numpy.random.seed(0)
    model = MLP(dtype, n_out)
    model.forward = chainerjit.jit(model.forward)
    return model


def _jitted_output(model, x):
    """``model(x)`` from the compiled program (the first call records)."""
    model(x)
    y = model(x)
    assert model.forward.last_entry.hits
    return y


def _step(loss_of, dtype=numpy.float32, n_out=5, labels=None, steps=3):
    """The losses and gradients of ``steps`` steps of a jitted MLP (with
    ``x`` requiring grad) under ``loss_of(y, t)``."""
    model = _model(dtype, n_out)
    rng = numpy.random.RandomState(1)
    results = []
    for _ in range(steps):
        x = chainer.Variable(rng.standard_normal((7, 6)).astype(dtype))
        t = rng.randint(0, n_out, 7).astype(numpy.int32) \
            if labels is None else labels
        model.cleargrads()
        loss = loss_of(model(x), t)
        loss.grad = numpy.ones_like(loss.array)
        loss.backward()
        results.append(loss.array)
        results.append(x.grad)
        results.extend(p.grad for _, p in sorted(model.namedparams()))
    return results


LOSSES = {
    'default': lambda y, t: F.softmax_cross_entropy(y, t),
    'ignored labels': lambda y, t: F.softmax_cross_entropy(
        y, numpy.where(numpy.arange(len(t)) % 3 == 0, -1, t).astype(t.dtype)),
    'all ignored': lambda y, t: F.softmax_cross_entropy(
        y, numpy.full_like(t, -1)),
    'other ignore label': lambda y, t: F.softmax_cross_entropy(
        y, numpy.where(t == 2, 4, t).astype(t.dtype), ignore_label=4),
    'not normalized': lambda y, t: F.softmax_cross_entropy(
        y, numpy.where(t == 1, -1, t).astype(t.dtype), normalize=False),
    'int64 labels': lambda y, t: F.softmax_cross_entropy(
        y, t.astype(numpy.int64)),
    'no reduction': lambda y, t: F.softmax_cross_entropy(
        y, t, reduce='no'),
    'class weights': lambda y, t: F.softmax_cross_entropy(
        y, t, class_weight=numpy.arange(1, 6, dtype=y.dtype)),
    'no score cache': lambda y, t: F.softmax_cross_entropy(
        y, t, cache_score=False),
    'soft targets': lambda y, t: F.softmax_cross_entropy(
        y, F.softmax(y).array[::-1].copy()),
    'kl divergence': lambda y, t: F.softmax_cross_entropy(
        y, F.softmax(y).array[::-1].copy(), soft_target_loss='kl-divergence'),
    'a scaled loss': lambda y, t: 3 * F.softmax_cross_entropy(y, t),
    'twice': lambda y, t: F.softmax_cross_entropy(y, t) +
    F.softmax_cross_entropy(y * 2, t),
    'through L.Classifier': lambda y, t: L.Classifier(
        lambda x: x)(y, t),
}


def _assert_steps_are_chainers(loss_of, dtype):
    """The losses and gradients of :func:`_step` equal, bit for bit and
    dtype for dtype, those under Chainer's own code."""
    def run():
        return _step(loss_of, dtype)
    expected = _chainers(run)
    actual = run()
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype
        numpy.testing.assert_array_equal(a, e)


@pytest.mark.parametrize('name', sorted(LOSSES))
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_losses_and_gradients_are_chainers_bit_for_bit(name, dtype):
    _assert_steps_are_chainers(LOSSES[name], dtype)


def test_float16_is_chainers():
    _assert_steps_are_chainers(LOSSES['default'], numpy.float16)


def _counting(monkeypatch, owner, name):
    """The calls of ``owner.name`` (a method or a module's function)."""
    calls = []
    original = getattr(owner, name)

    def counted(*args):
        calls.append(args)
        return original(*args)
    monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_jitted_output_takes_the_fast_path(monkeypatch):
    grads = _counting(monkeypatch, Grad, 'forward_cpu')
    model = _model()
    y = _jitted_output(model, chainer.Variable(numpy.ones((3, 6),
                                                          numpy.float32)))
    loss = F.softmax_cross_entropy(y, numpy.array([0, 1, 2], numpy.int32))
    node = loss.creator_node
    assert type(node) is SCE
    assert node._chainerjit_lean
    assert node.inputs[0] is y.node and node.inputs[0].data is y.array
    assert [v.array for v in node.get_retained_inputs()][1].tolist() == \
        [0, 1, 2]
    loss.backward()
    assert grads == []  # the grad node was not needed
    assert model.l1.W.grad is not None


def test_an_eager_input_takes_chainers_path(monkeypatch):
    grads = _counting(monkeypatch, Grad, 'forward_cpu')
    y = chainer.Variable(numpy.ones((3, 5), numpy.float32))
    loss = F.softmax_cross_entropy(y, numpy.array([0, 1, 2], numpy.int32))
    assert not loss.creator_node.__dict__.get('_chainerjit_lean')
    loss.backward()
    assert len(grads) == 1


def _error(call):
    with pytest.raises(Exception) as caught:
        call()
    return type(caught.value), str(caught.value)


@pytest.mark.parametrize('labels', [
    numpy.zeros((4,), numpy.int32),  # Chainer's check raises RuntimeError
    numpy.zeros((3, 1), numpy.int32),
    numpy.zeros((3,), numpy.float32)])
def test_bad_labels_fail_the_type_check_as_in_eager_mode(labels):
    model = _model()
    y = _jitted_output(model, chainer.Variable(numpy.ones((3, 6),
                                                          numpy.float32)))
    fast = _error(lambda: F.softmax_cross_entropy(y, labels))
    assert fast == _error(lambda: F.softmax_cross_entropy(
        chainer.Variable(y.array), labels))
    assert fast[0] in (RuntimeError, chainer.utils.type_check.InvalidType)


class _Recorder(chainer.FunctionHook):

    def __init__(self):
        self.seen = []

    def forward_postprocess(self, function, in_data):
        self.seen.append(('forward', function.label))

    def backward_postprocess(self, function, in_data, out_grad):
        self.seen.append(('backward', function.label))


def _hooked_labels():
    model = _model()
    y = _jitted_output(model, chainer.Variable(numpy.ones((3, 6),
                                                          numpy.float32)))
    with _Recorder() as hook:
        F.softmax_cross_entropy(y, numpy.zeros(3, numpy.int32)).backward()
    return hook.seen


def test_function_hooks_see_what_they_see_in_eager_mode():
    seen = _hooked_labels()
    assert ('forward', 'SoftmaxCrossEntropy') in seen
    assert ('forward', '_SoftmaxCrossEntropyGrad_NoDoubleBackprop') in seen
    assert seen == _chainers(_hooked_labels)


def test_double_backprop_takes_chainers_backward(monkeypatch):
    grads = _counting(monkeypatch, Grad, 'forward_cpu')
    model = _model()
    y = _jitted_output(model, chainer.Variable(numpy.ones((3, 6),
                                                          numpy.float32)))
    node = SCE()
    node.apply((y, numpy.zeros(3, numpy.int32)))
    assert node._chainerjit_lean
    with chainer.using_config('enable_backprop', True):
        gx, _ = node.backward((0,), (chainer.Variable(
            numpy.array(1, numpy.float32)),))
    assert len(grads) == 1
    assert gx.creator_node is not None  # a graph for the second order


def test_cuts_nothing_when_turned_off(monkeypatch):
    monkeypatch.setenv('CHAINERJIT_FAST_LOSS', '0')
    fastpaths.uninstall('losses')
    try:
        fastpaths.install('losses')
        assert 'apply' not in SCE.__dict__
    finally:
        monkeypatch.delenv('CHAINERJIT_FAST_LOSS')
        fastpaths.install('losses')
    assert SCE.apply is losses.apply


# --- mean squared error ------------------------------------------------------

MSE = chainer.functions.loss.mean_squared_error.MeanSquaredError

MSE_LOSSES = {
    'against an array': lambda y, t: F.mean_squared_error(
        y, numpy.full(y.shape, 0.5, y.dtype)),
    'against a Variable with a gradient': lambda y, t: F.mean_squared_error(
        y, chainer.Variable(numpy.full(y.shape, 0.25, y.dtype))),
    'the jitted output second': lambda y, t: F.mean_squared_error(
        numpy.full(y.shape, 0.5, y.dtype), y),
    'of two jitted outputs': lambda y, t: F.mean_squared_error(y, y * 0.5),
    'scaled': lambda y, t: 0.5 * F.mean_squared_error(
        y, numpy.zeros(y.shape, y.dtype)),
}


@pytest.mark.parametrize('name', sorted(MSE_LOSSES))
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64,
                                   numpy.float16])
def test_mean_squared_error_is_chainers_bit_for_bit(name, dtype):
    _assert_steps_are_chainers(MSE_LOSSES[name], dtype)


def test_mean_squared_error_takes_the_fast_path(monkeypatch):
    chainers = _counting(monkeypatch, losses, '_chainer_mse_backward')
    model = _model()
    y = _jitted_output(model, chainer.Variable(numpy.ones((3, 6),
                                                          numpy.float32)))
    loss = F.mean_squared_error(y, numpy.zeros((3, 5), numpy.float32))
    assert type(loss.creator_node) is MSE
    assert loss.creator_node._chainerjit_lean
    loss.backward()
    assert chainers == []
    with _Recorder() as hook:  # hooks see Chainer's own backward
        F.mean_squared_error(y, numpy.zeros((3, 5),
                                            numpy.float32)).backward()
    assert len(chainers) == 1
    assert ('forward', 'BroadcastTo') in hook.seen


# --- accuracy ----------------------------------------------------------------

@pytest.mark.parametrize('ignore_label', [None, 2])
def test_accuracy_of_a_jitted_output_is_chainers(ignore_label):
    model = _model()
    y = _jitted_output(model, chainer.Variable(
        numpy.random.RandomState(3).standard_normal((7, 6)).astype(
            numpy.float32)))
    t = numpy.array([0, 1, 2, 3, 4, 2, 1], numpy.int32)
    fast = F.accuracy(y, t, ignore_label=ignore_label)
    assert fast.creator_node._chainerjit_lean
    expected = _chainers(lambda: F.accuracy(y, t, ignore_label=ignore_label))
    assert fast.array.dtype == expected.array.dtype
    assert fast.array.tobytes() == expected.array.tobytes()
    assert fast.requires_grad == expected.requires_grad
    with pytest.raises(Exception) as caught:
        F.accuracy(y, t[:3])
    assert type(caught.value) in (RuntimeError,
                                  chainer.utils.type_check.InvalidType)


def test_a_classifier_around_a_jitted_predictor_reports_as_eager():
    def run():
        model = _model()
        classifier = L.Classifier(model)
        x = numpy.random.RandomState(4).standard_normal((7, 6)).astype(
            numpy.float32)
        t = numpy.array([0, 1, 2, 3, 4, 2, 1], numpy.int32)
        reporter = chainer.Reporter()
        reporter.add_observer('main', classifier)
        reports = []
        for _ in range(3):
            model.cleargrads()
            observed = {}
            with reporter.scope(observed):
                classifier(x, t).backward()
            reports.append(sorted((k, float(v.array)) for k, v in
                                  observed.items()))
            reports.append(model.l1.W.grad.copy())
        assert [k for k, _ in reports[0]] == ['main/accuracy', 'main/loss']
        return reports
    actual, expected = run(), _chainers(run)
    for a, e in zip(actual, expected):
        numpy.testing.assert_array_equal(numpy.asarray(a, dtype=object),
                                         numpy.asarray(e, dtype=object))


# --- lean_apply as FunctionNode.apply --------------------------------------

class _Retaining(chainer.FunctionNode):
    """Retains its second input and its second output; its type check
    wants float inputs."""

    def check_type_forward(self, in_types):
        chainer.utils.type_check.expect(in_types[0].dtype.kind == 'f')

    def forward(self, inputs):
        x, y = inputs
        self.retain_inputs((1,))
        self.retain_outputs((1,))
        return x + y, x * y

    def backward(self, indexes, grad_outputs):
        return grad_outputs


def _linked(apply):
    x = chainer.Variable(numpy.arange(3, dtype=numpy.float32))
    y = numpy.full(3, 2, numpy.float32)
    node = _Retaining()
    a, b = apply(node, (x, y))
    return [node.rank, a.rank, b.rank, a.requires_grad, b.requires_grad,
            [v.array.tolist() for v in node.get_retained_inputs()],
            [o.tolist() for o in node.get_retained_outputs()[0].array],
            node.inputs[0] is x.node, a.creator_node is node,
            node.outputs[1]() is b.node, node.input_layouts,
            node.output_layouts, node.lazy_grad_sum]


def test_lean_apply_links_and_retains_as_chainer_does():
    from chainerjit.runtime import _calls
    assert _linked(_calls.lean_apply) == \
        _linked(chainer.FunctionNode.apply)
    bad = (numpy.zeros(3, numpy.int32), numpy.zeros(3, numpy.int32))
    for apply in (_calls.lean_apply, chainer.FunctionNode.apply):
        with pytest.raises(chainer.utils.type_check.InvalidType):
            apply(_Retaining(), bad)
