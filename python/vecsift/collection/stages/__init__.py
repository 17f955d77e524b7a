"""Collection stages: the dense stage (binary codes + rescoring, or HNSW) and the sparse stage (BM25)."""
