#!/usr/bin/env bash
# Create .venv and install corral with exactly the versions CI uses (requirements.lock), from nothing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.lock
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
