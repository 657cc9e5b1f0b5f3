"""Forwards over two sequences of lengths of their own (an encoder over
the source, a decoder over the target): each length is a symbol of its
own (``T``, ``U``), so one entry serves every pair of lengths, and every
batch size; outputs and gradients equal eager Chainer's at each call,
with new values. A length that cannot be symbolic stays in the key, with
a warning, while the other is.
"""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from tests.frontend_tests.test_loop_lengths_in_helpers import _grads_match
from tests.frontend_tests.test_loop_lengths_in_helpers import _twins


I, H = 6, 8
# (source length, target length, batch)
SIZES = ((5, 4, 3), (7, 6, 3), (9, 3, 3), (4, 8, 5), (7, 4, 3),
         (11, 9, 4), (6, 6, 2))


class Seq2Seq(chainer.Chain):
    def __init__(self):
        super(Seq2Seq, self).__init__()
        with self.init_scope():
            self.enc = L.Linear(I, 4 * H)
            self.enc_h = L.Linear(H, 4 * H, nobias=True)
            self.dec = L.Linear(I, 4 * H)
            self.dec_h = L.Linear(H, 4 * H, nobias=True)
            self.out = L.Linear(H, 5)

    def forward(self, xs, ys):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for x in xs:
            c, h = F.lstm(c, self.enc(x) + self.enc_h(h))
        return self.decode(ys, h, c)

    def decode(self, ys, h, c):
        loss = 0
        for t in range(len(ys) - 1):
            c, h = F.lstm(c, self.dec(ys[t]) + self.dec_h(h))
            loss = loss + F.sum(self.out(h) * ys[t + 1][:, :5])
        return loss / len(ys)


class OutputsStacked(Seq2Seq):
    """The decoder's outputs stacked and averaged; the source read
    backwards."""

    def forward(self, xs, ys):
        T, batch, _ = xs.shape
        h = c = self.xp.zeros((batch, H), numpy.float32)
        for t in reversed(range(T)):
            c, h = F.lstm(c, self.enc(xs[t]) + self.enc_h(h))
        outs = []
        for y in ys:
            c, h = F.lstm(c, self.dec(y) + self.dec_h(h))
            outs.append(self.out(h))
        return F.mean(F.stack(outs), axis=0)


class Attended(Seq2Seq):
    """An attention decoder: at each target step, the encoder's states
    of every source step scored against the decoder's state, and their
    weighed sum added to it (the encoder's steps read whole by the
    decoder's loop)."""

    def forward(self, xs, ys):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        states = []
        for x in xs:
            c, h = F.lstm(c, self.enc(x) + self.enc_h(h))
            states.append(h)
        enc = F.stack(states)
        loss = 0
        for y in ys:
            scores = F.sum(enc * F.broadcast_to(h, enc.shape), axis=2)
            weights = F.expand_dims(F.softmax(scores, axis=0), 2)
            context = F.sum(enc * F.broadcast_to(weights, enc.shape), axis=0)
            c, h = F.lstm(c, self.dec(y) + self.dec_h(h + context))
            loss = loss + F.sum(self.out(h))
        return loss


class AttendedBatchFirst(Seq2Seq):
    """The same over batch-first sequences, the scores a batched matrix
    product."""

    def forward(self, xs, ys):
        xs, ys = F.transpose(xs, (1, 0, 2)), F.transpose(ys, (1, 0, 2))
        batch, steps, _ = xs.shape
        h = c = self.xp.zeros((batch, H), numpy.float32)
        states = []
        for t in range(steps):
            c, h = F.lstm(c, self.enc(xs[:, t]) + self.enc_h(h))
            states.append(h)
        enc = F.stack(states, axis=1)
        outs = []
        for u in range(ys.shape[1]):
            weights = F.softmax(F.matmul(enc, F.expand_dims(h, 2)), axis=1)
            context = F.sum(enc * F.broadcast_to(weights, enc.shape), axis=1)
            c, h = F.lstm(c, self.dec(ys[:, u]) + self.dec_h(h + context))
            outs.append(self.out(h))
        return F.stack(outs, axis=1)


class SourceLengthUsed(Seq2Seq):
    """The source's length in Python (a float): it stays in the key; the
    target's stays symbolic."""

    def forward(self, xs, ys):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        for x in xs:
            c, h = F.lstm(c, self.enc(x) + self.enc_h(h))
        return self.decode(ys, h * (1.0 / float(xs.shape[0])), c)


def _calls(sizes=SIZES, seed=0):
    rng = numpy.random.RandomState(seed)
    return [(rng.standard_normal((t, b, I)).astype(numpy.float32),
             rng.standard_normal((u, b, I)).astype(numpy.float32))
            for t, u, b in sizes]


def _matches_eager(model, twin, calls):
    """The jitted ``twin`` gives ``model``'s outputs and gradients at each
    of ``calls``, sent to the models' device."""
    jitted = chainerjit.jit(twin)
    for xs, ys in calls:
        xs, ys = model.device.send((xs, ys))
        model.cleargrads()
        twin.cleargrads()
        expected, actual = model(xs, ys), jitted(xs, ys)
        testing.assert_results_equal(actual, expected, 1e-5, 1e-6)
        F.sum(expected).backward()
        F.sum(actual).backward()
        _grads_match(model, twin)
    return jitted


@pytest.mark.parametrize('cls', [Seq2Seq, OutputsStacked, Attended,
                                 AttendedBatchFirst])
def test_one_entry_for_every_pair_of_lengths_and_batch_size(cls):
    with warnings.catch_warnings():
        warnings.simplefilter('error', errors.LoopWarning)
        jitted = _matches_eager(*_twins(cls), _calls())
    assert jitted.cache_info().currsize == 1, jitted.cache_report()
    entry, = jitted.cache_entries()
    signature = str(entry.signature)
    assert 'xs: f32[T,B,6]' in signature and 'ys: f32[U,B,6]' in signature, \
        signature
    assert jitted.cache_info().hits >= 3


def test_each_length_and_their_sum_and_difference_are_checked():
    # New pairs of lengths seen before one by one are checked again where
    # their sum or difference is new as a batch size would be (a number
    # of both in Python, ``t + u`` of two loops' counters, is in no key);
    # the pairs seen are not.
    jitted = _matches_eager(*_twins(Seq2Seq), _calls(
        ((5, 4, 3), (7, 6, 3), (5, 6, 3), (7, 4, 3), (5, 4, 3),
         (7, 6, 3))))
    assert jitted.cache_info().hits == 5
    entry, = jitted.cache_entries()
    # (the decoder's loop runs len(ys) - 1 steps, the first before it)
    assert entry.verified_lengths == {
        (0, (5,)), (0, (7,)), (1, (2,)), (1, (4,)), ('sum', 7), ('sum', 9),
        ('sum', 11), ('difference', 1), ('difference', 3),
        ('difference', 5)}, entry.verified_lengths


class _CountersAdded(Seq2Seq):
    """The loss divided by the steps of both loops, counted in Python
    after them (``t + u``)."""

    def forward(self, xs, ys):
        h = c = self.xp.zeros((xs.shape[1], H), numpy.float32)
        t = 0
        while t < len(xs):
            c, h = F.lstm(c, self.enc(xs[t]) + self.enc_h(h))
            t += 1
        loss, u = 0, 0
        while u < len(ys):
            c, h = F.lstm(c, self.dec(ys[u]) + self.dec_h(h))
            loss = loss + F.sum(self.out(h))
            u += 1
        return loss / (t + u)


def test_a_number_of_both_lengths_is_caught_at_a_new_sum():
    # (the sums are 10 at every call checked one length at a time)
    pairs = [(4, 6), (6, 4), (3, 7), (7, 3)] * 3 + [(4, 4), (6, 6), (3, 3)]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        _matches_eager(*_twins(_CountersAdded), _calls(
            tuple((t, u, 2) for t, u in pairs)))


def test_a_length_python_uses_stays_in_the_key_and_the_other_not():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jitted = _matches_eager(*_twins(SourceLengthUsed), _calls(
            ((5, 4, 3), (5, 6, 3), (5, 9, 3), (7, 6, 3), (7, 3, 3))))
    messages = [str(w.message) for w in caught
                if issubclass(w.category, errors.LoopWarning)]
    assert any('converted to float' in m and 'test_two_lengths.py'
               in m for m in messages), messages
    assert jitted.cache_info().currsize == 2, jitted.cache_report()
    assert all('ys: f32[T,3,6]' in str(e.signature)
               for e in jitted.cache_entries())


def test_the_printed_program_names_both_trip_counts():
    jitted = chainerjit.jit(Seq2Seq())
    jitted(*_calls(((5, 4, 3),))[0])
    graph = str(jitted.cache_entries()[0].graph)
    assert 'trip=T' in graph and 'trip=U-2' in graph, graph


@pytest.mark.parametrize('cls', [OutputsStacked, AttendedBatchFirst])
def test_onnx_export_has_both_lengths_dynamic(cls):
    onnxruntime = pytest.importorskip('onnxruntime')
    model = cls()
    jitted = chainerjit.jit(model)
    calls = _calls(((5, 4, 3), (7, 6, 2), (9, 3, 4)), seed=1)
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        for args in calls:
            jitted(*args)
        exported = chainerjit.export_onnx(jitted, calls[0])
        dims = [[d.dim_param or d.dim_value
                 for d in i.type.tensor_type.shape.dim]
                for i in exported.graph.input[:2]]
        assert dims == [['T', 'B', 6], ['U', 'B', 6]], dims
        session = onnxruntime.InferenceSession(
            exported.SerializeToString(),
            providers=['CPUExecutionProvider'])
        for xs, ys in _calls(((12, 2, 5), (3, 9, 2)), seed=2):
            y, = session.run(None, {'xs': xs, 'ys': ys})
            numpy.testing.assert_allclose(y, model(xs, ys).array,
                                          rtol=1e-4, atol=1e-5)


def _five_sequences(a, b, c, d, e):
    total = 0
    for xs in (a, b, c, d, e):
        h = xs[0] * 0
        for x in xs:
            h = F.tanh(x + h)
        total = total + h
    return total


def test_a_fifth_length_stays_in_the_key_with_a_warning():
    rng = numpy.random.RandomState(6)
    calls = [tuple(rng.standard_normal((n + k, 3)).astype(numpy.float32)
                   for k in range(5)) for n in (2, 2, 4)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        jitted = testing.assert_jit_matches_eager(_five_sequences, calls)
    messages = [str(w.message) for w in caught
                if issubclass(w.category, errors.LoopWarning)]
    assert any('has 4 lengths already' in m for m in messages), messages
    signature = str(jitted.cache_entries()[-1].signature)
    assert all(s in signature for s in ('[T,', '[U,', '[V,', '[W,')), \
        signature
