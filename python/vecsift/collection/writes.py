"""Writes staged between commits: turning add / add_table arguments into a chunk batch, the filter
keys of a batch, and the rows an id or doc_id names (for replacements and deletes)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from vecsift._arrays import as_vectors
from vecsift.collection.filters import as_keys, bitmap_of
from vecsift.collection.ingest import META, PROVENANCE, build_batch, check_ids, read_table, vectors_from_column


class Staged:
    """What was added or deleted since the last commit."""

    def __init__(self, schema: pa.Schema):
        self.pending: list[pa.Table] = []  # chunk batches added, in order
        self.replaced = BitMap()  # committed rows whose id was added again
        self.dirty = False  # deletes or settings to commit
        self.schema = schema  # of the committed chunks and the pending ones

    @property
    def empty(self) -> bool:
        return not self.pending and not self.replaced and not self.dirty

    def clear(self) -> None:
        self.pending, self.replaced, self.dirty = [], BitMap(), False


def check_model(model, expected) -> None:
    if model is not None and expected is not None and model != expected:
        raise ValueError(f"model {model!r} differs from the collection's model {expected!r}")


def batch_of_add(ids, vectors, dim, pipeline_version, texts=None, doc_ids=None, tenant=None, acl=None,
                 metadata=None, display_texts=None, **provenance):
    """(chunk batch, float32 vectors) of Collection.add's arguments."""
    ids = check_ids(ids)
    vecs = as_vectors(vectors, "vectors", dim=dim)
    if len(vecs) != len(ids):
        raise ValueError(f"{len(ids)} ids but {len(vecs)} vectors")
    batch = build_batch(ids, len(ids), texts=texts, display_texts=display_texts, doc_ids=doc_ids, tenant=tenant,
                        acl=acl, metadata=metadata, provenance=provenance, pipeline_version=pipeline_version)
    return batch, vecs


def batch_of_table(table, dim, pipeline_version):
    """(chunk batch, float32 vectors) of Collection.add_table's table."""
    table = read_table(table)
    for need in ("id", "vector"):
        if need not in table.column_names:
            raise ValueError(f"add_table: missing column {need!r}")
    vecs = vectors_from_column(table["vector"])
    if vecs.shape[1] != dim:
        raise ValueError(f"vectors have dimension {vecs.shape[1]}, expected {dim}")
    vecs = as_vectors(vecs, "vectors", dim=dim)
    ids = check_ids(table["id"])
    if len(vecs) != len(ids):
        raise ValueError(f"{len(ids)} ids but {len(vecs)} vectors")
    col = lambda name: table[name] if name in table.column_names else None  # noqa: E731
    known = {"id", "vector", "text", "texts", "display_text", "doc_id", "tenant", "acl", "char_range", *PROVENANCE}
    meta = table.select([c for c in table.column_names if c not in known])
    prov = {p: col(p) for p in PROVENANCE}
    prov["char_range"] = col("char_range")
    if prov.get("pipeline_version") is None:
        prov.pop("pipeline_version")
    batch = build_batch(ids, len(ids), texts=col("text") if col("text") is not None else col("texts"),
                        display_texts=col("display_text"), doc_ids=col("doc_id"), tenant=col("tenant"),
                        acl=col("acl"), metadata=meta if meta.num_columns else None, provenance=prov,
                        pipeline_version=pipeline_version)
    return batch, vecs


def field_column(batch: pa.Table, name: str):
    if name in PROVENANCE:
        return batch[name]
    if META + name in batch.column_names:
        return batch[META + name]
    return pa.nulls(batch.num_rows, pa.string())


def filter_keys(batch: pa.Table, filter_fields) -> dict:
    """The keys of each filter field for the rows of batch (filters.Filters.add_rows)."""
    fields = {}
    for f in filter_fields:
        try:
            fields[f] = as_keys(field_column(batch, f))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise TypeError(f"filter field {f!r}: values must be scalars: {exc}") from None
    return fields


def rows_where(tables, column: str, values, hidden: BitMap) -> BitMap:
    """Rows of `tables` (committed then pending) whose `column` is in values, minus `hidden`: one pass."""
    if not tables or len(values) == 0:
        return BitMap()
    col = pa.chunked_array([c for t in tables for c in t[column].chunks], type=pa.string())
    hit = pc.is_in(col, value_set=pa.array(values, type=pa.string()) if not isinstance(values, pa.Array)
                   else values).to_numpy(zero_copy_only=False)
    return bitmap_of(np.flatnonzero(hit)) - hidden
