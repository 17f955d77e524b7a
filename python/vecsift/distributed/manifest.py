"""Small JSON state files of a sharded collection, replaced atomically (temp, fsync, rename, fsync dir).

CLUSTER (the top-level manifest) is the commit point of a cluster-wide commit:
it names the cluster generation, the shards and the transaction each of them
prepared for it, the tenant map and the collection parameters. Everything is
written with a crc32 so a torn or foreign file is refused, never half-read.
"""
from __future__ import annotations

import json
import os
import zlib

from vecsift.errors import CorruptIndexError

CLUSTER = "CLUSTER"
FORMAT = 1


def fsync_dir(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path, obj: dict) -> None:
    body = json.dumps(obj, sort_keys=True)
    data = json.dumps({"crc": zlib.crc32(body.encode()), "body": body}).encode()
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def read_json(path, default=None):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        if default is not None:
            return default
        raise
    try:
        outer = json.loads(raw)
        body = outer["body"]
        if zlib.crc32(body.encode()) != outer["crc"]:
            raise ValueError("checksum mismatch")
        return json.loads(body)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptIndexError(f"{path}: unreadable state file ({exc})") from None


def read_cluster(root) -> dict:
    path = os.path.join(root, CLUSTER)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{root}: not a sharded vecsift collection (no {CLUSTER})")
    m = read_json(path)
    if m.get("format") != FORMAT:
        raise CorruptIndexError(f"{path}: unsupported cluster manifest format {m.get('format')!r}")
    return m


def committed_generation(root) -> int:
    """The cluster generation of the last commit (0 before the first)."""
    try:
        return int(read_cluster(root)["generation"])
    except FileNotFoundError:
        return 0


def write_cluster(root, manifest: dict) -> None:
    write_json(os.path.join(root, CLUSTER), dict(manifest, format=FORMAT))
