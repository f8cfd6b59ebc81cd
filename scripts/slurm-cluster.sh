#!/usr/bin/env bash
# A real single-node Slurm cluster for the executor tests, from Debian's packages
# (slurm-wlm, munge), run as root on this machine.
#
#   scripts/slurm-cluster.sh start    installs the packages if missing, writes a munge key
#                                     and a slurm.conf, starts munged, slurmctld and slurmd,
#                                     waits until the node is idle; does nothing when it
#                                     already answers
#   scripts/slurm-cluster.sh stop     stops the daemons (the state directory stays)
#   scripts/slurm-cluster.sh status   sinfo's view of the node; exit 1 when it is not up
#
# QUANTFORGE_SLURM_DIR sets the directory for state, spool, pid and log files (default:
# target/slurm-cluster in the repository). The configuration lives there too; clients find
# it through /etc/slurm/slurm.conf, a link to it (an existing file not written by this
# script is never replaced). The tests (tests/it/slurm.rs) skip when `status` fails.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
dir=${QUANTFORGE_SLURM_DIR:-$repo/target/slurm-cluster}
conf=$dir/slurm.conf
marker="# written by quantforge scripts/slurm-cluster.sh"

# Up: the node answers, idle or running jobs or completing them (`comp`,
# the state a node shows for a moment after a job is cancelled).
node_up() {
    timeout 5 sinfo --noheader --format=%t 2>/dev/null | grep -qE '^(idle|mix|alloc|comp)'
}

install_packages() {
    if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
    fi
}

munge_key() {
    local key=/etc/munge/munge.key
    if [ ! -s "$key" ]; then
        install -d -o munge -g munge -m 700 /etc/munge
        head -c 1024 /dev/urandom >"$key"
    fi
    chown munge:munge "$key"
    chmod 400 "$key"
    install -d -o munge -g munge -m 755 /run/munge
    if ! pgrep -x munged >/dev/null; then
        runuser -u munge -- munged
    fi
}

write_conf() {
    local host cpus mem
    host=$(hostname -s)
    cpus=$(nproc)
    # A little under what is free, so the node never advertises memory it lacks.
    mem=$(( $(free -m | awk '/^Mem:/ {print $7}') * 9 / 10 ))
    mkdir -p "$dir/state" "$dir/spool" "$dir/log"
    cat >"$conf" <<EOF
$marker
ClusterName=quantforge-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
# Finished jobs stay visible to scontrol long enough for a waiting run to read them.
MinJobAge=3600
# Tasks here last seconds: schedule as soon as a CPU frees, not in batches.
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    mkdir -p /etc/slurm
    if [ -e /etc/slurm/slurm.conf ] && ! grep -qF "$marker" /etc/slurm/slurm.conf; then
        echo "/etc/slurm/slurm.conf exists and was not written by this script; not replacing it" >&2
        exit 1
    fi
    ln -sfn "$conf" /etc/slurm/slurm.conf
}

running() {
    [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

start() {
    if node_up; then
        echo "slurm cluster already up"
        sinfo
        return
    fi
    install_packages
    munge_key
    write_conf
    running "$dir/slurmctld.pid" || slurmctld -f "$conf"
    running "$dir/slurmd.pid" || slurmd -f "$conf"
    for _ in $(seq 1 60); do
        if node_up; then
            echo "slurm cluster up (state and logs in $dir)"
            sinfo
            return
        fi
        sleep 0.5
    done
    echo "slurm cluster did not come up; see $dir/log" >&2
    tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
    exit 1
}

stop() {
    for daemon in slurmd slurmctld; do
        if running "$dir/$daemon.pid"; then
            kill "$(cat "$dir/$daemon.pid")"
        fi
    done
    for _ in $(seq 1 20); do
        running "$dir/slurmd.pid" || running "$dir/slurmctld.pid" || break
        sleep 0.25
    done
    echo "slurm cluster stopped"
}

status() {
    if node_up; then
        sinfo
    else
        echo "slurm cluster is not up; start it with scripts/slurm-cluster.sh start" >&2
        exit 1
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *)
        echo "usage: $0 start|stop|status" >&2
        exit 2
        ;;
esac
