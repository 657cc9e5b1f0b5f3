"""``Graph.verify`` (``chainerjit/ir/graph.py``): definitions, types and
the arity of loop regions.

Each check is seen failing on a hand-built graph broken in one way (or a
recorded one broken by hand), with an error naming the offending node or
value; graphs recorded from real forwards, loops included, and their
training pairs (forward and backward) pass.
"""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

import chainerjit
from chainerjit import ir
from chainerjit.ir import regions


F32 = numpy.float32


# --- a hand-built graph with a loop -----------------------------------------

def _loop_graph():
    """``h = tanh(h @ W)`` for 3 iterations, each ``h`` also collected::

        graph f(h0: f32[2,3]; W: f32[3,3]):
          c0: i64[] = const
          %3: f32[2,3], %4: list = Loop[trip=3](c0, h0, W)
              body (i; %0; %1) -> (%2; %2):
                %2: f32[2,3] = MatMulTanh(%0, %1)
          return (%3, %4)
    """
    graph = ir.Graph('f')
    h0 = graph.add_value('input', (2, 3), F32, 'h0')
    w = graph.add_value('param', (3, 3), F32, 'W')
    trip = graph.add_value('const', (), numpy.int64, data=numpy.int64(3))
    body = ir.Graph('loop')
    counter = ir.Value('input', (), numpy.int64, 'i')
    h = ir.Value('input', (2, 3), F32)
    w_in = ir.Value('input', (3, 3), F32)
    h_next = ir.Value('temp', (2, 3), F32)
    body.add_node(ir.Node('MatMulTanh', None, [h, w_in], [h_next]))
    body.inputs = [counter, h, w_in]
    body.outputs = [h_next, h_next]
    last = ir.Value('temp', (2, 3), F32)
    steps = ir.Value('temp', (), numpy.dtype(object))
    loop = graph.add_node(ir.Node('Loop', None, [trip, h0, w],
                                  [last, steps], attrs=(('trip', 3),),
                                  loc=('model.py', 12)))
    loop.region = regions.Region(body, [True], 1, 'for', ('model.py', 12))
    graph.outputs = [last, steps]
    return graph, loop


def _fails(graph, *fragments):
    with pytest.raises(AssertionError) as info:
        graph.verify()
    message = str(info.value)
    assert message.startswith('IR verification failed: ')
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_the_hand_built_loop_graph_passes():
    graph, _ = _loop_graph()
    graph.verify()
    assert 'Loop[trip=3](c0, h0, W)' in str(graph)


# --- definitions -------------------------------------------------------------

def test_a_use_of_an_undefined_value_fails():
    graph, loop = _loop_graph()
    loop.inputs[1] = ir.Value('input', (2, 3), F32, 'stray')
    _fails(graph, 'Loop[trip=3] (model.py:12) uses an undefined value')


def test_a_value_defined_twice_fails():
    graph, loop = _loop_graph()
    again = ir.Node('Copy', None, [graph.inputs[0]], [loop.outputs[0]])
    graph.nodes.append(again)
    _fails(graph, 'Copy redefines a value')


def test_returning_an_undefined_value_fails():
    graph, _ = _loop_graph()
    graph.outputs.append(ir.Value('temp', (2, 3), F32))
    _fails(graph, 'the graph returns an undefined value')


def test_a_body_reading_a_value_from_outside_fails():
    graph, loop = _loop_graph()
    body = loop.region.body
    body.nodes[0].inputs[1] = graph.params[0]  # not through an invariant
    _fails(graph, 'MatMulTanh uses an undefined value')


def test_a_body_returning_an_undefined_value_fails():
    graph, loop = _loop_graph()
    loop.region.body.outputs[1] = ir.Value('temp', (2, 3), F32)
    _fails(graph, 'the body of Loop[trip=3] (model.py:12) returns an '
                  'undefined value')


# --- types -------------------------------------------------------------------

def test_a_shape_that_is_not_a_tuple_fails():
    graph, loop = _loop_graph()
    loop.outputs[0].shape = [2, 3]
    _fails(graph, 'an output of Loop[trip=3] (model.py:12) has shape '
                  '[2, 3], not a tuple of non-negative ints')


@pytest.mark.parametrize('shape', [(2, -1), (2, 3.0), (2, None), (True,),
                                   (2, '3')])
def test_a_shape_entry_that_is_not_a_size_fails(shape):
    graph, _ = _loop_graph()
    graph.inputs[0].shape = shape
    _fails(graph, 'input h0 has shape %r' % (shape,))


def test_numpy_ints_and_zero_sizes_are_sizes():
    graph, _ = _loop_graph()
    graph.inputs[0].shape = (numpy.int64(0), numpy.int32(3))
    graph.verify()


def test_a_dtype_that_is_not_a_numpy_dtype_fails():
    graph, loop = _loop_graph()
    body_value = loop.region.body.nodes[0].outputs[0]
    body_value.dtype = 'float32'  # the constructor would have made one
    _fails(graph, 'an output of MatMulTanh has dtype ',
           'not a numpy.dtype')


def test_a_parameter_of_another_kind_fails():
    graph, _ = _loop_graph()
    graph.params[0].kind = 'weight'
    _fails(graph, "parameter W has kind 'weight', not one of input, param, "
                  "sym, const, temp")


@pytest.mark.parametrize('symbols', [{2: 'T'}, {0: 5}, ['T'], {'0': 'T'}])
def test_symbolic_axes_outside_the_shape_fail(symbols):
    graph, _ = _loop_graph()
    graph.inputs[0].symbols = symbols
    _fails(graph, 'input h0 has symbolic axes %r' % (symbols,))


def test_a_symbolic_axis_of_the_shape_passes():
    graph, _ = _loop_graph()
    graph.inputs[0].symbols = {0: 'T'}
    graph.verify()
    assert 'h0: f32[T,3]' in str(graph)


def test_a_body_input_of_a_wrong_type_fails():
    graph, loop = _loop_graph()
    loop.region.body.inputs[2].shape = (3, -3)
    _fails(graph, 'an input of the body of Loop[trip=3] (model.py:12) has '
                  'shape (3, -3)')


def test_something_else_than_a_value_fails():
    graph, loop = _loop_graph()
    loop.outputs[0] = 'h'
    graph.outputs[0] = 'h'
    _fails(graph, "an output of Loop[trip=3] (model.py:12) is 'h', not a "
                  "Value")


# --- region arity ------------------------------------------------------------

def test_a_loop_missing_an_invariant_fails():
    graph, loop = _loop_graph()
    del loop.inputs[2]
    _fails(graph, 'Loop[trip=3] (model.py:12) takes 2 inputs, but its '
                  'region needs 3: the trip count, 1 carried initial values '
                  'and 1 invariants')


def test_a_loop_with_an_extra_input_fails():
    graph, loop = _loop_graph()
    loop.inputs.append(graph.inputs[0])
    _fails(graph, 'takes 4 inputs, but its region needs 3')


def test_a_carried_value_the_body_does_not_read_changes_the_inputs():
    graph, loop = _loop_graph()
    loop.region.carried_read = [False]  # then h is an invariant
    graph.verify()
    loop.region.body.inputs[1:] = [loop.region.body.inputs[2]]
    _fails(graph, 'takes 3 inputs, but its region needs 2: the trip count, '
                  '0 carried initial values and 1 invariants')


def test_a_body_without_its_counter_and_carried_values_fails():
    graph, loop = _loop_graph()
    loop.region.carried_read = [True, True, True]
    loop.region.body.outputs[:1] = [loop.region.body.outputs[0]] * 3
    loop.outputs[:1] = [loop.outputs[0], ir.Value('temp', (2, 3), F32),
                        ir.Value('temp', (2, 3), F32)]
    _fails(graph, 'Loop[trip=3] (model.py:12): its body takes 3 inputs, '
                  'fewer than the counter and the 3 carried values it reads')


def test_a_loop_missing_its_scan_list_fails():
    graph, loop = _loop_graph()
    del loop.outputs[1]
    graph.outputs.pop()
    _fails(graph, 'Loop[trip=3] (model.py:12) returns 1 values, but its '
                  'region returns 2: 1 carried values, 0 counts of '
                  'iterations and 1 scan lists')


def test_a_loop_with_exits_returns_its_count():
    graph, loop = _loop_graph()
    loop.region.counts = True
    _fails(graph, 'returns 2 values, but its region returns 3')
    loop.outputs.insert(1, ir.Value('temp', (), numpy.int64))
    graph.verify()


def test_a_body_missing_a_scan_value_fails():
    graph, loop = _loop_graph()
    loop.region.body.outputs.pop()
    _fails(graph, 'the body of Loop[trip=3] (model.py:12) returns 1 values, '
                  'but its region needs 2: 1 next carried values and 1 scan '
                  'values')


def test_a_float_trip_count_fails():
    graph, loop = _loop_graph()
    loop.inputs[0] = graph.inputs[0]
    _fails(graph, 'Loop[trip=3] (model.py:12): its trip count is <Value '
                  'input h0 f32[2,3]>, not an integer scalar')


def test_a_counter_of_another_shape_fails():
    graph, loop = _loop_graph()
    loop.region.body.inputs[0].shape = (1,)
    _fails(graph, 'its counter is', 'not an integer scalar')


def test_a_broken_nested_loop_is_named():
    graph, outer = _loop_graph()
    inner_graph, inner = _loop_graph()
    body = outer.region.body
    # The inner loop runs inside the outer body over its carried value.
    inner.inputs = [body.inputs[0], body.inputs[1], body.inputs[2]]
    inner.loc = ('model.py', 14)
    inner_result = inner.outputs[0]
    body.nodes.append(inner)
    body.outputs[0] = inner_result
    graph.verify()
    del inner.region.body.outputs[1]
    _fails(graph, 'the body of Loop[trip=3] (model.py:14) returns 1 values')


# --- recorded graphs pass ----------------------------------------------------

class MLP(chainer.Chain):

    def __init__(self):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 5)
            self.l2 = L.Linear(5, 3)

    def forward(self, x):
        return F.softmax(self.l2(F.relu(self.l1(x))))


def _rnn(xs, h, W):
    ys = []
    for t in range(xs.shape[0]):
        h = F.tanh(xs[t] + F.matmul(h, W))
        ys.append(h)
    return F.stack(ys), h


def _with_exit(xs, h):
    for t in range(len(xs)):
        h = F.tanh(xs[t] + h)
        if not (h.array < 0.9).any():
            break
    return h


def _nested(xs, h):
    ys = []
    for t in range(xs.shape[0]):
        x = xs[t]
        for j in range(x.shape[1]):
            h = F.tanh(x[:, j] + h * 0.5)
        ys.append(h)
    return F.stack(ys)


def _calls(rng, *shapes, lengths=(4, 5, 6)):
    """One call per length: arrays of ``shapes`` (``None`` stands for the
    length) as Variables."""
    return [[chainer.Variable(rng.standard_normal(
        tuple(n if d is None else d for d in s)).astype(F32))
        for s in shapes] for n in lengths]


def _entries(fn, calls):
    jitted = chainerjit.jit(fn)
    for args in calls:
        jitted(*args)
    entries = jitted.cache_entries()
    assert entries and all(e.fallback is None for e in entries)
    assert jitted.cache_info().hits > 0
    return entries


def _graphs(entry):
    """The entry's graph and its training pair's graphs."""
    graphs = [entry.graph]
    if entry.training is not None:
        pair = entry.training.graphs
        graphs += [pair.forward, pair.backward]
    return graphs


def _loops(graph):
    found = []
    for node in graph.nodes:
        if node.region is not None:
            found += [node] + _loops(node.region.body)
    return found


def test_recorded_graphs_and_their_training_pairs_pass(rng):
    model = MLP()
    cases = [
        (model.forward, _calls(rng, (2, 4), lengths=(1, 1, 1)), 0),
        (_rnn, _calls(rng, (None, 2, 3), (2, 3), (3, 3)), 1),
        (_with_exit, _calls(rng, (None, 2, 3), (2, 3)), 1),
        (_nested, _calls(rng, (None, 2, 3, 4), (2, 4), lengths=(3, 3, 4)),
         2),
    ]
    for fn, calls, n_loops in cases:
        for entry in _entries(fn, calls):
            graphs = _graphs(entry)
            assert len(graphs) == 3
            for graph in graphs:
                graph.verify()
            assert len(_loops(graphs[0])) == n_loops
            assert len(_loops(graphs[2])) == n_loops


def test_a_recorded_loop_broken_by_hand_fails(rng):
    entry, = _entries(_rnn, _calls(rng, (None, 2, 3), (2, 3), (3, 3)))
    graph = entry.graph
    loop, = _loops(graph)
    assert loop.region.n_scans == 1 and loop.attrs == (('trip', 'T'),)
    del loop.inputs[-1]
    _fails(graph, 'Loop[trip=T] (test_graph.py:', 'takes 3 inputs, but '
           'its region needs 4: the trip count, 1 carried initial values '
           'and 2 invariants')


def test_a_recorded_backward_loop_broken_by_hand_fails(rng):
    entry, = _entries(_with_exit, _calls(rng, (None, 2, 3), (2, 3)))
    backward = entry.training.graphs.backward
    loop, = _loops(backward)
    assert loop.op == 'LoopGrad'
    loop.outputs.append(ir.Value('temp', (2, 3), F32))
    _fails(backward, 'LoopGrad[trip=T] (test_graph.py:', 'returns 3 values, '
           'but its region returns 2')
