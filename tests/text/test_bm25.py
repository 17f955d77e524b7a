"""BM25Index against an independent pure-Python reference on a real corpus
(the committed standard-library docstrings)."""
import json
import math
import os
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from pyroaring import BitMap, FrozenBitMap

import vecsift
from vecsift import BM25Index, CorruptIndexError
from vecsift.storage.checksum import crc32c
from vecsift.text.tokenize import Tokenizer

DATA = Path(__file__).resolve().parents[1] / "data" / "docstrings"


def _jsonl(name):
    with open(DATA / name, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


DOCS = _jsonl("docs.jsonl")[:600]
QUERIES = _jsonl("queries.jsonl")[:600:5] + ["TS-999 os.path.join", "zzzz-not-a-word", ""]
TOK = Tokenizer()


def reference(docs: dict, query, k1=1.2, b=0.75):
    """Lucene BM25 written out from the formula: {row: score} for rows with a query token.
    docs: {row: text} of the live rows."""
    toks = {r: TOK(t) for r, t in docs.items()}
    tf = {r: Counter(t) for r, t in toks.items()}
    n = len(docs)
    avgdl = sum(len(t) for t in toks.values()) / n
    out = {}
    for w in TOK(query):
        df = sum(1 for c in tf.values() if w in c)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for r, c in tf.items():
            if w in c:
                f = c[w]
                out[r] = out.get(r, 0.0) + idf * f / (f + k1 * (1 - b + b * len(toks[r]) / avgdl))
    return out


def check_against(idx, docs, query, k, allowed=None):
    ref = reference(docs, query)
    if allowed is not None:
        ref = {r: s for r, s in ref.items() if r in allowed}
    rows, scores = idx.search(query, k=k, allow=None if allowed is None else BitMap(allowed))
    assert rows.dtype == np.int64 and scores.dtype == np.float32
    want = sorted(ref.items(), key=lambda x: (-x[1], x[0]))[:k]
    assert len(rows) == len(want)
    np.testing.assert_allclose(scores, [s for _, s in want], rtol=1e-5)
    # Order by score, best first; rows equal wherever scores are not tied.
    assert (np.diff(scores) <= 0).all()
    for r, s in zip(rows, scores):
        assert ref[int(r)] == pytest.approx(float(s), rel=1e-5)
    return rows, scores


@pytest.fixture(scope="module")
def index():
    idx = BM25Index()
    idx.add(DOCS)
    return idx


def test_scores_match_reference(index):
    all_docs = dict(enumerate(DOCS))
    for q in QUERIES:
        check_against(index, all_docs, q, k=10)
    check_against(index, all_docs, QUERIES[3], k=1000)  # every matching row


def test_early_termination_matches_reference(monkeypatch):
    # Consider stopping before every term, so the pruned path runs on this small corpus.
    idx = BM25Index()
    monkeypatch.setattr(idx, "_prune_min", 1)
    idx.add(DOCS)
    all_docs = dict(enumerate(DOCS))
    rng = np.random.default_rng(1)
    allowed = set(np.flatnonzero(rng.random(len(DOCS)) < 0.3).tolist())
    for q in QUERIES:
        for k in (1, 3, 10):
            check_against(idx, all_docs, q, k=k)
        check_against(idx, all_docs, q, k=5, allowed=allowed)
    # ties: identical documents score identically and come back by row
    tie = BM25Index()
    monkeypatch.setattr(tie, "_prune_min", 1)
    tie.add(["red fish"] * 6 + ["blue fish", "red red red"])
    rows, scores = tie.search("red fish", k=4)
    assert rows.tolist() == [0, 1, 2, 3] and len(set(scores.tolist())) == 1


def test_no_match_returns_nothing(index):
    for q in ["zzzzqq-xxyyq", "", "   ", "qqqxx yyyzz", "...!"]:
        rows, scores = index.search(q, k=10)
        assert rows.size == 0 and scores.size == 0
    rows, scores = index.search("ABCMeta", k=500)
    assert 0 < rows.size < 500 and (scores > 0).all()


def test_filtered_search_never_returns_disallowed(index):
    rng = np.random.default_rng(0)
    all_docs = dict(enumerate(DOCS))
    for sel in [0.01, 0.1, 0.5]:
        allowed = set(np.flatnonzero(rng.random(len(DOCS)) < sel).tolist())
        for q in QUERIES[:30]:
            rows, _ = check_against(index, all_docs, q, k=10, allowed=allowed)
            assert set(rows.tolist()) <= allowed
    # the three allow forms agree
    ids = np.flatnonzero(rng.random(len(DOCS)) < 0.2)
    mask = np.zeros(len(DOCS), bool)
    mask[ids] = True
    q = "Return the value of the attribute"
    a = index.search(q, 50, allow=BitMap(ids.tolist()))
    b = index.search(q, 50, allow=mask)
    c = index.search(q, 50, allow=ids)
    for x in (b, c):
        np.testing.assert_array_equal(a[0], x[0])
        np.testing.assert_array_equal(a[1], x[1])
    assert index.search(q, 10, allow=BitMap())[0].size == 0
    # a mask longer than n_rows (a collection with more rows) is fine
    assert index.search(q, 10, allow=np.ones(len(DOCS) + 5, bool))[0].size == 10
    with pytest.raises(ValueError):
        index.search(q, 10, allow=np.ones(3, bool))
    with pytest.raises(TypeError):
        index.search(q, 10, allow=np.ones(3, np.float32))


def test_frozen_allow_mask_follows_deletes_and_adds():
    # A FrozenBitMap's mask is cached; a delete or add (a new view) must not be hidden by it.
    idx = BM25Index()
    idx.add(DOCS[:300])
    frozen = FrozenBitMap(range(0, 300, 2))
    q = "Return the value of the attribute"
    first, _ = idx.search(q, 20, allow=frozen)
    assert first.size and set(first.tolist()) <= set(frozen)
    np.testing.assert_array_equal(first, idx.search(q, 20, allow=BitMap(frozen))[0])
    idx.delete(first[:3])
    after, _ = idx.search(q, 20, allow=frozen)
    assert not set(after.tolist()) & set(first[:3].tolist())
    np.testing.assert_array_equal(after, idx.search(q, 20, allow=BitMap(frozen))[0])
    idx.add([DOCS[int(first[3])]] * 5, ids=range(300, 305))  # new rows outside the frozen set
    assert not set(idx.search(q, 50, allow=frozen)[0].tolist()) & set(range(300, 305))
    assert set(range(300, 305)) <= set(idx.search(q, 50, allow=FrozenBitMap(range(400)))[0].tolist())


def test_allowed_statistics_equal_an_index_of_only_the_allowed_rows():
    rng = np.random.default_rng(5)
    idx = BM25Index()
    idx.add(DOCS[:400])
    idx.merge()
    idx.add(DOCS[400:500], ids=range(400, 500))  # a tail segment too
    dead = set(range(0, 500, 7))
    idx.delete(sorted(dead))
    for sel in (0.02, 0.3, 1.0):
        allowed = [r for r in range(500) if rng.random() < sel]
        live = [r for r in allowed if r not in dead]
        alone = BM25Index()
        alone.add([DOCS[r] for r in live], ids=live)
        forms = (BitMap(allowed), FrozenBitMap(allowed), np.isin(np.arange(500), allowed), np.array(allowed))
        for q in QUERIES[:25]:
            want = alone.search(q, 10)
            for allow in forms:
                got = idx.search(q, 10, allow=allow, statistics="allowed")
                np.testing.assert_array_equal(got[0], want[0])
                np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
            batch = idx.search_batch([q, q], 10, allow=BitMap(allowed), statistics="allowed")
            np.testing.assert_array_equal(batch[0][0, : want[0].size], want[0])
    # every live row allowed: the index's own statistics, bit for bit
    q = QUERIES[3]
    full = idx.search(q, 10, allow=BitMap(range(500)), statistics="allowed")
    np.testing.assert_array_equal(full[1], idx.search(q, 10)[1])
    # the default still scores filtered rows with the whole index's statistics
    some = BitMap(range(0, 500, 2))
    np.testing.assert_array_equal(idx.search(q, 10, allow=some)[1],
                                  idx.search(q, 10, allow=some, statistics="index")[1])
    with pytest.raises(ValueError, match="statistics"):
        idx.search(q, 10, statistics="tenant")
    assert idx.search(q, 10, allow=BitMap(), statistics="allowed")[0].size == 0


def test_many_frozen_tenants_keep_their_own_statistics():
    # more tenants than scopes kept: evicted and rebuilt scopes (and their df memos) stay right
    idx = BM25Index()
    idx.add(DOCS[:400])
    tenants = [FrozenBitMap(range(t, 400, 20)) for t in range(20)]
    alone = []
    for fb in tenants:
        a = BM25Index()
        a.add([DOCS[r] for r in fb], ids=list(fb))
        alone.append(a)
    for _ in range(2):
        for fb, a in zip(tenants, alone):
            for q in QUERIES[:6]:
                got, want = idx.search(q, 5, allow=fb, statistics="allowed"), a.search(q, 5)
                np.testing.assert_array_equal(got[0], want[0])
                np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    idx.delete(list(tenants[0])[:5])  # a new view: the tenant's statistics follow the delete
    a = BM25Index()
    a.add([DOCS[r] for r in list(tenants[0])[5:]], ids=list(tenants[0])[5:])
    for q in QUERIES[:6]:
        np.testing.assert_allclose(idx.search(q, 5, allow=tenants[0], statistics="allowed")[1],
                                   a.search(q, 5)[1], rtol=1e-6)


def test_deletes_update_statistics():
    idx = BM25Index()
    idx.add(DOCS[:300])
    dead = list(range(0, 300, 3))
    assert idx.delete(dead) == len(dead)
    assert idx.delete(dead[:5]) == 0  # already deleted: ignored
    live = {r: DOCS[r] for r in range(300) if r not in set(dead)}
    assert len(idx) == len(live)
    fresh = BM25Index()
    fresh.add([live[r] for r in live], ids=list(live))
    for q in QUERIES[:40]:
        rows, scores = check_against(idx, live, q, k=10)
        assert not set(rows.tolist()) & set(dead)
        r2, s2 = fresh.search(q, 10)
        np.testing.assert_allclose(scores, s2, rtol=1e-6)
    idx.merge()
    for q in QUERIES[:10]:
        check_against(idx, live, q, k=10)


def test_incremental_adds_equal_one_build(index):
    idx = BM25Index()
    idx.add(DOCS[:200])
    idx.merge()
    idx.add(DOCS[200:450])
    idx.add(DOCS[450:])
    assert idx.tail_rows > 0 and len(idx) == len(DOCS) and idx.n_rows == len(DOCS)
    for stage in ("tail", "merged"):
        for q in QUERIES[:40]:
            a, sa = idx.search(q, 10)
            b, sb = index.search(q, 10)
            np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(sa, sb, rtol=1e-6)
        idx.merge()
        assert idx.tail_rows == 0


def test_explicit_ids_and_errors():
    idx = BM25Index()
    assert idx.add(["alpha beta", "beta gamma"], ids=[10, 3]).tolist() == [10, 3]
    assert idx.n_rows == 11 and len(idx) == 2
    assert idx.add(["gamma delta"]).tolist() == [11]
    assert idx.search("gamma", 5)[0].tolist() in ([3, 11], [11, 3])
    assert idx.search("alpha", 5)[0].tolist() == [10]
    with pytest.raises(ValueError):
        idx.add(["again"], ids=[3])
    with pytest.raises(ValueError):
        idx.add(["a", "b"], ids=[20, 20])
    with pytest.raises(ValueError):
        idx.add(["a"], ids=[-1])
    with pytest.raises(ValueError):
        idx.add(["a", "b"], ids=[30])
    with pytest.raises(TypeError):
        idx.add("one string")
    with pytest.raises(TypeError):
        idx.add([1, 2])
    with pytest.raises(ValueError):
        idx.search("gamma", k=0)
    with pytest.raises(TypeError):
        idx.search(b"gamma")
    with pytest.raises(ValueError):
        BM25Index(b=2)
    idx.delete(3)
    assert idx.search("gamma", 5)[0].tolist() == [11]
    idx.delete(BitMap([11]))
    assert idx.search("gamma", 5)[0].size == 0
    with pytest.raises(ValueError):
        idx.add(["reuse"], ids=[3])  # deleted rows are not reused


def test_compact_renumbers_and_keeps_results():
    idx = BM25Index()
    idx.add(DOCS[:200])
    idx.delete(np.arange(0, 200, 2))
    before = [idx.search(q, 10) for q in QUERIES[:30]]
    vocab_before = idx.vocab_size
    mapping = idx.compact(renumber=True)
    assert idx.vocab_size <= vocab_before
    assert mapping[0] == -1 and mapping[1] == 0 and mapping[199] == 99
    assert len(idx) == idx.n_rows == 100
    for (r0, s0), q in zip(before, QUERIES[:30]):
        r1, s1 = idx.search(q, 10)
        np.testing.assert_array_equal(mapping[r0], r1)
        np.testing.assert_allclose(s0, s1, rtol=1e-6)
    idx.add(["a brand new text"])
    assert idx.n_rows == 101


def test_batch_equals_single(index):
    qs = QUERIES[:50]
    for threads in (1, 2):
        rows, scores = index.search_batch(qs, k=7, threads=threads)
        assert rows.shape == scores.shape == (len(qs), 7)
        for i, q in enumerate(qs):
            r, s = index.search(q, 7)
            np.testing.assert_array_equal(rows[i, : r.size], r)
            assert (rows[i, r.size:] == -1).all() and np.isneginf(scores[i, r.size:]).all()
            np.testing.assert_array_equal(scores[i, : s.size], s)
    allows = [np.arange(i, len(DOCS), 7) for i in range(len(qs))]
    rows, _ = index.search_batch(qs, k=5, allows=allows, threads=2)
    for i in range(len(qs)):
        ok = rows[i][rows[i] >= 0]
        assert (ok % 7 == i % 7).all()
        np.testing.assert_array_equal(ok, index.search(qs[i], 5, allow=allows[i])[0])


def test_save_load_roundtrip(tmp_path):
    idx = BM25Index(k1=1.5, b=0.6, tokenizer=Tokenizer(stopwords="english"))
    idx.add(DOCS[:300])
    idx.add(DOCS[300:400])
    idx.delete([5, 6, 7, 350])
    p = tmp_path / "bm25.bin"
    idx.save(p)
    back = BM25Index.load(p)
    assert (back.k1, back.b, len(back), back.n_rows) == (1.5, 0.6, len(idx), idx.n_rows)
    assert back.tokenizer.stopwords == idx.tokenizer.stopwords
    for q in QUERIES[:40]:
        a, sa = idx.search(q, 10)
        b, sb = back.search(q, 10)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(sa, sb)
    back.add(["more text os.path.join"])  # a loaded index keeps growing
    assert back.search("os.path.join", 3)[0][0] == 400
    # an empty index round-trips too
    BM25Index().save(tmp_path / "empty.bin")
    assert len(BM25Index.load(tmp_path / "empty.bin")) == 0


def test_custom_tokenizer_must_be_given_on_load(tmp_path):
    idx = BM25Index(tokenizer=str.split)
    idx.add(["a b c", "b c d"])
    idx.save(tmp_path / "x.bin")
    with pytest.raises(ValueError, match="tokenizer"):
        BM25Index.load(tmp_path / "x.bin")
    back = BM25Index.load(tmp_path / "x.bin", tokenizer=str.split)
    assert back.search("d", 2)[0].tolist() == [1]


def _resign(data: bytes, crc=crc32c) -> bytes:
    """Recompute the checksum (CRC-32C, format version 2) so a crafted change reaches the structural checks."""
    body = data[: -13]
    return body + np.uint32(crc(body)).tobytes() + data[-9:]


def test_version_1_files_with_a_zlib_trailer_still_load(tmp_path):
    idx = BM25Index()
    idx.add(DOCS[:80])
    idx.save(tmp_path / "v2.bin")
    v2 = (tmp_path / "v2.bin").read_bytes()
    assert int(np.frombuffer(v2, "<u4", 1, 8)[0]) == 2
    v1 = _resign(v2[:8] + np.uint32(1).tobytes() + v2[12:], crc=zlib.crc32)
    (tmp_path / "v1.bin").write_bytes(v1)
    back = BM25Index.load(tmp_path / "v1.bin")
    for q in ("file path", "return the value"):
        np.testing.assert_array_equal(back.search(q, 10)[0], idx.search(q, 10)[0])
    # a version 1 header with a CRC-32C trailer (or the reverse) is refused
    (tmp_path / "mixed.bin").write_bytes(v2[:8] + np.uint32(1).tobytes() + v2[12:])
    with pytest.raises(CorruptIndexError, match="checksum"):
        BM25Index.load(tmp_path / "mixed.bin")


def test_bad_files_raise_corrupt_index_error(tmp_path):
    idx = BM25Index()
    idx.add(DOCS[:50])
    p = tmp_path / "ok.bin"
    idx.save(p)
    good = p.read_bytes()
    cases = {
        "empty": b"",
        "garbage": os.urandom(4096),
        "truncated": good[: len(good) // 2],
        "flipped": good[:200] + bytes([good[200] ^ 0xFF]) + good[201:],
        "version": _resign(good[:8] + np.uint32(99).tobytes() + good[12:]),
        "short-tail": good[:-1],
    }
    # crafted, correctly checksummed: posting rows past n_rows
    hl = int(np.frombuffer(good, "<u4", 1, 12)[0])
    header = json.loads(good[16:16 + hl])
    nptr = header["arrays"][0][2]
    docs_off = 16 + hl + 8 * nptr
    bad_docs = good[:docs_off] + np.int32(10**6).tobytes() + good[docs_off + 4:]
    cases["row-out-of-range"] = _resign(bad_docs)
    def with_header(h):
        hb = json.dumps(h).encode()
        return _resign(good[:12] + np.uint32(len(hb)).tobytes() + hb + good[16 + hl:])

    cases["header-lies"] = with_header({**header, "n_rows": 10**9})
    cases["header-dtype"] = with_header({**header, "arrays": [["ptr", "<f8", nptr]] + header["arrays"][1:]})
    cases["header-object"] = with_header({**header, "arrays": [["ptr", "|O", nptr]] + header["arrays"][1:]})
    cases["header-not-json"] = _resign(good[:16] + b"{" * hl + good[16 + hl:])
    for name, data in cases.items():
        f = tmp_path / f"{name}.bin"
        f.write_bytes(data)
        with pytest.raises(CorruptIndexError):
            BM25Index.load(f)
    assert issubclass(CorruptIndexError, vecsift.VecsiftError)
