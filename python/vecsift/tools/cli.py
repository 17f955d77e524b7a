"""The `vecsift` command: bench, tune, build, search, info, verify, audit.

User mistakes (bad path, wrong dimension, bad option) print one line on
stderr and exit with status 2; a traceback means a bug in vecsift.
"""
from __future__ import annotations

import argparse
import sys

from vecsift.errors import VecsiftError

USER_ERRORS = (ValueError, TypeError, FileNotFoundError, IsADirectoryError, NotADirectoryError,
               PermissionError, ImportError, VecsiftError, KeyError)


def _csv(text: str):
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _ints(text: str):
    return tuple(int(v) for v in _csv(text))


def cmd_bench(args) -> int:
    from vecsift.tools.bench import format_table, run_bench
    result = run_bench(dataset=args.dataset, n_queries=args.queries, k=args.k, indexes=args.index,
                       compare=args.compare, out=args.out, metric=args.metric, m=args.m,
                       ef_construction=args.ef_construction, ef_values=args.ef, oversample_values=args.oversample,
                       threads=args.threads, quiet=args.quiet, max_rows=args.max_rows)
    print(f"{result['dataset']}: {result['rows']} rows x {result['dim']} dims, {result['queries']} queries, "
          f"metric {result['metric']}, {result['threads']} threads, kernels {result['cpu']['level']}")
    print(format_table(result))
    print(f"wrote {args.out}/results.json and {args.out}/recall_qps.png")
    return 0


def _read_source(src: str, batch_rows: int):
    """Yields (pyarrow Table with id + vector columns, rows) batches from .npy, .parquet or .arrow."""
    import numpy as np
    import pyarrow as pa
    from pathlib import Path
    path = Path(src)
    if not path.exists():
        raise FileNotFoundError(f"{src}: no such file")
    if path.suffix == ".npy":
        x = np.load(path, mmap_mode="r")
        if x.ndim != 2:
            raise ValueError(f"{src}: expected a 2-d matrix of vectors, got shape {x.shape}")
        total = len(x)
        def batches():
            for s in range(0, total, batch_rows):
                part = np.ascontiguousarray(x[s:s + batch_rows], dtype=np.float32)
                vec = pa.FixedSizeListArray.from_arrays(pa.array(part.ravel()), part.shape[1])
                ids = pa.array(np.arange(s, s + len(part)).astype(str))
                yield pa.table({"id": ids, "vector": vec})
        return batches(), total, x.shape[1]
    if path.suffix in (".parquet", ".pq"):
        import pyarrow.parquet as pq
        f = pq.ParquetFile(path)
        schema = f.schema_arrow
        batches = (pa.Table.from_batches([b]) for b in f.iter_batches(batch_size=batch_rows))
        total = f.metadata.num_rows
    elif path.suffix in (".arrow", ".feather", ".ipc"):
        reader = pa.ipc.open_file(pa.memory_map(str(path)))
        schema = reader.schema
        batches = (pa.Table.from_batches([reader.get_batch(i)]) for i in range(reader.num_record_batches))
        total = sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
    else:
        raise ValueError(f"{src}: expected a .npy, .parquet or .arrow file")
    for need in ("id", "vector"):
        if need not in schema.names:
            raise ValueError(f"{src}: missing column {need!r} (columns: {', '.join(schema.names)})")
    vtype = schema.field("vector").type
    if not pa.types.is_fixed_size_list(vtype):
        raise ValueError(f"{src}: column 'vector' must be fixed_size_list<float32>, got {vtype}")
    return batches, total, vtype.list_size


def cmd_build(args) -> int:
    from pathlib import Path
    from vecsift.collection.collection import Collection
    from vecsift.tools.progress import progress_bar
    batches, total, dim = _read_source(args.src, args.batch_rows)
    out = Path(args.out)
    if (out / "MANIFEST").exists():
        raise ValueError(f"{out} already holds a collection")
    params = {}
    if args.oversample:
        params["oversample"] = args.oversample
    if args.index == "hnsw":
        params.update(m=args.m, ef_construction=args.ef_construction)
    coll = Collection.create(out, dim, metric=args.metric, index=args.index, model=args.model,
                             filter_fields=args.filter_fields, **params)
    with coll, progress_bar(total=total, desc="build", unit="rows", disable=args.quiet) as bar:
        for table in batches:
            coll.add_table(table)
            bar.update(table.num_rows)
        coll.commit()
        print(f"built {out}: {len(coll)} rows, dim {dim}, metric {coll.metric}, index {coll.index}")
    return 0


def cmd_search(args) -> int:
    import json
    import numpy as np
    from vecsift.collection.collection import open as open_collection
    if args.vector_file is None and args.text is None:
        raise ValueError("give --vector-file and/or --text")
    coll = open_collection(args.dir, readonly=True)
    try:
        vectors = None
        if args.vector_file:
            vectors = np.load(args.vector_file)
            vectors = vectors.reshape(1, -1) if vectors.ndim == 1 else vectors
        groups = list(_csv(args.groups)) if args.groups is not None else None
        kw = dict(k=args.k, tenant=args.tenant, groups=groups)
        if args.ef:
            kw["ef"] = args.ef
        if args.oversample:
            kw["oversample"] = args.oversample
        n = 1 if vectors is None else len(vectors)
        results = [coll.search(vector=None if vectors is None else vectors[i], text=args.text, **kw)
                   for i in range(n)]
    finally:
        coll.close()
    if args.json:
        print(json.dumps([[h.to_dict() for h in hits] for hits in results], indent=2))
        return 0
    for qi, hits in enumerate(results):
        if n > 1:
            print(f"query {qi}:")
        if not hits:
            print("  (no results)")
        for rank, h in enumerate(hits, 1):
            text = (h.text or "").replace("\n", " ")
            print(f"{rank:>3}  {h.score:9.4f}  {h.id}  {text[:80]}")
    return 0


def cmd_info(args) -> int:
    import json
    import os
    if os.path.isfile(args.dir):  # a saved IVFIndex file: parameters and partition balance
        from vecsift.index.partitioned import describe
        info = describe(args.dir)
    else:
        from vecsift.collection.collection import open as open_collection
        coll = open_collection(args.dir, readonly=True)
        try:
            info = coll.info()
        finally:
            coll.close()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for key, value in info.items():
        print(f"{key:<18} {value}")
    return 0


def _since(text: str) -> float:
    """--since: unix seconds, an ISO date / datetime (UTC unless it says), or an age: 30s, 15m, 2h, 7d."""
    import datetime as dt
    import re
    import time
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if m:
        return time.time() - float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--since {text!r}: expected unix seconds, an ISO date or time, or an age like 2h") from None
    return (when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)).timestamp()


def _audit_line(r: dict) -> str:
    import datetime as dt
    when = dt.datetime.fromtimestamp(r.get("t", 0), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if "event" in r:
        return f"{when} #{r['seq']} event {r['event']} {r.get('file', '')}"
    groups = ",".join(map(str, r.get("groups") or [])) or "-"
    ids = r.get("ids") or []
    if r.get("op") == "get":
        ids = [ids]
    shown = " | ".join(",".join(map(str, q)) for q in ids) if isinstance(ids, list) else str(ids)
    k = "" if r.get("k") is None else f" k={r['k']}"
    line = (f"{when} #{r['seq']} {r.get('op')} {r.get('mode')}{k} tenant={r.get('tenant') or '-'} "
            f"groups={groups} ms={r.get('ms')} ids={shown or '-'}")
    if r.get("where") is not None:
        line += f" where={r['where']}"
    if r.get("error"):
        line += f" error={r['error']!r}"
    return line


def cmd_audit(args) -> int:
    import json
    import os
    from vecsift.collection.audit import read_log
    if not os.path.isdir(args.dir):
        raise FileNotFoundError(f"{args.dir}: no such directory")
    rep = read_log(args.dir)
    if not rep.files:
        raise ValueError(f"{args.dir}: no audit log (enable it with Collection.set_audit)")
    since = _since(args.since) if args.since is not None else None
    shown = 0
    if not args.verify:
        for r in rep.records:
            if since is not None and r.get("t", 0) < since:
                continue
            if args.tenant is not None and r.get("tenant") != args.tenant:
                continue
            print(json.dumps(r, separators=(",", ":")) if args.json else _audit_line(r))
            shown += 1
    for w in rep.warnings:
        print(f"vecsift audit: warning: {w}", file=sys.stderr)
    for e in rep.errors:
        print(f"vecsift audit: CORRUPT: {e}", file=sys.stderr)
    state = "chain and checksums verified" if rep.ok else f"{len(rep.errors)} problem(s): the log is corrupt"
    print(f"vecsift audit: {len(rep.records)} records in {len(rep.files)} files ({rep.files[0]} .. "
          f"{rep.files[-1]}), {shown} shown; {state}", file=sys.stderr)
    return 0 if rep.ok else 1


def cmd_verify(args) -> int:
    """Opens the collection read-only and reads every file of its last commit against the manifest.
    Exit 0: everything checked matched (notes say what could not be checked); 1: a file is corrupt."""
    from vecsift.collection.collection import open as open_collection
    from vecsift.errors import CorruptIndexError
    try:
        coll = open_collection(args.dir, readonly=True)
        try:
            notes = coll.verify()
        finally:
            coll.close()
    except CorruptIndexError as exc:
        print(f"{args.dir}: CORRUPT: {exc}")
        return 1
    for note in notes:
        print(f"{args.dir}: not checked: {note}")
    print(f"{args.dir}: ok (generation {coll.manifest.generation}, {len(notes)} note(s))")
    return 0


def _tune_ivf(args) -> int:
    import numpy as np
    from vecsift.index.partitioned import IVFIndex, tuning_queries
    from vecsift.tools.tune_ivf import OVERSAMPLES, tune_ivf
    rows = np.load(args.vectors, mmap_mode="r") if args.vectors else None
    index = IVFIndex.open(args.dir, vectors=rows)
    ladder = OVERSAMPLES if args.oversamples is None else _int_list(args.oversamples, "--oversamples")
    q, truth = tuning_queries(index, k=args.k, sample=args.sample, seed=args.seed,
                              queries=np.load(args.queries) if args.queries else None)
    result = tune_ivf(index, q, truth, args.k, args.target_recall, oversamples=ladder)
    print(f"{'oversample':>10} {'nprobe':>8} {'recall@' + str(args.k):>10} {'lower 95%':>10} {'us/query':>10}")
    for r in result.rows:
        if r["nprobe"] is None:
            print(f"{r['oversample']:>10} {'-':>8} {'not reached up to nprobe ' + str(index.nlist):>32}")
        else:
            print(f"{r['oversample']:>10} {r['nprobe']:>8} {r['recall']:>10.4f} {r['lower']:>10.4f} {r['us']:>10.0f}")
    if result.nprobe is None:
        raise ValueError(f"no nprobe up to {index.nlist} reaches recall {args.target_recall} "
                         f"at oversample {max(r['oversample'] for r in result.rows)}")
    index.nprobe, index.oversample = result.nprobe, result.oversample
    index.save(args.dir, include_vectors=rows is None)  # new file, renamed over the old one
    print(f"chosen nprobe={result.nprobe} oversample={result.oversample} (the fastest one-query time; "
          f"stored as the index's defaults)")
    return 0


def _int_list(text, name):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{name} takes whole numbers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{name} takes positive whole numbers, got {text!r}")
    return values


def cmd_tune(args) -> int:
    import os
    if os.path.isfile(args.dir):
        return _tune_ivf(args)
    from vecsift.collection.collection import open as open_collection
    from vecsift.tools.tune_collection import tune_collection
    coll = open_collection(args.dir)
    try:
        result = tune_collection(coll, target=args.target_recall, k=args.k, n_queries=args.sample,
                                 queries_file=args.queries, seed=args.seed, quiet=args.quiet)
        print(f"{'param':>10} {'recall@' + str(args.k):>10} {'lower 95%':>10}")
        for param, mean, low in sorted(result.curve):
            print(f"{param:>10} {mean:>10.4f} {low:>10.4f}")
        if result.param is None:
            raise ValueError(f"no {result.name} up to {result.limit} reaches recall {args.target_recall}")
        coll.set_search_defaults(**{result.name: result.param})
        coll.commit()
        print(f"chosen {result.name}={result.param} (stored as the collection's default)")
    finally:
        coll.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    from vecsift.tools.bench import EF_VALUES, OVERSAMPLE_VALUES
    p = argparse.ArgumentParser(prog="vecsift", description="vecsift: embeddable vector search")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("bench", help="recall vs exact search and QPS, against reference libraries")
    b.add_argument("--dataset", default="glove-50", help="glove-50 (default), PATH.npy or PATH.parquet")
    b.add_argument("--queries", type=int, default=1000, help="rows drawn (seed 0) as queries and removed from base")
    b.add_argument("--k", type=int, default=10)
    b.add_argument("--index", type=_csv, default=("hnsw", "bq", "quant"),
                   help="comma list of hnsw, bq, quant (quant also runs faiss IndexRaBitQ when installed)")
    b.add_argument("--compare", type=_csv, default=(), help="comma list of hnswlib, faiss, usearch")
    b.add_argument("--out", default="bench-out", help="directory for results.json, the PNG and cached ground truth")
    b.add_argument("--metric", default="cosine", choices=("cosine", "ip", "l2"))
    b.add_argument("--m", type=int, default=16)
    b.add_argument("--ef-construction", type=int, default=200)
    b.add_argument("--ef", type=_ints, default=EF_VALUES, help="ef_search values to sweep")
    b.add_argument("--oversample", type=_ints, default=OVERSAMPLE_VALUES, help="oversample values to sweep (bq)")
    b.add_argument("--threads", type=int, default=0, help="threads for build and batch search (0: all cores)")
    b.add_argument("--max-rows", type=int, default=None, help="use only the first N base rows")
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    b.set_defaults(func=cmd_bench)

    t = sub.add_parser("tune", help="find the smallest ef / oversample (IVF file: nprobe) reaching a recall target")
    t.add_argument("dir", help="collection directory, or a saved IVFIndex file (tunes nprobe and oversample)")
    t.add_argument("--vectors", default=None, help="IVF file saved without rows: the float32 rows (.npy)")
    t.add_argument("--target-recall", type=float, default=0.95)
    t.add_argument("--k", type=int, default=10)
    t.add_argument("--sample", type=int, default=500, help="collection rows used as queries")
    t.add_argument("--queries", default=None, help="a .npy file of queries instead of sampled rows")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--oversamples", default=None,
                   help="IVF file only: oversample values to try, e.g. 4,16,64 (default 4,8,16,32,64,128 and "
                        "the index's own); the fastest pair reaching the target is kept")
    t.add_argument("--quiet", action="store_true")
    t.set_defaults(func=cmd_tune)

    bd = sub.add_parser("build", help="build a collection from .npy, .parquet or .arrow")
    bd.add_argument("src")
    bd.add_argument("--out", required=True, help="collection directory to create")
    bd.add_argument("--metric", default="cosine", choices=("cosine", "ip", "l2"))
    bd.add_argument("--index", default="bq", choices=("bq", "hnsw"))
    bd.add_argument("--model", default=None, help="embedding model name to record")
    bd.add_argument("--filter-fields", type=_csv, default=(), help="comma list of metadata fields to filter on")
    bd.add_argument("--oversample", type=int, default=None)
    bd.add_argument("--m", type=int, default=16)
    bd.add_argument("--ef-construction", type=int, default=200)
    bd.add_argument("--batch-rows", type=int, default=50_000)
    bd.add_argument("--quiet", action="store_true")
    bd.set_defaults(func=cmd_build)

    s = sub.add_parser("search", help="search a collection")
    s.add_argument("dir")
    s.add_argument("--vector-file", default=None, help=".npy with one query vector or a matrix of them")
    s.add_argument("--text", default=None, help="query text (sparse, or hybrid with --vector-file)")
    s.add_argument("--tenant", default=None)
    s.add_argument("--groups", default=None, help="comma list of the asker's ACL groups")
    s.add_argument("--k", type=int, default=10)
    s.add_argument("--ef", type=int, default=None)
    s.add_argument("--oversample", type=int, default=None)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_search)

    i = sub.add_parser("info", help="print a collection's manifest summary (IVF file: lists and balance)")
    i.add_argument("dir", help="collection directory, or a saved IVFIndex file")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=cmd_info)

    a = sub.add_parser("audit", help="print and verify a collection's audit log (exit 1 if it is corrupt)")
    a.add_argument("dir", help="collection directory")
    a.add_argument("--since", default=None, help="records from: unix seconds, ISO date/time (UTC), or an age (2h, 7d)")
    a.add_argument("--tenant", default=None, help="only this tenant's searches")
    a.add_argument("--json", action="store_true", help="one JSON object a line")
    a.add_argument("--verify", action="store_true", help="verify only, print no records")
    a.set_defaults(func=cmd_audit)

    v = sub.add_parser("verify", help="read every file of a collection and check it against the manifest")
    v.add_argument("dir")
    v.set_defaults(func=cmd_verify)

    from vecsift.tools.cli_pg import add_pg_commands  # import-pg, sync-pg
    add_pg_commands(sub)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except USER_ERRORS as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"vecsift: error: {msg}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `vecsift search ... | head`
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("vecsift: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
