"""Timing helpers shared by the benchmarks and the examples.

Nothing here imports numpy at module level, so :func:`limit_threads` can
run before numpy (and its BLAS) is loaded.
"""

import contextlib
import datetime
import os
import platform
import random
import statistics
import time


THREAD_VARIABLES = ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS',
                    'MKL_NUM_THREADS')


def limit_threads(n):
    """Sets the BLAS/OpenMP thread variables to ``n``; call it before
    numpy is imported. ``n`` of ``None`` leaves them as they are."""
    if n is not None:
        for name in THREAD_VARIABLES:
            os.environ[name] = str(n)


def thread_setting():
    """Describes the thread variables, e.g. ``'OMP_NUM_THREADS=1, ...'``."""
    return ', '.join('%s=%s' % (name, os.environ.get(name, 'unset'))
                     for name in THREAD_VARIABLES)


def blas_info():
    """Names the BLAS libraries numpy uses and their thread counts, then
    the kernels each OpenBLAS runs (``Prescott`` where it did not
    recognise the CPU and fell back to SSE3 kernels, unless chainerjit
    moved it: ``chainerjit.runtime.blas``)."""
    try:
        import threadpoolctl
    except ImportError:
        return 'unknown (threadpoolctl is not installed)'
    import numpy  # noqa: F401  (loads the BLAS threadpoolctl reports)
    from chainerjit.runtime import blas
    pools = threadpoolctl.threadpool_info()
    return '%s. Kernels: %s' % ('; '.join('%s %s (%s, %d threads)' % (
        pool.get('internal_api'), pool.get('version'),
        pool.get('threading_layer', pool.get('user_api')),
        pool.get('num_threads', 0)) for pool in pools) or 'none found',
        blas.report())


def cpu_model():
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else what
    ``platform`` knows."""
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info():
    """A dict describing the machine and the library versions."""
    import chainer
    import numpy
    return {
        'date': datetime.datetime.now().strftime('%Y-%m-%d %H:%M'),
        'machine': '%s, %d CPUs' % (cpu_model(), os.cpu_count()),
        'python': platform.python_version(),
        'numpy': numpy.__version__,
        'chainer': chainer.__version__,
        'threads': thread_setting(),
        'blas': blas_info(),
    }


def start(threads):
    """A benchmark's start: ``threads`` BLAS threads (``None`` or 0: as
    they are), the BLAS kernels the first use of ``jit`` would choose
    (:func:`same_kernels`), and the machine described, printed and
    returned."""
    limit_threads(threads or None)
    same_kernels()
    info = machine_info()
    for key in ('date', 'machine', 'numpy', 'chainer', 'threads', 'blas'):
        print('%-8s %s' % (key + ':', info[key]))
    return info


def same_kernels():
    """What the first use of ``jit`` does for the process (OpenBLAS's
    kernels chosen for this CPU, ``chainerjit.runtime.blas``), done before
    any system runs, so that all of them, eager Chainer too, multiply with
    the same kernels."""
    from chainerjit.runtime import blas
    blas.use_cpu_kernels()


def publish(report, path=None):
    """Prints a Markdown report and, if ``path`` is given, writes it
    there."""
    print(report)
    if path:
        with open(path, 'w') as f:
            f.write(report)


def seconds_per_call(fn, repeat=1):
    """Runs ``fn`` ``repeat`` times and returns the mean seconds per
    call."""
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


#: The systems that are Chainer's own code (eager, ``static_graph``).
CHAINER_SYSTEMS = ('eager', 'static_graph')


def system_context(system):
    """What ``system`` runs in: Chainer's own code for eager Chainer and
    ``static_graph`` (``chainerjit.testing.fast_paths_off``: the methods
    chainerjit's fast paths replace restored, so that importing chainerjit
    costs them nothing), else nothing."""
    if system in CHAINER_SYSTEMS:
        from chainerjit import testing
        return testing.fast_paths_off
    return contextlib.nullcontext


def system_contexts(systems):
    """:func:`interleaved`'s ``around`` for ``systems``."""
    return dict((name, system_context(name)) for name in systems)


def interleaved(fns, rounds=15, inner=None, target_seconds=0.02,
                warmup=3, around=None):
    """Times several functions in interleaved rounds.

    Each round runs every function ``inner`` times in turn, so slow
    drifts of the machine (frequency, other load) hit all of them alike;
    each round in its own order (shuffled, the same from run to run), so
    that no function always runs after the same other one (whose data it
    would find in the caches, or whose data would have evicted its own).

    Args:
        fns: a dict, name to zero-argument function.
        rounds: how many samples to take of each.
        inner: calls per sample; by default enough for the slowest
            function to last about ``target_seconds``.
        warmup: calls of each function before timing.
        around: a dict, name to a context manager factory entered around
            each of that function's samples (and its warm-up and
            calibration), outside the timed calls.

    Returns:
        A dict, name to the list of per-call seconds (one per round).
    """
    around = around or {}

    def sample(name, repeat):
        with around.get(name, contextlib.nullcontext)():
            return seconds_per_call(fns[name], repeat)

    for name in fns:
        sample(name, warmup)
    if inner is None:
        inner = min(max(1, int(target_seconds / max(sample(name, 3), 1e-9)))
                    for name in fns)
    names = list(fns)
    samples = {name: [] for name in names}
    order = random.Random(0)
    for _ in range(rounds):
        order.shuffle(names)
        for name in names:
            samples[name].append(sample(name, inner))
    return samples


class Summary(object):
    """The median and interquartile range of timing samples (seconds)."""

    def __init__(self, samples):
        ordered = sorted(samples)
        self.median = statistics.median(ordered)
        if len(ordered) >= 4:
            self.q1, _, self.q3 = statistics.quantiles(ordered, n=4)
        else:
            self.q1, self.q3 = ordered[0], ordered[-1]
        self.n = len(ordered)

    def format(self, scale=1e6, unit='us'):
        """E.g. ``'123.4 us (IQR 120.1-125.0)'``."""
        return '%.1f %s (IQR %.1f-%.1f)' % (
            self.median * scale, unit, self.q1 * scale, self.q3 * scale)


def compare(samples, base='eager', other='jit'):
    """Summaries of ``samples`` (from :func:`interleaved`) and the ratio
    of the ``other`` median to the ``base`` median."""
    summaries = {name: Summary(s) for name, s in samples.items()}
    ratio = summaries[other].median / summaries[base].median
    return summaries, ratio
