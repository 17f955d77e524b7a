"""Finding the smallest search parameter (HNSW ef, binary oversample) that
reaches a recall target against exact search.

Recall grows with the parameter (more candidates, never fewer), so the search
doubles the parameter until the target holds and then bisects the last gap.
"The target holds" is judged conservatively: the one-sided 95% lower
confidence bound of mean recall over the tuning queries must reach the
target, so the chosen value also holds on held-out queries from the same
distribution, not only on the sample it was tuned on.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vecsift.eval import recall_at_k


def lower_bound(recalls: np.ndarray, z: float = 1.645) -> float:
    """One-sided lower confidence bound of the mean."""
    if len(recalls) < 2:
        return float(recalls.mean())
    return float(recalls.mean() - z * recalls.std(ddof=1) / np.sqrt(len(recalls)))


@dataclass
class TuneResult:
    param: int | None  # None: the target was not reached within the limit
    target: float
    curve: list = field(default_factory=list)  # (param, mean recall, lower bound), in the order measured

    def recall_at(self, param):
        for p, r, _ in self.curve:
            if p == param:
                return r
        return None


def tune(search, truth: np.ndarray, k: int, target: float, low: int, high: int) -> TuneResult:
    """Smallest integer param in [low, high] whose recall@k lower bound >= target.

    `search(param)` returns found ids (n_queries, >= k) for the tuning queries.
    """
    if not 0 < target <= 1:
        raise ValueError(f"target recall must be in (0, 1], got {target}")
    if low < 1 or high < low:
        raise ValueError(f"bad parameter range [{low}, {high}]")
    result = TuneResult(None, target)
    seen = {}

    def ok(param):
        if param not in seen:
            r = recall_at_k(search(param), truth, k, per_query=True)
            seen[param] = (float(r.mean()), lower_bound(r))
            result.curve.append((param, *seen[param]))
        return seen[param][1] >= target - 1e-9  # float noise of the mean

    # Double until the target holds...
    prev, p = None, low
    while not ok(p):
        if p == high:
            return result
        prev, p = p, min(high, p * 2)
    if prev is None:
        result.param = p
        return result
    # ...then bisect (prev fails, p holds).
    lo, hi = prev, p
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    result.param = hi
    return result
