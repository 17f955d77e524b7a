"""The Collection facade and what it is made of: snapshot, search cascade, writes and commits,
compaction, roaring filters, Arrow ingest, hits; stages/ holds the dense and sparse stages."""
from vecsift.collection.collection import Collection, open  # noqa: A004 - the public name is vecsift.open
from vecsift.collection.embedders import (FunctionEmbedder, HashingEmbedder, SentenceTransformerEmbedder, as_embedder,
                                          embed_query, embed_texts)
from vecsift.collection.hits import Hit

__all__ = ["Collection", "FunctionEmbedder", "HashingEmbedder", "Hit", "SentenceTransformerEmbedder", "as_embedder",
           "embed_query", "embed_texts", "open"]
