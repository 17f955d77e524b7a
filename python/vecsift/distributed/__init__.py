"""The sharded collection on Ray (optional extra `vecsift[ray]`). Uses only vecsift's public API.

    ShardedCollection   the Collection API over shards served by Ray actors (cluster.py)
    ingest_parquet      bulk ingest of Parquet files through Ray Data map_batches (ingest.py)
    SearchResult        a list of Hits that also says whether it is partial and which shards were missing
    ShardUnavailableError  a search that could not reach every shard it needed (fail closed)

Ray is imported only when a ShardedCollection is made, so importing this package does not need it.
"""
from vecsift.distributed.gather import SearchResult, ShardUnavailableError


def __getattr__(name):
    if name == "ShardedCollection":
        from vecsift.distributed.cluster import ShardedCollection

        return ShardedCollection
    if name == "ingest_parquet":
        from vecsift.distributed.ingest import ingest_parquet

        return ingest_parquet
    raise AttributeError(f"module 'vecsift.distributed' has no attribute {name!r}")


__all__ = ["SearchResult", "ShardUnavailableError", "ShardedCollection", "ingest_parquet"]
