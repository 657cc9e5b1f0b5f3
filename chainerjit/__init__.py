"""chainerjit: a just-in-time compiler for Chainer models.

Add ``@chainerjit.jit`` to a Chain's ``forward`` (or wrap a bound method
or a function) and calls with a new input signature are recorded, compiled
to bytecode and run on a Cython VM from then on. The first use of
:func:`jit` installs chainerjit's fast paths into Chainer
(:mod:`chainerjit.fastpaths`) and moves OpenBLAS off kernels it fell back
to on a CPU it did not recognise (:mod:`chainerjit.runtime.blas`);
importing chainerjit changes nothing.
"""

from chainerjit.api import JitFunction  # NOQA
from chainerjit.api import jit  # NOQA
from chainerjit.errors import CompiledMismatch  # NOQA
from chainerjit.errors import DataDependentValue  # NOQA
from chainerjit.errors import FallbackWarning  # NOQA
from chainerjit.errors import GraphBreakWarning  # NOQA
from chainerjit.errors import RecompileWarning  # NOQA
from chainerjit.errors import UnguardedWarning  # NOQA
from chainerjit.errors import UnsupportedArgument  # NOQA
from chainerjit.errors import VMError  # NOQA
from chainerjit.profiler import profile  # NOQA

__version__ = '0.1.0'


def export_onnx(f, args, path=None, **options):
    """Writes the program ``f`` runs for ``args`` as an ONNX model; see
    :func:`chainerjit.onnx_export.export_onnx`."""
    from chainerjit import onnx_export  # onnx is needed only here
    return onnx_export.export_onnx(f, args, path, **options)
