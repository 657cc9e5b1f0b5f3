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
        # ((peeled node, ((position, int, step), ...)), ...): the ints of
        # its NumPy calls that the counter gave (``rolling``), or None
        self.peeled_ints = ()

    @property
    def n_carried(self):
        return len(self.carried_read)

    def follow_rows(self, loop, found, rows, follow_body):
        """Follows rows (``{value: rows}``, as ``ops.Rows`` or anything
        compared with ``==``) from the inputs of ``loop``, this region's
        Loop node, which have ``found`` (``None`` for none), into its body
        (``follow_body(body nodes)``, which extends ``rows``) and out of
        it: a value it carries keeps its rows from step to step, and a
        list of its steps has its steps' rows. Returns ``None``; what
        ``follow_body`` returned where that is not ``None``;
        :data:`CARRIED_OTHERWISE` where a carried value's rows change
        from step to step; :data:`ROWS_OF_ITS_OWN` where an output has
        other rows already."""
        body = self.body
        for value, r in zip(body.inputs[1:], found[1:]):
            if r is not None:
                rows[value] = r
        why = follow_body(body.nodes)
        if why is not None:
            return why
        read = iter(body.inputs[1:1 + sum(self.carried_read)])
        given = []
        for k, is_read in enumerate(self.carried_read):
            after = rows.get(body.outputs[k])
            if is_read and rows.get(next(read)) != after:
                return CARRIED_OTHERWISE
            given.append((loop.outputs[k], after))
        lists = loop.outputs[self.n_carried + self.counts:]
        given += zip(lists, (rows.get(v) for v in body.outputs[
            self.n_carried:]))  # a list's rows: its items'
        for value, r in given:
            if r is not None and rows.setdefault(value, r) != r:
                return ROWS_OF_ITS_OWN
        return None


#: What :meth:`Region.follow_rows` gives where a value a loop carries
#: gets rows at its first step, or loses them.
CARRIED_OTHERWISE = 'carried otherwise'

#: What :meth:`Region.follow_rows` gives where a loop's output has rows of
#: its own already (the steps of a loop of that length, stacked).
ROWS_OF_ITS_OWN = 'rows of its own'


class PerIteration(list):
    """Recorded results of a body node, one per iteration."""
