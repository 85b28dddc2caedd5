#!/usr/bin/env bash
# bench/cpu-split.sh — whose CPU a hit costs on a machine where wrk shares the
# cores with the server: hits of one object of SIZE (1k, 64k or 1m) from
# mirrorcache and from the tuned nginx proxy_cache (bench/compare.sh's
# anchor), both in front of one nginx origin on 127.0.0.1, wrk -t2 -c64,
# the two servers alternating for ROUNDS rounds. Reported per server: req/s,
# the server's CPU a request (every process and thread of it, utime + stime
# from /proc), wrk's CPU a request (its user and system time, from bash's
# `time`) and their sum. Where the cores are saturated the rate is about
# 2 cores ÷ that sum, so the sum says what a server can still win: with
# wrk's share fixed, a server that took no CPU at all would run at
# (sum ÷ wrk's) times its rate.
#
# Usage: bash bench/cpu-split.sh [SIZE]   (as root: installs nginx and wrk if missing)
#   env: DURATION=6 ROUNDS=3 MC_BIN=path
# Results are recorded in BENCHMARKS.md.

set -euo pipefail

SIZE=${1:-64k}
DURATION=${DURATION:-6}
ROUNDS=${ROUNDS:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
source "$ROOT/bench/lib.sh"
install_nginx_wrk
need_tools "" nginx wrk curl awk ss pgrep
# bash's `time` prints seconds with a point, whatever the locale.
export LC_NUMERIC=C
release_bin
make_work mc-cpu-split

mkdir -p "$WORK/origin/www"
write_object "$SIZE" "$WORK/origin/www/obj.bin"
free_port
O_PORT=$PORT
start_nginx "$WORK/origin" "$O_PORT"
free_port
N_PORT=$PORT
start_tuned_proxy "$WORK/nginx" "$N_PORT" "$O_PORT"
N_PID=${PIDS[-1]}
start_bench_mirrorcache "http://127.0.0.1:$O_PORT" warn
wait_up "http://127.0.0.1:$O_PORT/obj.bin" "http://127.0.0.1:$N_PORT/o/obj.bin"
wait_for_hit "http://127.0.0.1:$M_PORT" "http://127.0.0.1:$M_PORT/o/obj.bin"
until_hit "http://127.0.0.1:$N_PORT/o/obj.bin"

HZ=$(getconf CLK_TCK)
# ticks PID...: each one's CPU so far (utime + stime, in clock ticks), one
# "pid ticks" line each; a process that has ended is left out.
ticks() {
    local pid
    for pid in "$@"; do awk -v p="$pid" '{ print p, $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || true; done
}
# spent BEFORE AFTER: the ticks between two `ticks` readings, summed over
# the processes in both (nginx's cache loader ends a minute after start).
spent() { awk 'NR == FNR { before[$1] = $2; next } $1 in before { n += $2 - before[$1] } END { print n + 0 }' <(echo "$1") <(echo "$2"); }
# server_pids NAME: mirrorcache's process, or nginx's master and workers.
server_pids() { if [[ $1 == mirrorcache ]]; then echo "$M_PID"; else echo "$N_PID $(pgrep -P "$N_PID" | tr '\n' ' ')"; fi; }

declare -A RPS SERVER CLIENT
TIMEFORMAT='%U %S'
for round in $(seq 1 "$ROUNDS"); do
    for server in mirrorcache nginx; do
        if [[ $server == mirrorcache ]]; then url=http://127.0.0.1:$M_PORT/o/obj.bin; else url=http://127.0.0.1:$N_PORT/o/obj.bin; fi
        read -r -a pids <<<"$(server_pids "$server")"
        before=$(ticks "${pids[@]}")
        { time wrk -t2 -c64 -d"${DURATION}s" "$url" >"$WORK/wrk.out" 2>"$WORK/wrk.err"; } 2>"$WORK/time.out" ||
            { echo "wrk failed against $server:" >&2; cat "$WORK/wrk.err" >&2; exit 1; }
        after=$(ticks "${pids[@]}")
        rps=$(awk '/Requests\/sec/ { printf "%.0f", $2 }' "$WORK/wrk.out")
        grep -q 'Non-2xx\|Socket errors' "$WORK/wrk.out" && { echo "$server answered errors:" >&2; cat "$WORK/wrk.out" >&2; exit 1; }
        server_us=$(awk -v t="$(spent "$before" "$after")" -v hz="$HZ" -v r="$rps" -v d="$DURATION" 'BEGIN { printf "%.1f", t / hz * 1e6 / (r * d) }')
        client_us=$(awk -v r="$rps" -v d="$DURATION" '{ printf "%.1f", ($1 + $2) * 1e6 / (r * d) }' "$WORK/time.out")
        RPS[$server]+="$rps " SERVER[$server]+="$server_us " CLIENT[$server]+="$client_us "
        echo "[cpu-split] round $round $server: $rps req/s, the server $server_us µs of CPU a request, wrk $client_us" >&2
    done
done

echo
echo "## bench/cpu-split.sh $SIZE — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), wrk -t2 -c64 -d${DURATION}s, $ROUNDS rounds"
echo
echo "| server | req/s | the server's CPU µs a request | wrk's CPU µs a request | both |"
echo "|---|---:|---:|---:|---:|"
for server in mirrorcache nginx; do
    read -r -a rps <<<"${RPS[$server]}"
    read -r -a own <<<"${SERVER[$server]}"
    read -r -a wrk <<<"${CLIENT[$server]}"
    read -r -a both <<<"$(paste -d' ' <(printf '%s\n' "${own[@]}") <(printf '%s\n' "${wrk[@]}") | awk '{ print $1 + $2 }' | tr '\n' ' ')"
    echo "| $server | $(spread 0 "${rps[@]}") | $(spread 1 "${own[@]}") | $(spread 1 "${wrk[@]}") | $(spread 1 "${both[@]}") |"
done
echo
echo "mirrorcache ÷ nginx, the medians' req/s: $(awk -v a="$(tr ' ' '\n' <<<"${RPS[mirrorcache]}" | grep . | median_lines)" -v b="$(tr ' ' '\n' <<<"${RPS[nginx]}" | grep . | median_lines)" 'BEGIN { printf "%.2f", a / b }')"
