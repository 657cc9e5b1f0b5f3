"""Loop regions exported as ONNX ``Loop`` nodes and run in onnxruntime.

A model exported from a call whose trip count is symbolic takes inputs of
any length: the ONNX input has a ``T`` axis and the trip count is read
from its shape.
"""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import onnx_export
from chainerjit import testing

pytest.importorskip('onnxruntime')


class Tagger(chainer.Chain):
    """An LSTM over ``xs`` (T, B, 6): the last state classified, and every
    step's state stacked."""

    def __init__(self):
        super(Tagger, self).__init__()
        with self.init_scope():
            self.lstm = L.StatelessLSTM(6, 8)
            self.out = L.Linear(8, 3)

    def forward(self, xs):
        c = h = None
        states = []
        for t in range(xs.shape[0]):
            c, h = self.lstm(c, h, xs[t])
            states.append(h)
        return self.out(h), F.stack(states)


def _sequences(rng, lengths, batch=2, size=6):
    return [(rng.standard_normal((n, batch, size)).astype(numpy.float32),)
            for n in lengths]


def test_an_lstm_exported_at_length_5_runs_at_50(rng):
    numpy.random.seed(0)
    model = testing.assert_onnx_matches_eager(
        Tagger().forward, _sequences(rng, [5, 5, 50, 1]), rtol=1e-4,
        atol=1e-5)
    # One LSTM layer: ONNX's LSTM operator (tests/onnx_tests/
    # test_lstm_layers.py), the loop's length read from the input.
    assert 'Loop' not in [n.op_type for n in model.graph.node]
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == 'T'


def test_a_fixed_count_loop_is_exported_with_its_count(rng):
    def f(x, w):
        for _ in range(3):
            x = F.tanh(F.matmul(x, w))
        return x

    calls = [(rng.standard_normal((2, 4)).astype(numpy.float32),
              rng.standard_normal((4, 4)).astype(numpy.float32))
             for _ in range(2)]
    model = testing.assert_onnx_matches_eager(f, calls, rtol=1e-5,
                                              atol=1e-6)
    assert [n.op_type for n in model.graph.node].count('Loop') == 1


def test_nested_loops_are_nested_onnx_loops(rng):
    def f(xs, h, w):
        for t in range(xs.shape[0]):
            x = xs[t]
            for j in range(x.shape[0]):
                h = F.tanh(F.matmul(h, w) + x[j])
        return h

    calls = [(rng.standard_normal((3, 4, 2, 5)).astype(numpy.float32),
              rng.standard_normal((2, 5)).astype(numpy.float32),
              rng.standard_normal((5, 5)).astype(numpy.float32))
             for _ in range(2)]
    model = testing.assert_onnx_matches_eager(f, calls, rtol=1e-4,
                                              atol=1e-5)
    outer, = [n for n in model.graph.node if n.op_type == 'Loop']
    body = outer.attribute[0].g
    assert 'Loop' in [n.op_type for n in body.node]


def test_a_branch_on_an_array_value_cannot_be_exported():
    def f(x):
        if (x.array > 0).all():
            return F.relu(x)
        return F.sigmoid(x)

    with pytest.raises(onnx_export.ExportError,
                       match='(?s)(numpy.greater|branch on an array value)'
                             '.*test_loops'):
        chainerjit.export_onnx(
            f, (chainer.Variable(numpy.ones((2, 3), numpy.float32)),))


EOS = 0


class Decoder(chainer.Chain):
    """Greedy decoding from a state ``h`` until every sequence emits EOS;
    the output layer's bias makes EOS likely after a few steps."""

    def __init__(self):
        super(Decoder, self).__init__()
        with self.init_scope():
            self.embed = L.EmbedID(5, 4)
            self.cell = L.Linear(8, 4)
            self.out = L.Linear(4, 5)

    def step(self, h, y):
        h = F.tanh(self.cell(F.concat([self.embed(y), h])))
        return h, F.argmax(self.out(h), axis=1)


class WhileDecoder(Decoder):

    def forward(self, h, y):
        ys = [y]
        while not (chainer.as_array(y) == EOS).all():
            h, y = self.step(h, y)
            ys.append(y)
        return F.stack(ys)


class ForDecoder(Decoder):

    def forward(self, h, y, max_len):
        ys = []
        for i in range(max_len):
            h, y = self.step(h, y)
            ys.append(y)
            if (y.array == EOS).all():
                break
        return F.stack(ys)


def _decoder_inputs(rng, n):
    return [(rng.standard_normal((3, 4)).astype(numpy.float32) * 2,
             numpy.array([1, 2, 3], numpy.int32)) for _ in range(n)]


@pytest.mark.parametrize('cls, extra', [(WhileDecoder, ()),
                                        (ForDecoder, (6,))])
def test_a_greedy_decoder_is_exported_with_its_exit(rng, cls, extra):
    numpy.random.seed(1)
    decoder = cls()
    decoder.out.b.array[EOS] = 2.0  # ends after a few steps
    calls = [args + extra for args in _decoder_inputs(rng, 6)]
    lengths = set()
    with chainer.no_backprop_mode():
        for args in calls:
            lengths.add(len(decoder.forward(*args)))
    assert len(lengths) > 1, lengths  # several output lengths
    model = testing.assert_onnx_matches_eager(decoder.forward, calls)
    assert 'Loop' in [n.op_type for n in model.graph.node]


@pytest.mark.parametrize('name', [
    'ShapeUnpacked', 'Bidirectional', 'CounterLoop', 'StateMadeInTheLoop',
    'CounterWeighted', 'StepsFlattenedByBatch', 'ReversedSlice', 'Flipped',
    'BidirectionalSteps', 'ContextOverSteps', 'MeanOfComprehension',
    'QueryBroadcastToTheSteps', 'QueryTiledToTheSteps', 'BiasMadeWithTheSizes',
    'AttentionMaskMade', 'SplitIntoSteps', 'StepsOfAHelperStacked',
    'CounterLoopDown', 'FirstStepByTheCounter'])
def test_loops_over_an_argument_axis_export_with_a_dynamic_length(
        rng, name):
    # The forms tied to the call by what their bodies index, whatever
    # their source counts with; the reversed loop reads from the end, and
    # a reversed list of steps is the loop's stacked steps reversed.
    from tests.frontend_tests import test_loop_lengths as forms
    model = getattr(forms, name)()
    exported = testing.assert_onnx_matches_eager(
        model.forward, [(rng.standard_normal((n, 4, forms.I)).astype(
            numpy.float32),) for n in (5, 9, 2, 17)], rtol=1e-4, atol=1e-5)
    dims = exported.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == 'T'


@pytest.mark.parametrize('name', ['NextWordsOfSlices', 'StepsAfterTheFirst',
                                  'EmbeddedInTheHeader'])
def test_loops_over_cut_or_computed_steps_export_with_a_dynamic_length(
        name):
    # xs[:-1] and xs[1:] cut in Python, F.embed(ids)[1:] and a value
    # computed in the loop's header: Slice and a Loop of T less a few.
    from tests.frontend_tests import test_loop_lengths as forms
    model = getattr(forms, name)()
    ids = [(forms._id_calls([(n, 4)], seed=n)[0][0],) for n in (5, 9, 3, 17)]
    exported = testing.assert_onnx_matches_eager(
        model.forward, ids, rtol=1e-4, atol=1e-5)
    dims = exported.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == 'T'


def test_a_mask_numpy_broadcasts_exports_with_a_dynamic_length():
    from tests.frontend_tests import test_loop_lengths as forms
    model = forms.MaskBroadcastByNumPy()
    exported = testing.assert_onnx_matches_eager(
        model.forward, forms._masked_calls([(5, 4), (9, 4), (2, 4)]),
        rtol=1e-4, atol=1e-5)
    dims = exported.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == 'T'


def test_a_mask_of_lengths_against_the_counter_exports_with_a_length():
    from tests.frontend_tests import test_loop_lengths as forms
    exported = testing.assert_onnx_matches_eager(
        forms.MaskedByLengths().forward,
        forms._length_calls([(5, 4), (9, 4), (2, 4)]), rtol=1e-4, atol=1e-5)
    dims = exported.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == 'T'
