"""Codegen's memory reuse: a kernel writes its result into an input's
buffer only when nothing else can see that buffer.

The adversarial cases try to make it write where something can: the same
array passed twice, views fed to in-place ops, values saved for the
backward pass, carried or appended in loops, returned, fed back as inputs,
kept by effects (reports, link attributes), in float16 and mixed dtypes.
"""

import copy
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.differential import arrays
from tests.differential import check_grads
from tests.differential import check_unchanged
from tests.differential import rand


def _program(jitted):
    entry, = jitted.cache_entries()
    return entry.program.dis()


def _calls(rng, *shapes):
    return [tuple(rng.standard_normal(s).astype(numpy.float32)
                  for s in shapes) for _ in range(3)]


def test_an_activation_fills_the_buffer_of_the_product_before_it(rng):
    def f(x, w):
        return F.tanh(F.relu(F.matmul(x, w)) * 2.0)
    jitted = testing.assert_jit_matches_eager(f, _calls(rng, (3, 4), (4, 5)))
    dis = _program(jitted)
    assert 'ReLU (into' in dis and 'Tanh (into' in dis


def test_a_buffer_read_again_is_not_reused(rng):
    def f(x, w):
        h = F.matmul(x, w)
        return F.relu(h) + h
    jitted = testing.assert_jit_matches_eager(f, _calls(rng, (3, 4), (4, 5)))
    assert 'ReLU (into' not in _program(jitted)


def test_returned_arguments_and_views_are_never_written(rng):
    def f(x, w):
        h = F.matmul(x, w)
        v = F.get_item(h, 0)  # a view of h
        return F.relu(x), F.tanh(v), h * 1.0
    calls = _calls(rng, (3, 4), (4, 5))
    originals = [tuple(a.copy() for a in call) for call in calls]
    jitted = testing.assert_jit_matches_eager(f, calls)
    dis = _program(jitted)
    assert 'ReLU (into' not in dis and 'Tanh (into' not in dis
    for call, original in zip(calls, originals):
        for a, b in zip(call, original):
            numpy.testing.assert_array_equal(a, b)


def test_a_buffer_with_a_live_view_is_not_written(rng):
    # h dies at the ReLU, but its reshaped view is read after it.
    def f(x, w):
        h = F.matmul(x, w)
        v = F.reshape(h, (15,))
        return F.relu(h), v * 2.0
    jitted = testing.assert_jit_matches_eager(f, _calls(rng, (3, 4), (4, 5)))
    assert 'ReLU (into' not in _program(jitted)


def test_either_operand_of_a_sum_can_take_the_result(rng):
    def f(x, w):
        return F.get_item(x, 0) + F.matmul(x, w)[0]
    jitted = testing.assert_jit_matches_eager(f, _calls(rng, (4, 4), (4, 4)))
    assert 'Add (into' not in _program(jitted)  # [0] of a product: a view

    def g(x, w):
        return F.get_item(x, 0) + F.sum(F.matmul(x, w), axis=0)
    jitted = testing.assert_jit_matches_eager(g, _calls(rng, (4, 4), (4, 4)))
    assert 'Add (into' in _program(jitted)


def _reused_after(text, op):
    """Whether a later instruction of a disassembly writes the register
    that ``op``'s first instruction wrote."""
    lines = [line for line in text.splitlines() if ' -> ' in line]
    first = next(i for i, line in enumerate(lines) if op in line)
    register = lines[first].split(' -> ')[1].split()[0]
    return any(line.split(' -> ')[1].split()[0] == register
               for line in lines[first + 1:])


def test_gradients_through_reused_buffers_match_eager(rng):
    def f(x, w):
        return F.sigmoid(F.exp(F.matmul(x, w)) * 2)
    jitted = testing.assert_jit_grads_match_eager(
        f, _calls(rng, (3, 4), (4, 4)))
    entry, = jitted.cache_entries()
    # Exp's gradient reads its result: the training forward keeps it,
    # where the inference program reuses its buffer.
    assert _reused_after(entry.program.dis(), 'k1:Exp')
    assert not _reused_after(entry.training.forward.dis(), 'k1:Exp')


def test_inside_loops(rng):
    def f(xs, w):
        h = xs[0] * 0
        for t in range(xs.shape[0]):
            h = F.tanh(F.matmul(h, w) + xs[t])
        return h
    calls = [(rng.standard_normal((n, 3, 3)).astype(numpy.float32),
              rng.standard_normal((3, 3)).astype(numpy.float32))
             for n in (4, 4, 6)]
    with chainer.using_config('train', False):
        jitted = testing.assert_jit_matches_eager(f, calls)
    assert 'Add (into' in _program(jitted)


# --- adversarial: aliases, views, loops and dtypes ---------------------------


@pytest.mark.adversarial
def test_returned_product_also_fed_to_relu(rng):
    def f(x, w):
        h = F.matmul(x, w)
        return h, F.relu(h)
    check_unchanged(f, [(rand(rng, 3, 4), rand(rng, 4, 5))
                        for _ in range(3)])


@pytest.mark.adversarial
def test_same_array_passed_twice(rng):
    def f(x, y):
        return F.relu(x) + F.tanh(y), x * y
    calls = []
    for _ in range(3):
        a = rand(rng, 3, 4)
        calls.append((a, a))
    check_unchanged(f, calls)


@pytest.mark.adversarial
def test_same_array_passed_twice_and_added(rng):
    def f(x, y):
        return F.relu(x + y) * 2.0
    calls = []
    for _ in range(3):
        a = rand(rng, 3, 4)
        calls.append((a, a))
    check_unchanged(f, calls)


@pytest.mark.adversarial
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
            x = rand(rng, 4, 4)
            numpy.testing.assert_allclose(twin(x).array, model(x).array,
                                          rtol=1e-6)
    numpy.testing.assert_array_equal(twin.lin.W.array, w0)


@pytest.mark.adversarial
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
    check_unchanged(f, [(rand(rng, 4, 4), rand(rng, 4, 5))
                        for _ in range(3)])


@pytest.mark.adversarial
def test_view_of_fresh_then_inplace_then_base_read(rng):
    def f(x, w):
        h = F.matmul(x, w)
        v = F.reshape(h, (20,))
        r = F.relu(v)
        return F.sum(h, axis=0) + F.sum(F.reshape(r, (4, 5)), axis=0)
    check_unchanged(f, [(rand(rng, 4, 4), rand(rng, 4, 5))
                        for _ in range(3)])


@pytest.mark.adversarial
def test_binary_inplace_with_broadcast(rng):
    def f(x, w, b):
        h = F.matmul(x, w)
        return F.relu(h + b) - F.broadcast_to(b, (3, 5)) * h
    check_unchanged(f, [(rand(rng, 3, 4), rand(rng, 4, 5),
                         rand(rng, 5)) for _ in range(3)])


@pytest.mark.adversarial
def test_mixed_dtype_binary(rng):
    def f(x, y):
        h = F.sum(F.matmul(x, x), axis=0)
        return h * y
    calls = [(rand(rng, 4, 4), rand(rng, 4, dtype=numpy.float64))
             for _ in range(3)]
    calls = [(x, y.astype(numpy.float32)) for x, y in calls]
    check_unchanged(f, calls)


@pytest.mark.adversarial
def test_values_appended_in_loop_then_stacked(rng):
    def f(xs, w):
        h = xs[0] * 0
        out = []
        for t in range(xs.shape[0]):
            h = F.tanh(F.matmul(xs[t], w) + h)
            out.append(h)
            out.append(F.relu(h))
        return F.stack(out)
    calls = [(rand(rng, n, 3, 4), rand(rng, 4, 4)) for n in (3, 3, 7, 1)]
    check_unchanged(f, calls)


@pytest.mark.adversarial
def test_values_appended_in_loop_with_grads(rng):
    def f(xs, w):
        h = xs[0] * 0
        out = []
        for t in range(xs.shape[0]):
            h = F.relu(F.matmul(xs[t], w) + h)
            out.append(F.sigmoid(h))
        return F.stack(out), h
    calls = [(rand(rng, n, 3, 4), rand(rng, 4, 4)) for n in (3, 3, 7, 1)]
    testing.assert_jit_grads_match_eager(f, calls, rtol=1e-4, atol=1e-5)


@pytest.mark.adversarial
def test_saved_for_backward_not_overwritten(rng):
    def f(x, w):
        h = F.matmul(x, w)
        s = F.sigmoid(h)
        t = F.tanh(s)
        return F.relu(t) * s
    testing.assert_jit_grads_match_eager(
        f, [(rand(rng, 3, 4), rand(rng, 4, 5)) for _ in range(3)])


@pytest.mark.adversarial
def test_loop_carried_values_that_share_a_buffer(rng):
    def f(x, w):
        h = c = F.matmul(x, w)
        for t in range(x.shape[0]):
            h = F.relu(h) * 0.5
            c = c + h
        return h, c
    calls = [(rand(rng, 3, 3), rand(rng, 3, 3)) for _ in range(3)]
    check_unchanged(f, calls)
    testing.assert_jit_grads_match_eager(f, calls)


@pytest.mark.adversarial
def test_loop_initial_value_also_returned(rng):
    def f(xs, w):
        h = F.matmul(xs[0], w)
        keep = h
        for t in range(xs.shape[0]):
            h = F.tanh(h + xs[t])
        return h, keep
    calls = [(rand(rng, n, 3, 3), rand(rng, 3, 3)) for n in (3, 3, 6, 1)]
    check_unchanged(f, calls)
    testing.assert_jit_grads_match_eager(f, calls)


@pytest.mark.adversarial
@pytest.mark.parametrize('rows', [1, 64, 65])
def test_binary_ops_into_a_linear_product(rng, rows):
    def f(x, w, y):
        return F.linear(x, w) + y, F.leaky_relu(F.linear(x, w) * y)
    calls = [(rand(rng, rows, 4), rand(rng, 5, 4), rand(rng, rows, 5))
             for _ in range(3)]
    check_unchanged(f, calls)
    testing.assert_jit_grads_match_eager(f, calls)


@pytest.mark.adversarial
def test_earlier_outputs_are_not_overwritten_by_later_calls(rng):
    def f(x, w):
        return F.relu(F.matmul(x, w)), F.tanh(F.linear(x, w))
    jitted = chainerjit.jit(f)
    outs = []
    with chainer.no_backprop_mode():
        for _ in range(4):
            o = jitted(rand(rng, 3, 3), rand(rng, 3, 3))
            outs.append(([v.array.copy() for v in o], o))
    for saved, o in outs:
        for a, v in zip(saved, o):
            numpy.testing.assert_array_equal(a, v.array)


@pytest.mark.adversarial
def test_output_fed_back_as_input(rng):
    def f(x, w):
        return F.relu(x + F.matmul(x, w))
    jitted = chainerjit.jit(f)
    w, x = rand(rng, 3, 3), rand(rng, 3, 3)
    xe = x.copy()
    with chainer.no_backprop_mode():
        for _ in range(4):
            before = x.copy()
            x2, xe2 = jitted(x, w).array, f(xe, w).array
            numpy.testing.assert_array_equal(x, before)
            numpy.testing.assert_allclose(x2, xe2, rtol=1e-5)
            x, xe = x2, xe2


@pytest.mark.adversarial
def test_inplace_float16(rng):
    def f(x, w):
        return F.sigmoid(F.matmul(x, w)) / F.tanh(F.matmul(w, x) + 1)
    check_unchanged(f, [(rand(rng, 4, 4, dtype=numpy.float16),
                         rand(rng, 4, 4, dtype=numpy.float16))
                        for _ in range(3)], rtol=1e-2, atol=1e-2)


# --- adversarial: live views and effects ------------------------------------


def _view_transpose(x, w):
    h = F.matmul(x, w)
    v = F.transpose(h)
    return F.relu(h), F.tanh(v * 1.0) + v


def _view_expand_dims_returned(x, w):
    h = F.matmul(x, w)
    return F.sigmoid(h), F.expand_dims(h, 0)


def _view_split_axis(x, w):
    h = F.matmul(x, w)
    a, b = F.split_axis(h, 2, axis=0)
    return F.relu(h) + 0, a * b


def _view_separate(x, w):
    h = F.matmul(x, w)
    parts = F.separate(h, axis=0)
    return F.tanh(h), parts[0] + parts[1]


def _view_get_item(x, w):
    h = F.matmul(x, w)
    v = h[1:]
    return F.relu(h), F.sum(v, axis=0)


def _view_of_a_view(x, w):
    h = F.matmul(x, w)
    v = F.reshape(F.reshape(h, (-1,)), (4, 4))
    return F.relu(h) * 1.0, v


def _view_added_to_itself(x, w):
    h = F.matmul(x, w)
    return F.relu(h * F.transpose(h)) + F.transpose(h)


def _views_of_many_kinds(x, w):
    h = F.matmul(x, w)
    return (F.sigmoid(h) * F.flip(h, 0) + F.swapaxes(h, 0, 1) +
            F.broadcast_to(h[0], h.shape) + F.rollaxis(h, 1) +
            F.squeeze(F.expand_dims(h, 2), 2))


def _same_array_ops(x, w):
    h = F.matmul(x, w)
    g = F.matmul(x, w) * 2.0
    return (F.tanh(h) + F.identity(h) + F.cast(h, numpy.float32) +
            F.copy(h, -1), F.relu(g) + F.identity(g))


def _views_then_binary_into_either(x, w):
    h = F.matmul(x, w)
    g = F.matmul(w, x)
    v = F.reshape(g, (16,))
    return h + g, F.tanh(v)


@pytest.mark.adversarial
@pytest.mark.parametrize('fn', [
    _view_transpose, _view_expand_dims_returned, _view_split_axis,
    _view_separate, _view_get_item, _view_of_a_view, _view_added_to_itself,
    _views_of_many_kinds, _same_array_ops, _views_then_binary_into_either])
def test_buffers_with_live_views_are_not_written(fn):
    rng = numpy.random.RandomState(27)
    calls = arrays(rng, (4, 4), (4, 4))
    originals = [tuple(a.copy() for a in call) for call in calls]
    testing.assert_jit_matches_eager(fn, calls)
    for call, original in zip(calls, originals):
        for a, b in zip(call, original):
            numpy.testing.assert_array_equal(a, b)
    check_grads(fn, calls)


@pytest.mark.adversarial
def test_reuse_happens_where_nothing_else_sees_the_buffer():
    def f(x, w):
        return F.sigmoid(F.tanh(F.relu(F.matmul(x, w)) + 1.0))
    jitted = testing.assert_jit_matches_eager(
        f, arrays(numpy.random.RandomState(28), (3, 4), (4, 5)))
    assert jitted.cache_entries()[0].program.dis().count('(into') >= 2


class _Effects(chainer.Chain):

    def __init__(self):
        super(_Effects, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 4)

    def keeps_variable(self, x):
        h = self.fc(x)
        self.saved = h
        return F.relu(h)

    def keeps_array(self, x):
        h = self.fc(x)
        self.saved = h.array
        return F.relu(h)

    def keeps_view(self, x):
        h = self.fc(x)
        self.saved = F.reshape(h, (-1,))
        return F.relu(h)

    def reports(self, x):
        h = self.fc(x)
        chainer.report({'h': h}, self)
        return F.tanh(h)

    def loop_keeps_reshaped(self, xs):
        outs = []
        h = self.fc(xs[0])
        for t in range(xs.shape[0]):
            h = self.fc(xs[t]) + h
            outs.append(F.reshape(h, (-1,)))
            h = F.tanh(h)
        return F.stack(outs), h

    def loop_transposed(self, xs):
        outs = []
        h = self.fc(xs[0])
        for t in range(xs.shape[0]):
            z = self.fc(h)
            v = F.transpose(z)
            h = F.tanh(z) + F.transpose(v)
            outs.append(v)
        return h, F.stack(outs)

    def loop_split(self, xs):
        h = self.fc(xs[0])
        for t in range(xs.shape[0]):
            z = self.fc(h)
            a, b = F.split_axis(z, 2, axis=1)
            h = F.sigmoid(z) * F.concat([b, a], axis=1)
        return h

    def loop_separate(self, xs):
        h = self.fc(xs[0])
        for t in range(xs.shape[0]):
            z = self.fc(h)
            parts = F.separate(z, axis=0)
            h = F.relu(z) + F.stack(parts[::-1])
        return h


@pytest.mark.adversarial
@pytest.mark.parametrize('method', ['keeps_variable', 'keeps_array',
                                    'keeps_view', 'reports'])
def test_buffers_kept_by_effects_are_not_written(method):
    numpy.random.seed(0)
    eager = _Effects()
    twin = copy.deepcopy(eager)
    jitted = chainerjit.jit(getattr(twin, method))
    rng = numpy.random.RandomState(29)
    for _ in range(4):
        x = rng.standard_normal((3, 4)).astype(numpy.float32)
        results = []
        for model, fn in ((eager, getattr(eager, method)), (twin, jitted)):
            reporter = chainer.Reporter()
            reporter.add_observer('m', model)
            observed = {}
            with chainer.no_backprop_mode(), reporter.scope(observed):
                results.append((fn(x), getattr(model, 'saved', None),
                                observed))
        (e_out, e_saved, e_obs), (j_out, j_saved, j_obs) = results
        testing.assert_results_equal(j_out, e_out)
        if e_saved is not None:
            testing.assert_results_equal(j_saved, e_saved)
        assert sorted(j_obs) == sorted(e_obs)
        for key in e_obs:
            numpy.testing.assert_allclose(chainer.as_array(j_obs[key]),
                                          chainer.as_array(e_obs[key]))


@pytest.mark.adversarial
@pytest.mark.parametrize('method', ['loop_keeps_reshaped', 'loop_transposed',
                                    'loop_split', 'loop_separate'])
def test_views_in_loops(method):
    numpy.random.seed(0)
    rng = numpy.random.RandomState(30)
    calls = [(rng.standard_normal((t, 4, 4)).astype(numpy.float32),)
             for t in (5, 5, 2, 2, 7)]
    check_grads(None, calls, model=_Effects(), method=method)
    model = _Effects()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.errors.LoopWarning)
        testing.assert_jit_matches_eager(getattr(model, method), calls)
