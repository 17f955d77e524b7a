"""The planner's crossover: scoring the allowed rows exactly vs asking the index, by allow-set size.

On the PyPI MiniLM set (100k x 384 real embeddings, /work/shared/data/pypi-minilm), one query at a
time on one thread (the collection's per-query path), for random allow sets of A rows:

    exact   the float32 rows of the allow set scored from the memmap (collection/stages/dense.exact_rows)
    bq      the Hamming scan of the allowed codes + float32 rescoring of k * oversample (BQDense.search)
    walk    the HNSW walk restricted to the allow set (forced: _filter_mode=1, ef=64)
    hscan   HNSW's own exact scan of the allowed rows (forced: _filter_mode=2)

Prints median microseconds per query (interleaved) and recall@10 against exact, so the floor of
index/planner.hpp (EXACT_BELOW) and the graph term (kScanGamma) can be read off.

    flock /tmp/vecsift-bench.lock python bench/bench_planner.py
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from pyroaring import BitMap

sys.path.insert(0, os.path.dirname(__file__))
from timing import interleaved  # noqa: E402

import vecsift  # noqa: E402
from vecsift.collection.filters import rows_of  # noqa: E402
from vecsift.collection.stages.dense import exact_rows  # noqa: E402
from vecsift.index.planner import scan_exactly  # noqa: E402

DATA = "/work/shared/data/pypi-minilm/vectors.f16.npy"


def collection(path, x, index):
    if os.path.exists(os.path.join(path, "MANIFEST")):
        return vecsift.open(path, readonly=True)
    params = {"m": 16, "ef_construction": 100} if index == "hnsw" else {}
    c = vecsift.Collection.create(path, dim=x.shape[1], metric="cosine", index=index, **params)
    c.add([str(i) for i in range(len(x))], x)
    c.commit()
    c.close()
    return vecsift.open(path, readonly=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default="/tmp/vecsift-bench-planner")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--sizes", default="256,512,1024,2048,4096,8192,16384,32768")
    args = ap.parse_args()
    v = np.load(DATA).astype(np.float32)
    x, queries = v[:100_000], v[100_000:100_000 + args.queries]
    os.makedirs(args.cache, exist_ok=True)
    bq = collection(os.path.join(args.cache, "bq"), x, "bq").snapshot()
    hn = collection(os.path.join(args.cache, "hnsw"), x, "hnsw").snapshot()
    k, ef = 10, 64
    rng = np.random.default_rng(0)
    print(f"n={len(x)} dim={x.shape[1]} k={k} ef={ef} one thread; median us/query; recall@10 vs exact")
    print(f"{'allowed':>8} {'exact':>8} {'bq':>8} {'walk':>8} {'hscan':>8}  {'r_bq':>5} {'r_walk':>6}  planner")
    for a in [int(s) for s in args.sizes.split(",")]:
        allow = BitMap(np.sort(rng.choice(len(x), a, replace=False)).astype(np.uint32))
        rows = rows_of(allow)
        ids = rows.astype(np.int64)
        q1 = [queries[i:i + 1] for i in range(len(queries))]
        fns = {
            "exact": lambda: [exact_rows(bq.vectors, q, rows, k, "cosine", 1) for q in q1],
            "bq": lambda: [bq.dense.search(bq.vectors, q, k, allow, a, threads=1) for q in q1],
            "walk": lambda: [hn.dense.index.search(q, k, ef=ef, allow=ids, threads=1, _filter_mode=1) for q in q1],
            "hscan": lambda: [hn.dense.index.search(q, k, ef=ef, allow=ids, threads=1, _filter_mode=2) for q in q1],
        }
        t = interleaved(fns, reps=3)
        truth = exact_rows(bq.vectors, queries, rows, k, "cosine", 1)[0]
        got_bq = bq.dense.search(bq.vectors, queries, k, allow, a, threads=1)[0]
        got_walk = hn.dense.index.search(queries, k, ef=ef, allow=ids, threads=1, _filter_mode=1)[0]
        rec = lambda got: np.mean([len(set(g) & set(t_)) / k for g, t_ in zip(got, truth)])  # noqa: E731
        us = {n: 1e6 * s / len(queries) for n, s in t.items()}
        plan = "exact" if scan_exactly(a, k * bq.dense.oversample) else "index"
        hplan = "scan" if scan_exactly(a, k, len(x), ef) else "walk"
        print(f"{a:>8} {us['exact']:>8.0f} {us['bq']:>8.0f} {us['walk']:>8.0f} {us['hscan']:>8.0f}  "
              f"{rec(got_bq):>5.2f} {rec(got_walk):>6.2f}  bq:{plan} hnsw:{hplan}")


if __name__ == "__main__":
    main()
