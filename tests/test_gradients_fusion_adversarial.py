"""Adversarial tests: gradient stopping, convolution + test-mode
batch normalization fusion, codegen's memory reuse, and comprehensions and
``T = len(xs)`` aliases in rolled loops, each against eager Chainer.

A found mismatch with eager Chainer is kept as a strict xfail with a
minimal reproduction."""

import copy
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing

LENGTHS = (3, 3, 5, 1, 8, 8)
FUSED = 'Convolution2DFunction+FixedBatchNormalization'


# --- helpers -----------------------------------------------------------------

def _leaves(result):
    if isinstance(result, (tuple, list)):
        return [leaf for item in result for leaf in _leaves(item)]
    if isinstance(result, dict):
        return [leaf for k in sorted(result) for leaf in _leaves(result[k])]
    return [result]


def _as_variables(args):
    """Float arrays as Variables requiring grad (a copy per run), lists of
    float arrays as lists of such Variables, the rest as it is."""
    def wrap(a):
        if isinstance(a, numpy.ndarray) and a.dtype.kind == 'f':
            return chainer.Variable(a.copy())
        if isinstance(a, list):
            return [wrap(item) for item in a]
        return a
    return [wrap(a) for a in args]


def _input_variables(args):
    return [v for v in _leaves(args) if isinstance(v, chainer.Variable)]


def _run(fn, args, seed, model=None):
    """Runs ``fn`` on Variables and backprops seeded gradients from every
    output that requires grad, all in one ``chainer.backward`` as a loss
    over all of them would. Returns the output arrays, then each input's
    and parameter's gradient (``None`` where there is none)."""
    variables = _as_variables(args)
    if model is not None:
        model.cleargrads()
    result = fn(*variables)
    outs = [v for v in _leaves(result) if isinstance(v, chainer.Variable)]
    rng = numpy.random.RandomState(seed)
    grads = [rng.standard_normal(v.shape).astype(v.dtype) for v in outs]
    pairs = [(v, chainer.Variable(g)) for v, g in zip(outs, grads)
             if v.requires_grad and v.dtype.kind == 'f']
    if pairs:
        chainer.backward([v for v, _ in pairs], [g for _, g in pairs])
    values = [chainer.as_array(v).copy() for v in _leaves(result)
              if isinstance(v, (chainer.Variable, numpy.ndarray))]
    grads = [None if v.grad is None else v.grad.copy()
             for v in _input_variables(variables)]
    if model is not None:
        grads += [None if p.grad is None else p.grad.copy()
                  for _, p in sorted(model.namedparams())]
    return values, grads


def _same(actual, expected, what, rtol=1e-4, atol=1e-5):
    assert len(actual) == len(expected), what
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert (a is None) == (e is None), '%s %d: jit %s, eager %s' % (
            what, i, 'None' if a is None else 'array',
            'None' if e is None else 'array')
        if e is not None:
            assert a.shape == e.shape and a.dtype == e.dtype, (what, i)
            numpy.testing.assert_allclose(a, e, rtol=rtol, atol=atol,
                                          err_msg='%s %d' % (what, i))


def _check_grads(fn, calls, model=None, method=None, fallback_ok=False,
                 rtol=1e-4, atol=1e-5):
    """``jit(fn)`` against ``fn`` with backprop: outputs, gradients of the
    inputs and (with ``model``, whose ``method`` is jitted on a deep copy)
    of the parameters, None-vs-array included."""
    if model is not None:
        twin = copy.deepcopy(model)
        eager = getattr(model, method)
        jitted = chainerjit.jit(getattr(twin, method))
    else:
        twin, eager, jitted = None, fn, chainerjit.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.errors.LoopWarning)
        if fallback_ok:
            warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        else:
            warnings.simplefilter('error', chainerjit.FallbackWarning)
        for i, args in enumerate(calls):
            e_values, e_grads = _run(eager, args, i, model)
            j_values, j_grads = _run(jitted, args, i, twin)
            _same(j_values, e_values, 'call %d output' % i, rtol, atol)
            _same(j_grads, e_grads, 'call %d grad' % i, rtol, atol)
    if not fallback_ok:
        assert all(e.fallback is None for e in jitted.cache_entries())
        assert jitted.cache_info().hits > 0
    return jitted


def _arrays(rng, *shapes, n=3, dtype=numpy.float32):
    return [tuple(rng.standard_normal(s).astype(dtype) for s in shapes)
            for _ in range(n)]


def _sequences(rng, *rest, lengths=LENGTHS):
    """One call per length: a (T, 2, 4) array, then ``rest`` as given."""
    return [(rng.standard_normal((t, 2, 4)).astype(numpy.float32),) + rest
            for t in lengths]


# --- 1. gradient stopping ----------------------------------------------------

def _tanh_of_array_times_x(x):
    return F.tanh(x.array) * x


def _linear_of_array(h, W):
    return F.linear(h.array, W) + F.linear(F.tanh(h), W)


def _data_attribute(x):
    return F.exp(x.data) * F.sin(x)


def _no_backprop_block(x):
    h = F.tanh(x)
    with chainer.no_backprop_mode():
        g = F.sin(h)
    return g * h


def _enable_backprop_false(x):
    h = F.tanh(x)
    with chainer.using_config('enable_backprop', False):
        g = F.sin(h) * 3.0
    with chainer.using_config('enable_backprop', True):
        k = F.cos(h)
    return F.sin(g) * h + k


def _not_requiring_grad_rewrap(x):
    h = F.tanh(x)
    y = chainer.Variable(h.array, requires_grad=False)
    return F.sin(y) * h


def _mixed_reads(x):
    h = F.tanh(x)
    a = h.array
    return F.sin(a) + F.cos(h) + F.exp(a) * h


def _numpy_on_array(x):
    h = F.tanh(x)
    return F.sin(h.array * 3) * h + F.cos(h.array[0])


def _array_only_output(x):
    return F.sum(F.tanh(x.array)) * x


@pytest.mark.parametrize('fn', [
    _tanh_of_array_times_x, _data_attribute, _no_backprop_block,
    _enable_backprop_false, _not_requiring_grad_rewrap, _mixed_reads,
    _numpy_on_array, _array_only_output])
def test_reads_without_gradient_match_eager(fn):
    _check_grads(fn, _arrays(numpy.random.RandomState(0), (3, 4)))


def test_linear_of_an_array_passes_no_gradient_to_it():
    _check_grads(_linear_of_array,
                 _arrays(numpy.random.RandomState(1), (3, 4), (5, 4)))


def test_an_input_read_only_through_its_array_gets_no_gradient():
    def f(x, w):
        return F.tanh(x.array) * w
    jitted = _check_grads(f, _arrays(numpy.random.RandomState(2), (3, 4),
                                     (3, 4)))
    assert jitted.cache_info().hits == 2


def _loop_item_array(xs):
    h = 0
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t].array * 1.0) * xs[t] + h
    return h


def _loop_state_array(xs, W):
    h = xs[0]
    for t in range(xs.shape[0]):
        h = F.tanh(F.matmul(h.array, W)) + F.matmul(h, W) + xs[t]
    return h


def _loop_no_backprop(xs, W):
    h = xs[0]
    for t in range(xs.shape[0]):
        with chainer.no_backprop_mode():
            g = F.matmul(h, W)
        h = F.tanh(g) * h + xs[t]
    return h


@pytest.mark.parametrize('fn', [_loop_item_array, _loop_state_array,
                                _loop_no_backprop])
def test_gradient_stopping_inside_loops(fn):
    rng = numpy.random.RandomState(3)
    W = rng.standard_normal((4, 4)).astype(numpy.float32) * 0.5
    calls = _sequences(rng, W)
    if fn is _loop_item_array:
        calls = [call[:1] for call in calls]
    _check_grads(fn, calls)


class _Net(chainer.Chain):

    def __init__(self):
        super(_Net, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 4)
            self.m = L.Linear(4, 4)

    def param_array(self, x):
        return F.linear(x, self.fc.W.array) + self.fc(x)

    def array_to_link(self, x):
        return self.fc(x.array) * self.m(x)

    def hidden_array_to_link(self, x):
        h = self.fc(x)
        return self.m(h.array) + h

    def link_without_backprop(self, x):
        h = self.fc(x)
        with chainer.no_backprop_mode():
            g = self.m(h)
        return h * g

    def param_in_no_backprop(self, x):
        with chainer.no_backprop_mode():
            y = F.linear(x, self.fc.W)
        return F.linear(y, self.m.W)

    def mixed_configs(self, x):
        h = self.fc(x)
        with chainer.using_config('enable_backprop', False):
            g = F.sigmoid(self.m(h))
        return g * self.m(h)

    def loop_link_of_array(self, xs):
        h = self.m(xs[0])
        for t in range(xs.shape[0]):
            h = F.tanh(self.fc(xs[t].array) + self.m(h))
        return h

    def loop_link_without_backprop(self, xs):
        h = self.m(xs[0])
        for t in range(xs.shape[0]):
            with chainer.no_backprop_mode():
                p = self.fc(xs[t])
            h = F.tanh(p + self.m(h) + self.fc(xs[t]))
        return h

    def loop_param_array(self, xs):
        h = self.m(xs[0])
        for t in range(len(xs)):
            h = F.tanh(F.linear(xs[t], self.fc.W.array, self.fc.b) +
                       self.m(h))
        return h

    def loop_constant_of_computed(self, xs):
        h = xs[0]
        for t in range(xs.shape[0]):
            g = chainer.Variable(self.fc(h).array, requires_grad=False)
            h = F.tanh(self.m(h) + g + xs[t])
        return h

    def in_place_on_array(self, x):
        h = self.fc(x)
        a = h.array
        a *= 2
        return self.m(h)


@pytest.mark.parametrize('method', [
    'param_array', 'array_to_link', 'hidden_array_to_link',
    'link_without_backprop', 'param_in_no_backprop', 'mixed_configs'])
def test_links_read_without_gradient(method):
    numpy.random.seed(0)
    _check_grads(None, _arrays(numpy.random.RandomState(4), (3, 4)),
                 model=_Net(), method=method)


@pytest.mark.parametrize('method', [
    'loop_link_of_array', 'loop_link_without_backprop', 'loop_param_array',
    'loop_constant_of_computed'])
def test_links_read_without_gradient_in_loops(method):
    numpy.random.seed(0)
    rng = numpy.random.RandomState(5)
    _check_grads(None, _sequences(rng), model=_Net(), method=method)


def test_in_place_change_of_an_array_runs_eagerly_and_matches():
    numpy.random.seed(0)
    jitted = _check_grads(None, _arrays(numpy.random.RandomState(6), (3, 4)),
                          model=_Net(), method='in_place_on_array',
                          fallback_ok=True)
    assert all(e.fallback is not None for e in jitted.cache_entries())


def _list_rows_through_arrays(xs, W):
    h = F.tanh(xs[0].array)
    for x in xs:
        h = F.tanh(F.matmul(h, W) + x.array)
    return h


def _list_rows_without_backprop(xs, W):
    h = 0
    for x in xs:
        with chainer.no_backprop_mode():
            g = F.sigmoid(x)
        h = F.tanh(F.matmul(g, W) + h)
    return h


def _list_rows_mixed(xs, W):
    h = F.tanh(xs[0])
    for x in xs:
        with chainer.no_backprop_mode():
            g = F.sigmoid(x)
        h = F.tanh(F.matmul(x, W) * g + h + x.array)
    return h


@pytest.mark.parametrize('fn', [_list_rows_through_arrays,
                                _list_rows_without_backprop,
                                _list_rows_mixed])
def test_list_items_read_without_gradient(fn):
    rng = numpy.random.RandomState(7)
    W = rng.standard_normal((4, 4)).astype(numpy.float32) * 0.5
    calls = [([rng.standard_normal((2, 4)).astype(numpy.float32)
               for _ in range(t)], W) for t in (3, 3, 5, 4, 4)]
    _check_grads(fn, calls)


class _StoppedRNN(chainer.Chain):

    def __init__(self):
        super(_StoppedRNN, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 6)
            self.l2 = L.Linear(6, 3)
            self.e = L.Linear(6, 6)

    def forward(self, xs):
        h = F.tanh(self.l1(xs[0]))
        for t in range(xs.shape[0]):
            gate = F.sigmoid(self.e(h.array))
            with chainer.no_backprop_mode():
                target = self.e(h)
            h = F.tanh(self.l1(xs[t]) + gate * h + target)
        return self.l2(h) + F.linear(h, self.l2.W.array)


class _RewrappedParam(chainer.Chain):

    def __init__(self):
        super(_RewrappedParam, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 3)
            self.m = L.Linear(4, 3)

    def forward(self, x):
        W = chainer.Variable(self.fc.W.array)  # a new leaf: W gets no grad
        return F.linear(x, W) + self.m(x) + self.fc(x)


def _train_twins(model_class, make_optimizer, lengths, steps=None):
    numpy.random.seed(0)
    eager = model_class()
    jitted = model_class()
    jitted.copyparams(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    optimizers = []
    for m in (eager, jitted):
        opt = make_optimizer()
        opt.setup(m)
        optimizers.append(opt)
    rng = numpy.random.RandomState(1)
    for step, t in enumerate(lengths):
        x = rng.standard_normal((t, 2, 4) if t else (2, 4)).astype(
            numpy.float32)
        target = rng.randint(0, 3, 2).astype(numpy.int32)
        for m, opt in zip((eager, jitted), optimizers):
            m.cleargrads()
            F.softmax_cross_entropy(m.forward(x), target).backward()
            opt.update()
        for (name, p), (_, q) in zip(sorted(eager.namedparams()),
                                     sorted(jitted.namedparams())):
            numpy.testing.assert_allclose(
                q.array, p.array, rtol=1e-4, atol=1e-5,
                err_msg='step %d %s' % (step, name))
    assert jitted.forward.cache_info().hits > 0
    assert all(e.fallback is None and e.training is not None
               for e in jitted.forward.cache_entries())


@pytest.mark.parametrize('make_optimizer', [
    lambda: chainer.optimizers.SGD(lr=0.1),
    lambda: chainer.optimizers.Adam(alpha=0.01),
], ids=['SGD', 'Adam'])
def test_training_with_stopped_gradients_follows_eager(make_optimizer):
    _train_twins(_StoppedRNN, make_optimizer, (3, 3, 5, 1, 8, 8, 3, 5))


# Found mismatches ------------------------------------------------------------

def _rewrapped_input(x):
    y = chainer.Variable(x.array)  # a new leaf: x gets no gradient
    return F.tanh(y) * x


def _rewrapped_input_only(x):
    return F.tanh(chainer.Variable(x.array))


def _rewrapped_hidden(x):
    h = F.tanh(x)
    return F.sin(chainer.Variable(h.array)) * h


def _unchained(x):
    h = F.tanh(x)
    h.unchain()
    return F.sin(h) * x


def _unchained_backward(x):
    h = F.tanh(x)
    h.unchain_backward()
    return F.sin(h) * x


@pytest.mark.parametrize('fn', [_rewrapped_input, _rewrapped_input_only,
                                _rewrapped_hidden, _unchained,
                                _unchained_backward])
def test_a_new_leaf_variable_stops_gradients(fn):
    _check_grads(fn, _arrays(numpy.random.RandomState(8), (3, 4)))


def test_training_with_a_rewrapped_parameter_follows_eager():
    _train_twins(_RewrappedParam,
                 lambda: chainer.optimizers.SGD(lr=0.1), (0,) * 4)


def _identity_of_array(x):
    return F.identity(x.array) * x


def _cast_of_array(x):
    return F.cast(x.array, numpy.float32) * x


def _copy_of_array(x):
    return F.copy(x.array, -1) * x


def _identity_without_backprop(x):
    with chainer.no_backprop_mode():
        y = F.identity(x)
    return F.sin(x) * y


def _identity_of_hidden_array(x):
    h = F.tanh(x)
    g = F.identity(h.array)
    return F.sin(h) * g


@pytest.mark.parametrize('fn', [_identity_of_array, _cast_of_array,
                                _copy_of_array, _identity_without_backprop,
                                _identity_of_hidden_array])
def test_ops_returning_their_input_array_keep_its_gradient(fn):
    _check_grads(fn, _arrays(numpy.random.RandomState(9), (3, 4)))


def _rows_through_identity(xs, W):
    rows = F.stack([F.identity(x.array) for x in xs])
    return F.tanh(F.matmul(rows, W)) * F.stack(xs)


def test_list_items_through_identity_of_their_arrays():
    rng = numpy.random.RandomState(10)
    W = rng.standard_normal((4, 4)).astype(numpy.float32)
    calls = [([rng.standard_normal((2, 4)).astype(numpy.float32)
               for _ in range(t)], W) for t in (3, 3, 4, 4)]
    _check_grads(_rows_through_identity, calls)


@pytest.mark.xfail(strict=True, reason=(
    'an output that does not require grad, computed with backprop '
    'enabled, has a creator in eager mode but none on compiled calls'))
def test_outputs_not_requiring_grad_keep_a_creator():
    def f(x):
        return F.tanh(x.array), x * 2.0
    jitted = chainerjit.jit(f)
    rng = numpy.random.RandomState(11)
    for _ in range(3):
        x = rng.standard_normal((3, 4)).astype(numpy.float32)
        expected = f(chainer.Variable(x))
        actual = jitted(chainer.Variable(x))
        for a, e in zip(actual, expected):
            assert a.requires_grad == e.requires_grad
            assert (a.creator is None) == (e.creator is None)


# --- 2. convolution + test-mode batch normalization --------------------------

def _randomize(bn, rng):
    if hasattr(bn, 'avg_mean'):
        bn.avg_mean[...] = rng.standard_normal(bn.avg_mean.shape)
        bn.avg_var[...] = rng.uniform(0.5, 2.0, bn.avg_var.shape)
    if getattr(bn, 'gamma', None) is not None:
        bn.gamma.array[...] = rng.uniform(0.5, 1.5, bn.gamma.shape)
    if getattr(bn, 'beta', None) is not None:
        bn.beta.array[...] = rng.standard_normal(bn.beta.shape)


class _ConvBN(chainer.Chain):

    def __init__(self, c_in=3, c_out=4, dtype=numpy.float32, bn=None,
                 cover_all=False, **conv):
        super(_ConvBN, self).__init__()
        self.cover_all = cover_all
        self.conv_args = dict(stride=conv.get('stride', 1),
                              pad=conv.get('pad', 0),
                              dilate=conv.get('dilate', 1),
                              groups=conv.get('groups', 1))
        with self.init_scope():
            self.c = L.Convolution2D(c_in, c_out, 3, **conv)
            self.b = L.BatchNormalization(c_out, dtype=dtype, **(bn or {}))
        self.c.W.array = self.c.W.array.astype(dtype)
        if self.c.b is not None:
            self.c.b.array = numpy.random.RandomState(4).standard_normal(
                c_out).astype(dtype)
        _randomize(self.b, numpy.random.RandomState(3))

    def forward(self, x):
        if self.cover_all:
            h = F.convolution_2d(x, self.c.W, self.c.b, cover_all=True,
                                 **self.conv_args)
        else:
            h = self.c(x)
        return self.b(h)


def _inference(fn, calls, fused, jitted=None):
    with chainer.using_config('train', False):
        jitted = testing.assert_jit_matches_eager(
            fn, calls, rtol=1e-4, atol=1e-5, jitted=jitted)
    text = str(jitted.cache_entries()[0].graph)
    assert (FUSED in text) == fused, text
    return jitted


def _images(rng, shape, n=3, dtype=numpy.float32):
    return [(rng.standard_normal(shape).astype(dtype),) for _ in range(n)]


CONV_BN_CASES = {
    'plain': (dict(), (2, 3, 7, 7)),
    'stride_pad': (dict(stride=2, pad=1), (2, 3, 8, 8)),
    'dilate': (dict(dilate=2, pad=2), (2, 3, 9, 9)),
    'stride_3x2': (dict(stride=(3, 2), pad=(0, 1)), (2, 3, 10, 9)),
    'nobias': (dict(nobias=True), (2, 3, 7, 7)),
    'cover_all': (dict(stride=2, cover_all=True), (2, 3, 8, 8)),
    'cover_all_pad': (dict(stride=3, pad=1, cover_all=True), (2, 3, 8, 8)),
    'float64': (dict(dtype=numpy.float64), (2, 3, 7, 7)),
    'no_gamma': (dict(bn=dict(use_gamma=False)), (2, 3, 7, 7)),
    'no_beta': (dict(bn=dict(use_beta=False)), (2, 3, 7, 7)),
    'bare': (dict(nobias=True, bn=dict(use_gamma=False, use_beta=False)),
             (2, 3, 7, 7)),
    'large_eps': (dict(bn=dict(eps=0.5)), (2, 3, 7, 7)),
    'one_image_one_channel': (dict(c_in=1, c_out=1), (1, 1, 3, 3)),
}


@pytest.mark.parametrize('case', sorted(CONV_BN_CASES))
def test_convolution_and_normalization_fuse_and_match_eager(case):
    kwargs, shape = CONV_BN_CASES[case]
    numpy.random.seed(0)
    dtype = kwargs.get('dtype', numpy.float32)
    model = _ConvBN(**kwargs)
    _inference(model.forward,
               _images(numpy.random.RandomState(12), shape, dtype=dtype),
               fused=True)


def test_grouped_convolution_is_not_fused_and_matches():
    numpy.random.seed(0)
    model = _ConvBN(c_in=4, c_out=4, groups=2)
    _inference(model.forward, _images(numpy.random.RandomState(13),
                                      (2, 4, 7, 7)), fused=False)


def test_double_precision_normalization_after_a_float32_convolution():
    numpy.random.seed(0)
    model = _ConvBN(dtype=numpy.float64)
    model.c.W.array = model.c.W.array.astype(numpy.float32)
    model.c.b.array = model.c.b.array.astype(numpy.float32)
    _inference(model.forward, _images(numpy.random.RandomState(14),
                                      (2, 3, 7, 7)), fused=True)


def test_a_convolution_read_elsewhere_keeps_its_normalization():
    numpy.random.seed(0)
    model = _ConvBN()

    def returned(x):
        h = model.c(x)
        return model.b(h), h

    def also_used(x):
        h = model.c(x)
        return model.b(h) + F.relu(h)
    calls = _images(numpy.random.RandomState(15), (2, 3, 7, 7))
    _inference(returned, calls, fused=False)
    _inference(also_used, calls, fused=False)


def test_statistics_as_arguments_and_normalizations_after_it():
    def f(x, W, b, gamma, beta, mean, var):
        h = F.convolution_2d(x, W, b, pad=1)
        y = F.fixed_batch_normalization(h, gamma, beta, mean, var, eps=1e-3)
        return F.relu(y)[:, ::2]
    rng = numpy.random.RandomState(16)
    calls = [(rng.standard_normal((2, 3, 5, 5)).astype(numpy.float32),
              rng.standard_normal((4, 3, 3, 3)).astype(numpy.float32),
              rng.standard_normal(4).astype(numpy.float32),
              rng.uniform(0.5, 1.5, 4).astype(numpy.float32),
              rng.standard_normal(4).astype(numpy.float32),
              rng.standard_normal(4).astype(numpy.float32),
              rng.uniform(0.5, 2.0, 4).astype(numpy.float32))
             for _ in range(3)]
    _inference(f, calls, fused=True)


def _scale_mean(model):
    model.b.avg_mean = model.b.avg_mean + 1


def _scale_var(model):
    model.b.avg_var *= 3


def _new_gamma(model):
    model.b.gamma.array = model.b.gamma.array * -2


def _shift_beta(model):
    model.b.beta.data[...] += 5


def _halve_filter(model):
    model.c.W.array[...] *= 0.5


def _new_bias(model):
    model.c.b.array = model.c.b.array + 1


@pytest.mark.parametrize('change', [_scale_mean, _scale_var, _new_gamma,
                                    _shift_beta, _halve_filter, _new_bias])
def test_changed_statistics_and_weights_are_read_on_each_call(change):
    numpy.random.seed(0)
    model = _ConvBN()
    calls = _images(numpy.random.RandomState(17), (2, 3, 7, 7))
    jitted = _inference(model.forward, calls, fused=True)
    change(model)
    _inference(model.forward, calls, fused=True, jitted=jitted)
    assert jitted.cache_info().currsize == 1


@pytest.mark.parametrize('attr,value', [('eps', 0.7)])
def test_changed_epsilon_recompiles(attr, value):
    numpy.random.seed(0)
    model = _ConvBN()
    calls = _images(numpy.random.RandomState(18), (2, 3, 7, 7))
    jitted = _inference(model.forward, calls, fused=True)
    setattr(model.b, attr, value)
    _inference(model.forward, calls, fused=True, jitted=jitted)


def test_convolution_and_normalization_in_a_loop():
    numpy.random.seed(0)
    model = _ConvBN(c_in=4, c_out=4, pad=1)

    def f(xs):
        h = xs[0]
        for t in range(xs.shape[0]):
            h = F.relu(model.b(model.c(h))) + xs[t]
        return h
    rng = numpy.random.RandomState(19)
    calls = [(rng.standard_normal((t, 2, 4, 5, 5)).astype(numpy.float32),)
             for t in LENGTHS]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.errors.LoopWarning)
        _inference(f, calls, fused=True)


def test_deconvolution_keeps_its_normalization():
    class DeconvBN(chainer.Chain):
        def __init__(self):
            super(DeconvBN, self).__init__()
            with self.init_scope():
                self.c = L.Deconvolution2D(3, 4, 3)
                self.b = L.BatchNormalization(4)
            _randomize(self.b, numpy.random.RandomState(3))

        def forward(self, x):
            return self.b(self.c(x))
    numpy.random.seed(0)
    _inference(DeconvBN().forward, _images(numpy.random.RandomState(20),
                                           (2, 3, 5, 5)), fused=False)


def test_normalization_over_other_axes_is_not_fused():
    class ConvBNAxes(chainer.Chain):
        def __init__(self):
            super(ConvBNAxes, self).__init__()
            with self.init_scope():
                self.c = L.Convolution2D(3, 4, 3)
                self.b = L.BatchNormalization((4, 5, 5))
            _randomize(self.b, numpy.random.RandomState(3))

        def forward(self, x):
            return self.b(self.c(x))
    numpy.random.seed(0)
    _inference(ConvBNAxes().forward, _images(numpy.random.RandomState(21),
                                             (2, 3, 7, 7)), fused=False)


def test_switching_train_mode_between_calls_follows_eager():
    numpy.random.seed(0)
    eager = _ConvBN()
    jitted_model = copy.deepcopy(eager)
    jitted = chainerjit.jit(jitted_model.forward)
    rng = numpy.random.RandomState(22)
    for train in (False, False, True, True, False, True, False):
        x = rng.standard_normal((2, 3, 7, 7)).astype(numpy.float32)
        with chainer.using_config('train', train), \
                chainer.no_backprop_mode():
            expected = eager.forward(x)
            actual = jitted(x)
        testing.assert_results_equal(actual, expected, 1e-4, 1e-5)
        numpy.testing.assert_allclose(jitted_model.b.avg_mean,
                                      eager.b.avg_mean, rtol=1e-5)
        numpy.testing.assert_allclose(jitted_model.b.avg_var,
                                      eager.b.avg_var, rtol=1e-5)
    assert jitted.cache_info().hits > 0


def test_training_through_an_inference_normalization_is_not_fused():
    numpy.random.seed(0)
    model = _ConvBN()
    calls = _images(numpy.random.RandomState(23), (2, 3, 7, 7))
    with chainer.using_config('train', False):
        jitted = _check_grads(None, calls, model=model, method='forward')
    assert FUSED not in str(jitted.cache_entries()[0].graph)


ONNX_CASES = ['plain', 'stride_pad', 'dilate', 'nobias', 'cover_all',
              'bare', 'no_gamma']


@pytest.mark.parametrize('case', ONNX_CASES)
def test_fused_convolution_exports_to_onnx(case):
    pytest.importorskip('onnxruntime')
    kwargs, shape = CONV_BN_CASES[case]
    numpy.random.seed(0)
    model = _ConvBN(**kwargs)
    testing.assert_onnx_matches_eager(
        model.forward, _images(numpy.random.RandomState(24), shape),
        rtol=1e-4, atol=1e-5, lowered=(FUSED.split('+')[0],))


def test_fused_convolution_exports_with_a_dynamic_batch():
    pytest.importorskip('onnxruntime')
    numpy.random.seed(0)
    model = _ConvBN(stride=2, pad=1)
    rng = numpy.random.RandomState(25)
    calls = _images(rng, (2, 3, 8, 8)) + _images(rng, (5, 3, 8, 8))
    testing.assert_onnx_matches_eager(model.forward, calls, rtol=1e-4,
                                      atol=1e-5, dynamic_batch=True)


def _sigmoid_gamma(x, W, gamma, beta, mean, var):
    h = F.convolution_2d(x, W, pad=1)
    return F.fixed_batch_normalization(h, F.sigmoid(gamma), beta, mean, var)


def _var_from_gamma(x, W, gamma, beta, mean, var):
    h = F.convolution_2d(x, W, pad=1)
    return F.fixed_batch_normalization(h, gamma, beta, mean,
                                       gamma * gamma + var)


@pytest.mark.parametrize('fn', [_sigmoid_gamma, _var_from_gamma])
def test_normalization_inputs_computed_after_the_convolution(fn):
    rng = numpy.random.RandomState(26)
    calls = [(rng.standard_normal((2, 3, 5, 5)).astype(numpy.float32),
              rng.standard_normal((4, 3, 3, 3)).astype(numpy.float32),
              rng.uniform(0.5, 1.5, 4).astype(numpy.float32),
              rng.standard_normal(4).astype(numpy.float32),
              rng.standard_normal(4).astype(numpy.float32),
              rng.uniform(0.5, 2.0, 4).astype(numpy.float32))
             for _ in range(3)]
    _inference(fn, calls, fused=True)


# --- 3. codegen's memory reuse -----------------------------------------------

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


@pytest.mark.parametrize('fn', [
    _view_transpose, _view_expand_dims_returned, _view_split_axis,
    _view_separate, _view_get_item, _view_of_a_view, _view_added_to_itself,
    _views_of_many_kinds, _same_array_ops, _views_then_binary_into_either])
def test_buffers_with_live_views_are_not_written(fn):
    rng = numpy.random.RandomState(27)
    calls = _arrays(rng, (4, 4), (4, 4))
    originals = [tuple(a.copy() for a in call) for call in calls]
    testing.assert_jit_matches_eager(fn, calls)
    for call, original in zip(calls, originals):
        for a, b in zip(call, original):
            numpy.testing.assert_array_equal(a, b)
    _check_grads(fn, calls)


def test_reuse_happens_where_nothing_else_sees_the_buffer():
    def f(x, w):
        return F.sigmoid(F.tanh(F.relu(F.matmul(x, w)) + 1.0))
    jitted = testing.assert_jit_matches_eager(
        f, _arrays(numpy.random.RandomState(28), (3, 4), (4, 5)))
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


@pytest.mark.parametrize('method', ['loop_keeps_reshaped', 'loop_transposed',
                                    'loop_split', 'loop_separate'])
def test_views_in_loops(method):
    numpy.random.seed(0)
    rng = numpy.random.RandomState(30)
    calls = [(rng.standard_normal((t, 4, 4)).astype(numpy.float32),)
             for t in (5, 5, 2, 2, 7)]
    _check_grads(None, calls, model=_Effects(), method=method)
    model = _Effects()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.errors.LoopWarning)
        testing.assert_jit_matches_eager(getattr(model, method), calls)


# --- 4. comprehensions and length aliases ------------------------------------

def _comp_over_xs(xs, W):
    return F.stack([F.tanh(F.matmul(x, W)) for x in xs])


def _comp_multiline(xs, W):
    hs = [
        F.tanh(
            F.matmul(xs[t], W)
        ) * 2.0
        for t in range(len(xs))
    ]
    return F.stack(hs, axis=1)


def _comp_nested(xs, W):
    return F.stack([F.stack([F.tanh(x[i] * W[0]) for i in range(2)])
                    for x in xs])


def _comp_filtered(xs, W):
    return F.stack([F.tanh(F.matmul(xs[t], W))
                    for t in range(len(xs)) if t % 2 == 0])


def _comp_generator_sum(xs, W):
    return sum(F.tanh(F.matmul(x, W)) for x in xs)


def _comp_divided_by_len(xs, W):
    return F.sum(F.stack([F.matmul(x, W) for x in xs]), axis=0) / len(xs)


def _comp_counter_as_value(xs, W):
    T = len(xs)
    return F.stack([F.matmul(xs[t], W) * (t + 1.0) / T for t in range(T)])


def _comp_over_written_tuple(xs, W):
    a, b, c = xs[0], xs[-1], xs[0] * 2
    return F.stack([F.tanh(F.matmul(t, W)) for t in (a, b, c)])


def _comp_list_returned(xs, W):
    return [F.tanh(F.matmul(x, W)) for x in xs]


def _comp_reversed_after(xs, W):
    hs = [F.tanh(F.matmul(x, W)) for x in xs]
    return F.stack(hs[::-1])


def _comp_appended_after(xs, W):
    hs = [F.tanh(F.matmul(x, W)) for x in xs]
    out = F.stack(hs)
    hs.append(out[0])
    return out * 1.0, F.stack(hs) * 1.0


def _comp_zip_reversed(xs, W):
    return F.stack([F.matmul(x, W) + y for x, y in zip(xs, xs[::-1])])


def _comp_enumerate_value(xs, W):
    return F.stack([F.matmul(x, W) * i for i, x in enumerate(xs)])


def _comp_two_over_xs(xs, W):
    return F.stack([F.matmul(x, W) for x in xs]) + F.stack(
        [F.sigmoid(F.matmul(x, W)) for x in xs])


def _loop_len_alias(xs, W):
    T = len(xs)
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[t])
    return h


def _loop_alias_as_value(xs, W):
    T = len(xs)
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[t] / T)
    return h * float(T)


def _loop_alias_reassigned(xs, W):
    T = len(xs)
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[t])
    T = 2
    return h * T


def _loop_alias_reassigned_before(xs, W):
    T = len(xs)
    if T > 4:
        T = 4
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[t])
    return h


def _loop_alias_minus_one(xs, W):
    T = len(xs)
    h = xs[0]
    for t in range(T - 1):
        h = F.tanh(F.matmul(h, W) + xs[t + 1])
    return h


def _loop_shape_alias_reversed_index(xs, W):
    T = xs.shape[0]
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[T - 1 - t])
    return h


def _loop_alias_of_alias(xs, W):
    T = len(xs)
    n = T
    h = xs[0]
    for t in range(n):
        h = F.tanh(F.matmul(h, W) + xs[t])
    return h


def _loop_alias_range_from_one(xs, W):
    T = len(xs)
    h = xs[0]
    for t in range(1, T):
        h = F.tanh(F.matmul(h, W) + xs[t])
    return h


def _loop_alias_in_broadcast(xs, W):
    T = len(xs)
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[t])
    return F.broadcast_to(h, (T,) + h.shape)


def _loop_alias_loop_variable_rebinds(xs, W):
    T = len(xs)
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[t])
    for T in range(2):
        h = h + 1.0
    return h


def _loop_alias_read_by_closure(xs, W):
    T = len(xs)

    def scale():
        return float(T)
    h = xs[0]
    for t in range(T):
        h = F.tanh(F.matmul(h, W) + xs[t])
    return h * scale()


COMPREHENSIONS = [
    _comp_over_xs, _comp_multiline, _comp_nested, _comp_filtered,
    _comp_generator_sum, _comp_divided_by_len, _comp_counter_as_value,
    _comp_over_written_tuple, _comp_list_returned, _comp_reversed_after,
    _comp_appended_after, _comp_zip_reversed, _comp_enumerate_value,
    _comp_two_over_xs]

ALIASES = [
    _loop_len_alias, _loop_alias_as_value, _loop_alias_reassigned,
    _loop_alias_reassigned_before, _loop_alias_minus_one,
    _loop_shape_alias_reversed_index, _loop_alias_of_alias,
    _loop_alias_range_from_one, _loop_alias_in_broadcast,
    _loop_alias_loop_variable_rebinds, _loop_alias_read_by_closure]


@pytest.mark.parametrize('fn', COMPREHENSIONS + ALIASES)
def test_comprehensions_and_aliases_match_eager(fn):
    rng = numpy.random.RandomState(31)
    W = rng.standard_normal((4, 4)).astype(numpy.float32) * 0.5
    calls = _sequences(rng, W)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.errors.LoopWarning)
        testing.assert_jit_matches_eager(fn, calls)
    _check_grads(fn, calls)


def test_a_plain_comprehension_rolls_into_one_entry():
    rng = numpy.random.RandomState(32)
    W = rng.standard_normal((4, 4)).astype(numpy.float32)
    for fn in (_comp_over_xs, _comp_multiline, _loop_len_alias):
        jitted = testing.assert_jit_matches_eager(fn, _sequences(rng, W))
        assert len(jitted.cache_entries()) == 1, fn.__name__


class _Helpers(chainer.Chain):

    def __init__(self):
        super(_Helpers, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 4)

    def steps(self, xs):
        return [F.tanh(self.fc(x)) for x in xs]

    def through_helper(self, xs):
        return F.stack(self.steps(xs))

    def comprehension_of_alias(self, xs):
        T = len(xs)
        return F.stack([F.tanh(self.fc(xs[t])) for t in range(T)])


@pytest.mark.parametrize('method', ['through_helper',
                                    'comprehension_of_alias'])
def test_comprehensions_in_methods(method):
    numpy.random.seed(0)
    rng = numpy.random.RandomState(33)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.errors.LoopWarning)
        _check_grads(None, _sequences(rng), model=_Helpers(), method=method)


def test_length_alias_of_another_argument():
    def f(xs, ys, W):
        T = len(ys)
        h = xs[0]
        for t in range(T):
            h = F.tanh(F.matmul(h, W) + xs[t] + ys[t])
        return h
    rng = numpy.random.RandomState(34)
    W = rng.standard_normal((4, 4)).astype(numpy.float32) * 0.5
    calls = [(rng.standard_normal((a, 2, 4)).astype(numpy.float32),
              rng.standard_normal((b, 2, 4)).astype(numpy.float32), W)
             for a, b in ((5, 3), (5, 3), (6, 2), (4, 4), (8, 1), (8, 1))]
    _check_grads(f, calls)


def _stack_and_last_of_comprehension(xs, W):
    hs = [F.matmul(x, W) for x in xs]
    return F.stack(hs), hs[-1]


def _stack_and_first_of_loop(xs, W):
    hs = []
    for x in xs:
        hs.append(F.tanh(F.matmul(x, W)))
    return F.stack(hs), hs[0]


def _concat_and_stack(xs, W):
    hs = [F.matmul(x, W) for x in xs]
    return F.concat(hs), F.stack(hs)


def _stack_and_sum_of_last(xs, W):
    hs = [F.matmul(x, W) for x in xs]
    return F.stack(hs), F.sum(hs[-1])


@pytest.mark.parametrize('fn', [_stack_and_last_of_comprehension,
                                _stack_and_first_of_loop, _concat_and_stack,
                                _stack_and_sum_of_last])
def test_list_gradients_from_two_consumers_add_up(fn):
    rng = numpy.random.RandomState(35)
    W = rng.standard_normal((4, 4)).astype(numpy.float32) * 0.5
    _check_grads(fn, _sequences(rng, W, lengths=(3, 3, 3)))


def test_loss_over_stack_and_last_item_trains_like_eager():
    rng = numpy.random.RandomState(36)
    W0 = rng.standard_normal((4, 4)).astype(numpy.float32)
    jitted = chainerjit.jit(_stack_and_last_of_comprehension)
    for _ in range(3):
        xs = rng.standard_normal((3, 2, 4)).astype(numpy.float32)
        grads = []
        for fn in (_stack_and_last_of_comprehension, jitted):
            W = chainer.Variable(W0.copy())
            seq, last = fn(chainer.Variable(xs.copy()), W)
            (F.sum(seq) + F.sum(last)).backward()
            grads.append(W.grad)
        numpy.testing.assert_allclose(grads[1], grads[0], rtol=1e-5,
                                      atol=1e-6)
