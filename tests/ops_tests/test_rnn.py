"""F.lstm: lowered forward, gradients through its own backward, ONNX;
and, adversarially, the lowering (``ops/rnn.py`` with ``_loops_rnn``)
bit for bit on other memory layouts, gradients through one output (signs
of zeros and NaNs kept), batches shrinking over steps, a plain array
argument and an ``L.LSTM`` stepped in a loop while training."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from numpy.testing import assert_allclose
from numpy.testing import assert_array_equal
import pytest

import chainerjit
from chainerjit import testing
from tests.ops_tests.common import DTYPES
from tests.runtime_tests.twins import _assert_compiled
from tests.runtime_tests.twins import _normal
from tests.runtime_tests.twins import _params
from tests.runtime_tests.twins import _twins
from tests.runtime_tests.twins import F32
from tests.runtime_tests.twins import F64


def _calls(rng, c_shape, x_shape, dtype, n=3):
    return [(rng.randn(*c_shape).astype(dtype),
             rng.randn(*x_shape).astype(dtype)) for _ in range(n)]


SHAPES = [((3, 4), (3, 16)), ((2, 3, 5), (2, 12, 5)), ((4, 2), (2, 8))]


@pytest.mark.bit_exact
@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('c_shape, x_shape', SHAPES)
def test_lstm(rng, c_shape, x_shape, dtype):
    testing.assert_jit_matches_eager(
        lambda c, x: F.lstm(c, x), _calls(rng, c_shape, x_shape, dtype),
        rtol=0, atol=0, lowered=['LSTM'])


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('c_shape, x_shape', SHAPES)
def test_lstm_grad(rng, c_shape, x_shape, dtype):
    testing.assert_jit_grads_match_eager(
        lambda c, x: F.lstm(c, x), _calls(rng, c_shape, x_shape, dtype))


@pytest.mark.parametrize('c_shape, x_shape', SHAPES[:2])
def test_lstm_onnx(rng, c_shape, x_shape):
    pytest.importorskip('onnxruntime')
    testing.assert_onnx_matches_eager(
        lambda c, x: F.lstm(c, x),
        _calls(rng, c_shape, x_shape, numpy.float32), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('output', [0, 1])
@pytest.mark.parametrize('c_shape, x_shape', SHAPES)
def test_lstm_grad_through_one_output(rng, c_shape, x_shape, output):
    """Only c or only h reaches the loss: the other output's gradient is
    missing (``None``) in the rule."""
    testing.assert_jit_grads_match_eager(
        lambda c, x: F.lstm(c, x)[output] * 2,
        _calls(rng, c_shape, x_shape, numpy.float32))


def _product_then_lstm(c, x, W):
    """The gates as an LSTM link makes them: a product (F-ordered when
    the weight goes first, up to 64 rows), then the cell."""
    return F.lstm(c, F.linear(x, W))


@pytest.mark.bit_exact
@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('batch', [16, 100])
def test_lstm_at_link_sizes_is_bit_for_bit(rng, dtype, batch):
    """16 x 128 units (the benchmark's) and 100 rows (a C-ordered
    product): the gates copied out and halved in one C loop, one tanh,
    the sigmoid finished in another loop; values and gradients equal
    eager's bit for bit."""
    calls = [(rng.randn(batch, 128).astype(dtype),
              rng.randn(batch, 64).astype(dtype),
              (rng.randn(512, 64) * 0.3).astype(dtype)) for _ in range(3)]
    testing.assert_jit_matches_eager(_product_then_lstm, calls, rtol=0,
                                     atol=0, lowered=['LSTM'])
    testing.assert_jit_grads_match_eager(_product_then_lstm, calls, rtol=0,
                                         atol=0, lowered=['LSTM'])


@pytest.mark.bit_exact
@pytest.mark.parametrize('dtype', DTYPES)
def test_lstm_grads_are_bit_for_bit(rng, dtype):
    for c_shape, x_shape in SHAPES:
        testing.assert_jit_grads_match_eager(
            lambda c, x: F.lstm(c, x),
            _calls(rng, c_shape, x_shape, dtype), rtol=0, atol=0)


def test_the_gpu_lowering_runs_chainers_own_lstm_kernels():
    """The GPU lowering calls Chainer's LSTM and LSTMGrad forwards; on
    NumPy arrays they must give eager's step and gradients too."""
    from chainerjit.ops import rnn
    rng = numpy.random.RandomState(0)
    c_prev = rng.randn(3, 4).astype(numpy.float32)
    x = rng.randn(3, 16).astype(numpy.float32)
    gc, gh = (rng.randn(3, 4).astype(numpy.float32) for _ in range(2))
    c, h = rnn._chainer_lstm_step(c_prev, x)
    vc, vx = chainer.Variable(c_prev), chainer.Variable(x)
    ec, eh = F.lstm(vc, vx)
    numpy.testing.assert_array_equal(c, ec.array)
    numpy.testing.assert_array_equal(h, eh.array)
    chainer.backward([ec, eh], [chainer.Variable(gc), chainer.Variable(gh)])
    gc_prev, gx = rnn._chainer_lstm_grad((c_prev, x), (c, h), (gc, gh),
                                         (True, True))
    numpy.testing.assert_allclose(gc_prev, vc.grad, rtol=1e-6)
    numpy.testing.assert_allclose(gx, vx.grad, rtol=1e-6)


# --- adversarial: the LSTM lowering on other layouts, gradients through one
# output, shrinking batches and a link stepped in a loop ---------------------

def _lstm(c, x):
    return F.lstm(c, x)


def _bits_equal(actual, expected):
    """Same dtype, shape and bytes (NaNs and signs of zeros included)."""
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert_array_equal(actual, expected)
    assert_array_equal(numpy.signbit(actual), numpy.signbit(expected))


def _lstm_run(fn, c, x, gc, gh):
    """``(c, h, c_prev.grad, x.grad)`` of ``fn(c, x)`` with the output
    gradients ``gc`` and ``gh`` (``None``: no gradient through it)."""
    cv = chainer.Variable(c.copy(order='K'))
    xv = chainer.Variable(x.copy(order='K'))
    c_next, h = fn(cv, xv)
    outputs = [(o, g) for o, g in ((c_next, gc), (h, gh)) if g is not None]
    chainer.backward([o for o, _ in outputs],
                     [chainer.Variable(g.copy()) for _, g in outputs])
    return c_next.array, h.array, cv.grad, xv.grad


def _fortran(shape):
    return lambda rng, d: numpy.asfortranarray(rng.randn(*shape).astype(d))


def _c(shape):
    return lambda rng, d: rng.randn(*shape).astype(d)


LSTM_CASES = {
    'c_ordered': (_c((3, 4)), _c((3, 16))),
    'fortran': (_fortran((3, 4)), _fortran((3, 16))),
    'strided_gates': (_c((3, 4)),
                      lambda rng, d: rng.randn(3, 32).astype(d)[:, ::2]),
    'reversed_rows': (lambda rng, d: rng.randn(3, 4).astype(d)[::-1],
                      lambda rng, d: rng.randn(3, 16).astype(d)[::-1]),
    'shrinking_extra_axis': (_c((5, 3, 2)), _c((2, 12, 2))),
    'shrinking_fortran': (_fortran((5, 3)), _fortran((2, 12))),
    'extra_axes_fortran': (_fortran((2, 3, 4)), _fortran((2, 12, 4))),
}


def _lstm_calls(rng, case, dtype, outputs, n=3):
    make_c, make_x = LSTM_CASES[case]
    calls = []
    for _ in range(n):
        c, x = make_c(rng, dtype), make_x(rng, dtype)
        rows = (len(x),) + c.shape[1:]
        gc = rng.randn(*c.shape).astype(dtype) if 'c' in outputs else None
        gh = rng.randn(*rows).astype(dtype) if 'h' in outputs else None
        calls.append((c, x, gc, gh))
    return calls


@pytest.mark.bit_exact
@pytest.mark.adversarial
@pytest.mark.parametrize('case', sorted(LSTM_CASES))
def test_lstm_bit_for_bit_on_other_layouts(rng, case):
    jitted = chainerjit.jit(_lstm)
    for dtype in (F32, F64):
        for c, x, gc, gh in _lstm_calls(rng, case, dtype, 'ch'):
            expected = _lstm_run(_lstm, c, x, gc, gh)
            actual = _lstm_run(jitted, c, x, gc, gh)
            for a, e in zip(actual, expected):
                _bits_equal(a, e)
    _assert_compiled(jitted, 4)


@pytest.mark.bit_exact
@pytest.mark.adversarial
@pytest.mark.parametrize('output', ['c', 'h'])
def test_lstm_gradient_through_one_output_equals_eagers_values(
        rng, output):
    """Bit for bit, signs of zeros included, in the C loop and in the
    NumPy passes."""
    for case in ('c_ordered', 'fortran', 'shrinking_extra_axis'):
        jitted = chainerjit.jit(_lstm)
        for dtype in (F32, F64):
            for c, x, gc, gh in _lstm_calls(rng, case, dtype, output):
                expected = _lstm_run(_lstm, c, x, gc, gh)
                actual = _lstm_run(jitted, c, x, gc, gh)
                for a, e in zip(actual, expected):
                    _bits_equal(a, e)
        _assert_compiled(jitted, 4)


@pytest.mark.adversarial
@pytest.mark.parametrize('case', ['c_ordered', 'fortran'])
def test_lstm_gradient_through_c_only_keeps_the_signs_of_zeros(rng, case):
    jitted = chainerjit.jit(_lstm)
    for c, x, gc, gh in _lstm_calls(rng, case, F32, 'c'):
        expected = _lstm_run(_lstm, c, x, gc, gh)
        actual = _lstm_run(jitted, c, x, gc, gh)
        _bits_equal(actual[3], expected[3])


@pytest.mark.bit_exact
@pytest.mark.adversarial
@pytest.mark.parametrize('layout', [numpy.ascontiguousarray,
                                    numpy.asfortranarray])
def test_lstm_gradient_through_h_only_keeps_the_signs_of_zeros(
        rng, layout):
    jitted = chainerjit.jit(_lstm)
    for _ in range(3):
        c = layout(rng.randn(3, 4).astype(F32) * 20)  # tanh(c) is +-1
        x = layout(rng.randn(3, 16).astype(F32) * 20)
        gh = -numpy.abs(rng.randn(3, 4)).astype(F32)
        expected = _lstm_run(_lstm, c, x, None, gh)
        actual = _lstm_run(jitted, c, x, None, gh)
        _bits_equal(actual[2], expected[2])


@pytest.mark.adversarial
def test_lstm_gradient_through_c_only_propagates_nan(rng):
    jitted = chainerjit.jit(_lstm)
    for step in range(3):
        c = rng.randn(3, 4).astype(F64)
        x = rng.randn(3, 16).astype(F64)
        if step:
            x[0, 0] = numpy.nan  # gate a of unit 0, row 0: c is NaN there
        gc = rng.randn(3, 4).astype(F64)
        expected = _lstm_run(_lstm, c, x, gc, None)
        actual = _lstm_run(jitted, c, x, gc, None)
        assert_array_equal(numpy.isnan(actual[2]), numpy.isnan(expected[2]))


def _three_steps(c, x1, x2, x3):
    c, h1 = F.lstm(c, x1)
    c, h2 = F.lstm(c, x2)
    c, h3 = F.lstm(c, x3)
    return c, h3 * 2 + h1[:len(h3)]


@pytest.mark.adversarial
@pytest.mark.parametrize('shapes', [
    [(3, 4), (3, 16), (3, 16), (3, 16)],
    [(4, 5), (4, 20), (3, 20), (2, 20)],
    [(4, 2, 3), (4, 8, 3), (3, 8, 3), (1, 8, 3)],
])
@pytest.mark.bit_exact
def test_lstm_steps_with_a_shrinking_batch_bit_for_bit(rng, shapes):
    jitted = chainerjit.jit(_three_steps)
    for step, dtype in enumerate([F32, F32, F32, F64, F64, F64]):
        arrays = [rng.randn(*s).astype(dtype) for s in shapes]
        found = []
        for fn in (_three_steps, jitted):
            variables = [chainer.Variable(a.copy()) for a in arrays]
            outs = fn(*variables)
            grads = numpy.random.RandomState(step)
            chainer.backward(list(outs), [chainer.Variable(
                grads.randn(*o.shape).astype(dtype)) for o in outs])
            found.append([o.array for o in outs] +
                         [v.grad for v in variables])
        for a, e in zip(*found):
            assert a.dtype == e.dtype
            assert_array_equal(a, e)
    _assert_compiled(jitted, 4)


@pytest.mark.bit_exact
@pytest.mark.adversarial
def test_lstm_with_one_plain_array_argument(rng):
    jitted = chainerjit.jit(_lstm)
    for variable in ['c', 'x', 'c', 'x', 'c', 'x']:
        c, x = rng.randn(2, 3).astype(F32), rng.randn(2, 12).astype(F32)
        found = []
        for fn in (_lstm, jitted):
            v = chainer.Variable((c if variable == 'c' else x).copy())
            args = (v, x) if variable == 'c' else (c, v)
            c_next, h = fn(*args)
            F.sum(c_next * h).backward()
            found.append((c_next.array, h.array, v.grad))
        for a, e in zip(*found):
            assert_array_equal(a, e)
    _assert_compiled(jitted, 4)


class Sequence(chainer.Chain):

    def __init__(self, dtype):
        super(Sequence, self).__init__()
        with self.init_scope(), chainer.using_config('dtype', dtype):
            self.lstm = L.LSTM(3, 5, lateral_init=_normal(dtype),
                               upward_init=_normal(dtype),
                               bias_init=_normal(dtype))
            self.out = L.Linear(5, 2, initialW=_normal(dtype),
                                initial_bias=_normal(dtype))

    def forward(self, xs):
        self.lstm.reset_state()
        loss = 0
        for x in xs:
            loss += F.sum(self.out(self.lstm(x)) ** 2)
        return loss


@pytest.mark.bit_exact
@pytest.mark.adversarial
@pytest.mark.parametrize('dtype, batches', [
    (F32, [4, 4, 4]), (F64, [4, 4, 4]), (F32, [4, 3, 1]), (F64, [5, 2, 2])])
def test_lstm_link_stepped_in_a_loop_trains_like_eager(rng, dtype, batches):
    """A shrinking batch ([4, 3, 1]) too: L.LSTM splits its state."""
    eager, jitted = _twins(Sequence, dtype)
    optimizers = []
    for model in (eager, jitted):
        optimizer = chainer.optimizers.MomentumSGD(lr=0.01)
        optimizer.setup(model)
        optimizers.append(optimizer)
    for _ in range(4):
        xs = [rng.randn(n, 3).astype(dtype) for n in batches]
        losses = []
        for model, optimizer in zip((eager, jitted), optimizers):
            model.cleargrads()
            loss = model(xs)
            loss.backward()
            optimizer.update()
            losses.append(loss.array)
        assert losses[1].dtype == losses[0].dtype
        assert_allclose(losses[1], losses[0], rtol=1e-6)
        for p, q in zip(_params(eager), _params(jitted)):
            assert_allclose(q.array, p.array, rtol=1e-6, atol=1e-7)
        assert_allclose(jitted.lstm.c.array, eager.lstm.c.array, rtol=1e-6,
                        atol=1e-7)
    _assert_compiled(jitted.forward, 3)


def _cell_calls(rng, c_shapes, x_shapes, dtype, n=3):
    """Calls ``(c_1, ..., c_k, x_1, ..., x_m)`` with new values each."""
    return [tuple(rng.randn(*shape).astype(dtype)
                  for shape in c_shapes + x_shapes) for _ in range(n)]


# (c shape, x shape) of one child: x has 4 gates per unit (slstm).
SLSTM_SHAPES = [((3, 4), (3, 16)), ((2, 3, 5), (2, 12, 5)), ((0, 2), (0, 8))]


@pytest.mark.bit_exact
@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('c_shape, x_shape', SLSTM_SHAPES)
def test_slstm(rng, c_shape, x_shape, dtype):
    testing.assert_jit_matches_eager(
        lambda c1, c2, x1, x2: F.slstm(c1, c2, x1, x2),
        _cell_calls(rng, [c_shape] * 2, [x_shape] * 2, dtype),
        rtol=0, atol=0, expect_entries=1, lowered=['SLSTM'])


@pytest.mark.parametrize('output', [None, 0, 1])
@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('c_shape, x_shape', SLSTM_SHAPES[:2])
def test_slstm_grad(rng, c_shape, x_shape, dtype, output):
    """Through both outputs, or one (the other's gradient is absent)."""
    def fn(c1, c2, x1, x2):
        c, h = F.slstm(c1, c2, x1, x2)
        return (c, h) if output is None else (c, h)[output] * 2
    testing.assert_jit_grads_match_eager(
        fn, _cell_calls(rng, [c_shape] * 2, [x_shape] * 2, dtype),
        lowered=['SLSTM'])


def _tree_lstm_shapes(children, c_shape):
    """The shapes of ``children`` states and of x, which holds ``3 +
    children`` gates per unit."""
    x_shape = (c_shape[0], (3 + children) * c_shape[1]) + c_shape[2:]
    return [c_shape] * children, [x_shape]


# Chainer's type check of TreeLSTM refuses states of more than two axes.
TREE_LSTM_CASES = [(1, (3, 4)), (2, (3, 4)), (3, (2, 5)), (2, (0, 2))]


@pytest.mark.bit_exact
@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('children, c_shape', TREE_LSTM_CASES)
def test_tree_lstm(rng, children, c_shape, dtype):
    testing.assert_jit_matches_eager(
        lambda *args: F.tree_lstm(*args),
        _cell_calls(rng, *_tree_lstm_shapes(children, c_shape), dtype),
        rtol=0, atol=0, expect_entries=1, lowered=['TreeLSTM'])


@pytest.mark.parametrize('output', [None, 0, 1])
@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('children, c_shape', TREE_LSTM_CASES[:3])
def test_tree_lstm_grad(rng, children, c_shape, dtype, output):
    def fn(*args):
        c, h = F.tree_lstm(*args)
        return (c, h) if output is None else (c, h)[output] * 2
    testing.assert_jit_grads_match_eager(
        fn, _cell_calls(rng, *_tree_lstm_shapes(children, c_shape), dtype),
        lowered=['TreeLSTM'])


@pytest.mark.parametrize('children', [1, 2])
def test_tree_lstm_and_slstm_onnx(rng, children):
    pytest.importorskip('onnxruntime')
    testing.assert_onnx_matches_eager(
        lambda *args: F.tree_lstm(*args), _cell_calls(
            rng, *_tree_lstm_shapes(children, (3, 4)), numpy.float32),
        rtol=1e-5, atol=1e-6)
    testing.assert_onnx_matches_eager(
        lambda c1, c2, x1, x2: F.slstm(c1, c2, x1, x2),
        _cell_calls(rng, [(3, 4)] * 2, [(3, 16)] * 2, numpy.float32),
        rtol=1e-5, atol=1e-6)
