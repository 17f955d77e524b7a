"""The shard servers: plain classes that a node actor (node.py) holds, one per shard copy on the node.

ShardServer owns one shard: a writable vecsift.Collection directory and its
transaction log (txnlog.py). When its node actor's process dies, Ray restarts the
actor (max_restarts) and the constructor runs again: it reopens the Collection from
its manifest and applies any prepared transaction the cluster manifest has
committed since, so a restarted shard answers at the committed generation.

ReplicaServer owns a read-only copy of a shard in its own directory. It follows
the primary by fetching, through the primary's node actor, the files the copy lacks
(immutable files whole, the append-only row files from the copy's length on),
then the MANIFEST last, then refreshing its read-only Collection; a replica
killed halfway keeps serving the generation its MANIFEST names.

Both answer searches tagged with their cluster generation, so the gatherer can
refuse an answer from another generation.
"""
from __future__ import annotations

import os
import time
import zlib

import numpy as np

from vecsift.distributed.gather import pack_hits
from vecsift.distributed.manifest import committed_generation, fsync_dir, read_json, write_json
from vecsift.distributed.txnlog import TxnLog

_APPEND_ONLY = (".f32",)  # row files grow in place; everything else is immutable by name
_CHUNK = 8 << 20
_OWN = ("LOCK", "MANIFEST", "REPLICA")  # not copied as ordinary files
_ONE_QUERY_OPTS = frozenset({"threads", "ef"})  # the options search() takes on its fast path


def _open_writer(path, create_args):
    import vecsift
    from vecsift.errors import VecsiftError

    if not os.path.exists(os.path.join(path, "MANIFEST")):
        if create_args is None:
            raise FileNotFoundError(f"{path}: shard directory has no MANIFEST")
        return vecsift.Collection.create(path, **create_args)
    for attempt in range(50):  # the lock of a killed predecessor goes with its process
        try:
            return vecsift.open(path)
        except VecsiftError as exc:
            if "another writer" not in str(exc) or attempt == 49:
                raise
            time.sleep(0.1)


class _Serving:
    """Search methods shared by primaries and replicas (self.col, self.gen, self.calls)."""

    def _warm(self):
        """Runs each kind of search once before the actor serves: the first BM25 call of a process
        imports numba and loads (or compiles) its kernels, 0.5 s or far more on a loaded machine,
        which a search's deadline should not pay, least of all right after a restart."""
        col = self.col
        if getattr(self, "_warmed", False) or col is None or len(col) == 0:
            return
        self._warmed = True
        try:
            stats = col.bm25_statistics(["warm up"])
            col.search_sparse(["warm up"], statistics=stats, k=1)
            col.search_sparse(["warm up"], k=1)
            col.search_batch(np.zeros((1, col.dim), np.float32) + 1, k=1, mode="dense", threads=1)
        except Exception:  # noqa: BLE001 - only a warm-up: a real search reports its own errors
            pass

    def ping(self):
        return {"gen": self.gen, "pid": os.getpid(), "started": self.started, "calls": self.calls}

    def search(self, gen, vectors, texts, k, scope, opts):
        """Dense or sparse top-k per query: (gen, [packed hits]). texts come with their global statistics."""
        got, per_query = self.search_hits(gen, vectors, texts, k, scope, opts)
        return got, None if per_query is None else [pack_hits(h) for h in per_query]

    def search_hits(self, gen, vectors, texts, k, scope, opts):
        """search() with Hit lists, not packed ones: (gen, [[Hit]] or None). A node actor merges its
        shards' Hits and packs only the k it sends."""
        self.calls += 1
        col = self.col
        if col is None:
            return self.gen, None
        if texts is None:
            if len(vectors) == 1 and all(v is None for v in scope.values()) and opts.keys() <= _ONE_QUERY_OPTS:
                # one query, no filter: Collection.search's single-query fast path (what a local search
                # takes; it falls back to the general path by itself whenever it does not apply)
                return self.gen, [col.search(vectors[0], k=k, **opts)]
            return self.gen, col.search_batch(vectors, k=k, mode="dense", **scope, **opts)
        qs, stats = texts
        return self.gen, col.search_sparse(qs, statistics=stats, k=k, **scope)

    def search_rows(self, gen, vector, k, opts):
        """One unfiltered dense query on Collection.search's fast path without Hits (Collection._search_rows):
        (gen, (rows, scores, columns) or None); None also when the fast path does not serve the call (a
        node then calls search_hits, the general path that refuses, filters or raises)."""
        col = self.col
        got = None if col is None else col._search_rows(vector, k, **opts)
        if got is not None:
            self.calls += 1  # counted once: a call it declines is counted by search_hits
        return self.gen, got

    def search_hybrid(self, gen, vectors, texts, c, scope, opts):
        """Dense and sparse candidate lists (c each, packed) for fusion by the gatherer."""
        self.calls += 1
        col = self.col
        if col is None:
            return self.gen, None
        qs, stats = texts
        dense = col.search_batch(vectors, k=c, mode="dense", **scope, **opts)
        sparse = col.search_sparse(qs, statistics=stats, k=c, **scope)
        return self.gen, [(pack_hits(d), pack_hits(sp)) for d, sp in zip(dense, sparse)]

    def statistics(self, gen, texts, scope):
        """BM25 statistics of the query terms within the asker's allowed rows, one dict per text."""
        self.calls += 1
        if self.col is None:
            return self.gen, [{"n": 0, "total_len": 0, "df": {}} for _ in texts]
        return self.gen, self.col.bm25_statistics(texts, **scope)

    def ids(self):
        return [] if self.col is None else self.col.ids()

    def info(self):
        info = {} if self.col is None else self.col.info()
        return dict(info, cluster_generation=self.gen, pid=os.getpid())



class ShardServer(_Serving):
    def __init__(self, root, name, session, create_args=None):
        self.root, self.name = root, name
        self.path = os.path.join(root, name)
        self.started = time.time()
        self.calls = 0
        self.col = _open_writer(self.path, create_args)
        self.log = TxnLog(os.path.join(root, "txn", name))
        self.gen = self.log.applied
        committed = committed_generation(root)
        if self.log.session != session:
            # a new writer opened the cluster: what no commit reached is dropped, as a Collection
            # drops rows added but never committed; a restart (same session) keeps it
            self._recover(committed, replay_later=False)
            self.log.drop_uncommitted(committed)
            self.log.session = session
        else:
            self._recover(committed)
        self._warm()

    def _recover(self, committed: int, replay_later: bool = True) -> None:
        """Applies the prepared generations the cluster manifest committed, then puts every later
        op back into the Collection as pending (invisible until the commit that takes it)."""
        later = []
        for gen, ops in sorted(self.log.prepared().items()):
            if gen <= self.gen:
                self.log.discard(ops)  # applied before a crash that came before the clean-up
                self.log.unprepare(gen)
            elif gen <= committed:
                self._replay(ops)
                self._applied(gen, ops)
            else:
                later += ops
        if replay_later:
            self._replay(later + self.log.pending())

    def _replay(self, ops) -> None:
        for kind, payload in self.log.ops(ops):
            if kind == "add":
                self.col.add_table(payload)
            else:
                self.col.delete(ids=payload["ids"], doc_ids=payload["doc_ids"])

    def _applied(self, gen, ops) -> None:
        self.col.commit()
        self.log.set_applied(gen)  # a kill before this line: the restart applies gen again (idempotent)
        self.gen = gen
        self.log.discard(ops)
        self.log.unprepare(gen)

    # ---- writes (the driver serialises them)
    def add(self, table) -> int:
        """Checked and staged by the Collection at once (errors surface here, not at commit), logged for restarts."""
        self.col.add_table(table)
        self.log.log_add(table)
        return table.num_rows

    def delete(self, ids, doc_ids) -> int:
        """Hidden from this shard's searches at once (Collection semantics), durable at commit."""
        n = self.col.delete(ids=ids, doc_ids=doc_ids)
        self.log.log_delete(ids, doc_ids)
        return n

    def prepare(self, gen: int) -> dict:
        ops = self.log.prepare(gen)
        return {"ops": len(ops), "collection_generation": self.col.info()["generation"]}

    def abort(self, gen: int) -> None:
        self.log.unprepare(gen)

    def apply(self, gen: int) -> dict:
        """Phase two: the cluster manifest names gen; make the prepared ops this shard's commit."""
        if gen > self.gen:
            prepared = self.log.prepared()
            if gen not in prepared:
                raise RuntimeError(f"shard {self.name}: generation {gen} was never prepared here")
            self._applied(gen, prepared[gen])
        self._warm()  # the first commit with rows (a no-op after)
        return {"gen": self.gen, "collection_generation": self.col.info()["generation"], "rows": len(self.col)}

    # ---- what a replica copies
    def list_files(self):
        """(cluster generation, {file: size}) of the committed collection files and the MANIFEST bytes."""
        files = {}
        for name in os.listdir(self.path):
            if name in _OWN or name.endswith((".tmp", ".part")):
                continue
            files[name] = os.path.getsize(os.path.join(self.path, name))
        with open(os.path.join(self.path, "MANIFEST"), "rb") as f:
            manifest = f.read()
        return self.gen, files, manifest

    def read_file(self, name, offset, length):
        if os.sep in name or name.startswith("."):
            raise ValueError(f"not a collection file: {name!r}")
        with open(os.path.join(self.path, name), "rb") as f:
            f.seek(offset)
            return f.read(length)


class ReplicaServer(_Serving):
    def __init__(self, root, name):
        self.path = os.path.join(root, "replicas", name)
        os.makedirs(self.path, exist_ok=True)
        self.started = time.time()
        self.calls = 0
        self.col = None
        self.gen = -1
        if os.path.exists(os.path.join(self.path, "MANIFEST")):
            self._reopen()
            self._warm()

    def _reopen(self):
        import vecsift

        state = read_json(os.path.join(self.path, "REPLICA"), {"gen": -1, "crc": None})
        if self.col is None:
            self.col = vecsift.open(self.path, readonly=True)
        else:
            self.col.refresh()
        with open(os.path.join(self.path, "MANIFEST"), "rb") as f:
            crc = zlib.crc32(f.read())
        # a copy killed between its MANIFEST and REPLICA writes does not know its generation: resync
        self.gen = int(state["gen"]) if state.get("crc") == crc else -1

    def sync(self, primary) -> int:
        """Copies what changed on the primary (files, then MANIFEST) and serves it; returns the generation.

        primary: anything with the primary's list_files() and read_file(name, offset, length)
        (in a node actor, a proxy that calls the primary's node actor through Ray)."""
        gen, files, manifest = primary.list_files()
        if gen == self.gen:
            return gen
        for name, size in files.items():
            path = os.path.join(self.path, name)
            have = os.path.getsize(path) if os.path.exists(path) else -1
            if have == size:
                continue
            grow = name.endswith(_APPEND_ONLY) and 0 <= have < size
            target = path if grow else path + ".part"
            with open(target, "r+b" if grow else "wb") as f:
                off = have if grow else 0
                f.seek(off)
                while off < size:
                    piece = primary.read_file(name, off, min(_CHUNK, size - off))
                    if not piece:
                        raise RuntimeError(f"{name} shrank on the primary while copying")
                    f.write(piece)
                    off += len(piece)
                f.flush()
                os.fsync(f.fileno())
            if not grow:
                os.replace(target, path)
        fsync_dir(self.path)
        write_json(os.path.join(self.path, "REPLICA"), {"gen": gen, "crc": zlib.crc32(manifest)})
        tmp = os.path.join(self.path, "MANIFEST.part")
        with open(tmp, "wb") as f:
            f.write(manifest)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.path, "MANIFEST"))  # the copy's commit point
        self._reopen()
        self._warm()
        for name in os.listdir(self.path):  # files the new MANIFEST no longer names (open maps keep theirs)
            if name not in files and name not in _OWN and not name.endswith(".part"):
                os.unlink(os.path.join(self.path, name))
        return self.gen
