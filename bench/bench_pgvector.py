"""vecsift against a real pgvector (issue 13): build, import, recall@10 / QPS across ef_search, filters, sync.

    flock /tmp/vecsift-bench.lock python bench/bench_pgvector.py [--part search|scale|both] [--rows 1000000]

PostgreSQL 16 + pgvector 0.6.2 from pgserver's wheel, started by
vecsift.integrations.postgres.server.LocalPostgres (unix socket, an
unprivileged user, fsync off: the data is throwaway).

search: the 100k real PyPI MiniLM rows (384-d), 500 of the 1,000 held-out
    queries. pgvector HNSW (vector_cosine_ops) and a vecsift hnsw collection
    made by import_pg, the same m / ef_construction. One connection with a
    prepared statement (binary vector parameter) vs one vecsift thread, one
    query per call; recall@10 against vecsift.exact_search; an ef sweep each,
    interleaved, median of --reps. Then 2 connections vs 2 threads, and the
    filtered queries `WHERE tenant = 7` (1%) and `WHERE bucket = 3` (10%):
    rows returned, recall against exact search over the allowed rows, QPS.
scale: --rows generated rows (real rows + Gaussian noise, renormalised,
    seed 0) loaded into a table; import_pg into a bq collection (rows/s), the
    COPY decode alone (us/row), then 1% of rows changed and sync_pg timed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

import vecsift
from vecsift.integrations.postgres import import_pg, source, sync_pg
from vecsift.integrations.postgres.server import LocalPostgres

K = 10
DATA = Path("/work/shared/data/pypi-minilm")


def log(*a):
    print(*a, flush=True)


def recall(found, truth) -> float:
    out = []
    for f, t in zip(found, truth):
        t = [x for x in t[:K] if x >= 0]
        out.append(len(set(f[:K]) & set(t)) / max(1, len(t)))
    return float(np.mean(out))


def copy_rows(conn, table, x, start=0, tenant_mod=100, bucket_mod=10, chunk=50_000):
    """Rows (id, emb, tenant, bucket) sent as one binary COPY built with numpy (no Python per row)."""
    dim = x.shape[1]
    dt = np.dtype([("nf", ">i2"), ("l0", ">i4"), ("id", ">i8"), ("l1", ">i4"), ("dim", ">i2"), ("pad", ">i2"),
                   ("v", ">f4", (dim,)), ("l2", ">i4"), ("tenant", ">i4"), ("l3", ">i4"), ("bucket", ">i4")])
    with conn.cursor() as cur, cur.copy(f"COPY {table} (id, emb, tenant, bucket) FROM STDIN (FORMAT binary)") as cp:
        cp.write(source_signature())
        for s in range(0, len(x), chunk):
            part = x[s:s + chunk]
            rec = np.zeros(len(part), dt)
            ids = np.arange(start + s, start + s + len(part))
            rec["nf"], rec["l0"], rec["id"], rec["l1"] = 4, 8, ids, 4 + 4 * dim
            rec["dim"], rec["v"], rec["l2"], rec["tenant"] = dim, part, 4, ids % tenant_mod
            rec["l3"], rec["bucket"] = 4, ids % bucket_mod
            cp.write(rec.tobytes())
        cp.write(b"\xff\xff")
    conn.commit()


def source_signature():
    from vecsift.integrations.postgres.copy_binary import SIGNATURE
    return SIGNATURE + b"\x00\x00\x00\x00\x00\x00\x00\x00"


def make_table(conn, table, x):
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, emb vector({x.shape[1]}), tenant int, bucket int, "
                 "updated timestamptz NOT NULL DEFAULT clock_timestamp())")
    conn.commit()
    t0 = time.perf_counter()
    copy_rows(conn, table, x)
    conn.execute(f"VACUUM ANALYZE {table}") if conn.autocommit else None
    return time.perf_counter() - t0


def pg_search(conn, table, queries, ef, where=""):
    conn.execute(f"SET hnsw.ef_search = {int(ef)}")
    sql = f"SELECT id FROM {table} {where} ORDER BY emb <=> %s LIMIT {K}"
    out = []
    with conn.cursor() as cur:
        for q in queries:
            cur.execute(sql, (q,), prepare=True)
            out.append([r[0] for r in cur.fetchall()])
    return out


def vs_search(coll, queries, ef, where=None):
    out = []
    for q in queries:
        out.append([int(h.id) for h in coll.search(q, k=K, ef=ef, where=where, threads=1)])
    return out


def paired(fa, fb, reps):
    """((result a, median s), (result b, median s)): warm-up, then a, b, a, b, ... so both see the same load."""
    ra, rb = fa(), fb()
    ta, tb = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        ra = fa()
        ta.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        rb = fb()
        tb.append(time.perf_counter() - t0)
    return (ra, float(np.median(ta))), (rb, float(np.median(tb)))


def timed(fn, reps):
    """(result, median seconds) over reps runs after a warm-up run."""
    res = fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        res = fn()
        ts.append(time.perf_counter() - t0)
    return res, float(np.median(ts))


def part_search(pg, args, results):
    import psycopg
    from pgvector.psycopg import register_vector

    x16 = np.load(DATA / "vectors.f16.npy", mmap_mode="r")
    base = np.asarray(x16[:args.search_rows], np.float32)
    queries = np.asarray(x16[100_000:100_000 + args.queries], np.float32)
    conn = psycopg.connect(pg.dsn, autocommit=True)
    register_vector(conn)
    load_s = make_table(conn, "pypi", base)
    conn.execute("VACUUM ANALYZE pypi")
    log(f"loaded {len(base)} rows into PostgreSQL in {load_s:.1f} s")
    t0 = time.perf_counter()
    conn.execute(f"SET maintenance_work_mem = '2GB'")
    conn.execute(f"CREATE INDEX ON pypi USING hnsw (emb vector_cosine_ops) WITH (m = {args.m}, "
                 f"ef_construction = {args.efc})")
    pg_build = time.perf_counter() - t0
    log(f"pgvector hnsw build {pg_build:.1f} s")
    out = Path(tempfile.mkdtemp(prefix="vs-pgbench-", dir=args.tmp))
    t0 = time.perf_counter()
    rep = import_pg(pg.dsn, "pypi", id="id", vector="emb", metadata=["tenant", "bucket"], out=out / "hnsw",
                    index="hnsw", m=args.m, ef_construction=args.efc, progress=False,
                    **({"codes": args.hnsw_codes} if args.hnsw_codes != "float32" else {}))
    vs_build = time.perf_counter() - t0
    log(f"vecsift import_pg + hnsw build + commit {vs_build:.1f} s ({rep.rows} rows)")
    coll = vecsift.open(out / "hnsw", readonly=True)

    qn = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    bn = base / np.linalg.norm(base, axis=1, keepdims=True)
    truth, _ = vecsift.exact_search(bn, qn, K, "ip")
    sweep = []
    for ef in args.ef:
        (pg_ids, pg_s), (vs_ids, vs_s) = paired(lambda: pg_search(conn, "pypi", queries, ef),
                                                lambda: vs_search(coll, queries, ef), args.reps)
        row = {"ef": ef, "pg_recall": recall(pg_ids, truth), "pg_qps": len(queries) / pg_s,
               "vs_recall": recall(vs_ids, truth), "vs_qps": len(queries) / vs_s}
        sweep.append(row)
        log(f"ef {ef:4d}: pgvector recall {row['pg_recall']:.3f} {row['pg_qps']:7.0f} QPS | "
            f"vecsift recall {row['vs_recall']:.3f} {row['vs_qps']:7.0f} QPS")
    # the quantised first stage (index="bq": sign-bit scan + exact rescoring), for reference: no graph
    t0 = time.perf_counter()
    import_pg(pg.dsn, "pypi", id="id", vector="emb", metadata=["tenant", "bucket"], out=out / "bq", index="bq",
              progress=False)
    bq_build = time.perf_counter() - t0
    bq = vecsift.open(out / "bq", readonly=True)
    bq_sweep = []
    for ov in args.oversample:
        ids_, s_ = timed(lambda: [[int(h.id) for h in bq.search(q, k=K, oversample=ov, threads=1)] for q in queries],
                         args.reps)
        bq_sweep.append({"oversample": ov, "recall": recall(ids_, truth), "qps": len(queries) / s_})
        log(f"bq oversample {ov:3d}: vecsift recall {bq_sweep[-1]['recall']:.3f} {bq_sweep[-1]['qps']:7.0f} QPS")
    bq.close()
    target = 0.95
    pg_at = next((r for r in sweep if r["pg_recall"] >= target), None)
    vs_at = next((r for r in sweep if r["vs_recall"] >= target), None)
    ratio = vs_at["vs_qps"] / pg_at["pg_qps"] if pg_at and vs_at else None
    log(f"at recall >= {target}: pgvector {pg_at and round(pg_at['pg_qps'])} QPS (ef {pg_at and pg_at['ef']}), "
        f"vecsift {vs_at and round(vs_at['vs_qps'])} QPS (ef {vs_at and vs_at['ef']}): {ratio and round(ratio, 1)}x")

    # two connections vs two threads, at each side's first ef reaching the target
    two = {}
    if pg_at and vs_at:
        halves = np.array_split(queries, 2)
        conns = [psycopg.connect(pg.dsn, autocommit=True) for _ in range(2)]
        for c in conns:
            register_vector(c)

        def run2(fn):
            ts = [threading.Thread(target=fn, args=(i, h)) for i, h in enumerate(halves)]
            t0 = time.perf_counter()
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            return time.perf_counter() - t0

        pg2, vs2 = [], []
        for _ in range(args.reps + 1):  # interleaved; the first pair is the warm-up
            pg2.append(run2(lambda i, h: pg_search(conns[i], "pypi", h, pg_at["ef"])))
            vs2.append(run2(lambda i, h: vs_search(coll, h, vs_at["ef"])))
        pg2, vs2 = pg2[1:], vs2[1:]
        two = {"pg_qps": len(queries) / np.median(pg2), "vs_qps": len(queries) / np.median(vs2),
               "pg_ef": pg_at["ef"], "vs_ef": vs_at["ef"]}
        log(f"2 connections: pgvector {two['pg_qps']:.0f} QPS | 2 threads: vecsift {two['vs_qps']:.0f} QPS")
        for c in conns:
            c.close()

    filtered = []
    ids = np.arange(len(base))
    for label, col, val, mod in (("1%", "tenant", 7, 100), ("10%", "bucket", 3, 10)):
        allowed = np.flatnonzero(ids % mod == val)
        t_ids, _ = vecsift.exact_search(bn[allowed], qn, K, "ip")
        ftruth = allowed[t_ids]
        for ef in args.filter_ef:
            (pg_ids, pg_s), (vs_ids, vs_s) = paired(
                lambda: pg_search(conn, "pypi", queries, ef, f"WHERE {col} = {val}"),
                lambda: vs_search(coll, queries, ef, {col: val}), args.reps)
            row = {"filter": label, "ef": ef,
                   "pg_rows": float(np.mean([len(r) for r in pg_ids])), "pg_recall": recall(pg_ids, ftruth),
                   "pg_qps": len(queries) / pg_s,
                   "vs_rows": float(np.mean([len(r) for r in vs_ids])), "vs_recall": recall(vs_ids, ftruth),
                   "vs_qps": len(queries) / vs_s}
            filtered.append(row)
            log(f"{label} ef {ef}: pgvector {row['pg_rows']:.2f} rows recall {row['pg_recall']:.3f} "
                f"{row['pg_qps']:.0f} QPS | vecsift {row['vs_rows']:.2f} rows recall {row['vs_recall']:.3f} "
                f"{row['vs_qps']:.0f} QPS")
    coll.close()
    conn.close()
    shutil.rmtree(out, ignore_errors=True)
    results["search"] = {"rows": len(base), "queries": len(queries), "m": args.m, "ef_construction": args.efc,
                         "pg_build_s": pg_build, "vs_import_build_s": vs_build, "pg_load_s": load_s,
                         "sweep": sweep, "ratio_at_095": ratio, "bq_import_s": bq_build, "bq_sweep": bq_sweep, "two": two, "filtered": filtered}


def generated(n, seed=0, sigma=0.02):
    """n rows: real rows cycled, plus Gaussian noise, renormalised."""
    x16 = np.load(DATA / "vectors.f16.npy", mmap_mode="r")
    real = np.asarray(x16[:100_000], np.float32)
    rng = np.random.default_rng(seed)
    out = np.empty((n, real.shape[1]), np.float32)
    for s in range(0, n, 100_000):
        part = real[: min(100_000, n - s)] + rng.normal(0, sigma, (min(100_000, n - s), real.shape[1])).astype(np.float32)
        out[s:s + len(part)] = part / np.linalg.norm(part, axis=1, keepdims=True)
    return out, real, np.asarray(x16[100_000:100_100], np.float32)


def part_scale(pg, args, results):
    import psycopg

    x, real, q = generated(args.rows)
    sims_real = vecsift.exact_search(real / np.linalg.norm(real, axis=1, keepdims=True), q, K, "ip")[1]
    sims_gen = vecsift.exact_search(x, q, K, "ip")[1]
    log(f"generated {len(x)} rows; real queries' top-10 similarity: real set mean {sims_real.mean():.3f} "
        f"(median top-1 {np.median(sims_real[:, 0]):.3f}), generated set mean {sims_gen.mean():.3f} "
        f"(median top-1 {np.median(sims_gen[:, 0]):.3f})")
    conn = psycopg.connect(pg.dsn, autocommit=True)
    load_s = make_table(conn, "big", x)
    conn.execute("CREATE INDEX ON big (updated)")
    conn.execute("VACUUM ANALYZE big")
    log(f"loaded {len(x)} rows into PostgreSQL in {load_s:.1f} s")
    del x
    # the COPY decode alone
    c2 = source.connect(pg.dsn)
    q_ = source.Query(source.describe(c2, source.Mapping("big", "id", "emb", metadata=["tenant", "bucket"])))
    t0 = time.perf_counter()
    n = 0
    for f in source.stream(c2, q_.sql([], order=True), [], len(q_.columns), 50_000):
        n += len(q_.decode(f, 384, "skip")["ids"])
    decode_s = time.perf_counter() - t0
    c2.close()
    log(f"COPY + decode alone: {n} rows in {decode_s:.1f} s ({decode_s / n * 1e6:.2f} us/row)")
    # for comparison: psycopg's own row iteration (binary COPY rows with pgvector's loader), first 200k rows
    from pgvector.psycopg import register_vector
    c3 = psycopg.connect(pg.dsn)
    register_vector(c3)
    t0 = time.perf_counter()
    m = 0
    with c3.cursor() as cur, cur.copy("COPY (SELECT id::text, emb FROM big ORDER BY id LIMIT 200000) "
                                      "TO STDOUT (FORMAT binary)") as cp:
        cp.set_types(["text", "vector"])
        vecs = [row[1] for row in cp.rows()]
        m = len(vecs)
    rows_s = time.perf_counter() - t0
    c3.close()
    log(f"psycopg row iteration (rows(), pgvector loader): {m} rows in {rows_s:.1f} s ({rows_s / m * 1e6:.2f} us/row)")
    out = Path(tempfile.mkdtemp(prefix="vs-pgbench-", dir=args.tmp))
    rep = import_pg(pg.dsn, "big", id="id", vector="emb", metadata=["tenant", "bucket"], updated="updated",
                    out=out / "bq", index="bq", progress=False)
    log(f"import_pg {rep.rows} rows into a bq collection: {rep.seconds:.1f} s ({rep.rows_per_second:,.0f} rows/s)")
    t0 = time.perf_counter()
    conn.execute("UPDATE big SET emb = emb, bucket = bucket + 100, updated = clock_timestamp() WHERE id % 100 = 42")
    change_s = time.perf_counter() - t0
    conn.execute("DELETE FROM big WHERE id % 1000 = 7")
    s = sync_pg(pg.dsn, out / "bq", progress=False)
    log(f"sync_pg after {args.rows // 100} rows changed and {args.rows // 1000} deleted: {s.seconds:.1f} s "
        f"({s.upserted} upserted, {s.removed_missing} removed); the UPDATE itself took {change_s:.1f} s")
    s2 = sync_pg(pg.dsn, out / "bq", progress=False)
    log(f"sync_pg again with nothing changed: {s2.seconds:.1f} s")
    coll = vecsift.open(out / "bq", readonly=True)
    ok = len(coll) == args.rows - args.rows // 1000  # 0.1% deleted
    coll.close()
    conn.close()
    shutil.rmtree(out, ignore_errors=True)
    results["scale"] = {"rows": args.rows, "pg_load_s": load_s, "decode_s": decode_s,
                        "decode_us_per_row": decode_s / n * 1e6, "psycopg_rows_us_per_row": rows_s / m * 1e6, "import_s": rep.seconds,
                        "import_rows_per_s": rep.rows_per_second, "sync_s": s.seconds, "sync_upserted": s.upserted,
                        "sync_removed": s.removed_missing, "sync_noop_s": s2.seconds, "count_ok": ok,
                        "top10_sim_real": float(sims_real.mean()), "top10_sim_generated": float(sims_gen.mean())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("search", "scale", "both"), default="both")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--search-rows", type=int, default=100_000, help="rows of the real set for the search part")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--efc", type=int, default=64)
    ap.add_argument("--hnsw-codes", default="float32", choices=("float32", "int8"),
                    help="the vecsift hnsw collection's codes (int8: the walk on int8 codes, docs/hnsw.md)")
    ap.add_argument("--ef", type=int, nargs="+", default=[10, 20, 40, 80, 160])
    ap.add_argument("--oversample", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--filter-ef", type=int, nargs="+", default=[40, 320])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--out", default="bench/results/pgvector.json")
    args = ap.parse_args()
    results = {"machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus", "argv": sys.argv[1:],
               "load_before": os.getloadavg(),
               "cpu": vecsift.cpu_features()["best_level"]}
    log(results["machine"], results["cpu"])
    with LocalPostgres({"shared_buffers": "1GB", "max_wal_size": "8GB", "checkpoint_timeout": "30min",
                        "work_mem": "64MB"}) as pg:
        if args.part in ("search", "both"):
            part_search(pg, args, results)
        if args.part in ("scale", "both"):
            part_scale(pg, args, results)
    results["load_after"] = os.getloadavg()
    log(f"load average before {results['load_before']}, after {results['load_after']}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
