"""Chunk segments: one Arrow IPC file per commit holding the chunks it added.

Arrow keeps its own framing; the schema metadata says kind and format
version, and the manifest entry holds the file's checksum (CRC-32C) and row count.
"""
from __future__ import annotations

import os

import pyarrow as pa

from vecsift.errors import CorruptIndexError
from vecsift.storage.checksum import CRC32C, check_file, update
from vecsift.storage.framing import FORMAT_VERSION, missing_file, write_durable

SEGMENT_META = {b"vecsift_kind": b"segment", b"vecsift_format": str(FORMAT_VERSION).encode()}


def read_segment(path, entry: dict) -> pa.Table:
    """The segment's chunks, memory-mapped, checked against the manifest entry."""
    if not os.path.exists(path):
        raise missing_file(path)
    check_file(entry, path)
    try:
        table = pa.ipc.open_file(pa.memory_map(path, "r")).read_all()
        # offsets and lengths inside the buffers: read_all trusts them, later reads would not
        table.validate(full=True)
    # ArrowInvalid, ArrowNotImplementedError (bad types); UnicodeDecodeError: a column name that is not UTF-8
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise CorruptIndexError(f"{path}: unreadable chunk segment: {exc}") from None
    meta = table.schema.metadata or {}
    if meta.get(b"vecsift_kind") != b"segment" or meta.get(b"vecsift_format") != SEGMENT_META[b"vecsift_format"]:
        raise CorruptIndexError(f"{path}: not a vecsift chunk segment of format {FORMAT_VERSION}")
    if table.num_rows != entry["rows"]:
        raise CorruptIndexError(f"{path}: holds {table.num_rows} chunks, the manifest says {entry['rows']}")
    return table


def write_segment(path, table: pa.Table) -> int:
    """Writes the segment durably (the caller fsyncs the directory); returns its CRC-32C."""
    table = table.replace_schema_metadata(SEGMENT_META)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    data = sink.getvalue().to_pybytes()
    write_durable(path, data)
    return update(CRC32C, data)
