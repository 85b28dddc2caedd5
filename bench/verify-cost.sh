#!/usr/bin/env bash
# bench/verify-cost.sh — what checking declared digests costs (issue 13).
#
# One nginx origin on 127.0.0.1 serves SIZE-byte artifacts (distinct random
# bytes each, so every fill is a real cold fill) to four remotes of one
# mirrorcache:
#   pypi-declared  its simple page declares each file's sha256 (fetched first)
#   pypi-plain     the same kind, nothing declared
#   npm-sha512     its packument declares each tarball's sha512 (`integrity`):
#                  a second hash function beside the store's sha256
#   npm-plain      nothing declared
# Each round fetches one cold artifact through each remote, in rotating order,
# and then HITS requests of a 1 KiB artifact per remote (declared vs plain).
# Quoted as ratios against the plain remote of the same round.
#
#   SIZE=268435456 ROUNDS=3 HITS=2000 bash bench/verify-cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
SIZE=${SIZE:-268435456}
ROUNDS=${ROUNDS:-3}
HITS=${HITS:-2000}
need_tools "" nginx curl python3 ss sha256sum
# MC_BIN=path: another build (an A/B against a baseline), no cargo build.
if [[ -n "${MC_BIN:-}" ]]; then
    BIN=$MC_BIN
else
    cargo build --release -q
    BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/mirrorcache
fi
WORK=$(mktemp -d)
trap 'stop_started; rm -rf "$WORK"' EXIT

free_port
ORIGIN_PORT=$PORT
ORIGIN="http://127.0.0.1:$ORIGIN_PORT"
mkdir -p "$WORK/origin/www/packages" "$WORK/origin/www/simple/big" "$WORK/origin/www/p/-" "$WORK/origin/www/q/-"
links=""
versions=""
for r in $(seq 1 "$ROUNDS") small; do
    bytes=$SIZE
    [ "$r" = small ] && bytes=1024
    for remote in pypi-declared pypi-plain npm-sha512 npm-plain; do
        head -c "$bytes" /dev/urandom >"$WORK/origin/www/packages/$remote-$r.whl"
    done
    sha=$(sha256sum "$WORK/origin/www/packages/pypi-declared-$r.whl" | cut -d' ' -f1)
    links+="<a href=\"$ORIGIN/packages/pypi-declared-$r.whl#sha256=$sha\">x</a>"
    ln "$WORK/origin/www/packages/npm-sha512-$r.whl" "$WORK/origin/www/p/-/p-$r.tgz"
    ln "$WORK/origin/www/packages/npm-plain-$r.whl" "$WORK/origin/www/q/-/q-$r.tgz"
    sri=$(python3 -c 'import base64,hashlib,sys; print("sha512-" + base64.b64encode(hashlib.sha512(open(sys.argv[1],"rb").read()).digest()).decode())' "$WORK/origin/www/p/-/p-$r.tgz")
    versions+="\"$r\": {\"dist\": {\"tarball\": \"$ORIGIN/p/-/p-$r.tgz\", \"integrity\": \"$sri\"}},"
done
echo "<html><body>$links</body></html>" >"$WORK/origin/www/simple/big/index.html"
echo "{\"name\": \"p\", \"versions\": {${versions%,}}}" >"$WORK/origin/www/p/index.json"
# The packument at /p, beside the tarballs under /p/-/.
start_nginx "$WORK/origin" "$ORIGIN_PORT" \
    "location = /p { default_type application/json; alias $WORK/origin/www/p/index.json; }"

free_port
MC_PORT=$PORT
{
    printf '[server]\nlisten = "127.0.0.1:%s"\n\n' "$MC_PORT"
    printf '[storage]\npath = "%s/store"\nmax_size = "64GiB"\n\n[metadata]\nurl = "sqlite://%s/meta.db"\n\n[log]\nlevel = "warn"\n' "$WORK" "$WORK"
    for remote in pypi-declared pypi-plain; do
        printf '\n[[remote]]\nname = "%s"\nkind = "pypi"\nmirrors = ["%s"]\nfiles = []\n' "$remote" "$ORIGIN"
    done
    for remote in npm-sha512 npm-plain; do
        printf '\n[[remote]]\nname = "%s"\nkind = "npm"\nmirrors = ["%s"]\n' "$remote" "$ORIGIN"
    done
} >"$WORK/mirrorcache.toml"
"$BIN" serve --config "$WORK/mirrorcache.toml" 2>"$WORK/mc.log" &
PIDS+=("$!")
MC="http://127.0.0.1:$MC_PORT"
wait_up "$MC/-/health"
curl -sf -o /dev/null "$MC/pypi-declared/simple/big/"
curl -sf -o /dev/null "$MC/npm-sha512/p"

path_of() { # remote round
    case $1 in
        npm-sha512) echo "/$1/p/-/p-$2.tgz" ;;
        npm-plain) echo "/$1/q/-/q-$2.tgz" ;;
        *) echo "/$1/packages/$1-$2.whl" ;;
    esac
}
cold() { curl -sf -o /dev/null -w '%{time_total}' "$MC$(path_of "$1" "$2")"; }
hits() { # remote: seconds for HITS sequential 1 KiB hits over one connection
    local url
    url="$MC$(path_of "$1" small)"
    curl -sf -o /dev/null "$url"
    python3 - "$url" "$HITS" <<'EOF'
import http.client, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1]); n = int(sys.argv[2])
c = http.client.HTTPConnection(u.hostname, u.port)
t = time.perf_counter()
for _ in range(n):
    c.request("GET", u.path); r = c.getresponse(); r.read(); assert r.status == 200
print(f"{time.perf_counter() - t:.3f}")
EOF
}

remotes=(pypi-declared pypi-plain npm-sha512 npm-plain)
echo "cold fill of $SIZE bytes, seconds (ratio to the plain remote of the same kind)"
echo "round  pypi-declared  pypi-plain  ratio   npm-sha512  npm-plain  ratio"
for r in $(seq 1 "$ROUNDS"); do
    declare -A t=()
    for i in 0 1 2 3; do
        remote=${remotes[$(((i + r) % 4))]}
        t[$remote]=$(cold "$remote" "$r")
    done
    printf '%-6s %13s %11s %6.3f %12s %10s %6.3f\n' "$r" \
        "${t[pypi-declared]}" "${t[pypi-plain]}" "$(echo "${t[pypi-declared]} / ${t[pypi-plain]}" | bc -l)" \
        "${t[npm-sha512]}" "${t[npm-plain]}" "$(echo "${t[npm-sha512]} / ${t[npm-plain]}" | bc -l)"
done
echo "$HITS sequential 1 KiB hits on one connection, seconds"
for remote in "${remotes[@]}"; do printf '%-14s %s\n' "$remote" "$(hits "$remote")"; done
curl -s "$MC/-/metrics" | grep '^mirrorcache_integrity_failures_total' || echo "integrity failures: none"
echo "machine load: $(cut -d' ' -f1-3 /proc/loadavg)"
