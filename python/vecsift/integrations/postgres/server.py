"""A throwaway PostgreSQL 16 + pgvector from pgserver's bundled binaries, for tests and benchmarks.

pgserver's own get_server(), run as root, adds a user and changes permissions
up the directory tree. Instead: its `pgserver` and `pgserver.libs` folders are
copied once to a directory anyone can read (the binaries find libpq relative
to themselves), and initdb / pg_ctl run as an unprivileged user ("nobody" when
we are root, ourselves otherwise) with a unix socket only
(listen_addresses=''), so nothing listens on the network.

    with LocalPostgres() as pg:
        conn = psycopg.connect(pg.dsn)
"""
from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import time

_COPY_ROOT = "/tmp/vecsift-pgserver"


def pgserver_dir():
    """The installed pgserver package folder, or None if it is not installed (no import: it has side effects)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = list(spec.submodule_search_locations)[0]
    return path if os.path.exists(os.path.join(path, "pginstall", "bin", "postgres")) else None


def _readable_copy() -> str:
    """pgserver's binaries copied where an unprivileged user can run them; returns the bin folder."""
    src = pgserver_dir()
    if src is None:
        raise RuntimeError('PostgreSQL binaries not found: pip install "vecsift[test]" (it carries pgserver)')
    stamp = str(int(os.stat(os.path.join(src, "pginstall", "bin", "postgres")).st_mtime))
    root = f"{_COPY_ROOT}-{stamp}"
    done = os.path.join(root, ".complete")
    if not os.path.exists(done):
        tmp = tempfile.mkdtemp(prefix="vecsift-pgcopy-", dir="/tmp")
        shutil.copytree(src, os.path.join(tmp, "pgserver"), symlinks=True)
        libs = os.path.join(os.path.dirname(src), "pgserver.libs")
        if os.path.isdir(libs):
            shutil.copytree(libs, os.path.join(tmp, "pgserver.libs"), symlinks=True)
        for d, _, files in os.walk(tmp):
            os.chmod(d, 0o755)
            for f in files:
                p = os.path.join(d, f)
                if not os.path.islink(p):
                    os.chmod(p, os.stat(p).st_mode | 0o444 | (0o111 if os.access(p, os.X_OK) else 0))
        open(os.path.join(tmp, ".complete"), "w").close()
        try:
            os.rename(tmp, root)
        except OSError:  # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
    return os.path.join(root, "pgserver", "pginstall", "bin")


class LocalPostgres:
    """Starts a private PostgreSQL on a unix socket in a fresh data directory; stop() removes it."""

    def __init__(self, settings: dict | None = None, user: str | None = None):
        self.settings = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                         "max_connections": "20", **(settings or {})}
        self.user = user
        self.dir = None
        self.dsn = None

    def _run(self, args, **kw):
        return subprocess.run(args, check=True, capture_output=True, text=True, cwd=self.dir, **self._as, **kw)

    def start(self) -> "LocalPostgres":
        bindir = _readable_copy()
        self.dir = tempfile.mkdtemp(prefix="vecsift-pg-", dir="/tmp")
        os.chmod(self.dir, 0o755)
        self._as = {}
        if os.geteuid() == 0:  # postgres refuses to run as root
            pw = pwd.getpwnam(self.user or "nobody")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._as = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [],
                        "env": {"PATH": "/usr/bin:/bin", "HOME": self.dir, "LANG": "C"}}
        data = os.path.join(self.dir, "data")
        try:
            self._run([os.path.join(bindir, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                       "--no-locale", "-N"])
            opts = " ".join([f"-c listen_addresses=''", f"-k {self.dir}"] +
                            [f"-c {k}={v}" for k, v in self.settings.items()])
            self._run([os.path.join(bindir, "pg_ctl"), "-D", data, "-l", os.path.join(self.dir, "log"),
                       "-o", opts, "-w", "-t", "60", "start"])
        except subprocess.CalledProcessError as exc:
            log = ""
            if os.path.exists(os.path.join(self.dir, "log")):
                log = open(os.path.join(self.dir, "log")).read()[-2000:]
            self.stop()
            raise RuntimeError(f"PostgreSQL did not start: {exc.stderr.strip() or exc}\n{log}") from None
        self._bindir, self._data = bindir, data
        self.dsn = f"host={self.dir} port=5432 user=postgres dbname=postgres"
        self._wait_and_create_extension()
        return self

    def _wait_and_create_extension(self):
        import psycopg
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise

    def stop(self) -> None:
        if self.dir is None:
            return
        if self.dsn is not None:
            try:
                self._run([os.path.join(self._bindir, "pg_ctl"), "-D", self._data, "-m", "immediate", "-w", "stop"])
            except subprocess.CalledProcessError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = self.dsn = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
