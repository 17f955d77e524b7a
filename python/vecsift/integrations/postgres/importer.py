"""import_pg: a pgvector table into a new vecsift collection, resumable.

Rows are read in id order with one binary COPY and added in batches; every
`commit_rows` rows the collection commits together with the last id it holds
(state.py), so an import that is interrupted (killed, connection lost) resumes
after that id when run again with the same --out. With --updated COL the
largest value of COL at the start becomes the watermark sync_pg continues from.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import vecsift
from vecsift.integrations.postgres import source
from vecsift.integrations.postgres.source import Mapping, PgImportError, Query
from vecsift.integrations.postgres.state import commit_state, read_state
from vecsift.tools.progress import progress_bar


@dataclass
class ImportReport:
    rows: int
    skipped_null_vectors: int
    seconds: float
    resumed_after: str | None = None
    watermark: str | None = None

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def import_pg(dsn, table: str, *, id: str, vector: str, out, text=None, tenant=None, acl=None,  # noqa: A002
              metadata=(), where=None, updated=None, deleted=None, null_vectors: str = "skip",
              batch_rows: int = 50_000, commit_rows: int = 200_000, metric=None, index: str = "hnsw",
              filter_fields=None, progress: bool = True, **index_params) -> ImportReport:
    """Copies `table` into the collection at `out` (created, or resumed if an earlier import stopped).

    dsn: a libpq connection string or URI; None/"" uses the PG* environment variables.
    metadata: columns whose values become chunk metadata (a json/jsonb column contributes its keys).
    filter_fields: fields usable in where= (default: every metadata column, and tenant-free keys of
    json columns found in the first batch). null_vectors: "skip" (dropped and counted) or "error".
    metric: default from the column's pgvector index operator class, else cosine.
    """
    if null_vectors not in ("skip", "error"):
        raise ValueError(f"null_vectors must be 'skip' or 'error', got {null_vectors!r}")
    if isinstance(metadata, str):
        metadata = [m for m in metadata.split(",") if m]
    mapping = Mapping(table, id, vector, text, tenant, acl, list(metadata), where, updated, deleted)
    t0 = time.perf_counter()
    conn = source.connect(dsn)
    coll = last_id = watermark = None
    try:
        desc = source.describe(conn, mapping)
        q = Query(desc)
        coll, state = _open_or_none(out, mapping)
        resume = state.get("import", {}).get("last_id") if state else None
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")  # one snapshot: watermark + rows
        watermark = state.get("watermark") if state else None
        if updated and not resume:
            row = conn.execute(f"SELECT max({source._ident(updated)})::text FROM {table}").fetchone()
            watermark = row[0]
        extra, params = [], []
        if resume is not None:
            extra.append(f"{source._ident(id)} > %s::{_cast_type(desc, id)}")
            params.append(resume)
        if deleted:
            extra.append(f"{source._ident(deleted)} IS NOT TRUE")
        total = source.count(conn, q, extra, params)
        dim = coll.dim if coll is not None else desc.dim
        rows = skipped = since_commit = 0
        last_id = resume
        bar = progress_bar(total=total, desc=f"import {table}", unit="rows", disable=not progress)
        try:
            for fields in source.stream(conn, q.sql(extra, order=True), params, len(q.columns), batch_rows):
                if dim is None:
                    dim = source.first_dim(fields)
                batch = q.decode(fields, dim, null_vectors)
                skipped += batch["skipped"]
                n = len(batch["ids"])
                if n:
                    if coll is None:
                        coll = _create(out, dim, metric or desc.metric or "cosine", index, filter_fields,
                                       batch, mapping, index_params)
                    _add(coll, batch)
                if fields.n:
                    last_id = fields.text(0)[fields.n - 1].as_py()  # everything up to here is added
                rows += n
                since_commit += n
                bar.update(fields.n)
                if since_commit >= commit_rows and coll is not None:
                    commit_state(coll, _state(mapping, watermark, last_id, False))
                    since_commit = 0
        finally:
            bar.close()
        conn.commit()
        if coll is None:  # an empty table (or all NULL vectors): an empty collection still records the mapping
            if dim is None:
                raise PgImportError(f"table {table!r} has no rows with a vector; nothing to size a collection by")
            coll = _create(out, dim, metric or desc.metric or "cosine", index, filter_fields, None, mapping,
                           index_params)
        commit_state(coll, _state(mapping, watermark, last_id, True))
    except BaseException:
        if coll is not None and last_id is not None:  # commit what was added, saying up to where
            try:
                commit_state(coll, _state(mapping, watermark, last_id, False))
            except Exception:  # noqa: BLE001 - the first error is the one to report
                pass
        raise
    finally:
        conn.close()
        if coll is not None:
            coll.close()
    return ImportReport(rows, skipped, time.perf_counter() - t0, resume, watermark)


def _cast_type(desc, col) -> str:
    typ = desc.types[col][0]
    return typ if typ.isidentifier() else "text"


def _state(mapping: Mapping, watermark, last_id, done: bool) -> dict:
    return {"mapping": mapping.to_dict(), "watermark": watermark,
            "import": {"last_id": None if done else last_id, "done": done}}


def _open_or_none(out, mapping: Mapping):
    if not os.path.exists(os.path.join(os.fspath(out), "MANIFEST")):
        return None, None
    coll = vecsift.open(out)
    state = read_state(coll)
    if not state:
        coll.close()
        raise PgImportError(f"{out} holds a collection that import-pg did not make; choose another --out")
    if state["mapping"].get("table") != mapping.table:
        coll.close()
        raise PgImportError(f"{out} was imported from table {state['mapping'].get('table')!r}, not {mapping.table!r}")
    if state.get("import", {}).get("done"):
        coll.close()
        raise PgImportError(f"{out} is a finished import; use sync-pg to follow the table")
    return coll, state


def _create(out, dim, metric, index, filter_fields, batch, mapping, index_params):
    if filter_fields is None:
        fields = []
        if batch is not None and "metadata" in batch:
            fields = list(batch["metadata"].column_names)
        filter_fields = fields
    return vecsift.Collection.create(out, int(dim), metric=metric, index=index, filter_fields=list(filter_fields),
                                     **index_params)


def _add(coll, batch) -> None:
    coll.add(batch["ids"], batch["vectors"], texts=batch.get("texts"), tenant=batch.get("tenant"),
             acl=batch.get("acl"), metadata=batch.get("metadata"))
