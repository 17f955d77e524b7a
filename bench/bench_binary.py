"""Hamming scan and exact search benchmarks (issue 2), vecsift next to faiss and numpy.

    python bench/bench_binary.py [--rows 1000000] [--bits 1024] [--reps 9] [--out bench/results]

(a) one query, one thread over `rows` random codes: ms per scan and GB/s of
    codes, next to this machine's single-thread read bandwidth measured in the
    same run (a wide-load OR loop over 1 GiB) and faiss.IndexBinaryFlat;
(b) 100 queries, all threads: queries/s, next to faiss with as many threads;
(c) exact_search vs numpy (matmul + argpartition, chunked) for 1,000 GloVe
    queries over the 399k remaining rows, and 1,000 x 400k x 384 random.
Runs are interleaved (A, B, A, B) and medians reported.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

import vecsift
from timing import interleaved
from vecsift import _core
from vecsift.tools.datasets import glove_50


def numpy_topk(base, queries, k, chunk=64):
    out = np.empty((len(queries), k), np.int64)
    for s in range(0, len(queries), chunk):
        scores = queries[s:s + chunk] @ base.T
        part = np.argpartition(-scores, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(scores, part, 1), axis=1)
        out[s:s + chunk] = np.take_along_axis(part, order, 1)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--bits", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--skip-exact", action="store_true")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    import faiss

    threads = _core.hardware_threads()
    res = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
           "cpu": vecsift.cpu_features(), "rows": args.rows, "bits": args.bits, "threads": threads}
    rng = np.random.default_rng(0)
    width = args.bits // 8
    codes = rng.integers(0, 256, (args.rows, width), dtype=np.uint8)
    queries = rng.integers(0, 256, (100, width), dtype=np.uint8)
    index = vecsift.BinaryIndex(args.bits)
    index.add(codes)
    findex = faiss.IndexBinaryFlat(args.bits)
    findex.add(codes)
    probe = np.ones(1 << 30, np.uint8)

    # (a) single query, single thread
    faiss.omp_set_num_threads(1)
    t = interleaved({
        "read_probe_1GiB": lambda: _core.read_probe(probe),
        "vecsift": lambda: index.search(queries[:1], 10, threads=1),
        "faiss": lambda: findex.search(queries[:1], 10),
    }, args.reps)
    bw = probe.size / t["read_probe_1GiB"] / 1e9
    scanned = codes.nbytes / 1e9
    res["single"] = {
        "read_bandwidth_GBps": bw,
        "vecsift_ms": t["vecsift"] * 1e3, "vecsift_GBps": scanned / t["vecsift"],
        "faiss_ms": t["faiss"] * 1e3, "faiss_GBps": scanned / t["faiss"],
    }
    s = res["single"]
    print(f"(a) single query, 1 thread, {args.rows} x {args.bits} bits ({scanned:.3f} GB)")
    print(f"    read bandwidth      {bw:6.1f} GB/s")
    print(f"    vecsift  {s['vecsift_ms']:7.2f} ms  {s['vecsift_GBps']:6.1f} GB/s  "
          f"({100 * s['vecsift_GBps'] / bw:.0f}% of read bandwidth)")
    print(f"    faiss    {s['faiss_ms']:7.2f} ms  {s['faiss_GBps']:6.1f} GB/s  "
          f"({100 * s['faiss_GBps'] / bw:.0f}% of read bandwidth)")
    del probe

    # (b) 100 queries, all threads
    faiss.omp_set_num_threads(threads)
    t = interleaved({
        "vecsift": lambda: index.search(queries, 10, threads=threads),
        "faiss": lambda: findex.search(queries, 10),
    }, max(3, args.reps // 2))
    res["batch"] = {"vecsift_qps": 100 / t["vecsift"], "faiss_qps": 100 / t["faiss"],
                    "ratio": t["faiss"] / t["vecsift"]}
    b = res["batch"]
    print(f"(b) 100 queries, {threads} threads: vecsift {b['vecsift_qps']:.0f} q/s, "
          f"faiss {b['faiss_qps']:.0f} q/s, ratio {b['ratio']:.2f}x")
    # Same answers (distances; ids may differ only in tie order).
    vd = index.search(queries[:5], 10)[1]
    fd = findex.search(queries[:5], 10)[0]
    assert (vd == fd).all(), "vecsift and faiss disagree on distances"
    del index, findex, codes

    if not args.skip_exact:
        base, gq = glove_50()
        t = interleaved({
            "vecsift": lambda: vecsift.exact_search(base, gq, 10, "ip", threads=threads),
            "numpy": lambda: numpy_topk(base, gq, 10),
        }, 3)
        res["exact_glove"] = {"rows": len(base), "queries": len(gq), "vecsift_s": t["vecsift"],
                              "numpy_s": t["numpy"], "ratio": t["numpy"] / t["vecsift"]}
        e = res["exact_glove"]
        print(f"(c) exact_search 1000 x {len(base)} x 50 (GloVe): vecsift {e['vecsift_s']:.2f} s, "
              f"numpy matmul+argpartition {e['numpy_s']:.2f} s, ratio {e['ratio']:.2f}x")
        big = np.random.default_rng(1).standard_normal((400_000, 384), dtype=np.float32)
        bq = np.random.default_rng(2).standard_normal((1000, 384), dtype=np.float32)
        t = interleaved({
            "vecsift": lambda: vecsift.exact_search(big, bq, 10, "ip", threads=threads),
            "numpy": lambda: numpy_topk(big, bq, 10),
        }, 1)
        res["exact_384"] = {"vecsift_s": t["vecsift"], "numpy_s": t["numpy"], "ratio": t["numpy"] / t["vecsift"]}
        e = res["exact_384"]
        print(f"    exact_search 1000 x 400000 x 384 (random): vecsift {e['vecsift_s']:.2f} s, "
              f"numpy {e['numpy_s']:.2f} s, ratio {e['ratio']:.2f}x")
        print(f"    (numpy uses OpenBLAS; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')})")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_binary.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
