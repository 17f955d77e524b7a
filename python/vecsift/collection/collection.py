"""Collection: the engine users embed. A directory of vectors, chunks and filters.

Files of a collection directory (all named by the MANIFEST, see storage.py):

    vectors-G.f32    append-only float32 rows, read through numpy.memmap
    codes-G.bin      append-only binary codes (index="bq"), held in RAM
    hnsw-G.idx       the graph (index="hnsw"), rewritten at each commit
    seg-G.arrow      Arrow IPC file of the chunks added by commit G (ids, texts,
                     tenant, acl, provenance, metadata), memory-mapped
    filters-G.bin    roaring bitmaps (tenants, groups, filter fields, deleted)
    bm25-G.bin       BM25 postings of the indexed texts (sparse.py), rewritten at
                     each commit that changed them

Search is a cascade: the allow set (filters.py) is computed first, then the
dense stage (dense.py: Hamming + float32 rescoring, or HNSW) and/or BM25 run
only over allowed rows, and hybrid mode fuses the two candidate lists with RRF.

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
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap, FrozenBitMap

from vecsift._arrays import as_vectors, check_k, check_threads
from vecsift.collection.stages.dense import KINDS, exact_rows
from vecsift.collection.hits import HitBuilder
from vecsift.collection.stages.sparse import BM25Sparse, indexed_texts
from vecsift.errors import CorruptIndexError, VecsiftError
from vecsift.collection.filters import Filters, as_keys, bitmap_of, rows_of
from vecsift.index.flat import check_metric
from vecsift.collection.ingest import META, PROVENANCE, build_batch, check_ids, read_table, vectors_from_column
from vecsift.storage.framing import FORMAT_VERSION, WriterLock, fsync_dir, read_blob, read_manifest, write_blob, write_manifest
from vecsift.storage.framing import file_crc, write_durable
from vecsift.storage.rowfile import RowFile

SEGMENT_META = {b"vecsift_kind": b"segment", b"vecsift_format": str(FORMAT_VERSION).encode()}
# Allow sets this small are scored exactly (all rows), whatever the index.
EXACT_BELOW = 2048
_PATTERNS = ("vectors-*.f32", "codes-*.bin", "hnsw-*.idx", "seg-*.arrow", "filters-*.bin", "bm25-*.bin", "*.tmp")
MODES = ("dense", "sparse", "hybrid")
# Hybrid batches at least this large run BM25 on a helper thread beside the dense stage.
# Measured (bench_collection_sparse.py): the helper is slower for one query, a toss-up
# at 2 (5% slower in one run, 9% faster in another), 27-38% faster from 8 on.
HYBRID_PARALLEL_MIN = 8


class _RWLock:
    """Many readers or one writer; a waiting writer blocks new readers (no starvation)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting = 0

    @contextmanager
    def read(self):
        with self._cond:
            while self._writer or self._waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self):
        with self._cond:
            self._waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


@dataclass(frozen=True)
class _Snapshot:
    n: int  # committed rows (deleted included)
    vectors: np.ndarray  # memmap of the n rows
    dense: object
    sparse: object
    filters: Filters
    live: FrozenBitMap  # [0, n) minus deleted; frozen, so indexes may cache what they derive from it
    full: bool  # nothing deleted: live is all of [0, n)
    hits: HitBuilder  # over the chunk columns of the n rows

    @property
    def table(self) -> pa.Table:
        return self.hits.table


_POOL = None
_POOL_LOCK = threading.Lock()


def _pool():
    """Helper threads for the sparse half of hybrid searches (created on first use)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from concurrent.futures import ThreadPoolExecutor

            _POOL = ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1)),
                                       thread_name_prefix="vecsift-sparse")
    return _POOL


def _read_segment(path, entry) -> pa.Table:
    if not os.path.exists(path):
        raise CorruptIndexError(f"{path}: file named by the manifest is missing")
    if file_crc(path) != entry["crc"]:
        raise CorruptIndexError(f"{path}: checksum does not match the manifest")
    try:
        table = pa.ipc.open_file(pa.memory_map(path, "r")).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptIndexError(f"{path}: unreadable chunk segment: {exc}") from None
    meta = table.schema.metadata or {}
    if meta.get(b"vecsift_kind") != b"segment" or meta.get(b"vecsift_format") != SEGMENT_META[b"vecsift_format"]:
        raise CorruptIndexError(f"{path}: not a vecsift chunk segment of format {FORMAT_VERSION}")
    if table.num_rows != entry["rows"]:
        raise CorruptIndexError(f"{path}: holds {table.num_rows} chunks, the manifest says {entry['rows']}")
    return table


def _write_segment(path, table: pa.Table) -> int:
    table = table.replace_schema_metadata(SEGMENT_META)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    data = sink.getvalue().to_pybytes()
    write_durable(path, data)
    from vecsift.storage.framing import crc32

    return crc32(data)


def _concat(tables) -> pa.Table:
    if not tables:
        from vecsift.collection.ingest import ROW_SCHEMA

        return ROW_SCHEMA.empty_table()
    return pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]


class Collection:
    """A persistent, filtered vector collection. Create with Collection.create, reopen with vecsift.open."""

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def create(cls, path, dim: int, metric: str = "cosine", index: str = "bq", model: str | None = None,
               pipeline_version: str | None = None, filter_fields=(), index_heading_path: bool = False,
               bm25_k1: float = 1.2, bm25_b: float = 0.75, **index_params) -> "Collection":
        """Creates an empty collection in directory `path` (new or empty) and opens it for writing.

        filter_fields: metadata/provenance fields usable in search(where=...).
        index_heading_path: BM25 indexes "heading path\n" + text; embed the same
        string upstream (Collection.text_for_embedding builds it).
        """
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        check_metric(metric)
        if index not in KINDS:
            raise ValueError(f"index must be one of {sorted(KINDS)}, got {index!r}")
        if isinstance(filter_fields, str):
            filter_fields = [filter_fields]
        filter_fields = [str(f) for f in filter_fields]
        params = KINDS[index].params(index_params)
        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        if os.path.exists(os.path.join(path, "MANIFEST")):
            raise FileExistsError(f"{path} already holds a collection; use vecsift.open")
        lock = WriterLock(path)
        try:
            vec = RowFile.create(os.path.join(path, "vectors-0.f32"), "vectors", "float32", dim)
            dense = KINDS[index].create(path, 0, int(dim), metric, params)
            filters = Filters(filter_fields)
            sparse = BM25Sparse.create({"k1": float(bm25_k1), "b": float(bm25_b)})
            manifest = {
                "format": FORMAT_VERSION, "generation": 0, "dim": int(dim), "metric": metric, "index": index,
                "index_params": params, "model": model, "pipeline_version": pipeline_version,
                "filter_fields": filter_fields, "created": time.time(), "rows": 0,
                "index_heading_path": bool(index_heading_path),
                "sparse_params": {"k1": float(bm25_k1), "b": float(bm25_b)},
                "sparse": sparse.prepare_commit(path, 0),
                "vectors": {"file": os.path.basename(vec.path), "rows": 0, "crc": 0},
                "dense": dense.prepare_commit(path, 0, vec.view(0)), "segments": [],
                "filters": {"file": "filters-0.bin",
                            "crc": write_blob(os.path.join(path, "filters-0.bin"), "filters", filters.to_bytes())},
            }
            fsync_dir(path)
            write_manifest(path, manifest)
        except BaseException:
            lock.release()
            raise
        self = cls.__new__(cls)
        self._init(path, manifest, vec, dense, sparse, filters, [], lock)
        return self

    @classmethod
    def open(cls, path, readonly: bool = False) -> "Collection":
        """Opens a collection; readonly=True takes no lock and refuses writes (any number of readers)."""
        path = os.fspath(path)
        lock = None if readonly else WriterLock(path)
        try:
            for attempt in range(5):
                manifest = read_manifest(path)
                try:
                    parts = cls._load(path, manifest, writable=not readonly)
                    break
                except CorruptIndexError:
                    # a reader may race a writer that just replaced files: retry on a newer manifest
                    if readonly and attempt < 4 and read_manifest(path)["generation"] != manifest["generation"]:
                        continue
                    raise
            self = cls.__new__(cls)
            self._init(path, manifest, *parts, lock)
            if not readonly:
                self._remove_unreferenced()
        except BaseException:
            if lock:
                lock.release()
            raise
        return self

    @staticmethod
    def _load(path, manifest, writable):
        v = manifest["vectors"]
        if v["rows"] != manifest["rows"]:
            raise CorruptIndexError(f"{os.path.join(path, 'MANIFEST')}: row counts disagree")
        vec = RowFile.open(os.path.join(path, v["file"]), "vectors", "float32", manifest["dim"], v["rows"], v["crc"],
                           writable)
        try:
            dense = KINDS[manifest["index"]].load(path, manifest["dense"], manifest["dim"], manifest["metric"],
                                                  manifest["index_params"], writable)
            sparse = BM25Sparse.load(path, manifest.get("sparse"), manifest.get("sparse_params", {}))
            f = manifest["filters"]
            fpath = os.path.join(path, f["file"])
            filters = Filters.from_bytes(read_blob(fpath, "filters", f["crc"]), fpath)
            tables = [_read_segment(os.path.join(path, s["file"]), s) for s in manifest["segments"]]
        except BaseException:
            vec.close()
            raise
        if sum(t.num_rows for t in tables) != manifest["rows"] or dense.size != manifest["rows"]:
            raise CorruptIndexError(f"{os.path.join(path, 'MANIFEST')}: files hold a different number of rows")
        return vec, dense, sparse, filters, tables

    def _init(self, path, manifest, vec, dense, sparse, filters, tables, lock):
        self._path = path
        self._manifest = manifest
        self._vec, self._dense, self._sparse, self._filters = vec, dense, sparse, filters
        self._use_tables(tables)
        self._schema = self._table.schema
        self._lock = lock
        self._closed = False
        self._wlock = threading.RLock()
        self._rw = _RWLock()
        self._dense.lock = self._rw
        self._pending: list[pa.Table] = []
        self._replaced = BitMap()
        self._dirty = False
        self._publish()

    def refresh(self) -> bool:
        """Readonly collections: picks up a newer commit of the writer (True if one was loaded).

        Searches already running finish on the snapshot they started with."""
        if self._closed:
            raise VecsiftError("the collection is closed")
        if self._lock is not None:
            return False  # the writer's own state is always the newest
        for attempt in range(5):
            m = read_manifest(self._path)
            if m["generation"] == self._manifest["generation"]:
                return False
            try:
                vec, dense, sparse, filters, tables = self._load(self._path, m, writable=False)
                break
            except CorruptIndexError:
                if attempt == 4 or read_manifest(self._path)["generation"] == m["generation"]:
                    raise
        old_vec, old_dense = self._vec, self._dense
        dense.lock = self._rw
        self._manifest, self._vec, self._dense, self._filters = m, vec, dense, filters
        self._sparse = sparse
        self._use_tables(tables)
        self._schema = self._table.schema
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
        n = self._manifest["rows"]
        live = FrozenBitMap(range(n)) - self._filters.deleted  # frozen minus anything stays frozen
        self._snap = _Snapshot(n, self._vec.view(n), self._dense, self._sparse, self._filters, live, len(live) == n,
                               self._hits_of)

    @property
    def readonly(self) -> bool:
        return self._lock is None

    def _writable(self):
        if self._closed:
            raise VecsiftError("the collection is closed")
        if self._lock is None:
            raise VecsiftError("the collection was opened readonly")

    def commit(self) -> None:
        """Makes every add and delete since the last commit durable and searchable (atomic)."""
        self._writable()
        with self._wlock:
            if not self._pending and not self._replaced and not self._dirty:
                return
            m = dict(self._manifest)
            gen = m["generation"] + 1
            total = self._vec.rows
            self._vec.sync()
            m["vectors"] = {"file": os.path.basename(self._vec.path), "rows": total, "crc": self._vec.crc}
            m["rows"] = total
            m["dense"] = self._dense.prepare_commit(self._path, gen, self._vec.view(total, sequential=True))
            new_tables = list(self._tables)
            if self._pending:
                seg = _concat(self._pending)
                name = f"seg-{gen}.arrow"
                crc = _write_segment(os.path.join(self._path, name), seg)
                m["segments"] = m["segments"] + [{"file": name, "rows": seg.num_rows, "crc": crc}]
                new_tables.append(_read_segment(os.path.join(self._path, name), m["segments"][-1]))
                self._sparse.add_rows(self._manifest["rows"], indexed_texts(seg, self.index_heading_path))
            if self._replaced:
                self._filters.delete(self._replaced)
                self._sparse.delete(rows_of(self._replaced))
            m["sparse"] = self._sparse.prepare_commit(self._path, gen)
            name = f"filters-{gen}.bin"
            m["filters"] = {"file": name, "crc": write_blob(os.path.join(self._path, name), "filters",
                                                           self._filters.to_bytes())}
            m["generation"] = gen
            fsync_dir(self._path)
            write_manifest(self._path, m)  # the commit point
            old = self._manifest
            self._manifest = m
            with self._rw.write():
                self._dense.publish()
            self._use_tables(new_tables)
            self._pending, self._replaced, self._dirty = [], BitMap(), False
            self._publish()
            self._remove_files(old, m)

    def _files(self, m) -> set:
        names = {m["vectors"]["file"], m["filters"]["file"]} | {s["file"] for s in m["segments"]}
        if m.get("sparse"):
            names.add(m["sparse"]["file"])
        return names | set(self._dense.files(m["dense"])) if m.get("dense") else names

    def _remove_files(self, old, new) -> None:
        keep = self._files(new)
        for name in self._files(old) - keep:
            try:
                os.unlink(os.path.join(self._path, name))
            except FileNotFoundError:
                pass

    def _remove_unreferenced(self) -> None:
        """Deletes what a crashed writer left behind (files no manifest names)."""
        keep = self._files(self._manifest)
        for pattern in _PATTERNS:
            for p in glob.glob(os.path.join(glob.escape(self._path), pattern)):
                if os.path.basename(p) not in keep:
                    os.unlink(p)

    def close(self) -> None:
        """Commits (when opened for writing) and releases the writer lock."""
        if self._closed:
            return
        try:
            if self._lock is not None:
                self.commit()
        finally:
            self._closed = True
            # drop the snapshot so the float32 mapping goes once no search holds it
            self._snap = _Snapshot(0, np.empty((0, self.dim), np.float32), self._dense, self._sparse, Filters(),
                                   FrozenBitMap(), True, HitBuilder(_concat([])))
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
    def dim(self) -> int:
        return self._manifest["dim"]

    @property
    def metric(self) -> str:
        return self._manifest["metric"]

    @property
    def index(self) -> str:
        return self._manifest["index"]

    @property
    def index_params(self) -> dict:
        return dict(self._manifest["index_params"])

    @property
    def model(self):
        return self._manifest["model"]

    @property
    def pipeline_version(self):
        return self._manifest["pipeline_version"]

    @property
    def index_heading_path(self) -> bool:
        return bool(self._manifest.get("index_heading_path", False))

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
        return list(self._manifest["filter_fields"])

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
            d = dict(self._manifest.get("search_defaults") or {})
            for name, v in (("ef", ef), ("oversample", oversample)):
                if v is not None:
                    if isinstance(v, bool) or int(v) != v or v < 1:
                        raise ValueError(f"{name} must be a positive integer, got {v!r}")
                    d[name] = int(v)
            self._manifest = dict(self._manifest, search_defaults=d)
            self._dirty = True

    def info(self) -> dict:
        """What `vecsift info` prints: rows, deletes, model, index, bytes on disk and in RAM."""
        m, snap = self._manifest, self._snap
        disk = 0
        for name in self._files(m) | {"MANIFEST"}:
            try:
                disk += os.path.getsize(os.path.join(self._path, name))
            except FileNotFoundError:
                pass
        dense = snap.dense
        ram = getattr(getattr(dense, "index", None), "nbytes", 0)
        return {"path": self._path, "rows": len(snap.live), "deleted": snap.n - len(snap.live),
                "generation": m["generation"], "model": m["model"], "pipeline_version": m["pipeline_version"],
                "dim": m["dim"], "metric": m["metric"], "index": m["index"], "index_params": m["index_params"],
                "search_defaults": m.get("search_defaults") or {}, "filter_fields": m["filter_fields"],
                "has_tenants": snap.filters.has_tenants, "has_acl": snap.filters.has_acl,
                "bytes_on_disk": disk, "bytes_in_ram": int(ram), "float32_bytes_on_disk": snap.n * m["dim"] * 4}

    # used by `vecsift tune`: the real search path and exact ground truth over all live rows
    def _sample_rows(self, n: int, seed: int = 0):
        snap = self._snap
        live = rows_of(snap.live)
        rows = np.sort(np.random.default_rng(seed).choice(live, size=min(n, len(live)), replace=False))
        return rows, np.asarray(snap.vectors[rows], dtype=np.float32)

    def _exact_all(self, queries, k: int, exclude=None):
        """Exact top-k over all live rows except `exclude` (rows used as held-out queries)."""
        from vecsift.index.flat import exact_search

        with self._wlock:  # the snapshot and the file it counts rows of, taken together
            snap = self._snap
            vectors = self._vec.view(snap.n, sequential=True)  # a full scan: read-ahead helps
        q = as_vectors(queries, "queries", dim=self.dim)
        if snap.n == 0:
            return np.full((len(q), k), -1, np.int64), np.full((len(q), k), -np.inf, np.float32)
        metric = "ip" if self.metric == "cosine" else self.metric  # rows are stored unit length
        if self.metric == "cosine":
            q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-30).astype(np.float32)
        allow = snap.live - bitmap_of(exclude) if exclude is not None else (None if snap.full else snap.live)
        return exact_search(vectors, q, k, metric, allow=allow)

    def _live_vectors(self):
        """(live rows, the float32 memmap they index), for rebuilding a held-out index."""
        snap = self._snap
        return rows_of(snap.live), snap.vectors

    def _search_all(self, queries, k: int, ef=None, oversample=None, exclude=None):
        """The collection's dense search over all live rows except `exclude`, ignoring tenants and ACLs."""
        snap = self._snap
        q = as_vectors(queries, "queries", dim=self.dim)
        allow = snap.live - bitmap_of(exclude) if exclude is not None else snap.live
        return self._dense_rows(snap, q, check_k(k), allow, ef, oversample, 0)

    def verify(self) -> None:
        """Reads every committed float32 row and checks it against the manifest's checksum."""
        v = self._manifest["vectors"]
        self._vec.verify(v["rows"], v["crc"])

    # ------------------------------------------------------------------ writing
    def add(self, ids, vectors, texts=None, doc_ids=None, tenant=None, acl=None, metadata=None, *,
            display_texts=None, model=None, source=None, heading_path=None, char_range=None, date=None,
            version=None, doc_type=None) -> None:
        """Adds (or replaces, by id) chunks; searchable after commit().

        tenant: one name for all chunks or one per chunk. acl: one list of group
        names per chunk (a chunk with none is visible to nobody once the
        collection uses ACLs). metadata: a list of dicts or a dict of columns.
        Provenance (source, heading_path, char_range=(start, end), date, version,
        doc_type) may be given here, per chunk or for all, or inside metadata.
        """
        self._writable()
        if model is not None and self.model is not None and model != self.model:
            raise ValueError(f"model {model!r} differs from the collection's model {self.model!r}")
        ids = check_ids(ids)
        vecs = as_vectors(vectors, "vectors", dim=self.dim)
        if len(vecs) != len(ids):
            raise ValueError(f"{len(ids)} ids but {len(vecs)} vectors")
        prov = {"source": source, "heading_path": heading_path, "char_range": char_range, "date": date,
                "version": version, "doc_type": doc_type}
        batch = build_batch(ids, len(ids), texts=texts, display_texts=display_texts, doc_ids=doc_ids, tenant=tenant,
                            acl=acl, metadata=metadata, provenance=prov, pipeline_version=self.pipeline_version)
        self._add_batch(batch, vecs)

    def add_table(self, table, model=None) -> None:
        """Adds chunks from a pyarrow Table / RecordBatch / parquet path.

        Columns: id, vector (fixed_size_list<float32>), and optionally text,
        display_text, doc_id, tenant, acl (list<string>), the provenance fields
        (source, heading_path, char_start, char_end, date, version, doc_type);
        every other column is metadata.
        """
        self._writable()
        if model is not None and self.model is not None and model != self.model:
            raise ValueError(f"model {model!r} differs from the collection's model {self.model!r}")
        table = read_table(table)
        for need in ("id", "vector"):
            if need not in table.column_names:
                raise ValueError(f"add_table: missing column {need!r}")
        vecs = vectors_from_column(table["vector"])
        if vecs.shape[1] != self.dim:
            raise ValueError(f"vectors have dimension {vecs.shape[1]}, expected {self.dim}")
        vecs = as_vectors(vecs, "vectors", dim=self.dim)
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
                            pipeline_version=self.pipeline_version)
        self._add_batch(batch, vecs)

    def _field_column(self, batch: pa.Table, name: str):
        if name in PROVENANCE:
            return batch[name]
        if META + name in batch.column_names:
            return batch[META + name]
        return pa.nulls(batch.num_rows, pa.string())

    def _add_batch(self, batch: pa.Table, vecs: np.ndarray) -> None:
        if self.metric == "cosine":  # stored unit length: cosine is then the inner product
            norms = np.linalg.norm(vecs, axis=1, keepdims=True)
            vecs = vecs / np.where(norms > 0, norms, 1).astype(np.float32)
        fields = {}
        for f in self.filter_fields:
            try:
                fields[f] = as_keys(self._field_column(batch, f))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise TypeError(f"filter field {f!r}: values must be scalars: {exc}") from None
        with self._wlock:
            self._writable()
            try:
                schema = pa.unify_schemas([self._schema, batch.schema], promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise TypeError(f"metadata types differ from earlier chunks: {exc}") from None
            replaced = self._rows_where("id", batch["id"])
            start = self._vec.rows
            self._vec.append(vecs)
            self._dense.stage(vecs)
            self._filters.add_rows(start, batch["tenant"].combine_chunks(), batch["acl"].combine_chunks(), fields)
            self._pending.append(batch)
            self._schema = schema
            self._replaced |= replaced

    def _rows_where(self, column: str, values) -> BitMap:
        """Live rows (committed or pending) whose `column` is in values: one vectorised pass."""
        tables = self._tables + self._pending
        if not tables or len(values) == 0:
            return BitMap()
        col = pa.chunked_array([c for t in tables for c in t[column].chunks], type=pa.string())
        hit = pc.is_in(col, value_set=pa.array(values, type=pa.string()) if not isinstance(values, pa.Array)
                       else values).to_numpy(zero_copy_only=False)
        return bitmap_of(np.flatnonzero(hit)) - self._filters.deleted - self._replaced

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
                self._dirty = True
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
            m = dict(self._manifest)
            gen = m["generation"] + 1
            keep = rows_of(snap.live)
            dim, metric = self.dim, self.metric
            vec = RowFile.create(os.path.join(self._path, f"vectors-{gen}.f32"), "vectors", "float32", dim)
            dense = KINDS[self.index].create(self._path, gen, dim, metric, m["index_params"])
            dense.lock = self._rw
            step = max(1, (64 << 20) // (4 * dim))
            src = self._vec.view(snap.n, sequential=True)  # one forward pass with read-ahead
            for s in range(0, len(keep), step):
                rows = np.asarray(src[keep[s:s + step]])
                vec.append(rows)
                dense.stage(rows)
            vec.sync()
            table = snap.table.take(pa.array(keep))
            filters = Filters(self.filter_fields)
            filters.add_rows(0, table["tenant"].combine_chunks(), table["acl"].combine_chunks(),
                             {f: as_keys(self._field_column(table, f)) for f in self.filter_fields})
            filters.has_tenants |= self._filters.has_tenants  # once required, always required
            filters.has_acl |= self._filters.has_acl
            sparse = self._sparse.compacted(self._path, gen, len(keep),
                                            lambda: indexed_texts(table, self.index_heading_path))
            m["sparse"] = sparse.prepare_commit(self._path, gen)
            m["vectors"] = {"file": os.path.basename(vec.path), "rows": len(keep), "crc": vec.crc}
            m["rows"] = len(keep)
            m["dense"] = dense.prepare_commit(self._path, gen, vec.view(len(keep), sequential=True))
            seg_name = f"seg-{gen}.arrow"
            seg_path = os.path.join(self._path, seg_name)
            m["segments"] = [{"file": seg_name, "rows": table.num_rows, "crc": _write_segment(seg_path, table)}]
            name = f"filters-{gen}.bin"
            m["filters"] = {"file": name, "crc": write_blob(os.path.join(self._path, name), "filters",
                                                           filters.to_bytes())}
            m["generation"] = gen
            fsync_dir(self._path)
            write_manifest(self._path, m)  # the commit point
            dense.publish()
            old_manifest, old_vec, old_dense = self._manifest, self._vec, self._dense
            self._manifest, self._vec, self._dense, self._filters = m, vec, dense, filters
            self._sparse = sparse
            self._use_tables([_read_segment(seg_path, m["segments"][0])])
            self._publish()  # running searches keep the old snapshot, files and index
            old_vec.close()
            old_dense.close()
            self._remove_files(old_manifest, m)

    # ------------------------------------------------------------------ searching
    def search(self, vector=None, text=None, k: int = 10, tenant=None, groups=None, where=None, *, mode=None,
               candidates: int = 100, rrf_k: float = 60, weights=None, ef=None, oversample=None,
               threads: int = 0) -> list:
        """Top-k chunks as Hits, best first.

        mode: "dense" (vector), "sparse" (BM25 over text) or "hybrid" (both,
        `candidates` from each, fused with reciprocal rank fusion rrf_k /
        weights=(dense, sparse)); omitted: hybrid when both are given, else the
        one given. tenant / groups / where make the allow set, computed before
        anything is scored and shared by both retrievers. Hit.score is the
        cosine / inner product / -squared L2 (dense), the BM25 score (sparse) or
        the RRF score (hybrid); dense_rank / sparse_rank are 1-based, None where
        that retriever did not return the chunk.
        """
        q = None
        if vector is not None:
            q = as_vectors(vector, "vector", dim=self.dim)
            if len(q) != 1:
                raise ValueError(f"search takes one vector, got {len(q)}; use search_batch")
        if text is not None and not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        return self._search(self._snap, q, None if text is None else [text], k, tenant, groups, where, mode,
                            candidates, rrf_k, weights, ef, oversample, threads)[0]

    def search_batch(self, vectors=None, texts=None, k: int = 10, tenant=None, groups=None, where=None, *,
                     mode=None, candidates: int = 100, rrf_k: float = 60, weights=None, ef=None, oversample=None,
                     threads: int = 0) -> list:
        """search() for many queries (rows of `vectors` and/or items of `texts`), one filter for all."""
        q = None if vectors is None else as_vectors(vectors, "vectors", dim=self.dim)
        if texts is not None:
            if isinstance(texts, str):
                raise TypeError("texts must be a sequence of strings, got a single string")
            texts = list(texts)
            if q is not None and len(texts) != len(q):
                raise ValueError(f"{len(q)} vectors but {len(texts)} texts")
        return self._search(self._snap, q, texts, k, tenant, groups, where, mode, candidates, rrf_k, weights, ef,
                            oversample, threads)

    def search_rows(self, vectors, k: int = 10, tenant=None, groups=None, where=None, ef=None, oversample=None,
                    threads: int = 0):
        """Dense search returning (rows int64, scores float32) arrays, pad -1 (for benchmarks)."""
        snap = self._snap
        q = as_vectors(vectors, "vectors", dim=self.dim)
        allow = self._allow(snap, tenant, groups, where)
        return self._dense_rows(snap, q, check_k(k), allow, ef, oversample, threads)

    def _allow(self, snap, tenant, groups, where) -> BitMap:
        if self._closed:
            raise VecsiftError("the collection is closed")
        return snap.filters.allow(snap.live, tenant, groups, where)  # before anything is scored

    def _search(self, snap, q, texts, k, tenant, groups, where, mode, candidates, rrf_k, weights, ef, oversample,
                threads):
        k = check_k(k)
        if mode is None:
            if q is None and texts is None:
                raise ValueError("search needs vector=... and/or text=...")
            mode = "hybrid" if q is not None and texts is not None else ("dense" if q is not None else "sparse")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode in ("dense", "hybrid") and q is None:
            raise ValueError(f"mode={mode!r} needs vector=...")
        if mode in ("sparse", "hybrid") and texts is None:
            raise ValueError(f"mode={mode!r} needs text=...")
        if texts is not None and not all(isinstance(t, str) for t in texts):
            raise TypeError("text queries must be strings")
        allow = self._allow(snap, tenant, groups, where)
        if mode == "dense":
            rows, scores = self._dense_rows(snap, q, k, allow, ef, oversample, threads)
            return snap.hits.build_dense(rows, scores)
        nq = len(texts)
        if mode == "sparse":
            out = []
            for t in texts:
                rows, scores = self._sparse_rows(snap, t, k, allow)
                out.append(snap.hits.build(rows, scores.tolist(), sparse_ranks=list(range(1, len(rows) + 1))))
            return out
        c = check_k(candidates)
        if c < k:
            raise ValueError(f"candidates ({c}) must be >= k ({k})")
        from vecsift.text.fusion import rrf

        sparse = lambda: [self._sparse_rows(snap, t, c, allow)[0] for t in texts]  # noqa: E731
        if threads == 1 or nq < HYBRID_PARALLEL_MIN:
            slists = sparse()
            drows, _ = self._dense_rows(snap, q, c, allow, ef, oversample, threads)
        else:  # BM25 (numba, GIL released) on a helper thread while the dense stage runs here
            pending = _pool().submit(sparse)
            drows, _ = self._dense_rows(snap, q, c, allow, ef, oversample, threads)
            slists = pending.result()
        out = []
        for i in range(nq):
            ids, fused, ranks = rrf([drows[i], slists[i]], k=rrf_k, weights=weights, top_n=k, return_ranks=True)
            dense_ranks, sparse_ranks = ([r or None for r in col] for col in ranks.T.tolist())
            out.append(snap.hits.build(ids, fused.tolist(), dense_ranks, sparse_ranks))
        return out

    def _sparse_rows(self, snap, text, k, allow):
        # allow never holds rows past snap.n, so rows a commit in progress has indexed stay out;
        # the unfiltered allow (snap.live, frozen) is turned into BM25's mask once per snapshot
        if len(allow) == 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        return snap.sparse.search(text, k, allow)

    def _dense_rows(self, snap, q, k, allow, ef, oversample, threads):
        threads = check_threads(threads)
        if oversample is not None and (isinstance(oversample, bool) or int(oversample) < 1):
            raise ValueError(f"oversample must be an integer >= 1, got {oversample!r}")
        if self.metric == "cosine":
            norms = np.linalg.norm(q, axis=1, keepdims=True)
            q = q / np.where(norms > 0, norms, 1).astype(np.float32)
        n_allowed = len(allow)
        nq = len(q)
        if n_allowed == 0 or nq == 0:
            return np.full((nq, k), -1, np.int64), np.full((nq, k), -np.inf, np.float32)
        defaults = self._manifest.get("search_defaults") or {}
        if oversample is None:
            oversample = defaults.get("oversample")
        if ef is None:
            ef = defaults.get("ef")
        over = getattr(snap.dense, "oversample", 1) if oversample is None else int(oversample)
        if snap.dense.kind != "bq":
            over = 1
        if n_allowed <= max(k * over, EXACT_BELOW):
            # a very selective filter: score every allowed row exactly
            return exact_rows(snap.vectors, q, rows_of(allow), k, self.metric, threads)
        with self._rw.read():
            clip = not (allow is snap.live and snap.full and snap.dense.size == snap.n and not snap.dense.growing)
            return snap.dense.search(snap.vectors, q, k, allow if clip else None, n_allowed, ef=ef,
                                     oversample=oversample, threads=threads)

    def __repr__(self) -> str:
        return (f"<vecsift.Collection {self._path!r} dim={self.dim} metric={self.metric} index={self.index} "
                f"rows={len(self)}{' readonly' if self.readonly else ''}>")


def open(path, readonly: bool = False) -> Collection:  # noqa: A001 - the public name is vecsift.open
    """Opens the collection in directory `path` (readonly=True: no writer lock, no writes)."""
    return Collection.open(path, readonly=readonly)
