#!/usr/bin/env bash
# Run the live suite (tests/live) against a real OpenStack control plane on loopback: ministack.
#
#   bash scripts/live.sh [pytest arguments]
#
# Installs ministack when missing (once, ~1-2 min), starts a fresh one on free ports (~40-90 s), runs the
# live tests against it, and stops it whatever happens. Prints how long each phase took.
# Environment:
#   MINISTACK_HOME  where ministack's venv lives and this run's state goes (default /tmp/ministack)
#   MINISTACK_DIR   ministack's scripts (default: scripts/ministack in this repository)
#   PORT_BASE       ministack's port base; by default the first free one of a few candidates is taken,
#                   so a ministack someone else started is left alone
#   LIVE_TIMEOUT_S  hard limit for the test phase (default 600); pytest is interrupted, cleans up, and
#                   ministack is still stopped
#   LIVE_SKIP_INSTALL=1  do not run scripts/install.sh (corral's .venv is ready and in use)
#   LIVE_DRY_RUN=1  only resolve and check the paths above, print them and exit: installs and starts nothing
#   LIVE_PHASE      all (default): install, start, test, stop (CI runs it so, beside the main suite). To
#                   keep one ministack across several test runs: `start` installs and starts ministack, notes
#                   where in $MINISTACK_HOME/corral-live.started and leaves it running; `test` runs the live
#                   tests against that one and stops it; `stop` stops one that is still running (CI's exit
#                   trap, when a failure ended the run before the live suite's own stop).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO="$PWD"
export MINISTACK_HOME="${MINISTACK_HOME:-/tmp/ministack}"
MINISTACK_DIR="${MINISTACK_DIR:-$REPO/scripts/ministack}"
VENV="${MINISTACK_VENV:-$MINISTACK_HOME/venv}"
LIVE_TIMEOUT_S="${LIVE_TIMEOUT_S:-600}"
# below the ephemeral range (32768+), so no outgoing connection can be holding one of the ports
PORT_CANDIDATES="${PORT_BASE:-20000 21000 22000 23000 10000 11000 12000 13000}"
T_START=$(date +%s)
PHASES=()

phase() {  # name start-epoch: remember and print how long a phase took
  local took=$(($(date +%s) - $2))
  PHASES+=("$1 ${took}s")
  echo "[live] $1 took ${took}s"
}

summary() {
  echo "[live] phases: ${PHASES[*]:-none}; total $(($(date +%s) - T_START))s"
}

for script in install.sh start.sh stop.sh; do
  if [ ! -f "$MINISTACK_DIR/$script" ]; then
    echo "[live] ministack not found: no $script in $MINISTACK_DIR; set MINISTACK_DIR" >&2
    exit 2
  fi
done
MINISTACK_DIR="$(cd "$MINISTACK_DIR" && pwd)"
if [ "${LIVE_DRY_RUN:-0}" = 1 ]; then
  echo "[live] ministack scripts: $MINISTACK_DIR"
  echo "[live] ministack venv: $VENV"
  echo "[live] state under: $MINISTACK_HOME"
  exit 0
fi
mkdir -p "$MINISTACK_HOME"
LIVE_PHASE="${LIVE_PHASE:-all}"
case "$LIVE_PHASE" in all | start | test | stop) ;; *) echo "[live] LIVE_PHASE: all, start, test or stop" >&2; exit 2 ;; esac
STARTED_FILE="$MINISTACK_HOME/corral-live.started"
if [ "$LIVE_PHASE" = stop ]; then
  if [ -f "$STARTED_FILE" ]; then
    read -r RUN_DIR _ <"$STARTED_FILE"
    MINISTACK_STATE="$RUN_DIR/state" bash "$MINISTACK_DIR/stop.sh" || true
    rm -rf "$STARTED_FILE" "$RUN_DIR"
  fi
  exit 0
fi

# ---------------------------------------------------------------- install
t=$(date +%s)
missing=()
for tool in curl bc flock setsid; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[live] installing ${missing[*]} (start.sh needs them)"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends curl bc util-linux
fi
ministack_installed() {
  [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] && [ -x "$VENV/bin/gunicorn" ] && [ -x "$VENV/bin/nova-compute" ] &&
    "$VENV/bin/python" -c 'import importlib.util as u, sys
mods = ["nova", "keystone", "neutron", "cinder", "glance", "placement", "ministack_mech", "ministack_sqlite_patch"]
sys.exit(any(u.find_spec(m) is None for m in mods))' 2>/dev/null
}
if ! ministack_installed; then
  echo "[live] installing ministack into $VENV"
  MINISTACK_VENV="$VENV" bash "$MINISTACK_DIR/install.sh"
fi
# The start phase leaves corral's .venv alone; LIVE_SKIP_INSTALL=1 (CI, which installed it first and runs the
# main suite from it meanwhile) skips it in the other phases too.
[ "$LIVE_PHASE" = start ] || [ "${LIVE_SKIP_INSTALL:-0}" = 1 ] || bash scripts/install.sh
phase install "$t"

# ---------------------------------------------------------------- start
if [ "$LIVE_PHASE" = test ]; then
  if [ ! -f "$STARTED_FILE" ]; then
    echo "[live] no ministack started by LIVE_PHASE=start ($STARTED_FILE is missing)" >&2
    exit 2
  fi
  read -r RUN_DIR PORT_BASE <"$STARTED_FILE"
  rm -f "$STARTED_FILE"
  export PORT_BASE
else
  RUN_DIR="$(mktemp -d "$MINISTACK_HOME/corral-live.XXXXXX")"
fi
export MINISTACK_VENV="$VENV" MINISTACK_STATE="$RUN_DIR/state"
STARTED=0
[ "$LIVE_PHASE" = test ] && STARTED=1
OUTCOME=1

cleanup() {
  local t
  t=$(date +%s)
  if [ "$LIVE_PHASE" = start ] && [ "$OUTCOME" = 0 ]; then
    summary  # started and noted: the test phase uses it and stops it
    return
  fi
  if [ "$STARTED" = 1 ]; then
    bash "$MINISTACK_DIR/stop.sh" || true
    phase stop "$t"
  fi
  if [ "$OUTCOME" = 0 ]; then
    rm -rf "$RUN_DIR"
  else
    echo "[live] ministack's logs are kept in $MINISTACK_STATE/logs" >&2
  fi
  summary
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ports_free() {  # base: are all of ministack's ports on 127.0.0.1 free?
  # SO_REUSEADDR as the services use it: a port in TIME_WAIT after an earlier run is free for them
  python3 - "$1" <<'PY'
import socket, sys
base = int(sys.argv[1])
for offset in (4369, 5000, 5672, 5673, 8774, 8776, 8778, 9292, 9696):
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", base + offset))
        except OSError:
            sys.exit(1)
PY
}

TRIED=""
pick_port_base() {  # the first candidate not tried yet whose ports are all free
  local base
  for base in $PORT_CANDIDATES; do
    case " $TRIED " in *" $base "*) continue ;; esac
    if ports_free "$base"; then echo "$base"; return 0; fi
  done
  return 1
}

start_ministack() {  # on the first free ports; a failed start is retried once on others
  # One start at a time per MINISTACK_HOME: two runs choosing ports together would choose the same ones.
  exec 9>"$MINISTACK_HOME/corral-live.lock"
  flock -w 600 9
  for attempt in 1 2; do
    if ! PORT_BASE="$(pick_port_base)"; then
      echo "[live] no free port base among: $PORT_CANDIDATES (tried: ${TRIED:-none}); set PORT_BASE" >&2
      exit 1
    fi
    export PORT_BASE
    TRIED="$TRIED $PORT_BASE"
    echo "[live] starting ministack on port base $PORT_BASE (state $MINISTACK_STATE), attempt $attempt"
    STARTED=1
    if bash "$MINISTACK_DIR/start.sh"; then
      break
    fi
    bash "$MINISTACK_DIR/stop.sh" || true
    STARTED=0
    if [ "$attempt" = 2 ]; then
      echo "[live] ministack did not start; logs in $MINISTACK_STATE/logs" >&2
      exit 1
    fi
    echo "[live] ministack did not start (ports taken meanwhile?); trying again on other ports" >&2
  done
  flock -u 9
}

t=$(date +%s)
if [ "$LIVE_PHASE" != test ]; then
  start_ministack
  phase start "$t"
fi
if [ "$LIVE_PHASE" = start ]; then
  echo "$RUN_DIR $PORT_BASE" >"$STARTED_FILE"
  OUTCOME=0
  exit 0
fi

# ---------------------------------------------------------------- test
t=$(date +%s)
set +e
USE_LIVE_OPENSTACK=true CORRAL_LIVE_REQUIRED=true \
  OS_CLIENT_CONFIG_FILE="$MINISTACK_STATE/clouds.yaml" OS_CLOUD=ministack \
  CORRAL_LIVE_IMAGE=cirros CORRAL_LIVE_FLAVOR=m1.tiny CORRAL_LIVE_NETWORK=private \
  timeout --signal=INT --kill-after=60 "$LIVE_TIMEOUT_S" \
  .venv/bin/python -m pytest tests/live --timeout=120 "$@"
OUTCOME=$?
set -e
phase test "$t"
exit "$OUTCOME"
