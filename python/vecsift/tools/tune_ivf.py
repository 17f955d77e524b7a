"""Tuning a partitioned index: the fastest (nprobe, oversample) that reaches a recall target.

nprobe alone is not enough at scale. At 10M x 384 rows 1-bit codes need 64-128
candidates per result before rescoring finds the true top 10 (docs/partitioned.md):
at the default oversample 4, no nprobe reaches recall 0.95, and with the oversample
raised far fewer lists are needed. So for each oversample of a ladder the smallest
nprobe reaching the target is found (tools/tune.py: doubling, then bisection, judged by
the 95% lower bound of recall), the pair's one-query time is measured on the tuning
queries, and the fastest pair wins.

Recall never falls when the oversample grows at a fixed nprobe (the candidates of the
smaller oversample are kept, the bound policy's threshold is the same), so each rung's
search is capped at the nprobe the rung before needed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from vecsift.tools.tune import tune

OVERSAMPLES = (4, 8, 16, 32, 64, 128)


@dataclass
class IVFTuneResult:
    nprobe: int | None  # None: no pair reached the target
    oversample: int | None
    target: float
    rows: list = field(default_factory=list)  # per oversample: dict(oversample, nprobe, recall, lower, us)


def _one_query_us(index, queries, k, nprobe, oversample) -> float:
    """Median microseconds of one query per call on one thread (after one pass to warm the pages)."""
    for q in queries:
        index.search(q, k, nprobe=nprobe, oversample=oversample, threads=1)
    times = []
    for q in queries:
        t = time.perf_counter()
        index.search(q, k, nprobe=nprobe, oversample=oversample, threads=1)
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e6


def tune_ivf(index, queries, truth, k: int, target: float, oversamples=None,
             timing_queries: int = 100) -> IVFTuneResult:
    """The fastest (nprobe, oversample) whose recall@k lower bound on `queries` reaches `target`.

    `truth`: exact top-k ids of the queries. `oversamples`: the ladder (default OVERSAMPLES
    plus the index's own). Times one query per call over the first `timing_queries` queries."""
    ladder = sorted({int(o) for o in (oversamples or OVERSAMPLES)} | {int(index.oversample)})
    if ladder[0] < 1:
        raise ValueError(f"oversample values must be >= 1, got {ladder[0]}")
    result = IVFTuneResult(None, None, target)
    high = index.nlist
    timed = queries[:max(1, timing_queries)]
    for os_ in ladder:
        found = tune(lambda p: index.search(queries, k, nprobe=p, oversample=os_)[0], truth, k, target, 1, high)
        row = {"oversample": os_, "nprobe": found.param, "recall": None, "lower": None, "us": None}
        if found.param is not None:
            high = found.param
            _, row["recall"], row["lower"] = next(c for c in found.curve if c[0] == found.param)
            row["us"] = _one_query_us(index, timed, k, found.param, os_)
        result.rows.append(row)
    done = [r for r in result.rows if r["nprobe"] is not None]
    if done:
        best = min(done, key=lambda r: r["us"])
        result.nprobe, result.oversample = best["nprobe"], best["oversample"]
    return result
