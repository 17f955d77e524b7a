"""Sharded collection on Ray: scatter/gather overhead, throughput with 1-3 shards, node kills.

    flock /tmp/vecsift-bench.lock python bench/bench_ray.py [--rows 30000] [--queries 200] [--kills 20]

Data: the PyPI MiniLM set (384-d, real summaries as texts) from /work/shared/data/pypi-minilm.
One Ray node (ray.init, num_cpus=2) on this 2-core machine, so a ShardedCollection places all
its shards in one node actor (one per Ray node): a search is one actor call. Measured in one
run, interleaved per query, medians:

  overhead   = p50(3-shard search) - p50(the same search on one local Collection of all rows)
  round trip = p50(ray.get(actor.noop.remote())) on an actor made like the node actors
  bar        : overhead <= 1.5 x round trip
  also       : the same 3 shards searched by the node actor on 3 threads (node_threads=3), and
               with one node actor per shard (nodes=3: the layout before node actors); the
               floors: one call carrying a search's request and answer bytes, and a trivial
               3-actor fan-out (what one actor per shard pays before a shard does any work), and the
               local Collection's own search served by an actor (a copy of its directory opened read-only
               there, pickled bytes in and out; no sharding code): what any search through one Ray call costs;
               and the 3 shards opened with compiled=True (searches over a Ray Compiled Graph channel,
               distributed/lanes.py) next to a trivial call over such a channel, and with lanes=None
               (classic Ray calls only; the default, lanes="socket", sends them over a Unix socket,
               distributed/sockets.py) next to a trivial call over such a socket; then how many cores
               the session burns while idle with nothing open, with the compiled-graph channels open
               (they poll) and after closing them (the socket lanes still open)

then the CPU time each kind of call costs, summed over every process of the Ray session (driver,
raylet, GCS, workers; from /proc through psutil), with the cores the machine gave us meanwhile
(CPU / wall), because on 2 shared cores a fan-out's latency is its CPU time; then throughput
(4 client threads, and one 200-query batch) with 1, 2, 3 shards and of trivial fan-outs to 1-3
actors; then `--kills` rounds of add / commit while the node actor holding the 3 shards is
SIGKILLed at a random moment, counting committed rows missing afterwards. The load average is printed per
section: the machine is shared.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import signal
import tempfile
import threading
import time

import numpy as np

DATA = "/work/shared/data/pypi-minilm"


def load(rows, queries):
    vecs = np.load(os.path.join(DATA, "vectors.f16.npy"), mmap_mode="r")
    texts = []
    with open(os.path.join(DATA, "texts.jsonl")) as f:
        for i, line in enumerate(f):
            if i < rows or 100000 <= i < 100000 + queries:
                texts.append(json.loads(line)["summary"])
    base = np.asarray(vecs[:rows], np.float32)
    q = np.asarray(vecs[100000:100000 + queries], np.float32)
    return base, texts[:rows], q, texts[rows:]


def pct(ts, p):
    return float(np.percentile(np.asarray(ts) * 1e3, p))


def loadavg():
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def session_cpu():
    """CPU seconds (user + system) used so far by this process and every process under it."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me] + me.children(recursive=True):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=30000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=4.0, help="per throughput point")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="vecsift-bench-ray-", dir="/tmp")
    os.makedirs(os.path.join(tmp, "ray"), exist_ok=True)
    os.environ["RAY_TMPDIR"] = tmp
    import ray

    import vecsift
    from vecsift.distributed import ShardedCollection

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    from vecsift.distributed.sockets import SocketLanes, SocketServer
    base, texts, q, qtexts = load(args.rows, args.queries)
    ids = [f"p{i}" for i in range(len(base))]
    print(f"data: {len(base)} x {base.shape[1]} MiniLM rows, {len(q)} queries; ray {ray.__version__}")

    t = time.perf_counter()
    local = vecsift.Collection.create(os.path.join(tmp, "local"), base.shape[1], "cosine")
    local.add(ids, base, texts=texts)
    local.commit()
    print(f"local collection built in {time.perf_counter() - t:.1f} s")

    from vecsift.distributed.gather import node_request, request

    @ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)  # as the node actors are made
    class Noop:
        def noop(self, x=None):
            return None

        def echo(self, req, answer):
            return answer

        def open_socket(self):  # a trivial call over a socket lane, as the node actors serve them
            self.srv = SocketServer(lambda req: b"")
            return self.srv.path, self.srv.token, ray.get_runtime_context().get_node_id()

        def close_socket(self):
            self.srv.close()

    @ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
    class Served:  # one Collection searched inside an actor: the floor of any search served by Ray
        def __init__(self, path):
            self.col = vecsift.open(path, readonly=True)

        def search(self, b):  # bytes in and out, as a node actor's call (a numpy argument costs Ray more)
            return pickle.dumps([(h.id, h.score) for h in self.col.search(pickle.loads(b), k=10)], protocol=5)

    noop = Noop.remote()
    fan = [Noop.remote() for _ in range(3)]
    ray.get([a.noop.remote() for a in [noop] + fan])

    def idle_cores(seconds=2.0):
        c0, w0 = session_cpu(), time.perf_counter()
        time.sleep(seconds)
        return (session_cpu() - c0) / (time.perf_counter() - w0)

    time.sleep(1.0)
    busy_nothing = idle_cores()  # nothing open yet: Ray's own idle cost
    shards = {}
    for n in (1, 2, 3):
        t = time.perf_counter()
        sc = ShardedCollection.create(os.path.join(tmp, f"sc{n}"), base.shape[1], "cosine", shards=n)
        sc.add(ids, base, texts=texts)
        sc.commit()
        shards[n] = sc
        print(f"{n}-shard collection built in {time.perf_counter() - t:.1f} s")
    shutil.copytree(os.path.join(tmp, "local"), os.path.join(tmp, "local-actor"), ignore=shutil.ignore_patterns("LOCK"))
    served = Served.remote(os.path.join(tmp, "local-actor"))
    ray.get(served.search.remote(pickle.dumps(q[0], protocol=5)))
    sc3 = shards[3]
    sc3.close()  # copies of its directory, opened with other node layouts (the CLUSTER names no placement)
    for name in ("threads", "pershard", "compiled", "classic"):
        shutil.copytree(os.path.join(tmp, "sc3"), os.path.join(tmp, f"sc3-{name}"))
    sc3 = shards[3] = ShardedCollection.open(os.path.join(tmp, "sc3"))
    sc3t = ShardedCollection.open(os.path.join(tmp, "sc3-threads"), node_threads=3)
    sc3a = ShardedCollection.open(os.path.join(tmp, "sc3-pershard"), nodes=3)
    sc3c = ShardedCollection.open(os.path.join(tmp, "sc3-compiled"), compiled=True)
    sc3n = ShardedCollection.open(os.path.join(tmp, "sc3-classic"), lanes=None)
    sock_lanes = SocketLanes(ray)  # the trivial socket call's lane
    sock_noop = Noop.remote()
    ray.get(sock_noop.noop.remote())
    t0 = time.monotonic()  # lanes open (compile) in the background once a search asks: wait for them
    for sc in (sc3c, sc3, sc3t, sc3a):
        while not sc._lanes.states() or not all(st == "ready" for st, _ in sc._lanes.states().values()):
            sc.search(q[0], k=10)
            time.sleep(0.05)
            if time.monotonic() - t0 > 60:
                raise SystemExit(f"lanes not ready after 60 s: {sc._lanes.states()}")
    while sock_lanes.states().get(sock_noop._actor_id.hex(), ("",))[0] != "ready":
        sock_lanes.prepare([sock_noop])
        time.sleep(0.05)

    def trivial_socket_call():
        conn = sock_lanes.take(sock_noop)
        conn.execute(b"")
        try:
            return conn.fetch(None, 5.0)
        finally:
            conn.release()
    from ray.dag import InputNode

    noop_cg = Noop.remote()  # a trivial call over a compiled-graph channel, as the lanes make
    with InputNode() as inp:
        trivial_cg = noop_cg.noop.bind(inp).experimental_compile()
    for name, sc in (("3-shard", sc3), ("3-shard, node_threads=3", sc3t), ("3-shard, nodes=3", sc3a)):
        layout = [sorted(ray.get(sc.primary(s).ping.remote())["gens"]) for s in range(sc.n_shards)]
        print(f"{name}: shards per node actor {[sc.node_shards(s) for s in range(sc.n_shards)]}, "
              f"node actors' shards {layout}")
    # a 3-shard search's request and answer, as bytes of the sizes it sends
    scope = {"tenant": None, "groups": None, "where": None}
    req = node_request([0, 1, 2], request("search", sc3.generation, q[:1], None, 10, scope, {"threads": 1}))
    answer = ray.get(sc3.primary(0).call.remote(req))
    print(f"wire: request {len(req)} B, the node actor's answer {len(answer)} B (10 merged hits as columns)")

    calls = {
        "local Collection": lambda v: local.search(v, k=10),
        "3-shard search": lambda v: sc3.search(v, k=10),
        "3-shard, lanes=None (classic)": lambda v: sc3n.search(v, k=10),
        "3-shard, compiled=True": lambda v: sc3c.search(v, k=10),
        "3-shard, node_threads=3": lambda v: sc3t.search(v, k=10),
        "3-shard, nodes=3 (actor/shard)": lambda v: sc3a.search(v, k=10),
        "local Collection in an actor": lambda v: pickle.loads(ray.get(served.search.remote(pickle.dumps(v, protocol=5)))),
        "trivial actor call": lambda v: ray.get(noop.noop.remote()),
        "trivial compiled-graph call": lambda v: ray.get(trivial_cg.execute(None)),
        "trivial socket-lane call": lambda v: trivial_socket_call(),
        "1 call, search's bytes": lambda v: ray.get(noop.echo.remote(req, answer)),
        "trivial 3-actor fan-out": lambda v: ray.get([a.noop.remote() for a in fan]),
    }

    # ---- overhead, interleaved per query
    print(f"\n{loadavg()}")
    for qi in range(20):  # warm-up
        for fn in calls.values():
            fn(q[qi % len(q)])
    times = {name: [] for name in calls}
    ok = {}
    for rep in range(3):
        for i in range(len(q)):
            for name, fn in calls.items():
                t0 = time.perf_counter()
                r = fn(q[i])
                times[name].append(time.perf_counter() - t0)
                if name == "local Collection":
                    want = [h.id for h in r]
                elif name.startswith("3-shard"):
                    ok[name] = ok.get(name, 0) + ([h.id for h in r] == want)
    p50 = {name: pct(t, 50) for name, t in times.items()}
    rt = p50["trivial actor call"]
    over = p50["3-shard search"] - p50["local Collection"]
    print(f"dense k=10, one query a call ({len(times['local Collection'])} calls each, interleaved per query):")
    for name, t in times.items():
        print(f"  {name:32s} p50 {pct(t, 50):6.3f} ms  p99 {pct(t, 99):6.3f} ms  ({pct(t, 50) / rt:.2f} x round trip)")
    n_calls = len(times["local Collection"])
    print(f"  overhead p50 {over:.3f} ms = {over / rt:.2f} x the round trip (bar <= 1.5): 3 shards in one node "
          f"actor, searched one after the other, over its socket lane (the default)")
    for name in ("3-shard, lanes=None (classic)", "3-shard, compiled=True", "3-shard, node_threads=3",
                 "3-shard, nodes=3 (actor/shard)", "local Collection in an actor"):
        o = p50[name] - p50["local Collection"]
        print(f"  {name}: overhead p50 {o:.3f} ms = {o / rt:.2f} x the round trip")
    rt_cg = p50["trivial compiled-graph call"]
    o = p50["3-shard, compiled=True"] - p50["local Collection"]
    print(f"  3-shard, compiled=True: the same overhead is {o / rt_cg:.2f} x a trivial compiled-graph call "
          f"({rt_cg:.3f} ms: the transport it used); its lanes (state, calls): {sc3c._lanes.states()}")

    rt_sock = p50["trivial socket-lane call"]
    print(f"  3-shard search (socket lane): the same overhead is {over / rt_sock:.2f} x a trivial socket-lane call "
          f"({rt_sock:.3f} ms); its lanes (state, calls): {sc3._lanes.states()}")

    busy_open = idle_cores(1.0)  # (the lane goes after lanes.IDLE_S = 2 s unused)
    time.sleep(2.5)
    busy_reaped = idle_cores(1.0)
    lane_state = sc3c._lanes.states()
    trivial_cg.teardown()  # compiled graphs poll their channels: they go before the CPU and throughput parts
    sc3c.close()
    for name in ("3-shard, compiled=True", "trivial compiled-graph call"):
        calls.pop(name)
    time.sleep(0.5)
    node_pid = ray.get(sc3.primary(0).ping.remote())["pid"]
    import psutil

    node_proc = psutil.Process(node_pid)
    n0, c0, w0 = sum(node_proc.cpu_times()[:2]), session_cpu(), time.perf_counter()
    time.sleep(2.0)
    n1, c1, w1 = sum(node_proc.cpu_times()[:2]), session_cpu(), time.perf_counter()
    busy_sockets, busy_node = (c1 - c0) / (w1 - w0), (n1 - n0) / (w1 - w0)
    n_sock = sum(len(sc._lanes.states()) for sc in (sc3, sc3t, sc3a)) + 1
    print(f"  idle (no call), cores busy in the session's processes: {busy_nothing:.2f} before any collection or "
          f"lane was open; {busy_open:.2f} in the first second with two compiled graphs open (the compiled=True "
          f"collection's lane and the trivial call's) and the socket lanes; {busy_reaped:.2f} 3.5 s later (the "
          f"compiled lane torn down after 2 s unused: {lane_state}); {busy_sockets:.2f} with both graphs gone and "
          f"{n_sock} socket lanes open (the node actor of the default 3-shard collection alone: {busy_node:.3f})")
    print("  same top-10 as local: " + ", ".join(f"{name} {v}/{n_calls}" for name, v in ok.items()))
    carried = p50["1 call, search's bytes"]
    print(f"  one call carrying the search's bytes is {carried / rt:.2f} x the round trip; the 3-shard search is "
          f"{p50['3-shard search'] - carried:.3f} ms above it (the node's 3 shard searches, the merges, the "
          f"checks), the local search takes {p50['local Collection']:.3f} ms")
    print(f"{loadavg()}")

    # ---- CPU per call, summed over every process of the Ray session
    print("\nCPU per call, all processes of the session (blocks of 600 calls; cores = CPU / wall):")
    cpu = {}
    more = {"1-shard search": lambda v: shards[1].search(v, k=10), "2-shard search": lambda v: shards[2].search(v, k=10),
            "3-actor fan-out, search's bytes": lambda v: ray.get([a.echo.remote(req, answer) for a in fan])}
    for name, fn in dict(calls, **more).items():
        c0, w0 = session_cpu(), time.perf_counter()
        for i in range(600):
            fn(q[i % len(q)])
        c1, w1 = session_cpu(), time.perf_counter()
        cpu[name] = (c1 - c0) / 600 * 1e3
        print(f"  {name:32s} CPU {cpu[name]:6.3f} ms, wall {(w1 - w0) / 600 * 1e3:6.3f} ms, "
              f"cores {(c1 - c0) / (w1 - w0):.2f}")
    print(f"{loadavg()}")

    # sparse: the first search of a text gathers statistics (two rounds), a repeat is cached (one)
    loc_s, cold, warm, rt_s = [], [], [], []
    same = 0
    for i in range(len(qtexts)):
        t0 = time.perf_counter()
        a = local.search(text=qtexts[i], k=10)
        t1 = time.perf_counter()
        sc3.search(text=qtexts[i], k=10)
        t2 = time.perf_counter()
        b = sc3.search(text=qtexts[i], k=10)
        t3 = time.perf_counter()
        ray.get(noop.noop.remote())
        t4 = time.perf_counter()
        loc_s.append(t1 - t0), cold.append(t2 - t1), warm.append(t3 - t2), rt_s.append(t4 - t3)
        same += [h.score for h in a] == [h.score for h in b]
    print(f"\nBM25 k=10 ({len(qtexts)} texts): local p50 {pct(loc_s, 50):.3f} ms; 3-shard first search "
          f"(statistics + search) p50 {pct(cold, 50):.3f} ms, repeat (statistics cached) p50 {pct(warm, 50):.3f} ms;"
          f" round trip p50 {pct(rt_s, 50):.3f} ms; overhead of the repeat {pct(warm, 50) - pct(loc_s, 50):.3f} ms; "
          f"top-10 scores identical to local in {same}/{len(qtexts)}")

    # ---- throughput
    def clients(fn, seconds, threads=4):
        stop, count = threading.Event(), [0] * threads

        def run(j):
            i = j
            while not stop.is_set():
                fn(q[i % len(q)])
                count[j] += 1
                i += threads

        ts = [threading.Thread(target=run, args=(j,)) for j in range(threads)]
        t0 = time.perf_counter()
        for th in ts:
            th.start()
        time.sleep(seconds)
        stop.set()
        for th in ts:
            th.join()
        return sum(count) / (time.perf_counter() - t0)

    print(f"\n{loadavg()}")
    print("throughput (dense k=10): 4 client threads one query a call | one 200-query search_batch | "
          f"the CPU bound: {os.cpu_count()} cores / CPU per search")
    cpu_of = {"local": "local Collection", "1 shard(s)": "1-shard search", "2 shard(s)": "2-shard search",
              "3 shard(s)": "3-shard search", "3 shards, lanes=None": "3-shard, lanes=None (classic)"}
    cpu_of["3 shards, nodes=3"] = "3-shard, nodes=3 (actor/shard)"
    for name, target in ([("local", local)] + [(f"{n} shard(s)", shards[n]) for n in (1, 2, 3)]
                         + [("3 shards, lanes=None", sc3n), ("3 shards, nodes=3", sc3a)]):
        qps = clients(lambda v, c=target: c.search(v, k=10), args.seconds)
        t0 = time.perf_counter()
        target.search_batch(q, k=10)
        bq = len(q) / (time.perf_counter() - t0)
        print(f"  {name:17s} {qps:8.0f} q/s | {bq:8.0f} q/s | {os.cpu_count() / cpu[cpu_of[name]] * 1e3:8.0f} q/s")
    for n in (1, 2, 3):
        qps = clients(lambda v, a=fan[:n]: ray.get([x.noop.remote() for x in a]), args.seconds)
        print(f"  trivial fan-out to {n} actor(s) {qps:8.0f} calls/s (the ceiling for {n} shard(s))")
    print(f"{loadavg()}")
    for sc in (shards[1], shards[2], sc3t, sc3a, sc3n):
        sc.close()
    sock_lanes.close()

    # ---- shard kills during commits
    rng = np.random.default_rng(0)
    kc = ShardedCollection.create(os.path.join(tmp, "kills"), base.shape[1], "cosine", shards=3, timeout=5)
    committed, failed_commits, backs = [], 0, []
    for r in range(args.kills):
        rows = rng.choice(len(base), size=300, replace=False)
        new = [f"k{r}-{i}" for i in range(300)]
        kc.add(new, base[rows], texts=[texts[i] for i in rows])
        err = []
        th = threading.Thread(target=lambda: _try(kc.commit, err))
        th.start()
        time.sleep(float(rng.uniform(0, 0.6)))
        victim = int(rng.integers(3))
        pid = ray.get(kc.primary(victim).ping.remote(), timeout=60)["pid"]
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        th.join()
        while True:
            try:
                ray.get(kc.primary(victim).ping.remote(), timeout=1)
                break
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                time.sleep(0.05)
        backs.append(time.monotonic() - t0)
        if err:
            failed_commits += 1
            kc.commit()  # the rows were logged: the retry commits them
        committed += new
    have = set(kc.ids())
    lost = [i for i in committed if i not in have]
    print(f"\nnode kills: {args.kills} SIGKILLs of the process of the node actor holding all 3 shards during commit; "
          f"{failed_commits} commit() calls raised and were retried; committed rows {len(committed)}, "
          f"present {len(committed) - len(lost)}, lost {len(lost)}; rows on shards {len(have)}; "
          f"actor back after p50 {np.median(backs):.2f} s, max {max(backs):.2f} s")
    kc.close()
    sc3.close()
    local.close()
    ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


def _try(fn, err):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - counted
        err.append(exc)


if __name__ == "__main__":
    main()
