"""PostgreSQL's binary COPY stream decoded in bulk: no Python per row.

    COPY (SELECT ...) TO STDOUT (FORMAT binary)

sends a header (PGCOPY\\n\\377\\r\\n\\0, flags, extension), then per row an
int16 field count and per field an int32 byte length (-1 for NULL) and the
field's bytes in its type's binary send format, then an int16 -1. All
integers are big-endian. One numba pass over a buffer of many rows records
where each field starts (rows cut at the buffer's end wait for the next
chunk); numpy then gathers whole columns at once:

    vector   int16 dim, int16 unused, dim x float32        (pgvector's vector_send)
    halfvec  int16 dim, int16 unused, dim x float16        (pgvector >= 0.7 halfvec_send)
    text     the UTF-8 bytes (anything cast ::text in the SELECT)
    json     the UTF-8 text (json, or jsonb cast ::text)

Everything else (arrays, timestamps, numerics) is turned into one JSON text
per row by the server (to_json), which pyarrow's JSON reader parses in C.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_VEC_TYPES = {"vector": np.dtype(">f4"), "halfvec": np.dtype(">f2")}


class CopyFormatError(ValueError):
    pass


@njit(cache=True, nogil=True)
def _scan(buf, pos, ncols, off, length):
    """Field offsets/lengths of the whole rows in buf[pos:]; returns (rows, next pos, status).

    status 0: more data needed, 1: trailer seen, -1: a row with another field count."""
    n = len(buf)
    rows = 0
    cap = off.shape[0]
    while rows < cap:
        if pos + 2 > n:
            return rows, pos, 0
        count = (np.int32(buf[pos]) << 8) | np.int32(buf[pos + 1])
        if count == 0xFFFF:
            return rows, pos + 2, 1
        if count != ncols:
            return rows, pos, -1
        p = pos + 2
        whole = True
        for j in range(ncols):
            if p + 4 > n:
                whole = False
                break
            ln = (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16) | (np.int64(buf[p + 2]) << 8) \
                | np.int64(buf[p + 3])
            if ln >= 0x80000000:
                ln -= 0x100000000
            p += 4
            off[rows, j] = p
            length[rows, j] = ln
            if ln > 0:
                p += ln
        if not whole or p > n:
            return rows, pos, 0
        pos = p
        rows += 1
    return rows, pos, 0


@njit(cache=True, nogil=True)
def _gather(buf, off, length, skip, sep, data_out, offsets_out):
    """Concatenates one column's fields (skipping `skip` leading bytes, each followed by sep if sep >= 0)."""
    w = 0
    for i in range(len(off)):
        offsets_out[i] = w
        ln = length[i]
        if ln > skip:
            s = off[i] + skip
            for b in range(ln - skip):
                data_out[w + b] = buf[s + b]
            w += ln - skip
        if sep >= 0:
            data_out[w] = sep
            w += 1
    offsets_out[len(off)] = w
    return w


@njit(cache=True, nogil=True)
def _gather_fixed(buf, off, length, width, out):
    """Rows of a fixed-width column into out (n, width) bytes; returns the first row of another width or -1."""
    for i in range(len(off)):
        if length[i] < 0:
            continue
        if length[i] != width:
            return i
        s = off[i]
        for b in range(width):
            out[i, b] = buf[s + b]
    return -1


def header_size(buf: np.ndarray) -> int:
    """Bytes of the stream header, or 0 if buf does not hold all of it yet."""
    if len(buf) < 19:
        return 0
    if bytes(buf[:11]) != SIGNATURE:
        raise CopyFormatError("not a binary COPY stream (bad signature)")
    ext = int.from_bytes(bytes(buf[15:19]), "big")
    return 19 + ext if len(buf) >= 19 + ext else 0


class Fields:
    """Where the fields of n whole rows sit in a buffer."""

    def __init__(self, buf, off, length):
        self.buf, self.off, self.length = buf, off, length
        self.n = len(off)

    def nulls(self, j) -> np.ndarray:
        return self.length[:, j] < 0

    def text(self, j, skip=0) -> pa.Array:
        """Column j as a pyarrow string array (NULL -> null)."""
        off, ln = self.off[:, j], self.length[:, j]
        size = int(np.maximum(ln - skip, 0).sum())
        data = np.empty(size, np.uint8)
        offsets = np.empty(self.n + 1, np.int64)
        _gather(self.buf, off, ln, skip, -1, data, offsets)
        valid = ln >= 0
        mask = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        arr = pa.LargeStringArray.from_buffers(self.n, pa.py_buffer(offsets), pa.py_buffer(data), mask)
        return arr.cast(pa.string()) if size < (1 << 31) else arr

    def json_lines(self, j, skip=0) -> bytes:
        """Column j's texts joined by newlines (NULL -> 'null'), for pyarrow.json."""
        ln = self.length[:, j]
        if (ln < 0).any():
            raise CopyFormatError("a JSON column has NULLs (the SELECT must coalesce them)")
        size = int(np.maximum(ln - skip, 0).sum()) + self.n
        data = np.empty(size, np.uint8)
        offsets = np.empty(self.n + 1, np.int64)
        _gather(self.buf, self.off[:, j], ln, skip, 10, data, offsets)
        return data.tobytes()

    def vectors(self, j, typname: str, dim: int):
        """(float32 (n, dim), NULL mask) of a vector/halfvec column; ValueError naming the first bad row."""
        item = _VEC_TYPES[typname]
        width = 4 + item.itemsize * dim
        raw = np.zeros((self.n, width), np.uint8)
        bad = _gather_fixed(self.buf, self.off[:, j], self.length[:, j], width, raw)
        if bad < 0:
            dims = raw[:, :2].copy().view(">i2").ravel()
            null = self.nulls(j)
            wrong = np.flatnonzero((dims != dim) & ~null)
            bad = int(wrong[0]) if len(wrong) else -1
        if bad >= 0:
            got = (int(self.length[bad, j]) - 4) // item.itemsize
            if self.length[bad, j] >= 4:
                s = self.off[bad, j]
                got = int.from_bytes(bytes(self.buf[s:s + 2]), "big")
            return None, bad, got
        vecs = raw[:, 4:].view(item).astype(np.float32)
        return vecs, -1, dim


def vector_dim(buf: np.ndarray, fields: Fields, j: int):
    """The dimension written in the first non-NULL vector of column j (None if all are NULL)."""
    rows = np.flatnonzero(fields.length[:, j] >= 4)
    if not len(rows):
        return None
    s = fields.off[rows[0], j]
    return int.from_bytes(bytes(buf[s:s + 2]), "big")


class CopyReader:
    """Feeds raw COPY chunks, yields Fields for every `batch` whole rows (and the rest at the end)."""

    def __init__(self, ncols: int, batch: int = 50_000):
        self.ncols, self.batch = ncols, batch
        self._parts, self._size = [], 0
        self._started = False
        self._carry = np.empty(0, np.uint8)
        self.done = False

    def feed(self, chunk, final=False, min_bytes=16 << 20):
        """Adds a chunk; returns a list of Fields ready to consume (empty while buffering)."""
        if chunk:
            self._parts.append(bytes(chunk))
            self._size += len(chunk)
        if self._size < min_bytes and not final:
            return []
        buf = np.frombuffer(b"".join([self._carry.tobytes()] + self._parts), np.uint8)
        self._parts, self._size = [], 0
        pos = 0
        if not self._started:
            pos = header_size(buf)
            if pos == 0:
                if final:
                    raise CopyFormatError("the COPY stream ended inside its header")
                self._carry = buf
                return []
            self._started = True
        out = []
        while True:
            off = np.empty((self.batch, self.ncols), np.int64)
            length = np.empty((self.batch, self.ncols), np.int64)
            rows, pos, status = _scan(buf, pos, self.ncols, off, length)
            if status < 0:
                raise CopyFormatError(f"a COPY row does not have {self.ncols} fields")
            if rows:
                out.append(Fields(buf, off[:rows], length[:rows]))
            if status == 1:
                self.done = True
                break
            if rows < self.batch:
                break
        self._carry = buf[pos:].copy() if not self.done else np.empty(0, np.uint8)
        if final and not self.done:
            raise CopyFormatError("the COPY stream ended without its trailer (connection lost?)")
        return out
