"""The differential fuzzer: random programs run eagerly and jitted.

Hypothesis draws programs (``programs.py``) for the forwards of
``models.py``: Chainer functions, Variable operators, NumPy on arrays
outside Chainer functions, loops over a time axis or a list, branches on
array tests, attributes assigned on the model. ``runner.check`` runs each
eagerly and through ``chainerjit.jit`` for several calls with new values
(and a second batch size where the program allows) and compares results,
the model's attribute and state, gradients, and the cache: a call runs
compiled or the program warns with a FallbackWarning, never a silent
difference.

The profile (``profiles.py``) decides how many programs: 80 per test by
default, thousands with ``--hypothesis-profile=long`` or
``CHAINERJIT_FUZZ=long``. What it found is in ``test_found.py``. The
suite runs programs on chainerjit's VM; the ``onnxruntime`` tests run the
same kinds of programs with ``jit(backend='onnxruntime')``.
"""

import contextlib
import os

from hypothesis import given
import pytest

from tests.fuzz_tests import programs
from tests.fuzz_tests import runner


@given(programs.programs(['Straight', 'ListStraight']))
def test_straight_line_programs(program):
    runner.check(program)


@given(programs.programs(['LoopShape', 'LoopLen', 'LoopIter', 'LoopExit']))
def test_loops_over_time(program):
    runner.check(program)


@given(programs.programs(['Branch', 'BranchAny']))
def test_branches_on_array_tests(program):
    runner.check(program)


@contextlib.contextmanager
def _backend(name):
    before = os.environ.get('CHAINERJIT_BACKEND')
    os.environ['CHAINERJIT_BACKEND'] = name
    try:
        yield
    finally:
        if before is None:
            del os.environ['CHAINERJIT_BACKEND']
        else:
            os.environ['CHAINERJIT_BACKEND'] = before


@given(programs.programs(['Straight', 'ListStraight', 'LoopShape',
                          'LoopLen', 'LoopExit', 'Branch']))
def test_programs_in_onnxruntime(program):
    pytest.importorskip('onnxruntime')
    with _backend('onnxruntime'):
        runner.check(program)
