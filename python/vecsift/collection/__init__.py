"""The Collection facade and what it is made of: snapshot, search cascade, writes and commits,
compaction, roaring filters, Arrow ingest, hits; stages/ holds the dense and sparse stages."""
from vecsift.collection.collection import Collection, open  # noqa: A004 - the public name is vecsift.open
from vecsift.collection.hits import Hit

__all__ = ["Collection", "Hit", "open"]
