"""sync_pg: keeps a collection made by import_pg up to date with its table.

One REPEATABLE READ snapshot of the table per run:
  1. the new watermark is max(--updated COL);
  2. rows with COL >= the stored watermark are upserted (>= and not >: a row
     committed later with the same timestamp as the previous watermark is not
     missed; re-adding a row is harmless), or deleted when --deleted COL is true
     or their vector is NULL;
  3. ids gone from the table are found by an anti-join of the collection's ids
     with the table's id column (streamed with COPY) and deleted;
  4. one commit stores the rows and the new watermark together.
Running it twice changes nothing the second time. Readers keep searching the
previous commit until they refresh(); a crash before the commit leaves the
collection as it was, and the next run redoes the same work.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import vecsift
from vecsift.integrations.postgres import source
from vecsift.integrations.postgres.source import Mapping, PgImportError, Query
from vecsift.integrations.postgres.state import commit_state, read_state
from vecsift.tools.progress import progress_bar


@dataclass
class SyncReport:
    upserted: int
    deleted: int
    removed_missing: int
    watermark: str | None
    seconds: float


def sync_pg(dsn, out, *, updated=None, deleted=None, remove_missing: bool = True, batch_rows: int = 50_000,
            progress: bool = True) -> SyncReport:
    """Brings the collection at `out` up to date with the table it was imported from.

    updated / deleted: column names (remembered from the import or a previous sync when omitted).
    remove_missing: delete chunks whose id is no longer in the table (the anti-join)."""
    t0 = time.perf_counter()
    coll = vecsift.open(out)
    try:
        state = read_state(coll)
        if not state or not state.get("import", {}).get("done"):
            raise PgImportError(f"{out} is not a finished import-pg collection (run import-pg first)")
        mapping = Mapping.from_dict(state["mapping"])
        mapping.updated = updated or mapping.updated
        mapping.deleted = deleted or mapping.deleted
        if not mapping.updated:
            raise PgImportError("sync needs --updated COL (a column set to now() on every change)")
        conn = source.connect(dsn)
        try:
            desc = source.describe(conn, mapping)
            q = Query(desc)
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            ucol = source._ident(mapping.updated)
            new_wm = conn.execute(f"SELECT max({ucol})::text FROM {mapping.table}").fetchone()[0]
            old_wm = state.get("watermark")
            extra, params = [], []
            if old_wm is not None:
                extra.append(f"{ucol} >= %s::{desc.types[mapping.updated][0]}")
                params.append(old_wm)
            upserted = removed = 0
            bar = progress_bar(desc=f"sync {mapping.table}", unit="rows", disable=not progress)
            try:
                for fields in source.stream(conn, q.sql(extra, order=False), params, len(q.columns), batch_rows):
                    batch = q.decode(fields, coll.dim, "skip")
                    gone = fields.text(0).filter(pa.array(fields.nulls(1)))  # a NULL vector: out of the index
                    if "deleted" in batch:
                        flag = batch["deleted"].to_numpy(zero_copy_only=False)
                        gone = pa.concat_arrays([gone, batch["ids"].filter(batch["deleted"])])
                        batch = _take(batch, ~flag)
                    if len(batch["ids"]):
                        coll.add(batch["ids"], batch["vectors"], texts=batch.get("texts"),
                                 tenant=batch.get("tenant"), acl=batch.get("acl"), metadata=batch.get("metadata"))
                        upserted += len(batch["ids"])
                    if len(gone):
                        removed += coll.delete(ids=gone.to_pylist())
                    bar.update(fields.n)
                missing = _missing_ids(conn, coll, mapping, batch_rows) if remove_missing else []
            finally:
                bar.close()
            conn.commit()
        finally:
            conn.close()
        gone_missing = coll.delete(ids=missing) if len(missing) else 0
        state["mapping"] = mapping.to_dict()
        state["watermark"] = new_wm if new_wm is not None else old_wm
        commit_state(coll, state)
    finally:
        coll.close()
    return SyncReport(upserted, removed, gone_missing, state["watermark"], time.perf_counter() - t0)


def _take(batch: dict, keep: np.ndarray) -> dict:
    mask = pa.array(keep)
    out = {}
    for k, v in batch.items():
        if k == "vectors":
            out[k] = v[keep]
        elif isinstance(v, (pa.Array, pa.Table)):
            out[k] = v.filter(mask)
        else:
            out[k] = v
    return out


def _missing_ids(conn, coll, mapping: Mapping, batch_rows: int) -> list:
    """Ids in the collection and not in the table: the table's id column streamed in batches, one set test."""
    sql = f"SELECT {source._ident(mapping.id)}::text FROM {mapping.table}"
    if mapping.where:
        sql += f" WHERE ({mapping.where})"
    if mapping.deleted:
        sql += (" AND " if mapping.where else " WHERE ") + f"{source._ident(mapping.deleted)} IS NOT TRUE"
    parts = [f.text(0) for f in source.stream(conn, sql, [], 1, max(batch_rows, 200_000))]
    table_ids = pa.concat_arrays(parts) if parts else pa.array([], pa.string())
    have = pa.array(coll.ids(), pa.string())
    if not len(have):
        return []
    return have.filter(pc.invert(pc.is_in(have, value_set=table_ids))).to_pylist()
