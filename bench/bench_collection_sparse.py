"""Collection.search in sparse and hybrid mode against BM25Index.search (issue 5 bar: sparse within 1.5x).

    python bench/bench_collection_sparse.py [--reps 7] [--big 54000]

Same corpus (the committed docstring set), same queries, single thread, one
query per call. Interleaved in blocks of 50 queries (A, B, C, D over a block,
the starting one rotating), so drift on a shared machine hits all alike; per
repetition each path's total over all queries, then medians, and the median of
the per-repetition ratios. The Collection path adds the allow-set computation,
the BM25 stage inside the collection and building the Hit objects (id, text,
ranks) of the k results.

--big N also times a corpus of N docstring paragraphs (bench_bm25.big_corpus)
with tenant filters: ten tenants (row % 10), so a tenant is 10% of the rows.
A collection with tenants scores BM25 with the statistics of the tenant's rows
(statistics="allowed": df counted in the query terms' postings per query);
the lines "allow 10%" show BM25Index itself with that filter and either
statistics, to separate the filter's cost from the collection's.

Last, hybrid batches (search_batch with vectors and texts, 2 threads) with BM25
run inline or on a helper thread beside the dense stage, by batch size: where
collection/search.py HYBRID_PARALLEL_MIN comes from.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import vecsift

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_bm25 import big_corpus, load_set  # noqa: E402


def interleaved_blocks(runs: dict, queries, reps: int, block: int = 50) -> dict:
    """{name: [us per query of each repetition]}."""
    names = list(runs)
    out = {name: [] for name in names}
    for _ in range(reps):
        total = dict.fromkeys(names, 0.0)
        for b, start in enumerate(range(0, len(queries), block)):
            chunk = queries[start:start + block]
            for name in names[b % len(names):] + names[:b % len(names)]:
                fn = runs[name]
                t0 = time.perf_counter()
                for q in chunk:
                    fn(q)
                total[name] += time.perf_counter() - t0
        for name in names:
            out[name].append(total[name] / len(queries) * 1e6)
    return out


def report(title, times, base_name="BM25Index.search"):
    base = times[base_name]
    print(title)
    for name, t in times.items():
        ratio = statistics.median([a / b for a, b in zip(t, base)])
        print(f"  {name:<34} {statistics.median(t):8.1f} us/query   {ratio:5.2f}x {base_name}")


def big_run(n, reps):
    from pyroaring import BitMap

    docs, queries = big_corpus(n)
    index = vecsift.BM25Index()
    index.add(docs)
    index.merge()
    vecs = np.random.default_rng(0).standard_normal((len(docs), 8)).astype(np.float32)
    tenants = [f"t{i % 10}" for i in range(len(docs))]
    tenant3 = BitMap(range(3, len(docs), 10))
    with tempfile.TemporaryDirectory() as tmp:
        plain = vecsift.Collection.create(Path(tmp) / "p", dim=8)
        plain.add(ids=[str(i) for i in range(len(docs))], vectors=vecs, texts=docs)
        plain.commit()
        shared = vecsift.Collection.create(Path(tmp) / "t", dim=8)
        shared.add(ids=[str(i) for i in range(len(docs))], vectors=vecs, texts=docs, tenant=tenants)
        shared.commit()
        runs = {
            "BM25Index.search": lambda q: index.search(q, k=10),
            "Collection sparse": lambda q: plain.search(text=q, k=10, mode="sparse"),
            "BM25Index.search allow 10%": lambda q: index.search(q, k=10, allow=tenant3),
            "BM25Index.search allow 10% allowed": lambda q: index.search(q, k=10, allow=tenant3,
                                                                       statistics="allowed"),
            "Collection sparse tenant 10%": lambda q: shared.search(text=q, k=10, tenant="t3"),
        }
        for q in queries[:50]:  # the tenant's hits are what an index of its rows alone returns
            rows, _ = index.search(q, k=10, allow=tenant3, statistics="allowed")
            assert [h.id for h in shared.search(text=q, k=10, tenant="t3")] == [str(r) for r in rows]
        for fn in runs.values():
            for q in queries[:100]:
                fn(q)
        times = interleaved_blocks(runs, queries, reps)
        plain.close()
        shared.close()
    report(f"{len(docs)} documents, {len(queries)} queries, k=10, one query per call, median of {reps}", times)


def hybrid_batches(coll, queries, qv, reps):
    import vecsift.collection.search as C

    qs, vs = queries[:320], qv[:320]
    saved = C.HYBRID_PARALLEL_MIN
    print("hybrid search_batch, us per query (BM25 inline / on a helper thread), median of", reps)
    try:
        for bs in (1, 2, 8, 32):
            def run(bs=bs):
                for i in range(0, len(qs), bs):
                    coll.search_batch(vs[i:i + bs], qs[i:i + bs], k=10)
            med = {}
            for name, limit in (("inline", 10**9), ("helper", 1)):
                C.HYBRID_PARALLEL_MIN = limit
                run()
                ts = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    run()
                    ts.append((time.perf_counter() - t0) / len(qs) * 1e6)
                med[name] = statistics.median(ts)
            print(f"  batch {bs:>3}: inline {med['inline']:7.1f}   helper {med['helper']:7.1f}")
    finally:
        C.HYBRID_PARALLEL_MIN = saved


def rrf_timing(reps=5, n=2000):
    """vecsift.rrf on two lists of 100 ids (overlapping at random), us per call."""
    import timeit

    rng = np.random.default_rng(0)
    a, b = rng.choice(1592, 100, replace=False), rng.choice(1592, 100, replace=False)
    fn = lambda: vecsift.rrf([a, b], k=60, top_n=10, return_ranks=True)  # noqa: E731
    us = min(timeit.repeat(fn, number=n, repeat=reps)) / n * 1e6
    print(f"rrf, two lists of 100, top 10 with ranks: {us:.1f} us per call (best of {reps})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--big", type=int, default=0, help="also time a corpus of this many docstrings, with tenants")
    args = ap.parse_args()
    docs, queries, _, dv, qv = load_set()
    index = vecsift.BM25Index()
    index.add(docs)
    index.merge()
    with tempfile.TemporaryDirectory() as tmp:
        coll = vecsift.Collection.create(Path(tmp) / "c", dim=dv.shape[1], metric="cosine", index="bq")
        coll.add(ids=[str(i) for i in range(len(docs))], vectors=dv, texts=docs)
        coll.commit()
        qvec = dict(zip(queries, qv))
        runs = {
            "BM25Index.search": lambda q: index.search(q, k=10),
            "Collection sparse": lambda q: coll.search(text=q, k=10, mode="sparse", threads=1),
            "Collection dense": lambda q: coll.search(vector=qvec[q], k=10, mode="dense", threads=1),
            "Collection hybrid": lambda q: coll.search(vector=qvec[q], text=q, k=10, threads=1),
        }
        # Same answers: the collection's sparse rows are BM25Index's rows.
        for q in queries[:50]:
            rows, _ = index.search(q, k=10)
            assert [h.id for h in coll.search(text=q, k=10, mode="sparse")] == [str(r) for r in rows]
        for fn in runs.values():  # warm-up (numba compile, page cache)
            for q in queries[:100]:
                fn(q)
        times = interleaved_blocks(runs, queries, args.reps)
        report(f"{len(docs)} documents, {len(queries)} queries, k=10, one query per call, median of {args.reps}",
               times)
        hybrid_batches(coll, queries, qv, 3)
        coll.close()
    rrf_timing()
    if args.big:
        big_run(args.big, args.reps)


if __name__ == "__main__":
    main()
