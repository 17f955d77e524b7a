import numpy as np
import pytest

import vecsift
from vecsift import BM25Index, exact_search, rrf


def test_rank_one_in_both_lists_scores_2_over_61():
    ids, scores = rrf([[7, 1, 2], [7, 2, 9]])
    assert ids[0] == 7 and scores[0] == pytest.approx(2 / 61)


def test_hand_computed_example():
    ids, scores, ranks = rrf([[1, 2, 3], [3, 1], [4]], k=60, return_ranks=True)
    want = {1: 1 / 61 + 1 / 62, 2: 1 / 62, 3: 1 / 63 + 1 / 61, 4: 1 / 61}
    # 1 and 3 tie on score; 1 has the better best rank?  both have a rank 1, so the smaller id first.
    assert ids.tolist() == [1, 3, 4, 2]
    np.testing.assert_allclose(scores, [want[i] for i in ids.tolist()])
    assert ranks.tolist() == [[1, 2, 0], [3, 1, 0], [0, 0, 1], [2, 0, 0]]


def test_weights_top_n_padding_duplicates():
    ids, scores = rrf([np.array([5, -1, -1]), np.array([6, 5, 5])], k=1, weights=[2.0, 1.0], top_n=1)
    assert ids.tolist() == [5] and scores[0] == pytest.approx(2 / 2 + 1 / 3)
    ids, scores = rrf([[], [-1]])
    assert ids.size == 0 and scores.size == 0
    # a tie broken by the better best rank: 8 is first somewhere, 9 only second
    ids, _ = rrf([[8, 9], [9, 8]], weights=[1, 1])
    assert ids.tolist() == [8, 9]
    with pytest.raises(ValueError):
        rrf([[1], [2]], weights=[1.0])
    with pytest.raises(TypeError):
        rrf([[1.5, 2.0]])
    with pytest.raises(ValueError):
        rrf([[1]], k=-1)


def test_rrf_matches_brute_force():
    rng = np.random.default_rng(3)
    lists = [rng.permutation(50)[: rng.integers(1, 30)] for _ in range(3)]
    w = [1.0, 0.5, 2.0]
    ref = {}
    for wi, r in zip(w, lists):
        for pos, d in enumerate(r.tolist()):
            ref[d] = ref.get(d, 0.0) + wi / (60 + pos + 1)
    ids, scores = rrf(lists, weights=w)
    assert set(ids.tolist()) == set(ref)
    np.testing.assert_allclose(scores, [ref[i] for i in ids.tolist()])
    assert (np.diff(scores) <= 0).all()


def rrf_reference(lists, k=60, weights=None):
    """Plain-Python RRF: [(id, score, ranks)] ordered by score, best rank, id."""
    weights = [1.0] * len(lists) if weights is None else weights
    score, ranks = {}, {}
    for li, (w, r) in enumerate(zip(weights, lists)):
        for pos, d in enumerate(r, 1):
            if d < 0:
                continue
            rk = ranks.setdefault(d, [0] * len(lists))
            if rk[li] == 0:  # first occurrence in this list
                rk[li] = pos
                score[d] = score.get(d, 0.0) + w / (k + pos)
    best = {d: min(r for r in rk if r) for d, rk in ranks.items()}
    return sorted(((d, score[d], ranks[d]) for d in score), key=lambda x: (-x[1], best[x[0]], x[0]))


@pytest.mark.parametrize("seed", range(6))
def test_rrf_order_ranks_and_ties_match_reference(seed):
    rng = np.random.default_rng(seed)
    big = seed % 2 == 1  # ids near 2**63 take the stable-sort path instead of composite keys
    base = (2**63 - 1000) if big else 0
    lists = []
    for _ in range(int(rng.integers(1, 5))):
        r = base + rng.integers(0, 40, int(rng.integers(0, 60)))  # repeats and ties are common
        r[rng.random(r.size) < 0.1] = -1
        lists.append(r.astype(np.int64))
    weights = [float(w) for w in rng.choice([0.0, 0.5, 1.0, 2.0], len(lists))]
    for top_n in (None, 0, 5):
        ids, scores, ranks = rrf(lists, k=60, weights=weights, top_n=top_n, return_ranks=True)
        want = rrf_reference([r.tolist() for r in lists], 60, weights)[: top_n]
        assert ids.tolist() == [d for d, _, _ in want]
        np.testing.assert_allclose(scores, [s for _, s, _ in want], rtol=1e-15)
        assert ranks.tolist() == [rk for _, _, rk in want]


def test_hybrid_finds_what_each_retriever_alone_misses():
    texts = [
        "Error TS-999 means the upload token expired; sign in again.",   # literal
        "Refunds: we return your payment to the original card in 5 days.",  # meaning
        "Shipping takes three business days within the country.",
        "Reset your password from the account settings page.",
        "Our office is closed on public holidays.",
    ]
    # Hand-made 'embeddings': the query 'how do I get my money back' sits near the
    # refund chunk, while the TS-999 chunk looks like generic account text.
    vecs = np.array([[0.0, 0.2, 1.0], [0.9, 0.1, 0.1], [0.2, 0.1, 0.9],
                     [0.3, 1.0, 0.1], [0.0, 0.3, 1.0]], np.float32)
    qvec = np.array([[1.0, 0.2, 0.0]], np.float32)
    query = "how do I get my money back after TS-999"
    bm = BM25Index()
    bm.add(texts)
    sparse, _ = bm.search(query, k=2)
    dense, _ = exact_search(vecs, qvec, k=2, metric="cosine")
    assert 0 in sparse.tolist() and 1 not in sparse.tolist()
    assert 1 in dense[0].tolist() and 0 not in dense[0].tolist()
    fused, _ = rrf([sparse, dense[0]], top_n=2)
    assert set(fused.tolist()) == {0, 1}


def test_public_names():
    assert vecsift.rrf is rrf
    assert hasattr(vecsift.eval, "ndcg_at_k")
