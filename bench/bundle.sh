#!/usr/bin/env bash
# bench/bundle.sh — issue 28's figures.
#
# 1. `mirrorcache export` and `import` of a bundle of SIZE_MIB (default 2048)
#    MiB of random files (incompressible, like most artifacts) against `tar`
#    of the same files: `tar -cf` and `tar -cf - | zstd -3` (export's level)
#    for export, `zstd -dc | tar -xf` then `sync` (import fsyncs every blob)
#    for import. Export is signed, import checks the signature and every
#    blob's sha256. MB/s = the files' bytes / wall time.
# 2. 1 KiB hits per second with the dashboard's history on
#    (`server.history = true`, the default) and off, same run: two
#    mirrorcache processes on the same origin, wrk (2 threads, 64
#    connections) DURATION seconds against each in turn, ROUNDS rounds, the
#    median of each. Rounds long enough that the once-a-minute sampler runs
#    inside them (DURATION × ROUNDS ≥ 60 s each).
#
# Usage: bash bench/bundle.sh [target/release/mirrorcache]
#   env: SIZE_MIB=2048 FILES=128 DURATION=15 ROUNDS=4
# Needs nginx, wrk, curl, openssl, zstd, tar. Uses about 4 × SIZE_MIB of
# disk under /tmp. Results are recorded in BENCHMARKS.md ("Bundles and the
# dashboard's history").

set -euo pipefail

BIN=${1:-target/release/mirrorcache}
SIZE_MIB=${SIZE_MIB:-2048}
FILES=${FILES:-128}
DURATION=${DURATION:-15}
ROUNDS=${ROUNDS:-4}
source "$(dirname "$0")/lib.sh"
need_tools "" nginx wrk curl openssl zstd tar

WORK=$(mktemp -d /tmp/mc-bundle.XXXXXX)
cleanup() {
    stop_started
    rm -rf "$WORK"
}
trap cleanup EXIT

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
per_file=$((SIZE_MIB / FILES))
mkdir -p "$WORK/origin/www/f"
for i in $(seq 1 "$FILES"); do
    head -c "$((per_file << 20))" /dev/urandom >"$WORK/origin/www/f/$i.bin"
done
write_object 1k "$WORK/origin/www/1k.bin"
bytes=$(du -sb "$WORK/origin/www/f" | cut -f1)
free_port
O_PORT=$PORT
start_nginx "$WORK/origin" "$O_PORT"

config() { # DIR PORT HISTORY
    cat <<EOF
[server]
listen = "127.0.0.1:$2"
history = $3

[storage]
path = "$1/store"

[metadata]
url = "sqlite://$1/meta.db"

[[remote]]
name = "o"
mirrors = ["http://127.0.0.1:$O_PORT"]
immutable = ["**"]
EOF
}

# A: filled through the proxy, then exported.
mkdir -p "$WORK/a" "$WORK/b"
free_port
A_PORT=$PORT
config "$WORK/a" "$A_PORT" true >"$WORK/a/mirrorcache.toml"
"$BIN" serve --config "$WORK/a/mirrorcache.toml" 2>"$WORK/a/log" &
PIDS+=("$!")
wait_up "http://127.0.0.1:$A_PORT/-/health"
for i in $(seq 1 "$FILES"); do curl -sf -o /dev/null "http://127.0.0.1:$A_PORT/o/f/$i.bin"; done
wait_for_hit "http://127.0.0.1:$A_PORT" "http://127.0.0.1:$A_PORT/o/f/$FILES.bin"
openssl genpkey -algorithm ed25519 -out "$WORK/key.pem"
openssl pkey -in "$WORK/key.pem" -pubout -out "$WORK/pub.pem"
sync

seconds() { # COMMAND...: wall seconds of COMMAND
    local start end
    start=$(date +%s.%N)
    "$@" >/dev/null
    end=$(date +%s.%N)
    echo "$end - $start" | bc -l
}
mbs() { echo "$bytes / $1 / 1000000" | bc -l; }

# Page cache: every variant reads files written moments ago, so all read
# from memory; writes are what differ.
t_export=$(seconds "$BIN" export --config "$WORK/a/mirrorcache.toml" --out "$WORK/bundle.mcb" --sign "$WORK/key.pem")
t_tar=$(seconds tar -cf "$WORK/files.tar" -C "$WORK/origin/www" f)
t_tar_zstd=$(seconds sh -c "tar -cf - -C '$WORK/origin/www' f | zstd -q -3 -T1 -o '$WORK/files.tar.zst'")
rm -f "$WORK/files.tar"
sync
config "$WORK/b" 1 true >"$WORK/b/mirrorcache.toml"
t_import=$(seconds "$BIN" import --config "$WORK/b/mirrorcache.toml" --verify-key "$WORK/pub.pem" "$WORK/bundle.mcb")
mkdir -p "$WORK/untar"
t_untar=$(seconds sh -c "zstd -q -dc '$WORK/files.tar.zst' | tar -xf - -C '$WORK/untar' && sync")
bundle_bytes=$(stat -c %s "$WORK/bundle.mcb")
rm -rf "$WORK/untar" "$WORK/files.tar.zst" "$WORK/b"

echo
echo "$((bytes >> 20)) MiB in $FILES files; bundle $((bundle_bytes >> 20)) MiB"
echo "| step | mirrorcache s | MB/s | tar s | MB/s | ratio |"
echo "|---|---:|---:|---:|---:|---:|"
printf "| export (signed) vs tar -cf | %.2f | %.0f | %.2f | %.0f | %.2f× |\n" \
    "$t_export" "$(mbs "$t_export")" "$t_tar" "$(mbs "$t_tar")" "$(echo "$t_tar / $t_export" | bc -l)"
printf "| export (signed) vs tar \\| zstd -3 | %.2f | %.0f | %.2f | %.0f | %.2f× |\n" \
    "$t_export" "$(mbs "$t_export")" "$t_tar_zstd" "$(mbs "$t_tar_zstd")" "$(echo "$t_tar_zstd / $t_export" | bc -l)"
printf "| import (verified) vs zstd -dc \\| tar -x; sync | %.2f | %.0f | %.2f | %.0f | %.2f× |\n" \
    "$t_import" "$(mbs "$t_import")" "$t_untar" "$(mbs "$t_untar")" "$(echo "$t_untar / $t_import" | bc -l)"

# Hits with and without the history, same run.
declare -A BASE
for variant in on off; do
    dir=$WORK/hit-$variant
    mkdir -p "$dir"
    free_port
    config "$dir" "$PORT" "$([[ $variant == on ]] && echo true || echo false)" >"$dir/mirrorcache.toml"
    "$BIN" serve --config "$dir/mirrorcache.toml" 2>"$dir/log" &
    PIDS+=("$!")
    BASE[$variant]=http://127.0.0.1:$PORT
    wait_up "${BASE[$variant]}/-/health"
    curl -s -o /dev/null "${BASE[$variant]}/o/1k.bin"
    wait_for_hit "${BASE[$variant]}" "${BASE[$variant]}/o/1k.bin"
done
rps() {
    wrk -t2 -c64 -d"${DURATION}s" "$1" | awk '/Requests\/sec/ { printf "%.0f\n", $2 } /Non-2xx/ { print "non-2xx" > "/dev/stderr" }'
}
declare -A R=()
for round in $(seq 1 "$ROUNDS"); do
    for variant in on off; do R[$variant]+="$(rps "${BASE[$variant]}/o/1k.bin") "; done
done
m() { tr ' ' '\n' <<<"${R[$1]}" | grep . | median_lines; }
on=$(m on) off=$(m off)
echo
echo "1 KiB hits, $ROUNDS rounds of ${DURATION}s: history on ${R[on]}; off ${R[off]}"
echo "| history on req/s | history off req/s | on / off |"
echo "|---:|---:|---:|"
printf "| %s | %s | %.2f× |\n" "$on" "$off" "$(echo "$on / $off" | bc -l)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
