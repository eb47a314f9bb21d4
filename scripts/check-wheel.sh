#!/usr/bin/env bash
# The wheel stands alone: build it and the sandbox's wheel (sandbox/: corral-sandbox) from this working tree,
# install corral's with only the runtime lock into a clean venv, and run the installed `corral` against the
# sandbox. Proves that
#   - the runtime wheel carries every file of corral/ (templates, dashboard, migrations) and nothing else (no
#     sandbox, no tests/, no bench/), and its metadata asks for the runtime dependencies only; the sandbox's
#     wheel carries sandbox/corral_sandbox/ and asks for corral and the sandbox's own pins;
#   - requirements/runtime.txt is complete (`pip check`) and brings no development tool;
#   - the installed command works from anywhere: --help, `corral demo` refused (exit 2, saying how to get the
#     sandbox), config check, migrate, doctor, serve (health, readiness, dashboard), none of them with the
#     sandbox importable (`corral sandbox` runs from the sandbox's wheel unpacked aside) and, unless
#     CHECK_WHEEL_DEMO=0, a short `corral demo` with its leak check once the sandbox's wheel is installed too.
# Everything happens in a temporary folder, removed at the end; only loopback addresses are used.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
PYTHON="${PYTHON:-python3}"
started=$(date +%s)
step() { echo "-- $1 ($(($(date +%s) - started))s)"; }
fail() { echo "check-wheel: $1" >&2; exit 1; }

work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
pip_install() { "$1/bin/python" -m pip install -q --disable-pip-version-check "${@:2}"; }

step "build the wheels from a copy of the working tree (tracked and new files, nothing ignored)"
# A copy, so that no build/ or egg-info of an earlier build can slip stale files into this one.
mkdir "$work/src"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -e "$f" ] && printf '%s\0' "$f"
done | tar -c --null -T - | tar -x -C "$work/src"
"$PYTHON" -m venv "$work/build"
pip_install "$work/build" --require-hashes -r requirements/build.txt
(cd "$work/src" && "$work/build/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps \
  --no-build-isolation -w "$work/dist" . ./sandbox)
wheel=("$work"/dist/corral-*.whl)
sandbox_wheel=("$work"/dist/corral_sandbox-*.whl)
[ -f "${wheel[0]}" ] || fail "pip wheel made no corral wheel in $work/dist"
[ -f "${sandbox_wheel[0]}" ] || fail "pip wheel made no corral_sandbox wheel in $work/dist"
for built in "${wheel[0]}" "${sandbox_wheel[0]}"; do
  echo "   $(basename "$built") ($(du -k "$built" | cut -f1) KiB)"
done

step "the runtime wheel holds corral/ (no corral/sandbox/) and its metadata; the sandbox's, corral_sandbox/"
"$PYTHON" - "$work/src" "${wheel[0]}" "${sandbox_wheel[0]}" <<'EOF'
import sys, tomllib, zipfile
from pathlib import Path

src = Path(sys.argv[1])
problems: list[str] = []


def check(wheel: Path, package: Path, project: Path) -> None:
    """`wheel` holds every file of `package` and nothing outside it; its requirements are `project`'s."""
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
    problems.extend(f"{wheel.name}: {n}: outside {package.name}/ (tests/, bench/ and the like stay out)"
                    for n in names if n.split("/")[0] not in (package.name, dist_info))
    expected = {p.relative_to(package.parent).as_posix() for p in package.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    problems.extend(f"{wheel.name}: {n}: in {package.name}/ but not in the wheel (package data not declared, "
                    "or no __init__.py)" for n in sorted(expected - set(names)))
    metadata = zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode()
    lines = metadata.splitlines()
    requires = sorted(line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:"))
    table = tomllib.loads(project.read_text())["project"]
    extras = table.get("optional-dependencies", {})
    declared = sorted([*table["dependencies"], *(f'{pin}; extra == "{name}"' for name, pins in extras.items()
                                                   for pin in pins)])
    if requires != declared:
        problems.append(f"{wheel.name}: Requires-Dist {requires} is not [project]'s dependencies and extras "
                        f"{declared}")
    offered = sorted(line.split(":", 1)[1].strip() for line in lines if line.startswith("Provides-Extra:"))
    if offered != sorted(extras):
        problems.append(f"{wheel.name}: METADATA offers the extras {offered}, not [project]'s {sorted(extras)}")
    print(f"   {wheel.name}: {len(names)} files, {len(requires)} requirements")


runtime, sandbox = Path(sys.argv[2]), Path(sys.argv[3])
check(runtime, src / "corral", src / "pyproject.toml")
check(sandbox, src / "sandbox" / "corral_sandbox", src / "sandbox" / "pyproject.toml")
sandbox_files = ("corral/sandbox/", "corral_sandbox/", "corral/local.py", "corral/demo.py")
problems += [f"{runtime.name}: {n}: the sandbox is not production code"
             for n in zipfile.ZipFile(runtime).namelist() if n.startswith(sandbox_files)]
for problem in problems:
    print(f"check-wheel: {problem}", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF

step "a clean venv: the runtime lock (hashes checked), then the wheel with --no-deps"
venv="$work/venv"
"$PYTHON" -m venv "$venv"
pip_install "$venv" --require-hashes -r requirements/runtime.txt
pip_install "$venv" --no-deps "${wheel[0]}"
"$venv/bin/python" -m pip check --disable-pip-version-check || fail "the runtime lock misses a dependency"
cd "$work"  # from here on nothing may come from the source tree
# psutil is a dev pin but openstacksdk needs it at run time; corral_sandbox comes only with the sandbox's wheel.
for tool in pytest pytest_cov pytest_timeout jsonschema mypy ruff coverage corral_sandbox; do
  if "$venv/bin/python" -c "import $tool" 2>/dev/null; then fail "$tool is installed: it leaked into the runtime"; fi
done
location="$("$venv/bin/python" -c 'import corral; print(corral.__file__)')"
[[ "$location" == "$venv/"* ]] || fail "corral imports from $location, not from the venv"
corral="$venv/bin/corral"

step "corral --help and --version"
"$corral" --help >/dev/null
"$corral" --version

step "corral demo without the sandbox: exit 2, saying how to get it"
status=0
"$corral" demo --duration 3 >"$work/no-sandbox.out" 2>"$work/no-sandbox.err" || status=$?
[ "$status" = 2 ] || fail "corral demo without corral-sandbox exited $status, not 2: $(cat "$work/no-sandbox.err")"
grep -q "needs the corral-sandbox distribution" "$work/no-sandbox.err" || fail "corral demo did not say what it needs"
[ ! -s "$work/no-sandbox.out" ] || fail "corral demo without the sandbox wrote on stdout: $(cat "$work/no-sandbox.out")"
echo "   $(cat "$work/no-sandbox.err")"

step "corral sandbox from its wheel unpacked aside (the venv stays production-only), and a config for it"
# Only the sandbox's process sees the unpacked wheel. The config: a GitHub App, its key and webhook secret in files.
pip_install "$venv" --no-deps --target "$work/sandbox-lib" "${sandbox_wheel[0]}"
PYTHONPATH="$work/sandbox-lib" "$corral" sandbox --workdir "$work/sandbox" --boot-delay 0.2 \
  >"$work/sandbox.json" 2>"$work/sandbox.log" &
sandbox_pid=$!
pids+=("$sandbox_pid")
for _ in $(seq 150); do [ -s "$work/sandbox.json" ] && break; sleep 0.2; done
[ -s "$work/sandbox.json" ] || { cat "$work/sandbox.log" >&2; fail "the sandbox printed no JSON line in 30 s"; }
port="$("$venv/bin/python" - "$work" <<'EOF'
import json, socket, sys
from pathlib import Path

import httpx

work = Path(sys.argv[1])
info = json.loads((work / "sandbox.json").read_text().splitlines()[0])
secrets = work / "secrets"
secrets.mkdir(mode=0o700)
(secrets / "webhook-secret").write_text(info["webhook_secret"])
config = {
    "github": {"url": info["github_url"], "app_id": info["app_id"], "private_key_file": info["private_key_path"],
               "webhook_secret_file": str(secrets / "webhook-secret")},
    "cloud": {"name": info["cloud_name"]},
    "database_url": f"sqlite:///{work / 'corral.db'}",
    "reconcile_interval": "1s",
    "pools": {"small": {"scope": {"org": "octo-org"}, "labels": ["small"], "image": "ubuntu-24.04-runner",
                        "flavor": "m1.small", "networks": ["private"], "min_idle": 1, "max_runners": 2}},
}
(work / "corral.yaml").write_text(json.dumps(config, indent=2))  # JSON is YAML
with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
# As an operator does before starting corral: the App's webhook points at where corral will listen.
hook = {"url": f"http://127.0.0.1:{port}/webhook"}
httpx.put(f"{info['control_url']}/webhook", json=hook, timeout=10).raise_for_status()
print(port)
EOF
)"
clouds=(env OS_CLIENT_CONFIG_FILE="$work/sandbox/clouds.yaml")  # for corral's commands (the demo ignores it)

step "corral config check and corral migrate (the migrations ship in the wheel)"
"${clouds[@]}" "$corral" config check "$work/corral.yaml"
"${clouds[@]}" "$corral" migrate --config "$work/corral.yaml"

step "corral doctor: every check of the setup passes against the sandbox, from the installed wheel"
"${clouds[@]}" "$corral" doctor --config "$work/corral.yaml"

step "corral serve: ready, a job served through its webhook, /healthz, the dashboard"
"${clouds[@]}" "$corral" serve --config "$work/corral.yaml" --listen "127.0.0.1:$port" --log-level WARNING 2>"$work/serve.log" &
serve_pid=$!
pids+=("$serve_pid")
"$venv/bin/python" - "http://127.0.0.1:$port" "$work" <<'EOF' || { tail -n 40 "$work/serve.log" >&2; exit 1; }
import json, sys, time
from collections.abc import Callable
from pathlib import Path

import httpx

base, work = sys.argv[1], Path(sys.argv[2])
control = json.loads((work / "sandbox.json").read_text().splitlines()[0])["control_url"]


def wait_for(what: str, check: Callable[[], str | None], timeout: float = 60) -> None:
    """Poll `check` (None: done; text: why not yet) until done, or fail saying what was last seen."""
    deadline, last = time.monotonic() + timeout, "no answer"
    while time.monotonic() < deadline:
        try:
            if (last := check()) is None:
                return
        except httpx.TransportError as exc:
            last = type(exc).__name__
        time.sleep(0.2)
    sys.exit(f"check-wheel: {what} not within {timeout:.0f} s: {last}")


def ready() -> str | None:
    answer = httpx.get(f"{base}/readyz", timeout=5)
    return None if answer.status_code == 200 else answer.text


wait_for("/readyz answering 200", ready)
httpx.put(f"{control}/webhook", json={"url": f"{base}/webhook"}, timeout=10).raise_for_status()
job = httpx.post(f"{control}/jobs", json={"repo": "octo-org/app", "labels": ["self-hosted", "small"]}, timeout=10)
job_url = f"{control}/jobs/{job.raise_for_status().json()['id']}"


def job_done() -> str | None:
    view = httpx.get(job_url, timeout=5).json()
    return None if view["status"] == "completed" and view["runner_name"] else json.dumps(view)


wait_for("the job queued through the webhook completed on a runner corral made", job_done)
pages = {"/healthz": "ok", "/": "<html", "/dashboard/dashboard.js": "", "/dashboard/dashboard.css": ""}
for path, needle in pages.items():
    answer = httpx.get(f"{base}{path}", timeout=5)
    if answer.status_code != 200 or needle not in answer.text:
        sys.exit(f"check-wheel: GET {path} answered {answer.status_code}")
print(f"   job {job_url.rsplit('/', 1)[1]} served by {httpx.get(job_url, timeout=5).json()['runner_name']}")
EOF
kill -TERM "$serve_pid"
wait "$serve_pid" || fail "corral serve exited $? on SIGTERM (log: $(tail -n 5 "$work/serve.log"))"
kill -TERM "$sandbox_pid"
wait "$sandbox_pid" || fail "corral sandbox exited $? on SIGTERM"

if [ "${CHECK_WHEEL_DEMO:-1}" != 0 ]; then
  step "the sandbox's wheel installed beside corral's (--no-deps: the runtime lock has what it requires)"
  pip_install "$venv" --no-deps "${sandbox_wheel[0]}"
  "$venv/bin/python" -m pip check --disable-pip-version-check || fail "the sandbox's wheel needs what the lock lacks"
  location="$("$venv/bin/python" -c 'import corral_sandbox; print(corral_sandbox.__file__)')"
  [[ "$location" == "$venv/"* ]] || fail "corral_sandbox imports from $location, not from the venv"

  step "corral demo --duration 3 from the install (user data template, SQLite migrations, leak check)"
  # The demo uses only the clouds.yaml of the sandbox it starts: run it where OS_CLIENT_CONFIG_FILE names another
  # (the stopped sandbox's, whose entries have the same names), as in an OpenStack user's shell.
  if ! "${clouds[@]}" "$corral" demo --duration 3 --jobs-per-minute 120 --port 0 \
    >"$work/demo.log" 2>&1; then
    cat "$work/demo.log" >&2
    fail "corral demo failed"
  fi
  grep -E "jobs served|leaks found" "$work/demo.log"
fi

cd "$ROOT"
step "the wheels work: corral's installed alone and served, the demo run with the sandbox's beside it"
