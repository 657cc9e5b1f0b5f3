"""The C loops (``chainerjit/ops/_loops_*.pyx``) give the
values of the NumPy ufuncs they replace, and the kernels using them give
the values of the unfused kernels."""

import chainer
import chainer.functions as F
import chainer.links as L
from chainer.functions.normalization import batch_normalization
import numpy
import pytest

import chainerjit
from chainerjit import testing
from chainerjit.ops import _loops_convolution
from chainerjit.ops import _loops_elementwise
from chainerjit.ops import _loops_normalization
from chainerjit.ops import _loops_pooling
from chainerjit.ops import _loops_rnn
from chainerjit.ops import _loops_softmax
from chainerjit.ops import connection
from chainerjit.ops import linear as linear_ops
from tests.ops_tests.test_normalization_training import _batches
from tests.ops_tests.test_normalization_training import _calls
from tests.ops_tests.test_normalization_training import _Net
from tests.ops_tests.test_normalization_training import _r
from tests.ops_tests.test_normalization_training import _train_twins
from tests.ops_tests.test_normalization_training import F32
from tests.ops_tests.test_normalization_training import F64


def _special(rng, shape, dtype):
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    special = [numpy.nan, numpy.inf, -numpy.inf, -0.0, 0.0, 1e-30]
    flat[:len(special)] = special[:flat.size]
    return x


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


def test_layer_normalization_in_one_pass_matches_eager(rng):
    ln = L.LayerNormalization(16)
    calls = [(rng.standard_normal((8, 16)).astype(numpy.float32),)
             for _ in range(3)]
    testing.assert_jit_matches_eager(ln, calls, lowered=[
        'LayerNormalization'])
    testing.assert_jit_grads_match_eager(ln, calls)


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


def test_max_pool_tiles_grad_refuses_arrays_it_does_not_take(rng):
    x = rng.standard_normal((2, 3, 4, 6)).astype(numpy.float32)
    gy = rng.standard_normal((2, 3, 2, 3)).astype(numpy.float32)
    gx = numpy.zeros_like(x)
    take = _loops_pooling.max_pool_tiles_grad
    assert not take(x, gy, gx, 2, 3)  # windows that do not tile
    assert not take(x, gy, numpy.asfortranarray(gx), 2, 2)  # gx strided
    assert not take(x, numpy.asfortranarray(gy), gx, 2, 2)  # gy strided
    assert not take(x.astype(numpy.float64), gy, gx, 2, 2)  # mixed dtypes
    assert not take(x, gy, x, 2, 2)  # written over its input
    read_only = numpy.zeros_like(x)
    read_only.flags.writeable = False
    assert not take(x, gy, read_only, 2, 2)
    assert not gx.any()
    assert take(x, gy, gx, 2, 2)
    windows = x.reshape(2, 3, 2, 2, 3, 2).transpose(0, 1, 2, 4, 3, 5)
    first = windows.reshape(2, 3, 2, 3, 4).argmax(axis=-1)
    expected = numpy.zeros((2, 3, 2, 3, 4), numpy.float32)
    numpy.put_along_axis(expected, first[..., None], gy[..., None], -1)
    expected = expected.reshape(2, 3, 2, 3, 2, 2).transpose(
        0, 1, 2, 4, 3, 5).reshape(x.shape)
    assert gx.tobytes() == expected.tobytes()


@pytest.mark.parametrize('axes', [(0, 2, 3, 1), (3, 2, 1, 0)])
def test_max_pool_tiles_grad_reads_an_input_of_any_strides(rng, axes):
    """A convolution's output is a transposed view: the loop reads it by
    its strides (reversed ones too) and gives the C-ordered input's
    result."""
    x = numpy.round(rng.standard_normal((2, 3, 4, 6)) * 2).astype(
        numpy.float32)  # ties
    x.reshape(-1)[5] = numpy.nan
    gy = rng.standard_normal((2, 3, 2, 3)).astype(numpy.float32)
    expected = numpy.empty_like(x)
    assert _loops_pooling.max_pool_tiles_grad(x, gy, expected, 2, 2)
    inverse = numpy.argsort(axes)
    for strided in (numpy.ascontiguousarray(x.transpose(axes)).transpose(
            inverse), x[:, :, ::-1, ::-1].copy()[:, :, ::-1, ::-1]):
        assert not strided.flags.c_contiguous
        gx = numpy.empty_like(expected)
        assert _loops_pooling.max_pool_tiles_grad(strided, gy, gx, 2, 2)
        assert gx.tobytes() == expected.tobytes()


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
    for rows, axes in ((True, (0, 2, 3, 1, 4, 5)),
                       (False, (0, 1, 4, 5, 2, 3))):
        expected = numpy.ascontiguousarray(view.transpose(axes))
        out = numpy.full(expected.shape, 7, dtype)
        assert _loops_convolution.convolution_patches(x, out, geometry, rows)
        assert out.tobytes() == expected.tobytes()
    # Rows also from other layouts: a convolution's transposed output
    # (channels last in memory), a view with steps.
    expected = numpy.ascontiguousarray(view.transpose(0, 2, 3, 1, 4, 5))
    wide = numpy.zeros((2, 3, 7, 12), dtype)
    wide[:, :, :, ::2] = x
    channels_last = numpy.ascontiguousarray(x.transpose(0, 2, 3, 1))
    for strided in (channels_last.transpose(0, 3, 1, 2), wide[:, :, :, ::2]):
        assert not strided.flags.c_contiguous
        out = numpy.full(expected.shape, 7, dtype)
        assert _loops_convolution.convolution_patches(strided, out, geometry,
                                                      True)
        assert out.tobytes() == expected.tobytes()


def test_convolution_patches_refuse_arrays_they_do_not_take(rng):
    x = rng.standard_normal((2, 3, 7, 6)).astype(numpy.float32)
    geometry = (3, 3, 1, 1, 1, 1, 1, 1)
    out = numpy.zeros((2, 7, 6, 3, 3, 3), numpy.float32)
    take = _loops_convolution.convolution_patches
    assert not take(x, out, geometry, False)  # the other layout's shape
    assert not take(x, out[:, :6], geometry, True)  # wrong output size
    assert not take(x, out.astype(numpy.float64), geometry, True)
    assert not take(x[:, :, ::-1], out, geometry, True)  # negative steps
    assert not take(numpy.asfortranarray(x),
                    numpy.zeros((2, 3, 3, 3, 7, 6), numpy.float32), geometry,
                    False)  # im2col's layout wants a C-ordered image
    assert not take(x.astype(numpy.float16), out.astype(numpy.float16),
                    geometry, True)
    assert not take(x, out, (3, 3, 0, 1, 1, 1, 1, 1), True)  # stride 0
    assert not take(x, out, (3, 3, 1, 1, -1, 1, 1, 1), True)  # negative pad
    assert not out.any()
    assert take(x, out, geometry, True)


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
    img = numpy.zeros((n, c, h, w), dtype)
    assert _loops_convolution.add_convolution_patches(patches, img, geometry)
    assert img.tobytes() == numpy.ascontiguousarray(expected).tobytes()
    assert not _loops_convolution.add_convolution_patches(
        patches[:, :, :, :1], img, geometry)  # another batch size


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape', [(3, 1), (2, 3, 7), (5, 32), (4,)])
def test_row_max_is_numpys_max_over_the_last_axis(rng, dtype, shape):
    x = numpy.round(rng.standard_normal(shape) * 2).astype(dtype)  # ties
    flat = x.reshape(-1, shape[-1])
    flat[0, 0] = -0.0  # equal zeros: the sign may differ from NumPy's
    if shape[-1] > 2:
        flat[0, 1] = 0.0
        flat[0, 2:] = -1
        flat[-1, 1] = numpy.nan  # a row with NaN, and infinities
        flat[-1, 0] = numpy.inf
        flat[len(flat) // 2, -1] = -numpy.inf
    expected = x.max(axis=-1, keepdims=True)
    out = numpy.full(shape[:-1] + (1,), 7, dtype)
    assert _loops_softmax.row_max(x, out)
    numpy.testing.assert_array_equal(out, expected)  # NaN where NumPy's


def test_row_max_refuses_arrays_it_does_not_take(rng):
    x = rng.standard_normal((4, 6)).astype(numpy.float32)
    out = numpy.zeros((4, 1), numpy.float32)
    assert not _loops_softmax.row_max(x.T, numpy.zeros((6, 1), numpy.float32))
    assert not _loops_softmax.row_max(x, out.astype(numpy.float64))
    assert not _loops_softmax.row_max(x, numpy.zeros((4,), numpy.float32))
    assert not _loops_softmax.row_max(x[:, :0], out)  # empty rows
    assert not _loops_softmax.row_max(x.astype(numpy.float16),
                                      out.astype(numpy.float16))
    assert not out.any()


def test_softmax_over_the_last_axis_runs_the_row_loop(monkeypatch, rng):
    calls = []
    loop = _loops_softmax.softmax_rows
    monkeypatch.setattr(_loops_softmax, 'softmax_rows',
                        lambda *a: calls.append(loop(*a)) or calls[-1])
    inputs = [(rng.standard_normal((4, 5, 6)).astype(numpy.float32),)
              for _ in range(3)]
    testing.assert_jit_matches_eager(lambda x: F.softmax(x, axis=2), inputs,
                                     rtol=0, atol=0)
    assert calls and all(c is not None for c in calls)


def test_softmax_with_rows_too_long_for_the_row_loop_finds_maxima_in_c(
        monkeypatch, rng):
    calls = []
    loop = _loops_softmax.row_max
    monkeypatch.setattr(_loops_softmax, 'row_max',
                        lambda *a: calls.append(loop(*a)) or calls[-1])
    inputs = [(rng.standard_normal((2, 8200)).astype(numpy.float32),)
              for _ in range(3)]
    testing.assert_jit_matches_eager(lambda x: F.softmax(x, axis=1), inputs,
                                     rtol=0, atol=0)
    assert calls and all(calls)


# --- LSTM gates ------------------------------------------------------------

def _gate_inputs(rng, dtype):
    """(B, 4H) gates in the layouts an LSTM step may get them: C-ordered,
    F-ordered (a transposed product), every other column of a wider array
    and reversed rows."""
    x = (rng.standard_normal((5, 24)) * 3).astype(dtype)
    wide = (rng.standard_normal((5, 48)) * 3).astype(dtype)
    return {'C': x, 'F': numpy.asfortranarray(x), 'strided': wide[:, ::2],
            'reversed rows': x[::-1]}


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('layout', ['C', 'F', 'strided', 'reversed rows'])
@pytest.mark.parametrize('scale', [1.0, 0.5])
def test_gate_major_is_numpys_copy_of_the_gates(rng, dtype, layout, scale):
    x = _gate_inputs(rng, dtype)[layout]
    x[0, :4] = [-0.0, numpy.nan, numpy.inf, 1e-45 if dtype == numpy.float32
                else 5e-324]
    out = numpy.full((4, 5, 6), 7, dtype)
    assert _loops_rnn.gate_major(x, out, scale)
    expected = numpy.moveaxis(x.reshape(5, 6, 4), 2, 0).copy()
    expected[1:] *= scale
    assert out.tobytes() == expected.tobytes()


def test_gate_major_refuses_arrays_it_does_not_take(rng):
    x = rng.standard_normal((5, 24)).astype(numpy.float32)
    out = numpy.zeros((4, 5, 6), numpy.float32)
    read_only = out.copy()
    read_only.flags.writeable = False
    for gates, into in [
            (x.astype(numpy.float64), out),             # mixed dtypes
            (x.astype(numpy.float16), out.astype(numpy.float16)),
            (x, numpy.zeros((4, 5, 5), numpy.float32)),  # other units
            (x[:4], out),                               # other rows
            (x.reshape(5, 6, 4), out),                  # not 2-D
            (x, numpy.zeros((4, 6, 5), numpy.float32).transpose(0, 2, 1)),
            (x, read_only),
            (x.astype('>f4'), out),                     # byte-swapped
            (x.tolist(), out)]:
        before = numpy.array(into, copy=True)
        assert not _loops_rnn.gate_major(gates, into, 0.5)
        assert numpy.array_equal(into, before)
    overlapping = numpy.zeros(120, numpy.float32)
    assert not _loops_rnn.gate_major(overlapping.reshape(5, 24),
                                     overlapping.reshape(4, 5, 6), 0.5)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('layout', ['C', 'F', 'strided', 'reversed rows'])
@pytest.mark.parametrize('addend_layout', ['C', 'F', 'strided'])
def test_gate_major_with_an_addend_is_numpys_sum_and_copy(
        rng, dtype, layout, addend_layout):
    x = _gate_inputs(rng, dtype)[layout]
    addend = _gate_inputs(rng, dtype)[addend_layout]
    x[0, :4] = [-0.0, numpy.nan, numpy.inf, 1e-45 if dtype == numpy.float32
                else 5e-324]
    addend[0, :4] = [-0.0, 1, -numpy.inf, 1e-45 if dtype == numpy.float32
                     else 5e-324]
    out = numpy.full((4, 5, 6), 7, dtype)
    assert _loops_rnn.gate_major(x, out, 0.5, addend)
    with numpy.errstate(invalid='ignore'):  # inf + -inf
        expected = numpy.moveaxis((x + addend).reshape(5, 6, 4), 2, 0).copy()
    expected[1:] *= 0.5
    assert out.tobytes() == expected.tobytes()


def test_gate_major_refuses_addends_it_does_not_take(rng):
    x = rng.standard_normal((5, 24)).astype(numpy.float32)
    out = numpy.zeros((4, 5, 6), numpy.float32)
    for addend in (x.astype(numpy.float64), x[:4], x[:, :20],
                   x.reshape(5, 6, 4), x.astype('>f4'), x.tolist(),
                   out.reshape(5, 24)):  # the output itself
        before = out.copy()
        assert not _loops_rnn.gate_major(x, out, 0.5, addend)
        assert numpy.array_equal(out, before)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('state_rows', [5, 8])
def test_lstm_cell_is_chainers_formulas_bit_for_bit(rng, dtype, state_rows):
    gates = numpy.tanh(rng.standard_normal((4, 5, 6)) * 3).astype(dtype)
    gates.flat[:3] = [-0.0, numpy.nan, 1e-45]
    c_prev = (rng.standard_normal((state_rows, 6)) * 3).astype(dtype)
    c_prev[0, 0] = -0.0
    half = dtype(0.5)
    s = gates[1:] * half + half
    expected = gates[0] * s[0] + s[1] * c_prev[:5]
    c = numpy.full((state_rows, 6), 7, dtype)
    assert _loops_rnn.lstm_cell(gates, c_prev, c)
    assert gates[1:].tobytes() == s.tobytes()
    assert c[:5].tobytes() == expected.tobytes()
    assert (c[5:] == 7).all()  # the rows past the batch are the caller's


def test_lstm_cell_refuses_arrays_it_does_not_take(rng):
    gates = rng.standard_normal((4, 5, 6)).astype(numpy.float32)
    c_prev = rng.standard_normal((5, 6)).astype(numpy.float32)
    c = numpy.zeros((5, 6), numpy.float32)
    read_only = c.copy()
    read_only.flags.writeable = False
    for args in [
            (gates.astype(numpy.float64), c_prev, c),
            (gates[:3], c_prev, c),
            (gates, c_prev[:4], c),                      # too few rows
            (gates, c_prev[:, :5], c),
            (gates, numpy.asfortranarray(c_prev), c),
            (gates, c_prev, read_only),
            (gates, c_prev, c_prev),                     # c is c_prev
            (gates, c_prev, gates[0]),                   # c in the gates
            (gates.tolist(), c_prev, c)]:
        before = [numpy.array(a, copy=True) for a in args]
        assert not _loops_rnn.lstm_cell(*args)
        for a, b in zip(args, before):
            assert numpy.array_equal(numpy.asarray(a), b, equal_nan=True)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('size', [1, 7, 8, 17, 1000, 100003])
def test_tanh_is_numpys_own_loop_bit_for_bit(rng, dtype, size):
    x = (rng.standard_normal(size) *
         numpy.exp(rng.uniform(-20, 6, size))).astype(dtype)
    x[:6] = ([numpy.nan, numpy.inf, -numpy.inf, -0.0, 1e30, 1e-45]
             if size >= 6 else x[:6])
    out = numpy.empty_like(x)
    assert _loops_rnn.tanh(x, out)
    assert out.tobytes() == numpy.tanh(x).tobytes()
    assert _loops_rnn.tanh(x, x)  # in place
    assert x.tobytes() == out.tobytes()


def test_tanh_refuses_arrays_it_does_not_take(rng):
    x = rng.standard_normal(10).astype(numpy.float32)
    read_only = x.copy()
    read_only.flags.writeable = False
    for args in [(x, x.astype(numpy.float64)), (x, read_only),
                 (x[::2], numpy.zeros(5, numpy.float32)), (x, x[:9]),
                 (x[1:], x[:9]),                       # partly overlapping
                 (x.astype(numpy.float16), x.astype(numpy.float16)),
                 (x.tolist(), x)]:
        before = [numpy.array(a, copy=True) for a in args]
        assert not _loops_rnn.tanh(*args)
        for a, b in zip(args, before):
            assert numpy.array_equal(numpy.asarray(a), b)


def _chainers_lstm_step(c_prev, x):
    from chainer.functions.rnn import lstm
    return lstm.LSTM().forward((c_prev, x))


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('batch, state_rows, units', [
    (16, 16, 128), (3, 5, 7), (1, 1, 1), (4, 4, 33)])
@pytest.mark.parametrize('addend', [None, 'C', 'transposed'])
def test_lstm_step_is_chainers_step_bit_for_bit(rng, dtype, batch,
                                                state_rows, units, addend):
    x = _spread(rng, (batch, 4 * units), dtype)
    c_prev = _spread(rng, (state_rows, units), dtype)
    y = None
    if addend == 'C':
        y = _spread(rng, (batch, 4 * units), dtype)
    elif addend == 'transposed':  # as the weight-first product returns it
        y = _spread(rng, (4 * units, batch), dtype).T
    for special in [None] + SPECIAL:
        if special is not None:
            x.flat[rng.randint(x.size)] = special
            c_prev.flat[rng.randint(c_prev.size)] = special
        total = x if y is None else x + y
        c_expected, h_expected = _chainers_lstm_step(c_prev, total)
        gates = numpy.empty((4, batch, units), dtype)
        c = numpy.empty_like(c_prev)
        h = numpy.empty((batch, units), dtype)
        with numpy.errstate(invalid='ignore', over='ignore'):
            assert _loops_rnn.lstm_step(x, y, c_prev, gates, c, h)
        assert c.tobytes() == c_expected.tobytes()
        assert h.tobytes() == h_expected.tobytes()
        a, i, f, o = (total.reshape(batch, units, 4)[:, :, k]
                      for k in range(4))
        with numpy.errstate(invalid='ignore', over='ignore'):
            assert gates[0].tobytes() == numpy.tanh(a).tobytes()
            assert gates[3].tobytes() == \
                (numpy.tanh(o * dtype(0.5)) * dtype(0.5) +
                 dtype(0.5)).tobytes()


def test_lstm_step_refuses_arrays_it_does_not_take(rng):
    def arrays():
        return (rng.standard_normal((5, 24)).astype(numpy.float32), None,
                rng.standard_normal((5, 6)).astype(numpy.float32),
                numpy.zeros((4, 5, 6), numpy.float32),
                numpy.zeros((5, 6), numpy.float32),
                numpy.zeros((5, 6), numpy.float32))
    x, _, c_prev, gates, c, h = arrays()
    read_only = h.copy()
    read_only.flags.writeable = False
    for args in [
            (x.astype(numpy.float64), None, c_prev, gates, c, h),
            (x, x.astype(numpy.float64), c_prev, gates, c, h),
            (x[:, :20], None, c_prev, gates, c, h),
            (x, None, c_prev, gates, c[:4], h),          # c too short
            (x, None, c_prev, gates, c, h[:4]),
            (x, None, c_prev, gates, c, read_only),
            (x, None, c_prev, gates, c, numpy.asfortranarray(h)),
            (x, None, c_prev, gates, c, c),              # h is c
            (x, None, c_prev, gates, c, gates[0]),       # h in the gates
            (x, None, c, gates, c, h),                   # c is c_prev
            (c_prev.repeat(4, axis=1), None, c_prev, gates, c,
             c_prev),                                    # h is c_prev
            (x, None, c_prev, gates, c, h.tolist())]:
        before = [numpy.array(a, copy=True) for a in args if a is not None]
        assert not _loops_rnn.lstm_step(*args)
        after = [numpy.asarray(a) for a in args if a is not None]
        for a, b in zip(after, before):
            assert numpy.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_half_plus_half_is_numpys_two_ufuncs_bit_for_bit(rng, dtype):
    t = numpy.tanh(rng.standard_normal((3, 7, 9)) * 4).astype(dtype)
    t.flat[:5] = [-0.0, 1e-45, numpy.nan, -1, 1]
    expected = t.copy()
    expected *= 0.5
    expected += 0.5
    assert _loops_rnn.half_plus_half(t)
    assert t.tobytes() == expected.tobytes()


def test_half_plus_half_refuses_arrays_it_does_not_take(rng):
    t = rng.standard_normal((4, 6)).astype(numpy.float32)
    read_only = t.copy()
    read_only.flags.writeable = False
    for bad in (t.astype(numpy.float16), t.astype(numpy.int32), read_only,
                numpy.vstack([t, t])[::2], t.astype('>f4'), t.tolist()):
        before = numpy.array(bad, copy=True)
        assert not _loops_rnn.half_plus_half(bad)
        assert numpy.array_equal(numpy.asarray(bad), before)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_lstm_on_transposed_gates_matches_eager_bit_for_bit(rng, dtype):
    """Gates given as a transposed view reach the copy loop's strided
    path; values and gradients as eager's."""
    def step(c, gates_t):
        return F.lstm(c, F.transpose(gates_t))
    calls = [(rng.standard_normal((6, 8)).astype(dtype),
              rng.standard_normal((32, 6)).astype(dtype)) for _ in range(3)]
    testing.assert_jit_matches_eager(step, calls, rtol=0, atol=0,
                                     lowered=['LSTM'])
    testing.assert_jit_grads_match_eager(step, calls, rtol=0, atol=0)


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
def test_channel_affine_and_input_grad_are_chainers_formulas(rng, dtype):
    shape = (4, 5, 6, 7)
    x = _channels_last(rng, shape, dtype)
    gy = _channels_last(rng, shape, dtype)
    mean, scale, gamma, beta, ggamma, gbeta = (
        rng.standard_normal(5).astype(dtype) for _ in range(6))
    e = (None, slice(None), None, None)
    y, x_hat, gx = (numpy.empty_like(x) for _ in range(3))
    assert _loops_normalization.channel_affine(x, mean, scale, gamma, beta, y)
    assert _loops_normalization.channel_affine(x, mean, scale, None, None,
                                               x_hat)
    inv_m = numpy.dtype(dtype).type(1. / 168)
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


# --- the gradient of softmax cross entropy ----------------------------------

def _softmax_ce_grad_passes(y, t, ignore_label, scale):
    """Chainer's CPU passes (``_SoftmaxCrossEntropyGrad_NoDoubleBackprop.
    forward_cpu``), with ``scale`` a float64 as ``gloss * coeff`` is."""
    gx = y.copy()
    t_valid = t != ignore_label
    t = t * t_valid
    gx[numpy.arange(len(t)), t] -= 1
    gx *= t_valid.reshape((len(t), 1))
    gx *= numpy.float64(scale)
    return gx


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('label_dtype', [numpy.int32, numpy.int64])
@pytest.mark.parametrize('ignore_label', [-1, 3])
def test_softmax_ce_grad_is_chainers_passes_bit_for_bit(
        rng, dtype, label_dtype, ignore_label):
    y = rng.uniform(0, 1, (9, 7)).astype(dtype)
    y[0, :3] = [0.0, numpy.nan, 1e-45 if dtype == numpy.float32 else 5e-324]
    t = rng.randint(0, 7, 9).astype(label_dtype)
    t[[1, 4]] = ignore_label
    for scale in (1.0 / 7, -0.3, 1e-30, 0.0):
        expected = _softmax_ce_grad_passes(y, t, ignore_label, scale)
        out = y.copy()
        assert _loops_softmax.softmax_ce_grad(out, t, ignore_label, scale)
        assert out.tobytes() == expected.tobytes()


def test_softmax_ce_grad_refuses_what_it_does_not_take(rng):
    y = rng.uniform(0, 1, (4, 5)).astype(numpy.float32)
    t = numpy.array([0, 4, -1, 2], numpy.int32)
    read_only = y.copy()
    read_only.flags.writeable = False
    for args in [
            (y.astype(numpy.float16), t),
            (numpy.asfortranarray(y), t),
            (read_only, t),
            (y[:, :, None], t),
            (y, t.astype(numpy.int16)),
            (y, t.astype(numpy.float32)),
            (y, t[:3]),
            (y, numpy.array([0, 5, -1, 2], numpy.int32)),   # out of range
            (y, numpy.array([0, -2, -1, 2], numpy.int32)),  # NumPy wraps
            (y, t.tolist())]:
        before = numpy.array(args[0], copy=True)
        assert not _loops_softmax.softmax_ce_grad(args[0], args[1], -1, 0.25)
        assert numpy.array_equal(args[0], before)


# --- log-softmax and the mean label loss of softmax cross entropy ------------

def _spread(rng, shape, dtype):
    """Values over many magnitudes, so that the order of a sum shows."""
    return (rng.standard_normal(shape) *
            numpy.exp(rng.uniform(-3, 5, shape))).astype(dtype)


SPECIAL = [numpy.nan, numpy.inf, -numpy.inf, -0.0, 0.0, 1e30]


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape', [
    (1, 1), (64, 10), (3, 7), (5, 8), (2, 9), (4, 128), (3, 129), (2, 300),
    (1, 1000), (2, 8192)])
def test_log_softmax_is_chainers_bit_for_bit(rng, dtype, shape):
    from chainer.functions.activation import log_softmax
    x = _spread(rng, shape, dtype)
    for special in [None] + SPECIAL:
        if special is not None:
            x[rng.randint(shape[0]), rng.randint(shape[1])] = special
        with numpy.errstate(invalid='ignore'):
            expected = log_softmax._log_softmax(x)
            actual = _loops_softmax.log_softmax(x)
        assert actual.dtype == expected.dtype and \
            actual.shape == expected.shape
        numpy.testing.assert_array_equal(actual, expected)
        assert numpy.array_equal(numpy.signbit(actual),
                                 numpy.signbit(expected)) or \
            numpy.isnan(expected).any()


def test_log_softmax_refuses_what_it_does_not_take(rng):
    x = _spread(rng, (4, 5), numpy.float32)
    for refused in [x.astype(numpy.float16), numpy.asfortranarray(x),
                    x[:, ::2], x[:, :, None], x[0], x[:0],
                    numpy.zeros((2, 8193), numpy.float32), x.tolist(),
                    x.astype(numpy.int32), x.astype('>f4')]:
        assert _loops_softmax.log_softmax(refused) is None


# --- softmax and layer normalization along rows ------------------------------

def _chainers_softmax(x):
    from chainer.functions.activation import softmax
    with numpy.errstate(invalid='ignore'):
        return softmax.Softmax(axis=x.ndim - 1).forward((x,))[0]


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape', [
    (1, 1), (32, 32, 32), (3, 7), (5, 8), (2, 9), (4, 128), (3, 129),
    (2, 3, 300), (1, 1000), (2, 8192), (7,)])
def test_softmax_rows_is_chainers_bit_for_bit(rng, dtype, shape):
    x = _spread(rng, shape, dtype)
    for special in [None] + SPECIAL:
        if special is not None:
            x.flat[rng.randint(x.size)] = special
        expected = _chainers_softmax(x)
        with numpy.errstate(invalid='ignore'):
            actual = _loops_softmax.softmax_rows(x)
            out = numpy.full_like(x, 7)
            into = _loops_softmax.softmax_rows(x, out)
        assert into is out
        for result in (actual, out):
            assert result.dtype == expected.dtype and \
                result.shape == expected.shape
            numpy.testing.assert_array_equal(result, expected)
        in_place = x.copy()
        with numpy.errstate(invalid='ignore'):
            _loops_softmax.softmax_rows(in_place, in_place)
        numpy.testing.assert_array_equal(in_place, expected)


def test_softmax_rows_refuses_what_it_does_not_take(rng):
    x = _spread(rng, (4, 6), numpy.float32)
    for refused in [x.astype(numpy.float16), numpy.asfortranarray(x),
                    x[:, ::2], x[:0], numpy.float32(1.0),
                    numpy.zeros((2, 8193), numpy.float32), x.tolist(),
                    x.astype(numpy.int32), x.astype('>f4')]:
        assert _loops_softmax.softmax_rows(refused) is None
    out = numpy.zeros_like(x)
    for bad_out in [out[:3], out.astype(numpy.float64), out.T.copy().T,
                    numpy.zeros((4, 7), numpy.float32)[:, 1:]]:
        assert _loops_softmax.softmax_rows(x, bad_out) is None
    buffer = numpy.zeros(30, numpy.float32)
    overlapping = buffer[:24].reshape(4, 6)
    overlapping[...] = x
    assert _loops_softmax.softmax_rows(overlapping, buffer[6:].reshape(
        4, 6)) is None
    assert numpy.array_equal(overlapping, x)


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


def _chainers_mean_loss(x, t, ignore_label, normalize):
    from chainer.functions.loss import softmax_cross_entropy
    node = softmax_cross_entropy.SoftmaxCrossEntropy(
        normalize=normalize, ignore_label=ignore_label)
    with numpy.errstate(invalid='ignore'):
        loss, = node.forward_cpu((x, t))
    return loss, node._coeff


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('label_dtype', [numpy.int32, numpy.int64])
@pytest.mark.parametrize('ignore_label', [-1, 3])
@pytest.mark.parametrize('normalize', [True, False])
@pytest.mark.parametrize('n_rows', [1, 7, 8, 64, 129, 300])
def test_mean_label_loss_is_chainers_bit_for_bit(
        rng, dtype, label_dtype, ignore_label, normalize, n_rows):
    from chainerjit.ops import loss as loss_ops
    x = _spread(rng, (n_rows, 5), dtype)
    t = rng.randint(0, 5, n_rows).astype(label_dtype)
    cases = [t, numpy.where(rng.rand(n_rows) < 0.3, ignore_label,
                            t).astype(label_dtype),
             numpy.full_like(t, ignore_label)]
    for labels in cases:
        for special in [None] + SPECIAL:
            if special is not None:
                x[rng.randint(n_rows), rng.randint(5)] = special
            expected, coeff = _chainers_mean_loss(x, labels, ignore_label,
                                                  normalize)
            log_y = _loops_softmax.log_softmax(x)
            loss, found_coeff = loss_ops.mean_label_loss(
                log_y, labels, ignore_label, normalize)
            assert loss.dtype == expected.dtype and loss.shape == ()
            assert loss.tobytes() == expected.tobytes() or \
                (numpy.isnan(loss) and numpy.isnan(expected))
            assert found_coeff == coeff


def test_picked_log_prob_sum_refuses_what_it_does_not_take(rng):
    log_y = _spread(rng, (4, 5), numpy.float32)
    t = numpy.array([0, 4, -1, 2], numpy.int32)
    for args in [
            (log_y.astype(numpy.float16), t),
            (numpy.asfortranarray(log_y), t),
            (log_y[:, :, None], t),
            (log_y, t.astype(numpy.int16)),
            (log_y, t.astype(numpy.float32)),
            (log_y, t[:3]),
            (log_y, t[::-1]),
            (log_y, numpy.array([0, 5, -1, 2], numpy.int32)),   # IndexError
            (log_y, numpy.array([0, -2, -1, 2], numpy.int32)),  # wraps
            (log_y[:0], t[:0]),
            (numpy.zeros((8193, 2), numpy.float32),
             numpy.zeros(8193, numpy.int32)),
            (log_y, t.tolist())]:
        assert _loops_softmax.picked_log_prob_sum(args[0], args[1], -1) is None


# --- adversarial: the elementwise loops in training -------------------------

@pytest.mark.adversarial
@pytest.mark.parametrize('perm', [(0, 2, 3, 1), (3, 2, 1, 0), (1, 0, 2, 3)])
def test_relu_on_transposed_inputs(perm):
    def f(x):
        return F.relu(F.transpose(x, perm)) * 2
    testing.assert_jit_grads_match_eager(f, _calls(24, [(2, 3, 4, 5)]), 0, 0,
                                         lowered=('ReLU',))


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


@pytest.mark.adversarial
@pytest.mark.parametrize('batch', [1, 63, 64, 65, 300])
def test_linear_relu_batch_sizes(batch):
    def f(x, W, b):
        return F.relu(F.linear(x, W, b))
    calls = _calls(27, [(batch, 10), (7, 10), (7,)])
    testing.assert_jit_matches_eager(f, calls, 1e-6, 1e-6)
    testing.assert_jit_grads_match_eager(f, calls, 1e-6, 1e-6)


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


@pytest.mark.adversarial
@pytest.mark.parametrize('batch', [1, 65, 300])
def test_linear_relu_of_transposed_x(batch):
    def f(x, W, b):
        return F.relu(F.linear(F.transpose(x), W, b))
    calls = _calls(39, [(6, batch), (4, 6), (4,)])
    testing.assert_jit_matches_eager(f, calls, 1e-6, 1e-6)
    testing.assert_jit_grads_match_eager(f, calls, 1e-6, 1e-6)


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
