"""One planner for "score the allowed rows exactly, or use the index".

Every index asks it: the collection before calling its dense stage, and the
coming quantised and partitioned indexes. The native HNSW filter path has the
same rule in cpp/include/vecsift/index/planner.hpp.
"""
from __future__ import annotations

# Allow sets this small are scored exactly (all allowed rows), whatever the index.
EXACT_BELOW = 2048


def scan_exactly(n_allowed: int, fetch: int) -> bool:
    """True when `n_allowed` rows should be scanned exactly rather than searched through an index
    asked for `fetch` candidates (k times the oversampling of a quantised first stage)."""
    return n_allowed <= max(fetch, EXACT_BELOW)
