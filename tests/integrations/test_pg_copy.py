"""Binary COPY decoding: bytes a real PostgreSQL 16 + pgvector wrote (tests/data), and built by hand."""
import json
import struct

import numpy as np
import pyarrow as pa
import pytest
from pg_server import pg_dsn  # noqa: F401 - the fixture
from pg_rows import BIN, EXPECTED, META, recorded_query, record

from vecsift.integrations.postgres.copy_binary import SIGNATURE, CopyFormatError, CopyReader


def decode_all(q, data, chunks=None, batch=1000):
    reader = CopyReader(len(q.columns), batch)
    fields = []
    if chunks is None:
        fields += reader.feed(data, final=True)
    else:
        for a, b in zip(chunks[:-1], chunks[1:]):
            fields += reader.feed(data[a:b], min_bytes=0)
        fields += reader.feed(b"", final=True)
    return fields


def check_against_expected(q, fields):
    ids, vecs, texts, tenant, acl, meta = [], [], [], [], [], []
    for f in fields:
        b = q.decode(f, 4, "skip")
        ids += b["ids"].to_pylist()
        vecs += list(b["vectors"])
        texts += b["texts"].to_pylist()
        tenant += b["tenant"].to_pylist()
        acl += b["acl"].to_pylist()
        meta += b["metadata"].to_pylist()
    keep = [i for i, v in enumerate(EXPECTED["vectors"]) if v is not None]  # the NULL vector row is skipped
    assert ids == [EXPECTED["ids"][i] for i in keep]
    np.testing.assert_array_equal(np.array(vecs), np.array([EXPECTED["vectors"][i] for i in keep], np.float32))
    assert np.signbit(np.array(vecs)[1, 2])  # -0.0 survives
    assert texts == [EXPECTED["texts"][i] for i in keep]
    assert tenant == [EXPECTED["tenant"][i] for i in keep]
    assert acl == [EXPECTED["acl"][i] for i in keep]
    for key in ("k", "s", "day", "price", "ts"):
        assert [m.get(key) for m in meta] == [EXPECTED[key][i] for i in keep], key


def test_recorded_pgvector_copy_decodes():
    q, data = recorded_query()
    check_against_expected(q, decode_all(q, data))


def test_rows_cut_at_any_byte_decode_the_same():
    q, data = recorded_query()
    rng = np.random.default_rng(0)
    for _ in range(20):
        cuts = np.unique(np.concatenate([[0, len(data)], rng.integers(0, len(data), 6)]))
        check_against_expected(q, decode_all(q, data, list(cuts), batch=int(rng.integers(1, 4))))


def test_null_vector_refused_when_asked_and_truncation_detected():
    q, data = recorded_query()
    (f,) = decode_all(q, data)
    with pytest.raises(ValueError, match=r"row id='2': 'v' is NULL .*--null-vectors skip"):
        q.decode(f, 4, "error")
    with pytest.raises(ValueError, match="'v' has 4 dimensions, expected 8"):
        q.decode(f, 8, "skip")
    with pytest.raises(CopyFormatError, match="without its trailer"):
        CopyReader(len(q.columns)).feed(data[:-30], final=True)
    with pytest.raises(CopyFormatError, match="signature"):
        CopyReader(2).feed(b"PGCOPY\nXXXX" + data[11:], final=True)


def _stream(rows):
    """A binary COPY stream built per the protocol docs: (id text, vector in send format)."""
    out = bytearray(SIGNATURE + struct.pack(">ii", 0, 0))
    for rid, payload in rows:
        out += struct.pack(">h", 2) + struct.pack(">i", len(rid)) + rid
        out += struct.pack(">i", -1) if payload is None else struct.pack(">i", len(payload)) + payload
    return bytes(out + struct.pack(">h", -1))


def test_halfvec_and_vector_send_formats():
    """halfvec (pgvector >= 0.7; the bundled 0.6.2 has none): int16 dim, int16 unused, float16 big-endian."""
    from vecsift.integrations.postgres.copy_binary import CopyReader as R
    rng = np.random.default_rng(1)
    x = rng.standard_normal((50, 7)).astype(np.float16)
    rows = [(f"r{i}".encode(), struct.pack(">hh", 7, 0) + x[i].astype(">f2").tobytes()) for i in range(50)]
    rows[3] = (b"r3", None)
    (f,) = R(2, 100).feed(_stream(rows), final=True)
    vecs, bad, _ = f.vectors(1, "halfvec", 7)
    assert bad == -1 and vecs.dtype == np.float32
    keep = np.arange(50) != 3
    np.testing.assert_array_equal(vecs[keep], x[keep].astype(np.float32))
    assert f.nulls(1).tolist() == (~keep).tolist()
    y = rng.standard_normal((5, 3)).astype(np.float32)
    rows = [(b"a%d" % i, struct.pack(">hh", 3, 0) + y[i].astype(">f4").tobytes()) for i in range(5)]
    rows[2] = (b"a2", struct.pack(">hh", 2, 0) + y[2, :2].astype(">f4").tobytes())  # a shorter row
    (f,) = R(2).feed(_stream(rows), final=True)
    vecs, bad, got = f.vectors(1, "vector", 3)
    assert vecs is None and bad == 2 and got == 2


def test_recording_matches_a_live_server(pg_dsn):
    """Re-recorded from the running server: the same bytes as the committed fixture."""
    data, meta = record(pg_dsn)
    assert json.loads(json.dumps(meta)) == json.loads(META.read_text())
    assert data == BIN.read_bytes()
