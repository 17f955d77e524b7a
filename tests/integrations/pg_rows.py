"""The recorded COPY fixture: a small pgvector table, the SELECT import_pg runs on it, and its bytes."""
import json
from pathlib import Path

from vecsift.integrations.postgres import source
from vecsift.integrations.postgres.source import Mapping, Query, Table

DATA = Path(__file__).resolve().parent.parent / "data"
BIN, META = DATA / "pgvector_copy.bin", DATA / "pgvector_copy.json"

CREATE = """
CREATE TABLE fx (id int PRIMARY KEY, v vector(4), t text, org text, tags text[], meta jsonb,
                 price numeric, ts timestamptz);
INSERT INTO fx VALUES
 (1, '[1.5,-2,0,3.25]', 'héllo', 'acme', '{a,b}', '{"k": 1, "s": "x", "day": "2024-05-01"}', 9.99,
  '2024-05-01 10:00:00+02'),
 (2, NULL, NULL, NULL, '{}', NULL, NULL, NULL),
 (3, '[0.001,1000000,-0,7]', '日本語', 'acme', '{c}', '{"k": 2}', 0, '1999-12-31 23:59:59.5+00'),
 (4, '[1,2,3,4]', '', 'beta', NULL, '{"s": "ü"}', -12345678.5, '2030-01-01 00:00:00+00');
"""
MAPPING = Mapping("fx", "id", "v", text="t", tenant="org", acl="tags", metadata=["meta", "price", "ts"])

# What the rows are, written independently of any decoding.
EXPECTED = {
    "ids": ["1", "2", "3", "4"],
    "vectors": [[1.5, -2, 0, 3.25], None, [0.001, 1e6, -0.0, 7], [1, 2, 3, 4]],
    "texts": ["héllo", None, "日本語", ""],
    "tenant": ["acme", None, "acme", "beta"],
    "acl": [["a", "b"], [], ["c"], None],
    "k": [1, None, 2, None], "day": ["2024-05-01", None, None, None], "s": ["x", None, None, "ü"],
    "price": [9.99, None, 0.0, -12345678.5],
    "ts": ["2024-05-01T08:00:00+00:00", None, "1999-12-31T23:59:59.5+00:00", "2030-01-01T00:00:00+00:00"],
}


def record(dsn) -> tuple[bytes, dict]:
    """Creates the table on a real server and returns the COPY bytes of import_pg's SELECT and the types."""
    conn = source.connect(dsn)
    try:
        conn.execute("DROP TABLE IF EXISTS fx")
        conn.execute(CREATE)
        conn.commit()
        table = source.describe(conn, MAPPING)
        sql = Query(table).sql([], order=True)
        out = bytearray()
        with conn.cursor() as cur, cur.copy(f"COPY ({sql}) TO STDOUT (FORMAT binary)") as copy:
            for chunk in copy:
                out += chunk
        conn.commit()
        return bytes(out), {"types": table.types, "vector_type": table.vector_type, "dim": table.dim, "sql": sql}
    finally:
        conn.close()


def recorded_query() -> tuple[Query, bytes]:
    meta = json.loads(META.read_text())
    table = Table(MAPPING, {k: tuple(v) for k, v in meta["types"].items()}, meta["vector_type"], meta["dim"], None)
    return Query(table), BIN.read_bytes()


if __name__ == "__main__":  # python tests/integrations/pg_rows.py: re-record (needs pgserver)
    from vecsift.integrations.postgres.server import LocalPostgres
    with LocalPostgres() as pg:
        data, meta = record(pg.dsn)
    BIN.write_bytes(data)
    META.write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {BIN} ({len(data)} bytes) and {META}")
