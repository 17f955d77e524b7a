"""Audit log overhead and the delete-to-removal bound (issue 16, deliver 6 and 7).

    flock /tmp/vecsift-bench.lock python bench/bench_audit.py [--data DIR] [--work DIR] [--rounds 15]

(a) Overhead: 100k PyPI summaries embedded with all-MiniLM-L6-v2 (DIR/vectors.f16.npy rows 0..99,999,
    their texts in the collection; queries: rows 100,000..100,999), one collection per index (hnsw,
    bq with its default quantised codes). Single-query dense searches (k=10, threads=1), one call per
    query, `--per-round` queries a round; the audit settings are switched on the same open collection
    between rounds (off, on, off, on, ...), so both run on the same process, caches and machine load.
    Reported: median QPS over the rounds of each setting, and overhead = 1 - on/off of the medians;
    also the process CPU time per query (flush thread included), steadier on a shared machine; and
    both paired, each round against the "off" round just before it (median over rounds);
    for the default settings (flush_ms=100), flush_ms=0 (a write() per search) and fsync=True with
    flush_ms=0 (a write and an fsync per search).
(b) Deletion bound: 1,000 chunks deleted at random from the 100k and compact() timed (on a copy of the
    collection), per index; compact() is what removes a deleted chunk's bytes from every file.

Collections are built once into --work and reused.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

import vecsift
from vecsift.collection.audit import flush_log, read_log

K = 10
VARIANTS = {"default": True, "flush_ms=0": {"flush_ms": 0}, "fsync": {"flush_ms": 0, "fsync": True}}


def build(path: Path, index: str, x: np.ndarray, texts: list) -> None:
    if (path / "MANIFEST").exists():
        return
    if path.exists():
        shutil.rmtree(path)
    t0 = time.perf_counter()
    params = {"m": 16, "ef_construction": 100} if index == "hnsw" else {}
    c = vecsift.Collection.create(path, x.shape[1], metric="cosine", index=index, **params)
    step = 20_000
    for s in range(0, len(x), step):
        c.add([f"p{i}" for i in range(s, min(s + step, len(x)))], x[s:s + step], texts=texts[s:s + step])
    c.commit()
    c.close()
    print(f"built {path} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def overhead(path: Path, queries: np.ndarray, rounds: int, per_round: int) -> dict:
    """Median QPS with audit off and with each variant on, interleaved round by round."""
    c = vecsift.open(path)
    c.set_audit(False)
    c.commit()
    for f in path.glob("audit-*.log"):
        f.unlink()

    def run(offset):
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(per_round):
            c.search(queries[(offset + i) % len(queries)], k=K, threads=1)
        flush_log(c)  # this round's records written inside its own time
        # CPU time of the whole process (the flush thread included): less at the mercy of other
        # processes on a shared machine than wall-clock QPS
        cpu_us.append((time.process_time() - c0) / per_round * 1e6)
        return per_round / (time.perf_counter() - t0)

    settings = {"off": False, **VARIANTS}
    cpu_us = []
    for s in settings.values():  # warm-up: page cache, numba, the audit thread
        c.set_audit(s)
        run(0)
    qps = {name: [] for name in settings}
    cpu = {name: [] for name in settings}
    for r in range(rounds):
        for name, s in settings.items():
            c.set_audit(s)
            cpu_us = []
            qps[name].append(run(r * per_round))
            cpu[name].append(cpu_us[0])
    c.set_audit(False)
    c.close()
    logged = read_log(path)
    med = {name: float(np.median(v)) for name, v in qps.items()}
    cmed = {name: float(np.median(v)) for name, v in cpu.items()}
    out = {"qps_median": med, "qps_rounds": qps, "cpu_us_median": cmed, "cpu_us_rounds": cpu,
           "overhead": {name: 1 - med[name] / med["off"] for name in VARIANTS},
           "cpu_overhead": {name: cmed[name] / cmed["off"] - 1 for name in VARIANTS},
           "records": len(logged.records), "log_ok": logged.ok,
           "log_bytes": sum(os.path.getsize(path / f) for f in logged.files)}
    out["bytes_per_record"] = out["log_bytes"] / max(1, out["records"])
    # paired: each round's setting against the "off" round just before it (same load, same caches)
    out["paired_overhead"] = {name: float(np.median([1 - a / b for a, b in zip(qps[name], qps["off"])]))
                              for name in VARIANTS}
    cpu_pairs = {name: [a / b - 1 for a, b in zip(cpu[name], cpu["off"])] for name in VARIANTS}
    out["paired_cpu_overhead"] = {name: float(np.median(v)) for name, v in cpu_pairs.items()}
    out["paired_cpu_iqr"] = {name: [float(p) for p in np.percentile(v, [25, 75])] for name, v in cpu_pairs.items()}
    return out


def deletion(path: Path, work: Path, n_delete: int, seed: int = 0) -> dict:
    copy = work / f"{path.name}-compact"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(path, copy)
    c = vecsift.open(copy)
    ids = c.ids()
    gone = list(np.random.default_rng(seed).choice(len(ids), n_delete, replace=False))
    t0 = time.perf_counter()
    c.delete(ids=[ids[i] for i in gone])
    c.commit()
    t_delete = time.perf_counter() - t0
    t0 = time.perf_counter()
    c.compact()
    t_compact = time.perf_counter() - t0
    rows = len(c)
    c.close()
    shutil.rmtree(copy)
    return {"deleted": n_delete, "rows_after": rows, "delete_commit_s": t_delete, "compact_s": t_compact}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/work/shared/data/pypi-minilm")
    ap.add_argument("--work", default="/tmp/vecsift-bench-audit")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--per-round", type=int, default=300)
    ap.add_argument("--index", default="hnsw,bq")
    ap.add_argument("--deletes", type=int, default=1000)
    ap.add_argument("--skip-deletion", action="store_true")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    data, work = Path(args.data), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    x = np.load(data / "vectors.f16.npy").astype(np.float32)
    base, queries = x[:100_000], x[100_000:101_000]
    with open(data / "texts.jsonl") as f:
        texts = [json.loads(line)["summary"] for _, line in zip(range(100_000), f)]
    results = {"rows": len(base), "dim": base.shape[1], "k": K, "rounds": args.rounds, "per_round": args.per_round,
               "load_avg": os.getloadavg()}
    for index in args.index.split(","):
        path = work / index
        build(path, index, base, texts)
        res = overhead(path, queries, args.rounds, args.per_round)
        if not args.skip_deletion:
            res["deletion"] = deletion(path, work, args.deletes)
        results[index] = res
        med = res["qps_median"]
        print(f"{index}: QPS off {med['off']:.0f}, " + ", ".join(
            f"{v} {med[v]:.0f} ({100 * res['overhead'][v]:+.1f}%)" for v in VARIANTS)
            + f"; {res['records']} records, {res['bytes_per_record']:.0f} B each, verified {res['log_ok']}")
        cm = res["cpu_us_median"]
        print(f"{index}: CPU us/query off {cm['off']:.0f}, " + ", ".join(
            f"{v} {cm[v]:.0f} ({100 * res['cpu_overhead'][v]:+.1f}%)" for v in VARIANTS))
        print(f"{index}: paired per round (median; CPU interquartile range): " + ", ".join(
            f"{v} QPS {-100 * res['paired_overhead'][v]:+.1f}% CPU {100 * res['paired_cpu_overhead'][v]:+.1f}% "
            f"[{100 * res['paired_cpu_iqr'][v][0]:+.1f}..{100 * res['paired_cpu_iqr'][v][1]:+.1f}]" for v in VARIANTS))
        if "deletion" in res:
            d = res["deletion"]
            print(f"{index}: delete {d['deleted']} + commit {d['delete_commit_s']:.2f} s, "
                  f"compact {d['compact_s']:.1f} s ({d['rows_after']} rows left)")
    results["load_avg_after"] = os.getloadavg()
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
