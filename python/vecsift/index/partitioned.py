"""IVFIndex: k-means partitions of quantised codes, probed in centroid order,
candidates rescored exactly from float32 rows (C++ core: index/partitioned_quant.hpp
for the RaBitQ codes, index/partitioned.hpp for the sign-bit codes of format 1).

scorer="rabitq" (the default): each list stores the RaBitQ-style codes of the
quantisation issue (``bits`` 1/2/4/8 bit planes of the rotated residual to the
list's centroid, ``centre="list"``, or to one global mean, ``centre="global"``)
in 32-row blocks, scanned by the same kernels as ``QuantizedIndex``, one call
per probed list (4-bit codes as nibbles, the others as bit planes:
kernels/quant_layout.hpp; 4-bit files written before format 4 keep planes).
A query keeps the best ``k * oversample`` estimates and, with
``rescore="bound"`` (the collection's bq policy), rescores only those whose
upper bound reaches the k-th best lower bound (``confidence`` standard
deviations); ``rescore="fixed"`` rescores all of them, ``"none"`` returns the
estimates.

scorer="sign": the sign-bit codes of files written before (format 1), ranked by
Hamming distance, ``k * oversample * refine`` re-ranked by the asymmetric
estimate <q, sign bits> down to ``k * oversample``, then rescored.

Filters keep recall: when the probed lists hold fewer than ``k * oversample``
allowed rows, probing continues in centroid order until they do (or every
list has been seen), so k rows come back whenever k rows are allowed. Allow
sets so small that reading their rows is cheaper than probing for them take
the exact path over the allowed rows.

Memory: ``IVFIndex.open`` maps the file read-only; codes, factors, row ids,
lists, centroids, rotation (and float32 rows, when the file holds them) are
served from the page cache and shared by every process that opens the file.

Thread safety: any number of threads may search at once; ``add`` replaces the
layout in one step (searches running then finish on the old layout).
"""
from __future__ import annotations

import math
import os
import time

import numpy as np

from vecsift import _core
from vecsift._arrays import as_vectors, check_cells, check_k, check_threads, unit_queries
from vecsift.allow import allow_arrays
from vecsift.errors import CorruptIndexError
from vecsift.index import kmeans
from vecsift.index import partitioned_io
from vecsift.index.list_ranking import rank_basis
from vecsift.index.flat import check_metric
from vecsift.index.quantised import SUPPORTED_BITS, compact_code_dim, default_query_bits

SCORERS = ("rabitq", "sign")
CENTRES = ("list", "global")
# "fht": random signs + Walsh-Hadamard rounds (quant_rotation.hpp), O(D log D) a row, 4 x D floats
# stored; "dense": the Haar matrix of format-2 files, D x D floats and D^2 work a row.
ROTATIONS = ("fht", "dense")
RESCORE = ("bound", "fixed", "none")
_BLOCK = {"sign": 8, "rabitq": 32}  # rows a code block (binary.hpp kBlockRows, quant_scan.hpp kQuantBlockRows)
# Defaults chosen by measurement at 1M x 384 (bench/bench_scale.py, docs/partitioned.md).
# rabitq: 2-bit codes, the best 4k estimates, bounds 1.5 sigma wide: on the 100k PyPI MiniLM rows
# (nlist 256, nprobe 32) recall 0.9468 with 31 rows rescored a query, the same as rescoring all 40
# (1.0 sigma: 0.9441 with 23 rows; filtered 10%: 0.9997 against 0.9959).
DEFAULT_OVERSAMPLE = {"sign": 16, "rabitq": 4}
# Two-level k-means (train + assignment) from this many lists; a row is assigned among the lists of
# its ASSIGN_TOP nearest coarse cells (docs/partitioned.md, "Build at scale").
TWO_LEVEL_MIN_NLIST = 4096
ASSIGN_TOP = 3


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
    """The arrays the core reads: lists of blocked codes with their row ids.

    codes: sign -> uint64 words, block b / word w / lane l at (b*words + w)*8 + l;
    rabitq -> uint8 plane bytes, block b / byte i / lane l at (b*bytes + i)*32 + l;
    rabitq in the nibble layout (4 bits) -> the same with 4-byte words as the unit
    (uint32 units in build / row_major, stored as their bytes).
    factors: rabitq only, (5, slots) float32 (a, su, add, g, h of each slot).
    """

    __slots__ = ("list_block", "list_size", "slot_row", "codes", "factors")

    def __init__(self, list_block, list_size, slot_row, codes, factors=None):
        self.list_block, self.list_size, self.slot_row, self.codes = list_block, list_size, slot_row, codes
        self.factors = factors

    def arrays(self):
        out = {n: getattr(self, n) for n in ("list_block", "list_size", "slot_row", "codes")}
        if self.factors is not None:
            out["factors"] = self.factors
        return out

    @classmethod
    def build(cls, assign: np.ndarray, codes: np.ndarray, nlist: int, block: int, factors=None) -> "_Layout":
        """assign: list of each row (int), codes: (n, w) per-row code units in
        row order (uint64 words or uint8 bytes), factors: (n, 5) or None."""
        n, w = codes.shape
        sizes = np.bincount(assign, minlength=nlist).astype(np.int64)
        blocks = (sizes + block - 1) // block
        list_block = np.zeros(nlist + 1, dtype=np.int64)
        np.cumsum(blocks, out=list_block[1:])
        order = np.argsort(assign, kind="stable")
        first = np.cumsum(sizes) - sizes
        rank = np.arange(n, dtype=np.int64) - np.repeat(first, sizes)
        slots = np.repeat(list_block[:-1] * block, sizes) + rank
        nslots = int(list_block[-1]) * block
        slot_row = np.full(nslots, -1, dtype=np.int64)
        slot_row[slots] = order
        flat = np.zeros((nslots, w), dtype=codes.dtype)
        flat[slots] = codes[order]
        blocked = np.ascontiguousarray(flat.reshape(-1, block, w).transpose(0, 2, 1)).reshape(-1)
        del flat
        fac = None
        if factors is not None:
            fac = np.zeros((5, nslots), dtype=np.float32)
            fac[:, slots] = factors[order].T
        return cls(list_block, sizes, slot_row, blocked, fac)

    def row_major(self, n: int, block: int, unit=None):
        """(assign int64 (n,), codes (n, w), factors (n, 5) or None) back from the layout, for adds;
        unit: the dtype the codes were blocked in, when not their own."""
        nslots = self.slot_row.size
        blocked = np.asarray(self.codes) if unit is None else np.asarray(self.codes).view(unit)
        w = blocked.size // max(1, nslots)
        flat = blocked.reshape(-1, w, block).transpose(0, 2, 1).reshape(nslots, w)
        valid = np.flatnonzero(np.asarray(self.slot_row) >= 0)
        rows = np.asarray(self.slot_row)[valid]
        codes = np.empty((n, w), dtype=flat.dtype)
        codes[rows] = flat[valid]
        lists = np.repeat(np.arange(self.list_size.size), np.diff(np.asarray(self.list_block)) * block)
        assign = np.empty(n, dtype=np.int64)
        assign[rows] = lists[valid]
        fac = None
        if self.factors is not None:
            fac = np.empty((n, 5), dtype=np.float32)
            fac[rows] = np.asarray(self.factors)[:, valid].T
        return assign, codes, fac


class IVFIndex:
    """Partitioned index over quantised codes with exact float32 rescoring.

    ``metric``: "cosine" (default; score is the cosine similarity), "ip", or
    "l2" (score is the *negative squared* L2 distance). Scores are
    similarities: higher is better. Row ids are 0..n-1 in the order added.

    ``scorer``: "rabitq" (default; ``bits`` 1, 2, 4 or 8, ``query_bits``,
    ``code_dim`` and ``centre`` as described in the module docstring) or
    "sign" (the sign-bit codes of format-1 files). ``rescore`` / ``confidence``
    pick the rescoring policy of rabitq codes. ``rotation``: "fht" (default;
    random signs and Walsh-Hadamard rounds, O(D log D) a row to encode and a
    query to rotate) or "dense" (the Haar matrix of format-2 files).

    Build: ``train(sample_or_all_rows)`` then ``add(rows)``; or
    ``IVFIndex.build(rows, nlist)``. The float32 rows passed to the first
    ``add`` are kept by reference when they are already float32 C-contiguous
    (a memmap stays a memmap); later adds concatenate into memory.
    """

    def __init__(self, dim: int, nlist: int | None = None, metric: str = "cosine", *, nprobe: int = 32,
                 oversample: int | None = None, refine: int = 8, scorer: str = "rabitq", bits: int = 2,
                 query_bits: int | None = None, code_dim: int | None = None, centre: str = "global",
                 rescore: str = "bound", confidence: float = 1.5, rotation: str = "fht", seed: int = 0):
        self._dim = _positive_int(dim, "dim")
        self._nlist = None if nlist is None else _positive_int(nlist, "nlist")
        self._metric = check_metric(metric)
        if scorer not in SCORERS:
            raise ValueError(f"scorer must be one of {SCORERS}, got {scorer!r}")
        self._scorer = scorer
        self.nprobe = _positive_int(nprobe, "nprobe")
        self.oversample = _positive_int(DEFAULT_OVERSAMPLE[scorer] if oversample is None else oversample,
                                        "oversample")
        self.refine = _positive_int(refine, "refine")
        if bits not in SUPPORTED_BITS or isinstance(bits, bool):
            raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits!r}")
        self._bits = int(bits)
        # 4-bit codes scanned as nibbles (a byte multiply-add); open() sets it from the file's format
        self._nibbles = scorer == "rabitq" and self._bits == 4
        self.query_bits = _check_qbits(default_query_bits(self._bits) if query_bits is None else query_bits)
        cd = compact_code_dim(self._dim, self._bits) if code_dim is None else _positive_int(code_dim, "code_dim")
        if cd % 64 or cd < self._dim or cd > 4096:
            raise ValueError(f"code_dim must be a multiple of 64 in [dim, 4096], got {cd}")
        self._code_dim = cd
        if centre not in CENTRES:
            raise ValueError(f"centre must be one of {CENTRES}, got {centre!r}")
        self._centre = centre
        if rotation not in ROTATIONS:
            raise ValueError(f"rotation must be one of {ROTATIONS}, got {rotation!r}")
        self._rotation = rotation
        self.rescore = _check_rescore(rescore)
        self.confidence = _check_confidence(confidence)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self._seed = int(seed)
        self._centroids = None
        self._rank = None  # (centroids, basis, projections) of two-stage list ranking
        self._groups = None  # two-level k-means cells (train only; not stored: adds after open assign flat)
        self._assign_top = ASSIGN_TOP
        self.build_times = {}  # seconds of the last add: read, assign, encode, layout
        self._model = None  # rabitq: {"rotation", "centres", "centres_rot"}
        self._layout = None
        self._vectors = None
        self._inv_norm = None
        self._core = None
        self._path = None

    # ------------------------------------------------------------ properties
    dim = property(lambda self: self._dim)
    metric = property(lambda self: self._metric)
    scorer = property(lambda self: self._scorer, doc='"rabitq" or "sign".')
    bits = property(lambda self: self._bits if self._scorer == "rabitq" else 1)
    code_dim = property(lambda self: self._code_dim if self._scorer == "rabitq" else self._dim)
    centre = property(lambda self: self._centre)
    rotation = property(lambda self: self._rotation, doc='"fht" (structured) or "dense" (Haar matrix).')

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

    def __repr__(self) -> str:
        return (f"IVFIndex(dim={self._dim}, nlist={self.nlist}, metric={self._metric!r}, scorer={self._scorer!r}, "
                f"bits={self.bits}, n={len(self)}, nprobe={self.nprobe}, oversample={self.oversample})")

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
        if self._model is not None:
            for name, arr in self._model.items():
                if arr is not self._centroids:
                    out[name] = int(arr.nbytes)
        if self._layout is not None:
            for name, arr in self._layout.arrays().items():
                out[name] = int(arr.nbytes)
        if self._vectors is not None:
            out["vectors"] = int(self._vectors.nbytes)
        if self._inv_norm is not None:
            out["inv_norm"] = int(self._inv_norm.nbytes)
        return out

    def _need_trained(self):
        if self._centroids is None:
            raise RuntimeError("the index is not trained: call train() or IVFIndex.build() first")

    # ------------------------------------------------------------ build
    def train(self, vectors, nlist: int | None = None, iters: int = 10, sample_per_list: int = 64,
              method: str = "auto", coarse: int | None = None, assign_top: int = ASSIGN_TOP) -> "IVFIndex":
        """k-means on a seeded sample of ``vectors`` (nlist * sample_per_list rows).

        ``method``: "flat" (Lloyd over all nlist centroids), "two_level"
        (``coarse`` cells, about sqrt(nlist), then the lists inside each cell;
        ``add`` then assigns a row among the lists of its ``assign_top``
        nearest cells), or "auto" (two_level from TWO_LEVEL_MIN_NLIST lists).
        """
        rows = self._rows_arg(vectors, "vectors")
        nlist = nlist if nlist is not None else self._nlist
        nlist = default_nlist(rows.shape[0]) if nlist is None else _positive_int(nlist, "nlist")
        if nlist > rows.shape[0]:
            raise ValueError(f"nlist ({nlist}) must not exceed the number of training rows ({rows.shape[0]})")
        iters = _positive_int(iters, "iters")
        sample_per_list = _positive_int(sample_per_list, "sample_per_list")
        if method not in ("auto", "flat", "two_level"):
            raise ValueError(f"method must be 'auto', 'flat' or 'two_level', got {method!r}")
        if coarse is not None:
            coarse = _positive_int(coarse, "coarse")
        assign_top = _positive_int(assign_top, "assign_top")
        if method == "auto":
            method = "two_level" if nlist >= TWO_LEVEL_MIN_NLIST else "flat"
        groups = None
        if method == "flat":
            c, _ = kmeans.train(rows, nlist, self._metric, iters=iters, sample_per_list=sample_per_list,
                                seed=self._seed)
        else:
            c, groups = kmeans.train_two_level(rows, nlist, self._metric, iters=iters,
                                               sample_per_list=sample_per_list, seed=self._seed, coarse=coarse,
                                               assign_top=assign_top)
        c = np.ascontiguousarray(c, dtype=np.float32)
        model = self._make_model(c, rows) if self._scorer == "rabitq" else None
        self._groups, self._assign_top = groups, assign_top
        if self._layout is not None and len(self):
            # Retrain of a filled index: reassign and re-encode every row.
            self._centroids, self._model = c, model
            vectors, self._vectors, self._layout = self._vectors, None, None
            self._inv_norm = None
            self.add(vectors)
        else:
            self._centroids, self._model = c, model
        return self

    def _make_model(self, centroids, rows):
        D = self._code_dim
        rotation = _core.ivf_quant_rotation(D, self._seed, self._rotation)
        if self._centre == "list":
            centres = centroids
        else:  # mean of a seeded sample (unit rows for cosine)
            n = rows.shape[0]
            idx = np.sort(np.random.default_rng(self._seed).choice(n, size=min(n, 65536), replace=False))
            x = np.asarray(rows[idx], dtype=np.float32)
            if self._metric == "cosine":
                x = x * _inv_norms(x)[:, None]
            centres = np.ascontiguousarray(x.mean(axis=0, keepdims=True, dtype=np.float64), dtype=np.float32)
        pad = np.zeros((centres.shape[0], D), dtype=np.float32)
        pad[:, :self._dim] = centres
        return {"rotation": rotation, "centres": centres, "centres_rot": _core.ivf_quant_rotate(rotation, pad)}

    @classmethod
    def build(cls, vectors, nlist: int | None = None, metric: str = "cosine", **kwargs) -> "IVFIndex":
        """train + add in one call."""
        train_kw = {k: kwargs.pop(k) for k in ("iters", "sample_per_list", "method", "coarse", "assign_top")
                    if k in kwargs}
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

    def _encode(self, rows, assign, step=1 << 16):
        """(codes (n, bytes) uint8, factors (n, 5)) of rows, in blocks (rows may be a memmap)."""
        m = self._model
        n = rows.shape[0]
        cb = self._bits * self._code_dim // 8
        codes = np.empty((n, cb), dtype=np.uint8)
        fac = np.empty((n, 5), dtype=np.float32)
        centre_of = assign if self._centre == "list" else np.zeros(n, dtype=np.int64)
        for s in range(0, n, step):
            x = np.ascontiguousarray(rows[s:s + step], dtype=np.float32)
            codes[s:s + x.shape[0]], fac[s:s + x.shape[0]] = _core.ivf_quant_encode(
                m["rotation"], m["centres"], x, np.ascontiguousarray(centre_of[s:s + x.shape[0]]),
                self._metric, self._bits)
        return codes, fac

    def _assign_encode(self, rows, step=1 << 17):
        """Lists, codes, factors and inverse norms of rows in one pass over
        row blocks (a memmap is read once, a block at a time); the seconds
        spent in each step go to ``self.build_times``."""
        n = rows.shape[0]
        assign = np.empty(n, dtype=np.int64)
        if self._scorer == "rabitq":
            codes = np.empty((n, self._bits * self._code_dim // 8), dtype=np.uint8)
            fac = np.empty((n, 5), dtype=np.float32)
        else:
            codes, fac = None, None
        inv = np.empty(n, dtype=np.float32) if self._metric == "cosine" else None
        t = {"read_s": 0.0, "assign_s": 0.0, "encode_s": 0.0}
        parts = []
        for s in range(0, n, step):
            t0 = time.perf_counter()
            x = np.ascontiguousarray(rows[s:s + step], dtype=np.float32)
            e = s + x.shape[0]
            t1 = time.perf_counter()
            if self._groups is not None:
                assign[s:e] = kmeans.assign_two_level(x, self._centroids, self._groups, self._metric,
                                                      top=self._assign_top, step=step)
            else:
                assign[s:e] = kmeans.assign(x, self._centroids, self._metric)
            t2 = time.perf_counter()
            if self._scorer == "rabitq":
                codes[s:e], fac[s:e] = self._encode(x, assign[s:e], step=step)
            else:
                parts.append(_codes(x))
            if inv is not None:
                inv[s:e] = _inv_norms(x, step=step)
            t3 = time.perf_counter()
            t["read_s"] += t1 - t0
            t["assign_s"] += t2 - t1
            t["encode_s"] += t3 - t2
        if self._scorer != "rabitq":
            codes = np.concatenate(parts) if parts else _codes(rows[:0])
        self.build_times = {k: round(v, 3) for k, v in t.items()}
        return assign, codes, fac, inv

    def add(self, vectors) -> None:
        """Appends rows (ids continue from len(self)); each goes to its nearest list."""
        self._need_trained()
        rows = self._rows_arg(vectors, "vectors")
        if rows.shape[0] == 0:
            return
        block = _BLOCK[self._scorer]
        assign_new, codes_new, fac_new, inv_new = self._assign_encode(rows)
        if self._layout is None or len(self) == 0:
            assign, codes, fac, vecs, inv = assign_new, codes_new, fac_new, rows, inv_new
        else:
            assign_old, codes_old, fac_old = self._layout.row_major(len(self), block,
                                                                    np.uint32 if self._nibbles else None)
            if self._nibbles:  # nibble words -> the planes encode() gives
                codes_old = _core.quant_nibble_rows(codes_old.view(np.uint8), to_nibbles=False)
            assign = np.concatenate([assign_old, assign_new])
            codes = np.concatenate([codes_old, codes_new])
            fac = None if fac_new is None else np.concatenate([fac_old, fac_new])
            vecs = np.concatenate([np.asarray(self._vectors), rows])
            inv = None if inv_new is None else np.concatenate([np.asarray(self._inv_norm), inv_new])
        t0 = time.perf_counter()
        if self._nibbles:  # blocked by 4-byte words (8 dimensions of a row), stored as bytes
            layout = _Layout.build(assign, _core.quant_nibble_rows(codes).view(np.uint32), self.nlist, block, fac)
            layout.codes = layout.codes.view(np.uint8)
        else:
            layout = _Layout.build(assign, codes, self.nlist, block, fac)
        self._install(layout, vecs, inv, path=None)
        self.build_times["layout_s"] = round(time.perf_counter() - t0, 3)

    def _list_ranking(self):
        """(basis, projections) of two-stage list ranking for the current centroids, or
        (None, None) (list_ranking.py); computed once per set of centroids."""
        cached = self._rank
        if cached is None or cached[0] is not self._centroids:
            cached = self._rank = (self._centroids, *rank_basis(self._centroids, self._metric))
        return cached[1], cached[2]

    def _install(self, layout, vectors, inv_norm, path):
        if self._scorer == "rabitq":
            m = self._model
            basis, proj = self._list_ranking()
            core = _core.IVFQuant(self._centroids, m["centres"], m["centres_rot"], m["rotation"], layout.list_block,
                                  layout.list_size, layout.slot_row, layout.codes, layout.factors, vectors,
                                  inv_norm, self._metric, self._bits, basis, proj, self._nibbles)
        else:
            core = _core.IVF(self._centroids, layout.list_block, layout.list_size, layout.slot_row, layout.codes,
                             vectors, inv_norm, self._metric, self._scorer)
        self._layout, self._vectors, self._inv_norm, self._core, self._path = layout, vectors, inv_norm, core, path

    # ------------------------------------------------------------ search
    def search(self, queries, k: int = 10, nprobe: int | None = None, oversample: int | None = None,
               allow=None, threads: int = 0, refine: int | None = None, min_candidates: int = 0,
               exact_small: bool = True, return_stats: bool = False, rescore: str | None = None,
               confidence: float | None = None, query_bits: int | None = None):
        """Returns (ids int64 (n, k), scores float32 (n, k)), best first.

        nprobe lists are probed (more when a filter leaves too few allowed
        rows in them, see the module docstring; ``min_candidates`` sets that
        floor). rabitq: the best k * oversample estimates go through the
        ``rescore`` policy (default the index's). sign: the best
        k * oversample * refine by Hamming distance are re-ranked by the
        asymmetric estimate to k * oversample and rescored. ``allow``: roaring
        bitmap, bool mask of len(self), or row ids. Missing results (fewer
        than k allowed rows) are id -1, score -inf. ``return_stats`` adds a
        dict of lists / rows probed, exact-path queries (and rows rescored).
        """
        k = check_k(k)
        threads = check_threads(threads)
        nprobe = self.nprobe if nprobe is None else _positive_int(nprobe, "nprobe")
        oversample = self.oversample if oversample is None else _positive_int(oversample, "oversample")
        refine = self.refine if refine is None else _positive_int(refine, "refine")
        rescore = self.rescore if rescore is None else _check_rescore(rescore)
        confidence = self.confidence if confidence is None else _check_confidence(confidence)
        qbits = self.query_bits if query_bits is None else _check_qbits(query_bits)
        if isinstance(min_candidates, bool) or not isinstance(min_candidates, (int, np.integer)) \
                or min_candidates < 0:
            raise ValueError(f"min_candidates must be a non-negative integer, got {min_candidates!r}")
        q = as_vectors(queries, "queries", dim=self._dim)
        check_cells(len(q), k)
        check_cells(1, k * oversample * refine, "k x oversample x refine")  # candidates are per query
        if self._core is None:
            if self._centroids is None:
                raise RuntimeError("the index is not trained: call train() or IVFIndex.build() first")
            ids = np.full((q.shape[0], k), -1, dtype=np.int64)
            scores = np.full((q.shape[0], k), -np.inf, dtype=np.float32)
            st = {"lists": 0, "rows": 0, "exact": 0, "rescored": 0}
            return (ids, scores, st) if return_stats else (ids, scores)
        if self._metric == "cosine":
            q = np.ascontiguousarray(unit_queries(q), dtype=np.float32)  # in the core: what every search path uses
        mask, aids = allow_arrays(allow, len(self))
        if self._scorer == "rabitq":
            ids, scores, stats = self._core.search(q, k, nprobe, oversample, int(min_candidates), bool(exact_small),
                                                   qbits, rescore, float(confidence), mask, aids, threads)
        else:
            ids, scores, stats = self._core.search(q, k, nprobe, oversample, refine, int(min_candidates),
                                                   bool(exact_small), mask, aids, threads)
        return (ids, scores, stats) if return_stats else (ids, scores)

    # ------------------------------------------------------------ persistence
    def _meta(self, include_vectors):
        meta = {"kind": "ivf", "dim": self._dim, "metric": self._metric, "scorer": self._scorer,
                "nlist": self.nlist, "n": len(self), "nprobe": self.nprobe, "oversample": self.oversample,
                "refine": self.refine, "seed": self._seed, "has_vectors": bool(include_vectors)}
        if self._scorer == "rabitq":
            meta.update({"bits": self._bits, "query_bits": self.query_bits, "code_dim": self._code_dim,
                         "centre": self._centre, "rescore": self.rescore, "confidence": self.confidence,
                         "rotation": self._rotation})
        return meta

    def save(self, path, include_vectors: bool = True) -> None:
        """Writes the index to one file (temp + fsync + rename).

        rabitq indexes are written as format version 4 (4-bit codes in the
        nibble layout, either rotation), 3 (fht rotation) or 2 (dense rotation,
        readable by earlier releases), sign-bit ones as version 1.
        include_vectors=False leaves
        the float32 rows out (a collection keeps them in its own row file):
        open() must then be given ``vectors=``.
        """
        self._need_trained()
        sections = {"centroids": self._centroids}
        if self._scorer == "rabitq":
            sections["rotation"] = self._model["rotation"]
            sections["centres_rot"] = self._model["centres_rot"]
            if self._centre == "global":
                sections["centres"] = self._model["centres"]
        if self._layout is not None:
            sections.update(self._layout.arrays())
            if self._inv_norm is not None:
                sections["inv_norm"] = self._inv_norm
            if include_vectors:
                sections["vectors"] = self._vectors
        if self._scorer != "rabitq":
            version = 1
        elif self._nibbles:
            version = partitioned_io.NIBBLE_VERSION
        else:
            version = partitioned_io.VERSION if self._rotation == "fht" else partitioned_io.DENSE_VERSION
        partitioned_io.write(path, self._meta(include_vectors), sections, version=version)

    @classmethod
    def open(cls, path, vectors=None, verify: str = "index") -> "IVFIndex":
        """Maps a saved index read-only (shared page cache, nothing copied).

        Reads formats 4 (4-bit rabitq codes as nibbles), 3 and 2 (rabitq codes,
        fht or dense rotation) and 1
        (sign-bit codes, earlier releases). ``vectors``: the float32 rows (n, dim) when the file was
        saved without them (an array or memmap, kept by reference). A damaged
        file raises vecsift.CorruptIndexError.
        """
        meta, arr = partitioned_io.read(path, verify=verify)
        version = meta.pop("_version", 1)
        if meta.get("kind") != "ivf":
            raise CorruptIndexError(f"{path}: not an IVF index")
        scorer = meta.get("scorer")
        if (version == 1) != (scorer == "sign"):
            raise CorruptIndexError(f"{path}: format version {version} does not hold {scorer!r} codes")
        try:
            kw = {}
            if scorer == "rabitq":
                # format 2 has no rotation field: always the dense matrix; 4 names either
                rotation = meta["rotation"] if version >= 3 else "dense"
                if version < 4 and (version == 3) != (rotation == "fht"):
                    raise ValueError(f"format version {version} does not hold a {rotation!r} rotation")
                if version == partitioned_io.NIBBLE_VERSION and meta["bits"] != 4:
                    raise ValueError(f"format version {version} holds 4-bit codes, not {meta['bits']}-bit")
                kw = dict(bits=meta["bits"], query_bits=meta["query_bits"], code_dim=meta["code_dim"],
                          centre=meta["centre"], rescore=meta["rescore"], confidence=meta["confidence"],
                          rotation=rotation)
            index = cls(meta["dim"], meta["nlist"], meta["metric"], nprobe=meta["nprobe"],
                        oversample=meta["oversample"], refine=meta.get("refine", 1), scorer=scorer,
                        seed=meta["seed"], **kw)
            if scorer == "rabitq":  # 4-bit codes before format 4 stay in the plane layout
                index._nibbles = version == partitioned_io.NIBBLE_VERSION
            n, nlist = int(meta["n"]), int(meta["nlist"])
            if not isinstance(meta["has_vectors"], bool) or n < 0:
                raise ValueError("has_vectors must be true or false and n a count")
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise CorruptIndexError(f"{path}: header fields are invalid ({exc})") from None
        c = arr.get("centroids")
        if c is None or c.dtype != np.float32 or c.shape != (nlist, index.dim):
            raise CorruptIndexError(f"{path}: centroids section is malformed")
        index._centroids = c
        if scorer == "rabitq":
            D = index._code_dim
            rot, crot = arr.get("rotation"), arr.get("centres_rot")
            centres = c if index._centre == "list" else arr.get("centres")
            m = nlist if index._centre == "list" else 1
            rshape = (D, D) if index._rotation == "dense" else (4, D)  # kFhtRounds sign rows
            if rot is None or rot.dtype != np.float32 or rot.shape != rshape:
                raise CorruptIndexError(f"{path}: rotation section is malformed")
            if centres is None or centres.dtype != np.float32 or centres.shape != (m, index.dim):
                raise CorruptIndexError(f"{path}: centres section is malformed")
            if crot is None or crot.dtype != np.float32 or crot.shape != (m, D):
                raise CorruptIndexError(f"{path}: centres_rot section is malformed")
            index._model = {"rotation": rot, "centres": centres, "centres_rot": crot}
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
        need = ("list_block", "list_size", "slot_row", "codes") + (("factors",) if scorer == "rabitq" else ())
        missing = [name for name in need if name not in arr]
        if missing:
            raise CorruptIndexError(f"{path}: missing sections {missing}")
        layout = _Layout(arr["list_block"], arr["list_size"], arr["slot_row"], arr["codes"], arr.get("factors"))
        try:
            index._install(layout, vecs, arr.get("inv_norm"), path=os.fspath(path))
        except (ValueError, TypeError, RuntimeError) as exc:  # the core's consistency checks
            raise CorruptIndexError(f"{path}: {exc}") from None
        if int(np.asarray(layout.list_size).sum()) != n:
            raise CorruptIndexError(f"{path}: list sizes do not add up to {n} rows")
        return index


def _check_qbits(qb) -> int:
    if isinstance(qb, bool) or not isinstance(qb, (int, np.integer)) or not 4 <= qb <= 8:
        raise ValueError(f"query_bits must be an integer in [4, 8], got {qb!r}")
    return int(qb)


def _check_rescore(r) -> str:
    if r not in RESCORE:
        raise ValueError(f"rescore must be one of {RESCORE}, got {r!r}")
    return r


def _check_confidence(z) -> float:
    if isinstance(z, bool) or not isinstance(z, (int, float, np.floating, np.integer)) or not np.isfinite(z) \
            or z < 0:
        raise ValueError(f"confidence must be a finite number >= 0, got {z!r}")
    return float(z)


# ------------------------------------------------------------ tools (vecsift info / vecsift tune)
def describe(path) -> dict:
    """Parameters, sizes and list balance of a saved IVF index file (no rows needed)."""
    meta, arr = partitioned_io.read(path, verify="none")
    version = meta.pop("_version", 1)
    sizes = np.asarray(arr["list_size"]) if "list_size" in arr else np.zeros(int(meta.get("nlist", 0)), np.int64)
    n = int(meta.get("n", 0))
    nbytes = os.path.getsize(path)
    out = {"kind": "ivf", "format": version}
    for key in ("scorer", "bits", "query_bits", "code_dim", "centre", "rotation", "metric", "dim", "n", "nlist",
                "nprobe",
                "oversample", "rescore", "confidence", "refine", "has_vectors"):
        if key in meta:
            out[key] = meta[key]
    if out.get("scorer") == "rabitq" and version == partitioned_io.DENSE_VERSION:
        out["rotation"] = "dense"  # format 2 files have no rotation field
    if out.get("scorer") == "rabitq":
        out["code_layout"] = "nibbles" if version == partitioned_io.NIBBLE_VERSION else "planes"
    out["file_bytes"] = nbytes
    out["file_bytes_per_vector"] = round(nbytes / n, 1) if n else None
    out["balance"] = kmeans.balance(sizes)
    return out


def tuning_queries(index: "IVFIndex", k: int = 10, sample: int = 500, queries=None, seed: int = 0):
    """(queries, exact top-k ids) for tuning nprobe: ``queries`` or ``sample``
    rows of the index drawn with ``seed``; the truth is an exact scan of the
    index's rows in blocks (memmap friendly). vecsift.tools.cli (`vecsift
    tune FILE.ivf`) searches the nprobe that reaches a recall target on them."""
    from vecsift.index.flat import exact_search

    if len(index) == 0:
        raise ValueError("the index holds no rows to tune on")
    if queries is None:
        rng = np.random.default_rng(seed)
        pick = np.sort(rng.choice(len(index), size=min(sample, len(index)), replace=False))
        queries = np.asarray(index._vectors[pick], dtype=np.float32)
    q = as_vectors(queries, "queries", dim=index.dim)
    truth = np.full((q.shape[0], k), -1, dtype=np.int64)
    best = np.full((q.shape[0], k), -np.inf, dtype=np.float32)
    step = 1 << 18
    for s in range(0, len(index), step):
        blk = np.ascontiguousarray(index._vectors[s:s + step])
        i, sc = exact_search(blk, q, k, index.metric)
        i = np.where(i >= 0, i + s, -1)
        ci, cs = np.concatenate([truth, i], 1), np.concatenate([best, sc], 1)
        o = np.argsort(-cs, axis=1, kind="stable")[:, :k]
        truth, best = np.take_along_axis(ci, o, 1), np.take_along_axis(cs, o, 1)
    return q, truth
