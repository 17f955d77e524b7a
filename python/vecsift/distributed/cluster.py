"""ShardedCollection: the Collection API over shards served by Ray node actors.

Layout of the root directory (on a filesystem every node running a primary can reach):

    CLUSTER            the top-level manifest (manifest.py): generation, shards, tenant map, parameters
    LOCK               flock of the one writer (driver) process
    shard-NN/          each shard a vecsift Collection directory, served by a ShardServer inside a node actor
    txn/shard-NN/      each shard's transaction log (txnlog.py)
    replicas/shard-NN-rR/  read replicas' own copies (filled through the primary actor, no shared disk needed)

Shards are served by node actors (node.py): one Ray actor per node and copy level
holds every shard copy placed there, so a search phase makes one call per node
actor, not one per shard. Level 0 holds the primaries, level r the r-th replicas;
shard s belongs to node group s % P (P node actors per level: one per Ray node,
at most one per shard), and group g's level-r actor is placed on Ray node
(g + r) % nodes, so a shard's copies sit on different nodes whenever there are
enough of them. The placement is computed at create/open (it is not part of any
file: a shard is a directory any node actor can open).

Commit is two-phase. Phase one: every shard makes the ops it received durable
and names them as generation G+1 (its vote). Then CLUSTER is replaced naming
G+1: that is the commit point. Phase two: every shard commits its Collection
and the replicas copy the new files. A writer killed before CLUSTER is written
leaves generation G everywhere (shards never apply an unnamed generation); a
shard killed after it is restarted by Ray and applies G+1 in its constructor.
Searches run at one cluster generation: phase two excludes them (a
readers-writer lock in this process), and every shard answer carries its
generation, so an answer from another one is refused.
"""
from __future__ import annotations

import fcntl
import itertools
import os
import pickle
import threading
import time
import uuid
from collections import OrderedDict
from contextlib import contextmanager

import numpy as np
import pyarrow as pa

from vecsift.distributed.gather import (ID, SearchResult, ShardUnavailableError, gather, hit_of, merged_order,
                                       ranked_hits, request)
from vecsift.distributed.lanes import Lanes
from vecsift.distributed.sockets import SocketLanes
from vecsift.distributed.node import merge_payloads
from vecsift.distributed.manifest import read_cluster, write_cluster
from vecsift.distributed.routing import Router
from vecsift.errors import VecsiftError

MODES = ("dense", "sparse", "hybrid")
_STATS_KEPT = 4096  # BM25 statistics cached per (generation, text, scope)
_NO_SCOPE = {"tenant": None, "groups": None, "where": None}
_ONE_THREAD = {"threads": 1}  # one thread a shard: the shards (and nodes) are the parallelism
_COLLECTION_ARGS = ("index", "model", "pipeline_version", "filter_fields", "index_heading_path", "bm25_k1", "bm25_b")


def _ray():
    try:
        import ray
    except ImportError:
        raise ImportError('vecsift.distributed needs Ray: pip install "vecsift[ray]"') from None
    if not ray.is_initialized():
        ray.init(include_dashboard=False)
    return ray


class _RW:
    """Many searches or one commit's apply phase."""

    def __init__(self):
        self._c = threading.Condition()
        self._readers = 0
        self._writer = False

    def acquire_read(self):  # a search takes it on every call: no generator-based context manager
        with self._c:
            while self._writer:
                self._c.wait()
            self._readers += 1

    def release_read(self):
        with self._c:
            self._readers -= 1
            if not self._readers:
                self._c.notify_all()

    @contextmanager
    def write(self):
        with self._c:
            while self._writer or self._readers:
                self._c.wait()
            self._writer = True
        try:
            yield
        finally:
            with self._c:
                self._writer = False
                self._c.notify_all()


def _ray_nodes(ray) -> list:
    """Node ids of the alive Ray nodes, the driver's first (so one node means one place)."""
    try:
        here = ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - an old Ray: no preference
        here = None
    ids = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
    return sorted(ids, key=lambda i: i != here)


def _vectors(x, dim, name):
    q = np.asarray(x, dtype=np.float32)
    if q.ndim == 1:
        q = q[None, :]
    if q.ndim != 2 or q.shape[1] != dim:
        raise ValueError(f"{name} must have dimension {dim}, got shape {np.shape(x)}")
    if not np.isfinite(q).all():
        raise ValueError(f"{name} holds NaN or infinite values")
    return np.ascontiguousarray(q)


def _check_k(k, name="k"):
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
        raise ValueError(f"{name} must be a positive integer, got {k!r}")
    return int(k)


class ShardedCollection:
    """A collection split over Ray actors, with the Collection API. Create with create(), reopen with open()."""

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def create(cls, path, dim: int, metric: str = "cosine", *, shards: int = 3, routing: str = "hash",
               replicas: int = 0, tenant_spread=None, timeout: float = 10.0, actor_options=None,
               nodes: int | None = None, node_threads: int = 1, lanes: str | None = "socket",
               compiled: bool = False, **collection_args) -> "ShardedCollection":
        """Creates a sharded collection in directory `path` with `shards` shards, each a
        vecsift.Collection (collection_args: index, model, filter_fields, ... as Collection.create).

        routing: "hash" (rows by a hash of their id) or "tenant" (a tenant's rows on one shard,
        or on tenant_spread[tenant] shards). replicas: read copies per shard. timeout: default
        search deadline in seconds. nodes: node actors per copy level (default: one per alive Ray
        node, at most one per shard; shards are dealt over them). node_threads: threads a node
        actor searches its local shards with (1: one after the other). lanes: how one-query searches
        reach the node actors on this process's Ray node: "socket" (the default) over a Unix socket
        to each (sockets.py: no CPU while idle), "compiled" over Ray Compiled Graph channels
        (lanes.py: one core per channel kept busy polling it, even while idle), None classic Ray
        calls only; either lane falls back to the classic call whenever it is not ready, busy or
        failing, and node actors on other Ray nodes always get classic calls. compiled=True is
        lanes="compiled"."""
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        shards, replicas = _check_k(shards, "shards"), int(replicas)
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        unknown = set(collection_args) - set(_COLLECTION_ARGS) - {"m", "ef_construction", "ef", "oversample"}
        if unknown:
            raise TypeError(f"unknown collection arguments {sorted(unknown)}")
        router = Router(shards, routing)
        for t, n in (tenant_spread or {}).items():
            router.set_spread(t, n)
        path = os.path.abspath(os.fspath(path))
        os.makedirs(path, exist_ok=True)
        if os.path.exists(os.path.join(path, "CLUSTER")):
            raise FileExistsError(f"{path} already holds a sharded collection; use ShardedCollection.open")
        names = [f"shard-{i:02d}" for i in range(shards)]
        manifest = {"generation": 0, "dim": int(dim), "metric": metric, "routing": routing, "replicas": replicas,
                    "collection": dict(collection_args), "tenants": {}, "spread": router.spread,
                    "has_tenants": False, "has_acl": False, "created": time.time(),
                    "shards": [{"name": n, "prepared": 0, "ops": 0, "collection_generation": 0, "rows": 0}
                               for n in names]}
        self = cls(path, manifest, timeout, actor_options, create=True, nodes=nodes, node_threads=node_threads,
                   lanes="compiled" if compiled else lanes)
        write_cluster(path, manifest)
        return self

    @classmethod
    def open(cls, path, *, timeout: float = 10.0, actor_options=None, nodes: int | None = None,
             node_threads: int = 1, lanes: str | None = "socket", compiled: bool = False) -> "ShardedCollection":
        """Opens a sharded collection made by create(); the arguments as create's."""
        path = os.path.abspath(os.fspath(path))
        return cls(path, read_cluster(path), timeout, actor_options, create=False, nodes=nodes,
                   node_threads=node_threads, lanes="compiled" if compiled else lanes)

    def __init__(self, path, manifest, timeout, actor_options, create, nodes=None, node_threads=1,
                 lanes="socket"):
        if not isinstance(manifest, dict):
            raise TypeError("use ShardedCollection.create or ShardedCollection.open")
        if lanes not in ("socket", "compiled", None):
            raise ValueError(f'lanes must be "socket", "compiled" or None, got {lanes!r}')
        ray = _ray()
        self._path, self._m = path, manifest
        self._timeout = float(timeout)
        self._lockfd = os.open(os.path.join(path, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lockfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lockfd)
            raise VecsiftError(f"{path}: another process has this sharded collection open") from None
        self._gen = int(manifest["generation"])
        self._router = Router(len(manifest["shards"]), manifest["routing"], manifest["tenants"], manifest["spread"])
        self._load = np.array([s["rows"] for s in manifest["shards"]], np.int64)
        self._pending_tenants = self._pending_acl = False
        self._wlock = threading.RLock()
        self._rw = _RW()
        self._stats = OrderedDict()
        self._turn = itertools.count()
        self._session = uuid.uuid4().hex
        self._lanes = SocketLanes(ray) if lanes == "socket" else Lanes(ray) if lanes == "compiled" else None
        from vecsift.distributed.node import NodeServer

        n_shards, n_levels = len(manifest["shards"]), 1 + int(manifest["replicas"])
        ray_nodes = _ray_nodes(ray)
        groups = min(n_shards, len(ray_nodes)) if nodes is None else _check_k(nodes, "nodes")
        groups = min(groups, n_shards)
        self._group = [s % groups for s in range(n_shards)]  # shard -> node group
        self._members = [[s for s in range(n_shards) if s % groups == g] for g in range(groups)]
        self._node_threads = _check_k(node_threads, "node_threads")
        self._node_cls = ray.remote(**dict(num_cpus=0, max_restarts=-1, max_task_retries=0))(NodeServer)
        self._ray_nodes = ray_nodes
        self._actor_options = dict(actor_options or {})
        self._cargs = None
        if create:
            self._cargs = dict(dim=manifest["dim"], metric=manifest["metric"], **manifest["collection"])
        # self._nodes[level][group]: the node actor holding copy `level` of the group's shards
        self._nodes = [[self._start_node(level, g) for g in range(groups)] for level in range(n_levels)]
        # known generation of every copy (primary first); only copies at the cluster's serve searches
        self._copy_gen = [[-1] * n_levels for _ in range(n_shards)]
        # searches' copy orders per (generation, turn % levels), rebuilt after _copy_gen or _nodes change
        self._copies_lock = threading.Lock()
        self._copies_version = 0
        self._copies_at = {}
        try:
            for info in ray.get([n.ping.remote() for n in self._nodes[0]], timeout=120):
                for s, g in info["gens"].items():
                    self._copy_gen[s][0] = g
            self._sync_replicas()
        except BaseException:
            self._kill_actors()
            raise
        self._copies_changed()
        self._closed = False
        if isinstance(self._lanes, SocketLanes):
            self._lanes.prepare([n for level in self._nodes for n in level])

    def close(self) -> None:
        """Commits what is pending, stops the node actors and releases the writer lock."""
        if getattr(self, "_closed", True):
            return
        try:
            self.commit()
        finally:
            self._closed = True
            self._kill_actors()

    def _start_node(self, level: int, group: int, alive=None):
        """The node actor of one copy level of one node group, pinned to its Ray node (hard
        affinity: Ray restarts it there; Ray's soft affinity placed zero-CPU actors elsewhere).
        alive: the Ray nodes alive now; if the group's node is not among them (replace_primary
        after a node loss), Ray places the new actor (the shard directories are shared)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        opts = dict(self._actor_options)
        if "scheduling_strategy" not in opts and self._ray_nodes:
            node = self._ray_nodes[(group + level) % len(self._ray_nodes)]
            if alive is None or node in alive:
                opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        members = [(s, self._m["shards"][s]["name"]) for s in self._members[group]]
        cls = self._node_cls.options(**opts) if opts else self._node_cls
        return cls.remote(self._path, members, level, self._session, self._cargs if level == 0 else None,
                          self._node_threads)

    def _kill_actors(self):
        ray = _ray()
        if getattr(self, "_lanes", None) is not None:
            self._lanes.close()  # first: a compiled graph is torn down at once, a socket closed, while its actor lives
        for a in [n for level in getattr(self, "_nodes", []) for n in level]:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self._lockfd is not None:
            os.close(self._lockfd)
            self._lockfd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ properties
    @property
    def dim(self) -> int:
        return self._m["dim"]

    @property
    def path(self) -> str:
        return self._path

    @property
    def metric(self) -> str:
        return self._m["metric"]

    @property
    def generation(self) -> int:
        return self._gen

    @property
    def n_shards(self) -> int:
        return len(self._group)

    @property
    def routing(self) -> str:
        return self._router.routing

    def primary(self, shard: int):
        """The node actor holding shard `shard`'s primary (with the other primaries of its node)."""
        return self._nodes[0][self._group[shard]]

    def replicas(self, shard: int) -> list:
        """The node actors holding shard `shard`'s replicas, one per replica level."""
        return [level[self._group[shard]] for level in self._nodes[1:]]

    def node_shards(self, shard: int) -> list:
        """The shards whose copies share shard `shard`'s node actors (a node actor's death takes them all)."""
        return list(self._members[self._group[shard]])

    def replace_primary(self, shard: int) -> None:
        """Starts a new node actor for the primaries of shard `shard`'s node (node_shards(shard))
        when the old one is gone for good (ray.kill, restarts used up); it reopens each shard
        directory and its log as a restart would."""
        ray = _ray()
        with self._wlock:
            g = self._group[shard]
            try:
                ray.kill(self._nodes[0][g], no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            new = self._start_node(0, g, alive=set(_ray_nodes(ray)))
            for s, gen in ray.get(new.ping.remote(), timeout=120)["gens"].items():
                self._copy_gen[s][0] = gen
            self._nodes[0][g] = new
            self._copies_changed()

    def tenant_shards(self, tenant) -> list:
        """The shards a search of this tenant goes to."""
        return self._router.shards_for(tenant)

    def _live(self):
        if self._closed:
            raise VecsiftError("the sharded collection is closed")

    # ------------------------------------------------------------------ writing
    def set_tenant_spread(self, tenant, shards: int) -> None:
        """Spreads a (large, not yet seen) tenant's rows over `shards` shards instead of one."""
        with self._wlock:
            self._router.set_spread(tenant, shards)

    def add(self, ids, vectors, texts=None, doc_ids=None, tenant=None, acl=None, metadata=None, *,
            display_texts=None, source=None, heading_path=None, date=None, version=None, doc_type=None) -> None:
        """Adds (or replaces, by id) chunks, as Collection.add; searchable after commit()."""
        self._live()
        if isinstance(ids, str):
            raise TypeError("ids must be a sequence of strings")
        ids = [str(i) for i in ids]
        n = len(ids)
        vecs = _vectors(vectors, self.dim, "vectors")
        if len(vecs) != n:
            raise ValueError(f"{n} ids but {len(vecs)} vectors")
        cols = {"id": pa.array(ids, pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel(), pa.float32()), self.dim)}

        def per_row(name, value, typ=pa.string()):
            if value is None:
                return
            if isinstance(value, str) or not hasattr(value, "__len__"):
                value = [value] * n
            if len(value) != n:
                raise ValueError(f"{name}: {len(value)} values for {n} chunks")
            cols[name] = pa.array(list(value), typ)

        per_row("text", texts)
        per_row("display_text", display_texts)
        per_row("doc_id", doc_ids)
        per_row("tenant", tenant)
        for name, v in (("source", source), ("heading_path", heading_path), ("date", date), ("version", version),
                        ("doc_type", doc_type)):
            per_row(name, v)
        if acl is not None:
            if len(acl) != n:
                raise ValueError(f"acl: {len(acl)} entries for {n} chunks")
            cols["acl"] = pa.array([None if a is None else [str(g) for g in a] for a in acl], pa.list_(pa.string()))
        table = pa.table(cols)
        if metadata is not None:
            meta = pa.Table.from_pylist(list(metadata)) if not isinstance(metadata, dict) else pa.table(metadata)
            if meta.num_rows != n:
                raise ValueError(f"metadata: {meta.num_rows} rows for {n} chunks")
            for name in meta.column_names:
                if name in table.column_names:
                    raise ValueError(f"metadata field {name!r} clashes with a chunk column")
                table = table.append_column(name, meta[name])
        self.add_table(table)

    def add_table(self, table) -> None:
        """Adds chunks from a pyarrow Table / RecordBatch / parquet path (columns as Collection.add_table)."""
        self._live()
        if isinstance(table, (str, os.PathLike)):
            import pyarrow.parquet as pq

            table = pq.read_table(table)
        elif isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        if not isinstance(table, pa.Table):
            raise TypeError(f"add_table takes a pyarrow Table, RecordBatch or parquet path, got {type(table).__name__}")
        for need in ("id", "vector"):
            if need not in table.column_names:
                raise ValueError(f"add_table: missing column {need!r}")
        if table.num_rows == 0:
            return
        ids = table["id"].to_pylist()
        if any(not isinstance(i, str) for i in ids):
            raise TypeError("ids must be strings")
        tenants = table["tenant"].to_pylist() if "tenant" in table.column_names else None
        with self._wlock:
            before = (dict(self._router.tenants), self._load.copy())
            shard_of = self._router.route(ids, tenants, self._load)
            calls = {s: ("add", (table.take(pa.array(np.flatnonzero(shard_of == s))),))
                     for s in np.unique(shard_of).tolist()}
            try:
                self._write_all(calls, "add")
            except BaseException:
                self._router.tenants, self._load = before
                raise
            if tenants is not None and any(t is not None for t in tenants):
                self._pending_tenants = True
            if "acl" in table.column_names and table["acl"].null_count < table.num_rows:
                self._pending_acl = True

    def _write_all(self, calls: dict, what: str, deadline: float = 300):
        """Runs calls {shard: (method, args)} on the primaries, one call per node actor. A node actor
        that dies or is unreachable is waited for (Ray restarts it) and called again: adds are
        upserts and deletes idempotent, and the log a restarted shard replays holds a write at most
        twice. The Collection's own errors (bad input) are re-raised as they are."""
        ray = _ray()
        end = time.monotonic() + deadline
        out = {}
        per_node = {}
        for s, call in calls.items():
            per_node.setdefault(self._group[s], {})[s] = call
        todo = {g: self._nodes[0][g].write.remote(c) for g, c in per_node.items()}
        while todo:
            for g, ref in list(todo.items()):
                try:
                    out.update(ray.get(ref, timeout=max(0.1, end - time.monotonic())))
                    del todo[g]
                except ray.exceptions.RayTaskError as exc:
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, Exception):
                        raise cause from None
                    raise
                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
                    if time.monotonic() >= end:
                        raise VecsiftError(f"shard(s) {sorted(per_node[g])} did not complete {what} within "
                                           f"{deadline} s: {type(exc).__name__}") from None
                    time.sleep(0.2)
                    todo[g] = self._nodes[0][g].write.remote(per_node[g])
        return out

    def delete(self, ids=None, doc_ids=None) -> int:
        """Removes chunks by id and every chunk of the given documents (on every shard); durable at commit()."""
        self._live()
        if ids is None and doc_ids is None:
            raise ValueError("delete needs ids=... or doc_ids=...")
        if isinstance(ids, str) or isinstance(doc_ids, str):
            raise TypeError("ids and doc_ids must be sequences of strings")
        ids = None if ids is None else [str(i) for i in ids]
        doc_ids = None if doc_ids is None else [str(d) for d in doc_ids]
        with self._wlock:
            calls = {s: ("delete", (ids, doc_ids)) for s in range(self.n_shards)}
            return int(sum(self._write_all(calls, "delete").values()))

    def commit(self) -> None:
        """Makes every add and delete since the last commit durable and searchable on all shards at once."""
        self._live()
        with self._wlock:
            gen = self._gen + 1
            try:
                votes = self._on_every_primary("prepare", gen, deadline=120)
            except BaseException:
                for g, node in enumerate(self._nodes[0]):  # best effort: the ops stay pending for the next commit
                    node.write.remote({s: ("abort", (gen,)) for s in self._members[g]})
                raise
            m = dict(self._m)
            m["generation"] = gen
            m["tenants"] = {t: list(s) for t, s in self._router.tenants.items()}
            m["spread"] = dict(self._router.spread)
            m["has_tenants"] = m["has_tenants"] or self._pending_tenants
            m["has_acl"] = m["has_acl"] or self._pending_acl
            m["shards"] = [dict(s, prepared=gen, ops=votes[i]["ops"]) for i, s in enumerate(m["shards"])]
            write_cluster(self._path, m)  # the commit point
            self._m = m
            self._pending_tenants = self._pending_acl = False
            with self._rw.write():
                done = self._on_every_primary("apply", gen, deadline=300)
                for i, d in enumerate(done):
                    self._copy_gen[i][0] = d["gen"]
                    self._m["shards"][i].update(collection_generation=d["collection_generation"], rows=d["rows"])
                self._load = np.array([d["rows"] for d in done], np.int64)
                self._gen = gen
                self._copies_changed()
                self._stats.clear()
            self._sync_replicas()

    def _on_every_primary(self, method, *args, deadline: float):
        """Calls method on every primary; a primary that dies is waited for (Ray restarts it) and called again."""
        out = self._write_all({s: (method, args) for s in range(self.n_shards)}, method, deadline)
        return [out[s] for s in range(self.n_shards)]

    def _sync_replicas(self):
        """Replicas copy the primaries' new files; a replica that fails stays out of searches until it syncs."""
        ray = _ray()
        refs = {(level, g): node.sync.remote({s: self._nodes[0][g] for s in self._members[g]})
                for level, nodes in enumerate(self._nodes[1:], 1) for g, node in enumerate(nodes)}
        for (level, g), ref in refs.items():
            try:
                got = ray.get(ref, timeout=120)
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError, ray.exceptions.GetTimeoutError):
                got = {}
            for s in self._members[g]:
                self._copy_gen[s][level] = got.get(s, -1)
        self._copies_changed()

    def resync_replicas(self) -> None:
        """Brings replicas that missed a commit (dead at the time) up to date."""
        with self._wlock:
            self._sync_replicas()

    # ------------------------------------------------------------------ searching
    def search(self, vector=None, text=None, k: int = 10, tenant=None, groups=None, where=None, *, mode=None,
               candidates: int = 100, rrf_k: float = 60, weights=None, ef=None, oversample=None,
               allow_partial: bool = False, timeout: float | None = None,
               threads: int | None = None) -> SearchResult:
        """Top-k hits over all shards, as Collection.search (same scores: BM25 uses global statistics).

        Fails closed: a shard that cannot answer within `timeout` seconds raises
        ShardUnavailableError, unless allow_partial=True, which returns what the
        others found with result.partial and result.missing_shards set. threads: per
        shard (default 1: the shards are the parallelism)."""
        if text is None and tenant is None and groups is None and where is None and mode is None and ef is None \
                and oversample is None and threads is None and timeout is None and not allow_partial:
            hits = self._search_one(vector, k)  # one unfiltered dense query: the commonest call, leanest path
            if hits is not None:
                return hits
        if text is not None and not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        q = None
        if vector is not None:
            q = _vectors(vector, self.dim, "vector")
            if len(q) != 1:
                raise ValueError(f"search takes one vector, got {len(q)}; use search_batch")
        return self._search(q, None if text is None else [text], k, tenant, groups, where, mode, candidates,
                            rrf_k, weights, ef, oversample, allow_partial, timeout, threads)[0]

    def search_batch(self, vectors=None, texts=None, k: int = 10, tenant=None, groups=None, where=None, *,
                     mode=None, candidates: int = 100, rrf_k: float = 60, weights=None, ef=None, oversample=None,
                     allow_partial: bool = False, timeout: float | None = None, threads: int | None = None) -> list:
        """search() for many queries in one scatter/gather; one SearchResult per query."""
        q = None if vectors is None else _vectors(vectors, self.dim, "vectors")
        if texts is not None:
            if isinstance(texts, str):
                raise TypeError("texts must be a sequence of strings, got a single string")
            texts = list(texts)
            if not all(isinstance(t, str) for t in texts):
                raise TypeError("text queries must be strings")
            if q is not None and len(texts) != len(q):
                raise ValueError(f"{len(q)} vectors but {len(texts)} texts")
        return self._search(q, texts, k, tenant, groups, where, mode, candidates, rrf_k, weights, ef, oversample,
                            allow_partial, timeout, threads)

    def _search_one(self, vector, k):
        """search(vector, k) for one float32 vector of the collection's dimension and nothing else: what
        _search does for it, with the request made directly; None for anything else (a collection
        with tenants or ACLs, which refuses an unscoped search, bad input, a closed collection...),
        which the general path then serves, refuses or raises."""
        m = self._m
        if type(vector) is not np.ndarray or vector.dtype != np.float32 or vector.shape != (m["dim"],) \
                or not vector.flags.c_contiguous or type(k) is not int or k <= 0 \
                or m["has_tenants"] or m["has_acl"] or self._closed or not np.isfinite(vector).all():
            return None
        rw = self._rw
        rw.acquire_read()
        try:
            gen = self._gen
            shards = self._router.shards_for(None)
            if not shards:
                return SearchResult([], (), gen)
            table = self._copies_of(gen, next(self._turn))
            copies = table if len(shards) == len(table) else {s: table[s] for s in shards}
            req = pickle.dumps(("search", (gen, (vector.tobytes(), (1, m["dim"])), None, k, _NO_SCOPE, _ONE_THREAD)),
                               protocol=5)  # gather.request's bytes for it
            pieces, missing = gather(copies, req, gen, self._timeout, lanes=self._lanes)
        finally:
            rw.release_read()
        if missing:
            raise ShardUnavailableError(missing)
        return SearchResult(ranked_hits([p[0] for p in pieces], k, "dense_rank"), (), gen)

    def _search(self, q, texts, k, tenant, groups, where, mode, candidates, rrf_k, weights, ef, oversample,
                allow_partial, timeout, threads=None):
        self._live()
        k = _check_k(k)
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
        c = k
        if mode == "hybrid":
            c = _check_k(candidates, "candidates")
            if c < k:
                raise ValueError(f"candidates ({c}) must be >= k ({k})")
        # the security rules of Collection, checked before anything is sent: a shard holding
        # no tenant rows would not know it has to refuse
        if self._m["has_tenants"] and tenant is None:
            raise ValueError("this collection has tenants: search(tenant=...) is required")
        if self._m["has_acl"] and groups is None:
            raise ValueError("this collection has access control lists: search(groups=[...]) is required")
        scope = {"tenant": tenant, "groups": groups, "where": where}
        # one thread a shard: the shards are the parallelism (their kernels would oversubscribe the cores)
        opts = {n: v for n, v in (("ef", ef), ("oversample", oversample)) if v is not None}
        opts["threads"] = 1 if threads is None else threads
        timeout = self._timeout if timeout is None else float(timeout)
        nq = len(q) if q is not None else len(texts)
        self._rw.acquire_read()
        try:
            gen = self._gen
            shards = self._router.shards_for(tenant)
            if not shards:  # e.g. a tenant with no rows: nothing to score, nothing to leak
                return [SearchResult([], (), gen) for _ in range(nq)]
            table = self._copies_of(gen, next(self._turn))
            copies = {s: table[s] for s in shards}
            start = time.monotonic()
            missing = {}
            stats = None
            if mode != "dense":
                stats, missing = self._statistics(copies, gen, texts, scope, timeout, allow_partial)
                copies = {s: c_ for s, c_ in copies.items() if s not in missing}
            left = max(0.0, timeout - (time.monotonic() - start))
            tx = None if texts is None else (texts, stats)
            method = "search_hybrid" if mode == "hybrid" else "search"
            vec = q if mode != "sparse" else None
            # lanes for one query (where a call's cost shows); a batch amortises its call, and a slow
            # one would outlast the lane's wait (the hedge time) and be asked again the classic way
            pieces, failed = gather(copies, request(method, gen, vec, tx, c, scope, opts), gen, left,
                                    lanes=self._lanes if nq == 1 else None)
            missing.update(failed)
        finally:
            self._rw.release_read()
        if missing and not allow_partial:
            raise ShardUnavailableError(missing)
        out = []
        for i in range(nq):
            per_shard = [p[i] for p in pieces]  # one merged list per node actor that answered
            if mode == "dense":
                hits = ranked_hits(per_shard, k, "dense_rank")
            elif mode == "sparse":
                hits = ranked_hits(per_shard, k, "sparse_rank")
            else:
                hits = self._fuse(per_shard, k, c, rrf_k, weights)
            out.append(SearchResult(hits, missing, gen))
        return out

    def _copies_of(self, gen, turn):
        """{shard: _copies(shard, gen, turn)} for every shard, worked out once per (gen, turn % levels)
        and kept until the copies change (a search asks this on every call)."""
        key = (gen, turn % len(self._nodes))
        table = self._copies_at.get(key)
        if table is None:
            version = self._copies_version
            table = {s: self._copies(s, gen, turn) for s in range(len(self._group))}
            with self._copies_lock:
                if version == self._copies_version:  # not changed meanwhile: keep it
                    self._copies_at[key] = table
        return table

    def _copies_changed(self):
        """After any change of _copy_gen or _nodes: searches work their copy orders out again."""
        with self._copies_lock:
            self._copies_version += 1
            self._copies_at = {}

    def _copies(self, s, gen, turn=0):
        """[(node key, node actor)] holding shard s at generation gen. The copy levels rotate by
        `turn` (reads spread over replicas), the same for every shard of a search, so shards
        sharing node actors are asked in one call."""
        n = len(self._nodes)
        g = self._group[s]
        order = [(turn + i) % n for i in range(n)]
        return [((level, g), self._nodes[level][g]) for level in order if self._copy_gen[s][level] == gen]

    def _statistics(self, copies, gen, texts, scope, timeout, allow_partial):
        """Global BM25 statistics of each text over the asker's allowed rows on every shard it
        routes to, summed; cached per (generation, text, scope) unless some shard was missing."""
        key_scope = repr((scope["tenant"], scope["groups"], sorted((scope["where"] or {}).items())))
        todo = sorted({t for t in texts if (gen, t, key_scope) not in self._stats})
        fresh, missing = {}, {}
        if todo:
            pieces, missing = gather(copies, request("statistics", gen, todo, scope), gen, timeout,
                                     lanes=self._lanes if len(todo) == 1 else None)
            if missing and not allow_partial:
                raise ShardUnavailableError(missing)
            if pieces:  # each node actor summed its shards; the sum of the sums
                fresh = dict(zip(todo, merge_payloads("statistics", (), pieces)))
            else:
                fresh = {t: {"n": 0, "total_len": 0, "df": {}} for t in todo}
            if not missing:
                for t, total in fresh.items():
                    self._stats[(gen, t, key_scope)] = total
                while len(self._stats) > _STATS_KEPT:
                    self._stats.popitem(last=False)
        return [fresh.get(t) or self._stats[(gen, t, key_scope)] for t in texts], missing

    @staticmethod
    def _fuse(per_shard, k, c, rrf_k, weights):
        """Globally merged dense and sparse candidates (c each), fused with RRF as Collection does;
        Hits are made only for the k returned (distance None, as a Collection's hybrid hits)."""
        from vecsift.text import rrf

        dense = [d for d, _ in per_shard]
        sparse = [sp for _, sp in per_shard]
        key, where = {}, []
        lists = []
        for packed in (dense, sparse):
            order = merged_order(packed, c)
            keys = []
            for i, j in order:
                cols = packed[i]
                hid = cols[ID][j]
                if hid not in key:
                    key[hid] = len(where)
                    where.append((cols, j))
                keys.append(key[hid])
            lists.append(np.array(keys, np.int64))
        ids, fused, ranks = rrf(lists, k=rrf_k, weights=weights, top_n=k, return_ranks=True)
        return [hit_of(*where[i], score=float(f), dense_rank=int(dr) or None, sparse_rank=int(sr) or None,
                       distance=None)
                for i, f, (dr, sr) in zip(ids.tolist(), fused.tolist(), ranks.tolist())]

    # ------------------------------------------------------------------ inspection
    def info(self) -> dict:
        """Rows, generation, routing and each shard's Collection.info()."""
        self._live()
        shards = self._on_every_primary("info", deadline=60)
        return {"path": self._path, "generation": self._gen, "rows": sum(s.get("rows", 0) for s in shards),
                "shards": len(shards), "replicas": self._m["replicas"], "routing": self.routing,
                "dim": self.dim, "metric": self.metric, "tenants": len(self._router.tenants),
                "has_tenants": self._m["has_tenants"], "has_acl": self._m["has_acl"], "shard_info": shards}

    def __len__(self) -> int:
        return self.info()["rows"]

    def ids(self) -> list:
        """Ids of the searchable chunks, shard by shard (primaries)."""
        self._live()
        return [i for part in self._on_every_primary("ids", deadline=120) for i in part]

    def __repr__(self) -> str:
        return (f"<vecsift.distributed.ShardedCollection {self._path!r} shards={self.n_shards} "
                f"replicas={self._m['replicas']} routing={self.routing} generation={self._gen}>")
