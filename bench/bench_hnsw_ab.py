"""The same saved HNSW graph searched by two builds of vecsift (e.g. main vs this branch), interleaved.

    flock /tmp/vecsift-bench.lock python bench/bench_hnsw_ab.py \
        --variant main=/work/venv/bin/python --variant perf=/work/venvs/perf/bin/python

Builds (once, with the running interpreter's vecsift, kept in --cache) a float32 HNSWIndex over GloVe
6B 50-d (rows L2-normalised, 1,000 queries drawn with seed 0 and removed; m 16, ef_construction 200),
saves it (format version 1, which every build reads), then for each round and each variant starts the
variant's interpreter, loads the file into memory and times one query per call on one thread at each
ef: queries per CPU second of the process (one thread: its work, without the time spent waiting for a
core on a shared machine), median over --rounds, the order alternating (A B, B A, ...). Both variants answer from the same graph, so recall is identical
and the ratio is the search code alone. Used for issue 11's "on GloVe no slower than today".
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

CHILD = r"""
import json, sys, time
import numpy as np
import vecsift
path, qpath, efs = sys.argv[1], sys.argv[2], [int(e) for e in sys.argv[3].split(",")]
ix = vecsift.HNSWIndex.load(path)
qs = np.load(qpath)
out = {}
for ef in efs:
    for q in qs[:100]:
        ix.search(q, 10, ef=ef, threads=1)
    t0 = time.process_time()  # CPU time: one thread, so the work alone, not the waits for a core
    for q in qs:
        ix.search(q, 10, ef=ef, threads=1)
    out[ef] = len(qs) / (time.process_time() - t0)
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", action="append", required=True, help="NAME=PYTHON (interpreter to run)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--efs", default="20,40,80,160")
    ap.add_argument("--cache", default="/tmp/vecsift-ab")
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(__file__))
    import vecsift
    from bench_hnsw import load_glove

    os.makedirs(a.cache, exist_ok=True)
    path, qpath = os.path.join(a.cache, "glove-f32.idx"), os.path.join(a.cache, "glove-queries.npy")
    if not os.path.exists(path):
        base, qs = load_glove()
        ix = vecsift.HNSWIndex(base.shape[1], "cosine", m=16, ef_construction=200)
        ix.add(base, threads=2)
        ix.save(path)
        np.save(qpath, qs)
    variants = [v.split("=", 1) for v in a.variant]
    qps = {name: {} for name, _ in variants}
    for r in range(a.rounds):
        for name, exe in (variants if r % 2 == 0 else variants[::-1]):  # A B, B A, ...
            res = json.loads(subprocess.run([exe, "-c", CHILD, path, qpath, a.efs], check=True,
                                            capture_output=True, text=True).stdout)
            for ef, v in res.items():
                qps[name].setdefault(int(ef), []).append(v)
            print(f"round {r} {name}: " + "  ".join(f"ef {ef} {v:7.0f}" for ef, v in res.items()), flush=True)
    first = variants[0][0]
    print(f"\nmedian single-thread queries per CPU second over {a.rounds} rounds (GloVe 399k x 50, float32 graph):")
    for name, _ in variants:
        line = f"  {name:8s}" + "".join(f"  ef {ef:4d} {np.median(v):7.0f}" for ef, v in sorted(qps[name].items()))
        if name != first:
            line += "   ratio to " + first + ": " + " ".join(
                f"{np.median(v) / np.median(qps[first][ef]):.2f}" for ef, v in sorted(qps[name].items()))
        print(line)


if __name__ == "__main__":
    main()
