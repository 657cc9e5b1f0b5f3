"""The bridge to Chainer's graph: a FunctionNode running compiled code.

When a call may need gradients, the jitted function applies a
:class:`CompiledFunction` to its arguments and the model's Variables
(parameters, and state such as ``L.LSTM``'s ``h``). Its ``forward`` runs
the training forward program and keeps the values the backward reads;
its ``backward`` runs the backward program. The outputs are ordinary
Variables in Chainer's graph, so ``loss.backward()``, optimizers and
``Trainer`` work unchanged, and gradients accumulate into ``.grad`` as
Chainer accumulates them.
"""

import chainer
from chainerjit.backend import codegen
from chainerjit.passes import autodiff
from chainerjit.runtime import _calls


class TrainingProgram(object):
    """The compiled forward and backward of one cache entry.

    Attributes:
        forward, backward: :class:`chainerjit.backend.program.Program` objects.
        n_outputs: how many forward outputs are the user's (the rest are
            saved for the backward).
        grad_index: for each forward input, the position of its gradient
            among the backward's outputs, or ``None``.
        first_of: for each user output, the position of the first output
            that is the same value.
        saved_inputs: ``(position among the saved values, input index)``
            for each saved value that is a forward input: the backward
            reads the array its Variable holds then, as eager's retained
            inputs do (a parameter's array may be replaced in between).
    """

    def __init__(self, pair, arena=True):
        self.arena = arena  # as codegen.compile_graph's
        self.forward = codegen.compile_graph(pair.forward, arena=arena)
        self.backward = codegen.compile_graph(pair.backward, arena=arena)
        self.n_outputs = pair.n_outputs
        self.grad_index = _grad_index(pair.forward, pair.wrt)
        outputs = pair.forward.outputs[:pair.n_outputs]
        self.first_of = [_index(outputs, v) for v in outputs]
        where = {v: j for j, v in enumerate(pair.forward.inputs +
                                            pair.forward.params)}
        saved = pair.forward.outputs[pair.n_outputs:]
        self.saved_inputs = [(k, where[v]) for k, v in enumerate(saved)
                             if v in where]
        self.graphs = pair
        self._cut_backwards = {}

    def cut_backward(self, cut_values, cut_nodes):
        """``(backward program, grad_index, saved positions)`` for a graph
        cut at some outputs (``autodiff.cut_backward``), compiled once per
        cut."""
        key = (cut_values, cut_nodes)
        if key not in self._cut_backwards:
            pair = self.graphs
            backward, wrt, saved = autodiff.cut_backward(
                pair, cut_values, cut_nodes)
            self._cut_backwards[key] = (
                codegen.compile_graph(backward, arena=self.arena),
                _grad_index(pair.forward, wrt), saved)
        return self._cut_backwards[key]

    @property
    def n_instructions(self):
        return self.forward.n_instructions + self.backward.n_instructions


class CompiledFunction(chainer.FunctionNode):
    """Runs a :class:`TrainingProgram` as one node of Chainer's graph."""

    #: ``CompiledFunction(training, symbols=())``: ``symbols`` are the
    #: trip counts of symbolic loops (in C: ``_calls.compiled_init``).
    __init__ = _calls.compiled_init

    def unchain(self):
        """As ``unchain_backward`` would cut eager's graph: when it started
        at some of this node's outputs (already unchained by their
        ``_Output`` nodes), the outputs computed from their ancestors are
        unchained too, and the nodes those came from pass no gradient to
        the outputs left. Otherwise, or with no output left, the node is
        unchained with every Variable :func:`publish` handed out."""
        started = self._unchained_outputs()
        if started:
            forward = self.training.graphs.forward
            nodes = autodiff.ancestor_nodes(
                forward, [forward.outputs[i] for i in started])
            upstream = set(v for n in nodes for v in n.outputs)
            cut = [i for i in self._connected
                   if i in started or forward.outputs[i] in upstream]
            if len(cut) < len(self._connected):
                for i in cut:
                    variable = self._published[i]()
                    if variable is not None:
                        variable.unchain()
                self._cut_nodes = self._cut_nodes | frozenset(nodes)
                return
        super(CompiledFunction, self).unchain()
        for ref in self._published:
            variable = ref()
            if variable is not None:
                variable.unchain()

    def _unchained_outputs(self):
        """The positions of the published outputs the user unchained (not
        those freed: their nodes may still be on a path of the graph)."""
        found = []
        for i in self._connected:
            variable = self._published[i]()
            if variable is not None and variable.creator_node is None:
                found.append(i)
        return found

    def backward(self, indexes, grad_outputs):
        """Runs the backward program (in C: ``_calls.
        compiled_backward``), or, where the user unchained some outputs
        (``h.unchain()``, ``h.unchain_backward()``), a backward that stops
        the gradients there as eager's graph would."""
        cut = self._unchained_outputs()
        if not cut and not self._cut_nodes:
            return _calls.compiled_backward(self, indexes, grad_outputs)
        values = self.training.graphs.forward.outputs
        cut_values = frozenset(values[i] for i in cut)
        backward, grad_index, saved = self.training.cut_backward(
            cut_values, self._cut_nodes)
        return _calls.compiled_backward(
            self, indexes, grad_outputs, backward, grad_index, saved)

    def apply(self, inputs):
        return lean_apply(self, inputs)

    def _check_data_type_forward(self, in_data):
        """No type check: the cache key already fixed every input's
        shape and dtype, and the guards every model array's."""

    #: Runs the training forward program and keeps the values the backward
    #: reads (in C: ``_calls.compiled_forward``).
    forward = _calls.compiled_forward


def _grad_index(forward, wrt):
    """For each input and parameter of ``forward``, the position of its
    gradient in ``wrt``, or ``None``."""
    position = {v: i for i, v in enumerate(wrt)}
    return [position.get(v) for v in forward.inputs + forward.params]


def _index(values, value):
    """The first position of ``value`` (an IR value, by identity)."""
    return next(i for i, v in enumerate(values) if v is value)


#: ``node.apply(inputs)`` without the steps of ``FunctionNode.apply`` that
#: do nothing for a chainerjit node (NumPy arrays in the default layout, no
#: function hooks, no debug mode, no static graph), in Cython; anything
#: else takes Chainer's own ``apply``. It links the node into the graph
#: exactly as that does.
lean_apply = _calls.lean_apply


class _Output(chainer.FunctionNode):
    """Hands one output of a multi-output :class:`CompiledFunction` to the
    user as the output of a node of its own, so that backprop treats it
    as eager Chainer treats a separate op's output (a gradient retained on
    one output is not sent back again with another's)."""

    def apply(self, inputs):
        return lean_apply(self, inputs)

    # No type check: the compiled call's cache key fixed its output's type.
    _check_data_type_forward = CompiledFunction._check_data_type_forward

    def forward(self, inputs):
        return inputs

    def backward(self, indexes, grad_outputs):
        return grad_outputs


#: ``publish(node, outputs, requires_grad)``: the Variables a training call
#: returns for ``node``'s outputs (see ``_calls.publish``).
publish = _calls.publish
