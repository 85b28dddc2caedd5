#!/usr/bin/env python3
"""bench/blob-dirs.py — what a group commit of small blobs costs the file
system, by blob layout: N batches of 512 one-KiB files, each batch written
into tmp/, one `syncfs`, renamed into place, one `syncfs` (as
`ContentStore::commit_synced` does), into
  nested  blobs/ab/cd/<sha256>, directories made on demand (a fresh store
          of the old layout: most blobs make a new directory)
  flat    blobs/ab/<sha256>, the 256 directories made first (today's layout)
Prints blobs/s and KiB written to the device per blob (from
/sys/block/DEV/stat). Run it on a fresh file system (bench/scratch-fs.sh),
as root, alternating the layouts:

    python3 bench/blob-dirs.py /mnt/benchfs/x nested 40 loop1
    python3 bench/blob-dirs.py /mnt/benchfs/y flat 40 loop1

Results: BENCHMARKS.md ("Sustained distinct misses")."""
import ctypes
import hashlib
import os
import shutil
import sys
import time

libc = ctypes.CDLL("libc.so.6", use_errno=True)
root, layout, batches, dev = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
per = 512


def sectors_written():
    return int(open(f"/sys/block/{dev}/stat").read().split()[6])


shutil.rmtree(root, ignore_errors=True)
os.makedirs(f"{root}/tmp")
os.makedirs(f"{root}/blobs")
if layout == "flat":
    for i in range(256):
        os.mkdir(f"{root}/blobs/{i:02x}")
fd = os.open(root, os.O_RDONLY)
libc.syncfs(fd)
s0, t0, n = sectors_written(), time.time(), 0
for _ in range(batches):
    temps = []
    for _ in range(per):
        data = os.urandom(1024)
        h = hashlib.sha256(data).hexdigest()
        with open(f"{root}/tmp/{h}", "wb") as f:
            f.write(data)
        temps.append(h)
    libc.syncfs(fd)
    for h in temps:
        d = f"{root}/blobs/{h[:2]}/{h[2:4]}" if layout == "nested" else f"{root}/blobs/{h[:2]}"
        try:
            os.rename(f"{root}/tmp/{h}", f"{d}/{h}")
        except FileNotFoundError:
            os.makedirs(d, exist_ok=True)
            os.rename(f"{root}/tmp/{h}", f"{d}/{h}")
        n += 1
    libc.syncfs(fd)
t = time.time() - t0
kib = (sectors_written() - s0) * 512 / n / 1024
print(f"{layout}: {n} blobs in {t:.2f} s = {n / t:.0f}/s, {kib:.1f} KiB written a blob")
shutil.rmtree(root, ignore_errors=True)
