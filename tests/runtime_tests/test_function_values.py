"""What a compiled call returns and takes, against an identical eager
model: structured outputs with gradients through some of them, outputs
stored on the model, results kept from earlier hits or changed in place,
and read-only, non-native byte order, empty, aliased inputs and an input
made by a link with its parameter passed too.

Every test seeds its random numbers; the model twins are in ``twins.py``.
"""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from numpy.testing import assert_allclose
from numpy.testing import assert_array_equal
import pytest

import chainerjit
from tests.runtime_tests.twins import _assert_compiled
from tests.runtime_tests.twins import _assert_grads
from tests.runtime_tests.twins import _train_call
from tests.runtime_tests.twins import _twins
from tests.runtime_tests.twins import _x
from tests.runtime_tests.twins import F32
from tests.runtime_tests.twins import MLP


pytestmark = pytest.mark.adversarial


class Multi(MLP):

    def forward(self, x):
        h = F.relu(self.l1(x))
        y = self.l2(h)
        self.last = y
        return {'y': y, 'h': h, 'both': (h, y), 'x': x}


LOSSES = {
    'y': lambda r, m: F.sum(r['y'] ** 2),
    'h': lambda r, m: F.sum(r['h'] ** 2),
    'both': lambda r, m: F.sum(r['both'][0]) + F.sum(r['both'][1] ** 2),
    'input': lambda r, m: F.sum(r['x'] * 3),
    'stored': lambda r, m: F.sum(m.last * r['h'][:, :3]),
}


def test_structured_outputs_with_gradients_through_some(rng):
    eager, jitted = _twins(Multi)
    # self.last, added by the first call, makes the second a miss too
    for loss in ['y', 'y'] + sorted(LOSSES) * 2:
        x = _x(rng)
        found = []
        for model in (eager, jitted):
            model.cleargrads()
            v = chainer.Variable(x.copy())
            result = model(v)
            assert result['x'] is v
            assert result['both'][0] is result['h']
            assert model.last is result['y']
            LOSSES[loss](result, model).backward()
            found.append((result, v))
        (re, ve), (rj, vj) = found
        for key in ('y', 'h'):
            assert_allclose(rj[key].array, re[key].array, rtol=1e-6,
                            atol=1e-7, err_msg=loss)
        assert_allclose(vj.grad, ve.grad, rtol=1e-5, atol=1e-6,
                        err_msg=loss)
        _assert_grads(eager, jitted)
    _assert_compiled(jitted.forward, 10)


def test_an_output_stored_on_the_model_is_the_returned_variable(rng):
    eager, jitted = _twins(Multi)
    x = _x(rng)
    with chainer.no_backprop_mode():
        for model in (eager, jitted):
            for _ in range(3):
                result = model(x)
            assert model.last.array is result['y'].array
            assert model.last is result['y']


class StoresACopy(MLP):

    def forward(self, x):
        y = self.l2(F.relu(self.l1(x)))
        self.last = chainer.Variable(y.array)
        return y


def test_a_stored_variable_of_the_same_array_stays_another_variable(rng):
    eager, jitted = _twins(StoresACopy)
    x = _x(rng)
    with chainer.no_backprop_mode():
        for model in (eager, jitted):
            for _ in range(3):
                y = model(x)
            assert model.last is not y
            assert_allclose(model.last.array, y.array)
    _assert_compiled(jitted.forward)


def test_results_kept_from_earlier_hits_stay_intact(rng):
    eager, jitted = _twins()
    xs = [_x(rng) for _ in range(4)]
    with chainer.no_backprop_mode():
        kept = [jitted(x) for x in xs]
        for x, y in zip(xs, kept):
            assert_allclose(y.array, eager(x).array, rtol=1e-6, atol=1e-7)
    kept = [jitted(x) for x in xs]
    variables = [chainer.Variable(x.copy()) for x in xs]
    grads = []
    for v in variables:
        F.sum(jitted(v) ** 2).backward()
        grads.append(v.grad)
    for x, y, g in zip(xs, kept, grads):
        v = chainer.Variable(x.copy())
        ye = eager(v)
        F.sum(ye ** 2).backward()
        assert_allclose(y.array, ye.array, rtol=1e-6, atol=1e-7)
        assert_allclose(g, v.grad, rtol=1e-5, atol=1e-6)


def test_results_changed_in_place_do_not_leak_into_later_hits(rng):
    eager, jitted = _twins()
    x = _x(rng)
    with chainer.no_backprop_mode():
        for _ in range(4):
            y = jitted(x)
            assert_allclose(y.array, eager(x).array, rtol=1e-6, atol=1e-7)
            y.array[...] = 7
    for _ in range(3):
        y = jitted(x)
        assert_allclose(y.array, eager(x).array, rtol=1e-6, atol=1e-7)
        y.array[...] = -7
        F.sum(y).backward()


def test_read_only_inputs_are_read_and_never_written(rng):
    eager, jitted = _twins()
    x = _x(rng)
    original = x.copy()
    x.flags.writeable = False
    with chainer.no_backprop_mode():
        for _ in range(3):
            assert_allclose(jitted(x).array, eager(x).array, rtol=1e-6,
                            atol=1e-7)
    for _ in range(3):
        v = chainer.Variable(x)
        F.sum(jitted(v) ** 2).backward()
    assert_array_equal(x, original)


def _elementwise(x, y):
    return F.tanh(x) * 2 + y * F.sigmoid(x)


def test_non_native_byte_order_inputs(rng):
    jitted = chainerjit.jit(_elementwise)
    with chainer.no_backprop_mode():
        for dtype in ['<f4', '>f4', '>f4', '<f4', '>f8', '>f8', '<f8']:
            x, y = [rng.randn(3, 4).astype(dtype) for _ in range(2)]
            expected, actual = _elementwise(x, y), jitted(x, y)
            assert actual.dtype == expected.dtype
            assert_array_equal(actual.array, expected.array, err_msg=dtype)
    assert jitted.cache_info().misses == 4


def test_an_empty_batch(rng):
    eager, jitted = _twins()
    for n in [0, 0, 3, 0]:
        x = numpy.zeros((n, 4), F32)
        with chainer.no_backprop_mode():
            assert jitted(x).shape == eager(x).shape == (n, 3)
        ye, ve = _train_call(eager, x)
        yj, vj = _train_call(jitted, x)
        assert vj.grad.shape == ve.grad.shape
        _assert_grads(eager, jitted)


def _gated(a, b):
    return F.tanh(a) * b + a * a


def test_aliased_arguments(rng):
    jitted = chainerjit.jit(_gated)
    x, y = _x(rng), _x(rng)
    for pattern in ['ab', 'ab', 'aa', 'aa', 'a_array', 'a_array',
                    'a_shared', 'a_shared', 'ab', 'aa']:
        found = []
        for fn in (_gated, jitted):
            a = chainer.Variable(x.copy())
            b = {'ab': chainer.Variable(y.copy()), 'aa': a,
                 'a_array': a.array,
                 'a_shared': chainer.Variable(a.array)}[pattern]
            out = fn(a, b)
            F.sum(out * out).backward()
            found.append((out.array, a.grad, getattr(b, 'grad', None)))
        for got, expected in zip(found[1], found[0]):
            assert (got is None) == (expected is None)
            if expected is not None:
                assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert jitted.cache_info().misses == 4


def _matmul_relu(h, W):
    return F.matmul(F.relu(h), W) * 2


def test_an_input_with_a_creator_and_a_parameter_argument(rng):
    numpy.random.seed(0)
    link = L.Linear(4, 4)
    jitted = chainerjit.jit(_matmul_relu)
    for _ in range(3):
        x = _x(rng)
        found = []
        for fn in (_matmul_relu, jitted):
            link.cleargrads()
            v = chainer.Variable(x.copy())
            out = fn(link(v) * 3, link.W)
            F.sum(out * out).backward()
            found.append((out.array, v.grad, link.W.grad.copy(),
                          link.b.grad.copy()))
        for got, expected in zip(found[1], found[0]):
            assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    _assert_compiled(jitted, 2)
