"""Reverse-mode autodiff over the IR (``chainerjit.passes.autodiff``):
``differentiate`` turns a recorded graph into a training pair whose
compiled forward and backward give eager Chainer's outputs and gradients,
call after call with new values, a rolled loop with a symbolic trip count
included."""

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import passes
from chainerjit import testing
from chainerjit.backend import codegen
from chainerjit.frontend import signature
from chainerjit.frontend import trace
from chainerjit.passes import autodiff


F32 = numpy.float32


def _record(fn, *arrays):
    """The graph of ``fn`` recorded on Variables around ``arrays`` (as a
    call that trains records it), after the passes."""
    args = tuple(chainer.Variable(a) for a in arrays)
    leaves = []
    signature.flatten((args, {}), leaves)
    recording = trace.record(fn, None, args, {}, leaves, 'f',
                             ['x%d' % i for i in range(len(leaves))])
    return passes.run(recording.graph)


class _Pair(object):
    """A training pair and its two programs."""

    def __init__(self, graph, wrt):
        self.pair = autodiff.differentiate(graph, wrt)
        self.pair.forward.verify()
        self.pair.backward.verify()
        self.forward = codegen.compile_graph(self.pair.forward)
        self.backward = codegen.compile_graph(self.pair.backward)

    def run(self, arrays, output_grads, symbols=()):
        """The user's outputs, and ``{value: gradient}`` for the values
        asked for that the outputs depend on."""
        outs = self.forward.run(list(arrays) + list(symbols))
        n = self.pair.n_outputs
        grads = self.backward.run(list(outs[n:]) + list(output_grads) +
                                  list(symbols))
        assert len(grads) == len(self.pair.wrt)
        return outs[:n], dict(zip(self.pair.wrt, grads))


def _eager(fn, arrays, output_grads):
    """Eager Chainer's outputs and the gradients of every argument."""
    variables = [chainer.Variable(a.copy()) for a in arrays]
    outputs = fn(*variables)
    chainer.backward(list(outputs),
                     [chainer.Variable(g.copy()) for g in output_grads])
    return [y.array for y in outputs], [v.grad for v in variables]


def _assert_matches_eager(pair, fn, graph, arrays, output_grads,
                          symbols=(), rtol=1e-5, atol=1e-6):
    outs, grads = pair.run(arrays, output_grads, symbols)
    expected_outs, expected_grads = _eager(fn, arrays, output_grads)
    assert len(outs) == len(expected_outs)
    for out, expected in zip(outs, expected_outs):
        assert out.shape == expected.shape and out.dtype == expected.dtype
        numpy.testing.assert_allclose(out, expected, rtol=rtol, atol=atol)
    for value, expected in zip(graph.inputs, expected_grads):
        if value not in grads:
            continue
        assert grads[value].dtype == expected.dtype, value.name
        numpy.testing.assert_allclose(grads[value], expected, rtol=rtol,
                                      atol=atol, err_msg=value.name)
    return grads


def _normal(rng, *shape):
    return rng.standard_normal(shape).astype(F32)


def _two_layers(x, W1, b1, W2):
    h = F.relu(F.linear(x, W1, b1))
    y = F.tanh(F.linear(h, W2))
    return y, F.sum(y * x[:, :3], axis=1)


def _two_layer_args(rng):
    return (_normal(rng, 4, 5), _normal(rng, 6, 5), _normal(rng, 6),
            _normal(rng, 3, 6))


def _two_layer_grads(rng):
    return _normal(rng, 4, 3), _normal(rng, 4)


def test_gradients_of_every_argument_match_eager_on_new_values(rng):
    graph = _record(_two_layers, *_two_layer_args(rng))
    pair = _Pair(graph, list(graph.inputs))
    assert pair.pair.wrt == graph.inputs
    assert pair.pair.n_outputs == 2
    # The backward takes the saved values, then one gradient per output.
    assert len(pair.pair.backward.inputs) == len(pair.pair.forward.outputs)
    assert len(pair.pair.forward.outputs) > 2
    for _ in range(3):
        grads = _assert_matches_eager(pair, _two_layers, graph,
                                      _two_layer_args(rng),
                                      _two_layer_grads(rng))
        assert len(grads) == 4


def test_only_the_values_asked_for_get_gradients(rng):
    graph = _record(_two_layers, *_two_layer_args(rng))
    W1 = graph.inputs[1]
    pair = _Pair(graph, [W1])
    assert pair.pair.wrt == [W1]
    assert len(pair.pair.backward.outputs) == 1
    for _ in range(3):
        grads = _assert_matches_eager(pair, _two_layers, graph,
                                      _two_layer_args(rng),
                                      _two_layer_grads(rng))
        assert list(grads) == [W1]


def _unused_argument(x, w, unused):
    return F.sigmoid(x * w) + 1, F.exp(x)


def test_an_argument_the_outputs_do_not_depend_on_gets_no_gradient(rng):
    def args():
        return _normal(rng, 2, 3), _normal(rng, 2, 3), _normal(rng, 2, 3)
    graph = _record(_unused_argument, *args())
    pair = _Pair(graph, list(graph.inputs))
    assert pair.pair.wrt == graph.inputs[:2]
    for _ in range(3):
        _assert_matches_eager(pair, _unused_argument, graph, args(),
                              [_normal(rng, 2, 3), _normal(rng, 2, 3)])


def test_a_node_without_a_gradient_rule_raises(rng, monkeypatch):
    graph = _record(_unused_argument, _normal(rng, 2, 3),
                    _normal(rng, 2, 3), _normal(rng, 2, 3))
    node = next(n for n in graph.nodes if n.op == 'Exp')
    monkeypatch.setattr(node, 'kernel', node.kernel._replace(grad=None))
    with pytest.raises(chainerjit.errors.NotDifferentiable, match='Exp'):
        autodiff.differentiate(graph, list(graph.inputs))


def _rnn(xs, h, W):
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t] + F.matmul(h, W))
    return h


def _rnn_outputs(xs, h, W):
    return _rnn(xs, h, W),


def _rnn_args(rng, n):
    return _normal(rng, n, 2, 3), _normal(rng, 2, 3), _normal(rng, 3, 3)


def test_a_rolled_loop_with_a_symbolic_trip_count(rng):
    jitted = chainerjit.jit(_rnn)
    for n in (4, 5, 6):
        jitted(*[chainer.Variable(a) for a in _rnn_args(rng, n)])
    entry, = jitted.cache_entries()
    graph = entry.graph
    loop, = [n for n in graph.nodes if n.region is not None]
    assert loop.attrs == (('trip', 'T'),) and len(graph.symbols) == 1
    pair = _Pair(graph, list(graph.inputs))
    assert [n.op for n in pair.pair.backward.nodes
            if n.region is not None] == ['LoopGrad']
    for n in (3, 7, 1, 4):
        _assert_matches_eager(pair, _rnn_outputs, graph, _rnn_args(rng, n),
                              [_normal(rng, 2, 3)], symbols=[n],
                              rtol=1e-4, atol=1e-5)


class _Shared(chainer.Chain):
    """A value and a weight used three times and more, on paths of
    different lengths, with NumPy and a stopped gradient on the way."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = chainer.links.Linear(4, 4)
            self.l2 = chainer.links.Linear(4, 4)

    def forward(self, x):
        h = F.tanh(self.l1(x))
        side = chainer.Variable(h.array * 2)  # a new leaf, as eagerly
        y = self.l1(h) + self.l2(h * h) + F.sin(F.cos(h)) + side * h
        return F.sum(y) + F.sum(h) * 0.5


@pytest.mark.bit_exact
@pytest.mark.parametrize('fn', [
    lambda z: F.sum(z) + 0.5 * F.sum(z * z),
    lambda z: F.sum(F.exp(z) + F.sin(F.cos(z)) + z * 2),
    lambda z: F.sum(F.tanh(z) * z) + F.sum(z) - F.sum(F.tanh(F.tanh(z))),
    lambda z: F.sum(F.concat([z, z * z, F.exp(z)], axis=1)) * F.sum(z),
], ids=['sum and product', 'three depths', 'nested', 'concat'])
def test_gradients_are_summed_in_chainers_order(rng, fn):
    """Chainer sums the gradients of a value in the order its backward
    runs the nodes (highest rank first, then the first pushed), which
    rounds otherwise than the reverse of the recording where a value
    has three gradients or more."""
    testing.assert_jit_grads_match_eager(
        fn, [(rng.randn(5, 6).astype(F32),) for _ in range(4)],
        rtol=0, atol=0)


@pytest.mark.bit_exact
def test_a_model_trains_as_eagerly_bit_for_bit(rng):
    numpy.random.seed(0)
    eager = _Shared()
    model = eager.copy(mode='copy')
    forward = chainerjit.jit(model.forward, backend='numpy')
    for _ in range(4):
        x = rng.randn(3, 4).astype(F32)
        for m, fn in ((eager, eager.forward), (model, forward)):
            m.cleargrads()
            fn(x).backward()
        for a, b in zip(eager.params(), model.params()):
            numpy.testing.assert_array_equal(a.grad, b.grad)
