"""Loop regions: the body of a ``Loop`` node and how values flow through
it (``frontend.rolling`` builds them; ``passes.autodiff`` and
``backend.codegen`` read them)."""


class Region(object):
    """A Loop node's body and how values flow through it.

    Attributes:
        body: the body graph. Its inputs are the counter ``i``, then one
            value per carried value that the body reads, then the
            invariants; its outputs are the carried values' next values,
            then the per-iteration (scan) values.
        carried_read: one bool per carried value: does the body read it
            (``False``: only its last value is used after the loop)?
        n_scans: how many outputs are lists of per-iteration values.
        kind, loc: the loop statement's kind and source line.
        fingerprint: what makes two regions alike (nested loops).

    The Loop node's inputs are the trip count, the initial values of the
    carried values the body reads, then the invariants; its outputs are
    the carried values after the last iteration, then the scan lists.
    """

    def __init__(self, body, carried_read, n_scans, kind, loc):
        self.body = body
        self.carried_read = carried_read
        self.n_scans = n_scans
        self.kind = kind
        self.loc = loc
        self.fingerprint = None
        self.counts = False  # has exits: the Loop node's output after the
        # carried values is the number of iterations run
        self.skip = None  # the SkipIf node giving the trip count, if any
        self.peeled = ()  # the nodes of a first iteration run before it

    @property
    def n_carried(self):
        return len(self.carried_read)


class PerIteration(list):
    """Recorded results of a body node, one per iteration."""
