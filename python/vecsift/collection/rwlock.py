"""The readers-writer lock between native searches (readers) and index mutation (the writer).

Every search takes the read side once, so it is kept cheap: `read()` and
`write()` return guard objects made once per lock (no generator-based context
manager per call), and a reader that finds no writer holding or waiting takes
one plain mutex once on the way in and once on the way out. Waking is only
done when somebody can be waiting for it.
"""
from __future__ import annotations

import threading


class _ReadGuard:
    __slots__ = ("_lock",)

    def __init__(self, lock):
        self._lock = lock

    def __enter__(self):
        self._lock.acquire_read()
        return self

    def __exit__(self, *exc):
        self._lock.release_read()
        return False


class _WriteGuard:
    __slots__ = ("_lock",)

    def __init__(self, lock):
        self._lock = lock

    def __enter__(self):
        self._lock.acquire_write()
        return self

    def __exit__(self, *exc):
        self._lock.release_write()
        return False


class RWLock:
    """Many readers or one writer; a waiting writer blocks new readers (no starvation).

    Use as ``with lock.read(): ...`` / ``with lock.write(): ...`` (not reentrant)."""

    def __init__(self):
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._readers = 0
        self._writer = False
        self._waiting = 0  # writers waiting
        self._read_guard = _ReadGuard(self)
        self._write_guard = _WriteGuard(self)

    def read(self) -> _ReadGuard:
        return self._read_guard

    def write(self) -> _WriteGuard:
        return self._write_guard

    def acquire_read(self) -> None:
        with self._mutex:
            while self._writer or self._waiting:
                self._cond.wait()
            self._readers += 1

    def release_read(self) -> None:
        with self._mutex:
            self._readers -= 1
            if not self._readers and self._waiting:  # only a writer waits for the readers to drain
                self._cond.notify_all()

    def acquire_write(self) -> None:
        with self._mutex:
            self._waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            except BaseException:  # interrupted: readers held back by this writer may go on
                self._waiting -= 1
                self._cond.notify_all()
                raise
            self._waiting -= 1
            self._writer = True

    def release_write(self) -> None:
        with self._mutex:
            self._writer = False
            self._cond.notify_all()  # readers and writers may both be waiting
