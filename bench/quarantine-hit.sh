#!/usr/bin/env bash
# bench/quarantine-hit.sh — the cost of the advisory quarantine on a hit:
# one mirrorcache with two npm remotes over the same nginx origin on
# 127.0.0.1, `plain` (no quarantine) and `q` (quarantine = ["malicious",
# "critical", "high"] against an OSV feed of RECORDS generated records, one
# of which names the package hit, at another version, so every hit on `q`
# looks the package up and compares versions). Both warmed, then wrk (2
# threads, 64 connections) against each in turn, ROUNDS interleaved rounds
# with the order rotated, for the tarball (an artifact: judged on every
# hit) and the packument (a filtered document, built once per feed
# generation). The figure to read is q's req/s over plain's in the same
# round (median over rounds): background load moves both alike. Target:
# at least 0.95.
#
# Usage: bash bench/quarantine-hit.sh   (nginx and wrk: bench/compare.sh installs them)
#   env: DURATION=5 ROUNDS=3 RECORDS=200000 MC_BIN=path (another build; skips
#        cargo build --release) KEEP_TMP=1 (keep the work dir)
# Results are recorded in BENCHMARKS.md.

set -euo pipefail

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
RECORDS=${RECORDS:-200000}
cd "$(dirname "$0")/.."
source bench/lib.sh
need_tools "bench/compare.sh installs them" nginx wrk curl python3 awk ss
release_bin
make_work mc-quarantine-hit

# --- origin: one npm package, and the feed ------------------------------------
WWW=$WORK/origin/www
mkdir -p "$WWW/mc-pkg/-" "$WWW/feed"
head -c $((64 * 1024)) /dev/urandom >"$WWW/mc-pkg/-/mc-pkg-1.0.0.tgz"
free_port
O_PORT=$PORT
ORIGIN=http://127.0.0.1:$O_PORT
python3 - "$WWW" "$ORIGIN" "$RECORDS" <<'EOF'
import base64, hashlib, io, json, sys, zipfile
www, origin, records = sys.argv[1], sys.argv[2], int(sys.argv[3])
tarball = open(f"{www}/mc-pkg/-/mc-pkg-1.0.0.tgz", "rb").read()
integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
versions = {v: {"name": "mc-pkg", "version": v, "dist": {
    "tarball": f"{origin}/mc-pkg/-/mc-pkg-{v}.tgz", "integrity": integrity}}
    for v in ["1.0.0"]}
packument = {"name": "mc-pkg", "dist-tags": {"latest": "1.0.0"}, "versions": versions}
# /mc-pkg is a directory (the tarballs): nginx serves the packument from mc-pkg.json.
open(f"{www}/mc-pkg.json", "w").write(json.dumps(packument))
out = io.BytesIO()
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for i in range(records):
        name = "mc-pkg" if i == 0 else f"mc-gen-{i}"
        record = {"schema_version": "1.6.0", "id": f"GHSA-gen{i:06}",
                  "summary": f"Generated advisory {i}",
                  "database_specific": {"severity": "HIGH"},
                  "affected": [{"package": {"ecosystem": "npm", "name": name},
                                "ranges": [{"type": "SEMVER", "events": [
                                    {"introduced": "2.0.0"}, {"fixed": "2.3.4"}]}],
                                "versions": ["2.0.0", "2.1.0", "2.2.0"]}]}
        z.writestr(f"GHSA-gen{i:06}.json", json.dumps(record))
open(f"{www}/feed/all.zip", "wb").write(out.getvalue())
EOF
start_nginx "$WORK/origin" "$O_PORT" "location = /mc-pkg { default_type application/json; try_files /mc-pkg.json =404; }"

# --- mirrorcache: plain and q -------------------------------------------------
MC=$WORK/mc
mkdir -p "$MC"
free_port
MC_PORT=$PORT
cat >"$MC/mirrorcache.toml" <<EOF
[server]
listen = "127.0.0.1:$MC_PORT"

[storage]
path = "$MC/store"

[metadata]
url = "sqlite://$MC/meta.db"

[[advisories]]
name = "osv"
urls = ["$ORIGIN/feed/all.zip"]

[[remote]]
name = "plain"
kind = "npm"
mirrors = ["$ORIGIN"]

[[remote]]
name = "q"
kind = "npm"
mirrors = ["$ORIGIN"]
quarantine = ["malicious", "critical", "high"]
EOF
"$MC_BIN" serve --config "$MC/mirrorcache.toml" 2>"$MC/log" &
MC_PID=$!
PIDS+=("$MC_PID")
BASE=http://127.0.0.1:$MC_PORT
wait_up "$BASE/-/health"
for _ in $(seq 1 600); do
    curl -s "$BASE/-/status" | grep -q "\"records\":$RECORDS" && break
    sleep 0.1
done
curl -s "$BASE/-/status" | grep -q "\"records\":$RECORDS" ||
    { echo "the feed never came into force; log: $MC/log" >&2; cat "$MC/log" >&2; exit 1; }
# The quarantine is in force: a version the feed names is refused on q.
status=$(curl -s -o /dev/null -w '%{http_code}' "$BASE/q/mc-pkg/-/mc-pkg-2.1.0.tgz")
[[ $status == 403 ]] || { echo "q served a quarantined version ($status)" >&2; exit 1; }

PATHS=(mc-pkg/-/mc-pkg-1.0.0.tgz mc-pkg)
for remote in plain q; do
    for path in "${PATHS[@]}"; do
        wait_for_hit "$BASE" "$BASE/$remote/$path" ||
            { echo "$remote/$path never answered a HIT; log: $MC/log" >&2; exit 1; }
    done
done


echo "| hit | remote | req/s (median) | p99 ms (median) | req/s ÷ plain (median of rounds) |"
echo "|---|---|---:|---:|---:|"
REMOTES=(plain q)
for path in "${PATHS[@]}"; do
    declare -A RPS=() P99=()
    for round in $(seq 1 "$ROUNDS"); do
        for i in 0 1; do
            remote=${REMOTES[$(((i + round) % 2))]}
            read -r rps p99 bad < <(wrk_rps_p99 "$BASE/$remote/$path")
            ((bad == 0)) || echo "warning: non-2xx answers from $remote/$path" >&2
            RPS[$remote,$round]=$rps
            P99[$remote,$round]=$p99
            echo "$path $remote round $round: $rps req/s, p99 $p99 ms" >&2
        done
    done
    for remote in "${REMOTES[@]}"; do
        rps=$(for r in $(seq 1 "$ROUNDS"); do echo "${RPS[$remote,$r]}"; done | median_lines)
        p99=$(for r in $(seq 1 "$ROUNDS"); do echo "${P99[$remote,$r]}"; done | median_lines)
        ratio=$(for r in $(seq 1 "$ROUNDS"); do
            awk -v a="${RPS[$remote,$r]}" -v b="${RPS[plain,$r]}" 'BEGIN { printf "%.3f\n", a / b }'
        done | median_lines)
        echo "| $path | $remote | $rps | $p99 | $(awk -v r="$ratio" 'BEGIN { printf "%.2f", r }') |"
    done
done
