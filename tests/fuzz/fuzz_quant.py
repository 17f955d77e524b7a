"""Target: quantised index files (vecsift.QuantizedIndex.load: header, rotation, centroid, code planes,
factors, CRC-32C trailer), then searched with and without rescoring rows and an allow set.

variant % 4: bits 1, 2, 4, 8 of the seed file."""
import atheris
import numpy as np

import harness

with harness.instrumented(__name__):
    import vecsift

BITS = (1, 2, 4, 8)
_BASE = {}


def _base(bits: int) -> bytes:
    if bits not in _BASE:
        rng = np.random.default_rng(2)
        ix = vecsift.QuantizedIndex(10, bits=bits, metric="cosine", seed=5)
        ix.add(rng.standard_normal((40, 10)).astype(np.float32))
        path = harness.scratch() + "/base.vsq"
        ix.save(path)
        with open(path, "rb") as f:
            _BASE[bits] = f.read()
    return _BASE[bits]


def seeds():
    out = []
    for v, bits in enumerate(BITS):
        out += [harness.seed(harness.RAW, _base(bits), v), harness.seed(harness.FIXED, _base(bits), v),
                harness.seed(harness.EDIT, bytes(range(32)), v)]
    return out


def one_input(data: bytes) -> None:
    mode, variant, rest = harness.split_mode(data)
    if mode == harness.EDIT:
        fdp = atheris.FuzzedDataProvider(rest)
        rest = harness.edit_struct(_base(BITS[variant % 4]), harness.QUANT_FIELDS, fdp)
        rest = harness.edit_bytes(rest, fdp, 60) if fdp.ConsumeBool() else rest
    if mode != harness.RAW:
        rest = harness.fix_trailing_crc32c(rest)
    path = harness.write_file(harness.scratch() + "/fuzz.vsq", rest)
    ix = harness.expect(vecsift.QuantizedIndex.load, harness.loader_errors(), path)
    if ix is None:
        return
    q = np.linspace(-1, 1, 2 * ix.dim, dtype=np.float32).reshape(2, ix.dim)
    n = len(ix)
    ids, scores = ix.search(q, k=5)
    assert ids.shape == (2, 5) and ((ids >= -1) & (ids < max(n, 1))).all()
    if n:
        rows = np.ones((n, ix.dim), np.float32)
        ix.search(q, k=3, oversample=3, rescore=rows, allow=np.arange(0, n, 2))


if __name__ == "__main__":
    harness.main(seeds, one_input)
