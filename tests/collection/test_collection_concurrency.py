"""Many searching threads while one thread adds, deletes, commits and compacts."""
import threading

import numpy as np

import vecsift

from collection_util import clustered


def test_searches_during_writes_see_only_committed_live_rows(tmp_path):
    dim, batch, rounds = 16, 400, 12
    base = clustered(batch * rounds, dim, seed=11)
    c = vecsift.Collection.create(tmp_path / "c", dim)
    started = set()  # ids whose commit has begun (a search may see them from then on)
    deleted = set()  # ids whose delete() has returned (no search started later may see them)
    lock = threading.Lock()
    errors, done, seen = [], threading.Event(), [0]

    def writer():
        try:
            for j in range(rounds):
                ids = [f"b{j}-{i}" for i in range(batch)]
                c.add(ids, base[j * batch:(j + 1) * batch], texts=[f"batch{j} row{i}" for i in range(batch)])
                with lock:
                    started.update(ids)
                c.commit()
                if j >= 2:
                    gone = [f"b{j - 2}-{i}" for i in range(0, batch, 3)]
                    c.delete(ids=gone)
                    with lock:
                        deleted.update(gone)
                if j in (5, 9):
                    c.compact()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    def reader(seed):
        rng = np.random.default_rng(seed)
        try:
            while not done.is_set():
                with lock:
                    forbidden = set(deleted)
                pick = rng.integers(0, len(base), 4)
                q = base[pick]
                texts = [f"batch{p // batch} row{p % batch}" for p in pick]
                mode = ["dense", "sparse", "hybrid"][int(rng.integers(0, 3))]
                result = c.search_batch(q, texts, k=int(rng.integers(1, 40)), oversample=int(rng.integers(1, 9)),
                                        mode=mode)
                with lock:
                    committing = set(started)
                for hits in result:
                    got = {h.id for h in hits}
                    seen[0] += len(got)
                    assert got <= committing, "a row was returned before its commit began"
                    assert not got & forbidden, "deleted row returned"
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    w = threading.Thread(target=writer)
    for t in threads:
        t.start()
    w.start()
    w.join(120)
    for t in threads:
        t.join(120)
    assert not errors, errors[0]
    assert seen[0] > 0
    assert len(c) == batch * rounds - len(deleted)
    c.close()
