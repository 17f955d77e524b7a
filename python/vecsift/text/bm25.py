"""BM25 over posting lists held in numpy arrays, scored in numba loops.

Score of row d for a query with tokens q_1..q_m (duplicates count again, as in
Lucene and bm25s):

    score(d) = sum_i  idf(q_i) * tf(q_i, d) / (tf(q_i, d) + k1 * (1 - b + b * dl(d) / avgdl))
    idf(t)   = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

tf is the count of the token in the row's text, dl the row's token count,
N the number of live (added, not deleted) rows, avgdl their mean dl and df(t)
the number of live rows containing t. This is Lucene's BM25 (Lucene >= 8,
which drops the constant (k1 + 1) numerator factor; bm25s method="lucene"
computes the same), except that dl is exact instead of Lucene's one-byte
encoding. Defaults k1 = 1.2, b = 0.75. N, avgdl and df always describe the
live rows: adds and deletes update them, so idf never drifts. With
statistics="allowed" they describe only the live rows the search's allow set
admits (df counted in the query terms' postings at search time), so a score
equals that of an index holding just those rows; a Collection searches this
way, so no tenant's or ACL group's text moves another's scores.

Rows are integer row numbers chosen by the caller (a Collection's row ids) or
assigned 0, 1, 2, ... A row is added once; deleted rows are never scored and
their numbers are not reused. Postings live in two segments: the base and a
tail that takes incremental adds (cheap to append to); merge() folds the tail
into the base (and drops deleted rows' postings); compact() also drops
unused terms and, with renumber=True, renumbers the live rows 0..len-1.
The tail is merged automatically once it outgrows the base.

Search is term at a time in numba (GIL released), heaviest query term first,
with exact early termination: once the weights of the terms still to come
cannot lift an unseen row past the current k-th score, only the rows that
can still make the top k are finished (see _bm25_kernels.score_topk). The
result is the same as scoring every matching row.

Searches may run from several threads at once (the kernels release the GIL);
a writer (add/delete/merge) must not run concurrently with another writer.
A search running during a write sees the state before or after it.
"""
from __future__ import annotations

import json
import os
from math import log1p
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from pyroaring import FrozenBitMap

from vecsift._arrays import check_cells, check_k, check_threads
from vecsift.allow import allow_arrays
from vecsift.errors import CorruptIndexError
from vecsift.storage.checksum import CRC32C, ZLIB, update
from vecsift.text.tokenize import Tokenizer

_MAGIC = b"VSBM25\r\n"
_END = b"VSBM25END"
# Version 2: the trailer is a CRC-32C (the one checksum of every file vecsift writes, storage/checksum.py);
# version 1 files (zlib crc32 trailer) are still read.
_VERSION = 2
_TRAILER_ALGO = {1: ZLIB, 2: CRC32C}
_EMPTY_PTR = np.zeros(1, np.int64)
_EMPTY_I32 = np.zeros(0, np.int32)

# Arrays of a saved file, in order, with their on-disk dtypes.
_DTYPES = {"ptr": "<i8", "docs": "<i4", "tfs": "<i4", "doclen": "<i4", "state": "|u1"}

# Frozen allow sets whose masks and statistics are kept: up to 16, and masks (one
# byte a row) of at most about 64 MiB together, but always the last two.
_SCOPES_KEPT, _SCOPE_BYTES = 16, 64 << 20

# Row states.
_FREE, _ALIVE, _DELETED = 0, 1, 2


def _kernels():
    # numba is imported on first use so `import vecsift` does not pay for it.
    from vecsift.text import bm25_kernels as _bm25_kernels
    return _bm25_kernels


class _Vocab(dict):
    """term -> id. Indexing with a new term gives it the next id (get() never adds):
    map(vocab.__getitem__, tokens) then stays in C for every term already known."""
    __slots__ = ()

    def __missing__(self, term):
        self[term] = i = len(self)
        return i


class _Scope:
    """The rows one search may score (keep: uint8 mask over rows) and the
    statistics it scores with: N = n rows of average length avgdl; local means
    they (and df) are those of the kept rows rather than of the whole index;
    df then memoises the terms counted so far (a scope never changes)."""
    __slots__ = ("keep", "n", "avgdl", "local", "df", "total_len")

    def __init__(self, keep, n, avgdl, local, total_len=0):
        self.keep, self.n, self.avgdl, self.local = keep, n, avgdl, local
        self.total_len = total_len  # sum of the kept rows' lengths (term_statistics reports it)
        self.df = {}


class _View:
    """An immutable snapshot a search reads, rebuilt after each write."""
    __slots__ = ("a", "t", "dl", "alive", "df", "n_live", "n_rows", "everything")

    def __init__(self, a, t, dl, alive, df, n_live, n_rows, total_len):
        self.a, self.t, self.dl, self.alive = a, t, dl, alive
        self.df, self.n_live, self.n_rows = df, n_live, n_rows
        self.everything = _Scope(alive, n_live, _avgdl(total_len, n_live), False, total_len)


def _avgdl(total_len: int, n: int) -> float:
    avgdl = total_len / n if n else 1.0
    return avgdl if avgdl > 0 else 1.0


class BM25Index:
    """BM25 index over texts; see the module docstring for the exact formula.

    BM25Index(k1=1.2, b=0.75, tokenizer=None): tokenizer is any callable
    str -> list of str; None means vecsift.text.tokenize.Tokenizer() (identifiers
    kept whole plus their parts, no stopwords).
    """

    # Early termination is considered only before posting lists this long
    # (tests lower it to exercise that path on small data).
    _prune_min = 1024

    def __init__(self, k1: float = 1.2, b: float = 0.75, tokenizer=None):
        k1, b = float(k1), float(b)
        if not (np.isfinite(k1) and k1 >= 0):
            raise ValueError(f"k1 must be finite and >= 0, got {k1}")
        if not (0.0 <= b <= 1.0):
            raise ValueError(f"b must be in [0, 1], got {b}")
        if tokenizer is not None and not callable(tokenizer):
            raise TypeError("tokenizer must be callable (str -> list of str)")
        self.k1, self.b = k1, b
        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer()
        self._vocab = _Vocab()
        self._a = (_EMPTY_PTR, _EMPTY_I32, _EMPTY_I32)  # base segment (ptr, docs, tfs)
        self._t = (_EMPTY_PTR, _EMPTY_I32, _EMPTY_I32)  # tail segment
        self._doclen = np.zeros(0, np.int32)
        self._state = np.zeros(0, np.uint8)
        self._n_rows = 0  # max row + 1
        self._n_live = 0
        self._total_len = 0
        self._df = np.zeros(0, np.int64)
        self._df_stale = False
        self._view = None
        self._scopes = {}  # (id, statistics) -> (FrozenBitMap, view, _Scope) of recent frozen allows
        self._scopes_lock = threading.Lock()
        self._lock = threading.Lock()
        self._tls = threading.local()

    # ---- sizes ---------------------------------------------------------
    def __len__(self) -> int:
        return self._n_live

    @property
    def n_rows(self) -> int:
        """One more than the largest row ever added (the length an allow mask has)."""
        return self._n_rows

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    @property
    def tail_rows(self) -> int:
        """Postings in the tail segment (0 after merge())."""
        return int(self._t[1].shape[0])

    def is_alive(self, rows) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        out = np.zeros(rows.shape, bool)
        ok = (rows >= 0) & (rows < self._n_rows)
        out[ok] = self._state[rows[ok]] == _ALIVE
        return out

    # ---- writes --------------------------------------------------------
    def add(self, texts, ids=None) -> np.ndarray:
        """Index texts as new rows; returns the row numbers (int64).

        ids=None continues from n_rows (0, 1, 2, ... on a new index); otherwise
        one distinct non-negative integer per text, none of them added before."""
        if isinstance(texts, (str, bytes)):
            raise TypeError("texts must be a sequence of str, not a single string")
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] must be str, got {type(t).__name__}")
        n = len(texts)
        if ids is None:
            rows = np.arange(self._n_rows, self._n_rows + n, dtype=np.int64)
        else:
            rows = np.asarray(ids)
            if rows.ndim != 1 or (rows.size and not np.issubdtype(rows.dtype, np.integer)):
                raise TypeError(f"ids must be a 1-d sequence of integers, got dtype {rows.dtype} shape {rows.shape}")
            rows = rows.astype(np.int64)
            if rows.shape[0] != n:
                raise ValueError(f"ids has {rows.shape[0]} entries for {n} texts")
            if n and (rows.min() < 0 or rows.max() >= 2**31 - 1):
                raise ValueError("ids must be in [0, 2**31 - 1)")
            if np.unique(rows).shape[0] != n:
                raise ValueError("ids contains duplicates")
            old = rows[rows < self._n_rows]
            if old.size and (self._state[old] != _FREE).any():
                bad = old[self._state[old] != _FREE][0]
                raise ValueError(f"row {int(bad)} was already added to this index")
        if n == 0:
            return rows
        out_rows = rows
        if n > 1 and (np.diff(rows) < 0).any():  # postings keep rows ascending per term
            order = np.argsort(rows, kind="stable")
            texts = [texts[i] for i in order]
            rows = rows[order]
        # Tokens -> term ids; new terms get the next id (_Vocab.__missing__).
        vocab = self._vocab
        term_id = vocab.__getitem__
        tok = self.tokenizer
        flat = []
        lens = np.empty(n, np.int64)
        for i, text in enumerate(texts):
            tokens = tok(text)
            lens[i] = len(tokens)
            flat += map(term_id, tokens)
        tids = np.array(flat, dtype=np.int32)
        doc_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=doc_ptr[1:])
        K = _kernels()
        V = len(vocab)
        bptr, bdocs, btfs, dl = K.build_csr(tids, doc_ptr, rows.astype(np.int32), V)
        with self._lock:
            self._grow(int(rows.max()) + 1)
            self._doclen[rows] = dl
            self._state[rows] = _ALIVE
            self._n_live += n
            self._total_len += int(dl.sum())
            if not self._df_stale:
                df = np.zeros(V, np.int64)
                df[: self._df.shape[0]] = self._df
                df += np.diff(bptr)
                self._df = df
            tptr, tdocs, ttfs = self._t
            if tdocs.shape[0] == 0:  # an empty tail becomes the batch itself
                self._t = (bptr, bdocs, btfs)
            else:
                keep = np.ones(self._n_rows, np.uint8)
                self._t = K.merge_csr(tptr, tdocs, ttfs, bptr, bdocs, btfs, V, keep)
            self._view = None
        if self._t[1].shape[0] > max(self._a[1].shape[0], 1 << 16):
            self.merge()
        return out_rows

    def _grow(self, n_rows):
        if n_rows <= self._n_rows:
            return
        if n_rows > self._state.shape[0]:
            cap = max(n_rows, 2 * self._state.shape[0], 1024)
            dl = np.zeros(cap, np.int32)
            st = np.zeros(cap, np.uint8)
            dl[: self._n_rows] = self._doclen[: self._n_rows]
            st[: self._n_rows] = self._state[: self._n_rows]
            self._doclen, self._state = dl, st
        self._n_rows = n_rows

    def delete(self, rows) -> int:
        """Delete rows (ints, an int array or a roaring BitMap); returns how many
        were live. Rows never added or already deleted are ignored."""
        ids = _as_rows(rows, self._n_rows)
        with self._lock:
            ids = np.unique(ids[self._state[ids] == _ALIVE])
            if ids.size == 0:
                return 0
            self._state[ids] = _DELETED
            self._n_live -= int(ids.size)
            self._total_len -= int(self._doclen[ids].sum())
            self._df_stale = True  # recounted from postings on next use
            self._view = None
        return int(ids.size)

    def merge(self) -> None:
        """Fold the tail segment into the base, dropping deleted rows' postings."""
        K = _kernels()
        with self._lock:
            a, t = self._a, self._t
            if a[1].shape[0] == 0 and not (self._state[: self._n_rows] == _DELETED).any():
                self._a = t  # nothing to merge with or drop: the tail becomes the base
            else:
                keep = (self._state[: self._n_rows] == _ALIVE).astype(np.uint8)
                self._a = K.merge_csr(*a, *t, len(self._vocab), keep)
            self._t = (_EMPTY_PTR, _EMPTY_I32, _EMPTY_I32)
            self._view = None

    commit = merge

    def compact(self, renumber: bool = False):
        """merge(), then drop terms no live row uses. With renumber=True the live
        rows are renumbered 0..len-1 in their order and the old -> new mapping
        (int64, -1 for deleted or never-added rows) is returned; else None."""
        self.merge()
        with self._lock:
            ptr, docs, tfs = self._a
            V = len(self._vocab)
            ptr = _full_ptr(ptr, V)
            df = np.diff(ptr)
            used = np.flatnonzero(df > 0)
            if used.size != V:
                terms = _terms_by_id(self._vocab)
                self._vocab = _Vocab((terms[i], j) for j, i in enumerate(used.tolist()))
                ptr = np.concatenate([[0], np.cumsum(df[used])]).astype(np.int64)
            mapping = None
            if renumber:
                alive = self._state[: self._n_rows] == _ALIVE
                mapping = np.full(self._n_rows, -1, np.int64)
                mapping[alive] = np.arange(int(alive.sum()))
                docs = mapping[docs].astype(np.int32)  # order-preserving, stays sorted
                n = int(alive.sum())
                self._doclen = self._doclen[: self._n_rows][alive].copy()
                self._state = np.full(n, _ALIVE, np.uint8)
                self._n_rows = n
            self._a = (ptr, docs, tfs)
            self._df = np.diff(ptr).astype(np.int64)
            self._df_stale = False
            self._view = None
        return mapping

    # ---- search --------------------------------------------------------
    def _get_view(self) -> _View:
        v = self._view
        if v is not None:
            return v
        with self._lock:
            if self._view is None:
                n = self._n_rows
                alive = (self._state[:n] == _ALIVE).astype(np.uint8)
                V = len(self._vocab)
                if self._df_stale:
                    K = _kernels()
                    df = np.zeros(V, np.int64)
                    K.live_df(self._a[0], self._a[1], alive, df)
                    K.live_df(self._t[0], self._t[1], alive, df)
                    self._df, self._df_stale = df, False
                # rows are written once, so the slice of doclen stays valid for this view
                self._view = _View(self._a, self._t, self._doclen[:n], alive, self._df, self._n_live, n,
                                   self._total_len)
            return self._view

    def _query_terms(self, query: str, v: _View, scope: _Scope):
        """(term ids int64, weights idf * query count) of the query's terms found in
        the scope's rows, heaviest first.

        A query has a handful of terms: plain Python floats here cost less than
        the fixed overhead of a dozen numpy calls on arrays of that size."""
        if not isinstance(query, str):
            raise TypeError(f"query must be str, got {type(query).__name__}")
        get = self._vocab.get
        counts: dict = {}
        n_terms = v.df.shape[0]  # terms added after this view was taken are not in it
        for w in self.tokenizer(query):
            t = get(w)
            if t is not None and t < n_terms:
                counts[t] = counts.get(t, 0) + 1
        if scope.local:  # document frequencies among the kept rows only, counted once per scope
            memo = scope.df
            missing = [t for t in counts if t not in memo]
            if missing:
                tids = np.array(missing, np.int64)
                memo.update(zip(missing, _kernels().kept_df(v.a[0], v.a[1], v.t[0], v.t[1], tids,
                                                             scope.keep).tolist()))
            dfs = [memo[t] for t in counts]
        else:
            df = v.df
            dfs = [df.item(t) for t in counts]
        n = scope.n
        terms = [(t, log1p((n - d + 0.5) / (d + 0.5)) * c) for (t, c), d in zip(counts.items(), dfs) if d > 0]
        terms.sort(key=_minus_weight)  # heaviest first (stable), for early termination
        return (np.array([t for t, _ in terms], np.int64).reshape(-1),
                np.array([w for _, w in terms], np.float64).reshape(-1))

    def _scope(self, allow, v: _View, statistics: str) -> _Scope:
        """What a search with this allow scores, and with which statistics."""
        if allow is None:
            return v.everything
        frozen = isinstance(allow, FrozenBitMap)
        if frozen:
            # Immutable, so its scope holds until the index changes (a new view): built once
            # for a Collection snapshot's rows or a tenant's rows, not per query.
            key = (id(allow), statistics)
            cached = self._scopes.get(key)
            if cached is not None and cached[0] is allow and cached[1] is v:
                return cached[2]
        keep, kept = self._keep_of(allow, v)
        if statistics == "allowed":
            if kept is None:
                kept = np.flatnonzero(keep)
            n = int(kept.size)
            total = int(v.dl[kept].sum(dtype=np.int64))
            # keep is a subset of the live rows: the same count means the same rows
            scope = _Scope(keep, n, _avgdl(total, n), n != v.n_live, total)
        else:
            scope = _Scope(keep, v.n_live, v.everything.avgdl, False, v.everything.total_len)
        if frozen:
            with self._scopes_lock:
                scopes = self._scopes
                limit = max(2, min(_SCOPES_KEPT, _SCOPE_BYTES // max(v.n_rows, 1)))
                while len(scopes) >= limit and key not in scopes:
                    del scopes[next(iter(scopes))]  # the oldest
                scopes[key] = (allow, v, scope)  # holding allow keeps its id from being reused
        return scope

    @staticmethod
    def _keep_of(allow, v: _View):
        """(uint8 mask of live allowed rows, their row numbers or None if not at hand)."""
        mask, ids = allow_arrays(allow, _allow_len(allow, v.n_rows))
        if mask is not None:
            return v.alive & mask[: v.n_rows], None
        keep = np.zeros(v.n_rows, np.uint8)
        ids = ids[ids < v.n_rows]
        ids = ids[v.alive[ids] != 0]
        keep[ids] = 1
        return keep, ids

    def _scratch(self, n):
        tls = self._tls
        acc = getattr(tls, "acc", None)
        if acc is None or acc.shape[0] < n:
            tls.acc = acc = np.zeros(max(n, 1), np.float64)
            tls.touched = np.empty(max(n, 1), np.int64)
        return acc, tls.touched

    def _search_one(self, query, k, scope: _Scope, v):
        tids, w = self._query_terms(query, v, scope)
        if tids.size == 0 or v.n_rows == 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        acc, touched = self._scratch(v.n_rows)
        c0, c1 = self.k1 * (1.0 - self.b), self.k1 * self.b / scope.avgdl  # length norm = c0 + c1 * dl
        return _kernels().score_topk(*v.a, *v.t, tids, w, v.dl, c0, c1, scope.keep, k, acc, touched,
                                     self._prune_min)

    def search(self, query: str, k: int = 10, allow=None, statistics: str = "index"):
        """Top-k rows for one query: (rows int64, scores float32), best first,
        ties by the smaller row. Only live rows that contain at least one query
        token and are allowed are returned, so there may be fewer than k.

        allow: None, a pyroaring BitMap, a bool mask or an array of row numbers
        (as vecsift.allow.allow_arrays takes them). Rows outside it are never
        scored. Bool masks may be longer than n_rows; extra entries are ignored.

        statistics: "index" scores with N, avgdl and df of all live rows (allow
        only filters); "allowed" with those of the allowed live rows, so scores
        equal an index holding only them and say nothing about the other rows
        (what a Collection uses: one tenant's words never move another's scores);
        a dict {"n", "total_len", "df"} (term_statistics of every shard, summed)
        scores with those global numbers, as one index over all shards would."""
        k = check_k(k)
        v = self._get_view()
        k = min(k, max(v.n_rows, 1))  # at most n rows come back: a larger k only costs (numba needs int64)
        if isinstance(statistics, dict):
            return self._search_one(query, k, self._given_scope(query, allow, v, statistics), v)
        return self._search_one(query, k, self._scope(allow, v, _check_statistics(statistics)), v)

    def term_statistics(self, query: str, allow=None) -> dict:
        """The statistics a search for `query` over the allowed live rows would score with:
        {"n": rows, "total_len": their summed lengths, "df": {term: rows containing it}} for
        every distinct query token (0 for tokens this index does not hold).

        Indexes holding disjoint rows (shards) sum these and pass the sums to
        search(statistics=...), which then scores exactly as one index holding all of them."""
        if not isinstance(query, str):
            raise TypeError(f"query must be str, got {type(query).__name__}")
        v = self._get_view()
        scope = self._scope(allow, v, "allowed")
        get = self._vocab.get
        n_terms = v.df.shape[0]
        tids = {}
        for w in self.tokenizer(query):
            if w not in tids:
                t = get(w)
                tids[w] = t if t is not None and t < n_terms else None
        known = [t for t in tids.values() if t is not None]
        if scope.local:
            memo = scope.df
            missing = [t for t in known if t not in memo]
            if missing:
                memo.update(zip(missing, _kernels().kept_df(v.a[0], v.a[1], v.t[0], v.t[1],
                                                             np.array(missing, np.int64), scope.keep).tolist()))
            df_of = memo.__getitem__
        else:
            df_of = v.df.item
        df = {w: (0 if t is None else int(df_of(t))) for w, t in tids.items()}
        return {"n": int(scope.n), "total_len": int(scope.total_len), "df": df}

    def _given_scope(self, query, allow, v: _View, stats: dict) -> _Scope:
        """The allowed rows of `allow`, scored with externally supplied statistics (term_statistics sums)."""
        try:
            n, total, df = int(stats["n"]), int(stats["total_len"]), stats["df"]
        except (KeyError, TypeError, ValueError):
            raise ValueError("statistics must be 'index', 'allowed' or a dict with n, total_len and df "
                             "(as term_statistics returns)") from None
        if n < 0 or total < 0 or not isinstance(df, dict):
            raise ValueError("statistics: n and total_len must be >= 0 and df a dict of term -> count")
        keep = self._scope(allow, v, "index").keep
        scope = _Scope(keep, n, _avgdl(total, n), True, total)
        get = self._vocab.get
        n_terms = v.df.shape[0]
        for w in self.tokenizer(query):
            t = get(w)
            if t is not None and t < n_terms:
                d = df.get(w, 0)
                if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
                    raise ValueError(f"statistics: df of {w!r} must be an integer >= 0, got {d!r}")
                scope.df[t] = int(d)
        return scope

    def search_batch(self, queries, k: int = 10, allow=None, allows=None, threads: int = 1,
                     statistics: str = "index"):
        """Many queries: (rows int64 (q, k) padded with -1, scores float32 (q, k)
        padded with -inf). allow applies to every query; allows (a list, one
        allow per query) overrides it. threads=0 uses all cores. statistics: as
        in search()."""
        if isinstance(queries, str):
            raise TypeError("queries must be a sequence of str; use search() for one query")
        queries = list(queries)
        k = check_k(k)
        check_cells(len(queries), k)
        threads = check_threads(threads) or (os.cpu_count() or 1)
        if allows is not None and len(allows) != len(queries):
            raise ValueError(f"allows has {len(allows)} entries for {len(queries)} queries")
        statistics = _check_statistics(statistics)
        v = self._get_view()
        shared = self._scope(allow, v, statistics) if allows is None else None
        out_r = np.full((len(queries), k), -1, np.int64)
        out_s = np.full((len(queries), k), -np.inf, np.float32)

        def run(i):
            scope = shared if allows is None else self._scope(allows[i], v, statistics)
            r, s = self._search_one(queries[i], k, scope, v)
            out_r[i, : r.shape[0]] = r
            out_s[i, : s.shape[0]] = s

        if threads == 1 or len(queries) < 2:
            for i in range(len(queries)):
                run(i)
        else:
            with ThreadPoolExecutor(min(threads, len(queries))) as ex:
                list(ex.map(run, range(len(queries))))
        return out_r, out_s

    # ---- persistence ---------------------------------------------------
    def save(self, path) -> None:
        """Write the index to path (merging the tail first), flushed and fsynced.

        Writes only that one file, so a caller wanting atomicity writes to a
        temporary name and os.replace()s it. Layout: magic, format version,
        JSON header, arrays (little-endian), vocabulary, CRC-32 of all of it."""
        self.merge()
        with self._lock:
            ptr, docs, tfs = self._a
            n = self._n_rows
            terms = _terms_by_id(self._vocab)
            ptr = _full_ptr(ptr, len(terms))
            vocab_bytes = "\n".join(terms).encode("utf-8")
            arrays = [("ptr", ptr.astype("<i8")), ("docs", docs.astype("<i4")),
                      ("tfs", tfs.astype("<i4")), ("doclen", self._doclen[:n].astype("<i4")),
                      ("state", self._state[:n].astype("u1"))]
            tcfg = self.tokenizer.config() if isinstance(self.tokenizer, Tokenizer) else None
            header = {"k1": self.k1, "b": self.b, "tokenizer": tcfg, "n_rows": n,
                      "vocab_size": len(terms), "vocab_bytes": len(vocab_bytes),
                      "arrays": [[name, a.dtype.str, int(a.shape[0])] for name, a in arrays]}
            hb = json.dumps(header).encode("utf-8")
            parts = [_MAGIC, np.uint32(_VERSION).tobytes(), np.uint32(len(hb)).tobytes(), hb]
            parts += [a.tobytes() for _, a in arrays] + [vocab_bytes]
        crc = 0
        with open(path, "wb") as f:
            for p in parts:
                f.write(p)
                crc = update(CRC32C, p, crc)
            f.write(np.uint32(crc).tobytes() + _END)
            f.flush()
            os.fsync(f.fileno())

    @classmethod
    def load(cls, path, tokenizer=None) -> "BM25Index":
        """Read a file written by save(). Any truncation, corruption, other
        format version or inconsistency raises vecsift.CorruptIndexError."""
        with open(path, "rb") as f:
            data = f.read()
        return cls._from_bytes(data, tokenizer, str(path))

    @classmethod
    def _from_bytes(cls, data: bytes, tokenizer, name):
        def bad(why):
            return CorruptIndexError(f"{name}: not a valid vecsift BM25 file ({why})")

        tail = 4 + len(_END)
        if len(data) < len(_MAGIC) + 8 + tail or not data.startswith(_MAGIC):
            raise bad("bad magic or too short")
        if not data.endswith(_END):
            raise bad("truncated: end marker missing")
        version = int(np.frombuffer(data, "<u4", 1, len(_MAGIC))[0])
        if version not in _TRAILER_ALGO:
            raise bad(f"format version {version}, this vecsift reads versions {sorted(_TRAILER_ALGO)}")
        crc = int(np.frombuffer(data, "<u4", 1, len(data) - tail)[0])
        if update(_TRAILER_ALGO[version], memoryview(data)[: len(data) - tail]) != crc:
            raise bad("checksum mismatch")
        hlen = int(np.frombuffer(data, "<u4", 1, len(_MAGIC) + 4)[0])
        off = len(_MAGIC) + 8
        try:
            header = json.loads(data[off: off + hlen].decode("utf-8"))
            off += hlen
            if not isinstance(header, dict) or not isinstance(header.get("arrays"), list) or not all(
                    isinstance(a, list) and len(a) == 3 for a in header["arrays"]):
                raise bad("header is not an object with an array table")
            if not all(isinstance(header.get(f), int) and not isinstance(header.get(f), bool) and header[f] >= 0
                       for f in ("n_rows", "vocab_size", "vocab_bytes")):
                raise bad("header sizes are not counts")
            arrs = {}
            if [a[0] for a in header["arrays"]] != list(_DTYPES):
                raise bad("unexpected array list")
            for aname, dt, count in header["arrays"]:
                if dt != _DTYPES[aname]:
                    raise bad(f"array {aname} has dtype {dt}, expected {_DTYPES[aname]}")
                dt = np.dtype(dt)
                count = int(count)
                nbytes = dt.itemsize * int(count)
                if count < 0 or off + nbytes > len(data) - tail:
                    raise bad(f"array {aname} runs past the end")
                arrs[aname] = np.frombuffer(data, dt, count, off).copy()
                off += nbytes
            vb = int(header["vocab_bytes"])
            if off + vb != len(data) - tail:
                raise bad("sizes do not add up")
            vtext = data[off: off + vb].decode("utf-8")
            terms = vtext.split("\n") if header["vocab_size"] else []
            k1, b, n = float(header["k1"]), float(header["b"]), int(header["n_rows"])
            ptr, docs, tfs = arrs["ptr"], arrs["docs"], arrs["tfs"]
            doclen, state = arrs["doclen"], arrs["state"]
            tcfg = header["tokenizer"]
        except CorruptIndexError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, OverflowError, UnicodeDecodeError) as exc:
            raise bad(f"unreadable header: {exc}") from None
        V = len(terms)
        if V != header["vocab_size"] or len(set(terms)) != V:
            raise bad("vocabulary size mismatch or duplicate terms")
        if ptr.shape[0] != V + 1 or ptr[0] != 0 or (np.diff(ptr) < 0).any() or ptr[-1] != docs.shape[0]:
            raise bad("posting pointers inconsistent")
        if tfs.shape[0] != docs.shape[0] or doclen.shape[0] != n or state.shape[0] != n:
            raise bad("array lengths inconsistent")
        if docs.size and (docs.min() < 0 or docs.max() >= n):
            raise bad("posting row out of range")
        if tfs.size and tfs.min() < 1:
            raise bad("term frequency below 1")
        if state.size and state.max() > _DELETED:
            raise bad("unknown row state")
        if doclen.size and doclen.min() < 0:
            raise bad("negative document length")
        # Rows ascend within each term (search binary-searches them).
        if docs.size > 1:
            step = np.diff(docs.astype(np.int64))
            inner = np.ones(docs.shape[0] - 1, bool)
            bounds = ptr[1:-1]
            inner[bounds[(bounds > 0) & (bounds < docs.shape[0])] - 1] = False
            if (step[inner] <= 0).any():
                raise bad("posting rows not ascending")
        alive = state == _ALIVE
        lens = np.bincount(docs, weights=tfs, minlength=n) if n else np.zeros(0)
        if (lens[alive] != doclen[alive]).any() or (lens[state == _FREE] != 0).any():
            raise bad("document lengths do not match postings")
        if tcfg is None and tokenizer is None:
            raise ValueError(f"{name} was built with a custom tokenizer; pass tokenizer= to load()")
        try:  # the header's tokenizer configuration and parameters, checked as if passed by a caller
            if tokenizer is None:
                tokenizer = Tokenizer.from_config(tcfg)
            idx = cls(k1=k1, b=b, tokenizer=tokenizer)
        except (KeyError, TypeError, ValueError) as exc:
            raise bad(f"bad parameters: {exc}") from None
        idx._vocab = _Vocab((t, i) for i, t in enumerate(terms))
        idx._a = (ptr.astype(np.int64), docs.astype(np.int32), tfs.astype(np.int32))
        idx._doclen, idx._state, idx._n_rows = doclen.astype(np.int32), state, n
        idx._n_live = int(alive.sum())
        idx._total_len = int(doclen[alive].sum())
        idx._df_stale = True
        return idx


def _check_statistics(statistics):
    if statistics not in ("index", "allowed"):
        raise ValueError(f"statistics must be 'index' or 'allowed', got {statistics!r}")
    return statistics


def _minus_weight(term):
    return -term[1]


def _full_ptr(ptr, vocab_size):
    """A segment's ptr covers the terms known when it was built; pad to all of them."""
    if ptr.shape[0] >= vocab_size + 1:
        return ptr
    return np.concatenate([ptr, np.full(vocab_size + 1 - ptr.shape[0], ptr[-1], np.int64)])


def _terms_by_id(vocab: dict) -> list:
    terms = [""] * len(vocab)
    for t, i in vocab.items():
        terms[i] = t
    return terms


def _as_rows(rows, n_rows) -> np.ndarray:
    """delete()'s argument as int64 row numbers below n_rows."""
    from pyroaring import AbstractBitMap

    from vecsift.allow import bitmap_rows
    if isinstance(rows, AbstractBitMap):
        ids = bitmap_rows(rows)
    else:
        arr = np.atleast_1d(np.asarray(rows))
        if arr.dtype == np.bool_:
            ids = np.flatnonzero(arr)
        elif arr.size == 0:
            ids = np.empty(0, np.int64)
        elif np.issubdtype(arr.dtype, np.integer) and arr.ndim == 1:
            ids = arr.astype(np.int64)
            if ids.min() < 0:
                raise ValueError(f"rows must be >= 0, got {int(ids.min())}")
        else:
            raise TypeError(f"rows must be integer row numbers, a bool mask or a BitMap, got dtype {arr.dtype}")
    return ids[ids < n_rows]


def _max_id(x) -> int:
    """Largest row in an id collection (for range checks); -1 if none / a mask."""
    try:
        from pyroaring import AbstractBitMap
        if isinstance(x, AbstractBitMap):
            return int(x.max()) if len(x) else -1
    except ImportError:  # pragma: no cover
        pass
    arr = np.asarray(x)
    if arr.dtype == np.bool_ or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        return -1
    return int(arr.max())


def _allow_len(allow, n_rows) -> int:
    """allow_arrays checks ids against a length; rows past n_rows have no text,
    so they are accepted (and match nothing) rather than refused."""
    arr = allow if not isinstance(allow, (list, tuple)) else np.asarray(allow)
    if isinstance(arr, np.ndarray) and arr.dtype == np.bool_:
        if arr.ndim == 1 and arr.shape[0] >= n_rows:
            return arr.shape[0]
        return n_rows  # let allow_arrays raise its length error
    return max(n_rows, _max_id(allow) + 1)
