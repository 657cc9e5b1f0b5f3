#!/usr/bin/env bash
# Sets up .venv (scripts/install.sh), checks style (flake8), builds the
# documentation (scripts/docs.sh; warnings are errors) and runs the test
# suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k relu -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/python -m flake8 chainerjit tests examples benchmarks
bash scripts/docs.sh --no-install
exec .venv/bin/python -m pytest -q tests "$@"
