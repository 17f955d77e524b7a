"""Kill trials: SIGKILL a writer process during add, delete, commit, compact and index rewrites while a reader
process searches; after every kill the collection must reopen to a completed commit, and the reader must
never have seen an error.

The writer keeps a model of what its next commit will hold and appends to an acknowledgement file (outside
the collection) "intent <gen> <digest>" before each commit / compaction and "done <gen> <digest>" once it
returned; the digest covers every live chunk's id, float32 vector and text. After a kill the reopened
collection must be either the last acknowledged generation with its digest, or the next one with the digest
of its intent (the commit returned, the acknowledgement did not happen). Trials alternate a bq and an hnsw
collection (on hnsw every commit rewrites the graph: the "index" phase) and cycle the phase in which the
kill is aimed. The SIGKILL comes from a watchdog thread inside the writer, a random moment (up to about the
phase's length) after the writer entered the target phase: sent from the parent it would mostly land in the
next phase, a pipe round trip being longer than an add. It is a SIGKILL all the same: nothing runs after it.

    python bench/kill_trials.py --trials 100
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter

DIM = 16
PHASES = ("add", "delete", "commit", "compact", "index")
# how long after the phase is announced the kill may land (s): about the phase's own duration
SPREAD = {"add": 0.02, "delete": 0.002, "commit": 0.04, "compact": 0.08, "index": 0.08}

COMMON = textwrap.dedent(f'''
    import hashlib
    import numpy as np
    DIM = {DIM}

    def digest(items):
        """items: {{id: (float32 vector bytes, text)}} -> hex digest (sorted by id)."""
        h = hashlib.sha256()
        for i in sorted(items):
            v, t = items[i]
            h.update(i.encode() + b"\\0" + v + (t or "").encode() + b"\\1")
        return h.hexdigest()

    def contents(c):
        ids = c.ids()
        if not ids:
            return {{}}
        hits, vecs = c.get(ids, with_vectors=True)
        return {{i: (np.ascontiguousarray(v, np.float32).tobytes(), h.text) for i, h, v in zip(ids, hits, vecs)}}
''')

WRITER = COMMON + textwrap.dedent('''
    import random, sys
    import vecsift
    from vecsift.text.bm25 import BM25Index

    import os, signal, threading, time

    path, acks, kind, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    target, delay = sys.argv[5], float(sys.argv[6])
    sys.setswitchinterval(0.0005)  # the watchdog gets the GIL within half a millisecond

    def phase(name):
        """Announces a phase; the first time it is the target, a watchdog SIGKILLs us `delay` s later."""
        global target
        print(f"phase {name}", flush=True)
        if name == target:
            target = None
            threading.Thread(target=lambda: (time.sleep(delay), os.kill(os.getpid(), signal.SIGKILL)),
                             daemon=True).start()

    BM25Index().add(["warm up the numba kernels"])
    c = vecsift.open(path)
    model = contents(c)
    log = open(acks, "a", buffering=1)
    log.write(f"open {c.manifest.generation} {digest(model)}\\n")
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    print("ready", flush=True)
    j = 0
    while True:
        phase("add")
        ids = [f"s{seed}-{j}-{i}" for i in range(400)]
        v = nrng.standard_normal((400, DIM)).astype(np.float32)
        texts = [f"batch {j} row {i} word{i % 7}" for i in range(400)]
        for s in range(0, 400, 50):  # several add() calls: a phase long enough to be hit
            c.add(ids[s:s + 50], v[s:s + 50], texts=texts[s:s + 50])
        model.update({i: (row.tobytes(), t) for i, row, t in zip(ids, v, texts)})
        old = sorted(set(model) - set(ids))
        if old:  # replace one committed chunk
            r = rng.choice(old)
            rv = nrng.standard_normal((1, DIM)).astype(np.float32)
            c.add([r], rv, texts=["replaced"])
            model[r] = (rv[0].tobytes(), "replaced")
        if old and rng.random() < 0.7:
            phase("delete")
            gone = rng.sample(old, min(6, len(old)))
            for g in gone:  # one call each
                c.delete(ids=[g])
                model.pop(g, None)
        gen = c.manifest.generation + 1
        log.write(f"intent {gen} {digest(model)}\\n")
        phase("index" if kind == "hnsw" else "commit")
        c.commit()
        log.write(f"done {c.manifest.generation} {digest(model)}\\n")
        if j % 2 == 1:
            log.write(f"intent {c.manifest.generation + 1} {digest(model)}\\n")
            phase("compact")
            c.compact()
            log.write(f"done {c.manifest.generation} {digest(model)}\\n")
        j += 1
''')

READER = COMMON + textwrap.dedent('''
    import json, os, sys, time, traceback
    import vecsift

    stop, paths = sys.argv[1], sys.argv[2:]
    cols = [vecsift.open(p, readonly=True) for p in paths]
    rng = np.random.default_rng(1)
    n, errors, refreshed = 0, [], 0
    while not os.path.exists(stop):
        for c in cols:
            try:
                refreshed += c.refresh()
                q = rng.standard_normal(DIM).astype(np.float32)
                hits = c.search(q, k=10)
                c.search(q, text="word3 row", k=10)
                if hits:
                    got = c.get([h.id for h in hits[:3]], with_vectors=True)
                n += 1
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}\\n{traceback.format_exc()[-800:]}")
        time.sleep(0.002)
    print(json.dumps({"searches": n, "refreshed": refreshed, "errors": errors}))
''')


def read_acks(path):
    """{gen: digest} of completed commits and of intents, and the last completed generation."""
    done, intent, last = {}, {}, -1
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 3:
                continue  # a line the kill cut short
            what, gen, dig = parts[0], int(parts[1]), parts[2]
            if what in ("done", "open"):
                done[gen] = dig
                last = max(last, gen)
            else:
                intent[gen] = dig
    return done, intent, last


def check_reopen(path, acks):
    """Opens the collection read-only, verifies every file and compares it with the acknowledgements.
    Returns (ok, generation, how) where how is "acked" or "in-flight" (the unacknowledged commit)."""
    import vecsift

    env = {}
    exec(COMMON, env)
    done, intent, last = read_acks(acks)
    c = vecsift.open(path, readonly=True)
    try:
        c.verify()
        gen, dig = c.manifest.generation, env["digest"](env["contents"](c))
    finally:
        c.close()
    if gen == last and done.get(gen) == dig:
        return True, gen, "acked"
    if gen == last + 1 and intent.get(gen) == dig:
        return True, gen, "in-flight"
    return False, gen, f"last acknowledged {last}, opened {gen} with digest {'=' if done.get(gen) == dig else '!='}"


def create(path, kind):
    import vecsift

    params = {"m": 8, "ef_construction": 48} if kind == "hnsw" else {}
    vecsift.Collection.create(path, dim=DIM, metric="l2", index=kind, **params).close()


def run(trials: int, root: str, seed: int = 0, verbose: bool = False) -> dict:
    rng = random.Random(seed)
    paths = {k: os.path.join(root, k) for k in ("bq", "hnsw")}
    acks = {k: os.path.join(root, f"acks-{k}.txt") for k in paths}
    for k, p in paths.items():
        create(p, k)
        open(acks[k], "w").write("open 0 " + hashlib.sha256().hexdigest() + "\n")
    stop = os.path.join(root, "STOP")
    reader = subprocess.Popen([sys.executable, "-c", READER, stop, *paths.values()], stdout=subprocess.PIPE,
                              text=True)
    results, phases, failures = Counter(), Counter(), []
    try:
        for t in range(trials):
            target = PHASES[t % len(PHASES)]
            kind = "hnsw" if target == "index" else ("bq", "hnsw")[(t // len(PHASES)) % 2]
            if kind == "hnsw" and target == "commit":
                target = "index"  # an hnsw commit is the graph rewrite
            delay = rng.uniform(0, SPREAD[target])
            w = subprocess.Popen([sys.executable, "-c", WRITER, paths[kind], acks[kind], kind, str(seed * 1000 + t),
                                  target, repr(delay)], stdout=subprocess.PIPE, text=True)
            try:  # the writer's watchdog thread SIGKILLs it inside the target phase
                rest, _ = w.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                w.kill()
                rest, _ = w.communicate()
            last_phase = None
            if w.returncode != -signal.SIGKILL:
                failures.append({"trial": t, "kind": kind, "why": f"writer exited with {w.returncode}"})
            for line in rest.splitlines():
                if line.startswith("phase "):
                    last_phase = line.split()[1]
            phases[kind, last_phase] += 1
            ok, gen, how = check_reopen(paths[kind], acks[kind])
            results[how if ok else "LOST"] += 1
            if not ok:
                failures.append({"trial": t, "kind": kind, "phase": last_phase, "gen": gen, "why": how})
            if verbose:
                print(f"trial {t:3d} {kind:<4} killed in {last_phase:<8} -> generation {gen} ({how})", flush=True)
    finally:
        open(stop, "w").close()
        out, _ = reader.communicate(timeout=120)
    rd = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"searches": 0, "errors": ["no output"]}
    return {"results": results, "phases": phases, "failures": failures, "reader": rd}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vecsift-kills-") as root:
        out = run(args.trials, root, args.seed, args.verbose)
    rd = out["reader"]
    print(f"{args.trials} SIGKILLs in {time.perf_counter() - t0:.0f} s: reopened to the acknowledged commit "
          f"{out['results']['acked']}, to the in-flight commit {out['results']['in-flight']}, "
          f"lost or foreign {out['results']['LOST']}")
    print("killed in phase: " + ", ".join(f"{k}/{p}: {n}" for (k, p), n in sorted(out["phases"].items(),
                                                                              key=str)))
    print(f"reader: {rd['searches']} search rounds, {rd.get('refreshed', 0)} refreshes, {len(rd['errors'])} errors")
    for f in out["failures"]:
        print("LOST", json.dumps(f))
    for e in rd["errors"][:5]:
        print("READER ERROR", e)
    return 1 if out["failures"] or rd["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
