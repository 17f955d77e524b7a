"""Python values of chosen rows of the chunk table, for building search hits.

pyarrow's Table.take + to_pylist costs several microseconds of dispatch per
call and column whatever the row count: more than scoring a BM25 query. String
columns (id, text, doc_id, tenant and most provenance) are read straight from
their Arrow buffers by _core.Utf8Column; any other column goes through one
pyarrow take for all of them together.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from vecsift._core import Utf8Column, take_utf8

_OFFSET_TYPES = {pa.string(): np.int32, pa.large_string(): np.int64}


def _utf8_column(column: pa.ChunkedArray) -> Utf8Column:
    dtype = _OFFSET_TYPES[column.type]
    chunks = []
    for arr in column.chunks:
        validity, offsets, data = arr.buffers()
        n, off = len(arr), arr.offset
        offsets = np.frombuffer(offsets, dtype)[off: off + n + 1] if n else np.zeros(1, dtype)
        data = np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)
        validity = np.frombuffer(validity, np.uint8) if validity is not None and arr.null_count else None
        chunks.append((offsets, data, validity, off))
    return Utf8Column(chunks)


class RowReader:
    """Reads the columns that hold at least one value, for a few rows at a time.

    The table is immutable, so readers are built once per column on first use
    and shared by every snapshot (and thread) over the same table."""

    def __init__(self, table: pa.Table):
        self.table = table
        n = table.num_rows
        # All-null columns are skipped: every hit would read None from them.
        self.columns = [c for c in table.column_names if c == "id" or table.column(c).null_count < n]
        is_str = {c: table.schema.field(c).type in _OFFSET_TYPES for c in self.columns}
        self._string_cols = [c for c in self.columns if is_str[c]]
        self._others = [c for c in self.columns if not is_str[c]]
        self._strings = None  # Utf8Column per string column, built on first read

    def read(self, rows) -> dict:
        """{column: list of Python values (None for nulls)} for rows (int64, any order)."""
        readers = self._strings
        if readers is None:  # two threads may both build them; either result is the same
            readers = self._strings = [_utf8_column(self.table.column(c)) for c in self._string_cols]
        out = dict(zip(self._string_cols, take_utf8(readers, rows)))
        if self._others:
            taken = self.table.select(self._others).take(pa.array(rows))
            for c in self._others:
                out[c] = taken.column(c).to_pylist()
        return out
