"""`vecsift import-pg` and `vecsift sync-pg`: the PostgreSQL / pgvector subcommands.

The DSN is a libpq connection string or URI; leave it empty ("") to use the
PG* environment variables (PGHOST, PGUSER, PGPASSWORD, ...). It is never
printed or stored.
"""
from __future__ import annotations

import sys


def _csv(text: str):
    return [part.strip() for part in text.split(",") if part.strip()]


def _pg_errors(fn):
    def run(args):
        try:
            import psycopg
        except ImportError:
            raise ImportError('PostgreSQL commands need psycopg 3: pip install "vecsift[pg]"') from None
        try:
            return fn(args)
        except psycopg.Error as exc:  # SQL errors (e.g. in --where): the server's first line
            print(f"vecsift: error: PostgreSQL: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
            return 2
    return run


@_pg_errors
def cmd_import_pg(args) -> int:
    from vecsift.integrations.postgres import import_pg
    params = {k: v for k, v in (("m", args.m), ("ef_construction", args.ef_construction)) if v is not None}
    r = import_pg(args.dsn, args.table, id=args.id, vector=args.vector, out=args.out, text=args.text,
                  tenant=args.tenant, acl=args.acl, metadata=_csv(args.metadata or ""), where=args.where,
                  updated=args.updated, deleted=args.deleted, null_vectors=args.null_vectors,
                  batch_rows=args.batch_rows, metric=args.metric, index=args.index,
                  filter_fields=None if args.filter_fields is None else _csv(args.filter_fields),
                  progress=not args.quiet, **params)
    resumed = f", resumed after id {r.resumed_after}" if r.resumed_after is not None else ""
    print(f"imported {r.rows} rows in {r.seconds:.1f} s ({r.rows_per_second:,.0f} rows/s), "
          f"{r.skipped_null_vectors} NULL vectors skipped{resumed} -> {args.out}")
    return 0


@_pg_errors
def cmd_sync_pg(args) -> int:
    from vecsift.integrations.postgres import sync_pg
    r = sync_pg(args.dsn, args.out, updated=args.updated, deleted=args.deleted,
                remove_missing=not args.keep_missing, progress=not args.quiet)
    print(f"synced {args.out}: {r.upserted} upserted, {r.deleted} deleted (flag or NULL vector), "
          f"{r.removed_missing} gone from the table, in {r.seconds:.1f} s; watermark {r.watermark}")
    return 0


def add_pg_commands(sub) -> None:
    """Adds import-pg and sync-pg to the `vecsift` subparsers."""
    p = sub.add_parser("import-pg", help="import a pgvector table into a new collection (resumable)")
    p.add_argument("dsn", help='libpq DSN or URI; "" uses the PG* environment variables')
    p.add_argument("--table", required=True, help="table (or schema.table) to read")
    p.add_argument("--id", required=True, help="id column (unique; imported in its order)")
    p.add_argument("--vector", required=True, help="vector or halfvec column")
    p.add_argument("--text", help="text column (indexed for BM25)")
    p.add_argument("--tenant", help="tenant column")
    p.add_argument("--acl", help="text[] column of ACL groups")
    p.add_argument("--metadata", help="comma-separated columns kept as metadata (json/jsonb: their keys)")
    p.add_argument("--filter-fields", help="comma-separated fields usable in where= (default: all metadata)")
    p.add_argument("--where", help="SQL condition selecting the rows to import")
    p.add_argument("--updated", help="timestamp column set on every change (the watermark sync-pg follows)")
    p.add_argument("--deleted", help="boolean column marking soft-deleted rows (not imported)")
    p.add_argument("--null-vectors", choices=("skip", "error"), default="skip",
                   help="rows with a NULL vector: skip and count them (default), or stop with an error")
    p.add_argument("--metric", choices=("cosine", "ip", "l2"),
                   help="default: from the column's pgvector index, else cosine")
    p.add_argument("--index", default="hnsw", choices=("hnsw", "bq"))
    p.add_argument("--m", type=int, help="HNSW m (as pgvector's m)")
    p.add_argument("--ef-construction", type=int, help="HNSW ef_construction (as pgvector's)")
    p.add_argument("--batch-rows", type=int, default=50_000)
    p.add_argument("--out", required=True, help="collection directory (an interrupted import resumes here)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_import_pg)

    s = sub.add_parser("sync-pg", help="bring an imported collection up to date with its table")
    s.add_argument("dsn", help='libpq DSN or URI; "" uses the PG* environment variables')
    s.add_argument("--out", required=True, help="the collection import-pg made")
    s.add_argument("--updated", help="timestamp column set on every change (default: the one given before)")
    s.add_argument("--deleted", help="boolean column marking soft-deleted rows")
    s.add_argument("--keep-missing", action="store_true", help="do not remove ids gone from the table")
    s.add_argument("--quiet", action="store_true")
    s.set_defaults(func=cmd_sync_pg)
