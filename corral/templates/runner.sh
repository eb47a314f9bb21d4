#!/bin/bash
# corral: start one ephemeral GitHub Actions runner with a just-in-time configuration, then power off.
# Rendered by corral for runner ${runner_name} of pool ${pool}. Replace it with `user_data_template`.
set -euo pipefail
RUNNER_HOME=/opt/actions-runner
RUNNER_USER=runner
if [ ! -x "$${RUNNER_HOME}/run.sh" ]; then
  mkdir -p "$${RUNNER_HOME}"
  curl -fsSL "${runner_download_url}" | tar -xz -C "$${RUNNER_HOME}"
fi
id -u "$${RUNNER_USER}" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$${RUNNER_USER}"
chown -R "$${RUNNER_USER}:" "$${RUNNER_HOME}"
# The pool's cache volume, if this server got one (`cache_volumes`): formatted on its first use, then kept
# from server to server. Only caches belong on it: the runner's work directory and credentials stay under
# RUNNER_HOME, on the server's own disk, and go with it.
CACHE_VOLUME='${cache_volume}'
CACHE_MOUNT='${cache_mount}'
if [ -n "$${CACHE_VOLUME}" ]; then
  CACHE_DEVICE=""
  for _ in $$(seq 60); do  # the disk's serial is the first 20 characters of the volume's id
    CACHE_DEVICE=$$(ls /dev/disk/by-id/*"$${CACHE_VOLUME:0:20}"* 2>/dev/null | head -n 1 || true)
    [ -n "$${CACHE_DEVICE}" ] && break
    sleep 1
  done
  if [ -n "$${CACHE_DEVICE}" ]; then
    blkid "$${CACHE_DEVICE}" >/dev/null 2>&1 || mkfs.ext4 -q -L corral-cache "$${CACHE_DEVICE}"
    mkdir -p "$${CACHE_MOUNT}"
    mount "$${CACHE_DEVICE}" "$${CACHE_MOUNT}"
    mkdir -p "$${CACHE_MOUNT}/tool-cache"
    chown "$${RUNNER_USER}:" "$${CACHE_MOUNT}" "$${CACHE_MOUNT}/tool-cache"
    export RUNNER_TOOL_CACHE="$${CACHE_MOUNT}/tool-cache"
  else
    echo "corral: cache volume $${CACHE_VOLUME} did not appear; running without it" >&2
  fi
fi
# The JIT config is a credential: passed through the environment, not the command line.
export ACTIONS_RUNNER_INPUT_JITCONFIG='${jit_config}'
su --preserve-environment "$${RUNNER_USER}" -c "cd $${RUNNER_HOME} && ./run.sh" || true
shutdown -h now
