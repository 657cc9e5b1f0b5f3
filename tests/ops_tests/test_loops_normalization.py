"""The C loops of ``chainerjit/ops/_loops_normalization.pyx`` give the
values of the NumPy code they replace (Chainer's batch and layer
normalization), bit for bit: rows scaled and shifted, layer normalization
along rows, and the per-channel statistics, affine maps and gradients of
channels-last arrays; they refuse the arrays they do not take, and the
normalization kernels using them match eager Chainer."""

import chainer
import chainer.functions as F
import chainer.links as L
from chainer.functions.normalization import batch_normalization
import numpy
import pytest

import chainerjit
from chainerjit import testing
from chainerjit.ops import _loops_normalization
from tests.ops_tests.loop_inputs import _special
from tests.ops_tests.loop_inputs import _spread
from tests.ops_tests.loop_inputs import SPECIAL


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape', [(1, 5), (256, 64), (7, 1)])
def test_scale_shift_rows_is_numpys_three_ufuncs_bit_for_bit(rng, dtype,
                                                             shape):
    x = _special(rng, shape, dtype)
    scale = rng.standard_normal((shape[0], 1)).astype(dtype)
    gamma, beta = (rng.standard_normal(shape[1]).astype(dtype)
                   for _ in range(2))
    expected = x.copy()
    expected *= scale
    expected *= gamma
    expected += beta
    _loops_normalization.scale_shift_rows(x, scale, gamma, beta)
    assert x.tobytes() == expected.tobytes()


def test_layer_normalization_in_one_pass_matches_eager(rng):
    ln = L.LayerNormalization(16)
    calls = [(rng.standard_normal((8, 16)).astype(numpy.float32),)
             for _ in range(3)]
    testing.assert_jit_matches_eager(ln, calls, lowered=[
        'LayerNormalization'])
    testing.assert_jit_grads_match_eager(ln, calls)


# --- per-channel sums of channels-last arrays --------------------------------

def _channels_last(rng, shape, dtype):
    """An (N, C, ...) view of memory laid out (N, ..., C), as Chainer's
    convolution returns its output, with values of very different sizes
    (so that another order of additions would show)."""
    memory_shape = (shape[0],) + shape[2:] + (shape[1],)
    values = rng.standard_normal(memory_shape) * numpy.exp(
        rng.standard_normal(memory_shape) * 4)
    axes = (0, len(shape) - 1) + tuple(range(1, len(shape) - 1))
    return values.astype(dtype).transpose(axes)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape', [
    (32, 6, 28, 28), (8, 16, 7, 7), (3, 2, 5), (4, 3, 1, 1), (1, 5, 2, 3),
    # float32's SIMD loop: one to four vectors of channels and none to
    # three left over; over 16 channels, the scalar loop
    (2, 4, 3, 3), (2, 7, 3, 3), (2, 12, 2, 2), (2, 15, 2, 2),
    (2, 17, 2, 2)])
def test_channel_statistics_are_numpys_bit_for_bit(rng, dtype, shape):
    x = _channels_last(rng, shape, dtype)
    y = _channels_last(rng, shape, dtype)
    axis = (0,) + tuple(range(2, x.ndim))
    mean, var, total, dot = (numpy.empty(shape[1], dtype) for _ in range(4))
    assert _loops_normalization.channel_mean_var(x, mean, var)
    assert _loops_normalization.channel_sums(x, None, total)
    assert _loops_normalization.channel_sums(x, y, dot)
    for got, expected in ((mean, x.mean(axis=axis, dtype=dtype)),
                          (var, x.var(axis=axis, dtype=dtype)),
                          (total, x.sum(axis=axis, dtype=dtype)),
                          (dot, (x * y).sum(axis=axis, dtype=dtype))):
        assert got.tobytes() == expected.tobytes()


def test_a_single_channel_is_left_to_numpy(rng):
    """One channel's positions are one contiguous run, which NumPy sums
    pairwise: the sums refuse it (the elementwise loops take it)."""
    x = _channels_last(rng, (3, 1, 5, 5), numpy.float32)
    out = numpy.zeros(1, numpy.float32)
    assert not _loops_normalization.channel_sums(x, None, out)
    assert not _loops_normalization.channel_mean_var(x, out, out.copy())
    gy = numpy.ascontiguousarray(x)
    vectors = [numpy.ones(1, numpy.float32) for _ in range(3)]
    assert not _loops_normalization.plane_grads(
        gy, x, *vectors, 0.5, numpy.empty_like(gy), numpy.empty_like(gy),
        out, out.copy())
    assert not out.any()
    affine = numpy.empty_like(x)
    assert _loops_normalization.channel_affine(x, *vectors[:2], None, None,
                                               affine)


def test_channel_sums_start_from_zero_as_numpy_does():
    x = numpy.full((2, 3, 3, 2), -0.0, numpy.float32).transpose(0, 3, 1, 2)
    out = numpy.empty(2, numpy.float32)
    assert _loops_normalization.channel_sums(x, None, out)
    assert out.tobytes() == x.sum(axis=(0, 2, 3)).tobytes()  # +0.0


def test_channel_statistics_refuse_arrays_they_do_not_take(rng):
    x = _channels_last(rng, (4, 3, 5, 5), numpy.float32)
    out = numpy.zeros(3, numpy.float32)
    read_only = out.copy()
    read_only.flags.writeable = False
    for data, into in [
            (numpy.ascontiguousarray(x), out),   # channels not innermost
            (x[:, :, ::2], out),                 # not dense
            (x.astype(numpy.float64), out),      # mixed dtypes
            (x.astype(numpy.float16), out.astype(numpy.float16)),
            (x.astype('>f4'), out),              # byte-swapped
            (x, numpy.zeros(4, numpy.float32)),  # other channels
            (x, numpy.zeros((3, 1), numpy.float32)),
            (x, read_only),
            (x.tolist(), out)]:
        before = numpy.array(into, copy=True)
        assert not _loops_normalization.channel_sums(data, None, into)
        assert not _loops_normalization.channel_mean_var(data, into,
                                                         into.copy())
        assert numpy.array_equal(into, before)
    assert not _loops_normalization.channel_sums(
        x, numpy.ascontiguousarray(x), out)   # the other factor's layout
    memory = numpy.zeros(4 * 5 * 5 * 3 + 3, numpy.float32)
    inside = memory[:300].reshape(4, 5, 5, 3).transpose(0, 3, 1, 2)
    assert not _loops_normalization.channel_sums(inside, None, memory[1:4])
    mean = numpy.zeros(3, numpy.float32)
    assert not _loops_normalization.channel_mean_var(
        x, mean, mean)  # one array


@pytest.mark.bit_exact
def test_batch_normalization_of_a_convolution_uses_the_channel_loops(
        monkeypatch, rng):
    """In training, a convolution's output (channels-last in memory) gets
    its statistics and gradient sums from the loops (counted where they
    ran); values, gradients and running averages equal eager's bit for
    bit."""
    calls = []

    def counted(name):
        loop = getattr(_loops_normalization, name)

        def call(*args):
            took = loop(*args)
            if took:
                calls.append(name)
            return took
        return call
    for name in ('channel_mean_var', 'channel_sums', 'plane_grads'):
        monkeypatch.setattr(_loops_normalization, name, counted(name))
    conv = L.Convolution2D(3, 6, 5, pad=2)
    bn = L.BatchNormalization(6)
    bn_eager = bn.copy(mode='copy')

    def block(x, W, b, norm):
        return F.relu(norm(F.convolution_2d(x, W, b, pad=2)))
    args = [(rng.standard_normal((8, 3, 12, 12)).astype(numpy.float32),
             conv.W.array, conv.b.array) for _ in range(3)]
    with chainer.using_config('train', True):
        testing.assert_jit_grads_match_eager(
            lambda x, W, b: block(x, W, b, bn_eager),
            args, rtol=0, atol=0,
            jitted=chainerjit.jit(lambda x, W, b: block(x, W, b, bn)))
    # The gradient arrives C-ordered: the planes' loop takes it.
    assert 'channel_mean_var' in calls and 'plane_grads' in calls
    assert bn.avg_mean.tobytes() == bn_eager.avg_mean.tobytes()
    assert bn.avg_var.tobytes() == bn_eager.avg_var.tobytes()


@pytest.mark.bit_exact
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_test_mode_normalization_of_a_convolution_is_one_loop(
        monkeypatch, rng, dtype):
    """Test mode with backprop on (``using_config('train', False)``
    alone): the fixed normalization of a convolution's channels-last
    output runs Chainer's four steps in one C loop, bit for bit, in
    eager's layout."""
    ran = []
    loop = _loops_normalization.channel_affine
    monkeypatch.setattr(_loops_normalization, 'channel_affine',
                        lambda *a: ran.append(loop(*a)) or ran[-1])
    W = rng.standard_normal((5, 2, 3, 3)).astype(dtype)
    bn = L.BatchNormalization(5, dtype=dtype)
    bn.avg_mean[...] = rng.standard_normal(5)
    bn.avg_var[...] = rng.uniform(0.5, 2, 5)

    def block(x, W):
        return F.relu(bn(F.convolution_2d(x, W, pad=1)))
    args = [(rng.standard_normal((4, 2, 6, 6)).astype(dtype), W)
            for _ in range(3)]
    with chainer.using_config('train', False):
        testing.assert_jit_grads_match_eager(block, args, rtol=0, atol=0)
        y = chainerjit.jit(block)(*args[0])
    assert ran and all(ran)
    assert y.array.strides == block(*args[0]).array.strides


@pytest.mark.bit_exact
@pytest.mark.parametrize('channels', [1, 4])
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_a_pooled_convolution_block_trains_as_eager_bit_for_bit(
        rng, dtype, channels):
    """LeNet's block: the pooling's gradient comes C-ordered while the
    ReLU's and the normalization's inputs keep the convolution's
    channels-last layout. The ReLU's and the normalization's gradients
    read C-ordered copies of them: eager's values in eager's layouts."""
    W = rng.standard_normal((channels, 2, 3, 3)).astype(dtype)
    b = rng.standard_normal(channels).astype(dtype)
    bn = L.BatchNormalization(channels, dtype=dtype)
    bn_eager = bn.copy(mode='copy')

    def block(x, W, b, norm):
        return F.max_pooling_2d(
            F.relu(norm(F.convolution_2d(x, W, b, pad=1))), 2)
    args = [(rng.standard_normal((6, 2, 10, 10)).astype(dtype), W, b)
            for _ in range(3)]
    with chainer.using_config('train', True):
        testing.assert_jit_grads_match_eager(
            lambda x, W, b: block(x, W, b, bn_eager),
            args, rtol=0, atol=0,
            jitted=chainerjit.jit(lambda x, W, b: block(x, W, b, bn)))
    assert bn.avg_var.tobytes() == bn_eager.avg_var.tobytes()


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape', [(4, 5, 6, 7), (32, 6, 28, 28),
                                   (2, 16, 3, 3), (3, 40, 5, 2)])
def test_channel_affine_and_input_grad_are_chainers_formulas(rng, dtype,
                                                             shape):
    """Runs of whole positions and the last, shorter one; fewer positions
    than a run; channels that fill a run alone."""
    x = _channels_last(rng, shape, dtype)
    gy = _channels_last(rng, shape, dtype)
    mean, scale, gamma, beta, ggamma, gbeta = (
        rng.standard_normal(shape[1]).astype(dtype) for _ in range(6))
    e = (None, slice(None), None, None)
    y, x_hat, gx = (numpy.empty_like(x) for _ in range(3))
    assert _loops_normalization.channel_affine(x, mean, scale, gamma, beta, y)
    assert _loops_normalization.channel_affine(x, mean, scale, None, None,
                                               x_hat)
    inv_m = numpy.dtype(dtype).type(1. / (x.size // shape[1]))
    assert _loops_normalization.channel_input_grad(gy, x_hat, ggamma, gbeta,
                                                   inv_m, gamma * scale, gx)
    expected_hat = x - mean[e]
    expected_hat *= scale[e]
    expected_y = expected_hat * gamma[e]
    expected_y += beta[e]
    expected_gx = (gamma * scale)[e] * (
        gy - (expected_hat * ggamma[e] + gbeta[e]) * inv_m)
    for got, expected in ((y, expected_y), (x_hat, expected_hat),
                          (gx, expected_gx)):
        assert got.strides == expected.strides  # channels-last, as NumPy
        assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape', [(32, 6, 28, 28), (3, 5, 7, 9),
                                   (2, 4, 1, 1), (2, 3, 64, 128)])
@pytest.mark.parametrize('layout', ['channels-last', 'C'])
def test_plane_grads_are_chainers_batch_normalization_gradient(
        rng, dtype, shape, layout):
    """Bit for bit ``GeneralBatchNormalizationImpl.backward`` for a
    C-ordered gy, with values of very different sizes, zeros of both
    signs and a channel of -0.0 gradients (planes of 1 to 8192)."""
    x = _channels_last(rng, shape, dtype)
    if layout == 'C':
        x = numpy.ascontiguousarray(x)
    gy = numpy.ascontiguousarray(_channels_last(rng, shape, dtype))
    gy[:, 0] = -0.0
    gy.reshape(-1)[:3] = [0.0, -0.0, 1e-30]
    gamma = rng.uniform(0.5, 1.5, shape[1]).astype(dtype)
    mean = x.mean(axis=(0, 2, 3))
    inv_std = numpy.reciprocal(numpy.sqrt(x.var(axis=(0, 2, 3)) + 2e-5))
    mean, inv_std = mean.astype(dtype), inv_std.astype(dtype)
    expander = (None, slice(None), None, None)
    expected = batch_normalization.GeneralBatchNormalizationImpl().backward(
        (0, 2, 3), gamma, gy, x, None, numpy, expander, mean, inv_std, 2e-5,
        None, None)
    x_hat, gx = numpy.empty_like(gy), numpy.empty_like(gy)
    ggamma, gbeta = numpy.empty_like(gamma), numpy.empty_like(gamma)
    inv_m = gamma.dtype.type(1. / (x.size // gamma.size))
    assert _loops_normalization.plane_grads(gy, x, mean, inv_std,
                                            gamma * inv_std, inv_m, x_hat, gx,
                                            ggamma, gbeta)
    assert gx.flags.c_contiguous and expected[0].flags.c_contiguous
    for got, want in zip((gx, ggamma, gbeta),
                         (expected[0], expected[2], expected[3])):
        assert got.tobytes() == want.tobytes()


def test_plane_grads_refuse_arrays_they_do_not_take(rng):
    shape = (2, 3, 4, 5)
    x = _channels_last(rng, shape, numpy.float32)
    gy = numpy.ascontiguousarray(x)
    vector = numpy.ones(3, numpy.float32)
    outs = [numpy.zeros(shape, numpy.float32) for _ in range(2)] + [
        numpy.zeros(3, numpy.float32) for _ in range(2)]

    def take(gy=gy, x=x, vectors=(vector,) * 3, outs=outs):
        return _loops_normalization.plane_grads(gy, x, *vectors[:2],
                                                vectors[2], 0.5, *outs)
    assert not take(gy=numpy.asfortranarray(gy))         # gy strided
    assert not take(x=x.astype(numpy.float64))          # mixed dtypes
    assert not take(x=x[:, :, ::-1])                     # negative steps
    assert not take(x=x[..., :4])                        # other shape
    assert not take(vectors=(vector, vector, numpy.ones(4, numpy.float32)))
    assert not take(outs=[outs[0], outs[0]] + outs[2:])  # one buffer
    assert not take(outs=[gy] + outs[1:])                # over gy
    wide = numpy.zeros((1, 1, 91, 91), numpy.float32)    # over 8192
    assert not _loops_normalization.plane_grads(
        wide, wide, *(numpy.ones(1, numpy.float32),) * 3, 0.5,
        numpy.zeros_like(wide), numpy.zeros_like(wide),
        numpy.zeros(1, numpy.float32), numpy.zeros(1, numpy.float32))
    assert not any(o.any() for o in outs)
    assert take()


def test_channel_affine_and_input_grad_refuse_arrays_they_do_not_take(rng):
    x = _channels_last(rng, (2, 3, 4, 4), numpy.float32)
    v = numpy.ones(3, numpy.float32)
    out = numpy.empty_like(x)
    for args in [(numpy.ascontiguousarray(x), v, v, v, v, out),
                 (x, v, v, v, v, numpy.ascontiguousarray(out)),
                 (x, v.astype(numpy.float64), v, v, v, out),
                 (x, numpy.ones(4, numpy.float32), v, v, v, out),
                 (x, v, v, v, None, out),
                 (x, v, v, v, v, x)]:
        assert not _loops_normalization.channel_affine(*args)
    gx = numpy.empty_like(x)
    assert not _loops_normalization.channel_input_grad(
        numpy.ascontiguousarray(x), x, v, v, 0.5, v, gx)
    assert not _loops_normalization.channel_input_grad(x, x, v, v, 0.5, v, x)
    assert not _loops_normalization.channel_input_grad(
        x, x, v, numpy.ones(2, numpy.float32), 0.5, v, gx)


# --- layer normalization along rows ------------------------------------------

def _chainers_layer_norm(x, gamma, beta, eps):
    from chainer.functions.normalization import layer_normalization
    node = layer_normalization.LayerNormalization(eps=eps)
    with numpy.errstate(invalid='ignore', divide='ignore'):
        return node.forward((x, gamma, beta))[0]


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape', [
    (1, 1), (256, 64), (3, 7), (5, 8), (2, 9), (4, 128), (3, 129),
    (2, 300), (1, 1000), (2, 8192)])
@pytest.mark.parametrize('eps', [1e-6, 1e-5, 0.1])
def test_layer_norm_rows_is_chainers_bit_for_bit(rng, dtype, shape, eps):
    x = _spread(rng, shape, dtype)
    gamma = _spread(rng, shape[1:], dtype)
    beta = _spread(rng, shape[1:], dtype)
    for special in [None] + SPECIAL:
        if special is not None:
            x.flat[rng.randint(x.size)] = special
        expected = _chainers_layer_norm(x, gamma, beta, eps)
        with numpy.errstate(invalid='ignore', divide='ignore'):
            actual = _loops_normalization.layer_norm_rows(x, gamma, beta, eps)
            out = numpy.full_like(x, 7)
            into = _loops_normalization.layer_norm_rows(x, gamma, beta, eps,
                                                        out)
        assert into is out
        for result in (actual, out):
            assert result.dtype == expected.dtype and \
                result.shape == expected.shape
            numpy.testing.assert_array_equal(result, expected)


def test_layer_norm_rows_refuses_what_it_does_not_take(rng):
    x = _spread(rng, (4, 6), numpy.float32)
    g, b = _spread(rng, (6,), numpy.float32), _spread(rng, (6,), numpy.float32)
    for args in [(x.astype(numpy.float16), g, b), (x.T, g[:4], b[:4]),
                 (x[:, ::2], g[:3], b[:3]), (x[:0], g, b), (x[0], g, b),
                 (x[:, :, None], g, b), (x, g.astype(numpy.float64), b),
                 (x, g, b[:5]), (x, g[None], b), (x, g[::-1], b),
                 (numpy.zeros((2, 8193), numpy.float32),
                  numpy.zeros(8193, numpy.float32),
                  numpy.zeros(8193, numpy.float32)),
                 (x.astype('>f4'), g, b)]:
        assert _loops_normalization.layer_norm_rows(*args, eps=1e-5) is None
    out = numpy.zeros_like(x)
    for bad_out in [out[:3], out.astype(numpy.float64), g]:
        assert _loops_normalization.layer_norm_rows(x, g, b, 1e-5,
                                                    bad_out) is None
