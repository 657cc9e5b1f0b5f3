"""Kernels that compute Chainer's sums another, faster way still give
Chainer's results bit for bit (so that long training runs do not drift
apart from eager ones)."""

import collections
import time
import types

import chainer.functions as F
import numpy
import pytest

from chainerjit import ops
from chainerjit import testing
from chainerjit.ops import _loops_convolution
from chainerjit.ops import connection
from chainerjit.ops import linear as linear_ops
from chainerjit.ops.scratch import Scratch


CONVOLUTIONS = [
    ((4, 3, 9, 9), (5, 3, 3, 3), dict(pad=1)),
    ((2, 6, 14, 14), (16, 6, 5, 5), dict(pad=2)),  # LeNet's layers
    ((3, 1, 12, 12), (6, 1, 5, 5), dict(pad=2)),
    ((2, 2, 8, 8), (3, 2, 3, 3), dict(stride=2, dilate=2)),
    ((3, 1, 7, 5), (2, 1, 2, 3), dict(stride=(2, 1), pad=(0, 1))),
]


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('x_shape, w_shape, options', CONVOLUTIONS)
def test_convolution_is_bit_exact(rng, x_shape, w_shape, options, dtype):
    def f(x, W, b):
        return F.convolution_2d(x, W, b, **options)

    calls = [(rng.randn(*x_shape).astype(dtype),
              rng.randn(*w_shape).astype(dtype),
              rng.randn(w_shape[0]).astype(dtype)) for _ in range(3)]
    # Recorded for training: Chainer's sums, bit for bit.
    testing.assert_jit_matches_eager(f, calls, rtol=0, atol=0,
                                     no_backprop=False)
    testing.assert_jit_grads_match_eager(f, calls, rtol=0, atol=0)
    # For inference: a faster product, equal within rounding.
    testing.assert_jit_matches_eager(f, calls, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('shape,ksize', [
    ((2, 3, 8, 8), 2), ((1, 2, 4, 6), 2), ((2, 2, 6, 9), 3),
    ((2, 1, 4, 6), (2, 3))])
@pytest.mark.parametrize('ties', [False, True])
def test_tiling_max_pooling_is_bit_exact(rng, shape, ksize, ties):
    # Its forward and gradient skip im2col and col2im.
    def f(x):
        return F.max_pooling_2d(x, ksize)

    calls = [(rng.randn(*shape).astype(numpy.float32),) for _ in range(3)]
    if ties:  # windows with several maxima: the first one gets the grad
        calls = [(numpy.round(x * 0.6),) for x, in calls]
    testing.assert_jit_matches_eager(f, calls, rtol=0, atol=0,
                                     lowered=['MaxPoolingND'])
    testing.assert_jit_grads_match_eager(f, calls, rtol=0, atol=0)


def test_fixed_batch_normalization_is_bit_exact_when_recorded_for_training(
        rng):
    def f(x, gamma, beta, mean, var):
        return F.fixed_batch_normalization(x, gamma, beta, mean, var)

    calls = [(rng.randn(4, 3, 5, 5).astype(numpy.float32),
              rng.randn(3).astype(numpy.float32),
              rng.randn(3).astype(numpy.float32),
              rng.randn(3).astype(numpy.float32),
              rng.uniform(0.5, 2, 3).astype(numpy.float32))
             for _ in range(3)]
    testing.assert_jit_matches_eager(f, calls, rtol=0, atol=0,
                                     no_backprop=False)
    # For inference: a scale and a shift per channel, equal within rounding.
    testing.assert_jit_matches_eager(f, calls, rtol=1e-5, atol=1e-5)


# --- the weight-first product: taken only where it gives the same bits ----

def _linear_kernel(rows, n_in=128, n_out=512, dtype=numpy.float32):
    ctx = ops.LowerContext(numpy, ((rows, n_in), (n_out, n_in)),
                           (dtype, dtype), ((rows, n_out),), (dtype,))
    return linear_ops.lower_linear(None, ctx).fn


@pytest.fixture
def probes(monkeypatch):
    """A fresh memo of ``swapped_product_agrees``, restored after."""
    monkeypatch.setattr(linear_ops, '_AGREES', {})
    monkeypatch.setattr(linear_ops, '_ASKED', collections.Counter())
    monkeypatch.setattr(connection, '_FASTER', {})
    monkeypatch.delenv('CHAINERJIT_EXACT_BLAS', raising=False)
    return linear_ops


@pytest.mark.parametrize('agrees', [False, True])
def test_the_weight_first_order_follows_the_probe(rng, probes, monkeypatch,
                                                  agrees):
    monkeypatch.setattr(probes, '_probe_swapped_product',
                        lambda *key: agrees)
    x = rng.randn(16, 128).astype(numpy.float32)
    W = rng.randn(512, 128).astype(numpy.float32)
    y = _linear_kernel(16).product(x, W)
    # Weight first, the product is a transposed view (F-ordered).
    assert y.flags.f_contiguous == agrees and y.flags.c_contiguous != agrees
    if agrees:
        numpy.testing.assert_allclose(y, x.dot(W.T), rtol=1e-5, atol=1e-4)
    else:
        assert y.tobytes() == x.dot(W.T).tobytes()
    # Other numbers of rows (a program for any batch size) are probed at
    # their first call; from 65 rows on, x goes first.
    assert _linear_kernel(16).product(x[:9], W).flags.f_contiguous == agrees
    x = rng.randn(80, 128).astype(numpy.float32)
    assert _linear_kernel(16).product(x, W).flags.c_contiguous


def test_the_probe_compares_both_orders_in_both_layouts(probes):
    for rows, inner, cols, dtype in [(16, 128, 512, numpy.float32),
                                     (9, 24, 5, numpy.float64)]:
        rng = numpy.random.RandomState(0)
        a = rng.standard_normal((rows, inner)).astype(dtype)
        b = rng.standard_normal((inner, cols)).astype(dtype)
        same = all(numpy.array_equal(a_.dot(b_), b_.T.dot(a_.T).T)
                   for a_ in (a, numpy.asfortranarray(a))
                   for b_ in (b, numpy.asfortranarray(b)))
        assert probes.swapped_product_agrees(rows, inner, cols,
                                             dtype) == same
        assert ('_probe_swapped_product', rows, inner, cols,
                numpy.dtype(dtype)) in probes._AGREES


def test_exact_blas_off_takes_the_faster_order(probes, monkeypatch):
    monkeypatch.setenv('CHAINERJIT_EXACT_BLAS', '0')
    monkeypatch.setattr(probes, '_probe_swapped_product',
                        lambda *key: pytest.fail('probed'))
    assert probes.swapped_product_agrees(16, 128, 512, numpy.float32)


@pytest.mark.bit_exact
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('rows', [1, 9, 16, 64])
def test_linear_products_are_bit_exact_at_every_switch_size(
        rng, rows, dtype):
    """On every machine: the probe keeps the swapped order out where this
    BLAS sums it differently (OpenBLAS in float32 on an AMD EPYC)."""
    def f(x, W, b):
        return F.relu(F.linear(x, W, b)), F.linear(x, W)
    calls = [(rng.randn(rows, 128).astype(dtype),
              rng.randn(512, 128).astype(dtype),
              rng.randn(512).astype(dtype)) for _ in range(2)]
    testing.assert_jit_matches_eager(f, calls, rtol=0, atol=0)
    testing.assert_jit_grads_match_eager(f, calls, rtol=0, atol=0)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape', [(32, 28, 28, 6), (3, 5, 7, 16), (7, 1)])
def test_a_bias_added_over_repeated_rows_is_numpys_sum(rng, shape, dtype):
    y = rng.standard_normal(shape).astype(dtype)
    b = rng.standard_normal(shape[-1]).astype(dtype)
    expected = y + b
    connection._add_to_rows(y, b)
    assert y.tobytes() == expected.tobytes()
    mixed = rng.standard_normal(shape).astype(dtype)  # NumPy's own +=
    expected = mixed + b.astype(numpy.float16)
    connection._add_to_rows(mixed, b.astype(numpy.float16))
    assert mixed.tobytes() == expected.tobytes()


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('w_shape,gy_shape', [
    ((16, 6, 5, 5), (32, 16, 14, 14)), ((4, 3, 3, 3), (2, 4, 5, 7)),
    ((1, 1, 1, 1), (1, 1, 1, 1))])
def test_tensordot_into_scratch_is_numpys_tensordot(
        rng, dtype, w_shape, gy_shape):
    W = rng.standard_normal(w_shape).astype(dtype)
    gy = rng.standard_normal(gy_shape).astype(dtype)
    expected = numpy.tensordot(W, gy, (0, 1))
    with Scratch().held() as buffers:
        got = connection._tensordot_into(W, gy, buffers)
        assert got.shape == expected.shape
        assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape', [(64, 100), (64, 10), (16, 512), (3, 1),
                                   (1, 7)])
def test_a_linear_bias_gradient_is_numpys_column_sum(rng, dtype, shape):
    gy = (rng.standard_normal(shape) * numpy.exp(
        rng.standard_normal(shape) * 3)).astype(dtype)
    gy[0, 0] = -0.0
    for array in (gy, numpy.asfortranarray(gy), gy[:, ::-1]):
        got = linear_ops._column_sums(array)
        assert got.tobytes() == array.sum(axis=0).tobytes()


# --- a convolution's faster products: taken only where they give its bits ---

LENET = [((3, 1, 12, 12), (6, 1, 5, 5)), ((3, 6, 8, 8), (16, 6, 5, 5))]
_CONV_PROBES = ('_probe_forward_per_image', '_probe_products_per_image',
                '_probe_transposed_grad_w', '_probe_direct_forward',
                '_probe_direct_grad_x')
#: The forward and input gradient taken where every probe agrees and runs
#: faster: the direct convolutions where this CPU runs them, else the
#: products per image.
_FASTEST = ('_direct_forward', '_direct_grad_x', '_direct_grad_w') if \
    _loops_convolution.direct_convolution_available() else \
    ('_forward_per_image', '_products_per_image', '_columns_for_grad_w')


def _conv_paths_taken(monkeypatch):
    """Counts the calls of each faster product of the convolutions."""
    taken = dict.fromkeys(_FASTEST, 0)
    for name in taken:
        def counted(*args, _name=name, _fn=getattr(connection, name)):
            result = _fn(*args)
            taken[_name] += result is not None
            return result
        monkeypatch.setattr(connection, name, counted)
    return taken


@pytest.mark.parametrize('x_shape, w_shape', LENET)
@pytest.mark.parametrize('agrees', [False, True])
def test_the_convolutions_faster_products_follow_the_probes(
        rng, probes, monkeypatch, x_shape, w_shape, agrees):
    for name in _CONV_PROBES:
        monkeypatch.setattr(connection, name, lambda *key: agrees)
    monkeypatch.setattr(connection, '_probe_grad_w_blocks',
                        lambda *key: agrees and (448, 16))
    # (and, where they agree, taken whichever runs faster here)
    monkeypatch.setattr(connection, '_runs_faster',
                        lambda key, other, usual: True)
    taken = _conv_paths_taken(monkeypatch)

    def f(x, W, b):
        return F.convolution_2d(x, W, b, pad=2)

    # (probed from the third call at a shape: connection.PROBED_AFTER)
    calls = [(rng.randn(*x_shape).astype(numpy.float32),
              rng.randn(*w_shape).astype(numpy.float32),
              rng.randn(w_shape[0]).astype(numpy.float32))
             for _ in range(connection.PROBED_AFTER + 3)]
    if agrees:  # (a probe said so: values equal within rounding here)
        testing.assert_jit_matches_eager(f, calls, rtol=1e-4, atol=1e-4,
                                         no_backprop=False)
        testing.assert_jit_grads_match_eager(f, calls, rtol=1e-4, atol=1e-4)
    else:
        testing.assert_jit_matches_eager(f, calls, rtol=0, atol=0,
                                         no_backprop=False)
        testing.assert_jit_grads_match_eager(f, calls, rtol=0, atol=0)
    assert all((count > 0) == agrees for count in taken.values()), taken


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('x_shape, w_shape', LENET)
def test_each_convolution_probe_answers_for_its_kernels(
        rng, probes, x_shape, w_shape, dtype):
    """A probe says whether a kernel's faster product gives the bits of
    Chainer's: run both on other values, they agree where it says so (the
    order of a BLAS sum depends on shapes and layouts only; where it says
    not, a few sums round otherwise, which other values may not show)."""
    x = rng.randn(*x_shape).astype(dtype)
    W = rng.randn(*w_shape).astype(dtype)
    n, c_out, k = len(x), len(W), W.size // len(W)
    block = x_shape[2] * x_shape[3]  # padded to keep the size
    gy = rng.randn(n, c_out, *x_shape[2:]).astype(dtype)
    gy_t = numpy.ascontiguousarray(gy.transpose(1, 0, 2, 3))
    gy_t = gy_t.reshape(c_out, -1)
    geometry = (5, 5, 1, 1, 2, 2, 1, 1)
    rows = connection.patch_matrix(x, *geometry)
    with Scratch().held() as buffers:
        forward = connection._forward_per_image(
            x, W, k, block, buffers, geometry[:6],
            types.SimpleNamespace(dy=1, dx=1))
        # (each result copied out of the kernels' shared buffers)
        by_image = connection._products_per_image(W, gy, buffers).copy()
        product = connection._tensordot_into(W, gy, buffers).copy()
        columns = connection._gathered_patches(
            x, geometry, _loops_convolution.IMAGES_INSIDE, buffers)
        grad_w = columns.reshape(k, -1).dot(gy_t.T).T
    direct = connection._direct_forward(
        x, W, None, connection._Geometry(1, 1, 2, 2, 1, 1))
    direct_gx = connection._direct_grad_x(gy, W, 2, 2, *x_shape[2:])
    same = {
        '_probe_direct_forward': direct is None or numpy.array_equal(
            direct.reshape(-1, c_out), rows.dot(W.reshape(c_out, k).T)),
        '_probe_direct_grad_x': direct_gx is None or numpy.array_equal(
            direct_gx, connection._conv_transpose_by_patches(
                gy, W, 1, (1, 1, 2, 2) + x_shape[2:], dict(dy=1, dx=1))),
        '_probe_forward_per_image': numpy.array_equal(
            forward, rows.dot(W.reshape(c_out, k).T)),
        '_probe_products_per_image': numpy.array_equal(
            by_image, product.transpose(3, 0, 1, 2, 4, 5)),
        '_probe_transposed_grad_w': numpy.array_equal(grad_w,
                                                      gy_t.dot(rows)),
    }
    args = {'_probe_forward_per_image': (n, block, k, c_out),
            '_probe_products_per_image': (n, k, c_out, block),
            '_probe_transposed_grad_w': (c_out, n * block, k),
            '_probe_direct_forward': (x_shape, w_shape, 2, 2),
            '_probe_direct_grad_x': (gy.shape, w_shape, 2, 2) + x_shape[2:]}
    for name in _CONV_PROBES:
        agrees = getattr(connection, name)(*args[name], dtype)
        assert same[name] or not agrees, name


def _quick_and_slow():
    """``(quick, slow, calls)``: two functions sleeping 1 and 10 ms, and
    the count of calls of each."""
    calls = collections.Counter()

    def sleeping(name, seconds):
        def run():
            calls[name] += 1
            time.sleep(seconds)
        return run
    return sleeping('quick', 0.001), sleeping('slow', 0.01), calls


def test_a_product_giving_the_same_bits_is_taken_where_it_runs_faster(
        probes):
    quick, slow, calls = _quick_and_slow()
    assert connection._runs_faster(('a',), quick, slow)
    assert not connection._runs_faster(('b',), slow, quick)
    assert calls == {'quick': 4, 'slow': 4}  # timed twice each, per key
    assert connection._runs_faster(('a',), slow, quick)  # remembered
    assert calls == {'quick': 4, 'slow': 4}


def test_a_timing_serves_the_sizes_of_its_class(probes):
    quick, slow, calls = _quick_and_slow()
    f32 = numpy.dtype(numpy.float32)
    assert connection._may_run_faster(('forward', (40, 128, 33, 1), f32))
    assert not connection._runs_faster(('forward', (40, 128, 33, 1), f32),
                                       slow, quick)
    # 32 to 63 wide, 32 to 63 images: one class, not timed again, and
    # not worth probing for
    assert not connection._runs_faster(('forward', (63, 128, 60, 1), f32),
                                       quick, slow)
    assert not connection._may_run_faster(('forward', (50, 128, 32, 1), f32))
    assert calls == {'quick': 2, 'slow': 2}
    # 64 wide: another class
    assert connection._may_run_faster(('forward', (40, 128, 64, 1), f32))
    assert connection._runs_faster(('forward', (40, 128, 64, 1), f32),
                                   quick, slow)
    assert calls == {'quick': 4, 'slow': 4}


def test_probe_values_are_repeatable_random_and_distinct():
    a = linear_ops.probe_values((300, 400), numpy.float32, 0)
    b = linear_ops.probe_values((400, 30), numpy.float32, 1)
    assert a.dtype == b.dtype == numpy.float32 and a.flags.c_contiguous
    assert a.shape == (300, 400) and b.shape == (400, 30)
    assert numpy.array_equal(
        a, linear_ops.probe_values((300, 400), numpy.float32, 0))
    assert not numpy.array_equal(a.ravel()[:1000], b.ravel()[:1000])
    # no row of a repeats another: the period is not a multiple of 400
    assert len(numpy.unique(a[:, :8], axis=0)) == 300
    assert abs(float(a.mean())) < 0.05 and 0.9 < float(a.std()) < 1.1
    assert linear_ops.probe_values((3, 4), numpy.float64).dtype == \
        numpy.float64
