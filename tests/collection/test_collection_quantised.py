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
    assert r._manifest.dense["codes"] == "rabitq-v1"  # the format says which codes the collection holds
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
