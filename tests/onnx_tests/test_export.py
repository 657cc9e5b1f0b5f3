"""Export errors and the exported graph's interface."""

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import onnx_export

pytest.importorskip('onnx')


class Twice(chainer.FunctionNode):
    def forward(self, inputs):
        return inputs[0] * 2,


def test_an_op_without_a_converter_names_the_op_and_the_line():
    def f(x):
        y, = Twice().apply((x,))
        return F.relu(y)

    with pytest.raises(onnx_export.ExportError,
                       match=r'(?s)Twice has no ONNX converter.*test_export'):
        chainerjit.export_onnx(f, (numpy.ones((2, 3), numpy.float32),))


def test_a_call_that_runs_eagerly_cannot_be_exported():
    def f(x):
        return F.relu(x) * float(x.array.sum())

    with pytest.warns(chainerjit.FallbackWarning):
        with pytest.raises(onnx_export.ExportError, match='runs eagerly'):
            chainerjit.export_onnx(
                f, (chainer.Variable(numpy.ones((2, 3), numpy.float32)),))


def test_inputs_parameters_and_outputs_are_named(tmp_path):
    import onnx
    link = chainer.links.Linear(3, 2)
    model = chainerjit.export_onnx(
        chainerjit.jit(link), (numpy.ones((4, 3), numpy.float32),),
        tmp_path / 'linear.onnx', dynamic_batch=True)
    assert [i.name for i in model.graph.input] == ['x']
    assert sorted(i.name for i in model.graph.initializer) == ['W', 'b']
    assert [o.name for o in model.graph.output] == ['y0']
    dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim.dim_param == 'batch'
    assert model.opset_import[0].version >= 17
    onnx.checker.check_model(onnx.load(str(tmp_path / 'linear.onnx')))


def test_parameters_that_share_a_name_get_names_of_their_own(rng):
    # A plain function over a model: its parameters are named by their
    # links' attributes, W and b, twice; ONNX names must be unique.
    pytest.importorskip('onnxruntime')
    from chainerjit import testing
    from examples import models
    model = models.MLP(n_in=4, n_hidden=5, n_out=3)
    calls = [(rng.randn(2, 4).astype(numpy.float32),) for _ in range(3)]
    exported = testing.assert_onnx_matches_eager(
        lambda x: F.tanh(model.forward(x)), calls)
    names = [i.name for i in exported.graph.initializer]
    assert len(names) == len(set(names))


def _session(model):
    import onnxruntime
    return onnxruntime.InferenceSession(model.SerializeToString(),
                                        providers=['CPUExecutionProvider'])


def test_the_state_a_forward_assigns_is_an_output(rng):
    # L.LSTM reset at the start of the forward: the exported model gives
    # the link's last state besides the result, at any length.
    pytest.importorskip('onnxruntime')
    from examples import models
    model = models.LSTMClassifier(n_in=6, n_hidden=8, n_out=3)
    example = rng.standard_normal((5, 2, 6)).astype(numpy.float32)
    session = _session(chainerjit.export_onnx(model.forward, (example,)))
    assert [o.name for o in session.get_outputs()] == [
        'y0', 'lstm.c', 'lstm.h']
    for length in (5, 9, 1):
        xs = rng.standard_normal((length, 2, 6)).astype(numpy.float32)
        y, c, h = session.run(None, {'xs': xs})
        with chainer.using_config('train', False):
            expected = model.forward(xs)
        for got, want in ((y, expected), (c, model.lstm.c), (h, model.lstm.h)):
            numpy.testing.assert_allclose(got, want.array, rtol=1e-4,
                                          atol=1e-5)


class _Reporting(chainer.Chain):
    def __init__(self):
        super(_Reporting, self).__init__()
        with self.init_scope():
            self.fc = chainer.links.Linear(3, 2)
        self.last = None

    def forward(self, x):
        y = self.fc(x)
        chainer.report({'mean': F.mean(y), 'top': F.max(y)}, self)
        self.last = F.relu(y)
        return y


def test_reported_values_are_outputs_named_by_their_keys(rng):
    pytest.importorskip('onnxruntime')
    model = _Reporting()
    example = rng.standard_normal((4, 3)).astype(numpy.float32)
    session = _session(chainerjit.export_onnx(model.forward, (example,)))
    assert [o.name for o in session.get_outputs()] == [
        'y0', 'report.mean', 'report.top', 'last']
    x = rng.standard_normal((4, 3)).astype(numpy.float32)
    y, mean, top, last = session.run(None, {'x': x})
    expected = model.fc(x).array
    for got, want in ((y, expected), (mean, expected.mean()),
                      (top, expected.max()), (last, numpy.maximum(expected,
                                                                  0))):
        numpy.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


class _ReportingTwice(_Reporting):
    def forward(self, x):
        y = super(_ReportingTwice, self).forward(x)
        chainer.report({'mean': F.min(y)}, self)  # replaces the first
        return y


def test_a_key_reported_twice_is_one_output_of_its_last_value(rng):
    pytest.importorskip('onnxruntime')
    model = _ReportingTwice()
    example = rng.standard_normal((4, 3)).astype(numpy.float32)
    session = _session(chainerjit.export_onnx(model.forward, (example,)))
    assert [o.name for o in session.get_outputs()] == [
        'y0', 'report.mean', 'report.top', 'last']
    x = rng.standard_normal((4, 3)).astype(numpy.float32)
    _, mean, top, _ = session.run(None, {'x': x})
    expected = model.fc(x).array
    numpy.testing.assert_allclose(mean, expected.min(), rtol=1e-6)
    numpy.testing.assert_allclose(top, expected.max(), rtol=1e-6)


def test_state_carried_from_call_to_call_cannot_be_exported(rng):
    from examples import models

    class Continuing(models.LSTMClassifier):
        def forward(self, xs):  # no reset_state(): the state carries over
            for t in range(xs.shape[0]):
                h = self.lstm(xs[t])
            return self.out(h)

    model = Continuing(n_in=6, n_hidden=8, n_out=3)
    with pytest.raises(onnx_export.ExportError,
                       match=r'carries model state.*lstm\.c, lstm\.h.*'
                             r'reset_state'):
        chainerjit.export_onnx(model.forward, (
            rng.standard_normal((5, 2, 6)).astype(numpy.float32),))
