"""Loops and branches compiled as regions, against eager Chainer.

Each model here has an eager twin with the same parameters; outputs,
parameter gradients and argument gradients are compared. The cache
checks pin down what rolling is for: a trip count that comes from the
arguments is symbolic, so other lengths hit the same entry.
"""

import itertools
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from chainerjit.frontend import packing
from chainerjit.ops import structural
from chainerjit.ops.scratch import Scratch
from chainerjit.passes import autodiff
from examples import models


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(numpy.float32)


def _twins(cls, *args):
    numpy.random.seed(0)  # Chainer's initializers draw from it
    model = cls(*args)
    twin = cls(*args)
    twin.copyparams(model)
    return model, twin


def _assert_grads_equal(model, twin, rtol=1e-4, atol=1e-5):
    mine = dict(model.namedparams())
    for name, param in twin.namedparams():
        if param.grad is None:
            assert mine[name].grad is None, name
        else:
            numpy.testing.assert_allclose(mine[name].grad, param.grad,
                                          rtol=rtol, atol=atol,
                                          err_msg=name)


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


# --- what stays unrolled, and says so ----------------------------------------

def test_a_loop_whose_iterations_differ_is_unrolled_with_a_warning():
    def f(xs):
        h = xs[0]
        for t in range(1, xs.shape[0]):
            if t % 2:
                h = h * xs[t]
            else:
                h = F.relu(h + xs[t])
        return h

    rng = numpy.random.RandomState(7)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jf = testing.assert_jit_matches_eager(
            f, [(_rand(rng, 5, 3),), (_rand(rng, 5, 3),),
                (_rand(rng, 6, 3),), (_rand(rng, 6, 3),)])
    loop_warnings = [w for w in caught
                     if issubclass(w.category, errors.LoopWarning)]
    assert len(loop_warnings) == 1, [str(w.message) for w in caught]
    assert 'for t in range(1, xs.shape[0])' in str(loop_warnings[0].message)
    assert jf.cache_info().currsize == 2  # one per trip count


def test_a_loop_without_source_is_unrolled_with_a_warning():
    namespace = {'F': F}
    exec('def f(xs):\n'
         '    h = xs[0]\n'
         '    for t in range(1, xs.shape[0]):\n'
         '        h = F.tanh(h + xs[t])\n'
         '    return h\n', namespace)
    rng = numpy.random.RandomState(8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jf = testing.assert_jit_matches_eager(
            namespace['f'], [(_rand(rng, 4, 2),), (_rand(rng, 4, 2),),
                             (_rand(rng, 7, 2),)])
    assert any('source cannot be read' in str(w.message) for w in caught)
    assert jf.cache_info().currsize == 2


def test_a_loop_over_the_models_own_links_is_unrolled_quietly():
    class Deep(chainer.ChainList):
        def __init__(self):
            super(Deep, self).__init__(L.Linear(3, 5), L.Linear(5, 2))

        def forward(self, x):
            for link in self:
                x = F.relu(link(x))
            return x

    rng = numpy.random.RandomState(9)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        testing.assert_jit_matches_eager(
            Deep().forward, [(_rand(rng, 2, 3),), (_rand(rng, 2, 3),)])


@pytest.mark.parametrize('use_a_generator', [False, True])
def test_a_loop_over_a_written_out_tuple_is_unrolled_quietly(
        use_a_generator, rng):
    # As in examples.models.EncoderBlock: q, k, v = (f(t) for t in ...).
    def statement(q, k, v):
        out = []
        for t in (q, k, v):
            out.append(F.tanh(t) * F.sum(t))
        return out

    def generator(q, k, v):
        q, k, v = (F.tanh(t) * F.sum(t) for t in (q, k, v))
        return q, k, v

    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        testing.assert_jit_matches_eager(
            generator if use_a_generator else statement,
            [tuple(_rand(rng, 2, 3) for _ in range(3)) for _ in range(2)])


def test_a_length_used_otherwise_stays_in_the_key():
    def f(xs):
        h = xs[0]
        for t in range(1, xs.shape[0]):
            h = h + xs[t]
        return h / xs.shape[0]  # the length is baked into the program

    rng = numpy.random.RandomState(10)
    jf = testing.assert_jit_matches_eager(
        f, [(_rand(rng, 3, 2),), (_rand(rng, 3, 2),), (_rand(rng, 5, 2),),
            (_rand(rng, 5, 2),)])
    assert jf.cache_info().currsize == 2
    assert all('f32[T' not in str(e.signature) for e in jf.cache_entries())


# --- branches on array values ---------------------------------------------

def test_a_branch_on_an_array_value_is_guarded():
    def f(x):
        if (x.array > 0).all():
            return F.relu(x) * 2
        return F.sigmoid(x)

    jf = chainerjit.jit(f)
    calls = [numpy.ones((2, 3), numpy.float32),
             numpy.full((2, 3), 2, numpy.float32),
             -numpy.ones((2, 3), numpy.float32),
             numpy.full((2, 3), 3, numpy.float32)]
    for x in calls:
        testing.assert_results_equal(jf(chainer.Variable(x)),
                                     f(chainer.Variable(x)))
    assert jf.cache_info().currsize == 1
    assert 'Guard[expect=True]' in str(jf.last_entry.graph)


def test_a_branch_with_random_ops_before_it_runs_eagerly():
    def f(x):
        y = F.dropout(x, 0.5)
        if (y.array > 0).any():
            return y * 2
        return y

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        with chainer.using_config('train', True):
            chainerjit.jit(f)(numpy.ones((2, 3), numpy.float32))
    assert any(issubclass(w.category, errors.FallbackWarning)
               for w in caught)


@pytest.mark.parametrize('limit', [-5.0, 0.5, 100.0])
def test_break_on_an_array_value_trains_like_eager(limit):
    class Repeat(chainer.Chain):
        def __init__(self):
            super(Repeat, self).__init__()
            with self.init_scope():
                self.layer = L.Linear(4, 4)

        def forward(self, h, limit):
            outs = []
            for i in range(8):
                h = F.tanh(self.layer(h)) * 1.5
                outs.append(h)
                if (F.sum(h).array > limit.array).all():
                    break
            return F.stack(outs)

    model, twin = _twins(Repeat)
    jf = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(11)
    for trial in range(4):
        h = _rand(rng, 2, 4)
        bound = numpy.array(limit + trial, numpy.float32)
        model.cleargrads()
        twin.cleargrads()
        h_jit, h_eager = chainer.Variable(h), chainer.Variable(h.copy())
        y = jf(h_jit, chainer.Variable(bound))
        expected = twin.forward(h_eager, chainer.Variable(bound))
        testing.assert_results_equal(y, expected, rtol=1e-4, atol=1e-5)
        F.sum(y * y).backward()
        F.sum(expected * expected).backward()
        _assert_grads_equal(model, twin)
        numpy.testing.assert_allclose(h_jit.grad, h_eager.grad, rtol=1e-4,
                                      atol=1e-5)


# --- sizes of other axes read in the source ---------------------------------

_W3 = numpy.random.RandomState(1).standard_normal((3, 3)).astype(
    numpy.float32)


def _time_major_rnn(xs):
    h = numpy.zeros((xs.shape[1], 3), numpy.float32)
    for t in range(xs.shape[0]):
        h = F.tanh(F.matmul(xs[t], _W3) + h)
    return h


def _batch_major_rnn(xs):
    h = numpy.zeros((xs.shape[0], 3), numpy.float32)
    scale = numpy.float32(1.0 / xs.shape[1])
    for t in range(xs.shape[1]):
        h = F.tanh(F.matmul(xs[:, t], _W3) * scale + h)
    return h


def test_reading_the_batch_size_keeps_the_length_symbolic(rng):
    calls = [(rng.standard_normal((n, 2, 3)).astype(numpy.float32),)
             for n in (4, 4, 9, 1)]
    jf = testing.assert_jit_matches_eager(_time_major_rnn, calls)
    entry, = jf.cache_entries()
    assert 'xs: f32[T,2,3]' in str(entry.signature)


def test_reading_the_size_of_the_length_axis_keeps_it_in_the_key(rng):
    # xs.shape[1] is the length here, and also read for a scale.
    calls = [(rng.standard_normal((2, n, 3)).astype(numpy.float32),)
             for n in (4, 4, 5)]
    jf = testing.assert_jit_matches_eager(_batch_major_rnn, calls[:2])
    entry, = jf.cache_entries()
    assert 'xs: f32[2,4,3]' in str(entry.signature)
    testing.assert_jit_matches_eager(_batch_major_rnn, calls[2:], jitted=jf)


# --- lengths through an alias, and comprehensions ---------------------------

class _RNNLinks(chainer.Chain):
    def __init__(self):
        super(_RNNLinks, self).__init__()
        with self.init_scope():
            self.x2h = L.Linear(4, 3)
            self.h2h = L.Linear(3, 3)


class LenAliasRNN(_RNNLinks):
    def forward(self, xs):
        T = len(xs)
        h = self.xp.zeros((xs.shape[1], 3), numpy.float32)
        for t in range(T):
            h = F.tanh(self.x2h(xs[t]) + self.h2h(h))
        return h


class ShapeAliasRNN(_RNNLinks):
    def forward(self, xs):
        T = xs.shape[0]
        h = self.xp.zeros((xs.shape[1], 3), numpy.float32)
        for t in range(T):
            h = F.tanh(self.x2h(xs[t]) + self.h2h(h))
        return h


class ItemsComprehension(_RNNLinks):
    def forward(self, xs):
        return F.stack([F.tanh(self.x2h(x)) for x in xs])


class IndexesComprehension(_RNNLinks):
    def forward(self, xs):
        hs = [F.relu(self.x2h(xs[t])) for t in range(len(xs))]
        return F.stack(hs)


class TwoLineComprehension(_RNNLinks):
    def forward(self, xs):
        hs = [F.sigmoid(self.x2h(x))
              for x in xs]
        return F.concat(hs, axis=1)


def _train_both(model, twin, xs):
    for m in (model, twin):
        m.cleargrads()
        F.sum(m(xs) ** 2).backward()


@pytest.mark.parametrize('cls', [
    LenAliasRNN, ShapeAliasRNN, ItemsComprehension, IndexesComprehension,
    TwoLineComprehension])
def test_alias_and_comprehension_lengths_share_one_entry(cls, rng):
    model, twin = _twins(cls)
    model.forward = chainerjit.jit(model.forward)
    for length in (3, 3, 7, 1, 12):
        xs = _rand(rng, length, 2, 4)
        with chainer.no_backprop_mode():
            testing.assert_results_equal(model(xs), twin(xs),
                                         rtol=1e-5, atol=1e-6)
        _train_both(model, twin, xs)
        _assert_grads_equal(model, twin)
    entries = model.forward.cache_entries()
    assert len(entries) == 2, model.forward.cache_report()  # test, train
    assert all('xs: f32[T,2,4]' in str(e.signature) for e in entries)


def _alias_used_as_a_value(xs):
    T = len(xs)
    h = xs[0]
    for t in range(1, T):
        h = h + xs[t]
    return h / T  # the length is baked into the program


def _comprehension_read_by_item(xs):
    hs = [F.tanh(x) for x in xs]
    return hs[-1] * 2


def _comprehension_with_a_filter(xs):
    return F.stack([F.tanh(x) for x in xs if x.shape[0] > 1])


def _comprehension_in_a_helper(xs):
    return _stack_of_squares(xs)


def _stack_of_squares(xs):
    return F.stack([x * x for x in xs])


@pytest.mark.parametrize('fn', [
    _alias_used_as_a_value, _comprehension_read_by_item,
    _comprehension_with_a_filter, _comprehension_in_a_helper])
def test_lengths_the_python_can_see_stay_in_the_key(fn, rng):
    calls = [(_rand(rng, n, 2, 3),) for n in (3, 3, 5, 5)]
    jf = testing.assert_jit_matches_eager(fn, calls)
    assert jf.cache_info().currsize == 2, jf.cache_report()
    assert all('f32[T' not in str(e.signature) for e in jf.cache_entries())


# --- Python lists of arrays: packed into one array -------------------------

class ListRNN(_RNNLinks):
    """An RNN over a Python list of steps, as most Chainer code has it."""

    def forward(self, xs):
        h = self.xp.zeros((xs[0].shape[0], 3), numpy.float32)
        for x in xs:
            h = F.tanh(self.x2h(x) + self.h2h(h))
        return h


def _steps(rng, length, as_variables=True):
    xs = [_rand(rng, 2, 4) for _ in range(length)]
    if as_variables:
        return [chainer.Variable(x) for x in xs]
    return xs


def _copies(xs):
    return [chainer.Variable(x.array.copy()) for x in xs]


def test_a_list_of_any_length_shares_one_entry(rng):
    model, twin = _twins(ListRNN)
    model.forward = chainerjit.jit(model.forward)
    sizes = set()
    for length in (3, 3, 7, 70, 1):
        xs = _steps(rng, length)
        theirs = _copies(xs)
        for m, steps in ((model, xs), (twin, theirs)):
            m.cleargrads()
            y = m(steps)
            F.sum(y ** 2).backward()
        testing.assert_results_equal(y, twin(theirs), rtol=1e-5, atol=1e-6)
        _assert_grads_equal(model, twin)
        for mine, eager in zip(xs, theirs):  # each step gets its gradient
            numpy.testing.assert_allclose(mine.grad, eager.grad,
                                          rtol=1e-4, atol=1e-5)
        if length >= packing.MIN_ITEMS:
            sizes.add(model.forward.last_entry.n_instructions)
    # Lists shorter than packing.MIN_ITEMS are recorded item by item.
    signatures = sorted(str(e.signature)
                        for e in model.forward.cache_entries())
    assert len(signatures) == 2
    assert signatures[0].startswith('xs: f32[T,2,4]')
    assert signatures[1].startswith('xs[0]: f32[2,4]')
    assert len(sizes) == 1  # the program does not grow with the length


def _zip_lists(xs, ys):
    h = 0
    for x, y in zip(xs, ys):
        h = F.tanh(x * y + h)
    return h


def _enumerate_list(xs):
    h = 0
    for t, x in enumerate(xs):
        h = h + x * xs[t]
    return h


def _index_a_list(xs):
    h = xs[0] * 0
    for t in range(len(xs)):
        h = F.tanh(h + xs[t])
    return h


def _comprehension_over_a_list(xs):
    return F.stack([F.sigmoid(x) for x in xs])


@pytest.mark.parametrize('fn, n_lists', [
    (_zip_lists, 2), (_enumerate_list, 1), (_index_a_list, 1),
    (_comprehension_over_a_list, 1)])
@pytest.mark.parametrize('kind', [list, tuple])
def test_list_loops_are_symbolic_and_match_eager(fn, n_lists, kind, rng):
    calls = [tuple(kind(_steps(rng, n, as_variables=False))
                   for _ in range(n_lists)) for n in (3, 3, 6, 4, 9)]
    jf = testing.assert_jit_matches_eager(fn, calls)
    assert jf.cache_info().currsize == 1, jf.cache_report()
    assert 'f32[T,2,4]' in str(jf.cache_entries()[0].signature)


def _read_after_the_loop(xs):
    h = 0
    for x in xs:
        h = h + x
    return h * xs[-1]


def _over_a_slice(xs):
    h = xs[0]
    for x in xs[1:]:
        h = F.tanh(h + x)
    return h


def _reversed_list(xs):
    h = 0
    for x in reversed(xs):
        h = F.tanh(h * 0.5 + x)
    return h


def _mean_by_length(xs):
    h = 0
    for x in xs:
        h = h + x
    return h / len(xs)


def _returns_a_step(xs):
    for x in xs:
        pass
    return xs[1]


@pytest.mark.parametrize('fn', [
    _read_after_the_loop, _over_a_slice, _reversed_list, _mean_by_length,
    _returns_a_step, sum])
def test_list_loops_the_python_can_see_keep_lengths_in_the_key(fn, rng):
    calls = [(_steps(rng, n),) for n in (3, 3, 5, 5)]
    jf = testing.assert_jit_matches_eager(fn, calls, rtol=1e-5, atol=1e-6)
    assert jf.cache_info().currsize == 2, jf.cache_report()
    if fn is _returns_a_step:  # the caller's own Variable, as eagerly
        xs = _steps(rng, 4)
        assert jf(xs) is xs[1]


def test_steps_no_op_reads_get_no_gradient_as_in_eager_mode(rng):
    def first_step_only(xs):
        return xs[0] * 2

    jf = chainerjit.jit(first_step_only)
    for n in (3, 3, 4):
        xs = _steps(rng, n)
        theirs = _copies(xs)
        F.sum(jf(xs)).backward()
        F.sum(first_step_only(theirs)).backward()
        assert [x.grad is None for x in xs] == \
            [x.grad is None for x in theirs] == [False] + [True] * (n - 1)


def test_a_list_and_the_stacked_array_are_different_entries(rng):
    def f(xs):
        h = 0
        for x in xs:
            h = F.tanh(h + x)
        return h

    steps = _steps(rng, 4, as_variables=False)
    jf = testing.assert_jit_matches_eager(
        f, [(steps,), (steps,), (numpy.stack(steps),),
            (numpy.stack(steps),)])
    assert jf.cache_info().currsize == 2


def test_a_list_of_unlike_arrays_is_recorded_item_by_item(rng):
    def f(xs):
        return [F.sum(x) for x in xs]

    calls = [([_rand(rng, n, 3) for n in (1, 2, 3)],),
             ([_rand(rng, n, 3) for n in (1, 2, 3)],)]
    jf = testing.assert_jit_matches_eager(f, calls)
    assert 'xs[2]: f32[3,3]' in str(jf.cache_entries()[0].signature)
