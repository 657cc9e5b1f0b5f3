"""A linear-chain CRF's negative log-likelihood and its gradient on
arrays, by the forward-backward algorithm: the values of Chainer's
``F.crf1d`` (to rounding) without its graph of Variables at every step,
over steps whose batch stays or shrinks (sequences sorted by length and
transposed, as ``L.CRF1d(transpose=True)`` gives them).

``xs`` are the steps' scores, ``(b_t, K)`` each, ``b_t`` never growing;
``ys`` their labels, ``(b_t,)``; ``cost`` the transitions ``(K, K)``.
"""

import collections

import chainer
import numpy

from chainer.links.rnn import n_step_rnn


class Run(collections.namedtuple('Run', 'loss alphas logz')):
    """A forward's results: each sequence's loss, in the order of the
    first step's rows; the forward variables of every step; each
    sequence's log partition."""

    __slots__ = ()


def logsumexp(x, axis):
    """``log(sum(exp(x), axis))``, as ``F.logsumexp`` computes it."""
    xp = chainer.backend.get_array_module(x)
    m = x.max(axis=axis, keepdims=True)
    y = x - m
    xp.exp(y, out=y)
    y_sum = y.sum(axis=axis)
    return xp.asarray(xp.log(y_sum) + m.reshape(y_sum.shape))


def forward(cost, xs, ys):
    """The :class:`Run` of the sequences, as ``F.crf1d``'s forward
    computes its terms."""
    xp = chainer.backend.get_array_module(cost)
    alpha = xs[0]
    alphas = [alpha]
    last = xp.empty_like(alpha)  # each sequence's alpha at its last step
    for x in xs[1:]:
        batch = len(x)
        last[batch:len(alpha)] = alpha[batch:]
        alpha = logsumexp(alpha[:batch, :, None] + cost, axis=1) + x
        alphas.append(alpha)
    last[:len(alpha)] = alpha
    logz = logsumexp(last, axis=1)
    n_label = cost.shape[0]
    flat_cost = cost.reshape(-1)
    score = xs[0][xp.arange(len(ys[0])), ys[0]]
    for x, y, y_prev in zip(xs[1:], ys[1:], ys[:-1]):
        batch = len(x)
        score[:batch] += x[xp.arange(batch), y] + \
            flat_cost[y_prev[:batch] * n_label + y]
    return Run(logz - score, alphas, logz)


def reduced(loss, reduce):
    """``F.crf1d``'s result of the sequences' ``loss``: their mean, or
    each."""
    if reduce == 'no':
        return loss
    xp = chainer.backend.get_array_module(loss)
    return xp.asarray(loss.sum() * loss.dtype.type(1. / len(loss)))


def weights(gy, reduce, n, dtype):
    """Each sequence's gradient of the loss, of the output's ``gy``."""
    if reduce == 'no':
        return gy
    xp = chainer.backend.get_array_module(gy)
    return xp.full(n, gy * dtype.type(1. / n), dtype)


def backward(cost, xs, ys, run, weights):
    """The gradients ``(of cost, [of each step's scores])`` of the
    sequences' losses weighted by ``weights``: each step's marginals less
    its labels, and the transitions' pairwise marginals less those taken,
    from the backward variables. A single step takes no transition: the
    cost then has none (``None``), as in Chainer's graph."""
    xp = chainer.backend.get_array_module(cost)
    n_label = cost.shape[0]
    eye = xp.eye(n_label, dtype=cost.dtype)
    g_cost = xp.zeros_like(cost)
    g_xs = [None] * len(xs)
    beta = xp.zeros_like(xs[-1])
    for t in range(len(xs) - 1, -1, -1):
        batch = len(xs[t])
        w = weights[:batch, None]
        logz = run.logz[:batch, None]
        g = xp.exp(run.alphas[t] + beta - logz)
        g -= eye[ys[t]]
        g_xs[t] = g * w
        if not t:
            break
        ahead = xs[t] + beta
        pairs = xp.exp(run.alphas[t - 1][:batch, :, None] + cost +
                       ahead[:, None, :] - logz[:, :, None])
        g_cost += xp.tensordot(weights[:batch], pairs, 1)
        g_cost -= (eye[ys[t - 1][:batch]] * w).T.dot(eye[ys[t]])
        before = xp.zeros_like(xs[t - 1])
        before[:batch] = logsumexp(cost + ahead[:, None, :], axis=2)
        beta = before
    return g_cost if len(xs) > 1 else None, g_xs


def best_paths(cost, xs):
    """``(scores, path)`` of ``F.argmax_crf1d(cost, xs)``: each sequence's
    best score (the longest first, as the steps' batches end) and its
    labels at each step (int32 arrays), by Viterbi's algorithm as Chainer
    writes it."""
    xp = chainer.backend.get_array_module(cost)
    alpha = xs[0]
    ended, chosen = [], []  # per step: the rows that end, and the argmax
    for x in xs[1:]:
        batch = len(x)
        ended.append(alpha[batch:] if len(alpha) > batch else None)
        scores = alpha[:batch, :, None] + cost
        chosen.append(scores.argmax(axis=1).astype(numpy.int32))
        alpha = scores.max(axis=1) + x
    labels = alpha.argmax(axis=1).astype(numpy.int32)
    path = [labels]
    for came_from, rest in zip(chosen[::-1], ended[::-1]):
        labels = came_from[xp.arange(len(labels)), labels]
        if rest is not None:
            labels = xp.concatenate(
                [labels, rest.argmax(axis=1).astype(numpy.int32)])
        path.append(labels)
    path.reverse()
    scores = [alpha.max(axis=1)] + [rest.max(axis=1) for rest in ended[::-1]
                                    if rest is not None]
    return xp.concatenate(scores), path


def best_scores_grad(cost, xs, gscores):
    """The gradients ``(gcost, gxs)`` of :func:`best_paths`'s scores, whose
    gradient is ``gscores``, as Chainer's graph of the max at each step
    gives them: each maximum's gradient goes to every score equal to it
    (``gcost`` ``None`` for one step, which reads no cost)."""
    xp = chainer.backend.get_array_module(cost)
    alphas, lattice = [xs[0]], []
    for x in xs[1:]:
        scores = alphas[-1][:len(x), :, None] + cost
        lattice.append(scores)
        alphas.append(scores.max(axis=1) + x)
    ends = _ends_of_rows([len(x) for x in xs])
    galphas = [xp.zeros_like(alpha) for alpha in alphas]
    for t, (alpha, rows) in enumerate(zip(alphas, ends)):
        if rows is not None:  # (the sequences whose last step is t)
            top = alpha[rows].max(axis=1, keepdims=True)
            galphas[t][rows] += gscores[rows, None] * (alpha[rows] == top)
    gcost = xp.zeros_like(cost) if len(xs) > 1 else None
    for t in range(len(xs) - 1, 0, -1):
        scores = lattice[t - 1]
        picked = scores == scores.max(axis=1, keepdims=True)
        gscores_t = galphas[t][:, None, :] * picked
        galphas[t - 1][:len(xs[t])] += gscores_t.sum(axis=2)
        gcost += gscores_t.sum(axis=0)
    return gcost, galphas


def _ends_of_rows(batches):
    """For each step (its batch ``batches[t]``, decreasing), the rows of
    the sequences that end there, as a slice, or ``None``."""
    found = []
    for t, batch in enumerate(batches):
        later = batches[t + 1] if t + 1 < len(batches) else 0
        found.append(slice(later, batch) if later < batch else None)
    return found


class Transposed(collections.namedtuple('Transposed', 'order rows')):
    """Sequences sorted by length as ``L.CRF1d(transpose=True)`` sorts
    them (``order``) and transposed: the rows of their items joined,
    sorted, that each step takes (``rows``)."""

    __slots__ = ()

    @classmethod
    def of(cls, items):
        order = n_step_rnn.argsort_list_descent(items)
        lengths = numpy.array([len(items[k]) for k in order])
        starts = numpy.concatenate([[0], numpy.cumsum(lengths[:-1])])
        return cls(order, [starts[:int((lengths > t).sum())] + t
                           for t in range(int(lengths[0]))])

    def steps(self, items):
        """The steps of ``items`` (arrays as long as the sequences)."""
        xp = chainer.backend.get_array_module(items[0])
        joined = xp.concatenate([items[k] for k in self.order])
        return [joined[rows] for rows in self.rows]

    def items(self, steps, like):
        """Arrays like ``like``, the sequences, of the values of
        ``steps``, in the sequences' order."""
        xp = chainer.backend.get_array_module(steps[0])
        joined = xp.empty((sum(len(x) for x in like),) + steps[0].shape[1:],
                          steps[0].dtype)
        for rows, step in zip(self.rows, steps):
            joined[rows] = step
        ends = numpy.cumsum([len(like[k]) for k in self.order])[:-1]
        found = [None] * len(like)
        for k, part in zip(self.order, xp.split(joined, ends)):
            found[k] = part
        return found
