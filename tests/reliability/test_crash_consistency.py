"""Every prefix of a write operation, cut at a durability point with unsynced writes dropped or torn, opens
to a committed generation (the previous or the new one) holding exactly its chunks; once the new manifest
is durable, it is the one that opens (nothing committed is lost).

Operations recorded at the storage seam (crashsim.Recorder): create, add + commit (the first one also writes
the quantiser model, the second appends), delete + commit, compact, and for hnsw the graph rewrites of each.
"""
import hashlib
import os

import numpy as np
import pytest

import vecsift
from vecsift.storage import fileops

from crashsim import Model, Recorder, crash_states, materialise, snapshot_dir

DIM = 16


def vecs(seed, n):
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def fingerprint(c):
    """(generation, digest of every live chunk's id, vector and text, top-5 of two dense and one BM25 query)."""
    ids = sorted(c.ids())
    h = hashlib.sha256()
    if ids:
        hits, v = c.get(ids, with_vectors=True)
        for i, hit, row in zip(ids, hits, v):
            h.update(i.encode() + row.tobytes() + (hit.text or "").encode())
    for q in vecs(99, 2):
        h.update(repr([(x.id, round(x.score, 5)) for x in c.search(q, k=5)]).encode())
    h.update(repr([x.id for x in c.search(text="word3 word7", k=5)]).encode())
    return c.manifest.generation, h.hexdigest()


def add(c, start, n):
    c.add([f"r{i}" for i in range(start, start + n)], vecs(start, n),
          texts=[f"word{i % 11} word{i % 7} row {i}" for i in range(start, start + n)])


def operations(kind):
    """(name, setup(path) -> collection or None, op(path, collection) -> collection) of one kind of index."""
    def create(path, _):
        return vecsift.Collection.create(path, dim=DIM, metric="l2", index=kind)

    def add_commit(n0, n):
        def op(path, c):
            add(c, n0, n)
            c.commit()
            return c
        return op

    def delete_commit(path, c):
        c.delete(ids=[f"r{i}" for i in range(0, 60, 3)])
        c.commit()
        return c

    def compact(path, c):
        c.compact()
        return c

    def setup(steps):
        def run(path):
            c = None
            for s in steps:
                c = s(path, c)
            return c
        return run

    base = [create, add_commit(0, 150)]
    return [
        ("create", setup([]), create),
        ("first add+commit", setup([create]), add_commit(0, 150)),
        ("add+commit", setup(base), add_commit(150, 60)),
        ("delete+commit", setup(base), delete_commit),
        ("compact", setup(base + [delete_commit]), compact),
    ]


def state_of(path):
    """Fingerprint of what a read-only open sees, after verify() read every file."""
    try:
        c = vecsift.open(path, readonly=True)
    except FileNotFoundError:
        return None  # no MANIFEST: the collection was never created
    try:
        c.verify()
        return fingerprint(c)
    finally:
        c.close()


@pytest.mark.parametrize("kind", ["bq", "hnsw"])
def test_every_crash_state_opens_to_a_committed_generation(kind, tmp_path):
    checked = 0
    for name, setup, op in operations(kind):
        root = tmp_path / f"{kind}-{name.replace(' ', '_').replace('+', '_')}"
        path = str(root / "c")
        os.makedirs(path)
        c = setup(path)
        before = fingerprint(c) if c is not None else None
        initial = snapshot_dir(path)
        rec = Recorder(path)
        with fileops.use(rec):
            c = op(path, c)
        after = fingerprint(c)
        c.close()
        assert before != after
        assert rec.log and any(o[0] == "fsync_dir" for o in rec.log)
        # the seam saw every write: replaying the whole log gives the directory as it is
        model = Model(initial)
        for o in rec.log:
            model.apply(o)
        real = {k: v for k, v in snapshot_dir(path).items() if k != "LOCK"}
        assert {k: v for k, v in model.crash_state("all").items() if k != "LOCK"} == real
        n = 0
        for cut, variant, files, committed in crash_states(initial, rec.log):
            where = root / f"crash-{n}"
            materialise(files, where)
            got = state_of(str(where))
            allowed = [after] if committed else [before, after]
            assert got in allowed, (f"{kind} {name}: cut {cut}/{len(rec.log)} ({rec.log[cut - 1][:2]}), "
                                    f"variant {variant}: opened {got}, expected one of {allowed}")
            if variant in ("torn", "names") and got is not None:
                # the writer cleans up after the crash and carries on from the state that opened
                w = vecsift.open(str(where))
                assert fingerprint(w) == got
                add(w, 10_000, 5)
                w.commit()
                w.close()
                assert state_of(str(where))[0] == got[0] + 1
            n += 1
        checked += n
    print(f"{kind}: {checked} crash states")
    assert checked > 40
