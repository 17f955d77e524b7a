"""ShardedCollection on a 3-node Ray cluster against one Collection over the same rows."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import vecsift
from vecsift.distributed import SearchResult, ShardedCollection, ingest_parquet

from .conftest import corpus, text_queries

DIM = 16


def assert_same_top(a, single, k=10, **search):
    """a equals single's top k: the same scores bit for bit, and the same ids except for the order
    among exactly tied scores (a breaks ties by id, a Collection by row number)."""
    wide = single.search(k=k + 30, **search)
    assert [h.score for h in a] == [h.score for h in wide[:k]]
    for h in a:
        assert h.id in {w.id for w in wide if w.score == h.score}
    assert len({h.id for h in a}) == len(a)


@pytest.fixture(scope="module")
def pair(ray_cluster, tmp_path_factory):
    """1500 rows (each shard and the single collection score exactly: under EXACT_BELOW rows)."""
    root = tmp_path_factory.mktemp("sharded")
    ids, x, texts, _ = corpus(1500, DIM)
    sc = ShardedCollection.create(root / "sc", DIM, "cosine", shards=3)
    single = vecsift.Collection.create(root / "single", DIM, "cosine")
    for c in (sc, single):
        c.add(ids[:1000], x[:1000], texts=texts[:1000])
        c.commit()
        c.add(ids[1000:], x[1000:], texts=texts[1000:])
        c.delete(ids=ids[:50])
        c.commit()
    yield sc, single
    sc.close()
    single.close()


def test_rows_spread_over_shards(pair):
    sc, single = pair
    info = sc.info()
    assert info["rows"] == len(single) == 1450
    assert info["generation"] == 2
    per = [s["rows"] for s in info["shard_info"]]
    assert len(per) == 3 and min(per) > 300  # hash routing spreads


def test_one_node_actor_per_ray_node(pair):
    """3 shards on the 3-node cluster: one node actor per Ray node, each holding one shard."""
    import ray

    sc, _ = pair
    pings = [ray.get(sc.primary(s).ping.remote()) for s in range(3)]
    assert len({p["node"] for p in pings}) == 3 and len({p["pid"] for p in pings}) == 3
    assert [sorted(p["gens"]) for p in pings] == [[0], [1], [2]]
    assert [sc.node_shards(s) for s in range(3)] == [[0], [1], [2]]


def test_bm25_identical_to_single_collection(pair):
    sc, single = pair
    for q in text_queries(25):
        a = sc.search(text=q, k=10)
        assert isinstance(a, SearchResult) and not a.partial and len(a) == 10
        assert_same_top(a, single, text=q)  # bit for bit: global statistics
        assert [h.sparse_rank for h in a] == list(range(1, len(a) + 1))
    qs = text_queries(8, seed=5)
    for q, a in zip(qs, sc.search_batch(texts=qs, k=10)):
        assert_same_top(a, single, text=q)


def test_exact_dense_identical_to_single_collection(pair):
    sc, single = pair
    q = np.random.default_rng(3).standard_normal((20, DIM)).astype(np.float32)
    got, want = sc.search_batch(q, k=10), single.search_batch(q, k=10)
    for a, b in zip(got, want):
        assert [h.id for h in a] == [h.id for h in b]
        np.testing.assert_allclose([h.score for h in a], [h.score for h in b], rtol=0, atol=1e-6)
        assert [h.dense_rank for h in a] == list(range(1, 11))
        assert a[0].text is not None


def test_hybrid_fuses_the_global_lists(pair):
    """Hybrid = RRF over the global dense and sparse top-`candidates` lists (what a Collection fuses);
    equal to a single Collection's up to the order of exact BM25 ties, which moves sparse ranks."""
    sc, single = pair
    rng = np.random.default_rng(4)
    for q in text_queries(5, seed=9):
        v = rng.standard_normal(DIM).astype(np.float32)
        got = sc.search(v, text=q, k=10, candidates=40)
        dense = sc.search(v, k=40, mode="dense")
        sparse = sc.search(text=q, k=40, mode="sparse")
        assert [h.id for h in dense] == [h.id for h in single.search(v, k=40, mode="dense")]
        keys = {h: i for i, h in enumerate(dict.fromkeys([h.id for h in dense] + [h.id for h in sparse]))}
        ids, fused = vecsift.rrf([[keys[h.id] for h in dense], [keys[h.id] for h in sparse]], k=60, top_n=10)
        names = list(keys)
        assert [h.id for h in got] == [names[i] for i in ids]
        np.testing.assert_allclose([h.score for h in got], fused, rtol=1e-12)
        want = {h.id: h.dense_rank for h in dense}
        assert all(h.dense_rank == want.get(h.id) for h in got)


def test_bad_input_is_refused(pair):
    sc, _ = pair
    with pytest.raises(ValueError, match="dimension"):
        sc.search(np.ones(DIM + 1, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        sc.search(np.full(DIM, np.nan, np.float32))
    with pytest.raises(ValueError, match="k must be"):
        sc.search(text="w1", k=0)
    with pytest.raises(ValueError, match="mode"):
        sc.search(text="w1", mode="fancy")
    with pytest.raises(TypeError):
        sc.search(text=["w1"])
    with pytest.raises(ValueError, match="where"):  # the shard Collection's own error, re-raised as is
        sc.search(text="w1", where={"nope": 1})
    with pytest.raises(ValueError, match="dimension"):
        sc.add(["x"], np.ones((1, 3), np.float32))


def test_approximate_dense_recall_no_lower(ray_cluster, tmp_path):
    """HNSW on every shard (each over EXACT_BELOW rows) vs one HNSW over all rows, held-out queries."""
    n, dim = 7500, 24
    ids, x, _, _ = corpus(n, dim, seed=11)
    held = np.random.default_rng(12).standard_normal((60, dim)).astype(np.float32)
    sc = ShardedCollection.create(tmp_path / "sc", dim, "cosine", shards=3, index="hnsw", m=8, ef_construction=40)
    single = vecsift.Collection.create(tmp_path / "single", dim, "cosine", index="hnsw", m=8, ef_construction=40)
    for c in (sc, single):
        c.add(ids, x)
        c.commit()
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    truth = np.argsort(-(held / np.linalg.norm(held, axis=1, keepdims=True)) @ xn.T, axis=1)[:, :10]
    want = [{ids[i] for i in row} for row in truth]

    def recall(results):
        return np.mean([len({h.id for h in r} & w) / 10 for r, w in zip(results, want)])

    r_sc = recall(sc.search_batch(held, k=10, ef=16))
    r_single = recall(single.search_batch(held, k=10, ef=16))
    assert r_sc >= r_single, (r_sc, r_single)
    assert r_single < 1.0  # the single index really was approximate here
    sc.close()
    single.close()


def test_one_query_path_answers_as_the_general_path(ray_cluster, tmp_path):
    """search(vector, k) alone takes the driver's one-query path and the node actors' rows route (Hits
    made only for the k kept): the same Hits as the general path (a timeout given) and as a batch
    (the node's Hit route), before and after deletes (which take the shards off Collection.search's
    fast path); deleted rows never come back."""
    ids, x, _, _ = corpus(12000, DIM, seed=21)
    texts = [f"t{i}" for i in range(len(ids))]
    sc = ShardedCollection.create(tmp_path / "sc", DIM, "cosine", shards=3)
    sc.add(ids, x, texts=texts, doc_ids=[f"d{i // 4}" for i in range(len(ids))])
    sc.commit()
    q = np.random.default_rng(22).standard_normal((12, DIM)).astype(np.float32)
    q[-2:] = x[:2]  # queries equal to stored rows
    assert sc._search_one(q[0], 10) is not None  # the path under test is live
    gone = set()
    for phase in range(2):
        for v in q:
            for k in (1, 10, 25):
                a = sc.search(v, k=k)
                b = sc.search(v, k=k, timeout=60.0)
                c = sc.search_batch(np.stack([v, v]), k=k)[0]
                assert isinstance(a, SearchResult) and not a.partial and a.generation == b.generation == sc.generation
                assert list(a) == list(b) == list(c) and len(a) == k
                assert [h.dense_rank for h in a] == list(range(1, k + 1)) and a[0].text.startswith("t")
                assert not gone & {h.id for h in a}
        gone = set(ids[:3000:7]) | {ids[0]}
        sc.delete(ids=sorted(gone))
        sc.commit()
    sc.close()


@pytest.fixture(scope="module")
def tenants(ray_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("tenants")
    names = ["acme", "globex", "initech", "umbrella"]
    ids, x, texts, tn = corpus(1200, DIM, seed=21, tenants=names)
    sc = ShardedCollection.create(root / "sc", DIM, "cosine", shards=3, routing="tenant",
                                  tenant_spread={"umbrella": 2})
    single = vecsift.Collection.create(root / "single", DIM, "cosine")
    for c in (sc, single):
        c.add(ids, x, texts=texts, tenant=tn)
        c.commit()
    yield sc, single
    sc.close()
    single.close()


def _calls(sc):
    import ray

    return [ray.get(sc.primary(s).ping.remote())["calls"][s] for s in range(sc.n_shards)]


def test_tenant_search_touches_only_its_shards(tenants):
    sc, single = tenants
    assert len(sc.tenant_shards("acme")) == 1 and len(sc.tenant_shards("umbrella")) == 2
    for tenant in ("acme", "umbrella"):
        mine = set(sc.tenant_shards(tenant))
        before = _calls(sc)
        for q in text_queries(6, seed=3):
            a = sc.search(text=q, k=10, tenant=tenant)
            assert_same_top(a, single, text=q, tenant=tenant)
            assert all(h.tenant == tenant for h in a)
        v = np.random.default_rng(1).standard_normal(DIM).astype(np.float32)
        assert [h.id for h in sc.search(v, k=10, tenant=tenant)] == [h.id for h in single.search(v, k=10,
                                                                                                  tenant=tenant)]
        after = _calls(sc)
        touched = {s for s in range(sc.n_shards) if after[s] > before[s]}
        assert touched == mine, (tenant, touched, mine)
    assert sc.search(text="w1", tenant="nobody") == []


def test_tenant_rules_hold(tenants):
    sc, single = tenants
    with pytest.raises(ValueError, match="tenant"):
        sc.search(text="w1")
    with pytest.raises(ValueError, match="tenant"):
        sc.search(np.ones(DIM, np.float32))
    # a canary of another tenant: the exact query vector and a word nobody else has
    v = np.random.default_rng(2).standard_normal(DIM).astype(np.float32)
    before = {q: [(h.id, h.score) for h in sc.search(text=q, k=10, tenant="acme")] for q in text_queries(4, seed=8)}
    sc.add(["canary"], v[None, :], texts=["zzcanary " + " ".join(text_queries(4, seed=8))], tenant=["globex"])
    sc.commit()
    for q, hits in before.items():  # another tenant's text moves none of acme's scores
        assert [(h.id, h.score) for h in sc.search(text=q, k=10, tenant="acme")] == hits
    for tenant in ("acme", "umbrella", "initech"):
        assert "canary" not in {h.id for h in sc.search(v, k=50, tenant=tenant)}
        assert sc.search(text="zzcanary", k=10, tenant=tenant) == []
    assert sc.search(v, k=1, tenant="globex")[0].id == "canary"


@pytest.mark.parametrize("engine", ["tasks", "data"])
def test_ingest_parquet(ray_cluster, tmp_path, engine):
    if engine == "data":
        pytest.importorskip("pandas", reason="Ray Data needs pandas (ray[data])")
    ids, x, texts, tn = corpus(300, DIM, seed=31, tenants=["a", "b", "c"])
    table = pa.table({"id": ids, "text": texts, "tenant": tn})
    for i in range(2):
        pq.write_table(table.slice(i * 150, 150), tmp_path / f"part-{i}.parquet")
    rng = np.random.default_rng(0)
    proj = rng.standard_normal((len(conftest_words()), DIM)).astype(np.float32)

    def embed(batch_texts):  # a toy embedding: bag of words times a fixed projection
        out = np.zeros((len(batch_texts), DIM), np.float32)
        for i, t in enumerate(batch_texts):
            for w in t.split():
                out[i] += proj[int(w[1:])]
        return out

    sc = ShardedCollection.create(tmp_path / "sc", DIM, "cosine", shards=3, routing="tenant")
    assert ingest_parquet(sc, [str(tmp_path / f"part-{i}.parquet") for i in range(2)], embed=embed,
                          batch_size=100, engine=engine) == 300
    single = vecsift.Collection.create(tmp_path / "single", DIM, "cosine")
    single.add(ids, embed(texts), texts=texts, tenant=tn)
    single.commit()
    assert sc.info()["rows"] == 300
    assert sorted(len(sc.tenant_shards(t)) for t in "abc") == [1, 1, 1]
    q = embed(["w1 w2 w3"])[0]
    for t in "abc":
        a, b = sc.search(q, k=5, tenant=t), single.search(q, k=5, tenant=t)
        assert [h.id for h in a] == [h.id for h in b]
    sc.close()
    single.close()


def conftest_words():
    from .conftest import WORDS

    return WORDS

