"""Calls whose shapes change: eager Chainer vs chainerjit, side by side.

Each workload is a sequence of calls of a fresh model with a new size on
most calls, run eagerly and through ``chainerjit.jit`` from the same
weights; every call's result is checked against eager's. Workloads:

* ``serving an MLP, batches 1 to 64``: the MLP of ``examples/models.py``
  in test mode without backprop, a random batch size of 1 to 64 on each
  call; chainerjit with its defaults (one entry for every batch size),
  with ``backend='numpy'`` (the VM at every batch size but 1) and with
  ``dynamic=False`` (one entry per batch size);
* ``MLP training, batches 1 to 64``: a training step (forward, backward)
  of the MLP's softmax cross entropy loss, a random batch size of 1 to 64
  on each call; defaults (one entry for every batch size but 1) and
  ``dynamic=False``;
* ``bag-of-words training, padded batches ...``: a text classifier
  averaging its embeddings over the words of padded ids, batches of 32
  sentences 5 to 60 words wide, and batches of 2 to 64 sentences too; a
  text CNN (a convolution 3 words wide, its maximum over the words) on
  the latter;
* ``... training, lists of 2 to 64 sentences ...``: the bag of words and
  the text CNN with the sentences given as lists of token arrays (and
  the labels as a list), padded in the forward by ``concat_examples``,
  as Chainer's text classification example does; and that example's RNN
  encoder (``sequence_embed`` into a one-layer ``L.NStepLSTM``), also
  with each sentence embedded on its own, and with ``F.n_step_lstm`` on
  the sentences sorted and transposed; and Chainer's seq2seq example's
  model as it is written, on lists of sentence pairs;
* ``serving a transformer block, batches 1 to 64``: ``EncoderBlock``
  (reshapes of the batch into other axes) over 5 tokens, likewise; and
  over padded batches of 5 to 60 tokens with their mask, served and
  trained (on the squares of its outputs);
* ``Chainer's POS tagging example training``: its ``CRF`` model
  (``L.CRF1d`` with ``transpose=True``) on 30 sentences of 2 to 40
  words a step; and its step as the example writes it (the best paths
  compared with the tags, the words counted, both reported) on 2 to 30
  sentences of 1 to 40 words;
* ``LSTM training, lengths 5 to 40``: an LSTM written with
  ``T, B, _ = xs.shape`` and ``for t in range(T)``, a random length on each
  call, a training step (forward, backward) per call;
* ``bidirectional LSTM training, lengths 5 to 40``: a forward and a
  ``reversed(range(T))`` loop, likewise;
* ``LSTM training, lengths 5 to 40, batches 2 to 64``: the first, with a
  random batch size on each call too;
* ``batch-first LSTM training, batches 2 to 64, lengths 5 to 40``: the
  steps read as ``xs[:, t]`` over ``range(xs.shape[1])``, the state made
  by the first step, a random batch size and length on each call;
* ``encoder sub-chain training, steps averaged, lengths 5 to 60, batches
  2 to 64``: a classifier whose LSTM loop is in its encoder sub-chain's
  forward, the steps' outputs stacked and averaged over time, a random
  length and batch size on each call;
* ``sequence to sequence training, source and target lengths 5 to 60,
  batches 2 to 64``: an LSTM encoder over the source and a teacher-forced
  decoder over the target, each a length of its own, a random pair of
  lengths and batch size on each call;
* ``bidirectional LSTM training, the directions joined step by step``:
  both directions' states appended to lists, then joined step by step by
  a comprehension over ``zip(forward, reversed(backward))``, a random
  length and batch size on each call;
* ``attention decoder training, written step by step``: the encoder's
  states stacked, and the decoder's loop over the target scoring all of
  them at each step (a softmax over the source steps, a context summed
  over them), a random pair of lengths and batch size on each call.

For each: the total time of the sequence (recordings, compiles and the
first call at each new size, which also runs eagerly, included) and its
ratio to eager's, the median time per call over the second half, and how
many cache entries the function holds at the end.

Usage::

    python benchmarks/bench_shapes.py [--calls 400]
        [--output docs/benchmarks_shapes.md]
"""

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from benchmarks import timing  # noqa: E402

I, H = 16, 32


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--calls', type=int, default=400)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--output', default=None)
    parser.add_argument('--only', nargs='+', default=None,
                        help='workload name prefixes')
    return parser.parse_args(argv)


def _lstm_models():
    import chainer
    import chainer.functions as F
    import chainer.links as L
    import numpy

    class Steps(chainer.Chain):
        def __init__(self):
            super(Steps, self).__init__()
            with self.init_scope():
                self.x2h = L.Linear(I, 4 * H)
                self.h2h = L.Linear(H, 4 * H, nobias=True)
                self.back = L.Linear(I, 4 * H)
                self.out = L.Linear(H, 10)

        def step(self, x, h, c):
            c, h = F.lstm(c, self.x2h(x) + self.h2h(h))
            return h, c

    class LSTM(Steps):
        def forward(self, xs):
            T, batch, _ = xs.shape
            h = c = self.xp.zeros((batch, H), numpy.float32)
            for t in range(T):
                h, c = self.step(xs[t], h, c)
            return self.out(h)

    class LazyLSTM(Steps):
        """The state made at the first step, each step's output
        stacked."""

        def forward(self, xs):
            h = c = None
            ys = []
            for x in xs:
                if h is None:
                    h = c = self.xp.zeros((x.shape[0], H), numpy.float32)
                h, c = self.step(x, h, c)
                ys.append(self.out(h))
            return F.stack(ys)

    class BiLSTM(Steps):
        def forward(self, xs):
            T = len(xs)
            h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
            for t in range(T):
                h, c = self.step(xs[t], h, c)
            hb = cb = self.xp.zeros((xs.shape[1], H), numpy.float32)
            for t in reversed(range(T)):
                cb, hb = F.lstm(cb, self.back(xs[t]) + self.h2h(hb))
            return self.out(h + hb)

    class BatchFirst(Steps):
        def forward(self, xs):
            h = c = None
            for t in range(xs.shape[1]):
                a = self.x2h(xs[:, t])
                if h is None:  # the state made by the first step
                    c, h = F.lstm(a[:, :H] * 0, a)
                else:
                    c, h = F.lstm(c, a + self.h2h(h))
            return self.out(h)

    class Encoder(Steps):
        def forward(self, xs):
            T, batch, _ = xs.shape
            h = c = self.xp.zeros((batch, H), numpy.float32)
            hs = []
            for t in range(T):
                h, c = self.step(xs[t], h, c)
                hs.append(h)
            return F.mean(F.stack(hs), axis=0)

    class EncoderClassifier(chainer.Chain):
        """The loop in a sub-chain, its steps averaged over time."""

        def __init__(self):
            super(EncoderClassifier, self).__init__()
            with self.init_scope():
                self.encoder = Encoder()
                self.out = L.Linear(H, 10)

        @property
        def x2h(self):
            return self.encoder.x2h

        def forward(self, xs):
            return self.out(self.encoder(xs))

    class Seq2Seq(Steps):
        """An encoder over the source and a decoder over the target,
        each of its own length, teacher-forced (``ys[t + 1]``)."""

        def forward(self, xs, ys):
            h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
            for x in xs:
                h, c = self.step(x, h, c)
            loss = 0
            for t in range(len(ys) - 1):
                c, h = F.lstm(c, self.back(ys[t]) + self.h2h(h))
                loss = loss + F.sum(self.out(h) * ys[t + 1][:, :10])
            return loss / len(ys)

    class BiLSTMJoined(Steps):
        """Each step's two directions joined by a loop over both lists of
        states, as a tagger's encoder writes it by hand."""

        def forward(self, xs):
            h = c = hb = cb = self.xp.zeros((xs.shape[1], H), numpy.float32)
            forward, backward = [], []
            for x in xs:
                h, c = self.step(x, h, c)
                forward.append(h)
            for x in reversed(xs):
                cb, hb = F.lstm(cb, self.back(x) + self.h2h(hb))
                backward.append(hb)
            joined = [F.concat((f, b))
                      for f, b in zip(forward, reversed(backward))]
            return F.stack(joined)

    class AttentionSeq2Seq(Steps):
        """An encoder over the source, its states stacked, and a decoder
        over the target attending to all of them at each of its steps."""

        def forward(self, xs, ys):
            h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
            states = []
            for x in xs:
                h, c = self.step(x, h, c)
                states.append(h)
            enc = F.stack(states)
            loss = 0
            for y in ys:
                scores = F.sum(enc * F.broadcast_to(h, enc.shape), axis=2)
                weights = F.expand_dims(F.softmax(scores, axis=0), 2)
                context = F.sum(enc * F.broadcast_to(weights, enc.shape),
                                axis=0)
                c, h = F.lstm(c, self.back(y) + self.h2h(h + context))
                loss = loss + F.sum(self.out(h))
            return loss

    class LanguageModel(Steps):
        """Word ids embedded at once, the loop over the embedded steps,
        the states of all steps projected at once against the targets
        (another argument of as many steps)."""

        def __init__(self):
            super(LanguageModel, self).__init__()
            with self.init_scope():
                self.embed = L.EmbedID(VOCABULARY, I)
                self.words = L.Linear(H, VOCABULARY)

        def forward(self, ids, targets):
            exs = F.dropout(self.embed(ids), 0.1)
            h = c = self.xp.zeros((ids.shape[1], H), numpy.float32)
            hs = []
            for x in exs:
                h, c = self.step(x, h, c)
                hs.append(h)
            return F.softmax_cross_entropy(
                self.words(F.concat(hs, axis=0)), targets.reshape(-1))

    return LSTM, BiLSTM, BatchFirst, EncoderClassifier, Seq2Seq, \
        LanguageModel, BiLSTMJoined, AttentionSeq2Seq, LazyLSTM


VOCABULARY = 100


def _words_and_targets(rng):
    """A language model's arguments: time-major word ids and the next
    words, of a random length (5 to 60) and batch size (2 to 64)."""
    import numpy
    shape = (rng.randint(5, 61), rng.randint(2, 65))
    return tuple(rng.randint(0, VOCABULARY, shape).astype(numpy.int32)
                 for _ in range(2))


def _steps(batch_first=False, batches=False, longest=40, shortest=5,
           fewest=2):
    """``inputs(rng)``: one sequence argument of a random length of
    ``shortest`` to ``longest`` (time-major, or batch-first), of 8 rows or
    a random batch of ``fewest`` to 64."""
    def inputs(rng):
        import numpy
        batch = rng.randint(fewest, 65) if batches or batch_first else 8
        length = rng.randint(shortest, longest + 1)
        shape = (batch, length, I) if batch_first else (length, batch, I)
        return rng.standard_normal(shape).astype(numpy.float32),
    return inputs


def _source_and_target(rng):
    """A sequence to sequence model's arguments: a random batch size (2
    to 64), source and target length (5 to 60 each)."""
    import numpy
    batch = rng.randint(2, 65)
    return tuple(rng.standard_normal((rng.randint(5, 61), batch, I))
                 .astype(numpy.float32) for _ in range(2))


def _serving(make_model, make_input, jit_options):
    """``run(jit)``: the calls of a serving workload; returns (seconds per
    call, results, entries)."""
    def run(jitted, calls, seed):
        import chainer
        import numpy

        import chainerjit
        numpy.random.seed(seed)
        model = make_model()
        fn = chainerjit.jit(model.forward, **jit_options) if jitted \
            else model.forward
        rng = numpy.random.RandomState(seed)
        times, results = [], []
        with chainer.using_config('train', False), \
                chainer.no_backprop_mode():
            for _ in range(calls):
                args = make_input(rng, rng.randint(1, 65))
                args = args if isinstance(args, tuple) else (args,)
                start = time.perf_counter()
                y = fn(*args)
                times.append(time.perf_counter() - start)
                results.append(y.array)
        return times, results, (fn.cache_info().currsize if jitted
                                else None)
    return run


def _training(model_class, inputs):
    """``run(jit)``: a training step (the sum of the output, backward)
    per call on the arguments ``inputs(rng)`` makes."""
    def run(jitted, calls, seed):
        import numpy

        import chainerjit
        import chainer.functions as F
        numpy.random.seed(seed)
        model = model_class()
        fn = chainerjit.jit(model) if jitted else model
        rng = numpy.random.RandomState(seed)
        times, results = [], []
        for _ in range(calls):
            args = inputs(rng)
            start = time.perf_counter()
            loss = F.sum(fn(*args))
            model.cleargrads()
            loss.backward()
            times.append(time.perf_counter() - start)
            results.append(model.x2h.W.grad.copy())
        return times, results, (fn.cache_info().currsize if jitted
                                else None)
    return run


def _loss_training(make_model, make_batch, grad_of, jit_options):
    """``run(jit)``: a training step of the loss ``make_model()`` returns
    per call, on ``make_batch(rng)``; ``grad_of(model)`` is the gradient
    compared between the systems."""
    def run(jitted, calls, seed):
        import numpy

        import chainerjit
        numpy.random.seed(seed)
        model = make_model()
        fn = chainerjit.jit(model.forward, **jit_options) if jitted \
            else model.forward
        rng = numpy.random.RandomState(seed)
        times, results = [], []
        for _ in range(calls):
            args = make_batch(rng)
            start = time.perf_counter()
            loss = fn(*args)
            model.cleargrads()
            loss.backward()
            times.append(time.perf_counter() - start)
            results.append(grad_of(model).copy())
        return times, results, (fn.cache_info().currsize if jitted
                                else None)
    return run


def _classifier_training(jit_options):
    """The MLP's classifier loss, each step on a random batch size of 1 to
    64."""
    import chainer
    import chainer.functions as F
    import numpy

    from examples import models

    class Loss(chainer.Chain):
        def __init__(self):
            super(Loss, self).__init__()
            with self.init_scope():
                self.mlp = models.MLP()

        def forward(self, x, t):
            return F.softmax_cross_entropy(self.mlp(x), t)

    def batch(rng):
        size = rng.randint(1, 65)
        return (rng.randn(size, 784).astype(numpy.float32),
                rng.randint(0, 10, size).astype(numpy.int32))
    return _loss_training(Loss, batch, lambda m: m.mlp.l1.W.grad,
                          jit_options)


def _padded_tokens(rng, batch):
    """A transformer block's arguments: a padded batch of ``batch``
    sentences of 5 to 60 tokens (their features) and its mask."""
    import numpy
    width = rng.randint(5, 61)
    lengths = rng.randint(1, width + 1, size=batch)
    lengths[0] = width
    return (rng.standard_normal((batch, width, 16)).astype(numpy.float32),
            numpy.arange(width)[None] < lengths[:, None])


def _block_training():
    """``examples/models.py``'s ``EncoderBlock``, masked, trained on the
    squares of its outputs, each step on a padded batch of 2 to 64
    sentences of 5 to 60 tokens."""
    import chainer
    import chainer.functions as F

    from examples import models

    class Loss(chainer.Chain):
        def __init__(self):
            super(Loss, self).__init__()
            with self.init_scope():
                self.block = models.EncoderBlock()

        def forward(self, x, mask):
            y = self.block(x, mask)
            return F.sum(y * y) / len(x)

    return _loss_training(Loss, lambda rng: _padded_tokens(
        rng, rng.randint(2, 65)), lambda m: m.block.qkv.W.grad, {})


def _pos_tagger_training(as_written=False):
    """Chainer's POS tagging example's ``CRF`` (tag scores looked up,
    ``L.CRF1d`` over the sentences with ``transpose=True``), each step on
    30 sentences of 2 to 40 words, in any order. ``as_written``: its
    forward as the example writes it (the best paths compared with the
    tags, the words counted, both reported), on 2 to 30 sentences of 1 to
    40 words."""
    import chainer
    import chainer.links as L
    import numpy

    class Tagger(chainer.Chain):
        def __init__(self):
            super(Tagger, self).__init__()
            with self.init_scope():
                self.feature = L.EmbedID(VOCABULARY, 20)
                self.crf = L.CRF1d(20)

        def forward(self, xs, ys):
            hs = [self.feature(x) for x in xs]
            loss = self.crf(hs, ys, transpose=True)
            if not as_written:
                return loss
            chainer.report({'loss': loss}, self)
            _, predict = self.crf.argmax(hs, transpose=True)
            correct = 0
            total = 0
            for y, p in zip(ys, predict):
                correct += self.xp.sum(y == p)
                total += len(y)
            chainer.report({'correct': correct}, self)
            chainer.report({'total': total}, self)
            return loss

    def sentences(rng):
        if as_written:
            lengths = rng.randint(1, 41, size=rng.randint(2, 31))
            return ([rng.randint(0, VOCABULARY, n).astype(numpy.int32)
                     for n in lengths],
                    [rng.randint(0, 20, n).astype(numpy.int32)
                     for n in lengths])
        lengths = rng.randint(2, 41, size=30)
        return ([rng.randint(0, VOCABULARY, n).astype(numpy.int32)
                 for n in lengths],
                [rng.randint(0, 20, n).astype(numpy.int32) for n in lengths])
    return _loss_training(Tagger, sentences, lambda m: m.crf.cost.grad, {})


def _padded_text_training(batches=False, convolved=False, listed=False,
                          by_hand=False):
    """A text classifier on padded batches of 32 sentences (with
    ``batches``, 2 to 64) whose width, the longest sentence, is 5 to 60
    words: ids past a sentence's end are -1, ignored. Bag of words: the
    embedding averaged over the words; ``convolved``: a convolution 3
    words wide over them, its maximum over the words. ``listed``: the
    forward takes the sentences as a list of token arrays and the labels
    as a list of one each, as Chainer's text classification example does,
    and pads them with ``concat_examples``; ``by_hand``: averages each
    sentence's embeddings itself, ``F.sum(self.embed(x), axis=0) /
    len(x)``, and stacks them."""
    import chainer
    import chainer.functions as F
    import chainer.links as L
    import numpy

    class BagOfWords(chainer.Chain):
        def __init__(self):
            super(BagOfWords, self).__init__()
            with self.init_scope():
                self.embed = L.EmbedID(5000, 128, ignore_label=-1)
                self.l1 = L.Linear(128, 128)
                self.l2 = L.Linear(128, 5)

        def forward(self, ids, t):
            h = F.mean(self.embed(ids), axis=1)
            return F.softmax_cross_entropy(self.l2(F.relu(self.l1(h))), t)

    class Convolved(BagOfWords):
        def __init__(self):
            super(Convolved, self).__init__()
            with self.init_scope():
                self.conv = L.Convolution2D(128, 128, (3, 1), pad=(1, 0))

        def forward(self, ids, t):
            e = F.transpose(self.embed(ids), (0, 2, 1))[:, :, :, None]
            h = F.max(F.relu(self.conv(e)), axis=(2, 3))
            return F.softmax_cross_entropy(self.l2(F.relu(self.l1(h))), t)

    def batch(rng):
        size = rng.randint(2, 65) if batches else 32
        width = rng.randint(5, 61)
        ids = rng.randint(0, 5000, (size, width)).astype(numpy.int32)
        ends = rng.randint(1, width + 1, size)
        ids[numpy.arange(width) >= ends[:, None]] = -1
        return ids, rng.randint(0, 5, size).astype(numpy.int32)

    if listed:
        class Listed(Convolved if convolved else BagOfWords):
            def forward(self, xs, ys):
                ids = chainer.dataset.convert.concat_examples(xs, padding=-1)
                return super(Listed, self).forward(ids, F.concat(ys, axis=0))

        class ByHand(BagOfWords):
            def forward(self, xs, ys):
                h = F.stack([F.sum(self.embed(x), axis=0) / len(x)
                             for x in xs])
                return F.softmax_cross_entropy(self.l2(F.relu(self.l1(h))),
                                               F.concat(ys, axis=0))

        def sentences(rng):
            ids, t = batch(rng)
            return ([row[row >= 0] for row in ids],
                    [t[i:i + 1] for i in range(len(t))])
        return _loss_training(ByHand if by_hand else Listed, sentences,
                              lambda m: m.l1.W.grad, {})
    return _loss_training(Convolved if convolved else BagOfWords, batch,
                          lambda m: m.l1.W.grad, {})


def _tagger_training():
    """An LSTM-CRF tagger written by hand: word ids embedded, an LSTM loop
    over the steps scoring each, and a linear-chain CRF (``L.CRF1d``) of
    the scores and the tags' rows, on batches of 2 to 64 sentences of 5 to
    40 words (time-major ids and tags)."""
    import chainer
    import chainer.functions as F
    import chainer.links as L
    import numpy

    class Tagger(chainer.Chain):
        def __init__(self):
            super(Tagger, self).__init__()
            with self.init_scope():
                self.embed = L.EmbedID(VOCABULARY, I)
                self.x2h = L.Linear(I, 4 * H)
                self.h2h = L.Linear(H, 4 * H, nobias=True)
                self.out = L.Linear(H, 8)
                self.crf = L.CRF1d(8)

        def forward(self, ids, tags):
            h = c = self.xp.zeros((ids.shape[1], H), numpy.float32)
            scores = []
            for x in self.embed(ids):
                c, h = F.lstm(c, self.x2h(x) + self.h2h(h))
                scores.append(self.out(h))
            return self.crf(scores, F.separate(tags))

    def batch(rng):
        shape = (rng.randint(5, 41), rng.randint(2, 65))
        return (rng.randint(0, VOCABULARY, shape).astype(numpy.int32),
                rng.randint(0, 8, shape).astype(numpy.int32))
    return _loss_training(Tagger, batch, lambda m: m.crf.cost.grad, {})


def _padded_rnn_training():
    """An RNN written by hand over lists of 2 to 64 sentences of 1 to 60
    words padded into a block (``F.pad_sequence``), its state kept where a
    sentence has ended (``lengths > t``), classified by its last state."""
    import chainer
    import chainer.functions as F
    import chainer.links as L
    import numpy

    class PaddedRNN(chainer.Chain):
        def __init__(self):
            super(PaddedRNN, self).__init__()
            with self.init_scope():
                self.embed = L.EmbedID(VOCABULARY, I, ignore_label=-1)
                self.x2h = L.Linear(I, H)
                self.h2h = L.Linear(H, H, nobias=True)
                self.out = L.Linear(H, 5)

        def forward(self, xs, t):
            lengths = self.xp.array([len(x) for x in xs], numpy.int32)
            block = F.pad_sequence(xs, padding=-1)
            e = self.embed(block)
            h = self.xp.zeros((len(xs), H), numpy.float32)
            for k in range(block.shape[1]):
                h_new = F.tanh(self.x2h(e[:, k]) + self.h2h(h))
                keep = self.xp.broadcast_to((lengths > k)[:, None],
                                            h_new.shape)
                h = F.where(keep, h_new, h)
            return F.softmax_cross_entropy(self.out(h), t)

    def batch(rng):
        size = rng.randint(2, 65)
        return ([rng.randint(0, VOCABULARY, rng.randint(1, 61)).astype(
            numpy.int32) for _ in range(size)],
            rng.randint(0, 5, size).astype(numpy.int32))
    return _loss_training(PaddedRNN, batch, lambda m: m.x2h.W.grad, {})


def _rnn_text_training(each=False, pooled=False, functional=False):
    """Chainer's RNN text classifier (its ``sequence_embed``: the sentences
    joined, embedded, dropped out and cut at their offsets; a one-layer
    ``L.NStepLSTM`` over them; its last state dropped out, through a
    linear layer) on lists of 2 to 64 sentences of 1 to 60 words.
    ``each``: each sentence embedded on its own (``[self.embed(x) for x
    in xs]``), as the N-step links' documentation writes it; ``pooled``:
    the maximum over each sentence's outputs instead of the last state;
    ``functional``: ``F.n_step_lstm`` with the link's weights on
    ``F.transpose_sequence`` of the sentences, given sorted by length."""
    import chainer
    import chainer.functions as F
    import chainer.links as L
    import numpy

    from benchmarks.bench_programs import sequence_embed

    class RNNText(chainer.Chain):
        def __init__(self):
            super(RNNText, self).__init__()
            with self.init_scope():
                self.embed = L.EmbedID(5000, 128)
                self.encoder = L.NStepLSTM(1, 128, 128, 0.1)
                self.l2 = L.Linear(128, 5)

        def forward(self, xs, t):
            exs = [self.embed(x) for x in xs] if each else \
                sequence_embed(self.embed, xs, 0.1)
            if functional:
                hx = self.xp.zeros((1, len(xs), 128), numpy.float32)
                last_h, _, ys = F.n_step_lstm(
                    1, 0.1, hx, hx, self.encoder.ws, self.encoder.bs,
                    F.transpose_sequence(exs))
                return self.classify(last_h, F.transpose_sequence(ys), t)
            last_h, last_c, ys = self.encoder(None, None, exs)
            return self.classify(last_h, ys, t)

        def classify(self, last_h, ys, t):
            h = F.stack([F.max(y, axis=0) for y in ys]) if pooled else \
                last_h[-1]
            h = F.dropout(h, ratio=0.1)
            return F.softmax_cross_entropy(self.l2(h), t)

    def sentences(rng):
        size = rng.randint(2, 65)
        lengths = rng.randint(1, 61, size)
        if functional:
            lengths = numpy.sort(lengths)[::-1]
        return ([rng.randint(0, 5000, n).astype(numpy.int32)
                 for n in lengths],
                rng.randint(0, 5, size).astype(numpy.int32))
    return _loss_training(RNNText, sentences, lambda m: m.l2.W.grad, {})


def _sorting_tagger_training():
    """A tagger over Chainer's functional ``F.n_step_lstm``, which takes
    sentences sorted by decreasing length, given lists in any order: the
    forward sorts the sentences and their tags together (``sorted(zip(xs,
    ts), key=lambda p: len(p[0]), reverse=True)``), embeds them as
    Chainer's examples do, and scores every word; lists of 2 to 64
    sentences of 1 to 60 words."""
    import chainer
    import chainer.functions as F
    import chainer.links as L
    import numpy

    from benchmarks.bench_programs import sequence_embed

    class SortingTagger(chainer.Chain):
        def __init__(self):
            super(SortingTagger, self).__init__()
            with self.init_scope():
                self.embed = L.EmbedID(5000, 64)
                self.encoder = L.NStepLSTM(1, 64, 64, 0.1)
                self.out = L.Linear(64, 12)

        def forward(self, xs, ts):
            pairs = sorted(zip(xs, ts), key=lambda p: len(p[0]),
                           reverse=True)
            xs, ts = [x for x, _ in pairs], [t for _, t in pairs]
            hx = self.xp.zeros((1, len(xs), 64), numpy.float32)
            _, _, ys = F.n_step_lstm(
                1, 0.1, hx, hx, self.encoder.ws, self.encoder.bs,
                F.transpose_sequence(sequence_embed(self.embed, xs, 0.1)))
            scores = self.out(F.concat(F.transpose_sequence(ys), axis=0))
            return F.softmax_cross_entropy(scores, F.concat(ts, axis=0))

    def sentences(rng):
        lengths = rng.randint(1, 61, rng.randint(2, 65))
        return ([rng.randint(0, 5000, n).astype(numpy.int32)
                 for n in lengths],
                [rng.randint(0, 12, n).astype(numpy.int32) for n in lengths])
    return _loss_training(SortingTagger, sentences, lambda m: m.out.W.grad,
                          {})


def _rnn_tagger_training(summed=False, padded=False):
    """A tag for each word as scripts write it: each sentence embedded on
    its own, a bidirectional ``L.NStepBiLSTM``, each output sequence
    scored on its own (``[self.out(y) for y in ys]``), the tags joined by
    NumPy for the loss (``xp.concatenate(ts)``) and by ``F.concat`` for
    the accuracy reported, on lists of 2 to 64 sentences of 1 to 60
    words; ``summed``, each sentence's loss and accuracy added up in a
    loop over the sentences and their tags instead; ``padded``, the
    outputs padded into a block whose rows a reshape of its shape read in
    Python merges (``B, T = h.shape[:2]``, ``F.reshape(h, (B * T, H))``),
    scored against the tags padded with -1 and flattened
    (``ignore_label=-1``)."""
    import chainer
    import chainer.functions as F
    import chainer.links as L
    import numpy

    class RNNTagger(chainer.Chain):
        def __init__(self):
            super(RNNTagger, self).__init__()
            with self.init_scope():
                self.embed = L.EmbedID(5000, 64)
                self.encoder = L.NStepBiLSTM(1, 64, 64, 0.1)
                self.out = L.Linear(128, 12)

        def forward(self, xs, ts):
            _, _, ys = self.encoder(None, None, [self.embed(x) for x in xs])
            scores = F.concat([self.out(y) for y in ys], axis=0)
            chainer.report({'accuracy': F.accuracy(
                scores, F.concat(ts, axis=0))}, self)
            return F.softmax_cross_entropy(scores, self.xp.concatenate(ts))

    class SummedTagger(RNNTagger):
        def forward(self, xs, ts):
            _, _, ys = self.encoder(None, None, [self.embed(x) for x in xs])
            loss, accuracy = 0, 0
            for y, t in zip(ys, ts):
                scores = self.out(y)
                loss += F.softmax_cross_entropy(scores, t)
                accuracy += F.accuracy(scores, t)
            chainer.report({'accuracy': accuracy / len(xs)}, self)
            return loss / len(xs)

    class PaddedTagger(RNNTagger):
        def forward(self, xs, ts):
            _, _, ys = self.encoder(None, None, [self.embed(x) for x in xs])
            h = F.pad_sequence(ys)
            batch, width = h.shape[:2]
            scores = self.out(F.reshape(h, (batch * width, -1)))
            tags = F.pad_sequence(ts, padding=-1).array.reshape(-1)
            chainer.report({'accuracy': F.accuracy(
                scores, tags, ignore_label=-1)}, self)
            return F.softmax_cross_entropy(scores, tags, ignore_label=-1)

    def sentences(rng):
        lengths = rng.randint(1, 61, rng.randint(2, 65))
        return ([rng.randint(0, 5000, n).astype(numpy.int32)
                 for n in lengths],
                [rng.randint(0, 12, n).astype(numpy.int32) for n in lengths])
    return _loss_training(PaddedTagger if padded else SummedTagger if summed
                          else RNNTagger, sentences, lambda m: m.out.W.grad,
                          {})


def _teacher_forced_training():
    """An attention decoder over lists of 2 to 64 sentence pairs of 1 to
    60 source and 1 to 30 target words, the targets padded in the forward
    (``F.pad_sequence(ys, padding=-1)``), a step per target position fed
    the last target word (``targets.array[:, t]``), the attention masked
    past each source's end."""
    import chainer
    import chainer.functions as F
    import chainer.links as L
    import numpy

    from benchmarks.bench_programs import sequence_embed

    class TeacherForced(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.embed = L.EmbedID(1000, 32, ignore_label=-1)
                self.encoder = L.NStepGRU(1, 32, 64, 0.1)
                self.decoder = L.LSTM(32 + 64, 64)
                self.query = L.Linear(64, 64, nobias=True)
                self.words = L.Linear(128, 1000)

        def forward(self, xs, ys):
            xp = self.xp
            _, hs = self.encoder(None, sequence_embed(self.embed, xs))
            enc = F.pad_sequence(hs)
            lengths = xp.array([len(x) for x in xs])
            mask = xp.arange(enc.shape[1])[None, :] < lengths[:, None]
            targets = F.pad_sequence(ys, padding=-1)
            self.decoder.reset_state()
            context = chainer.Variable(xp.zeros((len(xs), 64), 'f'))
            loss, previous = 0, xp.zeros((len(xs),), numpy.int32)
            for t in range(targets.shape[1]):
                h = self.decoder(F.concat([self.embed(previous), context]))
                scores = F.squeeze(F.matmul(enc, F.expand_dims(
                    self.query(h), 2)), 2)
                scores = F.where(mask, scores, xp.full(
                    scores.shape, -1e9, scores.dtype))
                weights = F.softmax(scores)[:, :, None]
                context = F.sum(enc * F.broadcast_to(weights, enc.shape),
                                axis=1)
                loss += F.softmax_cross_entropy(
                    self.words(F.concat([h, context])), targets[:, t],
                    ignore_label=-1)
                previous = xp.maximum(targets.array[:, t], 0)
            return loss

    def pairs(rng):
        size = rng.randint(2, 65)
        return ([rng.randint(0, 1000, rng.randint(1, 61)).astype(
            numpy.int32) for _ in range(size)],
                [rng.randint(0, 1000, rng.randint(1, 31)).astype(
                    numpy.int32) for _ in range(size)])
    return _loss_training(TeacherForced, pairs, lambda m: m.query.W.grad,
                          {})


def _seq2seq_example_training():
    """Chainer's seq2seq example's model as it is written (its sources
    reversed and its targets framed by the end-of-sentence id item by
    item, three-layer ``L.NStepLSTM`` encoder and decoder with dropout,
    its perplexity reported) on lists of 2 to 64 sentence pairs of 1 to
    60 words each."""
    import numpy

    from benchmarks.bench_programs import models

    def make():
        return models()[6](words=1000, units=64)

    def pairs(rng):
        size = rng.randint(2, 65)
        return tuple([rng.randint(1, 1000, rng.randint(1, 61)).astype(
            numpy.int32) for _ in range(size)] for _ in 'xy')
    return _loss_training(make, pairs, lambda m: m.W.W.grad, {})


def _attention_seq2seq_training(masked=False):
    """An N-step LSTM encoder over lists of 2 to 64 sentences of 1 to 60
    words, its outputs padded (``F.pad_sequence``), and an ``L.LSTM``
    decoder with Luong attention over them, a step per target word
    (targets padded with -1, 1 to 30 steps); with ``masked``, the
    attention masked past each sentence's end by the lengths read in
    Python."""
    import chainer
    import chainer.functions as F
    import chainer.links as L
    import numpy

    from benchmarks.bench_programs import sequence_embed

    class Attention(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.embed = L.EmbedID(1000, 32)
                self.encoder = L.NStepLSTM(1, 32, 64, 0.1)
                self.target = L.EmbedID(1000, 32, ignore_label=-1)
                self.decoder = L.LSTM(32 + 64, 64)
                self.query = L.Linear(64, 64)
                self.words = L.Linear(64, 1000)

        def forward(self, xs, ys):
            hy, _, enc = self.encoder(None, None,
                                      sequence_embed(self.embed, xs))
            enc = F.pad_sequence(enc)
            xp = self.xp
            if masked:  # past each sentence's end
                lengths = xp.array([len(x) for x in xs])
                valid = (xp.arange(enc.shape[1])[None, :] <
                         lengths[:, None])[:, :, None]
            self.decoder.reset_state()
            context, loss = hy[-1], 0
            for y in F.separate(ys, axis=1):
                h = self.decoder(F.concat((self.target(y), context), axis=1))
                scores = F.matmul(enc, F.expand_dims(self.query(h), 2))
                if masked:
                    scores = F.where(valid, scores, xp.full(
                        scores.shape, -1e9, scores.dtype))
                weights = F.softmax(scores, axis=1)
                context = F.sum(enc * F.broadcast_to(weights, enc.shape),
                                axis=1)
                loss += F.softmax_cross_entropy(self.words(h + context), y,
                                                ignore_label=-1)
            return loss

    def pairs(rng):
        size, steps = rng.randint(2, 65), rng.randint(1, 31)
        ys = rng.randint(0, 1000, (size, steps)).astype(numpy.int32)
        for row, end in zip(ys, rng.randint(1, steps + 1, size)):
            row[end:] = -1
        return [rng.randint(0, 1000, rng.randint(1, 61)).astype(numpy.int32)
                for _ in range(size)], ys
    return _loss_training(Attention, pairs, lambda m: m.query.W.grad, {})


def _transformer_step_training():
    """A transformer's training step as such scripts write it, on lists of
    2 to 64 sentence pairs of 1 to 60 words: the sources padded by
    ``concat_examples``, the targets framed by a first and a last word
    (``xp.concatenate``) and padded, the targets attending to the sources
    (masked past each source's end), the target block merged with the
    batch for the words' scores and the loss."""
    import chainer
    import chainer.functions as F
    import chainer.links as L
    import numpy

    class Step(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.source = L.EmbedID(1000, 64, ignore_label=-1)
                self.target = L.EmbedID(1000, 64, ignore_label=-1)
                self.query = L.Linear(64, 64)
                self.words = L.Linear(64, 1000)

        def forward(self, xs, ys):
            xp, pad = self.xp, chainer.dataset.convert.concat_examples
            bos, eos = xp.array([1], numpy.int32), xp.array([0], numpy.int32)
            x_block = pad(xs, padding=-1)
            y_in = pad([xp.concatenate([bos, y]) for y in ys], padding=-1)
            y_out = pad([xp.concatenate([y, eos]) for y in ys], padding=-1)
            hx, hy = self.source(x_block), self.target(y_in)
            scores = F.matmul(self.query(hy, n_batch_axes=2), hx,
                              transb=True)
            scores = F.where(F.broadcast_to(
                (x_block >= 0)[:, None, :], scores.shape), scores,
                xp.full(scores.shape, -1e9, numpy.float32))
            h = F.matmul(F.softmax(scores, axis=2), hx) + hy
            return F.softmax_cross_entropy(
                self.words(F.reshape(h, (-1, 64))), y_out.reshape(-1))

    def pairs(rng):
        size = rng.randint(2, 65)
        return tuple([rng.randint(2, 1000, rng.randint(1, 61)).astype(
            numpy.int32) for _ in range(size)] for _ in 'xy')
    return _loss_training(Step, pairs, lambda m: m.query.W.grad, {})


def _causal_lm_training():
    """A causal transformer language model's training step on padded
    batches of 2 to 64 sentences of 5 to 60 tokens (ids, ``-1`` past
    each end): the inputs and the targets cut from the ids (``x[:, :-1]``,
    ``x[:, 1:]``), whose sizes the forward reads of the inputs; positions
    ``xp.arange(T)``, a causal mask ``xp.tri(T)`` and the padding's, the
    block's rows merged for the words' scores."""
    import chainer
    import chainer.functions as F
    import chainer.links as L
    import numpy

    class LM(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.embed = L.EmbedID(1000, 64, ignore_label=-1)
                self.positions = L.EmbedID(64, 64)
                self.qkv = L.Linear(64, 3 * 64)
                self.words = L.Linear(64, 1000)

        def forward(self, ids):
            xp = self.xp
            inputs, targets = ids[:, :-1], ids[:, 1:]
            batch, steps = inputs.shape
            h = self.embed(inputs) + F.broadcast_to(self.positions(
                xp.arange(steps, dtype=numpy.int32)), (batch, steps, 64))
            q, k, v = F.split_axis(self.qkv(h, n_batch_axes=2), 3, axis=2)
            scores = F.matmul(q, k, transb=True) * (1 / 8.0)
            seen = xp.tri(steps, dtype=bool)[None] & (inputs >= 0)[:, None]
            scores = F.where(F.broadcast_to(seen, scores.shape).array,
                             scores,
                             xp.full(scores.shape, -1e9, numpy.float32))
            h = h + F.matmul(F.softmax(scores, axis=2), v)
            return F.softmax_cross_entropy(
                self.words(F.reshape(h, (batch * steps, 64))),
                targets.reshape(-1))

    def ids(rng):
        batch, width = rng.randint(2, 65), rng.randint(5, 61)
        lengths = rng.randint(2, width + 1, size=batch)
        lengths[0] = width
        x = rng.randint(0, 1000, (batch, width)).astype(numpy.int32)
        x[numpy.arange(width)[None] >= lengths[:, None]] = -1
        return x,
    return _loss_training(LM, ids, lambda m: m.qkv.W.grad, {})


def _transposed_by_hand_training():
    """``L.LSTM`` over ``F.transpose_sequence`` of lists of 2 to 16
    sentences of 2 to 30 words, sorted by length, its outputs transposed
    back: a loop whose batch shrinks, which chainerjit does not compile
    whole (it runs the links compiled, until their entries stop paying
    back)."""
    import chainer
    import chainer.functions as F
    import chainer.links as L
    import numpy

    class Transposed(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.embed = L.EmbedID(1000, 32)
                self.lstm = L.LSTM(32, 64)
                self.out = L.Linear(64, 5)

        def forward(self, xs):
            self.lstm.reset_state()
            steps = F.transpose_sequence([self.embed(x) for x in xs])
            hs = F.transpose_sequence([self.lstm(x) for x in steps])
            return F.sum(self.out(F.concat(hs, axis=0)))

    def sentences(rng):
        lengths = sorted(rng.randint(2, 31, rng.randint(2, 17)),
                         reverse=True)
        return [rng.randint(0, 1000, n).astype(numpy.int32)
                for n in lengths],
    return _loss_training(Transposed, sentences, lambda m: m.out.W.grad,
                          {})


def workloads():
    import numpy

    from examples import models
    LSTM, BiLSTM, BatchFirst, EncoderClassifier, Seq2Seq, LanguageModel, \
        BiLSTMJoined, AttentionSeq2Seq, LazyLSTM = _lstm_models()
    mlp = (models.MLP, lambda rng, b: rng.randn(b, 784).astype(
        numpy.float32))
    block = (models.EncoderBlock, lambda rng, b: rng.randn(
        b, 5, 16).astype(numpy.float32))
    return [
        ('serving an MLP, batches 1 to 64', 'chainerjit',
         _serving(*mlp, jit_options={})),
        ('serving an MLP, batches 1 to 64', 'chainerjit dynamic=False',
         _serving(*mlp, jit_options=dict(dynamic=False))),
        ('serving an MLP, batches 1 to 64', 'chainerjit backend=numpy',
         _serving(*mlp, jit_options=dict(backend='numpy'))),
        ('MLP training, batches 1 to 64', 'chainerjit',
         _classifier_training(jit_options={})),
        ('MLP training, batches 1 to 64', 'chainerjit dynamic=False',
         _classifier_training(jit_options=dict(dynamic=False))),
        ('bag-of-words training, padded batches 5 to 60 words wide',
         'chainerjit', _padded_text_training()),
        ('bag-of-words training, padded batches of 2 to 64 sentences 5 to '
         '60 words wide', 'chainerjit', _padded_text_training(True)),
        ('text CNN training, padded batches of 2 to 64 sentences 5 to 60 '
         'words wide', 'chainerjit', _padded_text_training(True, True)),
        ('bag-of-words training, lists of 2 to 64 sentences of 1 to 60 '
         'words', 'chainerjit', _padded_text_training(True, listed=True)),
        ('bag of words written by hand (each sentence averaged, stacked), '
         'lists of 2 to 64 sentences of 1 to 60 words', 'chainerjit',
         _padded_text_training(True, listed=True, by_hand=True)),
        ('text CNN training, lists of 2 to 64 sentences of 1 to 60 words',
         'chainerjit', _padded_text_training(True, True, True)),
        ('RNN text classifier training, lists of 2 to 64 sentences of 1 '
         'to 60 words', 'chainerjit', _rnn_text_training()),
        ('RNN text classifier training, each sentence embedded, lists of 2 '
         'to 64 sentences of 1 to 60 words', 'chainerjit',
         _rnn_text_training(each=True)),
        ('RNN text classifier training, max pooling over the words, lists '
         'of 2 to 64 sentences of 1 to 60 words', 'chainerjit',
         _rnn_text_training(pooled=True)),
        ('RNN text classifier training, F.n_step_lstm on transposed sorted '
         'lists of 2 to 64 sentences of 1 to 60 words', 'chainerjit',
         _rnn_text_training(each=True, functional=True)),
        ('tagger training, F.n_step_lstm on lists the forward sorts by '
         'length with their tags, 2 to 64 sentences of 1 to 60 words',
         'chainerjit', _sorting_tagger_training()),
        ('bidirectional RNN tagger training, each output scored, tags '
         'joined by NumPy, lists of 2 to 64 sentences of 1 to 60 words',
         'chainerjit', _rnn_tagger_training()),
        ("bidirectional RNN tagger training, each sentence's loss and "
         'accuracy added up in a loop, lists of 2 to 64 sentences of 1 to '
         '60 words', 'chainerjit', _rnn_tagger_training(summed=True)),
        ('tagger training, the padded block of its outputs merged into '
         'rows and scored against tags padded with -1, lists of 2 to 64 '
         'sentences of 1 to 60 words', 'chainerjit',
         _rnn_tagger_training(padded=True)),
        ("Chainer's seq2seq example training, lists of 2 to 64 sentence "
         'pairs of 1 to 60 words', 'chainerjit',
         _seq2seq_example_training()),
        ('attention decoder training, targets padded in the forward and '
         'fed back word by word, lists of 2 to 64 sentence pairs of 1 to '
         '60 and 1 to 30 words', 'chainerjit', _teacher_forced_training()),
        ('attention seq2seq training, lists of 2 to 64 sentences of 1 to '
         '60 words, 1 to 30 target steps', 'chainerjit',
         _attention_seq2seq_training()),
        ('attention seq2seq training, masked past each sentence\'s end, '
         'lists of 2 to 64 sentences of 1 to 60 words, 1 to 30 target '
         'steps', 'chainerjit', _attention_seq2seq_training(masked=True)),
        ("a transformer's training step, sources padded and targets framed "
         'and padded, lists of 2 to 64 sentence pairs of 1 to 60 words',
         'chainerjit', _transformer_step_training()),
        ('causal transformer LM training, inputs and targets cut from '
         'padded ids, batches of 2 to 64 sentences of 5 to 60 tokens',
         'chainerjit', _causal_lm_training()),
        ('RNN written by hand over padded lists of 2 to 64 sentences of 1 '
         'to 60 words, masked by their lengths', 'chainerjit',
         _padded_rnn_training()),
        ('L.LSTM over F.transpose_sequence of lists of 2 to 16 sentences '
         'of 2 to 30 words', 'chainerjit', _transposed_by_hand_training()),
        ('LSTM-CRF tagger training, lengths 5 to 40, batches 2 to 64',
         'chainerjit', _tagger_training()),
        ("Chainer's POS tagging example training, lists of 30 sentences of "
         '2 to 40 words', 'chainerjit', _pos_tagger_training()),
        ("Chainer's POS tagging example's step as written, lists of 2 to 30 "
         'sentences of 1 to 40 words', 'chainerjit',
         _pos_tagger_training(as_written=True)),
        ('serving a transformer block, batches 1 to 64', 'chainerjit',
         _serving(*block, jit_options={})),
        ('serving a transformer block, batches 1 to 64',
         'chainerjit dynamic=False',
         _serving(*block, jit_options=dict(dynamic=False))),
        ('serving a transformer block, padded batches of 1 to 64 sentences '
         'of 5 to 60 tokens, masked', 'chainerjit',
         _serving(models.EncoderBlock, _padded_tokens, jit_options={})),
        ('transformer block training, padded batches of 2 to 64 sentences '
         'of 5 to 60 tokens, masked', 'chainerjit', _block_training()),
        ('LSTM training, lengths 5 to 40', 'chainerjit',
         _training(LSTM, _steps())),
        ('bidirectional LSTM training, lengths 5 to 40', 'chainerjit',
         _training(BiLSTM, _steps())),
        ('LSTM training, lengths 5 to 40, batches 2 to 64', 'chainerjit',
         _training(LSTM, _steps(batches=True))),
        ('LSTM training, lengths 1 to 40, batches 1 to 64', 'chainerjit',
         _training(LSTM, _steps(batches=True, shortest=1, fewest=1))),
        ('LSTM with its state made at the first step training, lengths 1 '
         'to 40, batches 1 to 64', 'chainerjit',
         _training(LazyLSTM, _steps(batches=True, shortest=1, fewest=1))),
        ('batch-first LSTM training, batches 2 to 64, lengths 5 to 40',
         'chainerjit', _training(BatchFirst, _steps(batch_first=True))),
        ('encoder sub-chain training, steps averaged, lengths 5 to 60, '
         'batches 2 to 64', 'chainerjit',
         _training(EncoderClassifier, _steps(batches=True, longest=60))),
        ('sequence to sequence training, source and target lengths 5 to '
         '60, batches 2 to 64', 'chainerjit',
         _training(Seq2Seq, _source_and_target)),
        ('RNN language model training, word ids embedded at once, all '
         'steps projected, lengths 5 to 60, batches 2 to 64', 'chainerjit',
         _training(LanguageModel, _words_and_targets)),
        ('bidirectional LSTM training, the directions joined step by step, '
         'lengths 5 to 40, batches 2 to 64', 'chainerjit',
         _training(BiLSTMJoined, _steps(batches=True))),
        ('attention decoder training, written step by step, source and '
         'target lengths 5 to 60, batches 2 to 64', 'chainerjit',
         _training(AttentionSeq2Seq, _source_and_target)),
    ]


def _median(values):
    values = sorted(values)
    return values[len(values) // 2]


def main(argv=None):
    args = parse_args(argv)
    info = timing.start(args.threads)
    import numpy
    warnings.simplefilter('ignore')
    rows = []
    eager_runs = {}
    for name, system, run in workloads():
        if args.only and not any(name.startswith(p) for p in args.only):
            continue
        if name not in eager_runs:
            eager_runs[name] = run(False, args.calls, 0)
        eager_times, eager_results, _ = eager_runs[name]
        times, results, entries = run(True, args.calls, 0)
        for k, (a, e) in enumerate(zip(results, eager_results)):
            # (within the rounding of the largest value: a gradient summed
            # over thousands of rows rounds its near-zero entries so)
            scale = max(1.0, float(numpy.abs(e).max()))
            if not numpy.allclose(a, e, rtol=1e-4, atol=1e-5 * scale):
                raise AssertionError('%s, %s: call %d differs from eager '
                                     'by %g' % (name, system, k, abs(
                                         a - e).max()))
        half = args.calls // 2
        rows.append((name, system, sum(eager_times), sum(times),
                     _median(eager_times[half:]), _median(times[half:]),
                     entries))
        print('%-46s %-26s total %.2fs vs eager %.2fs; entries %d' % (
            name, system, sum(times), sum(eager_times), entries))
    timing.publish(_report(info, args, rows), args.output)
    return rows


def _report(info, args, rows):
    lines = [
        '# Calls whose shapes change',
        '',
        'Made by `benchmarks/bench_shapes.py --calls %d` on %s (%s; %s; '
        'NumPy %s, Chainer %s), %s. Every call\'s result was checked '
        'against eager\'s.' % (args.calls, info['machine'], info['threads'],
                               info['blas'], info['numpy'], info['chainer'],
                               info['date']),
        '',
        'Total: the whole sequence of calls, recordings and compiles '
        'included (the first call at each new size also runs eagerly, as '
        'the check that the program serves that size). Per call: the '
        'median over the second half of the calls.',
        '',
        '| workload | chainerjit | total eager | total jit | jit/eager '
        '| per call eager | per call jit | entries |',
        '| --- | --- | --- | --- | --- | --- | --- | --- |',
    ]
    for name, system, eager, jit, eager_call, jit_call, entries in rows:
        lines.append('| %s | %s | %.2f s | %.2f s | %.2f | %.2f ms | '
                     '%.2f ms | %d |' % (
                         name, system.replace('chainerjit', '').strip()
                         or 'default', eager, jit, jit / eager,
                         eager_call * 1e3, jit_call * 1e3, entries))
    return '\n'.join(lines) + '\n'


if __name__ == '__main__':
    main()
