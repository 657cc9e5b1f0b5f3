"""A fast path for calling a link whose ``forward`` is jitted, identical
in what it does.

``model(x)`` runs Chainer's ``Link.__call__`` in Python before it reaches
the jitted forward: it fetches the global and local link hooks, looks for
a mixin's ``__call__`` and calls ``self.forward``. At batch 1 of an MLP
that frame is about a tenth of a jitted call.

Installed, it makes ``Link.__call__`` ``_calls.link_call``: for a
link whose ``forward`` is a jitted function (``model.forward =
chainerjit.jit(model.forward)`` or ``@chainerjit.jit`` in the class
body), while no link hook is registered, it calls the jitted forward
straight from C, as Chainer's ``Link.__call__`` would with no hooks. Any
other link, or any call while a link hook is registered, runs Chainer's
own ``Link.__call__``, so eager Chainer is unchanged.

It is installed with the other fast paths
(``chainerjit.fastpaths``); set the environment variable
``CHAINERJIT_FAST_CALL=0`` to keep Chainer's own ``Link.__call__``.
"""


from chainerjit.runtime import _calls

#: What ``chainer.Link.__call__`` is while the fast path is installed.
call = _calls.link_call
