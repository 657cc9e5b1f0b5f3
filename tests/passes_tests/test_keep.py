"""Keeping a softmax cross entropy's softmax for its gradient: before and
after IR, values and gradients bit for bit against eager Chainer, and
ONNX."""

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing
from chainerjit.passes import keep


def _calls(rng, dtype=numpy.float32, n=3):
    return [(rng.standard_normal((5, 4)).astype(dtype) * 3,
             rng.randint(0, 4, 5).astype(numpy.int32)) for _ in range(n)]


def _loss(x, t):
    return F.softmax_cross_entropy(x * 2.0, t)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_the_softmax_is_a_second_output_the_gradient_reads(rng, dtype):
    jitted = testing.assert_jit_grads_match_eager(
        _loss, _calls(rng, dtype), rtol=0, atol=0)
    entry = jitted.cache_entries()[0]
    sce, = [n for n in entry.graph.nodes if n.op == 'SoftmaxCrossEntropy']
    assert [v.shape for v in sce.outputs] == [(), (5, 4)]
    # The backward reads the kept softmax, not x: no log-softmax again.
    assert sce.outputs[1] in entry.training.graphs.forward.outputs
    assert sce.inputs[0] not in entry.training.graphs.forward.outputs
    graph = entry.graph
    assert keep.keep_softmax(graph) == (graph, False)  # kept once


def test_an_inference_program_drops_the_softmax(rng):
    with chainer.no_backprop_mode():
        jitted = testing.assert_jit_matches_eager(_loss, _calls(rng), rtol=0,
                                                  atol=0)
    dis = jitted.cache_entries()[0].program.dis()
    assert 'CALLM' in dis and 'SoftmaxCrossEntropy' in dis


def test_soft_targets_and_other_reductions(rng):
    def per_row(x, t):
        return F.softmax_cross_entropy(x, t, reduce='no')

    def soft(x, t):
        return F.softmax_cross_entropy(x, F.softmax(t).array)
    calls = _calls(rng)
    jitted = testing.assert_jit_grads_match_eager(per_row, calls)
    sce, = [n for n in jitted.cache_entries()[0].graph.nodes
            if n.op == 'SoftmaxCrossEntropy']
    assert len(sce.outputs) == 2
    soft_calls = [(x, rng.standard_normal((5, 4)).astype(numpy.float32))
                  for x, _ in calls]
    jitted = testing.assert_jit_grads_match_eager(soft, soft_calls)
    sce, = [n for n in jitted.cache_entries()[0].graph.nodes
            if n.op == 'SoftmaxCrossEntropy']
    assert len(sce.outputs) == 1  # soft targets: not lowered with it


def test_a_loss_keeping_its_softmax_exports_to_onnx(rng):
    pytest.importorskip('onnxruntime')

    def loss(x, t):
        return F.softmax_cross_entropy(F.tanh(x), t)
    testing.assert_onnx_matches_eager(loss, _calls(rng, n=2), rtol=1e-5,
                                      atol=1e-6)
    jitted = chainerjit.jit(loss)
    jitted(*_calls(rng, n=1)[0])
    assert len([n for n in jitted.cache_entries()[0].graph.nodes
                if n.op == 'SoftmaxCrossEntropy'][0].outputs) == 2
