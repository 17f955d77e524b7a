"""Searches over Unix-socket lanes (distributed/sockets.py, on by default): the same answers as classic
actor calls and every one of them sent over the socket, the node's errors raised as they are, a
SIGKILLed lane's actor handled by the classic path (fail closed, flagged partial) and the lane back
after the restart, a wrong token refused before anything is unpickled, no CPU while idle, and the
socket directory removed at close (and swept after a kill)."""
import os
import pickle
import signal
import socket
import stat
import time

import numpy as np
import psutil
import pytest
import ray

from vecsift.distributed import ShardedCollection, ShardUnavailableError
from vecsift.distributed.gather import gather
from vecsift.distributed.routing import id_hash
from vecsift.distributed.sockets import SocketLanes, SocketServer

from .conftest import corpus, text_queries, wait_refused

DIM = 16


def _lane_ready(sc, handle, limit=60.0):
    """Waits until the lane to `handle` is ready (lanes open in the background)."""
    t0 = time.monotonic()
    key = handle._actor_id.hex()
    while sc._lanes.states().get(key, ("",))[0] != "ready":
        sc._lanes.prepare([handle])
        assert time.monotonic() - t0 < limit, sc._lanes.states()
        time.sleep(0.05)


def _pairs(hits):
    return [(h.id, h.score) for h in hits]


@pytest.fixture(scope="module")
def data():
    return corpus(900, DIM, seed=7)


@pytest.fixture(scope="module")
def one(ray_cluster, tmp_path_factory, data):
    """All 3 shards in one node actor on the driver's Ray node (nodes=1), socket lanes (the default),
    and the same rows with classic calls only."""
    ids, x, texts, _ = data
    root = tmp_path_factory.mktemp("sockets")
    fast = ShardedCollection.create(root / "fast", DIM, "cosine", shards=3, nodes=1, timeout=5)
    classic = ShardedCollection.create(root / "classic", DIM, "cosine", shards=3, nodes=1, timeout=5, lanes=None)
    for sc in (fast, classic):
        sc.add(ids, x, texts=texts)
        sc.commit()
        # the first text search compiles the BM25 kernels in the node actor (seconds on a cold numba
        # cache, past the hedge time, which drops a lane): done here, before anything is counted
        sc.search(text=texts[0], k=3)
    _lane_ready(fast, fast.primary(0))
    yield fast, classic, x
    fast.close()
    classic.close()


def test_answers_equal_classic_calls_all_over_the_socket(one):
    fast, classic, x = one
    assert classic._lanes is None and isinstance(fast._lanes, SocketLanes)
    node = fast.primary(0)
    calls0 = ray.get(node.ping.remote())["node_calls"]
    served0 = ray.get(node.socket_stats.remote())["served"]
    lane0 = fast._lanes.lane(node).calls
    rng = np.random.default_rng(3)
    q = x[rng.choice(len(x), 10, replace=False)] + 0.05 * rng.standard_normal((10, DIM)).astype(np.float32)
    for v in q:  # the lean one-query path, the general path, more than a node's candidates
        for kw in ({}, {"threads": 1}, {"k": 25, "allow_partial": True}):
            a, b = fast.search(v, **kw), classic.search(v, **kw)
            assert _pairs(a) == _pairs(b) and not a.partial and a.generation == b.generation
    for t in text_queries(6, seed=9):  # BM25 (a statistics phase, then the search) and hybrid
        for kw in ({"text": t}, {"text": t, "vector": q[0]}):
            assert _pairs(fast.search(**kw, k=10)) == _pairs(classic.search(**kw, k=10))
    lane_calls = fast._lanes.lane(node).calls - lane0
    node_calls = ray.get(node.ping.remote())["node_calls"] - calls0
    served = ray.get(node.socket_stats.remote())["served"] - served0
    assert lane_calls == node_calls == served >= 30 + 6 + 12  # every search phase went over the socket
    ga, gb = fast.search_batch(q, k=7), classic.search_batch(q, k=7)  # a batch: a classic call
    assert [_pairs(r) for r in ga] == [_pairs(r) for r in gb]
    assert fast._lanes.lane(node).calls - lane0 == lane_calls


def test_node_errors_come_back_as_themselves_and_the_lane_stays(one):
    fast, _, x = one
    lane = fast._lanes.lane(fast.primary(0))
    before = lane.calls
    for _ in range(2):
        with pytest.raises(ValueError, match="nope"):  # raised by the shard Collections, in the node actor
            fast.search(text="w1", where={"nope": 1})
    assert lane.calls == before + 2 and lane.state == "ready" and lane.failures == 0
    assert fast.search(x[1], k=1)[0].score == pytest.approx(1.0, abs=1e-6)
    assert lane.calls == before + 3


def test_a_wrong_token_is_refused_before_anything_is_unpickled(one, tmp_path):
    fast, _, x = one
    node = fast.primary(0)
    path, token, _ = ray.get(node.open_socket.remote())
    st = os.stat(os.path.dirname(path))
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    marker = tmp_path / "unpickled"

    class Evil:
        def __reduce__(self):
            return os.mkdir, (str(marker),)

    evil = pickle.dumps(Evil())
    before = ray.get(node.ping.remote())["node_calls"]
    refused0 = ray.get(node.socket_stats.remote())["refused"]
    for first in (bytes(len(token)), token[:-1] + bytes([token[-1] ^ 1]), b""):  # wrong, off by a bit, none
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(path)
        try:
            s.sendall(first + len(evil).to_bytes(4, "big") + evil)
            s.shutdown(socket.SHUT_WR)
            got = s.recv(100)
        except ConnectionResetError:
            got = b""
        finally:
            s.close()
        assert got == b""  # closed without an answer
    assert not marker.exists()  # never unpickled
    stats = ray.get(node.socket_stats.remote())
    assert stats["refused"] - refused0 == 3 and stats["open"]
    assert ray.get(node.ping.remote())["node_calls"] == before
    assert fast.search(x[2], k=1)[0].score == pytest.approx(1.0, abs=1e-6)  # the lane is unaffected


def _cpu(pid):
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def test_an_idle_lane_uses_no_cpu(one):
    fast, _, x = one
    node = fast.primary(0)
    fast.search(x[0], k=3)
    assert fast._lanes.states()[node._actor_id.hex()][0] == "ready"
    pid = ray.get(node.ping.remote())["pid"]
    actor = psutil.Process(pid)
    me = psutil.Process()
    time.sleep(0.2)
    a0, d0, w0 = _cpu(pid), _cpu(me.pid), time.monotonic()
    time.sleep(1.0)
    a1, d1, w1 = _cpu(pid), _cpu(me.pid), time.monotonic()
    # Ray's own threads wake now and then (~0.01 cores each); a polling reader would take ~1 core
    assert (a1 - a0) / (w1 - w0) < 0.1, (a1 - a0, w1 - w0)
    assert (d1 - d0) / (w1 - w0) < 0.1, (d1 - d0, w1 - w0)
    assert actor.num_threads() > 0  # (the process is the one measured)


# ---- the default layout on the 3-node cluster: one node actor on the driver's node

@pytest.fixture(scope="module")
def spread(ray_cluster, tmp_path_factory, data):
    ids, x, texts, _ = data
    sc = ShardedCollection.create(tmp_path_factory.mktemp("sockets-spread") / "sc", DIM, "cosine", shards=3,
                                  timeout=5)
    sc.add(ids, x, texts=texts)
    sc.commit()
    yield sc, ids, x
    sc.close()


def _local_shard(sc):
    here = ray.get_runtime_context().get_node_id()
    on_here = [s for s in range(3) if ray.get(sc.primary(s).ping.remote())["node"] == here]
    assert len(on_here) == 1
    return on_here[0]


def test_only_the_callers_node_gets_a_socket_lane(spread):
    sc, _, x = spread
    shard = _local_shard(sc)
    _lane_ready(sc, sc.primary(shard))
    t0 = time.monotonic()
    while sorted(state for state, _ in sc._lanes.states().values()) != ["ready", "remote", "remote"]:
        assert time.monotonic() - t0 < 30, sc._lanes.states()
        time.sleep(0.05)
    before = sc._lanes.lane(sc.primary(shard)).calls
    sc.search(x[0], k=5)
    assert sc._lanes.lane(sc.primary(shard)).calls == before + 1


def test_killed_lane_actor_fails_closed_or_flags_partial_then_the_lane_comes_back(spread, one):
    sc, ids, x = spread
    _, classic, _ = one
    shard = _local_shard(sc)
    node = sc.primary(shard)
    _lane_ready(sc, node)
    lane = sc._lanes.lane(node)
    v = x[2] + 0.01
    want = _pairs(classic.search(v, k=10))
    wide = _pairs(classic.search(v, k=40))
    want_without = [p for p in wide if int(id_hash([p[0]])[0] % 3) != shard][:10]
    dirs = [ray.get(node.socket_stats.remote())["dir"]]
    os.kill(ray.get(node.ping.remote())["pid"], signal.SIGKILL)
    seen, t0 = set(), time.monotonic()
    while True:
        assert time.monotonic() - t0 < 60, (seen, sc._lanes.states())
        got = sc.search(v, k=10, allow_partial=True, timeout=2)  # never raises with allow_partial
        if got.partial:
            assert got.missing_shards == (shard,) and _pairs(got) == want_without
            seen.add("partial")
        else:
            assert _pairs(got) == want
            if lane.state == "ready" and "partial" in seen:
                break
        time.sleep(0.02)
    before = lane.calls
    assert _pairs(sc.search(v, k=10)) == want
    assert lane.calls == before + 1  # over the socket again, a new one
    new_dir = ray.get(node.socket_stats.remote())["dir"]
    assert new_dir != dirs[0] and not os.path.exists(dirs[0])  # the dead actor's directory swept
    dirs.append(new_dir)
    os.kill(ray.get(node.ping.remote())["pid"], signal.SIGKILL)
    with pytest.raises(ShardUnavailableError) as exc:  # fail closed by default while the actor is down
        for _ in range(400):
            sc.search(v, k=10, timeout=1)
            time.sleep(0.01)
    assert shard in exc.value.missing
    _lane_ready(sc, node)
    assert _pairs(sc.search(v, k=10)) == want
    assert not os.path.exists(dirs[1])


def test_close_removes_the_socket_directory(ray_cluster, tmp_path, data):
    ids, x, texts, _ = data
    sc = ShardedCollection.create(tmp_path / "sc", DIM, "cosine", shards=2, nodes=1, timeout=5)
    sc.add(ids[:100], x[:100])
    sc.commit()
    _lane_ready(sc, sc.primary(0))
    d = ray.get(sc.primary(0).socket_stats.remote())["dir"]
    assert os.path.exists(os.path.join(d, "node.sock"))
    sc.close()
    assert not os.path.exists(d)
    assert sc._lanes.states()[sc.primary(0)._actor_id.hex()][0] == "closed"


def test_lanes_argument(ray_cluster, tmp_path):
    with pytest.raises(ValueError, match="lanes"):
        ShardedCollection.create(tmp_path / "bad", DIM, "cosine", shards=1, lanes="tcp")


# ---- gather over socket lanes to test actors: slow answers, hedging

@ray.remote(num_cpus=0)
class _Node:
    """Answers a node call as a NodeServer does, after `delay` seconds, over a socket too."""

    def __init__(self, name):
        self.name, self.delay, self.srv = name, 0.0, None

    def open_socket(self):
        if self.srv is None:
            self.srv = SocketServer(self.call)
        return self.srv.path, self.srv.token, ray.get_runtime_context().get_node_id()

    def close_socket(self):
        if self.srv is not None:
            self.srv.close()

    def slow(self, delay):
        self.delay = delay

    def call(self, req):
        shards, _ = pickle.loads(req)
        time.sleep(self.delay)
        return pickle.dumps((list(shards), {}, [self.name]), protocol=5)


def _here():
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


def _wait(lanes, h, limit=30.0):
    t0 = time.monotonic()
    while lanes.states().get(h._actor_id.hex(), ("",))[0] != "ready":
        lanes.prepare([h])
        assert time.monotonic() - t0 < limit, lanes.states()
        time.sleep(0.02)


def test_gather_over_socket_lanes_hedges_and_reopens(ray_cluster):
    a = _Node.options(scheduling_strategy=_here()).remote("a")
    b = _Node.options(scheduling_strategy=_here()).remote("b")
    lanes = SocketLanes(ray)
    try:
        for h in (a, b):
            _wait(lanes, h)
        assert gather({0: [("a", a)], 1: [("a", a)]}, b"req", 0, 5.0, lanes=lanes) == ([["a"]], {})
        assert lanes.states()[a._actor_id.hex()] == ("ready", 1)
        ray.get(a.slow.remote(1.5))
        t0 = time.monotonic()  # a slow copy is hedged by the next, whose answer is taken at once
        got, missing = gather({0: [("a", a), ("b", b)]}, b"req", 0, 5.0, hedge=0.3, lanes=lanes)
        assert time.monotonic() - t0 < 1.2 and got == [["b"]] and missing == {}
        assert lanes.states()[a._actor_id.hex()][0] == "idle"  # timed out at the hedge: dropped
        t0 = time.monotonic()  # a slow last copy: missing at the deadline
        assert gather({0: [("a", a)]}, b"req", 0, 0.5, lanes=lanes) == ([], {0: "no answer within 0.5 s"})
        assert time.monotonic() - t0 < 1.2
        ray.get(a.slow.remote(0.0))
        _wait(lanes, a)  # opened again (after the back-off)
        n = lanes.states()[a._actor_id.hex()][1]
        assert gather({0: [("a", a)]}, b"req", 0, 5.0, lanes=lanes) == ([["a"]], {})
        assert lanes.states()[a._actor_id.hex()] == ("ready", n + 1)
    finally:
        lanes.close()
        for h in (a, b):
            ray.kill(h)


def test_a_classic_call_that_finds_the_actor_gone_drops_its_lane(ray_cluster):
    """A killed actor's process can answer on its socket for a moment after Ray reports the actor
    dead (seen in CI: a search right after ray.kill served complete by the dying process). So when
    a classic call says the actor is gone, its lane goes with it."""
    a = _Node.options(scheduling_strategy=_here()).remote("a")
    lanes = SocketLanes(ray, max_conns=1)
    try:
        _wait(lanes, a)
        held = lanes.take(a)  # the one connection busy: gather calls `a` the classic way
        assert held is not None and lanes.take(a) is None
        ray.kill(a, no_restart=True)
        wait_refused(lambda: ray.get(a.open_socket.remote(), timeout=5))
        got, missing = gather({0: [("a", a)]}, b"req", 0, 5.0, lanes=lanes)
        assert got == [] and "Actor" in missing[0]
        assert lanes.states()[a._actor_id.hex()][0] == "idle"  # dropped (opened again only if it comes back)
        held.release()  # a connection of the dropped lane is closed, not handed out again
        assert lanes.lane(a).free == [] and held.sock.fileno() == -1
    finally:
        lanes.close()
