#!/usr/bin/env bash
# Install headless Chromium from Debian's `chromium` package (it brings its fonts) for the dashboard's browser
# tests (tests/test_dashboard.py), unless a Chromium is already on PATH. Without it those tests skip.
set -euo pipefail
for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null 2>&1; then
    exit 0
  fi
done
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium
