"""Models whose loops are compiled as regions, against eager Chainer: an
LSTM over sequences of any length, greedy decoders (``while``, ``break``),
a seq2seq training step, the printed forms of a region, and a recurrent
weight's gradient summed after the loop.

Each model here has an eager twin with the same parameters; outputs,
parameter gradients and argument gradients are compared. The cache
checks pin down what rolling is for: a trip count that comes from the
arguments is symbolic, so other lengths hit the same entry. What keeps
its length in the key instead is in ``test_loop_rolling_keys.py``.
"""

import itertools

import chainer
import chainer.functions as F
import chainer.links as L
import numpy

import chainerjit
from chainerjit import testing
from chainerjit.ops import structural
from chainerjit.ops.scratch import Scratch
from chainerjit.passes import autodiff
from examples import models
from tests.frontend_tests.rolling_twins import _assert_grads_equal
from tests.frontend_tests.rolling_twins import _rand
from tests.frontend_tests.rolling_twins import _twins


def _loop_nodes(graph):
    return [n for n in graph.nodes if n.op == 'Loop']


# --- an LSTM over sequences of any length -----------------------------------

class StatelessClassifier(chainer.Chain):
    """``models.LSTMClassifier`` with the state in local variables
    (L.StatelessLSTM)."""

    def __init__(self, n_in=6, n_hidden=8, n_out=3):
        super(StatelessClassifier, self).__init__()
        with self.init_scope():
            self.lstm = L.StatelessLSTM(n_in, n_hidden)
            self.out = L.Linear(n_hidden, n_out)

    def forward(self, xs):
        c = h = None
        for t in range(xs.shape[0]):
            c, h = self.lstm(c, h, xs[t])
        return self.out(h)


def test_lstm_lengths_1_7_70_share_one_entry():
    model, twin = _twins(StatelessClassifier)
    jf = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(0)
    with chainer.no_backprop_mode():
        for length in (7, 7, 1, 70, 3):
            xs = _rand(rng, length, 2, 6)
            testing.assert_results_equal(jf(xs), twin.forward(xs),
                                         rtol=1e-4, atol=1e-5)
    assert jf.cache_info().currsize == 1, jf.cache_report()
    entry, = jf.cache_entries()
    assert 'xs: f32[T,2,6]' in str(entry.graph)
    assert 'xs: f32[T,2,6]' in str(entry.signature)
    assert len(_loop_nodes(entry.graph)) == 1
    # The program does not grow with the length: one body.
    assert entry.program.n_instructions < 40, entry.program.dis()


def test_stateful_lstm_compiles_once_for_every_length():
    model, twin = _twins(models.LSTMClassifier, 6, 8, 3)
    jf = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(0)
    with chainer.no_backprop_mode():
        for length in (7, 7, 1, 70, 3):
            xs = _rand(rng, length, 2, 6)
            testing.assert_results_equal(jf(xs), twin.forward(xs),
                                         rtol=1e-4, atol=1e-5)
    # L.LSTM's ``h`` is None before the first call and a Variable after
    # it; the forward resets it before reading it, so that is not guarded.
    assert jf.cache_info().currsize == 1, jf.cache_report()
    assert 'xs: f32[T,2,6]' in str(jf.last_entry.signature)


def test_lstm_training_matches_eager_at_each_length():
    model, twin = _twins(models.LSTMClassifier, 6, 8, 3)
    jf = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(1)
    for length in (5, 5, 2, 11):
        xs = _rand(rng, length, 2, 6)
        model.cleargrads()
        twin.cleargrads()
        x_jit, x_eager = chainer.Variable(xs), chainer.Variable(xs.copy())
        y, expected = jf(x_jit), twin.forward(x_eager)
        testing.assert_results_equal(y, expected, rtol=1e-4, atol=1e-5)
        F.sum(y * y).backward()
        F.sum(expected * expected).backward()
        _assert_grads_equal(model, twin)
        numpy.testing.assert_allclose(x_jit.grad, x_eager.grad, rtol=1e-4,
                                      atol=1e-5)
    assert jf.cache_info().currsize == 1
    assert jf.last_entry.training is not None
    backward = jf.last_entry.training.graphs.backward
    assert 'LoopGrad' in [n.op for n in backward.nodes], backward


class Stacked(chainer.Chain):
    """Two LSTM layers, the per-step outputs stacked."""

    def __init__(self):
        super(Stacked, self).__init__()
        with self.init_scope():
            self.first = L.LSTM(4, 6)
            self.second = L.LSTM(6, 5)

    def forward(self, xs):
        self.first.reset_state()
        self.second.reset_state()
        ys = []
        for x in xs:
            ys.append(self.second(self.first(x)))
        return F.stack(ys)


def test_stacked_lstm_over_a_variable_returns_every_step():
    model, twin = _twins(Stacked)
    jf = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(2)
    for length in (4, 4, 9):
        xs = _rand(rng, length, 3, 4)
        model.cleargrads()
        twin.cleargrads()
        y = jf(chainer.Variable(xs))
        expected = twin.forward(chainer.Variable(xs))
        testing.assert_results_equal(y, expected, rtol=1e-4, atol=1e-5)
        F.sum(y).backward()
        F.sum(expected).backward()
        _assert_grads_equal(model, twin)
    assert len(_loop_nodes(jf.last_entry.graph)) == 1


# --- a greedy decoder with attention --------------------------------------

EOS = 0


class GreedyDecoder(chainer.Chain):
    """Attention over encoder states; loops until every sequence emits EOS
    or ``max_len`` steps."""

    def __init__(self, n_vocab=6, n_units=8):
        super(GreedyDecoder, self).__init__()
        with self.init_scope():
            self.embed = L.EmbedID(n_vocab, n_units)
            self.cell = L.StatelessLSTM(2 * n_units, n_units)
            self.out = L.Linear(2 * n_units, n_vocab)

    def forward(self, encoded, y, max_len):
        c = h = None
        ys = []
        i = 0
        while True:
            scores = F.batch_matmul(encoded, h if h is not None else
                                    encoded[:, 0])
            weights = F.softmax(F.squeeze(scores, 2))
            context = F.sum(encoded * F.expand_dims(weights, 2), axis=1)
            c, h = self.cell(c, h, F.concat([self.embed(y), context]))
            y = F.argmax(self.out(F.concat([h, context])), axis=1)
            ys.append(y)
            i += 1
            if (y.array == EOS).all():
                break
            if i >= max_len:
                break
        return F.stack(ys)


def _decode_with_eos_bias(decoder_class, max_len, trials, seed):
    """Runs jitted and eager decoders with EOS made more or less likely
    from trial to trial, so that the outputs have several lengths."""
    model, twin = _twins(decoder_class)
    jf = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(seed)
    lengths = []
    with chainer.no_backprop_mode():
        for trial in range(trials):
            model.out.b.array[EOS] = twin.out.b.array[EOS] = rng.uniform(
                -2, 4)
            encoded = _rand(rng, 2, 5, 8)
            y = numpy.array([1, 2], numpy.int32)
            expected = twin.forward(encoded, y, max_len)
            testing.assert_results_equal(jf(encoded, y, max_len), expected)
            lengths.append(len(expected))
    assert len(set(lengths)) > 1, lengths
    return jf


def test_greedy_decoder_with_while_matches_eager_at_every_length():
    # ``while True`` with a Python counter: the loop can also be left by a
    # Python ``break``, so a call whose length differs runs eagerly and
    # records again (correct, not always compiled).
    jf = _decode_with_eos_bias(GreedyDecoder, 6, 12, 3)
    assert jf.cache_info().currsize == 1


class ForDecoder(GreedyDecoder):

    def forward(self, encoded, y, max_len):
        c = h = None
        ys = []
        for i in range(max_len):
            context = F.mean(encoded, axis=1)
            c, h = self.cell(c, h, F.concat([self.embed(y), context]))
            y = F.argmax(self.out(F.concat([h, context])), axis=1)
            ys.append(y)
            if (y.array == EOS).all():
                break
        return F.stack(ys)


def test_decoder_with_break_becomes_one_loop_with_an_exit():
    jf = _decode_with_eos_bias(ForDecoder, 7, 12, 4)
    assert jf.cache_info().currsize == 1
    entry = jf.last_entry
    # At most the first recording (one iteration: nothing to roll) missed.
    assert entry.branch_misses <= 1
    loop, = _loop_nodes(entry.graph)
    assert 'Exit' in [n.op for n in loop.region.body.nodes]
    assert 'JUMPIF' in entry.program.dis()


# --- a seq2seq training step ------------------------------------------------

class Seq2Seq(chainer.Chain):

    def __init__(self, n_vocab=7, n_units=6):
        super(Seq2Seq, self).__init__()
        with self.init_scope():
            self.embed_x = L.EmbedID(n_vocab, n_units)
            self.embed_y = L.EmbedID(n_vocab, n_units)
            self.encoder = L.LSTM(n_units, n_units)
            self.decoder = L.LSTM(n_units, n_units)
            self.out = L.Linear(n_units, n_vocab)

    def forward(self, xs, ys_in, ys_out):
        self.encoder.reset_state()
        for t in range(len(xs)):
            self.encoder(self.embed_x(xs[t]))
        self.decoder.reset_state()
        self.decoder.set_state(self.encoder.c, self.encoder.h)
        loss = 0
        for t in range(len(ys_in)):
            h = self.decoder(self.embed_y(ys_in[t]))
            loss += F.softmax_cross_entropy(self.out(h), ys_out[t])
        return loss / len(ys_in)


def test_seq2seq_training_step_follows_eager():
    model, twin = _twins(Seq2Seq)
    optimizer, twin_optimizer = (chainer.optimizers.Adam(),
                                 chainer.optimizers.Adam())
    optimizer.setup(model)
    twin_optimizer.setup(twin)
    jf = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(5)
    for step, (n_x, n_y) in enumerate([(4, 3), (4, 3), (6, 3), (4, 5)]):
        xs = rng.randint(0, 7, (n_x, 2)).astype(numpy.int32)
        ys = rng.randint(0, 7, (n_y + 1, 2)).astype(numpy.int32)
        loss = jf(xs, ys[:-1], ys[1:])
        expected = twin.forward(xs, ys[:-1], ys[1:])
        numpy.testing.assert_allclose(loss.array, expected.array, rtol=1e-5)
        model.cleargrads()
        twin.cleargrads()
        loss.backward()
        expected.backward()
        _assert_grads_equal(model, twin)
        optimizer.update()
        twin_optimizer.update()
    # ``len(ys_in)`` also divides the loss: that length stays in the key.
    assert jf.cache_info().currsize <= 3


# --- printed forms --------------------------------------------------------

class Recurrent(chainer.Chain):

    def __init__(self):
        super(Recurrent, self).__init__()
        with self.init_scope():
            self.x2h = L.Linear(3, 4)
            self.h2h = L.Linear(4, 4, nobias=True)

    def forward(self, xs):
        h = F.tanh(self.x2h(xs[0]))
        for t in range(1, xs.shape[0]):
            h = F.tanh(self.x2h(xs[t]) + self.h2h(h))
        return h


def test_the_ir_prints_the_region_and_dis_its_jumps():
    model = Recurrent()
    jf = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(6)
    with chainer.no_backprop_mode():
        jf(chainer.Variable(_rand(rng, 5, 2, 3)))
    entry = jf.last_entry
    text = str(entry.graph)
    assert 'Loop[trip=T-1](T-1, ' in text, text
    assert '      body (i; %' in text, text
    assert 'IndexAt[index=[1+i]]' in text, text
    dis = entry.program.dis()
    for opcode in ('SETI', 'FORI', 'NEXT', 'MOVE'):
        assert opcode in dis, dis
    fori = [i for i in entry.program.instructions() if i.opname == 'FORI']
    assert len(fori) == 1 and ' to ' in fori[0].argrepr


# --- a weight's gradient summed after the loop ----------------------------

def _train_twins(model, twin, lengths, rng, batch=2, n_in=3):
    """Backprops the same loss through ``model`` (jitted) and ``twin``
    (eager) at each length; returns the last backward program."""
    jitted = chainerjit.jit(model.forward)
    for n in lengths:
        xs = _rand(rng, n, batch, n_in)
        for forward, link in ((jitted, model), (twin.forward, twin)):
            link.cleargrads()
            y = forward(chainer.Variable(xs))
            F.sum(y * y).backward()
        _assert_grads_equal(model, twin, rtol=1e-5, atol=1e-6)
    return jitted.last_entry.training.backward.dis()


def test_a_recurrent_weights_gradient_is_one_product_after_the_loop(rng):
    model, twin = _twins(Recurrent)
    dis = _train_twins(model, twin, (5, 9, 2), rng)
    # Each step's gradient factors are collected; one product sums them.
    assert 'Collect' in dis and dis.count('OuterSum') == 1, dis


def test_an_lstms_recurrent_weight_too(rng):
    model, twin = _twins(models.LSTMClassifier, 3, 5, 2)
    dis = _train_twins(model, twin, (6, 3), rng)
    assert 'LinearFunction+Add+LSTMGrad' in dis
    assert 'Collect' in dis and 'OuterSum' in dis, dis
    # The recurrent weight, read in the loop only by the step's gradient
    # rule, is copied to Fortran order once before it.
    assert dis.count('FortranCopy') == 1, dis


class _SharedWeight(Recurrent):
    """The recurrent weight is also read by a matmul in each step, whose
    gradient rule wants it as it is."""

    def forward(self, xs):
        h = F.tanh(self.x2h(xs[0]))
        for t in range(1, xs.shape[0]):
            h = F.tanh(self.x2h(xs[t]) + self.h2h(h) +
                       F.matmul(h, self.h2h.W) * 0.5)
        return h


def test_a_weight_read_by_other_rules_too_is_not_copied(rng):
    model, twin = _twins(_SharedWeight)
    dis = _train_twins(model, twin, (5, 8), rng)
    # Nor is its gradient, the sum of two rules' in each step, collected.
    assert 'FortranCopy' not in dis and 'OuterSum' not in dis, dis


class _UnreadSteps(Recurrent):
    """The recurrent weight's per-step product is read only at the last
    step: the other steps have no gradient for it."""

    def forward(self, xs):
        h, z = F.tanh(self.x2h(xs[0])), None
        for t in range(1, xs.shape[0]):
            h = F.tanh(self.x2h(xs[t]) + h)
            z = self.h2h(h)
        return z


def test_steps_without_a_gradient_for_the_weight_add_nothing(rng):
    model, twin = _twins(_UnreadSteps)
    dis = _train_twins(model, twin, (4, 7), rng)
    assert 'OuterSum' in dis, dis


def test_a_float16_weights_gradient_is_summed_step_by_step(rng):
    with chainer.using_config('dtype', numpy.float16):
        model, twin = _twins(Recurrent)
    jitted = chainerjit.jit(model.forward)
    for n in (4, 6):  # the second call runs the compiled backward
        xs = _rand(rng, n, 2, 3).astype(numpy.float16)
        for forward, link in ((jitted, model), (twin.forward, twin)):
            link.cleargrads()
            F.sum(forward(chainer.Variable(xs))).backward()
        _assert_grads_equal(model, twin, rtol=1e-2, atol=1e-2)
    assert 'OuterSum' not in jitted.last_entry.training.backward.dis()


def test_the_outer_sum_stacks_into_a_kept_scratch_buffer(rng):
    """The stacked factors are ``concatenate``'s values, in buffers the
    kernel keeps between calls (see ``ops.scratch.Scratch``)."""
    outer_sum = structural.outer_sum(numpy.float32).fn
    scratch = next(c.cell_contents for c in outer_sum.__closure__
                   if isinstance(c.cell_contents, Scratch))

    def factors(steps):
        return [(rng.standard_normal((3, 4)).astype(numpy.float32),
                 rng.standard_normal((3, 5)).astype(numpy.float32))
                for _ in range(steps)]
    for steps in (4, 2, 7):  # collected backward: stacked reversed
        items = factors(steps)
        a = numpy.concatenate([a for a, _ in items[::-1]])
        b = numpy.concatenate([b for _, b in items[::-1]])
        assert outer_sum(items).tobytes() == a.T.dot(b).tobytes()
    kept = dict(scratch._buffers)
    outer_sum(factors(3))
    assert scratch._buffers == kept and len(kept) == 2  # not allocated


def _reference_grad_kernel(fn, n_in, n_out, kept_inputs, kept_outputs,
                           has_gy, wanted):
    """The gradient kernel's arguments spread as the rule expects them,
    written plainly."""
    def run(*arrays):
        arrays = list(arrays)
        xs, ys, gys = [None] * n_in, [None] * n_out, [None] * n_out
        for i in kept_inputs:
            xs[i] = arrays.pop(0)
        for i in kept_outputs:
            ys[i] = arrays.pop(0)
        for i in [i for i, h in enumerate(has_gy) if h]:
            gys[i] = arrays.pop(0)
        if all(g is None for g in gys):
            return tuple(None for w in wanted if w)
        gxs = fn(tuple(xs), tuple(ys), tuple(gys), wanted)
        return tuple(g for g, w in zip(gxs, wanted) if w)
    return run


def test_gradient_kernels_spread_their_arguments_as_the_rules_expect(rng):
    """Every arrangement of kept inputs and outputs, output gradients
    (present or ``None``) and wanted gradients, with arrays as arguments
    (which must be compared by identity, not ``==``)."""
    def rule(xs, ys, gys, wanted):
        return tuple(('grad', k, tuple(id(a) for a in xs + ys + gys))
                     for k in range(len(wanted)))
    arrays = [rng.standard_normal(3) for _ in range(8)]
    for n_in, n_out in ((1, 1), (3, 1), (2, 2)):
        for kept_in in itertools.combinations(range(n_in), 2 if n_in > 2
                                              else 1):
            for kept_out in ((), (0,), tuple(range(n_out))):
                for has_gy in itertools.product((True, False), repeat=n_out):
                    for wanted in itertools.product((True, False),
                                                    repeat=n_in):
                        args = (kept_in, kept_out, has_gy, wanted)
                        fast = autodiff._grad_kernel(rule, n_in, n_out, *args)
                        plain = _reference_grad_kernel(rule, n_in, n_out,
                                                       *args)
                        n_args = len(kept_in) + len(kept_out) + sum(has_gy)
                        for gy_none in (False, True):
                            given = arrays[:n_args]
                            if gy_none and sum(has_gy):
                                given = given[:n_args - sum(has_gy)] + \
                                    [None] * sum(has_gy)
                            assert fast(*given) == plain(*given), args
