"""Turning add() arguments and Arrow tables into one columnar batch of chunks.

Everything is columnar: arguments become pyarrow arrays (one conversion call
each, no per-row Python loop), the vector column of a table becomes a numpy
view of its Arrow buffer without a copy when it is fixed_size_list<float32>.

A batch has the columns of ROW_SCHEMA plus the caller's metadata as ``m.<key>``.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PROVENANCE = ("source", "heading_path", "char_start", "char_end", "date", "version", "doc_type",
              "pipeline_version")
ROW_SCHEMA = pa.schema([
    ("id", pa.string()), ("doc_id", pa.string()), ("tenant", pa.string()), ("acl", pa.list_(pa.string())),
    ("text", pa.string()), ("display_text", pa.string()),
    ("source", pa.string()), ("heading_path", pa.string()), ("char_start", pa.int64()), ("char_end", pa.int64()),
    ("date", pa.string()), ("version", pa.string()), ("doc_type", pa.string()), ("pipeline_version", pa.string()),
])
META = "m."
HEADING_SEP = " > "


def _broadcast(value, n: int, name: str, typ: pa.DataType) -> pa.Array:
    """None -> nulls; a scalar -> repeated; a sequence/array -> checked length, cast to typ."""
    if value is None:
        return pa.nulls(n, typ)
    if isinstance(value, (str, bytes, int, float, np.generic)) and not isinstance(value, bool):
        return pa.array([value] * 1).cast(typ).take(pa.array(np.zeros(n, dtype=np.int64)))
    if isinstance(value, pa.ChunkedArray):
        value = value.combine_chunks()
    try:
        arr = value if isinstance(value, pa.Array) else pa.array(value)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise TypeError(f"{name}: cannot convert to {typ}: {exc}") from None
    if len(arr) != n:
        raise ValueError(f"{name} has {len(arr)} entries, expected {n} (one per chunk)")
    if pa.types.is_null(arr.type):
        return pa.nulls(n, typ)
    if name == "heading_path" and (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        arr = pc.binary_join(arr.cast(pa.list_(pa.string())), HEADING_SEP)
    if arr.type != typ:
        try:
            arr = arr.cast(typ)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise TypeError(f"{name}: cannot convert {arr.type} to {typ}: {exc}") from None
    return arr


def _acl_column(acl, n: int) -> pa.Array:
    """acl: one entry per chunk, each a list of group names, a single name, or None (nobody)."""
    typ = pa.list_(pa.string())
    if acl is None:
        return pa.nulls(n, typ)
    if isinstance(acl, pa.ChunkedArray):
        acl = acl.combine_chunks()
    if isinstance(acl, pa.Array):
        arr = acl
    else:
        if isinstance(acl, str):
            raise TypeError("acl must have one entry per chunk (a list of group names each), got a string")
        acl = list(acl)
        if len(acl) != n:
            raise ValueError(f"acl has {len(acl)} entries, expected {n} (one per chunk)")
        try:
            arr = pa.array(acl)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arr = None
        if arr is None or pa.types.is_string(arr.type):  # single names, maybe mixed with lists
            arr = pa.array([[a] if isinstance(a, str) else a for a in acl], type=typ)
    if len(arr) != n:
        raise ValueError(f"acl has {len(arr)} entries, expected {n} (one per chunk)")
    if pa.types.is_null(arr.type):
        return pa.nulls(n, typ)
    try:
        return arr.cast(typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise TypeError(f"acl must be lists of group names: {exc}") from None


def _metadata_table(metadata, n: int) -> pa.Table:
    if metadata is None:
        return pa.table({})
    if isinstance(metadata, pa.RecordBatch):
        metadata = pa.Table.from_batches([metadata])
    if isinstance(metadata, pa.Table):
        table = metadata
    elif isinstance(metadata, dict):
        table = pa.table({k: v for k, v in metadata.items()})
    else:
        metadata = list(metadata)
        if any(m is not None and not isinstance(m, dict) for m in metadata[:1]):
            raise TypeError("metadata must be a list of dicts (one per chunk) or a dict of columns")
        # pa.array infers one struct type from every row (from_pylist looks at the first only)
        try:
            table = pa.Table.from_struct_array(pa.array([m or {} for m in metadata]))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise TypeError(f"metadata: values of one key must share a type: {exc}") from None
    if table.num_rows != n and table.num_columns:
        raise ValueError(f"metadata has {table.num_rows} rows, expected {n} (one per chunk)")
    return table


def check_ids(ids) -> pa.Array:
    """Non-null, non-empty, unique strings."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    if isinstance(ids, str):
        raise TypeError("ids must be a sequence of strings, got a single string")
    try:
        arr = ids if isinstance(ids, pa.Array) else pa.array(ids if isinstance(ids, np.ndarray) else list(ids))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise TypeError(f"ids must be strings: {exc}") from None
    if pa.types.is_null(arr.type) and len(arr):
        raise ValueError("ids must not contain None")
    if pa.types.is_large_string(arr.type) or pa.types.is_dictionary(arr.type) or pa.types.is_null(arr.type):
        arr = arr.cast(pa.string())
    if not pa.types.is_string(arr.type):
        raise TypeError(f"ids must be strings, got {arr.type}")
    if arr.null_count:
        raise ValueError("ids must not contain None")
    if len(arr) and pc.min(pc.utf8_length(arr)).as_py() == 0:
        raise ValueError("ids must be non-empty strings")
    if pc.count_distinct(arr).as_py() != len(arr):
        counts = pc.value_counts(arr)
        dup = counts.filter(pc.greater(counts.field("counts"), 1))[0]["values"].as_py()
        raise ValueError(f"duplicate id within one add: {dup!r}")
    return arr


def build_batch(ids, n: int, *, texts=None, display_texts=None, doc_ids=None, tenant=None, acl=None,
                metadata=None, provenance=None, pipeline_version=None) -> pa.Table:
    """One table of n chunks in ROW_SCHEMA order plus m.* metadata columns."""
    provenance = dict(provenance or {})
    meta = _metadata_table(metadata, n)
    lifted = {}
    for name in PROVENANCE + ("char_range",):  # provenance given inside metadata is lifted out of it
        if name in meta.column_names:
            lifted[name] = meta[name]
            meta = meta.drop_columns([name])
    if "char_range" in lifted and provenance.get("char_range") is None:
        provenance["char_range"] = lifted.pop("char_range")
    cr = provenance.pop("char_range", None)
    if cr is not None:
        arr = _broadcast(cr, n, "char_range", pa.list_(pa.int64()))
        provenance.setdefault("char_start", pc.list_element(arr, 0))
        provenance.setdefault("char_end", pc.list_element(arr, 1))
    if provenance.get("pipeline_version") is None:
        provenance["pipeline_version"] = pipeline_version
    cols = {
        "id": ids, "doc_id": _broadcast(doc_ids, n, "doc_ids", pa.string()),
        "tenant": _broadcast(tenant, n, "tenant", pa.string()), "acl": _acl_column(acl, n),
        "text": _broadcast(texts, n, "texts", pa.string()),
        "display_text": _broadcast(display_texts, n, "display_texts", pa.string()),
    }
    for name in PROVENANCE:
        typ = ROW_SCHEMA.field(name).type
        cols[name] = _broadcast(provenance.get(name), n, name, typ)
        if name in lifted:  # per chunk: the keyword argument wins where it is given
            cols[name] = pc.coalesce(cols[name], _broadcast(lifted[name], n, name, typ))
    arrays = [cols[f.name] for f in ROW_SCHEMA]
    names = list(ROW_SCHEMA.names)
    for name in meta.column_names:
        arrays.append(meta[name])
        names.append(META + name)
    return pa.Table.from_arrays(arrays, names=names)


def vectors_from_column(col, name: str = "vector") -> np.ndarray:
    """(n, dim) float32 from a fixed_size_list column, zero-copy for one float32 chunk without nulls."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not pa.types.is_fixed_size_list(col.type):
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            raise TypeError(f"column {name!r} must be fixed_size_list<float32> (all rows one dimension), "
                            f"got {col.type}")
        raise TypeError(f"column {name!r} must be fixed_size_list<float32>, got {col.type}")
    if col.null_count:
        raise ValueError(f"column {name!r} has null vectors")
    dim = col.type.list_size
    values = col.flatten()  # respects the array's offset
    if values.null_count:
        raise ValueError(f"column {name!r} has null vector components")
    if values.type != pa.float32():
        values = values.cast(pa.float32())
    return values.to_numpy(zero_copy_only=True).reshape(len(col), dim)


def read_table(source) -> pa.Table:
    """A pyarrow Table from a Table, RecordBatch (or list of them), or a parquet path."""
    if isinstance(source, pa.Table):
        return source
    if isinstance(source, pa.RecordBatch):
        return pa.Table.from_batches([source])
    if isinstance(source, (list, tuple)) and source and all(isinstance(b, pa.RecordBatch) for b in source):
        return pa.Table.from_batches(list(source))
    import os

    if isinstance(source, (str, os.PathLike)):
        import pyarrow.parquet as pq

        return pq.read_table(source, memory_map=True)
    raise TypeError(f"add_table takes a pyarrow Table, RecordBatch or parquet path, got {type(source).__name__}")
