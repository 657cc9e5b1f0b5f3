"""A zoo of Chainer models, jitted, against eager Chainer.

Every case builds one model, copies it (identical parameters and
persistents), jits the copy's ``forward`` and calls both with the same
fresh inputs: several calls per input signature, at least two signatures.
After every call the outputs, ``chainer.report`` values, raised exception
types and the whole state of both models (parameters, persistents, array
and Python attributes of every link) must agree. A case may fall back to
eager mode only where it says so (``fallback_ok``); the summary of compiled
and fallen-back cases is printed at the end of the module.
"""

import collections
import copy
import warnings

import chainer
import chainer.functions as F
from chainer.functions.pooling import max_pooling_nd
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests import summaries


f32 = numpy.float32

# ----------------------------------------------------------------------
# The harness


Case = collections.namedtuple(
    'Case', 'name build sigs train warmup rtol atol hook n_calls '
    'fallback_ok xfail scribble backprop')


def case(name, build, sigs, train=False, warmup=True, rtol=1e-5,
         atol=1e-6, hook=None, n_calls=3, fallback_ok=False, xfail=None,
         scribble=False, backprop=False):
    return Case(name, build, sigs, train, warmup, rtol, atol, hook,
                n_calls, fallback_ok, xfail, scribble, backprop)


SUMMARY = collections.OrderedDict()


@pytest.fixture(scope='module', autouse=True)
def _print_summary(request):
    yield
    summaries.write_after_module(request, SUMMARY, _write_summary)


def _write_summary(tr):
    done = {n: s for n, s in SUMMARY.items() if 'entries' in s}
    fell = [n for n, s in done.items() if s['eager'] or s['warnings']]
    no_hits = [n for n, s in done.items() if not s['hits']]
    tr.write_line('')
    tr.write_line(
        'test_zoo: %d cases; %d ran to the end: %d fully compiled, %d '
        'with a fallback, %d never hit the cache; %d failed (bugs, '
        'xfail)' % (len(SUMMARY), len(done), len(done) - len(fell),
                    len(fell), len(no_hits), len(SUMMARY) - len(done)))
    for name in fell:
        s = done[name]
        tr.write_line('  fallback %s: %d/%d entries eager; warning: %s' % (
            name, s['eager'], s['entries'],
            '; '.join(sorted(set(s['warnings'])))[:200]))
    for name in no_hits:
        s = done[name]
        tr.write_line('  no hits %s: %d entries, %d eager' % (
            name, s['entries'], s['eager']))


def _rand(rng, *shape, **kw):
    dtype = kw.pop('dtype', f32)
    return rng.uniform(-1, 1, shape).astype(dtype)


def _value(v):
    """A comparable snapshot of an attribute value."""
    if isinstance(v, chainer.Parameter):
        return ('param', None if v.array is None else v.array.copy(),
                None if v.grad is None else v.grad.copy())
    if isinstance(v, chainer.Variable):
        return ('var', None if v.array is None else v.array.copy())
    if isinstance(v, numpy.ndarray):
        return ('arr', v.copy())
    if isinstance(v, (bool, int, float, str, type(None), numpy.generic)):
        return ('py', v)
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [_value(x) for x in v])
    if isinstance(v, dict):
        return ('dict', {k: _value(x) for k, x in v.items()})
    if isinstance(v, chainer.Link):
        return ('link', type(v).__name__)
    return ('obj', type(v).__name__)


def _state(model):
    state = {}
    for path, link in model.namedlinks():
        for k, v in vars(link).items():
            if k in ('forward', '_children'):
                continue
            if k.startswith('_') and k not in ('_persistent', '_params'):
                continue
            if k in ('_persistent', '_params'):
                v = sorted(v)
            state[path + '/' + k] = _value(v)
    return state


def _assert_values_equal(a, e, where, rtol, atol):
    assert a[0] == e[0], '%s: %r vs eager %r' % (where, a[0], e[0])
    if a[0] == 'param':
        _assert_values_equal(('arr', a[1]), ('arr', e[1]), where, rtol,
                             atol)
        _assert_values_equal(('arr', a[2]), ('arr', e[2]), where + '.grad',
                             rtol, atol)
    elif a[0] in ('var', 'arr'):
        if e[1] is None or a[1] is None:
            assert a[1] is None and e[1] is None, where
            return
        assert a[1].shape == e[1].shape, '%s: shape %s vs eager %s' % (
            where, a[1].shape, e[1].shape)
        assert a[1].dtype == e[1].dtype, where
        numpy.testing.assert_allclose(a[1], e[1], rtol=rtol, atol=atol,
                                      err_msg=where)
    elif a[0] in ('list', 'tuple'):
        assert len(a[1]) == len(e[1]), where
        for i, (x, y) in enumerate(zip(a[1], e[1])):
            _assert_values_equal(x, y, '%s[%d]' % (where, i), rtol, atol)
    elif a[0] == 'dict':
        assert sorted(a[1]) == sorted(e[1]), where
        for k in a[1]:
            _assert_values_equal(a[1][k], e[1][k], '%s[%r]' % (where, k),
                                 rtol, atol)
    else:
        assert type(a[1]) is type(e[1]) and (
            a[1] == e[1] or a[1] != a[1] and e[1] != e[1]), (
            '%s: %r vs eager %r' % (where, a[1], e[1]))


def _assert_states_equal(actual, expected, rtol, atol, when):
    assert sorted(actual) == sorted(expected), (
        '%s: attributes differ: %s' % (when, sorted(
            set(actual).symmetric_difference(expected))))
    for k in expected:
        _assert_values_equal(actual[k], expected[k], '%s: %s' % (when, k),
                             rtol, atol)


def _call(model, args, kwargs, seed):
    reporter = chainer.Reporter()
    reporter.add_observer('main', model)
    reporter.add_observers('main', model.namedlinks(skipself=True))
    observation = {}
    numpy.random.seed(seed)
    with reporter.scope(observation):
        try:
            out = model(*args, **kwargs)
        except Exception as e:
            return None, observation, e
    rng_state = numpy.random.get_state()
    observation['(numpy.random position)'] = (
        rng_state[2], int(rng_state[1].sum()))
    return out, observation, None


def _variables(out):
    if isinstance(out, chainer.Variable):
        return [out]
    if isinstance(out, (list, tuple)):
        return [v for o in out for v in _variables(o)]
    if isinstance(out, dict):
        return [v for k in sorted(out) for v in _variables(out[k])]
    return []


def _outputs_snapshot(out):
    return [(type(v).__name__, v.requires_grad, v.array.copy())
            for v in _variables(out)]


def _arrays(out):
    if isinstance(out, chainer.Variable):
        return [out.array]
    if isinstance(out, numpy.ndarray):
        return [out]
    if isinstance(out, (list, tuple)):
        return [a for o in out for a in _arrays(o)]
    if isinstance(out, dict):
        return [a for k in sorted(out) for a in _arrays(out[k])]
    return []


def _scribble(out):
    """Changes every output array in place, as a user might."""
    for a in _arrays(out):
        if a.dtype.kind == 'f' and a.ndim:
            a *= 0.5


def _split(made):
    if isinstance(made, dict):
        return made['args'], made.get('kwargs', {})
    return made, {}


def run_case(c):
    rng = numpy.random.RandomState(0)
    numpy.random.seed(0)
    fallbacks = []
    with chainer.using_config('train', c.train), \
            chainer.no_backprop_mode(), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always', chainerjit.FallbackWarning)
        model = c.build()
        if c.warmup:
            args, kwargs = _split(c.sigs[0](rng))
            numpy.random.seed(12345)
            model(*args, **kwargs)
        jmodel = copy.deepcopy(model)
        jmodel.forward = chainerjit.jit(jmodel.forward)
        _assert_states_equal(_state(jmodel), _state(model), 0, 0, 'copy')
        kept = []
        for s, make in enumerate(c.sigs):
            for i in range(c.n_calls):
                args, kwargs = _split(make(rng))
                jargs, jkwargs = copy.deepcopy((args, kwargs))
                seed = 1000 + 10 * s + i
                when = '%s sig %d call %d' % (c.name, s, i)
                with chainer.using_config('enable_backprop', c.backprop):
                    e_out, e_obs, e_exc = _call(model, args, kwargs, seed)
                    j_out, j_obs, j_exc = _call(jmodel, jargs, jkwargs,
                                                seed)
                if c.backprop and e_exc is None and j_exc is None:
                    F.sum(_variables(e_out)[0]).backward()
                    F.sum(_variables(j_out)[0]).backward()
                if e_exc is not None or j_exc is not None:
                    assert type(j_exc) is type(e_exc), (
                        '%s: raised %r, eager raised %r' % (
                            when, j_exc, e_exc))
                else:
                    testing.assert_results_equal(j_out, e_out, c.rtol,
                                                 c.atol)
                    for a, e in zip(_outputs_snapshot(j_out),
                                    _outputs_snapshot(e_out)):
                        assert a[:2] == e[:2], '%s: output %s vs eager %s' % (
                            when, a[:2], e[:2])
                    kept.append((when, _outputs_snapshot(j_out), j_out))
                assert sorted(j_obs) == sorted(e_obs), when
                for k in e_obs:
                    _assert_values_equal(
                        _value(j_obs[k]), _value(e_obs[k]),
                        '%s: report %s' % (when, k), c.rtol, c.atol)
                _assert_states_equal(_state(jmodel), _state(model), c.rtol,
                                     c.atol, when)
                if c.hook is not None:
                    c.hook(model, s, i)
                    c.hook(jmodel, s, i)
                if c.scribble and e_exc is None:
                    _scribble(e_out)
                    _scribble(j_out)
                    _assert_states_equal(_state(jmodel), _state(model),
                                         c.rtol, c.atol, when + ' scribbled')
        if not c.scribble:
            # Later calls must not overwrite the arrays returned earlier.
            for when, snapshot, out in kept:
                for (_, _, old), (_, _, now) in zip(
                        snapshot, _outputs_snapshot(out)):
                    numpy.testing.assert_array_equal(
                        now, old, err_msg=when + ' changed by later calls')
    for w in caught:
        if issubclass(w.category, chainerjit.FallbackWarning):
            fallbacks.append(str(w.message).splitlines()[0])
    entries = jmodel.forward.cache_entries()
    eager = [e.fallback for e in entries if e.fallback is not None]
    SUMMARY[c.name] = dict(
        entries=len(entries), hits=jmodel.forward.cache_info().hits,
        eager=len(eager), warnings=fallbacks)
    if not c.fallback_ok and not c.backprop:
        assert not eager and not fallbacks, (
            '%s fell back: %s' % (c.name, eager + fallbacks))
        assert jmodel.forward.cache_info().hits > 0, c.name
    return jmodel


# ----------------------------------------------------------------------
# Models


class Seq(chainer.Chain):
    """``forward`` applies ``fn(self, *args)``; links as keyword args."""

    def __init__(self, fn, **links):
        super(Seq, self).__init__()
        self.fn = fn
        with self.init_scope():
            for name, link in links.items():
                setattr(self, name, link)

    def forward(self, *args, **kwargs):
        return self.fn(self, *args, **kwargs)


def seq(fn, **links):
    return lambda: Seq(fn, **links)


def one(*shape, **kw):
    """A signature of one array argument with the given shape."""
    return lambda rng: (_rand(rng, *shape, **kw),)


def _bn_randomized(size, **kw):
    bn = L.BatchNormalization(size, **kw)
    r = numpy.random.RandomState(7)
    bn.avg_mean[...] = r.randn(size)
    bn.avg_var[...] = r.uniform(0.5, 2, size)
    bn.gamma.array[...] = r.uniform(0.5, 2, size)
    bn.beta.array[...] = r.randn(size)
    return bn


class ResBlock(chainer.Chain):
    def __init__(self, ch=4):
        super(ResBlock, self).__init__()
        with self.init_scope():
            self.c1 = L.Convolution2D(ch, ch, 3, pad=1, nobias=True)
            self.b1 = _bn_randomized(ch)
            self.c2 = L.Convolution2D(ch, ch, 3, pad=1, nobias=True)
            self.b2 = _bn_randomized(ch)

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)))
        h = self.b2(self.c2(h))
        return F.relu(h + x)


class VGG(chainer.Chain):
    def __init__(self):
        super(VGG, self).__init__()
        with self.init_scope():
            self.c1 = L.Convolution2D(None, 4, 3, pad=1)
            self.c2 = L.Convolution2D(4, 4, 3, pad=1)
            self.c3 = L.Convolution2D(4, 8, 3, pad=1)
            self.fc = L.Linear(None, 5)

    def forward(self, x):
        h = F.relu(self.c2(F.relu(self.c1(x))))
        h = F.max_pooling_2d(h, 2)
        h = F.relu(self.c3(h))
        h = F.average_pooling_2d(h, 2)
        return F.log_softmax(self.fc(h))


class Attention(chainer.Chain):
    def __init__(self, d=6):
        super(Attention, self).__init__()
        with self.init_scope():
            self.q = L.Linear(d, d)
            self.k = L.Linear(d, d)
            self.v = L.Linear(d, d)

    def forward(self, x, lengths):
        b, t, d = x.shape
        q = self.q(x, n_batch_axes=2)
        k = self.k(x, n_batch_axes=2)
        v = self.v(x, n_batch_axes=2)
        s = F.matmul(q, k, transb=True) / numpy.sqrt(d)
        xp = chainer.backend.get_array_module(x)
        valid = xp.arange(t)[None, :] < lengths[:, None]
        mask = xp.broadcast_to(valid[:, None, :], s.shape)
        s = F.where(mask, s, xp.full(s.shape, -1e9, s.dtype))
        a = F.softmax(s, axis=2)
        return F.matmul(a, v), a


class DictOut(chainer.Chain):
    def __init__(self):
        super(DictOut, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 2)

    def forward(self, xs, scale=2.0):
        hs = [self.fc(x) * scale for x in xs]
        total = hs[0]
        for h in hs[1:]:
            total = total + h
        return {'y': total, 'n': len(xs), 'shape': xs[0].shape,
                'parts': tuple(hs), 'name': 'dict-out', 'none': None}


class ShapeUser(chainer.Chain):
    def __init__(self):
        super(ShapeUser, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(None, 3)

    def forward(self, x):
        n, c = x.shape[:2]
        h = F.reshape(x, (n, -1))
        h = self.fc(h)
        h = h * (1.0 / c) + x.shape[2]
        return F.broadcast_to(F.sum(h, axis=0, keepdims=True), (n, 3)), n


class ListLoop(chainer.Chain):
    def __init__(self):
        super(ListLoop, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 4)

    def forward(self, xs):
        outs = []
        h = None
        for i, x in enumerate(xs):
            y = F.tanh(self.fc(x))
            h = y if h is None else h * 0.5 + y
            outs.append(h * (i + 1))
        return outs, len(xs)


class StatefulLSTM(chainer.Chain):
    def __init__(self):
        super(StatefulLSTM, self).__init__()
        with self.init_scope():
            self.embed = L.Linear(3, 4)
            self.lstm = L.LSTM(4, 5)
            self.out = L.Linear(5, 2)

    def reset_state(self):
        self.lstm.reset_state()

    def forward(self, x):
        return self.out(self.lstm(F.relu(self.embed(x))))


class GRUModel(chainer.Chain):
    def __init__(self):
        super(GRUModel, self).__init__()
        with self.init_scope():
            self.gru = L.StatefulGRU(3, 4)

    def reset_state(self):
        self.gru.reset_state()

    def forward(self, x):
        return self.gru(x)


def _reset_every(k):
    def hook(model, s, i):
        if i == k or i == 2:
            model.reset_state()
    return hook


def _stateful_sigs(batch):
    return lambda rng: (_rand(rng, batch, 3),)


class NStep(chainer.Chain):
    def __init__(self, cls, *args, **kwargs):
        super(NStep, self).__init__()
        self.lstm_like = cls in (L.NStepLSTM, L.NStepBiLSTM)
        with self.init_scope():
            self.rnn = cls(*args, **kwargs)

    def forward(self, xs):
        if self.lstm_like:
            hy, cy, ys = self.rnn(None, None, xs)
            return hy, cy, ys
        hy, ys = self.rnn(None, xs)
        return hy, ys


def _seqs(*lengths):
    return lambda rng: ([_rand(rng, n, 3) for n in lengths],)


class Counter(chainer.Chain):
    """Python state updated by the forward."""

    def __init__(self):
        super(Counter, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.add_persistent('calls', 0)
        self.last = None
        self.last_batch = None

    def forward(self, x):
        self.calls += 1
        h = self.fc(x)
        self.last = h
        self.last_batch = x.shape[0]
        chainer.report({'mean': F.mean(h), 'calls': self.calls}, self)
        return h * self.calls


class Reporter(chainer.Chain):
    def __init__(self):
        super(Reporter, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.last = None
        self.last_batch = None

    def forward(self, x):
        h = self.fc(x)
        self.last = h
        self.last_batch = x.shape[0]
        chainer.report({'mean': F.mean(h), 'max': F.max(h)}, self)
        chainer.report({'n': x.shape[0]}, self.fc)
        return h


class Accumulator(chainer.Chain):
    """An array persistent changed in place by NumPy."""

    def __init__(self):
        super(Accumulator, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.add_persistent('total', numpy.zeros(3, f32))

    def forward(self, x):
        h = self.fc(x)
        self.total += h.array.sum(axis=0)
        return h


class History(chainer.Chain):
    """A Python list attribute appended to by the forward."""

    def __init__(self):
        super(History, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.history = []

    def forward(self, x):
        h = self.fc(x)
        self.history.append(h)
        return h


class AccumulateNode(chainer.FunctionNode):
    """A user FunctionNode updating a running buffer in place."""

    def __init__(self, buf, decay):
        self.buf = buf
        self.decay = decay

    def forward(self, inputs):
        x, = inputs
        self.buf *= self.decay
        self.buf += (1 - self.decay) * x.mean(axis=0)
        return x - self.buf,


class RunningCenter(chainer.Chain):
    def __init__(self):
        super(RunningCenter, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.add_persistent('buf', numpy.zeros(3, f32))

    def forward(self, x):
        h = self.fc(x)
        y, = AccumulateNode(self.buf, 0.9).apply((h,))
        return y


class OldScale(chainer.Function):
    def __init__(self, k):
        self.k = k

    def forward(self, inputs):
        return inputs[0] * self.k + inputs[1],


class OldStyle(chainer.Chain):
    def __init__(self):
        super(OldStyle, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)

    def forward(self, x, k=2.0):
        h = self.fc(x)
        return OldScale(k)(h, F.tanh(h))


class Noisy(chainer.Chain):
    def __init__(self):
        super(Noisy, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(4, 4)

    def forward(self, x):
        noise = numpy.random.uniform(-1, 1, x.shape).astype(x.dtype)
        return self.fc(x + noise)


class Embed(chainer.Chain):
    def __init__(self):
        super(Embed, self).__init__()
        with self.init_scope():
            self.e = L.EmbedID(7, 3, ignore_label=-1)
            self.fc = L.Linear(3, 2)

    def forward(self, ids):
        h = self.e(ids)
        return self.fc(F.sum(h, axis=1))


def _ids(*shape):
    return lambda rng: (rng.randint(-1, 7, shape).astype(numpy.int32),)


def _classifier():
    return L.Classifier(L.Linear(4, 3))


def _labels(batch):
    return lambda rng: (_rand(rng, batch, 4),
                        rng.randint(0, 3, batch).astype(numpy.int32))


def _typed(dtype, build):
    def make():
        with chainer.using_config('dtype', dtype):
            return build()
    return make


def _mlp():
    return chainer.Sequential(L.Linear(4, 5), F.relu, L.Linear(5, 2))


class Chains(chainer.ChainList):
    def __init__(self):
        super(Chains, self).__init__(
            L.Linear(4, 4), L.Linear(4, 4), L.Linear(4, 2))

    def forward(self, x):
        for link in self[:-1]:
            x = F.leaky_relu(link(x), slope=0.1)
        return self[-1](x)


def _grab_bag(m, x):
    """Many chainer.functions, one after the other."""
    a, b = F.split_axis(x, [1], axis=1)
    h = F.concat([F.sigmoid(a), F.tanh(b), F.elu(b)], axis=1)
    h = F.pad(h, ((0, 0), (0, 0), (1, 1), (1, 1)), 'constant')
    h = F.local_response_normalization(h, n=3)
    h = F.unpooling_2d(F.max_pooling_2d(h, 2), 2, outsize=h.shape[2:])
    h = F.space2depth(F.depth2space(F.tile(h, (1, 4, 1, 1)), 2), 2)
    h = F.transpose(h, (0, 2, 3, 1))
    h = F.flip(F.swapaxes(h, 1, 2), 3)
    h = F.clip(h, -0.5, 0.7) + F.softplus(h) * F.absolute(h)
    h = h[:, 1:, ::2] * 2 - F.expand_dims(F.max(h, axis=(1, 2)), 1)[
        :, :, None]
    s = F.stack([F.logsumexp(h, axis=3), F.mean(h, axis=3)], axis=0)
    return (F.squeeze(F.sum(s, axis=(2, 3), keepdims=True), (2, 3)),
            F.cumsum(h, axis=1), F.argmax(h, axis=3), F.tile(h[:, :1], 2))


def _matmuls(m, a, b):
    p = F.batch_matmul(a, b, transb=True)
    q = F.matmul(a, b, transb=True)
    r = F.einsum('bij,bkj->bik', a, b) if hasattr(F, 'einsum') else p
    return p - q, r, F.linear(a.reshape(-1, a.shape[-1]), b[0])


def _losses(m, x, t):
    return (F.softmax_cross_entropy(x, t),
            F.softmax_cross_entropy(x, t, reduce='no'),
            F.accuracy(x, t),
            F.sigmoid_cross_entropy(x, (t[:, None] > 0).astype(
                numpy.int32).repeat(x.shape[1], 1)),
            F.mean_squared_error(x, F.softmax(x)),
            F.select_item(x, F.where(t >= 0, t, numpy.zeros_like(t))))


def _ce_sigs(batch):
    def make(rng):
        t = rng.randint(-1, 4, batch).astype(numpy.int32)
        return _rand(rng, batch, 4), t
    return make


def _pooling_nd(m, x):
    return (F.max_pooling_nd(x, 2), F.average_pooling_nd(x, 2),
            F.max_pooling_2d(x[:, :, 0], 3, stride=2, cover_all=True))


def _ids_seq(values):
    values = iter(values * 2)
    return lambda rng: (numpy.array(next(values), numpy.int32),)


def _labels_seq(values):
    values = iter(values * 2)
    return lambda rng: (_rand(rng, 2, 4),
                        numpy.array(next(values), numpy.int32))


def _ce(m, x, t):
    return F.softmax_cross_entropy(x, t), F.select_item(
        x, F.where(t >= 0, t, numpy.zeros_like(t)))


def _unpool_with_indexes(m, x):
    p = F.max_pooling_2d(x, 2, return_indices=True)
    y, idx = p
    up = F.upsampling_2d(y * 2, idx, 2, outsize=x.shape[2:])
    node = max_pooling_nd.MaxPoolingND(2, 2)
    z, = node.apply((x * -1,))
    up2 = F.upsampling_2d(z, node.indexes, 2, outsize=x.shape[2:])
    return up, up2, idx


def _data_if(m, x):
    h = m.fc(x)
    if (h.array > 0).sum() > 3:
        h = h * 2
    return h, float(h.array.max())


def _perturb(m, s, i):
    m.fc.W.array *= 0.9
    m.fc.b.array = m.fc.b.array + 1


def _replace_link(m, s, i):
    if i:
        return
    del m.fc
    with m.init_scope():
        m.fc = L.Linear(3, 3, initialW=numpy.full((3, 3), i + 1, f32),
                        nobias=bool(i % 2))


def _bn_flag(m, x, train):
    with chainer.using_config('train', train):
        return m.bn(x)


def _aliasing(m, x, y):
    h = m.fc(x)
    return h, h, x, m.fc.W, [h, (y, 1)], None


def _in_place(m, x):
    h = m.fc(x)
    h.array[...] = numpy.maximum(h.array, 0)
    return h * 2


def _bad_shape(m, x):
    return m.fc(x)


def _ported_numpy(m, x):
    x = chainer.as_variable(x)
    a = numpy.abs(x.array) + 1
    h = m.fc(F.log(a)) * numpy.float32(2)
    z = numpy.where(x.array > 0, x.array, 0)
    return h + m.fc(z), x.array.T.copy()


class Slope(chainer.Chain):
    def __init__(self):
        super(Slope, self).__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.slope = 0.2

    def forward(self, x):
        return F.leaky_relu(self.fc(x), slope=self.slope)


CASES = [
    case('conv2d_stride_pad', seq(
        lambda m, x: m.c(x), c=L.Convolution2D(3, 4, 3, stride=2, pad=1)),
        [one(2, 3, 9, 9), one(1, 3, 7, 8)], rtol=1e-4,
        atol=1e-5),
    case('conv2d_dilate_groups', seq(
        lambda m, x: m.c2(m.c1(x)),
        c1=L.Convolution2D(4, 6, 3, pad=2, dilate=2, groups=2),
        c2=L.Convolution2D(6, 3, (2, 3), stride=(2, 1), groups=3)),
        [one(2, 4, 8, 8), one(3, 4, 6, 7)], rtol=1e-4,
        atol=1e-5),
    case('conv2d_lazy_batch0', seq(
        lambda m, x: m.c(x), c=L.Convolution2D(None, 2, 3)),
        [one(2, 3, 5, 5), one(0, 3, 5, 5)]),
    case('dilated_conv2d', seq(
        lambda m, x: m.c(x),
        c=L.DilatedConvolution2D(3, 4, 3, pad=2, dilate=2)),
        [one(2, 3, 8, 8), one(1, 3, 5, 6)], rtol=1e-4, atol=1e-5),
    case('deconv2d', seq(
        lambda m, x: m.d2(m.d1(x)),
        d1=L.Deconvolution2D(3, 4, 4, stride=2, pad=1),
        d2=L.Deconvolution2D(4, 2, 3, groups=2, outsize=None)),
        [one(2, 3, 4, 4), one(1, 3, 3, 5)], rtol=1e-4,
        atol=1e-5),
    case('deconv2d_outsize', seq(
        lambda m, x: m.d(x),
        d=L.Deconvolution2D(3, 2, 3, stride=2, outsize=(10, 10))),
        [one(2, 3, 5, 5), one(1, 3, 5, 5)], rtol=1e-4,
        atol=1e-5),
    case('depthwise_conv2d', seq(
        lambda m, x: m.c(x),
        c=L.DepthwiseConvolution2D(3, 2, 3, stride=1, pad=1)),
        [one(2, 3, 5, 5), one(1, 3, 6, 4)], rtol=1e-4,
        atol=1e-5),
    case('conv3d', seq(
        lambda m, x: m.d(F.relu(m.c(x))),
        c=L.ConvolutionND(3, 2, 3, 3, pad=1, stride=(1, 2, 1)),
        d=L.DeconvolutionND(3, 3, 2, 2, stride=2)),
        [one(2, 2, 4, 5, 3), one(1, 2, 3, 3, 3)], rtol=1e-4,
        atol=1e-5),
    case('pooling_nd', seq(_pooling_nd),
         [one(2, 2, 4, 4, 4), one(1, 3, 5, 6, 4)]),
    case('linear_n_batch_axes', seq(
        lambda m, x: m.fc(x, n_batch_axes=2), fc=L.Linear(None, 3)),
        [one(2, 3, 4), one(4, 1, 4), one(0, 2, 4)]),
    case('bilinear', seq(
        lambda m, a, b: m.b(a, b), b=L.Bilinear(3, 4, 5)),
        [lambda r: (_rand(r, 2, 3), _rand(r, 2, 4)),
         lambda r: (_rand(r, 1, 3), _rand(r, 1, 4))]),
    case('embed_id_ignore_label', Embed, [_ids(3, 4), _ids(1, 2)]),
    case('highway_maxout', seq(
        lambda m, x: m.m(m.h(x)), h=L.Highway(5), m=L.Maxout(5, 4, 3)),
        [one(3, 5), one(1, 5)]),
    case('mlp_conv_inception', seq(
        lambda m, x: m.i(m.m(x)),
        m=L.MLPConvolution2D(3, (4, 5), 3, pad=1),
        i=L.Inception(5, 2, 2, 3, 2, 3, 2)),
        [one(2, 3, 6, 6), one(1, 3, 5, 7)], rtol=1e-4,
        atol=1e-5),
    case('nstep_lstm', lambda: NStep(L.NStepLSTM, 2, 3, 4, 0.0),
         [_seqs(4, 3, 1), _seqs(2, 2)], rtol=1e-4, atol=1e-5),
    case('nstep_gru', lambda: NStep(L.NStepGRU, 1, 3, 4, 0.0),
         [_seqs(3, 2), _seqs(5, 1, 1)], rtol=1e-4, atol=1e-5),
    case('nstep_bilstm', lambda: NStep(L.NStepBiLSTM, 2, 3, 2, 0.0),
         [_seqs(3, 3), _seqs(4, 2, 1)], rtol=1e-4, atol=1e-5),
    case('nstep_lstm_dropout_train',
         lambda: NStep(L.NStepLSTM, 2, 3, 4, 0.5),
         [_seqs(4, 3, 1), _seqs(2, 2)], train=True, rtol=1e-4, atol=1e-5),
    case('lstm_stateful', StatefulLSTM,
         [_stateful_sigs(3), _stateful_sigs(2)], n_calls=4,
         hook=_reset_every(3), rtol=1e-4, atol=1e-5),
    case('lstm_shrinking_batch', StatefulLSTM,
         [lambda rng: (_rand(rng, 3, 3),), lambda rng: (_rand(rng, 2, 3),),
          lambda rng: (_rand(rng, 1, 3),)], warmup=False, rtol=1e-4,
         atol=1e-5),
    case('stateful_gru', GRUModel, [_stateful_sigs(2), _stateful_sigs(1)],
         n_calls=4, hook=_reset_every(3), rtol=1e-4, atol=1e-5),
    case('stateless_lstm', seq(
        lambda m, c, h, x: m.s(c, h, x), s=L.StatelessLSTM(3, 4)),
        [lambda r: (_rand(r, 2, 4), _rand(r, 2, 4), _rand(r, 2, 3)),
         lambda r: (None, None, _rand(r, 1, 3))]),
    case('batchnorm_test', seq(
        lambda m, x: m.bn(x), bn=_bn_randomized(3)),
        [one(4, 3, 2, 2), one(1, 3), one(0, 3)],
        rtol=1e-4, atol=1e-5),
    case('batchnorm_train', seq(
        lambda m, x: m.bn2(F.relu(m.bn(x))), bn=_bn_randomized(3),
        bn2=L.BatchNormalization(3, decay=0.5)),
        [one(4, 3, 2, 2), one(5, 3)], train=True, n_calls=4,
        rtol=1e-4, atol=1e-5),
    # N, a Python int persistent, changes every call: a miss every call.
    case('batchnorm_finetune', seq(
        lambda m, x: m.bn(x, finetune=True), bn=_bn_randomized(3)),
        [one(4, 3), one(2, 3, 3)], train=True, n_calls=4,
        rtol=1e-4, atol=1e-5, fallback_ok=True),
    case('batchnorm_axis', seq(
        lambda m, x: m.bn(x),
        bn=L.BatchNormalization(axis=(0, 2), size=None)),
        [one(3, 4, 2), one(2, 4, 5)], train=True, rtol=1e-4, atol=1e-5),
    case('batch_renorm_train', seq(
        lambda m, x: m.bn(x),
        bn=L.BatchRenormalization(3, rmax=1.5, dmax=0.5)),
        [one(4, 3), one(6, 3)], train=True, rtol=1e-4, atol=1e-5),
    case('group_layer_norm', seq(
        lambda m, x: m.ln(F.reshape(m.gn(x), (x.shape[0], -1))),
        gn=L.GroupNormalization(2, 4), ln=L.LayerNormalization(None)),
        [one(3, 4, 2, 2), one(1, 4, 2, 2)], rtol=1e-4,
        atol=1e-5),
    case('resnet_block_test', ResBlock,
         [one(2, 4, 5, 5), one(1, 4, 3, 4)], rtol=1e-4,
         atol=1e-4),
    case('resnet_block_train', ResBlock,
         [one(2, 4, 5, 5), one(3, 4, 3, 4)], train=True,
         rtol=1e-4, atol=1e-4),
    case('vgg_like', VGG, [one(2, 3, 8, 8), one(1, 3, 8, 8)],
         rtol=1e-4, atol=1e-5),
    case('dropout_train', seq(
        lambda m, x: F.dropout(m.fc(F.dropout(x, 0.3)), 0.5),
        fc=L.Linear(6, 6)),
        [one(4, 6), one(2, 6)], train=True),
    case('dropout_test', seq(
        lambda m, x: F.dropout(m.fc(x), 0.5), fc=L.Linear(6, 6)),
        [one(4, 6), one(2, 6)]),
    case('gaussian_noise', seq(
        lambda m, x: F.gaussian(m.fc(x), F.log(F.absolute(x) + 1)),
        fc=L.Linear(6, 6)),
        [one(3, 6), one(2, 6)]),
    case('numpy_random_in_forward', Noisy,
         [one(3, 4), one(1, 4)], fallback_ok=True),
    case('attention_where_mask', Attention,
         [lambda r: (_rand(r, 2, 4, 6), numpy.array([4, 2])),
          lambda r: (_rand(r, 3, 3, 6), numpy.array([1, 3, 2]))],
         rtol=1e-4, atol=1e-5),
    case('dict_tuple_python_values', DictOut,
         [lambda r: ([_rand(r, 2, 3), _rand(r, 2, 3)],),
          lambda r: ([_rand(r, 1, 3)],),
          lambda r: {'args': ([_rand(r, 2, 3)],),
                     'kwargs': {'scale': 0.5}}]),
    case('sequential', _mlp, [one(3, 4), one(1, 4),
                              one(0, 4)]),
    case('chain_list', Chains, [one(3, 4), one(1, 4)]),
    case('shape_user', ShapeUser, [one(3, 2, 4), one(1, 2, 4)]),
    case('list_loop', ListLoop,
         [lambda r: ([_rand(r, 2, 4) for _ in range(3)],),
          lambda r: ([_rand(r, 2, 4)],)]),
    case('classifier', _classifier, [_labels(4), _labels(1)]),
    case('float64_model', _typed(numpy.float64, VGG),
         [one(2, 3, 8, 8, dtype=numpy.float64),
          one(1, 3, 8, 8, dtype=numpy.float64)]),
    case('float16_model', _typed(numpy.float16, ResBlock),
         [one(2, 4, 5, 5, dtype=numpy.float16),
          one(1, 4, 3, 3, dtype=numpy.float16)],
         rtol=1e-2, atol=1e-2),
    case('float16_train_bn', _typed(numpy.float16, seq(
        lambda m, x: m.bn(x), bn=L.BatchNormalization(3))),
        [one(4, 3, dtype=numpy.float16),
         one(2, 3, 2, dtype=numpy.float16)], train=True,
        rtol=1e-2, atol=1e-2),
    case('grab_bag', seq(_grab_bag), [one(2, 3, 6, 6),
                                      one(1, 3, 4, 5)], rtol=1e-4,
         atol=1e-5),
    case('matmuls', seq(_matmuls),
         [lambda r: (_rand(r, 2, 3, 4), _rand(r, 2, 5, 4)),
          lambda r: (_rand(r, 1, 2, 3), _rand(r, 1, 4, 3))],
         rtol=1e-4, atol=1e-5),
    case('losses_ignore_label', seq(_losses),
         [_ce_sigs(5), _ce_sigs(2)], rtol=1e-4, atol=1e-5),
    # calls, a Python int persistent, changes every call: always a miss.
    case('python_int_persistent', Counter, [one(2, 3), one(1, 3)],
         fallback_ok=True),
    case('report_and_attributes', Reporter, [one(2, 3), one(1, 3)]),
    # Documented: NumPy with out= on an input-derived array runs eagerly.
    case('numpy_in_place_persistent', Accumulator, [one(2, 3), one(1, 3)],
         fallback_ok=True),
    case('python_list_history', History, [one(2, 3), one(1, 3)],
         fallback_ok=True),
    case('user_function_node_with_state', RunningCenter,
         [one(2, 3), one(4, 3)]),
    case('old_style_function', OldStyle,
         [one(2, 3), one(4, 3),
          lambda r: {'args': (_rand(r, 2, 3),), 'kwargs': {'k': -1.0}}]),
    case('embed_id_out_of_range', seq(lambda m, x: m.e(x),
                                      e=L.EmbedID(5, 2)),
         [_ids_seq([[0, 1], [2, 3], [4, 7]]),
          _ids_seq([[1, -2], [0, 2], [-1, 4]])]),
    case('cross_entropy_bad_label', seq(_ce),
         [_labels_seq([[0, 1], [2, 3], [1, 9]]),
          _labels_seq([[2, -1], [0, 1], [3, 1]])]),
    case('0d_array_arguments', seq(
        lambda m, x, a, b: m.fc(x) * a + b, fc=L.Linear(3, 3)),
        [lambda r: (_rand(r, 2, 3), numpy.array(r.randn(), f32),
                    numpy.array(r.randn(), f32)),
         lambda r: (_rand(r, 2, 3), numpy.array(r.randn(), f32),
                    numpy.array(r.randint(5), numpy.int32))]),
    # Python and NumPy scalars are static: a new value is a miss.
    case('scalar_arguments', seq(
        lambda m, x, a, b: m.fc(x) * a + b, fc=L.Linear(3, 3)),
        [lambda r: (_rand(r, 2, 3), numpy.float32(r.randn()), 0.5),
         lambda r: (_rand(r, 2, 3), float(r.randn()), r.randint(5))],
        fallback_ok=True),
    case('dict_argument', seq(
        lambda m, batch: F.softmax_cross_entropy(m.fc(batch['x']),
                                                 batch['t']),
        fc=L.Linear(3, 3)),
        [lambda r: ({'x': _rand(r, 2, 3), 't': r.randint(0, 3, 2)},),
         lambda r: ({'x': _rand(r, 4, 3), 't': r.randint(0, 3, 4)},)]),
    case('numpy_results_returned', seq(
        lambda m, x: (m.fc(x), m.fc(x).array.max(axis=1),
                      x.array.T + 1, x.shape[0]),
        fc=L.Linear(3, 3)),
        [lambda r: (chainer.Variable(_rand(r, 2, 3)),),
         lambda r: (chainer.Variable(_rand(r, 1, 3)),)]),
    # Documented: a NumPy scalar from the data is a Python value.
    case('numpy_scalar_returned', seq(
        lambda m, x: (m.fc(x), m.fc(x).array.sum()), fc=L.Linear(3, 3)),
        [one(2, 3), one(1, 3)], fallback_ok=True),
    case('pooling_indices_reused', seq(_unpool_with_indexes),
         [one(2, 2, 4, 4), one(1, 2, 6, 4)], fallback_ok=True),
    case('data_dependent_if', seq(_data_if, fc=L.Linear(3, 3)),
         [one(2, 3), one(1, 3)], fallback_ok=True),
    case('params_changed_between_calls', seq(
        lambda m, x: m.fc(x), fc=L.Linear(3, 3)),
        [one(2, 3), one(1, 3)], hook=_perturb),
    case('link_replaced_between_calls', seq(
        lambda m, x: m.fc(x), fc=L.Linear(3, 3)),
        [one(2, 3), one(1, 3)], hook=_replace_link),
    case('bn_flag_argument', seq(_bn_flag, bn=L.BatchNormalization(3)),
         [lambda r: (_rand(r, 4, 3), True),
          lambda r: (_rand(r, 4, 3), False)],
         rtol=1e-4, atol=1e-5),
    case('backprop_enabled_eager_path', ResBlock,
         [one(2, 4, 3, 3), one(1, 4, 3, 3)], train=True, backprop=True,
         rtol=1e-4, atol=1e-4),
    case('variable_inputs_requiring_grad', seq(
        lambda m, x, y: m.fc(x) + y, fc=L.Linear(3, 3)),
        [lambda r: (chainer.Variable(_rand(r, 2, 3)),
                    chainer.Variable(_rand(r, 2, 3), requires_grad=False)),
         lambda r: (chainer.Variable(_rand(r, 1, 3), requires_grad=False),
                    _rand(r, 1, 3))]),
    case('dropconnect_zoneout_train', seq(
        lambda m, x, h: (
            F.simplified_dropconnect(x, m.fc.W, m.fc.b, 0.3),
            F.zoneout(h, x[:, :3] * 2, 0.4)),
        fc=L.Linear(4, 3)),
        [lambda r: (_rand(r, 5, 4), _rand(r, 5, 3)),
         lambda r: (_rand(r, 1, 4), _rand(r, 1, 3))], train=True),
    case('constant_output_scribbled', seq(
        lambda m, x: (m.fc(x), numpy.ones(3, f32),
                      chainer.Variable(numpy.arange(3, dtype=f32)),
                      F.identity(numpy.full((2,), 3, f32))),
        fc=L.Linear(3, 3)),
        [one(2, 3), one(1, 3)], scribble=True),
    case('param_views_scribbled', seq(
        lambda m, x: (m.fc(x), F.reshape(m.fc.b, (1, 3)), m.fc.W[0],
                      F.identity(m.fc.b)),
        fc=L.Linear(3, 3)),
        [one(2, 3), one(1, 3)], scribble=True),
    case('lstm_stateful_scribbled', StatefulLSTM,
         [_stateful_sigs(3), _stateful_sigs(2)], n_calls=4,
         hook=_reset_every(3), rtol=1e-4, atol=1e-5, scribble=True),
    case('batchnorm_train_scribbled', seq(
        lambda m, x: m.bn(x), bn=L.BatchNormalization(3)),
        [one(4, 3), one(2, 3)], train=True, scribble=True, rtol=1e-4,
        atol=1e-5),
    case('dropout_scribbled', seq(
        lambda m, x: F.dropout(x, 0.5)),
        [one(4, 3), one(2, 3)], train=True, scribble=True),
    case('nstep_lstm_with_state', seq(
        lambda m, h, c, xs: m.r(h, c, xs), r=L.NStepLSTM(1, 3, 2, 0.0)),
        [lambda r: (_rand(r, 1, 2, 2), _rand(r, 1, 2, 2),
                    [_rand(r, 3, 3), _rand(r, 2, 3)]),
         lambda r: (_rand(r, 1, 1, 2), None, [_rand(r, 2, 3)])],
        rtol=1e-4, atol=1e-5),
    case('prelu_scale_bias', seq(
        lambda m, x: m.b(m.s(m.p(x))), p=L.PReLU((3,)),
        s=L.Scale(axis=1, W_shape=(3,)), b=L.Bias(axis=1, shape=(3,))),
        [one(2, 3, 4), one(1, 3, 2)]),
    case('aliased_outputs', seq(_aliasing, fc=L.Linear(3, 3)),
         [lambda r: (_rand(r, 2, 3), _rand(r, 2)),
          lambda r: (_rand(r, 1, 3), _rand(r, 3))]),
    case('in_place_on_output', seq(_in_place, fc=L.Linear(3, 3)),
         [one(2, 3), one(4, 3)], fallback_ok=True),
    case('raises_like_eager', seq(_bad_shape, fc=L.Linear(3, 3)),
         [one(2, 3), one(2, 4), one(2, 3)]),
    case('numpy_on_arrays', seq(_ported_numpy, fc=L.Linear(3, 3)),
         [one(2, 3), one(3, 3)]),
    case('leaky_relu_slope_attr', Slope, [one(2, 3), one(3, 3)],
         hook=lambda m, s, i: setattr(m, 'slope', 0.1 * (i + 1))),
]


def _params():
    for c in CASES:
        marks = ()
        if c.xfail:
            marks = (pytest.mark.xfail(strict=True, reason=c.xfail),)
        yield pytest.param(c, id=c.name, marks=marks)


@pytest.mark.parametrize('c', list(_params()))
def test_zoo(c):
    SUMMARY[c.name] = {}
    run_case(c)
