"""Scratch buffers: memory a kernel keeps from call to call for its own
temporaries (``Scratch``), and the count of what they hold
(``scratch_mark``, ``scratch_bytes``; ``benchmarks/bench_memory.py``)."""

import contextlib
import itertools
import threading
import weakref

import numpy


def view(buffer, shape, dtype):
    dtype = numpy.dtype(dtype)
    n = int(numpy.prod(shape)) * dtype.itemsize
    return buffer[:n].view(dtype).reshape(shape)


class Scratch(object):
    """Buffers a kernel keeps from call to call for its own temporaries
    (a convolution's patches, a loop's stacked gradient factors), which
    the arena does not see: they are no values of the program. NumPy
    takes a new array of megabytes from the system when the heap has
    given its memory back, which it does when other code (eager Chainer
    in the same process, say) frees as much; every page of it then
    faults in on first use (LeNet's first convolution: 600 faults a call,
    a third of its time). One call at a time uses the buffers (``with
    scratch.held() as buffers: buffers.array(k, shape, dtype)``); a call
    that starts while another holds them gets new arrays."""

    def __init__(self):
        self._lock = threading.Lock()
        self._buffers = {}
        self.serial = next(_serials)
        _live[self.serial] = self

    @property
    def nbytes(self):
        return sum(b.nbytes for b in self._buffers.values())

    @contextlib.contextmanager
    def held(self):
        if not self._lock.acquire(blocking=False):
            yield _FRESH
            return
        try:
            yield self
        finally:
            self._lock.release()

    def array(self, k, shape, dtype):
        """An uninitialized C-ordered array over buffer ``k``, grown when
        it is too small."""
        dtype = numpy.dtype(dtype)
        size = int(numpy.prod(shape)) * dtype.itemsize
        buffer = self._buffers.get(k)
        if buffer is None or buffer.size < size:
            buffer = self._buffers[k] = numpy.empty(size, numpy.uint8)
        return view(buffer, shape, dtype)


#: Serial numbers, increasing, and the live Scratch objects by theirs
#: (``benchmarks/bench_memory.py`` counts what the kernels compiled since
#: a point hold).
_serials = itertools.count()
_live = weakref.WeakValueDictionary()


def scratch_mark():
    """A number below the serial of every :class:`Scratch` made after
    this call, and above those made before."""
    return next(_serials)


def scratch_bytes(since=0):
    """Bytes held by the live :class:`Scratch` buffers made since the mark
    ``since``."""
    return sum(scratch.nbytes for serial, scratch in list(_live.items())
               if serial >= since)


class _Fresh(object):
    """A held :class:`Scratch`'s stand-in: new arrays."""

    def array(self, k, shape, dtype):
        return numpy.empty(shape, dtype)


_FRESH = _Fresh()
