"""The node server as a plain class (no Ray): one call over its local shards, one merged answer."""
import pickle

import numpy as np
import pyarrow as pa
import pytest

from vecsift import Hit
from vecsift.distributed.gather import SCORE, ID, merge_packed, node_request, pack_hits, read_request, request
from vecsift.distributed.manifest import write_cluster
from vecsift.distributed.node import NodeServer, merge_hits, merge_payloads
from vecsift.distributed.routing import id_hash

from .conftest import corpus, text_queries

DIM = 8
SCOPE = {"tenant": None, "groups": None, "where": None}


def _table(ids, x, texts):
    return pa.table({"id": ids, "vector": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), DIM), "text": texts})


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("node"))
    ids, x, texts, _ = corpus(900, DIM, seed=71)
    node = NodeServer(root, [(s, f"shard-{s:02d}") for s in range(3)], 0, "s1", {"dim": DIM, "metric": "cosine"})
    shard_of = (id_hash(ids) % np.uint64(3)).astype(int)
    calls = {}
    for s in range(3):
        m = np.flatnonzero(shard_of == s)
        calls[s] = ("add", (_table([ids[i] for i in m], x[m], [texts[i] for i in m]),))
    node.write(calls)
    node.write({s: ("prepare", (1,)) for s in range(3)})
    write_cluster(root, {"generation": 1})
    node.write({s: ("apply", (1,)) for s in range(3)})
    return node, ids, x, texts


def _call(node, shards, method, *args):
    return pickle.loads(node.call(node_request(shards, request(method, *args))))


def test_dense_answer_is_the_merged_top_k(node):
    node, ids, x, _ = node
    q = np.random.default_rng(1).standard_normal((5, DIM)).astype(np.float32)
    served, unserved, payload = _call(node, [0, 1, 2], "search", 1, q, None, 10, SCOPE, {"threads": 1})
    assert served == [0, 1, 2] and unserved == {}
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    sims = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ xn.T
    for row, cols in zip(sims, payload):  # exact path (few rows): the numpy top 10 over all shards
        assert cols[ID] == [ids[i] for i in np.argsort(-row)[:10]]
        np.testing.assert_allclose(cols[SCORE], np.sort(row)[::-1][:10], atol=1e-5)
    # merging merged lists gives the same top k (what the gatherer does with node answers)
    parts = [_call(node, [s], "search", 1, q, None, 10, SCOPE, {"threads": 1})[2] for s in range(3)]
    two = merge_payloads("search", (1, q, None, 10), [parts[0], merge_payloads("search", (1, q, None, 10), parts[1:])])
    assert two == payload


def test_statistics_are_the_sums(node):
    node, ids, x, texts = node
    qs = text_queries(4, seed=3)
    _, _, total = _call(node, [0, 1, 2], "statistics", 1, qs, SCOPE)
    for q, st in zip(qs, total):
        assert st["n"] == len(ids)
        for w in set(q.split()):
            assert st["df"].get(w, 0) == sum(w in t.split() for t in texts)


def test_unserved_shards_are_named(node):
    node, _, x, _ = node
    served, unserved, payload = _call(node, [1, 7], "search", 1, x[:1], None, 3, SCOPE, {"threads": 1})
    assert served == [1] and set(unserved) == {7} and len(payload[0][ID]) == 3
    served, unserved, payload = _call(node, [0, 2], "search", 2, x[:1], None, 3, SCOPE, {"threads": 1})
    assert served == [] and payload is None and "generation 1" in unserved[0]
    with pytest.raises(ValueError, match="not a search method"):
        _call(node, [0], "add", 1)
    with pytest.raises(ValueError, match="where"):  # the Collection's own error goes back as it is
        _call(node, [0], "search", 1, x[:1], None, 3, dict(SCOPE, where={"nope": 1}), {"threads": 1})


def test_threads_give_the_same_answer(node):
    node, _, x, _ = node
    q = x[:4] + 0.01
    one = _call(node, [0, 1, 2], "search", 1, q, None, 10, SCOPE, {"threads": 1})
    node.threads = 3
    try:
        assert _call(node, [0, 1, 2], "search", 1, q, None, 10, SCOPE, {"threads": 1}) == one
    finally:
        node.threads = 1


def test_merge_packed_ties_by_id():
    rng = np.random.default_rng(2)
    lists = []
    for n in (5, 0, 7):  # columns id, score (then the other Hit fields)
        ids = [f"r{int(i)}" for i in rng.choice(1000, n, replace=False)]
        scores = np.round(rng.random(n), 1).tolist()  # many exact ties
        order = sorted(range(n), key=lambda j: (-scores[j], ids[j]))
        lists.append(([ids[j] for j in order], [scores[j] for j in order], [None] * n))
    got = merge_packed(lists, 6)
    every = sorted((-sc, i) for cols in lists for i, sc in zip(cols[ID], cols[SCORE]))[:6]
    assert got[ID] == [i for _, i in every] and got[SCORE] == [-sc for sc, _ in every] and got[2] == [None] * 6


def test_merge_hits_orders_as_merge_packed():
    # the node merges its shards' Hits and packs the k it sends: the same list merge_packed makes
    # of the packed ones, exact ties (by id, then shard order) included
    rng = np.random.default_rng(5)
    for n_shards, k in ((3, 6), (3, 40), (1, 4), (1, 10)):
        parts = []
        for s in range(n_shards):
            per_query = []
            for n in (7, 0, 12):
                hits = [Hit(f"r{int(rng.integers(30))}", float(np.round(rng.random(), 1)), text=f"s{s}", dense_rank=j + 1)
                        for j in range(n)]  # repeated ids across shards and many equal scores
                per_query.append(sorted(hits, key=lambda h: -h.score)[:k])
            parts.append(per_query)
        want = [merge_packed([pack_hits(p[q]) for p in parts], k) for q in range(3)]
        assert merge_hits(parts, k) == want


def test_request_vectors_travel_as_bytes():
    q = np.random.default_rng(3).standard_normal((2, DIM)).astype(np.float32)
    req = request("search", 4, q, None, 10, SCOPE, {"threads": 1})
    assert type(pickle.loads(req)[1][1]) is tuple  # no pickled ndarray on the wire
    method, args = read_request(req)
    assert method == "search" and args[0] == 4 and args[2:] == (None, 10, SCOPE, {"threads": 1})
    assert args[1].dtype == np.float32 and args[1].shape == (2, DIM) and np.array_equal(args[1], q)
    assert args[1].flags.writeable and args[1].flags.c_contiguous
    for other in (q.astype(np.float64), q[:, ::2], np.zeros((0, DIM), np.float32)):  # as they are / empty
        got = read_request(request("search_hybrid", 4, other, None, 10, SCOPE, {}))[1][1]
        assert got.dtype == other.dtype and got.shape == other.shape and np.array_equal(got, other)
    assert read_request(request("statistics", 4, ["a b"], SCOPE)) == ("statistics", (4, ["a b"], SCOPE))


def _node_of(root, tables, cargs):
    node = NodeServer(root, [(s, f"shard-{s:02d}") for s in range(len(tables))], 0, "s1", cargs)
    node.write({s: ("add", (t,)) for s, t in enumerate(tables)})
    node.write({s: ("prepare", (1,)) for s in range(len(tables))})
    write_cluster(root, {"generation": 1})
    node.write({s: ("apply", (1,)) for s in range(len(tables))})
    return node


def _hit_route(node, shards, q, k):
    """What the node sent before the rows route: each shard's Hits (search_hits), merged, then packed."""
    return merge_hits([node.shards[s].search_hits(1, q, None, k, SCOPE, {"threads": 1})[1] for s in shards], k)


@pytest.fixture(scope="module")
def big_node(tmp_path_factory):
    # shards large enough for Collection.search's fast path (a few hundred rows are scanned exactly),
    # and one too small for it; the same vectors under other ids on other shards (exact score ties)
    root = str(tmp_path_factory.mktemp("bignode"))
    rng = np.random.default_rng(9)
    x = rng.standard_normal((9000, DIM)).astype(np.float32)
    x[3000:3050] = x[:50]  # shard 1 repeats shard 0's first 50 vectors
    x[6000:6020] = x[:20]  # shard 2 too
    tables, ids = [], []
    for s, (a, b) in enumerate(((0, 3000), (3000, 6000), (6000, 9000), (9000, 9000))):
        sid = [f"s{s}-{i:05d}" for i in range(b - a)] if s < 3 else [f"s3-{i}" for i in range(40)]
        xs = x[a:b] if s < 3 else rng.standard_normal((40, DIM)).astype(np.float32)
        tables.append(pa.table({"id": sid, "vector": pa.FixedSizeListArray.from_arrays(pa.array(xs.ravel()), DIM),
                                "text": [f"t {i}" for i in sid], "doc_id": [f"d{i}" for i in sid]}))
        ids.append(sid)
    return _node_of(root, tables, {"dim": DIM, "metric": "cosine"}), x


def test_rows_route_sends_what_the_hit_route_sent(big_node):
    node, x = big_node
    assert node.shards[0].col._search_rows(x[0] + 0.5, 10) is not None  # the route under test is live
    assert node.shards[3].col._search_rows(x[0] + 0.5, 10) is None  # 40 rows: search()'s general path
    rng = np.random.default_rng(10)
    qs = list(rng.standard_normal((20, DIM)).astype(np.float32)) + [x[5], x[10] + 1e-3, x[30]]  # the last: ties
    for shards in ([0, 1, 2], [0, 1, 2, 3], [1], [3], [0, 3]):
        for k in (1, 10, 60):
            for q in qs:
                served, unserved, payload = _call(node, shards, "search", 1, q[None], None, k, SCOPE, {"threads": 1})
                assert served == shards and unserved == {}
                assert payload == [_hit_route(node, shards, q[None], k)[0]]
    # the shards on the fast path do not make Hits: their search_hits is not called
    srv = node.shards[0]
    srv.search_hits = None
    try:
        assert _call(node, [0, 3], "search", 1, qs[0][None], None, 10, SCOPE, {"threads": 1})[1] == {}
    finally:
        del srv.search_hits


def test_shards_on_the_fast_path_are_searched_together(big_node):
    # shards 0-2 go through collection.search_parts (two native calls for all three): their own
    # search paths are not called, each shard's call is counted once, and the answer is the one above
    node, x = big_node
    q = x[100] + 0.25
    want = _hit_route(node, [0, 1, 2], q[None], 10)
    before = node.ping()["calls"]
    for s in range(3):
        node.shards[s].col._search_rows = node.shards[s].search_hits = None
    try:
        assert _call(node, [0, 1, 2], "search", 1, q[None], None, 10, SCOPE, {"threads": 1})[2] == want
    finally:
        for s in range(3):
            del node.shards[s].col._search_rows, node.shards[s].search_hits
    after = node.ping()["calls"]
    assert [after[s] - before[s] for s in range(4)] == [1, 1, 1, 0]
    # a shard the route does not take (40 rows: scanned exactly) sends the call shard by shard
    calls = []
    node.shards[0].col._search_rows = lambda *a, **kw: calls.append(a) or None
    try:
        assert _call(node, [0, 3], "search", 1, q[None], None, 10, SCOPE, {"threads": 1})[2] == \
            _hit_route(node, [0, 3], q[None], 10)
    finally:
        del node.shards[0].col._search_rows
    assert len(calls) == 1


def test_rows_route_ties_are_ordered_by_id(big_node):
    node, x = big_node
    _, _, payload = _call(node, [2, 1, 0], "search", 1, x[7][None], None, 3, SCOPE, {"threads": 1})
    cols = payload[0]
    # the same vector is on three shards: three equal top scores, ordered by id (not by shard or position)
    assert cols[ID] == ["s0-00007", "s1-00007", "s2-00007"] and len(set(cols[SCORE])) == 1


def test_rows_route_keeps_the_security_rules(tmp_path):
    # a shard with tenants: an unscoped query is refused (not served from the rows route), a scoped one filtered
    rng = np.random.default_rng(11)
    x = rng.standard_normal((6000, DIM)).astype(np.float32)
    tables = []
    for s in range(2):
        sid = [f"s{s}-{i}" for i in range(3000)]
        vec = pa.FixedSizeListArray.from_arrays(pa.array(x[s * 3000:(s + 1) * 3000].ravel()), DIM)
        tables.append(pa.table({"id": sid, "vector": vec, "tenant": ["a" if i % 3 else "canary" for i in range(3000)]}))
    node = _node_of(str(tmp_path), tables, {"dim": DIM, "metric": "cosine"})
    with pytest.raises(ValueError, match="tenant"):
        _call(node, [0, 1], "search", 1, x[:1], None, 10, SCOPE, {"threads": 1})
    _, _, payload = _call(node, [0, 1], "search", 1, x[:1], None, 10, dict(SCOPE, tenant="a"), {"threads": 1})
    assert len(payload[0][ID]) == 10 and set(payload[0][6]) == {"a"}
