"""Scatter a call to one copy of each shard, gather under a deadline, fail closed.

Shard copies live in node actors (node.py), one per node and copy level, and a
search phase makes one call per node actor it needs, naming the shards it wants
there; the node answers with one merged list for them. Each shard has copies
(the primary and its replicas) tried in a rotating order,
so reads spread over them. An answer counts only if the copy says it is at the
cluster generation the search runs at. A copy that fails, is dead or answers
from another generation is replaced by the next copy; one that has not
answered after `hedge` seconds gets a second copy racing it. When the deadline
passes, a shard with no answer is missing: the search raises
ShardUnavailableError unless allow_partial=True, in which case the result says
which shards are missing.

The wire format is lean because a search's fixed cost is Ray's per-call cost
(bench/bench_ray.py): the driver pickles a request once, (method, args), and
every node actor gets the same bytes (with the shards it is asked for) as the single argument of `call` (Ray's cost
grows with the number of arguments, each serialised on its own); a copy answers
with pickled bytes too, and hits travel as columns (one list per Hit field)
rather than as Hit objects, which pickle several times slower. The driver turns
only the hits it returns back into Hit objects.
"""
from __future__ import annotations

import dataclasses
import operator
import pickle
import time
from itertools import islice

import numpy as np

from vecsift.collection import Hit
from vecsift.distributed.sockets import NodeError
from vecsift.errors import VecsiftError

HIT_FIELDS = tuple(f.name for f in dataclasses.fields(Hit))
ID, SCORE = HIT_FIELDS.index("id"), HIT_FIELDS.index("score")


_FIELDS_OF = operator.attrgetter(*HIT_FIELDS)


def pack_hits(hits) -> tuple:
    """A list of Hits as columns: one list per Hit field (in HIT_FIELDS order)."""
    if not hits:
        return tuple([] for _ in HIT_FIELDS)
    return tuple(map(list, zip(*map(_FIELDS_OF, hits))))  # each Hit read once, then transposed


def packed_len(cols) -> int:
    return len(cols[ID])


def hit_of(cols, j, **changes) -> Hit:
    """Hit number j of packed columns, with some fields replaced."""
    h = Hit(*[c[j] for c in cols])
    for name, value in changes.items():
        setattr(h, name, value)
    return h


def ranked_hits(packed: list, k: int, rank_field: str) -> list:
    """The k best hits of several packed lists as Hits (by score, ties by id), rank_field renumbered 1..
    (the global rank). Each Hit made in one positional call: no keyword or setattr per field."""
    at = HIT_FIELDS.index(rank_field)
    if len(packed) == 1:
        cols = packed[0]
        sc = cols[SCORE]
        if all(map(operator.gt, sc, islice(sc, 1, k))):
            # one list, scores strictly falling over the k kept: already in merged_order's order, and
            # Hits made column-wise (map stops at the shortest column: the ranks 1..k)
            return list(map(Hit, *[range(1, k + 1) if f == at else c for f, c in enumerate(cols)]))
    rows = [None] * len(packed)  # a list's hits as rows, transposed (in C) when first needed
    out = []
    for r, (i, j) in enumerate(merged_order(packed, k), 1):
        t = rows[i]
        if t is None:
            t = rows[i] = list(zip(*packed[i]))
        row = list(t[j])
        row[at] = r
        out.append(Hit(*row))
    return out


def merged_order(packed: list, k: int) -> list:
    """(list number, position) of the k best hits of several packed lists: by score, ties by id."""
    keys = [(-cols[SCORE][j], cols[ID][j], i, j) for i, cols in enumerate(packed) for j in range(packed_len(cols))]
    keys.sort()
    return [(i, j) for _, _, i, j in keys[:k]]


def merge_packed(packed: list, k: int) -> tuple:
    """Several packed lists merged into one packed list of their k best hits (by score, ties by id):
    what a node actor sends for its shards; merging merged lists gives the same top k."""
    if len(packed) == 1 and packed_len(packed[0]) <= k:
        return packed[0]
    order = merged_order(packed, k)
    return tuple([packed[i][f][j] for i, j in order] for f in range(len(packed[0])))


_VECTORS_AT = {"search": 1, "search_hybrid": 1}  # where a search phase's query vectors are in its args


def request(method: str, *args) -> bytes:
    """The one argument of a copy's `call`: made once per phase, sent to every shard. The query
    vectors (float32, C order) travel as raw bytes and a shape: pickling and unpickling an
    ndarray costs several times more (numpy's reduce and reconstruct), on both ends of every call."""
    at = _VECTORS_AT.get(method)
    if at is not None and isinstance(args[at], np.ndarray):
        q = args[at]
        if q.dtype == np.float32 and q.ndim == 2 and q.flags.c_contiguous:
            args = args[:at] + ((q.tobytes(), q.shape),) + args[at + 1:]
    return pickle.dumps((method, args), protocol=5)


def read_request(req: bytes) -> tuple:
    """(method, args) of request()'s bytes, the query vectors an ndarray again (a writable copy, as an
    unpickled ndarray is: a search path may normalise its queries in place)."""
    method, args = pickle.loads(req)
    at = _VECTORS_AT.get(method)
    if at is not None and type(args[at]) is tuple:
        raw, shape = args[at]
        args = args[:at] + (np.frombuffer(raw, np.float32).reshape(shape).copy(),) + args[at + 1:]
    return method, args


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


def node_request(shards, req: bytes) -> bytes:
    """The one argument of a node actor's `call`: the shards asked for there and the phase's request."""
    return pickle.dumps((tuple(shards), req), protocol=5)


def _user_error(exc):
    """The Collection's own exception inside a RayTaskError or a socket lane's NodeError (bad input is
    the caller's, not a shard fault)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, (ValueError, TypeError, KeyError, VecsiftError)) and not isinstance(cause, RuntimeError):
        return cause
    return None


_RAY = None  # (ray, RayTaskError, the exceptions of a copy that is not there), imported once


def _ray_names():
    global _RAY
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

    _RAY = (ray, RayTaskError,
            (RayActorError, GetTimeoutError, getattr(ray.exceptions, "ActorUnavailableError", RayActorError)))
    return _RAY


def _raiser(exc):
    def fetch():
        raise exc
    return fetch


def gather(copies: dict, req: bytes, gen: int, timeout: float, hedge: float | None = None, lanes=None):
    """Sends req (from request()) to one copy of every shard, one call per node actor.

    copies: shard -> [(node key, node actor handle), preferred first]; shards whose next copies
    share a node actor go in one call. lanes: a sockets.SocketLanes or a lanes.Lanes; the first calls
    go over a ready lane where there is one (a Unix socket or a compiled-graph channel), the classic
    way otherwise and for every call after a failure. Returns ([payload], {shard: reason}): one merged payload per answering node
    actor (each covering a disjoint set of shards), and the missing shards."""
    ray, RayTaskError, unavailable = _RAY or _ray_names()
    actor_gone = unavailable[0]
    start = time.monotonic()
    deadline = start + timeout
    hedge_at = start + (hedge if hedge is not None else max(0.05, timeout / 4))
    nxt = {s: 0 for s in copies}
    inflight = {}  # ref -> shards asked for in that call
    busy = {s: 0 for s in copies}  # calls in flight per shard
    pieces = []  # [shards covered, payload] (None once replaced by a wider answer)
    covered = {}  # shard -> index in pieces
    reasons = {}

    lane_calls = []  # (lane, compiled-graph ref, shards asked for)
    handles = {}  # classic call's ref -> the node actor asked

    def submit(shards, via=None):
        calls = {}
        for s in sorted(shards):
            if nxt[s] >= len(copies[s]):
                if not busy[s]:
                    reasons.setdefault(s, "no copy at this generation")
                continue
            key, handle = copies[s][nxt[s]]
            nxt[s] += 1
            calls.setdefault(key, (handle, []))[1].append(s)
        for handle, ss in calls.values():
            msg = node_request(ss, req)
            lane = None if via is None else via.take(handle)
            if lane is not None:
                try:
                    lane_calls.append((lane, lane.execute(msg), ss))
                except Exception:  # noqa: BLE001 - the channel is broken: the classic call below
                    lane.broke()
                    lane = None
            if lane is None:
                ref = handle.call.remote(msg)
                inflight[ref] = ss
                handles[ref] = handle
            for s in ss:
                busy[s] += 1

    def accept(served, payload) -> None:
        served = frozenset(served)
        if not served:
            return
        overlap = {covered[s] for s in served if s in covered}
        if overlap and not all(pieces[i][0] <= served for i in overlap):
            return  # a hedge's answer overlapping another one's: the shards it alone covers are asked again
        for i in overlap:  # a wider answer replaces the narrower ones it contains
            pieces[i] = None
        pieces.append((served, payload))
        for s in served:
            covered[s] = len(pieces) - 1

    def settle(asked, fetch, handle=None) -> None:
        """Records a node's answer to a call for `asked` (fetch() gives its bytes or raises), then asks
        the next copy of each shard the answer did not cover."""
        for s in asked:
            busy[s] -= 1
        try:
            served, unserved, payload = pickle.loads(fetch())
        except (RayTaskError, NodeError) as exc:
            err = _user_error(exc)
            if err is not None:
                raise err from None
            served, unserved, payload = (), {s: f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                                             for s in asked}, None
        except unavailable as exc:
            served, unserved, payload = (), {s: type(exc).__name__ for s in asked}, None
            if lanes is not None and handle is not None and isinstance(exc, actor_gone):
                # Ray says the actor is gone, but its process can live on for a moment after ray.kill
                # and still answer on its lane: the lane goes too, so no later search is served by it
                lanes.drop(handle)
        if payload is not None:
            accept(served, payload)
        for s, why in unserved.items():
            if s not in covered:
                reasons[s] = why
        again = [s for s in asked if s not in covered and busy[s] == 0]
        if again:
            submit(again)  # the next copy of each shard this answer did not cover

    submit(copies, lanes)
    if lane_calls:
        # every lane's answer first (a lane is held until its answer is in), then what they say
        got = []  # (shards asked, fetch() giving the answer or raising; None: ask again the classic way)
        for lane, ref, asked in lane_calls:
            try:
                data = lane.fetch(ref, max(0.0, hedge_at - time.monotonic()))
            except (RayTaskError, NodeError) as exc:  # raised by the node's code: the lane stays good
                lane.release()
                got.append((asked, _raiser(exc)))
            except TimeoutError:  # slow: past the hedge time the loop below also asks the next copy
                lane.broke()
                got.append((asked, None))
            except unavailable as exc:  # the actor is gone: that copy failed, as a classic call would
                lane.broke()
                got.append((asked, _raiser(exc)))
            except Exception:  # noqa: BLE001 - the channel failed, not the copy as far as we know
                lane.broke()
                got.append((asked, None))
            else:
                lane.release()
                got.append((asked, lambda d=data: d))
        lane_calls.clear()
        for asked, fetch in got:
            if fetch is not None:
                settle(asked, fetch)
            else:
                for s in asked:
                    busy[s] -= 1
                    nxt[s] -= 1
                submit(asked)
    elif inflight and not reasons:
        # the common case in one ray.get: every first copy answers, complete, before the hedge time
        refs = list(inflight)
        try:
            got = [pickle.loads(b) for b in ray.get(refs, timeout=max(0.0, hedge_at - time.monotonic()))]
        except Exception:  # noqa: BLE001 - a failure or a slow copy: sorted out one by one below
            got = None
        if got is not None and not any(unserved for _, unserved, _ in got):
            return [payload for _, _, payload in got], {}
    while inflight:
        now = time.monotonic()
        until = deadline if hedge_at is None else min(deadline, hedge_at)
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=max(0.0, until - now))  # the first in
        for ref in ready:
            settle(inflight.pop(ref), lambda r=ref: ray.get(r), handles.pop(ref))
        if time.monotonic() >= deadline:
            break  # (what was ready by then is in)
        if hedge_at is not None and time.monotonic() >= hedge_at:
            hedge_at = None
            waiting = [s for s in copies if s not in covered and busy[s] > 0]
            if waiting:
                submit(waiting)  # a slow or restarting copy races the next one
        pending = [s for s in copies if s not in covered]
        if not pending or not any(busy[s] for s in pending):
            break  # done, or every copy of what is left failed
    for s in copies:
        if s in covered:
            reasons.pop(s, None)
        else:
            reasons.setdefault(s, f"no answer within {timeout:g} s")
    return [p for _, p in sorted((min(sv), p) for sv, p in filter(None, pieces))], reasons
