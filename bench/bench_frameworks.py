"""What the LangChain and LlamaIndex stores add to a query, against Collection.search itself.

    flock /tmp/vecsift-bench.lock python bench/bench_frameworks.py [--n 20000] [--reps 7]

Real 384-d MiniLM rows and their texts (shared/data/pypi-minilm: PyPI package
summaries), an hnsw collection with one filter field. The same 50 query
vectors (and texts, for hybrid) per path, one query per call, k=10; the paths
interleaved per repetition (bench/timing.py), medians. The stores are given the
query vector (LangChain similarity_search_with_score_by_vector; LlamaIndex
VectorStoreQuery.query_embedding), so no embedding is timed: the difference is
the stores' own work (filter translation, JSON metadata decoded into Documents /
nodes). Hybrid through LangChain embeds the query text, so it uses a table of
the precomputed query vectors as its Embeddings.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

import vecsift

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import interleaved  # noqa: E402

DATA = "/work/shared/data/pypi-minilm"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--data", default=DATA)
    args = ap.parse_args()

    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters, VectorStoreQuery

    from vecsift.integrations import langchain as lc
    from vecsift.integrations import llamaindex as li

    data = Path(args.data)
    vecs = np.load(data / "vectors.f16.npy", mmap_mode="r")
    with open(data / "texts.jsonl") as f:
        lines = f.readlines()
    n, nq = args.n, 50
    texts = [json.loads(lines[i])["summary"] for i in range(n)]
    base = np.asarray(vecs[:n], dtype=np.float32)
    qtexts = [json.loads(lines[100_000 + i])["summary"] for i in range(nq)]
    qv = np.asarray(vecs[100_000:100_000 + nq], dtype=np.float32)
    meta = [{"bucket": f"b{i % 4}", "package": json.loads(lines[i])["package"]} for i in range(n)]

    class Table(Embeddings):
        def __init__(self):
            self.t = dict(zip(texts + qtexts, np.concatenate([base, qv]).tolist()))

        def embed_documents(self, ts):
            return [self.t[t] for t in ts]

        def embed_query(self, t):
            return self.t[t]

    tmp = tempfile.mkdtemp()
    docs = [Document(id=str(i), page_content=texts[i], metadata=meta[i]) for i in range(n)]
    lstore = lc.VecsiftVectorStore.from_documents(docs, Table(), path=f"{tmp}/lc", index="hnsw",
                                                  filter_fields=["bucket"])
    nodes = [TextNode(id_=str(i), text=texts[i], metadata=meta[i], embedding=base[i].tolist()) for i in range(n)]
    listore = li.VecsiftVectorStore(path=f"{tmp}/li", index="hnsw", filter_fields=["bucket"])
    listore.add(nodes)
    coll = lstore.collection
    lf = MetadataFilters(filters=[MetadataFilter(key="bucket", value="b1")])

    def run(fn):
        return lambda: [fn(i) for i in range(nq)]

    cases = {
        "dense": {
            "Collection.search": run(lambda i: coll.search(vector=qv[i], k=10, mode="dense")),
            "LangChain store": run(lambda i: lstore.similarity_search_with_score_by_vector(qv[i], k=10)),
            "LlamaIndex store": run(lambda i: listore.query(VectorStoreQuery(query_embedding=qv[i].tolist(),
                                                                             similarity_top_k=10))),
        },
        "dense, filter 25%": {
            "Collection.search": run(lambda i: coll.search(vector=qv[i], k=10, mode="dense",
                                                           where={"bucket": "b1"})),
            "LangChain store": run(lambda i: lstore.similarity_search_with_score_by_vector(
                qv[i], k=10, filter={"bucket": "b1"})),
            "LlamaIndex store": run(lambda i: listore.query(VectorStoreQuery(
                query_embedding=qv[i].tolist(), similarity_top_k=10, filters=lf))),
        },
        "hybrid": {
            "Collection.search": run(lambda i: coll.search(vector=qv[i], text=qtexts[i], k=10, mode="hybrid")),
            "LangChain store": run(lambda i: lstore.similarity_search_with_score(qtexts[i], k=10, mode="hybrid")),
            "LlamaIndex store": run(lambda i: listore.query(VectorStoreQuery(
                query_embedding=qv[i].tolist(), query_str=qtexts[i], similarity_top_k=10, mode="hybrid"))),
        },
    }
    print(f"{n} rows, 384-d MiniLM, hnsw, k=10, {nq} queries per repetition, {args.reps} repetitions (medians)")
    for name, fns in cases.items():
        t = interleaved(fns, args.reps)
        ref = t["Collection.search"]
        row = ", ".join(f"{k} {1e3 * v / nq:.3f} ms ({v / ref:.2f}x)" for k, v in t.items())
        print(f"{name:18s} {row}")
    lstore.close()
    listore.close()


if __name__ == "__main__":
    main()
