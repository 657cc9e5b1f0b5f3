"""Errors and warnings raised by chainerjit.

Each unsupported construct has its own class. When chainerjit cannot
compile a call it runs the function eagerly instead and says so once, with
a :class:`FallbackWarning` that names the construct and the user's source
line; see ``docs/errors.md``.
"""

import linecache
import os
import warnings


class ChainerJitError(Exception):
    """Base class of chainerjit's errors."""


class UnsupportedArgument(ChainerJitError):
    """An argument chainerjit cannot put in a cache key.

    chainerjit takes Variables, NumPy/CuPy arrays, Python scalars, strings,
    None, and lists, tuples and dicts of those. Anything else (an object
    of your own class, a generator) makes the call run eagerly. Fix: pass
    the arrays it holds instead.
    """


class DataDependentValue(ChainerJitError):
    """The forward read an array's values back into Python.

    ``float(v.array)``, ``v.item()``, ``bool(...)``, ``if (x.array > 0)
    .any():``, or NumPy run on ``v.array`` whose result feeds Chainer
    functions: the recording cannot know these for the next call. The call
    runs eagerly. Fix: keep the computation in Chainer functions (for
    example ``F.where(cond, a, b)`` instead of an ``if``).
    """


class CompiledMismatch(ChainerJitError):
    """The compiled program did not reproduce the eager result.

    chainerjit runs every new program once on the inputs it was recorded
    with and compares. A difference means a bug in chainerjit (please
    report it with the printed IR); the function runs eagerly instead.
    """


class NotDifferentiable(ChainerJitError):
    """A gradient reaches an op chainerjit has no gradient rule for.

    Calls that need gradients then run eagerly (correct, not faster);
    inference calls stay compiled. See ``docs/ops_coverage.md``.
    """


class GuardFailed(ChainerJitError):
    """A branch on an array value (``if (y.array == EOS).all():``) went
    the other way than while recording: that call runs eagerly."""


class VMError(ChainerJitError):
    """A kernel raised inside the VM; the message shows the instruction."""


class UnrolledLoop(ChainerJitError):
    """A loop was compiled unrolled, one cache entry per trip count.

    chainerjit rolls a loop into one region when its iterations record the
    same operations; it unrolls it when they differ (``if t == 0:`` in the
    body, shapes that change from one iteration to the next) or when the
    forward's source cannot be read (a lambda, ``exec``, a plain REPL).
    The results are right; a new trip count is a new compile. Fix: move
    what differs out of the loop (handle step 0 before it), and define the
    forward in a file or a notebook cell.
    """


class ExportError(ChainerJitError):
    """A program cannot be exported to ONNX (an op without a converter,
    a value read into Python); the message names the op and the line."""


class FrozenParameters(ChainerJitError, ValueError):
    """A call of a function jitted with ``freeze=True`` wrote into a
    parameter its serving sessions own, which is read-only (batch
    normalization's running averages in training mode, an optimizer's
    update). Fix: call ``f.unfreeze()`` before training, or train with a
    function jitted without ``freeze``."""


class LoopWarning(UserWarning):
    """A loop was unrolled (shown once per loop)."""


class FallbackWarning(UserWarning):
    """A call ran eagerly instead of compiled (shown once per site)."""


class GraphBreakWarning(FallbackWarning):
    """A value read into Python cuts a forward: the statement that reads it
    runs in Python, the statements before and after it compiled."""


class RecompileWarning(UserWarning):
    """A function keeps recompiling; the message says what changes."""


class UnguardedWarning(UserWarning):
    """A compiled program reads a parameter it reached by a way no guard
    follows: replacing the parameter or its link would not be noticed
    (shown once per function)."""


def source_excerpt(loc):
    """Formats ``(filename, lineno)`` as a traceback-style excerpt."""
    if loc is None:
        return '  (source line unknown)'
    filename, lineno = loc
    line = linecache.getline(filename, lineno).strip()
    text = '  File "%s", line %d' % (filename, lineno)
    if line:
        text += '\n      %s' % line
    return text


_warned = set()


def warn_once(site, category, message):
    """Warns once per ``site`` (a hashable naming function and line)."""
    if site in _warned:
        return
    _warned.add(site)
    warnings.warn(message, category, stacklevel=4)


def short_location(loc):
    """``'model.py:31'`` for ``(filename, lineno)``."""
    return '%s:%d' % (os.path.basename(loc[0]), loc[1])


def unrolled_message(func_name, error, loc):
    """The text of a one-time warning for a loop compiled unrolled."""
    return ('chainerjit: %s: %s\n%s\n  (this warning is shown once.) See '
            'docs/errors.md#UnrolledLoop'
            % (func_name, error, source_excerpt(loc)))


def fallback_message(func_name, error, loc):
    """The text of a one-time warning for a call that ran eagerly."""
    kind = type(error).__name__
    return ('chainerjit: %s: %s\n%s\n  %s runs eagerly for this input '
            'signature (this warning is shown once).\n  See '
            'docs/errors.md#%s' % (
                kind, error, source_excerpt(loc), func_name, kind))


def break_message(func_name, error, loc, lines):
    """The text of a one-time warning for a graph break."""
    kind = type(error).__name__
    return ('chainerjit: %s: %s\n%s\n  %s breaks its graph there: %s (this '
            'warning is shown once).\n  See docs/errors.md#GraphBreak' % (
                kind, error, source_excerpt(loc), func_name, lines))
