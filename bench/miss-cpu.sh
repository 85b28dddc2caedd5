#!/usr/bin/env bash
# bench/miss-cpu.sh BIN — what one cold miss costs in CPU and context
# switches, beside the tuned nginx proxy_cache (bench/lib.sh's anchor), on
# 127.0.0.1 only: N different cold objects of SIZE bytes fetched one after
# another on one kept-alive connection (one curl) through each server in
# turn, with `perf stat -e task-clock` over the server's processes and every
# thread's context switches read from /proc before and after. Prints, per
# server: the per-request p50, the CPU µs a miss (every thread's, the
# committer's included, counted until the last commit is durable), the
# context switches a miss, and for mirrorcache those per thread and its
# commit batches.
#
# Usage: bash bench/miss-cpu.sh target/release/mirrorcache
#   env: N=1000 SIZE=65536 BENCH_TMP (bench/scratch-fs.sh)
# Results: BENCHMARKS.md ("The cold miss").
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
source bench/lib.sh
need_tools "bench/compare.sh installs nginx" nginx curl perf bc
MC_BIN=$(realpath "$1")
N=${N:-1000}
SIZE=${SIZE:-65536}
make_work mc-misscpu
O_DIR=$WORK/origin
mkdir -p "$O_DIR/www/miss"
for v in nginx mc; do
    for i in $(seq 1 "$N"); do head -c "$SIZE" /dev/urandom >"$O_DIR/www/miss/$v-$i.bin"; done
done
free_port
O_PORT=$PORT
start_nginx "$O_DIR" "$O_PORT" ""
N_DIR=$WORK/nginx
free_port
N_PORT=$PORT
start_tuned_proxy "$N_DIR" "$N_PORT" "$O_PORT"
M_DIR=$WORK/mc
mkdir -p "$M_DIR"
free_port
M_PORT=$PORT
{
    mirrorcache_toml "$M_DIR" "$M_PORT" "http://127.0.0.1:$O_PORT"
    printf '\n[log]\nlevel = "warn"\n'
} >"$M_DIR/mirrorcache.toml"
"$MC_BIN" serve --config "$M_DIR/mirrorcache.toml" 2>"$M_DIR/mirrorcache.log" &
M_PID=$!
PIDS+=("$M_PID")
wait_up "http://127.0.0.1:$M_PORT/-/health"
# The tuned proxy's worker processes (not the origin's).
for _ in $(seq 1 50); do [[ -s $N_DIR/nginx.pid ]] && break; sleep 0.1; done
N_PIDS=$(pgrep -P "$(cat "$N_DIR/nginx.pid")" | paste -sd,)
threads() { # pids -> "tid comm switches" per thread
    local p t
    for p in ${1//,/ }; do
        for t in /proc/"$p"/task/*; do
            echo "$(basename "$t") $(cat "$t/comm") $(awk '/ctxt_switches/ { s += $2 } END { print s }' "$t/status")"
        done
    done | sort
}
measure() { # label base_url pids
    local args=() i
    for i in $(seq 1 "$N"); do args+=(-o /dev/null "$2/miss/$1-$i.bin"); done
    sync
    threads "$3" >"$WORK/cs0"
    perf stat -e task-clock -p "$3" -o "$WORK/perf-$1.txt" -- sleep 1000 &
    local perf_pid=$!
    sleep 0.3
    curl -s -w '%{time_total}\n' "${args[@]}" >"$WORK/t-$1.txt"
    # mirrorcache answers before its commits are durable: the count goes on
    # until the last fill has left (its batch written), at most 10 s.
    if [[ $1 == mc ]]; then
        for _ in $(seq 1 200); do
            curl -s "http://127.0.0.1:$M_PORT/-/status" | grep -q '"fills_in_progress":0' && break
            sleep 0.05
        done
    fi
    pkill -P "$perf_pid" sleep || true
    wait "$perf_pid" || true
    threads "$3" >"$WORK/cs1"
    local ms p50 cs
    ms=$(awk '/task-clock/ { gsub(",", "", $1); print $1 }' "$WORK/perf-$1.txt")
    p50=$(awk '{ print $1 * 1000 }' "$WORK/t-$1.txt" | sort -g | awk '{ a[NR] = $1 } END { printf "%.3f", a[int((NR + 1) / 2)] }')
    # Threads started during the run (the blocking pool's) count from 0.
    join -a2 -e0 -o 2.1,2.2,1.3,2.3 "$WORK/cs0" "$WORK/cs1" >"$WORK/cs"
    cs=$(awk -v n="$N" '{ s += $4 - $3 } END { printf "%.1f", s / n }' "$WORK/cs")
    echo "$1: p50 $p50 ms, $(echo "scale=0; $ms * 1000 / $N" | bc) µs of CPU a miss, $cs context switches a miss"
    if [[ $1 == mc ]]; then
        awk -v n="$N" '{ d[$2] += $4 - $3; t[$2]++ } END { for (k in d) printf "  %s (%d threads): %.2f a miss\n", k, t[k], d[k] / n }' "$WORK/cs"
        curl -s "http://127.0.0.1:$M_PORT/-/metrics" | awk '/^mirrorcache_commit_batches_total/ { b = $2 } /^mirrorcache_commits_total/ { c = $2 } END { printf "  commit batches: %d for %d commits\n", b, c }'
    fi
}
echo "bench/miss-cpu.sh $(date -u +%FT%RZ), load $(cut -d' ' -f1-3 /proc/loadavg), N=$N SIZE=$SIZE"
measure nginx "http://127.0.0.1:$N_PORT/o" "$N_PIDS"
measure mc "http://127.0.0.1:$M_PORT/o" "$M_PID"
