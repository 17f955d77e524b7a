"""Collection: create/open, add/replace, search against numpy, deletes, compaction, bad input."""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import vecsift
from vecsift import _core

from collection_util import clustered, exact_ref, ids_of, unit


def make(tmp_path, n=3000, dim=48, metric="cosine", seed=0, name="c", **kw):
    x = clustered(n, dim, seed)
    c = vecsift.Collection.create(tmp_path / name, dim, metric=metric, **kw)
    c.add([f"id{i}" for i in range(n)], x, texts=[f"text {i}" for i in range(n)],
          doc_ids=[f"doc{i // 5}" for i in range(n)])
    c.commit()
    return c, x


def test_create_records_settings_and_reopens(tmp_path):
    c = vecsift.Collection.create(tmp_path / "c", 16, metric="ip", index="bq", model="minilm",
                                  pipeline_version="p1", oversample=3)
    c.close()
    c = vecsift.open(tmp_path / "c")
    assert (c.dim, c.metric, c.index, c.model, c.pipeline_version) == (16, "ip", "bq", "minilm", "p1")
    assert c.index_params == {"oversample": 3}
    assert len(c) == 0 and c.search(np.ones(16), k=3) == []
    c.close()
    with pytest.raises(FileExistsError):
        vecsift.Collection.create(tmp_path / "c", 16)
    with pytest.raises(ValueError, match="unknown index parameters"):
        vecsift.Collection.create(tmp_path / "d", 16, ef_construction=3)
    with pytest.raises(ValueError, match="metric"):
        vecsift.Collection.create(tmp_path / "e", 16, metric="dot")


@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
def test_small_allow_sets_are_exact(tmp_path, metric):
    # 1500 rows: below the exact-scan threshold, so every search scores all rows
    c, x = make(tmp_path, n=1500, metric=metric)
    q = clustered(20, 48, seed=9)
    rows, scores = c.search_rows(q, k=10)
    ref_rows, ref_scores = exact_ref(x, q, 10, metric)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-4, atol=1e-3)
    assert (rows == ref_rows).mean() > 0.99  # equal up to float ties
    hits = c.search(q[0], k=10)
    assert ids_of(hits) == [f"id{r}" for r in rows[0]]
    assert [h.score for h in hits] == pytest.approx(list(scores[0]), rel=1e-6)
    c.close()


@pytest.mark.parametrize("metric", ["cosine", "ip"])
def test_bq_is_hamming_candidates_then_exact_rescore(tmp_path, metric):
    n, dim, k, over = 6000, 64, 10, 4
    c, x = make(tmp_path, n=n, dim=dim, metric=metric)
    q = clustered(30, dim, seed=5)
    rows, scores = c.search_rows(q, k=k, oversample=over)
    # reference: Hamming top k*over of the stored rows, rescored with numpy
    base = unit(x) if metric == "cosine" else x
    qq = unit(q) if metric == "cosine" else q
    bi = vecsift.BinaryIndex(dim)
    bi.add(base)
    cand, _ = bi.search(qq, k * over)
    for i in range(len(q)):
        s = base[cand[i]] @ qq[i]
        order = np.argsort(-s, kind="stable")[:k]
        np.testing.assert_allclose(scores[i], s[order], rtol=1e-5, atol=1e-5)
        assert set(rows[i]) == set(cand[i][order]) or np.allclose(np.sort(s[order]), np.sort(scores[i]))
    # more candidates never hurt recall against exact search; all rows as candidates is exact
    truth, _ = exact_ref(x, q, k, metric)
    rec = [np.mean([len(set(c.search_rows(q, k=k, oversample=o)[0][i]) & set(truth[i])) / k
                    for i in range(len(q))]) for o in (1, 4, 16, 600)]
    assert rec[0] <= rec[1] <= rec[2] <= rec[3] == 1.0
    c.close()


def test_cosine_score_of_own_vector_is_one_and_scores_descend(tmp_path):
    c, x = make(tmp_path)
    hits = c.search(x[42] * 7.0, k=5)
    assert hits[0].id == "id42" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))
    assert hits[0].text == "text 42" and hits[0].doc_id == "doc8" and hits[0].dense_rank == 1
    c.close()


def test_adds_are_visible_after_commit_and_close_commits(tmp_path):
    c = vecsift.Collection.create(tmp_path / "c", 8)
    v = np.eye(8, dtype=np.float32)
    c.add(["a", "b"], v[:2])
    assert len(c) == 0 and c.search(v[0], k=2) == []
    c.commit()
    assert len(c) == 2 and c.search(v[0], k=1)[0].id == "a"
    c.add(["c"], v[2:3])
    c.close()
    with vecsift.open(tmp_path / "c") as c:
        assert sorted(c.ids()) == ["a", "b", "c"]
        c.add(["d"], v[3:4])
    with vecsift.open(tmp_path / "c", readonly=True) as c:
        assert sorted(c.ids()) == ["a", "b", "c", "d"]


def test_readd_replaces_the_chunk(tmp_path):
    c = vecsift.Collection.create(tmp_path / "c", 8)
    v = np.eye(8, dtype=np.float32)
    c.add(["a", "b"], v[:2], texts=["old a", "b"])
    c.commit()
    c.add(["a"], v[5:6], texts=["new a"])
    assert c.search(v[0], k=1)[0].text == "old a"  # replacement lands with the commit
    c.commit()
    assert len(c) == 2 and sorted(c.ids()) == ["a", "b"]
    top = c.search(v[5], k=2)
    assert top[0].id == "a" and top[0].text == "new a" and top[0].score == pytest.approx(1.0)
    assert all(h.text != "old a" for h in c.search(v[0], k=10))
    # replaced twice before one commit: only the last survives
    c.add(["b"], v[6:7], texts=["b2"])
    c.add(["b"], v[7:8], texts=["b3"])
    c.commit()
    assert len(c) == 2 and [h.text for h in c.search(v[7], k=1)] == ["b3"]
    c.close()
    with vecsift.open(tmp_path / "c") as c:
        assert len(c) == 2 and c.search(v[5], k=1)[0].text == "new a"


def test_delete_by_id_and_doc_id_everywhere_and_persisted(tmp_path):
    c, x = make(tmp_path)
    assert c.delete(doc_ids=["doc3"]) == 5  # ids 15..19
    assert c.delete(ids=["id0", "id15", "nope"]) == 1
    gone = {"id0", "id15", "id16", "id17", "id18", "id19"}
    for i in (0, 15, 17):
        assert not gone & set(ids_of(c.search(x[i], k=50)))
    assert len(c) == 3000 - 6
    rows, _ = c.search_rows(x[:20], k=30)
    assert not set(rows.ravel().tolist()) & {0, 15, 16, 17, 18, 19}
    c.close()
    c = vecsift.open(tmp_path / "c")
    assert len(c) == 2994 and not gone & set(c.ids())
    assert not gone & set(ids_of(c.search(x[16], k=50)))
    # deleted ids can be added again
    c.add(["id16"], x[16:17])
    c.commit()
    assert c.search(x[16], k=1)[0].id == "id16"
    c.close()


def test_deleted_rows_do_not_shorten_results(tmp_path):
    c, x = make(tmp_path, n=3000)
    c.delete(ids=[f"id{i}" for i in range(0, 3000, 2)])
    c.commit()
    for hits in c.search_batch(x[:10], k=25):
        assert len(hits) == 25 and all(int(h.id[2:]) % 2 == 1 for h in hits)
    c.close()


def test_compact_removes_deleted_bytes_and_keeps_results(tmp_path):
    c, x = make(tmp_path, n=3000, dim=32)
    victim = x[123].copy()
    c.delete(doc_ids=[f"doc{i}" for i in range(0, 600, 2)])  # 1500 rows
    c.commit()
    q = clustered(10, 32, seed=3)
    before = c.search_batch(q, k=10)
    c.compact()
    after = c.search_batch(q, k=10)
    assert [ids_of(h) for h in before] == [ids_of(h) for h in after]
    assert len(c) == 1500
    c.close()
    files = os.listdir(tmp_path / "c")
    vec_file = [f for f in files if f.startswith("vectors-")]
    assert len(vec_file) == 1
    data = (tmp_path / "c" / vec_file[0]).read_bytes()
    assert unit(victim).tobytes() not in data  # physically gone
    assert unit(x[5]).tobytes() in data  # doc1 kept
    with vecsift.open(tmp_path / "c") as c:
        assert len(c) == 1500 and [ids_of(h) for h in c.search_batch(q, k=10)] == [ids_of(h) for h in after]
        c.verify()


def test_hits_carry_metadata_and_provenance(tmp_path):
    c = vecsift.Collection.create(tmp_path / "c", 4, pipeline_version="pv2", filter_fields=["doc_type", "lang"])
    v = np.eye(4, dtype=np.float32)
    c.add(["a", "b", "c"], v[:3], texts=["A", "B", "C"], display_texts=["shown A", None, None],
          metadata=[{"lang": "en", "n": 1}, {"lang": "de"}, {"n": 3, "source": "s3.md"}],
          heading_path=[["Intro", "Setup"], None, None], char_range=[(0, 10), (5, 9), None],
          date="2026-12-01", version="v1", doc_type=["faq", "guide", "faq"], source=["a.md", "b.md", None])
    c.commit()
    h = c.search(v[0], k=1)[0]
    assert h.text == "shown A" and h.metadata == {"lang": "en", "n": 1}
    assert h.heading_path == "Intro > Setup" and h.char_range == (0, 10) and h.source == "a.md"
    assert h.provenance["date"] == "2026-12-01" and h.provenance["pipeline_version"] == "pv2"
    assert h.doc_type == "faq"
    h3 = c.search(v[2], k=1)[0]
    assert h3.source == "s3.md" and h3.metadata == {"n": 3} and h3.char_range is None
    assert ids_of(c.search(v[0], k=3, where={"doc_type": "faq"})) == ["a", "c"]
    assert ids_of(c.search(v[0], k=3, where={"lang": ["de", "fr"]})) == ["b"]
    assert ids_of(c.search(v[0], k=3, where={"doc_type": "faq", "lang": "en"})) == ["a"]
    assert c.search(v[0], k=3, where={"lang": []}) == []
    with pytest.raises(ValueError, match="unknown filter field"):
        c.search(v[0], where={"colour": "red"})
    c.close()


def test_where_matches_numpy_filtered_exact(tmp_path):
    n, dim = 8000, 32
    x = clustered(n, dim, seed=4)
    kinds = np.array(["a", "b", "c", "d"])[np.arange(n) % 4]
    year = 2000 + (np.arange(n) % 7)
    c = vecsift.Collection.create(tmp_path / "c", dim, filter_fields=["kind", "year"])
    c.add([f"r{i}" for i in range(n)], x, metadata={"kind": kinds, "year": year})
    c.commit()
    q = clustered(8, dim, seed=8)
    allowed = np.flatnonzero((kinds == "b") & np.isin(year, [2001, 2003]))
    rows, scores = c.search_rows(q, k=10, where={"kind": "b", "year": [2001, 2003]})
    ref, ref_s = exact_ref(x, q, 10, "cosine", allowed)
    assert set(rows.ravel()) <= set(allowed)
    np.testing.assert_allclose(scores, ref_s, atol=1e-4)  # few allowed rows: exact
    # a broad filter goes through the Hamming stage and still only returns allowed rows
    rows, _ = c.search_rows(q, k=10, where={"kind": ["a", "b", "c"]})
    assert (rows >= 0).all() and not np.isin(rows, np.flatnonzero(kinds == "d")).any()
    c.close()


def test_bad_input(tmp_path):
    c = vecsift.Collection.create(tmp_path / "c", 4, model="m1")
    v = np.eye(4, dtype=np.float32)
    with pytest.raises(ValueError, match="NaN"):
        c.add(["a"], [[np.nan, 0, 0, 1]])
    with pytest.raises(ValueError, match="duplicate id"):
        c.add(["a", "b", "a"], v[:3])
    with pytest.raises(ValueError, match="dimension"):
        c.add(["a"], np.ones((1, 5)))
    with pytest.raises(ValueError, match="model"):
        c.add(["a"], v[:1], model="m2")
    with pytest.raises(ValueError, match="2 ids but 3"):
        c.add(["a", "b"], v[:3])
    with pytest.raises(TypeError):
        c.add([1, 2], v[:2])
    with pytest.raises(ValueError):
        c.add([None], v[:1])
    with pytest.raises(ValueError, match="texts has 1 entries"):
        c.add(["a", "b"], v[:2], texts=["x"])
    c.add(["a"], v[:1], model="m1")
    c.commit()
    assert len(c) == 1  # failed adds left nothing behind
    with pytest.raises(ValueError, match="NaN"):
        c.search([np.nan, 0, 0, 0])
    with pytest.raises(ValueError, match="dimension"):
        c.search(np.ones(3))
    with pytest.raises(ValueError):
        c.search(v[0], k=0)
    with pytest.raises(ValueError):
        c.search(v[0], oversample=0)
    with pytest.raises(ValueError, match="delete needs"):
        c.delete()
    c.close()
    with pytest.raises(vecsift.VecsiftError, match="closed"):
        c.search(v[0])


def test_add_table_record_batch_and_parquet(tmp_path):
    n, dim = 500, 8
    x = clustered(n, dim, seed=2)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), dim)
    table = pa.table({"id": [f"t{i}" for i in range(n)], "vector": vec, "text": [f"txt{i}" for i in range(n)],
                      "doc_id": [f"d{i % 50}" for i in range(n)], "tenant": ["acme"] * n,
                      "doc_type": ["faq"] * n, "score_hint": np.arange(n)})
    view = vecsift.collection.ingest.vectors_from_column(table["vector"])
    assert np.shares_memory(view, np.frombuffer(vec.values.buffers()[1], dtype=np.float32))  # zero-copy
    c = vecsift.Collection.create(tmp_path / "c", dim)
    c.add_table(table)
    c.add_table(table.slice(0, 100).to_batches()[0])  # replaces t0..t99
    path = tmp_path / "more.parquet"
    pq.write_table(table.set_column(0, "id", pa.array([f"p{i}" for i in range(n)])), path)
    c.add_table(str(path))
    c.commit()
    assert len(c) == 2 * n
    h = c.search(x[7], k=1, tenant="acme")[0]
    assert h.id in ("t7", "p7") and h.metadata == {"score_hint": 7} and h.tenant == "acme" and h.doc_type == "faq"
    with pytest.raises(ValueError, match="missing column"):
        c.add_table(table.drop_columns(["vector"]))
    with pytest.raises(TypeError, match="fixed_size_list"):
        c.add_table(table.set_column(1, "vector", pa.array([list(r) for r in x])))
    c.close()


def test_large_add_is_columnar(tmp_path):
    # 100k rows with metadata, tenant and acl columns in one call (no per-row Python in the hot path)
    n, dim = 100_000, 8
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    ids = np.char.add("r", np.arange(n).astype(str))
    c = vecsift.Collection.create(tmp_path / "c", dim, filter_fields=["kind"])
    c.add(ids, x, tenant=np.array(["t0", "t1"])[np.arange(n) % 2], metadata={"kind": np.arange(n) % 3},
          acl=pa.array([["g"]] * n))
    half = np.arange(50_000)
    c.add(ids[:50_000], x[:50_000], tenant=np.array(["t0", "t1"])[half % 2], metadata={"kind": half % 3},
          acl=[["g"]] * 50_000)  # replace half in one vectorised pass
    c.commit()
    assert len(c) == n
    hits = c.search(x[1], k=3, tenant="t1", groups=["g"], where={"kind": 1})
    assert hits and all(h.tenant == "t1" and h.metadata["kind"] == 1 for h in hits)
    c.close()


def test_info_search_defaults_and_tuning_hooks(tmp_path):
    c, x = make(tmp_path, n=3000, dim=32)
    c.delete(ids=["id1"])
    c.set_search_defaults(oversample=2)
    c.commit()
    info = c.info()
    assert info["rows"] == 2999 and info["deleted"] == 1 and info["search_defaults"] == {"oversample": 2}
    assert info["bytes_on_disk"] > info["float32_bytes_on_disk"] == 3000 * 32 * 4
    q = clustered(5, 32, seed=1)
    assert (c.search_rows(q, k=10)[0] == c.search_rows(q, k=10, oversample=2)[0]).all()
    rows, scores = c.snapshot().exact(q, 10)
    ref, ref_s = exact_ref(x, q, 10, "cosine", allowed=[i for i in range(3000) if i != 1])
    np.testing.assert_allclose(scores, ref_s, atol=1e-4)
    own, sample = c.snapshot().sample_rows(7, seed=3)
    assert 1 not in own and np.allclose(sample, unit(x[own]), atol=1e-6)
    with pytest.raises(ValueError):
        c.set_search_defaults(ef=0)
    c.close()
    with vecsift.open(tmp_path / "c", readonly=True) as r:
        assert r.info()["search_defaults"] == {"oversample": 2}
        assert r.search(x[5], k=1)[0].to_dict()["id"] == "id5"
