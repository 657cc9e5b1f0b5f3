"""Hoisting a loop's input projections out of the loop."""

from chainerjit import ir
from chainerjit import ops
from chainerjit.ops import structural


def hoist_projections(graph):
    """Computes ``linear(xs[i], W, b)`` for every step at once, before the
    loop, when ``xs``, ``W`` and ``b`` are loop invariants: one large
    matrix product instead of one small one per iteration (an LSTM's
    input-to-gate projection).

    Before::

        %5 = Loop[trip=T](T, h0, xs, W, b, V)
            body (i; %0; %1, %2, %3, %4) -> (%9; ):
              %6: f32[16,64] = IndexAt[index=[i]](%1, i)
              %7: f32[16,512] = LinearFunction(%6, %2, %3)
              %8: f32[16,512] = LinearFunction(%0, %4)
              ...

    After (``%10`` is every step's projection, ``%11`` the loop's view
    of it)::

        %10: f32[T,16,512] = LinearFunction[steps](xs, W, b)
        %5 = Loop[trip=T](T, h0, xs, W, b, V, %10)
            body (i; %0; %1, %2, %3, %4, %11) -> (%9; ):
              %7: f32[16,512] = IndexAt[index=[i]](%11, i)
              %8: f32[16,512] = LinearFunction(%0, %4)
              ...

    Loops with exits keep their projections (steps after the exit would
    be computed for nothing). Nested loops are hoisted innermost first,
    into the body around them.
    """
    changed = False
    nodes = []
    for node in graph.nodes:
        if node.region is not None:
            changed |= hoist_projections(node.region.body)[1]
            if not node.region.counts:
                hoisted = _hoist_loop(node)
                nodes += hoisted
                changed |= bool(hoisted)
        nodes.append(node)
    graph.nodes = nodes
    return graph, changed


def _hoist_loop(loop):
    """Rewrites ``loop``'s body in place; returns the new outer nodes."""
    body = loop.region.body
    counter = body.inputs[0]
    first = 1 + sum(loop.region.carried_read)
    invariant = set(body.inputs[first:])
    users = body.users()
    outer_of = dict(zip(body.inputs[first:], loop.inputs[first:]))
    hoisted = []
    for index in list(body.nodes):
        linear = _projection(index, counter, invariant, users)
        if linear is None:
            continue
        steps = _linear_over_steps(index, linear, outer_of)
        inner = ir.Value('input', steps.outputs[0].shape,
                         steps.outputs[0].dtype)
        loop.inputs.append(steps.outputs[0])
        body.inputs.append(inner)
        view = ir.Node('IndexAt', index.kernel, [inner, counter],
                       linear.outputs, index.attrs, loc=linear.loc)
        view.index, view.counters = index.index, index.counters
        body.nodes = [view if n is linear else n for n in body.nodes
                      if n is not index]
        hoisted.append(steps)
    return hoisted


def _projection(index, counter, invariant, users):
    """The ``LinearFunction`` node that alone reads ``index``'s output,
    if ``index`` takes one step of an invariant along one axis (not the
    last) and the linear's weight and bias are invariants."""
    if index.index is None or index.inputs[1:] != [counter] or \
            index.inputs[0] not in invariant:
        return None
    slices, counters = index.index
    if len(index.inputs[0].shape) != 3 or len(counters) != 1 or \
            counters[0] == 2 or \
            structural.counted_slice(slices[counters[0]]) or \
            any(s != slice(None) for j, s in enumerate(slices)
                if j != counters[0]):
        return None
    step = index.outputs[0]
    readers = users.get(step, [])
    if len(readers) != 1 or readers[0] is None:
        return None
    linear = readers[0]
    if linear.op != 'LinearFunction' or linear.generic or \
            linear.inputs[0] is not step or step in linear.inputs[1:] or \
            not all(v in invariant for v in linear.inputs[1:]):
        return None
    return linear


def _linear_over_steps(index, linear, outer_of):
    """``linear`` applied to every step of ``index``'s array at once."""
    xs = outer_of[index.inputs[0]]
    out = linear.outputs[0]
    axis = index.index[1][0]
    shape = list(out.shape)
    shape.insert(axis, xs.shape[axis])
    ys = ir.Value('temp', shape, out.dtype)
    ys.symbols = xs.symbols
    # NumPy indexing (of an array, not a Variable) stops gradients to xs.
    to_xs = not index.op.startswith('ndarray.')
    return ir.Node(
        linear.op, _over_steps(linear.kernel, to_xs, axis),
        [xs] + [outer_of[v] for v in linear.inputs[1:]], [ys],
        linear.attrs + (('steps', axis),), loc=linear.loc)


def _over_steps(kernel, to_xs, axis):
    """A 2-D linear kernel applied to a 3-D ``x`` whose last axis holds
    the features: ``x`` is viewed as a matrix of rows, and the result
    folded back."""
    def fn(x, *wb):
        y = kernel.fn(x.reshape(-1, x.shape[-1]), *wb)
        return y.reshape(x.shape[:-1] + y.shape[-1:])

    def grad(xs, ys, gys, wanted):
        x = xs[0]
        flat = [x.reshape(-1, x.shape[-1])] + list(xs[1:])
        gy = gys[0].reshape(-1, gys[0].shape[-1])
        wanted = (wanted[0] and to_xs,) + tuple(wanted[1:])
        grads = kernel.grad.fn(flat, ys, [gy], wanted)
        gx = None if grads[0] is None else grads[0].reshape(x.shape)
        return (gx,) + tuple(grads[1:])

    return ops.Kernel(fn, grad=ops.GradRule(grad, kernel.grad.inputs,
                                            kernel.grad.outputs),
                      onnx=_steps_to_onnx,
                      lengths=_rows_over_steps(kernel.lengths, axis))


def _rows_over_steps(rule, axis):
    """The ``Kernel.lengths`` rule of a linear kernel over the steps on
    ``axis``: rows of x that are not the steps (a batch-first batch on
    axis 0, a time-major one on axis 1, where the steps are on axis 0)
    follow as the 2-D kernel's rows do, their number read from the
    arrays."""
    if rule is None:
        return None

    def lengths(rows):
        x = rows[0]
        if x is None or not (x.axis == 0 < axis or x.axis == 1 > axis):
            return None
        found = rule([x._replace(axis=0)] + list(rows[1:]))
        if found is None or found.kernel is not None:
            return None
        return ops.Follow((x,))
    return ops.takes_axes(lengths)


def _steps_to_onnx(b, ins, outs):
    """``MatMul`` broadcasts over the leading axes: ``x W^T (+ b)``."""
    from chainerjit.ops.linear import cast_to_x
    ins = cast_to_x(b, ins)
    w_t = b.op('Transpose', [ins[1]], perm=[1, 0])[0]
    if len(ins) == 2:
        b.op('MatMul', [ins[0], w_t], outs)
    else:
        b.op('Add', [b.op('MatMul', [ins[0], w_t])[0], ins[2]], outs)
