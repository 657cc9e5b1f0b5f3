"""When a jitted function stops recording: never slower than eager.

Recording a call costs several eager calls, and compiling it more. A
function pays that back only if later calls reuse what was compiled. Two
patterns never do, and after either a :class:`RecordingBudget` stops the
function from recording new signatures (as TorchDynamo stops compiling a
frame at its cache size limit): a miss then runs eagerly at once, while
the entries compiled so far still serve the calls that hit them.

* **Misses in a row.** ``limit`` recordings in a row, each for a change
  that rarely comes back (a new value of a Python argument, a number
  that changes on every call; new lengths of the items of a list of
  sequences of different lengths, whose combinations rarely repeat), with
  no call between them reusing an entry; or, whatever changed, more
  recordings in a row than the cache holds (``maxsize``, at least
  ``limit``; never for an unbounded cache): calls that keep evicting
  each other's entries.
* **Entries evicted unused.** ``limit`` evictions in a row, each of an
  entry that served fewer calls than the cache holds entries: the calls
  cycle through more signatures than the cache keeps (a stateful link
  called on batches that shrink step by step, each pair of sizes a
  signature), so that what is compiled is evicted before it pays back,
  and recording would go on for ever.
* **The same fallback again.** :data:`FALLBACK_REPEATS` signatures that
  ran eagerly because of the same construct at the same line (a value
  read into Python): the next signature would be recorded only to run
  eagerly too.

``cache_clear()`` starts the budget again.
"""

import collections

#: Signatures falling back at the same construct after which new
#: signatures are no longer recorded.
FALLBACK_REPEATS = 2


class RecordingBudget(object):
    """Decides, for one jitted function, whether a cache miss records."""

    def __init__(self, limit, maxsize):
        self.limit = limit
        self.any_limit = float('inf') if maxsize is None else \
            max(limit, maxsize)
        self.clear()

    def clear(self):
        self.stopped = None  # why the function no longer records
        self._in_a_row = 0  # misses with no hit between them
        self._rare_in_a_row = 0  # of those, the latest for a rare change
        self._rare_change = None  # what the latest of those changed
        self._hits_then = None  # the cache's hits at the latest miss
        self._fallbacks = collections.Counter()  # reason -> signatures
        self._evicted_unused = 0  # in a row

    def may_record(self, hits):
        """Called on a miss, with the cache's hits so far: may this call
        be recorded? Once it may not, :attr:`stopped` says why."""
        if self.stopped is not None:
            return False
        if hits != self._hits_then:
            self._in_a_row = self._rare_in_a_row = 0
        self._hits_then = hits
        if self._rare_in_a_row >= self.limit:
            self.stopped = (
                '%d calls in a row were recorded for %s, and no call reused '
                'what was compiled' % (self._rare_in_a_row,
                                       self._rare_change))
        elif self._evicted_unused >= self.limit:
            self.stopped = (
                '%d entries in a row were evicted having served fewer than '
                '%d calls each: the calls cycle through more signatures '
                'than the cache holds' % (self._evicted_unused,
                                          self.any_limit))
        elif self._in_a_row >= self.any_limit:
            self.stopped = (
                '%d calls in a row were recorded, more than the cache '
                'holds, and no call reused what was compiled'
                % self._in_a_row)
        self._in_a_row += 1
        return self.stopped is None

    def note_miss(self, rare_change):
        """Notes why the miss being recorded missed: ``rare_change`` says
        what changed if it rarely comes back (``'a new value of a Python
        argument'``), else it is ``None``."""
        self._rare_change = rare_change
        self._rare_in_a_row = (self._rare_in_a_row + 1
                               if rare_change else 0)

    def note_eviction(self, entry):
        """Notes that the cache evicted ``entry`` for a new one."""
        self._evicted_unused = self._evicted_unused + 1 \
            if entry.hits < self.any_limit else 0

    def note_fallback(self, reason):
        """Notes that a recording fell back to eager for ``reason`` (a
        construct and its line). Returns True when that stops recording."""
        self._fallbacks[reason] += 1
        if self.stopped is None and \
                self._fallbacks[reason] >= FALLBACK_REPEATS:
            self.stopped = '%d signatures ran eagerly because of %s' % (
                self._fallbacks[reason], reason)
            return True
        return False
