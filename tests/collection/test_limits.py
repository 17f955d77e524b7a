"""Hostile queries: bounds on one search (collection/limits.py, docs/limits.md) and deadline=."""
import numpy as np
import pytest

import vecsift
from vecsift import DeadlineExceeded, LimitError, Limits


@pytest.fixture
def coll(tmp_path):
    c = vecsift.Collection.create(tmp_path / "c", dim=8, index="bq", filter_fields=["year"])
    rng = np.random.default_rng(0)
    n = 300
    c.add([f"id{i}" for i in range(n)], rng.standard_normal((n, 8)).astype(np.float32),
          texts=[f"alpha word{i % 9}" for i in range(n)], metadata=[{"year": 2000 + i % 20} for i in range(n)])
    c.commit()
    yield c
    c.close()


Q = np.ones(8, np.float32)


def test_defaults_are_generous_and_errors_name_the_bound(coll):
    assert len(coll.search(Q, k=300)) == 300  # k up to the defaults is fine, and past the rows too
    assert isinstance(coll.limits, Limits) and coll.limits.max_k == 10_000
    with pytest.raises(LimitError, match=r"k = 10001 is over 10000.*max_k") as exc:
        coll.search(Q, k=10_001)
    assert isinstance(exc.value, ValueError) and exc.value.limit == 10_000
    with pytest.raises(LimitError, match="oversample"):
        coll.search(Q, oversample=5000)
    with pytest.raises(LimitError, match="ef"):
        coll.search(Q, ef=10**6)
    with pytest.raises(LimitError, match="candidates"):
        coll.search(Q, text="alpha", candidates=2_000_000)
    with pytest.raises(LimitError, match="text length"):
        coll.search(text="alpha " * 20_000)
    with pytest.raises(LimitError, match="text length"):
        coll.search_batch(texts=["alpha", "x" * 100_001])
    with pytest.raises(LimitError, match="queries x candidates"):
        coll.search_batch(np.ones((4000, 8), np.float32), k=10_000)
    with pytest.raises(LimitError, match="where size"):
        coll.search(Q, where={"year": {"$in": list(range(100_001))}})
    assert len(coll.search(Q, where=_nested(10), k=3)) == 3
    with pytest.raises(LimitError, match="nesting depth"):
        coll.search(Q, where=_nested(40))
    with pytest.raises(LimitError, match="k"):
        coll.search_sparse(["alpha"], k=10**9)


def _nested(depth):
    w = {"year": 2001}
    for _ in range(depth):
        w = {"$and": [w]}
    return w


def test_limits_per_collection_persist_and_readers_can_set_their_own(tmp_path):
    path = tmp_path / "c"
    c = vecsift.Collection.create(path, dim=4, limits={"max_k": 5, "max_where_depth": 100})
    c.add(["a", "b"], np.eye(2, 4, dtype=np.float32))
    c.commit()
    with pytest.raises(LimitError, match="max_k"):
        c.search(np.ones(4), k=6)
    assert len(c.search(np.ones(4), k=5)) == 2
    c.search(np.ones(4), where=None, k=1)
    c.set_limits(max_k=7)  # durable at the next commit
    c.commit()
    c.close()
    r = vecsift.open(path, readonly=True)
    assert r.limits.max_k == 7 and r.limits.max_where_depth == 100 and r.limits.max_batch == Limits().max_batch
    r.set_limits(Limits(max_batch=1))  # this reader only
    with pytest.raises(LimitError, match="batch size"):
        r.search_batch(np.ones((2, 4), np.float32), k=1)
    r.close()
    assert vecsift.open(path, readonly=True).limits.max_batch == Limits().max_batch


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="max_k"):
        Limits(max_k=0)
    with pytest.raises(ValueError, match="at most 256"):
        Limits(max_where_depth=1000)
    with pytest.raises(ValueError, match="unknown limits"):
        Limits.from_dict({"max_kk": 3})


def test_deadline(coll):
    expect = coll.search_batch(np.ones((600, 8), np.float32), k=5)
    # generous: same results, run in chunks of DEADLINE_CHUNK queries
    got = coll.search_batch(np.ones((600, 8), np.float32), k=5, deadline=60)
    assert [[h.id for h in hits] for hits in got] == [[h.id for h in hits] for hits in expect]
    rows, scores = coll.search_rows(np.ones((600, 8), np.float32), k=5, deadline=60)
    assert rows.shape == (600, 5)
    with pytest.raises(DeadlineExceeded, match="deadline") as exc:
        coll.search(Q, text="alpha", k=5, deadline=1e-9)  # passed before the first check
    assert isinstance(exc.value, TimeoutError)
    with pytest.raises(DeadlineExceeded):
        coll.search_rows(np.ones((600, 8), np.float32), k=5, deadline=1e-9)
    for bad in (0, -1, float("nan"), float("inf"), "1", True):
        with pytest.raises(ValueError, match="deadline"):
            coll.search(Q, deadline=bad)


def test_deadline_is_checked_between_chunks(coll, monkeypatch):
    from vecsift.collection import limits

    clock = iter(range(10**6))  # every check is one "second" later
    monkeypatch.setattr(limits.time, "monotonic", lambda: next(clock))
    with pytest.raises(DeadlineExceeded, match=r"queries 512\.\."):
        coll.search_batch(np.ones((800, 8), np.float32), k=5, deadline=4.5)


def test_index_result_size_is_capped():
    ix = vecsift.HNSWIndex(4)
    ix.add(np.eye(4, dtype=np.float32))
    with pytest.raises(LimitError, match="queries x k"):
        ix.search(np.ones((1000, 4), np.float32), k=10**6)
    assert ix.search(np.ones((1, 4), np.float32), k=100)[0].shape == (1, 100)
