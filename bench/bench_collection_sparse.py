"""Collection.search in sparse and hybrid mode against BM25Index.search (issue 5 bar: sparse within 1.5x).

    python bench/bench_collection_sparse.py [--reps 5]

Same corpus (the committed docstring set), same queries, single thread, one
query per call, interleaved per repetition, medians. The Collection path adds
the allow-set computation, the BM25 stage inside the collection and building
Hit objects (text, provenance) for the k results.
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
from bench_bm25 import load_set  # noqa: E402


def per_query_us(fn, queries):
    t0 = time.perf_counter()
    for q in queries:
        fn(q)
    return (time.perf_counter() - t0) / len(queries) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
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
        for fn in runs.values():
            per_query_us(fn, queries[:100])  # warm-up (numba compile, page cache)
        times = {name: [] for name in runs}
        for _ in range(args.reps):
            for name, fn in runs.items():
                times[name].append(per_query_us(fn, queries))
        coll.close()
    base = statistics.median(times["BM25Index.search"])
    print(f"{len(docs)} documents, {len(queries)} queries, k=10, one query per call, median of {args.reps}")
    for name, t in times.items():
        m = statistics.median(t)
        print(f"  {name:<20} {m:8.1f} us/query   {m / base:5.2f}x BM25Index.search")


if __name__ == "__main__":
    main()
