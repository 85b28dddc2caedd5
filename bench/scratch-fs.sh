#!/usr/bin/env bash
# bench/scratch-fs.sh [DIR]: makes a fresh journaled ext4 file system in a
# sparse 16 GiB image under DIR (default /work/scratch-img), mounts it on
# /mnt/benchfs and prints `export BENCH_TMP=/mnt/benchfs` for the miss
# benchmarks (sustained-miss.sh, first-fetch.sh, many-entries.sh) to work
# in. As root. `bash bench/scratch-fs.sh --umount` takes it down again.
#
# Why: a cold miss is mostly a file created, written and renamed, and the
# cost of creating a file on this VM's root file system depends on its
# history. It has no journal, and ext4 without one skips every free inode
# deleted in the last 30 s whose inode-table block is cached: in a
# directory whose inode group held a removed work dir, one create measured
# 1,081 µs (and 80 µs in another directory of the same file system, 37 µs
# on a fresh loop-mounted ext4: `python3` creating 2,000 empty files).
# Both servers of a run share the scratch file system.
set -euo pipefail
MNT=/mnt/benchfs
if [[ ${1:-} == --umount ]]; then
    umount "$MNT"
    exit 0
fi
DIR=${1:-/work/scratch-img}
if mountpoint -q "$MNT"; then
    umount "$MNT"
fi
mkdir -p "$DIR" "$MNT"
rm -f "$DIR/bench.ext4"
truncate -s 16G "$DIR/bench.ext4"
# An inode for every 4 KiB (4M): the tuned nginx keeps a file a key, and
# sustained-miss.sh on a fast machine makes over a million keys (at
# mkfs's default of one for every 16 KiB the file system ran out of
# inodes and nginx answered 500).
mkfs.ext4 -q -F -i 4096 "$DIR/bench.ext4"
mount -o loop "$DIR/bench.ext4" "$MNT"
echo "export BENCH_TMP=$MNT"
