#!/usr/bin/env bash
# Install the Debian packages of the single-node Slurm test cluster: munge, slurmctld,
# slurmd, slurm-client and, for sacct, slurmdbd + mariadb-server.
#
# Idempotent: when every package is already installed it returns in well under a second without
# touching apt. Nothing is started: the packages' services must never run with the system config
# (start.sh runs private daemons under a temp dir instead). Debian images usually ship a
# /usr/sbin/policy-rc.d that denies service starts; when it is missing we put one in place for the
# duration of the install and remove it again.
set -euo pipefail

PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
if (( ${#missing[@]} == 0 )); then
  echo "testcluster install: all packages present (${PACKAGES[*]})"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "testcluster install: missing packages ${missing[*]}; run this script as root (or: sudo apt-get install -y ${missing[*]})" >&2
  exit 1
fi

start_ns=$(date +%s%N)
policy=/usr/sbin/policy-rc.d
made_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\n# temporary, from exoformer slurm/testcluster/install.sh: deny service starts\nexit 101\n' > "$policy"
  chmod 755 "$policy"
  made_policy=1
  trap '[[ $made_policy == 1 ]] && rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
echo "testcluster install: apt-get install ${missing[*]}"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

elapsed_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
echo "testcluster install: done in $((elapsed_ms / 1000)).$(printf '%03d' $((elapsed_ms % 1000))) s"
