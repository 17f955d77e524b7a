"""verify(): re-reads the small files of a commit against the manifest (the row files check themselves).

Opening checked these files once; verify() reads them again because what is on disk now is what the next
open will see (a disk that rots after the open is what verify is run to find).
"""
from __future__ import annotations

import os

from vecsift.storage.checksum import check_file
from vecsift.storage.framing import missing_file, read_blob
from vecsift.storage.manifest import Manifest


def _check(directory, entry) -> None:
    path = os.path.join(directory, entry["file"])
    if not os.path.exists(path):
        raise missing_file(path)
    check_file(entry, path)


def verify_files(directory, m: Manifest) -> list:
    """Checks the chunk segments, filters, BM25 postings and block-checksum files of manifest `m`; returns
    notes on what it could not check (none so far: every one of these files carries a checksum)."""
    for seg in m.segments:
        _check(directory, seg)
    if m.filters:
        read_blob(os.path.join(directory, m.filters["file"]), "filters", m.filters)
    if m.sparse:
        _check(directory, m.sparse)
    blocks = m.vectors.get("blocks")
    if blocks:
        _check(directory, blocks)
    return []
