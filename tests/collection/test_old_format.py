"""Collections written by the previous file convention (zlib crc32 in entries and frames, version-1
row-file headers; tests/data/old_format, written by vecsift at 58f8ccd) still open, search, verify,
take new commits and compact into the CRC-32C convention."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fixture_arrays import load_array

import vecsift
from vecsift.storage.framing import read_manifest

DATA = Path(__file__).resolve().parent.parent / "data" / "old_format"
EXPECTED = json.loads((DATA / "expected.json").read_text())


def searches(c, x):
    return {"dense": [h.id for h in c.search(x[5], k=5, tenant="t1")],
            "sparse": [h.id for h in c.search(text="gamma 2", k=5, tenant="t1")],
            "where": [h.id for h in c.search(x[8], k=5, tenant="t2", where={"kind": 0})], "len": len(c)}


@pytest.mark.parametrize("index", ["bq", "hnsw"])
def test_old_collection_reads_commits_and_compacts(tmp_path, index):
    x = load_array(DATA / "vectors.json")
    path = tmp_path / index
    shutil.copytree(DATA / index, path)
    old = read_manifest(path)
    assert "crc" in old["vectors"] and "crc32c" not in old["vectors"]  # really the old convention
    with vecsift.open(path, readonly=True) as r:
        assert searches(r, x) == EXPECTED[index]
        r.verify()
    with vecsift.open(path) as w:  # the writer appends to the old vectors file: it keeps its zlib crc32
        assert searches(w, x) == EXPECTED[index]
        w.add(["n1"], x[5] + 0.01, texts=["delta"], tenant="t1", metadata=[{"kind": 1}])
        w.commit()
        m = w.manifest
        assert "crc" in m.vectors and "crc32c" in m.filters and "crc32c" in m.segments[-1]
    with vecsift.open(path, readonly=True) as r:
        r.verify()
        assert r.search(x[5], k=2, tenant="t1")[1].id in ("n1", "d5") and len(r) == EXPECTED[index]["len"] + 1
    with vecsift.open(path) as w:
        w.compact()  # every file rewritten: all CRC-32C
        m = w.manifest
        assert "crc32c" in m.vectors and all("crc32c" in s for s in m.segments) and "crc32c" in m.filters
        assert m.dense is None or "crc32c" in m.dense
    with vecsift.open(path, readonly=True) as r:
        r.verify()
        got = searches(r, x)
        assert got["sparse"] == EXPECTED[index]["sparse"] and got["where"] == EXPECTED[index]["where"]


def test_a_corrupt_old_file_is_still_refused(tmp_path):
    path = tmp_path / "bq"
    shutil.copytree(DATA / "bq", path)
    seg = sorted(path.glob("seg-*.arrow"))[0]
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0x55
    seg.write_bytes(bytes(data))
    with pytest.raises(vecsift.CorruptIndexError, match="checksum"):
        vecsift.open(path, readonly=True)
