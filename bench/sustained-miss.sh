#!/usr/bin/env bash
# bench/sustained-miss.sh — sustained cold misses: keep-alive clients that
# ask for a new cold 1 KiB artifact with every request (a CI fleet
# installing fresh lockfiles), against mirrorcache and the tuned nginx
# proxy_cache (the anchor of bench/compare.sh: proxy_cache_lock on, access
# log buffered), on 127.0.0.1 only.
#
# The origin is nginx. Two kinds of keys:
#   distinct  /distinct/<key>: a 1 KiB file with `sub_filter` putting the
#             request URI into it, so every key has its own bytes (its own
#             digest: one blob, one fsync per key)
#   same      /same/<key>: one 1 KiB file under every name (one digest:
#             the commits of one blob)
# Each run is wrk -t2 with 8 or 32 connections for DURATION seconds and a Lua
# script that makes every request a new key (a per-thread prefix and a
# counter). Reported per server: 2xx answers per second, the share of
# non-2xx answers and socket errors, and for mirrorcache the rows committed
# once the run settled, per second of the run, and its CPU time (every
# thread's, from /proc, until the run settled) a request. ROUNDS rounds, the servers
# alternating; medians with the spread, and the ratios of the medians.
# After each run, the seconds a `sync` takes: what the run left for the
# disk to write (the tuned nginx syncs nothing; mirrorcache syncs each
# commit batch), and the ratio with each server's answers counted over its
# run plus that `sync`.
#
# Usage: bash bench/sustained-miss.sh   (as root: installs nginx and wrk if missing)
#   env: DURATION=7 ROUNDS=3 WARMUP=2 (untimed seconds per server first;
#        0: none) MC_BIN=path KEEP_TMP=1
# Results are recorded in BENCHMARKS.md.

set -euo pipefail

DURATION=${DURATION:-7}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-2}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
log() { printf '[sustained-miss] %s\n' "$*" >&2; }

source "$ROOT/bench/lib.sh"
install_nginx_wrk
need_tools "" nginx wrk curl python3 awk ss

release_bin

make_work mc-sustained

# --- origin: nginx, every key a 1 KiB body --------------------------------------
O_DIR=$WORK/origin
start_keyed_origin "$O_DIR"
ORIGIN=http://127.0.0.1:$O_PORT

# --- nginx proxy_cache, tuned as in bench/compare.sh ---------------------------
N_DIR=$WORK/nginx
free_port
N_PORT=$PORT
start_tuned_proxy "$N_DIR" "$N_PORT" "$O_PORT"
NGINX=http://127.0.0.1:$N_PORT/o

# --- mirrorcache -------------------------------------------------------------------
start_bench_mirrorcache "$ORIGIN" warn
MC=http://127.0.0.1:$M_PORT/o

wait_up "$ORIGIN/same/x" "http://127.0.0.1:$N_PORT/" "http://127.0.0.1:$M_PORT/-/health"
a=$(curl -s "$ORIGIN/distinct/a" | sha256sum)
b=$(curl -s "$ORIGIN/distinct/b" | sha256sum)
[[ $a != "$b" ]] || { log "the origin's distinct keys have the same bytes"; exit 1; }


# One run: prints "ok_per_s errors_share total".
run() { # base_url kind connections round
    local dir=$WORK/lua-$1-$2-$3-$4
    local script=$WORK/cold-$RANDOM.lua
    cold_key_lua "$script" "$(echo "$1" | sed 's|http://[^/]*||')/$2" "$4$RANDOM"
    local host
    host=$(echo "$1" | sed -E 's|(http://[^/]*).*|\1|')
    wrk -t2 -c"$3" -d"${DURATION}s" -s "$script" "$host" | awk -v d="$DURATION" '
        /requests in/ { total = $1 }
        /Non-2xx/ { bad += $NF }
        /Socket errors/ { gsub(/,/, ""); broken += $4 + $6 + $8; late += $10 }
        END {
            # A connect, read or write error is no answer (read errors may
            # outnumber the answers): the share is of answers and those
            # together. A timeout is an answer later than wrk waits (or
            # none): an error, not another try.
            tries = total + broken
            share = tries > 0 ? (bad + broken + late) / tries : 0
            printf "%.0f %.4f %d\n", (total - bad) / d, (share > 1 ? 1 : share), total }'
}
# cpu_ticks: mirrorcache's CPU time so far, every thread's (user + system,
# in clock ticks).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$M_PID/stat"; }
settle() {
    local i
    for i in $(seq 1 200); do
        curl -s "http://127.0.0.1:$M_PORT/-/status" | grep -q '"fills_in_progress":0' && return
        sleep 0.05
    done
}

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; print m }'; }

# Each server first serves WARMUP seconds of distinct cold keys at 32
# clients, untimed: a daemon pays once for its worker threads, its
# upstream connections and its database's page cache, and a 5 s round
# should not measure that (mirrorcache made 6.9-7.0k misses/s in its first
# 5 s and 8.7-8.8k after 2 s of warm-up: BENCHMARKS.md, "Sustained distinct misses").
if ((WARMUP > 0)); then
    for who in mc nginx; do
        url=$MC
        [[ $who == nginx ]] && url=$NGINX
        DURATION=$WARMUP run "$url" distinct 32 warm >/dev/null
    done
    settle
fi

declare -A R
for kind in distinct same; do
    for conns in 8 32; do
        for round in $(seq 1 "$ROUNDS"); do
            order="mc nginx"
            ((round % 2 == 0)) && order="nginx mc"
            for who in $order; do
                # Each run starts with nothing dirty in the page cache: the
                # other server's unsynced writes (nginx syncs nothing) would
                # otherwise be written back during this one (mirrorcache's
                # syncfs among it), charging one server for the other.
                sync
                if [[ $who == mc ]]; then
                    settle
                    before=$(rows_now)
                    cpu=$(cpu_ticks)
                    read -r ok err total < <(run "$MC" "$kind" "$conns" "$round")
                    settle
                    cpu=$(( $(cpu_ticks) - cpu ))
                    R[${kind}_${conns}_mc_cpu]+="$(awk -v t="$cpu" -v hz="$(getconf CLK_TCK)" -v n="$total" 'BEGIN { printf "%.0f", (n > 0 ? t / hz * 1e6 / n : 0) }') "
                    committed=$(( $(rows_now) - before ))
                    R[${kind}_${conns}_mc_committed]+="$(awk -v c="$committed" -v d="$DURATION" 'BEGIN { printf "%.0f", c / d }') "
                else
                    read -r ok err total < <(run "$NGINX" "$kind" "$conns" "$round")
                fi
                # What the run left for the disk: nginx syncs nothing, so its
                # files are written back after its run; mirrorcache's commits
                # synced theirs within it. The seconds of a `sync` right after
                # the run (mirrorcache's once its last commit is done).
                t0=$(date +%s.%N)
                sync
                left=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
                R[${kind}_${conns}_${who}_sync]+="$left "
                log "$kind c$conns round $round $who: $ok 2xx/s, error share $err ($total requests), sync after ${left}s"
                R[${kind}_${conns}_${who}_ok]+="$ok "
                R[${kind}_${conns}_${who}_err]+="$err "
            done
        done
    done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }
# counted KIND CONNS WHO: the median 2xx answers over the run plus the
# median `sync` after it, a second.
counted() {
    local -a ok left
    read -r -a ok <<<"${R[$1_$2_$3_ok]}"
    read -r -a left <<<"${R[$1_$2_$3_sync]}"
    awk -v o="$(median "${ok[@]}")" -v s="$(median "${left[@]}")" -v d="$DURATION" 'BEGIN { printf "%.1f", o * d / (d + s) }'
}
written_back=""
{
    echo
    echo "## bench/sustained-miss.sh — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), wrk -t2 -d${DURATION}s, $ROUNDS rounds, ${WARMUP}s warm-up"
    echo
    echo "mirrorcache: \`${MC_BIN#"$ROOT"/}\`; nginx $(nginx -v 2>&1 | sed 's/.*nginx\///') proxy_cache, access log buffered (the tuned anchor). Cells: median (min–max) over the rounds."
    echo
    echo "| keys | clients | nginx tuned 2xx/s | nginx error share | mirrorcache 2xx/s | mirrorcache error share | mirrorcache rows committed/s | mirrorcache CPU a request (µs) | mirrorcache ÷ nginx |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    for kind in distinct same; do
        for conns in 8 32; do
            read -r -a no <<<"${R[${kind}_${conns}_nginx_ok]}"
            read -r -a ne <<<"${R[${kind}_${conns}_nginx_err]}"
            read -r -a mo <<<"${R[${kind}_${conns}_mc_ok]}"
            read -r -a me <<<"${R[${kind}_${conns}_mc_err]}"
            read -r -a mc <<<"${R[${kind}_${conns}_mc_committed]}"
            read -r -a mu <<<"${R[${kind}_${conns}_mc_cpu]}"
            read -r -a ns <<<"${R[${kind}_${conns}_nginx_sync]}"
            read -r -a ms <<<"${R[${kind}_${conns}_mc_sync]}"
            echo "| $kind bytes | $conns | $(spread 0 "${no[@]}") | $(spread 3 "${ne[@]}") | $(spread 0 "${mo[@]}") | $(spread 3 "${me[@]}") | $(spread 0 "${mc[@]}") | $(spread 0 "${mu[@]}") | $(ratio "$(median "${mo[@]}")" "$(median "${no[@]}")") |"
            # The write-back table's row, printed after this table.
            written_back+="| $kind bytes | $conns | $(spread 3 "${ns[@]}") | $(spread 3 "${ms[@]}") | $(ratio "$(counted "$kind" "$conns" mc)" "$(counted "$kind" "$conns" nginx)") |"$'\n'
        done
    done
    echo
    echo "What each run left for the disk: the seconds of a \`sync\` right after it, and the ratio with each server's 2xx answers counted over its run plus that \`sync\` (the tuned nginx syncs nothing, so its rate above leaves its files' write-back out of its seconds)."
    echo
    echo "| keys | clients | nginx tuned: sync after (s) | mirrorcache: sync after (s) | mirrorcache ÷ nginx, write-back counted |"
    echo "|---|---:|---:|---:|---:|"
    printf '%s' "$written_back"
    for conns in 8 32; do
        read -r -a d <<<"${R[distinct_${conns}_mc_ok]}"
        read -r -a s <<<"${R[same_${conns}_mc_ok]}"
        echo
        echo "mirrorcache, $conns clients: same bytes ÷ distinct bytes = $(ratio "$(median "${s[@]}")" "$(median "${d[@]}")")"
    done
    echo
    echo "mirrorcache peak RSS: $(awk '/^VmHWM/ { printf "%.1f MiB", $2 / 1024 }' "/proc/$M_PID/status"), with $(rows_now) rows and $(rows_now blob_places) packed blobs"
}
