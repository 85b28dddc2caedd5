#!/usr/bin/env bash
# bench/miss-syscalls.sh BIN — the system calls and context switches of a
# sustained run of distinct cold 1 KiB misses, a miss: the keyed origin of
# bench/sustained-miss.sh (every key its own bytes), CLIENTS keep-alive wrk
# connections asking for a new key each request, and `perf stat -p` on the
# server over the run (the threads it has when the run starts: a blocking
# thread started during the run is not counted; the warm-up before it
# starts most of them). Counts are divided by the rows the run committed.
# Only 127.0.0.1.
#
# Usage: bash bench/miss-syscalls.sh target/release/mirrorcache
#   env: CLIENTS=8 DURATION=6 BENCH_TMP (bench/scratch-fs.sh)
# Needs perf (Debian `linux-perf`), nginx, wrk. Results: BENCHMARKS.md
# ("Wake-ups between threads").
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
source bench/lib.sh
need_tools "apt-get install linux-perf nginx-light wrk" perf nginx wrk curl python3
MC_BIN=$(realpath "$1")
CLIENTS=${CLIENTS:-8}
DURATION=${DURATION:-6}
make_work mc-syscalls
start_keyed_origin "$WORK/origin"
start_bench_mirrorcache "http://127.0.0.1:$O_PORT" warn
wait_up "http://127.0.0.1:$M_PORT/-/health" || { echo "its log: $M_DIR/mirrorcache.log" >&2; exit 1; }

# Two seconds untimed first: worker threads, upstream connections, pages.
cold_key_lua "$WORK/warm.lua" /o/distinct "warm$RANDOM"
wrk -t2 -c32 -d2s -s "$WORK/warm.lua" "http://127.0.0.1:$M_PORT" >/dev/null
sleep 1
cold_key_lua "$WORK/run.lua" /o/distinct "run$RANDOM"
before=$(rows_now)
EVENTS=context-switches,raw_syscalls:sys_enter
for call in write read epoll_wait futex recvfrom writev pwrite64 newfstatat statx fdatasync fsync; do
    EVENTS+=,syscalls:sys_enter_$call
done
perf stat -p "$M_PID" -e "$EVENTS" -o "$WORK/perf.txt" -- sleep $((DURATION + 1)) &
PERF=$!
rate=$(wrk -t2 -c"$CLIENTS" -d"${DURATION}s" -s "$WORK/run.lua" "http://127.0.0.1:$M_PORT" | awk '/Requests\/sec/ { print $2 }')
wait "$PERF"
sleep 1
misses=$(($(rows_now) - before))
((misses > 0)) || { echo "no miss was committed: $M_DIR/mirrorcache.log" >&2; exit 1; }
echo "## bench/miss-syscalls.sh — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "\`$1\`, $CLIENTS clients, ${DURATION} s: $rate requests/s, $misses misses committed."
echo
echo "| event | count | a miss |"
echo "|---|---:|---:|"
awk -v n="$misses" '/^ *[0-9,]+ / { gsub(",", "", $1); printf "| %s | %d | %.2f |\n", $2, $1, $1 / n }' "$WORK/perf.txt"
