"""Text retrieval: the tokeniser, BM25Index (numba kernels, persistence) and reciprocal rank fusion.

Nothing here imports vecsift.collection.
"""
from vecsift.text.bm25 import BM25Index
from vecsift.text.fusion import rrf
from vecsift.text.tokenize import Tokenizer

__all__ = ["BM25Index", "Tokenizer", "rrf"]
