"""Fusing a ReLU with the max pooling after it
(``passes.fuse.fuse_relu_max_pooling``), against eager Chainer: values
and gradients equal to eager's exactly over windows that tile the image
(windows whose values are all negative, zeros of both signs, ties and
NaNs), float64, 3-d pooling, loops, in inference and through
onnxruntime; byte for byte as the two nodes unfused. Windows that
overlap or cover all, and a ReLU read by anything else, keep their own
nodes."""

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.differential import check_grads

FUSED = 'ReLU+MaxPoolingND'

#: name: (the pooling's arguments, fused)
POOLINGS = {
    'tiles': (dict(ksize=2), True),
    'tiles, no cover_all': (dict(ksize=2, cover_all=False), True),
    'tiles of 3x2': (dict(ksize=(3, 2)), True),
    'one-wide windows': (dict(ksize=1), True),
    'overlapping, padded': (dict(ksize=3, stride=2, pad=1), False),
    'cover_all past the edge': (dict(ksize=2, stride=2), False),
}


def _pool(x, pooling):
    return F.max_pooling_2d(F.relu(x), **pooling)


def _awkward(rng, shape, dtype=numpy.float32):
    """Values with windows all negative, zeros, ties and NaNs."""
    x = rng.standard_normal(shape).astype(dtype)
    x[:, :, :2, :2] = -numpy.abs(x[:, :, :2, :2])
    x[:, 0, 2:4, :] = 0
    x[:, 1, 2:4, 2:4] = -1
    x[0, 0, -2:, -2:] = 1.5
    return x


def _calls(rng, shape, dtype=numpy.float32):
    return [(_awkward(rng, shape, dtype),) for _ in range(3)]


def _exact(fn, calls, fused=True):
    jitted = check_grads(fn, calls, rtol=0, atol=0)
    assert (FUSED in str(jitted.cache_entries()[0].graph)) == fused
    return jitted


@pytest.mark.parametrize('name', sorted(POOLINGS))
def test_training_gives_eagers_bits(name):
    pooling, fused = POOLINGS[name]
    shape = (2, 3, 7, 9) if 'past' in name else (2, 3, 12, 8)
    _exact(lambda x: _pool(x, pooling), _calls(
        numpy.random.default_rng(0), shape), fused)


def test_float64():
    _exact(lambda x: _pool(x, dict(ksize=2)), _calls(
        numpy.random.default_rng(1), (2, 2, 6, 6), numpy.float64))


def test_after_a_convolution_in_its_layout():
    """A convolution's output is a transposed view (Chainer's layout):
    the pooling reads it as it is."""
    W = numpy.random.default_rng(2).standard_normal((4, 3, 3, 3)).astype(
        numpy.float32)

    def conv_relu_pool(x):
        return F.max_pooling_2d(F.relu(F.convolution_2d(x, W, pad=1)), 2)
    _exact(conv_relu_pool, _calls(numpy.random.default_rng(3),
                                  (3, 3, 8, 8)))


def test_nans():
    rng = numpy.random.default_rng(4)
    calls = _calls(rng, (2, 3, 8, 8))
    for (x,) in calls:
        x[0, 0, 0, 0] = numpy.nan
        x[1, 2, 5, 4] = numpy.nan
    _exact(lambda x: _pool(x, dict(ksize=2)), calls)


def _signed_zeros(rng, shape):
    """Windows of negative values and zeros of both signs, in every
    order, and a few positive ones."""
    x = rng.choice(numpy.array([-1.5, -0.0, 0.0, -2.0, 0.5], numpy.float32),
                   size=shape, p=[0.3, 0.25, 0.25, 0.15, 0.05])
    return x.astype(numpy.float32)


def _bytes_of_run(fn, x, gy):
    v = chainer.Variable(x.copy())
    y = fn(v)
    y.grad = gy.copy()
    y.backward()
    return y.array.tobytes(), v.grad.tobytes()


@pytest.mark.parametrize('shape', [(2, 3, 8, 8), (2, 3, 8, 10),
                                   (1, 2, 4, 14)])
def test_signed_zeros_bytes_as_the_two_nodes(shape, monkeypatch):
    """Byte for byte the ReLU and the pooling as two nodes give: zeros of
    both signs in every window position, and negative gradients (their
    products by 0 are -0), in the SIMD loop and the tail of each row."""
    from chainerjit.passes import fuse

    def fn(x):
        return _pool(x, dict(ksize=2))
    rng = numpy.random.default_rng(10)
    calls = [(_signed_zeros(rng, shape), -rng.uniform(0.5, 1, (
        shape[0], shape[1], shape[2] // 2, shape[3] // 2)).astype(
            numpy.float32)) for _ in range(4)]
    fused = chainerjit.jit(fn)
    got = [_bytes_of_run(fused, x, gy) for x, gy in calls]
    assert FUSED in str(fused.cache_entries()[0].graph)
    monkeypatch.setattr(fuse, '_max_pooling_after', lambda node, users: ())
    apart = chainerjit.jit(fn)
    expected = [_bytes_of_run(apart, x, gy) for x, gy in calls]
    assert FUSED not in str(apart.cache_entries()[0].graph)
    assert got == expected


@pytest.mark.parametrize('channels', [4, 5, 6, 16])
def test_channels_last_loop_bytes_as_numpy(channels):
    """The C loop over a channels-last image (four channels at a time,
    the run's last four again) gives the bytes of NumPy's maxima of
    views then its ReLU: 2x2 windows with NaNs, zeros of both signs and
    ties. Where it does not apply (3 channels, C order) it says so."""
    from chainerjit.ops import _loops_pooling
    from chainerjit.ops.pooling import _max_pool_tiles
    rng = numpy.random.default_rng(11)
    for _ in range(3):
        x = _signed_zeros(rng, (3, 6, 10, channels))
        x[0, 1, 1, -1] = x[2, 4, 3, 0] = numpy.nan
        x = x.transpose(0, 3, 1, 2)
        y = numpy.empty_like(x[:, :, ::2, ::2])
        assert _loops_pooling.relu_max_pool_tiles(x, y, 2, 2)
        expected = numpy.maximum(_max_pool_tiles((2, 2))(x), 0)
        assert y.strides == expected.strides
        assert y.tobytes() == expected.tobytes()
    c_ordered = numpy.ascontiguousarray(x)
    assert not _loops_pooling.relu_max_pool_tiles(
        c_ordered, numpy.empty_like(c_ordered[:, :, ::2, ::2]), 2, 2)
    three = x[:, :3]
    assert not _loops_pooling.relu_max_pool_tiles(
        three, numpy.empty_like(three[:, :, ::2, ::2]), 2, 2)


def test_after_a_convolution_of_six_channels():
    """The loop in a program: a convolution's channels-last output of six
    channels (LeNet's first layer)."""
    W = numpy.random.default_rng(12).standard_normal((6, 2, 3, 3)).astype(
        numpy.float32)

    def conv_relu_pool(x):
        return F.max_pooling_2d(F.relu(F.convolution_2d(x, W, pad=1)), 2)
    _exact(conv_relu_pool, _calls(numpy.random.default_rng(13),
                                  (3, 2, 8, 10)))


def test_3d_pooling():
    def pool3d(x):
        return F.max_pooling_nd(F.relu(x), 2)
    _exact(pool3d, [(numpy.random.default_rng(k).standard_normal(
        (2, 2, 4, 4, 6)).astype(numpy.float32),) for k in range(3)])


def test_in_a_loop():
    def per_step(xs):
        return [_pool(x, dict(ksize=2)) for x in xs]
    rng = numpy.random.default_rng(5)
    check_grads(lambda xs: F.stack(per_step(F.separate(xs))),
                [(rng.standard_normal((t, 2, 3, 4, 4)).astype(
                    numpy.float32),) for t in (3, 3, 5)], rtol=0, atol=0)


def test_relu_read_elsewhere_is_kept():
    def both(x):
        h = F.relu(x)
        return F.max_pooling_2d(h, 2), F.sum(h)
    jitted = check_grads(both, _calls(numpy.random.default_rng(6),
                                      (2, 3, 8, 8)), rtol=0, atol=0)
    text = str(jitted.cache_entries()[0].graph)
    assert FUSED not in text and 'ReLU(' in text, text


def test_inference():
    with chainer.using_config('train', False):
        jitted = testing.assert_jit_matches_eager(
            lambda x: _pool(x, dict(ksize=3)),
            _calls(numpy.random.default_rng(7), (2, 3, 9, 9)),
            rtol=0, atol=0)
    assert FUSED in str(jitted.cache_entries()[0].graph)


onnxruntime = pytest.importorskip('onnxruntime')


@pytest.mark.parametrize('name', ['tiles', 'tiles of 3x2'])
def test_onnxruntime_forward_and_gradient(name):
    pooling, _ = POOLINGS[name]

    def fn(x):
        return _pool(x, pooling)
    rng = numpy.random.default_rng(8)
    calls = _calls(rng, (2, 3, 12, 8))
    eager, jitted = fn, chainerjit.jit(fn, backend='onnxruntime')
    for (x,) in calls:
        outs = []
        for f in (eager, jitted):
            v = chainer.Variable(x.copy())
            y = f(v)
            y.grad = numpy.arange(y.size, dtype=y.dtype).reshape(y.shape)
            y.backward()
            outs.append((y.array, v.grad))
        for a, e in zip(outs[1], outs[0]):
            numpy.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)
    assert FUSED in str(jitted.cache_entries()[0].graph)


def test_export():
    rng = numpy.random.default_rng(9)
    x = _awkward(rng, (2, 3, 8, 8))
    model = chainerjit.export_onnx(lambda x: _pool(x, dict(ksize=2)), (x,))
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=['CPUExecutionProvider'])
    x2 = _awkward(rng, (2, 3, 8, 8))
    out, = session.run(None, {session.get_inputs()[0].name: x2})
    numpy.testing.assert_array_equal(out, _pool(x2, dict(ksize=2)).array)
