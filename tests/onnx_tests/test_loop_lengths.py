"""Loop models exported to ONNX at one length and run in onnxruntime at
several: a GRU (peeled, bidirectional, two passes), attention over encoder
states, nested loops, two sequences and a decoder with an exit. Each run
is either rejected by onnxruntime (an input of another shape than the
model's) or matches eager Chainer; what cannot be exported raises
``ExportError``.
"""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import onnx_export
from chainerjit.frontend import signature
from tests.frontend_tests import test_counter_counting_down as counting_down
from tests.onnx_tests import test_loops
from tests.onnx_tests.test_loops import EOS


pytest.importorskip('onnxruntime')

pytestmark = [
    pytest.mark.adversarial,
    pytest.mark.filterwarnings(
        'ignore::chainerjit.errors.LoopWarning',
        'ignore::chainerjit.errors.RecompileWarning'),
]


def _a(rng, *shape):
    return rng.standard_normal(shape).astype(numpy.float32)


def _variables(calls):
    return [tuple(chainer.Variable(a) if isinstance(a, numpy.ndarray) and
                  a.dtype.kind == 'f' else a for a in args)
            for args in calls]


def _onnx_runs(fn, calls, rtol=1e-4, atol=1e-5):
    """Exports ``jit(fn)`` for ``calls[0]`` and runs every call in
    onnxruntime. Each call is either rejected by onnxruntime (an input of
    another shape than the model's) or matches eager. Returns
    ``(model, ['ok' or 'rejected' per call])``."""
    import onnxruntime

    model = chainerjit.export_onnx(chainerjit.jit(fn), calls[0])
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=['CPUExecutionProvider'])
    names = [i.name for i in session.get_inputs()]
    runs = []
    for args in calls:
        leaves = []
        signature.flatten(args, leaves)
        feed = dict(zip(names, [numpy.asarray(signature.leaf_array(a))
                                for a in leaves]))
        try:
            outputs = session.run(None, feed)
        except (onnxruntime.capi.onnxruntime_pybind11_state
                .InvalidArgument):
            runs.append('rejected')
            continue
        with chainer.no_backprop_mode(), \
                chainer.using_config('train', False):
            expected = fn(*args)
        leaves = []
        signature.flatten(expected, leaves)
        assert len(outputs) == len(leaves)
        for out, leaf in zip(outputs, leaves):
            e = numpy.asarray(signature.leaf_array(leaf))
            assert out.shape == e.shape, (out.shape, e.shape)
            numpy.testing.assert_allclose(out, e, rtol=rtol, atol=atol)
        runs.append('ok')
    assert runs[0] == 'ok'
    return model, runs


def _loops(model):
    return [n.op_type for n in model.graph.node].count('Loop')


def _sequences(lengths, size=4, seed=0):
    rng = numpy.random.RandomState(seed)
    return _variables([(_a(rng, n, 2, size),) for n in lengths])


class GRU(chainer.Chain):
    """A GRU cell written with F ops; the state starts at zero (made from
    ``xs[0]``, a constant read)."""

    def __init__(self):
        super(GRU, self).__init__()
        with self.init_scope():
            self.wz = L.Linear(8, 4)
            self.wr = L.Linear(8, 4)
            self.wh = L.Linear(8, 4)

    def step(self, h, x):
        hx = F.concat([h, x])
        z = F.sigmoid(self.wz(hx))
        r = F.sigmoid(self.wr(hx))
        candidate = F.tanh(self.wh(F.concat([r * h, x])))
        return (1 - z) * h + z * candidate

    def forward(self, xs):
        h = xs[0] * 0
        ys = []
        for t in range(xs.shape[0]):
            h = self.step(h, xs[t])
            ys.append(h)
        return F.stack(ys)


class PeeledGRU(GRU):
    """The first iteration (state None) makes the state differently."""

    def forward(self, xs):
        h = None
        for t in range(xs.shape[0]):
            if h is None:
                h = F.tanh(self.wh(F.concat([xs[t], xs[t]])))
            else:
                h = self.step(h, xs[t])
        return h


class BiGRU(GRU):
    def forward(self, xs):
        h = xs[0] * 0
        forward = []
        for t in range(xs.shape[0]):
            h = self.step(h, xs[t])
            forward.append(h)
        b = xs[-1] * 0
        backward = []
        for t in reversed(range(xs.shape[0])):
            b = self.step(b, xs[t])
            backward.append(b)
        return F.stack(forward), F.stack(backward), h + b


class PeeledBackwardInserted(GRU):
    """Backwards, the state made in the first step, each step's state
    inserted in front: the loop's list reversed, then the first step's."""

    def forward(self, xs):
        h, ys = None, []
        for t in reversed(range(xs.shape[0])):
            if h is None:
                h = F.tanh(self.wh(F.concat([xs[t], xs[t]])))
            else:
                h = self.step(h, xs[t])
            ys.insert(0, h)
        return F.concat(ys, axis=1)


class Discounted(GRU):
    """Each step's state discounted by a power of the counter."""

    def forward(self, xs):
        h = total = xs[0] * 0
        for t in range(xs.shape[0]):
            h = self.step(h, xs[t])
            total = total + 0.9 ** t * h
        return total


class TwoPasses(GRU):
    """Two loops over the same sequence: a GRU, then a gate from its last
    state."""

    def forward(self, xs):
        h = xs[0] * 0
        for t in range(xs.shape[0]):
            h = self.step(h, xs[t])
        g = h
        ys = []
        for x in xs:
            g = F.sigmoid(x * g)
            ys.append(g)
        return F.stack(ys), h + xs[0] - xs[-1]


def _model(cls):
    numpy.random.seed(0)
    return cls()


@pytest.mark.parametrize('cls', [GRU, PeeledGRU, PeeledBackwardInserted,
                                 Discounted, TwoPasses])
def test_onnx_runs_at_every_length(cls):
    model = _model(cls)
    onnx_model, runs = _onnx_runs(model.forward,
                                  _sequences((5, 5, 2, 12, 1)))
    assert runs == ['ok'] * 5
    dims = onnx_model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == 'T'
    assert _loops(onnx_model) >= 1


@pytest.mark.parametrize('cls', [counting_down._DownToOne,
                                 counting_down._Weighted,
                                 counting_down._FirstStepPeeled])
def test_onnx_numbers_of_a_counter_counting_down_follow_the_length(cls):
    rng = numpy.random.RandomState(1)
    calls = [(_a(rng, 2, n, 3), numpy.array([n, max(n - 3, 1)], numpy.int32))
             for n in (5, 9, 2, 12)]
    onnx_model, runs = _onnx_runs(_model(cls).forward, calls)
    assert runs == ['ok'] * 4
    assert _loops(onnx_model) == 1


class _GuardedOnLength(chainer.Chain):
    """A GRU loop, then a branch on the length (``if T > 6``)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.cell = L.StatelessGRU(3, 4)

    def forward(self, xs):
        h = self.xp.zeros((xs.shape[1], 4), numpy.float32)
        for t in range(len(xs)):
            h = self.cell(h, xs[t])
        if len(xs) > 6:
            h = h * 2
        return h


class _WhileCountingDown(counting_down._Masked):
    """A ``while`` loop counting down from the length: its test compares
    the steps with zero at each of them."""

    def forward(self, xs, lengths):
        h = self.xp.zeros((xs.shape[0], 4), numpy.float32)
        t = xs.shape[1] - 1
        while t >= 0:
            m = (lengths > t).astype(numpy.float32)[:, None]
            h = m * self.cell(h, xs[:, t]) + (1 - m) * h
            t -= 1
        return h


@pytest.mark.parametrize('cls, calls', [
    (_GuardedOnLength, [(8, 2), (9, 2), (8, 2), (4, 2), (3, 2), (12, 2)]),
    (_WhileCountingDown, [(3, 5), (3, 4), (3, 4), (3, 7), (3, 2)]),
])
def test_onnx_of_sizes_the_forward_compared_keeps_them(cls, calls):
    """A program for any length whose Python compared it (a guard on
    one side) exports with that axis fixed: onnxruntime refuses the
    other lengths, where the graph, without the guard, would be wrong."""
    import onnxruntime

    model = _model(cls)
    rng = numpy.random.RandomState(2)
    shapes = [(a, b, 3) for a, b in calls]
    args = [(_a(rng, *shape),) if cls is _GuardedOnLength else
            (_a(rng, *shape), rng.randint(1, shape[1] + 1, shape[0]).astype(
                numpy.int32)) for shape in shapes]
    jitted = chainerjit.jit(model.forward)
    with chainer.using_config('train', False):
        for call in args[:3]:
            jitted(*call)
        onnx_model = chainerjit.export_onnx(jitted, args[1])
        session = onnxruntime.InferenceSession(
            onnx_model.SerializeToString(),
            providers=['CPUExecutionProvider'])
        names = [i.name for i in session.get_inputs()]
        for call in args[1:]:
            try:
                out, = session.run(None, dict(zip(names, call)))
            except onnxruntime.capi.onnxruntime_pybind11_state \
                    .InvalidArgument:
                assert call[0].shape != args[1][0].shape
                continue
            numpy.testing.assert_allclose(out, model.forward(*call).array,
                                          rtol=1e-4, atol=1e-5)


def test_onnx_bidirectional_is_correct_at_its_length():
    model = _model(BiGRU)
    _, runs = _onnx_runs(model.forward, _sequences((5, 5, 2, 12)))
    assert runs[:2] == ['ok', 'ok']


class Attention(chainer.Chain):
    """An encoder loop, then a decoder loop attending over the stacked
    encoder states."""

    def __init__(self):
        super(Attention, self).__init__()
        with self.init_scope():
            self.enc = L.Linear(4, 4)
            self.dec = L.Linear(8, 4)
            self.out = L.Linear(4, 3)

    def forward(self, xs, ys):
        hs = []
        h = None
        for t in range(xs.shape[0]):
            h = F.tanh(self.enc(xs[t]) if h is None
                       else self.enc(xs[t]) + h)
            hs.append(h)
        encoded = F.stack(hs, axis=1)
        s = h
        outs = []
        for u in range(ys.shape[0]):
            score = F.squeeze(F.matmul(encoded, F.expand_dims(s, 2)), 2)
            a = F.softmax(score, axis=1)
            context = F.squeeze(F.matmul(F.expand_dims(a, 1), encoded), 1)
            s = F.tanh(self.dec(F.concat([context, ys[u]])))
            outs.append(self.out(s))
        return F.stack(outs)


@pytest.mark.parametrize('lengths', [
    [(4, 3), (4, 3), (6, 3), (2, 3)],
    [(4, 3), (4, 3), (4, 5), (4, 1)],
    [(4, 3), (4, 3), (6, 5), (2, 1)]])
def test_onnx_attention_over_encoder_states(lengths):
    model = _model(Attention)
    rng = numpy.random.RandomState(1)
    calls = _variables([(_a(rng, n, 2, 4), _a(rng, m, 2, 4))
                        for n, m in lengths])
    _, runs = _onnx_runs(model.forward, calls)
    assert runs[:2] == ['ok', 'ok']


def nested_fixed_inner(xs, h, w):
    for t in range(xs.shape[0]):
        for j in range(3):
            h = F.tanh(F.matmul(h, w) + xs[t])
    return h


def two_sequences(xs, zs, h):
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t] + h)
    for t in range(zs.shape[0]):
        h = F.sigmoid(zs[t] - h)
    return h


def test_onnx_nested_loops():
    rng = numpy.random.RandomState(2)
    calls = _variables([(_a(rng, n, 2, 4), _a(rng, 2, 4),
                         _a(rng, 4, 4) * 0.5) for n in (4, 4, 1, 9)])
    _, runs = _onnx_runs(nested_fixed_inner, calls)
    assert runs[:2] == ['ok', 'ok']


def test_onnx_loops_over_two_sequences():
    rng = numpy.random.RandomState(3)
    calls = _variables([(_a(rng, n, 2, 4), _a(rng, m, 2, 4), _a(rng, 2, 4))
                        for n, m in ((3, 5), (3, 5), (6, 2), (1, 1))])
    _, runs = _onnx_runs(two_sequences, calls)
    assert runs[:2] == ['ok', 'ok']


class Decoder(test_loops.Decoder):
    """The greedy decoder of ``test_loops``, returning every state."""

    def stacked_states(self, h, y):
        ys, hs = [y], []
        while not (chainer.as_array(y) == EOS).all():
            h, y = self.step(h, y)
            ys.append(y)
            hs.append(h)
        return F.stack(ys), F.stack(hs), h

    def for_break(self, h, y, n):
        ys = []
        for i in range(n):
            h, y = self.step(h, y)
            ys.append(y)
            if (chainer.as_array(y) == EOS).all():
                break
        return F.stack(ys), h

    def attending(self, encoded, y):
        h = F.sum(encoded, axis=1)
        ys = []
        while not (chainer.as_array(y) == EOS).all():
            score = F.squeeze(F.matmul(encoded, F.expand_dims(h, 2)), 2)
            a = F.softmax(score, axis=1)
            context = F.squeeze(F.matmul(F.expand_dims(a, 1), encoded), 1)
            h, y = self.step(h + context, y)
            ys.append(y)
        return F.stack(ys)

    def peeled(self, h, y):
        ys = []
        state = None
        for i in range(8):
            if state is None:
                state = F.tanh(h * 2)
            state, y = self.step(state, y)
            ys.append(y)
            if (chainer.as_array(y) == EOS).all():
                break
        return F.stack(ys), state

    def counted(self, h, y):
        n = 0
        while not (chainer.as_array(y) == EOS).all():
            h, y = self.step(h, y)
            n += 1
        return h * n

    def any_exit(self, h, y):
        ys = []
        while not (chainer.as_array(y) == EOS).any():
            h, y = self.step(h, y)
            ys.append(y)
        return F.stack(ys)


def _decoder():
    numpy.random.seed(1)
    decoder = Decoder()
    decoder.out.b.array[EOS] = 1.0  # ends after 2 to 4 steps
    return decoder


def _decoder_calls(state_shape, extra=(), scale=2):
    rng = numpy.random.RandomState(0)
    return _variables([(_a(rng, *state_shape) * scale,
                        numpy.array([1, 2, 3], numpy.int32)) + extra
                       for _ in range(8)])


@pytest.mark.parametrize('method, shape, extra, scale', [
    ('stacked_states', (3, 4), (), 2),
    ('for_break', (3, 4), (6,), 2),
    ('attending', (3, 5, 4), (), 1)])
def test_onnx_decoder_with_an_exit(method, shape, extra, scale):
    decoder = _decoder()
    fn = getattr(decoder, method)
    calls = _decoder_calls(shape, extra, scale)
    with chainer.no_backprop_mode():
        lengths = set(len(signature.leaf_array(
            fn(*args)[0] if isinstance(fn(*args), tuple) else fn(*args)))
            for args in calls)
    assert len(lengths) > 1, lengths
    onnx_model, runs = _onnx_runs(fn, calls)
    assert runs == ['ok'] * len(calls)
    assert _loops(onnx_model) == 1


@pytest.mark.parametrize('method', ['peeled', 'counted', 'any_exit'])
def test_onnx_decoder_export_raises_or_matches(method):
    decoder = _decoder()
    fn = getattr(decoder, method)
    try:
        _, runs = _onnx_runs(fn, _decoder_calls((3, 4)))
    except onnx_export.ExportError:
        return
    assert runs == ['ok'] * 8


def break_in_the_middle(xs, h):
    for t in range(xs.shape[0]):
        h = h * 0.5 + xs[t]
        if (h.array > 3).all():
            break
        h = F.tanh(h)
    return h


def guard_in_a_loop(x):
    for i in range(3):
        if (x.array > 0).all():
            x = x - 1
        else:
            x = x * 2
    return x


def nested_stacks_with_a_slice(xs, h, w):
    outs = []
    for t in range(xs.shape[0]):
        inner = []
        for j in range(xs.shape[2]):
            h = F.tanh(F.matmul(h, w) + xs[t, :, j:j + 1])
            inner.append(h)
        outs.append(F.stack(inner))
    return F.stack(outs)


def concat_on_axis_1(xs, h):
    hs = []
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t]) + h
        hs.append(h)
    return F.concat(hs, axis=1)


def _export_args(fn):
    if fn is guard_in_a_loop:
        return (chainer.Variable(numpy.full((2,), 3, numpy.float32)),)
    xs = numpy.ones((6, 2), numpy.float32)
    xs[4] = 10
    return (chainer.Variable(xs), chainer.Variable(
        numpy.zeros((2,), numpy.float32)))


def test_steps_joined_on_another_axis_export():
    # The scan output (steps first) moved to axis 1 and merged there.
    rng = numpy.random.RandomState(5)
    calls = _variables([(_a(rng, n, 2, 3), _a(rng, 2, 3))
                        for n in (4, 4, 7, 2)])
    _, runs = _onnx_runs(concat_on_axis_1, calls)
    assert runs == ['ok'] * 4, runs


def test_nested_loops_reading_one_step_slices_export():
    # xs[t, :, j:j + 1]: the inner counter's slice of one keeps its axis;
    # the outer loop, over stacks of stacks, stays unrolled.
    rng = numpy.random.RandomState(6)
    calls = _variables([(_a(rng, n, 2, 4), _a(rng, 2, 4), _a(rng, 4, 4))
                        for n in (3, 3, 5)])
    _, runs = _onnx_runs(nested_stacks_with_a_slice, calls)
    assert runs == ['ok', 'ok', 'rejected'], runs


@pytest.mark.parametrize('fn', [break_in_the_middle, guard_in_a_loop])
def test_onnx_export_raises(fn):
    with pytest.raises(onnx_export.ExportError):
        chainerjit.export_onnx(fn, _export_args(fn))
