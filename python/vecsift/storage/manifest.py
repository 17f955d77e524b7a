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


# Fields added after the golden manifest (tests/storage/data/manifest_v1.json) that are written only when
# set, so a collection that does not use them writes the same manifest as before.
_OMITTED_WHEN_EMPTY = ("audit", "limits")


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
    audit: dict = field(default_factory=dict)  # audit log settings (collection/audit.py); {}: no audit log
    limits: dict = field(default_factory=dict)  # search bounds that differ from the defaults (collection/limits.py)
    extra: dict = field(default_factory=dict)  # keys of a newer writer, kept as they are
    format: int = FORMAT_VERSION

    @classmethod
    def from_dict(cls, d: dict, name="MANIFEST") -> "Manifest":
        if not isinstance(d, dict) or d.get("format") != FORMAT_VERSION:
            raise CorruptIndexError(f"{name}: unsupported manifest format")
        known = {f.name for f in fields(cls)} - {"extra"}
        try:
            kw = {k: v for k, v in d.items() if k in known}
            for k in ("search_defaults", "payload", "sparse_params", "audit", "limits"):
                if kw.get(k) is None:
                    kw.pop(k, None)  # written as null by older versions
            m = cls(**kw, extra={k: v for k, v in d.items() if k not in known})
        except TypeError as exc:
            raise CorruptIndexError(f"{name}: manifest lacks a field: {exc}") from None
        if not isinstance(m.generation, int) or not isinstance(m.rows, int) or not isinstance(m.segments, list):
            raise CorruptIndexError(f"{name}: manifest fields have the wrong types")
        check_fields(m, name)
        return m

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        for name in _OMITTED_WHEN_EMPTY:
            if not d[name]:
                del d[name]
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


# ---------------------------------------------------------------- field checks
# A manifest passes its frame's checksum yet can still be wrong (written by a buggy or hostile
# tool): everything the loaders index into is checked here, so a bad one is a CorruptIndexError
# naming the field instead of a KeyError / TypeError deep in a loader, and a file name can never
# leave the collection directory.
_SUMS = ("crc32c", "crc", "model_crc32c")
_NAMES = ("file", "model")
_NESTED = ("blocks",)  # the row block sums of a row file entry (storage/rowsums.py)
# index parameters the stages convert with int(): (smallest, largest) accepted
_INT_PARAMS = {"m": (2, 1 << 16), "ef_construction": (1, 1 << 31), "ef_search": (1, 1 << 31),
               "seed": (0, (1 << 64) - 1), "oversample": (1, 1 << 20), "bits": (1, 8), "query_bits": (4, 8),
               "min_candidates": (0, 1 << 31), "ef": (1, 1 << 31)}
_MAY_BE_NULL = {"ef_search", "query_bits", "bits", "ef"}
# keys each entry needs besides a checksum (the dense entry: by index kind)
_NEEDS = {"vectors": ("file", "rows"), "segment": ("file", "rows"), "filters": ("file",), "sparse": ("file",),
          "bq": ("file", "rows"), "hnsw": ("file",)}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def safe_name(v) -> bool:
    """A plain file name inside the directory (no path, no parent, no NUL)."""
    return (isinstance(v, str) and v not in ("", ".", "..") and "/" not in v and "\\" not in v
            and "\0" not in v)


def check_entry(entry, what: str, name, needs=()) -> None:
    """A file entry: a dict whose file names are plain, rows a count and checksums 32-bit values."""
    if not isinstance(entry, dict):
        raise CorruptIndexError(f"{name}: {what} entry is not an object")
    for key in needs:
        if key not in entry:
            raise CorruptIndexError(f"{name}: {what} entry lacks {key!r}")
    if "file" in needs and not any(k in entry for k in _SUMS[:2]):
        raise CorruptIndexError(f"{name}: {what} entry lacks a checksum")
    if entry.get("model") is not None and "model_crc32c" not in entry:
        raise CorruptIndexError(f"{name}: {what} entry names a model without its checksum")
    for key, v in entry.items():
        if key in _NAMES and not (safe_name(v) or key == "model" and v is None):
            raise CorruptIndexError(f"{name}: {what} entry names {v!r}, not a file of the collection")
        if key == "rows" and not (_is_int(v) and 0 <= v < 1 << 40):
            raise CorruptIndexError(f"{name}: {what} entry has rows={v!r}")
        if key in _SUMS and not (_is_int(v) and 0 <= v < 1 << 32):
            raise CorruptIndexError(f"{name}: {what} entry has {key}={v!r}")
        if key in _NESTED and v or isinstance(v, dict) and "file" in v:  # a file entry inside this one
            check_entry(v, f"{what} {key}", name, ("file",))


def check_fields(m: Manifest, name) -> None:
    """CorruptIndexError unless the fields loaders use have the types and ranges they need."""
    if not _is_int(m.dim) or not 1 <= m.dim <= 1 << 20:
        raise CorruptIndexError(f"{name}: bad dim {m.dim!r}")
    if m.metric not in ("cosine", "ip", "l2") or m.index not in ("bq", "hnsw"):
        raise CorruptIndexError(f"{name}: unknown metric {m.metric!r} or index {m.index!r}")
    if m.rows < 0 or m.generation < 0:
        raise CorruptIndexError(f"{name}: negative rows or generation")
    for what in ("index_params", "sparse_params", "search_defaults", "payload", "limits"):
        if not isinstance(getattr(m, what), dict):
            raise CorruptIndexError(f"{name}: {what} is not an object")
    if not isinstance(m.filter_fields, list) or not all(isinstance(f, str) for f in m.filter_fields):
        raise CorruptIndexError(f"{name}: filter_fields is not a list of names")
    for what, params in (("index_params", m.index_params), ("search_defaults", m.search_defaults)):
        for key, v in params.items():
            lo_hi = _INT_PARAMS.get(key)
            if lo_hi and not (v is None and key in _MAY_BE_NULL) and not (_is_int(v) and lo_hi[0] <= v <= lo_hi[1]):
                raise CorruptIndexError(f"{name}: {what}[{key!r}] = {v!r} is out of range")
    if not all(_is_int(v) and v >= 1 for v in m.limits.values()):
        raise CorruptIndexError(f"{name}: limits are not positive integers")
    for key in ("k1", "b"):
        v = m.sparse_params.get(key, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e6:
            raise CorruptIndexError(f"{name}: sparse_params[{key!r}] = {v!r} is out of range")
    check_entry(m.vectors, "vectors", name, _NEEDS["vectors"])
    check_entry(m.filters, "filters", name, _NEEDS["filters"])
    for s in m.segments:
        check_entry(s, "segment", name, _NEEDS["segment"])
    if m.sparse is not None:
        check_entry(m.sparse, "sparse", name, _NEEDS["sparse"])
    if m.dense is not None or m.index == "bq":
        check_entry(m.dense, "dense", name, _NEEDS[m.index])
