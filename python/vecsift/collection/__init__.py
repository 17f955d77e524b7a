"""The Collection facade and what it is made of: snapshot, search cascade, writes and commits,
compaction, roaring filters, Arrow ingest, hits; stages/ holds the dense and sparse stages.

Public beyond the facade, for tools, a sharded collection or an audit log: Snapshot (the read
API, from Collection.snapshot()), Manifest (Collection.manifest), and the cascade as functions
of a snapshot: search_request(...) -> Request, retrieve(snapshot, request, allow) -> Lists,
fuse(request, lists); SearchStats (search(..., stats=SearchStats())); search_parts(vector, parts, k):
one query over several collections' bq indexes in two native calls (parts from
Collection._search_part; a sharded collection's node actors use it)."""
from vecsift.collection.collection import Collection, open  # noqa: A004 - the public name is vecsift.open
from vecsift.collection.embedders import (FunctionEmbedder, HashingEmbedder, SentenceTransformerEmbedder, as_embedder,
                                          embed_query, embed_texts)
from vecsift.collection.hits import Hit
from vecsift.collection.limits import DeadlineExceeded, LimitError, Limits
from vecsift.collection.parts import search_parts
from vecsift.collection.search import Lists, Request, SearchStats, fuse, retrieve
from vecsift.collection.search import request as search_request
from vecsift.collection.snapshot import Snapshot
from vecsift.storage.manifest import Manifest

__all__ = ["Collection", "DeadlineExceeded", "FunctionEmbedder", "LimitError", "Limits", "HashingEmbedder", "Hit", "Lists", "Manifest", "Request", "SearchStats",
           "SentenceTransformerEmbedder", "Snapshot", "as_embedder", "embed_query", "embed_texts", "fuse", "open",
           "retrieve", "search_parts", "search_request"]
