"""Bulk ingest from Parquet through Ray Data: read, optionally embed, route, send to the shards.

    ingest_parquet(sharded, "s3://bucket/chunks/", embed=model_fn, text_column="text")

Ray Data reads the files in parallel; map_batches runs the embedding step (a
function of a list of texts returning an (n, dim) float32 array) and then the
routing step, which sends each batch's rows straight from the Ray Data worker
to the node actors holding the shards (the driver never holds the rows). Ray Data needs pandas
(`ray[data]`); without it (engine="tasks", or "auto" when Ray Data cannot be
imported) one plain Ray task per file reads it with pyarrow in batches and
runs the same two steps, so ingest needs nothing beyond Ray and pyarrow. Tenants are assigned to
shards by the driver first (one pass over the distinct tenants), so every
worker routes with the same map. Nothing is searchable until the commit at the
end (commit=False leaves it to the caller); shards log what they receive, so a
shard restarted during the ingest keeps it.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa


def _with_vectors(embed, text_column, dim):
    def run(batch: pa.Table) -> pa.Table:
        texts = [t or "" for t in batch[text_column].to_pylist()]
        vecs = np.ascontiguousarray(np.asarray(embed(texts), dtype=np.float32))
        if vecs.shape != (len(texts), dim):
            raise ValueError(f"embed returned shape {vecs.shape}, expected ({len(texts)}, {dim})")
        col = pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel(), pa.float32()), dim)
        if "vector" in batch.column_names:
            batch = batch.drop_columns(["vector"])
        return batch.append_column("vector", col)

    return run


def _router_step(nodes, group, router):
    """nodes: the primaries' node actors; group: shard -> index in nodes. One write call per node."""
    def run(batch: pa.Table) -> pa.Table:
        import ray

        ids = batch["id"].cast(pa.string()).to_pylist()
        tenants = batch["tenant"].to_pylist() if "tenant" in batch.column_names else None
        load = np.zeros(router.n, np.int64)
        shard_of = router.route(ids, tenants, load)
        per_node = {}
        for s in np.unique(shard_of).tolist():
            per_node.setdefault(group[s], {})[s] = ("add", (batch.take(pa.array(np.flatnonzero(shard_of == s))),))
        rows = {}
        for got in ray.get([nodes[g].write.remote(calls) for g, calls in per_node.items()]):
            rows.update(got)
        shards = sorted(rows)
        return pa.table({"shard": pa.array(shards, pa.int64()), "rows": pa.array([rows[s] for s in shards], pa.int64())})

    return run


def _ray_data():
    try:
        import ray.data

        return ray.data
    except ImportError:  # Ray Data imports pandas
        return None


def _file_task(ray):
    @ray.remote
    def ingest_file(path, filesystem, steps, batch_size):
        """One Parquet file read in batches, each run through the steps; the rows each shard took."""
        import pyarrow.parquet as pq

        counts = {}
        with filesystem.open_input_file(path) as f:
            for rb in pq.ParquetFile(f).iter_batches(batch_size=batch_size):
                out = pa.Table.from_batches([rb])
                for step in steps:
                    out = step(out)
                for shard, rows in zip(out["shard"].to_pylist(), out["rows"].to_pylist()):
                    counts[shard] = counts.get(shard, 0) + rows
        return counts

    return ingest_file


def ingest_parquet(sharded, paths, *, embed=None, text_column: str = "text", batch_size: int = 4096,
                   commit: bool = True, engine: str = "auto") -> int:
    """Adds every row of the Parquet file(s) `paths` to `sharded` (a ShardedCollection); returns the row count.

    The files hold Collection.add_table's columns (id, vector or text + embed, tenant, acl, ...).
    engine: "data" (Ray Data map_batches; needs pandas, `ray[data]`), "tasks" (one Ray task
    per file, pyarrow only) or "auto" (Ray Data when it can be imported)."""
    import pyarrow.dataset as pads
    import ray

    if engine not in ("auto", "data", "tasks"):
        raise ValueError(f"engine must be 'auto', 'data' or 'tasks', got {engine!r}")
    rd = _ray_data() if engine != "tasks" else None
    if engine == "data" and rd is None:
        raise ImportError('ingest_parquet(engine="data") needs Ray Data: pip install "ray[data]" (it needs pandas)')
    files = pads.dataset(paths, format="parquet")
    names = files.schema.names
    if "id" not in names:
        raise ValueError("ingest_parquet: the files have no 'id' column")
    if embed is not None:
        if text_column not in names:
            raise ValueError(f"ingest_parquet: embed needs the text column {text_column!r}")
    elif "vector" not in names:
        raise ValueError("ingest_parquet: the files have no 'vector' column (pass embed= to compute it)")
    steps = [] if embed is None else [_with_vectors(embed, text_column, sharded.dim)]
    with sharded._wlock:
        router = sharded._router
        if router.routing == "tenant" and "tenant" in names:
            import pyarrow.compute as pc

            # one column read on the driver (Ray Data's unique() is a shuffle: far slower)
            col = files.to_table(columns=["tenant"])["tenant"]
            tenants = [t for t in pc.unique(col).to_pylist() if t is not None]
            for t in sorted(map(str, tenants)):
                router.assign(t, sharded._load)  # before any worker routes, so all route alike
            if tenants:
                sharded._pending_tenants = True
        if "acl" in names:
            sharded._pending_acl = True
        steps.append(_router_step(list(sharded._nodes[0]), list(sharded._group), router))
        if rd is not None:
            ds = rd.read_parquet(paths)
            for step in steps:
                ds = ds.map_batches(step, batch_format="pyarrow", batch_size=batch_size)
            counts = [(int(c["shard"]), int(c["rows"])) for c in ds.take_all()]
        else:
            task = _file_task(ray)
            refs = [task.remote(f, files.filesystem, steps, batch_size) for f in files.files]
            try:
                got = ray.get(refs)
            except ray.exceptions.RayTaskError as exc:  # bad input (e.g. embed's shape) is the caller's
                cause = getattr(exc, "cause", None)
                if isinstance(cause, (ValueError, TypeError)):
                    raise cause from None
                raise
            counts = [(s, n) for per_file in got for s, n in per_file.items()]
        for s, n in counts:
            sharded._load[s] += n
        total = sum(n for _, n in counts)
    if commit:
        sharded.commit()
    return total
