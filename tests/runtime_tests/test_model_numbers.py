"""Numbers the model's links hold (an iteration counter, a KL weight the
training loop anneals, a flag): an entry guards those its forward read
while recorded, and only those, so that a training loop changing the
others every step keeps one entry per mode; and a number read, however
it is read, still makes a new value compile again (never a stale one).
"""

import concurrent.futures
import copy
import inspect
import math
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.runtime_tests.twins import _twins


class _Scaled(chainer.Chain):
    """A link called by the model whose forward reads one of its numbers
    (``scale``) and not the other (``calls``)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.scale = 1.0
        self.calls = 0

    def forward(self, x):
        return self.fc(x) * self.scale


class _Annealed(chainer.Chain):
    """A loss weighted by ``self.beta`` as ``read`` says it reads it (or
    does not: ``'unread'``), with numbers the training loop sets and the
    forward never reads (``iteration``, ``epoch``, ``note``, ``lr``)."""

    def __init__(self, read):
        super().__init__()
        with self.init_scope():
            self.child = _Scaled()
            self.bn = L.BatchNormalization(3)
        self.read = read
        self.beta = 0.5
        self.use_beta = True
        self.iteration = 0
        self.epoch = numpy.float32(0)
        self.note = 'warm-up'
        self.lr = (0.1, 0.01)

    @property
    def weight(self):
        return self.beta

    def _weighted(self, h):
        return h * self.beta

    def forward(self, x):
        h = self.bn(self.child(x))
        read = self.read
        if read == 'attribute':
            h = h * self.beta
        elif read == 'helper':
            h = self._weighted(h)
        elif read == 'getattr':
            h = h * getattr(self, 'be' + 'ta')
        elif read == 'property':
            h = h * self.weight
        elif read == 'vars':
            h = h * vars(self)['beta']
        elif read == 'dict':
            h = h * self.__dict__.get('beta')
        elif read == 'branch':
            if self.use_beta:
                h = h * self.beta
        elif read == 'child':
            h = h * 2.0  # (the child reads its scale)
        return F.sum(h * x)


def _set(model, step, names):
    if 'beta' in names:
        model.beta = 0.25 * (step + 1)
    if 'use_beta' in names:
        model.use_beta = step % 2 == 1
    if 'scale' in names:
        model.child.scale = 1.0 + step
    if 'unread' in names:
        model.iteration = step
        model.epoch = numpy.float32(step // 2)
        model.note = 'step %d' % step
        model.lr = (0.1 / (step + 1), 0.01)
        model.child.calls = step


def _each_value_agrees(eager, jitted, name, values, seed=0):
    """Sets the number ``name`` of both models to each of ``values`` in
    turn and compares their results at new inputs (the recompile
    warnings of the numbers read, and graph breaks, let be)."""
    rng = numpy.random.RandomState(seed)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.RecompileWarning)
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        for value in values:
            x = rng.standard_normal((2, 3)).astype(numpy.float32)
            setattr(eager, name, value)
            setattr(jitted, name, value)
            testing.assert_results_equal(jitted.forward(x),
                                         eager.forward(x))


def _train_and_compare(read, names, steps=5, seed=0):
    """Calls a jitted model and its eager twin at ``steps`` new inputs,
    setting the numbers ``names`` says to new values on both before each
    call; compares results, gradients and the batch normalization's
    statistics. Returns the jitted forward."""
    eager, jitted = _twins(_Annealed, read)
    rng = numpy.random.RandomState(seed)
    for step in range(steps):
        x = rng.standard_normal((4, 3)).astype(numpy.float32)
        for model in (eager, jitted):
            _set(model, step, names)
            model.cleargrads()
        expected, actual = eager.forward(x), jitted.forward(x)
        testing.assert_results_equal(actual, expected)
        expected.backward()
        actual.backward()
        for (name, p), (_, q) in zip(sorted(eager.namedparams()),
                                     sorted(jitted.namedparams())):
            numpy.testing.assert_allclose(q.grad, p.grad, rtol=1e-4,
                                          atol=1e-6, err_msg=name)
        numpy.testing.assert_allclose(jitted.bn.avg_mean, eager.bn.avg_mean,
                                      rtol=1e-5)
        with chainer.using_config('train', False):
            testing.assert_results_equal(jitted.forward(x),
                                         eager.forward(x))
    return jitted.forward


@pytest.mark.parametrize('read', ['unread', 'attribute', 'child'])
def test_numbers_the_forward_does_not_read_keep_one_entry_per_mode(read):
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.RecompileWarning)
        fn = _train_and_compare(read, ['unread'])
    info = fn.cache_info()
    assert info.currsize == 2 and info.compiles == 2, fn.cache_report()


@pytest.mark.parametrize('read', ['attribute', 'helper', 'getattr',
                                  'property', 'vars', 'dict', 'branch'])
def test_a_number_the_forward_reads_is_never_stale(read):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.RecompileWarning)
        fn = _train_and_compare(read, ['beta', 'use_beta', 'unread'])
    assert fn.cache_info().compiles > 2  # one per value read


def test_a_number_a_called_link_reads_is_never_stale():
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.RecompileWarning)
        fn = _train_and_compare('child', ['scale', 'unread'])
    assert fn.cache_info().compiles > 2


class _Counted(chainer.Chain):
    """A classifier whose forward reads its accuracy into Python (a graph
    break) and whose training loop counts steps on it."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 2)
        self.iteration = 0
        self.accuracies = 0.0

    def forward(self, x, t):
        y = self.fc(x)
        chainer.report({'accuracy': float(F.accuracy(y, t).array)}, self)
        return F.softmax_cross_entropy(y, t) + F.sum(y * y) * 0.01


def test_a_forward_cut_at_a_graph_break_ignores_unread_numbers():
    eager, jitted = _twins(_Counted)
    rng = numpy.random.RandomState(1)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        warnings.simplefilter('error', chainerjit.RecompileWarning)
        for step in range(6):
            x = rng.standard_normal((5, 3)).astype(numpy.float32)
            t = rng.randint(0, 2, 5).astype(numpy.int32)
            for model in (eager, jitted):
                model.iteration = step
                model.accuracies += 0.5
            testing.assert_results_equal(jitted.forward(x, t),
                                         eager.forward(x, t))
    info = jitted.forward.cache_info()
    assert info.misses == 1 and info.hits == 5, jitted.forward.cache_report()


class _Switched(chainer.Chain):
    """A forward cut where it reads a sign into Python; the statements
    after the cut read ``self.beta`` only where that sign is positive."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.beta = 0.5

    def forward(self, x):
        h = self.fc(x)
        positive = float(F.sum(x).array) > 0
        if positive:
            h = h * self.beta
        return F.sum(h * h)


def test_a_piece_of_a_cut_forward_guards_what_it_reads():
    # The first call never reads beta; a later piece reads it.
    eager, jitted = _twins(_Switched)
    rng = numpy.random.RandomState(2)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        warnings.simplefilter('ignore', chainerjit.RecompileWarning)
        for step, sign in enumerate((-1, 1, 1, -1, 1)):
            x = sign * abs(rng.standard_normal((4, 3))).astype(
                numpy.float32)
            for model in (eager, jitted):
                model.beta = 0.5 + step
            testing.assert_results_equal(jitted.forward(x),
                                         eager.forward(x))


# Reads of ``model.beta`` the recording's ``Link.__getattribute__`` does
# not see (the instance's dictionary read in C), in a helper.
_UNSEEN_READS = {
    'object': lambda model: object.__getattribute__(model, 'beta'),
    'getstate': lambda model: model.__getstate__()['beta'],
    'copy': lambda model: copy.copy(model).beta,
    'static': lambda model: inspect.getattr_static(model, 'beta'),
}


class _ReadUnseen(chainer.Chain):
    """A forward whose code names no ``beta``: a helper reads it."""

    def __init__(self, read):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.read = read
        self.beta = 0.5

    def forward(self, x):
        return F.sum(self.fc(x) * _UNSEEN_READS[self.read](self))


class _LooksUpItsOwn(_ReadUnseen):
    """A model whose class looks its attributes up itself."""

    def __getattribute__(self, name):
        return object.__getattribute__(self, name)

    def forward(self, x):
        return F.sum(self.fc(x) * getattr(self, ''.join(['be', 'ta'])))


@pytest.mark.parametrize('cls, read', [
    (_ReadUnseen, 'object'), (_ReadUnseen, 'getstate'),
    (_ReadUnseen, 'copy'), (_ReadUnseen, 'static'),
    (_LooksUpItsOwn, 'object')])
def test_a_number_read_out_of_the_recordings_sight_is_never_stale(
        cls, read):
    _each_value_agrees(*_twins(cls, read), 'beta', (0.5, 2.0, 3.0, -1.0))


class _Typed(chainer.Chain):
    """A forward whose result depends on its number's type and sign."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.k = 3

    def forward(self, x):
        k = self.k
        scale = k // 2 if isinstance(k, int) else k
        return F.sum(self.fc(x) * scale) + math.copysign(1.0, k)


def test_a_number_of_another_type_or_sign_is_another_number():
    eager, jitted = _twins(_Typed)
    _each_value_agrees(eager, jitted, 'k', (
        3, 3.0, numpy.float32(3), 0.0, -0.0, float('nan')))
    assert jitted.forward.cache_info().currsize == 6
    jitted.forward(numpy.ones((2, 3), numpy.float32))  # NaN is NaN
    assert jitted.forward.cache_info().hits == 1


def _read_into_python(h):
    return float(F.sum(h).array) * 0.0


def _through_a_helper(model, x):
    """Reads a value into Python a helper deep: the forward is not cut,
    and runs eagerly, its links compiled as segments."""
    h = model.fc(x)
    return model.tail(h + _read_into_python(h))


class _Owner(chainer.Chain):
    """Links called as segments that read a number of the model holding
    them: a ``chainer.Sequential``'s lambda, or a link's reference to its
    owner (not one of its links)."""

    def __init__(self, how):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
            if how == 'lambda':
                self.tail = chainer.Sequential(L.Linear(3, 3),
                                               lambda h: h * self.beta)
            else:
                self.tail = _Tail()
            self.tail.owner = self
        self.beta = 0.5

    def forward(self, x):
        return _through_a_helper(self, x)


class _Tail(chainer.Chain):

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.owner = None

    def forward(self, h):
        return self.fc(h) * self.owner.beta


@pytest.mark.parametrize('how', ['lambda', 'owner'])
def test_a_number_a_segment_reads_off_another_link_is_never_stale(how):
    eager, jitted = _Owner(how), _Owner(how)  # (a lambda: no deep copy)
    jitted.copyparams(eager)
    jitted.forward = chainerjit.jit(jitted.forward)
    _each_value_agrees(eager, jitted, 'beta',
                       (0.5, 0.5, 0.5, 1.5, 1.5, 1.5, 2.5, 2.5))
    assert jitted.forward.cache_info().segmented > 0


class _Teacher(chainer.Chain):
    """A link the forward names as a global, outside its model."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.scale = 1.0
        self.iteration = 0

    def forward(self, x):
        return self.fc(x) * self.scale


_TEACHER = _Teacher()


class _Student(chainer.Chain):

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)

    def forward(self, x):
        return F.sum(self.fc(x) * _TEACHER(x))


@pytest.mark.parametrize('changed', ['iteration', 'scale'])
def test_the_numbers_of_a_link_named_outside_the_model(changed):
    eager, jitted = _twins(_Student)
    rng = numpy.random.RandomState(5)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.RecompileWarning)
        for step in range(4):
            setattr(_TEACHER, changed, step + 1)
            x = rng.standard_normal((2, 3)).astype(numpy.float32)
            testing.assert_results_equal(jitted.forward(x),
                                         eager.forward(x))
    _TEACHER.scale, _TEACHER.iteration = 1.0, 0
    # Read, each value compiles; unread, one entry serves them all.
    assert jitted.forward.cache_info().currsize == (
        4 if changed == 'scale' else 1)


def _scale_of(link):
    return link.scale


class _Pooled(chainer.Chain):
    """A forward that reads its number in another thread."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.scale = 1.0

    def forward(self, x):
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            scale = pool.submit(_scale_of, self).result()
        return F.sum(self.fc(x) * scale)


def test_a_number_read_in_another_thread_is_never_stale():
    _each_value_agrees(*_twins(_Pooled), 'scale', (1.0, 10.0, 0.5))


class _Tempered(chainer.Chain):
    """A persistent number (saved and loaded with the model)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.fc = L.Linear(3, 3)
        self.add_persistent('temperature', 1.0)

    def forward(self, x):
        return F.sum(self.fc(x) / self.temperature)


@pytest.mark.parametrize('how', ['load_npz', 'copyparams'])
def test_a_number_a_checkpoint_restores_is_never_stale(how, tmp_path):
    jitted = _Tempered()
    jitted.forward = chainerjit.jit(jitted.forward)
    x = numpy.ones((2, 3), numpy.float32)
    for _ in range(3):
        jitted.forward(x)
    saved = _Tempered()
    saved.copyparams(jitted, copy_persistent=False)
    saved.temperature = 5.0
    if how == 'load_npz':
        path = str(tmp_path / 'saved.npz')
        chainer.serializers.save_npz(path, saved)
        chainer.serializers.load_npz(path, jitted)
    else:
        jitted.copyparams(saved)  # (a target network's update)
    assert jitted.temperature == 5.0
    testing.assert_results_equal(jitted.forward(x),
                                 _Tempered.forward(jitted, x))


class _Generic(chainer.Chain):
    """A forward over ``self.children()`` with an L2 term over
    ``self.params()`` (Chainer reads the model's ``__dict__`` for them)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.a = L.Linear(3, 3)
            self.b = L.Linear(3, 3)
        self.iteration = 0

    def forward(self, x):
        for child in self.children():
            x = F.tanh(child(x))
        return F.sum(x) + 1e-3 * sum(F.sum(p * p) for p in self.params())


def test_chainers_own_reads_of_the_models_dictionary_read_no_number():
    eager, jitted = _twins(_Generic)
    _each_value_agrees(eager, jitted, 'iteration', range(6))
    assert jitted.forward.cache_info().compiles == 1
