#!/usr/bin/env bash
# Creates .venv and installs chainerjit with everything it needs.
# Idempotent: a second run only rebuilds the Cython extension.
# It installs MPICH and mpi4py (requirements/mn.txt, small wheels) for
# ChainerMN: `.venv/bin/mpiexec -n 2 .venv/bin/python ...` runs a script
# over two processes.
# With --bench, also the optional competitors of benchmarks/run.py
# (PyTorch, matplotlib); with --gpu, CuPy (requirements/gpu.txt) for a
# machine with an NVIDIA GPU and CUDA 12.
#
# Chainer 7.8.1 on Python 3.11 needs care:
#   * it requires numpy<2, and onnx pulls ml_dtypes, which pulls numpy 2
#     unless numpy<2 is pinned in the same pip command;
#   * its sdist's setup.py imports pkg_resources, so it is built with
#     setuptools<70 and --no-build-isolation.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
if ! "$VENV/bin/python" -c 'import chainer, onnxruntime, xxhash, sklearn, pytest, flake8, hypothesis, nbclient, nbformat, ipykernel, sphinx, myst_parser, mpi4py' \
        2>/dev/null; then
    $PIP install --upgrade 'pip<25' 'setuptools<70' wheel
    $PIP install -r requirements/build.txt
    $PIP install --no-build-isolation -r requirements/chainer.txt
    $PIP install -r requirements/dev.txt
    # Sphinx and MyST for the documentation (scripts/docs.sh).
    $PIP install -r requirements/docs.txt
    # MPI for ChainerMN (examples/train_digits_mn.py, tests/chainermn_tests).
    $PIP install -r requirements/mn.txt
fi
# Build the Cython modules in place (editable install, no isolation so the
# pinned numpy and Cython above are the ones it builds against).
$PIP install --no-build-isolation --no-deps -e .
if [ "${1:-}" = "--gpu" ]; then
    $PIP install -r requirements/gpu.txt
fi
if [ "${1:-}" = "--bench" ]; then
    $PIP install -r requirements/bench.txt
    # torch pulls setuptools>=77, whose distutils lacks what Chainer's
    # environment check imports (numpy.distutils): pin it back. torch only
    # needs the newer one to build C++ extensions, which we never do.
    $PIP install 'setuptools<70'
fi
