"""Where an import or sync got to: the "pg" entry of the collection's manifest payload.

Committed with the rows it describes (Collection.commit(payload=...)), so the
watermark and the resume point can never run ahead of the data.
"""
from __future__ import annotations

KEY = "pg"


def read_state(collection) -> dict:
    """The import/sync state of the last commit ({} for a collection not made by import-pg)."""
    return dict(collection.payload.get(KEY) or {})


def commit_state(collection, state: dict) -> None:
    """Commits everything added so far together with `state` (other payload keys kept)."""
    collection.commit(payload={**collection.payload, KEY: state})
