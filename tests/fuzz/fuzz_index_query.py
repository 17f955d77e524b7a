"""Target: the standalone indexes' query surface: HNSWIndex / BinaryIndex / QuantizedIndex / IVFIndex /
BM25Index .search and exact_search, with queries of any shape and dtype, k / ef / oversample / nprobe
values, and allow sets of every accepted form (roaring bitmaps, label arrays of any dtype, bool masks
of any length) plus wrong ones. Allowed: ValueError, TypeError, vecsift errors (with a message)."""
import atheris
import numpy as np
from pyroaring import BitMap

import harness

with harness.instrumented(__name__):
    import vecsift

DIM, N = 8, 50
_IX = {}


def _indexes():
    if not _IX:
        rng = np.random.default_rng(7)
        rows = rng.standard_normal((N, DIM)).astype(np.float32)
        h = vecsift.HNSWIndex(DIM, "cosine", m=6, ef_construction=30)
        h.add(rows, ids=np.arange(1000, 1000 + N))
        h.mark_deleted([1003])
        b = vecsift.BinaryIndex(DIM)
        b.add(rows)
        q = vecsift.QuantizedIndex(DIM, bits=2, metric="l2")
        q.add(rows)
        ivf = vecsift.IVFIndex.build(rows, nlist=4, metric="ip", seed=1)
        bm = vecsift.BM25Index()
        bm.add([f"alpha word{i % 6} beta{i}" for i in range(N)])
        _IX.update(hnsw=h, bq=b, quant=q, ivf=ivf, bm25=bm, rows=rows)
    return _IX


def _allow(fdp, bound: int):
    c = fdp.ConsumeIntInRange(0, 9)
    if c == 0:
        return None
    if c == 1:
        return BitMap(fdp.ConsumeIntInRange(0, bound + 5) for _ in range(fdp.ConsumeIntInRange(0, 20)))
    if c == 2:
        return np.zeros(harness.pick(fdp, (bound, bound - 1, bound + 7, 0)), bool) | fdp.ConsumeBool()
    if c == 3:
        dtype = harness.pick(fdp, (np.int64, np.uint64, np.int32, np.uint8, np.float64, np.int16))
        vals = [fdp.ConsumeIntInRange(-3, bound + 3) for _ in range(fdp.ConsumeIntInRange(0, 20))]
        try:
            return np.array(vals).astype(dtype)
        except (OverflowError, ValueError):
            return np.array(vals)
    if c == 4:
        return harness.pick(fdp, ([], [1, 2, 2], [2**63], [-1], "0,1", 3, [[1, 2]], np.arange(bound)[::2],
                                  np.array([1.5]), {1, 2}, np.ones((2, 2), bool)))
    return np.arange(0, bound, fdp.ConsumeIntInRange(1, 7))


def seeds():
    return [bytes([i]) * 48 for i in range(0, 256, 9)]


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    ix = _indexes()
    which = fdp.ConsumeIntInRange(0, 5)
    q = harness.array_arg(fdp, DIM)
    k = harness.int_arg(fdp) if fdp.ConsumeIntInRange(0, 2) == 0 else fdp.ConsumeIntInRange(1, 60)
    errors = harness.query_errors()
    threads = harness.pick(fdp, (0, 1, 2))
    if which == 0:
        h = ix["hnsw"]
        allow = _allow(fdp, h.label_bound)
        out = harness.expect(h.search, errors, q, k, harness.int_arg(fdp), allow, threads,
                             return_stats=fdp.ConsumeBool())
    elif which == 1:
        out = harness.expect(ix["bq"].search, errors, q, k, _allow(fdp, N), threads)
    elif which == 2:
        over = harness.int_arg(fdp)
        rescore = ix["rows"] if fdp.ConsumeBool() else None
        out = harness.expect(ix["quant"].search, errors, q, k, _allow(fdp, N), over if over is not None else 1,
                             rescore)
    elif which == 3:
        out = harness.expect(ix["ivf"].search, errors, q, k, harness.int_arg(fdp), harness.int_arg(fdp),
                             _allow(fdp, N), threads)
    elif which == 4:
        out = harness.expect(vecsift.exact_search, errors, ix["rows"], q, k,
                             harness.pick(fdp, ("cosine", "ip", "l2", "hamming", None)))
    else:
        bm = ix["bm25"]
        text = harness.text_arg(fdp)
        allow = _allow(fdp, N)
        if fdp.ConsumeBool():
            out = harness.expect(bm.search, errors, text, k, allow, harness.pick(fdp, ("index", "allowed", "x")))
        else:
            out = harness.expect(bm.search_batch, errors, [text, "beta3"], k, allow)
        out = None
    if out is not None and isinstance(k, int) and not isinstance(k, bool):
        ids, scores = out[0], out[1]
        assert ids.shape == scores.shape and ids.shape[-1] == k, (ids.shape, k)


if __name__ == "__main__":
    harness.main(seeds, one_input)
