#!/usr/bin/env bash
# Sets up .venv (scripts/install.sh, which installs requirements/docs.txt)
# and builds the documentation site from docs/ into docs/_build/html
# (Sphinx with MyST; warnings are errors). -E reads every page again, so
# that a warning is never hidden by an earlier build.
# With --no-install, only builds: scripts/test.sh calls it so after its
# own set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != "--no-install" ]; then
    bash scripts/install.sh
fi
.venv/bin/python -m sphinx -W --keep-going -E -b html docs docs/_build/html
echo "docs: open docs/_build/html/index.html"
