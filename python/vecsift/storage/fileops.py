"""The seam every durable write of a collection goes through: create, write, truncate, fsync, rename, unlink,
fsync of a directory.

Nothing here is clever: OsOps calls the operating system. The point is that the order of these calls *is*
the crash-safety argument of a collection (write and fsync new files, fsync the directory, rename the
manifest, fsync the directory again), so a test can swap the backend (`use`), record the sequence of one
operation and replay each prefix as a power cut would leave it (tests/reliability/crashsim.py).

Files written by code that does its own I/O (the native HNSW writer, BM25 and quantiser save methods) go
through `write_via`: the writer produces a temporary file, which the seam then adopts as one whole write
(fsync) and renames into place, so at the seam it is one write of the whole file.
"""
from __future__ import annotations

import contextlib
import os


class OsOps:
    """The real thing: file descriptors and system calls."""

    def create(self, path, exclusive: bool = False) -> int:
        flags = os.O_RDWR | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)

    def open_rw(self, path) -> int:
        return os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))

    def pwrite(self, fd: int, data, offset: int) -> None:
        data = memoryview(data).cast("B")
        done = 0
        while done < len(data):
            done += os.pwrite(fd, data[done:], offset + done)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def adopt(self, path) -> None:
        """A file written outside the seam: make it durable (a writer that fsynced already pays ~nothing)."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def replace(self, src, dst) -> None:
        os.replace(src, dst)

    def unlink(self, path) -> None:
        os.unlink(path)

    def fsync_dir(self, path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_backend = OsOps()


@contextlib.contextmanager
def use(backend):
    """Routes every file operation of vecsift through `backend` (an OsOps-like object) inside the block."""
    global _backend
    old, _backend = _backend, backend
    try:
        yield backend
    finally:
        _backend = old


def create(path, exclusive: bool = False) -> int:
    return _backend.create(path, exclusive)


def open_rw(path) -> int:
    return _backend.open_rw(path)


def pwrite(fd: int, data, offset: int) -> None:
    _backend.pwrite(fd, data, offset)


def truncate(fd: int, size: int) -> None:
    _backend.truncate(fd, size)


def fsync(fd: int) -> None:
    _backend.fsync(fd)


def close(fd: int) -> None:
    _backend.close(fd)


def replace(src, dst) -> None:
    _backend.replace(src, dst)


def unlink(path, missing_ok: bool = False) -> None:
    try:
        _backend.unlink(path)
    except FileNotFoundError:
        if not missing_ok:
            raise


def fsync_dir(path) -> None:
    _backend.fsync_dir(path)


def write_file(path, data) -> None:
    """A new file (or one replaced whole) holding `data`, fsynced; the caller fsyncs the directory."""
    fd = create(path)
    try:
        pwrite(fd, data, 0)
        fsync(fd)
    finally:
        close(fd)


def write_via(path, writer) -> None:
    """`writer(tmp)` writes a whole file by its own means; the seam fsyncs it and renames it to `path`.

    The caller fsyncs the directory, as for write_file."""
    tmp = f"{os.fspath(path)}.tmp"
    writer(tmp)
    _backend.adopt(tmp)
    replace(tmp, path)
