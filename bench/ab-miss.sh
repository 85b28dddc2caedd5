#!/usr/bin/env bash
# bench/ab-miss.sh — A/B of mirrorcache builds (or settings) on the miss path:
# several mirrorcache processes in front of one nginx origin on 127.0.0.1
# (bench/lib.sh), then ROUNDS rounds, the order rotated each round, of
#   - misses: MISSES different cold 64 KiB objects one after another on one
#     kept-alive connection (one curl): per-request p50;
#   - fan-out: FANOUT concurrent clients for one cold 16 MiB object sent by
#     the origin at FILL_RATE: per-request p50 of the total time, and the
#     origin requests it took (from the origin's access log).
# Each round uses new objects, so every request is a miss. The figure to
# read is each variant over the first one in the same round (median over
# rounds); peak RSS (VmHWM) of each process is printed at the end.
#
# Usage: bash bench/ab-miss.sh 'base=target/release/mirrorcache' \
#            'candidate=/path/to/mirrorcache VAR=value ...'
#   env: ROUNDS=3 MISSES=50 FANOUT=200 FILL_RATE=6m
# Results: BENCHMARKS.md.

set -euo pipefail

ROUNDS=${ROUNDS:-3}
MISSES=${MISSES:-50}
FANOUT=${FANOUT:-200}
FILL_RATE=${FILL_RATE:-6m}
(($# >= 2)) || { echo "usage: $0 'label=binary [VAR=value...]' 'label=binary ...' ..." >&2; exit 2; }
source "$(dirname "$0")/lib.sh"
need_tools "bench/compare.sh installs them" nginx curl

WORK=$(mktemp -d /tmp/mc-abmiss.XXXXXX)
cleanup() {
    stop_started
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/www/miss" "$WORK/www/slow"
n=${#@}
for r in $(seq 1 "$ROUNDS"); do
    for v in $(seq 1 "$n"); do
        for i in $(seq 1 "$MISSES"); do
            head -c $((64 * 1024)) /dev/urandom >"$WORK/www/miss/$r-$v-$i.bin"
        done
        head -c $((16 * 1024 * 1024)) /dev/urandom >"$WORK/www/slow/$r-$v.bin"
    done
done
free_port
O_PORT=$PORT
# The origin logs only /slow/ requests: the fan-out's upstream count.
start_nginx "$WORK" "$O_PORT" "location /slow/ { limit_rate $FILL_RATE; access_log $WORK/slow.log; }"

declare -A URL MC_PIDS
start_variants "$WORK" "$O_PORT" "$@"
for label in "${LABELS[@]}"; do
    wait_up "${URL[$label]%/o}/-/health"
done

p50() { sort -g | awk '{ a[NR] = $1 } END { printf "%.3f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
median() { tr ' ' '\n' | grep . | p50; }

declare -A MISS FAN REQS
for round in $(seq 1 "$ROUNDS"); do
    for i in $(seq 0 $((n - 1))); do
        v=$(((i + round) % n))
        label=${LABELS[$v]}
        args=()
        for k in $(seq 1 "$MISSES"); do args+=(-o /dev/null "${URL[$label]}/miss/$round-$((v + 1))-$k.bin"); done
        miss=$(curl -s -w '%{time_total}\n' "${args[@]}" | awk '{ print $1 * 1000 }' | p50)
        path=/slow/$round-$((v + 1)).bin
        args=()
        for k in $(seq 1 "$FANOUT"); do args+=(-o /dev/null "${URL[$label]}$path"); done
        fan=$(curl -s --no-progress-meter -Z --parallel-immediate --parallel-max "$FANOUT" \
            -w '%{time_total}\n' "${args[@]}" | p50)
        sleep 0.3
        reqs=$(grep -c "GET $path " "$WORK/slow.log" || true)
        MISS[$label]+="$miss "
        FAN[$label]+="$fan "
        REQS[$label]+="$reqs "
        echo "round $round $label: miss p50 $miss ms, fan-out p50 $fan s, origin requests $reqs" >&2
    done
done

ratio_median() { # list-a list-b
    local -a a b
    read -r -a a <<<"$1"
    read -r -a b <<<"$2"
    for i in "${!a[@]}"; do awk -v x="${a[$i]}" -v y="${b[$i]}" 'BEGIN { printf "%.3f\n", x / y }'; done | p50
}
echo "| variant | miss p50 ms (median; rounds) | ÷ ${LABELS[0]} | fan-out p50 s (median; rounds) | ÷ ${LABELS[0]} | fan-out origin requests | peak RSS MiB |"
echo "|---|---:|---:|---:|---:|---|---:|"
for label in "${LABELS[@]}"; do
    rss=$(awk '/^VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/${MC_PIDS[$label]}/status")
    echo "| $label | $(median <<<"${MISS[$label]}") (${MISS[$label]% }) | $(ratio_median "${MISS[$label]}" "${MISS[${LABELS[0]}]}") | $(median <<<"${FAN[$label]}") (${FAN[$label]% }) | $(ratio_median "${FAN[$label]}" "${FAN[${LABELS[0]}]}") | ${REQS[$label]% } | $rss |"
done
