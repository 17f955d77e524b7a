"""PostgreSQL / pgvector: import a table into a collection, keep it in sync, and a local test server.

    from vecsift.integrations.postgres import import_pg, sync_pg
    import_pg("postgresql:///app", "items", id="id", vector="embedding", metadata=["meta"], out="items.vs")
    sync_pg("postgresql:///app", "items.vs", updated="updated_at")

psycopg 3 is needed (pip install "vecsift[pg]"); it is imported on first use.
"""
from vecsift.integrations.postgres.importer import ImportReport, import_pg
from vecsift.integrations.postgres.source import PgImportError
from vecsift.integrations.postgres.sync import SyncReport, sync_pg

__all__ = ["ImportReport", "PgImportError", "SyncReport", "import_pg", "sync_pg"]
