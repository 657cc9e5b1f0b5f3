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

import operator

import chainer
from chainer import utils
import numpy

from chainerjit.ops.scratch import Scratch
from chainerjit import errors
from chainerjit import ir
from chainerjit import ops
from chainerjit.ir import regions


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
        if any(v in reached for v in node.inputs) and _passes_gradients(
                node):
            reached.update(v for v in node.outputs
                           if v.dtype.kind == 'f' or node.region)
    return reached


def _passes_gradients(node):
    """NumPy run outside Chainer functions stops gradients, as in eager
    mode, and so does StopGradient (see ``trace``); every other node
    passes them (or, without a rule, is an error when one reaches it)."""
    return not node.op.startswith(('numpy.', 'ndarray.', 'StopGradient'))


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
        for node in reversed(self.forward.nodes):
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
            'Accumulate', ops.Kernel(_accumulate),
            [self.grads[value], grad], [total]))
        self.grads[value] = total

    def differentiate_loop(self, node):
        """Adds the backward Loop of a training forward Loop node."""
        pair, saved, per_iteration, lists = self.forward.loop_pairs[node]
        region = node.region
        body = region.body
        n_carried, n_read = region.n_carried, sum(region.carried_read)
        # Run back as many iterations as the forward ran.
        trip = node.outputs[n_carried] if region.counts else node.inputs[0]
        outer_of = dict(zip(body.inputs, [None] + node.inputs[1:]))
        n_user = len(node.outputs) - len(lists)
        # The backward body: j counts up, k = trip - 1 - j goes down.
        back = ir.Graph(node.op + 'Grad')
        j = ir.Value('input', (), numpy.int64, 'j')
        carried_grads = [ir.Value('input', v.shape, v.dtype)
                         for v in node.outputs[:n_carried]]
        invariants = [v for v in body.inputs[1 + n_read:]
                      if v in pair.wrt]
        sums = [ir.Value('input', v.shape, v.dtype) for v in invariants]
        n_in = ir.Value('input', (), numpy.int64, 'n')
        list_ins = [ir.Value('input', (), numpy.dtype(object))
                    for _ in per_iteration]
        scan_lists = node.outputs[n_carried + region.counts:n_user]
        scan_ins = [ir.Value('input', (), numpy.dtype(object))
                    for _ in scan_lists]
        saved_outer = [v for v in saved if v in outer_of and v not in
                       per_iteration and v is not body.inputs[0]]
        outer_ins = dict((v, ir.Value('input', v.shape, v.dtype))
                         for v in saved_outer)
        k = ir.Value('temp', (), numpy.int64)
        back.add_node(ir.Node('Reverse', ops.Kernel(_reverse), [j, n_in],
                              [k]))
        arguments = {body.inputs[0]: k}
        arguments.update(outer_ins)
        for value, lst in zip(per_iteration, list_ins):
            element = ir.Value('temp', value.shape, value.dtype)
            back.add_node(ir.Node('At', ops.Kernel(_at), [lst, k],
                                  [element]))
            arguments[value] = element
        back_inputs = pair.backward.inputs
        n_saved = len(saved)
        for value, inner in zip(saved, back_inputs[:n_saved]):
            _rename(pair.backward, inner, arguments[value])
        output_grads = back_inputs[n_saved:]
        for grad, carried in zip(output_grads[:n_carried], carried_grads):
            _rename(pair.backward, grad, carried)
        for grad, scan in zip(output_grads[n_carried:], scan_ins):
            element = ir.Value('temp', grad.shape, grad.dtype)
            back.add_node(ir.Node('At', ops.Kernel(_at_or_none),
                                  [scan, k], [element]))
            _rename(pair.backward, grad, element)
        grad_of = dict(zip(pair.wrt, pair.backward.outputs))
        scattered = _scattered(pair, [grad_of[v] for v in invariants])
        factored = _factored(pair, [grad_of[v] for v in invariants])
        for inner in pair.backward.nodes:
            if inner not in scattered.values():
                back.add_node(inner)
        back.consts = list(pair.backward.consts)
        none = self._none()
        next_carried = [grad_of.get(v, none) for v in
                        body.inputs[1:1 + n_read]]
        # A carried value the body does not read gets no gradient back.
        next_carried = _spread(next_carried, region.carried_read, none)
        next_sums = []
        for total, value in zip(sums, invariants):
            summed = ir.Value('temp', value.shape, value.dtype)
            step = scattered.get(grad_of[value])
            if grad_of[value] in factored:  # summed in one product after
                back.add_node(ir.Node('Collect', ops.Kernel(_collect),
                                      [total, grad_of[value]], [summed]))
            elif step is None:
                back.add_node(ir.Node('Accumulate', ops.Kernel(_sum_into),
                                      [total, grad_of[value]], [summed]))
            else:  # x[i]'s gradient added in place: no zeros per step
                back.add_node(ir.Node(
                    'ScatterAdd', ops.Kernel(pair.scatters[step]),
                    [total] + step.inputs, [summed], loc=step.loc))
            next_sums.append(summed)
        back.inputs = [j] + carried_grads + sums + [n_in] + list_ins + \
            scan_ins + [outer_ins[v] for v in saved_outer]
        back.outputs = next_carried + next_sums
        backward_region = regions.Region(
            back, [True] * (n_carried + len(sums)), 0, region.kind,
            region.loc)
        inits = [self.grads.get(v, none) for v in node.outputs[:n_carried]]
        inits += [none] * len(sums)
        fortran = _fortran_invariants(pair, back, [outer_ins[v]
                                                   for v in saved_outer])
        outer = [self._trip(trip)] + [self.save(v) for v in lists] + [
            self.grads.get(v, none) for v in scan_lists] + [
            self._fortran_copy(self.save(outer_of[v]), node.loc)
            if outer_ins[v] in fortran else self.save(outer_of[v])
            for v in saved_outer]
        results = [ir.Value('temp', v.shape, v.dtype)
                   for v in carried_grads + sums]
        loop = ir.Node(node.op + 'Grad', ops.Kernel(None),
                       [self._trip(trip)] + inits + outer, results,
                       node.attrs, loc=node.loc)
        loop.region = backward_region
        self.backward.add_node(loop)
        read_results = [r for r, read in zip(results[:n_carried],
                                             region.carried_read) if read]
        for value, grad in zip(node.inputs[1:1 + n_read], read_results):
            if value in self.forward.reached:
                self.accumulate(value, grad)
        for value, grad in zip(invariants, results[n_carried:]):
            outer_value = outer_of[value]
            if outer_value not in self.forward.reached:
                continue
            if grad_of[value] in factored:
                total = ir.Value('temp', grad.shape, grad.dtype)
                self.backward.add_node(ir.Node(
                    'OuterSum', ops.Kernel(_outer_sum(value.dtype)), [grad],
                    [total], loc=node.loc))
                grad = total
            self.accumulate(outer_value, grad)

    def _fortran_copy(self, value, loc):
        copy = ir.Value('temp', value.shape, value.dtype)
        self.backward.add_node(ir.Node('FortranCopy', ops.Kernel(
            _fortran_copy), [value], [copy], loc=loc))
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
                         [g is not None for g in gys], wanted)
        grad_node = ir.Node(node.op + 'Grad', call.kernel(), args, grads,
                            loc=node.loc)
        self.backward.add_node(grad_node)
        self.rules[grad_node] = call
        if hasattr(rule.fn, 'scatter') and targets == node.inputs[:1]:
            self.scatters[grad_node] = rule.fn.scatter
        for value, grad in zip(targets, grads):
            self.accumulate(value, grad)


def _accumulate(a, b):
    """The sum of two gradients, either of which may be ``None`` (a rule
    found no gradient, as Chainer's backward returns ``None``)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, list):  # of a loop's list: item by item
        return [_accumulate(x, y) for x, y in zip(a, b)]
    return utils.force_array(a + b)


def _sum_into(total, grad):
    """A loop's running sum of an invariant's gradients: the first one is
    copied, so that the later ones can be added in place (the running sum
    is the loop's own carried value)."""
    if grad is None:
        return total
    if total is None:
        return utils.force_array(grad.copy())
    total += grad
    return total


class _RuleCall(object):
    """How a gradient node calls its rule: the rule, the forward node's
    arity, which inputs and outputs the rule keeps, which outputs have a
    gradient and which inputs' gradients are wanted."""

    def __init__(self, fn, n_in, n_out, kept_inputs, kept_outputs, has_gy,
                 wanted):
        self.fn, self.n_in, self.n_out = fn, n_in, n_out
        self.kept_inputs, self.kept_outputs = kept_inputs, kept_outputs
        self.has_gy, self.wanted = has_gy, tuple(wanted)

    def input_of(self, k):
        """The forward input whose gradient is the node's output ``k``."""
        return [i for i, w in enumerate(self.wanted) if w][k]

    def kernel(self, factors_of=()):
        """The gradient node's kernel; for the inputs ``factors_of`` (in
        the rule's ``fn.factors``) it returns the rule's factors."""
        wanted = tuple(ops.FACTORS if i in factors_of else w
                       for i, w in enumerate(self.wanted))
        return ops.Kernel(_grad_kernel(
            self.fn, self.n_in, self.n_out, self.kept_inputs,
            self.kept_outputs, self.has_gy, wanted), multi=True)


def _collect(items, factors):
    """A loop's list of an invariant's gradient factors ``(a, b)``, one
    pair per iteration that has them (see :func:`_outer_sum`)."""
    if factors is None:
        return items
    if items is None:
        items = []
    items.append(factors)
    return items


def _outer_sum(dtype):
    """The kernel summing a weight's gradient over a loop's iterations in
    one product, ``sum_k a_k^T b_k`` as ``[a_0; a_1; ...]^T [b_0; b_1;
    ...]``, from :func:`_collect`'s list (collected backward, stacked in
    forward order). One product over all the rows instead of one per
    iteration and a running sum: 2x faster for an LSTM's recurrent
    weight, equal within rounding (the sums run in another order, as for
    the input projection that ``passes/hoist.py`` takes out of the
    loop)."""
    scratch = Scratch()

    def outer_sum(items):
        if items is None:
            return None
        if len(items) == 1:
            a, b = items[0]
            return a.T.dot(b).astype(dtype, copy=False)
        with scratch.held() as buffers:
            a = _stack([a for a, _ in reversed(items)], buffers, 0)
            b = _stack([b for _, b in reversed(items)], buffers, 1)
            return a.T.dot(b).astype(dtype, copy=False)
    return outer_sum


def _stack(arrays, buffers, k):
    """``concatenate(arrays)`` into scratch buffer ``k`` (an LSTM's
    training step stacks 0.8 MB of gradient factors; taking fresh pages
    for them each step had cost 0.7 ms of faults)."""
    if any(type(a) is not numpy.ndarray for a in arrays):
        xp = chainer.backend.get_array_module(arrays[0])
        return xp.concatenate(arrays)  # CuPy's memory pool keeps it
    shape = (sum(len(a) for a in arrays),) + arrays[0].shape[1:]
    return numpy.concatenate(arrays, out=buffers.array(
        k, shape, numpy.result_type(*arrays)))


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


def _fortran_copy(array):
    return chainer.backend.get_array_module(array).asfortranarray(array)


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


def _reverse(j, n):
    return n - 1 - j


def _at(items, k):
    return items[k]


def _at_or_none(items, k):
    return None if items is None else items[k]
