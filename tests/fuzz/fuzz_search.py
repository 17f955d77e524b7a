"""Target: the Collection query surface: search / search_batch / search_rows / search_sparse /
bm25_statistics with vectors of any shape and dtype, texts, k / ef / oversample / candidates values,
modes, tenants and groups, where= filters and deadlines, on quant / sign-bit / hnsw collections.

Allowed: ValueError (LimitError), TypeError and vecsift's errors (DeadlineExceeded), each with a
message. On success: at most k hits per query, best first, no id twice, only the asked tenant's."""
import atheris
import numpy as np

import harness

with harness.instrumented(__name__):
    import vecsift  # noqa: F401


def seeds():
    return [bytes([i]) * 64 for i in range(0, 256, 5)] + [bytes(range(128))]


def _check(hits, k, tenant):
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
        return
    assert len(hits) <= k
    scores = [h.score for h in hits]
    assert all(a >= b or a != a or b != b for a, b in zip(scores, scores[1:])), scores
    ids = [h.id for h in hits]
    assert len(ids) == len(set(ids)), ids
    assert all(h.tenant == tenant for h in hits), (tenant, [h.tenant for h in hits])


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    c = harness.open_fixture(harness.pick(fdp, ("quant", "sign", "hnsw")))
    k = harness.int_arg(fdp) if fdp.ConsumeIntInRange(0, 2) == 0 else fdp.ConsumeIntInRange(1, 60)
    tenant = harness.pick(fdp, ("a", "b", "a", "zz", None, 5))
    groups = harness.pick(fdp, (["g1"], ["g2"], "g1", [], None, [1, 2], ["g1", "g2"]))
    opts = {}
    for name in ("ef", "oversample", "candidates"):
        if fdp.ConsumeIntInRange(0, 2) == 0:
            opts[name] = harness.int_arg(fdp)
    if fdp.ConsumeIntInRange(0, 3) == 0:
        opts["where"] = harness.where_arg(fdp)
    if fdp.ConsumeIntInRange(0, 4) == 0:
        opts["mode"] = harness.pick(fdp, ("dense", "sparse", "hybrid", "bogus", None))
    if fdp.ConsumeIntInRange(0, 5) == 0:
        opts["deadline"] = harness.pick(fdp, (1e-9, 0.0, -1, float("nan"), 30, "1", True))
    if fdp.ConsumeIntInRange(0, 5) == 0:
        opts["threads"] = harness.pick(fdp, (0, 1, 2, -1, 1.5))
    if fdp.ConsumeIntInRange(0, 6) == 0:
        opts["weights"] = harness.pick(fdp, ((1.0, 0.5), (0, 0), (-1, 2), (float("nan"), 1), (1,), "x"))
    if fdp.ConsumeIntInRange(0, 6) == 0:
        opts["rrf_k"] = harness.pick(fdp, (0, -60, 1e-9, float("inf"), "60", 60))
    call = fdp.ConsumeIntInRange(0, 5)
    errors = harness.query_errors()
    if call <= 1:
        vector = harness.array_arg(fdp, c.dim) if fdp.ConsumeIntInRange(0, 3) else None
        text = harness.text_arg(fdp) if fdp.ConsumeBool() else None
        hits = harness.expect(c.search, errors, vector, text, k, tenant, groups, **opts)
        if hits is not None:
            _check(hits, k, tenant)
    elif call <= 3:
        vectors = harness.array_arg(fdp, c.dim) if fdp.ConsumeIntInRange(0, 3) else None
        n = len(vectors) if hasattr(vectors, "__len__") and getattr(vectors, "ndim", 2) == 2 else 1
        texts = [harness.text_arg(fdp) for _ in range(n)] if fdp.ConsumeBool() else None
        out = harness.expect(c.search_batch, errors, vectors, texts, k, tenant, groups, **opts)
        for hits in out or []:
            _check(hits, k, tenant)
    elif call == 4:
        opts = {n: v for n, v in opts.items() if n in ("ef", "oversample", "where", "threads", "deadline")}
        out = harness.expect(c.search_rows, errors, harness.array_arg(fdp, c.dim), k, tenant, groups, **opts)
        if out is not None:
            rows, scores = out
            assert rows.shape == scores.shape and ((rows >= -1) & (rows < len(c.snapshot().table))).all()
    else:
        texts = [harness.text_arg(fdp) for _ in range(fdp.ConsumeIntInRange(0, 3))]
        where = opts.get("where")
        harness.expect(c.bm25_statistics, errors, texts, tenant, groups, where)
        harness.expect(c.search_sparse, errors, texts, None, k, tenant, groups, where)


if __name__ == "__main__":
    harness.main(seeds, one_input)
