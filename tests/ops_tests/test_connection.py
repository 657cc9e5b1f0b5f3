import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from chainerjit import testing
from tests.ops_tests.common import DTYPES
from tests.ops_tests.common import calls_of
from tests.ops_tests.common import make_calls


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('bias', [True, False])
def test_linear(rng, dtype, bias):
    shape_sets = [[(3, 4), (5, 4), (5,)], [(0, 4), (5, 4), (5,)]]
    if not bias:
        shape_sets = [s[:2] for s in shape_sets]
    testing.assert_jit_matches_eager(
        lambda *args: F.linear(*args), calls_of(rng, shape_sets, dtype),
        expect_entries=2, lowered=['LinearFunction'])


@pytest.mark.parametrize('dtype', DTYPES)
def test_linear_n_batch_axes(rng, dtype):
    # F.linear reshapes x with ``x.reshape``: a Variable records it.
    testing.assert_jit_matches_eager(
        lambda x, W, b: F.linear(
            chainer.as_variable(x), W, b, n_batch_axes=2),
        make_calls(rng, [(2, 3, 4), (5, 4), (5,)], dtype),
        expect_entries=1, lowered=['LinearFunction'])


CONV_CASES = [
    # x shape, W shape, options
    ((2, 3, 7, 6), (4, 3, 3, 3), {}),
    ((1, 3, 8, 9), (2, 3, 3, 2), {'stride': 2, 'pad': 1}),
    ((2, 2, 7, 7), (3, 2, 3, 3), {'stride': (2, 1), 'pad': (0, 2),
                                  'cover_all': True}),
    ((1, 2, 9, 9), (2, 2, 3, 3), {'dilate': 2, 'pad': 1}),
    ((2, 4, 6, 6), (6, 2, 3, 3), {'groups': 2, 'pad': 1}),
    ((0, 3, 5, 5), (2, 3, 3, 3), {}),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('x_shape,w_shape,options', CONV_CASES)
def test_convolution_2d(rng, dtype, bias, x_shape, w_shape, options):
    shapes = [x_shape, w_shape] + ([(w_shape[0],)] if bias else [])
    testing.assert_jit_matches_eager(
        lambda *args: F.convolution_2d(*args, **options),
        make_calls(rng, shapes, dtype), rtol=1e-4, atol=1e-5,
        expect_entries=1, lowered=['Convolution2DFunction'])


CONV_ND_CASES = [
    # x shape, W shape, options: one, two and three spatial axes
    ((2, 3, 9), (4, 3, 3), {}),
    ((2, 3, 10), (4, 3, 2), {'stride': 2, 'pad': 1, 'cover_all': True}),
    ((1, 2, 9), (2, 2, 3), {'dilate': 2}),
    ((2, 4, 6), (6, 2, 3), {'groups': 2, 'pad': 1}),
    ((1, 2, 5, 6), (3, 2, 3, 3), {'pad': (1, 0)}),
    ((1, 2, 4, 5, 4), (2, 2, 2, 3, 2), {'stride': (1, 2, 1)}),
    ((0, 3, 5), (2, 3, 3), {}),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('x_shape,w_shape,options', CONV_ND_CASES)
def test_convolution_nd(rng, dtype, bias, x_shape, w_shape, options):
    shapes = [x_shape, w_shape] + ([(w_shape[0],)] if bias else [])
    testing.assert_jit_matches_eager(
        lambda *args: F.convolution_nd(*args, **options),
        make_calls(rng, shapes, dtype), rtol=1e-4, atol=1e-5,
        expect_entries=1, lowered=['ConvolutionND'])


DECONV_CASES = [
    # x shape, W shape (in, out / groups, kh, kw), options
    ((2, 3, 4, 5), (3, 2, 3, 3), {}),
    ((1, 3, 4, 4), (3, 2, 3, 2), {'stride': 2, 'pad': 1}),
    ((2, 2, 3, 4), (2, 3, 3, 3), {'stride': 2, 'outsize': (8, 10)}),
    ((1, 2, 4, 4), (2, 2, 3, 3), {'dilate': 2, 'pad': 1}),
    ((2, 4, 3, 3), (4, 3, 3, 3), {'groups': 2, 'stride': 2}),
    ((0, 3, 4, 4), (3, 2, 3, 3), {}),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('x_shape,w_shape,options', DECONV_CASES)
def test_deconvolution_2d(rng, dtype, bias, x_shape, w_shape, options):
    out_channels = w_shape[1] * options.get('groups', 1)
    shapes = [x_shape, w_shape] + ([(out_channels,)] if bias else [])
    testing.assert_jit_matches_eager(
        lambda *args: F.deconvolution_2d(*args, **options),
        make_calls(rng, shapes, dtype), rtol=1e-4, atol=1e-5,
        expect_entries=1, lowered=['Deconvolution2DFunction'])


DECONV_ND_CASES = [
    # x shape, W shape (in, out / groups, k...), options
    ((2, 3, 5), (3, 2, 3), {}),
    ((1, 3, 4), (3, 2, 2), {'stride': 2, 'pad': 1}),
    ((2, 2, 4), (2, 3, 3), {'stride': 2, 'outsize': (10,)}),
    ((1, 2, 5), (2, 2, 3), {'dilate': 2, 'pad': 1}),
    ((2, 4, 3), (4, 3, 3), {'groups': 2, 'stride': 2}),
    ((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), {'stride': (1, 2, 1)}),
    ((0, 3, 4), (3, 2, 3), {}),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('x_shape,w_shape,options', DECONV_ND_CASES)
def test_deconvolution_nd(rng, dtype, bias, x_shape, w_shape, options):
    out_channels = w_shape[1] * options.get('groups', 1)
    shapes = [x_shape, w_shape] + ([(out_channels,)] if bias else [])
    testing.assert_jit_matches_eager(
        lambda *args: F.deconvolution_nd(*args, **options),
        make_calls(rng, shapes, dtype), rtol=1e-4, atol=1e-5,
        expect_entries=1, lowered=['DeconvolutionND'])


def _embed_calls(rng, ids_shape, n_vocab, dtype, ignore_label):
    low = -1 if ignore_label is not None else 0
    return [(rng.randint(low, n_vocab, size=ids_shape).astype(numpy.int32),
             rng.standard_normal((n_vocab, 3)).astype(dtype))
            for _ in range(3)]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('ignore_label', [None, -1])
@pytest.mark.parametrize('ids_shape', [(5,), (2, 4), (0,)])
def test_embed_id(rng, dtype, ignore_label, ids_shape):
    testing.assert_jit_matches_eager(
        lambda x, W: F.embed_id(x, W, ignore_label=ignore_label),
        _embed_calls(rng, ids_shape, 6, dtype, ignore_label),
        expect_entries=1, lowered=['EmbedIDFunction'])


class _ConvNet(chainer.Chain):

    def __init__(self):
        super(_ConvNet, self).__init__()
        with self.init_scope():
            self.conv = L.Convolution2D(3, 4, 3, pad=1)
            self.deconv = L.Deconvolution2D(4, 2, 2, stride=2)
            self.embed = L.EmbedID(6, 4)
            self.fc = L.Linear(None, 5)

    def forward(self, x, ids):
        h = self.deconv(F.relu(self.conv(x)))
        return self.fc(h) + self.fc(self.embed(ids))


def test_links(rng):
    model = _ConvNet()
    calls = [(x, rng.randint(0, 6, size=(2, 8, 4)).astype(numpy.int32))
             for x, in make_calls(rng, [(2, 3, 4, 4)], numpy.float32)]
    with chainer.using_config('train', False):
        testing.assert_jit_matches_eager(
            model.forward, calls, rtol=1e-4, atol=1e-5, expect_entries=1,
            lowered=['Convolution2DFunction', 'Deconvolution2DFunction',
                     'EmbedIDFunction', 'LinearFunction'])


SHIFT_CASES = [
    # x shape, ksize, dilate: channels left over for the last group,
    # rectangular windows, negative dilations, shifts past the border,
    # an empty batch
    ((2, 9, 4, 5), 3, 1),
    ((1, 11, 5, 6), 3, 2),
    ((2, 16, 6, 7), (3, 5), (1, 2)),
    ((2, 4, 3, 4), (1, 3), 1),
    ((1, 9, 5, 5), 3, (-1, 2)),
    ((1, 10, 3, 3), 3, 4),
    ((0, 9, 4, 4), 3, 1),
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('x_shape,ksize,dilate', SHIFT_CASES)
def test_shift(rng, dtype, x_shape, ksize, dilate):
    testing.assert_jit_matches_eager(
        lambda x: F.shift(x, ksize, dilate),
        make_calls(rng, [x_shape], dtype), rtol=0, atol=0,
        expect_entries=1, lowered=['Shift'])
