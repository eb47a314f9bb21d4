#!/usr/bin/env bash
# Install, then lint, type-check and run the whole test suite with coverage: what CI runs.
#
#   bash scripts/test.sh [pytest arguments]
#   bash scripts/test.sh --unit [pytest arguments]   # the unit layer alone (tests/unit), no coverage
#
# Coverage of corral/ and sandbox/corral_sandbox/ (lines and branches, in the test processes; config in
# pyproject.toml) must stay at or above COVERAGE_FLOOR: raise the floor when coverage rises, never lower it to
# let a change in.
# For part of the suite add `--no-cov` (or `--cov-fail-under=0`): `bash scripts/test.sh -m "not e2e" --no-cov`.
# The report is printed and written to htmlcov/index.html.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
COVERAGE_FLOOR=90  # the whole suite measured 90.74% on 2026-12-01, rounded down
bash scripts/install.sh
.venv/bin/ruff check corral sandbox tests bench
.venv/bin/ruff format --check corral sandbox tests bench
.venv/bin/mypy
if [ "${1:-}" = "--unit" ]; then
  # tests/unit: one process per worker, virtual time, no socket, child process or real wait (tests/unit/conftest.py
  # refuses them), so no coverage floor to meet and nothing to wait for: the count and the time are the report.
  shift
  start=$EPOCHREALTIME
  log="$(mktemp)"
  trap 'rm -f "$log"' EXIT
  status=0
  .venv/bin/python -m pytest tests/unit -n 2 --no-cov -q "$@" | tee "$log" || status=$?
  passed=$(grep -Eo '[0-9]+ passed' "$log" | tail -1 || true)
  echo "unit layer: ${passed:-0 passed} in $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $start }") s (pytest start-up and collection included)"
  exit "$status"
fi
# Six workers on two cores: most tests wait on the sandbox's timers, not the CPU. tests/conftest.py's scheduler
# runs the long tests in three lanes (the chaos runs two at a time on two workers, the other long tests on a
# third) while the rest share the others: xdist's own `load` scheduling sent every long test to one worker
# (634 s), and one chaos lane (294 s, the four runs one after another) was the run's whole length. The two
# cores are the limit (/proc/stat: 94 to 98% busy through the run), so what shortens the run is CPU saved:
# tests/waiting.py's polling and LocalCorral's migrated template database (2026-12-06). Measured on
# 2026-12-06, this script with a warm venv and mypy cache: 328 s (1,499 tests in 321 s).
# --durations: the slowest tests, so a run creeping towards CI's time limit says where the time went.
.venv/bin/python -m pytest -n 6 --durations=15 --cov --cov-report=term:skip-covered --cov-report=html \
  --cov-fail-under="$COVERAGE_FLOOR" "$@"
