"""The pg_dsn fixture (imported by the pg test modules; a conftest.py here would shadow tests/conftest.py).

One server for the whole session, however many modules import the fixture."""
import atexit

import pytest

from vecsift.integrations.postgres.server import LocalPostgres, pgserver_dir

_SERVER = []


@pytest.fixture(scope="session")
def pg_dsn():
    """A real PostgreSQL 16 + pgvector (pgserver's binaries), on a unix socket."""
    pytest.importorskip("psycopg", reason='psycopg 3 is not installed (pip install "vecsift[test]")')
    if pgserver_dir() is None:
        pytest.skip('PostgreSQL binaries absent: pgserver is not installed (pip install "vecsift[test]")')
    if not _SERVER:
        _SERVER.append(LocalPostgres().start())  # a failure to start is an error, not a skip
        atexit.register(_SERVER[0].stop)
    return _SERVER[0].dsn
