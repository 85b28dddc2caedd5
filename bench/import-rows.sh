#!/usr/bin/env bash
# bench/import-rows.sh — `mirrorcache import` of a bundle of many small
# rows, where the group commit's pace shows: the first build given fills
# ROWS distinct cold 1 KiB artifacts through a server (the keyed origin of
# bench/sustained-miss.sh, one keep-alive client) and exports them; then
# each build imports the bundle into an empty store of its own, ROUNDS
# times, builds alternating. Import commits row by row and waits for each
# (`Cache::commit_entry`), so its wall time is the commit's latency times
# ROWS. On 127.0.0.1 only; the stores live under BENCH_TMP (default /tmp).
#
# Usage: bash bench/import-rows.sh 'name=path/to/mirrorcache' ['name=path' ...]
#   env: ROWS=1000 ROUNDS=2
# Results are recorded in BENCHMARKS.md.
set -euo pipefail
ROWS=${ROWS:-1000}
ROUNDS=${ROUNDS:-2}
(($# >= 1)) || { echo "usage: $0 'name=binary' ['name=binary' ...]" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
source bench/lib.sh
need_tools "apt-get install nginx-light" nginx curl python3 bc
make_work mc-import
start_keyed_origin "$WORK/origin"

FIRST=${1#*=}
free_port
start_mirrorcache "$WORK/source" "$PORT" "$O_PORT" "$WORK/source/log" "$FIRST"
wait_up "http://127.0.0.1:$PORT/-/health"
fill_keys "http://127.0.0.1:$PORT/o/distinct/row" "$ROWS" 1
kill -TERM "$MC_PID"
wait "$MC_PID" 2>/dev/null || true
"$FIRST" export --config "$WORK/source/mirrorcache.toml" --out "$WORK/rows.mcb" >/dev/null 2>&1

echo "## bench/import-rows.sh — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $ROWS rows of 1 KiB"
echo
echo "| build | round | import s | rows imported | ms a row |"
echo "|---|---:|---:|---:|---:|"
for round in $(seq 1 "$ROUNDS"); do
    for spec in "$@"; do
        name=${spec%%=*}
        bin=${spec#*=}
        dir=$WORK/import-$name-$round
        mkdir -p "$dir"
        mirrorcache_toml "$dir" 1 "http://127.0.0.1:$O_PORT" >"$dir/mirrorcache.toml"
        start=$(date +%s.%N)
        "$bin" import --config "$dir/mirrorcache.toml" "$WORK/rows.mcb" >/dev/null 2>&1
        end=$(date +%s.%N)
        rows=$(M_DIR=$dir rows_now)
        seconds=$(echo "$end - $start" | bc -l)
        printf '| %s | %d | %.2f | %d | %.2f |\n' "$name" "$round" "$seconds" "$rows" "$(echo "$seconds * 1000 / $rows" | bc -l)"
        rm -rf "$dir"
    done
done
