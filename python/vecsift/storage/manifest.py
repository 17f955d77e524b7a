"""The manifest of a collection directory: a typed record of the last commit.

Serialised as one framed JSON blob (framing.frame, kind "manifest") and
replaced atomically by framing.write_manifest. ``Manifest.from_dict`` reads
every manifest vecsift has written (fields added later take their defaults);
keys it does not know are kept in ``extra`` and written back unchanged, so a
newer writer's fields survive a commit by an older one.

File entries stay plain dicts ({"file", "rows"?, "crc32c"}, or "crc" for a zlib crc32
written before the CRC-32C convention, storage/checksum.py) because the stages
that own those files define them (stages/dense.py, stages/sparse.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace

from vecsift.errors import CorruptIndexError
from vecsift.storage.framing import FORMAT_VERSION

# The user payload is for small state that must commit atomically with the data
# (a sync watermark, the tail of an audit log), not for data: it is rewritten whole
# at every commit.
PAYLOAD_MAX_BYTES = 64 << 10


def check_payload(payload) -> dict:
    """A copy of `payload` if it is a JSON object of at most PAYLOAD_MAX_BYTES serialised."""
    if not isinstance(payload, dict):
        raise TypeError(f"payload must be a dict, got {type(payload).__name__}")
    try:
        raw = json.dumps(payload, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"payload must be JSON-serialisable (str keys, finite numbers): {exc}") from None
    if len(raw.encode()) > PAYLOAD_MAX_BYTES:
        raise ValueError(f"payload is {len(raw.encode())} bytes serialised, the limit is {PAYLOAD_MAX_BYTES}")
    return json.loads(raw)


@dataclass(frozen=True)
class Manifest:
    dim: int
    metric: str
    index: str
    index_params: dict
    generation: int = 0  # the commit sequence number: +1 at every commit, names the files it wrote
    rows: int = 0  # committed rows, deleted included
    model: str | None = None
    pipeline_version: str | None = None
    filter_fields: list = field(default_factory=list)
    created: float = 0.0
    index_heading_path: bool = False
    sparse_params: dict = field(default_factory=dict)
    vectors: dict = field(default_factory=dict)  # {"file", "rows", "crc32c", "blocks"?: {"file", "crc32c"}}
    dense: dict | None = None  # the dense stage's entry
    sparse: dict | None = None  # the BM25 stage's entry
    segments: list = field(default_factory=list)  # [{"file", "rows", "crc32c"}]
    filters: dict = field(default_factory=dict)  # {"file", "crc32c"}
    search_defaults: dict = field(default_factory=dict)
    payload: dict = field(default_factory=dict)  # user state committed with the data (check_payload)
    extra: dict = field(default_factory=dict)  # keys of a newer writer, kept as they are
    format: int = FORMAT_VERSION

    @classmethod
    def from_dict(cls, d: dict, name="MANIFEST") -> "Manifest":
        if not isinstance(d, dict) or d.get("format") != FORMAT_VERSION:
            raise CorruptIndexError(f"{name}: unsupported manifest format")
        known = {f.name for f in fields(cls)} - {"extra"}
        try:
            kw = {k: v for k, v in d.items() if k in known}
            for k in ("search_defaults", "payload", "sparse_params"):
                if kw.get(k) is None:
                    kw.pop(k, None)  # written as null by older versions
            m = cls(**kw, extra={k: v for k, v in d.items() if k not in known})
        except TypeError as exc:
            raise CorruptIndexError(f"{name}: manifest lacks a field: {exc}") from None
        if not isinstance(m.generation, int) or not isinstance(m.rows, int) or not isinstance(m.segments, list):
            raise CorruptIndexError(f"{name}: manifest fields have the wrong types")
        return m

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**self.extra, **d}

    def replace(self, **changes) -> "Manifest":
        return replace(self, **changes)

    def files(self) -> set:
        """Names of the files this manifest names outside the dense stage (which knows its own)."""
        names = {s["file"] for s in self.segments}
        for entry in (self.vectors, self.filters, self.sparse):
            if entry:
                names.add(entry["file"])
        if self.vectors.get("blocks"):
            names.add(self.vectors["blocks"]["file"])  # block checksums of the rows (storage/rowsums.py)
        return names


def read(directory) -> Manifest:
    """The manifest of the last commit in `directory` (CorruptIndexError if unreadable)."""
    import os

    from vecsift.storage.framing import MANIFEST, read_manifest

    return Manifest.from_dict(read_manifest(directory), os.path.join(directory, MANIFEST))


def write(directory, m: Manifest) -> None:
    """The commit point (framing.write_manifest: temp file, fsync, rename, fsync dir)."""
    from vecsift.storage.framing import write_manifest

    write_manifest(directory, m.to_dict())
