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
