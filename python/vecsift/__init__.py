"""vecsift: embeddable vector search with a native SIMD core."""
from ._core import cpu_features
from .binary import BinaryIndex, binary_quantize
from .collection import Collection, Hit, open
from .errors import CorruptIndexError, VecsiftError
from .flat import exact_search
from .hnsw import HNSWIndex

__version__ = "0.1.0"

__all__ = [
    "BinaryIndex",
    "Collection",
    "Hit",
    "open",
    "CorruptIndexError",
    "HNSWIndex",
    "VecsiftError",
    "binary_quantize",
    "cpu_features",
    "exact_search",
]
