"""The node server: one Ray actor serving every shard copy a node holds (distributed.cluster makes it an actor).

A ShardedCollection places one NodeServer per node and copy level: level 0 holds
the primaries (ShardServer objects, each a writable Collection directory and its
transaction log), level r >= 1 the r-th replica of the same shards (ReplicaServer
objects). As an Elasticsearch node answers for its local shards, a search phase
makes one call per node actor it needs, naming the shards it wants there; the
actor searches them (one after the other, or on `threads` threads: the C++ core
releases the GIL in its scans) and answers with one merged candidate list per
query (top k by score, ties by id; for hybrid a dense and a sparse list; for the
BM25 statistics phase the sums), plus which asked-for shards it could not serve
at the search's generation.

A node actor is one process: when it dies, every shard copy in it goes with it.
Ray restarts it (max_restarts=-1) and the constructor reopens each shard from its
directory as a ShardServer or ReplicaServer does on its own (manifest, then the
log's committed generations), so a restarted node answers at the committed
generation; meanwhile searches go to the same shards' copies on other node
actors (replicas), and writes wait for the restart.
"""
from __future__ import annotations

import functools
import os
import pickle
import threading
import time
from itertools import islice, repeat
from operator import eq

from vecsift.collection import search_parts
from vecsift.distributed.gather import HIT_FIELDS, SCORE, merge_packed, pack_hits, read_request
from vecsift.distributed.shard import ReplicaServer, ShardServer
from vecsift.errors import VecsiftError

_SEARCHING = frozenset({"search", "search_hybrid", "statistics"})
_WRITES = frozenset({"add", "delete", "prepare", "abort", "apply", "info", "ids"})
_ONE_QUERY_OPTS = frozenset({"threads", "ef"})  # the options Collection.search takes on its fast path


def _user_error(exc) -> bool:
    """The Collection's own errors (bad input) are the caller's and go back to it as they are."""
    return isinstance(exc, (ValueError, TypeError, KeyError, VecsiftError)) and not isinstance(exc, RuntimeError)


def merge_hits(parts: list, k: int) -> list:
    """Shards' Hit lists (search_hits, one list per query each) merged into one packed list per query
    of the k best: by score, ties by id, then shard order, as merge_packed orders packed lists;
    only the k sent are packed."""
    if len(parts) == 1:
        return [pack_hits(h if len(h) <= k else sorted(h, key=_hit_key)[:k]) for h in parts[0]]
    out = []
    for per_query in zip(*parts):
        hits = [h for shard in per_query for h in shard]
        hits.sort(key=_hit_key)  # stable: equal keys keep shard order
        out.append(pack_hits(hits[:k]))
    return out


def _hit_key(h):
    return -h.score, h.id


def merge_rows(parts: list, k: int) -> tuple:
    """One query's answers from several shards merged into one packed list of the k best, as
    merge_hits merges Hit lists; the fields of Hits are read only for the k kept. parts: per shard
    (rows, scores, columns) from _Serving.search_rows (rows padded with -1, best first; columns(rows,
    scores, dense ranks) -> packed fields of those rows), or a Hit list (search_hits, the general path)."""
    lists = []  # per part: (rows or None, scores, ranks or None, columns, or packed columns when rows is None)
    for p in parts:
        if type(p) is tuple:
            rows, scores, columns = p
            ranks = None
            if rows and min(rows) < 0:  # padding: a shard with fewer allowed rows than k
                keep = [j for j, r in enumerate(rows) if r >= 0]
                rows, scores, ranks = [rows[j] for j in keep], [scores[j] for j in keep], [j + 1 for j in keep]
            lists.append((rows, scores, ranks, columns))
        else:
            cols = pack_hits(p)
            lists.append((None, cols[SCORE], None, cols))
    flat, part_of, start = [], [], []  # every candidate's score; its part; where each part starts in flat
    for i, part in enumerate(lists):
        start.append(len(flat))
        flat += part[1]
        part_of += repeat(i, len(part[1]))
    order = sorted(range(len(flat)), key=flat.__getitem__, reverse=True)[:k + 1]
    top = [flat[f] for f in order]
    if any(map(eq, top, islice(top, 1, None))):
        # equal scores among the k kept or at the cut: ordered by id (merge_hits' order), which needs
        # every candidate's id: read them all
        return merge_packed([part[3] if part[0] is None else
                             part[3](part[0], part[1], part[2] or list(range(1, len(part[0]) + 1)))
                             for part in lists], k)
    # distinct scores: by score alone is merge_hits' order
    keys = [(part_of[f], f - start[part_of[f]]) for f in order[:k]]
    if not keys:
        return tuple([] for _ in HIT_FIELDS)
    chosen = [[] for _ in lists]  # per part: the positions kept, best first
    for i, j in keys:
        chosen[i].append(j)
    pieces = []  # per part: the kept hits as rows (tuples of the Hit fields)
    for (rows, scores, ranks, columns), js in zip(lists, chosen):
        if not js:
            pieces.append(None)
        elif rows is None:
            pieces.append(list(zip(*columns)))
        else:
            cols = columns([rows[j] for j in js], [scores[j] for j in js],
                           [j + 1 for j in js] if ranks is None else [ranks[j] for j in js])
            if len(js) == len(keys):
                return cols  # every hit kept is this shard's, read in this order
            pieces.append(iter(list(zip(*cols))))
    picked = [next(pieces[i]) if lists[i][0] is not None else pieces[i][j] for i, j in keys]
    return tuple(map(list, zip(*picked)))


def merge_payloads(method: str, args: tuple, parts: list):
    """Several shards' answers to one search phase merged into one (the same shape as one shard's)."""
    if len(parts) == 1:
        return parts[0]
    if method == "statistics":
        out = []
        for per_text in zip(*parts):
            total = {"n": 0, "total_len": 0, "df": {}}
            for st in per_text:
                total["n"] += st["n"]
                total["total_len"] += st["total_len"]
                df = total["df"]
                for w, d in st["df"].items():
                    df[w] = df.get(w, 0) + d
            out.append(total)
        return out
    k = args[3]  # search(gen, vectors, texts, k, ...), search_hybrid(gen, vectors, texts, c, ...)
    if method == "search":
        return [merge_packed(list(per_query), k) for per_query in zip(*parts)]
    return [(merge_packed([d for d, _ in per_query], k), merge_packed([sp for _, sp in per_query], k))
            for per_query in zip(*parts)]


class _PrimaryProxy:
    """What ReplicaServer.sync reads from: one shard of a primary node actor, through Ray."""

    def __init__(self, handle, shard):
        self.handle, self.shard = handle, shard

    def list_files(self):
        import ray

        return ray.get(self.handle.list_files.remote(self.shard))

    def read_file(self, name, offset, length):
        import ray

        return ray.get(self.handle.read_file.remote(self.shard, name, offset, length))


def _one_at_a_time(method):
    """A node actor runs its classic calls one at a time, and its compiled-graph searches (lanes.py) and
    socket-lane searches (sockets.py) on threads of their own: this lock keeps them from overlapping,
    as a plain actor would."""
    @functools.wraps(method)
    def run(self, *args):
        with self._serial:
            return method(self, *args)
    return run


class NodeServer:
    """The shard copies of one node at one copy level. members: [(shard number, shard name)];
    level 0: primaries (created with create_args when their directory is new), level r: replica r-1."""

    def __init__(self, root, members, level: int, session=None, create_args=None, threads: int = 1):
        self.root, self.level = root, int(level)
        self.started = time.time()
        self.node_calls = 0
        self.threads = max(1, int(threads))
        self._serial = threading.Lock()
        self._pool = None
        self._socket = None  # sockets.SocketServer, opened on the first open_socket()
        self._socket_lock = threading.Lock()
        self.shards = {}
        for s, name in members:
            if self.level == 0:
                self.shards[int(s)] = ShardServer(root, name, session, create_args)
            else:
                self.shards[int(s)] = ReplicaServer(root, f"{name}-r{self.level - 1}")

    def ping(self):
        try:
            import ray

            node = ray.get_runtime_context().get_node_id()
        except Exception:  # noqa: BLE001 - not in a Ray worker (tests of the plain class)
            node = None
        return {"pid": os.getpid(), "node": node, "started": self.started, "level": self.level,
                "node_calls": self.node_calls,
                "gens": {s: srv.gen for s, srv in self.shards.items()},
                "calls": {s: srv.calls for s, srv in self.shards.items()}}

    # ---- the socket lane (sockets.py): `call` over a Unix socket for a driver on this Ray node
    def open_socket(self):
        """(socket path, token, Ray node id): this actor's lane socket, listening from the first ask on
        (a thread blocked in accept, one per connection blocked in recv: no CPU while idle). Frames are
        answered by `call`, under the same lock as every other call."""
        import ray

        from vecsift.distributed import sockets

        with self._socket_lock:
            if self._socket is None or not self._socket.alive():
                if self._socket is not None:
                    self._socket.close()
                else:
                    sockets.sweep()  # directories of node actors killed without closing theirs
                    import atexit

                    atexit.unregister(self.close_socket)
                    atexit.register(self.close_socket)  # a clean exit removes the directory too
                self._socket = sockets.SocketServer(self.call)
            return self._socket.path, self._socket.token, ray.get_runtime_context().get_node_id()

    def close_socket(self) -> None:
        """Stops the lane socket and removes its directory (the driver's close, before it kills the actor)."""
        with self._socket_lock:
            if self._socket is not None:
                self._socket.close()
                self._socket = None

    def socket_stats(self) -> dict:
        """For tests: the lane socket's directory, frames answered and connections refused."""
        srv = self._socket
        return {} if srv is None else {"dir": srv.dir, "served": srv.served, "refused": srv.refused,
                                       "open": srv.alive()}

    # ---- searching
    @_one_at_a_time
    def call(self, req: bytes) -> bytes:
        """One search phase over some of this node's shards. req: pickled (shards, phase request) where
        the phase request is gather.request's bytes, (method, (gen, ...)). Answers pickled
        (served shards, {unserved shard: reason}, the served shards' merged payload)."""
        self.node_calls += 1
        shards, inner = pickle.loads(req)
        method, args = read_request(inner)
        if method not in _SEARCHING:
            raise ValueError(f"not a search method: {method!r}")
        gen = args[0]
        # dense / sparse: the shards' Hits, merged here and packed once (search would pack each shard's);
        # one unfiltered dense query: the shards' rows and scores, Hit fields read only for the k kept
        run_method = "search_hits" if method == "search" else method
        one = method == "search" and args[2] is None and len(args[1]) == 1 and args[5].keys() <= _ONE_QUERY_OPTS \
            and all(v is None for v in args[4].values())
        todo, unserved = [], {}
        for s in shards:
            srv = self.shards.get(s)
            if srv is None:
                unserved[s] = "not on this node"
            elif srv.gen != gen or srv.col is None:
                unserved[s] = f"copy at generation {srv.gen}, search at {gen}"
            else:
                todo.append((s, srv))

        def run(item):
            s, srv = item
            try:
                if one:
                    got_gen, payload = srv.search_rows(gen, args[1][0], args[3], args[5])
                    if payload is None and got_gen == gen:  # not on the fast path: search_hits' Hits
                        got_gen, payload = srv.search_hits(*args)
                        payload = None if payload is None else payload[0]
                else:
                    got_gen, payload = getattr(srv, run_method)(*args)
            except Exception as exc:  # noqa: BLE001 - sorted below: bad input goes back, a fault marks the shard
                if _user_error(exc):
                    raise
                return s, None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            if got_gen != gen or payload is None:
                return s, None, f"copy at generation {got_gen}, search at {gen}"
            return s, payload, None

        done = self._search_parts(todo, args[1][0], args[3], args[5]) if one and todo else None
        if done is None:
            if self.threads > 1 and len(todo) > 1:
                if self._pool is None:
                    from concurrent.futures import ThreadPoolExecutor

                    self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="vecsift-node")
                done = list(self._pool.map(run, todo))
            else:
                done = [run(item) for item in todo]
        served, parts = [], []
        for s, payload, why in done:
            if why is None:
                served.append(s)
                parts.append(payload)
            else:
                unserved[s] = why
        if not parts:
            merged = None
        elif one:
            merged = [merge_rows(parts, args[3])]
        elif method == "search":
            merged = merge_hits(parts, args[3])
        else:
            merged = merge_payloads(method, args, parts)
        return pickle.dumps((served, unserved, merged), protocol=5)

    @staticmethod
    def _search_parts(todo, vector, k, opts):
        """One unfiltered dense query over all of `todo`'s shards in two native calls (collection.parts),
        when every shard's index takes that route: [(shard, (rows, scores, columns), None)] as run()
        gives, else None (the shards are then searched one by one)."""
        plans = []
        for s, srv in todo:
            got = srv.col._search_part(k, **opts)
            if got is None:
                return None
            plans.append(got)
        try:
            rows = search_parts(vector, [p for p, _ in plans], k)
        except Exception:  # noqa: BLE001 - shard by shard, each error is told (or raised) for its own shard
            return None
        if rows is None:
            return None
        out = []
        for (s, srv), (r, sc), (_, columns) in zip(todo, rows, plans):
            srv.calls += 1
            out.append((s, (r, sc, columns), None))
        return out

    # ---- writing (primaries; the driver serialises writes)
    @_one_at_a_time
    def write(self, calls: dict) -> dict:
        """{shard: (method, args)} run on this node's shards in shard order; {shard: result}."""
        out = {}
        for s, (method, args) in sorted(calls.items()):
            if method not in _WRITES:
                raise ValueError(f"not a write method: {method!r}")
            srv = self.shards.get(s)
            if srv is None:
                raise RuntimeError(f"shard {s} is not on this node")
            if self.level != 0 and method not in ("info", "ids"):
                raise RuntimeError(f"shard {s}: a replica takes no writes")
            out[s] = getattr(srv, method)(*args)
        return out

    # ---- replication
    @_one_at_a_time
    def list_files(self, shard):
        return self.shards[shard].list_files()

    @_one_at_a_time
    def read_file(self, shard, name, offset, length):
        return self.shards[shard].read_file(name, offset, length)

    @_one_at_a_time
    def sync(self, primaries: dict) -> dict:
        """Replica copies: each shard s copies what changed on its primary (primaries: {s: node actor}).
        {s: generation now served, or -1 for a copy that could not sync (it stays out of searches)}."""
        out = {}
        for s, handle in sorted(primaries.items()):
            try:
                out[s] = self.shards[s].sync(_PrimaryProxy(handle, s))
            except Exception:  # noqa: BLE001 - this copy stays out until a later sync works
                out[s] = -1
        return out
