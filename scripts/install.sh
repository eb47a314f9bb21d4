#!/usr/bin/env bash
# Create .venv and install corral for development with exactly the versions CI uses, from nothing:
# requirements/dev.txt (runtime + build + the dev group, every file checked against its hash), then corral
# and the sandbox's distribution (sandbox/: corral_sandbox, which `corral demo`, the tests and the benchmarks
# use), both editable, with nothing more (--no-deps: the lock already brought everything either needs).
# A runtime-only install (no test or lint tools) is the wheel's: see README, "Installing".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes -r requirements/dev.txt
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . -e ./sandbox
# Compile corral's and the sandbox's source once: the editable install leaves it uncompiled, and where
# PYTHONDONTWRITEBYTECODE is set (CI's machine) every process the tests start would compile it again
# (about 0.2 s of CPU per `corral serve` start, measured 2026-12-06). Python still reads what is here, and
# ignores a compiled file that no longer matches its source.
.venv/bin/python -m compileall -q -j 0 corral sandbox/corral_sandbox >/dev/null
