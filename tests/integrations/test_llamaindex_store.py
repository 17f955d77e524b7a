"""The LlamaIndex store: add / query / delete, every filter operator against LlamaIndex's own semantics, hybrid."""
import numpy as np
import pytest
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (FilterCondition, FilterOperator, MetadataFilter, MetadataFilters,
                                                  VectorStoreQuery, VectorStoreQueryMode)
from llama_index.core.vector_stores.utils import build_metadata_filter_fn

import vecsift
from vecsift.collection.embedders import HashingEmbedder
from vecsift.integrations.llamaindex import VecsiftVectorStore, hybrid_weights

EMB = HashingEmbedder(32)
WORDS = ["vector", "search", "bitmap", "hybrid", "ranking", "tenant", "filter", "graph", "quantised", "commit"]
AUTHORS = ["alice", "bob", "carol"]
N = 36


def _meta(i):
    m = {"author": AUTHORS[i % 3], "rating": [1.5, 3.0, 4.5, 5.0][i % 4], "kind": ["", "note", "paper"][i % 3]}
    if i % 5:  # every fifth node has no year: exercises missing values
        m["year"] = 2019 + i % 6
    return m


def _nodes():
    rng = np.random.default_rng(3)
    out = []
    for i in range(N):
        text = " ".join(rng.choice(WORDS, 4))
        out.append(TextNode(id_=f"n{i}", text=text, metadata=_meta(i), embedding=EMB([text])[0].tolist(),
                            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"doc{i // 4}")}))
    return out


@pytest.fixture
def store(tmp_path):
    s = VecsiftVectorStore(path=tmp_path / "kb", filter_fields=["author", "year", "rating", "kind"])
    s.add(_nodes())
    yield s
    s.close()


def _q(**kw):
    kw.setdefault("query_embedding", EMB(["vector search"])[0].tolist())
    kw.setdefault("similarity_top_k", N)
    return VectorStoreQuery(**kw)


def _reference(filters, metas) -> set:
    """LlamaIndex's own filter semantics (SimpleVectorStore), nesting evaluated here."""

    def holds(f, nid):
        if isinstance(f, MetadataFilters):
            parts = [holds(g, nid) for g in f.filters]
            cond = f.condition or FilterCondition.AND
            return all(parts) if cond == FilterCondition.AND else any(parts) if cond == FilterCondition.OR \
                else not any(parts)
        return build_metadata_filter_fn(lambda n: metas[n], MetadataFilters(filters=[f]))(nid)

    return {nid for nid in metas if holds(filters, nid)}


F = MetadataFilter
OP = FilterOperator
# end to end through the store, compared with LlamaIndex's semantics
E2E = [
    MetadataFilters(filters=[F(key="author", value="bob")]),
    MetadataFilters(filters=[F(key="year", value=2021)]),
    MetadataFilters(filters=[F(key="rating", value=4.5, operator=OP.EQ)]),
    MetadataFilters(filters=[F(key="author", value="alice"), F(key="year", value=2019)]),
    MetadataFilters(filters=[F(key="author", value="carol"), F(key="kind", value="paper")]),
    MetadataFilters(filters=[F(key="author", value="nobody")]),
]


@pytest.mark.parametrize("filters", E2E, ids=range(len(E2E)))
def test_filters_match_llamaindex_semantics(store, filters):
    metas = {f"n{i}": _meta(i) for i in range(N)}
    got = store.query(_q(filters=filters))
    assert set(got.ids) == _reference(filters, metas)
    # filtered before ranking: the same order as the unfiltered ranking
    every = store.query(_q()).ids
    assert got.ids == [i for i in every if i in set(got.ids)]


def test_add_query_round_trip(store):
    res = store.query(_q(similarity_top_k=3))
    assert len(res.ids) == 3 and res.ids == [n.node_id for n in res.nodes]
    assert res.similarities == sorted(res.similarities, reverse=True)
    node = store.get_nodes(["n7"])[0]
    want = _nodes()[7]
    assert node.node_id == "n7" and node.get_content() == want.get_content()
    assert node.metadata == want.metadata and node.ref_doc_id == "doc1"
    # dense scores are the cosine of the query and node embeddings
    q = np.asarray(_q().query_embedding)
    vecs = {n.node_id: np.asarray(n.embedding) for n in _nodes()}
    for i, s in zip(res.ids, res.similarities):
        assert s == pytest.approx(float(q @ vecs[i] / np.linalg.norm(q) / np.linalg.norm(vecs[i])), abs=1e-5)


def test_delete_ref_doc_removes_all_its_chunks(store):
    store.delete("doc2")
    ids = set(store.query(_q()).ids)
    assert ids.isdisjoint({"n8", "n9", "n10", "n11"}) and len(ids) == N - 4
    store.delete("no-such-doc")
    store.delete_nodes(["n0", "n1"])
    assert len(store.query(_q()).ids) == N - 6
    assert store.get_nodes(["n0", "n8", "n2"])[0].node_id == "n2"
    store.clear()
    assert store.query(_q()).ids == []


@pytest.mark.parametrize("alpha", [None, 0.0, 0.3, 0.5, 1.0])
def test_hybrid_returns_what_collection_search_returns(store, alpha):
    coll = store.client
    for text in ["hybrid ranking", "tenant filter graph", "commit"]:
        qe = EMB([text])[0].tolist()
        res = store.query(_q(query_embedding=qe, query_str=text, mode=VectorStoreQueryMode.HYBRID, alpha=alpha,
                             similarity_top_k=5))
        ref = coll.search(vector=qe, text=text, k=5, mode="hybrid", weights=hybrid_weights(alpha), candidates=100)
        assert res.ids == [h.id for h in ref] and res.similarities == [h.score for h in ref]
    with pytest.raises(ValueError, match="alpha"):
        hybrid_weights(1.5)


def test_hybrid_with_filters_and_top_ks(store):
    coll = store.client
    qe = EMB(["bitmap"])[0].tolist()
    f = MetadataFilters(filters=[F(key="author", value="alice")])
    res = store.query(_q(query_embedding=qe, query_str="bitmap", mode="hybrid", filters=f, similarity_top_k=2,
                         hybrid_top_k=4, sparse_top_k=10))
    ref = coll.search(vector=qe, text="bitmap", k=4, mode="hybrid", candidates=10, where={"author": "alice"})
    assert res.ids == [h.id for h in ref]
    assert all(n.metadata["author"] == "alice" for n in res.nodes)


def test_sparse_mode_is_bm25(store):
    res = store.query(_q(query_str="quantised", mode=VectorStoreQueryMode.SPARSE, similarity_top_k=50))
    assert res.ids and all("quantised" in n.get_content() for n in res.nodes)
    assert set(res.ids) == {f"n{i}" for i, n in enumerate(_nodes()) if "quantised" in n.get_content()}
    text = store.query(_q(query_str="quantised", mode=VectorStoreQueryMode.TEXT_SEARCH, similarity_top_k=50))
    assert text.ids == res.ids


def test_mmr_mode(store):
    res = store.query(_q(mode=VectorStoreQueryMode.MMR, similarity_top_k=4, mmr_threshold=1.0))
    dense = store.query(_q(similarity_top_k=4))
    assert res.ids == dense.ids  # threshold 1: relevance only
    div = store.query(_q(mode=VectorStoreQueryMode.MMR, similarity_top_k=4, mmr_threshold=0.1))
    assert len(div.ids) == 4 and div.ids[0] == dense.ids[0]


def test_bad_queries_are_refused(store):
    with pytest.raises(ValueError, match="text_match"):
        store.query(_q(filters=MetadataFilters(filters=[F(key="author", value="a", operator=OP.TEXT_MATCH)])))
    with pytest.raises(ValueError, match="unknown filter field"):
        store.query(_q(filters=MetadataFilters(filters=[F(key="colour", value="red")])))
    with pytest.raises(ValueError, match="needs query_embedding and query_str"):
        store.query(_q(mode="hybrid"))
    with pytest.raises(ValueError, match="not supported"):
        store.query(_q(mode=VectorStoreQueryMode.SVM))
    with pytest.raises(NotImplementedError, match="node_ids"):
        store.query(_q(node_ids=["n1"]))
    with pytest.raises(ValueError, match="without an embedding"):
        store.add([TextNode(text="no embedding")])


def test_tenants_bound_to_the_store(tmp_path):
    coll = vecsift.Collection.create(tmp_path / "kb", 32, filter_fields=["author"])
    a = VecsiftVectorStore(coll, tenant="acme")
    a.add(_nodes()[:8])
    with pytest.raises(ValueError, match="has tenants"):
        VecsiftVectorStore(coll)
    b = VecsiftVectorStore(coll, tenant="globex")
    assert b.query(_q()).ids == [] and b.get_nodes(["n1"]) == []
    b.delete("doc0")  # acme's document: not b's to delete
    assert len(a.query(_q()).ids) == 8
    a.delete("doc0")
    assert sorted(a.query(_q()).ids) == [f"n{i}" for i in range(4, 8)]
    coll.close()


def test_stores_text_and_reopen(tmp_path):
    s = VecsiftVectorStore(path=tmp_path / "kb", filter_fields=["author"])
    assert s.stores_text is True and s.client is None
    assert s.query(_q()).ids == []
    s.add(_nodes()[:5])
    s.close()
    again = VecsiftVectorStore(path=tmp_path / "kb")
    assert sorted(again.query(_q()).ids) == [f"n{i}" for i in range(5)]
    assert again.client.filter_fields == ["author"]
    again.close()
