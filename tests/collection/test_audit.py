"""The retrieval audit log: what a record holds (and does not), settings in the manifest, concurrent
writers (threads and processes), rotation, torn and corrupt records, write failures, the CLI."""
import base64
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import vecsift
from vecsift.collection import audit
from vecsift.collection.audit import AuditError, log_files, read_log
from vecsift.tools.cli import main as cli

DIM = 16


def make(path, n=60, audit_cfg=True, **kw):
    x = np.random.default_rng(1).standard_normal((n, DIM)).astype(np.float32)
    c = vecsift.Collection.create(path, DIM, filter_fields=["kind"], audit=audit_cfg, **kw)
    c.add([f"r{i}" for i in range(n)], x, texts=[f"note {i} about topic{i % 4}" for i in range(n)],
          tenant=["a" if i % 2 else "b" for i in range(n)], acl=[["g1"] if i % 3 else ["g2"] for i in range(n)],
          metadata={"kind": np.arange(n) % 3})
    c.commit()
    return c, x


def records(path):
    rep = read_log(path)
    assert rep.ok, rep.errors
    return [r for r in rep.records if "event" not in r]


def test_record_fields_and_no_query_by_default(tmp_path):
    path = tmp_path / "c"
    c, x = make(path)
    q = x[5] + 0.01
    hits = c.search(q, text="topic1 secretquery", k=4, tenant="a", groups=["g1"], where={"kind": 1})
    c.search_batch(x[:3], k=2, tenant="b", groups=["g1", "g2"])
    c.search_sparse(["topic2"], k=3, tenant="a", groups=["g1"])
    c.get(["r1", "r2", "nope"], tenant="a", groups=["g1"])  # r2 is tenant b: not returned
    with pytest.raises(ValueError, match="tenant"):
        c.search(q, k=3)  # refused searches are recorded too
    c.close()
    r = records(path)
    assert [(e["op"], e["mode"]) for e in r] == [("search", "hybrid"), ("search", "dense"),
                                                 ("search_sparse", "sparse"), ("get", "get"), ("search", "dense")]
    first = r[0]
    assert first["tenant"] == "a" and first["groups"] == ["g1"] and first["where"] == {"kind": 1}
    assert first["k"] == 4 and first["ids"] == [[h.id for h in hits]] and first["ms"] > 0
    assert first["gen"] == 1 and first["pid"] == os.getpid() and "text" not in first and "vector" not in first
    assert len(r[1]["ids"]) == 3 and r[1]["groups"] == ["g1", "g2"]
    assert r[3]["ids"] == ["r1"]
    assert r[4]["ids"] == [] and "tenant" in r[4]["error"]
    raw = b"".join(open(os.path.join(path, n), "rb").read() for _, n in log_files(path))
    assert b"secretquery" not in raw and np.float32(q).tobytes()[:16] not in raw


def test_record_query_stores_texts_and_vectors(tmp_path):
    path = tmp_path / "c"
    c, x = make(path, audit_cfg={"record_query": True, "flush_ms": 0})
    c.search(x[2], text="topic3 words", k=2, tenant="a", groups=["g1"])
    e = records(path)[0]  # flush_ms=0: on disk before search() returned
    assert e["text"] == ["topic3 words"]
    v = np.frombuffer(base64.b64decode(e["vector"]["base64"]), np.float32).reshape(e["vector"]["shape"])
    assert np.array_equal(v[0], x[2])
    c.close()


def test_settings_persist_and_readers_follow(tmp_path):
    path = tmp_path / "c"
    c, x = make(path, audit_cfg=None)
    assert c.manifest.audit == {} and c.info()["audit"] == {}
    reader = vecsift.open(path, readonly=True)
    reader.search(x[0], k=1, tenant="a", groups=["g1"])
    assert log_files(path) == []  # off: nothing written
    with pytest.raises(ValueError, match="unknown audit settings"):
        c.set_audit({"max_byte": 10})
    with pytest.raises(ValueError, match="keep"):
        c.set_audit({"keep": 0})
    c.set_audit({"keep": 3, "flush_ms": 0})
    c.commit()
    assert reader.refresh()  # the commit of the setting
    reader.search(x[0], k=1, tenant="a", groups=["g1"])
    assert [e["pid"] for e in records(path)] == [os.getpid()]
    reader.close()
    c.close()
    c = vecsift.open(path)
    assert c.manifest.audit["keep"] == 3 and c.manifest.audit["record_query"] is False
    c.set_audit(False)
    c.search(x[0], k=1, tenant="a", groups=["g1"])
    c.close()
    assert len(records(path)) == 1 and vecsift.open(path, readonly=True).manifest.audit == {}


def test_threads_never_interleave(tmp_path):
    path = tmp_path / "c"
    c, x = make(path, audit_cfg={"flush_ms": 1})
    per, nthreads = 150, 4

    def run(t):
        for i in range(per):
            c.search(x[(t * per + i) % len(x)], k=3, tenant="ab"[t % 2], groups=["g1", "g2"])

    threads = [threading.Thread(target=run, args=(t,)) for t in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c.close()
    r = records(path)
    assert len(r) == per * nthreads
    assert [e["seq"] for e in r] == list(range(1, per * nthreads + 1))


CHILD = """
import sys, numpy as np, vecsift
c = vecsift.open(sys.argv[1], readonly=True)
x = np.random.default_rng(int(sys.argv[2])).standard_normal((int(sys.argv[3]), {dim})).astype(np.float32)
for q in x:
    c.search(q, k=5, tenant="a", groups=["g1"])
c.close()
"""


def test_processes_share_one_chained_log(tmp_path):
    path = tmp_path / "c"
    c, x = make(path, audit_cfg={"flush_ms": 2, "max_bytes": 16384, "keep": 100})
    c.close()
    n = 300
    procs = [subprocess.Popen([sys.executable, "-c", CHILD.format(dim=DIM), str(path), str(s), str(n)])
             for s in range(3)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    rep = read_log(path)
    assert rep.ok, rep.errors
    assert len(rep.records) == 3 * n and len(rep.files) > 1  # rotated while three processes wrote
    assert len({e["pid"] for e in rep.records}) == 3
    assert [e["seq"] for e in rep.records] == list(range(1, 3 * n + 1))


def test_rotation_keeps_the_newest_files(tmp_path):
    path = tmp_path / "c"
    c, x = make(path, audit_cfg={"flush_ms": 0, "max_bytes": 4096, "keep": 3})
    for i in range(200):
        c.search(x[i % len(x)], k=5, tenant="a", groups=["g1"])
    c.close()
    rep = read_log(path)
    assert rep.ok and len(rep.files) == 3
    numbers = [n for n, _ in log_files(path)]
    assert numbers == list(range(numbers[0], numbers[0] + 3)) and numbers[0] > 1
    assert any("rotated away" in w for w in rep.warnings)
    seqs = [e["seq"] for e in rep.records]
    assert seqs == list(range(seqs[0], 201))
    assert all(os.path.getsize(os.path.join(path, f)) < 4096 + 600 for f in rep.files)


def _newest(path):
    return os.path.join(path, log_files(path)[-1][1])


def test_torn_last_record_is_reported_not_fatal(tmp_path, capsys):
    path = tmp_path / "c"
    c, x = make(path, audit_cfg={"flush_ms": 0})
    for i in range(5):
        c.search(x[i], k=2, tenant="a", groups=["g1"])
    c.close()
    whole = open(_newest(path), "rb").read()
    data, _ = audit.frame(6, 0, b'{"t": 1, "op": "search"}')
    with open(_newest(path), "ab") as f:
        f.write(data[:-7])  # a crash in the middle of a write
    rep = read_log(path)
    assert rep.ok and len(rep.records) == 5 and any("torn" in w for w in rep.warnings)
    assert cli(["audit", str(path)]) == 0
    assert "torn" in capsys.readouterr().err
    c = vecsift.open(path)  # the next writer starts a new file chained to the last whole record
    c.search(x[0], k=2, tenant="a", groups=["g1"])
    c.close()
    rep = read_log(path)
    assert rep.ok, rep.errors
    assert len(rep.files) == 2 and open(os.path.join(path, rep.files[0]), "rb").read().startswith(whole)
    assert [e.get("event") for e in rep.records[5:]] == ["damaged_tail", None]
    assert [e["seq"] for e in rep.records] == list(range(1, 8))
    # zeros at the end (a file extended by a crash before its data was written) count as torn too
    with open(_newest(path), "ab") as f:
        f.write(bytes(100))
    assert read_log(path).ok


def test_corruption_is_an_error(tmp_path, capsys):
    path = tmp_path / "c"
    c, x = make(path, audit_cfg={"flush_ms": 0})
    for i in range(6):
        c.search(x[i], k=2, tenant="a", groups=["g1"])
    c.close()
    f = _newest(path)
    good = open(f, "rb").read()
    ends = []
    off = 0
    while off < len(good):
        off = audit.parse(good, off)[4]
        ends.append(off)
    flipped = bytearray(good)
    flipped[ends[2] + 30] ^= 0x01  # inside record 4
    open(f, "wb").write(bytes(flipped))
    rep = read_log(path)
    assert not rep.ok and len(rep.records) == 5  # the others still read
    assert cli(["audit", str(path), "--verify"]) == 1
    assert "CORRUPT" in capsys.readouterr().err
    open(f, "wb").write(good[:ends[1]] + good[ends[2]:])  # record 3 cut out whole
    rep = read_log(path)
    assert not rep.ok and "missing records" in rep.errors[0]
    open(f, "wb").write(good[:ends[4]] + good[ends[5]:])  # the last record cut out: seq still 1..5
    assert read_log(path).ok  # (undetectable without an outside copy of the tail; docs/audit.md)


def test_unwritable_log_refuses_searches(tmp_path):
    path = tmp_path / "c"
    c, x = make(path, audit_cfg={"flush_ms": 0})
    first = c.search(x[0], k=2, tenant="a", groups=["g1"])[0].id
    os.rename(_newest(path), os.path.join(path, "kept"))
    os.mkdir(os.path.join(path, "audit-000001.log"))  # os.open(..., O_WRONLY) now fails
    with pytest.raises(AuditError, match="could not be written"):
        c.search(x[1], k=2, tenant="a", groups=["g1"])  # ran, but its record cannot be written: no results
    with pytest.raises(AuditError):
        c.search(x[2], k=2, tenant="a", groups=["g1"])  # refused before it runs
    os.rmdir(os.path.join(path, "audit-000001.log"))
    os.rename(os.path.join(path, "kept"), os.path.join(path, "audit-000001.log"))
    again = c.search(x[1], k=2, tenant="a", groups=["g1"])[0].id  # writes the queued record first
    c.close()
    assert [e["ids"][0][0] for e in records(path)] == [first, again, again]


def test_buffered_records_are_written_at_close(tmp_path):
    path = tmp_path / "c"
    c, x = make(path, audit_cfg={"flush_ms": 60_000})
    for i in range(10):
        c.search(x[i], k=1, tenant="a", groups=["g1"])
    assert log_files(path) == []  # still queued
    c.close()
    assert len(records(path)) == 10


def test_cli_filters(tmp_path, capsys):
    path = tmp_path / "c"
    c, x = make(path, audit_cfg={"flush_ms": 0})
    c.search(x[0], k=2, tenant="a", groups=["g1"])
    c.search(x[1], k=2, tenant="b", groups=["g1"], where={"kind": 2})
    c.close()
    capsys.readouterr()
    assert cli(["audit", str(path), "--tenant", "b", "--json"]) == 0
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["where"] == {"kind": 2}
    assert "verified" in out.err
    assert cli(["audit", str(path), "--since", "1h"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2
    assert cli(["audit", str(path), "--since", "2999-01-01"]) == 0
    assert capsys.readouterr().out == ""
    assert cli(["audit", str(path), "--since", "yesterday"]) == 2
    assert cli(["audit", str(tmp_path)]) == 2  # no audit log there


def test_fork_child_does_not_repeat_the_parents_records(tmp_path):
    path = tmp_path / "c"
    c, x = make(path, audit_cfg={"flush_ms": 60_000})
    for i in range(3):
        c.search(x[i], k=1, tenant="a", groups=["g1"])  # queued in the parent
    pid = os.fork()
    if pid == 0:  # a pre-fork server's worker: its own records only
        try:
            c.search(x[9], k=1, tenant="b", groups=["g1"])
            audit.flush_log(c)
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    c.close()
    r = records(path)
    assert sorted(e["tenant"] for e in r) == ["a", "a", "a", "b"]
    assert len({e["pid"] for e in r}) == 2


def test_odd_values_are_recorded_as_json(tmp_path):
    import datetime as dt
    path = tmp_path / "c"
    c, x = make(path, audit_cfg={"flush_ms": 0})
    where = {"kind": {"$in": [np.int64(1), 2]}}
    groups = {"g1"}
    c.search(x[1], k=np.int64(3), tenant='a', groups=groups, where=where)
    where["kind"] = 0  # changed by the caller afterwards: the record keeps what was asked
    with pytest.raises((ValueError, TypeError)):
        c.search(x[1], k=3, tenant='qu"ote\n\u00e9', groups=("g1",), where={"date": dt.datetime(2024, 1, 2)})
    c.close()
    r = records(path)
    assert r[0]["k"] == 3 and r[0]["groups"] == ["g1"] and r[0]["where"] == {"kind": {"$in": [1, 2]}}
    assert r[1]["tenant"] == 'qu"ote\n\u00e9' and r[1]["where"] == {"date": "2024-01-02 00:00:00"}


def test_records_keep_what_was_returned_and_asked(tmp_path):
    # records are encoded before the search returns: what the caller changes afterwards is not recorded
    path = tmp_path / "c"
    c, x = make(path, audit_cfg={"flush_ms": 60_000})
    hits = c.search(x[3], k=3, tenant="a", groups=["g1"])
    want = [h.id for h in hits]
    hits[0].id = "changed"
    hits.clear()
    groups = ["g1"]
    got = c.search_batch(x[:2], k=2, tenant="a", groups=groups)
    want2 = [[h.id for h in q] for q in got]
    groups.append("g2")
    got[1].pop()
    c.close()
    r = records(path)
    assert r[0]["ids"] == [want] and r[1]["ids"] == want2 and r[1]["groups"] == ["g1"]


def test_positional_and_keyword_arguments_alike(tmp_path):
    path = tmp_path / "c"
    c, x = make(path, audit_cfg={"flush_ms": 0})
    rows_p = c.search_rows(x[:1], 3, "a", ["g1"], {"kind": 1})
    rows_k = c.search_rows(where={"kind": 1}, groups=["g1"], tenant="a", k=3, vectors=x[:1])
    c.search_sparse(["topic1"], None, 2, "b", ["g1"])
    c.get(["r1", "r3", "r5"], "a", ["g1"], with_vectors=True)  # r3: not visible to g1
    c.close()
    r = records(path)
    ids = [f"r{i}" for i in rows_p[0][0] if i >= 0]  # row i holds id r{i}
    assert ids and r[0]["ids"] == [ids] == r[1]["ids"]
    for e in r[:2]:
        assert (e["op"], e["mode"], e["k"], e["tenant"], e["groups"], e["where"]) == \
            ("search_rows", "dense", 3, "a", ["g1"], {"kind": 1})
    assert np.array_equal(rows_p[0], rows_k[0])
    assert (r[2]["op"], r[2]["mode"], r[2]["k"], r[2]["tenant"]) == ("search_sparse", "sparse", 2, "b")
    assert (r[3]["op"], r[3]["k"], r[3]["tenant"], r[3]["ids"]) == ("get", None, "a", ["r1", "r5"])


def test_ids_that_need_escaping(tmp_path):
    path = tmp_path / "c"
    ids = ['plain', 'qu"ote', 'back\\slash', 'caf\u00e9', 'tab\there', '","', 'del\x7f', '\u2603', '\\u0000', ' ']
    x = np.random.default_rng(2).standard_normal((len(ids), DIM)).astype(np.float32)
    c = vecsift.Collection.create(path, DIM, audit={"flush_ms": 0})
    c.add(ids, x)
    c.commit()
    got = [[h.id for h in q] for q in c.search_batch(x, k=len(ids))]
    assert sorted(got[0]) == sorted(ids)
    c.get(ids + ["missing"])
    c.close()
    r = records(path)
    assert r[0]["ids"] == got and r[1]["ids"] == ids


def test_string_lists_encode_as_json_does():
    rng = np.random.default_rng(3)
    alphabet = ['a', 'Z', '0', ' ', '"', '\\', ',', '\n', '\x00', '\x1f', '\x7f', '\u00e9', '\u2603', '\U0001F600', '/']
    for _ in range(500):
        v = ["".join(rng.choice(alphabet, rng.integers(0, 6))) for _ in range(rng.integers(0, 6))]
        assert audit._strs(v) == json.dumps(v, separators=(",", ":")), v
        assert audit._strs(tuple(v)) == json.dumps(v, separators=(",", ":"))
        assert json.loads(audit._js(v)) == v
    assert audit._strs([1, "a", None]) == '[1,"a",null]'


def test_idle_process_flushes_without_more_searches(tmp_path):
    # no search after these: the background thread writes them (flush_ms after the first), not close()
    import time
    path = tmp_path / "c"
    c, x = make(path, audit_cfg={"flush_ms": 20})
    for i in range(3):
        c.search(x[i], k=1, tenant="a", groups=["g1"])
    deadline = time.monotonic() + 30  # generous: a loaded machine may run the thread late
    while time.monotonic() < deadline and not (log_files(path) and len(read_log(path).records) == 3):
        time.sleep(0.01)
    assert len(records(path)) == 3
    for i in range(3, 5):  # and again after that flush: the first record since sets a new deadline
        c.search(x[i], k=1, tenant="a", groups=["g1"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(read_log(path).records) < 5:
        time.sleep(0.01)
    assert len(records(path)) == 5
    c.close()


def test_idle_timer_semantics():
    import time
    from vecsift import _core
    t = _core.IdleTimer()
    assert not t.armed
    assert t.arm_in(0.0) and not t.arm_in(0.0)  # the second leaves the first deadline
    assert t.wait() and not t.armed  # passed: returns and clears
    t.arm_in(1e6)
    t.clear()
    got = []
    th = threading.Thread(target=lambda: got.append(t.wait()))
    th.start()
    time.sleep(0.02)
    assert got == []  # cleared: sleeps until set again
    t.set_in(0.0)  # an earlier deadline wakes it
    th.join(30)
    assert got == [True]
    th = threading.Thread(target=lambda: got.append(t.wait()))
    th.start()
    t.close()
    th.join(30)
    assert got == [True, False] and not t.wait()
    with pytest.raises(ValueError):
        t.set_in(-1)


@pytest.mark.parametrize("index", ["hnsw", "bq"])
def test_fast_path_records_equal_the_general_paths(tmp_path, index):
    """search() of one vector without filters runs the single-query fast path also when audited; its
    records are the ones the general path writes for the same call (search_batch of that one vector),
    byte for byte but time and latency, and a fast-path call that fails is recorded too."""
    path = tmp_path / "c"
    n = 3000  # big enough for the planner to use the index (the fast path)
    x = np.random.default_rng(4).standard_normal((n, DIM)).astype(np.float32)
    c = vecsift.Collection.create(path, DIM, index=index, audit={"flush_ms": 60_000})
    c.add([f"id {i} \"q\"" for i in range(n)], x)
    c.commit()
    c.search(x[0], k=3)  # makes the log (the general path) and the fast path
    one = c._one[3]
    assert one is not None and one.__name__ == "audited_run"
    served = []
    real = c._one[3]

    def counting(*a):
        out = real(*a)
        served.append(out is not None)
        return out

    c._one = c._one[:3] + (counting,)
    for i in range(1, 6):
        fast = c.search(x[i], k=4)
        general = c.search_batch(x[i:i + 1], k=4)[0]
        assert [h.id for h in fast] == [h.id for h in general]
    assert served == [True] * 5
    c.close()
    recs = records(path)
    assert len(recs) == 11
    strip = [{k: v for k, v in e.items() if k not in ("t", "ms", "seq")} for e in recs[1:]]
    for a, b in zip(strip[::2], strip[1::2]):
        assert a == b and a["op"] == "search" and a["mode"] == "dense" and a["k"] == 4
        assert a["tenant"] is None and a["groups"] is None and a["where"] is None and len(a["ids"][0]) == 4
    # the payload bytes too: re-encoding the parsed records gives the same keys in the same order
    raw = b"".join(open(os.path.join(path, f), "rb").read() for _, f in log_files(path))
    assert raw.count(b'"op":"search","mode":"dense","k":4,"tenant":null,"groups":null,"where":null') == 10


def test_fast_path_failure_is_recorded(tmp_path, monkeypatch):
    path = tmp_path / "c"
    x = np.random.default_rng(5).standard_normal((3000, DIM)).astype(np.float32)
    c = vecsift.Collection.create(path, DIM, index="bq", audit={"flush_ms": 60_000})
    c.add([f"r{i}" for i in range(3000)], x)
    c.commit()
    c.search(x[0], k=3)
    assert c._one[3] is not None

    def broken(*a, **kw):
        raise vecsift.CorruptIndexError("vectors-0.f32: rows 0..9 fail their block checksum")

    monkeypatch.setattr(c.snapshot().dense, "search", broken)
    with pytest.raises(vecsift.CorruptIndexError):
        c.search(x[1], k=3)
    c.close()
    last = records(path)[-1]
    assert last["ids"] == [] and last["error"].startswith("CorruptIndexError: vectors-0.f32") and last["k"] == 3
