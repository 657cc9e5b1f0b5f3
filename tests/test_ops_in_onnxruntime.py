"""The op suite (``tests/ops_tests``) a second time, with programs run by
onnxruntime wherever they can be (``CHAINERJIT_BACKEND=onnxruntime``):
every op with a converter, forward and gradient, against eager Chainer
within the suite's tolerances. Tests marked ``bit_exact`` are skipped
there: only the VM's kernels promise eager's bits. It runs in a process
of its own, since the backend is read when ``jit`` is called and the
suite's processes pin the VM (``conftest.py``)."""

import os
import subprocess
import sys

import pytest

pytest.importorskip('onnxruntime')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_op_suite_passes_in_onnxruntime():
    env = dict(os.environ, CHAINERJIT_BACKEND='onnxruntime')
    done = subprocess.run(
        [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
         '-x', 'tests/ops_tests'], cwd=ROOT, env=env, timeout=1200,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert done.returncode == 0, done.stdout[-5000:]
    assert ' passed' in done.stdout.splitlines()[-1]
