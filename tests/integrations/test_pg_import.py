"""import-pg and sync-pg end to end against a real PostgreSQL 16 + pgvector (the pg_dsn fixture)."""
import os

import numpy as np
import psycopg
import pytest
from pg_server import pg_dsn  # noqa: F401 - the fixture

import vecsift
from vecsift.integrations.postgres import PgImportError, import_pg, importer, sync_pg
from vecsift.tools.cli import main

N, DIM = 2000, 16


def vec_literal(v):
    return "[" + ",".join(f"{x:.6g}" for x in v) + "]"


@pytest.fixture
def table(pg_dsn, request):
    """A fresh table `docs_<test>` of N random rows; returns (name, vectors)."""
    name = "docs_" + request.node.name.replace("[", "_").replace("]", "")[:40]
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal((N, DIM)).astype(np.float32)
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f"DROP TABLE IF EXISTS {name}")
        c.execute(f"CREATE TABLE {name} (id bigint PRIMARY KEY, emb vector({DIM}), body text, org text, "
                  "groups text[], meta jsonb, price numeric, published timestamptz, "
                  "updated timestamptz NOT NULL DEFAULT clock_timestamp(), gone boolean NOT NULL DEFAULT false)")
        with c.cursor().copy(f"COPY {name} (id, emb, body, org, groups, meta, price, published) FROM STDIN") as cp:
            for i in range(N):
                cp.write_row([i, vec_literal(x[i]), f"document {i} über", f"org{i % 4}", [f"g{i % 3}", "all"],
                              f'{{"n": {i % 10}, "kind": "{"ab"[i % 2]}"}}', i / 4,
                              f"2024-01-01T00:00:00Z"])
        c.execute(f"UPDATE {name} SET published = published + id * interval '1 hour'")
    return name, x


def cli_import(dsn, name, out, *extra):
    return main(["import-pg", dsn, "--table", name, "--id", "id", "--vector", "emb", "--text", "body",
                 "--tenant", "org", "--acl", "groups", "--metadata", "meta,price,published", "--updated", "updated",
                 "--out", str(out), "--quiet", *extra])


def test_import_matches_the_table_and_filters_like_sql(pg_dsn, table, tmp_path, capsys):
    name, x = table
    out = tmp_path / "c"
    assert cli_import(pg_dsn + " password=hunter2", name, out, "--m", "8", "--ef-construction", "64") == 0
    printed = capsys.readouterr()
    assert f"imported {N} rows" in printed.out and "hunter2" not in printed.out + printed.err
    for f in os.listdir(out):  # credentials never reach the collection's files
        assert b"hunter2" not in (out / f).read_bytes()
    c = vecsift.open(out, readonly=True)
    assert len(c) == N and sorted(c.ids(), key=int) == [str(i) for i in range(N)]
    assert set(c.filter_fields) == {"n", "kind", "price", "published"}
    h = c.search(x[7], k=1, tenant="org3", groups=["g1"])[0]
    assert h.id == "7" and h.text == "document 7 über" and h.tenant == "org3"
    assert h.metadata == {"n": 7, "kind": "b", "price": 1.75, "published": "2024-01-01T07:00:00+00:00"}
    # where= against the same condition in SQL
    where = {"n": {"$in": [1, 3, 5]}, "price": {"$between": [50, 300]},
             "published": {"$lt": "2024-02-15T00:00:00Z"}}
    with psycopg.connect(pg_dsn) as conn:
        want = {str(r[0]) for r in conn.execute(
            f"SELECT id FROM {name} WHERE (meta->>'n')::int IN (1,3,5) AND price BETWEEN 50 AND 300 "
            "AND published < '2024-02-15T00:00:00Z' AND org = 'org1' AND groups && ARRAY['g0','g2']")}
    hits = c.search(x[0], k=N, tenant="org1", groups=["g0", "g2"], where=where)
    assert {h.id for h in hits} == want and len(want) > 5
    c.close()


def test_an_interrupted_import_resumes(pg_dsn, table, tmp_path, monkeypatch):
    name, x = table
    out = tmp_path / "c"
    calls = {"n": 0}
    real_add = importer._add

    def failing_add(coll, batch):
        calls["n"] += 1
        if calls["n"] == 4:
            raise ConnectionError("connection lost")
        real_add(coll, batch)

    monkeypatch.setattr(importer, "_add", failing_add)
    with pytest.raises(ConnectionError):
        import_pg(pg_dsn, name, id="id", vector="emb", out=out, batch_rows=300, commit_rows=500, progress=False,
                  updated="updated")
    monkeypatch.setattr(importer, "_add", real_add)
    c = vecsift.open(out, readonly=True)
    committed = len(c)
    c.close()
    assert 0 < committed < N
    r = import_pg(pg_dsn, name, id="id", vector="emb", out=out, batch_rows=300, progress=False, updated="updated")
    assert r.resumed_after is not None and r.rows == N - committed
    c = vecsift.open(out, readonly=True)
    assert sorted(c.ids(), key=int) == [str(i) for i in range(N)]
    np.testing.assert_array_equal([h.id for h in c.search(x[1999], k=1)], ["1999"])
    c.close()
    with pytest.raises(PgImportError, match="finished import; use sync-pg"):
        import_pg(pg_dsn, name, id="id", vector="emb", out=out, progress=False)


def test_one_line_errors(pg_dsn, table, tmp_path, capsys):
    name, _ = table
    assert main(["import-pg", pg_dsn, "--table", name, "--id", "id", "--vector", "embedding",
                 "--out", str(tmp_path / "a"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vecsift: error: --vector: column 'embedding' is not in table") and "\n" not in err
    assert main(["import-pg", pg_dsn, "--table", "nope", "--id", "id", "--vector", "v", "--out",
                 str(tmp_path / "b"), "--quiet"]) == 2
    assert "table 'nope' does not exist" in capsys.readouterr().err
    assert main(["import-pg", pg_dsn, "--table", name, "--id", "id", "--vector", "emb", "--where", "nonsense >",
                 "--out", str(tmp_path / "c"), "--quiet"]) == 2
    assert capsys.readouterr().err.startswith("vecsift: error: PostgreSQL: syntax error")
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f"UPDATE {name} SET emb = NULL WHERE id IN (3, 1500)")
        c.execute("DROP TABLE IF EXISTS mixed")
        c.execute("CREATE TABLE mixed (id text, v vector)")
        c.execute("INSERT INTO mixed VALUES ('a', '[1,2,3]'), ('b', '[1,2]')")
    with pytest.raises(PgImportError, match=r"row id='3': 'emb' is NULL"):
        import_pg(pg_dsn, name, id="id", vector="emb", out=tmp_path / "d", null_vectors="error", progress=False)
    r = import_pg(pg_dsn, name, id="id", vector="emb", out=tmp_path / "e", progress=False, index="bq")
    assert r.rows == N - 2 and r.skipped_null_vectors == 2
    with pytest.raises(PgImportError, match=r"row id='b': 'v' has 2 dimensions, expected 3"):
        import_pg(pg_dsn, "mixed", id="id", vector="v", out=tmp_path / "f", progress=False)


def test_sync_follows_updates_inserts_deletes_and_is_idempotent(pg_dsn, table, tmp_path):
    name, x = table
    out = tmp_path / "c"
    assert cli_import(pg_dsn, name, out) == 0
    reader = vecsift.open(out, readonly=True)
    rng = np.random.default_rng(9)
    y = rng.standard_normal((40, DIM)).astype(np.float32)
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        for j, i in enumerate(range(100, 120)):  # 1% changed
            c.execute(f"UPDATE {name} SET emb = %s, meta = '{{\"n\": 99}}', updated = clock_timestamp() "
                      "WHERE id = %s", [vec_literal(y[j]), i])
        c.execute(f"INSERT INTO {name} (id, emb, body, org, groups) VALUES (5000, %s, 'new', 'org0', '{{g0}}')",
                  [vec_literal(y[30])])
        c.execute(f"DELETE FROM {name} WHERE id BETWEEN 10 AND 14")
        c.execute(f"UPDATE {name} SET gone = true, updated = clock_timestamp() WHERE id = 20")
        c.execute(f"UPDATE {name} SET emb = NULL, updated = clock_timestamp() WHERE id = 21")
    assert main(["sync-pg", pg_dsn, "--out", str(out), "--deleted", "gone", "--quiet"]) == 0
    c = vecsift.open(out, readonly=True)
    want = {str(i) for i in range(N)} - {str(i) for i in range(10, 15)} - {"20", "21"} | {"5000"}
    assert set(c.ids()) == want and len(c) == len(want)
    h = c.search(y[3], k=1, tenant="org3", groups=["g0", "g1", "g2"])[0]
    assert h.id == "103" and h.metadata["n"] == 99
    assert c.search(y[30], k=1, tenant="org0", groups=["g0"])[0].id == "5000"
    assert len(c.search(y[3], k=N, tenant="org3", groups=["all"], where={"n": 99})) == 5
    # readers searching during the sync saw the old commit until they refreshed
    assert len(reader) == N and reader.refresh() and set(reader.ids()) == want
    reader.close()
    gen = c.info()["generation"]
    c.close()
    r = sync_pg(pg_dsn, out, progress=False)  # nothing changed since: the same rows, the same answers
    assert r.deleted == 0 and r.removed_missing == 0 and r.upserted <= 1
    c = vecsift.open(out, readonly=True)
    assert set(c.ids()) == want and c.info()["generation"] >= gen
    c.close()
