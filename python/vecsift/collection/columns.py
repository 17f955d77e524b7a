"""Python values of chosen rows of the chunk table, for building search hits.

pyarrow's Table.take + to_pylist costs several microseconds of dispatch per
call and column whatever the row count (~100 us right after a graph walk, when
the caches hold the graph): more than scoring a BM25 query. String columns (id,
text, doc_id, tenant and most provenance) are read straight from their Arrow
buffers by _core.Utf8Column, integer, float32 / float64 and bool columns
(numeric metadata, char ranges) by _core.NumColumn, all in one call; any other
column (timestamps, lists, structs...) goes through one pyarrow take for all
of them together.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from vecsift._core import NumColumn, Utf8Column, take_columns

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


def _is_num(typ) -> bool:
    return typ in _NUM_TYPES or typ == pa.bool_()


_NUM_TYPES = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
              pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32, pa.uint64(): np.uint64,
              pa.float32(): np.float32, pa.float64(): np.float64}


def _num_column(column: pa.ChunkedArray) -> NumColumn:
    """A NumColumn over the Arrow buffers of an integer / float32 / float64 / bool column (no copy)."""
    boolean = column.type == pa.bool_()
    dtype = None if boolean else _NUM_TYPES[column.type]
    chunks = []
    for arr in column.chunks:
        validity, values = arr.buffers()[:2]
        n, off = len(arr), arr.offset
        valid = np.frombuffer(validity, np.uint8) if validity is not None and arr.null_count else None
        if boolean:
            bits = np.frombuffer(values, np.uint8) if values is not None and n else np.zeros(1, np.uint8)
            chunks.append((bits, valid, off, n))
        else:
            vals = np.frombuffer(values, dtype)[off: off + n] if values is not None and n else np.empty(0, dtype)
            chunks.append((vals, valid, off, n))
    return NumColumn.booleans(chunks) if boolean else NumColumn(chunks)


class RowReader:
    """Reads the columns that hold at least one value, for a few rows at a time.

    The table is immutable, so readers are built once per column on first use
    and shared by every snapshot (and thread) over the same table."""

    def __init__(self, table: pa.Table, wanted=None):
        """wanted: a predicate on column names (default: every column) choosing the columns read."""
        self.table = table
        n = table.num_rows
        # All-null columns are skipped: every hit would read None from them.
        self.columns = [c for c in table.column_names if (c == "id" or table.column(c).null_count < n)
                        and (wanted is None or c == "id" or wanted(c))]
        types = {c: table.schema.field(c).type for c in self.columns}
        self._native_cols = [c for c in self.columns if types[c] in _OFFSET_TYPES or _is_num(types[c])]
        self._others = [c for c in self.columns if c not in set(self._native_cols)]
        self._readers = None  # Utf8Column / NumColumn per native column, built on first read

    @property
    def readers(self) -> list:
        """The native readers of the columns in `native_columns` order (built on first use)."""
        readers = self._readers
        if readers is None:  # two threads may both build them; either result is the same
            readers = []
            for c in self._native_cols:
                col = self.table.column(c)
                readers.append(_utf8_column(col) if col.type in _OFFSET_TYPES else _num_column(col))
            self._readers = readers
        return readers

    @property
    def native_columns(self) -> list:
        return self._native_cols

    def read(self, rows) -> dict:
        """{column: list of Python values (None for nulls)} for rows (int64, any order)."""
        out = dict(zip(self._native_cols, take_columns(self.readers, rows)))
        if self._others:
            taken = self.table.select(self._others).take(pa.array(rows))
            for c in self._others:
                out[c] = taken.column(c).to_pylist()
        return out
