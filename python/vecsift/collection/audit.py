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
that finds the queue that old, or by a background thread when no search comes; also at close, at
exit, and when 10,000 are queued. A process that dies loses at most
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
import os
import re
import struct
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field

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
        self._stop = threading.Event()
        self._closed = False
        self._lock_fd = None  # the audit.lock descriptor while a write holds the flock
        self._period = cfg["flush_ms"] / 1000
        self._last = time.monotonic()  # of the last flush
        if not os.access(self.directory, os.W_OK):
            raise AuditError(f"{self.directory}: audit is enabled but the directory is not writable")
        _LIVE.add(self)

    # -- the search thread's side: cheap
    def add(self, payload) -> None:
        """Queues a record: its bytes, or a call returning them (encoded by the flush).

        While searches run, the search that finds the queue flush_ms old writes it (one batch, a
        fraction of a millisecond every flush_ms): a flush thread doing it instead would contend for
        the GIL with every search and, on a busy machine, hold it while descheduled (measured: 14%
        fewer QPS on the hnsw benchmark, 5.6% this way). The thread only writes what an idle process
        left queued."""
        self.check()
        self._queue.append(payload)
        if self.cfg["flush_ms"] == 0 or len(self._queue) >= MAX_PENDING or self._closed:
            self.flush()
        elif time.monotonic() - self._last >= self._period:
            if self._flush_lock.acquire(blocking=False):  # another thread flushing: it takes this one too
                try:
                    self._flush_locked()
                finally:
                    self._flush_lock.release()
        elif self._thread is None:
            self._start()

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
                self._thread = threading.Thread(target=self._run, name="vecsift-audit", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            if self._queue and time.monotonic() - self._last >= self._period:
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
        self._last = time.monotonic()
        if not self._queue:
            return
        items = []
        while self._queue:
            try:
                items.append(self._queue.popleft())
            except IndexError:
                break
        try:
            self._write([_payload(it) for it in items])
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
            for p in events + payloads:
                seq += 1
                data, crc = frame(seq, crc, p)
                out.append(data)
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
        self._stop.set()
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
        self._stop = threading.Event()
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
# A record is serialised in the search thread, at once: it holds what the caller passed and got back
# at that moment (they may reuse and change their lists and dicts afterwards), and the flush thread
# is left with framing and one write() -- little Python for it to hold the GIL with. The common
# field types are written by hand: json.dumps of the whole dict costs twice as much (measured).

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
    if (t is list or t is tuple) and all(type(x) is str for x in v):
        return "[" + ",".join(map(_esc, v)) + "]"
    try:
        return _ENC.encode(v)
    except (TypeError, ValueError):  # e.g. non-string keys: kept as text
        return _esc(repr(v))


def _ids_js(ids) -> str:
    if ids and type(ids[0]) is str:  # get(): one flat list
        return "[" + ",".join(map(_esc, ids)) + "]"
    return "[" + ",".join("[" + ",".join(map(_esc, q)) + "]" for q in ids) + "]"


def encode(t: float, op: str, mode, k, tenant, groups, where, ids, ms: float, gen: int, error=None,
           texts=None, vectors=None) -> bytes:
    """The JSON payload of one record (texts / vectors only when record_query is set)."""
    out = (f'{{"t":{t:.6f},"op":{_esc(op)},"mode":{_js(mode)},"k":{_js(k)},"tenant":{_js(tenant)},'
           f'"groups":{_field(groups)},"where":{_field(where)},"ids":{_ids_js(ids)},"ms":{ms:.4f},"gen":{gen},'
           f'"pid":{_PID[0]}')
    if error is not None:
        out += ',"error":' + _esc(error)
    if texts is not None:
        out += ',"text":' + _field(texts)
    if vectors is not None:
        out += (f',"vector":{{"dtype":"float32","shape":{list(vectors.shape)},'
                f'"base64":"{base64.b64encode(vectors.tobytes()).decode()}"}}')
    return (out + "}").encode()


class _Raw(str):
    """A field already serialised to JSON."""


def _field(v) -> str:
    return v if type(v) is _Raw else _js(v)


def _payload(item) -> bytes:
    """A queued record as bytes: queued as bytes, or as a call that encodes it (run by the flush)."""
    if type(item) is bytes:
        return item
    try:
        return item()
    except Exception as exc:  # noqa: BLE001 - a record is written whatever went wrong in encoding it
        return json.dumps({"t": time.time(), "event": "unencodable", "error": repr(exc)}).encode()


def _deferred(arg, op, t, ms, gen, args, kw, ids, error, groups, where, texts, vectors) -> bytes:
    """encode() of a wrapped call, its arguments read from (args, kw) by the flush."""
    return encode(t, op, _mode_of(op, arg(args, kw, "vectors"), arg(args, kw, "texts"), arg(args, kw, "mode")),
                  None if op == "get" else arg(args, kw, "k"), arg(args, kw, "tenant"), groups, where, ids, ms, gen,
                  error, texts, vectors)


def result_ids(op: str, result, snap) -> list:
    """Chunk ids per query ("get": the ids found)."""
    if result is None:
        return []
    if op == "get":
        hits = result[0] if isinstance(result, tuple) else result
        return [h.id for h in hits if h is not None]
    if op == "search_rows":
        col = snap.table["id"]
        return [col.take(r[r >= 0]).to_pylist() for r in result[0]]
    return [[h.id for h in hits] for hits in result]


def _mode_of(op, vectors, texts, mode):
    if op in _FIXED_MODE:
        return _FIXED_MODE[op]
    if mode is not None:
        return mode
    if vectors is not None and texts is not None:
        return "hybrid"
    return "dense" if vectors is not None else "sparse"


_FIXED_MODE = {"search_sparse": "sparse", "search_rows": "dense", "get": "get"}


def _vectors_copy(vectors):
    import numpy as np

    try:
        return np.array(vectors, dtype=np.float32, copy=True)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------- the hook

_ARGS = ("vectors", "texts", "k", "tenant", "groups", "where", "mode")
_ALIASES = {"q": "vectors", "vector": "vectors", "text": "texts"}


def audited(op: str):
    """Decorates a Collection entry point: when the collection's manifest enables audit, each call
    (also a refused or failed one) is queued as a record. Arguments are found by name in the entry
    point's signature, so entry points may gain parameters."""
    def wrap(fn):
        sig = inspect.signature(fn).parameters
        spots = {}  # audited argument -> (position after self, parameter name, default)
        for i, name in enumerate(list(sig)[1:]):
            a = _ALIASES.get(name, name)
            if a in _ARGS and a not in spots:
                d = sig[name].default
                spots[a] = (i, name, None if d is inspect.Parameter.empty else d)

        def arg(args, kw, a):
            spot = spots.get(a)
            if spot is None:
                return None
            i, name, default = spot
            if name in kw:
                return kw[name]
            return args[i] if i < len(args) else default

        @functools.wraps(fn)
        def wrapper(self, *args, **kw):
            cfg = self._manifest.audit
            if not cfg or self._closed:  # a closed collection raises on its own
                return fn(self, *args, **kw)
            log = self.__dict__.get("_audit_log")
            if log is None or (log.cfg is not cfg and log.cfg != cfg):
                log = log_of(self, cfg)
            log.check()  # an audit log that cannot be written refuses the search
            snap = self._snap
            t, t0 = time.time(), time.perf_counter()
            result = error = None
            try:
                result = fn(self, *args, **kw)
                return result
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                raise
            finally:
                ms = (time.perf_counter() - t0) * 1000
                # Taken now: what the caller may change afterwards (the hit lists, a groups list, a
                # where dict, the query). The rest (k, tenant, mode) is read and the record encoded by
                # the flush thread, off the search's time; flush_ms=0 encodes here.
                groups, where = arg(args, kw, "groups"), arg(args, kw, "where")
                if groups is not None and type(groups) is not str:
                    groups = _Raw(_js(groups))
                if where is not None:
                    where = _Raw(_js(where))
                texts = vectors = None
                if cfg["record_query"] and op != "get":
                    texts = arg(args, kw, "texts")
                    texts = None if texts is None else _Raw(_js(texts))
                    vectors = arg(args, kw, "vectors")
                    vectors = None if vectors is None else _vectors_copy(vectors)
                item = functools.partial(_deferred, arg, op, t, ms, self._manifest.generation, args, kw,
                                         result_ids(op, result, snap), error, groups, where, texts, vectors)
                log.add(item() if cfg["flush_ms"] == 0 else item)
        return wrapper
    return wrap


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
