#!/usr/bin/env bash
# bench/ab-hit.sh — A/B of mirrorcache builds (or settings) on the hit path:
# several mirrorcache processes in front of one nginx origin on 127.0.0.1, all
# warmed, then wrk (2 threads, 64 connections) against each in turn, ROUNDS
# interleaved rounds with the order rotated, for 1 KiB, 64 KiB and 1 MiB. The
# figure to read is each variant's req/s over the first one's in the same
# round (median over rounds): background load moves both alike. Beside it,
# each variant's CPU time (user + system, from /proc) per request served.
#
# Usage: bash bench/ab-hit.sh 'base=target/release/mirrorcache' \
#            'candidate=/path/to/mirrorcache VAR=value ...'
#   env: DURATION=4 ROUNDS=3 SIZES="1k 64k 1m" (also 256m: one curl stream,
#        its MiB/s in the req/s column)
# Used for the "what would close the gap" figures in BENCHMARKS.md.
# The origin/proxy set-up is bench/lib.sh (shared with bench/profile-hit.sh).

set -euo pipefail

DURATION=${DURATION:-4}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-1k 64k 1m}
(($# >= 2)) || { echo "usage: $0 'label=binary [VAR=value...]' 'label=binary ...' ..." >&2; exit 2; }
source "$(dirname "$0")/lib.sh"
need_tools "bench/compare.sh installs them" nginx wrk curl

WORK=$(mktemp -d /tmp/mc-ab.XXXXXX)
cleanup() {
    stop_started
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/www"
head -c 1024 /dev/urandom >"$WORK/www/1k.bin"
head -c $((64 * 1024)) /dev/urandom >"$WORK/www/64k.bin"
head -c $((1024 * 1024)) /dev/urandom >"$WORK/www/1m.bin"
# 256m: one client, one stream (curl), MiB/s instead of req/s.
if [[ " $SIZES " == *" 256m "* ]]; then head -c $((256 * 1024 * 1024)) /dev/urandom >"$WORK/www/256m.bin"; fi
free_port
O_PORT=$PORT
start_nginx "$WORK" "$O_PORT"

declare -A URL MC_PIDS
start_variants "$WORK" "$O_PORT" "$@"

for label in "${LABELS[@]}"; do
    for size in $SIZES; do
        wait_for_hit "${URL[$label]%/o}" "${URL[$label]}/$size.bin" || {
            echo "$label never answered a HIT for $size.bin; its log: $WORK/mc-$label/log" >&2
            cat "$WORK/mc-$label/log" >&2
            exit 1
        }
    done
done


# cpu_ticks PID: the process's user + system time so far, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))


echo "| size | variant | req/s (median) | p99 ms (median) | req/s ÷ ${LABELS[0]} (median of rounds) | CPU µs a request (median) |"
echo "|---|---|---:|---:|---:|---:|"
n=${#LABELS[@]}
for size in $SIZES; do
    declare -A RPS=() P99=() CPU=()
    for round in $(seq 1 "$ROUNDS"); do
        for i in $(seq 0 $((n - 1))); do
            label=${LABELS[$(((i + round) % n))]}
            before=$(cpu_ticks "${MC_PIDS[$label]}")
            if [[ $size == 256m ]]; then
                rps=$(curl -s -o /dev/null -w '%{speed_download}' "${URL[$label]}/$size.bin" |
                    awk '{ printf "%.0f", $1 / 1048576 }')
                p99=0 bad=0
            else
                read -r rps p99 bad < <(wrk_rps_p99 "${URL[$label]}/$size.bin")
            fi
            ((bad == 0)) || echo "warning: non-2xx answers from $label" >&2
            RPS[$label,$round]=$rps
            P99[$label,$round]=$p99
            # One curl stream (256m) has no requests a second to divide by.
            if [[ $size == 256m ]]; then
                CPU[$label,$round]=0
            else
                CPU[$label,$round]=$(awk -v t="$(($(cpu_ticks "${MC_PIDS[$label]}") - before))" \
                    -v us="$TICK_US" -v r="$rps" -v d="$DURATION" 'BEGIN { printf "%.1f", (r > 0 ? t * us / (r * d) : 0) }')
            fi
            echo "$size $label round $round: $rps req/s, p99 $p99 ms, ${CPU[$label,$round]} µs CPU a request" >&2
        done
    done
    for label in "${LABELS[@]}"; do
        rps=$(for r in $(seq 1 "$ROUNDS"); do echo "${RPS[$label,$r]}"; done | median_lines)
        p99=$(for r in $(seq 1 "$ROUNDS"); do echo "${P99[$label,$r]}"; done | median_lines)
        cpu=$(for r in $(seq 1 "$ROUNDS"); do echo "${CPU[$label,$r]}"; done | median_lines)
        ratio=$(for r in $(seq 1 "$ROUNDS"); do
            awk -v a="${RPS[$label,$r]}" -v b="${RPS[${LABELS[0]},$r]}" 'BEGIN { printf "%.6f\n", a / b }'
        done | median_lines)
        [[ $size == 256m ]] && cpu=-
        echo "| $size | $label | $rps | $p99 | $(awk -v r="$ratio" 'BEGIN { printf "%.2f", r }') | $cpu |"
    done
done
