"""Target: the HNSW file (cpp/include/vecsift/io/hnsw_io.hpp) through vecsift.HNSWIndex.load, read whole
(verify=True) or mapped (mmap=True, verify False / True), then searched (with and without an allow set)
and grown by one row (which checks the links an unverified mapping skipped).

variant % 3: (mmap, verify) = (False, True), (True, True), (True, False)."""
import atheris
import numpy as np

import harness

with harness.instrumented(__name__):
    import vecsift

OPENS = ((False, True), (True, True), (True, False))
_BASE = {}


def _base(deleted: bool) -> bytes:
    """A saved 60 x 6 graph (m=4, so several levels), labels 100.., some rows deleted."""
    if deleted not in _BASE:
        rng = np.random.default_rng(1)
        ix = vecsift.HNSWIndex(6, "l2", m=4, ef_construction=20, seed=3)
        ix.add(rng.standard_normal((60, 6)).astype(np.float32), ids=np.arange(100, 160), threads=1)
        if deleted:
            ix.mark_deleted([101, 120, 159])
        path = harness.scratch() + "/base.idx"
        ix.save(path)
        with open(path, "rb") as f:
            _BASE[deleted] = f.read()
    return _BASE[deleted]


def seeds():
    out = []
    for v in range(6):
        base = _base(bool(v // 3))
        out += [harness.seed(harness.RAW, base, v), harness.seed(harness.FIXED, base, v),
                harness.seed(harness.EDIT, bytes(range(32)), v)]
    return out


def one_input(data: bytes) -> None:
    mode, variant, rest = harness.split_mode(data)
    mmap, verify = OPENS[variant % 3]
    if mode == harness.EDIT:
        fdp = atheris.FuzzedDataProvider(rest)
        rest = harness.edit_struct(_base(bool(variant // 3 % 2)), harness.HNSW_FIELDS, fdp)
        rest = harness.edit_bytes(rest, fdp, 128) if fdp.ConsumeBool() else rest
    if mode != harness.RAW:
        rest = harness.fix_hnsw(rest)
    path = harness.write_file(harness.scratch() + "/fuzz.idx", rest)
    ix = harness.expect(vecsift.HNSWIndex.load, harness.loader_errors(), path, mmap=mmap, verify=verify)
    if ix is None:
        return
    q = np.linspace(-1, 1, 2 * ix.dim, dtype=np.float32).reshape(2, ix.dim)
    for k, ef in ((1, None), (10, 4), (70, 200)):
        ids, scores = ix.search(q, k=k, ef=ef)
        assert ids.shape == (2, k) and scores.shape == (2, k)
    labels = ix.labels()
    if len(labels):
        ix.search(q, k=5, allow=labels[: max(1, len(labels) // 3)])
    # adding checks an unverified mapping's links first: CorruptIndexError, never a crash
    harness.expect(ix.add, harness.loader_errors() + (ValueError,), q[:1], ids=[labels.max() + 1 if len(labels) else 0])


if __name__ == "__main__":
    harness.main(seeds, one_input)
