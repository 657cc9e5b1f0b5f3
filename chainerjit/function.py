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
from chainerjit import _fastpath
from chainerjit import codegen


class TrainingProgram(object):
    """The compiled forward and backward of one cache entry.

    Attributes:
        forward, backward: :class:`chainerjit.program.Program` objects.
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

    def __init__(self, pair):
        self.forward = codegen.compile_graph(pair.forward)
        self.backward = codegen.compile_graph(pair.backward)
        self.n_outputs = pair.n_outputs
        position = {v: i for i, v in enumerate(pair.wrt)}
        self.grad_index = [position.get(v) for v in
                           pair.forward.inputs + pair.forward.params]
        outputs = pair.forward.outputs[:pair.n_outputs]
        self.first_of = [_index(outputs, v) for v in outputs]
        where = {v: j for j, v in enumerate(pair.forward.inputs +
                                            pair.forward.params)}
        saved = pair.forward.outputs[pair.n_outputs:]
        self.saved_inputs = [(k, where[v]) for k, v in enumerate(saved)
                             if v in where]
        self.graphs = pair

    @property
    def n_instructions(self):
        return self.forward.n_instructions + self.backward.n_instructions


class CompiledFunction(chainer.FunctionNode):
    """Runs a :class:`TrainingProgram` as one node of Chainer's graph."""

    #: ``CompiledFunction(training, symbols=())``: ``symbols`` are the
    #: trip counts of symbolic loops (in C: ``_fastpath.compiled_init``).
    __init__ = _fastpath.compiled_init

    def unchain(self):
        """Also unchains the Variables :func:`publish` handed out for this
        node's outputs, as ``unchain_backward`` would eager's outputs."""
        super(CompiledFunction, self).unchain()
        for ref in self._published:
            variable = ref()
            if variable is not None:
                variable.unchain()

    def apply(self, inputs):
        return lean_apply(self, inputs)

    def _check_data_type_forward(self, in_data):
        """No type check: the cache key already fixed every input's
        shape and dtype, and the guards every model array's."""

    #: Runs the training forward program and keeps the values the backward
    #: reads (in C: ``_fastpath.compiled_forward``).
    forward = _fastpath.compiled_forward

    #: Runs the backward program; gradients as Variables, ``None`` where
    #: there is none (in C: ``_fastpath.compiled_backward``). Double
    #: backprop raises NotImplementedError.
    backward = _fastpath.compiled_backward


def _index(values, value):
    """The first position of ``value`` (an IR value, by identity)."""
    return next(i for i, v in enumerate(values) if v is value)


#: ``node.apply(inputs)`` without the steps of ``FunctionNode.apply`` that
#: do nothing for a chainerjit node (NumPy arrays in the default layout, no
#: function hooks, no debug mode, no static graph), in Cython; anything
#: else takes Chainer's own ``apply``. It links the node into the graph
#: exactly as that does.
lean_apply = _fastpath.lean_apply


class _Output(chainer.FunctionNode):
    """Hands one output of a multi-output :class:`CompiledFunction` to the
    user as the output of a node of its own, so that backprop treats it
    as eager Chainer treats a separate op's output (a gradient retained on
    one output is not sent back again with another's)."""

    def apply(self, inputs):
        return lean_apply(self, inputs)

    def forward(self, inputs):
        return inputs

    def backward(self, indexes, grad_outputs):
        return grad_outputs


#: ``publish(node, outputs, requires_grad)``: the Variables a training call
#: returns for ``node``'s outputs (see ``_fastpath.publish``).
publish = _fastpath.publish
