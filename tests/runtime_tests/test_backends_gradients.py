"""Gradients that train whole in onnxruntime: the backward of a program
with them is one onnxruntime session, and gives eager Chainer's
gradients on several calls with new values."""

import chainer
import chainer.functions as F
import numpy
import pytest

import chainerjit

pytest.importorskip('onnxruntime')

F32 = numpy.float32


def _check_trains_whole(fn, make_args, forward_too=True):
    """Calls ``fn`` jitted for onnxruntime and eagerly on three sets of
    ``make_args()`` (float arrays become Variables, others stay), and
    compares the gradients of the float arguments; the backward runs in
    onnxruntime as one session, and with ``forward_too`` nothing runs on
    the VM."""
    jitted = chainerjit.jit(fn, backend='onnxruntime')
    for _ in range(3):
        args = make_args()
        compiled = [_variable(a) for a in args]
        eager = [_variable(a) for a in args]
        jitted(*compiled).backward()
        fn(*eager).backward()
        for got, expected in zip(compiled, eager):
            if isinstance(got, chainer.Variable):
                numpy.testing.assert_allclose(got.grad, expected.grad,
                                              rtol=1e-5, atol=1e-6)
    entry, = jitted.cache_entries()
    described = entry.describe_backend()
    backward = described[described.index('backward'):]
    assert backward == 'backward in onnxruntime', described
    assert 'on the VM' not in described or not forward_too, described


def _variable(array):
    if array.dtype.kind == 'f':
        return chainer.Variable(array.copy())
    return array


@pytest.mark.parametrize('dtype', [F32, numpy.float64])
@pytest.mark.parametrize('ignore_label', [None, -1, 2])
def test_embed_id(rng, ignore_label, dtype):
    def fn(W, ids, y):
        return F.sum(F.embed_id(ids, W, ignore_label=ignore_label) * y)

    def make_args():
        # Negative ids count from the end, but for an ignore_label.
        return (rng.randn(5, 3).astype(dtype),
                rng.randint(-5, 5, (4, 6)).astype(numpy.int32),
                rng.randn(4, 6, 3).astype(dtype))
    _check_trains_whole(fn, make_args)


@pytest.mark.parametrize('index', [
    (slice(None, None, -1), slice(1, 3)),
    (1,),
    (-1, slice(None, None, -2)),
    (None, Ellipsis, slice(3, 0, -2), None),
    (Ellipsis, 2),
    (slice(None), slice(None), slice(1, None)),
    (slice(3, None), slice(None, None, -2)),
    (slice(None), numpy.array([0, 2, 0, -1])),
], ids=['reversed_and_slice', 'int', 'negative_int_and_step',
        'newaxis_ellipsis_negative_step', 'ellipsis_int', 'last_axis',
        'empty', 'repeated_array'])
def test_get_item(rng, index):
    _check_get_item(rng, index)


@pytest.mark.parametrize('index', [
    (numpy.array([1, 1, 0]), slice(None), numpy.array([2, 2, 3])),
    (numpy.array([[True, False, True, False],
                  [False, False, True, True],
                  [True, True, True, False]]),),
], ids=['two_arrays', 'mask'])
def test_get_item_backward(rng, index):
    # The forward of these indexes has no ONNX form: it runs on the VM.
    _check_get_item(rng, index, forward_too=False)


def test_get_item_float64_repeated(rng):
    _check_get_item(rng, (numpy.array([2, 0, 2]),), dtype=numpy.float64)


def _check_get_item(rng, index, forward_too=True, dtype=F32):
    def fn(x, y):
        part = F.get_item(F.tanh(x), index)
        return F.sum(part * F.get_item(y, index))

    def make_args():
        return (rng.randn(3, 4, 5).astype(dtype),
                rng.randn(3, 4, 5).astype(dtype))
    _check_trains_whole(fn, make_args, forward_too)


def test_select_item(rng):
    def fn(x, t, y):
        return F.sum(F.select_item(F.tanh(x), t) * y)

    def make_args():
        return (rng.randn(6, 4).astype(F32),
                rng.randint(-4, 4, 6).astype(numpy.int32),
                rng.randn(6).astype(F32))
    _check_trains_whole(fn, make_args)


@pytest.mark.parametrize('axis', [None, 1, (0, 2), -1])
def test_logsumexp(rng, axis):
    def fn(x, y):
        return F.sum(F.logsumexp(x, axis=axis) * F.logsumexp(y, axis=axis))

    def make_args():
        return (rng.randn(3, 4, 5).astype(F32),
                rng.randn(3, 4, 5).astype(F32))
    _check_trains_whole(fn, make_args)


@pytest.mark.parametrize('axis', [0, 1, -1])
def test_separate_with_outputs_unused(rng, axis):
    def fn(x, y):
        parts = F.separate(F.tanh(x), axis=axis)
        return F.sum(parts[0] * parts[2]) + F.sum(parts[-1] * y)

    def make_args():
        x = rng.randn(4, 3, 4).astype(F32)
        return x, rng.randn(*numpy.delete(x.shape, axis)).astype(F32)
    _check_trains_whole(fn, make_args)
