"""SIGKILL a writer at random moments; every reopen holds exactly some completed commit.

A child process adds, replaces, deletes, commits (and now and then compacts)
in a loop, printing the number of each commit once it returns. The parent
kills it at a random moment, 20 times, reopening in between: the collection
must open, verify, and hold exactly the chunks of commit N or N+1, where N is
the last commit the child reported (N+1: the commit returned, the print did not
happen). Bounded: each child lives well under a second after it is ready.
"""
import os
import random
import signal
import subprocess
import sys
import textwrap

import numpy as np

import vecsift

DIM, M = 24, 150

CHILD = textwrap.dedent(f"""
    import sys
    import numpy as np
    import vecsift
    DIM, M = {DIM}, {M}

    def vecs(j):
        return np.random.default_rng(j).standard_normal((M, DIM)).astype(np.float32)

    from vecsift.text.bm25 import BM25Index
    BM25Index().add(["warm up the numba kernels"])  # compile/load them before the kills start
    c = vecsift.open(sys.argv[1])
    ids = c.ids()
    j = 1 + max([int(i[1:].split("-")[0]) for i in ids], default=-1)
    print("ready", flush=True)
    while True:
        c.add([f"b{{j}}-{{i}}" for i in range(M)], vecs(j), texts=[f"batch {{j}} row {{i}}" for i in range(M)])
        if j >= 1:
            c.add([f"b{{j - 1}}-0"], -vecs(j - 1)[:1], texts=["replaced"])
        if j >= 2:
            c.delete(ids=[f"b{{j - 2}}-1"])
        c.commit()
        print(f"c {{j + 1}}", flush=True)
        if j % 4 == 3:
            c.compact()
        j += 1
""")


def vecs(j):
    return np.random.default_rng(j).standard_normal((M, DIM)).astype(np.float32)


def expected_ids(commits):
    ids = {f"b{j}-{i}" for j in range(commits) for i in range(M)}
    return ids - {f"b{j - 2}-1" for j in range(2, commits)}


def check(path, reported):
    c = vecsift.open(path)
    try:
        got = set(c.ids())
        assert len(got) == len(c)
        matches = [n for n in (reported, reported + 1) if got == expected_ids(n)]
        assert matches, f"state after kill is no completed commit (last reported {reported}, {len(got)} chunks)"
        n = matches[0]
        c.verify()
        if n >= 2:  # the replaced chunk carries its new vector, the others their own
            hit = c.search(-vecs(n - 2)[0], k=1)[0]
            assert hit.id == f"b{n - 2}-0" and hit.text == "replaced" and abs(hit.score - 1) < 1e-5
        if n >= 1:
            hit = c.search(vecs(n - 1)[5], k=1)[0]
            assert hit.id == f"b{n - 1}-5" and abs(hit.score - 1) < 1e-5
            # BM25 holds the same chunks as the vectors: the newest batch is found by its words
            found = {h.id for h in c.search(text=f"batch {n - 1} row 7", k=M)}
            assert f"b{n - 1}-7" in found and found <= got
        return n
    finally:
        c.close()


def test_sigkill_at_random_moments(tmp_path):
    path = str(tmp_path / "crash")
    vecsift.Collection.create(path, DIM).close()
    rng = random.Random(20261202)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    committed = 0
    for _ in range(20):
        child = subprocess.Popen([sys.executable, "-c", CHILD, path], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert child.stdout.readline().strip() == "ready", child.stderr.read()
            try:
                child.wait(timeout=rng.uniform(0.0, 0.35))
            except subprocess.TimeoutExpired:
                pass
            child.send_signal(signal.SIGKILL)
            out, err = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert child.returncode == -signal.SIGKILL, err  # it was still running: killed mid-loop
        reported = max([int(line.split()[1]) for line in out.splitlines() if line.startswith("c ")],
                       default=committed)
        assert reported >= committed
        n = check(path, reported)
        committed = n
    assert committed >= 5  # the children made progress between kills
