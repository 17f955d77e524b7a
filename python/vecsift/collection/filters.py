"""Roaring-bitmap pre-filters: who may see which rows.

One bitmap per tenant, per ACL group and per value of every field named in
``filter_fields`` at create time, plus the bitmap of deleted rows. The allow
set of a search is

    live AND tenant AND (OR of the asker's groups) AND where-clauses

computed before any vector is scored and handed to the index, so rows outside
it are never scored. Rows are only ever appended, so a bitmap's membership for
rows below a snapshot's row count never changes; clipping by the snapshot's
``live`` bitmap (committed rows minus deleted) makes every search see exactly
its snapshot even while the writer indexes new rows.

Each filter field has a kind (number, datetime, string, bool) fixed by the
first values it sees and recorded in the blob; where.py is the language and
field_index.py how each field answers it (ranges from sorted columns).
Blobs written before kinds existed (string keys only) are read and their kinds
inferred from the keys.
"""
from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap, FrozenBitMap

from vecsift.collection import where as where_lang
from vecsift.collection.field_index import _SORTED, FieldIndex, bitmap_of, index_keys, micros, normalise
from vecsift.errors import CorruptIndexError

__all__ = ["Filters", "as_keys", "bitmap_of", "rows_of"]


def rows_of(bm: BitMap) -> np.ndarray:
    return np.frombuffer(bm.to_array(), dtype=np.uint32).astype(np.int64)


def as_keys(values) -> pa.Array:
    """A filter field's column as Filters.add_rows takes it (typed: see field_index.normalise)."""
    return normalise(values)


# Filter results kept per snapshot (each a frozen bitmap of at most the snapshot's rows).
_ALLOW_KEPT = 64
_VERSION = 2


class Filters:
    """The bitmaps of one collection generation (row numbers as stored on disk)."""

    def __init__(self, fields=()):
        self.fields = list(fields)
        self.tenants: dict[str, BitMap] = {}
        self.groups: dict[str, BitMap] = {}
        self.index: dict[str, FieldIndex] = {f: FieldIndex(f) for f in self.fields}
        self.deleted = BitMap()  # replaced, never mutated: snapshots hold the old object
        self.has_tenants = False
        self.has_acl = False
        self._allow_cache = (None, {})  # (live bitmap, {filter: allowed rows})

    @property
    def kinds(self) -> dict:
        """{field: "number" | "datetime" | "string" | "bool" | None (no value seen yet)}."""
        return {f: ix.kind for f, ix in self.index.items()}

    def add_rows(self, start: int, tenant: pa.Array, acl: pa.Array, fields: dict) -> None:
        """Indexes rows start..start+len(tenant)-1. tenant: strings, acl: list<string>,
        fields: {field: values} (scalars or lists; TypeError before any change if a field's kind differs)."""
        n = len(tenant)
        cols = {f: normalise(fields[f]) for f in self.fields}
        for f, col in cols.items():
            self.index[f].check(col)
        rows = np.arange(start, start + n, dtype=np.int64)
        if tenant.null_count < n:
            self.has_tenants = True
            index_keys(self.tenants, tenant, rows)
        if acl.null_count < n:
            self.has_acl = True
            flat = pc.list_flatten(acl)
            parents = pc.list_parent_indices(acl).to_numpy(zero_copy_only=False).astype(np.int64)
            index_keys(self.groups, flat, rows[parents])
        for f, col in cols.items():
            self.index[f].add(col, rows)

    def delete(self, rows: BitMap) -> None:
        self.deleted = self.deleted | rows

    def allow(self, live, tenant=None, groups=None, where=None):
        """The rows a search may score. Raises on a missing tenant/groups, an unknown field or
        operator, or a value of the wrong type (see where.py for the language).

        live is the snapshot's frozen bitmap; the result is frozen too, and the
        same object for the same filter while live is the same (recent filters
        are kept), so indexes can keep what they derive from it (BM25's mask and
        per-tenant statistics) instead of redoing it every query."""
        if self.has_tenants and tenant is None:
            raise ValueError("this collection has tenants: search(tenant=...) is required")
        if self.has_acl and groups is None:
            raise ValueError("this collection has access control lists: search(groups=[...]) is required")
        names = None if groups is None else [str(groups)] if isinstance(groups, str) else [str(g) for g in groups]
        tree = where_lang.parse(where, self.index)
        key = (None if tenant is None else str(tenant), None if names is None else tuple(sorted(set(names))), tree)
        cached_live, cache = self._allow_cache
        if cached_live is live:
            hit = cache.get(key)
            if hit is not None:
                return hit
        else:
            cache = {}
            self._allow_cache = (live, cache)
        out = self._compute_allow(live, *key)
        if len(cache) >= _ALLOW_KEPT:
            cache.clear()
        cache[key] = out
        return out

    def _compute_allow(self, live, tenant, groups, tree):
        parts = []
        if self.has_tenants or tenant is not None:
            # no chunk belongs to any tenant: an unknown tenant sees nothing
            parts.append(self.tenants.get(tenant, BitMap()) if self.has_tenants else BitMap())
        if self.has_acl:
            parts.append(BitMap.union(*[self.groups.get(g, BitMap()) for g in groups]) if groups else BitMap())
        out = live
        for p in sorted(parts, key=len):  # smallest first keeps intersections cheap
            out = out & p
            if not out:
                break
        if tree != where_lang.TRUE and out:
            out = where_lang.evaluate(tree, self.index, out if isinstance(out, BitMap) else BitMap(out))
        return out if isinstance(out, FrozenBitMap) else FrozenBitMap(out)

    # persistence: json directory + concatenated roaring serialisations and sorted columns
    def to_bytes(self) -> bytes:
        blobs, entries, off = [], [], 0

        def put(kind, field, key, b):
            nonlocal off
            entries.append([kind, field, key, off, len(b)])
            blobs.append(b)
            off += len(b)

        for k, bm in self.tenants.items():
            put("t", None, k, bm.serialize())
        for k, bm in self.groups.items():
            put("g", None, k, bm.serialize())
        kinds = {}
        for f, ix in self.index.items():
            kinds[f] = [ix.kind, ix.from_strings]
            for k, bm in ix.keys.items():
                put("v", f, k, bm.serialize())
            put("p", f, None, ix.present.serialize())
            run = ix.compacted_runs()
            if run is not None:  # values then their rows (uint32)
                put("s", f, len(run[0]), run[0].tobytes() + run[1].astype(np.uint32).tobytes())
        put("d", None, None, self.deleted.serialize())
        head = json.dumps({"version": _VERSION, "fields": self.fields, "kinds": kinds,
                           "has_tenants": self.has_tenants, "has_acl": self.has_acl, "entries": entries}).encode()
        return struct.pack("<Q", len(head)) + head + b"".join(blobs)

    @classmethod
    def from_bytes(cls, data, name) -> "Filters":
        try:
            (hl,) = struct.unpack_from("<Q", data)
            head = json.loads(bytes(data[8:8 + hl]))
            body = data[8 + hl:]
            _check_head(head, len(body))
            self = cls(head["fields"])
            self.has_tenants, self.has_acl = bool(head["has_tenants"]), bool(head["has_acl"])
            kinds = head.get("kinds")
            for f, (kind, from_strings) in (kinds or {}).items():
                self.index[f].kind, self.index[f].from_strings = kind, bool(from_strings)
            for kind, field, key, off, length in head["entries"]:
                raw = bytes(body[off:off + length])
                if kind == "t":
                    self.tenants[key] = _bitmap(raw)
                elif kind == "g":
                    self.groups[key] = _bitmap(raw)
                elif kind == "v":
                    self.index[field].keys[key] = _bitmap(raw)
                elif kind == "p":
                    self.index[field].present = _bitmap(raw)
                elif kind == "s":
                    ix = self.index[field]
                    dtype = _SORTED[ix.kind]
                    if length != key * (np.dtype(dtype).itemsize + 4):
                        raise ValueError(f"sorted column of {field!r} has {length} bytes for {key} values")
                    values = np.frombuffer(raw, dtype, key)
                    rows = np.frombuffer(raw, np.uint32, key, offset=key * np.dtype(dtype).itemsize)
                    ix.runs = ((values, rows),)
                elif kind == "d":
                    self.deleted = _bitmap(raw)
                else:
                    raise ValueError(f"unknown entry kind {kind!r}")
            if kinds is None:
                for ix in self.index.values():
                    _infer_from_keys(ix)
        except (ValueError, KeyError, TypeError, struct.error) as exc:
            raise CorruptIndexError(f"{name}: unreadable filter bitmaps: {exc}") from None
        return self


_KINDS = (None, "number", "datetime", "string", "bool")


def _bitmap(raw: bytes) -> BitMap:
    try:  # pyroaring checks the serialisation; a short buffer surfaces as IndexError
        return BitMap.deserialize(raw)
    except (IndexError, OverflowError) as exc:
        raise ValueError(f"bad roaring bitmap: {exc}") from None


def _check_head(head, body_len: int) -> None:
    """ValueError unless the blob's JSON directory has the shape to_bytes writes: every entry of a
    known kind, naming a declared field, a key of the right type and a byte range inside the body."""
    if not isinstance(head, dict) or not isinstance(head.get("fields"), list) or \
            not all(isinstance(f, str) for f in head["fields"]) or not isinstance(head.get("entries"), list):
        raise ValueError("directory is not an object with fields and entries")
    fields = set(head["fields"])
    kinds = head.get("kinds")
    if kinds is not None:
        if not isinstance(kinds, dict) or not set(kinds) <= fields:
            raise ValueError("kinds do not match the fields")
        for kind in kinds.values():
            if not (isinstance(kind, list) and len(kind) == 2 and kind[0] in _KINDS and isinstance(kind[1], bool)):
                raise ValueError(f"bad field kind {kind!r}")
    for e in head["entries"]:
        if not (isinstance(e, list) and len(e) == 5 and e[0] in ("t", "g", "v", "p", "s", "d")):
            raise ValueError(f"bad entry {e!r}")
        kind, field, key, off, length = e
        if kind in "vps" and field not in fields or kind not in "vps" and field is not None:
            raise ValueError(f"entry {e!r} names no declared field")
        if kind in "tgv" and (isinstance(key, bool) or not isinstance(key, (str, int, float))):
            raise ValueError(f"entry {e!r} has a bad key")
        if kind == "s" and (isinstance(key, bool) or not isinstance(key, int) or key < 0 or
                            (kinds or {}).get(field, [None])[0] not in _SORTED):
            raise ValueError(f"sorted column entry {e!r} does not fit its field")
        if any(isinstance(x, bool) or not isinstance(x, int) for x in (off, length)) or \
                off < 0 or length < 0 or off + length > body_len:
            raise ValueError(f"entry {e!r} runs outside the blob")


def _infer_from_keys(ix: FieldIndex) -> None:
    """A field of a blob from before kinds: its values were stored as strings (pyarrow casts)."""
    keys = list(ix.keys)
    ix.present = BitMap.union(BitMap(), *ix.keys.values())
    if not keys:
        return
    if set(keys) <= {"true", "false"}:
        ix.kind = "bool"
        return
    try:
        values = np.array([float(k) for k in keys])
        kind = "number"
    except ValueError:
        try:
            values = np.array([micros(k) for k in keys], dtype=np.int64)
            kind = "datetime"
        except (ValueError, TypeError, OverflowError):
            ix.kind = "string"
            return
    sizes = [len(ix.keys[k]) for k in keys]
    rows = np.concatenate([np.frombuffer(ix.keys[k].to_array(), np.uint32) for k in keys])
    ix.kind, ix.from_strings = kind, kind == "datetime"
    ix.runs = ()
    ix._append(np.repeat(values, sizes), rows)
    if kind == "number":
        ix.keys = {}
