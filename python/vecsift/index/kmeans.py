"""k-means for partitioned indexes: BLAS-backed numpy, trained on a sample.

Training for 10^7 rows takes minutes because it never sees them all: Lloyd
iterations run on a seeded sample (``sample_per_list`` rows a list), and the
full set is only assigned once, in blocks (``assign``), by the caller.

Balance: an empty or tiny list is re-seeded each iteration by splitting the
largest list (its centroid, nudged two ways), so no centroid is wasted and
the largest lists lose rows to the split. For "cosine" and "ip" centroids are
unit-normalised (spherical k-means), which is what a query ranks them by.
"""
from __future__ import annotations

import numpy as np

_BLOCK_BYTES = 64 << 20  # score matrix of one assignment block


def _normalise(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    n[n == 0] = 1.0
    return x / n


def _block_rows(nlist: int) -> int:
    return max(256, _BLOCK_BYTES // (4 * max(1, nlist)))


def assign(rows, centroids: np.ndarray, metric: str, out: np.ndarray | None = None) -> np.ndarray:
    """Index of the most similar centroid for each row (int32), in blocks so a
    (block, nlist) score matrix never exceeds 64 MiB; rows may be a memmap."""
    n = rows.shape[0]
    out = np.empty(n, dtype=np.int32) if out is None else out
    c = np.ascontiguousarray(centroids, dtype=np.float32)
    half_sq = 0.5 * np.einsum("ij,ij->i", c, c) if metric == "l2" else None
    step = _block_rows(c.shape[0])
    for s in range(0, n, step):
        x = np.asarray(rows[s:s + step], dtype=np.float32)
        sc = x @ c.T
        if half_sq is not None:  # argmin |x-c|^2 = argmax x.c - |c|^2/2
            sc -= half_sq
        out[s:s + x.shape[0]] = np.argmax(sc, axis=1)
    return out


def train(rows, nlist: int, metric: str = "cosine", iters: int = 10, sample_per_list: int = 64,
          seed: int = 0, min_fraction: float = 0.1):
    """Returns (centroids float32 (nlist, dim), sample list sizes of the last iteration).

    ``rows`` may be a memmap: only the sample (nlist * sample_per_list rows,
    read in sorted order) is loaded. Lists holding fewer than ``min_fraction``
    of the mean are re-seeded from the largest list.
    """
    n, dim = rows.shape
    if nlist > n:
        raise ValueError(f"nlist ({nlist}) must not exceed the number of training rows ({n})")
    rng = np.random.default_rng(seed)
    m = min(n, max(nlist * sample_per_list, nlist))
    idx = np.sort(rng.choice(n, size=m, replace=False)) if m < n else np.arange(n)
    x = np.asarray(rows[idx], dtype=np.float32)
    spherical = metric in ("cosine", "ip")
    if metric == "cosine":
        x = _normalise(x)
    c = x[rng.choice(m, size=nlist, replace=False)].copy()
    lab = np.empty(m, dtype=np.int32)
    sizes = np.zeros(nlist, dtype=np.int64)
    for _ in range(iters):
        assign(x, c, "l2" if not spherical else "ip", out=lab)
        sizes = np.bincount(lab, minlength=nlist)
        sums = np.zeros((nlist, dim), dtype=np.float64)
        _sum_sorted(x, lab, nlist, sums)
        nz = sizes > 0
        c[nz] = (sums[nz] / sizes[nz, None]).astype(np.float32)
        _reseed(c, sizes, min_fraction * m / nlist, rng)
        if spherical:
            c = _normalise(c).astype(np.float32)
    return np.ascontiguousarray(c, dtype=np.float32), sizes


def _sum_sorted(x, lab, nlist, sums):
    """Per-list sums by sorting once and reducing contiguous runs (np.add.at is slow)."""
    order = np.argsort(lab, kind="stable")
    xs = x[order]
    starts = np.searchsorted(lab[order], np.arange(nlist))
    nonempty = np.bincount(lab, minlength=nlist) > 0
    red = np.add.reduceat(xs, starts[nonempty], axis=0, dtype=np.float64) if nonempty.any() else None
    if red is not None:
        sums[nonempty] = red


def _reseed(c, sizes, floor, rng):
    """Splits the largest lists to replace lists below ``floor`` rows."""
    small = np.flatnonzero(sizes < max(1.0, floor))
    if small.size == 0:
        return
    sizes = sizes.astype(np.float64).copy()
    scale = float(np.linalg.norm(c, axis=1).mean()) or 1.0
    for j in small:
        big = int(np.argmax(sizes))
        eps = rng.standard_normal(c.shape[1]).astype(np.float32) * (1e-3 * scale / np.sqrt(c.shape[1]))
        c[j] = c[big] + eps
        c[big] = c[big] - eps
        sizes[j] = sizes[big] = sizes[big] / 2


def balance(sizes) -> dict:
    """Summary of list sizes: imbalance = n * sum(s^2) / (sum s)^2 (1.0 is perfect)."""
    s = np.asarray(sizes, dtype=np.float64)
    tot = s.sum()
    return {
        "lists": int(s.size),
        "empty": int((s == 0).sum()),
        "min": int(s.min()) if s.size else 0,
        "max": int(s.max()) if s.size else 0,
        "mean": float(s.mean()) if s.size else 0.0,
        "imbalance": float(s.size * (s * s).sum() / (tot * tot)) if tot else 0.0,
    }
