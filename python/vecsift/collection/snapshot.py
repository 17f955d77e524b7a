"""Snapshot: the immutable state one search runs on, and the public read API over it.

A snapshot holds the committed rows of one commit minus the rows deleted when
it was taken: the float32 memmap of those rows, the dense and sparse stages,
the filters, the live set and the chunk table. The collection swaps in a new
one by reference at every commit and delete; a reader that took one keeps
searching it, whatever the writer does next (its files stay mapped).

Collection.snapshot() hands one out. Tools (vecsift tune), a sharded
collection or an audit log read a collection through it, never through the
collection's private state:

    snap.rows()                         live rows (int64, sorted)
    snap.sample_rows(n, seed)           (rows, their float32 vectors), a random sample of live rows
    snap.exact(queries, k, exclude)     exact top-k over live rows minus `exclude`: ground truth
    snap.search_dense(queries, k, ...)  the collection's own dense search (ignores tenants / ACLs)
    snap.allow(tenant, groups, where)   the allow set a search with that filter would use
    snap.table                          the chunks (pyarrow Table, row i = row i)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyroaring import FrozenBitMap

from vecsift._arrays import as_vectors, check_k
from vecsift.collection.filters import Filters, bitmap_of, rows_of
from vecsift.collection.hits import HitBuilder
from vecsift.storage.rowsums import check_rows, checked


@dataclass(frozen=True, eq=False)
class Snapshot:
    n: int  # committed rows (deleted included)
    dim: int
    metric: str
    vectors: np.ndarray  # memmap of the n rows, MADV_RANDOM (rescoring reads a few rows); read rows
    # through it only after rowsums.check_rows(vectors, rows) (a flipped byte: CorruptIndexError)
    scan_vectors: np.ndarray  # the same rows mapped MADV_SEQUENTIAL, for whole scans
    dense: object  # the dense stage (stages/dense.py)
    sparse: object  # the BM25 stage (stages/sparse.py)
    filters: Filters
    live: FrozenBitMap  # [0, n) minus deleted; frozen, so indexes may cache what they derive from it
    full: bool  # nothing deleted: live is all of [0, n)
    hits: HitBuilder  # over the chunk columns of the n rows
    defaults: dict  # search_defaults of the manifest (ef, oversample)
    lock: object = None  # the collection's readers-writer lock (index mutation vs native searches)

    @property
    def table(self) -> pa.Table:
        return self.hits.table

    def rows(self) -> np.ndarray:
        return rows_of(self.live)

    def allow(self, tenant=None, groups=None, where=None):
        """The allow set of a search with this filter (computed before anything is scored)."""
        return self.filters.allow(self.live, tenant, groups, where)

    def sample_rows(self, n: int, seed: int = 0):
        """(rows, float32 vectors) of min(n, live) live rows drawn without replacement, rows sorted."""
        live = self.rows()
        rows = np.sort(np.random.default_rng(seed).choice(live, size=min(int(n), len(live)), replace=False))
        check_rows(self.vectors, rows)
        return rows, np.asarray(self.vectors[rows], dtype=np.float32)

    def _allow_minus(self, exclude):
        return self.live - bitmap_of(np.asarray(exclude)) if exclude is not None else None

    def exact(self, queries, k: int, exclude=None):
        """Exact top-k (rows, similarities) over all live rows except `exclude`, pad -1."""
        from vecsift.collection.search import exact_all

        q = as_vectors(queries, "queries", dim=self.dim)
        return exact_all(self, q, check_k(k), self._allow_minus(exclude))

    def search_dense(self, queries, k: int, ef=None, oversample=None, exclude=None, allow=None, threads: int = 0):
        """The collection's dense search (its planner, index and defaults) over `allow` (default: all
        live rows) minus `exclude`; tenants and ACLs are not applied. (rows, scores), pad -1."""
        from vecsift.collection.search import dense_rows

        q = as_vectors(queries, "queries", dim=self.dim)
        a = self.live if allow is None else allow
        if exclude is not None:
            a = a - bitmap_of(np.asarray(exclude))
        return dense_rows(self, q, check_k(k), a, ef, oversample, threads)


def empty_snapshot(dim: int, metric: str, dense, sparse, table: pa.Table) -> Snapshot:
    """What a closed collection holds: no rows, so its file mappings can go."""
    nothing = np.empty((0, dim), np.float32)
    return Snapshot(0, dim, metric, nothing, nothing, dense, sparse, Filters(), FrozenBitMap(), True,
                    HitBuilder(table), {})


def take_snapshot(n: int, dim: int, metric: str, rowfile, dense, sparse, filters: Filters, hits: HitBuilder,
                  defaults: dict, lock) -> Snapshot:
    """A snapshot of the first n rows of `rowfile` and the current deletes of `filters`."""
    live = FrozenBitMap(range(n)) - filters.deleted  # frozen minus anything stays frozen
    scan = rowfile.view(n, sequential=True)
    # Both mappings carry the file's block checks (storage/rowsums.py): whoever reads rows checks them first.
    checks = rowfile.checks(n, scan)
    return Snapshot(n, dim, metric, checked(rowfile.view(n), checks), checked(scan, checks), dense, sparse,
                    filters, live, len(live) == n, hits, dict(defaults or {}), lock)
