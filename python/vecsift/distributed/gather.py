"""Scatter a call to one copy of each shard, gather under a deadline, fail closed.

Each shard has copies (the primary and its replicas) tried in a rotating order,
so reads spread over them. An answer counts only if the copy says it is at the
cluster generation the search runs at. A copy that fails, is dead or answers
from another generation is replaced by the next copy; one that has not
answered after `hedge` seconds gets a second copy racing it. When the deadline
passes, a shard with no answer is missing: the search raises
ShardUnavailableError unless allow_partial=True, in which case the result says
which shards are missing.

The wire format is lean because a search's fixed cost is Ray's per-call cost
(bench/bench_ray.py): the driver pickles a request once, (method, args), and
every copy gets the same bytes as the single argument of `call` (Ray's cost
grows with the number of arguments, each serialised on its own); a copy answers
with pickled bytes too, and hits travel as columns (one list per Hit field)
rather than as Hit objects, which pickle several times slower. The driver turns
only the hits it returns back into Hit objects.
"""
from __future__ import annotations

import dataclasses
import pickle
import time

from vecsift.collection import Hit
from vecsift.errors import VecsiftError

HIT_FIELDS = tuple(f.name for f in dataclasses.fields(Hit))
ID, SCORE = HIT_FIELDS.index("id"), HIT_FIELDS.index("score")


def pack_hits(hits) -> tuple:
    """A list of Hits as columns: one list per Hit field (in HIT_FIELDS order)."""
    return tuple([getattr(h, f) for h in hits] for f in HIT_FIELDS)


def packed_len(cols) -> int:
    return len(cols[ID])


def hit_of(cols, j, **changes) -> Hit:
    """Hit number j of packed columns, with some fields replaced."""
    h = Hit(*[c[j] for c in cols])
    for name, value in changes.items():
        setattr(h, name, value)
    return h


def merged_order(packed: list, k: int) -> list:
    """(list number, position) of the k best hits of several packed lists: by score, ties by id."""
    keys = [(-cols[SCORE][j], cols[ID][j], i, j) for i, cols in enumerate(packed) for j in range(packed_len(cols))]
    keys.sort()
    return [(i, j) for _, _, i, j in keys[:k]]


def request(method: str, *args) -> bytes:
    """The one argument of a copy's `call`: made once per phase, sent to every shard."""
    return pickle.dumps((method, args), protocol=5)


class ShardUnavailableError(VecsiftError):
    """A search could not reach every shard it needed before its deadline (and allow_partial was False)."""

    def __init__(self, missing: dict):
        self.missing = dict(missing)
        why = "; ".join(f"shard {s}: {r}" for s, r in sorted(self.missing.items()))
        super().__init__(f"{len(self.missing)} shard(s) did not answer ({why}); "
                         f"search(allow_partial=True) returns what the others found")


class SearchResult(list):
    """Hits, best first (a list), plus what the gather knew: partial, missing_shards, generation."""

    __slots__ = ("partial", "missing_shards", "generation")

    def __init__(self, hits=(), missing=(), generation=None):
        super().__init__(hits)
        self.missing_shards = tuple(sorted(missing))
        self.partial = bool(self.missing_shards)
        self.generation = generation


def _user_error(exc):
    """The Collection's own exception inside a RayTaskError (bad input is the caller's, not a shard fault)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, (ValueError, TypeError, KeyError, VecsiftError)) and not isinstance(cause, RuntimeError):
        return cause
    return None


def gather(copies: dict, req: bytes, gen: int, timeout: float, hedge: float | None = None):
    """Sends req (from request()) to one copy of every shard. copies: shard -> [actor handles,
    preferred first]. Returns ({shard: payload}, {shard: reason})."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

    unavailable = (RayActorError, GetTimeoutError, getattr(ray.exceptions, "ActorUnavailableError", RayActorError))
    start = time.monotonic()
    deadline = start + timeout
    hedge_at = start + (hedge if hedge is not None else max(0.05, timeout / 4))
    nxt = {s: 0 for s in copies}
    inflight = {}  # ref -> shard
    results, reasons = {}, {}

    def submit(s) -> bool:
        if nxt[s] >= len(copies[s]):
            return False
        handle = copies[s][nxt[s]]
        nxt[s] += 1
        inflight[handle.call.remote(req)] = s
        return True

    for s in copies:
        if not submit(s):
            reasons[s] = "no copy at this generation"
    if inflight and not reasons:
        # the common case in one call: every first copy answers before the hedge time
        refs = list(inflight)
        try:
            got = [pickle.loads(b) for b in ray.get(refs, timeout=max(0.0, hedge_at - time.monotonic()))]
        except Exception:  # noqa: BLE001 - a failure or a slow copy: sorted out one by one below
            got = None
        if got is not None and all(g == gen and p is not None for g, p in got):
            return {inflight[r]: p for r, (_, p) in zip(refs, got)}, {}
    while inflight:
        now = time.monotonic()
        if now >= deadline:
            break
        until = deadline if hedge_at is None else min(deadline, hedge_at)
        ready, _ = ray.wait(list(inflight), num_returns=len(inflight), timeout=max(0.0, until - now))
        for ref in ready:
            s = inflight.pop(ref)
            if s in results:
                continue
            try:
                got_gen, payload = pickle.loads(ray.get(ref))
            except RayTaskError as exc:
                err = _user_error(exc)
                if err is not None:
                    raise err from None
                reasons[s] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                submit(s)
                continue
            except unavailable as exc:
                reasons[s] = f"{type(exc).__name__}"
                submit(s)
                continue
            if got_gen != gen or payload is None:
                reasons[s] = f"copy at generation {got_gen}, search at {gen}"
                submit(s)
                continue
            results[s] = payload
            reasons.pop(s, None)
        if hedge_at is not None and time.monotonic() >= hedge_at:
            hedge_at = None
            waiting = set(inflight.values())
            for s in waiting - set(results):
                submit(s)  # a slow or restarting copy races the next one
        pending = set(copies) - set(results)
        if not pending:
            break
        if not (pending & set(inflight.values())):
            break  # every copy of what is left failed
    for s in set(copies) - set(results):
        reasons.setdefault(s, f"no answer within {timeout:g} s")
    return results, {s: r for s, r in reasons.items() if s not in results}
