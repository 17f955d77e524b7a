"""The `vecsift` command: bench, tune, build, search, info.

User mistakes (bad path, wrong dimension, bad option) print one line on
stderr and exit with status 2; a traceback means a bug in vecsift.
"""
from __future__ import annotations

import argparse
import sys

from .errors import VecsiftError

USER_ERRORS = (ValueError, TypeError, FileNotFoundError, IsADirectoryError, NotADirectoryError,
               PermissionError, ImportError, VecsiftError, KeyError)


def _csv(text: str):
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _ints(text: str):
    return tuple(int(v) for v in _csv(text))


def cmd_bench(args) -> int:
    from .benchmark import format_table, run_bench
    result = run_bench(dataset=args.dataset, n_queries=args.queries, k=args.k, indexes=args.index,
                       compare=args.compare, out=args.out, metric=args.metric, m=args.m,
                       ef_construction=args.ef_construction, ef_values=args.ef, oversample_values=args.oversample,
                       threads=args.threads, quiet=args.quiet, max_rows=args.max_rows)
    print(f"{result['dataset']}: {result['rows']} rows x {result['dim']} dims, {result['queries']} queries, "
          f"metric {result['metric']}, {result['threads']} threads, kernels {result['cpu']['level']}")
    print(format_table(result))
    print(f"wrote {args.out}/results.json and {args.out}/recall_qps.png")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .benchmark import EF_VALUES, OVERSAMPLE_VALUES
    p = argparse.ArgumentParser(prog="vecsift", description="vecsift: embeddable vector search")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("bench", help="recall vs exact search and QPS, against reference libraries")
    b.add_argument("--dataset", default="glove-50", help="glove-50 (default), PATH.npy or PATH.parquet")
    b.add_argument("--queries", type=int, default=1000, help="rows drawn (seed 0) as queries and removed from base")
    b.add_argument("--k", type=int, default=10)
    b.add_argument("--index", type=_csv, default=("hnsw", "bq"), help="comma list of hnsw, bq")
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
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except USER_ERRORS as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"vecsift: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vecsift: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
