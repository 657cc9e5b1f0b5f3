"""OpenBLAS kernels for the CPU the process runs on.

OpenBLAS picks its kernels when it loads, from the CPU's family and model
number. A release older than the CPU does not know the model and falls
back to its Prescott (SSE3) kernels: NumPy 1.26's OpenBLAS 0.3.23 does so
on Intel's Xeons of 2023 and later (Sapphire and Emerald Rapids), and its
matrix products then run 4 to 8 times slower than its own AVX-512 kernels
on the same CPU. Eager Chainer and chainerjit's VM both pay for it.

:func:`use_cpu_kernels`, called the first time :func:`chainerjit.jit` is
used, asks each OpenBLAS loaded in the process for the kernels that the
CPU's features (as NumPy detected them) allow, where it fell back to
kernels without AVX2: ``SkylakeX`` with AVX-512, ``Haswell`` with AVX2
and FMA. That is what setting ``OPENBLAS_CORETYPE`` before starting Python
does; OpenBLAS's own ``gotoblas_dynamic_init`` reads it again. A product
computed without BLAS checks the new kernels; if they disagree, the old
ones are put back. Nothing changes where ``OPENBLAS_CORETYPE`` is set (the
user chose), where ``CHAINERJIT_BLAS_KERNELS=keep``, or where OpenBLAS
already runs kernels with AVX2.
"""

import collections
import ctypes
import os

import numpy

#: Names (lower case) of OpenBLAS's kernel sets without AVX2: on a CPU
#: with AVX2 one of these is a fallback, not a choice.
PRE_AVX2_CORES = frozenset((
    'katmai', 'coppermine', 'northwood', 'prescott', 'banias', 'atom',
    'core2', 'penryn', 'dunnington', 'nehalem', 'sandybridge', 'athlon',
    'opteron', 'opteron_sse3', 'barcelona', 'bobcat', 'bulldozer',
    'piledriver'))

#: The kernels to ask for, by the CPU features NumPy reports (best first).
KERNELS_FOR = (
    (('AVX512_SKX',), 'SkylakeX'),
    (('AVX2', 'FMA3'), 'Haswell'),
)

SWITCH = 'CHAINERJIT_BLAS_KERNELS'

#: What :func:`use_cpu_kernels` found for one library: its path, the
#: kernels OpenBLAS picked when it loaded and those it runs now.
Kernels = collections.namedtuple('Kernels', 'library picked running')

_found = None  # [Kernels], once use_cpu_kernels ran


def use_cpu_kernels():
    """Moves each OpenBLAS loaded that fell back to kernels without AVX2
    onto the kernels the CPU allows (see the module's docstring). Runs
    once a process; returns a :class:`Kernels` per OpenBLAS library."""
    global _found
    if _found is None:
        wanted = _kernels_allowed(_cpu_features())
        _found = [_use(library, wanted) for library in _openblas_libraries()]
    return list(_found)


def report():
    """One line on the kernels each OpenBLAS runs, and those it picked
    where :func:`use_cpu_kernels` changed them, for benchmark headers and
    bug reports. Changes nothing."""
    found = _found if _found is not None else [
        Kernels(library._name, *[_running(library)] * 2)
        for library in _openblas_libraries()]
    return '; '.join(
        '%s: %s kernels%s' % (
            os.path.basename(k.library), k.running,
            '' if k.running == k.picked else
            ' (OpenBLAS picked %s; set by chainerjit)' % k.picked)
        for k in found) or 'no OpenBLAS loaded'


def _kernels_allowed(features):
    for needs, kernels in KERNELS_FOR:
        if all(features.get(name) for name in needs):
            return kernels
    return None


def _cpu_features():
    try:  # NumPy 2 (its numpy.core warns that it moved)
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:
        from numpy.core._multiarray_umath import __cpu_features__
    return __cpu_features__


def _openblas_libraries():
    """``ctypes`` handles of the OpenBLAS libraries loaded now that choose
    their kernels at run time (built with ``DYNAMIC_ARCH``)."""
    try:
        import threadpoolctl
    except ImportError:
        return []
    handles = []
    for pool in threadpoolctl.threadpool_info():
        if pool.get('internal_api') != 'openblas':
            continue
        # PyDLL: the calls keep the GIL, so no other thread of this
        # process starts a product while the kernels change.
        handle = ctypes.PyDLL(pool['filepath'])
        if all(hasattr(handle, name) for name in (
                'gotoblas_corename', 'gotoblas_dynamic_init',
                'gotoblas_dynamic_quit')):
            handle.gotoblas_corename.restype = ctypes.c_char_p
            handles.append(handle)
    return handles


def _running(library):
    return library.gotoblas_corename().decode()


def _use(library, wanted):
    picked = _running(library)
    if (wanted is None or picked.lower() not in PRE_AVX2_CORES
            or os.environ.get('OPENBLAS_CORETYPE')
            or os.environ.get(SWITCH, '') == 'keep'):
        return Kernels(library._name, picked, picked)
    _load_kernels(library, wanted)
    if _running(library).lower() != wanted.lower() or not _products_agree():
        _load_kernels(library, picked)
    return Kernels(library._name, picked, _running(library))


def _load_kernels(library, name):
    """Has OpenBLAS choose its kernels again, as it does when it loads,
    with ``OPENBLAS_CORETYPE=name``; the environment is left as it was."""
    before = os.environ.get('OPENBLAS_CORETYPE')
    os.environ['OPENBLAS_CORETYPE'] = name
    try:
        library.gotoblas_dynamic_quit()
        library.gotoblas_dynamic_init()
    finally:
        if before is None:
            del os.environ['OPENBLAS_CORETYPE']
        else:
            os.environ['OPENBLAS_CORETYPE'] = before


def _products_agree():
    """Whether NumPy's matrix products (through BLAS) match ``einsum``'s
    own loops, in float32 and float64, at sizes that reach the blocked
    kernels."""
    rng = numpy.random.RandomState(0)
    for dtype, tolerance in ((numpy.float32, 1e-4), (numpy.float64, 1e-10)):
        a = rng.standard_normal((67, 130)).astype(dtype)
        b = rng.standard_normal((130, 45)).astype(dtype)
        for x, y in ((a, b), (b.T, a.T)):
            expected = numpy.einsum('ij,jk->ik', x, y, optimize=False)
            scale = numpy.einsum('ij,jk->ik', abs(x), abs(y),
                                 optimize=False).max()
            if not numpy.abs(x.dot(y) - expected).max() <= tolerance * scale:
                return False
        if not numpy.allclose(a.dot(a[0]), numpy.einsum(
                'ij,j->i', a, a[0], optimize=False), rtol=tolerance,
                atol=tolerance * 130):
            return False
    return True
