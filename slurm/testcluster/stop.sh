#!/usr/bin/env bash
# Stop the test cluster that start.sh started under BASE_DIR.
#
#   slurm/testcluster/stop.sh BASE_DIR
#
# Only the daemons named by the PID files under BASE_DIR/run are signalled, and only after checking
# that the PID still belongs to that daemon of this cluster (its name matches and its command line or
# environment names BASE_DIR), so a recycled PID is never hit. Jobs still in the cluster are cancelled
# first, so that no slurmstepd or job process outlives it. Never fails when nothing is running.
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin:/usr/bin"

if [[ $# -ne 1 || -z "$1" ]]; then
  echo "usage: $0 BASE_DIR" >&2
  exit 2
fi
if [[ ! -d $1 ]]; then
  echo "testcluster stop: $1 does not exist; nothing to stop"
  exit 0
fi
BASE=$(cd "$1" && pwd -P)
STOP_TIMEOUT_S=20
t0=$(date +%s%N)
elapsed() { local ms=$(( ($(date +%s%N) - t0) / 1000000 )); printf '%d.%03d s' $((ms / 1000)) $((ms % 1000)); }

# A daemon counts as gone once it is a zombie: reaping is its parent's (often init's) business.
alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $state && $state != Z && $state != X ]]
}

# Print the PID from BASE/run/FILE.pid when it is a live process of this cluster named FILE up to its first
# dash (slurmd-NODE.pid: one slurmd per node).
our_pid() {
  local name=${1%%-*} pidfile=$BASE/run/$1.pid pid
  [[ -r $pidfile ]] || return 1
  pid=$(tr -dc '0-9' < "$pidfile")
  [[ -n $pid ]] && alive "$pid" || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || return 1
  if tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$BASE/" \
     || tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qF "$BASE/"; then
    echo "$pid"
    return 0
  fi
  return 1
}

# Cancel the cluster's remaining jobs while slurmctld can still do it.
if our_pid slurmctld >/dev/null && [[ -f $BASE/etc/slurm.conf ]]; then
  export SLURM_CONF=$BASE/etc/slurm.conf
  jobs=$(squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')
  if [[ -n ${jobs// /} ]]; then
    echo "testcluster stop: cancelling jobs $jobs"
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null
    deadline=$(( $(date +%s) + STOP_TIMEOUT_S ))
    # Default squeue lists pending, running, completing and suspended jobs only.
    while [[ -n $(squeue -h -o %A 2>/dev/null) ]] && (( $(date +%s) < deadline )); do sleep 0.5; done
  fi
fi

# Stop one group of daemons at once and wait for all of them.
stop_group() {
  local name pid pids=() names=()
  for name in "$@"; do
    pid=$(our_pid "$name") || continue
    kill -TERM "$pid" 2>/dev/null && pids+=("$pid") && names+=("$name")
  done
  (( ${#pids[@]} )) || return 0
  local deadline=$(( $(date +%s) + STOP_TIMEOUT_S )) i
  for i in "${!pids[@]}"; do
    while alive "${pids[$i]}" && (( $(date +%s) < deadline )); do sleep 0.05; done
    if alive "${pids[$i]}"; then
      echo "testcluster stop: ${names[$i]} (pid ${pids[$i]}) ignored SIGTERM for ${STOP_TIMEOUT_S} s; sending SIGKILL" >&2
      kill -KILL "${pids[$i]}" 2>/dev/null
    fi
    echo "testcluster stop: [$(elapsed)] ${names[$i]} (pid ${pids[$i]}) stopped"
  done
}

# Order matters: slurmctld flushes job records to slurmdbd, which needs MariaDB and munge.
slurmds=()
for pidfile in "$BASE"/run/slurmd*.pid; do
  [[ -e $pidfile ]] && slurmds+=("$(basename "$pidfile" .pid)")
done
stop_group "${slurmds[@]}" slurmctld
stop_group slurmdbd
stop_group mariadbd munged

# Stale PID files would make start.sh think the cluster still runs.
for pidfile in "$BASE"/run/*.pid; do
  [[ -e $pidfile ]] || continue
  our_pid "$(basename "$pidfile" .pid)" >/dev/null || rm -f "$pidfile"
done
echo "testcluster stop: done in $(elapsed)"
exit 0
