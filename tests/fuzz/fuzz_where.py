"""Target: the where= language (collection/where.py parse + evaluate over the roaring filters), through
Collection.search on a small collection with number / string / datetime / bool filter fields, and
Snapshot.allow, with Mongo / PGVector operators and Qdrant must / should / must_not."""
import atheris
import numpy as np

import harness

with harness.instrumented(__name__):
    import vecsift  # noqa: F401


def seeds():
    return [bytes([i]) * 40 for i in range(0, 256, 7)] + [bytes(range(64))]


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    c = harness.open_fixture(harness.pick(fdp, ("quant", "sign", "hnsw")))
    where = harness.where_arg(fdp)
    tenant = harness.pick(fdp, ("a", "b"))
    snap = c.snapshot()
    allow = harness.expect(snap.allow, harness.query_errors(), tenant, ["g1"], where)
    if allow is not None:
        assert set(allow) <= set(snap.live)
    hits = harness.expect(c.search, harness.query_errors(), np.ones(c.dim, np.float32), k=50, tenant=tenant,
                          groups=["g1"], where=where)
    if hits is not None:
        assert all(h.tenant == tenant for h in hits)
        if allow is not None:
            assert len(hits) == min(50, len(allow)), (len(hits), len(allow))


if __name__ == "__main__":
    harness.main(seeds, one_input)
