"""Search calls to node actors over Ray Compiled Graph channels.

A classic actor call goes through the raylet and the object store: ~1.6-2.5 ms a round trip on
a loaded 2-core machine (bench_ray). A compiled graph (input -> node.call(input)) talks to an
actor on the caller's own Ray node through a shared-memory channel: ~0.17-0.7 ms for the same
trivial call. Across Ray nodes it measured no faster (3.2 vs 3.6 ms for a 3-node fan-out) and
costs 1-2 s to compile, so only node actors on the caller's node get a lane.

The price: Ray's channel reader polls. Each open lane keeps about one core busy, idle or not
(measured: 0.07 cores busy in an idle Ray session, 1.07 with one compiled graph open, 1.99 with
two; 0.09 after tearing them down), which on a shared machine slows everything else (bench_ray,
the local Collection's 4-thread throughput: 1,748 q/s in a run with two graphs open against
2,341-3,140 q/s in runs without, same machine). So lanes are
opt-in: ShardedCollection.open(..., compiled=True), for a latency-bound service with cores to spare,
and a lane unused for IDLE_S seconds is torn down (the next search compiles it again in the
background, ~0.15 s on the caller's node, and goes the classic way meanwhile), so the polling
lasts while searches come, not for the life of the collection.

A lane is an optimisation, never a requirement: gather() uses one when it is ready and free and
calls the classic way otherwise. One caller at a time uses a lane (its lock). Any system error
(actor died or restarted, channel error, timeout) breaks it: it is torn down in the background
and compiled again after a back-off, while searches go the classic way, which owns the failure
semantics (hedging, partial results, fail closed). An application error (a bad query raised by
the node) leaves the lane usable, as Ray documents."""
from __future__ import annotations

import threading
import time

_BACKOFF = (0.5, 30.0)  # seconds before compiling again after a failure: first, most
IDLE_S = 2.0  # a lane unused this long is torn down


class Lane:
    """One compiled graph to one node actor's `call`."""

    def __init__(self, owner: "Lanes", handle):
        self.owner, self.handle = owner, handle
        self.dag = None
        self.state = "idle"  # idle (may compile) | busy (compiling or tearing down) | ready | remote | closed
        self.lock = threading.Lock()  # held by the one search using the lane, and by compile / teardown
        self.failures = 0
        self.retry_at = 0.0
        self.calls = 0  # searches sent over it (tests and benchmarks read it)
        self.used = 0.0  # time.monotonic() of its last search (or of its compiling)

    # ---- used by gather (between take() and release()/broke() the caller holds the lock)
    def take(self) -> "Lane | None":
        if self.state == "ready":
            if not self.lock.acquire(blocking=False):
                return None  # another search is on it: that one goes the classic way
            if self.state == "ready":
                return self
            self.lock.release()
            return None
        if self.state == "idle" and time.monotonic() >= self.retry_at and self.lock.acquire(blocking=False):
            if self.state == "idle" and not self.owner.closed:
                self.state = "busy"
                threading.Thread(target=self._compile, name="vecsift-lane-compile", daemon=True).start()
            else:
                self.lock.release()
        return None

    def execute(self, req: bytes):
        ref = self.dag.execute(req)
        self.calls += 1
        self.used = time.monotonic()
        return ref

    def fetch(self, ref, timeout: float):
        return self.owner.ray.get(ref, timeout=timeout)

    def release(self) -> None:
        self.lock.release()

    def broke(self) -> None:
        """A system error on this lane: tear it down in the background (the lock goes with it)."""
        dag, self.dag = self.dag, None
        self.state = "busy"
        self._back_off()
        threading.Thread(target=self._teardown, args=(dag, "idle"), name="vecsift-lane-teardown",
                         daemon=True).start()

    def _back_off(self) -> None:
        self.failures += 1
        self.retry_at = time.monotonic() + min(_BACKOFF[1], _BACKOFF[0] * 2 ** (self.failures - 1))

    # ---- background work (holds the lock)
    def _compile(self) -> None:
        ray = self.owner.ray
        try:
            node = ray.get(self.handle.ping.remote(), timeout=30)["node"]
            if node != self.owner.here:
                self.state = "remote"
                return
            from ray.dag import InputNode

            with InputNode() as inp:
                dag = self.handle.call.bind(inp)
            self.dag = dag.experimental_compile()
            self.failures = 0
            self.used = time.monotonic()
            if self.owner.closed:
                self._teardown(self.dag, "closed", locked=True)
                return
            self.state = "ready"
        except Exception:  # noqa: BLE001 - no lane for now: searches go the classic way
            self.dag = None
            self._back_off()
            self.state = "closed" if self.owner.closed else "idle"
        finally:
            self.lock.release()

    def _teardown(self, dag, then: str, locked: bool = False) -> None:
        try:
            if dag is not None:
                dag.teardown()
        except Exception:  # noqa: BLE001 - the actor is gone or restarting: nothing left to stop
            pass
        finally:
            self.dag = None
            self.state = "closed" if self.owner.closed else then
            if not locked:
                self.lock.release()

    def reap(self, idle: float) -> None:
        """Tears the lane down if no search used it for `idle` seconds (and none is using it now)."""
        if self.state != "ready" or time.monotonic() - self.used < idle or not self.lock.acquire(blocking=False):
            return
        if self.state == "ready" and time.monotonic() - self.used >= idle:
            dag, self.dag = self.dag, None
            self.state = "busy"
            self._teardown(dag, "idle", locked=True)
        self.lock.release()

    def close(self, wait: float) -> None:
        if not self.lock.acquire(timeout=wait):
            return  # still compiling or tearing down: that thread sees owner.closed and cleans up
        try:
            dag, self.dag = self.dag, None
            self.state = "closed"
            if dag is not None:
                try:
                    dag.teardown()
                except Exception:  # noqa: BLE001 - gone already
                    pass
        finally:
            self.lock.release()


class Lanes:
    """The lanes of one ShardedCollection, one per node actor (by actor id)."""

    def __init__(self, ray, idle: float = IDLE_S):
        self.ray = ray
        self.here = ray.get_runtime_context().get_node_id()
        self.idle = float(idle)
        self.closed = False
        self._lanes = {}
        self._lock = threading.Lock()
        self._reaper = None

    def take(self, handle) -> Lane | None:
        """A ready lane to `handle`, locked for the caller, or None: call it the classic way (a lane
        starts compiling in the background if it may)."""
        if self.closed:
            return None
        key = handle._actor_id
        lane = self._lanes.get(key)
        if lane is None:
            with self._lock:
                lane = self._lanes.setdefault(key, Lane(self, handle))
                if self._reaper is None:
                    self._reaper = threading.Thread(target=self._reap, name="vecsift-lane-reaper", daemon=True)
                    self._reaper.start()
        return lane.take()

    def _reap(self) -> None:
        while not self.closed:
            time.sleep(min(0.5, self.idle / 2))
            for lane in list(self._lanes.values()):
                if self.closed:
                    return
                try:
                    lane.reap(self.idle)
                except Exception:  # noqa: BLE001 - a teardown that failed: the lane is idle again anyway
                    pass

    def drop(self, handle) -> None:
        """A classic call found `handle`'s actor gone: its graph is torn down (unless a search holds it:
        that search finds out itself)."""
        lane = self._lanes.get(handle._actor_id)
        if lane is not None and lane.state == "ready" and lane.lock.acquire(blocking=False):
            if lane.state == "ready":
                lane.broke()
            else:
                lane.lock.release()

    def states(self) -> dict:
        """{actor id hex: (state, calls sent over it)}: for tests and benchmarks."""
        return {k.hex(): (lane.state, lane.calls) for k, lane in list(self._lanes.items())}

    def close(self, wait: float = 10.0) -> None:
        """Tears every lane down (before the actors are killed: a torn-down graph on a live actor
        stops at once, on a dead one it may wait)."""
        self.closed = True
        for lane in list(self._lanes.values()):
            lane.close(wait)
