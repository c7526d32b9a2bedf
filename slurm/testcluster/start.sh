#!/usr/bin/env bash
# Start a private single-node Slurm cluster with accounting under BASE_DIR.
#
#   slurm/testcluster/start.sh BASE_DIR      then: source BASE_DIR/env.sh
#
# Everything lives under BASE_DIR: munge key and socket, a MariaDB datadir, slurmdbd, slurmctld and
# slurmd with their configs, state, logs and PID files. Ports are chosen free at start, so several
# clusters (or a system Slurm) can coexist; nothing under /etc is read or written. All daemons run as
# the calling user (root in CI). Recipe and pitfalls: docs/feasibility.md section 4. It has a real site's
# limits (MaxArraySize=8, QOS capped with MaxSubmitJobsPerUser=6 and MaxJobsPerUser=1; README.md).
# Stop with slurm/testcluster/stop.sh BASE_DIR. On failure this script prints the reason and the log
# tails, stops whatever it had started, and exits 1.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="$PATH:/usr/sbin:/sbin:/usr/bin"

if [[ $# -ne 1 || -z "$1" ]]; then
  echo "usage: $0 BASE_DIR  (an empty or new directory; the cluster lives there)" >&2
  exit 2
fi
mkdir -p "$1"
BASE=$(cd "$1" && pwd -P)

CLUSTER=exotest
PARTITION=debug
NODE=$(hostname -s)
# A second node on this machine in Slurm's multiple-slurmd mode (Debian's build has it): its own slurmd on its
# own port, named so that it does not resolve (jobs must reach it through its NodeAddr, as on a cluster whose
# node names are not host names). It is only in partition `twonode` (with $NODE), so jobs of `debug` never
# land on it and the single-node tests see one node of $(nproc) CPUs, as before.
NODE2=exotest-n2
PARTITION2=twonode
CPUS=$(nproc)
# RealMemory must not exceed what slurmd detects, or the node is drained; stay well below free memory.
MEM_AVAILABLE_MB=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)
REAL_MEMORY_MB=$(( MEM_AVAILABLE_MB * 3 / 4 ))
(( REAL_MEMORY_MB >= 512 )) || REAL_MEMORY_MB=512
# How long a requeued job waits before it may run again: Slurm sets its begin time to now plus the
# credential lifetime AuthInfo=cred_expire (default 120 s, the "~2 min hold"; minimum 5). 10 s keeps
# credentials valid long enough for step launches on a loaded 2-core machine; the env var
# EXOFORMER_TESTCLUSTER_CRED_EXPIRE_S overrides it (120 = stock Slurm). See README.md.
CRED_EXPIRE_S=${EXOFORMER_TESTCLUSTER_CRED_EXPIRE_S:-10}
STARTUP_TIMEOUT_S=${EXOFORMER_TESTCLUSTER_TIMEOUT_S:-60}
# Site limits (see README.md): the largest array is 0-7, and the QOS `capped` lets a user have at most 6 jobs
# (array tasks count one each) queued or running. Jobs without --qos get `normal`, which has no limits.
MAX_ARRAY_SIZE=8
CAPPED_MAX_SUBMIT=6
CAPPED_MAX_RUNNING=1
ACCOUNT=exo
USER_NAME=$(id -un)

ETC=$BASE/etc
SOCK=$BASE/munge/munge.socket
KEY=$BASE/munge_key/munge.key
MYSQL_SOCK=$BASE/mysql/mysqld.sock
SLURM_CONF_FILE=$ETC/slurm.conf

t0=$(date +%s%N)
elapsed() { local ms=$(( ($(date +%s%N) - t0) / 1000000 )); printf '%d.%03d s' $((ms / 1000)) $((ms % 1000)); }
step() { echo "testcluster start: [$(elapsed)] $*"; }

fail() {
  echo "testcluster start: FAILED after $(elapsed): $*" >&2
  for log in "$BASE"/log/*; do
    [[ -s $log ]] || continue
    echo "----- tail of $log -----" >&2
    tail -n 15 "$log" >&2
  done
  "$HERE/stop.sh" "$BASE" >&2 || true
  exit 1
}

# Wait until a command succeeds, or fail with the given reason.
wait_for() {
  local what=$1; shift
  local deadline=$(( $(date +%s) + STARTUP_TIMEOUT_S ))
  until "$@" >/dev/null 2>&1; do
    (( $(date +%s) < deadline )) || fail "$what did not come up within ${STARTUP_TIMEOUT_S} s"
    sleep 0.2
  done
}

# Unix sockets have a 108-byte path limit.
(( ${#SOCK} < 100 && ${#MYSQL_SOCK} < 100 )) || {
  echo "testcluster start: BASE_DIR path is too long for unix sockets ($BASE); use a shorter one, e.g. under /tmp" >&2
  exit 2
}
for bin in munged mariadbd mariadb-install-db mariadb slurmdbd slurmctld slurmd sacctmgr sinfo; do
  command -v "$bin" >/dev/null || { echo "testcluster start: $bin not found; run slurm/testcluster/install.sh" >&2; exit 1; }
done
for pidfile in "$BASE"/run/*.pid; do
  [[ -e $pidfile ]] || continue
  if kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "testcluster start: a cluster is already running under $BASE ($pidfile); stop it with $HERE/stop.sh $BASE" >&2
    exit 1
  fi
done

# munged demands: socket dir and all its parents traversable by all (0755), key dir 0700, key 0400.
mkdir -p "$ETC" "$BASE"/{state,log,run,munge,munge_key,mysql} "$BASE/spool/$NODE" "$BASE/spool/$NODE2"
chmod 755 "$BASE" "$BASE/munge"
chmod 700 "$BASE/munge_key"

# Free ports, all held at once so that they differ; a tiny race with other programs remains.
read -r CTLD_PORT SLURMD_PORT DBD_PORT MYSQL_PORT SLURMD2_PORT < <(python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
PY
)
step "base $BASE, nodes $NODE + $NODE2, $CPUS CPUs, ${REAL_MEMORY_MB} MB; ports ctld $CTLD_PORT slurmd $SLURMD_PORT + $SLURMD2_PORT dbd $DBD_PORT mysql $MYSQL_PORT"

# --- munge --------------------------------------------------------------------------------------
head -c 1024 /dev/urandom > "$KEY"
chmod 400 "$KEY"
munged --socket="$SOCK" --key-file="$KEY" --log-file="$BASE/log/munged.log" \
  --pid-file="$BASE/run/munged.pid" --seed-file="$BASE/munge_key/munged.seed" \
  || fail "munged did not start"
wait_for "munged" bash -c "munge -S '$SOCK' -n | unmunge -S '$SOCK'"
step "munged up"

# --- MariaDB --------------------------------------------------------------------------------------
DB_PASS=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
mariadb-install-db --no-defaults --user="$USER_NAME" --datadir="$BASE/mysql/data" --skip-test-db \
  > "$BASE/log/mariadb-install.log" 2>&1 || fail "mariadb-install-db failed"
setsid mariadbd --no-defaults --user="$USER_NAME" --datadir="$BASE/mysql/data" --socket="$MYSQL_SOCK" \
  --port="$MYSQL_PORT" --bind-address=127.0.0.1 --skip-name-resolve --pid-file="$BASE/run/mariadbd.pid" \
  --log-error="$BASE/log/mariadbd.err" --innodb-buffer-pool-size=32M \
  < /dev/null > "$BASE/log/mariadbd.out" 2>&1 &
# mariadbd writes its PID file only once initialised; write it now so that a failure before then
# still lets stop.sh find it (setsid execs in place here, so $! is mariadbd itself).
echo $! > "$BASE/run/mariadbd.pid"
# mariadb-install-db gives root and the --user account unix_socket logins: connect as the calling user
# (as root, that is root; as anyone else, -uroot is refused with "Access denied").
wait_for "mariadbd" mariadb-admin --no-defaults --socket="$MYSQL_SOCK" -u"$USER_NAME" ping
mariadb --no-defaults --socket="$MYSQL_SOCK" -u"$USER_NAME" -e "
  CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || fail "could not create the slurm database user"
step "mariadbd up"

# --- configs --------------------------------------------------------------------------------------
umask 077
cat > "$ETC/slurmdbd.conf" <<EOF
# Generated by slurm/testcluster/start.sh; holds the database password, hence mode 0600.
AuthType=auth/munge
AuthInfo=socket=$SOCK
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=$USER_NAME
LogFile=$BASE/log/slurmdbd.log
PidFile=$BASE/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MYSQL_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
chmod 600 "$ETC/slurmdbd.conf"
umask 022

cat > "$SLURM_CONF_FILE" <<EOF
# Generated by slurm/testcluster/start.sh: a private single-node test cluster under $BASE.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$USER_NAME
SlurmdUser=$USER_NAME
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also the hold of a requeued job before it may start again (default 120 s).
AuthInfo=socket=$SOCK,cred_expire=$CRED_EXPIRE_S
StateSaveLocation=$BASE/state
# One spool, PID and log file per slurmd (%n: its node name; multiple-slurmd mode).
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
# No cgroups needed (containers, gVisor): plain process tracking, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
# Accounting through slurmdbd, so that sacct works (submitit needs it to see dead jobs). The DBD
# connection ignores AuthInfo and takes the munge socket from AccountingStoragePass (pitfall 2).
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$SOCK
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
# A real site's limits, so that the harness's splitting of large plans is tested for real (README.md):
# an array index must stay below MaxArraySize (sbatch refuses --array=0-8), and QOS limits such as the
# QOS capped (MaxSubmitJobsPerUser=$CAPPED_MAX_SUBMIT, MaxJobsPerUser=$CAPPED_MAX_RUNNING) are enforced. Enforcement needs an association
# for every job: the calling user in account $ACCOUNT, default QOS normal (no limits), added below.
MaxArraySize=$MAX_ARRAY_SIZE
AccountingStorageEnforce=associations,limits,qos
# Test-friendly timings: finished jobs leave slurmctld's memory after MinJobAge (sacct keeps them);
# scancel/timeouts escalate SIGTERM -> SIGKILL after KillWait; the scheduler passes run every 2 s
# instead of 60 s, so a requeued job starts as soon as its hold ends.
MinJobAge=60
KillWait=5
InactiveLimit=0
JobRequeue=1
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$REAL_MEMORY_MB State=UNKNOWN
NodeName=$NODE2 NodeHostname=$NODE NodeAddr=127.0.0.1 Port=$SLURMD2_PORT CPUs=$CPUS RealMemory=$REAL_MEMORY_MB State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
PartitionName=$PARTITION2 Nodes=$NODE,$NODE2 MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$SLURM_CONF_FILE

# --- slurmdbd, cluster registration --------------------------------------------------------------
slurmdbd || fail "slurmdbd did not start"
wait_for "slurmdbd" sacctmgr -i show cluster
sacctmgr -i add cluster "$CLUSTER" > "$BASE/log/sacctmgr.log" 2>&1 || fail "sacctmgr add cluster $CLUSTER failed"
# Before slurmctld starts, so that it loads them with the association cache. QOS `normal` exists from the start.
{
  sacctmgr -i add qos capped MaxSubmitJobsPerUser="$CAPPED_MAX_SUBMIT" MaxJobsPerUser="$CAPPED_MAX_RUNNING" &&
  sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" Description=exoformer-tests Organization=exoformer &&
  sacctmgr -i add user "$USER_NAME" Account="$ACCOUNT" Cluster="$CLUSTER" DefaultAccount="$ACCOUNT" \
    QOS=normal,capped DefaultQOS=normal
} >> "$BASE/log/sacctmgr.log" 2>&1 || fail "sacctmgr could not create the QOS, account $ACCOUNT or user $USER_NAME"
step "slurmdbd up, cluster $CLUSTER registered, QOS capped, account $ACCOUNT with user $USER_NAME"

# --- slurmctld, slurmd ----------------------------------------------------------------------------
slurmctld -f "$SLURM_CONF_FILE" || fail "slurmctld did not start"
wait_for "slurmctld" scontrol ping
slurmd -f "$SLURM_CONF_FILE" -N "$NODE" || fail "slurmd did not start"
slurmd -f "$SLURM_CONF_FILE" -N "$NODE2" || fail "slurmd of the second node ($NODE2) did not start"
node_idle() { [[ $(sinfo -h -N -n "$1" -o %t 2>/dev/null | sort -u) == idle ]]; }
wait_for "node $NODE (state idle in sinfo)" node_idle "$NODE"
wait_for "node $NODE2 (state idle in sinfo)" node_idle "$NODE2"
step "slurmctld + 2 slurmd up, nodes $NODE and $NODE2 idle"

cat > "$BASE/env.sh" <<EOF
# Source this to talk to the test cluster under $BASE (written by slurm/testcluster/start.sh).
export SLURM_CONF=$SLURM_CONF_FILE
case ":\$PATH:" in *:/usr/bin:*) ;; *) export PATH="\$PATH:/usr/bin" ;; esac
export EXOFORMER_TESTCLUSTER_BASE=$BASE
export EXOFORMER_TESTCLUSTER_NODE=$NODE
export EXOFORMER_TESTCLUSTER_PARTITION=$PARTITION
export EXOFORMER_TESTCLUSTER_NODE2=$NODE2
export EXOFORMER_TESTCLUSTER_PARTITION2=$PARTITION2
export EXOFORMER_TESTCLUSTER_CRED_EXPIRE_S=$CRED_EXPIRE_S
EOF
step "cluster ready; source $BASE/env.sh"
