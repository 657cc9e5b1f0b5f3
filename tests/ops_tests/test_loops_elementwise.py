"""The C loops of ``chainerjit/ops/_loops_elementwise.pyx`` give the
values of the NumPy ufuncs they replace: a linear layer's bias and ReLU,
ReLU's gradient and the whole-array updates of SGD and MomentumSGD, over
the layouts they take, refusing the arrays they do not take. The one-pass
Linear+ReLU kernel gives the unfused kernel's bits, and models using the
loops train as eager Chainer does."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from chainerjit.ops import _loops_elementwise
from chainerjit.ops import linear as linear_ops
from tests.ops_tests.loop_inputs import _special
from tests.ops_tests.test_normalization_training import _batches
from tests.ops_tests.test_normalization_training import _calls
from tests.ops_tests.test_normalization_training import _Net
from tests.ops_tests.test_normalization_training import _r
from tests.ops_tests.test_normalization_training import _train_twins
from tests.ops_tests.test_normalization_training import F32
from tests.ops_tests.test_normalization_training import F64


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape', [(1, 7), (64, 100), (3, 1)])
@pytest.mark.parametrize('order', ['C', 'F'])
def test_bias_relu_is_numpys_add_then_maximum(rng, dtype, shape, order):
    y = numpy.asarray(_special(rng, shape, dtype), order=order)
    b = rng.standard_normal(shape[1]).astype(dtype)
    expected = numpy.maximum(y + b, dtype(0))
    out = numpy.empty(shape, dtype)
    assert _loops_elementwise.bias_relu(y, b, out)
    # Equal values (NaN where NumPy has NaN); a zero's sign may differ.
    numpy.testing.assert_array_equal(out, expected)
    in_place = numpy.array(y, order='C')  # a copy
    assert _loops_elementwise.bias_relu(in_place, b, in_place)
    numpy.testing.assert_array_equal(in_place, expected)
    reversed_rows = y[::-1]  # negative strides
    assert _loops_elementwise.bias_relu(reversed_rows, b, out)
    numpy.testing.assert_array_equal(out, expected[::-1])


def test_bias_relu_refuses_arrays_it_does_not_take(rng):
    y = rng.standard_normal((4, 6)).astype(numpy.float32)
    b = rng.standard_normal(6).astype(numpy.float32)
    out = numpy.zeros_like(y)
    take = _loops_elementwise.bias_relu
    assert not take(y, b.astype(numpy.float64), out)
    assert not take(y, b[::2], out[:, :3])  # b not contiguous
    assert not take(y, b, numpy.asfortranarray(out))
    assert not take(y[:, :5], b, out)
    assert not take(y, out[0], out)  # b inside out
    big = numpy.zeros((5, 6), numpy.float32)
    assert not take(big[:4], b, big[1:])  # y and out overlap, shifted
    assert not take(y.T, b[:4], out.T.copy().T)
    assert not out.any()


def _fused_and_unfused(monkeypatch, make_fn, calls):
    """Outputs of ``jit(fn)`` with the one-pass Linear+ReLU and without."""
    results = []
    for dtypes in (linear_ops._FUSED_DTYPES, ()):
        monkeypatch.setattr(linear_ops, '_FUSED_DTYPES', dtypes)
        jitted = chainerjit.jit(make_fn())
        with chainer.no_backprop_mode():
            results.append([jitted(*args).array for args in calls])
        kernels = [n.kernel.fn for e in jitted.cache_entries()
                   for n in e.graph.nodes if n.op == 'LinearFunction+ReLU']
        assert kernels and all(
            ('_then_relu' in k.__qualname__) == bool(dtypes)
            for k in kernels)
    return results


@pytest.mark.parametrize('batch', [1, 64, 65])
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_linear_relu_in_one_pass_gives_the_same_bits(monkeypatch, rng,
                                                     batch, dtype):
    with chainer.using_config('dtype', dtype):
        l1, l2 = L.Linear(30, 40), L.Linear(40, 10)

    def make_fn():
        return lambda x: l2(F.relu(l1(x)))
    calls = [(rng.standard_normal((batch, 30)).astype(dtype),)
             for _ in range(3)]
    fused, unfused = _fused_and_unfused(monkeypatch, make_fn, calls)
    for a, b in zip(fused, unfused):
        assert a.tobytes() == b.tobytes()
    testing.assert_jit_matches_eager(make_fn(), calls)
    testing.assert_jit_grads_match_eager(make_fn(), calls)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_relu_grad_is_numpys_product_by_the_mask_bit_for_bit(rng, dtype):
    gy = _special(rng, (4, 3, 5), dtype)
    y = numpy.maximum(_special(rng, (4, 3, 5), dtype)[::-1].copy(), 0)
    expected = gy * (y > 0)
    out = numpy.empty_like(gy)
    assert _loops_elementwise.relu_grad(gy, y, out)
    assert out.tobytes() == expected.tobytes()


@pytest.mark.parametrize('shape', [(8, 6, 5, 5), (3, 7)])
def test_relu_gradients_through_the_loop_match_eager(rng, shape):
    def f(x, w):
        return F.relu(x * w)
    calls = [(rng.standard_normal(shape).astype(numpy.float32),
              rng.standard_normal(shape).astype(numpy.float32))
             for _ in range(3)]
    testing.assert_jit_grads_match_eager(f, calls, rtol=0, atol=0)


def _loop_cases(rng):
    """Arrays each whole-array loop must refuse (returning False and
    writing nothing): a pair per case, the array written and another."""
    w = rng.standard_normal((6, 5)).astype(numpy.float32)
    read_only = w.copy()
    read_only.flags.writeable = False
    big = rng.standard_normal(31).astype(numpy.float32)
    return {
        'float16': (w.astype(numpy.float16), w.astype(numpy.float16)),
        'mixed dtypes': (w.copy(), w.astype(numpy.float64)),
        'int32': (w.astype(numpy.int32), w.astype(numpy.int32)),
        'other shape': (w.copy(), w.reshape(5, 6).copy()),
        'other order of axes': (w.copy(), numpy.asfortranarray(w)),
        'not one block': (w.copy(), numpy.vstack([w, w])[::2]),
        'broadcast': (w.copy(), numpy.broadcast_to(w[:1], w.shape)),
        'reversed': (w.copy(), w[::-1]),
        'read-only': (read_only, w.copy()),
        'partly overlapping': (big[1:], big[:-1]),
        'byte-swapped': (w.copy(), w.astype('>f4')),
        'not an ndarray': (w.copy(), w.tolist()),
    }


@pytest.mark.parametrize('case', list(_loop_cases(numpy.random.RandomState(
    0))))
def test_whole_array_loops_refuse_arrays_they_do_not_take(rng, case):
    written, other = _loop_cases(rng)[case]
    before = numpy.array(written, copy=True)
    assert not _loops_elementwise.sgd_update(written, other, 0.1)
    assert not _loops_elementwise.momentum_sgd_update(
        written, other, numpy.zeros_like(before), 0.1, 0.9)
    assert not _loops_elementwise.relu_grad(other, other, written)
    assert numpy.array_equal(numpy.asarray(written), before, equal_nan=True)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_whole_array_loops_take_any_shape_and_an_identical_block(rng, dtype):
    w = _special(rng, (2, 3, 4), dtype)
    g = _special(rng, (2, 3, 4), dtype)[::-1].copy()
    expected = w - dtype(0.1) * g
    assert _loops_elementwise.sgd_update(w, g, 0.1)
    assert w.tobytes() == expected.tobytes()
    same = g.copy()
    expected = same - dtype(0.1) * same
    assert _loops_elementwise.sgd_update(same, same, 0.1)
    assert same.tobytes() == expected.tobytes()
    gy = g.copy()
    expected = gy * (w > 0)
    assert _loops_elementwise.relu_grad(gy, w, gy)  # in place
    assert gy.tobytes() == expected.tobytes()


@pytest.mark.parametrize('axes', [(0, 2, 3, 1), (3, 2, 1, 0), (1, 0, 2, 3)])
def test_whole_array_loops_take_dense_transposed_layouts(rng, axes):
    """A convolution's output is NHWC memory seen as NCHW: the loops run
    over such blocks in memory order when every array has that layout."""
    shape = (3, 4, 5, 2)
    stored = [numpy.empty(shape, numpy.float32).transpose(axes)
              for _ in range(3)]
    gy, y, out = stored
    gy[...] = _special(rng, gy.shape, numpy.float32)
    y[...] = rng.standard_normal(y.shape)
    assert not gy.flags.c_contiguous
    assert _loops_elementwise.relu_grad(gy, y, out)
    assert numpy.array_equal(out, gy * (y > 0), equal_nan=True)
    assert not _loops_elementwise.relu_grad(gy, numpy.ascontiguousarray(y),
                                            out)
    w, g = out.copy(order='K'), y
    expected = w - numpy.float32(0.5) * g
    assert _loops_elementwise.sgd_update(w, g, 0.5)
    assert numpy.array_equal(w, expected, equal_nan=True)


@pytest.mark.bit_exact
def test_relu_gradient_of_a_convolution_matches_eager(monkeypatch, rng):
    """A ReLU after a convolution in training: its output keeps the
    convolution's transposed layout (as eager's, so that later reductions
    sum in eager's order) and the output gradient comes C-ordered. The
    loop, which takes only arrays of one layout, refuses them, then runs
    on a C-ordered copy of the output into a C-ordered gradient, the
    layout of NumPy's product: eager's bits."""
    calls = []
    loop = _loops_elementwise.relu_grad
    monkeypatch.setattr(_loops_elementwise, 'relu_grad',
                        lambda *a: calls.append(loop(*a)) or calls[-1])
    conv = L.Convolution2D(2, 3, 3, pad=1)

    def f(x):
        return F.relu(conv(x))
    inputs = [(rng.standard_normal((2, 2, 5, 5)).astype(numpy.float32),)
              for _ in range(2)]
    testing.assert_jit_grads_match_eager(f, inputs, rtol=0, atol=0)
    assert calls and calls[::2] == [False] * (len(calls) // 2)
    assert calls[1::2] == [True] * (len(calls) // 2)


# --- adversarial: the elementwise loops in training -------------------------

@pytest.mark.adversarial
@pytest.mark.parametrize('perm', [(0, 2, 3, 1), (3, 2, 1, 0), (1, 0, 2, 3)])
def test_relu_on_transposed_inputs(perm):
    def f(x):
        return F.relu(F.transpose(x, perm)) * 2
    testing.assert_jit_grads_match_eager(f, _calls(24, [(2, 3, 4, 5)]), 0, 0,
                                         lowered=('ReLU',))


@pytest.mark.bit_exact
@pytest.mark.adversarial
def test_relu_of_nhwc_conv_output():
    def f(x, W, b):
        h = F.transpose(F.convolution_2d(x, W, b, pad=1), (0, 2, 3, 1))
        return F.relu(h)
    testing.assert_jit_grads_match_eager(
        f, _calls(25, [(2, 3, 5, 4), (6, 3, 3, 3), (6,)]), 0, 0)


@pytest.mark.adversarial
def test_relu_mixed_layouts_in_backward():
    def f(x, y):
        return F.relu(x) + F.relu(F.transpose(y))
    testing.assert_jit_grads_match_eager(f, _calls(26, [(5, 7), (7, 5)]),
                                         0, 0)


@pytest.mark.bit_exact
@pytest.mark.adversarial
@pytest.mark.parametrize('batch', [1, 63, 64, 65, 300])
def test_linear_relu_batch_sizes(batch):
    def f(x, W, b):
        return F.relu(F.linear(x, W, b))
    calls = _calls(27, [(batch, 10), (7, 10), (7,)])
    testing.assert_jit_matches_eager(f, calls, 1e-6, 1e-6)
    testing.assert_jit_grads_match_eager(f, calls, 1e-6, 1e-6)


@pytest.mark.bit_exact
@pytest.mark.adversarial
@pytest.mark.parametrize('batch', [64, 65, 300])
def test_linear_relu_pre_activation_also_returned(batch):
    def f(x, W, b):
        h = F.linear(x, W, b)
        return h, F.relu(h), F.relu(h) * h
    calls = _calls(28, [(batch, 9), (5, 9), (5,)])
    testing.assert_jit_matches_eager(f, calls, 0, 0)
    # h's four gradients are summed in another order than eager's.
    testing.assert_jit_grads_match_eager(f, calls, 1e-5, 1e-5)


@pytest.mark.bit_exact
@pytest.mark.adversarial
@pytest.mark.parametrize('batch', [1, 65, 300])
def test_linear_relu_of_transposed_x(batch):
    def f(x, W, b):
        return F.relu(F.linear(F.transpose(x), W, b))
    calls = _calls(39, [(6, batch), (4, 6), (4,)])
    testing.assert_jit_matches_eager(f, calls, 1e-6, 1e-6)
    testing.assert_jit_grads_match_eager(f, calls, 1e-6, 1e-6)


@pytest.mark.bit_exact
@pytest.mark.adversarial
@pytest.mark.parametrize('optimizer', [
    lambda: chainer.optimizers.SGD(lr=0.05),
    lambda: chainer.optimizers.MomentumSGD(lr=0.05, momentum=0.8)],
    ids=['SGD', 'MomentumSGD'])
@pytest.mark.parametrize('dtype', [F32, F64])
def test_mlp_updates_bit_for_bit(optimizer, dtype):
    numpy.random.seed(3)
    net = _Net(lambda m, x: m.l2(F.relu(m.l1(x))), l1=L.Linear(8, 70),
               l2=L.Linear(70, 3))
    for p in net.params():
        p.array = p.array.astype(dtype)
    _train_twins(net, _batches(30, (65, 8), n=5, dtype=dtype),
                 optimizer=optimizer, rtol=0, atol=0)


@pytest.mark.bit_exact
@pytest.mark.adversarial
@pytest.mark.parametrize('dtype', [F32, F64])
def test_momentum_sgd_with_transposed_parameter_layouts(dtype):
    net = _Net(lambda m, x: F.relu(F.matmul(x, m.W)))
    with net.init_scope():
        net.W = chainer.Parameter(numpy.asfortranarray(
            _r(numpy.random.RandomState(4), (6, 5), dtype)))
    _train_twins(net, _batches(31, (4, 6), dtype=dtype),
                 optimizer=lambda: chainer.optimizers.MomentumSGD(lr=0.1),
                 rtol=0, atol=0)
