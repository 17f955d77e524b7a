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
