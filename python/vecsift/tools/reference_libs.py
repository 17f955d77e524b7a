"""Adapters for the libraries `vecsift bench --compare` measures against.

Each adapter builds an HNSW index with the same m / ef_construction and
answers `search(queries, k, ef, threads)` with row ids, so the benchmark runs
one sweep loop for everyone. The libraries are benchmark extras
(`pip install "vecsift[bench]"`), imported only when asked for.
"""
from __future__ import annotations

import numpy as np

LIBRARIES = ("hnswlib", "faiss", "usearch")


class HnswlibAdapter:
    name = "hnswlib"

    def __init__(self, dim, metric, m, ef_construction):
        import hnswlib
        space = {"ip": "ip", "cosine": "cosine", "l2": "l2"}[metric]
        self.index = hnswlib.Index(space=space, dim=dim)
        self.m, self.efc = m, ef_construction

    def build(self, base, threads, progress=None):
        self.index.init_index(max_elements=len(base), M=self.m, ef_construction=self.efc, random_seed=0)
        for start, stop in _batches(len(base)):
            self.index.add_items(base[start:stop], np.arange(start, stop), num_threads=threads)
            if progress:
                progress(stop - start)

    def search(self, queries, k, ef, threads):
        self.index.set_ef(max(ef, k))
        labels, _ = self.index.knn_query(queries, k=k, num_threads=threads)
        return labels.astype(np.int64)

    def nbytes(self):
        return self.index.index_file_size()


class FaissAdapter:
    name = "faiss"

    def __init__(self, dim, metric, m, ef_construction):
        import faiss
        self.faiss = faiss
        self.metric = metric
        faiss_metric = faiss.METRIC_L2 if metric == "l2" else faiss.METRIC_INNER_PRODUCT
        self.index = faiss.IndexHNSWFlat(dim, m, faiss_metric)
        self.index.hnsw.efConstruction = ef_construction

    def _prep(self, x):
        if self.metric == "cosine":
            x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)
        return np.ascontiguousarray(x, dtype=np.float32)

    def build(self, base, threads, progress=None):
        self.faiss.omp_set_num_threads(threads)
        for start, stop in _batches(len(base)):
            self.index.add(self._prep(base[start:stop]))
            if progress:
                progress(stop - start)

    def search(self, queries, k, ef, threads):
        self.faiss.omp_set_num_threads(threads)
        self.index.hnsw.efSearch = max(ef, k)
        _, labels = self.index.search(self._prep(queries), k)
        return labels.astype(np.int64)

    def nbytes(self):
        hnsw = self.index.hnsw
        return (int(self.index.ntotal) * self.index.d * 4 + hnsw.neighbors.size() * 4
                + hnsw.offsets.size() * 8 + hnsw.levels.size() * 4)


class UsearchAdapter:
    name = "usearch"

    def __init__(self, dim, metric, m, ef_construction):
        from usearch.index import Index
        self.index = Index(ndim=dim, metric={"ip": "ip", "cosine": "cos", "l2": "l2sq"}[metric], dtype="f32",
                           connectivity=m, expansion_add=ef_construction)

    def build(self, base, threads, progress=None):
        for start, stop in _batches(len(base)):
            self.index.add(np.arange(start, stop), base[start:stop], threads=threads)
            if progress:
                progress(stop - start)

    def search(self, queries, k, ef, threads):
        self.index.expansion_search = max(ef, k)
        res = self.index.search(queries, k, threads=threads)
        keys = np.full((len(queries), k), -1, np.int64)
        if len(queries) == 1:  # usearch returns single Matches for one query
            found = np.asarray(res.keys, np.int64)[:k]
            keys[0, : len(found)] = found
            return keys
        counts = np.asarray(res.counts).reshape(-1)
        raw = np.asarray(res.keys, np.int64).reshape(len(queries), k)
        valid = np.arange(k)[None, :] < counts[:, None]
        keys[valid] = raw[valid]
        return keys

    def nbytes(self):
        return int(self.index.memory_usage)


def _batches(n, size=20_000):
    for start in range(0, n, size):
        yield start, min(n, start + size)


def make_adapter(name, dim, metric, m, ef_construction):
    cls = {"hnswlib": HnswlibAdapter, "faiss": FaissAdapter, "usearch": UsearchAdapter}.get(name)
    if cls is None:
        raise ValueError(f"unknown library {name!r}; choose from {', '.join(LIBRARIES)}")
    try:
        return cls(dim, metric, m, ef_construction)
    except ImportError:
        raise ImportError(f'{name} is not installed: pip install "vecsift[bench]"') from None
