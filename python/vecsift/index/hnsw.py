"""HNSWIndex: the approximate nearest-neighbour graph (C++ core, cpp/include/vecsift/hnsw.hpp).

Thread safety: any number of threads may search at once. One writer at a
time: concurrent ``add`` calls (and ``save``) queue behind each other. Searches
run during an ``add``; they pause only while the arrays grow at the start of
each ``add`` call, and they never return a row whose insertion has not
finished (nor a deleted one). ``mark_deleted`` / ``unmark_deleted`` may run
at any time, next to searches and adds.
"""
from __future__ import annotations

import os

import numpy as np

from vecsift import _core
from vecsift._arrays import _as_numeric_array, as_vectors, check_cells, check_k, check_threads
from vecsift.allow import bitmap_rows
from vecsift.index.flat import check_metric

try:
    from pyroaring import AbstractBitMap
except ImportError:  # pragma: no cover
    AbstractBitMap = ()

_EMPTY_LABELS = np.empty(0, dtype=np.int64)


def _positive_int(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x <= 0:
        raise ValueError(f"{name} must be a positive integer, got {x!r}")
    return int(x)


def _labels_array(labels, name: str) -> np.ndarray:
    """1-d int64 labels; negative or non-integer values are refused."""
    if AbstractBitMap and isinstance(labels, AbstractBitMap):
        return bitmap_rows(labels)
    if np.isscalar(labels):
        labels = [labels]
    arr = _as_numeric_array(labels, name)
    if arr.size == 0:
        return _EMPTY_LABELS
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be integer labels, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-d, got shape {arr.shape}")
    if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name} must be below 2**63")
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be non-negative, got {int(arr.min())}")
    return arr


class HNSWIndex:
    """Hierarchical navigable small-world graph over float32 vectors.

    ``metric``: "cosine" (rows and queries are unit-normalised, score is the
    cosine similarity), "ip" (inner product) or "l2" (score is the *negative
    squared* L2 distance). Scores are similarities: higher is better.

    Rows carry uint64 labels (below 2**63). ``add`` without ``ids`` continues
    from ``label_bound`` (largest label + 1), so a fresh index numbers rows
    0..n-1.

    ``codes="int8"``: the graph walk reads int8 codes of the rows (per-dimension
    grid fitted on the first batch added) instead of float32, and the best
    ``rescore`` candidates of the beam (default 0: max(3k, 20)) are rescored
    with the float32 rows, which are kept beside the graph (in the file's last
    section, mapped and read only for rescoring). Scores are exact float32
    similarities as with ``codes="float32"``; dim <= 4096. docs/hnsw.md.
    """

    def __init__(self, dim: int, metric: str = "cosine", m: int = 16, ef_construction: int = 200, seed: int = 0,
                 *, codes: str = "float32", _graph=None):
        if _graph is not None:
            self._g = _graph
            return
        dim = _positive_int(dim, "dim")
        check_metric(metric)
        m = _positive_int(m, "m")
        if m < 2:
            raise ValueError(f"m must be at least 2, got {m}")
        ef_construction = _positive_int(ef_construction, "ef_construction")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
            raise ValueError(f"seed must be an integer in [0, 2**64), got {seed!r}")
        if codes not in ("float32", "int8"):
            raise ValueError(f"codes must be 'float32' or 'int8', got {codes!r}")
        if codes == "int8" and dim > 4096:
            raise ValueError(f"codes='int8' supports dim <= 4096, got dim={dim}")
        self._g = _core.HNSW(dim, metric, m, ef_construction, int(seed), codes)

    # ------------------------------------------------------------ properties
    @property
    def dim(self) -> int:
        return self._g.dim

    @property
    def metric(self) -> str:
        return self._g.metric

    @property
    def m(self) -> int:
        return self._g.m

    @property
    def ef_construction(self) -> int:
        return self._g.ef_construction

    @property
    def ef_search(self) -> int:
        """Beam width used by ``search`` when ``ef`` is not given (default 64)."""
        return self._g.ef_search

    @ef_search.setter
    def ef_search(self, ef: int) -> None:
        self._g.ef_search = _positive_int(ef, "ef_search")

    @property
    def codes(self) -> str:
        """What the walk reads: "float32" rows or "int8" codes (rescored with float32)."""
        return self._g.codes

    @property
    def rescore(self) -> int:
        """codes="int8": best beam candidates rescored with float32 rows per query (0: max(3k, 20); >= k)."""
        return self._g.rescore

    @rescore.setter
    def rescore(self, r: int) -> None:
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 0:
            raise ValueError(f"rescore must be an integer >= 0, got {r!r}")
        self._g.rescore = int(r)

    @property
    def record_bytes(self) -> int:
        """Bytes of one level-0 record (vector or codes + links), what a hop reads."""
        return self._g.record_bytes

    @property
    def nbytes(self) -> int:
        """Bytes held by vectors, graph and label maps (mapped bytes included)."""
        return self._g.nbytes

    @property
    def label_bound(self) -> int:
        """Largest label + 1 (0 when empty): the length a bool ``allow`` mask must have."""
        return self._g.label_bound

    @property
    def mapped(self) -> bool:
        """True while vectors and graph are served from a file mapping (load(mmap=True))."""
        return self._g.mapped

    def __len__(self) -> int:
        """Live rows: added, fully inserted and not deleted."""
        return len(self._g)

    def labels(self) -> np.ndarray:
        """Labels of all stored rows (deleted ones included), in insertion order."""
        return self._g.labels()

    # ------------------------------------------------------------ writes
    def add(self, vectors, ids=None, threads: int = 0) -> None:
        """Inserts rows, in parallel over ``threads`` (0: all cores).

        ``ids``: uint64 labels, one per row; default continues from
        ``label_bound``. A label already present or repeated raises
        ValueError, as do NaN/inf values; on any error nothing is added.
        A Ctrl-C (KeyboardInterrupt) during a large add keeps the rows already
        linked, which are a prefix of the batch (``ids[:len(index) - before]``),
        and drops the others: their labels stay free to add again.
        With threads=1 and a fixed seed the graph is reproducible.
        """
        threads = check_threads(threads)
        x = as_vectors(vectors, "vectors", dim=self.dim, check_finite=False)
        labels = None
        if ids is not None:
            labels = _labels_array(ids, "ids")
            if labels.shape[0] != x.shape[0]:
                raise ValueError(f"ids has {labels.shape[0]} labels for {x.shape[0]} rows")
            labels = labels.view(np.uint64)
        if x.shape[0] == 0:
            return
        self._g.add(x, labels, threads)

    def mark_deleted(self, labels) -> None:
        """Tombstones rows: never returned again, still used to navigate. Unknown label: ValueError."""
        self._g.set_deleted(_labels_array(labels, "labels"), True)

    def unmark_deleted(self, labels) -> None:
        """Makes tombstoned rows searchable again."""
        self._g.set_deleted(_labels_array(labels, "labels"), False)

    # ------------------------------------------------------------ search
    def search(self, queries, k: int = 10, ef: int | None = None, allow=None, threads: int = 0, *,
               return_stats: bool = False, _filter_mode=0):
        """Returns (labels int64 (n, k), scores float32 (n, k)), best first.

        ``ef``: beam width (default ``ef_search``; at least k is used).
        ``allow`` restricts results by label: a pyroaring BitMap/FrozenBitMap
        or an integer array of labels (every label must be in the index), or
        a bool mask indexed by label of length ``label_bound``. Disallowed
        rows may be walked through but are never returned; when few rows are
        allowed they are scanned exactly instead. k results come back
        whenever k allowed live rows exist; otherwise rows are padded with
        label -1 and score -inf. Batches run in parallel over ``threads``;
        a batch of 256 queries or more can be interrupted with Ctrl-C.

        ``return_stats=True`` adds a third item: a dict of per-query int64
        arrays ``distances`` (distance computations), ``hops`` (nodes whose
        links were expanded), ``scanned`` (rows scored by the exact scan, which
        the planner picks for small allow sets and which backs up a walk that
        found fewer than k) and ``lists_probed`` (0: not a partitioned index).
        """
        if not (isinstance(k, int) and k > 0):
            k = check_k(k)
        if ef is None:
            ef = 0
        else:
            ef = _positive_int(ef, "ef")
        if threads:
            threads = check_threads(threads)
        if isinstance(queries, np.ndarray) and queries.dtype == np.float32 and queries.flags.c_contiguous \
                and 1 <= queries.ndim <= 2:
            # Fast path, no copy: the core checks the shape and finiteness.
            q = queries if queries.ndim == 2 else queries.reshape(1, -1)
        else:
            q = as_vectors(queries, "queries", dim=self.dim, check_finite=False)
        check_cells(len(q), k)
        mask = labels = None
        if allow is not None:
            if isinstance(allow, np.ndarray) and allow.dtype == np.bool_:
                mask = np.ascontiguousarray(allow).view(np.uint8)
            elif isinstance(allow, np.ndarray) and allow.dtype == np.int64 and allow.ndim == 1 \
                    and allow.flags.c_contiguous:
                labels = allow  # fast path: the core refuses negative or unknown labels
            else:
                labels = _labels_array(allow, "allow")
        out = self._g.search(q, k, ef, mask, labels, threads, _filter_mode, bool(return_stats))
        if not return_stats:
            return out
        st = out[2].astype(np.int64)
        return out[0], out[1], {"distances": st[:, 0], "hops": st[:, 1], "scanned": st[:, 2],
                                "lists_probed": np.zeros(len(st), np.int64)}

    # ------------------------------------------------------------ files
    def save(self, path) -> None:
        """Writes the index to ``path`` atomically (temporary file, fsync, rename)."""
        self._g.save(os.fspath(path))

    @classmethod
    def load(cls, path, mmap: bool = False, verify: bool = True) -> "HNSWIndex":
        """Opens a saved index. With ``mmap=True`` vectors and graph stay in the
        file mapping (pages load on first touch). A truncated, corrupted or foreign
        file raises vecsift.CorruptIndexError.

        Every open reads the file at most once. verify=True checks all of it (its
        CRC-32C and every link), in the one read. ``mmap=True, verify=False``
        checks the header and the small sections only and leaves the vectors and
        level-0 links on disk until searches touch them: searches stay in bounds
        whatever the file holds, the first add() checks the links, and
        ``HNSWIndex.verify_file(path)`` reads and checks everything.
        """
        return cls(0, _graph=_core.HNSW.load(os.fspath(path), bool(mmap), bool(verify)))

    @staticmethod
    def verify_file(path) -> int:
        """Reads a saved index whole and checks its checksums; returns its CRC-32C (CorruptIndexError if bad)."""
        return _core.HNSW.verify_file(os.fspath(path))

    @property
    def file_crc(self) -> int:
        """CRC-32C of the file this index was last saved to or loaded from (0: neither)."""
        return self._g.file_crc

    def __repr__(self) -> str:
        codes = "" if self.codes == "float32" else f", codes={self.codes!r}"
        return f"HNSWIndex(dim={self.dim}, metric={self.metric!r}, m={self.m}{codes}, len={len(self)})"
