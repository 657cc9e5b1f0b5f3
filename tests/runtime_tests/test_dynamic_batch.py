"""Automatic dynamic batch (``chainerjit.runtime.batch``): an inference
program run by onnxruntime serves every batch size once a second one is
seen, each new size checked against eager once; where it cannot, the batch
size stays in the key with a warning. Every model is compared with eager
Chainer on calls of several batch sizes with new values."""

import warnings

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from examples import models

pytest.importorskip('onnxruntime')

F32 = numpy.float32
BATCHES = (3, 8, 17, 30, 8, 1, 64, 3)


def _run(jitted, model_fn, make, batches=BATCHES, backprop=False):
    """Calls ``jitted`` and eager ``model_fn`` in test mode on
    ``make(rng, batch)`` for each batch size, comparing the results."""
    rng = numpy.random.RandomState(0)
    with chainer.using_config('train', False), \
            chainer.using_config('enable_backprop', backprop):
        for batch in batches:
            args = make(rng, batch)
            testing.assert_results_equal(jitted(*args), model_fn(*args),
                                         1e-4, 1e-5)


def _images(rng, batch):
    return rng.randn(batch, 1, 8, 8).astype(F32),


def _vectors(rng, batch):
    return rng.randn(batch, 784).astype(F32),


def _tokens(rng, batch):
    return rng.randn(batch, 5, 16).astype(F32),


@pytest.mark.parametrize('make_model, make, backend', [
    (models.MLP, _vectors, 'onnxruntime'),
    (models.MLP, _vectors, 'auto'),
    (models.LeNet, _images, 'onnxruntime'),
    (models.EncoderBlock, _tokens, 'onnxruntime'),
    (models.EncoderBlock, _tokens, 'auto'),
])
def test_one_entry_serves_every_batch_size(make_model, make, backend):
    model = make_model()
    jitted = chainerjit.jit(model.forward, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        _run(jitted, model.forward, make)
    info = jitted.cache_info()
    assert info.currsize == 1 and info.compiles == 1, jitted.cache_report()
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('x: f32[B,'), entry.signature
    assert 'batch size' in entry.describe_backend()
    # The first call at each new size also ran eagerly, once.
    assert info.eager == len(set(BATCHES)) - 1, info


def test_the_vm_keeps_the_recorded_size_and_onnxruntime_the_others():
    model = models.MLP(20, 32, 10)  # small: the VM is likely faster
    jitted = chainerjit.jit(model.forward, backend='auto')
    _run(jitted, model.forward, lambda rng, batch: (
        rng.randn(batch, 20).astype(F32),), (3, 8, 5, 3))
    entry, = jitted.cache_entries()
    if entry.backend != 'numpy':
        pytest.skip('onnxruntime measured faster here')
    assert 'onnxruntime at batch sizes other than 3' in \
        entry.describe_backend()


@pytest.mark.parametrize('options', [
    dict(backend='numpy', dynamic=False),
    dict(backend='onnxruntime', dynamic=False)])
def test_batch_sizes_compile_on_their_own_where_asked(options):
    model = models.MLP()
    jitted = chainerjit.jit(model.forward, **options)
    _run(jitted, model.forward, _vectors, (3, 8, 17))
    assert jitted.cache_info().currsize == 3, jitted.cache_report()


def test_training_programs_keep_the_batch_size():
    model = models.MLP()
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    _run(jitted, model.forward, _vectors, (3, 8, 17), backprop=True)
    assert jitted.cache_info().currsize == 3, jitted.cache_report()


class _TimeMajor(chainer.Chain):
    """A loop over the steps of a time-major batch: its session has the
    length dynamic, not the batch on axis 1."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = chainer.links.Linear(6, 8)

    def forward(self, xs):
        h = F.tanh(self.l1(xs[0]))
        for t in range(1, len(xs)):
            h = F.tanh(self.l1(xs[t]) + h)
        return h


@pytest.mark.parametrize('make_model, make, backprop', [
    (models.MLP, _vectors, True),
    (_TimeMajor, lambda rng, batch: (rng.randn(4, batch, 6).astype(F32),),
     False)])
def test_sessions_of_one_batch_size_say_so(make_model, make, backprop,
                                           monkeypatch):
    """Training sessions, and those of loops whose trip count is symbolic,
    keep the batch size: a one-time warning says so."""
    monkeypatch.setattr(errors, '_warned', set())
    model = make_model()
    jitted = chainerjit.jit(model.forward, backend='onnxruntime')
    with pytest.warns(errors.RecompileWarning,
                      match="with backend='onnxruntime' its sessions are "
                            "built for one batch size"):
        _run(jitted, model.forward, make, (3, 8, 17), backprop=backprop)
    assert jitted.cache_info().currsize == 3, jitted.cache_report()


def test_serving_mode_serves_every_batch_size():
    model = models.MLP()
    jitted = chainerjit.jit(model.forward, backend='onnxruntime',
                            freeze=True)
    _run(jitted, model.forward, _vectors, (3, 8, 17, 8))
    assert jitted.cache_info().currsize == 1, jitted.cache_report()
    assert not model.l1.W.array.flags.writeable
    jitted.unfreeze()
    assert model.l1.W.array.flags.writeable


class _AddsRowNumbers(chainer.Chain):
    """Adds the rows' numbers, ``numpy.arange`` of the batch size: made
    again from the batch on every call."""

    def forward(self, x):
        rows = numpy.arange(x.shape[0], dtype=F32)[:, None]
        return F.tanh(x + rows)


class _AddsWrittenRowNumbers(chainer.Chain):
    """Adds an array made in Python with the batch size's rows, written
    into: a constant the dynamic session cannot stretch."""

    def forward(self, x):
        rows = numpy.arange(x.shape[0], dtype=F32)[:, None]
        rows[0] = 5
        return F.tanh(x + rows)


@pytest.mark.parametrize('backend', ['onnxruntime', 'numpy'])
def test_row_numbers_made_of_the_batch_size_stretch(backend):
    model = _AddsRowNumbers()
    jitted = chainerjit.jit(model.forward, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        _run(jitted, model.forward, lambda rng, b: (
            rng.randn(b, 4).astype(F32),), (3, 8, 17, 30, 17, 3))
    entry, = jitted.cache_entries()
    assert 'x: f32[B,4]' in str(entry.signature), entry.signature


class _DoublesLargeBatches(chainer.Chain):
    """Python decides on the batch size: right at sizes that go the
    recorded way, wrong at others."""

    def forward(self, x):
        h = F.tanh(x)
        if x.shape[0] > 10:
            h = h * 2
        return h


def _as_float(n):
    return 1.0 * n  # (the float multiplies, in C; the source is not read)


class _DoublesLargeBatchesSecretly(chainer.Chain):
    """As :class:`_DoublesLargeBatches`, with the decision in C code that
    Length ints cannot see, in a helper: the first call at a size that goes
    the other way finds it."""

    def forward(self, x):
        h = F.tanh(x)
        if _as_float(x.shape[0]) > 10:
            h = h * 2
        return h


class _DoublesLargeBatchesInFloats(chainer.Chain):
    """As :class:`_DoublesLargeBatchesSecretly`, in the forward's own
    source, which shows it."""

    def forward(self, x):
        h = F.tanh(x)
        if 1.0 * x.shape[0] > 10:  # the float multiplies, in C
            h = h * 2
        return h


class _SplitAroundRemainder(chainer.Chain):
    """An op onnxruntime lacks (``numpy.remainder``, run on the VM between
    two sessions): the sessions cannot be one of any batch size."""

    def forward(self, x):
        return F.tanh(x) * numpy.remainder(x, 2.0)


@pytest.mark.parametrize('cls, why', [
    (_AddsWrittenRowNumbers, 'keeps the size of x.shape[0] in the cache key'),
    (_SplitAroundRemainder, 'numpy.remainder has no ONNX converter'),
    (_DoublesLargeBatches, 'x.shape[0] compared at test_dynamic_batch.py'),
    (_DoublesLargeBatchesSecretly, 'gave another result than eagerly'),
    (_DoublesLargeBatchesInFloats, 'x.shape[0] compared (as a float)')])
@pytest.mark.parametrize('backend', ['onnxruntime', 'numpy'])
def test_a_program_that_cannot_stretch_keeps_the_batch_size(
        cls, why, backend, monkeypatch):
    monkeypatch.setattr(errors, '_warned', set())  # warned once by name
    model = cls()
    jitted = chainerjit.jit(model.forward, backend=backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        _run(jitted, model.forward, lambda rng, b: (
            rng.randn(b, 4).astype(F32),), (3, 8, 17, 30, 17, 3))
    messages = [str(w.message) for w in caught
                if issubclass(w.category, errors.RecompileWarning)]
    if cls in (_SplitAroundRemainder, _DoublesLargeBatches) and \
            backend == 'numpy':
        return  # (the VM runs it at any batch size: a comparison guards)
    assert any(why in m for m in messages), messages
    for entry in jitted.cache_entries():
        assert 'B' not in str(entry.signature), entry.signature
    if cls is _DoublesLargeBatches:
        explained = jitted.explain(numpy.zeros((5, 4), F32))
        assert 'the batch size stays in the cache key: x.shape[0] ' \
            'compared' in explained, explained


@pytest.mark.parametrize('backend', ['numpy', 'auto'])
def test_on_the_vm_a_decision_on_the_batch_size_guards_an_entry_a_side(
        backend):
    # (with 'auto', onnxruntime's session cannot guard it: the VM does)
    model = _DoublesLargeBatches()
    jitted = chainerjit.jit(model.forward, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        _run(jitted, model.forward, lambda rng, b: (
            rng.randn(b, 4).astype(F32),), (3, 8, 17, 30, 17, 3, 5, 12))
    described = sorted(e.describe().splitlines()[1]
                       for e in jitted.cache_entries())
    assert described == ['for sizes where: B > 10',
                         'for sizes where: not B > 10'], described


def _views_and_features(x):
    # A view of the argument as an output: onnxruntime would copy it, so
    # the VM runs the program.
    return x[:, :4], F.tanh(x) * 2


def test_a_program_onnxruntime_does_not_run_serves_every_batch_size():
    jitted = chainerjit.jit(_views_and_features, backend='onnxruntime')
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        _run(jitted, _views_and_features, _tokens,
             batches=(3, 8, 17, 30, 8, 64, 3))
    entry, = jitted.cache_entries()
    assert entry.backend == 'numpy', entry.describe_backend()
    assert str(entry.signature).startswith('x: f32[B,5,16]')


class _OneStepScored(chainer.Chain):
    """``L.LSTM`` over the steps of a batch-first sequence, each scored:
    at one step no loop rolls, and the LSTM's first state is an array
    Chainer made of the recorded batch, which one onnxruntime session of
    any batch size holds as a constant (it gives the recorded batch's
    rows), while the VM's program makes it again of each call's."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.lstm = chainer.links.LSTM(6, 8)
            self.out = chainer.links.Linear(8, 5)

    def forward(self, xs):
        self.lstm.reset_state()
        ys = []
        for t in range(xs.shape[1]):
            ys.append(F.log_softmax(self.out(self.lstm(xs[:, t]))))
        return ys


def test_a_session_of_another_result_leaves_the_batch_to_the_vm():
    model = _OneStepScored()
    jitted = chainerjit.jit(model.forward, backend='auto')
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        _run(jitted, model.forward, lambda rng, shape: (
            rng.randn(*shape).astype(F32),),
             batches=[(4, 5, 6), (4, 1, 6), (1, 1, 6), (3, 1, 6),
                      (6, 1, 6), (2, 7, 6), (5, 1, 6)])
    signatures = sorted(str(e.signature)[:15]
                        for e in jitted.cache_entries())
    assert signatures == ['xs: f32[B,1,6]@', 'xs: f32[B,T,6]@'], signatures


def _doubled_where_all_zero(x, t):
    """A branch on ``.all()`` of a row for each item (a decoder's test of
    whether every sentence ended)."""
    y = F.tanh(x)
    if (t == 0).all():
        y = y * 2
    return F.sum(y, axis=1)


def test_a_branch_on_all_of_the_rows_serves_every_batch_size():
    rng = numpy.random.RandomState(3)
    jitted = chainerjit.jit(_doubled_where_all_zero)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        for batch in (3, 5, 2, 7, 4, 6):
            x = rng.randn(batch, 4).astype(numpy.float32)
            t = rng.randint(1, 3, batch).astype(numpy.int32)
            testing.assert_results_equal(jitted(x, t),
                                         _doubled_where_all_zero(x, t))
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('x: f32[B,4]'), entry.signature
