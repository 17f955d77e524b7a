"""The IVF index file: a versioned, checksummed header and page-aligned sections.

    offset 0     magic "VSIFTIVF" | version u32 | header length u32 | crc32(header) u32 | pad u32
    offset 24    header: JSON {meta..., "sections": {name: [offset, nbytes, dtype, shape, crc32]}}
    4096-aligned sections, each a raw little-endian numpy array

Opening maps every section read-only (np.memmap, MAP_SHARED): the page cache
holds one copy that all processes share, and nothing is read until touched.
Checksums of every section are verified on open except the float32 rows,
whose size is checked and whose crc is verified with verify="full" (reading
gigabytes of rows to open an index would defeat the mapping).
"""
from __future__ import annotations

import json
import os
import re
import struct
import zlib

import numpy as np

from vecsift.errors import CorruptIndexError

MAGIC = b"VSIFTIVF"
VERSION = 3      # written for RaBitQ-code indexes with the structured (fht) rotation
DENSE_VERSION = 2  # RaBitQ codes with the dense rotation matrix (earlier releases read it)
NIBBLE_VERSION = 4  # 4-bit RaBitQ codes in the nibble layout (either rotation); earlier releases refuse it
READABLE = (1, 2, 3, 4)  # 1: sign-bit codes (earlier releases; still written for scorer="sign")
_PRE = struct.Struct("<8sIIII")
_ALIGN = 4096
_CRC_STEP = 64 << 20


def _crc(arr: np.ndarray) -> int:
    flat = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    value = 0
    for s in range(0, flat.size, _CRC_STEP):
        value = zlib.crc32(flat[s:s + _CRC_STEP], value)
    return value & 0xFFFFFFFF


def _align(x: int) -> int:
    return (x + _ALIGN - 1) // _ALIGN * _ALIGN


def write(path, meta: dict, sections: dict, version: int = VERSION) -> None:
    """Writes meta and the named arrays to path (temp file, fsync, rename)."""
    path = os.fspath(path)
    table = {}
    # Header size depends on the table; reserve generously and lay out after it.
    offset = _align(_PRE.size + 4096 + 256 * len(sections))
    arrays = {}
    for name, arr in sections.items():
        arr = np.ascontiguousarray(arr)
        arrays[name] = arr
        table[name] = [offset, int(arr.nbytes), arr.dtype.str, list(arr.shape), _crc(arr)]
        offset = _align(offset + arr.nbytes)
    header = json.dumps({**meta, "sections": table}, sort_keys=True).encode()
    first = min(v[0] for v in table.values()) if table else _align(_PRE.size + len(header))
    if _PRE.size + len(header) > first:
        raise ValueError("index header does not fit its reserved space")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(_PRE.pack(MAGIC, version, len(header), zlib.crc32(header) & 0xFFFFFFFF, 0))
        f.write(header)
        for name, arr in arrays.items():
            f.seek(table[name][0])
            flat = arr.reshape(-1).view(np.uint8)
            for s in range(0, flat.size, _CRC_STEP):
                f.write(flat[s:s + _CRC_STEP])
        f.truncate(offset)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read(path, verify: str = "index", skip_crc=("vectors",)):
    """Returns (meta, {name: read-only memmap}); CorruptIndexError names the problem.

    verify: "index" checks every section's crc except those in skip_crc,
    "full" checks all of them, "none" only the header and sizes.
    """
    path = os.fspath(path)
    if verify not in ("index", "full", "none"):
        raise ValueError(f"verify must be 'index', 'full' or 'none', got {verify!r}")
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            pre = f.read(_PRE.size)
            if len(pre) < _PRE.size:
                raise CorruptIndexError(f"{path}: too short to be an IVF index file")
            magic, version, hlen, hcrc, _ = _PRE.unpack(pre)
            if magic != MAGIC:
                raise CorruptIndexError(f"{path}: not a vecsift IVF index file")
            if version not in READABLE:
                raise CorruptIndexError(f"{path}: IVF format version {version}, this vecsift reads "
                                        f"{', '.join(map(str, READABLE))}")
            header = f.read(hlen)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise CorruptIndexError(f"{path}: cannot read: {exc}") from None
    if len(header) != hlen or zlib.crc32(header) & 0xFFFFFFFF != hcrc:
        raise CorruptIndexError(f"{path}: header checksum mismatch")
    try:
        meta = json.loads(header)
        table = meta.pop("sections")
        meta["_version"] = version
    except (ValueError, KeyError, TypeError, AttributeError):  # not JSON, or not an object with sections
        raise CorruptIndexError(f"{path}: header is not valid") from None
    if not isinstance(meta, dict) or not isinstance(table, dict):
        raise CorruptIndexError(f"{path}: header is not valid")
    arrays = {}
    for name, sec in table.items():
        offset, nbytes, dt, shape, crc = _section(path, name, sec)
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if offset < 0 or offset + nbytes > size or count * dt.itemsize != nbytes:
            raise CorruptIndexError(f"{path}: section {name!r} is truncated or malformed")
        arr = (np.memmap(path, mode="r", dtype=dt, offset=offset, shape=tuple(shape)) if nbytes
               else np.zeros(shape, dtype=dt))
        if verify == "full" or (verify == "index" and name not in skip_crc):
            if _crc(arr) != crc:
                raise CorruptIndexError(f"{path}: checksum mismatch in section {name!r}")
        arrays[name] = arr
    return meta, arrays


_DTYPE = re.compile(r"[<>|=](?:b1|[iu][1248]|f[248])")  # numpy has no f1, b2, b4 or b8 (a fuzz finding)


def _is_count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 62


def _section(path, name, sec):
    """(offset, nbytes, dtype, shape, crc) of a section table entry; CorruptIndexError unless each is of
    the kind write() records (plain numeric dtypes only: the bytes are mapped as that type)."""
    try:
        offset, nbytes, dtype, shape, crc = sec
    except (TypeError, ValueError):
        offset = nbytes = dtype = shape = crc = None
    # only the strings write() records reach np.dtype, which would parse anything (even with ast)
    dt = np.dtype(dtype) if isinstance(dtype, str) and _DTYPE.fullmatch(dtype) else None
    if (dt is None or dt.kind not in "biuf" or dt.fields is not None or dt.subdtype is not None
            or not _is_count(offset) or not _is_count(nbytes) or not isinstance(shape, list)
            or len(shape) > 4 or not all(_is_count(d) and d < 1 << 40 for d in shape) or not _is_count(crc)):
        raise CorruptIndexError(f"{path}: section {name!r} has a malformed table entry")
    return offset, nbytes, dt, tuple(shape), crc
