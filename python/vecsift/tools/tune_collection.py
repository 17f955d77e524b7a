"""`vecsift tune`: the collection's default ef (hnsw) or oversample (bq) for a recall target.

Queries are a file of query vectors, or rows sampled from the collection. A
sampled row must not find itself, and how that is done depends on the index,
so that tuning measures exactly the search users get:

* bq: the rows are held out. Exact and Hamming search run over all live rows
  except the sampled ones (an allow set does not change the scan). Removing
  rows makes search a little easier, so they are held out in folds of at most
  1% of the collection each.
* hnsw: a row that is in the graph is found through its own links, so
  in-graph queries overstate recall (measured on the 3,000-row clustered set
  of tests/test_cli_collection.py: 0.984 against 0.945 for new points, ef=10). The sampled rows are held out by building a
  temporary graph, same parameters, over all live rows except them; ef is
  tuned on it. This costs one build of the collection's size.

Ground truth is exact search over the same rows; the approximate side runs
the collection's real search path, so the stored default is what users get.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vecsift.tools.tune import TuneResult, tune

LIMITS = {"ef": 4096, "oversample": 1024}


@dataclass
class CollectionTuneResult(TuneResult):
    name: str = "ef"
    limit: int = 0


def tune_collection(coll, target=0.95, k=10, n_queries=500, queries_file=None, seed=0, quiet=False):
    name = "ef" if coll.index == "hnsw" else "oversample"
    snap = coll.snapshot()  # one consistent state for the whole run (public read API)
    if queries_file is not None:
        queries = np.load(queries_file)
        queries = queries.reshape(1, -1) if queries.ndim == 1 else queries
        own = None
    else:
        own, queries = snap.sample_rows(n_queries, seed)
    if len(queries) == 0:
        raise ValueError("the collection has no rows to tune on")
    if own is None:
        truth = snap.exact(queries, k)[0]
        search = lambda p: snap.search_dense(queries, k, **{name: p})[0]  # noqa: E731
    elif name == "ef":
        graph = _held_out_graph(coll, snap, own, quiet)
        truth = snap.exact(queries, k, exclude=own)[0]
        search = lambda p: graph.search(queries, k, ef=p)[0]  # noqa: E731
    else:
        n_folds = max(1, int(np.ceil(len(own) / max(1.0, 0.01 * len(snap.live)))))
        folds = [(own[f::n_folds], queries[f::n_folds]) for f in range(n_folds)]
        truth = np.concatenate([snap.exact(q, k, exclude=ex)[0] for ex, q in folds])
        search = lambda p: np.concatenate(  # noqa: E731
            [snap.search_dense(q, k, exclude=ex, oversample=p)[0] for ex, q in folds])

    low = k if name == "ef" else 1
    res = tune(search, truth, k, target, low, LIMITS[name])
    return CollectionTuneResult(res.param, res.target, res.curve, name=name, limit=LIMITS[name])


def _held_out_graph(coll, snap, held_out, quiet):
    """An HNSW graph with the collection's parameters over its live rows minus held_out (labels = rows)."""
    from vecsift.index.hnsw import HNSWIndex
    from vecsift.tools.progress import progress_bar
    keep = np.setdiff1d(snap.rows(), held_out)
    vectors = snap.vectors
    p = coll.index_params
    graph = HNSWIndex(coll.dim, metric=coll.metric, m=p.get("m", 16), ef_construction=p.get("ef_construction", 200),
                      seed=p.get("seed", 0))
    with progress_bar(total=len(keep), desc="held-out graph", unit="rows", disable=quiet) as bar:
        for s in range(0, len(keep), 50_000):
            part = keep[s:s + 50_000]
            graph.add(np.asarray(vectors[part], dtype=np.float32), ids=part)
            bar.update(len(part))
    return graph
