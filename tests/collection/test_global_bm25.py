"""Collection.bm25_statistics / search_sparse(statistics=...): the hooks a sharded collection uses."""
import numpy as np
import pytest

import vecsift


def _make(path, ids, texts, tenants):
    c = vecsift.Collection.create(path, 4, "cosine")
    c.add(ids, np.random.default_rng(len(ids)).standard_normal((len(ids), 4)).astype(np.float32), texts=texts,
          tenant=tenants)
    c.commit()
    return c


def test_two_halves_with_summed_statistics_equal_the_whole(tmp_path):
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(60)]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(2, 15)))) for _ in range(400)]
    ids = [f"r{i}" for i in range(400)]
    ten = ["a" if i % 3 else "b" for i in range(400)]
    whole = _make(tmp_path / "whole", ids, texts, ten)
    halves = [_make(tmp_path / f"h{j}", ids[j::2], texts[j::2], ten[j::2]) for j in range(2)]
    for q in ["w1 w2", "w5 w5 w59", "w30"]:
        for tenant in ("a", "b"):
            per = [h.bm25_statistics([q], tenant=tenant)[0] for h in halves]
            total = {"n": sum(p["n"] for p in per), "total_len": sum(p["total_len"] for p in per),
                     "df": {w: sum(p["df"][w] for p in per) for w in per[0]["df"]}}
            assert total == whole.bm25_statistics([q], tenant=tenant)[0]
            hits = [h for half in halves for h in half.search_sparse([q], [total], k=10, tenant=tenant)[0]]
            hits.sort(key=lambda h: -h.score)
            want = whole.search(text=q, k=10, tenant=tenant)
            assert [h.score for h in hits[:10]] == [h.score for h in want]
            assert all(h.tenant == tenant for h in hits)
    # without statistics: the collection's own, as search(mode="sparse")
    assert [(h.id, h.score) for h in whole.search_sparse(["w1"], tenant="a")[0]] == \
           [(h.id, h.score) for h in whole.search(text="w1", tenant="a")]


def test_hooks_keep_the_security_rules(tmp_path):
    c = _make(tmp_path / "c", ["x", "y"], ["hello world", "secret word"], ["t1", "t2"])
    with pytest.raises(ValueError, match="tenant"):
        c.bm25_statistics(["hello"])
    with pytest.raises(ValueError, match="tenant"):
        c.search_sparse(["hello"], [{"n": 1, "total_len": 2, "df": {"hello": 1}}])
    assert c.bm25_statistics(["secret"], tenant="t1")[0] == {"n": 1, "total_len": 2, "df": {"secret": 0}}
    assert c.search_sparse(["secret"], [{"n": 9, "total_len": 9, "df": {"secret": 5}}], tenant="t1")[0] == []
    with pytest.raises(ValueError, match="one dict per text"):
        c.search_sparse(["a", "b"], [{}], tenant="t1")
    with pytest.raises(TypeError):
        c.bm25_statistics("hello", tenant="t1")
