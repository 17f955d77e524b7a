"""Search results: the Hit a user reads, and building Hits from result rows.

A query returns k row numbers; turning them into Hits (id, text, doc id,
tenant, metadata, provenance) is per-query work comparable to scoring a BM25
query, so it is kept lean: the columns are read for all k rows at once
(columns.RowReader), which columns exist is worked out once per table, and the
Hits are made positionally in one map() call.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from vecsift.collection.columns import RowReader
from vecsift.collection.ingest import META, PROVENANCE
from vecsift.collection.pgvocab import pg_distance


@dataclass(slots=True)  # many are made per search: slots make that cheaper
class Hit:
    """One search result. score is a similarity (higher is better).

    distance: for dense searches, the distance pgvector's operator for the
    collection's metric would report (None for BM25 and hybrid results):
    cosine -> 1 - score (<=>), ip -> -score (<#>), l2 -> sqrt(-score) (<->)."""

    id: str
    score: float
    doc_id: str | None = None
    text: str | None = None
    metadata: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)
    tenant: str | None = None
    dense_rank: int | None = None
    sparse_rank: int | None = None
    distance: float | None = None

    @property
    def source(self):
        return self.provenance.get("source")

    @property
    def heading_path(self):
        return self.provenance.get("heading_path")

    @property
    def char_range(self):
        a, b = self.provenance.get("char_start"), self.provenance.get("char_end")
        return None if a is None and b is None else (a, b)

    @property
    def doc_type(self):
        return self.provenance.get("doc_type")

    def to_dict(self) -> dict:
        return asdict(self)


def _distances(slist: list, metric):
    """pgvector's distances of these scores (pgvocab.pg_distance), for cosine and ip on the Python
    floats (the same float64 arithmetic, no numpy call); None without a metric."""
    if metric == "cosine":
        return [1.0 - v for v in slist]
    if metric == "ip":
        return [-v for v in slist]
    if metric is None:
        return None
    return pg_distance(np.asarray(slist, np.float64), metric).tolist()


def _dicts(n: int, cols: list) -> list:
    """Per row i, {name: values[i]} over the (name, values) columns, None values left out."""
    if len(cols) == 1:
        name, v = cols[0]
        return [{} if x is None else {name: x} for x in v]
    names = [name for name, _ in cols]
    return [{name: x for name, x in zip(names, vals) if x is not None} for vals in zip(*[v for _, v in cols])]


class HitBuilder:
    """Makes Hits from rows of one (immutable) chunk table."""

    def __init__(self, table):
        self.reader = RowReader(table)
        cols = set(self.reader.columns)
        self._meta = [(c, c[len(META):]) for c in self.reader.columns if c.startswith(META)]
        self._prov = [p for p in PROVENANCE if p in cols]
        self._display = "display_text" in cols

    @property
    def table(self):
        return self.reader.table

    def build(self, rows, scores: list, dense_ranks=None, sparse_ranks=None, distances=None) -> list:
        """Hits for one query, in the order of rows (int64, no padding).

        scores: a list of floats; ranks: lists of 1-based ranks with None where
        that retriever did not return the row, or None for all rows."""
        n = len(rows)
        if n == 0:
            return []
        data = self.reader.read(rows)
        none = [None] * n
        get = data.get
        texts = get("text", none)
        if self._display:
            texts = [t if d is None else d for d, t in zip(data["display_text"], texts)]
        metas = _dicts(n, [(name, data[c]) for c, name in self._meta]) if self._meta else [{} for _ in range(n)]
        provs = _dicts(n, [(p, data[p]) for p in self._prov]) if self._prov else [{} for _ in range(n)]
        return list(map(Hit, data["id"], scores, get("doc_id", none), texts, metas, provs, get("tenant", none),
                        none if dense_ranks is None else dense_ranks, none if sparse_ranks is None else sparse_ranks,
                        none if distances is None else distances))

    def build_dense(self, rows: np.ndarray, scores: np.ndarray, metric: str | None = None) -> list:
        """Hits per query of (q, k) dense results (rows -1 are padding): the rank is
        the position. One read for the whole batch, then split per query."""
        rows = np.asarray(rows)
        scores = np.asarray(scores)
        nq, k = rows.shape
        if nq == 0 or k == 0:
            return [[] for _ in range(nq)]
        # Plain Python on the k values of one query: right after a graph walk the caches are cold and
        # each numpy ufunc call costs ~10-20 us there (a few us warm); tolist() and list work are cheap.
        if nq == 1:
            rl = rows[0].tolist()
            slist = scores[0].tolist()
            if min(rl) >= 0:
                flat_rows, ranks = rows[0], list(range(1, k + 1))
            else:
                keep = [i for i, r in enumerate(rl) if r >= 0]
                flat_rows = np.array([rl[i] for i in keep], np.int64)
                slist = [slist[i] for i in keep]
                ranks = [i + 1 for i in keep]
            return [self.build(flat_rows, slist, dense_ranks=ranks, distances=_distances(slist, metric))]
        if rows.min() >= 0:  # no padding (the usual case): ranks are the positions
            flat_rows, s = rows.ravel(), scores.ravel()
            ranks = list(range(1, k + 1)) * nq
            counts = None
        else:
            qi, ci = np.nonzero(rows >= 0)
            flat_rows, s = rows[qi, ci], scores[qi, ci]
            ranks = (ci + 1).tolist()
            counts = np.bincount(qi, minlength=nq).tolist()
        slist = s.tolist()
        hits = self.build(flat_rows, slist, dense_ranks=ranks, distances=_distances(slist, metric))
        if counts is None:
            return [hits[i * k:(i + 1) * k] for i in range(nq)]
        out, start = [], 0
        for count in counts:
            out.append(hits[start:start + count])
            start += count
        return out
