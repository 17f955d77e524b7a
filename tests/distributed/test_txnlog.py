"""The shard's two-phase commit and recovery, without Ray: ShardServer is a plain class, and a
crash is a child process that stops with os._exit at a chosen point (its writer lock goes with it)."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from vecsift.distributed.manifest import committed_generation
from vecsift.distributed.shard import ShardServer

DIM = 8
CREATE = {"dim": DIM, "metric": "cosine"}


def _run(root, body, session="s1"):
    """Runs body in a child with `shard`, `table(n, start)` and `commit_point(gen)` defined, then crashes it."""
    code = textwrap.dedent(f"""
        import os, numpy as np, pyarrow as pa
        from vecsift.distributed.shard import ShardServer
        from vecsift.distributed.manifest import write_cluster
        root = {str(root)!r}
        def table(n, start=0):
            x = np.random.default_rng(start).standard_normal((n, {DIM})).astype(np.float32)
            return pa.table({{"id": [f"r{{i}}" for i in range(start, start + n)],
                              "vector": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), {DIM}),
                              "text": [f"word{{i}} common" for i in range(start, start + n)]}})
        def commit_point(gen):
            write_cluster(root, {{"generation": gen}})
        shard = ShardServer(root, "shard-00", {session!r}, {CREATE!r})
    """) + textwrap.dedent(body) + "\nos._exit(0)\n"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _rows(shard):
    return len(shard.col)


def test_crash_after_commit_point_rolls_forward(tmp_path):
    _run(tmp_path, """
        shard.add(table(30))
        shard.prepare(1)
        commit_point(1)   # the cluster committed generation 1; the shard dies before applying it
    """)
    assert committed_generation(tmp_path) == 1
    shard = ShardServer(tmp_path, "shard-00", "s1")  # what Ray's restart does: rerun the constructor
    assert shard.gen == 1 and _rows(shard) == 30
    assert shard.col.search(text="word7", k=1)[0].id == "r7"
    assert shard.apply(1)["rows"] == 30  # the driver's retried apply is a no-op


def test_crash_before_commit_point_changes_nothing(tmp_path):
    _run(tmp_path, """
        shard.add(table(30))
        shard.prepare(1)  # voted, but the cluster manifest never named generation 1
    """)
    _run(tmp_path, """
        # a restart in the same session keeps the ops pending: invisible, and still in the log
        assert shard.gen == 0 and len(shard.col) == 0 and len(shard.log.prepared()[1]) == 1
    """)
    fresh = ShardServer(tmp_path, "shard-00", "s2")  # a new writer session drops them
    assert fresh.gen == 0 and _rows(fresh) == 0
    assert fresh.log.pending() == [] and fresh.log.prepared() == {}
    assert fresh.prepare(1)["ops"] == 0


def test_restart_between_add_and_commit_keeps_the_rows(tmp_path):
    _run(tmp_path, """
        shard.add(table(20))
        shard.delete(["r3"], None)
        shard.add(table(5, start=100))
    """)
    shard = ShardServer(tmp_path, "shard-00", "s1")
    assert _rows(shard) == 0  # nothing visible before the commit
    assert shard.prepare(1)["ops"] == 3
    from vecsift.distributed.manifest import write_cluster

    write_cluster(str(tmp_path), {"generation": 1})
    assert shard.apply(1)["rows"] == 24
    assert "r3" not in set(shard.col.ids())


def test_crash_while_applying_is_idempotent(tmp_path):
    _run(tmp_path, """
        shard.add(table(40))
        shard.prepare(1)
        commit_point(1)
        shard.log.set_applied = lambda gen: os._exit(0)  # dies after the Collection commit, before APPLIED
        shard.apply(1)
    """)
    shard = ShardServer(tmp_path, "shard-00", "s1")
    assert shard.gen == 1
    assert _rows(shard) == 40  # applied again: upserts by id, no duplicates
    assert sorted(shard.col.ids()) == sorted(f"r{i}" for i in range(40))


def test_apply_refuses_a_generation_never_prepared(tmp_path):
    shard = ShardServer(tmp_path, "shard-00", "s1", CREATE)
    with pytest.raises(RuntimeError, match="never prepared"):
        shard.apply(1)
    assert np.isfinite(shard.started)
