"""Collection benchmarks (issue 4): recall vs exact and speed on real MiniLM vectors; 1M rows at scale.

    flock /work/bench.lock python bench/bench_collection.py [--data DIR] [--rows 1000000] [--out bench/results]

(a) PyPI summaries embedded with all-MiniLM-L6-v2 (DIR/vectors.f16.npy: rows
    0..99,999 base, 100,000..100,999 queries, converted to float32): for
    index="bq" at oversample 1, 2, 4, 8, 16, 32 the recall@10 against
    vecsift.exact_search and queries/s (1,000-query batch on all cores; one
    query per call with threads=1), next to faiss IndexBinaryFlat + numpy
    rescoring at the same oversample and faiss IndexFlatIP (exact, float32 in
    RAM); index="hnsw" at an ef sweep when vecsift.HNSWIndex exists; RSS after
    open (fresh process); tenant-filtered search for a 1% and a 10% tenant
    against exact search over that tenant's rows.
(b) a synthetic collection of --rows 384-d rows added 100k per call: add rows/s,
    commit, open (fresh process), RSS after open and after searching (float32
    rows stay on disk), batch and single-query QPS, delete 10% + compact().
Medians of --reps repetitions after a warm-up; reference runs interleaved.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import vecsift
from timing import interleaved

K = 10


def rss_mb() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.split(":")[0] in ("VmRSS", "RssAnon", "RssFile"):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


def recall(found, truth, k=K) -> float:
    return float(np.mean([len(np.intersect1d(f[:k][f[:k] >= 0], t[:k][t[:k] >= 0])) / max(1, (t[:k] >= 0).sum())
                          for f, t in zip(found, truth)]))


def child_open(path: str, queries_path: str) -> None:
    """Runs in a fresh process with the float32 file evicted from the page cache (a cold open):
    open time, RSS after open and after one batch of searches."""
    import glob

    for f in glob.glob(os.path.join(path, "vectors-*.f32")):
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    before = rss_mb()
    t0 = time.perf_counter()
    c = vecsift.open(path, readonly=True)
    t_open = time.perf_counter() - t0
    after_open = rss_mb()
    q = np.load(queries_path)
    t0 = time.perf_counter()
    c.search_rows(q, k=K)
    t_batch = time.perf_counter() - t0
    after_search = rss_mb()
    print(json.dumps({"open_s": t_open, "rss_before_open_mb": before, "rss_after_open_mb": after_open,
                      "rss_after_search_mb": after_search, "first_batch_s": t_batch, "rows": len(c)}))


def fresh_open(path, queries) -> dict:
    qp = os.path.join(path, "..", "queries.npy")
    np.save(qp, queries)
    out = subprocess.run([sys.executable, __file__, "--child-open", str(path), qp], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def single_qps(fn, queries, reps) -> float:
    def run():
        for q in queries:
            fn(q)
    return len(queries) / interleaved({"x": run}, reps)["x"]


def bench_minilm(data: Path, work: Path, reps: int) -> dict:
    import faiss

    x = np.load(data / "vectors.f16.npy").astype(np.float32)
    base, queries = np.ascontiguousarray(x[:100_000]), np.ascontiguousarray(x[100_000:101_000])
    n, dim = base.shape
    res = {"rows": n, "queries": len(queries), "dim": dim}
    truth, _ = vecsift.exact_search(base, queries, K, "cosine")
    ids = np.char.add("p", np.arange(n).astype(str))

    t0 = time.perf_counter()
    c = vecsift.Collection.create(work / "minilm-bq", dim, metric="cosine", index="bq", model="all-MiniLM-L6-v2")
    c.add(ids, base)
    t_add = time.perf_counter() - t0
    t0 = time.perf_counter()
    c.commit()
    res["bq_add_s"], res["bq_commit_s"] = t_add, time.perf_counter() - t0

    faiss.omp_set_num_threads(os.cpu_count())
    fb = faiss.IndexBinaryFlat(dim)
    fb.add(vecsift.binary_quantize(base))
    qcodes = vecsift.binary_quantize(queries)
    flat = faiss.IndexFlatIP(dim)
    flat.add(base)

    def faiss_bq(os_):
        _, cand = fb.search(qcodes, K * os_)
        sims = np.matmul(base[cand], queries[:, :, None])[:, :, 0]
        order = np.argsort(-sims, axis=1)[:, :K]
        return np.take_along_axis(cand, order, 1)

    sweep = []
    for over in (1, 2, 4, 8, 16, 32):
        rows, _ = c.search_rows(queries, k=K, oversample=over)
        t = interleaved({"vecsift": lambda: c.search_rows(queries, k=K, oversample=over),
                         "faiss_bq_rescore": lambda: faiss_bq(over)}, reps)
        qps1 = single_qps(lambda q: c.search_rows(q, k=K, oversample=over, threads=1), queries[:200], max(1, reps // 3))
        sweep.append({"oversample": over, "recall@10": recall(rows, truth),
                      "faiss_bq_rescore_recall@10": recall(faiss_bq(over), truth),
                      "batch_qps": len(queries) / t["vecsift"],
                      "faiss_bq_rescore_batch_qps": len(queries) / t["faiss_bq_rescore"],
                      "single_thread_qps": qps1})
        print("bq", sweep[-1], flush=True)
    res["bq_sweep"] = sweep
    chosen = next((s["oversample"] for s in sweep if s["recall@10"] >= 0.95), None)
    res["bq_smallest_oversample_recall_0.95"] = chosen
    t = interleaved({"faiss_flat": lambda: flat.search(queries, K),
                     "vecsift_exact": lambda: vecsift.exact_search(base, queries, K, "cosine")}, reps)
    res["exact_batch_qps"] = {k: len(queries) / v for k, v in t.items()}
    c.close()
    res["bq_open"] = fresh_open(work / "minilm-bq", queries)
    print("bq open", res["bq_open"], flush=True)

    # tenants: a 1% and a 10% tenant, the rest in a third
    tenant = np.full(n, "rest", dtype=object)
    tenant[np.arange(n) % 100 == 0] = "t1pct"
    tenant[np.arange(n) % 10 == 5] = "t10pct"
    c = vecsift.Collection.create(work / "minilm-tenants", dim, index="bq")
    c.add(ids, base, tenant=tenant.astype(str))
    c.commit()
    filt = {}
    for name in ("t1pct", "t10pct"):
        allowed = np.flatnonzero(tenant == name)
        ftruth, _ = vecsift.exact_search(base, queries, K, "cosine", allow=allowed)
        rows, _ = c.search_rows(queries, k=K, tenant=name)
        t = interleaved({"vecsift": lambda: c.search_rows(queries, k=K, tenant=name),
                         "exact_over_allowed": lambda: vecsift.exact_search(base, queries, K, "cosine",
                                                                            allow=allowed)}, reps)
        qps1 = single_qps(lambda q: c.search_rows(q, k=K, tenant=name, threads=1), queries[:200], max(1, reps // 3))
        filt[name] = {"allowed_rows": int(len(allowed)), "recall@10": recall(rows, ftruth),
                      "full_k_returned": float((rows >= 0).all(axis=1).mean()),
                      "batch_qps": len(queries) / t["vecsift"],
                      "exact_over_allowed_batch_qps": len(queries) / t["exact_over_allowed"],
                      "single_thread_qps": qps1}
        print("filtered", name, filt[name], flush=True)
    res["filtered"] = filt
    c.close()

    if hasattr(vecsift, "HNSWIndex"):
        t0 = time.perf_counter()
        c = vecsift.Collection.create(work / "minilm-hnsw", dim, index="hnsw", m=16, ef_construction=200)
        c.add(ids, base)
        c.commit()
        res["hnsw_build_s"] = time.perf_counter() - t0
        hs = []
        for ef in (16, 32, 64, 128, 256):
            rows, _ = c.search_rows(queries, k=K, ef=ef)
            t = interleaved({"vecsift": lambda: c.search_rows(queries, k=K, ef=ef)}, reps)
            qps1 = single_qps(lambda q: c.search_rows(q, k=K, ef=ef, threads=1), queries[:200], max(1, reps // 3))
            hs.append({"ef": ef, "recall@10": recall(rows, truth), "batch_qps": len(queries) / t["vecsift"],
                       "single_thread_qps": qps1})
            print("hnsw", hs[-1], flush=True)
        res["hnsw_sweep"] = hs
        c.close()
        res["hnsw_open"] = fresh_open(work / "minilm-hnsw", queries)
    return res


def bench_scale(rows: int, work: Path, reps: int) -> dict:
    dim, step = 384, 100_000
    path = work / "scale"
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((256, dim)).astype(np.float32)
    c = vecsift.Collection.create(path, dim, index="bq", filter_fields=["kind"])
    t_add = 0.0
    for s in range(0, rows, step):
        m = min(step, rows - s)
        r = np.random.default_rng(s)
        x = centers[r.integers(0, 256, m)] + 0.5 * r.standard_normal((m, dim)).astype(np.float32)
        idx = np.arange(s, s + m)
        ids = np.char.add("r", idx.astype(str))
        docs = np.char.add("d", (idx // 10).astype(str))
        texts = np.char.add("synthetic chunk number ", idx.astype(str))
        t0 = time.perf_counter()
        c.add(ids, x, texts=texts, doc_ids=docs, metadata={"kind": idx % 5})
        t_add += time.perf_counter() - t0
    t0 = time.perf_counter()
    c.commit()
    t_commit = time.perf_counter() - t0
    res = {"rows": rows, "dim": dim, "add_rows_per_s": rows / t_add, "add_s": t_add, "commit_s": t_commit,
           "vectors_file_mb": os.path.getsize(path / c.manifest.vectors["file"]) / 2**20}
    queries = (centers[rng.integers(0, 256, 100)] + 0.5 * rng.standard_normal((100, dim))).astype(np.float32)
    t = interleaved({"batch": lambda: c.search_rows(queries, k=K)}, reps)
    res["batch_qps_100q"] = len(queries) / t["batch"]
    res["single_thread_qps"] = single_qps(lambda q: c.search_rows(q, k=K, threads=1), queries[:50], max(1, reps // 3))
    res["single_qps_all_threads"] = single_qps(lambda q: c.search_rows(q, k=K), queries[:50], max(1, reps // 3))
    c.close()
    res["open"] = fresh_open(path, queries)
    print("scale", res, flush=True)
    c = vecsift.open(path)
    t0 = time.perf_counter()
    c.delete(doc_ids=np.char.add("d", np.arange(0, rows // 10, 10).astype(str)).tolist())  # 10% of rows
    c.commit()
    res["delete_10pct_commit_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    c.compact()
    res["compact_s"] = time.perf_counter() - t0
    res["rows_after_compact"] = len(c)
    c.close()
    print("compact", res["compact_s"], flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/work/shared/data/pypi-minilm")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--work", default=None, help="scratch directory (default: a temp dir, removed)")
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--skip-minilm", action="store_true")
    ap.add_argument("--child-open", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_open:
        return child_open(*args.child_open)
    work = Path(args.work or tempfile.mkdtemp(prefix="vecsift-bench-", dir="/work" if os.path.isdir("/work") else None))
    work.mkdir(parents=True, exist_ok=True)
    try:
        res = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                           "features": vecsift.cpu_features(), "python": platform.python_version()},
               "note": "batch QPS: 1,000 queries in one call, all cores; the rescoring uses numpy matmul"}
        if not args.skip_minilm:
            res["minilm"] = bench_minilm(Path(args.data), work, args.reps)
        if not args.skip_scale:
            res["scale"] = bench_scale(args.rows, work, args.reps)
        os.makedirs(args.out, exist_ok=True)
        name = "bench_collection.json" if not (args.skip_minilm or args.skip_scale) else \
            f"bench_collection_{'scale' if args.skip_minilm else 'minilm'}.json"
        with open(os.path.join(args.out, name), "w") as f:
            json.dump(res, f, indent=2)
        print(json.dumps(res, indent=2))
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
