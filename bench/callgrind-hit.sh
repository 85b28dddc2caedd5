#!/usr/bin/env bash
# bench/callgrind-hit.sh — instructions per hit, repeatable on a loaded
# machine: target/release/mirrorcache (or MC_BIN) runs under valgrind's
# callgrind in front of an nginx origin on 127.0.0.1 (bench/lib.sh); SIZE is
# warmed, counters are zeroed, then N requests go one after another on one
# kept-alive connection (one curl; CONC below), and the counters are
# dumped. Prints the instructions per request and the top functions
# (inclusive and self).
# MISS=1: every request is a new cold object of SIZE instead (a miss, the
# fill and its commit), and the counters are dumped once the commits are
# done. Under valgrind sha256 runs without the CPU's SHA instructions, so a
# miss's hashing counts several times what it costs on the machine.
# CONC=8: the requests from 8 clients at once (with MISS=1, the group
# commit's batches then hold several rows, as under load; their sizes
# follow the timing, so the count moves more between runs).
#
# Usage: bash bench/callgrind-hit.sh [SIZE]   (SIZE: 1k, 64k or 1m; default 1k)
#   env: N=2000  MISS=1  CONC=1  MC_BIN=path  MC_ENV="VAR=value ..."  OUT=dir (default: temp, kept)
# Needs valgrind (Debian `valgrind`). Findings: BENCHMARKS.md.

set -euo pipefail

SIZE=${1:-1k}
N=${N:-2000}
CONC=${CONC:-1}
((CONC >= 1 && CONC <= N)) || { echo "CONC is 1 to N ($N)" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MC_BIN=${MC_BIN:-$ROOT/target/release/mirrorcache}
read -r -a MC_ENV_ARGS <<<"${MC_ENV:-}"
source "$ROOT/bench/lib.sh"
need_tools "apt-get install valgrind" valgrind callgrind_control callgrind_annotate nginx curl

OUT=${OUT:-$(mktemp -d /tmp/mc-callgrind.XXXXXX)}
mkdir -p "$OUT/www"
write_object "$SIZE" "$OUT/www/obj.bin"
MISS=${MISS:-}
if [[ -n $MISS ]]; then
    # A store left in OUT would answer the "misses" as hits.
    if [[ -e $OUT/meta.db ]]; then
        echo "MISS=1 needs a fresh OUT: $OUT holds a store" >&2
        exit 2
    fi
    mkdir -p "$OUT/www/miss"
    for i in $(seq 1 "$N"); do write_object "$SIZE" "$OUT/www/miss/$i.bin"; done
fi
trap 'stop_started; echo "callgrind output kept in $OUT" >&2' EXIT
free_port
O_PORT=$PORT
start_nginx "$OUT" "$O_PORT"
free_port
M_PORT=$PORT
mirrorcache_toml "$OUT" "$M_PORT" "http://127.0.0.1:$O_PORT" >"$OUT/mirrorcache.toml"
printf '\n[log]\nlevel = "info"\n' >>"$OUT/mirrorcache.toml"
env "${MC_ENV_ARGS[@]}" valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.out" \
    "$MC_BIN" serve --config "$OUT/mirrorcache.toml" 2>"$OUT/mirrorcache.log" &
MC_PID=$!
PIDS+=("$MC_PID")
URL=http://127.0.0.1:$M_PORT/o/obj.bin
# Under valgrind start-up takes seconds.
wait_up -s 60 "http://127.0.0.1:$M_PORT/-/health"
wait_for_hit "http://127.0.0.1:$M_PORT" "$URL"
args=()
for _ in $(seq 1 50); do args+=(-o /dev/null "$URL"); done
curl -s "${args[@]}" # warm: the hot tier, the connection, lazy statics
callgrind_control -z "$MC_PID" >/dev/null
# CONC clients, each one curl on its own connection, take every CONC-th
# request (CONC is checked before anything starts).
curls=()
for c in $(seq 1 "$CONC"); do
    args=()
    for i in $(seq "$c" "$CONC" "$N"); do
        if [[ -n $MISS ]]; then args+=(-o /dev/null "http://127.0.0.1:$M_PORT/o/miss/$i.bin"); else args+=(-o /dev/null "$URL"); fi
    done
    curl -s "${args[@]}" &
    curls+=($!)
done
for pid in "${curls[@]}"; do wait "$pid"; done
# A miss is answered before its commit: the count goes on until no fill is left.
if [[ -n $MISS ]]; then
    drained=
    for _ in $(seq 1 200); do
        if curl -s "http://127.0.0.1:$M_PORT/-/status" | grep -q '"fills_in_progress":0'; then
            drained=1
            break
        fi
        sleep 0.1
    done
    [[ -n $drained ]] || echo "warning: fills still in progress after 20 s; the count is short" >&2
fi
callgrind_control -d "$MC_PID" >/dev/null
sleep 1
dump=$(ls -t "$OUT"/callgrind.out* | head -1)
total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ && !n++ { gsub(/,/, "", $1); print $1 }')
what=requests
[[ -n $MISS ]] && what=misses
echo "instructions per request ($SIZE, $N $what): $((total / N))" | tee "$OUT/summary.txt"
# Readers that read to the end (`sed -n`, no `exit` in awk): under pipefail a
# writer cut off by SIGPIPE would end the script.
callgrind_annotate --inclusive=yes "$dump" 2>/dev/null | sed -n '1,60p' >"$OUT/inclusive.txt"
callgrind_annotate "$dump" 2>/dev/null | sed -n '1,60p' >"$OUT/self.txt"
echo "top functions: $OUT/inclusive.txt, $OUT/self.txt" >&2
