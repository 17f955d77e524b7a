"""Crash simulation at the storage seam (vecsift.storage.fileops): record one operation's file calls, then
rebuild the directory as a power cut at each durability point could leave it.

Model (what POSIX file systems promise, and what they do not):
  * data written to a file is durable only after fsync of that file; until then a crash may drop it, keep
    it, or keep it torn (a prefix of the last write);
  * a name created, renamed or unlinked is durable only after fsync of the directory; until then a crash
    may drop it or keep it, independently of the file's data (a rename can survive while the data it
    points at does not: the classic rename-without-fsync bug).

Each crash state is one of these variants at one cut of the recorded sequence (just before and just after
every fsync, directory fsync and rename):
  synced      only what was fsynced: unsynced data and unsynced names dropped
  all         everything written so far (a clean stop)
  torn        names as written, unsynced data kept but the last unsynced write of each file cut in half
  names       names as written, file data only as fsynced
  data        names only as fsynced, file data as written
  renames     names as fsynced plus the unsynced renames only (creates not yet durable), data as written
No kernel tricks: the operation really runs on a real directory; the log is replayed into temp dirs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from vecsift.storage.fileops import OsOps

VARIANTS = ("synced", "all", "torn", "names", "data", "renames")
DURABILITY = ("fsync", "fsync_dir", "rename")


class Recorder(OsOps):
    """OsOps that also logs every call, by file name inside one directory (the collection's)."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.log = []
        self._fds = {}

    def _name(self, path) -> str:
        path = os.path.abspath(path)
        assert os.path.dirname(path) == self.root, f"write outside the collection directory: {path}"
        return os.path.basename(path)

    def _of(self, fd) -> str:
        if fd not in self._fds:  # opened before recording started
            self._fds[fd] = self._name(os.readlink(f"/proc/self/fd/{fd}"))
        return self._fds[fd]

    def create(self, path, exclusive=False):
        fd = super().create(path, exclusive)
        self._fds[fd] = self._name(path)
        self.log.append(("create", self._fds[fd]))
        return fd

    def open_rw(self, path):
        fd = super().open_rw(path)
        self._fds[fd] = self._name(path)
        return fd

    def pwrite(self, fd, data, offset):
        super().pwrite(fd, data, offset)
        self.log.append(("write", self._of(fd), offset, bytes(memoryview(data).cast("B"))))

    def truncate(self, fd, size):
        super().truncate(fd, size)
        self.log.append(("truncate", self._of(fd), size))

    def fsync(self, fd):
        super().fsync(fd)
        self.log.append(("fsync", self._of(fd)))

    def close(self, fd):
        super().close(fd)
        self._fds.pop(fd, None)

    def adopt(self, path):
        super().adopt(path)
        name = self._name(path)
        with open(path, "rb") as f:
            data = f.read()
        self.log += [("create", name), ("write", name, 0, data), ("fsync", name)]

    def replace(self, src, dst):
        super().replace(src, dst)
        self.log.append(("rename", self._name(src), self._name(dst)))

    def unlink(self, path):
        super().unlink(path)
        self.log.append(("unlink", self._name(path)))

    def fsync_dir(self, path):
        super().fsync_dir(path)
        assert os.path.abspath(path) == self.root
        self.log.append(("fsync_dir",))


def snapshot_dir(root) -> dict:
    """{name: bytes} of the regular files of a directory (the durable state before an operation)."""
    out = {}
    for name in sorted(os.listdir(root)):
        p = os.path.join(root, name)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                out[name] = f.read()
    return out


@dataclass
class _Inode:
    durable: bytearray
    current: bytearray
    pending: list = field(default_factory=list)  # ("w", offset, data) / ("t", size) since the last fsync


def _apply_write(buf: bytearray, offset: int, data: bytes) -> None:
    if len(buf) < offset:
        buf.extend(bytes(offset - len(buf)))
    buf[offset:offset + len(data)] = data


class Model:
    """Replays a log over an initial (durable) directory, tracking durable and current state."""

    def __init__(self, initial: dict):
        self.inodes = {}
        self.names, self.durable_names = {}, {}
        self.renames = []  # renames since the last directory fsync
        for name, data in initial.items():
            ino = len(self.inodes)
            self.inodes[ino] = _Inode(bytearray(data), bytearray(data))
            self.names[name] = self.durable_names[name] = ino

    def apply(self, op) -> None:
        kind = op[0]
        if kind == "create":
            if op[1] in self.names:  # O_TRUNC of an existing file: same inode, emptied
                ino = self.inodes[self.names[op[1]]]
                ino.current = bytearray()
                ino.pending.append(("t", 0))
            else:
                n = len(self.inodes)
                self.inodes[n] = _Inode(bytearray(), bytearray())
                self.names[op[1]] = n
        elif kind == "write":
            ino = self.inodes[self.names[op[1]]]
            _apply_write(ino.current, op[2], op[3])
            ino.pending.append(("w", op[2], op[3]))
        elif kind == "truncate":
            ino = self.inodes[self.names[op[1]]]
            del ino.current[op[2]:]
            ino.pending.append(("t", op[2]))
        elif kind == "fsync":
            ino = self.inodes[self.names[op[1]]]
            ino.durable, ino.pending = bytearray(ino.current), []
        elif kind == "rename":
            self.names[op[2]] = self.names.pop(op[1])
            self.renames.append((op[1], op[2], self.names[op[2]]))
        elif kind == "unlink":
            del self.names[op[1]]
        elif kind == "fsync_dir":
            self.durable_names = dict(self.names)
            self.renames = []
        else:
            raise AssertionError(op)

    def _torn(self, ino: _Inode) -> bytes:
        if not ino.pending:
            return bytes(ino.current)
        # all unsynced writes but the last, then half of the last: replay from the durable content
        buf = bytearray(ino.durable)
        *head, last = ino.pending
        for p in head:
            if p[0] == "t":
                del buf[p[1]:]
            else:
                _apply_write(buf, p[1], p[2])
        if last[0] == "t":
            del buf[last[1]:]
        else:
            _apply_write(buf, last[1], last[2][:len(last[2]) // 2])
        return bytes(buf)

    def crash_state(self, variant: str) -> dict:
        names = self.durable_names if variant in ("synced", "data") else self.names
        if variant == "renames":
            names = dict(self.durable_names)
            for src, dst, ino in self.renames:  # the renamed inode is reachable; other new names are not
                names.pop(src, None)
                names[dst] = ino
        out = {}
        for name, n in names.items():
            ino = self.inodes[n]
            if variant in ("synced", "names"):
                out[name] = bytes(ino.durable)
            elif variant == "torn":
                out[name] = self._torn(ino)
            else:
                out[name] = bytes(ino.current)
        return out


def crash_states(initial: dict, log: list):
    """Yields (cut, variant, files, committed) for every cut at a durability point and every variant;
    committed: the new manifest had been renamed in and its directory fsynced before the cut (it must
    survive). Identical states are yielded once."""
    cuts = sorted({i for i, op in enumerate(log) if op[0] in DURABILITY} |
                  {i + 1 for i, op in enumerate(log) if op[0] in DURABILITY} | {len(log)})
    durable_at = None
    renamed = False
    for i, op in enumerate(log):
        if op[0] == "rename" and op[2] == "MANIFEST":
            renamed = True
        elif op[0] == "fsync_dir" and renamed and durable_at is None:
            durable_at = i + 1
    seen = set()
    model, pos = Model(initial), 0
    for cut in cuts:
        while pos < cut:
            model.apply(log[pos])
            pos += 1
        for variant in VARIANTS:
            files = model.crash_state(variant)
            key = tuple(sorted((k, hash(v)) for k, v in files.items()))
            if key in seen:
                continue
            seen.add(key)
            yield cut, variant, files, durable_at is not None and cut >= durable_at


def materialise(files: dict, root) -> None:
    os.makedirs(root)
    for name, data in files.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
