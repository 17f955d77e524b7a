"""Per-query overhead of the Collection over the index it wraps (issues 11 and 13).

    flock /tmp/vecsift-bench.lock python bench/bench_overhead.py [--n 100000] [--queries 300] [--reps 3]

Data: /work/shared/data/pypi-minilm (real MiniLM 384-d; rows 0..n-1 the base,
rows 100,000.. the queries). Two collections are built once and kept under
--cache (default /tmp/vecsift-overhead): index="hnsw" (m 16, ef_construction 64,
as in bench_pgvector.py), the same with codes="int8" (hnsw-int8) and index="bq"
(the default quantised codes).

One query per call, every variant on every query. Default (--repeat 1, "cold",
as a service sees it): query i goes to variant (i + pass) mod V over V passes,
so consecutive calls are different queries and no variant runs on a graph
another one just warmed; the median microseconds of a call, wall and CPU time
(process time: one thread except index_all_cores). --repeat R:
"warm", each variant answers each query R times in a row and the fastest call
counts (the order rotating from query to query); --reps passes.

  index        the wrapped index alone: HNSWIndex.search(q, k, ef, threads=1) /
               QuantBQDense.search with threads=1 (codes scan + float32 rescoring)
  search_rows  Collection.search_rows(q, k, ef=ef)            default arguments
  search       Collection.search(vector=q, k=k, ef=ef)        default arguments, Hits built
  search_t1    Collection.search(..., threads=1)
  index_all_cores  (bq) the stage with threads=0: the scan split over all cores, as a single
               query ran before (now it runs on the calling thread below 1M allowed rows)

Ratios are to `index` in the same run. Issue 11's bar: search <= 1.15x index.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import vecsift  # noqa: E402

DATA = "/work/shared/data/pypi-minilm/vectors.f16.npy"


def load(n):
    x = np.load(DATA).astype(np.float32)
    return np.ascontiguousarray(x[:n]), np.ascontiguousarray(x[100_000:])


def collection(path, kind, base):
    if os.path.exists(os.path.join(path, "MANIFEST")):
        c = vecsift.open(path, readonly=True)
        if len(c) == len(base):
            return c
        c.close()
        import shutil
        shutil.rmtree(path)
    t0 = time.perf_counter()
    params = {"m": 16, "ef_construction": 64} if kind.startswith("hnsw") else {}
    if kind == "hnsw-int8":
        params["codes"] = "int8"
    c = vecsift.Collection.create(path, base.shape[1], "cosine", index=kind.split("-")[0], **params)
    c.add([str(i) for i in range(len(base))], base)
    c.commit()
    c.close()
    print(f"built {kind} collection of {len(base)} rows in {time.perf_counter() - t0:.1f} s", flush=True)
    return vecsift.open(path, readonly=True)


def per_query(fn, qs):
    t0 = time.perf_counter()
    for q in qs:
        fn(q)
    return (time.perf_counter() - t0) / len(qs) * 1e6


def run(kind, coll, qs, k, ef, reps, repeat=5):
    snap = coll.snapshot()
    dense = snap.dense
    if kind.startswith("hnsw"):
        ix = dense.index

        def index(q):
            return ix.search(q, k, ef=ef, threads=1)
    else:
        live = snap.live
        n = len(live)

        def index(q):
            return dense.search(snap.vectors, q.reshape(1, -1), k, None, n, threads=1)

        def index_all_cores(q):
            return dense.search(snap.vectors, q.reshape(1, -1), k, None, n, threads=0)

    fns = {
        "index": index,
        "search_rows": lambda q: coll.search_rows(q, k, ef=ef),
        "search": lambda q: coll.search(vector=q, k=k, ef=ef),
        "search_t1": lambda q: coll.search(vector=q, k=k, ef=ef, threads=1),
    }
    if not kind.startswith("hnsw"):
        fns["index_all_cores"] = index_all_cores  # what threads=0 used to do with one query
    for fn in fns.values():
        per_query(fn, qs[:50])  # warm-up: pages of the graph and rows
    # Interleaved per call (index, search_rows, search, ... for each query in turn), so every variant sees
    # the same load on a shared machine; the median over all calls of each variant is kept.
    calls = {name: [] for name in fns}
    cpu = {name: [] for name in fns}
    clock, cclock = time.perf_counter, time.process_time
    order = list(fns.items())
    best = {name: [] for name in fns}
    cpu = {name: [] for name in fns}
    clock = time.perf_counter
    if repeat <= 1:
        # Cold, as a service sees it: query i goes to variant (i + pass) mod V, so consecutive calls
        # are different queries (no variant finds the graph warmed by another), and over V passes every
        # variant answers every query once. Mean microseconds of a call.
        cclock = time.process_time
        for p in range(len(order)):
            for i, q in enumerate(qs):
                name, fn = order[(i + p) % len(order)]
                c0, t0 = cclock(), clock()
                fn(q)
                t1, c1 = clock(), cclock()
                best[name].append(t1 - t0)
                cpu[name].append(c1 - c0)
    else:
        for _ in range(reps):
            for i, q in enumerate(qs):
                # warm: the variants take turns on each query (order rotating from query to query), each
                # answering it `repeat` times in a row, the fastest call counting
                r = i % len(order)
                for name, fn in order[r:] + order[:r]:
                    ts = []
                    for _ in range(repeat):
                        t0 = clock()
                        fn(q)
                        ts.append(clock() - t0)
                    best[name].append(min(ts))
    if repeat <= 1:  # medians: robust to the load spikes of a shared machine
        cmed = {name: 1e6 * float(np.median(c)) for name, c in cpu.items()}
        print(f"{kind:9s} cpu " + "  ".join(f"{name} {us:7.1f} us ({us / cmed['index']:4.2f}x)"
                                            for name, us in cmed.items()), flush=True)
        med = {name: 1e6 * float(np.median(c)) for name, c in best.items()}
    else:
        med = {name: 1e6 * float(np.mean(c)) for name, c in best.items()}
    base = med["index"]
    print(f"{kind:9s} wall " + "  ".join(f"{name} {us:7.1f} us ({us / base:4.2f}x)" for name, us in med.items()),
          flush=True)
    return med


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--ef", type=int, default=80)
    ap.add_argument("--kinds", default="hnsw,hnsw-int8,bq")
    ap.add_argument("--cache", default="/tmp/vecsift-overhead")
    a = ap.parse_args()
    base, queries = load(a.n)
    qs = [queries[i] for i in range(min(a.queries, len(queries)))]
    print(f"{platform.processor() or platform.machine()} cpus={os.cpu_count()} n={a.n} dim={base.shape[1]} "
          f"k={a.k} ef={a.ef} queries={len(qs)} reps={a.reps} repeat={a.repeat}; one query per call, "
          f"us a call ({'cold: consecutive calls are different queries, medians' if a.repeat <= 1 else 'warm: mean of the fastest of repeat'}); "
          f"ratio to the wrapped index", flush=True)
    for kind in a.kinds.split(","):
        coll = collection(os.path.join(a.cache, f"{kind}-{a.n}"), kind, base)
        run(kind, coll, qs, a.k, a.ef, a.reps, a.repeat)
        coll.close()


if __name__ == "__main__":
    main()
