"""The sizes seen at the calls that missed open those axes at every later
recording (``runtime.batch.SizesSeen``), whatever the order of the calls:
a batch of one between others, a first call of one step, a call changing
the steps and the batch at once. Each jitted forward is compared with a
copy of the model run eagerly, values and gradients, at every call."""

import copy
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing

I, H, K = 3, 4, 3
F32 = numpy.float32


class _MLP(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(12, 8)
            self.l2 = L.Linear(8, 5)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


class _ZerosThenSteps(chainer.Chain):
    """The state made of the batch read from the shape, a step helper."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.lx = L.Linear(I, 4 * H)
            self.lh = L.Linear(H, 4 * H, nobias=True)
            self.out = L.Linear(H, K)

    def step(self, x, h, c):
        c, h = F.lstm(c, self.lx(x) + self.lh(h))
        return h, c

    def forward(self, xs):
        T, B = xs.shape[0], xs.shape[1]
        h = self.xp.zeros((B, H), dtype=xs.dtype)
        c = self.xp.zeros((B, H), dtype=xs.dtype)
        for t in range(T):
            h, c = self.step(xs[t], h, c)
        return self.out(h)


class _LazyState(chainer.Chain):
    """The state made in the loop's first step, each step's output
    stacked: the first step is peeled off the loop, its output joined
    before the others'."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.rnn = L.StatelessLSTM(I, H)
            self.out = L.Linear(H, K)

    def forward(self, xs):
        h = c = None
        ys = []
        for x in xs:
            if h is None:
                h = self.xp.zeros((x.shape[0], H), dtype=numpy.float32)
                c = self.xp.zeros((x.shape[0], H), dtype=numpy.float32)
            c, h = self.rnn(c, h, x)
            ys.append(self.out(h))
        return F.stack(ys)


class _SplitSteps(_LazyState):
    """``F.split_axis`` into the steps, Chainer's own lazy state (``None``
    for the first), the outputs concatenated."""

    def forward(self, xs):
        h = c = None
        outs = []
        for x in F.split_axis(xs, len(xs), axis=0, force_tuple=True):
            c, h = self.rnn(c, h, F.squeeze(x, 0))
            outs.append(self.out(h))
        return F.concat(outs, axis=0)


class _WhileSteps(chainer.Chain):
    """A counter loop, its mean loss and last state returned."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.wx = L.Linear(I, H)
            self.wh = L.Linear(H, H)
            self.out = L.Linear(H, 1)

    def forward(self, xs):
        h = self.xp.zeros((xs.shape[1], H), dtype=xs.dtype)
        t = 0
        acc = 0
        while t < xs.shape[0]:
            h = F.tanh(self.wx(xs[t]) + self.wh(h))
            acc = acc + F.sum(self.out(h))
            t += 1
        return acc / xs.shape[0], h


class _BatchCounted(_MLP):
    """The batch size as a float: it stays in the key."""

    def forward(self, x):
        return F.sum(self.l2(self.l1(x))) * float(x.shape[0])


ORDERS = [
    [(2, 5), (1, 1), (9, 2), (9, 1), (1, 2), (1, 8), (5, 2)],
    [(1, 1), (5, 5), (5, 5), (1, 3), (2, 5), (2, 3), (1, 8)],
    [(5, 1), (2, 5), (1, 1), (1, 5), (5, 5), (2, 2), (5, 1)],
    [(5, 2), (1, 1), (5, 2), (5, 8), (9, 2), (1, 8), (5, 8)],
]


def _outputs(result):
    return list(result) if isinstance(result, tuple) else [result]


def _calls_alike(model, shapes, train, make, device=None):
    """Calls the jitted forward and an eager copy with each shape's new
    values; returns the jitted forward. On ``device`` (``'@cupy:0'``) the
    models and the arguments are sent there."""
    model.cleargrads()
    if device is not None:
        model.to_device(device)
    eager = copy.deepcopy(model)
    jitted = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(len(shapes))
    with chainer.using_config('train', train):
        for shape in shapes:
            args = make(rng, shape)
            args = args if isinstance(args, tuple) else (args,)
            if device is not None:
                args = tuple(model.device.send(a) for a in args)
            ours, theirs = jitted(*args), eager.forward(*args)
            testing.assert_results_equal(ours, theirs, rtol=1e-4, atol=1e-5)
            if train:
                for result, m in ((ours, model), (theirs, eager)):
                    m.cleargrads()
                    sum(F.sum(y) for y in _outputs(result)).backward()
                for (name, p), (_, q) in zip(sorted(model.namedparams()),
                                             sorted(eager.namedparams())):
                    assert (p.grad is None) == (q.grad is None), name
                    if p.grad is not None:
                        testing.assert_results_equal(p.grad, q.grad, 1e-4,
                                                     1e-5)
    return jitted


def _steps(rng, shape):
    return rng.standard_normal(shape + (I,)).astype(numpy.float32)


def _rows(rng, shape):
    return rng.standard_normal(shape + (12,)).astype(numpy.float32)


def _signatures(jitted):
    return [str(e.signature).split('@')[0] for e in jitted.cache_entries()]


@pytest.mark.parametrize('train', [False, True])
@pytest.mark.parametrize('cls', [_ZerosThenSteps, _LazyState, _SplitSteps,
                                 _WhileSteps])
@pytest.mark.parametrize('order', ORDERS, ids=range(len(ORDERS)))
def test_steps_and_batch_in_any_order_keep_one_entry(cls, order, train):
    jitted = _calls_alike(cls(), order, train, _steps)
    assert _signatures(jitted) == ['xs: f32[T,B,3]'], jitted.cache_report()


@pytest.mark.parametrize('train', [False, True])
@pytest.mark.parametrize('sizes', [(64, 64, 1, 1, 64), (3, 1, 3, 1, 8),
                                   (1, 64, 1, 2)])
def test_a_batch_of_one_between_others_keeps_one_entry(sizes, train):
    jitted = _calls_alike(_MLP(), [(n,) for n in sizes], train, _rows)
    assert _signatures(jitted) == ['x: f32[B,12]'], jitted.cache_report()


def test_a_batch_of_one_second_compiles_the_other_size_again_open():
    # 64 compiles for its size; 1, for its own, leaves the other out; the
    # next 64 records with the batch open, and that entry serves both.
    jitted = _calls_alike(_MLP(), [(64,), (1,), (64,), (1,), (64,)], False,
                          _rows)
    assert jitted.cache_info().misses == 3
    assert _signatures(jitted) == ['x: f32[B,12]']


def test_a_batch_that_stays_in_the_key_is_not_compiled_again():
    # The batch cannot open: its entries stay once that is known.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jitted = _calls_alike(_BatchCounted(), [(4,), (1,)] * 4, False,
                              _rows)
    assert jitted.cache_info().misses == 3, jitted.cache_report()
    assert sorted(_signatures(jitted)) == ['x: f32[1,12]', 'x: f32[4,12]']
    assert any(w.category is errors.RecompileWarning and
               'float' in str(w.message) for w in caught), \
        [str(w.message) for w in caught]


def test_sizes_seen_in_one_mode_open_the_other_modes_first_call():
    model = _ZerosThenSteps()
    jitted = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(0)
    for train, (n, batch) in [(False, (5, 3)), (False, (7, 2)),
                              (True, (6, 4))]:
        with chainer.using_config('train', train):
            jitted(_steps(rng, (n, batch)))
    assert jitted.cache_info().misses == 3
    assert _signatures(jitted) == ['xs: f32[T,B,3]'] * 2


def test_a_peeled_first_step_joined_before_the_others_serves_one_step():
    jitted = _calls_alike(_LazyState(), [(5, 2), (9, 3), (1, 2), (1, 3)],
                          True, _steps)
    entry, = jitted.cache_entries()
    assert entry.symbolic.trips.minimum == 1
    assert jitted.cache_info().misses == 2


class _MaskedPooled(chainer.Chain):
    """A masked GRU over a padded batch (``x: (B, T)`` of ids and their
    lengths), its state made in the first step, each step's state masked
    and appended (``h * m``), pooled, and the last state read after the
    loop beside them: one step runs the first step alone."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(10, H)
            self.rnn = L.StatelessGRU(H, H)
            self.out = L.Linear(2 * H, K)

    def forward(self, x, lengths):
        h, hs = None, []
        for i in range(x.shape[1]):
            e = self.embed(x[:, i])
            if h is None:
                h = chainer.Variable(self.xp.zeros((len(x), H), F32))
            m = (i < lengths)[:, None]
            h = F.where(self.xp.broadcast_to(m, h.shape), self.rnn(h, e), h)
            hs.append(h * m.astype(F32))
        mean = F.sum(F.stack(hs, axis=1), axis=1) / \
            lengths[:, None].astype(F32)
        return self.out(F.concat([mean, h], axis=1))


def _ids(rng, shape):
    batch, n = shape
    return (rng.randint(0, 10, (batch, n)).astype(numpy.int32),
            rng.randint(1, n + 1, batch).astype(numpy.int32))


@pytest.mark.parametrize('shapes', [
    [(5, 7), (5, 7), (1, 13), (9, 3), (16, 1), (2, 20), (4, 1)],
    [(1, 1), (2, 2), (3, 4), (5, 6), (8, 9)]])
def test_a_state_read_after_the_loop_beside_its_masked_steps_serves_one_step(
        shapes):
    # The state, not appended itself, is what one step leaves: the
    # rolled entry serves that step too.
    jitted = _calls_alike(_MaskedPooled(), shapes, True, _ids)
    entry, = jitted.cache_entries()
    assert entry.symbolic.trips.minimum == 1


class _GRUSteps(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.rnn = L.StatelessGRU(I, H)
            self.out = L.Linear(H, K)


class _LastTenSteps(_GRUSteps):
    """A guard on the steps: past ten, the last ten steps, scaled."""

    def forward(self, xs):
        T, B, _ = xs.shape
        if T > 10:
            xs = xs[T - 10:]
            scale = 0.5
        else:
            scale = 1.0
        h = self.xp.zeros((B, H), 'f')
        hs = []
        for x in xs:
            h = self.rnn(h, x)
            hs.append(h)
        return self.out(F.mean(F.stack(hs), axis=0)) * scale


def test_a_guard_on_the_steps_keeps_one_entry_a_side_in_each_mode():
    # The side past ten steps, first compiled with its steps fixed, is
    # then compiled for any steps past ten: that entry serves the first.
    model = _LastTenSteps()
    eager = copy.deepcopy(model)
    jitted = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(3)
    calls = [(True, 9, 2), (True, 16, 4), (False, 12, 4), (True, 15, 2),
             (True, 6, 2), (False, 7, 4), (True, 1, 2), (False, 17, 3),
             (True, 11, 1), (False, 4, 4), (False, 20, 5), (False, 2, 5),
             (True, 13, 1), (False, 1, 4), (True, 4, 4), (False, 11, 3),
             (True, 19, 5)]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.LoopWarning)
        for train, n, batch in calls:
            x = _steps(rng, (n, batch))
            with chainer.using_config('train', train):
                testing.assert_results_equal(jitted(x), eager.forward(x),
                                             rtol=1e-4, atol=1e-5)
    modes = [e.key[0] for e in jitted.cache_entries()]
    assert sorted(modes) == [False, False, True, True], \
        jitted.cache_report()


class _StepsCounted(chainer.Chain):
    """The steps' number as a float: it stays in the key, the batch not."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.step = L.Linear(I, H)

    def forward(self, xs):
        return F.tanh(self.step(xs[-1])) * float(xs.shape[0])


def test_an_axis_that_cannot_open_leaves_the_other_open():
    # The steps and the batch change at once; the steps, the first axis,
    # stay in the key, and the batch is open beside them.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jitted = _calls_alike(_StepsCounted(), [(4, 3), (6, 5), (4, 7),
                                                (6, 2), (4, 9), (6, 1)],
                              False, _steps)
    assert sorted(_signatures(jitted)) == ['xs: f32[4,B,3]',
                                           'xs: f32[6,B,3]']
    assert any('xs.shape[0] converted to float' in str(w.message)
               for w in caught if w.category is errors.RecompileWarning)


class _StepLosses(_GRUSteps):
    """A loss at every step, of labels as many as the steps, over the
    number of labels."""

    def forward(self, xs, ts):
        T, B, _ = xs.shape
        h = self.xp.zeros((B, H), 'f')
        loss = 0
        for t in range(T):
            h = self.rnn(h, xs[t])
            loss += F.sum(F.softmax_cross_entropy(self.out(h), ts[t],
                                                  reduce='no'))
        return loss / (T * B)


def _steps_and_labels(rng, shape):
    return _steps(rng, shape), rng.randint(0, K, shape).astype(numpy.int32)


@pytest.mark.parametrize('train', [False, True])
def test_a_first_call_of_one_step_then_one_row_keeps_one_entry(train):
    # One step first, a batch of one next: the entry of one step is
    # taken for a sibling of fixed steps, not for the steps it loops over.
    jitted = _calls_alike(_StepLosses(), [(1, 2), (4, 1), (5, 2), (5, 2),
                                          (16, 2), (3, 1)], train,
                          _steps_and_labels)
    assert _signatures(jitted) == ['xs: f32[T,B,3]'], jitted.cache_report()
