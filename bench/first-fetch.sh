#!/usr/bin/env bash
# bench/first-fetch.sh — the cold fetches of bench/compare.sh that a
# same-run A/B of two mirrorcache builds needs, without its hit rounds: on
# 127.0.0.1 only, an nginx origin, the tuned nginx proxy_cache (access log
# buffered, proxy_cache_lock on: compare.sh's anchor) and one or two
# mirrorcache builds, each with its own store and SQLite.
#
#   big     the first fetch of a 256 MiB object (a cold name each round, the
#           same bytes under every name), MiB/s from curl's speed_download
#   misses  MISSES cold 64 KiB objects one after another on one keep-alive
#           connection (compare.sh section 4), per-request p50 in ms;
#           MISSES=0: none (the first fetch alone, for many quick rounds;
#           on tmpfs, BENCH_TMP=/dev/shm, every round keeps 256 MiB a server)
#
# ROUNDS rounds, the servers' order rotating; medians with the spread, and
# each build's ratios to nginx taken per round.
#
# Usage: MC_BIN=path [MC_BIN_B=path] bash bench/first-fetch.sh
#   env: ROUNDS=3 MISSES=50 BIG_MIB=256 KEEP_TMP=1
# Results are recorded in BENCHMARKS.md.

set -euo pipefail

ROUNDS=${ROUNDS:-3}
MISSES=${MISSES:-50}
BIG_MIB=${BIG_MIB:-256}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
log() { printf '[first-fetch] %s\n' "$*" >&2; }
source "$ROOT/bench/lib.sh"
need_tools "" nginx curl awk
: "${MC_BIN:?MC_BIN=path to a mirrorcache build}"

make_work mc-first

O_DIR=$WORK/origin
mkdir -p "$O_DIR/www/big" "$O_DIR/www/miss"
head -c $((BIG_MIB * 1024 * 1024)) /dev/urandom >"$O_DIR/www/big/seed.bin"
for round in $(seq 1 "$ROUNDS"); do
    for i in $(seq 1 "$MISSES"); do head -c 65536 /dev/urandom >"$O_DIR/www/miss/r$round-$i.bin"; done
done
MEASURES="big"
if ((MISSES > 0)); then MEASURES+=" miss"; fi
free_port
O_PORT=$PORT
start_nginx "$O_DIR" "$O_PORT" 'location /big/ { rewrite ^ /big/seed.bin break; }'

N_DIR=$WORK/nginx
free_port
N_PORT=$PORT
start_tuned_proxy "$N_DIR" "$N_PORT" "$O_PORT"

declare -A BASE
BASE[nginx]=http://127.0.0.1:$N_PORT/o
WHO=(nginx)
for which in a b; do
    bin=$MC_BIN
    [[ $which == b ]] && bin=${MC_BIN_B:-}
    [[ -n "$bin" ]] || continue
    free_port
    start_mirrorcache "$WORK/mc-$which" "$PORT" "$O_PORT" "$WORK/mc-$which.log" "$bin"
    BASE[mc_$which]=http://127.0.0.1:$PORT/o
    WHO+=("mc_$which")
done
urls=("http://127.0.0.1:$O_PORT/big/x" "http://127.0.0.1:$N_PORT/")
for who in "${WHO[@]:1}"; do urls+=("${BASE[$who]%/o}/-/health"); done
wait_up "${urls[@]}"
# Connections warmed (and each proxy's remote seen once) before timing.
if ((MISSES > 0)); then
    for who in "${WHO[@]}"; do curl -s -o /dev/null "${BASE[$who]}/miss/r1-1.bin"; done
fi

declare -A R
for round in $(seq 1 "$ROUNDS"); do
    n=${#WHO[@]}
    for i in $(seq 0 $((n - 1))); do
        who=${WHO[$(((i + round) % n))]}
        bps=$(curl -s -o /dev/null -w '%{speed_download}' "${BASE[$who]}/big/r$round-$who.bin")
        mbs=$(awk -v b="$bps" 'BEGIN { printf "%.0f", b / 1048576 }')
        R[big_$who]+="$mbs "
        p50=-
        if ((MISSES > 0)); then
            args=()
            for m in $(seq 2 "$MISSES"); do args+=(-o /dev/null "${BASE[$who]}/miss/r$round-$m.bin"); done
            p50=$(curl -s -w '%{time_total} %{http_code}\n' "${args[@]}" |
                awk '$2 != 200 { bad++ } { print $1 * 1000 } END { if (bad) exit 1 }' | sort -g |
                awk '{ a[NR] = $1 } END { printf "%.3f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
            R[miss_$who]+="$p50 "
        fi
        log "round $round $who: $BIG_MIB MiB first fetch $mbs MiB/s, 64 KiB miss p50 $p50 ms"
    done
    if ((MISSES > 0)); then sleep 1; fi
done

ratios() { paste -d' ' <(tr ' ' '\n' <<<"$1" | grep .) <(tr ' ' '\n' <<<"$2" | grep .) | awk '{ printf "%.2f\n", $1 / $2 }'; }
{
    echo
    echo "## bench/first-fetch.sh — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $ROUNDS rounds"
    echo
    echo "mc_a = \`$MC_BIN\`${MC_BIN_B:+, mc_b = \`$MC_BIN_B\`}; nginx = tuned proxy_cache. Cells: median (min–max) over the rounds; ratios per round."
    echo
    names=$(printf ' | %s' "${WHO[@]:1}")
    echo "| measure | nginx tuned$names | ÷ nginx tuned (per round) |"
    echo "|---|---:|$(printf -- '---:|%.0s' "${WHO[@]:1}")---|"
    for m in $MEASURES; do
        label="$BIG_MIB MiB first fetch MiB/s" d=0
        [[ $m == miss ]] && label="$((MISSES - 1)) cold 64 KiB misses, p50 ms" d=3
        row="| $label | $(spread $d ${R[${m}_nginx]})"
        rat=""
        for who in "${WHO[@]:1}"; do
            row+=" | $(spread $d ${R[${m}_$who]})"
            rat+="$who $(spread 2 $(ratios "${R[${m}_$who]}" "${R[${m}_nginx]}")); "
        done
        echo "$row | $rat |"
    done
}
