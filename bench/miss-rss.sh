#!/usr/bin/env bash
# bench/miss-rss.sh — peak RSS after a fixed number of cold misses, so two
# builds are compared over the same rows (bench/sustained-miss.sh's peak
# follows how many rows its timed runs made, so a faster build makes more).
#
# The origin is nginx, as in bench/sustained-miss.sh: /distinct/<key> gives
# every key its own 1 KiB bytes (`sub_filter`), /same/<key> one 1 KiB file
# under every name. wrk -t2 -c32 asks ROWS/2 new distinct keys, then ROWS/2
# new same-bytes keys (a Lua script stops each thread after its share),
# against one mirrorcache; once the commits settled, its VmHWM, VmRSS and
# anonymous RSS, its CPU time a miss (every thread's, from /proc) and the
# rows and packed blobs its database holds.
#
# Usage: bash bench/miss-rss.sh   (as root: installs nginx and wrk if missing)
#   env: ROWS=1050000 DURATION=100 (seconds wrk may take for each half;
#        a half that did not finish is reported) MC_BIN=path KEEP_TMP=1
#        MC_ENV="VAR=value ..." (mirrorcache's environment)
# Results are recorded in BENCHMARKS.md.

set -euo pipefail

ROWS=${ROWS:-1050000}
DURATION=${DURATION:-100}
read -r -a MC_ENV_ARGS <<<"${MC_ENV:-}"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
log() { printf '[miss-rss] %s\n' "$*" >&2; }

source "$ROOT/bench/lib.sh"
install_nginx_wrk
need_tools "" nginx wrk curl python3 awk

release_bin
make_work mc-miss-rss

start_keyed_origin "$WORK/origin"

start_bench_mirrorcache "http://127.0.0.1:$O_PORT" warn
wait_up "http://127.0.0.1:$M_PORT/-/health"

made=0
for kind in distinct same; do
    # Each of wrk's 2 threads stops after its quarter of ROWS.
    cat >"$WORK/$kind.lua" <<LUA
local counter = 0
local threads = 0
function setup(thread) threads = threads + 1; thread:set("tid", threads) end
function init(args)
    prefix = string.format("/o/$kind/t%d-%d-", tid, math.random(1, 1000000000))
    answered = 0
end
request = function() counter = counter + 1; return wrk.format("GET", prefix .. counter) end
response = function() answered = answered + 1; if answered >= $((ROWS / 4)) then wrk.thread:stop() end end
LUA
    n=$(wrk -t2 -c32 -d"${DURATION}s" -s "$WORK/$kind.lua" "http://127.0.0.1:$M_PORT" | awk '/requests in/ { print $1 }')
    log "$kind: $n requests"
    made=$((made + n))
done
for _ in $(seq 1 200); do
    curl -s "http://127.0.0.1:$M_PORT/-/status" | grep -q '"fills_in_progress":0' && break
    sleep 0.05
done
sleep 1
read -r rows places < <(python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute('SELECT COUNT(*) FROM entries').fetchone()[0], c.execute('SELECT COUNT(*) FROM blob_places').fetchone()[0])" "$M_DIR/meta.db")
[[ $rows -ge $((ROWS * 99 / 100)) ]] || log "only $rows of $ROWS rows made in ${DURATION}s a half: raise DURATION"
ticks=$(awk '{ print $14 + $15 }' "/proc/$M_PID/stat")
kib() { awk -v k="$1" '$1 == k":" { print $2 }' "/proc/$M_PID/status"; }
echo
echo "| build | rows | packed blobs | peak RSS (MiB) | RSS now (MiB) | anonymous (MiB) | CPU a miss (µs) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
awk -v b="$(basename "$MC_BIN")" -v r="$rows" -v p="$places" -v hwm="$(kib VmHWM)" -v rss="$(kib VmRSS)" \
    -v anon="$(kib RssAnon)" -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v m="$made" \
    'BEGIN { printf "| %s | %d | %d | %.1f | %.1f | %.1f | %.0f |\n", b, r, p, hwm / 1024, rss / 1024, anon / 1024, t / hz * 1e6 / m }'
