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


TITLES = ["setup_guide", "setupxguide", "50% off", "Release notes", "release candidate", "API reference"]


def _meta(i):
    m = {"author": AUTHORS[i % 3], "rating": [1.5, 3.0, 4.5, 5.0][i % 4], "kind": ["", "note", "paper"][i % 3],
         "title": TITLES[i % 6]}
    if i % 5:  # every fifth node has no year: exercises missing values
        m["year"] = 2019 + i % 6
    if i % 7:  # tags: a list field (every seventh has none, and some have an empty list)
        m["tags"] = [WORDS[j] for j in range(10) if (i >> (j % 4)) & 1 and (i + j) % 3 == 0][:3]
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
    s = VecsiftVectorStore(path=tmp_path / "kb", filter_fields=["author", "year", "rating", "kind", "title", "tags"])
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
AND, OR, NOT = FilterCondition.AND, FilterCondition.OR, FilterCondition.NOT


def _f(*filters, condition=AND):
    return MetadataFilters(filters=list(filters), condition=condition)


# every operator and condition, end to end through the store, compared with LlamaIndex's semantics
E2E = {
    "eq-str": _f(F(key="author", value="bob")),
    "eq-int": _f(F(key="year", value=2021)),
    "eq-float": _f(F(key="rating", value=4.5)),
    "eq-empty-string": _f(F(key="kind", value="")),
    "eq-none-match": _f(F(key="author", value="nobody")),
    "ne-str": _f(F(key="author", value="bob", operator=OP.NE)),
    "ne-int-missing-matches": _f(F(key="year", value=2021, operator=OP.NE)),
    "gt": _f(F(key="year", value=2021, operator=OP.GT)),
    "gte": _f(F(key="year", value=2021, operator=OP.GTE)),
    "lt-float": _f(F(key="rating", value=4.5, operator=OP.LT)),
    "lte-float": _f(F(key="rating", value=3.0, operator=OP.LTE)),
    "in-str": _f(F(key="author", value=["alice", "carol"], operator=OP.IN)),
    "in-int": _f(F(key="year", value=[2019, 2024], operator=OP.IN)),
    "nin-str": _f(F(key="author", value=["alice"], operator=OP.NIN)),
    "nin-int-missing-matches": _f(F(key="year", value=[2019, 2020], operator=OP.NIN)),
    "any": _f(F(key="tags", value=["vector", "graph"], operator=OP.ANY)),
    "all": _f(F(key="tags", value=["search", "ranking"], operator=OP.ALL)),
    "all-one": _f(F(key="tags", value=["hybrid"], operator=OP.ALL)),
    "contains": _f(F(key="tags", value="filter", operator=OP.CONTAINS)),
    "text-match": _f(F(key="title", value="setup_", operator=OP.TEXT_MATCH)),  # "_" is literal, not a wildcard
    "text-match-percent": _f(F(key="title", value="50%", operator=OP.TEXT_MATCH)),
    "text-match-case": _f(F(key="title", value="release", operator=OP.TEXT_MATCH)),
    "text-match-insensitive": _f(F(key="title", value="RELEASE", operator=OP.TEXT_MATCH_INSENSITIVE)),
    "is-empty-string-field": _f(F(key="kind", value=None, operator=OP.IS_EMPTY)),
    "is-empty-number-field": _f(F(key="year", value=None, operator=OP.IS_EMPTY)),
    "is-empty-list-field": _f(F(key="tags", value=None, operator=OP.IS_EMPTY)),
    "and": _f(F(key="author", value="alice"), F(key="year", value=2020, operator=OP.GTE)),
    "and-same-key": _f(F(key="year", value=2020, operator=OP.GT), F(key="year", value=2023, operator=OP.LT)),
    "or": _f(F(key="author", value="bob"), F(key="rating", value=5.0), condition=OR),
    "not": _f(F(key="author", value="bob"), F(key="year", value=2021), condition=NOT),
    "not-one": _f(F(key="tags", value=["vector"], operator=OP.ANY), condition=NOT),
    "nested": _f(F(key="kind", value="paper"),
                 _f(F(key="year", value=2020, operator=OP.LT), F(key="tags", value="search", operator=OP.CONTAINS),
                    condition=OR)),
    "nested-not": _f(_f(F(key="author", value="carol"), F(key="rating", value=1.5), condition=NOT),
                     F(key="year", value=2019, operator=OP.NE)),
    "deep": _f(_f(_f(F(key="author", value="alice"), F(key="author", value="bob"), condition=OR),
                  F(key="tags", value=None, operator=OP.IS_EMPTY), condition=AND),
               F(key="title", value="setupxguide"), condition=OR),
}


def test_every_operator_is_exercised():
    def ops(f):
        return set().union(*[ops(g) if isinstance(g, MetadataFilters) else {g.operator} for g in f.filters])

    used = set().union(*[ops(f) for f in E2E.values()])
    conds = {f.condition for f in E2E.values()}
    assert used == set(FilterOperator) and conds == set(FilterCondition)
    metas = {f"n{i}": _meta(i) for i in range(N)}
    sizes = {name: len(_reference(f, metas)) for name, f in E2E.items()}
    assert all(0 < n < N for name, n in sizes.items() if name != "eq-none-match"), sizes  # cases that discriminate


@pytest.mark.parametrize("name", sorted(E2E))
def test_filters_match_llamaindex_semantics(store, name):
    filters = E2E[name]
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
    with pytest.raises(TypeError, match="holds number values"):
        store.query(_q(filters=MetadataFilters(filters=[F(key="year", value="2020")])))
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


@pytest.mark.asyncio
async def test_async_methods(tmp_path):
    s = VecsiftVectorStore(path=tmp_path / "kb", filter_fields=["author"])
    ids = await s.async_add(_nodes()[:12])
    assert ids == [f"n{i}" for i in range(12)]
    f = MetadataFilters(filters=[F(key="author", value="bob")])
    res = await s.aquery(_q(filters=f))
    assert res.ids == s.query(_q(filters=f)).ids and set(res.ids) == {"n1", "n4", "n7", "n10"}
    await s.adelete("doc0")
    await s.adelete_nodes(["n4"])
    assert [n.node_id for n in await s.aget_nodes(["n1", "n4", "n5"])] == ["n5"]
    await s.aclear()
    assert (await s.aquery(_q())).ids == []
    s.close()
