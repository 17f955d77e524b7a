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

Float32 row files ("vectors") also carry block checksums (storage/rowsums.py), kept the same way and
written by entry() as a small side file the entry names; searches check each block the first time they
read a row of it (`checks()`). A vectors file created before block checksums has none and stays
unchecked by searches until a compaction rewrites it (verify() says so).

Every write goes through storage/fileops.py (the crash-consistency seam).
"""
from __future__ import annotations

import mmap
import os
import struct

import numpy as np

from vecsift.errors import CorruptIndexError
from vecsift.storage import fileops, rowsums
from vecsift.storage.checksum import CRC32C, ZLIB, algo_of, file_checksum, update, value_of
from vecsift.storage.framing import MAGIC, missing_file, read_blob, write_blob

HEADER_BYTES = 64
ROWFILE_VERSION = 2
_HEADER_ALGO = {1: ZLIB, 2: CRC32C}
_DTYPES = {"float32": np.float32, "uint8": np.uint8}
# Kinds whose rows are read piecemeal through the mapping, so they get block checksums. Codes are read
# whole into RAM at open and checked against the whole-file checksum there.
BLOCK_CHECKED = {"vectors"}


def _header(kind: str, dtype: str, width: int, version: int = ROWFILE_VERSION) -> bytes:
    body = struct.pack("<8s8sI8sQ", MAGIC, kind.encode().ljust(8, b"\0"), version,
                       dtype.encode().ljust(8, b"\0"), width)
    return (body + struct.pack("<I", update(_HEADER_ALGO[version], body))).ljust(HEADER_BYTES, b"\0")


class RowFile:
    """One append-only file of fixed-width rows of `dtype` x `width`."""

    def __init__(self, path, kind: str, dtype: str, width: int, rows: int, crc: int, writable: bool,
                 algo: str = CRC32C, sums: "rowsums.Sums | None" = None):
        self.path = str(path)
        self.kind, self.dtype, self.width = kind, dtype, int(width)
        self.row_bytes = np.dtype(_DTYPES[dtype]).itemsize * self.width
        self.rows = rows  # rows written (committed + pending)
        self.crc = crc  # checksum of all rows written
        self.algo = algo
        self.sums = sums  # block checksums of all rows written (None: a file written before them)
        self._committed = {}  # data bytes -> (Sums of that extent, its entry's "blocks"), at most two
        if sums is not None:
            self._remember(rows * self.row_bytes, sums, None)
        self._checks = None  # (data bytes, rowsums.Checks) shared by the snapshots of one commit
        self._writable = writable
        self._fd = fileops.open_rw(self.path) if writable else os.open(self.path, os.O_RDONLY)

    @classmethod
    def create(cls, path, kind: str, dtype: str, width: int) -> "RowFile":
        fd = fileops.create(path, exclusive=True)
        try:
            fileops.pwrite(fd, _header(kind, dtype, width), 0)
            fileops.fsync(fd)
        finally:
            fileops.close(fd)
        return cls(path, kind, dtype, width, 0, 0, writable=True,
                   sums=rowsums.Sums() if kind in BLOCK_CHECKED else None)

    def _remember(self, data_bytes: int, sums, blocks_entry) -> None:
        frozen = rowsums.Sums(sums.table(), data_bytes, sums.block)
        self._committed = {k: v for k, v in self._committed.items() if k < data_bytes}
        while len(self._committed) > 1:
            self._committed.pop(min(self._committed))
        self._committed[data_bytes] = (frozen, blocks_entry)

    def entry(self) -> dict:
        """The manifest entry of the rows written so far (call after sync()). For block-checked files this
        writes their block checksums durably, once per extent (the caller fsyncs the directory)."""
        e = {"file": os.path.basename(self.path), "rows": self.rows, self.algo: self.crc}
        if self.sums is not None:
            data_bytes = self.rows * self.row_bytes
            known = self._committed.get(data_bytes)
            if known is None or known[1] is None:
                name = f"sums-{os.path.splitext(os.path.basename(self.path))[0]}-{self.rows}.bin"
                crc = write_blob(os.path.join(os.path.dirname(self.path), name), rowsums.KIND,
                                 self.sums.to_bytes())
                known = (self.sums, {"file": name, CRC32C: crc})
                self._remember(data_bytes, *known)
            e["blocks"] = dict(known[1])
        return e

    @classmethod
    def open_entry(cls, directory, entry: dict, kind: str, dtype: str, width: int, writable: bool) -> "RowFile":
        """open() of the file a manifest entry names, with the entry's row count, checksum and block sums."""
        rf = cls.open(os.path.join(directory, entry["file"]), kind, dtype, width, entry["rows"], value_of(entry),
                      writable, algo_of(entry))
        blocks = entry.get("blocks")
        if blocks:
            try:
                path = os.path.join(directory, blocks["file"])
                payload = read_blob(path, rowsums.KIND, blocks)
                rf.sums = rowsums.sums_from_bytes(payload, rf.rows * rf.row_bytes, path)
            except BaseException:
                rf.close()
                raise
            rf._remember(rf.rows * rf.row_bytes, rf.sums, dict(blocks))
        return rf

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
            fileops.truncate(rf._fd, need)  # bytes of an add that was never committed
            fileops.fsync(rf._fd)
        return rf

    def append(self, rows: np.ndarray) -> None:
        """Writes rows after the last one; invisible until the manifest counts them."""
        data = memoryview(np.ascontiguousarray(rows, dtype=_DTYPES[self.dtype])).cast("B")
        fileops.pwrite(self._fd, data, HEADER_BYTES + self.rows * self.row_bytes)
        self.crc = update(self.algo, data, self.crc)
        if self.sums is not None:
            self.sums.update(data)
        self.rows += len(rows)

    def sync(self) -> None:
        fileops.fsync(self._fd)

    def checks(self, rows: int, view: np.ndarray):
        """The block checks of the first `rows` committed rows, read through `view` (a mapping of them), or
        None when they have no block checksums. One bitmap per commit: snapshots of it share the work."""
        data_bytes = rows * self.row_bytes
        known = self._committed.get(data_bytes)
        if known is None:
            return None
        cur = self._checks
        if cur is not None and cur[0] == data_bytes:
            return cur[1]
        data = view.reshape(-1).view(np.uint8) if rows else np.empty(0, np.uint8)
        c = rowsums.Checks(self.path, data, self.row_bytes, known[0], inherit=cur[1] if cur else None)
        self._checks = (data_bytes, c)
        return c

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

    def verify(self, rows: int, crc: int) -> list:
        """Reads the committed rows once: the whole-file checksum and every block checksum. Returns notes on
        what could not be checked; CorruptIndexError names the rows of a failing block."""
        n = rows * self.row_bytes
        known = self._committed.get(n)
        if known is None:
            if file_checksum(self.path, self.algo, HEADER_BYTES, n) != crc:
                raise CorruptIndexError(f"{self.path}: checksum mismatch")
            return [f"{os.path.basename(self.path)}: no block checksums (written before them), so searches do "
                    f"not check its rows as they read them; the whole-file checksum matched"]
        sums = known[0]
        whole, bad = rowsums.verify_region(self.path, self._fd, HEADER_BYTES, n, sums,
                                           lambda b, v: update(self.algo, b, v))
        if bad:
            b = bad[0]
            lo, hi = b * sums.block, min((b + 1) * sums.block, n) - 1
            raise CorruptIndexError(f"{self.path}: rows {lo // self.row_bytes}..{hi // self.row_bytes} fail their "
                                    f"block checksum ({len(bad)} bad block(s), first {b})")
        if whole != crc:
            raise CorruptIndexError(f"{self.path}: checksum mismatch")
        return []

    def close(self) -> None:
        if self._fd is not None:
            (fileops.close if self._writable else os.close)(self._fd)
            self._fd = None
            self._checks = None
