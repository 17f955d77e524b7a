"""The LangChain store beyond the standard suite: filters, tenants, hybrid = Collection.search, MMR, async."""
import asyncio
import time

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

import vecsift
from vecsift.collection.embedders import HashingEmbedder
from vecsift.integrations.langchain import VecsiftVectorStore


class HashEmbeddings(Embeddings):
    """Deterministic word-hashing embeddings (texts sharing words are near)."""

    def __init__(self, dim=64, model=None, delay=0.0):
        self._e = HashingEmbedder(dim)
        self.model = model
        self.delay = delay

    def embed_documents(self, texts):
        time.sleep(self.delay)
        return self._e(texts).tolist()

    def embed_query(self, text):
        time.sleep(self.delay)
        return self._e([text])[0].tolist()


class TableEmbeddings(Embeddings):
    """Fixed vectors by text (for hand-checked geometry)."""

    def __init__(self, table):
        self.table = table

    def embed_documents(self, texts):
        return [self.table[t] for t in texts]

    def embed_query(self, text):
        return self.table[text]


DOCS = [
    Document(id="d1", page_content="vector search with roaring bitmaps", metadata={"lang": "en", "year": 2023}),
    Document(id="d2", page_content="hybrid search fuses bm25 and vectors", metadata={"lang": "en", "year": 2024}),
    Document(id="d3", page_content="vektorsuche mit bitmaps", metadata={"lang": "de", "year": 2024}),
    Document(id="d4", page_content="recherche vectorielle hybride", metadata={"lang": "fr", "year": 2022}),
    Document(id="d5", page_content="bm25 ranking of search results", metadata={"lang": "en", "year": 2022,
                                                                             "nested": {"a": [1, 2.5, None]}}),
]


@pytest.fixture
def store(tmp_path):
    s = VecsiftVectorStore.from_documents(DOCS, HashEmbeddings(), path=tmp_path / "kb", filter_fields=["lang", "year"])
    yield s
    s.close()


def test_metadata_round_trips_exactly(store):
    got = store.get_by_ids(["d5", "missing", "d1"])
    assert got == [DOCS[4], DOCS[0]]  # in the order asked, missing left out, nested JSON values intact


def test_filters_in_where_language(store):
    q = "search"
    en = store.similarity_search(q, k=10, filter={"lang": "en"})
    assert {d.id for d in en} == {"d1", "d2", "d5"}
    both = store.similarity_search(q, k=10, filter={"lang": "en", "year": 2024})
    assert [d.id for d in both] == ["d2"]
    some = store.similarity_search(q, k=10, filter={"lang": ["de", "fr"]})
    assert {d.id for d in some} == {"d3", "d4"}
    # the filter is applied before ranking: same order as the unfiltered ranking restricted to the allowed ids
    everything = [d.id for d in store.similarity_search(q, k=10)]
    assert [d.id for d in en] == [i for i in everything if i in {"d1", "d2", "d5"}]


def test_bad_filters_are_refused(store):
    with pytest.raises(ValueError, match="unknown filter field"):
        store.similarity_search("x", filter={"author": "me"})
    with pytest.raises(ValueError, match=r"unknown operator '\$regex'"):
        store.similarity_search("x", filter={"lang": {"$regex": "e.*"}})
    with pytest.raises(ValueError, match=r"unknown operator '\$xor'"):
        store.similarity_search("x", filter={"$xor": [{"lang": "en"}]})


def test_scores_are_cosine_and_relevance_in_unit_interval(store, tmp_path):
    emb = HashEmbeddings()
    hits = store.similarity_search_with_score("hybrid search fuses bm25 and vectors", k=3)
    assert hits[0][0].id == "d2" and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    rel = store.similarity_search_with_relevance_scores("hybrid search fuses bm25 and vectors", k=3)
    assert [d.id for d, _ in rel] == [d.id for d, _ in hits]
    for (_, s), (_, r) in zip(hits, rel):
        assert r == pytest.approx((1 + s) / 2)
    by_vec = store.similarity_search_with_score_by_vector(emb.embed_query("bitmaps"), k=2)
    assert [d.id for d, _ in by_vec] == [d.id for d, _ in store.similarity_search_with_score("bitmaps", k=2)]


@pytest.mark.parametrize("weights", [None, (0.3, 0.7)])
def test_hybrid_returns_what_collection_search_returns(store, weights):
    emb = HashEmbeddings()
    coll = store.collection
    for q in ["bm25 search", "vector bitmaps", "hybride recherche", "nothing matches this"]:
        got = store.similarity_search_with_score(q, k=4, mode="hybrid", weights=weights, filter={"year": [2022, 2024]})
        ref = coll.search(vector=emb.embed_query(q), text=q, k=4, mode="hybrid", weights=weights, candidates=100,
                          where={"year": [2022, 2024]})
        assert [d.id for d, _ in got] == [h.id for h in ref]
        assert [s for _, s in got] == [h.score for h in ref]


def test_hybrid_and_sparse_as_store_modes(tmp_path):
    s = VecsiftVectorStore.from_documents(DOCS, HashEmbeddings(), path=tmp_path / "kb", mode="hybrid")
    ref = s.collection.search(vector=HashEmbeddings().embed_query("bm25"), text="bm25", k=3, mode="hybrid")
    assert [d.id for d in s.similarity_search("bm25", k=3)] == [h.id for h in ref]
    sparse = s.similarity_search_with_score("bm25", k=5, mode="sparse")
    assert {d.id for d, _ in sparse} == {"d2", "d5"}  # BM25: only texts holding the word
    assert [d.id for d in s.as_retriever(search_kwargs={"k": 3}).invoke("bm25")] == [h.id for h in ref]
    with pytest.raises(ValueError, match="needs the query text"):
        s.similarity_search_by_vector([0.0] * 64, k=2, mode="hybrid")
    with pytest.raises(ValueError, match="mode must be one of"):
        VecsiftVectorStore(HashEmbeddings(), s.collection, mode="bm42")
    s.close()


def test_retriever_with_filter(store):
    r = store.as_retriever(search_kwargs={"k": 2, "filter": {"lang": "de"}})
    assert [d.id for d in r.invoke("bitmaps")] == ["d3"]


def test_mmr_prefers_diverse_results(tmp_path):
    table = {"a": [1.0, 0.0, 0.0], "a2": [0.99, 0.141, 0.0], "b": [0.6, 0.0, 0.8], "q": [1.0, 0.0, 0.0]}
    docs = [Document(id=t, page_content=t) for t in ("a", "a2", "b")]
    s = VecsiftVectorStore.from_documents(docs, TableEmbeddings(table), path=tmp_path / "kb")
    assert [d.id for d in s.similarity_search("q", k=2)] == ["a", "a2"]
    assert [d.id for d in s.max_marginal_relevance_search("q", k=2, fetch_k=3, lambda_mult=0.3)] == ["a", "b"]
    assert [d.id for d in s.max_marginal_relevance_search("q", k=2, fetch_k=3, lambda_mult=1.0)] == ["a", "a2"]
    s.close()


def test_upsert_and_delete_are_durable(tmp_path):
    emb = HashEmbeddings()
    s = VecsiftVectorStore.from_documents(DOCS, emb, path=tmp_path / "kb", filter_fields=["lang"])
    s.add_documents([Document(page_content="replaced text", metadata={"lang": "xx"})], ids=["d1"])
    s.delete(["d2", "never-added"])
    s.close()
    again = VecsiftVectorStore(emb, path=tmp_path / "kb")  # reopens the directory
    assert len(again.collection) == 4
    assert again.get_by_ids(["d1", "d2"]) == [Document(id="d1", page_content="replaced text", metadata={"lang": "xx"})]
    assert [d.id for d in again.similarity_search("x", filter={"lang": "xx"})] == ["d1"]
    with pytest.raises(ValueError, match="needs ids"):
        again.delete()
    again.close()


def test_tenants_bound_to_the_store(tmp_path):
    emb = HashEmbeddings()
    coll = vecsift.Collection.create(tmp_path / "kb", 64, filter_fields=["lang"])
    a = VecsiftVectorStore(emb, coll, tenant="acme")
    a.add_documents(DOCS[:3])
    with pytest.raises(ValueError, match="has tenants"):
        VecsiftVectorStore(emb, coll)
    b = VecsiftVectorStore(emb, coll, tenant="globex")
    assert b.similarity_search("search", k=10) == []
    assert b.get_by_ids(["d1"]) == []
    b.delete(["d1"])  # not b's chunk: ignored
    with pytest.raises(ValueError, match="may not see"):
        b.add_documents([Document(id="d2", page_content="hijack")])
    b.add_documents([Document(id="g1", page_content="globex search notes")])
    assert [d.id for d in b.similarity_search("search", k=10)] == ["g1"]
    assert {d.id for d in a.similarity_search("search", k=10)} == {"d1", "d2", "d3"}
    assert a.get_by_ids(["d2"])[0].page_content == DOCS[1].page_content
    coll.close()


def test_acl_groups_bound_to_the_store(tmp_path):
    emb = HashEmbeddings()
    coll = vecsift.Collection.create(tmp_path / "kb", 64)
    w = VecsiftVectorStore(emb, coll, groups=["admin"], acl=["eng"])
    w.add_texts(["engineering notes"], ids=["e1"])
    w.add_texts(["board minutes"], ids=["b1"], acl=["board"])
    with pytest.raises(ValueError, match="access control"):
        VecsiftVectorStore(emb, coll)
    eng = VecsiftVectorStore(emb, coll, groups=["eng"])
    assert [d.id for d in eng.similarity_search("notes minutes", k=5)] == ["e1"]
    board = VecsiftVectorStore(emb, coll, groups="board")
    assert [d.id for d in board.similarity_search("notes minutes", k=5)] == ["b1"]
    coll.close()


def test_model_name_checked(tmp_path):
    coll = vecsift.Collection.create(tmp_path / "kb", 64, model="model-a")
    VecsiftVectorStore(HashEmbeddings(model="model-a"), coll)
    with pytest.raises(ValueError, match="differs from the collection's model"):
        VecsiftVectorStore(HashEmbeddings(model="model-b"), coll)
    coll.close()
    s = VecsiftVectorStore.from_texts(["x"], HashEmbeddings(model="model-c"), path=tmp_path / "new")
    assert s.collection.model == "model-c"
    s.close()


def test_bad_input(tmp_path):
    s = VecsiftVectorStore(HashEmbeddings(), path=tmp_path / "kb")
    with pytest.raises(ValueError, match="2 texts but 1 metadatas"):
        s.add_texts(["a", "b"], [{}])
    with pytest.raises(TypeError, match="JSON"):
        s.add_texts(["a"], [{"when": object()}])
    with pytest.raises(ValueError, match="not both or neither"):
        VecsiftVectorStore(HashEmbeddings())
    s.close()


@pytest.mark.asyncio
async def test_async_methods_do_not_block_the_event_loop(tmp_path):
    emb = HashEmbeddings(delay=0.25)  # a slow embedding API
    s = VecsiftVectorStore(emb, path=tmp_path / "kb", filter_fields=["lang"])
    ticks = 0

    async def ticker(stop):
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    stop = asyncio.Event()
    t = asyncio.create_task(ticker(stop))
    ids = await s.aadd_documents(DOCS)
    docs = await s.asimilarity_search("bm25 search", k=2, filter={"lang": "en"})
    with_scores = await s.asimilarity_search_with_score("bm25 search", k=2)
    mmr = await s.amax_marginal_relevance_search("bm25 search", k=2, fetch_k=5)
    got = await s.aget_by_ids(["d3"])
    await s.adelete(["d3"])
    stop.set()
    await t
    assert ids == [d.id for d in DOCS]
    emb.delay = 0.0
    assert docs == s.similarity_search("bm25 search", k=2, filter={"lang": "en"})
    assert [d for d, _ in with_scores] == s.similarity_search("bm25 search", k=2)
    assert mmr == s.max_marginal_relevance_search("bm25 search", k=2, fetch_k=5)
    assert got == [DOCS[2]] and s.get_by_ids(["d3"]) == []
    assert ticks >= 40  # ~1.25 s of embedding ran on threads while the loop kept ticking
    s.close()


@pytest.mark.asyncio
async def test_afrom_texts(tmp_path):
    s = await VecsiftVectorStore.afrom_texts(["alpha beta", "gamma"], HashEmbeddings(), [{"k": 1}, {"k": 2}],
                                             ids=["x", "y"], path=tmp_path / "kb")
    assert await s.asimilarity_search("gamma", k=1) == [Document(id="y", page_content="gamma", metadata={"k": 2})]
    s.close()


def test_reads_chunks_written_by_collection_add(tmp_path):
    coll = vecsift.Collection.create(tmp_path / "kb", 64)
    v = HashingEmbedder(64)(["plain chunk"])
    coll.add(["c1"], v, texts=["plain chunk"], metadata=[{"page": 3}], source="a.pdf")
    coll.commit()
    s = VecsiftVectorStore(HashEmbeddings(), coll)
    assert s.get_by_ids(["c1"]) == [Document(id="c1", page_content="plain chunk",
                                             metadata={"page": 3, "source": "a.pdf"})]
    coll.close()


@pytest.mark.asyncio
async def test_concurrent_async_adds_create_one_collection(tmp_path):
    s = VecsiftVectorStore(HashEmbeddings(delay=0.05), path=tmp_path / "kb")
    batches = [[Document(id=f"b{b}-{i}", page_content=f"text {b} {i}") for i in range(5)] for b in range(4)]
    await asyncio.gather(*(s.aadd_documents(batch) for batch in batches))
    assert sorted(s.collection.ids()) == sorted(d.id for batch in batches for d in batch)
    s.close()
