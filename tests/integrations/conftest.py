import pytest

from vecsift.integrations.postgres.server import LocalPostgres, pgserver_dir


@pytest.fixture(scope="session")
def pg_dsn():
    """A real PostgreSQL 16 + pgvector (pgserver's binaries), on a unix socket, for the whole session."""
    pytest.importorskip("psycopg", reason='psycopg 3 is not installed (pip install "vecsift[test]")')
    if pgserver_dir() is None:
        pytest.skip('PostgreSQL binaries absent: pgserver is not installed (pip install "vecsift[test]")')
    server = LocalPostgres().start()  # a failure to start is an error, not a skip
    yield server.dsn
    server.stop()
