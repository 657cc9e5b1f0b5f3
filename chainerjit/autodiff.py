"""Reverse-mode autodiff over the IR.

:func:`differentiate` turns a forward graph into a *training pair*:

* the training forward graph: the forward, whose program returns, after
  the user's outputs, the values the backward reads (``saved``); generic
  nodes on a gradient path run through ``FunctionNode.apply`` and also
  return a handle to their Chainer graph;
* the backward graph: its inputs are the saved values and one gradient
  per forward output; its outputs are the gradients of the values asked
  for (arguments and parameters), from each op's :class:`ops.GradRule`.

Only what some gradient rule reads is saved, so only that stays alive
between forward and backward. NumPy run on arrays outside Chainer
functions stops gradients, as it does in eager mode.
"""

from chainer import utils
import numpy

from chainerjit import errors
from chainerjit import ir
from chainerjit import ops


class TrainingPair(object):
    """What :func:`differentiate` returns.

    Attributes:
        forward: the training forward graph (outputs: the user's, then the
            saved values).
        backward: the backward graph.
        n_outputs: how many of ``forward.outputs`` are the user's.
        wrt: the forward values whose gradients ``backward`` returns, in
            the order of its outputs.
    """

    def __init__(self, forward, backward, n_outputs, wrt):
        self.forward = forward
        self.backward = backward
        self.n_outputs = n_outputs
        self.wrt = wrt


def differentiate(graph, wrt):
    """Builds the training pair of ``graph`` for gradients of ``wrt``.

    Raises:
        chainerjit.errors.NotDifferentiable: a node on a gradient path has
            no gradient rule.
    """
    forward = _training_forward(graph, _on_gradient_paths(graph, wrt))
    builder = _BackwardBuilder(forward)
    builder.run()
    found = [v for v in wrt if v in builder.grads]
    builder.backward.outputs = [builder.grads[v] for v in found]
    n_outputs = len(graph.outputs)
    forward.outputs = list(graph.outputs) + builder.saved_forward
    return TrainingPair(forward, builder.backward, n_outputs, found)


def _on_gradient_paths(graph, wrt):
    """The values a gradient can flow to: those computed from ``wrt`` by
    nodes that have a gradient rule or run generic."""
    reached = set(wrt)
    for node in graph.nodes:
        if any(v in reached for v in node.inputs) and _passes_gradients(
                node):
            reached.update(v for v in node.outputs if v.dtype.kind == 'f')
    return reached


def _passes_gradients(node):
    """NumPy run outside Chainer functions stops gradients, as in eager
    mode; every other node passes them (or, without a rule, is an error
    when one reaches it)."""
    return not node.op.startswith(('numpy.', 'ndarray.'))


def _training_forward(graph, reached):
    """A copy of ``graph`` where each generic node with an input on a
    gradient path runs through Chainer's ``apply`` and also outputs a
    handle for its backward."""
    forward = ir.Graph(graph.name)
    forward.inputs, forward.params = graph.inputs, graph.params
    forward.consts, forward.outputs = graph.consts, list(graph.outputs)
    for node in graph.nodes:
        training = node.kernel.grad
        if isinstance(training, ops.GenericTraining) and any(
                v in reached for v in node.inputs) and any(
                v in reached for v in node.outputs):
            handle = ir.Value('temp', (), numpy.dtype(object))
            node = ir.Node(
                node.op, ops.Kernel(training.forward, multi=True),
                node.inputs, node.outputs + [handle], node.attrs,
                generic=True, pure=False, loc=node.loc)
        forward.add_node(node)
    forward.reached = reached
    return forward


class _BackwardBuilder(object):

    def __init__(self, forward):
        self.forward = forward
        self.backward = ir.Graph(forward.name + '.backward')
        self.saved = {}  # forward value -> backward input
        self.saved_forward = []  # forward values saved, in order
        self.grads = {}  # forward value -> its gradient in the backward
        self.output_grads = [
            self.backward.add_value('input', v.shape, v.dtype,
                                    'g%d' % i)
            for i, v in enumerate(forward.outputs)]

    def run(self):
        for value, grad in zip(self.forward.outputs, self.output_grads):
            if value in self.forward.reached:
                self.accumulate(value, grad)
        for node in reversed(self.forward.nodes):
            wanted = tuple(v in self.forward.reached and
                           v.dtype.kind == 'f' for v in node.inputs)
            if any(wanted) and any(v in self.grads for v in node.outputs):
                self.differentiate_node(node, wanted)
        # Inputs of the backward: saved values, then output gradients.
        self.backward.inputs = [self.saved[v] for v in self.saved_forward] \
            + self.output_grads

    def save(self, value):
        if value not in self.saved:
            self.saved[value] = ir.Value('input', value.shape, value.dtype,
                                         's%d' % len(self.saved))
            self.saved_forward.append(value)
        return self.saved[value]

    def accumulate(self, value, grad):
        if value not in self.grads:
            self.grads[value] = grad
            return
        total = ir.Value('temp', value.shape, value.dtype)
        self.backward.add_node(ir.Node(
            'Accumulate', ops.Kernel(_accumulate),
            [self.grads[value], grad], [total]))
        self.grads[value] = total

    def differentiate_node(self, node, wanted):
        if node.generic:  # its last output is the handle
            rule = ops.generic_grad_rule(len(node.inputs),
                                         len(node.outputs) - 1)
        elif isinstance(node.kernel.grad, ops.GradRule):
            rule = node.kernel.grad
        else:
            error = errors.NotDifferentiable(
                '%s has no gradient rule yet' % node.op)
            error.loc = node.loc
            raise error
        kept_inputs, kept_outputs = rule.inputs, rule.outputs
        gys = [self.grads.get(v) for v in node.outputs]
        args = [self.save(node.inputs[i]) for i in kept_inputs] + \
            [self.save(node.outputs[i]) for i in kept_outputs] + \
            [g for g in gys if g is not None]
        targets = [v for v, w in zip(node.inputs, wanted) if w]
        grads = [ir.Value('temp', v.shape, v.dtype) for v in targets]
        self.backward.add_node(ir.Node(
            node.op + 'Grad', ops.Kernel(_grad_kernel(
                rule.fn, len(node.inputs), len(node.outputs), kept_inputs,
                kept_outputs, [g is not None for g in gys], wanted),
                multi=True),
            args, grads, loc=node.loc))
        for value, grad in zip(targets, grads):
            self.accumulate(value, grad)


def _accumulate(a, b):
    """The sum of two gradients, either of which may be ``None`` (a rule
    found no gradient, as Chainer's backward returns ``None``)."""
    if a is None:
        return b
    if b is None:
        return a
    return utils.force_array(a + b)


def _grad_kernel(fn, n_in, n_out, kept_inputs, kept_outputs, has_gy,
                 wanted):
    """A kernel calling a gradient rule with its arguments spread into the
    tuples the rule expects, returning only the wanted gradients."""
    n_kept_in, n_kept = len(kept_inputs), len(kept_inputs) + len(
        kept_outputs)
    gy_positions = [i for i, h in enumerate(has_gy) if h]
    wanted_positions = [i for i, w in enumerate(wanted) if w]

    def run(*arrays):
        xs = [None] * n_in
        ys = [None] * n_out
        gys = [None] * n_out
        for i, a in zip(kept_inputs, arrays[:n_kept_in]):
            xs[i] = a
        for i, a in zip(kept_outputs, arrays[n_kept_in:n_kept]):
            ys[i] = a
        for i, a in zip(gy_positions, arrays[n_kept:]):
            gys[i] = a
        if all(g is None for g in gys):
            return (None,) * len(wanted_positions)
        gxs = fn(tuple(xs), tuple(ys), tuple(gys), wanted)
        return tuple(gxs[i] for i in wanted_positions)
    return run
