"""The where= language against a pure-Python evaluator on random metadata (hypothesis)."""
import datetime as dt
import json
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap, FrozenBitMap

import vecsift
from vecsift.collection.filters import Filters

FIELDS = ["n", "x", "flag", "s", "d", "tags"]
STRINGS = ["", "a", "b", "Zoë", "日本", "a%b", "ß"]
DATES = ["2024-01-01", "2024-01-01T12:00:00", "2024-02-29T23:59:59+00:00", "2023-12-31T23:00:00-02:00",
         "2025-06-30"]


def _utc(v):
    t = v if isinstance(v, dt.datetime) else dt.datetime.fromisoformat(v) if isinstance(v, str) \
        else dt.datetime(v.year, v.month, v.day)
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def _norm(field, v):
    return _utc(v) if field == "d" else v


def reference(where, row) -> bool:
    """Plain Python: comparisons need the field; $ne, $nin, $not, $exists: false match it missing."""
    out = True
    for key, cond in where.items():
        if key == "$and":
            out &= all(reference(w, row) for w in cond)
        elif key == "$or":
            out &= any(reference(w, row) for w in cond)
        elif key == "$not":
            out &= not reference(cond, row)
        else:
            out &= field_holds(key, cond, row)
    return out


def field_holds(f, cond, row):
    v = row.get(f)
    elems = [] if v is None else [_norm(f, e) for e in (v if isinstance(v, list) else [v])]
    if not isinstance(cond, dict):
        cond = {"$in": cond} if isinstance(cond, list) else {"$eq": cond}
    ok = True
    for op, a in cond.items():
        if op == "$not":
            ok &= not field_holds(f, a, row)
            continue
        if op == "$exists":
            ok &= bool(elems) == a
            continue
        if op in ("$in", "$nin", "$between"):
            a = [_norm(f, x) for x in a]
        elif op not in ("$like",):
            a = _norm(f, a)
        test = {"$eq": lambda e: e == a, "$ne": lambda e: e == a, "$gt": lambda e: e > a,
                "$gte": lambda e: e >= a, "$lt": lambda e: e < a, "$lte": lambda e: e <= a,
                "$in": lambda e: e in a, "$nin": lambda e: e in a, "$between": lambda e: a[0] <= e <= a[1]}[op]
        hit = any(test(e) for e in elems)
        ok &= (not hit) if op in ("$ne", "$nin") else hit
    return ok


def random_rows(rng, n):
    rows = []
    for _ in range(n):
        r = {}
        if rng.random() < 0.8:
            r["n"] = int(rng.integers(-3, 4))
        if rng.random() < 0.8:
            r["x"] = float(rng.choice([-1.5, 0.0, 0.25, 2.0, 1e9]))
        if rng.random() < 0.7:
            r["flag"] = bool(rng.random() < 0.5)
        if rng.random() < 0.8:
            r["s"] = str(rng.choice(STRINGS))
        if rng.random() < 0.8:
            r["d"] = str(rng.choice(DATES))
        if rng.random() < 0.7:
            r["tags"] = [str(t) for t in rng.choice(STRINGS, size=int(rng.integers(0, 3)))]
        rows.append(r)
    return rows


def build(rows, parts=3):
    f = Filters(FIELDS)
    bounds = np.linspace(0, len(rows), parts + 1).astype(int)
    for a, b in zip(bounds[:-1], bounds[1:]):
        chunk = rows[a:b]
        cols = {k: pa.array([r.get(k) for r in chunk], type=pa.list_(pa.string()) if k == "tags" else None)
                for k in FIELDS}
        f.add_rows(int(a), pa.nulls(b - a, pa.string()), pa.nulls(b - a, pa.list_(pa.string())), cols)
    return f


ROWS = random_rows(np.random.default_rng(1), 400)
FILTERS = build(ROWS)
LIVE = FrozenBitMap(range(len(ROWS)))

values = {"n": st.integers(-4, 4), "x": st.sampled_from([-1.5, 0.0, 0.25, 1.0, 2.0, 1e9]),
          "flag": st.booleans(), "s": st.sampled_from(STRINGS), "d": st.sampled_from(DATES + ["2024-01-15"]),
          "tags": st.sampled_from(STRINGS)}
ordered = ["n", "x", "s", "d"]


@st.composite
def leaf(draw):
    f = draw(st.sampled_from(FIELDS))
    v = values[f]
    ops = ["$eq", "$ne", "$in", "$nin", "$exists", "implicit", "list"]
    if f in ordered:
        ops += ["$gt", "$gte", "$lt", "$lte", "$between"]
    op = draw(st.sampled_from(ops))
    if op == "implicit":
        return {f: draw(v)}
    if op == "list":
        return {f: draw(st.lists(v, max_size=3))}
    if op in ("$in", "$nin"):
        return {f: {op: draw(st.lists(v, max_size=3))}}
    if op == "$exists":
        return {f: {op: draw(st.booleans())}}
    if op == "$between":
        a, b = sorted([draw(v), draw(v)], key=lambda x: _norm(f, x))
        return {f: {op: [a, b]}}
    cond = {op: draw(v)}
    if f in ordered and draw(st.booleans()):  # two bounds on one field
        cond["$lte" if op != "$lte" else "$gte"] = draw(v)
    if draw(st.integers(0, 5)) == 0:
        cond = {"$not": cond}
    return {f: cond}


trees = st.recursive(leaf(), lambda sub: st.one_of(
    st.lists(sub, min_size=1, max_size=3).map(lambda ws: {"$and": ws}),
    st.lists(sub, min_size=1, max_size=3).map(lambda ws: {"$or": ws}),
    sub.map(lambda w: {"$not": w}),
    st.lists(sub, min_size=2, max_size=2).map(lambda ws: {**ws[0], **ws[1]})), max_leaves=6)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees)
def test_where_matches_python_reference(where):
    want = {i for i, r in enumerate(ROWS) if reference(where, r)}
    assert set(FILTERS.allow(LIVE, where=where)) == want


def test_kinds_are_recorded_and_survive_a_round_trip():
    assert FILTERS.kinds == {"n": "number", "x": "number", "flag": "bool", "s": "string", "d": "datetime",
                             "tags": "string"}
    again = Filters.from_bytes(FILTERS.to_bytes(), "f")
    assert again.kinds == FILTERS.kinds
    for where in [{"n": {"$gte": 0}}, {"d": {"$lt": "2024-02-01"}}, {"s": {"$gt": "a"}}, {"tags": "ß"},
                  {"flag": False}, {"x": {"$between": [0, 2]}}, {"n": {"$exists": False}}]:
        assert set(again.allow(LIVE, where=where)) == {i for i, r in enumerate(ROWS) if reference(where, r)}


def _old_blob(fields, keyed: dict) -> bytes:
    """The filters blob as written before kinds existed: string keys only."""
    blobs, entries, off = [], [], 0
    for f, table in keyed.items():
        for k, rows in table.items():
            b = BitMap(rows).serialize()
            entries.append(["v", f, k, off, len(b)])
            blobs.append(b)
            off += len(b)
    b = BitMap().serialize()
    entries.append(["d", None, None, off, len(b)])
    blobs.append(b)
    head = json.dumps({"fields": fields, "has_tenants": False, "has_acl": False, "entries": entries}).encode()
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def test_old_blobs_still_read_and_answer_ranges():
    blob = _old_blob(["year", "kind", "day"], {"year": {"2001": [0, 2], "2003": [1], "1999.5": [3]},
                                               "kind": {"a": [0, 1], "b": [2, 3]},
                                               "day": {"2024-01-02": [0], "2024-03-01": [1, 2]}})
    f = Filters.from_bytes(blob, "old")
    assert f.kinds == {"year": "number", "kind": "string", "day": "datetime"}
    live = FrozenBitMap(range(4))
    assert set(f.allow(live, where={"year": 2001})) == {0, 2}
    assert set(f.allow(live, where={"year": {"$lt": 2002}})) == {0, 2, 3}
    assert set(f.allow(live, where={"kind": ["b"], "day": {"$gte": "2024-02-01"}})) == {2}
    assert set(f.allow(live, where={"day": {"$exists": True}})) == {0, 1, 2}


def test_errors_name_the_problem():
    live = LIVE
    with pytest.raises(ValueError, match="unknown filter field 'colour'"):
        FILTERS.allow(live, where={"colour": "red"})
    with pytest.raises(ValueError, match=r"unknown operator '\$gtt'.*'n'"):
        FILTERS.allow(live, where={"n": {"$gtt": 1}})
    with pytest.raises(ValueError, match=r"unknown operator '\$xor'"):
        FILTERS.allow(live, where={"$xor": [{"n": 1}]})
    with pytest.raises(TypeError, match="'n' holds number values.*'3'"):
        FILTERS.allow(live, where={"n": {"$gt": "3"}})
    with pytest.raises(TypeError, match="'flag' holds bool"):
        FILTERS.allow(live, where={"flag": {"$gt": True}})
    with pytest.raises(TypeError, match="'flag' holds bool values"):
        FILTERS.allow(live, where={"flag": 1})
    with pytest.raises(TypeError, match="'d'.*not an ISO 8601 date"):
        FILTERS.allow(live, where={"d": {"$gte": "yesterday"}})
    with pytest.raises(TypeError, match="'s' holds string values"):
        FILTERS.allow(live, where={"s": {"$lt": 3}})
    with pytest.raises(TypeError, match=r"\$between takes \[low, high\]"):
        FILTERS.allow(live, where={"n": {"$between": [1]}})
    with pytest.raises(TypeError, match=r"\$in takes a list"):
        FILTERS.allow(live, where={"n": {"$in": 3}})
    with pytest.raises(TypeError, match="filter field 'n' holds number values, got string"):
        FILTERS.add_rows(400, pa.nulls(1, pa.string()), pa.nulls(1, pa.list_(pa.string())),
                         {**{k: pa.nulls(1) for k in FIELDS}, "n": pa.array(["x"])})


def test_dates_of_every_spelling_and_like():
    f = Filters(["when", "name"])
    when = pa.array([dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc), None, dt.datetime(2024, 1, 3)],
                    pa.timestamp("us", "UTC"))
    f.add_rows(0, pa.nulls(3, pa.string()), pa.nulls(3, pa.list_(pa.string())),
               {"when": when, "name": pa.array(["Ärger", "arbor", None])})
    live = FrozenBitMap(range(3))
    for lo in ["2024-01-01T12:00:00Z", dt.datetime(2024, 1, 1, 14, tzinfo=dt.timezone(dt.timedelta(hours=2))),
               np.datetime64("2024-01-01T12:00")]:
        assert set(f.allow(live, where={"when": {"$gte": lo}})) == {0, 2}
        assert set(f.allow(live, where={"when": {"$gt": lo}})) == {2}
    assert set(f.allow(live, where={"when": {"$lt": dt.date(2024, 1, 2)}})) == {0}
    assert set(f.allow(live, where={"when": {"$ne": "2024-01-03"}})) == {0, 1}
    assert set(f.allow(live, where={"name": {"$like": "ar%"}})) == {1}
    assert set(f.allow(live, where={"name": {"$ilike": "ä%"}})) == {0}


def test_qdrant_filters():
    def q(flt):
        return set(FILTERS.allow(LIVE, where=flt))

    def ref(w):
        return {i for i, r in enumerate(ROWS) if reference(w, r)}

    assert q({"must": [{"key": "n", "range": {"gte": 1, "lt": 3}}]}) == ref({"n": {"$gte": 1, "$lt": 3}})
    assert q({"should": [{"key": "s", "match": {"value": "a"}}, {"key": "tags", "match": {"any": ["ß", "b"]}}]}) \
        == ref({"$or": [{"s": "a"}, {"tags": {"$in": ["ß", "b"]}}]})
    assert q({"must_not": [{"key": "flag", "match": {"value": True}}, {"is_empty": {"key": "d"}}]}) \
        == ref({"$not": {"$or": [{"flag": True}, {"d": {"$exists": False}}]}})
    assert q({"must": [{"key": "d", "range": {"gt": "2024-01-01T00:00:00Z"}},
                       {"must_not": [{"key": "s", "match": {"except": ["a"]}}]}]}) \
        == ref({"d": {"$gt": "2024-01-01T00:00:00Z"}, "s": "a"})


def test_collection_where_returns_k_allowed_rows_with_tenants_on_top(tmp_path):
    n, dim = 3000, 16
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    price = rng.uniform(0, 100, n)
    day = np.datetime64("2024-01-01") + rng.integers(0, 365, n).astype("timedelta64[D]")
    c = vecsift.Collection.create(tmp_path / "c", dim, filter_fields=["price", "date", "tags"])
    tenant = np.array(["t0", "t1"])[np.arange(n) % 2]
    tags = [["red"] if i % 3 == 0 else ["blue", "green"] for i in range(n)]
    c.add([f"r{i}" for i in range(n)], x, tenant=tenant, date=[str(d) for d in day],
          metadata={"price": price, "tags": tags})
    c.commit()
    where = {"price": {"$between": [10, 11]}, "date": {"$gte": "2024-06-01"}, "tags": {"$ne": "red"}}
    allowed = np.flatnonzero((price >= 10) & (price <= 11) & (day >= np.datetime64("2024-06-01"))
                             & (np.arange(n) % 3 != 0) & (tenant == "t1"))
    q = x[allowed[0]]
    sims = (x[allowed] / np.linalg.norm(x[allowed], axis=1, keepdims=True)) @ (q / np.linalg.norm(q))
    want = [f"r{i}" for i in allowed[np.argsort(-sims)[:10]]]
    for _ in range(2):
        hits = c.search(q, k=10, tenant="t1", where=where)
        assert [h.id for h in hits] == want and len(want) == min(10, len(allowed))
        c.close()
        c = vecsift.open(tmp_path / "c")  # kinds and sorted columns persisted
    assert c.search(q, k=10, tenant="t1", where={"price": {"$gt": 1000}}) == []
    c.close()


def test_langchain_style_cases():
    """The operator set LangChain's vector-store filter tests use, on a three-document corpus."""
    docs = [{"id": 1, "name": "adam", "is_active": True, "height": 10.0, "tags": ["a", "b"], "sad": 0.1},
            {"id": 2, "name": "bob", "is_active": False, "height": 5.7, "tags": ["b", "c"], "sad": 0.1},
            {"id": 3, "name": "jane", "is_active": True, "height": 2.4, "tags": ["b", "d"]}]
    names = ["id", "name", "is_active", "height", "tags", "sad"]
    f = Filters(names)
    f.add_rows(0, pa.nulls(3, pa.string()), pa.nulls(3, pa.list_(pa.string())),
               {k: pa.array([d.get(k) for d in docs]) for k in names})
    live = FrozenBitMap(range(3))
    cases = [({"id": 1, "is_active": False}, []), ({"id": {"$ne": 1}}, [2, 3]), ({"id": {"$lt": 1}}, []),
             ({"name": {"$gte": "jane"}}, [3]), ({"name": {"$lt": "jane"}}, [1, 2]),
             ({"is_active": {"$ne": True}}, [2]), ({"height": {"$lte": 5.8}}, [2, 3]),
             ({"$or": [{"id": 1}, {"name": "bob"}]}, [1, 2]), ({"$and": [{"id": 1}, {"id": 2}]}, []),
             ({"$not": [{"name": "adam"}]}, [2, 3]), ({"$not": {"height": {"$gt": 5.0}}}, [3]),
             ({"id": {"$nin": [1, 2]}}, [3]), ({"name": {"$like": "%a%"}}, [1, 3]),
             ({"name": {"$nlike": "a%"}}, [2, 3]), ({"name": {"$nilike": "%A%"}}, [2]),
             ({"sad": {"$exists": False}}, [3]), ({"sad": {"$exists": True}}, [1, 2]),
             ({"tags": "d"}, [3]), ({"tags": {"$in": ["a", "c"]}}, [1, 2]), ({"tags": {"$nin": ["b"]}}, []),
             ({"height": {"$between": (5, 10)}}, [1, 2])]
    for where, want in cases:
        assert sorted(r + 1 for r in f.allow(live, where=where)) == want, where
