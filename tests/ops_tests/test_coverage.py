"""The coverage report of chainer.functions."""

import chainer.functions

from chainerjit.ops import coverage


# Functions chainerjit must lower (test mode).
REQUIRED = [
    'linear', 'matmul', 'batch_matmul', 'relu', 'leaky_relu', 'sigmoid',
    'tanh', 'softmax', 'log_softmax', 'exp', 'log', 'sum', 'mean', 'max',
    'min', 'argmax', 'reshape', 'transpose', 'swapaxes', 'expand_dims',
    'squeeze', 'broadcast_to', 'concat', 'stack', 'split_axis',
    'get_item', 'where', 'cast', 'convolution_2d', 'deconvolution_2d',
    'max_pooling_2d', 'average_pooling_2d', 'fixed_batch_normalization',
    'layer_normalization', 'embed_id', 'softmax_cross_entropy',
    'mean_squared_error', 'add', 'maximum', 'minimum', 'sqrt', 'square',
]


def test_every_public_function_is_classified():
    rows = coverage.function_coverage()
    names = [name for name, _, _ in rows]
    assert 'relu' in names and 'convolution_2d' in names
    assert len(names) == len(set(names))
    for name, status, _ in rows:
        assert callable(getattr(chainer.functions, name))
        assert status in ('lowered', 'partly lowered', 'generic',
                          'composite')


def test_required_functions_are_lowered():
    status = {name: s for name, s, _ in coverage.function_coverage()}
    missing = [n for n in REQUIRED
               if status[n] not in ('lowered', 'partly lowered')]
    assert not missing, missing


def test_markdown_report():
    text = coverage.markdown()
    assert text.startswith('# Coverage of `chainer.functions`')
    assert '| `relu` | lowered | ReLU |' in text


def test_classes_a_forward_never_applies_are_not_counted():
    from chainer.functions.array import select_item
    from chainer.functions.math import minmax
    from chainer.functions.normalization import l2_normalization
    from chainer.functions.pooling import max_pooling_nd

    def names(module):
        return [c.__name__ for c in coverage._node_classes(module)]
    # Abstract bases of other nodes.
    assert names(minmax) == ['ArgMax', 'ArgMin', 'Max', 'Min']
    # Nodes that only a backward pass applies.
    assert names(l2_normalization) == ['NormalizeL2']
    assert names(select_item) == ['SelectItem']
    assert names(max_pooling_nd) == ['MaxPoolingND']
