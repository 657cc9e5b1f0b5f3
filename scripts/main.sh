#!/usr/bin/env bash
# Sets up .venv (scripts/install.sh) and runs the main example, which
# trains LeNet on scikit-learn's digits eagerly and with chainerjit.
# Extra arguments go to the example, e.g. `bash scripts/main.sh --epochs 2`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/python examples/train_digits.py "$@"
