"""Search calls to node actors on the caller's own Ray node over Unix domain sockets.

A classic actor call goes through the raylet and the object store (~1.5-2.5 ms a round trip on a
loaded 2-core machine, bench_ray). A node actor on the caller's own Ray node can also be reached
through a Unix socket: the actor (NodeServer.open_socket) listens on a socket file in a fresh
private directory (mkdtemp, mode 0700) and a connection must first send a random token, which
the driver got over Ray with the path. Frames are a length and the bytes NodeServer.call takes;
answers a flag, a length and the bytes call returns, or (flag 1) the pickled exception call
raised. Every read is a blocking one with a timeout: no thread polls, so an open lane costs no
CPU while idle (unlike lanes.py's compiled-graph channels, whose reader spins), and these lanes
are on by default.

A lane is an optimisation, never a requirement: gather() uses a connection when one is free and
calls the classic way otherwise (the first search to an actor goes the classic way while its lane
opens in the background). Each lane holds a few connections (one search on each at a time; more
are opened in the background while searches find them all busy). The node's own exception comes
back as itself (a ValueError on bad input is a ValueError) and the lane stays; a system failure
(EOF, reset, timeout at the hedge time) drops the lane's connections, the search goes on the
classic way, which owns hedging, partial results and failing closed, and the lane is opened
again after a back-off by asking the actor again (a restarted actor has a new socket).

Security: the directory is 0700 and per actor, the peer must run as the actor's user
(SO_PEERCRED) and send the token (compared with hmac.compare_digest) before anything it sends
is read as a request; nothing from a connection is unpickled before that check. The driver
unpickles only answers of its own node actor (whose path and token came over Ray).
"""
from __future__ import annotations

import glob
import hmac
import os
import pickle
import secrets
import shutil
import socket
import struct
import tempfile
import threading
import time

TOKEN_LEN = 32
AUTH_TIMEOUT = 5.0  # seconds a new connection has to send its token
CONNECT_TIMEOUT = 5.0
SEND_TIMEOUT = 5.0
MAX_CONNS = 4  # connections per lane (per node actor): concurrent searches beyond go the classic way
_BACKOFF = (0.5, 30.0)  # seconds before opening again after a failure: first, most
_REQ = struct.Struct("!I")  # request frame: length, then the bytes of NodeServer.call's argument
_ANS = struct.Struct("!BI")  # answer frame: flag (0 call's bytes, 1 a pickled exception), length
_OK = b"\x01"  # the server's answer to a good token
_PREFIX = "vecsift-lane-"
_CHUNK = 1 << 16


def _socket_parent() -> str:
    """Where the per-actor socket directories go: the temp dir, or /tmp if its paths would be too long
    for a Unix socket address (108 bytes)."""
    d = tempfile.gettempdir()
    return d if len(d) < 60 else "/tmp"


def _recv_exact(sock, n: int, first: bytes = b"") -> bytes | None:
    """n bytes from sock (`first` already read), or None at EOF."""
    if len(first) >= n:
        return first
    buf = bytearray(n)
    buf[:len(first)] = first
    view, got = memoryview(buf), len(first)
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if not k:
            return None
        got += k
    return bytes(buf)


def _read_frame(sock, head: struct.Struct):
    """(header fields..., payload) of one frame, or None at EOF. Lock-step protocol: a peer never sends
    past one frame, so one recv usually brings all of a small frame."""
    data = sock.recv(_CHUNK)
    if not data:
        return None
    if len(data) < head.size:
        data = _recv_exact(sock, head.size, data)
        if data is None:
            return None
    fields = head.unpack_from(data)
    need = head.size + fields[-1]
    if len(data) > need:
        raise ConnectionError("lane protocol error: more bytes than one frame")
    if len(data) < need:
        data = _recv_exact(sock, need, data)
        if data is None:
            return None
    return fields[:-1] + (data[head.size:],)


def _send(sock, header: bytes, payload: bytes) -> None:
    if len(payload) < _CHUNK:
        sock.sendall(header + payload)
    else:
        sock.sendall(header)
        sock.sendall(payload)


def _pickled_error(exc: BaseException) -> bytes:
    """exc pickled so that the driver gets it back as itself; one that does not survive pickling
    travels as a RuntimeError naming it (a fault, not the caller's bad input)."""
    try:
        data = pickle.dumps(exc, protocol=5)
        pickle.loads(data)
        return data
    except Exception:  # noqa: BLE001 - an exception class that does not round-trip
        return pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"), protocol=5)


def _peer_uid(conn) -> int | None:
    try:
        _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                struct.calcsize("3i")))
        return uid
    except (OSError, AttributeError):  # not Linux: the 0700 directory and the token still hold
        return None


def sweep(parent: str | None = None) -> list:
    """Removes socket directories of this user's node actors that are gone (killed without closing
    them: a SIGKILL leaves its directory): a directory whose pid is not alive and whose socket
    refuses connections. The removed paths."""
    removed = []
    for d in glob.glob(os.path.join(parent or _socket_parent(), _PREFIX + "*-*")):
        try:
            pid = int(os.path.basename(d)[len(_PREFIX):].split("-", 1)[0])
            if os.stat(d).st_uid != os.getuid() or pid == os.getpid():
                continue
            try:
                os.kill(pid, 0)
                continue  # alive
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
            path = os.path.join(d, "node.sock")
            if os.path.exists(path):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(0.5)
                try:
                    s.connect(path)
                    s.close()
                    continue  # someone listens there (another pid namespace?): leave it
                except (ConnectionRefusedError, FileNotFoundError):
                    pass
                except OSError:
                    continue
                finally:
                    s.close()
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
        except (ValueError, OSError):
            continue
    return removed


class SocketServer:
    """Listens on a Unix socket in a fresh 0700 directory and answers each authenticated frame with
    handler(bytes) -> bytes, one thread per connection (each blocked in recv while idle)."""

    def __init__(self, handler, parent: str | None = None):
        self.handler = handler
        self.dir = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=parent or _socket_parent())
        os.chmod(self.dir, 0o700)
        self.path = os.path.join(self.dir, "node.sock")
        self.token = secrets.token_bytes(TOKEN_LEN)
        self.closed = False
        self.served = 0  # frames answered
        self.refused = 0  # connections closed at the token check
        self._conns = set()
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(self.path)
            os.chmod(self.path, 0o600)
            self._sock.listen(64)
        except BaseException:
            self._sock.close()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self._thread = threading.Thread(target=self._accept, name="vecsift-lane-listen", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return not self.closed and self._thread.is_alive() and os.path.exists(self.path)

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if self.closed:
                    return
                time.sleep(0.05)  # e.g. EMFILE: not a reason to stop listening
                continue
            with self._lock:
                if self.closed:
                    conn.close()
                    return
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), name="vecsift-lane-conn", daemon=True).start()

    def _serve(self, conn) -> None:
        try:
            conn.settimeout(AUTH_TIMEOUT)
            uid = _peer_uid(conn)
            token = _recv_exact(conn, TOKEN_LEN)
            if token is None or (uid is not None and uid != os.getuid()) or not hmac.compare_digest(token, self.token):
                self.refused += 1
                return  # closed without reading a request, let alone unpickling one
            conn.settimeout(None)  # blocked in recv while idle: no CPU
            conn.sendall(_OK)
            while True:
                got = _read_frame(conn, _REQ)
                if got is None:
                    return
                try:
                    flag, answer = 0, self.handler(got[0])
                except Exception as exc:  # noqa: BLE001 - the node's own exception goes back as itself
                    flag, answer = 1, _pickled_error(exc)
                _send(conn, _ANS.pack(flag, len(answer)), answer)
                self.served += 1
        except OSError:
            return  # the driver went away (timeout at its hedge time, a closed lane): nothing to answer
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def close(self) -> None:
        """Stops listening, ends every connection and removes the directory."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            conns, self._conns = list(self._conns), set()
        for s in [self._sock] + conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------- driver side

class NodeError(Exception):
    """An exception raised by the node actor's code, sent back over a socket lane: to gather what a
    RayTaskError is for a classic call (`cause` is the exception itself)."""

    def __init__(self, cause: BaseException):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


class _Conn:
    """One connection of a lane, held by one search between SocketLanes.take() and release()/broke()."""

    __slots__ = ("lane", "sock", "epoch")

    def __init__(self, lane, sock, epoch):
        self.lane, self.sock, self.epoch = lane, sock, epoch

    def execute(self, req: bytes):
        self.sock.settimeout(SEND_TIMEOUT)
        _send(self.sock, _REQ.pack(len(req)), req)
        self.lane.calls += 1
        return None

    def fetch(self, _ref, timeout: float) -> bytes:
        """The answer's bytes; raises NodeError (the node's exception), TimeoutError, or another OSError /
        ConnectionError (the lane broke)."""
        self.sock.settimeout(max(timeout, 1e-3))
        got = _read_frame(self.sock, _ANS)
        if got is None:
            raise ConnectionError("node actor closed the lane")
        flag, payload = got
        if flag == 0:
            return payload
        try:
            exc = pickle.loads(payload)  # from our own node actor (authenticated connection)
        except Exception as e:  # noqa: BLE001
            exc = RuntimeError(f"an exception that could not be read back: {e}")
        raise NodeError(exc)

    def release(self) -> None:
        self.lane._release(self)

    def broke(self) -> None:
        self.close()
        self.lane._broken(self.epoch)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _connect(path: str, token: bytes):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(CONNECT_TIMEOUT)
        s.connect(path)
        s.sendall(token)
        if _recv_exact(s, len(_OK)) != _OK:
            raise ConnectionError(f"{path}: token refused")
        return s
    except BaseException:
        s.close()
        raise


class SocketLane:
    """The lane to one node actor: up to MAX_CONNS connections to its socket."""

    def __init__(self, owner: "SocketLanes", handle):
        self.owner, self.handle = owner, handle
        self.state = "idle"  # idle (may open) | opening | ready | remote | closed
        self.lock = threading.Lock()
        self.free = []  # connections no search holds (list.pop/append are atomic)
        self.n_conns = 0  # connections of this epoch, free or held
        self.growing = False
        self.epoch = 0
        self.path = self.token = None
        self.failures = 0
        self.retry_at = 0.0
        self.calls = 0  # searches sent over it (tests and benchmarks read it)
        self.opened = 0  # times the actor was asked for its socket

    def take(self):
        if self.state == "ready":
            try:
                return self.free.pop()
            except IndexError:
                pass
            if self.n_conns < self.owner.max_conns and not self.growing:
                with self.lock:
                    if self.state == "ready" and not self.growing and self.n_conns < self.owner.max_conns:
                        self.growing = True
                        threading.Thread(target=self._grow, args=(self.epoch,), name="vecsift-lane-connect",
                                         daemon=True).start()
            return None  # every connection is in use: this search goes the classic way
        if self.state == "idle" and time.monotonic() >= self.retry_at:
            with self.lock:
                if self.state == "idle" and not self.owner.closed:
                    self.state = "opening"
                    threading.Thread(target=self._open, name="vecsift-lane-open", daemon=True).start()
        return None

    def _open(self) -> None:
        ray = self.owner.ray
        try:
            self.opened += 1
            path, token, node = ray.get(self.handle.open_socket.remote(), timeout=30)
            if node != self.owner.here:
                with self.lock:
                    self.state = "closed" if self.owner.closed else "remote"
                return
            sock = _connect(path, token)
        except Exception:  # noqa: BLE001 - no lane for now: searches go the classic way
            with self.lock:
                self._back_off()
                self.state = "closed" if self.owner.closed else "idle"
            return
        with self.lock:
            if self.owner.closed:
                sock.close()
                self.state = "closed"
                return
            self.epoch += 1
            self.path, self.token = path, token
            self.free = [_Conn(self, sock, self.epoch)]
            self.n_conns, self.failures = 1, 0
            self.state = "ready"

    def _grow(self, epoch) -> None:
        try:
            sock = _connect(self.path, self.token)
        except Exception:  # noqa: BLE001 - the next failing search breaks the lane; nothing to do here
            with self.lock:
                self.growing = False
            return
        with self.lock:
            self.growing = False
            if epoch == self.epoch and self.state == "ready":
                self.n_conns += 1
                self.free.append(_Conn(self, sock, epoch))
                return
        sock.close()

    def _release(self, conn) -> None:
        with self.lock:
            if conn.epoch == self.epoch and self.state == "ready":
                self.free.append(conn)
                return
        conn.close()

    def _broken(self, epoch) -> None:
        """A connection of `epoch` failed: every connection of that epoch goes (an actor restart ends
        them all, and a new actor has a new socket); opened again after the back-off."""
        with self.lock:
            if epoch != self.epoch or self.state != "ready":
                return
            self.epoch += 1
            free, self.free, self.n_conns = self.free, [], 0
            self._back_off()
            self.state = "closed" if self.owner.closed else "idle"
        for c in free:
            c.close()

    def _back_off(self) -> None:
        self.failures += 1
        self.retry_at = time.monotonic() + min(_BACKOFF[1], _BACKOFF[0] * 2 ** (self.failures - 1))

    def close(self) -> None:
        with self.lock:
            self.epoch += 1
            self.state = "closed"
            free, self.free, self.n_conns = self.free, [], 0
        for c in free:
            c.close()


class SocketLanes:
    """The socket lanes of one ShardedCollection, one per node actor (by actor id)."""

    def __init__(self, ray, max_conns: int = MAX_CONNS):
        self.ray = ray
        self.here = ray.get_runtime_context().get_node_id()
        self.max_conns = max(1, int(max_conns))
        self.closed = False
        self._lanes = {}
        self._lock = threading.Lock()

    def take(self, handle):
        """A free connection to `handle`'s actor, held for the caller, or None: call it the classic way
        (the lane starts opening in the background if it may)."""
        if self.closed:
            return None
        lane = self._lanes.get(handle._actor_id)
        if lane is None:
            with self._lock:
                lane = self._lanes.setdefault(handle._actor_id, SocketLane(self, handle))
        return lane.take()

    def prepare(self, handles) -> None:
        """Starts opening the lanes to these node actors in the background (so the first searches
        find them ready)."""
        for h in handles:
            conn = self.take(h)
            if conn is not None:  # ready already: give it back
                conn.release()

    def states(self) -> dict:
        """{actor id hex: (state, searches sent over it)}: for tests and benchmarks."""
        return {k.hex(): (lane.state, lane.calls) for k, lane in list(self._lanes.items())}

    def drop(self, handle) -> None:
        """A classic call found `handle`'s actor gone: its connections go (a killed actor's process can
        still answer for a moment), and the lane opens again after the back-off if the actor comes back."""
        lane = self._lanes.get(handle._actor_id)
        if lane is not None:
            lane._broken(lane.epoch)

    def lane(self, handle) -> SocketLane | None:
        return self._lanes.get(handle._actor_id)

    def close(self, wait: float = 5.0) -> None:
        """Closes every connection, then asks the node actors that opened a socket for this driver to
        close it (removing its directory; call before the actors are killed)."""
        self.closed = True
        refs = []
        for lane in list(self._lanes.values()):
            had = lane.path is not None
            lane.close()
            if had:
                try:
                    refs.append(lane.handle.close_socket.remote())
                except Exception:  # noqa: BLE001 - gone already
                    pass
        if refs:
            try:
                self.ray.wait(refs, num_returns=len(refs), timeout=wait)
            except Exception:  # noqa: BLE001 - a dead actor: its directory is swept by the next one to open
                pass
