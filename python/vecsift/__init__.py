"""vecsift: embeddable vector search with a native SIMD core."""
from ._core import cpu_features
from . import eval
from .binary import BinaryIndex, binary_quantize
from .bm25 import BM25Index
from .collection import Collection, open
from .hits import Hit
from .errors import CorruptIndexError, VecsiftError
from .flat import exact_search
from .fusion import rrf
from .hnsw import HNSWIndex

__version__ = "0.1.0"

__all__ = [
    "BM25Index",
    "BinaryIndex",
    "Collection",
    "Hit",
    "open",
    "CorruptIndexError",
    "HNSWIndex",
    "VecsiftError",
    "binary_quantize",
    "cpu_features",
    "eval",
    "exact_search",
    "rrf",
]
