"""Embedders attached to a collection: add(texts=...) and search(text=...) without vectors, manifest checks."""
import numpy as np
import pytest

import vecsift
from vecsift.collection.embedders import (FunctionEmbedder, HashingEmbedder, SentenceTransformerEmbedder, as_embedder,
                                          check_against, embed_query, embed_texts)

TEXTS = ["roaring bitmaps filter rows", "bm25 ranks texts by words", "hnsw graph search", "vector search engine",
         "tenants and acl groups", "hybrid search fuses bm25 with vectors"]


class Counting:
    """An embedder that records its batches (HashingEmbedder vectors)."""

    def __init__(self, dim=32, name="counting"):
        self.inner = HashingEmbedder(dim)
        self.name, self.dim, self.batch_size = name, dim, 2
        self.batches = []

    def __call__(self, texts):
        self.batches.append(list(texts))
        return self.inner(texts)


# ------------------------------------------------------------------ the embedders themselves
def test_hashing_embedder_is_deterministic_unit_and_word_sensitive():
    e = HashingEmbedder(64)
    a, b = e(TEXTS), HashingEmbedder(64)(TEXTS)
    assert a.dtype == np.float32 and a.shape == (len(TEXTS), 64)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)
    q = e.embed_query("bm25 words")
    assert int(np.argmax(a @ q)) == 1  # the text sharing both words is nearest
    assert np.linalg.norm(e([""])[0]) == pytest.approx(1.0)  # no words: still unit length
    assert e.name == "vecsift-hashing-64"
    with pytest.raises(TypeError, match="strings"):
        e([1])


def test_function_embedder_and_checks():
    f = FunctionEmbedder(lambda ts: np.ones((len(ts), 3)), name="ones", dim=3)
    assert as_embedder(f) is f and f.embed_query("x").shape == (3,)
    with pytest.raises(TypeError, match="FunctionEmbedder"):
        as_embedder(lambda ts: ts)  # a bare function has no name / dim
    with pytest.raises(TypeError, match="callable"):
        as_embedder("all-MiniLM-L6-v2")
    with pytest.raises(ValueError, match="dim must be a positive integer"):
        FunctionEmbedder(lambda ts: ts, name="x", dim=0)
    with pytest.raises(ValueError, match="name"):
        FunctionEmbedder(lambda ts: ts, name="", dim=3)
    check_against(f, "ones", 3)
    check_against(f, None, 3)  # a collection that recorded no model takes any of the right dimension
    with pytest.raises(ValueError, match="differs from the collection's model"):
        check_against(f, "other", 3)
    with pytest.raises(ValueError, match="3-d vectors, the collection holds 4-d"):
        check_against(f, "ones", 4)


def test_embed_texts_batches_and_checks_output():
    e = Counting()
    out = embed_texts(e, TEXTS[:5])
    assert [len(b) for b in e.batches] == [2, 2, 1]  # the embedder's batch_size
    np.testing.assert_array_equal(out, HashingEmbedder(32)(TEXTS[:5]))
    embed_texts(e, TEXTS, batch_size=4)
    assert [len(b) for b in e.batches[3:]] == [4, 2]
    assert embed_texts(e, []).shape == (0, 32)
    bad_shape = FunctionEmbedder(lambda ts: np.ones((len(ts), 2)), name="short", dim=3)
    with pytest.raises(ValueError, match=r"returned shape \(2, 2\), expected \(2, 3\)"):
        embed_texts(bad_shape, ["a", "b"])
    nan = FunctionEmbedder(lambda ts: np.full((len(ts), 3), np.nan), name="nan", dim=3)
    with pytest.raises(ValueError, match="non-finite"):
        embed_texts(nan, ["a"])
    with pytest.raises(ValueError, match="non-finite"):
        embed_query(nan, "a")
    with pytest.raises(TypeError, match="strings"):
        embed_texts(e, ["a", None])


def test_progress_bar_on_long_adds(capsys):
    e = HashingEmbedder(8)
    out = embed_texts(e, ["w"] * 10, batch_size=3, progress=True)
    assert out.shape == (10, 8)
    assert "embedding (vecsift-hashing-8)" in capsys.readouterr().err


def test_sentence_transformer_wrapper_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if not installed
    with pytest.raises(ImportError, match=r"vecsift\[embed\]"):
        SentenceTransformerEmbedder("all-MiniLM-L6-v2")


# ------------------------------------------------------------------ attached to a collection
def test_add_texts_without_vectors_equals_add_with_vectors(tmp_path):
    e = HashingEmbedder(32)
    ids = [f"c{i}" for i in range(len(TEXTS))]
    with vecsift.Collection.create(tmp_path / "a", embedder=e) as a, \
            vecsift.Collection.create(tmp_path / "b", 32, model=e.name) as b:
        assert a.dim == 32 and a.model == e.name and a.embedder is e
        a.add(ids, texts=TEXTS)
        b.add(ids, e(TEXTS), texts=TEXTS)
        a.commit(), b.commit()
        for q in ["bm25 words", "graph search", "acl"]:
            for mode in ("dense", "hybrid"):
                got = a.search(text=q, k=4, mode=mode)
                ref = b.search(vector=e.embed_query(q), text=q, k=4, mode=mode)
                assert [(h.id, h.score) for h in got] == [(h.id, h.score) for h in ref]
            # text only with an embedder: hybrid (the query is embedded and BM25 runs too)
            assert [h.id for h in a.search(text=q, k=4)] == [h.id for h in b.search(vector=e.embed_query(q), text=q,
                                                                                      k=4)]
            sparse = a.search(text=q, k=4, mode="sparse")
            assert [h.id for h in sparse] == [h.id for h in b.search(text=q, k=4)]
        batch = a.search_batch(texts=["graph search", "acl"], k=3, mode="dense")
        assert [[h.id for h in hs] for hs in batch] == [[h.id for h in a.search(text=t, k=3, mode="dense")]
                                                        for t in ["graph search", "acl"]]


def test_long_add_is_batched(tmp_path):
    e = Counting(dim=16)
    e.batch_size = 50
    texts = [f"text number {i} about {TEXTS[i % 6]}" for i in range(120)]
    with vecsift.Collection.create(tmp_path / "c", embedder=e) as c:
        c.add([str(i) for i in range(120)], texts=texts)
        c.commit()
        assert [len(b) for b in e.batches] == [50, 50, 20]
        assert len(c) == 120


def test_heading_path_is_embedded_with_the_text(tmp_path):
    e = Counting(dim=16)
    with vecsift.Collection.create(tmp_path / "c", embedder=e, index_heading_path=True) as c:
        c.add(["x"], texts=["body"], heading_path=[["Guide", "Install"]])
        assert e.batches == [c.text_for_embedding(["body"], heading_path=[["Guide", "Install"]])]
        assert e.batches[0][0].startswith("Guide > Install")


def test_manifest_model_and_dim_checked_on_open(tmp_path):
    e = HashingEmbedder(32)
    with vecsift.Collection.create(tmp_path / "c", embedder=e) as c:
        c.add(["a"], texts=["hello world"])
    with vecsift.open(tmp_path / "c", embedder=HashingEmbedder(32)) as c:
        assert [h.id for h in c.search(text="hello", k=1, mode="dense")] == ["a"]
    with pytest.raises(ValueError, match="differs from the collection's model"):
        vecsift.open(tmp_path / "c", embedder=HashingEmbedder(32, name="another-model"))
    with pytest.raises(ValueError, match="64-d vectors, the collection holds 32-d"):
        vecsift.open(tmp_path / "c", embedder=HashingEmbedder(64, name=e.name))
    with pytest.raises(ValueError, match="differs from the collection's model"):
        vecsift.Collection.create(tmp_path / "d", 32, model="m1", embedder=e)
    with pytest.raises(ValueError, match="collection holds 16-d"):
        vecsift.Collection.create(tmp_path / "e", 16, embedder=e)
    with vecsift.open(tmp_path / "c", readonly=True) as c:  # no embedder: vectors are needed again
        with pytest.raises(ValueError, match="mode='dense' needs vector"):
            c.search(text="hello", mode="dense")
        assert [h.id for h in c.search(text="hello", k=1)] == ["a"]  # BM25 as before


def test_add_without_vectors_or_embedder_is_refused(tmp_path):
    with vecsift.Collection.create(tmp_path / "c", 8) as c:
        with pytest.raises(ValueError, match="embedder"):
            c.add(["a"], texts=["x"])
        with pytest.raises(ValueError, match="dim"):
            vecsift.Collection.create(tmp_path / "d")
    with vecsift.Collection.create(tmp_path / "e", embedder=HashingEmbedder(8)) as c:
        with pytest.raises(ValueError, match="texts"):
            c.add(["a"])
        with pytest.raises(ValueError, match="differs from the collection's model"):
            c.set_embedder(HashingEmbedder(8, name="x"))


def test_documented_example_runs(tmp_path, monkeypatch, capsys):
    import re
    from pathlib import Path

    doc = Path(__file__).resolve().parents[2] / "docs" / "embedders.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        exec(compile(code, str(doc), "exec"), {"__name__": "docs_example"})
    assert "differs from the collection's model" in capsys.readouterr().out


def test_get_by_id_sees_what_search_sees(tmp_path):
    e = HashingEmbedder(16)
    with vecsift.Collection.create(tmp_path / "c", embedder=e) as c:
        c.add(["a", "b", "c"], texts=["one", "two", "three"], tenant=["t1", "t1", "t2"])
        c.commit()
        hits, vecs = c.get(["c", "zz", "a"], tenant="t1", with_vectors=True)
        assert [h and h.id for h in hits] == [None, None, "a"]  # t2's chunk is missing for t1
        np.testing.assert_allclose(vecs[2], e(["one"])[0], rtol=1e-6)
        assert np.isnan(vecs[:2]).all()
        with pytest.raises(ValueError, match="tenant"):
            c.get(["a"])
        c.delete(ids=["a"])
        assert c.get(["a"], tenant="t1") == [None]  # deleted: gone at once, like search
        c.add(["b"], texts=["two again"], tenant="t1")
        assert c.get(["b"], tenant="t1")[0].text == "two"  # the replacement shows at the commit, like search
        c.commit()
        assert c.get(["b"], tenant="t1")[0].text == "two again"


def test_sentence_transformer_wrapper_needs_a_portable_name(monkeypatch, tmp_path):
    import sys
    import types

    class Fake:  # stands in for sentence_transformers.SentenceTransformer (no model download in tests)
        def __init__(self, model, device=None):
            self.model = model

        def get_embedding_dimension(self):
            return 8

        def encode(self, texts, **kw):
            assert kw["normalize_embeddings"] is True
            return HashingEmbedder(8)(texts).astype(np.float64)

    monkeypatch.setitem(sys.modules, "sentence_transformers", types.SimpleNamespace(SentenceTransformer=Fake))
    e = SentenceTransformerEmbedder("org/some-model")
    assert (e.name, e.dim) == ("org/some-model", 8)
    out = e(["a b", "c"])
    assert out.dtype == np.float32 and out.shape == (2, 8)
    with pytest.raises(ValueError, match="give name="):
        SentenceTransformerEmbedder(str(tmp_path))  # a local path names nothing portable
    assert SentenceTransformerEmbedder(str(tmp_path), name="org/some-model").name == "org/some-model"
    with vecsift.Collection.create(tmp_path / "c", embedder=e) as c:
        c.add(["x"], texts=["a b"])
        c.commit()
        assert c.search(text="a b", k=1, mode="dense")[0].score == pytest.approx(1.0, abs=1e-5)
