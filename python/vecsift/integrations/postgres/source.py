"""Reading a pgvector table: connect, check the columns, and stream decoded batches.

One SELECT is built from the column mapping:

    id::text, <vector column as is>, text::text, tenant::text,
    json_build_object('a', acl, 'c:<col>', <scalar col>, 'j:<col>', <json col>, ...)::text

so the server does the type conversions (arrays, timestamps in UTC as ISO
8601, numerics) and the client decodes fixed-layout vectors and UTF-8 texts
with copy_binary, and the per-row JSON objects with pyarrow's JSON reader:
no Python per row.

Credentials: the DSN (or libpq's PG* environment variables when it is empty)
goes to psycopg and nowhere else; errors and state name the table only.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from vecsift.integrations.postgres.copy_binary import CopyReader, Fields, vector_dim

_INT = {"int2", "int4", "int8", "oid"}
_FLOAT = {"float4", "float8", "numeric", "money"}
_TEXTISH = {"text", "varchar", "bpchar", "name", "uuid", "citext", "inet", "cidr", "timestamptz", "timestamp",
            "date", "time", "timetz", "interval"}
_JSON = {"json", "jsonb"}
_OPCLASS_METRIC = {"vector_l2_ops": "l2", "vector_ip_ops": "ip", "vector_cosine_ops": "cosine",
                   "halfvec_l2_ops": "l2", "halfvec_ip_ops": "ip", "halfvec_cosine_ops": "cosine"}


class PgImportError(ValueError):
    """A problem with the source table or its rows, said in one line."""


def psycopg():
    try:
        import psycopg as mod
    except ImportError:
        raise ImportError('PostgreSQL import needs psycopg 3: pip install "vecsift[pg]"') from None
    return mod


def connect(dsn: str | None):
    """A connection from a DSN/URI, or from PG* environment variables when dsn is empty."""
    pg = psycopg()
    try:
        conn = pg.connect(dsn or "", autocommit=False)
    except pg.OperationalError as exc:
        raise PgImportError(f"cannot connect to PostgreSQL: {str(exc).strip().splitlines()[0]}") from None
    conn.execute("SET TimeZone = 'UTC'")  # timestamptz -> ISO 8601 in UTC
    conn.commit()
    return conn


@dataclass
class Mapping:
    """Which table columns become which chunk fields (stored in the collection; no credentials)."""
    table: str
    id: str
    vector: str
    text: str | None = None
    tenant: str | None = None
    acl: str | None = None
    metadata: list = field(default_factory=list)
    where: str | None = None
    updated: str | None = None
    deleted: str | None = None

    def to_dict(self):
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d):
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__ if k in d})


@dataclass
class Table:
    """The source table as described by the catalog."""
    mapping: Mapping
    types: dict  # column -> (typname, element typname or None)
    vector_type: str
    dim: int | None
    metric: str | None


def describe(conn, mapping: Mapping) -> Table:
    """Checks that every mapped column exists and has a usable type; one-line errors otherwise."""
    pg = psycopg()
    try:
        rows = conn.execute(
            "SELECT a.attname, t.typname, et.typname, a.atttypmod FROM pg_attribute a "
            "JOIN pg_type t ON t.oid = a.atttypid LEFT JOIN pg_type et ON et.oid = t.typelem AND t.typlen = -1 "
            "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            [mapping.table]).fetchall()
    except pg.errors.UndefinedTable:
        conn.rollback()
        raise PgImportError(f"table {mapping.table!r} does not exist") from None
    types = {r[0]: (r[1], r[2] if r[1].startswith("_") else None, r[3]) for r in rows}
    wanted = [("--id", mapping.id), ("--vector", mapping.vector), ("--text", mapping.text),
              ("--tenant", mapping.tenant), ("--acl", mapping.acl), ("--updated", mapping.updated),
              ("--deleted", mapping.deleted)] + [("--metadata", m) for m in mapping.metadata]
    for flag, col in wanted:
        if col is not None and col not in types:
            raise PgImportError(f"{flag}: column {col!r} is not in table {mapping.table!r} "
                                f"(columns: {', '.join(types)})")
    vtype, _, typmod = types[mapping.vector]
    if vtype not in ("vector", "halfvec"):
        raise PgImportError(f"--vector: column {mapping.vector!r} is {vtype}, not a pgvector vector or halfvec")
    if mapping.acl is not None and not types[mapping.acl][0].startswith("_"):
        raise PgImportError(f"--acl: column {mapping.acl!r} is {types[mapping.acl][0]}, not an array (text[])")
    if mapping.deleted is not None and types[mapping.deleted][0] != "bool":
        raise PgImportError(f"--deleted: column {mapping.deleted!r} is {types[mapping.deleted][0]}, not boolean")
    metric = None
    opclass = conn.execute(
        "SELECT o.opcname FROM pg_index i JOIN pg_opclass o ON o.oid = ANY(i.indclass::oid[]) "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey::int2[]) "
        "WHERE i.indrelid = %s::regclass AND a.attname = %s", [mapping.table, mapping.vector]).fetchall()
    for (name,) in opclass:
        metric = metric or _OPCLASS_METRIC.get(name)
    conn.commit()
    return Table(mapping, {k: v[:2] for k, v in types.items()}, vtype, typmod if typmod > 0 else None, metric)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _arrow_type(typname: str, elem):
    if typname.startswith("_"):
        inner = _arrow_type(elem or "text", None)
        return pa.list_(inner) if inner is not None else None
    if typname in _INT:
        return pa.int64()
    if typname in _FLOAT:
        return pa.float64()
    if typname == "bool":
        return pa.bool_()
    if typname in _JSON:
        return None  # inferred: its keys become metadata fields
    return pa.string()


def _json_expr(col: str, typname: str) -> str:
    if typname in _TEXTISH and typname not in ("timestamptz", "timestamp", "date"):
        return f"{_ident(col)}::text"
    return _ident(col)  # json_build_object converts (timestamps as ISO 8601, arrays, numbers)


class Query:
    """The SELECT of a mapping and how to decode its COPY rows."""

    def __init__(self, table: Table):
        self.table = table
        m = table.mapping
        cols = [f"{_ident(m.id)}::text", _ident(m.vector)]
        self.text_at = self.tenant_at = self.deleted_at = self.json_at = None
        if m.text:
            self.text_at = len(cols)
            cols.append(f"{_ident(m.text)}::text")
        if m.tenant:
            self.tenant_at = len(cols)
            cols.append(f"{_ident(m.tenant)}::text")
        if m.deleted:
            self.deleted_at = len(cols)
            cols.append(f"({_ident(m.deleted)} IS TRUE)::text")
        pairs, schema = [], []
        if m.acl:
            pairs.append(("a", _ident(m.acl)))
            schema.append(pa.field("a", pa.list_(pa.string())))
        self.json_cols = []
        for c in m.metadata:
            typ, elem = table.types[c]
            key = ("j:" if typ in _JSON else "c:") + c
            pairs.append((key, _json_expr(c, typ)))
            atype = _arrow_type(typ, elem)
            if atype is not None:
                schema.append(pa.field(key, atype))
            self.json_cols.append((key, c))
        if pairs:
            self.json_at = len(cols)
            args = ", ".join(f"'{k.replace(chr(39), chr(39) * 2)}', {e}" for k, e in pairs)
            cols.append(f"json_build_object({args})::text")
        self.schema = pa.schema(schema)
        self.columns = cols

    def sql(self, extra_where: list[str], order: bool) -> str:
        m = self.table.mapping
        where = ([f"({m.where})"] if m.where else []) + extra_where
        # output names _vs0.. so that ORDER BY "id" means the column, not the ::text output named like it
        cols = ", ".join(f"{c} AS _vs{i}" for i, c in enumerate(self.columns))
        q = f"SELECT {cols} FROM {m.table}"
        if where:
            q += " WHERE " + " AND ".join(where)
        if order:
            q += f" ORDER BY {_ident(m.id)}"
        return q

    def decode(self, f: Fields, dim: int, null_vectors: str) -> dict:
        """One batch as the arguments of Collection.add (rows with a NULL vector dropped and counted)."""
        m = self.table.mapping
        ids = f.text(0)
        if ids.null_count:
            raise PgImportError(f"--id: column {m.id!r} is NULL in {ids.null_count} rows")
        vecs, bad, got = f.vectors(1, self.table.vector_type, dim)
        if bad >= 0:
            raise PgImportError(f"row {m.id}={ids[bad].as_py()!r}: {m.vector!r} has {got} dimensions, "
                                f"expected {dim}")
        null = f.nulls(1)
        out = {"ids": ids, "vectors": vecs, "skipped": int(null.sum())}
        if self.text_at is not None:
            out["texts"] = f.text(self.text_at)
        if self.tenant_at is not None:
            out["tenant"] = f.text(self.tenant_at)
        if self.deleted_at is not None:
            out["deleted"] = pc.equal(f.text(self.deleted_at), "true")
        if self.json_at is not None:
            out.update(self._extras(f.json_lines(self.json_at)))
        if out["skipped"]:
            if null_vectors != "skip":
                raise PgImportError(f"row {m.id}={ids.filter(pa.array(null))[0].as_py()!r}: {m.vector!r} is NULL "
                                    f"({out['skipped']} in this batch; --null-vectors skip drops and counts them)")
            keep = pa.array(~null)
            for k, v in list(out.items()):
                if k == "vectors":
                    out[k] = v[~null]
                elif isinstance(v, (pa.Array, pa.Table)):
                    out[k] = v.filter(keep)
        return out

    def _extras(self, lines: bytes) -> dict:
        opts = pajson.ParseOptions(explicit_schema=self.schema, unexpected_field_behavior="infer")
        block = max(1 << 20, min(len(lines), 1 << 30))
        try:
            t = pajson.read_json(io.BytesIO(lines), read_options=pajson.ReadOptions(block_size=block),
                                 parse_options=opts)
        except pa.ArrowInvalid as exc:
            raise PgImportError(f"metadata: {str(exc).splitlines()[0]} (a JSON key with values of "
                                "different types in one batch)") from None
        out = {}
        if "a" in t.column_names:
            out["acl"] = t["a"].combine_chunks()
        names, arrays = [], []
        for key, col in self.json_cols:
            arr = t[key].combine_chunks() if key in t.column_names else pa.nulls(t.num_rows)
            if key.startswith("j:") and pa.types.is_struct(arr.type):
                for i in range(arr.type.num_fields):
                    sub = arr.field(i)
                    if arr.null_count:
                        sub = pc.if_else(arr.is_valid(), sub, pa.nulls(len(sub), sub.type))
                    names.append(arr.type.field(i).name)
                    arrays.append(_iso_strings(sub))
            else:
                names.append(col)
                arrays.append(_iso_strings(arr))
        if names:
            out["metadata"] = pa.table(dict(zip(names, arrays)))
        return out


def _iso_strings(arr: pa.Array) -> pa.Array:
    """Dates the JSON reader guessed from strings go back to ISO 8601 strings (stable types across batches)."""
    if pa.types.is_timestamp(arr.type):
        midnight = pc.equal(arr.cast(pa.date32()).cast(arr.type), arr)
        dates = pc.all(midnight).as_py() is not False
        return pc.strftime(arr, "%Y-%m-%d" if dates else "%Y-%m-%dT%H:%M:%S")
    return arr


def stream(conn, sql: str, params, ncols: int, batch_rows: int):
    """Yields Fields of up to batch_rows whole rows of `COPY (sql) TO STDOUT (FORMAT binary)`."""
    reader = CopyReader(ncols, batch_rows)
    min_bytes = 16 << 20
    with conn.cursor() as cur:
        with cur.copy(f"COPY ({sql}) TO STDOUT (FORMAT binary)", params) as copy:
            for chunk in copy:
                yield from reader.feed(chunk, min_bytes=min_bytes)
    yield from reader.feed(b"", final=True)


def count(conn, q: Query, extra_where, params) -> int:
    """Rows the import will read (for the progress bar): the same WHERE, none of the select list's work."""
    m = q.table.mapping
    where = ([f"({m.where})"] if m.where else []) + extra_where
    sql = f"SELECT count(*) FROM {m.table}" + (" WHERE " + " AND ".join(where) if where else "")
    return int(conn.execute(sql, params).fetchone()[0])


def first_dim(fields: Fields):
    """The dimension written in the batch's first non-NULL vector (None if all are NULL)."""
    return vector_dim(fields.buf, fields, 1)
