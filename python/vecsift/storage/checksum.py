"""The one checksum of the files vecsift writes: CRC-32C (Castagnoli), computed by the native core
(the SSE4.2 instruction where the CPU has it), the same algorithm the HNSW file carries inside.

A manifest entry names its file's checksum once: {"file": ..., "crc32c": value}. Entries and framed
blobs written before this convention carry a zlib crc32 ("crc", frame version 1); they are still read
and checked with that algorithm, and a row file that started with it continues with it.
"""
from __future__ import annotations

import zlib

from vecsift import _core
from vecsift.errors import CorruptIndexError

CRC32C, ZLIB = "crc32c", "crc"  # the manifest keys, which name the algorithm


# crc32c(data, value=0) -> int: the core's function itself, no Python frame around it (it is called per
# 64 KiB block of checked rows and per audit record). Takes any C-contiguous buffer without copying
# and releases the GIL for large ones (16 KiB and up).
crc32c = _core.crc32c


def zlib_crc32(data, value: int = 0) -> int:
    return zlib.crc32(data, value) & 0xFFFFFFFF


_FNS = {CRC32C: crc32c, ZLIB: zlib_crc32}


def update(algo: str, data, value: int = 0) -> int:
    return _FNS[algo](data, value)


def algo_of(entry: dict) -> str:
    """The algorithm of a manifest entry's checksum (new entries: crc32c)."""
    return CRC32C if CRC32C in entry else ZLIB


def value_of(entry: dict) -> int:
    return entry[algo_of(entry)]


def entry(value: int, algo: str = CRC32C, **fields) -> dict:
    return {**fields, algo: value}


def file_checksum(path, algo: str = CRC32C, offset: int = 0, length: int | None = None, value: int = 0) -> int:
    """Checksum of a byte range of a file, streamed in 8 MiB pieces through one reused buffer (a fresh
    8 MiB bytes object per piece would be mapped and faulted in anew each time)."""
    buf = memoryview(bytearray(min(8 << 20, length) if length is not None else 8 << 20))
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        left = length
        while left is None or left > 0:
            got = f.readinto(buf if left is None or left >= len(buf) else buf[:left])
            if not got:
                break
            value = update(algo, buf[:got], value)
            if left is not None:
                left -= got
        if left:
            raise CorruptIndexError(f"{path}: file is truncated")
    return value


def check(entry_: dict, data, path) -> None:
    """Refuses `data` (a whole file) unless it has the checksum its manifest entry records."""
    if update(algo_of(entry_), data) != value_of(entry_):
        raise CorruptIndexError(f"{path}: checksum does not match the manifest")


def check_file(entry_: dict, path) -> None:
    if file_checksum(path, algo_of(entry_)) != value_of(entry_):
        raise CorruptIndexError(f"{path}: checksum does not match the manifest")
