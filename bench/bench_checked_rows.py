"""QPS cost of checked float32 rows: the same bq collection searched with block checks and without, in one run.

Data: PyPI MiniLM (100k x 384 base rows, 1k held-out queries; /work/shared/data/pypi-minilm), a default
index="bq" collection (2-bit quantised codes, rescoring from the float32 rows). Each round opens the
collection read-only afresh (so the bitmap of verified blocks starts empty), runs every query once, one at a
time, k=10, and then a second time (by then most blocks are verified: the steady state). Rounds alternate
checked / unchecked; "unchecked" strips the block checks from the open collection (the state of a
collection written before them). Reported: medians over rounds, and the checked/unchecked ratio.

    flock /tmp/vecsift-bench.lock python bench/bench_checked_rows.py --rounds 5
    flock /tmp/vecsift-bench.lock python bench/bench_checked_rows.py --hnsw-dir DIR   # first-search cost
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

DATA = "/work/shared/data/pypi-minilm"


def build(path, base):
    import vecsift

    c = vecsift.Collection.create(path, dim=base.shape[1], metric="cosine", index="bq")
    for s in range(0, len(base), 20000):
        c.add([str(i) for i in range(s, s + 20000)], base[s:s + 20000])
    c.commit()
    c.close()


def unchecked(c):
    """Drops the block checks of an open collection (bench only: private state)."""
    c._vec._committed.clear()
    c._vec._checks = None
    c._publish()
    assert getattr(c.snapshot().vectors, "checks", None) is None


def qps(c, queries, k):
    t0 = time.perf_counter()
    for q in queries:
        c.search(q, k=k)
    return len(queries) / (time.perf_counter() - t0)


def first_hnsw_search(path, k, repeats=5):
    """Per fresh read-only open: seconds of the first search (graph read + checked) and median of the next 20."""
    import vecsift

    firsts, nexts = [], []
    for r in range(repeats):
        c = vecsift.open(path, readonly=True)
        q = np.random.default_rng(r).standard_normal((21, c.dim)).astype(np.float32)
        t0 = time.perf_counter()
        c.search_rows(q[:1], k=k)
        firsts.append(time.perf_counter() - t0)
        ts = []
        for i in range(1, 21):
            t0 = time.perf_counter()
            c.search_rows(q[i:i + 1], k=k)
            ts.append(time.perf_counter() - t0)
        nexts.append(statistics.median(ts))
        graph, n = c.manifest.dense["file"], len(c)
        c.close()
    size = os.path.getsize(os.path.join(path, graph)) / 2**20
    print(f"{path}: graph {size:.0f} MiB, {n} rows; first search after a read-only open "
          f"{1e3 * statistics.median(firsts):.1f} ms (median of {repeats} opens), later searches "
          f"{1e3 * statistics.median(nexts):.2f} ms")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--dir", default=None, help="reuse / keep the collection here")
    ap.add_argument("--hnsw-dir", help="also time the first search of a read-only hnsw collection (which "
                    "reads the mapped graph in full first) against the next ones, and exit")
    args = ap.parse_args(argv)
    import vecsift

    if args.hnsw_dir:
        return first_hnsw_search(args.hnsw_dir, args.k)

    x = np.load(os.path.join(DATA, "vectors.f16.npy"), mmap_mode="r")
    base = np.ascontiguousarray(x[:args.rows], dtype=np.float32)
    queries = np.ascontiguousarray(x[100_000:100_000 + args.queries], dtype=np.float32)
    tmp = None
    path = args.dir
    if path is None:
        tmp = tempfile.TemporaryDirectory(prefix="vecsift-checked-")
        path = os.path.join(tmp.name, "c")
    if not os.path.exists(os.path.join(path, "MANIFEST")):
        t0 = time.perf_counter()
        build(path, base)
        print(f"built {args.rows} x {base.shape[1]} bq collection in {time.perf_counter() - t0:.1f} s")
    res = {m: {"first": [], "second": []} for m in ("checked", "unchecked")}
    ident = True
    for r in range(args.rounds):
        for mode in (("checked", "unchecked") if r % 2 == 0 else ("unchecked", "checked")):
            c = vecsift.open(path, readonly=True)
            if mode == "unchecked":
                unchecked(c)
            c.search(queries[0], k=args.k)  # warm the code path (numba, allocators), not the blocks
            res[mode]["first"].append(qps(c, queries, args.k))
            res[mode]["second"].append(qps(c, queries, args.k))
            if mode == "checked":
                checks = c.snapshot().vectors.checks
                left = checks.left
            if r == 0:
                ids = [[h.id for h in c.search(q, k=args.k)] for q in queries[:50]]
                if mode == "checked":
                    ref = ids
                else:
                    ident = ident and ids == ref
            c.close()
    med = {m: {p: statistics.median(v) for p, v in d.items()} for m, d in res.items()}
    print(f"{args.rows} x {base.shape[1]} bq, {args.queries} queries one at a time, k={args.k}, "
          f"{args.rounds} rounds, median QPS (checked blocks left unverified after a round: {left} of "
          f"{len(checks.crcs)})")
    print(f"{'pass':<28}{'unchecked':>12}{'checked':>12}{'ratio':>8}{'drop':>8}")
    for p, label in (("first", "first pass after open"), ("second", "second pass (steady state)")):
        u, ch = med["unchecked"][p], med["checked"][p]
        print(f"{label:<28}{u:>12.0f}{ch:>12.0f}{ch / u:>8.3f}{100 * (1 - ch / u):>7.1f}%")
    print(f"same results checked vs unchecked: {ident}")
    for m in res:
        print(m, {p: [round(v) for v in vs] for p, vs in res[m].items()})
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
