"""Collections with quantised codes (index="bq", bits=...): recall, policies, reopen, compaction, old files."""
import os

import numpy as np
import pytest

import vecsift
from tests import docstring_data


def recall(rows, truth):
    return np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(rows, truth)])


@pytest.fixture(scope="module")
def real():
    _, _, _, dv, qv = docstring_data.load()
    truth, _ = vecsift.exact_search(dv, qv[:200], 10, "cosine")
    return dv, qv[:200], truth


def make(path, dv, **kw):
    c = vecsift.Collection.create(path, dv.shape[1], **kw)
    c.add([f"id{i}" for i in range(len(dv))], dv)
    c.commit()
    return c


@pytest.mark.parametrize("kw,target", [
    (dict(), 0.98), (dict(bits=2, policy="fixed"), 0.98), (dict(bits=1), 0.97), (dict(bits=4, rescore="none"), 0.93),
    (dict(bits=2, policy="bound", oversample=4), 0.98),
])
def test_recall_and_reopen(tmp_path, real, kw, target):
    dv, qv, truth = real
    c = make(tmp_path / "c", dv, **kw)
    assert c.index_params["bits"] == kw.get("bits", 2)
    rows, scores = c.search_rows(qv, k=10)
    assert recall(rows, truth) >= target
    c.close()
    r = vecsift.open(tmp_path / "c", readonly=True)
    rows2, scores2 = r.search_rows(qv, k=10)
    np.testing.assert_array_equal(rows, rows2)
    np.testing.assert_array_equal(scores, scores2)
    assert r._manifest.dense["codes"] == "rabitq-v2"  # the format says which codes the collection holds
    assert r._dense.index.screens == (c.index_params["bits"] in (2, 4))  # rows carry the screen's factors
    r.close()


def test_default_policy_rescores_at_most_40_rows(tmp_path, real):
    dv, qv, truth = real
    c = make(tmp_path / "c", dv, bits=2)
    dense = c._dense
    rows, scores = c.search_rows(qv, k=10)
    exact = vecsift.exact_search(dv, qv, 10, "cosine")[1]
    # Rescored scores are exact similarities.
    np.testing.assert_allclose(scores[:, 0], exact[:, 0], rtol=1e-5, atol=1e-5)
    assert dense.rescored <= 40 * len(qv)
    c.close()


def test_bound_policy_rescores_fewer_rows_than_fixed(tmp_path, real):
    dv, qv, truth = real
    from vecsift.collection.stages.quant_dense import QuantBQDense

    fixed = QuantBQDense.create(str(tmp_path), 0, dv.shape[1], "cosine",
                                vecsift.collection.stages.quant_dense.normalise_params({"bits": 2, "oversample": 4, "policy": "fixed"}))
    bound = QuantBQDense.create(str(tmp_path), 1, dv.shape[1], "cosine",
                                vecsift.collection.stages.quant_dense.normalise_params(
                                    {"bits": 2, "oversample": 4, "policy": "bound"}))
    unit = dv / np.linalg.norm(dv, axis=1, keepdims=True)
    q = qv / np.linalg.norm(qv, axis=1, keepdims=True)
    for d in (fixed, bound):
        d.stage(unit)
        d.publish()
    rf, _ = fixed.search(unit, q, 10, None, len(unit))
    rb, _ = bound.search(unit, q, 10, None, len(unit))
    assert bound.rescored < fixed.rescored == 40 * len(q)
    assert recall(rb, truth) >= recall(rf, truth) - 0.01
    fixed.close()
    bound.close()


def test_sign_bit_collections_still_open_and_search_unchanged(tmp_path, real):
    dv, qv, _ = real
    c = make(tmp_path / "old", dv, bits=None)  # the parameters today's release writes
    assert c.index_params == {"oversample": 16}
    before = c.search_rows(qv, k=10)
    c.close()
    assert any(n.startswith("codes-") and n.endswith(".bin") for n in os.listdir(tmp_path / "old"))
    r = vecsift.open(tmp_path / "old")
    after = r.search_rows(qv, k=10)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])
    # Sign bits: Hamming candidates, then exact rescoring (the BinaryIndex path).
    from vecsift.collection.stages.dense import BQDense
    assert isinstance(r._dense, BQDense)
    r.close()


def test_adds_after_reopen_use_the_stored_centroid_and_compaction_works(tmp_path, real):
    dv, qv, truth = real
    c = vecsift.Collection.create(tmp_path / "c", dv.shape[1], bits=1)
    half = len(dv) // 2
    c.add([f"id{i}" for i in range(half)], dv[:half])
    c.commit()
    c.close()
    c = vecsift.open(tmp_path / "c")
    c.add([f"id{i}" for i in range(half, len(dv))], dv[half:])
    c.commit()
    assert recall(c.search_rows(qv, k=10)[0], truth) >= 0.95
    c.delete(ids=[f"id{i}" for i in range(0, len(dv), 2)])
    c.commit()
    c.compact()
    hits = c.search(qv[0], k=5)
    assert all(int(h.id[2:]) % 2 == 1 for h in hits)
    c.close()


def test_rabitq_v1_collections_open_append_and_search_without_the_screen(tmp_path, real, monkeypatch):
    # A collection written before the screen ("rabitq-v1": rows of planes + 5 factors) keeps its
    # format: it opens, searches as the full scan does, takes more rows in the same format and
    # compacts; a new collection gets the top-plane factors and the same answers.
    from vecsift.collection.stages.quant_dense import QuantBQDense
    from vecsift.storage.rowfile import RowFile

    def create_v1(cls, directory, gen, dim, metric, params):
        index = cls._new_index(dim, metric, params)
        rf = RowFile.create(os.path.join(directory, f"codes-{gen}.q"), "qcodes", "uint8",
                            cls.width(index, "rabitq-v1"))
        return cls(dim, metric, params, rf, index, fmt="rabitq-v1")

    dv, qv, truth = real
    half = len(dv) // 2
    with monkeypatch.context() as m:
        m.setattr(QuantBQDense, "create", classmethod(create_v1))
        old = make(tmp_path / "old", dv[:half], bits=2)
        old.close()
    new = make(tmp_path / "new", dv[:half], bits=2)
    old = vecsift.open(tmp_path / "old")
    assert old._manifest.dense["codes"] == "rabitq-v1" and not old._dense.index.screens
    assert new._manifest.dense["codes"] == "rabitq-v2" and new._dense.index.screens
    assert os.path.getsize(old._dense.codes.path) < os.path.getsize(new._dense.codes.path)
    for c in (old, new):
        c.add([f"id{i}" for i in range(half, len(dv))], dv[half:])
        c.commit()
    a = [old.search_rows(v[None], k=10)[0][0] for v in qv]
    b = [new.search_rows(v[None], k=10)[0][0] for v in qv]
    assert np.mean([np.array_equal(x, y) for x, y in zip(a, b)]) >= 0.98
    assert recall(a, truth) >= 0.97 and recall(b, truth) >= 0.97
    old.close()
    old = vecsift.open(tmp_path / "old", readonly=True)
    assert old._manifest.dense["codes"] == "rabitq-v1" and len(old._dense.index) == len(dv)
    assert recall(old.search_rows(qv, k=10)[0], truth) >= 0.97
    old.close()
    new.close()
    old = vecsift.open(tmp_path / "old")  # compacting rewrites the codes in the current format
    old.delete(ids=[f"id{len(dv) - 1}"])
    old.commit()
    old.compact()
    assert old._manifest.dense["codes"] == "rabitq-v2" and old._dense.index.screens
    assert recall(old.search_rows(qv, k=10)[0], truth) >= 0.96
    old.close()


def test_corrupt_model_file_is_refused(tmp_path, real):
    dv, _, _ = real
    c = make(tmp_path / "c", dv[:200], bits=2)
    c.close()
    model = next(n for n in os.listdir(tmp_path / "c") if n.startswith("quant-"))
    p = tmp_path / "c" / model
    data = bytearray(p.read_bytes())
    data[100] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(vecsift.CorruptIndexError):
        vecsift.open(tmp_path / "c")


@pytest.mark.parametrize("kw,word", [(dict(bits=3), "bits"), (dict(bits=2, query_bits=9), "query_bits"),
                                     (dict(bits=2, rescore="fp16"), "rescore"), (dict(bits=2, policy="x"), "policy"),
                                     (dict(bits=2, oversample=0), "oversample")])
def test_bad_parameters(tmp_path, kw, word):
    with pytest.raises(ValueError, match=word):
        vecsift.Collection.create(tmp_path / "c", 16, **kw)
