"""The `allow` argument every index accepts, turned into what the core takes.

Accepted forms:
  * a pyroaring BitMap / FrozenBitMap of allowed row ids,
  * a numpy bool mask with one entry per row,
  * an integer array (or sequence) of allowed row ids.
The core builds one dense bitset per call from a mask or an id list; rows not
in it are never scored.
"""
from __future__ import annotations

import numpy as np

try:  # pyroaring is a runtime dependency; keep import errors readable
    from pyroaring import AbstractBitMap
except ImportError:  # pragma: no cover
    AbstractBitMap = ()


def bitmap_rows(bm) -> np.ndarray:
    """The ids of a roaring bitmap as a sorted int64 array (one buffer copy, no Python loop)."""
    return np.frombuffer(bm.to_array(), dtype=np.uint32).astype(np.int64)


def allow_arrays(allow, n: int):
    """Returns (mask uint8 or None, ids int64 or None) for the core, n rows."""
    if allow is None:
        return None, None
    if AbstractBitMap and isinstance(allow, AbstractBitMap):
        ids = bitmap_rows(allow)
        if ids.size and ids[-1] >= n:
            raise ValueError(f"allow contains row id {int(ids[-1])}, but there are only {n} rows")
        return None, ids
    arr = np.asarray(allow)
    if arr.dtype == np.bool_:
        if arr.ndim != 1 or arr.shape[0] != n:
            raise ValueError(f"allow mask has length {arr.size}, expected {n} (one entry per row)")
        return np.ascontiguousarray(arr).view(np.uint8), None
    if arr.size == 0:
        return None, np.empty(0, dtype=np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"allow must be a roaring bitmap, a bool mask or integer row ids, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"allow ids must be 1-d, got shape {arr.shape}")
    ids = np.ascontiguousarray(arr, dtype=np.int64)
    bad = (ids < 0) | (ids >= n)
    if bad.any():
        raise ValueError(f"allow contains row id {int(ids[bad][0])} outside [0, {n})")
    return None, ids
