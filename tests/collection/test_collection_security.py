"""Tenants and ACLs are pre-filters: refusals, isolation, invisible-by-default, the canary."""
import numpy as np
import pytest

import vecsift

from collection_util import clustered, exact_ref, ids_of

N, DIM = 4000, 32


@pytest.fixture
def tenant_coll(tmp_path):
    x = clustered(N, DIM, seed=1)
    tenants = np.array(["big", "small", "mid"])[np.where(np.arange(N) % 100 == 0, 1, np.arange(N) % 2 * 2)]
    c = vecsift.Collection.create(tmp_path / "t", DIM)
    c.add([f"r{i}" for i in range(N)], x, tenant=tenants)
    c.commit()
    yield c, x, tenants
    c.close()


def test_tenant_is_required_and_isolates(tenant_coll):
    c, x, tenants = tenant_coll
    with pytest.raises(ValueError, match="tenant"):
        c.search(x[0], k=5)
    assert c.search(x[0], k=5, tenant="nobody") == []  # unknown tenant: empty, not an error
    q = clustered(10, DIM, seed=2)
    for t in ("big", "small", "mid"):
        allowed = np.flatnonzero(tenants == t)
        for hits, qi in zip(c.search_batch(q, k=15, tenant=t), q):
            assert len(hits) == 15 and all(h.tenant == t for h in hits)
        if len(allowed) <= 2048:  # selective tenant: exact over its rows
            rows, scores = c.search_rows(q, k=15, tenant=t)
            _, ref = exact_ref(x, q, 15, "cosine", allowed)
            np.testing.assert_allclose(scores, ref, atol=1e-4)


def test_tenant_rows_are_never_scored_for_others(tenant_coll):
    c, x, tenants = tenant_coll
    # the exact vector of a 'small' row, asked by 'big': that row must not come back at any k
    i = int(np.flatnonzero(tenants == "small")[3])
    for k in (1, 10, 100, N):
        assert f"r{i}" not in ids_of(c.search(x[i], k=k, tenant="big"))
    assert c.search(x[i], k=1, tenant="small")[0].id == f"r{i}"


def acl_collection(tmp_path, canary_vec=None):
    x = clustered(N, DIM, seed=3)
    groups = np.array(["eng", "sales", "hr"])
    acl = [[groups[i % 3]] if i % 10 else [groups[i % 3], "all"] for i in range(N)]
    acl[5] = None  # no ACL entry: visible to nobody
    acl[6] = []
    c = vecsift.Collection.create(tmp_path / "a", DIM)
    c.add([f"r{i}" for i in range(N)], x, texts=[f"chunk {i}" for i in range(N)], acl=acl)
    return c, x


def test_acl_groups_are_required_and_ored(tmp_path):
    c, x = acl_collection(tmp_path)
    c.commit()
    with pytest.raises(ValueError, match="groups"):
        c.search(x[0], k=3)
    assert c.search(x[0], k=3, groups=[]) == []
    assert c.search(x[0], k=3, groups=["unknown"]) == []
    for hits in c.search_batch(x[:20], k=20, groups=["eng", "hr"]):
        assert len(hits) == 20 and all(int(h.id[1:]) % 3 in (0, 2) for h in hits)
    hits = c.search(x[10], k=N, groups="all")
    assert {int(h.id[1:]) for h in hits} == set(range(0, N, 10))
    c.close()


def test_chunk_without_acl_is_visible_to_nobody(tmp_path):
    c, x = acl_collection(tmp_path)
    c.commit()
    everyone = ["eng", "sales", "hr", "all", "unknown"]
    for i in (5, 6):
        for k in (1, 10, N):
            assert f"r{i}" not in ids_of(c.search(x[i], k=k, groups=everyone))
    c.close()


def test_canary_never_leaks(tmp_path):
    """A chunk only group G may see, queried with its exact vector, never reaches anyone else."""
    c, x = acl_collection(tmp_path)
    canary = (x[17] + x[18]) / 2
    c.add(["canary"], canary[None], texts=["the zebra-orchid-7781 canary phrase"], acl=[["G"]],
          tenant=None, doc_ids=["canary-doc"])
    c.commit()
    others = [[], ["eng"], ["eng", "sales", "hr", "all"], ["g"], ["G "]]

    def check(coll):
        for groups in others:
            for k in (1, 5, 50, N + 1):
                for over in (None, 1, 64):
                    assert "canary" not in ids_of(coll.search(canary, k=k, groups=groups, oversample=over))
                batch = coll.search_batch(np.stack([canary, x[17], x[18]]), k=k, groups=groups)
                assert all("canary" not in ids_of(h) for h in batch)
        assert coll.search(canary, k=1, groups=["G"])[0].id == "canary"
        assert coll.search(canary, k=1, groups=["eng", "G"])[0].id == "canary"

    check(c)
    c.close()
    with vecsift.open(tmp_path / "a", readonly=True) as r:
        check(r)
    c = vecsift.open(tmp_path / "a")
    c.delete(ids=["r1", "r2"])
    c.compact()
    check(c)
    c.close()


def test_tenant_and_acl_together(tmp_path):
    x = clustered(500, 8, seed=4)
    c = vecsift.Collection.create(tmp_path / "ta", 8)
    c.add([f"r{i}" for i in range(500)], x, tenant=["a" if i < 250 else "b" for i in range(500)],
          acl=[["g1"] if i % 2 else ["g2"] for i in range(500)])
    c.commit()
    with pytest.raises(ValueError, match="tenant"):
        c.search(x[0], groups=["g1"])
    with pytest.raises(ValueError, match="groups"):
        c.search(x[0], tenant="a")
    hits = c.search(x[0], k=500, tenant="a", groups=["g1"])
    assert {int(h.id[1:]) for h in hits} == set(range(1, 250, 2))
    c.close()


def test_other_tenants_text_never_moves_bm25_scores(tmp_path):
    # With index-wide statistics, tenant B writing "merger" a thousand times would lower
    # the idf A's "merger" query sees: A could learn what B writes. Scores must not move.
    rng = np.random.default_rng(0)
    words = "alpha beta gamma delta merger audit budget office".split()
    def texts(n):
        return [" ".join(rng.choice(words, 12)) for _ in range(n)]
    c = vecsift.Collection.create(tmp_path / "bm", 8)
    c.add([f"a{i}" for i in range(300)], clustered(300, 8, seed=4), texts=texts(300), tenant="A")
    c.commit()
    before = [(h.id, h.score) for h in c.search(text="merger audit", k=20, tenant="A")]
    c.add([f"b{i}" for i in range(2000)], clustered(2000, 8, seed=5), texts=["merger " * 50] * 2000, tenant="B")
    c.commit()
    after = [(h.id, h.score) for h in c.search(text="merger audit", k=20, tenant="A")]
    assert len(before) == 20 and after == before
    hybrid = c.search(vector=clustered(1, 8, seed=6)[0], text="merger audit", k=20, tenant="A")
    assert all(h.id.startswith("a") for h in hybrid)
    c.close()

