"""Where the time of compiled calls goes, kernel by kernel.

::

    with chainerjit.profile() as prof:
        for _ in range(100):
            train_step()
    print(prof)

While a profile is active, every compiled program (those compiled before
it and during it) runs with each kernel timed, and each run of a program
timed as a whole. The report lists the programs (runs, their time, the
share of it in kernels; the rest is the VM's dispatch and the kernels'
Python calls) and the instructions by total time: calls, total and mean
time, share of the block's wall time, the program, the kernel and the
user's source line. Timing adds about half a microsecond an instruction;
the programs run their own kernels again when the block ends.
"""

import collections
import os
import threading
import time

from chainerjit.backend import program as program_module


_active = threading.Lock()  # one profile at a time

_Row = collections.namedtuple('_Row', 'seconds calls program kernel')


class Profile(object):
    """A ``with`` block timing the compiled programs' kernels (see the
    module's docstring). ``str(profile)`` is its report; :meth:`rows`
    its instructions' times."""

    def __init__(self):
        self.wall = None  # seconds in the block, once it ended
        self._programs = {}  # program -> [run seconds, runs, kernel stats]
        self._own_runs = {}  # program -> its own run, put back after
        self._start = None

    def __enter__(self):
        if not _active.acquire(blocking=False):
            raise RuntimeError('chainerjit.profile: a profile is already '
                               'running; they do not nest')
        for program in list(program_module.LIVE):
            self._instrument(program)
        program_module.NEW_PROGRAM_HOOKS.append(self._instrument)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc_info):
        self.wall = time.perf_counter() - self._start
        program_module.NEW_PROGRAM_HOOKS.remove(self._instrument)
        for program, run in self._own_runs.items():
            program.run = run
        _active.release()

    def _instrument(self, program):
        stats = [[0.0, 0] for _ in program.kernels]
        totals = self._programs[program] = [0.0, 0, stats]
        kernels = [_timed(fn, stats[k]) for k, fn in
                   enumerate(program.kernels)]
        plain = None if program.plain_kernels is None else [
            _timed(fn, stats[k]) for k, fn in
            enumerate(program.plain_kernels)]
        run = program.machine_run(kernels, plain)
        clock = time.perf_counter
        self._own_runs[program] = program.run

        def timed_run(inputs):
            start = clock()
            try:
                return run(inputs)
            finally:
                totals[0] += clock() - start
                totals[1] += 1
        program.run = timed_run

    def rows(self):
        """``(seconds, calls, program, kernel index)`` for every kernel
        that ran, slowest first."""
        found = [_Row(seconds, calls, program, k)
                 for program, (_, _, stats) in self._programs.items()
                 for k, (seconds, calls) in enumerate(stats) if calls]
        return sorted(found, key=lambda row: -row.seconds)

    def report(self, limit=25):
        """The report ``str`` gives, with the ``limit`` slowest
        instructions."""
        ran = [(p, t) for p, t in self._programs.items() if t[1]]
        wall = self.wall if self.wall is not None else \
            time.perf_counter() - self._start
        in_programs = sum(t[0] for _, t in ran)
        in_kernels = sum(row.seconds for row in self.rows())
        lines = ['chainerjit profile: %s in the block, %s (%s) in %d '
                 'compiled program%s, %s in their kernels' % (
                     _ms(wall), _ms(in_programs), _share(in_programs, wall),
                     len(ran), '' if len(ran) == 1 else 's',
                     _ms(in_kernels)),
                 '',
                 '  %6s %10s %10s %8s  program' % (
                     'runs', 'time', 'mean', 'kernels')]
        for program, (seconds, runs, stats) in sorted(
                ran, key=lambda item: -item[1][0]):
            lines.append('  %6d %10s %10s %8s  %s' % (
                runs, _ms(seconds), _us(seconds / runs),
                _share(sum(s for s, _ in stats), seconds), program.name))
        lines += ['', '  %10s %7s %10s %6s  %-24s %-34s %s' % (
            'total', 'calls', 'mean', 'share', 'program', 'kernel',
            'line')]
        for row in self.rows()[:limit]:
            lines.append('  %10s %7d %10s %6s  %-24s %-34s %s' % (
                _ms(row.seconds), row.calls, _us(row.seconds / row.calls),
                _share(row.seconds, wall), _short(row.program.name, 24),
                _short('k%d:%s' % (row.kernel,
                                   row.program.kernel_names[row.kernel]),
                       34),
                _line_of(row.program, row.kernel)))
        return '\n'.join(lines)

    def __str__(self):
        return self.report()


def profile():
    """A :class:`Profile`: ``with chainerjit.profile() as prof: ...``,
    then ``print(prof)``."""
    return Profile()


def _timed(fn, stats):
    clock = time.perf_counter

    def timed(*arrays):
        start = clock()
        try:
            return fn(*arrays)
        finally:
            stats[0] += clock() - start
            stats[1] += 1
    return timed


def _line_of(program, kernel):
    """``file:line`` of the first instruction calling ``kernel``."""
    for inst in program.instructions():
        if inst.kernel == kernel and inst.loc:
            return '%s:%d' % (os.path.basename(inst.loc[0]), inst.loc[1])
    return ''


def _ms(seconds):
    return '%.3f ms' % (seconds * 1e3)


def _us(seconds):
    return '%.1f us' % (seconds * 1e6)


def _share(part, whole):
    return '%.0f%%' % (100. * part / whole) if whole else '-'


def _short(text, width):
    return text if len(text) <= width else text[:width - 3] + '...'
