"""Lowerings of the functions of chainer.distributions.

A ``Bernoulli``'s log-probability (a VAE's reconstruction term) is an
element-wise kernel computed as Chainer computes it; a ``Normal``'s sample
is Chainer's own arithmetic on a recorded draw
(``frontend.recording_patches``).
"""

import numpy

from chainer import utils
from chainer.distributions import bernoulli

from chainerjit.ops import GradRule
from chainerjit.ops import Kernel
from chainerjit.ops import lowering
from chainerjit.ops import rows_broadcast


@lowering(bernoulli.BernoulliLogProb)
def lower_bernoulli_log_prob(node, ctx):
    """``log p(x)`` of a Bernoulli of ``logit``: the same operations as
    ``BernoulliLogProb.forward`` (NaN where a logit is infinite or, with
    ``binary_check``, ``x`` is not 0 or 1, in the gradient), its rows
    those of its broadcast inputs."""
    xp = ctx.xp
    binary_check = node.binary_check
    dtype = ctx.out_dtypes[0]

    def log_prob(logit, x):
        y = utils.force_array(logit * (x - 1) - xp.log(xp.exp(-logit) + 1))
        infinite = xp.isinf(logit)
        with numpy.errstate(divide='ignore', invalid='raise'):
            y = xp.where(xp.bitwise_and(infinite, logit > 0), xp.log(x), y)
            y = xp.where(xp.bitwise_and(infinite, logit <= 0),
                         xp.log(1 - x), y)
        if binary_check:
            y[utils.force_array(xp.bitwise_and(x != 0, x != 1))] = -xp.inf
        return utils.force_array(y, dtype)

    def grad(xs, ys, gys, wanted):
        logit, x = xs
        dlogit = x - 1. / (1. + xp.exp(-logit))
        nan = xp.array(xp.nan).astype(dlogit.dtype)
        dlogit = xp.where(xp.isinf(logit), nan, dlogit)
        if binary_check:
            dlogit = xp.where(xp.bitwise_and(x != 0, x != 1), nan, dlogit)
        return utils.sum_to(gys[0] * dlogit, logit.shape), None

    return Kernel(log_prob, {'binary_check': binary_check},
                  grad=GradRule(grad, inputs=(0, 1)),
                  lengths=rows_broadcast(ctx.in_shapes, ctx.out_shapes[0]))
