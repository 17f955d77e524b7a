"""The search cascade as functions of (snapshot, request, allow set).

    allow   = snapshot.allow(tenant, groups, where)      filters.py, before anything is scored
    lists   = retrieve(snapshot, request, allow)         per retriever: dense (rows, scores) and/or
                                                         one (rows, scores) BM25 list per text
    fused   = fuse(request, lists)                       RRF of the two lists (hybrid)

Rows are the snapshot's row numbers. retrieve() is what a shard runs: its
outputs are plain arrays, so lists from several snapshots can be merged per
retriever (by score) and fused; the Collection facade turns rows into Hits.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import numpy as np

from vecsift import _core
from vecsift._arrays import check_k, check_threads, unit_queries
from vecsift.collection.filters import rows_of
from vecsift.collection.parts import QuantPart
from vecsift.collection.stages.dense import exact_rows
from vecsift.index.planner import scan_exactly
from vecsift.storage.rowsums import check_all

MODES = ("dense", "sparse", "hybrid")
# Hybrid batches at least this large run BM25 on a helper thread beside the dense stage.
# Measured (bench_collection_sparse.py): the helper is slower for one query, a toss-up
# at 2 (5% slower in one run, 9% faster in another), 27-38% faster from 8 on.
HYBRID_PARALLEL_MIN = 8
# One query with threads=0 (all cores) runs on the calling thread, except a bq scan of at least this
# many allowed rows, which is split over the cores. Measured (bench/bench_overhead.py, 100k MiniLM, 2
# cores): the pool costs more than it saves for a graph walk and for a code scan of 100k rows.
SINGLE_QUERY_POOL_ROWS = 1_000_000


@dataclass(frozen=True)
class Request:
    """A checked search request (request() builds one)."""
    vectors: np.ndarray | None  # (nq, dim) float32, not yet normalised
    texts: list | None
    k: int
    mode: str
    candidates: int  # per retriever, hybrid only
    rrf_k: float = 60
    weights: object = None
    ef: int | None = None
    oversample: int | None = None
    threads: int = 0

    @property
    def n_queries(self) -> int:
        return len(self.vectors) if self.vectors is not None else len(self.texts)


def request(vectors, texts, k, mode=None, candidates=100, rrf_k=60, weights=None, ef=None, oversample=None,
            threads=0) -> Request:
    """Checks the arguments of a search and infers the mode (hybrid when both vectors and texts are given)."""
    k = check_k(k)
    if mode is None:
        if vectors is None and texts is None:
            raise ValueError("search needs vector=... and/or text=...")
        mode = "hybrid" if vectors is not None and texts is not None else ("dense" if vectors is not None
                                                                            else "sparse")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode in ("dense", "hybrid") and vectors is None:
        raise ValueError(f"mode={mode!r} needs vector=...")
    if mode in ("sparse", "hybrid") and texts is None:
        raise ValueError(f"mode={mode!r} needs text=...")
    if texts is not None and not all(isinstance(t, str) for t in texts):
        raise TypeError("text queries must be strings")
    ef = _optional_positive(ef, "ef")
    oversample = _optional_positive(oversample, "oversample")
    c = k
    if mode == "hybrid":
        c = check_k(candidates)
        if c < k:
            raise ValueError(f"candidates ({c}) must be >= k ({k})")
    return Request(vectors, texts, k, mode, c, rrf_k, weights, ef, oversample, threads)


def _optional_positive(v, name: str):
    """None, or v as a positive int (a clear TypeError / ValueError naming the argument otherwise)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be a positive integer or None, got {type(v).__name__}")
    if v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v}")
    return int(v)


@dataclass
class SearchStats:
    """Counters of the dense stage, summed over the queries of a call (pass one as stats=...).

    path: "exact" (the planner chose to score every allowed row), "index", or "none" (nothing allowed)."""
    queries: int = 0
    allowed: int = 0  # rows in the allow set
    path: str = ""
    scanned: int = 0  # rows scored exactly: every allowed row per query on the exact path, HNSW's own scan
    distances: int = 0  # float32 distance computations
    hops: int = 0  # graph nodes whose links were expanded (hnsw)
    codes_scanned: int = 0  # binary codes compared (bq first stage)
    rescored: int = 0  # candidates rescored in float32 (bq)
    lists_probed: int = 0  # reserved for partitioned indexes


@dataclass
class Lists:
    """Candidate lists of one request: dense (rows (nq, c) int64, scores float32, pad -1) and sparse
    (one (rows, scores) pair per text), None for a retriever the mode does not use."""
    dense: tuple | None = None
    sparse: list | None = None


def retrieve(snap, req: Request, allow, stats: SearchStats | None = None, deadline=None) -> Lists:
    """Runs the retrievers of req.mode over the allowed rows of snap (dense counters into `stats`);
    `deadline` (limits.Deadline) is checked after each stage."""
    check = deadline.check if deadline is not None else (lambda stage: None)
    if req.mode == "dense":
        out = Lists(dense=dense_rows(snap, req.vectors, req.k, allow, req.ef, req.oversample, req.threads,
                                     stats))
        check("the dense stage")
        return out
    c = req.candidates if req.mode == "hybrid" else req.k
    sparse = lambda: [sparse_rows(snap, t, c, allow) for t in req.texts]  # noqa: E731
    if req.mode == "sparse":
        out = Lists(sparse=sparse())
        check("the sparse stage")
        return out
    if req.threads == 1 or len(req.texts) < HYBRID_PARALLEL_MIN:
        slists = sparse()
        check("the sparse stage")
        dense = dense_rows(snap, req.vectors, c, allow, req.ef, req.oversample, req.threads, stats)
    else:  # BM25 (numba, GIL released) on a helper thread while the dense stage runs here
        pending = _pool().submit(sparse)
        dense = dense_rows(snap, req.vectors, c, allow, req.ef, req.oversample, req.threads, stats)
        slists = pending.result()
    check("the dense stage")
    return Lists(dense=dense, sparse=slists)


def fuse(req: Request, lists: Lists) -> list:
    """Hybrid: per query (rows, rrf scores, dense ranks, sparse ranks) of the top k, ranks 1-based or 0."""
    from vecsift.text.fusion import rrf

    out = []
    drows = lists.dense[0]
    for i, (srows, _) in enumerate(lists.sparse):
        out.append(rrf([drows[i], srows], k=req.rrf_k, weights=req.weights, top_n=req.k, return_ranks=True))
    return out


def sparse_rows(snap, text, k, allow):
    # allow never holds rows past snap.n, so rows a commit in progress has indexed stay out;
    # the unfiltered allow (snap.live, frozen) is turned into BM25's mask once per snapshot
    if len(allow) == 0:
        return np.empty(0, np.int64), np.empty(0, np.float32)
    return snap.sparse.search(text, k, allow)


def _no_rows(nq, k):
    return np.full((nq, k), -1, np.int64), np.full((nq, k), -np.inf, np.float32)


def dense_rows(snap, q, k, allow, ef, oversample, threads, stats: SearchStats | None = None):
    """Dense top-k (rows, similarities) of each query over the allowed rows: exact scan or the index."""
    threads = check_threads(threads)
    if oversample is not None and (isinstance(oversample, bool) or int(oversample) < 1):
        raise ValueError(f"oversample must be an integer >= 1, got {oversample!r}")
    n_allowed = len(allow)
    nq = len(q)
    if stats is not None:
        stats.queries += nq
        stats.allowed = n_allowed
        stats.path = "none"
    if n_allowed == 0 or nq == 0:
        return _no_rows(nq, k)
    defaults = snap.defaults
    if oversample is None and defaults:
        oversample = defaults.get("oversample")
    if ef is None and defaults:
        ef = defaults.get("ef")
    dense = snap.dense
    kind = dense.kind
    over = 1 if kind != "bq" else getattr(dense, "oversample", 1) if oversample is None else int(oversample)
    if threads == 0 and nq == 1 and (kind != "bq" or n_allowed < SINGLE_QUERY_POOL_ROWS):
        threads = 1  # one query: handing it to the thread pool costs more than it saves
    cosine = snap.metric == "cosine"
    if scan_exactly(n_allowed, k * over):
        if stats is not None:
            stats.path = "exact"
            stats.scanned += n_allowed * nq
            stats.distances += n_allowed * nq
        return exact_rows(snap.vectors, unit_queries(q) if cosine else q, rows_of(allow), k, snap.metric, threads)
    if stats is not None:
        stats.path = "index"
    if cosine and kind != "hnsw":  # rows are stored unit length; HNSWIndex normalises cosine queries itself
        q = unit_queries(q)
    with snap.lock.read():
        clip = not (allow is snap.live and snap.full and dense.size == snap.n and not dense.growing)
        return dense.search(snap.vectors, q, k, allow if clip else None, n_allowed, ef=ef,
                            oversample=oversample, threads=threads, stats=stats)


_F32 = np.dtype(np.float32)


def one_query(snap, limits):
    """The fast path of Collection.search for the commonest call: one float32 vector, no tenant,
    groups or where, default options. Returns run(vector, k, ef, threads) -> Hits, which returns None
    whenever the call is not that case (the caller then runs the general path, which also raises
    every error: bad input, NaN, limits); or None when this snapshot has no fast path. run.rows is
    the same search without the Hits: (rows, scores) lists, padded with -1 (a graph walk's rows all
    below snap.n), or None where run returns None (Collection._search_rows).

    It does what the general path does for such a call, with what is per snapshot worked out once
    here: the allow set is every live row (so it applies only while nothing is deleted and the index
    holds exactly the snapshot's rows), the planner's choice per k, the defaults, the limits. The
    caller makes a new one when the snapshot, manifest (audit, limits, defaults) or limits change.
    Security: a collection with tenants or ACLs is checked on every call (rows staged by add() can
    turn them on before the next snapshot) and always takes the general path, which refuses a call
    that does not say who is asking."""
    dense = snap.dense
    kind = getattr(dense, "kind", None)
    if snap.n == 0 or not snap.full or kind not in ("hnsw", "bq"):
        return None
    filters, lock, hits, metric, n = snap.filters, snap.lock, snap.hits, snap.metric, snap.n
    shape = (snap.dim,)
    kmax = min(limits.max_k, limits.max_candidates, limits.max_cells)
    efmax = limits.max_ef
    defaults = snap.defaults or {}
    planned = {}  # k -> True when the planner sends a search with this k to the index

    def index_path(k, over=1):
        ok = planned.get(k)
        if ok is None:
            ok = planned[k] = not scan_exactly(n, k * over)
        return ok

    if kind == "hnsw":
        g = dense.index._g
        ef0 = defaults.get("ef") or 0

        def walk(q, k, ef, threads):
            if type(q) is not np.ndarray or (q.dtype is not _F32 and q.dtype != _F32) or q.shape != shape \
                    or not q.flags.c_contiguous or type(k) is not int or not 0 < k <= kmax \
                    or type(threads) is not int or threads < 0 \
                    or filters.has_tenants or filters.has_acl or dense._unchecked is not None:
                return None
            if ef is None:
                ef = ef0
            elif type(ef) is not int or not 0 < ef <= efmax:
                return None
            if not index_path(k):
                return None
            # No lock and no allow set: HNSWGraph runs searches during add (its own locks), and the
            # collection's lock only makes a search that is not clipped finish before a commit adds
            # rows. A walk that ran beside one may return rows past the snapshot: then, and only
            # then, the general path runs it clipped. The rows a walk returns are live (nothing is
            # deleted in this snapshot), so no other row can come back.
            try:  # the core checks the finiteness (and normalises cosine queries)
                return g.search_one(q, k, ef, threads or 1)
            except ValueError:
                return None  # the general path raises it with its own message

        def run(q, k, ef, threads):
            got = walk(q, k, ef, threads)
            return None if got is None else hits.from_lists(got[0], got[1], metric, n)

        def rows_hnsw(q, k, ef, threads):
            got = walk(q, k, ef, threads)
            if got is None or (got[0] and max(got[0]) >= n):
                return None
            return got
        run.rows = rows_hnsw
        return run

    vectors = snap.vectors
    over0 = defaults.get("oversample")
    over = int(getattr(dense, "oversample", 1) if over0 is None else over0)
    cosine = metric == "cosine"

    def scan(q, k, ef, threads):
        if type(q) is not np.ndarray or (q.dtype is not _F32 and q.dtype != _F32) or q.shape != shape \
                or not q.flags.c_contiguous or type(k) is not int or not 0 < k <= kmax \
                or type(threads) is not int or threads < 0 or filters.has_tenants or filters.has_acl:
            return None
        if ef is not None and (type(ef) is not int or not 0 < ef <= efmax):
            return None
        if not index_path(k, over) or not _core.all_finite(q):
            return None
        q2 = q.reshape(1, -1)
        if cosine:  # rows are stored unit length
            q2 = unit_queries(q2)
        if threads == 0 and n < SINGLE_QUERY_POOL_ROWS:
            threads = 1
        with lock.read():
            if dense.growing or dense.size != n:
                return None
            return dense.search(vectors, q2, k, None, n, oversample=over0, threads=threads)

    def run(q, k, ef, threads):
        got = scan(q, k, ef, threads)
        return None if got is None else hits.dense_one(got[0][0], got[1][0], metric)

    def rows_bq(q, k, ef, threads):
        got = scan(q, k, ef, threads)
        return None if got is None else (got[0][0].tolist(), got[1][0].tolist())
    run.rows = rows_bq

    p = getattr(dense, "p", None)
    if p is not None and p.get("rescore") == "float32":
        policy_z = float(p["confidence"]) if p["policy"] == "bound" else None
        rescore_metric = "l2" if metric == "l2" else "ip"  # cosine rows are stored unit length

        def part_bq(k, ef, threads):
            # scan()'s checks that do not involve the vector (parts.search_parts checks it once for all)
            if type(k) is not int or not 0 < k <= kmax or type(threads) is not int or threads < 0 \
                    or filters.has_tenants or filters.has_acl:
                return None
            if ef is not None and (type(ef) is not int or not 0 < ef <= efmax):
                return None
            if not index_path(k, over):
                return None
            c = max(1, min(max(k * over, p["min_candidates"]), n))  # as QuantBQDense.search
            return QuantPart(dense.index._index, vectors, c, 1 if threads == 0 and n < SINGLE_QUERY_POOL_ROWS
                             else threads, dense.index.query_bits, policy_z, rescore_metric, cosine, lock, dense,
                             n, snap.dim)
        run.part = part_bq
    return run


def exact_all(snap, q, k, allow=None):
    """Exact top-k over `allow` (default: every live row), read with one sequential pass."""
    from vecsift.index.flat import exact_search

    if snap.n == 0:
        return _no_rows(len(q), k)
    metric = "ip" if snap.metric == "cosine" else snap.metric  # rows are stored unit length
    if snap.metric == "cosine":
        q = unit_queries(q)
    if allow is None and not snap.full:
        allow = snap.live
    check_all(snap.scan_vectors)  # block checksums of the rows read (storage/rowsums.py)
    return exact_search(snap.scan_vectors, q, k, metric, allow=allow)


_POOL = None
_POOL_LOCK = threading.Lock()


def _pool():
    """Helper threads for the sparse half of hybrid searches (created on first use)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from concurrent.futures import ThreadPoolExecutor

            _POOL = ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1)),
                                       thread_name_prefix="vecsift-sparse")
    return _POOL
