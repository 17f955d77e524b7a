"""Standalone indexes users call directly: exact (flat) search, the sign-bit BinaryIndex, the HNSW graph,
the partitioned IVFIndex.

Nothing here imports vecsift.collection: a collection wraps these, never the reverse.
"""
from vecsift.index.binary import BinaryIndex, binary_quantize
from vecsift.index.flat import exact_search
from vecsift.index.hnsw import HNSWIndex
from vecsift.index.partitioned import IVFIndex
from vecsift.index.quantised import QuantizedIndex

__all__ = ["BinaryIndex", "HNSWIndex", "IVFIndex", "QuantizedIndex", "binary_quantize", "exact_search"]
