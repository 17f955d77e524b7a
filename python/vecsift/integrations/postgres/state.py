"""Where an import or sync got to, stored in the collection's manifest (atomic with the rows).

The only place that knows how the manifest holds it: replace these two
functions when the typed Manifest with a user payload lands.
"""
from __future__ import annotations

import copy

KEY = "pg"


def read_state(collection) -> dict:
    """The import/sync state of the last commit ({} for a collection not made by import-pg)."""
    payload = collection._manifest.get("payload") or {}
    return copy.deepcopy(payload.get(KEY) or {})


def write_state(collection, state: dict) -> None:
    """Stages state; the next commit() makes it durable together with the rows added before it."""
    m = collection._manifest
    payload = dict(m.get("payload") or {})
    payload[KEY] = copy.deepcopy(state)
    collection._manifest = {**m, "payload": payload}
    collection._dirty = True
