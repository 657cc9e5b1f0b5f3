"""Real programs with Python readbacks, random draws and changing
signatures: eager Chainer vs chainerjit, side by side.

Each workload is a sequence of calls (training steps, or forwards) of a
fresh model, run eagerly and through ``chainerjit.jit`` from the same
weights and seeds; every call's result (a loss, an output) is checked
against eager's. Workloads:

* ``CRF tagger, accuracy count``: an embedding, a linear layer and a
  linear-chain CRF loss over sentences of 5 to 20 tokens (batch 8), whose
  forward counts correct tags for its report with
  ``xp.sum(y == p)`` on ``F.argmax_crf1d``'s path (a value read into
  Python): a training step per call;
* ``MLP, loss read into Python``: a three-layer MLP classifier (batches
  of 32 x 100) whose forward reads its loss with ``float()`` to halve it
  on hard batches, then reports it and the accuracy: a graph break, the
  layers before it and the report after it compiled; a training step per
  call;
* ``MLP, accuracy count read into Python``: the same MLP, whose forward
  counts its right answers with ``int()`` and reports the accuracy, a
  number Python computes from that count: the statements after the
  read compute numbers only, and run as Python;
* ``decoder, reads its output at each step``: a greedy decoder (batch
  16, 64 units, 20 words) that feeds its argmax back for up to 10 steps
  and stops when the first sequence's token is 0, read with ``int()`` at
  each step (a graph break in the loop: each step's other statements
  compiled), a training step per call;
* ``tree net, whole traversal jitted`` / ``tree net, composition
  jitted``: a recursive network over a new random binary tree on every
  call (a tree of word ids, a ``tanh`` composition of the two children, a
  softmax cross entropy at the root), once with the whole recursive
  forward jitted (the tree is a Python argument: a new signature per
  tree) and once with only the per-node composition jitted;
* ``VAE, sampling``: Chainer's VAE example's loss (an encoder to a
  Normal, ``chainer.distributions`` sampling, a Bernoulli decoder, the
  KL term) on batches of 32 x 64, a training step (Adam) per call;
* ``GAN discriminator, input noise``: a discriminator that adds
  ``xp.random.randn`` noise to its input, on real and fake batches, a
  training step per call;
* ``new value every call``: a forward whose Python ``int`` argument
  changes on every call, scaling its output (an input of the program);
* ``new float every call``: the same forward with a ``float`` argument
  that changes on every call (an annealed weight: an input of the
  program too);
* ``new index every call``: a forward that indexes its output with an
  ``int`` argument that changes on every call (an input of the program,
  read by its indexing node);
* ``new list index every call``: a forward that scales its output by an
  item of a Python list, indexed with an ``int`` argument that changes on
  every call (CPython reads the int in C: it stays in the key, the
  function stops recording and runs its linear layer as a compiled
  segment; the per-call cost of the wrapper around eager code);
* ``LSTM, new length and annealed weight every call``: an LSTM
  classifier over a time-major batch of 16 sequences of 5 to 20 steps
  whose loss adds a penalty on the hidden states weighted by a ``float``
  argument annealed from 0 to 1 over the first 100 steps (a KL weight's
  schedule): a training step per call;
* ``MLP, the training loop counting its steps on the model``: the MLP
  classifier of 100 features and 10 classes on batches of 32, whose
  training loop sets the step and the epoch on the model before each
  step (``model.iteration = n``), numbers the forward never reads: a
  training step per call;
* ``text classifier, sentences of new lengths``: Chainer's text
  classification example's RNN encoder and classifier (``sequence_embed``
  with dropout 0.4, a one-layer ``L.NStepLSTM``, dropout, a linear layer)
  over a list of 8 sentences of 3 to 20 tokens (a new combination of
  lengths on every call), a training step per call;
* ``seq2seq, sentences of new lengths``: Chainer's seq2seq example's model
  and forward (reversed sources, ``sequence_embed``, three-layer
  ``L.NStepLSTM`` encoder and decoder with dropout 0.1 between layers, the
  summed softmax cross entropy) over 8 sentence pairs of 3 to 20 tokens, a
  training step per call;
* ``CNN text classifier, sentences of new lengths`` and ``bag-of-words
  text classifier, ...``: the example's CNN encoder (the sentences padded
  by ``concat_examples``, convolutions 3, 4 and 5 words wide, their
  maxima over the words, a linear layer) and its bag-of-words encoder
  (the padded embeddings summed over the words and divided by each
  sentence's length, ``xp.array([len(x) for x in xs])``, a linear layer),
  as written there, with dropout 0.1, over the same sentences, a training
  step per call.

For each: the total time of the sequence (recordings and compiles
included) and its ratio to eager's; the steady-state time per call over
the last calls, medians of interleaved rounds (the ratio and the
difference to eager's); and what ``cache_info()`` says ran how.

Usage::

    python benchmarks/bench_programs.py [--calls 200]
        [--output docs/benchmarks_programs.md]
"""

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from benchmarks import timing  # noqa: E402

WORKLOADS = ('CRF tagger, accuracy count', 'MLP, loss read into Python',
             'MLP, accuracy count read into Python',
             'decoder, reads its output at each step',
             'tree net, whole traversal jitted',
             'tree net, composition jitted', 'VAE, sampling',
             'GAN discriminator, input noise', 'new value every call',
             'new float every call', 'new index every call',
             'new list index every call',
             'LSTM, new length and annealed weight every call',
             'MLP, the training loop counting its steps on the model',
             'text classifier, sentences of new lengths',
             'seq2seq, sentences of new lengths',
             'CNN text classifier, sentences of new lengths',
             'bag-of-words text classifier, sentences of new lengths',
             'word tagger, batches of new sizes and lengths')

#: ``steps(jit)``: ``(step, jitted function)``; ``step(n, args)`` runs
#: call ``n`` and returns what is compared.
Workload = collections.namedtuple('Workload', 'make calls')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--calls', type=int, default=200)
    parser.add_argument('--threads', type=int, default=1,
                        help='BLAS threads (0: leave as is)')
    parser.add_argument('--rounds', type=int, default=9)
    parser.add_argument('--target-ms', type=float, default=40.0)
    parser.add_argument('--only', nargs='+', choices=WORKLOADS)
    parser.add_argument('--output', help='write a Markdown report here')
    return parser.parse_args(argv)


# --- the models --------------------------------------------------------------

def sequence_embed(embed, xs, dropout=0.):
    """Chainer's text classification and seq2seq examples' embedding of a
    list of sentences, as they write it."""
    import chainer.functions as F
    import numpy
    x_len = [len(x) for x in xs]
    x_section = numpy.cumsum(x_len[:-1])
    ex = embed(F.concat(xs, axis=0))
    ex = F.dropout(ex, ratio=dropout)
    exs = F.split_axis(ex, x_section, 0)
    return exs


def models():
    """The workloads' model classes, Chainer's examples among them (the
    tests train them too): ``(CRFTagger, TreeNet, VAE, Discriminator,
    Scaled, TextClassifier, Seq2seq, Picked, Listed, AnnealedRNN,
    LossReader, GreedyDecoder, CNNTextClassifier, BOWTextClassifier,
    AccuracyCounter, Counted, WordTagger)``."""
    import chainer
    import chainer.distributions as D
    import chainer.functions as F
    import chainer.links as L
    import numpy

    class CRFTagger(chainer.Chain):
        def __init__(self, words=100, tags=6, units=32):
            super().__init__()
            with self.init_scope():
                self.embed = L.EmbedID(words, units)
                self.fc = L.Linear(units, tags)
                self.crf = L.CRF1d(tags)

        def forward(self, xs, ys):
            # xs, ys: (T, B) word and tag ids, time major.
            t, b = xs.shape
            hs = self.fc(self.embed(xs.reshape(-1)))
            hs = F.separate(F.reshape(hs, (t, b, -1)), axis=0)
            ts = list(ys)
            loss = self.crf(hs, ts)
            _, path = self.crf.argmax(hs)
            correct = 0
            for y, p in zip(ts, path):
                correct += self.xp.sum(y == p)
            chainer.report({'loss': loss, 'correct': correct}, self)
            return loss

    class TreeNet(chainer.Chain):
        def __init__(self, words=100, units=32, classes=5):
            super().__init__()
            with self.init_scope():
                self.embed = L.EmbedID(words, units)
                self.compose_fc = L.Linear(2 * units, units)
                self.out = L.Linear(units, classes)

        def compose(self, left, right):
            return F.tanh(self.compose_fc(F.concat((left, right))))

        def traverse(self, node):
            if isinstance(node, int):
                return self.embed(numpy.array([node], numpy.int32))
            return self.compose(self.traverse(node[0]),
                                self.traverse(node[1]))

        def forward(self, tree, label):
            return F.softmax_cross_entropy(self.out(self.traverse(tree)),
                                           label)

    class VAE(chainer.Chain):
        def __init__(self, n_in=64, n_latent=8, n_h=64):
            super().__init__()
            with self.init_scope():
                self.le1 = L.Linear(n_in, n_h)
                self.le2_mu = L.Linear(n_h, n_latent)
                self.le2_ln_sigma = L.Linear(n_h, n_latent)
                self.ld1 = L.Linear(n_latent, n_h)
                self.ld2 = L.Linear(n_h, n_in)

        def forward(self, x):
            h = F.tanh(self.le1(x))
            q = D.Normal(loc=self.le2_mu(h),
                         log_scale=self.le2_ln_sigma(h))
            z = q.sample(1)
            logits = self.ld2(F.tanh(self.ld1(F.reshape(z, (len(x), -1)))))
            p = D.Bernoulli(logit=logits)
            prior = D.Normal(self.xp.zeros(q.loc.shape, numpy.float32),
                             self.xp.ones(q.loc.shape, numpy.float32))
            reconstr = F.mean(F.sum(p.log_prob(x), axis=-1))
            kl = F.mean(F.sum(chainer.kl_divergence(q, prior), axis=-1))
            return -(reconstr - kl)

    class Discriminator(chainer.Chain):
        def __init__(self, n_in=64, n_h=128):
            super().__init__()
            with self.init_scope():
                self.l1 = L.Linear(n_in, n_h)
                self.l2 = L.Linear(n_h, n_h)
                self.l3 = L.Linear(n_h, 1)

        def forward(self, x):
            noise = self.xp.random.randn(*x.shape).astype(numpy.float32)
            h = F.leaky_relu(self.l1(x + 0.1 * noise))
            return self.l3(F.leaky_relu(self.l2(h)))

    class Scaled(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.fc = L.Linear(64, 64)

        def forward(self, x, k):
            return F.tanh(self.fc(x)) * k

    class Picked(Scaled):
        def forward(self, x, k):
            return F.tanh(self.fc(x))[:, k % 64] * 2

    class Listed(Scaled):
        def __init__(self):
            super().__init__()
            self.weights = [0.5 + i / 8 for i in range(8)]

        def forward(self, x, k):
            return F.tanh(self.fc(x)) * self.weights[k % 8]

    class AnnealedRNN(chainer.Chain):
        def __init__(self, n_in=32, units=64, classes=8):
            super().__init__()
            with self.init_scope():
                self.lstm = L.LSTM(n_in, units)
                self.out = L.Linear(units, classes)

        def forward(self, xs, t, beta):
            # xs: (T, B, n_in), time major; beta: a weight annealed by step.
            self.lstm.reset_state()
            penalty = 0
            for x in xs:
                h = self.lstm(x)
                penalty += F.mean(h * h)
            loss = F.softmax_cross_entropy(self.out(h), t)
            return loss + beta * penalty / len(xs)

    class TextClassifier(chainer.Chain):
        def __init__(self, words=100, units=32, classes=4, dropout=0.4):
            super().__init__()
            with self.init_scope():
                self.embed = L.EmbedID(words, units)
                self.encoder = L.NStepLSTM(1, units, units, dropout)
                self.output = L.Linear(units, classes)
            self.dropout = dropout

        def forward(self, xs, t):
            exs = sequence_embed(self.embed, xs, self.dropout)
            last_h, last_c, ys = self.encoder(None, None, exs)
            h = F.dropout(last_h[-1], ratio=self.dropout)
            return F.softmax_cross_entropy(self.output(h), t)

    def block_embed(embed, x, dropout=0.):
        e = embed(x)
        e = F.dropout(e, ratio=dropout)
        e = F.transpose(e, (0, 2, 1))
        return e[:, :, :, None]

    class CNNTextClassifier(chainer.Chain):
        def __init__(self, words=100, units=32, classes=4, dropout=0.1):
            super().__init__()
            out_units = units // 3
            with self.init_scope():
                self.embed = L.EmbedID(words, units, ignore_label=-1)
                self.cnn_w3 = L.Convolution2D(units, out_units, (3, 1),
                                              pad=(2, 0), nobias=True)
                self.cnn_w4 = L.Convolution2D(units, out_units, (4, 1),
                                              pad=(3, 0), nobias=True)
                self.cnn_w5 = L.Convolution2D(units, out_units, (5, 1),
                                              pad=(4, 0), nobias=True)
                self.mlp = L.Linear(out_units * 3, out_units * 3)
                self.output = L.Linear(out_units * 3, classes)
            self.dropout = dropout

        def forward(self, xs, t):
            x_block = chainer.dataset.convert.concat_examples(xs,
                                                              padding=-1)
            ex_block = block_embed(self.embed, x_block, self.dropout)
            h_w3 = F.max(self.cnn_w3(ex_block), axis=2)
            h_w4 = F.max(self.cnn_w4(ex_block), axis=2)
            h_w5 = F.max(self.cnn_w5(ex_block), axis=2)
            h = F.dropout(F.relu(F.concat([h_w3, h_w4, h_w5], axis=1)),
                          ratio=self.dropout)
            h = F.relu(self.mlp(F.dropout(h, ratio=self.dropout)))
            h = F.dropout(h, ratio=self.dropout)
            return F.softmax_cross_entropy(self.output(h), t)

    class BOWTextClassifier(chainer.Chain):
        def __init__(self, words=100, units=32, classes=4, dropout=0.1):
            super().__init__()
            with self.init_scope():
                self.embed = L.EmbedID(words, units, ignore_label=-1)
                self.mlp = L.Linear(units, units)
                self.output = L.Linear(units, classes)
            self.dropout = dropout

        def forward(self, xs, t):
            x_block = chainer.dataset.convert.concat_examples(xs,
                                                              padding=-1)
            ex_block = block_embed(self.embed, x_block, self.dropout)
            x_len = self.xp.array([len(x) for x in xs], numpy.int32)[
                :, None, None]
            h = F.sum(ex_block, axis=2) / x_len
            h = F.relu(self.mlp(F.dropout(h, ratio=self.dropout)))
            h = F.dropout(h, ratio=self.dropout)
            return F.softmax_cross_entropy(self.output(h), t)

    class Seq2seq(chainer.Chain):
        def __init__(self, words=100, units=32):
            super().__init__()
            with self.init_scope():
                self.embed_x = L.EmbedID(words, units)
                self.embed_y = L.EmbedID(words, units)
                self.encoder = L.NStepLSTM(3, units, units, 0.1)
                self.decoder = L.NStepLSTM(3, units, units, 0.1)
                self.W = L.Linear(units, words)

        def forward(self, xs, ys):
            xs = [x[::-1] for x in xs]
            eos = self.xp.array([0], numpy.int32)
            ys_in = [F.concat([eos, y], axis=0) for y in ys]
            ys_out = [F.concat([y, eos], axis=0) for y in ys]
            exs = sequence_embed(self.embed_x, xs)
            eys = sequence_embed(self.embed_y, ys_in)
            batch = len(xs)
            hx, cx, _ = self.encoder(None, None, exs)
            _, _, os = self.decoder(hx, cx, eys)
            concat_os = F.concat(os, axis=0)
            concat_ys_out = F.concat(ys_out, axis=0)
            loss = F.sum(F.softmax_cross_entropy(
                self.W(concat_os), concat_ys_out, reduce='no')) / batch
            chainer.report({'loss': loss}, self)
            n_words = concat_ys_out.shape[0]
            perp = self.xp.exp(loss.array * batch / n_words)
            chainer.report({'perp': perp}, self)
            return loss

        def translate(self, xs, max_length=100):
            batch = len(xs)
            with chainer.no_backprop_mode(), \
                    chainer.using_config('train', False):
                xs = [x[::-1] for x in xs]
                exs = sequence_embed(self.embed_x, xs)
                h, c, _ = self.encoder(None, None, exs)
                ys = self.xp.full(batch, 0, numpy.int32)
                result = []
                for i in range(max_length):
                    eys = self.embed_y(ys)
                    eys = F.split_axis(eys, batch, 0)
                    h, c, ys = self.decoder(h, c, eys)
                    cys = F.concat(ys, axis=0)
                    wy = self.W(cys)
                    ys = self.xp.argmax(wy.array, axis=1).astype(numpy.int32)
                    result.append(ys)
            result = chainer.backends.cuda.to_cpu(
                self.xp.concatenate([x[None, :] for x in result]).T)
            outs = []  # each sentence up to its end of sentence
            for y in result:
                inds = numpy.argwhere(y == 0)
                if len(inds) > 0:
                    y = y[:inds[0, 0]]
                outs.append(y)
            return outs

    class LossReader(chainer.Chain):
        def __init__(self, n_in=100, n_h=100, classes=10):
            super().__init__()
            with self.init_scope():
                self.l1 = L.Linear(n_in, n_h)
                self.l2 = L.Linear(n_h, n_h)
                self.l3 = L.Linear(n_h, classes)

        def forward(self, x, t):
            h = F.relu(self.l1(x))
            h = F.relu(self.l2(h))
            y = self.l3(h)
            loss = F.softmax_cross_entropy(y, t)
            if float(loss.array) > 2.3:  # a hard batch counts half
                loss = loss * 0.5
            chainer.report({'loss': loss, 'accuracy': F.accuracy(y, t)},
                           self)
            return loss

    class AccuracyCounter(LossReader):
        def forward(self, x, t):
            h = F.relu(self.l1(x))
            y = self.l3(F.relu(self.l2(h)))
            loss = F.softmax_cross_entropy(y, t)
            correct = int((y.array.argmax(axis=1) == t).sum())
            chainer.report({'loss': loss,
                            'accuracy': float(correct) / len(t)}, self)
            return loss

    class GreedyDecoder(chainer.Chain):
        def __init__(self, n_in=32, units=64, words=20):
            super().__init__()
            with self.init_scope():
                self.enc = L.Linear(n_in, units)
                self.embed = L.EmbedID(words, units)
                self.cell = L.Linear(2 * units, units)
                self.out = L.Linear(units, words)

        def forward(self, x, ts):
            h = F.tanh(self.enc(x))
            y = self.xp.zeros(len(x), numpy.int32)
            loss, outs = 0, []
            for t in ts:
                e = self.embed(y)
                h = F.tanh(self.cell(F.concat((h, e))))
                logits = self.out(h)
                loss += F.softmax_cross_entropy(logits, t)
                y = logits.array.argmax(axis=1).astype(numpy.int32)
                if int(y[0]) == 0:  # the first sequence has ended
                    break
                outs.append(y)
            return loss / (len(outs) + 1)

    class Counted(LossReader):
        """An MLP classifier whose training loop counts its steps on the
        model (``model.iteration``, ``model.epoch``), which the forward
        never reads."""

        def __init__(self):
            super().__init__()
            self.iteration, self.epoch = 0, 0

        def forward(self, x, t):
            h = F.relu(self.l2(F.relu(self.l1(x))))
            return F.softmax_cross_entropy(self.l3(h), t)

    class WordTagger(chainer.Chain):
        """A tag for each word from its embedding alone, through a hidden
        layer, each sentence on its own, the scores joined."""

        def __init__(self, words=100, units=32, tags=8):
            super().__init__()
            with self.init_scope():
                self.embed = L.EmbedID(words, units)
                self.hidden = L.Linear(units, units)
                self.output = L.Linear(units, tags)

        def forward(self, xs, ts):
            h = F.concat([self.output(F.tanh(self.hidden(self.embed(x))))
                          for x in xs], axis=0)
            return F.softmax_cross_entropy(h, F.concat(ts, axis=0))

    return (CRFTagger, TreeNet, VAE, Discriminator, Scaled, TextClassifier,
            Seq2seq, Picked, Listed, AnnealedRNN, LossReader, GreedyDecoder,
            CNNTextClassifier, BOWTextClassifier, AccuracyCounter, Counted,
            WordTagger)


# --- the steps ---------------------------------------------------------------

def _twins(cls):
    import numpy
    numpy.random.seed(0)
    eager, jitted = cls(), cls()
    jitted.copyparams(eager)
    return eager, jitted


def _model_and_forward(which, jit):
    """The eager or the jitted twin (``jit``) of model ``which`` of
    :func:`models`, and its forward (jitted for the latter)."""
    import chainerjit
    model = _twins(models()[which])[1 if jit else 0]
    return model, chainerjit.jit(model.forward) if jit else model.forward


def _trained(which):
    """The workload's ``make(jit)``: training steps of model ``which``
    through its forward."""
    def make(jit):
        model, forward = _model_and_forward(which, jit)
        return _training_step(model, forward), forward
    return make


def _counted(jit):
    """Training steps of the ``Counted`` model, its step and epoch set on
    it before each."""
    model, forward = _model_and_forward(15, jit)
    return _training_step(model, forward, counted=True), forward


def _training_step(model, loss_of, counted=False):
    """``step(n, args)``: a seeded training step (Adam) of ``model``
    (``counted``: the step and epoch set on the model first)."""
    import chainer
    import numpy
    optimizer = chainer.optimizers.Adam()
    optimizer.setup(model)

    def step(n, args):
        numpy.random.seed(n)
        if counted:
            model.iteration, model.epoch = n, n // 50
        model.cleargrads()
        loss = loss_of(*args)
        loss.backward()
        optimizer.update()
        return loss.array
    return step


def _loss_reader_calls(n, rng):
    import numpy
    return [(rng.standard_normal((32, 100)).astype(numpy.float32),
             rng.randint(0, 10, 32).astype(numpy.int32)) for _ in range(n)]


def _decoder_calls(n, rng):
    import numpy
    return [(rng.standard_normal((16, 32)).astype(numpy.float32),
             rng.randint(0, 20, (10, 16)).astype(numpy.int32))
            for _ in range(n)]


def _crf_calls(n, rng):
    import numpy
    calls = []
    for _ in range(n):
        t = int(rng.randint(5, 21))
        calls.append((rng.randint(0, 100, (t, 8)).astype(numpy.int32),
                      rng.randint(0, 6, (t, 8)).astype(numpy.int32)))
    return calls


def _tree(jit, part):
    import chainerjit
    cls = models()[1]
    model = _twins(cls)[1 if jit else 0]
    forward = model.forward
    jitted = None
    if jit and part == 'whole':
        forward = jitted = chainerjit.jit(model.forward)
    elif jit:
        model.compose = jitted = chainerjit.jit(model.compose)
    return _training_step(model, forward), jitted


def _random_tree(rng, leaves):
    if leaves == 1:
        return int(rng.randint(0, 100))
    left = int(rng.randint(1, leaves))
    return (_random_tree(rng, left), _random_tree(rng, leaves - left))


def _tree_calls(n, rng):
    import numpy
    return [(_random_tree(rng, int(rng.randint(4, 13))),
             rng.randint(0, 5, 1).astype(numpy.int32)) for _ in range(n)]


def _vae_calls(n, rng):
    import numpy
    return [((rng.uniform(size=(32, 64)) > 0.5).astype(numpy.float32),)
            for _ in range(n)]


def _gan(jit):
    import chainer.functions as F
    model, forward = _model_and_forward(3, jit)

    def loss_of(real, fake):
        return F.mean(F.softplus(-forward(real))) + \
            F.mean(F.softplus(forward(fake)))
    return _training_step(model, loss_of), forward


def _gan_calls(n, rng):
    import numpy
    return [(rng.standard_normal((32, 64)).astype(numpy.float32),
             rng.standard_normal((32, 64)).astype(numpy.float32))
            for _ in range(n)]


def _scaled(jit, which=4):
    """A forward given a number: ``which`` model of :func:`models`."""
    _, forward = _model_and_forward(which, jit)

    def step(n, args):
        return forward(*args).array
    return step, forward


def _scaled_calls(n, rng):
    import numpy
    return [(rng.standard_normal((16, 64)).astype(numpy.float32),
             k + 2) for k in range(n)]


def _scaled_float_calls(n, rng):
    return [(x, 1.0 + k / n) for k, (x, _) in enumerate(
        _scaled_calls(n, rng))]


def _annealed_calls(n, rng):
    import numpy
    return [(rng.standard_normal((int(rng.randint(5, 21)), 16, 32)).astype(
        numpy.float32), rng.randint(0, 8, 16).astype(numpy.int32),
        min(1.0, k / 100)) for k in range(n)]


def _text_calls(n, rng):
    import numpy
    return [([rng.randint(0, 100, int(rng.randint(3, 21))).astype(
        numpy.int32) for _ in range(8)], rng.randint(0, 4, 8).astype(
            numpy.int32)) for _ in range(n)]


def _sentences(rng):
    import numpy
    return [rng.randint(1, 100, int(rng.randint(3, 21))).astype(numpy.int32)
            for _ in range(8)]


def _tagged_calls(n, rng):
    """Batches of 1 to 16 sentences of 3 to 20 words, a tag for each."""
    import numpy
    calls = []
    for _ in range(n):
        xs = [rng.randint(1, 100, int(rng.randint(3, 21))).astype(
            numpy.int32) for _ in range(int(rng.randint(1, 17)))]
        calls.append((xs, [rng.randint(0, 8, len(x)).astype(numpy.int32)
                           for x in xs]))
    return calls


def _seq2seq_calls(n, rng):
    return [(_sentences(rng), _sentences(rng)) for _ in range(n)]


WORKLOAD_DEFS = {
    'CRF tagger, accuracy count': Workload(_trained(0), _crf_calls),
    'MLP, loss read into Python': Workload(_trained(10),
                                           _loss_reader_calls),
    'MLP, accuracy count read into Python': Workload(_trained(14),
                                                     _loss_reader_calls),
    'decoder, reads its output at each step': Workload(_trained(11),
                                                       _decoder_calls),
    'tree net, whole traversal jitted': Workload(
        lambda jit: _tree(jit, 'whole'), _tree_calls),
    'tree net, composition jitted': Workload(
        lambda jit: _tree(jit, 'compose'), _tree_calls),
    'VAE, sampling': Workload(_trained(2), _vae_calls),
    'GAN discriminator, input noise': Workload(_gan, _gan_calls),
    'new value every call': Workload(_scaled, _scaled_calls),
    'new float every call': Workload(_scaled, _scaled_float_calls),
    'new index every call': Workload(lambda jit: _scaled(jit, 7),
                                     _scaled_calls),
    'new list index every call': Workload(lambda jit: _scaled(jit, 8),
                                          _scaled_calls),
    'LSTM, new length and annealed weight every call': Workload(
        _trained(9), _annealed_calls),
    'MLP, the training loop counting its steps on the model': Workload(
        _counted, _loss_reader_calls),
    'text classifier, sentences of new lengths': Workload(_trained(5),
                                                          _text_calls),
    'seq2seq, sentences of new lengths': Workload(_trained(6), _seq2seq_calls),
    'CNN text classifier, sentences of new lengths': Workload(
        _trained(12), _text_calls),
    'bag-of-words text classifier, sentences of new lengths': Workload(
        _trained(13), _text_calls),
    'word tagger, batches of new sizes and lengths': Workload(
        _trained(16), _tagged_calls),
}


# --- timing ------------------------------------------------------------------

def _run_all(step, calls, first=0):
    return [step(first + n, args) for n, args in enumerate(calls)]


def run_workload(name, args):
    """Times one workload; checks every call's result against eager's."""
    import warnings
    import numpy

    definition = WORKLOAD_DEFS[name]
    calls = definition.calls(args.calls, numpy.random.RandomState(1))
    (eager, _), (jit, jitted) = definition.make(False), definition.make(True)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        start = time.perf_counter()
        expected = _run_all(eager, calls)
        eager_total = time.perf_counter() - start
        start = time.perf_counter()
        actual = _run_all(jit, calls)
        jit_total = time.perf_counter() - start
        for n, (a, e) in enumerate(zip(actual, expected)):
            numpy.testing.assert_allclose(
                a, e, rtol=1e-4, atol=1e-5,
                err_msg='%s, call %d: jit vs eager' % (name, n))
        tail = calls[-min(len(calls), 20):]
        samples = timing.interleaved(
            {'eager': lambda: _run_all(eager, tail, len(calls)),
             'jit': lambda: _run_all(jit, tail, len(calls))},
            rounds=args.rounds, target_seconds=args.target_ms / 1e3)
    summaries, ratio = timing.compare(samples)
    per_call = dict((k, s.median / len(tail)) for k, s in summaries.items())
    return {'workload': name, 'eager_total': eager_total,
            'jit_total': jit_total, 'eager_call': per_call['eager'],
            'jit_call': per_call['jit'], 'ratio': ratio,
            'info': jitted.cache_info(), 'stopped': jitted.budget.stopped}


def format_table(rows):
    lines = ['| workload | eager, total | jit, total | ratio | eager per '
             'call | jit per call | ratio | difference | compiles | '
             'compiled calls | eager calls |',
             '|---|---|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        info = r['info']
        lines.append(
            '| %s | %.0f ms | %.0f ms | %.2fx | %.1f us | %.1f us | %.2fx | '
            '%+.1f us | %d | %d | %d |' % (
                r['workload'], r['eager_total'] * 1e3, r['jit_total'] * 1e3,
                r['jit_total'] / r['eager_total'], r['eager_call'] * 1e6,
                r['jit_call'] * 1e6, r['ratio'],
                (r['jit_call'] - r['eager_call']) * 1e6, info.compiles,
                info.compiled, info.eager))
    return '\n'.join(lines)


def _warm_up():
    """One jitted training step and one forward of a small model: the
    process's one-time costs (imports, Chainer's patches) are paid before
    the first workload, not by it."""
    import chainer
    import chainer.functions as F
    import chainer.links as L
    import numpy

    import chainerjit

    model = L.Linear(3, 2)
    forward = chainerjit.jit(model.forward)
    x = numpy.ones((2, 3), numpy.float32)
    F.sum(forward(x)).backward()
    with chainer.no_backprop_mode():
        forward(x)


def main(argv=None):
    args = parse_args(argv)
    info = timing.start(args.threads)
    _warm_up()
    rows = []
    for name in args.only or WORKLOADS:
        rows.append(run_workload(name, args))
        print('%s: %.2fx of eager in steady state' % (name,
                                                      rows[-1]['ratio']))
    stops = ['* %s: %s.' % (r['workload'], r['stopped']) for r in rows
             if r['stopped']]
    report = '\n'.join([
        '# Real programs: readbacks, random draws, changing signatures',
        '',
        'Generated by `python benchmarks/bench_programs.py --calls %d%s`. '
        'Each workload is %d calls (training steps, or forwards) of a fresh '
        'model, eagerly and through `chainerjit.jit` from the same weights '
        'and seeds, every result checked against eager\'s (see the '
        'script\'s docstring for the models). *Total*: the whole sequence, '
        'recordings and compiles included. *Per call*: medians of %d '
        'interleaved rounds over the last 20 calls (steady state); '
        '*difference* is jit\'s per call less eager\'s. The counts are '
        'the jitted function\'s `cache_info()` at the end: for the tree '
        'net with the composition jitted, they count its calls, one per '
        'tree node.' % (
            args.calls, ' --output %s' % args.output if args.output else '',
            args.calls, args.rounds),
        '',
        '* date: %(date)s' % info,
        '* machine: %(machine)s' % info,
        '* Python %(python)s, numpy %(numpy)s, chainer %(chainer)s' % info,
        '* threads: %(threads)s; BLAS: %(blas)s' % info,
        '',
        format_table(rows),
        '',
        'Why a jitted function stopped recording new signatures:',
        '',
    ] + (stops or ['* none did.'])) + '\n'
    timing.publish(report, args.output)
    return rows


if __name__ == '__main__':
    main()
