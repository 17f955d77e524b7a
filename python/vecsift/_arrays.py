"""Argument conversion shared by the public API: dtypes, shapes, finiteness.

float32 C-contiguous input passes through untouched (no copy); anything else
numeric is converted once. Non-numeric input is a TypeError, NaN/inf and bad
shapes are ValueErrors naming the argument.
"""
from __future__ import annotations

import numpy as np

from vecsift import _core


def _as_numeric_array(x, name: str) -> np.ndarray:
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise TypeError(f"{name} must be array-like numbers: {exc}") from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise TypeError(f"{name} must be real-valued, got dtype {arr.dtype}")
    return arr


def as_vectors(x, name: str = "vectors", dim: int | None = None, check_finite: bool = True) -> np.ndarray:
    """A (n, dim) float32 C-contiguous matrix; a 1-d input is one row."""
    if type(x) is np.ndarray and x.dtype == np.float32 and x.flags.c_contiguous and 1 <= x.ndim <= 2 \
            and x.shape[-1] != 0 and (dim is None or x.shape[-1] == dim):
        # Fast path (one query per call): already what the core takes, no copy, no dtype inspection.
        arr = x if x.ndim == 2 else x.reshape(1, -1)
        if check_finite and arr.size and not _core.all_finite(arr):
            raise ValueError(f"{name} contain NaN or infinite values")
        return arr
    arr = _as_numeric_array(x, name)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 1-d or 2-d, got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{name} have dimension {arr.shape[1]}, expected {dim}")
    if arr.shape[1] == 0:
        raise ValueError(f"{name} must have at least one column")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if check_finite and arr.size and not _core.all_finite(arr):
        raise ValueError(f"{name} contain NaN or infinite values")
    return arr


def as_codes(x, width: int, name: str = "codes") -> np.ndarray:
    """A (n, width) uint8 C-contiguous matrix of binary codes."""
    arr = np.asarray(x)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 1-d or 2-d, got shape {arr.shape}")
    if arr.shape[1] != width:
        raise ValueError(f"{name} have width {arr.shape[1]} bytes, expected {width}")
    return np.ascontiguousarray(arr, dtype=np.uint8)


def is_code_array(x) -> bool:
    return isinstance(x, np.ndarray) and x.dtype == np.uint8


def check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer, got {type(k).__name__}")
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    return int(k)


def check_threads(threads) -> int:
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)):
        raise TypeError(f"threads must be an integer, got {type(threads).__name__}")
    if threads < 0:
        raise ValueError(f"threads must be >= 0 (0 means all cores), got {threads}")
    return int(threads)


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero): cosine becomes the inner product."""
    # The same sum linalg.norm computes (bit for bit), without its dispatch: a few us per query.
    # Stored rows are normalised this way (a collection's vectors equal x / np.linalg.norm(x)).
    norms = np.sqrt(np.add.reduce(x * x, axis=1))
    if not norms.all():
        norms[norms == 0] = 1
    return x / norms[:, None]


def unit_queries(q: np.ndarray) -> np.ndarray:
    """unit_rows for queries, in the core: one call instead of five ufunc calls (~75 us a query with
    cold caches right after a scan). The norm's sum is taken in double precision, so a value can
    differ from unit_rows' in the last bit; every search path normalises queries with this one."""
    if type(q) is np.ndarray and q.dtype == np.float32 and q.ndim == 2 and q.flags.c_contiguous:
        return _core.unit_rows(q)
    return unit_rows(q)


# Result cells (queries x k, or x candidates inside an index) one call may allocate: 12 bytes each
# (int64 id + float32 score), so ~1.6 GB. Past it a k or batch is surely a mistake, and the native
# allocation would fail with MemoryError or take the machine's memory.
MAX_RESULT_CELLS = 1 << 27


def check_cells(n_queries: int, per_query: int, what: str = "queries x k") -> None:
    if max(n_queries, 1) * per_query > MAX_RESULT_CELLS:  # scratch of one query is sized by k too
        from vecsift.errors import LimitError

        raise LimitError(what, f"{n_queries} x {per_query}", MAX_RESULT_CELLS, "the cells one search may allocate")
