"""`vecsift bench`: recall against exact search and speed, for vecsift's indexes
and, in the same run, the reference libraries.

For every index the sweep records, per parameter value (ef for HNSW,
oversample for binary quantisation + rescoring): recall@k against exact
ground truth, single-thread QPS (one query per call), batch QPS (all queries
in one call, all cores), build seconds and bytes per vector.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np

from vecsift import _core
from vecsift.index.binary import BinaryIndex
from vecsift.tools.datasets import glove_50, split_queries
from vecsift.collection.stages.dense import rescore
from vecsift.eval import recall_at_k
from vecsift.index.flat import exact_search
from vecsift.tools.progress import progress_bar
from vecsift.tools.reference_libs import make_adapter

EF_VALUES = (10, 20, 40, 80, 160, 320, 640)
OVERSAMPLE_VALUES = (1, 2, 4, 8, 16, 32, 64)


def load_dataset(spec: str, n_queries: int, seed: int = 0, column: str = "vector"):
    """(base, queries, name) for 'glove-50', a .npy matrix or a Parquet file."""
    if spec == "glove-50":
        base, queries = glove_50(n_queries, seed)
        return base, queries, "glove-50"
    path = Path(spec)
    if not path.exists():
        raise FileNotFoundError(f"dataset {spec!r}: no such file (use glove-50, PATH.npy or PATH.parquet)")
    if path.suffix == ".npy":
        x = np.load(path, mmap_mode="r")
    elif path.suffix in (".parquet", ".pq"):
        x = _parquet_vectors(path, column)
    else:
        raise ValueError(f"dataset {spec!r}: expected glove-50, a .npy or a .parquet file")
    if x.ndim != 2:
        raise ValueError(f"dataset {spec!r}: expected a 2-d matrix, got shape {x.shape}")
    if n_queries >= len(x):
        raise ValueError(f"dataset {spec!r} has {len(x)} rows, too few for {n_queries} queries")
    base, queries = split_queries(np.asarray(x, dtype=np.float32), n_queries, seed)
    return base, queries, path.stem


def _parquet_vectors(path: Path, column: str) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pq.read_table(path)
    if column not in table.column_names:
        raise ValueError(f"{path}: no column {column!r} (columns: {', '.join(table.column_names)})")
    col = table.column(column).combine_chunks()
    if not pa.types.is_fixed_size_list(col.type):
        raise ValueError(f"{path}: column {column!r} must be fixed_size_list<float32>, got {col.type}")
    return col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), col.type.list_size)


def ground_truth(base, queries, k, metric, cache_dir: Path | None, name: str):
    """Exact top-k ids, cached next to the output keyed by the data's content."""
    h = hashlib.sha1()
    for arr in (base[:: max(1, len(base) // 1000)], queries):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update(f"{base.shape}{queries.shape}{k}{metric}".encode())
    path = cache_dir / f"groundtruth-{name}-{h.hexdigest()[:12]}.npz" if cache_dir else None
    if path and path.exists():
        return np.load(path)["ids"]
    ids, _ = exact_search(base, queries, k, metric)
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, ids=ids)
    return ids


def _qps_single(search_one, queries, budget_s=2.0):
    """Queries per second, one query per call, on as many queries as fit the budget."""
    search_one(queries[:1])
    t0 = time.perf_counter()
    n = 0
    while n < len(queries):
        search_one(queries[n:n + 1])
        n += 1
        if time.perf_counter() - t0 > budget_s and n >= 50:
            break
    return n / (time.perf_counter() - t0)


def _qps_batch(search_all, queries, reps=3):
    search_all(queries)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        search_all(queries)
        times.append(time.perf_counter() - t0)
    return len(queries) / float(np.median(times))


def bq_rescore_search(index: BinaryIndex, base, queries, k, oversample, metric, threads=0):
    """Hamming top k*oversample, then exact float32 rescoring of those candidates.

    For "cosine", base and queries must already be unit length (run_bench normalises them).
    """
    cand, _ = index.search(queries, k * oversample, threads=threads)
    return rescore(base, queries, cand, k, metric)[0]


class _VecsiftHNSW:
    name = "vecsift-hnsw"

    def __init__(self, dim, metric, m, ef_construction):
        from vecsift import HNSWIndex
        self.index = HNSWIndex(dim, metric=metric, m=m, ef_construction=ef_construction)

    def build(self, base, threads, progress=None):
        for start in range(0, len(base), 20_000):
            self.index.add(base[start:start + 20_000], threads=threads)
            if progress:
                progress(min(20_000, len(base) - start))

    def search(self, queries, k, ef, threads):
        return self.index.search(queries, k, ef=max(ef, k), threads=threads)[0]

    def nbytes(self):
        return self.index.nbytes


def _sweep_hnsw(adapter, base, queries, gt, k, ef_values, threads, quiet):
    rows = []
    with progress_bar(total=len(base), desc=f"build {adapter.name}", unit="rows", disable=quiet) as bar:
        t0 = time.perf_counter()
        adapter.build(base, threads, bar.update)
        build_s = time.perf_counter() - t0
    bpv = adapter.nbytes() / len(base)
    for ef in progress_bar(ef_values, desc=f"sweep {adapter.name}", disable=quiet):
        found = adapter.search(queries, k, ef, threads)
        rows.append({
            "index": adapter.name, "param": f"ef={ef}", "recall": recall_at_k(found, gt, k),
            "qps_single": _qps_single(lambda q: adapter.search(q, k, ef, 1), queries),
            "qps_batch": _qps_batch(lambda q: adapter.search(q, k, ef, threads), queries),
            "build_s": build_s, "bytes_per_vector": bpv,
        })
    return rows


def _sweep_bq(base, queries, gt, k, metric, oversample_values, threads, quiet):
    index = BinaryIndex(base.shape[1])
    t0 = time.perf_counter()
    with progress_bar(total=len(base), desc="build vecsift-bq", unit="rows", disable=quiet) as bar:
        for start in range(0, len(base), 50_000):
            index.add(base[start:start + 50_000])
            bar.update(min(50_000, len(base) - start))
    build_s = time.perf_counter() - t0
    rows = []
    for ov in progress_bar(oversample_values, desc="sweep vecsift-bq", disable=quiet):
        found = bq_rescore_search(index, base, queries, k, ov, metric, threads)
        rows.append({
            "index": "vecsift-bq", "param": f"oversample={ov}", "recall": recall_at_k(found, gt, k),
            "qps_single": _qps_single(lambda q: bq_rescore_search(index, base, q, k, ov, metric, 1), queries),
            "qps_batch": _qps_batch(lambda q: bq_rescore_search(index, base, q, k, ov, metric, threads), queries),
            "build_s": build_s,
            # codes in RAM; the float32 rows used for rescoring stay on disk in a Collection
            "bytes_per_vector": index.nbytes / len(base),
        })
    return rows


# (bits, oversample, query bits) of the quantised rows in the default sweep: the settings
# docs/quantised.md measures (1 bit x4, 2 bits x2, 4 bits without and with rescoring).
QUANT_SETTINGS = ((1, 4, 4), (2, 2, 4), (4, 1, 8), (4, 4, 8))


def _faiss_rabitq(dim, metric, bits):
    try:
        import faiss
    except ImportError:
        return None
    if not hasattr(faiss, "IndexRaBitQ"):
        return None
    mt = faiss.METRIC_L2 if metric == "l2" else faiss.METRIC_INNER_PRODUCT
    return faiss, faiss.IndexRaBitQ(dim, mt, bits)


def _sweep_quant(base, queries, gt, k, metric, threads, quiet, settings=QUANT_SETTINGS, compare_faiss=True):
    """vecsift.QuantizedIndex rows, and faiss IndexRaBitQ with the same bits and query bits when installed."""
    from vecsift.index.quantised import QuantizedIndex
    rows = []
    for bits, ov, qb in progress_bar(settings, desc="sweep vecsift-quant", disable=quiet):
        index = QuantizedIndex(base.shape[1], bits=bits, metric=metric, query_bits=qb)
        t0 = time.perf_counter()
        index.add(base, threads=threads)
        build_s = time.perf_counter() - t0

        def run(q, t, index=index, ov=ov):
            cand, _ = index.search(q, k * ov, threads=t)
            return rescore(base, q, cand, k, metric)[0] if ov > 1 else cand

        rows.append({
            "index": "vecsift-quant", "param": f"b{bits} q{qb} x{ov}", "recall": recall_at_k(run(queries, threads), gt, k),
            "qps_single": _qps_single(lambda q: run(q, 1), queries),
            "qps_batch": _qps_batch(lambda q: run(q, threads), queries),
            "build_s": build_s, "bytes_per_vector": index.nbytes / len(base),
        })
        made = _faiss_rabitq(base.shape[1], metric, bits) if compare_faiss else None
        if made is None:
            continue
        faiss, fx = made
        t0 = time.perf_counter()
        fx.train(base)
        fx.add(base)
        fbuild = time.perf_counter() - t0
        params = faiss.RaBitQSearchParameters()
        params.qb = qb

        def frun(q, t, fx=fx, ov=ov, params=params):
            faiss.omp_set_num_threads(t)
            cand = fx.search(q, k * ov, params=params)[1]
            return rescore(base, q, cand, k, metric)[0] if ov > 1 else cand

        # faiss's multi-bit scan can cost 100+ ms a query at d=50: measure on a
        # prefix of the queries that fits a few seconds, and say so in the row.
        t0 = time.perf_counter()
        frun(queries[:10], threads)
        per_q = (time.perf_counter() - t0) / 10
        nq = int(min(len(queries), max(50, 5.0 / max(per_q, 1e-9))))
        fq, fgt = queries[:nq], gt[:nq]
        rows.append({
            "index": "faiss-rabitq", "param": f"b{bits} q{qb} x{ov}" + (f" ({nq}q)" if nq < len(queries) else ""),
            "recall": recall_at_k(frun(fq, threads), fgt, k),
            "qps_single": _qps_single(lambda q: frun(q, 1), fq),
            "qps_batch": _qps_batch(lambda q: frun(q, threads), fq, reps=1),
            "build_s": fbuild, "bytes_per_vector": float("nan"),
        })
        faiss.omp_set_num_threads(threads)
    return rows

def run_bench(dataset="glove-50", n_queries=1000, k=10, indexes=("hnsw", "bq", "quant"), compare=(), out="bench-out",
              metric="cosine", m=16, ef_construction=200, ef_values=EF_VALUES, oversample_values=OVERSAMPLE_VALUES,
              threads=0, quiet=False, max_rows=None):
    threads = threads or _core.hardware_threads()
    base, queries, name = load_dataset(dataset, n_queries)
    if max_rows:
        base = base[:max_rows]
    if metric == "cosine":  # unit rows once, so rescoring is an inner product
        base = base / np.maximum(np.linalg.norm(base, axis=1, keepdims=True), 1e-30)
        queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-30)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    gt = ground_truth(base, queries, k, metric, out, name)
    rows = []
    for kind in indexes:
        if kind == "hnsw":
            rows += _sweep_hnsw(_VecsiftHNSW(base.shape[1], metric, m, ef_construction), base, queries, gt, k,
                                ef_values, threads, quiet)
        elif kind == "bq":
            rows += _sweep_bq(base, queries, gt, k, metric, oversample_values, threads, quiet)
        elif kind == "quant":
            rows += _sweep_quant(base, queries, gt, k, metric, threads, quiet)
        else:
            raise ValueError(f"unknown index {kind!r}; choose hnsw, bq and/or quant")
    for lib in compare:
        rows += _sweep_hnsw(make_adapter(lib, base.shape[1], metric, m, ef_construction), base, queries, gt, k,
                            ef_values, threads, quiet)
    result = {"dataset": name, "rows": len(base), "queries": len(queries), "dim": base.shape[1], "k": k,
              "metric": metric, "m": m, "ef_construction": ef_construction, "threads": threads,
              "cpu": _core.cpu_features(), "results": rows}
    (out / "results.json").write_text(json.dumps(result, indent=2))
    plot_results(result, out / "recall_qps.png")
    return result


def format_table(result) -> str:
    head = f"{'index':<14} {'param':<14} {'recall@' + str(result['k']):>9} {'QPS 1-thr':>10} {'QPS batch':>10} " \
           f"{'build s':>8} {'B/vector':>9}"
    lines = [head, "-" * len(head)]
    for r in result["results"]:
        lines.append(f"{r['index']:<14} {r['param']:<14} {r['recall']:>9.4f} {r['qps_single']:>10.0f} "
                     f"{r['qps_batch']:>10.0f} {r['build_s']:>8.1f} {r['bytes_per_vector']:>9.0f}")
    return "\n".join(lines)


def plot_results(result, path: Path):
    """Recall vs single-thread QPS, log QPS axis, one line per index (ann-benchmarks style)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=90)
    names = dict.fromkeys(r["index"] for r in result["results"])
    for name in names:
        pts = [r for r in result["results"] if r["index"] == name]
        ax.plot([p["recall"] for p in pts], [p["qps_single"] for p in pts], marker="o", label=name)
    ax.set_yscale("log")
    ax.set_xlabel(f"recall@{result['k']} vs exact")
    ax.set_ylabel("queries/s, 1 thread, 1 query per call")
    ax.set_title(f"{result['dataset']}: {result['rows']} rows, {result['queries']} queries")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
