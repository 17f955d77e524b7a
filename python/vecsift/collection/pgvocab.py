"""pgvector's vocabulary, accepted where it differs from vecsift's (docs/pgvector.md has the table).

    pgvector                      vecsift
    <=> vector_cosine_ops         metric="cosine", score = 1 - distance
    <#> vector_ip_ops             metric="ip",     score = -distance (pgvector's <#> is the negative inner product)
    <-> vector_l2_ops             metric="l2",     score = -distance**2
    hnsw.ef_search                search(ef=...) or search(ef_search=...)
    m, ef_construction            the same names in Collection.create(index="hnsw", ...)
"""
from __future__ import annotations

import numpy as np

METRICS = {"<=>": "cosine", "vector_cosine_ops": "cosine", "halfvec_cosine_ops": "cosine",
           "<#>": "ip", "vector_ip_ops": "ip", "halfvec_ip_ops": "ip",
           "<->": "l2", "vector_l2_ops": "l2", "halfvec_l2_ops": "l2"}
UNSUPPORTED = {"<+>": "L1 distance", "vector_l1_ops": "L1 distance", "<~>": "Hamming distance over bit vectors",
               "bit_hamming_ops": "Hamming distance over bit vectors", "<%>": "Jaccard distance"}


def metric_name(metric: str) -> str:
    """A vecsift metric name for a vecsift or pgvector spelling (operator or operator class)."""
    if metric in UNSUPPORTED:
        hint = " (index='bq' ranks by Hamming distance over sign bits internally)" if "Hamming" in \
            UNSUPPORTED[metric] else ""
        raise ValueError(f"metric {metric!r} ({UNSUPPORTED[metric]}) is not supported; "
                         f"use cosine, ip or l2{hint}")
    return METRICS.get(metric, metric)


def resolve_ef(ef, ef_search):
    """search(ef=...) and pgvector's name for it, hnsw.ef_search; one of them."""
    if ef_search is None:
        return ef
    if ef is not None and ef != ef_search:
        raise ValueError(f"ef={ef} and ef_search={ef_search} disagree; give one")
    return ef_search


def pg_distance(scores, metric: str) -> np.ndarray:
    """vecsift similarities as the distances pgvector reports: <=> (cosine), <#> (ip), <-> (l2)."""
    s = np.asarray(scores, dtype=np.float64)
    if metric == "cosine":
        return 1.0 - s
    if metric == "ip":
        return -s
    if metric == "l2":  # scores are negative squared L2 distances
        return np.sqrt(np.maximum(-s, 0.0))
    raise ValueError(f"unknown metric {metric!r}")
