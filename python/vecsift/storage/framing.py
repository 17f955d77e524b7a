"""On-disk building blocks of a collection directory.

* Framed blobs: small state files (filters, bm25, ...) written whole as
  ``magic | kind | version | crc32 | length | payload`` so a truncated, foreign
  or corrupted file is recognised before anything is parsed.
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
import zlib

from vecsift.errors import CorruptIndexError, VecsiftError

MAGIC = b"VECSIFT\x01"
FORMAT_VERSION = 1
MANIFEST = "MANIFEST"
LOCK = "LOCK"
_HEAD = struct.Struct("<8s8sIIQ")  # magic, kind, version, crc32(payload), payload length


def crc32(data, value: int = 0) -> int:
    return zlib.crc32(data, value) & 0xFFFFFFFF


def file_crc(path, offset: int = 0, length: int | None = None, value: int = 0) -> int:
    """crc32 of a byte range of a file, streamed in 8 MiB pieces."""
    with open(path, "rb") as f:
        f.seek(offset)
        left = length
        while left is None or left > 0:
            piece = f.read(8 << 20 if left is None else min(8 << 20, left))
            if not piece:
                break
            value = crc32(piece, value)
            if left is not None:
                left -= len(piece)
        if left:
            raise CorruptIndexError(f"{path}: file is truncated")
    return value


def missing_file(path) -> CorruptIndexError:
    """The error for a file the manifest names that is not there (raise missing_file(path))."""
    return CorruptIndexError(f"{path}: file named by the manifest is missing")


def fsync_dir(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path, data: bytes) -> None:
    """Writes a new file and fsyncs it (the caller fsyncs the directory)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _kind_bytes(kind: str) -> bytes:
    raw = kind.encode()
    if len(raw) > 8:
        raise ValueError(f"kind {kind!r} longer than 8 bytes")
    return raw.ljust(8, b"\0")


def frame(kind: str, payload: bytes, version: int = FORMAT_VERSION) -> bytes:
    return _HEAD.pack(MAGIC, _kind_bytes(kind), version, crc32(payload), len(payload)) + payload


def unframe(data: bytes, kind: str, name, version: int = FORMAT_VERSION) -> memoryview:
    """Checks a framed blob and returns its payload; CorruptIndexError names the file."""
    if len(data) < _HEAD.size:
        raise CorruptIndexError(f"{name}: file is truncated ({len(data)} bytes)")
    magic, k, ver, crc, length = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise CorruptIndexError(f"{name}: not a vecsift file (bad magic)")
    if k != _kind_bytes(kind):
        raise CorruptIndexError(f"{name}: holds {k.rstrip(bytes(1)).decode(errors='replace')!r}, expected {kind!r}")
    if ver != version:
        raise CorruptIndexError(f"{name}: format version {ver}, this vecsift reads version {version}")
    payload = memoryview(data)[_HEAD.size:]
    if len(payload) != length:
        raise CorruptIndexError(f"{name}: payload is {len(payload)} bytes, header says {length}")
    if crc32(payload) != crc:
        raise CorruptIndexError(f"{name}: checksum mismatch")
    return payload


def write_blob(path, kind: str, payload: bytes) -> int:
    """Writes a framed blob durably; returns the crc32 of the whole file."""
    data = frame(kind, payload)
    write_durable(path, data)
    return crc32(data)


def read_blob(path, kind: str, expected_crc: int | None = None) -> memoryview:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise missing_file(path) from None
    if expected_crc is not None and crc32(data) != expected_crc:
        raise CorruptIndexError(f"{path}: checksum does not match the manifest")
    return unframe(data, kind, path)


def write_manifest(directory, manifest: dict) -> None:
    """The commit point: temp file, fsync, rename over MANIFEST, fsync directory."""
    tmp = os.path.join(directory, MANIFEST + ".tmp")
    write_durable(tmp, frame("manifest", json.dumps(manifest, sort_keys=True).encode()))
    os.replace(tmp, os.path.join(directory, MANIFEST))
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
