"""Adversarial tests for the optimisation passes (hoist, CSE, simplify,
fuse), codegen's memory reuse and the fast optimizer update."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing


def _rand(rng, *shape, dtype=numpy.float32):
    return rng.standard_normal(shape).astype(dtype)


def _check_unchanged(fn, calls, **kw):
    """Like assert_jit_matches_eager, and the arguments stay as given."""
    originals = [tuple(a.copy() for a in call) for call in calls]
    jitted = testing.assert_jit_matches_eager(fn, calls, **kw)
    for call, original in zip(calls, originals):
        for a, b in zip(call, original):
            numpy.testing.assert_array_equal(a, b)
    return jitted


def _seq_calls(rng, lengths, *rest, batch=3, feat=4, axis=0):
    calls = []
    for n in lengths:
        shape = (n, batch, feat) if axis == 0 else (batch, n, feat)
        calls.append((_rand(rng, *shape),) + tuple(
            _rand(rng, *s) for s in rest))
    return calls


# --- memory reuse -----------------------------------------------------------

def test_returned_product_also_fed_to_relu(rng):
    def f(x, w):
        h = F.matmul(x, w)
        return h, F.relu(h)
    _check_unchanged(f, [(_rand(rng, 3, 4), _rand(rng, 4, 5))
                         for _ in range(3)])


def test_same_array_passed_twice(rng):
    def f(x, y):
        return F.relu(x) + F.tanh(y), x * y
    calls = []
    for _ in range(3):
        a = _rand(rng, 3, 4)
        calls.append((a, a))
    _check_unchanged(f, calls)


def test_same_array_passed_twice_and_added(rng):
    def f(x, y):
        return F.relu(x + y) * 2.0
    calls = []
    for _ in range(3):
        a = _rand(rng, 3, 4)
        calls.append((a, a))
    _check_unchanged(f, calls)


def test_parameter_used_directly_in_relu():
    numpy.random.seed(0)

    class M(chainer.Chain):
        def __init__(self):
            super(M, self).__init__()
            with self.init_scope():
                self.lin = L.Linear(4, 4)

        def forward(self, x):
            return F.relu(self.lin.W) + F.tanh(self.lin.b) + F.sigmoid(x)

    model, twin = M(), M()
    twin.copyparams(model)
    twin.forward = chainerjit.jit(twin.forward)
    rng = numpy.random.RandomState(3)
    w0 = model.lin.W.array.copy()
    with chainer.no_backprop_mode():
        for _ in range(3):
            x = _rand(rng, 4, 4)
            numpy.testing.assert_allclose(twin(x).array, model(x).array,
                                          rtol=1e-6)
    numpy.testing.assert_array_equal(twin.lin.W.array, w0)


@pytest.mark.parametrize('view', ['index', 'reshape', 'transpose',
                                  'get_item', 'split', 'separate'])
def test_views_fed_to_inplace_ops(rng, view):
    def f(x, w):
        h = F.matmul(x, w)  # fresh
        if view == 'index':
            v = h[0]
        elif view == 'reshape':
            v = F.reshape(h, (5, 4))
        elif view == 'transpose':
            v = F.transpose(h)
        elif view == 'get_item':
            v = F.get_item(h, (slice(None), slice(0, 2)))
        elif view == 'split':
            v = F.split_axis(h, [2], axis=1)[0]
        else:
            v = F.separate(h, axis=0)[1]
        a = F.relu(v)
        b = F.tanh(v * 1.0)
        return a + b, h
    _check_unchanged(f, [(_rand(rng, 4, 4), _rand(rng, 4, 5))
                         for _ in range(3)])


def test_view_of_fresh_then_inplace_then_base_read(rng):
    def f(x, w):
        h = F.matmul(x, w)
        v = F.reshape(h, (20,))
        r = F.relu(v)
        return F.sum(h, axis=0) + F.sum(F.reshape(r, (4, 5)), axis=0)
    _check_unchanged(f, [(_rand(rng, 4, 4), _rand(rng, 4, 5))
                         for _ in range(3)])


def test_binary_inplace_with_broadcast(rng):
    def f(x, w, b):
        h = F.matmul(x, w)
        return F.relu(h + b) - F.broadcast_to(b, (3, 5)) * h
    _check_unchanged(f, [(_rand(rng, 3, 4), _rand(rng, 4, 5),
                          _rand(rng, 5)) for _ in range(3)])


def test_mixed_dtype_binary(rng):
    def f(x, y):
        h = F.sum(F.matmul(x, x), axis=0)
        return h * y
    calls = [(_rand(rng, 4, 4), _rand(rng, 4, dtype=numpy.float64))
             for _ in range(3)]
    calls = [(x, y.astype(numpy.float32)) for x, y in calls]
    _check_unchanged(f, calls)


def test_values_appended_in_loop_then_stacked(rng):
    def f(xs, w):
        h = xs[0] * 0
        out = []
        for t in range(xs.shape[0]):
            h = F.tanh(F.matmul(xs[t], w) + h)
            out.append(h)
            out.append(F.relu(h))
        return F.stack(out)
    calls = [(_rand(rng, n, 3, 4), _rand(rng, 4, 4)) for n in (3, 3, 7, 1)]
    _check_unchanged(f, calls)


def test_values_appended_in_loop_with_grads(rng):
    def f(xs, w):
        h = xs[0] * 0
        out = []
        for t in range(xs.shape[0]):
            h = F.relu(F.matmul(xs[t], w) + h)
            out.append(F.sigmoid(h))
        return F.stack(out), h
    calls = [(_rand(rng, n, 3, 4), _rand(rng, 4, 4)) for n in (3, 3, 7, 1)]
    testing.assert_jit_grads_match_eager(f, calls, rtol=1e-4, atol=1e-5)


def test_saved_for_backward_not_overwritten(rng):
    def f(x, w):
        h = F.matmul(x, w)
        s = F.sigmoid(h)
        t = F.tanh(s)
        return F.relu(t) * s
    testing.assert_jit_grads_match_eager(
        f, [(_rand(rng, 3, 4), _rand(rng, 4, 5)) for _ in range(3)])


# --- hoisting ----------------------------------------------------------------

class _RNN(chainer.Chain):

    def __init__(self, mode, nobias=False, dtype=numpy.float32):
        super(_RNN, self).__init__()
        self.mode = mode
        init = chainer.initializers.Normal(dtype=dtype)
        with self.init_scope():
            self.inp = L.Linear(4, 6, nobias=nobias, initialW=init,
                                initial_bias=None if nobias else
                                chainer.initializers.Zero(dtype))
            self.rec = L.Linear(6, 6, nobias=True, initialW=init)
            self.inp2 = L.Linear(4, 6, initialW=init,
                                 initial_bias=chainer.initializers.Zero(
                                     dtype))

    def forward(self, xs):
        mode = self.mode
        xp = self.xp
        T = xs.shape[1] if mode == 'axis1' else xs.shape[0]
        B = xs.shape[0] if mode == 'axis1' else xs.shape[1]
        h = xp.zeros((B, 6), xs.dtype)
        if mode == 'axis1':
            for t in range(T):
                h = F.tanh(self.inp(xs[:, t]) + self.rec(h))
        elif mode == 'reversed':
            for t in reversed(range(T)):
                h = F.tanh(self.inp(xs[t]) + self.rec(h))
        elif mode == 'reversed_index':
            for t in range(T):
                h = F.tanh(self.inp(xs[T - 1 - t]) + self.rec(h))
        elif mode == 'next':
            for t in range(T - 1):
                h = F.tanh(self.inp(xs[t + 1]) + self.rec(h))
        elif mode == 'xs_after':
            for t in range(T):
                h = F.tanh(self.inp(xs[t]) + self.rec(h))
            h = h + F.sum(xs, axis=(0, 2))[:, None]
        elif mode == 'xs_in_body':
            for t in range(T):
                h = F.tanh(self.inp(xs[t]) + self.rec(h)) + \
                    F.sum(xs) * 0.01
        elif mode == 'two_loops':
            for t in range(T):
                h = F.tanh(self.inp(xs[t]) + self.rec(h))
            for t in range(T):
                h = F.relu(self.inp(xs[t]) + self.rec(h))
        elif mode == 'two_projections':
            for t in range(T):
                h = F.tanh(self.inp(xs[t]) + self.inp2(xs[t]) +
                           self.rec(h))
        elif mode == 'relu_proj':
            for t in range(T):
                h = F.relu(self.inp(xs[t])) + F.tanh(self.rec(h))
        elif mode == 'nested':
            for t in range(T):
                for s in range(T):
                    h = F.tanh(self.inp(xs[s]) + self.rec(h))
        elif mode == 'returned_projection':
            ps = []
            for t in range(T):
                p = self.inp(xs[t])
                h = F.tanh(p + self.rec(h))
                ps.append(p)
            return h, F.stack(ps)
        elif mode == 'get_item':
            for t in range(T):
                h = F.tanh(self.inp(F.get_item(xs, t)) + self.rec(h))
        elif mode == 'projection_in_place':
            for t in range(T):
                p = self.inp(xs[t])
                h = F.tanh(p * 2.0 + self.rec(h))
        return h


MODES = ['axis1', 'reversed', 'reversed_index', 'next', 'xs_after',
         'xs_in_body', 'two_loops', 'two_projections', 'relu_proj',
         'nested', 'returned_projection', 'get_item',
         'projection_in_place']


def _rnn_pair(mode, **kw):
    numpy.random.seed(0)
    eager, jitted = _RNN(mode, **kw), _RNN(mode, **kw)
    jitted.copyparams(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    return eager, jitted


def _compare_rnn(eager, jitted, shapes, as_variable, dtype=numpy.float32,
                 rtol=1e-5, atol=1e-6):
    rng = numpy.random.RandomState(1)
    for shape in shapes:
        xs = rng.standard_normal(shape).astype(dtype)
        original = xs.copy()
        results, grads = [], []
        for model in (eager, jitted):
            model.cleargrads()
            x = chainer.Variable(xs.copy()) if as_variable else xs
            y = model(x)
            ys = y if isinstance(y, tuple) else (y,)
            loss = sum(F.sum(v * v) for v in ys)
            loss.backward()
            results.append([v.array for v in ys])
            grads.append([p.grad for _, p in sorted(model.namedparams())] +
                         ([x.grad] if as_variable else []))
        numpy.testing.assert_array_equal(xs, original)
        for a, e in zip(results[1], results[0]):
            testing.assert_results_equal(a, e, rtol, atol)
        for a, e in zip(grads[1], grads[0]):
            if e is None:
                assert a is None
            else:
                testing.assert_results_equal(a, e, rtol, atol)
    with chainer.no_backprop_mode():
        for shape in shapes:
            xs = rng.standard_normal(shape).astype(dtype)
            original = xs.copy()
            e, a = eager(xs), jitted(xs)
            numpy.testing.assert_array_equal(xs, original)
            es = e if isinstance(e, tuple) else (e,)
            as_ = a if isinstance(a, tuple) else (a,)
            for av, ev in zip(as_, es):
                testing.assert_results_equal(av, ev, rtol, atol)


@pytest.mark.parametrize('mode', MODES)
def test_hoisting_variants(mode):
    # xs is an array for half the modes and a Variable (its gradient
    # compared) for the other half.
    as_variable = MODES.index(mode) % 2 == 1
    eager, jitted = _rnn_pair(mode)
    lengths = {'next': (3, 3, 5, 2), 'nested': (2, 2, 3, 1)}.get(
        mode, (3, 3, 5, 1))
    shapes = [(2, n, 4) if mode == 'axis1' else (n, 2, 4) for n in lengths]
    _compare_rnn(eager, jitted, shapes, as_variable, rtol=1e-4, atol=1e-5)


def test_hoisting_without_bias():
    eager, jitted = _rnn_pair('reversed', nobias=True)
    _compare_rnn(eager, jitted, [(n, 2, 4) for n in (3, 3, 7, 1)], True,
                 rtol=1e-4, atol=1e-5)


def test_hoisting_float64():
    eager, jitted = _rnn_pair('axis1', dtype=numpy.float64)
    _compare_rnn(eager, jitted, [(2, n, 4) for n in (3, 3, 7, 1)], True,
                 dtype=numpy.float64, rtol=1e-10, atol=1e-12)


def test_hoisting_with_xs_read_as_array_and_grad_flag(rng):
    def f(xs, w, b):
        h = F.matmul(xs[0], w) * 0
        for t in range(xs.shape[0]):
            h = F.tanh(F.linear(xs[t], w.T, b) + h)
        return h
    calls = [(_rand(rng, n, 3, 4), _rand(rng, 4, 4), _rand(rng, 4))
             for n in (3, 3, 7, 1)]
    _check_unchanged(f, calls, rtol=1e-4, atol=1e-5)
    testing.assert_jit_grads_match_eager(f, calls, rtol=1e-4, atol=1e-5)


def test_hoisting_weight_is_loop_carried(rng):
    def f(xs, w):
        h = F.matmul(xs[0], w) * 0
        for t in range(xs.shape[0]):
            h = F.tanh(F.linear(xs[t], w) + h)
            w = w * 0.5
        return h
    calls = [(_rand(rng, n, 3, 4), _rand(rng, 4, 4)) for n in (3, 3, 7, 1)]
    testing.assert_jit_matches_eager(f, calls, rtol=1e-4, atol=1e-5)
    testing.assert_jit_grads_match_eager(f, calls, rtol=1e-4, atol=1e-5)


def test_hoisting_xs_modified_in_loop(rng):
    def f(xs, w):
        h = F.matmul(xs[0], w) * 0
        for t in range(xs.shape[0]):
            h = F.tanh(F.linear(xs[t], w) + h)
            xs = xs * 0.5
        return h
    calls = [(_rand(rng, n, 3, 4), _rand(rng, 4, 4)) for n in (3, 3, 7, 1)]
    testing.assert_jit_matches_eager(f, calls, rtol=1e-4, atol=1e-5)


# --- CSE ---------------------------------------------------------------------

def test_cse_two_get_items_with_different_indices(rng):
    def f(x):
        return F.relu(F.get_item(x, 0)) + F.relu(F.get_item(x, 1)) + \
            F.relu(x[2]) * F.relu(x[2])
    _check_unchanged(f, [(_rand(rng, 3, 4),) for _ in range(3)])


def test_cse_dropout_twice_in_train_mode(rng):
    def f(x):
        with chainer.using_config('train', True):
            a = F.dropout(x, 0.5)
            b = F.dropout(x, 0.5)
        return a, b
    jitted = chainerjit.jit(f)
    with chainer.no_backprop_mode():
        for _ in range(3):
            a, b = jitted(_rand(rng, 50, 50) + 10)
            assert not numpy.array_equal(a.array, b.array)


def test_cse_different_reshapes_and_transposes(rng):
    def f(x):
        return (F.transpose(x, (1, 0, 2)) * 1.0, F.transpose(x, (0, 2, 1)),
                F.reshape(x, (6, 4)), F.reshape(x, (4, 6)),
                F.sum(x, axis=0), F.sum(x, axis=1),
                F.sum(x, axis=0, keepdims=True))
    _check_unchanged(f, [(_rand(rng, 2, 3, 4),) for _ in range(3)])


def test_cse_leaky_relu_different_slopes(rng):
    def f(x):
        return F.leaky_relu(x, 0.1) + F.leaky_relu(x, 0.3), \
            F.clip(x, -0.5, 0.5) - F.clip(x, -0.2, 0.2)
    _check_unchanged(f, [(_rand(rng, 3, 4),) for _ in range(3)])


def test_cse_same_op_inside_loop_and_outside(rng):
    def f(xs, w):
        a = F.tanh(F.matmul(xs[0], w))
        h = a
        for t in range(xs.shape[0]):
            h = h + F.tanh(F.matmul(xs[0], w)) + F.tanh(F.matmul(xs[t], w))
        return h, a
    calls = [(_rand(rng, n, 3, 4), _rand(rng, 4, 4)) for n in (3, 3, 7, 1)]
    _check_unchanged(f, calls, rtol=1e-4, atol=1e-5)
    testing.assert_jit_grads_match_eager(f, calls, rtol=1e-4, atol=1e-5)


def test_cse_duplicates_with_grads(rng):
    def f(x, w):
        a = F.relu(F.linear(x, w))
        b = F.relu(F.linear(x, w))
        return a * b + F.sigmoid(F.linear(x, w))
    testing.assert_jit_grads_match_eager(
        f, [(_rand(rng, 3, 4), _rand(rng, 5, 4)) for _ in range(3)])


# --- simplify ----------------------------------------------------------------

def test_reshape_chain_returned_at_several_points(rng):
    def f(x):
        a = F.reshape(x, (6, 4))
        b = F.reshape(a, (2, 12))
        c = F.expand_dims(b, 0)
        d = F.squeeze(c, 0)
        e = F.reshape(d, (2, 3, 4))
        return a, b, c, d, e, F.relu(e)
    _check_unchanged(f, [(_rand(rng, 2, 3, 4),) for _ in range(3)])


def test_transpose_chain_returned_at_several_points(rng):
    def f(x):
        a = F.transpose(x, (1, 2, 0))
        b = F.swapaxes(a, 0, 2)
        c = F.rollaxis(b, 2)
        d = F.moveaxis(c, 0, -1)
        e = F.transpose(d)
        return a, b, c, d, e, F.tanh(e)
    _check_unchanged(f, [(_rand(rng, 2, 3, 4),) for _ in range(3)])
    testing.assert_jit_grads_match_eager(
        f, [(_rand(rng, 2, 3, 4),) for _ in range(3)])


def test_identity_views_with_grads(rng):
    def f(x):
        a = F.transpose(F.transpose(x, (1, 0)), (1, 0))
        b = F.reshape(F.reshape(x, (12,)), (3, 4))
        return F.relu(a) + F.tanh(b), a
    _check_unchanged(f, [(_rand(rng, 3, 4),) for _ in range(3)])
    testing.assert_jit_grads_match_eager(
        f, [(_rand(rng, 3, 4),) for _ in range(3)])


def test_identity_view_returned_is_fresh_object(rng):
    def f(x):
        return F.reshape(x, (3, 4)), F.transpose(x, (0, 1))
    _check_unchanged(f, [(_rand(rng, 3, 4),) for _ in range(3)])


def test_transpose_then_reshape_not_folded(rng):
    def f(x):
        a = F.transpose(x)
        b = F.reshape(a, (12,))
        c = F.transpose(F.reshape(b, (4, 3)))
        return F.relu(c) * 1.0, b
    _check_unchanged(f, [(_rand(rng, 3, 4),) for _ in range(3)])


def test_reshape_with_minus_one_chain(rng):
    def f(x):
        return F.reshape(F.reshape(x, (-1, 2)), (x.shape[0], -1))
    _check_unchanged(f, [(_rand(rng, 3, 4),) for _ in range(2)] +
                     [(_rand(rng, 5, 4),) for _ in range(2)])


def test_view_chain_in_loop(rng):
    def f(xs):
        h = F.reshape(xs[0], (-1,)) * 0
        for t in range(xs.shape[0]):
            h = h + F.reshape(F.transpose(F.transpose(xs[t])), (-1,))
        return h
    calls = [(_rand(rng, n, 3, 4),) for n in (3, 3, 7, 1)]
    _check_unchanged(f, calls)
    testing.assert_jit_grads_match_eager(f, calls)


# --- fuse --------------------------------------------------------------------

def test_fused_product_also_returned(rng):
    def f(x, w, b):
        p = F.linear(x, w, b)
        return F.relu(p), p
    _check_unchanged(f, [(_rand(rng, 3, 4), _rand(rng, 5, 4),
                          _rand(rng, 5)) for _ in range(3)])
    testing.assert_jit_grads_match_eager(
        f, [(_rand(rng, 3, 4), _rand(rng, 5, 4), _rand(rng, 5))
            for _ in range(3)])


@pytest.mark.parametrize('act', [F.relu, F.tanh, F.sigmoid])
@pytest.mark.parametrize('rows', [1, 64, 65])
def test_fused_activation_grads(rng, act, rows):
    def f(x, w, b):
        return act(F.linear(x, w, b))
    calls = [(_rand(rng, rows, 4), _rand(rng, 5, 4), _rand(rng, 5))
             for _ in range(3)]
    _check_unchanged(f, calls)
    testing.assert_jit_grads_match_eager(f, calls)


def test_fused_chained_activations(rng):
    def f(x, w):
        return F.sigmoid(F.tanh(F.relu(F.linear(x, w))))
    calls = [(_rand(rng, 3, 4), _rand(rng, 5, 4)) for _ in range(3)]
    _check_unchanged(f, calls)
    testing.assert_jit_grads_match_eager(f, calls)


def test_fused_3d_linear(rng):
    def f(x, w, b):
        return F.tanh(F.linear(x, w, b, n_batch_axes=2))
    calls = [(_rand(rng, 2, 3, 4), _rand(rng, 5, 4), _rand(rng, 5))
             for _ in range(3)]
    _check_unchanged(f, calls)
    testing.assert_jit_grads_match_eager(f, calls)


def test_double_backprop_through_fused_is_clear_error(rng):
    def f(x, w):
        return F.tanh(F.linear(x, w))
    jitted = chainerjit.jit(f)
    x = _rand(rng, 3, 4)
    w = _rand(rng, 5, 4)
    results = []
    for fn in (f, jitted, jitted):
        xv = chainer.Variable(x.copy())
        wv = chainer.Variable(w.copy())
        y = fn(xv, wv)
        try:
            gx, = chainer.grad([F.sum(y)], [xv],
                               enable_double_backprop=True)
            F.sum(gx * gx).backward()
        except NotImplementedError as e:  # a clear error is acceptable
            assert fn is jitted and 'double backprop' in str(e)
            continue
        results.append(wv.grad)
    for r in results[1:]:
        numpy.testing.assert_allclose(r, results[0], rtol=1e-5, atol=1e-6)


# --- onnx --------------------------------------------------------------------

def test_fused_and_hoisted_export_to_onnx(rng):
    pytest.importorskip('onnxruntime')

    def f(xs, w, b):
        h = F.relu(F.linear(xs[0], w, b))
        for t in range(xs.shape[0]):
            h = F.tanh(F.linear(xs[t], w, b) + h)
        return F.sigmoid(F.linear(h, w, b))
    calls = [(_rand(rng, n, 3, 4), _rand(rng, 4, 4), _rand(rng, 4))
             for n in (3, 3, 5)]
    testing.assert_onnx_matches_eager(f, calls, rtol=1e-4, atol=1e-5)


# --- optimizers -------------------------------------------------------------

class _MLP(chainer.Chain):

    def __init__(self, dtype=numpy.float32):
        super(_MLP, self).__init__()
        init = chainer.initializers.Normal(dtype=dtype)
        with self.init_scope():
            self.l1 = L.Linear(5, 4, initialW=init,
                               initial_bias=chainer.initializers.Zero(dtype))
            self.l2 = L.Linear(4, 3, initialW=init,
                               initial_bias=chainer.initializers.Zero(dtype))

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


class _Two(chainer.Chain):

    def __init__(self):
        super(_Two, self).__init__()
        with self.init_scope():
            self.a = _MLP()
            self.b = _MLP()

    def forward(self, x):
        return self.a(x) + self.b(x)


def _opt_pair(make, setup=None, model_cls=_MLP, jit_children=False,
              **kw):
    numpy.random.seed(0)
    eager, jitted = model_cls(**kw), model_cls(**kw)
    jitted.copyparams(eager)
    if jit_children:
        jitted.a.forward = chainerjit.jit(jitted.a.forward)
        jitted.b.forward = chainerjit.jit(jitted.b.forward)
    else:
        jitted.forward = chainerjit.jit(jitted.forward)
    pairs = []
    for model in (eager, jitted):
        opt = make()
        opt.setup(model)
        if setup is not None:
            setup(opt, model)
        pairs.append((model, opt))
    return pairs


def _train(pairs, steps=4, dtype=numpy.float32, lossfun=False,
           between=None):
    rng = numpy.random.RandomState(1)
    for step in range(steps):
        x = rng.standard_normal((6, 5)).astype(dtype)
        t = rng.randint(0, 3, 6).astype(numpy.int32)
        for model, opt in pairs:
            if between is not None:
                between(step, opt, model)
            if lossfun:
                opt.update(lambda x, t: F.softmax_cross_entropy(
                    model(x), t), x, t)
            else:
                model.cleargrads()
                F.softmax_cross_entropy(model(x), t).backward()
                opt.update()
    (eager, eo), (jitted, jo) = pairs
    for (name, p), (_, q) in zip(sorted(eager.namedparams()),
                                 sorted(jitted.namedparams())):
        numpy.testing.assert_array_equal(q.array, p.array, err_msg=name)
    assert eo.t == jo.t


def test_optimizer_lossfun_form_with_args():
    _train(_opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01)),
           lossfun=True)


def test_optimizer_lr_changes_between_steps():
    def between(step, opt, model):
        opt.lr = 0.1 / (step + 1)
    _train(_opt_pair(lambda: chainer.optimizers.MomentumSGD(lr=0.1)),
           between=between)


def test_optimizer_adam_alpha_changes_between_steps():
    def between(step, opt, model):
        opt.hyperparam.alpha = 0.01 * (step + 1)
        if step == 2:
            model.l1.W.update_rule.hyperparam.alpha = 0.5
    _train(_opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01)),
           between=between)


def test_optimizer_rule_disabled():
    def setup(opt, model):
        model.l1.W.update_rule.enabled = False
    _train(_opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01),
                     setup=setup))


def test_optimizer_rule_disabled_midway():
    def between(step, opt, model):
        model.l2.b.update_rule.enabled = step % 2 == 0
    _train(_opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01)),
           between=between, steps=5)
    pairs = _opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01))
    _train(pairs, between=between, steps=5)
    (eager, _), (jitted, _) = pairs
    assert eager.l2.b.update_rule.t == jitted.l2.b.update_rule.t


def test_optimizer_hooks():
    def setup(opt, model):
        opt.add_hook(chainer.optimizer_hooks.WeightDecay(1e-3))
        opt.add_hook(chainer.optimizer_hooks.GradientClipping(0.1))
        opt.add_hook(chainer.optimizer_hooks.GradientHardClipping(-0.01,
                                                                  0.01))
        opt.add_hook(chainer.optimizer_hooks.Lasso(1e-3))
    _train(_opt_pair(lambda: chainer.optimizers.SGD(lr=0.1), setup=setup))


def test_optimizer_rule_hook():
    def setup(opt, model):
        model.l1.W.update_rule.add_hook(
            chainer.optimizer_hooks.WeightDecay(1e-2))
    _train(_opt_pair(lambda: chainer.optimizers.MomentumSGD(lr=0.1),
                     setup=setup))


def test_optimizer_fp16():
    _train(_opt_pair(lambda: chainer.optimizers.SGD(lr=0.1),
                     dtype=numpy.float16), dtype=numpy.float16)


def test_optimizer_fp16_fp32_update():
    def setup(opt, model):
        opt.use_fp32_update()
    _train(_opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01),
                     setup=setup, dtype=numpy.float16),
           dtype=numpy.float16)


def test_optimizer_loss_scaling():
    def setup(opt, model):
        opt.loss_scaling(scale=128.0)
    _train(_opt_pair(lambda: chainer.optimizers.SGD(lr=0.1), setup=setup))


def test_optimizer_two_jitted_children():
    pairs = _opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01),
                      model_cls=_Two, jit_children=True)
    _train(pairs)


def test_optimizer_zerograds_accumulate():
    def setup(opt, model):
        opt._use_cleargrads = False
    _train(_opt_pair(lambda: chainer.optimizers.MomentumSGD(lr=0.1),
                     setup=setup), lossfun=True)


def test_optimizer_param_without_grad():
    class M(_MLP):
        def __init__(self, **kw):
            super(M, self).__init__(**kw)
            with self.init_scope():
                self.unused = L.Linear(2, 2)
    _train(_opt_pair(lambda: chainer.optimizers.Adam(alpha=0.01),
                     model_cls=M))


def test_optimizer_new_target_after_setup():
    pairs = _opt_pair(lambda: chainer.optimizers.SGD(lr=0.1))
    _train(pairs, steps=2)
    numpy.random.seed(5)
    fresh = _MLP(), _MLP()
    fresh[1].copyparams(fresh[0])
    for (model, opt), new in zip(pairs, fresh):
        opt.setup(new)
    _train([(fresh[0], pairs[0][1]), (fresh[1], pairs[1][1])], steps=2)


# --- more memory reuse and hoisting probes -----------------------------------

def test_loop_carried_values_that_share_a_buffer(rng):
    def f(x, w):
        h = c = F.matmul(x, w)
        for t in range(x.shape[0]):
            h = F.relu(h) * 0.5
            c = c + h
        return h, c
    calls = [(_rand(rng, 3, 3), _rand(rng, 3, 3)) for _ in range(3)]
    _check_unchanged(f, calls)
    testing.assert_jit_grads_match_eager(f, calls)


def test_loop_initial_value_also_returned(rng):
    def f(xs, w):
        h = F.matmul(xs[0], w)
        keep = h
        for t in range(xs.shape[0]):
            h = F.tanh(h + xs[t])
        return h, keep
    calls = [(_rand(rng, n, 3, 3), _rand(rng, 3, 3)) for n in (3, 3, 6, 1)]
    _check_unchanged(f, calls)
    testing.assert_jit_grads_match_eager(f, calls)


@pytest.mark.parametrize('rows', [1, 64, 65])
def test_binary_ops_into_a_linear_product(rng, rows):
    def f(x, w, y):
        return F.linear(x, w) + y, F.leaky_relu(F.linear(x, w) * y)
    calls = [(_rand(rng, rows, 4), _rand(rng, 5, 4), _rand(rng, rows, 5))
             for _ in range(3)]
    _check_unchanged(f, calls)
    testing.assert_jit_grads_match_eager(f, calls)


def test_earlier_outputs_are_not_overwritten_by_later_calls(rng):
    def f(x, w):
        return F.relu(F.matmul(x, w)), F.tanh(F.linear(x, w))
    jitted = chainerjit.jit(f)
    outs = []
    with chainer.no_backprop_mode():
        for _ in range(4):
            o = jitted(_rand(rng, 3, 3), _rand(rng, 3, 3))
            outs.append(([v.array.copy() for v in o], o))
    for saved, o in outs:
        for a, v in zip(saved, o):
            numpy.testing.assert_array_equal(a, v.array)


def test_output_fed_back_as_input(rng):
    def f(x, w):
        return F.relu(x + F.matmul(x, w))
    jitted = chainerjit.jit(f)
    w, x = _rand(rng, 3, 3), _rand(rng, 3, 3)
    xe = x.copy()
    with chainer.no_backprop_mode():
        for _ in range(4):
            before = x.copy()
            x2, xe2 = jitted(x, w).array, f(xe, w).array
            numpy.testing.assert_array_equal(x, before)
            numpy.testing.assert_allclose(x2, xe2, rtol=1e-5)
            x, xe = x2, xe2


@pytest.mark.parametrize('act', [F.relu, F.tanh, F.sigmoid])
def test_fused_backward_keeps_user_gy_and_outputs(rng, act):
    def f(x, w, b):
        return act(F.linear(x, w, b))
    jitted = chainerjit.jit(f)
    for _ in range(3):
        arrays = [_rand(rng, 3, 4), _rand(rng, 5, 4), _rand(rng, 5)]
        grads = []
        for fn in (f, jitted):
            args = [chainer.Variable(a.copy()) for a in arrays]
            y = fn(*args)
            before = y.array.copy()
            g = numpy.random.RandomState(7).standard_normal(
                (3, 5)).astype(numpy.float32)
            y.grad = g
            y.backward()
            numpy.testing.assert_array_equal(
                g, numpy.random.RandomState(7).standard_normal(
                    (3, 5)).astype(numpy.float32))
            numpy.testing.assert_array_equal(y.array, before)
            grads.append([a.grad for a in args])
        for a, e in zip(grads[1], grads[0]):
            numpy.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


def test_inplace_float16(rng):
    def f(x, w):
        return F.sigmoid(F.matmul(x, w)) / F.tanh(F.matmul(w, x) + 1)
    _check_unchanged(f, [(_rand(rng, 4, 4, dtype=numpy.float16),
                          _rand(rng, 4, 4, dtype=numpy.float16))
                         for _ in range(3)], rtol=1e-2, atol=1e-2)


def test_hoisting_array_of_a_variable_stops_gradient(rng):
    def f(xs, w, b):
        h = F.linear(xs.array[0], w, b) * 0
        for t in range(xs.shape[0]):
            h = F.tanh(F.linear(xs.array[t], w, b) + h)
        return h
    jitted = chainerjit.jit(f)
    for n in (3, 3, 5, 1):
        arrays = [_rand(rng, n, 3, 4), _rand(rng, 4, 4), _rand(rng, 4)]
        grads = []
        for fn in (f, jitted):
            args = [chainer.Variable(a.copy()) for a in arrays]
            F.sum(fn(*args)).backward()
            grads.append([a.grad for a in args])
        assert grads[1][0] is None and grads[0][0] is None
        for a, e in zip(grads[1][1:], grads[0][1:]):
            numpy.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)


def test_hoisting_grads_of_every_argument(rng):
    def f(xs, w, b):
        h = F.linear(xs[0], w, b) * 0
        for t in range(xs.shape[0]):
            h = F.tanh(F.linear(xs[t], w, b) + h)
        return h
    testing.assert_jit_grads_match_eager(
        f, [(_rand(rng, n, 3, 4), _rand(rng, 4, 4), _rand(rng, 4))
            for n in (3, 3, 7, 1)], rtol=1e-4, atol=1e-5)
