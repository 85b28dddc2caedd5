#!/usr/bin/env bash
# bench/start-up.sh — what a server with many remotes costs before and at
# its first misses, on 127.0.0.1 only: REMOTES remotes (`o0` …) in front of
# one nginx origin, a fresh store each round; the milliseconds from the
# start to the first answer of `/-/health`, then for every remote in turn
# FIRSTS cold 1 KiB misses, each on a new connection: the first half with
# no other connection open (a new one goes to the first connection
# thread), the second half with an idle one held open (a new one goes to
# the other thread, on two CPUs), so each thread's first request for the
# remote, which builds its client, is among them; then the server's
# anonymous RSS. ROUNDS rounds,
# each build of MC_BIN (one or more paths, alternating) once a round.
# Prints, per build: the start-up, the sum, median and slowest of the
# first misses (curl's total time), the anonymous RSS; medians with the
# spread.
#
# Usage: bash bench/start-up.sh
#   env: MC_BIN="path [path…]" REMOTES=12 FIRSTS=4 ROUNDS=5 KEEP_TMP=1
# Results are recorded in BENCHMARKS.md ("Start-up and first misses").

set -euo pipefail
# `round` runs in a command substitution: a failure there ends the bench too.
shopt -s inherit_errexit

REMOTES=${REMOTES:-12}
FIRSTS=${FIRSTS:-4}
ROUNDS=${ROUNDS:-5}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
source "$ROOT/bench/lib.sh"
need_tools "apt-get install nginx-light curl" nginx curl python3 awk ss

release_bin
read -r -a BINS <<<"$MC_BIN"
make_work mc-start-up

free_port
O_PORT=$PORT
start_nginx "$WORK/origin" "$O_PORT"
for i in $(seq 1 "$FIRSTS"); do head -c 1024 /dev/urandom >"$WORK/origin/www/$i.bin"; done
wait_up "http://127.0.0.1:$O_PORT/1.bin"

# One round of one build on a free port: prints "startup_ms sum_ms
# median_ms max_ms anon_kib". Runs in a subshell: it stops its server itself.
round() { # bin port
    local dir=$WORK/mc port=$2 pid t0 t1 r i
    rm -rf "$dir"
    mkdir -p "$dir"
    {
        printf '[server]\nlisten = "127.0.0.1:%s"\n\n[storage]\npath = "%s/store"\n\n' "$port" "$dir"
        printf '[metadata]\nurl = "sqlite://%s/meta.db"\n' "$dir"
        for r in $(seq 0 $((REMOTES - 1))); do
            printf '\n[[remote]]\nname = "o%s"\nmirrors = ["http://127.0.0.1:%s"]\nimmutable = ["**"]\n' "$r" "$O_PORT"
        done
    } >"$dir/mirrorcache.toml"
    t0=$(date +%s%N)
    "$1" serve --config "$dir/mirrorcache.toml" 2>"$dir/log" &
    pid=$!
    # shellcheck disable=SC2064 # its PID now: the function's locals are gone at exit
    trap "kill -TERM $pid 2>/dev/null || true" EXIT
    # Not wait_up: its 50 ms steps are coarser than what is measured, and
    # a server that exits is named here at once.
    until curl -sf -o /dev/null "http://127.0.0.1:$port/-/health"; do
        kill -0 "$pid" 2>/dev/null || { echo "the server exited: $(cat "$dir/log")" >&2; exit 1; }
        sleep 0.002
    done
    t1=$(date +%s%N)
    local idle
    for r in $(seq 0 $((REMOTES - 1))); do
        for i in $(seq 1 "$FIRSTS"); do
            ((i == FIRSTS / 2 + 1)) && exec {idle}<>"/dev/tcp/127.0.0.1/$port"
            curl -s -o /dev/null -w '%{http_code} %{time_total}\n' "http://127.0.0.1:$port/o$r/$i.bin"
        done
        exec {idle}>&-
        # The idle connection's end reaches its thread before the next remote.
        sleep 0.05
    done >"$dir/times"
    awk '$1 != 200 { print "not 200: " $0 > "/dev/stderr"; exit 1 }' "$dir/times"
    local anon
    anon=$(awk '/^RssAnon/ { print $2 }' "/proc/$pid/status")
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    python3 - "$dir/times" "$(((t1 - t0) / 1000000))" "$anon" <<'EOF'
import statistics, sys
t = [float(line.split()[1]) * 1000 for line in open(sys.argv[1])]
print(sys.argv[2], "%.1f" % sum(t), "%.2f" % statistics.median(t), "%.2f" % max(t), sys.argv[3])
EOF
}

declare -A RESULTS
for n in $(seq 1 "$ROUNDS"); do
    for b in "${BINS[@]}"; do
        free_port
        RESULTS[$b]+="$(round "$b" "$PORT")"$'\n'
    done
done

echo
echo "## bench/start-up.sh — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $REMOTES remotes, $FIRSTS first misses each, $ROUNDS rounds"
echo
echo "| build | start to health (ms) | first misses: sum (ms) | median (ms) | slowest (ms) | anonymous RSS after (MiB) |"
echo "|---|---:|---:|---:|---:|---:|"
for b in "${BINS[@]}"; do
    col() { printf '%s' "${RESULTS[$b]}" | awk -v c="$1" 'NF { print $c }'; }
    anon_mib=$(col 5 | awk '{ printf "%.1f\n", $1 / 1024 }')
    # shellcheck disable=SC2046
    echo "| \`$b\` | $(spread 0 $(col 1)) | $(spread 1 $(col 2)) | $(spread 2 $(col 3)) | $(spread 2 $(col 4)) | $(spread 1 $anon_mib) |"
done
