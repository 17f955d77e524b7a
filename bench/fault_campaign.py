"""Fault campaign: damage one file of a collection (flip a byte, truncate, append), then open + search + get
in a child process with a timeout, and classify what happened.

    identical   the same results as the undamaged collection (the damage was in bytes nobody read,
                or was cut off as uncommitted)
    refused     CorruptIndexError, or another clear vecsift / ValueError / FileNotFoundError
    unclear     some other Python exception (a bug: the error does not say what is wrong)
    different   results differ from the undamaged collection's, silently (a bug)
    crash       the child died (a signal: segfault, abort) (a bug)
    hang        no answer within the timeout (a bug)

Collections: small bq (quantised codes) and hnsw collections with BM25 texts, tenants and a filter field,
three commits and a delete, so every file kind is present (vectors + block sums, codes + model or graph,
segments, filters, BM25, manifest). Every file of the directory is a target, chosen uniformly, then the
damage and its offset (a quarter of the trials target the float32 rows); each trial opens read-only or for writing (half each). The child is one worker
process serving many trials, restarted after a crash or hang.

    flock /tmp/vecsift-bench.lock python bench/fault_campaign.py --trials 400
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter

import numpy as np

N, DIM = 6000, 32  # > 2 x 2048 rows: one tenant's searches take the index path (Hamming scan / graph walk)
OUTCOMES = ("identical", "refused", "unclear", "different", "crash", "hang")
BAD = ("unclear", "different", "crash", "hang")

WORKER = textwrap.dedent(r'''
    import json, sys, traceback
    import numpy as np
    import vecsift
    from vecsift.errors import VecsiftError

    def workload(path, writable):
        c = vecsift.open(path, readonly=not writable)
        try:
            rng = np.random.default_rng(7)
            qs = rng.standard_normal((4, c.dim)).astype(np.float32)
            out = []
            for q in qs:  # index path (one tenant: 2940 rows; ef=16 makes hnsw walk), exact path (where filter)
                out.append([(h.id, repr(h.score)) for h in c.search(q, k=10, tenant="t0", ef=16)])
                out.append([(h.id, repr(h.score)) for h in c.search(q, k=5, tenant="t1", where={"lang": "en"})])
            out.append([(h.id, repr(h.score)) for h in c.search(text="alpha gamma", k=10, tenant="t0")])
            out.append([(h.id, repr(h.score)) for h in c.search(qs[0], text="beta", k=10, tenant="t1")])
            hits, vecs = c.get([f"d{i}" for i in range(0, 6000, 97)], tenant="t0", with_vectors=True)
            out.append([None if h is None else (h.id, h.text) for h in hits])
            out.append(np.nan_to_num(vecs, nan=-7.0).round(6).tolist())
            out.append(len(c))
            return out
        finally:
            c.close()

    for line in sys.stdin:
        req = json.loads(line)
        try:
            res = {"status": "ok", "result": workload(req["path"], req["writable"])}
        except (VecsiftError, ValueError, FileNotFoundError) as exc:
            res = {"status": "refused", "type": type(exc).__name__, "msg": str(exc)[:300]}
        except Exception as exc:
            res = {"status": "unclear", "type": type(exc).__name__, "msg": str(exc)[:300],
                   "tb": traceback.format_exc()[-1500:]}
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()
''')


def build(root) -> dict:
    """The two undamaged collections: {"bq": path, "hnsw": path}."""
    import vecsift

    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, DIM)).astype(np.float32)
    words = ["alpha", "beta", "gamma", "delta", "omega"]
    out = {}
    for kind, params in (("bq", {}), ("hnsw", {"m": 8, "ef_construction": 64})):
        path = os.path.join(root, kind)
        c = vecsift.Collection.create(path, dim=DIM, metric="cosine", index=kind, filter_fields=["lang"], **params)
        for s in range(0, N, N // 3):  # three commits: three segments, a grown row file
            ids = range(s, s + N // 3)
            c.add([f"d{i}" for i in ids], x[s:s + N // 3], texts=[f"{words[i % 5]} {words[i % 3]} {i}" for i in ids],
                  tenant=[f"t{i % 2}" for i in ids], metadata=[{"lang": "en" if i % 3 else "de"} for i in ids])
            c.commit()
        c.delete(ids=[f"d{i}" for i in range(0, N, 50)])
        c.commit()
        c.close()
        out[kind] = path
    return out


class Worker:
    """One child process running the workload; restarted after it dies or hangs."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.proc = None

    def _start(self):
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def run(self, path: str, writable: bool) -> dict:
        import selectors

        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(json.dumps({"path": path, "writable": writable}) + "\n")
        self.proc.stdin.flush()
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(self.timeout)
        sel.close()
        if not ready:
            self.stop()
            return {"status": "hang"}
        line = self.proc.stdout.readline()
        if not line:
            rc = self.proc.wait()
            self.proc = None
            return {"status": "crash", "rc": rc}
        return json.loads(line)

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def damage(path: str, rng: random.Random, vectors_share: float = 0.25) -> dict:
    """Damages one file of the collection directory `path` in place; returns what was done."""
    names = sorted(n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n)))
    vectors = [n for n in names if n.endswith(".f32")]
    # the float32 rows are the file a read-only open checks least: give them a fixed share of the trials
    name = rng.choice(vectors if vectors and rng.random() < vectors_share else names)
    p = os.path.join(path, name)
    size = os.path.getsize(p)
    how = rng.choice(("flip", "truncate", "append"))
    if how == "flip" and size:
        off = rng.randrange(size)
        with open(p, "r+b") as f:
            f.seek(off)
            b = f.read(1)[0]
            f.seek(off)
            f.write(bytes([b ^ rng.randrange(1, 256)]))
        return {"file": name, "how": how, "offset": off, "size": size}
    if how == "truncate" and size:
        to = rng.randrange(size)
        os.truncate(p, to)
        return {"file": name, "how": how, "to": to, "size": size}
    extra = rng.randrange(1, 4097)
    with open(p, "ab") as f:
        f.write(rng.randbytes(extra))
    return {"file": name, "how": "append", "bytes": extra, "size": size}


def campaign(trials: int, seed: int = 0, timeout: float = 30.0, root=None, log=None) -> dict:
    """Runs `trials` damage trials; returns {"counts": Counter of outcomes, "bad": [trial records]}."""
    own = root is None
    root = root or tempfile.mkdtemp(prefix="vecsift-faults-")
    try:
        clean = build(os.path.join(root, "clean"))
        worker = Worker(timeout)
        baseline = {}
        for kind, path in clean.items():
            for writable in (False, True):
                work = os.path.join(root, "base")
                shutil.copytree(path, work)
                res = worker.run(work, writable)
                shutil.rmtree(work)
                assert res["status"] == "ok", f"undamaged {kind} collection fails: {res}"
                baseline[kind, writable] = res["result"]
        rng = random.Random(seed)
        counts, by_file, bad = Counter(), Counter(), []
        for t in range(trials):
            kind = rng.choice(sorted(clean))
            writable = rng.random() < 0.5
            work = os.path.join(root, f"trial-{t}")
            shutil.copytree(clean[kind], work)
            what = damage(work, rng)
            res = worker.run(work, writable)
            status = res["status"]
            if status == "ok":
                status = "identical" if res["result"] == baseline[kind, writable] else "different"
            counts[status] += 1
            stem = what["file"].split("-")[0].split(".")[0]
            by_file[stem, status] += 1
            rec = {"trial": t, "kind": kind, "writable": writable, **what, "outcome": status,
                   **{k: res[k] for k in ("type", "msg", "tb", "rc") if k in res}}
            if status in BAD:
                bad.append(rec)
            if log is not None:
                log.write(json.dumps(rec) + "\n")
            shutil.rmtree(work)
        worker.stop()
        return {"counts": counts, "by_file": by_file, "bad": bad}
    finally:
        if own:
            shutil.rmtree(root, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--log", help="write one JSON line per trial here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    log = open(args.log, "w") if args.log else None
    try:
        out = campaign(args.trials, args.seed, args.timeout, log=log)
    finally:
        if log:
            log.close()
    counts = out["counts"]
    print(f"{args.trials} trials (seed {args.seed}) in {time.perf_counter() - t0:.0f} s: "
          + ", ".join(f"{o} {counts[o]}" for o in OUTCOMES))
    stems = sorted({s for s, _ in out["by_file"]})
    print(f"{'file':<10}" + "".join(f"{o:>10}" for o in OUTCOMES))
    for s in stems:
        print(f"{s:<10}" + "".join(f"{out['by_file'][s, o]:>10}" for o in OUTCOMES))
    for rec in out["bad"]:
        print("BAD", json.dumps(rec))
    return 1 if out["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
