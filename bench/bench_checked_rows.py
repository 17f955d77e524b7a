"""QPS cost of checked float32 rows: the same bq collection searched with block checks and without, in one run.

Data: PyPI MiniLM (100k x 384 base rows, 1k held-out queries; /work/shared/data/pypi-minilm), a default
index="bq" collection (2-bit quantised codes, rescoring from the float32 rows). Each round opens the
collection read-only twice afresh (so the bitmap of verified blocks starts empty), strips one of its block
checks (the state of a collection written before them), and runs every query once on each, one at a time,
k=10, in alternating turns of 50 queries (a shared machine's drift then hits both alike), then a second
time (by then the blocks are verified: the steady state). Reported: median QPS over rounds, and the median
of the per-round checked/unchecked ratios.

    flock /tmp/vecsift-bench.lock python bench/bench_checked_rows.py --rounds 5
    flock /tmp/vecsift-bench.lock python bench/bench_checked_rows.py --rounds 5 --block 65536  # the old blocks
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
    ap.add_argument("--turn", type=int, default=50, help="queries per turn of each collection")
    ap.add_argument("--dir", default=None, help="reuse / keep the collection here")
    ap.add_argument("--block", type=int, default=None,
                    help="write the collection with this block size (default: the library's; 65536 is the "
                    "size of the first release's files)")
    ap.add_argument("--hnsw-dir", help="also time the first search of a read-only hnsw collection (which "
                    "reads the mapped graph in full first) against the next ones, and exit")
    args = ap.parse_args(argv)
    import vecsift

    if args.block:
        from vecsift.storage import rowsums

        rowsums.BLOCK_BYTES = args.block
        print(f"row files written with {args.block}-byte blocks")

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
    # Each round: two fresh read-only opens of the same directory, one stripped of its checks, searched
    # in turns of `--turn` queries (so drift of a shared machine hits both alike); every query once, then
    # a second time. The ratio is taken per round, then the median over rounds.
    ratios = {"first": [], "second": []}
    cpu_ratios = {"first": [], "second": []}
    qps_of = {m: {"first": [], "second": []} for m in ("checked", "unchecked")}
    cpu_of = {m: {"first": [], "second": []} for m in ("checked", "unchecked")}
    ident, left, total = True, None, None
    for r in range(args.rounds):
        cols = {"checked": vecsift.open(path, readonly=True), "unchecked": vecsift.open(path, readonly=True)}
        unchecked(cols["unchecked"])
        for c in cols.values():
            c.search(queries[0], k=args.k)  # warm the code path (numba, allocators), not the blocks
        order = ("checked", "unchecked") if r % 2 == 0 else ("unchecked", "checked")
        for p in ("first", "second"):
            spent = {m: 0.0 for m in cols}
            cpu = {m: 0.0 for m in cols}
            for s in range(0, len(queries), args.turn):
                for m in order:
                    t0, c0 = time.perf_counter(), time.process_time()
                    for q in queries[s:s + args.turn]:
                        cols[m].search(q, k=args.k)
                    spent[m] += time.perf_counter() - t0
                    cpu[m] += time.process_time() - c0
            for m in cols:
                qps_of[m][p].append(len(queries) / spent[m])
                cpu_of[m][p].append(1e6 * cpu[m] / len(queries))
            ratios[p].append(spent["unchecked"] / spent["checked"])
            cpu_ratios[p].append(cpu["unchecked"] / cpu["checked"])
        checks = cols["checked"].snapshot().vectors.checks
        left, total, block = checks.left, len(checks.crcs), checks.block
        if r == 0:
            ident = all([h.id for h in cols["checked"].search(q, k=args.k)] ==
                        [h.id for h in cols["unchecked"].search(q, k=args.k)] for q in queries[:100])
        for c in cols.values():
            c.close()
    print(f"{args.rows} x {base.shape[1]} bq, {args.queries} queries one at a time, k={args.k}, {args.rounds} "
          f"rounds, turns of {args.turn} queries; blocks of {block} bytes left unverified after a round: {left} of {total}")
    print(f"{'pass':<28}{'unchecked':>10}{'checked':>10}{'ratio':>8}{'drop':>8}   (QPS medians; ratio: median "
          f"of per-round checked/unchecked)")
    for p, label in (("first", "first pass after open"), ("second", "second pass (steady state)")):
        u, ch = statistics.median(qps_of["unchecked"][p]), statistics.median(qps_of["checked"][p])
        ratio = statistics.median(ratios[p])
        print(f"{label:<28}{u:>10.0f}{ch:>10.0f}{ratio:>8.3f}{100 * (1 - ratio):>7.1f}%")
    print("CPU time per query (process time, all threads; what a busy shared machine distorts least):")
    print(f"{'pass':<28}{'unchecked':>10}{'checked':>10}{'ratio':>8}{'drop':>8}   (us/query medians; ratio of QPS)")
    for p, label in (("first", "first pass after open"), ("second", "second pass (steady state)")):
        u, ch = statistics.median(cpu_of["unchecked"][p]), statistics.median(cpu_of["checked"][p])
        ratio = statistics.median(cpu_ratios[p])
        print(f"{label:<28}{u:>10.0f}{ch:>10.0f}{ratio:>8.3f}{100 * (1 - ratio):>7.1f}%")
    print(f"same results checked vs unchecked: {ident}")
    costs = []
    for _ in range(3):
        c = vecsift.open(path, readonly=True)
        t0 = time.perf_counter()
        c.snapshot().vectors.checks.all()
        costs.append(time.perf_counter() - t0)
        c.close()
    mb = total * block / 2**20
    print(f"checking every block once (the most a process ever pays per file): {1e3 * statistics.median(costs):.0f} ms "
          f"for {mb:.0f} MiB (page cache warm, median of 3)")
    print("per-round ratios, wall:", {p: [round(v, 3) for v in vs] for p, vs in ratios.items()})
    print("per-round ratios, cpu: ", {p: [round(v, 3) for v in vs] for p, vs in cpu_ratios.items()})
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
