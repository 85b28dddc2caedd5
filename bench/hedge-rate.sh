#!/usr/bin/env bash
# bench/hedge-rate.sh — how often hedged attempts fire on healthy mirrors.
#
# Three healthy origins (python3 -m http.server, threaded) on 127.0.0.1 serve
# the same N files of SIZE bytes; one remote per strategy lists all three with
# the default hedge_after ("auto"). CONC clients fetch every file cold through
# each remote; the proxy's own counters (upstream_fetches_total,
# upstream_hedges_total) give the share of fetches that hedged. Recorded in
# BENCHMARKS.md ("Hedged attempts on healthy mirrors").
#
#   N=2000 SIZE=65536 CONC=32 bash bench/hedge-rate.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
N=${N:-2000}
SIZE=${SIZE:-65536}
CONC=${CONC:-32}
need_tools "" python3 curl xargs ss
cargo build --release -q
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/mirrorcache
WORK=$(mktemp -d)
trap 'stop_started; rm -rf "$WORK"' EXIT

mkdir -p "$WORK/www"
head -c "$SIZE" /dev/urandom >"$WORK/blob"
for i in $(seq 1 "$N"); do ln "$WORK/blob" "$WORK/www/f$i"; done
ORIGINS=()
for _ in 1 2 3; do
    free_port
    python3 -m http.server "$PORT" --bind 127.0.0.1 --directory "$WORK/www" >/dev/null 2>&1 &
    PIDS+=("$!")
    ORIGINS+=("\"http://127.0.0.1:$PORT\"")
done
free_port
MC_PORT=$PORT
{
    printf '[server]\nlisten = "127.0.0.1:%s"\nmax_connections = 4096\n\n' "$MC_PORT"
    printf '[storage]\npath = "%s/store"\n\n[metadata]\nurl = "sqlite://%s/meta.db"\n\n[log]\nlevel = "warn"\n' "$WORK" "$WORK"
    for strategy in round_robin least_conn fastest; do
        printf '\n[[remote]]\nname = "%s"\nmirrors = [%s]\nstrategy = "%s"\nimmutable = ["**"]\n' \
            "$strategy" "$(IFS=,; echo "${ORIGINS[*]}")" "$strategy"
    done
} >"$WORK/mirrorcache.toml"
"$BIN" serve --config "$WORK/mirrorcache.toml" 2>"$WORK/mc.log" &
PIDS+=("$!")
wait_up "http://127.0.0.1:$MC_PORT/-/health"
sleep 0.5

echo "strategy      fetches  hedges  share   wall"
for strategy in round_robin least_conn fastest; do
    start=$(date +%s.%N)
    seq 1 "$N" | xargs -P "$CONC" -I{} curl -s -o /dev/null -w '%{http_code}\n' \
        "http://127.0.0.1:$MC_PORT/$strategy/f{}" | sort | uniq -c | grep -v ' 200$' || true
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    metrics=$(curl -s "http://127.0.0.1:$MC_PORT/-/metrics")
    value() { echo "$metrics" | grep "^mirrorcache_$1_total{remote=\"$strategy\"}" | awk '{print $2}'; }
    fetches=$(value upstream_fetches)
    hedges=$(value upstream_hedges)
    printf '%-12s %8s %7s %6.2f%% %6.1fs\n' "$strategy" "$fetches" "$hedges" \
        "$(echo "100 * $hedges / $fetches" | bc -l)" "$wall"
done
echo "machine load: $(cut -d' ' -f1-3 /proc/loadavg)"
