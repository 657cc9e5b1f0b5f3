"""Fusing an inference convolution with the test-mode batch normalization
after it (``passes.fuse.fuse_conv_batchnorm``), against eager Chainer:
strides, padding, dilation, ``cover_all``, missing bias, gamma or beta,
float64, statistics and weights changed between calls, a changed epsilon,
loops, deconvolutions, other axes, train mode switched between calls,
normalization inputs computed after the convolution, and ONNX export.
A convolution the fusion must not take keeps its normalization."""

import copy
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import testing
from tests.differential import check_grads
from tests.differential import LENGTHS


pytestmark = pytest.mark.adversarial

FUSED = 'Convolution2DFunction+FixedBatchNormalization'


def _randomize(bn, rng):
    if hasattr(bn, 'avg_mean'):
        bn.avg_mean[...] = rng.standard_normal(bn.avg_mean.shape)
        bn.avg_var[...] = rng.uniform(0.5, 2.0, bn.avg_var.shape)
    if getattr(bn, 'gamma', None) is not None:
        bn.gamma.array[...] = rng.uniform(0.5, 1.5, bn.gamma.shape)
    if getattr(bn, 'beta', None) is not None:
        bn.beta.array[...] = rng.standard_normal(bn.beta.shape)


class _ConvBN(chainer.Chain):

    def __init__(self, c_in=3, c_out=4, dtype=numpy.float32, bn=None,
                 cover_all=False, **conv):
        super(_ConvBN, self).__init__()
        self.cover_all = cover_all
        self.conv_args = dict(stride=conv.get('stride', 1),
                              pad=conv.get('pad', 0),
                              dilate=conv.get('dilate', 1),
                              groups=conv.get('groups', 1))
        with self.init_scope():
            self.c = L.Convolution2D(c_in, c_out, 3, **conv)
            self.b = L.BatchNormalization(c_out, dtype=dtype, **(bn or {}))
        self.c.W.array = self.c.W.array.astype(dtype)
        if self.c.b is not None:
            self.c.b.array = numpy.random.RandomState(4).standard_normal(
                c_out).astype(dtype)
        _randomize(self.b, numpy.random.RandomState(3))

    def forward(self, x):
        if self.cover_all:
            h = F.convolution_2d(x, self.c.W, self.c.b, cover_all=True,
                                 **self.conv_args)
        else:
            h = self.c(x)
        return self.b(h)


def _inference(fn, calls, fused, jitted=None):
    with chainer.using_config('train', False):
        jitted = testing.assert_jit_matches_eager(
            fn, calls, rtol=1e-4, atol=1e-5, jitted=jitted)
    text = str(jitted.cache_entries()[0].graph)
    assert (FUSED in text) == fused, text
    return jitted


def _images(rng, shape, n=3, dtype=numpy.float32):
    return [(rng.standard_normal(shape).astype(dtype),) for _ in range(n)]


CONV_BN_CASES = {
    'plain': (dict(), (2, 3, 7, 7)),
    'stride_pad': (dict(stride=2, pad=1), (2, 3, 8, 8)),
    'dilate': (dict(dilate=2, pad=2), (2, 3, 9, 9)),
    'stride_3x2': (dict(stride=(3, 2), pad=(0, 1)), (2, 3, 10, 9)),
    'nobias': (dict(nobias=True), (2, 3, 7, 7)),
    'cover_all': (dict(stride=2, cover_all=True), (2, 3, 8, 8)),
    'cover_all_pad': (dict(stride=3, pad=1, cover_all=True), (2, 3, 8, 8)),
    'float64': (dict(dtype=numpy.float64), (2, 3, 7, 7)),
    'no_gamma': (dict(bn=dict(use_gamma=False)), (2, 3, 7, 7)),
    'no_beta': (dict(bn=dict(use_beta=False)), (2, 3, 7, 7)),
    'bare': (dict(nobias=True, bn=dict(use_gamma=False, use_beta=False)),
             (2, 3, 7, 7)),
    'large_eps': (dict(bn=dict(eps=0.5)), (2, 3, 7, 7)),
    'one_image_one_channel': (dict(c_in=1, c_out=1), (1, 1, 3, 3)),
}


@pytest.mark.parametrize('case', sorted(CONV_BN_CASES))
def test_convolution_and_normalization_fuse_and_match_eager(case):
    kwargs, shape = CONV_BN_CASES[case]
    numpy.random.seed(0)
    dtype = kwargs.get('dtype', numpy.float32)
    model = _ConvBN(**kwargs)
    _inference(model.forward,
               _images(numpy.random.RandomState(12), shape, dtype=dtype),
               fused=True)


def test_grouped_convolution_is_not_fused_and_matches():
    numpy.random.seed(0)
    model = _ConvBN(c_in=4, c_out=4, groups=2)
    _inference(model.forward, _images(numpy.random.RandomState(13),
                                      (2, 4, 7, 7)), fused=False)


def test_double_precision_normalization_after_a_float32_convolution():
    numpy.random.seed(0)
    model = _ConvBN(dtype=numpy.float64)
    model.c.W.array = model.c.W.array.astype(numpy.float32)
    model.c.b.array = model.c.b.array.astype(numpy.float32)
    _inference(model.forward, _images(numpy.random.RandomState(14),
                                      (2, 3, 7, 7)), fused=True)


def test_a_convolution_read_elsewhere_keeps_its_normalization():
    numpy.random.seed(0)
    model = _ConvBN()

    def returned(x):
        h = model.c(x)
        return model.b(h), h

    def also_used(x):
        h = model.c(x)
        return model.b(h) + F.relu(h)
    calls = _images(numpy.random.RandomState(15), (2, 3, 7, 7))
    _inference(returned, calls, fused=False)
    _inference(also_used, calls, fused=False)


def test_statistics_as_arguments_and_normalizations_after_it():
    def f(x, W, b, gamma, beta, mean, var):
        h = F.convolution_2d(x, W, b, pad=1)
        y = F.fixed_batch_normalization(h, gamma, beta, mean, var, eps=1e-3)
        return F.relu(y)[:, ::2]
    rng = numpy.random.RandomState(16)
    calls = [(rng.standard_normal((2, 3, 5, 5)).astype(numpy.float32),
              rng.standard_normal((4, 3, 3, 3)).astype(numpy.float32),
              rng.standard_normal(4).astype(numpy.float32),
              rng.uniform(0.5, 1.5, 4).astype(numpy.float32),
              rng.standard_normal(4).astype(numpy.float32),
              rng.standard_normal(4).astype(numpy.float32),
              rng.uniform(0.5, 2.0, 4).astype(numpy.float32))
             for _ in range(3)]
    _inference(f, calls, fused=True)


def _scale_mean(model):
    model.b.avg_mean = model.b.avg_mean + 1


def _scale_var(model):
    model.b.avg_var *= 3


def _new_gamma(model):
    model.b.gamma.array = model.b.gamma.array * -2


def _shift_beta(model):
    model.b.beta.data[...] += 5


def _halve_filter(model):
    model.c.W.array[...] *= 0.5


def _new_bias(model):
    model.c.b.array = model.c.b.array + 1


@pytest.mark.parametrize('change', [_scale_mean, _scale_var, _new_gamma,
                                    _shift_beta, _halve_filter, _new_bias])
def test_changed_statistics_and_weights_are_read_on_each_call(change):
    numpy.random.seed(0)
    model = _ConvBN()
    calls = _images(numpy.random.RandomState(17), (2, 3, 7, 7))
    jitted = _inference(model.forward, calls, fused=True)
    change(model)
    _inference(model.forward, calls, fused=True, jitted=jitted)
    assert jitted.cache_info().currsize == 1


@pytest.mark.parametrize('attr,value', [('eps', 0.7)])
def test_changed_epsilon_recompiles(attr, value):
    numpy.random.seed(0)
    model = _ConvBN()
    calls = _images(numpy.random.RandomState(18), (2, 3, 7, 7))
    jitted = _inference(model.forward, calls, fused=True)
    setattr(model.b, attr, value)
    _inference(model.forward, calls, fused=True, jitted=jitted)


def test_convolution_and_normalization_in_a_loop():
    numpy.random.seed(0)
    model = _ConvBN(c_in=4, c_out=4, pad=1)

    def f(xs):
        h = xs[0]
        for t in range(xs.shape[0]):
            h = F.relu(model.b(model.c(h))) + xs[t]
        return h
    rng = numpy.random.RandomState(19)
    calls = [(rng.standard_normal((t, 2, 4, 5, 5)).astype(numpy.float32),)
             for t in LENGTHS]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', chainerjit.errors.LoopWarning)
        _inference(f, calls, fused=True)


def test_deconvolution_keeps_its_normalization():
    class DeconvBN(chainer.Chain):
        def __init__(self):
            super(DeconvBN, self).__init__()
            with self.init_scope():
                self.c = L.Deconvolution2D(3, 4, 3)
                self.b = L.BatchNormalization(4)
            _randomize(self.b, numpy.random.RandomState(3))

        def forward(self, x):
            return self.b(self.c(x))
    numpy.random.seed(0)
    _inference(DeconvBN().forward, _images(numpy.random.RandomState(20),
                                           (2, 3, 5, 5)), fused=False)


def test_normalization_over_other_axes_is_not_fused():
    class ConvBNAxes(chainer.Chain):
        def __init__(self):
            super(ConvBNAxes, self).__init__()
            with self.init_scope():
                self.c = L.Convolution2D(3, 4, 3)
                self.b = L.BatchNormalization((4, 5, 5))
            _randomize(self.b, numpy.random.RandomState(3))

        def forward(self, x):
            return self.b(self.c(x))
    numpy.random.seed(0)
    _inference(ConvBNAxes().forward, _images(numpy.random.RandomState(21),
                                             (2, 3, 7, 7)), fused=False)


def test_switching_train_mode_between_calls_follows_eager():
    numpy.random.seed(0)
    eager = _ConvBN()
    jitted_model = copy.deepcopy(eager)
    jitted = chainerjit.jit(jitted_model.forward)
    rng = numpy.random.RandomState(22)
    for train in (False, False, True, True, False, True, False):
        x = rng.standard_normal((2, 3, 7, 7)).astype(numpy.float32)
        with chainer.using_config('train', train), \
                chainer.no_backprop_mode():
            expected = eager.forward(x)
            actual = jitted(x)
        testing.assert_results_equal(actual, expected, 1e-4, 1e-5)
        numpy.testing.assert_allclose(jitted_model.b.avg_mean,
                                      eager.b.avg_mean, rtol=1e-5)
        numpy.testing.assert_allclose(jitted_model.b.avg_var,
                                      eager.b.avg_var, rtol=1e-5)
    assert jitted.cache_info().hits > 0


def test_training_through_an_inference_normalization_is_not_fused():
    numpy.random.seed(0)
    model = _ConvBN()
    calls = _images(numpy.random.RandomState(23), (2, 3, 7, 7))
    with chainer.using_config('train', False):
        jitted = check_grads(None, calls, model=model, method='forward')
    assert FUSED not in str(jitted.cache_entries()[0].graph)


ONNX_CASES = ['plain', 'stride_pad', 'dilate', 'nobias', 'cover_all',
              'bare', 'no_gamma']


@pytest.mark.parametrize('case', ONNX_CASES)
def test_fused_convolution_exports_to_onnx(case):
    pytest.importorskip('onnxruntime')
    kwargs, shape = CONV_BN_CASES[case]
    numpy.random.seed(0)
    model = _ConvBN(**kwargs)
    testing.assert_onnx_matches_eager(
        model.forward, _images(numpy.random.RandomState(24), shape),
        rtol=1e-4, atol=1e-5, lowered=(FUSED.split('+')[0],))


def test_fused_convolution_exports_with_a_dynamic_batch():
    pytest.importorskip('onnxruntime')
    numpy.random.seed(0)
    model = _ConvBN(stride=2, pad=1)
    rng = numpy.random.RandomState(25)
    calls = _images(rng, (2, 3, 8, 8)) + _images(rng, (5, 3, 8, 8))
    testing.assert_onnx_matches_eager(model.forward, calls, rtol=1e-4,
                                      atol=1e-5, dynamic_batch=True)


def _sigmoid_gamma(x, W, gamma, beta, mean, var):
    h = F.convolution_2d(x, W, pad=1)
    return F.fixed_batch_normalization(h, F.sigmoid(gamma), beta, mean, var)


def _var_from_gamma(x, W, gamma, beta, mean, var):
    h = F.convolution_2d(x, W, pad=1)
    return F.fixed_batch_normalization(h, gamma, beta, mean,
                                       gamma * gamma + var)


@pytest.mark.parametrize('fn', [_sigmoid_gamma, _var_from_gamma])
def test_normalization_inputs_computed_after_the_convolution(fn):
    rng = numpy.random.RandomState(26)
    calls = [(rng.standard_normal((2, 3, 5, 5)).astype(numpy.float32),
              rng.standard_normal((4, 3, 3, 3)).astype(numpy.float32),
              rng.uniform(0.5, 1.5, 4).astype(numpy.float32),
              rng.standard_normal(4).astype(numpy.float32),
              rng.standard_normal(4).astype(numpy.float32),
              rng.uniform(0.5, 2.0, 4).astype(numpy.float32))
             for _ in range(3)]
    _inference(fn, calls, fused=True)
