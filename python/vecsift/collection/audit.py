"""The retrieval audit log: for every search, who asked (tenant, ACL groups), under which filter,
in which mode, for how many results, which chunk ids came back, and how long it took.

Enabled per collection (Collection.create(..., audit=...) / set_audit), the settings live in the
manifest, so every process that opens the collection, readers included, appends to the same log.
Query texts and vectors are recorded only with record_query=True.

Files, in the collection directory:

    audit-000001.log ...   append-only, rotated by size (max_bytes), the newest `keep` kept
    audit.lock             flock taken by the process appending (threads and processes)

A record is one frame, written by one write() under the lock, so records of concurrent writers
never interleave:

    head  "VSA1" | u32 payload length | u64 seq | u32 prev      (prev: CRC-32C of the record before)
    payload        compact JSON
    tail  u32 CRC-32C(head + payload) | u32 payload length      (the length again: the tail is read backwards)

seq numbers and prev checksums chain the records across files, so a record removed, reordered or
altered is found by read_log(). CRC-32C catches accidents (torn writes, bad sectors, a truncated
copy), not a forger who rewrites the chain: ship the files to write-once storage for that.

A crash can leave a torn last record. It is reported, not fatal: the next writer does not append
after it but starts the next file, whose first record (event "damaged_tail") chains to the last
whole record.

Buffering: records are queued in memory and written every flush_ms (default 100 ms) by the search
that finds the last write 0.9 flush_ms old, or, when no search comes, by a background thread that
sleeps in the core until flush_ms after the first record queued since the last write (so it never
runs while searches come); also at close, at exit, and when 10,000 are queued. A process that dies
loses at most
the records of its last flush_ms; a power loss also loses what the OS had not written back, unless
fsync=True. flush_ms=0 writes each record before the search returns. A write that fails (disk
full, no permission) makes every later search of that collection raise AuditError until a write
succeeds: retrievals are not served unaudited.
"""
from __future__ import annotations

import atexit
import base64
import fcntl
import functools
import inspect
import json
import operator
import os
import re
import struct
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field

from vecsift import _core
from vecsift.errors import VecsiftError
from vecsift.storage.checksum import crc32c

DEFAULTS = {"max_bytes": 64 << 20, "keep": 8, "record_query": False, "flush_ms": 100, "fsync": False}
MAGIC = b"VSA1"
HEAD = struct.Struct("<4sIQI")
TAIL = struct.Struct("<II")
MAX_RECORD = 64 << 20  # a payload larger than this is not a record of ours
MAX_PENDING = 10_000  # queued records that make the search thread flush itself (bounds memory)
LOCK_NAME = "audit.lock"
_NAME = re.compile(r"^audit-(\d{6,})\.log$")


class AuditError(VecsiftError):
    """The audit log could not be written; searches are refused until it can."""


def normalise(value) -> dict:
    """The stored settings of audit=...: {} (off) for None/False, DEFAULTS for True, or a dict over them."""
    if value is None or value is False:
        return {}
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise TypeError(f"audit must be True, False, None or a dict of settings, got {type(value).__name__}")
    unknown = set(value) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown audit settings {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    cfg = {**DEFAULTS, **value}
    for name, low in (("max_bytes", 4096), ("keep", 1), ("flush_ms", 0)):
        v = cfg[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"audit {name} must be an integer >= {low}, got {v!r}")
    for name in ("record_query", "fsync"):
        if not isinstance(cfg[name], bool):
            raise TypeError(f"audit {name} must be a bool, got {cfg[name]!r}")
    return cfg


# ---------------------------------------------------------------------------- frames

def frame(seq: int, prev: int, payload: bytes) -> tuple[bytes, int]:
    """(the record's bytes, its CRC-32C, which the next record names as prev)."""
    data = HEAD.pack(MAGIC, len(payload), seq, prev) + payload
    crc = crc32c(data)
    return data + TAIL.pack(crc, len(payload)), crc


def parse(data, off: int):
    """(seq, prev, crc, payload bytes, end offset) of the record at `off`, or None if it is not a whole,
    intact record."""
    if len(data) - off < HEAD.size + TAIL.size:
        return None
    magic, n, seq, prev = HEAD.unpack_from(data, off)
    end = off + HEAD.size + n + TAIL.size
    if magic != MAGIC or n > MAX_RECORD or end > len(data):
        return None
    crc, n2 = TAIL.unpack_from(data, end - TAIL.size)
    body = off + HEAD.size
    if n2 != n or crc32c(data[off:body + n]) != crc:
        return None
    return seq, prev, crc, bytes(data[body:body + n]), end


def torn(data, off: int) -> bool:
    """Is the damage at `off` what an interrupted write leaves: a prefix of a record, or zeros
    (a file extended by a crash before its data reached the disk)?"""
    rest = bytes(data[off:])
    if not any(rest):
        return True
    if rest[:4] != MAGIC[:len(rest[:4])]:
        return False
    if len(rest) < HEAD.size:
        return True
    magic, n, _, _ = HEAD.unpack_from(rest)
    return n <= MAX_RECORD and HEAD.size + n + TAIL.size > len(rest)


def log_files(directory) -> list[tuple[int, str]]:
    """(number, name) of the audit files, oldest first."""
    out = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return out
    for name in names:
        m = _NAME.match(name)
        if m:
            out.append((int(m.group(1)), name))
    return sorted(out)


def _file_name(number: int) -> str:
    return f"audit-{number:06d}.log"


def _scan_good(data) -> tuple[int, int, int]:
    """(end of the last whole record from the start, its seq, its crc): 0, 0, 0 if there is none."""
    off, seq, crc = 0, 0, 0
    while True:
        rec = parse(data, off)
        if rec is None:
            return off, seq, crc
        seq, _, crc, _, off = rec


# ---------------------------------------------------------------------------- writing

@dataclass
class _Tail:
    number: int  # the file appended to
    size: int  # its size after our last write
    seq: int  # the last record's seq and crc
    crc: int


class AuditLog:
    """The writer side: one per open collection object (thread-safe, shared by its searches)."""

    def __init__(self, directory, cfg: dict):
        self.directory = os.fspath(directory)
        self.cfg = cfg
        self._queue = deque()
        self._flush_lock = threading.Lock()
        self._tail = None
        self._error = None
        self._thread = None
        self._timer = None  # the idle flush's deadline (_core.IdleTimer), made with the thread
        self._closed = False
        self._lock_fd = None  # the audit.lock descriptor while a write holds the flock
        self._period = cfg["flush_ms"] / 1000
        # searches flush a little before the idle flush would, so while they come it never has to
        self._soon = 0.9 * self._period
        self._eager = cfg["flush_ms"] == 0
        self._last = time.perf_counter()  # of the last flush
        if not os.access(self.directory, os.W_OK):
            raise AuditError(f"{self.directory}: audit is enabled but the directory is not writable")
        _LIVE.add(self)

    # -- the search thread's side: cheap
    def add(self, payload, now: float | None = None) -> None:
        """Queues a record: its bytes, or a _Call that the flush encodes (`now`: time.perf_counter() if
        the caller has it).

        While searches come, the search that finds the last flush 0.9 flush_ms old writes the queue
        (one batch, a fraction of a millisecond every flush_ms). A background thread writes what is
        left when they stop: it sleeps in the core until flush_ms after the first record queued since
        the last flush (_core.IdleTimer), and a flush by a search moves that deadline without waking
        it. So while searches come it never runs: a thread that woke every flush_ms to look would take
        the GIL from the searches each time (on a loaded machine, measured: 15% fewer QPS on the hnsw
        benchmark, none of it CPU time), and one that encoded and wrote records would contend for it
        more (14%). After a failed write the record is queued and written first by the next write that
        succeeds; until one does, this raises AuditError (the search is refused)."""
        self._queue.append(payload)
        if self._eager or self._error is not None or len(self._queue) >= MAX_PENDING or self._closed:
            self.flush()
        elif (time.perf_counter() if now is None else now) - self._last >= self._soon:
            if self._flush_lock.acquire(blocking=False):  # another thread flushing: it takes this one too
                try:
                    self._flush_locked()
                finally:
                    self._flush_lock.release()
        else:
            timer = self._timer
            if timer is None:
                self._start()
            else:
                timer.arm_in(self._period)  # the first record since a flush sets the deadline

    def check(self) -> None:
        """After a failed write: tries again, and raises AuditError if it still fails."""
        if self._error is not None:
            self.flush()

    def _raise(self):
        err = self._error
        raise AuditError(f"{self.directory}: the audit log could not be written ({err}); "
                         "searches are refused until it can") from err

    def _start(self) -> None:
        with self._flush_lock:
            if self._thread is None and not self._closed:
                self._timer = _core.IdleTimer()
                self._timer.arm_in(self._period)
                self._thread = threading.Thread(target=self._run, args=(self._timer,), name="vecsift-audit",
                                                daemon=True)
                self._thread.start()

    def _run(self, timer) -> None:
        while timer.wait():  # in the core, without the GIL, until a deadline passes with no flush
            if self._queue:
                try:
                    self.flush()
                except AuditError:
                    pass  # kept in self._error; the next search raises it

    # -- writing
    def flush(self) -> None:
        """Writes every queued record (one write() under the lock); raises AuditError if it cannot."""
        with self._flush_lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._last = time.perf_counter()
        if self._timer is not None:
            self._timer.clear()  # before the queue is taken: a record queued after that sets it again
        if not self._queue:
            return
        items = []
        while self._queue:
            try:
                items.append(self._queue.popleft())
            except IndexError:
                break
        try:
            self._write([it if type(it) is bytes else encode(it) for it in items])
        except OSError as exc:
            self._queue.extendleft(reversed(items))  # kept for the next attempt
            self._error = exc
            self._raise()
        self._error = None

    def _write(self, payloads) -> None:
        lock = self._lock_fd = os.open(os.path.join(self.directory, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            tail, events = self._locate()
            out = []
            seq, crc = tail.seq, tail.crc
            head, tail_of, append = HEAD.pack, TAIL.pack, out.append
            for p in events + payloads:  # frame() inlined: ~1 us a record
                seq += 1
                n = len(p)
                rec = head(MAGIC, n, seq, crc) + p
                crc = crc32c(rec)
                append(rec)
                append(tail_of(crc, n))
            data = b"".join(out)
            path = os.path.join(self.directory, _file_name(tail.number))
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view, done = memoryview(data), 0
                while done < len(data):  # a short write is continued, still under the lock
                    done += os.write(fd, view[done:])
                if self.cfg["fsync"]:
                    os.fsync(fd)
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            self._tail = _Tail(tail.number, size, seq, crc)
        finally:
            self._lock_fd = None
            os.close(lock)  # releases the flock

    def _locate(self) -> tuple[_Tail, list]:
        """Under the lock: the file to append to and the chain's state, rotating by size, starting a new
        file after a damaged tail, removing files past `keep`. Returns (tail, event payloads to write first)."""
        files = log_files(self.directory)
        events = []
        if not files:
            tail = _Tail(1, 0, 0, 0)
        else:
            number, name = files[-1]
            path = os.path.join(self.directory, name)
            size = os.path.getsize(path)
            cached = self._tail
            if cached is not None and cached.number == number and cached.size == size:
                tail = cached  # nobody wrote since our last write
            else:
                seq, crc, damage = _chain_end(self.directory, files)
                tail = _Tail(number, size, seq, crc)
                if damage is not None:  # never append after damage: the next file, chained to the last whole record
                    events.append(json.dumps({"event": "damaged_tail", "file": name, "good_bytes": damage,
                                              "bytes": size, "t": time.time(), "pid": os.getpid()}).encode())
                    tail = _Tail(number + 1, 0, seq, crc)
            if tail.size >= self.cfg["max_bytes"]:
                tail = _Tail(tail.number + 1, 0, tail.seq, tail.crc)
        newest = tail.number
        for number, name in files:
            if number <= newest - self.cfg["keep"]:
                try:
                    os.unlink(os.path.join(self.directory, name))
                except FileNotFoundError:
                    pass
        return tail, events

    def close(self) -> None:
        """Stops the flush thread and writes what is queued (raises AuditError if it cannot)."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.close()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()
        _LIVE.discard(self)
        self.flush()

    def _after_fork(self) -> None:
        # The parent writes its own queued records; the child starts empty, without the parent's thread.
        # A fork during a write copied the locked descriptor: the child's copy would hold the flock
        # for as long as it lives, so it is closed here (the parent's write releases it).
        if self._lock_fd is not None:
            try:
                os.close(self._lock_fd)
            except OSError:
                pass
            self._lock_fd = None
        self._error = None
        self._queue = deque()
        self._flush_lock = threading.Lock()
        self._thread = None
        if self._timer is not None:  # its mutex may have been held by the parent's thread: never used
            _FORKED_AWAY.append(self._timer)  # again, nor destroyed (a waited-on condition variable)
        self._timer = None
        self._tail = None


def _chain_end(directory, files) -> tuple[int, int, int | None]:
    """(seq, crc) of the last whole record of the newest file (an empty one defers to the file before),
    and None, or, if the file ends in something else, the offset where its whole records end."""
    if not files:
        return 0, 0, None
    with open(os.path.join(directory, files[-1][1]), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            seq, crc, _ = _chain_end(directory, files[:-1])
            return seq, crc, None
        if size >= HEAD.size + TAIL.size:  # the usual case: the last record, found from its tail
            f.seek(size - TAIL.size)
            _, n = TAIL.unpack(f.read(TAIL.size))
            start = size - TAIL.size - n - HEAD.size
            if start >= 0 and n <= MAX_RECORD:
                f.seek(start)
                rec = parse(f.read(), 0)
                if rec is not None:
                    return rec[0], rec[2], None
        f.seek(0)
        good, seq, crc = _scan_good(f.read())  # damaged (rare): read the file from the start
    if good == 0:
        seq, crc, _ = _chain_end(directory, files[:-1])
    return seq, crc, good


# ---------------------------------------------------------------------------- records
# A record is encoded by the search that made it, before it returns: then it holds what the caller
# passed and got back at that moment (they may reuse and change their lists, dicts and hits
# afterwards), the queue holds only bytes, and the flush is left with framing and one write().
# Deferring the encoding to the flush would not save the search thread anything: the flush runs on
# it too (see AuditLog.add). The common field types are written by hand, with one %-format per
# record: json.dumps of the whole dict costs twice as much (measured).

_esc = json.encoder.encode_basestring_ascii  # the C string escaper json.dumps uses
_PID = [os.getpid()]  # this process's (reset in a forked child)


def _plain(o):
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=str)
    return o.item() if hasattr(o, "item") else str(o)  # numpy scalars as numbers, the rest as text


_ENC = json.JSONEncoder(separators=(",", ":"), default=_plain)


def _js(v) -> str:
    """JSON of one field value."""
    if v is None:
        return "null"
    t = type(v)
    if t is str:
        return _esc(v)
    if t is int:
        return str(v)
    if t is list or t is tuple:
        return _strs(v)
    try:
        return _ENC.encode(v)
    except (TypeError, ValueError):  # e.g. non-string keys: kept as text
        return _esc(repr(v))


def _strs(v) -> str:
    """JSON of a list (or tuple) of values: by hand for strings, as the JSON encoder writes them."""
    if not v:
        return "[]"
    try:
        j = '","'.join(v)
    except TypeError:  # not all strings
        try:
            return _ENC.encode(v)
        except (TypeError, ValueError):
            return _esc(repr(v))
    # Strings with nothing to escape (the usual ids and groups): the C escaper, run once over them all,
    # then adds only the quotes around and the escapes of the separators' quotes, and the JSON is
    # the joined text in brackets. Any other string makes the escaped text longer than that.
    if len(_esc(j)) == len(j) + 2 * len(v):
        return '["' + j + '"]'
    return "[" + ",".join(map(_esc, v)) + "]"


# a record's fields in their order (the text, vector and error fields follow when there are any)
_HEAD_JS = '{"t":%.6f,"op":%s,"mode":%s,"k":%s,"tenant":%s,"groups":%s,"where":%s,"ids":%s,"ms":%.4f,"gen":%s,"pid":%d'
_FIXED_MODE = {"search_sparse": "sparse", "search_rows": "dense", "get": "get"}


def _vectors_array(vectors):
    import numpy as np

    try:
        return np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------- the hook

_ARGS = ("vectors", "texts", "k", "tenant", "groups", "where", "mode")
_ALIASES = {"q": "vectors", "vector": "vectors", "text": "texts"}


class _Args:
    """Reads the audited arguments of one entry point's calls, found by name in its signature, as a tuple
    in the order of _ARGS (None for those it does not take)."""

    def __init__(self, op: str, fn):
        self.op, self.op_js = op, _esc(op)
        sig = inspect.signature(fn).parameters
        self.spots = [None] * len(_ARGS)  # per audited argument: (position after self or None, name, default)
        for i, name in enumerate(list(sig)[1:]):
            a = _ALIASES.get(name, name)
            j = _ARGS.index(a) if a in _ARGS else -1
            if j >= 0 and self.spots[j] is None:
                p = sig[name]
                pos = i if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) else None
                self.spots[j] = (pos, name, None if p.default is p.empty else p.default)
        fast = [(j, s[0]) for j, s in enumerate(self.spots) if s is not None and s[0] is not None]
        self.need = max((pos for _, pos in fast), default=-1) + 1
        if len(fast) == len(_ARGS):  # every argument by position (Collection._search): one C call
            self.getter = operator.itemgetter(*[pos for _, pos in fast])
        else:
            self.getter = None

    def values(self, args, kw) -> tuple:
        if not kw and len(args) >= self.need and self.getter is not None:
            return self.getter(args)
        out = []
        for spot in self.spots:
            if spot is None:
                out.append(None)
                continue
            pos, name, default = spot
            if name in kw:
                out.append(kw[name])
            elif pos is not None and pos < len(args):
                out.append(args[pos])
            else:
                out.append(default)
        return tuple(out)


def _ids_of(op: str, result, snap) -> list:
    """The chunk ids returned, taken at once (the caller may change its hits afterwards): a list per
    query ("get": one list of the ids found)."""
    if result is None:
        return []
    if op == "get":
        hits = result[0] if isinstance(result, tuple) else result
        return [h.id for h in hits if h is not None]
    if op == "search_rows":
        col = snap.table["id"]
        return [col.take(r[r >= 0]).to_pylist() for r in result[0]]
    if len(result) == 1:  # one query: the usual call
        return [[h.id for h in result[0]]]
    return [[h.id for h in hits] for hits in result]


class _Call:
    """What one call's record needs, taken when it returns (the rest of the arguments are immutable
    values read by encode); encoded with the other queued records by the flush."""

    __slots__ = ("spec", "t", "secs", "gen", "values", "ids", "error", "groups", "where", "texts", "vectors")

    def __init__(self, spec, cfg, t, secs, gen, args, kw, ids, error):
        self.spec, self.t, self.secs, self.gen, self.ids, self.error = spec, t, secs, gen, ids, error
        self.values = v = spec.values(args, kw)
        # what a caller may change afterwards, serialised now: a groups list, a where dict, the query
        g, w = v[4], v[5]
        self.groups = "null" if g is None else _esc(g) if type(g) is str else _js(g)
        self.where = "null" if w is None else _js(w)
        self.texts = self.vectors = None
        if cfg["record_query"] and spec.op != "get":
            if v[1] is not None:
                self.texts = _js(v[1])
            if v[0] is not None:
                self.vectors = _vectors_field(v[0])


def _vectors_field(vectors) -> str | None:
    v = _vectors_array(vectors)
    if v is None:
        return None
    return (f',"vector":{{"dtype":"float32","shape":{list(v.shape)},'
            f'"base64":"{base64.b64encode(v.tobytes()).decode()}"}}')


def encode(call: _Call) -> bytes:
    """The JSON payload of one call's record; never raises (a record is written whatever went wrong)."""
    spec = call.spec
    op = spec.op
    try:
        vectors, texts, k, tenant, _, _, mode = call.values
        if op in _FIXED_MODE:
            mode = _FIXED_MODE[op]
        elif mode is None:
            mode = "hybrid" if vectors is not None and texts is not None else \
                "dense" if vectors is not None else "sparse"
        ids = call.ids
        if op == "get":
            ids = _strs(ids)
        elif len(ids) == 1:
            ids = "[" + _strs(ids[0]) + "]"
        else:
            ids = "[" + ",".join(map(_strs, ids)) + "]"
        # the common values (None, a str mode, an int k) without a call each
        out = _HEAD_JS % (call.t, spec.op_js, _esc(mode) if type(mode) is str else _js(mode),
                          "null" if op == "get" or k is None else str(k) if type(k) is int else _js(k),
                          "null" if tenant is None else _js(tenant), call.groups, call.where, ids,
                          call.secs * 1000, call.gen, _PID[0])
        if call.error is not None:
            out += ',"error":' + _esc(call.error)
        if call.texts is not None:
            out += ',"text":' + call.texts
        if call.vectors is not None:
            out += call.vectors
        return (out + "}").encode()
    except Exception as exc:  # noqa: BLE001
        return json.dumps({"t": call.t, "op": op, "event": "unencodable", "error": repr(exc), "gen": call.gen,
                           "pid": _PID[0]}).encode()


def audited(op: str):
    """Decorates a Collection entry point: when the collection's manifest enables audit, each call
    (also a refused or failed one) is queued as a record. Arguments are found by name in the entry
    point's signature, so entry points may gain parameters.

    Per call, when audit is on: two clock reads around the call, the hit ids copied into a list, one
    small object queued and one clock comparison; every flush_ms one call also encodes, frames and
    writes the queue (AuditLog.add), all records in one loop (its code and data warm in the caches,
    where each search's graph walk leaves them cold)."""
    def wrap(fn):
        spec = _Args(op, fn)
        wall, clock = time.time, time.perf_counter

        @functools.wraps(fn)
        def wrapper(self, *args, **kw):
            cfg = self._manifest.audit
            if not cfg or self._closed:  # a closed collection raises on its own
                return fn(self, *args, **kw)
            log = self.__dict__.get("_audit_log")
            if log is None or (log.cfg is not cfg and log.cfg != cfg):
                log = log_of(self, cfg)
            if log._error is not None:
                log.check()  # an audit log that cannot be written refuses the search
            snap = self._snap
            t, t0 = wall(), clock()
            try:
                result = fn(self, *args, **kw)
            except BaseException as exc:
                t1 = clock()
                log.add(_Call(spec, cfg, t, t1 - t0, self._manifest.generation, args, kw, [],
                              f"{type(exc).__name__}: {exc}"), t1)
                raise
            t1 = clock()
            log.add(_Call(spec, cfg, t, t1 - t0, self._manifest.generation, args, kw, _ids_of(op, result, snap),
                          None), t1)
            return result
        return wrapper
    return wrap


class _OneSpec:
    """The spec of search()'s fast path: what encode reads of an entry point's spec."""

    op, op_js = "search", _esc("search")


_ONE_SPEC = _OneSpec()


class _OneCall(_Call):
    """The record of one search() call served by the fast path (one vector, no tenant, groups, where or
    options): the record the general path writes for that call, byte for byte, made without reading
    arguments (encode sees vectors=None, mode "dense": what it would infer)."""

    __slots__ = ()

    def __init__(self, t, secs, gen, values, ids, error):
        self.spec, self.t, self.secs, self.gen, self.values, self.ids, self.error = \
            _ONE_SPEC, t, secs, gen, values, ids, error
        self.groups = self.where = "null"
        self.texts = self.vectors = None


def audited_one(coll, cfg: dict, run):
    """search()'s fast path `run(q, k, ef, threads)` (collection/search.py one_query) with audit `cfg`:
    each call it serves is queued as its record, as the general path would (refused and failed calls
    too). None when the records need what only the general path reads (record_query: the query).

    Per call: a weak reference and a dict lookup, two clock reads, the hit ids copied, one small object
    queued. A call the log is not ready for (no AuditLog yet, other settings, a failed write to retry
    or refuse) returns None, so the general path runs it and sets the log up; so does a call the fast
    path does not serve."""
    if cfg.get("record_query"):
        return None
    ref, gen = weakref.ref(coll), coll._manifest.generation  # the fast path is per manifest
    wall, clock = time.time, time.perf_counter
    known = [None]  # the AuditLog last found to have these settings

    def audited_run(q, k, ef, threads):
        c = ref()
        log = None if c is None else c.__dict__.get("_audit_log")
        if log is None or log._error is not None:
            return None
        if log is not known[0]:
            if log.cfg is not cfg and log.cfg != cfg:
                return None
            known[0] = log
        t, t0 = wall(), clock()
        try:
            hits = run(q, k, ef, threads)
        except BaseException as exc:
            t1 = clock()
            log.add(_OneCall(t, t1 - t0, gen, (None, None, k, None, None, None, "dense"), [],
                             f"{type(exc).__name__}: {exc}"), t1)
            raise
        if hits is None:
            return None  # not a call for the fast path: the general path runs (and records) it
        t1 = clock()
        log.add(_OneCall(t, t1 - t0, gen, (None, None, k, None, None, None, "dense"), [[h.id for h in hits]],
                         None), t1)
        return hits
    return audited_run


def log_of(coll, cfg: dict) -> AuditLog:
    """The collection object's AuditLog for settings `cfg` (made on first use, remade if they change)."""
    log = coll.__dict__.get("_audit_log")
    if log is None or log.cfg != cfg:
        with _MAKE_LOCK:
            log = coll.__dict__.get("_audit_log")
            if log is None or log.cfg != cfg:
                old, log = log, AuditLog(coll.path, cfg)  # the manifest's dict: compared by identity first
                coll.__dict__["_audit_log"] = log
                if old is not None:
                    old.close()
    return log


def flush_log(coll) -> None:
    """Writes the collection object's queued records now (raises AuditError if it cannot)."""
    log = coll.__dict__.get("_audit_log")
    if log is not None:
        log.flush()


def close_log(coll) -> None:
    """Writes the collection object's queued records (Collection.close)."""
    log = coll.__dict__.pop("_audit_log", None)
    if log is not None:
        log.close()


_MAKE_LOCK = threading.Lock()
_FORKED_AWAY = []  # the parents' idle timers, in a forked child
_LIVE: "weakref.WeakSet[AuditLog]" = weakref.WeakSet()


def _flush_all() -> None:
    for log in list(_LIVE):
        try:
            log.close()
        except AuditError:
            pass


def _reset_in_child() -> None:
    _PID[0] = os.getpid()
    for log in list(_LIVE):
        log._after_fork()


atexit.register(_flush_all)
os.register_at_fork(after_in_child=_reset_in_child)


# ---------------------------------------------------------------------------- reading and verifying

@dataclass
class Report:
    """What read_log found: the records (dicts, with "seq" and "file" added) and problems.

    errors: corruption (a record altered, removed, reordered; a checksum or chain mismatch);
    warnings: what crashes leave (a torn last record) and the chain's start when older files were
    rotated away. ok is True when there are no errors."""
    records: list = field(default_factory=list)
    files: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def read_log(directory) -> Report:
    """Reads and verifies every audit file of `directory` (oldest first)."""
    rep = Report()
    files = log_files(directory)
    rep.files = [name for _, name in files]
    last_seq = last_crc = None
    damaged_before = None  # the last file that ended in a torn record
    for number, name in files:
        try:
            with open(os.path.join(directory, name), "rb") as f:
                data = f.read()
        except FileNotFoundError:  # rotated away by a writer while we read
            continue
        off = 0
        first = True
        while off < len(data):
            rec = parse(data, off)
            if rec is None:
                if torn(data, off):
                    rep.warnings.append(f"{name}: torn record at byte {off} ({len(data) - off} bytes; "
                                        "a write interrupted by a crash)")
                    damaged_before = name
                    break
                nxt = _resync(data, off + 1)
                rep.errors.append(f"{name}: corrupt bytes {off}..{nxt} (checksum or framing mismatch)")
                off = nxt
                continue
            seq, prev, crc, payload, end = rec
            if last_seq is None:
                if not (number == 1 and first and seq == 1 and prev == 0):
                    rep.warnings.append(f"{name}: the chain starts at record {seq} (older files were rotated "
                                        "away)" if seq > 1 else f"{name}: first record does not start the chain")
                    if seq == 1 and prev != 0:
                        rep.errors.append(f"{name}: record 1 names a previous record")
            elif seq != last_seq + 1 or prev != last_crc:
                what = "missing records" if seq > last_seq + 1 else "out of order" if seq <= last_seq else \
                    "altered previous record"
                rep.errors.append(f"{name}: record {seq} at byte {off} does not follow record {last_seq} "
                                  f"({what})")
            try:
                r = json.loads(payload)
            except ValueError:
                rep.errors.append(f"{name}: record {seq} holds no JSON")
                r = {}
            if r.get("event") == "damaged_tail" and damaged_before != r.get("file"):
                rep.warnings.append(f"{name}: record {seq} reports a damaged tail in {r.get('file')}")
            if isinstance(r, dict):
                r["seq"], r["file"] = seq, name
                rep.records.append(r)
            last_seq, last_crc, first, off = seq, crc, False, end
    return rep


def _resync(data, off: int) -> int:
    """The offset of the next intact record after damage (or the end of the data)."""
    while True:
        i = data.find(MAGIC, off)
        if i < 0:
            return len(data)
        if parse(data, i) is not None:
            return i
        off = i + 1
