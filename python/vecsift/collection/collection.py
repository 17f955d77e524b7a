"""Collection: the engine users embed. A directory of vectors, chunks and filters.

Files of a collection directory (all named by the MANIFEST, storage/manifest.py):

    vectors-G.f32    append-only float32 rows, read through numpy.memmap (storage/rowfile.py)
    codes-G.bin      append-only binary codes (index="bq", bits=None and older collections), held in RAM
    codes-G.q        append-only quantised codes + factors (index="bq", bits=1/2/4/8), held in RAM
    quant-G.vsq      the quantised codes' model: rotation, centroid (stages/quant_dense.py)
    hnsw-G.idx       the graph (index="hnsw"), rewritten at each commit
    seg-G.arrow      Arrow IPC file of the chunks added by commit G (ids, texts,
                     tenant, acl, provenance, metadata), memory-mapped (storage/segment.py)
    filters-G.bin    roaring bitmaps (tenants, groups, filter fields, deleted)
    bm25-G.bin       BM25 postings of the indexed texts (stages/sparse.py), rewritten at
                     each commit that changed them

This module is the facade: lifecycle, locks and the state it swaps. What it is
made of: snapshot.py (the immutable state a search runs on, and the public read
API), search.py (the cascade: allow set, dense / BM25 candidate lists, RRF),
writes.py (add / add_table / delete staging), commit.py (the one commit
sequence of create, commit and compact), compaction.py.

Consistency model. A search runs on a snapshot: the rows of the last commit,
minus every row deleted so far (a delete() hides rows at once, and is made
durable by the next commit). Rows added since the last commit are invisible to
search until commit() returns, and so is the replacement of a re-added id: the
old chunk stays visible until the commit that brings the new one. A snapshot is
an immutable object swapped in by reference, so searches from any number of
threads see one consistent state while one thread adds, deletes, commits or
compacts; they never see a row that a crash could lose or a deleted row.

Writes are serialised by one lock; index mutation (codes appended at publish,
graph inserts) is exclusive against running native searches through a
readers-writer lock, and searches clip to their snapshot with an allow set
whenever the index holds rows the snapshot does not.
"""
from __future__ import annotations

import glob
import os
import threading
import time

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from vecsift._arrays import as_vectors, check_k, unit_rows
from vecsift.collection import audit as auditing, embedders
from vecsift.collection import search as cascade
from vecsift.collection.commit import write_commit
from vecsift.collection.compaction import compact_files
from vecsift.collection.filters import Filters, rows_of
from vecsift.collection.hits import HitBuilder
from vecsift.collection.limits import DEADLINE_CHUNK, Limits, as_limits, deadline_of
from vecsift.collection.pgvocab import metric_name, resolve_ef
from vecsift.collection.rwlock import RWLock
from vecsift.collection.snapshot import Snapshot, empty_snapshot, take_snapshot
from vecsift.collection.stages.dense import KINDS
from vecsift.collection.stages.sparse import BM25Sparse, indexed_texts
from vecsift.collection.writes import Staged, batch_of_add, batch_of_table, check_model, filter_keys, rows_where
from vecsift.errors import CorruptIndexError, VecsiftError
from vecsift.index.flat import check_metric
from vecsift.storage import fileops
from vecsift.storage import manifest as manifests
from vecsift.storage.framing import FORMAT_VERSION, WriterLock, read_blob
from vecsift.storage.checksum import value_of
from vecsift.storage.manifest import Manifest, check_payload
from vecsift.storage.rowfile import RowFile
from vecsift.storage.segment import read_segment

_PATTERNS = ("vectors-*.f32", "sums-*.bin", "codes-*.bin", "codes-*.q", "quant-*.vsq", "hnsw-*.idx", "seg-*.arrow", "filters-*.bin", "bm25-*.bin", "*.tmp")
MODES = cascade.MODES


def _concat(tables) -> pa.Table:
    if not tables:
        from vecsift.collection.ingest import ROW_SCHEMA

        return ROW_SCHEMA.empty_table()
    return pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]


def _load(path, m: Manifest, writable):
    """The files of manifest m, opened and checked: (rowfile, dense, sparse, filters, segment tables)."""
    if m.vectors["rows"] != m.rows:
        raise CorruptIndexError(f"{os.path.join(path, 'MANIFEST')}: row counts disagree")
    vec = RowFile.open_entry(path, m.vectors, "vectors", "float32", m.dim, writable)
    dense = None
    try:  # a refused open closes what it opened: a caller retrying it must not run out of descriptors
        dense = KINDS[m.index].load(path, m.dense, m.dim, m.metric, m.index_params, writable)
        sparse = BM25Sparse.load(path, m.sparse, m.sparse_params)
        fpath = os.path.join(path, m.filters["file"])
        filters = Filters.from_bytes(read_blob(fpath, "filters", m.filters), fpath)
        tables = [_checked_segment(os.path.join(path, s["file"]), s) for s in m.segments]
        try:
            _concat(tables)  # segments whose metadata columns cannot be combined
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise CorruptIndexError(f"{path}: chunk segments do not combine: {exc}") from None
        if sum(t.num_rows for t in tables) != m.rows or dense.size != m.rows:
            raise CorruptIndexError(f"{os.path.join(path, 'MANIFEST')}: files hold a different number of rows")
    except BaseException:
        vec.close()
        if dense is not None:
            dense.close()
        raise
    return vec, dense, sparse, filters, tables


def _checked_segment(path, entry) -> pa.Table:
    """read_segment, refusing a table whose chunk columns (ingest.ROW_SCHEMA) lack "id" or have other
    types: hits and id lookups index them without further checks."""
    from vecsift.collection.ingest import ROW_SCHEMA

    table = read_segment(path, entry)
    if len(set(table.column_names)) != table.num_columns:
        raise CorruptIndexError(f"{path}: not a chunk segment (a column name repeats)")
    for field in ROW_SCHEMA:
        i = table.schema.get_field_index(field.name)
        if (i < 0 and field.name == "id") or (i >= 0 and table.schema.field(i).type != field.type):
            raise CorruptIndexError(f"{path}: not a chunk segment (column {field.name!r} missing or retyped)")
    return table


def _load_newest(path, writable, retry):
    """(manifest, files) of the newest commit; a reader racing a writer that just replaced files
    retries on the newer manifest."""
    for attempt in range(5):
        m = manifests.read(path)
        try:
            return m, _load(path, m, writable)
        except CorruptIndexError:
            if retry and attempt < 4 and manifests.read(path).generation != m.generation:
                continue
            raise


class Collection:
    """A persistent, filtered vector collection. Create with Collection.create, reopen with vecsift.open."""

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def create(cls, path, dim: int | None = None, metric: str = "cosine", index: str = "bq",
               model: str | None = None, pipeline_version: str | None = None, filter_fields=(),
               index_heading_path: bool = False, bm25_k1: float = 1.2, bm25_b: float = 0.75, *, embedder=None,
               audit=None, limits=None, **index_params) -> "Collection":
        """Creates an empty collection in directory `path` (new or empty) and opens it for writing.

        filter_fields: metadata/provenance fields usable in search(where=...).
        index_heading_path: BM25 indexes "heading path\n" + text; embed the same
        string upstream (Collection.text_for_embedding builds it).
        embedder: see set_embedder; dim and model default to the embedder's.
        audit: see set_audit.
        limits: a vecsift.collection.Limits or a dict of overrides (bounds on k, batch size, where=...,
        docs/limits.md), recorded in the manifest.
        """
        limits = as_limits(limits)
        embedder, dim, model = embedders.for_create(embedder, dim, model)
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        metric = check_metric(metric_name(metric))  # pgvector spellings (<=>, vector_cosine_ops) too
        if index not in KINDS:
            raise ValueError(f"index must be one of {sorted(KINDS)}, got {index!r}")
        if isinstance(filter_fields, str):
            filter_fields = [filter_fields]
        filter_fields = [str(f) for f in filter_fields]
        params = KINDS[index].params(index_params)
        audit_settings = auditing.normalise(audit)
        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        if os.path.exists(os.path.join(path, "MANIFEST")):
            raise FileExistsError(f"{path} already holds a collection; use vecsift.open")
        lock = WriterLock(path)
        try:
            vec = RowFile.create(os.path.join(path, "vectors-0.f32"), "vectors", "float32", dim)
            dense = KINDS[index].create(path, 0, int(dim), metric, params)
            filters = Filters(filter_fields)
            sparse_params = {"k1": float(bm25_k1), "b": float(bm25_b)}
            sparse = BM25Sparse.create(sparse_params)
            m = Manifest(dim=int(dim), metric=metric, index=index, index_params=params, model=model,
                         pipeline_version=pipeline_version, filter_fields=filter_fields, created=time.time(),
                         index_heading_path=bool(index_heading_path), sparse_params=sparse_params,
                         sparse=sparse.prepare_commit(path, 0),
                         vectors=vec.entry(),
                         dense=dense.prepare_commit(path, 0, vec.view(0)), format=FORMAT_VERSION,
                         audit=audit_settings, limits=limits.to_dict())
            m, _ = write_commit(path, m, filters)
        except BaseException:
            lock.release()
            raise
        self = cls.__new__(cls)
        self._init(path, m, vec, dense, sparse, filters, [], lock)
        self._embedder = embedder
        return self

    @classmethod
    def open(cls, path, readonly: bool = False, embedder=None) -> "Collection":
        """Opens a collection; readonly=True takes no lock and refuses writes (any number of readers).
        embedder: see set_embedder."""
        path = os.fspath(path)
        lock = None if readonly else WriterLock(path)
        try:
            m, parts = _load_newest(path, writable=not readonly, retry=readonly)
            self = cls.__new__(cls)
            try:
                self._init(path, m, *parts, lock)
            except BaseException:
                parts[0].close()
                parts[1].close()
                raise
            if embedder is not None:
                self.set_embedder(embedder)
            if not readonly:
                self._remove_unreferenced()
        except BaseException:
            if lock:
                lock.release()
            raise
        return self

    def _init(self, path, m, vec, dense, sparse, filters, tables, lock):
        self._path = path
        self._lock = lock
        self._closed = False
        self._embedder = None
        self._limits = None  # set_limits on a readonly collection: this process only
        self._one = None  # search()'s single-query fast path for the current snapshot (_one_query)
        self._wlock = threading.RLock()
        self._rw = RWLock()
        self._swap(m, vec, dense, sparse, filters, tables)
        self._staged = Staged(self._table.schema)
        self._publish()

    def _swap(self, m, vec, dense, sparse, filters, tables) -> None:
        """Takes the files of a commit as the current state (the caller publishes a snapshot)."""
        dense.lock = self._rw
        self._manifest, self._vec, self._dense, self._sparse, self._filters = m, vec, dense, sparse, filters
        self._use_tables(tables)

    def refresh(self) -> bool:
        """Readonly collections: picks up a newer commit of the writer (True if one was loaded).

        Searches already running finish on the snapshot they started with."""
        if self._closed:
            raise VecsiftError("the collection is closed")
        if self._lock is not None:
            return False  # the writer's own state is always the newest
        if manifests.read(self._path).generation == self._manifest.generation:
            return False
        m, parts = _load_newest(self._path, writable=False, retry=True)
        if m.generation == self._manifest.generation:
            parts[0].close()
            parts[1].close()
            return False
        old_vec, old_dense = self._vec, self._dense
        self._swap(m, *parts)
        self._staged.schema = self._table.schema
        self._publish()
        old_vec.close()
        old_dense.close()
        return True

    def _use_tables(self, tables) -> None:
        """The committed chunk segments, their concatenation and its HitBuilder (kept until the next commit)."""
        self._tables = tables
        self._table = _concat(tables)
        self._hits_of = HitBuilder(self._table)

    def _publish(self) -> None:
        """Swaps in a new snapshot of the committed rows and current deletes."""
        m = self._manifest
        self._snap = take_snapshot(m.rows, m.dim, m.metric, self._vec, self._dense, self._sparse, self._filters,
                                   self._hits_of, m.search_defaults, self._rw)

    def snapshot(self) -> Snapshot:
        """The state searches run on now (immutable; see collection/snapshot.py for its read API)."""
        if self._closed:
            raise VecsiftError("the collection is closed")
        return self._snap

    @property
    def embedder(self):
        """The embedder add(texts=...) and search(text=...) use when no vectors are given (or None)."""
        return self._embedder

    def set_embedder(self, embedder) -> None:
        """Attaches an embedder: a callable texts -> (n, dim) vectors with .name and .dim (see
        collection/embedders.py). Refused unless its dimension, and its name where the manifest
        records a model, are the collection's. None detaches."""
        if embedder is not None:
            embedder = embedders.as_embedder(embedder)
            embedders.check_against(embedder, self.model, self.dim)
        self._embedder = embedder

    @auditing.audited("get")
    def get(self, ids, tenant=None, groups=None, *, with_vectors: bool = False):
        """Chunks by id as Hits (score nan), in the order of ids, None for an id that is missing or not
        visible to tenant / groups (the allow set a search would use); with_vectors=True returns
        (hits, (len(ids), dim) float32 stored vectors, NaN rows where missing)."""
        from vecsift.collection.lookup import get_chunks

        snap = self._snap
        return get_chunks(snap, self._allow(snap, tenant, groups, None), ids, with_vectors)

    @property
    def readonly(self) -> bool:
        return self._lock is None

    def _writable(self):
        if self._closed:
            raise VecsiftError("the collection is closed")
        if self._lock is None:
            raise VecsiftError("the collection was opened readonly")

    def commit(self, payload: dict | None = None) -> None:
        """Makes every add and delete since the last commit durable and searchable (atomic).

        payload: a small JSON dict (at most 64 KiB serialised) stored in the manifest with this
        commit, replacing the previous one (e.g. a sync watermark); read it back with .payload.
        """
        self._writable()
        if payload is not None:
            payload = check_payload(payload)
        with self._wlock:
            st = self._staged
            if st.empty and payload is None:
                return
            old = self._manifest
            gen = old.generation + 1
            total = self._vec.rows
            self._vec.sync()
            m = old.replace(generation=gen, rows=total,
                            vectors=self._vec.entry(),
                            dense=self._dense.prepare_commit(self._path, gen, self._vec.view(total, sequential=True)),
                            payload=old.payload if payload is None else payload)
            seg = _concat(st.pending) if st.pending else None
            if seg is not None:
                self._sparse.add_rows(old.rows, indexed_texts(seg, self.index_heading_path))
            if st.replaced:
                self._filters.delete(st.replaced)
                self._sparse.delete(rows_of(st.replaced))
            m = m.replace(sparse=self._sparse.prepare_commit(self._path, gen))
            m, table = write_commit(self._path, m, self._filters, seg)
            self._manifest = m
            with self._rw.write():
                self._dense.publish()
            self._use_tables(self._tables + ([table] if table is not None else []))
            st.clear()
            self._publish()
            self._remove_files(old, m)

    def _files(self, m: Manifest) -> set:
        return m.files() | set(self._dense.files(m.dense)) if m.dense else m.files()

    def _remove_files(self, old, new) -> None:
        keep = self._files(new)
        for name in self._files(old) - keep:
            fileops.unlink(os.path.join(self._path, name), missing_ok=True)

    def _remove_unreferenced(self) -> None:
        """Deletes what a crashed writer left behind (files no manifest names)."""
        keep = self._files(self._manifest)
        for pattern in _PATTERNS:
            for p in glob.glob(os.path.join(glob.escape(self._path), pattern)):
                if os.path.basename(p) not in keep:
                    fileops.unlink(p, missing_ok=True)

    def close(self) -> None:
        """Commits (when opened for writing), writes queued audit records, releases the writer lock."""
        if self._closed:
            return
        try:
            if self._lock is not None:
                self.commit()
            auditing.close_log(self)
        finally:
            self._closed = True
            # drop the snapshot so the float32 mapping goes once no search holds it
            self._snap = empty_snapshot(self.dim, self.metric, self._dense, self._sparse, _concat([]))
            self._table = self._tables = self._hits_of = None
            self._vec.close()
            self._dense.close()
            if self._lock is not None:
                self._lock.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ properties
    @property
    def path(self) -> str:
        return self._path

    @property
    def manifest(self) -> Manifest:
        """The manifest of the last commit (immutable)."""
        return self._manifest

    @property
    def payload(self) -> dict:
        """The user payload stored by the last commit(payload=...) (a copy)."""
        return check_payload(self._manifest.payload)

    @property
    def dim(self) -> int:
        return self._manifest.dim

    @property
    def metric(self) -> str:
        return self._manifest.metric

    @property
    def index(self) -> str:
        return self._manifest.index

    @property
    def index_params(self) -> dict:
        return dict(self._manifest.index_params)

    @property
    def model(self):
        return self._manifest.model

    @property
    def pipeline_version(self):
        return self._manifest.pipeline_version

    @property
    def index_heading_path(self) -> bool:
        return bool(self._manifest.index_heading_path)

    def text_for_embedding(self, texts, heading_path=None) -> list:
        """The strings to embed so the vectors match what BM25 indexes (heading path + text
        when the collection was created with index_heading_path=True)."""
        from vecsift.collection.ingest import build_batch, check_ids

        texts = list(texts)
        batch = build_batch(check_ids([str(i) for i in range(len(texts))]), len(texts), texts=texts,
                            provenance={"heading_path": heading_path})
        return indexed_texts(batch, self.index_heading_path).to_pylist()

    @property
    def filter_fields(self) -> list:
        return list(self._manifest.filter_fields)

    @property
    def filter_kinds(self) -> dict:
        """{filter field: "number" | "datetime" | "string" | "bool" | None (no value yet)}."""
        return self._snap.filters.kinds

    def __len__(self) -> int:
        """Searchable chunks: committed and not deleted."""
        return len(self._snap.live)

    def ids(self) -> list:
        """Ids of the searchable chunks, in row order."""
        snap = self._snap
        return snap.table["id"].take(pa.array(rows_of(snap.live))).to_pylist() if snap.n else []

    def set_search_defaults(self, ef=None, oversample=None) -> None:
        """Stores the default ef (hnsw) / oversample (bq) searches use; durable at the next commit."""
        self._writable()
        with self._wlock:
            d = dict(self._manifest.search_defaults)
            for name, v in (("ef", ef), ("oversample", oversample)):
                if v is not None:
                    if isinstance(v, bool) or int(v) != v or v < 1:
                        raise ValueError(f"{name} must be a positive integer, got {v!r}")
                    d[name] = int(v)
            self._manifest = self._manifest.replace(search_defaults=d)
            self._staged.dirty = True
            self._publish()

    def set_audit(self, settings=True) -> None:
        """Turns the audit log on (True, or a dict of settings: max_bytes, keep, record_query, flush_ms,
        fsync; see collection/audit.py and docs/audit.md) or off (False / None). It applies at once to
        this object's searches and, once committed, to every process that opens or refreshes the
        collection; commit() makes it durable."""
        self._writable()
        cfg = auditing.normalise(settings)
        with self._wlock:
            self._manifest = self._manifest.replace(audit=cfg)
            self._staged.dirty = True

    @property
    def limits(self) -> Limits:
        """The bounds searches are checked against (vecsift.collection.Limits, docs/limits.md)."""
        if self._limits is not None:
            return self._limits
        try:
            return Limits.from_dict(self._manifest.limits, strict=False)
        except ValueError as exc:
            raise CorruptIndexError(f"{self._path}/MANIFEST: bad limits: {exc}") from None

    def set_limits(self, limits=None, **changes) -> None:
        """Replaces the search bounds: a Limits, a dict of overrides, or keyword changes of the current
        ones (set_limits(max_k=50_000)). A writer records them in the manifest at the next commit; on a
        readonly collection they hold for this process only."""
        new = self.limits if limits is None else as_limits(limits)
        if changes:
            new = Limits.from_dict({**new.to_dict(), **changes})
        if self._lock is None:
            self._limits = new
            return
        self._writable()
        with self._wlock:
            self._manifest = self._manifest.replace(limits=new.to_dict())
            self._staged.dirty = True

    def info(self) -> dict:
        """What `vecsift info` prints: rows, deletes, model, index, bytes on disk and in RAM."""
        m, snap = self._manifest, self._snap
        disk = 0
        for name in self._files(m) | {"MANIFEST"}:
            try:
                disk += os.path.getsize(os.path.join(self._path, name))
            except FileNotFoundError:
                pass
        ram = getattr(getattr(snap.dense, "index", None), "nbytes", 0)
        return {"path": self._path, "rows": len(snap.live), "deleted": snap.n - len(snap.live),
                "generation": m.generation, "model": m.model, "pipeline_version": m.pipeline_version,
                "dim": m.dim, "metric": m.metric, "index": m.index, "index_params": m.index_params,
                "search_defaults": m.search_defaults, "filter_fields": m.filter_fields, "audit": m.audit,
                "has_tenants": snap.filters.has_tenants, "has_acl": snap.filters.has_acl,
                "bytes_on_disk": disk, "bytes_in_ram": int(ram), "float32_bytes_on_disk": snap.n * m.dim * 4}

    def verify(self) -> list:
        """Reads every file of the last commit and checks it against the manifest: float32 rows (whole-file
        and block checksums), codes / graph, chunk segments, filters, BM25. Raises CorruptIndexError naming
        the file (and rows); returns notes on what could not be checked (files written before a check existed)."""
        from vecsift.storage.verify import verify_files

        m = self._manifest
        v = m.vectors
        notes = self._vec.verify(v["rows"], value_of(v))
        self._dense.verify(self._path, m.dense)
        return notes + verify_files(self._path, m)

    # ------------------------------------------------------------------ writing
    def add(self, ids, vectors=None, texts=None, doc_ids=None, tenant=None, acl=None, metadata=None, *,
            display_texts=None, model=None, source=None, heading_path=None, char_range=None, date=None,
            version=None, doc_type=None) -> None:
        """Adds (or replaces, by id) chunks; searchable after commit().

        tenant: one name for all chunks or one per chunk. acl: one list of group
        names per chunk (a chunk with none is visible to nobody once the
        collection uses ACLs). metadata: a list of dicts or a dict of columns.
        Provenance (source, heading_path, char_range=(start, end), date, version,
        doc_type) may be given here, per chunk or for all, or inside metadata.
        vectors omitted: texts are embedded by the collection's embedder (set_embedder).
        """
        self._writable()
        check_model(model, self.model)
        if vectors is None:
            vectors = embedders.vectors_for_add(self, self._embedder, texts, heading_path)
        batch, vecs = batch_of_add(ids, vectors, self.dim, self.pipeline_version, texts=texts, doc_ids=doc_ids,
                                   tenant=tenant, acl=acl, metadata=metadata, display_texts=display_texts,
                                   source=source, heading_path=heading_path, char_range=char_range, date=date,
                                   version=version, doc_type=doc_type)
        self._add_batch(batch, vecs)

    def add_table(self, table, model=None) -> None:
        """Adds chunks from a pyarrow Table / RecordBatch / parquet path.

        Columns: id, vector (fixed_size_list<float32>), and optionally text,
        display_text, doc_id, tenant, acl (list<string>), the provenance fields
        (source, heading_path, char_start, char_end, date, version, doc_type);
        every other column is metadata.
        """
        self._writable()
        check_model(model, self.model)
        self._add_batch(*batch_of_table(table, self.dim, self.pipeline_version))

    def _add_batch(self, batch: pa.Table, vecs: np.ndarray) -> None:
        if self.metric == "cosine":  # stored unit length: cosine is then the inner product
            vecs = unit_rows(vecs)
        fields = filter_keys(batch, self.filter_fields)
        with self._wlock:
            self._writable()
            st = self._staged
            try:
                schema = pa.unify_schemas([st.schema, batch.schema], promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise TypeError(f"metadata types differ from earlier chunks: {exc}") from None
            replaced = self._rows_where("id", batch["id"])
            start = self._vec.rows
            self._vec.append(vecs)
            self._dense.stage(vecs)
            self._filters.add_rows(start, batch["tenant"].combine_chunks(), batch["acl"].combine_chunks(), fields)
            st.pending.append(batch)
            st.schema = schema
            st.replaced |= replaced

    def _rows_where(self, column: str, values) -> BitMap:
        """Live rows (committed or pending) whose `column` is in values."""
        return rows_where(self._tables + self._staged.pending, column, values,
                          self._filters.deleted | self._staged.replaced)

    def delete(self, ids=None, doc_ids=None) -> int:
        """Removes chunks by id and every chunk of the given documents from all search paths at once.

        Searches stop returning them immediately; commit() makes the delete durable.
        Returns the number of chunks removed.
        """
        self._writable()
        if ids is None and doc_ids is None:
            raise ValueError("delete needs ids=... or doc_ids=...")
        if isinstance(ids, str) or isinstance(doc_ids, str):
            raise TypeError("ids and doc_ids must be sequences of strings")
        with self._wlock:
            rows = BitMap()
            if ids is not None:
                rows |= self._rows_where("id", pa.array(list(ids), type=pa.string()))
            if doc_ids is not None:
                rows |= self._rows_where("doc_id", pa.array(list(doc_ids), type=pa.string()))
            if rows:
                self._filters.delete(rows)
                self._sparse.delete(rows_of(rows))
                self._staged.dirty = True
                self._publish()
            return len(rows)

    def compact(self) -> None:
        """Rewrites every file without the deleted rows (same atomic commit); rows are renumbered."""
        self._writable()
        with self._wlock:
            self.commit()
            snap = self._snap
            if snap.full:
                return
            self._remove_unreferenced()  # leftovers of a compaction that raised earlier
            done = compact_files(self._path, self._manifest, snap, self._filters, self._rw)
            old_manifest, old_vec, old_dense = self._manifest, self._vec, self._dense
            self._swap(done.manifest, done.vectors, done.dense, done.sparse, done.filters, [done.table])
            self._publish()  # running searches keep the old snapshot, files and index
            old_vec.close()
            old_dense.close()
            self._remove_files(old_manifest, done.manifest)

    # ------------------------------------------------------------------ searching
    def search(self, vector=None, text=None, k: int = 10, tenant=None, groups=None, where=None, *, mode=None,
               candidates: int = 100, rrf_k: float = 60, weights=None, ef=None, oversample=None,
               threads: int = 0, stats=None, ef_search=None, deadline=None) -> list:
        """Top-k chunks as Hits, best first.

        mode: "dense" (vector), "sparse" (BM25 over text) or "hybrid" (both,
        `candidates` from each, fused with reciprocal rank fusion rrf_k /
        weights=(dense, sparse)); omitted: hybrid when both are given, else the
        one given. tenant / groups / where make the allow set, computed before
        anything is scored and shared by both retrievers. Hit.score is the
        cosine / inner product / -squared L2 (dense), the BM25 score (sparse) or
        the RRF score (hybrid); dense_rank / sparse_rank are 1-based, None where
        that retriever did not return the chunk. stats: a vecsift.collection.SearchStats
        to add the dense stage's counters to (distances, hops, rows scanned exactly...).
        Hit.distance is the distance pgvector would report (dense only). ef_search:
        pgvector's name for ef. With an embedder attached, text without vector is
        embedded (so text alone runs hybrid) unless mode="sparse". deadline: seconds; DeadlineExceeded
        (a TimeoutError) once they have passed, checked between stages. Arguments beyond the
        collection's limits (k, candidates, text length, where= size...) raise LimitError (docs/limits.md).
        """
        if ef_search is not None:
            ef = resolve_ef(ef, ef_search)
        if text is None and tenant is None and groups is None and where is None and stats is None \
                and deadline is None and oversample is None and (mode is None or mode == "dense"):
            # One vector, no filter: the per-snapshot fast path (search.one_query), None when it does not apply.
            one = self._one
            if one is None or one[0] is not self._snap or one[1] is not self._manifest or one[2] is not self._limits:
                one = self._one = self._one_query()
            if one[3] is not None:
                hits = one[3](vector, k, ef, threads)
                if hits is not None:
                    return hits
        if isinstance(text, str):  # before an embedder spends time on it
            self.limits.check("text length", len(text), "max_text_chars")
        vector = embedders.query_vector(self._embedder, vector, text, mode)
        q = None
        if vector is not None:
            q = as_vectors(vector, "vector", dim=self.dim)
            if len(q) != 1:
                raise ValueError(f"search takes one vector, got {len(q)}; use search_batch")
        if text is not None and not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        return self._search(q, None if text is None else [text], k, tenant, groups, where, mode, candidates, rrf_k,
                            weights, ef, oversample, threads, stats, deadline)[0]

    def _one_query(self):
        """(snapshot, manifest, limits override, run or None, rows or None): the fast path of search()
        for them, and the same without Hits (run.rows, for _search_rows; None when audited). None
        while the collection is closed, or audits its searches with record_query (the general path
        records the query); an audited fast path queues the records the general path would write."""
        snap, m, lim = self._snap, self._manifest, self._limits
        run = rows = None
        if not self._closed:
            run = cascade.one_query(snap, self.limits)
            if run is not None:
                rows = None if m.audit else run.rows
                if m.audit:  # each call it serves queued as its record (audit.audited_one)
                    run = auditing.audited_one(self, m.audit, run)
        return snap, m, lim, run, rows

    def _search_rows(self, vector, k: int = 10, ef=None, threads: int = 0):
        """Internal, for a sharded collection's node actors (vecsift.distributed): search(vector, k,
        ef=, threads=) on its single-query fast path without making Hits, so that Hits are made only
        for the rows a node keeps of its shards. Returns (rows, scores, columns): lists, best first,
        padded with -1, and columns(rows, scores, dense_ranks) -> the fields of the Hits search() would
        return for some of those rows (HitBuilder.columns: one list per Hit field, read from the
        snapshot that was searched). None whenever search() would not serve the call on its fast
        path (tenants or ACLs, deleted rows, audited searches, an argument it does not take, bad
        input...): the caller then calls search(), which refuses, filters or raises as it does."""
        one = self._one
        if one is None or one[0] is not self._snap or one[1] is not self._manifest or one[2] is not self._limits:
            one = self._one = self._one_query()
        if one[4] is None:
            return None
        got = one[4](vector, k, ef, threads)
        if got is None:
            return None
        snap = one[0]
        hb, metric = snap.hits, snap.metric
        return got[0], got[1], lambda rl, sl, ranks: hb.columns(rl, sl, ranks, metric)

    def _search_part(self, k: int = 10, ef=None, threads: int = 0):
        """Internal, for node actors: (QuantPart, columns) to search this collection together with others
        in one native call (collection.parts.search_parts; columns as in _search_rows), or None whenever
        _search_rows would not serve search(vector, k, ef=, threads=) for reasons other than the vector,
        or the index is not a bq index rescored in float32."""
        one = self._one
        if one is None or one[0] is not self._snap or one[1] is not self._manifest or one[2] is not self._limits:
            one = self._one = self._one_query()
        if one[4] is None:
            return None
        make = getattr(one[3], "part", None)
        part = None if make is None else make(k, ef, threads)
        if part is None:
            return None
        snap = one[0]
        hb, metric = snap.hits, snap.metric
        return part, lambda rl, sl, ranks: hb.columns(rl, sl, ranks, metric)

    def search_batch(self, vectors=None, texts=None, k: int = 10, tenant=None, groups=None, where=None, *,
                     mode=None, candidates: int = 100, rrf_k: float = 60, weights=None, ef=None, oversample=None,
                     threads: int = 0, stats=None, ef_search=None, deadline=None) -> list:
        """search() for many queries (rows of `vectors` and/or items of `texts`), one filter for all.
        With a deadline the batch runs in chunks of DEADLINE_CHUNK queries, checked between them."""
        ef = resolve_ef(ef, ef_search)
        if texts is not None and not isinstance(texts, str):
            texts = list(texts)
            self.limits.check("batch size", len(texts), "max_batch")
            self.limits.check_request(len(texts), None, None, None, None, texts, False)
        vectors = embedders.query_vectors(self._embedder, vectors, texts, mode)
        q = None if vectors is None else as_vectors(vectors, "vectors", dim=self.dim)
        if texts is not None:
            if isinstance(texts, str):
                raise TypeError("texts must be a sequence of strings, got a single string")
            texts = list(texts)
            if q is not None and len(texts) != len(q):
                raise ValueError(f"{len(q)} vectors but {len(texts)} texts")
        return self._search(q, texts, k, tenant, groups, where, mode, candidates, rrf_k, weights, ef, oversample,
                            threads, stats, deadline)

    @auditing.audited("search_rows")
    def search_rows(self, vectors, k: int = 10, tenant=None, groups=None, where=None, ef=None, oversample=None,
                    threads: int = 0, stats=None, ef_search=None, deadline=None):
        """Dense search returning (rows int64, scores float32) arrays, pad -1 (for benchmarks)."""
        ef = resolve_ef(ef, ef_search)
        dl = deadline_of(deadline)
        snap = self._snap
        q = as_vectors(vectors, "vectors", dim=self.dim)
        req = cascade.request(q, None, k, "dense", ef=ef, oversample=oversample, threads=threads)
        self._check_limits(req)
        allow = self._allow(snap, tenant, groups, where)
        parts = [cascade.retrieve(snap, part, allow, stats, dl).dense for part in _chunks(req, dl, "filter")]
        if len(parts) == 1:
            return parts[0]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def bm25_statistics(self, texts, tenant=None, groups=None, where=None) -> list:
        """BM25 statistics of each text's terms within the rows this filter allows (the allow set
        search() makes, tenant and ACL rules included): one dict per text,
        {"n": rows, "total_len": their summed lengths, "df": {term: rows containing it}}.

        A sharded collection sums these over its shards and passes the sums to
        search_sparse(statistics=...): BM25 scores then equal one collection's over all rows."""
        texts = _text_list(texts)
        self.limits.check_request(len(texts), None, None, None, None, texts, False)
        snap = self._snap
        allow = self._allow(snap, tenant, groups, where)
        return [snap.sparse.term_statistics(t, allow) for t in texts]

    @auditing.audited("search_sparse")
    def search_sparse(self, texts, statistics=None, k: int = 10, tenant=None, groups=None, where=None) -> list:
        """BM25 top-k Hits per text scored with the given statistics (one bm25_statistics-style dict
        per text, e.g. summed over shards) instead of this collection's; None: as mode="sparse"."""
        texts = _text_list(texts)
        k = check_k(k)
        self.limits.check_request(len(texts), k, None, None, None, texts, False)
        if statistics is not None and (isinstance(statistics, dict) or len(statistics) != len(texts)):
            raise ValueError("statistics must be a list with one dict per text")
        snap = self._snap
        allow = self._allow(snap, tenant, groups, where)
        out = []
        for i, t in enumerate(texts):
            if len(allow) == 0:
                rows, scores = np.empty(0, np.int64), np.empty(0, np.float32)
            else:
                rows, scores = snap.sparse.search(t, k, allow, "allowed" if statistics is None else statistics[i])
            out.append(snap.hits.build(rows, scores.tolist(), sparse_ranks=list(range(1, len(rows) + 1))))
        return out

    def _allow(self, snap, tenant, groups, where):
        if self._closed:
            raise VecsiftError("the collection is closed")
        self.limits.check_where(where)
        return snap.allow(tenant, groups, where)  # before anything is scored

    def _check_limits(self, req) -> None:
        self.limits.check_request(req.n_queries, req.k, req.candidates, req.oversample, req.ef, req.texts,
                                  req.mode == "hybrid")

    @auditing.audited("search")  # search() and search_batch()
    def _search(self, q, texts, k, tenant, groups, where, mode, candidates, rrf_k, weights, ef, oversample,
                threads, stats=None, deadline=None):
        dl = deadline_of(deadline)
        snap = self._snap
        req = cascade.request(q, texts, k, mode, candidates, rrf_k, weights, ef, oversample, threads)
        self._check_limits(req)
        allow = self._allow(snap, tenant, groups, where)
        out = []
        for part in _chunks(req, dl, "filter"):
            out += self._hits(snap, part, cascade.retrieve(snap, part, allow, stats, dl), dl)
        return out

    def _hits(self, snap, req, lists, dl) -> list:
        """Hits of one request's candidate lists (fused first in hybrid mode)."""
        if req.mode == "dense":
            return snap.hits.build_dense(*lists.dense, metric=self.metric)
        if req.mode == "sparse":
            return [snap.hits.build(rows, scores.tolist(), sparse_ranks=list(range(1, len(rows) + 1)))
                    for rows, scores in lists.sparse]
        if dl is not None:
            dl.check("fusion")
        out = []
        for ids, fused, ranks in cascade.fuse(req, lists):
            dense_ranks, sparse_ranks = ([r or None for r in col] for col in ranks.T.tolist())
            out.append(snap.hits.build(ids, fused.tolist(), dense_ranks, sparse_ranks))
        return out

    def __repr__(self) -> str:
        return (f"<vecsift.Collection {self._path!r} dim={self.dim} metric={self.metric} index={self.index} "
                f"rows={len(self)}{' readonly' if self.readonly else ''}>")


def _chunks(req, dl, first_stage: str):
    """req itself, or with a deadline and a large batch, its chunks of DEADLINE_CHUNK queries; the
    deadline is checked before each (after `first_stage` for the first)."""
    from dataclasses import replace

    n = req.n_queries
    step = n if dl is None or n <= DEADLINE_CHUNK else DEADLINE_CHUNK
    for s in range(0, max(n, 1), max(step, 1)):
        if dl is not None:
            dl.check(first_stage if s == 0 else f"queries {s}..")
        if step >= n:
            yield req
            return
        yield replace(req, vectors=None if req.vectors is None else req.vectors[s:s + step],
                      texts=None if req.texts is None else req.texts[s:s + step])


def _text_list(texts) -> list:
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, got a single string")
    texts = list(texts)
    if not all(isinstance(t, str) for t in texts):
        raise TypeError("text queries must be strings")
    return texts


def open(path, readonly: bool = False, embedder=None) -> Collection:  # noqa: A001 - public name vecsift.open
    """Opens the collection in directory `path` (readonly=True: no writer lock, no writes; embedder:
    Collection.set_embedder)."""
    return Collection.open(path, readonly=readonly, embedder=embedder)
