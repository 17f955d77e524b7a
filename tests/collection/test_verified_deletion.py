"""Verified deletion: after delete() + compact(), no byte of a deleted chunk's text, float32 vector or
codes remains in any file of the collection directory (every file is scanned, audit logs included).

Each test also checks the scan itself: the surviving chunks' bytes ARE found, so a scan that
looked at the wrong files or encodings would fail rather than pass vacuously."""
import os

import numpy as np
import pytest

import vecsift

DIM = 64  # float32 rows of 256 bytes, sign codes of 8 bytes, 2-bit codes of 16 + 20 bytes
KINDS = {"hnsw": dict(index="hnsw", m=8, ef_construction=40), "bq": dict(index="bq"),
         "bq-sign": dict(index="bq", bits=None)}


def token(i):
    return f"qzx{i:05d}vk"  # one BM25 term, and a byte string no other chunk holds


def text(i):
    return f"chunk {i} mentions {token(i)} and the phrase secret-{i * 7919:08d}-payload"


def display(i):
    return f"shown as wqd{i:05d}ph"


def build(path, kind, n=240, audit=False):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    c = vecsift.Collection.create(path, DIM, metric="cosine", filter_fields=["kind"], audit=audit, **KINDS[kind])
    half = n // 2  # two commits: two segments, a grown graph / codes file
    for lo, hi in ((0, half), (half, n)):
        ids = [f"c{i}" for i in range(lo, hi)]
        c.add(ids, x[lo:hi], texts=[text(i) for i in range(lo, hi)], display_texts=[display(i) for i in range(lo, hi)],
              doc_ids=[f"d{i // 4}" for i in range(lo, hi)],
              tenant="t", acl=[["g"]] * (hi - lo), metadata={"kind": np.arange(lo, hi) % 3})
        c.commit()
    return c


def stored_bytes(c, rows):
    """{row: (float32 bytes as stored, codes bytes as stored)} read from the committed files."""
    snap = c.snapshot()
    out = {}
    codes = getattr(snap.dense, "codes", None)
    raw = open(codes.path, "rb").read() if codes is not None else b""
    for r in rows:
        vec = np.asarray(snap.vectors[r], dtype=np.float32).tobytes()
        code = raw[64 + r * codes.row_bytes: 64 + (r + 1) * codes.row_bytes] if codes is not None else b""
        out[r] = (vec, code)
    return out


def directory_bytes(path):
    blobs = {}
    for name in sorted(os.listdir(path)):
        p = os.path.join(path, name)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                blobs[name] = f.read()
    return blobs


def leftovers(path, rows, stored):
    """(what, row, file) for every deleted chunk's byte string still found in a file of `path`."""
    found = []
    blobs = directory_bytes(path)
    for r in rows:
        vec, code = stored[r]
        needles = {"text": text(r).encode(), "token": token(r).encode(), "display": display(r).encode(), "vector": vec}
        if code:
            needles["codes"] = code
        for what, needle in needles.items():
            for name, data in blobs.items():
                if needle in data:
                    found.append((what, r, name))
    return found


def delete_some(c, n):
    """Deletes every 5th chunk by id and document d3 (chunks 12..15) by doc_id; returns their rows."""
    rows = sorted(set(range(0, n, 5)) | {12, 13, 14, 15})
    c.delete(ids=[f"c{r}" for r in range(0, n, 5)])
    c.delete(doc_ids=["d3"])
    return rows


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_deleted_chunks_leave_no_bytes_after_compact(tmp_path, kind):
    path = tmp_path / "c"
    c = build(path, kind, audit=True)
    q = np.random.default_rng(9).standard_normal(DIM).astype(np.float32)
    c.search(q, text=token(5), k=5, tenant="t", groups=["g"])  # an audit record naming c5
    n = len(c)
    gone = delete_some(c, n)
    keep = [r for r in range(n) if r not in gone]
    stored = stored_bytes(c, range(n))
    c.commit()
    assert leftovers(path, gone, stored), "before compaction the deleted bytes are still on disk"
    c.compact()
    assert leftovers(path, gone, stored) == []
    # the scan works: every survivor's text, term and float32 vector is found
    assert {(w, r) for w, r, _ in leftovers(path, keep, stored) if w != "codes"} == \
        {(w, r) for r in keep for w in ("text", "token", "display", "vector")}
    c.close()
    assert leftovers(path, gone, stored) == []
    r = vecsift.open(path)  # a reopen changes nothing
    assert r.get([f"c{g}" for g in gone], tenant="t", groups=["g"]) == [None] * len(gone) and len(r) == len(keep)
    assert [h.id for h in r.search(text=token(keep[3]), k=1, tenant="t", groups=["g"])] == [f"c{keep[3]}"]
    r.close()
    assert leftovers(path, gone, stored) == []


def test_delete_committed_then_reopened_then_compacted(tmp_path):
    path = tmp_path / "c"
    c = build(path, "bq")
    stored = stored_bytes(c, range(len(c)))
    gone = delete_some(c, len(c))
    c.close()  # commits the deletes
    c = vecsift.open(path)
    c.compact()
    c.close()
    assert leftovers(path, gone, stored) == []


def test_uncommitted_then_deleted_rows_and_replaced_ids(tmp_path):
    """Rows added and deleted before any commit, and the old version of a re-added id, are gone too."""
    path = tmp_path / "c"
    c = build(path, "hnsw", n=120)
    stored = stored_bytes(c, range(120))
    rng = np.random.default_rng(5)
    c.add(["c7"], rng.standard_normal((1, DIM)).astype(np.float32), texts=["replacement text for seven"],
          tenant="t", acl=[["g"]], metadata={"kind": [0]})  # replaces row 7
    c.add(["tmp"], rng.standard_normal((1, DIM)).astype(np.float32), texts=[text(999)], tenant="t", acl=[["g"]],
          metadata={"kind": [0]})
    c.delete(ids=["tmp"])
    c.compact()
    assert leftovers(path, [7], stored) == []
    assert text(999).encode() not in b"".join(directory_bytes(path).values())
    assert c.get(["c7"], tenant="t", groups=["g"])[0].text == "replacement text for seven"
    c.close()


def test_reader_holding_an_old_snapshot(tmp_path):
    """Files a reader still maps are unlinked by compact(): gone from the directory at once, their
    blocks freed when the reader refreshes or closes (the bound for a reader holding a snapshot)."""
    path = tmp_path / "c"
    c = build(path, "hnsw", n=120)
    stored = stored_bytes(c, range(120))
    gone = delete_some(c, 120)
    c.commit()
    reader = vecsift.open(path, readonly=True)
    snap = reader.snapshot()  # held across the compaction
    q = np.array(snap.vectors[1])  # a copy, not a view of the mapping
    before = [h.id for h in reader.search(q, k=3, tenant="t", groups=["g"])]
    c.compact()
    assert leftovers(path, gone, stored) == []
    assert [h.id for h in reader.search(q, k=3, tenant="t", groups=["g"])] == before  # the old snapshot still serves
    assert _deleted_mappings(path), "the reader still maps the unlinked files"
    del snap
    assert reader.refresh()
    assert _deleted_mappings(path) == []
    assert [h.id for h in reader.search(q, k=3, tenant="t", groups=["g"])] == before  # same live chunks, renumbered files
    reader.close()
    c.close()


def _deleted_mappings(path):
    """Unlinked files of the collection this process still maps or holds open."""
    prefix = os.path.realpath(path)
    maps = open("/proc/self/maps").read().splitlines()
    held = [line.split(None, 5)[-1] for line in maps if prefix in line and line.endswith("(deleted)")]
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(prefix) and target.endswith("(deleted)"):
            held.append(target)
    return held


def test_record_query_keeps_query_texts_in_the_audit_log(tmp_path):
    """The one documented exception: with record_query=True the audit log keeps the queries it was
    asked, so a query that quoted a deleted chunk still holds those words (and nothing else does)."""
    path = tmp_path / "c"
    c = build(path, "bq-sign", n=40, audit={"record_query": True})
    c.search(text=token(5), k=3, tenant="t", groups=["g"])
    stored = stored_bytes(c, range(40))
    c.delete(ids=["c5"])
    c.compact()
    c.close()
    assert {(w, name.startswith("audit-")) for w, _, name in leftovers(path, [5], stored)} == {("token", True)}
