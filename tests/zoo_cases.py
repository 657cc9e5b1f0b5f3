"""The cases of the zoo: each builds one model of ``tests/zoo_models.py``,
names its input signatures and says what the comparison with eager
Chainer allows (tolerances, a fallback, an expected failure).
``test_zoo.py`` runs them, ``test_zoo_training.py`` trains them and
``onnx_tests/test_zoo_export.py`` exports them to ONNX."""

import collections

import chainer
import chainer.functions as F
import chainer.links as L
import numpy

from tests.zoo_models import _aliasing
from tests.zoo_models import _bad_shape
from tests.zoo_models import _bn_flag
from tests.zoo_models import _bn_randomized
from tests.zoo_models import _ce
from tests.zoo_models import _ce_sigs
from tests.zoo_models import _classifier
from tests.zoo_models import _data_if
from tests.zoo_models import _grab_bag
from tests.zoo_models import _ids
from tests.zoo_models import _ids_seq
from tests.zoo_models import _in_place
from tests.zoo_models import _labels
from tests.zoo_models import _labels_seq
from tests.zoo_models import _losses
from tests.zoo_models import _matmuls
from tests.zoo_models import _mlp
from tests.zoo_models import _perturb
from tests.zoo_models import _pooling_nd
from tests.zoo_models import _ported_numpy
from tests.zoo_models import _rand
from tests.zoo_models import _replace_link
from tests.zoo_models import _reset_every
from tests.zoo_models import _seqs
from tests.zoo_models import _stateful_sigs
from tests.zoo_models import _typed
from tests.zoo_models import _unpool_with_indexes
from tests.zoo_models import Accumulator
from tests.zoo_models import Attention
from tests.zoo_models import Chains
from tests.zoo_models import Counter
from tests.zoo_models import DictOut
from tests.zoo_models import Embed
from tests.zoo_models import f32
from tests.zoo_models import GRUModel
from tests.zoo_models import History
from tests.zoo_models import ListLoop
from tests.zoo_models import Noisy
from tests.zoo_models import NStep
from tests.zoo_models import OldStyle
from tests.zoo_models import one
from tests.zoo_models import Reporter
from tests.zoo_models import ResBlock
from tests.zoo_models import RunningCenter
from tests.zoo_models import seq
from tests.zoo_models import ShapeUser
from tests.zoo_models import Slope
from tests.zoo_models import StatefulLSTM
from tests.zoo_models import VGG


Case = collections.namedtuple(
    'Case', 'name build sigs train warmup rtol atol hook n_calls '
    'fallback_ok xfail scribble backprop')


def case(name, build, sigs, train=False, warmup=True, rtol=1e-5,
         atol=1e-6, hook=None, n_calls=3, fallback_ok=False, xfail=None,
         scribble=False, backprop=False):
    return Case(name, build, sigs, train, warmup, rtol, atol, hook,
                n_calls, fallback_ok, xfail, scribble, backprop)


def _split(made):
    if isinstance(made, dict):
        return made['args'], made.get('kwargs', {})
    return made, {}


CASES = [
    case('conv2d_stride_pad', seq(
        lambda m, x: m.c(x), c=L.Convolution2D(3, 4, 3, stride=2, pad=1)),
        [one(2, 3, 9, 9), one(1, 3, 7, 8)], rtol=1e-4,
        atol=1e-5),
    case('conv2d_dilate_groups', seq(
        lambda m, x: m.c2(m.c1(x)),
        c1=L.Convolution2D(4, 6, 3, pad=2, dilate=2, groups=2),
        c2=L.Convolution2D(6, 3, (2, 3), stride=(2, 1), groups=3)),
        [one(2, 4, 8, 8), one(3, 4, 6, 7)], rtol=1e-4,
        atol=1e-5),
    case('conv2d_lazy_batch0', seq(
        lambda m, x: m.c(x), c=L.Convolution2D(None, 2, 3)),
        [one(2, 3, 5, 5), one(0, 3, 5, 5)]),
    case('dilated_conv2d', seq(
        lambda m, x: m.c(x),
        c=L.DilatedConvolution2D(3, 4, 3, pad=2, dilate=2)),
        [one(2, 3, 8, 8), one(1, 3, 5, 6)], rtol=1e-4, atol=1e-5),
    case('deconv2d', seq(
        lambda m, x: m.d2(m.d1(x)),
        d1=L.Deconvolution2D(3, 4, 4, stride=2, pad=1),
        d2=L.Deconvolution2D(4, 2, 3, groups=2, outsize=None)),
        [one(2, 3, 4, 4), one(1, 3, 3, 5)], rtol=1e-4,
        atol=1e-5),
    case('deconv2d_outsize', seq(
        lambda m, x: m.d(x),
        d=L.Deconvolution2D(3, 2, 3, stride=2, outsize=(10, 10))),
        [one(2, 3, 5, 5), one(1, 3, 5, 5)], rtol=1e-4,
        atol=1e-5),
    case('depthwise_conv2d', seq(
        lambda m, x: m.c(x),
        c=L.DepthwiseConvolution2D(3, 2, 3, stride=1, pad=1)),
        [one(2, 3, 5, 5), one(1, 3, 6, 4)], rtol=1e-4,
        atol=1e-5),
    case('conv3d', seq(
        lambda m, x: m.d(F.relu(m.c(x))),
        c=L.ConvolutionND(3, 2, 3, 3, pad=1, stride=(1, 2, 1)),
        d=L.DeconvolutionND(3, 3, 2, 2, stride=2)),
        [one(2, 2, 4, 5, 3), one(1, 2, 3, 3, 3)], rtol=1e-4,
        atol=1e-5),
    case('pooling_nd', seq(_pooling_nd),
         [one(2, 2, 4, 4, 4), one(1, 3, 5, 6, 4)]),
    case('linear_n_batch_axes', seq(
        lambda m, x: m.fc(x, n_batch_axes=2), fc=L.Linear(None, 3)),
        [one(2, 3, 4), one(4, 1, 4), one(0, 2, 4)]),
    case('bilinear', seq(
        lambda m, a, b: m.b(a, b), b=L.Bilinear(3, 4, 5)),
        [lambda r: (_rand(r, 2, 3), _rand(r, 2, 4)),
         lambda r: (_rand(r, 1, 3), _rand(r, 1, 4))]),
    case('embed_id_ignore_label', Embed, [_ids(3, 4), _ids(1, 2)]),
    case('highway_maxout', seq(
        lambda m, x: m.m(m.h(x)), h=L.Highway(5), m=L.Maxout(5, 4, 3)),
        [one(3, 5), one(1, 5)]),
    case('mlp_conv_inception', seq(
        lambda m, x: m.i(m.m(x)),
        m=L.MLPConvolution2D(3, (4, 5), 3, pad=1),
        i=L.Inception(5, 2, 2, 3, 2, 3, 2)),
        [one(2, 3, 6, 6), one(1, 3, 5, 7)], rtol=1e-4,
        atol=1e-5),
    case('nstep_lstm', lambda: NStep(L.NStepLSTM, 2, 3, 4, 0.0),
         [_seqs(4, 3, 1), _seqs(2, 2)], rtol=1e-4, atol=1e-5),
    case('nstep_gru', lambda: NStep(L.NStepGRU, 1, 3, 4, 0.0),
         [_seqs(3, 2), _seqs(5, 1, 1)], rtol=1e-4, atol=1e-5),
    case('nstep_bilstm', lambda: NStep(L.NStepBiLSTM, 2, 3, 2, 0.0),
         [_seqs(3, 3), _seqs(4, 2, 1)], rtol=1e-4, atol=1e-5),
    case('nstep_lstm_dropout_train',
         lambda: NStep(L.NStepLSTM, 2, 3, 4, 0.5),
         [_seqs(4, 3, 1), _seqs(2, 2)], train=True, rtol=1e-4, atol=1e-5),
    case('lstm_stateful', StatefulLSTM,
         [_stateful_sigs(3), _stateful_sigs(2)], n_calls=4,
         hook=_reset_every(3), rtol=1e-4, atol=1e-5),
    case('lstm_shrinking_batch', StatefulLSTM,
         [lambda rng: (_rand(rng, 3, 3),), lambda rng: (_rand(rng, 2, 3),),
          lambda rng: (_rand(rng, 1, 3),)], warmup=False, rtol=1e-4,
         atol=1e-5),
    case('stateful_gru', GRUModel, [_stateful_sigs(2), _stateful_sigs(1)],
         n_calls=4, hook=_reset_every(3), rtol=1e-4, atol=1e-5),
    case('stateless_lstm', seq(
        lambda m, c, h, x: m.s(c, h, x), s=L.StatelessLSTM(3, 4)),
        [lambda r: (_rand(r, 2, 4), _rand(r, 2, 4), _rand(r, 2, 3)),
         lambda r: (None, None, _rand(r, 1, 3))]),
    case('batchnorm_test', seq(
        lambda m, x: m.bn(x), bn=_bn_randomized(3)),
        [one(4, 3, 2, 2), one(1, 3), one(0, 3)],
        rtol=1e-4, atol=1e-5),
    case('batchnorm_train', seq(
        lambda m, x: m.bn2(F.relu(m.bn(x))), bn=_bn_randomized(3),
        bn2=L.BatchNormalization(3, decay=0.5)),
        [one(4, 3, 2, 2), one(5, 3)], train=True, n_calls=4,
        rtol=1e-4, atol=1e-5),
    # N, a Python int persistent, changes every call: a miss every call.
    case('batchnorm_finetune', seq(
        lambda m, x: m.bn(x, finetune=True), bn=_bn_randomized(3)),
        [one(4, 3), one(2, 3, 3)], train=True, n_calls=4,
        rtol=1e-4, atol=1e-5, fallback_ok=True),
    case('batchnorm_axis', seq(
        lambda m, x: m.bn(x),
        bn=L.BatchNormalization(axis=(0, 2), size=None)),
        [one(3, 4, 2), one(2, 4, 5)], train=True, rtol=1e-4, atol=1e-5),
    case('batch_renorm_train', seq(
        lambda m, x: m.bn(x),
        bn=L.BatchRenormalization(3, rmax=1.5, dmax=0.5)),
        [one(4, 3), one(6, 3)], train=True, rtol=1e-4, atol=1e-5),
    case('group_layer_norm', seq(
        lambda m, x: m.ln(F.reshape(m.gn(x), (x.shape[0], -1))),
        gn=L.GroupNormalization(2, 4), ln=L.LayerNormalization(None)),
        [one(3, 4, 2, 2), one(1, 4, 2, 2)], rtol=1e-4,
        atol=1e-5),
    case('resnet_block_test', ResBlock,
         [one(2, 4, 5, 5), one(1, 4, 3, 4)], rtol=1e-4,
         atol=1e-4),
    case('resnet_block_train', ResBlock,
         [one(2, 4, 5, 5), one(3, 4, 3, 4)], train=True,
         rtol=1e-4, atol=1e-4),
    case('vgg_like', VGG, [one(2, 3, 8, 8), one(1, 3, 8, 8)],
         rtol=1e-4, atol=1e-5),
    case('dropout_train', seq(
        lambda m, x: F.dropout(m.fc(F.dropout(x, 0.3)), 0.5),
        fc=L.Linear(6, 6)),
        [one(4, 6), one(2, 6)], train=True),
    case('dropout_test', seq(
        lambda m, x: F.dropout(m.fc(x), 0.5), fc=L.Linear(6, 6)),
        [one(4, 6), one(2, 6)]),
    case('gaussian_noise', seq(
        lambda m, x: F.gaussian(m.fc(x), F.log(F.absolute(x) + 1)),
        fc=L.Linear(6, 6)),
        [one(3, 6), one(2, 6)]),
    case('numpy_random_in_forward', Noisy,
         [one(3, 4), one(1, 4)], fallback_ok=True),
    case('attention_where_mask', Attention,
         [lambda r: (_rand(r, 2, 4, 6), numpy.array([4, 2])),
          lambda r: (_rand(r, 3, 3, 6), numpy.array([1, 3, 2]))],
         rtol=1e-4, atol=1e-5),
    case('dict_tuple_python_values', DictOut,
         [lambda r: ([_rand(r, 2, 3), _rand(r, 2, 3)],),
          lambda r: ([_rand(r, 1, 3)],),
          lambda r: {'args': ([_rand(r, 2, 3)],),
                     'kwargs': {'scale': 0.5}}]),
    case('sequential', _mlp, [one(3, 4), one(1, 4),
                              one(0, 4)]),
    case('chain_list', Chains, [one(3, 4), one(1, 4)]),
    case('shape_user', ShapeUser, [one(3, 2, 4), one(1, 2, 4)]),
    case('list_loop', ListLoop,
         [lambda r: ([_rand(r, 2, 4) for _ in range(3)],),
          lambda r: ([_rand(r, 2, 4)],)]),
    case('classifier', _classifier, [_labels(4), _labels(1)]),
    case('float64_model', _typed(numpy.float64, VGG),
         [one(2, 3, 8, 8, dtype=numpy.float64),
          one(1, 3, 8, 8, dtype=numpy.float64)]),
    case('float16_model', _typed(numpy.float16, ResBlock),
         [one(2, 4, 5, 5, dtype=numpy.float16),
          one(1, 4, 3, 3, dtype=numpy.float16)],
         rtol=1e-2, atol=1e-2),
    case('float16_train_bn', _typed(numpy.float16, seq(
        lambda m, x: m.bn(x), bn=L.BatchNormalization(3))),
        [one(4, 3, dtype=numpy.float16),
         one(2, 3, 2, dtype=numpy.float16)], train=True,
        rtol=1e-2, atol=1e-2),
    case('grab_bag', seq(_grab_bag), [one(2, 3, 6, 6),
                                      one(1, 3, 4, 5)], rtol=1e-4,
         atol=1e-5),
    case('matmuls', seq(_matmuls),
         [lambda r: (_rand(r, 2, 3, 4), _rand(r, 2, 5, 4)),
          lambda r: (_rand(r, 1, 2, 3), _rand(r, 1, 4, 3))],
         rtol=1e-4, atol=1e-5),
    case('losses_ignore_label', seq(_losses),
         [_ce_sigs(5), _ce_sigs(2)], rtol=1e-4, atol=1e-5),
    # calls, a Python int persistent, changes every call: always a miss.
    case('python_int_persistent', Counter, [one(2, 3), one(1, 3)],
         fallback_ok=True),
    case('report_and_attributes', Reporter, [one(2, 3), one(1, 3)]),
    # Documented: NumPy with out= on an input-derived array runs eagerly.
    case('numpy_in_place_persistent', Accumulator, [one(2, 3), one(1, 3)],
         fallback_ok=True),
    case('python_list_history', History, [one(2, 3), one(1, 3)],
         fallback_ok=True),
    case('user_function_node_with_state', RunningCenter,
         [one(2, 3), one(4, 3)]),
    case('old_style_function', OldStyle,
         [one(2, 3), one(4, 3),
          lambda r: {'args': (_rand(r, 2, 3),), 'kwargs': {'k': -1.0}}]),
    case('embed_id_out_of_range', seq(lambda m, x: m.e(x),
                                      e=L.EmbedID(5, 2)),
         [_ids_seq([[0, 1], [2, 3], [4, 7]]),
          _ids_seq([[1, -2], [0, 2], [-1, 4]])]),
    case('cross_entropy_bad_label', seq(_ce),
         [_labels_seq([[0, 1], [2, 3], [1, 9]]),
          _labels_seq([[2, -1], [0, 1], [3, 1]])]),
    case('0d_array_arguments', seq(
        lambda m, x, a, b: m.fc(x) * a + b, fc=L.Linear(3, 3)),
        [lambda r: (_rand(r, 2, 3), numpy.array(r.randn(), f32),
                    numpy.array(r.randn(), f32)),
         lambda r: (_rand(r, 2, 3), numpy.array(r.randn(), f32),
                    numpy.array(r.randint(5), numpy.int32))]),
    # Python and NumPy scalars are static: a new value is a miss.
    case('scalar_arguments', seq(
        lambda m, x, a, b: m.fc(x) * a + b, fc=L.Linear(3, 3)),
        [lambda r: (_rand(r, 2, 3), numpy.float32(r.randn()), 0.5),
         lambda r: (_rand(r, 2, 3), float(r.randn()), r.randint(5))],
        fallback_ok=True),
    case('dict_argument', seq(
        lambda m, batch: F.softmax_cross_entropy(m.fc(batch['x']),
                                                 batch['t']),
        fc=L.Linear(3, 3)),
        [lambda r: ({'x': _rand(r, 2, 3), 't': r.randint(0, 3, 2)},),
         lambda r: ({'x': _rand(r, 4, 3), 't': r.randint(0, 3, 4)},)]),
    case('numpy_results_returned', seq(
        lambda m, x: (m.fc(x), m.fc(x).array.max(axis=1),
                      x.array.T + 1, x.shape[0]),
        fc=L.Linear(3, 3)),
        [lambda r: (chainer.Variable(_rand(r, 2, 3)),),
         lambda r: (chainer.Variable(_rand(r, 1, 3)),)]),
    # Documented: a NumPy scalar from the data is a Python value.
    case('numpy_scalar_returned', seq(
        lambda m, x: (m.fc(x), m.fc(x).array.sum()), fc=L.Linear(3, 3)),
        [one(2, 3), one(1, 3)], fallback_ok=True),
    case('pooling_indices_reused', seq(_unpool_with_indexes),
         [one(2, 2, 4, 4), one(1, 2, 6, 4)], fallback_ok=True),
    case('data_dependent_if', seq(_data_if, fc=L.Linear(3, 3)),
         [one(2, 3), one(1, 3)], fallback_ok=True),
    case('params_changed_between_calls', seq(
        lambda m, x: m.fc(x), fc=L.Linear(3, 3)),
        [one(2, 3), one(1, 3)], hook=_perturb),
    case('link_replaced_between_calls', seq(
        lambda m, x: m.fc(x), fc=L.Linear(3, 3)),
        [one(2, 3), one(1, 3)], hook=_replace_link),
    case('bn_flag_argument', seq(_bn_flag, bn=L.BatchNormalization(3)),
         [lambda r: (_rand(r, 4, 3), True),
          lambda r: (_rand(r, 4, 3), False)],
         rtol=1e-4, atol=1e-5),
    case('backprop_enabled_eager_path', ResBlock,
         [one(2, 4, 3, 3), one(1, 4, 3, 3)], train=True, backprop=True,
         rtol=1e-4, atol=1e-4),
    case('variable_inputs_requiring_grad', seq(
        lambda m, x, y: m.fc(x) + y, fc=L.Linear(3, 3)),
        [lambda r: (chainer.Variable(_rand(r, 2, 3)),
                    chainer.Variable(_rand(r, 2, 3), requires_grad=False)),
         lambda r: (chainer.Variable(_rand(r, 1, 3), requires_grad=False),
                    _rand(r, 1, 3))]),
    case('dropconnect_zoneout_train', seq(
        lambda m, x, h: (
            F.simplified_dropconnect(x, m.fc.W, m.fc.b, 0.3),
            F.zoneout(h, x[:, :3] * 2, 0.4)),
        fc=L.Linear(4, 3)),
        [lambda r: (_rand(r, 5, 4), _rand(r, 5, 3)),
         lambda r: (_rand(r, 1, 4), _rand(r, 1, 3))], train=True),
    case('constant_output_scribbled', seq(
        lambda m, x: (m.fc(x), numpy.ones(3, f32),
                      chainer.Variable(numpy.arange(3, dtype=f32)),
                      F.identity(numpy.full((2,), 3, f32))),
        fc=L.Linear(3, 3)),
        [one(2, 3), one(1, 3)], scribble=True),
    case('param_views_scribbled', seq(
        lambda m, x: (m.fc(x), F.reshape(m.fc.b, (1, 3)), m.fc.W[0],
                      F.identity(m.fc.b)),
        fc=L.Linear(3, 3)),
        [one(2, 3), one(1, 3)], scribble=True),
    case('lstm_stateful_scribbled', StatefulLSTM,
         [_stateful_sigs(3), _stateful_sigs(2)], n_calls=4,
         hook=_reset_every(3), rtol=1e-4, atol=1e-5, scribble=True),
    case('batchnorm_train_scribbled', seq(
        lambda m, x: m.bn(x), bn=L.BatchNormalization(3)),
        [one(4, 3), one(2, 3)], train=True, scribble=True, rtol=1e-4,
        atol=1e-5),
    case('dropout_scribbled', seq(
        lambda m, x: F.dropout(x, 0.5)),
        [one(4, 3), one(2, 3)], train=True, scribble=True),
    case('nstep_lstm_with_state', seq(
        lambda m, h, c, xs: m.r(h, c, xs), r=L.NStepLSTM(1, 3, 2, 0.0)),
        [lambda r: (_rand(r, 1, 2, 2), _rand(r, 1, 2, 2),
                    [_rand(r, 3, 3), _rand(r, 2, 3)]),
         lambda r: (_rand(r, 1, 1, 2), None, [_rand(r, 2, 3)])],
        rtol=1e-4, atol=1e-5),
    case('prelu_scale_bias', seq(
        lambda m, x: m.b(m.s(m.p(x))), p=L.PReLU((3,)),
        s=L.Scale(axis=1, W_shape=(3,)), b=L.Bias(axis=1, shape=(3,))),
        [one(2, 3, 4), one(1, 3, 2)]),
    case('aliased_outputs', seq(_aliasing, fc=L.Linear(3, 3)),
         [lambda r: (_rand(r, 2, 3), _rand(r, 2)),
          lambda r: (_rand(r, 1, 3), _rand(r, 3))]),
    case('in_place_on_output', seq(_in_place, fc=L.Linear(3, 3)),
         [one(2, 3), one(4, 3)], fallback_ok=True),
    case('raises_like_eager', seq(_bad_shape, fc=L.Linear(3, 3)),
         [one(2, 3), one(2, 4), one(2, 3)]),
    case('numpy_on_arrays', seq(_ported_numpy, fc=L.Linear(3, 3)),
         [one(2, 3), one(3, 3)]),
    case('leaky_relu_slope_attr', Slope, [one(2, 3), one(3, 3)],
         hook=lambda m, s, i: setattr(m, 'slope', 0.1 * (i + 1))),
]
