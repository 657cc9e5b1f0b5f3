"""What runs a compiled program (``jit(backend=)``): onnxruntime, the VM,
or the faster of the two. Every model is compared with eager Chainer on
several calls with new values."""

import copy
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from chainerjit.backend import ort
from chainerjit.runtime import _calls
from chainerjit.runtime import backends
from examples import models

pytest.importorskip('onnxruntime')

# backend='auto' chooses at an entry's third call.
pytestmark = pytest.mark.usefixtures('choose_soon')

F32 = numpy.float32


def _inference(jitted, model_fn, calls, rtol=1e-4, atol=1e-5):
    """Calls ``jitted`` and the eager ``model_fn`` on each argument tuple
    in test mode without backprop, comparing the results."""
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for args in calls:
            testing.assert_results_equal(jitted(*args), model_fn(*args),
                                         rtol, atol)


def _backends(jitted):
    return [entry.backend for entry in jitted.cache_entries()]


@pytest.mark.parametrize('batch', [1, 16])
def test_mlp_runs_in_onnxruntime(rng, batch):
    model = models.MLP()
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    calls = [(rng.randn(batch, 784).astype(F32),) for _ in range(4)]
    _inference(jitted, model.forward, calls)
    assert _backends(jitted) == ['onnxruntime']
    assert jitted.cache_info().compiled == 3


def test_inputs_that_are_not_contiguous_run_in_onnxruntime(rng):
    # The session is called through onnxruntime's binding, without the
    # checks of its Python wrapper: strided and Fortran-ordered inputs
    # must still be read element for element.
    model = models.MLP()
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    calls = [(rng.randn(4, 2 * 784).astype(F32)[:, ::2],),
             (numpy.asfortranarray(rng.randn(4, 784).astype(F32)),),
             (rng.randn(784, 4).astype(F32).T,)]
    _inference(jitted, model.forward, calls)
    assert set(_backends(jitted)) == {'onnxruntime'}


def test_a_session_without_a_binding_is_run_through_its_wrapper():
    class Session(object):
        def run(self, output_names, feed):
            return [feed[name] for name in output_names]

    run = ort._runner(Session())
    assert run(['x'], {'x': 1}) == [1]


def test_lenet_with_batch_normalization_runs_in_onnxruntime(rng):
    model = models.LeNet()
    with chainer.using_config('train', False):
        model(rng.rand(1, 1, 8, 8).astype(F32))
    for link in model.links():
        if isinstance(link, L.BatchNormalization):
            link.avg_mean[...] = rng.randn(*link.avg_mean.shape)
            link.avg_var[...] = rng.uniform(0.5, 2, link.avg_var.shape)
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    calls = [(rng.rand(4, 1, 8, 8).astype(F32),) for _ in range(3)]
    _inference(jitted, model.forward, calls)
    assert _backends(jitted) == ['onnxruntime']


def test_a_loop_over_any_length_runs_in_onnxruntime(rng):
    model = models.LSTMClassifier(n_in=6, n_hidden=8, n_out=3)
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    calls = [(rng.randn(t, 2, 6).astype(F32),) for t in (5, 9, 5, 17)]
    _inference(jitted, model.forward, calls)
    assert _backends(jitted) == ['onnxruntime']
    assert jitted.cache_info().currsize == 1


def test_transformer_block_runs_in_onnxruntime(rng):
    block = models.EncoderBlock()
    jitted = chainerjit.jit(block.forward, backend='onnxruntime')
    calls = [(rng.randn(2, 7, 16).astype(F32),) for _ in range(3)]
    _inference(jitted, block.forward, calls)
    assert _backends(jitted) == ['onnxruntime']


def test_parameters_changed_between_calls_are_seen(rng):
    model = models.MLP(n_in=5, n_hidden=7, n_out=3)
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    x = rng.randn(2, 5).astype(F32)
    _inference(jitted, model.forward, [(x,), (x,)])
    model.l1.W.array[...] = rng.randn(7, 5)  # in place
    _inference(jitted, model.forward, [(x,)])
    model.l2.W.array = rng.randn(7, 7).astype(F32)  # a new array
    _inference(jitted, model.forward, [(x,)])
    assert _backends(jitted) == ['onnxruntime']


def test_auto_keeps_the_faster_and_says_what_it_measured(rng):
    model = models.MLP(n_in=32, n_hidden=32, n_out=4)
    jitted = chainerjit.jit(model.forward, backend='auto')
    calls = [(rng.randn(8, 32).astype(F32),) for _ in range(3)]
    _inference(jitted, model.forward, calls)
    entry, = jitted.cache_entries()
    times = entry.backend_times
    assert sorted(times) == ['numpy', 'onnxruntime', backends.OWNED]
    faster = 'numpy' if backends._kept(times) == 'numpy' else 'onnxruntime'
    assert entry.backend == faster
    assert 'backend: %s (numpy ' % faster in entry.describe()
    assert faster in jitted.cache_report().splitlines()[1]


def test_auto_runs_the_vm_until_the_calls_have_run_a_while(
        rng, monkeypatch):
    # A program called a few times builds no session: 'auto' times the
    # backends once its calls have run CHOOSE_AFTER_SECONDS on the VM.
    monkeypatch.setattr(backends, 'CHOOSE_AFTER_SECONDS', 3600.0)
    built = []
    session_program = backends._session_program
    monkeypatch.setattr(backends, '_session_program',
                        lambda *a, **k: built.append(1) or
                        session_program(*a, **k))
    model = models.MLP(n_in=32, n_hidden=32, n_out=4)
    jitted = chainerjit.jit(model.forward, backend='auto')
    _inference(jitted, model.forward,
               [(rng.randn(8, 32).astype(F32),) for _ in range(4)])
    entry, = jitted.cache_entries()
    assert not built and entry.backend == 'numpy'
    assert 'onnxruntime timed once the calls have run 3600.00 s' in \
        entry.describe_backend()
    assert entry.deferred.seconds[False] > 0
    monkeypatch.setattr(backends, 'CHOOSE_AFTER_SECONDS', 1e-12)
    _inference(jitted, model.forward,  # chosen before the first of these
               [(rng.randn(8, 32).astype(F32),) for _ in range(3)])
    assert built and entry.deferred is None
    assert sorted(entry.backend_times) == ['numpy', 'onnxruntime',
                                           backends.OWNED]
    assert 'chosen in' in entry.describe_backend()
    assert jitted.cache_info().compiled == 6


def test_auto_chooses_the_training_backend_at_a_later_step(rng):
    jitted = _train_twins(_MLPLoss, _labelled, rng, steps=5,
                          backend='auto')
    entry, = jitted.cache_entries()
    assert entry.training_note.startswith('training: forward '), \
        entry.training_note
    # The inference program, never called, is still to be chosen.
    assert list(entry.deferred.seconds) == [False]
    assert entry.backend_times == {}


def _small_mlp_entry(rng, calls):
    """The entry of a small MLP jitted with ``backend='auto'``, after
    ``calls`` calls with new inputs, each checked against eager."""
    model = models.MLP(n_in=5, n_hidden=7, n_out=3)
    jitted = chainerjit.jit(model.forward, backend='auto')
    _inference(jitted, model.forward,
               [(rng.randn(2, 5).astype(F32),) for _ in range(calls)])
    entry, = jitted.cache_entries()
    return entry


def test_a_choice_that_fails_keeps_the_vm(rng, monkeypatch):
    def failing(*args, **kwargs):
        raise RuntimeError('no session today')
    monkeypatch.setattr(backends, 'choose', failing)
    entry = _small_mlp_entry(rng, calls=4)
    assert entry.backend == 'numpy' and entry.deferred is None
    assert 'RuntimeError: no session today' in entry.describe_backend()


@pytest.mark.parametrize('session, owning, kept', [
    (0.95, None, 'numpy'), (0.85, None, 'onnxruntime'),
    (0.95, 0.85, backends.OWNED), (0.8, 0.85, 'onnxruntime'),
    (0.95, 0.92, 'numpy')])
def test_a_session_is_kept_where_clearly_faster_than_the_vm(
        session, owning, kept):
    times = {'numpy': 1.0, 'onnxruntime': session}
    if owning is not None:
        times[backends.OWNED] = owning
    assert backends._kept(times) == kept


def test_numpy_backend_keeps_the_vm(rng):
    model = models.MLP(n_in=5, n_hidden=7, n_out=3)
    jitted = chainerjit.jit(model.forward, backend='numpy')
    _inference(jitted, model.forward,
               [(rng.randn(2, 5).astype(F32),) for _ in range(2)])
    entry, = jitted.cache_entries()
    assert entry.backend == 'numpy' and not entry.backend_times
    assert entry.program.n_instructions > 1


class Sampling(chainer.Chain):
    """Dropout in training mode: a random node."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(5, 4)

    def forward(self, x):
        return F.dropout(self.l1(x), 0.5)


def test_programs_onnxruntime_cannot_run_stay_on_the_vm(rng):
    model = Sampling()
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    with chainer.using_config('train', True), chainer.no_backprop_mode():
        for _ in range(3):
            numpy.random.seed(1)
            x = rng.randn(3, 5).astype(F32)
            expected = model.forward(x)
            numpy.random.seed(1)
            testing.assert_results_equal(jitted(x), expected)
    entry, = jitted.cache_entries()
    assert entry.backend == 'numpy' and 'random or stateful' in \
        entry.backend_note


class Mixed(chainer.Chain):
    """A pooling onnxruntime has no form for between two linear layers:
    cover_all gives a last window that starts in the padding."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(5, 15)
            self.l2 = L.Linear(6, 3)

    def forward(self, x):
        h = F.reshape(F.relu(self.l1(x)), (len(x), 1, 3, 5))
        h = F.max_pooling_2d(h, 2, stride=3, pad=1)
        return F.tanh(self.l2(F.reshape(h, (len(x), 6))))


def test_an_op_without_a_converter_runs_on_the_vm_between_sessions(rng):
    model = Mixed()
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    calls = [(rng.randn(3, 5).astype(F32),) for _ in range(3)]
    _inference(jitted, model.forward, calls)
    entry, = jitted.cache_entries()
    assert entry.backend == 'onnxruntime'
    assert entry.backend_note == 'in 2 sessions; on the VM: MaxPoolingND'
    names = entry.program.kernel_names
    assert names.count('OnnxRuntime') == 2 and len(names) == 3


def _train_twins(model_class, make_batch, rng, steps=4, **jit_options):
    """Trains a jitted model and its eager twin with SGD for ``steps``
    steps of new batches (each update seen by the next call): their
    losses and parameters must agree within the self-check's tolerance.
    Returns the jitted function."""
    eager, model = model_class(), model_class()
    model.copyparams(eager)
    jitted = chainerjit.jit(model.forward, **jit_options)
    optimizers = []
    for m in (eager, model):
        optimizer = chainer.optimizers.SGD(lr=0.1)
        optimizer.setup(m)
        optimizers.append(optimizer)
    for _ in range(steps):
        batch = make_batch(rng)
        losses = []
        for m, fn, optimizer in zip((eager, model), (eager.forward, jitted),
                                    optimizers):
            m.cleargrads()
            loss = fn(*batch)
            loss = loss[0] if isinstance(loss, tuple) else loss
            loss.backward()
            losses.append(float(loss.array))
            optimizer.update()
        numpy.testing.assert_allclose(losses[1], losses[0], rtol=1e-4)
        for (name, p), (_, q) in zip(sorted(eager.namedparams()),
                                     sorted(model.namedparams())):
            numpy.testing.assert_allclose(q.array, p.array, rtol=1e-4,
                                          atol=1e-5, err_msg=name)
    return jitted


def _trains_whole_in_onnxruntime(model_class, make_batch, rng):
    """:func:`_train_twins` with ``backend='onnxruntime'``, where the
    training forward and backward each run in one session."""
    jitted = _train_twins(model_class, make_batch, rng,
                          backend='onnxruntime')
    entry, = jitted.cache_entries()
    assert entry.describe_backend().endswith(
        'forward in onnxruntime; backward in onnxruntime'), \
        entry.describe_backend()


class _MLPLoss(chainer.Chain):
    """An MLP's softmax cross entropy (a label ignored), and its logits,
    which no gradient reaches."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.mlp = models.MLP(n_in=5, n_hidden=7, n_out=3)

    def forward(self, x, t):
        y = self.mlp(x)
        return F.softmax_cross_entropy(y, t), y


class _SinLoss(_MLPLoss):
    """A hidden layer whose gradient has no ONNX form (sin's)."""

    def forward(self, x, t):
        h = F.sin(self.mlp.l1(x))
        return F.softmax_cross_entropy(self.mlp.l3(self.mlp.l2(h)), t)


def _labelled(rng):
    t = rng.randint(0, 3, 6).astype(numpy.int32)
    t[1] = -1
    return rng.randn(6, 5).astype(F32), t


def test_training_runs_in_onnxruntime_with_eager_gradients(rng):
    jitted = _train_twins(_MLPLoss, _labelled, rng, backend='onnxruntime')
    entry, = jitted.cache_entries()
    assert jitted.cache_info().compiled == 3
    assert 'training: forward in onnxruntime; backward in onnxruntime' \
        in entry.describe(), entry.describe()
    # The logits' gradient is None: a backward without it ran instead.
    (program, present), = entry.training.backward.absent.values()
    assert present == list(range(6))
    assert 'OnnxRuntime' in program.kernel_names


class _StepsLoss(chainer.Chain):
    """Three LSTM steps (a loop over a tuple, unrolled) with a loss each:
    the later steps are fused with their lateral products, and the
    training forward keeps their activated gates for the backward."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.cell = L.LSTM(4, 6)
            self.out = L.Linear(6, 3)

    def forward(self, xs, ts):
        self.cell.reset_state()
        loss = 0
        for x, t in ((xs[0], ts[0]), (xs[1], ts[1]), (xs[2], ts[2])):
            loss += F.softmax_cross_entropy(self.out(self.cell(x)), t)
        return loss


def _steps(rng):
    return (rng.randn(3, 2, 4).astype(F32),
            rng.randint(0, 3, (3, 2)).astype(numpy.int32))


def test_fused_lstm_steps_train_in_onnxruntime(rng):
    jitted = _train_twins(_StepsLoss, _steps, rng, backend='onnxruntime')
    entry, = jitted.cache_entries()
    assert 'LinearFunction+Add+LSTM' in str(entry.graph)
    assert 'training: forward in onnxruntime; backward in onnxruntime' \
        in entry.describe_backend(), entry.describe_backend()


def test_a_classifier_trains_in_onnxruntime(rng):
    # L.Classifier keeps its logits and accuracy (outputs no gradient
    # reaches): its backward without them runs in one session.
    def classifier():
        return L.Classifier(models.MLP(n_in=5, n_hidden=7, n_out=3))
    jitted = _train_twins(classifier, _labelled, rng, backend='onnxruntime')
    entry, = jitted.cache_entries()
    (program, present), = entry.training.backward.absent.values()
    assert program.kernel_names == ['OnnxRuntime'], program.kernel_names
    assert 'forward in onnxruntime' in entry.describe()


def test_a_gradient_without_a_converter_runs_on_the_vm_in_training(rng):
    jitted = _train_twins(_SinLoss, _labelled, rng, backend='onnxruntime')
    entry, = jitted.cache_entries()
    assert 'training: forward in onnxruntime; backward in onnxruntime in ' \
        '2 sessions; on the VM: SinGrad' in entry.describe(), \
        entry.describe()


class _Parametric(chainer.Chain):
    """A loss of ``x`` (4 x 6) and a parameter ``w`` (6,) through one
    op's gradient (``op``)."""

    def __init__(self, op):
        super().__init__()
        self.op = op
        with self.init_scope():
            self.w = chainer.Parameter(numpy.linspace(
                -1, 1, 6).astype(F32))

    def forward(self, x):
        return self.op(x, self.w)


# Ops whose gradients have ONNX forms, each in a loss of x and w.
GRADIENT_FORMS = {
    'add broadcast': lambda x, w: F.sum((x + w) ** 2),
    'sub': lambda x, w: F.sum(x * x - F.broadcast_to(w, x.shape)),
    'mul broadcast': lambda x, w: F.sum(F.tanh(x * w)),
    'constants': lambda x, w: F.sum(F.sigmoid((x * 0.5 + 1) * w)),
    'sum over axes': lambda x, w: F.sum(F.sum(x * w, axis=1) ** 2),
    'mean': lambda x, w: F.mean(F.relu(x - w)) * 3,
    'reshape': lambda x, w: F.sum(F.reshape(x * w, (3, 8)) ** 2),
    'mean squared error': lambda x, w: F.mean_squared_error(
        x * w, F.broadcast_to(w, x.shape)),
    'transpose': lambda x, w: F.sum(F.transpose(x * w) * F.transpose(
        F.broadcast_to(w * w, x.shape))),
    'softmax': lambda x, w: F.sum(F.softmax(x * w, axis=1) * x),
    'log_softmax': lambda x, w: F.sum(F.log_softmax(x * w) * x),
    'leaky_relu': lambda x, w: F.sum(F.leaky_relu(x * w, 0.2) ** 2),
    'split_axis': lambda x, w: F.sum(F.split_axis(x * w, [2, 5], 1)[1] ** 2),
    'matmul': lambda x, w: F.sum(F.matmul(
        F.reshape(x * w, (2, 2, 6)), F.reshape(x, (2, 2, 6)),
        transb=True) ** 2),
    'layer normalization': lambda x, w: F.sum(F.layer_normalization(
        x * 2, w, w * 0.5) ** 2),
}


@pytest.mark.parametrize('name', sorted(GRADIENT_FORMS))
def test_gradients_with_onnx_forms_train_in_onnxruntime(rng, name):
    _trains_whole_in_onnxruntime(
        lambda: _Parametric(GRADIENT_FORMS[name]),
        lambda rng: (rng.randn(4, 6).astype(F32),), rng)


class _ConvLoss(chainer.Chain):
    """Two convolutions (padding, a stride, a dilation), ReLU, a linear
    layer and softmax cross entropy: no batch normalization."""

    def __init__(self, stride=1, dilate=1):
        super().__init__()
        with self.init_scope():
            self.c1 = L.Convolution2D(2, 4, 3, pad=1)
            self.c2 = L.Convolution2D(4, 3, 3, stride=stride, pad=1,
                                      dilate=dilate, nobias=True)
            self.fc = L.Linear(None, 3)

    def forward(self, x, t):
        h = F.relu(self.c2(F.relu(self.c1(x))))
        return F.softmax_cross_entropy(self.fc(h), t)


@pytest.mark.parametrize('stride, dilate', [(1, 1), (2, 1), (1, 2),
                                            (3, 2)])
def test_convolutions_train_in_onnxruntime(rng, stride, dilate):
    _trains_whole_in_onnxruntime(
        lambda: _sized(_ConvLoss(stride, dilate)), _images, rng)


class _PooledLoss(_ConvLoss):
    """A max pooling after a ReLU (windows of zeros: ties) before the
    second convolution."""

    def __init__(self, ksize, stride, pad):
        super().__init__()
        self.pooling = dict(ksize=ksize, stride=stride, pad=pad)

    def forward(self, x, t):
        h = F.max_pooling_2d(F.relu(self.c1(x)), **self.pooling)
        return F.softmax_cross_entropy(self.fc(F.relu(self.c2(h))), t)


@pytest.mark.parametrize('ksize, stride, pad', [(2, 2, 0), (3, 2, 1),
                                                (3, 1, 0), (2, 1, 0)])
def test_max_pooling_trains_in_onnxruntime(rng, ksize, stride, pad):
    _trains_whole_in_onnxruntime(
        lambda: _sized(_PooledLoss(ksize, stride, pad)), _images, rng)


@pytest.mark.parametrize('ksize', [2, (2, 3), 3])
def test_max_pooling_gradient_goes_to_each_windows_first_maximum(rng, ksize):
    # Windows that tile the input (2x2, 2x3 and 3x3 on 6x6), of integers
    # in three values: most windows hold ties, and the gradient of x
    # shows which position each window's gradient went to.
    def pooled(x):
        return F.max_pooling_2d(x, ksize) * 1.5

    jitted = chainerjit.jit(pooled, backend='onnxruntime')
    calls = [(rng.randint(-1, 2, (2, 3, 6, 6)).astype(F32),)
             for _ in range(3)]
    testing.assert_jit_grads_match_eager(pooled, calls, rtol=0, atol=0,
                                         jitted=jitted)
    entry, = jitted.cache_entries()
    assert entry.describe_backend().endswith('backward in onnxruntime'), \
        entry.describe_backend()


def _images(rng):
    return (rng.randn(3, 2, 7, 8).astype(F32),
            rng.randint(0, 3, 3).astype(numpy.int32))


def _sized(net):
    """``net`` after one call, which sizes its linear layer."""
    net(*_images(numpy.random.RandomState(0)))
    return net


class _EncoderLoss(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.block = models.EncoderBlock(d_model=8, n_heads=2, d_ff=16)

    def forward(self, x):
        return F.mean(self.block(x) ** 2)


def test_a_transformer_block_trains_in_onnxruntime(rng):
    _trains_whole_in_onnxruntime(_EncoderLoss, lambda rng: (rng.randn(
        2, 5, 8).astype(F32),), rng)


def test_numpy_backend_trains_on_the_vm(rng):
    jitted = _train_twins(_MLPLoss, _labelled, rng, backend='numpy')
    entry, = jitted.cache_entries()
    assert entry.training_note is None
    assert 'OnnxRuntime' not in entry.training.forward.kernel_names


def test_an_unknown_backend_is_an_error():
    with pytest.raises(ValueError, match="backend must be one of"):
        chainerjit.jit(lambda x: x, backend='tensorflow')


def test_the_environment_sets_the_default(monkeypatch, rng):
    monkeypatch.setenv('CHAINERJIT_BACKEND', 'onnxruntime')
    model = models.MLP(n_in=5, n_hidden=7, n_out=3)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        _inference(jitted, model.forward,
                   [(rng.randn(2, 5).astype(F32),) for _ in range(2)])
    assert _backends(jitted) == ['onnxruntime']


def test_outputs_that_are_views_of_parameters_stay_on_the_vm(rng):
    # Eagerly the reshape is a view of the bias: a caller writing into it
    # writes into the parameter. A session would hand back a copy.
    model = models.MLP(n_in=5, n_hidden=7, n_out=3)

    def forward(x):
        return model(x), F.reshape(model.l3.b, (1, 3))

    jitted = chainerjit.jit(forward, backend='onnxruntime')
    _inference(jitted, forward,
               [(rng.randn(2, 5).astype(F32),) for _ in range(3)])
    entry, = jitted.cache_entries()
    assert entry.backend == 'numpy' and 'view' in entry.backend_note
    with chainer.no_backprop_mode():
        jitted(rng.randn(2, 5).astype(F32))[1].array[...] = 7
    assert (model.l3.b.array == 7).all()


def test_execution_providers_are_passed_to_the_sessions(rng):
    model = models.MLP(n_in=5, n_hidden=7, n_out=3)
    jitted = chainerjit.jit(model.forward, backend='onnxruntime',
                            providers=['CPUExecutionProvider'])
    _inference(jitted, model.forward,
               [(rng.randn(2, 5).astype(F32),) for _ in range(2)])
    assert _backends(jitted) == ['onnxruntime']


def test_explain_says_what_runs_the_program(rng):
    model = models.MLP(n_in=5, n_hidden=7, n_out=3)
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    x = rng.randn(2, 5).astype(F32)
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        jitted(x)
        assert jitted.explain(x).endswith('(runs on onnxruntime)')


# --- serving mode: sessions own the parameters -------------------------------

def _frozen_twins():
    eager = models.MLP(n_in=5, n_hidden=7, n_out=3)
    model = models.MLP(n_in=5, n_hidden=7, n_out=3)
    model.copyparams(eager)
    return eager, model, chainerjit.jit(model.forward, backend='onnxruntime',
                                        freeze=True)


def test_a_frozen_program_owns_the_parameters_and_makes_them_read_only(rng):
    eager, model, jitted = _frozen_twins()
    calls = [(rng.randn(2, 5).astype(F32),) for _ in range(3)]
    _inference(jitted, eager.forward, calls)
    entry, = jitted.cache_entries()
    assert entry.backend == 'onnxruntime' and len(entry.frozen) == 6
    assert all(not p.array.flags.writeable for p in model.params())
    with pytest.raises(ValueError, match='read-only'):
        model.l1.W.array[...] = 0  # never a stale result: an error
    jitted.unfreeze()
    assert all(p.array.flags.writeable for p in model.params())
    assert not jitted.cache_entries()
    model.l1.W.array[...] = eager.l1.W.array[...] = 0.5
    _inference(jitted, eager.forward, calls)  # recorded anew, frozen again
    assert jitted.cache_entries()[0].frozen


def test_a_replaced_parameter_is_recorded_again(rng):
    eager, model, jitted = _frozen_twins()
    calls = [(rng.randn(2, 5).astype(F32),) for _ in range(3)]
    _inference(jitted, eager.forward, calls)
    new = rng.randn(7, 5).astype(F32)
    model.l1.W.array, eager.l1.W.array = new, new.copy()
    _inference(jitted, eager.forward, calls)
    info = jitted.cache_info()
    assert info.compiles == 2 and info.currsize == 1
    assert not new.flags.writeable
    jitted.cache_clear()
    assert all(p.array.flags.writeable for p in model.params())


class _Normalized(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(5, 3)
            self.bn = L.BatchNormalization(3)

    def forward(self, x):
        return self.bn(self.l1(x))


def test_a_training_call_of_a_frozen_function_says_what_to_do(rng):
    # Batch normalization in training mode updates its running averages,
    # which the serving session owns: a clear error, not NumPy's.
    model = _Normalized()
    jitted = chainerjit.jit(model.forward, backend='onnxruntime', freeze=True)
    x = rng.randn(4, 5).astype(F32)
    with chainer.no_backprop_mode():
        with chainer.using_config('train', False):
            jitted(x)
        assert not model.bn.avg_mean.flags.writeable
        with pytest.raises(errors.FrozenParameters,
                           match=r'Call _Normalized.forward.unfreeze\(\)'):
            jitted(x)
        jitted.unfreeze()
        expected = copy.deepcopy(model).forward(x)
        testing.assert_results_equal(jitted(x), expected)


def test_freeze_needs_onnxruntime():
    with pytest.raises(ValueError, match='freeze=True needs onnxruntime'):
        chainerjit.jit(lambda x: x, backend='numpy', freeze=True)


class Regularized(chainer.Chain):
    """A linear layer, a layer normalization and dropout: in test mode a
    program for onnxruntime, in training mode one for the VM."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(5, 6)
            self.ln = L.LayerNormalization(6)

    def forward(self, x):
        return F.dropout(self.ln(self.fc(x)), 0.5)


def test_vm_programs_run_on_parameters_a_session_froze(rng):
    eager = Regularized()
    model = Regularized()
    model.copyparams(eager)
    jitted = chainerjit.jit(model.forward, backend='onnxruntime',
                            freeze=True)
    calls = [(rng.randn(3, 5).astype(F32),) for _ in range(3)]
    _inference(jitted, eager.forward, calls)
    assert not model.ln.gamma.array.flags.writeable
    with chainer.no_backprop_mode():  # training mode: dropout, the VM
        for (x,) in calls:
            numpy.random.seed(3)
            expected = eager.forward(x)
            numpy.random.seed(3)
            testing.assert_results_equal(jitted(x), expected)
    assert sorted(_backends(jitted)) == ['numpy', 'onnxruntime']


@pytest.mark.parametrize('faster', ['numpy', 'onnxruntime'])
def test_auto_keeps_whichever_side_measured_faster(rng, monkeypatch, faster):
    from chainerjit.runtime import backends

    def measured(program, inputs):
        on_ort = program.kernel_names == ['OnnxRuntime']
        return 1.0 if on_ort == (faster == 'onnxruntime') else 2.0
    monkeypatch.setattr(backends, '_seconds', measured)
    entry = _small_mlp_entry(rng, calls=3)
    assert entry.backend == faster
    assert entry.backend_times[faster] == 1.0


@pytest.mark.parametrize('fastest', ['all', 'split'])
def test_auto_measures_max_pooling_gradients_on_the_vm_too(
        rng, monkeypatch, fastest):
    # The backward runs in one session (every gradient converts), or in
    # sessions with the max pooling's gradient on the VM between them
    # (onnxruntime has no fast form of it): the faster measured is kept.
    from chainerjit.runtime import backends

    def measured(program, inputs):
        names = program.kernel_names
        if 'OnnxRuntime' not in names:
            return 3.0  # the VM's program
        return 1.0 if (len(names) > 1) == (fastest == 'split') else 2.0
    monkeypatch.setattr(backends, '_seconds', measured)
    jitted = _train_twins(lambda: _sized(_PooledLoss(2, 2, 0)), _images,
                          rng, backend='auto')
    entry, = jitted.cache_entries()
    backward = entry.describe_backend().split('backward ')[1]
    assert backward.startswith('in onnxruntime')
    on_vm = backward.partition('on the VM: ')[2]  # (ReLU+)MaxPoolingNDGrad
    assert ('MaxPoolingNDGrad' in on_vm) == (fastest == 'split'), backward


class _NormalizedLoss(chainer.Chain):
    """Convolutions with biases before batch normalizations in training
    (running averages updated; a bias's gradient zero but for rounding),
    and dropout."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.c1 = L.Convolution2D(2, 4, 3, pad=1)
            self.bn1 = L.BatchNormalization(4)
            self.c2 = L.Convolution2D(4, 3, 3, pad=1)
            self.bn2 = L.BatchNormalization(3)
            self.fc = L.Linear(None, 3)

    def forward(self, x, t):
        h = F.max_pooling_2d(F.relu(self.bn1(self.c1(x))), 2)
        h = F.dropout(F.relu(self.bn2(self.c2(h))), 0.25)
        return F.softmax_cross_entropy(self.fc(h), t)


def test_batch_normalization_trains_on_the_vm_between_sessions(rng):
    # The forward's batch normalizations and dropout run on the VM, the
    # rest in sessions; choosing runs the forward several times, which
    # must leave the running averages as eager leaves them (and draw the
    # dropout masks eager draws).
    def images(rng):
        return (rng.randn(4, 2, 8, 8).astype(F32),
                rng.randint(0, 3, 4).astype(numpy.int32))

    def model():
        net = _NormalizedLoss()
        net(*images(numpy.random.RandomState(0)))
        return net

    numpy.random.seed(3)
    eager, twin = model(), model()
    twin.copyparams(eager)
    for name in ('bn1', 'bn2'):
        for array in ('avg_mean', 'avg_var'):
            getattr(twin[name], array)[...] = getattr(eager[name], array)
    jitted = chainerjit.jit(twin.forward, backend='onnxruntime')
    for step in range(4):
        batch = images(rng)
        losses = []
        for m, fn in ((eager, eager.forward), (twin, jitted)):
            numpy.random.seed(step)  # the same dropout masks
            m.cleargrads()
            loss = fn(*batch)
            loss.backward()
            losses.append(float(loss.array))
        numpy.testing.assert_allclose(losses[1], losses[0], rtol=1e-4)
        for (name, p), (_, q) in zip(sorted(eager.namedparams()),
                                     sorted(twin.namedparams())):
            numpy.testing.assert_allclose(q.grad, p.grad, rtol=1e-4,
                                          atol=1e-5, err_msg=name)
        for name in ('bn1', 'bn2'):
            for array in ('avg_mean', 'avg_var'):
                numpy.testing.assert_allclose(
                    getattr(twin[name], array), getattr(eager[name], array),
                    rtol=1e-5, err_msg=name + '.' + array)
    entry, = jitted.cache_entries()
    note = entry.describe_backend()
    assert 'forward in onnxruntime in 4 sessions; on the VM: ' \
        'BatchNormalization, BatchNormalization, Dropout' in note, note


def test_rounding_noise_widens_the_tolerance_where_sums_cancel():
    from chainerjit.runtime import backends
    expected = numpy.array([2e-5, 1.0], F32)
    actual = numpy.array([4e-5, 1.0], F32)
    assert not backends.arrays_close(actual, expected)
    assert backends.arrays_close(actual, expected,
                                 numpy.array([1.5e-5, 1.0], F32))
    assert not backends.arrays_close(actual, expected,
                                     numpy.array([1.9e-5, 1.0], F32))
    # The programs' outputs on nudged inputs are computed once, and only
    # where an output is outside the tolerance.
    runs = []

    def rounding_noise():
        runs.append(1)
        return [numpy.array([1.5e-5, 1.0], F32)] * 2
    assert backends._differs([expected] * 2, [expected.copy()] * 2,
                             rounding_noise) is None and not runs
    assert backends._differs([expected] * 2, [actual] * 2,
                             rounding_noise) is None and len(runs) == 1
    assert backends._differs([expected], [actual]) is not None
    labels = numpy.arange(3, dtype=numpy.int32)
    floats = numpy.ones(1000, F32)
    nudged_labels, nudged = backends._nudged([labels, floats])
    assert nudged_labels is labels
    moved = numpy.abs(nudged - floats)
    assert moved.max() <= backends.NUDGE * numpy.finfo(F32).eps
    assert moved.max() > 0


def test_a_classifier_in_evaluation_runs_in_onnxruntime(rng):
    # Its loss (float) is computed by a kernel that also reads the labels
    # (int): no view of them, so the program may run in a session.
    model = L.Classifier(models.MLP(n_in=5, n_hidden=7, n_out=3))
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    calls = [(rng.randn(4, 5).astype(F32),
              rng.randint(0, 3, 4).astype(numpy.int32)) for _ in range(3)]
    _inference(jitted, model.forward, calls)
    assert _backends(jitted) == ['onnxruntime']


def _owning_measured_fastest(monkeypatch):
    def measured(program, inputs):
        return 1.0 if isinstance(program, backends.WhileUnchanged) else 2.0
    monkeypatch.setattr(backends, '_seconds', measured)


def _twins():
    eager = models.MLP(n_in=5, n_hidden=7, n_out=3)
    model = models.MLP(n_in=5, n_hidden=7, n_out=3)
    model.copyparams(eager)
    return eager, model, chainerjit.jit(model.forward, backend='auto')


def test_auto_lets_a_session_own_parameters_while_they_do_not_change(
        rng, monkeypatch):
    _owning_measured_fastest(monkeypatch)
    eager, model, jitted = _twins()
    calls = [(rng.randn(2, 5).astype(F32),) for _ in range(3)]
    _inference(jitted, eager.forward, calls)
    entry, = jitted.cache_entries()
    assert isinstance(entry.program, backends.WhileUnchanged)
    assert entry.program.owned is not None
    assert 'owns the parameters' in entry.describe()
    assert all(p.array.flags.writeable for p in model.params())
    model.l2.W.array = model.l2.W.array.copy()  # the same values
    _inference(jitted, eager.forward, calls)
    assert entry.program.owned is not None
    for link in (model, eager):  # an update in place, as an optimizer's
        link.l1.W.array[1, 2] += 0.5
        link.l3.b.array[...] = 0.25
    _inference(jitted, eager.forward, calls)
    assert entry.program.owned is None  # the fallback's, for good
    model.l1.W.array = rng.randn(7, 5).astype(F32)
    eager.l1.W.array = model.l1.W.array.copy()
    _inference(jitted, eager.forward, calls)
    assert jitted.cache_info().compiles == 1


def test_a_session_owning_parameters_serves_other_batch_sizes(
        rng, monkeypatch):
    _owning_measured_fastest(monkeypatch)
    eager, model, jitted = _twins()
    _inference(jitted, eager.forward, [  # chosen at the third call
        (rng.randn(n, 5).astype(F32),) for n in (2, 2, 2, 3, 5, 3)])
    entry, = jitted.cache_entries()
    assert 'any batch size' in entry.describe()
    for link in (model, eager):
        link.l2.W.array *= 2
    _inference(jitted, eager.forward, [
        (rng.randn(n, 5).astype(F32),) for n in (2, 4)])


def test_training_programs_and_large_parameters_are_not_owned(
        rng, monkeypatch):
    _owning_measured_fastest(monkeypatch)
    eager, model, jitted = _twins()
    x = rng.randn(2, 5).astype(F32)
    jitted(x)  # backprop enabled: a training entry
    monkeypatch.setattr(backends, 'OWNED_BYTES', 100)
    _inference(jitted, eager.forward, [(x,)])
    for entry in jitted.cache_entries():
        assert backends.OWNED not in entry.backend_times
        assert not isinstance(entry.program, backends.WhileUnchanged)


def test_a_change_is_any_byte_or_an_array_laid_out_otherwise():
    digest = backends.digest
    arrays = [numpy.arange(12, dtype=F32).reshape(3, 4),
              numpy.array([numpy.nan, 1.0]), numpy.zeros(0, F32)]
    digests = [digest(a) for a in arrays]
    positions = (0, 1, 2)

    def first_changed(found, at=positions):
        return _calls.first_changed(found, at, digests, digest)
    assert first_changed(arrays) == -1
    assert first_changed(arrays[::-1], (2, 1, 0)) == -1
    assert first_changed([a.copy() for a in arrays]) == -1
    changed = list(arrays)
    changed[1] = arrays[1].copy()
    changed[1].view(numpy.uint8)[0] ^= 1  # one bit of a NaN's payload
    assert first_changed(changed) == 1
    for other in (numpy.asfortranarray(arrays[0]), arrays[0][:2],
                  arrays[0].tolist(), arrays[0].astype(numpy.float64),
                  arrays[0] + numpy.float32(1e-7)):
        changed[0] = other
        assert first_changed(changed) == 0


def test_without_a_hash_function_no_session_owns_the_parameters(
        rng, monkeypatch):
    _owning_measured_fastest(monkeypatch)
    monkeypatch.setattr(backends, 'digest', None)
    eager, model, jitted = _twins()
    _inference(jitted, eager.forward,
               [(rng.randn(2, 5).astype(F32),) for _ in range(3)])
    entry, = jitted.cache_entries()
    assert backends.OWNED not in entry.backend_times
    assert not isinstance(entry.program, backends.WhileUnchanged)


@pytest.mark.parametrize('fn', [
    lambda x, y: F.sum(F.erf(x) * y),
    lambda x, y: F.sum(F.absolute_error(x, y) * y),
    lambda x, y: F.sum(F.batch_l2_norm_squared(x * y)),
    lambda x, y: F.sum(F.cumsum(x, axis=1) * y),
    lambda x, y: F.sum(F.huber_loss(x, y, 0.5)),
    lambda x, y: F.sum(F.prelu(x, F.sum(y, axis=0)) * y),
    lambda x, y: F.sum(F.crelu(x) * F.concat([y, y], axis=1)),
    lambda x, y: F.sum(F.unpooling_2d(F.reshape(x, (1, 1, 3, 4)), 2,
                                      cover_all=False) ** 2),
    lambda x, y: F.sum(F.group_normalization(
        x, 2, F.sum(y, axis=0), F.mean(y, axis=0)) * y),
], ids=['erf', 'absolute_error', 'batch_l2_norm_squared', 'cumsum',
        'huber_loss', 'prelu', 'crelu', 'unpooling_2d',
        'group_normalization'])
def test_special_and_loss_functions_train_whole_in_onnxruntime(rng, fn):
    jitted = chainerjit.jit(fn, backend='onnxruntime')
    for _ in range(3):
        x = rng.randn(3, 4).astype(F32)
        y = rng.randn(3, 4).astype(F32)
        compiled, eager = chainer.Variable(x), chainer.Variable(x.copy())
        jitted(compiled, y).backward()
        fn(eager, y).backward()
        numpy.testing.assert_allclose(compiled.grad, eager.grad, rtol=1e-5,
                                      atol=1e-6)
    entry, = jitted.cache_entries()
    assert 'forward in onnxruntime; backward in onnxruntime' in \
        entry.describe_backend(), entry.describe_backend()


def test_sessions_take_the_blas_threads_in_force_when_built():
    threadpoolctl = pytest.importorskip('threadpoolctl')
    from chainerjit.backend import ort
    with threadpoolctl.threadpool_limits(1, user_api='blas'):
        assert ort.thread_count() == 1
    with threadpoolctl.threadpool_limits(2, user_api='blas'):
        assert ort.thread_count() == 2


def test_numpy_indexing_reshapes_counts_and_int_arithmetic_convert(rng):
    """NumPy run on a program's arrays in one session with the rest:
    basic indexing, a reshape, a count of equal labels, arithmetic on
    integer arrays."""
    pytest.importorskip('onnxruntime')

    def fn(x, t, s):
        h = F.tanh(x).array
        part = h[::-1, 1:3][0] + h.reshape(-1)[:2]
        correct = numpy.sum(t * 3 - numpy.abs(s) == s * 2 + t)
        return F.sigmoid(part), correct
    jitted = chainerjit.jit(fn, backend='onnxruntime')
    with chainer.no_backprop_mode():
        for _ in range(3):
            args = (rng.randn(4, 5).astype(F32),
                    rng.randint(0, 3, 6).astype(numpy.int32),
                    rng.randint(0, 3, 6).astype(numpy.int32))
            got, expected = jitted(*args), fn(*args)
            numpy.testing.assert_allclose(got[0].array, expected[0].array,
                                          rtol=1e-5)
            assert got[1] == expected[1] and type(got[1]) is \
                type(expected[1])
    entry, = jitted.cache_entries()
    assert entry.describe_backend() == 'onnxruntime', \
        entry.describe_backend()
