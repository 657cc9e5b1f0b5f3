"""Adversarial differential tests of the arena
(``chainerjit/backend/arena.py``): how long its buffers' contents live.

Each program computes values that may go into arena buffers and then tries
to let one of them (or memory shared with it) outlive the call: returned
as a view or inside a container, assigned to a link, reported, kept by a
user's FunctionNode, changed by NumPy through ``.array``, held in a
persistent value or a global list; other dtypes, shapes and layouts, and
many values sharing few buffers. Every result is compared with eager
Chainer's right away *and again after all later calls* (a result in an
arena buffer would be overwritten by the next call). The checkers here
are shared with the arena's loop, training and concurrency tests.
"""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from chainerjit.backend import arena


pytestmark = pytest.mark.adversarial

RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(autouse=True)
def _arena_on(monkeypatch):
    """These tests are about the arena: on whatever the environment says."""
    monkeypatch.setenv('CHAINERJIT_ARENA', '1')


# --- helpers -----------------------------------------------------------------

def _dis(jitted):
    return '\n'.join(p.dis() for p in testing.programs(jitted))


def _uses_arena(jitted):
    return '(arena' in _dis(jitted)


def _arrays(rng, *shapes, calls=4, dtype=numpy.float32):
    return [tuple(rng.standard_normal(s).astype(dtype) for s in shapes)
            for _ in range(calls)]


def _copy_leaves(result):
    leaves = []
    chainerjit.frontend.signature.flatten(result, leaves)
    return [numpy.array(chainerjit.frontend.signature.leaf_array(v))
            for v in leaves]


def _same_leaves(result, copies):
    leaves = []
    chainerjit.frontend.signature.flatten(result, leaves)
    assert len(leaves) == len(copies)
    for leaf, copy in zip(leaves, copies):
        numpy.testing.assert_array_equal(
            chainerjit.frontend.signature.leaf_array(leaf), copy)


def _check(fn, calls, expect_arena=True, rtol=RTOL, atol=ATOL,
           jitted=None, train=None, fallback=False):
    """Runs ``jit(fn)`` and ``fn`` on every call without backprop,
    compares each result with eager's at once, and every result again
    (and bit for bit with its copy) after all calls. ``fallback``: the
    jit may run the function eagerly (then only results are checked)."""
    jitted = jitted or chainerjit.jit(fn)
    held = []
    with warnings.catch_warnings():
        warnings.simplefilter('ignore' if fallback else 'error',
                              errors.FallbackWarning)
        with chainer.no_backprop_mode(), chainer.using_config(
                'train', chainer.config.train if train is None else train):
            for args in calls:
                expected = fn(*args)
                actual = jitted(*args)
                testing.assert_results_equal(actual, expected, rtol, atol)
                held.append((actual, expected, _copy_leaves(actual)))
    for actual, expected, copies in held:
        testing.assert_results_equal(actual, expected, rtol, atol)
        _same_leaves(actual, copies)
    if fallback:
        return jitted
    for entry in jitted.cache_entries():
        assert entry.fallback is None, entry.fallback
    assert jitted.cache_info().hits >= 2, jitted.cache_report()
    if expect_arena is not None:
        assert _uses_arena(jitted) == expect_arena, _dis(jitted)
    return jitted


def _base(x, w):
    """Values that go into the arena, and ``h``: one whose buffer an arena
    kernel computed (``a * 2.0`` into the arena, ``tanh`` in place, then
    ``+ 0.5`` into the arena) unless something makes it escape."""
    a = F.matmul(x, w)
    h = F.tanh(a * 2.0) + 0.5
    side = F.sum(F.relu(a - 1.0) * h, axis=1)
    return h, side


# --- results returned as views of arena-eligible values ----------------------

_VIEWS = {
    'reshape': lambda h: F.reshape(h, (-1,)),
    'reshape_same': lambda h: F.reshape(h, h.shape),
    'method_reshape': lambda h: h.reshape(8, -1),
    'transpose': lambda h: F.transpose(h),
    'T': lambda h: h.T,
    'swapaxes': lambda h: F.swapaxes(h, 0, 1),
    'getitem_row': lambda h: h[3],
    'getitem_slice': lambda h: h[1:, ::2],
    'getitem_none': lambda h: h[None],
    'getitem_ellipsis': lambda h: h[...],
    'getitem_negative_step': lambda h: h[::-1],
    'get_item': lambda h: F.get_item(h, (slice(None), 0)),
    'expand_dims': lambda h: F.expand_dims(h, 1),
    'squeeze': lambda h: F.squeeze(F.expand_dims(h, 0)),
    'flatten': lambda h: F.flatten(h),
    'identity': lambda h: F.identity(h),
    'cast_same': lambda h: F.cast(h, numpy.float32),
    'copy': lambda h: F.copy(h, -1),
    'rollaxis': lambda h: F.rollaxis(h, 1),
    'moveaxis': lambda h: F.moveaxis(h, 0, 1),
    'broadcast_to': lambda h: F.broadcast_to(h[:1], (3, 16, 32)),
    'array': lambda h: h.array,
    'array_view': lambda h: h.array.T,
    'rewrapped': lambda h: chainer.Variable(h.array),
    'concat_one': lambda h: F.concat([h], axis=0),
    'stack_one': lambda h: F.stack([h]),
    'where_same': lambda h: F.where(numpy.ones(h.shape, bool), h, h),
}


@pytest.mark.parametrize('view', sorted(_VIEWS))
def test_a_returned_view_of_an_arena_value_survives_later_calls(rng, view):
    def f(x, w):
        h, side = _base(x, w)
        return _VIEWS[view](h), side
    _check(f, _arrays(rng, (16, 32), (32, 32)))


@pytest.mark.parametrize('n', [2, 4])
def test_split_axis_outputs_returned(rng, n):
    def f(x, w):
        h, side = _base(x, w)
        return F.split_axis(h, n, axis=1), side
    _check(f, _arrays(rng, (16, 32), (32, 32)))


def test_separate_outputs_returned(rng):
    def f(x, w):
        h, side = _base(x, w)
        return F.separate(h[:4], axis=0), side
    _check(f, _arrays(rng, (16, 32), (32, 32)))


def test_one_returned_piece_of_a_split_and_the_rest_dies(rng):
    def f(x, w):
        h, side = _base(x, w)
        first, second = F.split_axis(h, 2, axis=1)
        return first, side + F.sum(second * 2.0, axis=1)
    _check(f, _arrays(rng, (16, 32), (32, 32)))


def test_returned_in_nested_containers(rng):
    def f(x, w):
        h, side = _base(x, w)
        g = F.softmax(h * 3.0)
        return {'h': [h[0], (F.transpose(g), h)], 'side': side,
                'n': F.reshape(g, (-1,))}
    _check(f, _arrays(rng, (16, 32), (32, 32)))


def test_the_same_value_returned_twice_and_as_a_view(rng):
    def f(x, w):
        h, side = _base(x, w)
        return h, h, h.T, side, side
    _check(f, _arrays(rng, (16, 32), (32, 32)))


def test_a_view_of_a_view_of_a_view(rng):
    def f(x, w):
        h, side = _base(x, w)
        v = F.reshape(F.transpose(h[::2]), (-1, 4))
        return F.expand_dims(v, 0)[:, 1:], side
    _check(f, _arrays(rng, (16, 32), (32, 32)))


@pytest.mark.parametrize('make', [
    lambda x, w, b: F.relu(F.linear(x, w, b)),
    lambda x, w, b: F.tanh(F.linear(x, w, b)),
    lambda x, w, b: F.sigmoid(F.linear(x, w, b)),
    lambda x, w, b: F.linear(x, w, b),
    lambda x, w, b: F.linear(x, w),
    lambda x, w, b: F.softmax(F.linear(x, w, b)),
    lambda x, w, b: F.layer_normalization(F.linear(x, w), b, b),
    lambda x, w, b: F.maximum(F.linear(x, w), F.linear(x, w, b)),
    lambda x, w, b: F.matmul(x, w, transb=True) / (F.linear(x, w) + 3.0),
    lambda x, w, b: 2.0 - F.linear(x, w) * 0.5,
    lambda x, w, b: 1.0 / (F.linear(x, w) ** 2 + 1.0),
], ids=['linear_relu', 'linear_tanh', 'linear_sigmoid', 'linear',
        'linear_nobias', 'softmax', 'layer_norm', 'maximum', 'div',
        'sub_from_constant', 'div_from_constant'])
def test_every_arena_kernel_returned_through_a_reshape(rng, make):
    def f(x, w, b):
        y = make(x, w, b)
        z = make(x * 1.5, w, b)  # arena-eligible, dies inside the call
        return F.reshape(y, (-1,)), F.sum(z * z, axis=0)
    _check(f, _arrays(rng, (20, 32), (32, 32), (32,)))


# --- results and state held across calls -------------------------------------

def test_old_results_unchanged_after_calls_with_other_inputs(rng):
    def f(x, w):
        h, side = _base(x, w)
        return F.transpose(h)[:, 1:], F.softmax(h * 2.0), side
    jitted = chainerjit.jit(f)
    calls = _arrays(rng, (16, 32), (32, 32), calls=6)
    with chainer.no_backprop_mode():
        held = [(jitted(*args), f(*args)) for args in calls]
        for args in calls[::-1]:
            jitted(*args)
    for actual, expected in held:
        testing.assert_results_equal(actual, expected)
    assert _uses_arena(jitted)


class _Remembering(chainer.Chain):
    """Assigns an arena-eligible value to itself and reports others."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(32, 64)
            self.l2 = L.Linear(64, 16)
        self.h = None

    def forward(self, x):
        h = F.tanh(self.l1(x) * 2.0)
        self.h = F.reshape(h, (-1,))  # a view of an arena-eligible value
        self.raw = (h * 3.0).array[::2]  # an array, not a Variable
        g = F.relu(self.l2(h) - 0.1)
        chainer.report({'g': g, 'gT': g.T}, self)
        return F.sum(g, axis=1)


def test_link_attributes_and_reports_survive_later_calls(rng):
    model = _Remembering()
    eager = model.copy(mode='copy')
    model.forward = chainerjit.jit(model.forward)
    held = []
    with chainer.no_backprop_mode():
        for x, in _arrays(rng, (8, 32), calls=5):
            outs = []
            for m in (model, eager):
                reporter = chainer.Reporter()
                reporter.add_observer('m', m)
                observation = {}
                with reporter.scope(observation):
                    y = m(x)
                outs.append((y, m.h, observation['m/g'],
                             observation['m/gT'], chainer.Variable(m.raw)))
            held.append(outs)
    for got, want in held:
        for a, e in zip(got, want):
            numpy.testing.assert_allclose(a.array, e.array, RTOL, ATOL)
    assert _uses_arena(model.forward)


class _Stateful(chainer.Chain):
    """State kept on the link across calls, as an RNN's state."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.lin = L.Linear(32, 32)
        self.state = None

    def forward(self, x):
        if self.state is None:
            s = F.tanh(self.lin(x))
        else:
            s = F.tanh(self.lin(x) + self.state * 0.5)
        self.state = s
        return F.sum(s * 3.0, axis=1)


def test_state_carried_between_calls_on_a_link(rng):
    model = _Stateful()
    eager = model.copy(mode='copy')
    model.forward = chainerjit.jit(model.forward)
    held = []
    with chainer.no_backprop_mode():
        for x, in _arrays(rng, (16, 32), calls=6):
            y, ey = model(x), eager(x)
            held.append((y, ey, model.state, eager.state))
            numpy.testing.assert_allclose(y.array, ey.array, RTOL, ATOL)
    for y, ey, s, es in held:
        numpy.testing.assert_allclose(y.array, ey.array, RTOL, ATOL)
        numpy.testing.assert_allclose(s.array, es.array, RTOL, ATOL)
    assert _uses_arena(model.forward)


# --- user FunctionNodes and old-style Functions (the generic path) ----------

_KEPT = []


class _KeepsItsInput(chainer.FunctionNode):
    """Keeps its input array after the call (a cache, a debugging list)."""

    def forward(self, inputs):
        x, = inputs
        _KEPT.append(x)
        return x * 2,

    def backward(self, indexes, grad_outputs):
        return grad_outputs[0] * 2,


def test_a_function_node_keeping_its_input(rng):
    del _KEPT[:]

    def f(x, w):
        h = F.tanh(F.matmul(x, w))
        y, = _KeepsItsInput().apply((h,))
        return F.sum(y, axis=1)
    calls = _arrays(rng, (16, 32), (32, 32))
    _check(f, calls, expect_arena=None)
    expected = [numpy.tanh(x.dot(w)) for x, w in calls]
    # eager and jit calls alternate: every second array is the jit's
    assert len(_KEPT) == 2 * len(calls)
    for got, want in zip(_KEPT[1::2], expected):
        numpy.testing.assert_allclose(got, want, RTOL, ATOL)


class _OldKeeps(chainer.Function):
    def forward(self, inputs):
        x, = inputs
        _KEPT.append(x)
        return x + 1,

    def backward(self, inputs, grad_outputs):
        return grad_outputs


def test_an_old_style_function_keeping_its_input(rng):
    del _KEPT[:]

    def f(x, w):
        h = F.sigmoid(F.matmul(x, w) * 0.5)
        return F.sum(_OldKeeps()(h), axis=0)
    calls = _arrays(rng, (16, 32), (32, 32))
    _check(f, calls, expect_arena=None)
    expected = [1 / (1 + numpy.exp(-0.5 * x.dot(w))) for x, w in calls]
    assert len(_KEPT) == 2 * len(calls)
    for got, want in zip(_KEPT[1::2], expected):
        numpy.testing.assert_allclose(got, want, RTOL, ATOL)


class _ReturnsItsInput(chainer.FunctionNode):
    def forward(self, inputs):
        x, = inputs
        return x, x.reshape(-1), x[::2]

    def backward(self, indexes, grad_outputs):
        raise NotImplementedError


def test_a_function_node_returning_its_input_and_views(rng):
    def f(x, w):
        h, side = _base(x, w)
        a, b, c = _ReturnsItsInput().apply((h,))
        return a, b, c, side
    _check(f, _arrays(rng, (16, 32), (32, 32)))


class _OldIdentity(chainer.Function):
    def forward(self, inputs):
        return inputs[0], inputs[0].T

    def backward(self, inputs, grad_outputs):
        return grad_outputs[0] + grad_outputs[1].T,


def test_an_old_style_function_returning_its_input(rng):
    def f(x, w):
        h, side = _base(x, w)
        a, b = _OldIdentity()(h)
        return a, b, side
    _check(f, _arrays(rng, (16, 32), (32, 32)))


class _ScaleInPlace(chainer.FunctionNode):
    """Writes into its input (bad practice, but eager allows it)."""

    def forward(self, inputs):
        x, = inputs
        x *= 2
        return x,


def test_a_function_node_writing_into_its_input(rng):
    def f(x, w):
        h = F.matmul(x, w) + 1.0
        y, = _ScaleInPlace().apply((h,))
        return F.tanh(y) * 3.0, F.sum(h, axis=1)
    # The self-check sees the write (it replays the node) and the
    # signature runs eagerly.
    _check(f, _arrays(rng, (16, 32), (32, 32)), fallback=True)


def test_forget_returns_and_keeps(rng):
    def f(x, w):
        h = F.forget(lambda a, b: F.tanh(F.matmul(a, b) * 2.0), x, w)
        return h.T, F.sum(F.relu(F.matmul(x, w) - 0.5) * 2.0, axis=1)
    _check(f, _arrays(rng, (16, 32), (32, 32)))


# --- NumPy on ``.array`` in the forward --------------------------------------

def test_numpy_views_of_arena_values_returned(rng):
    def f(x, w):
        h, side = _base(x, w)
        a = h.array
        return a.reshape(-1), a[2:5], numpy.transpose(a), side
    _check(f, _arrays(rng, (16, 32), (32, 32)))


def test_numpy_in_place_on_an_arena_value(rng):
    def f(x, w):
        h = F.tanh(F.matmul(x, w) * 2.0)
        a = h.array
        a *= 3.0
        a += 1.0
        return F.sum(chainer.Variable(a) * 2.0, axis=1), h[0]
    _check(f, _arrays(rng, (16, 32), (32, 32)), fallback=True)


def test_numpy_in_place_between_two_readers(rng):
    def f(x, w):
        h = F.matmul(x, w) * 2.0
        first = F.sum(h * 1.5, axis=0)
        h.array[...] = numpy.abs(h.array)
        second = F.sum(h * 1.5, axis=0)
        return first, second, F.sum(F.relu(h - 1.0) + 1.0, axis=1)
    _check(f, _arrays(rng, (16, 32), (32, 32)), fallback=True)


def test_numpy_mask_from_an_arena_value(rng):
    def f(x, w):
        h = F.matmul(x, w) * 2.0
        mask = h.array > 0
        g = F.tanh(h + 1.0)
        return F.where(mask, g, F.relu(h - 1.0) * 3.0)
    _check(f, _arrays(rng, (16, 32), (32, 32)))


# --- dtypes, shapes, layouts -------------------------------------------------

@pytest.mark.parametrize('dtype,rtol,atol', [
    (numpy.float64, 1e-12, 1e-12), (numpy.float16, 1e-2, 1e-2)])
def test_other_dtypes(rng, dtype, rtol, atol):
    def f(x, w, b):
        h = F.relu(F.linear(x, w, b))
        g = F.softmax(h * 0.5 + 1.0)
        k = F.layer_normalization(F.matmul(g, w.T) - h, b, b)
        return k.T, F.sum(F.sigmoid(k) * g, axis=1)
    calls = [(x.astype(dtype), w.astype(dtype) * 0.2, b.astype(dtype))
             for x, w, b in _arrays(rng, (24, 32), (32, 32), (32,))]
    _check(f, calls, rtol=rtol, atol=atol)


def test_mixed_dtypes_do_not_use_mismatched_buffers(rng):
    def f(x, y):
        a = F.tanh(x * 2.0)  # float64
        b = F.tanh(y * 2.0)  # float32
        c = F.cast(b, numpy.float64) + a
        return F.reshape(c, (-1,)), F.sum(b * b, axis=0)
    calls = [(x.astype(numpy.float64), y)
             for x, y in _arrays(rng, (16, 32), (16, 32))]
    _check(f, calls)


@pytest.mark.parametrize('size', [255, 256, 257, 512])
def test_at_the_size_threshold(rng, size):
    def f(x):
        a = x * 2.0
        b = F.tanh(a) + 1.0
        return F.reshape(b, (-1,))[::2], F.sum(b * a)
    jitted = _check(f, _arrays(rng, (1, size)), expect_arena=None)
    dis = _dis(jitted)
    assert ('(arena' in dis) == (size * 4 >= arena.MIN_BYTES), dis


@pytest.mark.parametrize('shapes', [
    ((16, 1), (1, 64)), ((1, 64), (16, 64)), ((16, 64), (64,)),
    ((4, 1, 64), (1, 8, 1)), ((), (16, 64))])
@pytest.mark.parametrize('op', ['add', 'mul', 'max'])
def test_broadcasting_binary_ops(rng, shapes, op):
    fn = {'add': lambda a, b: a + b, 'mul': lambda a, b: a * b,
          'max': F.maximum}[op]

    def f(x, y):
        xb, yb = F.broadcast(x, y) if op == 'max' else (x, y)
        h = fn(xb * 1.0, yb * 1.0)
        g = fn(xb, F.tanh(yb * 2.0))
        return h, F.sum(g * 2.0)
    calls = [tuple(rng.standard_normal(s).astype(numpy.float32)
                   for s in shapes) for _ in range(4)]
    _check(f, calls, expect_arena=None)


@pytest.mark.parametrize('layout', ['fortran', 'strided', 'transposed'])
def test_inputs_of_unusual_layouts(rng, layout):
    def f(x, w, b):
        h = F.relu(F.linear(x, w, b))
        g = F.softmax(h * 2.0, axis=0)
        return g, F.sum(F.matmul(g, w) * F.tanh(x), axis=0)

    def make(x):
        if layout == 'fortran':
            return numpy.asfortranarray(x)
        if layout == 'strided':
            return numpy.repeat(x, 2, axis=1)[:, ::2]
        return numpy.ascontiguousarray(x.T).T
    calls = [(make(x), w, b)
             for x, w, b in _arrays(rng, (24, 32), (32, 32), (32,))]
    _check(f, calls)


@pytest.mark.parametrize('batch', [1, 64, 65, 130])
def test_linear_batch_sizes_around_the_weight_first_switch(rng, batch):
    def f(x, w, b):
        h = F.tanh(F.linear(x, w, b))
        k = F.linear(h, w)  # no bias
        return h[::-1], F.sum(F.sigmoid(k) * 2.0, axis=1)
    _check(f, _arrays(rng, (batch, 32), (32, 32), (32,)),
           expect_arena=batch * 32 * 4 >= arena.MIN_BYTES)


def test_batched_matmul_with_broadcast_and_transposes(rng):
    def f(a, b):
        p = F.matmul(a, b, transb=True)  # (2, 3, 8, 8) via broadcasting
        q = F.matmul(p, b[0], transa=True)
        return F.softmax(p, axis=3), F.sum(F.tanh(q) * 0.5, axis=(2, 3))
    calls = _arrays(rng, (2, 1, 8, 16), (3, 8, 16))
    _check(f, calls)


def test_integer_numpy_arithmetic(rng):
    # NumPy on integer arrays is recorded (Chainer refuses integer Mul).
    def f(a, b):
        c = a * b + a
        d = c * c - b
        return F.reshape(d, (-1,)), c[0]
    calls = [(rng.randint(-5, 5, (16, 32)).astype(numpy.int32),
              rng.randint(-5, 5, (16, 32)).astype(numpy.int32))
             for _ in range(4)]
    _check(f, calls, rtol=0, atol=0, expect_arena=None)


# --- many values sharing few buffers -----------------------------------------

def test_a_long_chain_with_buffers_reused_many_times(rng):
    def f(x, w):
        h = x
        outs = []
        for k in range(12):  # over a static list: unrolled
            h = F.tanh(F.matmul(h, w) * 0.5 + float(k) / 10)
            if k % 5 == 4:
                outs.append(h[:, :3])
        return outs, F.sum(h * h, axis=1)
    jitted = _check(f, _arrays(rng, (16, 32), (32, 32)))
    entry, = jitted.cache_entries()
    assert len(entry.program.arena) >= 1


def test_values_of_different_sizes_share_buffers(rng):
    def f(x, w1, w2):
        small = F.tanh(F.matmul(x, w1))  # 16 x 16
        big = F.relu(F.matmul(small, w2))  # 16 x 64
        small2 = F.sigmoid(F.matmul(big, w2.T) * 2.0)  # 16 x 16
        big2 = F.matmul(small2, w2) + big
        small3 = F.matmul(big2, w2.T) - small2
        return small3, F.sum(big2 * 0.5, axis=0), small[0]
    _check(f, _arrays(rng, (16, 32), (32, 16), (16, 64)))


def test_attention_block_results_held(rng):
    from examples import models
    block = models.EncoderBlock(d_model=32, n_heads=4, d_ff=64)
    with chainer.using_config('train', False):
        _check(block.forward, _arrays(rng, (2, 16, 32)))


# --- persistent values -------------------------------------------------------

class _Persistent(chainer.Chain):

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.lin = L.Linear(32, 32)
        self.add_persistent('scale', numpy.full((16, 32), 0.5, 'f'))

    def forward(self, x):
        h = F.tanh(self.lin(x) * self.scale)
        return h * 2.0, F.reshape(self.scale * 1.0, (-1,))


def test_links_with_persistent_values(rng):
    model = _Persistent()
    eager = model.copy(mode='copy')
    model.forward = chainerjit.jit(model.forward)
    held = []
    with chainer.no_backprop_mode():
        for k, (x,) in enumerate(_arrays(rng, (16, 32), calls=5)):
            for m in (model, eager):
                m.scale[...] = 0.1 * (k + 1)
            held.append((model(x), eager(x)))
    for got, want in held:
        testing.assert_results_equal(got, want)
    numpy.testing.assert_array_equal(model.scale, eager.scale)
    assert _uses_arena(model.forward)


def test_arguments_are_never_written(rng):
    def f(x, w):
        h = F.tanh(F.matmul(x, w) * 2.0)
        return F.sum(h, axis=1), F.relu(x) * 1.0, x
    calls = _arrays(rng, (16, 32), (32, 32))
    originals = [tuple(a.copy() for a in c) for c in calls]
    _check(f, calls)
    for c, o in zip(calls, originals):
        for a, b in zip(c, o):
            numpy.testing.assert_array_equal(a, b)


def test_disabling_the_arena_gives_the_same_results(monkeypatch, rng):
    def f(x, w):
        h, side = _base(x, w)
        return F.softmax(h * 2.0)[0], side
    calls = _arrays(rng, (16, 32), (32, 32))
    results = {}
    for setting in ('1', '0'):
        monkeypatch.setenv('CHAINERJIT_ARENA', setting)
        jitted = _check(f, calls, expect_arena=setting == '1')
        with chainer.no_backprop_mode():
            results[setting] = [jitted(*args) for args in calls]
    for a, b in zip(results['1'], results['0']):
        for x, y in zip(a, b):
            numpy.testing.assert_array_equal(x.array, y.array)


# --- Python state the forward changes ----------------------------------------

_HISTORY = []


def test_a_global_list_appended_to_in_the_forward(rng):
    def f(x, w):
        h = F.tanh(F.matmul(x, w) * 2.0)
        _HISTORY.append(h)
        return F.sum(h * 3.0, axis=1)
    jitted = chainerjit.jit(f)
    del _HISTORY[:]
    calls = _arrays(rng, (16, 32), (32, 32))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        with chainer.no_backprop_mode():
            for x, w in calls:
                f(x, w)
                jitted(x, w)
    assert len(_HISTORY) == 2 * len(calls)
    for k, (x, w) in enumerate(calls):
        want = numpy.tanh(x.dot(w) * 2.0)
        for got in _HISTORY[2 * k:2 * k + 2]:
            numpy.testing.assert_allclose(got.array, want, RTOL, ATOL)


# --- the arena gives the same bits -------------------------------------------

@pytest.mark.parametrize('case', ['float16', 'float64', 'fortran', 'batch1',
                                  'column'])
def test_same_bits_with_and_without_the_arena(monkeypatch, rng, case):
    dtype = {'float16': numpy.float16, 'float64': numpy.float64}.get(
        case, numpy.float32)
    n_in = 1 if case == 'column' else 32
    batch = 1 if case == 'batch1' else 24

    def f(x, w, b):
        h = F.relu(F.linear(x, w, b))  # (batch, 512)
        g = F.softmax(h * 0.5 + 1.0)
        k = F.layer_normalization(F.linear(g, w.T) - x[:, :1], b[:n_in],
                                  b[:n_in])
        return k.T, F.sum(F.sigmoid(F.linear(k, w)) * g, axis=1)
    calls = []
    for _ in range(3):
        x = rng.standard_normal((batch, n_in)).astype(dtype)
        if case == 'fortran':
            x = numpy.asfortranarray(x)
        calls.append((x, (rng.standard_normal((512, n_in)) * 0.1).astype(
            dtype), rng.standard_normal(512).astype(dtype)))
    results = {}
    for setting in ('1', '0'):
        monkeypatch.setenv('CHAINERJIT_ARENA', setting)
        # (layer normalization amplifies the rounding of the products,
        # which the jit sums in another order than eager)
        jitted = _check(f, calls, expect_arena=setting == '1',
                        rtol=1e-2 if case == 'float16' else 1e-4,
                        atol=1e-2 if case == 'float16' else 1e-4)
        with chainer.no_backprop_mode():
            results[setting] = [jitted(*args) for args in calls]
    for a, b in zip(results['1'], results['0']):
        for x, y in zip(a, b):
            numpy.testing.assert_array_equal(x.array, y.array)
