#!/usr/bin/env bash
# bench/profile-hit.sh — where mirrorcache's hit path spends its time: an nginx
# origin and target/release/mirrorcache on 127.0.0.1 (as in bench/compare.sh),
# one object warmed, then wrk loads it while we record
#   - `perf stat` (task-clock, context switches) of the proxy per request,
#   - `strace -c -f` syscall counts per request (a separate, shorter run:
#     strace slows the process a lot, only the counts are meaningful),
#   - `perf record` (cpu-clock sampling; flat profile by symbol and by DSO).
#
# Usage: bash bench/profile-hit.sh [SIZE]   (SIZE: 1k, 64k or 1m; default 1k)
#   env: DURATION=8  OUT=dir (default: a temp dir, kept and printed)
#        MC_BIN=path (another build)  MC_ENV="VAR=value ..." (its environment)
# Findings are summarised in BENCHMARKS.md ("Hit-path profile").
# The origin/proxy set-up is bench/lib.sh (shared with bench/ab-hit.sh).

set -euo pipefail

SIZE=${1:-1k}
DURATION=${DURATION:-8}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z "${MC_BIN:-}" ]]; then
    MC_BIN="$ROOT/target/release/mirrorcache"
    [[ -x "$MC_BIN" ]] || (cd "$ROOT" && cargo build --release --quiet)
fi
# Extra environment for mirrorcache only, e.g. MC_ENV="RUST_LOG=warn".
read -r -a MC_ENV_ARGS <<<"${MC_ENV:-}"
source "$ROOT/bench/lib.sh"
need_tools "" nginx wrk perf strace

OUT=${OUT:-$(mktemp -d /tmp/mc-profile.XXXXXX)}
mkdir -p "$OUT/www"
write_object "$SIZE" "$OUT/www/obj.bin"

cleanup() {
    stop_started
    echo "profile output kept in $OUT" >&2
}
trap cleanup EXIT

free_port
O_PORT=$PORT
free_port
M_PORT=$PORT
start_nginx "$OUT" "$O_PORT"
start_mirrorcache "$OUT" "$M_PORT" "$O_PORT" "$OUT/mirrorcache.log" "$MC_BIN" "${MC_ENV_ARGS[@]}"
M_PID=$MC_PID

URL=http://127.0.0.1:$M_PORT/o/obj.bin
wait_for_hit "http://127.0.0.1:$M_PORT" "$URL" ||
    echo "warning: no HIT for $URL yet; its log: $OUT/mirrorcache.log" >&2

requests() { awk '/requests in/ { print $1 }' "$1"; }

# 1. perf stat: CPU time and context switches per request.
perf stat -e task-clock,context-switches,cpu-migrations -p "$M_PID" -o "$OUT/perf-stat.txt" &
STAT=$!
wrk -t2 -c64 -d"${DURATION}s" --latency "$URL" >"$OUT/wrk-stat.txt"
kill -INT "$STAT"
wait "$STAT" || true
n=$(requests "$OUT/wrk-stat.txt")
awk -v n="$n" '/task-clock/ { gsub(/,/, "", $1); printf "cpu per request: %.1f us (%d requests)\n", $1 * 1000 / n, n }
     /context-switches/ { gsub(/,/, "", $1); printf "context switches per request: %.2f\n", $1 / n }' \
    "$OUT/perf-stat.txt" | tee "$OUT/summary.txt"

# 2. strace: syscalls per request (counts only).
strace -c -f -q -o "$OUT/strace.txt" -p "$M_PID" &
TRACE=$!
sleep 0.5
wrk -t1 -c8 -d3s "$URL" >"$OUT/wrk-strace.txt"
kill -INT "$TRACE"
wait "$TRACE" || true
n=$(requests "$OUT/wrk-strace.txt")
echo "syscalls per request under strace ($n requests):" | tee -a "$OUT/summary.txt"
awk -v n="$n" '$1 ~ /^[0-9.]+$/ && NF >= 5 { printf "  %-16s %6.2f\n", $NF, $4 / n }' "$OUT/strace.txt" |
    sort -k2 -nr | sed -n '1,15p' | tee -a "$OUT/summary.txt"

# 3. perf record: flat profile. (`sed -n` rather than `head`: it reads its
# input to the end, so under pipefail no writer before it dies of SIGPIPE.)
perf record -q -e cpu-clock -F 1999 -p "$M_PID" -o "$OUT/perf.data" &
REC=$!
wrk -t2 -c64 -d"${DURATION}s" "$URL" >"$OUT/wrk-record.txt"
kill -INT "$REC"
wait "$REC" || true
perf report -i "$OUT/perf.data" --no-children --sort dso --stdio 2>/dev/null |
    grep -v '^#' | grep . | sed -n '1,12p' >"$OUT/by-dso.txt"
perf report -i "$OUT/perf.data" --no-children --sort sym --stdio 2>/dev/null |
    grep -v '^#' | grep . | sed -n '1,60p' >"$OUT/by-symbol.txt"
echo "by DSO:" | tee -a "$OUT/summary.txt"
tee -a "$OUT/summary.txt" <"$OUT/by-dso.txt"
echo "top symbols: $OUT/by-symbol.txt"
