"""`vecsift tune`: the collection's default ef (hnsw) or oversample (bq) for a recall target.

Queries are rows sampled from the collection (each query's own row is removed
from both the exact and the approximate lists, so a query cannot trivially
find itself) or a file of query vectors. Ground truth is exact search over all
live rows; the approximate side runs the collection's real search path, so the
stored default is what users of the collection get.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .tuning import TuneResult, self_excluded, tune

LIMITS = {"ef": 4096, "oversample": 1024}


@dataclass
class CollectionTuneResult(TuneResult):
    name: str = "ef"
    limit: int = 0


def tune_collection(coll, target=0.95, k=10, n_queries=500, queries_file=None, seed=0, quiet=False):
    name = "ef" if coll.index == "hnsw" else "oversample"
    if queries_file is not None:
        queries = np.load(queries_file)
        queries = queries.reshape(1, -1) if queries.ndim == 1 else queries
        own = None
    else:
        own, queries = coll._sample_rows(n_queries, seed)
    if len(queries) == 0:
        raise ValueError("the collection has no rows to tune on")
    extra = 0 if own is None else 1
    truth, _ = coll._exact_all(queries, k + extra)
    if own is not None:
        truth = self_excluded(truth, own, k)

    def search(param):
        found, _ = coll._search_all(queries, k + extra, **{name: param})
        return found if own is None else self_excluded(found, own, k)

    low = k if name == "ef" else 1
    res = tune(search, truth, k, target, low, LIMITS[name])
    return CollectionTuneResult(res.param, res.target, res.curve, name=name, limit=LIMITS[name])
