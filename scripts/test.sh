#!/usr/bin/env bash
# Install, then lint, type-check and run the whole test suite: what CI runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install.sh
.venv/bin/ruff check corral tests bench
.venv/bin/ruff format --check corral tests bench
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
