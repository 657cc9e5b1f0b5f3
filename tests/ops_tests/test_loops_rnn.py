"""The C loops of ``chainerjit/ops/_loops_rnn.pyx`` give the values of the
NumPy code and Chainer formulas they replace, bit for bit: an LSTM's gates
copied gate-major (with an addend too), the cell, ``tanh``, ``x * 0.5 +
0.5`` and a whole LSTM step, over the layouts they take, refusing the
arrays they do not take; an LSTM on transposed gates matches eager
Chainer bit for bit."""

import chainer.functions as F
import numpy
import pytest

from chainerjit import testing
from chainerjit.ops import _loops_rnn
from tests.ops_tests.loop_inputs import _spread
from tests.ops_tests.loop_inputs import SPECIAL


#: The loops that call NumPy's own tanh loop need it from NumPy's loop table,
#: which only NumPy 1 fills for every ufunc.
needs_numpy_loops = pytest.mark.skipif(
    not _loops_rnn.numpy_loops_found(),
    reason="NumPy's tanh loops are not in its ufunc table (NumPy 2)")


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


@needs_numpy_loops
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


@needs_numpy_loops
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


@pytest.mark.bit_exact
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
