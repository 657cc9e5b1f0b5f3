"""Graph breaks (``frontend.breaks``): a forward that reads a value into
Python runs as compiled pieces around the statement that reads it, that
statement in Python. Each form against eager, outputs and gradients, over
calls with new values; the pieces' calls compiled."""

import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from numpy.testing import assert_array_equal
import pytest

import chainerjit
from chainerjit import errors
from chainerjit.frontend import breaks

from tests import differential


F32 = numpy.float32


class _Base(chainer.Chain):
    def __init__(self, n_in=6, n_h=8, n_out=4):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(n_in, n_h)
            self.l2 = L.Linear(n_h, n_out)
            self.l3 = L.Linear(n_out, n_out)


class Thresholded(_Base):
    """``float()`` of the loss decides a branch."""

    def forward(self, x, t):
        h = F.relu(self.l1(x))
        y = self.l2(h)
        loss = F.softmax_cross_entropy(y, t)
        if float(loss.array) > 1.4:
            loss = loss * 0.5
        z = F.tanh(self.l3(y))
        return loss + F.sum(z) * 0.01


class ItemWeighted(_Base):
    """``.item()`` gives a number the rest computes with."""

    def forward(self, x, t):
        y = self.l2(F.relu(self.l1(x)))
        w = F.sum(y).array.item()
        loss = F.softmax_cross_entropy(y, t)
        return loss * abs(w) + F.sum(self.l3(y)) * 0.1


class TwoBreaks(_Base):
    """Two reads, so the suffix is cut again."""

    def forward(self, x, t):
        y = self.l2(F.relu(self.l1(x)))
        scale = 2.0 if bool(F.sum(y).array > 0) else 0.5
        h = F.tanh(self.l3(y)) * scale
        n = int(F.argmax(F.sum(h, axis=0)).array)
        return F.softmax_cross_entropy(h, t) + h[:, n].array.sum() * 0.0 \
            + F.sum(h[:, n])


class EarlyReturn(_Base):
    """The break statement returns on one side."""

    def forward(self, x, t):
        y = self.l2(F.relu(self.l1(x)))
        loss = F.softmax_cross_entropy(y, t)
        if float(loss.array) > 1.4:
            return loss
        return loss + F.sum(F.tanh(self.l3(y)))


class LoopAround(_Base):
    """A loop before and a loop after the break roll in their pieces."""

    def __init__(self):
        super().__init__(n_in=4, n_h=8, n_out=8)
        with self.init_scope():
            self.rnn = L.LSTM(4, 8)

    def forward(self, xs, t):
        self.rnn.reset_state()
        for x in xs:
            h = self.rnn(x)
        norm = float(F.sum(h * h).array)
        y = h / (norm ** 0.5 + 1)
        for _ in range(3):
            y = F.tanh(self.l3(y))
        return F.softmax_cross_entropy(y, t)


class BreakInLoop(_Base):
    """A read inside a loop body: the loop runs in Python, the rest
    compiled."""

    def forward(self, x, t):
        h = F.relu(self.l1(x))
        y = self.l2(h)
        for _ in range(2):
            if float(F.max(y).array) > 0:
                y = F.tanh(self.l3(y))
        return F.softmax_cross_entropy(y, t)


class Helper(_Base):
    """The read is in a helper method the forward calls."""

    def accuracy(self, y, t):
        return float((y.array.argmax(axis=1) == t).mean())

    def forward(self, x, t):
        y = self.l2(F.relu(self.l1(x)))
        acc = self.accuracy(y, t)
        loss = F.softmax_cross_entropy(y, t)
        chainer.report({'loss': loss, 'accuracy': acc}, self)
        return loss * (2 - acc)


class SuperCall(Thresholded):
    """A zero-argument ``super()`` in a cut forward."""

    def forward(self, x, t):
        loss = super().forward(x, t)
        if float(loss.array) > 1.5:
            loss = loss * 0.25
        h = self.l1(x)
        return loss + F.sum(h * h) * 0.001


class Closure(_Base):
    """A comprehension and a lambda capture names across the break."""

    def forward(self, x, t):
        h = F.relu(self.l1(x))
        scale = F.sum(h).array
        ys = [self.l2(h * k) for k in (1, 2)]
        if float(scale) > 1:
            ys = ys[::-1]
        act = lambda v: F.tanh(v) * 2  # noqa: E731
        return F.softmax_cross_entropy(act(ys[0]) + ys[1], t)


class Masked(_Base):
    """A shape that depends on values: boolean-mask indexing."""

    def forward(self, x, t):
        h = F.relu(self.l1(x))
        keep = h[h.array.sum(axis=1) > 0.5]
        y = self.l2(keep)
        return F.sum(y * y) + F.sum(h)


class ArgWhere(_Base):
    """Rows picked with ``numpy.argwhere``."""

    def forward(self, x, t):
        h = F.relu(self.l1(x))
        rows = numpy.argwhere(h.array.sum(axis=1) > 0.5)[:, 0]
        y = self.l2(h[rows])
        return F.softmax_cross_entropy(y, t[rows]) * len(rows)


class Keywords(_Base):
    """Defaults, keyword-only arguments and ``**kwargs`` reach the
    pieces."""

    def forward(self, x, t, scale=2.0, *extra, shift=0.5, **options):
        h = self.l1(x) * scale + shift
        y = self.l2(F.relu(h))
        if options.get('check', True) and float(F.max(y).array) > 0:
            y = y - shift
        return F.softmax_cross_entropy(y, t) + len(extra)


class Decoding(_Base):
    """A read that may leave a loop, between statements compiled at each
    iteration, one of them appending to a list."""

    def forward(self, x, t):
        h = F.tanh(self.l1(x))
        ys, total = [], 0
        for _ in range(5):
            y = self.l2(h)
            h = F.tanh(h + F.mean(y))
            if float(F.max(y).array) < 0.9:
                break
            total = total + F.sum(y * y)
            ys.append(y)
        return F.softmax_cross_entropy(y, t) + total * 0.1 + len(ys)


class Counting(_Base):
    """A ``while`` loop whose counter a read advances."""

    def forward(self, x, t):
        h = self.l1(x)
        n = 0
        while n < 4:
            h = F.tanh(h) * 1.5
            if float(F.sum(h).array) > 0:
                n += 2
            n += 1
            h = h + n
        return F.softmax_cross_entropy(self.l2(h), t)


class InWith(_Base):
    """A decoding loop inside a ``with`` block."""

    def forward(self, x, t):
        h = F.tanh(self.l1(x))
        with chainer.using_config('train', True):
            h = h * 2
            for _ in range(4):
                y = self.l2(h)
                h = F.tanh(h + F.mean(y))
                if float(F.max(y).array) < 0.9:
                    break
                h = h * 1.1
        return F.softmax_cross_entropy(y, t)


class InBranch(_Base):
    """The read inside a branch, a statement before and after it."""

    def forward(self, x, t, mode='scaled'):
        h = F.relu(self.l1(x))
        if mode == 'scaled':
            y = self.l2(h)
            s = float(F.sum(y).array)
            y = y * s
        else:
            y = self.l2(h * 2)
        return F.softmax_cross_entropy(y, t)


class Nested(_Base):
    """The read in a loop in a loop."""

    def forward(self, x, t):
        h = self.l1(x)
        for _ in range(2):
            for _ in range(2):
                h = F.tanh(h)
                if float(F.sum(h).array) > 0:
                    h = h * 0.5
                h = h + 0.1
        return F.softmax_cross_entropy(self.l2(h), t)


class BranchesOnTheRead(_Base):
    """The read in an ``if``'s test: both branches are pieces."""

    def forward(self, x, t):
        h = F.relu(self.l1(x))
        if float(F.sum(x).array) > 0:
            y = self.l2(h / 2)
            y = F.tanh(y) * 3
        else:
            y = self.l2(h) + 1
        return F.softmax_cross_entropy(y, t)


class Clipped(_Base):
    """A function's output given a new array (``h.array = ...``): its
    gradient still reaches the function, as eagerly."""

    def forward(self, x, t):
        h = self.l1(x)
        h.array = numpy.clip(h.array, -0.5, 0.5)
        y = self.l2(F.relu(h * 2))
        return F.softmax_cross_entropy(y, t)


class DataScaled(_Base):
    """As :class:`Clipped`, by ``.data``, the old value read after."""

    def forward(self, x, t):
        h = self.l1(x)
        g = F.tanh(h)
        h.data = h.data * 2
        return F.softmax_cross_entropy(self.l2(h + g), t)


class Stored(_Base):
    """The value read kept on the model, which nothing reads."""

    def forward(self, x, t):
        y = self.l2(F.relu(self.l1(x)))
        self.last = float(y.array.max())
        return F.softmax_cross_entropy(self.l3(y), t)


class ReadInBothTestAndBranch(_Base):
    """The read in an ``if``'s test and again in its branch."""

    def forward(self, x, t):
        h = F.relu(self.l1(x))
        if float(F.sum(x).array) > 0:
            k = float(F.max(h).array)
            h = h * k
        else:
            h = h / 2
        return F.softmax_cross_entropy(self.l2(h), t)


class ReadOnTheLineOfItsIf(_Base):
    """The read in an ``if``'s branch written on the line of its test."""

    kind = 'scaled'

    def forward(self, x, t):
        h = F.relu(self.l1(x))
        if self.kind == 'scaled': k = float(F.max(h).array)  # noqa: E701
        elif self.kind == 'plain': k = 1.0  # noqa: E701
        return F.softmax_cross_entropy(self.l2(h * k), t)


class ArrayModuleHeld(_Base):
    """The model's array module taken first (``xp = self.xp``) and used
    after the read: it passes from the prefix to the suffix."""

    def forward(self, x, t):
        xp = self.xp
        y = self.l2(F.relu(self.l1(x)))
        n = int((y.array > 0).sum())
        scale = xp.full((len(x), 1), 1.0 / (1 + n), dtype=F32)
        return F.softmax_cross_entropy(y * scale, t)


FORMS = [Thresholded, ItemWeighted, TwoBreaks, EarlyReturn, Helper,
         SuperCall, Closure, BreakInLoop, Masked, ArgWhere, Keywords,
         Decoding, Counting, InWith, InBranch, Nested, BranchesOnTheRead,
         Clipped, DataScaled, Stored, ReadInBothTestAndBranch,
         ReadOnTheLineOfItsIf, ArrayModuleHeld]


def _calls(rng, n=6, batch=5, n_in=6):
    return [(rng.standard_normal((batch, n_in)).astype(F32) * (1 + i),
             rng.randint(0, 4, batch).astype(numpy.int32))
            for i in range(n)]


def _checked(model, calls):
    """``jit(model.forward)`` checked against eager on ``calls``: outputs
    and gradients (see ``differential.check_grads``)."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        return differential.check_grads(
            None, calls, model=model, method='forward', fallback_ok=True)


def _jitted_twin(cls):
    """An eager model, its twin and the twin's jitted forward."""
    eager, model = cls(), cls()
    model.copyparams(eager)
    return eager, model, chainerjit.jit(model.forward)


def _cut_pieces(jitted):
    return list(jitted.graph_break()[1].values())


@pytest.mark.parametrize('cls', FORMS, ids=lambda c: c.__name__)
def test_forms_match_eager_and_run_compiled_pieces(cls):
    rng = numpy.random.RandomState(0)
    jitted = _checked(cls(), _calls(rng))
    assert jitted.graph_break(), 'the forward was not cut'
    # the first call records, the next ones record the pieces (a suffix
    # cut again, its own pieces), then they run compiled
    assert jitted.cache_info().compiled >= 3
    assert any(p.cache_info().compiled >= 3 for p in _cut_pieces(jitted))


@pytest.mark.parametrize('cls', [ReadInBothTestAndBranch,
                                 ReadOnTheLineOfItsIf],
                         ids=lambda c: c.__name__)
def test_a_piece_that_reads_again_is_cut_once(cls):
    # A piece cut again at its own read, not at the statements the cut
    # made for it: its pieces settle, one set for every call.
    jitted = _checked(cls(), _calls(numpy.random.RandomState(3), n=10))

    def cut_at_most_twice(jitted, depth=0):
        cut = jitted.graph_break()
        assert depth < 3, 'cut %d times' % depth
        for piece in (cut[1].values() if cut else ()):
            cut_at_most_twice(piece, depth + 1)
    cut_at_most_twice(jitted)


def test_a_value_stored_on_the_model_compiles_each_piece_once():
    # The attribute the forward assigns changes on every call: no piece
    # reads it first, so none guards it.
    eager, model, jitted = _jitted_twin(Stored)
    rng = numpy.random.RandomState(2)
    for x, t in _calls(rng, n=8):
        assert_array_equal(jitted(x, t).array, eager(x, t).array)
        assert model.last == eager.last
    for piece in _cut_pieces(jitted):
        info = piece.cache_info()
        assert info.compiles == 1 and info.hits >= 6, piece.cache_report()


@pytest.mark.parametrize('cls', [Thresholded, TwoBreaks],
                         ids=lambda c: c.__name__)
def test_inference_at_new_batch_sizes(cls):
    """Without backprop, at a new batch size per call: eager's bits, and
    each piece serves every batch size from at most two entries."""
    eager, model, jitted = _jitted_twin(cls)
    rng = numpy.random.RandomState(1)
    with warnings.catch_warnings(), chainer.no_backprop_mode():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        for batch in (3, 5, 8, 4, 9, 6, 7, 3):
            (x, t), = _calls(rng, n=1, batch=batch)
            assert_array_equal(jitted(x, t).array, eager(x, t).array)
    for piece in _cut_pieces(jitted):
        assert piece.cache_info().currsize <= 2, piece.cache_report()


class Accuracy(_Base):
    """The number of right answers read into Python and returned with the
    accuracy: the statements after the read compute numbers only."""

    def forward(self, x, t):
        y = self.l2(F.relu(self.l1(x)))
        loss = F.softmax_cross_entropy(y, t)
        correct = int((y.array.argmax(axis=1) == t).sum())
        accuracy = float(correct) / len(t)
        return {'loss': loss, 'correct': correct, 'accuracy': accuracy}


@pytest.mark.parametrize('train', [False, True])
def test_a_piece_of_numbers_only_runs_as_python(train):
    """The piece after the read holds no op: it runs as Python, not
    compiled again for each count and batch size; the piece before it
    serves every batch size."""
    eager, model, jitted = _jitted_twin(Accuracy)
    rng = numpy.random.RandomState(4)
    with warnings.catch_warnings(), chainer.using_config('train', train):
        warnings.simplefilter('ignore', errors.GraphBreakWarning)
        warnings.simplefilter('error', errors.RecompileWarning)
        for batch in (8, 17, 30, 3, 8, 17, 30, 3):
            (x, t), = _calls(rng, n=1, batch=batch)
            ours, theirs = jitted(x, t), eager(x, t)
            assert ours['correct'] == theirs['correct']
            assert ours['accuracy'] == theirs['accuracy']
            assert_array_equal(ours['loss'].array, theirs['loss'].array)
            if train:
                model.cleargrads()
                eager.cleargrads()
                ours['loss'].backward()
                theirs['loss'].backward()
                assert_array_equal(model.l1.W.grad, eager.l1.W.grad)
    pieces = jitted.graph_break()[1]
    assert pieces['suffix'].cache_info().compiles == 1
    assert 'calls run as Python' in pieces['suffix'].cache_report()
    assert pieces['prefix'].cache_info().currsize == 1


def test_a_loop_holding_the_read_runs_its_other_statements_compiled():
    rng = numpy.random.RandomState(10)
    jitted = _checked(Decoding(), _calls(rng, n=8))
    cut, pieces = jitted.graph_break()
    read = Decoding.forward.__code__.co_firstlineno + 6
    assert 'lines %d-%d run in Python on every call' % (
        read - 3, read + 3) in cut.describe()
    assert cut.describe().endswith('inside it, lines %d-%d and lines %d-%d '
                                   'compiled' % (read - 2, read - 1,
                                                 read + 2, read + 3))
    before, after = 'lines %d-%d' % (read - 2, read - 1), \
        'lines %d-%d' % (read + 2, read + 3)
    assert sorted(pieces) == sorted([before, after, 'prefix', 'suffix'])
    # each iteration's statements before and after the read compiled,
    # after two recordings (``total`` is 0 at the first iteration, then a
    # Variable); the list the loop appends to is the driver's
    for what in (before, after):
        info = pieces[what].cache_info()
        assert info.compiled == info.hits >= 6 and info.currsize <= 2, what


@pytest.mark.parametrize('cls, around, runs', [
    (InWith, ((3, 3), (5, 6), (9, 9)), 3),
    (InBranch, ((3, 3), (5, 5)), 3),
    (Nested, ((4, 4), (7, 7)), 3),
    # each branch runs in some of the calls (the sign of the input's sum)
    (BranchesOnTheRead, ((3, 4), (6, 6)), 1),
])
def test_blocks_holding_the_read_are_cut_inside(cls, around, runs):
    """The statements around the read in a ``with``, a branch or a nested
    loop, and the branches of an ``if`` whose test reads, are jitted
    pieces (named by their lines, relative to ``def``)."""
    rng = numpy.random.RandomState(13)
    jitted = _checked(cls(), _calls(rng, n=8))
    first = cls.forward.__code__.co_firstlineno
    names = [_lines(first + a, first + b) for a, b in around]
    pieces = jitted.graph_break()[1]
    for name in names:
        assert pieces[name].cache_info().compiled >= runs, name


def _lines(first, last):
    return 'line %d' % first if first == last else 'lines %d-%d' % (
        first, last)


def test_loop_before_the_break_rolls():
    """A loop in the statements before the break rolls into one program
    for every length; its values and gradients are eager's."""
    rng = numpy.random.RandomState(2)
    calls = [(rng.standard_normal((n, 2, 4)).astype(F32),
              rng.randint(0, 8, 2).astype(numpy.int32))
             for n in (3, 5, 8, 4, 9, 6)]
    jitted = _checked(LoopAround(), calls)
    prefix = jitted.graph_break()[1]['prefix']
    assert prefix.cache_info().currsize == 1, prefix.cache_report()
    assert 'xs: f32[T,2,4]' in str(prefix.cache_entries()[0].signature)


def test_a_name_left_unassigned_raises_as_in_eager():
    """``h`` set only in a loop that does not run: the break reading it
    raises eager's UnboundLocalError, before and after the cut."""
    eager, model, jitted = _jitted_twin(LoopAround)
    rng = numpy.random.RandomState(3)
    t = numpy.zeros(2, numpy.int32)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        for n in (4, 0, 6, 0, 5):
            xs = rng.standard_normal((n, 2, 4)).astype(F32)
            if n == 0:
                for fn in (eager, jitted):
                    with pytest.raises(UnboundLocalError):
                        fn(xs, t)
            else:
                assert_array_equal(jitted(xs, t).array, eager(xs, t).array)
    assert jitted.graph_break() is not None


class Deleting(_Base):
    def forward(self, x, t):
        h = self.l1(x)
        g = F.relu(h)
        if x.shape[0] > 4:
            del g
        y = self.l2(h)
        w = float(F.sum(y).array)
        try:
            y = y + g
        except UnboundLocalError:
            y = y * 2
        return F.softmax_cross_entropy(y * w, t)


def test_a_deleted_name_stays_deleted():
    rng = numpy.random.RandomState(4)
    calls = [(rng.standard_normal((b, 6)).astype(F32),
              rng.randint(0, 4, b).astype(numpy.int32))
             for b in (3, 6, 3, 6, 2, 8)]
    jitted = _checked(_Net(Deleting), calls)
    assert jitted.graph_break() is not None


def _Net(cls):
    return cls(n_h=4)


def test_warning_report_and_explain_name_the_break(monkeypatch):
    monkeypatch.setattr(errors, '_warned', set())  # warned once by line
    model = Thresholded()
    jitted = chainerjit.jit(model.forward)
    rng = numpy.random.RandomState(5)
    calls = _calls(rng, n=3)
    with pytest.warns(chainerjit.GraphBreakWarning) as record:
        for x, t in calls:
            jitted(x, t)
    message = str(record[0].message)
    assert 'if float(loss.array) > 1.4:' in message
    assert 'run in Python on every call' in message
    line = Thresholded.forward.__code__.co_firstlineno + 4
    assert 'graph break at test_graph_breaks.py:%d' % line in \
        jitted.cache_report()
    explained = jitted.explain(*calls[0])
    assert 'runs around a graph break' in explained
    assert 'Thresholded.forward<prefix> would hit entry #0' in explained


def _first(x):
    return x


def _generator(self, x):
    y = x * 2
    if float(y.sum()) > 0:
        yield y


def _global(self, x):
    global _first
    _first = x * 2
    return float(_first.sum())


def _frame(self, x):
    y = x * 2
    z = float(y.sum())
    return locals()


def _early(self, x):
    if x.shape[0] > 3:
        return x
    y = x * 2
    return float(y.sum())


def _captured(self, x):
    y = x * 2
    f = lambda: y  # noqa: E731
    z = float(y.sum())
    y = y + z
    return f()


@pytest.mark.parametrize('fn,line,why', [
    (_generator, 2, 'generator'),
    (_global, 3, 'global'),
    (_frame, 2, 'calls locals()'),
    (_early, 4, 'may return before'),
    (_captured, 3, 'closure captures'),
])
def test_forwards_that_are_not_cut_say_why(fn, line, why):
    line += fn.__code__.co_firstlineno
    found = breaks.cut(fn, line, True)
    assert isinstance(found, str) and why in found, found


def test_a_forward_that_is_not_cut_runs_eagerly_with_eager_values():
    class Framed(_Base):
        def forward(self, x, t):
            y = self.l2(self.l1(x))
            s = float(F.sum(y).array)
            return dict(locals())['y'] * s

    eager, model, jitted = _jitted_twin(Framed)
    rng = numpy.random.RandomState(6)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        for x, t in _calls(rng, n=4):
            assert_array_equal(jitted(x, t).array, eager(x, t).array)
    assert jitted.graph_break() is None


def _observed(fn, model, *args):
    reporter = chainer.Reporter()
    reporter.add_observer('m', model)
    observation = {}
    with reporter.scope(observation):
        result = fn(*args)
    return result, observation


def test_a_number_read_at_the_break_is_reported_as_eager_reports_it():
    """``acc = float(...)`` reported after the break: the suffix takes it
    as an input and reports each call's number (a Python float), from one
    entry."""
    eager, model, jitted = _jitted_twin(Helper)
    rng = numpy.random.RandomState(7)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        for x, t in _calls(rng, n=8):
            expected, seen = _observed(eager.forward, eager, x, t)
            actual, got = _observed(jitted, model, x, t)
            assert_array_equal(actual.array, expected.array)
            assert type(got['m/accuracy']) is float
            assert got['m/accuracy'] == seen['m/accuracy']
    suffix = jitted.graph_break()[1]['suffix']
    assert suffix.cache_info().currsize == 1
    assert suffix.cache_info().compiled >= 3


def test_a_float_argument_reported_is_an_input_too():
    class Annealed(_Base):
        def forward(self, x, beta):
            y = self.l2(F.relu(self.l1(x)))
            chainer.report({'beta': beta, 'y': F.sum(y)}, self)
            return y * beta

    eager, model, jitted = _jitted_twin(Annealed)
    rng = numpy.random.RandomState(8)
    for i in range(8):
        x = rng.standard_normal((3, 6)).astype(F32)
        beta = 0.1 * i + 0.05
        expected, seen = _observed(eager.forward, eager, x, beta)
        actual, got = _observed(jitted, model, x, beta)
        assert_array_equal(actual.array, expected.array)
        assert type(got['m/beta']) is float and got['m/beta'] == beta
        assert_array_equal(got['m/y'].array, seen['m/y'].array)
    # two recordings, two checks of new values against eager, then compiled
    assert jitted.cache_info().currsize == 1
    assert jitted.cache_info().compiled == 4


def test_export_of_a_cut_forward_names_the_break_and_the_pieces():
    onnx_export = pytest.importorskip('chainerjit.onnx_export')
    model = Thresholded()
    jitted = chainerjit.jit(model.forward)
    x, t = _calls(numpy.random.RandomState(9), n=1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        jitted(x, t)
        with pytest.raises(errors.ExportError, match='graph break at'):
            onnx_export.export_onnx(jitted, (x, t))
        prefix = jitted.graph_break()[1]['prefix']
        assert onnx_export.export_onnx(prefix, (x, t)) is not None


def _sliced(x, k):
    y = F.tanh(x[:k])
    if float(y.array.sum()) > 0:
        y = y * 2
    return y + 1


def test_a_cut_whose_piece_stops_recording_is_undone():
    """The statements before the break slice with an int new on every
    call: that piece stops recording and runs eagerly, and then so does
    the whole forward (eagerly, unrecorded: never the driver's cost on
    top of eager code)."""
    jitted = chainerjit.jit(_sliced)
    x = numpy.random.RandomState(11).standard_normal((40, 3)).astype(F32)
    with warnings.catch_warnings(), chainer.no_backprop_mode():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        warnings.simplefilter('ignore', chainerjit.RecompileWarning)
        cut_seen = False
        for k in range(1, 30):
            assert_array_equal(jitted(x, k).array, _sliced(x, k).array)
            cut_seen = cut_seen or jitted.graph_break() is not None
    assert cut_seen and jitted.graph_break() is None
    assert 'no longer run around a graph break' in jitted.cache_report()
    assert jitted.budget.stopped is not None


def test_serving_mode_pieces_own_and_give_back_the_parameters():
    """``freeze=True``: the pieces' onnxruntime sessions own the weights
    they read (read-only), and ``unfreeze()`` of the cut function gives
    them back; values stay eager's, within onnxruntime's rounding."""
    pytest.importorskip('onnxruntime')
    eager, model = Thresholded(), Thresholded()
    model.copyparams(eager)
    jitted = chainerjit.jit(model.forward, backend='onnxruntime',
                            freeze=True)
    rng = numpy.random.RandomState(12)

    def check(n):
        with warnings.catch_warnings(), chainer.no_backprop_mode():
            warnings.simplefilter('ignore', chainerjit.FallbackWarning)
            for x, t in _calls(rng, n=n):
                numpy.testing.assert_allclose(
                    jitted(x, t).array, eager(x, t).array, rtol=1e-5,
                    atol=1e-6)
    check(5)
    assert jitted.graph_break() is not None
    assert not model.l1.W.array.flags.writeable  # the prefix's session's
    jitted.unfreeze()
    assert model.l1.W.array.flags.writeable
    model.l1.W.array[...] += 1
    eager.l1.W.array[...] += 1
    check(4)


class _TreeCounting(chainer.Chain):
    """Chainer's sentiment example's ``traverse``: recursive over a tree,
    counting the nodes it labels right (a read into Python, in a branch
    that binds a name the other does not)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.embed = L.EmbedID(10, 4)
            self.compose = L.Linear(8, 4)
            self.w = L.Linear(4, 3)

    def traverse(self, node, evaluate):
        label, content = node
        if isinstance(content, int):
            v = self.embed(numpy.array([content], numpy.int32))
        else:
            left = self.traverse(content[0], evaluate)
            right = self.traverse(content[1], evaluate)
            v = F.tanh(self.compose(F.concat((left, right))))
        y = self.w(v)
        if y.array.argmax(1)[0] == label:
            evaluate['correct'] += 1
        return v


def test_a_recursive_forward_cut_again_in_its_suffix_counts_as_eagerly():
    eager, model = _TreeCounting(), _TreeCounting()
    model.copyparams(eager)
    model.traverse = chainerjit.jit(model.traverse)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        for labels in numpy.ndindex(3, 3, 3):
            tree = (labels[0], ((labels[1], 3), (labels[2], 5)))
            counts = {'correct': 0}, {'correct': 0}
            expected = eager.traverse(tree, counts[0])
            actual = model.traverse(tree, counts[1])
            assert_array_equal(actual.array, expected.array)
            assert counts[1] == counts[0], labels
