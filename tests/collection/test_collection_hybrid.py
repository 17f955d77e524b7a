"""Text in the collection: BM25 next to the vectors, hybrid RRF, indexed vs displayed text.

Real data: the committed docstring set (Python standard-library docstrings
with all-MiniLM-L6-v2 embeddings of them and of a one-line query for each).
"""
import numpy as np
import pytest

import vecsift
from vecsift.text.bm25 import BM25Index
from vecsift.text.fusion import rrf

import docstring_data

NQ = 200


@pytest.fixture(scope="module")
def docset():
    docs, queries, qrels, dv, qv = docstring_data.load()
    rel = {}
    for r in qrels:
        rel.setdefault(r["qid"], set()).add(r["row"])
    return docs, queries[:NQ], rel, dv, qv[:NQ]


@pytest.fixture
def coll(tmp_path, docset):
    docs, _, _, dv, _ = docset
    c = vecsift.Collection.create(tmp_path / "d", dv.shape[1], model="all-MiniLM-L6-v2")
    c.add([f"doc{d['row']}" for d in docs], dv, texts=[d["text"] for d in docs],
          doc_ids=[d["name"] for d in docs], source=[d["name"] for d in docs])
    c.commit()
    yield c
    c.close()


def hit_rate(results, queries, rel, k=10):
    return np.mean([bool({int(h.id[3:]) for h in hits[:k]} & rel[q["qid"]]) for hits, q in zip(results, queries)])


def test_modes_ranks_and_quality(coll, docset):
    docs, queries, rel, dv, qv = docset
    texts = [q["text"] for q in queries]
    dense = coll.search_batch(qv, k=10)
    sparse = coll.search_batch(texts=texts, k=10)
    hybrid = coll.search_batch(qv, texts, k=10)
    assert all(h.dense_rank == i + 1 and h.sparse_rank is None for hits in dense for i, h in enumerate(hits))
    assert all(h.sparse_rank == i + 1 and h.dense_rank is None for hits in sparse for i, h in enumerate(hits))
    assert all(h.dense_rank or h.sparse_rank for hits in hybrid for h in hits)
    assert all(a.score >= b.score for hits in sparse + hybrid for a, b in zip(hits, hits[1:]))
    rates = {m: hit_rate(r, queries, rel) for m, r in (("dense", dense), ("sparse", sparse), ("hybrid", hybrid))}
    # measured when written (first 200 queries): dense 0.815, sparse 0.765, hybrid 0.85
    assert rates["hybrid"] >= max(rates["dense"], rates["sparse"]) - 0.01, rates
    assert rates["dense"] >= 0.8 and rates["sparse"] >= 0.75 and rates["hybrid"] >= 0.83, rates
    # single queries run BM25 inline, large batches on a helper thread: the same hits either way
    for i in range(3, NQ, 25):
        assert coll.search(qv[i], texts[i], k=10) == hybrid[i]
        assert coll.search_batch(qv[i:i + 2], texts[i:i + 2], k=10, threads=1)[0] == hybrid[i]
    assert [h.id for h in coll.search(text=texts[3], k=5)] == [h.id for h in sparse[3][:5]]
    assert [h.id for h in coll.search(qv[3], texts[3], k=5, mode="dense")] == [h.id for h in dense[3][:5]]


def test_hybrid_is_rrf_of_the_two_candidate_lists(coll, docset):
    docs, queries, _, dv, qv = docset
    bm = BM25Index()
    bm.add([d["text"] for d in docs])
    for i in range(0, NQ, 20):
        text = queries[i]["text"]
        drows, _ = coll.search_rows(qv[i], k=50)
        srows, _ = bm.search(text, k=50)
        ids, scores = rrf([drows[0], srows], k=30, weights=[1.0, 2.0], top_n=10)
        hits = coll.search(qv[i], text, k=10, candidates=50, rrf_k=30, weights=[1.0, 2.0])
        assert [h.id for h in hits] == [f"doc{r}" for r in ids]
        assert [h.score for h in hits] == pytest.approx(list(scores))
        sparse = coll.search(text=text, k=10)
        s_rows, s_scores = bm.search(text, k=10)
        assert [h.id for h in sparse] == [f"doc{r}" for r in s_rows]
        assert [h.score for h in sparse] == pytest.approx(list(s_scores), rel=1e-5)


def test_mode_errors(coll, docset):
    qv = docset[4]
    with pytest.raises(ValueError, match="needs text"):
        coll.search(qv[0], mode="hybrid")
    with pytest.raises(ValueError, match="needs vector"):
        coll.search(text="x", mode="dense")
    with pytest.raises(ValueError, match="mode must be"):
        coll.search(qv[0], mode="both")
    with pytest.raises(ValueError, match="vector=... and/or text"):
        coll.search()
    with pytest.raises(ValueError, match="candidates"):
        coll.search(qv[0], "abc", k=20, candidates=10)
    assert coll.search(text="zzzqqqnotaword", k=5) == []  # no query term: nothing, not zero scores


def test_deletes_reach_bm25_and_persist(tmp_path, coll, docset):
    docs, queries, _, dv, qv = docset
    text = queries[0]["text"]
    top = coll.search(text=text, k=3)
    victim = top[0]
    coll.delete(doc_ids=[victim.doc_id])
    for mode in ("sparse", "hybrid", "dense"):
        assert victim.id not in [h.id for h in coll.search(qv[0], text, k=50, mode=mode)]
    coll.commit()
    after = [h.id for h in coll.search(text=text, k=10)]
    path = coll.path
    coll.close()
    with vecsift.open(path) as c:
        assert [h.id for h in c.search(text=text, k=10)] == after
        c.compact()
        assert [h.id for h in c.search(text=text, k=10)] == after
    with vecsift.open(path, readonly=True) as c:
        assert [h.id for h in c.search(text=text, k=10)] == after


def test_canary_in_every_mode(tmp_path, docset):
    docs, queries, _, dv, qv = docset
    n = 400
    c = vecsift.Collection.create(tmp_path / "canary", dv.shape[1])
    c.add([f"doc{i}" for i in range(n)], dv[:n], texts=[d["text"] for d in docs[:n]],
          acl=[["staff"] if i % 2 else ["staff", "eng"] for i in range(n)], tenant="acme")
    phrase = "the zebra-orchid-7781 canary phrase"
    canary_vec = dv[n]
    c.add(["canary"], canary_vec[None], texts=[phrase], acl=[["G"]], tenant="acme")
    c.commit()
    for groups in ([], ["staff"], ["staff", "eng"], ["g"], ["GG"]):
        for k in (1, 10, n + 5):
            for mode in ("dense", "sparse", "hybrid"):
                hits = c.search(canary_vec, phrase, k=k, mode=mode, tenant="acme", groups=groups,
                                candidates=max(k, 100))
                assert "canary" not in [h.id for h in hits]
                assert all(phrase not in (h.text or "") for h in hits)
    for mode in ("dense", "sparse", "hybrid"):
        assert c.search(canary_vec, phrase, k=1, mode=mode, tenant="acme", groups=["G"])[0].id == "canary"
        assert c.search(canary_vec, phrase, k=5, mode=mode, tenant="other", groups=["G"]) == []
    c.close()


def test_indexed_text_display_text_and_heading_path(tmp_path):
    v = np.eye(4, dtype=np.float32)
    c = vecsift.Collection.create(tmp_path / "h", 4, index_heading_path=True)
    c.add(["a", "b"], v[:2], texts=["situating note: quokka habitat. chunk body", "plain body"],
          display_texts=["chunk body", "shown wombat"], heading_path=[["Fauna", "Marsupials"], None])
    c.commit()
    assert [h.id for h in c.search(text="quokka", k=5)] == ["a"]  # indexed text is searched ...
    assert c.search(text="quokka", k=5)[0].text == "chunk body"  # ... the display text is shown
    assert c.search(text="wombat", k=5) == []  # display text is not indexed
    assert [h.id for h in c.search(text="marsupials", k=5)] == ["a"]  # heading path is indexed
    assert c.text_for_embedding(["body"], heading_path=["Fauna > Marsupials"]) == ["Fauna > Marsupials\nbody"]
    c.close()
    with vecsift.open(tmp_path / "h") as c:
        assert c.index_heading_path and [h.id for h in c.search(text="marsupials", k=5)] == ["a"]


def test_compact_with_rows_without_text(tmp_path):
    v = np.eye(6, dtype=np.float32)
    c = vecsift.Collection.create(tmp_path / "m", 6)
    c.add(list("abcdef"), v, texts=["alpha one", None, "gamma one", None, "epsilon one", "zeta two"])
    c.commit()
    c.delete(ids=["a", "d"])
    c.compact()
    assert sorted(c.ids()) == list("bcef")
    assert {h.id for h in c.search(text="one", k=10)} == {"c", "e"}
    assert [h.id for h in c.search(text="zeta", k=10)] == ["f"]
    assert c.search(v[5], "zeta", k=1)[0].id == "f"
    c.close()
