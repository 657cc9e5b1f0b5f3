"""A fast path for calling a link whose ``forward`` is jitted, identical
in what it does.

``model(x)`` runs Chainer's ``Link.__call__`` in Python before it reaches
the jitted forward: it fetches the global and local link hooks, looks for
a mixin's ``__call__`` and calls ``self.forward``. At batch 1 of an MLP
that frame is about a tenth of a jitted call.

:func:`install` makes ``Link.__call__`` ``_fastpath.link_call``: for a
link whose ``forward`` is a jitted function (``model.forward =
chainerjit.jit(model.forward)`` or ``@chainerjit.jit`` in the class
body), while no link hook is registered, it calls the jitted forward
straight from C, as Chainer's ``Link.__call__`` would with no hooks. Any
other link, or any call while a link hook is registered, runs Chainer's
own ``Link.__call__``, so eager Chainer is unchanged.

It is installed when chainerjit is imported; set the environment variable
``CHAINERJIT_FAST_CALL=0`` to keep Chainer's own ``Link.__call__``.
"""

import os

import chainer

from chainerjit import _fastpath

_chainer_call = chainer.Link.__call__


def install():
    """Makes ``Link.__call__`` take the fast path (unless
    ``CHAINERJIT_FAST_CALL=0``)."""
    if os.environ.get('CHAINERJIT_FAST_CALL', '1') != '0':
        chainer.Link.__call__ = _fastpath.link_call


def uninstall():
    chainer.Link.__call__ = _chainer_call
