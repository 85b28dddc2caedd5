#!/usr/bin/env bash
# bench/soak.sh — the soak run (not in CI): DURATION seconds (default 1200,
# twenty minutes) of mixed traffic — hits, misses, documents, ranges, a
# fan-out of 50 clients every minute, a purge every 10 s — against two
# origin mirrors that flap on a schedule (down, 500, hung, truncating, lying
# about bytes), with the proxy killed (SIGKILL) and restarted every 5
# minutes, its Postgres restarted once and its Redis stopped for a minute
# once. Every body is checked against the origin's bytes. The traffic and
# the origins are bench/soak.py; this script starts a Postgres and a Redis of
# its own on free ports (never the machine's shared ones), writes the
# proxy's config, runs the soak and prints the report.
#
# Usage: bash bench/soak.sh [path/to/mirrorcache]   (default target/release/mirrorcache,
#        else target/debug/mirrorcache)
#   env: DURATION=1200 WORKERS=8 FANOUT=50 KILL_EVERY=300 KEEP=1 (keep the work dir)
# Needs: python3, redis-server, PostgreSQL's initdb/postgres (run as the
# `postgres` user when this runs as root). Without Postgres or Redis the run
# goes on with SQLite or without Redis, and the report says so.
# Results: RELIABILITY.md.

set -euo pipefail

cd "$(dirname "$0")/.."
BIN=${1:-}
if [[ -z $BIN ]]; then
    if [[ -x target/release/mirrorcache ]]; then BIN=target/release/mirrorcache; else BIN=target/debug/mirrorcache; fi
fi
BIN=$(realpath "$BIN")
export DURATION=${DURATION:-1200}

WORK=$(mktemp -d /tmp/mc-soak.XXXXXX)
chmod 755 "$WORK"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [[ -n ${PG_DATA:-} ]]; then as_pg pg_ctl -D "$PG_DATA" -m immediate stop >/dev/null 2>&1 || true; fi
    if [[ -f $WORK/redis.pid ]]; then kill "$(cat "$WORK/redis.pid")" 2>/dev/null || true; fi
    [[ -n ${KEEP:-} ]] || rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
as_pg() { if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

# Postgres of our own.
METADATA="sqlite://$WORK/meta.db"
PG_NOTE="SQLite (no initdb/postgres found)"
PG_RESTART=""
if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
    PG_PORT=$(free_port)
    PG_DATA=$WORK/pg
    mkdir -p "$PG_DATA" && chown postgres "$PG_DATA" 2>/dev/null || true
    as_pg initdb -D "$PG_DATA" -U postgres --auth=trust >/dev/null
    as_pg pg_ctl -D "$PG_DATA" -o "-p $PG_PORT -k $PG_DATA -c listen_addresses=127.0.0.1" -l "$PG_DATA/pg.log" -w start >/dev/null
    as_pg psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -c 'CREATE DATABASE soak' >/dev/null
    METADATA="postgres://postgres@127.0.0.1:$PG_PORT/soak"
    PG_NOTE="Postgres of its own on 127.0.0.1:$PG_PORT"
    runner=""; [[ $(id -u) == 0 ]] && runner="runuser -u postgres --"
    PG_RESTART="$runner pg_ctl -D $PG_DATA -m fast -w restart -o '-p $PG_PORT -k $PG_DATA -c listen_addresses=127.0.0.1' -l $PG_DATA/pg.log"
fi

# Redis of our own.
REDIS_SECTION=""
REDIS_NOTE="no Redis (redis-server not found)"
REDIS_STOP=""; REDIS_START=""
if command -v redis-server >/dev/null; then
    REDIS_PORT=$(free_port)
    REDIS_CMD="redis-server --port $REDIS_PORT --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --pidfile $WORK/redis.pid --logfile $WORK/redis.log"
    eval "$REDIS_CMD"
    REDIS_SECTION="[redis]
url = \"redis://127.0.0.1:$REDIS_PORT\""
    REDIS_NOTE="Redis of its own on 127.0.0.1:$REDIS_PORT"
    REDIS_STOP="kill \$(cat $WORK/redis.pid)"
    REDIS_START="$REDIS_CMD"
fi

A_PORT=$(free_port); B_PORT=$(free_port); P_PORT=$(free_port)
cat >"$WORK/mirrorcache.toml" <<EOF
[server]
listen = "127.0.0.1:$P_PORT"
admin_token = "soak"
max_fills = 512

[storage]
path = "$WORK/store"
max_size = "4GiB"

[metadata]
url = "$METADATA"

$REDIS_SECTION

[[remote]]
name = "gen"
mirrors = ["http://127.0.0.1:$A_PORT", "http://127.0.0.1:$B_PORT"]
immutable = ["blobs/**"]
revalidate_after = "5s"
first_byte_timeout = "3s"
idle_timeout = "3s"
EOF

echo "soak: $DURATION s, binary $BIN, $PG_NOTE, $REDIS_NOTE, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
started=$(date -u +%FT%TZ)
PROXY_CMD="$BIN serve --config $WORK/mirrorcache.toml" \
PROXY_BASE="http://127.0.0.1:$P_PORT" \
PROXY_LOG="$WORK/proxy.log" \
STORE_TMP="$WORK/store/tmp" \
ADMIN_TOKEN=soak \
ORIGIN_PORTS="$A_PORT,$B_PORT" \
PG_RESTART="$PG_RESTART" REDIS_STOP="$REDIS_STOP" REDIS_START="$REDIS_START" \
RUST_LOG=${RUST_LOG:-info} \
    python3 bench/soak.py >"$WORK/report.json"
cp "$WORK/report.json" "${REPORT:-/tmp/soak-report.json}"

python3 - "$WORK/report.json" "$started" "$PG_NOTE" "$REDIS_NOTE" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"started {sys.argv[2]}, {r['duration_s']:.0f} s, {r['workers']} workers, fan-out {r['fan_out_clients']}; {sys.argv[3]}; {sys.argv[4]}")
print("events:", ", ".join(f"{e['what']} at {e['at']} s ({e['took']} s)" for e in r["events"]))
print()
print("| scenario | requests | served | failed in a fault window | failed outside | wrong bodies |")
print("|---|---:|---:|---:|---:|---:|")
for kind, row in sorted(r["by_kind"].items()):
    print(f"| {kind} | {row['requests']} | {row['served']} | {row['failed_in_window']} | {row['failed']} | {row['wrong']} |")
t = r["totals"]
print(f"| **all** | {t['requests']} | {t['served']} | {t['failed_in_window']} | {t['failed']} | {t['wrong']} |")
print()
print(f"temp files left: {r['temp_files_left']}; proxy restarts (kill -9): {r['restarts']}; origin requests A/B: {r['origin_requests']}")
print()
print("| process (from–to s) | samples | RSS first → last (max) MiB | RSS slope MiB/h | fds first → last (max) | fds slope /h |")
print("|---|---:|---|---:|---|---:|")
for s in r["segments"]:
    print(f"| {s['from_s']}–{s['to_s']} | {s['samples']} | {s['rss_mib_first']} → {s['rss_mib_last']} ({s['rss_mib_max']}) | {s['rss_slope_mib_per_h']} | {s['fds_first']} → {s['fds_last']} ({s['fds_max']}) | {s['fds_slope_per_h']} |")
if r["wrong_bodies"]:
    print("\nwrong bodies:", *r["wrong_bodies"], sep="\n  ")
if r["failures_outside_windows"]:
    print("\nfailures outside fault windows:", *r["failures_outside_windows"], sep="\n  ")
EOF
