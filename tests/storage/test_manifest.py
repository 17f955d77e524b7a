"""The manifest's serialised form is a file format: a golden file pins it, old manifests still read."""
import json
from pathlib import Path

import numpy as np
import pytest

import vecsift
from vecsift import CorruptIndexError
from vecsift.storage import manifest as manifests
from vecsift.storage.framing import read_manifest, write_manifest
from vecsift.storage.manifest import PAYLOAD_MAX_BYTES, Manifest, check_payload

GOLDEN = Path(__file__).parent / "data" / "manifest_v1.json"


def sample() -> Manifest:
    return Manifest(dim=4, metric="cosine", index="hnsw",
                    index_params={"m": 8, "ef_construction": 50, "ef_search": None, "seed": 0},
                    generation=3, rows=5, model="m", pipeline_version="p1", filter_fields=["kind"],
                    created=1700000000.5, index_heading_path=True, sparse_params={"k1": 1.2, "b": 0.75},
                    vectors={"file": "vectors-0.f32", "rows": 5, "crc32c": 123},
                    dense={"file": "hnsw-3.idx", "crc32c": 456}, sparse={"file": "bm25-3.bin", "crc32c": 789},
                    segments=[{"file": "seg-1.arrow", "rows": 5, "crc32c": 42}],
                    filters={"file": "filters-3.bin", "crc32c": 7}, search_defaults={"ef": 40},
                    payload={"watermark": "0/16B3748", "n": 2})


def serialised(m: Manifest) -> str:
    return json.dumps(m.to_dict(), sort_keys=True, indent=1) + "\n"


def test_golden_file():
    # A change here changes what every collection on disk holds: bump the format, keep reading the old.
    assert serialised(sample()) == GOLDEN.read_text()
    assert Manifest.from_dict(json.loads(GOLDEN.read_text())) == sample()


def test_round_trip_through_the_framed_file(tmp_path):
    manifests.write(tmp_path, sample())
    assert manifests.read(tmp_path) == sample()


def test_old_manifest_without_the_new_fields_reads(tmp_path):
    old = json.loads(GOLDEN.read_text())
    for key in ("payload", "search_defaults", "sparse", "sparse_params", "index_heading_path"):
        old.pop(key)
    old["search_defaults"] = None
    write_manifest(tmp_path, old)
    m = manifests.read(tmp_path)
    assert m.payload == {} and m.search_defaults == {} and m.sparse is None and m.index_heading_path is False


def test_unknown_keys_survive_a_rewrite(tmp_path):
    d = dict(sample().to_dict(), written_by_a_newer_vecsift={"x": 1})
    m = Manifest.from_dict(d)
    manifests.write(tmp_path, m.replace(generation=4))
    assert read_manifest(tmp_path)["written_by_a_newer_vecsift"] == {"x": 1}


@pytest.mark.parametrize("bad", [{"format": 2}, {"format": 1}, [], {"format": 1, "dim": 4, "metric": "ip",
                                                                     "index": "bq", "index_params": {},
                                                                     "generation": "3"}])
def test_bad_manifests_are_refused(bad):
    with pytest.raises(CorruptIndexError):
        Manifest.from_dict(bad)


def test_payload_checks():
    assert check_payload({"a": [1, 2]}) == {"a": [1, 2]}
    with pytest.raises(TypeError):
        check_payload([1])
    with pytest.raises(TypeError):
        check_payload({"a": float("nan")})
    with pytest.raises(TypeError):
        check_payload({"a": object()})
    with pytest.raises(ValueError, match="limit"):
        check_payload({"a": "x" * PAYLOAD_MAX_BYTES})


def test_collection_commit_payload(tmp_path):
    rng = np.random.default_rng(0)
    c = vecsift.Collection.create(tmp_path / "c", dim=8, index="bq")
    assert c.payload == {} and c.manifest.generation == 0
    c.add(["a"], rng.standard_normal((1, 8)))
    c.commit(payload={"watermark": 10})
    assert c.payload == {"watermark": 10} and c.manifest.generation == 1
    c.commit()  # nothing to commit: no new generation, payload kept
    assert c.manifest.generation == 1
    c.commit(payload={"watermark": 11})  # a payload alone is a commit
    assert c.manifest.generation == 2
    c.add(["b"], rng.standard_normal((1, 8)))
    c.commit()
    assert c.payload == {"watermark": 11}
    with pytest.raises(ValueError):
        c.commit(payload={"x": "y" * PAYLOAD_MAX_BYTES})
    c.close()
    with vecsift.open(tmp_path / "c", readonly=True) as r:
        assert r.payload == {"watermark": 11} and len(r) == 2 and r.manifest.generation == 3
