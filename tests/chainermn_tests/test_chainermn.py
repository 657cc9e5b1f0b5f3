"""Data-parallel training with ChainerMN over two MPI processes: each test
starts ``mpiexec -n 2`` on a check of ``processes.py`` and passes when
every process passed it. Skipped where mpi4py or mpiexec is missing
(``scripts/install.sh`` installs both)."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.chainermn_tests import processes

pytest.importorskip('mpi4py')

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MPIEXEC = shutil.which('mpiexec', path=os.path.dirname(sys.executable)) or \
    shutil.which('mpiexec')
PROCESSES = 2
TIMEOUT = 240  # seconds; a collective one process misses hangs the rest

pytestmark = pytest.mark.skipif(MPIEXEC is None, reason='needs mpiexec')


def run_processes(*argv):
    """Runs ``argv`` (a Python command line) in ``PROCESSES`` MPI
    processes from the repository root; returns their output."""
    command = [MPIEXEC, '-n', str(PROCESSES), sys.executable] + list(argv)
    env = dict(os.environ, OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1',
               MKL_NUM_THREADS='1')
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, timeout=TIMEOUT,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    except subprocess.TimeoutExpired as error:
        raise AssertionError('%s hung (a collective not run by every '
                             'process?):\n%s' % (' '.join(argv),
                                                 error.output or ''))
    assert done.returncode == 0, done.stdout
    return done.stdout


@pytest.mark.parametrize('check', sorted(processes.CHECKS))
def test_two_processes(check):
    output = run_processes('-m', 'tests.chainermn_tests.processes', check)
    assert 'ok %s on %d processes' % (check, PROCESSES) in output


def test_example_trains_alike_on_every_process():
    output = run_processes('examples/train_digits_mn.py', '--epochs', '1',
                           '--batchsize', '64')
    assert 'parameters equal on every process in each run' in output
    assert 'process 1: eager' in output
