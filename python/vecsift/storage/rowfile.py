"""Append-only row files: float32 vectors (read through numpy.memmap) and binary codes.

Layout: a 64-byte header (magic, kind, format version, dtype, row width,
checksum of the header: CRC-32C from version 2, zlib crc32 in version 1, both
read) followed by fixed-width rows. Rows are written with pwrite at the
end as they are added; only the manifest says how many are committed. A reader
maps exactly the committed rows and ignores anything past them; the writer
truncates those bytes when it opens the file. The checksum of the committed
rows is kept incrementally (it continues over appended bytes) and stored in the
manifest entry (`entry()`), so a commit never re-reads old rows; a file whose
entry carries a zlib crc32 (written before CRC-32C) keeps that algorithm.
"""
from __future__ import annotations

import mmap
import os
import struct

import numpy as np

from vecsift.errors import CorruptIndexError
from vecsift.storage.checksum import CRC32C, ZLIB, algo_of, file_checksum, update, value_of
from vecsift.storage.framing import MAGIC, missing_file

HEADER_BYTES = 64
ROWFILE_VERSION = 2
_HEADER_ALGO = {1: ZLIB, 2: CRC32C}
_DTYPES = {"float32": np.float32, "uint8": np.uint8}


def _header(kind: str, dtype: str, width: int, version: int = ROWFILE_VERSION) -> bytes:
    body = struct.pack("<8s8sI8sQ", MAGIC, kind.encode().ljust(8, b"\0"), version,
                       dtype.encode().ljust(8, b"\0"), width)
    return (body + struct.pack("<I", update(_HEADER_ALGO[version], body))).ljust(HEADER_BYTES, b"\0")


class RowFile:
    """One append-only file of fixed-width rows of `dtype` x `width`."""

    def __init__(self, path, kind: str, dtype: str, width: int, rows: int, crc: int, writable: bool,
                 algo: str = CRC32C):
        self.path = str(path)
        self.kind, self.dtype, self.width = kind, dtype, int(width)
        self.row_bytes = np.dtype(_DTYPES[dtype]).itemsize * self.width
        self.rows = rows  # rows written (committed + pending)
        self.crc = crc  # checksum of all rows written
        self.algo = algo
        self._fd = os.open(self.path, os.O_RDWR if writable else os.O_RDONLY)

    @classmethod
    def create(cls, path, kind: str, dtype: str, width: int) -> "RowFile":
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, _header(kind, dtype, width))
            os.fsync(fd)
        finally:
            os.close(fd)
        return cls(path, kind, dtype, width, 0, 0, writable=True)

    def entry(self) -> dict:
        """The manifest entry of the rows written so far."""
        return {"file": os.path.basename(self.path), "rows": self.rows, self.algo: self.crc}

    @classmethod
    def open_entry(cls, directory, entry: dict, kind: str, dtype: str, width: int, writable: bool) -> "RowFile":
        """open() of the file a manifest entry names, with the entry's row count and checksum."""
        return cls.open(os.path.join(directory, entry["file"]), kind, dtype, width, entry["rows"], value_of(entry),
                        writable, algo_of(entry))

    @classmethod
    def open(cls, path, kind: str, dtype: str, width: int, rows: int, crc: int, writable: bool,
             algo: str = CRC32C) -> "RowFile":
        """Checks header and length against the manifest; the writer cuts uncommitted bytes."""
        try:
            with open(path, "rb") as f:
                head = f.read(HEADER_BYTES)
                size = os.fstat(f.fileno()).st_size
        except FileNotFoundError:
            raise missing_file(path) from None
        if len(head) < HEADER_BYTES or head[:8] != MAGIC:
            raise CorruptIndexError(f"{path}: not a vecsift row file (bad magic or truncated header)")
        if head not in (_header(kind, dtype, width, v) for v in _HEADER_ALGO):
            raise CorruptIndexError(f"{path}: header does not match (kind {kind}, version {ROWFILE_VERSION}, "
                                    f"{dtype} x {width} expected)")
        rf = cls(path, kind, dtype, width, rows, crc, writable, algo)
        need = HEADER_BYTES + rows * rf.row_bytes
        if size < need:
            rf.close()
            raise CorruptIndexError(f"{path}: holds {(size - HEADER_BYTES) // rf.row_bytes} rows, "
                                    f"the manifest commits {rows}")
        if writable and size > need:
            os.ftruncate(rf._fd, need)  # bytes of an add that was never committed
            os.fsync(rf._fd)
        return rf

    def append(self, rows: np.ndarray) -> None:
        """Writes rows after the last one; invisible until the manifest counts them."""
        data = memoryview(np.ascontiguousarray(rows, dtype=_DTYPES[self.dtype])).cast("B")
        off = HEADER_BYTES + self.rows * self.row_bytes
        done = 0
        while done < len(data):
            done += os.pwrite(self._fd, data[done:], off + done)
        self.crc = update(self.algo, data, self.crc)
        self.rows += len(rows)

    def sync(self) -> None:
        os.fsync(self._fd)

    def view(self, rows: int, sequential: bool = False) -> np.ndarray:
        """Read-only memory-mapped array of the first `rows` rows (pages are read on demand).

        Default MADV_RANDOM: rescoring touches a few scattered rows, so read-ahead
        would only pull in (and make resident) neighbours nobody asked for.
        sequential=True (MADV_SEQUENTIAL) for whole-file passes: compaction,
        exact scans, graph builds, where read-ahead is what makes them fast.
        """
        dt = _DTYPES[self.dtype]
        if rows == 0:
            return np.empty((0, self.width), dtype=dt)
        length = HEADER_BYTES + rows * self.row_bytes
        mm = mmap.mmap(self._fd, length, access=mmap.ACCESS_READ)
        advice = getattr(mmap, "MADV_SEQUENTIAL" if sequential else "MADV_RANDOM", None)
        if advice is not None and hasattr(mm, "madvise"):
            mm.madvise(advice)
        return np.frombuffer(mm, dtype=dt, count=rows * self.width, offset=HEADER_BYTES).reshape(rows, self.width)

    def read_all(self, rows: int, crc: int) -> np.ndarray:
        """The first `rows` rows in RAM, checked against the manifest's crc."""
        n = rows * self.row_bytes
        buf = bytearray(n)
        got = os.preadv(self._fd, [buf], HEADER_BYTES) if n else 0
        if got != n:
            raise CorruptIndexError(f"{self.path}: file is truncated")
        if update(self.algo, buf) != crc:
            raise CorruptIndexError(f"{self.path}: checksum mismatch")
        return np.frombuffer(buf, dtype=_DTYPES[self.dtype]).reshape(rows, self.width)

    def verify(self, rows: int, crc: int) -> None:
        """Streams the committed rows through the checksum (reads the whole file)."""
        if file_checksum(self.path, self.algo, HEADER_BYTES, rows * self.row_bytes) != crc:
            raise CorruptIndexError(f"{self.path}: checksum mismatch")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
