"""Random draws in the forward are ops of the program: each compiled call
draws from the same generator, in the same order and with the same
arguments as eager mode, so that results stay bit for bit eager's under
the same seed. A generator the forward names (a global, a link attribute)
that it draws from runs the forward eagerly, never frozen."""

import random
import warnings

import chainer
import chainer.distributions as D
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing

F32 = numpy.float32


class VAE(chainer.Chain):
    """Encoder to a Normal, a sample through chainer.distributions, and a
    decoder; the loss of Chainer's VAE example (reconstruction and KL)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.enc = L.Linear(6, 8)
            self.mu = L.Linear(8, 3)
            self.ln_sigma = L.Linear(8, 3)
            self.dec = L.Linear(3, 6)

    def forward(self, x):
        h = F.tanh(self.enc(x))
        q = D.Normal(self.mu(h), log_scale=self.ln_sigma(h))
        z = q.sample(2)
        p = D.Normal(F.reshape(self.dec(F.reshape(z, (-1, 3))), (2,) +
                               x.shape), scale=numpy.ones((), F32))
        prior = D.Normal(numpy.zeros((3,), F32), numpy.ones((3,), F32))
        reconstruction = -F.sum(p.log_prob(F.broadcast_to(x, p.loc.shape)))
        return reconstruction / x.shape[0] + F.sum(
            chainer.kl_divergence(q, prior)) / x.shape[0]


class NoisyDiscriminator(chainer.Chain):
    """A GAN discriminator that adds Gaussian noise to its input, with
    dropout after it (both draw from NumPy's generator, in order)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(6, 8)
            self.l2 = L.Linear(8, 1)

    def forward(self, x):
        xp = chainer.backend.get_array_module(x)
        noise = xp.random.randn(*x.shape).astype(F32) * 0.1
        h = F.dropout(F.leaky_relu(self.l1(x + noise)), 0.3)
        return self.l2(h)


def _twins(cls):
    numpy.random.seed(0)
    eager, jitted = cls(), cls()
    jitted.copyparams(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    return eager, jitted


def _train_side_by_side(cls, rng, steps=4, batches=(4,)):
    """Adam steps of both twins from the same seeds (of the batch sizes
    ``batches`` in turn): losses, parameters and the generator's state
    stay bit for bit equal."""
    eager, jitted = _twins(cls)
    optimizers = []
    for model in (eager, jitted):
        opt = chainer.optimizers.Adam(1e-2)
        opt.setup(model)
        optimizers.append(opt)
    for step in range(steps):
        x = rng.standard_normal((batches[step % len(batches)], 6)).astype(
            F32)
        losses = []
        for model, opt in zip((eager, jitted), optimizers):
            numpy.random.seed(step)
            loss = F.sum(model(x))
            model.cleargrads()
            loss.backward()
            opt.update()
            losses.append((loss.array.tobytes(), numpy.random.rand()))
        assert losses[0] == losses[1], step
        for (_, p), (_, q) in zip(sorted(eager.namedparams()),
                                  sorted(jitted.namedparams())):
            assert p.array.tobytes() == q.array.tobytes(), step
    return jitted


@pytest.mark.parametrize('cls', [VAE, NoisyDiscriminator])
def test_a_model_that_draws_trains_bit_for_bit(rng, cls):
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        jitted = _train_side_by_side(cls, rng)
    info = jitted.forward.cache_info()
    assert info.compiled >= 2 and info.eager == 0, info
    graph = str(jitted.forward.last_entry.graph)
    assert 'numpy.random.' in graph


class NoiseOfTheBatch(chainer.Chain):
    """A generator's noise drawn in the forward, as many rows as the
    batch: ``normal(size=(len(x), 4))``, ``randn(B, 4)`` and ``uniform(-1,
    1, (B, 4))``; a discriminator's, of its input's shape (``randn(*
    x.shape)``, ``uniform(-1, 1, x.shape)``)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(6 + 12, 8)
            self.l2 = L.Linear(8, 1)

    def forward(self, x):
        xp = chainer.backend.get_array_module(x)
        B = x.shape[0]
        x = x + 0.1 * (xp.random.randn(*x.shape) + xp.random.uniform(
            -1, 1, x.shape)).astype(F32)
        z = xp.concatenate([
            xp.random.normal(size=(len(x), 4)),
            xp.random.randn(B, 4),
            xp.random.uniform(-1, 1, (B, 4))], axis=1).astype(F32)
        return self.l2(F.relu(self.l1(F.concat([x, z], axis=1))))


def test_noise_of_the_batch_serves_every_batch_size_bit_for_bit(rng):
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        jitted = _train_side_by_side(NoiseOfTheBatch, rng, steps=12,
                                     batches=(4, 7, 2, 9, 4, 3))
    entry, = jitted.forward.cache_entries()
    assert str(entry.signature).startswith('x: f32[B,6]'), entry.signature


class VariationalDropout(chainer.Chain):
    """A language model whose dropout mask is drawn once, of the batch's
    size (``rand(B, H)``), and applied at every step of a loop over a
    batch-first ``(B, T)`` of ids (variational dropout)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(10, 4)
            self.rnn = L.StatelessLSTM(4, 4)
            self.out = L.Linear(4, 10)

    def forward(self, x):
        xp = self.xp
        batch, steps = x.shape
        keep = (xp.random.rand(batch, 4) > 0.3).astype(F32) / 0.7
        c = h = xp.zeros((batch, 4), F32)
        loss = 0
        for t in range(steps - 1):
            c, h = self.rnn(c, h, self.embed(x[:, t]))
            loss += F.softmax_cross_entropy(self.out(h * keep), x[:, t + 1])
        return loss


def test_a_mask_drawn_of_the_batch_serves_every_length_bit_for_bit(rng):
    eager, model = _twins(VariationalDropout)
    jitted = model.forward
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.RecompileWarning)
        warnings.simplefilter('error', errors.LoopWarning)
        for seed, shape in enumerate([(2, 3), (3, 5), (4, 8), (6, 11),
                                      (3, 6), (5, 9)]):
            x = rng.randint(0, 10, shape).astype(numpy.int32)
            found = []
            for run in (eager.forward, jitted):
                numpy.random.seed(seed)
                found.append(run(x).array.tobytes())
            assert found[0] == found[1], shape
    entry, = jitted.cache_entries()
    assert str(entry.signature).startswith('x: i32[B,T]'), entry.signature


def draws_in_a_loop(xs):
    h = xs[0] * 0
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t] + h + numpy.random.standard_normal(h.shape)
                   .astype(F32))
    return h


def unused_draw(x):
    numpy.random.uniform(size=(5,))  # advances the generator, unused
    return F.relu(x) + numpy.random.rand(*x.shape).astype(F32)


def draw_around_an_array(x):
    a = x.array if isinstance(x, chainer.Variable) else x
    return F.tanh(x) * numpy.random.normal(loc=a, scale=0.5).astype(F32)


def permuted_rows(x):
    return x[numpy.random.permutation(x.shape[0])] * 2


def _same_draws(fn, calls, seeds=(0, 1, 2)):
    """Each call eagerly and jitted from the same seed: equal results,
    and the generator left in the same state."""
    jitted = chainerjit.jit(fn)
    for seed in seeds:
        for args in calls:
            numpy.random.seed(seed)
            expected = fn(*args)
            after_eager = numpy.random.rand()
            numpy.random.seed(seed)
            actual = jitted(*args)
            assert numpy.random.rand() == after_eager
            testing.assert_results_equal(actual, expected, 0, 0)
    return jitted


def gumbel_softmax(x):
    return F.gumbel_softmax(x, tau=0.5)


@pytest.mark.parametrize('fn', [draws_in_a_loop, unused_draw,
                                draw_around_an_array, permuted_rows,
                                gumbel_softmax])
def test_draws_match_eager_under_the_same_seed(rng, fn):
    shape = (3, 2, 4) if fn is draws_in_a_loop else (5, 4)
    calls = [(rng.standard_normal(shape).astype(F32),) for _ in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        jitted = _same_draws(fn, calls)
    assert jitted.cache_info().compiled == 3 * len(calls) - 1


def test_draws_have_gradients_through_what_they_scale(rng):
    def fn(x):
        return F.sum(x * numpy.random.standard_normal(x.shape).astype(F32))
    jitted = chainerjit.jit(fn)
    for seed in range(4):
        x = rng.standard_normal((3, 4)).astype(F32)
        grads = []
        for run in (fn, jitted):
            v = chainer.Variable(x.copy())
            numpy.random.seed(seed)
            run(v).backward()
            grads.append(v.grad)
        numpy.testing.assert_array_equal(grads[0], grads[1])
    assert jitted.cache_info().compiled == 3


def a_python_number_drawn(x):
    return F.relu(x) * numpy.random.uniform(0.5, 1.5)


def seeding_in_the_forward(x):
    numpy.random.seed(3)
    return F.relu(x) + numpy.random.rand(*x.shape).astype(F32)


def a_generator_made_in_the_forward(x):
    noise = numpy.random.default_rng(7).standard_normal(x.shape)
    return F.relu(x) + noise.astype(F32)


def shuffled_rows(x):
    order = numpy.arange(x.shape[0])
    numpy.random.shuffle(order)
    return x[order] * 2


@pytest.mark.parametrize('fn, what, cut', [
    (a_python_number_drawn, 'numpy.random.uniform gives a Python value',
     False),
    (seeding_in_the_forward, 'numpy.random.seed in the forward', True),
    (a_generator_made_in_the_forward,
     'numpy.random.default_rng in the forward', True),
    (shuffled_rows, 'numpy.random.shuffle in the forward', True),
])
def test_draws_into_python_run_in_python(rng, fn, what, cut):
    """Each runs eagerly, or, where the forward has statements besides the
    one that draws, as a graph break: that statement in Python, the others
    compiled (drawing from the generator Python seeded, in eager's
    order)."""
    jitted = chainerjit.jit(fn)
    x = rng.standard_normal((2, 3)).astype(F32)
    with pytest.warns(errors.FallbackWarning, match=what):
        numpy.random.seed(1)
        actual = jitted(x)
    numpy.random.seed(1)
    testing.assert_results_equal(actual, fn(x), 0, 0)
    for seed in (2, 3):
        numpy.random.seed(seed)
        actual = jitted(x)
        numpy.random.seed(seed)
        testing.assert_results_equal(actual, fn(x), 0, 0)
    assert (jitted.graph_break() is not None) == cut
    # cut: the first call records the whole, the second the pieces
    assert jitted.cache_info().compiled == (1 if cut else 0)


class _StochasticDepth(chainer.Chain):
    """A block skipped by a draw of Python's generator, the input scaled
    by another: of the module, and of a ``random.Random`` it holds."""

    def __init__(self):
        super().__init__()
        self.generator = random.Random(5)
        with self.init_scope():
            self.block = L.Linear(3, 3)
            self.out = L.Linear(3, 2)

    def forward(self, x):
        h = F.relu(x)
        if random.random() < 0.5:
            h = h + self.block(h)
        h = h * self.generator.uniform(0.5, 1.5)
        return F.sum(self.out(h))


def test_draws_of_pythons_generator_run_in_python(rng):
    # Each call draws anew, as eagerly: never the draw the recording saw.
    model = _StochasticDepth()
    twin = _StochasticDepth()
    twin.copyparams(model)
    jitted = chainerjit.jit(twin.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', errors.FallbackWarning)
        for seed in range(8):
            x = rng.standard_normal((2, 3)).astype(F32)
            losses = []
            for m, forward in ((model, model.forward), (twin, jitted)):
                random.seed(seed)
                m.cleargrads()
                loss = forward(x)
                loss.backward()
                losses.append(loss.array)
            testing.assert_results_equal(losses[1], losses[0])
            for (name, a), (_, b) in zip(sorted(model.namedparams()),
                                         sorted(twin.namedparams())):
                assert (a.grad is None) == (b.grad is None), name
                if a.grad is not None:
                    numpy.testing.assert_allclose(b.grad, a.grad, 1e-5,
                                                  1e-6, err_msg=name)


GENERATOR = numpy.random.default_rng(0)


def draws_from_a_global_generator(x):
    return F.tanh(x + GENERATOR.standard_normal(x.shape).astype(F32))


def test_a_generator_the_forward_names_is_never_frozen(rng):
    """Its draws cannot be seen as calls; the state it changed can: the
    forward runs eagerly, and every call draws anew, as eagerly."""
    x = rng.standard_normal((2, 3)).astype(F32)
    jitted = chainerjit.jit(draws_from_a_global_generator)
    with pytest.warns(errors.FallbackWarning,
                      match='drawing from the random generator global '
                            'GENERATOR'):
        results = [jitted(x).array for _ in range(3)]
    assert not any((results[0] == r).all() for r in results[1:])


class HoldsAGenerator(chainer.Chain):
    """Adds noise drawn from a generator of its own (a RandomState, or a
    Generator), then samples rows with it."""

    def __init__(self, kind):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.rng = numpy.random.RandomState(5) if kind == 'RandomState' \
            else numpy.random.default_rng(5)

    def forward(self, x):
        noise = self.rng.standard_normal(x.shape).astype(F32)
        rows = self.rng.choice(x.shape[0], size=x.shape[0])
        return self.fc(F.tanh(x + noise)[rows])


@pytest.mark.parametrize('kind', ['RandomState', 'Generator'])
def test_draws_from_a_generator_held_by_the_model_are_ops(rng, kind):
    eager, model = HoldsAGenerator(kind), HoldsAGenerator(kind)
    model.copyparams(eager)
    jitted = chainerjit.jit(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.FallbackWarning)
        for _ in range(4):
            x = rng.standard_normal((4, 3)).astype(F32)
            expected, actual = eager.forward(x), jitted(x)
            testing.assert_results_equal(actual, expected, 0, 0)
            v, w = chainer.Variable(x.copy()), chainer.Variable(x.copy())
            F.sum(eager.forward(v)).backward()
            F.sum(jitted(w)).backward()
            numpy.testing.assert_array_equal(v.grad, w.grad)
    assert isinstance(model.rng, type(eager.rng))  # put back
    assert jitted.cache_info().compiled >= 5
    assert 'self.rng.standard_normal' in str(jitted.last_entry.graph)


class SeedsItsGenerator(HoldsAGenerator):

    def forward(self, x):
        self.rng.seed(3)
        return super().forward(x)


def test_using_a_held_generators_state_runs_eagerly(rng):
    eager, model = SeedsItsGenerator('RandomState'), \
        SeedsItsGenerator('RandomState')
    model.copyparams(eager)
    jitted = chainerjit.jit(model.forward)
    x = rng.standard_normal((4, 3)).astype(F32)
    with pytest.warns(errors.FallbackWarning,
                      match='using self.rng.seed in the forward'):
        testing.assert_results_equal(jitted(x), eager.forward(x), 0, 0)
    testing.assert_results_equal(jitted(x), eager.forward(x), 0, 0)
    assert jitted.cache_info().compiled == 0
