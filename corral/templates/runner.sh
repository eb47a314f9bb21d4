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
# The JIT config is a credential: passed through the environment, not the command line.
export ACTIONS_RUNNER_INPUT_JITCONFIG='${jit_config}'
su --preserve-environment "$${RUNNER_USER}" -c "cd $${RUNNER_HOME} && ./run.sh" || true
shutdown -h now
