"""Sharded collection on Ray: scatter/gather overhead, throughput with 1-3 shards, shard kills.

    flock /tmp/vecsift-bench.lock python bench/bench_ray.py [--rows 30000] [--queries 200] [--kills 20]

Data: the PyPI MiniLM set (384-d, real summaries as texts) from /work/shared/data/pypi-minilm.
One Ray node (ray.init, num_cpus=2) on this 2-core machine. Measured in one run, interleaved
per query (local Collection, sharded search, trivial actor call), medians:

  overhead   = p50(3-shard search) - p50(the same search on one local Collection of all rows)
  round trip = p50(ray.get(actor.noop.remote())) on an actor made like the shard actors
  bar        : overhead <= 1.5 x round trip

then throughput (4 client threads, and one 200-query batch) with 1, 2, 3 shards, then
`--kills` rounds of add / commit while a random shard's process is SIGKILLed at a random
moment, counting committed rows missing afterwards.
"""
from __future__ import annotations

import argparse
import json
import os
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
    base, texts, q, qtexts = load(args.rows, args.queries)
    ids = [f"p{i}" for i in range(len(base))]
    print(f"data: {len(base)} x {base.shape[1]} MiniLM rows, {len(q)} queries; ray {ray.__version__}")

    t = time.perf_counter()
    local = vecsift.Collection.create(os.path.join(tmp, "local"), base.shape[1], "cosine")
    local.add(ids, base, texts=texts)
    local.commit()
    print(f"local collection built in {time.perf_counter() - t:.1f} s")

    @ray.remote(num_cpus=0)
    class Noop:
        def noop(self):
            return None

    noop = Noop.remote()
    ray.get(noop.noop.remote())
    shards = {}
    for n in (1, 2, 3):
        t = time.perf_counter()
        sc = ShardedCollection.create(os.path.join(tmp, f"sc{n}"), base.shape[1], "cosine", shards=n)
        sc.add(ids, base, texts=texts)
        sc.commit()
        shards[n] = sc
        print(f"{n}-shard collection built in {time.perf_counter() - t:.1f} s")
    sc3 = shards[3]

    # ---- overhead, interleaved per query
    for qi in range(20):  # warm-up
        local.search(q[qi], k=10), sc3.search(q[qi], k=10), ray.get(noop.noop.remote())
    loc, shd, rt, ok = [], [], [], 0
    for rep in range(3):
        for i in range(len(q)):
            t0 = time.perf_counter()
            a = local.search(q[i], k=10)
            t1 = time.perf_counter()
            b = sc3.search(q[i], k=10)
            t2 = time.perf_counter()
            ray.get(noop.noop.remote())
            t3 = time.perf_counter()
            loc.append(t1 - t0)
            shd.append(t2 - t1)
            rt.append(t3 - t2)
            ok += [h.id for h in a] == [h.id for h in b]
    over = pct(shd, 50) - pct(loc, 50)
    print(f"\ndense k=10, one query a call ({len(loc)} calls each, interleaved):")
    print(f"  local Collection    p50 {pct(loc, 50):.3f} ms  p99 {pct(loc, 99):.3f} ms")
    print(f"  3-shard search      p50 {pct(shd, 50):.3f} ms  p99 {pct(shd, 99):.3f} ms")
    print(f"  trivial actor call  p50 {pct(rt, 50):.3f} ms  p99 {pct(rt, 99):.3f} ms")
    print(f"  overhead p50 {over:.3f} ms = {over / pct(rt, 50):.2f} x the round trip (bar <= 1.5); "
          f"same top-10 as local in {ok}/{len(loc)}")

    # sparse: the first search of a text gathers statistics (two rounds), a repeat is cached (one)
    loc_s, cold, warm, rt_s = [], [], [], []
    for i in range(len(qtexts)):
        t0 = time.perf_counter()
        local.search(text=qtexts[i], k=10)
        t1 = time.perf_counter()
        sc3.search(text=qtexts[i], k=10)
        t2 = time.perf_counter()
        sc3.search(text=qtexts[i], k=10)
        t3 = time.perf_counter()
        ray.get(noop.noop.remote())
        t4 = time.perf_counter()
        loc_s.append(t1 - t0), cold.append(t2 - t1), warm.append(t3 - t2), rt_s.append(t4 - t3)
    print(f"\nBM25 k=10 ({len(qtexts)} texts): local p50 {pct(loc_s, 50):.3f} ms; 3-shard first search "
          f"(statistics + search) p50 {pct(cold, 50):.3f} ms, repeat (statistics cached) p50 {pct(warm, 50):.3f} ms;"
          f" round trip p50 {pct(rt_s, 50):.3f} ms; overhead of the repeat {pct(warm, 50) - pct(loc_s, 50):.3f} ms")

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

    print("\nthroughput (dense k=10): 4 client threads one query a call | one 200-query search_batch")
    for name, target in [("local", local)] + [(f"{n} shard(s)", shards[n]) for n in (1, 2, 3)]:
        qps = clients(lambda v, c=target: c.search(v, k=10), args.seconds)
        t0 = time.perf_counter()
        target.search_batch(q, k=10)
        bq = len(q) / (time.perf_counter() - t0)
        print(f"  {name:12s} {qps:8.0f} q/s | {bq:8.0f} q/s")
    for n in (1, 2):
        shards[n].close()

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
    print(f"\nshard kills: {args.kills} SIGKILLs of a random shard process during commit; "
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
