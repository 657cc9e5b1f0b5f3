"""A fast path for Chainer's softmax cross entropy and mean squared error
on a jitted forward's output, identical in what it computes.

The usual training step computes its loss eagerly on what the jitted
forward returns: ``F.softmax_cross_entropy(model(x), t)``. Once the model
runs compiled, that one eager op is a large share of the step (at batch 64
of an MLP, more than the compiled backward's bookkeeping): Chainer's
``FunctionNode.apply`` enters device and hook contexts, and its backward
applies a second node, ``_SoftmaxCrossEntropyGrad_NoDoubleBackprop``,
through the same steps, for a gradient of a few passes over a (64, 10)
array.

Installed, it gives ``SoftmaxCrossEntropy`` an ``apply`` that, where its
input is a chainerjit node's output and the call is plain (NumPy arrays,
no function hooks, no debug mode: ``_calls.lean_apply``), runs
Chainer's own type check and links the node as ``FunctionNode.apply``
does, without the steps that do nothing there. For the labels' mean loss
of a 2-D input without class weights (the usual classifier's), the
forward then runs the lowering's C loops (``ops/loss.py``: the
log-softmax and the picked log-probabilities' sum in NumPy's order, with
NumPy's own ``exp`` and ``log``), and the backward the gradient's C loop
(``_loops_softmax.softmax_ce_grad``), where no function hook or double
backprop would see the grad node. Both are Chainer's arithmetic bit for
bit (``tests/fastpaths_tests/test_losses.py``) and keep on the node what
Chainer's forward keeps; anything else takes Chainer's own code. The loss
Variable's creator is Chainer's ``SoftmaxCrossEntropy`` node either way.

``Accuracy`` (which ``L.Classifier`` computes on every call) gets the
same ``apply``, and so does ``MeanSquaredError``; its ``backward``, which
Chainer writes with Variables (four nodes applied: a subtraction, a
broadcast, two products), runs the same formulas on arrays, its
lowering's gradient rule, where nothing would see those nodes: 1.9x
faster for a small regression model's training step.

It is installed with the other fast paths
(``chainerjit.fastpaths``); set the environment variable
``CHAINERJIT_FAST_LOSS=0`` to keep Chainer's own ``apply``,
``forward_cpu`` and ``backward``.
"""

import functools

import chainer
from chainer.functions.loss import mean_squared_error
from chainer.functions.loss import softmax_cross_entropy
import numpy

from chainerjit import ops
from chainerjit.ops import _loops_softmax
from chainerjit.ops import activation as activation_ops
from chainerjit.ops import loss as loss_ops
from chainerjit.runtime import _calls

_SoftmaxCrossEntropy = softmax_cross_entropy.SoftmaxCrossEntropy
_chainer_forward_cpu = _SoftmaxCrossEntropy.forward_cpu
_chainer_backward = _SoftmaxCrossEntropy.backward
_MeanSquaredError = mean_squared_error.MeanSquaredError
_chainer_mse_backward = _MeanSquaredError.backward


def apply(self, inputs):
    """``FunctionNode.apply``, lean (``_calls.lean_apply``) where an
    input is the output of a jitted forward, outside a recording.
    Otherwise the ``apply`` ``FunctionNode`` has now, which a recording
    wraps (``frontend.recording_patches``)."""
    if _calls.takes_jitted_output(inputs):
        self._chainerjit_lean = True
        return _calls.lean_apply(self, inputs)
    return chainer.FunctionNode.apply(self, inputs)


def forward_cpu(self, inputs):
    """The labels' mean loss (a 2-d input, no class weights) where
    :func:`apply` took the call, with ``ops/loss.py``'s C loops for the
    log-softmax and the loss (bit for bit), keeping what Chainer's
    ``forward_cpu`` keeps for the backward; Chainer's own otherwise."""
    x, t = inputs
    if self.__dict__.get('_chainerjit_lean') and self.reduce == 'mean' and \
            self.class_weight is None and x.ndim == 2 and t.ndim == 1 and \
            not chainer.is_debug():
        log_y = activation_ops.log_softmax_rows(x)
        found = loss_ops.mean_label_loss(log_y, t, self.ignore_label,
                                         self.normalize)
        if found is not None:
            self.retain_inputs((0, 1))
            if self.cache_score:
                self.y = numpy.exp(log_y)
            loss, self._coeff = found
            return loss,
    return _chainer_forward_cpu(self, inputs)


def backward(self, indexes, grad_outputs):
    """The labels' gradient in one C loop where :func:`apply` took the
    forward and nothing would see the grad node; Chainer's own
    ``backward`` otherwise."""
    if self.__dict__.get('_chainerjit_lean') and _plain_gradient(self) and \
            self._input_indexes_to_retain == (0, 1):
        gloss, = grad_outputs
        x, t = self.inputs  # their nodes, which hold the retained arrays
        gx = self.y.copy()
        if t.data is not None and _loops_softmax.softmax_ce_grad(
                gx, t.data, self.ignore_label,
                float(gloss.array * self._coeff)):
            # x's shape and dtype by construction: backprop need not
            # check it (``_native._backprop_to_all``).
            self._chainerjit_grad_checked = True
            return _calls.new_variable(gx, x.requires_grad or
                                       t.requires_grad or
                                       gloss.requires_grad), None
    return _chainer_backward(self, indexes, grad_outputs)


def _plain_gradient(node):
    """Would the grad node's ``apply`` only run its CPU forward here: the
    labels' case with the mean and no class weights, the softmax kept
    (``cache_score``), and nothing to see the grad node
    (:func:`_unobserved`)?"""
    return (node.reduce == 'mean' and node.class_weight is None and
            not node.soft_target and type(node.y) is numpy.ndarray and
            node.y.ndim == 2 and _unobserved())


def _unobserved():
    """Would the nodes Chainer's ``backward`` applies be seen by nothing:
    no double backprop, no function hooks, no debug mode?"""
    return not chainer.config.enable_backprop and \
        not _calls.debug_or_function_hooks()


def mse_backward(self, indexes, grad_outputs):
    """``MeanSquaredError.backward``'s formulas on arrays (its lowering's
    gradient rule, ``ops/loss.py``: the same operations in the same
    order, bit for bit) where :func:`apply` took the forward and nothing
    would see the four nodes Chainer's ``backward`` applies; Chainer's own
    ``backward`` otherwise."""
    if self.__dict__.get('_chainerjit_lean') and _unobserved():
        x0, x1 = self.get_retained_inputs()
        gy, = grad_outputs
        arrays = (x0.array, x1.array, gy.array)
        if all(type(a) is numpy.ndarray for a in arrays):
            rule = _mse_rule(arrays[0].shape, arrays[0].dtype,
                             arrays[1].dtype)
            grads = rule(arrays[:2], (), arrays[2:],
                         (0 in indexes, 1 in indexes))
            requires_grad = any(v.requires_grad for v in (x0, x1, gy))
            return [_calls.new_variable(grads[i], requires_grad)
                    for i in (0, 1) if i in indexes]
    return _chainer_mse_backward(self, indexes, grad_outputs)


@functools.lru_cache(maxsize=64)
def _mse_rule(shape, dtype0, dtype1):
    """The gradient rule of ``MeanSquaredError``'s lowering."""
    ctx = ops.LowerContext(numpy, (shape, shape), (dtype0, dtype1), ((),),
                           (dtype0,))
    return ops.lower(_MeanSquaredError(), ctx).grad.fn
