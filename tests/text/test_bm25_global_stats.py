"""BM25Index.term_statistics + search(statistics=dict): disjoint indexes scoring as one."""
import numpy as np
import pytest

from vecsift import BM25Index


def _corpus(n, seed=0):
    rng = np.random.default_rng(seed)
    words = [f"t{i}" for i in range(150)]
    p = 1.0 / np.arange(1, 151)
    p /= p.sum()
    return [" ".join(rng.choice(words, size=int(rng.integers(2, 25)), p=p)) for _ in range(n)]


def _summed(stats):
    out = {"n": 0, "total_len": 0, "df": {}}
    for st in stats:
        out["n"] += st["n"]
        out["total_len"] += st["total_len"]
        for w, d in st["df"].items():
            out["df"][w] = out["df"].get(w, 0) + d
    return out


@pytest.mark.parametrize("prune_min", [1024, 4])  # 4: the early-termination path too
def test_parts_with_summed_statistics_score_as_the_whole(monkeypatch, prune_min):
    monkeypatch.setattr(BM25Index, "_prune_min", prune_min)
    texts = _corpus(2000)
    whole = BM25Index()
    whole.add(texts)
    whole.delete([5, 17, 600])
    parts, rows = [BM25Index() for _ in range(3)], [[], [], []]
    for i, t in enumerate(texts):
        rows[i % 3].append(i)
    for p, r in zip(parts, rows):
        p.add([texts[i] for i in r], ids=r)  # same row numbers as the whole: easy to compare
    for p in parts:
        p.delete([5, 17, 600])
    allow = np.arange(0, 2000, 2)  # an allow set (a tenant, say): statistics are its rows'
    for q in ["t1 t7 t40", "t3 t3 t99 unknownword", "t0", "t149 t148"]:
        for a in (None, allow):
            stats = _summed([p.term_statistics(q, allow=a) for p in parts])
            want = whole.term_statistics(q, allow=a)
            assert stats == want
            r, s = whole.search(q, k=10, allow=a, statistics="allowed")
            merged = []
            for p in parts:
                pr, ps = p.search(q, k=10, allow=a, statistics=stats)
                merged += list(zip(ps.tolist(), pr.tolist()))
            merged.sort(key=lambda x: (-x[0], x[1]))
            assert [x[1] for x in merged[:10]] == r.tolist()
            assert np.array_equal(np.array([x[0] for x in merged[:10]], np.float32), s)  # bit for bit


def test_term_statistics_values():
    idx = BM25Index()
    idx.add(["a b b", "b c", "d"])
    st = idx.term_statistics("b b zz a")
    assert st == {"n": 3, "total_len": 6, "df": {"b": 2, "zz": 0, "a": 1}}
    assert idx.term_statistics("b", allow=[2]) == {"n": 1, "total_len": 1, "df": {"b": 0}}


def test_bad_statistics_are_refused():
    idx = BM25Index()
    idx.add(["a b", "b c"])
    with pytest.raises(ValueError, match="statistics"):
        idx.search("a", statistics={"n": 2})
    with pytest.raises(ValueError, match="df"):
        idx.search("a", statistics={"n": 2, "total_len": 4, "df": {"a": -1}})
    with pytest.raises(ValueError, match="statistics"):
        idx.search("a", statistics="global")
    with pytest.raises(TypeError):
        idx.term_statistics(["a"])
