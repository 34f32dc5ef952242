#!/usr/bin/env bash
# A PostgreSQL server for the ledger tests (and for trying `--ledger postgres://…` by hand): Debian's postgresql
# package, one private cluster under /var/tmp/cloudai-pg listening on 127.0.0.1:55432 (trust authentication: a test
# server on the loopback, never a model for a real one). The promtool the metrics test runs comes with Debian's
# prometheus package.
#
#   scripts/pg-cluster.sh install   # apt packages: postgresql, prometheus (promtool)
#   scripts/pg-cluster.sh start     # initdb on first use, start, wait until it answers
#   scripts/pg-cluster.sh stop
#   scripts/pg-cluster.sh url       # the URL the tests use (CLOUDAI_TEST_POSTGRES)
#
# As root the server runs as the postgres user (initdb refuses root); otherwise as the caller.
set -euo pipefail

BASE=${CLOUDAI_PG_DIR:-/var/tmp/cloudai-pg}
PORT=${CLOUDAI_PG_PORT:-55432}
URL="postgres://postgres@127.0.0.1:$PORT/postgres"

log() { echo "[pg-cluster] $*"; }

bindir() {
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    [ -n "$d" ] || { log "PostgreSQL is not installed: run '$0 install'"; exit 1; }
    echo "$d"
}

as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "${1:-}" in
install)
    need=()
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
    command -v promtool >/dev/null || need+=(prometheus)
    if [ ${#need[@]} -eq 0 ]; then
        log "packages already installed"
        exit 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    log "installed: ${need[*]}"
    ;;
start)
    B=$(bindir)
    mkdir -p "$BASE"
    [ "$(id -u)" = 0 ] && chown postgres: "$BASE"
    if [ ! -f "$BASE/data/PG_VERSION" ]; then
        as_owner "$B/initdb" -D "$BASE/data" -A trust -U postgres --no-sync >/dev/null
    fi
    if as_owner "$B/pg_ctl" -D "$BASE/data" status >/dev/null 2>&1; then
        log "already running: $URL"
        exit 0
    fi
    # a test server: durability is not what it tests (the ledger's own transactions are)
    as_owner "$B/pg_ctl" -D "$BASE/data" -l "$BASE/server.log" -w -t 60 \
        -o "-p $PORT -k $BASE -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null
    log "running: $URL"
    ;;
stop)
    B=$(bindir)
    as_owner "$B/pg_ctl" -D "$BASE/data" -m fast -w stop >/dev/null 2>&1 || true
    log "stopped"
    ;;
url)
    echo "$URL"
    ;;
*)
    echo "usage: $0 install|start|stop|url" >&2
    exit 2
    ;;
esac
