#!/usr/bin/env bash
# A 16-node fake Slurm cluster on localhost (node[001-016], 8 fake GPUs each) for tests and demos: the default
# partition `debug` holds node[001-004], `wide` all sixteen (find-bad-nodes at scale).
#
#   scripts/slurm-cluster.sh install   # apt packages (Debian: slurm-wlm 22.05, munge, slurmdbd, MariaDB)
#   scripts/slurm-cluster.sh start     # start MariaDB, munged, slurmdbd, slurmctld, 16 x slurmd; wait until idle
#   scripts/slurm-cluster.sh stop
#   scripts/slurm-cluster.sh status
#
# Runs as root. State, logs and fake GPU device files live under /var/tmp/cloudai-slurm.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
BASE=/var/tmp/cloudai-slurm
NODES=($(seq -f 'node%03g' 1 16))

log() { echo "[slurm-cluster] $*"; }

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v slurmdbd >/dev/null \
        && command -v munged >/dev/null && command -v mariadbd >/dev/null && [ -e /usr/lib/x86_64-linux-gnu/libpmix.so ]; then
        log "packages already installed"
        return
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client slurmdbd munge mariadb-server libpmix-dev >/dev/null
    log "installed: $(slurmctld -V)"
}

write_conf() {
    mkdir -p /etc/slurm "$BASE"/{state,log,dev,tmp} "$BASE"/spool/d
    for n in "${NODES[@]}"; do mkdir -p "$BASE/spool/d/$n" "$BASE/tmp/$n"; done
    # Character devices if we may create them (gres wants devices); plain files otherwise.
    for i in $(seq 0 7); do
        [ -e "$BASE/dev/fakegpu$i" ] || mknod "$BASE/dev/fakegpu$i" c 1 3 2>/dev/null || touch "$BASE/dev/fakegpu$i"
    done
    install -m 644 "$HERE/slurm/slurm.conf" /etc/slurm/slurm.conf
    install -m 644 "$HERE/slurm/gres.conf" /etc/slurm/gres.conf
    install -m 644 "$HERE/slurm/topology.conf" /etc/slurm/topology.conf
    install -m 600 "$HERE/slurm/slurmdbd.conf" /etc/slurm/slurmdbd.conf
}

start_munge() {
    if pgrep -x munged >/dev/null; then return; fi
    mkdir -p /etc/munge /var/run/munge /var/log/munge /var/lib/munge
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown -R munge:munge /etc/munge /var/run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
    chmod 400 /etc/munge/munge.key
    if id munge >/dev/null 2>&1; then
        su -s /bin/sh munge -c "munged" 2>/dev/null || munged --force
    else
        munged --force
    fi
    touch "$BASE/started-munged"
}

start_mariadb() {
    if ! pgrep -x mariadbd >/dev/null; then
        mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
        (mysqld_safe --skip-networking=0 --bind-address=127.0.0.1 >"$BASE/log/mariadb.log" 2>&1 &)
        touch "$BASE/started-mariadb"
    fi
    for _ in $(seq 1 60); do mysqladmin ping >/dev/null 2>&1 && break; sleep 0.5; done
    mysqladmin ping >/dev/null 2>&1 || { log "MariaDB did not start"; cat "$BASE/log/mariadb.log"; exit 1; }
    # slurmdbd connects as root over TCP: allow it without a password on this throw-away database.
    mysql -u root -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        ALTER USER IF EXISTS 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket;
        CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
        GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; FLUSH PRIVILEGES;" >/dev/null
}

wait_for() { # description, command...
    local what=$1; shift
    for _ in $(seq 1 120); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
    log "timed out waiting for $what"
    return 1
}

start() {
    write_conf
    start_munge
    wait_for munge munge -n
    start_mariadb
    pgrep -x slurmdbd >/dev/null || slurmdbd
    wait_for slurmdbd sacctmgr -n list cluster
    if ! sacctmgr -n list cluster format=cluster | grep -q cloudai-ci; then
        sacctmgr -i add cluster cloudai-ci >/dev/null
    fi
    pgrep -x slurmctld >/dev/null || slurmctld
    wait_for slurmctld scontrol ping
    for n in "${NODES[@]}"; do
        pgrep -f "slurmd -N $n" >/dev/null || slurmd -N "$n"
    done
    for _ in $(seq 1 120); do
        idle=$(sinfo -h -N -t idle -o '%N' | sort -u | wc -l)
        [ "$idle" -ge 16 ] && break
        scontrol update nodename=node[001-016] state=resume >/dev/null 2>&1 || true
        sleep 0.5
    done
    sinfo
    [ "$(sinfo -h -N -t idle -o '%N' | sort -u | wc -l)" -ge 16 ] || { log "nodes are not idle"; tail -20 "$BASE"/log/*.log; exit 1; }
    log "cluster up: 16 nodes idle"
}

# Stops exactly what start started: the Slurm daemons by the pid files slurm.conf puts under $BASE, munged and
# MariaDB only when start launched them (never a machine's own daemons of the same name).
stop() {
    local pids=() f
    for f in "$BASE"/slurmd-*.pid "$BASE"/slurmctld.pid "$BASE"/slurmdbd.pid; do
        [ -s "$f" ] && pids+=("$(cat "$f")")
    done
    stop_pids "${pids[@]}"
    if [ -e "$BASE/started-mariadb" ]; then
        mysqladmin shutdown 2>/dev/null || true
        rm -f "$BASE/started-mariadb"
    fi
    if [ -e "$BASE/started-munged" ] && [ -s /var/run/munge/munged.pid ]; then
        stop_pids "$(cat /var/run/munge/munged.pid)"
        rm -f "$BASE/started-munged"
    fi
    log "stopped"
}

stop_pids() { # pids...: TERM, wait up to 10 s, then KILL what is left
    local p alive
    [ $# -gt 0 ] || return 0
    for p in "$@"; do kill "$p" 2>/dev/null || true; done
    for _ in $(seq 1 100); do
        alive=""
        for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ -z "$alive" ] && return 0
        sleep 0.1
    done
    for p in "$@"; do kill -9 "$p" 2>/dev/null || true; done
}

status() {
    scontrol ping && sinfo && squeue
}

case "${1:-}" in
    install) install_packages ;;
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 {install|start|stop|status}" >&2; exit 2 ;;
esac
