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

A Loop node is differentiated through its body: the training forward's
loop also collects, in one list per value, what each iteration's
backward reads; the backward is a Loop node of its own that runs the
body's backward for the iterations in reverse, carrying the gradients of
the carried values and summing those of the invariants (the parameters
of links used in every iteration). A linear weight's gradient is
collected as each iteration's factors and summed in one product after
the loop (``Collect``, ``OuterSum``), and an invariant that only rules
faster on Fortran order read is copied so once before it
(``FortranCopy``).
"""

import heapq
import operator

import numpy

from chainerjit import errors
from chainerjit import ir
from chainerjit import ops
from chainerjit.ir import regions
from chainerjit.ops import structural


class TrainingPair(object):
    """What :func:`differentiate` returns.

    Attributes:
        forward: the training forward graph (outputs: the user's, then the
            saved values).
        backward: the backward graph.
        n_outputs: how many of ``forward.outputs`` are the user's.
        wrt: the forward values whose gradients ``backward`` returns, in
            the order of its outputs.
        scatters: ``{backward node: its scatter}`` for the gradient nodes
            of indexings (``x[i]``) whose gradient a loop can add in place
            into a running sum.
        rules: ``{backward node: _RuleCall}``, how each gradient node
            calls its rule (a loop may ask one for factors instead).
    """

    def __init__(self, forward, backward, n_outputs, wrt, scatters, rules):
        self.forward = forward
        self.backward = backward
        self.n_outputs = n_outputs
        self.wrt = wrt
        self.scatters = scatters
        self.rules = rules


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
    builder.backward.symbols = list(graph.symbols)
    n_outputs = len(graph.outputs)
    forward.outputs = list(graph.outputs) + builder.saved_forward
    return TrainingPair(forward, builder.backward, n_outputs, found,
                        builder.scatters, builder.rules)


def cut_backward(pair, cut_values, cut_nodes):
    """A backward of ``pair`` after the user cut the graph at some of its
    outputs, as eager Chainer's graph would be cut: no gradient flows out
    of a value in ``cut_values`` into its producer (``h.unchain()``), and
    the nodes in ``cut_nodes`` pass none (``h.unchain_backward()``
    purges the nodes ``h`` came from).

    Returns:
        ``(backward graph, wrt, saved)``: the graph takes the saved values
        at positions ``saved`` of ``pair``'s, then the output gradients,
        and returns the gradients of ``wrt`` (those of ``pair.wrt`` still
        reached).

    Raises:
        NotImplementedError: the forward has a loop (its backward body is
            built once, for the whole graph).
    """
    forward = pair.forward
    if any(node.region is not None for node in forward.nodes):
        raise NotImplementedError(
            'chainerjit: unchaining one of several outputs of a compiled '
            'call whose forward has a loop is not supported; call the '
            'function eagerly for this (chainerjit.jit(f).__wrapped__)')
    saved = forward.outputs[pair.n_outputs:]
    forward.outputs = forward.outputs[:pair.n_outputs]
    try:
        builder = _BackwardBuilder(forward, cut_values, cut_nodes)
        builder.run()
    finally:
        forward.outputs += saved
    found = [v for v in pair.wrt if v in builder.grads]
    builder.backward.outputs = [builder.grads[v] for v in found]
    builder.backward.symbols = list(pair.backward.symbols)
    position = {v: k for k, v in enumerate(saved)}
    return builder.backward, found, [position[v]
                                     for v in builder.saved_forward]


def without_absent(pair, absent):
    """The backward of ``pair`` for the calls where the output gradients
    ``absent`` (backward inputs) are ``None`` (no gradient reached those
    outputs), as the backward computes it then: a gradient node none of
    whose output gradients is there gives none, a sum of two gradients
    one of which is not there is the other.

    Returns:
        ``(graph, present)``: a graph whose inputs are the backward's but
        the absent ones and whose outputs are those of the backward still
        computed, at positions ``present``; ``None`` where a node reads
        some of its gradients but not all, or a loop reads one absent.
    """
    backward = pair.backward
    gone, alias = set(absent), {}
    graph = ir.Graph(backward.name)
    graph.inputs = [v for v in backward.inputs if v not in gone]
    graph.params, graph.symbols = backward.params, backward.symbols
    graph.consts = backward.consts
    for node in backward.nodes:
        inputs = [alias.get(v, v) for v in node.inputs]
        missing = [v in gone for v in inputs]
        if not any(missing):
            if inputs != node.inputs:
                node = ir.Node(node.op, node.kernel, inputs, node.outputs,
                               node.attrs, node.generic, node.pure, node.loc)
            graph.add_node(node)
        elif structural.kind(node) == structural.ACCUMULATE:
            if all(missing):
                gone.update(node.outputs)
            else:
                alias[node.outputs[0]] = inputs[missing.index(False)]
        elif node in pair.rules and _gradients_only(
                missing, sum(pair.rules[node].has_gy)):
            gone.update(node.outputs)
        else:
            return None
    outputs = [alias.get(v, v) for v in backward.outputs]
    present = [k for k, v in enumerate(outputs) if v not in gone]
    graph.outputs = [outputs[k] for k in present]
    return graph, present


def _gradients_only(missing, n_gys):
    """A gradient node's inputs end with its ``n_gys`` output gradients:
    all of them, and nothing else, are missing."""
    n_kept = len(missing) - n_gys
    return not any(missing[:n_kept]) and all(missing[n_kept:])


def ancestor_nodes(graph, values):
    """The nodes of ``graph`` that ``values`` were computed from."""
    producer = {v: n for n in graph.nodes for v in n.outputs}
    found, todo = set(), [producer[v] for v in values if v in producer]
    while todo:
        node = todo.pop()
        if node not in found:
            found.add(node)
            todo.extend(producer[v] for v in node.inputs if v in producer)
    return found


def _on_gradient_paths(graph, wrt):
    """The values a gradient can flow to: those computed from ``wrt`` by
    nodes that have a gradient rule or run generic."""
    reached = set(wrt)
    for node in graph.nodes:
        reached.update(node.inputs[i] for i in node.forced_grads)
        if any(v in reached for v in node.inputs) and _passes_gradients(
                node):
            reached.update(v for v in node.outputs
                           if v.dtype.kind == 'f' or node.region)
    return reached


def _passes_gradients(node):
    """NumPy run outside Chainer functions stops gradients, as in eager
    mode, and so do Python's numbers (an argument's size read as one,
    ``frontend.lengths.as_scalar``), StopGradient (see ``trace``) and a
    rule that never gives one (``fn.passes_none``: accuracy's); every
    other node passes them (or, without a rule, is an error when one
    reaches it)."""
    rule = getattr(node.kernel, 'grad', None)
    return not (node.op.startswith(('numpy.', 'ndarray.', 'python.')) or
                structural.stops_gradient(node) or
                getattr(getattr(rule, 'fn', None), 'passes_none', False))


def backward_order(graph, reached):
    """The nodes of ``graph`` that gradients reach, in the order Chainer's
    backward pass runs the FunctionNodes they stand for, so that the
    gradients of a value used several times are summed in Chainer's order:
    the highest rank first (a node's rank is its inputs' highest; its
    outputs' is one more), then the one pushed first (the creators of
    the outputs in order, then of each node's inputs in order, as it is
    run). A node fused from several (``LinearFunction+Tanh``) stands for
    that many; NumPy, Python arithmetic and stop-gradient nodes make new
    leaves (rank 0), as their arrays are new Variables in eager mode."""
    producer = {v: n for n in graph.nodes for v in n.outputs}
    value_rank, node_rank = {}, {}
    for node in graph.nodes:
        rank = max([value_rank.get(v, 0) for v in node.inputs] or [0])
        depth = node.op.count('+') + 1
        node_rank[node] = rank + depth - 1  # its last FunctionNode's
        out_rank = rank + depth if _passes_gradients(node) else 0
        for v in node.outputs:
            value_rank[v] = out_rank
    index = {node: i for i, node in enumerate(graph.nodes)}
    heap, seen, order = [], set(), []

    def push(value):
        node = producer.get(value)
        if node is not None and value in reached and node not in seen:
            seen.add(node)
            heapq.heappush(heap, (-node_rank[node], len(seen), index[node]))
    for value in graph.outputs:
        push(value)
    while heap:
        node = graph.nodes[heapq.heappop(heap)[2]]
        order.append(node)
        for value in dict.fromkeys(node.inputs):
            push(value)
    return order


def _training_forward(graph, reached):
    """A copy of ``graph`` where each generic node with an input on a
    gradient path runs through Chainer's ``apply`` and also outputs a
    handle for its backward."""
    forward = ir.Graph(graph.name)
    forward.inputs, forward.params = graph.inputs, graph.params
    forward.consts, forward.outputs = graph.consts, list(graph.outputs)
    forward.symbols = graph.symbols
    forward.loop_pairs = {}  # training Loop node -> its body's pair
    for node in graph.nodes:
        if node.region is not None:
            if any(v in reached for v in node.inputs):
                node = _training_loop(node, forward.loop_pairs)
            forward.add_node(node)
            continue
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


def _training_loop(node, loop_pairs):
    """The Loop node of the training forward: its body is the body's
    training forward, whose saved values the loop collects as lists."""
    region = node.region
    body = region.body
    wrt = [v for v in body.inputs[1:] if v.dtype.kind == 'f']
    pair = differentiate(body, wrt)
    n_out = len(body.outputs)
    saved = pair.forward.outputs[n_out:]
    # Invariants and the counter need no list: the backward reads them
    # from outside the loop and from its own counter.
    invariant = set(body.inputs[1 + sum(region.carried_read):])
    per_iteration = [v for v in saved
                     if v not in invariant and v is not body.inputs[0]]
    pair.forward.outputs = pair.forward.outputs[:n_out] + per_iteration
    training = regions.Region(
        pair.forward, region.carried_read,
        region.n_scans + len(per_iteration), region.kind, region.loc)
    training.counts = region.counts
    lists = [ir.Value('temp', (), numpy.dtype(object))
             for _ in per_iteration]
    loop = ir.Node(node.op, node.kernel, node.inputs,
                   node.outputs + lists, node.attrs, pure=False,
                   loc=node.loc)
    loop.region = training
    loop_pairs[loop] = (pair, saved, per_iteration, lists)
    return loop


class _BackwardBuilder(object):

    def __init__(self, forward, cut_values=(), cut_nodes=()):
        self.forward = forward
        self.cut_values, self.cut_nodes = cut_values, cut_nodes  # see
        # cut_backward
        self.backward = ir.Graph(forward.name + '.backward')
        self._none_value = None
        self.saved = {}  # forward value -> backward input
        self.saved_forward = []  # forward values saved, in order
        self.grads = {}  # forward value -> its gradient in the backward
        self.scatters = {}  # gradient node of an indexing -> its scatter
        self.rules = {}  # gradient node -> _RuleCall
        self.output_grads = [
            self.backward.add_value('input', v.shape, v.dtype,
                                    'g%d' % i)
            for i, v in enumerate(forward.outputs)]

    def run(self):
        for value, grad in zip(self.forward.outputs, self.output_grads):
            if value in self.forward.reached:
                self.accumulate(value, grad)
        for node in backward_order(self.forward, self.forward.reached):
            if node in self.cut_nodes:
                continue
            for v in node.outputs:
                if v in self.cut_values:
                    self.grads.pop(v, None)
            wanted = tuple(v in self.forward.reached and (
                v.dtype.kind == 'f' or v.dtype == object)
                for v in node.inputs)
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
            'Accumulate', structural.accumulate(),
            [self.grads[value], grad], [total]))
        self.grads[value] = total

    def differentiate_loop(self, node):
        """Adds the backward Loop of a training forward Loop node."""
        loop_backward = _LoopBackward(self, node)
        loop_backward.read_iterations()
        loop_backward.add_body_gradients()
        loop_backward.close_body(self._none())
        loop = loop_backward.loop_node()
        self.backward.add_node(loop)
        loop_backward.accumulate_results(loop.outputs)

    def _fortran_copy(self, value, loc):
        copy = ir.Value('temp', value.shape, value.dtype)
        self.backward.add_node(ir.Node(
            'FortranCopy', structural.fortran_copy(), [value], [copy],
            loc=loc))
        return copy

    def _none(self):
        if self._none_value is None:
            self._none_value = self.backward.add_value(
                'const', (), numpy.dtype(object), data=None)
        return self._none_value

    def _trip(self, trip):
        """The trip count in the backward graph."""
        if trip.kind in ('temp', 'input'):  # the iterations a loop with
            return self.save(trip)  # exits ran, or an inner loop's count
        if trip.kind == 'const' and trip not in self.backward.consts:
            self.backward.consts.append(trip)
        return trip

    def differentiate_node(self, node, wanted):
        if node.region is not None:
            return self.differentiate_loop(node)
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
        call = _RuleCall(rule.fn, len(node.inputs), len(node.outputs),
                         kept_inputs, kept_outputs,
                         [g is not None for g in gys], wanted, rule.onnx)
        grad_node = ir.Node(node.op + 'Grad', call.kernel(), args, grads,
                            loc=node.loc)
        self.backward.add_node(grad_node)
        self.rules[grad_node] = call
        if hasattr(rule.fn, 'scatter') and targets == node.inputs[:1]:
            self.scatters[grad_node] = rule.fn.scatter
        for value, grad in zip(targets, grads):
            self.accumulate(value, grad)


class _LoopBackward(object):
    """The backward Loop of one forward Loop node, built in steps: its
    body reads the forward iteration's values, runs the forward body's
    gradient nodes and keeps running sums of the invariants' gradients;
    the Loop node then gives the gradients of the loop's inputs.

    The backward body's counter ``j`` counts up; ``k = trip - 1 - j``,
    the forward iteration it undoes, counts down."""

    def __init__(self, builder, node):
        self.builder, self.node = builder, node
        (self.pair, self.saved, self.per_iteration,
         self.lists) = builder.forward.loop_pairs[node]
        region = self.region = node.region
        self.n_carried = region.n_carried
        self.n_read = sum(region.carried_read)
        # Run back as many iterations as the forward ran.
        self.trip = node.outputs[self.n_carried] if region.counts \
            else node.inputs[0]
        self.outer_of = dict(zip(region.body.inputs,
                                 [None] + node.inputs[1:]))
        n_user = len(node.outputs) - len(self.lists)
        self.scan_lists = node.outputs[self.n_carried + region.counts:
                                       n_user]
        self._make_inputs()

    def _make_inputs(self):
        body = self.region.body
        self.back = ir.Graph(self.node.op + 'Grad')
        self.j = ir.Value('input', (), numpy.int64, 'j')
        self.carried_grads = [_input_like(v) for v in
                              self.node.outputs[:self.n_carried]]
        self.invariants = [v for v in body.inputs[1 + self.n_read:]
                           if v in self.pair.wrt]
        self.sums = [_input_like(v) for v in self.invariants]
        self.n_in = ir.Value('input', (), numpy.int64, 'n')
        self.list_ins = [_object_input() for _ in self.per_iteration]
        self.scan_ins = [_object_input() for _ in self.scan_lists]
        self.saved_outer = [v for v in self.saved if v in self.outer_of
                            and v not in self.per_iteration
                            and v is not body.inputs[0]]
        self.outer_ins = dict((v, _input_like(v)) for v in self.saved_outer)

    def read_iterations(self):
        """The forward body's backward reads iteration ``k``'s values: the
        counter, the items of the per-iteration lists, the values saved
        from outside the loop and the gradients flowing back."""
        k = ir.Value('temp', (), numpy.int64)
        self.back.add_node(ir.Node('Reverse', structural.reverse(),
                                   [self.j, self.n_in], [k]))
        arguments = {self.region.body.inputs[0]: k}
        arguments.update(self.outer_ins)
        for value, lst in zip(self.per_iteration, self.list_ins):
            arguments[value] = self._add_at(structural.at(), lst, k, value)
        backward = self.pair.backward
        n_saved = len(self.saved)
        for value, inner in zip(self.saved, backward.inputs[:n_saved]):
            _rename(backward, inner, arguments[value])
        output_grads = backward.inputs[n_saved:]
        for grad, carried in zip(output_grads[:self.n_carried],
                                 self.carried_grads):
            _rename(backward, grad, carried)
        for grad, scan in zip(output_grads[self.n_carried:], self.scan_ins):
            _rename(backward, grad,
                    self._add_at(structural.at_or_none(), scan, k, grad))

    def _add_at(self, kernel, lst, k, like):
        element = ir.Value('temp', like.shape, like.dtype)
        self.back.add_node(ir.Node('At', kernel, [lst, k], [element]))
        return element

    def add_body_gradients(self):
        """The forward body's gradient nodes, but those of indexings whose
        gradient the running sum adds in place."""
        self.grad_of = dict(zip(self.pair.wrt, self.pair.backward.outputs))
        grads = [self.grad_of[v] for v in self.invariants]
        self.scattered = _scattered(self.pair, grads)
        self.factored = _factored(self.pair, grads)
        for inner in self.pair.backward.nodes:
            if inner not in self.scattered.values():
                self.back.add_node(inner)
        self.back.consts = list(self.pair.backward.consts)

    def close_body(self, none):
        """The body's inputs, and its outputs: the gradients carried to
        the previous iteration, then the running sums."""
        next_carried = [self.grad_of.get(v, none) for v in
                        self.region.body.inputs[1:1 + self.n_read]]
        # A carried value the body does not read gets no gradient back.
        next_carried = _spread(next_carried, self.region.carried_read, none)
        next_sums = [self._running_sum(total, value)
                     for total, value in zip(self.sums, self.invariants)]
        self.back.inputs = [self.j] + self.carried_grads + self.sums + [
            self.n_in] + self.list_ins + self.scan_ins + [
            self.outer_ins[v] for v in self.saved_outer]
        self.back.outputs = next_carried + next_sums

    def _running_sum(self, total, value):
        summed = ir.Value('temp', value.shape, value.dtype)
        grad = self.grad_of[value]
        step = self.scattered.get(grad)
        if grad in self.factored:  # summed in one product after
            node = ir.Node('Collect', structural.collect(), [total, grad],
                           [summed])
        elif step is None:
            node = ir.Node('Accumulate', structural.sum_into(),
                           [total, grad], [summed])
        else:  # x[i]'s gradient added in place: no zeros per step
            kernel = structural.scatter_add(self.pair.scatters[step])
            node = ir.Node('ScatterAdd', kernel, [total] + step.inputs,
                           [summed], loc=step.loc)
        self.back.add_node(node)
        return summed

    def loop_node(self):
        """The backward Loop node over the finished body."""
        builder, none = self.builder, self.builder._none()
        region = regions.Region(
            self.back, [True] * (self.n_carried + len(self.sums)), 0,
            self.region.kind, self.region.loc)
        inits = [builder.grads.get(v, none)
                 for v in self.node.outputs[:self.n_carried]]
        inits += [none] * len(self.sums)
        fortran = _fortran_invariants(self.pair, self.back, [
            self.outer_ins[v] for v in self.saved_outer])
        outer = [builder._trip(self.trip)] + [
            builder.save(v) for v in self.lists] + [
            builder.grads.get(v, none) for v in self.scan_lists] + [
            self._outer_input(v, fortran) for v in self.saved_outer]
        results = [ir.Value('temp', v.shape, v.dtype)
                   for v in self.carried_grads + self.sums]
        loop = ir.Node(self.node.op + 'Grad', structural.loop(),
                       [builder._trip(self.trip)] + inits + outer, results,
                       self.node.attrs, loc=self.node.loc)
        loop.region = region
        return loop

    def _outer_input(self, value, fortran):
        """A value from outside the loop, saved from the forward (as an
        F-ordered copy where the body reads it faster so)."""
        saved = self.builder.save(self.outer_of[value])
        if self.outer_ins[value] in fortran:
            return self.builder._fortran_copy(saved, self.node.loc)
        return saved

    def accumulate_results(self, results):
        """Adds the Loop's results to the gradients of the forward Loop's
        carried inputs and invariants."""
        builder = self.builder
        read_results = [r for r, read in zip(results[:self.n_carried],
                                             self.region.carried_read)
                        if read]
        for value, grad in zip(self.node.inputs[1:1 + self.n_read],
                               read_results):
            if value in builder.forward.reached:
                builder.accumulate(value, grad)
        for value, grad in zip(self.invariants, results[self.n_carried:]):
            outer_value = self.outer_of[value]
            if outer_value not in builder.forward.reached:
                continue
            if self.grad_of[value] in self.factored:
                grad = self._outer_sum(value, grad)
            builder.accumulate(outer_value, grad)

    def _outer_sum(self, value, grad):
        total = ir.Value('temp', grad.shape, grad.dtype)
        self.builder.backward.add_node(ir.Node(
            'OuterSum', structural.outer_sum(value.dtype), [grad], [total],
            loc=self.node.loc))
        return total


def _input_like(value):
    return ir.Value('input', value.shape, value.dtype)


def _object_input():
    return ir.Value('input', (), numpy.dtype(object))


class _RuleCall(object):
    """How a gradient node calls its rule: the rule, the forward node's
    arity, which inputs and outputs the rule keeps, which outputs have a
    gradient and which inputs' gradients are wanted."""

    def __init__(self, fn, n_in, n_out, kept_inputs, kept_outputs, has_gy,
                 wanted, onnx=None):
        self.fn, self.n_in, self.n_out = fn, n_in, n_out
        self.kept_inputs, self.kept_outputs = kept_inputs, kept_outputs
        self.has_gy, self.wanted = has_gy, tuple(wanted)
        self.onnx = onnx  # the rule's converter (GradRule.onnx)

    def input_of(self, k):
        """The forward input whose gradient is the node's output ``k``."""
        return [i for i, w in enumerate(self.wanted) if w][k]

    def kernel(self, factors_of=()):
        """The gradient node's kernel; for the inputs ``factors_of`` (in
        the rule's ``fn.factors``) it returns the rule's factors."""
        wanted = tuple(ops.FACTORS if i in factors_of else w
                       for i, w in enumerate(self.wanted))
        onnx = None if self.onnx is None or factors_of else self._to_onnx
        if onnx is not None and ops.is_vm_faster_on_cpu(self.onnx):
            onnx = ops.vm_faster_on_cpu(onnx)
        return ops.Kernel(_grad_kernel(
            self.fn, self.n_in, self.n_out, self.kept_inputs,
            self.kept_outputs, self.has_gy, wanted), multi=True, onnx=onnx)

    def _to_onnx(self, b, ins, outs):
        """Converts the gradient node: the rule's converter gets the kept
        inputs and outputs and the output gradients where they are."""
        names = iter(ins)
        xs, ys, gys = [None] * self.n_in, [None] * self.n_out, \
            [None] * self.n_out
        for i in self.kept_inputs:
            xs[i] = next(names)
        for i in self.kept_outputs:
            ys[i] = next(names)
        for i, has in enumerate(self.has_gy):
            if has:
                gys[i] = next(names)
        found = self.onnx(b, xs, ys, gys, self.wanted)
        wanted = [g for g, w in zip(found, self.wanted) if w]
        if any(g is None for g in wanted):
            raise errors.ExportError('a gradient of %d inputs has no ONNX '
                                     'form' % self.n_in)
        for name, out in zip(wanted, outs):
            b.op('Identity', [name], [out])


def _grad_kernel(fn, n_in, n_out, kept_inputs, kept_outputs, has_gy,
                 wanted):
    """A kernel calling a gradient rule with its arguments spread into the
    tuples the rule expects, returning only the wanted gradients. The
    kernel's arguments (the kept inputs, the kept outputs, the output
    gradients there are) and a ``None`` after them are picked into those
    tuples by precomputed positions (0.3 us a call instead of 2.5)."""
    n_kept = len(kept_inputs) + len(kept_outputs)
    gy_positions = [i for i, h in enumerate(has_gy) if h]
    n_args = n_kept + len(gy_positions)

    def places(kept, start, n):
        at = dict((i, start + k) for k, i in enumerate(kept))
        return [at.get(i, n_args) for i in range(n)]  # n_args: the None
    pick_xs = _picker(places(kept_inputs, 0, n_in))
    pick_ys = _picker(places(kept_outputs, len(kept_inputs), n_out))
    pick_gys = _picker(places(gy_positions, n_kept, n_out))
    pick_wanted = _picker([i for i, w in enumerate(wanted) if w])
    nothing = (None,) * sum(1 for w in wanted if w)
    n_gy = len(gy_positions)

    def run(*arrays):
        if n_gy == 1:  # the usual case: one output gradient, or none
            if arrays[n_kept] is None:
                return nothing
        elif all(arrays[i] is None for i in range(n_kept, n_args)):
            return nothing
        arrays += (None,)
        return pick_wanted(fn(pick_xs(arrays), pick_ys(arrays),
                              pick_gys(arrays), wanted))
    return run


def _picker(positions):
    """A function picking the items at ``positions`` of a tuple, as a
    tuple (``operator.itemgetter``, which returns a lone item bare)."""
    if not positions:
        return lambda items: ()
    if len(positions) == 1:
        position, = positions
        return lambda items: (items[position],)
    return operator.itemgetter(*positions)


def _scattered(pair, grads):
    """``{gradient: the indexing's gradient node computing it}`` for the
    ``grads`` (of a loop's invariants) that come from one indexing: the
    loop adds that step to the running sum in place instead."""
    return dict((node.outputs[0], node) for node in pair.backward.nodes
                if node in pair.scatters and node.outputs[0] in grads)


def _factored(pair, grads):
    """The ``grads`` (of a loop's invariants, float32 or float64) that a
    gradient node's rule can give as factors (a weight's, ``fn.factors``),
    each the node's own output and read by nothing else in the body:
    their nodes are made to return the factors, which the loop collects
    and sums after it in one product."""
    found = set()
    read = set(v for node in pair.backward.nodes for v in node.inputs)
    for node in pair.backward.nodes:
        call = pair.rules.get(node)
        if call is None:
            continue
        positions = [call.input_of(k) for k, v in enumerate(node.outputs)
                     if v in grads and v not in read and
                     v.dtype in ops.LOOP_DTYPES and
                     call.input_of(k) in getattr(call.fn, 'factors', ())]
        if positions:
            node.kernel = call.kernel(factors_of=positions)
            found.update(v for k, v in enumerate(node.outputs)
                         if call.input_of(k) in positions)
    return found


def _fortran_invariants(pair, body, values):
    """The ``values`` (a loop backward's invariants, such as a weight) that
    ``body`` reads only through gradient rules that read them faster in
    Fortran order (``fn.fortran_inputs``): the loop gets an F-ordered
    copy of each, made once before it."""
    found = set()
    for value in values:
        if len(value.shape) != 2 or value.dtype not in ops.LOOP_DTYPES:
            continue
        readers = [node for node in body.nodes if value in node.inputs]
        if readers and all(_reads_fortran(pair.rules.get(node), node, value)
                           for node in readers):
            found.add(value)
    return found


def _reads_fortran(call, node, value):
    if call is None:
        return False
    n_kept = len(call.kept_inputs)
    positions = [p for p, v in enumerate(node.inputs) if v is value]
    return all(p < n_kept and call.kept_inputs[p] in getattr(
        call.fn, 'fortran_inputs', ()) for p in positions)


def _rename(graph, old, new):
    """Makes the nodes of ``graph`` read ``new`` where they read ``old``."""
    for node in graph.nodes:
        node.inputs = [new if v is old else v for v in node.inputs]
    graph.outputs = [new if v is old else v for v in graph.outputs]


def _spread(values, mask, filler):
    """``values`` put at the true positions of ``mask``, ``filler`` at the
    others."""
    found = iter(values)
    return [next(found) if m else filler for m in mask]
