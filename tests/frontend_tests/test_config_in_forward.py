"""A ``chainer.config`` entry set inside the forward (or by a link it
calls) holds for the ops recorded under it on every compiled call, as it
does eagerly, whatever the configuration of the call."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy

import chainerjit
from chainerjit import testing

F32 = numpy.float32


def _calls(rng, n=4):
    return [(rng.standard_normal((3, 4)).astype(F32),) for _ in range(n)]


def rrelu_in_test_mode(x):
    with chainer.using_config('train', False):
        y = F.rrelu(x)
    return y * 2.0


def dropout_in_test_mode(x):
    with chainer.using_config('train', False):
        return F.dropout(F.tanh(x), 0.5)


def test_test_mode_set_inside_a_forward_called_in_training_mode(rng):
    for fn in (rrelu_in_test_mode, dropout_in_test_mode):
        with chainer.using_config('train', True):
            testing.assert_jit_matches_eager(fn, _calls(rng))


class Encoder(chainer.Chain):
    """A link that runs its batch normalization in test mode itself."""

    def __init__(self):
        super(Encoder, self).__init__()
        with self.init_scope():
            self.bn = L.BatchNormalization(4)

    def forward(self, x):
        with chainer.using_config('train', False):
            return F.rrelu(self.bn(x))


def test_a_link_setting_the_config_itself(rng):
    model, twin = Encoder(), Encoder()
    twin.copyparams(model)
    model.bn.avg_mean[:] = twin.bn.avg_mean[:] = rng.standard_normal(4)
    model.forward = chainerjit.jit(model.forward)
    with chainer.using_config('train', True):
        for (x,) in _calls(rng):
            testing.assert_results_equal(model(x), twin(x))
    assert model.forward.cache_info().compiled == 3


def test_the_setting_is_shown_on_the_node(rng):
    jitted = chainerjit.jit(rrelu_in_test_mode)
    with chainer.using_config('train', True):
        jitted(_calls(rng, 1)[0][0])
    assert 'train=False' in str(jitted.last_entry.graph)
