"""The C loops of ``chainerjit/ops/_loops_softmax.pyx`` give the values of
the NumPy code and Chainer functions they replace, bit for bit, special
values included: row maxima, softmax and log-softmax along rows, the
gradient and the mean label loss of softmax cross entropy; they refuse
what they do not take, and the softmax kernels run them."""

import chainer.functions as F
import numpy
import pytest

from chainerjit import testing
from chainerjit.ops import _loops_softmax
from tests.ops_tests.loop_inputs import _spread
from tests.ops_tests.loop_inputs import SPECIAL


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


@pytest.mark.bit_exact
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


@pytest.mark.bit_exact
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


# --- softmax along rows ------------------------------------------------------

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
