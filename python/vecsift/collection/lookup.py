"""Chunks by id (Collection.get): what framework stores need for get_by_ids and MMR.

A lookup sees what a search sees: the committed snapshot minus deleted rows,
inside the allow set of the asker's tenant and groups (a collection with
tenants or ACLs refuses a lookup that does not say who is asking). An id the
asker may not see is reported as missing, exactly like an id that was never
added, so lookups tell one tenant nothing about another.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vecsift.collection.filters import bitmap_of, rows_of
from vecsift.storage.rowsums import check_rows


def get_chunks(snap, allow, ids, with_vectors: bool = False):
    """Hits (score nan) for ids, in the order given, None where an id is missing or not allowed.

    with_vectors: also a (len(ids), dim) float32 array of the stored vectors (unit
    length for cosine collections), rows of NaN for missing ids."""
    if isinstance(ids, str):
        raise TypeError("ids must be a sequence of strings, got a single string")
    ids = [str(i) for i in ids]
    found = {}
    if ids and snap.n and len(allow):
        want = pa.array(ids, type=pa.string())
        hit = pc.is_in(snap.table["id"], value_set=want).to_numpy(zero_copy_only=False)
        rows = rows_of(bitmap_of(np.flatnonzero(hit)) & allow)  # at most one live row per id
        if len(rows):
            hits = snap.hits.build(rows, [float("nan")] * len(rows))
            found = {h.id: (h, r) for h, r in zip(hits, rows.tolist())}
    out = [found[i][0] if i in found else None for i in ids]
    if not with_vectors:
        return out
    vecs = np.full((len(ids), snap.vectors.shape[1]), np.nan, np.float32)
    check_rows(snap.vectors, np.array([r for _, r in found.values()], np.int64))
    for j, i in enumerate(ids):
        if i in found:
            vecs[j] = snap.vectors[found[i][1]]
    return out, vecs
