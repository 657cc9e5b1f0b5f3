"""Passes, each stated as IR before and after."""

import re

import chainer
import chainer.functions as F
import numpy

import chainerjit
from chainerjit import passes
from chainerjit import testing
from chainerjit.frontend import trace
from chainerjit.passes import cse
from chainerjit.passes import dce
from chainerjit.passes import fold
from chainerjit.passes import simplify


def _record(fn, *args):
    leaves = []
    chainerjit.frontend.signature.flatten((args, {}), leaves)
    with chainer.no_backprop_mode():
        recording = trace.record(fn, None, args, {}, leaves, 'f',
                                 ['x%d' % i for i in range(len(leaves))])
    return recording.graph


def _text(graph):
    return re.sub(r'  # .*', '', str(graph))


def _f(x):
    F.exp(x)  # unused
    mask = F.tanh(numpy.ones((3, 4), numpy.float32))
    return x * mask


def test_fold_then_dce():
    graph = _record(_f, numpy.zeros((3, 4), numpy.float32))
    assert _text(graph) == '''\
graph f(x0: f32[3,4]; ):
  c0: f32[3,4] = const
  %0: f32[3,4] = Exp(x0)
  %1: f32[3,4] = Tanh(c0)
  %2: f32[3,4] = Mul(%1, x0)
  return (%2)'''
    graph, changed = fold.fold_constants(graph)
    assert changed
    assert _text(graph) == '''\
graph f(x0: f32[3,4]; ):
  c0: f32[3,4] = const
  c1: f32[3,4] = const
  %0: f32[3,4] = Exp(x0)
  %1: f32[3,4] = Mul(c1, x0)
  return (%1)'''
    graph, changed = dce.dce(graph)
    assert changed
    assert _text(graph) == '''\
graph f(x0: f32[3,4]; ):
  c0: f32[3,4] = const
  %0: f32[3,4] = Mul(c0, x0)
  return (%0)'''
    graph.verify()
    assert not fold.fold_constants(graph)[1]
    assert not dce.dce(graph)[1]


def test_pipeline_result_matches_eager(rng):
    testing.assert_jit_matches_eager(
        _f, [(rng.randn(3, 4).astype(numpy.float32),) for _ in range(3)])


def test_print_after_names_the_pass(capsys, monkeypatch):
    monkeypatch.setenv('CHAINERJIT_PRINT_AFTER', 'fold_constants')
    passes.run(_record(_f, numpy.zeros((3, 4), numpy.float32)))
    err = capsys.readouterr().err
    assert '--- IR of f after fold_constants (changed) ---' in err
    assert 'Mul(c1, x0)' in err


def _twice(x, w):
    a = F.tanh(x)
    b = F.tanh(x)  # the same as a
    c = F.get_item(x, 0) + F.get_item(x, 1)  # two different indexes
    d = F.dropout(x, 0.5) + F.dropout(x, 0.5)  # random: both kept
    return a + b + F.matmul(a, w) + F.matmul(b, w) + c + d


def test_cse_merges_equal_pure_nodes_only():
    x = numpy.ones((2, 2), numpy.float32)
    graph = _record(_twice, x, numpy.eye(2, dtype=numpy.float32))
    before = _text(graph)
    assert before.count('Tanh') == 2 and before.count('MatMul') == 2
    graph, changed = cse.cse(graph)
    assert changed
    after = _text(graph)
    assert after.count('Tanh') == 1 and after.count('MatMul') == 1
    assert after.count('GetItem') == 2
    assert after.count('Dropout') == 2


def test_cse_then_results_match_eager(rng):
    calls = [(rng.standard_normal((2, 2)).astype(numpy.float32),
              rng.standard_normal((2, 2)).astype(numpy.float32))
             for _ in range(3)]

    def f(x, w):
        return F.tanh(x) * F.tanh(x) + F.matmul(F.tanh(x), w)
    jitted = testing.assert_jit_matches_eager(f, calls)
    assert str(jitted.cache_entries()[0].graph).count('Tanh') == 1


def _views(x):
    h = F.reshape(F.reshape(x, (6, 4)), (2, 12))
    h = F.transpose(F.transpose(h, (1, 0)), (1, 0))
    h = F.tanh(h)
    g = F.expand_dims(F.squeeze(F.reshape(h, (2, 1, 12))), 0)
    return F.swapaxes(F.transpose(F.reshape(g, (1, 2, 3, 4)),
                                  (0, 2, 1, 3)), 1, 3)


def test_simplify_folds_chains_of_views():
    graph = _record(_views, numpy.zeros((3, 8), numpy.float32))
    graph, changed = simplify.simplify(graph)
    assert changed
    graph, _ = dce.dce(graph)
    assert _text(graph) == '''\
graph f(x0: f32[3,8]; ):
  %0: f32[2,12] = Reshape[shape=(2, 12)](x0)
  %1: f32[2,12] = Tanh(%0)
  %2: f32[1,2,3,4] = Reshape[shape=(1, 2, 3, 4)](%1)
  %3: f32[1,4,2,3] = Transpose[axes=(0, 3, 1, 2)](%2)
  return (%3)'''


def test_simplified_views_match_eager_with_gradients(rng):
    calls = [(rng.standard_normal((3, 8)).astype(numpy.float32),)
             for _ in range(3)]
    testing.assert_jit_matches_eager(_views, calls)
    testing.assert_jit_grads_match_eager(_views, calls)


def test_a_returned_identity_view_is_kept():
    def f(x):
        return F.transpose(F.transpose(x, (1, 0)), (1, 0))
    graph = _record(f, numpy.zeros((2, 3), numpy.float32))
    graph, _ = dce.dce(simplify.simplify(graph)[0])
    assert _text(graph) == '''\
graph f(x0: f32[2,3]; ):
  %0: f32[2,3] = Transpose[axes=(0, 1)](x0)
  return (%0)'''


def _unused_in_a_loop(xs, h):
    for t in range(len(xs)):
        F.exp(xs[t])  # unused
        h = F.tanh(h + xs[t])
    return h


def test_dce_drops_what_a_loop_body_does_not_use(rng):
    calls = [(rng.randn(n, 2, 3).astype(numpy.float32),
              rng.randn(2, 3).astype(numpy.float32)) for n in (4, 6, 5)]
    jitted = testing.assert_jit_matches_eager(_unused_in_a_loop, calls)
    entry, = jitted.cache_entries()
    text = str(entry.graph)
    assert 'Loop' in text and 'Tanh' in text and 'Exp' not in text, text
