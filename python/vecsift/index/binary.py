"""Binary quantisation and the brute-force Hamming index."""
from __future__ import annotations

import numpy as np

from vecsift import _core
from vecsift._arrays import as_codes, as_vectors, check_cells, check_k, check_threads, is_code_array
from vecsift.allow import allow_arrays


def binary_quantize(vectors) -> np.ndarray:
    """One sign bit per dimension (x > 0 -> 1): uint8 codes, ceil(dim/8) bytes a row.

    The bit order equals ``np.packbits(x > 0, axis=1, bitorder="little")``.
    """
    return _core.binary_quantize(as_vectors(vectors, "vectors"))


class BinaryIndex:
    """Hamming-distance top-k over binary codes, scanned exhaustively with SIMD.

    ``add`` takes float vectors of ``dim`` columns (quantised inside) or uint8
    codes of ``ceil(dim/8)`` bytes. ``search`` takes the same forms (a uint8
    array is always read as codes). Safe to search from many threads; ``add``
    waits for running searches.
    """

    def __init__(self, dim: int):
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        self._index = _core.BinaryIndex(int(dim))

    @property
    def dim(self) -> int:
        return self._index.dim

    @property
    def code_bytes(self) -> int:
        return self._index.code_bytes

    @property
    def nbytes(self) -> int:
        """Bytes held by the codes."""
        return self._index.nbytes

    def __len__(self) -> int:
        return len(self._index)

    def _codes(self, x, name: str) -> np.ndarray:
        if is_code_array(x):
            return as_codes(x, self.code_bytes, name)
        return _core.binary_quantize(as_vectors(x, name, dim=self.dim))

    def add(self, vectors_or_codes) -> None:
        """Appends rows; their ids continue from len(self)."""
        self._index.add_codes(self._codes(vectors_or_codes, "vectors"))

    def codes(self) -> np.ndarray:
        """All stored codes, row-major (n, code_bytes)."""
        return self._index.codes()

    def search(self, queries, k: int, allow=None, threads: int = 0):
        """Returns (ids int64 (n, k), hamming int32 (n, k)), nearest first.

        Ties are broken by the smaller row id. ``allow`` (roaring bitmap, bool
        mask of len(self), or row ids) restricts the scan; rows outside it are
        never scored. Where fewer than k rows are allowed, results are padded
        with id -1 and distance 2**31-1.
        """
        k = check_k(k)
        threads = check_threads(threads)
        q = self._codes(queries, "queries")
        check_cells(len(q), k)
        mask, ids = allow_arrays(allow, len(self))
        return self._index.search_codes(q, k, mask, ids, threads)
