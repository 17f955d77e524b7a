"""The one commit sequence of create, commit and compact.

Before calling write_commit the caller has written and fsynced the files of the
stages (float32 rows, codes or graph, BM25) and put their entries in the new
manifest. write_commit then writes the commit's chunk segment and filters blob,
fsyncs the directory and replaces the manifest: that rename is the commit
point. A crash before it leaves the previous commit whole (the new files are
unreferenced and removed at the next writable open); after it, every file the
manifest names is durable.
"""
from __future__ import annotations

import os

import pyarrow as pa

from vecsift.storage import manifest as manifests
from vecsift.storage.checksum import CRC32C
from vecsift.storage.framing import fsync_dir, write_blob
from vecsift.storage.manifest import Manifest
from vecsift.storage.segment import read_segment, write_segment


def write_commit(directory, m: Manifest, filters, segment: pa.Table | None = None):
    """Commits manifest `m` (its generation already the new one) with the given filters and, if any,
    a new chunk segment appended to m.segments. Returns (the committed manifest, the segment read back
    memory-mapped, or None)."""
    gen = m.generation
    segments, table = list(m.segments), None
    if segment is not None:
        name = f"seg-{gen}.arrow"
        path = os.path.join(directory, name)
        segments.append({"file": name, "rows": segment.num_rows, CRC32C: write_segment(path, segment)})
        table = read_segment(path, segments[-1])
    name = f"filters-{gen}.bin"
    m = m.replace(segments=segments,
                  filters={"file": name, CRC32C: write_blob(os.path.join(directory, name), "filters",
                                                           filters.to_bytes())})
    fsync_dir(directory)
    manifests.write(directory, m)  # the commit point
    return m, table
