"""A fast path for Chainer's optimizer update, identical in what it
computes.

Once the forward and backward run compiled, ``optimizer.update()`` is a
large share of a training step: for each parameter Chainer enters device
and layout contexts, checks for fp32 updates, loss scaling and hooks, and
dispatches ``update_core`` to ``update_core_cpu``, which does the
arithmetic (``param -= lr * grad`` for SGD). For NumPy parameters those
steps are no-ops, so Installed, it makes ``GradientMethod.update`` call
each rule's own ``update_core_cpu`` directly when every one of them is a
no-op, and take Chainer's own path otherwise. Parameters therefore change
exactly as in eager Chainer (bit for bit: the arithmetic is the rule's own
code, or for SGD and momentum SGD the same arithmetic in one loop with
the same roundings, ``_loops_elementwise``); only the bookkeeping is
skipped.

It is installed with the other fast paths
(``chainerjit.fastpaths``) and applies only to
optimizers whose target link trains a jitted forward (is one, or holds
one); set the environment variable ``CHAINERJIT_FAST_UPDATE=0`` to keep
Chainer's own ``update`` everywhere.
"""

import weakref

from chainer import optimizer as optimizer_module

from chainerjit.fastpaths import _native


_chainer_update = optimizer_module.GradientMethod.update

#: Links whose jitted forward ran a training call.
jitted_links = weakref.WeakSet()


def update(self, lossfun=None, *args, **kwds):
    """``GradientMethod.update`` with :func:`update_params` for the
    parameters; the same steps in the same order otherwise."""
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
        update_params(params)

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
    if _native.any_grad_cleared(params):
        optimizer.reallocate_cleared_grads()


#: ``update_params(params)``: ``param.update()`` for each, the fast way
#: where it computes the same (``_native.update_params``).
update_params = _native.update_params
