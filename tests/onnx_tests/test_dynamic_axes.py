"""Programs that serve every batch size and sequence length export with
those axes dynamic: the ONNX model names them, and onnxruntime runs it at
other sizes with eager Chainer's results."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from tests.frontend_tests import test_loop_lengths_in_helpers as forms


onnxruntime = pytest.importorskip('onnxruntime')


class MLP(chainer.Chain):
    def __init__(self):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(6, 8)
            self.l2 = L.Linear(8, 3)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


def _served(model, inputs):
    """``jit(model)`` after serving ``inputs`` (test mode, no backprop)."""
    jitted = chainerjit.jit(model)
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for x in inputs:
            jitted(x)
    return jitted


def _dims(model):
    return [d.dim_param or d.dim_value
            for d in model.graph.input[0].type.tensor_type.shape.dim]


def _runs_as_eager(onnx_model, model, inputs):
    session = onnxruntime.InferenceSession(
        onnx_model.SerializeToString(), providers=['CPUExecutionProvider'])
    name = session.get_inputs()[0].name
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for x in inputs:
            y, = session.run(None, {name: x})
            numpy.testing.assert_allclose(y, model(x).array, rtol=1e-4,
                                          atol=1e-5)


def test_a_program_serving_every_batch_size_exports_a_dynamic_batch(rng):
    model = MLP()
    batches = [rng.standard_normal((n, 6)).astype('f') for n in (3, 5, 8)]
    jitted = _served(model, batches)
    assert 'x: f32[B,6]' in str(jitted.cache_entries()[0].signature)
    exported = chainerjit.export_onnx(jitted, (batches[0],))
    assert _dims(exported)[0] in ('B', 'batch'), _dims(exported)
    _runs_as_eager(exported, model, [
        rng.standard_normal((n, 6)).astype('f') for n in (1, 7, 30)])


def test_an_example_of_another_batch_names_the_outputs_batch(rng):
    # (the entry recorded at 3 rows, the example 4: its batch is the
    # output's too, checked at 4 and 8 rows)
    model = MLP()
    jitted = chainerjit.jit(model, backend='onnxruntime')
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for n in (3, 5):  # one session widened to every batch size
            jitted(rng.standard_normal((n, 6)).astype('f'))
    exported = chainerjit.export_onnx(
        jitted, (rng.standard_normal((4, 6)).astype('f'),))
    dims = [d.dim_param or d.dim_value
            for d in exported.graph.output[0].type.tensor_type.shape.dim]
    assert dims == ['batch', 3] and _dims(exported) == ['batch', 6], \
        (dims, _dims(exported))


def test_a_program_of_one_batch_size_exports_it_unless_asked(rng):
    model = MLP()
    x = rng.standard_normal((3, 6)).astype('f')
    assert _dims(chainerjit.export_onnx(_served(model, [x]), (x,))) == [3, 6]
    exported = chainerjit.export_onnx(_served(model, [x]), (x,),
                                      dynamic_batch=True)
    assert _dims(exported) == ['batch', 6]


def _masked_scores(x):
    """Scores masked with arrays the forward makes of the scores' shape,
    which the program makes again at any batch size."""
    s = F.matmul(x, x, transb=True)
    keep = numpy.broadcast_to(numpy.eye(x.shape[1], dtype=bool), s.shape)
    return F.where(keep, s, numpy.full(s.shape, -1e9, s.dtype))


def _written_scores(x):
    """:func:`_masked_scores`, the fill written into before it is used: a
    constant of the example's batch size."""
    s = F.matmul(x, x, transb=True)
    minus = numpy.full(s.shape, -1e9, s.dtype)
    minus[:, 0, 0] = 0
    return F.where(numpy.eye(x.shape[1], dtype=bool)[None], s, minus)


def test_an_array_of_the_scores_shape_exports_a_dynamic_batch(rng):
    x = rng.standard_normal((3, 4, 2)).astype('f')
    exported = chainerjit.export_onnx(_masked_scores, (x,),
                                      dynamic_batch=True)
    assert _dims(exported) == ['batch', 4, 2]
    _runs_as_eager(exported, _masked_scores, [
        rng.standard_normal((n, 4, 2)).astype('f') for n in (1, 5, 9)])


def test_a_constant_of_the_batch_size_refuses_a_dynamic_batch(rng):
    x = rng.standard_normal((3, 4, 2)).astype('f')
    with pytest.raises(chainerjit.errors.ExportError,
                       match='made with the batch size of the example'):
        chainerjit.export_onnx(_written_scores, (x,), dynamic_batch=True)
    exported = chainerjit.export_onnx(_written_scores, (x,))
    assert _dims(exported) == [3, 4, 2]


@pytest.mark.parametrize('cls', [forms.Classifier, forms.EncodeMethod,
                                 forms.MeanOfStackedSteps,
                                 forms.ProjectedAtOnce,
                                 forms.SumOfConcatenatedSteps,
                                 forms.BatchFirstOutputs])
def test_a_sequence_model_exports_its_length_and_batch(cls, rng):
    _exports_steps_and_batch(cls(), rng, batch_first=False)


def _exports_steps_and_batch(model, rng, batch_first):
    """``model`` served sequences of several lengths and batch sizes
    exports both axes dynamic, and runs as eager at others."""
    def steps(shapes):
        return [rng.standard_normal((b, n, 6) if batch_first else
                                    (n, b, 6)).astype('f')
                for n, b in shapes]
    calls = steps(((5, 4), (9, 4), (6, 3)))
    exported = chainerjit.export_onnx(_served(model, calls), (calls[0],))
    assert _dims(exported) == (['B', 'T', 6] if batch_first else
                               ['T', 'B', 6])
    _runs_as_eager(exported, model, steps(((12, 2), (3, 7), (20, 5))))


@pytest.mark.parametrize('how', ['sizes', 'inferred', 'method'])
def test_batch_first_attention_exports_its_batch_and_length(how, rng):
    from tests.frontend_tests.test_loop_lengths import BatchFirstAttention
    _exports_steps_and_batch(BatchFirstAttention(how), rng, batch_first=True)


@pytest.mark.parametrize('how', ['table', 'broadcast_table', 'parameter',
                                 'arange', 'shifted'])
def test_positions_as_long_as_the_steps_export_the_steps(how, rng):
    from tests.runtime_tests.test_attention_sizes import _Positions
    from tests.runtime_tests.test_attention_sizes import _Shifted
    numpy.random.seed(11)
    model = _Shifted('table') if how == 'shifted' else _Positions(how)
    calls = [rng.randint(0, 20, (b, n)).astype(numpy.int32)
             for b, n in ((3, 5), (4, 9), (2, 7))]
    exported = chainerjit.export_onnx(_served(model, calls), (calls[0],))
    assert _dims(exported) == ['B', 'W'], _dims(exported)
    _runs_as_eager(exported, model, [
        rng.randint(0, 20, (b, n)).astype(numpy.int32)
        for b, n in ((2, 11), (5, 3), (1, 20))])


def _mean_over_the_batch(x):
    return F.sum(F.tanh(x), axis=0) * (1.0 / float(x.shape[0]))


def _halves_apart(x):
    a, b = F.split_axis(F.tanh(x), 2, axis=0)
    return a - b * 2


def _per_gap(x):
    return F.sum(F.tanh(x)) / (len(x) - 1)


def _stacked(x):
    return F.stack([F.tanh(x), F.relu(x)], axis=0)


def _squeezed(x):
    return F.squeeze(F.expand_dims(F.tanh(x), 2))


def _tiled(x):
    return F.tile(x, (2, 1))


@pytest.mark.parametrize('fn, why', [
    (_mean_over_the_batch,
     r'uses the batch size in Python \(x.shape\[0\] converted to float'),
    (_halves_apart, 'does not run at batch size 8'),
    # (a batch of one squeezed away, as eagerly: the model cannot)
    (_squeezed, r'batch size 1 \(shape \(1, 3\), Chainer\'s \(3,\)'),
    (_per_gap, 'the forward itself fails at 1 rows on axis 0 '
     r'\(ZeroDivisionError')])
def test_a_model_kept_at_the_examples_batch_refuses_a_dynamic_one(
        rng, fn, why):
    x = rng.standard_normal((4, 3)).astype('f')
    with pytest.raises(chainerjit.errors.ExportError, match=why):
        chainerjit.export_onnx(fn, (x,), dynamic_batch=True)
    _runs_as_eager(chainerjit.export_onnx(fn, (x,)), fn, [
        rng.standard_normal((4, 3)).astype('f') for _ in range(2)])


def test_outputs_declare_only_axis_zero_the_batch(rng):
    # F.stack's (2, B, 3): axis 1 has the batch's size, not axis 0.
    x = rng.standard_normal((3, 3)).astype('f')
    exported = chainerjit.export_onnx(_stacked, (x,), dynamic_batch=True)
    dims = [d.dim_param or d.dim_value
            for d in exported.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [2, 'y0_1', 3]
    session = onnxruntime.InferenceSession(
        exported.SerializeToString(), providers=['CPUExecutionProvider'])
    for n in (1, 5):
        x = rng.standard_normal((n, 3)).astype('f')
        y, = session.run(None, {'x': x})
        numpy.testing.assert_allclose(y, _stacked(x).array, rtol=1e-6)


def test_an_output_of_twice_the_batch_declares_a_free_axis(rng):
    x = rng.standard_normal((3, 4)).astype('f')
    exported = chainerjit.export_onnx(_tiled, (x,), dynamic_batch=True)
    dims = [d.dim_param or d.dim_value
            for d in exported.graph.output[0].type.tensor_type.shape.dim]
    assert dims == ['y0_0', 4]


def _masked_by_lengths(x, lengths):
    # An int32 argument against NumPy's int64 arange: compared as int64.
    mask = numpy.arange(x.shape[1])[None, :] < lengths[:, None]
    return F.where(mask, F.tanh(x), numpy.zeros(x.shape, x.dtype))


@pytest.mark.parametrize('dtype', [numpy.int32, numpy.int64])
def test_a_mask_of_lengths_of_either_int_type_exports(rng, dtype):
    from chainerjit import testing
    calls = [(rng.standard_normal((3, 5)).astype('f'),
              rng.randint(0, 6, 3).astype(dtype)) for _ in range(3)]
    testing.assert_onnx_matches_eager(_masked_by_lengths, calls)
