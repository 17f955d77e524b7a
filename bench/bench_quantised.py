"""Quantised codes: recall@10 vs exact and first-stage time against faiss IndexRaBitQ and sign-bit Hamming.

Run under the shared lock:
    flock /tmp/vecsift-bench.lock python bench/bench_quantised.py [--rows 30000] [--reps 3]

Data: /work/shared/data/pypi-minilm (rows 0..rows-1 the base, rows 100,000..100,999 the held-out
queries; see its README) and GloVe 50-d (vecsift.tools.datasets.glove_50: 1,000 queries drawn with
seed 0 and removed from the base). Ground truth: vecsift.exact_search (cosine).

vecsift runs with its default rotation (random-sign Hadamard rounds, "fht"); rows marked "dense" use the
Haar matrix of earlier releases (rotation="dense"), for the recall and time that rotation costs.

First-stage time is the scan that returns k * oversample candidates (no rescoring), single thread:
threads=1 for vecsift, faiss.omp_set_num_threads(1). Two forms: all queries in one call (batch)
and one query per call. Libraries run interleaved (A, B, A, B ...) and the medians are reported with
their ratio. Recall is measured after exact float32 rescoring of the candidates (oversample > 1) or
on the estimates alone (oversample 1). numpy matmul is used only for rescoring, never timed.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np

import vecsift
from vecsift import _core

MINILM = "/work/shared/data/pypi-minilm/vectors.f16.npy"


def recall(ids, truth):
    return float(np.mean([len(set(a[:10]) & set(b)) / 10 for a, b in zip(ids, truth)]))


def rescore(base, queries, cand, k=10):
    out = np.empty((len(queries), k), dtype=np.int64)
    for i, (c, q) in enumerate(zip(cand, queries)):
        c = c[c >= 0]
        s = base[c] @ q  # rows are unit length: cosine
        out[i] = c[np.argsort(-s, kind="stable")[:k]]
    return out


def timed(fn, reps):
    """Median seconds of `reps` calls after one warm-up."""
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


class Vecsift:
    def __init__(self, base, bits, qb, code_dim=None, rotation="fht"):
        self.name = f"vecsift b{bits} q{qb}" + (f" cd{code_dim}" if code_dim else "") + (
            " dense" if rotation == "dense" else "")
        self.ix = vecsift.QuantizedIndex(base.shape[1], bits=bits, query_bits=qb, code_dim=code_dim,
                                         rotation=rotation)
        t = time.perf_counter()
        self.ix.add(base)
        self.build = time.perf_counter() - t
        self.qb = qb

    def batch(self, q, kk):
        return self.ix._index.search(q, kk, self.qb, None, None, 1)[0]

    def one(self, q, kk):
        s = self.ix._index.search
        for i in range(len(q)):
            s(q[i:i + 1], kk, self.qb, None, None, 1)


class Faiss:
    def __init__(self, base, bits, qb):
        import faiss
        faiss.omp_set_num_threads(1)
        self.name = f"faiss RaBitQ b{bits} q{qb}"
        self.ix = faiss.IndexRaBitQ(base.shape[1], faiss.METRIC_INNER_PRODUCT, bits)
        t = time.perf_counter()
        self.ix.train(base)
        self.ix.add(base)
        self.build = time.perf_counter() - t
        self.p = faiss.RaBitQSearchParameters()
        self.p.qb = qb

    def batch(self, q, kk):
        return self.ix.search(q, kk, params=self.p)[1]

    def one(self, q, kk):
        for i in range(len(q)):
            self.ix.search(q[i:i + 1], kk, params=self.p)


class Hamming:
    def __init__(self, base):
        self.name = "vecsift sign-bit Hamming"
        self.ix = vecsift.BinaryIndex(base.shape[1])
        self.ix.add(base)
        self.build = 0.0

    def batch(self, q, kk):
        return self.ix._index.search_codes(vecsift.binary_quantize(q), kk, None, None, 1)[0]

    def one(self, q, kk):
        s = self.ix._index.search_codes
        for i in range(len(q)):
            s(vecsift.binary_quantize(q[i:i + 1]), kk, None, None, 1)


def compare(base, queries, truth, rows, reps, n_one):
    """rows: list of (label, oversample, [engines]) compared interleaved."""
    print(f"{'setting':<36}{'engine':<30}{'recall@10':>10}{'batch us/q':>12}{'one us/q':>10}{'build s':>9}")
    results = []
    for label, os_, engines in rows:
        kk = 10 * os_
        rec = {}
        for e in engines:
            cand = e.batch(queries, kk)
            rec[e.name] = recall(rescore(base, queries, cand) if os_ > 1 else cand, truth)
        tb = {e.name: [] for e in engines}
        to = {e.name: [] for e in engines}
        for _ in range(reps):  # interleaved
            for e in engines:
                tb[e.name].append(timed(lambda: e.batch(queries, kk), 1) / len(queries))
                to[e.name].append(timed(lambda: e.one(queries[:n_one], kk), 1) / n_one)
        for e in engines:
            b, o = statistics.median(tb[e.name]) * 1e6, statistics.median(to[e.name]) * 1e6
            print(f"{label:<36}{e.name:<30}{rec[e.name]:>10.4f}{b:>12.1f}{o:>10.1f}{e.build:>9.2f}")
            results.append((label, e.name, rec[e.name], b, o))
        names = [e.name for e in engines]
        for other in names[1:]:
            rb = statistics.median(tb[other]) / statistics.median(tb[names[0]])
            ro = statistics.median(to[other]) / statistics.median(to[names[0]])
            print(f"{'':<36}{other + ' / ' + names[0].split()[0]:<30} time ratio batch {rb:.2f}x, one {ro:.2f}x")
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=30000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--one", type=int, default=300, help="queries timed one per call")
    ap.add_argument("--skip-glove", action="store_true")
    ap.add_argument("--only-glove", action="store_true")
    ap.add_argument("--collection", action="store_true", help="only the Collection policy table")
    args = ap.parse_args()
    if args.collection:
        return collection_bench(args.rows, args.reps)
    print(f"machine: {platform.machine()} {platform.processor() or ''} cores={_core.hardware_threads()} "
          f"simd={vecsift.cpu_features()['level']}")

    if not args.only_glove:
        minilm(args)
    if not args.skip_glove:
        glove(args)


def minilm(args):
    x = np.load(MINILM).astype(np.float32)
    base, queries = np.ascontiguousarray(x[:args.rows]), np.ascontiguousarray(x[100000:101000])
    truth, _ = vecsift.exact_search(base, queries, 10, "cosine")
    print(f"\n== PyPI MiniLM 384-d: {len(base)} rows, {len(queries)} held-out queries")
    ham = Hamming(base)
    rows = [
        ("1 bit, oversample 4", 4, [Vecsift(base, 1, 4), Faiss(base, 1, 4), ham, Vecsift(base, 1, 4, rotation="dense")]),
        ("1 bit, oversample 4, code_dim 384", 4, [Vecsift(base, 1, 4, 384), ham]),
        ("2 bits, oversample 2", 2, [Vecsift(base, 2, 4), Faiss(base, 2, 4), Vecsift(base, 2, 4, rotation="dense")]),
        ("2 bits, oversample 2, code_dim 384", 2, [Vecsift(base, 2, 4, 384)]),
        ("4 bits, no rescoring", 1, [Vecsift(base, 4, 8), Faiss(base, 4, 8), Faiss(base, 4, 4),
                                     Vecsift(base, 4, 8, rotation="dense")]),
        ("4 bits, no rescoring, query 4 bits", 1, [Vecsift(base, 4, 4), Faiss(base, 4, 4)]),
        ("sign bits, oversample 8", 8, [ham]),
    ]
    compare(base, queries, truth, rows, args.reps, args.one)


def glove(args):
    from vecsift.tools.datasets import glove_50
    gb, gq = glove_50(1000, 0)
    gt, _ = vecsift.exact_search(gb, gq, 10, "cosine")
    print(f"\n== GloVe 50-d: {len(gb)} rows, {len(gq)} queries")
    gh = Hamming(gb)
    rows = [
        ("1 bit, oversample 16", 16, [Vecsift(gb, 1, 4), gh]),
        ("2 bits, oversample 8", 8, [Vecsift(gb, 2, 4)]),
        ("4 bits, oversample 4", 4, [Vecsift(gb, 4, 8), Faiss(gb, 4, 8)]),
        ("4 bits, oversample 2", 2, [Vecsift(gb, 4, 8)]),
    ]
    compare(gb, gq, gt, rows, 1, 100)


def collection_bench(rows: int, reps: int):
    """Collection index="bq" policies: recall@10 and float32 rows rescored per query."""
    import tempfile

    x = np.load(MINILM).astype(np.float32)
    base, queries = np.ascontiguousarray(x[:rows]), np.ascontiguousarray(x[100000:101000])
    truth, _ = vecsift.exact_search(base, queries, 10, "cosine")
    print(f"\n== Collection bq policies, PyPI MiniLM: {len(base)} rows, {len(queries)} held-out queries")
    print(f"{'params':<58}{'recall@10':>10}{'rescored/q':>11}{'us/q one':>10}{'index us/q':>11}")
    settings = [dict(bits=None, oversample=16), dict(bits=None, oversample=4), dict(),
                dict(bits=1, policy="fixed"), dict(bits=2, policy="fixed"), dict(bits=2, policy="fixed", oversample=1),
                dict(bits=4, rescore="none"), dict(bits=2, confidence=1.5), dict(bits=1, oversample=8),
                dict(bits=1, oversample=8, confidence=1.5)]
    with tempfile.TemporaryDirectory() as d:
        for i, kw in enumerate(settings):
            c = vecsift.Collection.create(f"{d}/c{i}", 384, **kw)
            c.add([str(j) for j in range(len(base))], base)
            c.commit()
            got, _ = c.search_rows(queries, k=10)
            dense = c._dense
            rescored = getattr(dense, "rescored", 0) / len(queries)  # mean over the batch
            rec = recall(got, truth)
            one = timed(lambda: [c.search_rows(q, k=10, threads=1) for q in queries[:200]], reps) / 200
            if hasattr(dense, "rescored"):
                per_q = f"{rescored:.1f}"
                ix = dense.index
                over = dense.oversample
                raw = timed(lambda: [ix._index.search(q[None], 10 * over, ix.query_bits, None, None, 1)
                                     for q in queries[:200]], reps) / 200
            else:
                per_q = 10 * int(dense.oversample)
                raw = float("nan")
            shown = {k: v for k, v in c.index_params.items() if k not in ("seed", "min_candidates")}
            print(f"{str(shown):<58}{rec:>10.4f}{per_q:>11}{one * 1e6:>10.1f}{raw * 1e6:>11.1f}")
            c.close()


if __name__ == "__main__":
    main()
