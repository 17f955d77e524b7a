"""On-disk building blocks of a collection directory.

* Framed blobs: small state files (filters, ...) written whole as
  ``magic | kind | version | CRC-32C | length | payload`` so a truncated, foreign
  or corrupted file is recognised before anything is parsed (version 1 frames,
  with a zlib crc32, are still read).
* The manifest: one framed JSON blob naming every file and row count of the
  last commit. It is replaced atomically (write temp, fsync, rename, fsync the
  directory); opening trusts only what it names.
* The writer lock: an flock on ``LOCK``. A second writer is refused; readers
  take no lock. The kernel drops the lock when the process dies, even on SIGKILL.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import struct

from vecsift.errors import CorruptIndexError, VecsiftError
from vecsift.storage import fileops
from vecsift.storage.checksum import CRC32C, ZLIB, check, file_checksum, update, zlib_crc32

MAGIC = b"VECSIFT\x01"
FORMAT_VERSION = 1
MANIFEST = "MANIFEST"
LOCK = "LOCK"
_HEAD = struct.Struct("<8s8sIIQ")  # magic, kind, frame version, checksum(payload), payload length
# Frame version 2: the checksum is CRC-32C; version 1 (zlib crc32) is still read.
FRAME_VERSION = 2
_FRAME_ALGO = {1: ZLIB, 2: CRC32C}


def crc32(data, value: int = 0) -> int:
    """zlib crc32: the checksum of files written before the CRC-32C convention (storage/checksum.py)."""
    return zlib_crc32(data, value)


def file_crc(path, offset: int = 0, length: int | None = None, value: int = 0) -> int:
    """zlib crc32 of a byte range of a file (files of the previous convention)."""
    return file_checksum(path, ZLIB, offset, length, value)


def missing_file(path) -> CorruptIndexError:
    """The error for a file the manifest names that is not there (raise missing_file(path))."""
    return CorruptIndexError(f"{path}: file named by the manifest is missing")


def fsync_dir(path) -> None:
    fileops.fsync_dir(path)


def write_durable(path, data: bytes) -> None:
    """Writes a new file and fsyncs it (the caller fsyncs the directory)."""
    fileops.write_file(path, data)


def _kind_bytes(kind: str) -> bytes:
    raw = kind.encode()
    if len(raw) > 8:
        raise ValueError(f"kind {kind!r} longer than 8 bytes")
    return raw.ljust(8, b"\0")


def frame(kind: str, payload: bytes) -> bytes:
    return _HEAD.pack(MAGIC, _kind_bytes(kind), FRAME_VERSION, update(CRC32C, payload), len(payload)) + payload


def unframe(data: bytes, kind: str, name) -> memoryview:
    """Checks a framed blob and returns its payload; CorruptIndexError names the file."""
    if len(data) < _HEAD.size:
        raise CorruptIndexError(f"{name}: file is truncated ({len(data)} bytes)")
    magic, k, ver, crc, length = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise CorruptIndexError(f"{name}: not a vecsift file (bad magic)")
    if k != _kind_bytes(kind):
        raise CorruptIndexError(f"{name}: holds {k.rstrip(bytes(1)).decode(errors='replace')!r}, expected {kind!r}")
    if ver not in _FRAME_ALGO:
        raise CorruptIndexError(f"{name}: format version {ver}, this vecsift reads versions {sorted(_FRAME_ALGO)}")
    payload = memoryview(data)[_HEAD.size:]
    if len(payload) != length:
        raise CorruptIndexError(f"{name}: payload is {len(payload)} bytes, header says {length}")
    if update(_FRAME_ALGO[ver], payload) != crc:
        raise CorruptIndexError(f"{name}: checksum mismatch")
    return payload


def write_blob(path, kind: str, payload: bytes) -> int:
    """Writes a framed blob durably; returns the CRC-32C of the whole file (its manifest entry's "crc32c")."""
    data = frame(kind, payload)
    write_durable(path, data)
    return update(CRC32C, data)


def read_blob(path, kind: str, entry=None) -> memoryview:
    """The payload of a framed blob; `entry`: its manifest entry ({"crc32c"} or an old {"crc"}), or an old
    entry's zlib crc32 as an int, or None (the frame's own checksum only)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise missing_file(path) from None
    if entry is not None:
        check(entry if isinstance(entry, dict) else {ZLIB: entry}, data, path)
    return unframe(data, kind, path)


def write_manifest(directory, manifest: dict) -> None:
    """The commit point: temp file, fsync, rename over MANIFEST, fsync directory."""
    tmp = os.path.join(directory, MANIFEST + ".tmp")
    write_durable(tmp, frame("manifest", json.dumps(manifest, sort_keys=True).encode()))
    fileops.replace(tmp, os.path.join(directory, MANIFEST))
    fsync_dir(directory)


def read_manifest(directory) -> dict:
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "not a vecsift collection (no MANIFEST)", str(directory)) from None
    payload = unframe(data, "manifest", path)
    try:
        manifest = json.loads(bytes(payload))
    except ValueError as exc:
        raise CorruptIndexError(f"{path}: unreadable manifest: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
        raise CorruptIndexError(f"{path}: unsupported manifest format")
    return manifest


class WriterLock:
    """Exclusive, non-blocking flock on the collection's LOCK file."""

    def __init__(self, directory):
        self.path = os.path.join(directory, LOCK)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = None
            raise VecsiftError(
                f"{directory}: another writer has this collection open (open it with readonly=True to search)"
            ) from None

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
