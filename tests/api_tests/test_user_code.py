"""Python-level patterns in user code, jitted, against eager Chainer.

Adversarial, like ``test_zoo.py``, but about the ways user code is
written around layers rather than the layers themselves (keyword and
variadic arguments, closures, defaults, helpers reading ``self``, config
switches inside the forward, exceptions, early returns, recursion,
aliasing, in-place NumPy on arguments, nested jitted functions, model
surgery between calls, copies, pickling and threads).

Every test calls the eager function and the jitted one with the same
fresh values, at least three times per signature and with at least two
signatures, and compares results with ``testing.assert_results_equal``;
where the code has side effects both run on separate copies of the state,
which are compared after every call. A fallback to eager mode must come
with a ``chainerjit.FallbackWarning``; unexpected ones are errors.
"""

import copy
import functools
import math
import pickle
import threading
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing


pytestmark = pytest.mark.adversarial

f32 = numpy.float32


def _r(rng, *shape, **kw):
    return rng.uniform(-1, 1, shape).astype(kw.get('dtype', f32))


def _v(rng, *shape, **kw):
    return chainer.Variable(_r(rng, *shape, **kw))


def _same(jitted, eager, *args, **kwargs):
    """One call of both under no_backprop_mode; no fallback allowed."""
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.FallbackWarning)
        with chainer.no_backprop_mode():
            expected = eager(*args, **kwargs)
            actual = jitted(*args, **kwargs)
    testing.assert_results_equal(actual, expected)
    return actual, expected


def _same_eager(jitted, eager, *args):
    """One call of both; the jitted one may run eagerly."""
    with chainer.no_backprop_mode():
        testing.assert_results_equal(jitted(*args), eager(*args))


def _compiled(jitted, n_entries=None):
    entries = jitted.cache_entries()
    assert all(e.fallback is None for e in entries), jitted.cache_report()
    assert jitted.cache_info().hits > 0, jitted.cache_report()
    if n_entries is not None:
        assert len(entries) == n_entries, jitted.cache_report()


def _state(model):
    """Parameters, persistents and scalar attributes of every link."""
    state = {}
    for path, link in model.namedlinks():
        for name, value in sorted(vars(link).items()):
            if isinstance(value, chainer.Variable):
                value = None if value.array is None else value.array.copy()
            elif isinstance(value, numpy.ndarray):
                value = value.copy()
            elif not isinstance(value, (bool, int, float, str, type(None))):
                continue
            state[path + '/' + name] = value
    return state


def _same_state(a, b):
    sa, sb = _state(a), _state(b)
    assert sorted(sa) == sorted(sb)
    for k in sa:
        if isinstance(sa[k], numpy.ndarray):
            numpy.testing.assert_allclose(sa[k], sb[k], rtol=1e-5,
                                          atol=1e-6, err_msg=k)
        else:
            assert sa[k] == sb[k], k


# ----------------------------------------------------------------------
# Arguments: keyword-only, **kwargs, defaults, *args, partial


def _kw(x, *, scale=1.0, **extra):
    y = F.tanh(x) * scale
    for k in sorted(extra):
        y = y + extra[k]
    return y


def test_keyword_only_and_var_keyword_arguments(rng):
    jf = chainerjit.jit(_kw)
    for _ in range(3):
        _same(jf, _kw, _v(rng, 2, 3), scale=2.0, b=_r(rng, 2, 3),
              a=_v(rng, 2, 3))
        _same(jf, _kw, _v(rng, 4, 3))
        _same(jf, _kw, _v(rng, 4, 3), scale=0.5)
    _compiled(jf, 3)


def _defaults(x, y=None, k=3, mode='sum'):
    h = x if y is None else x * y
    h = h * k
    return F.sum(h, axis=1) if mode == 'sum' else F.max(h, axis=1)


def test_default_arguments_and_static_values(rng):
    jf = chainerjit.jit(_defaults)
    for _ in range(3):
        _same(jf, _defaults, _v(rng, 2, 3))
        _same(jf, _defaults, _v(rng, 2, 3), _v(rng, 2, 3), 2, 'max')
        _same(jf, _defaults, _v(rng, 2, 3), k=5)
    _compiled(jf, 3)


def _var_positional(*xs):
    return sum(F.tanh(x) * (i + 1) for i, x in enumerate(xs)), len(xs)


def test_var_positional_arguments(rng):
    jf = chainerjit.jit(_var_positional)
    for _ in range(3):
        _same(jf, _var_positional, _v(rng, 2, 3), _r(rng, 2, 3))
        _same(jf, _var_positional, *[_v(rng, 1, 2) for _ in range(3)])
    _compiled(jf, 2)


def _affine(x, w, b=0.0, scale=1.0):
    return F.relu(x * w + b) * scale


def test_functools_partial(rng):
    w = _r(rng, 3)
    eager = functools.partial(_affine, w=w, scale=2.0)
    jf = chainerjit.jit(eager)
    for _ in range(3):
        _same(jf, eager, _v(rng, 2, 3))
        _same(jf, eager, _v(rng, 5, 3), b=0.5)
    w[...] = _r(rng, 3)  # the bound array changed in place
    _same(jf, eager, _v(rng, 2, 3))
    _compiled(jf, 2)


def test_negative_zero_static_argument_is_not_zero(rng):
    def f(x, s):
        return x + math.copysign(1.0, s)

    jf = chainerjit.jit(f)
    for s in (0.0, -0.0, 0.0, -0.0):
        _same(jf, f, _v(rng, 2, 3), s)


def test_mutable_default_argument(rng):
    def make():
        def f(x, acc=[]):
            acc.append(1)
            return x * len(acc)
        return f

    eager = make()
    jf = chainerjit.jit(make())
    # The forward changes its default list: it runs eagerly, with a warning.
    with pytest.warns(chainerjit.FallbackWarning, match='default 0'):
        _same_eager(jf, eager, _v(rng, 2, 3))
    for _ in range(3):
        _same_eager(jf, eager, _v(rng, 2, 3))


# ----------------------------------------------------------------------
# Closures


def test_closure_nonlocal_counter(rng):
    def make():
        k = 0

        def f(x):
            nonlocal k
            k += 1
            return F.tanh(x) * k
        return f

    eager, jf = make(), chainerjit.jit(make())
    # The forward changes its closure: it runs eagerly, with a warning.
    with pytest.warns(chainerjit.FallbackWarning, match='closure k'):
        _same_eager(jf, eager, _v(rng, 2, 3))
    for _ in range(3):
        _same_eager(jf, eager, _v(rng, 2, 3))
        _same_eager(jf, eager, _v(rng, 1, 3))
    assert all(e.fallback for e in jf.cache_entries())


def test_closure_over_array_mutated_and_rebound(rng):
    def make():
        state = {'unused': None}
        w = _r(rng, 3)
        v = chainer.Variable(_r(rng, 3))

        def f(x):
            return F.relu(x * w) + v

        def rebind(new_w, new_v):
            nonlocal w, v
            w, v = new_w, new_v
        state['f'], state['rebind'] = f, rebind
        state['w'], state['v'] = (lambda: w), (lambda: v)
        return state

    s = make()
    jf = chainerjit.jit(s['f'])
    for _ in range(3):
        _same(jf, s['f'], _v(rng, 2, 3))
        s['w']()[...] = _r(rng, 3)      # in place
        s['v']().array[...] = _r(rng, 3)
        _same(jf, s['f'], _v(rng, 2, 3))
        s['rebind'](_r(rng, 3), chainer.Variable(_r(rng, 3)))
        _same(jf, s['f'], _v(rng, 4, 3))


def test_closure_over_scalar_rebound(rng):
    scale = [1.0]

    def make():
        s = 1.0

        def f(x):
            return F.tanh(x) * s

        def set_scale(v):
            nonlocal s
            s = v
        return f, set_scale

    f, set_scale = make()
    jf = chainerjit.jit(f)
    for i in range(3):
        scale[0] += 1.0
        set_scale(scale[0])
        _same(jf, f, _v(rng, 2, 3))
        _same(jf, f, _v(rng, 3, 3))


def test_closure_list_appended_to(rng):
    def make():
        log = []

        def f(x):
            log.append(x.shape[0])
            return F.relu(x)
        return f, log

    eager, eager_log = make()
    f, log = make()
    jf = chainerjit.jit(f)
    with pytest.warns(chainerjit.FallbackWarning, match='closure log'):
        _same_eager(jf, eager, _v(rng, 2, 3))
    for _ in range(3):
        _same_eager(jf, eager, _v(rng, 2, 3))
        _same_eager(jf, eager, _v(rng, 1, 3))
        assert log == eager_log


# ----------------------------------------------------------------------
# Methods, helpers and self


class Helper(chainer.Chain):
    def __init__(self):
        super(Helper, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.scale = 2.0
        self.use_bias = True
        self.offset = numpy.ones(3, f32)

    def _scaled(self, h):
        return h * self.scale

    def _maybe_bias(self, h):
        return h + self.offset if self.use_bias else h

    def forward(self, x):
        h = self._maybe_bias(self._scaled(self.fc(x)))
        return h, self.xp.__name__


def _pair(cls, *args):
    eager = cls(*args)
    model = copy.deepcopy(eager)
    model.forward = chainerjit.jit(model.forward)
    return eager, model


def test_helper_methods_reading_self_attributes(rng):
    eager, model = _pair(Helper)
    for step in range(3):
        for n in (2, 1, 2, 1):
            _same(model, eager, _r(rng, n, 3))
            _same_state(model, eager)
        for m in (eager, model):  # Python and array attributes change
            m.scale = 1.0 + step
            m.use_bias = step % 2 == 0
            m.offset[...] = step
    _compiled(model.forward)


class PlainScaler(object):
    """Not a Link: a plain object whose method is jitted."""

    def __init__(self):
        self.scale = 2.0

    def forward(self, x):
        return F.tanh(x) * self.scale


def test_plain_object_method_attribute_changed(rng):
    obj = PlainScaler()
    jf = chainerjit.jit(obj.forward)
    for i in range(3):
        _same(jf, obj.forward, _v(rng, 2, 3))
        _same(jf, obj.forward, _v(rng, 2, 3))
        obj.scale = 3.0 + i


class ListAttr(chainer.Chain):
    def __init__(self):
        super(ListAttr, self).__init__()
        self.scales = [1.0, 2.0]

    def forward(self, x):
        return F.tanh(x) * self.scales[0] + self.scales[1]


def test_link_list_attribute_mutated_in_place(rng):
    eager, model = _pair(ListAttr)
    for i in range(3):
        _same(model, eager, _r(rng, 2, 3))
        _same(model, eager, _r(rng, 2, 3))
        eager.scales[0] = model.scales[0] = 5.0 + i


# ----------------------------------------------------------------------
# Config inside the forward


class ConfigUser(chainer.Chain):
    def __init__(self):
        super(ConfigUser, self).__init__()
        with self.init_scope():
            self.bn = L.BatchNormalization(3)
            self.fc = L.Linear(3, 3)

    def forward(self, x):
        with chainer.using_config('train', False):
            h = self.bn(x)          # always test mode
        h = self.fc(h)
        if chainer.config.train:
            h = h * 2
        with chainer.no_backprop_mode():
            g = F.tanh(h)
        with chainer.force_backprop_mode():
            k = F.sigmoid(h)
        return h + g + k, chainer.config.train


def test_config_switches_inside_the_forward(rng):
    eager, model = _pair(ConfigUser)
    mean = _r(rng, 3)
    for m in (eager, model):
        m.bn.avg_mean[...] = mean
        m.bn.avg_var[...] = 1.5
    for _ in range(3):
        for train in (True, False):
            with chainer.using_config('train', train):
                _same(model, eager, _r(rng, 4, 3))
                _same(model, eager, _r(rng, 1, 3))
            _same_state(model, eager)
    _compiled(model.forward, 4)


class TrainBN(chainer.Chain):
    def __init__(self):
        super(TrainBN, self).__init__()
        with self.init_scope():
            self.bn = L.BatchNormalization(3)

    def forward(self, x, finetune=False):
        with chainer.using_config('train', True):
            return self.bn(x, finetune=finetune)


def test_train_mode_forced_inside_updates_statistics(rng):
    eager, model = _pair(TrainBN)
    for _ in range(3):
        for n in (4, 2):
            _same(model, eager, _r(rng, n, 3))
            _same_state(model, eager)
    _compiled(model.forward, 2)
    # finetune counts calls in bn.N, a Python int: every call is a miss
    for _ in range(3):
        _same(model, eager, _r(rng, 4, 3), True)
        _same_state(model, eager)
    _same(model, eager, _r(rng, 2, 3))
    _same_state(model, eager)


def test_backward_inside_the_forward_sets_input_grad(rng):
    def f(x):
        with chainer.force_backprop_mode():
            y = F.sum(x * x)
            y.backward()
        return y

    jf = chainerjit.jit(f)
    for n in (2, 2, 2, 3, 3, 3):
        a = _r(rng, n, 3)
        v1, v2 = chainer.Variable(a), chainer.Variable(a.copy())
        with chainer.no_backprop_mode():
            testing.assert_results_equal(jf(v2), f(v1))
        assert (v1.grad is None) == (v2.grad is None)
        if v1.grad is not None:
            numpy.testing.assert_allclose(v2.grad, v1.grad)


# ----------------------------------------------------------------------
# Control flow on Python values


def _checked(x, strict, depth=0):
    if strict and x.shape[0] > 2:
        raise ValueError('batch too large')
    if depth == 0:
        return F.relu(x)                 # early return
    if depth < 0:
        raise KeyError(depth)
    return _checked(F.tanh(x) * 0.5, strict, depth - 1) + x  # recursion


def test_exceptions_early_returns_and_recursion(rng):
    jf = chainerjit.jit(_checked)
    for _ in range(3):
        for args in ((_v(rng, 3, 2), True), (_v(rng, 3, 2), False, 2),
                     (_v(rng, 1, 2), True, 3), (_v(rng, 1, 2), False, -1)):
            try:
                with chainer.no_backprop_mode():
                    _checked(*args)
            except Exception as e:
                with chainer.no_backprop_mode():
                    with pytest.raises(type(e)):
                        jf(*args)
                continue
            _same(jf, _checked, *args)
    _compiled(jf)


def test_recursion_through_the_jitted_function(rng):
    @chainerjit.jit
    def f(x, n):
        if n == 0:
            return x
        return f(F.tanh(x), n - 1) * 2

    def g(x, n):
        return x if n == 0 else g(F.tanh(x), n - 1) * 2

    for _ in range(3):
        _same(f, g, _v(rng, 2, 3), 3)
        _same(f, g, _v(rng, 2, 3), 1)


def _comprehensions(xs, weights):
    hs = [F.relu(x) * w for x, w in zip(xs, weights)]
    total = sum(h for h in hs)
    sq = {i: F.sum(h * h) for i, h in enumerate(hs)}
    return total, sq, tuple(x.shape for x in xs)


def test_generators_and_comprehensions_over_list_arguments(rng):
    jf = chainerjit.jit(_comprehensions)
    for _ in range(3):
        _same(jf, _comprehensions, [_v(rng, 2, 3) for _ in range(3)],
              (1.0, 2.0, 3.0))
        _same(jf, _comprehensions, [_r(rng, 2, 3), _v(rng, 2, 3)],
              [0.5, 0.25])
    _compiled(jf, 2)


# ----------------------------------------------------------------------
# What is returned


def _mixed(x, a):
    y = F.tanh(x)
    return {'var': y, 'arr': y.array, 'int': x.shape[0], 'str': 'out',
            'none': None, 'list': [a, y * 2, (1.5, True)],
            'input_var': x, 'input_arr': a}


def test_dict_output_with_mixed_values_and_inputs(rng):
    jf = chainerjit.jit(_mixed)
    for _ in range(3):
        for n in (2, 1):
            x, a = _v(rng, n, 3), _r(rng, n, 3)
            out, _ = _same(jf, _mixed, x, a)
            assert out['input_var'] is x and out['input_arr'] is a
            assert out['list'][0] is a
    _compiled(jf, 2)


def test_returning_an_input_array_unchanged(rng):
    def f(a, x):
        return a, F.relu(x), a
    jf = chainerjit.jit(f)
    for n in (2, 2, 2, 1, 1, 1):
        a = _r(rng, n, 3)
        out, _ = _same(jf, f, a, _v(rng, n, 3))
        assert out[0] is a and out[2] is a
    _compiled(jf, 2)


def test_returning_the_same_variable_twice(rng):
    def f(x):
        y = F.relu(x)
        return y, [y]
    jf = chainerjit.jit(f)
    for n in (2, 2, 2, 1, 1, 1):
        out, expected = _same(jf, f, _v(rng, n, 3))
        assert expected[0] is expected[1][0]
        assert out[0] is out[1][0]


# ----------------------------------------------------------------------
# Inputs: aliasing, in place, requires_grad, dtypes, 0-d, empty


def _alias(x, y):
    return x * y + x


def test_the_same_input_twice_then_different(rng):
    jf = chainerjit.jit(_alias)
    for _ in range(3):
        x = _v(rng, 2, 3)
        _same(jf, _alias, x, x)
        _same(jf, _alias, x, _v(rng, 2, 3))
        a = _r(rng, 2, 3)
        _same(jf, _alias, a, chainer.Variable(a))  # same array
    _compiled(jf, 3)


def test_identity_of_the_same_variable_passed_twice(rng):
    def f(x, y):
        return F.relu(x), x is y

    jf = chainerjit.jit(f)
    for _ in range(3):
        x = _v(rng, 2, 3)
        _same(jf, f, x, x)
        _same(jf, f, x, chainer.Variable(x.array))


def test_in_place_numpy_on_an_input_array(rng):
    def f(a):
        a[0] = 0
        return F.relu(a) * 2

    jf = chainerjit.jit(f)
    seen = []
    for n in (2, 2, 2, 3, 3, 3):
        a = _r(rng, n, 3)
        b = a.copy()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            with chainer.no_backprop_mode():
                expected = f(a)
                actual = jf(b)
        testing.assert_results_equal(actual, expected)
        numpy.testing.assert_array_equal(a, b)  # the side effect
        seen += [str(w.message) for w in caught
                 if issubclass(w.category, chainerjit.FallbackWarning)]
    assert any('setitem' in m for m in seen), seen  # ran eagerly, warned


def test_requires_grad_true_and_false_under_no_backprop(rng):
    def f(x, w):
        return F.tanh(x) * w
    jf = chainerjit.jit(f)
    for _ in range(3):
        for grad in (True, False):
            x = chainer.Variable(_r(rng, 2, 3), requires_grad=grad)
            w = chainer.Variable(_r(rng, 3), requires_grad=not grad)
            out, expected = _same(jf, f, x, w)
            assert out.requires_grad == expected.requires_grad
            assert out.creator is None
    _compiled(jf, 2)
    # with backprop enabled the same function runs eagerly and has a graph
    x = chainer.Variable(_r(rng, 2, 3))
    y = jf(x, _r(rng, 3))
    assert y.creator is not None
    F.sum(y).backward()
    assert x.grad is not None


def test_a_jitted_function_calling_another(rng):
    @chainerjit.jit
    def inner(x, k):
        return F.relu(x) * k

    def inner_eager(x, k):
        return F.relu(x) * k

    def outer_eager(x):
        return inner_eager(x, 2.0) + inner_eager(x * -1, 3.0)

    outer = chainerjit.jit(lambda x: inner(x, 2.0) + inner(x * -1, 3.0))
    for _ in range(3):
        _same(outer, outer_eager, _v(rng, 2, 3))
        _same(outer, outer_eager, _v(rng, 4, 3))
        _same(inner, inner_eager, _v(rng, 4, 3), 1.0)
    _compiled(outer, 2)
    _compiled(inner, 1)


def _views(x, idx):
    h = F.forget(lambda a, b: F.tanh(a) * b, x, x)
    return (h.reshape(-1), h.T, h.transpose(1, 0), h[idx.array],
            h[:, ::-1], h[None, 1:])


def test_forget_and_variable_views_with_array_indices(rng):
    jf = chainerjit.jit(_views)
    for _ in range(3):
        _same(jf, _views, _v(rng, 3, 4),
              chainer.Variable(rng.randint(0, 3, 2).astype(numpy.int32)))
        _same(jf, _views, _v(rng, 5, 2),
              chainer.Variable(rng.randint(0, 5, 4).astype(numpy.int64)))
    _compiled(jf, 2)


def test_variable_as_an_index_raises_like_eager(rng):
    def f(x, i):
        return x[i]
    jf = chainerjit.jit(f)
    for _ in range(3):
        x = _v(rng, 3, 4)
        i = chainer.Variable(numpy.array([1, 0], numpy.int32))
        with chainer.no_backprop_mode():
            with pytest.raises(IndexError):
                f(x, i)
            with pytest.raises(IndexError):
                jf(x, i)


def _typed(ids, mask, x):
    h = F.cast(ids, x.dtype) + x
    return F.where(mask, h, x * 2), ids * 2, mask


def test_integer_bool_and_float16_inputs(rng):
    jf = chainerjit.jit(_typed)
    for _ in range(3):
        for dtype in (f32, numpy.float16):
            ids = rng.randint(-3, 3, (2, 3)).astype(numpy.int32)
            mask = rng.rand(2, 3) > 0.5
            out, _ = _same(jf, _typed, ids, mask, _v(rng, 2, 3,
                                                     dtype=dtype))
            assert out[2] is mask
    _compiled(jf, 2)


def _small(x, s):
    return F.exp(x) * s + F.sum(x), F.reshape(x, (-1,))


def test_zero_dim_and_empty_inputs(rng):
    jf = chainerjit.jit(_small)
    for _ in range(3):
        _same(jf, _small, _v(rng), _r(rng))
        _same(jf, _small, _v(rng, 0, 3), _r(rng, 0, 3))
        _same(jf, _small, _v(rng, 2, 0), _r(rng))
    _compiled(jf, 3)


# ----------------------------------------------------------------------
# Models: Sequential with lambdas, xp, surgery between calls


def _sequential():
    return chainer.Sequential(
        L.Linear(3, 4), lambda h: F.leaky_relu(h, 0.3),
        lambda h: h * 2 + 1, L.Linear(4, 2), F.tanh)


def test_sequential_with_lambdas(rng):
    eager, model = _sequential(), _sequential()
    model.copyparams(eager)
    model.forward = chainerjit.jit(model.forward)
    for _ in range(3):
        _same(model, eager, _r(rng, 2, 3))
        _same(model, eager, _r(rng, 5, 3))
    _compiled(model.forward, 2)


class XpNet(chainer.Chain):
    def __init__(self):
        super(XpNet, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)

    def forward(self, x):
        xp = self.xp
        bias = xp.arange(3, dtype=x.dtype)
        h = self.fc(x) + bias
        return F.where(h.array > 0, h, xp.zeros_like(h.array))


class Net(chainer.Chain):
    def __init__(self):
        super(Net, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 4)
            self.bn = L.BatchNormalization(4)

    def forward(self, x):
        return F.relu(self.bn(self.fc(x)))


class JNet(Net):
    forward = chainerjit.jit(Net.forward)


def _surgery_round(rng, model, eager):
    for _ in range(3):
        _same(model, eager, _r(rng, 2, 3))
        _same(model, eager, _r(rng, 1, 3))
        _same_state(model, eager)


def test_model_reading_xp_and_moved_to_numpy(rng):
    eager, model = _pair(XpNet)
    _surgery_round(rng, model, eager)
    eager.to_device('@numpy')
    model.to_device('@numpy')
    _surgery_round(rng, model, eager)
    _compiled(model.forward)


def test_load_npz_copyparams_and_cleargrads(rng, tmp_path):
    eager, model = Net(), JNet()
    model.copyparams(eager)
    _surgery_round(rng, model, eager)

    other = Net()
    other.fc.W.array[...] = _r(rng, 4, 3)
    other.bn.avg_mean[...] = _r(rng, 4)
    other.bn.avg_var[...] = 2.0
    path = str(tmp_path / 'other.npz')
    chainer.serializers.save_npz(path, other)
    chainer.serializers.load_npz(path, eager)
    chainer.serializers.load_npz(path, model)
    _surgery_round(rng, model, eager)

    third = Net()
    third.bn.gamma.array[...] = _r(rng, 4)
    eager.copyparams(third)
    model.copyparams(third)
    _surgery_round(rng, model, eager)

    for m in (eager, model):  # gradients then cleargrads
        with chainer.using_config('train', False):
            F.sum(m(_r(rng, 2, 3))).backward()
        m.cleargrads()
    _surgery_round(rng, model, eager)
    assert model.fc.W.grad is None
    _compiled(model.forward)


def test_deepcopy_of_a_jitted_model_then_both(rng):
    model = JNet()
    eager = Net()
    eager.copyparams(model)
    _surgery_round(rng, model, eager)
    twin = copy.deepcopy(model)
    twin_eager = copy.deepcopy(eager)
    twin.fc.W.array[...] = twin_eager.fc.W.array[...] = _r(rng, 4, 3)
    _surgery_round(rng, twin, twin_eager)
    _surgery_round(rng, model, eager)
    assert not numpy.allclose(model.fc.W.array, twin.fc.W.array)
    _compiled(twin.forward)


def test_pickled_jitted_model(rng):
    model = JNet()
    eager = Net()
    eager.copyparams(model)
    _surgery_round(rng, model, eager)
    clone = pickle.loads(pickle.dumps(model))
    clone.bn.avg_mean[...] = _r(rng, 4)
    eager.copyparams(clone)
    eager.bn.avg_mean[...] = clone.bn.avg_mean
    _surgery_round(rng, clone, eager)
    _compiled(clone.forward)


def test_threads_with_separate_models(rng):
    pairs = []
    for _ in range(4):
        eager = Net()
        model = JNet()
        model.copyparams(eager)
        pairs.append((eager, model))
    inputs = [[_r(rng, 1 + i % 2, 3) for i in range(6)] for _ in pairs]
    errors = []

    def work(eager, model, xs):
        try:
            with chainer.no_backprop_mode():
                for x in xs:
                    expected = eager(x)
                    testing.assert_results_equal(model(x), expected)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.FallbackWarning)
        threads = [threading.Thread(target=work, args=p + (xs,))
                   for p, xs in zip(pairs, inputs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    for eager, model in pairs:
        _same_state(model, eager)
