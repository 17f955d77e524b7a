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


def _sample(rows, m, rng, metric):
    n = rows.shape[0]
    idx = np.sort(rng.choice(n, size=m, replace=False)) if m < n else np.arange(n)
    x = np.asarray(rows[idx], dtype=np.float32)
    return _normalise(x).astype(np.float32) if metric == "cosine" else x


def _lloyd(x, nlist, spherical, iters, rng, min_fraction):
    """Lloyd iterations on in-memory rows x; returns (centroids, sizes)."""
    m, dim = x.shape
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
    x = _sample(rows, m, rng, metric)
    return _lloyd(x, nlist, metric in ("cosine", "ip"), iters, rng, min_fraction)


def default_coarse(nlist: int) -> int:
    """Coarse cells of the two-level k-means: about sqrt(nlist) (8192 lists: 90)."""
    return max(1, int(round(np.sqrt(nlist))))


def _split_counts(weights: np.ndarray, total: int, caps: np.ndarray) -> np.ndarray:
    """Integer counts proportional to weights summing to total, each in [1, cap]
    (largest remainder)."""
    w = np.maximum(weights.astype(np.float64), 1e-12)
    k = np.clip(np.floor(w / w.sum() * total).astype(np.int64), 1, caps)
    while k.sum() != total:
        share = w / w.sum() * total - k
        if k.sum() < total:
            share[k >= caps] = -np.inf
            k[int(np.argmax(share))] += 1
        else:
            share[k <= 1] = np.inf
            k[int(np.argmin(share))] -= 1
    return k


def train_two_level(rows, nlist: int, metric: str = "cosine", iters: int = 10, sample_per_list: int = 64,
                    seed: int = 0, min_fraction: float = 0.1, coarse: int | None = None, refine_iters: int = 2,
                    assign_top: int = 3):
    """Hierarchical (two-level) k-means: ``coarse`` cells by k-means on the
    sample, then each cell's sample rows split by k-means into a share of the
    nlist lists proportional to the cell's rows (balanced: a cell with 2% of
    the rows gets 2% of the lists). Cost: sample x (coarse + nlist / coarse)
    x dim a Lloyd iteration instead of sample x nlist x dim.

    Then ``refine_iters`` Lloyd iterations over the whole sample with the
    two-level assignment (``assign_top`` cells a row) let lists near a cell
    border take rows from the neighbouring cells, which the per-cell runs
    never saw (a list keeps its cell; a list left empty keeps its centroid).

    Returns (centroids (nlist, dim), groups) where groups is (coarse
    centroids (C, dim), first (C + 1,) int64): the lists of coarse cell j
    are centroids[first[j]:first[j + 1]]; ``assign_two_level`` takes it.
    """
    n, dim = rows.shape
    if nlist > n:
        raise ValueError(f"nlist ({nlist}) must not exceed the number of training rows ({n})")
    rng = np.random.default_rng(seed)
    ncoarse = min(default_coarse(nlist) if coarse is None else int(coarse), nlist)
    m = min(n, max(nlist * sample_per_list, nlist))
    x = _sample(rows, m, rng, metric)
    spherical = metric in ("cosine", "ip")
    cc, _ = _lloyd(x, ncoarse, spherical, iters, rng, min_fraction)
    lab = assign(x, cc, "ip" if spherical else "l2")
    order = np.argsort(lab, kind="stable")
    cnt = np.bincount(lab, minlength=ncoarse)
    start = np.concatenate([[0], np.cumsum(cnt)])
    k = _split_counts(cnt, nlist, np.maximum(cnt, 1))
    first = np.concatenate([[0], np.cumsum(k)]).astype(np.int64)
    cents = np.empty((nlist, dim), dtype=np.float32)
    for j in range(ncoarse):
        xj = x[order[start[j]:start[j + 1]]]
        if xj.shape[0] == 0:  # empty coarse cell (k[j] == 1): its centroid stands in
            cents[first[j]:first[j + 1]] = cc[j]
            continue
        if k[j] == 1:
            c = xj.mean(axis=0, keepdims=True, dtype=np.float64).astype(np.float32)
            cents[first[j]] = _normalise(c)[0] if spherical else c[0]
            continue
        cents[first[j]:first[j + 1]], _ = _lloyd(xj, int(k[j]), spherical, iters, rng, min_fraction)
    groups = (np.ascontiguousarray(cc), first)
    lab = np.empty(m, dtype=np.int32)
    for _ in range(refine_iters):
        assign_two_level(x, cents, groups, metric if metric == "l2" else "ip", top=assign_top, out=lab)
        sizes = np.bincount(lab, minlength=nlist)
        sums = np.zeros((nlist, dim), dtype=np.float64)
        _sum_sorted(x, lab, nlist, sums)
        nz = sizes > 0
        cents[nz] = (sums[nz] / sizes[nz, None]).astype(np.float32)
        if spherical:
            cents = _normalise(cents).astype(np.float32)
    return np.ascontiguousarray(cents), groups


def assign_two_level(rows, centroids: np.ndarray, groups, metric: str, top: int = 3,
                     out: np.ndarray | None = None, step: int = 1 << 17) -> np.ndarray:
    """Nearest list of each row among the lists of its ``top`` nearest coarse
    cells (groups from ``train_two_level``), in row blocks (rows may be a
    memmap; a block is copied once). Equals ``assign`` whenever a row's
    nearest list lies in one of its top coarse cells."""
    cc, first = groups
    n = rows.shape[0]
    ncoarse = cc.shape[0]
    top = max(1, min(int(top), ncoarse))
    out = np.empty(n, dtype=np.int32) if out is None else out
    c = np.ascontiguousarray(centroids, dtype=np.float32)
    l2 = metric == "l2"
    half = 0.5 * np.einsum("ij,ij->i", c, c) if l2 else None
    chalf = 0.5 * np.einsum("ij,ij->i", cc, cc) if l2 else None
    for s in range(0, n, step):
        x = np.asarray(rows[s:s + step], dtype=np.float32)
        b = x.shape[0]
        sc = x @ cc.T
        if l2:
            sc -= chalf
        if top < ncoarse:
            tc = np.argpartition(-sc, top - 1, axis=1)[:, :top]
        else:
            tc = np.broadcast_to(np.arange(ncoarse), (b, ncoarse))
        best = np.full(b, -np.inf, dtype=np.float32)
        arg = np.zeros(b, dtype=np.int32)
        cell = tc.reshape(-1)
        rid = np.repeat(np.arange(b), top)
        o = np.argsort(cell, kind="stable")
        cell, rid = cell[o], rid[o]
        bounds = np.searchsorted(cell, np.arange(ncoarse + 1))
        for j in range(ncoarse):
            r = rid[bounds[j]:bounds[j + 1]]
            if r.size == 0:
                continue
            f0, f1 = int(first[j]), int(first[j + 1])
            sj = x[r] @ c[f0:f1].T
            if l2:
                sj -= half[f0:f1]
            a = np.argmax(sj, axis=1)
            v = sj[np.arange(r.size), a]
            better = v > best[r]
            best[r[better]] = v[better]
            arg[r[better]] = a[better] + f0
        out[s:s + b] = arg
    return out


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
