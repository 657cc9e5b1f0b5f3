"""A fast path for Chainer's optimizer update, identical in what it
computes.

Once the forward and backward run compiled, ``optimizer.update()`` is a
large share of a training step: for each parameter Chainer enters device
and layout contexts, checks for fp32 updates, loss scaling and hooks, and
dispatches ``update_core`` to ``update_core_cpu``, which does the
arithmetic (``param -= lr * grad`` for SGD). For NumPy parameters those
steps are no-ops, so :func:`install` makes ``GradientMethod.update`` call
each rule's own ``update_core_cpu`` directly when every one of them is a
no-op, and take Chainer's own path otherwise. Parameters therefore change
exactly as in eager Chainer (bit for bit: the arithmetic is the rule's own
code, or for SGD and momentum SGD the same arithmetic in one loop with
the same roundings, ``_elementwise``); only the bookkeeping is skipped.

It is installed when chainerjit is imported and applies only to
optimizers whose target link trains a jitted forward (is one, or holds
one); set the environment variable ``CHAINERJIT_FAST_UPDATE=0`` to keep
Chainer's own ``update`` everywhere.
"""

import os
import weakref

from chainer import optimizer as optimizer_module
from chainer.optimizers import momentum_sgd
from chainer.optimizers import sgd
import numpy

from chainerjit import _elementwise


_chainer_update = optimizer_module.GradientMethod.update

#: Links whose jitted forward ran a training call.
jitted_links = weakref.WeakSet()


def install():
    """Makes ``GradientMethod.update`` take the fast path (unless
    ``CHAINERJIT_FAST_UPDATE=0``)."""
    if os.environ.get('CHAINERJIT_FAST_UPDATE', '1') != '0':
        optimizer_module.GradientMethod.update = update


def uninstall():
    optimizer_module.GradientMethod.update = _chainer_update


def update(self, lossfun=None, *args, **kwds):
    """``GradientMethod.update`` with :func:`update_param` for each
    parameter; the same steps in the same order otherwise."""
    if not _trains_jitted(self):
        return _chainer_update(self, lossfun, *args, **kwds)
    if lossfun is not None:
        use_cleargrads = getattr(self, '_use_cleargrads', True)
        loss = lossfun(*args, **kwds)
        if use_cleargrads:
            self.target.cleargrads()
        else:
            self.target.zerograds()
        loss.backward(loss_scale=self._loss_scale)
        del loss

    params = list(self.target.params())
    _reallocate_cleared_grads(self, params)
    self.check_nan_in_grads()
    self.call_hooks('pre')

    self.t += 1
    if self.is_safe_to_update():
        for param in params:
            update_param(param)

    _reallocate_cleared_grads(self, params)
    self.call_hooks('post')
    self.update_loss_scale()


def _trains_jitted(optimizer):
    """Is ``optimizer.target`` or one of its links in
    :data:`jitted_links`? Remembered per target until that set grows."""
    target = getattr(optimizer, 'target', None)
    known = optimizer.__dict__.get('_chainerjit_jitted')
    if known is not None and known[0] is target and (
            known[1] or known[2] == len(jitted_links)):
        return known[1]
    found = target is not None and any(
        link in jitted_links for link in target.links())
    optimizer._chainerjit_jitted = (target, found, len(jitted_links))
    return found


def _reallocate_cleared_grads(optimizer, params):
    for param in params:
        if param.grad is None:
            optimizer.reallocate_cleared_grads()
            return


def update_param(param):
    """``param.update()``: the rule's ``update_core_cpu`` straight away
    when Chainer's steps around it would do nothing."""
    rule = param.update_rule
    if rule is None:
        return
    if not _fast(rule, param):
        param.update()
        return
    if not rule.enabled:
        return
    rule.t += 1
    if rule.state is None:
        rule._init_states(param)
    if not _update_in_one_pass(rule, param):
        rule.update_core_cpu(param)


def _update_in_one_pass(rule, param):
    """SGD's and momentum SGD's ``update_core_cpu`` as one loop over the
    arrays (``_elementwise``: the same roundings, no temporaries). Returns
    False where the rule's own code must run (other rules, subclasses,
    arrays the loop does not take)."""
    cls = type(rule)
    if cls is sgd.SGDRule:
        grad = param.grad
        return grad is None or _elementwise.sgd_update(
            param.array, grad, rule.hyperparam.lr)
    if cls is momentum_sgd.MomentumSGDRule:
        grad = param.grad
        return grad is None or _elementwise.momentum_sgd_update(
            param.array, grad, rule.state['v'], rule.hyperparam.lr,
            rule.hyperparam.momentum)
    return False


_RULE = optimizer_module.UpdateRule


def _fast(rule, param):
    """Would ``rule.update(param)`` only call ``update_core_cpu`` (after
    initialising the states on the first call)?"""
    cls = type(rule)
    hooks = rule._hookable
    return (cls.update is _RULE.update and
            cls.update_core is _RULE.update_core and
            type(param.array) is numpy.ndarray and
            param.layout is None and param._loss_scale is None and
            not (rule._use_fp32_update and param.dtype == numpy.float16) and
            not hooks._pre_update_hooks and not hooks._post_update_hooks)
