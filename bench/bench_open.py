"""Open time and resident memory of a large hnsw collection (issue 10: one read of the graph per open).

Builds a collection of --rows random clustered --dim-d rows (index="hnsw") once and caches it
under --cache; then, in fresh child processes, times vecsift.open(path, readonly=True) and reads
/proc/self/smaps_rollup (Rss, file-backed Rss) and /proc/self/io (bytes read from disk) after the
open and after one search. Variants (--variant NAME=DIR holding a vecsift package, e.g. a checkout of the previous
version) run interleaved, `--repeats` times each; medians are printed.

    flock /tmp/vecsift-bench.lock python bench/bench_open.py --variant before=/tmp/layout-before/python \
        --variant after=

"cold": the collection's files are evicted from the page cache (posix_fadvise DONTNEED) before
the open, so the open's disk reads are counted; "warm": they are cached.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import json, os, sys, time
def rollup():
    out = {}
    for line in open("/proc/self/smaps_rollup"):
        parts = line.split()
        if len(parts) >= 3 and parts[-1] == "kB":
            out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return out
def io():
    return {l.split(":")[0]: int(l.split(":")[1]) for l in open("/proc/self/io")}
if os.environ.get("BENCH_VECSIFT_SRC"):  # a checkout of another version: bypass the editable install's finder
    sys.meta_path = [f for f in sys.meta_path if "editable" not in type(f).__module__]
    sys.path.insert(0, os.environ["BENCH_VECSIFT_SRC"])
import numpy as np
import vecsift
path, cold = sys.argv[1], sys.argv[2] == "cold"
if cold:
    for name in os.listdir(path):
        fd = os.open(os.path.join(path, name), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
r0, io0 = rollup(), io()
t0 = time.perf_counter()
c = vecsift.open(path, readonly=True)
t1 = time.perf_counter()
r1, io1 = rollup(), io()
q = np.random.default_rng(1).standard_normal((1, c.dim)).astype(np.float32)
c.search(q[0], k=10)
r2 = rollup()
def file_rss(r):
    return r.get("Rss", 0) - r.get("Anonymous", 0)
print(json.dumps({"open_s": t1 - t0, "rss_delta_mb": (r1["Rss"] - r0["Rss"]) / 2**20,
                  "file_rss_delta_mb": (file_rss(r1) - file_rss(r0)) / 2**20,
                  "anon_delta_mb": (r1.get("Anonymous", 0) - r0.get("Anonymous", 0)) / 2**20,
                  "disk_read_mb": (io1["read_bytes"] - io0["read_bytes"]) / 2**20,
                  "syscall_read_mb": (io1["rchar"] - io0["rchar"]) / 2**20,
                  "file_rss_after_search_mb": (file_rss(r2) - file_rss(r0)) / 2**20,
                  "version_file": vecsift.__file__}))
"""


def build(path, rows, dim, seed=0):
    import numpy as np

    import vecsift

    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((256, dim)).astype(np.float32)
    c = vecsift.Collection.create(path, dim=dim, metric="cosine", index="hnsw", m=16, ef_construction=40)
    step = 200_000
    for s in range(0, rows, step):
        n = min(step, rows - s)
        x = centers[rng.integers(0, 256, n)] + 0.5 * rng.standard_normal((n, dim)).astype(np.float32)
        c.add([f"r{i}" for i in range(s, s + n)], x)
    t = time.perf_counter()
    c.commit()
    print(f"built {rows} x {dim} in {time.perf_counter() - t:.1f} s (commit)", file=sys.stderr)
    c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--cache", default="/tmp/vecsift-bench-open")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--variant", action="append", default=[], help="NAME=DIR holding the vecsift package to import (repeatable; empty: the installed one)")
    ap.add_argument("--modes", default="cold,warm")
    args = ap.parse_args()
    path = os.path.join(args.cache, f"hnsw-{args.rows}x{args.dim}")
    if not os.path.exists(os.path.join(path, "MANIFEST")):
        os.makedirs(args.cache, exist_ok=True)
        build(path, args.rows, args.dim)
    size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    graph = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".idx"))
    print(f"{path}: {size / 2**20:.0f} MiB on disk, graph file {graph / 2**20:.0f} MiB")
    variants = [v.split("=", 1) for v in args.variant] or [["current", ""]]
    results = {(n, m): [] for n, _ in variants for m in args.modes.split(",")}
    for _ in range(args.repeats):
        for mode in args.modes.split(","):
            for name, pp in variants:  # interleaved: the page cache and the machine's load hit both alike
                env = dict(os.environ)
                if pp:
                    env["BENCH_VECSIFT_SRC"] = os.path.abspath(pp)
                out = subprocess.run([sys.executable, "-c", CHILD, path, mode], env=env, capture_output=True,
                                     text=True, check=True, cwd="/")
                results[(name, mode)].append(json.loads(out.stdout))
    keys = ["open_s", "disk_read_mb", "syscall_read_mb", "rss_delta_mb", "file_rss_delta_mb", "anon_delta_mb",
            "file_rss_after_search_mb"]
    print("variant  mode  " + "  ".join(keys) + "   (medians of %d)" % args.repeats)
    for (name, mode), rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in keys}
        print(f"{name:8s} {mode:5s} " + "  ".join(f"{med[k]:.3f}" if k == "open_s" else f"{med[k]:.0f}"
                                                  for k in keys) + f"   ({rs[0]['version_file']})")


if __name__ == "__main__":
    main()
