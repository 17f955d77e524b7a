"""Filters.allow: the allow set from tenant, ACL groups and where-clauses, and its per-snapshot cache."""
import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap, FrozenBitMap

from vecsift.collection.filters import Filters


def filters(n=1000):
    f = Filters(["kind"])
    rows = np.arange(n)
    f.add_rows(0, pa.array([f"t{i % 3}" for i in rows]),
               pa.array([[f"g{i % 4}"] if i % 5 else None for i in rows], pa.list_(pa.string())),
               {"kind": pa.array([["a", "b", "c"][i % 3] if i % 7 else None for i in rows])})
    return f


def brute(n, deleted, tenant, groups, kinds):
    out = set()
    for i in range(n):
        if i in deleted or f"t{i % 3}" != tenant or i % 5 == 0 or f"g{i % 4}" not in groups:
            continue
        if kinds is not None and (i % 7 == 0 or ["a", "b", "c"][i % 3] not in kinds):
            continue
        out.add(i)
    return out


def test_allow_matches_brute_force_and_is_cached_per_live_set():
    f, n = filters(), 1000
    live = FrozenBitMap(range(n))
    cases = [("t0", ["g1"], None), ("t1", ["g0", "g3"], ["b"]), ("t2", ("g2",), "c"), ("t0", [], None)]
    for tenant, groups, kinds in cases:
        where = None if kinds is None else {"kind": kinds}
        got = f.allow(live, tenant, groups, where)
        want_kinds = None if kinds is None else ([kinds] if isinstance(kinds, str) else kinds)
        assert set(got) == brute(n, set(), tenant, set(groups), want_kinds)
        assert isinstance(got, FrozenBitMap)
        assert f.allow(live, tenant, groups, where) is got  # the same object: indexes cache on it
    # the same filter spelled differently is the same entry
    assert f.allow(live, "t1", ["g3", "g0"], {"kind": ("b",)}) is f.allow(live, "t1", ["g0", "g3"], {"kind": ["b"]})
    # a new live set (a delete) is never answered from the old one's entries
    deleted = set(range(0, n, 2))
    live2 = FrozenBitMap(BitMap(range(n)) - BitMap(deleted))
    got = f.allow(live2, "t0", ["g1"])
    assert set(got) == brute(n, deleted, "t0", {"g1"}, None)
    # checks still run on every call
    with pytest.raises(ValueError, match="tenant"):
        f.allow(live2, None, ["g1"])
    with pytest.raises(ValueError, match="groups"):
        f.allow(live2, "t0")
    with pytest.raises(ValueError, match="unknown filter field"):
        f.allow(live2, "t0", ["g1"], {"colour": "red"})


def test_no_tenants_means_an_unknown_tenant_sees_nothing():
    f = Filters()
    f.add_rows(0, pa.nulls(10, pa.string()), pa.nulls(10, pa.list_(pa.string())), {})
    live = FrozenBitMap(range(10))
    assert f.allow(live) is live
    assert len(f.allow(live, "acme")) == 0
