"""The C loops of ``chainerjit/ops/_loops_convolution.pyx`` give the
values of the NumPy code they replace, bit for bit: a convolution's
patches are the strided view's values (in each layout, from strided
inputs too), patches added back into an image sum in col2im's order (from
either layout of columns), and the loops refuse the arrays they do not
take."""

import numpy
import pytest

from chainerjit.ops import _loops_convolution
from chainerjit.ops import connection
from tests.ops_tests.loop_inputs import _special

ROWS = _loops_convolution.ROWS
COLUMNS = _loops_convolution.COLUMNS
IMAGES_INSIDE = _loops_convolution.IMAGES_INSIDE


@pytest.mark.parametrize('geometry', [
    (5, 5, 1, 1, 2, 2, 1, 1),  # LeNet
    (3, 2, 2, 3, 0, 1, 1, 1),
    (3, 3, 1, 2, 3, 4, 2, 1),  # pads wider than the kernel, dilation
    (1, 1, 1, 1, 0, 0, 1, 1),
    (2, 3, 3, 1, 1, 0, 1, 2),
])
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_convolution_patches_are_the_strided_views_values(rng, geometry,
                                                          dtype):
    kh, kw, sy, sx, ph, pw, dy, dx = geometry
    x = _special(rng, (2, 3, 7, 6), dtype)
    view = connection._patches(x, *geometry)  # (N, C, oh, ow, kh, kw)
    for layout, axes in ((ROWS, (0, 2, 3, 1, 4, 5)),
                         (COLUMNS, (0, 1, 4, 5, 2, 3)),
                         (IMAGES_INSIDE, (1, 4, 5, 0, 2, 3))):
        expected = numpy.ascontiguousarray(view.transpose(axes))
        out = numpy.full(expected.shape, 7, dtype)
        assert _loops_convolution.convolution_patches(x, out, geometry, layout)
        assert out.tobytes() == expected.tobytes()
        # Also from other layouts: a convolution's transposed output
        # (channels last in memory), a view with steps.
        wide = numpy.zeros((2, 3, 7, 12), dtype)
        wide[:, :, :, ::2] = x
        channels_last = numpy.ascontiguousarray(x.transpose(0, 2, 3, 1))
        for strided in (channels_last.transpose(0, 3, 1, 2),
                        wide[:, :, :, ::2]):
            assert not strided.flags.c_contiguous
            out = numpy.full(expected.shape, 7, dtype)
            assert _loops_convolution.convolution_patches(strided, out,
                                                          geometry, layout)
            assert out.tobytes() == expected.tobytes()


def test_convolution_patches_refuse_arrays_they_do_not_take(rng):
    x = rng.standard_normal((2, 3, 7, 6)).astype(numpy.float32)
    geometry = (3, 3, 1, 1, 1, 1, 1, 1)
    out = numpy.zeros((2, 7, 6, 3, 3, 3), numpy.float32)
    take = _loops_convolution.convolution_patches
    assert not take(x, out, geometry, COLUMNS)  # another layout's shape
    assert not take(x, out, geometry, IMAGES_INSIDE)
    assert not take(x, out, geometry, 'diagonal')  # no such layout
    assert not take(x, out[:, :6], geometry, ROWS)  # wrong output size
    assert not take(x, out.astype(numpy.float64), geometry, ROWS)
    assert not take(x[:, :, ::-1], out, geometry, ROWS)  # negative steps
    assert not take(x.astype(numpy.float16), out.astype(numpy.float16),
                    geometry, ROWS)
    assert not take(x, out, (3, 3, 0, 1, 1, 1, 1, 1), ROWS)  # stride 0
    assert not take(x, out, (3, 3, 1, 1, -1, 1, 1, 1), ROWS)  # negative pad
    assert not out.any()
    assert take(x, out, geometry, ROWS)


@pytest.mark.parametrize('geometry', [
    (5, 5, 1, 1, 2, 2, 1, 1),  # LeNet
    (3, 2, 2, 3, 0, 1, 1, 1),
    (3, 3, 1, 2, 3, 4, 2, 1),
    (2, 3, 3, 1, 1, 0, 1, 2),
])
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_added_patches_are_col2ims_sums_bit_for_bit(rng, geometry, dtype):
    """Each pixel sums its patches in col2im_cpu's order: values of very
    different sizes make another order round differently."""
    from chainer.utils import conv
    kh, kw, sy, sx, ph, pw, dy, dx = geometry
    n, c, h, w = 2, 3, 7, 6
    out_h = conv.get_conv_outsize(h, kh, sy, ph, d=dy)
    out_w = conv.get_conv_outsize(w, kw, sx, pw, d=dx)
    patches = (rng.standard_normal((c, kh, kw, n, out_h, out_w)) *
               10.0 ** rng.randint(-6, 6, (c, kh, kw, n, out_h, out_w))
               ).astype(dtype)
    expected = conv.col2im_cpu(patches.transpose(3, 0, 1, 2, 4, 5), sy, sx,
                               ph, pw, h, w, dy, dx)
    expected = numpy.ascontiguousarray(expected).tobytes()
    add = _loops_convolution.add_convolution_patches
    img = numpy.zeros((n, c, h, w), dtype)
    assert add(patches, img, geometry)  # col2im's layout by default
    assert img.tobytes() == expected
    by_image = numpy.ascontiguousarray(patches.transpose(3, 0, 1, 2, 4, 5))
    img = numpy.zeros((n, c, h, w), dtype)
    assert add(by_image, img, geometry, COLUMNS)
    assert img.tobytes() == expected
    assert not add(patches[:, :, :, :1], img, geometry)  # another batch size
    assert not add(patches, img, geometry, COLUMNS)  # another layout's shape
    assert not add(by_image, img, geometry, ROWS)  # not a layout it adds


# --- the direct convolution ------------------------------------------------

direct_only = pytest.mark.skipif(
    not _loops_convolution.direct_convolution_available(),
    reason='the direct convolution needs AVX-512 and FMA')


def _direct(x, W, b, ph, pw):
    n, _, h, w = x.shape
    y = numpy.full((n, h + 2 * ph - W.shape[2] + 1,
                    w + 2 * pw - W.shape[3] + 1, len(W)), 7, numpy.float32)
    assert _loops_convolution.direct_convolution(x, W, b, y, ph, pw)
    return y


@direct_only
@pytest.mark.parametrize('x_shape, w_shape, pad', [
    ((3, 1, 28, 28), (6, 1, 5, 5), 2),  # LeNet's layers
    ((3, 6, 14, 14), (16, 6, 5, 5), 2),
    ((2, 3, 9, 40), (20, 3, 3, 3), 1),  # three column blocks, 20 outputs
    ((2, 2, 5, 4), (3, 2, 3, 2), 0),
    ((1, 4, 3, 3), (9, 4, 1, 1), 3),  # padding wider than the kernel
])
@pytest.mark.parametrize('layout', ['C', 'channels last', 'strided'])
def test_direct_convolution_is_the_patches_product(rng, x_shape, w_shape,
                                                   pad, layout):
    """Within rounding of a float64 convolution, its bias added after;
    and, where the probe says this machine's BLAS sums as it does, the
    bits of the patches' product (Chainer's)."""
    x = rng.standard_normal(x_shape).astype(numpy.float32)
    if layout == 'channels last':
        x = numpy.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(
            0, 3, 1, 2)
    elif layout == 'strided':
        wide = numpy.zeros(x_shape[:3] + (2 * x_shape[3],), numpy.float32)
        wide[..., ::2] = x
        x = wide[..., ::2]
    W = rng.standard_normal(w_shape).astype(numpy.float32)
    b = rng.standard_normal(w_shape[0]).astype(numpy.float32)
    kh, kw = w_shape[2:]
    geometry = (kh, kw, 1, 1, pad, pad)
    rows = connection.patch_matrix(x, *geometry)
    exact = rows.astype(numpy.float64).dot(
        W.reshape(len(W), -1).T.astype(numpy.float64))
    y = _direct(x, W, None, pad, pad).reshape(exact.shape)
    numpy.testing.assert_allclose(y, exact, rtol=1e-5, atol=1e-5)
    with_bias = _direct(x, W, b, pad, pad).reshape(exact.shape)
    assert with_bias.tobytes() == (y + b).tobytes()
    if connection._probe_direct_forward(x_shape, w_shape, pad, pad,
                                        numpy.float32):
        product = rows.dot(W.reshape(len(W), -1).T)
        assert y.tobytes() == product.tobytes()


@direct_only
def test_direct_convolution_refuses_arrays_it_does_not_take(rng):
    x = rng.standard_normal((2, 3, 6, 6)).astype(numpy.float32)
    W = rng.standard_normal((4, 3, 3, 3)).astype(numpy.float32)
    y = numpy.zeros((2, 6, 6, 4), numpy.float32)
    take = _loops_convolution.direct_convolution
    assert take(x, W, None, y, 1, 1)
    assert not take(x.astype(numpy.float64), W, None, y, 1, 1)
    assert not take(x, W, None, y, 0, 0)  # y of another shape
    assert not take(x, W[:, :2], None, y, 1, 1)  # other channels
    assert not take(x, W, numpy.zeros(3, numpy.float32), y, 1, 1)
    assert not take(x, numpy.asfortranarray(W), None, y, 1, 1)
    assert not take(x, W, None, y.transpose(0, 2, 1, 3), 1, 1)
    shared = numpy.zeros(2 * 4 * 6 * 6, numpy.float32)
    assert not take(shared.reshape(2, 4, 6, 6)[:, :3], W, None,
                    shared.reshape(2, 6, 6, 4), 1, 1)  # y over x


@direct_only
@pytest.mark.parametrize('x_shape, w_shape, pad', [
    ((3, 1, 28, 28), (6, 1, 5, 5), 2),  # LeNet's layers
    ((3, 6, 14, 14), (16, 6, 5, 5), 2),
    ((2, 9, 5, 40), (7, 9, 3, 3), 1),  # two channel blocks, three columns
    ((2, 3, 7, 6), (4, 3, 3, 2), 0),
    ((1, 4, 3, 3), (5, 4, 1, 1), 3),  # padding wider than the kernel
])
def test_direct_grad_x_is_chainers_product_and_col2im(rng, x_shape, w_shape,
                                                      pad):
    """Within rounding of float64, and where the probe says this machine's
    BLAS sums as it does, the bits of Chainer's steps (the product of W^T
    by gy, then col2im): an infinite weight's products too, which
    col2im drops where a position reads no pixel."""
    n, c, h, w = x_shape
    kh, kw = w_shape[2:]
    gy_shape = (n, w_shape[0], h + 2 * pad - kh + 1, w + 2 * pad - kw + 1)
    args = ((1, 1, pad, pad, h, w), dict(dy=1, dx=1))
    for with_inf in (False, True):
        gy = rng.standard_normal(gy_shape).astype(numpy.float32)
        W = rng.standard_normal(w_shape).astype(numpy.float32)
        if with_inf:
            W[0, 0, -1, -1] = numpy.inf
        gx = numpy.full(x_shape, 7, numpy.float32)
        assert _loops_convolution.direct_convolution_grad_x(gy, W, gx, pad,
                                                            pad)
        expected = connection._conv_transpose_by_patches(gy, W, 1, *args)
        if not with_inf:
            exact = connection._conv_transpose_by_patches(
                gy.astype(numpy.float64), W.astype(numpy.float64), 1, *args)
            numpy.testing.assert_allclose(gx, exact, rtol=1e-5, atol=1e-5)
        if connection._probe_direct_grad_x(gy_shape, w_shape, pad, pad, h,
                                           w, numpy.float32):
            assert numpy.array_equal(gx, expected, equal_nan=True)


@direct_only
def test_direct_grad_x_refuses_arrays_it_does_not_take(rng):
    gy = rng.standard_normal((2, 4, 6, 6)).astype(numpy.float32)
    W = rng.standard_normal((4, 3, 3, 3)).astype(numpy.float32)
    gx = numpy.zeros((2, 3, 6, 6), numpy.float32)
    take = _loops_convolution.direct_convolution_grad_x
    assert take(gy, W, gx, 1, 1)
    assert not take(gy.astype(numpy.float64), W, gx, 1, 1)
    assert not take(gy, W, gx, 0, 0)  # gx of another size
    assert not take(gy[:, :3], W, gx, 1, 1)  # other channels
    assert not take(gy.transpose(0, 1, 3, 2).copy().transpose(0, 1, 3, 2),
                    W, gx, 1, 1)  # rows not contiguous
    assert not take(gy, numpy.asfortranarray(W), gx, 1, 1)
    assert not take(gy, W, gx.transpose(0, 1, 3, 2), 1, 1)


@direct_only
@pytest.mark.parametrize('x_shape, w_shape, pad', [
    ((32, 1, 28, 28), (6, 1, 5, 5), 2),  # LeNet's layers
    ((32, 6, 14, 14), (16, 6, 5, 5), 2),
    ((50, 3, 30, 30), (4, 3, 2, 2), 1),  # the last two blocks halved
    ((2, 9, 5, 40), (20, 9, 3, 3), 1),  # two output blocks, taps left over
    ((3, 2, 4, 3), (5, 2, 3, 2), 0),
])
@pytest.mark.parametrize('layout', ['C', 'channels last'])
def test_direct_grad_w_is_chainers_product(rng, x_shape, w_shape, pad,
                                           layout):
    """Within rounding of float64 whatever the blocks; and in the blocks
    a probe finds (where it finds some), the bits of Chainer's product
    of gy by the patches (``Convolution2DGradW``)."""
    from chainer.utils import conv
    n, c, h, w = x_shape
    kh, kw = w_shape[2:]
    gy_shape = (n, w_shape[0], h + 2 * pad - kh + 1, w + 2 * pad - kw + 1)
    x = rng.standard_normal(x_shape).astype(numpy.float32)
    gy = rng.standard_normal(gy_shape).astype(numpy.float32)
    if layout == 'channels last':
        x = numpy.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(
            0, 3, 1, 2)
        gy = numpy.ascontiguousarray(gy.transpose(0, 2, 3, 1)).transpose(
            0, 3, 1, 2)

    def chainers(x, gy):
        return numpy.tensordot(gy, conv.im2col_cpu(x, kh, kw, 1, 1, pad,
                                                   pad), ((0, 2, 3),
                                                          (0, 4, 5)))
    exact = chainers(x.astype(numpy.float64), gy.astype(numpy.float64))
    for blocks in ((448, 16), (100, 8), (1 << 62, 1)):
        gW = numpy.full(w_shape, 7, numpy.float32)
        assert _loops_convolution.direct_convolution_grad_w(x, gy, gW, pad,
                                                            pad, *blocks)
        numpy.testing.assert_allclose(gW, exact, rtol=1e-4,
                                      atol=1e-5 * numpy.abs(exact).max())
    found = connection._probe_grad_w_blocks(x_shape, gy_shape, w_shape, pad,
                                            pad, numpy.float32)
    if gy.size // gy_shape[1] > 1000 and connection._probe_grad_w_blocks(
            (32, 6, 14, 14), (32, 16, 14, 14), (16, 6, 5, 5), 2, 2,
            numpy.float32):
        # BLAS's blocks found at LeNet's second layer: found for another
        # product of its blocked path too, where the last two are halves.
        assert found
        gW = numpy.empty(w_shape, numpy.float32)
        assert _loops_convolution.direct_convolution_grad_w(x, gy, gW, pad,
                                                            pad, *found)
        assert gW.tobytes() == chainers(x, gy).tobytes()


@direct_only
def test_direct_grad_w_refuses_arrays_it_does_not_take(rng):
    x = rng.standard_normal((2, 3, 6, 6)).astype(numpy.float32)
    gy = rng.standard_normal((2, 4, 6, 6)).astype(numpy.float32)
    gW = numpy.zeros((4, 3, 3, 3), numpy.float32)
    take = _loops_convolution.direct_convolution_grad_w
    assert take(x, gy, gW, 1, 1, 448, 16)
    assert not take(x.astype(numpy.float64), gy, gW, 1, 1, 448, 16)
    assert not take(x, gy, gW, 0, 0, 448, 16)  # gy of another size
    assert not take(x, gy[:, :3], gW, 1, 1, 448, 16)  # other channels
    assert not take(x, gy, gW, 1, 1, 0, 16)  # no blocks
    assert not take(x, gy, gW.transpose(0, 1, 3, 2), 1, 1, 448, 16)


def test_the_blocks_tried_each_cut_the_inner_axis_otherwise():
    """The probe of a filter gradient's blocks tries each way of cutting
    the axis once: one for an axis shorter than any block."""
    assert list(connection._distinct_blocks(100)) == [(448, 16)]
    cuts = [tuple(connection._blocks_of(6272, *blocks))
            for blocks in connection._distinct_blocks(6272)]
    assert len(cuts) == len(set(cuts)) > 5
    assert all(sum(cut) == 6272 for cut in cuts)
    # 106 blocks of 448, then the 562 left as halves rounded up to 16
    assert tuple(connection._blocks_of(48050, 448, 16)) == \
        (448,) * 106 + (288, 274)


def test_large_filter_gradients_keep_the_patches(monkeypatch):
    """The direct filter gradient copies the images and the output's
    gradient: beyond DIRECT_GRAD_W_BYTES of copies it is not tried."""
    x = numpy.zeros((4, 3, 16, 16), numpy.float32)
    gy = numpy.zeros((4, 8, 16, 16), numpy.float32)
    assert connection._grad_w_copies(x.shape, gy.shape, 1, 1) == \
        4 * (4 * 3 * 18 * 18 + 4 * 16 * 16 * 16)
    monkeypatch.setattr(connection, 'DIRECT_GRAD_W_BYTES', 1000)
    assert connection._direct_grad_w_blocks(x, gy, (8, 3, 3, 3), 1, 1) \
        is False
