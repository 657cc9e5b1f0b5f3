"""Keeping for the gradient what a forward op computes anyway."""

from chainerjit import ir
from chainerjit import ops


def keep_softmax(graph):
    """Makes each lowered softmax cross entropy of integer labels also
    return its softmax, which eager Chainer's forward computes and keeps
    for its gradient (``cache_score``), so that the compiled gradient
    reads it instead of computing the log-softmax and its exponential
    again (seven NumPy passes). The loss is the same; a program without
    a backward drops the softmax.

    Before::

        %11: f32[] = SoftmaxCrossEntropy(%10, t)

    After::

        %11: f32[], %12: f32[64,10] = SoftmaxCrossEntropy(%10, t)

    Loop bodies too.
    """
    changed = False
    for i, node in enumerate(graph.nodes):
        if node.region is not None:
            changed |= keep_softmax(node.region.body)[1]
        keep = getattr(node.kernel.fn, 'with_softmax', None) \
            if node.op == 'SoftmaxCrossEntropy' and not node.generic \
            else None
        if keep is None or len(node.outputs) != 1:
            continue
        graph.nodes[i] = _keeping(node, *keep)
        changed = True
    return graph, changed


def _keeping(node, fn, grad):
    x = node.inputs[0]
    softmax = ir.Value('temp', x.shape, x.dtype)
    softmax.symbols = x.symbols
    convert = node.kernel.onnx

    def to_onnx(b, ins, outs):
        convert(b, ins, outs[:1])
        b.op('Softmax', ins[:1], outs[1:], axis=1)
    kernel = node.kernel._replace(
        fn=fn, multi=True, grad=grad, onnx=convert and to_onnx,
        lengths=_with_softmax_rows(node.kernel.lengths))
    return ir.Node(node.op, kernel, node.inputs, node.outputs + [softmax],
                   node.attrs, loc=node.loc)


def _with_softmax_rows(rule):
    """The ``Kernel.lengths`` rule of a loss that also returns its softmax
    (with the rows of its input), from the loss's own rule."""
    if rule is None:
        return None

    def lengths(rows):
        found = rule(rows)
        if found is None or found.kernel is not None:
            return None
        return found._replace(outputs=found.outputs + (rows[0],))
    return ops.marked_like(lengths, rule)
