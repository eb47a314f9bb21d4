#!/usr/bin/env bash
# Regenerate the hashed locks in requirements/ from pyproject.toml with uv (a pinned version, in a throwaway venv):
#   runtime.txt  [project].dependencies: what `corral serve` needs, all the wheel and the container install
#   build.txt    requirements/build.in ([build-system] requires): setuptools and wheel, for building corral
#   dev.txt      runtime + build + the `dev` dependency group (tests, lint, types), constrained to the two
#                above so that every shared package has the same version: what scripts/install.sh installs
# Versions already in a lock are kept (uv prefers the pins of the output file): only a package whose pin changed
# in pyproject.toml, or a new one, moves. `bash scripts/lock.sh --upgrade` takes the newest that fit instead.
# The resolution is for CPython 3.11 on Linux, whatever machine runs this; the hashes cover every file PyPI has
# for each pinned version (all platforms), so the locks install on x86_64 and aarch64 alike.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
UV_VERSION=0.13.8
tool="$(mktemp -d)"
trap 'rm -rf "$tool"' EXIT
python3 -m venv "$tool/venv"
"$tool/venv/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION"
compile() {
  UV_CUSTOM_COMPILE_COMMAND="bash scripts/lock.sh" "$tool/venv/bin/uv" pip compile -q \
    --python-version 3.11 --python-platform linux --generate-hashes --no-strip-extras "$@"
}
compile "${@}" -o requirements/runtime.txt pyproject.toml
compile "${@}" -o requirements/build.txt requirements/build.in
compile "${@}" -c requirements/runtime.txt -c requirements/build.txt -o requirements/dev.txt \
  pyproject.toml requirements/build.in --group pyproject.toml:dev
echo "requirements/: $(grep -c '^[A-Za-z0-9]' requirements/runtime.txt) runtime, $(grep -c '^[A-Za-z0-9]' \
  requirements/build.txt) build, $(grep -c '^[A-Za-z0-9]' requirements/dev.txt) dev packages locked with hashes"
