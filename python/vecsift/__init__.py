"""vecsift: embeddable vector search with a native SIMD core.

Layers (see docs/architecture.md):

    _core         the C++ extension (kernels, indexes, file formats); knows nothing of Python objects
    index/        standalone indexes: exact_search, BinaryIndex, HNSWIndex, IVFIndex
    text/         tokeniser, BM25Index, rrf fusion
    storage/      framing and checksums, append-only row files, the manifest, the writer lock
    collection/   the Collection facade, snapshot, search cascade, commits, filters, ingest, hits
    tools/        cli, bench, tune, datasets, reference-library adapters, progress bars
    integrations/ PostgreSQL / pgvector, LangChain, LlamaIndex (optional dependencies, imported lazily)
    distributed/  the sharded collection on Ray (optional dependency, imported lazily)

The dependency rule (checked by tests/test_layering.py): index/, text/ and storage/
never import collection/, tools/, integrations/ or distributed/; integrations/ and
distributed/ use only the public API (names exported here and in their subpackages'
__init__), never a private module.
"""
from vecsift._core import cpu_features
from vecsift import eval
from vecsift.index.binary import BinaryIndex, binary_quantize
from vecsift.text.bm25 import BM25Index
from vecsift.collection.collection import Collection, open
from vecsift.collection.hits import Hit
from vecsift.errors import CorruptIndexError, VecsiftError
from vecsift.collection.limits import DeadlineExceeded, LimitError, Limits
from vecsift.index.flat import exact_search
from vecsift.text.fusion import rrf
from vecsift.index.hnsw import HNSWIndex
from vecsift.index.quantised import QuantizedIndex
from vecsift.index.partitioned import IVFIndex

__version__ = "0.1.0"

__all__ = [
    "BM25Index",
    "BinaryIndex",
    "Collection",
    "Hit",
    "open",
    "CorruptIndexError",
    "DeadlineExceeded",
    "LimitError",
    "Limits",
    "HNSWIndex",
    "QuantizedIndex",
    "IVFIndex",
    "VecsiftError",
    "binary_quantize",
    "cpu_features",
    "eval",
    "exact_search",
    "rrf",
]
