"""Python-level patterns in user code, jitted, against eager Chainer.

Adversarial, like ``test_zoo.py``, but about the ways user code is
written around layers rather than the layers themselves: keyword and
variadic arguments, ``functools.partial``, defaults, closures, helpers
and methods reading ``self``, config switches inside the forward,
exceptions, early returns, recursion and comprehensions. What is returned
and the inputs are in ``test_user_code_values.py``, models changed,
copied, pickled and shared between calls in ``test_user_code_models.py``.

Every test calls the eager function and the jitted one with the same
fresh values, at least three times per signature and with at least two
signatures, and compares results with ``testing.assert_results_equal``;
where the code has side effects both run on separate copies of the state,
which are compared after every call. A fallback to eager mode must come
with a ``chainerjit.FallbackWarning``; unexpected ones are errors.
"""

import functools
import math

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.api_tests.user_code_checks import _compiled
from tests.api_tests.user_code_checks import _pair
from tests.api_tests.user_code_checks import _r
from tests.api_tests.user_code_checks import _same
from tests.api_tests.user_code_checks import _same_eager
from tests.api_tests.user_code_checks import _same_state
from tests.api_tests.user_code_checks import _v
from tests.api_tests.user_code_checks import f32


pytestmark = pytest.mark.adversarial


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
    _compiled(model.forward, 2)  # (each mode's for every batch size)


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
    _compiled(model.forward, 1)  # one entry serves both batch sizes
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
