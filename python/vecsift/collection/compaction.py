"""compact(): every file of a collection rewritten without its deleted rows, in one atomic commit.

Live rows keep their order and are renumbered 0..n_live-1. The new files are
built beside the old ones (generation G+1) and committed by write_commit; a
failure before the manifest leaves the old generation intact, and its
leftovers are removed by the next compaction or writable open.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from vecsift.collection.commit import write_commit
from vecsift.collection.filters import Filters, rows_of
from vecsift.collection.stages.dense import KINDS
from vecsift.collection.stages.sparse import indexed_texts
from vecsift.collection.writes import filter_keys
from vecsift.storage.manifest import Manifest
from vecsift.storage.rowfile import RowFile
from vecsift.storage.rowsums import check_rows


@dataclass
class Compacted:
    manifest: Manifest
    vectors: RowFile
    dense: object
    sparse: object
    filters: Filters
    table: pa.Table


def compact_files(directory, m: Manifest, snap, old_filters: Filters, rw_lock) -> Compacted:
    """Writes and commits generation m.generation + 1 holding the live rows of `snap`."""
    gen = m.generation + 1
    keep = rows_of(snap.live)
    dim = m.dim
    vec = RowFile.create(os.path.join(directory, f"vectors-{gen}.f32"), "vectors", "float32", dim)
    dense = KINDS[m.index].create(directory, gen, dim, m.metric, m.index_params)
    dense.lock = rw_lock
    step = max(1, (64 << 20) // (4 * dim))
    src = snap.scan_vectors  # one forward pass with read-ahead
    for s in range(0, len(keep), step):
        check_rows(src, keep[s:s + step])  # a corrupt row is refused, not copied under a new checksum
        rows = np.asarray(src[keep[s:s + step]])
        vec.append(rows)
        dense.stage(rows)
    vec.sync()
    table = snap.table.take(pa.array(keep))
    filters = Filters(m.filter_fields)
    filters.add_rows(0, table["tenant"].combine_chunks(), table["acl"].combine_chunks(),
                     filter_keys(table, m.filter_fields))
    filters.has_tenants |= old_filters.has_tenants  # once required, always required
    filters.has_acl |= old_filters.has_acl
    sparse = snap.sparse.compacted(directory, gen, len(keep), lambda: indexed_texts(table, m.index_heading_path))
    new = m.replace(generation=gen, rows=len(keep), segments=[], sparse=sparse.prepare_commit(directory, gen),
                    vectors=vec.entry(),
                    dense=dense.prepare_commit(directory, gen, vec.view(len(keep), sequential=True)))
    try:
        new, seg = write_commit(directory, new, filters, table)
    except BaseException:
        vec.close()
        dense.close()
        raise
    dense.publish()
    return Compacted(new, vec, dense, sparse, filters, seg)
