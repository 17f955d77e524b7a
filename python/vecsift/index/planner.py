"""One planner for "score the allowed rows exactly, or use the index".

The rule lives in the native core (cpp/include/vecsift/index/planner.hpp), so
the HNSW filter path, the collection's dense stage and the coming quantised
and partitioned indexes all ask the same function: an allow set of at most
max(fetch, EXACT_BELOW) rows is scanned exactly whatever the index; for a
graph over n rows searched with beam ef, also up to sqrt(40 * ef * n) rows.
Crossover measurements: bench/bench_planner.py, docs/architecture.md.
"""
from __future__ import annotations

from vecsift import _core

EXACT_BELOW = _core.EXACT_BELOW


def scan_exactly(n_allowed: int, fetch: int, graph_n: int = 0, ef: int = 0) -> bool:
    """True when `n_allowed` rows should be scanned exactly rather than searched through an index asked
    for `fetch` candidates (k times the oversampling of a quantised first stage); graph_n / ef: the size and
    beam of a graph index (0: not a graph)."""
    return _core.scan_exactly(int(n_allowed), int(fetch), int(graph_n), int(ef))
