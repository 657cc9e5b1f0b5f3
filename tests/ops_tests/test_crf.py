"""``ops.crf``: a linear-chain CRF's loss and gradient on arrays, by the
forward-backward algorithm, against Chainer's ``F.crf1d`` (its values and
its backward) over steps whose batch stays or shrinks, and sequences in
any order transposed as ``L.CRF1d(transpose=True)`` does."""

import chainer
import chainer.functions as F
import hypothesis
import hypothesis.strategies as st
import numpy

from chainerjit.ops import crf


def _steps(seed, lengths, n_label, dtype):
    """Scores and labels of sequences of ``lengths`` (not growing),
    transposed to steps."""
    rng = numpy.random.RandomState(seed)
    batches = [sum(1 for n in lengths if n > t) for t in range(lengths[0])]
    xs = [(rng.standard_normal((b, n_label)) * 3).astype(dtype)
          for b in batches]
    ys = [rng.randint(0, n_label, b).astype(numpy.int32) for b in batches]
    cost = rng.standard_normal((n_label, n_label)).astype(dtype)
    return cost, xs, ys


def _chainer(cost, xs, ys, reduce, gy):
    """``F.crf1d``'s value and the gradients of its backward."""
    cost = chainer.Variable(cost)
    xs = [chainer.Variable(x) for x in xs]
    loss = F.crf1d(cost, xs, ys, reduce)
    loss.grad = gy
    loss.backward()
    return loss.array, cost.grad, [x.grad for x in xs]


def _tolerances(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == numpy.float32 else \
        dict(rtol=1e-10, atol=1e-10)


@hypothesis.settings(max_examples=40, deadline=None, derandomize=True)
@hypothesis.given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=6).map(
        lambda ns: sorted(ns, reverse=True)),
    n_label=st.integers(1, 6), reduce=st.sampled_from(['mean', 'no']),
    dtype=st.sampled_from([numpy.float32, numpy.float64]),
    seed=st.integers(0, 2 ** 16))
def test_loss_and_gradients_are_crf1d(lengths, n_label, reduce, dtype,
                                      seed):
    cost, xs, ys = _steps(seed, lengths, n_label, dtype)
    gy = numpy.asarray(numpy.random.RandomState(seed + 1).standard_normal(
        () if reduce == 'mean' else len(lengths)), dtype)
    expected, g_cost, g_xs = _chainer(cost, xs, ys, reduce, gy)
    run = crf.forward(cost, xs, ys)
    loss = crf.reduced(run.loss, reduce)
    assert loss.dtype == expected.dtype and loss.shape == expected.shape
    numpy.testing.assert_allclose(loss, expected, **_tolerances(dtype))
    got_cost, got_xs = crf.backward(cost, xs, ys, run, crf.weights(
        gy, reduce, len(lengths), cost.dtype))
    if g_cost is None:  # one step: no transition
        assert got_cost is None
    else:
        numpy.testing.assert_allclose(got_cost, g_cost, **_tolerances(dtype))
    for got, g in zip(got_xs, g_xs):
        assert got.dtype == g.dtype
        numpy.testing.assert_allclose(got, g, **_tolerances(dtype))


@hypothesis.settings(max_examples=20, deadline=None, derandomize=True)
@hypothesis.given(lengths=st.lists(st.integers(1, 8), min_size=1,
                                   max_size=5),
                  seed=st.integers(0, 2 ** 16))
def test_sequences_in_any_order_transpose_as_the_link_does(lengths, seed):
    rng = numpy.random.RandomState(seed)
    items = [rng.standard_normal((n, 3)).astype(numpy.float32)
             for n in lengths]
    transposed = crf.Transposed.of(items)
    expected = F.transpose_sequence(
        chainer.links.rnn.n_step_rnn.permutate_list(
            items, transposed.order, inv=False))
    steps = transposed.steps(items)
    assert [s.tolist() for s in steps] == \
        [e.array.tolist() for e in expected]
    back = transposed.items(steps, items)
    assert [b.tolist() for b in back] == [x.tolist() for x in items]


@hypothesis.settings(max_examples=30, deadline=None, derandomize=True)
@hypothesis.given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=6).map(
        lambda ns: sorted(ns, reverse=True)),
    n_label=st.integers(1, 6), seed=st.integers(0, 2 ** 16))
def test_best_paths_are_argmax_crf1d(lengths, n_label, seed):
    cost, xs, _ = _steps(seed, lengths, n_label, numpy.float32)
    if seed % 3 == 0:  # ties: the first label wins, as Chainer's argmax
        xs = [numpy.round(x) for x in xs]
        cost = numpy.round(cost)
    expected_score, expected_path = F.argmax_crf1d(cost, xs)
    score, path = crf.best_paths(cost, xs)
    numpy.testing.assert_allclose(score, expected_score.array, rtol=1e-6)
    assert [p.dtype for p in path] == [p.dtype for p in expected_path]
    assert [p.tolist() for p in path] == [p.tolist() for p in expected_path]


@hypothesis.settings(max_examples=30, deadline=None, derandomize=True)
@hypothesis.given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=6).map(
        lambda ns: sorted(ns, reverse=True)),
    n_label=st.integers(1, 6), seed=st.integers(0, 2 ** 16))
def test_best_scores_gradient_is_argmax_crf1d_graphs(lengths, n_label, seed):
    cost, xs, _ = _steps(seed, lengths, n_label, numpy.float32)
    if seed % 3 == 0:  # ties: every score equal to a maximum gets its grad
        xs = [numpy.round(x) for x in xs]
        cost = numpy.round(cost)
    cost_var = chainer.Variable(cost)
    xs_var = [chainer.Variable(x) for x in xs]
    score, _ = F.argmax_crf1d(cost_var, xs_var)
    gscores = numpy.random.RandomState(seed).standard_normal(
        score.shape).astype(numpy.float32)
    score.grad = gscores
    score.backward()
    g_cost, g_xs = crf.best_scores_grad(cost, xs, gscores)
    assert (g_cost is None) == (cost_var.grad is None)
    if g_cost is not None:
        numpy.testing.assert_allclose(g_cost, cost_var.grad, rtol=1e-5,
                                      atol=1e-5)
    for g, x in zip(g_xs, xs_var):
        numpy.testing.assert_allclose(
            g, numpy.zeros_like(g) if x.grad is None else x.grad,
            rtol=1e-5, atol=1e-5)
