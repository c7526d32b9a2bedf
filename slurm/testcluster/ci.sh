# shellcheck shell=bash
# Source-able helpers for .ci/run: bring the single-node Slurm test cluster up for the tests
# marked `slurm`, and always take it down again.
#
#   source slurm/testcluster/ci.sh
#   trap 'exoformer_testcluster_stop || true' EXIT
#   exoformer_testcluster_start          # installs if needed, starts, exports the env
#
# After a successful start the calling shell has SLURM_CONF, EXOFORMER_TEST_SLURM_CONF (what
# tests/slurm/conftest.py looks for) and EXOFORMER_TESTCLUSTER_BASE exported. The functions return a
# status instead of exiting, so they are safe under `set -e` and inside traps. The cluster's directory
# (daemon logs) is removed on stop unless EXOFORMER_TESTCLUSTER_KEEP=1.

EXOFORMER_TESTCLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

exoformer_testcluster_start() {
  local base
  "$EXOFORMER_TESTCLUSTER_DIR/install.sh" || return 1
  # Short path: munge and MariaDB sockets live under it (unix socket paths are limited to 108 bytes).
  base=$(mktemp -d /tmp/exoformer-slurm.XXXXXX) || return 1
  export EXOFORMER_TESTCLUSTER_BASE=$base
  "$EXOFORMER_TESTCLUSTER_DIR/start.sh" "$base" || return 1
  # shellcheck source=/dev/null
  source "$base/env.sh" || return 1
  export EXOFORMER_TEST_SLURM_CONF=$SLURM_CONF
}

exoformer_testcluster_stop() {
  local base=${EXOFORMER_TESTCLUSTER_BASE:-}
  [[ -n $base ]] || return 0
  "$EXOFORMER_TESTCLUSTER_DIR/stop.sh" "$base" || return 1
  if [[ ${EXOFORMER_TESTCLUSTER_KEEP:-0} == 1 ]]; then
    echo "testcluster: kept $base (daemon logs in $base/log)"
  else
    rm -rf -- "$base"
  fi
  unset EXOFORMER_TESTCLUSTER_BASE EXOFORMER_TEST_SLURM_CONF SLURM_CONF
}
