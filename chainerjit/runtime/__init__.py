"""The runtime: compiling a call (:mod:`.compile`), the cache of
compiled programs (:mod:`.cache`), the ``chainer.FunctionNode`` that runs
them inside Chainer's graph (:mod:`.function`), and the cache-hit call
path in C (``_calls.pyx``)."""
