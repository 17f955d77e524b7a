"""IVFIndex: k-means partitions of binary codes, probed in centroid order,
candidates rescored exactly from float32 rows (C++ core: index/partitioned.hpp).

A query ranks the lists by centroid similarity, scans the codes of the first
``nprobe`` of them (the allow set applied inside each list), keeps the
``k * oversample * refine`` best by Hamming distance, re-ranks those by the
asymmetric estimate <q, sign bits> (one table lookup a code byte) down to
``k * oversample``, and rescores those exactly from the float32 rows.

Filters keep recall: when the probed lists hold fewer than ``k * oversample``
allowed rows, probing continues in centroid order until they do (or every
list has been seen), so k rows come back whenever k rows are allowed. Allow
sets so small that reading their rows is cheaper than probing for them take
the exact path over the allowed rows.

Memory: ``IVFIndex.open`` maps the file read-only; codes, row ids, lists,
centroids (and float32 rows, when the file holds them) are served from the
page cache and shared by every process that opens the same file.

Thread safety: any number of threads may search at once; ``add`` replaces the
layout in one step (searches running then finish on the old layout).
"""
from __future__ import annotations

import math
import os

import numpy as np

from vecsift import _core
from vecsift._arrays import as_vectors, check_cells, check_k, check_threads
from vecsift.allow import allow_arrays
from vecsift.errors import CorruptIndexError
from vecsift.index import kmeans
from vecsift.index import partitioned_io
from vecsift.index.flat import check_metric

SCORERS = ("sign",)
_BLOCK = 8  # rows a code block (binary.hpp kBlockRows)


def _positive_int(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x <= 0:
        raise ValueError(f"{name} must be a positive integer, got {x!r}")
    return int(x)


def default_nlist(n: int) -> int:
    """About 2 * sqrt(n) lists rounded to a power of two (1M rows: 2048)."""
    return max(1, 2 ** round(math.log2(max(1.0, 2.0 * math.sqrt(max(1, n))))))


def _inv_norms(rows: np.ndarray, step: int = 1 << 16) -> np.ndarray:
    out = np.empty(rows.shape[0], dtype=np.float32)
    for s in range(0, rows.shape[0], step):
        x = np.asarray(rows[s:s + step], dtype=np.float32)
        nrm = np.sqrt(np.einsum("ij,ij->i", x, x))
        with np.errstate(divide="ignore"):
            out[s:s + x.shape[0]] = np.where(nrm > 0, 1.0 / nrm, 0.0)
    return out


def _codes(rows: np.ndarray, step: int = 1 << 16) -> np.ndarray:
    """Sign-bit codes of rows (may be a memmap), as uint64 words a row."""
    n, d = rows.shape
    nbytes = (d + 7) // 8
    words = (nbytes + 7) // 8
    out = np.zeros((n, words * 8), dtype=np.uint8)
    for s in range(0, n, step):
        out[s:s + step, :nbytes] = _core.binary_quantize(np.ascontiguousarray(rows[s:s + step], dtype=np.float32))
    return out.view(np.uint64)


class _Layout:
    """The arrays the core reads: lists of blocked codes with their row ids."""

    __slots__ = ("list_block", "list_size", "slot_row", "codes")

    def __init__(self, list_block, list_size, slot_row, codes):
        self.list_block, self.list_size, self.slot_row, self.codes = list_block, list_size, slot_row, codes

    @classmethod
    def build(cls, assign: np.ndarray, words: np.ndarray, nlist: int) -> "_Layout":
        """assign: list of each row (int), words: (n, w) uint64 codes in row order."""
        n, w = words.shape
        sizes = np.bincount(assign, minlength=nlist).astype(np.int64)
        blocks = (sizes + _BLOCK - 1) // _BLOCK
        list_block = np.zeros(nlist + 1, dtype=np.int64)
        np.cumsum(blocks, out=list_block[1:])
        order = np.argsort(assign, kind="stable")
        first = np.cumsum(sizes) - sizes
        rank = np.arange(n, dtype=np.int64) - np.repeat(first, sizes)
        slots = np.repeat(list_block[:-1] * _BLOCK, sizes) + rank
        nslots = int(list_block[-1]) * _BLOCK
        slot_row = np.full(nslots, -1, dtype=np.int64)
        slot_row[slots] = order
        flat = np.zeros((nslots, w), dtype=np.uint64)
        flat[slots] = words[order]
        codes = np.ascontiguousarray(flat.reshape(-1, _BLOCK, w).transpose(0, 2, 1)).reshape(-1)
        return cls(list_block, sizes, slot_row, codes)

    def row_major(self, n: int):
        """(assign int64 (n,), words (n, w)) back from the layout, for adds."""
        nslots = self.slot_row.size
        w = self.codes.size // max(1, nslots)
        flat = np.asarray(self.codes).reshape(-1, w, _BLOCK).transpose(0, 2, 1).reshape(nslots, w)
        valid = np.flatnonzero(np.asarray(self.slot_row) >= 0)
        rows = np.asarray(self.slot_row)[valid]
        words = np.empty((n, w), dtype=np.uint64)
        words[rows] = flat[valid]
        lists = np.repeat(np.arange(self.list_size.size), np.diff(np.asarray(self.list_block)) * _BLOCK)
        assign = np.empty(n, dtype=np.int64)
        assign[rows] = lists[valid]
        return assign, words


class IVFIndex:
    """Partitioned index over binary codes with exact float32 rescoring.

    ``metric``: "cosine" (default; score is the cosine similarity), "ip", or
    "l2" (score is the *negative squared* L2 distance). Scores are
    similarities: higher is better. Row ids are 0..n-1 in the order added.

    Build: ``train(sample_or_all_rows)`` then ``add(rows)``; or
    ``IVFIndex.build(rows, nlist)``. The float32 rows passed to the first
    ``add`` are kept by reference when they are already float32 C-contiguous
    (a memmap stays a memmap); later adds concatenate into memory.
    """

    def __init__(self, dim: int, nlist: int | None = None, metric: str = "cosine", *, nprobe: int = 32,
                 oversample: int = 16, refine: int = 8, scorer: str = "sign", seed: int = 0):
        self._dim = _positive_int(dim, "dim")
        self._nlist = None if nlist is None else _positive_int(nlist, "nlist")
        self._metric = check_metric(metric)
        self.nprobe = _positive_int(nprobe, "nprobe")
        self.oversample = _positive_int(oversample, "oversample")
        self.refine = _positive_int(refine, "refine")
        if scorer not in SCORERS:
            raise ValueError(f"scorer must be one of {SCORERS}, got {scorer!r}")
        self._scorer = scorer
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self._seed = int(seed)
        self._centroids = None
        self._layout = None
        self._vectors = None
        self._inv_norm = None
        self._core = None
        self._path = None

    # ------------------------------------------------------------ properties
    @property
    def dim(self) -> int:
        return self._dim

    @property
    def metric(self) -> str:
        return self._metric

    @property
    def nlist(self) -> int | None:
        return None if self._centroids is None else self._centroids.shape[0]

    @property
    def is_trained(self) -> bool:
        return self._centroids is not None

    @property
    def is_mapped(self) -> bool:
        """True when codes and lists are served from a file mapping (IVFIndex.open)."""
        return self._path is not None and isinstance(self._layout.codes, np.memmap)

    def __len__(self) -> int:
        return 0 if self._vectors is None else self._vectors.shape[0]

    @property
    def centroids(self) -> np.ndarray:
        self._need_trained()
        return self._centroids

    def list_sizes(self) -> np.ndarray:
        """Rows in each list (int64, nlist)."""
        self._need_trained()
        if self._layout is None:
            return np.zeros(self.nlist, dtype=np.int64)
        return np.asarray(self._layout.list_size).copy()

    def balance(self) -> dict:
        """List size summary: lists, empty, min, max, mean, imbalance (1.0 = even)."""
        return kmeans.balance(self.list_sizes())

    def nbytes(self) -> dict:
        """Bytes of each structure (whether mapped or in memory)."""
        out = {"centroids": 0 if self._centroids is None else int(self._centroids.nbytes)}
        if self._layout is not None:
            for name in _Layout.__slots__:
                out[name] = int(getattr(self._layout, name).nbytes)
        if self._vectors is not None:
            out["vectors"] = int(self._vectors.nbytes)
        if self._inv_norm is not None:
            out["inv_norm"] = int(self._inv_norm.nbytes)
        return out

    def _need_trained(self):
        if self._centroids is None:
            raise RuntimeError("the index is not trained: call train() or IVFIndex.build() first")

    # ------------------------------------------------------------ build
    def train(self, vectors, nlist: int | None = None, iters: int = 10, sample_per_list: int = 64) -> "IVFIndex":
        """k-means on a seeded sample of ``vectors`` (nlist * sample_per_list rows)."""
        rows = self._rows_arg(vectors, "vectors")
        nlist = nlist if nlist is not None else self._nlist
        nlist = default_nlist(rows.shape[0]) if nlist is None else _positive_int(nlist, "nlist")
        if nlist > rows.shape[0]:
            raise ValueError(f"nlist ({nlist}) must not exceed the number of training rows ({rows.shape[0]})")
        iters = _positive_int(iters, "iters")
        sample_per_list = _positive_int(sample_per_list, "sample_per_list")
        c, _ = kmeans.train(rows, nlist, self._metric, iters=iters, sample_per_list=sample_per_list,
                            seed=self._seed)
        if self._layout is not None and len(self):
            # Retrain of a filled index: reassign every row to the new lists.
            self._centroids = c
            vectors, self._vectors, self._layout = self._vectors, None, None
            self._inv_norm = None
            self.add(vectors)
        else:
            self._centroids = c
        return self

    @classmethod
    def build(cls, vectors, nlist: int | None = None, metric: str = "cosine", **kwargs) -> "IVFIndex":
        """train + add in one call."""
        train_kw = {k: kwargs.pop(k) for k in ("iters", "sample_per_list") if k in kwargs}
        rows = as_vectors(vectors, "vectors", check_finite=False)
        index = cls(rows.shape[1], nlist, metric, **kwargs)
        index.train(rows, **train_kw)
        index.add(rows)
        return index

    def _rows_arg(self, vectors, name):
        if isinstance(vectors, np.ndarray) and vectors.dtype == np.float32 and vectors.ndim == 2 \
                and vectors.flags.c_contiguous:
            if vectors.shape[1] != self._dim:
                raise ValueError(f"{name} have dimension {vectors.shape[1]}, expected {self._dim}")
            self._check_finite(vectors, name)
            return vectors
        return as_vectors(vectors, name, dim=self._dim)

    @staticmethod
    def _check_finite(rows, name, step=1 << 18):
        for s in range(0, rows.shape[0], step):
            if not _core.all_finite(np.ascontiguousarray(rows[s:s + step])):
                raise ValueError(f"{name} contain NaN or infinite values")

    def add(self, vectors) -> None:
        """Appends rows (ids continue from len(self)); each goes to its nearest list."""
        self._need_trained()
        rows = self._rows_arg(vectors, "vectors")
        if rows.shape[0] == 0:
            return
        assign_new = kmeans.assign(rows, self._centroids, self._metric).astype(np.int64)
        words_new = _codes(rows)
        inv_new = _inv_norms(rows) if self._metric == "cosine" else None
        if self._layout is None or len(self) == 0:
            assign, words, vecs, inv = assign_new, words_new, rows, inv_new
        else:
            assign_old, words_old = self._layout.row_major(len(self))
            assign = np.concatenate([assign_old, assign_new])
            words = np.concatenate([words_old, words_new])
            vecs = np.concatenate([np.asarray(self._vectors), rows])
            inv = None if inv_new is None else np.concatenate([np.asarray(self._inv_norm), inv_new])
        layout = _Layout.build(assign, words, self.nlist)
        self._install(layout, vecs, inv, path=None)

    def _install(self, layout, vectors, inv_norm, path):
        core = _core.IVF(self._centroids, layout.list_block, layout.list_size, layout.slot_row, layout.codes,
                         vectors, inv_norm, self._metric, self._scorer)
        self._layout, self._vectors, self._inv_norm, self._core, self._path = layout, vectors, inv_norm, core, path

    # ------------------------------------------------------------ search
    def search(self, queries, k: int = 10, nprobe: int | None = None, oversample: int | None = None,
               allow=None, threads: int = 0, refine: int | None = None, min_candidates: int = 0,
               exact_small: bool = True, return_stats: bool = False):
        """Returns (ids int64 (n, k), scores float32 (n, k)), best first.

        nprobe lists are probed (more when a filter leaves too few allowed
        rows in them, see the module docstring; ``min_candidates`` sets that
        floor). The best k * oversample * refine by Hamming distance are
        re-ranked by the asymmetric estimate (float query against the sign
        bits) and the best k * oversample of those rescored exactly. ``allow``: roaring
        bitmap, bool mask of len(self), or row ids. Missing results (fewer
        than k allowed rows) are id -1, score -inf. ``return_stats`` adds a
        dict of lists / rows probed and exact-path queries.
        """
        k = check_k(k)
        threads = check_threads(threads)
        nprobe = self.nprobe if nprobe is None else _positive_int(nprobe, "nprobe")
        oversample = self.oversample if oversample is None else _positive_int(oversample, "oversample")
        refine = self.refine if refine is None else _positive_int(refine, "refine")
        if isinstance(min_candidates, bool) or not isinstance(min_candidates, (int, np.integer)) \
                or min_candidates < 0:
            raise ValueError(f"min_candidates must be a non-negative integer, got {min_candidates!r}")
        q = as_vectors(queries, "queries", dim=self._dim)
        check_cells(len(q), k * oversample * refine, "queries x k x oversample x refine")
        if self._core is None:
            if self._centroids is None:
                raise RuntimeError("the index is not trained: call train() or IVFIndex.build() first")
            ids = np.full((q.shape[0], k), -1, dtype=np.int64)
            scores = np.full((q.shape[0], k), -np.inf, dtype=np.float32)
            return (ids, scores, {"lists": 0, "rows": 0, "exact": 0}) if return_stats else (ids, scores)
        if self._metric == "cosine":
            nrm = np.linalg.norm(q, axis=1, keepdims=True)
            nrm[nrm == 0] = 1.0
            q = np.ascontiguousarray(q / nrm, dtype=np.float32)
        mask, aids = allow_arrays(allow, len(self))
        ids, scores, stats = self._core.search(q, k, nprobe, oversample, refine, int(min_candidates),
                                               bool(exact_small), mask, aids, threads)
        return (ids, scores, stats) if return_stats else (ids, scores)

    # ------------------------------------------------------------ persistence
    def save(self, path, include_vectors: bool = True) -> None:
        """Writes the index to one file (temp + fsync + rename).

        include_vectors=False leaves the float32 rows out (a collection keeps
        them in its own row file): open() must then be given ``vectors=``.
        """
        self._need_trained()
        meta = {"kind": "ivf", "dim": self._dim, "metric": self._metric, "scorer": self._scorer,
                "nlist": self.nlist, "n": len(self), "nprobe": self.nprobe, "oversample": self.oversample,
                "refine": self.refine,
                "seed": self._seed, "has_vectors": bool(include_vectors)}
        sections = {"centroids": self._centroids}
        if self._layout is not None:
            for name in _Layout.__slots__:
                sections[name] = getattr(self._layout, name)
            if self._inv_norm is not None:
                sections["inv_norm"] = self._inv_norm
            if include_vectors:
                sections["vectors"] = self._vectors
        partitioned_io.write(path, meta, sections)

    @classmethod
    def open(cls, path, vectors=None, verify: str = "index") -> "IVFIndex":
        """Maps a saved index read-only (shared page cache, nothing copied).

        ``vectors``: the float32 rows (n, dim) when the file was saved without
        them (an array or memmap, kept by reference). A damaged file raises
        vecsift.CorruptIndexError.
        """
        meta, arr = partitioned_io.read(path, verify=verify)
        try:
            index = cls(meta["dim"], meta["nlist"], meta["metric"], nprobe=meta["nprobe"],
                        oversample=meta["oversample"], refine=meta.get("refine", 1), scorer=meta["scorer"],
                        seed=meta["seed"])
            n, nlist = int(meta["n"]), int(meta["nlist"])
            if not isinstance(meta["has_vectors"], bool) or n < 0:
                raise ValueError("has_vectors must be true or false and n a count")
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise CorruptIndexError(f"{path}: header fields are invalid ({exc})") from None
        if meta.get("kind") != "ivf":
            raise CorruptIndexError(f"{path}: not an IVF index")
        c = arr.get("centroids")
        if c is None or c.dtype != np.float32 or c.shape != (nlist, index.dim):
            raise CorruptIndexError(f"{path}: centroids section is malformed")
        index._centroids = c
        if "codes" not in arr:
            if n:
                raise CorruptIndexError(f"{path}: rows recorded but no code sections")
            return index
        if meta["has_vectors"]:
            if vectors is not None:
                raise ValueError("vectors: this file holds its own float32 rows")
            vecs = arr.get("vectors")
        else:
            if vectors is None:
                raise ValueError("vectors: the file was saved without float32 rows; pass vectors=(n, dim) float32")
            vecs = vectors
            if not (isinstance(vecs, np.ndarray) and vecs.dtype == np.float32 and vecs.flags.c_contiguous):
                vecs = as_vectors(vecs, "vectors", dim=index.dim)
            if vecs.shape != (n, index.dim):
                raise ValueError(f"vectors: expected shape {(n, index.dim)}, got {vecs.shape}")
        if vecs is None or vecs.shape != (n, index.dim):
            raise CorruptIndexError(f"{path}: vectors section is malformed")
        try:
            layout = _Layout(arr["list_block"], arr["list_size"], arr["slot_row"], arr["codes"])
            index._install(layout, vecs, arr.get("inv_norm"), path=os.fspath(path))
        except KeyError as exc:
            raise CorruptIndexError(f"{path}: section {exc} is missing") from None
        except (ValueError, TypeError) as exc:  # the core's consistency checks (types and sizes)
            raise CorruptIndexError(f"{path}: {exc}") from None
        if int(np.asarray(layout.list_size).sum()) != n:
            raise CorruptIndexError(f"{path}: list sizes do not add up to {n} rows")
        return index
