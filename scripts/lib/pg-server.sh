#!/usr/bin/env bash
# scripts/lib/pg-server.sh — install the extension and run a throwaway Postgres server.
# Sourced by scripts/test, scripts/demo and the benches; every function is prefixed `pgs_`.
#
#   pgs_pg_config MAJOR            print the pg_config of MAJOR (15: Debian; others: scripts/pg-majors.sh)
#   pgs_install MAJOR              cargo pgrx install --pg-config … (caller holds the global lock)
#   pgs_start NAME MAJOR [PORT]    initdb + pg_ctl start as `postgres` on a private port and socket dir,
#                                  create database `syncular` with the extension; sets PGS_DSN, PGS_DIR,
#                                  PGS_PORT, PGS_BIN. fsync=off unless PGS_DURABLE=1 (Postgres's
#                                  defaults: fsync=on, synchronous_commit=on — for benchmarks);
#                                  PGS_SERVER_OPTS: extra server options appended to the command line
#                                  (e.g. "-c shared_preload_libraries=pg_stat_statements")
#   pgs_psql [psql args…]          psql as postgres against the running server (database `syncular`)
#   pgs_stop                       stop the server and delete its directory
#   pgs_lock / pgs_unlock          take / release the machine-wide lock /tmp/syncular-pg.lock (fd 9)
#
# Postgres refuses to run as root: the cluster runs as Debian's `postgres` user through runuser, in
# $SYNCULAR_CI_ROOT/run/NAME (default /opt/syncular-ci, traversable by `postgres`; never under /root).
# Only a Unix socket is opened (listen_addresses=''), so nothing is exposed on the network.

SYNCULAR_CI_ROOT=${SYNCULAR_CI_ROOT:-/opt/syncular-ci}
PGS_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PGS_LOCK_FILE=${PGS_LOCK_FILE:-/tmp/syncular-pg.lock}
PGS_RUNAS=${PGS_RUNAS:-postgres}

pgs_log() { echo "pg-server: $*" >&2; }

pgs_lock() {
    exec 9>"$PGS_LOCK_FILE"
    flock 9
}

pgs_unlock() {
    flock -u 9 2>/dev/null || true
}

pgs_pg_config() {
    local major=$1
    if [ "$major" = 15 ] && [ -x /usr/lib/postgresql/15/bin/pg_config ]; then
        echo /usr/lib/postgresql/15/bin/pg_config
    elif [ -x "$PGS_REPO/scripts/pg-majors.sh" ]; then
        "$PGS_REPO/scripts/pg-majors.sh" pg-config "$major"
    else
        pgs_log "no pg_config for Postgres $major"
        return 1
    fi
}

pgs_install() {
    local major=$1 pgc
    pgc=$(pgs_pg_config "$major") || return 1
    (cd "$PGS_REPO" && cargo pgrx install --pg-config "$pgc" >&2)
}

pgs_as_pg() {
    if [ "$(id -un)" = "$PGS_RUNAS" ]; then "$@"; else runuser -u "$PGS_RUNAS" -- "$@"; fi
}

pgs_start() {
    local name=$1 major=$2 port=${3:-$((28800 + $2))} pgc
    pgc=$(pgs_pg_config "$major") || return 1
    PGS_BIN=$("$pgc" --bindir)
    PGS_DIR=$SYNCULAR_CI_ROOT/run/$name
    PGS_PORT=$port
    if [ -f "$PGS_DIR/data/postmaster.pid" ]; then
        pgs_as_pg "$PGS_BIN/pg_ctl" -D "$PGS_DIR/data" -m immediate stop >/dev/null 2>&1 || true
    fi
    rm -rf "$PGS_DIR"
    install -d -o "$PGS_RUNAS" -g "$PGS_RUNAS" "$SYNCULAR_CI_ROOT/run" "$PGS_DIR"
    pgs_as_pg "$PGS_BIN/initdb" -D "$PGS_DIR/data" -U postgres -A trust --no-sync >"$PGS_DIR.initdb.log" 2>&1 \
        || { cat "$PGS_DIR.initdb.log" >&2; return 1; }
    # 9>&-: the postmaster must not inherit the lock fd (pgs_lock), or it would
    # hold /tmp/syncular-pg.lock until the server stops.
    local durability="-c fsync=off"
    [ "${PGS_DURABLE:-0}" = 1 ] && durability=""
    pgs_as_pg "$PGS_BIN/pg_ctl" -D "$PGS_DIR/data" -l "$PGS_DIR/server.log" -w \
        -o "-p $port -k $PGS_DIR -c listen_addresses='' $durability -c max_connections=100 ${PGS_SERVER_OPTS:-}" start \
        9>&- >/dev/null || { cat "$PGS_DIR/server.log" >&2; return 1; }
    PGS_DSN="host=$PGS_DIR port=$port user=postgres dbname=syncular"
    export PGS_DSN PGS_DIR PGS_PORT PGS_BIN
    pgs_as_pg "$PGS_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PGS_DIR" -p "$port" -U postgres -d postgres \
        -c "CREATE DATABASE syncular" || return 1
    pgs_psql -c "CREATE EXTENSION syncular" || return 1
    pgs_log "Postgres $major running in $PGS_DIR (port $port); DSN: $PGS_DSN"
}

pgs_psql() {
    pgs_as_pg "$PGS_BIN/psql" -X -v ON_ERROR_STOP=1 -h "$PGS_DIR" -p "$PGS_PORT" -U postgres -d syncular "$@"
}

pgs_stop() {
    [ -n "${PGS_DIR:-}" ] || return 0
    if [ -f "$PGS_DIR/data/postmaster.pid" ]; then
        pgs_as_pg "$PGS_BIN/pg_ctl" -D "$PGS_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$PGS_DIR" "$PGS_DIR.initdb.log"
    PGS_DIR=
}
