"""RaBitQ-style quantised codes: a brute-force scan that estimates similarities.

Each vector is centred on the data mean, rotated by a seeded random orthogonal
transform (random-sign Hadamard rounds by default, or a dense Haar matrix) into ``code_dim`` dimensions and stored as ``bits`` bit planes plus five
float factors; a query is rotated once and quantised to ``query_bits``. The
scan returns an unbiased estimate of the similarity (higher is better) and, on
request, a per-pair error bound. The algebra is in
cpp/include/vecsift/kernels/quant_codes.hpp; measured numbers in docs/quantised.md.
"""
from __future__ import annotations

import os
import struct

import numpy as np

from vecsift import _core
from vecsift._arrays import as_vectors, check_cells, check_k, check_threads
from vecsift.allow import allow_arrays
from vecsift.errors import CorruptIndexError

SUPPORTED_BITS = (1, 2, 4, 8)
SCREEN_BITS = (2, 4)  # codes the 1-bit screen reads the top plane of
_METRICS = ("cosine", "ip", "l2")

_MAGIC = b"VSIFTQNT"
_KIND = b"rabitq\0\0"
# 2 adds the rotation kind after query_bits (version 1: dense); 3 adds a flag after it and, when
# set, the 2- or 4-bit rows' top-plane factors (n x 4 float32) after the factors. Older files still
# load; their searches read every block in full (no screen).
FORMAT_VERSION = 3
_READ_VERSIONS = (1, 2, 3)
ROTATIONS = ("dense", "fht")  # index in the file = kind
_HEAD = struct.Struct("<8s8sI")  # magic, kind, version
_META = struct.Struct("<IIIIQQI")  # dim, code_dim, bits, metric, seed, n, trained
_CRC = struct.Struct("<I")


def default_code_dim(dim: int, bits: int) -> int:
    """The rotated dimension of a QuantizedIndex when none is given.

    At 1 and 2 bits a third more rotated dimensions (rounded up to 64): the
    estimate's error shrinks as 1/sqrt(code_dim), and the margins over issue
    11's recall bars were too thin with an eighth more (384 -> 448). Measured
    on the PyPI MiniLM rows (1,000 held-out queries, rotation seeds 0/1/2): 1
    bit at oversample 4, 30k rows 0.974-0.977 (448) -> 0.982-0.984 (512),
    100k rows 0.969-0.972 -> 0.976-0.978; 2 bits at oversample 2, 30k
    0.986-0.987 -> 0.988-0.990, 100k 0.982-0.984 -> 0.987-0.988, for 8/7 of
    the code bytes. At 4 and 8 bits the codes stay at the smallest multiple of 64.
    """
    return _padded_code_dim(dim, dim // 3 if bits <= 2 else 0)


def compact_code_dim(dim: int, bits: int) -> int:
    """An eighth more rotated dimensions at 1-2 bits: the default of IVFIndex (whose list scans are
    memory-bound; docs/partitioned.md) and of a collection's bq codes (the width of its code rows
    file is derived from it, so collections created before must keep it)."""
    return _padded_code_dim(dim, dim // 8 if bits <= 2 else 0)


def _padded_code_dim(dim: int, extra: int) -> int:
    return -(-(dim + extra) // 64) * 64


def default_query_bits(bits: int) -> int:
    """4-bit queries for 1-2 bit codes; 8 for 4-8 bit codes (4 would cap 4-bit recall at ~0.93)."""
    return 4 if bits <= 2 else 8


DEFAULT_SCREEN = _core.QUANT_SCREEN_Z  # z of the 1-bit screen (3); docs/quantised.md has the measurements


def _int_arg(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {x!r}")
    return int(x)


def _check_query_bits(qb) -> int:
    qb = _int_arg(qb, "query_bits")
    if not 4 <= qb <= 8:
        raise ValueError(f"query_bits must be in [4, 8], got {qb}")
    return qb


class QuantizedIndex:
    """Top-k over RaBitQ-style codes with 1, 2, 4 or 8 bits per rotated dimension.

    ``metric`` is "cosine" (rows and queries normalised), "ip" or "l2"; scores
    are similarities (for l2, the negated squared distance). The centroid is
    the mean of the first batch added unless ``train`` was called first.
    ``search`` can rescore the best ``k * oversample`` estimates exactly from
    float32 rows you pass (``rescore=``, e.g. a memmap), so only those rows
    are read. Safe to search from many threads; ``add`` waits for searches.
    """

    def __init__(self, dim: int, bits: int = 1, metric: str = "cosine", query_bits: int | None = None,
                 seed: int = 0, code_dim: int | None = None, rotation: str = "fht", _make_rotation: bool = True):
        dim = _int_arg(dim, "dim")
        if not 1 <= dim <= 4096:
            raise ValueError(f"dim must be in [1, 4096], got {dim}")
        bits = _int_arg(bits, "bits")
        if bits not in SUPPORTED_BITS:
            raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")
        if metric not in _METRICS:
            raise ValueError(f"metric must be one of {_METRICS}, got {metric!r}")
        self.query_bits = default_query_bits(bits) if query_bits is None else _check_query_bits(query_bits)
        seed = _int_arg(seed, "seed")
        if not 0 <= seed < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {seed}")
        cd = default_code_dim(dim, bits) if code_dim is None else _int_arg(code_dim, "code_dim")
        if cd % 64 or not dim <= cd <= 4096:
            raise ValueError(f"code_dim must be a multiple of 64 in [dim, 4096], got {cd}")
        if rotation not in ROTATIONS:
            raise ValueError(f"rotation must be one of {ROTATIONS}, got {rotation!r}")
        self._index = _core.QuantizedIndex(dim, bits, metric, seed, cd, _make_rotation, rotation)

    # ---------------------------------------------------------------- properties
    dim = property(lambda self: self._index.dim)
    bits = property(lambda self: self._index.bits)
    metric = property(lambda self: self._index.metric)
    seed = property(lambda self: self._index.seed)
    code_dim = property(lambda self: self._index.dim_pad, doc="Dimension of the rotated space (a multiple of 64).")
    code_bytes = property(lambda self: self._index.code_bytes, doc="Bytes of one row's code (factors not counted).")
    trained = property(lambda self: self._index.trained)
    rotation = property(lambda self: self._index.rotation_kind,
                        doc='"fht" (random-sign Hadamard rounds, O(d log d) a vector) or "dense" (Haar matrix).')

    @property
    def nbytes(self) -> int:
        """Bytes held by codes and factors."""
        return self._index.nbytes

    def __len__(self) -> int:
        return len(self._index)

    def __repr__(self) -> str:
        return (f"QuantizedIndex(dim={self.dim}, bits={self.bits}, metric={self.metric!r}, "
                f"query_bits={self.query_bits}, code_dim={self.code_dim}, rotation={self.rotation!r}, n={len(self)})")

    # ---------------------------------------------------------------- writes
    def train(self, vectors) -> None:
        """Sets the centroid to the mean of ``vectors`` (only before the first add)."""
        if len(self):
            raise ValueError("train must come before the first add: stored codes depend on the centroid")
        x = as_vectors(vectors, "vectors", dim=self.dim)
        if not len(x):
            raise ValueError("vectors must have at least one row")
        self._index.train(x)

    def add(self, vectors, threads: int = 0) -> None:
        """Appends rows; their ids continue from len(self)."""
        x = as_vectors(vectors, "vectors", dim=self.dim)
        self._index.add(x, check_threads(threads))

    def encode(self, vectors, threads: int = 0, top: bool = False):
        """(planes uint8 (n, code_bytes), factors float32 (n, 5)) of rows, not stored; needs a centroid.

        top=True (2- and 4-bit codes) adds a third array, the (n, 4) top-plane factors of the screen."""
        if not self.trained:
            raise ValueError("encode needs a centroid: call train (or add) first")
        if top and self.bits not in SCREEN_BITS:
            raise ValueError(f"top=True needs 2- or 4-bit codes, this index has bits={self.bits}")
        x = as_vectors(vectors, "vectors", dim=self.dim)
        return self._index.encode(x, check_threads(threads), top=bool(top))

    @property
    def screens(self) -> bool:
        """Whether searches can use the 1-bit screen (2- or 4-bit codes, every row with top-plane factors)."""
        return self._index.has_top

    def add_codes(self, planes, factors, top=None) -> None:
        """Appends rows given as encode() returned them (e.g. read back from a file).

        ``top``: 2- and 4-bit codes' top-plane factors (n, 4) from ``encode(..., top=True)``; rows
        added without them turn the screen off for this index (searches read every block)."""
        planes = np.ascontiguousarray(planes, dtype=np.uint8)
        factors = np.ascontiguousarray(factors, dtype=np.float32)
        if planes.ndim != 2 or factors.ndim != 2:
            raise ValueError("planes and factors must be 2-d")
        if top is not None:
            top = np.ascontiguousarray(top, dtype=np.float32)
        self._index.add_codes(planes, factors, top)

    # ---------------------------------------------------------------- reads
    def search(self, queries, k: int, allow=None, oversample: int = 1, rescore=None, bounds: bool = False,
               query_bits: int | None = None, confidence: float = 3.0, threads: int = 0,
               screen: float = DEFAULT_SCREEN):
        """Returns (ids int64 (n, k), scores float32 (n, k)), best first.

        Scores are estimated similarities, or exact ones when ``rescore`` (the
        float32 rows, shape (len(self), dim), e.g. a memmap) is given: then the
        best ``k * oversample`` estimates are rescored exactly. With
        ``bounds=True`` two more arrays follow: lower and upper bounds of each
        score, ``confidence`` standard deviations wide (3.0 holds for >= 99.5%
        of pairs, see docs/quantised.md); exact scores have lower == upper.
        ``allow`` (roaring bitmap, bool mask, or row ids) restricts the scan;
        rows outside it are never scored. Missing results: id -1, score -inf.

        ``screen`` (2- and 4-bit codes of >= 96 bytes a row, e.g. 384-d; calls
        of one or two queries): blocks of 32 rows are first scored by their top
        bit plane alone, and only those whose upper bound (``screen`` standard
        deviations) beats the current k-th best estimate are read in full; a
        row is lost only when its 1-bit estimate falls that far below. 0 reads
        every block (the same candidates as before the screen existed).
        """
        k = check_k(k)
        oversample = _int_arg(oversample, "oversample")
        if oversample < 1:
            raise ValueError(f"oversample must be >= 1, got {oversample}")
        if oversample > 1 and rescore is None:
            raise ValueError("oversample > 1 needs rescore= (the float32 rows to rescore from)")
        qb = self.query_bits if query_bits is None else _check_query_bits(query_bits)
        if not (isinstance(confidence, (int, float, np.floating)) and np.isfinite(confidence) and confidence >= 0):
            raise ValueError(f"confidence must be a finite number >= 0, got {confidence!r}")
        threads = check_threads(threads)
        if not (isinstance(screen, (int, float, np.floating)) and not isinstance(screen, bool)
                and np.isfinite(screen) and screen >= 0):
            raise ValueError(f"screen must be a finite number >= 0, got {screen!r}")
        screen = float(screen)
        q = as_vectors(queries, "queries", dim=self.dim)
        # never more candidates than rows: a huge k x oversample over a small index would otherwise
        # allocate (and rescore) columns of padding
        m = min(k * oversample, max(len(self), 1)) if rescore is not None else k
        check_cells(len(q), max(m, k), "queries x k x oversample")
        mask, ids = allow_arrays(allow, len(self))
        if rescore is not None:
            cand, _ = self._index.search(q, m, qb, mask, ids, threads, screen=screen)
            return self._rescore(q, cand, k, rescore, bounds)
        if not bounds:
            return self._index.search(q, k, qb, mask, ids, threads, screen=screen)
        return self._index.search(q, k, qb, mask, ids, threads, -1, float(confidence), screen=screen)

    def estimate(self, queries, ids, query_bits: int | None = None, confidence: float = 3.0):
        """(estimate, lower, upper) float32 (n, m) for given row ids (n, m) of each query (-1: -inf)."""
        q = as_vectors(queries, "queries", dim=self.dim)
        ids = np.ascontiguousarray(np.asarray(ids, dtype=np.int64).reshape(len(q), -1))
        qb = self.query_bits if query_bits is None else _check_query_bits(query_bits)
        if ids.size and (ids.max() >= len(self) or ids.min() < -1):
            raise ValueError(f"ids must be row ids in [0, {len(self)}) or -1")
        return self._index.estimate(q, ids, qb, float(confidence))

    def exact_scores(self, queries, ids, vectors) -> np.ndarray:
        """Exact similarities (this index's metric) of rows ``ids`` (n, m) of ``vectors``; -inf for id -1."""
        q = as_vectors(queries, "queries", dim=self.dim)
        ids = np.asarray(ids, dtype=np.int64).reshape(len(q), -1)
        out = np.full(ids.shape, -np.inf, dtype=np.float32)
        ok = ids >= 0
        rows = np.asarray(vectors[np.where(ok, ids, 0).ravel()], dtype=np.float32).reshape(*ids.shape, self.dim)
        if self.metric == "l2":
            s = -((rows - q[:, None, :]) ** 2).sum(axis=2)
        else:
            s = np.einsum("qmd,qd->qm", rows, q)
            if self.metric == "cosine":
                nr = np.linalg.norm(rows, axis=2) * np.linalg.norm(q, axis=1)[:, None]
                s = np.divide(s, nr, out=np.zeros_like(s), where=nr > 0)
        out[ok] = s[ok]
        return out

    def _rescore(self, q, cand, k, vectors, bounds):
        if len(vectors) != len(self) or (getattr(vectors, "ndim", 2) != 2) or vectors.shape[1] != self.dim:
            raise ValueError(f"rescore must be the ({len(self)}, {self.dim}) float32 rows of this index")
        if isinstance(vectors, np.ndarray) and vectors.dtype == np.float32 and vectors.flags.c_contiguous:
            # in the core: gather, exact scores and top-k in one call (index/rescore.hpp)
            ids, scores = _core.rescore(vectors, q, np.ascontiguousarray(cand, dtype=np.int64), k, self.metric)
            return (ids, scores, scores.copy(), scores.copy()) if bounds else (ids, scores)
        ids = np.full((len(q), k), -1, dtype=np.int64)  # columns past the candidates stay missing
        scores = np.full((len(q), k), -np.inf, dtype=np.float32)
        w = min(k, cand.shape[1])
        # queries per chunk: the gathered rows of a chunk stay near 16 MB however wide the candidates
        step = max(1, min(256, (1 << 22) // max(1, cand.shape[1] * self.dim)))
        for s in range(0, len(q), step):
            c = cand[s:s + step]
            exact = self.exact_scores(q[s:s + step], c, vectors)
            order = np.lexsort((c, -exact), axis=1)[:, :k] if c.shape[1] else np.zeros((len(c), 0), np.int64)
            ids[s:s + step, :w] = np.take_along_axis(c, order, axis=1)
            scores[s:s + step, :w] = np.take_along_axis(exact, order, axis=1)
        ids[~np.isfinite(scores)] = -1
        return (ids, scores, scores.copy(), scores.copy()) if bounds else (ids, scores)

    # ---------------------------------------------------------------- files
    def save(self, path, rows: bool = True) -> None:
        """Writes the index to one file (versioned header, CRC-32C of everything), atomically.

        rows=False writes only the model (rotation, centroid, parameters), for
        callers that keep the codes elsewhere (a collection's append-only file).
        """
        ix = self._index
        n = len(ix) if rows else 0
        meta = _META.pack(ix.dim, ix.dim_pad, ix.bits, _METRICS.index(ix.metric), ix.seed, n, int(ix.trained))
        top = ix.top_factors() if rows else None
        parts = [_HEAD.pack(_MAGIC, _KIND, FORMAT_VERSION), meta,
                 struct.pack("<III", self.query_bits, ROTATIONS.index(ix.rotation_kind), int(top is not None)),
                 ix.rotation().tobytes(), ix.centroid().tobytes()]
        if rows:
            parts += [ix.blocks().tobytes(), ix.factors().tobytes()]
            if top is not None:
                parts.append(top.tobytes())
        crc = 0
        for p in parts:
            crc = _core.crc32c(p, crc)
        tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            for p in parts:
                f.write(p)
            f.write(_CRC.pack(crc & 0xFFFFFFFF))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path) -> "QuantizedIndex":
        """Reads a file written by save; a truncated, corrupt or foreign file raises vecsift.CorruptIndexError."""
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < _HEAD.size + _META.size + 4 + _CRC.size:
            raise CorruptIndexError(f"{path}: too short for a vecsift quantised index ({len(data)} bytes)")
        magic, kind, version = _HEAD.unpack_from(data, 0)
        if magic != _MAGIC or kind != _KIND:
            raise CorruptIndexError(f"{path}: not a vecsift quantised index")
        if version not in _READ_VERSIONS:
            raise CorruptIndexError(f"{path}: format version {version}, this vecsift reads {_READ_VERSIONS}")
        fixed = _HEAD.size + _META.size + {1: 4, 2: 8}.get(version, 12)
        if len(data) < fixed + _CRC.size:
            raise CorruptIndexError(f"{path}: too short for a vecsift quantised index ({len(data)} bytes)")
        (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
        if _core.crc32c(memoryview(data)[:len(data) - _CRC.size], 0) != crc:
            raise CorruptIndexError(f"{path}: checksum mismatch (file is corrupt or truncated)")
        dim, cd, bits, metric, seed, n, trained = _META.unpack_from(data, _HEAD.size)
        (qb,) = struct.unpack_from("<I", data, _HEAD.size + _META.size)
        rkind = struct.unpack_from("<I", data, _HEAD.size + _META.size + 4)[0] if version >= 2 else 0  # v1: dense
        has_top = struct.unpack_from("<I", data, _HEAD.size + _META.size + 8)[0] if version >= 3 else 0
        if (bits not in SUPPORTED_BITS or metric >= len(_METRICS) or not 1 <= dim <= cd <= 4096 or cd % 64
                or not 4 <= qb <= 8 or rkind >= len(ROTATIONS) or has_top > 1 or (has_top and bits not in SCREEN_BITS)):
            raise CorruptIndexError(f"{path}: header fields out of range")
        nblocks = -(-n // 32)
        rot_rows = cd if ROTATIONS[rkind] == "dense" else _core.QUANT_FHT_ROUNDS
        sizes = [4 * rot_rows * cd, 4 * cd, nblocks * 32 * bits * cd // 8, 4 * 5 * n, 4 * 4 * n * has_top]
        if fixed + sum(sizes) + _CRC.size != len(data):
            raise CorruptIndexError(f"{path}: size does not match its header")
        out = cls(dim, bits, _METRICS[metric], query_bits=qb, seed=seed, code_dim=cd, rotation=ROTATIONS[rkind],
                  _make_rotation=False)
        off = fixed
        arrays = []
        for size, dt in zip(sizes, (np.float32, np.float32, np.uint8, np.float32, np.float32)):
            arrays.append(np.frombuffer(data, dtype=dt, count=size // np.dtype(dt).itemsize, offset=off))
            off += size
        rot, cen, blocks, fac, top = arrays
        out._index.set_state(rot.reshape(rot_rows, cd), cen, bool(trained), n, blocks, fac.reshape(n, 5),
                             top.reshape(n, 4) if has_top else None)
        return out
