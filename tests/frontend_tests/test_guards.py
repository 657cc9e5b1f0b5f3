"""Guards on the Python values a recorded forward reads
(``chainerjit.frontend.guards``), and the other known ways a tracing JIT
can differ from eager Chainer, each with a test of what chainerjit does
about it.

Silent mismatches (each must now be the eager result or a miss):
  1. A Python scalar attribute of a link changed after the first call
     (``model.slope = 0.3``): a miss, recompiled.
  2. A class attribute, module global or closure variable the forward
     names changed (a scalar by value, an array or Variable rebound), or
     an attribute of a plain object the model holds that the forward
     reads (``self.options.scale``): a miss. The same for the helper
     functions and methods it calls, the forwards of links of the
     user's own classes (a few calls deep) and the functions a
     ``chainer.Sequential`` calls, and for a helper function
     redefined; nested containers and their subclasses, NumPy scalars, a
     0-d array read into Python, any other object rebound, the attributes
     read of a plain object in a global or through a local name, what a
     callable object's ``__call__`` reads.
  3. A link replaced, or a parameter reshaped: a miss; likewise for a
     link named outside the model (a global ``model``, a closure's, a
     plain object's): a new link bound to the name, a parameter or
     running statistics replaced.
  4. A parameter updated in place or rebound (an optimizer step): read on
     every call.
  5. Batch-normalization statistics changed: read on every call.
  6. State a link keeps between calls (``L.LSTM``): read and assigned on
     every call.
  7. An array computed from the inputs with NumPy outside Chainer
     functions: recorded as an op, not frozen.
  8. An array a node holds as an attribute (``F.where``'s condition):
     a program input.

Eager fall-backs, with a one-time warning naming the line:
  9. ``float(v.array)``, ``v.item()``, ``bool`` of an array, a branch on
     an array value, a shape that depends on values.
  10. An argument chainerjit cannot key on (an object of your own class).
  11. A list or dict argument changed in place (a counter bumped, a
      state dict given a new Variable): the change reaches the caller's
      container, as in eager mode.

Still frozen at recording time (documented in the limits):
  12. Globals read by helpers more than a few calls deep, or by
      functions reached other than by name (``getattr``, a dict of
      functions).
"""

import collections
import copy
import enum
import functools
import types
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import errors
from chainerjit import testing
from tests.frontend_tests.guarded_helpers import scaled


SCALE = 2.0


def _x(rng):
    return rng.randn(3, 4).astype(numpy.float32)


def _same(jitted, eager, *args):
    with chainer.no_backprop_mode():
        testing.assert_results_equal(jitted(*args), eager(*args))


class Net(chainer.Chain):
    offset = 1.0

    def __init__(self):
        super(Net, self).__init__()
        with self.init_scope():
            self.lin = L.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) * SCALE + self.offset


def test_global_read_by_the_forward_is_guarded(rng):
    global SCALE
    net = Net()
    jitted = chainerjit.jit(net.forward)
    x = _x(rng)
    _same(jitted, net.forward, x)
    SCALE = 3.0
    try:
        _same(jitted, net.forward, x)
        assert 'global SCALE: 2.0 -> 3.0' in ''.join(
            jitted.cache_entries()[0].guard_failures(net))
    finally:
        SCALE = 2.0
    assert jitted.cache_info().misses == 2


T = 5  # (a global a notebook's cell may change, named as an attribute)


def _transposed_sum(x):
    return F.sum(F.tanh(x.T)) * SCALE


def test_a_global_named_as_an_attribute_only_is_not_guarded(rng):
    global T
    jitted = chainerjit.jit(_transposed_sum)
    try:
        for T in (5, 6, 7):
            _same(jitted, _transposed_sum, _x(rng))
    finally:
        T = 5
    assert jitted.cache_info().misses == 1, jitted.cache_info()


def test_class_attribute_read_by_the_forward_is_guarded(rng):
    net = Net()
    jitted = chainerjit.jit(net.forward)
    x = _x(rng)
    _same(jitted, net.forward, x)
    Net.offset = 5.0
    try:
        _same(jitted, net.forward, x)
    finally:
        Net.offset = 1.0
    _same(jitted, net.forward, x)
    assert jitted.cache_info().misses == 2


class _Options(object):
    def __init__(self):
        self.scale = 2.0
        self.inner = type('Inner', (), {})()
        self.inner.shift = 0.5

    def factor(self):
        return self.scale


class OptionsNet(Net):
    """Reads scalars two and three attributes deep on a plain object it
    holds, a method of it, and a link's parameter (``self.lin.W``)."""

    def __init__(self):
        super(OptionsNet, self).__init__()
        self.options = _Options()

    def forward(self, x):
        y = self.lin(x) * self.options.scale + self.options.inner.shift
        return y * self.options.factor() + F.sum(self.lin.W)


def test_attributes_of_a_plain_object_the_model_holds_are_guarded(rng):
    net = OptionsNet()
    jitted = chainerjit.jit(net.forward)
    x = _x(rng)
    _same(jitted, net.forward, x)
    labels = sorted(g.label for g in jitted.cache_entries()[0].py_guards)
    assert labels == ['self.options.factor', 'self.options.inner',
                      'self.options.inner.shift', 'self.options.scale']
    for name, value in (('scale', 3.0), ('shift', -1.0)):
        owner = net.options if name == 'scale' else net.options.inner
        setattr(owner, name, value)
        failures = ''.join(jitted.cache_entries()[0].guard_failures(net))
        assert name in failures
        _same(jitted, net.forward, x)
    assert jitted.cache_info().misses == 3


def test_optimizer_step_is_seen(rng):
    net = Net()
    jitted = chainerjit.jit(net.forward)
    opt = chainer.optimizers.SGD(lr=0.5)
    opt.setup(net)
    x = _x(rng)
    _same(jitted, net.forward, x)
    loss = F.sum(net.forward(x))
    net.cleargrads()
    loss.backward()
    opt.update()
    _same(jitted, net.forward, x)
    assert jitted.cache_info().hits == 1


def test_unkeyable_argument_warns(rng):
    with pytest.warns(chainerjit.FallbackWarning, match='UnsupportedArgument'):
        with chainer.no_backprop_mode():
            chainerjit.jit(lambda x, o: F.relu(x))(_x(rng), object())


MASK = numpy.ones((3, 4), numpy.float32)


def test_global_array_rebound_is_guarded(rng):
    global MASK

    def f(x):
        return F.relu(x) * MASK

    jitted = chainerjit.jit(f)
    x = _x(rng)
    _same(jitted, f, x)
    old, MASK = MASK, numpy.zeros((3, 4), numpy.float32)
    try:
        _same(jitted, f, x)
        MASK[...] = 2  # in place: hashed, a miss (see below)
        _same(jitted, f, x)
        _same(jitted, f, x)
    finally:
        MASK = old
    assert jitted.cache_info()[:2] == (1, 3)


def test_closure_values_are_guarded(rng):
    def make(scale, table):
        def f(x):
            return F.relu(x) * scale + table
        return f

    scale, table = 2.0, numpy.ones((3, 4), numpy.float32)
    f = make(scale, table)
    jitted = chainerjit.jit(f)
    x = _x(rng)
    _same(jitted, f, x)
    f.__closure__[0].cell_contents = 3.0  # as `nonlocal scale` would
    _same(jitted, f, x)
    f.__closure__[1].cell_contents = numpy.zeros((3, 4), numpy.float32)
    _same(jitted, f, x)
    assert jitted.cache_info().misses == 3
    assert 'closure table: another object' in \
        jitted.cache_entries()[0].guard_failures(None)


def _scaled_by_a_counter(xs, counter):
    def bump(x):
        counter[0] += 1
        return x * counter[0]
    return F.stack([bump(x) for x in xs])


@pytest.mark.filterwarnings('ignore::chainerjit.FallbackWarning')
def test_a_list_argument_changed_in_place_changes_the_callers(rng):
    jitted, mine, theirs = chainerjit.jit(_scaled_by_a_counter), [0], [0]
    for n in (3, 3, 5):
        xs = rng.standard_normal((n, 2)).astype(numpy.float32)
        actual = jitted(xs, mine)
        testing.assert_results_equal(actual, _scaled_by_a_counter(xs, theirs))
        assert mine == theirs


def test_a_state_dict_argument_gets_the_new_variable(rng):
    link = L.Linear(3, 3)

    def step(x, state):
        state['h'] = F.tanh(link(x) + state['h'])
        return state['h'] * 2

    jitted = chainerjit.jit(step)
    x = rng.standard_normal((2, 3)).astype(numpy.float32)
    h = chainer.Variable(numpy.zeros((2, 3), numpy.float32))
    mine, theirs = {'h': h}, {'h': h}
    with pytest.warns(chainerjit.FallbackWarning, match='argument in place'):
        actual = jitted(x, mine)
    expected = step(x, theirs)
    testing.assert_results_equal(actual, expected)
    assert type(mine['h']) is chainer.Variable and mine['h'] is not h
    assert type(mine['h'].array) is numpy.ndarray
    numpy.testing.assert_array_equal(mine['h'].array, theirs['h'].array)
    mine['h'].grad = numpy.ones((2, 3), numpy.float32)
    mine['h'].backward()  # the caller's Variable is in Chainer's graph
    assert link.W.grad is not None


def helper_scale():
    return SCALE


def test_global_read_by_a_helper_is_guarded(rng):
    """A helper function the forward calls is read too: the globals it
    names are guarded, a few calls deep."""
    global SCALE

    def f(x):
        return F.relu(x) * helper_scale()

    jitted = chainerjit.jit(f)
    x = _x(rng)
    _same(jitted, f, x)
    SCALE = 4.0
    try:
        _same(jitted, f, x)
        x = _x(rng)
        _same(jitted, f, x)
    finally:
        SCALE = 2.0
    assert jitted.cache_info()[:2] == (1, 2)


def activation(x):
    return F.relu(x)


def test_a_helper_function_redefined_is_a_miss(rng):
    global activation
    model = L.Linear(4, 3)

    def f(x):
        return activation(model(x))

    jitted = chainerjit.jit(f)
    x = _x(rng)
    _same(jitted, f, x)
    old = activation
    activation = F.tanh  # not the user's code: guarded by identity
    try:
        _same(jitted, f, x)
        activation = lambda x: F.sigmoid(x) * 2  # noqa: E731
        _same(jitted, f, _x(rng))
        _same(jitted, f, _x(rng))
    finally:
        activation = old
    _same(jitted, f, x)
    assert jitted.cache_info().misses == 3


class _HelperNet(chainer.Chain):
    def __init__(self):
        super(_HelperNet, self).__init__()
        with self.init_scope():
            self.lin = L.Linear(4, 4)
            self.block = _Block()

    def step(self, x):
        return self.lin(x) * SCALE

    def forward(self, x):
        return self.block(self.step(x))


class _Block(chainer.Chain):
    """A link of the user's own class: its forward is read too."""

    def __init__(self):
        super(_Block, self).__init__()
        with self.init_scope():
            self.lin = L.Linear(4, 2)

    def forward(self, x):
        return self.lin(x) + SHIFT


SHIFT = 0.5


def test_globals_of_a_method_and_of_a_links_forward_are_guarded(rng):
    global SCALE, SHIFT
    net = _HelperNet()
    jitted = chainerjit.jit(net.forward)
    x = _x(rng)
    _same(jitted, net.forward, x)
    labels = sorted(g.label for g in jitted.cache_entries()[0].py_guards)
    assert labels == ['_HelperNet.step', 'global SCALE', 'global SHIFT']
    try:
        SCALE = 3.0
        _same(jitted, net.forward, _x(rng))
        SHIFT = -1.0
        _same(jitted, net.forward, _x(rng))
        _same(jitted, net.forward, _x(rng))
    finally:
        SCALE, SHIFT = 2.0, 0.5
    assert jitted.cache_info()[:2] == (1, 3)


model_outside = L.Linear(4, 3)


def _predict(x):
    return F.relu(model_outside(x))


def test_a_global_model_rebound_or_changed_is_a_miss(rng):
    """A link the forward names outside a model (a notebook's global
    ``model``): its parameters are read as they are, and a new model
    bound to the name, a parameter or running statistics replaced, or
    a scalar attribute changed is a miss."""
    global model_outside
    old = model_outside
    jitted = chainerjit.jit(_predict)
    x = _x(rng)
    try:
        _same(jitted, _predict, x)
        model_outside.W.array[...] *= 2  # in place: read as it is
        _same(jitted, _predict, _x(rng))
        model_outside = L.Linear(4, 3)
        _same(jitted, _predict, _x(rng))
        model_outside.W = chainer.Parameter(
            rng.randn(3, 4).astype(numpy.float32))
        _same(jitted, _predict, _x(rng))
        _same(jitted, _predict, _x(rng))
        assert jitted.cache_info()[:2] == (2, 3)
        assert 'global model_outside: its links, parameters or attributes ' \
            'changed' not in jitted.cache_entries()[0].guard_failures(None)
        model_outside.b.array[...] = 1
        _same(jitted, _predict, _x(rng))
    finally:
        model_outside = old


def test_a_closure_models_statistics_replaced_is_a_miss(rng):
    bn, lin = L.BatchNormalization(3), L.Linear(4, 3)

    def predict(x):
        return bn(lin(x))

    jitted = chainerjit.jit(predict)
    x = _x(rng)
    with chainer.using_config('train', False):
        _same(jitted, predict, x)
        bn.avg_mean += 1  # in place
        _same(jitted, predict, _x(rng))
        bn.avg_var = numpy.full(3, 4, numpy.float32)  # replaced
        failures = jitted.cache_entries()[0].guard_failures(None)
        assert failures == ['closure bn: its links, parameters or '
                            'attributes changed']
        _same(jitted, predict, _x(rng))
        bn.eps = 0.25
        _same(jitted, predict, _x(rng))
    assert jitted.cache_info().misses == 3


class _Holder(object):
    """A plain object holding a link, its method jitted."""

    def __init__(self):
        self.lin = L.Linear(4, 3)

    def predict(self, x):
        return self.lin(x)


def test_a_link_held_by_a_plain_object_replaced_is_a_miss(rng):
    holder = _Holder()
    jitted = chainerjit.jit(holder.predict)
    x = _x(rng)
    _same(jitted, holder.predict, x)
    holder.lin = L.Linear(4, 3)
    _same(jitted, holder.predict, x)
    holder.lin.b = chainer.Parameter(numpy.ones(3, numpy.float32))
    _same(jitted, holder.predict, x)
    _same(jitted, holder.predict, _x(rng))
    assert jitted.cache_info()[:2] == (1, 3)


layers_outside = [L.Linear(4, 4), L.Linear(4, 3)]


def _through_a_list(x):
    for layer in layers_outside:
        x = layer(x)
    return x


def _through_a_name(x):
    return model_outside(x)


def test_a_parameter_no_guard_follows_warns_once(rng):
    """A link in a global list: an update in place is read, a parameter
    replaced would not be noticed, and a warning says so once."""
    jitted = chainerjit.jit(_through_a_list)
    with pytest.warns(chainerjit.UnguardedWarning,
                      match=r'parameter W \(4, 4\) \(4 parameters in all\)'
                      r'.*test_guards.py:\d+'):
        _same(jitted, _through_a_list, _x(rng))
    layers_outside[1].W.array[...] = 3
    with warnings.catch_warnings():
        warnings.simplefilter('error', chainerjit.UnguardedWarning)
        _same(jitted, _through_a_list, _x(rng))
        named = chainerjit.jit(_through_a_name)  # a guarded global link
        _same(named, _through_a_name, _x(rng))
        held = _Holder()  # a plain object's link
        _same(chainerjit.jit(held.predict), held.predict, _x(rng))
        net = Net()  # the model's own parameters
        _same(chainerjit.jit(net.forward), net.forward, _x(rng))


def test_globals_of_the_same_name_in_two_modules_are_both_guarded(rng):
    global SCALE
    from tests.frontend_tests import guarded_helpers

    def f(x):
        return scaled(x) * SCALE

    jitted = chainerjit.jit(f)
    x = _x(rng)
    _same(jitted, f, x)
    labels = sorted(g.label for g in jitted.cache_entries()[0].py_guards)
    assert labels == ['global SCALE', 'global scaled',
                      'global tests.frontend_tests.guarded_helpers.SCALE']
    try:
        guarded_helpers.SCALE = 3.0
        _same(jitted, f, x)
        SCALE = 5.0
        _same(jitted, f, x)
    finally:
        guarded_helpers.SCALE, SCALE = 10.0, 2.0
    assert jitted.cache_info().misses == 3


def test_a_helper_called_through_its_module_is_read(rng):
    from tests.frontend_tests import guarded_helpers

    def f(x):
        return guarded_helpers.scaled(x)

    jitted = chainerjit.jit(f)
    x = _x(rng)
    _same(jitted, f, x)
    try:
        guarded_helpers.SCALE = 3.0
        _same(jitted, f, x)
    finally:
        guarded_helpers.SCALE = 10.0
    old = guarded_helpers.scaled
    try:
        guarded_helpers.scaled = F.sigmoid
        _same(jitted, f, x)
    finally:
        guarded_helpers.scaled = old
    assert jitted.cache_info().misses == 3


# --- values the forward reads that change in place or by rebinding ----------

NESTED = {'head': {'scale': [2.0]}}
NP_SCALE = numpy.float32(2.0)
TEMPERATURE = numpy.array(2.0, numpy.float32)


class _Mode(enum.Enum):
    DOUBLE = 1
    HALF = 2


MODE = _Mode.DOUBLE
SETTINGS = types.SimpleNamespace(scale=2.0, inner=types.SimpleNamespace(
    shift=0.5))
ORDERED = collections.OrderedDict(scale=2.0)


def _reads_globals(x):
    y = x * NESTED['head']['scale'][0] * NP_SCALE * float(TEMPERATURE)
    y = y * (2.0 if MODE is _Mode.DOUBLE else 0.5)
    return y * SETTINGS.scale + SETTINGS.inner.shift + ORDERED['scale']


def _set_global(name, value):
    globals()[name] = value


@pytest.mark.parametrize('change', [
    lambda: NESTED['head']['scale'].__setitem__(0, 3.0),  # nested, in place
    lambda: _set_global('NP_SCALE', numpy.float32(3.0)),  # a NumPy scalar
    lambda: TEMPERATURE.__setitem__((), 3.0),  # read with float()
    lambda: _set_global('MODE', _Mode.HALF),  # any object: by identity
    lambda: setattr(SETTINGS, 'scale', 3.0),  # a plain object's attribute
    lambda: setattr(SETTINGS.inner, 'shift', 1.5),
    lambda: ORDERED.__setitem__('scale', 3.0),  # a dict's subclass
], ids=['nested', 'numpy scalar', '0-d array', 'enum', 'namespace',
        'namespace, deeper', 'OrderedDict'])
def test_a_global_changed_in_place_or_rebound_is_a_miss(rng, change):
    saved = copy.deepcopy({name: globals()[name] for name in (
        'NESTED', 'NP_SCALE', 'MODE', 'SETTINGS', 'ORDERED')})
    saved_temperature = TEMPERATURE.copy()
    jitted = chainerjit.jit(_reads_globals)
    try:
        _same(jitted, _reads_globals, _x(rng))
        change()
        _same(jitted, _reads_globals, _x(rng))
        _same(jitted, _reads_globals, _x(rng))
        assert jitted.cache_info()[:2] == (1, 2)
    finally:
        globals().update(saved)
        TEMPERATURE[...] = saved_temperature


_EXECUTED = {'SETTINGS': SETTINGS}
exec('def executed(x):\n    return x * SETTINGS.inner.shift\n', _EXECUTED)


@pytest.mark.parametrize('fn', [
    lambda x: x * SETTINGS.scale,
    lambda x: [h * SETTINGS.inner.shift for h in x][0],
    _EXECUTED['executed'],
], ids=['lambda', 'comprehension in a lambda', 'exec'])
def test_a_plain_objects_attribute_read_without_source_is_guarded(rng, fn):
    # (read from the bytecode: the source cannot be)
    settings = fn.__globals__['SETTINGS']  # (the one it reads)
    saved = copy.deepcopy(vars(settings))
    jitted = chainerjit.jit(fn)
    try:
        _same(jitted, fn, _x(rng))
        _same(jitted, fn, _x(rng))
        settings.scale = 5.0
        settings.inner.shift = 3.5
        _same(jitted, fn, _x(rng))
        assert jitted.cache_info().misses == 2, jitted.cache_info()
    finally:
        vars(settings).update(saved)


TEMPERATURE_OF_NET = 1.0


class _Tempered(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 3)

    def forward(self, x):
        return self.l1(x) / TEMPERATURE_OF_NET

    def predict(self, x):
        return F.softmax(self(x))


class _JittedTempered(_Tempered):
    @chainerjit.jit
    def forward(self, x):
        return self.l1(x) / TEMPERATURE_OF_NET


_HELD = {}


def _inner_tempered(x):
    return F.tanh(_HELD['model'](x)) * TEMPERATURE_OF_NET


_inner_jitted = chainerjit.jit(_inner_tempered)


@pytest.mark.parametrize('form', [
    'loss over a global model', 'its own method calling self(x)',
    'a jitted forward called by a jitted loss',
    'a jitted function called by a jitted function'])
def test_a_global_a_model_called_by_the_function_reads_is_guarded(
        rng, form):
    # The forward of each link the jitted function reaches (through a
    # global, its own instance, a jitted function) is read for guards.
    global TEMPERATURE_OF_NET
    model = (_JittedTempered if 'jitted forward' in form else _Tempered)()
    _HELD['model'] = model
    eager = {
        'loss over a global model': lambda x: F.sum(model(x) ** 2),
        'its own method calling self(x)': model.predict,
        'a jitted forward called by a jitted loss':
            lambda x: F.sum(model(x) ** 2),
        'a jitted function called by a jitted function':
            lambda x: _inner_tempered(x) + 1}[form]
    fn = {'its own method calling self(x)': model.predict,
          'a jitted function called by a jitted function':
              lambda x: _inner_jitted(x) + 1}.get(form, eager)
    jitted = chainerjit.jit(fn)
    try:
        for temperature in (1.0, 1.0, 0.25, 0.25):
            TEMPERATURE_OF_NET = temperature
            _same(jitted, eager, _x(rng))
        assert jitted.cache_info().misses == 2, jitted.cache_info()
    finally:
        TEMPERATURE_OF_NET = 1.0


class _Setting(object):
    def __init__(self):
        self.t = 1.0


HELD_SETTINGS = ([_Setting()], {'a': _Setting()})


class _HoldsSettings(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.lin = L.Linear(4, 4)
        self.lin.setting = _Setting()  # (on a link of the model)
        self.settings = [_Setting()]

    def forward(self, x):
        h = self.lin(x) * self.lin.setting.t * self.settings[0].t
        return h * HELD_SETTINGS[0][0].t + HELD_SETTINGS[1]['a'].t


_Hyper = collections.namedtuple('_Hyper', 't')
HYPER_CONFIG = types.SimpleNamespace(hyper=_Hyper(1.0))


def _tempered_by_hyper(x):
    return F.tanh(x) * HYPER_CONFIG.hyper.t


def test_a_namedtuple_replaced_in_a_configuration_is_a_miss(rng):
    jitted = chainerjit.jit(_tempered_by_hyper)
    try:
        for t in (1.0, 1.0, 3.0, 3.0):
            HYPER_CONFIG.hyper = HYPER_CONFIG.hyper._replace(t=t)
            _same(jitted, _tempered_by_hyper, _x(rng))
        assert jitted.cache_info().misses == 2, jitted.cache_info()
    finally:
        HYPER_CONFIG.hyper = _Hyper(1.0)


def test_plain_objects_in_containers_and_on_links_are_guarded(rng):
    net = _HoldsSettings()
    jitted = chainerjit.jit(net.forward)
    held = [net.lin.setting, net.settings[0], HELD_SETTINGS[0][0],
            HELD_SETTINGS[1]['a']]
    try:
        for setting in held:
            _same(jitted, net.forward, _x(rng))
            setting.t += 1.0
            _same(jitted, net.forward, _x(rng))
        assert jitted.cache_info().misses == 5, jitted.cache_info()
    finally:
        for setting in held:
            setting.t = 1.0


class _Scaler(object):
    """A callable plain object, its own attribute read by ``__call__``."""

    def __init__(self):
        self.k = 2.0

    def __call__(self, h):
        return h * self.k


class _HoldsObjects(chainer.Chain):
    def __init__(self):
        super(_HoldsObjects, self).__init__()
        with self.init_scope():
            self.lin = L.Linear(4, 4)
        self.scaler = _Scaler()
        self.opts = types.SimpleNamespace(shift=0.5)
        self.act = functools.partial(F.leaky_relu, slope=0.2)
        self.cfg = {'head': {'scale': 2.0}}
        self.width = numpy.zeros(3, numpy.float32)

    def forward(self, x):
        o = self.opts  # read through a name bound to it
        h = self.act(self.scaler(self.lin(x))) * self.cfg['head']['scale']
        return (h + o.shift)[:, :self.width.shape[0]]


@pytest.mark.parametrize('change', [
    lambda net: setattr(net.scaler, 'k', 3.0),
    lambda net: setattr(net.opts, 'shift', 1.5),
    lambda net: net.act.keywords.__setitem__('slope', 0.5),
    lambda net: net.cfg['head'].__setitem__('scale', 3.0),
    lambda net: setattr(net, 'width', numpy.zeros(2, numpy.float32)),
], ids=['callable object', 'alias', 'partial', 'nested dict', 'shape read'])
def test_what_the_model_holds_changed_is_a_miss(rng, change):
    net = _HoldsObjects()
    jitted = chainerjit.jit(net.forward)
    _same(jitted, net.forward, _x(rng))
    change(net)
    _same(jitted, net.forward, _x(rng))
    _same(jitted, net.forward, _x(rng))
    assert jitted.cache_info()[:2] == (1, 2)


def test_a_parameter_set_to_none_is_a_miss(rng):
    net = Net()
    jitted = chainerjit.jit(net.forward)
    _same(jitted, net.forward, _x(rng))
    net.lin.b = None  # (Chainer keeps the name among the parameters)
    _same(jitted, net.forward, _x(rng))


def test_an_array_computed_with_while_recording_changed_in_place(rng):
    """What the forward computed with a closure's array while recording
    (a mask) is a constant of the program: the array is hashed on each
    call, so a change in place is a miss, on either backend."""
    table = numpy.ones((3, 4), numpy.float32)

    def f(x):
        return F.where(table > 2, x, x * 0) + x * (table * 2)

    for backend in ('numpy', 'onnxruntime'):
        table[...] = 1
        jitted = chainerjit.jit(f, backend=backend)
        for _ in range(2):
            _same(jitted, f, _x(rng))
        table[0] = 5.0
        _same(jitted, f, _x(rng))
        _same(jitted, f, _x(rng))
        assert jitted.cache_info()[:2] == (2, 2), backend


BIG = numpy.ones(300000, numpy.float32)


def test_an_array_too_large_to_hash_warns(rng):
    def f(x):
        return x * BIG[:4]

    with pytest.warns(chainerjit.UnguardedWarning,
                      match=r'global BIG, an array of 1\.2 MB'):
        _same(chainerjit.jit(f), f, _x(rng))


COUNTS = numpy.zeros(3, numpy.float32)


def _counting(x):
    COUNTS[...] += 1  # a write the program could not replay
    return F.relu(x) * COUNTS[0]


def test_a_forward_writing_a_global_array_runs_eagerly(rng):
    jitted = chainerjit.jit(_counting)
    eager_counts = []
    with pytest.warns(chainerjit.FallbackWarning,
                      match='changing global COUNTS in place'):
        for _ in range(3):
            x = _x(rng)
            with chainer.no_backprop_mode():
                y = jitted(x)
            eager_counts.append(float(COUNTS[0]))
            numpy.testing.assert_allclose(y.array,
                                          numpy.maximum(x, 0) * COUNTS[0])
    assert eager_counts == [1.0, 2.0, 3.0]
    COUNTS[...] = 0


class _Layers(chainer.Chain):
    """A ``ChainList`` of layers and a ``chainer.Sequential`` of links and
    functions, both iterated by the forward."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.layers = chainer.ChainList(L.Linear(4, 4), L.Linear(4, 4))
            self.head = chainer.Sequential(L.Linear(4, 3), F.relu)

    def forward(self, x):
        for layer in self.layers:
            x = F.tanh(layer(x))
        return self.head(x)


_CHANGES = {
    'append': lambda m: m.layers.append(L.Linear(4, 4)),
    'insert at the end': lambda m: m.layers.insert(2, L.Linear(4, 4)),
    'replace': lambda m: m.layers.__setitem__(1, L.Linear(4, 4)),
    'delete': lambda m: m.layers.__delitem__(0),
    'a function replaced': lambda m: m.head.__setitem__(1, F.sigmoid),
    'a function appended': lambda m: m.head.append(F.sigmoid),
    'a function popped': lambda m: m.head.pop(),
}


@pytest.mark.parametrize('change', sorted(_CHANGES))
def test_layers_of_a_chain_list_or_sequential_changed_are_a_miss(
        rng, change):
    numpy.random.seed(0)
    model = _Layers()
    jitted = chainerjit.jit(model.forward)
    for step in range(4):
        if step == 2:
            _CHANGES[change](model)
        x = rng.standard_normal((3, 4)).astype(numpy.float32)
        testing.assert_results_equal(jitted(x), model.forward(x), 1e-5, 1e-6)
    assert jitted.cache_info().compiles == 2, jitted.cache_report()


class _Memory(object):
    """A plain object the model holds, whose attribute the forward sets
    (memory networks' ``register_all``: ``self.m = self.encoder(x)``)."""

    def __init__(self, encoder):
        self.encoder = encoder

    def register(self, x):
        self.m = self.encoder(x)


class _Memories(chainer.Chain):

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.encoder = L.Linear(3, 2)
        self.memories = [_Memory(self.encoder), _Memory(self.encoder)]

    def forward(self, x):
        for memory in self.memories:
            memory.register(x)
        return F.sum(self.memories[0].m * self.memories[1].m)


def test_an_attribute_of_a_plain_object_the_forward_sets_runs_eagerly(rng):
    # A program would leave it as the recording set it.
    numpy.random.seed(0)
    model = _Memories()
    jitted = chainerjit.jit(model.forward)
    with pytest.warns(chainerjit.FallbackWarning, match=r'assigning '
                      r'self\.memories\[0\]\.m, an attribute of an object'):
        jitted(rng.standard_normal((2, 3)).astype(numpy.float32))
    for _ in range(3):
        x = rng.standard_normal((2, 3)).astype(numpy.float32)
        testing.assert_results_equal(jitted(x), model.forward(x))
        jitted(x)
        numpy.testing.assert_array_equal(model.memories[0].m.array,
                                         model.encoder(x).array)


class _Layered(chainer.Chain):
    """A ``chainer.Sequential`` whose lambda reads a global."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.seq = chainer.Sequential(L.Linear(4, 4),
                                          lambda h: h * SCALE, F.tanh)

    def forward(self, x):
        return self.seq(x)


def _read_into_python(y):
    return float(F.sum(y).array) * 0.0


class _LayeredEagerly(_Layered):
    """The same, its forward run eagerly (a value read into Python a
    helper deep): the Sequential runs compiled, as a segment."""

    def forward(self, x):
        return self.seq(x) + _read_into_python(x)


@pytest.mark.parametrize('cls', [_Layered, _LayeredEagerly])
def test_a_global_a_sequentials_function_reads_is_guarded(rng, cls):
    global SCALE
    net = cls()
    jitted = chainerjit.jit(net.forward)
    x = _x(rng)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.FallbackWarning)
        for _ in range(3):
            _same(jitted, net.forward, x)
        SCALE = 5.0
        try:
            _same(jitted, net.forward, x)
        finally:
            SCALE = 2.0


class _VAE(chainer.Chain):
    """Chainer's VAE example's loss function: a closure that stores its
    loss on the model it names."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.dec = L.Linear(5, 5)

    def get_loss_func(self):
        def lf(x):
            rec_loss = F.bernoulli_nll(x, self.dec(x)) / len(x)
            self.rec_loss = rec_loss
            return rec_loss
        return lf


def test_a_closure_assigning_to_its_model_runs_eagerly_naming_the_line(rng):
    model = _VAE()
    twin = model.copy(mode='copy')
    jitted = chainerjit.jit(twin.get_loss_func())
    with pytest.warns(errors.FallbackWarning,
                      match=r'rec_loss on _VAE outside the model\n.*'
                      r'test_guards.py", line \d+\n.*self.rec_loss'):
        for batch in (3, 3, 2):
            x = (rng.rand(batch, 5) > .5).astype(numpy.float32)
            loss = jitted(x)
            numpy.testing.assert_allclose(
                loss.array, model.get_loss_func()(x).array, rtol=1e-6)
            assert twin.rec_loss is loss
