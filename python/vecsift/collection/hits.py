"""Search results: the Hit a user reads, and building Hits from result rows.

A query returns k row numbers; turning them into Hits (id, text, doc id,
tenant, metadata, provenance) is per-query work comparable to scoring a BM25
query, so it is kept lean: the columns are read for all k rows at once
(columns.RowReader), which columns exist is worked out once per table, and the
Hits are made positionally in one map() call.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from operator import attrgetter

import numpy as np

from vecsift._core import take_columns
from vecsift.collection.columns import RowReader
from vecsift.collection.ingest import META, PROVENANCE
from vecsift.collection.pgvocab import pg_distance

_HIT_COLUMNS = frozenset(("id", "doc_id", "text", "display_text", "tenant", *PROVENANCE))


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


_FIELDS = tuple(f.name for f in fields(Hit))


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


def _dict_maker(names: list):
    """A function (list of value lists, one per name) -> one dict a row, None values left out: for
    one or two columns (the usual metadata) the dicts are built without a per-row zip."""
    if len(names) == 1:
        (a,) = names
        return lambda cols: [{} if x is None else {a: x} for x in cols[0]]
    if len(names) == 2:
        a, b = names

        def two(cols):
            return [({a: x, b: y} if y is not None else {a: x}) if x is not None else ({} if y is None else {b: y})
                    for x, y in zip(cols[0], cols[1])]
        return two
    return lambda cols: [{name: x for name, x in zip(names, vals) if x is not None} for vals in zip(*cols)]


class HitBuilder:
    """Makes Hits from rows of one (immutable) chunk table."""

    def __init__(self, table):
        # Only the columns a Hit shows are read (not acl, say): id, texts, doc id, tenant, provenance,
        # metadata.
        self.reader = RowReader(table, wanted=lambda c: c in _HIT_COLUMNS or c.startswith(META))
        cols = set(self.reader.columns)
        self._meta = [(c, c[len(META):]) for c in self.reader.columns if c.startswith(META)]
        self._prov = [p for p in PROVENANCE if p in cols]
        self._display = "display_text" in cols
        self._one = None  # the single-query plan (_one_plan), made on first use

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

    def _one_plan(self):
        """Where each Hit field is in the result of one take_columns call (when every column the Hits
        show is read natively; None otherwise, and build() serves)."""
        rd = self.reader
        if rd._others:
            return False
        pos = {c: i for i, c in enumerate(rd.native_columns)}
        at = lambda c: pos.get(c)  # noqa: E731
        meta = [pos[c] for c, _ in self._meta]
        prov = [pos[p] for p in self._prov]
        return (rd.readers, pos["id"], at("doc_id"), at("text"), at("display_text"), at("tenant"),
                meta, _dict_maker([name for _, name in self._meta]) if meta else None,
                prov, _dict_maker(self._prov) if prov else None)

    def dense_one(self, rows: np.ndarray, scores: np.ndarray, metric: str | None, bound: int | None = None):
        """The Hits of one query's dense result: rows (k,) int64 padded with -1, scores (k,) float32;
        dense_rank is the position, distance pgvector's (_distances). The same Hits as build_dense."""
        return self.from_lists(rows.tolist(), scores.tolist(), metric, bound)

    def from_lists(self, rl: list, slist: list, metric: str | None, bound: int | None = None):
        """dense_one of the lists (int rows padded with -1, float scores); bound: None, or return
        None instead of Hits when a row is >= bound (search.one_query: a walk that ran beside a commit)."""
        plan = self._one
        if plan is None:
            plan = self._one = self._one_plan()
        k = len(rl)
        if k == 0:
            return []
        if bound is not None and max(rl) >= bound:
            return None
        if min(rl) < 0:  # padding
            keep = [i for i, r in enumerate(rl) if r >= 0]
            rl = [rl[i] for i in keep]
            slist = [slist[i] for i in keep]
            ranks = [i + 1 for i in keep]
        else:
            ranks = range(1, k + 1)
        if metric == "cosine":
            dist = [1.0 - v for v in slist]
        else:
            dist = _distances(slist, metric)
        if plan is False:
            return self.build(np.array(rl, np.int64), slist, dense_ranks=list(ranks), distances=dist)
        readers, i_id, i_doc, i_text, i_disp, i_ten, meta, metas_of, prov, provs_of = plan
        cols = take_columns(readers, rl)
        n = len(slist)
        if dist is None:
            dist = [None] * n
        if i_doc is None and i_text is None and i_disp is None and i_ten is None and not prov:
            # ids and metadata only (what a pgvector import holds): one comprehension, no per-field lists
            if meta:
                return [Hit(i, s, None, None, m, {}, None, r, None, d)
                        for i, s, m, r, d in zip(cols[i_id], slist, metas_of([cols[j] for j in meta]), ranks, dist)]
            return [Hit(i, s, None, None, {}, {}, None, r, None, d) for i, s, r, d in zip(cols[i_id], slist, ranks, dist)]
        none = [None] * n
        texts = none if i_text is None else cols[i_text]
        if i_disp is not None:
            texts = [t if d is None else d for d, t in zip(cols[i_disp], texts)]
        metas = metas_of([cols[i] for i in meta]) if meta else [{} for _ in range(n)]
        provs = provs_of([cols[i] for i in prov]) if prov else [{} for _ in range(n)]
        return list(map(Hit, cols[i_id], slist, none if i_doc is None else cols[i_doc], texts, metas, provs,
                        none if i_ten is None else cols[i_ten], ranks, none, dist))

    def columns(self, rl: list, slist: list, ranks: list, metric: str | None) -> tuple:
        """The fields of the Hits from_lists would make for rows rl (no padding), scores slist and
        dense ranks `ranks`, as one list per Hit field (in the dataclass's order), no Hit made: what
        a sharded collection's node actor sends for the rows it keeps of a shard's search. slist and
        ranks become the score and dense_rank columns as they are (not copied)."""
        n = len(rl)
        if n == 0:
            return tuple([] for _ in _FIELDS)
        plan = self._one
        if plan is None:
            plan = self._one = self._one_plan()
        dist = [1.0 - v for v in slist] if metric == "cosine" else _distances(slist, metric)
        none = [None] * n
        if plan is False:
            hits = self.build(np.array(rl, np.int64), slist, dense_ranks=list(ranks), distances=dist)
            return tuple(map(list, zip(*map(attrgetter(*_FIELDS), hits))))
        readers, i_id, i_doc, i_text, i_disp, i_ten, meta, metas_of, prov, provs_of = plan
        cols = take_columns(readers, rl)
        texts = none if i_text is None else cols[i_text]
        if i_disp is not None:
            texts = [t if d is None else d for d, t in zip(cols[i_disp], texts)]
        return (cols[i_id], slist, none if i_doc is None else cols[i_doc], texts,
                metas_of([cols[i] for i in meta]) if meta else [{} for _ in none],
                provs_of([cols[i] for i in prov]) if prov else [{} for _ in none],
                none if i_ten is None else cols[i_ten], ranks, none, none if dist is None else dist)

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
            return [self.dense_one(rows[0], scores[0], metric)]
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
