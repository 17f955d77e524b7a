"""BM25Index against bm25s and tantivy, and sparse / dense / hybrid quality.

Run (one benchmark at a time on the shared machine):
  flock /work/bench.lock python bench/bench_bm25.py [--reps 5] [--big N] [--json OUT]

1. Quality on the full docstring set (tests/data/docstrings): hit@10, MRR@10,
   nDCG@10 for sparse (BM25Index), dense (vecsift.exact_search cosine over
   the committed MiniLM embeddings) and hybrid (vecsift.rrf, k=60, over the
   top 100 of each). Also the tokeniser with and without identifier parts.
2. Parity: BM25Index scores against bm25s method="lucene" fed the same tokens.
3. Speed on the same corpus and queries, interleaved A, B, C per repetition,
   medians reported: build (tokenise + index, single thread for all three:
   tantivy's writer gets num_threads=1) and single-thread query latency
   (one query per call, k=10, query tokenisation included for vecsift and
   bm25s; tantivy gets its query pre-sanitised, which favours it).
   --big N adds a second corpus of N documents: every docstring paragraph
   found in the standard library and site-packages sources (no embeddings),
   with 1,000 of their first lines as queries.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import statistics
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

import vecsift
from vecsift import BM25Index, exact_search, rrf
from vecsift.eval import hit_at_k, mrr_at_k, ndcg_at_k
from vecsift.text.tokenize import Tokenizer

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "docstrings"


def load_set():
    def jl(name):
        with open(DATA / name, encoding="utf-8") as f:
            return [json.loads(line) for line in f]
    docs = [d["text"] for d in jl("docs.jsonl")]
    queries = [q["text"] for q in jl("queries.jsonl")]
    rel = [dict() for _ in queries]
    for r in jl("qrels.jsonl"):
        rel[r["qid"]][r["row"]] = r["grade"]
    with np.load(DATA / "embeddings.npz") as z:
        dv = z["docs"].astype(np.float32)
        qv = z["queries"].astype(np.float32)
    return docs, queries, rel, dv, qv


def ranked(idx, queries, k):
    return idx.search_batch(queries, k=k)[0]


def quality(docs, queries, rel, dv, qv, cand=100):
    out = {}
    idx = BM25Index()
    idx.add(docs)
    sparse = ranked(idx, queries, cand)
    dense = exact_search(dv, qv, k=cand, metric="cosine")[0]
    hybrid = np.full((len(queries), 10), -1, np.int64)
    for i in range(len(queries)):
        ids, _ = rrf([sparse[i], dense[i]], k=60, top_n=10)
        hybrid[i, : ids.size] = ids
    for name, found in [("sparse", sparse), ("dense", dense), ("hybrid", hybrid)]:
        out[name] = {"hit@10": hit_at_k(found, rel, 10), "mrr@10": mrr_at_k(found, rel, 10),
                     "ndcg@10": ndcg_at_k(found, rel, 10)}
    for parts in (True, False):
        b = BM25Index(tokenizer=Tokenizer(parts=parts))
        b.add(docs)
        f = ranked(b, queries, 10)
        out[f"sparse parts={parts}"] = {"hit@10": hit_at_k(f, rel, 10), "mrr@10": mrr_at_k(f, rel, 10),
                                        "ndcg@10": ndcg_at_k(f, rel, 10)}
    return out


def parity(docs, queries):
    import bm25s
    idx = BM25Index()
    idx.add(docs)
    tok = idx.tokenizer
    ref = bm25s.BM25(method="lucene", idf_method="lucene", k1=1.2, b=0.75)
    ref.index([tok(d) for d in docs], show_progress=False)
    worst, n = 0.0, 0
    for q in queries:
        rows, scores = idx.search(q, k=100)
        if rows.size == 0:
            continue
        full = ref.get_scores(tok(q))
        top = np.sort(full[full > 0])[::-1][: rows.size]
        np.testing.assert_allclose(scores, top, rtol=1e-5)
        worst = max(worst, float(np.max(np.abs(full[rows] - scores) / np.abs(full[rows]))))
        n += 1
    return {"queries": n, "max_rel_diff": worst}


# ---- the three engines -------------------------------------------------
_SAN = re.compile(r"[^\w\s]+")


class Vecsift:
    name = "vecsift"

    def build(self, docs):
        self.idx = BM25Index()
        self.idx.add(docs)

    def query(self, q):
        return self.idx.search(q, k=10)


class Bm25s:
    name = "bm25s"

    def build(self, docs):
        import bm25s
        self.bm25s = bm25s
        self.r = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
        self.r.index(bm25s.tokenize(docs, stopwords=None, show_progress=False), show_progress=False)

    def query(self, q):
        t = self.bm25s.tokenize([q], stopwords=None, show_progress=False, return_ids=False)
        return self.r.retrieve(t, k=10, n_threads=1, show_progress=False)


class Tantivy:
    name = "tantivy"

    def build(self, docs):
        import tantivy
        sb = tantivy.SchemaBuilder()
        sb.add_integer_field("row", stored=True)
        sb.add_text_field("body", stored=False)
        self.index = tantivy.Index(sb.build())
        w = self.index.writer(heap_size=200_000_000, num_threads=1)
        for i, d in enumerate(docs):
            w.add_document(tantivy.Document(row=i, body=d))
        w.commit()
        w.wait_merging_threads()
        self.index.reload()
        self.searcher = self.index.searcher()

    def prepare(self, queries):
        return [_SAN.sub(" ", q).strip() or "emptyquery" for q in queries]

    def query(self, q):
        return self.searcher.search(self.index.parse_query(q, ["body"]), 10)


def speed(docs, queries, reps):
    engines = [Vecsift(), Bm25s(), Tantivy()]
    prepared = {e.name: (e.prepare(queries) if hasattr(e, "prepare") else queries) for e in engines}
    for e in engines:  # warm-up: JIT compile, imports, caches
        e.build(docs[: min(len(docs), 500)])
        for q in prepared[e.name][:20]:
            e.query(q)
    build = {e.name: [] for e in engines}
    lat = {e.name: [] for e in engines}
    for _ in range(reps):
        for e in engines:
            t0 = time.perf_counter()
            e.build(docs)
            build[e.name].append(time.perf_counter() - t0)
        for e in engines:
            qs = prepared[e.name]
            for q in qs[:20]:
                e.query(q)
            t0 = time.perf_counter()
            for q in qs:
                e.query(q)
            lat[e.name].append((time.perf_counter() - t0) / len(qs))
    med = {n: {"build_s": statistics.median(build[n]), "query_us": statistics.median(lat[n]) * 1e6,
               "build_runs": build[n], "query_runs_us": [x * 1e6 for x in lat[n]]} for n in build}
    v = med["vecsift"]
    for n in ("bm25s", "tantivy"):
        v[f"build_ratio_vs_{n}"] = v["build_s"] / med[n]["build_s"]
        v[f"query_ratio_vs_{n}"] = v["query_us"] / med[n]["query_us"]
    return med


def big_corpus(n, seed=0):
    """Docstring paragraphs of stdlib + site-packages .py files (read with ast)."""
    roots = [Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])]
    roots += [Path(p) for p in sys.path if p.endswith("site-packages")]
    seen, docs, firsts = set(), [], []
    for root in dict.fromkeys(roots):
        for path in sorted(root.rglob("*.py")):
            try:
                tree = ast.parse(path.read_bytes())
            except Exception:
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
                    d = ast.get_docstring(node)
                    if d and len(d.split()) >= 8 and d not in seen:
                        seen.add(d)
                        docs.append(d)
                        firsts.append(d.splitlines()[0])
            if len(docs) >= n:
                break
        if len(docs) >= n:
            break
    docs = docs[:n]
    rng = np.random.default_rng(seed)
    qi = rng.choice(len(docs), size=min(1000, len(docs)), replace=False)
    return docs, [firsts[i] for i in qi]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--big", type=int, default=0, help="also time a corpus of this many docstrings")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    docs, queries, rel, dv, qv = load_set()
    res = {"machine": f"{platform.machine()} {os.cpu_count()} cores, python {platform.python_version()}, "
                      f"{vecsift.cpu_features()}",
           "docs": len(docs), "queries": len(queries)}
    res["quality"] = quality(docs, queries, rel, dv, qv)
    res["parity_vs_bm25s"] = parity(docs, queries)
    res["speed_docstrings"] = speed(docs, queries, args.reps)
    if args.big:
        bd, bq = big_corpus(args.big)
        res["big"] = {"docs": len(bd), "queries": len(bq)}
        res["speed_big"] = speed(bd, bq, args.reps)
    print(f"machine: {res['machine']}")
    print(f"docstring set: {len(docs)} docs, {len(queries)} queries")
    print(f"{'retriever':<22}{'hit@10':>8}{'MRR@10':>8}{'nDCG@10':>9}")
    for name, m in res["quality"].items():
        print(f"{name:<22}{m['hit@10']:>8.4f}{m['mrr@10']:>8.4f}{m['ndcg@10']:>9.4f}")
    p = res["parity_vs_bm25s"]
    print(f"parity vs bm25s lucene: {p['queries']} queries, max relative diff {p['max_rel_diff']:.2e}")
    for key in ("speed_docstrings", "speed_big"):
        if key not in res:
            continue
        label = key if key == "speed_docstrings" else f"speed_big ({res['big']['docs']} docs, {res['big']['queries']} queries)"
        print(f"{label}: median of {args.reps}")
        for n, m in res[key].items():
            print(f"  {n:<8} build {m['build_s']:8.3f} s   query {m['query_us']:9.1f} us")
        v = res[key]["vecsift"]
        print(f"  vecsift/bm25s build {v['build_ratio_vs_bm25s']:.2f}x, query {v['query_ratio_vs_bm25s']:.2f}x; "
              f"vecsift/tantivy build {v['build_ratio_vs_tantivy']:.2f}x, query {v['query_ratio_vs_tantivy']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
