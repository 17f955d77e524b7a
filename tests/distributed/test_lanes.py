"""Searches over Ray Compiled Graph channels (distributed/lanes.py): the same answers as classic
actor calls, the node's errors raised as they are, and every failure of a lane (a slow or killed
actor) handed to the classic path, which then fails closed, hedges or flags partial results."""
import os
import pickle
import signal
import time

import numpy as np
import pytest
import ray

from vecsift.distributed import ShardedCollection, ShardUnavailableError
from vecsift.distributed.gather import gather
from vecsift.distributed.lanes import Lanes

from .conftest import corpus, text_queries

DIM = 16


def _here():
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


def _wait_ready(sc, probe, limit=60.0):
    """Searches until a lane is ready (lanes compile in the background after a search asks); the
    shards served by node actors with a ready lane."""
    t0 = time.monotonic()
    while True:
        sc.search(probe, k=3)
        ready = {a for a, (state, _) in sc._lanes.states().items() if state == "ready"}
        shards = [s for s in range(sc.n_shards) if sc.primary(s)._actor_id.hex() in ready]
        if shards:
            return shards
        assert time.monotonic() - t0 < limit, sc._lanes.states()
        time.sleep(0.1)


def _lane_calls(sc):
    return sum(calls for _, calls in sc._lanes.states().values())


@pytest.fixture(scope="module")
def both(ray_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("lanes")
    ids, x, texts, _ = corpus(900, DIM, seed=5)
    fast = ShardedCollection.create(root / "lanes", DIM, "cosine", shards=3, timeout=5, compiled=True)
    classic = ShardedCollection.create(root / "classic", DIM, "cosine", shards=3, timeout=5, lanes=None)
    for sc in (fast, classic):
        sc.add(ids, x, texts=texts)
        sc.commit()
    yield fast, classic, x
    fast.close()
    classic.close()


def test_only_the_callers_node_gets_a_lane(both):
    fast, classic, x = both
    shards = _wait_ready(fast, x[0])
    here = ray.get_runtime_context().get_node_id()
    on_here = [s for s in range(3) if ray.get(fast.primary(s).ping.remote())["node"] == here]
    assert shards == on_here and len(on_here) == 1  # the 3-node cluster: one node actor on the driver's node
    time.sleep(0.5)  # the other lanes have found out by now: their actors are elsewhere
    states = [state for state, _ in fast._lanes.states().values()]
    assert sorted(states) == ["ready", "remote", "remote"], states
    assert classic._lanes is None


def test_lane_answers_equal_classic_calls(both):
    fast, classic, x = both
    _wait_ready(fast, x[0])
    before = _lane_calls(fast)
    rng = np.random.default_rng(3)
    q = x[rng.choice(len(x), 12, replace=False)] + 0.05 * rng.standard_normal((12, DIM)).astype(np.float32)
    searches = 0
    for v in q:
        for kw in ({}, {"threads": 1}, {"k": 25, "allow_partial": True}):
            a, b = fast.search(v, **kw), classic.search(v, **kw)
            searches += 1
            assert [(h.id, h.score) for h in a] == [(h.id, h.score) for h in b]
            assert not a.partial and a.generation == b.generation
    ga, gb = fast.search_batch(q, k=7), classic.search_batch(q, k=7)  # a batch: classic calls
    assert [[(h.id, h.score) for h in r] for r in ga] == [[(h.id, h.score) for h in r] for r in gb]
    for t in text_queries(6, seed=9):  # BM25 (a statistics phase, then the search) and hybrid
        for kw in ({"text": t}, {"text": t, "vector": q[0]}):
            a, b = fast.search(**kw, k=10), classic.search(**kw, k=10)
            searches += 1
            assert [(h.id, h.score) for h in a] == [(h.id, h.score) for h in b]
    assert _lane_calls(fast) - before >= searches  # every search went over the lane (some twice)


def test_node_errors_come_back_and_the_lane_stays(both):
    fast, _, x = both
    _wait_ready(fast, x[0])
    before = _lane_calls(fast)
    with pytest.raises(ValueError, match="where"):  # raised by the shard Collections, not the driver
        fast.search(text="w1", where={"nope": 1})
    assert _lane_calls(fast) > before
    assert "ready" in [state for state, _ in fast._lanes.states().values()]
    assert fast.search(x[1], k=1)[0].score == pytest.approx(1.0, abs=1e-6)


def test_killed_node_actor_fails_closed_then_its_lane_comes_back(both):
    fast, classic, x = both
    shard = _wait_ready(fast, x[0])[0]
    want = [(h.id, h.score) for h in classic.search(x[2], k=10)]
    os.kill(ray.get(fast.primary(shard).ping.remote())["pid"], signal.SIGKILL)
    seen, t0 = set(), time.monotonic()
    while time.monotonic() - t0 < 60:
        try:
            got = fast.search(x[2], k=10, allow_partial=True, timeout=2)
        except ShardUnavailableError as exc:  # not with allow_partial: a bug
            raise AssertionError(exc)
        if got.partial:
            assert got.missing_shards == (shard,)
            seen.add("partial")
        else:
            assert [(h.id, h.score) for h in got] == want
            ready = [a for a, (state, _) in fast._lanes.states().items() if state == "ready"]
            if fast.primary(shard)._actor_id.hex() in ready:
                break
        time.sleep(0.05)
    else:
        raise AssertionError(f"lane not back: {fast._lanes.states()}")
    before = _lane_calls(fast)
    assert [(h.id, h.score) for h in fast.search(x[2], k=10)] == want
    assert _lane_calls(fast) == before + 1  # over the lane again
    with pytest.raises(ShardUnavailableError):  # and fail closed by default, while the actor is down
        os.kill(ray.get(fast.primary(shard).ping.remote())["pid"], signal.SIGKILL)
        for _ in range(200):
            fast.search(x[2], k=10, timeout=1)
    t0 = time.monotonic()
    while True:  # back before the next test
        try:
            ray.get(fast.primary(shard).ping.remote(), timeout=1)
            break
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            assert time.monotonic() - t0 < 60
            time.sleep(0.05)


# ---- gather over lanes to test actors: slow answers, hedging

@ray.remote(num_cpus=0)
class _Node:
    """Answers a node call as a NodeServer does, after `delay` seconds."""

    def __init__(self, name):
        self.name, self.delay = name, 0.0

    def ping(self):
        return {"node": ray.get_runtime_context().get_node_id()}

    def slow(self, delay):
        self.delay = delay

    def call(self, req):
        shards, _ = pickle.loads(req)
        time.sleep(self.delay)
        return pickle.dumps((list(shards), {}, [self.name]), protocol=5)


def _lane_of(lanes, handle):
    """The lane to handle once compiled (take() starts compiling), held: release() it."""
    t0 = time.monotonic()
    while (lane := lanes.take(handle)) is None:
        assert time.monotonic() - t0 < 60, lanes.states()
        time.sleep(0.05)
    return lane


@pytest.fixture()
def nodes(ray_cluster):
    a = _Node.options(scheduling_strategy=_here()).remote("a")
    b = _Node.options(scheduling_strategy=_here()).remote("b")
    lanes = Lanes(ray)
    ray.get([a.ping.remote(), b.ping.remote()])
    for h in (a, b):
        _lane_of(lanes, h).release()
    yield a, b, lanes
    lanes.close()
    for h in (a, b):
        ray.kill(h)


def test_gather_over_a_lane(nodes):
    a, b, lanes = nodes
    got, missing = gather({0: [("a", a)], 1: [("a", a)]}, b"req", 0, 5.0, lanes=lanes)
    assert got == [["a"]] and missing == {}
    assert [c for _, c in lanes.states().values()] == [1, 0]


def test_a_slow_last_copy_times_out_and_its_lane_is_rebuilt(nodes):
    a, b, lanes = nodes
    ray.get(a.slow.remote(3.0))
    t0 = time.monotonic()
    got, missing = gather({0: [("a", a)]}, b"req", 0, 0.5, lanes=lanes)
    assert time.monotonic() - t0 < 2.0
    assert got == [] and missing == {0: "no answer within 0.5 s"}
    assert lanes.states()[a._actor_id.hex()][0] in ("busy", "idle")  # broken: torn down, compiled again later
    ray.get(a.slow.remote(0.0))
    _lane_of(lanes, a).release()
    assert gather({0: [("a", a)]}, b"req", 0, 5.0, lanes=lanes) == ([["a"]], {})


@pytest.mark.parametrize("over", ["lane", "classic"])
def test_a_slow_copy_is_hedged_by_the_next(nodes, over):
    """The next copy's answer is taken as soon as it is in, not when the slow copy's is."""
    a, b, lanes = nodes
    ray.get(a.slow.remote(3.0))
    t0 = time.monotonic()
    got, missing = gather({0: [("a", a), ("b", b)]}, b"req", 0, 5.0, hedge=0.3,
                          lanes=lanes if over == "lane" else None)
    assert time.monotonic() - t0 < 2.5
    assert got == [["b"]] and missing == {}


def test_an_idle_lane_is_torn_down_and_compiled_again_when_asked(ray_cluster):
    """An open lane keeps a core polling: unused for `idle` seconds it goes, and comes back on demand."""
    a = _Node.options(scheduling_strategy=_here()).remote("a")
    lanes = Lanes(ray, idle=0.3)
    try:
        ray.get(a.ping.remote())
        _lane_of(lanes, a).release()
        assert gather({0: [("a", a)]}, b"req", 0, 5.0, lanes=lanes) == ([["a"]], {})
        t0 = time.monotonic()
        while lanes.states()[a._actor_id.hex()][0] != "idle":
            assert time.monotonic() - t0 < 10, lanes.states()
            time.sleep(0.05)
        assert gather({0: [("a", a)]}, b"req", 0, 5.0, lanes=lanes) == ([["a"]], {})  # classic meanwhile
        _lane_of(lanes, a).release()  # that search asked for it again
        assert gather({0: [("a", a)]}, b"req", 0, 5.0, lanes=lanes) == ([["a"]], {})
        assert lanes.states()[a._actor_id.hex()] == ("ready", 2)
    finally:
        lanes.close()
        ray.kill(a)
